//! The input nodes: `pod-input` (isolation and anti-spoofing) and `uplink-input` (IPv6 to
//! this node or to a local SID), and the IP header checks every IP node relies on.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lace_shared::learn::{LearnEvent, LearnKind};
use lace_shared::status::DropReason;
use lace_shared::types::{L2Hop, MacAddr, NetworkId, NetworkKind, PortId, PortRec, SidBehavior};

use super::bridge;
use super::cache::{Cx, NetCtx};
use super::lookup;
use super::reply::{self, own_address};
use super::srv6;
use super::{vlan, Io, Meta, NodeCtx, PacketBuf, Stage, UplinkHosts, Verdict, VEC_CAP};
use crate::wire::ethernet::{self, EtherType};
use crate::wire::{icmpv6, ipv4, ipv6, EthernetAddress, IpProtocol};

/// Ethernet header length; every IP node finds the IP header here.
pub(super) const L3: usize = ethernet::HEADER_LEN;

/// Validates the IPv4 header at [`L3`] (version, lengths, checksum) and trims Ethernet
/// padding after its Total Length. `as_received`: the header is the one the port received, so
/// the NIC's checksum verdict, when it gave one, stands for the sum.
#[inline(always)]
pub(super) fn check_ipv4<B: PacketBuf>(pkt: &mut B, as_received: bool) -> Result<(), DropReason> {
    let len = pkt.len();
    // The fixed header, at fixed offsets (no bounds checks); options only in the slow case.
    let h = pkt
        .head::<{ L3 + ipv4::HEADER_LEN }>()
        .ok_or(DropReason::Malformed)?;
    let ip = ipv4::Packet::new_unchecked(&h[L3..]);
    let (ihl, total) = (ip.header_len(), usize::from(ip.total_len()));
    if ip.version() != 4 || ihl < ipv4::HEADER_LEN || total < ihl || L3 + total > len {
        return Err(DropReason::Malformed);
    }
    let verdict = if as_received {
        pkt.rx_ipv4_checksum()
    } else {
        None
    };
    let valid = verdict.unwrap_or_else(|| {
        if ihl == ipv4::HEADER_LEN {
            ip.verify_checksum()
        } else {
            ipv4::Packet::new_unchecked(&pkt.data()[L3..]).verify_checksum()
        }
    });
    if !valid {
        return Err(DropReason::Malformed);
    }
    if len > L3 + total {
        pkt.truncate(L3 + total);
    }
    Ok(())
}

/// Validates the IPv6 header at [`L3`] (version, payload length) and trims Ethernet padding.
#[inline]
pub(super) fn check_ipv6<B: PacketBuf>(pkt: &mut B) -> Result<(), DropReason> {
    let d = pkt.data();
    let ip = d
        .get(L3..)
        .and_then(|b| ipv6::Packet::new_checked(b).ok())
        .ok_or(DropReason::Malformed)?;
    let end = L3 + ipv6::HEADER_LEN + usize::from(ip.payload_len());
    if d.len() > end {
        pkt.truncate(end);
    }
    Ok(())
}

/// The ICMPv6 type of a packet whose IPv6 header was checked, if it is ICMPv6 with a type.
#[inline]
pub(super) fn icmpv6_type(ip: &ipv6::Packet<&[u8]>) -> Option<icmpv6::Message> {
    (ip.next_header() == IpProtocol::Icmpv6)
        .then(|| ip.payload().first().map(|&t| icmpv6::Message::from(t)))
        .flatten()
}

/// `pod-input`: frames from one pod port (all packets of a call arrive on one port). The port
/// decides the network (isolation); the source MAC and address must be the endpoint's
/// (anti-spoofing; a transit endpoint's source address is not checked: it forwards others'
/// packets, ADR 0057) — on an l2 network with learning, the source MAC may also be one the FDB
/// places on this port (reported as seen at most once per aging time / 4), or any MAC for an
/// announcement (`l2-learn` decides). Frames from the node's host interface
/// ([`PortRec::is_host`]) come in here too, into the host network: their source MAC is the host
/// side's, their source address any of the node's (the node's own traffic is not checked
/// against an endpoint).
///
/// The common packet — IPv4 from the endpoint, routed — is checked in one pass at fixed
/// offsets ([`pod_ipv4`]) and writes nothing but its FIB key; when the whole vector is such
/// packets, it goes on to the lookup and from there, when it shares one next hop, to the
/// encapsulation or delivery and out, in one call chain without any per-packet bookkeeping
/// ([`lookup::ip4_fresh`]). Every other packet — a learned or foreign source MAC among them —
/// takes the general checks ([`classify_pod`]).
pub(super) fn pod_input<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    let rx = n.rx;
    // Resolved once for the vector: the port's record and its network.
    let bound = match n.cx.port(rx) {
        Some(p) if p.is_pod() || p.is_host() => match n.cx.net_ctx(p.network()) {
            Some(ctx) if matches!(ctx.kind, NetworkKind::L3 | NetworkKind::L2) => Ok((p, ctx)),
            Some(_) => Err(DropReason::UnsupportedNetworkKind),
            None => Err(DropReason::NoNetwork),
        },
        _ => Err(DropReason::UnknownPort),
    };
    let (port, ctx) = match bound {
        Ok(b) => b,
        Err(r) => {
            let mut to = [Stage::Drop; VEC_CAP];
            for (k, &i) in frame.iter().enumerate() {
                n.meta[usize::from(i)] = Meta::new(rx);
                to[k] = n.drop_for(i, r);
            }
            return n.hand_over(frame, &to[..frame.len()]);
        }
    };
    let ingress = PodIngress {
        mac: port.mac,
        ipv4: port.ipv4().map(u32::from),
        transit: port.is_transit(),
        gw4: ctx.gw4.map(u32::from),
        gw_mac: (ctx.kind == NetworkKind::L2).then_some(ctx.gw_mac.0),
    };
    // Whether the sources are checked against the endpoint: once per vector. A transit
    // endpoint forwards others' packets (routing policy steers paths through it, ADR 0057).
    let endpoint = !port.is_host() && !ingress.transit;
    // The destinations of the IPv4 packets bound for ip4-lookup, read here anyway: when the
    // whole vector goes there (the common case), the lookup takes them as they are.
    let mut keys = [0u32; VEC_CAP];
    // The fast pass, as long as every packet is the common one.
    let len = frame.len();
    let mut plain = 0;
    while let Some(&i) = frame.get(plain) {
        if let Some(&ahead) = frame.get(plain + 2) {
            if let Some(p) = &n.bufs[usize::from(ahead)] {
                p.prefetch();
            }
        }
        match n.bufs[usize::from(i)].as_mut() {
            Some(pkt) => match pod_ipv4(pkt, &ingress) {
                Some(key) => keys[plain] = key,
                None => break,
            },
            None => break,
        }
        plain += 1;
    }
    // What a packet of the fast pass holds in its `Meta` if it leaves the fused path.
    let fresh = Meta {
        net: port.network(),
        flags: if ctx.stateful {
            Meta::CHECKED | Meta::TRACK_OUT
        } else {
            Meta::CHECKED
        },
        ..Meta::new(rx)
    };
    if plain == len {
        n.chain(Stage::Ip4Lookup, len as u64);
        return lookup::ip4_fresh(n, frame, &keys[..len], fresh);
    }
    if let (0, Some(gw)) = (plain, ingress.gw_mac) {
        // On an l2 network, the other common vector: frames the endpoint bridges to one MAC.
        let bridged = frame
            .iter()
            .take_while(|&&i| {
                n.bufs[usize::from(i)]
                    .as_ref()
                    .is_some_and(|p| pod_bridged(p, ingress.mac, gw))
            })
            .count();
        if bridged == len {
            let fresh = Meta {
                net: port.network(),
                flags: fresh.flags & Meta::TRACK_OUT,
                ..Meta::new(rx)
            };
            return bridge::forward_fresh(n, frame, fresh, |_| true);
        }
    }
    if plain == 0 {
        // Requests the endpoint makes of the network (ARP, NDP), answered in the next node.
        let mut asks: Option<Stage> = None;
        let mut asked = 0;
        while let Some(&i) = frame.get(asked) {
            let Some(pkt) = n.bufs[usize::from(i)].as_mut() else {
                break;
            };
            match pod_request(pkt, &ingress, ctx.gw6) {
                Some(s) if asks.is_none_or(|t| t == s) => asks = Some(s),
                _ => break,
            }
            asked += 1;
        }
        if let (Some(stage), true) = (asks, asked == len) {
            let checked = if stage == Stage::NdReply {
                Meta::CHECKED
            } else {
                0
            };
            let fresh = Meta {
                net: port.network(),
                flags: (fresh.flags & Meta::TRACK_OUT) | checked,
                ..Meta::new(rx)
            };
            n.chain(stage, len as u64);
            return reply::requests_fresh(n, frame, stage, fresh);
        }
    }
    // The general way from the first packet that is not the common one; those before it are
    // bound for ip4-lookup.
    let mut to = [Stage::Ip4Lookup; VEC_CAP];
    let mut ttl_ok = [true; VEC_CAP];
    for &i in &frame[..plain] {
        n.meta[usize::from(i)] = fresh;
    }
    for (k, &i) in frame.iter().enumerate().skip(plain) {
        if let Some(&ahead) = frame.get(k + 2) {
            if let Some(p) = &n.bufs[usize::from(ahead)] {
                p.prefetch();
            }
        }
        let slot = usize::from(i);
        let Some(pkt) = n.bufs[slot].as_mut() else {
            n.meta[slot] = Meta::new(rx);
            to[k] = n.gone(i);
            continue;
        };
        if let Some(key) = pod_ipv4(pkt, &ingress) {
            keys[k] = key;
            n.meta[slot] = fresh;
            continue;
        }
        let m = &mut n.meta[slot];
        *m = Meta::new(rx);
        m.net = port.network();
        if ctx.stateful {
            m.flags |= Meta::TRACK_OUT;
        }
        let v = classify_pod(
            pkt,
            m,
            (&port, &ctx),
            &mut n.cx,
            endpoint,
            (&mut keys[k], &mut ttl_ok[k]),
        );
        if m.is(Meta::LEARNED) && v.is_ok() {
            seen(n, slot, &port, &ctx);
        }
        to[k] = n.resolve(i, v);
    }
    if to[..len].iter().all(|&t| t == Stage::Ip4Lookup) {
        n.chain(Stage::Ip4Lookup, len as u64);
        return lookup::resolve::<lookup::V4, B, I>(n, frame, &keys[..len], &ttl_ok[..len]);
    }
    n.hand_over(frame, &to[..len]);
}

/// What pod-input checks the IPv4 packets of a vector against, read once from the port's
/// record and its network.
#[derive(Debug, Clone, Copy)]
struct PodIngress {
    /// The endpoint's MAC.
    mac: [u8; 6],
    /// The endpoint's IPv4 address.
    ipv4: Option<u32>,
    /// A transit endpoint: packets from any source address.
    transit: bool,
    /// The network's IPv4 gateway.
    gw4: Option<u32>,
    /// On an l2 network, the gateway's MAC: only frames to it are routed.
    gw_mac: Option<[u8; 6]>,
}

/// The common packet from a pod, checked in one pass at fixed offsets: IPv4 without options,
/// from the endpoint's MAC and address (any address from a transit endpoint), to a unicast MAC (the gateway's on an l2 network), a
/// valid header (the NIC's checksum verdict when it gives one, else the sum), not to the
/// gateway, TTL above 1. Returns its destination — the FIB key — with Ethernet padding trimmed.
/// `None` leaves the packet for [`classify_pod`], which decides everything else: what this
/// accepts, it would send to ip4-lookup with the same key.
#[inline(always)]
fn pod_ipv4<B: PacketBuf>(pkt: &mut B, ing: &PodIngress) -> Option<u32> {
    let h = pkt.head::<L3>()?;
    let eth = ethernet::Frame::new_unchecked(&h[..]);
    if eth.ethertype() != EtherType::Ipv4 || eth.src_addr().0 != ing.mac {
        return None;
    }
    match ing.gw_mac {
        None if eth.dst_addr().is_multicast() => return None,
        Some(gw) if eth.dst_addr().0 != gw => return None,
        _ => {}
    }
    let (src, dst) = plain_ipv4(pkt, true)?;
    ((ing.transit || Some(src) == ing.ipv4) && Some(dst) != ing.gw4).then_some(dst)
}

/// The common frame an endpoint of an l2 network bridges, checked at fixed offsets: from its
/// own MAC (`mac`) to a unicast MAC other than the gateway's (`gw`), neither ARP, RARP nor
/// NDP. What this accepts, [`classify_pod`] sends to l2-forward as it is.
#[inline(always)]
fn pod_bridged<B: PacketBuf>(pkt: &B, mac: [u8; 6], gw: [u8; 6]) -> bool {
    let Some(h) = pkt.head::<L3>() else {
        return false;
    };
    let eth = ethernet::Frame::new_unchecked(&h[..]);
    let dst = eth.dst_addr();
    if eth.src_addr().0 != mac || dst.0 == gw || dst.is_multicast() {
        return false;
    }
    match eth.ethertype() {
        EtherType::Arp | EtherType::Rarp => false,
        EtherType::Ipv6 => !is_ndp(pkt.data()),
        _ => true,
    }
}

/// A request from the endpoint's own MAC that pod-input hands to `arp-reply` or `nd-reply`,
/// checked at fixed offsets: ARP; on an l2 network, NDP to another MAC than the gateway's; else
/// a neighbor solicitation to a multicast address or the gateway's (`gw6`). Returns that node,
/// an NDP packet's IPv6 header checked and its padding trimmed; `None` leaves the packet to
/// [`classify_pod`] (a trimmed one as it would trim it), which sends what this accepts to the
/// same node.
#[inline(always)]
fn pod_request<B: PacketBuf>(
    pkt: &mut B,
    ing: &PodIngress,
    gw6: Option<Ipv6Addr>,
) -> Option<Stage> {
    let h = pkt.head::<L3>()?;
    let eth = ethernet::Frame::new_unchecked(&h[..]);
    if eth.src_addr().0 != ing.mac {
        return None;
    }
    let bridged = ing.gw_mac.is_some_and(|gw| eth.dst_addr().0 != gw);
    match eth.ethertype() {
        EtherType::Arp => Some(Stage::ArpReply),
        EtherType::Ipv6 if bridged => {
            if !is_ndp(pkt.data()) {
                return None;
            }
            check_ipv6(pkt).ok()?;
            Some(Stage::NdReply)
        }
        EtherType::Ipv6 => {
            check_ipv6(pkt).ok()?;
            let ip = ipv6::Packet::new_unchecked(&pkt.data()[L3..]);
            let dst = ip.dst_addr();
            (icmpv6_type(&ip) == Some(icmpv6::Message::NeighborSolicit)
                && (dst.is_multicast() || Some(dst) == gw6))
                .then_some(Stage::NdReply)
        }
        _ => None,
    }
}

/// The IPv4 header at [`L3`] when it is the plain case the fused paths take: version 4, no
/// options, Total Length within the frame, TTL above 1, a valid checksum (`as_received`: the
/// NIC's verdict stands for the sum when it gave one). Returns its source and destination, with
/// Ethernet padding after Total Length trimmed (as [`check_ipv4`] does); `None`: not the plain
/// case (the general checks decide), the packet unchanged.
#[inline(always)]
pub(super) fn plain_ipv4<B: PacketBuf>(pkt: &mut B, as_received: bool) -> Option<(u32, u32)> {
    let len = pkt.len();
    let h = pkt.head::<{ L3 + ipv4::HEADER_LEN }>()?;
    let ip = ipv4::Packet::new_unchecked(&h[L3..]);
    let total = usize::from(ip.total_len());
    if ip.version() != 4
        || ip.header_len() != ipv4::HEADER_LEN
        || total < ipv4::HEADER_LEN
        || L3 + total > len
        || ip.ttl() <= 1
    {
        return None;
    }
    let verdict = if as_received {
        pkt.rx_ipv4_checksum()
    } else {
        None
    };
    if !verdict.unwrap_or_else(|| ip.verify_checksum()) {
        return None;
    }
    let addrs = (u32::from(ip.src_addr()), u32::from(ip.dst_addr()));
    if len > L3 + total {
        pkt.truncate(L3 + total);
    }
    Some(addrs)
}

/// A frame from a MAC learned on this port: reported as seen once per period, so that control
/// does not age the entry out while the MAC keeps sending.
#[cold]
fn seen<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slot: usize,
    port: &PortRec,
    ctx: &NetCtx,
) {
    let (Some(period), Some(h)) = (
        ctx.learn_period_ns,
        n.bufs[slot].as_ref().and_then(|p| p.head::<L3>()),
    ) else {
        return;
    };
    let mac = MacAddr(ethernet::Frame::new_unchecked(&h[..]).src_addr().0);
    let m = n.meta[slot];
    let now = n.io.now_ns();
    if n.l2.seen.due(mac, m.rx, now, period) {
        n.io.learn(&LearnEvent {
            port: m.rx,
            endpoint: port.endpoint,
            network: m.net,
            kind: LearnKind::Seen,
            mac,
            ip: None,
            at_ns: now,
        });
    }
}

/// One frame from a pod port of an l3 network, or one to the gateway of an l2 network.
/// `endpoint`: the source address must be the port's (false for the host interface and a
/// transit endpoint).
#[inline(always)]
fn classify_pod<B: PacketBuf>(
    pkt: &mut B,
    m: &mut Meta,
    (port, ctx): (&PortRec, &NetCtx),
    cx: &mut Cx<'_, '_>,
    endpoint: bool,
    (key, ttl_ok): (&mut u32, &mut bool),
) -> Verdict {
    let h = pkt.head::<L3>().ok_or(DropReason::Malformed)?;
    let eth = ethernet::Frame::new_unchecked(&h[..]);
    let src = eth.src_addr().0;
    // A MAC learned on the port (a VM behind it) routes from the addresses learned with it,
    // checked against these tables; the endpoint from its own addresses.
    let mut learned = None;
    if src != port.mac {
        // Only a learning network lets a port send from another MAC: one learned on it, or
        // any in an announcement.
        if ctx.kind != NetworkKind::L2 || ctx.learn_period_ns.is_none() {
            return Err(DropReason::SpoofedMac);
        }
        // The network's tables, looked up only here: the common frame does not need them.
        let view = cx.view(m.net).ok_or(DropReason::NoNetwork)?;
        let on_port = matches!(view.fdb(MacAddr(src)), Some(L2Hop::Port(p)) if p == m.rx);
        m.flags |= if on_port {
            Meta::LEARNED
        } else {
            Meta::FOREIGN
        };
        if eth.dst_addr().0 == ctx.gw_mac.0 {
            if !on_port {
                // The IP path serves the endpoints and the MACs learned on their ports.
                return Err(DropReason::SpoofedMac);
            }
            learned = Some(view);
        }
    }
    if ctx.kind == NetworkKind::L2 && eth.dst_addr().0 != ctx.gw_mac.0 {
        return classify_bridged(pkt, m);
    }
    let multicast = eth.dst_addr().is_multicast();
    let eth_src = EthernetAddress(src);
    match eth.ethertype() {
        EtherType::Arp => Ok(Stage::ArpReply),
        EtherType::Ipv4 => {
            if multicast {
                return Err(DropReason::Multicast);
            }
            check_ipv4(pkt, true)?;
            m.flags |= Meta::CHECKED;
            let h = pkt
                .head::<{ L3 + ipv4::HEADER_LEN }>()
                .ok_or(DropReason::Malformed)?;
            let ip = ipv4::Packet::new_unchecked(&h[L3..]);
            let from = IpAddr::V4(ip.src_addr());
            if endpoint && !own_address(port, learned.as_ref(), from, eth_src) {
                return Err(DropReason::SpoofedSource);
            }
            if Some(ip.dst_addr()) == ctx.gw4 {
                return Ok(Stage::IcmpEcho);
            }
            // The IPv4 destination as the lookup takes it: the FIB key, and whether the TTL
            // lets the packet be forwarded.
            *key = u32::from(ip.dst_addr());
            *ttl_ok = ip.ttl() > 1;
            Ok(Stage::Ip4Lookup)
        }
        EtherType::Ipv6 => {
            check_ipv6(pkt)?;
            m.flags |= Meta::CHECKED;
            let ip = ipv6::Packet::new_unchecked(&pkt.data()[L3..]);
            let dst = ip.dst_addr();
            let is_ns = icmpv6_type(&ip) == Some(icmpv6::Message::NeighborSolicit);
            if is_ns && (dst.is_multicast() || Some(dst) == ctx.gw6) {
                // Solicitations may come from the pod's link-local or the unspecified address;
                // nd-reply checks the rest.
                return Ok(Stage::NdReply);
            }
            if dst.is_multicast() || multicast {
                return Err(DropReason::Multicast);
            }
            let from = IpAddr::V6(ip.src_addr());
            if endpoint && !own_address(port, learned.as_ref(), from, eth_src) {
                return Err(DropReason::SpoofedSource);
            }
            if Some(dst) == ctx.gw6 {
                return Ok(Stage::IcmpEcho);
            }
            if dst.is_unicast_link_local() {
                // Link-local destinations other than the gateway are never routed.
                return Err(DropReason::NoRoute);
            }
            Ok(Stage::Ip6Lookup)
        }
        _ => Err(DropReason::UnsupportedEthertype),
    }
}

/// One frame from a pod port of an l2 network to another MAC than the gateway's: ARP and NDP
/// (whatever the destination MAC) go to `arp-reply` / `nd-reply` — answered locally or
/// consumed, never bridged — RARP to `l2-learn`, other broadcast and multicast is flooded,
/// unicast is bridged by the FDB. Bridged frames are not IP-checked: they cross the network
/// unchanged, as on a switch (the source MAC was checked). A frame from a foreign MAC
/// ([`Meta::FOREIGN`]) goes on only as a possible announcement.
#[inline(always)]
fn classify_bridged<B: PacketBuf>(pkt: &mut B, m: &mut Meta) -> Verdict {
    let h = pkt.head::<L3>().ok_or(DropReason::Malformed)?;
    let eth = ethernet::Frame::new_unchecked(&h[..]);
    let (ethertype, multicast) = (eth.ethertype(), eth.dst_addr().is_multicast());
    match ethertype {
        EtherType::Arp => Ok(Stage::ArpReply),
        EtherType::Rarp => Ok(Stage::L2Learn),
        EtherType::Ipv6 if is_ndp(pkt.data()) => {
            check_ipv6(pkt)?;
            m.flags |= Meta::CHECKED;
            Ok(Stage::NdReply)
        }
        _ if m.is(Meta::FOREIGN) => Err(DropReason::SpoofedMac),
        _ if multicast => Ok(Stage::L2Flood),
        _ => Ok(Stage::L2Forward),
    }
}

/// Whether an IPv6 frame is NDP (RFC 4861: router and neighbor solicitations and
/// advertisements, redirects): ICMPv6 right after the fixed header, type 133–137.
#[inline(always)]
fn is_ndp(d: &[u8]) -> bool {
    const NEXT_HEADER: usize = L3 + 6;
    const TYPE: usize = L3 + ipv6::HEADER_LEN;
    d.get(NEXT_HEADER) == Some(&u8::from(IpProtocol::Icmpv6))
        && d.get(TYPE).is_some_and(|t| (133..=137).contains(t))
}

/// `uplink-input`: IPv6 from the underlay, to this node's underlay address or to a local SID.
///
/// The common packets — another node's H.Encaps.Red of IPv4 to one of this node's End.DT46
/// SIDs, or its H.Encaps.L2.Red of a frame to one of its End.DT2U SIDs — are checked in one
/// pass at fixed offsets ([`uplink_fast`]) and write nothing; when the whole vector is such
/// packets for one SID's network, it goes on to the decapsulation and the lookup in one call
/// chain ([`srv6::decap_fresh`], or l2-decap and [`bridge::forward_fresh`]). Every other packet
/// takes the general checks.
/// An IPv4 packet on the uplink, which carries IPv4 where the node has addresses there (ADR
/// 0054): an echo request to one of them (on the packet's VLAN) is answered; any other unicast
/// packet belongs to the external network its source is in ([`external`]).
fn uplink_ipv4<B: PacketBuf>(
    pkt: &mut B,
    hosts: &UplinkHosts,
    multicast: bool,
    cx: &mut Cx<'_, '_>,
    m: &mut Meta,
) -> Verdict {
    check_ipv4(pkt, true)?;
    let ip = ipv4::Packet::new_unchecked(&pkt.data()[L3..]);
    if multicast {
        return Err(DropReason::NotForUs);
    }
    if hosts.has4(m.vlan, ip.dst_addr()) {
        return match ip.protocol() {
            IpProtocol::Icmp => Ok(Stage::IcmpEcho),
            _ => Err(DropReason::ReceiveUnsupported),
        };
    }
    external(IpAddr::V4(ip.src_addr()), cx, m).map(|()| Stage::Ip4Lookup)
}

/// Puts a plain packet from the uplink, validated, with source `src`, into the external
/// network whose prefixes hold `src` (ADR 0054: the longest match across the external
/// networks of the VLAN it came on), where it is looked up as any packet of that network;
/// `no-external-network` when none does.
fn external(src: IpAddr, cx: &mut Cx<'_, '_>, m: &mut Meta) -> Result<(), DropReason> {
    m.net = cx
        .external_network(m.vlan, src)
        .ok_or(DropReason::NoExternalNetwork)?;
    m.flags |= Meta::CHECKED;
    Ok(())
}

pub(super) fn uplink_input<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
) {
    let uplink_mac = ethernet::Address(n.cfg.uplink_mac.0);
    let underlay = n.cfg.underlay_addr;
    // The fast pass, as long as every packet is the common one for the same SID's network.
    let len = frame.len();
    let mut fast: Option<Decap> = None;
    let mut plain = 0;
    while let Some(&i) = frame.get(plain) {
        if let Some(&ahead) = frame.get(plain + 2) {
            if let Some(p) = &n.bufs[usize::from(ahead)] {
                p.prefetch();
            }
        }
        let Some(pkt) = n.bufs[usize::from(i)].as_mut() else {
            break;
        };
        match uplink_fast(pkt, uplink_mac, underlay, &mut n.cx) {
            Some(d) if fast.is_none_or(|f| f == d) => fast = Some(d),
            _ => break,
        }
        plain += 1;
    }
    let fresh = |net| Meta {
        net,
        ..Meta::new(PortId::UPLINK)
    };
    match (fast, plain == len) {
        (Some(Decap::Dt46(net)), true) => {
            n.chain(Stage::Srv6Decap, len as u64);
            return srv6::decap_fresh(n, frame, fresh(net));
        }
        (Some(Decap::Dt2u(net)), true) => {
            n.chain(Stage::L2Decap, len as u64);
            // uplink-input checked that the outer IPv6 header and the inner Ethernet header
            // are there.
            return bridge::forward_fresh(n, frame, fresh(net), |pkt| {
                pkt.adj(L3 + ipv6::HEADER_LEN)
            });
        }
        (None, _) if n.cfg.uplink_hosts.any4() => {
            let mut keys = [0u32; VEC_CAP];
            if let Some(net) = external4_run(n, frame, uplink_mac, &mut keys) {
                n.chain(Stage::Ip4Lookup, len as u64);
                let checked = Meta {
                    flags: Meta::CHECKED,
                    ..fresh(net)
                };
                return lookup::ip4_fresh(n, frame, &keys[..len], checked);
            }
        }
        _ => {}
    }
    // The general way from the first packet that is not; those before it go to srv6-decap or
    // l2-decap.
    let mut to = [Stage::Srv6Decap; VEC_CAP];
    if let Some(d) = fast {
        for (k, &i) in frame[..plain].iter().enumerate() {
            n.meta[usize::from(i)] = fresh(d.net());
            to[k] = d.stage();
        }
    }
    for (k, &i) in frame.iter().enumerate().skip(plain) {
        if let Some(&ahead) = frame.get(k + 2) {
            if let Some(p) = &n.bufs[usize::from(ahead)] {
                p.prefetch();
            }
        }
        let slot = usize::from(i);
        let Some(pkt) = n.bufs[slot].as_mut() else {
            n.meta[slot] = Meta::new(PortId::UPLINK);
            to[k] = n.gone(i);
            continue;
        };
        if let Some(d) = uplink_fast(pkt, uplink_mac, underlay, &mut n.cx) {
            n.meta[slot] = fresh(d.net());
            to[k] = d.stage();
            continue;
        }
        n.meta[slot] = Meta::new(PortId::UPLINK);
        let v = (|| {
            let eth =
                ethernet::Frame::new_checked(pkt.data()).map_err(|_| DropReason::Malformed)?;
            let multicast = eth.dst_addr().is_multicast();
            if !multicast && eth.dst_addr() != uplink_mac {
                return Err(DropReason::NotForUs);
            }
            let hosts = &n.cfg.uplink_hosts;
            let mut ethertype = eth.ethertype();
            if ethertype == EtherType::Vlan {
                // An external network's VLAN (ADR 0054): on untagged from here, the VLAN kept.
                n.meta[slot].vlan = vlan::pop(pkt, hosts)?;
                ethertype = ethernet::Frame::new_unchecked(pkt.data()).ethertype();
            }
            let tag = n.meta[slot].vlan;
            match ethertype {
                EtherType::Ipv6 => {}
                // The node's own IPv4 addresses on the uplink (ADR 0054).
                EtherType::Arp if hosts.any4() => return Ok(Stage::ArpReply),
                EtherType::Ipv4 if hosts.any4() => {
                    return uplink_ipv4(pkt, hosts, multicast, &mut n.cx, &mut n.meta[slot])
                }
                _ => return Err(DropReason::UnsupportedEthertype),
            }
            check_ipv6(pkt)?;
            let ip = ipv6::Packet::new_unchecked(&pkt.data()[L3..]);
            let dst = ip.dst_addr();
            let icmp = icmpv6_type(&ip);
            let nd = matches!(
                icmp,
                Some(icmpv6::Message::NeighborSolicit | icmpv6::Message::NeighborAdvert)
            );
            if (tag == 0 && dst == underlay) || hosts.has6(tag, dst) {
                return match icmp {
                    Some(icmpv6::Message::EchoRequest) => Ok(Stage::IcmpEcho),
                    _ if nd => Ok(Stage::NdReply),
                    _ => Err(DropReason::ReceiveUnsupported),
                };
            }
            if dst.is_multicast() {
                return if nd {
                    Ok(Stage::NdReply)
                } else {
                    Err(DropReason::Multicast)
                };
            }
            if multicast {
                return Err(DropReason::Multicast);
            }
            if tag != 0 {
                // The underlay is untagged: on a VLAN, only an external network's packets.
                return external(IpAddr::V6(ip.src_addr()), &mut n.cx, &mut n.meta[slot])
                    .map(|()| Stage::Ip6Lookup);
            }
            match n.cx.local_sid(dst) {
                Some(SidBehavior::EndDt46(net)) => {
                    n.meta[slot].net = net;
                    Ok(Stage::Srv6Decap)
                }
                Some(SidBehavior::EndDt2u(net)) => {
                    n.meta[slot].net = net;
                    Ok(Stage::L2Decap)
                }
                Some(SidBehavior::EndDt2m(net)) => {
                    n.meta[slot].net = net;
                    n.meta[slot].flags |= Meta::FLOOD;
                    Ok(Stage::L2Decap)
                }
                Some(SidBehavior::End) => Err(DropReason::UnsupportedNextHop),
                // A plain packet from outside, to be routed in its external network.
                None => match external(IpAddr::V6(ip.src_addr()), &mut n.cx, &mut n.meta[slot]) {
                    Ok(()) => Ok(Stage::Ip6Lookup),
                    Err(_)
                        if matches!(
                            ip.next_header(),
                            IpProtocol::Ipv4
                                | IpProtocol::Ipv6
                                | IpProtocol::Ipv6Route
                                | IpProtocol::Ethernet
                        ) =>
                    {
                        Err(DropReason::UnknownSid)
                    }
                    Err(_) if hosts.any6() => Err(DropReason::NoExternalNetwork),
                    Err(_) => Err(DropReason::NotForUs),
                },
            }
        })();
        to[k] = n.resolve(i, v);
    }
    n.hand_over(frame, &to[..len]);
}

/// The external network of a vector that is wholly plain IPv4 (checked as
/// [`plain_ipv4`] checks it) to the uplink's MAC, none of it for the node's own addresses,
/// from hosts of that one network (ADR 0054), with each packet's destination in `keys`: the
/// common burst from outside, which then goes on as one ([`lookup::ip4_fresh`]). `None`
/// leaves the vector to the general checks, which classify each packet the same way.
#[inline(always)]
fn external4_run<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
    uplink_mac: ethernet::Address,
    keys: &mut [u32; VEC_CAP],
) -> Option<NetworkId> {
    let mut net = None;
    let mut last_src = None;
    for (k, &i) in frame.iter().enumerate() {
        let pkt = n.bufs[usize::from(i)].as_mut()?;
        let h = pkt.head::<L3>()?;
        let eth = ethernet::Frame::new_unchecked(&h[..]);
        if eth.dst_addr() != uplink_mac || eth.ethertype() != EtherType::Ipv4 {
            return None;
        }
        let (src, dst) = plain_ipv4(pkt, true)?;
        if n.cfg.uplink_hosts.has4(0, Ipv4Addr::from(dst)) {
            return None;
        }
        if last_src != Some(src) {
            let of = n.cx.external_network(0, IpAddr::V4(Ipv4Addr::from(src)))?;
            if net.is_some_and(|x| x != of) {
                return None;
            }
            (net, last_src) = (Some(of), Some(src));
        }
        *keys.get_mut(k)? = dst;
    }
    net
}

/// What the fast pass of uplink-input found a packet to be: to which kind of local SID, of
/// which network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decap {
    /// End.DT46, carrying IPv4.
    Dt46(NetworkId),
    /// End.DT2U, carrying an Ethernet frame.
    Dt2u(NetworkId),
}

impl Decap {
    fn net(self) -> NetworkId {
        match self {
            Decap::Dt46(net) | Decap::Dt2u(net) => net,
        }
    }
    /// The node the general checks send it to.
    fn stage(self) -> Stage {
        match self {
            Decap::Dt46(_) => Stage::Srv6Decap,
            Decap::Dt2u(_) => Stage::L2Decap,
        }
    }
}

/// The common packet from the underlay, checked in one pass at fixed offsets: to the uplink's
/// MAC, IPv6 without extension headers, to a local SID — IPv4 to an End.DT46 SID whose network
/// exists, or an Ethernet frame (at least its header) to an End.DT2U SID of an l2 network.
/// Returns which, with Ethernet padding after the outer packet trimmed; `None` leaves the
/// packet for the general checks (what this accepts, they would send to srv6-decap or
/// l2-decap in the same network).
#[inline(always)]
fn uplink_fast<B: PacketBuf>(
    pkt: &mut B,
    uplink_mac: ethernet::Address,
    underlay: Ipv6Addr,
    cx: &mut Cx<'_, '_>,
) -> Option<Decap> {
    let len = pkt.len();
    let h = pkt.head::<{ L3 + ipv6::HEADER_LEN }>()?;
    let eth = ethernet::Frame::new_unchecked(&h[..L3]);
    if eth.dst_addr() != uplink_mac || eth.ethertype() != EtherType::Ipv6 {
        return None;
    }
    let ip = ipv6::Packet::new_unchecked(&h[L3..]);
    let payload = usize::from(ip.payload_len());
    let end = L3 + ipv6::HEADER_LEN + payload;
    let dst = ip.dst_addr();
    if ip.version() != 6 || end > len || dst == underlay || dst.is_multicast() {
        return None;
    }
    let d = match (ip.next_header(), cx.local_sid(dst)?) {
        (IpProtocol::Ipv4, SidBehavior::EndDt46(net)) => {
            cx.net_ctx(net)?;
            Decap::Dt46(net)
        }
        (IpProtocol::Ethernet, SidBehavior::EndDt2u(net))
            if payload >= ethernet::HEADER_LEN && cx.net_ctx(net)?.kind == NetworkKind::L2 =>
        {
            Decap::Dt2u(net)
        }
        _ => return None,
    };
    if len > end {
        pkt.truncate(end);
    }
    Some(d)
}
