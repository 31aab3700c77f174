//! The input nodes: `pod-input` (isolation and anti-spoofing) and `uplink-input` (IPv6 to
//! this node or to a local SID), and the IP header checks every IP node relies on.

use lace_shared::status::DropReason;
use lace_shared::types::{NetworkKind, PortRec, SidBehavior};

use super::cache::NetCtx;
use super::lookup;
use super::{Io, Meta, NodeCtx, PacketBuf, Stage, Verdict, VEC_CAP};
use crate::wire::ethernet::{self, EtherType};
use crate::wire::{icmpv6, ipv4, ipv6, IpProtocol};

/// Ethernet header length; every IP node finds the IP header here.
pub(super) const L3: usize = ethernet::HEADER_LEN;

/// Validates the IPv4 header at [`L3`] (version, lengths, checksum) and trims Ethernet
/// padding after its Total Length.
#[inline(always)]
pub(super) fn check_ipv4<B: PacketBuf>(pkt: &mut B) -> Result<(), DropReason> {
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
    let valid = if ihl == ipv4::HEADER_LEN {
        ip.verify_checksum()
    } else {
        ipv4::Packet::new_unchecked(&pkt.data()[L3..]).verify_checksum()
    };
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
/// (anti-spoofing).
pub(super) fn pod_input<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    let Some(&first) = frame.first() else {
        return;
    };
    // Resolved once for the vector: the port's record and its network.
    let rx = n.meta[usize::from(first)].rx;
    let bound = match n.cx.port(rx) {
        Some(p) if p.is_pod() => match n.cx.net(p.network()) {
            Some((_, ctx)) if matches!(ctx.kind, NetworkKind::L3 | NetworkKind::L2) => {
                Ok((*p, ctx))
            }
            Some(_) => Err(DropReason::UnsupportedNetworkKind),
            None => Err(DropReason::NoNetwork),
        },
        _ => Err(DropReason::UnknownPort),
    };
    let mut to = [Stage::Drop; VEC_CAP];
    let (port, ctx) = match bound {
        Ok(b) => b,
        Err(r) => {
            for (k, &i) in frame.iter().enumerate() {
                to[k] = n.drop_for(i, r);
            }
            return n.hand_over(frame, &to[..frame.len()]);
        }
    };
    // The destinations of the IPv4 packets bound for ip4-lookup, read here anyway: when the
    // whole vector goes there (the common case), the lookup takes them as they are.
    let mut keys = [0u32; VEC_CAP];
    let mut ttl_ok = [false; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        if let Some(&ahead) = frame.get(k + 2) {
            if let Some(p) = &n.bufs[usize::from(ahead)] {
                p.prefetch();
            }
        }
        let slot = usize::from(i);
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        let m = &mut n.meta[slot];
        m.net = port.network();
        let v = classify_pod(pkt, m, &port, &ctx, (&mut keys[k], &mut ttl_ok[k]));
        to[k] = n.resolve(i, v);
    }
    let len = frame.len();
    if to[..len].iter().all(|&t| t == Stage::Ip4Lookup) {
        n.chain(Stage::Ip4Lookup, len as u64);
        return lookup::resolve::<lookup::V4, B, I>(n, frame, &keys[..len], &ttl_ok[..len]);
    }
    n.hand_over(frame, &to[..len]);
}

/// One frame from a pod port of an l3 network, or one to the gateway of an l2 network.
#[inline(always)]
fn classify_pod<B: PacketBuf>(
    pkt: &mut B,
    m: &mut Meta,
    port: &PortRec,
    ctx: &NetCtx,
    (key, ttl_ok): (&mut u32, &mut bool),
) -> Verdict {
    let h = pkt.head::<L3>().ok_or(DropReason::Malformed)?;
    let eth = ethernet::Frame::new_unchecked(&h[..]);
    if eth.src_addr().0 != port.mac {
        return Err(DropReason::SpoofedMac);
    }
    if ctx.kind == NetworkKind::L2 && eth.dst_addr().0 != ctx.gw_mac.0 {
        return classify_bridged(pkt, m);
    }
    let multicast = eth.dst_addr().is_multicast();
    match eth.ethertype() {
        EtherType::Arp => Ok(Stage::ArpReply),
        EtherType::Ipv4 => {
            if multicast {
                return Err(DropReason::Multicast);
            }
            check_ipv4(pkt)?;
            m.flags |= Meta::CHECKED;
            let h = pkt
                .head::<{ L3 + ipv4::HEADER_LEN }>()
                .ok_or(DropReason::Malformed)?;
            let ip = ipv4::Packet::new_unchecked(&h[L3..]);
            if Some(ip.src_addr()) != port.ipv4() {
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
            if Some(ip.src_addr()) != port.ipv6() {
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

/// One frame from a pod port of an l2 network to another MAC than the gateway's: ARP and
/// multicast neighbor solicitations are answered locally (never flooded), other broadcast and
/// multicast is flooded, unicast is bridged by the FDB. Bridged frames are not IP-checked:
/// they cross the network unchanged, as on a switch (the source MAC was checked).
#[inline(always)]
fn classify_bridged<B: PacketBuf>(pkt: &mut B, m: &mut Meta) -> Verdict {
    let h = pkt.head::<L3>().ok_or(DropReason::Malformed)?;
    let eth = ethernet::Frame::new_unchecked(&h[..]);
    let multicast = eth.dst_addr().is_multicast();
    match eth.ethertype() {
        EtherType::Arp => Ok(Stage::ArpReply),
        EtherType::Ipv6 if multicast => {
            check_ipv6(pkt)?;
            m.flags |= Meta::CHECKED;
            let ip = ipv6::Packet::new_unchecked(&pkt.data()[L3..]);
            if icmpv6_type(&ip) == Some(icmpv6::Message::NeighborSolicit) {
                Ok(Stage::NdReply)
            } else {
                Ok(Stage::L2Flood)
            }
        }
        _ if multicast => Ok(Stage::L2Flood),
        _ => Ok(Stage::L2Forward),
    }
}

/// `uplink-input`: IPv6 from the underlay, to this node's underlay address or to a local SID.
pub(super) fn uplink_input<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
) {
    let uplink_mac = ethernet::Address(n.cfg.uplink_mac.0);
    let underlay = n.cfg.underlay_addr;
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        if let Some(&ahead) = frame.get(k + 2) {
            if let Some(p) = &n.bufs[usize::from(ahead)] {
                p.prefetch();
            }
        }
        let slot = usize::from(i);
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        let v = (|| {
            let eth =
                ethernet::Frame::new_checked(pkt.data()).map_err(|_| DropReason::Malformed)?;
            let multicast = eth.dst_addr().is_multicast();
            if !multicast && eth.dst_addr() != uplink_mac {
                return Err(DropReason::NotForUs);
            }
            if eth.ethertype() != EtherType::Ipv6 {
                return Err(DropReason::UnsupportedEthertype);
            }
            check_ipv6(pkt)?;
            let ip = ipv6::Packet::new_unchecked(&pkt.data()[L3..]);
            let dst = ip.dst_addr();
            let icmp = icmpv6_type(&ip);
            let nd = matches!(
                icmp,
                Some(icmpv6::Message::NeighborSolicit | icmpv6::Message::NeighborAdvert)
            );
            if dst == underlay {
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
                None if matches!(
                    ip.next_header(),
                    IpProtocol::Ipv4
                        | IpProtocol::Ipv6
                        | IpProtocol::Ipv6Route
                        | IpProtocol::Ethernet
                ) =>
                {
                    Err(DropReason::UnknownSid)
                }
                None => Err(DropReason::NotForUs),
            }
        })();
        to[k] = n.resolve(i, v);
    }
    n.hand_over(frame, &to[..frame.len()]);
}
