//! The uplink side: SRv6 encapsulation (H.Encaps.Red), End.DT46 decapsulation, and the outer
//! Ethernet header toward the underlay next hop (resolved by NDP).

use std::net::Ipv6Addr;

use lace_shared::status::DropReason;
use lace_shared::types::{PortId, Sid, SidBehavior};

use super::ip::{be16, check_ipv6, decrement_ttl, icmp, v6_at, ETH_IPV6, L3, PROTO_ICMPV6};
use super::neigh::UnderlayNeighbors;
use super::{Config, Cx, Hop, Io, Meta, PacketBuf, Stage, Verdict};
use crate::wire::flow::FiveTuple;
use crate::wire::icmpv6::{self, solicited_node};
use crate::wire::{ipv6, srh, EthernetAddress, IpProtocol};

const NH_IPV4: u8 = 4;
const NH_IPV6: u8 = 41;
const NH_ROUTING: u8 = 43;
/// Outer IPv6 header of H.Encaps.Red without an SRH.
pub(super) const ENCAP_LEN: usize = 40;

/// `uplink-input`: IPv6 from the underlay, to this node's address or to a local SID.
pub(super) fn uplink_input<B: PacketBuf>(
    cfg: &Config,
    pkt: &mut B,
    m: &mut Meta,
    cx: &Cx<'_, '_>,
) -> Verdict {
    let d = pkt.data();
    if d.len() < L3 {
        return Err(DropReason::Malformed);
    }
    let multicast = d[0] & 1 == 1;
    if !multicast && d[0..6] != cfg.uplink_mac.0 {
        return Err(DropReason::NotForUs);
    }
    if be16(d, 12) != ETH_IPV6 {
        return Err(DropReason::UnsupportedEthertype);
    }
    check_ipv6(pkt)?;
    let d = pkt.data();
    let dst = v6_at(d, L3 + 24);
    let next = d[L3 + 6];
    let icmp_type = d.get(L3 + 40).copied();
    if dst == cfg.underlay_addr {
        return match (next, icmp_type) {
            (PROTO_ICMPV6, Some(128)) => Ok(Stage::IcmpEcho),
            (PROTO_ICMPV6, Some(135 | 136)) => Ok(Stage::NdReply),
            _ => Err(DropReason::ReceiveUnsupported),
        };
    }
    if dst.is_multicast() {
        return match (next, icmp_type) {
            (PROTO_ICMPV6, Some(135 | 136)) => Ok(Stage::NdReply),
            _ => Err(DropReason::Multicast),
        };
    }
    if multicast {
        return Err(DropReason::Multicast);
    }
    match cx.snap().local_sid(Sid(dst)) {
        Some(SidBehavior::EndDt46(net)) => {
            m.net = net;
            Ok(Stage::Srv6Decap)
        }
        Some(_) => Err(DropReason::UnsupportedNextHop),
        None if matches!(next, NH_IPV4 | NH_IPV6 | NH_ROUTING) => Err(DropReason::UnknownSid),
        None => Err(DropReason::NotForUs),
    }
}

/// `srv6-decap`: End.DT46 (RFC 8986 §4.8): strip the outer IPv6 header and an SRH whose
/// Segments Left is 0 and whose last segment is this SID, then look the inner packet up in the
/// SID's network.
pub(super) fn decap<B: PacketBuf>(pkt: &mut B, m: &mut Meta, cx: &mut Cx<'_, '_>) -> Verdict {
    let d = pkt.data();
    let mut next = d[L3 + 6];
    let mut off = L3 + 40;
    if next == NH_ROUTING {
        let sr = srh::Packet::new_checked(&d[off..]).map_err(|_| DropReason::Malformed)?;
        if sr.routing_type() != srh::RoutingType::SegmentRouting {
            return Err(DropReason::UnsupportedExtension);
        }
        // RFC 8986 §4.8 S01: a decapsulating SID must be the last segment.
        if sr.segments_left() != 0 || sr.segment(0) != Some(v6_at(d, L3 + 24)) {
            return Err(DropReason::SrhSegmentsLeft);
        }
        next = sr.next_header().into();
        off += sr.header_len();
    }
    let inner = match next {
        NH_IPV4 => Stage::Ip4Lookup,
        NH_IPV6 => Stage::Ip6Lookup,
        _ => return Err(DropReason::DecapUnsupportedInner),
    };
    let (_, ctx) = cx.net(m.net).ok_or(DropReason::NoNetwork)?;
    m.gw_mac = ctx.gw_mac;
    m.checked = false;
    // Keep 14 bytes in front of the inner packet for the delivery header.
    if !pkt.adj(off - L3) {
        return Err(DropReason::Malformed);
    }
    let d = pkt.data_mut();
    let ethertype = if next == NH_IPV4 { 0x0800u16 } else { ETH_IPV6 };
    d[12..14].copy_from_slice(&ethertype.to_be_bytes());
    Ok(inner)
}

/// `srv6-encap`: H.Encaps.Red with one segment (RFC 8986 §5.2: no SRH), toward the remote
/// node's End.DT46 SID for this network.
pub(super) fn encap<B: PacketBuf>(cfg: &Config, pkt: &mut B, m: &mut Meta) -> Verdict {
    let Hop::Remote { sid, .. } = m.hop else {
        return Err(DropReason::UnknownNode);
    };
    let inner_len = pkt.len() - L3;
    let max_inner = usize::from(cfg.underlay_mtu).saturating_sub(ENCAP_LEN);
    if inner_len > max_inner {
        return icmp(m, DropReason::TooBig, max_inner as u32);
    }
    let d = pkt.data_mut();
    if !m.generated {
        decrement_ttl(d);
    }
    let v4 = d[L3] >> 4 == 4;
    let (proto, tclass) = if v4 {
        (NH_IPV4, d[L3 + 1])
    } else {
        (NH_IPV6, (be16(d, L3) >> 4) as u8)
    };
    let label = FiveTuple::from_ip(&d[L3..]).map_or(1, |t| t.flow_label(cfg.flow_seed));
    if !pkt.prepend(ENCAP_LEN) {
        return Err(DropReason::NoHeadroom);
    }
    let d = pkt.data_mut();
    let first = (6u32 << 28) | (u32::from(tclass) << 20) | (label & ipv6::FLOW_LABEL_MASK);
    let h = &mut d[L3..L3 + ENCAP_LEN];
    h[0..4].copy_from_slice(&first.to_be_bytes());
    h[4..6].copy_from_slice(&(inner_len as u16).to_be_bytes());
    h[6] = proto;
    h[7] = cfg.hop_limit;
    h[8..24].copy_from_slice(&cfg.encap_source.octets());
    h[24..40].copy_from_slice(&sid.octets());
    Ok(Stage::UnderlayOut)
}

/// `underlay-out`: the outer Ethernet header toward the remote node's underlay address, its
/// MAC from the static underlay table or learned by NDP; unresolved → solicit and drop.
pub(super) fn underlay_out<B: PacketBuf, I: Io<B>>(
    cfg: &Config,
    neigh: &UnderlayNeighbors,
    pkt: &mut B,
    m: &mut Meta,
    cx: &mut Cx<'_, '_>,
    io: &mut I,
) -> Verdict {
    let Hop::Remote { node, .. } = m.hop else {
        return Err(DropReason::UnknownNode);
    };
    let mac = match cx.remote(node) {
        Some(mac) => Some(mac),
        None => {
            let info = cx.snap().node(node).ok_or(DropReason::UnknownNode)?;
            let found = cx
                .snap()
                .underlay_neighbor(info.underlay)
                .or_else(|| neigh.lookup(info.underlay));
            match found {
                Some(mac) => {
                    cx.set_remote(node, mac);
                    Some(mac)
                }
                None => {
                    unresolved(cfg, neigh, info.underlay, io)?;
                    None
                }
            }
        }
    };
    let Some(mac) = mac else {
        return Err(DropReason::NeighborUnresolved);
    };
    let d = pkt.data_mut();
    d[0..6].copy_from_slice(&mac.0);
    d[6..12].copy_from_slice(&cfg.uplink_mac.0);
    d[12..14].copy_from_slice(&ETH_IPV6.to_be_bytes());
    m.tx = PortId::UPLINK;
    Ok(Stage::Tx)
}

/// The next hop `addr` has no MAC yet: solicit it (rate-limited) and drop the packet.
fn unresolved<B: PacketBuf, I: Io<B>>(
    cfg: &Config,
    neigh: &UnderlayNeighbors,
    addr: Ipv6Addr,
    io: &mut I,
) -> Result<(), DropReason> {
    if neigh.should_solicit(addr, io.now_ns()) {
        let Some(mut ns) = io.alloc() else {
            return Err(DropReason::NoBuffer);
        };
        if !build_solicitation(cfg, addr, &mut ns) {
            return Err(DropReason::NoBuffer);
        }
        io.send(PortId::UPLINK, ns);
    }
    Err(DropReason::NeighborUnresolved)
}

/// Writes a neighbor solicitation for `target` from the underlay address into an empty buffer.
pub(super) fn build_solicitation<B: PacketBuf>(cfg: &Config, target: Ipv6Addr, b: &mut B) -> bool {
    let repr = icmpv6::Repr::NeighborSolicit {
        target_addr: target,
        source_lladdr: Some(EthernetAddress(cfg.uplink_mac.0)),
    };
    let len = repr.buffer_len();
    if !b.append(L3 + 40 + len) {
        return false;
    }
    let dst = solicited_node(&target);
    let d = b.data_mut();
    let o = dst.octets();
    d[0..6].copy_from_slice(&[0x33, 0x33, o[12], o[13], o[14], o[15]]);
    d[6..12].copy_from_slice(&cfg.uplink_mac.0);
    d[12..14].copy_from_slice(&ETH_IPV6.to_be_bytes());
    ipv6::Repr {
        src_addr: cfg.underlay_addr,
        dst_addr: dst,
        next_header: IpProtocol::from(PROTO_ICMPV6),
        payload_len: len,
        hop_limit: 255,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut ipv6::Packet::new_unchecked(&mut d[L3..L3 + 40]));
    repr.emit(
        &cfg.underlay_addr,
        &dst,
        &mut icmpv6::Packet::new_unchecked(&mut d[L3 + 40..]),
    );
    true
}
