//! The forwarding pipeline: bursts of packets through a graph of nodes.
//!
//! A worker hands each received burst to [`Pipeline::process`] together with a table
//! [`Snapshot`] and an [`Io`] (its transmit buffers and mempool). Packets move through nodes as
//! vectors, as in VPP and grout: a node is a function over its **whole vector** — the loop over
//! packets is inside the node, so its code, its table lines and the per-call lookups it caches
//! stay hot — that queues each packet for one of the next nodes it declares ([`Stage::next`]).
//! The dispatcher calls nodes, never per-packet match arms: it always runs the lowest-numbered
//! node with packets queued, so the graph may loop (an ICMP error is routed again). Terminal
//! nodes transmit ([`Io::send`]) or drop with a [`DropReason`]. Every node counts the packets it
//! handled, every drop is counted by reason ([`Counters`]).
//!
//! ```text
//!  pod-input ──┬─ arp-reply ─────────────────────────────────────────────┐
//!              ├─ nd-reply / icmp-echo (gateway) ─────────────────────────┤
//!              ├─ l2-learn (announcements, from arp-reply / nd-reply too) ─┤──► (consumed)
//!              ├─ ip4-lookup / ip6-lookup ─┬─ local-rewrite ──────────────┤──► tx
//!              │        ▲                  ├─ srv6-encap ─ underlay-out ──┤
//!              │        │                  ├─ conntrack ─┬─ local-rewrite │
//!              │        └─ (DNAT: again) ──┼─────────────┴─ srv6-encap    │
//!              │                           └─ icmp-error ─► ip*-lookup    │
//!              └─ l2-forward / l2-flood ─┬─ (local port) ─────────────────┤
//!                                        └─ l2-encap ─ underlay-out ──────┘
//!  uplink-input ─┬─ nd-reply / arp-reply / icmp-echo
//!                ├─ srv6-decap ─► ip*-lookup                (End.DT46)
//!                ├─ l2-decap ─► l2-forward / l2-flood       (End.DT2U / End.DT2M)
//!                └─ ip*-lookup                               (plain: its external network)
//! ```
//!
//! **External networks** (ADR 0054): a plain IP packet from the uplink to the node's MAC that
//! is not for the node itself belongs to the external network whose prefixes hold its source
//! (the longest match across the external networks of its 802.1Q VLAN, or the untagged ones:
//! [`NetworkId::external_sources`]) and is looked up in that network's FIB like any of its
//! packets; no match is a counted drop. Its tag is popped on the way in and pushed again on
//! what leaves on a VLAN (`vlan.rs`).
//!
//! **l2 networks** are bridged: a frame from a pod to another MAC than the gateway's is looked
//! up in the network's FDB (`l2-forward`) and delivered unchanged to a local port or
//! encapsulated whole (`H.Encaps.L2.Red`, next header 143) to the remote node's End.DT2U SID;
//! broadcast and multicast are replicated head-end (`l2-flood`) to the flood list, within the
//! source endpoint's BUM limit. ARP and NDP (any destination MAC) are answered from the
//! network's neighbor table or consumed, never bridged. Frames from the underlay are delivered
//! to local ports only (split horizon). Frames to the gateway's MAC take the IP path, as on an
//! l3 network. On a network with learning (ADR 0019) a port may also send from a MAC the FDB
//! places on it, announcements (gratuitous ARP, unsolicited NA, RARP) are reported to control
//! (`l2-learn`, [`Io::learn`]) — the only way a port may speak for a MAC that is not its own —
//! and unknown unicast is flooded.
//!
//! **Connection tracking** (`conntrack`, ADR 0025): packets of networks that have NetworkPolicy,
//! Services or one-way routing paths (`stateful` in the tables) go through the flow table
//! after their lookup — once in the zone of the local pod that sent them (egress), once in
//! the zone of the local pod they go to (ingress). A NEW connection is classified there (policy,
//! Service DNAT, one-way paths); every later packet is one lookup in the flow table. A
//! translated packet goes back to the lookup for its backend. Other networks never touch it.
//!
//! **The whole-burst fast path.** A burst arrives from one port, and in the common case every
//! packet of it takes the same path (one pod talking to one remote node, or one remote node
//! sending to one network). The nodes are written for that case: the receiving port's record
//! and network are resolved once per vector, the FIB is queried in bulk per run of packets of
//! one network (`route4_bulk` / `route6_bulk`), a next hop is decoded once per run of packets
//! that share it, the encapsulation rewrite and the underlay neighbor once per run of packets
//! to one remote node — and when all packets of a vector go to the same next node, the vector
//! is handed over whole instead of packet by packet ([`Queues::forward`]). A mixed burst takes
//! the same nodes and pays only for its changes of path.
//!
//! Every packet in an IP node has its Ethernet header at offset 0 and the IP header at 14:
//! decapsulation leaves 14 bytes in front of the inner packet for the delivery header, and
//! encapsulation prepends 40 bytes so the outer Ethernet and IPv6 headers take the front.
//! Headers are read and written through the [`crate::wire`] views only. Replies (ARP, NDP,
//! echo, ICMP errors) are built in the buffer they answer: no allocation.
//!
//! The pipeline never panics on packet contents: every view is length-checked first, and the
//! fuzz target `pipeline` feeds it arbitrary frames on every kind of port. In debug builds
//! (tests, fuzzing) every hand-over between nodes is checked against the declared graph.

mod bridge;
mod buf;
mod cache;
mod ct;
pub mod fixture;
mod gateway;
mod input;
mod learn;
mod lookup;
mod neigh;
mod reply;
pub mod sim;
mod srv6;
#[cfg(test)]
mod tests;
mod vlan;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use lace_shared::fib::LpmKey;
use lace_shared::learn::LearnEvent;
use lace_shared::status::{DropReason, MAX_STAGES};
use lace_shared::tables::Snapshot;
use lace_shared::types::{MacAddr, NetworkId, PortId};

pub use buf::{PacketBuf, VecBuf, VEC_CAPACITY, VEC_HEADROOM};
pub use ct::CtTimeouts;
pub use neigh::{Neighbor, UnderlayNeighbors};

use cache::{Cx, Hop, Memo};

/// What the pipeline needs to know about its node that is not in the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The uplink's MAC (source of underlay frames, answered in NDP).
    pub uplink_mac: MacAddr,
    /// The node's underlay IPv6 address: answered for NS and echo on the uplink.
    pub underlay_addr: Ipv6Addr,
    /// Outer hop limit of encapsulated packets.
    pub hop_limit: u8,
    /// The underlay MTU (IPv6 packet size the uplink carries); inner packets larger than this
    /// minus 40 bytes get ICMP too-big.
    pub underlay_mtu: u16,
    /// Seed of the outer flow-label hash.
    pub flow_seed: u64,
    /// The node's own addresses on external networks it reaches through the uplink: answered
    /// for ARP / NDP and echo there, as the underlay address is (ADR 0054).
    pub uplink_hosts: UplinkHosts,
}

/// The node's own addresses on the uplink besides its underlay address (ADR 0054), each on an
/// 802.1Q VLAN (0: untagged) with its subnet's prefix length, at most [`UplinkHosts::MAX`] per
/// address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UplinkHosts {
    v4: [Ipv4Addr; UplinkHosts::MAX],
    len4: [u8; UplinkHosts::MAX],
    vlan4: [u16; UplinkHosts::MAX],
    n4: usize,
    v6: [Ipv6Addr; UplinkHosts::MAX],
    len6: [u8; UplinkHosts::MAX],
    vlan6: [u16; UplinkHosts::MAX],
    n6: usize,
}

/// One address of the node's on the uplink: its VLAN (0: untagged), the address, its subnet's
/// prefix length.
pub type UplinkAddress = (u16, IpAddr, u8);

impl UplinkHosts {
    /// Addresses per address family.
    pub const MAX: usize = 8;
    /// No address: the uplink carries the underlay only.
    pub const NONE: UplinkHosts = UplinkHosts {
        v4: [Ipv4Addr::UNSPECIFIED; UplinkHosts::MAX],
        len4: [0; UplinkHosts::MAX],
        vlan4: [0; UplinkHosts::MAX],
        n4: 0,
        v6: [Ipv6Addr::UNSPECIFIED; UplinkHosts::MAX],
        len6: [0; UplinkHosts::MAX],
        vlan6: [0; UplinkHosts::MAX],
        n6: 0,
    };

    /// `addrs`; `None` when one family has more than [`UplinkHosts::MAX`].
    pub fn new(addrs: &[UplinkAddress]) -> Option<UplinkHosts> {
        let mut h = UplinkHosts::NONE;
        for &(vlan, a, len) in addrs {
            match a {
                IpAddr::V4(a) => {
                    *h.v4.get_mut(h.n4)? = a;
                    h.len4[h.n4] = len.min(32);
                    h.vlan4[h.n4] = vlan;
                    h.n4 += 1;
                }
                IpAddr::V6(a) => {
                    *h.v6.get_mut(h.n6)? = a;
                    h.len6[h.n6] = len.min(128);
                    h.vlan6[h.n6] = vlan;
                    h.n6 += 1;
                }
            }
        }
        Some(h)
    }

    /// The address the node speaks from to `peer` on VLAN `vlan` of the uplink (an ARP
    /// request, a neighbor solicitation): the one whose subnet holds it ([`Self::on_subnet`]),
    /// else the family's first there; `None` when the node has no address of the family
    /// there. `peer` is IPv4-mapped for IPv4.
    pub fn source_for(&self, vlan: u16, peer: Ipv6Addr) -> Option<IpAddr> {
        self.on_subnet(vlan, peer).or(match peer.to_ipv4_mapped() {
            Some(_) => self.addrs4(vlan).next().map(|(a, _)| IpAddr::V4(a)),
            None => self.addrs6(vlan).next().map(|(a, _)| IpAddr::V6(a)),
        })
    }

    /// The node's address on VLAN `vlan` whose subnet holds `peer` (IPv4-mapped for IPv4), if
    /// any.
    pub fn on_subnet(&self, vlan: u16, peer: Ipv6Addr) -> Option<IpAddr> {
        match peer.to_ipv4_mapped() {
            Some(p) => self
                .addrs4(vlan)
                .find(|&(a, len)| u32::from(a).same_prefix(u32::from(p), u32::from(len)))
                .map(|(a, _)| IpAddr::V4(a)),
            None => self
                .addrs6(vlan)
                .find(|&(a, len)| u128::from(a).same_prefix(u128::from(peer), u32::from(len)))
                .map(|(a, _)| IpAddr::V6(a)),
        }
    }

    /// The node's IPv4 addresses on VLAN `vlan`, with their prefix lengths.
    fn addrs4(&self, vlan: u16) -> impl Iterator<Item = (Ipv4Addr, u8)> + '_ {
        (0..self.n4)
            .filter(move |&i| self.vlan4[i] == vlan)
            .map(|i| (self.v4[i], self.len4[i]))
    }

    /// The node's IPv6 addresses on VLAN `vlan`, with their prefix lengths.
    fn addrs6(&self, vlan: u16) -> impl Iterator<Item = (Ipv6Addr, u8)> + '_ {
        (0..self.n6)
            .filter(move |&i| self.vlan6[i] == vlan)
            .map(|i| (self.v6[i], self.len6[i]))
    }

    /// Whether the node has IPv4 addresses on the uplink, on any VLAN (ARP and IPv4 are taken
    /// there).
    #[inline]
    pub fn any4(&self) -> bool {
        self.n4 != 0
    }

    /// Whether `a` is one of the node's IPv4 addresses on VLAN `vlan` of the uplink.
    #[inline]
    pub fn has4(&self, vlan: u16, a: Ipv4Addr) -> bool {
        self.addrs4(vlan).any(|(x, _)| x == a)
    }

    /// Whether the node has IPv6 addresses on the uplink besides the underlay's, on any VLAN
    /// (plain IPv6 from outside is routed there).
    #[inline]
    pub fn any6(&self) -> bool {
        self.n6 != 0
    }

    /// Whether `a` is one of the node's IPv6 addresses on VLAN `vlan` of the uplink, besides
    /// the underlay's.
    #[inline]
    pub fn has6(&self, vlan: u16, a: Ipv6Addr) -> bool {
        self.addrs6(vlan).any(|(x, _)| x == a)
    }

    /// Whether the node has an address on tagged VLAN `vlan` (a frame tagged with another is
    /// an `unknown-vlan` drop).
    #[inline]
    pub fn on_vlan(&self, vlan: u16) -> bool {
        vlan != 0
            && (self.vlan4[..self.n4].contains(&vlan) || self.vlan6[..self.n6].contains(&vlan))
    }
}

/// What the pipeline asks of the worker that runs it.
pub trait Io<B: PacketBuf> {
    /// Queues `pkt` for transmission on `port`. The worker buffers and drains; a packet the NIC
    /// refuses is freed and counted by the worker ([`DropReason::TxRefused`]).
    fn send(&mut self, port: PortId, pkt: B);
    /// Whether `port` is plugged and can take packets (else [`DropReason::PortDown`]).
    fn port_up(&self, port: PortId) -> bool;
    /// A fresh, empty buffer for a packet the pipeline originates (neighbor solicitations).
    fn alloc(&mut self) -> Option<B>;
    /// A monotonic clock in nanoseconds (rate limits of generated packets and of BUM frames).
    fn now_ns(&self) -> u64;
    /// Reports what an l2 network with learning saw to control (the worker's learn ring).
    /// Never blocks: a full ring loses its oldest reports.
    fn learn(&mut self, event: &LearnEvent);
}

/// The pipeline's nodes, in the order the dispatcher visits them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Stage {
    /// Packets from a pod port: Ethernet checks, anti-spoofing, classification.
    PodInput = 0,
    /// Packets from the uplink: IPv6 to this node or to a local SID.
    UplinkInput,
    /// ARP requests for a gateway, answered in place.
    ArpReply,
    /// Neighbor solicitations (pod side for the gateway, uplink side for the underlay
    /// address) answered in place; advertisements on the uplink learned.
    NdReply,
    /// ICMP / ICMPv6 echo requests to a gateway or the underlay address, answered in place.
    IcmpEcho,
    /// l2 announcements (gratuitous ARP, unsolicited NA, RARP): reported to control on a
    /// learning network, then consumed.
    L2Learn,
    /// End.DT46: strip the outer IPv6 (and SRH), continue in the SID's network.
    Srv6Decap,
    /// End.DT2U / End.DT2M: strip the outer IPv6 (and SRH) down to the inner Ethernet frame
    /// of the SID's l2 network.
    L2Decap,
    /// l2 broadcast and multicast: head-end replication to the network's flood list (local
    /// ports and, for frames from a local port, the other nodes' End.DT2M SIDs).
    L2Flood,
    /// l2 unicast: FDB lookup of the destination MAC → a local port or a remote node.
    L2Forward,
    /// IPv4 FIB lookup in the packet's network, TTL check.
    Ip4Lookup,
    /// IPv6 FIB lookup in the packet's network, hop-limit check.
    Ip6Lookup,
    /// Connection tracking: NetworkPolicy on NEW connections, Service DNAT and its reverse,
    /// one-way paths, ICMP errors matched to their connection.
    Conntrack,
    /// Generates ICMP time-exceeded, unreachable and too-big in place, then routes them.
    IcmpError,
    /// Same node: TTL decrement and L2 rewrite to the destination pod.
    LocalRewrite,
    /// Other node: H.Encaps.Red to that node's SID, from the precomputed rewrite.
    Srv6Encap,
    /// l2 frame to another node: H.Encaps.L2.Red (the whole frame, next header 143) to that
    /// node's End.DT2U SID, from the precomputed rewrite.
    L2Encap,
    /// Outer L2 for the underlay: the next hop's MAC, resolved by NDP.
    UnderlayOut,
    /// Transmit (terminal).
    Tx,
    /// Drop (terminal; counted per reason).
    Drop,
}

impl Stage {
    /// Number of stages.
    pub const COUNT: usize = 20;
    /// Every stage, in dispatch order.
    pub const ALL: [Stage; Stage::COUNT] = [
        Stage::PodInput,
        Stage::UplinkInput,
        Stage::ArpReply,
        Stage::NdReply,
        Stage::IcmpEcho,
        Stage::L2Learn,
        Stage::Srv6Decap,
        Stage::L2Decap,
        Stage::L2Flood,
        Stage::L2Forward,
        Stage::Ip4Lookup,
        Stage::Ip6Lookup,
        Stage::Conntrack,
        Stage::IcmpError,
        Stage::LocalRewrite,
        Stage::Srv6Encap,
        Stage::L2Encap,
        Stage::UnderlayOut,
        Stage::Tx,
        Stage::Drop,
    ];

    /// The stage's name (counters, `stats`).
    pub const fn name(self) -> &'static str {
        match self {
            Stage::PodInput => "pod-input",
            Stage::UplinkInput => "uplink-input",
            Stage::ArpReply => "arp-reply",
            Stage::NdReply => "nd-reply",
            Stage::IcmpEcho => "icmp-echo",
            Stage::L2Learn => "l2-learn",
            Stage::Srv6Decap => "srv6-decap",
            Stage::L2Decap => "l2-decap",
            Stage::L2Flood => "l2-flood",
            Stage::L2Forward => "l2-forward",
            Stage::Ip4Lookup => "ip4-lookup",
            Stage::Ip6Lookup => "ip6-lookup",
            Stage::Conntrack => "conntrack",
            Stage::IcmpError => "icmp-error",
            Stage::LocalRewrite => "local-rewrite",
            Stage::Srv6Encap => "srv6-encap",
            Stage::L2Encap => "l2-encap",
            Stage::UnderlayOut => "underlay-out",
            Stage::Tx => "tx",
            Stage::Drop => "drop",
        }
    }

    /// The nodes a packet can go to from this one: the graph's edges. Debug builds check every
    /// hand-over against it, and a packet test drives every edge.
    pub const fn next(self) -> &'static [Stage] {
        use Stage::*;
        match self {
            PodInput => &[
                ArpReply, NdReply, IcmpEcho, L2Learn, L2Flood, L2Forward, Ip4Lookup, Ip6Lookup,
                Drop,
            ],
            UplinkInput => &[
                ArpReply, NdReply, IcmpEcho, Srv6Decap, L2Decap, Ip4Lookup, Ip6Lookup, Drop,
            ],
            ArpReply | NdReply => &[L2Learn, Tx, Drop],
            L2Learn => &[Drop],
            IcmpEcho => &[Ip4Lookup, Ip6Lookup, Tx, Drop],
            Srv6Decap => &[Ip4Lookup, Ip6Lookup, Drop],
            L2Decap => &[L2Flood, L2Forward, Drop],
            L2Flood => &[L2Encap, Tx],
            L2Forward => &[L2Flood, L2Encap, Tx, Drop],
            Ip4Lookup | Ip6Lookup => &[
                LocalRewrite,
                Srv6Encap,
                Conntrack,
                IcmpEcho,
                IcmpError,
                Drop,
            ],
            Conntrack => &[
                LocalRewrite,
                Srv6Encap,
                Ip4Lookup,
                Ip6Lookup,
                IcmpError,
                Drop,
            ],
            IcmpError => &[Ip4Lookup, Ip6Lookup, Drop],
            LocalRewrite => &[Tx, IcmpError, Drop],
            Srv6Encap => &[UnderlayOut, IcmpError, Drop],
            L2Encap => &[UnderlayOut, Drop],
            UnderlayOut => &[Tx, Drop],
            Tx | Drop => &[],
        }
    }

    /// Names of all stages, in counter order (for the status region).
    pub fn names() -> [&'static str; Stage::COUNT] {
        Stage::ALL.map(Stage::name)
    }
}

const _: () = assert!(Stage::COUNT <= MAX_STAGES && Stage::COUNT <= 32);

/// Counters one pipeline (one worker) accumulates; the worker adds them to the status region
/// and resets them ([`Pipeline::take_counters`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    /// Packets handled per stage, indexed by `Stage as usize`.
    pub stages: [u64; Stage::COUNT],
    /// Drops per reason, indexed by `DropReason as usize`.
    pub drops: [u64; DropReason::COUNT],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            stages: [0; Stage::COUNT],
            drops: [0; DropReason::COUNT],
        }
    }
}

impl Counters {
    /// Packets a stage handled.
    pub fn stage(&self, s: Stage) -> u64 {
        self.stages[s as usize]
    }
    /// Drops of one reason.
    pub fn drop(&self, r: DropReason) -> u64 {
        self.drops[r as usize]
    }
    /// Total drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

/// Packets in flight per call: one vector.
pub const VEC_CAP: usize = 256;

/// Per-packet state carried between nodes.
#[derive(Debug, Clone, Copy)]
struct Meta {
    /// The network the packet is routed in.
    net: NetworkId,
    /// Port it arrived on.
    rx: PortId,
    /// Output port (Tx) once decided.
    tx: PortId,
    /// Where a lookup sent it (local-rewrite, srv6-encap, underlay-out).
    hop: Hop,
    /// ICMP error parameter: the MTU for too-big, the code for unreachable.
    param: u32,
    /// Drop reason (Drop), or ICMP error to generate (IcmpError).
    reason: DropReason,
    /// [`Meta::GENERATED`], [`Meta::CONSUMED`], [`Meta::CHECKED`], [`Meta::FLOOD`],
    /// [`Meta::TRACK_OUT`], [`Meta::TRACK_DONE`], [`Meta::REPLY_ONLY`], [`Meta::SERVICE`],
    /// [`Meta::FOREIGN`], [`Meta::LEARNED`].
    flags: u16,
    /// The uplink's 802.1Q VLAN (0: untagged): the one the packet arrived on, which an answer
    /// goes back on, until a route out of the uplink names the one it leaves on (`tx` pushes
    /// its tag).
    vlan: u16,
}

impl Meta {
    /// Generated by the forwarder (an echo reply, an ICMP error): no TTL decrement, never
    /// answered with an error.
    const GENERATED: u16 = 1;
    /// Taken in by the forwarder (a learned advertisement) or already counted: the drop node
    /// frees it without counting a drop.
    const CONSUMED: u16 = 2;
    /// The IP header at offset 14 was validated (lengths, checksum) and padding trimmed.
    const CHECKED: u16 = 4;
    /// Decapsulated at an End.DT2M SID: the inner frame is flooded (to local ports only).
    const FLOOD: u16 = 8;
    /// From a pod port of a stateful network: tracked in the sender's zone (egress).
    const TRACK_OUT: u16 = 16;
    /// The egress tracking is done (a translated packet routed again skips it).
    const TRACK_DONE: u16 = 32;
    /// Routed by a reply-only route: only a reply of a tracked connection may pass.
    const REPLY_ONLY: u16 = 64;
    /// Routed to a ClusterIP: conntrack picks a backend.
    const SERVICE: u16 = 128;
    /// l2 learning: from a pod port, with a source MAC that is neither the port's nor learned
    /// on it — only an announcement may pass.
    const FOREIGN: u16 = 256;
    /// l2 learning: from a pod port, with a source MAC the FDB places on that port (learned):
    /// forwarded, and reported as seen now and then.
    const LEARNED: u16 = 512;

    fn new(rx: PortId) -> Meta {
        Meta {
            net: NetworkId(0),
            rx,
            tx: rx,
            hop: Hop::None,
            param: 0,
            reason: DropReason::Malformed,
            flags: 0,
            vlan: 0,
        }
    }
    #[inline]
    fn is(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// `0, 1, …, 255`: the first vector of a call (packet `k` of the burst is in slot `k`).
const IDENTITY: [u8; VEC_CAP] = {
    let mut a = [0u8; VEC_CAP];
    let mut i = 0;
    while i < VEC_CAP {
        a[i] = i as u8;
        i += 1;
    }
    a
};

/// The nodes' input vectors (slot indices) and which of them hold packets.
#[derive(Debug)]
struct Queues {
    frames: [Vec<u8>; Stage::COUNT],
    /// Bit `s`: `frames[s]` is not empty.
    pending: u32,
    /// Bit `t` of `edges[s]`: a packet went from node `s` to node `t` (packet tests).
    #[cfg(test)]
    edges: [u32; Stage::COUNT],
}

impl Queues {
    fn new() -> Queues {
        Queues {
            frames: std::array::from_fn(|_| Vec::with_capacity(VEC_CAP)),
            pending: 0,
            #[cfg(test)]
            edges: [0; Stage::COUNT],
        }
    }

    /// Queues packet `i` for node `to`, handed over by node `from`.
    #[inline(always)]
    fn push(&mut self, from: Stage, to: Stage, i: u8) {
        self.edge(from, to);
        self.frames[to as usize].push(i);
        self.pending |= 1 << to as u32;
    }

    /// Hands a whole vector from node `from` to node `to`: the fast path when every packet of a
    /// vector takes the same way.
    #[inline(always)]
    fn forward(&mut self, from: Stage, to: Stage, frame: &[u8]) {
        if frame.is_empty() {
            return;
        }
        self.edge(from, to);
        self.frames[to as usize].extend_from_slice(frame);
        self.pending |= 1 << to as u32;
    }

    #[inline(always)]
    fn edge(&mut self, from: Stage, to: Stage) {
        debug_assert!(
            from.next().contains(&to),
            "{} hands a packet to {}, which is not one of its declared next nodes",
            from.name(),
            to.name()
        );
        #[cfg(test)]
        {
            self.edges[from as usize] |= 1 << to as u32;
        }
    }
}

/// What a node works with during one call: the packets, the queues, the per-call lookup cache,
/// the worker's I/O and the drop counters.
pub(crate) struct NodeCtx<'r, 's, 'a, B, I> {
    cfg: &'r Config,
    neigh: &'r UnderlayNeighbors,
    bufs: &'r mut [Option<B>; VEC_CAP],
    meta: &'r mut [Meta; VEC_CAP],
    q: &'r mut Queues,
    cx: Cx<'s, 'a>,
    io: &'r mut I,
    l2: &'r mut learn::L2State,
    drops: &'r mut [u64; DropReason::COUNT],
    stages: &'r mut [u64; Stage::COUNT],
    /// The connection tracker's per-worker state.
    ct: &'r mut ct::Tracker,
    /// The port every packet of this call arrived on.
    rx: PortId,
    /// The node running now (the `from` of every hand-over).
    at: Stage,
}

impl<B: PacketBuf, I: Io<B>> NodeCtx<'_, '_, '_, B, I> {
    /// The node for packet `i`'s verdict: its next node, or `drop` with the reason recorded.
    #[inline(always)]
    fn resolve(&mut self, i: u8, v: Verdict) -> Stage {
        match v {
            Ok(to) => to,
            Err(r) => self.drop_for(i, r),
        }
    }

    /// A slot in a vector that holds no packet (never happens: only `tx` and `drop` empty a
    /// slot, and they hand nothing on): freed by `drop` without being counted.
    #[cold]
    fn gone(&mut self, i: u8) -> Stage {
        self.meta[usize::from(i)].flags |= Meta::CONSUMED;
        Stage::Drop
    }

    /// Records `reason` as packet `i`'s drop reason; returns the drop node.
    #[inline]
    fn drop_for(&mut self, i: u8, reason: DropReason) -> Stage {
        self.meta[usize::from(i)].reason = reason;
        Stage::Drop
    }

    /// Packet `i` is to be answered with the ICMP error for `reason`: `icmp-error` — unless it
    /// is itself generated, then it is just dropped.
    #[inline]
    fn icmp_for(&mut self, i: u8, reason: DropReason, param: u32) -> Stage {
        let m = &mut self.meta[usize::from(i)];
        m.reason = reason;
        if m.is(Meta::GENERATED) {
            return Stage::Drop;
        }
        m.param = param;
        Stage::IcmpError
    }

    /// `count` packets went through `path` (this node first, then the nodes after it, in one
    /// loop: the fast path) and out: counted in each later node, and the edges noted.
    #[inline]
    fn through(&mut self, path: &[Stage], count: u64) {
        if count == 0 {
            return;
        }
        for w in path.windows(2) {
            self.q.edge(w[0], w[1]);
            self.stages[w[1] as usize] += count;
        }
    }

    /// The whole vector goes on to node `next`, run directly by this one (the fast path): the
    /// hand-over is noted, `next` counts the `count` packets and becomes the running node.
    #[inline]
    fn chain(&mut self, next: Stage, count: u64) {
        self.q.edge(self.at, next);
        self.stages[next as usize] += count;
        self.at = next;
    }

    /// Hands packet `i` alone to node `to` (a packet that leaves a fused loop).
    #[inline]
    fn send_on(&mut self, i: u8, to: Stage) {
        self.q.push(self.at, to, i);
    }

    /// Hands packets `slots[k]` to nodes `to[k]`: the whole vector at once when they all go the
    /// same way (the fast path), else one by one.
    #[inline(always)]
    fn hand_over(&mut self, slots: &[u8], to: &[Stage]) {
        let Some(&first) = to.first() else {
            return;
        };
        if to.iter().all(|&t| t == first) {
            self.q.forward(self.at, first, slots);
        } else {
            for (&i, &t) in slots.iter().zip(to) {
                self.q.push(self.at, t, i);
            }
        }
    }
}

/// A verdict for one packet: the next node, or a drop reason.
type Verdict = Result<Stage, DropReason>;

/// One worker's pipeline: its packet slots, node vectors, counters. Not shared.
#[derive(Debug)]
pub struct Pipeline<B: PacketBuf> {
    cfg: Config,
    neigh: Arc<UnderlayNeighbors>,
    bufs: Box<[Option<B>; VEC_CAP]>,
    meta: Box<[Meta; VEC_CAP]>,
    q: Queues,
    counters: Counters,
    ct: ct::Tracker,
    /// What the lookup cache keeps from call to call while the tables stay the same.
    memo: Memo,
    l2: Box<learn::L2State>,
}

impl<B: PacketBuf> Pipeline<B> {
    /// A pipeline for one worker. `neigh` is the node's underlay neighbor cache, shared by all
    /// workers. It tracks connections in a small flow table of its own until
    /// [`Pipeline::set_flows`] gives it the node's.
    pub fn new(cfg: Config, neigh: Arc<UnderlayNeighbors>) -> Pipeline<B> {
        Pipeline {
            cfg,
            neigh,
            bufs: Box::new(std::array::from_fn(|_| None)),
            meta: Box::new([Meta::new(PortId::UPLINK); VEC_CAP]),
            q: Queues::new(),
            counters: Counters::default(),
            ct: ct::Tracker::private(),
            memo: Memo::default(),
            l2: Box::new(learn::L2State::new()),
        }
    }

    /// Tracks connections in `flows`, the flow table every worker of the node shares, as
    /// worker `worker` of `workers` (its counter slot and the part of the table it sweeps),
    /// with `timeouts`.
    pub fn set_flows(
        &mut self,
        flows: Arc<lace_shared::flow::FlowTable>,
        worker: usize,
        workers: usize,
        timeouts: CtTimeouts,
    ) {
        self.ct = ct::Tracker::new(flows, worker, workers, timeouts);
    }

    /// Removes expired connections from this worker's part of the flow table, a slice at a
    /// time (call it between bursts; it returns quickly). `now_ns` is the pipeline's clock.
    pub fn sweep_flows(&mut self, now_ns: u64) -> u32 {
        self.ct.sweep(now_ns)
    }

    /// Keeps the uplink's neighbor cache fresh (call it between bursts; it returns at once but
    /// every 100 ms): probes neighbors unconfirmed for 30 s, and unresolves those that leave
    /// three probes unanswered ([`neigh::UnderlayNeighbors::maintain`]).
    pub fn maintain_neighbors<I: Io<B>>(&mut self, io: &mut I) {
        let cfg = &self.cfg;
        self.neigh.maintain(io.now_ns(), |who| {
            // A probe that finds no buffer is sent at the next interval.
            let _ = gateway::solicit(cfg, who, io);
        });
    }

    /// The flow table (shared by the node's workers).
    pub fn flows(&self) -> &Arc<lace_shared::flow::FlowTable> {
        self.ct.table()
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Returns the counters and starts again from zero.
    pub fn take_counters(&mut self) -> Counters {
        std::mem::take(&mut self.counters)
    }

    /// Counts a drop that happened outside the pipeline (the worker's refused transmits).
    pub fn count_drop(&mut self, r: DropReason, n: u64) {
        self.counters.drops[r as usize] += n;
    }

    /// Packets the fused established hit of the connection tracker took so far (packet tests).
    #[cfg(test)]
    fn fused_hits(&self) -> u64 {
        self.ct.fused
    }

    /// The node hand-overs that happened so far, as (from, to) pairs (packet tests).
    #[cfg(test)]
    fn edges_taken(&self) -> Vec<(Stage, Stage)> {
        let mut out = Vec::new();
        for from in Stage::ALL {
            for to in Stage::ALL {
                if self.q.edges[from as usize] & (1 << to as u32) != 0 {
                    out.push((from, to));
                }
            }
        }
        out
    }

    /// Runs the packets received on `rx` through the pipeline; `pkts` is drained (at most
    /// [`VEC_CAP`] packets per call; more stay in `pkts`). Each packet is transmitted through
    /// `io` or dropped and counted.
    pub fn process<I: Io<B>>(
        &mut self,
        snap: &Snapshot<'_>,
        rx: PortId,
        pkts: &mut Vec<B>,
        io: &mut I,
    ) {
        let first = if rx == PortId::UPLINK {
            Stage::UplinkInput
        } else {
            Stage::PodInput
        };
        let take = pkts.len().min(VEC_CAP);
        if take == 0 {
            return;
        }
        // Every slot is free between calls: packet k of the burst takes slot k. Its `Meta` is
        // written by the input node, and only for packets that leave the input node's fused
        // path: a packet carried from input to tx in one loop never needs one.
        for (k, pkt) in pkts.drain(..take).enumerate() {
            self.bufs[k] = Some(pkt);
        }
        self.q.frames[first as usize].extend_from_slice(&IDENTITY[..take]);
        self.q.pending |= 1 << first as u32;
        self.dispatch(snap, rx, io);
    }

    /// Runs the lowest-numbered node with packets queued until every vector is empty. Each
    /// node runs over its whole vector; packets are edited in their slots.
    fn dispatch<I: Io<B>>(&mut self, snap: &Snapshot<'_>, rx: PortId, io: &mut I) {
        let mut n = NodeCtx {
            cfg: &self.cfg,
            neigh: &self.neigh,
            bufs: &mut self.bufs,
            meta: &mut self.meta,
            q: &mut self.q,
            cx: Cx::new(snap, std::mem::take(&mut self.memo)),
            io,
            l2: &mut self.l2,
            drops: &mut self.counters.drops,
            stages: &mut self.counters.stages,
            ct: &mut self.ct,
            rx,
            at: Stage::PodInput,
        };
        while n.q.pending != 0 {
            let s = n.q.pending.trailing_zeros() as usize;
            n.q.pending &= !(1 << s);
            let mut frame = std::mem::take(&mut n.q.frames[s]);
            let stage = Stage::ALL[s];
            n.at = stage;
            // Counted here; a fast path that carries packets through later nodes itself counts
            // them there (`NodeCtx::through`).
            n.stages[s] += frame.len() as u64;
            match stage {
                Stage::PodInput => input::pod_input(&mut n, &frame),
                Stage::UplinkInput => input::uplink_input(&mut n, &frame),
                Stage::ArpReply => reply::arp_reply(&mut n, &frame),
                Stage::NdReply => reply::nd_reply(&mut n, &frame),
                Stage::IcmpEcho => reply::icmp_echo(&mut n, &frame),
                Stage::L2Learn => learn::l2_learn(&mut n, &frame),
                Stage::Srv6Decap => srv6::decap(&mut n, &frame),
                Stage::L2Decap => srv6::l2_decap(&mut n, &frame),
                Stage::L2Flood => bridge::flood(&mut n, &frame),
                Stage::L2Forward => bridge::forward(&mut n, &frame),
                Stage::Ip4Lookup => lookup::ip4_lookup(&mut n, &frame),
                Stage::Ip6Lookup => lookup::ip6_lookup(&mut n, &frame),
                Stage::Conntrack => ct::conntrack(&mut n, &frame),
                Stage::IcmpError => reply::icmp_error(&mut n, &frame),
                Stage::LocalRewrite => lookup::local_rewrite(&mut n, &frame),
                Stage::Srv6Encap => srv6::encap(&mut n, &frame),
                Stage::L2Encap => srv6::l2_encap(&mut n, &frame),
                Stage::UnderlayOut => srv6::underlay_out(&mut n, &frame),
                Stage::Tx => tx(&mut n, &frame),
                Stage::Drop => drop_node(&mut n, &frame),
            }
            frame.clear();
            // Give the vector's allocation back (no node hands packets to itself, so its queue
            // is still empty): no node ever allocates.
            n.q.frames[s] = frame;
        }
        self.memo = n.cx.into_memo();
    }
}

/// `tx`: hands each packet to the worker for its output port.
fn tx<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    for &i in frame {
        let k = usize::from(i);
        let Some(pkt) = n.bufs[k].take() else {
            continue;
        };
        let Meta { tx, vlan, .. } = n.meta[k];
        if vlan != 0 && tx == PortId::UPLINK {
            if let Err(why) = vlan::send(n.io, pkt, vlan) {
                n.drops[why as usize] += 1;
            }
        } else {
            n.io.send(tx, pkt);
        }
    }
}

/// `drop`: frees each packet and counts it under its reason (unless already counted).
fn drop_node<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    for &i in frame {
        let k = usize::from(i);
        let m = &n.meta[k];
        if !m.is(Meta::CONSUMED) {
            n.drops[m.reason as usize] += 1;
        }
        n.bufs[k] = None;
    }
}
