//! Answers built in the buffer they answer: ARP and NDP for gateways and the underlay address,
//! ICMP echo, and ICMP errors (time exceeded, unreachable, too big).

use std::net::{Ipv4Addr, Ipv6Addr};

use lace_shared::status::DropReason;
use lace_shared::types::{MacAddr, PortId};

use super::ip::{
    be16, v4_at, v6_at, ETH_IPV4, ETH_IPV6, L3, PROTO_ICMP, PROTO_ICMPV6, UNREACH_ADMIN,
};
use super::ip::{port_v4, port_v6};
use super::neigh::UnderlayNeighbors;
use super::{Config, Cx, Meta, PacketBuf, Stage, Verdict};
use crate::wire::icmpv6::{self, NeighborFlags};
use crate::wire::{arp, checksum, ipv6, EthernetAddress, IpProtocol};

/// Hop limit / TTL of packets the forwarder originates.
const OWN_TTL: u8 = 64;
/// Largest ICMPv4 error (RFC 1812 §4.3.2.3: at most 576 bytes).
const ICMP4_MAX: usize = 576;
/// Largest ICMPv6 error (RFC 4443 §2.4(c): at most the minimum MTU).
const ICMP6_MAX: usize = 1280;
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// `arp-reply`: a pod asks for its gateway; answer with the gateway MAC.
pub(super) fn arp_reply<B: PacketBuf>(pkt: &mut B, m: &mut Meta, cx: &mut Cx<'_, '_>) -> Verdict {
    let port = cx.port(m.rx).ok_or(DropReason::UnknownPort)?;
    let (_, ctx) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
    let d = pkt.data_mut();
    let view = arp::Packet::new_checked(&d[L3..]).map_err(|_| DropReason::Malformed)?;
    let req = arp::Repr::parse(&view).map_err(|_| DropReason::Malformed)?;
    if req.sender_hardware_addr.0 != port.mac {
        return Err(DropReason::SpoofedMac);
    }
    // A probe (RFC 5227) has sender 0.0.0.0; anything else must be the endpoint's address.
    let sender = req.sender_protocol_addr;
    if sender != Ipv4Addr::UNSPECIFIED && Some(sender) != port_v4(port) {
        return Err(DropReason::SpoofedSource);
    }
    if req.operation != arp::Operation::Request || Some(req.target_protocol_addr) != ctx.gw4 {
        return Err(DropReason::NotGateway);
    }
    let reply = arp::Repr {
        operation: arp::Operation::Reply,
        sender_hardware_addr: EthernetAddress(ctx.gw_mac.0),
        sender_protocol_addr: req.target_protocol_addr,
        target_hardware_addr: req.sender_hardware_addr,
        target_protocol_addr: sender,
    };
    reply.emit(&mut arp::Packet::new_unchecked(&mut d[L3..L3 + 28]));
    d[0..6].copy_from_slice(&req.sender_hardware_addr.0);
    d[6..12].copy_from_slice(&ctx.gw_mac.0);
    m.tx = m.rx;
    Ok(Stage::Tx)
}

/// `nd-reply`: neighbor solicitations for a pod network's gateway (pod side) or the node's
/// underlay address (uplink side) are answered with an advertisement; advertisements and
/// solicitations on the uplink teach the underlay neighbor cache.
pub(super) fn nd_reply<B: PacketBuf>(
    cfg: &Config,
    neigh: &UnderlayNeighbors,
    pkt: &mut B,
    m: &mut Meta,
    cx: &mut Cx<'_, '_>,
) -> Verdict {
    let d = pkt.data();
    let ip = ipv6::Packet::new_unchecked(&d[L3..]);
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    // RFC 4861 §7.1: hop limit 255 proves the message was not forwarded.
    if ip.hop_limit() != 255 {
        return Err(DropReason::Malformed);
    }
    let icmp = icmpv6::Packet::new_checked(ip.payload()).map_err(|_| DropReason::Malformed)?;
    let repr = icmpv6::Repr::parse(&src, &dst, &icmp).map_err(|_| DropReason::Malformed)?;
    let frame_src = MacAddr([d[6], d[7], d[8], d[9], d[10], d[11]]);
    let uplink = m.rx == PortId::UPLINK;
    let (target, mac) = match repr {
        icmpv6::Repr::NeighborSolicit {
            target_addr,
            source_lladdr,
        } => {
            if uplink {
                if target_addr != cfg.underlay_addr {
                    return Err(DropReason::NotGateway);
                }
                // A solicitation carries the sender's MAC: learn it, as the reverse path.
                if let (Some(ll), false) = (source_lladdr, src.is_unspecified()) {
                    neigh.learn(src, MacAddr(ll.0));
                }
                (target_addr, cfg.uplink_mac)
            } else {
                let port = cx.port(m.rx).ok_or(DropReason::UnknownPort)?;
                let (_, ctx) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
                let link_local = src.segments()[0] & 0xffc0 == 0xfe80;
                if !(src.is_unspecified() || link_local || Some(src) == port_v6(port)) {
                    return Err(DropReason::SpoofedSource);
                }
                if Some(target_addr) != ctx.gw6 {
                    return Err(DropReason::NotGateway);
                }
                (target_addr, ctx.gw_mac)
            }
        }
        icmpv6::Repr::NeighborAdvert {
            target_addr,
            target_lladdr,
            ..
        } if uplink => {
            let mac = target_lladdr.map_or(frame_src, |ll| MacAddr(ll.0));
            neigh.learn(target_addr, mac);
            m.consumed = true;
            return Ok(Stage::Drop);
        }
        _ => return Err(DropReason::NotGateway),
    };
    // Answer: to the soliciting unicast address, or all-nodes for a DAD probe (§7.2.4).
    let (reply_dst, flags, eth_dst) = if src.is_unspecified() {
        (ALL_NODES, NeighborFlags::OVERRIDE, [0x33, 0x33, 0, 0, 0, 1])
    } else {
        let router = if uplink {
            NeighborFlags::EMPTY
        } else {
            NeighborFlags::ROUTER
        };
        (
            src,
            NeighborFlags::from_bits_truncate(
                router.bits() | NeighborFlags::SOLICITED.bits() | NeighborFlags::OVERRIDE.bits(),
            ),
            frame_src.0,
        )
    };
    let na = icmpv6::Repr::NeighborAdvert {
        flags,
        target_addr: target,
        target_lladdr: Some(EthernetAddress(mac.0)),
    };
    let len = na.buffer_len();
    if !pkt.truncate(L3 + 40) || !pkt.append(len) {
        return Err(DropReason::NoHeadroom);
    }
    let d = pkt.data_mut();
    write_ipv6(d, target, reply_dst, PROTO_ICMPV6, len, 255);
    na.emit(
        &target,
        &reply_dst,
        &mut icmpv6::Packet::new_unchecked(&mut d[L3 + 40..]),
    );
    d[0..6].copy_from_slice(&eth_dst);
    d[6..12].copy_from_slice(&mac.0);
    m.tx = m.rx;
    Ok(Stage::Tx)
}

fn write_ipv6(d: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr, next: u8, len: usize, hlim: u8) {
    ipv6::Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::from(next),
        payload_len: len,
        hop_limit: hlim,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut ipv6::Packet::new_unchecked(&mut d[L3..L3 + 40]));
}

fn write_ipv4_header(d: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr, proto: u8, total: usize, tos: u8) {
    let h = &mut d[L3..L3 + 20];
    h[0] = 0x45;
    h[1] = tos;
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[4..8].fill(0);
    h[8] = OWN_TTL;
    h[9] = proto;
    h[10..12].fill(0);
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let sum = !checksum::data(h);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// `icmp-echo`: an echo request to a gateway (answered and routed back like any packet) or to
/// the underlay address (answered straight out of the uplink).
pub(super) fn icmp_echo<B: PacketBuf>(
    cfg: &Config,
    pkt: &mut B,
    m: &mut Meta,
    cx: &mut Cx<'_, '_>,
) -> Verdict {
    let d = pkt.data_mut();
    if d[L3] >> 4 == 4 {
        let ihl = usize::from(d[L3] & 0xf) * 4;
        let total = usize::from(be16(d, L3 + 2));
        if d[L3 + 9] != PROTO_ICMP || be16(d, L3 + 6) & 0x3fff != 0 {
            return Err(DropReason::ReceiveUnsupported);
        }
        let icmp = &mut d[L3 + ihl..L3 + total];
        if icmp.len() < 8 || icmp[0] != 8 {
            return Err(DropReason::ReceiveUnsupported);
        }
        if checksum::data(icmp) != 0xffff {
            return Err(DropReason::Malformed);
        }
        let (_, ctx) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
        let (src, me) = (v4_at(d, L3 + 12), v4_at(d, L3 + 16));
        if ctx.gw4 != Some(me) {
            return Err(DropReason::ReceiveUnsupported);
        }
        let icmp = &mut d[L3 + ihl..L3 + total];
        icmp[0] = 0;
        // Type 8 → 0 changes one 16-bit word of the checksummed message (RFC 1624).
        let sum = checksum::update_u16(be16(icmp, 2), 0x0800, 0x0000);
        icmp[2..4].copy_from_slice(&sum.to_be_bytes());
        // Options are not echoed: the reply is a plain 20-byte header.
        let payload = total - ihl;
        if ihl > 20 {
            d.copy_within(L3 + ihl..L3 + total, L3 + 20);
            pkt.truncate(L3 + 20 + payload);
        }
        let d = pkt.data_mut();
        write_ipv4_header(d, me, src, PROTO_ICMP, 20 + payload, 0);
        d[12..14].copy_from_slice(&ETH_IPV4.to_be_bytes());
        m.generated = true;
        return Ok(Stage::Ip4Lookup);
    }
    let (src, me) = (v6_at(d, L3 + 8), v6_at(d, L3 + 24));
    let len = usize::from(be16(d, L3 + 4));
    if d[L3 + 6] != PROTO_ICMPV6 || len < 8 || d[L3 + 40] != 128 {
        return Err(DropReason::ReceiveUnsupported);
    }
    let icmp = &mut d[L3 + 40..L3 + 40 + len];
    let pseudo = checksum::pseudo_header_v6(&src, &me, IpProtocol::from(PROTO_ICMPV6), len as u32);
    if checksum::combine(&[pseudo, checksum::data(icmp)]) != 0xffff {
        return Err(DropReason::Malformed);
    }
    icmp[0] = 129;
    // Swapping source and destination leaves the pseudo-header sum unchanged.
    let sum = checksum::update_u16(be16(icmp, 2), 128 << 8, 129 << 8);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    d[L3 + 8..L3 + 24].copy_from_slice(&me.octets());
    d[L3 + 24..L3 + 40].copy_from_slice(&src.octets());
    d[L3 + 7] = OWN_TTL;
    if m.rx == PortId::UPLINK && me == cfg.underlay_addr {
        // The underlay's own echo: straight back to the sender's MAC.
        let mut src_mac = [0u8; 6];
        src_mac.copy_from_slice(&d[6..12]);
        d[0..6].copy_from_slice(&src_mac);
        d[6..12].copy_from_slice(&cfg.uplink_mac.0);
        m.tx = PortId::UPLINK;
        return Ok(Stage::Tx);
    }
    let (_, ctx) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
    if ctx.gw6 != Some(me) {
        return Err(DropReason::ReceiveUnsupported);
    }
    m.generated = true;
    Ok(Stage::Ip6Lookup)
}

/// `icmp-error`: the packet could not be forwarded (`m.reason`); it is counted as dropped and
/// turned, in place, into the ICMP error that tells its sender, sourced from the network's
/// gateway and routed like any packet. RFC 1812 §4.3.2.7 / RFC 4443 §2.4(e): never about an
/// ICMP error, a non-first fragment, or a multicast/unspecified source.
pub(super) fn icmp_error<B: PacketBuf>(
    pkt: &mut B,
    m: &mut Meta,
    cx: &mut Cx<'_, '_>,
    drops: &mut [u64],
) -> Verdict {
    drops[m.reason as usize] += 1;
    let (_, ctx) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
    let d = pkt.data();
    if d[L3] >> 4 == 4 {
        let ihl = usize::from(d[L3] & 0xf) * 4;
        let (src, dst) = (v4_at(d, L3 + 12), v4_at(d, L3 + 16));
        let non_first_fragment = be16(d, L3 + 6) & 0x1fff != 0;
        let about_error = d[L3 + 9] == PROTO_ICMP
            && d.get(L3 + ihl)
                .is_some_and(|&t| !matches!(t, 0 | 8 | 13 | 14));
        let bad_src = src.is_unspecified() || src.is_broadcast() || src.is_multicast();
        let Some(gw) = ctx.gw4 else {
            return suppressed(m, drops);
        };
        if non_first_fragment || about_error || bad_src || dst.is_multicast() {
            return suppressed(m, drops);
        }
        let (kind, code, mtu) = match m.reason {
            DropReason::TtlExceeded => (11u8, 0u8, 0u16),
            DropReason::TooBig => (3, 4, m.param as u16),
            _ => (3, if m.param == UNREACH_ADMIN { 13 } else { 0 }, 0),
        };
        let quote = (d.len() - L3).min(ICMP4_MAX - 28);
        if !pkt.truncate(L3 + quote) || !pkt.prepend(28) {
            return Err(DropReason::NoHeadroom);
        }
        let d = pkt.data_mut();
        let icmp = &mut d[L3 + 20..];
        icmp[0] = kind;
        icmp[1] = code;
        icmp[2..6].fill(0);
        icmp[6..8].copy_from_slice(&mtu.to_be_bytes());
        let sum = !checksum::data(icmp);
        icmp[2..4].copy_from_slice(&sum.to_be_bytes());
        write_ipv4_header(d, gw, src, PROTO_ICMP, 28 + quote, 0xc0);
        d[12..14].copy_from_slice(&ETH_IPV4.to_be_bytes());
        m.generated = true;
        return Ok(Stage::Ip4Lookup);
    }
    let (src, dst) = (v6_at(d, L3 + 8), v6_at(d, L3 + 24));
    let about_error = d[L3 + 6] == PROTO_ICMPV6 && d.get(L3 + 40).is_some_and(|&t| t < 128);
    let Some(gw) = ctx.gw6 else {
        return suppressed(m, drops);
    };
    if about_error || src.is_unspecified() || src.is_multicast() || dst.is_multicast() {
        return suppressed(m, drops);
    }
    let (kind, code, word) = match m.reason {
        DropReason::TtlExceeded => (3u8, 0u8, 0u32),
        DropReason::TooBig => (2, 0, m.param),
        _ => (1, if m.param == UNREACH_ADMIN { 1 } else { 0 }, 0),
    };
    let quote = (d.len() - L3).min(ICMP6_MAX - 48);
    if !pkt.truncate(L3 + quote) || !pkt.prepend(48) {
        return Err(DropReason::NoHeadroom);
    }
    let d = pkt.data_mut();
    let len = 8 + quote;
    let icmp = &mut d[L3 + 40..];
    icmp[0] = kind;
    icmp[1] = code;
    icmp[2..4].fill(0);
    icmp[4..8].copy_from_slice(&word.to_be_bytes());
    let pseudo = checksum::pseudo_header_v6(&gw, &src, IpProtocol::from(PROTO_ICMPV6), len as u32);
    let sum = !checksum::combine(&[pseudo, checksum::data(icmp)]);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    write_ipv6(d, gw, src, PROTO_ICMPV6, len, OWN_TTL);
    d[12..14].copy_from_slice(&ETH_IPV6.to_be_bytes());
    m.generated = true;
    Ok(Stage::Ip6Lookup)
}

/// No error may be sent about this packet. It was counted under its own reason already;
/// `icmp-error-suppressed` counts the errors not sent.
fn suppressed(m: &mut Meta, drops: &mut [u64]) -> Verdict {
    drops[DropReason::IcmpErrorSuppressed as usize] += 1;
    m.consumed = true;
    Ok(Stage::Drop)
}
