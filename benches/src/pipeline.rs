//! End-to-end forwarding figures: packets from a DPDK `net_null` port through lace-forwarder's
//! real [`Pipeline`] over real shared-memory tables, out to another `net_null` port, beside the
//! plain DPDK null-PMD forward loop measured in the same rounds.
//!
//! Figure ids (cycles per packet, and the same as Mpps on one core):
//!
//! | id | frame | path through the pipeline | anchor |
//! |---|---|---|---|
//! | `dpdk.null_fwd.cycles`, `.mpps` | 64 B | none: `rx_burst` from a null port, `tx_burst` to another | — |
//! | `dpdk.null_fwd_write.cycles`, `.mpps` | 64 B | none: as above plus writing the 64-byte template | `dpdk.null_fwd.*` |
//! | `pipeline.l3_local.cycles`, `.mpps` | 64 B UDP/IPv4 | pod A → pod B on this node: pod-input, ip4-lookup, local-rewrite, tx | `dpdk.null_fwd.*` |
//! | `pipeline.l3_encap.cycles`, `.mpps` | 64 B UDP/IPv4 | pod A → a remote /24: pod-input, ip4-lookup, srv6-encap (H.Encaps.Red, +40 B), underlay-out, tx | `dpdk.null_fwd.*` |
//! | `pipeline.l3_decap.cycles`, `.mpps` | 82 B IPv6(SID) + UDP/IPv4 | uplink → pod B: uplink-input, srv6-decap (End.DT46), ip4-lookup, local-rewrite, tx | `dpdk.null_fwd.*` |
//! | `pipeline.<path>.above_floor` | as the path | the path's cycles minus `dpdk.null_fwd_write.cycles` in the same round (median over rounds): the pipeline's own cost | `dpdk.null_fwd_write.cycles` |
//! | `pipeline.arp_reply.cycles`, `.mpps` | 64 B ARP (42 B + padding) | pod A asks for its gateway: pod-input, arp-reply, tx | `dpdk.null_fwd.*` |
//! | `pipeline.l3_encap.scaling_2w` | 64 B | l3_encap throughput with two workers ÷ with one | `pipeline.scaling_2w.ideal` (2.0) |
//! | `pipeline.l3_encap.mpps_1w`, `.mpps_2w` | 64 B | the two throughputs behind it (Mpps, both workers together) | — |
//! | `churn.100k_per_s.l3_encap.cycles` | 64 B | l3_encap while a writer thread moves routes between two remote nodes, 100,000 changes per second (100 per publication), the packets' route among them | `churn.quiet.l3_encap.cycles` |
//! | `churn.quiet.l3_encap.cycles` | 64 B | l3_encap in the rounds alternating with those, the writer paused | — |
//!
//! How: each worker owns a mempool and three `net_null` ports (hot-plugged): RX with
//! `size=64`, RX with `size=82` (the decap frame: 14 + 40 + 20 + 8 bytes, the smallest valid
//! End.DT46 packet), and a TX port with one queue per output (the anchor's, the uplink's, pod
//! A's, pod B's). A burst is: `rx_burst` of 32 mbufs (net_null hands out mbufs of `size` bytes
//! without touching their data), the path's precomputed frame copied into each (standing in for
//! the NIC's DMA), a table [`Snapshot`](lace_shared::tables::Snapshot) taken,
//! [`Pipeline::process`], the per-port [`Burst`]s drained with `tx_burst`, and a quiescent point
//! — what a forwarder worker does per burst. One round is many bursts timed with the TSC; the
//! anchor and the four paths run in alternating rounds (round-robin) so machine noise hits all
//! alike; the median round is reported.
//!
//! Before timing, and after every timed round, the pipeline's counters must show that every
//! packet went through exactly the stages of its path and out of the expected port, with no
//! drop: otherwise the run fails naming the drop reasons, so a figure never measures the drop
//! path by accident.
//!
//! Scaling: the main lcore and one worker lcore (another CPU) each run the encap loop on their
//! own ports, mempool, pipeline and reader handle, for the same TSC window; packets of both ÷
//! window, against the main lcore alone, in alternating rounds.
//!
//! Churn: as control does when routes move, a thread (on another CPU when there is one) stages
//! 100 route changes and publishes them, paced to 100,000 changes per second, over 257 /24s
//! (the encap frame's among them) alternating between the two remote nodes, while the main
//! lcore runs timed l3_encap rounds, alternately with the writer running and paused; the counters are checked as above (every packet still
//! encapsulated, no drop). The test `route_churn_never_misforwards` checks each packet's outer
//! destination against its snapshot's route.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use lace_forwarder::dpdk::{self as fwd, Burst, Mbuf, Mempool, Port, PortConfig, RxQueue, TxQueue};
use lace_forwarder::pipeline::{Config, Counters, Io, Pipeline, Stage, UnderlayNeighbors};
use lace_shared::status::DropReason;
use lace_shared::tables::{ReaderHandle, TableReader, TableWriter, TablesConfig};
use lace_shared::types::{
    IfName, MacAddr, NetworkId, NetworkInfo, NetworkKind, NextHop, NodeId, NodeInfo, PortId,
    PortInfo, PortKind, Sid, SidBehavior,
};

use crate::dpdk::Eal;
use crate::report::{median, rdtsc, tsc_hz, Figure, Scale};

// ---- the node ----------------------------------------------------------------------------------

const NET: NetworkId = NetworkId(1);
const GW_MAC: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 1];
const GW4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const GW6: Ipv6Addr = Ipv6Addr::new(0xfd01, 0, 0, 0, 0, 0, 0, 1);
const POD_A: PortId = PortId(1);
const POD_B: PortId = PortId(2);
const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const A4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
const B4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 3);
/// A pod on the remote node, inside its /24.
const REMOTE4: Ipv4Addr = Ipv4Addr::new(10, 1, 2, 5);
const REMOTE_NODE: NodeId = NodeId(2);
/// The second remote node, to which churned routes move.
const REMOTE_NODE3: NodeId = NodeId(3);
const UPLINK_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 2];
/// This node's underlay address.
const ME: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xa);
/// The remote node's underlay address.
const PEER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xb);
/// This node's End.DT46 SID for [`NET`].
const MY_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 1, 0, 0, 0, 0);
/// The remote node's End.DT46 SID for [`NET`].
const PEER_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 1, 0, 0, 0, 0);
/// The second remote node's underlay address, MAC and End.DT46 SID.
const PEER3: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xc);
const PEER3_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 3];
const PEER3_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 3, 1, 0, 0, 0, 0);

/// The pipeline configuration of the node.
fn config() -> Config {
    Config {
        uplink_mac: MacAddr(UPLINK_MAC),
        underlay_addr: ME,
        hop_limit: 64,
        underlay_mtu: 1500,
        flow_seed: 0x1ace,
    }
}

/// A directory removed on drop.
#[derive(Debug)]
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The node's tables on `/dev/shm`: one l3 network with two local pods, two remote nodes with
/// static underlay neighbors and a /24 behind the first's End.DT46 SID, and this node's
/// End.DT46 SID.
#[derive(Debug)]
struct Node {
    reader: Arc<TableReader>,
    // Declared after `reader`: the files go once nothing maps them any more.
    writer: TableWriter,
    _dir: TempDir,
}

impl Node {
    fn create() -> anyhow::Result<Node> {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("lace-bench-pipeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = TempDir(dir);
        let tc = TablesConfig {
            dir: dir.0.clone(),
            name: "pipeline".into(),
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
                gateway6: Some(GW6),
                mtu: 1460,
            },
        )?;
        for (port, mac, ip) in [(POD_A, MAC_A, A4), (POD_B, MAC_B, B4)] {
            w.set_port(
                port,
                &PortInfo {
                    kind: PortKind::Pod,
                    network: NET,
                    mac: MacAddr(mac),
                    ipv4: Some(ip),
                    ipv6: None,
                    endpoint: u64::from(port.0),
                    iface: IfName::new(&format!("pod{}", port.0))?,
                },
            )?;
            w.add_route(
                NET,
                ip.into(),
                32,
                NextHop::Local {
                    port,
                    mac: MacAddr(mac),
                },
            )?;
        }
        w.set_node(
            REMOTE_NODE,
            &NodeInfo {
                locator: Ipv6Addr::new(0xfc00, 0, 2, 0, 0, 0, 0, 0),
                locator_len: 48,
                underlay: PEER,
            },
        )?;
        w.set_underlay_neighbor(PEER, MacAddr(PEER_MAC))?;
        w.set_node(
            REMOTE_NODE3,
            &NodeInfo {
                locator: Ipv6Addr::new(0xfc00, 0, 3, 0, 0, 0, 0, 0),
                locator_len: 48,
                underlay: PEER3,
            },
        )?;
        w.set_underlay_neighbor(PEER3, MacAddr(PEER3_MAC))?;
        w.add_route(
            NET,
            Ipv4Addr::new(10, 1, 2, 0).into(),
            24,
            NextHop::Remote {
                node: REMOTE_NODE,
                sid: Sid(PEER_SID),
            },
        )?;
        w.set_local_sid(Sid(MY_SID), SidBehavior::EndDt46(NET))?;
        w.publish()?;
        let reader = TableReader::attach(&tc)?;
        Ok(Node {
            reader,
            writer: w,
            _dir: dir,
        })
    }
}

// ---- frames ------------------------------------------------------------------------------------

/// The measured paths through the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Pod A → pod B on this node (64-byte UDP/IPv4).
    L3Local,
    /// Pod A → a pod behind the remote node: SRv6 H.Encaps.Red (64-byte UDP/IPv4 in).
    L3Encap,
    /// From the uplink to this node's End.DT46 SID, inner packet to pod B (82 bytes in).
    L3Decap,
    /// Pod A's ARP request for its gateway, answered in place (64 bytes, padded).
    ArpReply,
}

impl Path {
    /// Every path, in report order.
    pub const ALL: [Path; 4] = [Path::L3Local, Path::L3Encap, Path::L3Decap, Path::ArpReply];

    /// The figure-id component.
    pub const fn name(self) -> &'static str {
        match self {
            Path::L3Local => "l3_local",
            Path::L3Encap => "l3_encap",
            Path::L3Decap => "l3_decap",
            Path::ArpReply => "arp_reply",
        }
    }

    /// Bytes of each received frame (the null port's `size`).
    pub const fn frame_len(self) -> usize {
        match self {
            Path::L3Decap => DECAP_LEN,
            _ => FRAME_LEN,
        }
    }

    /// The port the frames arrive on.
    const fn rx_port(self) -> PortId {
        match self {
            Path::L3Decap => PortId::UPLINK,
            _ => POD_A,
        }
    }

    /// The port every packet must leave on.
    const fn tx_port(self) -> PortId {
        match self {
            Path::L3Local | Path::L3Decap => POD_B,
            Path::L3Encap => PortId::UPLINK,
            Path::ArpReply => POD_A,
        }
    }

    /// The stages every packet must go through (each exactly once), and no others.
    const fn stages(self) -> &'static [Stage] {
        match self {
            Path::L3Local => &[
                Stage::PodInput,
                Stage::Ip4Lookup,
                Stage::LocalRewrite,
                Stage::Tx,
            ],
            Path::L3Encap => &[
                Stage::PodInput,
                Stage::Ip4Lookup,
                Stage::Srv6Encap,
                Stage::UnderlayOut,
                Stage::Tx,
            ],
            Path::L3Decap => &[
                Stage::UplinkInput,
                Stage::Srv6Decap,
                Stage::Ip4Lookup,
                Stage::LocalRewrite,
                Stage::Tx,
            ],
            Path::ArpReply => &[Stage::PodInput, Stage::ArpReply, Stage::Tx],
        }
    }

    /// The frame written into every received mbuf.
    fn template(self) -> Vec<u8> {
        match self {
            Path::L3Local => udp4_frame(MAC_A, GW_MAC, A4, B4, FRAME_LEN),
            Path::L3Encap => udp4_frame(MAC_A, GW_MAC, A4, REMOTE4, FRAME_LEN),
            Path::L3Decap => {
                // The remote node's H.Encaps.Red: outer IPv6 to our SID, no SRH, inner IPv4.
                let inner = udp4_frame(PEER_MAC, UPLINK_MAC, REMOTE4, B4, 14 + 28);
                let mut f = eth(UPLINK_MAC, PEER_MAC, 0x86dd);
                f.extend_from_slice(&ipv6_header(28, 4, PEER, MY_SID));
                f.extend_from_slice(&inner[14..]);
                debug_assert_eq!(f.len(), DECAP_LEN);
                f
            }
            Path::ArpReply => {
                let mut f = eth([0xff; 6], MAC_A, 0x0806);
                f.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]); // Ethernet/IPv4, request
                f.extend_from_slice(&MAC_A);
                f.extend_from_slice(&A4.octets());
                f.extend_from_slice(&[0; 6]);
                f.extend_from_slice(&GW4.octets());
                f.resize(FRAME_LEN, 0); // Ethernet padding
                f
            }
        }
    }
}

/// Frame size of the 64-byte figures.
pub const FRAME_LEN: usize = 64;
/// Frame size of the decap figure: Ethernet + outer IPv6 + IPv4 + UDP.
pub const DECAP_LEN: usize = 14 + 40 + 20 + 8;

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(128);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// The one's-complement checksum of `bytes` (RFC 1071).
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet + IPv4 + UDP frame of `len` bytes (zero payload), TTL 64, valid checksums
/// (the UDP checksum is 0: none, allowed over IPv4).
fn udp4_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    len: usize,
) -> Vec<u8> {
    let mut f = eth(dst_mac, src_mac, 0x0800);
    let ip_len = (len - 14) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&40_000u16.to_be_bytes());
    f.extend_from_slice(&5_001u16.to_be_bytes());
    f.extend_from_slice(&(ip_len - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(len, 0);
    f
}

fn ipv6_header(payload_len: u16, next: u8, src: Ipv6Addr, dst: Ipv6Addr) -> [u8; 40] {
    let mut h = [0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&payload_len.to_be_bytes());
    h[6] = next;
    h[7] = 64;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    h
}

// ---- a worker ----------------------------------------------------------------------------------

/// One output port: its TX queue, the burst the pipeline's sends are buffered in, and the
/// packets the driver took.
#[derive(Debug)]
struct Output {
    port: PortId,
    txq: TxQueue,
    burst: Burst,
    sent: u64,
}

/// The worker's [`Io`]: sends are buffered per output port and drained with `tx_burst` at the
/// end of each burst (or when a buffer fills); refused packets are freed and counted.
#[derive(Debug)]
struct BenchIo {
    outputs: Vec<Output>,
    pool: Mempool,
    /// Packets sent to a port without an output (never expected).
    unknown_port: u64,
    /// Packets the driver refused.
    refused: u64,
    hz: f64,
}

impl BenchIo {
    /// Drains every output; returns how many packets the driver refused (freed).
    #[inline]
    fn flush(&mut self) -> u64 {
        let mut refused = 0;
        for o in &mut self.outputs {
            if !o.burst.is_empty() {
                o.sent += o.txq.tx_burst(&mut o.burst) as u64;
                refused += o.burst.clear() as u64;
            }
        }
        self.refused += refused;
        refused
    }
}

impl Io<Mbuf> for BenchIo {
    #[inline]
    fn send(&mut self, port: PortId, pkt: Mbuf) {
        let Some(o) = self.outputs.iter_mut().find(|o| o.port == port) else {
            self.unknown_port += 1;
            return;
        };
        if let Err(pkt) = o.burst.push(pkt) {
            o.sent += o.txq.tx_burst(&mut o.burst) as u64;
            self.refused += o.burst.clear() as u64;
            if o.burst.push(pkt).is_err() {
                self.refused += 1;
            }
        }
    }

    #[inline]
    fn port_up(&self, port: PortId) -> bool {
        self.outputs.iter().any(|o| o.port == port)
    }

    fn alloc(&mut self) -> Option<Mbuf> {
        self.pool.alloc()
    }

    fn now_ns(&self) -> u64 {
        (rdtsc() as f64 * 1e9 / self.hz) as u64
    }
}

/// What one timed round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    /// `rx_burst` + `tx_burst`, nothing else.
    NullFwd,
    /// As `NullFwd`, writing the 64-byte template into each mbuf in between.
    NullFwdWrite,
    /// A path through the pipeline.
    Pipeline(Path),
}

/// Everything one forwarding core owns: a mempool, its null ports and queues, a pipeline, a
/// table reader handle.
#[derive(Debug)]
struct Worker {
    name: String,
    pipeline: Pipeline<Mbuf>,
    reader: ReaderHandle,
    io: BenchIo,
    rx64: RxQueue,
    rx82: RxQueue,
    anchor_tx: TxQueue,
    burst: Burst,
    pkts: Vec<Mbuf>,
    templates: Vec<Vec<u8>>,
    /// Kept for their lifetime (the queues keep them attached too).
    _ports: Vec<Port>,
}

/// Queues of the TX port: the anchor's, then one per output port.
const OUTPUT_PORTS: [PortId; 3] = [PortId::UPLINK, POD_A, POD_B];

impl Worker {
    /// Creates worker `index`'s mempool and null ports, and registers its reader.
    fn new(
        eal: &fwd::Eal,
        index: usize,
        node: &Node,
        neigh: &Arc<UnderlayNeighbors>,
    ) -> anyhow::Result<Worker> {
        let name = format!("w{index}");
        let pool = Mempool::new(
            eal,
            &format!("lace_bench_{name}"),
            4095,
            256,
            Mempool::DEFAULT_DATA_ROOM,
            None,
        )?;
        let port = |suffix: &str, args: &str, tx_queues: u16| -> anyhow::Result<Port> {
            let devargs = format!("net_null_bench_{name}_{suffix}{args}");
            let mut p = Port::attach_vdev(eal, &devargs)?;
            p.configure(
                &PortConfig {
                    rx_queues: 1,
                    tx_queues,
                    rx_descriptors: 512,
                    tx_descriptors: 512,
                    ..PortConfig::default()
                },
                &pool,
            )
            .with_context(|| format!("configuring {devargs}"))?;
            p.start().with_context(|| format!("starting {devargs}"))?;
            Ok(p)
        };
        let p64 = port("rx64", &format!(",size={FRAME_LEN}"), 1)?;
        let p82 = port("rx82", &format!(",size={DECAP_LEN}"), 1)?;
        let ptx = port("tx", "", 1 + OUTPUT_PORTS.len() as u16)?;
        let outputs = OUTPUT_PORTS
            .iter()
            .enumerate()
            .map(|(i, &port)| {
                Ok(Output {
                    port,
                    txq: ptx.tx_queue(1 + i as u16)?,
                    burst: Burst::new(),
                    sent: 0,
                })
            })
            .collect::<Result<Vec<_>, fwd::Error>>()?;
        Ok(Worker {
            pipeline: Pipeline::new(config(), Arc::clone(neigh)),
            reader: node.reader.register()?,
            io: BenchIo {
                outputs,
                pool,
                unknown_port: 0,
                refused: 0,
                hz: tsc_hz(),
            },
            rx64: p64.rx_queue(0)?,
            rx82: p82.rx_queue(0)?,
            anchor_tx: ptx.tx_queue(0)?,
            burst: Burst::new(),
            pkts: Vec::with_capacity(fwd::BURST_SIZE),
            templates: Path::ALL.iter().map(|p| p.template()).collect(),
            _ports: vec![p64, p82, ptx],
            name,
        })
    }

    /// One burst of `c`; returns the packets received (and forwarded).
    #[inline]
    fn burst(&mut self, c: Contender) -> u64 {
        match c {
            Contender::NullFwd => {
                let n = self.rx64.rx_burst(&mut self.burst);
                self.anchor_tx.tx_burst(&mut self.burst);
                self.burst.clear();
                n as u64
            }
            Contender::NullFwdWrite => {
                let n = self.rx64.rx_burst(&mut self.burst);
                write_template(&mut self.burst, &self.templates[0]);
                self.anchor_tx.tx_burst(&mut self.burst);
                self.burst.clear();
                n as u64
            }
            Contender::Pipeline(path) => {
                let rxq = if path == Path::L3Decap {
                    &mut self.rx82
                } else {
                    &mut self.rx64
                };
                let n = rxq.rx_burst(&mut self.burst);
                write_template(&mut self.burst, &self.templates[path as usize]);
                self.pkts.extend(self.burst.drain());
                let snap = self.reader.snapshot();
                self.pipeline
                    .process(&snap, path.rx_port(), &mut self.pkts, &mut self.io);
                let refused = self.io.flush();
                if refused > 0 {
                    self.pipeline.count_drop(DropReason::TxRefused, refused);
                }
                self.reader.quiescent();
                n as u64
            }
        }
    }

    /// `bursts` bursts of `c`; returns the packets received.
    #[inline(never)]
    fn round(&mut self, c: Contender, bursts: usize) -> u64 {
        (0..bursts).map(|_| self.burst(c)).sum()
    }

    /// Bursts of `path` from TSC `start` (spinning until then) until `end`; returns the
    /// packets and the TSC of the first burst and after the last.
    fn run_window(&mut self, path: Path, start: u64, end: u64) -> anyhow::Result<Window> {
        while rdtsc() < start {
            std::hint::spin_loop();
        }
        let first = rdtsc();
        let mut packets = 0;
        // At least one batch, even when this worker starts after the window closed (a late
        // wake-up then shows as a longer span, never as an empty window).
        let last = loop {
            for _ in 0..16 {
                packets += self.burst(Contender::Pipeline(path));
            }
            let now = rdtsc();
            if now >= end {
                break now;
            }
        };
        self.check(path, packets)?;
        Ok(Window {
            packets,
            first,
            last,
        })
    }

    /// Checks the counters since the last check: `packets` went through exactly `path`'s
    /// stages and out of its port, with no drop. Resets the counters.
    fn check(&mut self, path: Path, packets: u64) -> anyhow::Result<()> {
        let c = self.pipeline.take_counters();
        let sent: Vec<(PortId, u64)> = self
            .io
            .outputs
            .iter_mut()
            .map(|o| (o.port, std::mem::take(&mut o.sent)))
            .collect();
        let unknown = std::mem::take(&mut self.io.unknown_port);
        let id = format!("pipeline.{} ({})", path.name(), self.name);
        if packets == 0 {
            bail!("{id}: the null port delivered no packets (mempool exhausted?)");
        }
        if c.total_drops() > 0 {
            bail!(
                "{id}: {} of {packets} packets DROPPED ({}) — the frame does not take the \
                 intended path; no figure taken. Stages: {}",
                c.total_drops(),
                drop_summary(&c),
                stage_summary(&c)
            );
        }
        for s in Stage::ALL {
            let want = if path.stages().contains(&s) {
                packets
            } else {
                0
            };
            if c.stage(s) != want {
                bail!(
                    "{id}: stage {} handled {} packets, expected {want} of {packets} — the \
                     frame does not take the intended path; no figure taken. Stages: {}",
                    s.name(),
                    c.stage(s),
                    stage_summary(&c)
                );
            }
        }
        for (port, n) in sent {
            let want = if port == path.tx_port() { packets } else { 0 };
            if n != want {
                bail!(
                    "{id}: {n} packets left on port {}, expected {want} of {packets} \
                     ({unknown} sent to ports without output)",
                    port.0
                );
            }
        }
        if unknown > 0 {
            bail!("{id}: {unknown} packets sent to ports without output");
        }
        Ok(())
    }
}

/// Copies `template` over each mbuf's data (as much as fits; the null ports' `size` equals
/// the template's length, checked before timing).
#[inline]
fn write_template(burst: &mut Burst, template: &[u8]) {
    for m in burst.iter_mut() {
        let d = m.data_mut();
        let n = d.len().min(template.len());
        d[..n].copy_from_slice(&template[..n]);
    }
}

/// One worker's part of a scaling window.
#[derive(Debug, Clone, Copy)]
struct Window {
    packets: u64,
    first: u64,
    last: u64,
}

fn drop_summary(c: &Counters) -> String {
    DropReason::ALL
        .iter()
        .filter(|r| c.drop(**r) > 0)
        .map(|r| format!("{}: {}", r.name(), c.drop(*r)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn stage_summary(c: &Counters) -> String {
    Stage::ALL
        .iter()
        .filter(|s| c.stage(**s) > 0)
        .map(|s| format!("{} {}", s.name(), c.stage(*s)))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---- the figures -------------------------------------------------------------------------------

/// Sizes of the pipeline measurements at a [`Scale`].
#[derive(Debug, Clone, Copy)]
struct Sizes {
    /// Bursts of 32 per timed round.
    bursts: usize,
    /// Timed rounds per contender.
    rounds: usize,
    /// Bursts of the untimed warm-up (checked) per contender.
    warmup: usize,
    /// Scaling: window length in ms, and alternating (1 worker, 2 workers) pairs.
    window_ms: f64,
    pairs: usize,
}

impl Sizes {
    fn of(scale: &Scale) -> Sizes {
        if scale.smoke {
            Sizes {
                bursts: 64,
                rounds: 1,
                warmup: 16,
                window_ms: 2.0,
                pairs: 1,
            }
        } else if scale.quick {
            Sizes {
                bursts: 16_384,
                rounds: 31,
                warmup: 1024,
                window_ms: 50.0,
                pairs: 11,
            }
        } else {
            Sizes {
                bursts: 16_384,
                rounds: 101,
                warmup: 4096,
                window_ms: 200.0,
                pairs: 31,
            }
        }
    }
}

/// Every pipeline figure, and notes for the report. `worker_lcore` is an EAL worker lcore for
/// the two-worker scaling figure (`None`: skipped, with a note).
pub fn figures(
    eal: Eal,
    scale: &Scale,
    worker_lcore: Option<u32>,
) -> anyhow::Result<(Vec<Figure>, Vec<String>)> {
    let sizes = Sizes::of(scale);
    let fwd_eal = eal.forwarder()?;
    let mut node = Node::create().context("building the pipeline tables")?;
    let neigh = Arc::new(UnderlayNeighbors::new(64));
    let mut w0 = Worker::new(&fwd_eal, 0, &node, &neigh).context("setting up worker 0")?;
    let mut figures = Vec::new();
    let mut notes = Vec::new();

    // Warm up and check every contender: the frames must fit the null ports' mbufs exactly,
    // and every packet must take its path.
    let contenders: Vec<Contender> = [Contender::NullFwd, Contender::NullFwdWrite]
        .into_iter()
        .chain(Path::ALL.map(Contender::Pipeline))
        .collect();
    for &c in &contenders {
        let n = w0.round(c, sizes.warmup);
        if let Contender::Pipeline(path) = c {
            w0.check(path, n)?;
        } else if n == 0 {
            bail!("the null port delivered no packets");
        }
    }
    for path in Path::ALL {
        let mut b: Burst = Burst::new();
        let rxq = if path == Path::L3Decap {
            &mut w0.rx82
        } else {
            &mut w0.rx64
        };
        rxq.rx_burst(&mut b);
        if let Some(len) = b.iter().map(Mbuf::len).find(|&l| l != path.frame_len()) {
            bail!(
                "pipeline.{}: the null port delivers {len}-byte mbufs, the frame is {}",
                path.name(),
                path.frame_len()
            );
        }
    }

    // Timed: every contender once per round, round-robin.
    let mut samples = vec![Vec::with_capacity(sizes.rounds); contenders.len()];
    for _ in 0..sizes.rounds {
        for (&c, s) in contenders.iter().zip(&mut samples) {
            let start = rdtsc();
            let n = w0.round(c, sizes.bursts);
            let cycles = rdtsc().saturating_sub(start);
            if let Contender::Pipeline(path) = c {
                w0.check(path, n)?;
            } else if n == 0 {
                bail!("the null port delivered no packets");
            }
            s.push(cycles as f64 / n as f64);
        }
    }
    let medians: Vec<f64> = samples.iter().cloned().map(median).collect();
    let mpps = |cycles: f64| tsc_hz() / cycles / 1e6;

    let a_cycles = Figure::new("dpdk.null_fwd.cycles", medians[0], "cycles/packet");
    let a_mpps = Figure::new("dpdk.null_fwd.mpps", mpps(medians[0]), "Mpps");
    figures.push(a_cycles.clone());
    figures.push(a_mpps.clone());
    figures.push(Figure::versus(
        "dpdk.null_fwd_write.cycles",
        medians[1],
        &a_cycles,
    ));
    figures.push(Figure::versus(
        "dpdk.null_fwd_write.mpps",
        mpps(medians[1]),
        &a_mpps,
    ));
    let floor = Figure::versus("dpdk.null_fwd_write.cycles", medians[1], &a_cycles);
    for (k, (path, &cycles)) in Path::ALL.iter().zip(&medians[2..]).enumerate() {
        figures.push(Figure::versus(
            format!("pipeline.{}.cycles", path.name()),
            cycles,
            &a_cycles,
        ));
        figures.push(Figure::versus(
            format!("pipeline.{}.mpps", path.name()),
            mpps(cycles),
            &a_mpps,
        ));
        // The pipeline's own cost: the path minus the I/O floor of the same round (rx, the
        // frame written, tx), median over the rounds.
        let above: Vec<f64> = samples[2 + k]
            .iter()
            .zip(&samples[1])
            .map(|(path, floor)| path - floor)
            .collect();
        figures.push(Figure::versus(
            format!("pipeline.{}.above_floor", path.name()),
            median(above),
            &floor,
        ));
    }
    notes.push(format!(
        "pipeline.*: one core, {} timed rounds of {} bursts of 32 per figure, all figures and \
         dpdk.null_fwd round-robin, median; per burst: rx_burst from net_null, the path's frame \
         written into each mbuf, snapshot, Pipeline::process, tx_burst per output port, \
         quiescent (dpdk.null_fwd: rx_burst + tx_burst only; dpdk.null_fwd_write: plus the \
         64-byte write). Frames: l3_local/l3_encap UDP/IPv4 {FRAME_LEN} B, l3_decap \
         IPv6+UDP/IPv4 {DECAP_LEN} B (net_null size={DECAP_LEN}), arp_reply ARP padded to \
         {FRAME_LEN} B; stage counters checked every round (no drop, intended stages only)",
        sizes.rounds, sizes.bursts
    ));

    let (churn_figures, note) =
        churn(&mut w0, &mut node.writer, &sizes).context("churn.100k_per_s.l3_encap")?;
    figures.extend(churn_figures);
    notes.push(note);

    match worker_lcore {
        Some(lcore) => {
            let (fig, note) = scaling(&fwd_eal, lcore, &node, &neigh, &mut w0, &sizes)
                .context("pipeline.l3_encap.scaling_2w")?;
            figures.extend(fig);
            notes.push(note);
        }
        None => notes.push(
            "pipeline.l3_encap.scaling_2w: not measured — no second CPU for a worker lcore"
                .to_owned(),
        ),
    }
    Ok((figures, notes))
}

/// Route changes per second of the churn figure, and per publication.
const CHURN_PER_S: f64 = 100_000.0;
const CHURN_PER_PUBLICATION: usize = 100;
/// The churned /24s: the encap frame's (10.1.2.0/24) and 10.3.0.0/24 … 10.3.255.0/24.
const CHURN_PREFIXES: usize = 257;

fn churn_prefix(i: usize) -> Ipv4Addr {
    match i {
        0 => Ipv4Addr::new(10, 1, 2, 0),
        _ => Ipv4Addr::new(10, 3, (i - 1) as u8, 0),
    }
}

/// What the churn thread did: changes published, publications and the seconds it ran.
#[derive(Debug, Clone, Copy)]
struct Churned {
    changes: usize,
    publications: usize,
    secs: f64,
}

/// Moves the churned routes between the two remote nodes, paced to [`CHURN_PER_S`] while
/// `paused` is false, until `stop`; every route is set back on the first remote node at the end.
fn churn_routes(
    writer: &mut TableWriter,
    paused: &AtomicBool,
    stop: &AtomicBool,
) -> anyhow::Result<Churned> {
    let hop = |node: NodeId| NextHop::Remote {
        node,
        sid: Sid(if node == REMOTE_NODE {
            PEER_SID
        } else {
            PEER3_SID
        }),
    };
    let period = Duration::from_secs_f64(CHURN_PER_PUBLICATION as f64 / CHURN_PER_S);
    let mut on_first = vec![true; CHURN_PREFIXES];
    let mut active = Duration::ZERO;
    let (mut changes, mut publications) = (0usize, 0usize);
    while !stop.load(Ordering::Relaxed) {
        if paused.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        let t0 = Instant::now();
        for _ in 0..CHURN_PER_PUBLICATION {
            let i = changes % CHURN_PREFIXES;
            on_first[i] = !on_first[i];
            let node = if on_first[i] {
                REMOTE_NODE
            } else {
                REMOTE_NODE3
            };
            writer.add_route(NET, churn_prefix(i).into(), 24, hop(node))?;
            changes += 1;
        }
        writer.publish()?;
        publications += 1;
        while !stop.load(Ordering::Relaxed) && !paused.load(Ordering::Relaxed) {
            let spent = t0.elapsed();
            if spent >= period {
                break;
            }
            std::thread::sleep((period - spent).min(Duration::from_millis(1)));
        }
        active += t0.elapsed();
    }
    for (i, _) in on_first.iter().enumerate().filter(|(_, first)| !**first) {
        writer.add_route(NET, churn_prefix(i).into(), 24, hop(REMOTE_NODE))?;
    }
    writer.publish()?;
    Ok(Churned {
        changes,
        publications,
        secs: active.as_secs_f64(),
    })
}

/// `churn.100k_per_s.l3_encap.cycles` beside `churn.quiet.l3_encap.cycles`: timed l3_encap
/// rounds on the main lcore, alternately with [`churn_routes`] running on a thread and paused.
fn churn(
    w0: &mut Worker,
    writer: &mut TableWriter,
    sizes: &Sizes,
) -> anyhow::Result<(Vec<Figure>, String)> {
    let path = Path::L3Encap;
    let paused = AtomicBool::new(true);
    let stop = AtomicBool::new(false);
    let (quiet, busy, churned) = std::thread::scope(|s| {
        let churner = s.spawn(|| churn_routes(writer, &paused, &stop));
        let timed = |w0: &mut Worker, bursts| -> anyhow::Result<f64> {
            let start = rdtsc();
            let n = w0.round(Contender::Pipeline(path), bursts);
            let cycles = rdtsc().saturating_sub(start);
            w0.check(path, n)?;
            Ok(cycles as f64 / n as f64)
        };
        let measured = (|| -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
            paused.store(false, Ordering::Relaxed);
            timed(w0, sizes.warmup)?;
            let (mut quiet, mut busy) = (Vec::new(), Vec::new());
            for _ in 0..sizes.rounds {
                paused.store(true, Ordering::Relaxed);
                quiet.push(timed(w0, sizes.bursts)?);
                paused.store(false, Ordering::Relaxed);
                busy.push(timed(w0, sizes.bursts)?);
            }
            Ok((quiet, busy))
        })();
        stop.store(true, Ordering::Relaxed);
        let churned = churner
            .join()
            .map_err(|_| anyhow!("the churn thread panicked"))?;
        let (quiet, busy) = measured?;
        Ok::<_, anyhow::Error>((quiet, busy, churned?))
    })?;
    let rate = churned.changes as f64 / churned.secs.max(1e-9);
    let quiet = Figure::new(
        "churn.quiet.l3_encap.cycles",
        median(quiet),
        "cycles/packet",
    );
    let busy = Figure::versus("churn.100k_per_s.l3_encap.cycles", median(busy), &quiet);
    let note = format!(
        "churn.100k_per_s.l3_encap.cycles: {} pairs of timed l3_encap rounds of {} bursts \
         (median), alternately while a thread moved {CHURN_PREFIXES} /24s (the frame's among \
         them) between two remote nodes and while it paused (churn.quiet): {} changes in {} \
         publications over {:.2} s of churn = {:.0} changes/s (target pace {CHURN_PER_S}); \
         every packet still left encapsulated, no drop",
        sizes.rounds, sizes.bursts, churned.changes, churned.publications, churned.secs, rate
    );
    Ok((vec![quiet, busy], note))
}

/// What the main lcore asks of the worker lcore.
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u64,
    end: u64,
}

/// The two-worker scaling figure: `w0` on the main lcore, a second worker on `lcore`.
fn scaling(
    eal: &fwd::Eal,
    lcore: u32,
    node: &Node,
    neigh: &Arc<UnderlayNeighbors>,
    w0: &mut Worker,
    sizes: &Sizes,
) -> anyhow::Result<(Vec<Figure>, String)> {
    let path = Path::L3Encap;
    let mut w1 = Worker::new(eal, 1, node, neigh).context("setting up worker 1")?;
    let n = w1.round(Contender::Pipeline(path), sizes.warmup);
    w1.check(path, n)?;

    let (run_tx, run_rx) = mpsc::channel::<Run>();
    let (res_tx, res_rx) = mpsc::channel::<Result<Window, String>>();
    let job = eal.launch(lcore, move || {
        let mut w = w1;
        while let Ok(run) = run_rx.recv() {
            let r = w
                .run_window(path, run.start, run.end)
                .map_err(|e| format!("{e:#}"));
            if res_tx.send(r).is_err() {
                break;
            }
        }
        0
    })?;

    let hz = tsc_hz();
    let window = (sizes.window_ms * 1e-3 * hz) as u64;
    // Time for the worker lcore to wake up and be spinning before the window opens.
    let lead = (2e-3 * hz) as u64;
    let mut one = Vec::with_capacity(sizes.pairs);
    let mut two = Vec::with_capacity(sizes.pairs);
    let mut skew_us = Vec::with_capacity(sizes.pairs);
    let measured = (|| -> anyhow::Result<()> {
        for _ in 0..sizes.pairs {
            let start = rdtsc() + lead;
            let w = w0.run_window(path, start, start + window)?;
            one.push(w.packets as f64 * hz / (w.last - w.first) as f64);

            let start = rdtsc() + lead;
            run_tx
                .send(Run {
                    start,
                    end: start + window,
                })
                .map_err(|_| anyhow!("the worker lcore's job has ended"))?;
            let a = w0.run_window(path, start, start + window)?;
            let b = res_rx
                .recv()
                .map_err(|_| anyhow!("the worker lcore's job has ended"))?
                .map_err(|e| anyhow!(e))?;
            let span = a.last.max(b.last) - a.first.min(b.first);
            two.push((a.packets + b.packets) as f64 * hz / span as f64);
            skew_us.push(a.first.abs_diff(b.first) as f64 * 1e6 / hz);
        }
        Ok(())
    })();
    drop(run_tx);
    let ret = job.join();
    measured?;
    if ret != 0 {
        bail!("the worker lcore's job returned {ret}");
    }

    let (one, two) = (median(one), median(two));
    let ideal = Figure::new("pipeline.scaling_2w.ideal", 2.0, "x");
    let figures = vec![
        Figure::new("pipeline.l3_encap.mpps_1w", one / 1e6, "Mpps"),
        Figure::new("pipeline.l3_encap.mpps_2w", two / 1e6, "Mpps"),
        ideal.clone(),
        Figure::versus("pipeline.l3_encap.scaling_2w", two / one, &ideal),
    ];
    let note = format!(
        "pipeline.l3_encap.scaling_2w: l3_encap throughput of two workers (main lcore {} and \
         lcore {lcore}, each with its own mempool, null ports, pipeline and reader handle) ÷ \
         one (main lcore alone), {} alternating pairs of {} ms windows, medians (the two \
         workers started {:.1} µs apart, median); ratio = scaling ÷ 2",
        eal.main_lcore(),
        sizes.pairs,
        sizes.window_ms,
        median(skew_us)
    );
    Ok((figures, note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_have_their_sizes_and_valid_checksums() {
        for p in Path::ALL {
            assert_eq!(p.template().len(), p.frame_len(), "{p:?}");
        }
        let f = Path::L3Local.template();
        assert_eq!(checksum(&f[14..34]), 0, "IPv4 header checksum verifies");
        let d = Path::L3Decap.template();
        assert_eq!(
            u16::from_be_bytes([d[18], d[19]]),
            28,
            "outer payload length"
        );
        assert_eq!(
            checksum(&d[54..74]),
            0,
            "inner IPv4 header checksum verifies"
        );
    }
}
