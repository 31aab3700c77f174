//! lace beside its closest peer, OVS-DPDK, on the same core, the same ports and the same packets.
//!
//! Figure ids (`<mix>`: `1flow`, `1k`, `64k`; see [`FlowMix`]):
//!
//! | id | what | anchor |
//! |---|---|---|
//! | `testpmd.io.<mix>.cycles`, `.mpps` | `dpdk-testpmd` `io` forwarding, `net_pcap` (infinite_rx) → `net_null`: the I/O floor of these ports | — |
//! | `ovs.l3_encap.<mix>.cycles`, `.mpps` | OVS-DPDK 3.1: `dec_ttl` + GRE-over-IPv6 L3 tunnel push, from `dpif-netdev/pmd-perf-show` | — |
//! | `ovs.l3_encap.<mix>.above_floor` | the same minus `testpmd.io.<mix>.cycles` | — |
//! | `peer.ovs.l3_encap.<mix>` | lace's l3_encap path (cycles/packet) on the same pcap and ports: the ratio is lace ÷ OVS | `ovs.l3_encap.<mix>.cycles` |
//! | `peer.ovs.l3_encap.<mix>.mpps` | the same as Mpps on one core | `ovs.l3_encap.<mix>.mpps` |
//! | `peer.ovs.l3_encap.<mix>.above_floor` | lace minus `testpmd.io.<mix>.cycles` | `ovs.l3_encap.<mix>.above_floor` |
//!
//! How (ADR 0012): the three flow mixes are written as pcaps of 64-byte Eth/IPv4/UDP frames with
//! valid IPv4 checksums. Each side reads its pcap through `net_pcap,rx_pcap=…,infinite_rx=1`
//! (the PMD replays the file forever, copying each frame into a fresh mbuf of the reader's pool
//! — the same work for everyone, standing in for a NIC's DMA) and transmits into
//! `net_null,no-rx=1`. All three run one after the other on the same CPU (lace-bench's main
//! lcore): `dpdk-testpmd` (the I/O floor), then OVS-DPDK (its PMD thread on that CPU, its
//! other threads on the second CPU, in its own network namespace with its own database in a
//! temporary directory; stopped completely afterwards), then lace in this process. OVS's
//! cycles come from its own PMD counters, testpmd's from its `--record-core-cycles` counters,
//! lace's from the TSC around whole rounds of bursts (rx_burst, snapshot,
//! [`Pipeline::process`], tx_burst, quiescent point), the median round — each is a core's
//! cycles while every poll returns a full burst, divided by the packets it forwarded.
//!
//! Before a figure is taken each side must show it did the work: OVS's datapath flows must
//! decrement the TTL and push the 58-byte Eth + IPv6 + GRE header, with no lost upcalls; lace's
//! stage counters must show every packet through pod-input, ip4-lookup, srv6-encap,
//! underlay-out and tx with no drop; testpmd must have forwarded packets. Otherwise the run
//! fails naming what was wrong.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use lace_forwarder::dpdk::{self as fwd, Burst, Mbuf, Mempool, Port, PortConfig, TxQueue};
use lace_forwarder::pipeline::{Config, Counters, Io, Pipeline, Stage, UnderlayNeighbors};
use lace_forwarder::wire::{ethernet, ipv4, udp};
use lace_shared::status::DropReason;
use lace_shared::tables::{ReaderHandle, TableReader, TableWriter, TablesConfig};
use lace_shared::types::{
    IfName, L2Settings, MacAddr, NetworkId, NetworkInfo, NetworkKind, NextHop, NodeId, NodeInfo,
    PortId, PortInfo, PortKind, Sid, SidBehavior,
};

use crate::dpdk::Eal;
use crate::peer_host::{runtime_ns, share, OvsDpdk, OvsPoint, PeerHost, Testpmd};
use crate::report::{median, rdtsc, tsc_hz, Figure, Scale};

// ---- the node ----------------------------------------------------------------------------------

const NET: NetworkId = NetworkId(1);
const GW_MAC: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 1];
const GW4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
/// The sending pod: its port, MAC and address (anti-spoofing checks both).
pub(crate) const POD_A: PortId = PortId(1);
const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const A4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
const REMOTE_NODE: NodeId = NodeId(2);
const UPLINK_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 2];
const ME: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xa);
const PEER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xb);
const PEER_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 1, 0, 0, 0, 0);
/// The first of the remote node's /24s; the others follow (10.2.0.0/24, 10.2.1.0/24, …).
const FIRST_REMOTE_24: u32 = u32::from_be_bytes([10, 2, 0, 0]);
/// /24s behind the remote node: one per destination of the 1k mix.
pub(crate) const REMOTE_24S: u32 = 1000;

/// Frame size of every packet in the pcaps: Ethernet + IPv4 + UDP + 22 bytes of payload.
pub const FRAME_LEN: usize = 64;
/// Offset of the UDP payload in a frame as sent by the pod.
pub(crate) const PAYLOAD_OFFSET: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;
/// Bytes H.Encaps.Red puts in front of the inner IPv4 packet (outer IPv6 header).
pub(crate) const ENCAP_GROWTH: usize = 40;

/// The pipeline configuration of the node.
pub(crate) fn node_config() -> Config {
    Config {
        uplink_mac: MacAddr(UPLINK_MAC),
        underlay_addr: ME,
        hop_limit: 64,
        underlay_mtu: 1500,
        flow_seed: 0x1ace,
        uplink_hosts: lace_forwarder::pipeline::UplinkHosts::NONE,
    }
}

/// A directory removed on drop.
#[derive(Debug)]
pub(crate) struct ScratchDir(pub(crate) PathBuf);

impl ScratchDir {
    /// A fresh directory `<base>/<prefix>-<pid>` (`base`: `/dev/shm` when present, else the
    /// temporary directory).
    pub(crate) fn new(prefix: &str, shm: bool) -> anyhow::Result<ScratchDir> {
        let base = if shm && Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("{prefix}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(ScratchDir(dir))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The tables of a node that encapsulates: one l3 network, pod A on port 1, and a remote node
/// (static underlay neighbor, End.DT46 SID) owning [`REMOTE_24S`] /24s from 10.2.0.0/24 on.
#[derive(Debug)]
pub(crate) struct EncapNode {
    pub(crate) reader: Arc<TableReader>,
    // Declared after `reader`: the files go once nothing maps them any more.
    _writer: TableWriter,
    _dir: ScratchDir,
}

impl EncapNode {
    pub(crate) fn create(name: &str) -> anyhow::Result<EncapNode> {
        let dir = ScratchDir::new(&format!("lace-bench-{name}"), true)?;
        let tc = TablesConfig {
            dir: dir.0.clone(),
            name: name.into(),
            size: 64 << 20,
            reader_slots: 8,
        };
        let mut w = TableWriter::create(&tc)?;
        w.set_srv6_source(ME)?;
        w.set_network(
            NET,
            &NetworkInfo {
                kind: NetworkKind::L3,
                anonymous: false,
                gateway_mac: MacAddr(GW_MAC),
                gateway4: Some(GW4),
                gateway6: None,
                mtu: 1460,
                stateful: false,
                l2: L2Settings::default(),
            },
        )?;
        w.set_port(
            POD_A,
            &PortInfo {
                kind: PortKind::Pod,
                network: NET,
                mac: MacAddr(MAC_A),
                ipv4: Some(A4),
                ipv6: None,
                endpoint: 1,
                iface: IfName::new("poda")?,
                policy: lace_shared::policy::PolicySetId::NONE,
                transit: false,
            },
        )?;
        w.add_route(
            NET,
            A4.into(),
            32,
            NextHop::Local {
                port: POD_A,
                mac: MacAddr(MAC_A),
            },
        )?;
        w.set_node(
            REMOTE_NODE,
            &NodeInfo {
                locator: Ipv6Addr::new(0xfc00, 0, 2, 0, 0, 0, 0, 0),
                locator_len: 48,
                underlay: PEER,
            },
        )?;
        w.set_underlay_neighbor(PEER, MacAddr(PEER_MAC))?;
        for i in 0..REMOTE_24S {
            w.add_route(
                NET,
                Ipv4Addr::from(FIRST_REMOTE_24 + (i << 8)).into(),
                24,
                NextHop::Remote {
                    node: REMOTE_NODE,
                    sid: Sid(PEER_SID),
                },
            )?;
        }
        w.set_local_sid(
            Sid(Ipv6Addr::new(0xfc00, 0, 1, 1, 0, 0, 0, 0)),
            SidBehavior::EndDt46(NET),
        )?;
        w.publish()?;
        let reader = TableReader::attach(&tc)?;
        Ok(EncapNode {
            reader,
            _writer: w,
            _dir: dir,
        })
    }
}

// ---- the flow mixes ----------------------------------------------------------------------------

/// Which packets a pcap holds. Every packet is pod A's 64-byte UDP/IPv4 frame to its gateway's
/// MAC, TTL 64, towards a pod behind the remote node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowMix {
    /// One flow: 10.1.0.2:1024 → 10.2.0.5:5001.
    OneFlow,
    /// 1,000 destinations, each in its own /24 (10.2.0.5, 10.2.1.5, …): consecutive packets
    /// never share a /24.
    Dst1k,
    /// 65,535 flows to one destination: UDP source ports 1–65535.
    Sport64k,
}

impl FlowMix {
    /// Every mix, in report order.
    pub const ALL: [FlowMix; 3] = [FlowMix::OneFlow, FlowMix::Dst1k, FlowMix::Sport64k];

    /// The figure-id component.
    pub const fn name(self) -> &'static str {
        match self {
            FlowMix::OneFlow => "1flow",
            FlowMix::Dst1k => "1k",
            FlowMix::Sport64k => "64k",
        }
    }

    /// The frames of the pcap, in file order.
    pub fn frames(self) -> Vec<[u8; FRAME_LEN]> {
        let dst0 = Ipv4Addr::from(FIRST_REMOTE_24 + 5);
        match self {
            FlowMix::OneFlow => vec![udp4_frame(dst0, 1024)],
            FlowMix::Dst1k => (0..REMOTE_24S)
                .map(|i| udp4_frame(Ipv4Addr::from(FIRST_REMOTE_24 + (i << 8) + 5), 1024))
                .collect(),
            FlowMix::Sport64k => (1..=u16::MAX).map(|p| udp4_frame(dst0, p)).collect(),
        }
    }
}

/// Pod A's 64-byte Eth/IPv4/UDP frame to `dst`, from UDP port `sport` to 5001: TTL 64, DF,
/// valid IPv4 and UDP checksums, zero payload.
pub(crate) fn udp4_frame(dst: Ipv4Addr, sport: u16) -> [u8; FRAME_LEN] {
    let mut f = [0u8; FRAME_LEN];
    ethernet::Repr {
        src_addr: ethernet::Address(MAC_A),
        dst_addr: ethernet::Address(GW_MAC),
        vlan: None,
        ethertype: ethernet::EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    let l4_len = FRAME_LEN - ethernet::HEADER_LEN - ipv4::HEADER_LEN;
    ipv4::Repr {
        src_addr: A4,
        dst_addr: dst,
        protocol: lace_forwarder::wire::ip::Protocol::Udp,
        payload_len: l4_len,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 0,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    }
    .emit(&mut ipv4::Packet::new_unchecked(
        &mut f[ethernet::HEADER_LEN..],
    ));
    let mut u = udp::Packet::new_unchecked(&mut f[ethernet::HEADER_LEN + ipv4::HEADER_LEN..]);
    u.set_src_port(sport);
    u.set_dst_port(5001);
    u.set_len(l4_len as u16);
    u.fill_checksum_v4(&A4, &dst);
    f
}

/// Writes `frames` as a classic pcap file (little-endian, microsecond timestamps, Ethernet).
pub fn write_pcap(path: &Path, frames: &[[u8; FRAME_LEN]]) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(24 + frames.len() * (16 + FRAME_LEN));
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes()); // magic
    out.extend_from_slice(&2u16.to_le_bytes()); // version 2.4
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes()); // thiszone
    out.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
    out.extend_from_slice(&65_535u32.to_le_bytes()); // snaplen
    out.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
    for (i, f) in frames.iter().enumerate() {
        out.extend_from_slice(&(i as u32 / 1_000_000).to_le_bytes());
        out.extend_from_slice(&(i as u32 % 1_000_000).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes()); // captured
        out.extend_from_slice(&(f.len() as u32).to_le_bytes()); // on the wire
        out.extend_from_slice(f);
    }
    std::fs::write(path, out)
}

// ---- lace on the pcap ports ----------------------------------------------------------------------

/// The uplink output of the lace side: everything must go there.
#[derive(Debug)]
struct UplinkIo {
    txq: TxQueue,
    burst: Burst,
    pool: Mempool,
    sent: u64,
    /// Packets the pipeline sent anywhere but the uplink (never expected).
    elsewhere: u64,
    /// Learn reports (the l3_encap path has none: each one is a failure).
    learned: u64,
    hz: f64,
}

impl UplinkIo {
    /// Sends what is buffered; returns how many packets the driver refused (freed).
    #[inline]
    fn flush(&mut self) -> u64 {
        if self.burst.is_empty() {
            return 0;
        }
        self.sent += self.txq.tx_burst(&mut self.burst) as u64;
        self.burst.clear() as u64
    }
}

impl Io<Mbuf> for UplinkIo {
    #[inline]
    fn send(&mut self, port: PortId, pkt: Mbuf) {
        if port != PortId::UPLINK {
            self.elsewhere += 1;
            return;
        }
        if let Err(pkt) = self.burst.push(pkt) {
            self.flush();
            let _ = self.burst.push(pkt);
        }
    }

    #[inline]
    fn port_up(&self, port: PortId) -> bool {
        port == PortId::UPLINK
    }

    fn alloc(&mut self) -> Option<Mbuf> {
        self.pool.alloc()
    }

    fn now_ns(&self) -> u64 {
        (rdtsc() as f64 * 1e9 / self.hz) as u64
    }

    fn learn(&mut self, _event: &lace_shared::learn::LearnEvent) {
        self.learned += 1;
    }
}

/// lace's l3_encap path reading one mix's pcap: `net_pcap` in, `net_null` out, one pipeline.
struct LaceSide {
    pipeline: Pipeline<Mbuf>,
    reader: ReaderHandle,
    rx: fwd::RxQueue,
    io: UplinkIo,
    burst: Burst,
    pkts: Vec<Mbuf>,
    // Queues first: a port goes once its queues are dropped.
    _ports: [Port; 2],
}

impl LaceSide {
    fn new(
        eal: &fwd::Eal,
        node: &EncapNode,
        mix: FlowMix,
        pcap: &Path,
        frames: usize,
    ) -> anyhow::Result<LaceSide> {
        // infinite_rx keeps every frame of the file in an mbuf of this pool, plus what is in
        // flight.
        let pool = Mempool::new(
            eal,
            &format!("lace_peer_{}", mix.name()),
            (frames as u32 + 8192).next_power_of_two() - 1,
            256,
            Mempool::DEFAULT_DATA_ROOM,
            None,
        )?;
        let config = PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_descriptors: 512,
            tx_descriptors: 512,
            ..PortConfig::default()
        };
        let mut rx_port = Port::attach_vdev(
            eal,
            &format!(
                "net_pcap_lace_{},rx_pcap={},infinite_rx=1",
                mix.name(),
                pcap.display()
            ),
        )?;
        rx_port.configure(&config, &pool)?;
        rx_port.start()?;
        let mut tx_port = Port::attach_vdev(eal, &format!("net_null_lace_{},no-rx=1", mix.name()))?;
        tx_port.configure(&config, &pool)?;
        tx_port.start()?;
        Ok(LaceSide {
            pipeline: Pipeline::new(node_config(), Arc::new(UnderlayNeighbors::new(64))),
            reader: node.reader.register()?,
            rx: rx_port.rx_queue(0)?,
            io: UplinkIo {
                txq: tx_port.tx_queue(0)?,
                burst: Burst::new(),
                pool,
                sent: 0,
                elsewhere: 0,
                learned: 0,
                hz: tsc_hz(),
            },
            burst: Burst::new(),
            pkts: Vec::with_capacity(fwd::BURST_SIZE),
            _ports: [rx_port, tx_port],
        })
    }

    /// `bursts` bursts; returns the packets received.
    #[inline(never)]
    fn round(&mut self, bursts: usize) -> u64 {
        let mut received = 0;
        for _ in 0..bursts {
            received += self.rx.rx_burst(&mut self.burst) as u64;
            self.pkts.extend(self.burst.drain());
            let snap = self.reader.snapshot();
            while !self.pkts.is_empty() {
                self.pipeline
                    .process(&snap, POD_A, &mut self.pkts, &mut self.io);
            }
            let refused = self.io.flush();
            if refused > 0 {
                self.pipeline.count_drop(DropReason::TxRefused, refused);
            }
            self.reader.quiescent();
        }
        received
    }

    /// Checks the counters since the last check: `packets` went through exactly the l3_encap
    /// stages and out of the uplink, with no drop. Resets them.
    fn check(&mut self, mix: FlowMix, packets: u64) -> anyhow::Result<()> {
        let id = format!("peer.ovs.l3_encap.{}", mix.name());
        let c = self.pipeline.take_counters();
        let (sent, elsewhere) = (
            std::mem::take(&mut self.io.sent),
            std::mem::take(&mut self.io.elsewhere),
        );
        if packets == 0 {
            bail!("{id}: the pcap port delivered no packets (mempool too small?)");
        }
        let learned = std::mem::take(&mut self.io.learned);
        if learned > 0 {
            bail!("{id}: {learned} learn reports on the l3_encap path; no figure taken");
        }
        if c.total_drops() > 0 || elsewhere > 0 {
            bail!(
                "{id}: {} of {packets} packets dropped ({}), {elsewhere} sent to another port than \
                 the uplink — the pcap does not take the l3_encap path; no figure taken",
                c.total_drops(),
                drop_summary(&c)
            );
        }
        for s in Stage::ALL {
            let want = if L3_ENCAP.contains(&s) { packets } else { 0 };
            if c.stage(s) != want {
                bail!(
                    "{id}: stage {} handled {} of {packets} packets, expected {want}; no figure \
                     taken",
                    s.name(),
                    c.stage(s)
                );
            }
        }
        if sent != packets {
            bail!("{id}: {sent} of {packets} packets left on the uplink");
        }
        Ok(())
    }
}

/// The stages of the l3_encap path, each once per packet.
const L3_ENCAP: [Stage; 5] = [
    Stage::PodInput,
    Stage::Ip4Lookup,
    Stage::Srv6Encap,
    Stage::UnderlayOut,
    Stage::Tx,
];

fn drop_summary(c: &Counters) -> String {
    DropReason::ALL
        .iter()
        .filter(|r| c.drop(**r) > 0)
        .map(|r| format!("{}: {}", r.name(), c.drop(*r)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// lace's median cycles per packet on `mix`'s pcap while its thread was on the CPU (each
/// round's TSC cycles scaled by the share of the round it ran), and the plain TSC median.
fn lace_cycles(
    eal: &fwd::Eal,
    node: &EncapNode,
    mix: FlowMix,
    pcap: &Path,
    frames: usize,
    sizes: &Sizes,
) -> anyhow::Result<(f64, f64)> {
    let mut side = LaceSide::new(eal, node, mix, pcap, frames)
        .with_context(|| format!("lace on net_pcap ({})", pcap.display()))?;
    // Warm-up: at least one pass over the file, so every frame has been seen once.
    let warm = sizes.lace_warmup.max(frames / fwd::BURST_SIZE + 1);
    let n = side.round(warm);
    side.check(mix, n)?;
    let me = Path::new("/proc/thread-self/schedstat");
    let (mut on_cpu, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..sizes.lace_rounds {
        let ran0 = runtime_ns(me);
        let start = rdtsc();
        let n = side.round(sizes.lace_bursts);
        let cycles = rdtsc().saturating_sub(start);
        let ran1 = runtime_ns(me);
        side.check(mix, n)?;
        let per_packet = cycles as f64 / n as f64;
        let wall = Duration::from_secs_f64(cycles as f64 / tsc_hz());
        raw.push(per_packet);
        on_cpu.push(per_packet * share(ran0, ran1, wall));
    }
    Ok((median(on_cpu), median(raw)))
}

// ---- the figures -------------------------------------------------------------------------------

/// Sizes of the peer measurements at a [`Scale`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    /// OVS and testpmd: forwarding before the first window, the windows (each side's counters
    /// are read per window; the median window is reported, like lace's median round) and
    /// their length.
    pub(crate) warmup: Duration,
    pub(crate) windows: usize,
    pub(crate) window: Duration,
    /// lace: bursts of the checked warm-up, timed rounds, bursts per round.
    lace_warmup: usize,
    lace_rounds: usize,
    lace_bursts: usize,
}

impl Sizes {
    fn of(scale: &Scale) -> Sizes {
        if scale.smoke {
            Sizes {
                warmup: Duration::from_millis(200),
                windows: 2,
                window: Duration::from_millis(150),
                lace_warmup: 64,
                lace_rounds: 3,
                lace_bursts: 256,
            }
        } else if scale.quick {
            Sizes {
                warmup: Duration::from_secs(1),
                windows: 7,
                window: Duration::from_millis(400),
                lace_warmup: 1024,
                lace_rounds: 21,
                lace_bursts: 4096,
            }
        } else {
            Sizes {
                warmup: Duration::from_secs(2),
                windows: 15,
                window: Duration::from_millis(400),
                lace_warmup: 4096,
                lace_rounds: 51,
                lace_bursts: 8192,
            }
        }
    }
}

/// The peer figures, their notes, and what was not measured (id, reason).
#[derive(Debug, Default)]
pub struct PeerOutcome {
    /// Measured figures.
    pub figures: Vec<Figure>,
    /// Notes for the report.
    pub notes: Vec<String>,
    /// Figures not measured, with the reason.
    pub not_measured: Vec<(String, String)>,
}

/// Where the peers run: `lcore` is the CPU every side forwards on (lace-bench's main lcore),
/// `other` a second CPU for OVS's and testpmd's non-forwarding threads, `cpus` the CPUs the
/// process had before the EAL pinned it, `hugepages` whether lace-bench's EAL uses them (the
/// peers then do too; otherwise all run on 4 KiB pages).
#[derive(Debug, Clone)]
pub struct Placement {
    /// The forwarding CPU.
    pub lcore: u32,
    /// The CPU for everything else.
    pub other: u32,
    /// The CPUs children may use.
    pub cpus: Vec<usize>,
    /// Hugepage memory instead of `--no-huge`.
    pub hugepages: bool,
}

/// The target for `peer.ovs.l3_encap.<mix>`: lace ÷ OVS at most this.
pub const RATIO_TARGET: f64 = 0.5;

/// The ids this module reports for `mix` (for targets and the `--no-peer` note).
pub fn ratio_id(mix: FlowMix) -> String {
    format!("peer.ovs.l3_encap.{}", mix.name())
}

/// The 1-minute load average (`/proc/loadavg`), as printed there.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// Whether `CI=true` is set (a missing OVS then fails the run instead of being skipped).
fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Every peer figure. A missing peer (OVS or testpmd not installed, not root, one CPU) is
/// returned in [`PeerOutcome::not_measured`] — except under `CI=true`, where it is an error.
pub fn figures(eal: Eal, scale: &Scale, placement: &Placement) -> anyhow::Result<PeerOutcome> {
    let mut out = PeerOutcome::default();
    let host = match PeerHost::check(placement) {
        Ok(h) => h,
        Err(why) => {
            if under_ci() {
                bail!("the OVS-DPDK peer cannot run under CI=true, where it must: {why}");
            }
            for mix in FlowMix::ALL {
                out.not_measured.push((ratio_id(mix), why.clone()));
            }
            return Ok(out);
        }
    };
    let sizes = Sizes::of(scale);
    let load_before = load_average();
    let scratch = ScratchDir::new("lace-bench-peer", false)?;
    let mut pcaps = Vec::new();
    for mix in FlowMix::ALL {
        let frames = mix.frames();
        let path = scratch.0.join(format!("v4_{}.pcap", mix.name()));
        write_pcap(&path, &frames).with_context(|| format!("writing {}", path.display()))?;
        pcaps.push((mix, path, frames.len()));
    }

    // (b) the I/O floor, (c) OVS, (d) lace: one after the other on `placement.lcore`.
    let mut floor = Vec::new();
    for (mix, pcap, frames) in &pcaps {
        let c = Testpmd::io_cycles(&host, pcap, *frames, &sizes, &scratch.0)
            .with_context(|| format!("testpmd.io.{}", mix.name()))?;
        floor.push(c);
    }
    let mut ovs = Vec::new();
    {
        let mut o = OvsDpdk::start(&host, &scratch.0).context("starting OVS-DPDK")?;
        for (i, (mix, pcap, frames)) in pcaps.iter().enumerate() {
            let p = o
                .measure(i, pcap, *frames, &sizes)
                .with_context(|| format!("ovs.l3_encap.{}", mix.name()))?;
            ovs.push(p);
        }
        out.notes.push(format!(
            "ovs.l3_encap.*: {}; bridge br0 `in_port=1,ip,actions=dec_ttl,output:gre6` (gre6: \
             type=gre, remote_ip fd00:16::2, packet_type=legacy_l3 — Eth + IPv6 + 4-byte GRE \
             pushed, 58 B), underlay bridge br-phy → net_null; its datapath flow: {}",
            o.version(),
            ovs.first().map_or("-", |p: &OvsPoint| p.actions.as_str())
        ));
        o.stop().context("stopping OVS-DPDK")?;
    }
    let fwd_eal = eal.forwarder()?;
    let node = EncapNode::create("peer").context("building the peer tables")?;
    let (mut lace, mut lace_raw) = (Vec::new(), Vec::new());
    for (mix, pcap, frames) in &pcaps {
        let (c, raw) = lace_cycles(&fwd_eal, &node, *mix, pcap, *frames, &sizes)?;
        lace.push(c);
        lace_raw.push(raw);
    }

    let mpps = |cycles: f64| tsc_hz() / cycles / 1e6;
    for (i, (mix, _, frames)) in pcaps.iter().enumerate() {
        let m = mix.name();
        let t = Figure::new(format!("testpmd.io.{m}.cycles"), floor[i], "cycles/packet");
        out.figures.push(t.clone());
        out.figures.push(Figure::new(
            format!("testpmd.io.{m}.mpps"),
            mpps(floor[i]),
            "Mpps",
        ));
        let p = &ovs[i];
        let o = Figure::new(
            format!("ovs.l3_encap.{m}.cycles"),
            p.cycles,
            "cycles/packet",
        );
        let om = Figure::new(format!("ovs.l3_encap.{m}.mpps"), mpps(p.cycles), "Mpps");
        let of = Figure::new(
            format!("ovs.l3_encap.{m}.above_floor"),
            p.cycles - floor[i],
            "cycles/packet",
        );
        out.figures.extend([o.clone(), om.clone(), of.clone()]);
        out.figures
            .push(Figure::versus(ratio_id(*mix), lace[i], &o));
        out.figures.push(Figure::versus(
            format!("peer.ovs.l3_encap.{m}.mpps"),
            mpps(lace[i]),
            &om,
        ));
        out.figures.push(Figure::versus(
            format!("peer.ovs.l3_encap.{m}.above_floor"),
            lace[i] - floor[i],
            &of,
        ));
        let need = RATIO_TARGET * p.cycles;
        if lace[i] > need {
            let bound = if need > floor[i] {
                format!(
                    "its own work per packet ({:.0} now) must fall to {:.0}",
                    lace[i] - floor[i],
                    need - floor[i]
                )
            } else {
                "the I/O floor alone is above it, so no forwarder can meet it on these ports"
                    .to_owned()
            };
            out.notes.push(format!(
                "{}: ratio <= {RATIO_TARGET} MISSED — lace needs <= {need:.0} cycles/packet here \
                 and spends {:.0}, of which {:.0} are the pcap/null I/O floor \
                 (testpmd.io.{m}): {bound}",
                ratio_id(*mix),
                lace[i],
                floor[i],
            ));
        }
        out.notes.push(format!(
            "ovs.l3_encap.{m}: {frames} frame(s) in the pcap; served by {}; {:.0} packets in \
             {} windows of {:.2} s; its PMD thread ran {:.0} % of that time (pmd-perf-show's \
             own cycles/packet: {:.0}); lace's thread ran on its CPU for {:.0} of its {:.0} TSC \
             cycles/packet",
            p.caches,
            p.packets,
            sizes.windows,
            sizes.window.as_secs_f64(),
            p.on_cpu * 100.0,
            p.counter_cycles,
            lace[i],
            lace_raw[i]
        ));
    }
    out.notes.push(format!(
        "peer.ovs.l3_encap.*: lace's l3_encap (pod-input, ip4-lookup over {REMOTE_24S} /24 routes \
         to one remote node, srv6-encap H.Encaps.Red +40 B, underlay-out, tx) vs OVS-DPDK's \
         dec_ttl + GRE/IPv6 push, same pcap through net_pcap infinite_rx=1 into net_null,no-rx=1, \
         same CPU ({}), one after the other (testpmd, OVS, lace), {} memory; OVS: \
         pmd-perf-show used TSC cycles ÷ Rx packets per window, scaled by the share of the \
         window its PMD thread ran (schedstat), median of {} windows of {:.2} s after {:.1} s \
         warm-up (revalidator/purge first); testpmd io: --record-core-cycles total cycles ÷ \
         packets (in-burst cycles), median of as many windows; lace: TSC per round scaled the \
         same way, median of {} rounds of {} bursts. Ratio = lace ÷ OVS; machine load average \
         {} before, {} after (on a loaded machine the scaling removes the time others held the \
         CPU, not their cache and TLB pollution)",
        placement.lcore,
        if placement.hugepages {
            "hugepage"
        } else {
            "4 KiB-page (--no-huge)"
        },
        sizes.windows,
        sizes.window.as_secs_f64(),
        sizes.warmup.as_secs_f64(),
        sizes.lace_rounds,
        sizes.lace_bursts,
        load_before,
        load_average()
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_valid_udp4_of_64_bytes() {
        for mix in FlowMix::ALL {
            for f in mix.frames().iter().step_by(97) {
                let eth = ethernet::Frame::new_checked(&f[..]).unwrap();
                let r = ethernet::Repr::parse(&eth).unwrap();
                assert_eq!(r.ethertype, ethernet::EtherType::Ipv4);
                assert_eq!(r.src_addr, ethernet::Address(MAC_A));
                let ip = ipv4::Packet::new_checked(&f[ethernet::HEADER_LEN..]).unwrap();
                let ipr = ipv4::Repr::parse(&ip).unwrap();
                assert_eq!(ipr.src_addr, A4);
                assert_eq!(ipr.ttl, 64);
                let u = udp::Packet::new_checked(ip.payload()).unwrap();
                assert!(
                    u.verify_checksum_v4(&ipr.src_addr, &ipr.dst_addr),
                    "{mix:?}"
                );
            }
        }
    }

    #[test]
    fn mixes_vary_what_they_say() {
        let dst = |f: &[u8; FRAME_LEN]| ipv4::Packet::new_checked(&f[14..]).unwrap().dst_addr();
        let sport = |f: &[u8; FRAME_LEN]| udp::Packet::new_checked(&f[34..]).unwrap().src_port();
        assert_eq!(FlowMix::OneFlow.frames().len(), 1);
        let k = FlowMix::Dst1k.frames();
        assert_eq!(k.len(), 1000);
        for w in k.windows(2) {
            assert_ne!(dst(&w[0]).octets()[..3], dst(&w[1]).octets()[..3]);
        }
        let mut ports: Vec<u16> = FlowMix::Sport64k.frames().iter().map(sport).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 65_535);
    }

    #[test]
    fn pcap_layout() {
        let dir = ScratchDir::new("lace-bench-pcap-test", false).unwrap();
        let p = dir.0.join("x.pcap");
        let frames = FlowMix::Dst1k.frames();
        write_pcap(&p, &frames[..2]).unwrap();
        let b = std::fs::read(&p).unwrap();
        assert_eq!(b.len(), 24 + 2 * (16 + FRAME_LEN));
        assert_eq!(&b[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(b[32..36].try_into().unwrap()), 64);
        assert_eq!(&b[40..104], &frames[0][..]);
        assert_eq!(&b[120..184], &frames[1][..]);
    }
}
