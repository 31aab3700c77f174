//! The writer's allocator over a table region, with copy-on-write and deferred reclamation.
//!
//! Every table is built from blocks in the region's arena, addressed by byte offset. The writer
//! never modifies a block that readers may see: it allocates a new block, copies, changes the
//! copy and retires the old one ([`Arena::cow`]). A block allocated since the last publication
//! ("fresh") is invisible to readers and may be changed in place; retiring it frees it at once.
//! Blocks retired after a publication are freed only once every online reader has reported an
//! epoch at least as new ([`Arena::reclaim`]).
//!
//! The allocator's bookkeeping lives in the writer's heap, not in the region: after a restart it
//! is rebuilt from the set of blocks reachable from the published root ([`Arena::recover`]).
//! Space that was in use but is not reachable any more (retired blocks, or a publication that
//! was interrupted) is treated as retired at the recovery epoch, so a reader still holding an
//! old snapshot is never handed reused memory.
//!
//! Blocks are 16-byte granular; blocks of 64 bytes and more are 64-byte (cache line) aligned.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::fasthash::FastMap;

use crate::error::{Error, Result};
use crate::mem::{Mem, MemMut};

/// Allocation granule.
pub const GRANULE: u64 = 16;
/// Largest size served from the per-size free lists.
const SMALL_MAX: u64 = 2048;

/// Rounds a block size to the granule.
#[inline]
pub fn block_size(size: usize) -> u64 {
    (size as u64).max(1).div_ceil(GRANULE) * GRANULE
}

#[inline]
fn align_for(size: u64) -> u64 {
    if size >= 64 && size % 64 == 0 {
        64
    } else {
        GRANULE
    }
}

/// Usage figures of an arena.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArenaStats {
    /// Bytes in blocks reachable or fresh (allocated and not retired).
    pub live_bytes: u64,
    /// Bytes retired and waiting for readers to pass a quiescent point.
    pub retired_bytes: u64,
    /// Bytes immediately available.
    pub free_bytes: u64,
    /// Total arena bytes.
    pub capacity: u64,
    /// Highest offset ever handed out.
    pub high_water: u64,
}

/// The writer's allocator. See the module docs.
#[derive(Debug)]
pub struct Arena {
    mem: MemMut,
    /// The mapping `mem` points into, when the arena owns it ([`Arena::over`]).
    _region: Option<crate::region::Region>,
    start: u64,
    end: u64,
    by_off: BTreeMap<u64, u64>,
    by_len: BTreeSet<(u64, u64)>,
    small: Vec<Vec<u64>>,
    small_bytes: u64,
    extent_bytes: u64,
    fresh: FastMap<u64, u64>,
    pending: Vec<(u64, u64)>,
    retired: VecDeque<(u64, u64, u64)>,
    retired_bytes: u64,
    live_bytes: u64,
    high_water: u64,
}

impl Arena {
    /// An empty arena over `[start, end)` of `mem`.
    pub fn new(mem: MemMut, start: u64, end: u64) -> Arena {
        let mut a = Arena {
            mem,
            _region: None,
            start,
            end,
            by_off: BTreeMap::new(),
            by_len: BTreeSet::new(),
            small: vec![Vec::new(); (SMALL_MAX / GRANULE) as usize],
            small_bytes: 0,
            extent_bytes: 0,
            fresh: FastMap::default(),
            pending: Vec::new(),
            retired: VecDeque::new(),
            retired_bytes: 0,
            live_bytes: 0,
            high_water: start,
        };
        a.insert_extent(start, end - start);
        a
    }

    /// An empty arena owning a freshly created read-write region (for tools, benchmarks and
    /// tests that want tables without a [`crate::tables::TableWriter`]).
    pub fn over(mut region: crate::region::Region) -> Result<Arena> {
        let path = region.path().to_path_buf();
        let (base, len) = region.raw_mut().ok_or(Error::Corrupt {
            path,
            what: "an arena needs a read-write mapping".into(),
        })?;
        // SAFETY: the mapping is read-write, `len` bytes long, and owned by the arena from now
        // on (it is stored in `_region`), so it outlives `mem`; this is the only MemMut over it.
        let mem = unsafe { MemMut::from_raw(base, len) };
        let mut a = Arena::new(mem, crate::region::HEADER_SIZE, len as u64);
        a._region = Some(region);
        Ok(a)
    }

    /// Rebuilds an arena after a restart from the blocks reachable from the published root
    /// (`live`: offset and size of each). Gaps below `high_water` are retired at `epoch`;
    /// space above it is free at once.
    pub fn recover(
        mem: MemMut,
        start: u64,
        end: u64,
        high_water: u64,
        mut live: Vec<(u64, u64)>,
        epoch: u64,
    ) -> Result<Arena> {
        let mut a = Arena::new(mem, start, end);
        a.by_off.clear();
        a.by_len.clear();
        a.extent_bytes = 0;
        let high_water = high_water.clamp(start, end);
        live.sort_unstable();
        let mut cursor = start;
        for &(off, size) in &live {
            let size = block_size(size as usize);
            if off < cursor || off + size > end {
                return Err(Error::Invalid {
                    what: format!(
                        "table region: reachable block at {off} (+{size}) overlaps another or \
                         lies outside the arena; the region is corrupt, remove it"
                    ),
                });
            }
            if off > cursor {
                a.retire_gap(cursor, off.min(high_water), epoch);
                if off > high_water {
                    a.insert_extent(high_water.max(cursor), off - high_water.max(cursor));
                }
            }
            a.live_bytes += size;
            cursor = off + size;
        }
        a.high_water = high_water.max(cursor);
        if cursor < a.high_water {
            a.retire_gap(cursor, a.high_water, epoch);
        }
        if a.high_water < end {
            a.insert_extent(a.high_water, end - a.high_water);
        }
        Ok(a)
    }

    fn retire_gap(&mut self, from: u64, to: u64, epoch: u64) {
        if to > from {
            self.retired.push_back((epoch, from, to - from));
            self.retired_bytes += to - from;
        }
    }

    /// Read view of the region.
    #[inline]
    pub fn mem(&self) -> Mem<'_> {
        self.mem.mem()
    }

    /// Mutable view, for writing blocks that are fresh.
    #[inline]
    pub fn mem_mut(&mut self) -> &mut MemMut {
        &mut self.mem
    }

    /// Whether `off` was allocated since the last publication (and may be changed in place).
    #[inline]
    pub fn is_fresh(&self, off: u64) -> bool {
        self.fresh.contains_key(&off)
    }

    /// Allocates a zeroed block of at least `size` bytes.
    pub fn alloc(&mut self, size: usize) -> Result<u64> {
        let off = self.alloc_dirty(size)?;
        self.mem.zero(off, block_size(size) as usize);
        Ok(off)
    }

    /// Allocates a block of at least `size` bytes holding whatever it held before (for
    /// blocks the caller overwrites whole).
    fn alloc_dirty(&mut self, size: usize) -> Result<u64> {
        let s = block_size(size);
        let off = if s <= SMALL_MAX {
            match self.small[(s / GRANULE - 1) as usize].pop() {
                Some(off) => {
                    self.small_bytes -= s;
                    off
                }
                None => self.carve(s)?,
            }
        } else {
            self.carve(s)?
        };
        self.fresh.insert(off, s);
        self.live_bytes += s;
        self.high_water = self.high_water.max(off + s);
        Ok(off)
    }

    /// Allocates a block and copies `size` bytes of `src` into it (the rest of the block, up
    /// to the granule, is zeroed).
    pub fn alloc_copy(&mut self, src: u64, size: usize) -> Result<u64> {
        let off = self.alloc_dirty(size)?;
        self.mem.copy(src, off, size);
        let s = block_size(size) as usize;
        if s > size {
            self.mem.zero(off + size as u64, s - size);
        }
        Ok(off)
    }

    /// Returns a block that may be changed in place holding the contents of `off`: `off`
    /// itself if it is fresh, else a copy (and `off` is retired).
    pub fn cow(&mut self, off: u64, size: usize) -> Result<u64> {
        if self.is_fresh(off) {
            return Ok(off);
        }
        let new = self.alloc_copy(off, size)?;
        self.retire(off, size);
        Ok(new)
    }

    /// Gives a block back: at once if it was never published, else after a grace period.
    pub fn retire(&mut self, off: u64, size: usize) {
        let s = block_size(size);
        self.live_bytes = self.live_bytes.saturating_sub(s);
        if self.fresh.remove(&off).is_some() {
            self.release(off, s);
        } else {
            self.pending.push((off, s));
            self.retired_bytes += s;
        }
    }

    /// Marks the end of a batch: everything allocated so far becomes immutable and everything
    /// retired in the batch waits for readers to pass `epoch`.
    pub fn published(&mut self, epoch: u64) {
        // Clearing costs the map's capacity: after a big batch (a table load), give the room
        // back instead of paying for it at every small batch that follows.
        let n = self.fresh.len();
        self.fresh.clear();
        if self.fresh.capacity() > 4 * n.max(1024) {
            self.fresh.shrink_to(n.max(1024));
        }
        for (off, s) in self.pending.drain(..) {
            self.retired.push_back((epoch, off, s));
        }
    }

    /// Abandons the batch: frees every block allocated since the last publication and keeps
    /// every block retired since then (the published tables still use them).
    pub fn rollback(&mut self) {
        for (off, s) in std::mem::take(&mut self.fresh) {
            self.live_bytes -= s;
            self.release(off, s);
        }
        for (_, s) in std::mem::take(&mut self.pending) {
            self.retired_bytes -= s;
            self.live_bytes += s;
        }
    }

    /// Frees retired blocks that no reader can still hold: those retired at an epoch `<=
    /// safe_epoch` (`None`: no reader is online, everything may go).
    pub fn reclaim(&mut self, safe_epoch: Option<u64>) -> u64 {
        let mut freed = 0;
        while let Some(&(e, off, s)) = self.retired.front() {
            if safe_epoch.is_some_and(|safe| e > safe) {
                break;
            }
            self.retired.pop_front();
            self.retired_bytes -= s;
            self.release(off, s);
            freed += s;
        }
        freed
    }

    /// Oldest epoch a retired block waits for, if any.
    pub fn oldest_retired_epoch(&self) -> Option<u64> {
        self.retired.front().map(|r| r.0)
    }

    /// Usage figures.
    pub fn stats(&self) -> ArenaStats {
        ArenaStats {
            live_bytes: self.live_bytes,
            retired_bytes: self.retired_bytes,
            free_bytes: self.extent_bytes + self.small_bytes,
            capacity: self.end - self.start,
            high_water: self.high_water,
        }
    }

    fn release(&mut self, off: u64, s: u64) {
        if s <= SMALL_MAX && off % align_for(s) == 0 {
            self.small[(s / GRANULE - 1) as usize].push(off);
            self.small_bytes += s;
        } else {
            self.free_extent(off, s);
        }
    }

    fn carve(&mut self, s: u64) -> Result<u64> {
        if let Some(off) = self.carve_extent(s) {
            return Ok(off);
        }
        // Fragmentation: give the per-size lists back to the extent map (coalescing), retry.
        self.flush_small();
        self.carve_extent(s).ok_or(Error::RegionFull {
            requested: s,
            free: self.extent_bytes + self.small_bytes,
            capacity: self.end - self.start,
        })
    }

    fn carve_extent(&mut self, s: u64) -> Option<u64> {
        let align = align_for(s);
        let fits = |&(len, off): &(u64, u64)| {
            let aligned = off.div_ceil(align) * align;
            (aligned + s <= off + len).then_some((len, off, aligned))
        };
        // Best fit among the smallest candidates; else the smallest extent that fits whatever
        // its alignment (any extent of s + align - GRANULE bytes does).
        let (len, off, aligned) = self
            .by_len
            .range((s, 0)..)
            .take(4)
            .find_map(fits)
            .or_else(|| self.by_len.range((s + align - GRANULE, 0)..).find_map(fits))?;
        self.remove_extent(off, len);
        if aligned > off {
            self.insert_extent(off, aligned - off);
        }
        let tail = off + len - (aligned + s);
        if tail > 0 {
            self.insert_extent(aligned + s, tail);
        }
        Some(aligned)
    }

    fn flush_small(&mut self) {
        let lists = std::mem::take(&mut self.small);
        self.small = vec![Vec::new(); lists.len()];
        for (i, list) in lists.into_iter().enumerate() {
            let s = (i as u64 + 1) * GRANULE;
            for off in list {
                self.small_bytes -= s;
                self.free_extent(off, s);
            }
        }
    }

    fn insert_extent(&mut self, off: u64, len: u64) {
        self.by_off.insert(off, len);
        self.by_len.insert((len, off));
        self.extent_bytes += len;
    }

    fn remove_extent(&mut self, off: u64, len: u64) {
        self.by_off.remove(&off);
        self.by_len.remove(&(len, off));
        self.extent_bytes -= len;
    }

    fn free_extent(&mut self, mut off: u64, mut len: u64) {
        if let Some((&poff, &plen)) = self.by_off.range(..off).next_back() {
            if poff + plen == off {
                self.remove_extent(poff, plen);
                off = poff;
                len += plen;
            }
        }
        if let Some(&nlen) = self.by_off.get(&(off + len)) {
            self.remove_extent(off + len, nlen);
            len += nlen;
        }
        self.insert_extent(off, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::NonNull;

    fn arena(buf: &mut Vec<u128>) -> Arena {
        let len = buf.len() * 16;
        let base = NonNull::new(buf.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: the Vec outlives the arena in each test and nothing else touches it.
        let mem = unsafe { MemMut::from_raw(base, len) };
        Arena::new(mem, 64, len as u64)
    }

    #[test]
    fn alloc_free_reuse_and_alignment() {
        let mut buf = vec![0u128; 1 << 14];
        let mut a = arena(&mut buf);
        let x = a.alloc(100).unwrap();
        assert_eq!(x % 16, 0);
        let y = a.alloc(256).unwrap();
        assert_eq!(y % 64, 0);
        assert!(a.is_fresh(x));
        a.published(2);
        assert!(!a.is_fresh(x));
        let z = a.cow(y, 256).unwrap();
        assert_ne!(z, y);
        assert_eq!(a.stats().retired_bytes, 256);
        // A fresh block is changed in place.
        assert_eq!(a.cow(z, 256).unwrap(), z);
        a.published(3);
        assert_eq!(a.reclaim(Some(2)), 0, "reader still at epoch 2");
        assert_eq!(a.reclaim(Some(3)), 256);
        // Retiring a fresh block frees it at once and the space is reused.
        let w = a.alloc(48).unwrap();
        a.retire(w, 48);
        assert_eq!(a.alloc(48).unwrap(), w);
        // Rollback frees the batch's blocks and keeps what it retired.
        a.published(4);
        let before = a.stats();
        let _n = a.alloc(4096).unwrap();
        a.retire(z, 256);
        a.rollback();
        let after = a.stats();
        assert_eq!(
            (after.live_bytes, after.retired_bytes, after.free_bytes),
            (before.live_bytes, before.retired_bytes, before.free_bytes)
        );
        assert!(!a.is_fresh(z));
    }

    #[test]
    fn full_region_is_an_error_not_corruption() {
        let mut buf = vec![0u128; 256];
        let mut a = arena(&mut buf);
        let mut got = Vec::new();
        loop {
            match a.alloc(512) {
                Ok(o) => got.push(o),
                Err(Error::RegionFull { requested, .. }) => {
                    assert_eq!(requested, 512);
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(!got.is_empty());
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), got.len(), "no block handed out twice");
    }

    #[test]
    fn recover_retires_unreachable_space() {
        let mut buf = vec![0u128; 1 << 12];
        let len = buf.len() as u64 * 16;
        let base = NonNull::new(buf.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: the Vec outlives the arena.
        let mem = unsafe { MemMut::from_raw(base, len as usize) };
        let mut a = Arena::recover(mem, 64, len, 4096, vec![(1024, 128), (2048, 64)], 7).unwrap();
        assert_eq!(a.stats().live_bytes, 192);
        assert_eq!(a.stats().retired_bytes, 4096 - 64 - 192);
        // Nothing below the high-water mark is reused before readers pass epoch 7.
        let x = a.alloc(64).unwrap();
        assert!(x >= 4096);
        a.reclaim(Some(7));
        assert_eq!(a.stats().retired_bytes, 0);
    }
}
