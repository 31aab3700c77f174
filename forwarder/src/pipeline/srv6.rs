//! The uplink side: SRv6 encapsulation (H.Encaps.Red), End.DT46 decapsulation, and the outer
//! Ethernet header toward the underlay next hop (resolved by NDP).

use std::net::Ipv6Addr;

use lace_shared::status::DropReason;
use lace_shared::tables::Snapshot;
use lace_shared::types::{PortId, Sid, SidBehavior};

use super::ip::{be16, check_ipv6, decrement_ttl, icmp, v6_at, ETH_IPV6, L3, PROTO_ICMPV6};
use super::neigh::UnderlayNeighbors;
use super::{Config, Hop, Io, Meta, NetCtx, PacketBuf, Stage, Verdict};
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
    snap: &Snapshot<'_>,
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
    match snap.local_sid(Sid(dst)) {
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
pub(super) fn decap<B: PacketBuf>(pkt: &mut B, m: &mut Meta, snap: &Snapshot<'_>) -> Verdict {
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
    let ctx = NetCtx::of(snap, m.net).ok_or(DropReason::NoNetwork)?;
    m.gw_mac = ctx.gw_mac;
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
    let mut outer = ipv6::Packet::new_unchecked(&mut d[L3..L3 + ENCAP_LEN]);
    outer.set_version(6);
    outer.set_traffic_class(tclass);
    outer.set_flow_label(label);
    outer.set_payload_len(inner_len as u16);
    outer.set_next_header(IpProtocol::from(proto));
    outer.set_hop_limit(cfg.hop_limit);
    outer.set_src_addr(cfg.encap_source);
    outer.set_dst_addr(sid);
    Ok(Stage::UnderlayOut)
}

/// `underlay-out`: the outer Ethernet header toward the remote node's underlay address, its
/// MAC from the static underlay table or learned by NDP; unresolved → solicit and drop.
pub(super) fn underlay_out<B: PacketBuf, I: Io<B>>(
    cfg: &Config,
    neigh: &UnderlayNeighbors,
    pkt: &mut B,
    m: &mut Meta,
    snap: &Snapshot<'_>,
    io: &mut I,
) -> Verdict {
    let Hop::Remote { node, .. } = m.hop else {
        return Err(DropReason::UnknownNode);
    };
    let info = snap.node(node).ok_or(DropReason::UnknownNode)?;
    let next_hop = info.underlay;
    let mac = snap
        .underlay_neighbor(next_hop)
        .or_else(|| neigh.lookup(next_hop));
    let Some(mac) = mac else {
        if neigh.should_solicit(next_hop, io.now_ns()) {
            let Some(mut ns) = io.alloc() else {
                return Err(DropReason::NoBuffer);
            };
            if !build_solicitation(cfg, next_hop, &mut ns) {
                return Err(DropReason::NoBuffer);
            }
            io.send(PortId::UPLINK, ns);
        }
        return Err(DropReason::NeighborUnresolved);
    };
    let d = pkt.data_mut();
    d[0..6].copy_from_slice(&mac.0);
    d[6..12].copy_from_slice(&cfg.uplink_mac.0);
    d[12..14].copy_from_slice(&ETH_IPV6.to_be_bytes());
    m.tx = PortId::UPLINK;
    Ok(Stage::Tx)
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
