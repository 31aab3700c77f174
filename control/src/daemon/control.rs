//! The event loop: one thread owns all of control's state; everything else sends it events.
//!
//! ```text
//!  source thread ──SourceEvent──┐
//!  CNI connections ──CniCall────┼──► channel ──► Control::step(batch) ──► replies
//!  (ticks: the loop's timeout) ─┘         observe → plan → allocate → world → diff
//!                                          → compile → publish → report
//! ```
//!
//! Each wake-up drains every queued event into one batch and runs the steps of
//! [`super::core`] **once** for the batch: twenty concurrent ADDs cost one IPAM transaction (one
//! lock, one load, one save), one world, one compilation and one publication. CNI requests are
//! answered when the batch is done; an Attach is answered with the generation its port was
//! published in, and the connection's own thread then waits — outside the loop, holding
//! nothing — until [`Published`] reaches it and the forwarder reports the port up. No lock is
//! held across a step by anything but the loop.
//!
//! What the steps need from outside is behind two traits, so that Kubernetes mode swaps them
//! without touching the loop: [`IpamStore`] (where allocations live: the shared state file
//! here, API objects with optimistic concurrency there) and [`StatusSink`] (where the report
//! goes: the status file here, the objects' `status` there). Sources are threads that send
//! [`SourceEvent`]s (snapshots or watch events).
//!
//! # CNI requests in a batch
//!
//! - **Allocate**: a call with a pod UID (`K8S_POD_UID`) whose observed Pod has another
//!   `metadata.uid` is parked like an unobserved pod (the watch may not have delivered a pod
//!   recreated a moment ago), then refused with code 4 naming both UIDs; nothing is allocated.
//!   An existing lease is returned as it is (IPAM checks it is the same pod — UID included —
//!   and network). Otherwise the pod must have been observed: a pod control has not seen yet
//!   is parked and retried with every batch for [`LoopConfig::pod_wait`], then refused with
//!   code 11 (try again later) — never bound with a stand-in object. A pod bound to a network
//!   that does not exist (yet) is also 11; a pod no policy binds is 100. The lease records the
//!   UID.
//! - **Attach** marks the lease attached (its port is published with the batch). An Attach for
//!   a lease that is attached already means the plugin rebuilt the pod's interface (a retried
//!   ADD after it vanished): the lease gets a new endpoint id, so the forwarder replaces its
//!   port instead of keeping the old one "up".
//! - **Release**, **Gc** release and unmark; **Check** and **Status** read the batch's result.
//!   Attach, Check and Release with a UID other than the one the lease recorded touch nothing:
//!   the lease is another pod's (kubelet's DEL for a pod replaced under the same name).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lace_shared::tables::TableWriter;
use lace_shared::types::PortId;

use crate::api::Condition;
use crate::bind::Binding;
use crate::compile::{Change, Compiler};
use crate::ipam::{AllocateRequest, EndpointLease, Ipam, IpamError, PodRef, SharedIpam};
use crate::proto::{Allocation, Attachment, ErrorCode, IpConfig, Request, Response, RouteConfig};
use crate::source::SourceEvent;
use crate::world::AttachmentKey;

use super::allocate::{allocate, AllocOutcome, IpamActions, IpamAnswer, IpamRequest};
use super::core::{BuildInputs, Core, PodLookup};
use super::report::{host_len, report, TablesReport};
use super::state::{AttachedMarks, SharedState, StateError};
use super::status::{now_rfc3339, StatusFile, StatusSink};

/// Where the allocation state lives (see the module docs).
pub trait IpamStore {
    /// Reloads what other writers changed since this store last read or wrote; whether
    /// anything did.
    fn refresh(&mut self) -> Result<bool, StateError>;

    /// Runs `f` on the state as last loaded or changed.
    fn read<R>(&self, f: impl FnOnce(&Ipam) -> R) -> R;

    /// Runs `f` on the latest state and keeps its changes atomically. `f` may run more than
    /// once (after a conflict), so it must be a function of the state it is given.
    fn mutate<R>(
        &mut self,
        f: impl FnMut(&mut Ipam) -> Result<R, IpamError>,
    ) -> Result<R, StateError>;

    /// Writes redone after a conflict with another writer, and API requests that failed,
    /// since the store was opened; none for a store without an API server.
    fn api_counts(&self) -> (u64, u64) {
        (0, 0)
    }

    /// Whether the store's last request reached where the state lives (always, for a store
    /// without an API server). While it is not, control takes no new allocation — ADDs that
    /// need one are answered 11 — and only releases (see [`Self::owed`]).
    fn reachable(&self) -> bool {
        true
    }

    /// Releases taken while the state was unreachable, not written there yet.
    fn owed(&self) -> usize {
        0
    }
}

impl IpamStore for SharedState {
    fn refresh(&mut self) -> Result<bool, StateError> {
        SharedState::refresh(self)
    }

    fn read<R>(&self, f: impl FnOnce(&Ipam) -> R) -> R {
        f(self.ipam())
    }

    fn mutate<R>(
        &mut self,
        f: impl FnMut(&mut Ipam) -> Result<R, IpamError>,
    ) -> Result<R, StateError> {
        SharedState::mutate(self, f)
    }
}

/// One process's store (no other writer): in memory, or saved after every change.
impl IpamStore for SharedIpam {
    fn refresh(&mut self) -> Result<bool, StateError> {
        Ok(false)
    }

    fn read<R>(&self, f: impl FnOnce(&Ipam) -> R) -> R {
        SharedIpam::read(self, f)
    }

    fn mutate<R>(
        &mut self,
        f: impl FnMut(&mut Ipam) -> Result<R, IpamError>,
    ) -> Result<R, StateError> {
        Ok(self.update(f)?)
    }
}

/// The generation of the tables control last published, for waiters outside the loop.
#[derive(Debug, Default)]
pub struct Published {
    generation: Mutex<u64>,
    changed: Condvar,
}

impl Published {
    fn set(&self, g: u64) {
        let mut cur = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if g > *cur {
            *cur = g;
            self.changed.notify_all();
        }
    }

    /// Waits until generation `g` is published, at most until `deadline`; whether it is.
    pub fn wait_for(&self, g: u64, deadline: Instant) -> bool {
        let mut cur = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *cur < g {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            cur = self
                .changed
                .wait_timeout(cur, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

/// An input of the loop.
#[derive(Debug)]
pub enum Event {
    /// From the source.
    Source(SourceEvent),
    /// A CNI request, answered on its `reply`.
    Cni(CniCall),
    /// Time passed (the loop makes these itself when idle; tests send them).
    Tick,
    /// The learn intake: the forwarder's l2 learning reports, or the shared records changed.
    Learn(crate::learn::intake::Wake),
    /// Finish the batch and return.
    Stop,
}

/// A CNI request and where its answer goes.
#[derive(Debug)]
pub struct CniCall {
    /// The request.
    pub request: Request,
    /// Gets exactly one [`Reply`].
    pub reply: Sender<Reply>,
}

/// The loop's answer to a [`CniCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The final answer.
    Done(Answer),
    /// Attach: published; the caller waits for the forwarder (see [`AttachTicket`]).
    Attached(AttachTicket),
}

/// A response and whether it is an ordinary outcome (logged quietly: a DEL's lookup of an
/// attachment that is already gone) or worth a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The response for the plugin.
    pub response: Response,
    /// An expected outcome, not a problem.
    pub ordinary: bool,
}

impl Answer {
    fn ok(response: Response) -> Answer {
        Answer {
            response,
            ordinary: true,
        }
    }

    fn error(code: ErrorCode, msg: impl Into<String>, details: impl Into<String>) -> Answer {
        Answer {
            response: Response::Error {
                code,
                msg: msg.into(),
                details: details.into(),
            },
            ordinary: false,
        }
    }
}

/// What an Attach's caller waits for, outside the loop: generation `generation` published,
/// then the forwarder reporting `port` up for `endpoint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachTicket {
    /// The answer once the port is up.
    pub allocation: Allocation,
    /// The forwarder port.
    pub port: PortId,
    /// The endpoint id the forwarder must acknowledge.
    pub endpoint: u64,
    /// The host-side interface.
    pub iface: String,
    /// The tables' generation that carries the port.
    pub generation: u64,
}

/// The loop's settings.
#[derive(Debug, Clone, Copy)]
pub struct LoopConfig {
    /// How long an Allocate for a pod control has not observed waits for it.
    pub pod_wait: Duration,
    /// How often the loop wakes when idle (other processes' changes to the state, parked
    /// requests' deadlines).
    pub tick: Duration,
    /// The compilation settings: the pods' MTU, per network kind.
    pub compile: crate::compile::CompileConfig,
}

#[derive(Debug)]
struct Parked {
    attachment: Attachment,
    reply: Sender<Reply>,
    deadline: Instant,
}

/// How a call of the batch is answered once the steps ran.
#[derive(Debug)]
enum Pending {
    Now(Sender<Reply>, Answer),
    Allocate {
        reply: Sender<Reply>,
        who: String,
        network: String,
        index: usize,
        fresh: bool,
    },
    Attach {
        reply: Sender<Reply>,
        key: AttachmentKey,
        renew: Option<usize>,
    },
    Release {
        reply: Sender<Reply>,
        key: AttachmentKey,
        index: usize,
    },
    Collect {
        reply: Sender<Reply>,
        index: usize,
    },
    Check {
        reply: Sender<Reply>,
        attachment: Attachment,
    },
    Status {
        reply: Sender<Reply>,
    },
}

/// The loop's state: the core, and the I/O around it (see the module docs).
#[derive(Debug)]
pub struct Control<S: IpamStore, R: StatusSink> {
    core: Core,
    cfg: LoopConfig,
    store: S,
    marks: AttachedMarks,
    compiler: Compiler,
    writer: TableWriter,
    sink: R,
    published: Arc<Published>,
    parked: Vec<Parked>,
    /// Calls that came before the source's first snapshot.
    early: Vec<(Request, Sender<Reply>)>,
    full: bool,
    compile_error: Option<String>,
    /// ClusterIPs whose records the last refused batch held (their Services say so).
    unpublished: BTreeSet<IpAddr>,
    notes: Vec<crate::compile::Note>,
    status: StatusFile,
    logged: BTreeMap<(String, String, String), (String, String)>,
    logged_problems: BTreeSet<String>,
    /// The node's host interface, when control keeps one (ADR 0023).
    host: Option<super::host::HostInterface>,
    host_error: Option<String>,
    /// The node's external uplinks, from the forwarder's status region.
    uplinks: Option<super::external::ForwarderUplinks>,
    learning: Option<super::learning::Learning>,
    metrics: Arc<super::metrics::Metrics>,
}

/// The answer to a request that needs a write while the allocation state is unreachable.
fn unreachable_answer(who: &str) -> Answer {
    Answer::error(
        ErrorCode::TryAgainLater,
        format!(
            "{who}: the API server is unreachable, so no new allocation can be taken; \
             lace-control keeps serving DEL and CHECK for the pods it has, and the runtime's \
             retry succeeds once the API server answers again"
        ),
        "",
    )
}

/// An error answer for a failed change of the shared state.
fn state_error(what: &str, e: &StateError) -> Answer {
    match e {
        StateError::Ipam(e) => Answer::error(e.cni_code(), format!("{what}: {e}"), ""),
        other => Answer::error(ErrorCode::TryAgainLater, format!("{what}: {other}"), ""),
    }
}

fn key_of(a: &Attachment) -> AttachmentKey {
    AttachmentKey {
        container_id: a.container_id.clone(),
        ifname: a.ifname.clone(),
    }
}

fn pod_of(a: &Attachment) -> PodRef {
    PodRef {
        namespace: a.pod_namespace.clone(),
        name: a.pod_name.clone(),
        uid: a.pod_uid.clone(),
    }
}

fn check_attachment(a: &Attachment) -> Option<Answer> {
    (a.container_id.is_empty() || a.ifname.is_empty()).then(|| {
        Answer::error(
            ErrorCode::InvalidArgs,
            "the request has no container id or interface name; the runtime must set \
             CNI_CONTAINERID and CNI_IFNAME",
            "",
        )
    })
}

/// The plugin's view of a lease. `l2`: the lease is on an l2 network, whose endpoints' addresses
/// carry the subnet's prefix length (one L2 domain: they reach each other directly); an l3
/// endpoint's address is a host address, everything reached through the gateway. `fresh`:
/// made by this Allocate.
pub fn allocation_of(lease: &EndpointLease, mtu: u16, l2: bool, fresh: bool) -> Allocation {
    Allocation {
        network: lease.network.clone(),
        host_interface: lease.host_iface.as_str().to_owned(),
        mac: lease.mac.to_string(),
        mtu,
        ips: lease
            .addresses
            .iter()
            .map(|a| IpConfig {
                address: if l2 {
                    a.with_prefix_len().to_string()
                } else {
                    format!("{}/{}", a.address, host_len(&a.address))
                },
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
        fresh,
    }
}

impl<S: IpamStore, R: StatusSink> Control<S, R> {
    /// A loop over `core`, with its store, marks, compiler, tables and sink. Nothing happens
    /// until the first [`Control::step`] (the first one compiles everything).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        core: Core,
        cfg: LoopConfig,
        store: S,
        marks: AttachedMarks,
        compiler: Compiler,
        writer: TableWriter,
        sink: R,
        published: Arc<Published>,
    ) -> Control<S, R> {
        Control {
            core,
            cfg,
            store,
            marks,
            compiler,
            writer,
            sink,
            published,
            parked: Vec::new(),
            early: Vec::new(),
            full: true,
            compile_error: None,
            unpublished: BTreeSet::new(),
            notes: Vec::new(),
            status: StatusFile::default(),
            logged: BTreeMap::new(),
            logged_problems: BTreeSet::new(),
            host: None,
            host_error: None,
            uplinks: None,
            learning: None,
            metrics: Arc::default(),
        }
    }

    /// Learns l2 MACs (ADR 0019): the forwarder's reports arrive as [`Event::Learn`], the
    /// records live in `learning`'s store.
    pub fn with_learning(mut self, learning: super::learning::Learning) -> Self {
        self.learning = Some(learning);
        self
    }

    /// The metrics this loop keeps (the CNI server and `/metrics` share them).
    pub fn metrics(&self) -> Arc<super::metrics::Metrics> {
        self.metrics.clone()
    }

    /// The same loop, reading the node's external uplinks from the forwarder's status region
    /// on its ticks (ADR 0054).
    pub fn with_uplinks(mut self, uplinks: super::external::ForwarderUplinks) -> Self {
        self.uplinks = Some(uplinks);
        self
    }

    /// The same loop, keeping the node's host interface: its port in the tables, its routes
    /// equal to the host network's destinations.
    pub fn with_host(mut self, host: super::host::HostInterface) -> Self {
        self.host = Some(host);
        self
    }

    /// The core (tests, diagnostics).
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// The status last reported.
    pub fn status(&self) -> &StatusFile {
        &self.status
    }

    /// Runs until [`Event::Stop`] or until every sender is gone: one batch per wake-up.
    pub fn run(&mut self, events: &Receiver<Event>) {
        let mut trim = super::heap::IdleTrim::default();
        loop {
            let timeout = self
                .parked
                .iter()
                .map(|p| p.deadline.saturating_duration_since(Instant::now()))
                .min()
                .map_or(self.cfg.tick, |d| d.min(self.cfg.tick));
            let first = match events.recv_timeout(timeout) {
                Ok(e) => {
                    trim.woke(true);
                    e
                }
                Err(RecvTimeoutError::Timeout) => {
                    if trim.woke(false) {
                        // Idle after work: what the work freed goes back to the system.
                        super::heap::release_free_memory();
                    }
                    Event::Tick
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let mut batch = vec![first];
            while batch.len() < 1024 {
                match events.try_recv() {
                    Ok(e) => batch.push(e),
                    Err(_) => break,
                }
            }
            if !self.step(batch, Instant::now()) {
                return;
            }
        }
    }

    /// Runs the steps once for `batch` (see the module docs); false after [`Event::Stop`].
    pub fn step(&mut self, batch: Vec<Event>, now: Instant) -> bool {
        let mut keep_running = true;
        let mut calls: VecDeque<(Request, Sender<Reply>)> = VecDeque::new();
        let mut observed = false;
        let mut tick = false;
        for e in batch {
            match e {
                Event::Source(s) => {
                    self.core.observe(s);
                    observed = true;
                }
                Event::Cni(c) => calls.push_back((c.request, c.reply)),
                Event::Tick => tick = true,
                Event::Learn(w) => {
                    if let Some(l) = &mut self.learning {
                        l.wake(w);
                    }
                }
                Event::Stop => keep_running = false,
            }
        }
        let synced = self.core.synced();
        let calls = if synced {
            // Calls from before the first snapshot go first, in their order.
            let mut all: VecDeque<(Request, Sender<Reply>)> =
                std::mem::take(&mut self.early).into_iter().collect();
            all.extend(calls);
            all
        } else {
            // Nothing is known of the objects yet (a restart's first moments, or the API
            // server away since control started): nothing is judged against an empty world
            // and no table is compiled. What needs only the allocation state — DEL, GC,
            // CHECK — is served from it; ADD and Attach wait for the first snapshot (or are
            // 11 at once while the allocation state cannot be written); Status is 11.
            let mut now = VecDeque::new();
            for (request, reply) in calls {
                match request {
                    Request::Status => {
                        let _ = reply.send(Reply::Done(Answer::error(
                            ErrorCode::TryAgainLater,
                            format!(
                                "lace-control on node {} has not read its source yet",
                                self.core.node()
                            ),
                            "",
                        )));
                    }
                    Request::Release(_) | Request::Check(_) | Request::Gc { .. } => {
                        now.push_back((request, reply));
                    }
                    Request::Allocate(a) | Request::Attach(a) if !self.store.reachable() => {
                        let who = format!("container {} interface {}", a.container_id, a.ifname);
                        let _ = reply.send(Reply::Done(unreachable_answer(&who)));
                    }
                    other => self.early.push((other, reply)),
                }
            }
            if now.is_empty() {
                return keep_running;
            }
            now
        };
        let mut refreshed = false;
        if tick || !calls.is_empty() {
            match self.store.refresh() {
                Ok(changed) => refreshed = changed,
                Err(e) => tracing::error!("state unreadable, keeping the last state: {e}"),
            }
        }
        if observed {
            self.core.plan();
        }
        let parked = std::mem::take(&mut self.parked);
        let retry_host = self.host_error.is_some();
        let uplinks_changed = tick && self.uplinks.as_mut().is_some_and(|u| u.refresh());
        // Learning ages its records with the ticks, and acts on the forwarder's reports.
        let learn = self.learning.as_ref().is_some_and(|l| tick || l.pending());
        if !(observed
            || refreshed
            || self.full
            || retry_host
            || uplinks_changed
            || !calls.is_empty()
            || !parked.is_empty())
        {
            if learn {
                self.learn_only(tick);
            }
            return keep_running;
        }

        // ---- the CNI requests' intents ----
        let mut pending = Vec::new();
        let mut requests = Vec::new();
        for p in parked {
            self.admit_allocate(
                p.attachment,
                p.reply,
                p.deadline,
                now,
                &mut pending,
                &mut requests,
            );
        }
        for (request, reply) in calls {
            self.admit(request, reply, now, &mut pending, &mut requests);
        }

        // ---- allocate ----
        let mut actions = if synced {
            self.store.read(|ipam| self.core.ipam_actions(ipam))
        } else {
            IpamActions::default()
        };
        if !self.store.reachable() {
            // Networks and nodes are registered when the state is reachable again; releases
            // are taken now.
            actions = actions.releases_only();
        }
        let outcome = if actions.is_empty() && requests.is_empty() {
            Ok(AllocOutcome::default())
        } else {
            self.store
                .mutate(|ipam| Ok(allocate(ipam, &actions, &requests)))
        };
        let outcome = match outcome {
            Ok(o) => {
                self.core.absorb(&o);
                log_outcome(&o);
                Ok(o)
            }
            Err(e) => {
                tracing::error!("IPAM not updated, retrying with the next batch: {e}");
                Err(e)
            }
        };
        let answers: &[IpamAnswer] = match &outcome {
            Ok(o) => &o.answers,
            Err(_) => &[],
        };
        // Marks follow the answers; every mark change of the batch is saved once.
        let mut marks_changed = false;
        let mut attach_keys = Vec::new();
        for p in &pending {
            match p {
                Pending::Attach { key, renew, .. } => {
                    let renewed_ok = renew.is_none_or(|i| {
                        matches!(answers.get(i), Some(IpamAnswer::Lease(Ok(Some(_)))))
                    });
                    if outcome.is_ok() && renewed_ok {
                        attach_keys.push(key.clone());
                    }
                }
                // Only what was released: a DEL for another pod (UID) of the same attachment
                // leaves that pod's port published.
                Pending::Release { key, index, .. }
                    if matches!(answers.get(*index), Some(IpamAnswer::Released(Some(_)))) =>
                {
                    marks_changed |= self.marks.remove(key);
                }
                Pending::Collect { index, .. } => {
                    if let Some(IpamAnswer::Collected(leases)) = answers.get(*index) {
                        for l in leases {
                            marks_changed |= self.marks.remove(&l.key);
                        }
                    }
                }
                _ => {}
            }
        }
        for k in &attach_keys {
            marks_changed |= self.marks.insert(k);
        }
        if let Ok(o) = &outcome {
            for l in &o.released {
                marks_changed |= self.marks.remove(&l.key);
            }
        }
        let stale: Vec<AttachmentKey> = self.store.read(|ipam| {
            self.marks
                .keys()
                .iter()
                .filter(|k| ipam.lease(k).is_none_or(|l| l.node != self.core.node()))
                .cloned()
                .collect()
        });
        for k in stale {
            marks_changed |= self.marks.remove(&k);
        }
        let marks_error = if marks_changed {
            self.marks.save().err()
        } else {
            None
        };
        if let Some(e) = &marks_error {
            tracing::error!("{e}");
        }

        if !synced {
            for p in pending {
                self.answer(p, answers, outcome.as_ref().err(), marks_error.as_ref());
            }
            return keep_running;
        }

        // ---- world, diff, compile, publish ----
        let host_port = self.host.as_ref().map(super::host::HostInterface::port);
        let changes = {
            let (core, marks) = (&mut self.core, &self.marks);
            let external_uplinks = self
                .uplinks
                .as_ref()
                .map_or(&[][..], super::external::ForwarderUplinks::current);
            let unresolved = self
                .uplinks
                .as_ref()
                .map_or(&[][..], super::external::ForwarderUplinks::unresolved);
            self.store.read(|ipam| {
                core.build(BuildInputs {
                    ipam,
                    attached: marks.keys(),
                    host: host_port,
                    external_uplinks,
                    unresolved,
                })
            })
        };
        let mut changes = changes;
        if let Some(l) = &mut self.learning {
            let learned = l.step(self.core.world(), tick);
            changes.extend(self.core.set_learned(learned));
        }
        let changes = if self.full {
            vec![Change::All]
        } else {
            changes
        };
        if !changes.is_empty() {
            self.compile(&changes);
        }
        self.published.set(self.writer.generation());
        self.sync_host();

        // ---- report ----
        self.report();

        // ---- answers ----
        for p in pending {
            self.answer(p, answers, outcome.as_ref().err(), marks_error.as_ref());
        }
        keep_running
    }

    /// A batch where only learning has work (its ticks, the forwarder's reports): the world
    /// as last built stands, so only the learned MACs are stepped; the tables are compiled and
    /// the status written only when they, or what the status shows of learning, changed (a
    /// full step would rebuild the world and rewrite the status on every tick).
    fn learn_only(&mut self, tick: bool) {
        let Some(l) = &mut self.learning else {
            return;
        };
        let shown = |l: &super::learning::Learning| {
            (l.stats().clone(), l.error().map(str::to_owned), l.entries())
        };
        let before = shown(l);
        let learned = l.step(self.core.world(), tick);
        let learning_changed = before != shown(l);
        let changes = self.core.set_learned(learned);
        if !changes.is_empty() {
            self.compile(&changes);
            self.published.set(self.writer.generation());
        }
        if learning_changed || !changes.is_empty() {
            self.report();
        }
    }

    fn admit(
        &mut self,
        request: Request,
        reply: Sender<Reply>,
        now: Instant,
        pending: &mut Vec<Pending>,
        requests: &mut Vec<IpamRequest>,
    ) {
        match request {
            Request::Allocate(a) => {
                let deadline = now + self.cfg.pod_wait;
                self.admit_allocate(a, reply, deadline, now, pending, requests);
            }
            Request::Attach(a) => {
                if let Some(bad) = check_attachment(&a) {
                    pending.push(Pending::Now(reply, bad));
                    return;
                }
                let key = key_of(&a);
                match self.own_lease(&a) {
                    Err(answer) => pending.push(Pending::Now(reply, *answer)),
                    // A new endpoint id is a write the API server must take.
                    Ok(_) if self.marks.contains(&key) && !self.store.reachable() => {
                        let who =
                            format!("container {} interface {}", key.container_id, key.ifname);
                        pending.push(Pending::Now(reply, unreachable_answer(&who)));
                    }
                    Ok(_) => {
                        let renew = self.marks.contains(&key).then(|| {
                            requests.push(IpamRequest::Renew(key.clone()));
                            requests.len() - 1
                        });
                        pending.push(Pending::Attach { reply, key, renew });
                    }
                }
            }
            Request::Release(a) => {
                if let Some(bad) = check_attachment(&a) {
                    pending.push(Pending::Now(reply, bad));
                    return;
                }
                let key = key_of(&a);
                requests.push(IpamRequest::Release {
                    key: key.clone(),
                    node: self.core.node().to_owned(),
                    pod: pod_of(&a),
                });
                pending.push(Pending::Release {
                    reply,
                    key,
                    index: requests.len() - 1,
                });
            }
            Request::Check(a) => match check_attachment(&a) {
                Some(bad) => pending.push(Pending::Now(reply, bad)),
                None => pending.push(Pending::Check {
                    reply,
                    attachment: a,
                }),
            },
            Request::Status => pending.push(Pending::Status { reply }),
            Request::Gc { valid } => {
                requests.push(IpamRequest::Collect {
                    node: self.core.node().to_owned(),
                    keep: valid.iter().map(key_of).collect(),
                });
                pending.push(Pending::Collect {
                    reply,
                    index: requests.len() - 1,
                });
            }
        }
    }

    fn admit_allocate(
        &mut self,
        a: Attachment,
        reply: Sender<Reply>,
        deadline: Instant,
        now: Instant,
        pending: &mut Vec<Pending>,
        requests: &mut Vec<IpamRequest>,
    ) {
        if let Some(bad) = check_attachment(&a) {
            pending.push(Pending::Now(reply, bad));
            return;
        }
        if a.pod_namespace.is_empty() || a.pod_name.is_empty() {
            pending.push(Pending::Now(
                reply,
                Answer::error(
                    ErrorCode::InvalidArgs,
                    format!(
                        "container {}: no K8S_POD_NAMESPACE / K8S_POD_NAME in CNI_ARGS; lace \
                         binds pods by namespace and name, so the runtime must pass them",
                        a.container_id
                    ),
                    "",
                ),
            ));
            return;
        }
        let key = key_of(&a);
        let pod = pod_of(&a);
        let who = format!("pod {}/{}", pod.namespace, pod.name);
        let node = self.core.node().to_owned();
        // The call names the pod by UID too: the observed Pod must be that one, not an older
        // or newer pod of the same name. The watch may not have delivered a pod recreated a
        // moment ago, so a mismatch waits as an unobserved pod does.
        if let PodLookup::Bound(b) = self.core.pod(&pod) {
            if !pod.uid.is_empty() && !b.uid.is_empty() && b.uid != pod.uid {
                if now < deadline {
                    self.parked.push(Parked {
                        attachment: a,
                        reply,
                        deadline,
                    });
                    return;
                }
                pending.push(Pending::Now(
                    reply,
                    Answer::error(
                        ErrorCode::InvalidArgs,
                        format!(
                            "{who}: K8S_POD_UID {} in CNI_ARGS is not the UID of Pod {}/{} \
                             (metadata.uid {}) as lace-control on node {node} observes it after \
                             {} ms: the ADD is for a pod deleted and recreated under the same \
                             name; nothing was allocated",
                            pod.uid,
                            pod.namespace,
                            pod.name,
                            b.uid,
                            self.cfg.pod_wait.as_millis()
                        ),
                        "",
                    ),
                ));
                return;
            }
        }
        // Decided once: a lease carries the network its pod was bound to. A lease of another
        // UID is not this pod's: released with this batch (its pod is gone, see
        // `Core::ipam_actions`) or refused by IPAM, never taken over.
        let existing = self.store.read(|ipam| {
            ipam.lease(&key)
                .filter(|l| !l.pod.uid_differs(&pod))
                .map(|l| l.network.clone())
        });
        let (network, fresh, identity) = match existing {
            Some(n) => (n, false, None),
            None if !self.store.reachable() => {
                pending.push(Pending::Now(reply, unreachable_answer(&who)));
                return;
            }
            None => {
                let binding = match self.core.pod(&pod) {
                    PodLookup::NotObserved if now < deadline => {
                        self.parked.push(Parked {
                            attachment: a,
                            reply,
                            deadline,
                        });
                        return;
                    }
                    PodLookup::NotObserved => {
                        pending.push(Pending::Now(
                            reply,
                            Answer::error(
                                ErrorCode::TryAgainLater,
                                format!(
                                    "{who} is not known to lace-control on node {node}: it is \
                                     not among the manifests (or not yet observed from the API) \
                                     after {} ms; lace binds a pod by its object (namespace, \
                                     labels), so add the pod's manifest — the runtime's retry \
                                     will then succeed",
                                    self.cfg.pod_wait.as_millis()
                                ),
                                "",
                            ),
                        ));
                        return;
                    }
                    PodLookup::Bound(b) => b,
                };
                let by = binding.decided_by.as_ref().map_or(String::new(), |(p, r)| {
                    format!(" (NetworkBindingPolicy {p}, spec.rules[{r}])")
                });
                match binding.binding {
                    Binding::Network(n) if self.core.network_usable(&n) => {
                        (n, true, binding.identity.clone())
                    }
                    Binding::Network(n) => {
                        pending.push(Pending::Now(
                            reply,
                            Answer::error(
                                ErrorCode::TryAgainLater,
                                format!(
                                    "{who} binds to Network {n}{by}, which does not exist yet \
                                     or is not valid; create or fix the network (the \
                                     runtime's retry then succeeds), or fix the policy"
                                ),
                                "",
                            ),
                        ));
                        return;
                    }
                    Binding::ExplicitlyUnbound => {
                        pending.push(Pending::Now(
                            reply,
                            Answer::error(
                                ErrorCode::Unbound,
                                format!("{who} is explicitly bound to no network{by}"),
                                "",
                            ),
                        ));
                        return;
                    }
                    Binding::NoMatch => {
                        let active = self.core.policies().active();
                        pending.push(Pending::Now(
                            reply,
                            Answer::error(
                                ErrorCode::Unbound,
                                format!(
                                    "no NetworkBindingPolicy binds {who} (policies in use: {}); \
                                     add a rule that matches it",
                                    if active.is_empty() {
                                        "none".to_owned()
                                    } else {
                                        active.join(", ")
                                    }
                                ),
                                binding.errors.join("; "),
                            ),
                        ));
                        return;
                    }
                }
            }
        };
        if !self.core.node_known(&node) {
            pending.push(Pending::Now(
                reply,
                Answer::error(
                    ErrorCode::TryAgainLater,
                    format!(
                        "node {node} is not registered: the manifests need a Node {node} with \
                         the lace-cni.io/underlay annotation"
                    ),
                    self.compile_error.clone().unwrap_or_default(),
                ),
            ));
            return;
        }
        if let Some(Err(e)) = identity.as_deref().map(crate::learn::check_identity) {
            pending.push(Pending::Now(
                reply,
                Answer::error(ErrorCode::InvalidArgs, format!("{who}: {e}"), ""),
            ));
            return;
        }
        requests.push(IpamRequest::Allocate(AllocateRequest {
            key,
            network: network.clone(),
            node,
            pod,
            identity,
        }));
        pending.push(Pending::Allocate {
            reply,
            who,
            network,
            index: requests.len() - 1,
            fresh,
        });
    }

    /// The plugin's view of `lease`, with the MTU and address form of its network's kind.
    fn allocation(&self, lease: &EndpointLease, fresh: bool) -> Allocation {
        // IPAM's record of the network (the world is empty until the first snapshot).
        let l2 = self.store.read(|ipam| ipam.network_kind(&lease.network))
            == Some(crate::api::NetworkType::L2);
        let kind = if l2 {
            lace_shared::types::NetworkKind::L2
        } else {
            lace_shared::types::NetworkKind::L3
        };
        allocation_of(lease, self.cfg.compile.pod_mtu_of(kind), l2, fresh)
    }

    fn own_lease(&self, a: &Attachment) -> Result<EndpointLease, Box<Answer>> {
        let key = key_of(a);
        let node = self.core.node();
        let pod = pod_of(a);
        match self.store.read(|ipam| ipam.lease(&key).cloned()) {
            Some(l) if l.node == node && l.pod.uid_differs(&pod) => Err(Box::new(Answer::error(
                ErrorCode::InvalidArgs,
                format!(
                    "container {} interface {} is attached for pod {}, not for K8S_POD_UID {}: \
                     a pod of the same name that replaced the one this call is for",
                    a.container_id, a.ifname, l.pod, pod.uid
                ),
                "",
            ))),
            Some(l) if l.node == node => Ok(l),
            Some(l) => Err(Box::new(Answer::error(
                ErrorCode::AlreadyExists,
                format!(
                    "container {} interface {} is attached on node {}, not {node}",
                    a.container_id, a.ifname, l.node
                ),
                "",
            ))),
            None => Err(Box::new(Answer {
                ordinary: true,
                ..Answer::error(
                    ErrorCode::InvalidArgs,
                    format!(
                        "container {} interface {} has no allocation on node {node}; ADD must \
                         Allocate first",
                        a.container_id, a.ifname
                    ),
                    "",
                )
            })),
        }
    }

    fn answer(
        &mut self,
        p: Pending,
        answers: &[IpamAnswer],
        failed: Option<&StateError>,
        marks_error: Option<&StateError>,
    ) {
        let send = |reply: Sender<Reply>, r: Reply| {
            // The caller may have given up (timed out); nothing to do then.
            let _ = reply.send(r);
        };
        match p {
            Pending::Now(reply, a) => send(reply, Reply::Done(a)),
            Pending::Allocate {
                reply,
                who,
                network,
                index,
                fresh,
            } => {
                let a = match (failed, answers.get(index)) {
                    (Some(e), _) => state_error(&who, e),
                    (None, Some(IpamAnswer::Lease(Ok(Some(lease))))) => {
                        self.core.note_allocation(&network, Ok(()));
                        Answer::ok(Response::Allocated(self.allocation(lease, fresh)))
                    }
                    (None, Some(IpamAnswer::Lease(Err(e)))) => {
                        self.core.note_allocation(&network, Err(e));
                        state_error(&who, &StateError::Ipam(e.clone()))
                    }
                    _ => Answer::error(ErrorCode::Internal, format!("{who}: no IPAM answer"), ""),
                };
                send(reply, Reply::Done(a));
            }
            Pending::Attach { reply, key, renew } => {
                let r = match (failed, renew.map(|i| answers.get(i)), marks_error) {
                    (Some(e), _, _) => Reply::Done(state_error("attach", e)),
                    (None, Some(Some(IpamAnswer::Lease(Err(e)))), _) => {
                        Reply::Done(state_error("attach", &StateError::Ipam(e.clone())))
                    }
                    (None, _, Some(e)) => Reply::Done(state_error("attach", e)),
                    _ => match (
                        &self.compile_error,
                        self.store.read(|i| i.lease(&key).cloned()),
                    ) {
                        (Some(e), _) => Reply::Done(Answer::error(
                            ErrorCode::TryAgainLater,
                            format!(
                                "node {}'s tables cannot be published: {e}",
                                self.core.node()
                            ),
                            "",
                        )),
                        (None, Some(lease)) => Reply::Attached(AttachTicket {
                            allocation: self.allocation(&lease, false),
                            port: lease.port,
                            endpoint: lease.endpoint_id,
                            iface: lease.host_iface.as_str().to_owned(),
                            generation: self.writer.generation(),
                        }),
                        (None, None) => Reply::Done(Answer::error(
                            ErrorCode::TryAgainLater,
                            format!(
                                "container {} interface {}: the allocation was released while \
                                 attaching; retry the ADD",
                                key.container_id, key.ifname
                            ),
                            "",
                        )),
                    },
                };
                send(reply, r);
            }
            Pending::Release { reply, key, index } => {
                let a = match (failed, answers.get(index)) {
                    (Some(e), _) => state_error("release", e),
                    (None, Some(IpamAnswer::Released(Some(l)))) => {
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
                        Answer::ok(Response::Ok)
                    }
                    (None, _) => {
                        tracing::debug!(
                            "release {}/{}: nothing to release",
                            key.container_id,
                            key.ifname
                        );
                        Answer::ok(Response::Ok)
                    }
                };
                send(reply, Reply::Done(a));
            }
            Pending::Collect { reply, index } => {
                let a = match (failed, answers.get(index)) {
                    (Some(e), _) => state_error("gc", e),
                    (None, Some(IpamAnswer::Collected(released))) => {
                        for l in released {
                            tracing::info!(
                                "GC: pod {}/{} ({}) released",
                                l.pod.namespace,
                                l.pod.name,
                                l.key.container_id
                            );
                        }
                        Answer::ok(Response::Ok)
                    }
                    (None, _) => Answer::ok(Response::Ok),
                };
                send(reply, Reply::Done(a));
            }
            Pending::Check { reply, attachment } => {
                let a = match self.own_lease(&attachment) {
                    Ok(l) => Answer::ok(Response::Allocated(self.allocation(&l, false))),
                    Err(a) => *a,
                };
                send(reply, Reply::Done(a));
            }
            Pending::Status { reply } => {
                let node = self.core.node().to_owned();
                let a = if !self.core.world().nodes.contains_key(&node) {
                    Answer::error(
                        ErrorCode::TryAgainLater,
                        format!(
                            "node {node} is not registered: the manifests need a Node {node} \
                             with the lace-cni.io/underlay annotation"
                        ),
                        "",
                    )
                } else if let Some(e) = &self.compile_error {
                    Answer::error(
                        ErrorCode::TryAgainLater,
                        format!("node {node}'s tables cannot be published: {e}"),
                        "",
                    )
                } else {
                    Answer::ok(Response::Ok)
                };
                send(reply, Reply::Done(a));
            }
        }
    }

    fn compile(&mut self, changes: &[Change]) {
        let start = Instant::now();
        let published = self.compile_and_publish(changes);
        self.metrics.observe_publish(start.elapsed(), published);
    }

    /// Plans and applies; whether the tables were published.
    fn compile_and_publish(&mut self, changes: &[Change]) -> bool {
        let compiled = match self.compiler.plan(self.core.world(), changes) {
            Ok(c) => c,
            Err(e) => {
                if self.compile_error.as_deref() != Some(&e.to_string()) {
                    tracing::error!("tables not compiled: {e}");
                }
                self.compile_error = Some(e.to_string());
                self.full = true;
                return false;
            }
        };
        let notes = compiled.notes;
        for n in &notes {
            if !self.notes.contains(n) {
                tracing::warn!("compiler: {n}");
            }
        }
        self.notes = notes;
        let changed = crate::compile::changed_cluster_ips(self.compiler.last(), &compiled.tables);
        match self.compiler.apply(&mut self.writer, compiled.tables) {
            Ok(stats) => {
                if self.compile_error.take().is_some() {
                    tracing::info!("tables compiled again");
                }
                self.unpublished.clear();
                self.full = false;
                if stats.changes() > 0 {
                    tracing::debug!(?changes, ?stats, "tables published");
                }
                true
            }
            Err(e) => {
                tracing::error!("tables not published: {e}");
                self.compile_error = Some(format!("publishing the tables: {e}"));
                self.unpublished = changed;
                self.full = true;
                false
            }
        }
    }

    /// Makes the host interface's routes those of the published host network.
    fn sync_host(&mut self) {
        let Some(host) = &mut self.host else {
            return;
        };
        let wanted = crate::compile::host_routes(self.compiler.last());
        let sources = self
            .core
            .world()
            .host
            .as_ref()
            .map(|h| h.addresses.clone())
            .unwrap_or_default();
        match host.sync(&wanted, &sources) {
            Ok(()) => {
                if self.host_error.take().is_some() {
                    tracing::info!("host interface {}: routes in place again", host.name());
                }
            }
            Err(e) => {
                let e = e.to_string();
                if self.host_error.as_deref() != Some(&e) {
                    tracing::error!("{e}; the host cannot reach some pods, retrying");
                }
                self.host_error = Some(e);
            }
        }
    }

    fn report(&mut self) {
        let now = now_rfc3339();
        let status = {
            let tables = TablesReport {
                generation: self.writer.generation(),
                error: self.compile_error.as_deref(),
                unpublished: &self.unpublished,
                notes: &self.notes,
            };
            let (core, marks, prev) = (&self.core, &self.marks, &self.status);
            self.store
                .read(|ipam| report(core, ipam, marks.keys(), tables, &now, prev))
        };
        let mut status = status;
        if let Some(l) = &self.learning {
            status.learned = l.entries();
            status.learning = Some(l.stats().clone());
            status.learning_error = l.error().map(str::to_owned);
        }
        for (kind, list) in [
            (
                "Network",
                status
                    .networks
                    .iter()
                    .map(|n| (&n.name, &n.status.conditions))
                    .collect::<Vec<_>>(),
            ),
            (
                "NetworkBindingPolicy",
                status
                    .binding_policies
                    .iter()
                    .map(|o| (&o.name, &o.conditions))
                    .collect(),
            ),
            (
                "NetworkRoutingPolicy",
                status
                    .routing_policies
                    .iter()
                    .map(|o| (&o.name, &o.conditions))
                    .collect(),
            ),
            (
                "Node",
                status
                    .nodes
                    .iter()
                    .map(|o| (&o.name, &o.conditions))
                    .collect(),
            ),
        ] {
            for (name, conds) in list {
                for c in conds {
                    log_condition(&mut self.logged, kind, name, c);
                }
            }
        }
        let problems: BTreeSet<String> = status.problems.iter().cloned().collect();
        for p in problems.difference(&self.logged_problems) {
            tracing::warn!("{p}");
        }
        self.logged_problems = problems;
        if let Err(e) = self.sink.publish(&status) {
            tracing::error!("status: {e}");
        }
        self.metrics.observe_status(&status);
        self.metrics.observe_store(self.store.api_counts());
        self.metrics
            .observe_api(self.store.reachable(), self.store.owed());
        self.status = status;
    }
}

fn log_outcome(o: &AllocOutcome) {
    for n in &o.removed {
        tracing::warn!("{n} is gone from the source: forgotten by IPAM");
    }
    for l in &o.released {
        tracing::warn!(
            "pod {}/{} ({}) released: its pod, network or node is gone",
            l.pod.namespace,
            l.pod.name,
            l.network
        );
    }
    for e in &o.node_errors {
        tracing::error!("{e}");
    }
}

fn log_condition(
    logged: &mut BTreeMap<(String, String, String), (String, String)>,
    kind: &str,
    name: &str,
    c: &Condition,
) {
    let key = (kind.to_owned(), name.to_owned(), c.type_.clone());
    let val = (c.status.clone(), c.reason.clone());
    if logged.get(&key) != Some(&val) {
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
        logged.insert(key, val);
    }
}
