//! Pod-interface mechanisms for the forwarder, measured (ADRs 0005, 0013).
//!
//! A pod is a network namespace with one interface. The forwarder hot-plugs the host side of
//! that interface. For each candidate — lace's own packet socket (the default: `recvmmsg` /
//! `sendmmsg` with the virtio-net header, ADR 0013), and as DPDK ports `net_af_packet`
//! (`PACKET_MMAP` TPACKET_V2 rings, one kick per transmitted burst) and `net_af_xdp` on the
//! host end of a veth pair, and `net_tap` (DPDK creates a tap, which is then moved into the
//! pod's namespace) — this binary:
//!
//! 1. creates the namespace `lpb-<pid>` and the pod interface (address 10.77.0.2/24, a
//!    permanent neighbor entry for the gateway 10.77.0.1 at a MAC the forwarder owns, so the
//!    kernel sends without ARP);
//! 2. attaches the host side and measures
//!    - **pod → forwarder**: a thread inside the namespace floods a UDP socket (64-byte payloads,
//!      `sendmmsg`) while the forwarder side rx-bursts and counts; Mpps received, Mpps the
//!      kernel accepted from the socket, and the kernel CPU spent per received packet;
//!    - **forwarder → pod**: tx-bursts of crafted UDP frames to the pod, counted by the pod
//!      interface's `rx_packets` (read inside the namespace);
//!    - **round trip**: raw-socket ICMP echo from the pod to the gateway address, answered by a
//!      minimal responder on the port (MACs and addresses swapped); p50/p99/max;
//!    - **hot-plug**: attach+configure+start and detach of a second pod interface, repeated,
//!      while the first port is polled and pinged; worst ping RTT and losses meanwhile, and
//!      whether detach leaves the interface clean (no XDP program left, tap gone);
//! 3. removes every namespace and link it made (drop guards, so also on panic) and prints a
//!    table.
//!
//! Run as root: `cargo run --release -p lace-forwarder --example pod_port_bench -- [--seconds S]
//! [--pings N] [--cycles N] [--only SUBSTRING]`.

use std::fs::File;
use std::io;
use std::mem;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lace_forwarder::dpdk::{
    self, Burst, Eal, MacAddr, Mbuf, Mempool, Port, PortConfig, PortStats, DPDK_VERSION,
};
use lace_forwarder::kernel::{self, PacketSocket};
use lace_forwarder::wire::ethernet::{self, EtherType};
use lace_forwarder::wire::{icmpv4, ipv4, udp, EthernetAddress, IpProtocol};

const POD_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const GW_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// The gateway MAC the forwarder answers for (locally administered).
const GW_MAC: [u8; 6] = [0x02, 0x1a, 0xce, 0x00, 0x00, 0x01];
const UDP_PAYLOAD: usize = 64;
const SENDMMSG_BATCH: usize = 64;
const POOL_MBUFS: u32 = 16383;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// lace's own packet socket (not a DPDK port).
    Lace,
    AfPacket,
    AfXdp,
    Tap,
}

#[derive(Debug, Clone, Copy)]
struct Mech {
    label: &'static str,
    kind: Kind,
    /// Driver arguments after `iface=` (each starting with a comma).
    extra: &'static str,
}

const MECHS: &[Mech] = &[
    Mech {
        label: "lace packet socket",
        kind: Kind::Lace,
        extra: "",
    },
    Mech {
        label: "af_packet",
        kind: Kind::AfPacket,
        extra: "",
    },
    Mech {
        label: "af_packet bypass",
        kind: Kind::AfPacket,
        extra: ",qdisc_bypass=1",
    },
    Mech {
        label: "af_packet bypass 4k",
        kind: Kind::AfPacket,
        extra: ",qdisc_bypass=1,blocksz=4096,framesz=2048,framecnt=4096",
    },
    Mech {
        label: "af_xdp",
        kind: Kind::AfXdp,
        extra: "",
    },
    Mech {
        label: "af_xdp busy0",
        kind: Kind::AfXdp,
        extra: ",busy_budget=0",
    },
    Mech {
        label: "tap (moved)",
        kind: Kind::Tap,
        extra: "",
    },
];

/// The devargs the forwarder would use for `mech` on host interface `iface`.
fn devargs(mech: &Mech, index: u32, iface: &str) -> String {
    match mech.kind {
        Kind::Lace => format!("lace packet socket on {iface}"),
        Kind::AfPacket => format!("net_af_packet{index},iface={iface}{}", mech.extra),
        Kind::AfXdp => format!(
            "net_af_xdp{index},iface={iface},start_queue=0,queue_count=1{}",
            mech.extra
        ),
        Kind::Tap => format!("net_tap{index},iface={iface}{}", mech.extra),
    }
}

struct Opts {
    /// EAL on hugepages (`--in-memory`) instead of `--no-huge`.
    huge: bool,
    seconds: f64,
    pings: usize,
    cycles: usize,
    only: Option<String>,
}

fn parse_opts() -> Result<Opts, String> {
    let mut o = Opts {
        huge: false,
        seconds: 2.0,
        pings: 2000,
        cycles: 5,
        only: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--seconds" => o.seconds = val("--seconds")?.parse().map_err(|e| format!("{e}"))?,
            "--pings" => o.pings = val("--pings")?.parse().map_err(|e| format!("{e}"))?,
            "--cycles" => o.cycles = val("--cycles")?.parse().map_err(|e| format!("{e}"))?,
            "--only" => o.only = Some(val("--only")?),
            "--huge" => o.huge = true,
            "-h" | "--help" => {
                return Err(
                    "usage: pod_port_bench [--huge] [--seconds S] [--pings N] [--cycles N] \
                     [--only SUBSTR]"
                        .to_owned(),
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let opts = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("pod_port_bench needs root (namespaces, veth, DPDK memory)");
        return ExitCode::FAILURE;
    }
    remove_stale_namespaces();
    let cpus = allowed_cpus();
    let cpu_set = cpus
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let memory: &[&str] = if opts.huge {
        &["--in-memory"]
    } else {
        &["--no-huge", "-m", "1024", "--no-shconf"]
    };
    let eal_args = [
        "--no-pci".to_owned(),
        "--no-telemetry".to_owned(),
        // One IOVA-contiguous area: af_xdp registers the mempool as one UMEM from its first chunk.
        "--iova-mode=va".to_owned(),
        format!("--lcores=0@({cpu_set})"),
        "--log-level=lib.eal:warning".to_owned(),
        "--log-level=pmd.net.af_packet:warning".to_owned(),
    ];
    let mut eal_args: Vec<String> = memory
        .iter()
        .map(|s| (*s).to_owned())
        .chain(eal_args)
        .collect();
    // Extra EAL arguments, e.g. LPB_EAL_EXTRA="--log-level=pmd.net.af_xdp:debug".
    if let Ok(extra) = std::env::var("LPB_EAL_EXTRA") {
        eal_args.extend(extra.split_whitespace().map(str::to_owned));
    }
    let eal = match Eal::init(&eal_args) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("Eal::init: {e}");
            return ExitCode::FAILURE;
        }
    };
    let pool = match new_pool(&eal, 0) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("mempool: {e}");
            return ExitCode::FAILURE;
        }
    };
    // net_tap signals every received packet (its RX trigger). Keep the storm off this
    // thread's sleeps and off the pod-side threads (they inherit the mask); the pollers and
    // the EAL's interrupt thread take it, as a forwarder's would.
    block_sigio(true);
    let machine = machine_line(&cpus);
    println!("{machine}");
    println!("EAL: {}", eal_args.join(" "));
    println!(
        "{:.1} s windows, {} pings, {} hot-plug cycles\n",
        opts.seconds, opts.pings, opts.cycles
    );
    let mut ctx = Ctx {
        eal,
        pool,
        pid: std::process::id(),
        sender_cpu: cpus[0],
        poller_cpu: cpus[1 % cpus.len()],
        opts,
        index: 0,
    };
    let mut rows = Vec::new();
    for mech in MECHS {
        if let Some(only) = &ctx.opts.only {
            if !mech.label.contains(only.as_str()) {
                continue;
            }
        }
        println!("== {}", mech.label);
        let n = ctx.next_index();
        match new_pool(&ctx.eal, n) {
            Ok(p) => ctx.pool = p,
            Err(e) => {
                println!("   FAILED: mempool: {e}");
                rows.push(Row::failed(mech, format!("mempool: {e}")));
                continue;
            }
        }
        let row = match catch(|| run_mech(&mut ctx, mech)) {
            Ok(row) => row,
            Err(e) => {
                println!("   FAILED: {e}");
                Row::failed(mech, e)
            }
        };
        rows.push(row);
    }
    println!("\n{machine}");
    print_table(&rows);
    ExitCode::SUCCESS
}

/// A pool per mechanism, so mbufs one driver fails to return cannot starve the next.
fn new_pool(eal: &Eal, n: u32) -> lace_forwarder::dpdk::Result<Mempool> {
    Mempool::new(
        eal,
        &format!("lpb_pool{n}"),
        POOL_MBUFS,
        0,
        Mempool::DEFAULT_DATA_ROOM,
        None,
    )
}

fn catch<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(format!(
            "panicked: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default()
        )),
    }
}

struct Ctx {
    eal: Eal,
    pool: Mempool,
    pid: u32,
    sender_cpu: u32,
    poller_cpu: u32,
    opts: Opts,
    /// The next DPDK device index (names stay unique for the whole run).
    index: u32,
}

impl Ctx {
    fn next_index(&mut self) -> u32 {
        self.index += 1;
        self.index
    }
}

#[derive(Default)]
struct Row {
    label: &'static str,
    error: Option<String>,
    rx_mpps: f64,
    sent_mpps: f64,
    kernel_ns_per_pkt: f64,
    poller_sys_pct: f64,
    tx_offered_mpps: f64,
    tx_pod_mpps: f64,
    rtt_p50_us: f64,
    rtt_p99_us: f64,
    rtt_lost: usize,
    attach_ms: f64,
    detach_ms: f64,
    hp_rtt_max_ms: f64,
    hp_lost: usize,
    hp_clean: bool,
    leaked_mbufs: u32,
    notes: Vec<String>,
}

impl Row {
    fn failed(mech: &Mech, e: String) -> Row {
        Row {
            label: mech.label,
            error: Some(e),
            ..Row::default()
        }
    }
}

/// A pod interface under test: a DPDK port, or lace's packet socket on the interface (one
/// socket: the forwarder opens one per worker when it attaches the pod, and closes them when it
/// detaches it).
enum Dev {
    Dpdk(Port),
    Lace(String, Arc<PacketSocket>),
}

impl Dev {
    fn name(&self) -> String {
        match self {
            Dev::Dpdk(p) => p.name().to_owned(),
            Dev::Lace(iface, _) => format!("lace packet socket on {iface}"),
        }
    }

    /// The receive and transmit queue a worker would take.
    fn queues(&self, pool: &Mempool) -> Result<(RxQ, TxQ), String> {
        match self {
            Dev::Dpdk(p) => Ok((
                RxQ::Dpdk(p.rx_queue(0).map_err(|e| e.to_string())?),
                TxQ::Dpdk(p.tx_queue(0).map_err(|e| e.to_string())?),
            )),
            Dev::Lace(_, s) => Ok((
                RxQ::Lace(
                    Box::new(kernel::RxQueue::new(Arc::clone(s), pool.clone())),
                    Vec::with_capacity(2 * dpdk::BURST_SIZE),
                ),
                TxQ::Lace(Box::new(kernel::TxQueue::new(Arc::clone(s), false))),
            )),
        }
    }

    /// The device's counters (DPDK ports).
    fn stats(&self) -> Option<PortStats> {
        match self {
            Dev::Dpdk(p) => p.stats().ok(),
            Dev::Lace(..) => None,
        }
    }

    fn detach(self) -> Result<(), String> {
        match self {
            Dev::Dpdk(p) => p.detach().map_err(|e| e.to_string()),
            // The socket closes with its last queue (the queues are dropped by now).
            Dev::Lace(_, s) => {
                drop(s);
                Ok(())
            }
        }
    }
}

enum RxQ {
    Dpdk(dpdk::RxQueue),
    /// The queue and the vector it receives into.
    Lace(Box<kernel::RxQueue>, Vec<Mbuf>),
}

impl RxQ {
    /// Receives into `b`'s free room; returns how many packets arrived.
    fn rx(&mut self, b: &mut Burst) -> usize {
        match self {
            RxQ::Dpdk(q) => q.rx_burst(b),
            RxQ::Lace(q, v) => {
                let room = b.capacity() - b.len();
                if room == 0 {
                    return 0;
                }
                q.rx_burst(v, room);
                let n = v.len();
                for m in v.drain(..) {
                    // A frame beyond the room (a cut large segment) is freed.
                    let _ = b.push(m);
                }
                n
            }
        }
    }
}

enum TxQ {
    Dpdk(dpdk::TxQueue),
    Lace(Box<kernel::TxQueue>),
}

impl TxQ {
    /// Sends from the front of `b`; returns how many were taken.
    fn tx(&mut self, b: &mut Burst) -> usize {
        match self {
            TxQ::Dpdk(q) => q.tx_burst(b),
            TxQ::Lace(q) => q.tx_burst(b).0,
        }
    }
}

fn run_mech(ctx: &mut Ctx, mech: &Mech) -> Result<Row, String> {
    let mut row = Row {
        label: mech.label,
        ..Row::default()
    };
    let pid = ctx.pid;
    // Guards first: locals drop in reverse order, so ports go before links and namespace.
    let ns = Netns::create(&format!("lpb-{pid}"))?;
    let host_a = format!("lpbh{pid}a");
    let pod_a = format!("lpbp{pid}a");
    let host_b = format!("lpbh{pid}b");
    let pod_b = format!("lpbp{pid}b");
    let tap_a = format!("lpbt{pid}a");
    let tap_b = format!("lpbt{pid}b");
    let _links = [
        HostLink(host_a.clone()),
        HostLink(host_b.clone()),
        HostLink(tap_a.clone()),
        HostLink(tap_b.clone()),
    ];

    let config = PortConfig {
        promiscuous: true,
        ..PortConfig::default()
    };
    let (port, pod_if) = match mech.kind {
        Kind::Lace | Kind::AfPacket | Kind::AfXdp => {
            make_veth(&ns.0, &host_a, &pod_a)?;
            pod_addressing(&ns.0, &pod_a)?;
            let t = Instant::now();
            let port = attach(ctx, mech, &host_a, &config)?;
            row.attach_ms = ms(t.elapsed());
            if let Dev::Dpdk(p) = &port {
                p.reset_stats().map_err(|e| e.to_string())?;
            }
            (port, pod_a.clone())
        }
        Kind::Tap => {
            let t = Instant::now();
            let port = attach(ctx, mech, &tap_a, &config)?;
            row.attach_ms = ms(t.elapsed());
            ip(&["link", "set", &tap_a, "netns", &ns.0])?;
            pod_addressing(&ns.0, &tap_a)?;
            row.notes
                .push("tap: created in the node namespace, then moved into the pod's".to_owned());
            (port, tap_a.clone())
        }
    };
    let pod_mac = pod_mac(&ns.0, &pod_if)?;
    println!(
        "   {} on {pod_if} (pod MAC {pod_mac}), attached in {:.1} ms",
        port.name(),
        row.attach_ms
    );

    // (a) pod -> forwarder.
    let rx = rx_phase(ctx, &port, &ns.0)?;
    row.rx_mpps = rx.rx_mpps;
    row.sent_mpps = rx.sent_mpps;
    row.kernel_ns_per_pkt = rx.kernel_ns_per_pkt;
    row.poller_sys_pct = rx.poller_sys_pct;
    if let Some(st) = port.stats() {
        if rx.rx_mpps == 0.0 && st.rx_packets > 0 {
            row.notes.push(format!(
                "RX stalled after {} packets ({} missed): the kernel found no usable fill-ring \
                 buffers",
                st.rx_packets, st.rx_missed
            ));
        }
        println!(
            "   port counters after pod->fwd: rx {} missed {} no_mbuf {} errors {}",
            st.rx_packets, st.rx_missed, st.rx_no_mbuf, st.rx_errors
        );
    }
    println!(
        "   pod->fwd: {:.3} Mpps received, {:.3} Mpps accepted by the pod's socket, {:.0} ns \
         kernel CPU/pkt, poller {:.0}% in the kernel",
        rx.rx_mpps, rx.sent_mpps, rx.kernel_ns_per_pkt, rx.poller_sys_pct
    );

    // (b) forwarder -> pod.
    let tx = tx_phase(ctx, &port, &ns.0, &pod_if, pod_mac)?;
    row.tx_offered_mpps = tx.offered_mpps;
    row.tx_pod_mpps = tx.pod_mpps;
    println!(
        "   fwd->pod: {:.3} Mpps taken by the PMD, {:.3} Mpps counted by the pod interface \
         ({} pod rx_dropped)",
        tx.offered_mpps, tx.pod_mpps, tx.pod_dropped
    );

    // (c) round trip.
    // A port that receives nothing would make every ping wait out its timeout.
    let pings = if rx.rx_mpps > 0.0 { ctx.opts.pings } else { 10 };
    let lat = latency_phase(ctx, &port, &ns.0, pings, Duration::from_micros(500))?;
    row.rtt_p50_us = lat.p50_us;
    row.rtt_p99_us = lat.p99_us;
    row.rtt_lost = lat.lost;
    println!(
        "   ping pod->fwd: p50 {:.1} us, p99 {:.1} us, max {:.1} us, {} lost of {}",
        lat.p50_us, lat.p99_us, lat.max_us, lat.lost, lat.sent
    );

    // (d) hot-plug of a second interface while this port is polled and pinged.
    let hp = hotplug_phase(ctx, mech, &port, &ns.0, &config, &host_b, &pod_b, &tap_b)?;
    row.detach_ms = hp.detach_ms;
    row.hp_rtt_max_ms = hp.rtt_max_ms;
    row.hp_lost = hp.lost;
    row.hp_clean = hp.clean;
    row.notes.extend(hp.notes);
    println!(
        "   hot-plug x{}: attach median {:.1} ms, detach median {:.1} ms, moving a tap {:.1} \
         ms; meanwhile {} pings, max RTT {:.2} ms, {} lost; detach clean: {}",
        ctx.opts.cycles,
        hp.attach_ms,
        hp.detach_ms,
        hp.move_ms,
        hp.pings,
        hp.rtt_max_ms,
        hp.lost,
        hp.clean
    );
    // The table reports the steady-state hot-plug figure (the first attach above may also
    // initialise driver state once per process).
    row.attach_ms = hp.attach_ms;

    let t = Instant::now();
    port.detach().map_err(|e| format!("detach: {e}"))?;
    let detach_a = ms(t.elapsed());
    // Every port of this pool is detached and every burst freed: what is still out leaked.
    row.leaked_mbufs = ctx.pool.in_use();
    println!(
        "   mbufs not returned to the pool after every port was detached: {}",
        row.leaked_mbufs
    );
    println!("   detached {pod_if}'s port in {detach_a:.1} ms");
    if mech.kind == Kind::Tap {
        let gone = ip(&["-n", &ns.0, "link", "show", &tap_a]).is_err();
        println!("   tap gone from the pod namespace after detach: {gone}");
    } else {
        let xdp = link_has_xdp(&host_a)?;
        if xdp {
            row.notes
                .push(format!("{host_a}: XDP program left after detach"));
        }
    }
    Ok(row)
}

fn attach(ctx: &mut Ctx, mech: &Mech, iface: &str, config: &PortConfig) -> Result<Dev, String> {
    if mech.kind == Kind::Lace {
        let s = PacketSocket::open(iface, true, None).map_err(|e| format!("{iface}: {e}"))?;
        return Ok(Dev::Lace(iface.to_owned(), s));
    }
    let args = devargs(mech, ctx.next_index(), iface);
    let mut port = Port::attach_vdev(&ctx.eal, &args).map_err(|e| format!("attach {args}: {e}"))?;
    port.configure(config, &ctx.pool)
        .map_err(|e| format!("configure {args}: {e}"))?;
    port.start().map_err(|e| format!("start {args}: {e}"))?;
    Ok(Dev::Dpdk(port))
}

// ---------------------------------------------------------------------------------------------
// (a) pod -> forwarder

struct RxResult {
    rx_mpps: f64,
    sent_mpps: f64,
    kernel_ns_per_pkt: f64,
    poller_sys_pct: f64,
}

fn rx_phase(ctx: &Ctx, port: &Dev, ns: &str) -> Result<RxResult, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let (mut rxq, txq) = port.queues(&ctx.pool)?;
    drop(txq);
    let poller = {
        let (stop, received, cpu) = (stop.clone(), received.clone(), ctx.poller_cpu);
        thread::spawn(move || {
            pin(cpu);
            block_sigio(false);
            let start = thread_times();
            let t = Instant::now();
            let mut b: Burst = Burst::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let k = rxq.rx(&mut b);
                if k > 0 {
                    n += k as u64;
                    b.clear();
                    received.store(n, Ordering::Relaxed);
                }
            }
            let end = thread_times();
            (end.1 - start.1) / t.elapsed().as_secs_f64()
        })
    };
    let sender = {
        let (stop, sent, cpu, ns) = (stop.clone(), sent.clone(), ctx.sender_cpu, ns.to_owned());
        thread::spawn(move || -> Result<(), String> {
            pin(cpu);
            enter_netns(&ns)?;
            udp_flood(&stop, &sent).map_err(|e| format!("udp flood: {e}"))
        })
    };
    thread::sleep(Duration::from_millis(300));
    let (r0, s0, c0, t0) = (
        received.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed),
        cpu_jiffies(),
        Instant::now(),
    );
    thread::sleep(Duration::from_secs_f64(ctx.opts.seconds));
    let (r1, s1, c1, secs) = (
        received.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed),
        cpu_jiffies(),
        t0.elapsed().as_secs_f64(),
    );
    stop.store(true, Ordering::Relaxed);
    let sys = poller.join().map_err(|_| "rx poller panicked")?;
    sender.join().map_err(|_| "sender panicked")??;
    let rx = (r1 - r0) as f64;
    let kernel_s = (c1.kernel - c0.kernel) as f64 / clk_tck();
    Ok(RxResult {
        rx_mpps: rx / secs / 1e6,
        sent_mpps: (s1 - s0) as f64 / secs / 1e6,
        kernel_ns_per_pkt: if rx > 0.0 { kernel_s * 1e9 / rx } else { 0.0 },
        poller_sys_pct: sys * 100.0,
    })
}

/// Floods 64-byte UDP payloads to the gateway from the calling thread's namespace until `stop`.
fn udp_flood(stop: &AtomicBool, sent: &AtomicU64) -> io::Result<()> {
    let sock = UdpSocket::bind((POD_IP, 0))?;
    sock.connect((GW_IP, 9))?;
    sock.set_nonblocking(true)?;
    let payload = [0x5au8; UDP_PAYLOAD];
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr().cast_mut().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: mmsghdr is plain old data; all-zero is a valid (empty) value.
    let mut msgs: [libc::mmsghdr; SENDMMSG_BATCH] = unsafe { mem::zeroed() };
    for m in &mut msgs {
        m.msg_hdr.msg_iov = &mut iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: msgs holds SENDMMSG_BATCH headers, each pointing at `iov`, which points at
        // `payload`; all outlive the call, and the kernel only reads them (and writes msg_len).
        let r = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                SENDMMSG_BATCH as u32,
                0,
            )
        };
        if r > 0 {
            n += r as u64;
            sent.store(n, Ordering::Relaxed);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// (b) forwarder -> pod

struct TxResult {
    offered_mpps: f64,
    pod_mpps: f64,
    pod_dropped: u64,
}

fn tx_phase(
    ctx: &Ctx,
    port: &Dev,
    ns: &str,
    pod_if: &str,
    pod_mac: MacAddr,
) -> Result<TxResult, String> {
    let frame = udp_frame(pod_mac);
    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicU64::new(0));
    // Drain what the pod sends back (ICMP port unreachable) so the RX side never backs up.
    let (mut rxq, mut txq) = port.queues(&ctx.pool)?;
    let poller = {
        let (stop, taken, cpu, pool) = (
            stop.clone(),
            taken.clone(),
            ctx.poller_cpu,
            ctx.pool.clone(),
        );
        thread::spawn(move || {
            pin(cpu);
            block_sigio(false);
            let mut b: Burst = Burst::new();
            let mut junk: Burst = Burst::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if rxq.rx(&mut junk) > 0 {
                    junk.clear();
                }
                let room = b.capacity() - b.len();
                if room > 0 && pool.alloc_bulk(&mut b, room) {
                    let fresh = b.len() - room;
                    for m in &mut b.as_mut_slice()[fresh..] {
                        m.extend_from_slice(&frame);
                    }
                }
                let k = txq.tx(&mut b);
                if k > 0 {
                    n += k as u64;
                    taken.store(n, Ordering::Relaxed);
                }
            }
            b.clear();
        })
    };
    thread::sleep(Duration::from_millis(300));
    let (p0, d0) = pod_rx(ns, pod_if)?;
    let (k0, t0) = (taken.load(Ordering::Relaxed), Instant::now());
    thread::sleep(Duration::from_secs_f64(ctx.opts.seconds));
    let (p1, d1) = pod_rx(ns, pod_if)?;
    let (k1, secs) = (taken.load(Ordering::Relaxed), t0.elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    poller.join().map_err(|_| "tx poller panicked")?;
    Ok(TxResult {
        offered_mpps: (k1 - k0) as f64 / secs / 1e6,
        pod_mpps: p1.saturating_sub(p0) as f64 / secs / 1e6,
        pod_dropped: d1.saturating_sub(d0),
    })
}

/// An Ethernet/IPv4/UDP frame from the gateway to the pod's discard port, 64 bytes of payload.
fn udp_frame(pod_mac: MacAddr) -> Vec<u8> {
    let ip_len = ipv4::HEADER_LEN + 8 + UDP_PAYLOAD;
    let mut buf = vec![0u8; ethernet::HEADER_LEN + ip_len];
    let mut eth = ethernet::Frame::new_unchecked(&mut buf[..]);
    eth.set_dst_addr(EthernetAddress(pod_mac.0));
    eth.set_src_addr(EthernetAddress(GW_MAC));
    eth.set_ethertype(EtherType::Ipv4);
    let repr = ipv4::Repr {
        src_addr: GW_IP,
        dst_addr: POD_IP,
        protocol: IpProtocol::Udp,
        payload_len: 8 + UDP_PAYLOAD,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 0,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    };
    let mut ip = ipv4::Packet::new_unchecked(eth.payload_mut());
    repr.emit(&mut ip);
    let mut u = udp::Packet::new_unchecked(ip.payload_mut());
    u.set_src_port(9);
    u.set_dst_port(9);
    u.set_len((8 + UDP_PAYLOAD) as u16);
    u.payload_mut().fill(0xa5);
    u.fill_checksum_v4(&GW_IP, &POD_IP);
    buf
}

/// The pod interface's (rx_packets, rx_dropped), read inside the namespace.
fn pod_rx(ns: &str, pod_if: &str) -> Result<(u64, u64), String> {
    let (ns, pod_if) = (ns.to_owned(), pod_if.to_owned());
    thread::spawn(move || -> Result<(u64, u64), String> {
        enter_netns(&ns)?;
        // /proc/thread-self/net follows this thread's namespace (/proc/net follows the main
        // thread's); sysfs would show the node's interfaces.
        let dev =
            std::fs::read_to_string("/proc/thread-self/net/dev").map_err(|e| e.to_string())?;
        for line in dev.lines() {
            let Some((name, rest)) = line.split_once(':') else {
                continue;
            };
            if name.trim() == pod_if {
                let f: Vec<u64> = rest
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if f.len() >= 4 {
                    return Ok((f[1], f[3]));
                }
            }
        }
        Err(format!("{pod_if} not in {ns}'s /proc/net/dev"))
    })
    .join()
    .map_err(|_| "pod_rx panicked".to_owned())?
}

// ---------------------------------------------------------------------------------------------
// (c) round trip

struct Responder {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<u64>,
}

impl Responder {
    /// Answers ICMP echo requests to the gateway address on `port` from a pinned thread.
    fn start(ctx: &Ctx, port: &Dev) -> Result<Responder, String> {
        let (mut rxq, mut txq) = port.queues(&ctx.pool)?;
        let stop = Arc::new(AtomicBool::new(false));
        let cpu = ctx.poller_cpu;
        let handle = {
            let stop = stop.clone();
            thread::spawn(move || {
                pin(cpu);
                block_sigio(false);
                let mut b: Burst = Burst::new();
                let mut out: Burst = Burst::new();
                let mut answered = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if rxq.rx(&mut b) == 0 {
                        continue;
                    }
                    for mut m in b.drain() {
                        if echo_reply(m.data_mut()) {
                            // `out` has room for a whole burst; a full one is sent below.
                            let _ = out.push(m);
                        }
                    }
                    answered += txq.tx(&mut out) as u64;
                    out.clear();
                }
                answered
            })
        };
        Ok(Responder { stop, handle })
    }

    fn stop(self) -> Result<u64, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| "responder panicked".to_owned())
    }
}

/// Turns an ICMP echo request to the gateway into its reply, in place.
fn echo_reply(buf: &mut [u8]) -> bool {
    let Ok(mut eth) = ethernet::Frame::new_checked(&mut *buf) else {
        return false;
    };
    if eth.ethertype() != EtherType::Ipv4 {
        return false;
    }
    let Ok(ip) = ipv4::Packet::new_checked(eth.payload()) else {
        return false;
    };
    if ip.protocol() != IpProtocol::Icmp || ip.dst_addr() != GW_IP {
        return false;
    }
    let Ok(icmp) = icmpv4::Packet::new_checked(ip.payload()) else {
        return false;
    };
    if icmp.msg_type() != icmpv4::Message::EchoRequest {
        return false;
    }
    let peer = eth.src_addr();
    eth.set_dst_addr(peer);
    eth.set_src_addr(EthernetAddress(GW_MAC));
    let mut ip = ipv4::Packet::new_unchecked(eth.payload_mut());
    let src = ip.src_addr();
    ip.set_src_addr(GW_IP);
    ip.set_dst_addr(src);
    ip.set_ttl(64);
    ip.fill_checksum();
    let mut icmp = icmpv4::Packet::new_unchecked(ip.payload_mut());
    icmp.set_msg_type(icmpv4::Message::EchoReply);
    icmp.fill_checksum();
    true
}

struct Latency {
    sent: usize,
    lost: usize,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
}

fn latency_phase(
    ctx: &Ctx,
    port: &Dev,
    ns: &str,
    count: usize,
    interval: Duration,
) -> Result<Latency, String> {
    let responder = Responder::start(ctx, port)?;
    let (ns, cpu) = (ns.to_owned(), ctx.sender_cpu);
    let pinged = thread::spawn(move || -> Result<(Vec<u64>, usize), String> {
        pin(cpu);
        enter_netns(&ns)?;
        ping(count, interval, None)
    })
    .join()
    .map_err(|_| "pinger panicked".to_owned());
    responder.stop()?;
    let (mut rtts, lost) = pinged??;
    Ok(summarize(&mut rtts, count, lost))
}

fn summarize(rtts: &mut [u64], sent: usize, lost: usize) -> Latency {
    rtts.sort_unstable();
    let pct = |p: f64| -> f64 {
        if rtts.is_empty() {
            return f64::NAN;
        }
        let i = ((rtts.len() as f64 * p).ceil() as usize).clamp(1, rtts.len()) - 1;
        rtts[i] as f64 / 1e3
    };
    Latency {
        sent,
        lost,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        max_us: rtts.last().map_or(f64::NAN, |&x| x as f64 / 1e3),
    }
}

/// Pings the gateway from the calling thread's namespace with a raw ICMP socket: `count`
/// echoes (or until `until` is set), `interval` apart, each awaited up to 200 ms. Returns the
/// round-trip times in ns and how many went unanswered.
fn ping(
    count: usize,
    interval: Duration,
    until: Option<&AtomicBool>,
) -> Result<(Vec<u64>, usize), String> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
    if fd < 0 {
        return Err(format!("raw ICMP socket: {}", io::Error::last_os_error()));
    }
    // SAFETY: fd is a fresh, valid descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let ident = (std::process::id() & 0xffff) as u16;
    let dst = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(GW_IP).to_be(),
        },
        sin_zero: [0; 8],
    };
    let mut rtts = Vec::with_capacity(count.min(1 << 16));
    let mut lost = 0;
    let mut req = [0u8; icmpv4::HEADER_LEN + 56];
    let mut reply = [0u8; 2048];
    let mut seq: u16 = 0;
    loop {
        match until {
            Some(flag) if flag.load(Ordering::Relaxed) => break,
            None if usize::from(seq) >= count => break,
            _ => {}
        }
        seq = seq.wrapping_add(1);
        {
            let mut p = icmpv4::Packet::new_unchecked(&mut req[..]);
            p.set_msg_type(icmpv4::Message::EchoRequest);
            p.set_msg_code(0);
            p.set_echo_ident(ident);
            p.set_echo_seq_no(seq);
            p.fill_checksum();
        }
        let t = Instant::now();
        // SAFETY: req and dst are valid for the lengths passed; the kernel only reads them.
        let r = unsafe {
            libc::sendto(
                sock.as_raw_fd(),
                req.as_ptr().cast(),
                req.len(),
                0,
                (&dst as *const libc::sockaddr_in).cast(),
                mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(format!("sendto: {}", io::Error::last_os_error()));
        }
        let deadline = t + Duration::from_millis(200);
        let mut answered = false;
        while !answered {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let mut pfd = libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: pfd is one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().max(1) as i32) };
            if n <= 0 {
                continue;
            }
            // SAFETY: reply is writable for its length.
            let len = unsafe {
                libc::recv(
                    sock.as_raw_fd(),
                    reply.as_mut_ptr().cast(),
                    reply.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if len <= 0 {
                continue;
            }
            let now = Instant::now();
            let Ok(ip) = ipv4::Packet::new_checked(&reply[..len as usize]) else {
                continue;
            };
            let Ok(icmp) = icmpv4::Packet::new_checked(ip.payload()) else {
                continue;
            };
            if icmp.msg_type() == icmpv4::Message::EchoReply
                && icmp.echo_ident() == ident
                && icmp.echo_seq_no() == seq
            {
                rtts.push((now - t).as_nanos() as u64);
                answered = true;
            }
        }
        if !answered {
            lost += 1;
        }
        thread::sleep(interval);
    }
    Ok((rtts, lost))
}

// ---------------------------------------------------------------------------------------------
// (d) hot-plug

struct Hotplug {
    attach_ms: f64,
    detach_ms: f64,
    move_ms: f64,
    pings: usize,
    rtt_max_ms: f64,
    lost: usize,
    clean: bool,
    notes: Vec<String>,
}

#[allow(clippy::too_many_arguments)]
fn hotplug_phase(
    ctx: &mut Ctx,
    mech: &Mech,
    port: &Dev,
    ns: &str,
    config: &PortConfig,
    host_b: &str,
    pod_b: &str,
    tap_b: &str,
) -> Result<Hotplug, String> {
    if mech.kind != Kind::Tap {
        make_veth(ns, host_b, pod_b)?;
    }
    let responder = Responder::start(ctx, port)?;
    let stop = Arc::new(AtomicBool::new(false));
    let pinger = {
        let (stop, ns, cpu) = (stop.clone(), ns.to_owned(), ctx.sender_cpu);
        thread::spawn(move || -> Result<(Vec<u64>, usize), String> {
            pin(cpu);
            enter_netns(&ns)?;
            ping(usize::MAX, Duration::from_millis(1), Some(&stop))
        })
    };
    thread::sleep(Duration::from_millis(50));
    let (mut attach, mut detach, mut moves) = (Vec::new(), Vec::new(), Vec::new());
    let mut clean = true;
    let mut notes = Vec::new();
    let (mut retries, mut retry_first) = (0, None::<String>);
    let mut outcome = Ok(());
    for _ in 0..ctx.opts.cycles {
        let iface = if mech.kind == Kind::Tap {
            tap_b
        } else {
            host_b
        };
        // Re-attaching the interface just detached may be refused for a moment (af_xdp: the
        // kernel releases the old socket's buffer pool from a workqueue, bind says EBUSY).
        let mut tries = 0;
        let (p, took) = loop {
            let t = Instant::now();
            match attach_one(ctx, mech, iface, config) {
                Ok(p) => break (Some(p), ms(t.elapsed())),
                Err(e) if tries < 20 => {
                    if tries == 0 {
                        retry_first = Some(e);
                    }
                    tries += 1;
                    thread::sleep(Duration::from_millis(10));
                }
                Err(e) => {
                    retries += tries;
                    outcome = Err(e);
                    break (None, 0.0);
                }
            }
        };
        let Some(p) = p else { break };
        retries += tries;
        attach.push(took);
        if mech.kind == Kind::Tap {
            let t = Instant::now();
            if let Err(e) = ip(&["link", "set", tap_b, "netns", ns])
                .and_then(|_| ip(&["-n", ns, "link", "set", tap_b, "up"]))
            {
                outcome = Err(e);
                break;
            }
            moves.push(ms(t.elapsed()));
        }
        let t = Instant::now();
        if let Err(e) = p.detach() {
            outcome = Err(format!("detach: {e}"));
            break;
        }
        detach.push(ms(t.elapsed()));
        match mech.kind {
            Kind::Tap => {
                if ip(&["-n", ns, "link", "show", tap_b]).is_ok() {
                    clean = false;
                    notes.push("tap left in the pod namespace after detach".to_owned());
                    ip(&["-n", ns, "link", "del", tap_b])?;
                }
            }
            _ => {
                if link_has_xdp(host_b)? {
                    clean = false;
                    notes.push(format!("{host_b}: XDP program left after detach"));
                }
            }
        }
    }
    if let Some(e) = retry_first {
        notes.push(format!(
            "re-attach right after detach refused {retries} time(s) over {} cycles, each \
             retried 10 ms later; first refusal: {e}",
            ctx.opts.cycles
        ));
    }
    thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let pinged = pinger.join().map_err(|_| "pinger panicked".to_owned());
    responder.stop()?;
    if let Err(e) = outcome {
        clean = false;
        notes.push(format!("hot-plug cycle {} failed: {e}", attach.len() + 1));
    }
    let (mut rtts, lost) = pinged??;
    let pings = rtts.len() + lost;
    let lat = summarize(&mut rtts, pings, lost);
    Ok(Hotplug {
        attach_ms: median(&mut attach),
        detach_ms: median(&mut detach),
        move_ms: median(&mut moves),
        pings,
        rtt_max_ms: lat.max_us / 1e3,
        lost,
        clean,
        notes,
    })
}

fn attach_one(ctx: &mut Ctx, mech: &Mech, iface: &str, config: &PortConfig) -> Result<Dev, String> {
    let p = attach(ctx, mech, iface, config)?;
    // A worker would take the queues now; take and return them as it would at pod deletion.
    drop(p.queues(&ctx.pool)?);
    Ok(p)
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

// ---------------------------------------------------------------------------------------------
// Namespaces, links, threads

/// A network namespace made by this run; deleted on drop (with the veth ends inside it).
struct Netns(String);

impl Netns {
    fn create(name: &str) -> Result<Netns, String> {
        let _ = ip(&["netns", "del", name]);
        ip(&["netns", "add", name])?;
        let ns = Netns(name.to_owned());
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        // No IPv6 chatter (router/neighbor solicitations) in the measurements.
        let _ = Command::new("ip")
            .args(["netns", "exec", name, "sysctl", "-qw"])
            .arg("net.ipv6.conf.all.disable_ipv6=1")
            .status();
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.0]);
    }
}

/// A link this run may have left in the node's namespace; deleted on drop if it is there.
struct HostLink(String);

impl Drop for HostLink {
    fn drop(&mut self) {
        if std::path::Path::new("/sys/class/net")
            .join(&self.0)
            .exists()
        {
            let _ = ip(&["link", "del", &self.0]);
        }
    }
}

/// Deletes `lpb-<pid>` namespaces whose process is gone (a run killed with SIGKILL).
fn remove_stale_namespaces() {
    let Ok(dir) = std::fs::read_dir("/var/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name
            .strip_prefix("lpb-")
            .and_then(|p| p.parse::<u32>().ok())
        {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = ip(&["netns", "del", &name]);
            }
        }
    }
}

fn make_veth(ns: &str, host: &str, pod: &str) -> Result<(), String> {
    ip(&[
        "link", "add", host, "type", "veth", "peer", "name", pod, "netns", ns,
    ])?;
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{host}/disable_ipv6"), "1");
    ip(&["link", "set", host, "up"])?;
    ip(&["-n", ns, "link", "set", pod, "up"])?;
    Ok(())
}

/// The pod's address and a permanent neighbor entry for the gateway.
fn pod_addressing(ns: &str, pod: &str) -> Result<(), String> {
    ip(&["-n", ns, "addr", "add", &format!("{POD_IP}/24"), "dev", pod])?;
    ip(&["-n", ns, "link", "set", pod, "up"])?;
    let gw_mac = MacAddr(GW_MAC).to_string();
    ip(&[
        "-n",
        ns,
        "neigh",
        "replace",
        &GW_IP.to_string(),
        "lladdr",
        &gw_mac,
        "dev",
        pod,
        "nud",
        "permanent",
    ])?;
    Ok(())
}

fn pod_mac(ns: &str, pod: &str) -> Result<MacAddr, String> {
    let out = ip(&["-n", ns, "-o", "link", "show", "dev", pod])?;
    let mac = out
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .ok_or(format!("no MAC in: {out}"))?;
    let mut b = [0u8; 6];
    for (i, part) in mac.split(':').enumerate().take(6) {
        b[i] = u8::from_str_radix(part, 16).map_err(|e| format!("{mac}: {e}"))?;
    }
    Ok(MacAddr(b))
}

fn link_has_xdp(iface: &str) -> Result<bool, String> {
    let out = ip(&["-d", "link", "show", "dev", iface])?;
    Ok(out.contains(" xdp") || out.contains("prog/xdp"))
}

/// Runs `ip ARGS`; its stdout, or an error with its stderr.
fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Moves the calling thread into the named namespace (`setns` is per thread).
fn enter_netns(ns: &str) -> Result<(), String> {
    let f = File::open(format!("/var/run/netns/{ns}")).map_err(|e| format!("{ns}: {e}"))?;
    // SAFETY: f is an open namespace file; setns only changes this thread's network namespace.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        return Err(format!("setns {ns}: {}", io::Error::last_os_error()));
    }
    Ok(())
}

/// Blocks (or unblocks) for the calling thread the signals net_tap's RX trigger may use:
/// SIGIO and the real-time signals (22.11 picks the first free one and queues one per packet).
fn block_sigio(block: bool) {
    // SAFETY: sigset_t is plain old data; sigemptyset/sigaddset initialise it, and
    // pthread_sigmask only changes the calling thread's mask.
    unsafe {
        let mut set: libc::sigset_t = mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGIO);
        for sig in libc::SIGRTMIN()..=libc::SIGRTMAX() {
            libc::sigaddset(&mut set, sig);
        }
        let how = if block {
            libc::SIG_BLOCK
        } else {
            libc::SIG_UNBLOCK
        };
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: u32) {
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    // SAFETY: CPU_SET writes one bit inside `set` (it bounds-checks the index itself);
    // sched_setaffinity reads `set` for the calling thread (pid 0).
    unsafe {
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("0")
        .trim()
        .to_owned();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    cpus.extend(a..=b);
                }
            }
            None => cpus.extend(part.parse::<u32>().ok()),
        }
    }
    if cpus.is_empty() {
        cpus.push(0);
    }
    cpus
}

/// The calling thread's (user, system) CPU seconds.
fn thread_times() -> (f64, f64) {
    // SAFETY: rusage is plain old data; getrusage fills it for the calling thread.
    let mut ru: libc::rusage = unsafe { mem::zeroed() };
    // SAFETY: ru is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

struct Jiffies {
    /// system + irq + softirq, all CPUs.
    kernel: u64,
}

fn cpu_jiffies() -> Jiffies {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let get = |i: usize| f.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    Jiffies {
        kernel: get(2) + get(5) + get(6),
    }
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn machine_line(cpus: &[u32]) -> String {
    let uname = Command::new("uname")
        .arg("-r")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    format!(
        "kernel {uname}, {} CPU(s) {cpus:?} ({model}), DPDK {DPDK_VERSION}",
        cpus.len()
    )
}

fn print_table(rows: &[Row]) {
    println!(
        "| mechanism | pod→fwd Mpps (sent) | kernel ns/pkt | poller sys% | fwd→pod Mpps (offered) \
         | RTT p50 / p99 µs | attach / detach ms | hot-plug: max RTT ms, lost | clean | mbufs \
         leaked |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        if let Some(e) = &r.error {
            println!(
                "| {} | does not work: {} ||||||||",
                r.label,
                e.replace('\n', " ")
            );
            continue;
        }
        println!(
            "| {} | {:.3} ({:.3}) | {:.0} | {:.0} | {:.3} ({:.3}) | {:.0} / {:.0} | {:.1} / {:.1} \
             | {:.2}, {} | {} | {} |",
            r.label,
            r.rx_mpps,
            r.sent_mpps,
            r.kernel_ns_per_pkt,
            r.poller_sys_pct,
            r.tx_pod_mpps,
            r.tx_offered_mpps,
            r.rtt_p50_us,
            r.rtt_p99_us,
            r.attach_ms,
            r.detach_ms,
            r.hp_rtt_max_ms,
            r.hp_lost,
            if r.hp_clean { "yes" } else { "no" },
            r.leaked_mbufs,
        );
    }
    for r in rows {
        for n in &r.notes {
            println!("note ({}): {n}", r.label);
        }
        if r.rtt_lost > 0 {
            println!(
                "note ({}): {} pings lost in the RTT phase",
                r.label, r.rtt_lost
            );
        }
    }
}
