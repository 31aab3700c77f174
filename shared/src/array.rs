//! Dense tables indexed by a small integer (ports, nodes, next hops, networks) in shared memory.
//!
//! ```text
//!  ArrayHdr (inline in parent)      directory block [u64; pages]     pages (4 KiB blocks)
//!  ┌───────────────────────┐       ┌────────────────┐               ┌────────────────────┐
//!  │ dir ──────────────────┼──────▶│ page 0 off ────┼──────────────▶│ T[0] T[1] … T[E-1] │
//!  │ pages (power of two)  │       │ 0 (absent)     │               └────────────────────┘
//!  │ len (highest idx + 1) │       │ page 2 off ────┼──────────────▶ T[2E] …
//!  └───────────────────────┘       └────────────────┘          E = 4096 / size_of::<T>()
//! ```
//!
//! Element `idx` lives in page `idx / E` at slot `idx % E`. **An all-zero element is an absent
//! one**: [`PagedArray::get`] returns `None` for it, [`PagedArray::set`] with an all-zero value
//! is [`PagedArray::remove`], and [`PagedArray::iter`] skips it. A page whose elements are all
//! zero is freed (its directory entry reads 0). Give entry types a non-zero field (a flags word
//! with a "valid" bit) if a legitimate entry could otherwise be all zero.
//!
//! Guarantees, as for every table in the region: readers never panic, allocate or lock; the
//! writer never changes a block readers can reach (a change copies one page and the directory,
//! once per batch); a failed change leaves the header and the table as they were.
//!
//! Limits: indices below [`PagedArray::MAX_LEN`] (2^24); `len` never shrinks, except by
//! [`PagedArray::free`].

use std::fmt;
use std::marker::PhantomData;
use std::mem::size_of;

use crate::arena::{Arena, GRANULE};
use crate::error::{Error, Result};
use crate::mem::Mem;
use crate::pod::Pod;

/// Bytes of a page.
const PAGE: usize = 4096;

/// Header of a paged array, stored inline in its parent. All-zero is the empty array.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArrayHdr {
    /// Offset of the directory block, `[u64; pages]` of page offsets (0: absent page).
    pub dir: u64,
    /// Entries of the directory (a power of two, or 0 for the empty array).
    pub pages: u32,
    /// One more than the highest index ever set.
    pub len: u32,
}

// SAFETY: repr(C) of one u64 and two u32: no padding (16 bytes, checked below), no pointers,
// every bit pattern valid (readers treat bad offsets as absent), alignment 8.
unsafe impl Pod for ArrayHdr {}
crate::assert_layout!(ArrayHdr, 16, 8);

/// Whether every byte of `mem[off..off + len]` is zero (false if out of bounds).
#[inline(always)]
fn all_zero(mem: Mem<'_>, off: u64, len: usize) -> bool {
    if len % 8 == 0 && off % 8 == 0 {
        mem.slice::<u64>(off, len / 8)
            .is_some_and(|w| w.iter().all(|&x| x == 0))
    } else {
        mem.slice::<u8>(off, len)
            .is_some_and(|b| b.iter().all(|&x| x == 0))
    }
}

/// Whether every byte of `v` is zero (an absent element).
#[inline(always)]
fn is_zero<T: Pod>(v: &T) -> bool {
    // SAFETY: `v` is a live reference to `size_of::<T>()` bytes, and a Pod type has no padding
    // (its contract), so every one of them is initialised.
    let bytes = unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) };
    bytes.iter().all(|&b| b == 0)
}

/// A dense table of `T` indexed by `u32`; all functions are associated (the table's state is
/// its [`ArrayHdr`] and the blocks it points to). See the module docs.
pub struct PagedArray<T>(PhantomData<fn() -> T>);

impl<T> fmt::Debug for PagedArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PagedArray")
    }
}

impl<T: Pod> PagedArray<T> {
    /// Elements per page.
    pub const PER_PAGE: usize = PAGE / size_of::<T>();
    /// Indices must be below this.
    pub const MAX_LEN: u32 = 1 << 24;
    const SIZE: usize = size_of::<T>();
    const LAYOUT_OK: () = assert!(
        size_of::<T>() >= 1 && size_of::<T>() <= PAGE,
        "paged array: elements must be 1 to 4096 bytes"
    );

    // ---------------------------------------------------------------------------------------
    // Reader side: no panics, no allocation.

    #[inline(always)]
    fn element_at(mem: Mem<'_>, hdr: &ArrayHdr, idx: u32) -> Option<u64> {
        let () = Self::LAYOUT_OK;
        if idx >= hdr.len || hdr.dir == 0 {
            return None;
        }
        let i = idx as usize;
        let page = i / Self::PER_PAGE;
        if page >= hdr.pages as usize {
            return None;
        }
        let p = *mem.get::<u64>(hdr.dir.wrapping_add(page as u64 * 8))?;
        if p == 0 {
            return None;
        }
        Some(p.wrapping_add(((i % Self::PER_PAGE) * Self::SIZE) as u64))
    }

    /// Element `idx`: `None` beyond `len`, in an absent page, or all zero.
    #[inline]
    pub fn get<'a>(mem: Mem<'a>, hdr: &ArrayHdr, idx: u32) -> Option<&'a T> {
        let at = Self::element_at(mem, hdr, idx)?;
        mem.get::<T>(at).filter(|v| !is_zero(*v))
    }

    /// Prefetches the cache line of element `idx` (reads the directory entry to find it).
    #[inline]
    pub fn prefetch(mem: Mem<'_>, hdr: &ArrayHdr, idx: u32) {
        if let Some(at) = Self::element_at(mem, hdr, idx) {
            mem.prefetch(at);
        }
    }

    /// One more than the highest index ever set.
    #[inline]
    pub fn len(hdr: &ArrayHdr) -> u32 {
        hdr.len
    }

    /// Whether no index was ever set.
    #[inline]
    pub fn is_empty(hdr: &ArrayHdr) -> bool {
        hdr.len == 0
    }

    /// Every present (non-zero) element with its index, in index order. A page that does not
    /// lie inside the region (a damaged table) yields nothing.
    pub fn iter<'a>(mem: Mem<'a>, hdr: &ArrayHdr) -> impl Iterator<Item = (u32, &'a T)> + 'a {
        let h = *hdr;
        let dir: &'a [u64] = if h.dir == 0 {
            &[]
        } else {
            mem.slice::<u64>(h.dir, h.pages as usize).unwrap_or(&[])
        };
        dir.iter()
            .enumerate()
            .filter(|(_, &p)| p != 0)
            .flat_map(move |(page, &p)| {
                let first = page * Self::PER_PAGE;
                let n = Self::PER_PAGE.min((h.len as usize).saturating_sub(first));
                // One bounds check per page, not two per element.
                let page: &'a [T] = mem.slice::<T>(p, n).unwrap_or(&[]);
                page.iter()
                    .enumerate()
                    .filter(|(_, v)| !is_zero(*v))
                    .map(move |(slot, v)| ((first + slot) as u32, v))
            })
    }

    /// Appends every block of the array (directory and pages), with its allocated size, to
    /// `out` (to rebuild the allocator after a writer restart).
    pub fn trace(mem: Mem<'_>, hdr: &ArrayHdr, out: &mut Vec<(u64, u64)>) {
        if hdr.dir == 0 {
            return;
        }
        out.push((hdr.dir, Self::dir_bytes(hdr.pages) as u64));
        if let Some(dir) = mem.slice::<u64>(hdr.dir, hdr.pages as usize) {
            out.extend(dir.iter().filter(|&&p| p != 0).map(|&p| (p, PAGE as u64)));
        }
    }

    // ---------------------------------------------------------------------------------------
    // Writer side.

    /// Bytes of a directory of `pages` entries: at least one allocation granule, so that the
    /// sizes `trace` reports add up to the arena's live bytes.
    fn dir_bytes(pages: u32) -> usize {
        (pages as usize * 8).max(GRANULE as usize)
    }

    fn corrupt() -> Error {
        Error::Invalid {
            what: "paged array: the directory lies outside the table region; the region is \
                   corrupt, remove it so control recreates it"
                .into(),
        }
    }

    fn page_off(mem: Mem<'_>, hdr: &ArrayHdr, page: usize) -> Result<u64> {
        if hdr.dir == 0 || page >= hdr.pages as usize {
            return Ok(0);
        }
        mem.get::<u64>(hdr.dir + page as u64 * 8)
            .copied()
            .ok_or_else(Self::corrupt)
    }

    /// A directory that may be changed in place with at least `pages` entries: the current one
    /// if fresh and large enough, else a copy. Returns (offset, entries); the old directory is
    /// the caller's to retire once nothing can fail any more.
    fn writable_dir(arena: &mut Arena, hdr: &ArrayHdr, pages: usize) -> Result<(u64, u32)> {
        let have = hdr.pages as usize;
        if hdr.dir != 0 && pages <= have && arena.is_fresh(hdr.dir) {
            return Ok((hdr.dir, hdr.pages));
        }
        let n = pages.max(have).next_power_of_two();
        let dir = arena.alloc(Self::dir_bytes(n as u32))?;
        if hdr.dir != 0 {
            arena.mem_mut().copy(hdr.dir, dir, have * 8);
        }
        Ok((dir, n as u32))
    }

    /// Installs `dir`/`pages` in `hdr`, retiring the old directory if it was replaced.
    fn commit_dir(arena: &mut Arena, hdr: &mut ArrayHdr, dir: u64, pages: u32) {
        if dir != hdr.dir {
            if hdr.dir != 0 {
                arena.retire(hdr.dir, Self::dir_bytes(hdr.pages));
            }
            hdr.dir = dir;
            hdr.pages = pages;
        }
    }

    /// Sets element `idx`. Setting an all-zero
    /// value removes the element (prefer [`remove`](Self::remove): this may copy the page
    /// first). On error (`TableFull` for `idx >= MAX_LEN`, `RegionFull`) nothing has changed.
    pub fn set(arena: &mut Arena, hdr: &mut ArrayHdr, idx: u32, value: T) -> Result<()> {
        let () = Self::LAYOUT_OK;
        if idx >= Self::MAX_LEN {
            return Err(Error::TableFull {
                table: "paged array",
                capacity: u64::from(Self::MAX_LEN),
            });
        }
        let i = idx as usize;
        let (page, slot) = (i / Self::PER_PAGE, i % Self::PER_PAGE);
        let within = (slot * Self::SIZE) as u64;
        let old_page = Self::page_off(arena.mem(), hdr, page)?;
        if old_page != 0 && arena.is_fresh(old_page) {
            // Not visible to readers yet: change in place.
            *arena.mem_mut().get_mut::<T>(old_page + within) = value;
            if !all_zero(arena.mem(), old_page + within, Self::SIZE) {
                hdr.len = hdr.len.max(idx + 1);
            } else if all_zero(arena.mem(), old_page, PAGE) && arena.is_fresh(hdr.dir) {
                // The page emptied; its directory is fresh too (it took the fresh page in
                // this batch), so dropping it cannot fail.
                arena
                    .mem_mut()
                    .slice_mut::<u64>(hdr.dir, hdr.pages as usize)[page] = 0;
                arena.retire(old_page, PAGE);
            }
            return Ok(());
        }
        // A new page (zeroed, or a copy of the published one), then the directory.
        let new_page = if old_page == 0 {
            arena.alloc(PAGE)?
        } else {
            arena.alloc_copy(old_page, PAGE)?
        };
        *arena.mem_mut().get_mut::<T>(new_page + within) = value;
        let zero = all_zero(arena.mem(), new_page + within, Self::SIZE);
        if zero && old_page == 0 {
            arena.retire(new_page, PAGE);
            return Ok(());
        }
        let emptied = zero && all_zero(arena.mem(), new_page, PAGE);
        let (dir, pages) = match Self::writable_dir(arena, hdr, page + 1) {
            Ok(d) => d,
            Err(e) => {
                arena.retire(new_page, PAGE);
                return Err(e);
            }
        };
        // Nothing can fail from here on.
        let entry = if emptied { 0 } else { new_page };
        arena.mem_mut().slice_mut::<u64>(dir, pages as usize)[page] = entry;
        if emptied {
            arena.retire(new_page, PAGE);
        }
        if old_page != 0 {
            arena.retire(old_page, PAGE);
        }
        Self::commit_dir(arena, hdr, dir, pages);
        if !zero {
            hdr.len = hdr.len.max(idx + 1);
        }
        Ok(())
    }

    /// Removes element `idx` (writes zeroes; frees its page if no element is left in it).
    /// Removing an absent element does nothing. On error (`RegionFull`) nothing has changed.
    pub fn remove(arena: &mut Arena, hdr: &mut ArrayHdr, idx: u32) -> Result<()> {
        if idx >= hdr.len {
            return Ok(());
        }
        let i = idx as usize;
        let (page, slot) = (i / Self::PER_PAGE, i % Self::PER_PAGE);
        let mem = arena.mem();
        let old_page = Self::page_off(mem, hdr, page)?;
        if old_page == 0 || all_zero(mem, old_page + (slot * Self::SIZE) as u64, Self::SIZE) {
            return Ok(());
        }
        let before = (slot * Self::SIZE) as u64;
        let after = ((slot + 1) * Self::SIZE) as u64;
        let last = all_zero(mem, old_page, before as usize)
            && all_zero(mem, old_page + after, PAGE - after as usize);
        if last {
            // The page empties: drop it from the directory instead of copying it.
            let (dir, pages) = Self::writable_dir(arena, hdr, page + 1)?;
            arena.mem_mut().slice_mut::<u64>(dir, pages as usize)[page] = 0;
            arena.retire(old_page, PAGE);
            Self::commit_dir(arena, hdr, dir, pages);
            return Ok(());
        }
        let new_page = if arena.is_fresh(old_page) {
            old_page
        } else {
            let (dir, pages) = Self::writable_dir(arena, hdr, page + 1)?;
            let copy = match arena.alloc_copy(old_page, PAGE) {
                Ok(c) => c,
                Err(e) => {
                    if dir != hdr.dir {
                        arena.retire(dir, Self::dir_bytes(pages));
                    }
                    return Err(e);
                }
            };
            arena.mem_mut().slice_mut::<u64>(dir, pages as usize)[page] = copy;
            arena.retire(old_page, PAGE);
            Self::commit_dir(arena, hdr, dir, pages);
            copy
        };
        arena
            .mem_mut()
            .zero(new_page + (slot * Self::SIZE) as u64, Self::SIZE);
        Ok(())
    }

    /// Releases every block (after a grace period where published) and resets the header to
    /// empty.
    pub fn free(arena: &mut Arena, hdr: &mut ArrayHdr) {
        let mut blocks = Vec::new();
        Self::trace(arena.mem(), hdr, &mut blocks);
        for (off, size) in blocks {
            arena.retire(off, size as usize);
        }
        *hdr = ArrayHdr::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::MemMut;
    use std::ptr::NonNull;

    #[repr(C, align(4096))]
    #[derive(Clone, Copy)]
    struct Page([u8; 4096]);

    /// An arena over a heap buffer; the buffer must outlive the arena.
    fn arena(buf: &mut [Page]) -> Arena {
        let len = std::mem::size_of_val(buf);
        let base = NonNull::new(buf.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: the buffer outlives the arena in each test, and nothing else accesses it.
        let mem = unsafe { MemMut::from_raw(base, len) };
        Arena::new(mem, 4096, len as u64)
    }

    fn traced(a: &Arena, hdr: &ArrayHdr) -> u64 {
        let mut blocks = Vec::new();
        PagedArray::<u64>::trace(a.mem(), hdr, &mut blocks);
        let mut offs: Vec<u64> = blocks.iter().map(|b| b.0).collect();
        offs.sort_unstable();
        offs.dedup();
        assert_eq!(offs.len(), blocks.len(), "a block traced twice");
        blocks.iter().map(|b| b.1).sum()
    }

    type A = PagedArray<u64>;

    /// Live, retired and free bytes (the high-water mark may move on a failed attempt).
    fn usage(a: &Arena) -> (u64, u64, u64) {
        let s = a.stats();
        (s.live_bytes, s.retired_bytes, s.free_bytes)
    }

    #[test]
    fn set_get_remove() {
        let mut buf = vec![Page([0; 4096]); 64];
        let mut a = arena(&mut buf);
        let mut h = ArrayHdr::default();
        assert_eq!(A::get(a.mem(), &h, 0), None);
        A::set(&mut a, &mut h, 3, 30).unwrap();
        A::set(&mut a, &mut h, 5000, 50).unwrap();
        assert_eq!(A::len(&h), 5001);
        assert_eq!(h.pages, 16, "directory grows by powers of two");
        assert_eq!(A::get(a.mem(), &h, 3), Some(&30));
        assert_eq!(A::get(a.mem(), &h, 4), None, "zero element");
        assert_eq!(A::get(a.mem(), &h, 1000), None, "absent page");
        assert_eq!(A::get(a.mem(), &h, 5001), None, "beyond len");
        assert_eq!(A::get(a.mem(), &h, u32::MAX), None);
        assert_eq!(
            A::iter(a.mem(), &h)
                .map(|(i, v)| (i, *v))
                .collect::<Vec<_>>(),
            vec![(3, 30), (5000, 50)]
        );
        assert_eq!(traced(&a, &h), a.stats().live_bytes);
        assert_eq!(a.stats().live_bytes, 16 * 8 + 2 * 4096);
        // Removing the last element of a page frees it.
        A::remove(&mut a, &mut h, 5000).unwrap();
        assert_eq!(A::get(a.mem(), &h, 5000), None);
        assert_eq!(a.stats().live_bytes, 16 * 8 + 4096);
        // Setting zero is removing.
        A::set(&mut a, &mut h, 3, 0).unwrap();
        assert_eq!(a.stats().live_bytes, 16 * 8);
        A::set(&mut a, &mut h, 7000, 0).unwrap();
        assert_eq!(
            a.stats().live_bytes,
            16 * 8,
            "zero into an absent page: no-op"
        );
        assert!(matches!(
            A::set(&mut a, &mut h, A::MAX_LEN, 1),
            Err(Error::TableFull { .. })
        ));
        A::free(&mut a, &mut h);
        assert_eq!(h, ArrayHdr::default());
        assert_eq!(a.stats().live_bytes, 0);
    }

    #[test]
    fn batch_copies_each_page_once_and_snapshots_hold() {
        let mut buf = vec![Page([0; 4096]); 64];
        let mut a = arena(&mut buf);
        let mut h = ArrayHdr::default();
        for i in 0..2048u32 {
            A::set(&mut a, &mut h, i, u64::from(i) + 1).unwrap();
        }
        a.published(2);
        let old = h;
        let live = a.stats().live_bytes;
        for i in 0..2048u32 {
            A::set(&mut a, &mut h, i, u64::from(i) + 2).unwrap();
        }
        assert_eq!(a.stats().live_bytes, live, "copies replace originals");
        assert_eq!(
            a.stats().retired_bytes,
            4 * 4096 + u64::from(old.pages) * 8,
            "each page and the directory copied once"
        );
        for i in 0..2048u32 {
            assert_eq!(A::get(a.mem(), &old, i), Some(&(u64::from(i) + 1)));
            assert_eq!(A::get(a.mem(), &h, i), Some(&(u64::from(i) + 2)));
        }
        assert_eq!(traced(&a, &h), a.stats().live_bytes);
    }

    #[test]
    fn region_full_changes_nothing() {
        let mut buf = vec![Page([0; 4096]); 6];
        let mut a = arena(&mut buf);
        let mut h = ArrayHdr::default();
        let mut i = 0u32;
        let err = loop {
            let before = (h, usage(&a));
            match A::set(&mut a, &mut h, i * 512, 1) {
                Ok(()) => i += 1,
                Err(e) => {
                    assert_eq!((h, usage(&a)), before);
                    break e;
                }
            }
        };
        assert!(matches!(err, Error::RegionFull { .. }), "{err}");
        a.published(2);
        // Copying a published page for a change fails too, and changes nothing.
        let before = (h, usage(&a));
        assert!(A::set(&mut a, &mut h, 0, 2).is_err());
        assert_eq!((h, usage(&a)), before);
        assert_eq!(A::get(a.mem(), &h, 0), Some(&1));
        // Removing the only element of a page needs no page copy (only, here, a directory copy,
        // which may fail); either way the trace stays exact.
        A::remove(&mut a, &mut h, 0).unwrap_or(());
        assert_eq!(traced(&a, &h), a.stats().live_bytes);
    }

    #[test]
    fn garbage_header_reads_as_absent() {
        let mut buf = vec![Page([0; 4096]); 4];
        let a = arena(&mut buf);
        for h in [
            ArrayHdr {
                dir: u64::MAX - 2,
                pages: u32::MAX,
                len: u32::MAX,
            },
            ArrayHdr {
                dir: 8,
                pages: 1,
                len: 10,
            },
            ArrayHdr {
                dir: 4 * 4096 - 8,
                pages: 4,
                len: u32::MAX,
            },
        ] {
            for i in [0, 1, 511, 512, 2047, u32::MAX] {
                assert_eq!(A::get(a.mem(), &h, i), None);
                A::prefetch(a.mem(), &h, i);
            }
            assert_eq!(A::iter(a.mem(), &h).count(), 0);
        }
    }

    #[test]
    fn odd_element_sizes() {
        let mut buf = vec![Page([0; 4096]); 16];
        let mut a = arena(&mut buf);
        let mut h = ArrayHdr::default();
        type B = PagedArray<[u8; 24]>;
        assert_eq!(B::PER_PAGE, 170);
        for i in (0..1000u32).step_by(7) {
            B::set(&mut a, &mut h, i, [i as u8 | 1; 24]).unwrap();
        }
        for i in 0..1000u32 {
            let want = (i % 7 == 0).then_some([i as u8 | 1; 24]);
            assert_eq!(B::get(a.mem(), &h, i).copied(), want);
        }
        assert_eq!(B::iter(a.mem(), &h).count(), 143);
    }
}
