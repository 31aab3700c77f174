//! The Kubernetes source: control's input from an API server, through kube-rs watchers.
//!
//! One `kube::runtime::watcher` per [`ObjectKind`] — the lace kinds, `Pod`, `Namespace`,
//! `Node`, `Service`, `NetworkPolicy`, `EndpointSlice` (every namespace's: they carry the
//! Services' backends on every node) —
//! on a single-threaded tokio runtime the source thread owns. The watchers list (paginated,
//! with a resourceVersion), watch from it with bookmarks, relist after `410 Gone` and retry
//! every other error with kube's default exponential backoff (0.8 s doubling to 30 s, reset
//! after success), so an API server that goes away is retried until it returns.
//!
//! What the event loop receives ([`SourceEvent`]):
//!
//! - nothing until every kind has completed its first list; then one
//!   [`SourceEvent::Snapshot`] of everything (the loop allocates and forgets nothing before
//!   it);
//! - then one [`SourceEvent::Applied`] / [`SourceEvent::Deleted`] per watch event;
//! - a new full snapshot whenever a kind is relisted (after `410 Gone`, an API server
//!   restart, a dropped watch the watcher could not resume) and whenever an object's problems
//!   change.
//!
//! Pods of every node are watched, as Calico's and Cilium's agents see every workload: a
//! NetworkPolicy's podSelector peers run on any node, and a rule's named port is resolved
//! against the peer pod's container ports. A pod of another node is kept only as what those
//! need ([`peer_view`]: its name, namespace, uid, labels, deletion, node and named container
//! ports), so the other nodes' pods cost little memory (ADR 0039).
//!
//! While the API server is unreachable nothing is sent: the loop keeps the state it has (the
//! forwarder keeps its tables, CNI DEL keeps being answered). Objects are decoded exactly as
//! the standalone source decodes a document ([`super::standalone`]'s decoder: the lace kinds
//! checked against their CRD schema first); one that fails is reported as a
//! [`ProblemKind::Decode`] with `Problem::origin` `None`, and its last good version stays in
//! use ([`Consequence::KeptLastGood`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt as _;

use super::standalone::decode_object;
use super::{Consequence, Object, ObjectKind, ObjectRef, Objects, Problem, Snapshot, SourceEvent};
use crate::api::{Network, NetworkBindingPolicy, NetworkRoutingPolicy};

/// How control reaches the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesConfig {
    /// A kubeconfig file; `None`: inferred (`kube::Config::infer`) — `$KUBECONFIG` or
    /// `~/.kube/config` when there is one, else the in-cluster configuration (the pod's
    /// service account token and CA under `/var/run/secrets/kubernetes.io/serviceaccount`,
    /// `KUBERNETES_SERVICE_HOST`/`_PORT`), which is what a DaemonSet pod has.
    pub kubeconfig: Option<PathBuf>,
    /// This node (its Pods are kept whole; other nodes' as [`peer_view`]).
    pub node: String,
}

/// Why the Kubernetes source could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubernetesError {
    /// The kubeconfig could not be read.
    #[error(
        "cannot read the kubeconfig {}: {source}; check --kubeconfig",
        path.display()
    )]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No configuration could be inferred (not in a cluster, no kubeconfig).
    #[error(
        "no Kubernetes configuration: {0}; run in a pod with a service account, or pass \
         --kubeconfig"
    )]
    Infer(#[source] kube::config::InferConfigError),
    /// The client could not be built from the configuration.
    #[error(
        "cannot build the Kubernetes client: {0}; check the kubeconfig's server and credentials"
    )]
    Client(#[source] kube::Error),
    /// The runtime could not start.
    #[error("cannot start the Kubernetes source's runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Checks what can be checked before starting: the kubeconfig file reads and parses.
pub fn check(config: &KubernetesConfig) -> Result<(), KubernetesError> {
    if let Some(path) = &config.kubeconfig {
        kube::config::Kubeconfig::read_from(path).map_err(|source| {
            KubernetesError::Kubeconfig {
                path: path.clone(),
                source,
            }
        })?;
    }
    Ok(())
}

/// Builds a client from `config` (on the current tokio runtime).
pub async fn client(config: &KubernetesConfig) -> Result<kube::Client, KubernetesError> {
    let cfg = match &config.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                KubernetesError::Kubeconfig {
                    path: path.clone(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| KubernetesError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None => kube::Config::infer()
            .await
            .map_err(KubernetesError::Infer)?,
    };
    kube::Client::try_from(cfg).map_err(KubernetesError::Client)
}

fn api_resource(kind: ObjectKind) -> ApiResource {
    match kind {
        ObjectKind::Network => ApiResource::erase::<Network>(&()),
        ObjectKind::NetworkBindingPolicy => ApiResource::erase::<NetworkBindingPolicy>(&()),
        ObjectKind::NetworkRoutingPolicy => ApiResource::erase::<NetworkRoutingPolicy>(&()),
        ObjectKind::Namespace => ApiResource::erase::<Namespace>(&()),
        ObjectKind::Node => ApiResource::erase::<Node>(&()),
        ObjectKind::Pod => ApiResource::erase::<Pod>(&()),
        ObjectKind::Service => ApiResource::erase::<Service>(&()),
        ObjectKind::NetworkPolicy => ApiResource::erase::<NetworkPolicy>(&()),
        ObjectKind::EndpointSlice => ApiResource::erase::<EndpointSlice>(&()),
    }
}

/// What the source knows: the objects as last seen, per-object problems, and which kinds have
/// been listed. Pure (no I/O): [`KubeState::handle`] turns one watcher event into what the
/// loop is to receive.
#[derive(Debug, Default)]
pub struct KubeState {
    /// This node: its pods are kept whole.
    node: String,
    objects: Objects,
    problems: BTreeMap<ObjectRef, Problem>,
    listed: BTreeSet<ObjectKind>,
    relisting: BTreeMap<ObjectKind, Vec<DynamicObject>>,
    synced: bool,
}

impl KubeState {
    /// The state of node `node`'s source, before any list.
    pub fn new(node: &str) -> KubeState {
        KubeState {
            node: node.to_owned(),
            ..KubeState::default()
        }
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            objects: self.objects.clone(),
            problems: self.problems.values().cloned().collect(),
            origins: BTreeMap::new(),
        }
    }

    /// Decodes `o`, recording or clearing its problem; the object when it decoded. Whether the
    /// problems changed is returned too.
    fn decode(&mut self, kind: ObjectKind, o: &DynamicObject) -> (Option<Object>, bool) {
        let r = ObjectRef {
            kind,
            namespace: kind
                .is_namespaced()
                .then(|| o.metadata.namespace.clone().unwrap_or_default()),
            name: o.metadata.name.clone().unwrap_or_default(),
        };
        // List items of built-in kinds carry no apiVersion/kind (the API server's JSON leaves
        // them out); the watcher knows what it watches.
        let mut typed = if kind == ObjectKind::Pod && node_of(o) != Some(self.node.as_str()) {
            peer_view(o)
        } else {
            o.clone()
        };
        typed.types = Some(kube::api::TypeMeta {
            api_version: kind.api_version().to_owned(),
            kind: kind.as_str().to_owned(),
        });
        let value = serde_yaml::to_value(&typed).unwrap_or(serde_yaml::Value::Null);
        match decode_object(value) {
            Ok(object) => {
                let changed = self.problems.remove(&r).is_some();
                (Some(object), changed)
            }
            Err(problem) => {
                let kept = has(&self.objects, &r);
                self.problems.insert(
                    r.clone(),
                    Problem {
                        origin: None,
                        object: Some(r),
                        kind: *problem,
                        consequence: if kept {
                            Consequence::KeptLastGood { objects: 1 }
                        } else {
                            Consequence::NothingKept
                        },
                    },
                );
                (None, true)
            }
        }
    }

    /// Inserts a decoded object; a Node without lace annotations becomes a problem. Whether
    /// the problems changed.
    fn insert(&mut self, object: Object) -> bool {
        let r = object.reference();
        match self.objects.insert(object) {
            Ok(()) => false,
            Err(e) => {
                self.problems.insert(
                    r.clone(),
                    Problem {
                        origin: None,
                        object: Some(r),
                        kind: super::ProblemKind::Node(e),
                        consequence: Consequence::Skipped,
                    },
                );
                true
            }
        }
    }

    /// One watcher event of `kind`: what to send the loop (nothing, one event, or a snapshot).
    pub fn handle(
        &mut self,
        kind: ObjectKind,
        event: watcher::Event<DynamicObject>,
    ) -> Option<SourceEvent> {
        match event {
            watcher::Event::Init => {
                self.relisting.insert(kind, Vec::new());
                None
            }
            watcher::Event::InitApply(o) => {
                self.relisting.entry(kind).or_default().push(o);
                None
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.remove(&kind).unwrap_or_default();
                let fresh: BTreeSet<ObjectRef> = listed
                    .iter()
                    .map(|o| ObjectRef {
                        kind,
                        namespace: kind
                            .is_namespaced()
                            .then(|| o.metadata.namespace.clone().unwrap_or_default()),
                        name: o.metadata.name.clone().unwrap_or_default(),
                    })
                    .collect();
                // What the relist no longer has is gone; what fails to decode keeps its last
                // good version.
                for r in refs_of(&self.objects, kind) {
                    if !fresh.contains(&r) {
                        self.objects.remove(&r);
                    }
                }
                self.problems
                    .retain(|r, _| r.kind != kind || fresh.contains(r));
                for o in &listed {
                    if let (Some(object), _) = self.decode(kind, o) {
                        self.insert(object);
                    }
                }
                self.listed.insert(kind);
                if self.listed.len() == ObjectKind::ALL.len() {
                    self.synced = true;
                    return Some(SourceEvent::Snapshot(Box::new(self.snapshot())));
                }
                None
            }
            watcher::Event::Apply(o) => {
                let (object, problems_changed) = self.decode(kind, &o);
                let mut changed = problems_changed;
                let applied = object.inspect(|object| {
                    changed |= self.insert(object.clone());
                });
                if !self.synced {
                    return None;
                }
                match (applied, changed) {
                    (Some(object), false) => Some(SourceEvent::Applied(object)),
                    _ => Some(SourceEvent::Snapshot(Box::new(self.snapshot()))),
                }
            }
            watcher::Event::Delete(o) => {
                let r = ObjectRef {
                    kind,
                    namespace: kind
                        .is_namespaced()
                        .then(|| o.metadata.namespace.clone().unwrap_or_default()),
                    name: o.metadata.name.clone().unwrap_or_default(),
                };
                self.objects.remove(&r);
                let had_problem = self.problems.remove(&r).is_some();
                if !self.synced {
                    return None;
                }
                Some(if had_problem {
                    SourceEvent::Snapshot(Box::new(self.snapshot()))
                } else {
                    SourceEvent::Deleted(r)
                })
            }
        }
    }
}

/// A pod's `spec.nodeName`.
fn node_of(o: &DynamicObject) -> Option<&str> {
    o.data.get("spec")?.get("nodeName")?.as_str()
}

/// What this node keeps of another node's pod: `metadata` `name`, `namespace`, `uid`, `labels`
/// and `deletionTimestamp`; `spec.nodeName`; each container's `name` and `ports`, and those of
/// restartable init containers (sidecars), whose named ports Kubernetes resolves too. Nothing
/// else of it is read here: its addresses are its NetworkEndpoints', and binding, IPAM and the
/// CNI act on this node's pods only.
pub fn peer_view(o: &DynamicObject) -> DynamicObject {
    let m = &o.metadata;
    let metadata = kube::api::ObjectMeta {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        labels: m.labels.clone(),
        deletion_timestamp: m.deletion_timestamp.clone(),
        ..Default::default()
    };
    let spec = o.data.get("spec");
    let ports_of = |c: &serde_json::Value, keep_restart: bool| {
        let mut out = serde_json::Map::new();
        for f in ["name", "ports"] {
            if let Some(v) = c.get(f) {
                out.insert(f.into(), v.clone());
            }
        }
        if keep_restart {
            if let Some(v) = c.get("restartPolicy") {
                out.insert("restartPolicy".into(), v.clone());
            }
        }
        serde_json::Value::Object(out)
    };
    let list = |field: &str, sidecars: bool| -> Vec<serde_json::Value> {
        spec.and_then(|s| s.get(field))
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter(|c| {
                !sidecars || c.get("restartPolicy").and_then(|v| v.as_str()) == Some("Always")
            })
            .map(|c| ports_of(c, sidecars))
            .collect()
    };
    let mut kept = serde_json::Map::new();
    if let Some(n) = spec.and_then(|s| s.get("nodeName")) {
        kept.insert("nodeName".into(), n.clone());
    }
    kept.insert("containers".into(), list("containers", false).into());
    let sidecars = list("initContainers", true);
    if !sidecars.is_empty() {
        kept.insert("initContainers".into(), sidecars.into());
    }
    DynamicObject {
        types: o.types.clone(),
        metadata,
        data: serde_json::json!({ "spec": kept }),
    }
}

fn has(objects: &Objects, r: &ObjectRef) -> bool {
    refs_of(objects, r.kind).contains(r)
}

fn refs_of(objects: &Objects, kind: ObjectKind) -> BTreeSet<ObjectRef> {
    let cluster = |names: Vec<&String>| {
        names
            .into_iter()
            .map(|n| ObjectRef {
                kind,
                namespace: None,
                name: n.clone(),
            })
            .collect()
    };
    let namespaced = |keys: Vec<&super::NamespacedName>| {
        keys.into_iter()
            .map(|k| ObjectRef {
                kind,
                namespace: Some(k.namespace.clone()),
                name: k.name.clone(),
            })
            .collect()
    };
    match kind {
        ObjectKind::Network => cluster(objects.networks.keys().collect()),
        ObjectKind::NetworkBindingPolicy => cluster(objects.binding_policies.keys().collect()),
        ObjectKind::NetworkRoutingPolicy => cluster(objects.routing_policies.keys().collect()),
        ObjectKind::Namespace => cluster(objects.namespaces.keys().collect()),
        ObjectKind::Node => cluster(objects.nodes.keys().collect()),
        ObjectKind::Pod => namespaced(objects.pods.keys().collect()),
        ObjectKind::Service => namespaced(objects.services.keys().collect()),
        ObjectKind::NetworkPolicy => namespaced(objects.network_policies.keys().collect()),
        ObjectKind::EndpointSlice => namespaced(objects.endpoint_slices.keys().collect()),
    }
}

/// One watch's event, tagged with what the watch is: the watcher's event or its failure.
pub type TaggedEvent<K> = (K, Result<watcher::Event<DynamicObject>, WatchFailure>);

/// A watch's failure (retried with backoff): what it said, and whether it said the API server
/// could not be reached (see [`unreachable()`]) rather than refused the watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchFailure {
    /// The error, as text.
    pub message: String,
    /// Whether the API server could not be reached.
    pub unreachable: bool,
}

impl std::fmt::Display for WatchFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<&watcher::Error> for WatchFailure {
    fn from(e: &watcher::Error) -> WatchFailure {
        let unreachable = match e {
            watcher::Error::InitialListFailed(e)
            | watcher::Error::WatchStartFailed(e)
            | watcher::Error::WatchFailed(e) => unreachable(e),
            watcher::Error::WatchError(s) => s.code >= 500 || s.code == 429,
            watcher::Error::NoResourceVersion => false,
        };
        WatchFailure {
            message: e.to_string(),
            unreachable,
        }
    }
}

/// How long a store waits for its watches' first lists ([`FirstLists`]).
pub const SYNC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// How long a store that may start without the API server waits for one it cannot reach.
pub const OFFLINE_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// A store's wait for its watches' first lists (the allocation store's, the learned MACs'):
/// up to [`SYNC_TIMEOUT`]; or, for a store that can start without the API server, until
/// [`OFFLINE_AFTER`] has passed with nothing listed and every watch failing to reach it.
#[derive(Debug, Clone, Copy)]
pub struct FirstLists {
    start: std::time::Instant,
    offline: bool,
}

impl FirstLists {
    /// Starts waiting now; `offline`: the store can start without the API server.
    pub fn new(offline: bool) -> FirstLists {
        FirstLists {
            start: std::time::Instant::now(),
            offline,
        }
    }

    /// Whether to stop waiting and start away, with `listed` watches listed and `failures`
    /// the last failure of each watch that failed.
    pub fn away<'a>(
        &self,
        listed: usize,
        failures: impl IntoIterator<Item = &'a WatchFailure>,
    ) -> bool {
        let mut failures = failures.into_iter().peekable();
        self.offline
            && listed == 0
            && self.start.elapsed() >= OFFLINE_AFTER
            && failures.peek().is_some()
            && failures.all(|f| f.unreachable)
    }

    /// How long to wait for the next event (short past [`OFFLINE_AFTER`], so that
    /// [`Self::away`] is asked again); `None` once [`SYNC_TIMEOUT`] has passed.
    pub fn wait(&self) -> Option<std::time::Duration> {
        let elapsed = self.start.elapsed();
        let left = SYNC_TIMEOUT.checked_sub(elapsed)?;
        if left.is_zero() {
            return None;
        }
        Some(match OFFLINE_AFTER.checked_sub(elapsed) {
            Some(d) if self.offline && !d.is_zero() => d.min(left),
            _ if self.offline => left.min(std::time::Duration::from_millis(100)),
            _ => left,
        })
    }
}

/// Whether resourceVersion `a` is older than `b` (of one object). resourceVersions are etcd
/// revisions (decimal integers) on kube-apiserver; any other form is never called older.
pub fn older(a: &str, b: &str) -> bool {
    matches!((a.parse::<u64>(), b.parse::<u64>()), (Ok(a), Ok(b)) if a < b)
}

/// Whether `e` says the API server could not be reached or could not serve the request now
/// (no connection, a broken stream, 5xx, 429), rather than refusing it.
pub fn unreachable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || s.code == 429,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// Watches run on a thread of their own (with its own current-thread runtime and client, so
/// the caller's runtime stays free for writes), each event handed to a callback; stopped and
/// joined on drop. The IPAM store and the learned-MACs store each keep one.
#[derive(Debug)]
pub struct WatchThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WatchThread {
    /// Starts thread `name`: connects as `config` says (a failure is sent as an error event
    /// of watch `first`), starts a watcher (with backoff) for every `(tag, api, config)` that
    /// `watches` makes from the client, and calls `send` with each event until it returns
    /// false or the thread is dropped.
    pub fn spawn<K: Copy + Send + 'static>(
        name: &str,
        config: &KubernetesConfig,
        first: K,
        watches: impl FnOnce(&kube::Client) -> Vec<(K, Api<DynamicObject>, watcher::Config)>
            + Send
            + 'static,
        mut send: impl FnMut(TaggedEvent<K>) -> bool + Send + 'static,
    ) -> std::io::Result<WatchThread> {
        let config = config.clone();
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async move {
                    let client = match client(&config).await {
                        Ok(c) => c,
                        Err(e) => {
                            let failure = WatchFailure {
                                message: e.to_string(),
                                unreachable: false,
                            };
                            send((first, Err(failure)));
                            return;
                        }
                    };
                    let streams = watches(&client).into_iter().map(|(tag, api, wc)| {
                        watcher(api, wc)
                            .default_backoff()
                            .map(move |e| (tag, e.map_err(|e| WatchFailure::from(&e))))
                            .boxed()
                    });
                    let mut all = futures_util::stream::select_all(streams);
                    loop {
                        tokio::select! {
                            _ = &mut stop_rx => return,
                            next = all.next() => match next {
                                Some(e) => if !send(e) { return },
                                None => return,
                            },
                        }
                    }
                });
            })?;
        Ok(WatchThread {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for WatchThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs the source until `send` returns false: builds the client, starts every watcher and
/// sends the loop what [`KubeState::handle`] decides. Fails only when the client cannot be
/// built; the API server being unreachable is retried forever.
pub fn run(
    config: &KubernetesConfig,
    mut send: impl FnMut(SourceEvent) -> bool,
) -> Result<(), KubernetesError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(KubernetesError::Runtime)?;
    runtime.block_on(async {
        let client = client(config).await?;
        let streams = ObjectKind::ALL.into_iter().map(|kind| {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource(kind));
            watcher(api, watcher::Config::default())
                .default_backoff()
                .map(move |event| (kind, event))
                .boxed()
        });
        let mut all = futures_util::stream::select_all(streams);
        let mut state = KubeState::new(&config.node);
        while let Some((kind, event)) = all.next().await {
            match event {
                Ok(event) => {
                    if let Some(out) = state.handle(kind, event) {
                        if !send(out) {
                            return Ok(());
                        }
                    }
                }
                Err(e) => tracing::warn!(%kind, "watch: {e}; retrying with backoff, keeping the last state"),
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "shop",
                "uid": format!("uid-{name}"),
                "labels": {"app": "web"},
                "annotations": {"big": "x".repeat(4096)},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {
                "nodeName": node,
                "containers": [{
                    "name": "app",
                    "image": "registry.example/web:1",
                    "env": [{"name": "A", "value": "b"}],
                    "ports": [{"name": "http", "containerPort": 8080}],
                }],
                "initContainers": [
                    {"name": "setup", "image": "x", "ports": [{"name": "once", "containerPort": 1}]},
                    {"name": "proxy", "image": "y", "restartPolicy": "Always",
                     "ports": [{"name": "metrics", "containerPort": 9090}]},
                ],
            },
            "status": {"phase": "Running", "podIP": "10.40.1.2"},
        }))
        .unwrap()
    }

    fn listed(state: &mut KubeState, pods: Vec<DynamicObject>) -> Snapshot {
        let mut last = None;
        for kind in ObjectKind::ALL {
            state.handle(kind, watcher::Event::Init);
            if kind == ObjectKind::Pod {
                for p in &pods {
                    state.handle(kind, watcher::Event::InitApply(p.clone()));
                }
            }
            last = state.handle(kind, watcher::Event::InitDone);
        }
        match last {
            Some(SourceEvent::Snapshot(s)) => *s,
            other => panic!("no snapshot after every list: {other:?}"),
        }
    }

    /// Every node's pods are listed; this node's are kept whole, another node's as what a
    /// NetworkPolicy peer needs: labels, node, named container ports (sidecars' too, not plain
    /// init containers'), and nothing else.
    #[test]
    fn other_nodes_pods_are_kept_as_policy_peers() {
        let mut state = KubeState::new("node-a");
        let snap = listed(
            &mut state,
            vec![pod("mine", "node-a"), pod("peer", "node-b")],
        );
        let get = |name: &str| {
            snap.objects
                .pods
                .get(&super::super::NamespacedName::new("shop", name))
                .unwrap_or_else(|| panic!("{name} not listed"))
                .clone()
        };
        let mine = get("mine");
        assert!(mine.metadata.annotations.is_some() && mine.status.is_some());
        assert_eq!(
            mine.spec.as_ref().unwrap().containers[0].image.as_deref(),
            Some("registry.example/web:1")
        );
        let peer = get("peer");
        assert_eq!(peer.metadata.uid.as_deref(), Some("uid-peer"));
        assert_eq!(
            peer.metadata
                .labels
                .as_ref()
                .unwrap()
                .get("app")
                .map(String::as_str),
            Some("web")
        );
        assert!(peer.metadata.annotations.is_none() && peer.metadata.managed_fields.is_none());
        assert!(peer.status.is_none());
        let spec = peer.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("node-b"));
        let c = &spec.containers[0];
        assert_eq!((c.name.as_str(), c.image.as_deref()), ("app", None));
        assert!(c.env.is_none());
        assert_eq!(c.ports.as_ref().unwrap()[0].name.as_deref(), Some("http"));
        let init = spec.init_containers.unwrap();
        assert_eq!(init.len(), 1, "only the restartable init container");
        assert_eq!(init[0].restart_policy.as_deref(), Some("Always"));
        assert_eq!(init[0].ports.as_ref().unwrap()[0].container_port, 9090);
        // A pod scheduled onto this node later is kept whole from then on.
        let moved = pod("peer", "node-a");
        match state.handle(ObjectKind::Pod, watcher::Event::Apply(moved)) {
            Some(SourceEvent::Applied(Object::Pod(p))) => assert!(p.status.is_some()),
            other => panic!("{other:?}"),
        }
    }
}
