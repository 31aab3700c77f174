//! Typed, bounds-checked access to a mapped region by offset.
//!
//! Tables in shared memory refer to each other by byte offsets from the region's start, never by
//! pointers, so the same bytes mean the same thing in every process. [`Mem`] turns an offset into
//! a reference after checking bounds and alignment: a bad offset yields `None` (the caller counts
//! a miss), never undefined behaviour.
//!
//! Soundness rests on the publication protocol (see `tables`): a block reachable from a published
//! root is never written again until every reader has passed a quiescent point after it became
//! unreachable, so shared references into it never observe a concurrent write. The writer's
//! mutable access ([`MemMut`]) is only used on blocks it allocated since the last publication.

use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::pod::Pod;

/// A read view of a mapped region.
#[derive(Clone, Copy, Debug)]
pub struct Mem<'a> {
    base: *const u8,
    len: usize,
    _life: PhantomData<&'a [u8]>,
}

// SAFETY: `Mem` is a shared view of memory that is only read through it; see the module docs.
unsafe impl Send for Mem<'_> {}
// SAFETY: as above.
unsafe impl Sync for Mem<'_> {}

impl<'a> Mem<'a> {
    /// Builds a view over `len` bytes at `base`.
    ///
    /// # Safety
    ///
    /// `base..base+len` must be mapped and readable for `'a`, and follow the publication
    /// protocol described in the module docs.
    pub unsafe fn from_raw(base: *const u8, len: usize) -> Mem<'a> {
        Mem {
            base,
            len,
            _life: PhantomData,
        }
    }

    /// Length of the view in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn check<T>(&self, off: u64, n: usize) -> Option<usize> {
        let off = usize::try_from(off).ok()?;
        let bytes = n.checked_mul(std::mem::size_of::<T>())?;
        let end = off.checked_add(bytes)?;
        (end <= self.len && off % std::mem::align_of::<T>() == 0).then_some(off)
    }

    /// The `T` at byte offset `off`, if it lies inside the region and is aligned.
    #[inline(always)]
    pub fn get<T: Pod>(&self, off: u64) -> Option<&'a T> {
        let off = self.check::<T>(off, 1)?;
        // SAFETY: in bounds and aligned (checked); T is Pod so every bit pattern is valid; the
        // memory is not written while reachable (module docs).
        Some(unsafe { &*self.base.add(off).cast::<T>() })
    }

    /// A copy of the `T` at byte offset `off`, if it lies inside the region. No alignment is
    /// required: this is the cheapest checked access (one comparison), for lookup hot paths.
    #[inline(always)]
    pub fn read<T: Pod>(&self, off: u64) -> Option<T> {
        let end = (off as usize).checked_add(std::mem::size_of::<T>())?;
        if end > self.len {
            return None;
        }
        // SAFETY: `off..end` is inside the mapping (checked); T is Pod so every bit pattern is
        // valid, and read_unaligned has no alignment requirement; the memory is not written
        // while reachable (module docs).
        Some(unsafe { self.base.add(off as usize).cast::<T>().read_unaligned() })
    }

    /// `n` consecutive `T`s starting at byte offset `off`.
    #[inline(always)]
    pub fn slice<T: Pod>(&self, off: u64, n: usize) -> Option<&'a [T]> {
        let off = self.check::<T>(off, n)?;
        // SAFETY: as in `get`, for n elements.
        Some(unsafe { std::slice::from_raw_parts(self.base.add(off).cast::<T>(), n) })
    }

    /// Hints the CPU to fetch the cache line at `off` (whatever `off`: a prefetch is only a
    /// hint and never faults).
    #[inline(always)]
    pub fn prefetch(&self, off: u64) {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        // SAFETY: a prefetch reads nothing the program sees and never faults, whatever the
        // address; `wrapping_add` computes it without claiming it is in bounds.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                self.base.wrapping_add(off as usize).cast::<i8>(),
            )
        };
        #[cfg(any(not(target_arch = "x86_64"), miri))]
        let _ = off;
    }

    /// The 64-bit atomic at `off` (for root pointers and counters).
    #[inline(always)]
    pub fn atomic_u64(&self, off: u64) -> Option<&'a std::sync::atomic::AtomicU64> {
        let off = self.check::<u64>(off, 1)?;
        // SAFETY: in bounds and 8-aligned; AtomicU64 has u64's layout; atomic loads of ≤ 8
        // bytes are permitted on read-only memory (std::sync::atomic docs).
        Some(unsafe { &*self.base.add(off).cast::<std::sync::atomic::AtomicU64>() })
    }
}

/// The writer's mutable view of a region. Obtained only from a read-write [`crate::region::Region`].
#[derive(Debug)]
pub struct MemMut {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: `MemMut` is owned by the single writer; moving it between threads is fine.
unsafe impl Send for MemMut {}

impl MemMut {
    /// # Safety
    ///
    /// `base..base+len` must be a live read-write mapping that outlives this value, and this
    /// must be the only `MemMut` for it.
    pub(crate) unsafe fn from_raw(base: NonNull<u8>, len: usize) -> MemMut {
        MemMut { base, len }
    }

    /// Read view.
    #[inline]
    pub fn mem(&self) -> Mem<'_> {
        // SAFETY: live mapping for the borrow's duration.
        unsafe { Mem::from_raw(self.base.as_ptr(), self.len) }
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn check<T>(&self, off: u64, n: usize) -> usize {
        let o = usize::try_from(off).expect("offset fits usize");
        let end = n
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|b| o.checked_add(b))
            .expect("block size overflow");
        assert!(
            end <= self.len && o % std::mem::align_of::<T>() == 0,
            "writer access outside the region or misaligned: offset {off} count {n}"
        );
        o
    }

    /// Mutable `T` at `off`. Only for blocks not yet published (the writer's invariant).
    #[inline]
    pub fn get_mut<T: Pod>(&mut self, off: u64) -> &mut T {
        let o = self.check::<T>(off, 1);
        // SAFETY: bounds and alignment checked; exclusive access through `&mut self`; T is Pod.
        unsafe { &mut *self.base.as_ptr().add(o).cast::<T>() }
    }

    /// Mutable slice of `n` `T`s at `off`. Only for blocks not yet published.
    #[inline]
    pub fn slice_mut<T: Pod>(&mut self, off: u64, n: usize) -> &mut [T] {
        let o = self.check::<T>(off, n);
        // SAFETY: bounds and alignment checked; exclusive access through `&mut self`; T is Pod.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(o).cast::<T>(), n) }
    }

    /// Copies `len` bytes from `src` to `dst` (non-overlapping blocks).
    pub fn copy(&mut self, src: u64, dst: u64, len: usize) {
        let s = self.check::<u8>(src, len);
        let d = self.check::<u8>(dst, len);
        assert!(s + len <= d || d + len <= s, "overlapping block copy");
        // SAFETY: both ranges are inside the mapping (checked) and do not overlap (checked).
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.as_ptr().add(s), self.base.as_ptr().add(d), len)
        };
    }

    /// Fills `len` bytes at `off` with zero.
    pub fn zero(&mut self, off: u64, len: usize) {
        let o = self.check::<u8>(off, len);
        // SAFETY: the range is inside the mapping (checked).
        unsafe { std::ptr::write_bytes(self.base.as_ptr().add(o), 0, len) };
    }
}
