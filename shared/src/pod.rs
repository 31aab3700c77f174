//! Plain old data: the only types that may live in shared memory.
//!
//! A region is written by one process and read by others that may run a different build of
//! lace. Everything stored there must therefore have a fixed layout (`#[repr(C)]`), contain no
//! pointers, references or niches, and accept every bit pattern. [`Pod`] is the promise of
//! exactly that; it is `unsafe` to implement because the reader side reinterprets raw bytes as
//! `Self`.

/// A type that may be stored in, and read back from, a shared-memory region.
///
/// # Safety
///
/// Implementors guarantee that the type
/// - is `#[repr(C)]` or `#[repr(transparent)]` (or a primitive integer/array of them),
/// - has no padding bytes that could leak uninitialised memory (pad explicitly with fields),
/// - contains no pointers, references, `bool`, `char`, enums or other types with invalid bit
///   patterns: every bit pattern of `size_of::<Self>()` bytes is a valid value,
/// - has an alignment of at most 16 bytes (the arena's allocation granule).
pub unsafe trait Pod: Copy + 'static {}

// SAFETY: primitive integers accept every bit pattern, have no padding and align ≤ 16.
unsafe impl Pod for u8 {}
// SAFETY: as above.
unsafe impl Pod for u16 {}
// SAFETY: as above.
unsafe impl Pod for u32 {}
// SAFETY: as above.
unsafe impl Pod for u64 {}
// SAFETY: as above.
unsafe impl Pod for u128 {}
// SAFETY: an array of Pod has the element's validity, no padding between elements.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

/// Compile-time layout assertion: `assert_layout!(Type, size, align)`.
#[macro_export]
macro_rules! assert_layout {
    ($t:ty, $size:expr, $align:expr) => {
        const _: () = assert!(::core::mem::size_of::<$t>() == $size, "size changed");
        const _: () = assert!(::core::mem::align_of::<$t>() == $align, "alignment changed");
    };
}
