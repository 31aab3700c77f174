//! The learning records in the API server (Kubernetes mode, ADR 0032): [`ObjectStore`], a
//! [`LearnStore`] that keeps each [`MacRecord`] as an `FDBEntry` and each learned address as a
//! `Neighbor`, so that every node's control reads and writes the same records.
//!
//! | record | object | name |
//! |---|---|---|
//! | a learned or shared MAC: active and pending location, sequence, origin, addresses, last seen | `FDBEntry` | `<network>.<MAC>` ([`fdb_entry_name`]) |
//! | an address learned with a MAC | `Neighbor`, `learned: true` | `<network>.<address>` ([`neighbor_name`]) |
//!
//! Both carry the label [`LEARNED_LABEL`]` = "true"`; the store reads only objects with it.
//!
//! - The `FDBEntry` is the record: the table is built from the entries alone, so one object
//!   holds everything a record is. The `Neighbor`s follow the entries: they are what the IPAM
//!   of every node reads as claims ([`crate::daemon::cluster_state`]: a learned address is never
//!   handed to a pod) and what `kubectl get neighbors` shows. A learned address whose
//!   `Neighbor` name an endpoint's claim holds stays in the entry and gets no `Neighbor`.
//! - [`ObjectStore::open`] watches both kinds (a thread with its own client) and waits for
//!   their first lists. `refresh` applies what the watches delivered since: no request to the
//!   API server. Every event bumps a counter ([`ObjectStore::changes`]) the learn intake thread
//!   polls, so another node's change wakes the event loop at once.
//! - `mutate(f)` runs `f` on the table and writes the objects of the records that differ,
//!   each conditional on the resourceVersion it was read at (create for a new name, update
//!   with `metadata.resourceVersion`, delete with a precondition). A `409` (or a `404` on an
//!   update) means the view was stale: the object is read again, the table rebuilt, and `f`
//!   runs again on it — at most [`MAX_ATTEMPTS`] times, then
//!   [`LearnStoreError::Contended`]. Objects written before the conflict stay: `f` finds them.
//! - A watch event older than the version a write or a read after a conflict returned (same
//!   uid, a lower resourceVersion) is not applied: `f` always runs on the newest version read.
//! - An entry that does not parse or validate, or whose name is not its network's and MAC's,
//!   is left out of the table and logged once ([`ObjectStore::left_out`]); the others are
//!   read as usual. A record this control writes under that name replaces it.
//! - A learned `Neighbor` is deleted when a write takes its address from its MAC, removes its
//!   MAC's record, or finds it without any entry for its MAC (read again first: the two
//!   kinds' watches deliver in no common order).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use ::kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams, Preconditions};
use ::kube::runtime::watcher;
use serde_json::json;

use super::store::{LearnStore, LearnStoreError};
use super::{LearnedTable, Location, MacRecord, Origin, Outcome};
use crate::api::{FDBEntry, FdbEntrySpec, FdbLocation, Neighbor, NeighborSpec};
use crate::daemon::cluster_state::{label_value, status, SYNC_TIMEOUT};
use crate::ipam::{fdb_entry_name, neighbor_name, NETWORK_LABEL};
use crate::source::kubernetes::{older, FirstLists, WatchFailure};
use crate::source::kubernetes::{KubernetesConfig, TaggedEvent, WatchThread};

/// The label of every object of the learning records (`"true"`).
pub const LEARNED_LABEL: &str = "lace-cni.io/learned";
/// Writes of one mutation that may meet a conflict before it gives up.
pub const MAX_ATTEMPTS: u32 = 8;

/// The two kinds of objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Entries,
    Neighbors,
}

impl Kind {
    const ALL: [Kind; 2] = [Kind::Entries, Kind::Neighbors];

    fn resource(self) -> ApiResource {
        match self {
            Kind::Entries => ApiResource::erase::<FDBEntry>(&()),
            Kind::Neighbors => ApiResource::erase::<Neighbor>(&()),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Entries => "FDBEntry",
            Kind::Neighbors => "Neighbor",
        }
    }
}

type WatchEvent = TaggedEvent<Kind>;

/// An object as last read: identity, version and what it says (`Err`: why it is left out).
#[derive(Debug, Clone)]
struct Stored<S> {
    uid: String,
    rv: String,
    spec: Result<S, String>,
}

/// How a write went.
enum Written {
    Done,
    /// Another writer came first (the object was read again): `f` runs again.
    Conflict,
}

/// The learning records as objects in the API server (see the module docs).
pub struct ObjectStore {
    node: String,
    runtime: tokio::runtime::Runtime,
    client: ::kube::Client,
    events: mpsc::Receiver<WatchEvent>,
    relisting: BTreeMap<Kind, Vec<DynamicObject>>,
    entries: BTreeMap<String, Stored<MacRecord>>,
    neighbors: BTreeMap<String, Stored<NeighborSpec>>,
    /// Objects this store deleted whose deletion the watch has not delivered yet → their uid.
    deleted: BTreeMap<(Kind, String), String>,
    table: LearnedTable,
    left_out: BTreeMap<String, String>,
    changes: Arc<AtomicU64>,
    conflicts: u64,
    watches: Option<WatchThread>,
}

impl std::fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStore")
            .field("node", &self.node)
            .field("entries", &self.entries.len())
            .field("neighbors", &self.neighbors.len())
            .field("conflicts", &self.conflicts)
            .finish_non_exhaustive()
    }
}

fn api_err(op: &'static str, reason: impl std::fmt::Display) -> LearnStoreError {
    LearnStoreError::Api {
        op,
        reason: reason.to_string(),
    }
}

/// The `FDBEntry` spec of a record.
pub fn entry_spec(r: &MacRecord) -> FdbEntrySpec {
    let last_seen = i64::try_from(r.last_seen_ms)
        .ok()
        .and_then(|ms| k8s_openapi::jiff::Timestamp::from_millisecond(ms).ok())
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    FdbEntrySpec {
        network: r.network.clone(),
        mac: r.mac.to_string(),
        node: r.active.node.clone(),
        sequence: r.sequence,
        learned: r.origin == Origin::Learned,
        endpoint_id: Some(r.active.endpoint),
        pending: r.pending.as_ref().map(|p| FdbLocation {
            node: p.node.clone(),
            endpoint_id: p.endpoint,
        }),
        addresses: r.addresses.iter().map(ToString::to_string).collect(),
        last_seen: Some(last_seen.to_string()),
    }
}

/// The record an `FDBEntry` named `name` holds, or why it holds none.
pub fn entry_record(name: &str, spec: &FdbEntrySpec) -> Result<MacRecord, String> {
    crate::api::validate::validate_fdb_entry(name, spec).map_err(|e| e.to_string())?;
    let mac = crate::api::validate::parse_mac(&spec.mac)
        .ok_or_else(|| format!("spec.mac {:?} is not a MAC address", spec.mac))?;
    let expected = fdb_entry_name(&spec.network, mac);
    if name != expected {
        return Err(format!(
            "its name is not {expected}, the name of its network and MAC; delete it"
        ));
    }
    let missing = |field: &str| {
        format!(
            "spec.{field} is missing (not written by lace-control's learning); delete it — the \
             MAC is learned again from the VM's next announcement"
        )
    };
    let endpoint = spec.endpoint_id.ok_or_else(|| missing("endpointId"))?;
    let last_seen = spec
        .last_seen
        .as_deref()
        .ok_or_else(|| missing("lastSeen"))?;
    let last_seen_ms = last_seen
        .parse::<k8s_openapi::jiff::Timestamp>()
        .map_err(|e| format!("spec.lastSeen {last_seen:?}: {e}"))?
        .as_millisecond();
    let addresses: BTreeSet<IpAddr> = spec
        .addresses
        .iter()
        .map(|a| a.parse().map_err(|_| format!("spec.addresses: {a:?}")))
        .collect::<Result<_, String>>()?;
    Ok(MacRecord {
        network: spec.network.clone(),
        mac,
        origin: if spec.learned {
            Origin::Learned
        } else {
            Origin::Identity
        },
        addresses,
        active: Location {
            node: spec.node.clone(),
            endpoint,
        },
        pending: spec.pending.as_ref().map(|p| Location {
            node: p.node.clone(),
            endpoint: p.endpoint_id,
        }),
        sequence: spec.sequence,
        last_seen_ms: u64::try_from(last_seen_ms).unwrap_or(0),
    })
}

/// The learned `Neighbor`s a table calls for, by name.
fn neighbors_of(table: &LearnedTable) -> BTreeMap<String, NeighborSpec> {
    table
        .records()
        .values()
        .filter(|r| r.origin == Origin::Learned)
        .flat_map(|r| {
            r.addresses.iter().map(move |a| {
                (
                    neighbor_name(&r.network, *a),
                    NeighborSpec {
                        network: r.network.clone(),
                        address: a.to_string(),
                        mac: r.mac.to_string(),
                        learned: true,
                    },
                )
            })
        })
        .collect()
}

fn pp() -> PostParams {
    PostParams {
        field_manager: Some(crate::daemon::api_status::FIELD_MANAGER.into()),
        ..PostParams::default()
    }
}

impl ObjectStore {
    /// Connects as `kube` says, for node `kube.node`, and reads every record (waiting up to
    /// [`SYNC_TIMEOUT`] for the first lists).
    pub fn open(kube: &KubernetesConfig) -> Result<ObjectStore, LearnStoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| api_err("start the client runtime", e))?;
        let client = runtime
            .block_on(crate::source::kubernetes::client(kube))
            .map_err(|e| api_err("connect", e))?;
        let (tx, rx) = mpsc::channel();
        let mut s = ObjectStore {
            node: kube.node.clone(),
            runtime,
            client,
            events: rx,
            relisting: BTreeMap::new(),
            entries: BTreeMap::new(),
            neighbors: BTreeMap::new(),
            deleted: BTreeMap::new(),
            table: LearnedTable::new(),
            left_out: BTreeMap::new(),
            changes: Arc::new(AtomicU64::new(0)),
            conflicts: 0,
            watches: None,
        };
        s.start_watches(kube, tx)?;
        s.sync()?;
        Ok(s)
    }

    /// A counter the watch thread bumps with every event: what the learn intake thread polls
    /// to wake the loop when another control changed the records.
    pub fn changes(&self) -> Arc<AtomicU64> {
        self.changes.clone()
    }

    /// Writes redone after a conflict since this store was opened.
    pub fn conflicts(&self) -> u64 {
        self.conflicts
    }

    /// Objects left out of the table, and why: `FDBEntry <name>` or `Neighbor <name>`.
    pub fn left_out(&self) -> &BTreeMap<String, String> {
        &self.left_out
    }

    fn api(&self, k: Kind) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &k.resource())
    }

    fn start_watches(
        &mut self,
        kube: &KubernetesConfig,
        tx: mpsc::Sender<WatchEvent>,
    ) -> Result<(), LearnStoreError> {
        let changes = self.changes.clone();
        let watches = |client: &::kube::Client| {
            Kind::ALL
                .into_iter()
                .map(|k| {
                    let api = Api::all_with(client.clone(), &k.resource());
                    let cfg = watcher::Config::default().labels(&format!("{LEARNED_LABEL}=true"));
                    (k, api, cfg)
                })
                .collect()
        };
        let send = move |e| {
            if tx.send(e).is_err() {
                return false;
            }
            changes.fetch_add(1, Ordering::Release);
            true
        };
        self.watches = Some(
            WatchThread::spawn("learned-watch", kube, Kind::Entries, watches, send)
                .map_err(|e| api_err("start the watch thread", e))?,
        );
        Ok(())
    }

    /// Applies watch events until both kinds have listed once — or, when the API server
    /// cannot be reached ([`FirstLists`]), starts with nothing learned: what other nodes learned
    /// arrives through the watches once it answers.
    fn sync(&mut self) -> Result<(), LearnStoreError> {
        let wait = FirstLists::new(true);
        let mut listed = BTreeSet::new();
        let mut last_error: Option<String> = None;
        let mut failures: BTreeMap<Kind, WatchFailure> = BTreeMap::new();
        while listed.len() < Kind::ALL.len() {
            if wait.away(listed.len(), failures.values()) {
                tracing::warn!(
                    "the API server cannot be reached: starting with no learned MACs; they \
                     arrive through the watches once it answers"
                );
                return Ok(());
            }
            let received = match wait.wait() {
                Some(left) => self.events.recv_timeout(left).ok(),
                None => None,
            };
            let Some((k, e)) = received else {
                if wait.wait().is_some() {
                    continue;
                }
                return Err(api_err(
                    "list",
                    format!(
                        "no complete list within {} s{}; are the lace CRDs installed \
                         (kubectl apply -f deploy/crds)?",
                        SYNC_TIMEOUT.as_secs(),
                        last_error.map_or(String::new(), |e| format!(" ({e})"))
                    ),
                ));
            };
            match e {
                Ok(e) => {
                    if matches!(e, watcher::Event::InitDone) {
                        listed.insert(k);
                    }
                    self.handle(k, e);
                }
                Err(e) => {
                    last_error = Some(format!("{}: {e}", k.name()));
                    failures.insert(k, e);
                }
            }
        }
        self.table = self.build();
        Ok(())
    }

    /// Takes one watch event into the objects.
    fn handle(&mut self, k: Kind, e: watcher::Event<DynamicObject>) {
        match e {
            watcher::Event::Init => {
                self.relisting.insert(k, Vec::new());
            }
            watcher::Event::InitApply(o) => self.relisting.entry(k).or_default().push(o),
            watcher::Event::InitDone => {
                let listed = self.relisting.remove(&k).unwrap_or_default();
                self.deleted.retain(|(kind, _), _| *kind != k);
                // What the list lacks is gone; what it has is stored (unless this store read a
                // newer version of it since).
                let names: BTreeSet<String> = listed
                    .iter()
                    .filter_map(|o| o.metadata.name.clone())
                    .collect();
                let held: Vec<String> = match k {
                    Kind::Entries => self.entries.keys().cloned().collect(),
                    Kind::Neighbors => self.neighbors.keys().cloned().collect(),
                };
                let gone = held.into_iter().filter(|n| !names.contains(n));
                for n in gone {
                    self.forget(k, &n);
                }
                for o in &listed {
                    self.store(k, o);
                }
            }
            watcher::Event::Apply(o) => self.store(k, &o),
            watcher::Event::Delete(o) => {
                let name = o.metadata.name.clone().unwrap_or_default();
                let uid = o.metadata.uid.clone().unwrap_or_default();
                if self.deleted.get(&(k, name.clone())) == Some(&uid) {
                    self.deleted.remove(&(k, name.clone()));
                }
                let ours = match k {
                    Kind::Entries => self.entries.get(&name).map(|s| &s.uid),
                    Kind::Neighbors => self.neighbors.get(&name).map(|s| &s.uid),
                };
                if ours == Some(&uid) {
                    self.forget(k, &name);
                }
            }
        }
    }

    fn forget(&mut self, k: Kind, name: &str) {
        match k {
            Kind::Entries => self.entries.remove(name).map(|_| ()),
            Kind::Neighbors => self.neighbors.remove(name).map(|_| ()),
        };
        self.left_out.remove(&format!("{} {name}", k.name()));
    }

    /// Stores object `o` (what it says, or why it is left out), unless this store deleted it.
    fn store(&mut self, k: Kind, o: &DynamicObject) {
        let name = o.metadata.name.clone().unwrap_or_default();
        let uid = o.metadata.uid.clone().unwrap_or_default();
        if self.deleted.get(&(k, name.clone())) == Some(&uid) {
            return;
        }
        let rv = o.metadata.resource_version.clone().unwrap_or_default();
        let held = match k {
            Kind::Entries => self.entries.get(&name).map(|s| (&s.uid, &s.rv)),
            Kind::Neighbors => self.neighbors.get(&name).map(|s| (&s.uid, &s.rv)),
        };
        if held.is_some_and(|(u, v)| *u == uid && older(&rv, v)) {
            // A watch event older than what a write or a read after a conflict returned.
            return;
        }
        let spec = o.data.get("spec").cloned().unwrap_or_default();
        let what = format!("{} {name}", k.name());
        let why = match k {
            Kind::Entries => {
                let rec = serde_json::from_value::<FdbEntrySpec>(spec)
                    .map_err(|e| format!("spec: {e}"))
                    .and_then(|s| entry_record(&name, &s));
                let why = rec.as_ref().err().cloned();
                self.entries.insert(name, Stored { uid, rv, spec: rec });
                why
            }
            Kind::Neighbors => {
                let n = serde_json::from_value::<NeighborSpec>(spec)
                    .map_err(|e| format!("spec: {e}"))
                    .and_then(|s| {
                        crate::api::validate::validate_neighbor(&name, &s)
                            .map(|()| s)
                            .map_err(|e| e.to_string())
                    });
                let why = n.as_ref().err().cloned();
                self.neighbors.insert(name, Stored { uid, rv, spec: n });
                why
            }
        };
        match why {
            Some(why) => {
                if self.left_out.get(&what) != Some(&why) {
                    tracing::warn!("{what} is left out of the learned MACs: {why}");
                    self.left_out.insert(what, why);
                }
            }
            None => {
                self.left_out.remove(&what);
            }
        }
    }

    /// The table the entries make: records inserted oldest seen first, so that an address two
    /// entries hold (a write that moved it, cut short) is the most recently seen MAC's.
    fn build(&self) -> LearnedTable {
        let mut records: Vec<&MacRecord> = self
            .entries
            .values()
            .filter_map(|s| s.spec.as_ref().ok())
            .collect();
        records.sort_by_key(|r| r.last_seen_ms);
        let mut t = LearnedTable::new();
        for r in records {
            t.insert(r.clone());
        }
        t
    }

    /// Applies every event the watches delivered; whether the table changed.
    fn drain(&mut self) -> bool {
        let mut any = false;
        while let Ok((k, e)) = self.events.try_recv() {
            match e {
                Ok(e) => {
                    any |= k == Kind::Entries;
                    self.handle(k, e);
                }
                Err(e) => tracing::warn!("{} watch: {e}; retrying with backoff", k.name()),
            }
        }
        if !any {
            return false;
        }
        let t = self.build();
        let changed = t != self.table;
        self.table = t;
        changed
    }

    /// Reads object `name` again (after a conflict); whether it is one of the records'
    /// objects (absent, or with [`LEARNED_LABEL`]) — another is not stored.
    fn reread(&mut self, k: Kind, name: &str) -> Result<bool, LearnStoreError> {
        let got = self
            .runtime
            .block_on(self.api(k).get_opt(name))
            .map_err(|e| api_err("get", format!("{} {name}: {e}", k.name())))?;
        self.deleted.remove(&(k, name.to_owned()));
        let ours = got.as_ref().is_none_or(|o| {
            o.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LEARNED_LABEL))
                .is_some_and(|v| v == "true")
        });
        match got {
            Some(o) if ours => self.store(k, &o),
            _ => self.forget(k, name),
        }
        Ok(ours)
    }

    fn object(
        &self,
        k: Kind,
        name: &str,
        network: &str,
        spec: serde_json::Value,
        rv: Option<&str>,
    ) -> Result<DynamicObject, LearnStoreError> {
        let ar = k.resource();
        let mut v = json!({
            "apiVersion": ar.api_version,
            "kind": ar.kind,
            "metadata": {
                "name": name,
                "labels": {LEARNED_LABEL: "true", NETWORK_LABEL: label_value(network)},
            },
            "spec": spec,
        });
        if let Some(rv) = rv {
            v["metadata"]["resourceVersion"] = rv.into();
        }
        serde_json::from_value(v).map_err(|e| api_err("build", format!("{} {name}: {e}", k.name())))
    }

    /// Creates `name`, or replaces it at version `rv`.
    fn put(
        &mut self,
        k: Kind,
        name: &str,
        network: &str,
        spec: serde_json::Value,
        rv: Option<&str>,
    ) -> Result<Written, LearnStoreError> {
        let o = self.object(k, name, network, spec, rv)?;
        let api = self.api(k);
        let (op, result) = match rv {
            None => ("create", self.runtime.block_on(api.create(&pp(), &o))),
            Some(_) => (
                "update",
                self.runtime.block_on(api.replace(name, &pp(), &o)),
            ),
        };
        match result {
            Ok(made) => {
                self.deleted.remove(&(k, name.to_owned()));
                self.store(k, &made);
                Ok(Written::Done)
            }
            Err(e) if matches!(status(&e), Some((409 | 404, _))) => {
                if self.reread(k, name)? {
                    return Ok(Written::Conflict);
                }
                match k {
                    // An endpoint's claim of the address: the learned address gets no
                    // Neighbor (it stays in its entry).
                    Kind::Neighbors => Ok(Written::Done),
                    Kind::Entries => Err(api_err(
                        op,
                        format!(
                            "FDBEntry {name} exists without the label {LEARNED_LABEL}=true, so \
                             it is not lace-control's record of that MAC; delete it"
                        ),
                    )),
                }
            }
            Err(e) => Err(api_err(op, format!("{} {name}: {e}", k.name()))),
        }
    }

    /// Deletes `name` if it is still at version `rv`; gone already is done.
    fn delete(
        &mut self,
        k: Kind,
        name: &str,
        uid: &str,
        rv: &str,
    ) -> Result<Written, LearnStoreError> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: Some(rv.to_owned()),
            }),
            ..DeleteParams::default()
        };
        match self.runtime.block_on(self.api(k).delete(name, &dp)) {
            Ok(_) => {}
            Err(e) if matches!(status(&e), Some((404, _))) => {}
            Err(e) if matches!(status(&e), Some((409, _))) => {
                self.reread(k, name)?;
                return Ok(Written::Conflict);
            }
            Err(e) => return Err(api_err("delete", format!("{} {name}: {e}", k.name()))),
        }
        self.deleted.insert((k, name.to_owned()), uid.to_owned());
        self.forget(k, name);
        Ok(Written::Done)
    }

    /// Writes what differs between the objects and `next` (see the module docs): entries
    /// made or changed, then their Neighbors, then what went.
    fn write(&mut self, next: &LearnedTable) -> Result<Written, LearnStoreError> {
        use Written::Conflict;
        let want: BTreeMap<String, &MacRecord> = next
            .records()
            .values()
            .map(|r| (fdb_entry_name(&r.network, r.mac), r))
            .collect();
        for (name, r) in &want {
            let rv = match self.entries.get(name) {
                Some(s) if s.spec.as_ref() == Ok(*r) => continue,
                Some(s) => Some(s.rv.clone()),
                None => None,
            };
            let spec = serde_json::to_value(entry_spec(r)).unwrap_or_default();
            if let Conflict = self.put(Kind::Entries, name, &r.network, spec, rv.as_deref())? {
                return Ok(Conflict);
            }
        }
        let neighbors = neighbors_of(next);
        for (name, n) in &neighbors {
            let rv = match self.neighbors.get(name) {
                Some(s) if s.spec.as_ref() == Ok(n) => continue,
                Some(s) => Some(s.rv.clone()),
                None => None,
            };
            let spec = serde_json::to_value(n).unwrap_or_default();
            if let Conflict = self.put(Kind::Neighbors, name, &n.network, spec, rv.as_deref())? {
                return Ok(Conflict);
            }
        }
        let before = neighbors_of(&self.table);
        // A Neighbor this write takes away that the watch has not shown yet (another node made
        // it, and the Neighbors' watch lags the entries'): read it, so that it goes too.
        let unseen: Vec<String> = before
            .keys()
            .filter(|n| !neighbors.contains_key(*n) && !self.neighbors.contains_key(*n))
            .cloned()
            .collect();
        for name in unseen {
            self.reread(Kind::Neighbors, &name)?;
        }
        let gone: Vec<(String, String, String, Option<String>)> = self
            .neighbors
            .iter()
            .filter(|(name, _)| !neighbors.contains_key(*name))
            .map(|(name, s)| {
                let owner = s.spec.as_ref().ok().and_then(|n| {
                    crate::api::validate::parse_mac(&n.mac)
                        .map(|mac| fdb_entry_name(&n.network, mac))
                });
                (name.clone(), s.uid.clone(), s.rv.clone(), owner)
            })
            .collect();
        for (name, uid, rv, owner) in gone {
            // Ours to delete: this write took it away, or no entry holds its MAC (read again:
            // the entry's watch may lag the Neighbor's).
            let delete = before.contains_key(&name)
                || match &owner {
                    Some(o) if want.contains_key(o) => true,
                    Some(o) => self
                        .runtime
                        .block_on(self.api(Kind::Entries).get_opt(o))
                        .map_err(|e| api_err("get", format!("FDBEntry {o}: {e}")))?
                        .is_none(),
                    None => false,
                };
            if delete {
                if let Conflict = self.delete(Kind::Neighbors, &name, &uid, &rv)? {
                    return Ok(Conflict);
                }
            }
        }
        let gone: Vec<(String, String, String)> = self
            .entries
            .iter()
            .filter(|(name, s)| s.spec.is_ok() && !want.contains_key(*name))
            .map(|(name, s)| (name.clone(), s.uid.clone(), s.rv.clone()))
            .collect();
        for (name, uid, rv) in gone {
            if let Conflict = self.delete(Kind::Entries, &name, &uid, &rv)? {
                return Ok(Conflict);
            }
        }
        Ok(Written::Done)
    }
}

impl LearnStore for ObjectStore {
    fn refresh(&mut self) -> Result<bool, LearnStoreError> {
        Ok(self.drain())
    }

    fn table(&self) -> &LearnedTable {
        &self.table
    }

    fn mutate(
        &mut self,
        f: &mut dyn FnMut(&mut LearnedTable) -> Outcome,
    ) -> Result<Outcome, LearnStoreError> {
        self.drain();
        for _ in 0..MAX_ATTEMPTS {
            let mut next = self.table.clone();
            let out = f(&mut next);
            if !out.changed {
                return Ok(out);
            }
            let written = self.write(&next);
            self.table = self.build();
            match written? {
                Written::Done => return Ok(out),
                Written::Conflict => {
                    self.conflicts += 1;
                    self.drain();
                }
            }
        }
        Err(LearnStoreError::Contended {
            attempts: MAX_ATTEMPTS,
        })
    }
}
