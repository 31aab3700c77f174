//! NetworkPolicy compilation figures (in process, through `lace-control`'s compiler), on a
//! kube-vnet-shaped cluster (seed 004): every namespace has a deny-all ingress baseline
//! (`kube-vnet.base`), and every virtual network a membership policy in each member namespace
//! that lets members in from members (`kube-vnet.mem.<home>.<vnet>`: pods labelled
//! `kube-vnet.system/net.<home>.<vnet>` ∈ {both, ingress} accept from pods of the member
//! namespaces labelled ∈ {both, egress}). Pods come in deployments of identical replicas; each
//! deployment joins up to three of its namespace's virtual networks, with a direction.
//!
//! | id | what | anchor |
//! |---|---|---|
//! | `policy.compile.10k_pods_1k_policies.ms` | a fresh `Compiler` compiles node-1's tables (plan with `Change::All`) and applies them into a fresh `TableWriter` on `/dev/shm`: 10,000 pods in 100 namespaces over 20 nodes (500 on node-1), 100 baselines + 900 membership policies (300 virtual networks × 3 member namespaces) | `policy.compile.1k_pods_1k_policies.ms`: the same with 1,000 pods (the same policies; 10 per namespace) |
//! | `policy.compile.no_policies.ms` | the same 10,000 pods without policies (what the routes, ports and SIDs cost) | — |
//! | `policy.one_pod_label.{p50,p99}_us` | one pod on another node changes its membership label (a peer of node-1's policies) → incremental plan + apply | — |

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use k8s_openapi::api::networking::v1::NetworkPolicySpec;
use lace_control::api::validate::network_policy_model;
use lace_control::api::NetworkType;
use lace_control::compile::{Change, CompileConfig, Compiler};
use lace_control::world::{
    AttachmentKey, BoundPolicy, EndpointModel, NamespacedName, NetworkModel, NodeModel, PodModel,
    World,
};
use lace_shared::tables::{TableWriter, TablesConfig};
use lace_shared::types::{IfName, MacAddr, NetworkId, NodeId, PortId};
use serde_json::json;

use crate::control::Outcome;
use crate::report::{Figure, Histogram, Scale};

/// The shape of a kube-vnet cluster.
#[derive(Debug, Clone, Copy)]
pub struct VnetSizes {
    /// Pods in all.
    pub pods: u32,
    /// Namespaces.
    pub namespaces: u32,
    /// Deployments per namespace (their replicas share labels).
    pub deployments: u32,
    /// Virtual networks.
    pub vnets: u32,
    /// Member namespaces per virtual network (each gets a membership policy).
    pub members: u32,
    /// Nodes (pods are spread over them; node-1 is compiled).
    pub nodes: u32,
    /// Whether the policies exist at all.
    pub policies: bool,
}

impl VnetSizes {
    /// 10,000 pods, 100 namespaces, 1,000 policies, 20 nodes.
    pub const FULL: VnetSizes = VnetSizes {
        pods: 10_000,
        namespaces: 100,
        deployments: 10,
        vnets: 300,
        members: 3,
        nodes: 20,
        policies: true,
    };

    /// Policies in all: a baseline per namespace and a membership policy per (vnet, member).
    pub fn policy_count(&self) -> u32 {
        if self.policies {
            self.namespaces + self.vnets * self.members
        } else {
            0
        }
    }
}

const ME: &str = "node-1";
const NET: &str = "cluster";

fn ns_name(n: u32) -> String {
    format!("team-{n}")
}

/// The member namespaces of virtual network `v` (its home first).
fn members(s: &VnetSizes, v: u32) -> Vec<u32> {
    (0..s.members)
        .map(|j| (v * 7 + j * 13) % s.namespaces)
        .collect()
}

fn vnet_label(s: &VnetSizes, v: u32) -> String {
    format!(
        "kube-vnet.system/net.{}.vnet-{v}",
        ns_name(members(s, v)[0])
    )
}

fn spec(v: serde_json::Value) -> anyhow::Result<NetworkPolicySpec> {
    serde_json::from_value(v).context("policy spec")
}

fn bound(ns: &str, name: &str, s: NetworkPolicySpec) -> anyhow::Result<BoundPolicy> {
    Ok(BoundPolicy {
        model: network_policy_model(ns, name, &s).map_err(|e| anyhow!("{e}"))?,
        network: None,
    })
}

/// The kube-vnet-shaped world (see the module docs).
pub fn vnet_world(s: &VnetSizes) -> anyhow::Result<World> {
    let mut w = World::default();
    w.networks.insert(
        NET.into(),
        NetworkModel {
            name: NET.into(),
            id: NetworkId(1),
            kind: NetworkType::L3,
            v4: Some(("10.64.0.0/12".parse()?, Some(22))),
            v6: Some(("fd64::/48".parse()?, Some(64))),
            external: vec![],
            anonymous: false,
            l2: Default::default(),
            uplinks: Vec::new(),
        },
    );
    for k in 1..=s.nodes {
        w.nodes.insert(
            format!("node-{k}"),
            NodeModel {
                name: format!("node-{k}"),
                id: NodeId(k),
                locator: format!("fc00:0:{k:x}::/48").parse()?,
                underlay: format!("fd00::{k:x}").parse()?,
                addresses: Vec::new(),
                labels: Default::default(),
            },
        );
        w.allocations.insert(
            (NET.into(), format!("node-{k}")),
            vec![
                format!("10.{}.{}.0/22", 64 + k / 64, (k % 64) * 4).parse()?,
                format!("fd64:0:0:{k:x}::/64").parse()?,
            ],
        );
    }
    // Which vnets each namespace is a member of.
    let mut ns_vnets: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for v in 0..s.vnets {
        for m in members(s, v) {
            ns_vnets.entry(m).or_default().push(v);
        }
    }
    let per_ns = s.pods / s.namespaces;
    let mut node_slot: BTreeMap<u32, u32> = BTreeMap::new();
    for n in 0..s.namespaces {
        let ns = ns_name(n);
        w.namespaces
            .insert(ns.clone(), BTreeMap::from([("team".into(), ns.clone())]));
        let vnets = ns_vnets.get(&n).cloned().unwrap_or_default();
        for p in 0..per_ns {
            let d = p % s.deployments;
            let mut labels = BTreeMap::from([("app".to_string(), format!("app-{d}"))]);
            // Deployment d joins up to three of the namespace's vnets, with a direction.
            for (j, v) in vnets.iter().enumerate() {
                if (d + j as u32) % 4 != 3 && (j as u32) < 3 {
                    let dir = ["both", "ingress", "egress"][((d + j as u32) % 3) as usize];
                    labels.insert(vnet_label(s, *v), dir.into());
                }
            }
            let name = format!("app-{d}-{p}");
            let i = n * per_ns + p;
            let k = i % s.nodes + 1;
            let slot = node_slot.entry(k).or_insert(0);
            *slot += 1;
            let host = *slot + 1;
            let key = AttachmentKey {
                container_id: format!("c-{n}-{p}"),
                ifname: "eth0".into(),
            };
            let base4 = u32::from(std::net::Ipv4Addr::new(
                10,
                (64 + k / 64) as u8,
                ((k % 64) * 4) as u8,
                0,
            ));
            w.endpoints.insert(
                key,
                EndpointModel {
                    namespace: ns.clone(),
                    pod: name.clone(),
                    network: NET.into(),
                    node: format!("node-{k}"),
                    addresses: vec![
                        std::net::IpAddr::V4((base4 + host).into()),
                        std::net::IpAddr::V6(std::net::Ipv6Addr::new(
                            0xfd64,
                            0,
                            0,
                            k as u16,
                            0,
                            0,
                            0,
                            host as u16,
                        )),
                    ],
                    mac: MacAddr([2, 0, 0, (k & 0xff) as u8, (host >> 8) as u8, host as u8]),
                    port: PortId(*slot),
                    host_iface: IfName::new(&format!("lv{}", *slot))
                        .map_err(|e| anyhow!("interface name: {e:?}"))?,
                    endpoint_id: u64::from(i) + 1,
                },
            );
            w.pods.insert(
                NamespacedName::new(ns.clone(), name),
                PodModel {
                    labels,
                    ports: vec![],
                },
            );
        }
        if s.policies {
            let b = bound(
                &ns,
                "kube-vnet.base",
                spec(json!({"podSelector": {}, "policyTypes": ["Ingress"]}))?,
            )?;
            w.network_policies
                .insert(NamespacedName::new(ns.clone(), "kube-vnet.base"), b);
        }
    }
    if s.policies {
        for v in 0..s.vnets {
            let label = vnet_label(s, v);
            let ms: Vec<String> = members(s, v).into_iter().map(ns_name).collect();
            for m in &ms {
                let name = format!("kube-vnet.mem.{}.vnet-{v}", ms[0]);
                let p = bound(
                    m,
                    &name,
                    spec(json!({
                        "podSelector": {"matchExpressions": [
                            {"key": label, "operator": "In", "values": ["both", "ingress"]}]},
                        "policyTypes": ["Ingress"],
                        "ingress": [{"from": [{
                            "namespaceSelector": {"matchExpressions": [
                                {"key": "kubernetes.io/metadata.name", "operator": "In",
                                 "values": ms}]},
                            "podSelector": {"matchExpressions": [
                                {"key": label, "operator": "In", "values": ["both", "egress"]}]},
                        }]}],
                    }))?,
                )?;
                w.network_policies
                    .insert(NamespacedName::new(m.clone(), name), p);
            }
        }
    }
    Ok(w)
}

/// Fresh tables in `dir` (removed with the directory).
fn writer(dir: &Path, name: &str) -> anyhow::Result<TableWriter> {
    TableWriter::create(&TablesConfig {
        dir: dir.to_path_buf(),
        name: name.into(),
        size: 1 << 30,
        reader_slots: 4,
    })
    .context("creating the tables")
}

/// One full compilation of node-1's tables into fresh tables: (plan, plan + apply), and what
/// it produced (ports with a policy set, peer prefixes, sets, decisions).
pub fn full_compile(
    world: &World,
    dir: &Path,
    name: &str,
) -> anyhow::Result<(Duration, Duration, [usize; 4])> {
    let mut w = writer(dir, name)?;
    let t = Instant::now();
    let mut c = Compiler::new(ME, CompileConfig::default());
    let next = c.plan(world, &[Change::All])?;
    let planned = t.elapsed();
    let p = &next.tables;
    let shape = [
        p.ports.values().filter(|x| x.policy.0 != 0).count(),
        p.policies.values().map(|t| t.peers.len()).sum(),
        p.policies.values().map(|t| t.sets.len()).sum(),
        p.policies
            .values()
            .flat_map(|t| t.sets.values())
            .map(|s| s.decisions.len())
            .sum(),
    ];
    c.apply(&mut w, next.tables)?;
    let all = t.elapsed();
    drop(w);
    let _ = std::fs::remove_file(dir.join(format!("lace-{name}.tables")));
    let _ = std::fs::remove_file(dir.join(format!("lace-{name}.qsbr")));
    Ok((planned, all, shape))
}

fn median_ms(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

/// The NetworkPolicy figures.
pub fn figures(out: &mut Outcome, scale: &Scale) -> anyhow::Result<()> {
    let dir = crate::control::TempDir::new("lace-bench-policy", &crate::control::shm_base())?;
    let (full, small) = if scale.smoke {
        (
            VnetSizes {
                pods: 1_000,
                namespaces: 20,
                vnets: 30,
                nodes: 4,
                ..VnetSizes::FULL
            },
            VnetSizes {
                pods: 100,
                namespaces: 20,
                vnets: 30,
                nodes: 4,
                ..VnetSizes::FULL
            },
        )
    } else {
        (
            VnetSizes::FULL,
            VnetSizes {
                pods: 1_000,
                ..VnetSizes::FULL
            },
        )
    };
    let rounds = if scale.smoke { 3 } else { scale.rounds.max(7) };
    let run = |s: &VnetSizes| -> anyhow::Result<(Vec<Duration>, Vec<Duration>, [usize; 4])> {
        let world = vnet_world(s)?;
        let (mut plans, mut alls) = (Vec::new(), Vec::new());
        let mut shape = [0; 4];
        for r in 0..rounds {
            let (p, a, sh) = full_compile(&world, &dir.0, &format!("policy-{r}"))?;
            plans.push(p);
            alls.push(a);
            shape = sh;
        }
        Ok((plans, alls, shape))
    };
    // Interleave nothing: each size's rounds run back to back, the small (anchor) first.
    let (small_plan, small_all, small_shape) = run(&small)?;
    let (full_plan, full_all, full_shape) = run(&full)?;
    let (none_plan, none_all, _) = run(&VnetSizes {
        policies: false,
        ..full
    })?;
    let anchor = out.push(Figure::new(
        "policy.compile.1k_pods_1k_policies.ms",
        median_ms(small_all),
        "ms",
    ));
    out.push(Figure::versus(
        "policy.compile.10k_pods_1k_policies.ms",
        median_ms(full_all),
        &anchor,
    ));
    out.push(Figure::new(
        "policy.compile.no_policies.ms",
        median_ms(none_all),
        "ms",
    ));
    out.notes.push(format!(
        "policy.compile: kube-vnet-shaped, {} pods / {} namespaces / {} deployments per \
         namespace / {} policies ({} vnets × {} members + baselines) over {} nodes; node-1's \
         tables: {} ports with a policy set, {} peer prefixes, {} policy sets, {} decisions; \
         plan alone {:.1} ms (median of {rounds}), plan + apply into a fresh TableWriter on \
         /dev/shm as the figure; without policies plan {:.1} ms; 1k-pod anchor: {} ports with \
         sets, {} peer prefixes, {} sets, {} decisions, plan {:.1} ms",
        full.pods,
        full.namespaces,
        full.deployments,
        full.policy_count(),
        full.vnets,
        full.members,
        full.nodes,
        full_shape[0],
        full_shape[1],
        full_shape[2],
        full_shape[3],
        median_ms(full_plan),
        median_ms(none_plan),
        small_shape[0],
        small_shape[1],
        small_shape[2],
        small_shape[3],
        median_ms(small_plan),
    ));
    one_pod_label(out, &full, scale)?;
    Ok(())
}

/// A kube-vnet-shaped world compiled for node-1 and published into real tables, changed one
/// pod label at a time: a pod of another node toggles one membership between `both` and
/// `ingress` (a peer of node-1's policies: its class changes). Shared with
/// `benches/benches/policy.rs`.
#[derive(Debug)]
pub struct LabelBench {
    world: World,
    compiler: Compiler,
    movers: Vec<NamespacedName>,
    turn: usize,
    // Declared before the directory: the region is unmapped before its files go.
    writer: TableWriter,
    _dir: crate::control::TempDir,
}

impl LabelBench {
    /// Builds the world, compiles and publishes it once.
    pub fn new(s: &VnetSizes) -> anyhow::Result<LabelBench> {
        let dir =
            crate::control::TempDir::new("lace-bench-policy-inc", &crate::control::shm_base())?;
        let world = vnet_world(s)?;
        let mut writer = writer(&dir.0, "policy-inc")?;
        let mut compiler = Compiler::new(ME, CompileConfig::default());
        let first = compiler.plan(&world, &[Change::All])?;
        compiler.apply(&mut writer, first.tables)?;
        // Pods of other nodes that are members of some vnet.
        let movers: Vec<NamespacedName> = world
            .endpoints
            .values()
            .filter(|e| e.node != ME)
            .map(|e| NamespacedName::new(e.namespace.clone(), e.pod.clone()))
            .filter(|k| world.pods[k].labels.len() > 1)
            .take(64)
            .collect();
        if movers.is_empty() {
            return Err(anyhow!("no pod of another node is a vnet member"));
        }
        Ok(LabelBench {
            world,
            compiler,
            movers,
            turn: 0,
            writer,
            _dir: dir,
        })
    }

    /// One label change; plan (incremental) + apply, timed.
    pub fn one_pod_label(&mut self) -> anyhow::Result<Duration> {
        let k = self.movers[self.turn % self.movers.len()].clone();
        self.turn += 1;
        let labels = &mut self
            .world
            .pods
            .get_mut(&k)
            .ok_or_else(|| anyhow!("pod {k} vanished"))?
            .labels;
        let key = labels
            .keys()
            .find(|l| l.starts_with("kube-vnet"))
            .cloned()
            .ok_or_else(|| anyhow!("pod {k} has no membership"))?;
        let v = labels.get_mut(&key).expect("found above");
        *v = if v == "both" { "ingress" } else { "both" }.into();
        let t = Instant::now();
        let next = self.compiler.plan(&self.world, &[Change::Pod(k)])?;
        self.compiler.apply(&mut self.writer, next.tables)?;
        Ok(t.elapsed())
    }
}

/// The incremental figure (see [`LabelBench`]).
fn one_pod_label(out: &mut Outcome, s: &VnetSizes, scale: &Scale) -> anyhow::Result<()> {
    let mut b = LabelBench::new(s)?;
    let samples = if scale.smoke { 50 } else { 2_000 };
    for _ in 0..samples / 10 {
        b.one_pod_label()?;
    }
    let mut h = Histogram::new();
    for _ in 0..samples {
        h.record(b.one_pod_label()?);
    }
    out.push(Figure::new(
        "policy.one_pod_label.p50_us",
        h.percentile_us(50.0),
        "µs",
    ));
    out.push(Figure::new(
        "policy.one_pod_label.p99_us",
        h.percentile_us(99.0),
        "µs",
    ));
    Ok(())
}
