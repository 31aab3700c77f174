//! `conntrack`: the connection tracker — NetworkPolicy on NEW connections, ClusterIP Services
//! (DNAT and its reverse), one-way routing paths, ICMP errors matched to the connection they
//! quote (ADR 0025).
//!
//! Packets come here from the lookups when their network is `stateful` (see
//! [`lace_shared::policy`]): a packet is tracked in the *zone* of the local pod that sent it
//! (egress, once: [`Meta::TRACK_OUT`]) and in the zone of the local pod it goes to (ingress).
//! The flow table ([`lace_shared::flow`]) keys a connection per zone by (protocol, remote
//! address, remote port, local port), so both directions of a connection meet one entry.
//!
//! In a zone a packet is one of:
//! - **a packet of a known connection**: its state (TCP's states, or "replied" for UDP and
//!   ICMP) and last-seen time are updated; a connection created under an older policy
//!   generation of the zone's network is classified again first, and removed (`policy-revoked`)
//!   when the policy no longer allows it; a translated connection's packet is translated;
//! - **NEW**: classified — a ClusterIP gets a backend (session affinity, else the Service's
//!   Maglev table; none: ICMP port unreachable, `service-unavailable`); an isolated endpoint's
//!   policy set must allow the peer's class, the protocol and the (translated) port
//!   (`policy-denied`); a reply-only route never carries one (`one-way`); then it is entered in
//!   the table (`flow-table-full`, `nat-collision` when it cannot be);
//! - **an ICMP error**: allowed when it quotes a connection of the zone (and its quote and
//!   source translated back when the connection was), else only to and from endpoints that are
//!   not isolated (`unrelated-icmp-error`); errors the forwarder generates always pass.
//!
//! Replies of an allowed connection are allowed whatever the policy says in their direction.
//! Fragments carry no ports: a fragment that needs them (to or from an isolated endpoint, or of
//! a translated connection) is dropped (`fragment`); others pass untracked.
//!
//! A translated packet (DNAT to a backend, or a hairpin's reply) goes back to the lookup for
//! its new destination; the backend's ingress then sees the client's own address, so the
//! backend's policy applies to the client pod (as kube-proxy does).

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use lace_shared::flow::{
    FlowCache, FlowInit, FlowKey, FlowTable, FlowView, InsertError, Inserted, Nat, Origin,
    MIN_CAPACITY,
};
use lace_shared::policy::{
    ip_of_octets, BackendRec, PolicyDir, ServiceKey, PROTO_SCTP, PROTO_TCP, PROTO_UDP,
};
use lace_shared::status::DropReason;
use lace_shared::types::{NextHop, PortId, PortRec};

use super::cache::{Hop, Route};
use super::input::L3;
use super::lookup::{deliver_run, Delivery, UNREACH_PORT};
use super::srv6;
use super::{Io, Meta, NodeCtx, PacketBuf, Stage, VEC_CAP};
use crate::offload::Gso;
use crate::wire::checksum;

/// How long a connection lives without packets, per state (seconds). Kubernetes users know
/// these from the kernel's conntrack and Cilium; the defaults are Cilium's where the two differ
/// in spirit (a pod network, not a host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtTimeouts {
    /// TCP, SYN sent or SYN-ACK seen.
    pub tcp_syn: u32,
    /// TCP, established.
    pub tcp_established: u32,
    /// TCP, one FIN seen.
    pub tcp_closing: u32,
    /// TCP, both FINs seen.
    pub tcp_time_wait: u32,
    /// TCP, reset.
    pub tcp_close: u32,
    /// UDP (and other protocols), no reply yet.
    pub udp: u32,
    /// UDP (and other protocols), replied.
    pub udp_stream: u32,
    /// ICMP echo.
    pub icmp: u32,
}

impl Default for CtTimeouts {
    fn default() -> Self {
        CtTimeouts {
            tcp_syn: 60,
            tcp_established: 21_600,
            tcp_closing: 60,
            tcp_time_wait: 30,
            tcp_close: 10,
            udp: 30,
            udp_stream: 180,
            icmp: 30,
        }
    }
}

// States kept in a flow entry.
const TCP_SYN_SENT: u8 = 1;
const TCP_SYN_RECV: u8 = 2;
const TCP_ESTABLISHED: u8 = 3;
const TCP_CLOSING: u8 = 4;
const TCP_TIME_WAIT: u8 = 5;
const TCP_CLOSE: u8 = 6;
const UNREPLIED: u8 = 8;
const REPLIED: u8 = 9;
const AFFINITY: u8 = 10;
// Bits beside the state.
const FIN_ORIG: u8 = 1;
const FIN_REPLY: u8 = 2;
// TCP flags.
const TH_FIN: u8 = 0x01;
const TH_SYN: u8 = 0x02;
const TH_RST: u8 = 0x04;
const TH_ACK: u8 = 0x10;
/// Zones of session-affinity entries: a Service's index with this bit (ports are below it).
const AFFINITY_ZONE: u32 = 1 << 31;
/// Entries a sweep looks at per call, and how often a worker sweeps.
const SWEEP_BATCH: u32 = 256;
const SWEEP_EVERY_NS: u64 = 10_000_000;

/// One worker's tracker: the node's flow table, its cache of free entries, its part of the
/// table to sweep.
#[derive(Debug)]
pub(super) struct Tracker {
    table: Arc<FlowTable>,
    cache: FlowCache,
    worker: usize,
    /// Where this worker's part of the table starts and how long it is.
    part: (u32, u32),
    sweep_pos: u32,
    last_sweep_ns: u64,
    timeouts: CtTimeouts,
    /// The parsed packets of the call (reused: no per-call initialisation of a whole vector).
    pkts: Vec<Option<Pkt>>,
    /// The fused established hit's runs of packets of one flow (reused likewise).
    runs: Vec<FlowRun>,
    /// Packets the fused established hit took (packet tests).
    #[cfg(test)]
    pub(super) fused: u64,
}

impl Tracker {
    /// A tracker with a small table of its own (tests, tools, a pipeline not given the node's).
    pub(super) fn private() -> Tracker {
        // MIN_CAPACITY is inside the allowed range, so this cannot fail; a failure would be a
        // broken build of lace-shared.
        let table = FlowTable::in_memory(MIN_CAPACITY)
            .map(Arc::new)
            .unwrap_or_else(|e| panic!("flow table of the minimum size: {e}"));
        Tracker::new(table, 0, 1, CtTimeouts::default())
    }

    pub(super) fn new(
        table: Arc<FlowTable>,
        worker: usize,
        workers: usize,
        timeouts: CtTimeouts,
    ) -> Tracker {
        let cap = table.capacity();
        let workers = workers.max(1) as u32;
        let w = (worker as u32).min(workers - 1);
        let start = cap / workers * w;
        let len = if w == workers - 1 {
            cap - start
        } else {
            cap / workers
        };
        Tracker {
            table,
            cache: FlowCache::default(),
            worker,
            part: (start, len),
            sweep_pos: 0,
            last_sweep_ns: 0,
            timeouts,
            pkts: Vec::with_capacity(VEC_CAP),
            runs: Vec::with_capacity(VEC_CAP),
            #[cfg(test)]
            fused: 0,
        }
    }

    pub(super) fn table(&self) -> &Arc<FlowTable> {
        &self.table
    }

    fn expired(&self, v: &FlowView, now: u32) -> bool {
        expired(&self.timeouts, v, now)
    }

    /// Sweeps a slice of this worker's part of the table (at most every 10 ms).
    pub(super) fn sweep(&mut self, now_ns: u64) -> u32 {
        if now_ns.saturating_sub(self.last_sweep_ns) < SWEEP_EVERY_NS && self.last_sweep_ns != 0 {
            return 0;
        }
        self.last_sweep_ns = now_ns.max(1);
        let now = (now_ns / 1_000_000_000) as u32;
        let (start, len) = self.part;
        if len == 0 {
            return 0;
        }
        let from = start + self.sweep_pos % len;
        let count = SWEEP_BATCH.min(len - self.sweep_pos % len);
        let timeouts = self.timeouts;
        let table = Arc::clone(&self.table);
        let (_, removed) = table.sweep(from, count, &mut self.cache, self.worker, |v| {
            expired(&timeouts, v, now)
        });
        self.sweep_pos = (self.sweep_pos + count) % len;
        removed
    }
}

/// Seconds a connection in `v`'s state lives without packets.
fn timeout(t: &CtTimeouts, v: &FlowView) -> u32 {
    match v.state {
        TCP_SYN_SENT | TCP_SYN_RECV => t.tcp_syn,
        TCP_ESTABLISHED => t.tcp_established,
        TCP_CLOSING => t.tcp_closing,
        TCP_TIME_WAIT => t.tcp_time_wait,
        TCP_CLOSE => t.tcp_close,
        AFFINITY => v.timeout,
        REPLIED if v.key.proto == 1 || v.key.proto == 58 => t.icmp,
        UNREPLIED if v.key.proto == 1 || v.key.proto == 58 => t.icmp,
        REPLIED => t.udp_stream,
        _ => t.udp,
    }
}

fn expired(t: &CtTimeouts, v: &FlowView, now: u32) -> bool {
    now.saturating_sub(v.last_seen) > timeout(t, v)
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.table.return_cache(&mut self.cache);
    }
}

/// What an ICMP message is, for tracking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Not ICMP, or ICMP that is neither echo nor an error.
    Plain,
    /// Echo request or reply: the identifier is the requester's port, 0 the responder's.
    Echo,
    /// An error quoting a packet at `l4 + 8`.
    Error,
}

/// What the tracker reads of a packet.
#[derive(Debug, Clone, Copy)]
struct Pkt {
    v6: bool,
    /// Offset of the IP header.
    l3: usize,
    /// Offset of the upper-layer header (ports), or of the ICMP header.
    l4: usize,
    proto: u8,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    tcp: u8,
    frag: bool,
    kind: Kind,
}

fn mapped(v4: [u8; 4]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[10] = 0xff;
    a[11] = 0xff;
    a[12..].copy_from_slice(&v4);
    a
}

fn arr<const N: usize>(d: &[u8], at: usize) -> Option<[u8; N]> {
    d.get(at..at + N)?.try_into().ok()
}

fn be16(d: &[u8], at: usize) -> Option<u16> {
    arr::<2>(d, at).map(u16::from_be_bytes)
}

/// Reads the IP packet at `l3`. `quoted`: the packet is the quote inside an ICMP error, whose
/// lengths may say more than is there (only the ports need to be).
fn parse(d: &[u8], l3: usize, quoted: bool) -> Option<Pkt> {
    let ver = d.get(l3)? >> 4;
    let (v6, proto, src, dst, l4, frag) = match ver {
        4 => {
            let ihl = usize::from(d.get(l3)? & 0x0f) * 4;
            if ihl < 20 {
                return None;
            }
            let total = usize::from(be16(d, l3 + 2)?);
            if !quoted && (total < ihl || l3 + total > d.len()) {
                return None;
            }
            let fl = be16(d, l3 + 6)?;
            let frag = fl & 0x3fff != 0;
            (
                false,
                *d.get(l3 + 9)?,
                mapped(arr(d, l3 + 12)?),
                mapped(arr(d, l3 + 16)?),
                l3 + ihl,
                frag,
            )
        }
        6 => {
            let mut nh = *d.get(l3 + 6)?;
            let mut at = l3 + 40;
            let mut frag = false;
            for _ in 0..8 {
                match nh {
                    0 | 43 | 60 => {
                        nh = *d.get(at)?;
                        at += (usize::from(*d.get(at + 1)?) + 1) * 8;
                    }
                    44 => {
                        nh = *d.get(at)?;
                        frag = true;
                        at += 8;
                    }
                    51 => {
                        nh = *d.get(at)?;
                        at += (usize::from(*d.get(at + 1)?) + 2) * 4;
                    }
                    _ => break,
                }
            }
            (true, nh, arr(d, l3 + 8)?, arr(d, l3 + 24)?, at, frag)
        }
        _ => return None,
    };
    let mut p = Pkt {
        v6,
        l3,
        l4,
        proto,
        src,
        dst,
        sport: 0,
        dport: 0,
        tcp: 0,
        frag,
        kind: Kind::Plain,
    };
    if frag {
        return Some(p);
    }
    match proto {
        PROTO_TCP | PROTO_UDP | PROTO_SCTP => {
            p.sport = be16(d, l4)?;
            p.dport = be16(d, l4 + 2)?;
            if proto == PROTO_TCP {
                // A quote may stop before the flags (RFC 792 quotes 8 bytes).
                p.tcp = match d.get(l4 + 13) {
                    Some(&f) => f,
                    None if quoted => 0,
                    None => return None,
                };
            }
        }
        1 | 58 => {
            let ty = *d.get(l4)?;
            let (echo, error) = if proto == 1 {
                (ty == 0 || ty == 8, matches!(ty, 3 | 4 | 5 | 11 | 12))
            } else {
                (ty == 128 || ty == 129, (1..=4).contains(&ty))
            };
            if echo {
                // The identifier is the requester's port, the responder's is 0 (as the kernel's
                // conntrack keeps the type in the tuple): a request is never taken for the
                // reply of one going the other way with the same identifier.
                let id = be16(d, l4 + 4)?;
                let request = if proto == 1 { ty == 8 } else { ty == 128 };
                (p.sport, p.dport) = if request { (id, 0) } else { (0, id) };
                p.kind = Kind::Echo;
            } else if error && !quoted {
                p.kind = Kind::Error;
            }
        }
        _ => {}
    }
    Some(p)
}

/// The port a policy rule sees: the destination port for TCP, UDP and SCTP, none otherwise.
fn rule_port(proto: u8, port: u16) -> u16 {
    match proto {
        PROTO_TCP | PROTO_UDP | PROTO_SCTP => port,
        _ => 0,
    }
}

// ---- rewriting ------------------------------------------------------------------------------

/// Adjusts checksum field value `csum` for bytes `old` → `new` (equal even lengths).
fn adjust(mut csum: u16, old: &[u8], new: &[u8]) -> u16 {
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        csum = checksum::update_u16(
            csum,
            u16::from_be_bytes([o[0], o[1]]),
            u16::from_be_bytes([n[0], n[1]]),
        );
    }
    csum
}

fn read16(d: &[u8], at: usize) -> u16 {
    be16(d, at).unwrap_or(0)
}

fn write16(d: &mut [u8], at: usize, v: u16) {
    if let Some(b) = d.get_mut(at..at + 2) {
        b.copy_from_slice(&v.to_be_bytes());
    }
}

/// Rewrites one end (source or destination) of the packet `p` describes to `addr`/`port`, with
/// every checksum the change touches (IPv4 header, TCP/UDP pseudo-header and port, ICMPv6
/// pseudo-header, SCTP's CRC when the port changes). A large segment's transport checksum is
/// partial, the pseudo-header's sum alone: only the address enters it, uncomplemented.
fn rewrite<B: PacketBuf>(pkt: &mut B, p: &Pkt, dst: bool, addr: [u8; 16], port: u16) -> bool {
    let partial = pkt.gso().is_some();
    let d = pkt.data_mut();
    let (old_addr, at_addr, alen) = match (p.v6, dst) {
        (false, false) => (&p.src[12..], p.l3 + 12, 4),
        (false, true) => (&p.dst[12..], p.l3 + 16, 4),
        (true, false) => (&p.src[..], p.l3 + 8, 16),
        (true, true) => (&p.dst[..], p.l3 + 24, 16),
    };
    let new_addr: &[u8] = if p.v6 { &addr[..] } else { &addr[12..] };
    let mut old = [0u8; 16];
    old[..alen].copy_from_slice(old_addr);
    let old_addr = &old[..alen];
    if d.len() < at_addr + alen {
        return false;
    }
    let old_port = if dst { p.dport } else { p.sport };
    let port_at = p.l4 + if dst { 2 } else { 0 };
    // The upper-layer checksum: where it is and whether the addresses are in it.
    let csum_at = match p.proto {
        PROTO_TCP => Some(p.l4 + 16),
        PROTO_UDP if read16(d, p.l4 + 6) != 0 || p.v6 => Some(p.l4 + 6),
        58 => Some(p.l4 + 2),
        _ => None,
    };
    if let Some(at) = csum_at {
        if d.len() >= at + 2 && partial {
            write16(d, at, !adjust(!read16(d, at), old_addr, new_addr));
        } else if d.len() >= at + 2 {
            let mut c = adjust(read16(d, at), old_addr, new_addr);
            if matches!(p.proto, PROTO_TCP | PROTO_UDP) && old_port != port {
                c = checksum::update_u16(c, old_port, port);
            }
            if p.proto == PROTO_UDP && c == 0 {
                c = 0xffff;
            }
            write16(d, at, c);
        }
    }
    if !p.v6 {
        let c = adjust(read16(d, p.l3 + 10), old_addr, new_addr);
        write16(d, p.l3 + 10, c);
    }
    d[at_addr..at_addr + alen].copy_from_slice(new_addr);
    if matches!(p.proto, PROTO_TCP | PROTO_UDP | PROTO_SCTP) && old_port != port {
        write16(d, port_at, port);
        if p.proto == PROTO_SCTP {
            sctp_crc(d, p.l4);
        }
    }
    true
}

/// Recomputes the CRC32-C of the SCTP packet at `l4` (RFC 9260 appendix A: reflected, stored
/// little endian).
fn sctp_crc(d: &mut [u8], l4: usize) {
    if d.len() < l4 + 12 {
        return;
    }
    d[l4 + 8..l4 + 12].copy_from_slice(&[0; 4]);
    let crc = checksum::crc32c(&d[l4..]);
    d[l4 + 8..l4 + 12].copy_from_slice(&crc.to_le_bytes());
}

/// Translates an ICMP error about a translated connection back: the quoted packet's
/// destination `q` to `addr`/`port`, the error's source to `addr` when it came from the
/// backend (`outer_from`); the quote's checksums and the ICMP checksum recomputed.
fn unnat_error<B: PacketBuf>(
    pkt: &mut B,
    p: &Pkt,
    q: &Pkt,
    addr: [u8; 16],
    port: u16,
    outer_from: Option<[u8; 16]>,
) {
    // The quote first (its own header checksum and, if quoted, its upper-layer checksum).
    let quote_len = pkt.len().saturating_sub(q.l3);
    if quote_len < 20 {
        return;
    }
    {
        let mut qb = QuoteBuf {
            d: pkt.data_mut(),
            off: 0,
        };
        rewrite(&mut qb, q, true, addr, port);
    }
    if outer_from.is_some_and(|b| b == p.src) {
        rewrite(pkt, p, false, addr, 0);
    }
    // The ICMP checksum over the message (and, for ICMPv6, the pseudo-header).
    let d = pkt.data_mut();
    let (l4, end) = (p.l4, d.len());
    if end < l4 + 4 {
        return;
    }
    write16(d, l4 + 2, 0);
    let sum = if p.v6 {
        let (Some(src), Some(dst)) = (arr::<16>(d, p.l3 + 8), arr::<16>(d, p.l3 + 24)) else {
            return;
        };
        checksum::combine(&[
            checksum::pseudo_header_v6(
                &Ipv6Addr::from(src),
                &Ipv6Addr::from(dst),
                crate::wire::IpProtocol::Icmpv6,
                (end - l4) as u32,
            ),
            checksum::data(&d[l4..end]),
        ])
    } else {
        checksum::data(&d[l4..end])
    };
    write16(d, l4 + 2, checksum::finish(sum));
}

/// A view of the whole packet for [`rewrite`] on the quoted packet (whose offsets are absolute).
struct QuoteBuf<'a> {
    d: &'a mut [u8],
    off: usize,
}

impl PacketBuf for QuoteBuf<'_> {
    fn data(&self) -> &[u8] {
        &self.d[self.off..]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.d[self.off..]
    }
    fn prepend(&mut self, _: usize) -> bool {
        false
    }
    fn adj(&mut self, _: usize) -> bool {
        false
    }
    fn trim(&mut self, _: usize) -> bool {
        false
    }
    fn append(&mut self, _: usize) -> bool {
        false
    }
    fn gso(&self) -> Option<Gso> {
        // A quoted packet is a few bytes of another's, never a segment to cut.
        None
    }
    fn set_gso(&mut self, _: Option<Gso>) {}
}

// ---- states ---------------------------------------------------------------------------------

/// The state a connection starts in.
fn initial(p: &Pkt) -> u8 {
    if p.proto == PROTO_TCP {
        if p.tcp & TH_RST != 0 {
            TCP_CLOSE
        } else if p.tcp & (TH_SYN | TH_ACK) == TH_SYN {
            TCP_SYN_SENT
        } else {
            // Picked up in the middle (as the kernel's conntrack does with tcp_loose).
            TCP_ESTABLISHED
        }
    } else {
        UNREPLIED
    }
}

/// The next (state, seen bits) of a connection after a packet; `orig`: in the direction that
/// opened it.
fn next_state(state: u8, seen: u8, p: &Pkt, orig: bool) -> (u8, u8) {
    if p.proto != PROTO_TCP {
        return if !orig && state == UNREPLIED {
            (REPLIED, seen)
        } else {
            (state, seen)
        };
    }
    let f = p.tcp;
    if f & TH_RST != 0 {
        return (TCP_CLOSE, seen);
    }
    if f & TH_SYN != 0 {
        return match (f & TH_ACK != 0, orig, state) {
            (false, true, TCP_TIME_WAIT | TCP_CLOSE) => (TCP_SYN_SENT, 0),
            (true, false, TCP_SYN_SENT) => (TCP_SYN_RECV, seen),
            _ => (state, seen),
        };
    }
    if f & TH_FIN != 0 {
        let seen = seen | if orig { FIN_ORIG } else { FIN_REPLY };
        return if seen & (FIN_ORIG | FIN_REPLY) == FIN_ORIG | FIN_REPLY {
            (TCP_TIME_WAIT, seen)
        } else {
            (TCP_CLOSING, seen)
        };
    }
    if f & TH_ACK != 0 && state == TCP_SYN_RECV && orig {
        return (TCP_ESTABLISHED, seen);
    }
    (state, seen)
}

// ---- the node -------------------------------------------------------------------------------

/// Why a packet stops here.
enum Stop {
    Drop(DropReason),
    Reject,
}

/// What a phase did.
enum Phase {
    /// Go on with the packet as it is.
    Continue,
    /// Its destination changed: look it up again.
    Reroute,
}

type PhaseResult = Result<Phase, Stop>;

/// `conntrack` (see the module docs).
pub(super) fn conntrack<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    let now = (n.io.now_ns() / 1_000_000_000) as u32;
    let seed = n.ct.table.seed();
    // Pass 1: read every packet and start loading the home bucket of its first key.
    let mut pkts = std::mem::take(&mut n.ct.pkts);
    pkts.clear();
    for &i in frame {
        let slot = usize::from(i);
        let Some(p) = n.bufs[slot]
            .as_ref()
            .and_then(|b| parse(b.data(), L3, false))
        else {
            pkts.push(None);
            continue;
        };
        let m = &n.meta[slot];
        let key = if m.flags & (Meta::TRACK_OUT | Meta::TRACK_DONE) == Meta::TRACK_OUT {
            egress_key(m.rx.0, &p)
        } else if let Hop::Local { port, .. } = m.hop {
            ingress_key(port.0, &p)
        } else {
            egress_key(m.rx.0, &p)
        };
        n.ct.table.prefetch(key.hash(seed));
        pkts.push(Some(p));
    }
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, (&i, p)) in frame.iter().zip(&pkts).enumerate() {
        to[k] = match p {
            None if n.bufs[usize::from(i)].is_none() => n.gone(i),
            None => n.drop_for(i, DropReason::Malformed),
            Some(p) => one(n, i, p, now),
        };
    }
    n.ct.pkts = pkts;
    n.hand_over(frame, &to[..frame.len()]);
}

fn egress_key(zone: u32, p: &Pkt) -> FlowKey {
    FlowKey {
        zone,
        proto: p.proto,
        v6: p.v6,
        remote: p.dst,
        rport: p.dport,
        lport: p.sport,
    }
}

fn ingress_key(zone: u32, p: &Pkt) -> FlowKey {
    FlowKey {
        zone,
        proto: p.proto,
        v6: p.v6,
        remote: p.src,
        rport: p.sport,
        lport: p.dport,
    }
}

// ---- the fused established hit --------------------------------------------------------------

/// Where the upper-layer header is in a frame whose IPv4 header has no options.
const L4: usize = L3 + 20;

/// What the fused hit reads of a packet, at fixed offsets: a TCP or UDP segment in IPv4
/// without options (the input node checked the header), not a fragment, not a TCP SYN, FIN or
/// RST.
#[derive(Debug, Clone, Copy)]
struct Seg4 {
    /// The remote end: the destination in the sender's zone, the source in the receiver's.
    peer: u32,
    /// Source port << 16 | destination port.
    ports: u32,
    proto: u8,
}

impl Seg4 {
    /// `None`: not the plain case (the general path decides the packet). `dir`: the zone's
    /// side of the connection (egress: the sender's zone, ingress: the receiver's).
    #[inline(always)]
    fn read(d: &[u8], dir: PolicyDir) -> Option<Seg4> {
        let h = d.first_chunk::<{ L4 + 8 }>()?;
        if u16::from_be_bytes([h[L3 + 6], h[L3 + 7]]) & 0x3fff != 0 {
            return None;
        }
        let proto = h[L3 + 9];
        match proto {
            // The whole fixed TCP header (the flags, the checksum); the flags change nothing.
            PROTO_TCP if d.len() >= L4 + 20 => {
                if d.get(L4 + 13)? & (TH_SYN | TH_FIN | TH_RST) != 0 {
                    return None;
                }
            }
            PROTO_UDP => {}
            _ => return None,
        }
        let at = match dir {
            PolicyDir::Egress => L3 + 16,
            PolicyDir::Ingress => L3 + 12,
        };
        Some(Seg4 {
            peer: u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]),
            ports: u32::from_be_bytes([h[L4], h[L4 + 1], h[L4 + 2], h[L4 + 3]]),
            proto,
        })
    }

    #[inline(always)]
    fn same_flow(&self, o: &Seg4) -> bool {
        self.peer == o.peer && self.ports == o.ports && self.proto == o.proto
    }

    /// Its key in zone `zone` on side `dir`: [`egress_key`] or [`ingress_key`] of the same
    /// packet.
    #[inline(always)]
    fn key(&self, zone: u32, dir: PolicyDir) -> FlowKey {
        let (src, dst) = ((self.ports >> 16) as u16, self.ports as u16);
        let (rport, lport) = match dir {
            PolicyDir::Egress => (dst, src),
            PolicyDir::Ingress => (src, dst),
        };
        FlowKey {
            zone,
            proto: self.proto,
            v6: false,
            remote: mapped(self.peer.to_be_bytes()),
            rport,
            lport,
        }
    }
}

/// Packets of one flow in a row, from position `start` of the vector (the fused hit's unit).
#[derive(Debug, Clone, Copy)]
struct FlowRun {
    start: usize,
    seg: Seg4,
    /// Its key's hash.
    hash: u64,
    /// Its translation, once its hit is found.
    nat: Option<Dnat>,
}

/// How the packets of a fused hit go on after conntrack: the same for the whole fused run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Way {
    /// The remote next hop they are encapsulated to.
    nh: u32,
    /// [`Meta::SERVICE`] and [`Meta::REPLY_ONLY`] as the general path sets them.
    flags: u16,
    /// Translated, and looked up again for the backend.
    rerouted: bool,
}

/// A Service translation of the fused hit, the same for every packet of a flow: the new
/// destination address, the new destination port (when it changes), and the changes they make
/// to the IPv4 header's checksum and to the TCP or UDP checksum, summed once.
#[derive(Debug, Clone, Copy)]
struct Dnat {
    addr: [u8; 4],
    port: Option<u16>,
    ip_delta: u64,
    l4_delta: u64,
}

impl Dnat {
    /// Flow `s`'s destination translated to `addr`:`port` as [`rewrite`] does it.
    fn new(s: &Seg4, addr: u32, port: u16) -> Dnat {
        let old_port = s.ports as u16;
        let ip_delta = checksum::delta_u32(s.peer, addr);
        let (port, l4_delta) = if port != old_port {
            (Some(port), ip_delta + checksum::delta_u16(old_port, port))
        } else {
            (None, ip_delta)
        };
        Dnat {
            addr: addr.to_be_bytes(),
            port,
            ip_delta,
            l4_delta,
        }
    }
}

/// One flow's established hit in the sender's zone.
#[derive(Debug, Clone, Copy)]
struct Hit {
    idx: u32,
    way: Way,
    nat: Option<Dnat>,
    plan: srv6::EncapPlan,
}

/// The fused established hit (ADR 0025): for a vector pod-input checked whole (IPv4 from the
/// endpoint of a stateful network, `fresh` the `Meta` its packets would hold), the longest
/// prefix whose packets are plain established hits in the sender's zone is tracked,
/// translated and encapsulated here, in one call chain — conntrack, the lookup of a
/// translated destination, srv6-encap, underlay-out and tx, counted in each as the general
/// path counts them. Returns how many packets (the prefix) it took; the rest go the general way.
///
/// A plain hit is exactly what the general path would do with nothing but a touch: TCP or UDP,
/// not a fragment; its connection found in the zone by its forward key, not expired, allowed
/// under the network's current policy generation, not a hairpin; TCP ESTABLISHED without SYN,
/// FIN or RST (UDP: no reply that marks it replied); to a remote node (after the translation,
/// when it is the connection's opening direction), whose encapsulation is usable and underlay
/// MAC resolved; the same next hop and flags as the packets before it. Everything else —
/// a NEW connection, a state change, a revalidation, an expired entry, ICMP, delivery to a pod
/// of this node (its ingress zone) — ends the prefix, and the general path meets it unchanged.
/// The vector is read first, a run of packets of one flow in a row hashed once and its bucket
/// prefetched; then one lookup per run; then the translation (its checksum changes summed once
/// per run) in the encapsulation loop.
pub(super) fn established4<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slots: &[u8],
    fresh: Meta,
) -> usize {
    let Some(gen) = n.cx.net_ctx(fresh.net).map(|c| c.policy_gen) else {
        return 0;
    };
    let zone = fresh.rx.0;
    let (mut runs, count, now) = read_runs(n, slots, zone, PolicyDir::Egress);
    // Pass 2: one lookup per run, as long as the runs are plain hits that go the first one's way.
    let mut first: Option<(Way, srv6::EncapPlan)> = None;
    let mut taken = 0;
    for r in runs.iter_mut() {
        let Some(h) = flow_hit(n, r, zone, fresh.net, gen, now) else {
            break;
        };
        match &first {
            Some((way, _)) if *way != h.way => break,
            Some(_) => {}
            None => first = Some((h.way, h.plan)),
        }
        n.ct.table.touch(h.idx, now);
        r.nat = h.nat;
        taken += 1;
    }
    let Some((way, plan)) = first else {
        n.ct.runs = runs;
        return 0;
    };
    let done = runs.get(taken).map_or(count, |r| r.start);
    let path: &[Stage] = if way.rerouted {
        &[
            Stage::Ip4Lookup,
            Stage::Conntrack,
            Stage::Ip4Lookup,
            Stage::Srv6Encap,
        ]
    } else {
        &[Stage::Ip4Lookup, Stage::Conntrack, Stage::Srv6Encap]
    };
    n.through(path, done as u64);
    #[cfg(test)]
    {
        n.ct.fused += done as u64;
    }
    // Pass 3: translated and encapsulated, run by run. What a packet that cannot be
    // encapsulated holds on the general way from here:
    let miss = Meta {
        hop: Hop::Remote { nh: way.nh },
        flags: fresh.flags | Meta::TRACK_DONE | way.flags,
        ..fresh
    };
    let at = std::mem::replace(&mut n.at, Stage::Srv6Encap);
    for (k, r) in runs[..taken].iter().enumerate() {
        let end = runs.get(k + 1).map_or(count, |next| next.start);
        let (proto, nat) = (r.seg.proto, r.nat);
        srv6::encap_run(n, &slots[r.start..end], &plan, Some(miss), |pkt: &mut B| {
            if let Some(t) = &nat {
                let partial = pkt.gso().is_some();
                dnat4(pkt.data_mut(), proto, t, partial);
            }
        });
    }
    n.at = at;
    n.ct.runs = runs;
    done
}

/// Pass 1 of a fused hit: the longest prefix of `slots` that [`Seg4::read`] takes, as runs of
/// packets of one flow in a row, each run's key in `zone` (on side `dir`) hashed once and its
/// bucket prefetched. Returns the runs (the tracker's reused vector: give it back), how many
/// packets they hold, and the time in seconds (0 when there are none).
#[inline(always)]
fn read_runs<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slots: &[u8],
    zone: u32,
    dir: PolicyDir,
) -> (Vec<FlowRun>, usize, u32) {
    let seed = n.ct.table.seed();
    let mut runs = std::mem::take(&mut n.ct.runs);
    runs.clear();
    let mut count = 0;
    for &i in slots {
        let Some(seg) = n.bufs[usize::from(i)]
            .as_ref()
            .and_then(|b| Seg4::read(b.data(), dir))
        else {
            break;
        };
        if !runs.last().is_some_and(|r| r.seg.same_flow(&seg)) {
            let hash = seg.key(zone, dir).hash(seed);
            n.ct.table.prefetch(hash);
            runs.push(FlowRun {
                start: count,
                seg,
                hash,
                nat: None,
            });
        }
        count += 1;
    }
    let now = if runs.is_empty() {
        0
    } else {
        (n.io.now_ns() / 1_000_000_000) as u32
    };
    (runs, count, now)
}

/// Run `r`'s connection in `zone` (side `dir`) when its packets would do nothing to it but
/// touch it: found, not a translation's reply entry, not expired, created under policy
/// generation `gen`, TCP ESTABLISHED (UDP: replied, or in its opening direction). Returns the
/// entry and whether the packets go in the connection's opening direction.
#[inline(always)]
fn plain_entry<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    r: &FlowRun,
    zone: u32,
    dir: PolicyDir,
    gen: u32,
    now: u32,
) -> Option<(FlowView, bool)> {
    let v = n.ct.table.lookup(&r.seg.key(zone, dir), r.hash)?;
    if v.reverse || v.gen != gen || n.ct.expired(&v, now) {
        return None;
    }
    let orig = match dir {
        PolicyDir::Egress => v.origin == Origin::Egress,
        PolicyDir::Ingress => v.origin == Origin::Ingress,
    };
    let steady = match r.seg.proto {
        PROTO_TCP => v.state == TCP_ESTABLISHED,
        _ => orig || v.state != UNREPLIED,
    };
    steady.then_some((v, orig))
}

/// The fused established hit in the receiver's zone: for a vector of fresh IPv4 packets that
/// all go to pod `port` of this node, whose network `net` is stateful and whose port is up
/// (`miss`: the `Meta` a packet holds if it leaves the delivery loop), the longest prefix whose
/// packets are plain hits in the pod's zone ([`plain_entry`]) is tracked and delivered here —
/// conntrack, local-rewrite and tx in one call chain, counted as the general path counts them.
/// Returns how many packets (the prefix) it took; the rest go the general way.
///
/// Ends the prefix as [`established4`] does (a NEW connection, a state change, a
/// revalidation, an expired entry, ICMP, a fragment), and also at a translated connection's
/// reply (its source is translated back on the general path). A packet the fused path takes
/// is one the general `ingress` phase would only touch.
pub(super) fn established4_in<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slots: &[u8],
    port: PortId,
    net: lace_shared::types::NetworkId,
    plan: &Delivery,
    miss: Meta,
) -> usize {
    let Some((_, ctx)) = n.cx.net(net) else {
        return 0;
    };
    let (gen, zone) = (ctx.policy_gen, port.0);
    let (runs, count, now) = read_runs(n, slots, zone, PolicyDir::Ingress);
    // Pass 2: one lookup per run, as long as the runs are plain hits.
    let mut taken = 0;
    for r in &runs {
        let Some((v, _)) = plain_entry(n, r, zone, PolicyDir::Ingress, gen, now) else {
            break;
        };
        n.ct.table.touch(v.idx, now);
        taken += 1;
    }
    let done = runs.get(taken).map_or(count, |r| r.start);
    n.ct.runs = runs;
    if done == 0 {
        return 0;
    }
    n.through(
        &[Stage::Ip4Lookup, Stage::Conntrack, Stage::LocalRewrite],
        done as u64,
    );
    #[cfg(test)]
    {
        n.ct.fused += done as u64;
    }
    // Pass 3: delivered.
    let at = std::mem::replace(&mut n.at, Stage::LocalRewrite);
    deliver_run(n, &slots[..done], plan, Some(miss));
    n.at = at;
    done
}

/// The established hit of run `r` in zone `zone` of network `net` (policy generation `gen`),
/// if it is a plain one (see [`established4`]).
#[inline]
fn flow_hit<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    r: &FlowRun,
    zone: u32,
    net: lace_shared::types::NetworkId,
    gen: u32,
    now: u32,
) -> Option<Hit> {
    let s = &r.seg;
    let nh = n.cx.route4(net, s.peer)?;
    let (hop, flags) = match n.cx.route(nh) {
        Route::Forward(hop) => (hop, 0),
        Route::ReplyOnly(hop) => (hop, Meta::REPLY_ONLY),
        Route::Service => (Hop::None, Meta::SERVICE),
        _ => return None,
    };
    let (v, orig) = plain_entry(n, r, zone, PolicyDir::Egress, gen, now)?;
    if orig && flags == Meta::REPLY_ONLY {
        return None;
    }
    let (nat, hop) = match v.nat {
        Some(t) if orig => {
            let [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d] = t.addr else {
                return None;
            };
            if t.hairpin {
                return None;
            }
            let addr = u32::from_be_bytes([a, b, c, d]);
            let nh = n.cx.route4(net, addr)?;
            let Route::Forward(hop) = n.cx.route(nh) else {
                return None;
            };
            (Some(Dnat::new(s, addr, t.port)), hop)
        }
        _ => (None, hop),
    };
    let Hop::Remote { nh } = hop else {
        return None;
    };
    let plan = srv6::EncapPlan::new(n, nh)?;
    Some(Hit {
        idx: v.idx,
        way: Way {
            nh,
            flags,
            rerouted: nat.is_some(),
        },
        nat,
        plan,
    })
}

/// [`rewrite`] of the destination of a plain TCP or UDP segment in IPv4 ([`Seg4`]), at fixed
/// offsets with the flow's summed checksum changes: the same bytes. `partial`: a large
/// segment's transport checksum, which holds only the pseudo-header's sum (so only the
/// address change enters it, uncomplemented).
#[inline(always)]
fn dnat4(d: &mut [u8], proto: u8, t: &Dnat, partial: bool) {
    let Some(h) = d.first_chunk_mut::<{ L4 + 8 }>() else {
        return;
    };
    let ip_sum = checksum::update_by(u16::from_be_bytes([h[L3 + 10], h[L3 + 11]]), t.ip_delta);
    h[L3 + 10..L3 + 12].copy_from_slice(&ip_sum.to_be_bytes());
    h[L3 + 16..L3 + 20].copy_from_slice(&t.addr);
    if let Some(port) = t.port {
        h[L4 + 2..L4 + 4].copy_from_slice(&port.to_be_bytes());
    }
    let at = if proto == PROTO_TCP { L4 + 16 } else { L4 + 6 };
    let Some(c) = d.get_mut(at..at + 2) else {
        return;
    };
    let old = u16::from_be_bytes([c[0], c[1]]);
    if partial {
        c.copy_from_slice(&(!checksum::update_by(!old, t.ip_delta)).to_be_bytes());
        return;
    }
    let sum = match checksum::update_by(old, t.l4_delta) {
        // UDP without a checksum keeps none; one that sums to zero is sent as all ones.
        _ if proto == PROTO_UDP && old == 0 => return,
        0 if proto == PROTO_UDP => 0xffff,
        sum => sum,
    };
    c.copy_from_slice(&sum.to_be_bytes());
}

/// One packet through both phases; its next node.
fn one<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    i: u8,
    p: &Pkt,
    now: u32,
) -> Stage {
    let slot = usize::from(i);
    let m = n.meta[slot];
    if m.flags & (Meta::TRACK_OUT | Meta::TRACK_DONE) == Meta::TRACK_OUT && !m.is(Meta::GENERATED) {
        n.meta[slot].flags |= Meta::TRACK_DONE;
        match egress(n, slot, p, now) {
            Ok(Phase::Continue) => {}
            Ok(Phase::Reroute) => {
                return if p.v6 {
                    Stage::Ip6Lookup
                } else {
                    Stage::Ip4Lookup
                }
            }
            Err(Stop::Drop(r)) => return n.drop_for(i, r),
            Err(Stop::Reject) => {
                return n.icmp_for(i, DropReason::ServiceUnavailable, UNREACH_PORT)
            }
        }
    }
    match m.hop {
        Hop::Local { port, .. } => {
            if let Some((rec, true)) = n.cx.dst_port(port) {
                let rec = *rec;
                match ingress(n, slot, p, port, &rec, now) {
                    Ok(_) => {}
                    Err(Stop::Drop(r)) => return n.drop_for(i, r),
                    Err(Stop::Reject) => return n.drop_for(i, DropReason::ServiceUnavailable),
                }
            }
            Stage::LocalRewrite
        }
        Hop::Remote { .. } => Stage::Srv6Encap,
        Hop::Uplink { .. } => Stage::LocalRewrite,
        Hop::None => n.drop_for(i, DropReason::NoRoute),
    }
}

/// The zone's record, its network's view and policy generation.
fn zone_net<'a, B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, 'a, B, I>,
    rec: &PortRec,
) -> Result<(lace_shared::tables::NetworkView<'a>, u32), Stop> {
    n.cx.net(rec.network())
        .map(|(view, ctx)| (view, ctx.policy_gen))
        .ok_or(Stop::Drop(DropReason::NoNetwork))
}

/// Whether the zone's policy set allows a connection in `dir` with `peer` on `proto`/`port`.
fn allowed<B: PacketBuf, I: Io<B>>(
    n: &NodeCtx<'_, '_, '_, B, I>,
    rec: &PortRec,
    view: &lace_shared::tables::NetworkView<'_>,
    dir: PolicyDir,
    peer: [u8; 16],
    proto: u8,
    port: u16,
) -> bool {
    let snap = n.cx.snap();
    let set = rec.policy();
    match snap.policy_set(set) {
        Some(s) if s.isolated(dir) => {
            let class = view.peer_class(ip_of_octets(peer));
            snap.policy_allows(set, dir, class, proto, rule_port(proto, port))
        }
        _ => true,
    }
}

/// Whether `peer` is the node itself: an address the endpoint's network routes to the node's
/// host interface. The node always reaches its own pods (kubelet's probes), whatever
/// NetworkPolicy says, as in upstream Kubernetes.
fn from_node<B: PacketBuf, I: Io<B>>(
    n: &NodeCtx<'_, '_, '_, B, I>,
    view: &lace_shared::tables::NetworkView<'_>,
    peer: [u8; 16],
) -> bool {
    let index = match ip_of_octets(peer) {
        IpAddr::V4(a) => view.route4_index(a),
        IpAddr::V6(a) => view.route6_index(a),
    };
    matches!(
        n.cx.snap().nexthop(index),
        Some(NextHop::Local { port, .. }) if port == PortId::HOST
    )
}

fn isolated<B: PacketBuf, I: Io<B>>(
    n: &NodeCtx<'_, '_, '_, B, I>,
    rec: &PortRec,
    dir: PolicyDir,
) -> bool {
    n.cx.snap()
        .policy_set(rec.policy())
        .is_some_and(|s| s.isolated(dir))
}

/// A known connection under a newer policy generation: allowed again, or removed.
fn revalidate<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    v: &FlowView,
    rec: &PortRec,
    view: &lace_shared::tables::NetworkView<'_>,
    gen: u32,
) -> Result<(), Stop> {
    if v.gen == gen {
        return Ok(());
    }
    let ok = match v.origin {
        Origin::Egress => {
            let (peer, port) = v
                .nat
                .map_or((v.key.remote, v.key.rport), |t| (t.addr, t.port));
            v.nat.is_some_and(|t| t.hairpin)
                || allowed(n, rec, view, PolicyDir::Egress, peer, v.key.proto, port)
        }
        Origin::Ingress => {
            from_node(n, view, v.key.remote)
                || allowed(
                    n,
                    rec,
                    view,
                    PolicyDir::Ingress,
                    v.key.remote,
                    v.key.proto,
                    v.key.lport,
                )
        }
    };
    if ok {
        n.ct.table.set_gen(v.idx, gen);
        Ok(())
    } else {
        let w = n.ct.worker;
        n.ct.table.remove(v, &mut n.ct.cache, w);
        Err(Stop::Drop(DropReason::PolicyRevoked))
    }
}

/// Records a packet of a known connection: its state, its time.
fn touch<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    v: &FlowView,
    p: &Pkt,
    orig: bool,
    now: u32,
) {
    let next = next_state(v.state, v.seen, p, orig);
    if next != (v.state, v.seen) {
        n.ct.table.transition(v.idx, (v.state, v.seen), next);
    }
    n.ct.table.touch(v.idx, now);
}

/// Looks `key` up; an expired entry is removed and reads as absent.
fn find<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    key: &FlowKey,
    now: u32,
) -> Option<FlowView> {
    let t = &n.ct.table;
    let v = t.lookup(key, key.hash(t.seed()))?;
    if n.ct.expired(&v, now) {
        let w = n.ct.worker;
        n.ct.table.remove(&v, &mut n.ct.cache, w);
        return None;
    }
    Some(v)
}

/// Enters a NEW connection; a concurrent insert of the same connection elsewhere is taken as
/// it is. A translated connection whose reply key belongs to a connection that is over is
/// entered in its place (see [`reclaim`]).
fn enter<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    f: &FlowInit,
) -> Result<Option<FlowView>, Stop> {
    let w = n.ct.worker;
    let mut reclaimed = false;
    loop {
        match n.ct.table.insert(f, &mut n.ct.cache, w) {
            Ok(Inserted::New(_)) => return Ok(None),
            Ok(Inserted::Exists(v)) => return Ok(Some(v)),
            Err(InsertError::Full | InsertError::NoSlot) => {
                return Err(Stop::Drop(DropReason::FlowTableFull))
            }
            Err(InsertError::Collision) if !reclaimed && reclaim(n, f) => reclaimed = true,
            Err(InsertError::Collision) => return Err(Stop::Drop(DropReason::NatCollision)),
        }
    }
}

/// Frees the reply key `f` collided on when the connection holding it is over: expired (not
/// swept yet), reset, or closed both ways (TIME_WAIT) — as the kernel's conntrack lets a new
/// connection reuse a closed one's tuple. A client reusing its port toward another Service
/// with the same backend then gets the backend it was sent to (its affinity's, or the Maglev
/// table's) instead of another one. True when the key was freed.
fn reclaim<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, f: &FlowInit) -> bool {
    let Some(rk) = f.reverse_key() else {
        return false;
    };
    let t = &n.ct.table;
    let Some(v) = t.lookup(&rk, rk.hash(t.seed())) else {
        // Gone since the insert looked: free now.
        return true;
    };
    if !(n.ct.expired(&v, f.now) || matches!(v.state, TCP_TIME_WAIT | TCP_CLOSE)) {
        return false;
    }
    let w = n.ct.worker;
    n.ct.table.remove(&v, &mut n.ct.cache, w);
    true
}

/// The egress phase, in the zone of the pod that sent the packet.
fn egress<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slot: usize,
    p: &Pkt,
    now: u32,
) -> PhaseResult {
    let m = n.meta[slot];
    let zone = m.rx;
    let rec = n.cx.port(zone).ok_or(Stop::Drop(DropReason::UnknownPort))?;
    let (view, gen) = zone_net(n, &rec)?;
    if p.kind == Kind::Error {
        // An error the pod sends about a packet it received: the quote's source is the remote.
        let q = n.bufs[slot]
            .as_ref()
            .and_then(|b| parse(b.data(), p.l4 + 8, true))
            .ok_or(Stop::Drop(DropReason::Malformed))?;
        let key = FlowKey {
            zone: zone.0,
            proto: q.proto,
            v6: q.v6,
            remote: q.src,
            rport: q.sport,
            lport: q.dport,
        };
        if find(n, &key, now).is_some() || !isolated(n, &rec, PolicyDir::Egress) {
            return Ok(Phase::Continue);
        }
        return Err(Stop::Drop(DropReason::UnrelatedIcmpError));
    }
    if p.frag {
        if m.is(Meta::SERVICE) || m.is(Meta::REPLY_ONLY) || isolated(n, &rec, PolicyDir::Egress) {
            return Err(Stop::Drop(DropReason::Fragment));
        }
        return Ok(Phase::Continue);
    }
    let key = egress_key(zone.0, p);
    let hit = match find(n, &key, now) {
        Some(v) => Some(v),
        None => {
            // NEW.
            if m.is(Meta::REPLY_ONLY) {
                return Err(Stop::Drop(DropReason::OneWay));
            }
            // A Service connection whose reply key collides with another connection of the
            // same client port (two Services sharing a backend) tries other backends.
            let attempts = if m.is(Meta::SERVICE) { 4 } else { 1 };
            let mut found = None;
            for attempt in 0..attempts {
                let mut nat = None;
                let mut affinity = None;
                let (mut peer, mut port) = (p.dst, p.dport);
                if m.is(Meta::SERVICE) {
                    let b;
                    (b, affinity) = pick_backend(n, m.net, p, now, attempt)?;
                    let hairpin = b.addr == p.src;
                    nat = Some(Nat {
                        addr: b.addr,
                        port: b.port,
                        hairpin,
                    });
                    (peer, port) = (b.addr, b.port);
                }
                let self_hairpin = nat.is_some_and(|t| t.hairpin);
                if !self_hairpin && !allowed(n, &rec, &view, PolicyDir::Egress, peer, p.proto, port)
                {
                    return Err(Stop::Drop(DropReason::PolicyDenied));
                }
                let f = FlowInit {
                    key,
                    origin: Origin::Egress,
                    nat,
                    state: initial(p),
                    gen,
                    now,
                    timeout: 0,
                };
                match enter(n, &f) {
                    Ok(None) => {
                        if let Some(a) = affinity {
                            // Best effort: a full table still serves the connection.
                            let w = n.ct.worker;
                            let _ = n.ct.table.insert(&a, &mut n.ct.cache, w);
                        }
                        return Ok(match nat {
                            Some(t) => translate_forward(n, slot, p, &key, &t),
                            None => Phase::Continue,
                        });
                    }
                    Ok(Some(v)) => {
                        found = Some(v);
                        break;
                    }
                    Err(Stop::Drop(DropReason::NatCollision)) if attempt + 1 < attempts => {}
                    Err(e) => return Err(e),
                }
            }
            found
        }
    };
    let Some(v) = hit else {
        return Ok(Phase::Continue);
    };
    revalidate(n, &v, &rec, &view, gen)?;
    if v.reverse {
        // A hairpin's reply: the pod answers the Service address; it goes back to itself from
        // the Service's address and port, to the port it connected from.
        touch(n, &v, p, false, now);
        if let Some(pkt) = n.bufs[slot].as_mut() {
            rewrite(pkt, p, false, v.key.remote, v.key.rport);
            let q = parse(pkt.data(), L3, false).unwrap_or(*p);
            rewrite(pkt, &q, true, p.src, v.key.lport);
        }
        return Ok(Phase::Reroute);
    }
    let orig = v.origin == Origin::Egress;
    if m.is(Meta::REPLY_ONLY) && orig {
        return Err(Stop::Drop(DropReason::OneWay));
    }
    touch(n, &v, p, orig, now);
    match v.nat {
        Some(t) if orig => Ok(translate_forward(n, slot, p, &key, &t)),
        _ => Ok(Phase::Continue),
    }
}

/// Translates a packet of a translated connection in its opening direction: to the backend
/// (and, for a hairpin, from the Service address).
fn translate_forward<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slot: usize,
    p: &Pkt,
    key: &FlowKey,
    t: &Nat,
) -> Phase {
    let Some(pkt) = n.bufs[slot].as_mut() else {
        return Phase::Continue;
    };
    rewrite(pkt, p, true, t.addr, t.port);
    if t.hairpin {
        let q = parse(pkt.data(), L3, false).unwrap_or(*p);
        rewrite(pkt, &q, false, key.remote, p.sport);
    }
    Phase::Reroute
}

/// A backend for a NEW connection to a ClusterIP: the client's affinity if it has one and the
/// backend still takes connections, else the Maglev table's (`attempt` > 0: another draw, for a
/// connection whose first backend collided). With session affinity and no (usable) affinity
/// entry, also the entry to record once the connection is entered: the backend it actually
/// goes to, whatever draw that took.
fn pick_backend<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    net: lace_shared::types::NetworkId,
    p: &Pkt,
    now: u32,
    attempt: u32,
) -> Result<(Nat, Option<FlowInit>), Stop> {
    let snap = n.cx.snap();
    let svc = snap
        .service(&ServiceKey::new(net, ip_of_octets(p.dst), p.proto, p.dport))
        .ok_or(Stop::Reject)?;
    let affinity = svc.affinity_timeout_s();
    let akey = FlowKey {
        zone: AFFINITY_ZONE | svc.index(),
        proto: p.proto,
        v6: p.v6,
        remote: p.src,
        rport: 0,
        lport: 0,
    };
    if affinity.is_some() && attempt == 0 {
        if let Some(v) = find(n, &akey, now) {
            if let Some(t) = v.nat {
                let usable = {
                    // Two passes over the backends, no copy: whether any is ready (else the
                    // serving ones stand in, KEP-1669), then whether the remembered one counts.
                    let all = || (0..).map_while(|i| svc.backend(i));
                    let ready = all().any(|b| b.flags & BackendRec::READY != 0);
                    let wanted = if ready {
                        BackendRec::READY
                    } else {
                        BackendRec::SERVING
                    };
                    all().any(|b| b.addr == t.addr && b.port == t.port && b.flags & wanted != 0)
                };
                if usable {
                    n.ct.table.touch(v.idx, now);
                    let t = Nat {
                        addr: t.addr,
                        port: t.port,
                        hairpin: false,
                    };
                    return Ok((t, None));
                }
                let w = n.ct.worker;
                n.ct.table.remove(&v, &mut n.ct.cache, w);
            }
        }
    }
    let h = egress_key(0, p).hash(0x6c61_6365_6c62 ^ u64::from(attempt));
    let Some((_, b)) = svc.pick(h) else {
        // kube-proxy drops what a node-local Service cannot serve on this node (KEP-2086).
        return Err(if svc.node_local() {
            Stop::Drop(DropReason::NoLocalEndpoint)
        } else {
            Stop::Reject
        });
    };
    let t = Nat {
        addr: b.addr,
        port: b.port,
        hairpin: false,
    };
    let remember = affinity.map(|secs| FlowInit {
        key: akey,
        origin: Origin::Egress,
        nat: Some(t),
        state: AFFINITY,
        gen: 0,
        now,
        timeout: secs,
    });
    Ok((t, remember))
}

/// The ingress phase, in the zone of the pod the packet goes to.
fn ingress<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slot: usize,
    p: &Pkt,
    zone: PortId,
    rec: &PortRec,
    now: u32,
) -> PhaseResult {
    let m = n.meta[slot];
    let (view, gen) = zone_net(n, rec)?;
    if p.kind == Kind::Error {
        // An error about a packet the pod sent: the quote's destination is the remote.
        let q = n.bufs[slot]
            .as_ref()
            .and_then(|b| parse(b.data(), p.l4 + 8, true))
            .ok_or(Stop::Drop(DropReason::Malformed))?;
        let key = FlowKey {
            zone: zone.0,
            proto: q.proto,
            v6: q.v6,
            remote: q.dst,
            rport: q.dport,
            lport: q.sport,
        };
        return match find(n, &key, now) {
            Some(v) => {
                if let (true, Some(t)) = (v.reverse, v.nat) {
                    if !t.hairpin {
                        if let Some(pkt) = n.bufs[slot].as_mut() {
                            unnat_error(pkt, p, &q, v.key.remote, v.key.rport, Some(t.addr));
                        }
                    }
                }
                Ok(Phase::Continue)
            }
            None if m.is(Meta::GENERATED) || !isolated(n, rec, PolicyDir::Ingress) => {
                Ok(Phase::Continue)
            }
            None => Err(Stop::Drop(DropReason::UnrelatedIcmpError)),
        };
    }
    if m.is(Meta::GENERATED) {
        return Ok(Phase::Continue);
    }
    if p.frag {
        if isolated(n, rec, PolicyDir::Ingress) {
            return Err(Stop::Drop(DropReason::Fragment));
        }
        return Ok(Phase::Continue);
    }
    let key = ingress_key(zone.0, p);
    let v = match find(n, &key, now) {
        Some(v) => v,
        None => {
            if !from_node(n, &view, p.src)
                && !allowed(n, rec, &view, PolicyDir::Ingress, p.src, p.proto, p.dport)
            {
                return Err(Stop::Drop(DropReason::PolicyDenied));
            }
            let f = FlowInit {
                key,
                origin: Origin::Ingress,
                nat: None,
                state: initial(p),
                gen,
                now,
                timeout: 0,
            };
            match enter(n, &f)? {
                None => return Ok(Phase::Continue),
                Some(v) => v,
            }
        }
    };
    revalidate(n, &v, rec, &view, gen)?;
    match (v.reverse, v.nat) {
        (true, Some(t)) if t.hairpin => {
            // The translated packet of a hairpin arriving at the pod itself.
            touch(n, &v, p, true, now);
        }
        (true, Some(_)) => {
            // A backend's reply: from the Service address and port again.
            touch(n, &v, p, false, now);
            if let Some(pkt) = n.bufs[slot].as_mut() {
                rewrite(pkt, p, false, v.key.remote, v.key.rport);
            }
        }
        _ => {
            let orig = v.origin == Origin::Ingress;
            touch(n, &v, p, orig, now);
        }
    }
    Ok(Phase::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_pkt(flags: u8) -> Pkt {
        Pkt {
            v6: false,
            l3: 14,
            l4: 34,
            proto: PROTO_TCP,
            src: [0; 16],
            dst: [0; 16],
            sport: 1,
            dport: 2,
            tcp: flags,
            frag: false,
            kind: Kind::Plain,
        }
    }

    #[test]
    fn tcp_states_follow_the_handshake_and_the_close() {
        let syn = tcp_pkt(TH_SYN);
        let s = initial(&syn);
        assert_eq!(s, TCP_SYN_SENT);
        let (s, seen) = next_state(s, 0, &tcp_pkt(TH_SYN | TH_ACK), false);
        assert_eq!(s, TCP_SYN_RECV);
        let (s, seen) = next_state(s, seen, &tcp_pkt(TH_ACK), true);
        assert_eq!(s, TCP_ESTABLISHED);
        let (s, seen) = next_state(s, seen, &tcp_pkt(TH_FIN | TH_ACK), true);
        assert_eq!((s, seen), (TCP_CLOSING, FIN_ORIG));
        let (s, seen) = next_state(s, seen, &tcp_pkt(TH_FIN | TH_ACK), false);
        assert_eq!(s, TCP_TIME_WAIT);
        // A new SYN on the same ports reopens it.
        assert_eq!(next_state(s, seen, &syn, true), (TCP_SYN_SENT, 0));
        assert_eq!(
            next_state(TCP_ESTABLISHED, 0, &tcp_pkt(TH_RST), false).0,
            TCP_CLOSE
        );
        assert_eq!(
            initial(&tcp_pkt(TH_ACK)),
            TCP_ESTABLISHED,
            "picked up mid-stream"
        );
        let udp = Pkt {
            proto: PROTO_UDP,
            ..syn
        };
        assert_eq!(next_state(UNREPLIED, 0, &udp, true).0, UNREPLIED);
        assert_eq!(next_state(UNREPLIED, 0, &udp, false).0, REPLIED);
    }

    #[test]
    fn sctp_crc_is_the_crc32c_of_the_zeroed_packet() {
        let mut d = vec![0u8; 34];
        d.extend_from_slice(b"\x13\x88\x13\x89tagXcrc!rest");
        sctp_crc(&mut d, 34);
        let mut zeroed = d[34..].to_vec();
        zeroed[8..12].copy_from_slice(&[0; 4]);
        assert_eq!(d[42..46], checksum::crc32c(&zeroed).to_le_bytes());
    }
}
