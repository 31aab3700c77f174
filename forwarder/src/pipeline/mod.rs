//! The forwarding pipeline: bursts of packets through a graph of stages.
//!
//! A worker hands each received burst to [`Pipeline::process`] together with a table
//! [`Snapshot`] and an [`Io`] (its transmit buffers and mempool). Packets move through stages
//! as vectors, as in VPP: each [`Stage`] takes every packet queued for it, handles them one
//! after another (so its code and table lines stay hot) and queues each for a named next
//! stage. Terminal stages transmit ([`Io::send`]) or drop with a [`DropReason`]. Every stage
//! counts the packets it handled, and every drop is counted by reason ([`Counters`]).
//!
//! ```text
//!  pod-input ──┬─ arp-reply ─────────────────────────────────────────────┐
//!              ├─ nd-reply / icmp-echo (gateway) ─────────────────────────┤
//!              └─ ip4-lookup / ip6-lookup ─┬─ local-rewrite ──────────────┤──► tx
//!  uplink-input ─┬─ underlay-nd / echo     ├─ srv6-encap ─ underlay-out ──┘
//!                └─ srv6-decap ────────────┘   icmp-error ─► ip*-lookup
//! ```
//!
//! Every packet in an IP stage has its Ethernet header at offset 0 and the IP header at 14:
//! decapsulation leaves 14 bytes in front of the inner packet for the delivery header, and
//! encapsulation prepends 40 bytes so the outer Ethernet and IPv6 headers take the front.
//! Replies (ARP, NDP, echo, ICMP errors) are built in the buffer they answer: no allocation.
//!
//! The pipeline never panics on packet contents: every view is length-checked first, and the
//! fuzz target `pipeline` feeds it arbitrary frames on every kind of port.

mod buf;
pub mod fixture;
mod ip;
mod neigh;
mod reply;
mod srv6;
#[cfg(test)]
mod tests;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use lace_shared::status::{DropReason, MAX_STAGES};
use lace_shared::tables::Snapshot;
use lace_shared::types::{MacAddr, NetworkId, PortId};

pub use buf::{PacketBuf, VecBuf, VEC_CAPACITY, VEC_HEADROOM};
pub use neigh::UnderlayNeighbors;

/// What the pipeline needs to know about its node that is not in the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The uplink's MAC (source of underlay frames, answered in NDP).
    pub uplink_mac: MacAddr,
    /// The node's underlay IPv6 address: answered for NS and echo on the uplink.
    pub underlay_addr: Ipv6Addr,
    /// Outer source address of encapsulated packets (usually `underlay_addr`).
    pub encap_source: Ipv6Addr,
    /// Outer hop limit of encapsulated packets.
    pub hop_limit: u8,
    /// The underlay MTU (IPv6 packet size the uplink carries); inner packets larger than this
    /// minus 40 bytes get ICMP too-big.
    pub underlay_mtu: u16,
    /// Seed of the outer flow-label hash.
    pub flow_seed: u64,
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
    /// A monotonic clock in nanoseconds (rate limits of generated packets).
    fn now_ns(&self) -> u64;
}

/// The pipeline's stages, in the order the dispatcher visits them.
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
    /// End.DT46: strip the outer IPv6 (and SRH), continue in the SID's network.
    Srv6Decap,
    /// IPv4 FIB lookup in the packet's network, TTL check.
    Ip4Lookup,
    /// IPv6 FIB lookup in the packet's network, hop-limit check.
    Ip6Lookup,
    /// Generates ICMP time-exceeded, unreachable and too-big in place, then routes them.
    IcmpError,
    /// Same node: TTL decrement and L2 rewrite to the destination pod.
    LocalRewrite,
    /// Other node: H.Encaps.Red to that node's SID.
    Srv6Encap,
    /// Outer L2 for the underlay: resolve the next hop by NDP.
    UnderlayOut,
    /// Transmit (terminal).
    Tx,
    /// Drop (terminal; counted per reason).
    Drop,
}

impl Stage {
    /// Number of stages.
    pub const COUNT: usize = 14;
    /// Every stage, in dispatch order.
    pub const ALL: [Stage; Stage::COUNT] = [
        Stage::PodInput,
        Stage::UplinkInput,
        Stage::ArpReply,
        Stage::NdReply,
        Stage::IcmpEcho,
        Stage::Srv6Decap,
        Stage::Ip4Lookup,
        Stage::Ip6Lookup,
        Stage::IcmpError,
        Stage::LocalRewrite,
        Stage::Srv6Encap,
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
            Stage::Srv6Decap => "srv6-decap",
            Stage::Ip4Lookup => "ip4-lookup",
            Stage::Ip6Lookup => "ip6-lookup",
            Stage::IcmpError => "icmp-error",
            Stage::LocalRewrite => "local-rewrite",
            Stage::Srv6Encap => "srv6-encap",
            Stage::UnderlayOut => "underlay-out",
            Stage::Tx => "tx",
            Stage::Drop => "drop",
        }
    }

    /// The stages a packet can go to from this one (the graph's edges, for documentation,
    /// `lace-forwarder stages` and the tests that check every edge is taken).
    pub const fn next(self) -> &'static [Stage] {
        use Stage::*;
        match self {
            PodInput => &[ArpReply, NdReply, IcmpEcho, Ip4Lookup, Ip6Lookup, Drop],
            UplinkInput => &[NdReply, IcmpEcho, Srv6Decap, Drop],
            ArpReply | NdReply | IcmpEcho => &[Tx, Drop],
            Srv6Decap => &[Ip4Lookup, Ip6Lookup, Drop],
            Ip4Lookup | Ip6Lookup => &[LocalRewrite, Srv6Encap, IcmpEcho, IcmpError, Drop],
            IcmpError => &[Ip4Lookup, Ip6Lookup, Drop],
            LocalRewrite => &[Tx, Drop],
            Srv6Encap => &[UnderlayOut, IcmpError, Drop],
            UnderlayOut => &[Tx, Drop],
            Tx | Drop => &[],
        }
    }

    /// Names of all stages, in counter order (for the status region).
    pub fn names() -> [&'static str; Stage::COUNT] {
        Stage::ALL.map(Stage::name)
    }
}

const _: () = assert!(Stage::COUNT <= MAX_STAGES);

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

/// Per-packet state carried between stages.
#[derive(Debug, Clone, Copy)]
struct Meta {
    /// The network the packet is routed in.
    net: NetworkId,
    /// Port it arrived on.
    rx: PortId,
    /// Output port (Tx) once decided.
    tx: PortId,
    /// Drop reason (Drop), or ICMP error to generate (IcmpError).
    reason: DropReason,
    /// ICMP error parameter: the MTU for too-big, the code for unreachable.
    param: u32,
    /// Routing result for the rewrite/encap stages: destination MAC or SID index.
    hop: Hop,
    /// Generated by the forwarder (an ICMP error): never answered with another error.
    generated: bool,
    /// Gateway MAC of `net` (source MAC of deliveries).
    gw_mac: MacAddr,
    /// Taken in by the forwarder (a learned advertisement), or already counted: the drop
    /// stage frees it without counting a drop.
    consumed: bool,
    /// The IP header at [`ip::L3`] was checked (lengths, checksum) and padding trimmed.
    checked: bool,
}

impl Meta {
    fn new(rx: PortId) -> Meta {
        Meta {
            net: NetworkId(0),
            rx,
            tx: rx,
            reason: DropReason::Malformed,
            param: 0,
            hop: Hop::None,
            generated: false,
            gw_mac: MacAddr([0; 6]),
            consumed: false,
            checked: false,
        }
    }
}

/// Where a routed packet goes, decided by a lookup stage.
#[derive(Debug, Clone, Copy)]
enum Hop {
    None,
    Local {
        port: PortId,
        mac: MacAddr,
    },
    Remote {
        node: lace_shared::types::NodeId,
        sid: Ipv6Addr,
    },
}

const VEC_CAP: usize = 256;

/// A stage's input vector: indices into the pipeline's packet slots.
#[derive(Debug)]
struct Frame {
    idx: Vec<u16>,
}

/// One worker's pipeline: its stage vectors, counters and scratch space. Not shared.
#[derive(Debug)]
pub struct Pipeline<B: PacketBuf> {
    cfg: Config,
    neigh: Arc<UnderlayNeighbors>,
    slots: Vec<Option<B>>,
    meta: Vec<Meta>,
    free: Vec<u16>,
    frames: Vec<Frame>,
    counters: Counters,
}

/// A network's settings the stages need, decoded once per call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NetCtx {
    kind: lace_shared::types::NetworkKind,
    gw_mac: MacAddr,
    gw4: Option<Ipv4Addr>,
    gw6: Option<Ipv6Addr>,
}

impl<B: PacketBuf> Pipeline<B> {
    /// A pipeline for one worker. `neigh` is the node's underlay neighbor cache, shared by all
    /// workers.
    pub fn new(cfg: Config, neigh: Arc<UnderlayNeighbors>) -> Pipeline<B> {
        Pipeline {
            cfg,
            neigh,
            slots: (0..VEC_CAP).map(|_| None).collect(),
            meta: vec![Meta::new(PortId::UPLINK); VEC_CAP],
            free: (0..VEC_CAP as u16).rev().collect(),
            frames: (0..Stage::COUNT)
                .map(|_| Frame {
                    idx: Vec::with_capacity(VEC_CAP),
                })
                .collect(),
            counters: Counters::default(),
        }
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

    /// Runs the packets received on `rx` through the pipeline; `pkts` is drained (at most
    /// 256 packets per call; more stay in `pkts`). Each packet is transmitted through `io` or
    /// dropped and counted.
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
        for pkt in pkts.drain(..take) {
            let Some(i) = self.free.pop() else {
                // Cannot happen: VEC_CAP slots, at most VEC_CAP packets per call, all slots
                // returned before `process` returns.
                self.counters.drops[DropReason::NoBuffer as usize] += 1;
                continue;
            };
            self.slots[i as usize] = Some(pkt);
            self.meta[i as usize] = Meta::new(rx);
            self.frames[first as usize].idx.push(i);
        }
        self.dispatch(snap, io);
    }

    /// Visits the lowest non-empty stage until every vector is empty. Each stage runs over its
    /// whole vector; packets are edited in their slots (no copies of buffers or metadata).
    fn dispatch<I: Io<B>>(&mut self, snap: &Snapshot<'_>, io: &mut I) {
        let mut cx = Cx::new(snap);
        while let Some(s) = self.frames.iter().position(|f| !f.idx.is_empty()) {
            let mut frame = std::mem::take(&mut self.frames[s].idx);
            let stage = Stage::ALL[s];
            self.counters.stages[s] += frame.len() as u64;
            for &i in &frame {
                let k = usize::from(i);
                match stage {
                    Stage::Tx => {
                        if let Some(pkt) = self.slots[k].take() {
                            io.send(self.meta[k].tx, pkt);
                        }
                        self.free.push(i);
                        continue;
                    }
                    Stage::Drop => {
                        if !self.meta[k].consumed {
                            self.counters.drops[self.meta[k].reason as usize] += 1;
                        }
                        self.slots[k] = None;
                        self.free.push(i);
                        continue;
                    }
                    _ => {}
                }
                let Some(pkt) = self.slots[k].as_mut() else {
                    self.free.push(i);
                    continue;
                };
                let m = &mut self.meta[k];
                let verdict = match stage {
                    Stage::PodInput => ip::pod_input(pkt, m, &mut cx),
                    Stage::UplinkInput => srv6::uplink_input(&self.cfg, pkt, m, &cx),
                    Stage::ArpReply => reply::arp_reply(pkt, m, &mut cx),
                    Stage::NdReply => reply::nd_reply(&self.cfg, &self.neigh, pkt, m, &mut cx),
                    Stage::IcmpEcho => reply::icmp_echo(&self.cfg, pkt, m, &mut cx),
                    Stage::Srv6Decap => srv6::decap(pkt, m, &mut cx),
                    Stage::Ip4Lookup => ip::ip4_lookup(pkt, m, &mut cx),
                    Stage::Ip6Lookup => ip::ip6_lookup(pkt, m, &mut cx),
                    Stage::IcmpError => {
                        reply::icmp_error(pkt, m, &mut cx, &mut self.counters.drops)
                    }
                    Stage::LocalRewrite => ip::local_rewrite(pkt, m, io),
                    Stage::Srv6Encap => srv6::encap(&self.cfg, pkt, m),
                    Stage::UnderlayOut => {
                        srv6::underlay_out(&self.cfg, &self.neigh, pkt, m, &mut cx, io)
                    }
                    Stage::Tx | Stage::Drop => Ok(stage),
                };
                let next = match verdict {
                    Ok(next) => next,
                    Err(reason) => {
                        m.reason = reason;
                        Stage::Drop
                    }
                };
                self.frames[next as usize].idx.push(i);
            }
            frame.clear();
            // Give the vector's allocation back so no stage ever allocates again.
            if self.frames[s].idx.is_empty() {
                self.frames[s].idx = frame;
            }
        }
    }
}

/// Lookups one `process` call repeats for most of its packets, done once: the receiving
/// port's record, the last network used and the last remote node resolved. Valid for one
/// snapshot, so it lives on the stack of one call.
pub(crate) struct Cx<'s, 'a> {
    snap: &'s Snapshot<'a>,
    port: Option<(PortId, Option<&'a lace_shared::types::PortRec>)>,
    net: Option<(
        NetworkId,
        Option<(lace_shared::tables::NetworkView<'a>, NetCtx)>,
    )>,
    remote: Option<(lace_shared::types::NodeId, MacAddr)>,
}

impl<'s, 'a> Cx<'s, 'a> {
    fn new(snap: &'s Snapshot<'a>) -> Self {
        Cx {
            snap,
            port: None,
            net: None,
            remote: None,
        }
    }

    /// The snapshot.
    #[inline]
    pub(crate) fn snap(&self) -> &'s Snapshot<'a> {
        self.snap
    }

    /// A port's record (cached: a burst comes from one port).
    #[inline]
    pub(crate) fn port(&mut self, id: PortId) -> Option<&'a lace_shared::types::PortRec> {
        match self.port {
            Some((p, rec)) if p == id => rec,
            _ => {
                let rec = self.snap.port_rec(id);
                self.port = Some((id, rec));
                rec
            }
        }
    }

    /// A network's view and gateway settings (cached: most packets of a call share one).
    #[inline]
    pub(crate) fn net(
        &mut self,
        id: NetworkId,
    ) -> Option<(lace_shared::tables::NetworkView<'a>, NetCtx)> {
        match self.net {
            Some((n, v)) if n == id => v,
            _ => {
                let v = self.snap.network(id).and_then(|view| {
                    let info = view.info()?;
                    Some((
                        view,
                        NetCtx {
                            kind: info.kind,
                            gw_mac: info.gateway_mac,
                            gw4: info.gateway4,
                            gw6: info.gateway6,
                        },
                    ))
                });
                self.net = Some((id, v));
                v
            }
        }
    }

    /// The last resolved remote node's underlay MAC.
    #[inline]
    pub(crate) fn remote(&self, node: lace_shared::types::NodeId) -> Option<MacAddr> {
        self.remote.filter(|(n, _)| *n == node).map(|(_, m)| m)
    }

    /// Remembers a resolved remote node.
    #[inline]
    pub(crate) fn set_remote(&mut self, node: lace_shared::types::NodeId, mac: MacAddr) {
        self.remote = Some((node, mac));
    }
}

/// A stage's verdict: the next stage, or a drop reason.
type Verdict = Result<Stage, DropReason>;
