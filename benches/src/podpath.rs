//! The pod path as a user feels it: pod-to-pod TCP throughput, small-packet rate and round-trip
//! time across two nodes, lace beside the Linux kernel's own encapsulation measured in the same
//! run.
//!
//! Two shapes are built on this machine, one after the other, and the same probes run in each:
//!
//! - **kernel**: two node namespaces joined by an underlay veth (`fd00:200::/64`, MTU 1500), one
//!   pod behind each on a veth (proxy ARP on the node's end). Only the cross-node part depends
//!   on the peer, chosen by asking the running kernel (a seg6 `encap.red` route and a `seg6local
//!   End.DX4` route added in a scratch namespace; the report prints `podpath.peer = …` with the
//!   reason):
//!   - **seg6** where the kernel takes both: `encap seg6 mode encap.red` on the sending node,
//!     `seg6local End.DX4` on the receiving one, pod MTU 1460 (40 bytes of outer IPv6);
//!   - **vxlan** where it refuses either (built without `CONFIG_IPV6_SEG6_LWTUNNEL`): a VXLAN
//!     device per node over the IPv6 underlay (VNI 1, port 4789, no learning) with the peer's
//!     pod block routed via its VTEP address and static neighbor and FDB entries, as Flannel's
//!     VXLAN backend programs them (Calico's VXLAN mode is the same datapath); pod MTU 1430 (70
//!     bytes of outer IPv6, UDP, VXLAN and inner Ethernet).
//!
//!   Measured with the devices' default offloads, then once more with TSO/GSO/GRO (and checksum
//!   offload) off on every veth and VXLAN device.
//! - **lace** (`podpath.*`, the figures the targets apply to): the two-node stack of the demo
//!   ([`crate::control`]'s stack: a lace-forwarder and a lace-control per node namespace, pods
//!   created through lace-cni exactly as kubelet would), one pod on each node, default
//!   configuration (packet-socket pod ports, adaptive polling), underlay MTU 1500, pod MTU
//!   1460, with the two forwarders' uplinks on DPDK's `net_memif` ([`Underlay::Memif`]):
//!   shared-memory rings between the processes, no system call and no kernel work per frame,
//!   as a bare-metal node's NIC (ADR 0050). The link carries large frames: a pod's TCP segment
//!   crosses it whole, as it would a NIC with TSO and LRO (ADR 0055).
//! - **lace on veth** (`podpath.veth.*`, reported): the same on the demo's underlay veth pair,
//!   each end a kernel interface the forwarder takes with a packet socket. The round trip is
//!   split on this shape (its underlay interfaces are where the captures are).
//!
//! Probes, each in the client pod's namespace toward the server pod on the other node:
//! `iperf3` TCP, one stream and four, [`TCP_SECONDS`] each (receiver's rate; retransmitted ÷
//! sent segments from the client namespace's `/proc/net/snmp`); `iperf3` UDP with 64-byte
//! payloads at full speed (packets the server received per second); `ping` every 10 ms
//! ([`PINGS`] replies; p50/p99), then a second ping run with packet captures at four points that
//! splits the round trip into six segments ([`crate::rttsplit`]: each node's share of the
//! request and of the reply, the server pod's, the client pod's). Host CPU time (all CPUs, `/proc/stat`) over the one-stream
//! run divided by the segments sent gives the CPU cost per segment in each shape (one MSS: the
//! pod MTU less 52 bytes of IPv4 and TCP headers with timestamps, so 30 bytes fewer behind the
//! VXLAN peer): what bounds the throughput on a machine whose CPUs run the pods as well. Every lace figure
//! is printed as a ratio to the kernel's; lace's drop counters (pipeline drop reasons and every
//! loss the forwarders see outside it) are printed as notes.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use serde_json::Value;

use crate::control::{ip, is_root, run_ok, Outcome, Stack, Underlay};
use crate::report::{Direction, Figure, Target};
use crate::rttsplit::{self, Points, Split, SEGMENTS};

/// Seconds per TCP probe (the issue's `iperf3 -t 6`).
pub const TCP_SECONDS: u32 = 6;
/// Seconds of the UDP probe.
pub const UDP_SECONDS: u32 = 4;
/// Ping replies per RTT probe.
pub const PINGS: u32 = 300;
/// The first figure id (the NIC-like memif underlay's), for "not measured" lines.
pub const FIGURE: &str = "podpath.tcp_1stream.gbps";
/// The first figure of the veth underlay's shape (the demo's).
pub const VETH_FIGURE: &str = "podpath.veth.tcp_1stream.gbps";

/// Targets of the pod-path figures (report-only).
pub fn targets() -> Vec<(String, Target)> {
    [
        ("podpath.tcp_1stream.gbps", Target::RatioAtLeast(1.0)),
        ("podpath.tcp_4stream.gbps", Target::RatioAtLeast(1.0)),
        ("podpath.udp64.mpps", Target::RatioAtLeast(2.0)),
        ("podpath.rtt.p50_us", Target::RatioAtMost(1.0)),
        (
            "podpath.tcp_1stream.retransmit_ratio",
            Target::RatioAtMost(1.0),
        ),
    ]
    .into_iter()
    .map(|(id, t)| (id.to_owned(), t))
    .collect()
}

/// Where the probes run: the client's and server's network namespaces (names under
/// `/var/run/netns`) and the server's address.
#[derive(Debug, Clone)]
pub(crate) struct Endpoints {
    pub(crate) client: String,
    pub(crate) server: String,
    pub(crate) server_ip: String,
}

/// What one shape measured.
#[derive(Debug, Clone)]
struct Measured {
    tcp1_gbps: f64,
    tcp1_retransmit_ratio: f64,
    tcp1_cpu_us_per_segment: f64,
    tcp4_gbps: f64,
    udp64_mpps: f64,
    rtt_p50_us: f64,
    rtt_p99_us: f64,
    /// Where the round trip's time goes, or why that was not measured.
    split: Result<Split, String>,
}

pub(crate) fn in_ns(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]);
    c
}

/// (OutSegs, RetransSegs) of the namespace's TCP (`/proc/net/snmp`).
fn tcp_segments(ns: &str) -> anyhow::Result<(u64, u64)> {
    let text = run_ok(in_ns(ns).args(["cat", "/proc/net/snmp"]))?;
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next(), tcp.next());
    let (Some(names), Some(values)) = (names, values) else {
        bail!("no Tcp lines in {ns}'s /proc/net/snmp");
    };
    let get = |key: &str| -> anyhow::Result<u64> {
        let i = names
            .split_whitespace()
            .position(|n| n == key)
            .ok_or_else(|| anyhow!("no {key} in /proc/net/snmp"))?;
        values
            .split_whitespace()
            .nth(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("bad {key} in /proc/net/snmp"))
    };
    Ok((get("OutSegs")?, get("RetransSegs")?))
}

/// Busy CPU time of the whole host so far, in seconds (`/proc/stat`: user, nice, system, irq,
/// softirq, steal).
fn host_cpu_seconds() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let busy: u64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| f.get(i)).sum();
    // USER_HZ is 100 on Linux.
    busy as f64 / 100.0
}

/// Starts a one-shot iperf3 server in `ns` on `port`.
fn iperf_server(ns: &str, port: u16) -> anyhow::Result<Child> {
    let child = in_ns(ns)
        .args(["iperf3", "-s", "-1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 -s (install iperf3: .ci/install-deps)")?;
    std::thread::sleep(Duration::from_millis(300));
    Ok(child)
}

/// Runs the iperf3 client with `args` and returns its JSON report.
fn iperf_client(ep: &Endpoints, port: u16, args: &[&str]) -> anyhow::Result<Value> {
    let mut server = iperf_server(&ep.server, port)?;
    let out = in_ns(&ep.client)
        .args(["iperf3", "-c", &ep.server_ip, "-p", &port.to_string(), "-J"])
        .args(args)
        .output()
        .context("running iperf3 -c")?;
    let _ = server.kill();
    let _ = server.wait();
    let v: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "iperf3 -c {} {args:?}: no JSON report ({})",
            ep.server_ip,
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    if let Some(e) = v["error"].as_str() {
        bail!("iperf3 -c {} {args:?}: {e}", ep.server_ip);
    }
    Ok(v)
}

/// TCP with `streams` streams: (receiver's Gbit/s, retransmit ratio, host CPU µs per segment).
fn tcp(ep: &Endpoints, streams: u32) -> anyhow::Result<(f64, f64, f64)> {
    let (out0, re0) = tcp_segments(&ep.client)?;
    let cpu0 = host_cpu_seconds();
    let v = iperf_client(
        ep,
        5301,
        &["-t", &TCP_SECONDS.to_string(), "-P", &streams.to_string()],
    )?;
    let cpu = host_cpu_seconds() - cpu0;
    let (out1, re1) = tcp_segments(&ep.client)?;
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .ok_or_else(|| anyhow!("iperf3 report without end.sum_received: {v}"))?;
    let sent = out1.saturating_sub(out0).max(1) as f64;
    let retrans = re1.saturating_sub(re0) as f64;
    Ok((bps / 1e9, retrans / sent, cpu * 1e6 / sent))
}

/// UDP, 64-byte payloads, as fast as the sender goes: packets received per second, in Mpps.
fn udp64(ep: &Endpoints) -> anyhow::Result<f64> {
    let v = iperf_client(
        ep,
        5302,
        &["-u", "-b", "0", "-l", "64", "-t", &UDP_SECONDS.to_string()],
    )?;
    let r = &v["end"]["sum_received"];
    let bytes = r["bytes"]
        .as_f64()
        .ok_or_else(|| anyhow!("iperf3 UDP report without end.sum_received: {v}"))?;
    let secs = r["seconds"].as_f64().unwrap_or(f64::from(UDP_SECONDS));
    Ok(bytes / 64.0 / secs / 1e6)
}

/// `count` pings from namespace `ns` to `dst`, 10 ms apart: each reply's sequence number and
/// round trip in µs.
pub(crate) fn ping(ns: &str, count: u32, dst: &str) -> anyhow::Result<Vec<(u16, f64)>> {
    let text = run_ok(in_ns(ns).args([
        "ping",
        "-n",
        "-c",
        &count.to_string(),
        "-i",
        "0.01",
        "-W",
        "1",
        dst,
    ]))
    .or_else(|e| {
        // Lost replies make ping exit 1; what it printed still counts.
        if e.to_string().contains("exit status: 1") {
            Ok(String::new())
        } else {
            Err(e)
        }
    })?;
    let replies = ping_replies(&text);
    if replies.is_empty() {
        bail!("ping {dst} from {ns}: no replies");
    }
    Ok(replies)
}

/// The replies in ping's output: sequence number and round trip in µs.
fn ping_replies(text: &str) -> Vec<(u16, f64)> {
    text.lines()
        .filter_map(|l| {
            let seq = l.split("icmp_seq=").nth(1)?.split_whitespace().next()?;
            let ms = l.split("time=").nth(1)?.split_whitespace().next()?;
            Some((seq.parse().ok()?, ms.parse::<f64>().ok()? * 1000.0))
        })
        .collect()
}

/// Ping round trips: (p50, p99) in µs.
fn rtt(ep: &Endpoints) -> anyhow::Result<(f64, f64)> {
    let mut us: Vec<f64> = ping(&ep.client, PINGS, &ep.server_ip)?
        .into_iter()
        .map(|(_, us)| us)
        .collect();
    us.sort_by(f64::total_cmp);
    let at = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
    Ok((at(0.50), at(0.99)))
}

/// Every probe, in order; `nodes`: the client's and the server's node namespaces (their
/// underlay interfaces are `ul-a` and `ul-b`), where the round trip is split — or why it is
/// not (no kernel underlay interface to capture on).
fn measure(ep: &Endpoints, nodes: Result<[String; 2], String>) -> anyhow::Result<Measured> {
    let (tcp1_gbps, tcp1_retransmit_ratio, tcp1_cpu_us_per_segment) =
        tcp(ep, 1).context("TCP, one stream")?;
    let (tcp4_gbps, _, _) = tcp(ep, 4).context("TCP, four streams")?;
    let udp64_mpps = udp64(ep).context("UDP, 64 B")?;
    let (rtt_p50_us, rtt_p99_us) = rtt(ep).context("ping")?;
    let split = nodes.and_then(|[client_node, server_node]| {
        rttsplit::measure(&Points {
            client_pod: ep.client.clone(),
            server_pod: ep.server.clone(),
            client_node: (client_node, "ul-a".to_owned()),
            server_node: (server_node, "ul-b".to_owned()),
            server_ip: ep.server_ip.clone(),
        })
        .map_err(|e| format!("{e:#}"))
    });
    Ok(Measured {
        tcp1_gbps,
        tcp1_retransmit_ratio,
        tcp1_cpu_us_per_segment,
        tcp4_gbps,
        udp64_mpps,
        rtt_p50_us,
        rtt_p99_us,
        split,
    })
}

/// MTU of the underlay veth between the node namespaces (lace's shape runs the same).
pub(crate) const UNDERLAY_MTU: u32 = 1500;

/// The kernel peer of the comparison: SRv6 where the running kernel has it, VXLAN otherwise
/// ([`Peer::probe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// `encap seg6 mode encap.red` with one segment (an outer IPv6 header, no SRH: 40 bytes)
    /// and `seg6local End.DX4`.
    Seg6,
    /// VXLAN over the IPv6 underlay (outer IPv6, UDP, VXLAN and inner Ethernet headers: 70
    /// bytes), a VXLAN device per node with static neighbor and FDB entries, as Flannel's VXLAN
    /// backend programs them.
    Vxlan,
}

impl Peer {
    /// The name the report prints (`podpath.peer = …`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Peer::Seg6 => "seg6",
            Peer::Vxlan => "vxlan",
        }
    }

    /// The pod MTU: the underlay's less the encapsulation.
    pub(crate) fn pod_mtu(self) -> u32 {
        UNDERLAY_MTU
            - match self {
                Peer::Seg6 => 40,
                Peer::Vxlan => 70,
            }
    }

    /// Asks the running kernel rather than guessing from its version: adds a seg6 `encap.red`
    /// route and a `seg6local End.DX4` route in a scratch namespace. Both taken: seg6. Either
    /// refused: VXLAN, with the kernel's refusal as the reason.
    pub(crate) fn probe(tag: &str) -> anyhow::Result<(Peer, String)> {
        let scratch = Namespaces::add(&[format!("lpp-{tag}-probe")])?;
        let ns = &scratch.0[0];
        ip(&[
            "-n", ns, "link", "add", "pr0", "type", "veth", "peer", "name", "pr1",
        ])?;
        ip(&["-n", ns, "link", "set", "pr0", "up"])?;
        let routes: [&[&str]; 2] = [
            &[
                "route",
                "add",
                "10.90.9.0/24",
                "encap",
                "seg6",
                "mode",
                "encap.red",
                "segs",
                "fc00:9::e",
                "dev",
                "pr0",
            ],
            &[
                "-6",
                "route",
                "add",
                "fc00:9::e/128",
                "encap",
                "seg6local",
                "action",
                "End.DX4",
                "nh4",
                "10.90.9.2",
                "dev",
                "pr0",
            ],
        ];
        for args in routes {
            let o = Command::new("ip")
                .args(["-n", ns])
                .args(args)
                .output()
                .context("running ip route add")?;
            if !o.status.success() {
                return Ok((
                    Peer::Vxlan,
                    format!(
                        "this kernel refused `ip {}`: {}",
                        args.join(" "),
                        String::from_utf8_lossy(&o.stderr)
                            .trim()
                            .trim_end_matches('.')
                    ),
                ));
            }
        }
        Ok((
            Peer::Seg6,
            "this kernel took a seg6 encap.red route and a seg6local End.DX4 route".to_owned(),
        ))
    }
}

/// Network namespaces made here, deleted on drop with every link in them, also when building
/// what they hold failed half way.
#[derive(Debug)]
struct Namespaces(Vec<String>);

impl Namespaces {
    /// Creates each namespace (replacing a leftover of the same name), loopback up.
    fn add(names: &[String]) -> anyhow::Result<Namespaces> {
        let mut made = Namespaces(Vec::with_capacity(names.len()));
        for ns in names {
            let _ = ip(&["netns", "del", ns]);
            ip(&["netns", "add", ns])?;
            made.0.push(ns.clone());
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(made)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in self.0.iter().rev() {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// One node of the kernel's shape.
struct Side {
    /// Suffix of its namespaces and links: node `x`, pod `px`, underlay `ul-x`, pod veth `vpx`.
    x: &'static str,
    /// The node's underlay address.
    underlay: &'static str,
    /// The pod's address.
    pod: &'static str,
    /// The node's pod block.
    block: &'static str,
    /// The node's VXLAN device address: its block's network address, as Flannel gives it.
    vtep: &'static str,
}

const SIDES: [Side; 2] = [
    Side {
        x: "a",
        underlay: "fd00:200::a",
        pod: "10.90.0.2",
        block: "10.90.0.0/24",
        vtep: "10.90.0.0",
    },
    Side {
        x: "b",
        underlay: "fd00:200::b",
        pod: "10.90.1.2",
        block: "10.90.1.0/24",
        vtep: "10.90.1.0",
    },
];

impl Side {
    /// The MAC of the node's VXLAN device.
    fn vtep_mac(&self) -> String {
        format!("02:00:00:00:00:0{}", self.x)
    }
}

/// The kernel's shape: node namespaces `a`/`b` joined by the underlay veth `ul-a`/`ul-b`
/// (`fd00:200::a`/`::b`, MTU [`UNDERLAY_MTU`]), pods `pa` (10.90.0.2) and `pb` (10.90.1.2) on
/// veths `vpa`/`vpb` (proxy ARP on the node's end), and the [`Peer`]'s cross-node part.
/// Everything is removed on drop.
#[derive(Debug)]
pub(crate) struct KernelShape {
    tag: String,
    peer: Peer,
    _namespaces: Namespaces,
}

impl KernelShape {
    pub(crate) fn ns(&self, what: &str) -> String {
        format!("lpp-{}-{what}", self.tag)
    }

    pub(crate) fn endpoints(&self) -> Endpoints {
        Endpoints {
            client: self.ns("pa"),
            server: self.ns("pb"),
            server_ip: "10.90.1.2".to_owned(),
        }
    }

    pub(crate) fn sysctl(ns: &str, keys: &[&str]) -> anyhow::Result<()> {
        run_ok(in_ns(ns).arg("sysctl").arg("-qw").args(keys)).map(drop)
    }

    /// Builds the nodes, the underlay and the pods, the same for both peers, then the peer's
    /// cross-node routes.
    pub(crate) fn build(tag: &str, peer: Peer) -> anyhow::Result<KernelShape> {
        let names = ["a", "b", "pa", "pb"].map(|what| format!("lpp-{tag}-{what}"));
        let k = KernelShape {
            tag: tag.to_owned(),
            peer,
            _namespaces: Namespaces::add(&names)?,
        };
        let (a, b) = (k.ns("a"), k.ns("b"));
        ip(&[
            "link", "add", "ul-a", "netns", &a, "type", "veth", "peer", "name", "ul-b", "netns", &b,
        ])?;
        let pod_mtu = peer.pod_mtu().to_string();
        for side in &SIDES {
            let (node, pod) = (k.ns(side.x), k.ns(&format!("p{}", side.x)));
            let ul = format!("ul-{}", side.x);
            let vp = format!("vp{}", side.x);
            ip(&[
                "-n",
                &node,
                "addr",
                "add",
                &format!("{}/64", side.underlay),
                "dev",
                &ul,
                "nodad",
            ])?;
            ip(&[
                "link", "add", &vp, "netns", &node, "type", "veth", "peer", "name", "eth0",
                "netns", &pod,
            ])?;
            Self::sysctl(
                &node,
                &[
                    "net.ipv4.ip_forward=1",
                    "net.ipv6.conf.all.forwarding=1",
                    "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0",
                ],
            )?;
            ip(&[
                "-n",
                &node,
                "link",
                "set",
                &ul,
                "mtu",
                &UNDERLAY_MTU.to_string(),
                "up",
            ])?;
            ip(&["-n", &node, "link", "set", &vp, "up"])?;
            Self::sysctl(
                &node,
                &[
                    &format!("net.ipv4.conf.{vp}.proxy_arp=1"),
                    &format!("net.ipv4.conf.{vp}.rp_filter=0"),
                ],
            )?;
            ip(&["-n", &node, "addr", "add", "169.254.1.1/32", "dev", &vp])?;
            ip(&[
                "-n",
                &node,
                "route",
                "add",
                &format!("{}/32", side.pod),
                "dev",
                &vp,
            ])?;
            ip(&["-n", &pod, "link", "set", "eth0", "mtu", &pod_mtu, "up"])?;
            ip(&[
                "-n",
                &pod,
                "addr",
                "add",
                &format!("{}/32", side.pod),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &pod, "route", "add", "169.254.1.1", "dev", "eth0"])?;
            ip(&["-n", &pod, "route", "add", "default", "via", "169.254.1.1"])?;
        }
        for (me, other) in [(&SIDES[0], &SIDES[1]), (&SIDES[1], &SIDES[0])] {
            match peer {
                Peer::Seg6 => k.seg6(me, other)?,
                Peer::Vxlan => k.vxlan(me, other)?,
            }
        }
        Ok(k)
    }

    /// SRv6 on node `me`: `other`'s pod block encapsulated (`encap.red`) toward `other`'s
    /// End.DX4 SID `fc00:<other>::e`, and `me`'s own SID decapsulating to its pod.
    fn seg6(&self, me: &Side, other: &Side) -> anyhow::Result<()> {
        let node = self.ns(me.x);
        let ul = format!("ul-{}", me.x);
        Self::sysctl(
            &node,
            &[
                "net.ipv6.conf.all.seg6_enabled=1",
                &format!("net.ipv6.conf.{ul}.seg6_enabled=1"),
            ],
        )?;
        ip(&[
            "-n",
            &node,
            "-6",
            "route",
            "add",
            &format!("fc00:{}::/64", other.x),
            "via",
            other.underlay,
            "dev",
            &ul,
        ])?;
        ip(&[
            "-n",
            &node,
            "route",
            "add",
            other.block,
            "encap",
            "seg6",
            "mode",
            "encap.red",
            "segs",
            &format!("fc00:{}::e", other.x),
            "dev",
            &ul,
        ])?;
        ip(&[
            "-n",
            &node,
            "-6",
            "route",
            "add",
            &format!("fc00:{}::e/128", me.x),
            "encap",
            "seg6local",
            "action",
            "End.DX4",
            "nh4",
            me.pod,
            "dev",
            &format!("vp{}", me.x),
        ])?;
        Ok(())
    }

    /// VXLAN on node `me`, as Flannel's VXLAN backend does it: a device `vx0` (VNI 1, port
    /// 4789, no learning) over the underlay veth, and for `other`'s pod block a route via
    /// `other`'s VTEP address (onlink), a permanent neighbor entry giving that address
    /// `other`'s VTEP MAC, and a permanent FDB entry sending that MAC to `other`'s underlay
    /// address.
    fn vxlan(&self, me: &Side, other: &Side) -> anyhow::Result<()> {
        let node = self.ns(me.x);
        ip(&[
            "-n",
            &node,
            "link",
            "add",
            "vx0",
            "address",
            &me.vtep_mac(),
            "mtu",
            &self.peer.pod_mtu().to_string(),
            "type",
            "vxlan",
            "id",
            "1",
            "local",
            me.underlay,
            "dev",
            &format!("ul-{}", me.x),
            "dstport",
            "4789",
            "nolearning",
        ])?;
        ip(&[
            "-n",
            &node,
            "addr",
            "add",
            &format!("{}/32", me.vtep),
            "dev",
            "vx0",
        ])?;
        ip(&["-n", &node, "link", "set", "vx0", "up"])?;
        ip(&[
            "-n",
            &node,
            "neigh",
            "add",
            other.vtep,
            "lladdr",
            &other.vtep_mac(),
            "dev",
            "vx0",
            "nud",
            "permanent",
        ])?;
        run_ok(in_ns(&node).args([
            "bridge",
            "fdb",
            "add",
            &other.vtep_mac(),
            "dev",
            "vx0",
            "dst",
            other.underlay,
            "self",
            "permanent",
        ]))?;
        ip(&[
            "-n",
            &node,
            "route",
            "add",
            other.block,
            "via",
            other.vtep,
            "dev",
            "vx0",
            "onlink",
        ])?;
        Ok(())
    }

    /// Switches TSO, GSO, GRO and checksum offload on or off on every veth of the shape, and
    /// on the VXLAN devices when the peer is VXLAN (their GRO cells would merge segments
    /// otherwise).
    fn offloads(&self, on: bool) -> anyhow::Result<()> {
        let state = if on { "on" } else { "off" };
        let mut devices = vec![
            (self.ns("a"), "ul-a"),
            (self.ns("a"), "vpa"),
            (self.ns("b"), "ul-b"),
            (self.ns("b"), "vpb"),
            (self.ns("pa"), "eth0"),
            (self.ns("pb"), "eth0"),
        ];
        if self.peer == Peer::Vxlan {
            devices.extend([(self.ns("a"), "vx0"), (self.ns("b"), "vx0")]);
        }
        for (ns, dev) in devices {
            run_ok(in_ns(&ns).args([
                "ethtool", "-K", dev, "tx", state, "tso", state, "gso", state, "gro", state,
            ]))?;
        }
        Ok(())
    }
}

/// Waits until `ep`'s client reaches the server (ping), at most 20 s.
pub(crate) fn reachable(ep: &Endpoints) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let ok = in_ns(&ep.client)
            .args(["ping", "-n", "-q", "-c", "1", "-W", "1", &ep.server_ip])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Ok(());
        }
    }
    bail!("{} never reached {} (20 s)", ep.client, ep.server_ip)
}

/// The kernel's figures with `peer`: default offloads, then offloads off (one stream only).
fn kernel(tag: &str, peer: Peer) -> anyhow::Result<(Measured, f64)> {
    let k = KernelShape::build(tag, peer)
        .with_context(|| format!("building the kernel's {} shape", peer.name()))?;
    let ep = k.endpoints();
    reachable(&ep)?;
    let on = measure(&ep, Ok([k.ns("a"), k.ns("b")]))?;
    k.offloads(false)?;
    let (off_gbps, _, _) = tcp(&ep, 1).context("TCP, one stream, offloads off")?;
    Ok((on, off_gbps))
}

/// lace's figures on `underlay`, and the forwarders' counters afterwards.
fn lace(underlay: Underlay) -> anyhow::Result<(Measured, Vec<String>)> {
    let mut stack = Stack::start_on(underlay)?;
    let r = (|| {
        stack.launch(0, 0)?;
        let (target, _) = stack.add("b", "bench-target")?;
        stack.add("a", "bench-resident")?;
        let ep = Endpoints {
            client: stack.pod_ns("bench-resident"),
            server: stack.pod_ns("bench-target"),
            server_ip: target,
        };
        reachable(&ep)?;
        let nodes = match underlay {
            Underlay::Veth => Ok([stack.node_ns("a"), stack.node_ns("b")]),
            Underlay::Memif => {
                Err("memif: no kernel interface on the underlay to capture on".into())
            }
        };
        let m = measure(&ep, nodes)?;
        let what = match underlay {
            Underlay::Veth => "podpath.veth",
            Underlay::Memif => "podpath",
        };
        let mut notes = Vec::new();
        for n in ["a", "b"] {
            notes.push(counters(&stack, n, what)?);
        }
        Ok((m, notes))
    })();
    r.map_err(|e: anyhow::Error| anyhow!("{e:#}; {}", stack.log_tails()))
}

/// One forwarder's drops after the run, as a note: pipeline drop reasons, and per port the
/// losses outside the pipeline.
pub(crate) fn counters(stack: &Stack, n: &str, what: &str) -> anyhow::Result<String> {
    let name = format!("lace-bench-{}-{n}", stack.tag);
    let text = run_ok(Command::new(stack.bin.join("lace-forwarder")).args([
        "stats",
        "--name",
        &name,
        "--tables-dir",
        "/dev/shm",
        "--json",
    ]))?;
    let v: Value = serde_json::from_str(text.trim()).context("lace-forwarder stats --json")?;
    let drops: Vec<String> = v["drops"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, n)| n.as_u64().unwrap_or(0) != 0)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    let keys = [
        "device_rx_missed",
        "device_rx_errors",
        "device_rx_no_mbuf",
        "device_tx_errors",
        "kernel_rx_dropped",
        "iface_rx_dropped",
        "iface_tx_dropped",
    ];
    let ports: Vec<String> = v["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let losses: Vec<String> = keys
                .iter()
                .filter(|k| p[**k].as_u64().unwrap_or(0) != 0)
                .map(|k| format!("{k} {}", p[*k]))
                .collect();
            format!(
                "port {}: rx {} tx {} refused {} large rx/tx {}/{} losses [{}]",
                p["port"],
                p["rx_packets"],
                p["tx_packets"],
                p["tx_refused"],
                p["rx_large_segments"],
                p["tx_large_segments"],
                losses.join(", ")
            )
        })
        .collect();
    Ok(format!(
        "{what}: node-{n} forwarder after the probes: pipeline drops [{}]; {}; host softnet \
         drops {}",
        drops.join(", "),
        ports.join("; "),
        v["softnet_dropped"]
    ))
}

/// The pod-path figures. Never fails: what cannot be measured is returned in
/// [`Outcome::not_measured`] with the reason.
pub fn figures() -> Outcome {
    let mut out = Outcome::default();
    if !is_root() {
        out.not_measured.push((
            FIGURE.to_owned(),
            "needs root (network namespaces, veth pairs, the forwarders); run lace-bench as root"
                .to_owned(),
        ));
        return out;
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let tag = std::process::id().to_string();
    let Some((peer, why)) = out.step(FIGURE, "probing the kernel for seg6", Peer::probe(&tag))
    else {
        return out;
    };
    out.notes.push(format!(
        "podpath.peer = {} ({why}; pod MTU {}, underlay MTU {UNDERLAY_MTU}); the \
         podpath.kernel.* figures are this peer's",
        peer.name(),
        peer.pod_mtu()
    ));
    let Some(kernel) = out.step(FIGURE, "kernel shape", kernel(&tag, peer)) else {
        return out;
    };
    let nic = out.step(FIGURE, "lace shape on memif", lace(Underlay::Memif));
    let veth = out.step(VETH_FIGURE, "lace shape on veth", lace(Underlay::Veth));
    let (k, k_off) = kernel;
    let anchor = |id: &str, v: f64, unit: &str| Figure::new(id, v, unit);
    let anchors = Anchors {
        tcp1: out.push(anchor(
            "podpath.kernel.tcp_1stream.gbps",
            k.tcp1_gbps,
            "Gbit/s",
        )),
        tcp1_off: out.push(anchor(
            "podpath.kernel_offloads_off.tcp_1stream.gbps",
            k_off,
            "Gbit/s",
        )),
        tcp4: out.push(anchor(
            "podpath.kernel.tcp_4stream.gbps",
            k.tcp4_gbps,
            "Gbit/s",
        )),
        udp64: out.push(anchor("podpath.kernel.udp64.mpps", k.udp64_mpps, "Mpps")),
        rtt50: out.push(anchor("podpath.kernel.rtt.p50_us", k.rtt_p50_us, "µs")),
        rtt99: out.push(anchor("podpath.kernel.rtt.p99_us", k.rtt_p99_us, "µs")),
        retransmit: out.push(
            anchor(
                "podpath.kernel.tcp_1stream.retransmit_ratio",
                k.tcp1_retransmit_ratio,
                "retransmitted/sent",
            )
            .better(Direction::LowerIsBetter),
        ),
        cpu: out.push(anchor(
            "podpath.kernel.tcp_1stream.cpu_us_per_segment",
            k.tcp1_cpu_us_per_segment,
            "µs/segment",
        )),
    };
    out.notes.push(format!(
        "podpath: kernel {} shape, then lace's on memif (podpath.*: the underlay as a bare-metal \
         node's NIC is, DPDK rings between the forwarders, no system call or kernel work per \
         frame; pods' TCP segments cross it whole, large frames as TSO/LRO would leave them, \
         other frames at the underlay MTU 1500; an adaptive worker with a DPDK port \
         sleeps on a timer, which the round trip shows), then lace's on the veth pair \
         (podpath.veth.*: the demo's, a packet socket on each end), back to back; iperf3 TCP \
         {TCP_SECONDS} s (1 and 4 streams, receiver's rate), UDP 64 B {UDP_SECONDS} s \
         (server's received packets), ping -i 0.01 x{PINGS}; retransmit ratio = \
         RetransSegs/OutSegs of the client pod; CPU per segment = host busy CPU time (all CPUs, \
         /proc/stat) over the one-stream run / segments sent; load average at the start: {}",
        peer.name(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    ));
    let mut veth_split = Err("the veth shape was not measured".to_owned());
    for (prefix, shape) in [("podpath", nic), ("podpath.veth", veth)] {
        let Some((m, notes)) = shape else { continue };
        shape_figures(&mut out, prefix, &m, &anchors);
        out.notes.extend(notes);
        if prefix == "podpath.veth" {
            veth_split = m.split;
        }
    }
    // Where the round trip goes is cut at the underlay interfaces: the veth shape's.
    split_figures(&mut out, &k.split, &veth_split);
    if k.tcp1_retransmit_ratio == 0.0 {
        out.notes.push(
            "podpath: the kernel retransmitted nothing, so the retransmit ratio's target (≤ the \
             kernel's) reads as met only at 0"
                .to_owned(),
        );
    }
    out
}

/// The kernel's figures of one run, each lace figure's anchor.
struct Anchors {
    tcp1: Figure,
    tcp1_off: Figure,
    tcp4: Figure,
    udp64: Figure,
    rtt50: Figure,
    rtt99: Figure,
    retransmit: Figure,
    cpu: Figure,
}

/// One lace shape's figures under `prefix` (`podpath`, `podpath.veth`), each beside the
/// kernel's.
fn shape_figures(out: &mut Outcome, prefix: &str, m: &Measured, a: &Anchors) {
    for (id, v, anchor) in [
        ("tcp_1stream.gbps", m.tcp1_gbps, &a.tcp1),
        ("tcp_1stream.gbps.vs_offloads_off", m.tcp1_gbps, &a.tcp1_off),
        ("tcp_4stream.gbps", m.tcp4_gbps, &a.tcp4),
        ("udp64.mpps", m.udp64_mpps, &a.udp64),
        ("rtt.p50_us", m.rtt_p50_us, &a.rtt50),
        ("rtt.p99_us", m.rtt_p99_us, &a.rtt99),
        (
            "tcp_1stream.retransmit_ratio",
            m.tcp1_retransmit_ratio,
            &a.retransmit,
        ),
        (
            "tcp_1stream.cpu_us_per_segment",
            m.tcp1_cpu_us_per_segment,
            &a.cpu,
        ),
    ] {
        out.push(Figure::versus(format!("{prefix}.{id}"), v, anchor));
    }
}

/// `podpath.rtt.split.*`: where lace's round trip goes beside where the kernel's does, segment
/// by segment ([`rttsplit`]), with a note; a shape whose split failed gives a note instead.
fn split_figures(out: &mut Outcome, kernel: &Result<Split, String>, lace: &Result<Split, String>) {
    let (k, l) = match (kernel, lace) {
        (Ok(k), Ok(l)) => (k, l),
        (k, l) => {
            for (shape, r) in [("kernel", k), ("lace", l)] {
                if let Err(e) = r {
                    out.notes.push(format!(
                        "podpath.rtt.split: not measured in the {shape} shape: {e}"
                    ));
                }
            }
            return;
        }
    };
    let kr = out.push(Figure::new(
        "podpath.kernel.rtt.split.rtt_us",
        k.rtt_mean_us,
        "µs",
    ));
    out.push(Figure::versus(
        "podpath.rtt.split.rtt_us",
        l.rtt_mean_us,
        &kr,
    ));
    for (i, (seg, _)) in SEGMENTS.iter().enumerate() {
        let kf = out.push(Figure::new(
            format!("podpath.kernel.rtt.split.{seg}_us"),
            k.segments_us[i],
            "µs",
        ));
        out.push(Figure::versus(
            format!("podpath.rtt.split.{seg}_us"),
            l.segments_us[i],
            &kf,
        ));
    }
    out.notes.push(format!(
        "podpath.rtt.split: a second ping run of {} echoes (10 ms apart) with dumpcap capturing \
         at four points (each pod's eth0, each node's underlay interface on receive), each \
         echo's request and reply timestamped where it passed (the captures' common clock); \
         means over the echoes seen everywhere ({} kernel, {} lace), so the six segments add up \
         to split.rtt_us, the mean round trip of that run (p50 kernel {:.0} µs, lace {:.0} µs): \
         {}. Four dumpcap processes run meanwhile and their taps copy every packet, in both \
         shapes alike",
        rttsplit::ECHOES,
        k.echoes,
        l.echoes,
        k.rtt_p50_us,
        l.rtt_p50_us,
        SEGMENTS
            .iter()
            .map(|(seg, what)| format!("{seg} = {what}"))
            .collect::<Vec<_>>()
            .join("; ")
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_lines_give_sequence_and_microseconds() {
        let text = "PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.\n\
                    64 bytes from 10.0.0.2: icmp_seq=1 ttl=62 time=0.161 ms\n\
                    64 bytes from 10.0.0.2: icmp_seq=2 ttl=62 time=1.5 ms\n\
                    --- 10.0.0.2 ping statistics ---\n";
        assert_eq!(ping_replies(text), [(1, 161.0), (2, 1500.0)]);
    }

    #[test]
    fn pod_mtu_is_the_underlays_less_the_encapsulation() {
        assert_eq!(Peer::Seg6.pod_mtu(), 1460);
        assert_eq!(Peer::Vxlan.pod_mtu(), 1430);
    }
}
