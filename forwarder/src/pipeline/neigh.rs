//! The underlay neighbor cache: IPv6 next hop → MAC, learned from neighbor advertisements
//! (and solicitations) on the uplink, shared by every worker without locks.
//!
//! A fixed, open-addressed table of entries, each guarded by a sequence counter (a seqlock):
//! a writer makes the counter odd, writes the address and MAC, and makes it even again; a
//! reader retries or gives up when the counter moved. Any worker may write (an advertisement
//! can arrive on any uplink queue); writers take an entry by compare-and-swap on its counter.
//! Entries are never removed, only refreshed: a node's underlay addresses are few and stable.
//!
//! Solicitations are rate-limited per entry: [`UnderlayNeighbors::should_solicit`] lets one
//! worker send one per interval for an unresolved address.

use std::net::Ipv6Addr;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use lace_shared::types::MacAddr;

/// How often an unresolved next hop is solicited.
pub const SOLICIT_INTERVAL_NS: u64 = 200_000_000;

#[derive(Debug, Default)]
struct Entry {
    seq: AtomicU64,
    hi: AtomicU64,
    lo: AtomicU64,
    /// MAC in the low 48 bits, bit 63: resolved.
    mac: AtomicU64,
    /// Last time a solicitation was sent for this address.
    solicited: AtomicU64,
}

const RESOLVED: u64 = 1 << 63;

/// The cache. Create one per forwarder and share it (`Arc`) among the workers.
#[derive(Debug)]
pub struct UnderlayNeighbors {
    entries: Box<[Entry]>,
    mask: usize,
    /// Bumped after every change of an entry: a worker that keeps a resolved MAC from burst to
    /// burst checks it is unchanged.
    version: AtomicU64,
}

fn split(a: Ipv6Addr) -> (u64, u64) {
    let v = u128::from(a);
    ((v >> 64) as u64, v as u64)
}

impl UnderlayNeighbors {
    /// A cache of `capacity` entries (rounded up to a power of two, at least 16).
    pub fn new(capacity: usize) -> UnderlayNeighbors {
        let n = capacity.max(16).next_power_of_two();
        UnderlayNeighbors {
            entries: (0..n).map(|_| Entry::default()).collect(),
            mask: n - 1,
            version: AtomicU64::new(0),
        }
    }

    fn home(&self, hi: u64, lo: u64) -> usize {
        let h = (hi ^ lo.rotate_left(17)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 32) as usize & self.mask
    }

    /// Reads one entry consistently: (address, mac word), or None while it is being written.
    fn read(&self, e: &Entry) -> Option<(u64, u64, u64)> {
        let s1 = e.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return None;
        }
        let (hi, lo, mac) = (
            e.hi.load(Ordering::Relaxed),
            e.lo.load(Ordering::Relaxed),
            e.mac.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        (e.seq.load(Ordering::Relaxed) == s1).then_some((hi, lo, mac))
    }

    /// Probe sequence: at most 8 entries from the home slot.
    fn probe(&self, hi: u64, lo: u64) -> impl Iterator<Item = &Entry> {
        let home = self.home(hi, lo);
        (0..8).map(move |k| &self.entries[(home + k) & self.mask])
    }

    /// Changes so far: what was looked up is still what a lookup would find while this stays
    /// the same.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The MAC of `addr`, if resolved.
    #[inline]
    pub fn lookup(&self, addr: Ipv6Addr) -> Option<MacAddr> {
        let (hi, lo) = split(addr);
        for e in self.probe(hi, lo) {
            let (ehi, elo, mac) = self.read(e)?;
            if mac == 0 && ehi == 0 && elo == 0 {
                return None;
            }
            if (ehi, elo) == (hi, lo) {
                return (mac & RESOLVED != 0).then(|| MacAddr::from_u64(mac & !RESOLVED));
            }
        }
        None
    }

    /// Learns (or refreshes) `addr` → `mac`. Returns false when the probe window is full.
    pub fn learn(&self, addr: Ipv6Addr, mac: MacAddr) -> bool {
        self.write(addr, Some(mac))
    }

    fn write(&self, addr: Ipv6Addr, mac: Option<MacAddr>) -> bool {
        let (hi, lo) = split(addr);
        for e in self.probe(hi, lo) {
            let s = e.seq.load(Ordering::Acquire);
            if s & 1 == 1 {
                continue;
            }
            let (ehi, elo, emac) = (
                e.hi.load(Ordering::Relaxed),
                e.lo.load(Ordering::Relaxed),
                e.mac.load(Ordering::Relaxed),
            );
            let empty = ehi == 0 && elo == 0 && emac == 0;
            if !empty && (ehi, elo) != (hi, lo) {
                continue;
            }
            if e.seq
                .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                // Another worker is writing this entry right now; its write wins.
                return true;
            }
            // Re-check under the entry's lock: it may have been filled since we looked.
            let (ehi, elo) = (e.hi.load(Ordering::Relaxed), e.lo.load(Ordering::Relaxed));
            let still = (ehi == 0 && elo == 0 && e.mac.load(Ordering::Relaxed) == 0)
                || (ehi, elo) == (hi, lo);
            if still {
                e.hi.store(hi, Ordering::Relaxed);
                e.lo.store(lo, Ordering::Relaxed);
                let word = match mac {
                    Some(m) => m.to_u64() | RESOLVED,
                    None => e.mac.load(Ordering::Relaxed) | 1 << 62,
                };
                e.mac.store(word, Ordering::Relaxed);
            }
            e.seq.store(s + 2, Ordering::Release);
            if still {
                self.version.fetch_add(1, Ordering::Release);
                return true;
            }
        }
        false
    }

    /// Whether the caller should send a solicitation for `addr` now (unresolved and none sent
    /// in the last `SOLICIT_INTERVAL_NS`). At most one caller per interval gets `true`.
    pub fn should_solicit(&self, addr: Ipv6Addr, now_ns: u64) -> bool {
        let (hi, lo) = split(addr);
        // Make sure the address has an entry (unresolved) to hang the rate limit on.
        let found = self
            .probe(hi, lo)
            .find(|e| matches!(self.read(e), Some((ehi, elo, _)) if (ehi, elo) == (hi, lo)));
        let e = match found {
            Some(e) => e,
            None => {
                if !self.write(addr, None) {
                    return false;
                }
                match self
                    .probe(hi, lo)
                    .find(|e| matches!(self.read(e), Some((ehi, elo, _)) if (ehi, elo) == (hi, lo)))
                {
                    Some(e) => e,
                    None => return false,
                }
            }
        };
        let last = e.solicited.load(Ordering::Relaxed);
        if last != 0 && now_ns.saturating_sub(last) < SOLICIT_INTERVAL_NS {
            return false;
        }
        e.solicited
            .compare_exchange(last, now_ns.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(i: u16) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i)
    }

    #[test]
    fn learn_lookup_refresh() {
        let n = UnderlayNeighbors::new(16);
        assert_eq!(n.lookup(a(1)), None);
        assert!(n.learn(a(1), MacAddr([2, 0, 0, 0, 0, 1])));
        assert_eq!(n.lookup(a(1)), Some(MacAddr([2, 0, 0, 0, 0, 1])));
        assert!(n.learn(a(1), MacAddr([2, 0, 0, 0, 0, 9])));
        assert_eq!(n.lookup(a(1)), Some(MacAddr([2, 0, 0, 0, 0, 9])));
        assert_eq!(n.lookup(a(2)), None);
        let v = n.version();
        assert!(n.learn(a(1), MacAddr([2, 0, 0, 0, 0, 8])));
        assert!(n.version() > v, "a change moves the version");
        for i in 2..12 {
            assert!(n.learn(a(i), MacAddr([2, 0, 0, 0, 0, i as u8])));
        }
        for i in 2..12 {
            assert_eq!(n.lookup(a(i)), Some(MacAddr([2, 0, 0, 0, 0, i as u8])));
        }
    }

    #[test]
    fn solicitations_are_rate_limited_until_resolved() {
        let n = UnderlayNeighbors::new(16);
        assert!(n.should_solicit(a(5), 1_000));
        assert!(!n.should_solicit(a(5), 2_000));
        assert_eq!(n.lookup(a(5)), None, "a pending entry is not resolved");
        assert!(n.should_solicit(a(5), 1_000 + SOLICIT_INTERVAL_NS));
        n.learn(a(5), MacAddr([2, 0, 0, 0, 0, 5]));
        assert_eq!(n.lookup(a(5)), Some(MacAddr([2, 0, 0, 0, 0, 5])));
    }

    #[test]
    fn concurrent_writers_and_readers_never_see_a_torn_entry() {
        let n = std::sync::Arc::new(UnderlayNeighbors::new(16));
        let writers: Vec<_> = (0..2u8)
            .map(|w| {
                let n = n.clone();
                std::thread::spawn(move || {
                    for k in 0..20_000u32 {
                        let b = (k % 200) as u8;
                        n.learn(a(1), MacAddr([w, b, b, b, b, b]));
                    }
                })
            })
            .collect();
        for _ in 0..20_000 {
            if let Some(m) = n.lookup(a(1)) {
                let b = m.0[1];
                assert!(m.0[1..].iter().all(|&x| x == b), "torn MAC {m}");
            }
        }
        for w in writers {
            w.join().unwrap();
        }
    }
}
