//! Longest-prefix-match FIBs for IPv4 and IPv6, in shared memory (ADR 0011, after ADR 0002).
//!
//! A direct-pointing top level in front of Poptrie-style subtrees (Asai & Ohara, SIGCOMM 2015):
//!
//! ```text
//!  FibHdr (inline in the network entry)
//!    │ dir ──► chunk directory [u64; 2^(TOP-6)]   one word per 64 top slots:
//!    │           │                                 UNIFORM|nh = every slot nh, no subtree,
//!    │           ▼                                 else the offset of a chunk block
//!    │         chunk block  [u32; 64] top entries, ChunkTail ──► the short routes that start
//!    │           │                                                   in the chunk
//!    │           │  top entry: next hop (the slot's best route, all of length <= TOP)
//!    │           │             or SUBTREE|flags|offset/64
//!    │           ▼
//!    │         subtree block  [Skip] root Node (its base0: the slot default), its leaves,
//!    │                        SubHdr, other Nodes, their leaves, Singles, route records
//!    │                        Node = { vector, leafvec: u64, base0, base1: u32 } — six key bits
//!    │                        per level; children and leaf runs found by popcount
//!    │ wide ──► the routes that cover whole chunks (len <= TOP-6)
//! ```
//!
//! The first `TOP` bits of the key (18 for IPv4, 16 for IPv6; 12 for both under miri) index the top level directly:
//! one directory word (32 KiB for IPv4) and one 4-byte top entry (1 MiB for a full IPv4 table:
//! both stay in L2 while lookups stream through the subtrees). Chunks are small (64 slots, 272
//! bytes) because a batch copies every chunk it touches: 1,000 random BGP routes touch about
//! 1,000 chunks. A slot without
//! longer routes holds its next hop; otherwise it points to a subtree built from the slot's long
//! routes alone, with leaf compression (equal neighbouring leaves stored once). The subtree's
//! root node carries the slot default (its best short route) in place of its leaf offset (the
//! root's leaves always follow it), so a walk that finds no longer route answers from the line
//! it already read, and a short-route change rewrites one word per covered subtree instead of
//! rebuilding it. The root node and its first leaves share a cache line: the typical IPv4
//! lookup (a /19../24 under its /18) reads one top entry and one line of the table. A subtree
//! whose routes share bits beyond `TOP` starts below them (a root skip) when that saves a
//! level, which keeps pod networks (host routes under a /24, IPv6 routes under a /64) shallow.
//!
//! Every block carries the routes it was built from, so the table is self-describing: a
//! restarted writer rebuilds its bookkeeping from the region alone ([`FibWriter::recover`]).
//!
//! Updates are copy-on-write (see [`crate::arena`]): a long-route change rebuilds its slot's
//! subtree, a short-route change rewrites the defaults of the slots it covers; the touched
//! chunks and the directory are copied once per batch, and the new [`FibHdr`] is published
//! with the rest of the batch. Readers see either the old or the new table, never a mix.
//! [`FibWriter::apply`] groups a batch by slot and chunk, so each touched subtree is built
//! once per batch.
//!
//! Lookups return a next-hop index (`u32`, 0 = no route); what it means is the caller's
//! (see [`crate::types::NextHop`]). Lookups never panic: every access is bounds-checked and a
//! malformed offset reads as no route.

mod build;
mod lookup;
mod writer;

#[cfg(test)]
mod tests;

pub use lookup::Fib;
pub use writer::FibWriter;

use crate::mem::Mem;
use crate::pod::Pod;

/// Top-entry flag: the low bits are a subtree reference, not a next hop.
const SUBTREE: u32 = 1 << 31;
/// Subtree flag: the subtree starts with a [`Skip`].
const SKIPPED: u32 = 1 << 30;
/// Subtree flag: the root node's leaves reach into the block's second cache line (bulk
/// lookups prefetch both).
const ROOT2: u32 = 1 << 29;
/// Subtree flag: the leaves are 16 bits wide (every next hop of the subtree fits), so twenty
/// of them share the root node's cache line.
const LEAF16: u32 = 1 << 28;
/// Subtree-reference bits holding the block offset in 64-byte units.
const SUB_OFFSET: u32 = LEAF16 - 1;
/// Directory-word flag: the whole chunk maps to the next hop in the low 32 bits.
const UNIFORM: u64 = 1 << 63;
/// Top slots per chunk (log2).
const CHUNK_BITS: u32 = 6;
const CHUNK_SLOTS: usize = 1 << CHUNK_BITS;
/// Bytes of a chunk's top entries.
const CHUNK_ENTRIES_BYTES: u64 = (CHUNK_SLOTS * 4) as u64;
/// Subtree blocks are cache-line aligned: the root node and its first leaves share a line.
const SUB_ALIGN: u64 = 64;
/// Size of a [`Node`] in bytes.
const NODE: u64 = std::mem::size_of::<Node>() as u64;

/// Everything about the FIB's shared layout, for [`crate::LAYOUT_HASH`].
pub(crate) const LAYOUT: [usize; 16] = [
    std::mem::size_of::<FibHdr>(),
    std::mem::size_of::<Node>(),
    std::mem::offset_of!(Node, base0),
    std::mem::size_of::<SubHdr>(),
    std::mem::size_of::<Skip>(),
    std::mem::size_of::<Single>(),
    std::mem::size_of::<Rec4>(),
    std::mem::size_of::<Rec6>(),
    std::mem::size_of::<ChunkTail>(),
    CHUNK_BITS as usize,
    <u32 as LpmKey>::TOP as usize,
    <u128 as LpmKey>::TOP as usize,
    SUBTREE as usize | SKIPPED as usize | ROOT2 as usize | LEAF16 as usize,
    UNIFORM as usize,
    SUB_ALIGN as usize,
    // Layout generation: 2 = slot defaults in the subtree roots, 3 = 64-slot chunks with their
    // short routes apart, route records inside the subtree block (ADR 0011).
    3,
];

/// Largest next-hop index a FIB can hold (the top bit tags subtrees).
pub const MAX_NEXT_HOP: u32 = SUBTREE - 1;

/// A key family: IPv4 (`u32`) or IPv6 (`u128`), both in host order.
pub trait LpmKey:
    Copy + Eq + Ord + std::hash::Hash + std::fmt::Debug + Send + Sync + 'static
{
    /// Key width in bits.
    const BITS: u32;
    /// Bits resolved by the directly indexed top level.
    const TOP: u32;
    /// Route record as stored in shared memory.
    type Rec: Pod + std::fmt::Debug;
    /// Name used in messages ("IPv4").
    const NAME: &'static str;

    /// The key, left-aligned in 128 bits.
    fn wide(self) -> u128;
    /// Back from [`LpmKey::wide`].
    fn from_wide(w: u128) -> Self;
    /// Top-level index (the first `TOP` bits).
    fn top(self) -> u32;
    /// Six bits starting at bit `off` from the most significant bit (zeros past the end, and
    /// for any `off`, however large).
    fn bits6(self, off: u32) -> u32;
    /// Whether the first `len` bits of `self` and `other` are equal (all bits for `len >=
    /// BITS`), in the key's own width.
    fn same_prefix(self, other: Self, len: u32) -> bool;
    /// Encodes a route record.
    fn rec(prefix: Self, len: u8, nh: u32) -> Self::Rec;
    /// Decodes a route record.
    fn unrec(r: &Self::Rec) -> (Self, u8, u32);
}

/// IPv4 route record.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Rec4 {
    prefix: u32,
    nh: u32,
    len: u8,
    _pad: [u8; 3],
}
// SAFETY: repr(C), integer fields, explicit padding, every bit pattern valid.
unsafe impl Pod for Rec4 {}
crate::assert_layout!(Rec4, 12, 4);

/// IPv6 route record.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Rec6 {
    prefix: [u64; 2],
    nh: u32,
    len: u8,
    _pad: [u8; 3],
}
// SAFETY: repr(C), integer fields, explicit padding, every bit pattern valid.
unsafe impl Pod for Rec6 {}
crate::assert_layout!(Rec6, 24, 8);

impl LpmKey for u32 {
    const BITS: u32 = 32;
    // Under miri the top level is 2^12 entries, not 2^18: every code path is the same (the
    // chunk directory, wide routes, subtrees below the top), and the shared crate's tests run
    // in minutes instead of the quarter hour a megabyte top level costs an interpreter.
    const TOP: u32 = if cfg!(miri) { 12 } else { 18 };
    type Rec = Rec4;
    const NAME: &'static str = "IPv4";
    #[inline(always)]
    fn wide(self) -> u128 {
        (self as u128) << 96
    }
    #[inline(always)]
    fn from_wide(w: u128) -> Self {
        (w >> 96) as u32
    }
    #[inline(always)]
    fn top(self) -> u32 {
        self >> (32 - Self::TOP)
    }
    #[inline(always)]
    fn bits6(self, off: u32) -> u32 {
        (((self as u64) << 32).checked_shl(off).unwrap_or(0) >> 58) as u32
    }
    #[inline(always)]
    fn same_prefix(self, other: Self, len: u32) -> bool {
        ((self ^ other) as u64) >> (32 - len.min(32)) == 0
    }
    fn rec(prefix: Self, len: u8, nh: u32) -> Rec4 {
        Rec4 {
            prefix,
            nh,
            len,
            _pad: [0; 3],
        }
    }
    fn unrec(r: &Rec4) -> (Self, u8, u32) {
        (r.prefix, r.len, r.nh)
    }
}

impl LpmKey for u128 {
    const BITS: u32 = 128;
    // Smaller under miri, as for IPv4.
    const TOP: u32 = if cfg!(miri) { 12 } else { 16 };
    type Rec = Rec6;
    const NAME: &'static str = "IPv6";
    #[inline(always)]
    fn wide(self) -> u128 {
        self
    }
    #[inline(always)]
    fn from_wide(w: u128) -> Self {
        w
    }
    #[inline(always)]
    fn top(self) -> u32 {
        (self >> (128 - Self::TOP)) as u32
    }
    #[inline(always)]
    fn bits6(self, off: u32) -> u32 {
        (self.checked_shl(off).unwrap_or(0) >> 122) as u32
    }
    #[inline(always)]
    fn same_prefix(self, other: Self, len: u32) -> bool {
        (self ^ other).checked_shr(128 - len.min(128)).unwrap_or(0) == 0
    }
    fn rec(prefix: Self, len: u8, nh: u32) -> Rec6 {
        Rec6 {
            prefix: [(prefix >> 64) as u64, prefix as u64],
            nh,
            len,
            _pad: [0; 3],
        }
    }
    fn unrec(r: &Rec6) -> (Self, u8, u32) {
        (
            ((r.prefix[0] as u128) << 64) | r.prefix[1] as u128,
            r.len,
            r.nh,
        )
    }
}

/// Mask keeping the first `len` bits of a left-aligned key (every bit for `len >= 128`).
#[inline(always)]
fn wmask(len: u32) -> u128 {
    u128::MAX
        .checked_shl(128u32.saturating_sub(len))
        .unwrap_or(0)
}

/// `prefix` with the bits past `len` cleared.
pub fn mask<K: LpmKey>(prefix: K, len: u8) -> K {
    K::from_wide(prefix.wide() & wmask(len as u32))
}

/// A FIB's header, stored inline in its owner (the network entry). All-zero is an empty FIB.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FibHdr {
    /// Offset of the chunk directory (0 = no route at all).
    pub dir: u64,
    /// Offset of the wide-route list (0 = none).
    pub wide: u64,
    /// Number of wide routes.
    pub n_wide: u32,
    /// Number of routes in the FIB.
    pub routes: u32,
}
// SAFETY: repr(C), integers only, no padding (8+8+4+4), every bit pattern valid.
unsafe impl Pod for FibHdr {}
crate::assert_layout!(FibHdr, 24, 8);

/// After a chunk's top entries: the block of the short routes that start in the chunk (kept
/// apart: a chunk is copied whenever one of its slots changes, its short routes only change
/// with themselves).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ChunkTail {
    /// Offset of the short-route records (0 = none).
    shorts: u64,
    n_short: u32,
    _pad: u32,
}
// SAFETY: repr(C), integers only, no padding (8+4+4), every bit pattern valid.
unsafe impl Pod for ChunkTail {}
crate::assert_layout!(ChunkTail, 16, 8);

/// A trie node: 64 positions (six key bits). A subtree's root node keeps its slot default in
/// `base0`: its leaves are always right after it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Node {
    /// Bit i set: position i has a child node.
    pub vector: u64,
    /// Bit i set: a new run of equal leaves starts at (leaf) position i.
    pub leafvec: u64,
    /// Byte offset (in the subtree block) of this node's first leaf, or of its [`Single`];
    /// in the root node, the slot default.
    pub base0: u32,
    /// Byte offset (in the subtree block) of this node's first child.
    pub base1: u32,
}
// SAFETY: repr(C), integers only, no padding (8+8+4+4), every bit pattern valid.
unsafe impl Pod for Node {}
crate::assert_layout!(Node, 24, 8);

/// The writer's description of a subtree, right after the root node's leaves (off the
/// lookup path).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct SubHdr {
    n_nodes: u32,
    n_leaves: u32,
    n_routes: u32,
    /// Number of [`Single`] records.
    n_singles: u32,
}
// SAFETY: repr(C), integers only, every bit pattern valid.
unsafe impl Pod for SubHdr {}
crate::assert_layout!(SubHdr, 16, 4);

/// Path compression: a node whose only business is one deeper route. Marked by a [`Node`]
/// with both bitmaps zero (a real node always has a child or a leaf run), whose `base0` points
/// here. The walk compares the remaining key bits in one step instead of descending a chain of
/// single-child nodes (random IPv6 /48s: three levels instead of six).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Single {
    /// Left-aligned route prefix.
    bits: [u64; 2],
    /// Route length.
    len: u32,
    /// Next hop when the key matches.
    nh: u32,
    /// Next hop when it does not (the position's value in the parent; 0 = the slot default).
    default: u32,
    _pad: u32,
}
// SAFETY: repr(C), integers with explicit padding, every bit pattern valid.
unsafe impl Pod for Single {}
crate::assert_layout!(Single, 32, 8);

impl Single {
    #[inline(always)]
    fn resolve<K: LpmKey>(&self, key: K) -> u32 {
        let bits = K::from_wide(((self.bits[0] as u128) << 64) | self.bits[1] as u128);
        if key.same_prefix(bits, self.len) {
            self.nh
        } else {
            self.default
        }
    }
}

/// Root skip: every route of the subtree shares its first `start` bits, so the root node
/// starts there. A key outside the shared prefix has no long route: the slot default answers.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Skip {
    /// Left-aligned key bits every route in the subtree shares, up to `start`.
    bits: [u64; 2],
    /// Bit offset the root node starts at.
    start: u32,
    _pad: u32,
}
// SAFETY: repr(C), integers only, explicit padding, every bit pattern valid.
unsafe impl Pod for Skip {}
crate::assert_layout!(Skip, 24, 8);

impl Skip {
    #[inline(always)]
    fn covers<K: LpmKey>(&self, key: K) -> bool {
        let bits = K::from_wide(((self.bits[0] as u128) << 64) | self.bits[1] as u128);
        key.same_prefix(bits, self.start)
    }
}

/// Number of bits set among bits 0..=p of `v`.
#[inline(always)]
fn popcnt_upto(v: u64, p: u32) -> u32 {
    (v << (63 - (p & 63))).count_ones()
}

/// The subtree block a subtree top entry points to.
#[inline(always)]
fn block_of(e: u32) -> u64 {
    ((e & SUB_OFFSET) as u64) << 6
}

/// log2 of the leaf size of subtree `e`.
#[inline(always)]
fn leaf_shift(e: u32) -> u32 {
    2 - ((e >> LEAF16.trailing_zeros()) & 1)
}

/// Offset of the root node in a subtree block.
#[inline(always)]
fn root_of(e: u32) -> u64 {
    if e & SKIPPED != 0 {
        std::mem::size_of::<Skip>() as u64
    } else {
        0
    }
}

/// Where a subtree's parts are (byte offsets in the block).
#[derive(Debug, Clone, Copy)]
struct SubLayout {
    /// The root node (after the [`Skip`], if any).
    root: u64,
    /// The [`SubHdr`], after the root node's leaves.
    hdr: u64,
    /// Nodes other than the root.
    nodes: u64,
    /// Leaves other than the root's.
    leaves: u64,
    singles: u64,
    /// The route records the subtree was built from (after everything lookups read).
    routes: u64,
    size: u64,
}

impl SubLayout {
    /// The layout of a subtree with (or without) a root skip, `root_leaves` leaves in its root
    /// node, leaves of `1 << shift` bytes, and the counts of `h`.
    fn new<K: LpmKey>(skip: bool, root_leaves: u32, shift: u32, h: &SubHdr) -> SubLayout {
        let root = if skip {
            std::mem::size_of::<Skip>() as u64
        } else {
            0
        };
        let hdr = (root + NODE + ((root_leaves as u64) << shift)).div_ceil(8) * 8;
        let nodes = hdr + std::mem::size_of::<SubHdr>() as u64;
        let leaves = nodes + NODE * (h.n_nodes as u64).saturating_sub(1);
        let other_leaves = (h.n_leaves as u64).saturating_sub(root_leaves as u64);
        let singles = (leaves + (other_leaves << shift)).div_ceil(8) * 8;
        let ra = std::mem::align_of::<K::Rec>() as u64;
        let routes =
            (singles + std::mem::size_of::<Single>() as u64 * h.n_singles as u64).div_ceil(ra) * ra;
        let end = routes + h.n_routes as u64 * std::mem::size_of::<K::Rec>() as u64;
        SubLayout {
            root,
            hdr,
            nodes,
            leaves,
            singles,
            routes,
            size: end.div_ceil(SUB_ALIGN) * SUB_ALIGN,
        }
    }
}

/// A subtree's description and layout, read from its block (`e`: its top entry).
fn sub_info<K: LpmKey>(mem: Mem<'_>, e: u32) -> Option<(SubHdr, SubLayout)> {
    let block = block_of(e);
    let root = root_of(e);
    let n = mem.read::<Node>(block + root)?;
    let root_leaves = n.leafvec.count_ones();
    let hdr_at = (root + NODE + ((root_leaves as u64) << leaf_shift(e))).div_ceil(8) * 8;
    let h = mem.read::<SubHdr>(block + hdr_at)?;
    Some((
        h,
        SubLayout::new::<K>(e & SKIPPED != 0, root_leaves, leaf_shift(e), &h),
    ))
}

/// The routes a subtree was built from (`e`: its top entry).
fn sub_routes<K: LpmKey>(mem: Mem<'_>, e: u32) -> &[K::Rec] {
    sub_info::<K>(mem, e)
        .and_then(|(h, l)| mem.slice::<K::Rec>(block_of(e) + l.routes, h.n_routes as usize))
        .unwrap_or(&[])
}

/// Size of a chunk block.
const CHUNK_BYTES: u64 = CHUNK_ENTRIES_BYTES + std::mem::size_of::<ChunkTail>() as u64;

/// Bytes of `n` route records.
fn records_size<K: LpmKey>(n: u32) -> u64 {
    n as u64 * std::mem::size_of::<K::Rec>() as u64
}

/// Number of directory words of a `K` FIB.
const fn n_chunks<K: LpmKey>() -> usize {
    1usize << (K::TOP - CHUNK_BITS)
}

/// Calls `f` for every route of the FIB: the wide list, each chunk's short routes, each
/// subtree's records.
fn visit_routes<K: LpmKey>(mem: Mem<'_>, hdr: &FibHdr, f: &mut dyn FnMut(K, u8, u32)) {
    if hdr.wide != 0 {
        if let Some(w) = mem.slice::<K::Rec>(hdr.wide, hdr.n_wide as usize) {
            for r in w {
                let (p, l, nh) = K::unrec(r);
                f(p, l, nh);
            }
        }
    }
    if hdr.dir == 0 {
        return;
    }
    let Some(dir) = mem.slice::<u64>(hdr.dir, n_chunks::<K>()) else {
        return;
    };
    for &d in dir {
        if d & UNIFORM != 0 {
            continue;
        }
        let Some(tail) = mem.get::<ChunkTail>(d + CHUNK_ENTRIES_BYTES) else {
            continue;
        };
        if let (true, Some(rs)) = (
            tail.shorts != 0,
            mem.slice::<K::Rec>(tail.shorts, tail.n_short as usize),
        ) {
            for r in rs {
                let (p, l, nh) = K::unrec(r);
                f(p, l, nh);
            }
        }
        let Some(entries) = mem.slice::<u32>(d, CHUNK_SLOTS) else {
            continue;
        };
        for &e in entries {
            if e & SUBTREE != 0 {
                for r in sub_routes::<K>(mem, e) {
                    let (p, l, nh) = K::unrec(r);
                    f(p, l, nh);
                }
            }
        }
    }
}
