//! A set of free indices `0..=max` kept as disjoint, non-adjacent inclusive ranges.
//!
//! Every operation is O(log n) in the number of ranges, and the memory used depends on how
//! fragmented the set is, never on how large it is: a /64 block of IPv6 addresses or 2^32 blocks
//! of a /32 subnet cost one range until they are used. Taking always returns the lowest free
//! index, which makes allocation deterministic (the property tests' model relies on it).

use std::collections::BTreeMap;

/// Free indices of a pool `0..=max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FreeRanges {
    /// start → inclusive end; ranges are disjoint and never adjacent.
    free: BTreeMap<u128, u128>,
    /// The largest index of the pool.
    max: u128,
    /// How many indices are taken.
    taken: u128,
}

impl FreeRanges {
    /// A pool of `0..=max`, all free.
    pub(crate) fn new(max: u128) -> FreeRanges {
        FreeRanges {
            free: BTreeMap::from([(0, max)]),
            max,
            taken: 0,
        }
    }

    /// The largest index of the pool.
    pub(crate) fn max(&self) -> u128 {
        self.max
    }

    /// How many indices are taken.
    pub(crate) fn taken(&self) -> u128 {
        self.taken
    }

    /// Takes the lowest free index; None when every index is taken.
    pub(crate) fn take_lowest(&mut self) -> Option<u128> {
        let (&start, &end) = self.free.iter().next()?;
        self.free.remove(&start);
        if start < end {
            self.free.insert(start + 1, end);
        }
        self.taken += 1;
        Some(start)
    }

    /// Takes `i`; false when it is out of range or already taken.
    pub(crate) fn take(&mut self, i: u128) -> bool {
        let Some((&start, &end)) = self.free.range(..=i).next_back() else {
            return false;
        };
        if end < i {
            return false;
        }
        self.free.remove(&start);
        if start < i {
            self.free.insert(start, i - 1);
        }
        if i < end {
            self.free.insert(i + 1, end);
        }
        self.taken += 1;
        true
    }

    /// The lowest free index at or above `from`, if any (nothing is taken).
    pub(crate) fn lowest_free_from(&self, from: u128) -> Option<u128> {
        if let Some((_, &end)) = self.free.range(..=from).next_back() {
            if end >= from {
                return Some(from);
            }
        }
        self.free.range(from..).next().map(|(&start, _)| start)
    }

    /// Whether `i` is free.
    pub(crate) fn is_free(&self, i: u128) -> bool {
        self.free
            .range(..=i)
            .next_back()
            .is_some_and(|(_, &end)| end >= i)
    }

    /// Returns `i` to the pool; false (and no change) when it is out of range or already free.
    pub(crate) fn free(&mut self, i: u128) -> bool {
        if i > self.max || self.is_free(i) {
            return false;
        }
        let mut start = i;
        let mut end = i;
        if i > 0 {
            if let Some((&s, &e)) = self.free.range(..i).next_back() {
                if e == i - 1 {
                    self.free.remove(&s);
                    start = s;
                }
            }
        }
        if i < self.max {
            if let Some(e) = self.free.remove(&(i + 1)) {
                end = e;
            }
        }
        self.free.insert(start, end);
        self.taken -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_first_and_merging() {
        let mut r = FreeRanges::new(4);
        assert_eq!(
            (0..5).map(|_| r.take_lowest()).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2), Some(3), Some(4)]
        );
        assert_eq!(r.take_lowest(), None);
        assert_eq!(r.taken(), 5);
        assert!(r.free(3));
        assert!(r.free(1));
        assert!(!r.free(1), "double free is refused");
        assert!(!r.free(5), "out of range is refused");
        assert!(r.free(2));
        assert_eq!(r.free.len(), 1, "1..=3 merged into one range");
        assert_eq!(r.take_lowest(), Some(1));
        assert!(r.take(3));
        assert!(!r.take(3));
        assert!(!r.take(4), "4 is taken");
        assert_eq!(r.take_lowest(), Some(2));
        assert_eq!(r.taken(), 5);
    }

    #[test]
    fn lowest_free_from_finds_the_next_free_index_without_taking_it() {
        let mut r = FreeRanges::new(9);
        for i in [0, 1, 2, 5, 6] {
            assert!(r.take(i));
        }
        assert_eq!(r.lowest_free_from(0), Some(3));
        assert_eq!(r.lowest_free_from(4), Some(4));
        assert_eq!(r.lowest_free_from(5), Some(7));
        assert_eq!(r.lowest_free_from(9), Some(9));
        assert_eq!(r.lowest_free_from(10), None);
        assert_eq!(r.taken(), 5, "nothing was taken");
        assert!(r.take(9));
        assert_eq!(r.lowest_free_from(8), Some(8));
        assert!(r.take(8));
        assert_eq!(r.lowest_free_from(8), None);
    }

    #[test]
    fn huge_pools_cost_one_range() {
        let mut r = FreeRanges::new(u128::MAX);
        assert!(r.take(u128::MAX));
        assert!(r.take(1 << 100));
        assert_eq!(r.take_lowest(), Some(0));
        assert!(r.free(u128::MAX));
        assert!(r.is_free(u128::MAX));
        assert_eq!(r.free.len(), 2);
    }
}
