//! The allocation state kept in the API server (Kubernetes mode): [`ClusterState`], an
//! [`IpamStore`](super::control::IpamStore) that keeps one object per allocation and takes
//! each with optimistic concurrency, so that many nodes' controls never hand out the same
//! network id, node id, locator, block, address, MAC or endpoint id (ADR 0015).
//!
//! | what | object | taken by |
//! |---|---|---|
//! | a network's id and immutable fields | `Claim` `<network>.network` (a *record*), after `Claim` `network-id.<id>` | create-if-absent, each (any control; the record decides: a control that finds another record deletes its id claim) |
//! | a node's id, locator and endpoint-id reservation | `Claim` `<node>.node`, after `Claim`s `locator.<prefix>` and `node-id.<id>` | create-if-absent, by the node's own control only ([`Ipam::register_only`]); the reservation moves with an update conditional on the record's resourceVersion |
//! | a node's blocks of an l3 network | `Allocation` `<network>.<first block>` | create-if-absent (the name is the block; each node looks from its own place in the subnet, [`Ipam::spread_blocks`]) |
//! | an l2 address | `Neighbor` `<network>.<address>` | create-if-absent (the name is the address) |
//! | a pod's endpoint: addresses (l3: from its node's block, one writer), MAC, port, endpoint id | `NetworkEndpoint` in the pod's namespace, owned by the Pod | its node's control only |
//!
//! - [`ClusterState::open`] reads everything through watches and waits for their first lists,
//!   so a restarted control re-reads its state and reallocates nothing. A state kept by earlier
//!   versions in ConfigMap `lace-ipam` is migrated first (ADR 0045): the single-object form
//!   (key `state.json`) to one object per block, claim and endpoint and a ledger (key
//!   `ledger.json`), then the ledger's networks and nodes to their `Claim`s; the ConfigMap then
//!   keeps only a note (key `moved.txt`), which an older control refuses instead of writing.
//! - `mutate(f)` runs `f` (the pure allocate step) on a copy of this control's view with a
//!   journal ([`Ipam::start_journal`]) and writes the objects of the records it touched: the
//!   claims of networks and this node first, then blocks and l2 addresses, then endpoints,
//!   then what was released. A `409` — an id, locator, block, address or name taken by another
//!   control — means the view was stale: the object is read, the view rebuilt, and `f` runs
//!   again. Objects already written stay (they are this control's, and `f` finds them: an ADD
//!   of the same attachment returns its lease).
//! - Each control writes only its own node's record, blocks, claims and endpoints; other
//!   nodes' are read. Endpoint ids are reserved in the node's record [`ENDPOINT_CHUNK`] at a
//!   time, before any endpoint uses them, so a restart never hands one out twice.
//! - `refresh` applies what the watches delivered: another node's block or endpoint, a
//!   network or node registered elsewhere. Endpoints are watched in two scopes, this node's and
//!   every other node's (`lace-cni.io/node` label, `=` and `!=`): an l2 endpoint of another node
//!   is in this node's FDB and neighbor table, and an l3 one is the address of a pod a
//!   NetworkPolicy peer may select (ADR 0039). A control's memory grows with the cluster's
//!   endpoints (a few hundred bytes each), as every CNI agent's endpoint cache does.
//! - **The API server away.** A write that cannot reach it (no connection, a 5xx, 429) marks
//!   the store unreachable ([`IpamStore::reachable`]): control then answers ADDs that need a
//!   new allocation with code 11 and takes only releases. A release's deletions that cannot
//!   be made are *owed* ([`super::local`]): kept in the node's file, left out of the view,
//!   and made when the API server answers again — probed at most every [`PROBE`] while it is
//!   away, and before any write — so a DEL taken while it was away is never lost, not even
//!   across a restart of control. The file also keeps this node's objects as last written:
//!   [`ClusterState::open_with`] starts from them, away, when the API server cannot be reached
//!   for [`OFFLINE_AFTER`].
//! - An object that contradicts the view (a block taken twice, an endpoint of a network
//!   recreated since, a record repeating another's id) is left out and logged, never repaired;
//!   an id claim a record does not hold (its control lost the race for the record) is deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams, Preconditions};
use kube::runtime::watcher;
use serde_json::json;

use crate::api::{Allocation, AllocationSpec, Claim, ClaimKind, ClaimSpec, Neighbor};
use crate::api::{NeighborSpec, NetworkEndpoint, NetworkEndpointSpec, NetworkType};
use crate::ipam::{
    allocation_name, allocation_spec, endpoint_name, ledger_claims, ledger_of_claims,
    neighbor_name, neighbor_spec, network_claims, node_claims, node_record_name, BlockRecord,
    Dirty, EndpointLease, Ipam, IpamConfig, IpamError, IpamState, L2_LABEL, NETWORK_LABEL,
    NODE_LABEL,
};
use crate::source::kubernetes::{
    older, unreachable, FirstLists, KubernetesConfig, TaggedEvent, WatchFailure, WatchThread,
};

use super::control::IpamStore;
use super::local::{LocalFile, Owed};
use super::state::StateError;

/// The ConfigMap earlier versions kept the state in (migrated at open).
pub const OBJECT: &str = "lace-ipam";
/// The key of the ledger in its `data` (versions before the claims; migrated at open).
pub const LEDGER_KEY: &str = "ledger.json";
/// The key of the whole state of versions before per-object allocations (migrated at open).
pub const LEGACY_KEY: &str = "state.json";
/// The key of the note a migrated ConfigMap keeps (and an older control refuses).
pub const MOVED_KEY: &str = "moved.txt";
/// Endpoint ids a node reserves in its record at a time.
pub const ENDPOINT_CHUNK: u32 = 1024;
pub use crate::source::kubernetes::{OFFLINE_AFTER, SYNC_TIMEOUT};
/// How often the API server is tried while it is unreachable.
pub const PROBE: Duration = Duration::from_secs(1);

/// What each watch is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Watch {
    Ids,
    Allocations,
    Claims,
    MyEndpoints,
    OtherEndpoints,
}

impl Watch {
    const ALL: [Watch; 5] = [
        Watch::Ids,
        Watch::Allocations,
        Watch::Claims,
        Watch::MyEndpoints,
        Watch::OtherEndpoints,
    ];
}

/// A watch's event, from the watch thread.
type WatchEvent = TaggedEvent<Watch>;

/// An object as last seen: identity and spec.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Stored<S> {
    uid: String,
    rv: String,
    labels: BTreeMap<String, String>,
    spec: S,
}

/// Every object the view is built from.
#[derive(Debug, Default)]
struct Records {
    /// Network and node records and the ids and locators they took (`Claim`s).
    ids: BTreeMap<String, Stored<ClaimSpec>>,
    blocks: BTreeMap<String, Stored<AllocationSpec>>,
    claims: BTreeMap<String, Stored<NeighborSpec>>,
    endpoints: BTreeMap<(String, String), Stored<NetworkEndpointSpec>>,
    /// Objects this control deleted whose deletion the watch has not delivered yet: (kind,
    /// namespace, name) → uid. An event for that uid is older than the deletion.
    deleted: BTreeMap<(Watch, String, String), String>,
    /// Objects released while the API server was unreachable, not deleted there yet (same
    /// keys): left out of the records until they are.
    owed: BTreeMap<(Watch, String, String), String>,
}

/// What this control keeps on the node's disk ([`super::local`]): the deletions it owes, and
/// this node's objects (with every network's and node's claims) to start from when the API
/// server cannot be reached.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Local {
    #[serde(default)]
    owed: Vec<Owed>,
    #[serde(default)]
    ids: BTreeMap<String, Stored<ClaimSpec>>,
    /// The ledger of a file written before the claims (read, never written).
    #[serde(default, skip_serializing)]
    ledger: Option<(IpamState, String)>,
    #[serde(default)]
    blocks: BTreeMap<String, Stored<AllocationSpec>>,
    #[serde(default)]
    claims: BTreeMap<String, Stored<NeighborSpec>>,
    #[serde(default)]
    endpoints: Vec<(String, String, Stored<NetworkEndpointSpec>)>,
}

impl Local {
    /// A file written before the claims holds a ledger instead: its claims.
    fn with_claims(mut self) -> Local {
        if let (true, Some((ledger, _))) = (self.ids.is_empty(), self.ledger.take()) {
            self.ids = ledger_claims(&ledger)
                .into_iter()
                .map(|(name, spec)| {
                    let stored = Stored {
                        uid: String::new(),
                        rv: String::new(),
                        labels: BTreeMap::new(),
                        spec,
                    };
                    (name, stored)
                })
                .collect();
        }
        self
    }
}

/// How a write went.
enum Written {
    Done,
    /// Another writer came first (the object was read into the records): `f` runs again.
    Conflict,
}

/// `s` as a label value: itself when it is one (at most 63 characters), else `h-` and a hash.
pub fn label_value(s: &str) -> String {
    let ok = s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        s.to_owned()
    } else {
        format!("h-{:016x}", crate::ipam::fnv64(&[s.as_bytes()]))
    }
}

/// The state in the API server, and this control's view of it.
pub struct ClusterState {
    node: String,
    namespace: String,
    config: IpamConfig,
    runtime: tokio::runtime::Runtime,
    client: kube::Client,
    /// ConfigMap `lace-ipam` of earlier versions (migrated at open).
    ledger_api: Api<ConfigMap>,
    records: Records,
    ipam: Ipam,
    /// This node's endpoint-id reservation as its record holds it.
    reserved: u32,
    /// This node's Node uid (owner of its blocks and claims), once found.
    node_uid: Option<String>,
    events: mpsc::Receiver<WatchEvent>,
    /// Relists in progress: the objects listed so far.
    relisting: BTreeMap<Watch, Vec<DynamicObject>>,
    watches: Option<WatchThread>,
    /// Objects left out of the view, and why (logged once each).
    left_out: BTreeMap<String, String>,
    /// Writes redone after a conflict since this store was opened.
    conflicts: u64,
    /// API requests that failed since this store was opened.
    api_errors: std::cell::Cell<u64>,
    /// Whether the last request found the API server unreachable.
    away: std::cell::Cell<bool>,
    /// When to try the API server again while it is away.
    next_probe: Instant,
    /// Where this node's objects and the owed deletions are kept; `None`: in memory only.
    local: Option<LocalFile>,
}

impl std::fmt::Debug for ClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterState")
            .field("node", &self.node)
            .field("namespace", &self.namespace)
            .field("leases", &self.ipam.leases().count())
            .field("conflicts", &self.conflicts)
            .field("api_errors", &self.api_errors.get())
            .field("away", &self.away.get())
            .field("owed", &self.records.owed.len())
            .finish_non_exhaustive()
    }
}

fn ar_of(w: Watch) -> ApiResource {
    match w {
        Watch::Ids => ApiResource::erase::<Claim>(&()),
        Watch::Allocations => ApiResource::erase::<Allocation>(&()),
        Watch::Claims => ApiResource::erase::<Neighbor>(&()),
        Watch::MyEndpoints | Watch::OtherEndpoints => ApiResource::erase::<NetworkEndpoint>(&()),
    }
}

fn kind_name(w: Watch) -> &'static str {
    match w {
        Watch::Ids => "Claim",
        Watch::Allocations => "Allocation",
        Watch::Claims => "Neighbor",
        Watch::MyEndpoints | Watch::OtherEndpoints => "NetworkEndpoint",
    }
}

/// The status of an API error, if it is one.
pub(crate) fn status(e: &kube::Error) -> Option<(u16, &str)> {
    match e {
        kube::Error::Api(s) => Some((s.code, s.reason.as_str())),
        _ => None,
    }
}

fn watch_of_kind(kind: &str) -> Option<Watch> {
    match kind {
        "Claim" => Some(Watch::Ids),
        "Allocation" => Some(Watch::Allocations),
        "Neighbor" => Some(Watch::Claims),
        "NetworkEndpoint" => Some(Watch::MyEndpoints),
        _ => None,
    }
}

impl ClusterState {
    /// Connects as `kube` says (for node `kube.node`), migrates a single-object state if there
    /// is one, and reads everything (waiting up to [`SYNC_TIMEOUT`] for the first lists). Keeps
    /// nothing on disk: owed deletions live as long as the store.
    pub fn open(
        kube: &KubernetesConfig,
        namespace: &str,
        config: IpamConfig,
    ) -> Result<ClusterState, StateError> {
        Self::open_with(kube, namespace, config, None)
    }

    /// [`Self::open`], keeping this node's objects and the owed deletions in `local` (when
    /// given): the deletions it already holds (from before a restart) are left out of the view
    /// and made; when the API server cannot be reached for [`OFFLINE_AFTER`] and the file has
    /// this node's objects, the store starts from them, away (see the module docs).
    pub fn open_with(
        kube: &KubernetesConfig,
        namespace: &str,
        config: IpamConfig,
        local: Option<LocalFile>,
    ) -> Result<ClusterState, StateError> {
        let err = |op: &'static str, reason: String| StateError::Api {
            object: format!("namespace {namespace}"),
            op,
            reason,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err("start the client runtime", e.to_string()))?;
        let client = runtime
            .block_on(crate::source::kubernetes::client(kube))
            .map_err(|e| err("connect", e.to_string()))?;
        let (tx, rx) = mpsc::channel();
        let mut s = ClusterState {
            node: kube.node.clone(),
            namespace: namespace.to_owned(),
            config,
            ledger_api: Api::namespaced(client.clone(), namespace),
            client,
            runtime,
            records: Records::default(),
            ipam: shaped(Ipam::new(config)?, &kube.node),
            reserved: 1,
            node_uid: None,
            events: rx,
            relisting: BTreeMap::new(),
            watches: None,
            left_out: BTreeMap::new(),
            conflicts: 0,
            api_errors: std::cell::Cell::new(0),
            away: std::cell::Cell::new(false),
            next_probe: Instant::now(),
            local: None,
        };
        let kept: Option<Local> = match &local {
            Some(f) => f.load()?.map(Local::with_claims),
            None => None,
        };
        match s.migrate() {
            Ok(()) => {}
            // A node's copy is only written after the migration, so the state is migrated.
            Err(e) if kept.is_some() && s.away.get() => tracing::warn!("{e}"),
            Err(e) => return Err(e),
        }
        s.start_watches(kube, tx)?;
        let listed = s.sync(kept.is_some())?;
        let kept = kept.unwrap_or_default();
        if !listed {
            let file = local
                .as_ref()
                .map_or(String::new(), |f| f.path().display().to_string());
            tracing::warn!(
                "the API server cannot be reached: starting from this node's copy of its \
                 allocations ({file}: {} endpoints); DEL and CHECK are served, new allocations \
                 wait for it",
                kept.endpoints.len()
            );
            s.records.ids = kept.ids;
            s.records.blocks = kept.blocks;
            s.records.claims = kept.claims;
            s.records.endpoints = kept
                .endpoints
                .into_iter()
                .map(|(ns, name, e)| ((ns, name), e))
                .collect();
            s.rebuild()?;
        }
        let mut unknown = Vec::new();
        for o in kept.owed {
            let Some(w) = watch_of_kind(&o.kind) else {
                unknown.push(o.kind);
                continue;
            };
            s.records
                .owed
                .insert((w, o.namespace.clone(), o.name.clone()), o.uid.clone());
            s.unrecord(w, &o.namespace, &o.name, &o.uid);
        }
        if let (Some(f), false) = (&local, unknown.is_empty()) {
            return Err(StateError::Local {
                op: "parse",
                path: f.path().to_path_buf(),
                reason: format!("owed deletions of unknown kinds {unknown:?}"),
            });
        }
        if !s.records.owed.is_empty() {
            tracing::info!(
                "{} deletions owed to the API server from before the restart",
                s.records.owed.len()
            );
        }
        s.local = local;
        if listed {
            s.collect_claims();
            s.pay_owed();
        }
        s.save_local()?;
        Ok(s)
    }

    /// Writes redone after a conflict since this store was opened.
    pub fn conflicts(&self) -> u64 {
        self.conflicts
    }

    /// The API server answered (whatever it said).
    fn reached(&self) {
        if self.away.replace(false) {
            tracing::info!("the API server answers again");
        }
    }

    fn api_error(&self, object: String, op: &'static str, e: &kube::Error) -> StateError {
        self.api_errors.set(self.api_errors.get() + 1);
        if unreachable(e) {
            if !self.away.replace(true) {
                tracing::warn!(
                    "the API server is unreachable ({e}): new allocations wait for it, \
                     releases are kept and made when it returns"
                );
            }
        } else {
            self.reached();
        }
        StateError::Api {
            object,
            op,
            reason: e.to_string(),
        }
    }

    fn ledger_object(&self) -> String {
        format!("ConfigMap {}/{OBJECT}", self.namespace)
    }

    /// An object that does not parse or contradicts itself.
    fn corrupt(&self, object: String, reason: String) -> StateError {
        StateError::ApiCorrupt { object, reason }
    }

    fn api(&self, w: Watch, namespace: Option<&str>) -> Api<DynamicObject> {
        let ar = ar_of(w);
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    // ---- watches ------------------------------------------------------------------------------

    /// Starts the watch thread: a client of its own (a client's connections live on the
    /// runtime that made it), every watch, their events sent to this store.
    fn start_watches(
        &mut self,
        kube: &KubernetesConfig,
        tx: mpsc::Sender<WatchEvent>,
    ) -> Result<(), StateError> {
        let me = label_value(&self.node);
        let watches = move |client: &kube::Client| {
            Watch::ALL
                .into_iter()
                .map(|w| {
                    let ar = ar_of(w);
                    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
                    let cfg = match w {
                        Watch::MyEndpoints => {
                            watcher::Config::default().labels(&format!("{NODE_LABEL}={me}"))
                        }
                        Watch::OtherEndpoints => {
                            watcher::Config::default().labels(&format!("{NODE_LABEL}!={me}"))
                        }
                        Watch::Ids | Watch::Allocations | Watch::Claims => {
                            watcher::Config::default()
                        }
                    };
                    (w, api, cfg)
                })
                .collect()
        };
        let thread = WatchThread::spawn("ipam-watch", kube, Watch::Ids, watches, move |e| {
            tx.send(e).is_ok()
        })
        .map_err(|e| StateError::Api {
            object: "the allocation watches".into(),
            op: "start the watch thread",
            reason: e.to_string(),
        })?;
        self.watches = Some(thread);
        Ok(())
    }

    /// Applies watch events until every watch has listed once: true. With `offline`, false
    /// once [`OFFLINE_AFTER`] has passed with nothing listed and every watch failing to reach
    /// the API server (the store is then away).
    fn sync(&mut self, offline: bool) -> Result<bool, StateError> {
        let wait = FirstLists::new(offline);
        let mut listed = BTreeSet::new();
        let mut last_error: BTreeMap<Watch, WatchFailure> = BTreeMap::new();
        while listed.len() < Watch::ALL.len() {
            if wait.away(listed.len(), last_error.values()) {
                self.away.set(true);
                return Ok(false);
            }
            let received = match wait.wait() {
                Some(left) => self.events.recv_timeout(left).map_err(|_| ()),
                None => Err(()),
            };
            let (w, e) = match received {
                Ok(e) => e,
                Err(()) if wait.wait().is_some() => continue,
                Err(()) => {
                    let missing: Vec<String> = Watch::ALL
                        .iter()
                        .filter(|w| !listed.contains(*w))
                        .map(|w| {
                            format!(
                                "{}{}",
                                kind_name(*w),
                                last_error
                                    .get(w)
                                    .map_or(String::new(), |e| format!(" ({e})"))
                            )
                        })
                        .collect();
                    return Err(StateError::Api {
                        object: missing.join(", "),
                        op: "list",
                        reason: format!(
                            "no complete list within {} s; are the lace CRDs installed \
                             (kubectl apply -f deploy/crds) and may lace-control list and watch \
                             them?",
                            SYNC_TIMEOUT.as_secs()
                        ),
                    });
                }
            };
            match e {
                Ok(watcher::Event::InitDone) => {
                    listed.insert(w);
                    self.handle(w, watcher::Event::InitDone)?;
                }
                Ok(e) => {
                    self.handle(w, e)?;
                }
                Err(e) => {
                    last_error.insert(w, e);
                }
            }
        }
        self.rebuild()?;
        Ok(true)
    }

    /// Takes one watch event into the records; whether the view must be rebuilt (a relist or
    /// a claim's change) — other changes were applied to the view already.
    fn handle(&mut self, w: Watch, e: watcher::Event<DynamicObject>) -> Result<bool, StateError> {
        match e {
            watcher::Event::Init => {
                self.relisting.insert(w, Vec::new());
                Ok(false)
            }
            watcher::Event::InitApply(o) => {
                self.relisting.entry(w).or_default().push(o);
                Ok(false)
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.remove(&w).unwrap_or_default();
                self.replace(w, listed)?;
                Ok(true)
            }
            watcher::Event::Apply(o) => self.apply(w, &o),
            watcher::Event::Delete(o) => Ok(self.forget(w, &o)),
        }
    }

    /// A relist: the records of `w`'s scope become `listed`.
    fn replace(&mut self, w: Watch, listed: Vec<DynamicObject>) -> Result<(), StateError> {
        self.records.deleted.retain(|(k, _, _), _| *k != w);
        let me = label_value(&self.node);
        match w {
            Watch::Ids => self.records.ids.clear(),
            Watch::Allocations => self.records.blocks.clear(),
            Watch::Claims => self.records.claims.clear(),
            Watch::MyEndpoints => self
                .records
                .endpoints
                .retain(|_, e| e.labels.get(NODE_LABEL) != Some(&me)),
            Watch::OtherEndpoints => self
                .records
                .endpoints
                .retain(|_, e| e.labels.get(NODE_LABEL) == Some(&me)),
        }
        for o in &listed {
            self.store(w, o)?;
        }
        Ok(())
    }

    /// Stores object `o` of watch `w` in the records (ignoring what this control deleted);
    /// what it replaced, if anything.
    fn store(&mut self, w: Watch, o: &DynamicObject) -> Result<Option<Change>, StateError> {
        let meta = &o.metadata;
        let (ns, name) = (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        );
        let uid = meta.uid.clone().unwrap_or_default();
        let key = (kind_of(w), ns.clone(), name.clone());
        if self.records.deleted.get(&key) == Some(&uid) || self.records.owed.get(&key) == Some(&uid)
        {
            return Ok(None);
        }
        let rv = meta.resource_version.clone().unwrap_or_default();
        let labels = meta.labels.clone().unwrap_or_default();
        let spec = o.data.get("spec").cloned().unwrap_or_default();
        match w {
            Watch::Ids => {
                let spec: ClaimSpec = match serde_json::from_value(spec) {
                    Ok(s) => s,
                    Err(e) => {
                        self.leave_out(format!("Claim {name}"), e.to_string());
                        return Ok(None);
                    }
                };
                // An older version of what this control stored from its own update's answer.
                if self
                    .records
                    .ids
                    .get(&name)
                    .is_some_and(|o| o.uid == uid && older(&rv, &o.rv))
                {
                    return Ok(None);
                }
                let new = Stored {
                    uid,
                    rv,
                    labels,
                    spec,
                };
                let old = self.records.ids.insert(name, new.clone());
                match old {
                    Some(o) if o == new => Ok(None),
                    // Another node's reservation moved: nothing of this view depends on it.
                    Some(o)
                        if o.spec.holder != self.node
                            && ClaimSpec {
                                next_endpoint: new.spec.next_endpoint,
                                ..o.spec.clone()
                            } == new.spec =>
                    {
                        Ok(None)
                    }
                    _ => Ok(Some(Change::Ids)),
                }
            }
            Watch::Allocations => {
                let spec: AllocationSpec = match serde_json::from_value(spec) {
                    Ok(s) => s,
                    Err(e) => {
                        self.leave_out(format!("Allocation {name}"), e.to_string());
                        return Ok(None);
                    }
                };
                let new = Stored {
                    uid,
                    rv,
                    labels,
                    spec,
                };
                let old = self.records.blocks.insert(name.clone(), new.clone());
                if old.as_ref() == Some(&new) {
                    return Ok(None);
                }
                Ok(Some(Change::Block(old.map(|o| o.spec), new.spec)))
            }
            Watch::Claims => {
                let spec: NeighborSpec = match serde_json::from_value(spec) {
                    Ok(s) => s,
                    Err(e) => {
                        self.leave_out(format!("Neighbor {name}"), e.to_string());
                        return Ok(None);
                    }
                };
                let new = Stored {
                    uid,
                    rv,
                    labels,
                    spec,
                };
                let old = self.records.claims.insert(name.clone(), new.clone());
                if old.as_ref() == Some(&new) {
                    return Ok(None);
                }
                Ok(Some(Change::Claim(old.map(|o| o.spec), Some(new.spec))))
            }
            Watch::MyEndpoints | Watch::OtherEndpoints => {
                let spec: NetworkEndpointSpec = match serde_json::from_value(spec) {
                    Ok(s) => s,
                    Err(e) => {
                        self.leave_out(format!("NetworkEndpoint {ns}/{name}"), e.to_string());
                        return Ok(None);
                    }
                };
                let new = Stored {
                    uid,
                    rv,
                    labels,
                    spec,
                };
                let old = self
                    .records
                    .endpoints
                    .insert((ns.clone(), name.clone()), new.clone());
                if old.as_ref() == Some(&new) {
                    return Ok(None);
                }
                Ok(Some(Change::Endpoint(
                    ns,
                    old.map(|o| Box::new(o.spec)),
                    Some(Box::new(new.spec)),
                )))
            }
        }
    }

    /// A watch's added or changed object: stored, and applied to the view.
    fn apply(&mut self, w: Watch, o: &DynamicObject) -> Result<bool, StateError> {
        match self.store(w, o)? {
            None => Ok(false),
            Some(Change::Ids) => Ok(true),
            Some(c) => {
                self.apply_change(c);
                Ok(false)
            }
        }
    }

    /// A watch's deleted object: forgotten (if it is the one recorded) and taken out of the
    /// view; whether the view must be rebuilt.
    fn forget(&mut self, w: Watch, o: &DynamicObject) -> bool {
        let ns = o.metadata.namespace.clone().unwrap_or_default();
        let name = o.metadata.name.clone().unwrap_or_default();
        let uid = o.metadata.uid.clone().unwrap_or_default();
        let key = (kind_of(w), ns.clone(), name.clone());
        if self.records.deleted.get(&key) == Some(&uid) {
            self.records.deleted.remove(&key);
        }
        match w {
            Watch::Ids => {
                if self.records.ids.get(&name).is_some_and(|s| s.uid == uid) {
                    self.records.ids.remove(&name);
                    return true;
                }
                false
            }
            Watch::Allocations => {
                if self.records.blocks.get(&name).is_some_and(|s| s.uid == uid) {
                    if let Some(old) = self.records.blocks.remove(&name) {
                        self.apply_change(Change::BlockGone(old.spec));
                    }
                }
                false
            }
            Watch::Claims => {
                if self.records.claims.get(&name).is_some_and(|s| s.uid == uid) {
                    if let Some(old) = self.records.claims.remove(&name) {
                        self.apply_change(Change::Claim(Some(old.spec), None));
                    }
                }
                false
            }
            Watch::MyEndpoints | Watch::OtherEndpoints => {
                let k = (ns.clone(), name);
                if self.records.endpoints.get(&k).is_some_and(|s| s.uid == uid) {
                    if let Some(old) = self.records.endpoints.remove(&k) {
                        self.apply_change(Change::Endpoint(ns, Some(Box::new(old.spec)), None));
                    }
                }
                false
            }
        }
    }

    fn leave_out(&mut self, what: String, why: String) {
        if self.left_out.get(&what) != Some(&why) {
            tracing::warn!("{what} is left out of the allocation state: {why}");
            self.left_out.insert(what, why);
        }
    }

    // ---- the view -------------------------------------------------------------------------------

    /// One record's change applied to the view; what does not fit is left out (and retried at
    /// the next rebuild).
    fn apply_change(&mut self, c: Change) {
        match c {
            Change::Ids => {}
            Change::Block(old, new) => {
                if let Some(old) = old {
                    for b in block_records(&old) {
                        self.ipam.remove_block(&b);
                    }
                }
                for b in block_records(&new) {
                    if let Err(e) = self.ipam.insert_block(&b) {
                        self.leave_out(
                            format!("Allocation of {} {}", b.network, b.prefix),
                            e.to_string(),
                        );
                    }
                }
            }
            Change::BlockGone(old) => {
                for b in block_records(&old) {
                    self.ipam.remove_block(&b);
                }
            }
            Change::Claim(old, new) => {
                if let Some((n, a)) = old.as_ref().and_then(claim_of) {
                    // Still claimed by another object of the same address (a learned entry
                    // beside an endpoint's): kept.
                    let others = self
                        .records
                        .claims
                        .values()
                        .any(|c| claim_of(&c.spec) == Some((n.clone(), a)));
                    if !others {
                        self.ipam.set_claim(&n, a, false);
                    }
                }
                if let Some((n, a)) = new.as_ref().and_then(claim_of) {
                    self.ipam.set_claim(&n, a, true);
                }
            }
            Change::Endpoint(ns, old, new) => {
                if let Some(old) = old {
                    let key = crate::world::AttachmentKey {
                        container_id: old.container_id.clone(),
                        ifname: old.interface.clone(),
                    };
                    if self
                        .ipam
                        .lease(&key)
                        .is_some_and(|l| l.endpoint_id == old.endpoint_id)
                    {
                        self.ipam.release(&key);
                    }
                }
                if let Some(new) = new {
                    let what = format!(
                        "NetworkEndpoint of container {} ({ns}/{})",
                        new.container_id, new.pod
                    );
                    match self
                        .ipam
                        .lease_record(&ns, &new)
                        .map_err(|e| e.to_string())
                        .and_then(|r| self.ipam.insert_lease(&r, false).map_err(|e| e.to_string()))
                    {
                        Ok(()) => {
                            self.left_out.remove(&what);
                        }
                        Err(e) => self.leave_out(what, e),
                    }
                }
            }
        }
    }

    /// Builds the view from the records: the networks and nodes of their claims, every block,
    /// l2 address and endpoint. The id counters never go back (an id a removed network held is
    /// not given out again by this process), and neither does this node's endpoint counter:
    /// once this process counts the node's endpoints it keeps its own counter (the record's
    /// reservation is ahead of it, not a count); a view without the node yet starts it at the
    /// reservation, past every id an earlier process may have handed out.
    fn rebuild(&mut self) -> Result<(), StateError> {
        let counter = self.ipam.next_endpoint(&self.node);
        let claimed = ledger_of_claims(
            self.config,
            &self.node,
            self.records
                .ids
                .iter()
                .map(|(name, c)| (name.as_str(), &c.spec)),
            self.ipam.ledger().next_ids(),
        );
        let ledger = match counter {
            Some(c) => claimed.ledger.clone().with_next_endpoint(&self.node, c),
            None => claimed.ledger.clone(),
        };
        let mut ipam = Ipam::from_ledger(&ledger, self.config).map_err(|e| {
            self.corrupt(
                "the network and node Claims (claims.lace-cni.io)".into(),
                e.to_string(),
            )
        })?;
        for l in &claimed.reserved_locators {
            ipam.reserve_locator(*l);
        }
        for id in &claimed.reserved_node_ids {
            ipam.reserve_node_id(*id);
        }
        for (id, holder) in &claimed.reserved_network_ids {
            ipam.reserve_network_id(*id, holder);
        }
        self.reserved = claimed.ledger.next_endpoint(&self.node).unwrap_or(1);
        self.ipam = shaped(ipam, &self.node);
        self.left_out.clear();
        for (what, why) in claimed.left_out {
            self.leave_out(what, why);
        }
        let blocks: Vec<AllocationSpec> = self
            .records
            .blocks
            .values()
            .map(|b| b.spec.clone())
            .collect();
        for b in blocks {
            self.apply_change(Change::Block(None, b));
        }
        let claims: Vec<NeighborSpec> = self
            .records
            .claims
            .values()
            .map(|c| c.spec.clone())
            .collect();
        for c in claims {
            self.apply_change(Change::Claim(None, Some(c)));
        }
        // This node's endpoints first: a clash leaves out another node's, never one whose
        // interface is plugged in here.
        let me = label_value(&self.node);
        let mut endpoints: Vec<(String, NetworkEndpointSpec, bool)> = self
            .records
            .endpoints
            .iter()
            .map(|((ns, _), e)| {
                (
                    ns.clone(),
                    e.spec.clone(),
                    e.labels.get(NODE_LABEL) == Some(&me),
                )
            })
            .collect();
        endpoints.sort_by_key(|(_, _, mine)| !mine);
        for (ns, e, _) in endpoints {
            self.apply_change(Change::Endpoint(ns, None, Some(Box::new(e))));
        }
        Ok(())
    }

    /// Applies every event the watches delivered; whether the view changed.
    fn drain(&mut self) -> Result<bool, StateError> {
        let mut changed = false;
        let mut rebuild = false;
        while let Ok((w, e)) = self.events.try_recv() {
            match e {
                Ok(e) => {
                    let before = self.ipam.generation();
                    rebuild |= self.handle(w, e)?;
                    changed |= self.ipam.generation() != before;
                }
                Err(e) => tracing::warn!("{} watch: {e}; retrying with backoff", kind_name(w)),
            }
        }
        if rebuild {
            self.rebuild()?;
            changed = true;
        }
        Ok(changed)
    }

    /// Deletes this node's claims that back no lease of the view (left by a write that failed
    /// between the claim and its endpoint).
    fn collect_claims(&mut self) {
        let me = label_value(&self.node);
        let held: BTreeSet<(String, IpAddr)> = self
            .ipam
            .leases()
            .filter(|l| l.node == self.node)
            .flat_map(|l| {
                l.addresses
                    .iter()
                    .map(move |a| (l.network.clone(), a.address))
            })
            .collect();
        let stale: Vec<(String, String)> = self
            .records
            .claims
            .iter()
            .filter(|(_, c)| c.labels.get(NODE_LABEL) == Some(&me) && !c.spec.learned)
            .filter(|(_, c)| claim_of(&c.spec).is_none_or(|k| !held.contains(&k)))
            .map(|(name, c)| (name.clone(), c.uid.clone()))
            .collect();
        for (name, uid) in stale {
            tracing::info!("Neighbor {name}: claimed by this node for no endpoint; deleting it");
            if let Err(e) = self.delete(Watch::Claims, None, &name, &uid) {
                tracing::warn!("{e}");
            }
        }
        for (name, uid) in self.stray_ids() {
            tracing::info!(
                "Claim {name}: an id or locator its holder's record does not hold; deleting it"
            );
            if let Err(e) = self.delete(Watch::Ids, None, &name, &uid) {
                tracing::warn!("{e}");
            }
        }
    }

    /// The id claims a record does not hold: a network's whose record has another id (its
    /// control lost the race for the record), and this node's beside its record (left by a
    /// registration that failed half way). An id claim without a record may be a
    /// registration under way, and is kept.
    fn stray_ids(&self) -> Vec<(String, String)> {
        let records: BTreeMap<(ClaimKind, &str), &ClaimSpec> = self
            .records
            .ids
            .values()
            .filter(|r| matches!(r.spec.kind, ClaimKind::Network | ClaimKind::Node))
            .map(|r| ((r.spec.kind, r.spec.holder.as_str()), &r.spec))
            .collect();
        let record = |kind: ClaimKind, holder: &str| records.get(&(kind, holder)).copied();
        self.records
            .ids
            .iter()
            .filter(|(_, c)| {
                let s = &c.spec;
                match s.kind {
                    ClaimKind::NetworkId => {
                        record(ClaimKind::Network, &s.holder).is_some_and(|r| r.id != s.id)
                    }
                    ClaimKind::NodeId if s.holder == self.node => {
                        record(ClaimKind::Node, &s.holder).is_some_and(|r| r.id != s.id)
                    }
                    ClaimKind::Locator if s.holder == self.node => {
                        record(ClaimKind::Node, &s.holder).is_some_and(|r| r.locator != s.locator)
                    }
                    _ => false,
                }
            })
            .map(|(name, c)| (name.clone(), c.uid.clone()))
            .collect()
    }

    // ---- writes ---------------------------------------------------------------------------------

    /// This node's Node uid, looked up once it exists.
    fn node_owner(&mut self) -> Vec<serde_json::Value> {
        if self.node_uid.is_none() {
            let api: Api<Node> = Api::all(self.client.clone());
            if let Ok(Some(n)) = self.runtime.block_on(api.get_opt(&self.node)) {
                self.node_uid = n.metadata.uid;
            }
        }
        self.node_uid
            .iter()
            .map(|uid| json!({"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid}))
            .collect()
    }

    fn labels(&self, network: &str, l2: bool) -> serde_json::Value {
        let mut labels = serde_json::Map::new();
        labels.insert(NODE_LABEL.into(), label_value(&self.node).into());
        labels.insert(NETWORK_LABEL.into(), label_value(network).into());
        if l2 {
            labels.insert(L2_LABEL.into(), "true".into());
        }
        labels.into()
    }

    fn object(
        &self,
        w: Watch,
        namespace: Option<&str>,
        name: &str,
        labels: serde_json::Value,
        owners: Vec<serde_json::Value>,
        spec: serde_json::Value,
    ) -> Result<DynamicObject, StateError> {
        let ar = ar_of(w);
        let mut v = json!({
            "apiVersion": ar.api_version,
            "kind": ar.kind,
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        });
        if let Some(ns) = namespace {
            v["metadata"]["namespace"] = ns.into();
        }
        if !owners.is_empty() {
            v["metadata"]["ownerReferences"] = owners.into();
        }
        serde_json::from_value(v).map_err(|e| StateError::Api {
            object: format!("{} {name}", ar.kind),
            op: "build",
            reason: e.to_string(),
        })
    }

    fn pp() -> PostParams {
        PostParams {
            field_manager: Some(super::api_status::FIELD_MANAGER.into()),
            ..PostParams::default()
        }
    }

    /// Creates `o`; an object of that name already there is read into the records and its
    /// spec returned.
    fn create(
        &mut self,
        w: Watch,
        o: &DynamicObject,
    ) -> Result<Option<serde_json::Value>, StateError> {
        let ns = o.metadata.namespace.clone();
        let name = o.metadata.name.clone().unwrap_or_default();
        let api = self.api(w, ns.as_deref());
        let created = self.runtime.block_on(api.create(&Self::pp(), o));
        if created.is_ok() || created.as_ref().is_err_and(|e| status(e).is_some()) {
            self.reached();
        }
        match created {
            Ok(made) => {
                self.store(w, &made)?;
                Ok(None)
            }
            Err(e) if status(&e) == Some((409, "AlreadyExists")) => {
                let there = self
                    .runtime
                    .block_on(api.get_opt(&name))
                    .map_err(|e| self.api_error(format!("{} {name}", kind_name(w)), "get", &e))?;
                match there {
                    Some(t) => {
                        self.records
                            .deleted
                            .remove(&(kind_of(w), ns.unwrap_or_default(), name));
                        self.store(w, &t)?;
                        Ok(Some(t.data.get("spec").cloned().unwrap_or_default()))
                    }
                    // Deleted in between: the next round creates it.
                    None => Ok(Some(serde_json::Value::Null)),
                }
            }
            Err(e) => Err(self.api_error(format!("{} {name}", kind_name(w)), "create", &e)),
        }
    }

    /// Deletes `name` if it is still the object `uid`; gone already is done. When the API
    /// server cannot be reached the deletion is owed (kept in the owed file, made when it
    /// returns); either way the object leaves the records and the view now.
    fn delete(
        &mut self,
        w: Watch,
        namespace: Option<&str>,
        name: &str,
        uid: &str,
    ) -> Result<(), StateError> {
        let ns = namespace.unwrap_or_default().to_owned();
        let key = (kind_of(w), ns.clone(), name.to_owned());
        match self.delete_in_api(w, namespace, name, uid) {
            Ok(()) => {
                self.records.deleted.insert(key, uid.to_owned());
            }
            Err(e) if unreachable(&e) => {
                let err = self.delete_error(w, namespace, name, &e);
                self.records.owed.insert(key.clone(), uid.to_owned());
                if let Err(saved) = self.save_local() {
                    self.records.owed.remove(&key);
                    tracing::error!("{err}");
                    return Err(saved);
                }
            }
            Err(e) => return Err(self.delete_error(w, namespace, name, &e)),
        }
        self.unrecord(w, &ns, name, "");
        Ok(())
    }

    /// A failed deletion, counted (and the API server marked away when it is).
    fn delete_error(
        &self,
        w: Watch,
        namespace: Option<&str>,
        name: &str,
        e: &kube::Error,
    ) -> StateError {
        let what = match namespace {
            Some(ns) => format!("{} {ns}/{name}", kind_name(w)),
            None => format!("{} {name}", kind_name(w)),
        };
        self.api_error(what, "delete", e)
    }

    /// The API request of [`Self::delete`] (gone already, or another object of that name now,
    /// is done).
    fn delete_in_api(
        &self,
        w: Watch,
        namespace: Option<&str>,
        name: &str,
        uid: &str,
    ) -> Result<(), kube::Error> {
        let api = self.api(w, namespace);
        let dp = DeleteParams {
            preconditions: (!uid.is_empty()).then(|| Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.runtime.block_on(api.delete(name, &dp)) {
            Ok(_) => {}
            Err(e) if matches!(status(&e), Some((404, _))) => {}
            // Another object of that name now (ours was deleted and the name taken again).
            Err(e) if matches!(status(&e), Some((409, _))) => {}
            Err(e) => return Err(e),
        }
        self.reached();
        Ok(())
    }

    /// Takes object `name` (if it is `uid`, or any when `uid` is empty) out of the records
    /// and the view.
    fn unrecord(&mut self, w: Watch, ns: &str, name: &str, uid: &str) {
        let is = |u: &str| uid.is_empty() || u == uid;
        let change = match w {
            Watch::Allocations => match self.records.blocks.get(name) {
                Some(b) if is(&b.uid) => self
                    .records
                    .blocks
                    .remove(name)
                    .map(|b| Change::BlockGone(b.spec)),
                _ => None,
            },
            Watch::Claims => match self.records.claims.get(name) {
                Some(c) if is(&c.uid) => self
                    .records
                    .claims
                    .remove(name)
                    .map(|c| Change::Claim(Some(c.spec), None)),
                _ => None,
            },
            Watch::MyEndpoints | Watch::OtherEndpoints => {
                let k = (ns.to_owned(), name.to_owned());
                match self.records.endpoints.get(&k) {
                    Some(e) if is(&e.uid) => self
                        .records
                        .endpoints
                        .remove(&k)
                        .map(|e| Change::Endpoint(ns.to_owned(), Some(Box::new(e.spec)), None)),
                    _ => None,
                }
            }
            // The view changes with the write that deletes a claim (or at the next rebuild).
            Watch::Ids => {
                if self.records.ids.get(name).is_some_and(|c| is(&c.uid)) {
                    self.records.ids.remove(name);
                }
                None
            }
        };
        if let Some(c) = change {
            self.apply_change(c);
        }
    }

    /// Writes this node's objects and the owed deletions to the node's file (when the store
    /// keeps one).
    fn save_local(&self) -> Result<(), StateError> {
        let Some(file) = &self.local else {
            return Ok(());
        };
        let me = label_value(&self.node);
        let mine = |labels: &BTreeMap<String, String>| labels.get(NODE_LABEL) == Some(&me);
        fn of<S: Clone>(
            records: &BTreeMap<String, Stored<S>>,
            mine: impl Fn(&BTreeMap<String, String>) -> bool,
        ) -> BTreeMap<String, Stored<S>> {
            records
                .iter()
                .filter(|(_, r)| mine(&r.labels))
                .map(|(n, r)| (n.clone(), r.clone()))
                .collect()
        }
        let local = Local {
            owed: self
                .records
                .owed
                .iter()
                .map(|((w, ns, name), uid)| Owed {
                    kind: kind_name(*w).to_owned(),
                    namespace: ns.clone(),
                    name: name.clone(),
                    uid: uid.clone(),
                })
                .collect(),
            ids: self.records.ids.clone(),
            ledger: None,
            blocks: of(&self.records.blocks, mine),
            claims: of(&self.records.claims, mine),
            endpoints: self
                .records
                .endpoints
                .iter()
                .filter(|(_, e)| mine(&e.labels))
                .map(|((ns, n), e)| (ns.clone(), n.clone(), e.clone()))
                .collect(),
        };
        file.save(&local)
    }

    /// Makes the owed deletions the API server takes; stops at the first it cannot reach.
    fn pay_owed(&mut self) {
        let owed: Vec<((Watch, String, String), String)> = self
            .records
            .owed
            .iter()
            .map(|(k, u)| (k.clone(), u.clone()))
            .collect();
        let mut paid = 0;
        for ((w, ns, name), uid) in owed {
            let namespace = (!ns.is_empty()).then_some(ns.as_str());
            match self.delete_in_api(w, namespace, &name, &uid) {
                Ok(()) => {
                    let key = (w, ns.clone(), name.clone());
                    self.records.owed.remove(&key);
                    self.records.deleted.insert(key, uid);
                    paid += 1;
                }
                Err(e) => {
                    let err = self.delete_error(w, namespace, &name, &e);
                    if unreachable(&e) {
                        break;
                    }
                    // Refused (e.g. forbidden): tried again with the next probe.
                    tracing::warn!("{err}; tried again in {} s", PROBE.as_secs());
                }
            }
        }
        if paid > 0 {
            tracing::info!(
                "{paid} deletions owed to the API server made, {} left",
                self.records.owed.len()
            );
            if let Err(e) = self.save_local() {
                // The deletions are made; a stale file only repeats them (404 is done).
                tracing::warn!("{e}");
            }
        }
    }

    /// While the API server is away (at most every [`PROBE`]): pays what is owed, or asks for
    /// the ledger to learn whether it answers again.
    fn probe(&mut self) {
        let now = Instant::now();
        if now < self.next_probe {
            return;
        }
        self.next_probe = now + PROBE;
        if !self.records.owed.is_empty() {
            self.pay_owed();
            return;
        }
        let name = node_record_name(&self.node);
        match self
            .runtime
            .block_on(self.api(Watch::Ids, None).get_opt(&name))
        {
            Ok(_) => self.reached(),
            Err(e) => {
                self.api_error(format!("Claim {name}"), "get", &e);
            }
        }
    }

    /// Creates claim `name` (`spec`); whether it is held as `spec` says: created, or there
    /// already with the same spec — or, for an id or locator, the same holder (ours, from an
    /// earlier attempt). Otherwise (the object was read into the records) `f` runs again.
    fn create_claim(&mut self, name: &str, spec: &ClaimSpec) -> Result<Written, StateError> {
        let mine = spec.holder == self.node;
        let owners = if mine { self.node_owner() } else { Vec::new() };
        let mut labels = serde_json::Map::new();
        if matches!(
            spec.kind,
            ClaimKind::Node | ClaimKind::NodeId | ClaimKind::Locator
        ) {
            labels.insert(NODE_LABEL.into(), label_value(&spec.holder).into());
        } else {
            labels.insert(NETWORK_LABEL.into(), label_value(&spec.holder).into());
        }
        let o = self.object(
            Watch::Ids,
            None,
            name,
            labels.into(),
            owners,
            serde_json::to_value(spec).unwrap_or_default(),
        )?;
        let Some(there) = self.create(Watch::Ids, &o)? else {
            return Ok(Written::Done);
        };
        let there: Option<ClaimSpec> = serde_json::from_value(there).ok();
        let held = there.is_some_and(|t| {
            t == *spec
                || (matches!(
                    spec.kind,
                    ClaimKind::NetworkId | ClaimKind::NodeId | ClaimKind::Locator
                ) && t.kind == spec.kind
                    && t.holder == spec.holder)
        });
        Ok(if held {
            Written::Done
        } else {
            Written::Conflict
        })
    }

    /// Deletes every claim of `holder` of the `kinds` given.
    fn delete_claims(&mut self, holder: &str, kinds: &[ClaimKind]) -> Result<(), StateError> {
        let of: Vec<(String, String)> = self
            .records
            .ids
            .iter()
            .filter(|(_, c)| c.spec.holder == holder && kinds.contains(&c.spec.kind))
            .map(|(name, c)| (name.clone(), c.uid.clone()))
            .collect();
        for (name, uid) in of {
            self.delete(Watch::Ids, None, &name, &uid)?;
        }
        Ok(())
    }

    /// Writes the networks and nodes `next` registered or removed: a network's id claim, then
    /// its record; this node's locator and id claims, then its record (with reservation
    /// `reserve`). A record there already (another control registered the network first)
    /// means the view was stale: this control's id claim is deleted and `f` runs again.
    fn write_ids(&mut self, next: &Ipam, reserve: u32) -> Result<Written, StateError> {
        let (old, new) = (self.ipam.ledger(), next.ledger());
        let old_networks: BTreeMap<&str, u32> = old.networks().map(|(n, id, _)| (n, id)).collect();
        let new_networks: BTreeSet<&str> = new.networks().map(|(n, _, _)| n).collect();
        for (name, id, def) in new.networks() {
            if old_networks.get(name) == Some(&id) {
                continue;
            }
            let [(id_name, id_claim), (record_name, record)] = network_claims(name, id, def);
            if let Written::Conflict = self.create_claim(&id_name, &id_claim)? {
                return Ok(Written::Conflict);
            }
            if let Written::Conflict = self.create_claim(&record_name, &record)? {
                if let Some(uid) = self.records.ids.get(&id_name).map(|c| c.uid.clone()) {
                    self.delete(Watch::Ids, None, &id_name, &uid)?;
                }
                return Ok(Written::Conflict);
            }
        }
        for name in old_networks.keys().filter(|n| !new_networks.contains(*n)) {
            self.delete_claims(name, &[ClaimKind::Network, ClaimKind::NetworkId])?;
        }
        let old_nodes: BTreeSet<&str> = old.nodes().map(|(n, ..)| n).collect();
        let new_nodes: BTreeSet<&str> = new.nodes().map(|(n, ..)| n).collect();
        for (name, id, locator, _) in new.nodes() {
            if old_nodes.contains(name) {
                continue;
            }
            if name != self.node {
                return Err(StateError::Ipam(IpamError::RegisteredByItsOwnControl {
                    node: name.to_owned(),
                }));
            }
            for (claim_name, claim) in node_claims(name, id, locator, reserve) {
                if let Written::Conflict = self.create_claim(&claim_name, &claim)? {
                    return Ok(Written::Conflict);
                }
            }
            self.reserved = reserve;
        }
        for name in old_nodes.iter().filter(|n| !new_nodes.contains(*n)) {
            self.delete_claims(
                name,
                &[ClaimKind::Node, ClaimKind::NodeId, ClaimKind::Locator],
            )?;
        }
        Ok(Written::Done)
    }

    /// Moves this node's endpoint-id reservation to `reserve`: its record, updated
    /// conditionally on the version it was read at.
    fn write_reservation(&mut self, reserve: u32) -> Result<Written, StateError> {
        let name = node_record_name(&self.node);
        let Some(record) = self.records.ids.get(&name).cloned() else {
            // Not recorded (yet, or any more): registration writes it.
            return Ok(Written::Conflict);
        };
        let spec = ClaimSpec {
            next_endpoint: Some(reserve),
            ..record.spec.clone()
        };
        let owners = self.node_owner();
        let mut o = self.object(
            Watch::Ids,
            None,
            &name,
            serde_json::to_value(&record.labels).unwrap_or_default(),
            owners,
            serde_json::to_value(&spec).unwrap_or_default(),
        )?;
        o.metadata.resource_version = Some(record.rv.clone());
        let written = self.update(Watch::Ids, &o)?;
        if let Written::Done = written {
            self.reserved = reserve;
        }
        Ok(written)
    }

    /// Writes what `next` changed of the records `dirty` names (see the module docs).
    fn write(&mut self, next: &Ipam, dirty: &BTreeSet<Dirty>) -> Result<Written, StateError> {
        let local = next.next_endpoint(&self.node).unwrap_or(1);
        // Registering this node, or finding its reservation used up, reserves the next chunk:
        // the node's first ADDs then write no record.
        let registered = next.node(&self.node).is_some();
        let reserve = if local > self.reserved || (registered && local == self.reserved) {
            local.saturating_add(ENDPOINT_CHUNK)
        } else {
            self.reserved
        };
        if dirty.contains(&Dirty::Ledger) {
            if let Written::Conflict = self.write_ids(next, reserve)? {
                return Ok(Written::Conflict);
            }
        }
        if registered && local > self.reserved {
            if let Written::Conflict = self.write_reservation(reserve)? {
                return Ok(Written::Conflict);
            }
        }
        let me = self.node.clone();
        // Blocks taken, then l2 addresses claimed, then endpoints made or changed.
        for d in dirty {
            if let Dirty::Blocks { network, node } = d {
                if *node != me {
                    continue;
                }
                let (old, new) = (
                    self.ipam.node_blocks(network, node),
                    next.node_blocks(network, node),
                );
                if !new.is_empty() && old != new {
                    if let Written::Conflict = self.create_blocks(network, &new)? {
                        return Ok(Written::Conflict);
                    }
                }
            }
        }
        let leases: Vec<(Option<EndpointLease>, Option<EndpointLease>)> = dirty
            .iter()
            .filter_map(|d| match d {
                Dirty::Lease(k) => Some((self.ipam.lease(k).cloned(), next.lease(k).cloned())),
                _ => None,
            })
            .filter(|(old, new)| old.as_ref().or(new.as_ref()).is_some_and(|l| l.node == me))
            .collect();
        for (old, new) in &leases {
            let Some(new) = new else { continue };
            if next.network_kind(&new.network) == Some(NetworkType::L2) {
                for a in &new.addresses {
                    let held = old
                        .as_ref()
                        .is_some_and(|o| o.addresses.iter().any(|x| x.address == a.address));
                    if !held {
                        if let Written::Conflict = self.claim(new, a.address)? {
                            return Ok(Written::Conflict);
                        }
                    }
                }
            }
            if old.as_ref() != Some(new) {
                if let Written::Conflict = self.put_endpoint(next, new)? {
                    return Ok(Written::Conflict);
                }
            }
        }
        // Then what was released: endpoints, their claims, blocks given back.
        for (old, new) in &leases {
            let Some(old) = old else { continue };
            if new.is_none() {
                let name = endpoint_name(old);
                let key = (old.pod.namespace.clone(), name.clone());
                let uid = self
                    .records
                    .endpoints
                    .get(&key)
                    .map(|e| e.uid.clone())
                    .unwrap_or_default();
                self.delete(Watch::MyEndpoints, Some(&old.pod.namespace), &name, &uid)?;
            }
            if self.ipam.network_kind(&old.network) == Some(NetworkType::L2) {
                for a in &old.addresses {
                    let kept = new
                        .as_ref()
                        .is_some_and(|n| n.addresses.iter().any(|x| x.address == a.address));
                    if !kept {
                        let name = neighbor_name(&old.network, a.address);
                        let uid = self
                            .records
                            .claims
                            .get(&name)
                            .map(|c| c.uid.clone())
                            .unwrap_or_default();
                        self.delete(Watch::Claims, None, &name, &uid)?;
                    }
                }
            }
        }
        for d in dirty {
            if let Dirty::Blocks { network, node } = d {
                let old = self.ipam.node_blocks(network, node);
                if *node == me && !old.is_empty() && next.node_blocks(network, node).is_empty() {
                    let name = allocation_name(network, &old);
                    let uid = self
                        .records
                        .blocks
                        .get(&name)
                        .map(|b| b.uid.clone())
                        .unwrap_or_default();
                    self.delete(Watch::Allocations, None, &name, &uid)?;
                }
            }
        }
        Ok(Written::Done)
    }

    fn create_blocks(
        &mut self,
        network: &str,
        blocks: &[ipnet::IpNet],
    ) -> Result<Written, StateError> {
        let name = allocation_name(network, blocks);
        let spec = allocation_spec(network, &self.node, blocks);
        let owners = self.node_owner();
        let o = self.object(
            Watch::Allocations,
            None,
            &name,
            self.labels(network, false),
            owners,
            serde_json::to_value(&spec).unwrap_or_default(),
        )?;
        match self.create(Watch::Allocations, &o)? {
            None => Ok(Written::Done),
            Some(there)
                if serde_json::from_value::<AllocationSpec>(there.clone()).ok() == Some(spec) =>
            {
                Ok(Written::Done)
            }
            Some(_) => Ok(Written::Conflict),
        }
    }

    fn claim(&mut self, l: &EndpointLease, a: IpAddr) -> Result<Written, StateError> {
        let name = neighbor_name(&l.network, a);
        let spec = neighbor_spec(l, a);
        let owners = self.node_owner();
        let o = self.object(
            Watch::Claims,
            None,
            &name,
            self.labels(&l.network, true),
            owners,
            serde_json::to_value(&spec).unwrap_or_default(),
        )?;
        match self.create(Watch::Claims, &o)? {
            None => Ok(Written::Done),
            // Ours (made by a write that failed before its endpoint): adopted.
            Some(_)
                if self.records.claims.get(&name).is_some_and(|c| {
                    c.spec == spec && c.labels.get(NODE_LABEL) == Some(&label_value(&self.node))
                }) =>
            {
                Ok(Written::Done)
            }
            Some(_) => Ok(Written::Conflict),
        }
    }

    fn put_endpoint(&mut self, next: &Ipam, l: &EndpointLease) -> Result<Written, StateError> {
        let name = endpoint_name(l);
        let ns = l.pod.namespace.clone();
        let spec = next.endpoint_spec(l);
        let owners: Vec<serde_json::Value> = (!l.pod.uid.is_empty())
            .then(
                || json!({"apiVersion": "v1", "kind": "Pod", "name": l.pod.name, "uid": l.pod.uid}),
            )
            .into_iter()
            .collect();
        let l2 = next.network_kind(&l.network) == Some(NetworkType::L2);
        let mut o = self.object(
            Watch::MyEndpoints,
            Some(&ns),
            &name,
            self.labels(&l.network, l2),
            owners,
            serde_json::to_value(&spec).unwrap_or_default(),
        )?;
        let existing = self
            .records
            .endpoints
            .get(&(ns.clone(), name.clone()))
            .cloned();
        let what = format!("NetworkEndpoint {ns}/{name}");
        match existing {
            None => match self.create(Watch::MyEndpoints, &o)? {
                None => Ok(Written::Done),
                Some(there) => {
                    let there: Option<NetworkEndpointSpec> = serde_json::from_value(there).ok();
                    match there {
                        Some(t) if t == spec => Ok(Written::Done),
                        Some(t)
                            if t.container_id == spec.container_id
                                && t.interface == spec.interface =>
                        {
                            // A stale version of this attachment's object: replaced below on
                            // the next round, from the records.
                            Ok(Written::Conflict)
                        }
                        Some(t) => Err(StateError::Api {
                            object: what,
                            op: "create",
                            reason: format!(
                                "the name is taken by container {} interface {}'s endpoint",
                                t.container_id, t.interface
                            ),
                        }),
                        None => Ok(Written::Conflict),
                    }
                }
            },
            Some(e) if e.spec == spec => Ok(Written::Done),
            Some(e) => {
                o.metadata.resource_version = Some(e.rv.clone());
                self.update(Watch::MyEndpoints, &o)
            }
        }
    }

    /// Replaces `o` (conditional on its resourceVersion) and stores the answer; when it moved
    /// or went meanwhile, reads it into the records instead: `f` runs again.
    fn update(&mut self, w: Watch, o: &DynamicObject) -> Result<Written, StateError> {
        let ns = o.metadata.namespace.clone();
        let name = o.metadata.name.clone().unwrap_or_default();
        let what = match &ns {
            Some(ns) => format!("{} {ns}/{name}", kind_name(w)),
            None => format!("{} {name}", kind_name(w)),
        };
        let api = self.api(w, ns.as_deref());
        let result = self.runtime.block_on(api.replace(&name, &Self::pp(), o));
        if result.is_ok() || result.as_ref().is_err_and(|e| status(e).is_some()) {
            self.reached();
        }
        match result {
            Ok(made) => {
                self.store(w, &made)?;
                Ok(Written::Done)
            }
            Err(e) if matches!(status(&e), Some((409 | 404, _))) => {
                match self.runtime.block_on(api.get_opt(&name)) {
                    Ok(Some(t)) => {
                        self.store(w, &t)?;
                    }
                    Ok(None) => self.unrecord(w, ns.as_deref().unwrap_or_default(), &name, ""),
                    Err(e) => return Err(self.api_error(what, "get", &e)),
                }
                Ok(Written::Conflict)
            }
            Err(e) => Err(self.api_error(what, "update", &e)),
        }
    }

    // ---- migration ------------------------------------------------------------------------------

    /// Migrates what earlier versions kept in ConfigMap `lace-ipam` (see the module docs):
    /// a single-object state to objects and a ledger, then the ledger to claims.
    fn migrate(&mut self) -> Result<(), StateError> {
        self.migrate_state()?;
        self.migrate_ledger()
    }

    /// ConfigMap `lace-ipam` and the state it keeps under `key`, if it does, checked by
    /// `load` as the version that wrote it read it.
    fn kept_state(
        &self,
        key: &str,
        load: fn(&IpamState, IpamConfig) -> Result<Ipam, IpamError>,
    ) -> Result<Option<(ConfigMap, IpamState)>, StateError> {
        let Some(cm) = self
            .runtime
            .block_on(self.ledger_api.get_opt(OBJECT))
            .map_err(|e| self.api_error(self.ledger_object(), "get", &e))?
        else {
            return Ok(None);
        };
        let Some(text) = cm.data.as_ref().and_then(|d| d.get(key)) else {
            return Ok(None);
        };
        let corrupt = |e: String| self.corrupt(self.ledger_object(), format!("data.{key}: {e}"));
        let state: IpamState = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
        load(&state, self.config).map_err(|e| corrupt(e.to_string()))?;
        Ok(Some((cm, state)))
    }

    /// Migrates the ledger (`data.ledger.json`) to claims: every network's and node's, then
    /// the ConfigMap keeps only [`MOVED_KEY`], in one conditional write.
    fn migrate_ledger(&mut self) -> Result<(), StateError> {
        loop {
            let Some((cm, ledger)) = self.kept_state(LEDGER_KEY, Ipam::from_ledger)? else {
                return Ok(());
            };
            let claims = ledger_claims(&ledger);
            tracing::info!(
                "migrating the ledger of {} to {} Claims",
                self.ledger_object(),
                claims.len()
            );
            for (name, spec) in &claims {
                // Written already by an earlier attempt or another control's migration.
                if let Written::Conflict = self.create_claim(name, spec)? {
                    return Err(self.corrupt(
                        format!("Claim {name}"),
                        format!(
                            "it holds {:?} of {}, not what {} says ({:?} of {}): a control \
                             of this version registered it before the ledger was migrated",
                            self.records.ids.get(name).map(|c| c.spec.kind),
                            self.records
                                .ids
                                .get(name)
                                .map_or("", |c| c.spec.holder.as_str()),
                            self.ledger_object(),
                            spec.kind,
                            spec.holder
                        ),
                    ));
                }
            }
            let mut next = cm.clone();
            next.data = Some(
                [(
                    MOVED_KEY.to_owned(),
                    "lace-control keeps network and node ids in Claims (claims.lace-cni.io) \
                     since ADR 0045; this ConfigMap is kept so that an older lace-control \
                     refuses to start instead of allocating them again"
                        .to_owned(),
                )]
                .into(),
            );
            match self
                .runtime
                .block_on(self.ledger_api.replace(OBJECT, &Self::pp(), &next))
            {
                Ok(_) => {
                    tracing::info!("migrated {} to Claims", self.ledger_object());
                    self.records = Records::default();
                    return Ok(());
                }
                // Changed meanwhile (an older control reserved endpoint ids): again.
                Err(e) if matches!(status(&e), Some((409, _))) => continue,
                Err(e) => return Err(self.api_error(self.ledger_object(), "write", &e)),
            }
        }
    }

    /// Migrates a single-object state (`data.state.json`) to objects and a ledger.
    fn migrate_state(&mut self) -> Result<(), StateError> {
        let mut written: BTreeSet<(Watch, String, String)> = BTreeSet::new();
        loop {
            let Some((cm, state)) = self.kept_state(LEGACY_KEY, Ipam::from_state)? else {
                return Ok(());
            };
            let old = Ipam::from_state(&state, self.config).map_err(|e| {
                self.corrupt(self.ledger_object(), format!("data.{LEGACY_KEY}: {e}"))
            })?;
            tracing::info!(
                "migrating the allocation state of {} to one object per allocation: {} blocks, \
                 {} endpoints",
                self.ledger_object(),
                state.blocks().len(),
                state.leases().len()
            );
            let mut now = BTreeSet::new();
            let mut namespaces = BTreeMap::new();
            for l in old.leases() {
                if !namespaces.contains_key(&l.pod.namespace) {
                    let api: Api<k8s_openapi::api::core::v1::Namespace> =
                        Api::all(self.client.clone());
                    let there = self
                        .runtime
                        .block_on(api.get_opt(&l.pod.namespace))
                        .map_err(|e| {
                            self.api_error(format!("Namespace {}", l.pod.namespace), "get", &e)
                        })?
                        .is_some();
                    namespaces.insert(l.pod.namespace.clone(), there);
                }
            }
            for ((network, node), blocks) in old.allocations() {
                let name = allocation_name(&network, &blocks);
                let o = self.object(
                    Watch::Allocations,
                    None,
                    &name,
                    self.labels(&network, false),
                    Vec::new(),
                    serde_json::to_value(allocation_spec(&network, &node, &blocks))
                        .unwrap_or_default(),
                )?;
                // Present already: written by an earlier attempt, the same block.
                self.create(Watch::Allocations, &o)?;
                now.insert((Watch::Allocations, String::new(), name));
            }
            for l in old.leases() {
                if namespaces.get(&l.pod.namespace) != Some(&true) {
                    tracing::warn!(
                        "not migrating the endpoint of pod {} (container {}): its namespace is \
                         gone, and the pod with it",
                        l.pod,
                        l.key.container_id
                    );
                    continue;
                }
                let l2 = old.network_kind(&l.network) == Some(NetworkType::L2);
                let labels = |s: &Self| {
                    let mut v = s.labels(&l.network, l2);
                    v[NODE_LABEL] = label_value(&l.node).into();
                    v
                };
                if l2 {
                    for a in &l.addresses {
                        let name = neighbor_name(&l.network, a.address);
                        let o = self.object(
                            Watch::Claims,
                            None,
                            &name,
                            labels(self),
                            Vec::new(),
                            serde_json::to_value(neighbor_spec(l, a.address)).unwrap_or_default(),
                        )?;
                        self.create(Watch::Claims, &o)?;
                        now.insert((Watch::Claims, String::new(), name));
                    }
                }
                let name = endpoint_name(l);
                let owners: Vec<serde_json::Value> = (!l.pod.uid.is_empty())
                    .then(|| json!({"apiVersion": "v1", "kind": "Pod", "name": l.pod.name, "uid": l.pod.uid}))
                    .into_iter()
                    .collect();
                let o = self.object(
                    Watch::MyEndpoints,
                    Some(&l.pod.namespace),
                    &name,
                    labels(self),
                    owners,
                    serde_json::to_value(old.endpoint_spec(l)).unwrap_or_default(),
                )?;
                self.create(Watch::MyEndpoints, &o)?;
                now.insert((Watch::MyEndpoints, l.pod.namespace.clone(), name));
            }
            written.extend(now.iter().cloned());
            let ledger = serde_json::to_string(&old.ledger()).map_err(|e| {
                self.corrupt(
                    self.ledger_object(),
                    format!("cannot serialise the ledger: {e}"),
                )
            })?;
            let mut next = cm.clone();
            next.data = Some([(LEDGER_KEY.to_owned(), ledger)].into());
            match self
                .runtime
                .block_on(self.ledger_api.replace(OBJECT, &Self::pp(), &next))
            {
                Ok(_) => {
                    // Objects of an earlier attempt that the state no longer holds (another
                    // control released them in between).
                    for (w, ns, name) in written.difference(&now) {
                        let ns = (!ns.is_empty()).then_some(ns.as_str());
                        let api = self.api(*w, ns);
                        let _ = self
                            .runtime
                            .block_on(api.delete(name, &DeleteParams::default()));
                    }
                    self.records = Records::default();
                    tracing::info!("migrated {}", self.ledger_object());
                    return Ok(());
                }
                // Changed meanwhile (an older control wrote, or another migrated): again.
                Err(e) if matches!(status(&e), Some((409, _))) => continue,
                Err(e) => return Err(self.api_error(self.ledger_object(), "write", &e)),
            }
        }
    }
}

/// A record's change, for the view.
#[derive(Debug)]
enum Change {
    /// A network's or node's claims: the view is rebuilt.
    Ids,
    Block(Option<AllocationSpec>, AllocationSpec),
    BlockGone(AllocationSpec),
    Claim(Option<NeighborSpec>, Option<NeighborSpec>),
    Endpoint(
        String,
        Option<Box<NetworkEndpointSpec>>,
        Option<Box<NetworkEndpointSpec>>,
    ),
}

/// The view of `node`'s control in a store that many nodes write at once: each node takes
/// blocks from its own place in the subnet ([`Ipam::spread_blocks`]), so block claims rarely
/// conflict, and registers only itself ([`Ipam::register_only`]).
fn shaped(mut ipam: Ipam, node: &str) -> Ipam {
    ipam.spread_blocks();
    ipam.register_only(node);
    ipam
}

/// The kind a watch's objects are deleted under (both endpoint watches are one kind).
fn kind_of(w: Watch) -> Watch {
    match w {
        Watch::OtherEndpoints => Watch::MyEndpoints,
        other => other,
    }
}

fn block_records(s: &AllocationSpec) -> Vec<BlockRecord> {
    s.prefixes
        .iter()
        .filter_map(|p| p.parse().ok())
        .map(|prefix| BlockRecord {
            network: s.network.clone(),
            node: s.node.clone(),
            prefix,
        })
        .collect()
}

fn claim_of(s: &NeighborSpec) -> Option<(String, IpAddr)> {
    Some((s.network.clone(), s.address.parse().ok()?))
}

impl IpamStore for ClusterState {
    fn refresh(&mut self) -> Result<bool, StateError> {
        if self.away.get() || !self.records.owed.is_empty() {
            self.probe();
        }
        let changed = self.drain()?;
        if changed {
            self.collect_claims();
        }
        Ok(changed)
    }

    fn read<R>(&self, f: impl FnOnce(&Ipam) -> R) -> R {
        f(&self.ipam)
    }

    fn api_counts(&self) -> (u64, u64) {
        (self.conflicts, self.api_errors.get())
    }

    fn reachable(&self) -> bool {
        !self.away.get()
    }

    fn owed(&self) -> usize {
        self.records.owed.len()
    }

    fn mutate<R>(
        &mut self,
        mut f: impl FnMut(&mut Ipam) -> Result<R, IpamError>,
    ) -> Result<R, StateError> {
        self.drain()?;
        // What is owed first: a write must not meet an object this store already released.
        if !self.records.owed.is_empty() {
            self.pay_owed();
        }
        loop {
            let mut next = self.ipam.clone();
            next.start_journal();
            let out = f(&mut next)?;
            let dirty = next.take_journal();
            let local = next.next_endpoint(&self.node).unwrap_or(1);
            if dirty.is_empty() && local <= self.reserved {
                return Ok(out);
            }
            match self.write(&next, &dirty) {
                Ok(Written::Done) => {
                    self.ipam = next;
                    if let Err(e) = self.save_local() {
                        // The API server has it; the copy only serves a start while it is away.
                        tracing::warn!("{e}");
                    }
                    return Ok(out);
                }
                Ok(Written::Conflict) => {
                    // Another control wrote first: the view again, with what it wrote.
                    self.conflicts += 1;
                    self.rebuild()?;
                }
                Err(e) => {
                    // What was written stays in the records; the view follows them.
                    self.rebuild()?;
                    return Err(e);
                }
            }
        }
    }
}
