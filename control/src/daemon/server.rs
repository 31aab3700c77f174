//! The CNI server: a unix socket (mode 0660, parent directory created), one thread per
//! connection, one JSON line in and one JSON line out ([`crate::proto`]). A connection's thread
//! hands the request to the event loop ([`super::control`]) and waits for its reply; an Attach's
//! thread then waits — outside the loop, holding no lock — for the publication and the
//! forwarder's port state ([`AttachWaiter`]).
//!
//! Guarantees: a client that sends nothing is dropped after [`READ_TIMEOUT`]; a request line
//! longer than [`MAX_REQUEST`] or not a [`Request`] is answered with an `InvalidConfig` error
//! (never a crash); a socket file left by a dead daemon is replaced, a live daemon's is not.
//! Ordinary outcomes (a DEL of an attachment already gone) are logged at debug, not as
//! warnings.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lace_shared::status::{PortState, StatusReader};

use crate::proto::{ErrorCode, Request, Response};

use super::control::{Answer, AttachTicket, CniCall, Event, Published, Reply};
use super::metrics::Metrics;
use super::DaemonError;

/// How long a connection may take to send its request.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request line accepted (a GC with thousands of attachments fits).
pub const MAX_REQUEST: u64 = 4 << 20;
/// How long a connection waits for the event loop's reply (the plugin's own timeouts are
/// shorter; this only bounds a thread whose client is gone).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(120);
/// How often an Attach looks at the forwarder's status region (a few loads of shared memory;
/// only while a pod waits for its port).
const ATTACH_POLL: Duration = Duration::from_millis(2);

/// What an Attach waits for, outside the loop.
#[derive(Debug)]
pub struct AttachWaiter {
    /// The loop's publications.
    pub published: Arc<Published>,
    /// The forwarder's status region.
    pub forwarder_status: PathBuf,
    /// This node.
    pub node: String,
    /// The table set (for the message pointing at `lace-forwarder stats`).
    pub tables_name: String,
    /// How long to wait for the port.
    pub timeout: Duration,
}

fn errno_text(errno: u32) -> String {
    let e = nix::errno::Errno::from_raw(i32::try_from(errno).unwrap_or(i32::MAX));
    format!("error {errno} ({})", e.desc())
}

impl AttachWaiter {
    /// Waits for `t`'s generation to be published and its port to be up.
    pub fn wait(&self, t: &AttachTicket) -> Answer {
        let deadline = Instant::now() + self.timeout;
        let fail = |code, msg: String, details: String| Answer {
            response: Response::Error { code, msg, details },
            ordinary: false,
        };
        let iface = &t.iface;
        if !self.published.wait_for(t.generation, deadline) {
            return fail(
                ErrorCode::TryAgainLater,
                format!(
                    "node {}'s tables did not reach generation {} within {} ms",
                    self.node,
                    t.generation,
                    self.timeout.as_millis()
                ),
                String::new(),
            );
        }
        let mut last = String::from("no status region (is the forwarder running?)");
        loop {
            if let Ok(r) = StatusReader::open(&self.forwarder_status) {
                match r.port(t.port) {
                    Some(s) if s.endpoint == t.endpoint => match s.state {
                        PortState::Up => {
                            return Answer {
                                response: Response::Allocated(t.allocation.clone()),
                                ordinary: true,
                            }
                        }
                        PortState::Failed(errno) => {
                            return fail(
                                ErrorCode::Internal,
                                format!(
                                    "the forwarder of node {} failed to attach {iface} (port {}, \
                                     endpoint {}): {}",
                                    self.node,
                                    t.port.0,
                                    t.endpoint,
                                    errno_text(errno)
                                ),
                                format!(
                                    "see `lace-forwarder stats --name {}` and the forwarder's log",
                                    self.tables_name
                                ),
                            )
                        }
                        st => last = format!("port {} is {st:?}", t.port.0),
                    },
                    Some(s) => {
                        last = format!(
                            "port {} reports endpoint {} (not yet {}), {:?}",
                            t.port.0, s.endpoint, t.endpoint, s.state
                        )
                    }
                    None => last = format!("port {} not reported yet", t.port.0),
                }
                if !r.alive() {
                    last.push_str("; the forwarder is not running");
                }
            }
            if Instant::now() >= deadline {
                return fail(
                    ErrorCode::TryAgainLater,
                    format!(
                        "the forwarder of node {} did not bring {iface} up within {} ms: {last}",
                        self.node,
                        self.timeout.as_millis()
                    ),
                    format!("status region {}", self.forwarder_status.display()),
                );
            }
            std::thread::sleep(ATTACH_POLL);
        }
    }
}

/// Asks the loop and, for an Attach, waits for the forwarder.
pub fn handle(request: Request, events: &Sender<Event>, waiter: &AttachWaiter) -> Answer {
    let (tx, rx) = mpsc::channel();
    let busy = |what: &str| Answer {
        response: Response::Error {
            code: ErrorCode::TryAgainLater,
            msg: format!("lace-control {what}; retry"),
            details: String::new(),
        },
        ordinary: false,
    };
    if events
        .send(Event::Cni(CniCall { request, reply: tx }))
        .is_err()
    {
        return busy("is stopping");
    }
    match rx.recv_timeout(REPLY_TIMEOUT) {
        Ok(Reply::Done(a)) => a,
        Ok(Reply::Attached(t)) => waiter.wait(&t),
        Err(_) => busy("did not answer in time"),
    }
}
/// Binds the socket at `path` (see the module docs).
pub fn bind(path: &Path) -> Result<UnixListener, DaemonError> {
    let err = |reason: String| DaemonError::Socket {
        path: path.to_path_buf(),
        reason,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            err(format!(
                "cannot create its directory {}: {e}",
                dir.display()
            ))
        })?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(err(
                "another lace-control answers on it; stop it, or give this one another --socket"
                    .into(),
            ));
        }
        std::fs::remove_file(path)
            .map_err(|e| err(format!("cannot remove the stale socket file: {e}")))?;
    }
    let l = UnixListener::bind(path).map_err(|e| err(format!("bind: {e}")))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(|e| err(format!("chmod 0660: {e}")))?;
    Ok(l)
}

/// Accepts connections until the loop is gone, a thread each.
pub fn serve(
    listener: &UnixListener,
    events: &Sender<Event>,
    waiter: &Arc<AttachWaiter>,
    metrics: &Arc<Metrics>,
) {
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let (events, waiter, metrics) = (events.clone(), waiter.clone(), metrics.clone());
                let spawned = std::thread::Builder::new()
                    .name("cni-conn".into())
                    .spawn(move || handle_connection(stream, &events, &waiter, &metrics));
                if let Err(e) = spawned {
                    tracing::error!("cannot start a connection thread: {e}");
                }
            }
            Err(e) => {
                tracing::error!("accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Reads one request line, answers it (counted in `metrics`), closes.
pub fn handle_connection(
    stream: UnixStream,
    events: &Sender<Event>,
    waiter: &AttachWaiter,
    metrics: &Metrics,
) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let mut line = String::new();
    let read = BufReader::new((&stream).take(MAX_REQUEST)).read_line(&mut line);
    let response = match read {
        Ok(0) => return,
        Ok(_) if !line.ends_with('\n') && line.len() as u64 >= MAX_REQUEST => Response::Error {
            code: ErrorCode::InvalidConfig,
            msg: format!("request longer than {MAX_REQUEST} bytes"),
            details: String::new(),
        },
        Ok(_) => match serde_json::from_str::<Request>(line.trim_end()) {
            Ok(req) => {
                let op = op_name(&req);
                let kind = crate::cni::client::op_name(&req);
                let a = handle(req, events, waiter);
                metrics.observe_cni(
                    kind,
                    match &a.response {
                        Response::Error { code, .. } => format!("{code:?}"),
                        _ => "ok".into(),
                    },
                );
                match &a.response {
                    Response::Error { code, msg, .. } if !a.ordinary => {
                        tracing::warn!("{op}: {code:?}: {msg}");
                    }
                    Response::Error { code, msg, .. } => tracing::debug!("{op}: {code:?}: {msg}"),
                    _ => tracing::debug!("{op}: ok"),
                }
                a.response
            }
            Err(e) => Response::Error {
                code: ErrorCode::InvalidConfig,
                msg: format!("not a lace-control request: {e}; are lace-cni and lace-control of the same release?"),
                details: String::new(),
            },
        },
        Err(e) => {
            tracing::warn!("reading a request: {e}");
            return;
        }
    };
    let mut out = serde_json::to_string(&response).unwrap_or_else(|e| {
        format!(
            r#"{{"result":"error","code":"internal","msg":"cannot serialise the response: {e}"}}"#
        )
    });
    out.push('\n');
    if let Err(e) = (&stream).write_all(out.as_bytes()) {
        tracing::warn!("writing a response: {e}");
    }
}

fn op_name(r: &Request) -> String {
    match r {
        Request::Allocate(a) => format!(
            "Allocate {}/{} {}",
            a.pod_namespace, a.pod_name, a.container_id
        ),
        Request::Attach(a) => format!(
            "Attach {}/{} {}",
            a.pod_namespace, a.pod_name, a.container_id
        ),
        Request::Release(a) => format!("Release {}", a.container_id),
        Request::Check(a) => format!("Check {}", a.container_id),
        Request::Status => "Status".into(),
        Request::Gc { valid } => format!("Gc ({} valid)", valid.len()),
    }
}
