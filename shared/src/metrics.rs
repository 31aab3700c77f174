//! The Prometheus endpoint both processes serve: `GET /metrics` on a TCP listener, answered
//! with what the process renders at that moment (the OpenMetrics text format; each process
//! encodes its own registry with `prometheus-client`). One thread, one request per
//! connection, `Connection: close`; anything else gets 404 or 405, a request head over 8 KiB
//! or slower than 2 s is dropped. The server stops when dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Largest request head read.
const MAX_HEAD: usize = 8 << 10;

/// A running endpoint; stops (and joins its thread) when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free port) and answers `GET /metrics` with `render()`.
    pub fn start(
        addr: SocketAddr,
        render: impl Fn() -> String + Send + 'static,
    ) -> std::io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if flag.load(Ordering::Relaxed) {
                        return;
                    }
                    // A client that fails mid-request concerns only that request.
                    if let Ok(s) = conn {
                        let _ = answer(s, &render);
                    }
                }
            })?;
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What a process logs once the endpoint is up (and [`announced`] finds in a log).
    pub fn announcement(&self) -> String {
        format!("{ANNOUNCED}{}/metrics", self.addr)
    }
}

/// The start of [`MetricsServer::announcement`].
const ANNOUNCED: &str = "metrics at http://";

/// The address of the first endpoint announced in `log` (a process's log text), if any.
pub fn announced(log: &str) -> Option<SocketAddr> {
    log.split(ANNOUNCED)
        .nth(1)?
        .split("/metrics")
        .next()?
        .parse()
        .ok()
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept; the thread sees the flag and ends.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request head and answers it.
fn answer(mut s: TcpStream, render: &dyn Fn() -> String) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf)?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (words.next(), words.next());
    let (status, content_type, body) = match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => ("200 OK", CONTENT_TYPE, render()),
        (Some(b"GET"), _) => (
            "404 Not Found",
            "text/plain",
            "only /metrics is served\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET /metrics is served\n".into(),
        ),
    };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    s.flush()
}

/// `GET path` from `addr`: (status line, body). For tests and tools; a plain HTTP/1.1 client.
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<(String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of the response head"))?;
    let status = head.lines().next().unwrap_or_default().to_owned();
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "miri has no sockets")]
    fn serves_metrics_and_refuses_the_rest() {
        let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let c = calls.clone();
        let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), move || {
            let n = c.fetch_add(1, Ordering::Relaxed) + 1;
            format!("# TYPE x counter\nx_total {n}\n# EOF\n")
        })
        .unwrap();
        let addr = server.addr();
        assert_eq!(
            announced(&format!("INFO x: {}\nmore", server.announcement())),
            Some(addr)
        );
        for n in 1..=2 {
            let (status, body) = get(addr, "/metrics").unwrap();
            assert_eq!(status, "HTTP/1.1 200 OK");
            assert_eq!(body, format!("# TYPE x counter\nx_total {n}\n# EOF\n"));
        }
        assert_eq!(get(addr, "/").unwrap().0, "HTTP/1.1 404 Not Found");
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"POST /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 405"), "{text}");
        // A client that never finishes its head does not stop the server.
        let mut idle = TcpStream::connect(addr).unwrap();
        idle.write_all(b"GET /metr").unwrap();
        drop(idle);
        assert_eq!(get(addr, "/metrics").unwrap().0, "HTTP/1.1 200 OK");
        assert_eq!(calls.load(Ordering::Relaxed), 3);
        drop(server);
        assert!(get(addr, "/metrics").is_err(), "stopped when dropped");
    }
}
