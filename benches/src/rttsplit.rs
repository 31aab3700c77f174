//! Where a pod round trip's microseconds go (`podpath.rtt.split.*`): one ping run across two
//! nodes with packet captures at four points, each echo's request and reply timestamped where
//! it passes, and the round trip cut into six segments.
//!
//! The capture points are receive points wherever the sender might bypass the taps: a packet
//! socket sending with `PACKET_QDISC_BYPASS` (lace's ports) is not seen by other sockets'
//! taps on its way out, but every tap sees what an interface receives. So, per echo (`t` in
//! the capture's clock, the same clock for all four):
//!
//! | point | interface | request | reply |
//! |---|---|---|---|
//! | client pod | the client pod's `eth0` | leaves (`t0`) | arrives (`t5`) |
//! | server node | the server node's underlay interface | arrives (`t1`) | — |
//! | server pod | the server pod's `eth0` | arrives (`t2`) | leaves (`t3`) |
//! | client node | the client node's underlay interface | — | arrives (`t4`) |
//!
//! and the segments are `request.client_node` = t1 − t0 (the pod's veth, the client node's
//! forwarding, the underlay), `request.server_node` = t2 − t1, `server_pod` = t3 − t2 (the server
//! pod's kernel answering), `reply.server_node` = t4 − t3, `reply.client_node` = t5 − t4, and
//! `client_pod` = ping's round trip − (t5 − t0): the client pod's kernel and ping itself. Each
//! figure is the mean over the echoes seen at every point, so the six add up to the mean round
//! trip: a slow echo's time shows in the segment where it was spent (medians would hide it, and
//! would not add up). The captures cost CPU and their taps copy every packet, in both shapes
//! alike.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};

use crate::control::run_ok;
use crate::podpath;
use crate::report::median;

/// Echoes per split run (one every 10 ms).
pub const ECHOES: u32 = 200;

/// The segments of a round trip, in path order: figure-id component and what it covers.
pub const SEGMENTS: [(&str, &str); 6] = [
    (
        "request.client_node",
        "the request from leaving the client pod until it arrives on the server node's \
         underlay interface: the pod's veth, the client node, the underlay",
    ),
    (
        "request.server_node",
        "from there until it arrives in the server pod: the server node",
    ),
    ("server_pod", "the server pod's kernel answering"),
    (
        "reply.server_node",
        "the reply from leaving the server pod until it arrives on the client node's underlay \
         interface",
    ),
    (
        "reply.client_node",
        "from there until it arrives in the client pod",
    ),
    (
        "client_pod",
        "ping's round trip less the time the echo spent outside the client pod",
    ),
];

/// Where to capture: the pods' and the nodes' namespaces, the nodes' underlay interfaces, and
/// the address the client pings.
#[derive(Debug, Clone)]
pub struct Points {
    /// The client pod's namespace (its interface is `eth0`).
    pub client_pod: String,
    /// The server pod's namespace (its interface is `eth0`).
    pub server_pod: String,
    /// The client node's namespace and underlay interface.
    pub client_node: (String, String),
    /// The server node's namespace and underlay interface.
    pub server_node: (String, String),
    /// The server pod's address.
    pub server_ip: String,
}

/// A split run's result.
#[derive(Debug, Clone)]
pub struct Split {
    /// The mean of ping's round trips of the echoes seen everywhere (taps on), µs: the sum of
    /// `segments_us`.
    pub rtt_mean_us: f64,
    /// Their median, µs.
    pub rtt_p50_us: f64,
    /// The mean of each of [`SEGMENTS`] over the same echoes, µs.
    pub segments_us: [f64; 6],
    /// Echoes seen at every point.
    pub echoes: usize,
}

/// ICMP echo request and reply types.
const REQUEST: u8 = 8;
const REPLY: u8 = 0;

/// A running capture (dumpcap writing a file), stopped and its file removed on drop.
struct Capture {
    child: Child,
    file: PathBuf,
}

impl Capture {
    /// Starts dumpcap on `iface` in namespace `ns`, writing to `file`; returns once it says it
    /// captures.
    fn start(ns: &str, iface: &str, file: PathBuf) -> anyhow::Result<Capture> {
        let mut child = Command::new("ip")
            .args([
                "netns", "exec", ns, "dumpcap", "-q", "-s", "256", "-i", iface, "-w",
            ])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting dumpcap (install tshark: apt-get install tshark)")?;
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("Capturing on") {
                    let _ = tx.send(Ok(()));
                } else {
                    let _ = tx.send(Err(line));
                }
            }
        });
        let capture = Capture { child, file };
        let mut said = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(15)) {
                Ok(Ok(())) => return Ok(capture),
                Ok(Err(line)) => said.push(line),
                Err(_) => bail!(
                    "dumpcap on {iface} in {ns} did not start capturing: {}",
                    said.join(" | ")
                ),
            }
        }
    }

    /// Stops the capture (SIGINT: dumpcap finishes the file) and returns each echo's
    /// (type, sequence number, time in ns) it saw, decoded by tshark.
    fn finish(mut self) -> anyhow::Result<Vec<(u8, u16, i128)>> {
        run_ok(Command::new("kill").args(["-INT", &self.child.id().to_string()]))?;
        let status = self.child.wait()?;
        if !status.success() {
            bail!(
                "dumpcap writing {} ended with {status}",
                self.file.display()
            );
        }
        let text = run_ok(Command::new("tshark").arg("-r").arg(&self.file).args([
            "-T",
            "fields",
            "-E",
            "separator=/t",
            "-e",
            "frame.time_epoch",
            "-e",
            "icmp.type",
            "-e",
            "icmp.seq",
        ]))?;
        Ok(echoes(&text))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.file);
    }
}

/// `seconds.fraction` as nanoseconds, exactly (an f64 would lose the microseconds).
fn epoch_ns(t: &str) -> Option<i128> {
    let (s, f) = t.split_once('.').unwrap_or((t, ""));
    if f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac: i128 = format!("{f:0<9}").parse().ok()?;
    Some(s.parse::<i128>().ok()? * 1_000_000_000 + frac)
}

/// The echoes in tshark's field output (time, ICMP type, sequence number; the first value of
/// a field that has several): (type, sequence number, ns). Lines without an echo are skipped.
fn echoes(text: &str) -> Vec<(u8, u16, i128)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let t = epoch_ns(f.next()?)?;
            let ty: u8 = f.next()?.split(',').next()?.parse().ok()?;
            let seq: u16 = f.next()?.split(',').next()?.parse().ok()?;
            matches!(ty, REQUEST | REPLY).then_some((ty, seq, t))
        })
        .collect()
}

/// The time of echo `seq`'s packet of type `ty` at one point, when it was seen there exactly
/// once.
fn at(seen: &[(u8, u16, i128)], ty: u8, seq: u16) -> Option<i128> {
    let mut it = seen.iter().filter(|e| e.0 == ty && e.1 == seq);
    let first = it.next()?.2;
    it.next().is_none().then_some(first)
}

/// The per-echo segments (µs) of every echo seen at all four points with a round trip, and
/// the round trips; an echo with a negative segment (a point saw it out of order) is left out.
fn segments(
    rtts: &[(u16, f64)],
    client_pod: &[(u8, u16, i128)],
    server_node: &[(u8, u16, i128)],
    server_pod: &[(u8, u16, i128)],
    client_node: &[(u8, u16, i128)],
) -> Vec<(f64, [f64; 6])> {
    rtts.iter()
        .filter_map(|&(seq, rtt)| {
            let t = [
                at(client_pod, REQUEST, seq)?,
                at(server_node, REQUEST, seq)?,
                at(server_pod, REQUEST, seq)?,
                at(server_pod, REPLY, seq)?,
                at(client_node, REPLY, seq)?,
                at(client_pod, REPLY, seq)?,
            ];
            let us = |a: i128, b: i128| (b - a) as f64 / 1000.0;
            let s = [
                us(t[0], t[1]),
                us(t[1], t[2]),
                us(t[2], t[3]),
                us(t[3], t[4]),
                us(t[4], t[5]),
                rtt - us(t[0], t[5]),
            ];
            s.iter().all(|&x| x >= 0.0).then_some((rtt, s))
        })
        .collect()
}

/// Runs the split: captures at the four points, [`ECHOES`] pings from the client pod, then
/// the captures read and joined.
pub fn measure(p: &Points) -> anyhow::Result<Split> {
    let dir = std::env::temp_dir();
    let file = |what: &str| {
        dir.join(format!(
            "lace-bench-rtt-{}-{what}.pcapng",
            std::process::id()
        ))
    };
    let captures = [
        Capture::start(&p.client_pod, "eth0", file("client-pod"))?,
        Capture::start(&p.server_node.0, &p.server_node.1, file("server-node"))?,
        Capture::start(&p.server_pod, "eth0", file("server-pod"))?,
        Capture::start(&p.client_node.0, &p.client_node.1, file("client-node"))?,
    ];
    let rtts = podpath::ping(&p.client_pod, ECHOES, &p.server_ip)?;
    let mut seen = Vec::new();
    for c in captures {
        seen.push(c.finish()?);
    }
    let per_echo = segments(&rtts, &seen[0], &seen[1], &seen[2], &seen[3]);
    if per_echo.is_empty() {
        return Err(anyhow!(
            "none of {} echoes was seen at all four points (client pod {}, server node {}, \
             server pod {}, client node {} echo packets captured)",
            rtts.len(),
            seen[0].len(),
            seen[1].len(),
            seen[2].len(),
            seen[3].len()
        ));
    }
    let n = per_echo.len() as f64;
    let mean = |k: usize| per_echo.iter().map(|(_, s)| s[k]).sum::<f64>() / n;
    Ok(Split {
        rtt_mean_us: per_echo.iter().map(|(r, _)| r).sum::<f64>() / n,
        rtt_p50_us: median(per_echo.iter().map(|(r, _)| *r).collect()),
        segments_us: std::array::from_fn(mean),
        echoes: per_echo.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_times_keep_every_digit() {
        assert_eq!(
            epoch_ns("1765059600.123456000"),
            Some(1_765_059_600_123_456_000)
        );
        assert_eq!(epoch_ns("1765059600.5"), Some(1_765_059_600_500_000_000));
        assert_eq!(epoch_ns("12"), Some(12_000_000_000));
        assert_eq!(epoch_ns("1.1234567890"), None);
        assert_eq!(epoch_ns("x.1"), None);
    }

    #[test]
    fn echoes_take_the_first_value_and_skip_other_packets() {
        let text = "100.000001000\t8\t1\n100.000002000\t0,3\t1,9\n100.1\t\t\n100.2\t3\t4\n";
        assert_eq!(
            echoes(text),
            [(REQUEST, 1, 100_000_001_000), (REPLY, 1, 100_000_002_000)]
        );
    }

    #[test]
    fn an_echo_is_cut_into_six_segments_that_add_up_to_its_round_trip() {
        let us = |x: i128| x * 1000;
        let client_pod = [(REQUEST, 7, us(0)), (REPLY, 7, us(100))];
        let server_node = [(REQUEST, 7, us(30)), (REPLY, 7, us(60))];
        let server_pod = [(REQUEST, 7, us(45)), (REPLY, 7, us(50))];
        let client_node = [(REQUEST, 7, us(10)), (REPLY, 7, us(80))];
        let s = segments(
            &[(7, 110.0)],
            &client_pod,
            &server_node,
            &server_pod,
            &client_node,
        );
        assert_eq!(s, [(110.0, [30.0, 15.0, 5.0, 30.0, 20.0, 10.0])]);
        assert_eq!(s[0].1.iter().sum::<f64>(), 110.0);
        // Seen twice at a point, missing at one, or out of order: left out.
        let twice = [(REQUEST, 7, us(30)), (REQUEST, 7, us(31))];
        assert!(segments(
            &[(7, 110.0)],
            &client_pod,
            &twice,
            &server_pod,
            &client_node
        )
        .is_empty());
        assert!(segments(
            &[(8, 110.0)],
            &client_pod,
            &server_node,
            &server_pod,
            &client_node
        )
        .is_empty());
        let early = [(REQUEST, 7, us(50)), (REPLY, 7, us(40))];
        assert!(segments(
            &[(7, 110.0)],
            &client_pod,
            &server_node,
            &early,
            &client_node
        )
        .is_empty());
    }
}
