//! Kubernetes mode's allocation at cluster scale, simulated: many nodes' allocation stores
//! (`lace_control::daemon::cluster_state::ClusterState` — the real allocation code, kube-rs
//! client, watches and conditional writes; no forwarder, no CNI plugin) against one fake API
//! server (`lace-kube-fake`), pods churning. Each simulated node is a thread with its own
//! store, as each node runs its own control.
//!
//! | id | what | anchor |
//! |---|---|---|
//! | `k8s.add.{p50,p99}_ms.<N>nodes` | one pod ADD's allocation — one `mutate` with the allocate step, as one CNI batch, with its conditional writes — while every one of N nodes adds [`PODS_PER_NODE`] pods, then churns (releases one of its pods and adds another, [`CHURN`] times), all at once | `k8s.add.{p50,p99}_ms.1node`: the same, one node alone |
//! | `k8s.api_writes_per_pod_add` | writes (create, update, patch) at the API server per pod added, over the N-node fill phase (an endpoint per pod, a block per network and node, a node record update per endpoint-id reservation, writes redone after conflicts) | — |
//! | `k8s.idle_requests_per_s` | requests other than watches per node per second, while the N nodes' stores sit idle for [`IDLE`] after the churn, each refreshed every 200 ms as control's loop does | — |
//!
//! Before the timed phases each node registers the networks and itself (Claims: every node's
//! control writes its own node's; the networks' are written by the first and adopted by the
//! others; control does that once, at start). The pods use [`NETWORKS`] l3
//! networks round-robin (so each node takes a /26 block in each).

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use lace_control::api::NetworkType;
use lace_control::daemon::cluster_state::ClusterState;
use lace_control::daemon::control::IpamStore;
use lace_control::ipam::{AllocateRequest, AttachmentKey, IpamConfig, NetworkDef, PodRef};
use lace_control::source::kubernetes::KubernetesConfig;
use lace_kube_fake::FakeApiServer;
use serde_json::json;

use crate::control::Outcome;
use crate::report::{Direction, Figure, Scale};

/// The ADD latency figure at scale (its p50 twin is `k8s.add.p50_ms.<N>nodes`).
pub fn add_figure(nodes: usize) -> String {
    format!("k8s.add.p99_ms.{nodes}nodes")
}
/// Writes per pod ADD.
pub const WRITES_FIGURE: &str = "k8s.api_writes_per_pod_add";
/// Idle requests per node per second.
pub const IDLE_FIGURE: &str = "k8s.idle_requests_per_s";

/// Simulated nodes by default.
pub const NODES: usize = 30;
/// The node count issue 24's ADD target is set at (100 nodes, 30 pods each).
pub const TARGET_NODES: usize = 100;
/// Pods each node adds.
pub const PODS_PER_NODE: usize = 30;
/// Release-and-add rounds per node after the fill.
pub const CHURN: usize = 10;
/// The l3 networks the pods use.
pub const NETWORKS: usize = 3;
/// How long the stores sit idle for the idle figure.
pub const IDLE: Duration = Duration::from_secs(10);
/// How often an idle store is refreshed (control's loop tick).
const TICK: Duration = Duration::from_millis(200);
/// The namespace control is given (`--namespace`).
const NAMESPACE: &str = "lace-system";
/// The namespace of the pods.
const PODS: &str = "churn";

/// The shape of one run.
#[derive(Debug, Clone, Copy)]
struct Shape {
    nodes: usize,
    pods: usize,
    churn: usize,
    idle: Duration,
}

/// What one run measured.
#[derive(Debug, Default)]
struct Run {
    /// Every ADD's allocation time (fill and churn), in ms.
    adds: Vec<f64>,
    /// Pods added in the fill phase, and the writes the API server took meanwhile.
    filled: usize,
    fill_writes: u64,
    /// The fill phase's requests by verb.
    fill_verbs: std::collections::BTreeMap<String, u64>,
    /// The fill phase's writes to each of [`WRITTEN`].
    fill_writes_of: [u64; WRITTEN.len()],
    /// Requests other than watches while idle, and how long.
    idle_requests: u64,
    idle: Duration,
    /// Writes redone after a conflict, over all nodes.
    conflicts: u64,
    /// The fill and churn phases' wall time, and the CPU time this process (every simulated
    /// node and the fake API server) used meanwhile.
    busy: Duration,
    cpu_s: f64,
    /// Of that CPU time: the simulated nodes' threads (stores and their watches), and the
    /// fake API server's.
    nodes_cpu_s: f64,
    server_cpu_s: f64,
}

/// CPU seconds so far of the simulated nodes' threads (each store's, named after its node,
/// and its watch thread) and of the fake API server's.
fn split_cpu() -> anyhow::Result<(f64, f64)> {
    let by_name = crate::sys::thread_cpu_seconds().context("reading the threads' CPU times")?;
    let sum = |f: &dyn Fn(&str) -> bool| -> f64 {
        by_name.iter().filter(|(n, _)| f(n)).map(|(_, s)| s).sum()
    };
    Ok((
        sum(&|n| n.starts_with("sim-") || n == "ipam-watch"),
        sum(&|n| n.starts_with("kube-fake")),
    ))
}

fn network(i: usize) -> String {
    format!("net{i}")
}

fn node(i: usize) -> String {
    format!("sim-{i:03}")
}

fn def(i: usize) -> NetworkDef {
    NetworkDef {
        kind: NetworkType::L3,
        v4: Some((
            format!("10.{}.0.0/16", 100 + i)
                .parse()
                .expect("a valid prefix"),
            Some(26),
        )),
        v6: None,
    }
}

fn request(node: &str, i: usize) -> AllocateRequest {
    AllocateRequest {
        key: AttachmentKey {
            container_id: format!("{node}-c{i}"),
            ifname: "eth0".into(),
        },
        network: network(i % NETWORKS),
        node: node.into(),
        pod: PodRef {
            namespace: PODS.into(),
            name: format!("{node}-p{i}"),
            uid: String::new(),
        },
        identity: None,
    }
}

/// The resources whose writes the note splits the fill's by.
const WRITTEN: [&str; 4] = ["claims", "allocations", "networkendpoints", "neighbors"];

/// The writes (create, update, patch) among requests counted by verb.
fn write_count(by_verb: &std::collections::BTreeMap<String, u64>) -> u64 {
    ["create", "update", "patch"]
        .iter()
        .map(|v| by_verb.get(*v).copied().unwrap_or(0))
        .sum()
}

fn writes(api: &FakeApiServer) -> u64 {
    write_count(&api.requests())
}

/// Writes so far to each of [`WRITTEN`].
fn writes_by_resource(api: &FakeApiServer) -> [u64; WRITTEN.len()] {
    WRITTEN.map(|plural| write_count(&api.requests_of(plural)))
}

fn not_watches(api: &FakeApiServer) -> u64 {
    api.requests()
        .iter()
        .filter(|(verb, _)| *verb != "watch")
        .map(|(_, n)| n)
        .sum()
}

/// A fake API server with lace's CRDs, the namespaces and a Node per simulated node (their
/// uids own the blocks), none of it counted as requests.
fn cluster(nodes: usize, dir: &Path) -> anyhow::Result<(FakeApiServer, KubernetesConfig)> {
    let api = FakeApiServer::start_new().context("starting the fake API server")?;
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig)?;
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    let mut objects = crate::k8s::yaml_dir(&crds)?;
    for ns in [NAMESPACE, PODS] {
        objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    for i in 0..nodes {
        objects.push(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node(i)}}));
    }
    api.create_objects(objects)
        .context("loading the CRDs, namespaces and nodes into the fake API server")?;
    let kube = KubernetesConfig {
        kubeconfig: Some(kubeconfig),
        node: String::new(),
    };
    Ok((api, kube))
}

/// Runs `f` unless an earlier phase failed, then waits twice for every party at `phases`: at
/// the phase's end, and for the next phase's start once the main thread has read the counters
/// between the two. Each thread reaches every barrier whatever happened to it.
fn phase(
    failed: &mut Option<anyhow::Error>,
    phases: &Barrier,
    f: impl FnOnce() -> anyhow::Result<()>,
) {
    if failed.is_none() {
        if let Err(e) = f() {
            *failed = Some(e);
        }
    }
    phases.wait();
    phases.wait();
}

/// One node's part: open, register, then each phase between the barriers.
fn simulate(
    kube: KubernetesConfig,
    shape: Shape,
    phases: &Barrier,
) -> anyhow::Result<(Vec<f64>, u64)> {
    let name = kube.node.clone();
    let mut failed = None;
    let mut store = None;
    phase(&mut failed, phases, || {
        store = Some(
            ClusterState::open(&kube, NAMESPACE, IpamConfig::default())
                .with_context(|| format!("{name}: opening its store"))?,
        );
        Ok(())
    });
    let defs: Vec<(String, NetworkDef)> = (0..NETWORKS).map(|i| (network(i), def(i))).collect();
    let mut adds = Vec::with_capacity(shape.pods + shape.churn);
    let add = |store: &mut ClusterState, adds: &mut Vec<f64>, i: usize| -> anyhow::Result<()> {
        let req = request(&name, i);
        let t = Instant::now();
        store
            .mutate(|ipam| ipam.allocate(&req))
            .with_context(|| format!("{name}: ADD of pod {i}"))?;
        adds.push(t.elapsed().as_secs_f64() * 1e3);
        Ok(())
    };
    let opened = || anyhow!("{name}: no store");
    phase(&mut failed, phases, || {
        let s = store.as_mut().ok_or_else(opened)?;
        s.mutate(|ipam| {
            for (n, d) in &defs {
                ipam.ensure_network(n, d)?;
            }
            ipam.ensure_node(&name)
        })
        .with_context(|| format!("{name}: registering the networks and the node"))?;
        Ok(())
    });
    phase(&mut failed, phases, || {
        let s = store.as_mut().ok_or_else(opened)?;
        (0..shape.pods).try_for_each(|i| add(s, &mut adds, i))
    });
    phase(&mut failed, phases, || {
        let s = store.as_mut().ok_or_else(opened)?;
        (0..shape.churn).try_for_each(|r| {
            let key = request(&name, r).key;
            s.mutate(|ipam| Ok(ipam.release(&key)))
                .with_context(|| format!("{name}: DEL of pod {r}"))?;
            add(s, &mut adds, shape.pods + r)
        })
    });
    // Idle: refreshed as control's loop does, and nothing else.
    phase(&mut failed, phases, || {
        let s = store.as_mut().ok_or_else(opened)?;
        let end = Instant::now() + shape.idle;
        while Instant::now() < end {
            s.refresh()
                .with_context(|| format!("{name}: refreshing while idle"))?;
            std::thread::sleep(TICK);
        }
        Ok(())
    });
    phases.wait();
    match (failed, store) {
        (Some(e), _) => Err(e),
        (None, Some(s)) => Ok((adds, s.conflicts())),
        (None, None) => Err(opened()),
    }
}

fn run(shape: Shape) -> anyhow::Result<Run> {
    let dir = crate::control::TempDir::new("lace-bench-k8s-scale", &std::env::temp_dir())?;
    let (api, kube) = cluster(shape.nodes, &dir.0)?;
    // Opened, registered, filled, churned, idle: two barriers each (the counters are read
    // between them), then done.
    let phases = Arc::new(Barrier::new(shape.nodes + 1));
    let threads: Vec<_> = (0..shape.nodes)
        .map(|i| {
            let kube = KubernetesConfig {
                node: node(i),
                ..kube.clone()
            };
            let phases = phases.clone();
            std::thread::Builder::new()
                .name(node(i))
                .spawn(move || simulate(kube, shape, &phases))
        })
        .collect::<Result<_, _>>()
        .context("starting the simulated nodes' threads")?;
    let mut out = Run::default();
    phases.wait(); // opened
    phases.wait();
    phases.wait(); // registered
    let busy = Instant::now();
    let cpu =
        crate::sys::cpu_seconds(std::process::id()).context("reading this process's CPU time")?;
    let (nodes_cpu, server_cpu) = split_cpu()?;
    let before = writes(&api);
    let before_of = writes_by_resource(&api);
    let verbs = api.requests();
    phases.wait(); // the fill starts
    phases.wait(); // filled
    out.fill_writes = writes(&api) - before;
    let after_of = writes_by_resource(&api);
    out.fill_writes_of = std::array::from_fn(|i| after_of[i] - before_of[i]);
    out.fill_verbs = api
        .requests()
        .into_iter()
        .map(|(v, n)| {
            let was = verbs.get(&v).copied().unwrap_or(0);
            (v, n - was)
        })
        .collect();
    out.filled = shape.nodes * shape.pods;
    phases.wait(); // the churn starts
    phases.wait(); // churned
    out.busy = busy.elapsed();
    out.cpu_s = crate::sys::cpu_seconds(std::process::id())
        .context("reading this process's CPU time")?
        - cpu;
    let (n, sv) = split_cpu()?;
    (out.nodes_cpu_s, out.server_cpu_s) = (n - nodes_cpu, sv - server_cpu);
    let before = not_watches(&api);
    phases.wait(); // idle starts
    let t = Instant::now();
    phases.wait(); // idle
    out.idle = t.elapsed();
    out.idle_requests = not_watches(&api) - before;
    phases.wait();
    phases.wait(); // done
    let mut errors = Vec::new();
    for t in threads {
        match t.join() {
            Ok(Ok((adds, conflicts))) => {
                out.adds.extend(adds);
                out.conflicts += conflicts;
            }
            Ok(Err(e)) => errors.push(format!("{e:#}")),
            Err(_) => errors.push("a simulated node's thread panicked".to_owned()),
        }
    }
    if let Some(e) = errors.first() {
        return Err(anyhow!(
            "{} of {} nodes failed; first: {e}",
            errors.len(),
            shape.nodes
        ));
    }
    if out.adds.len() != shape.nodes * (shape.pods + shape.churn) {
        return Err(anyhow!(
            "{} ADDs measured, {} expected",
            out.adds.len(),
            shape.nodes * (shape.pods + shape.churn)
        ));
    }
    Ok(out)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The simulated nodes of a run: `asked`, else [`NODES`] (10 under `--smoke`).
pub fn nodes(scale: &Scale, asked: Option<usize>) -> usize {
    asked.unwrap_or(if scale.smoke { 10 } else { NODES }).max(1)
}

/// The figures with `nodes(scale, asked)` nodes (see the module docs). Never fails: what
/// cannot be measured is returned in [`Outcome::not_measured`] with the reason.
pub fn figures(scale: &Scale, asked: Option<usize>) -> Outcome {
    let mut out = Outcome::default();
    let nodes = nodes(scale, asked);
    let idle = if scale.smoke {
        Duration::from_secs(2)
    } else {
        IDLE
    };
    let shape = Shape {
        nodes,
        pods: PODS_PER_NODE,
        churn: CHURN,
        idle,
    };
    let one = Shape { nodes: 1, ..shape };
    let ids = [add_figure(nodes), WRITES_FIGURE.into(), IDLE_FIGURE.into()];
    let result = run(one).and_then(|alone| Ok((alone, run(shape)?)));
    let (alone, many) = match result {
        Ok(r) => r,
        Err(e) => {
            for id in ids {
                out.not_measured.push((id, format!("{e:#}")));
            }
            return out;
        }
    };
    let sorted = |r: &Run| {
        let mut v = r.adds.clone();
        v.sort_by(f64::total_cmp);
        v
    };
    let (a, m) = (sorted(&alone), sorted(&many));
    for (q, tag) in [(0.5, "p50"), (0.99, "p99")] {
        let anchor = Figure::new(format!("k8s.add.{tag}_ms.1node"), quantile(&a, q), "ms");
        out.push(anchor.clone());
        out.push(Figure::versus(
            format!("k8s.add.{tag}_ms.{nodes}nodes"),
            quantile(&m, q),
            &anchor,
        ));
    }
    out.push(
        Figure::new(
            WRITES_FIGURE,
            many.fill_writes as f64 / many.filled as f64,
            "writes/pod",
        )
        .better(Direction::LowerIsBetter),
    );
    out.push(
        Figure::new(
            IDLE_FIGURE,
            many.idle_requests as f64 / (nodes as f64 * many.idle.as_secs_f64()),
            "requests/s/node",
        )
        .better(Direction::LowerIsBetter),
    );
    out.notes.push(format!(
        "k8s.add.*: {nodes} simulated nodes (ClusterState each: the real allocation code and \
         kube-rs client, no forwarder) against lace-kube-fake, {PODS_PER_NODE} pods each over \
         {NETWORKS} l3 networks, then {CHURN} release+add rounds each, all at once; {} ADDs \
         timed, {} writes redone after a conflict; the fill's requests by verb {:?}, its writes \
         by resource {:?}; fill and churn {:.1} s, using {:.2} of the machine's {} CPUs (every \
         node's store, its watches and the fake API server share them: a real node has its own), \
         {:.1} CPU-s the nodes' threads ({:.1}% of a CPU per node), {:.1} CPU-s the fake API \
         server's; idle {:.1} s with {} requests beyond watches",
        m.len(),
        many.conflicts,
        many.fill_verbs,
        WRITTEN
            .iter()
            .zip(many.fill_writes_of)
            .collect::<std::collections::BTreeMap<_, _>>(),
        many.busy.as_secs_f64(),
        many.cpu_s / many.busy.as_secs_f64().max(1e-9),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        many.nodes_cpu_s,
        100.0 * many.nodes_cpu_s / (nodes as f64 * many.busy.as_secs_f64().max(1e-9)),
        many.server_cpu_s,
        many.idle.as_secs_f64(),
        many.idle_requests
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 51.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
    }

    #[test]
    fn every_pod_of_a_node_has_its_own_attachment_and_the_networks_alternate() {
        let a: Vec<AllocateRequest> = (0..6).map(|i| request("sim-000", i)).collect();
        let keys: std::collections::BTreeSet<_> = a.iter().map(|r| r.key.clone()).collect();
        assert_eq!(keys.len(), 6);
        let nets: Vec<&str> = a.iter().map(|r| r.network.as_str()).collect();
        assert_eq!(nets, ["net0", "net1", "net2", "net0", "net1", "net2"]);
        assert_ne!(request("sim-000", 0).key, request("sim-001", 0).key);
    }
}
