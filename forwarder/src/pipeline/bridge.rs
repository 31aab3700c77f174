//! The l2 nodes: `l2-forward` (FDB lookup of the destination MAC) and `l2-flood` (head-end
//! replication of broadcast and multicast to the network's flood list).
//!
//! Frames are bridged unchanged: no TTL decrement, no rewrite. Split horizon: a frame never
//! goes back to the port it came from, and a frame that came from the underlay (another
//! node's encapsulation) is delivered to local ports only — every node replicates its own
//! endpoints' frames to every other node, so nothing is ever sent on twice.

use lace_shared::status::DropReason;
use lace_shared::types::{L2Hop, MacAddr, PortId};

use super::cache::Hop;
use super::srv6::l2_send_remote;
use super::{Io, NodeCtx, PacketBuf, Stage, VEC_CAP};
use crate::wire::ethernet;

/// `l2-forward`: the destination MAC's FDB entry decides — a local port (transmitted as is) or
/// a remote node (l2-encap toward its End.DT2U SID). A MAC the FDB does not hold is dropped
/// (`unknown-unicast`): without learning, unknown unicast is never flooded.
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
            Some((view, _)) => match view.fdb(dst) {
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

/// `l2-flood`: one copy of each frame to every member of its network's flood list except its
/// own port — local ports directly, other nodes encapsulated to their End.DT2M SIDs — and none
/// to other nodes when it came from the underlay. The frame itself becomes the last copy;
/// the others are fresh buffers (`no-buffer` when the pool is empty). A frame with no member
/// to go to (the network's only endpoint broadcasting) is consumed, not dropped.
pub(super) fn flood<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    for &i in frame {
        let slot = usize::from(i);
        let m = n.meta[slot];
        let Some(pkt) = n.bufs[slot].take() else {
            continue;
        };
        let Some((view, _)) = n.cx.net(m.net) else {
            n.drops[DropReason::NoNetwork as usize] += 1;
            continue;
        };
        let from_uplink = m.rx == PortId::UPLINK;
        let eligible = |h: &L2Hop| match *h {
            L2Hop::Port(p) => p != m.rx,
            L2Hop::Remote(_) => !from_uplink,
        };
        // Each member but the last gets a copy; the last gets the frame itself.
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
            send_copy(n, copy, to);
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

/// Transmits one flooded copy to `to`, counted in the nodes it passes (or as a drop).
#[inline]
fn send_copy<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, copy: B, to: L2Hop) {
    match to {
        L2Hop::Port(p) if n.io.port_up(p) => {
            n.io.send(p, copy);
            n.through(&[Stage::L2Flood, Stage::Tx], 1);
        }
        L2Hop::Port(_) => n.drops[DropReason::PortDown as usize] += 1,
        L2Hop::Remote(nh) => match l2_send_remote(n, copy, nh) {
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
        },
    }
}
