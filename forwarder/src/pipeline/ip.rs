//! Pod ingress, FIB lookups and same-node delivery.

use std::net::{Ipv4Addr, Ipv6Addr};

use lace_shared::status::DropReason;
use lace_shared::types::{FdbTarget, NetworkId, NetworkKind, NextHop, PortRec};

use super::{Cx, Hop, Io, Meta, PacketBuf, Stage, Verdict};
use crate::wire::checksum;

/// Ethernet header length; every IP stage finds the IP header here.
pub(super) const L3: usize = 14;
pub(super) const ETH_IPV4: u16 = 0x0800;
pub(super) const ETH_ARP: u16 = 0x0806;
pub(super) const ETH_IPV6: u16 = 0x86dd;
pub(super) const PROTO_ICMP: u8 = 1;
pub(super) const PROTO_ICMPV6: u8 = 58;
/// ICMP destination-unreachable codes the lookups ask for (RFC 792 / RFC 4443).
pub(super) const UNREACH_NET: u32 = 0;
pub(super) const UNREACH_ADMIN: u32 = 13;

#[inline]
pub(super) fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

#[inline]
pub(super) fn v4_at(d: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(d[at], d[at + 1], d[at + 2], d[at + 3])
}

#[inline]
pub(super) fn v6_at(d: &[u8], at: usize) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&d[at..at + 16]);
    Ipv6Addr::from(o)
}

#[inline]
fn is_link_local(a: &Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// Validates the IPv4 header at [`L3`] (lengths, version, checksum) and trims Ethernet padding.
/// Returns the header length.
#[inline]
pub(super) fn check_ipv4<B: PacketBuf>(pkt: &mut B) -> Result<usize, DropReason> {
    let d = pkt.data();
    if d.len() < L3 + 20 {
        return Err(DropReason::Malformed);
    }
    let vihl = d[L3];
    let ihl = usize::from(vihl & 0xf) * 4;
    let total = usize::from(be16(d, L3 + 2));
    if vihl >> 4 != 4 || ihl < 20 || total < ihl || d.len() < L3 + total {
        return Err(DropReason::Malformed);
    }
    if checksum::data(&d[L3..L3 + ihl]) != 0xffff {
        return Err(DropReason::Malformed);
    }
    if d.len() > L3 + total {
        pkt.truncate(L3 + total);
    }
    Ok(ihl)
}

/// Validates the IPv6 header at [`L3`] and trims Ethernet padding.
#[inline]
pub(super) fn check_ipv6<B: PacketBuf>(pkt: &mut B) -> Result<(), DropReason> {
    let d = pkt.data();
    if d.len() < L3 + 40 || d[L3] >> 4 != 6 {
        return Err(DropReason::Malformed);
    }
    let total = L3 + 40 + usize::from(be16(d, L3 + 4));
    if d.len() < total {
        return Err(DropReason::Malformed);
    }
    if d.len() > total {
        pkt.truncate(total);
    }
    Ok(())
}

/// The endpoint's IPv4 address in a port record.
#[inline]
pub(super) fn port_v4(p: &PortRec) -> Option<Ipv4Addr> {
    (p.flags & 1 != 0).then(|| Ipv4Addr::from(p.ipv4))
}

/// The endpoint's IPv6 address in a port record.
#[inline]
pub(super) fn port_v6(p: &PortRec) -> Option<Ipv6Addr> {
    (p.flags & 2 != 0).then(|| Ipv6Addr::from(p.ipv6))
}

/// `pod-input`: a frame from a pod port. The port decides the network (isolation); the
/// source MAC and address must be the endpoint's (anti-spoofing).
pub(super) fn pod_input<B: PacketBuf>(pkt: &mut B, m: &mut Meta, cx: &mut Cx<'_, '_>) -> Verdict {
    let port = cx.port(m.rx).ok_or(DropReason::UnknownPort)?;
    // 1 = PortKind::Pod in the record.
    if port.kind != 1 {
        return Err(DropReason::UnknownPort);
    }
    let d = pkt.data();
    if d.len() < L3 {
        return Err(DropReason::Malformed);
    }
    if d[6..12] != port.mac {
        return Err(DropReason::SpoofedMac);
    }
    let (_, info) = cx
        .net(NetworkId(port.network))
        .ok_or(DropReason::NoNetwork)?;
    if info.kind != NetworkKind::L3 {
        return Err(DropReason::UnsupportedNetworkKind);
    }
    m.net = NetworkId(port.network);
    m.gw_mac = info.gw_mac;
    let dst_mac_multicast = d[0] & 1 == 1;
    match be16(d, 12) {
        ETH_ARP => Ok(Stage::ArpReply),
        ETH_IPV4 => {
            if dst_mac_multicast {
                return Err(DropReason::Multicast);
            }
            check_ipv4(pkt)?;
            m.checked = true;
            let d = pkt.data();
            if Some(v4_at(d, L3 + 12)) != port_v4(port) {
                return Err(DropReason::SpoofedSource);
            }
            if Some(v4_at(d, L3 + 16)) == info.gw4 {
                return Ok(Stage::IcmpEcho);
            }
            Ok(Stage::Ip4Lookup)
        }
        ETH_IPV6 => {
            check_ipv6(pkt)?;
            m.checked = true;
            let d = pkt.data();
            let (src, dst) = (v6_at(d, L3 + 8), v6_at(d, L3 + 24));
            let next = d[L3 + 6];
            let icmp_type = d.get(L3 + 40).copied();
            let is_ns = next == PROTO_ICMPV6 && icmp_type == Some(135);
            if is_ns && (dst.is_multicast() || Some(dst) == info.gw6) {
                // Neighbor solicitations may come from the pod's link-local or the unspecified
                // address; nd-reply checks the rest.
                return Ok(Stage::NdReply);
            }
            if dst.is_multicast() || dst_mac_multicast {
                return Err(DropReason::Multicast);
            }
            if Some(src) != port_v6(port) {
                return Err(DropReason::SpoofedSource);
            }
            if Some(dst) == info.gw6 {
                return Ok(Stage::IcmpEcho);
            }
            if is_link_local(&dst) {
                // Link-local destinations other than the gateway are never routed.
                return Err(DropReason::NoRoute);
            }
            Ok(Stage::Ip6Lookup)
        }
        _ => Err(DropReason::UnsupportedEthertype),
    }
}

/// Resolves a FIB result into the next stage, or asks for an ICMP error.
fn route(
    nh: Option<NextHop>,
    m: &mut Meta,
    ttl_ok: bool,
    cx: &mut Cx<'_, '_>,
    dst: std::net::IpAddr,
) -> Verdict {
    let forward = |m: &mut Meta, hop: Hop, next: Stage| -> Verdict {
        if !ttl_ok {
            return icmp(m, DropReason::TtlExceeded, 0);
        }
        m.hop = hop;
        Ok(next)
    };
    match nh {
        None => icmp(m, DropReason::NoRoute, UNREACH_NET),
        Some(NextHop::Local { port, mac }) => {
            forward(m, Hop::Local { port, mac }, Stage::LocalRewrite)
        }
        Some(NextHop::LocalBlock) => {
            // Resolve the address in the network's neighbor table, then its MAC in the FDB.
            let (net, _) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
            let found = net
                .neighbor(dst)
                .and_then(|mac| match net.fdb(mac)?.target {
                    FdbTarget::Port(port) => Some((port, mac)),
                    FdbTarget::Node(_) => None,
                });
            match found {
                Some((port, mac)) => forward(m, Hop::Local { port, mac }, Stage::LocalRewrite),
                None => icmp(m, DropReason::NoRoute, UNREACH_NET),
            }
        }
        Some(NextHop::Remote { node, sid }) => {
            forward(m, Hop::Remote { node, sid: sid.0 }, Stage::Srv6Encap)
        }
        Some(NextHop::Receive) => Ok(Stage::IcmpEcho),
        Some(NextHop::Drop) => Err(DropReason::Blackhole),
        Some(NextHop::Unreachable) => icmp(m, DropReason::NoRoute, UNREACH_ADMIN),
        Some(NextHop::Uplink { .. }) => Err(DropReason::UnsupportedNextHop),
    }
}

/// Sends the packet to `icmp-error` to be answered with the error for `reason` — unless it is
/// itself generated, then it is just dropped.
pub(super) fn icmp(m: &mut Meta, reason: DropReason, param: u32) -> Verdict {
    if m.generated {
        return Err(reason);
    }
    m.reason = reason;
    m.param = param;
    Ok(Stage::IcmpError)
}

/// `ip4-lookup`: longest-prefix match in the packet's network.
pub(super) fn ip4_lookup<B: PacketBuf>(pkt: &mut B, m: &mut Meta, cx: &mut Cx<'_, '_>) -> Verdict {
    if !m.checked {
        check_ipv4(pkt)?;
        m.checked = true;
    }
    let d = pkt.data();
    let dst = v4_at(d, L3 + 16);
    let (net, _) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
    let nh = cx.snap().nexthop(net.route4_index(dst));
    let ttl_ok = d[L3 + 8] > 1;
    route(nh, m, ttl_ok, cx, dst.into())
}

/// `ip6-lookup`: longest-prefix match in the packet's network.
pub(super) fn ip6_lookup<B: PacketBuf>(pkt: &mut B, m: &mut Meta, cx: &mut Cx<'_, '_>) -> Verdict {
    if !m.checked {
        check_ipv6(pkt)?;
        m.checked = true;
    }
    let d = pkt.data();
    let dst = v6_at(d, L3 + 24);
    if dst.is_multicast() {
        return Err(DropReason::Multicast);
    }
    let (net, _) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
    let nh = cx.snap().nexthop(net.route6_index(dst));
    let ttl_ok = d[L3 + 7] > 1;
    route(nh, m, ttl_ok, cx, dst.into())
}

/// Forwards one hop: decrements the IPv4 TTL (with RFC 1624 checksum update) or IPv6 hop
/// limit. The lookup checked it was above 1.
#[inline]
pub(super) fn decrement_ttl(d: &mut [u8]) {
    if d[L3] >> 4 == 4 {
        let old = be16(d, L3 + 8);
        d[L3 + 8] -= 1;
        let new = be16(d, L3 + 8);
        let sum = checksum::update_u16(be16(d, L3 + 10), old, new);
        d[L3 + 10..L3 + 12].copy_from_slice(&sum.to_be_bytes());
    } else {
        d[L3 + 7] -= 1;
    }
}

/// `local-rewrite`: deliver to a pod on this node.
pub(super) fn local_rewrite<B: PacketBuf, I: Io<B>>(pkt: &mut B, m: &mut Meta, io: &I) -> Verdict {
    let Hop::Local { port, mac } = m.hop else {
        return Err(DropReason::NoRoute);
    };
    if !io.port_up(port) {
        return Err(DropReason::PortDown);
    }
    let d = pkt.data_mut();
    if !m.generated {
        decrement_ttl(d);
    }
    let ethertype = if d[L3] >> 4 == 4 { ETH_IPV4 } else { ETH_IPV6 };
    d[0..6].copy_from_slice(&mac.0);
    d[6..12].copy_from_slice(&m.gw_mac.0);
    d[12..14].copy_from_slice(&ethertype.to_be_bytes());
    m.tx = port;
    Ok(Stage::Tx)
}
