//! The uplink side: SRv6 encapsulation (`H.Encaps.Red` from the precomputed rewrite control
//! publishes per remote next hop), End.DT46 decapsulation, and the outer Ethernet header toward
//! the underlay next hop (resolved by NDP).

use std::net::Ipv6Addr;

use lace_shared::status::DropReason;
use lace_shared::types::{EncapRec, MacAddr, PortId};

use super::input::L3;
use super::neigh::UnderlayNeighbors;
use super::{Config, Hop, Io, Meta, NodeCtx, PacketBuf, Stage, Verdict, VEC_CAP};
use crate::wire::ethernet::{self, EtherType};
use crate::wire::flow::{self, FiveTuple};
use crate::wire::icmpv6::{self, solicited_node};
use crate::wire::{ipv4, ipv6, srh, EthernetAddress, IpProtocol};

/// Outer IPv6 header of H.Encaps.Red without an SRH.
pub(super) const ENCAP_LEN: usize = ipv6::HEADER_LEN;

/// `srv6-decap`: End.DT46 (RFC 8986 §4.8): strip the outer IPv6 header and an SRH whose
/// Segments Left is 0 and whose last segment is this SID, then look the inner packet up in the
/// SID's network.
pub(super) fn decap<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        let m = &mut n.meta[slot];
        let v = decap_one(pkt, m);
        let v = v.and_then(|to| match n.cx.net(m.net) {
            Some(_) => Ok(to),
            None => Err(DropReason::NoNetwork),
        });
        to[k] = n.resolve(i, v);
    }
    n.hand_over(frame, &to[..frame.len()]);
}

/// The outer headers of a packet to a decapsulating SID: the IPv6 header (checked by
/// uplink-input) and an SRH whose Segments Left is 0 and whose last segment is the SID.
/// Returns the inner payload's type and where it starts.
#[inline(always)]
fn outer_headers(d: &[u8]) -> Result<(IpProtocol, usize), DropReason> {
    let ip = ipv6::Packet::new_unchecked(&d[L3..]);
    let mut next = ip.next_header();
    let mut off = L3 + ipv6::HEADER_LEN;
    if next == IpProtocol::Ipv6Route {
        let sr = srh::Packet::new_checked(ip.payload()).map_err(|_| DropReason::Malformed)?;
        if sr.routing_type() != srh::RoutingType::SegmentRouting {
            return Err(DropReason::UnsupportedExtension);
        }
        // RFC 8986 §4.8 S01: a decapsulating SID must be the last segment.
        if sr.segments_left() != 0 || sr.segment(0) != Some(ip.dst_addr()) {
            return Err(DropReason::SrhSegmentsLeft);
        }
        next = sr.next_header();
        off += sr.header_len();
    }
    Ok((next, off))
}

#[inline(always)]
fn decap_one<B: PacketBuf>(pkt: &mut B, m: &mut Meta) -> Verdict {
    let (next, off) = outer_headers(pkt.data())?;
    let (inner, ethertype) = match next {
        IpProtocol::Ipv4 => (Stage::Ip4Lookup, EtherType::Ipv4),
        IpProtocol::Ipv6 => (Stage::Ip6Lookup, EtherType::Ipv6),
        _ => return Err(DropReason::DecapUnsupportedInner),
    };
    // Keep 14 bytes in front of the inner packet for the delivery header.
    if !pkt.adj(off - L3) {
        return Err(DropReason::Malformed);
    }
    ethernet::Frame::new_unchecked(pkt.data_mut()).set_ethertype(ethertype);
    m.flags &= !Meta::CHECKED;
    Ok(inner)
}

/// `l2-decap`: End.DT2U and End.DT2M (RFC 8986 §4.11, §4.12): strip the outer IPv6 header
/// (and SRH) of an Ethernet payload (next header 143); the inner frame is bridged in the SID's
/// l2 network — by its FDB (DT2U) or flooded to the local ports (DT2M).
pub(super) fn l2_decap<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        let m = &mut n.meta[slot];
        let v = (|| {
            let (next, off) = outer_headers(pkt.data())?;
            if next != IpProtocol::Ethernet {
                return Err(DropReason::DecapUnsupportedInner);
            }
            // The inner frame needs at least its Ethernet header.
            if pkt.len() < off + ethernet::HEADER_LEN || !pkt.adj(off) {
                return Err(DropReason::Malformed);
            }
            m.flags &= !Meta::CHECKED;
            Ok(if m.is(Meta::FLOOD) {
                Stage::L2Flood
            } else {
                Stage::L2Forward
            })
        })();
        let v = v.and_then(|to| match n.cx.net(m.net) {
            Some((_, ctx)) if ctx.kind == lace_shared::types::NetworkKind::L2 => Ok(to),
            Some(_) => Err(DropReason::UnsupportedNetworkKind),
            None => Err(DropReason::NoNetwork),
        });
        to[k] = n.resolve(i, v);
    }
    n.hand_over(frame, &to[..frame.len()]);
}

/// H.Encaps.L2.Red of one frame (RFC 8986 §5.4, one segment, no SRH): the whole Ethernet
/// frame behind the precomputed outer IPv6 header, next header 143, the flow label from the
/// inner flow (IP five-tuple, else the MACs and EtherType), traffic class 0. The frame is
/// bridged, so its TTL is untouched. A frame larger than the underlay allows is dropped as
/// too big (the endpoints' MTU leaves room for the encapsulation).
#[inline(always)]
pub(super) fn l2_encap_one<B: PacketBuf>(pkt: &mut B, e: Encap<'_>) -> Result<(), Miss> {
    let inner_len = pkt.len();
    if inner_len > e.max_inner {
        return Err(Miss::TooBig);
    }
    let rss = pkt.rss_hash();
    if !pkt.prepend(L3 + ENCAP_LEN) {
        return Err(Miss::NoHeadroom);
    }
    const INNER: usize = L3 + ENCAP_LEN;
    let d = pkt.data_mut();
    let label = match rss {
        Some(h) => flow::label_of(h),
        None => l2_flow_label(&d[INNER..], e.seed),
    };
    let Some(h) = d.first_chunk_mut::<INNER>() else {
        return Err(Miss::NoHeadroom);
    };
    let outer = &mut h[L3..];
    outer.copy_from_slice(&e.rewrite.ip6);
    let mut ip = ipv6::Packet::new_unchecked(outer);
    ip.set_traffic_class(0);
    ip.set_flow_label(label);
    ip.set_payload_len(inner_len as u16);
    ip.set_next_header(IpProtocol::Ethernet);
    ip.set_hop_limit(e.hop_limit);
    Ok(())
}

/// The outer flow label of a bridged frame: the inner IP flow's when it carries IPv4 or IPv6
/// (so the same flow gets the same label routed or bridged), else a hash of the MACs and the
/// EtherType.
#[inline]
fn l2_flow_label(frame: &[u8], seed: u64) -> u32 {
    let Some(h) = frame.first_chunk::<{ ethernet::HEADER_LEN }>() else {
        return 1;
    };
    let ip = &frame[ethernet::HEADER_LEN..];
    match u16::from_be_bytes([h[12], h[13]]) {
        0x0800 => flow::ipv4_flow_label(ip, seed),
        0x86dd => FiveTuple::from_ipv6(ip).map_or(1, |t| t.flow_label(seed)),
        ethertype => {
            let mut macs = [0u8; 16];
            macs[4..].copy_from_slice(&h[..12]);
            flow::label_of(flow::hash_v6(
                seed,
                u128::from_be_bytes(macs),
                0,
                u64::from(ethertype),
            ))
        }
    }
}

/// `l2-encap`: H.Encaps.L2.Red toward the remote node's End.DT2U SID (the next hop
/// l2-forward found in the FDB), then underlay-out.
pub(super) fn l2_encap<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    let max_inner = usize::from(n.cfg.underlay_mtu).saturating_sub(ENCAP_LEN);
    let (seed, hop_limit) = (n.cfg.flow_seed, n.cfg.hop_limit);
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let Hop::Remote { nh } = n.meta[slot].hop else {
            to[k] = n.drop_for(i, DropReason::UnknownNode);
            continue;
        };
        let rewrite = match n.cx.encap(nh) {
            Some(e) if e.usable() => e,
            Some(e) => {
                to[k] = n.drop_for(i, unusable(e));
                continue;
            }
            None => {
                to[k] = n.drop_for(i, DropReason::UnknownNode);
                continue;
            }
        };
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        let e = Encap {
            rewrite,
            max_inner,
            seed,
            hop_limit,
        };
        to[k] = match l2_encap_one(pkt, e) {
            Ok(()) => Stage::UnderlayOut,
            Err(Miss::TooBig) => n.drop_for(i, DropReason::TooBig),
            Err(Miss::NoHeadroom) => n.drop_for(i, DropReason::NoHeadroom),
        };
    }
    n.hand_over(frame, &to[..frame.len()]);
}

/// Encapsulates one l2 frame toward next hop `nh` (H.Encaps.L2.Red) and transmits it on the
/// uplink: l2-encap, underlay-out and tx in one step, for the copies l2-flood makes (they have
/// no slot in the vectors). `Err`: the reason the copy is dropped.
pub(super) fn l2_send_remote<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    mut pkt: B,
    nh: u32,
) -> Result<(), DropReason> {
    let rewrite = match n.cx.encap(nh) {
        Some(e) if e.usable() => e,
        Some(e) => return Err(unusable(e)),
        None => return Err(DropReason::UnknownNode),
    };
    let e = Encap {
        rewrite,
        max_inner: usize::from(n.cfg.underlay_mtu).saturating_sub(ENCAP_LEN),
        seed: n.cfg.flow_seed,
        hop_limit: n.cfg.hop_limit,
    };
    match l2_encap_one(&mut pkt, e) {
        Ok(()) => {}
        Err(Miss::TooBig) => return Err(DropReason::TooBig),
        Err(Miss::NoHeadroom) => return Err(DropReason::NoHeadroom),
    }
    let addr = rewrite.underlay_addr();
    let Some(mac) = n.cx.underlay_mac(n.neigh, addr) else {
        return Err(unresolved(n.cfg, n.neigh, addr, n.io));
    };
    underlay_eth(&mut pkt, mac, EthernetAddress(n.cfg.uplink_mac.0));
    n.io.send(PortId::UPLINK, pkt);
    Ok(())
}

/// Why a remote next hop's rewrite cannot be used.
#[inline]
pub(super) fn unusable(e: &EncapRec) -> DropReason {
    if e.flags & EncapRec::NODE_KNOWN == 0 {
        DropReason::UnknownNode
    } else {
        DropReason::NoSrv6Source
    }
}

/// What the encapsulation of one packet needs, the same for a whole vector.
#[derive(Clone, Copy)]
pub(super) struct Encap<'a> {
    pub(super) rewrite: &'a EncapRec,
    pub(super) max_inner: usize,
    pub(super) seed: u64,
    pub(super) hop_limit: u8,
}

/// H.Encaps.Red of one packet (its TTL decremented unless it is generated): the precomputed
/// outer header copied in front, its payload length, traffic class, flow label, next header
/// and hop limit patched. `Err`: why the packet cannot be encapsulated (it is unchanged).
#[inline(always)]
fn encap_one<B: PacketBuf>(pkt: &mut B, generated: bool, e: Encap<'_>) -> Result<(), Miss> {
    let inner_len = pkt.len() - L3;
    if inner_len > e.max_inner {
        return Err(Miss::TooBig);
    }
    if !pkt.prepend(ENCAP_LEN) {
        return Err(Miss::NoHeadroom);
    }
    // From here on the inner packet is at OUTER_END; the outer header goes in front of it.
    const INNER: usize = L3 + ENCAP_LEN;
    let rss = pkt.rss_hash();
    let d = pkt.data_mut();
    let (next, tclass) = match d.get(INNER).map(|v| v >> 4) {
        Some(4) => {
            if !generated {
                if let Some(h) = d.get_mut(INNER..INNER + ipv4::HEADER_LEN) {
                    ipv4::Packet::new_unchecked(h).decrement_ttl();
                }
            }
            let ip = ipv4::Packet::new_unchecked(&d[INNER..]);
            (IpProtocol::Ipv4, ip.dscp() << 2 | ip.ecn())
        }
        _ => {
            if !generated {
                if let Some(h) = d.get_mut(INNER..INNER + ipv6::HEADER_LEN) {
                    ipv6::Packet::new_unchecked(h).decrement_hop_limit();
                }
            }
            let ip = ipv6::Packet::new_unchecked(&d[INNER..]);
            (IpProtocol::Ipv6, ip.traffic_class())
        }
    };
    let label = match (rss, next) {
        (Some(h), _) => flow::label_of(h),
        (None, IpProtocol::Ipv4) => flow::ipv4_flow_label(&d[INNER..], e.seed),
        (None, _) => FiveTuple::from_ipv6(&d[INNER..]).map_or(1, |t| t.flow_label(e.seed)),
    };
    let Some(h) = d.first_chunk_mut::<INNER>() else {
        return Err(Miss::NoHeadroom);
    };
    let outer = &mut h[L3..];
    outer.copy_from_slice(&e.rewrite.ip6);
    let mut ip = ipv6::Packet::new_unchecked(outer);
    ip.set_traffic_class(tclass);
    ip.set_flow_label(label);
    ip.set_payload_len(inner_len as u16);
    ip.set_next_header(next);
    ip.set_hop_limit(e.hop_limit);
    Ok(())
}

/// Why [`encap_one`] did not encapsulate.
#[derive(Clone, Copy)]
pub(super) enum Miss {
    /// Larger than the underlay MTU allows: ICMP too-big.
    TooBig,
    /// No room in front for the outer header.
    NoHeadroom,
}

/// The outer Ethernet header toward the underlay next hop `mac`.
#[inline(always)]
fn underlay_eth<B: PacketBuf>(pkt: &mut B, mac: MacAddr, uplink_mac: EthernetAddress) {
    if let Some(h) = pkt.head_mut::<L3>() {
        let mut eth = ethernet::Frame::new_unchecked(&mut h[..]);
        eth.set_dst_addr(EthernetAddress(mac.0));
        eth.set_src_addr(uplink_mac);
        eth.set_ethertype(EtherType::Ipv6);
    }
}

/// `srv6-encap`: H.Encaps.Red with one segment (RFC 8986 §5.2: no SRH), toward the remote
/// node's End.DT46 SID for this network, from the precomputed rewrite.
///
/// The fast path: when every packet of the vector goes to one remote next hop whose underlay
/// MAC is resolved (one pod talking to one node), the vector runs through srv6-encap,
/// underlay-out and tx in one loop, counted in all three.
pub(super) fn encap<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    let max_inner = usize::from(n.cfg.underlay_mtu).saturating_sub(ENCAP_LEN);
    let (seed, hop_limit) = (n.cfg.flow_seed, n.cfg.hop_limit);
    if let Some(done) = encap_uniform(n, frame, max_inner, seed, hop_limit) {
        return done;
    }
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let Hop::Remote { nh } = n.meta[slot].hop else {
            to[k] = n.drop_for(i, DropReason::UnknownNode);
            continue;
        };
        let rewrite = match n.cx.encap(nh) {
            Some(e) if e.usable() => e,
            Some(e) => {
                to[k] = n.drop_for(i, unusable(e));
                continue;
            }
            None => {
                to[k] = n.drop_for(i, DropReason::UnknownNode);
                continue;
            }
        };
        let generated = n.meta[slot].is(Meta::GENERATED);
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        let e = Encap {
            rewrite,
            max_inner,
            seed,
            hop_limit,
        };
        to[k] = match encap_one(pkt, generated, e) {
            Ok(()) => Stage::UnderlayOut,
            Err(Miss::TooBig) => n.icmp_for(i, DropReason::TooBig, max_inner as u32),
            Err(Miss::NoHeadroom) => n.drop_for(i, DropReason::NoHeadroom),
        };
    }
    n.hand_over(frame, &to[..frame.len()]);
}

/// The fast path of `srv6-encap` (see there); `None` when the vector is not uniform, the
/// rewrite is unusable or the MAC unresolved — the general path then takes it whole.
#[inline(always)]
fn encap_uniform<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
    max_inner: usize,
    seed: u64,
    hop_limit: u8,
) -> Option<()> {
    let &first = frame.first()?;
    let hop = n.meta[usize::from(first)].hop;
    let Hop::Remote { nh } = hop else {
        return None;
    };
    if frame.iter().any(|&i| n.meta[usize::from(i)].hop != hop) {
        return None;
    }
    let rewrite = n.cx.encap(nh).filter(|e| e.usable())?;
    let mac = n.cx.underlay_mac(n.neigh, rewrite.underlay_addr())?;
    let e = Encap {
        rewrite,
        max_inner,
        seed,
        hop_limit,
    };
    let uplink_mac = EthernetAddress(n.cfg.uplink_mac.0);
    // Packets that cannot be encapsulated (too big, no headroom) take the general way on.
    let mut rest = [0u8; VEC_CAP];
    let mut to = [Stage::Drop; VEC_CAP];
    let mut left = 0;
    let mut sent = 0u64;
    for &i in frame {
        let slot = usize::from(i);
        let generated = n.meta[slot].is(Meta::GENERATED);
        let Some(mut pkt) = n.bufs[slot].take() else {
            continue;
        };
        match encap_one(&mut pkt, generated, e) {
            Ok(()) => {
                underlay_eth(&mut pkt, mac, uplink_mac);
                n.io.send(PortId::UPLINK, pkt);
                sent += 1;
            }
            Err(miss) => {
                n.bufs[slot] = Some(pkt);
                rest[left] = i;
                to[left] = match miss {
                    Miss::TooBig => n.icmp_for(i, DropReason::TooBig, max_inner as u32),
                    Miss::NoHeadroom => n.drop_for(i, DropReason::NoHeadroom),
                };
                left += 1;
            }
        }
    }
    n.through(&[Stage::Srv6Encap, Stage::UnderlayOut, Stage::Tx], sent);
    n.hand_over(&rest[..left], &to[..left]);
    Some(())
}

/// `underlay-out`: the outer Ethernet header toward the remote node's underlay address, its
/// MAC from the static underlay table or learned by NDP; unresolved → solicit and drop.
pub(super) fn underlay_out<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
) {
    let uplink_mac = EthernetAddress(n.cfg.uplink_mac.0);
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let Hop::Remote { nh } = n.meta[slot].hop else {
            to[k] = n.drop_for(i, DropReason::UnknownNode);
            continue;
        };
        // srv6-encap only hands over packets whose rewrite is usable.
        let Some(addr) = n.cx.encap(nh).map(EncapRec::underlay_addr) else {
            to[k] = n.drop_for(i, DropReason::UnknownNode);
            continue;
        };
        let Some(mac) = n.cx.underlay_mac(n.neigh, addr) else {
            let r = unresolved(n.cfg, n.neigh, addr, n.io);
            to[k] = n.drop_for(i, r);
            continue;
        };
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        underlay_eth(pkt, mac, uplink_mac);
        n.meta[slot].tx = PortId::UPLINK;
        to[k] = Stage::Tx;
    }
    n.hand_over(frame, &to[..frame.len()]);
}

/// The next hop `addr` has no MAC yet: solicit it (rate-limited). The packet is dropped for
/// the reason returned.
fn unresolved<B: PacketBuf, I: Io<B>>(
    cfg: &Config,
    neigh: &UnderlayNeighbors,
    addr: Ipv6Addr,
    io: &mut I,
) -> DropReason {
    if neigh.should_solicit(addr, io.now_ns()) {
        let Some(mut ns) = io.alloc() else {
            return DropReason::NoBuffer;
        };
        if !build_solicitation(cfg, addr, &mut ns) {
            return DropReason::NoBuffer;
        }
        io.send(PortId::UPLINK, ns);
    }
    DropReason::NeighborUnresolved
}

/// Writes a neighbor solicitation for `target` from the underlay address into an empty buffer.
pub(super) fn build_solicitation<B: PacketBuf>(cfg: &Config, target: Ipv6Addr, b: &mut B) -> bool {
    let repr = icmpv6::Repr::NeighborSolicit {
        target_addr: target,
        source_lladdr: Some(EthernetAddress(cfg.uplink_mac.0)),
    };
    let len = repr.buffer_len();
    if !b.append(L3 + ipv6::HEADER_LEN + len) {
        return false;
    }
    let dst = solicited_node(&target);
    let d = b.data_mut();
    ethernet::Repr {
        dst_addr: ethernet::Address::ipv6_multicast(&dst),
        src_addr: EthernetAddress(cfg.uplink_mac.0),
        ethertype: EtherType::Ipv6,
        vlan: None,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut d[..L3]));
    ipv6::Repr {
        src_addr: cfg.underlay_addr,
        dst_addr: dst,
        next_header: IpProtocol::Icmpv6,
        payload_len: len,
        hop_limit: 255,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut ipv6::Packet::new_unchecked(
        &mut d[L3..L3 + ipv6::HEADER_LEN],
    ));
    repr.emit(
        &cfg.underlay_addr,
        &dst,
        &mut icmpv6::Packet::new_unchecked(&mut d[L3 + ipv6::HEADER_LEN..]),
    );
    true
}
