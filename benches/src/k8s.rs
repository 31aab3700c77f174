//! Kubernetes-mode figures: the two-node stack of [`crate::control`] with both
//! `lace-control`s reading the fake API server (`lace-kube-fake`, TLS and a bearer token through
//! a kubeconfig, the real kube-rs client) instead of a manifests directory, and control at
//! cluster scale.
//!
//! | id | what | anchor |
//! |---|---|---|
//! | `k8s.cni.add_to_reachable.{p50,p99}_ms` | as `cni.add_to_reachable`, but the bench plays the scheduler and kubelet: the clock starts, the Pod (`spec.nodeName: node-a`) is created in the API, `lace-cni` ADD runs with kubelet's `CNI_ARGS` (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`, `K8S_POD_UID`), then the same ping until the first reply | `cni.add_to_reachable.{p50,p99}_ms`: the standalone figure, same run |
//! | `k8s.cni.reach_floor.*`, `k8s.cni.add.*`, `k8s.cni.del.p50_ms`, `k8s.cni.add.concurrent20.*` | as their `cni.*` namesakes, in Kubernetes mode | as theirs |
//! | `k8s.api_requests_per_pod` | requests both controls make to the API server per pod, from the Pod's creation until it answers ping (counted at the fake API server) | — |
//! | `k8s.control.rss_mib` | node-a's `lace-control` resident set (`VmRSS`, its tables on /dev/shm included) once synced and idle with [`LOAD_PODS`] Pods and [`LOAD_NETWORKS`] Networks in the API (pods over [`LOAD_NODES`] nodes, node-a's share attached): the larger of `.load_arriving` (control started before the load, which arrived through its watches) and `.started_loaded` (restarted with the load there, as on every rollout) | — |
//! | `k8s.resync_s` | that control restarted (SIGTERM, started again): from its start until its socket answers `Status` (control has listed every kind and compiled its tables; before that it answers "try again later") | — |
//!
//! The load ([`load_objects`]): [`LOAD_NETWORKS`] l3 Networks `n0000`… (IPv4 only, /20 each,
//! /26 node blocks), one Namespace `team-<network>` each (the examples' per-team CEL binding
//! policy binds its pods to that network), [`LOAD_NODES`] − 2 more Nodes beside node-a and
//! node-b, and [`LOAD_PODS`] Pods spread round-robin over the nodes and the namespaces (node-a
//! gets its 1/[`LOAD_NODES`] share, each pod in another network). Objects are put in the fake's
//! store directly ([`lace_kube_fake::FakeApiServer::create_objects`]: no HTTP, not counted),
//! and served to control by list and watch as any others. The other nodes run no control: their
//! blocks and endpoints are absent from the API (which control does not watch for l3 networks
//! anyway: it reads Allocations, one per node block, and its own endpoints).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use lace_kube_fake::FakeApiServer;
use serde_json::{json, Value};

use crate::control::{is_root, Mode, Outcome, Stack, CNI_FIGURE};
use crate::report::{Figure, Scale};

/// The id of the ADD-to-reachable figure in Kubernetes mode.
pub const REACH_FIGURE: &str = "k8s.cni.add_to_reachable.p99_ms";
/// API requests per pod.
pub const REQUESTS_FIGURE: &str = "k8s.api_requests_per_pod";
/// Control's resident set at cluster scale.
pub const RSS_FIGURE: &str = "k8s.control.rss_mib";
/// Control's restart to ready at cluster scale.
pub const RESYNC_FIGURE: &str = "k8s.resync_s";

/// Pods in the API for the scale figures.
pub const LOAD_PODS: usize = 10_000;
/// Networks in the API for the scale figures.
pub const LOAD_NETWORKS: usize = 1_000;
/// Nodes the load's pods are spread over (node-a and node-b among them).
pub const LOAD_NODES: usize = 100;

/// The fake API server of a Kubernetes-mode stack and its kubeconfig.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) api: FakeApiServer,
    pub(crate) kubeconfig: PathBuf,
    /// Networks of the examples.
    pub(crate) example_networks: usize,
}

impl Cluster {
    /// A fake API server with lace's CRDs and every object of `examples` (the `*.yaml` files,
    /// as the standalone stack's manifests directory has them; Namespaces first), plus the
    /// namespaces control and the examples need (`lace-system`, `default`).
    pub(crate) fn start(work: &Path, examples: &Path) -> anyhow::Result<Cluster> {
        let api = FakeApiServer::start_new().context("starting the fake API server")?;
        let kubeconfig = work.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig)?;
        let crds = examples.join("../crds");
        let mut objects = yaml_dir(&crds)?;
        let mut rest = yaml_dir(examples)?;
        // Namespaces before what lives in them.
        rest.sort_by_key(|o| o["kind"] != "Namespace");
        objects.push(namespace("lace-system", &BTreeMap::new()));
        objects.push(namespace("default", &BTreeMap::new()));
        let example_networks = rest.iter().filter(|o| o["kind"] == "Network").count();
        objects.extend(rest);
        api.create_objects(objects)
            .context("loading the CRDs and deploy/examples into the fake API server")?;
        Ok(Cluster {
            api,
            kubeconfig,
            example_networks,
        })
    }

    /// Creates `pod` (`team-blue`, label `tier: backend`, on `node`) as the scheduler leaves it;
    /// its uid.
    pub(crate) fn create_pod(&self, pod: &str, node: &str) -> anyhow::Result<String> {
        let created =
            self.api
                .create_objects([pod_object("team-blue", pod, node, Some("backend"))])?;
        created
            .first()
            .and_then(|o| o["metadata"]["uid"].as_str())
            .map(String::from)
            .ok_or_else(|| anyhow!("the created Pod {pod} has no uid"))
    }

    /// Requests served so far, in total and by verb.
    pub(crate) fn requests(&self) -> (u64, BTreeMap<String, u64>) {
        let by_verb = self.api.requests();
        (by_verb.values().sum(), by_verb)
    }
}

/// Every document of every `*.yaml` file of `dir` (sorted by file name), as JSON.
pub(crate) fn yaml_dir(dir: &Path) -> anyhow::Result<Vec<Value>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        out.extend(yaml_docs(&text).with_context(|| format!("parsing {}", f.display()))?);
    }
    Ok(out)
}

/// The documents of a multi-document YAML text (empty ones left out), as JSON.
pub fn yaml_docs(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

fn namespace(name: &str, labels: &BTreeMap<&str, String>) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels}})
}

fn pod_object(namespace: &str, name: &str, node: &str, tier: Option<&str>) -> Value {
    let labels: BTreeMap<&str, &str> = tier.map(|t| ("tier", t)).into_iter().collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"nodeName": node,
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
    })
}

/// The size of a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// Pods.
    pub pods: usize,
    /// Networks (one namespace each).
    pub networks: usize,
    /// Nodes, node-a and node-b included.
    pub nodes: usize,
}

impl Load {
    /// [`LOAD_PODS`], [`LOAD_NETWORKS`], [`LOAD_NODES`]; a small one under `--smoke`.
    pub fn for_scale(scale: &Scale) -> Load {
        if scale.smoke {
            Load {
                pods: 200,
                networks: 20,
                nodes: 10,
            }
        } else {
            Load {
                pods: LOAD_PODS,
                networks: LOAD_NETWORKS,
                nodes: LOAD_NODES,
            }
        }
    }

    /// The name of node `i`: node-a, node-b, then `node-s0002`….
    pub fn node(i: usize) -> String {
        match i {
            0 => "node-a".to_owned(),
            1 => "node-b".to_owned(),
            _ => format!("node-s{i:04}"),
        }
    }

    /// Network `i`'s name.
    pub fn network(i: usize) -> String {
        format!("n{i:04}")
    }

    /// Pod `i`: (namespace, name, node). Round-robin over the networks; over the nodes shifted
    /// by one each time the networks wrap, so that a node's pods are in as many networks as
    /// there are (not the few whose index shares its residue).
    pub fn pod(&self, i: usize) -> (String, String, String) {
        (
            format!("team-{}", Self::network(i % self.networks)),
            format!("load-{i:05}"),
            Self::node((i + i / self.networks) % self.nodes),
        )
    }
}

/// The load's objects, in an order the API server accepts (namespaces before their pods):
/// Networks, their Namespaces, the Nodes other than node-a and node-b, the Pods.
pub fn load_objects(load: &Load) -> Vec<Value> {
    let mut out = Vec::with_capacity(load.pods + 2 * load.networks + load.nodes);
    for i in 0..load.networks {
        // /20s from 10.64.0.0 (10.64.0.0/10 holds 1,024 of them), /26 node blocks.
        let prefix = format!("10.{}.{}.0/20", 64 + i / 16, (i % 16) * 16);
        out.push(json!({
            "apiVersion": "lace-cni.io/v1alpha1", "kind": "Network",
            "metadata": {"name": Load::network(i)},
            "spec": {"type": "l3",
                "ipv4Subnet": {"prefix": prefix, "hostLocalPrefixLength": 26}},
        }));
        let team = Load::network(i);
        out.push(namespace(
            &format!("team-{team}"),
            &[("team", team.clone())].into_iter().collect(),
        ));
    }
    for i in 2..load.nodes {
        let name = Load::node(i);
        out.push(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                "annotations": {"lace-cni.io/underlay": format!("fd00:101::{i:x}")}},
        }));
    }
    for i in 0..load.pods {
        let (ns, name, node) = load.pod(i);
        out.push(pod_object(&ns, &name, &node, None));
    }
    out
}

/// A process's resident set in MiB, from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rss {
    /// `VmRSS`: all of it.
    pub total: f64,
    /// `RssAnon`: the heap and stacks.
    pub anon: f64,
    /// `RssFile`: mapped files (the binary).
    pub file: f64,
    /// `RssShmem`: shared memory (control's tables on /dev/shm).
    pub shmem: f64,
    /// `VmHWM`: the largest `VmRSS` the process has had.
    pub peak: f64,
}

impl std::fmt::Display for Rss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} MiB (anon {:.0}, file {:.0}, shmem {:.0}; peak {:.0})",
            self.total, self.anon, self.file, self.shmem, self.peak
        )
    }
}

/// The resident set of process `pid`.
pub fn rss(pid: u32) -> anyhow::Result<Rss> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_rss(&status)
        .ok_or_else(|| anyhow!("{path} lacks VmRSS, RssAnon, RssFile, RssShmem or VmHWM"))
}

/// The `Rss*` lines of a `/proc/<pid>/status` text.
fn parse_rss(status: &str) -> Option<Rss> {
    let mib = |key: &str| -> Option<f64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|kib| kib as f64 / 1024.0)
    };
    Some(Rss {
        total: mib("VmRSS")?,
        anon: mib("RssAnon")?,
        file: mib("RssFile")?,
        shmem: mib("RssShmem")?,
        peak: mib("VmHWM")?,
    })
}

/// The Kubernetes-mode figures. Never fails: what cannot be measured is returned in
/// [`Outcome::not_measured`] with the reason. `standalone` holds the standalone stack figures of
/// the same run (the anchors of the ADD-to-reachable figures).
pub fn figures(scale: &Scale, standalone: &Outcome) -> Outcome {
    let mut out = Outcome::default();
    if !is_root() {
        for id in [REACH_FIGURE, RSS_FIGURE, RESYNC_FIGURE] {
            out.not_measured.push((
                id.to_owned(),
                "needs root (network namespaces, veth pairs, DPDK af_packet); run lace-bench as \
                 root"
                    .to_owned(),
            ));
        }
        return out;
    }
    let result = Stack::start_in(Mode::Kubernetes).and_then(|mut stack| {
        let r = measure(&mut stack, scale, standalone, &mut out);
        if r.is_err() {
            let logs = stack.log_tails();
            return r.map_err(|e| anyhow!("{e:#}; {logs}"));
        }
        r
    });
    if let Err(e) = result {
        let measured: Vec<String> = out.figures.iter().map(|f| f.id.clone()).collect();
        for id in [REACH_FIGURE, RSS_FIGURE, RESYNC_FIGURE] {
            if !measured.iter().any(|m| m == id) {
                out.not_measured.push((id.to_owned(), format!("{e:#}")));
            }
        }
    }
    out
}

fn measure(
    stack: &mut Stack,
    scale: &Scale,
    standalone: &Outcome,
    out: &mut Outcome,
) -> anyhow::Result<()> {
    stack.measure(scale, out)?;
    // The standalone figures of the same run anchor the Kubernetes ones.
    for f in &mut out.figures {
        let Some(plain) = f.id.strip_prefix("k8s.") else {
            continue;
        };
        if !plain.starts_with("cni.add_to_reachable.") {
            continue;
        }
        if let Some(anchor) = standalone.figures.iter().find(|a| a.id == plain) {
            *f = Figure::versus(f.id.clone(), f.value, anchor);
        }
    }
    if !standalone.figures.iter().any(|f| f.id == CNI_FIGURE) {
        out.notes.push(format!(
            "{REACH_FIGURE}: no standalone {CNI_FIGURE} in this run to compare with; anchored \
             to its own reach floor"
        ));
    }
    scale_figures(stack, scale, out)
}

/// Loads the cluster-scale objects, attaches node-a's share, measures control's memory, then
/// restarts it and times its resync.
fn scale_figures(stack: &mut Stack, scale: &Scale, out: &mut Outcome) -> anyhow::Result<()> {
    let load = Load::for_scale(scale);
    let t = Instant::now();
    let created = stack
        .cluster()?
        .api
        .create_objects(load_objects(&load))
        .context("loading the cluster-scale objects")?;
    let seeded = t.elapsed();
    let uids: BTreeMap<(String, String), String> = created
        .iter()
        .filter(|o| o["kind"] == "Pod")
        .map(|o| {
            (
                (
                    o["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
                    o["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                ),
                o["metadata"]["uid"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    // Node-a's share, attached as kubelet would start them.
    let t = Instant::now();
    let mine: Vec<(String, String)> = (0..load.pods)
        .map(|i| load.pod(i))
        .filter(|(_, _, node)| node == "node-a")
        .map(|(ns, name, _)| (ns, name))
        .collect();
    for (ns, name) in &mine {
        let uid = uids
            .get(&(ns.clone(), name.clone()))
            .ok_or_else(|| anyhow!("the load's pod {ns}/{name} was not created"))?;
        stack
            .add_pod("a", ns, name, uid)
            .with_context(|| format!("attaching the load's pod {ns}/{name} on node-a"))?;
    }
    let attached = t.elapsed();
    // Synced: node-a's status lists every Network and its attached pods.
    let networks = load.networks + stack.cluster()?.example_networks;
    let status = stack.wait_status("a", Duration::from_secs(120), |s| {
        s.networks.len() >= networks
            && s.network_endpoints.iter().filter(|e| e.attached).count() >= mine.len()
    })?;
    let settled = stack.settle_cpu("a", Duration::from_secs(30))?;
    let grown = rss(stack.control_pid("a")?)?;

    let resync = stack.restart_control("a", Duration::from_secs(120))?;
    out.push(Figure::new(RESYNC_FIGURE, resync.as_secs_f64(), "s"));
    // The restarted control has its endpoints again (read back from the API, not reallocated).
    stack
        .wait_status("a", Duration::from_secs(60), |s| {
            s.network_endpoints.iter().filter(|e| e.attached).count() >= mine.len()
        })
        .context("node-a's endpoints after the restart")?;
    let after = stack.settle_cpu("a", Duration::from_secs(30))?;
    let started = rss(stack.control_pid("a")?)?;
    // A control started with the load in the API (every rollout) holds more than one that saw
    // it arrive: the figure is the larger.
    out.push(Figure::new(
        RSS_FIGURE,
        started.total.max(grown.total),
        "MiB",
    ));
    out.push(Figure::new(
        format!("{RSS_FIGURE}.load_arriving"),
        grown.total,
        "MiB",
    ));
    out.push(Figure::new(
        format!("{RSS_FIGURE}.started_loaded"),
        started.total,
        "MiB",
    ));
    out.notes.push(format!(
        "k8s load: {} Pods over {} nodes ({} on node-a, attached through lace-cni in {:.1} s), \
         {} Networks (+{} examples), {} Namespaces, put in the fake API server in {:.2} s; \
         node-a's status then listed {} networks, {} endpoints, {} pods; control idle after \
         {:.1} s; {RSS_FIGURE}: VmRSS of node-a's lace-control (node-b's control runs the same \
         load beside it), the larger of .load_arriving (started before the load, which arrived \
         through its watches): {grown}, and .started_loaded (restarted with the load in the \
         API, idle {:.1} s later): {started}",
        load.pods,
        load.nodes,
        mine.len(),
        attached.as_secs_f64(),
        load.networks,
        networks - load.networks,
        load.networks,
        seeded.as_secs_f64(),
        status.networks.len(),
        status.network_endpoints.len(),
        status.pods.len(),
        settled.as_secs_f64(),
        after.as_secs_f64(),
    ));
    out.notes.push(format!(
        "{RESYNC_FIGURE}: node-a's lace-control stopped (SIGTERM) with that load, started again \
         with the same flags; from its start until its socket answers Status ok (it answers \
         \"try again later\" until every watched kind has been listed and the tables compiled \
         from them); polled every 10 ms"
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_load_spreads_pods_over_nodes_and_networks() {
        let load = Load {
            pods: 10_000,
            networks: 1_000,
            nodes: 100,
        };
        let objects = load_objects(&load);
        let of = |kind: &str| objects.iter().filter(|o| o["kind"] == kind).count();
        assert_eq!(
            (of("Pod"), of("Network"), of("Namespace"), of("Node")),
            (10_000, 1_000, 1_000, 98)
        );
        let pods: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Pod").collect();
        let on_a: Vec<&&Value> = pods
            .iter()
            .filter(|p| p["spec"]["nodeName"] == "node-a")
            .collect();
        assert_eq!(on_a.len(), 100);
        // Node-a's pods are each in another network.
        let nets: BTreeSet<&str> = on_a
            .iter()
            .map(|p| p["metadata"]["namespace"].as_str().unwrap())
            .collect();
        assert_eq!(nets.len(), 100);
        let nodes: BTreeSet<&str> = pods
            .iter()
            .map(|p| p["spec"]["nodeName"].as_str().unwrap())
            .collect();
        assert_eq!(nodes.len(), 100);
        assert!(nodes.contains("node-b"));
        // Every node has its 100.
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &pods {
            *per_node
                .entry(p["spec"]["nodeName"].as_str().unwrap())
                .or_default() += 1;
        }
        assert!(per_node.values().all(|&c| c == 100), "{per_node:?}");
        // Subnets are distinct and inside 10.64.0.0/10.
        let subnets: BTreeSet<&str> = objects
            .iter()
            .filter(|o| o["kind"] == "Network")
            .map(|o| o["spec"]["ipv4Subnet"]["prefix"].as_str().unwrap())
            .collect();
        assert_eq!(subnets.len(), 1_000);
        assert!(subnets.iter().all(|s| {
            let second: u8 = s.split('.').nth(1).unwrap().parse().unwrap();
            (64..128).contains(&second)
        }));
        // Every pod's namespace comes before it.
        let mut seen = BTreeSet::new();
        for o in &objects {
            match o["kind"].as_str().unwrap() {
                "Namespace" => {
                    seen.insert(o["metadata"]["name"].as_str().unwrap());
                }
                "Pod" => assert!(seen.contains(o["metadata"]["namespace"].as_str().unwrap())),
                _ => {}
            }
        }
    }

    /// The load goes into the fake API server as it is (each object accepted), and the
    /// examples' per-team binding policy would bind a pod to its namespace's network.
    #[test]
    fn the_load_and_the_examples_are_accepted_by_the_fake_api_server() {
        let dir =
            crate::control::TempDir::new("lace-bench-k8s-test", &std::env::temp_dir()).unwrap();
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
        let cluster = Cluster::start(&dir.0, &examples).unwrap();
        assert_eq!(cluster.example_networks, 5);
        let load = Load {
            pods: 300,
            networks: 30,
            nodes: 10,
        };
        let created = cluster.api.create_objects(load_objects(&load)).unwrap();
        assert_eq!(created.len(), 300 + 60 + 8);
        let uid = cluster.create_pod("bench-0", "node-a").unwrap();
        assert!(!uid.is_empty());
        assert!(cluster.api.requests().is_empty());
        assert!(cluster.kubeconfig.is_file());
    }

    #[test]
    fn the_resident_set_is_read_from_proc_status() {
        let status = "Name:\tlace-control\nVmHWM:\t  9216 kB\nVmRSS:\t   5120 kB\n\
                      RssAnon:\t    3072 kB\nRssFile:\t    1024 kB\nRssShmem:\t    1024 kB\n";
        assert_eq!(
            parse_rss(status),
            Some(Rss {
                total: 5.0,
                anon: 3.0,
                file: 1.0,
                shmem: 1.0,
                peak: 9.0
            })
        );
        assert_eq!(parse_rss("Name:\tx\nVmRSS:\t 1 kB\n"), None);
        // This process has one.
        assert!(rss(std::process::id()).unwrap().total > 0.0);
    }

    #[test]
    fn multi_document_yaml_skips_empty_documents() {
        let docs = yaml_docs("# c\n---\na: 1\n---\n---\nb: [2]\n").unwrap();
        assert_eq!(docs, [json!({"a": 1}), json!({"b": [2]})]);
    }
}
