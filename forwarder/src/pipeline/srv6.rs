//! The uplink side: SRv6 encapsulation (`H.Encaps.Red` from the precomputed rewrite control
//! publishes per remote next hop), End.DT46 decapsulation, and the outer Ethernet header toward
//! the underlay next hop (resolved by NDP).

use std::net::Ipv6Addr;

use lace_shared::status::DropReason;
use lace_shared::types::{EncapRec, MacAddr, PortId};

use super::input::{self, L3};
use super::lookup;
use super::neigh::{Neighbor, UnderlayNeighbors};
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
    if !strip(pkt, off - L3, ethertype) {
        return Err(DropReason::Malformed);
    }
    m.flags &= !Meta::CHECKED;
    Ok(inner)
}

/// Removes the `outer` bytes after the Ethernet header — the outer IPv6 header and SRH — by
/// moving the data start, no bytes copied: the inner packet keeps 14 bytes in front of it for
/// the delivery header, whose EtherType becomes `ethertype`. `false`: too short.
#[inline(always)]
fn strip<B: PacketBuf>(pkt: &mut B, outer: usize, ethertype: EtherType) -> bool {
    if !pkt.adj(outer) {
        return false;
    }
    match pkt.head_mut::<L3>() {
        Some(h) => {
            ethernet::Frame::new_unchecked(&mut h[..]).set_ethertype(ethertype);
            true
        }
        None => false,
    }
}

/// `srv6-decap` of a vector uplink-input checked whole: every packet is IPv6 carrying IPv4,
/// without extension headers, to an End.DT46 SID of network `fresh.net`, and has no [`Meta`]
/// yet (`fresh` is what it would hold). The outer headers are stripped; when every inner
/// header is the plain case ([`input::plain_ipv4`]), the vector goes on to ip4-lookup in the
/// same call chain, still without a `Meta`; otherwise each packet gets one and the general way
/// on.
pub(super) fn decap_fresh<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
    fresh: Meta,
) {
    let mut keys = [0u32; VEC_CAP];
    // The fast pass, as long as every inner header is the plain case.
    let len = frame.len();
    let mut plain = 0;
    let mut stopped_stripped = false;
    while let Some(&i) = frame.get(plain) {
        let Some(pkt) = n.bufs[usize::from(i)].as_mut() else {
            break;
        };
        // uplink-input checked that the 40-byte IPv6 header lies in front of the inner packet.
        if !strip(pkt, ipv6::HEADER_LEN, EtherType::Ipv4) {
            break;
        }
        let Some((_, dst)) = input::plain_ipv4(pkt, false) else {
            stopped_stripped = true;
            break;
        };
        keys[plain] = dst;
        plain += 1;
    }
    let checked = Meta {
        flags: Meta::CHECKED,
        ..fresh
    };
    if plain == len {
        n.chain(Stage::Ip4Lookup, len as u64);
        return lookup::ip4_fresh(n, frame, &keys[..len], checked);
    }
    // The general way: the plain packets so far with their Meta, then one by one.
    for &i in &frame[..plain] {
        n.meta[usize::from(i)] = checked;
    }
    n.q.forward(n.at, Stage::Ip4Lookup, &frame[..plain]);
    for (k, &i) in frame.iter().enumerate().skip(plain) {
        let slot = usize::from(i);
        n.meta[slot] = fresh;
        let Some(pkt) = n.bufs[slot].as_mut() else {
            let to = n.gone(i);
            n.send_on(i, to);
            continue;
        };
        let stripped =
            (k == plain && stopped_stripped) || strip(pkt, ipv6::HEADER_LEN, EtherType::Ipv4);
        if !stripped {
            let to = n.drop_for(i, DropReason::Malformed);
            n.send_on(i, to);
            continue;
        }
        if input::plain_ipv4(pkt, false).is_some() {
            n.meta[slot].flags = Meta::CHECKED;
        }
        n.send_on(i, Stage::Ip4Lookup);
    }
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
    if inner_len > e.max_inner && !pkt.fits(e.max_inner) {
        return Err(Miss::TooBig);
    }
    let rss = pkt.rss_hash();
    if !pkt.prepend(L3 + ENCAP_LEN) {
        return Err(Miss::NoHeadroom);
    }
    const INNER: usize = L3 + ENCAP_LEN;
    let d = pkt.data_mut();
    let label = e
        .label
        .unwrap_or_else(|| l2_label(&d[INNER..], rss, e.seed));
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

/// The outer flow label of a bridged frame: from the NIC's RSS hash when it gave one, else from
/// the frame ([`l2_flow_label`]).
#[inline(always)]
pub(super) fn l2_label(frame: &[u8], rss: Option<u32>, seed: u64) -> u32 {
    match rss {
        Some(h) => flow::label_of(h),
        None => l2_flow_label(frame, seed),
    }
}

/// The outer flow label of a bridged frame: the inner IP flow's when it carries IPv4 or IPv6
/// (so the same flow gets the same label routed or bridged), else a hash of the MACs and the
/// EtherType.
#[inline(always)]
fn l2_flow_label(frame: &[u8], seed: u64) -> u32 {
    let Some(h) = frame.first_chunk::<{ ethernet::HEADER_LEN }>() else {
        return 1;
    };
    let ip = &frame[ethernet::HEADER_LEN..];
    let ethertype = u16::from_be_bytes([h[12], h[13]]);
    let label = match ethertype {
        // A bridged frame's IPv4 header was never checked: only a whole one is hashed as a
        // flow (the common one at fixed offsets, without a separate check).
        0x0800 => flow::common_ipv4_label(ip, seed).or_else(|| {
            ipv4::Packet::new_checked(ip)
                .is_ok()
                .then(|| flow::ipv4_flow_label(ip, seed))
        }),
        0x86dd => Some(FiveTuple::from_ipv6(ip).map_or(1, |t| t.flow_label(seed))),
        _ => None,
    };
    label.unwrap_or_else(|| {
        let mut macs = [0u8; 16];
        macs[4..].copy_from_slice(&h[..12]);
        flow::label_of(flow::hash_v6(
            seed,
            u128::from_be_bytes(macs),
            0,
            u64::from(ethertype),
        ))
    })
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
            label: None,
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
    label: Option<u32>,
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
        label,
    };
    match l2_encap_one(&mut pkt, e) {
        Ok(()) => {}
        Err(Miss::TooBig) => return Err(DropReason::TooBig),
        Err(Miss::NoHeadroom) => return Err(DropReason::NoHeadroom),
    }
    let addr = rewrite.underlay_addr();
    let Some(mac) = n.cx.underlay_mac(n.neigh, Neighbor::untagged(addr)) else {
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
    /// The outer flow label when the caller has it (a flooded frame's copies share one);
    /// `None`: from the frame.
    pub(super) label: Option<u32>,
}

/// The encapsulation toward one remote next hop, resolved once per vector (or per run of
/// packets to that next hop): the outer Ethernet header (uplink → underlay next hop) and the
/// outer IPv6 header (the rewrite control published, hop limit set) as one block copied in
/// front of each packet, which then patches only its traffic class, flow label, payload length
/// and next header.
#[derive(Debug, Clone, Copy)]
pub(super) struct EncapPlan {
    head: [u8; L3 + ENCAP_LEN],
    max_inner: usize,
    seed: u64,
}

impl EncapPlan {
    /// The plan for `rewrite`; `mac`: the underlay next hop's, when resolved (else underlay-out
    /// writes the Ethernet header later).
    fn outer(cfg: &Config, rewrite: &EncapRec, mac: Option<MacAddr>) -> EncapPlan {
        let mut head = [0u8; L3 + ENCAP_LEN];
        ethernet::Repr {
            dst_addr: EthernetAddress(mac.map_or([0; 6], |m| m.0)),
            src_addr: EthernetAddress(cfg.uplink_mac.0),
            ethertype: EtherType::Ipv6,
            vlan: None,
        }
        .emit(&mut ethernet::Frame::new_unchecked(&mut head[..L3]));
        head[L3..].copy_from_slice(&rewrite.ip6);
        ipv6::Packet::new_unchecked(&mut head[L3..]).set_hop_limit(cfg.hop_limit);
        EncapPlan {
            head,
            max_inner: usize::from(cfg.underlay_mtu).saturating_sub(ENCAP_LEN),
            seed: cfg.flow_seed,
        }
    }

    /// The whole way out toward remote next hop `nh`: its rewrite usable and its underlay MAC
    /// resolved; `None` otherwise (the general nodes then say why).
    #[inline]
    pub(super) fn new<B: PacketBuf, I: Io<B>>(
        n: &mut NodeCtx<'_, '_, '_, B, I>,
        nh: u32,
    ) -> Option<EncapPlan> {
        let cfg = n.cfg;
        n.cx.encap_plan(n.neigh, nh, |rewrite, mac| {
            EncapPlan::outer(cfg, rewrite, Some(mac))
        })
    }
}

/// The H.Encaps.L2.Red toward one remote next hop, resolved once per run of frames to it:
/// the outer Ethernet and IPv6 headers of [`EncapPlan`] with what every bridged frame's outer
/// header shares — traffic class 0, next header 143 — already in place, so that each frame
/// patches only its flow label and payload length.
#[derive(Debug, Clone, Copy)]
pub(super) struct L2Plan {
    head: [u8; L3 + ENCAP_LEN],
    max_inner: usize,
    seed: u64,
}

impl L2Plan {
    /// The way out toward remote next hop `nh` when its rewrite is usable and its underlay MAC
    /// resolved; `None` otherwise (the general nodes then say why).
    #[inline]
    pub(super) fn new<B: PacketBuf, I: Io<B>>(
        n: &mut NodeCtx<'_, '_, '_, B, I>,
        nh: u32,
    ) -> Option<L2Plan> {
        let plan = EncapPlan::new(n, nh)?;
        let mut head = plan.head;
        let mut ip = ipv6::Packet::new_unchecked(&mut head[L3..]);
        ip.set_traffic_class(0);
        ip.set_next_header(IpProtocol::Ethernet);
        Some(L2Plan {
            head,
            max_inner: plan.max_inner,
            seed: plan.seed,
        })
    }
}

/// H.Encaps.L2.Red of one frame from `plan`, with the outer Ethernet header: the bytes
/// [`l2_encap_one`] and underlay-out write. `false`: the frame is too big or has no headroom
/// (it is unchanged; the general l2-encap says why).
#[inline(always)]
pub(super) fn l2_encap_planned<B: PacketBuf>(pkt: &mut B, plan: &L2Plan) -> bool {
    const INNER: usize = L3 + ENCAP_LEN;
    let inner_len = pkt.len();
    if inner_len > plan.max_inner && !pkt.fits(plan.max_inner) {
        return false;
    }
    let rss = pkt.rss_hash();
    if !pkt.prepend(INNER) {
        return false;
    }
    let Some((head, inner)) = pkt.data_mut().split_first_chunk_mut::<INNER>() else {
        // Never (the prepend made room for the headers); the frame as it was.
        pkt.adj(INNER);
        return false;
    };
    let label = l2_label(inner, rss, plan.seed);
    *head = plan.head;
    let mut ip = ipv6::Packet::new_unchecked(&mut head[L3..]);
    ip.set_flow_label(label);
    ip.set_payload_len(inner_len as u16);
    true
}

/// H.Encaps.Red of one packet (its TTL decremented unless it is generated): the plan's outer
/// headers copied in front, the traffic class, flow label, payload length and next header
/// patched. `Err`: why the packet cannot be encapsulated (it is unchanged).
#[inline(always)]
fn encap_one<B: PacketBuf>(pkt: &mut B, generated: bool, plan: &EncapPlan) -> Result<(), Miss> {
    let inner_len = pkt.len().saturating_sub(L3);
    if inner_len > plan.max_inner && !pkt.fits(L3 + plan.max_inner) {
        return Err(Miss::TooBig);
    }
    let rss = pkt.rss_hash();
    if !pkt.prepend(ENCAP_LEN) {
        return Err(Miss::NoHeadroom);
    }
    // From here on the inner packet is at INNER; the outer headers go in front of it.
    const INNER: usize = L3 + ENCAP_LEN;
    let Some((head, inner)) = pkt.data_mut().split_first_chunk_mut::<INNER>() else {
        return Err(Miss::NoHeadroom);
    };
    let (next, tclass, label) = match inner.first_chunk_mut::<{ ipv4::HEADER_LEN }>() {
        Some(h) if h[0] >> 4 == 4 => {
            let mut ip = ipv4::Packet::new_unchecked(&mut h[..]);
            if !generated {
                ip.decrement_ttl();
            }
            let tclass = ip.dscp() << 2 | ip.ecn();
            let label = match rss {
                Some(hash) => flow::label_of(hash),
                None => flow::ipv4_flow_label(inner, plan.seed),
            };
            (IpProtocol::Ipv4, tclass, label)
        }
        _ => {
            let tclass = match inner.first_chunk_mut::<{ ipv6::HEADER_LEN }>() {
                Some(h) => {
                    let mut ip = ipv6::Packet::new_unchecked(&mut h[..]);
                    if !generated {
                        ip.decrement_hop_limit();
                    }
                    ip.traffic_class()
                }
                None => 0,
            };
            let label = match rss {
                Some(hash) => flow::label_of(hash),
                None => FiveTuple::from_ipv6(inner).map_or(1, |t| t.flow_label(plan.seed)),
            };
            (IpProtocol::Ipv6, tclass, label)
        }
    };
    *head = plan.head;
    let mut ip = ipv6::Packet::new_unchecked(&mut head[L3..]);
    ip.set_version_class_label(tclass, label);
    ip.set_payload_len(inner_len as u16);
    ip.set_next_header(next);
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
    if let Some(done) = encap_uniform(n, frame) {
        return done;
    }
    let mut plan: Option<(u32, EncapPlan)> = None;
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let Hop::Remote { nh } = n.meta[slot].hop else {
            to[k] = n.drop_for(i, DropReason::UnknownNode);
            continue;
        };
        if plan.as_ref().map(|(at, _)| *at) != Some(nh) {
            match n.cx.encap(nh) {
                Some(e) if e.usable() => plan = Some((nh, EncapPlan::outer(n.cfg, e, None))),
                Some(e) => {
                    to[k] = n.drop_for(i, unusable(e));
                    continue;
                }
                None => {
                    to[k] = n.drop_for(i, DropReason::UnknownNode);
                    continue;
                }
            }
        }
        let Some((_, p)) = &plan else {
            continue;
        };
        let generated = n.meta[slot].is(Meta::GENERATED);
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        to[k] = match encap_one(pkt, generated, p) {
            Ok(()) => Stage::UnderlayOut,
            Err(Miss::TooBig) => n.icmp_for(i, DropReason::TooBig, p.max_inner as u32),
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
) -> Option<()> {
    let &first = frame.first()?;
    let hop = n.meta[usize::from(first)].hop;
    let Hop::Remote { nh } = hop else {
        return None;
    };
    if frame.iter().any(|&i| n.meta[usize::from(i)].hop != hop) {
        return None;
    }
    let plan = EncapPlan::new(n, nh)?;
    encap_run(n, frame, &plan, None, |_| {});
    Some(())
}

/// srv6-encap, underlay-out and tx in one loop over a vector whose packets all go to `plan`'s
/// remote next hop. Packets that cannot be encapsulated (too big, no headroom) take the
/// general way on. `fresh`: the packets have no [`Meta`] yet (they come from an input node's
/// fused path; one is written only for a packet that leaves the loop). `before` edits each
/// packet first (the fused conntrack hit translates it there).
#[inline(always)]
pub(super) fn encap_run<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
    plan: &EncapPlan,
    fresh: Option<Meta>,
    mut before: impl FnMut(&mut B),
) {
    let mut sent = 0u64;
    for &i in frame {
        let slot = usize::from(i);
        let generated = match fresh {
            Some(_) => false,
            None => n.meta[slot].is(Meta::GENERATED),
        };
        let Some(mut pkt) = n.bufs[slot].take() else {
            continue;
        };
        before(&mut pkt);
        match encap_one(&mut pkt, generated, plan) {
            Ok(()) => {
                n.io.send(PortId::UPLINK, pkt);
                sent += 1;
            }
            Err(miss) => {
                n.bufs[slot] = Some(pkt);
                if let Some(m) = fresh {
                    n.meta[slot] = m;
                }
                let to = match miss {
                    Miss::TooBig => n.icmp_for(i, DropReason::TooBig, plan.max_inner as u32),
                    Miss::NoHeadroom => n.drop_for(i, DropReason::NoHeadroom),
                };
                n.send_on(i, to);
            }
        }
    }
    n.through(&[Stage::Srv6Encap, Stage::UnderlayOut, Stage::Tx], sent);
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
        let Some(mac) = n.cx.underlay_mac(n.neigh, Neighbor::untagged(addr)) else {
            let r = unresolved(n.cfg, n.neigh, addr, n.io);
            to[k] = n.drop_for(i, r);
            continue;
        };
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        underlay_eth(pkt, mac, uplink_mac);
        // The underlay is untagged, whatever VLAN the packet came in on.
        n.meta[slot].tx = PortId::UPLINK;
        n.meta[slot].vlan = 0;
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
    let who = Neighbor::untagged(addr);
    if neigh.should_solicit(who, io.now_ns()) {
        if let Err(e) = super::gateway::solicit(cfg, who, io) {
            return e;
        }
    }
    DropReason::NeighborUnresolved
}

/// Writes a neighbor solicitation for `target` from `src` (the underlay address, or the node's
/// address on an external subnet) and the uplink's MAC into an empty buffer.
pub(super) fn build_solicitation<B: PacketBuf>(
    cfg: &Config,
    src: Ipv6Addr,
    target: Ipv6Addr,
    b: &mut B,
) -> bool {
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
        src_addr: src,
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
        &src,
        &dst,
        &mut icmpv6::Packet::new_unchecked(&mut d[L3 + ipv6::HEADER_LEN..]),
    );
    true
}
