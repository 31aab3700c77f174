//! The CNI server: a unix socket (mode 0660, parent directory created), one thread per
//! connection, one JSON line in and one JSON line out ([`crate::proto`]).
//!
//! Guarantees: a client that sends nothing is dropped after [`READ_TIMEOUT`]; a request line
//! longer than [`MAX_REQUEST`] or not a [`Request`] is answered with an `InvalidConfig` error
//! (never a crash); a socket file left by a dead daemon is replaced, a live daemon's is not.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::proto::{ErrorCode, Request, Response};

use super::{Daemon, DaemonError};

/// How long a connection may take to send its request.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request line accepted (a GC with thousands of attachments fits).
pub const MAX_REQUEST: u64 = 4 << 20;

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

/// Accepts connections forever, a thread each.
pub fn serve(daemon: &Arc<Daemon>, listener: &UnixListener) {
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let d = daemon.clone();
                let spawned = std::thread::Builder::new()
                    .name("cni-conn".into())
                    .spawn(move || handle_connection(&d, stream));
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

/// Reads one request line, answers it, closes.
pub fn handle_connection(daemon: &Daemon, stream: UnixStream) {
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
                let r = daemon.handle(req);
                match &r {
                    Response::Error { code, msg, .. } => {
                        tracing::warn!("{op}: {code:?}: {msg}");
                    }
                    _ => tracing::debug!("{op}: ok"),
                }
                r
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
