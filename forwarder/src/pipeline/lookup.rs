//! FIB lookups (`ip4-lookup`, `ip6-lookup`: bulk, per run of packets of one network) and
//! same-node delivery (`local-rewrite`).

use lace_shared::status::DropReason;
use lace_shared::types::{MacAddr, NetworkId};

use super::cache::{Hop, Route};
use super::input::{check_ipv4, check_ipv6, L3};
use super::{Io, Meta, NodeCtx, PacketBuf, Stage, VEC_CAP};
use crate::wire::ethernet::{self, EtherType};
use crate::wire::{ipv4, ipv6};

/// ICMP destination-unreachable codes the lookups ask for (RFC 792 / RFC 4443).
pub(super) const UNREACH_NET: u32 = 0;
pub(super) const UNREACH_ADMIN: u32 = 13;

/// An IP family's part of a lookup node.
pub(super) trait Family {
    /// The FIB key.
    type Key: Copy + Default;
    /// Validates an unchecked header (decapsulated or generated packets).
    fn check<B: PacketBuf>(pkt: &mut B) -> Result<(), DropReason>;
    /// The destination key, and whether TTL / hop limit allows forwarding; `Err` for a
    /// destination that is never routed. The header was checked.
    fn dst<B: PacketBuf>(pkt: &B) -> Result<(Self::Key, bool), DropReason>;
    /// Bulk FIB lookup in one network.
    fn lookup(view: &lace_shared::tables::NetworkView<'_>, keys: &[Self::Key], out: &mut [u32]);
}

/// IPv4: `ip4-lookup`.
pub(super) struct V4;
impl Family for V4 {
    type Key = u32;
    #[inline(always)]
    fn check<B: PacketBuf>(pkt: &mut B) -> Result<(), DropReason> {
        check_ipv4(pkt)
    }
    #[inline(always)]
    fn dst<B: PacketBuf>(pkt: &B) -> Result<(u32, bool), DropReason> {
        let h = pkt
            .head::<{ L3 + ipv4::HEADER_LEN }>()
            .ok_or(DropReason::Malformed)?;
        let ip = ipv4::Packet::new_unchecked(&h[L3..]);
        Ok((u32::from(ip.dst_addr()), ip.ttl() > 1))
    }
    #[inline(always)]
    fn lookup(view: &lace_shared::tables::NetworkView<'_>, keys: &[u32], out: &mut [u32]) {
        view.route4_bulk(keys, out);
    }
}

struct V6;
impl Family for V6 {
    type Key = u128;
    #[inline(always)]
    fn check<B: PacketBuf>(pkt: &mut B) -> Result<(), DropReason> {
        check_ipv6(pkt)
    }
    #[inline(always)]
    fn dst<B: PacketBuf>(pkt: &B) -> Result<(u128, bool), DropReason> {
        let h = pkt
            .head::<{ L3 + ipv6::HEADER_LEN }>()
            .ok_or(DropReason::Malformed)?;
        let ip = ipv6::Packet::new_unchecked(&h[L3..]);
        let dst = ip.dst_addr();
        if dst.is_multicast() {
            return Err(DropReason::Multicast);
        }
        Ok((u128::from(dst), ip.hop_limit() > 1))
    }
    #[inline(always)]
    fn lookup(view: &lace_shared::tables::NetworkView<'_>, keys: &[u128], out: &mut [u32]) {
        view.route6_bulk(keys, out);
    }
}

/// `ip4-lookup`: longest-prefix match in the packet's network.
pub(super) fn ip4_lookup<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    lookup::<V4, B, I>(n, frame);
}

/// `ip6-lookup`: longest-prefix match in the packet's network.
pub(super) fn ip6_lookup<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    lookup::<V6, B, I>(n, frame);
}

#[inline(always)]
fn lookup<F: Family, B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    // Pass 1: validate, collect the destinations of the packets that can be looked up; the
    // others go to `drop` at once.
    let mut slots = [0u8; VEC_CAP];
    let mut keys = [F::Key::default(); VEC_CAP];
    let mut ttl_ok = [false; VEC_CAP];
    let mut count = 0;
    let mut dropped = [0u8; VEC_CAP];
    let mut drops = 0;
    for &i in frame {
        let slot = usize::from(i);
        let dst = match n.bufs[slot].as_mut() {
            None => Err(None),
            Some(pkt) => {
                let m = &mut n.meta[slot];
                let checked = if m.is(Meta::CHECKED) {
                    Ok(())
                } else {
                    F::check(pkt).inspect(|()| m.flags |= Meta::CHECKED)
                };
                checked.and_then(|()| F::dst(pkt)).map_err(Some)
            }
        };
        match dst {
            Ok((key, ok)) => {
                slots[count] = i;
                keys[count] = key;
                ttl_ok[count] = ok;
                count += 1;
            }
            Err(r) => {
                match r {
                    Some(r) => n.drop_for(i, r),
                    None => n.gone(i),
                };
                dropped[drops] = i;
                drops += 1;
            }
        }
    }
    n.q.forward(n.at, Stage::Drop, &dropped[..drops]);
    resolve::<F, B, I>(n, &slots[..count], &keys[..count], &ttl_ok[..count]);
}

/// Passes 2 and 3 of a lookup: one bulk FIB lookup per run of packets in the same network,
/// then what each result means. pod-input calls it directly with the IPv4 destinations it
/// read when the whole vector goes to ip4-lookup.
#[inline(always)]
pub(super) fn resolve<F: Family, B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slots: &[u8],
    keys: &[F::Key],
    ttl_ok: &[bool],
) {
    let count = slots.len().min(keys.len()).min(ttl_ok.len());
    let mut hops = [0u32; VEC_CAP];
    let mut to = [Stage::Drop; VEC_CAP];
    let mut start = 0;
    while start < count {
        let net = n.meta[usize::from(slots[start])].net;
        let mut end = start + 1;
        while end < count && n.meta[usize::from(slots[end])].net == net {
            end += 1;
        }
        match n.cx.net(net) {
            Some((view, _)) => {
                F::lookup(&view, &keys[start..end], &mut hops[start..end]);
                for k in start..end {
                    to[k] = route(n, slots[k], hops[k], ttl_ok[k]);
                }
            }
            None => {
                for k in start..end {
                    to[k] = n.drop_for(slots[k], DropReason::NoNetwork);
                }
            }
        }
        start = end;
    }
    n.hand_over(&slots[..count], &to[..count]);
}

/// Resolves packet `i`'s FIB result into its next node, or an ICMP error.
#[inline(always)]
fn route<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    i: u8,
    nh: u32,
    ttl_ok: bool,
) -> Stage {
    match n.cx.route(nh) {
        Route::Forward(hop) => {
            if !ttl_ok {
                return n.icmp_for(i, DropReason::TtlExceeded, 0);
            }
            n.meta[usize::from(i)].hop = hop;
            match hop {
                Hop::Remote { .. } => Stage::Srv6Encap,
                _ => Stage::LocalRewrite,
            }
        }
        Route::None => n.icmp_for(i, DropReason::NoRoute, UNREACH_NET),
        Route::Receive => Stage::IcmpEcho,
        Route::Blackhole => n.drop_for(i, DropReason::Blackhole),
        Route::Unreachable => n.icmp_for(i, DropReason::NoRoute, UNREACH_ADMIN),
        Route::Unsupported => n.drop_for(i, DropReason::UnsupportedNextHop),
    }
}

/// Forwards one hop: decrements the IPv4 TTL (RFC 1624 checksum update) or the IPv6 hop limit
/// of the packet at [`L3`]. The lookup checked it was above 1.
#[inline(always)]
pub(super) fn decrement_ttl<B: PacketBuf>(pkt: &mut B) {
    if let Some(h) = pkt.head_mut::<{ L3 + ipv4::HEADER_LEN }>() {
        if h[L3] >> 4 == 4 {
            ipv4::Packet::new_unchecked(&mut h[L3..]).decrement_ttl();
            return;
        }
    }
    if let Some(h) = pkt.head_mut::<{ L3 + ipv6::HEADER_LEN }>() {
        ipv6::Packet::new_unchecked(&mut h[L3..]).decrement_hop_limit();
    }
}

/// The delivery of one packet to a pod on this node: TTL decremented (unless generated), the
/// Ethernet header from the network's gateway to the pod. `false`: too short to be IP.
#[inline(always)]
fn deliver_one<B: PacketBuf>(pkt: &mut B, generated: bool, mac: MacAddr, gw_mac: [u8; 6]) -> bool {
    if !generated {
        decrement_ttl(pkt);
    }
    let Some(h) = pkt.head_mut::<{ L3 + 1 }>() else {
        return false;
    };
    let v4 = h[L3] >> 4 == 4;
    let mut eth = ethernet::Frame::new_unchecked(&mut h[..]);
    eth.set_dst_addr(ethernet::Address(mac.0));
    eth.set_src_addr(ethernet::Address(gw_mac));
    eth.set_ethertype(if v4 { EtherType::Ipv4 } else { EtherType::Ipv6 });
    true
}

/// `local-rewrite`: deliver to a pod on this node, from the network's gateway MAC.
///
/// The fast path: when every packet of the vector goes to one pod of one network and its port
/// is up, the vector runs through local-rewrite and tx in one loop.
pub(super) fn local_rewrite<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
) {
    if let Some(done) = deliver_uniform(n, frame) {
        return done;
    }
    let mut gw: Option<(NetworkId, [u8; 6])> = None;
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let m = n.meta[slot];
        let Hop::Local { port, mac } = m.hop else {
            to[k] = n.drop_for(i, DropReason::NoRoute);
            continue;
        };
        if !n.io.port_up(port) {
            to[k] = n.drop_for(i, DropReason::PortDown);
            continue;
        }
        let gw_mac = match gw {
            Some((net, mac)) if net == m.net => mac,
            _ => match n.cx.net(m.net) {
                Some((_, ctx)) => {
                    gw = Some((m.net, ctx.gw_mac.0));
                    ctx.gw_mac.0
                }
                None => {
                    to[k] = n.drop_for(i, DropReason::NoNetwork);
                    continue;
                }
            },
        };
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        if !deliver_one(pkt, m.is(Meta::GENERATED), mac, gw_mac) {
            to[k] = n.drop_for(i, DropReason::Malformed);
            continue;
        }
        n.meta[slot].tx = port;
        to[k] = Stage::Tx;
    }
    n.hand_over(frame, &to[..frame.len()]);
}

/// The fast path of `local-rewrite` (see there); `None` when it does not apply.
#[inline(always)]
fn deliver_uniform<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
) -> Option<()> {
    let &first = frame.first()?;
    let Meta { hop, net, .. } = n.meta[usize::from(first)];
    let Hop::Local { port, mac } = hop else {
        return None;
    };
    if frame.iter().any(|&i| {
        let m = &n.meta[usize::from(i)];
        m.hop != hop || m.net != net
    }) {
        return None;
    }
    if !n.io.port_up(port) {
        return None;
    }
    let (_, ctx) = n.cx.net(net)?;
    let mut rest = [0u8; VEC_CAP];
    let mut left = 0;
    let mut sent = 0u64;
    for &i in frame {
        let slot = usize::from(i);
        let generated = n.meta[slot].is(Meta::GENERATED);
        let Some(pkt) = n.bufs[slot].as_mut() else {
            continue;
        };
        if deliver_one(pkt, generated, mac, ctx.gw_mac.0) {
            if let Some(pkt) = n.bufs[slot].take() {
                n.io.send(port, pkt);
                sent += 1;
            }
        } else {
            n.drop_for(i, DropReason::Malformed);
            rest[left] = i;
            left += 1;
        }
    }
    n.through(&[Stage::LocalRewrite, Stage::Tx], sent);
    n.q.forward(n.at, Stage::Drop, &rest[..left]);
    Some(())
}
