//! l2 learning and the BUM limit (ADR 0019): the `l2-learn` node, which reports endpoints'
//! announcements to control, the per-source token buckets every flooded frame and every
//! announcement passes, and the throttle of "still seen" refreshes.
//!
//! The forwarder learns nothing itself: its tables stay read-only. It reports what it saw
//! ([`LearnEvent`], through [`Io::learn`] into the worker's learn ring) and control decides —
//! a new entry, a move (a higher sequence number), a refresh — and publishes the result.
//! Reports come only from pod ports of networks with learning on, and only for:
//!
//! - a gratuitous ARP (sender and target address equal, not 0.0.0.0),
//! - an unsolicited neighbor advertisement (Solicited clear, Override set, from a unicast
//!   address),
//! - a RARP self-announcement (QEMU's, after a migration),
//! - a MAC learned on this very port that keeps sending, at most once per aging time / 4.
//!
//! Never from a duplicate-address probe (ARP from 0.0.0.0, NS from `::`: those are requests,
//! answered or not by `arp-reply` / `nd-reply`), never from the underlay. Announcements are
//! consumed, not flooded: peers' ARP and NDP are answered from the tables.

use std::net::IpAddr;

use lace_shared::learn::{LearnEvent, LearnKind};
use lace_shared::status::{DropReason, MAX_PORTS};
use lace_shared::types::{MacAddr, PortId};

use super::input::L3;
use super::{Io, Meta, NodeCtx, PacketBuf, Stage, VEC_CAP};
use crate::wire::ethernet::{self, EtherType};
use crate::wire::icmpv6::{self, NeighborFlags};
use crate::wire::{arp, ipv6, rarp};

/// One frame in token units: a bucket gains `pps` units per nanosecond.
const UNIT: u64 = 1_000_000_000;

/// One source port's token bucket.
#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// The endpoint the bucket belongs to (a port rebound to another endpoint starts full).
    endpoint: u64,
    /// Tokens, in [`UNIT`]s per frame.
    tokens: u64,
    /// When it was last refilled.
    last_ns: u64,
    /// Whether it was used since the pipeline started.
    primed: bool,
}

/// The BUM limit: a token bucket per source port (this worker's share of the port's traffic:
/// a pod port's frames are received by one worker).
#[derive(Debug)]
pub(super) struct BumLimiter {
    buckets: Box<[Bucket]>,
}

impl BumLimiter {
    fn new() -> BumLimiter {
        BumLimiter {
            buckets: vec![Bucket::default(); MAX_PORTS as usize].into_boxed_slice(),
        }
    }

    /// Whether one more BUM frame from `port` (bound to `endpoint`) may go at `now_ns`, under
    /// `pps` frames per second (0: unlimited) with bursts of `burst`.
    #[inline]
    pub(super) fn admit(
        &mut self,
        port: PortId,
        endpoint: u64,
        (pps, burst): (u32, u32),
        now_ns: u64,
    ) -> bool {
        if pps == 0 {
            return true;
        }
        // Control numbers pod ports below MAX_PORTS; anything else has no bucket and no say.
        let Some(b) = self.buckets.get_mut(port.0 as usize) else {
            return false;
        };
        let cap = u64::from(burst.max(1)) * UNIT;
        if !b.primed || b.endpoint != endpoint {
            *b = Bucket {
                endpoint,
                tokens: cap,
                last_ns: now_ns,
                primed: true,
            };
        } else {
            let gained = now_ns
                .saturating_sub(b.last_ns)
                .saturating_mul(u64::from(pps));
            b.tokens = b.tokens.saturating_add(gained).min(cap);
            b.last_ns = now_ns;
        }
        if b.tokens >= UNIT {
            b.tokens -= UNIT;
            true
        } else {
            false
        }
    }
}

/// Ways per set of the refresh throttle.
const WAYS: usize = 4;
/// Sets of the refresh throttle (entries: `SETS * WAYS`).
const SETS: usize = 256;

/// When each learned (MAC, port) was last reported as seen: a small set-associative table, so
/// a chatty VM costs one report per period, not one per frame. An entry evicted by others
/// only means one report more.
#[derive(Debug)]
pub(super) struct SeenThrottle {
    /// (key, last report); key 0 is an empty way (no valid MAC is 0).
    sets: Box<[[(u64, u64); WAYS]]>,
}

impl SeenThrottle {
    fn new() -> SeenThrottle {
        SeenThrottle {
            sets: vec![[(0, 0); WAYS]; SETS].into_boxed_slice(),
        }
    }

    /// Whether `mac` on `port` is due a report at `now_ns` (and notes it reported), given one
    /// report per `period_ns`.
    #[inline]
    pub(super) fn due(&mut self, mac: MacAddr, port: PortId, now_ns: u64, period_ns: u64) -> bool {
        let key = mac.to_u64() | u64::from(port.0 & 0xffff) << 48;
        let set = &mut self.sets[lace_shared::hash::mix64(key) as usize % SETS];
        if let Some(way) = set.iter_mut().find(|w| w.0 == key) {
            if now_ns.saturating_sub(way.1) < period_ns {
                return false;
            }
            way.1 = now_ns;
            return true;
        }
        let oldest = set
            .iter_mut()
            .min_by_key(|w| (w.0 != 0, w.1))
            .expect("a set has ways");
        *oldest = (key, now_ns);
        true
    }
}

/// What learning needs per worker: the BUM buckets and the refresh throttle.
#[derive(Debug)]
pub(crate) struct L2State {
    pub(super) bum: BumLimiter,
    pub(super) seen: SeenThrottle,
}

impl L2State {
    pub(super) fn new() -> L2State {
        L2State {
            bum: BumLimiter::new(),
            seen: SeenThrottle::new(),
        }
    }
}

/// What a frame announces: the kind, the MAC, the address (not for RARP).
type Announcement = (LearnKind, MacAddr, Option<IpAddr>);

/// The announcement a frame `arp-reply`, `nd-reply` or `pod-input` sent here carries, checked:
/// the announced MAC must be the frame's source (a port speaks only for the MAC it sends from).
fn announcement(d: &[u8]) -> Result<Announcement, DropReason> {
    let eth = ethernet::Frame::new_checked(d).map_err(|_| DropReason::Malformed)?;
    let src = eth.src_addr();
    let payload = &d[L3..];
    let (kind, mac, ip) = match eth.ethertype() {
        EtherType::Arp => {
            let p = arp::Packet::new_checked(payload).map_err(|_| DropReason::Malformed)?;
            let a = arp::Repr::parse(&p).map_err(|_| DropReason::Malformed)?;
            let s = a.sender_protocol_addr;
            if s != a.target_protocol_addr || s.is_unspecified() {
                return Err(DropReason::NotGateway);
            }
            (
                LearnKind::GratuitousArp,
                a.sender_hardware_addr,
                Some(IpAddr::V4(s)),
            )
        }
        EtherType::Rarp => {
            let p = arp::Packet::new_checked(payload).map_err(|_| DropReason::Malformed)?;
            let r = rarp::Repr::parse(&p).map_err(|_| DropReason::Malformed)?;
            let mac = r.announced().ok_or(DropReason::NotGateway)?;
            (LearnKind::Rarp, mac, None)
        }
        EtherType::Ipv6 => {
            let ip = ipv6::Packet::new_checked(payload).map_err(|_| DropReason::Malformed)?;
            let (s, dst) = (ip.src_addr(), ip.dst_addr());
            let icmp =
                icmpv6::Packet::new_checked(ip.payload()).map_err(|_| DropReason::Malformed)?;
            match icmpv6::Repr::parse(&s, &dst, &icmp).map_err(|_| DropReason::Malformed)? {
                icmpv6::Repr::NeighborAdvert {
                    flags,
                    target_addr,
                    target_lladdr,
                } if unsolicited(flags, &s) => (
                    LearnKind::UnsolicitedNa,
                    target_lladdr.unwrap_or(src),
                    Some(IpAddr::V6(target_addr)),
                ),
                _ => return Err(DropReason::NotGateway),
            }
        }
        _ => return Err(DropReason::UnsupportedEthertype),
    };
    if mac != src {
        return Err(DropReason::SpoofedMac);
    }
    Ok((kind, MacAddr(mac.0), ip))
}

/// An unsolicited advertisement that announces an address (RFC 4861 §7.2.6): Solicited clear,
/// Override set, from a unicast address (never from `::`, which no advertisement may use).
#[inline]
pub(super) fn unsolicited(flags: NeighborFlags, src: &std::net::Ipv6Addr) -> bool {
    !flags.contains(NeighborFlags::SOLICITED)
        && flags.contains(NeighborFlags::OVERRIDE)
        && !src.is_unspecified()
        && !src.is_multicast()
}

/// `l2-learn`: an announcement from a pod port of an l2 network — reported to control when
/// the network learns and the source's BUM limit allows, then consumed.
pub(super) fn l2_learn<B: PacketBuf, I: Io<B>>(n: &mut NodeCtx<'_, '_, '_, B, I>, frame: &[u8]) {
    let now = n.io.now_ns();
    let mut to = [Stage::Drop; VEC_CAP];
    for (k, &i) in frame.iter().enumerate() {
        let slot = usize::from(i);
        let Some(pkt) = n.bufs[slot].as_ref() else {
            to[k] = n.gone(i);
            continue;
        };
        let m = n.meta[slot];
        let v = (|| {
            let port = n.cx.port(m.rx).ok_or(DropReason::UnknownPort)?;
            let ctx = n.cx.net_ctx(m.net).ok_or(DropReason::NoNetwork)?;
            if ctx.learn_period_ns.is_none() {
                return Err(DropReason::NotLearning);
            }
            let (kind, mac, ip) = announcement(pkt.data())?;
            if !n.l2.bum.admit(m.rx, port.endpoint, ctx.bum, now) {
                return Err(DropReason::BumRateLimited);
            }
            n.io.learn(&LearnEvent {
                port: m.rx,
                endpoint: port.endpoint,
                network: m.net,
                kind,
                mac,
                ip,
                at_ns: now,
            });
            Ok(())
        })();
        to[k] = match v {
            Ok(()) => {
                // Taken in: freed by `drop` without counting a drop (counted in l2-learn).
                n.meta[slot].flags |= Meta::CONSUMED;
                Stage::Drop
            }
            Err(r) => n.drop_for(i, r),
        };
    }
    n.hand_over(frame, &to[..frame.len()]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_allow_a_burst_then_the_rate() {
        let mut l = BumLimiter::new();
        let p = PortId(3);
        let lim = (1000, 5);
        let t0 = 1_000_000;
        let passed = (0..10).filter(|_| l.admit(p, 7, lim, t0)).count();
        assert_eq!(passed, 5, "the burst, then nothing at the same instant");
        // 1000/s: one frame per millisecond comes back.
        assert!(!l.admit(p, 7, lim, t0 + 999_999));
        assert!(l.admit(p, 7, lim, t0 + 1_000_000));
        // After a long silence the bucket holds at most the burst.
        let later = t0 + 10_000_000_000;
        assert_eq!((0..10).filter(|_| l.admit(p, 7, lim, later)).count(), 5);
        // A port bound to another endpoint starts with a full bucket; other ports are apart.
        assert_eq!((0..10).filter(|_| l.admit(p, 8, lim, later)).count(), 5);
        assert!(l.admit(PortId(4), 9, lim, later));
        // Unlimited, and ports beyond the table.
        assert!((0..1000).all(|_| l.admit(p, 8, (0, 0), later)));
        assert!(!l.admit(PortId(MAX_PORTS), 1, lim, later));
    }

    #[test]
    fn a_seen_mac_is_reported_once_per_period() {
        let mut t = SeenThrottle::new();
        let mac = MacAddr([2, 0xaa, 0, 0, 0, 1]);
        let period = 75_000_000_000;
        assert!(t.due(mac, PortId(4), 5, period));
        assert!(!t.due(mac, PortId(4), 6, period));
        assert!(!t.due(mac, PortId(4), 5 + period - 1, period));
        assert!(t.due(mac, PortId(4), 5 + period, period));
        // Another port is another entry (a MAC that moved is reported there at once).
        assert!(t.due(mac, PortId(5), 7, period));
        // Many MACs at once: each is reported at its first frame.
        for i in 0..(SETS * WAYS * 2) as u64 {
            assert!(t.due(
                MacAddr::from_u64(0x0200_0000_0000 + i),
                PortId(1),
                10,
                period
            ));
        }
    }
}
