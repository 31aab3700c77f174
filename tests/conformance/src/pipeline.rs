//! The third decision: lace-forwarder's real [`Pipeline`], one per node, reading that node's
//! published tables through a [`TableReader`] as a forwarder worker does, tracking connections
//! in a flow table of its own ([`FlowTable::in_memory`]), fed synthetic packets.
//!
//! Every probe between two different pods becomes a real packet from the source pod's port — a
//! TCP SYN, a UDP datagram, an SCTP INIT, an ICMP (or ICMPv6) echo request, every checksum
//! correct — processed by the source node's pipeline. What leaves toward the destination pod's
//! port is delivered; what leaves on the uplink is taken, encapsulated as it is, to the node
//! whose uplink MAC it is addressed to (each node's underlay neighbor cache knows the other's,
//! as NDP would have taught it) and processed there. A probe is **allowed** when its packet
//! reaches the destination pod's port, intact and with valid checksums; **denied** when a
//! node drops it as `policy-denied`. Every drop of a round is accounted for by reason and node:
//! any other reason, or a packet leaving where it should not, is a failure, never a "deny".
//! (A pod's connections to itself never reach the forwarder — they stay on its loopback — and
//! upstream does not probe them either; probes with outside addresses or the nodes' own stacks
//! are decided by the evaluator and the tables only.)
//!
//! Each step of a case runs these rounds, every one as bursts per source port:
//!
//! 1. **revoke** (from the second step on): the next packet of every connection the previous
//!    step established (still between the same pods, at the same ports and addresses) — a TCP
//!    ACK with data, a UDP datagram, an SCTP DATA chunk, an echo request — must pass when the
//!    connection is still allowed (it survives a widening or an unrelated change) and be cut
//!    as `policy-revoked` by the node that now refuses it; when that node did not track the
//!    network before the step (no policy selected any of its pods), the connection is not in
//!    its flow table and the packet is cut as a NEW connection (`policy-denied`);
//! 2. **open**: fresh flow tables (every probe NEW), the probes' first packets;
//! 3. **reply**: every delivered probe is answered by its destination (SYN-ACK, UDP reply,
//!    SCTP INIT ACK, echo reply), which must reach the source whatever the policies say about
//!    that direction (replies of allowed connections are allowed);
//! 4. **ack**: TCP's third packet completes the handshake (the connection is ESTABLISHED).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use lace_control::netpol::Verdict;
use lace_forwarder::pipeline::sim::{self, tcp_flags, RecordingIo};
use lace_forwarder::pipeline::{
    Config, CtTimeouts, PacketBuf, Pipeline, UnderlayNeighbors, VecBuf,
};
use lace_shared::flow::FlowTable;
use lace_shared::policy::{PROTO_SCTP, PROTO_TCP, PROTO_UDP};
use lace_shared::status::DropReason;
use lace_shared::tables::{ReaderHandle, TableReader};
use lace_shared::types::{MacAddr, PortId};

use crate::universe::{Family, Party, NETWORK_ID, NODES};
use crate::{Probe, StepContext, PROTO_ICMP};

/// Entries of each node's flow table: every probe of a step fits twice over.
const FLOWS: u32 = 8192;
/// The clients' source port.
const CLIENT_PORT: u16 = 43_210;
/// The echo identifier of ICMP probes.
const ECHO_ID: u16 = 0x1ace;
/// The SCTP initiate tags of clients and servers.
const CLIENT_TAG: u32 = 0x0c11_e47a;
const SERVER_TAG: u32 = 0x05e7_7e12;
/// The pipelines' clock: connections never time out during a case.
const NOW_NS: u64 = 1_000_000_000_000;

/// What the pipeline decided, over a whole case.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PipelineChecked {
    /// Probes decided by the pipeline (and equal to the evaluator's verdict).
    pub probes: usize,
    /// Of which allowed.
    pub allowed: usize,
    /// Replies of allowed connections delivered.
    pub replies: usize,
    /// Established connections cut by a later step (`policy-revoked`).
    pub revoked: usize,
    /// Connections cut by a later step that isolated an endpoint of a network tracked by no
    /// node before: their next packet is classified as NEW there (`policy-denied`).
    pub cut_untracked: usize,
    /// Established connections that passed a later step.
    pub survived: usize,
}

impl PipelineChecked {
    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &PipelineChecked) {
        self.probes += o.probes;
        self.allowed += o.allowed;
        self.replies += o.replies;
        self.revoked += o.revoked;
        self.cut_untracked += o.cut_untracked;
        self.survived += o.survived;
    }
}

/// One node: its tables' reader, its pipeline (with its flow table) and the worker's side.
struct SimNode {
    name: &'static str,
    reader: ReaderHandle,
    pipe: Pipeline<VecBuf>,
    io: RecordingIo,
    uplink_mac: [u8; 6],
}

/// Both nodes of the universe as forwarders, and the connections the last step established.
pub struct Cluster {
    nodes: Vec<SimNode>,
    established: Vec<Conn>,
    /// Whether each node tracked the network's connections during the last step.
    tracked: Vec<bool>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field(
                "nodes",
                &self.nodes.iter().map(|n| n.name).collect::<Vec<_>>(),
            )
            .field("established", &self.established.len())
            .finish()
    }
}

/// A probe's connection as its packets carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Conn {
    probe: Probe,
    client: End,
    server: End,
    /// IP protocol on the wire (58 for ICMPv6 probes).
    proto: u8,
    port: u16,
}

/// One end of a connection: where the pod is and what its frames carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct End {
    node: usize,
    port: PortId,
    mac: [u8; 6],
    addr: IpAddr,
    /// The gateway MAC of the pod's network on its node.
    gateway: [u8; 6],
}

/// The packets of a connection, in the order they are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Open,
    Reply,
    Ack,
    Next,
}

/// What identifies a packet of a round: addresses, protocol and ports as delivered.
type Key = (IpAddr, IpAddr, u8, u16, u16);

/// Where a packet of a round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// At its destination pod's port.
    Delivered,
    /// Dropped by this node (for the round's reason: every drop is accounted for).
    DroppedAt(usize),
}

impl Kind {
    /// Sent by the client (else by the server).
    fn by_client(self) -> bool {
        self != Kind::Reply
    }
}

impl Conn {
    /// The packet's identity as it arrives.
    fn key(&self, k: Kind) -> Key {
        let ports = matches!(self.proto, PROTO_TCP | PROTO_UDP | PROTO_SCTP);
        let (cp, sp) = if ports {
            (CLIENT_PORT, self.port)
        } else {
            (0, 0)
        };
        if k.by_client() {
            (self.client.addr, self.server.addr, self.proto, cp, sp)
        } else {
            (self.server.addr, self.client.addr, self.proto, sp, cp)
        }
    }

    /// The frame the sending pod puts on its port.
    fn frame(&self, k: Kind) -> Vec<u8> {
        let (from, to) = if k.by_client() {
            (self.client, self.server)
        } else {
            (self.server, self.client)
        };
        let (s, d) = (from.addr, to.addr);
        let (sport, dport) = if k.by_client() {
            (CLIENT_PORT, self.port)
        } else {
            (self.port, CLIENT_PORT)
        };
        let (proto, l4) = match self.proto {
            PROTO_TCP => {
                let (flags, data): (u8, &[u8]) = match k {
                    Kind::Open => (tcp_flags::SYN, b""),
                    Kind::Reply => (tcp_flags::SYN | tcp_flags::ACK, b""),
                    Kind::Ack => (tcp_flags::ACK, b""),
                    Kind::Next => (tcp_flags::PSH | tcp_flags::ACK, b"GET / HTTP/1.1\r\n\r\n"),
                };
                (PROTO_TCP, sim::tcp(s, d, sport, dport, flags, data))
            }
            PROTO_UDP => (PROTO_UDP, sim::udp_checked(s, d, sport, dport, b"probe")),
            PROTO_SCTP => {
                let (vtag, chunk) = match k {
                    Kind::Open => (0, sim::sctp_init(CLIENT_TAG)),
                    Kind::Reply => (CLIENT_TAG, sim::sctp_init_ack(SERVER_TAG, *b"ckie")),
                    Kind::Ack | Kind::Next => (SERVER_TAG, sim::sctp_data(CLIENT_TAG, b"probe")),
                };
                (PROTO_SCTP, sim::sctp(sport, dport, vtag, &chunk))
            }
            _ => {
                let seq = if k == Kind::Next { 2 } else { 1 };
                sim::icmp_echo(s, d, k != Kind::Reply, ECHO_ID, seq, b"probe")
            }
        };
        let ty = if s.is_ipv4() {
            sim::ETH_IPV4
        } else {
            sim::ETH_IPV6
        };
        sim::eth(from.gateway, from.mac, ty, &sim::ip(s, d, proto, 64, &l4))
    }
}

/// The identity of the IP packet at `at` in `frame` (ports for TCP, UDP and SCTP), and whether
/// its checksums are valid.
fn key_of(frame: &[u8], at: usize) -> Option<(Key, bool)> {
    let ip = frame.get(at..)?;
    let (src, dst, proto, l4): (IpAddr, IpAddr, u8, usize) = match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            let s: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
            let d: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            (s.into(), d.into(), *ip.get(9)?, ihl)
        }
        6 => {
            let s: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let d: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            (s.into(), d.into(), *ip.get(6)?, 40)
        }
        _ => return None,
    };
    let (sp, dp) = if matches!(proto, PROTO_TCP | PROTO_UDP | PROTO_SCTP) {
        let p = ip.get(l4..l4 + 4)?;
        (
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        )
    } else {
        (0, 0)
    };
    Some(((src, dst, proto, sp, dp), sim::checksums_valid(ip)))
}

/// Where the inner packet of an SRv6-encapsulated frame starts (outer Ethernet, IPv6 and, if
/// there is one, a segment routing header).
fn inner_offset(frame: &[u8]) -> Option<usize> {
    match *frame.get(14 + 6)? {
        4 | 41 => Some(54),
        43 => Some(54 + (usize::from(*frame.get(54 + 1)?) + 1) * 8),
        _ => None,
    }
}

impl Cluster {
    /// Forwarders for every node of the step's tables, attached as readers.
    pub fn attach(cx: &StepContext<'_>) -> Result<Cluster, String> {
        let mut nodes = Vec::new();
        for (k, name) in NODES.iter().enumerate() {
            let tables = cx
                .nodes
                .iter()
                .find(|n| n.node == *name)
                .ok_or_else(|| format!("no tables for {name}"))?;
            let mut reader = TableReader::attach(&tables.cfg)
                .and_then(|r| r.register())
                .map_err(|e| format!("{name}: attaching to its tables: {e}"))?;
            let underlay = reader
                .snapshot()
                .srv6_source()
                .ok_or_else(|| format!("{name}: the tables carry no SRv6 source"))?;
            reader.quiescent();
            let uplink_mac = [0x02, 0xaa, 0, 0, 0, k as u8 + 1];
            let neigh = Arc::new(UnderlayNeighbors::new(16));
            // What NDP on the uplink would have taught it: the other nodes' uplink MACs.
            for (j, other) in NODES.iter().enumerate() {
                if j != k {
                    let m = cx
                        .universe
                        .world
                        .nodes
                        .get(*other)
                        .ok_or_else(|| format!("{other} is not in the world"))?;
                    neigh.learn(
                        lace_forwarder::pipeline::Neighbor::untagged(m.underlay),
                        MacAddr([0x02, 0xaa, 0, 0, 0, j as u8 + 1]),
                    );
                }
            }
            let cfg = Config {
                uplink_mac: MacAddr(uplink_mac),
                underlay_addr: underlay,
                hop_limit: 64,
                underlay_mtu: 1500,
                flow_seed: 0x5eed + k as u64,
                uplink_hosts: lace_forwarder::pipeline::UplinkHosts::NONE,
            };
            nodes.push(SimNode {
                name,
                reader,
                pipe: Pipeline::new(cfg, neigh),
                io: RecordingIo {
                    now: NOW_NS,
                    ..RecordingIo::default()
                },
                uplink_mac,
            });
        }
        Ok(Cluster {
            tracked: vec![false; nodes.len()],
            nodes,
            established: Vec::new(),
        })
    }

    fn node_index(&self, name: &str) -> Result<usize, String> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| format!("no forwarder for {name}"))
    }

    /// A pod's end of connections on `f`, as the tables of its node describe its port.
    fn end(&mut self, cx: &StepContext<'_>, party: &Party, f: Family) -> Result<End, String> {
        let Party::Pod(pod) = party else {
            return Err(format!("{party} is not a pod"));
        };
        let pl = &cx.universe.placement[pod];
        let node = self.node_index(pl.node)?;
        let snap = self.nodes[node].reader.snapshot();
        let port = snap
            .port(pl.port)
            .ok_or_else(|| format!("{pod}: port {} is not in {}'s tables", pl.port.0, pl.node))?;
        let gateway = snap
            .network(port.network)
            .and_then(|n| n.info())
            .ok_or_else(|| format!("{pod}: its network is not in {}'s tables", pl.node))?
            .gateway_mac;
        Ok(End {
            node,
            port: pl.port,
            mac: port.mac.0,
            addr: pl.addr(f),
            gateway: gateway.0,
        })
    }

    fn conn(&mut self, cx: &StepContext<'_>, p: &Probe) -> Result<Conn, String> {
        let proto = match (p.proto, p.family) {
            (PROTO_ICMP, Family::V6) => 58,
            (x, _) => x,
        };
        Ok(Conn {
            probe: p.clone(),
            client: self.end(cx, &p.src, p.family)?,
            server: self.end(cx, &p.dst, p.family)?,
            proto,
            port: p.port,
        })
    }

    /// Fresh flow tables on every node: every connection after this is NEW.
    fn fresh_flows(&mut self) -> Result<(), String> {
        for n in &mut self.nodes {
            let t =
                FlowTable::in_memory(FLOWS).map_err(|e| format!("{}: flow table: {e}", n.name))?;
            n.pipe.set_flows(Arc::new(t), 0, 1, CtTimeouts::default());
        }
        Ok(())
    }

    /// Sends packet `k` of every connection of `conns` and follows each to where it ends.
    /// Every drop at node `n` must be for `reasons[n]` (none: no drop), and is attributed to a
    /// packet: the packets that did not leave a node are the ones it dropped.
    fn round(
        &mut self,
        conns: &[&Conn],
        k: Kind,
        reasons: &[Option<DropReason>],
    ) -> Result<Vec<Outcome>, String> {
        let what = format!("{k:?} round");
        let mut index: HashMap<Key, usize> = HashMap::with_capacity(conns.len());
        // Bursts per (node, receiving port), in the connections' order.
        let mut bursts: BTreeMap<(usize, PortId), Vec<VecBuf>> = BTreeMap::new();
        for (i, c) in conns.iter().enumerate() {
            if index.insert(c.key(k), i).is_some() {
                return Err(format!("{what}: two packets of {} look alike", c.probe));
            }
            let from = if k.by_client() { c.client } else { c.server };
            let buf = VecBuf::from_slice(&c.frame(k))
                .ok_or_else(|| format!("{what}: {}: the frame does not fit", c.probe))?;
            bursts.entry((from.node, from.port)).or_default().push(buf);
        }
        let mut crossed: HashMap<usize, usize> = HashMap::new(); // packet → node it crossed to
        let mut delivered: HashMap<usize, (usize, PortId, Vec<u8>)> = HashMap::new();
        let mut uplink: Vec<Vec<(PortId, Vec<u8>)>> = vec![Vec::new(); self.nodes.len()];
        for ((node, rx), mut pkts) in bursts {
            self.process(node, rx, &mut pkts);
        }
        for node in 0..self.nodes.len() {
            for (port, frame) in self.sent(node) {
                if port == PortId::UPLINK {
                    let to = self
                        .nodes
                        .iter()
                        .position(|n| frame.get(..6) == Some(&n.uplink_mac[..]))
                        .ok_or_else(|| {
                            format!(
                                "{what}: {} sent a frame on the uplink to no node",
                                self.nodes[node].name
                            )
                        })?;
                    let at = inner_offset(&frame)
                        .ok_or_else(|| format!("{what}: an uplink frame is not SRv6"))?;
                    let (key, _) = key_of(&frame, at)
                        .ok_or_else(|| format!("{what}: an uplink frame has no inner IP packet"))?;
                    let i = *index.get(&key).ok_or_else(|| {
                        format!("{what}: an unexpected packet {key:?} on the uplink")
                    })?;
                    crossed.insert(i, to);
                    uplink[to].push((PortId::UPLINK, frame));
                } else {
                    self.take_delivery(node, port, frame, &index, &mut delivered, &what)?;
                }
            }
        }
        for (node, frames) in uplink.into_iter().enumerate() {
            let mut pkts: Vec<VecBuf> = frames
                .iter()
                .filter_map(|(_, f)| VecBuf::from_slice(f))
                .collect();
            if pkts.is_empty() {
                continue;
            }
            self.process(node, PortId::UPLINK, &mut pkts);
            for (port, frame) in self.sent(node) {
                if port == PortId::UPLINK {
                    return Err(format!(
                        "{what}: {} sent a packet from the uplink back to it",
                        self.nodes[node].name
                    ));
                }
                self.take_delivery(node, port, frame, &index, &mut delivered, &what)?;
            }
        }
        let mut outcomes = Vec::with_capacity(conns.len());
        let mut dropped = vec![0u64; self.nodes.len()];
        for (i, c) in conns.iter().enumerate() {
            let to = if k.by_client() { c.server } else { c.client };
            let o = match delivered.get(&i) {
                Some((node, port, frame)) => {
                    if (*node, *port) != (to.node, to.port) || frame.get(..6) != Some(&to.mac[..]) {
                        return Err(format!(
                            "{what}: {}: delivered to port {} of {} (MAC {:02x?}), not to port {} of {}",
                            c.probe, port.0, self.nodes[*node].name, frame.get(..6), to.port.0,
                            self.nodes[to.node].name
                        ));
                    }
                    Outcome::Delivered
                }
                None => {
                    let from = if k.by_client() { c.client } else { c.server };
                    let at = crossed.get(&i).copied().unwrap_or(from.node);
                    dropped[at] += 1;
                    Outcome::DroppedAt(at)
                }
            };
            outcomes.push(o);
        }
        for ((node, n), reason) in self.nodes.iter_mut().enumerate().zip(reasons) {
            let counters = n.pipe.take_counters();
            n.reader.quiescent();
            let by_reason: Vec<String> = DropReason::ALL
                .iter()
                .filter(|r| counters.drop(**r) > 0)
                .map(|r| format!("{r}: {}", counters.drop(*r)))
                .collect();
            let expected = reason.map_or(0, |r| counters.drop(r));
            let reason = *reason;
            if counters.total_drops() != expected || expected != dropped[node] {
                return Err(format!(
                    "{what}: {} dropped [{}]; {} packets did not leave it{}",
                    n.name,
                    by_reason.join(", "),
                    dropped[node],
                    reason.map_or(" (no drop was expected)".to_owned(), |r| format!(
                        " (only {r} was expected, one per packet missing)"
                    ))
                ));
            }
        }
        Ok(outcomes)
    }

    fn process(&mut self, node: usize, rx: PortId, pkts: &mut Vec<VecBuf>) {
        let SimNode {
            reader, pipe, io, ..
        } = &mut self.nodes[node];
        let snap = reader.snapshot();
        while !pkts.is_empty() {
            pipe.process(&snap, rx, pkts, io);
        }
    }

    fn sent(&mut self, node: usize) -> Vec<(PortId, Vec<u8>)> {
        self.nodes[node]
            .io
            .sent
            .drain(..)
            .map(|(p, b)| (p, b.data().to_vec()))
            .collect()
    }

    /// A frame a node sent to a pod port: which packet it is, checked intact.
    fn take_delivery(
        &self,
        node: usize,
        port: PortId,
        frame: Vec<u8>,
        index: &HashMap<Key, usize>,
        delivered: &mut HashMap<usize, (usize, PortId, Vec<u8>)>,
        what: &str,
    ) -> Result<(), String> {
        let name = self.nodes[node].name;
        let (key, valid) = key_of(&frame, 14).ok_or_else(|| {
            format!(
                "{what}: {name} sent a frame without an IP packet to port {}",
                port.0
            )
        })?;
        let i = *index.get(&key).ok_or_else(|| {
            format!(
                "{what}: {name} sent an unexpected packet {key:?} to port {}",
                port.0
            )
        })?;
        if !valid {
            return Err(format!(
                "{what}: {key:?} arrived at port {} with a bad checksum",
                port.0
            ));
        }
        if delivered.insert(i, (node, port, frame)).is_some() {
            return Err(format!("{what}: {key:?} arrived twice"));
        }
        Ok(())
    }

    /// Decides every probe of the step between two different pods by the pipelines (after
    /// cutting or keeping the connections the previous step established) and compares with the
    /// evaluator's verdicts.
    pub fn step(&mut self, cx: &StepContext<'_>) -> Result<PipelineChecked, String> {
        let mut out = PipelineChecked::default();
        let verdicts: HashMap<&Probe, Verdict> = cx.probes.iter().map(|(p, v)| (p, *v)).collect();
        let expect = |c: &Conn, v: &Verdict| {
            if !v.egress {
                Outcome::DroppedAt(c.client.node)
            } else if !v.ingress {
                Outcome::DroppedAt(c.server.node)
            } else {
                Outcome::Delivered
            }
        };
        let describe = |c: &Conn, o: Outcome| match o {
            Outcome::Delivered => "delivered".to_owned(),
            Outcome::DroppedAt(n) if n == c.client.node => {
                format!("dropped at the source's node {}", NODES[n])
            }
            Outcome::DroppedAt(n) => format!("dropped at the destination's node {}", NODES[n]),
        };
        // 1. The connections of the previous step that still join the same pods.
        let previous = std::mem::take(&mut self.established);
        let mut carried: Vec<(Conn, Verdict)> = Vec::new();
        for c in previous {
            let Some(v) = verdicts.get(&c.probe) else {
                continue;
            };
            if self.conn(cx, &c.probe).ok().as_ref() == Some(&c) {
                carried.push((c, *v));
            }
        }
        let refs: Vec<&Conn> = carried.iter().map(|(c, _)| c).collect();
        // A connection is in a node's flow table when the node tracked the network then; else
        // its next packet is NEW there.
        let reasons: Vec<Option<DropReason>> = self
            .tracked
            .iter()
            .map(|&t| {
                Some(if t {
                    DropReason::PolicyRevoked
                } else {
                    DropReason::PolicyDenied
                })
            })
            .collect();
        let got = self.round(&refs, Kind::Next, &reasons)?;
        for ((c, v), o) in carried.iter().zip(got) {
            let want = expect(c, v);
            if o != want {
                return Err(format!(
                    "{c}: an established connection, evaluator {v:?} now; pipeline: {}, expected {}",
                    describe(c, o),
                    describe(c, want),
                    c = c.probe
                ));
            }
            match o {
                Outcome::Delivered => out.survived += 1,
                Outcome::DroppedAt(n) if self.tracked[n] => out.revoked += 1,
                Outcome::DroppedAt(_) => out.cut_untracked += 1,
            }
        }
        // 2. Every probe between two pods, NEW.
        self.fresh_flows()?;
        let mut conns: Vec<(Conn, Verdict)> = Vec::new();
        for (p, v) in cx.probes {
            if matches!((&p.src, &p.dst), (Party::Pod(s), Party::Pod(d)) if s != d) {
                conns.push((self.conn(cx, p)?, *v));
            }
        }
        let refs: Vec<&Conn> = conns.iter().map(|(c, _)| c).collect();
        let denied = vec![Some(DropReason::PolicyDenied); self.nodes.len()];
        let got = self.round(&refs, Kind::Open, &denied)?;
        let mut open: Vec<&Conn> = Vec::new();
        for ((c, v), o) in conns.iter().zip(got) {
            let want = expect(c, v);
            if o != want {
                return Err(format!(
                    "{}: evaluator {v:?}, pipeline: {}, expected {}",
                    c.probe,
                    describe(c, o),
                    describe(c, want)
                ));
            }
            out.probes += 1;
            if o == Outcome::Delivered {
                out.allowed += 1;
                open.push(c);
            }
        }
        // 3. Their replies, whatever the policies say about that direction.
        let none = vec![None; self.nodes.len()];
        let got = self.round(&open, Kind::Reply, &none)?;
        if let Some((c, o)) = open
            .iter()
            .zip(&got)
            .find(|(_, o)| **o != Outcome::Delivered)
        {
            return Err(format!(
                "{}: the reply of an allowed connection was {}",
                c.probe,
                describe(c, *o)
            ));
        }
        out.replies += got.len();
        // 4. TCP's handshake completes.
        let tcp: Vec<&Conn> = open
            .iter()
            .copied()
            .filter(|c| c.proto == PROTO_TCP)
            .collect();
        let got = self.round(&tcp, Kind::Ack, &none)?;
        if let Some((c, o)) = tcp
            .iter()
            .zip(&got)
            .find(|(_, o)| **o != Outcome::Delivered)
        {
            return Err(format!(
                "{}: the handshake's ACK was {}",
                c.probe,
                describe(c, *o)
            ));
        }
        self.established = open.into_iter().cloned().collect();
        for (n, t) in self.nodes.iter_mut().zip(&mut self.tracked) {
            *t = n
                .reader
                .snapshot()
                .network(NETWORK_ID)
                .and_then(|v| v.info())
                .is_some_and(|i| i.stateful);
            n.reader.quiescent();
        }
        Ok(out)
    }
}
