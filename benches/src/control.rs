//! Control-plane figures: binding, IPAM, table compilation (in process, through
//! `lace-control`'s library), and the whole stack from a CNI ADD to the first packet through
//! (separate processes: two lace-forwarders, two lace-controls, lace-cni).
//!
//! | id | what | anchor |
//! |---|---|---|
//! | `bind.1000policies.us_per_pod` | one pod bound against 1,000 `NetworkBindingPolicy`s: most select other namespaces or other apps, some are CEL rules scoped to other namespaces, some pin nothing, some are for services; the deciding (`namespaceSelector`) policy last | `bind.1policy.us_per_pod`: the same pod, the deciding policy alone |
//! | `bind.1000policies_cel.us_per_pod` | the same with the seed's per-team CEL policy deciding, last | `bind.1policy.us_per_pod` |
//! | `ipam.alloc_per_s` | allocate + release pairs, `Ipam` on 10.0.0.0/16 with /24 blocks, 8 nodes, ~1,600 live leases (a ring: release the oldest, allocate a new one) | `ipam.hashmap_floor.ops_per_s`: insert + remove of the same attachment keys in a `HashMap` (the floor any lease table pays) |
//! | `ipam.shared.alloc_per_s` | the same through `SharedIpam` (mutex, generation check; no store) | as above |
//! | `ipam.persisted.alloc_per_s` | the same through `SharedIpam` with its state file (JSON, write + fsync + rename per change) in a temporary directory, as the daemon runs it | — |
//! | `compile.one_pod.{p50,p99,max}_us` | one pod added or removed on the compiled node → `Compiler::plan` (incremental) + `Compiler::apply` (diff, writes, one publication) into a real `TableWriter` on `/dev/shm`; 100 networks × 50 nodes × 20 pods (tiny under `--smoke`) | `compile.one_pod.replan_all.{p50,p99}_us`: the same changes planned with `Change::All` (no incrementality), fewer samples |
//! | `cni.add_to_reachable.{p50,p99}_ms` | the full stack, see below | `cni.reach_floor.{p50,p99}_ms`: the same probe from a pod attached long ago |
//! | `cni.add.{p50,p99}_ms`, `cni.del.p50_ms` | `lace-cni` ADD alone, DEL alone (same runs), one pod at a time | — |
//! | `cni.add.concurrent20.{p50,p99}_ms` | `lace-cni` ADD of 20 pods started at once (20 processes, as kubelet starts a burst of pods), each ADD's own time; rounds of 20 after the sequential runs | `cni.add.{p50,p99}_ms`: the same ADD one at a time, same run |
//!
//! **The stack figure** (root only). Two nodes as network namespaces joined by an underlay
//! veth pair, each running `lace-forwarder` (DPDK `net_af_packet` uplink, 4 KiB pages) and
//! `lace-control` (standalone: a temporary copy of `deploy/examples` plus this benchmark's pod
//! manifests, one shared state file) — the layout of `deploy/demo/lace-demo.sh`. A target pod is
//! attached on node-b and a resident pod on node-a; once the resident reaches the target, each
//! measured pod: a new netns; the clock starts; `lace-cni` ADD runs in node-a's namespace exactly
//! as kubelet runs it (`CNI_*` environment, network configuration with `controlSocket` on
//! stdin); then `ping -c 1 -w 2 -i 0.001` from the new pod to the target (one process that
//! sends every millisecond until the first reply); the clock stops when ping exits with that
//! reply. That interval includes starting two processes (`nsenter` + `lace-cni`, `nsenter` +
//! `ping`) — the anchor measures exactly the probe's share from a pod that has been reachable
//! all along. Then DEL (timed separately) and the netns is deleted. A pod that does not reach
//! the target within 2 s counts as 2,000 ms and is named in a note.
//!
//! The binaries are taken from the directory of the running `lace-bench` (the same target
//! directory): build them first with `cargo build --release --workspace --bins`. With
//! `LACE_BENCH_KEEP=1` the stack's directory (manifests, configurations, daemon logs) is kept.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hint::black_box;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use lace_control::api::{Direction, MatchKind, NetworkBindingPolicy, NetworkType};
use lace_control::bind::{Binding, BindingPolicies};
use lace_control::compile::{Change, CompileConfig, Compiler};
use lace_control::ipam::{
    AllocateRequest, AttachmentKey, Ipam, IpamConfig, NetworkDef, PodRef, SharedIpam,
};
use lace_control::store::Store;
use lace_control::world::{EndpointModel, NetworkModel, NodeModel, RoutingModel, World};
use lace_shared::tables::{TableWriter, TablesConfig};
use lace_shared::types::{IfName, MacAddr, NetworkId, NodeId, PortId};
use serde_json::{json, Value};

use crate::report::{
    interleaved_cycles_per_op, paired_cycles_per_op, tsc_hz, Figure, Histogram, Scale,
};

/// Figures, notes, and the figures that could not be measured (id, reason).
#[derive(Debug, Default)]
pub struct Outcome {
    /// Measured figures.
    pub figures: Vec<Figure>,
    /// Notes for the report.
    pub notes: Vec<String>,
    /// Figures not measured, with the reason (printed as `not measured: <reason>`).
    pub not_measured: Vec<(String, String)>,
}

impl Outcome {
    pub(crate) fn push(&mut self, f: Figure) -> Figure {
        self.figures.push(f.clone());
        f
    }

    /// The value of a step toward `figure`, or None with `figure` noted as not measured
    /// because `what` failed.
    pub(crate) fn step<T>(&mut self, figure: &str, what: &str, r: anyhow::Result<T>) -> Option<T> {
        r.map_err(|e| {
            self.not_measured
                .push((figure.to_owned(), format!("{what}: {e:#}")));
        })
        .ok()
    }
}

/// Timed rounds of the paired (alternating) measurements.
fn rounds(scale: &Scale) -> usize {
    if scale.smoke {
        scale.rounds
    } else {
        scale.rounds.max(11)
    }
}

/// Binding, IPAM and compiler figures (in process).
pub fn figures(scale: &Scale) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    bind(&mut out, scale).context("bind figures")?;
    ipam(&mut out, scale).context("ipam figures")?;
    compile(&mut out, scale).context("compile figures")?;
    crate::policy::figures(&mut out, scale).context("NetworkPolicy figures")?;
    Ok(out)
}

// ---- binding ---------------------------------------------------------------------------------

fn policy(name: &str, priority: usize, mut spec: Value) -> anyhow::Result<NetworkBindingPolicy> {
    spec["priority"] = json!(priority);
    serde_json::from_value(json!({
        "apiVersion": "lace-cni.io/v1alpha1",
        "kind": "NetworkBindingPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .with_context(|| format!("policy {name}"))
}

const PER_TEAM_CEL: &str = "object.metadata.namespace.startsWith('team-') ? \
     optional.of(object.metadata.namespace.substring(5)) : optional.none()";

/// 999 policies that do not decide for the bench pod, then the deciding one: a static
/// network, or the seed's per-team CEL rule when `cel_decides`. Shared with
/// `benches/benches/bind.rs`.
pub fn policy_mix(cel_decides: bool) -> anyhow::Result<Vec<NetworkBindingPolicy>> {
    let mut out = Vec::with_capacity(1000);
    for i in 0..999 {
        let spec = match i % 100 {
            0..=84 => json!({"rules": [{"network": format!("net-{i}"),
                "selector": {"namespaceSelector": {"matchLabels": {"team": format!("team-{i}")}}}}]}),
            85..=92 => json!({"matchKind": ["pod"], "rules": [{"network": format!("app-{i}"),
                "selector": {"matchLabels": {"app": format!("app-{i}")}}}]}),
            93..=96 => json!({"matchKind": ["pod"], "rules": [{"celExpression": PER_TEAM_CEL,
                "selector": {"namespaceSelector": {"matchLabels": {"team": format!("cel-{i}")}}}}]}),
            97..=98 => json!({"rules": [{"network": format!("special-{i}"),
                "selector": {"matchExpressions": [{"key": format!("special-{i}"), "operator": "Exists"}]}}]}),
            _ => json!({"matchKind": ["service"], "rules": [{"network": format!("svc-{i}")}]}),
        };
        out.push(policy(&format!("policy-{i:04}"), i, spec)?);
    }
    let last = if cel_decides {
        json!({"matchKind": ["pod"], "rules": [{"celExpression": PER_TEAM_CEL,
            "selector": {"namespaceSelector": {"matchLabels": {"team": "blue"}}}}, {"network": "default"}]})
    } else {
        json!({"rules": [{"network": "blue",
            "selector": {"namespaceSelector": {"matchLabels": {"team": "blue"}}}}]})
    };
    out.push(policy("policy-9999", 999, last)?);
    Ok(out)
}

/// The pod the binding figures bind (namespace `team-blue`, three labels, realistic spec).
pub fn bench_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-7d4b9c8f6-x2k9p",
            "namespace": "team-blue",
            "uid": "0d0c6f3e-2a5b-4c1d-9e8f-7a6b5c4d3e2f",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c8f6", "version": "v1"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2024-01-01T00:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f6"}]
        },
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "web", "image": "nginx:1.25",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
            "restartPolicy": "Always"
        }
    })
}

/// The labels of the bench pod's namespace.
pub fn bench_namespace_labels() -> BTreeMap<String, String> {
    [
        ("team", "blue"),
        ("kubernetes.io/metadata.name", "team-blue"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn bind(out: &mut Outcome, scale: &Scale) -> anyhow::Result<()> {
    let ns_labels = bench_namespace_labels();
    let pod = bench_pod();
    let mix = policy_mix(false)?;
    let many = BindingPolicies::new(&mix);
    let many_cel = BindingPolicies::new(&policy_mix(true)?);
    let one = BindingPolicies::new(&mix[999..]);
    for (name, set) in [
        ("1000policies", &many),
        ("1000policies_cel", &many_cel),
        ("1policy", &one),
    ] {
        if !set.errors().is_empty() {
            bail!("bind.{name}: policies rejected: {:?}", set.errors());
        }
        let got = set.bind(MatchKind::Pod, &pod, &ns_labels);
        if got != Binding::Network("blue".into()) {
            bail!("bind.{name}: the pod bound to {got:?}, expected network blue; no figure taken");
        }
    }
    // Binds per timed call: a few milliseconds of work per call for the 1,000-policy sets.
    let per_call: u64 = if scale.smoke { 20 } else { 200 };
    let bind_n = |set: &BindingPolicies, n: u64| {
        for _ in 0..n {
            black_box(set.bind(MatchKind::Pod, black_box(&pod), black_box(&ns_labels)));
        }
    };
    let us = |cycles: f64| cycles / tsc_hz() * 1e6;
    let r = rounds(scale);
    // Each 1,000-policy set alternates with the one-policy set, the same binds per call.
    let (many_c, one_c) = paired_cycles_per_op(
        r,
        per_call,
        || bind_n(&many, per_call),
        || bind_n(&one, per_call),
    );
    let (cel_c, _) = paired_cycles_per_op(
        r,
        per_call,
        || bind_n(&many_cel, per_call),
        || bind_n(&one, per_call),
    );
    let anchor = out.push(Figure::new("bind.1policy.us_per_pod", us(one_c), "µs/pod"));
    out.push(Figure::versus(
        "bind.1000policies.us_per_pod",
        us(many_c),
        &anchor,
    ));
    out.push(Figure::versus(
        "bind.1000policies_cel.us_per_pod",
        us(cel_c),
        &anchor,
    ));
    out.notes.push(format!(
        "bind: BindingPolicies::bind of one pod (team-blue, 3 labels) against 1,000 policies \
         (85% namespaceSelector on other teams, 8% matchLabels on other apps, 4% CEL scoped to \
         other namespaces, 2% Exists on a missing label, 1% service-only; the deciding policy \
         last: namespaceSelector, or the seed's per-team CEL rule for _cel), vs the deciding \
         policy alone; {per_call} binds per call, median of {r} alternating rounds"
    ));
    Ok(())
}

// ---- IPAM ------------------------------------------------------------------------------------

const IPAM_NODES: usize = 8;
const IPAM_LIVE_PER_NODE: usize = 200;

fn ipam_request(i: usize) -> AllocateRequest {
    AllocateRequest {
        key: AttachmentKey {
            container_id: format!("c{i:012}"),
            ifname: "eth0".into(),
        },
        network: "backend".into(),
        node: format!("node-{}", i % IPAM_NODES),
        pod: PodRef {
            namespace: "default".into(),
            name: format!("pod-{i}"),
            uid: String::new(),
        },
        identity: None,
    }
}

/// A ring of requests over IPAM-like state: `ring` live, each step releases the oldest and
/// allocates a new one.
#[derive(Debug)]
pub struct Ring {
    reqs: Vec<AllocateRequest>,
    live: usize,
    next: usize,
}

impl Ring {
    fn new() -> Ring {
        let live = IPAM_NODES * IPAM_LIVE_PER_NODE;
        Ring {
            reqs: (0..live + IPAM_NODES).map(ipam_request).collect(),
            live,
            next: 0,
        }
    }

    /// (the request to allocate, the key to release) of the next step.
    pub fn step(&mut self) -> (&AllocateRequest, &AttachmentKey) {
        let n = self.reqs.len();
        let (new, old) = ((self.next + self.live) % n, self.next % n);
        self.next = (self.next + 1) % n;
        (&self.reqs[new], &self.reqs[old].key)
    }
}

fn ipam_def() -> anyhow::Result<NetworkDef> {
    Ok(NetworkDef {
        kind: NetworkType::L3,
        v4: Some(("10.0.0.0/16".parse()?, Some(24))),
        v6: None,
    })
}

/// An IPAM with one l3 network (10.0.0.0/16, /24 blocks), 8 nodes and 1,600 live leases, and
/// the ring of requests that keeps it at that size. Shared with `benches/benches/ipam.rs`.
pub fn filled_ipam() -> anyhow::Result<(Ipam, Ring)> {
    let mut ipam = Ipam::new(IpamConfig::default())?;
    ipam.ensure_network("backend", &ipam_def()?)?;
    for n in 0..IPAM_NODES {
        ipam.ensure_node(&format!("node-{n}"))?;
    }
    let ring = Ring::new();
    for r in &ring.reqs[..ring.live] {
        ipam.allocate(r)?;
    }
    Ok((ipam, ring))
}

fn ipam(out: &mut Outcome, scale: &Scale) -> anyhow::Result<()> {
    let pairs: u64 = if scale.smoke {
        2_000
    } else if scale.quick {
        20_000
    } else {
        50_000
    };
    let r = rounds(scale);
    let (mut ipam, mut ring) = filled_ipam()?;
    let mut failure: Option<String> = None;
    let mut map: HashMap<AttachmentKey, u64> = HashMap::new();
    let mut map_ring = Ring::new();
    for req in &map_ring.reqs[..map_ring.live] {
        map.insert(req.key.clone(), 0);
    }
    let (plain, mut shared_ring) = filled_ipam()?;
    let shared = SharedIpam::in_memory(plain);
    let mut shared_failure: Option<String> = None;
    // The three contenders round-robin, so that machine noise hits them alike.
    let c = interleaved_cycles_per_op(
        r,
        &[pairs, pairs, pairs],
        &mut [
            &mut || {
                for _ in 0..pairs {
                    let (new, old) = map_ring.step();
                    map.insert(new.key.clone(), 0);
                    black_box(map.remove(old));
                }
            },
            &mut || {
                for _ in 0..pairs {
                    let (new, old) = ring.step();
                    match ipam.allocate(new) {
                        Ok(lease) => {
                            black_box(&lease);
                        }
                        Err(e) => {
                            failure.get_or_insert_with(|| e.to_string());
                        }
                    }
                    black_box(ipam.release(old));
                }
            },
            &mut || {
                for _ in 0..pairs {
                    let (new, old) = shared_ring.step();
                    if let Err(e) = shared.allocate(new) {
                        shared_failure.get_or_insert_with(|| e.to_string());
                    }
                    black_box(shared.release(old).ok());
                }
            },
        ],
    );
    let (map_c, ipam_c, shared_c) = (c[0], c[1], c[2]);
    if let Some(e) = failure.or(shared_failure) {
        bail!("ipam.alloc_per_s: an allocation failed ({e}); no figure taken");
    }
    for (what, live) in [
        ("Ipam", ipam.leases().count()),
        ("SharedIpam", shared.read(|i| i.leases().count())),
    ] {
        if live != ring.live {
            bail!(
                "ipam.alloc_per_s: {what} holds {live} live leases after the run, expected {}",
                ring.live
            );
        }
    }

    // With the store, as the daemon runs it.
    let dir = TempDir::new("lace-bench-ipam", &std::env::temp_dir())?;
    let store = Store::new(dir.0.join("state.json"));
    let persisted = SharedIpam::open(store, IpamConfig::default())?;
    persisted.ensure_network("backend", &ipam_def()?)?;
    for n in 0..IPAM_NODES {
        persisted.ensure_node(&format!("node-{n}"))?;
    }
    let mut p_ring = Ring::new();
    // The state file holds every live lease; fill it in one update, not one save per lease.
    persisted.update(|i| {
        for r in &p_ring.reqs[..p_ring.live] {
            i.allocate(r)?;
        }
        Ok(())
    })?;
    let p_pairs: u64 = if scale.smoke { 5 } else { 100 };
    let t = Instant::now();
    for _ in 0..p_pairs {
        let (new, old) = p_ring.step();
        persisted.allocate(new)?;
        persisted.release(old)?;
    }
    let persisted_rate = p_pairs as f64 / t.elapsed().as_secs_f64();

    let per_s = |cycles: f64| tsc_hz() / cycles;
    let anchor = out.push(Figure::new(
        "ipam.hashmap_floor.ops_per_s",
        per_s(map_c),
        "pairs/s",
    ));
    out.push(Figure::versus("ipam.alloc_per_s", per_s(ipam_c), &anchor));
    out.push(Figure::versus(
        "ipam.shared.alloc_per_s",
        per_s(shared_c),
        &anchor,
    ));
    out.push(Figure::new(
        "ipam.persisted.alloc_per_s",
        persisted_rate,
        "pairs/s",
    ));
    out.notes.push(format!(
        "ipam: allocate + release pairs (release the oldest of {} live leases, allocate a new \
         one) on an l3 network 10.0.0.0/16 with /24 blocks over {IPAM_NODES} nodes; \
         {pairs} pairs per round, median of {r} rounds, round-robin with the floor \
         (HashMap<AttachmentKey, u64>: insert of a cloned key + remove, same ring); \
         alloc_per_s: Ipam alone; shared: through SharedIpam's mutex, no store; persisted: SharedIpam with its \
         state file in {} (write + fsync + rename per change), {p_pairs} pairs",
        IPAM_NODES * IPAM_LIVE_PER_NODE,
        std::env::temp_dir().display()
    ));
    Ok(())
}

// ---- compiler --------------------------------------------------------------------------------

/// The compiled world's size.
#[derive(Debug, Clone, Copy)]
pub struct CompileSizes {
    /// l3 networks.
    pub networks: u32,
    /// Nodes.
    pub nodes: u32,
    /// Pods per (network, node).
    pub pods: u32,
    /// Timed one-pod changes (after `samples / 10` untimed).
    pub samples: usize,
    /// Timed one-pod changes planned with `Change::All` (the anchor).
    pub replan_samples: usize,
    /// Size of the tables region.
    pub region: u64,
}

impl CompileSizes {
    /// The sizes for a report scale (`--smoke`: tiny; otherwise 100 × 50 × 20).
    pub fn of(scale: &Scale) -> CompileSizes {
        if scale.smoke {
            CompileSizes {
                networks: 4,
                nodes: 3,
                pods: 4,
                samples: 200,
                replan_samples: 20,
                region: 32 << 20,
            }
        } else {
            CompileSizes {
                networks: 100,
                nodes: 50,
                pods: 20,
                samples: if scale.quick { 2_000 } else { 10_000 },
                replan_samples: if scale.quick { 20 } else { 100 },
                region: 512 << 20,
            }
        }
    }
}

const ME: &str = "node-1";

fn compile_key(n: u32, k: u32, i: u32) -> AttachmentKey {
    AttachmentKey {
        container_id: format!("c-{n}-{k}-{i}"),
        ifname: "eth0".into(),
    }
}

fn compile_pod(n: u32, k: u32, i: u32) -> anyhow::Result<EndpointModel> {
    Ok(EndpointModel {
        namespace: "bench".into(),
        pod: format!("pod-{n}-{k}-{i}"),
        network: format!("net-{n}"),
        node: format!("node-{k}"),
        addresses: vec![
            std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, n as u8, k as u8, (i + 2) as u8)),
            std::net::IpAddr::V6(std::net::Ipv6Addr::new(
                0xfd00,
                n as u16,
                0,
                k as u16,
                0,
                0,
                0,
                i as u16 + 2,
            )),
        ],
        mac: MacAddr([2, 0, n as u8, k as u8, 0, i as u8]),
        port: PortId(n * 100 + i + 1),
        host_iface: IfName::new(&format!("lc{n}x{i}"))
            .map_err(|e| anyhow!("interface name: {e:?}"))?,
        endpoint_id: u64::from(n) << 32 | u64::from(k) << 16 | u64::from(i),
    })
}

/// `networks` l3 networks (10.n.0.0/16 + fd00:n::/32, /24 and /64 blocks) × `nodes` nodes ×
/// `pods` pods per (network, node), and 10 bidirectional routing policies joining network
/// pairs.
fn compile_world(s: CompileSizes) -> anyhow::Result<World> {
    let mut w = World::default();
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
    }
    for n in 1..=s.networks {
        w.networks.insert(
            format!("net-{n}"),
            NetworkModel {
                name: format!("net-{n}"),
                id: NetworkId(n),
                kind: NetworkType::L3,
                v4: Some((format!("10.{n}.0.0/16").parse()?, Some(24))),
                v6: Some((format!("fd00:{n:x}::/32").parse()?, Some(64))),
                external: vec![],
                anonymous: false,
                l2: lace_control::world::L2Config::default(),
                uplinks: Vec::new(),
            },
        );
        for k in 1..=s.nodes {
            w.allocations.insert(
                (format!("net-{n}"), format!("node-{k}")),
                vec![
                    format!("10.{n}.{k}.0/24").parse()?,
                    format!("fd00:{n:x}:0:{k:x}::/64").parse()?,
                ],
            );
            for i in 0..s.pods {
                w.endpoints
                    .insert(compile_key(n, k, i), compile_pod(n, k, i)?);
            }
        }
    }
    for p in 0..(s.networks / 2).min(10) {
        w.routing.push(RoutingModel {
            name: format!("policy-{p}"),
            priority: 0,
            sources: vec![format!("net-{}", 2 * p + 1)],
            destination: format!("net-{}", 2 * p + 2),
            prefixes: vec![],
            direction: Direction::Bidirectional,
            transit: None,
            gateway: None,
        });
    }
    Ok(w)
}

pub(crate) fn shm_base() -> PathBuf {
    if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    }
}

/// A compiled world published into real tables on `/dev/shm`, changed one pod at a time.
/// Shared with `benches/benches/compile.rs`.
#[derive(Debug)]
pub struct CompileBench {
    sizes: CompileSizes,
    world: World,
    compiler: Compiler,
    turn: u32,
    // Declared before the directory: the region is unmapped before its files go.
    writer: TableWriter,
    _dir: TempDir,
}

impl CompileBench {
    /// Builds the world, compiles and publishes it once.
    pub fn new(sizes: CompileSizes) -> anyhow::Result<CompileBench> {
        let dir = TempDir::new("lace-bench-compile", &shm_base())?;
        let cfg = TablesConfig {
            dir: dir.0.clone(),
            name: "compile".into(),
            size: sizes.region,
            reader_slots: 4,
        };
        let mut writer = TableWriter::open_or_create(&cfg).context("creating the tables")?;
        let world = compile_world(sizes)?;
        let mut compiler = Compiler::new(ME, CompileConfig::default());
        let first = compiler.plan(&world, &[Change::All])?;
        compiler.apply(&mut writer, first.tables)?;
        Ok(CompileBench {
            sizes,
            world,
            compiler,
            turn: 0,
            writer,
            _dir: dir,
        })
    }

    /// Adds or removes one pod of one network on this node; plan (incremental, or
    /// `Change::All`) + apply, timed.
    pub fn one_pod(&mut self, replan_all: bool) -> anyhow::Result<Duration> {
        let nets = self.sizes.networks;
        let n = self.turn % nets + 1;
        let adding = (self.turn / nets) % 2 == 0;
        self.turn += 1;
        let k = compile_key(n, 1, self.sizes.pods);
        if adding {
            self.world
                .endpoints
                .insert(k.clone(), compile_pod(n, 1, self.sizes.pods)?);
        } else {
            self.world.endpoints.remove(&k);
        }
        let changes = if replan_all {
            [Change::All]
        } else {
            [Change::Endpoint(k)]
        };
        let t = Instant::now();
        let next = self.compiler.plan(&self.world, &changes)?;
        let st = self.compiler.apply(&mut self.writer, next.tables)?;
        let took = t.elapsed();
        if st.ports_set + st.ports_removed != 1 {
            bail!("compile.one_pod: one pod changed but the apply did {st:?}");
        }
        Ok(took)
    }
}

fn compile(out: &mut Outcome, scale: &Scale) -> anyhow::Result<()> {
    let sizes = CompileSizes::of(scale);
    let t = Instant::now();
    let mut b = CompileBench::new(sizes)?;
    let setup = t.elapsed();
    let (routes, ports) = (
        b.compiler.last().route_count(),
        b.compiler.last().ports.len(),
    );
    let endpoints = b.world.endpoints.len();
    // Whole add/remove cycles over every network, so that adds and removes are balanced.
    let cycle = 2 * sizes.networks as usize;
    let samples = sizes.samples.div_ceil(cycle) * cycle;
    for _ in 0..(samples / 10).max(cycle) {
        b.one_pod(false)?;
    }
    let mut inc = Histogram::new();
    for _ in 0..samples {
        inc.record(b.one_pod(false)?);
    }
    let mut all = Histogram::new();
    b.one_pod(true)?;
    for _ in 0..sizes.replan_samples {
        all.record(b.one_pod(true)?);
    }
    let a50 = out.push(Figure::new(
        "compile.one_pod.replan_all.p50_us",
        all.percentile_us(50.0),
        "µs",
    ));
    let a99 = out.push(Figure::new(
        "compile.one_pod.replan_all.p99_us",
        all.percentile_us(99.0),
        "µs",
    ));
    out.push(Figure::versus(
        "compile.one_pod.p50_us",
        inc.percentile_us(50.0),
        &a50,
    ));
    out.push(Figure::versus(
        "compile.one_pod.p99_us",
        inc.percentile_us(99.0),
        &a99,
    ));
    out.push(Figure::new("compile.one_pod.max_us", inc.max_us(), "µs"));
    out.notes.push(format!(
        "compile.one_pod: {} networks × {} nodes × {} pods ({} endpoints; node-1 holds {ports} \
         ports, {routes} routes; built and first applied in {:.1} s), {} bidirectional routing \
         policies; one pod of node-1 added or removed per sample → Compiler::plan \
         (Change::Endpoint) + Compiler::apply into a TableWriter on {}; {samples} samples \
         (HDR histogram) after {} untimed; replan_all: the same changes with Change::All, \
         {} samples",
        sizes.networks,
        sizes.nodes,
        sizes.pods,
        endpoints,
        setup.as_secs_f64(),
        b.world.routing.len(),
        shm_base().display(),
        (samples / 10).max(cycle),
        sizes.replan_samples,
    ));
    Ok(())
}

// ---- helpers ---------------------------------------------------------------------------------

/// A directory removed on drop.
#[derive(Debug)]
pub(crate) struct TempDir(pub(crate) PathBuf, bool);

impl TempDir {
    /// A new directory under `base`, removed on drop.
    pub(crate) fn new(prefix: &str, base: &Path) -> anyhow::Result<TempDir> {
        Self::create(prefix, base, false)
    }

    /// Like [`TempDir::new`], kept when [`KEEP_ENV`] is set.
    fn keepable(prefix: &str, base: &Path) -> anyhow::Result<TempDir> {
        Self::create(prefix, base, std::env::var_os(KEEP_ENV).is_some())
    }

    fn create(prefix: &str, base: &Path, keep: bool) -> anyhow::Result<TempDir> {
        let path = base.join(format!(
            "{prefix}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(TempDir(path, keep))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.1 {
            eprintln!("lace-bench: {KEEP_ENV} is set: kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// When set, temporary directories (the stack's manifests, configurations and daemon logs)
/// are kept, and their paths printed.
pub const KEEP_ENV: &str = "LACE_BENCH_KEEP";

// ---- the stack: ADD → first packet ---------------------------------------------------------------

/// The ids the stack figure reports, for "not measured" lines.
pub const CNI_FIGURE: &str = "cni.add_to_reachable.p99_ms";

/// Whether this process runs as root (effective uid 0), from `/proc/self/status`.
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// The directory of the running executable, where cargo puts the workspace's binaries.
fn bin_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating lace-bench's own executable")?;
    exe.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| anyhow!("{} has no parent directory", exe.display()))
}

/// Pods started at once in a concurrent round.
pub const CONCURRENT: usize = 20;

/// Concurrent rounds of [`CONCURRENT`] ADDs.
fn cni_rounds(scale: &Scale) -> usize {
    if scale.smoke {
        1
    } else if scale.quick {
        2
    } else {
        5
    }
}

/// Stack measurement sizes.
fn cni_pods(scale: &Scale) -> usize {
    if scale.smoke {
        3
    } else if scale.quick {
        20
    } else {
        100
    }
}

/// The stack figures. Never fails: what cannot be measured is returned in
/// [`Outcome::not_measured`] with the reason.
pub fn cni_figures(scale: &Scale) -> Outcome {
    let mut out = Outcome::default();
    if !is_root() {
        out.not_measured.push((
            CNI_FIGURE.to_owned(),
            "needs root (network namespaces, veth pairs, DPDK af_packet); run lace-bench as root"
                .to_owned(),
        ));
        return out;
    }
    match Stack::start().and_then(|mut stack| {
        let r = stack.measure(scale, &mut out);
        if r.is_err() {
            let logs = stack.log_tails();
            return r.map_err(|e| anyhow!("{e:#}; {logs}"));
        }
        r
    }) {
        Ok(()) => {}
        Err(e) => {
            out.figures.clear();
            out.not_measured
                .push((CNI_FIGURE.to_owned(), format!("{e:#}")));
        }
    }
    out
}

/// Nodes of the stack: (suffix, node name).
const NODES: [(&str, &str); 2] = [("a", "node-a"), ("b", "node-b")];

/// The name of the stack's node `n` (`a`, `b`).
fn node_name(n: &str) -> anyhow::Result<&'static str> {
    NODES
        .iter()
        .find(|(s, _)| *s == n)
        .map(|(_, node)| *node)
        .ok_or_else(|| anyhow!("the stack has no node {n}"))
}

/// Where the stack's controls read their objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A manifests directory (`--source standalone`): the examples and the bench's pods.
    Standalone,
    /// The fake API server (`--source kubernetes`), loaded with the same examples; the bench
    /// creates each Pod before its ADD, as the scheduler would ([`crate::k8s`]).
    Kubernetes,
}

/// The underlay between the two forwarders of a [`Stack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Underlay {
    /// The veth pair `ul-a`/`ul-b`, each end a kernel interface the forwarder takes with its
    /// packet socket (a system call per burst, the kernel's work per frame).
    Veth,
    /// DPDK's `net_memif` between the two forwarder processes (node a the server, node b the
    /// client, a socket file in the stack's directory: an abstract socket would be in node a's
    /// network namespace only): shared-memory rings, no system call and no kernel work per
    /// frame, as a NIC's descriptor rings are. The forwarders carry TCP segments across it
    /// whole (`large_frames`, ADR 0055), as a NIC with TSO and LRO would.
    Memif,
}

/// A pod attached (or being attached) through lace-cni.
#[derive(Debug)]
struct Attached {
    container: String,
    /// The node's suffix (`a`, `b`).
    node: &'static str,
    namespace: String,
    pod: String,
    /// The Pod's uid (Kubernetes mode: kubelet passes it in `CNI_ARGS`).
    uid: Option<String>,
}

/// The two-node stack: namespaces, processes and files, all removed on drop. Also the lace
/// shape of the pod-path comparison ([`crate::podpath`]).
#[derive(Debug)]
pub(crate) struct Stack {
    pub(crate) tag: String,
    pub(crate) bin: PathBuf,
    /// The fake API server (Kubernetes mode). Declared before `work`: dropped after the
    /// daemons are stopped (see `Drop`), before the directory with its kubeconfig.
    cluster: Option<crate::k8s::Cluster>,
    work: TempDir,
    /// The running daemons (lace-forwarder, lace-control of each node).
    procs: Vec<(String, Child)>,
    /// Pod namespaces still present.
    pod_netns: Vec<String>,
    /// Attachments still present.
    attached: Vec<Attached>,
    /// What joins the two forwarders.
    underlay: Underlay,
}

pub(crate) fn run_ok(cmd: &mut Command) -> anyhow::Result<String> {
    let o = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !o.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

pub(crate) fn ip(args: &[&str]) -> anyhow::Result<String> {
    run_ok(Command::new("ip").args(args))
}

impl Stack {
    pub(crate) fn node_ns(&self, n: &str) -> String {
        format!("lace-bench-{}-{n}", self.tag)
    }

    /// A standalone stack.
    pub(crate) fn start() -> anyhow::Result<Stack> {
        Self::start_with(Mode::Standalone, Underlay::Veth)
    }

    pub(crate) fn start_in(mode: Mode) -> anyhow::Result<Stack> {
        Self::start_with(mode, Underlay::Veth)
    }

    /// A standalone stack whose forwarders are joined by `underlay`.
    pub(crate) fn start_on(underlay: Underlay) -> anyhow::Result<Stack> {
        Self::start_with(Mode::Standalone, underlay)
    }

    fn start_with(mode: Mode, underlay: Underlay) -> anyhow::Result<Stack> {
        let bin = bin_dir()?;
        for b in ["lace-forwarder", "lace-control", "lace-cni"] {
            if !bin.join(b).is_file() {
                bail!(
                    "{} is missing: build the workspace's binaries first (cargo build --release \
                     --workspace --bins, the same profile as lace-bench)",
                    bin.join(b).display()
                );
            }
        }
        for tool in ["ip", "nsenter", "ping"] {
            if Command::new(tool)
                .arg("-V")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_err()
            {
                bail!("`{tool}` is not installed (iproute2, util-linux, iputils-ping)");
            }
        }
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
        if !examples.join("nodes.yaml").is_file() {
            bail!(
                "{} not found: the stack figure runs from a checkout of the repository",
                examples.display()
            );
        }
        let tag = format!("{}", std::process::id());
        let work = TempDir::keepable("lace-bench-cni", &std::env::temp_dir())?;
        let cluster = match mode {
            Mode::Standalone => None,
            Mode::Kubernetes => Some(crate::k8s::Cluster::start(&work.0, &examples)?),
        };
        let mut s = Stack {
            tag,
            bin,
            cluster,
            work,
            procs: Vec::new(),
            pod_netns: Vec::new(),
            attached: Vec::new(),
            underlay,
        };
        s.setup(&examples)?;
        Ok(s)
    }

    fn setup(&mut self, examples: &Path) -> anyhow::Result<()> {
        let (a, b) = (self.node_ns("a"), self.node_ns("b"));
        for ns in [&a, &b] {
            let _ = ip(&["netns", "del", ns]);
            ip(&["netns", "add", ns])?;
        }
        ip(&[
            "link", "add", "ul-a", "netns", &a, "type", "veth", "peer", "name", "ul-b", "netns", &b,
        ])?;
        for (n, _) in NODES {
            let ns = self.node_ns(n);
            run_ok(Command::new("ip").args([
                "netns",
                "exec",
                &ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
            ]))?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &ns, "link", "set", &format!("ul-{n}"), "up"])?;
            let _ = Command::new("ip")
                .args(["netns", "exec", &ns, "ethtool", "-K", &format!("ul-{n}")])
                .args(["tx", "off", "tso", "off", "gso", "off", "gro", "off"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }

        let manifests = self.work.0.join("manifests");
        std::fs::create_dir_all(manifests.join(".lace"))?;
        for e in std::fs::read_dir(examples)? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "yaml") {
                if let Some(name) = p.file_name() {
                    std::fs::copy(&p, manifests.join(name))
                        .with_context(|| format!("copying {}", p.display()))?;
                }
            }
        }

        for (n, _) in NODES {
            let cfg = self.work.0.join(format!("forwarder-{n}.toml"));
            // memif joins two forwarders: it carries their TCP segments whole (ADR 0055).
            let (device, large_frames) = match self.underlay {
                Underlay::Veth => (format!("ul-{n}"), false),
                Underlay::Memif => (
                    format!(
                        "net_memif0,role={},id=0,socket={},socket-abstract=no,{}",
                        if n == "a" { "server" } else { "client" },
                        self.work.0.join("underlay.memif").display(),
                        lace_forwarder::engine::MEMIF_LARGE_FRAMES
                    ),
                    true,
                ),
            };
            std::fs::write(
                &cfg,
                format!(
                    "name = \"lace-bench-{tag}-{n}\"\ntables_dir = \"/dev/shm\"\n[eal]\n\
                     memory = \"no-huge\"\nmemory_mb = 256\n[uplink]\n\
                     device = \"{device}\"\naddress = \"fd00:100::{n}\"\n\
                     mtu = 1500\nlarge_frames = {large_frames}\n[workers]\ncount = 1\n\
                     polling = \"adaptive\"\n",
                    tag = self.tag
                ),
            )?;
        }
        Ok(())
    }

    /// Starts the daemons; standalone, after writing the pod manifests (`pods` measured pods,
    /// `rounds` concurrent rounds). In Kubernetes mode [`Stack::add`] creates each Pod instead.
    pub(crate) fn launch(&mut self, pods: usize, rounds: usize) -> anyhow::Result<()> {
        if self.cluster.is_none() {
            self.write_pods(pods, rounds)?;
        }
        for (n, _) in NODES {
            let ns = self.node_ns(n);
            let f = std::fs::File::create(self.work.0.join(format!("forwarder-{n}.log")))?;
            let child = Command::new("ip")
                .args(["netns", "exec", &ns])
                .arg(self.bin.join("lace-forwarder"))
                .arg("run")
                .arg("--config")
                .arg(self.work.0.join(format!("forwarder-{n}.toml")))
                .stdin(Stdio::null())
                .stdout(f.try_clone()?)
                .stderr(f)
                .spawn()
                .context("starting lace-forwarder")?;
            self.procs.push((format!("forwarder-{n}"), child));
            if self.underlay == Underlay::Memif && n == "a" {
                // The memif client (node b) connects at start: the server's socket first.
                let socket = self.work.0.join("underlay.memif");
                let t = std::time::Instant::now();
                while !socket.exists() {
                    if t.elapsed() > Duration::from_secs(20) {
                        bail!(
                            "node a's forwarder made no memif socket {} within 20 s",
                            socket.display()
                        );
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            self.spawn_control(n)?;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for (n, _) in NODES {
            while !self.socket(n).exists() {
                self.check_alive()?;
                if Instant::now() > deadline {
                    bail!(
                        "lace-control on node-{n} did not open {} within 20 s",
                        self.socket(n).display()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Starts node `n`'s lace-control (its log appended to `control-<n>.log`): standalone in
    /// the node's namespace; in Kubernetes mode in this one, where the API server listens on
    /// 127.0.0.1 (control needs no interface of the node's: lace-cni makes the pod's veth, the
    /// forwarder reads the tables from /dev/shm).
    fn spawn_control(&mut self, n: &'static str) -> anyhow::Result<()> {
        let node = node_name(n)?;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.work.0.join(format!("control-{n}.log")))?;
        let mut cmd = if self.cluster.is_some() {
            Command::new(self.bin.join("lace-control"))
        } else {
            let mut ip = Command::new("ip");
            ip.args(["netns", "exec", &self.node_ns(n)])
                .arg(self.bin.join("lace-control"));
            ip
        };
        cmd.args(["run", "--node", node]);
        match &self.cluster {
            None => {
                let manifests = self.manifests();
                cmd.arg("--manifests")
                    .arg(&manifests)
                    .arg("--state")
                    .arg(manifests.join(".lace/state.json"));
            }
            Some(c) => {
                cmd.args(["--source", "kubernetes", "--kubeconfig"])
                    .arg(&c.kubeconfig)
                    .arg("--state-dir")
                    .arg(self.state_dir(n));
            }
        }
        let child = cmd
            .arg("--socket")
            .arg(self.socket(n))
            .args(["--tables-dir", "/dev/shm", "--tables-name"])
            .arg(format!("lace-bench-{}-{n}", self.tag))
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .context("starting lace-control")?;
        self.procs.push((format!("control-{n}"), child));
        Ok(())
    }

    /// Node `n`'s control's own files (status, attachment marks).
    fn state_dir(&self, n: &str) -> PathBuf {
        match &self.cluster {
            None => self.manifests().join(".lace"),
            Some(_) => self.work.0.join(format!("state-{n}")),
        }
    }

    /// The fake API server (Kubernetes mode only).
    pub(crate) fn cluster(&self) -> anyhow::Result<&crate::k8s::Cluster> {
        self.cluster
            .as_ref()
            .ok_or_else(|| anyhow!("a standalone stack has no API server"))
    }

    /// Node `n`'s status file, once `done` holds for it (read every 50 ms, at most `within`).
    pub(crate) fn wait_status(
        &mut self,
        n: &str,
        within: Duration,
        done: impl Fn(&lace_control::daemon::status::StatusFile) -> bool,
    ) -> anyhow::Result<lace_control::daemon::status::StatusFile> {
        let path = self.state_dir(n).join(format!("status-node-{n}.yaml"));
        let deadline = Instant::now() + within;
        loop {
            let read = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| serde_yaml::from_str(&t).ok());
            if let Some(s) = read {
                if done(&s) {
                    return Ok(s);
                }
            }
            self.check_alive()?;
            if Instant::now() > deadline {
                bail!(
                    "{} did not reach the expected state within {} s",
                    path.display(),
                    within.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of node `n`'s lace-control (standalone, `ip netns exec` execs it: the same
    /// process).
    pub(crate) fn control_pid(&self, n: &str) -> anyhow::Result<u32> {
        let name = format!("control-{n}");
        let pid = self
            .procs
            .iter()
            .find(|(p, _)| *p == name)
            .map(|(_, c)| c.id())
            .ok_or_else(|| anyhow!("{name} is not running"))?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() != "lace-control" {
            bail!(
                "process {pid} of {name} is {:?}, not lace-control",
                comm.trim()
            );
        }
        Ok(pid)
    }

    /// Waits until node `n`'s control is idle: less than 2% of a CPU over 500 ms (at most
    /// `within`); how long that took.
    pub(crate) fn settle_cpu(&mut self, n: &str, within: Duration) -> anyhow::Result<Duration> {
        let pid = self.control_pid(n)?;
        let start = Instant::now();
        let window = Duration::from_millis(500);
        loop {
            let before = crate::sys::cpu_seconds(pid)?;
            std::thread::sleep(window);
            self.check_alive()?;
            let used = crate::sys::cpu_seconds(pid)? - before;
            if used < 0.02 * window.as_secs_f64() || start.elapsed() > within {
                return Ok(start.elapsed());
            }
        }
    }

    /// Stops node `n`'s control (SIGTERM) and starts it again; the time from its start until
    /// its socket answers Status ok (at most `within`). Its status file is removed in between,
    /// so that [`Stack::wait_status`] reads the restarted control's.
    pub(crate) fn restart_control(
        &mut self,
        n: &'static str,
        within: Duration,
    ) -> anyhow::Result<Duration> {
        let name = format!("control-{n}");
        let i = self
            .procs
            .iter()
            .position(|(p, _)| *p == name)
            .ok_or_else(|| anyhow!("{name} is not running"))?;
        let (_, mut child) = self.procs.remove(i);
        Self::stop(&name, &mut child);
        let status = self.state_dir(n).join(format!("status-node-{n}.yaml"));
        std::fs::remove_file(&status)
            .with_context(|| format!("removing {} before the restart", status.display()))?;
        let client = lace_control::cni::client::ControlClient::new(
            self.socket(n),
            Duration::from_millis(200),
        );
        let t = Instant::now();
        self.spawn_control(n)?;
        loop {
            // Not listening yet, or "try again later" until it has read its source.
            let answer = client.call(
                &lace_control::proto::Request::Status,
                Duration::from_secs(5),
            );
            if let Ok(lace_control::proto::Response::Ok) = answer {
                return Ok(t.elapsed());
            }
            self.check_alive()?;
            if t.elapsed() > within {
                bail!(
                    "{name} was not ready within {} s of its restart",
                    within.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Writes the pod manifests of the standalone stack (before lace-control starts, as the
    /// API server would hold them before kubelet's ADD).
    fn write_pods(&self, pods: usize, rounds: usize) -> anyhow::Result<()> {
        let manifests = self.work.0.join("manifests");
        let mut yaml = String::new();
        let mut pod = |name: &str, node: &str| {
            let _ = write!(
                yaml,
                "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: \
                 team-blue\n  labels:\n    tier: backend\nspec:\n  nodeName: {node}\n  \
                 containers:\n  - name: app\n    image: registry.k8s.io/pause:3.10\n"
            );
        };
        pod("bench-target", "node-b");
        pod("bench-resident", "node-a");
        pod("bench-warmup", "node-a");
        for i in 0..pods {
            pod(&format!("bench-{i}"), "node-a");
        }
        for r in 0..rounds {
            for j in 0..CONCURRENT {
                pod(&format!("bench-c{r}-{j}"), "node-a");
            }
        }
        std::fs::write(manifests.join("bench-pods.yaml"), yaml)?;
        Ok(())
    }

    fn socket(&self, n: &str) -> PathBuf {
        self.work.0.join(format!("control-{n}.sock"))
    }

    /// The manifests directory both controls read (write more before [`Stack::launch`]).
    pub(crate) fn manifests(&self) -> PathBuf {
        self.work.0.join("manifests")
    }

    /// The table set of node `n` (`a`, `b`) in /dev/shm.
    pub(crate) fn tables(&self, n: &str) -> TablesConfig {
        TablesConfig {
            dir: PathBuf::from("/dev/shm"),
            name: format!("lace-bench-{}-{n}", self.tag),
            ..TablesConfig::new("unused")
        }
    }

    pub(crate) fn check_alive(&mut self) -> anyhow::Result<()> {
        for (name, c) in &mut self.procs {
            if let Some(st) = c.try_wait()? {
                bail!("{name} exited ({st})");
            }
        }
        Ok(())
    }

    /// The last lines of every daemon's log, for error messages.
    pub(crate) fn log_tails(&self) -> String {
        let mut s = String::new();
        for (n, _) in NODES {
            for what in ["forwarder", "control"] {
                let p = self.work.0.join(format!("{what}-{n}.log"));
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(4)..].join(" | ");
                if !tail.is_empty() {
                    let _ = write!(s, "[{what}-{n}: {tail}] ");
                }
            }
        }
        if s.is_empty() {
            "the daemons logged nothing".to_owned()
        } else {
            format!("daemon logs: {}", s.trim_end())
        }
    }

    pub(crate) fn pod_ns(&self, pod: &str) -> String {
        format!("lace-bench-{}-{pod}", self.tag)
    }

    /// One `lace-cni` call for `a` in its node's namespace, as kubelet makes it; returns stdout.
    fn cni(&self, cmd: &str, a: &Attached) -> anyhow::Result<String> {
        self.cni_env().call(cmd, a)
    }

    /// What a `lace-cni` call needs of the stack (shareable across threads, unlike the stack
    /// with its API server).
    fn cni_env(&self) -> CniEnv<'_> {
        CniEnv {
            bin: &self.bin,
            node_ns: [self.node_ns("a"), self.node_ns("b")],
            sockets: [self.socket("a"), self.socket("b")],
            pod_ns_prefix: format!("lace-bench-{}-", self.tag),
        }
    }

    /// Creates the pod's netns and ADDs it on node `n` (`team-blue`, label `tier: backend`;
    /// in Kubernetes mode the Pod is created in the API first, as the scheduler binds it
    /// before kubelet's ADD); returns (its IPv4 address, ADD time).
    pub(crate) fn add(&mut self, n: &'static str, pod: &str) -> anyhow::Result<(String, Duration)> {
        let uid = match &self.cluster {
            None => None,
            Some(c) => Some(c.create_pod(pod, node_name(n)?)?),
        };
        self.add_in(n, "team-blue", pod, uid)
    }

    /// ADDs a pod that exists in the API (Kubernetes mode) with its uid, as kubelet does.
    pub(crate) fn add_pod(
        &mut self,
        n: &'static str,
        namespace: &str,
        pod: &str,
        uid: &str,
    ) -> anyhow::Result<(String, Duration)> {
        self.add_in(n, namespace, pod, Some(uid.to_owned()))
    }

    fn add_in(
        &mut self,
        n: &'static str,
        namespace: &str,
        pod: &str,
        uid: Option<String>,
    ) -> anyhow::Result<(String, Duration)> {
        let ns = self.pod_ns(pod);
        ip(&["netns", "add", &ns])?;
        self.pod_netns.push(ns);
        let a = Attached {
            container: format!("lace-bench-{}-{pod}", self.tag),
            node: n,
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
            uid,
        };
        let t = Instant::now();
        let result = self.cni("ADD", &a);
        let took = t.elapsed();
        // Recorded even on failure: a failed ADD may have left something for DEL to remove.
        self.attached.push(a);
        let v: Value = serde_json::from_str(&result?).context("lace-cni ADD's result")?;
        let addr = v["ips"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["address"].as_str())
            .find(|a| a.contains('.'))
            .and_then(|a| a.split('/').next())
            .ok_or_else(|| anyhow!("lace-cni ADD for {pod} returned no IPv4 address: {v}"))?;
        Ok((addr.to_owned(), took))
    }

    /// ADDs `pods` on node `n` all at once (one `lace-cni` process each, started together);
    /// returns each ADD's time. Their namespaces are made before, untimed.
    fn add_at_once(&mut self, n: &'static str, pods: &[String]) -> anyhow::Result<Vec<Duration>> {
        let first = self.attached.len();
        for pod in pods {
            let ns = self.pod_ns(pod);
            ip(&["netns", "add", &ns])?;
            self.pod_netns.push(ns);
            let uid = match &self.cluster {
                None => None,
                Some(c) => Some(c.create_pod(pod, node_name(n)?)?),
            };
            self.attached.push(Attached {
                container: format!("lace-bench-{}-{pod}", self.tag),
                node: n,
                namespace: "team-blue".to_owned(),
                pod: pod.clone(),
                uid,
            });
        }
        let env = self.cni_env();
        let env = &env;
        let results: Vec<anyhow::Result<Duration>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self.attached[first..]
                .iter()
                .map(|a| {
                    scope.spawn(move || {
                        let t = Instant::now();
                        env.call("ADD", a)?;
                        Ok(t.elapsed())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow!("an ADD thread panicked")))
                })
                .collect()
        });
        results.into_iter().collect()
    }

    /// DELs the pod and removes its netns; returns the DEL time.
    pub(crate) fn del(&mut self, pod: &str) -> anyhow::Result<Duration> {
        let i = self
            .attached
            .iter()
            .position(|a| a.pod == pod)
            .ok_or_else(|| anyhow!("{pod} is not attached"))?;
        let a = self.attached.remove(i);
        let t = Instant::now();
        self.cni("DEL", &a)?;
        let took = t.elapsed();
        let ns = self.pod_ns(pod);
        ip(&["netns", "del", &ns])?;
        self.pod_netns.retain(|p| *p != ns);
        Ok(took)
    }

    /// Pings `dst` from `pod` every millisecond until the first reply (at most `deadline_s`);
    /// whether a reply came.
    pub(crate) fn probe(&self, pod: &str, dst: &str, deadline_s: u32) -> anyhow::Result<bool> {
        let st = Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{}", self.pod_ns(pod)))
            .args(["ping", "-n", "-q", "-c", "1", "-i", "0.001", "-w"])
            .arg(deadline_s.to_string())
            .arg(dst)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running ping")?;
        Ok(st.success())
    }

    /// The `cni.*` figures (`k8s.cni.*` and `k8s.api_requests_per_pod` in Kubernetes mode).
    pub(crate) fn measure(&mut self, scale: &Scale, out: &mut Outcome) -> anyhow::Result<()> {
        let n = cni_pods(scale);
        let prefix = if self.cluster.is_some() { "k8s." } else { "" };
        let rounds = cni_rounds(scale);
        self.launch(n, rounds)?;
        let (target, _) = self
            .add("b", "bench-target")
            .context("attaching the target pod")?;
        let (_, _) = self
            .add("a", "bench-resident")
            .context("attaching the resident pod")?;
        // Cross-node convergence (node-a's block reaching node-b, both forwarders up) is not
        // what is measured: wait for it once.
        if !self.probe("bench-resident", &target, 20)? {
            self.check_alive()?;
            bail!("the resident pod on node-a never reached the target {target} on node-b (20 s)");
        }
        let deadline_ms = 2000.0;
        let (mut reach, mut floor, mut add, mut del) = (
            Histogram::new(),
            Histogram::new(),
            Histogram::new(),
            Histogram::new(),
        );
        let mut late = Vec::new();
        // Kubernetes mode: requests at the API server from each Pod's creation until it
        // answers (add windows), and over the whole loop (DELs and probes included).
        let requests = |s: &Self| s.cluster.as_ref().map(crate::k8s::Cluster::requests);
        let mut in_windows: BTreeMap<String, u64> = BTreeMap::new();
        let mut loop_start = None;
        // One untimed round first (first-use costs: page cache, binaries, lazy setup).
        for i in 0..=n {
            let pod = if i == 0 {
                "bench-warmup".to_owned()
            } else {
                format!("bench-{}", i - 1)
            };
            if i == 1 {
                loop_start = requests(&*self);
            }
            let before = requests(&*self);
            let t0 = Instant::now();
            let (_, add_took) = self.add("a", &pod)?;
            let reached = self.probe(&pod, &target, 2)?;
            let took = t0.elapsed();
            if let (Some((_, b)), Some((_, a)), true) = (before, requests(&*self), i > 0) {
                for (verb, count) in a {
                    let d = count - b.get(&verb).copied().unwrap_or(0);
                    *in_windows.entry(verb).or_default() += d;
                }
            }
            let t1 = Instant::now();
            let floor_ok = self.probe("bench-resident", &target, 2)?;
            let floor_took = t1.elapsed();
            let del_took = self.del(&pod)?;
            if i == 0 {
                continue;
            }
            if !floor_ok {
                self.check_alive()?;
                bail!("the resident pod stopped reaching the target during the run");
            }
            if reached {
                reach.record(took);
            } else {
                late.push(pod.clone());
                reach.record(Duration::from_secs_f64(deadline_ms / 1000.0));
            }
            floor.record(floor_took);
            add.record(add_took);
            del.record(del_took);
        }
        if let (Some((start, start_verbs)), Some((end, end_verbs))) = (loop_start, requests(&*self))
        {
            let per_pod = in_windows.values().sum::<u64>() as f64 / n as f64;
            out.push(
                Figure::new(crate::k8s::REQUESTS_FIGURE, per_pod, "requests")
                    .better(crate::report::Direction::LowerIsBetter),
            );
            let whole: BTreeMap<&String, u64> = end_verbs
                .iter()
                .map(|(v, c)| (v, c - start_verbs.get(v).copied().unwrap_or(0)))
                .filter(|(_, c)| *c > 0)
                .collect();
            out.notes.push(format!(
                "{}: requests at the fake API server (both controls) from each Pod's creation \
                 until its first ping reply, summed over {n} pods: {in_windows:?}; over the whole \
                 loop (creation, ADD, ping, reach_floor, DEL; the Pods stay): {} = {:.1} per pod \
                 {whole:?}",
                crate::k8s::REQUESTS_FIGURE,
                end - start,
                (end - start) as f64 / n as f64,
            ));
        }
        // Concurrent rounds: 20 ADDs started at once, each timed on its own.
        let mut concurrent = Histogram::new();
        for r in 0..rounds {
            let pods: Vec<String> = (0..CONCURRENT).map(|j| format!("bench-c{r}-{j}")).collect();
            for took in self
                .add_at_once("a", &pods)
                .with_context(|| format!("concurrent round {r}"))?
            {
                concurrent.record(took);
            }
            for pod in &pods {
                self.del(pod)?;
            }
        }
        let ms = |h: &Histogram, p: f64| h.percentile_us(p) / 1000.0;
        let id = |s: &str| format!("{prefix}{s}");
        let f50 = out.push(Figure::new(
            id("cni.reach_floor.p50_ms"),
            ms(&floor, 50.0),
            "ms",
        ));
        let f99 = out.push(Figure::new(
            id("cni.reach_floor.p99_ms"),
            ms(&floor, 99.0),
            "ms",
        ));
        out.push(Figure::versus(
            id("cni.add_to_reachable.p50_ms"),
            ms(&reach, 50.0),
            &f50,
        ));
        out.push(Figure::versus(id(CNI_FIGURE), ms(&reach, 99.0), &f99));
        let a50 = out.push(Figure::new(id("cni.add.p50_ms"), ms(&add, 50.0), "ms"));
        let a99 = out.push(Figure::new(id("cni.add.p99_ms"), ms(&add, 99.0), "ms"));
        out.push(Figure::versus(
            id("cni.add.concurrent20.p50_ms"),
            ms(&concurrent, 50.0),
            &a50,
        ));
        out.push(Figure::versus(
            id("cni.add.concurrent20.p99_ms"),
            ms(&concurrent, 99.0),
            &a99,
        ));
        out.push(Figure::new(id("cni.del.p50_ms"), ms(&del, 50.0), "ms"));
        out.push(Figure::new(id("cni.pods"), n as f64, "pods"));
        if self.cluster.is_none() {
            out.notes.push(format!(
                "cni: {n} pods on node-a, each: netns, then the clock: `nsenter --net=<node-a> \
                 lace-cni` ADD (CNI_* environment, config with controlSocket on stdin), then \
                 `nsenter --net=<pod> ping -c1 -i 0.001 -w 2` to the target pod on node-b \
                 (across the SRv6 underlay) until its first reply; reach_floor: the same ping \
                 from the resident pod, right after; then DEL and netns removal (untimed but for \
                 cni.del); two lace-forwarders (af_packet uplinks, 4 KiB pages) and two \
                 lace-controls on a copy of deploy/examples, started before the figures, unpinned"
            ));
        } else {
            out.notes.push(format!(
                "k8s.cni: the cni stack with both lace-controls on `--source kubernetes` against \
                 lace-kube-fake (TLS, bearer token, kubeconfig; CRDs and deploy/examples loaded \
                 in it); {n} pods on node-a, each: netns, then the clock: the Pod created in the \
                 API (spec.nodeName node-a, as the scheduler binds it), `lace-cni` ADD with \
                 kubelet's CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_INFRA_CONTAINER_ID, \
                 K8S_POD_UID; control answers once its watch has delivered the Pod), then the same \
                 ping as cni.add_to_reachable until its first reply; DEL untimed, the Pod stays"
            ));
        }
        out.notes.push(format!(
            "{prefix}cni.add.concurrent20: {rounds} round(s) of {CONCURRENT} `lace-cni` ADDs started \
             together on node-a (one process each, as kubelet starts a burst of pods); each ADD \
             timed from its own start to its result; lace-control answers them from its event \
             loop's batches (no lock held across a reconcile), then DEL, untimed"
        ));
        if !late.is_empty() {
            out.notes.push(format!(
                "cni: {} of {n} pods did not reach the target within 2 s (counted as 2,000 ms): {}",
                late.len(),
                late.join(", ")
            ));
        }
        Ok(())
    }

    /// Sends SIGTERM to a daemon and waits up to 5 s before killing it.
    fn stop(name: &str, child: &mut Child) {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    eprintln!("lace-bench: {name} did not stop on SIGTERM; killing it");
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
            }
        }
    }
}

/// What a `lace-cni` call needs of the [`Stack`].
#[derive(Debug)]
struct CniEnv<'a> {
    bin: &'a Path,
    /// Node namespaces of `a`, `b`.
    node_ns: [String; 2],
    /// Control sockets of `a`, `b`.
    sockets: [PathBuf; 2],
    pod_ns_prefix: String,
}

impl CniEnv<'_> {
    /// One `lace-cni` call for `a` in its node's namespace, as kubelet makes it; returns stdout.
    fn call(&self, cmd: &str, a: &Attached) -> anyhow::Result<String> {
        let (pod, container) = (a.pod.as_str(), a.container.as_str());
        let k = usize::from(a.node != "a");
        let conf = json!({
            "cniVersion": "1.1.0",
            "name": "lace",
            "type": "lace-cni",
            "controlSocket": self.sockets[k],
        })
        .to_string();
        let mut child = Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{}", self.node_ns[k]))
            .arg(self.bin.join("lace-cni"))
            .env("CNI_COMMAND", cmd)
            .env("CNI_CONTAINERID", container)
            .env(
                "CNI_NETNS",
                format!("/var/run/netns/{}{pod}", self.pod_ns_prefix),
            )
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", self.bin)
            .env(
                "CNI_ARGS",
                match &a.uid {
                    None => format!("K8S_POD_NAMESPACE={};K8S_POD_NAME={pod}", a.namespace),
                    Some(uid) => format!(
                        "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={pod};\
                         K8S_POD_INFRA_CONTAINER_ID={container};K8S_POD_UID={uid}",
                        a.namespace
                    ),
                },
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting lace-cni")?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(conf.as_bytes())?;
        }
        let o = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        if !o.status.success() {
            bail!(
                "lace-cni {cmd} for {pod} failed ({}): {} {}",
                o.status,
                stdout.trim(),
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        Ok(stdout)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for a in std::mem::take(&mut self.attached) {
            let _ = self.cni("DEL", &a);
        }
        for ns in std::mem::take(&mut self.pod_netns) {
            let _ = ip(&["netns", "del", &ns]);
        }
        // Controls first (they write the tables), then the forwarders.
        let mut procs = std::mem::take(&mut self.procs);
        procs.sort_by_key(|(name, _)| !name.starts_with("control"));
        for (name, child) in &mut procs {
            Self::stop(name, child);
        }
        for (n, _) in NODES {
            let _ = ip(&["netns", "del", &self.node_ns(n)]);
        }
        // The daemons name their files `lace-<tables name>.*`.
        let prefix = format!("lace-lace-bench-{}-", self.tag);
        if let Ok(dir) = std::fs::read_dir("/dev/shm") {
            for e in dir.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}
