//! `lace-control run`: the node daemon — one event loop over a pure core (ADR 0009).
//!
//! ```text
//!  manifests dir ─StandaloneSource─► source thread ──SourceEvent──┐
//!  (or an API server ─kube watchers─► source thread, --source kubernetes)
//!  lace-cni ─unix socket─► connection threads ──CniCall/reply─────┼─► event loop (one thread)
//!  signals ─────────────────────────────────────Stop──────────────┘        │
//!        observe → plan → allocate → world → diff → compile → publish → report
//!        (core)    (core)  (store:    (core)  (core) (Compiler → TableWriter) (status file)
//!                          flock'd state file)
//! ```
//!
//! - [`core`]: the pure steps (no I/O), unit-tested without files or processes.
//! - [`allocate`]: the IPAM step, a pure function the store runs.
//! - [`control`]: the loop — batches, the CNI requests' semantics, the I/O around the steps,
//!   the [`control::IpamStore`] and [`status::StatusSink`] boundaries Kubernetes mode swaps.
//! - [`server`]: the CNI socket; an Attach waits for the forwarder outside the loop.
//! - [`report`], [`status`]: what every object shows, and the standalone status file.
//! - [`state`]: the allocation state shared by several processes through a file lock, and this
//!   node's attachment marks.
//!
//! # Restart safety
//!
//! Killing `lace-control` does not touch the tables (the forwarder keeps forwarding). On
//! start it reopens the tables ([`TableWriter::open_or_create`]), reads back what is published
//! ([`Compiler::resume`]) and compiles from the same state file, so the first publication
//! writes nothing that did not change and nothing is reallocated.

pub mod allocate;
pub mod api_status;
pub mod cluster_state;
pub mod config;
pub mod control;
pub mod core;
pub mod external;
pub mod heap;
pub mod host;
pub mod learning;
pub mod local;
pub mod metrics;
pub mod report;
pub mod server;
pub mod state;
pub mod status;

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use lace_shared::status::StatusReader;
use lace_shared::tables::TableWriter;
use lace_shared::types::PortId;

use crate::compile::Compiler;
use crate::source::kubernetes;
use crate::source::standalone::StandaloneSource;
use crate::source::SourceError;

use crate::learn::intake::{self, Intake, StoreSignal};
use crate::learn::kube::ObjectStore;
use crate::learn::store::FileStore;
use config::{RunConfig, SourceConfig};
use control::{Control, Event, LoopConfig, Published};
use learning::Learning;
use state::{AttachedMarks, SharedState, StateError};
use status::{StatusError, StatusFile, StatusFileSink};

/// How often the loop looks at the state file (other processes' changes) and the source
/// polls, when nothing wakes them.
pub const POLL: Duration = Duration::from_millis(200);

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The IPAM state or the attachment marks could not be opened.
    #[error(transparent)]
    State(#[from] StateError),
    /// `--metrics-listen` could not be bound.
    #[error("--metrics-listen {addr}: {source}; give a free address and port")]
    Metrics {
        /// The address.
        addr: std::net::SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The directory of control's own files could not be created.
    #[error(
        "state directory {path}: {source}; pass a directory lace-control may write with \
         --state-dir (its status file and attachment marks live there)"
    )]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
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
    /// The Kubernetes source's configuration is unusable.
    #[error(transparent)]
    Kubernetes(#[from] crate::source::kubernetes::KubernetesError),
    /// Signals could not be set up.
    #[error("signals: {0}")]
    Signals(nix::Error),
    /// The host interface could not be made.
    #[error(transparent)]
    Host(#[from] host::HostError),
    /// The learned MACs' store could not be opened.
    #[error(transparent)]
    Learned(#[from] crate::learn::store::LearnStoreError),
}

/// The daemon, opened: its loop and what the connection threads need.
#[derive(Debug)]
pub struct Daemon {
    cfg: RunConfig,
    control: Loop,
    published: Arc<Published>,
    /// What tells the learn intake thread that another control changed the learned MACs.
    learned_signal: StoreSignal,
}

/// The loop with the allocation store of its mode: the shared state file (standalone) or the
/// API server ([`cluster_state::ClusterState`], Kubernetes mode).
#[derive(Debug)]
enum Loop {
    Standalone(Box<Control<SharedState, StatusFileSink>>),
    Kubernetes(
        Box<Control<cluster_state::ClusterState, api_status::ApiStatusSink<StatusFileSink>>>,
    ),
}

impl Daemon {
    /// Opens the state directory (created if absent), the state, the marks and the tables.
    /// Nothing is published until [`Daemon::run`].
    pub fn open(cfg: RunConfig) -> Result<Daemon, DaemonError> {
        // Threads inherit the signal mask: block the stop signals before any is started (the
        // Kubernetes store's watch thread), so that only `run`'s signal thread takes them.
        stop_signals()
            .thread_block()
            .map_err(DaemonError::Signals)?;
        let p = &cfg.paths;
        std::fs::create_dir_all(&p.state_dir).map_err(|source| DaemonError::StateDir {
            path: p.state_dir.clone(),
            source,
        })?;
        let marks = AttachedMarks::open(&p.attached_file())?;
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
        let published = Arc::new(Published::default());
        let loop_config = LoopConfig {
            pod_wait: cfg.pod_wait,
            tick: POLL,
            compile: cfg.compile(),
        };
        // Kubernetes mode: the EndpointSlice controller writes every Service's slices (other
        // nodes' pods are kept only as policy peers, ADR 0039); standalone: slices if the
        // directory has them, else the selector over lace's own endpoints.
        let core = core::Core::new(&p.node).with_service_cidr(cfg.service_cidr);
        let core = match &cfg.source {
            SourceConfig::Standalone { .. } => core,
            SourceConfig::Kubernetes(_) => {
                core.with_service_endpoints(core::ServiceEndpoints::Slices)
            }
        };
        let sink = StatusFileSink::new(p.status_file());
        let host = match &cfg.host_interface {
            Some((name, netns)) => Some(host::HostInterface::open(
                name,
                netns.as_deref(),
                &p.node,
                cfg.compile().host_mtu(),
            )?),
            None => None,
        };
        let uplinks = external::ForwarderUplinks::new(&p.forwarder_status());
        fn kept<S: control::IpamStore, R: status::StatusSink>(
            c: Control<S, R>,
            host: Option<host::HostInterface>,
            uplinks: external::ForwarderUplinks,
        ) -> Box<Control<S, R>> {
            let c = c.with_uplinks(uplinks);
            Box::new(match host {
                Some(h) => c.with_host(h),
                None => c,
            })
        }
        let (control, learned_signal) = match &cfg.source {
            SourceConfig::Standalone { .. } => {
                let learned = FileStore::path_for(&p.state);
                let store = FileStore::open(&learned)?;
                (
                    Loop::Standalone(kept(
                        Control::new(
                            core,
                            loop_config,
                            SharedState::open(&p.state, &p.lock_file(), cfg.ipam)?,
                            marks,
                            compiler,
                            writer,
                            sink,
                            published.clone(),
                        )
                        .with_learning(Learning::new(Box::new(store), &p.node)),
                        host,
                        uplinks,
                    )),
                    StoreSignal::File(learned),
                )
            }
            SourceConfig::Kubernetes(k) => {
                // The learned MACs as FDBEntry and Neighbor objects (ADR 0032).
                let store = ObjectStore::open(k)?;
                let signal = StoreSignal::Counter(store.changes());
                (
                    Loop::Kubernetes(kept(
                        Control::new(
                            core,
                            loop_config,
                            cluster_state::ClusterState::open_with(
                                k,
                                &cfg.namespace,
                                cfg.ipam,
                                Some(local::LocalFile::new(p.cluster_file())),
                            )?,
                            marks,
                            compiler,
                            writer,
                            api_status::ApiStatusSink::new(k, &cfg.namespace, sink)?,
                            published.clone(),
                        )
                        .with_learning(Learning::new(Box::new(store), &p.node)),
                        host,
                        uplinks,
                    )),
                    signal,
                )
            }
        };
        Ok(Daemon {
            cfg,
            control,
            published,
            learned_signal,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RunConfig {
        &self.cfg
    }

    /// Runs until SIGTERM or SIGINT: the source, the signals and the CNI server in their
    /// threads, the event loop on this one.
    pub fn run(mut self) -> Result<(), DaemonError> {
        let socket_err = |reason: String| DaemonError::Socket {
            path: self.cfg.socket.clone(),
            reason,
        };
        // Block the stop signals in every thread (threads inherit the mask) and wait for them
        // in one: no async-signal-safety concerns, no unsafe.
        let set = stop_signals();
        set.thread_block().map_err(DaemonError::Signals)?;
        let (tx, rx) = mpsc::channel();
        {
            let tx = tx.clone();
            std::thread::Builder::new()
                .name("signals".into())
                .spawn(move || {
                    if let Ok(sig) = set.wait() {
                        tracing::info!("{sig:?}: stopping");
                    }
                    let _ = tx.send(Event::Stop);
                })
                .map_err(|e| socket_err(format!("cannot start the signal thread: {e}")))?;
        }
        let source_thread = std::thread::Builder::new().name("source".into());
        let spawned = match &self.cfg.source {
            SourceConfig::Standalone { manifests } => {
                let mut source = StandaloneSource::new(manifests)?;
                let tx = tx.clone();
                source_thread.spawn(move || {
                    crate::source::pump(&mut source, POLL, |e| tx.send(Event::Source(e)).is_ok())
                })
            }
            SourceConfig::Kubernetes(k) => {
                kubernetes::check(k)?;
                let k = k.clone();
                let tx = tx.clone();
                source_thread.spawn(move || {
                    if let Err(e) = kubernetes::run(&k, |e| tx.send(Event::Source(e)).is_ok()) {
                        // Without a source the loop would wait for a first snapshot forever.
                        tracing::error!("{e}");
                        let _ = tx.send(Event::Stop);
                    }
                })
            }
        };
        spawned.map_err(|e| socket_err(format!("cannot start the source thread: {e}")))?;
        {
            // The forwarder's learn rings, and the shared records' change signal.
            let tx = tx.clone();
            intake::spawn(
                Intake::new(&self.cfg.paths.forwarder_status()),
                self.learned_signal.clone(),
                move |w| tx.send(Event::Learn(w)).is_ok(),
            )
            .map_err(|e| socket_err(format!("cannot start the learn intake thread: {e}")))?;
        }
        let listener = server::bind(&self.cfg.socket)?;
        tracing::info!(
            node = %self.cfg.paths.node,
            socket = %self.cfg.socket.display(),
            state_dir = %self.cfg.paths.state_dir.display(),
            tables = %self.cfg.paths.tables().tables_path().display(),
            "lace-control running"
        );
        let waiter = Arc::new(server::AttachWaiter {
            published: self.published.clone(),
            forwarder_status: self.cfg.paths.forwarder_status(),
            node: self.cfg.paths.node.clone(),
            tables_name: self.cfg.paths.tables_name.clone(),
            timeout: self.cfg.attach_timeout,
        });
        let metrics = match &self.control {
            Loop::Standalone(c) => c.metrics(),
            Loop::Kubernetes(c) => c.metrics(),
        };
        let _metrics_server = match self.cfg.metrics_listen {
            Some(addr) => {
                let m = metrics.clone();
                let server = lace_shared::metrics::MetricsServer::start(addr, move || m.encode())
                    .map_err(|e| DaemonError::Metrics { addr, source: e })?;
                tracing::info!("{}", server.announcement());
                Some(server)
            }
            None => None,
        };
        {
            let tx = tx.clone();
            std::thread::Builder::new()
                .name("cni-server".into())
                .spawn(move || server::serve(&listener, &tx, &waiter, &metrics))
                .map_err(|e| socket_err(format!("cannot start the server thread: {e}")))?;
        }
        drop(tx);
        match &mut self.control {
            Loop::Standalone(c) => c.run(&rx),
            Loop::Kubernetes(c) => c.run(&rx),
        }
        let _ = std::fs::remove_file(&self.cfg.socket);
        tracing::info!("stopped (the forwarder keeps the tables)");
        Ok(())
    }
}

/// SIGTERM and SIGINT.
fn stop_signals() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    set.add(nix::sys::signal::Signal::SIGTERM);
    set.add(nix::sys::signal::Signal::SIGINT);
    set
}

/// `lace-control status`: the status file and the forwarder's port states, rendered.
pub fn status_report(paths: &config::NodePaths) -> Result<String, StatusError> {
    let path = paths.status_file();
    let text = std::fs::read_to_string(&path).map_err(|source| StatusError::Read {
        path: path.clone(),
        node: paths.node.clone(),
        source,
    })?;
    let s: StatusFile = serde_yaml::from_str(&text).map_err(|e| StatusError::Parse {
        path: path.clone(),
        reason: e.to_string(),
    })?;
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
