//! The plugin's side of the protocol in [`crate::proto`]: one connection per request, one JSON
//! line out, one JSON line back.
//!
//! Guarantees: every call is bounded. The connection is given `connect_timeout` (std's
//! `UnixStream::connect` has none, so it runs on a helper thread that is abandoned on timeout —
//! harmless in a process that lives for one CNI call), and the whole exchange, connect included,
//! ends by the call's deadline. A response longer than [`MAX_RESPONSE`] is refused rather than
//! buffered.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::proto::{Request, Response};

/// The longest response line accepted.
pub const MAX_RESPONSE: usize = 1 << 20;

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Control is not listening: the socket is missing, refuses, or errs.
    #[error(
        "lace-control at {socket}: cannot connect ({source}); is lace-control running on this \
         node, and is \"controlSocket\" in the network configuration its socket?"
    )]
    Connect {
        /// The socket path.
        socket: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The connection did not complete in time.
    #[error(
        "lace-control at {socket}: no connection within {timeout:?}; lace-control is overloaded \
         or stuck (raise \"connectTimeoutMs\" only if it is merely slow)"
    )]
    ConnectTimedOut {
        /// The socket path.
        socket: PathBuf,
        /// The connect timeout.
        timeout: Duration,
    },
    /// No complete response by the deadline.
    #[error(
        "lace-control at {socket}: no answer to {op} within {timeout:?}; it is busy or the \
         forwarder has not reported the port yet (see lace-control's log)"
    )]
    TimedOut {
        /// The socket path.
        socket: PathBuf,
        /// The request's operation.
        op: &'static str,
        /// The whole request's timeout.
        timeout: Duration,
    },
    /// Sending or receiving failed, or control closed the connection without an answer.
    #[error("lace-control at {socket}: {op} failed in transit ({source}); see lace-control's log")]
    Transport {
        /// The socket path.
        socket: PathBuf,
        /// The request's operation.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The answer is not a [`Response`] (a control of another version?).
    #[error(
        "lace-control at {socket}: the answer to {op} is not a lace response ({reason}); are \
         lace-cni and lace-control of the same release?"
    )]
    BadResponse {
        /// The socket path.
        socket: PathBuf,
        /// The request's operation.
        op: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

impl ClientError {
    /// Whether control could not be reached at all (as opposed to failing mid-request).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            ClientError::Connect { .. } | ClientError::ConnectTimedOut { .. }
        )
    }
}

/// A client for `lace-control`'s socket.
#[derive(Debug, Clone)]
pub struct ControlClient {
    socket: PathBuf,
    connect_timeout: Duration,
}

impl ControlClient {
    /// A client of the socket at `socket`.
    pub fn new(socket: impl Into<PathBuf>, connect_timeout: Duration) -> ControlClient {
        ControlClient {
            socket: socket.into(),
            connect_timeout,
        }
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Sends `request` and waits for the response, `timeout` for the whole exchange.
    pub fn call(&self, request: &Request, timeout: Duration) -> Result<Response, ClientError> {
        let op = op_name(request);
        let deadline = Instant::now() + timeout;
        let mut stream = self.connect(self.connect_timeout.min(timeout))?;
        let transport = |source: io::Error| ClientError::Transport {
            socket: self.socket.clone(),
            op,
            source,
        };
        let timed_out = || ClientError::TimedOut {
            socket: self.socket.clone(),
            op,
            timeout,
        };

        let mut line = serde_json::to_vec(request).map_err(|e| ClientError::BadResponse {
            socket: self.socket.clone(),
            op,
            reason: format!("the request does not encode: {e}"),
        })?;
        line.push(b'\n');
        let left = remaining(deadline).ok_or_else(timed_out)?;
        stream.set_write_timeout(Some(left)).map_err(transport)?;
        stream.write_all(&line).map_err(|e| {
            if is_timeout(&e) {
                timed_out()
            } else {
                transport(e)
            }
        })?;

        let mut buf = Vec::with_capacity(512);
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = buf.iter().position(|&b| b == b'\n') {
                buf.truncate(end);
                break;
            }
            if buf.len() > MAX_RESPONSE {
                return Err(ClientError::BadResponse {
                    socket: self.socket.clone(),
                    op,
                    reason: format!("longer than {MAX_RESPONSE} bytes"),
                });
            }
            let left = remaining(deadline).ok_or_else(timed_out)?;
            stream.set_read_timeout(Some(left)).map_err(transport)?;
            match stream.read(&mut chunk) {
                Ok(0) if buf.is_empty() => {
                    return Err(transport(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed without an answer",
                    )))
                }
                // A last line without its newline is still a whole answer.
                Ok(0) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Err(timed_out()),
                Err(e) => return Err(transport(e)),
            }
        }
        serde_json::from_slice(&buf).map_err(|e| ClientError::BadResponse {
            socket: self.socket.clone(),
            op,
            reason: e.to_string(),
        })
    }

    fn connect(&self, timeout: Duration) -> Result<UnixStream, ClientError> {
        let (tx, rx) = mpsc::channel();
        let path = self.socket.clone();
        std::thread::Builder::new()
            .name("lace-cni-connect".into())
            .spawn(move || {
                // The receiver is gone when the caller already timed out; nothing to tell then.
                let _ = tx.send(UnixStream::connect(path));
            })
            .map_err(|source| ClientError::Connect {
                socket: self.socket.clone(),
                source,
            })?;
        match rx.recv_timeout(timeout) {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(source)) => Err(ClientError::Connect {
                socket: self.socket.clone(),
                source,
            }),
            Err(_) => Err(ClientError::ConnectTimedOut {
                socket: self.socket.clone(),
                timeout,
            }),
        }
    }
}

fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// The operation's name, for messages.
pub fn op_name(request: &Request) -> &'static str {
    match request {
        Request::Allocate(_) => "Allocate",
        Request::Attach(_) => "Attach",
        Request::Release(_) => "Release",
        Request::Check(_) => "Check",
        Request::Status => "Status",
        Request::Gc { .. } => "Gc",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::net::UnixListener;

    fn temp_socket(name: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        (dir, path)
    }

    #[test]
    fn a_request_gets_its_response() {
        let (_dir, path) = temp_socket("c.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut line = String::new();
            io::BufReader::new(&conn).read_line(&mut line).unwrap();
            let req: Request = serde_json::from_str(&line).unwrap();
            (&conn).write_all(b"{\"result\":\"ok\"}\n").unwrap();
            req
        });
        let client = ControlClient::new(&path, Duration::from_secs(5));
        let resp = client
            .call(&Request::Status, Duration::from_secs(30))
            .unwrap();
        assert_eq!(resp, Response::Ok);
        assert_eq!(server.join().unwrap(), Request::Status);
    }

    #[test]
    fn a_missing_socket_is_unreachable() {
        let (_dir, path) = temp_socket("absent.sock");
        let err = ControlClient::new(&path, Duration::from_secs(5))
            .call(&Request::Status, Duration::from_secs(5))
            .unwrap_err();
        assert!(err.is_unreachable(), "{err}");
        assert!(err.to_string().contains("absent.sock"), "{err}");
    }

    #[test]
    fn silence_ends_at_the_deadline_and_garbage_is_refused() {
        let (_dir, path) = temp_socket("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            // First connection: read the request, never answer, wait for the client to go.
            let (conn, _) = listener.accept().unwrap();
            let mut r = io::BufReader::new(&conn);
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            line.clear();
            assert_eq!(r.read_line(&mut line).unwrap(), 0);
            // Second connection: answer with something that is not a response.
            let (conn, _) = listener.accept().unwrap();
            let mut line = String::new();
            io::BufReader::new(&conn).read_line(&mut line).unwrap();
            (&conn).write_all(b"{\"result\":\"maybe\"}\n").unwrap();
        });
        let client = ControlClient::new(&path, Duration::from_secs(5));
        let err = client
            .call(&Request::Status, Duration::from_millis(200))
            .unwrap_err();
        assert!(
            matches!(err, ClientError::TimedOut { op: "Status", .. }),
            "{err}"
        );
        assert!(!err.is_unreachable());
        let err = client
            .call(&Request::Status, Duration::from_secs(30))
            .unwrap_err();
        assert!(matches!(err, ClientError::BadResponse { .. }), "{err}");
        server.join().unwrap();
    }
}
