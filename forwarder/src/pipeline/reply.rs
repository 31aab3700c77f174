//! Answers built in the buffer they answer: ARP and NDP for gateways and the underlay address,
//! ICMP echo, and ICMP errors (time exceeded, unreachable, too big) — all written through the
//! `wire` views and reprs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lace_shared::status::DropReason;
use lace_shared::tables::NetworkView;
use lace_shared::types::{MacAddr, NetworkKind, PortId, PortRec};

use super::cache::{Cx, NetCtx};
use super::input::L3;
use super::learn;
use super::lookup::{UNREACH_ADMIN, UNREACH_PORT};
use super::neigh::{Neighbor, UnderlayNeighbors};
use super::{Config, Io, Meta, NodeCtx, PacketBuf, Stage, Verdict, VEC_CAP};
use crate::wire::ethernet::{self, EtherType};
use crate::wire::icmpv6::{self, NeighborFlags};
use crate::wire::{arp, checksum, icmpv4, ipv4, ipv6, EthernetAddress, IpProtocol};

/// Hop limit / TTL of packets the forwarder originates.
const OWN_TTL: u8 = 64;
/// Largest ICMPv4 error (RFC 1812 §4.3.2.3: at most 576 bytes).
const ICMP4_MAX: usize = 576;
/// Largest ICMPv6 error (RFC 4443 §2.4(c): at most the minimum MTU).
const ICMP6_MAX: usize = 1280;
/// IPv4 + ICMPv4 headers in front of the quote.
const ICMP4_HEADERS: usize = ipv4::HEADER_LEN + icmpv4::HEADER_LEN;
/// IPv6 + ICMPv6 headers in front of the quote.
const ICMP6_HEADERS: usize = ipv6::HEADER_LEN + icmpv6::HEADER_LEN;
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// DSCP CS6 (network control, RFC 4594), the class of the errors the forwarder sends.
const DSCP_CS6: u8 = 48;

/// Runs `one` over every packet of the vector: the shape of the nodes off the fast path.
#[inline(always)]
fn each<B, I, F>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8], mut one: F)
where
    B: PacketBuf,
    I: Io<B>,
    F: FnMut(&Config, &UnderlayNeighbors, &mut B, &mut Meta, &mut Cx<'_, '_>) -> Verdict,
{
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        let v = one(n.cfg, n.neigh, pkt, &mut n.meta[slot], &mut n.cx);
        to[k] = n.resolve(i, v);
    }
    n.hand_over(frame, &to[..frame.len()]);
}

/// The MAC the forwarder answers ARP or NDP with for `target` in a pod's network: the
/// gateway's; on an l2 network also every endpoint's, from the neighbor table (synthetic
/// replies: ARP and NDP never cross the underlay). None: not answered.
#[inline]
fn answer_for(view: &NetworkView<'_>, ctx: &NetCtx, target: IpAddr) -> Option<MacAddr> {
    let gateway = match target {
        IpAddr::V4(a) => Some(a) == ctx.gw4,
        IpAddr::V6(a) => Some(a) == ctx.gw6,
    };
    if gateway {
        return Some(ctx.gw_mac);
    }
    (ctx.kind == NetworkKind::L2)
        .then(|| view.neighbor(target))
        .flatten()
}

/// Whether `addr` may be the source of a request or a routed packet: the endpoint's own
/// address, or — from a MAC learned on the port ([`Meta::LEARNED`], `learned` its network's
/// tables) — an address the neighbor table gives that MAC.
#[inline]
pub(super) fn own_address(
    port: &PortRec,
    learned: Option<&NetworkView<'_>>,
    addr: IpAddr,
    mac: EthernetAddress,
) -> bool {
    match learned {
        Some(view) => view.neighbor(addr) == Some(MacAddr(mac.0)),
        None => match addr {
            IpAddr::V4(a) => Some(a) == port.ipv4(),
            IpAddr::V6(a) => Some(a) == port.ipv6(),
        },
    }
}

/// Why a request for `target` is not answered: a duplicate-address probe on an l2 network
/// (from the unspecified address, for an address nobody holds) stays unanswered on purpose.
#[inline]
fn unanswered(ctx: &NetCtx, probe: bool) -> DropReason {
    if probe && ctx.kind == NetworkKind::L2 {
        DropReason::DadProbe
    } else {
        DropReason::NotGateway
    }
}

/// `arp-reply`: a pod asks for its gateway (or, on an l2 network, for another endpoint);
/// answer with that MAC. On an l2 network a gratuitous ARP goes to `l2-learn`.
///
/// The fast path: the common request — the endpoint asking for its gateway or, on an l2
/// network, for another endpoint's address — is answered in place and sent back out of the
/// port in the same loop ([`fast_arp_reply`]); every other packet takes the general checks
/// ([`arp_one`]).
pub(super) fn arp_reply<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    arp_reply_of(n, frame, None);
}

/// arp-reply or nd-reply (`stage`) of a vector pod-input classified whole, fused into it:
/// every packet is a request that node takes, and none has a [`Meta`] yet (`fresh` is what it
/// would hold: one is written only for a packet the fast answer leaves to the general checks).
pub(super) fn requests_fresh<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
    stage: Stage,
    fresh: Meta,
) {
    if stage == Stage::NdReply {
        nd_reply_of(n, frame, Some(fresh));
    } else {
        arp_reply_of(n, frame, Some(fresh));
    }
}

#[inline(always)]
fn arp_reply_of<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
    fresh: Option<Meta>,
) {
    let mut asking = Asker::of(n);
    answer_in_place(
        n,
        frame,
        Stage::ArpReply,
        fresh,
        |pkt| asking.as_mut().is_some_and(|a| fast_arp_reply(pkt, a)),
        |cfg, neigh, pkt, m, cx| {
            if m.rx == PortId::UPLINK {
                uplink_arp(cfg, neigh, pkt, m)
            } else {
                arp_one(pkt, m, cx)
            }
        },
    );
}

/// The loop of the nodes that answer a pod's requests: the common request is answered in
/// place by `fast` and sent straight back out of the receiving port (counted through `stage`
/// and tx); `fast` leaves every other packet unchanged for `general`, which decides it — with
/// its `Meta` set to `fresh` first, when the packets come without one (fused into pod-input).
#[inline(always)]
fn answer_in_place<B, I, F, G>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
    stage: Stage,
    fresh: Option<Meta>,
    mut fast: F,
    mut general: G,
) where
    B: PacketBuf,
    I: Io<B>,
    F: FnMut(&mut B) -> bool,
    G: FnMut(&Config, &UnderlayNeighbors, &mut B, &mut Meta, &mut Cx<'_, '_>) -> Verdict,
{
    let rx = n.rx;
    let mut rest = [0u8; VEC_CAP];
    let mut to = [Stage::Drop; VEC_CAP];
    let mut left = 0;
    let mut sent = 0u64;
    for &i in frame {
        let slot = usize::from(i);
        let Some(mut pkt) = n.bufs[slot].take() else {
            if let Some(m) = fresh {
                n.meta[slot] = m;
            }
            rest[left] = i;
            to[left] = n.gone(i);
            left += 1;
            continue;
        };
        if fast(&mut pkt) {
            n.io.send(rx, pkt);
            sent += 1;
            continue;
        }
        if let Some(m) = fresh {
            n.meta[slot] = m;
        }
        let v = general(n.cfg, n.neigh, &mut pkt, &mut n.meta[slot], &mut n.cx);
        n.bufs[slot] = Some(pkt);
        rest[left] = i;
        to[left] = n.resolve(i, v);
        left += 1;
    }
    n.through(&[stage, Stage::Tx], sent);
    n.hand_over(&rest[..left], &to[..left]);
}

/// The endpoint of a pod port and what it may ask for, as the fast ARP and NDP answers need
/// them: read once per call (every packet of a call arrives on one port).
#[derive(Debug, Clone, Copy)]
struct Asker<'a> {
    /// The endpoint's MAC.
    mac: [u8; 6],
    /// The endpoint's addresses.
    ipv4: Option<Ipv4Addr>,
    ipv6: Option<Ipv6Addr>,
    /// The network's gateway addresses and MAC.
    gw4: Option<Ipv4Addr>,
    gw6: Option<Ipv6Addr>,
    gw_mac: MacAddr,
    /// On an l2 network, its tables: every endpoint's address is answered from the neighbor
    /// table.
    neighbors: Option<NetworkView<'a>>,
    /// The last neighbor answers of the call, per family: a retried request is not looked up
    /// again.
    last4: Option<(Ipv4Addr, MacAddr)>,
    last6: Option<(Ipv6Addr, MacAddr)>,
}

impl<'a> Asker<'a> {
    /// The receiving port's endpoint, when it is a pod's (or the node's host interface).
    #[inline(always)]
    fn of<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, 'a, B, I>) -> Option<Asker<'a>> {
        let port = n.cx.port(n.rx).filter(|p| p.is_pod() || p.is_host())?;
        let ctx = n.cx.net_ctx(port.network())?;
        let neighbors = if ctx.kind == NetworkKind::L2 {
            Some(n.cx.view(port.network())?)
        } else {
            None
        };
        Some(Asker {
            mac: port.mac,
            ipv4: port.ipv4(),
            ipv6: port.ipv6(),
            gw4: ctx.gw4,
            gw6: ctx.gw6,
            gw_mac: ctx.gw_mac,
            neighbors,
            last4: None,
            last6: None,
        })
    }

    /// The MAC the general nodes answer the endpoint's ARP request for `target` with (see
    /// [`answer_for`]), and whether it is the gateway's; `None` for the endpoint's own address
    /// (the general nodes decide what that is).
    #[inline(always)]
    fn answer4(&mut self, target: Ipv4Addr) -> Option<(MacAddr, bool)> {
        let (own, gw) = (self.ipv4, self.gw4);
        answer_from(
            target,
            own,
            gw,
            self.gw_mac,
            self.neighbors,
            &mut self.last4,
        )
    }

    /// The same for a neighbor solicitation's target. The address stays a value of its own
    /// type: an `IpAddr` is built only for a neighbor table lookup.
    #[inline(always)]
    fn answer6(&mut self, target: Ipv6Addr) -> Option<(MacAddr, bool)> {
        let (own, gw) = (self.ipv6, self.gw6);
        answer_from(
            target,
            own,
            gw,
            self.gw_mac,
            self.neighbors,
            &mut self.last6,
        )
    }
}

/// [`Asker::answer4`] and [`Asker::answer6`] for one address family: `own` the endpoint's
/// address, `gateway` the gateway's, `last` the last neighbor answer of the call.
#[inline(always)]
fn answer_from<A: Copy + PartialEq + Into<IpAddr>>(
    target: A,
    own: Option<A>,
    gateway: Option<A>,
    gw_mac: MacAddr,
    neighbors: Option<NetworkView<'_>>,
    last: &mut Option<(A, MacAddr)>,
) -> Option<(MacAddr, bool)> {
    if Some(target) == own {
        return None;
    }
    if Some(target) == gateway {
        return Some((gw_mac, true));
    }
    match *last {
        Some((t, mac)) if t == target => Some((mac, false)),
        _ => {
            let mac = neighbors?.neighbor(target.into())?;
            *last = Some((target, mac));
            Some((mac, false))
        }
    }
}

/// The common ARP request — an Ethernet/IPv4 request from the endpoint (its MAC, in the frame
/// and the request, and its address) for its gateway or, on an l2 network, for another
/// endpoint's address — turned into the reply in place: what [`arp_one`] answers for it, byte
/// for byte. `false`: anything else, the packet unchanged.
#[inline(always)]
fn fast_arp_reply<B: PacketBuf>(pkt: &mut B, a: &mut Asker<'_>) -> bool {
    let Some(h) = pkt.head_mut::<{ L3 + arp::PACKET_LEN }>() else {
        return false;
    };
    let (eth, body) = h.split_at_mut(L3);
    let mut eth = ethernet::Frame::new_unchecked(eth);
    let mut arp = arp::Packet::new_unchecked(body);
    let asker = arp.sender_hardware_addr();
    if eth.src_addr().0 != a.mac
        || arp.hardware_type() != arp::Hardware::Ethernet
        || arp.protocol_type() != EtherType::Ipv4
        || arp.hardware_len() != 6
        || arp.protocol_len() != 4
        || arp.operation() != arp::Operation::Request
        || asker.0 != a.mac
        || Some(arp.sender_protocol_addr()) != a.ipv4
    {
        return false;
    }
    let (sender, target) = (arp.sender_protocol_addr(), arp.target_protocol_addr());
    let Some((answer, _)) = a.answer4(target) else {
        return false;
    };
    let answer = EthernetAddress(answer.0);
    arp.set_operation(arp::Operation::Reply);
    arp.set_target_hardware_addr(asker);
    arp.set_target_protocol_addr(sender);
    arp.set_sender_hardware_addr(answer);
    arp.set_sender_protocol_addr(target);
    eth.set_dst_addr(asker);
    eth.set_src_addr(answer);
    true
}

/// ARP on the uplink for one of the node's own IPv4 addresses there, on the VLAN it came on
/// (ADR 0054): a request is answered with the uplink's MAC (back on that VLAN), a reply (to
/// the node's request for a gateway) is consumed; either teaches the sender's MAC on that
/// VLAN, as the reverse path. Anything else is not for the node.
fn uplink_arp<B: PacketBuf>(
    cfg: &Config,
    neigh: &UnderlayNeighbors,
    pkt: &mut B,
    m: &mut Meta,
) -> Verdict {
    let d = pkt.data_mut();
    let req = arp_request(d)?;
    let (sender, target) = (req.sender_protocol_addr, req.target_protocol_addr);
    if target == sender
        || !cfg.uplink_hosts.has4(m.vlan, target)
        || sender.is_unspecified()
        || req.sender_hardware_addr.is_multicast()
    {
        return Err(DropReason::NotForUs);
    }
    let who = Neighbor {
        vlan: m.vlan,
        addr: sender.to_ipv6_mapped(),
    };
    neigh.learn(who, MacAddr(req.sender_hardware_addr.0));
    if req.operation != arp::Operation::Request {
        m.flags |= Meta::CONSUMED;
        return Ok(Stage::Drop);
    }
    answer_arp(d, &req, EthernetAddress(cfg.uplink_mac.0));
    m.tx = PortId::UPLINK;
    Ok(Stage::Tx)
}

/// The ARP packet in frame `d`, whose sender hardware address must be the frame's source.
#[inline(always)]
fn arp_request(d: &[u8]) -> Result<arp::Repr, DropReason> {
    let frame_src = ethernet::Frame::new_unchecked(d).src_addr();
    let view = d
        .get(L3..)
        .and_then(|b| arp::Packet::new_checked(b).ok())
        .ok_or(DropReason::Malformed)?;
    let req = arp::Repr::parse(&view).map_err(|_| DropReason::Malformed)?;
    if req.sender_hardware_addr != frame_src {
        return Err(DropReason::SpoofedMac);
    }
    Ok(req)
}

/// Turns frame `d`, request `req`, into its reply: the target's address is at `answer`, sent
/// from `answer` to the asker.
#[inline(always)]
fn answer_arp(d: &mut [u8], req: &arp::Repr, answer: EthernetAddress) {
    arp::Repr {
        operation: arp::Operation::Reply,
        sender_hardware_addr: answer,
        sender_protocol_addr: req.target_protocol_addr,
        target_hardware_addr: req.sender_hardware_addr,
        target_protocol_addr: req.sender_protocol_addr,
    }
    .emit(&mut arp::Packet::new_unchecked(&mut d[L3..]));
    let mut eth = ethernet::Frame::new_unchecked(d);
    eth.set_dst_addr(req.sender_hardware_addr);
    eth.set_src_addr(answer);
}

/// One ARP packet from a pod, every case: answered with the gateway's MAC or, on an l2
/// network, another endpoint's (synthetic replies), handed to `l2-learn` (a gratuitous ARP on
/// an l2 network), or dropped for its reason.
fn arp_one<B: PacketBuf>(pkt: &mut B, m: &mut Meta, cx: &mut Cx<'_, '_>) -> Verdict {
    let port = cx.port(m.rx).ok_or(DropReason::UnknownPort)?;
    let (net, ctx) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
    let d = pkt.data_mut();
    // pod-input checked the frame's source: the port's MAC, or on a learning network one
    // learned on the port or (FOREIGN) one only an announcement may carry.
    let req = arp_request(d)?;
    let frame_src = req.sender_hardware_addr;
    let sender = req.sender_protocol_addr;
    let target = req.target_protocol_addr;
    let gratuitous = target == sender && !sender.is_unspecified();
    if gratuitous && ctx.kind == NetworkKind::L2 {
        return Ok(Stage::L2Learn);
    }
    if m.is(Meta::FOREIGN) {
        return Err(DropReason::SpoofedMac);
    }
    // A probe (RFC 5227) has sender 0.0.0.0; anything else must be the endpoint's address
    // (or, for a learned MAC, the address learned with it).
    if sender != Ipv4Addr::UNSPECIFIED
        && !own_address(
            &port,
            m.is(Meta::LEARNED).then_some(&net),
            IpAddr::V4(sender),
            frame_src,
        )
    {
        return Err(DropReason::SpoofedSource);
    }
    if req.operation != arp::Operation::Request || gratuitous {
        // Replies and gratuitous announcements are not answered.
        return Err(DropReason::NotGateway);
    }
    if sender == Ipv4Addr::UNSPECIFIED && Some(target) == port.ipv4() {
        // The endpoint probing for its own address: it holds it, nobody else does.
        return Err(unanswered(&ctx, true));
    }
    let mac = answer_for(&net, &ctx, IpAddr::V4(target))
        .ok_or_else(|| unanswered(&ctx, sender == Ipv4Addr::UNSPECIFIED))?;
    answer_arp(d, &req, EthernetAddress(mac.0));
    m.tx = m.rx;
    Ok(Stage::Tx)
}

/// `nd-reply`: neighbor solicitations for a pod network's gateway (pod side) or the node's
/// underlay address (uplink side) are answered with an advertisement; advertisements and
/// solicitations on the uplink teach the underlay neighbor cache.
///
/// The fast path: the common solicitation — the endpoint asking for its gateway or, on an l2
/// network, for another endpoint's address — is answered in place and sent back out of the
/// port in the same loop ([`fast_nd_reply`]); every other packet takes the general checks
/// ([`nd_one`]).
pub(super) fn nd_reply<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    nd_reply_of(n, frame, None);
}

#[inline(always)]
fn nd_reply_of<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
    fresh: Option<Meta>,
) {
    let Some(mut a) = Asker::of(n) else {
        if let Some(m) = fresh {
            for &i in frame {
                n.meta[usize::from(i)] = m;
            }
        }
        return each(n, frame, nd_one);
    };
    answer_in_place(
        n,
        frame,
        Stage::NdReply,
        fresh,
        |pkt| fast_nd_reply(pkt, &mut a),
        nd_one,
    );
}

/// Bytes of the common solicitation after the Ethernet header: the IPv6 header, then the
/// 24-byte NS and its 8-byte source link-layer address option — and of its answer, an NA
/// with the target link-layer address option.
const ND_LEN: usize = ipv6::HEADER_LEN + 32;

/// The common neighbor solicitation — from the endpoint (its MAC, its address or a link-local
/// one, hop limit 255, a valid checksum, only the source link-layer option, no padding: nd-reply
/// only sees packets whose IPv6 header was checked and trimmed) for its gateway or, on an l2
/// network, for another endpoint's address — turned into the advertisement in place: what
/// [`nd_one`] answers for it, byte for byte. `false`: anything else, the packet unchanged.
///
/// Every sum is taken straight from the packet's bytes: the addresses of the IPv6 header are
/// followed by the ICMPv6 message, so the pseudo-header's addresses and the message are one
/// run of 64 bytes, and the answer's sum is made of the asker's and the target's sums.
#[inline(never)]
fn fast_nd_reply<B: PacketBuf>(pkt: &mut B, a: &mut Asker<'_>) -> bool {
    const ICMP: usize = L3 + ipv6::HEADER_LEN;
    const SRC: usize = L3 + 8;
    const DST: usize = L3 + 24;
    const TARGET: usize = ICMP + 8;
    const END: usize = L3 + ND_LEN;
    if pkt.len() != END {
        return false;
    }
    let Some(h) = pkt.head_mut::<END>() else {
        return false;
    };
    let ip = ipv6::Packet::new_unchecked(&h[L3..]);
    // Version 6, NS (135) with code 0 in 32 bytes of ICMPv6 at hop limit 255, the option a
    // source link-layer address (type 1, 8 bytes).
    if h[6..12] != a.mac[..]
        || ip.version() != 6
        || ip.payload_len() != 32
        || ip.next_header() != IpProtocol::Icmpv6
        || ip.hop_limit() != 255
        || h[ICMP] != 135
        || h[ICMP + 1] != 0
        || h[ICMP + 24..ICMP + 26] != [1, 1]
    {
        return false;
    }
    let asker_bytes: [u8; 16] = h[SRC..DST].try_into().unwrap_or([0; 16]);
    let target_bytes: [u8; 16] = h[TARGET..TARGET + 16].try_into().unwrap_or([0xff; 16]);
    let (asker, target) = (Ipv6Addr::from(asker_bytes), Ipv6Addr::from(target_bytes));
    // The endpoint's own address, or a link-local one (the general nodes do not check those).
    if Some(asker) != a.ipv6 && !asker.is_unicast_link_local() {
        return false;
    }
    // The pseudo-header's constants: payload length 32, next header 58.
    let sum = checksum::combine(&[checksum::data(&h[SRC..END]), 32, 58]);
    if target.is_multicast() || sum != 0xffff {
        return false;
    }
    let Some((answer, router)) = a.answer6(target) else {
        return false;
    };
    let flags = if router {
        NeighborFlags::ROUTER.bits()
    } else {
        0
    } | NeighborFlags::SOLICITED.bits()
        | NeighborFlags::OVERRIDE.bits();
    // Its checksum: the pseudo-header (the same addresses and constants, swapped), the header
    // words 136/0 and flags, the target, the option's type and length 2/1 and MAC.
    let s_target = checksum::data(&h[TARGET..TARGET + 16]);
    let na_sum = checksum::combine(&[
        checksum::data(&h[SRC..DST]),
        32,
        58,
        s_target,
        s_target,
        0x8800,
        u16::from(flags) << 8,
        0x0201,
        checksum::data(&answer.0),
    ]);
    // Ethernet: back to the asker, from the answer.
    h.copy_within(6..12, 0);
    h[6..12].copy_from_slice(&answer.0);
    // IPv6 (the general nodes' own header): traffic class and flow label 0, from the target
    // to the asker.
    h[L3..L3 + 4].copy_from_slice(&[0x60, 0, 0, 0]);
    h[SRC..DST].copy_from_slice(&target_bytes);
    h[DST..ICMP].copy_from_slice(&asker_bytes);
    // NA: type 136, flags, the same target, the target link-layer address option.
    let icmp = &mut h[ICMP..];
    icmp[..8].copy_from_slice(&[136, 0, 0, 0, flags, 0, 0, 0]);
    icmp[2..4].copy_from_slice(&checksum::finish(na_sum).to_be_bytes());
    icmp[24] = 2;
    icmp[26..32].copy_from_slice(&answer.0);
    true
}

fn nd_one<B: PacketBuf>(
    cfg: &Config,
    neigh: &UnderlayNeighbors,
    pkt: &mut B,
    m: &mut Meta,
    cx: &mut Cx<'_, '_>,
) -> Verdict {
    let d = pkt.data();
    let frame_src = ethernet::Frame::new_unchecked(d).src_addr();
    let ip = ipv6::Packet::new_unchecked(&d[L3..]);
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    // RFC 4861 §7.1: hop limit 255 proves the message was not forwarded.
    if ip.hop_limit() != 255 {
        return Err(DropReason::Malformed);
    }
    let icmp = icmpv6::Packet::new_checked(ip.payload()).map_err(|_| DropReason::Malformed)?;
    let repr = icmpv6::Repr::parse(&src, &dst, &icmp).map_err(|_| DropReason::Malformed)?;
    let uplink = m.rx == PortId::UPLINK;
    let (target, mac, router) = match repr {
        icmpv6::Repr::NeighborSolicit {
            target_addr,
            source_lladdr,
        } => {
            if uplink {
                let underlay = m.vlan == 0 && target_addr == cfg.underlay_addr;
                if !underlay && !cfg.uplink_hosts.has6(m.vlan, target_addr) {
                    return Err(DropReason::NotGateway);
                }
                // A solicitation carries the sender's MAC: learn it, as the reverse path.
                if let (Some(ll), false) = (source_lladdr, src.is_unspecified()) {
                    let who = Neighbor {
                        vlan: m.vlan,
                        addr: src,
                    };
                    neigh.learn(who, MacAddr(ll.0));
                }
                (target_addr, cfg.uplink_mac, false)
            } else {
                let port = cx.port(m.rx).ok_or(DropReason::UnknownPort)?;
                let (view, ctx) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
                if m.is(Meta::FOREIGN) {
                    return Err(DropReason::SpoofedMac);
                }
                if !(src.is_unspecified()
                    || src.is_unicast_link_local()
                    || own_address(
                        &port,
                        m.is(Meta::LEARNED).then_some(&view),
                        IpAddr::V6(src),
                        frame_src,
                    ))
                {
                    return Err(DropReason::SpoofedSource);
                }
                if src.is_unspecified() && Some(target_addr) == port.ipv6() {
                    // Duplicate address detection of the endpoint's own address.
                    return Err(unanswered(&ctx, true));
                }
                let mac = answer_for(&view, &ctx, IpAddr::V6(target_addr))
                    .ok_or_else(|| unanswered(&ctx, src.is_unspecified()))?;
                (target_addr, mac, Some(target_addr) == ctx.gw6)
            }
        }
        icmpv6::Repr::NeighborAdvert {
            target_addr,
            target_lladdr,
            ..
        } if uplink => {
            let mac = target_lladdr.unwrap_or(frame_src);
            let who = Neighbor {
                vlan: m.vlan,
                addr: target_addr,
            };
            neigh.learn(who, MacAddr(mac.0));
            m.flags |= Meta::CONSUMED;
            return Ok(Stage::Drop);
        }
        icmpv6::Repr::NeighborAdvert { flags, .. } if learn::unsolicited(flags, &src) => {
            // An endpoint announcing an address (pod side): l2-learn decides.
            let ctx = cx.net_ctx(m.net).ok_or(DropReason::NoNetwork)?;
            if ctx.kind != NetworkKind::L2 {
                return Err(DropReason::NotGateway);
            }
            return Ok(Stage::L2Learn);
        }
        _ if m.is(Meta::FOREIGN) => return Err(DropReason::SpoofedMac),
        _ => return Err(DropReason::NotGateway),
    };
    // Answer: to the soliciting unicast address, or all-nodes for a DAD probe (§7.2.4).
    let (reply_dst, flags, eth_dst) = if src.is_unspecified() {
        (
            ALL_NODES,
            NeighborFlags::OVERRIDE,
            ethernet::Address::ipv6_multicast(&ALL_NODES),
        )
    } else {
        let router = if router {
            NeighborFlags::ROUTER
        } else {
            NeighborFlags::EMPTY
        };
        (
            src,
            NeighborFlags::from_bits_truncate(
                router.bits() | NeighborFlags::SOLICITED.bits() | NeighborFlags::OVERRIDE.bits(),
            ),
            frame_src,
        )
    };
    let na = icmpv6::Repr::NeighborAdvert {
        flags,
        target_addr: target,
        target_lladdr: Some(EthernetAddress(mac.0)),
    };
    let len = na.buffer_len();
    if !pkt.truncate(L3 + ipv6::HEADER_LEN) || !pkt.append(len) {
        return Err(DropReason::NoHeadroom);
    }
    let d = pkt.data_mut();
    own_ipv6(target, reply_dst, len, 255).emit(&mut ipv6::Packet::new_unchecked(&mut d[L3..]));
    na.emit(
        &target,
        &reply_dst,
        &mut icmpv6::Packet::new_unchecked(&mut d[L3 + ipv6::HEADER_LEN..]),
    );
    let mut eth = ethernet::Frame::new_unchecked(d);
    eth.set_dst_addr(eth_dst);
    eth.set_src_addr(EthernetAddress(mac.0));
    m.tx = m.rx;
    Ok(Stage::Tx)
}

/// The IPv6 header of a packet the forwarder originates.
fn own_ipv6(src: Ipv6Addr, dst: Ipv6Addr, payload_len: usize, hop_limit: u8) -> ipv6::Repr {
    ipv6::Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Icmpv6,
        payload_len,
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
    }
}

/// The IPv4 header of an ICMP message the forwarder originates.
fn own_ipv4(src: Ipv4Addr, dst: Ipv4Addr, payload_len: usize, dscp: u8) -> ipv4::Repr {
    ipv4::Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: IpProtocol::Icmp,
        payload_len,
        ttl: OWN_TTL,
        dscp,
        ecn: 0,
        ident: 0,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
    }
}

/// `icmp-echo`: an echo request to a gateway (answered and routed back like any packet) or to
/// the underlay address (answered straight out of the uplink).
pub(super) fn icmp_echo<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    each(n, frame, |cfg, _, pkt, m, cx| {
        if pkt.data().get(L3).is_some_and(|v| v >> 4 == 4) {
            echo4(cfg, pkt, m, cx)
        } else {
            echo6(cfg, pkt, m, cx)
        }
    });
}

fn echo4<B: PacketBuf>(cfg: &Config, pkt: &mut B, m: &mut Meta, cx: &mut Cx<'_, '_>) -> Verdict {
    let d = pkt.data_mut();
    // Every way here (pod-input, a Receive route) checked the header.
    let ip = ipv4::Packet::new_unchecked(&d[L3..]);
    if ip.protocol() != IpProtocol::Icmp || ip.is_fragment() {
        return Err(DropReason::ReceiveUnsupported);
    }
    let (src, me, ihl) = (ip.src_addr(), ip.dst_addr(), ip.header_len());
    let icmp =
        icmpv4::Packet::new_checked(ip.payload()).map_err(|_| DropReason::ReceiveUnsupported)?;
    if icmp.msg_type() != icmpv4::Message::EchoRequest {
        return Err(DropReason::ReceiveUnsupported);
    }
    if !icmp.verify_checksum() {
        return Err(DropReason::Malformed);
    }
    // The node's own address on the uplink (uplink-input checked it), else a gateway.
    let uplink = m.rx == PortId::UPLINK && cfg.uplink_hosts.has4(m.vlan, me);
    if !uplink {
        let (_, ctx) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
        if ctx.gw4 != Some(me) {
            return Err(DropReason::ReceiveUnsupported);
        }
    }
    let payload = ip.payload().len();
    let mut icmp = icmpv4::Packet::new_unchecked(&mut d[L3 + ihl..L3 + ihl + payload]);
    icmp.set_msg_type(icmpv4::Message::EchoReply);
    // Type 8 → 0 changes one 16-bit word of the checksummed message (RFC 1624).
    icmp.set_checksum(checksum::update_u16(icmp.checksum(), 0x0800, 0x0000));
    // Options are not echoed: the reply is a plain 20-byte header.
    if ihl > ipv4::HEADER_LEN {
        d.copy_within(L3 + ihl..L3 + ihl + payload, L3 + ipv4::HEADER_LEN);
        pkt.truncate(L3 + ipv4::HEADER_LEN + payload);
    }
    let d = pkt.data_mut();
    own_ipv4(me, src, payload, 0).emit(&mut ipv4::Packet::new_unchecked(&mut d[L3..]));
    if uplink {
        return Ok(straight_back(cfg, d, m));
    }
    m.flags |= Meta::GENERATED;
    Ok(Stage::Ip4Lookup)
}

/// An answer to a request on the uplink goes straight back to the sender's MAC, from the
/// uplink's, on the VLAN the request came on (`m.vlan`: tx tags it).
fn straight_back(cfg: &Config, d: &mut [u8], m: &mut Meta) -> Stage {
    let mut eth = ethernet::Frame::new_unchecked(d);
    let sender = eth.src_addr();
    eth.set_dst_addr(sender);
    eth.set_src_addr(EthernetAddress(cfg.uplink_mac.0));
    m.tx = PortId::UPLINK;
    Stage::Tx
}

fn echo6<B: PacketBuf>(cfg: &Config, pkt: &mut B, m: &mut Meta, cx: &mut Cx<'_, '_>) -> Verdict {
    let d = pkt.data_mut();
    let ip = ipv6::Packet::new_unchecked(&d[L3..]);
    let (src, me) = (ip.src_addr(), ip.dst_addr());
    if ip.next_header() != IpProtocol::Icmpv6 {
        return Err(DropReason::ReceiveUnsupported);
    }
    let icmp =
        icmpv6::Packet::new_checked(ip.payload()).map_err(|_| DropReason::ReceiveUnsupported)?;
    if icmp.msg_type() != icmpv6::Message::EchoRequest {
        return Err(DropReason::ReceiveUnsupported);
    }
    if !icmp.verify_checksum(&src, &me) {
        return Err(DropReason::Malformed);
    }
    let underlay = m.rx == PortId::UPLINK
        && ((m.vlan == 0 && me == cfg.underlay_addr) || cfg.uplink_hosts.has6(m.vlan, me));
    if !underlay {
        let (_, ctx) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
        if ctx.gw6 != Some(me) {
            return Err(DropReason::ReceiveUnsupported);
        }
    }
    let mut ip = ipv6::Packet::new_unchecked(&mut d[L3..]);
    ip.set_src_addr(me);
    ip.set_dst_addr(src);
    ip.set_hop_limit(OWN_TTL);
    let mut icmp = icmpv6::Packet::new_unchecked(ip.payload_mut());
    icmp.set_msg_type(icmpv6::Message::EchoReply);
    // Swapping source and destination leaves the pseudo-header sum unchanged.
    icmp.set_checksum(checksum::update_u16(icmp.checksum(), 128 << 8, 129 << 8));
    if underlay {
        // The node's own echo on the uplink.
        return Ok(straight_back(cfg, d, m));
    }
    m.flags |= Meta::GENERATED;
    Ok(Stage::Ip6Lookup)
}

/// `icmp-error`: the packet could not be forwarded (`m.reason`); it is counted as dropped and
/// turned, in place, into the ICMP error that tells its sender, sourced from the network's
/// gateway and routed like any packet. RFC 1812 §4.3.2.7 / RFC 4443 §2.4(e): never about an
/// ICMP error, a non-first fragment, or a multicast/unspecified source.
pub(super) fn icmp_error<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        let m = &mut n.meta[slot];
        n.drops[m.reason as usize] += 1;
        let v = match n.cx.net(m.net) {
            None => Err(DropReason::NoNetwork),
            Some((_, ctx)) => {
                if pkt.data().get(L3).is_some_and(|v| v >> 4 == 4) {
                    error4(pkt, m, ctx.gw4)
                } else {
                    error6(pkt, m, ctx.gw6)
                }
            }
        };
        let v = match v {
            Ok(Some(to)) => Ok(to),
            Ok(None) => {
                // No error may be sent about this packet; it was counted under its own reason,
                // `icmp-error-suppressed` counts the error not sent.
                n.drops[DropReason::IcmpErrorSuppressed as usize] += 1;
                m.flags |= Meta::CONSUMED;
                Ok(Stage::Drop)
            }
            Err(r) => Err(r),
        };
        to[k] = n.resolve(i, v);
    }
    n.hand_over(frame, &to[..frame.len()]);
}

/// The ICMPv4 error for `m.reason` in place of the packet; `None`: none may be sent.
fn error4<B: PacketBuf>(
    pkt: &mut B,
    m: &mut Meta,
    gw: Option<Ipv4Addr>,
) -> Result<Option<Stage>, DropReason> {
    let d = pkt.data();
    let ip = ipv4::Packet::new_unchecked(&d[L3..]);
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let about_error = ip.protocol() == IpProtocol::Icmp
        && ip.payload().first().is_some_and(|&t| {
            !matches!(
                icmpv4::Message::from(t),
                icmpv4::Message::EchoReply
                    | icmpv4::Message::EchoRequest
                    | icmpv4::Message::Timestamp
                    | icmpv4::Message::TimestampReply
            )
        });
    let bad_src = src.is_unspecified() || src.is_broadcast() || src.is_multicast();
    let Some(gw) = gw else {
        return Ok(None);
    };
    if ip.frag_offset() != 0 || about_error || bad_src || dst.is_multicast() {
        return Ok(None);
    }
    // The invoking packet's leading bytes, copied out before the headers go in front of them.
    let mut quote = [0u8; ICMP4_MAX - ICMP4_HEADERS];
    let q = (d.len() - L3).min(quote.len());
    quote[..q].copy_from_slice(&d[L3..L3 + q]);
    let data = &quote[..q];
    let repr = match m.reason {
        DropReason::TtlExceeded => icmpv4::Repr::TimeExceeded {
            reason: icmpv4::TimeExceeded::TtlExpired,
            data,
        },
        DropReason::TooBig => icmpv4::Repr::DstUnreachable {
            reason: icmpv4::DstUnreachable::FragRequired,
            next_hop_mtu: m.param as u16,
            data,
        },
        _ => icmpv4::Repr::DstUnreachable {
            reason: match m.param {
                UNREACH_ADMIN => icmpv4::DstUnreachable::CommProhibited,
                UNREACH_PORT => icmpv4::DstUnreachable::PortUnreachable,
                _ => icmpv4::DstUnreachable::NetUnreachable,
            },
            next_hop_mtu: 0,
            data,
        },
    };
    if !pkt.truncate(L3 + q) || !pkt.prepend(ICMP4_HEADERS) {
        return Err(DropReason::NoHeadroom);
    }
    // The error is an ordinary packet, whatever the one it quotes was.
    pkt.set_gso(None);
    let d = pkt.data_mut();
    own_ipv4(gw, src, repr.buffer_len(), DSCP_CS6)
        .emit(&mut ipv4::Packet::new_unchecked(&mut d[L3..]));
    repr.emit(&mut icmpv4::Packet::new_unchecked(
        &mut d[L3 + ipv4::HEADER_LEN..],
    ));
    ethernet::Frame::new_unchecked(d).set_ethertype(EtherType::Ipv4);
    m.flags |= Meta::GENERATED;
    Ok(Some(Stage::Ip4Lookup))
}

/// The ICMPv6 error for `m.reason` in place of the packet; `None`: none may be sent.
fn error6<B: PacketBuf>(
    pkt: &mut B,
    m: &mut Meta,
    gw: Option<Ipv6Addr>,
) -> Result<Option<Stage>, DropReason> {
    let d = pkt.data();
    let ip = ipv6::Packet::new_unchecked(&d[L3..]);
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let about_error = ip.next_header() == IpProtocol::Icmpv6
        && ip
            .payload()
            .first()
            .is_some_and(|&t| icmpv6::Message::from(t).is_error());
    let Some(gw) = gw else {
        return Ok(None);
    };
    if about_error || src.is_unspecified() || src.is_multicast() || dst.is_multicast() {
        return Ok(None);
    }
    let mut quote = [0u8; ICMP6_MAX - ICMP6_HEADERS];
    let q = (d.len() - L3).min(quote.len());
    quote[..q].copy_from_slice(&d[L3..L3 + q]);
    let data = &quote[..q];
    let repr = match m.reason {
        DropReason::TtlExceeded => icmpv6::Repr::TimeExceeded {
            reason: icmpv6::TimeExceeded::HopLimitExceeded,
            data,
        },
        DropReason::TooBig => icmpv6::Repr::PktTooBig { mtu: m.param, data },
        _ => icmpv6::Repr::DstUnreachable {
            reason: match m.param {
                UNREACH_ADMIN => icmpv6::DstUnreachable::AdminProhibit,
                UNREACH_PORT => icmpv6::DstUnreachable::PortUnreachable,
                _ => icmpv6::DstUnreachable::NoRoute,
            },
            data,
        },
    };
    if !pkt.truncate(L3 + q) || !pkt.prepend(ICMP6_HEADERS) {
        return Err(DropReason::NoHeadroom);
    }
    // The error is an ordinary packet, whatever the one it quotes was.
    pkt.set_gso(None);
    let d = pkt.data_mut();
    let len = repr.buffer_len();
    own_ipv6(gw, src, len, OWN_TTL).emit(&mut ipv6::Packet::new_unchecked(&mut d[L3..]));
    repr.emit(
        &gw,
        &src,
        &mut icmpv6::Packet::new_unchecked(&mut d[L3 + ipv6::HEADER_LEN..]),
    );
    ethernet::Frame::new_unchecked(d).set_ethertype(EtherType::Ipv6);
    m.flags |= Meta::GENERATED;
    Ok(Some(Stage::Ip6Lookup))
}
