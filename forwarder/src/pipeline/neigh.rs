//! The uplink's neighbor cache: next hop → MAC, learned from neighbor advertisements (and
//! solicitations) and ARP on the uplink, shared by every worker without locks. A neighbor is an
//! address on a VLAN ([`Neighbor`]): the underlay's next hops are untagged, an external
//! network's gateways on the VLAN it is carried on (ADR 0054), and the same address on two
//! VLANs is two neighbors.
//!
//! A fixed, open-addressed table of entries, each guarded by a sequence counter (a seqlock):
//! a writer makes the counter odd, writes the address and MAC, and makes it even again; a
//! reader retries or gives up when the counter moved. Any worker may write (an advertisement
//! can arrive on any uplink queue); writers take an entry by compare-and-swap on its counter.
//! Entries are never removed, only refreshed: a node's underlay addresses are few and stable.
//!
//! Solicitations are rate-limited per entry: [`UnderlayNeighbors::should_solicit`] lets one
//! worker send one per interval for an unresolved address.
//!
//! Entries are kept fresh as a host keeps its neighbors (RFC 4861 §7.3, the same for ARP): an
//! entry is reachable for [`REACHABLE_NS`] after its neighbor last answered or spoke; then it is
//! probed every [`PROBE_NS`], and after [`PROBES`] unanswered probes it is no longer resolved: a
//! route through it is down (its packets are dropped as unresolved, and it is solicited again)
//! until the neighbor answers. A neighbor replaced by another MAC is learned from its answer. [`UnderlayNeighbors::maintain`], called
//! by the workers between bursts, keeps the cache's clock and does this.

use std::net::Ipv6Addr;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use lace_shared::types::MacAddr;

/// A neighbor on the uplink: its address (IPv4-mapped for IPv4) on an 802.1Q VLAN (0:
/// untagged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Neighbor {
    /// The VLAN (1–4094; 0: untagged).
    pub vlan: u16,
    /// The address, IPv4-mapped for IPv4.
    pub addr: Ipv6Addr,
}

impl Neighbor {
    /// `addr`, untagged (the underlay's next hops).
    #[inline]
    pub const fn untagged(addr: Ipv6Addr) -> Neighbor {
        Neighbor { vlan: 0, addr }
    }

    /// The key as stored: the address's two halves, the VLAN in the MAC word's bits 48–59.
    #[inline]
    fn key(self) -> (u64, u64, u64) {
        let v = u128::from(self.addr);
        (
            (v >> 64) as u64,
            v as u64,
            u64::from(self.vlan & 0xfff) << 48,
        )
    }
}

/// How often an unresolved next hop is solicited.
pub const SOLICIT_INTERVAL_NS: u64 = 200_000_000;
/// How long an entry stays reachable after its neighbor last answered (Linux's base reachable
/// time).
pub const REACHABLE_NS: u64 = 30_000_000_000;
/// How often a stale entry is probed.
pub const PROBE_NS: u64 = 1_000_000_000;
/// Probes left unanswered before an entry is no longer resolved.
pub const PROBES: u64 = 3;
/// How often the cache is scanned for stale entries.
const SCAN_NS: u64 = 100_000_000;

#[derive(Debug, Default)]
struct Entry {
    seq: AtomicU64,
    hi: AtomicU64,
    lo: AtomicU64,
    /// MAC in the low 48 bits, the VLAN in bits 48–59, bit 62: present, bit 63: resolved.
    mac: AtomicU64,
    /// Last time a solicitation was sent for this address.
    solicited: AtomicU64,
    /// Last time its neighbor answered or spoke (the cache's clock then; 0: before the clock
    /// started, counted from the first scan).
    confirmed: AtomicU64,
}

const RESOLVED: u64 = 1 << 63;
/// Marks an entry that holds an address but no MAC (a pending or expired one).
const PRESENT: u64 = 1 << 62;
/// The VLAN's bits of the MAC word.
const VLAN: u64 = 0xfff << 48;
/// The MAC's bits of the MAC word.
const MAC: u64 = (1 << 48) - 1;

/// What [`UnderlayNeighbors::write`] does to an address's entry.
#[derive(Debug, Clone, Copy)]
enum Write {
    /// Resolved to this MAC, just now.
    Learn(MacAddr),
    /// Present, for the solicitation rate limit, as it was.
    Pending,
    /// No longer resolved, if still unconfirmed since `confirmed`.
    Expire { confirmed: u64 },
}

/// The cache. Create one per forwarder and share it (`Arc`) among the workers.
#[derive(Debug)]
pub struct UnderlayNeighbors {
    entries: Box<[Entry]>,
    mask: usize,
    /// Bumped after every change of an entry: a worker that keeps a resolved MAC from burst to
    /// burst checks it is unchanged.
    version: AtomicU64,
    /// The workers' clock as of the last scan of [`UnderlayNeighbors::maintain`].
    clock: AtomicU64,
    /// When the next scan for stale entries is due.
    next_scan: AtomicU64,
}

/// The neighbor an entry's words name.
fn neighbor(hi: u64, lo: u64, mac: u64) -> Neighbor {
    Neighbor {
        vlan: ((mac & VLAN) >> 48) as u16,
        addr: Ipv6Addr::from(u128::from(hi) << 64 | u128::from(lo)),
    }
}

impl UnderlayNeighbors {
    /// A cache of `capacity` entries (rounded up to a power of two, at least 16).
    pub fn new(capacity: usize) -> UnderlayNeighbors {
        let n = capacity.max(16).next_power_of_two();
        UnderlayNeighbors {
            entries: (0..n).map(|_| Entry::default()).collect(),
            mask: n - 1,
            version: AtomicU64::new(0),
            clock: AtomicU64::new(0),
            next_scan: AtomicU64::new(0),
        }
    }

    fn home(&self, (hi, lo, vlan): (u64, u64, u64)) -> usize {
        let h = (hi ^ lo.rotate_left(17) ^ vlan).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 32) as usize & self.mask
    }

    /// Reads one entry consistently: (address halves, MAC word), or None while it is being
    /// written.
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
    fn probe(&self, key: (u64, u64, u64)) -> impl Iterator<Item = &Entry> {
        let home = self.home(key);
        (0..8).map(move |k| &self.entries[(home + k) & self.mask])
    }

    /// Changes so far: what was looked up is still what a lookup would find while this stays
    /// the same.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The MAC of `who`, if resolved.
    #[inline]
    pub fn lookup(&self, who: Neighbor) -> Option<MacAddr> {
        let key @ (hi, lo, vlan) = who.key();
        for e in self.probe(key) {
            let (ehi, elo, mac) = self.read(e)?;
            if mac == 0 && ehi == 0 && elo == 0 {
                return None;
            }
            if (ehi, elo, mac & VLAN) == (hi, lo, vlan) {
                return (mac & RESOLVED != 0).then(|| MacAddr::from_u64(mac & MAC));
            }
        }
        None
    }

    /// Learns (or refreshes) `who` → `mac`: it is reachable again. Returns false when the
    /// probe window is full.
    pub fn learn(&self, who: Neighbor, mac: MacAddr) -> bool {
        self.write(who, Write::Learn(mac))
    }

    /// The entry of `key`, if it has one.
    fn find(&self, key: (u64, u64, u64)) -> Option<&Entry> {
        let (hi, lo, vlan) = key;
        self.probe(key).find(|e| {
            matches!(self.read(e), Some((ehi, elo, mac)) if (ehi, elo, mac & VLAN) == (hi, lo, vlan))
        })
    }

    fn write(&self, who: Neighbor, what: Write) -> bool {
        let key @ (hi, lo, vlan) = who.key();
        for e in self.probe(key) {
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
            if !empty && (ehi, elo, emac & VLAN) != (hi, lo, vlan) {
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
            let (ehi, elo, emac) = (
                e.hi.load(Ordering::Relaxed),
                e.lo.load(Ordering::Relaxed),
                e.mac.load(Ordering::Relaxed),
            );
            let same = (ehi, elo, emac & VLAN) == (hi, lo, vlan);
            let mut still = (ehi == 0 && elo == 0 && emac == 0) || same;
            if let Write::Expire { confirmed } = what {
                // Only the entry the scan saw stale: not one its neighbor answered since.
                still &= same && e.confirmed.load(Ordering::Relaxed) == confirmed;
            }
            if still {
                e.hi.store(hi, Ordering::Relaxed);
                e.lo.store(lo, Ordering::Relaxed);
                let word = match what {
                    Write::Learn(m) => {
                        e.confirmed
                            .store(self.clock.load(Ordering::Relaxed), Ordering::Relaxed);
                        m.to_u64() | vlan | RESOLVED
                    }
                    Write::Pending => emac | vlan | PRESENT,
                    Write::Expire { .. } => (emac & !RESOLVED) | PRESENT,
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

    /// At most every 100 ms (one caller): sets the cache's clock (what [`Self::learn`] stamps
    /// entries with) to `now_ns` and keeps the entries fresh: `probe(neighbor)` for each
    /// resolved entry unconfirmed for [`REACHABLE_NS`] (every [`PROBE_NS`]), and no longer
    /// resolved after [`PROBES`] unanswered probes.
    pub fn maintain(&self, now_ns: u64, mut probe: impl FnMut(Neighbor)) {
        // Every worker reads this between bursts; one writes, once per scan.
        let due = self.next_scan.load(Ordering::Relaxed);
        if now_ns < due
            || self
                .next_scan
                .compare_exchange(due, now_ns + SCAN_NS, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        self.clock.store(now_ns, Ordering::Relaxed);
        for e in self.entries.iter() {
            let Some((hi, lo, mac)) = self.read(e) else {
                continue;
            };
            if mac & RESOLVED == 0 {
                continue;
            }
            let who = neighbor(hi, lo, mac);
            let confirmed = e.confirmed.load(Ordering::Relaxed);
            if confirmed == 0 {
                // Learned before the first clock: it counts from now.
                e.confirmed.store(now_ns.max(1), Ordering::Relaxed);
                continue;
            }
            let age = now_ns.saturating_sub(confirmed);
            if age < REACHABLE_NS {
                continue;
            }
            if age >= REACHABLE_NS + PROBES * PROBE_NS {
                self.write(who, Write::Expire { confirmed });
                continue;
            }
            let last = e.solicited.load(Ordering::Relaxed);
            if now_ns.saturating_sub(last) >= PROBE_NS
                && e.solicited
                    .compare_exchange(last, now_ns.max(1), Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                probe(who);
            }
        }
    }

    /// The neighbors traffic waits for that do not resolve: unresolved, and solicited in the
    /// two seconds before the last scan (packets through them keep asking every 200 ms). Their
    /// routes are down.
    pub fn waiting(&self) -> Vec<Neighbor> {
        let since = self
            .clock
            .load(Ordering::Relaxed)
            .saturating_sub(2_000_000_000);
        self.entries
            .iter()
            .filter_map(|e| {
                let (hi, lo, mac) = self.read(e)?;
                let asked = e.solicited.load(Ordering::Relaxed);
                (mac & RESOLVED == 0 && mac & PRESENT != 0 && asked != 0 && asked >= since)
                    .then(|| neighbor(hi, lo, mac))
            })
            .collect()
    }

    /// Whether the caller should send a solicitation for `who` now (unresolved and none sent
    /// in the last `SOLICIT_INTERVAL_NS`). At most one caller per interval gets `true`.
    pub fn should_solicit(&self, who: Neighbor, now_ns: u64) -> bool {
        let key = who.key();
        // Make sure the neighbor has an entry (unresolved) to hang the rate limit on.
        let e = match self.find(key) {
            Some(e) => e,
            None => {
                if !self.write(who, Write::Pending) {
                    return false;
                }
                match self.find(key) {
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

    fn a(i: u16) -> Neighbor {
        Neighbor::untagged(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i))
    }

    #[test]
    fn one_address_on_two_vlans_is_two_neighbors() {
        let n = UnderlayNeighbors::new(16);
        let on = |vlan| Neighbor { vlan, ..a(3) };
        let (m0, m100) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        assert!(n.learn(on(0), m0));
        assert_eq!(n.lookup(on(100)), None);
        assert!(n.should_solicit(on(100), 1_000));
        assert!(n.learn(on(100), m100));
        assert_eq!((n.lookup(on(0)), n.lookup(on(100))), (Some(m0), Some(m100)));
        assert_eq!(n.lookup(on(4094)), None);
        // A VLAN's entry does not refresh the other's.
        assert!(n.learn(on(100), MacAddr([2, 0, 0, 0, 0, 3])));
        assert_eq!(n.lookup(on(0)), Some(m0));
        // Both are scanned, each as itself.
        const S: u64 = 1_000_000_000;
        let mut probed = Vec::new();
        n.maintain(S, |w| probed.push(w));
        n.maintain(32 * S, |w| probed.push(w));
        probed.sort();
        assert_eq!(probed, [on(0), on(100)]);
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
    fn entries_are_probed_when_stale_and_unresolved_when_probes_go_unanswered() {
        let n = UnderlayNeighbors::new(16);
        let mac = MacAddr([2, 0, 0, 0, 0, 7]);
        let probed = |t: u64| {
            let mut out = Vec::new();
            n.maintain(t, |a| out.push(a));
            out
        };
        const S: u64 = 1_000_000_000;
        // Learned before the clock started: counted from the first scan.
        n.learn(a(7), mac);
        assert!(probed(S).is_empty());
        assert!(probed(30 * S).is_empty(), "reachable for 30 s");
        assert_eq!(probed(31 * S + 1), [a(7)], "stale: probed");
        assert!(probed(31 * S + SCAN_NS + 1).is_empty(), "once per second");
        assert_eq!(n.lookup(a(7)), Some(mac), "still used while probed");
        assert_eq!(probed(32 * S + 2), [a(7)]);
        // It answers: reachable again, from the clock of the last scan.
        n.learn(a(7), mac);
        assert!(probed(33 * S + 3).is_empty());
        assert!(probed(62 * S).is_empty());
        // Three probes unanswered: no longer resolved; the version tells cached plans.
        assert_eq!(probed(63 * S), [a(7)]);
        assert_eq!(probed(64 * S), [a(7)]);
        assert_eq!(probed(65 * S), [a(7)]);
        let v = n.version();
        assert!(probed(66 * S).is_empty());
        assert_eq!(n.lookup(a(7)), None);
        assert!(n.version() > v);
        // Down, just probed in vain; then, without traffic asking for it, no longer listed.
        assert_eq!(n.waiting(), [a(7)]);
        assert!(probed(70 * S).is_empty());
        assert!(n.waiting().is_empty());
        // Solicited again (not probed: it is unresolved): traffic waits for it.
        assert!(n.should_solicit(a(7), 70 * S));
        assert!(probed(71 * S).is_empty());
        assert_eq!(n.waiting(), [a(7)]);
        // Nobody asks any more: no longer waited for.
        assert!(probed(73 * S).is_empty());
        assert!(n.waiting().is_empty());
        // Back when it answers, with a new MAC if it changed.
        n.learn(a(7), MacAddr([2, 0, 0, 0, 0, 8]));
        assert_eq!(n.lookup(a(7)), Some(MacAddr([2, 0, 0, 0, 0, 8])));
        assert!(n.waiting().is_empty());
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
