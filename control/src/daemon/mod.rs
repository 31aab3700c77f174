//! `lace-control run`: the node daemon that glues the control modules together.
//!
//! ```text
//!  manifests dir ──StandaloneSource──┐
//!  state file (shared, flock) ───────┤──► reconcile ──► World ──Compiler──► tables ──► forwarder
//!  lace-cni (unix socket) ───────────┘        │                                         │
//!                                             └──► .lace/status-<node>.yaml   status region
//! ```
//!
//! # Reconcile
//!
//! One [`Core`] behind a mutex holds everything: the last snapshot of the source, the IPAM
//! state ([`state::SharedState`]), this node's attachment marks, the binding policies, the
//! world last compiled, the incremental [`Compiler`] and the [`TableWriter`]. It reconciles
//! when the source reports a change, when another process changed the state file (polled
//! every [`POLL`]), and after every CNI request that changed something:
//!
//! 1. IPAM learns about valid networks (their `status.id`) and lace nodes (ids, locators), and
//!    forgets those the source no longer has ([`reconcile::ipam_actions`], under the
//!    cross-process lock). An unchanged network costs nothing (cached).
//! 2. Every object is validated; invalid ones are reported and skipped, never fatal
//!    ([`reconcile::build_world`]); a network that turns invalid keeps its last good model.
//! 3. The new [`World`] is diffed against the last one ([`reconcile::world_changes`]): one
//!    pod's change is one [`crate::compile::Change::Endpoint`], so the compiler recompiles
//!    only that network (and the networks importing it), and [`Compiler::apply`] writes only
//!    the entries that differ, then publishes once.
//! 4. The status file is rewritten when its content changed; condition changes are logged once.
//!
//! Pods are bound once: Allocate evaluates the binding policies and IPAM records the network
//! in the lease; a retried Allocate, a restart or a policy change never re-evaluates it.
//!
//! # Restart safety
//!
//! Killing `lace-control` does not touch the tables (the forwarder keeps forwarding). On
//! start it reopens the tables ([`TableWriter::open_or_create`]), reads back what is
//! published ([`Compiler::resume`]) and compiles from the same state file, so the first apply
//! writes nothing that did not change and nothing is reallocated.

pub mod config;
pub mod reconcile;
pub mod server;
pub mod state;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use lace_shared::status::{PortState, StatusReader};
use lace_shared::tables::TableWriter;
use lace_shared::types::PortId;

use crate::api::{AllocationSpec, Condition, NetworkEndpointSpec, NetworkStatus, NetworkType};
use crate::bind::{Binding, BindingPolicies, ServiceBindings};
use crate::compile::{Change, Compiler};
use crate::ipam::{AllocateRequest, EndpointLease, IpamError, PodRef};
use crate::proto::{Allocation, Attachment, ErrorCode, IpConfig, Response, RouteConfig};
use crate::source::standalone::StandaloneSource;
use crate::source::{NamespacedName, Objects, Source, SourceError};
use crate::world::{AttachmentKey, World};

use config::RunConfig;
use reconcile::{Ensured, ObjectReport};
use state::{AttachedMarks, SharedState, StateError};
use status::{EndpointEntry, NetworkEntry, ObjectEntry, ServiceEntry, StatusFile};

/// How often the main loop looks at the state file and the source when nothing wakes it.
pub const POLL: Duration = Duration::from_millis(200);
/// How often Attach looks at the forwarder's status region (a few loads of shared memory;
/// only while a pod waits for its port).
const ATTACH_POLL: Duration = Duration::from_millis(2);

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The IPAM state or the attachment marks could not be opened.
    #[error(transparent)]
    State(#[from] StateError),
    /// The manifests could not be read at all.
    #[error("manifests: {0}")]
    Source(#[from] SourceError),
    /// The tables could not be opened or created.
    #[error(
        "tables {path}: {source}; check --tables-dir, and that no other lace-control writes \
         this table set (--tables-name)"
    )]
    Tables {
        /// The tables file.
        path: PathBuf,
        /// The error.
        #[source]
        source: lace_shared::Error,
    },
    /// The socket could not be set up.
    #[error("socket {path}: {reason}")]
    Socket {
        /// The socket path.
        path: PathBuf,
        /// What went wrong and what to do.
        reason: String,
    },
    /// Signals could not be set up.
    #[error("signals: {0}")]
    Signals(nix::Error),
}

/// The daemon: one [`Core`] shared by the main loop and the CNI server's threads.
#[derive(Debug)]
pub struct Daemon {
    core: Mutex<Core>,
    cfg: RunConfig,
}

/// Everything the daemon knows (see the module docs).
#[derive(Debug)]
pub struct Core {
    cfg: RunConfig,
    state: SharedState,
    attached: AttachedMarks,
    objects: Objects,
    problems: Vec<String>,
    policies: BindingPolicies,
    policy_reports: Vec<ObjectReport>,
    services: ServiceBindings,
    ensured: BTreeMap<String, Ensured>,
    exhausted: BTreeMap<String, String>,
    world: World,
    reports: Vec<ObjectReport>,
    compiler: Compiler,
    writer: TableWriter,
    full: bool,
    compile_error: Option<String>,
    notes: Vec<String>,
    status: StatusFile,
    logged: BTreeMap<(String, String, String), (String, String)>,
}

impl Daemon {
    /// Opens the state, the source and the tables, and reconciles once (publishing the node's
    /// tables). Does not listen yet: see [`Daemon::run`].
    pub fn open(cfg: RunConfig) -> Result<Arc<Daemon>, DaemonError> {
        let p = &cfg.paths;
        let state = SharedState::open(&p.state, &p.lock_file(), cfg.ipam)?;
        let mut attached = AttachedMarks::open(&p.attached_file())?;
        let ipam = state.ipam();
        let stale = attached.retain(|k| ipam.lease(k).is_some_and(|l| l.node == p.node))?;
        for k in stale {
            tracing::warn!(container = %k.container_id, ifname = %k.ifname, "attachment mark without a lease on this node dropped");
        }
        let tables = p.tables();
        let writer =
            TableWriter::open_or_create(&tables).map_err(|source| DaemonError::Tables {
                path: tables.tables_path(),
                source,
            })?;
        let compiler = match Compiler::resume(&p.node, cfg.compile(), &tables) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("cannot read the published tables back ({e}); rewriting them all");
                Compiler::new(&p.node, cfg.compile())
            }
        };
        let core = Core {
            state,
            attached,
            objects: Objects::default(),
            problems: Vec::new(),
            policies: BindingPolicies::new(&[]),
            policy_reports: Vec::new(),
            services: ServiceBindings::new(),
            ensured: BTreeMap::new(),
            exhausted: BTreeMap::new(),
            world: World::default(),
            reports: Vec::new(),
            compiler,
            writer,
            full: true,
            compile_error: None,
            notes: Vec::new(),
            status: StatusFile::default(),
            logged: BTreeMap::new(),
            cfg: cfg.clone(),
        };
        Ok(Arc::new(Daemon {
            core: Mutex::new(core),
            cfg,
        }))
    }

    /// The configuration.
    pub fn config(&self) -> &RunConfig {
        &self.cfg
    }

    fn core(&self) -> MutexGuard<'_, Core> {
        // A panic in a request thread must not take the node's control plane down.
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs until SIGTERM or SIGINT: the CNI server in its threads, the watch loop here.
    pub fn run(self: &Arc<Daemon>) -> Result<(), DaemonError> {
        // Block the stop signals in every thread (threads inherit the mask) and wait for them
        // in one: no async-signal-safety concerns, no unsafe.
        let mut set = nix::sys::signal::SigSet::empty();
        set.add(nix::sys::signal::Signal::SIGTERM);
        set.add(nix::sys::signal::Signal::SIGINT);
        set.thread_block().map_err(DaemonError::Signals)?;
        let stop = Arc::new(AtomicBool::new(false));
        {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("signals".into())
                .spawn(move || {
                    if let Ok(sig) = set.wait() {
                        tracing::info!("{sig:?}: stopping");
                    }
                    stop.store(true, Ordering::SeqCst);
                })
                .map_err(|e| DaemonError::Socket {
                    path: self.cfg.socket.clone(),
                    reason: format!("cannot start the signal thread: {e}"),
                })?;
        }
        let mut source = StandaloneSource::new(&self.cfg.paths.manifests)?;
        let snap = source.load()?;
        self.core().on_snapshot(snap.objects, snap.problems);
        let listener = server::bind(&self.cfg.socket)?;
        tracing::info!(
            node = %self.cfg.paths.node,
            socket = %self.cfg.socket.display(),
            state = %self.cfg.paths.state.display(),
            tables = %self.cfg.paths.tables().tables_path().display(),
            "lace-control running"
        );
        {
            let d = self.clone();
            std::thread::Builder::new()
                .name("cni-server".into())
                .spawn(move || server::serve(&d, &listener))
                .map_err(|e| DaemonError::Socket {
                    path: self.cfg.socket.clone(),
                    reason: format!("cannot start the server thread: {e}"),
                })?;
        }
        while !stop.load(Ordering::SeqCst) {
            let changed = source.wait(POLL);
            if changed {
                match source.load() {
                    Ok(snap) => self.core().on_snapshot(snap.objects, snap.problems),
                    Err(e) => tracing::error!("manifests unreadable, keeping the last state: {e}"),
                }
            }
            let mut core = self.core();
            match core.state.refresh() {
                Ok(true) => core.reconcile(),
                Ok(false) => {}
                Err(e) => tracing::error!("state file unreadable, keeping the last state: {e}"),
            }
        }
        let _ = std::fs::remove_file(&self.cfg.socket);
        tracing::info!("stopped (the forwarder keeps the tables)");
        Ok(())
    }

    /// Answers one CNI request.
    pub fn handle(&self, req: crate::proto::Request) -> Response {
        use crate::proto::Request;
        match req {
            Request::Allocate(a) => self.core().allocate(&a),
            Request::Attach(a) => self.attach(&a),
            Request::Release(a) => self.core().release(&a),
            Request::Check(a) => self.core().check(&a),
            Request::Status => self.core().ready(),
            Request::Gc { valid } => self.core().gc(&valid),
        }
    }

    /// Attach: mark, publish, then wait (without the lock) for the forwarder.
    fn attach(&self, a: &Attachment) -> Response {
        let (alloc, port, endpoint, iface) = {
            let mut core = self.core();
            match core.mark_attached(a) {
                Ok(x) => x,
                Err(r) => return *r,
            }
        };
        let path = self.cfg.paths.forwarder_status();
        let deadline = Instant::now() + self.cfg.attach_timeout;
        let mut last = String::from("no status region (is the forwarder running?)");
        loop {
            if let Ok(r) = StatusReader::open(&path) {
                match r.port(port) {
                    Some(s) if s.endpoint == endpoint => match s.state {
                        PortState::Up => return Response::Allocated(alloc),
                        PortState::Failed(errno) => {
                            return error(
                                ErrorCode::Internal,
                                format!(
                                    "the forwarder of node {} failed to attach {iface} (port {}, \
                                     endpoint {endpoint}): {}",
                                    self.cfg.paths.node,
                                    port.0,
                                    errno_text(errno)
                                ),
                                format!(
                                    "see `lace-forwarder stats --name {}` and the forwarder's log",
                                    self.cfg.paths.tables_name
                                ),
                            )
                        }
                        st => last = format!("port {} is {st:?}", port.0),
                    },
                    Some(s) => {
                        last = format!(
                            "port {} reports endpoint {} (not yet {endpoint}), {:?}",
                            port.0, s.endpoint, s.state
                        )
                    }
                    None => last = format!("port {} not reported yet", port.0),
                }
                if !r.alive() {
                    last.push_str("; the forwarder is not running");
                }
            }
            if Instant::now() >= deadline {
                return error(
                    ErrorCode::TryAgainLater,
                    format!(
                        "the forwarder of node {} did not bring {iface} up within {} ms: {last}",
                        self.cfg.paths.node,
                        self.cfg.attach_timeout.as_millis()
                    ),
                    format!("status region {}", path.display()),
                );
            }
            std::thread::sleep(ATTACH_POLL);
        }
    }
}

fn errno_text(errno: u32) -> String {
    let e = nix::errno::Errno::from_raw(i32::try_from(errno).unwrap_or(i32::MAX));
    format!("error {errno} ({})", e.desc())
}

fn error(code: ErrorCode, msg: impl Into<String>, details: impl Into<String>) -> Response {
    Response::Error {
        code,
        msg: msg.into(),
        details: details.into(),
    }
}

/// An error answer, boxed (it is the large variant of the results it travels in).
fn refuse(code: ErrorCode, msg: impl Into<String>, details: impl Into<String>) -> Box<Response> {
    Box::new(error(code, msg, details))
}

fn key_of(a: &Attachment) -> AttachmentKey {
    AttachmentKey {
        container_id: a.container_id.clone(),
        ifname: a.ifname.clone(),
    }
}

fn state_error(what: &str, e: StateError) -> Response {
    match e {
        StateError::Ipam(e) => error(e.cni_code(), format!("{what}: {e}"), ""),
        other => error(ErrorCode::TryAgainLater, format!("{what}: {other}"), ""),
    }
}

fn check_attachment(a: &Attachment) -> Result<(), Box<Response>> {
    if a.container_id.is_empty() || a.ifname.is_empty() {
        return Err(refuse(
            ErrorCode::InvalidArgs,
            "the request has no container id or interface name; the runtime must set \
             CNI_CONTAINERID and CNI_IFNAME",
            "",
        ));
    }
    Ok(())
}

/// The prefix length a pod's address is configured with: a host route. Every other address,
/// including same-node pods of the same block, is reached through the gateway (the forwarder
/// answers ARP/NDP only for the gateway).
fn host_len(a: &std::net::IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}

/// The plugin's view of a lease.
pub fn allocation_of(lease: &EndpointLease, mtu: u16) -> Allocation {
    Allocation {
        network: lease.network.clone(),
        host_interface: lease.host_iface.as_str().to_owned(),
        mac: lease.mac.to_string(),
        mtu,
        ips: lease
            .addresses
            .iter()
            .map(|a| IpConfig {
                address: format!("{}/{}", a.address, host_len(&a.address)),
                gateway: a.gateway.to_string(),
            })
            .collect(),
        routes: lease
            .addresses
            .iter()
            .map(|a| RouteConfig {
                dst: if a.address.is_ipv4() {
                    "0.0.0.0/0"
                } else {
                    "::/0"
                }
                .to_owned(),
                gw: a.gateway.to_string(),
            })
            .collect(),
        gateway_mac: crate::ipam::gateway_mac(lease.network_id).to_string(),
    }
}

impl Core {
    fn node(&self) -> &str {
        &self.cfg.paths.node
    }

    fn pod_mtu(&self) -> u16 {
        self.cfg.compile().pod_mtu()
    }

    /// A new snapshot from the source: policies, services, then a reconcile.
    pub fn on_snapshot(&mut self, objects: Objects, problems: Vec<crate::source::Problem>) {
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        for p in &problems {
            if !self.problems.contains(p) {
                tracing::warn!("manifests: {p}");
            }
        }
        self.problems = problems;
        self.objects = objects;
        self.policy_reports = reconcile::update_binding(&self.objects, &mut self.policies);
        self.update_services();
        self.reconcile();
    }

    fn update_services(&mut self) {
        let mut changes = Vec::new();
        for (name, ns) in &self.objects.namespaces {
            let labels = ns.metadata.labels.clone().unwrap_or_default();
            changes.extend(
                self.services
                    .set_namespace_labels(&self.policies, name, labels),
            );
        }
        changes.extend(self.services.policies_changed(&self.policies));
        let present: BTreeSet<(String, String)> = self
            .objects
            .services
            .keys()
            .map(|k| (k.namespace.clone(), k.name.clone()))
            .collect();
        let gone: Vec<(String, String)> = self
            .services
            .iter()
            .map(|(ns, n, _)| (ns.to_owned(), n.to_owned()))
            .filter(|k| !present.contains(k))
            .collect();
        for (ns, n) in gone {
            changes.extend(self.services.remove_service(&ns, &n));
        }
        for (k, svc) in &self.objects.services {
            let mut v = serde_json::to_value(svc).unwrap_or_default();
            if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                m.insert("namespace".into(), k.namespace.clone().into());
                m.insert("name".into(), k.name.clone().into());
            }
            match self.services.apply_service(&self.policies, v) {
                Ok(c) => changes.extend(c),
                Err(e) => tracing::warn!("Service {}/{}: {e}", k.namespace, k.name),
            }
        }
        for c in changes {
            tracing::info!(
                "Service {}/{}: binding {:?} -> {:?}",
                c.namespace,
                c.name,
                c.before,
                c.after
            );
        }
    }

    /// Brings IPAM, the world, the tables and the status file up to date (see the module docs).
    pub fn reconcile(&mut self) {
        self.ipam_sync();
        let ipam_errors: BTreeMap<String, String> = self
            .ensured
            .iter()
            .filter_map(|(n, e)| Some((n.clone(), e.error.clone()?)))
            .collect();
        let built = reconcile::build_world(
            &self.objects,
            reconcile::Context {
                node: &self.cfg.paths.node,
                ipam: self.state.ipam(),
                attached: self.attached.keys(),
                ipam_errors: &ipam_errors,
                exhausted: &self.exhausted,
                last_good: &self.world.networks,
            },
        );
        self.reports = built.reports;
        let changes = if self.full {
            vec![Change::All]
        } else {
            reconcile::world_changes(&self.world, &built.world)
        };
        self.world = built.world;
        if !changes.is_empty() {
            self.compile(&changes);
        }
        self.write_status();
    }

    fn compile(&mut self, changes: &[Change]) {
        let compiled = match self.compiler.plan(&self.world, changes) {
            Ok(c) => c,
            Err(e) => {
                if self.compile_error.as_deref() != Some(&e.to_string()) {
                    tracing::error!("tables not compiled: {e}");
                }
                self.compile_error = Some(e.to_string());
                self.full = true;
                return;
            }
        };
        let notes: Vec<String> = compiled.notes.iter().map(ToString::to_string).collect();
        for n in &notes {
            if !self.notes.contains(n) {
                tracing::warn!("compiler: {n}");
            }
        }
        self.notes = notes;
        match self.compiler.apply(&mut self.writer, compiled.tables) {
            Ok(stats) => {
                if self.compile_error.take().is_some() {
                    tracing::info!("tables compiled again");
                }
                self.full = false;
                if stats.changes() > 0 {
                    tracing::debug!(?changes, ?stats, "tables published");
                }
            }
            Err(e) => {
                tracing::error!("tables not published: {e}");
                self.compile_error = Some(format!("publishing the tables: {e}"));
                self.full = true;
            }
        }
    }

    /// Step 1 of the reconcile: IPAM learns and forgets networks and nodes.
    fn ipam_sync(&mut self) {
        let actions = reconcile::ipam_actions(&self.objects, self.state.ipam(), &self.ensured);
        if actions.is_empty() {
            return;
        }
        let result = self.state.mutate(|ipam| {
            let mut ensured = Vec::new();
            for (name, def) in &actions.ensure_networks {
                let r = ipam.ensure_network(name, def);
                ensured.push((name.clone(), def.clone(), r, ipam.network_id(name)));
            }
            let mut released = Vec::new();
            for name in &actions.remove_networks {
                released.extend(ipam.remove_network(name));
            }
            let mut node_errors = Vec::new();
            for name in &actions.ensure_nodes {
                if let Err(e) = ipam.ensure_node(name) {
                    node_errors.push(e);
                }
            }
            for name in &actions.remove_nodes {
                released.extend(ipam.remove_node(name));
            }
            Ok((ensured, released, node_errors))
        });
        match result {
            Ok((ensured, released, node_errors)) => {
                for (name, def, r, id) in ensured {
                    let error = match r {
                        Ok(_) => None,
                        Err(e) => Some(e.to_string()),
                    };
                    self.ensured.insert(name, Ensured { def, id, error });
                }
                self.ensured
                    .retain(|n, _| self.objects.networks.contains_key(n));
                for n in &actions.remove_networks {
                    tracing::warn!("Network {n} is gone from the manifests: forgotten by IPAM");
                }
                for n in &actions.remove_nodes {
                    tracing::warn!("Node {n} is gone from the manifests: forgotten by IPAM");
                }
                for l in released {
                    tracing::warn!(
                        "pod {}/{} ({}) released: its network or node is gone",
                        l.pod.namespace,
                        l.pod.name,
                        l.network
                    );
                }
                for e in node_errors {
                    tracing::error!("{e}");
                }
                let ipam = self.state.ipam();
                let node = self.cfg.paths.node.clone();
                if let Err(e) = self
                    .attached
                    .retain(|k| ipam.lease(k).is_some_and(|l| l.node == node))
                {
                    tracing::error!("{e}");
                }
            }
            Err(e) => tracing::error!("IPAM not updated, retrying on the next change: {e}"),
        }
    }

    fn log_condition(&mut self, kind: &str, name: &str, c: &Condition) {
        let key = (kind.to_owned(), name.to_owned(), c.type_.clone());
        let val = (c.status.clone(), c.reason.clone());
        if self.logged.get(&key) != Some(&val) {
            if c.status == "True" {
                tracing::info!(
                    "{kind} {name}: {}={} ({}): {}",
                    c.type_,
                    c.status,
                    c.reason,
                    c.message
                );
            } else {
                tracing::warn!(
                    "{kind} {name}: {}={} ({}): {}",
                    c.type_,
                    c.status,
                    c.reason,
                    c.message
                );
            }
            self.logged.insert(key, val);
        }
    }

    fn write_status(&mut self) {
        let now = status::now_rfc3339();
        let prev = std::mem::take(&mut self.status);
        let prev_conds = |list: &[ObjectEntry], name: &str| -> Vec<Condition> {
            list.iter()
                .find(|e| e.name == name)
                .map(|e| e.conditions.clone())
                .unwrap_or_default()
        };
        let mut s = StatusFile {
            node: self.node().to_owned(),
            updated: now.clone(),
            tables_generation: self.writer.generation(),
            ..StatusFile::default()
        };
        let ids = self.state.ipam().network_ids();
        let reports: Vec<ObjectReport> = self
            .reports
            .iter()
            .chain(self.policy_reports.iter())
            .cloned()
            .collect();
        for mut r in reports {
            let previous = match r.kind {
                "Network" => prev
                    .networks
                    .iter()
                    .find(|n| n.name == r.name)
                    .map(|n| n.status.conditions.clone())
                    .unwrap_or_default(),
                "NetworkBindingPolicy" => prev_conds(&prev.binding_policies, &r.name),
                "NetworkRoutingPolicy" => prev_conds(&prev.routing_policies, &r.name),
                _ => prev_conds(&prev.nodes, &r.name),
            };
            status::stamp_transitions(&mut r.conditions, &previous, &now);
            for c in &r.conditions {
                self.log_condition(r.kind, &r.name, c);
            }
            let entry = ObjectEntry {
                name: r.name.clone(),
                conditions: r.conditions,
            };
            match r.kind {
                "Network" => {
                    let spec = self.objects.networks.get(&r.name).map(|n| &n.spec);
                    let type_ = spec.map_or(String::new(), |s| {
                        match s.type_ {
                            NetworkType::L3 => "l3",
                            NetworkType::L2 => "l2",
                            NetworkType::External => "external",
                        }
                        .to_owned()
                    });
                    let subnets = spec.map_or(Vec::new(), |s| {
                        [&s.ipv4_subnet, &s.ipv6_subnet]
                            .into_iter()
                            .flatten()
                            .map(|x| x.prefix.clone())
                            .collect()
                    });
                    s.networks.push(NetworkEntry {
                        name: r.name.clone(),
                        type_,
                        subnets,
                        status: NetworkStatus {
                            id: self
                                .world
                                .networks
                                .get(&r.name)
                                .map(|m| m.id.0)
                                .or_else(|| ids.get(&r.name).map(|i| i.0)),
                            conditions: entry.conditions,
                        },
                    });
                }
                "NetworkBindingPolicy" => s.binding_policies.push(entry),
                "NetworkRoutingPolicy" => s.routing_policies.push(entry),
                _ => s.nodes.push(entry),
            }
        }
        let ipam = self.state.ipam();
        for l in ipam.leases().filter(|l| l.node == self.cfg.paths.node) {
            let ep = status::Object::new(
                "NetworkEndpoint",
                format!("{}-{}", l.pod.name, l.key.ifname),
                Some(l.pod.namespace.clone()),
                NetworkEndpointSpec {
                    network: l.network.clone(),
                    pod: l.pod.name.clone(),
                    node: l.node.clone(),
                    interface: l.key.ifname.clone(),
                    container_id: l.key.container_id.clone(),
                    addresses: l
                        .addresses
                        .iter()
                        .map(|a| format!("{}/{}", a.address, host_len(&a.address)))
                        .collect(),
                    mac: l.mac.to_string(),
                    host_interface: Some(l.host_iface.as_str().to_owned()),
                },
            );
            s.network_endpoints.push(EndpointEntry {
                object: ep,
                attached: self.attached.contains(&l.key),
                port: l.port.0,
                endpoint_id: l.endpoint_id,
            });
        }
        for spec in ipam.allocation_specs() {
            let name = format!("{}-{}", spec.network, spec.node);
            s.allocations.push(status::Object::new(
                "Allocation",
                name,
                None,
                AllocationSpec {
                    network: spec.network,
                    node: spec.node,
                    prefixes: spec.prefixes,
                },
            ));
        }
        for (ns, name, b) in self.services.iter() {
            s.services.push(ServiceEntry {
                namespace: ns.to_owned(),
                name: name.to_owned(),
                binding: match b {
                    Binding::Network(n) => n.clone(),
                    Binding::NoMatch => "(unbound)".into(),
                    Binding::ExplicitlyUnbound => "(explicitly unbound)".into(),
                },
            });
        }
        s.notes = self.notes.clone();
        s.problems = self.problems.clone();
        s.error = self.compile_error.clone();
        if s.content_key() != prev.content_key() {
            match serde_yaml::to_string(&s) {
                Ok(y) => {
                    let path = self.cfg.paths.status_file();
                    if let Err(e) = state::write_atomically(&path, y.as_bytes()) {
                        tracing::error!("status file {}: {e}", path.display());
                    }
                }
                Err(e) => tracing::error!("status file: cannot serialise: {e}"),
            }
        } else {
            s.updated = prev.updated;
        }
        self.status = s;
    }

    // ---- CNI requests ---------------------------------------------------------------------

    fn refresh(&mut self) {
        match self.state.refresh() {
            Ok(true) => self.reconcile(),
            Ok(false) => {}
            Err(e) => tracing::error!("state file unreadable, keeping the last state: {e}"),
        }
    }

    fn allocate(&mut self, a: &Attachment) -> Response {
        if let Err(r) = check_attachment(a) {
            return *r;
        }
        if a.pod_namespace.is_empty() || a.pod_name.is_empty() {
            return error(
                ErrorCode::InvalidArgs,
                format!(
                    "container {}: no K8S_POD_NAMESPACE / K8S_POD_NAME in CNI_ARGS; lace binds \
                     pods by namespace and name, so the runtime must pass them",
                    a.container_id
                ),
                "",
            );
        }
        self.refresh();
        let key = key_of(a);
        let pod = PodRef {
            namespace: a.pod_namespace.clone(),
            name: a.pod_name.clone(),
        };
        let node = self.node().to_owned();
        // Decided once: a lease carries the network its pod was bound to.
        let network = match self.state.ipam().lease(&key) {
            Some(l) => l.network.clone(),
            None => match self.bind(&pod) {
                Ok(n) => n,
                Err(r) => return *r,
            },
        };
        if !self.world.nodes.contains_key(&node) {
            return error(
                ErrorCode::TryAgainLater,
                format!(
                    "node {node} is not registered: the manifests need a Node {node} with the \
                     lace-cni.io/underlay annotation"
                ),
                self.compile_error.clone().unwrap_or_default(),
            );
        }
        let req = AllocateRequest {
            key,
            network: network.clone(),
            node,
            pod,
        };
        match self.state.mutate(|i| i.allocate(&req)) {
            Ok(lease) => {
                self.exhausted.remove(&network);
                self.reconcile();
                Response::Allocated(allocation_of(&lease, self.pod_mtu()))
            }
            Err(e) => {
                if let StateError::Ipam(
                    ie @ (IpamError::BlockExhausted { .. }
                    | IpamError::BlocksExhausted { .. }
                    | IpamError::SubnetExhausted { .. }),
                ) = &e
                {
                    self.exhausted.insert(network.clone(), ie.to_string());
                    self.reconcile();
                }
                state_error(&format!("pod {}/{}", a.pod_namespace, a.pod_name), e)
            }
        }
    }

    /// The network a new pod binds to, or the Unbound answer naming the policies.
    fn bind(&self, pod: &PodRef) -> Result<String, Box<Response>> {
        let object = match self
            .objects
            .pods
            .get(&NamespacedName::new(&pod.namespace, &pod.name))
        {
            Some(p) => {
                let mut v = serde_json::to_value(p).unwrap_or_default();
                if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                    m.insert("namespace".into(), pod.namespace.clone().into());
                    m.insert("name".into(), pod.name.clone().into());
                }
                v
            }
            None => serde_json::json!({
                "metadata": {"name": pod.name, "namespace": pod.namespace}
            }),
        };
        let labels = self
            .objects
            .namespaces
            .get(&pod.namespace)
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        let d = self.policies.bind_pod(&object, &labels);
        for e in &d.errors {
            tracing::warn!("{e}");
        }
        let who = format!("pod {}/{}", pod.namespace, pod.name);
        let by = |d: &crate::bind::Decision| {
            d.decided_by.as_ref().map_or(String::new(), |(p, r)| {
                format!(" (NetworkBindingPolicy {p}, spec.rules[{r}])")
            })
        };
        match &d.binding {
            Binding::Network(n) if self.world.networks.contains_key(n) => Ok(n.clone()),
            Binding::Network(n) => Err(refuse(
                ErrorCode::Unbound,
                format!(
                    "{who} binds to Network {n}{}, which does not exist or is not valid; create \
                     the network or fix the policy",
                    by(&d)
                ),
                "",
            )),
            Binding::ExplicitlyUnbound => Err(refuse(
                ErrorCode::Unbound,
                format!("{who} is explicitly bound to no network{}", by(&d)),
                "",
            )),
            Binding::NoMatch => Err(refuse(
                ErrorCode::Unbound,
                format!(
                    "no NetworkBindingPolicy binds {who} (policies in use: {}); add a rule that \
                     matches it",
                    {
                        let a = self.policies.active();
                        if a.is_empty() {
                            "none".to_owned()
                        } else {
                            a.join(", ")
                        }
                    }
                ),
                d.errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )),
        }
    }

    fn own_lease(&self, a: &Attachment) -> Result<EndpointLease, Box<Response>> {
        let key = key_of(a);
        match self.state.ipam().lease(&key) {
            Some(l) if l.node == self.node() => Ok(l.clone()),
            Some(l) => Err(refuse(
                ErrorCode::AlreadyExists,
                format!(
                    "container {} interface {} is attached on node {}, not {}",
                    a.container_id,
                    a.ifname,
                    l.node,
                    self.node()
                ),
                "",
            )),
            None => Err(refuse(
                ErrorCode::InvalidArgs,
                format!(
                    "container {} interface {} has no allocation on node {}; ADD must Allocate \
                     first",
                    a.container_id,
                    a.ifname,
                    self.node()
                ),
                "",
            )),
        }
    }

    /// Attach, locked half: marks the lease attached and publishes its port.
    fn mark_attached(
        &mut self,
        a: &Attachment,
    ) -> Result<(Allocation, PortId, u64, String), Box<Response>> {
        check_attachment(a)?;
        self.refresh();
        let lease = self.own_lease(a)?;
        match self.attached.insert(&lease.key) {
            Ok(true) => self.reconcile(),
            Ok(false) => {}
            Err(e) => return Err(Box::new(state_error("attach", e))),
        }
        if let Some(e) = &self.compile_error {
            return Err(refuse(
                ErrorCode::TryAgainLater,
                format!("node {}'s tables cannot be published: {e}", self.node()),
                "",
            ));
        }
        Ok((
            allocation_of(&lease, self.pod_mtu()),
            lease.port,
            lease.endpoint_id,
            lease.host_iface.as_str().to_owned(),
        ))
    }

    fn release(&mut self, a: &Attachment) -> Response {
        if let Err(r) = check_attachment(a) {
            return *r;
        }
        let key = key_of(a);
        let node = self.node().to_owned();
        match self.state.mutate(|i| match i.lease(&key) {
            Some(l) if l.node != node => Ok(None),
            _ => Ok(i.release(&key)),
        }) {
            Ok(released) => {
                if let Some(l) = &released {
                    tracing::info!(
                        "pod {}/{} released ({} {})",
                        l.pod.namespace,
                        l.pod.name,
                        l.network,
                        l.addresses
                            .iter()
                            .map(|x| x.address.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    );
                }
                if let Err(e) = self.attached.retain(|k| *k != key) {
                    return state_error("release", e);
                }
                self.reconcile();
                Response::Ok
            }
            Err(e) => state_error("release", e),
        }
    }

    fn check(&mut self, a: &Attachment) -> Response {
        if let Err(r) = check_attachment(a) {
            return *r;
        }
        self.refresh();
        match self.own_lease(a) {
            Ok(l) => Response::Allocated(allocation_of(&l, self.pod_mtu())),
            Err(r) => *r,
        }
    }

    fn ready(&mut self) -> Response {
        let node = self.node().to_owned();
        if !self.world.nodes.contains_key(&node) {
            return error(
                ErrorCode::TryAgainLater,
                format!(
                    "node {node} is not registered: the manifests need a Node {node} with the \
                     lace-cni.io/underlay annotation"
                ),
                "",
            );
        }
        if let Some(e) = &self.compile_error {
            return error(
                ErrorCode::TryAgainLater,
                format!("node {node}'s tables cannot be published: {e}"),
                "",
            );
        }
        Response::Ok
    }

    fn gc(&mut self, valid: &[Attachment]) -> Response {
        let keep: BTreeSet<AttachmentKey> = valid.iter().map(key_of).collect();
        let node = self.node().to_owned();
        match self.state.mutate(|i| Ok(i.gc(&node, &keep))) {
            Ok(released) => {
                for l in &released {
                    tracing::info!(
                        "GC: pod {}/{} ({}) released",
                        l.pod.namespace,
                        l.pod.name,
                        l.key.container_id
                    );
                }
                let ipam = self.state.ipam();
                if let Err(e) = self.attached.retain(|k| ipam.lease(k).is_some()) {
                    return state_error("gc", e);
                }
                self.reconcile();
                Response::Ok
            }
            Err(e) => state_error("gc", e),
        }
    }

    /// The world last compiled (tests, diagnostics).
    pub fn world(&self) -> &World {
        &self.world
    }
}

/// `lace-control status`: the status file and the forwarder's port states, rendered.
pub fn status_report(paths: &config::NodePaths) -> Result<String, String> {
    let path = paths.status_file();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "{}: {e}; has `lace-control run --node {} --manifests {}` run yet?",
            path.display(),
            paths.node,
            paths.manifests.display()
        )
    })?;
    let s: StatusFile = serde_yaml::from_str(&text)
        .map_err(|e| format!("{}: not a lace-control status file: {e}", path.display()))?;
    let ports = StatusReader::open(&paths.forwarder_status()).ok().map(|r| {
        s.network_endpoints
            .iter()
            .filter_map(|e| {
                let p = r.port(PortId(e.port))?;
                let st = if p.endpoint == e.endpoint_id {
                    format!("{:?}", p.state)
                } else {
                    format!("{:?} (endpoint {}, stale)", p.state, p.endpoint)
                };
                Some((e.port, st))
            })
            .collect::<status::PortStates>()
    });
    Ok(status::render(&s, ports.as_ref()))
}
