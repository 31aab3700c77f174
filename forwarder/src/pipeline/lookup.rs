//! FIB lookups (`ip4-lookup`, `ip6-lookup`: bulk, per run of packets of one network) and
//! same-node delivery (`local-rewrite`).

use std::net::{Ipv4Addr, Ipv6Addr};

use lace_shared::status::DropReason;
use lace_shared::tables::NetworkView;
use lace_shared::types::{MacAddr, NetworkId, PortId};

use super::cache::{Hop, Route};
use super::ct;
use super::gateway;
use super::input::{check_ipv4, check_ipv6, L3};
use super::srv6;
use super::{vlan, Io, Meta, NodeCtx, PacketBuf, Stage, VEC_CAP};
use crate::wire::ethernet::{self, EtherType};
use crate::wire::{ipv4, ipv6};

/// ICMP destination-unreachable codes the lookups ask for (RFC 792 / RFC 4443).
pub(super) const UNREACH_NET: u32 = 0;
pub(super) const UNREACH_ADMIN: u32 = 13;
pub(super) const UNREACH_PORT: u32 = 3;

/// An IP family's part of a lookup node.
pub(super) trait Family {
    /// The FIB key.
    type Key: Copy + Default + PartialEq;
    /// Validates an unchecked header (decapsulated or generated packets).
    fn check<B: PacketBuf>(pkt: &mut B) -> Result<(), DropReason>;
    /// The destination key, and whether TTL / hop limit allows forwarding; `Err` for a
    /// destination that is never routed. The header was checked.
    fn dst<B: PacketBuf>(pkt: &B) -> Result<(Self::Key, bool), DropReason>;
    /// Bulk FIB lookup in one network.
    fn lookup(view: &NetworkView<'_>, keys: &[Self::Key], out: &mut [u32]);
    /// FIB lookup of one key.
    fn lookup_one(view: &NetworkView<'_>, key: Self::Key) -> u32;
}

/// IPv4: `ip4-lookup`.
pub(super) struct V4;
impl Family for V4 {
    type Key = u32;
    #[inline(always)]
    fn check<B: PacketBuf>(pkt: &mut B) -> Result<(), DropReason> {
        // Decapsulated or generated: not the header the port received.
        check_ipv4(pkt, false)
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
    fn lookup(view: &NetworkView<'_>, keys: &[u32], out: &mut [u32]) {
        view.route4_bulk(keys, out);
    }
    #[inline(always)]
    fn lookup_one(view: &NetworkView<'_>, key: u32) -> u32 {
        view.route4_index(Ipv4Addr::from(key))
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
    fn lookup(view: &NetworkView<'_>, keys: &[u128], out: &mut [u32]) {
        view.route6_bulk(keys, out);
    }
    #[inline(always)]
    fn lookup_one(view: &NetworkView<'_>, key: u128) -> u32 {
        view.route6_index(Ipv6Addr::from(key))
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
                lookup_run::<F>(&view, &keys[start..end], &mut hops[start..end]);
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

/// The FIB results of `keys` in one network: one lookup when they are all the same address
/// (one flow, or one destination: the common burst), else one bulk lookup.
#[inline(always)]
fn lookup_run<F: Family>(view: &NetworkView<'_>, keys: &[F::Key], out: &mut [u32]) {
    let Some(&first) = keys.first() else {
        return;
    };
    if keys.iter().all(|&k| k == first) {
        let hop = F::lookup_one(view, first);
        for o in out.iter_mut().take(keys.len()) {
            *o = hop;
        }
    } else {
        F::lookup(view, keys, out);
    }
}

/// `ip4-lookup` of a vector that pod-input (or srv6-decap) checked whole: every packet is
/// IPv4 in network `fresh.net` with a TTL above 1, and none has a [`Meta`] yet (`fresh` is what
/// it would hold). When every packet gets the same next hop, the vector goes on through the
/// fused encapsulation or delivery and out, still without one; otherwise each packet gets its
/// `Meta` and the general way on.
#[inline(always)]
pub(super) fn ip4_fresh<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slots: &[u8],
    keys: &[u32],
    fresh: Meta,
) {
    let count = slots.len().min(keys.len());
    let (mut slots, mut keys) = (&slots[..count], &keys[..count]);
    if fresh.is(Meta::TRACK_OUT) {
        // Established connections of a stateful network's pod: their fused way first.
        let done = ct::established4(n, slots, fresh);
        (slots, keys) = (&slots[done..], &keys[done..]);
    }
    let net = fresh.net;
    let Some(&first) = keys.first() else {
        return;
    };
    let Some(ctx) = n.cx.net_ctx(net) else {
        return no_network(n, slots, fresh);
    };
    if keys.iter().all(|&k| k == first) {
        // One destination: one lookup, remembered while the tables stay the same.
        let Some(nh) = n.cx.route4(net, first) else {
            return no_network(n, slots, fresh);
        };
        let done = fused(n, slots, nh, ctx.gw_mac, fresh);
        route_each(n, &slots[done..], fresh, |_| nh);
        return;
    }
    let Some(view) = n.cx.view(net) else {
        return no_network(n, slots, fresh);
    };
    let count = slots.len();
    let mut hops = [0u32; VEC_CAP];
    view.route4_bulk(keys, &mut hops[..count]);
    let first = hops[0];
    let done = if hops[..count].iter().all(|&h| h == first) {
        fused(n, slots, first, ctx.gw_mac, fresh)
    } else {
        0
    };
    route_each(n, &slots[done..], fresh, |k| hops[done + k]);
}

/// Fresh packets whose network is gone: the input node resolved it in this call, so this is
/// kept for the general way only.
#[cold]
fn no_network<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slots: &[u8],
    fresh: Meta,
) {
    for &i in slots {
        n.meta[usize::from(i)] = fresh;
        let to = n.drop_for(i, DropReason::NoNetwork);
        n.send_on(i, to);
    }
}

/// The fused way on for a vector of fresh packets that all go to next hop `nh`: encapsulation
/// toward a remote node, or delivery to a pod on this node, and out — for a pod of a stateful
/// network, the prefix of established hits in its zone ([`ct::established4_in`]). Returns how
/// many packets (a prefix) it took; the rest go the general way: all of them when it does not
/// apply (the rewrite unusable, the MAC unresolved, the port down, not a forwarding next hop,
/// or connection tracking to do in the sender's zone).
#[inline(always)]
fn fused<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slots: &[u8],
    nh: u32,
    gw_mac: MacAddr,
    fresh: Meta,
) -> usize {
    let count = slots.len();
    if fresh.is(Meta::TRACK_OUT) {
        return 0;
    }
    match n.cx.route(nh) {
        Route::Forward(hop @ Hop::Remote { nh }) => match srv6::EncapPlan::new(n, nh) {
            Some(plan) => {
                n.chain(Stage::Srv6Encap, count as u64);
                srv6::encap_run(n, slots, &plan, Some(Meta { hop, ..fresh }), |_| {});
                count
            }
            None => 0,
        },
        Route::Forward(hop @ Hop::Uplink { .. }) if n.io.port_up(PortId::UPLINK) => {
            // Out of the uplink to an external network's gateway, once it resolves.
            let Ok(plan) = delivery(n, fresh.net, hop) else {
                return 0;
            };
            n.chain(Stage::LocalRewrite, count as u64);
            deliver_run(n, slots, &plan, Some(Meta { hop, ..fresh }));
            count
        }
        Route::Forward(hop @ Hop::Local { port, mac }) if n.io.port_up(port) => {
            let plan = Delivery::new(port, mac, gw_mac, n.cx.dst_mtu(port));
            let miss = Meta { hop, ..fresh };
            match n.cx.dst_port(port) {
                Some((_, false)) => {
                    n.chain(Stage::LocalRewrite, count as u64);
                    deliver_run(n, slots, &plan, Some(miss));
                    count
                }
                Some((rec, true)) => {
                    ct::established4_in(n, slots, port, rec.network(), &plan, miss)
                }
                None => 0,
            }
        }
        _ => 0,
    }
}

/// The general way on for a vector of fresh packets: each gets its `Meta`, and the next node
/// its FIB result `hop_of(k)` means.
#[inline(always)]
fn route_each<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    slots: &[u8],
    fresh: Meta,
    hop_of: impl Fn(usize) -> u32,
) {
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in slots.iter().enumerate() {
        n.meta[usize::from(i)] = fresh;
        to[k] = route(n, i, hop_of(k), true);
    }
    n.hand_over(slots, &to[..slots.len()]);
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
            let m = &mut n.meta[usize::from(i)];
            m.hop = hop;
            if m.flags & (Meta::TRACK_OUT | Meta::TRACK_DONE) == Meta::TRACK_OUT
                && !m.is(Meta::GENERATED)
            {
                return Stage::Conntrack;
            }
            match hop {
                Hop::Remote { .. } => Stage::Srv6Encap,
                Hop::Uplink { .. } => Stage::LocalRewrite,
                Hop::Local { port, .. } => {
                    if n.cx.dst_port(port).is_some_and(|(_, tracked)| tracked) {
                        Stage::Conntrack
                    } else {
                        Stage::LocalRewrite
                    }
                }
                Hop::None => Stage::LocalRewrite,
            }
        }
        Route::ReplyOnly(hop) => {
            let m = &mut n.meta[usize::from(i)];
            if m.flags & (Meta::TRACK_OUT | Meta::TRACK_DONE) != Meta::TRACK_OUT {
                // Only the sender's zone can tell a reply: without one (from the underlay, or
                // a pod whose network is not tracked) nothing may take the way back.
                return n.drop_for(i, DropReason::OneWay);
            }
            if !ttl_ok {
                return n.icmp_for(i, DropReason::TtlExceeded, 0);
            }
            m.hop = hop;
            m.flags |= Meta::REPLY_ONLY;
            Stage::Conntrack
        }
        Route::Service => {
            let m = &mut n.meta[usize::from(i)];
            if m.rx == PortId::UPLINK || m.is(Meta::GENERATED) || m.is(Meta::TRACK_DONE) {
                // ClusterIPs are translated at the client's node, once.
                return n.drop_for(i, DropReason::UnsupportedNextHop);
            }
            if !ttl_ok {
                return n.icmp_for(i, DropReason::TtlExceeded, 0);
            }
            m.flags |= Meta::SERVICE | Meta::TRACK_OUT;
            Stage::Conntrack
        }
        Route::None => n.icmp_for(i, DropReason::NoRoute, UNREACH_NET),
        Route::Receive => Stage::IcmpEcho,
        Route::Blackhole => n.drop_for(i, DropReason::Blackhole),
        Route::Unreachable => n.icmp_for(i, DropReason::NoRoute, UNREACH_ADMIN),
        Route::Unsupported => n.drop_for(i, DropReason::UnsupportedNextHop),
    }
}

/// The delivery to one pod on this node, or to a gateway out of the uplink, resolved once per
/// vector: its port and the Ethernet headers to it, one per IP version, and the uplink's VLAN
/// the gateway is on (tx tags the frame).
#[derive(Debug, Clone, Copy)]
pub(super) struct Delivery {
    port: PortId,
    /// The VLAN (0: untagged, and always for a pod).
    vlan: u16,
    /// The pod network's MTU: a longer IP packet is too big for the pod (a routed packet from
    /// a network with a larger MTU: an l3 network's into an l2 one, ADR 0049).
    mtu: u16,
    /// The longest frame delivered: the MTU and the Ethernet header.
    max_frame: usize,
    eth4: [u8; L3],
    eth6: [u8; L3],
}

impl Delivery {
    /// Delivery to `port` (`mac`), from `gw_mac`, of IP packets up to `mtu` bytes.
    pub(super) fn new(port: PortId, mac: MacAddr, gw_mac: MacAddr, mtu: u16) -> Delivery {
        let header = |ethertype| {
            let mut h = [0u8; L3];
            ethernet::Repr {
                dst_addr: ethernet::Address(mac.0),
                src_addr: ethernet::Address(gw_mac.0),
                ethertype,
                vlan: None,
            }
            .emit(&mut ethernet::Frame::new_unchecked(&mut h[..]));
            h
        };
        Delivery {
            port,
            vlan: 0,
            mtu,
            max_frame: L3 + usize::from(mtu),
            eth4: header(EtherType::Ipv4),
            eth6: header(EtherType::Ipv6),
        }
    }
}

/// The delivery of one packet to a pod on this node: TTL decremented (unless generated), the
/// Ethernet header from the network's gateway to the pod. Refused as malformed when too short
/// to be IP, as too big when longer than the pod's MTU.
#[inline(always)]
fn deliver_one<B: PacketBuf>(
    pkt: &mut B,
    generated: bool,
    plan: &Delivery,
) -> Result<(), DropReason> {
    // One view of the frame for every check and write (the header's address computed once);
    // a large segment's pieces are measured only when the whole is longer, and made smaller
    // when they were estimated on a large-frame link rather than chosen by the sender.
    let mut d = pkt.data_mut();
    if d.len() > plan.max_frame {
        if !pkt.fit(plan.max_frame) {
            return Err(DropReason::TooBig);
        }
        d = pkt.data_mut();
    }
    let Some((h, ip)) = d.split_first_chunk_mut::<L3>() else {
        return Err(DropReason::Malformed);
    };
    let Some(&version) = ip.first() else {
        return Err(DropReason::Malformed);
    };
    let eth = if version >> 4 == 4 {
        if let (false, Some(v4)) = (generated, ip.first_chunk_mut::<{ ipv4::HEADER_LEN }>()) {
            ipv4::Packet::new_unchecked(&mut v4[..]).decrement_ttl();
        }
        &plan.eth4
    } else {
        if let (false, Some(v6)) = (generated, ip.first_chunk_mut::<{ ipv6::HEADER_LEN }>()) {
            ipv6::Packet::new_unchecked(&mut v6[..]).decrement_hop_limit();
        }
        &plan.eth6
    };
    *h = *eth;
    Ok(())
}

/// The drop of a packet delivery refused: too big gets the ICMP error naming the pod's MTU.
#[inline(never)]
fn refused<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    i: u8,
    why: DropReason,
    plan: &Delivery,
) -> Stage {
    match why {
        DropReason::TooBig => n.icmp_for(i, why, u32::from(plan.mtu)),
        _ => n.drop_for(i, why),
    }
}

/// `local-rewrite`: deliver to a pod on this node, from the network's gateway MAC, or out of
/// the uplink to a resolved gateway (ADR 0054).
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
    let mut plan: Option<(NetworkId, Hop, Delivery)> = None;
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let m = n.meta[slot];
        let port = match m.hop {
            Hop::Local { port, .. } => port,
            Hop::Uplink { .. } => PortId::UPLINK,
            Hop::Remote { .. } | Hop::None => {
                to[k] = n.drop_for(i, DropReason::NoRoute);
                continue;
            }
        };
        if !n.io.port_up(port) {
            to[k] = n.drop_for(i, DropReason::PortDown);
            continue;
        }
        let p = match plan {
            Some((net, hop, p)) if net == m.net && hop == m.hop => p,
            _ => match delivery(n, m.net, m.hop) {
                Ok(p) => {
                    plan = Some((m.net, m.hop, p));
                    p
                }
                Err(r) => {
                    to[k] = n.drop_for(i, r);
                    continue;
                }
            },
        };
        let Some(pkt) = n.bufs[slot].as_mut() else {
            to[k] = n.gone(i);
            continue;
        };
        if let Err(why) = deliver_one(pkt, m.is(Meta::GENERATED), &p) {
            to[k] = refused(n, i, why, &p);
            continue;
        }
        n.meta[slot].tx = port;
        // Out on the gateway's VLAN (tx tags it), whichever the packet came in on.
        n.meta[slot].vlan = p.vlan;
        to[k] = Stage::Tx;
    }
    n.hand_over(frame, &to[..frame.len()]);
}

/// The delivery of a packet of network `net` to `hop`: to a pod from its network's gateway
/// MAC, up to the pod's MTU; or out of the uplink to a gateway (ADR 0054), from the uplink's
/// MAC, up to the uplink's MTU, once the gateway resolves.
fn delivery<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    net: NetworkId,
    hop: Hop,
) -> Result<Delivery, DropReason> {
    match hop {
        Hop::Local { port, mac } => {
            let ctx = n.cx.net_ctx(net).ok_or(DropReason::NoNetwork)?;
            Ok(Delivery::new(port, mac, ctx.gw_mac, n.cx.dst_mtu(port)))
        }
        Hop::Uplink { gateway } => match n.cx.underlay_mac(n.neigh, gateway) {
            Some(mac) => Ok(Delivery {
                vlan: gateway.vlan,
                ..Delivery::new(PortId::UPLINK, mac, n.cfg.uplink_mac, n.cfg.underlay_mtu)
            }),
            None => Err(gateway::unresolved(n.cfg, n.neigh, gateway, n.io)),
        },
        Hop::Remote { .. } | Hop::None => Err(DropReason::NoRoute),
    }
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
    let ctx = n.cx.net_ctx(net)?;
    let plan = Delivery::new(port, mac, ctx.gw_mac, n.cx.dst_mtu(port));
    deliver_run(n, frame, &plan, None);
    Some(())
}

/// local-rewrite and tx in one loop over a vector whose packets all go to `plan`'s pod (its
/// port is up). `fresh`: the packets have no [`Meta`] yet (they come from an input node's fused
/// path; one is written only for a packet that is dropped).
#[inline(always)]
pub(super) fn deliver_run<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
    plan: &Delivery,
    fresh: Option<Meta>,
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
        match deliver_one(&mut pkt, generated, plan) {
            Ok(()) if plan.vlan == 0 => {
                n.io.send(plan.port, pkt);
                sent += 1;
            }
            // tx's work for a frame out on a VLAN: tagged.
            Ok(()) => match vlan::send(n.io, pkt, plan.vlan) {
                Ok(()) => sent += 1,
                Err(why) => n.drops[why as usize] += 1,
            },
            Err(why) => {
                n.bufs[slot] = Some(pkt);
                if let Some(m) = fresh {
                    n.meta[slot] = m;
                }
                let to = refused(n, i, why, plan);
                n.send_on(i, to);
            }
        }
    }
    n.through(&[Stage::LocalRewrite, Stage::Tx], sent);
}
