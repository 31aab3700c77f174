//! The l2 nodes: `l2-forward` (FDB lookup of the destination MAC) and `l2-flood` (head-end
//! replication of broadcast, multicast and — with learning — unknown unicast to the network's
//! flood list, within the source endpoint's BUM limit).
//!
//! Frames are bridged unchanged: no TTL decrement, no rewrite. Split horizon: a frame never
//! goes back to the port it came from, and a frame that came from the underlay (another
//! node's encapsulation) is delivered to local ports only — every node replicates its own
//! endpoints' frames to every other node, so nothing is ever sent on twice. The BUM limit
//! (`spec.l2.bumLimit`, a token bucket per source port) applies where a frame enters the
//! network — its pod port — never again on the nodes it is replicated to.

use lace_shared::status::DropReason;
use lace_shared::types::{L2Hop, MacAddr, PortId};

use super::cache::Hop;
use super::srv6::{self, l2_label, l2_send_remote, L2Plan};
use super::{Io, Meta, NodeCtx, PacketBuf, Stage, VEC_CAP};
use crate::wire::ethernet;

/// `l2-forward`: the destination MAC's FDB entry decides — a local port (transmitted as is) or
/// a remote node (l2-encap toward its End.DT2U SID). A MAC the FDB does not hold is flooded on
/// a learning network (as a learning bridge does: the MAC may not have announced itself yet)
/// and dropped otherwise (`unknown-unicast`).
pub(super) fn forward<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let Some(h) = n.bufs[slot]
            .as_ref()
            .and_then(|p| p.head::<{ ethernet::HEADER_LEN }>())
        else {
            to[k] = n.gone(i);
            continue;
        };
        let dst = MacAddr([h[0], h[1], h[2], h[3], h[4], h[5]]);
        let m = n.meta[slot];
        let v = match n.cx.net(m.net) {
            None => Err(DropReason::NoNetwork),
            Some((view, ctx)) => match view.fdb(dst) {
                None if ctx.learn_period_ns.is_some() => Ok(Stage::L2Flood),
                None => Err(DropReason::UnknownUnicast),
                Some(L2Hop::Port(p)) if p == m.rx => Err(DropReason::SplitHorizon),
                Some(L2Hop::Port(p)) if !n.io.port_up(p) => Err(DropReason::PortDown),
                Some(L2Hop::Port(p)) => {
                    n.meta[slot].tx = p;
                    Ok(Stage::Tx)
                }
                Some(L2Hop::Remote(_)) if m.rx == PortId::UPLINK => Err(DropReason::SplitHorizon),
                Some(L2Hop::Remote(nh)) => {
                    n.meta[slot].hop = Hop::Remote { nh };
                    Ok(Stage::L2Encap)
                }
            },
        };
        to[k] = n.resolve(i, v);
    }
    n.hand_over(frame, &to[..frame.len()]);
}

/// `l2-forward` of a vector an input node checked whole, fused into it: unicast frames from
/// the endpoint's own MAC that are neither ARP nor NDP nor for the gateway (pod-input), or
/// frames to an End.DT2U SID whose outer header `before` strips (l2-decap); none has a
/// [`Meta`] yet (`fresh` is what it would hold). A frame to a local port that is up goes out
/// at once (l2-forward, tx), one to a remote node whose way out is complete is encapsulated
/// from the plan and sent (l2-forward, l2-encap, underlay-out, tx) — both counted in those
/// nodes as the general ones would count them. The FDB is read once per run of frames to one
/// MAC, the plan built once per run to one node. Any other frame gets its `Meta` and goes on
/// to the general l2-forward, which decides it (unknown unicast, split horizon, a port down,
/// an unresolved node, too big); `before` failing (never: the input node checked the length)
/// drops it as malformed.
#[inline(always)]
pub(super) fn forward_fresh<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    frame: &[u8],
    fresh: Meta,
    mut before: impl FnMut(&mut B) -> bool,
) {
    let view = n.cx.view(fresh.net);
    let rx = fresh.rx;
    // The last MAC looked up: where it goes, and whether that is a local port that is up.
    let mut last: Option<(MacAddr, Option<L2Hop>, bool)> = None;
    // The last remote next hop and its plan.
    let mut way: Option<(u32, Option<L2Plan>)> = None;
    let (mut local, mut remote) = (0u64, 0u64);
    for (k, &i) in frame.iter().enumerate() {
        if let Some(&ahead) = frame.get(k + 2) {
            if let Some(p) = &n.bufs[usize::from(ahead)] {
                p.prefetch();
            }
        }
        let slot = usize::from(i);
        let Some(mut pkt) = n.bufs[slot].take() else {
            continue;
        };
        if !before(&mut pkt) {
            n.bufs[slot] = Some(pkt);
            n.meta[slot] = fresh;
            let to = n.drop_for(i, DropReason::Malformed);
            n.send_on(i, to);
            continue;
        }
        let dst = pkt
            .head::<{ ethernet::HEADER_LEN }>()
            .map(|h| MacAddr([h[0], h[1], h[2], h[3], h[4], h[5]]));
        let (hop, up) = match (dst, last, view) {
            (Some(mac), Some((at, hop, up)), _) if at == mac => (hop, up),
            (Some(mac), _, Some(view)) => {
                let hop = view.fdb(mac);
                let up = match hop {
                    Some(L2Hop::Port(p)) => p != rx && n.io.port_up(p),
                    _ => false,
                };
                last = Some((mac, hop, up));
                (hop, up)
            }
            _ => (None, false),
        };
        match hop {
            Some(L2Hop::Port(p)) if up => {
                n.io.send(p, pkt);
                local += 1;
                continue;
            }
            Some(L2Hop::Remote(nh)) if rx != PortId::UPLINK => {
                // The plan is used where it is kept: a copy per frame would cost as much as
                // the header it writes.
                if !matches!(way, Some((at, _)) if at == nh) {
                    way = Some((nh, L2Plan::new(n, nh)));
                }
                let plan = way.as_ref().and_then(|(_, p)| p.as_ref());
                if plan.is_some_and(|p| srv6::l2_encap_planned(&mut pkt, p)) {
                    n.io.send(PortId::UPLINK, pkt);
                    remote += 1;
                    continue;
                }
            }
            _ => {}
        }
        // The general node decides.
        n.bufs[slot] = Some(pkt);
        n.meta[slot] = fresh;
        n.send_on(i, Stage::L2Forward);
    }
    let at = n.at;
    n.through(&[at, Stage::L2Forward, Stage::Tx], local);
    n.through(
        &[
            at,
            Stage::L2Forward,
            Stage::L2Encap,
            Stage::UnderlayOut,
            Stage::Tx,
        ],
        remote,
    );
}

/// `l2-flood`: one copy of each frame to every member of its network's flood list except its
/// own port — local ports directly, other nodes encapsulated to their End.DT2M SIDs — and none
/// to other nodes when it came from the underlay. A frame from a pod port first takes a token
/// of its source's BUM bucket (`bum-rate-limited` when there is none). The frame itself becomes
/// the last copy; the others are fresh buffers (`no-buffer` when the pool is empty). A frame
/// with no member to go to (the network's only endpoint broadcasting) is consumed, not
/// dropped.
pub(super) fn flood<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    let now = n.io.now_ns();
    for &i in frame {
        let slot = usize::from(i);
        let m = n.meta[slot];
        let Some(pkt) = n.bufs[slot].take() else {
            continue;
        };
        let Some((view, ctx)) = n.cx.net(m.net) else {
            n.drops[DropReason::NoNetwork as usize] += 1;
            continue;
        };
        let from_uplink = m.rx == PortId::UPLINK;
        if !from_uplink {
            let endpoint = n.cx.port(m.rx).map_or(0, |p| p.endpoint);
            if !n.l2.bum.admit(m.rx, endpoint, ctx.bum, now) {
                n.drops[DropReason::BumRateLimited as usize] += 1;
                continue;
            }
        }
        let eligible = |h: &L2Hop| match *h {
            L2Hop::Port(p) => p != m.rx,
            L2Hop::Remote(_) => !from_uplink,
        };
        // Each member but the last gets a copy; the last gets the frame itself. The copies to
        // other nodes share one outer flow label, computed for the first of them.
        let rss = pkt.rss_hash();
        let mut label = None;
        let mut members = view.flood().filter(eligible).peekable();
        let mut pkt = Some(pkt);
        while let Some(to) = members.next() {
            let copy = if members.peek().is_some() {
                match copy_of(n.io, pkt.as_ref()) {
                    Some(c) => c,
                    None => {
                        n.drops[DropReason::NoBuffer as usize] += 1;
                        continue;
                    }
                }
            } else {
                match pkt.take() {
                    Some(p) => p,
                    None => break,
                }
            };
            send_copy(n, copy, to, rss, &mut label);
        }
    }
}

/// A fresh buffer holding the same frame.
#[inline]
fn copy_of<B: PacketBuf, I: Io<B>>(io: &mut I, pkt: Option<&B>) -> Option<B> {
    let src = pkt?.data();
    let mut c = io.alloc()?;
    if !c.append(src.len()) {
        return None;
    }
    c.data_mut().copy_from_slice(src);
    Some(c)
}

/// Transmits one flooded copy to `to`, counted in the nodes it passes (or as a drop); a copy to
/// another node gets `label` (computed from the copy, with the original's RSS hash `rss`, if
/// not yet known).
#[inline]
fn send_copy<B: PacketBuf, I: Io<B>>(
    n: &mut NodeCtx<'_, '_, '_, B, I>,
    copy: B,
    to: L2Hop,
    rss: Option<u32>,
    label: &mut Option<u32>,
) {
    match to {
        L2Hop::Port(p) if n.io.port_up(p) => {
            n.io.send(p, copy);
            n.through(&[Stage::L2Flood, Stage::Tx], 1);
        }
        L2Hop::Port(_) => n.drops[DropReason::PortDown as usize] += 1,
        L2Hop::Remote(nh) => {
            let seed = n.cfg.flow_seed;
            let l = *label.get_or_insert_with(|| l2_label(copy.data(), rss, seed));
            match l2_send_remote(n, copy, nh, Some(l)) {
                Ok(()) => n.through(
                    &[
                        Stage::L2Flood,
                        Stage::L2Encap,
                        Stage::UnderlayOut,
                        Stage::Tx,
                    ],
                    1,
                ),
                Err(r) => n.drops[r as usize] += 1,
            }
        }
    }
}
