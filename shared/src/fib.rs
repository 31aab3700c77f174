//! Longest-prefix-match FIBs for IPv4 and IPv6, in shared memory.
//!
//! The structure is a multiway trie in the style of Poptrie (Asai & Ohara, SIGCOMM 2015):
//!
//! ```text
//!  FibHdr (inline in the network entry)
//!    │ dir ──► chunk directory  [u64; 2^(TOP-10)]   one word per 1024 top slots:
//!    │           │                                    0 = no route, UNIFORM|nh = all slots nh,
//!    │           ▼                                    else offset of a chunk block
//!    │         chunk block  [u32; 1024] top entries + the short routes that start in it
//!    │           │  top entry: leaf (next-hop index, 0 = none) or SUBTREE|offset/64
//!    │           ▼
//!    │         subtree block  Meta, [Skip], [Node], [leaf u32], SubHdr, [route records]
//!    │                        Node = { vector, leafvec: u64, base0, base1: u32 } — 6 key bits
//!    │                        per level; children and leaf runs found by popcount
//!    │ wide ──► the routes shorter than one chunk (len <= TOP-10)
//! ```
//!
//! The first `TOP` bits of the key index the top level directly (18 for IPv4, 16 for IPv6).
//! A top slot with no longer route holds its next hop; otherwise it points to a subtree
//! covering the rest of the key, built with leaf pushing (the best shorter route is pushed into
//! the subtree's leaves) and leaf compression (consecutive equal leaves stored once). A subtree
//! whose routes share bits beyond `TOP` starts below them (a root skip), which keeps IPv6 pod
//! networks (long prefixes under one /64) shallow.
//!
//! Every block carries the routes it was built from, so the table is self-describing: a
//! restarted writer rebuilds its bookkeeping from the region alone ([`FibWriter::recover`]).
//!
//! Updates are copy-on-write (see [`crate::arena`]): a route change rebuilds one subtree (or,
//! for a short route, the slots it covers), copies the chunk and the chunk directory, and the
//! new [`FibHdr`] is published with the rest of the batch. Readers see either the old or the
//! new table, never a mix.
//!
//! Lookups return a next-hop index (`u32`, 0 = no route); what it means is the caller's
//! (see [`crate::types::NextHop`]). Lookups never panic: a malformed offset reads as no route.

use std::collections::BTreeSet;

use crate::fasthash::FastMap;
use std::marker::PhantomData;

use crate::arena::Arena;
use crate::error::{Error, Result};
use crate::mem::Mem;
use crate::pod::Pod;

/// Top-entry flag: the low 30 bits are a subtree block offset in 64-byte units.
const SUBTREE: u32 = 1 << 31;
/// Top-entry flag (with [`SUBTREE`]): the subtree starts with a root skip.
const SKIPPED: u32 = 1 << 30;
/// Chunk-directory flag: the whole chunk maps to the next hop in the low 32 bits.
const UNIFORM: u64 = 1 << 63;
/// Top slots per chunk (log2).
const CHUNK_BITS: u32 = 10;
const CHUNK_SLOTS: usize = 1 << CHUNK_BITS;
/// Flag in [`Meta::flags`]: a [`Skip`] follows the meta word.
const SKIP_FLAG: u32 = 1;
/// Subtree blocks are cache-line aligned: the root node and its first leaves share a line.
const SUB_ALIGN: u64 = 64;

#[inline(always)]
fn block_of(e: u32) -> u64 {
    ((e & !(SUBTREE | SKIPPED)) as u64) << 6
}
/// Everything about the FIB's shared layout, for [`crate::LAYOUT_HASH`].
pub(crate) const LAYOUT: [usize; 15] = [
    std::mem::size_of::<FibHdr>(),
    std::mem::size_of::<Node>(),
    std::mem::offset_of!(Node, base0),
    std::mem::size_of::<Meta>(),
    std::mem::size_of::<SubHdr>(),
    std::mem::size_of::<Skip>(),
    std::mem::size_of::<Single>(),
    std::mem::size_of::<Rec4>(),
    std::mem::size_of::<Rec6>(),
    std::mem::size_of::<ChunkHdr>(),
    CHUNK_BITS as usize,
    <u32 as LpmKey>::TOP as usize,
    <u128 as LpmKey>::TOP as usize,
    SUBTREE as usize | SKIPPED as usize,
    SUB_ALIGN as usize,
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
    /// Six bits starting at bit `off` from the most significant bit (zeros past the end).
    fn bits6(self, off: u32) -> u32;
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
    const TOP: u32 = 18;
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
        (((self as u64) << (32 + off)) >> 58) as u32
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
    const TOP: u32 = 16;
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
        ((self << off) >> 122) as u32
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

/// Mask keeping the first `len` bits of a left-aligned key.
#[inline]
fn wmask(len: u32) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    }
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

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ChunkHdr {
    n_short: u32,
    _pad: [u32; 3],
}
// SAFETY: repr(C), integers only, every bit pattern valid.
unsafe impl Pod for ChunkHdr {}

/// A trie node: 64 positions (six key bits).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Node {
    /// Bit i set: position i has a child node.
    pub vector: u64,
    /// Bit i set: a new run of equal leaves starts at (leaf) position i.
    pub leafvec: u64,
    /// Byte offset (in the subtree block) of this node's first leaf.
    pub base0: u32,
    /// Byte offset (in the subtree block) of this node's first child.
    pub base1: u32,
}
// SAFETY: repr(C), integers only, no padding (8+8+4+4), every bit pattern valid.
unsafe impl Pod for Node {}
crate::assert_layout!(Node, 24, 8);

/// First word of a subtree block: all a lookup needs besides the nodes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Meta {
    /// Byte offset of the [`SubHdr`] in the block.
    tail: u32,
    /// [`SKIP_FLAG`].
    flags: u32,
}
// SAFETY: repr(C), integers only, every bit pattern valid.
unsafe impl Pod for Meta {}
crate::assert_layout!(Meta, 8, 4);

/// The writer's description of a subtree, after its leaves (off the lookup path).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
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
    /// Next hop when it does not (the position's value in the parent).
    default: u32,
    _pad: u32,
}
// SAFETY: repr(C), integers with explicit padding, every bit pattern valid.
unsafe impl Pod for Single {}
crate::assert_layout!(Single, 32, 8);

impl Single {
    #[inline(always)]
    fn resolve<K: LpmKey>(&self, key: K) -> u32 {
        let bits = ((self.bits[0] as u128) << 64) | self.bits[1] as u128;
        if (key.wide() ^ bits) & wmask(self.len) == 0 {
            self.nh
        } else {
            self.default
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Skip {
    /// Bit offset the root node starts at.
    start: u32,
    /// Next hop for keys outside the skipped prefix.
    default: u32,
    /// Left-aligned key bits every route in the subtree shares, up to `start`.
    bits: [u64; 2],
}
// SAFETY: repr(C), integers only, explicit padding, every bit pattern valid.
unsafe impl Pod for Skip {}
crate::assert_layout!(Skip, 24, 8);

const CHUNK_HDR: u64 = std::mem::size_of::<ChunkHdr>() as u64;
const CHUNK_ENTRIES_BYTES: u64 = (CHUNK_SLOTS * 4) as u64;
/// Offset in a chunk of the slot defaults: the best short route of each slot, which a walk
/// that finds no long route falls back to (subtrees do not push it into their leaves, so a
/// short-route change rewrites one word per slot instead of rebuilding subtrees).
const CHUNK_DEFAULTS: u64 = CHUNK_HDR + CHUNK_ENTRIES_BYTES;
/// Offset in a chunk of its short-route records.
const CHUNK_SHORTS: u64 = CHUNK_DEFAULTS + CHUNK_ENTRIES_BYTES;

#[inline(always)]
fn popcnt_upto(v: u64, p: u32) -> u32 {
    (v & (u64::MAX >> (63 - p))).count_ones()
}

/// Where a subtree's parts are (byte offsets in the block).
#[derive(Clone, Copy)]
struct SubLayout {
    nodes: u64,
    leaves: u64,
    singles: u64,
    hdr: u64,
    routes: u64,
    size: u64,
}

fn sub_layout<K: LpmKey>(
    n_nodes: u32,
    n_leaves: u32,
    n_singles: u32,
    n_routes: u32,
    skip: bool,
) -> SubLayout {
    let nodes = 8 + if skip { 24 } else { 0 };
    let leaves = nodes + n_nodes as u64 * 24;
    let singles = (leaves + n_leaves as u64 * 4).div_ceil(8) * 8;
    let hdr = singles + n_singles as u64 * 32;
    let ra = std::mem::align_of::<K::Rec>() as u64;
    let routes = (hdr + 16).div_ceil(ra) * ra;
    let end = routes + n_routes as u64 * std::mem::size_of::<K::Rec>() as u64;
    SubLayout {
        nodes,
        leaves,
        singles,
        hdr,
        routes,
        size: end.div_ceil(SUB_ALIGN) * SUB_ALIGN,
    }
}

/// A subtree's description and layout.
fn sub_info<K: LpmKey>(mem: Mem<'_>, block: u64) -> Option<(SubHdr, SubLayout)> {
    let m = mem.get::<Meta>(block)?;
    let h = *mem.get::<SubHdr>(block + m.tail as u64)?;
    let l = sub_layout::<K>(
        h.n_nodes,
        h.n_leaves,
        h.n_singles,
        h.n_routes,
        m.flags & SKIP_FLAG != 0,
    );
    Some((h, l))
}

/// Read side: lookups.
#[derive(Debug, Clone, Copy)]
pub struct Fib<K>(PhantomData<K>);

impl<K: LpmKey> Fib<K> {
    /// Longest-prefix match of `key`; 0 when no route covers it.
    #[inline]
    pub fn lookup(mem: Mem<'_>, hdr: &FibHdr, key: K) -> u32 {
        if hdr.dir == 0 {
            return 0;
        }
        let top = key.top();
        let Some(d) = mem.read::<u64>(hdr.dir + 8 * (top >> CHUNK_BITS) as u64) else {
            return 0;
        };
        if d & UNIFORM != 0 || d == 0 {
            return d as u32;
        }
        let a = d + CHUNK_HDR + 4 * (top as u64 & (CHUNK_SLOTS as u64 - 1));
        match mem.read::<u32>(a) {
            Some(e) if e & SUBTREE != 0 => match Self::walk(mem, e, key) {
                0 => mem.read::<u32>(a + CHUNK_ENTRIES_BYTES).unwrap_or(0),
                v => v,
            },
            Some(e) => e,
            None => 0,
        }
    }

    /// Walks the subtree of top entry `e` (which has [`SUBTREE`] set).
    #[inline(always)]
    fn walk(mem: Mem<'_>, e: u32, key: K) -> u32 {
        let block = block_of(e);
        let mut depth = K::TOP;
        let mut at = block + 8;
        if e & SKIPPED != 0 {
            let Some(s) = mem.read::<Skip>(at) else {
                return 0;
            };
            let bits = ((s.bits[0] as u128) << 64) | s.bits[1] as u128;
            if (key.wide() ^ bits) & wmask(s.start) != 0 {
                return s.default;
            }
            depth = s.start;
            at += 24;
        }
        // A malformed block can only send the walk elsewhere in the region (every access is
        // bounds-checked), and the walk ends: each step consumes six key bits.
        while depth < K::BITS + 6 {
            let Some(n) = mem.read::<Node>(at) else {
                return 0;
            };
            if n.vector | n.leafvec == 0 {
                return mem
                    .read::<Single>(block + n.base0 as u64)
                    .map_or(0, |s| s.resolve(key));
            }
            let p = key.bits6(depth);
            if (n.vector >> p) & 1 != 0 {
                at = block + n.base1 as u64 + 24 * (popcnt_upto(n.vector, p) as u64 - 1);
                depth += 6;
            } else {
                let run = (popcnt_upto(n.leafvec, p) as u64).wrapping_sub(1);
                return mem
                    .read::<u32>(block + n.base0 as u64 + 4 * run)
                    .unwrap_or(0);
            }
        }
        0
    }

    /// Looks up a burst of keys: `out[i]` = next hop of `keys[i]` (0 = no route).
    ///
    /// Keys go through in groups of 32. Within a group the first levels are software-pipelined
    /// like DPDK's bulk lookups (while key `i` takes its first step in its subtree, key `i + D`
    /// reads its top entry and prefetches its subtree, key `i + 2D` prefetches its top entry);
    /// keys that need deeper nodes then advance one level per pass, each prefetching its next
    /// node, so the misses of a deep walk (IPv6 /48: six levels) overlap across the group.
    pub fn lookup_bulk(mem: Mem<'_>, hdr: &FibHdr, keys: &[K], out: &mut [u32]) {
        const G: usize = 32;
        const D: usize = 8;
        let n = keys.len().min(out.len());
        let n_chunks = 1usize << (K::TOP - CHUNK_BITS);
        let dir = if hdr.dir == 0 {
            None
        } else {
            mem.slice::<u64>(hdr.dir, n_chunks)
        };
        let Some(dir) = dir else {
            out[..n].fill(0);
            return;
        };
        let mut base = 0;
        while base < n {
            let m = (n - base).min(G);
            let ks = &keys[base..base + m];
            let os = &mut out[base..base + m];
            // at[j]: top-entry address, then top entry, then the next node's address; 0 = done.
            let mut at = [0u64; G];
            let mut def = [0u64; G];
            let mut block = [0u64; G];
            let mut depth = [0u32; G];
            let mut deep = false;
            for i in 0..m + 2 * D {
                if i < m {
                    let top = ks[i].top();
                    let d = dir[(top >> CHUNK_BITS) as usize & (n_chunks - 1)];
                    at[i] = if d & UNIFORM != 0 || d == 0 {
                        os[i] = d as u32;
                        0
                    } else {
                        let a = d + CHUNK_HDR + 4 * (top as u64 & (CHUNK_SLOTS as u64 - 1));
                        mem.prefetch(a);
                        a
                    };
                }
                if i >= D && i - D < m {
                    let j = i - D;
                    if at[j] != 0 {
                        let e = mem.read::<u32>(at[j]).unwrap_or(0);
                        at[j] = if e & SUBTREE != 0 {
                            mem.prefetch(block_of(e));
                            def[j] = at[j] + CHUNK_ENTRIES_BYTES;
                            e as u64
                        } else {
                            os[j] = e;
                            0
                        };
                    }
                }
                if i >= 2 * D && i - 2 * D < m {
                    let j = i - 2 * D;
                    if at[j] != 0 {
                        match Self::enter(mem, at[j] as u32, ks[j]) {
                            Ok((b, node, d)) => {
                                block[j] = b;
                                depth[j] = d;
                                at[j] = node;
                                deep |= Self::step(
                                    mem,
                                    &mut at[j],
                                    b,
                                    &mut depth[j],
                                    ks[j],
                                    &mut os[j],
                                );
                            }
                            Err(v) => {
                                os[j] = v;
                                at[j] = 0;
                            }
                        }
                    }
                }
            }
            while deep {
                deep = false;
                for j in 0..m {
                    if at[j] != 0 {
                        deep |=
                            Self::step(mem, &mut at[j], block[j], &mut depth[j], ks[j], &mut os[j]);
                    }
                }
            }
            for j in 0..m {
                if os[j] == 0 && def[j] != 0 {
                    os[j] = mem.read::<u32>(def[j]).unwrap_or(0);
                }
            }
            base += m;
        }
    }

    /// Enters the subtree of top entry `e`: (block, root node offset, depth), or the answer
    /// when a root skip already decides it.
    #[inline(always)]
    fn enter(mem: Mem<'_>, e: u32, key: K) -> Result<(u64, u64, u32), u32> {
        let block = block_of(e);
        if e & SKIPPED == 0 {
            return Ok((block, block + 8, K::TOP));
        }
        let Some(s) = mem.read::<Skip>(block + 8) else {
            return Err(0);
        };
        let bits = ((s.bits[0] as u128) << 64) | s.bits[1] as u128;
        if (key.wide() ^ bits) & wmask(s.start) != 0 {
            return Err(s.default);
        }
        Ok((block, block + 32, s.start))
    }

    /// One level of a walk: either the answer goes to `out` (and `at` becomes 0) or `at` moves
    /// to the child node, which is prefetched. Returns whether the walk goes on.
    #[inline(always)]
    fn step(
        mem: Mem<'_>,
        at: &mut u64,
        block: u64,
        depth: &mut u32,
        key: K,
        out: &mut u32,
    ) -> bool {
        let node = if *depth < K::BITS + 6 {
            mem.read::<Node>(*at)
        } else {
            None
        };
        let Some(n) = node else {
            *out = 0;
            *at = 0;
            return false;
        };
        if n.vector | n.leafvec == 0 {
            *out = mem
                .read::<Single>(block + n.base0 as u64)
                .map_or(0, |s| s.resolve(key));
            *at = 0;
            return false;
        }
        let p = key.bits6(*depth);
        if (n.vector >> p) & 1 != 0 {
            *at = block + n.base1 as u64 + 24 * (popcnt_upto(n.vector, p) as u64 - 1);
            *depth += 6;
            mem.prefetch(*at);
            true
        } else {
            let run = (popcnt_upto(n.leafvec, p) as u64).wrapping_sub(1);
            *out = mem
                .read::<u32>(block + n.base0 as u64 + 4 * run)
                .unwrap_or(0);
            *at = 0;
            false
        }
    }

    /// Every route of the FIB: (prefix, length, next hop), in no particular order.
    pub fn routes(mem: Mem<'_>, hdr: &FibHdr) -> Vec<(K, u8, u32)> {
        let mut out = Vec::with_capacity(hdr.routes as usize);
        visit_routes::<K>(mem, hdr, &mut |p, l, nh| out.push((p, l, nh)));
        out
    }

    /// Every block of the FIB with its size, for rebuilding the allocator after a restart.
    pub fn trace(mem: Mem<'_>, hdr: &FibHdr, out: &mut Vec<(u64, u64)>) {
        if hdr.wide != 0 {
            out.push((
                hdr.wide,
                hdr.n_wide as u64 * std::mem::size_of::<K::Rec>() as u64,
            ));
        }
        if hdr.dir == 0 {
            return;
        }
        let n_chunks = 1usize << (K::TOP - CHUNK_BITS);
        out.push((hdr.dir, 8 * n_chunks as u64));
        let Some(dir) = mem.slice::<u64>(hdr.dir, n_chunks) else {
            return;
        };
        for &d in dir {
            if d == 0 || d & UNIFORM != 0 {
                continue;
            }
            let Some(ch) = mem.get::<ChunkHdr>(d) else {
                continue;
            };
            out.push((d, chunk_size::<K>(ch.n_short)));
            let Some(entries) = mem.slice::<u32>(d + CHUNK_HDR, CHUNK_SLOTS) else {
                continue;
            };
            for &e in entries {
                if e & SUBTREE != 0 {
                    let b = block_of(e);
                    if let Some((_, l)) = sub_info::<K>(mem, b) {
                        out.push((b, l.size));
                    }
                }
            }
        }
    }
}

fn chunk_size<K: LpmKey>(n_short: u32) -> u64 {
    CHUNK_SHORTS + n_short as u64 * std::mem::size_of::<K::Rec>() as u64
}

fn visit_routes<K: LpmKey>(mem: Mem<'_>, hdr: &FibHdr, f: &mut dyn FnMut(K, u8, u32)) {
    if let Some(w) = mem.slice::<K::Rec>(hdr.wide, hdr.n_wide as usize) {
        if hdr.wide != 0 {
            for r in w {
                let (p, l, nh) = K::unrec(r);
                f(p, l, nh);
            }
        }
    }
    if hdr.dir == 0 {
        return;
    }
    let n_chunks = 1usize << (K::TOP - CHUNK_BITS);
    let Some(dir) = mem.slice::<u64>(hdr.dir, n_chunks) else {
        return;
    };
    for &d in dir {
        if d == 0 || d & UNIFORM != 0 {
            continue;
        }
        let Some(ch) = mem.get::<ChunkHdr>(d) else {
            continue;
        };
        if let Some(rs) = mem.slice::<K::Rec>(d + CHUNK_SHORTS, ch.n_short as usize) {
            for r in rs {
                let (p, l, nh) = K::unrec(r);
                f(p, l, nh);
            }
        }
        let Some(entries) = mem.slice::<u32>(d + CHUNK_HDR, CHUNK_SLOTS) else {
            continue;
        };
        for &e in entries {
            if e & SUBTREE != 0 {
                for (p, l, nh) in sub_routes::<K>(mem, block_of(e)) {
                    f(p, l, nh);
                }
            }
        }
    }
}

fn sub_routes_into<K: LpmKey>(mem: Mem<'_>, block: u64, out: &mut Routes<K>) {
    if let Some((h, l)) = sub_info::<K>(mem, block) {
        if let Some(rs) = mem.slice::<K::Rec>(block + l.routes, h.n_routes as usize) {
            out.extend(rs.iter().map(K::unrec));
        }
    }
}

fn sub_routes<K: LpmKey>(mem: Mem<'_>, block: u64) -> Vec<(K, u8, u32)> {
    let Some((h, l)) = sub_info::<K>(mem, block) else {
        return Vec::new();
    };
    mem.slice::<K::Rec>(block + l.routes, h.n_routes as usize)
        .map(|rs| rs.iter().map(K::unrec).collect())
        .unwrap_or_default()
}

/// Routes as (prefix, length, next hop).
type Routes<K> = Vec<(K, u8, u32)>;

/// The writer's side of one FIB: its header lives in the caller's entry, its bookkeeping here.
///
/// Bookkeeping (the short routes, by prefix) is derived from the region and rebuilt by
/// [`FibWriter::recover`]. If an operation fails (region full), the caller must abandon the
/// whole batch and recover the writer from the last published header.
#[derive(Debug, Clone)]
pub struct FibWriter<K: LpmKey> {
    /// Routes with `len <= TOP`, by (prefix, len).
    short: FastMap<(K, u8), u32>,
    /// Number of short routes per length.
    per_len: Vec<u32>,
    /// Non-wide short routes of each chunk, shortest first (the order they are painted in).
    by_chunk: FastMap<u32, BTreeSet<(u8, K)>>,
    /// Scratch buffers reused by every subtree rebuild (no allocation per route).
    routes_buf: Routes<K>,
    built: Built,
}

impl<K: LpmKey> Default for FibWriter<K> {
    fn default() -> Self {
        FibWriter {
            short: FastMap::default(),
            per_len: vec![0; K::TOP as usize + 1],
            by_chunk: FastMap::default(),
            routes_buf: Vec::new(),
            built: Built::default(),
        }
    }
}

#[inline]
fn chunk_of<K: LpmKey>(p: K) -> u32 {
    p.top() >> CHUNK_BITS
}

#[inline]
fn is_wide<K: LpmKey>(len: u8) -> bool {
    len as u32 <= K::TOP - CHUNK_BITS
}

/// Result of building a subtree in the writer's memory.
#[derive(Debug, Clone, Default)]
struct Built {
    nodes: Vec<Node>,
    leaves: Vec<u32>,
    singles: Vec<Single>,
    skip: Option<(u32, u128)>,
}

impl<K: LpmKey> FibWriter<K> {
    /// Rebuilds the bookkeeping from a published FIB.
    pub fn recover(mem: Mem<'_>, hdr: &FibHdr) -> FibWriter<K> {
        let mut w = FibWriter::<K>::default();
        visit_routes::<K>(mem, hdr, &mut |p, l, nh| {
            if l as u32 <= K::TOP {
                w.note_short(p, l, Some(nh));
            }
        });
        w
    }

    fn check(prefix: K, len: u8, nh: Option<u32>) -> Result<K> {
        if len as u32 > K::BITS {
            return Err(Error::Invalid {
                what: format!(
                    "{} route {prefix:?}/{len}: prefix length above {}",
                    K::NAME,
                    K::BITS
                ),
            });
        }
        if let Some(nh) = nh {
            if nh == 0 || nh > MAX_NEXT_HOP {
                return Err(Error::Invalid {
                    what: format!(
                        "{} route {prefix:?}/{len}: next hop {nh} outside 1..={MAX_NEXT_HOP}",
                        K::NAME
                    ),
                });
            }
        }
        Ok(mask(prefix, len))
    }

    /// Adds or replaces a route; returns the next hop it replaced.
    pub fn insert(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        prefix: K,
        len: u8,
        nh: u32,
    ) -> Result<Option<u32>> {
        let prefix = Self::check(prefix, len, Some(nh))?;
        if len as u32 <= K::TOP {
            return self.set_short(arena, hdr, prefix, len, Some(nh));
        }
        let old = self.set_long(arena, hdr, prefix, len, Some(nh))?;
        if old.is_none() {
            hdr.routes += 1;
        }
        Ok(old)
    }

    /// Removes a route; returns its next hop, or None if there was no such route.
    pub fn remove(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        prefix: K,
        len: u8,
    ) -> Result<Option<u32>> {
        let prefix = Self::check(prefix, len, None)?;
        if len as u32 <= K::TOP {
            if !self.short.contains_key(&(prefix, len)) {
                return Ok(None);
            }
            return self.set_short(arena, hdr, prefix, len, None);
        }
        let old = self.set_long(arena, hdr, prefix, len, None)?;
        if old.is_some() {
            hdr.routes -= 1;
        }
        Ok(old)
    }

    /// Removes every route and frees every block.
    pub fn clear(&mut self, arena: &mut Arena, hdr: &mut FibHdr) {
        let mut blocks = Vec::new();
        Fib::<K>::trace(arena.mem(), hdr, &mut blocks);
        for (off, size) in blocks {
            arena.retire(off, size as usize);
        }
        *hdr = FibHdr::default();
        *self = FibWriter::default();
    }

    /// Best short route covering top slot `slot`, considering lengths in `lens` (descending).
    fn cover(&self, slot: u32, lens: std::ops::RangeInclusive<u32>) -> Option<(u8, u32)> {
        let key = K::from_wide((slot as u128) << (128 - K::TOP));
        for l in lens.rev() {
            if self.per_len[l as usize] == 0 {
                continue;
            }
            if let Some(&nh) = self.short.get(&(mask(key, l as u8), l as u8)) {
                return Some((l as u8, nh));
            }
        }
        None
    }

    /// Records a short route change in the bookkeeping; returns the old next hop.
    fn note_short(&mut self, prefix: K, len: u8, nh: Option<u32>) -> Option<u32> {
        let old = match nh {
            Some(nh) => self.short.insert((prefix, len), nh),
            None => self.short.remove(&(prefix, len)),
        };
        match (old.is_some(), nh.is_some()) {
            (false, true) => {
                self.per_len[len as usize] += 1;
                if !is_wide::<K>(len) {
                    self.by_chunk
                        .entry(chunk_of(prefix))
                        .or_default()
                        .insert((len, prefix));
                }
            }
            (true, false) => {
                self.per_len[len as usize] -= 1;
                if !is_wide::<K>(len) {
                    if let Some(set) = self.by_chunk.get_mut(&chunk_of(prefix)) {
                        set.remove(&(len, prefix));
                        if set.is_empty() {
                            self.by_chunk.remove(&chunk_of(prefix));
                        }
                    }
                }
            }
            _ => {}
        }
        old
    }

    fn set_short(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        prefix: K,
        len: u8,
        nh: Option<u32>,
    ) -> Result<Option<u32>> {
        let mut olds = [None];
        self.apply_shorts(arena, hdr, &[(prefix, len, nh)], &mut olds)?;
        Ok(olds[0])
    }

    /// Applies short-route changes in order, then re-derives every chunk they touch once.
    fn apply_shorts(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        changes: &[(K, u8, Option<u32>)],
        olds: &mut [Option<u32>],
    ) -> Result<()> {
        // Per chunk touched: which of its slots the changes cover (1024 bits).
        let mut chunks: std::collections::BTreeMap<u32, [u64; CHUNK_SLOTS / 64]> =
            std::collections::BTreeMap::new();
        let mut wide_changed = false;
        for (i, &(p, l, nh)) in changes.iter().enumerate() {
            let old = self.note_short(p, l, nh);
            olds[i] = old;
            if old == nh {
                continue;
            }
            match (old.is_some(), nh.is_some()) {
                (false, true) => hdr.routes += 1,
                (true, false) => hdr.routes -= 1,
                _ => {}
            }
            if is_wide::<K>(l) {
                wide_changed = true;
                let first = chunk_of(p);
                let n = 1u32 << (K::TOP - CHUNK_BITS - l as u32);
                for c in first..first + n {
                    chunks.insert(c, [u64::MAX; CHUNK_SLOTS / 64]);
                }
            } else {
                let bits = chunks.entry(chunk_of(p)).or_insert([0; CHUNK_SLOTS / 64]);
                let first = (p.top() & (CHUNK_SLOTS as u32 - 1)) as usize;
                for i in first..first + (1usize << (K::TOP - l as u32)) {
                    bits[i / 64] |= 1 << (i % 64);
                }
            }
        }
        if wide_changed {
            self.write_wide(arena, hdr)?;
        }
        if chunks.is_empty() {
            return Ok(());
        }
        let dir = self.ensure_dir(arena, hdr)?;
        for (c, touched) in chunks {
            self.repaint(arena, dir, c, &touched)?;
        }
        Ok(())
    }

    /// Re-derives the `touched` slots of chunk `c` from the short routes: the chunk's best wide
    /// route, overpainted by its own short routes from shortest to longest.
    fn repaint(
        &mut self,
        arena: &mut Arena,
        dir: u64,
        c: u32,
        touched: &[u64; CHUNK_SLOTS / 64],
    ) -> Result<()> {
        let base = self
            .cover(c << CHUNK_BITS, 0..=K::TOP - CHUNK_BITS)
            .map_or(0, |x| x.1);
        let d = *arena
            .mem()
            .get::<u64>(dir + 8 * c as u64)
            .ok_or_else(corrupt)?;
        let has_shorts = self.by_chunk.contains_key(&c);
        if !has_shorts && (d == 0 || d & UNIFORM != 0) {
            *arena.mem_mut().get_mut::<u64>(dir + 8 * c as u64) =
                if base == 0 { 0 } else { UNIFORM | base as u64 };
            return Ok(());
        }
        self.own_chunk(arena, dir, c, d)?;
        self.write_chunk_shorts(arena, dir, c)?;
        let mut vals = vec![base; CHUNK_SLOTS];
        if let Some(set) = self.by_chunk.get(&c) {
            for &(l, p) in set {
                let nh = self.short[&(p, l)];
                let first = (p.top() & (CHUNK_SLOTS as u32 - 1)) as usize;
                let span = 1usize << (K::TOP - l as u32);
                vals[first..first + span].fill(nh);
            }
        }
        for (i, v) in vals.into_iter().enumerate() {
            if touched[i / 64] & (1 << (i % 64)) != 0 {
                self.set_slot_default(arena, dir, (c << CHUNK_BITS) | i as u32, v)?;
            }
        }
        self.maybe_uniform(arena, dir, c)
    }

    /// Makes sure the directory exists and is writable; returns its offset.
    fn ensure_dir(&mut self, arena: &mut Arena, hdr: &mut FibHdr) -> Result<u64> {
        let n = 8usize << (K::TOP - CHUNK_BITS);
        hdr.dir = if hdr.dir == 0 {
            arena.alloc(n)?
        } else {
            arena.cow(hdr.dir, n)?
        };
        Ok(hdr.dir)
    }

    /// Makes chunk `c` a writable block (expanding a uniform chunk); returns its offset.
    fn own_chunk(&mut self, arena: &mut Arena, dir: u64, c: u32, d: u64) -> Result<u64> {
        let off = if d == 0 || d & UNIFORM != 0 {
            let fill = if d & UNIFORM != 0 { d as u32 } else { 0 };
            let off = arena.alloc(chunk_size::<K>(0) as usize)?;
            arena
                .mem_mut()
                .slice_mut::<u32>(off + CHUNK_HDR, 2 * CHUNK_SLOTS)
                .fill(fill);
            off
        } else {
            let n_short = arena.mem().get::<ChunkHdr>(d).ok_or_else(corrupt)?.n_short;
            arena.cow(d, chunk_size::<K>(n_short) as usize)?
        };
        *arena.mem_mut().get_mut::<u64>(dir + 8 * c as u64) = off;
        Ok(off)
    }

    /// Rewrites chunk `c`'s list of short (non-wide) routes from the bookkeeping.
    fn write_chunk_shorts(&mut self, arena: &mut Arena, dir: u64, c: u32) -> Result<()> {
        let off = *arena
            .mem()
            .get::<u64>(dir + 8 * c as u64)
            .ok_or_else(corrupt)?;
        let old_n = arena
            .mem()
            .get::<ChunkHdr>(off)
            .ok_or_else(corrupt)?
            .n_short;
        let recs: Vec<(K, u8, u32)> = self
            .by_chunk
            .get(&c)
            .map(|set| {
                set.iter()
                    .map(|&(l, p)| (p, l, self.short[&(p, l)]))
                    .collect()
            })
            .unwrap_or_default();
        let n = recs.len() as u32;
        let new = arena.alloc(chunk_size::<K>(n) as usize)?;
        arena.mem_mut().copy(
            off + CHUNK_HDR,
            new + CHUNK_HDR,
            2 * CHUNK_ENTRIES_BYTES as usize,
        );
        arena.mem_mut().get_mut::<ChunkHdr>(new).n_short = n;
        let rs = arena
            .mem_mut()
            .slice_mut::<K::Rec>(new + CHUNK_SHORTS, n as usize);
        for (r, (p, l, nh)) in rs.iter_mut().zip(recs) {
            *r = K::rec(p, l, nh);
        }
        arena.retire(off, chunk_size::<K>(old_n) as usize);
        *arena.mem_mut().get_mut::<u64>(dir + 8 * c as u64) = new;
        Ok(())
    }

    fn write_wide(&mut self, arena: &mut Arena, hdr: &mut FibHdr) -> Result<()> {
        let mut recs: Vec<(K, u8, u32)> = self
            .short
            .iter()
            .filter(|((_, l), _)| *l as u32 <= K::TOP - CHUNK_BITS)
            .map(|((p, l), nh)| (*p, *l, *nh))
            .collect();
        recs.sort_unstable();
        let rs = std::mem::size_of::<K::Rec>();
        if hdr.wide != 0 {
            arena.retire(hdr.wide, hdr.n_wide as usize * rs);
        }
        hdr.n_wide = recs.len() as u32;
        hdr.wide = 0;
        if !recs.is_empty() {
            let off = arena.alloc(recs.len() * rs)?;
            let out = arena.mem_mut().slice_mut::<K::Rec>(off, recs.len());
            for (r, (p, l, nh)) in out.iter_mut().zip(recs) {
                *r = K::rec(p, l, nh);
            }
            hdr.wide = off;
        }
        Ok(())
    }

    /// Offset of top entry `slot` inside its (writable) chunk.
    fn slot_addr(arena: &Arena, dir: u64, slot: u32) -> Result<u64> {
        let c = slot >> CHUNK_BITS;
        let d = *arena
            .mem()
            .get::<u64>(dir + 8 * c as u64)
            .ok_or_else(corrupt)?;
        debug_assert!(d != 0 && d & UNIFORM == 0 && arena.is_fresh(d));
        Ok(d + CHUNK_HDR + 4 * (slot as u64 & (CHUNK_SLOTS as u64 - 1)))
    }

    /// Sets the value a slot falls back to: the leaf itself, or the subtree's pushed default.
    fn set_slot_default(&mut self, arena: &mut Arena, dir: u64, slot: u32, v: u32) -> Result<()> {
        let a = Self::slot_addr(arena, dir, slot)?;
        let e = *arena.mem().get::<u32>(a).ok_or_else(corrupt)?;
        if e & SUBTREE == 0 {
            *arena.mem_mut().get_mut::<u32>(a) = v;
        }
        *arena.mem_mut().get_mut::<u32>(a + CHUNK_ENTRIES_BYTES) = v;
        Ok(())
    }

    /// Collapses chunk `c` to a uniform directory word when nothing in it needs a block.
    fn maybe_uniform(&mut self, arena: &mut Arena, dir: u64, c: u32) -> Result<()> {
        let d = *arena
            .mem()
            .get::<u64>(dir + 8 * c as u64)
            .ok_or_else(corrupt)?;
        let ch = *arena.mem().get::<ChunkHdr>(d).ok_or_else(corrupt)?;
        if ch.n_short != 0 {
            return Ok(());
        }
        let es = arena
            .mem()
            .slice::<u32>(d + CHUNK_HDR, CHUNK_SLOTS)
            .ok_or_else(corrupt)?;
        let v = es[0];
        if v & SUBTREE != 0 || es.iter().any(|&e| e != v) {
            return Ok(());
        }
        arena.retire(d, chunk_size::<K>(0) as usize);
        *arena.mem_mut().get_mut::<u64>(dir + 8 * c as u64) =
            if v == 0 { 0 } else { UNIFORM | v as u64 };
        Ok(())
    }

    /// The long routes of a top slot and the value the slot falls back to.
    fn slot_routes(arena: &Arena, hdr: &FibHdr, slot: u32, out: &mut Routes<K>) -> Result<u32> {
        out.clear();
        let mem = arena.mem();
        if hdr.dir == 0 {
            return Ok(0);
        }
        let d = mem
            .read::<u64>(hdr.dir + 8 * (slot >> CHUNK_BITS) as u64)
            .ok_or_else(corrupt)?;
        if d & UNIFORM != 0 || d == 0 {
            return Ok(d as u32);
        }
        let a = d + CHUNK_HDR + 4 * (slot as u64 & (CHUNK_SLOTS as u64 - 1));
        let e = mem.read::<u32>(a).ok_or_else(corrupt)?;
        if e & SUBTREE != 0 {
            let def = mem
                .read::<u32>(a + CHUNK_ENTRIES_BYTES)
                .ok_or_else(corrupt)?;
            sub_routes_into::<K>(mem, block_of(e), out);
            Ok(def)
        } else {
            Ok(e)
        }
    }

    /// Applies changes to one slot's route list; returns the old next hop of each.
    fn edit(routes: &mut Vec<(K, u8, u32)>, prefix: K, len: u8, nh: Option<u32>) -> Option<u32> {
        let pos = routes.iter().position(|r| r.0 == prefix && r.1 == len);
        let old = pos.map(|i| routes[i].2);
        match (pos, nh) {
            (Some(i), Some(v)) => routes[i].2 = v,
            (Some(i), None) => {
                routes.swap_remove(i);
            }
            (None, Some(v)) => routes.push((prefix, len, v)),
            (None, None) => {}
        }
        old
    }

    /// Rewrites top slot `slot` from its long routes.
    fn write_slot(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        slot: u32,
        routes: &mut [(K, u8, u32)],
        default: u32,
    ) -> Result<()> {
        let c = slot >> CHUNK_BITS;
        let dir = self.ensure_dir(arena, hdr)?;
        let d = *arena
            .mem()
            .get::<u64>(dir + 8 * c as u64)
            .ok_or_else(corrupt)?;
        if d & UNIFORM != 0 && routes.is_empty() && d as u32 == default
            || d == 0 && routes.is_empty() && default == 0
        {
            return Ok(());
        }
        self.own_chunk(arena, dir, c, d)?;
        let a = Self::slot_addr(arena, dir, slot)?;
        let e = *arena.mem().get::<u32>(a).ok_or_else(corrupt)?;
        let ne = if routes.is_empty() {
            default
        } else {
            self.emit_subtree(arena, routes)?
        };
        if e & SUBTREE != 0 {
            free_subtree::<K>(arena, block_of(e));
        }
        *arena.mem_mut().get_mut::<u32>(a) = ne;
        *arena.mem_mut().get_mut::<u32>(a + CHUNK_ENTRIES_BYTES) = default;
        if routes.is_empty() {
            self.maybe_uniform(arena, dir, c)?;
        }
        Ok(())
    }

    fn set_long(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        prefix: K,
        len: u8,
        nh: Option<u32>,
    ) -> Result<Option<u32>> {
        let slot = prefix.top();
        let mut routes = std::mem::take(&mut self.routes_buf);
        let default = Self::slot_routes(arena, hdr, slot, &mut routes)?;
        let old = Self::edit(&mut routes, prefix, len, nh);
        let r = if old == nh {
            Ok(old)
        } else {
            self.write_slot(arena, hdr, slot, &mut routes, default)
                .map(|_| old)
        };
        self.routes_buf = routes;
        r
    }

    /// Applies a batch of changes (`Some(nh)`: add or replace, `None`: remove) in order, and
    /// returns the next hop each one replaced. Long routes are grouped by top slot so each
    /// subtree is rebuilt once per batch: this is the fast path for loading a table.
    pub fn apply(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        changes: &[(K, u8, Option<u32>)],
    ) -> Result<Vec<Option<u32>>> {
        let mut olds = vec![None; changes.len()];
        let mut long: Vec<(u32, usize, K)> = Vec::new();
        let mut short = Vec::new();
        let mut short_at = Vec::new();
        for (i, &(p, l, nh)) in changes.iter().enumerate() {
            let p = Self::check(p, l, nh)?;
            if l as u32 <= K::TOP {
                short.push((p, l, nh));
                short_at.push(i);
            } else {
                long.push((p.top(), i, p));
            }
        }
        if !short.is_empty() {
            let mut so = vec![None; short.len()];
            self.apply_shorts(arena, hdr, &short, &mut so)?;
            for (i, o) in short_at.into_iter().zip(so) {
                olds[i] = o;
            }
        }
        long.sort_unstable_by_key(|x| (x.0, x.1));
        let mut routes = std::mem::take(&mut self.routes_buf);
        let r = self.apply_long(arena, hdr, changes, &long, &mut routes, &mut olds);
        self.routes_buf = routes;
        r.map(|_| olds)
    }

    fn apply_long(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        changes: &[(K, u8, Option<u32>)],
        long: &[(u32, usize, K)],
        routes: &mut Routes<K>,
        olds: &mut [Option<u32>],
    ) -> Result<()> {
        let mut at = 0;
        while at < long.len() {
            let slot = long[at].0;
            let mut end = at;
            while end < long.len() && long[end].0 == slot {
                end += 1;
            }
            let default = Self::slot_routes(arena, hdr, slot, routes)?;
            let mut changed = false;
            for &(_, i, p) in &long[at..end] {
                let (_, l, nh) = changes[i];
                let old = Self::edit(routes, p, l, nh);
                changed |= old != nh;
                match (old.is_some(), nh.is_some()) {
                    (false, true) => hdr.routes += 1,
                    (true, false) => hdr.routes -= 1,
                    _ => {}
                }
                olds[i] = old;
            }
            if changed {
                self.write_slot(arena, hdr, slot, routes, default)?;
            }
            at = end;
        }
        Ok(())
    }

    /// Builds a subtree for one top slot from its long routes; returns the top entry.
    fn emit_subtree(&mut self, arena: &mut Arena, sorted: &mut [(K, u8, u32)]) -> Result<u32> {
        // Misses inside the subtree read 0 and fall back to the slot default in the chunk.
        let default = 0;
        sorted.sort_unstable_by_key(|r| (r.1, r.0));
        let mut built = std::mem::take(&mut self.built);
        build::<K>(sorted, default, &mut built);
        let r = self.write_subtree(arena, sorted, &built, default);
        self.built = built;
        r
    }

    fn write_subtree(
        &mut self,
        arena: &mut Arena,
        sorted: &[(K, u8, u32)],
        built: &Built,
        default: u32,
    ) -> Result<u32> {
        let n_routes = sorted.len() as u32;
        let l = sub_layout::<K>(
            built.nodes.len() as u32,
            built.leaves.len() as u32,
            built.singles.len() as u32,
            n_routes,
            built.skip.is_some(),
        );
        let off = arena.alloc(l.size as usize)?;
        if off % SUB_ALIGN != 0 || off >> 6 >= SKIPPED as u64 {
            arena.retire(off, l.size as usize);
            return Err(Error::Invalid {
                what:
                    "FIB subtree beyond the 64 GiB addressable by top entries; use a smaller region"
                        .into(),
            });
        }
        let m = arena.mem_mut();
        *m.get_mut::<Meta>(off) = Meta {
            tail: l.hdr as u32,
            flags: if built.skip.is_some() { SKIP_FLAG } else { 0 },
        };
        *m.get_mut::<SubHdr>(off + l.hdr) = SubHdr {
            n_nodes: built.nodes.len() as u32,
            n_leaves: built.leaves.len() as u32,
            n_routes,
            n_singles: built.singles.len() as u32,
        };
        m.slice_mut::<Single>(off + l.singles, built.singles.len())
            .copy_from_slice(&built.singles);
        if let Some((start, bits)) = built.skip {
            *m.get_mut::<Skip>(off + 8) = Skip {
                start,
                default,
                bits: [(bits >> 64) as u64, bits as u64],
            };
        }
        // `build` links by index; in the block, links are byte offsets.
        let nodes = m.slice_mut::<Node>(off + l.nodes, built.nodes.len());
        for (dst, n) in nodes.iter_mut().zip(&built.nodes) {
            let single = n.vector == 0 && n.leafvec == 0;
            *dst = Node {
                base0: if single {
                    (l.singles + 32 * n.base0 as u64) as u32
                } else {
                    (l.leaves + 4 * n.base0 as u64) as u32
                },
                base1: (l.nodes + 24 * n.base1 as u64) as u32,
                ..*n
            };
        }
        m.slice_mut::<u32>(off + l.leaves, built.leaves.len())
            .copy_from_slice(&built.leaves);
        // Stored in build order (by length); readers of the list do not depend on the order.
        for (r, (p, len, nh)) in m
            .slice_mut::<K::Rec>(off + l.routes, n_routes as usize)
            .iter_mut()
            .zip(sorted.iter().copied())
        {
            *r = K::rec(p, len, nh);
        }
        Ok(SUBTREE | if built.skip.is_some() { SKIPPED } else { 0 } | (off >> 6) as u32)
    }
}

fn free_subtree<K: LpmKey>(arena: &mut Arena, block: u64) {
    if let Some((_, l)) = sub_info::<K>(arena.mem(), block) {
        arena.retire(block, l.size as usize);
    }
}

fn corrupt() -> Error {
    Error::Invalid {
        what: "FIB block outside the region: the table region is corrupt; remove it so control recreates it".into(),
    }
}

/// Builds the nodes and leaves of a subtree. `routes` are sorted by length (ascending), all
/// longer than `TOP` and inside one top slot.
fn build<K: LpmKey>(routes: &[(K, u8, u32)], default: u32, out: &mut Built) {
    out.nodes.clear();
    out.leaves.clear();
    out.singles.clear();
    out.skip = None;
    // Root skip: the bits all routes share, but never past the shortest route's own node.
    let min_len = routes.iter().map(|r| r.1 as u32).min().unwrap_or(K::BITS);
    let first = routes.first().map_or(0, |r| r.0.wide());
    let common = routes
        .iter()
        .map(|r| ((r.0.wide() ^ first) | !wmask(r.1 as u32)).leading_zeros())
        .min()
        .unwrap_or(0);
    let start = common.min(min_len - 1).max(K::TOP);
    if start > K::TOP {
        out.skip = Some((start, first & wmask(start)));
    }
    if routes.iter().all(|r| r.1 as u32 <= start + 6) {
        // The common case (e.g. /19../24 under an IPv4 slot): one node, no children.
        let mut leaf = [default; 64];
        for &(p, l, nh) in routes {
            let span = 1usize << (start + 6 - l as u32);
            let s = p.bits6(start) as usize & !(span - 1);
            leaf[s..s + span].fill(nh);
        }
        let mut node = Node::default();
        let mut last = None;
        for (pos, &v) in leaf.iter().enumerate() {
            if last != Some(v) {
                node.leafvec |= 1 << pos;
                out.leaves.push(v);
                last = Some(v);
            }
        }
        out.nodes.push(node);
        return;
    }
    struct Task {
        depth: u32,
        routes: Vec<usize>,
        default: u32,
    }
    let mut queue = std::collections::VecDeque::new();
    queue.push_back(Task {
        depth: start,
        routes: (0..routes.len()).collect(),
        default,
    });
    let mut next_index = 1u32;
    while let Some(t) = queue.pop_front() {
        if let [ri] = t.routes[..] {
            let (p, l, nh) = routes[ri];
            if l as u32 > t.depth + 6 {
                let w = p.wide();
                out.nodes.push(Node {
                    base0: out.singles.len() as u32,
                    ..Node::default()
                });
                out.singles.push(Single {
                    bits: [(w >> 64) as u64, w as u64],
                    len: l as u32,
                    nh,
                    default: t.default,
                    _pad: 0,
                });
                continue;
            }
        }
        let mut leaf = [t.default; 64];
        let mut kids: [Vec<usize>; 64] = std::array::from_fn(|_| Vec::new());
        for &ri in &t.routes {
            let (p, l, nh) = routes[ri];
            let pos = p.bits6(t.depth) as usize;
            if (l as u32) <= t.depth + 6 {
                let span = 1usize << (t.depth + 6 - l as u32);
                let s = pos & !(span - 1);
                leaf[s..s + span].fill(nh);
            } else {
                kids[pos].push(ri);
            }
        }
        let mut node = Node {
            base0: out.leaves.len() as u32,
            base1: next_index,
            ..Node::default()
        };
        let mut last: Option<u32> = None;
        for pos in 0..64 {
            if !kids[pos].is_empty() {
                node.vector |= 1 << pos;
                queue.push_back(Task {
                    depth: t.depth + 6,
                    routes: std::mem::take(&mut kids[pos]),
                    default: leaf[pos],
                });
                next_index += 1;
            } else if last != Some(leaf[pos]) {
                node.leafvec |= 1 << pos;
                out.leaves.push(leaf[pos]);
                last = Some(leaf[pos]);
            }
        }
        out.nodes.push(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::MemMut;
    use std::collections::HashMap;
    use std::ptr::NonNull;

    pub(crate) fn test_arena(bytes: usize) -> (Vec<u128>, Arena) {
        let mut buf = vec![0u128; bytes / 16];
        let base = NonNull::new(buf.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: the Vec's heap buffer does not move when the Vec is moved, and each test
        // keeps the Vec alive as long as the arena.
        let mem = unsafe { MemMut::from_raw(base, bytes) };
        (buf, Arena::new(mem, 64, bytes as u64))
    }

    fn naive<K: LpmKey>(routes: &HashMap<(K, u8), u32>, key: K) -> u32 {
        let mut best: Option<(u8, u32)> = None;
        for (&(p, l), &nh) in routes {
            if mask(key, l) == p && best.is_none_or(|b| l > b.0) {
                best = Some((l, nh));
            }
        }
        best.map_or(0, |b| b.1)
    }

    #[test]
    fn small_v4_table() {
        let (_b, mut a) = test_arena(1 << 22);
        let mut h = FibHdr::default();
        let mut w = FibWriter::<u32>::default();
        let ip = |a: u8, b: u8, c: u8, d: u8| u32::from_be_bytes([a, b, c, d]);
        w.insert(&mut a, &mut h, ip(10, 0, 0, 0), 8, 1).unwrap();
        w.insert(&mut a, &mut h, ip(10, 1, 0, 0), 16, 2).unwrap();
        w.insert(&mut a, &mut h, ip(10, 1, 2, 0), 24, 3).unwrap();
        w.insert(&mut a, &mut h, ip(10, 1, 2, 3), 32, 4).unwrap();
        w.insert(&mut a, &mut h, 0, 0, 9).unwrap();
        let m = a.mem();
        assert_eq!(Fib::lookup(m, &h, ip(10, 1, 2, 3)), 4);
        assert_eq!(Fib::lookup(m, &h, ip(10, 1, 2, 4)), 3);
        assert_eq!(Fib::lookup(m, &h, ip(10, 1, 3, 4)), 2);
        assert_eq!(Fib::lookup(m, &h, ip(10, 2, 3, 4)), 1);
        assert_eq!(Fib::lookup(m, &h, ip(11, 2, 3, 4)), 9);
        assert_eq!(h.routes, 5);
        assert_eq!(
            w.remove(&mut a, &mut h, ip(10, 1, 2, 0), 24).unwrap(),
            Some(3)
        );
        assert_eq!(Fib::lookup(a.mem(), &h, ip(10, 1, 2, 4)), 2);
        assert_eq!(w.remove(&mut a, &mut h, 0, 0).unwrap(), Some(9));
        assert_eq!(Fib::lookup(a.mem(), &h, ip(11, 2, 3, 4)), 0);
        assert_eq!(w.remove(&mut a, &mut h, 0, 0).unwrap(), None);
        let mut got = Fib::<u32>::routes(a.mem(), &h);
        got.sort();
        assert_eq!(
            got,
            vec![
                (ip(10, 0, 0, 0), 8, 1),
                (ip(10, 1, 0, 0), 16, 2),
                (ip(10, 1, 2, 3), 32, 4)
            ]
        );
    }

    #[test]
    fn invalid_routes_are_errors() {
        let (_b, mut a) = test_arena(1 << 20);
        let mut h = FibHdr::default();
        let mut w = FibWriter::<u32>::default();
        assert!(w.insert(&mut a, &mut h, 1, 33, 1).is_err());
        assert!(w.insert(&mut a, &mut h, 1, 8, 0).is_err());
        assert!(w.insert(&mut a, &mut h, 1, 8, SUBTREE).is_err());
        assert_eq!(h, FibHdr::default());
    }

    #[test]
    fn v6_skip_and_default() {
        let (_b, mut a) = test_arena(1 << 22);
        let mut h = FibHdr::default();
        let mut w = FibWriter::<u128>::default();
        let net: u128 = 0xfd00_0010_0000_0000_0000_0000_0000_0000;
        for n in 0..50u128 {
            w.insert(&mut a, &mut h, net | (n << 8), 120, 100 + n as u32)
                .unwrap();
        }
        w.insert(&mut a, &mut h, net, 64, 7).unwrap();
        w.insert(&mut a, &mut h, 0, 0, 1).unwrap();
        let m = a.mem();
        assert_eq!(Fib::lookup(m, &h, net | (3 << 8) | 5), 103);
        assert_eq!(Fib::lookup(m, &h, net | (51 << 8) | 5), 7);
        assert_eq!(Fib::lookup(m, &h, net | (1 << 70)), 1);
        assert_eq!(Fib::lookup(m, &h, 0x2001u128 << 112), 1);
    }

    #[test]
    fn lone_deep_routes_become_single_nodes() {
        let a32: u128 = 0x2001_0db8 << 96;
        let a64: u128 = a32 | (0x0001_0002u128 << 64);
        let other: u128 = 0x2001_0db9 << 96;
        let mut sorted = vec![(a32, 32u8, 1u32), (other, 32, 3), (a64, 64, 2)];
        sorted.sort_unstable_by_key(|r| (r.1, r.0));
        let mut built = Built::default();
        build::<u128>(&sorted, 0, &mut built);
        assert_eq!(built.singles.len(), 1, "{built:?}");
        assert_eq!(built.singles[0].len, 64);
        assert_eq!(
            built.singles[0].default, 1,
            "falls back to the covering /32"
        );
        let (_b, mut a) = test_arena(1 << 22);
        let mut h = FibHdr::default();
        let mut w = FibWriter::<u128>::default();
        for (p, l, nh) in sorted {
            w.insert(&mut a, &mut h, p, l, nh).unwrap();
        }
        let m = a.mem();
        assert_eq!(Fib::lookup(m, &h, a64 | 0xffff), 2);
        assert_eq!(
            Fib::lookup(m, &h, a64 ^ (1 << 70)),
            1,
            "same /32, other /64"
        );
        assert_eq!(Fib::lookup(m, &h, other | 5), 3);
        let keys = [a64 | 7, a64 ^ (1 << 70), other | 9, 0x2001_0dba << 96];
        let mut out = [9; 4];
        Fib::lookup_bulk(m, &h, &keys, &mut out);
        assert_eq!(out, [2, 1, 3, 0]);
    }

    /// Random operations over a deliberately narrow address space, so prefixes overlap,
    /// share top slots and subtrees, and exercise /0, short, wide and host routes.
    fn model_check<K: LpmKey>(
        ops: &[(bool, u128, u8, u32)],
        probes: &[u128],
        narrow: impl Fn(u128) -> K,
    ) {
        let (_b, mut a) = test_arena(if cfg!(miri) { 2 << 20 } else { 64 << 20 });
        let mut h = FibHdr::default();
        let mut w = FibWriter::<K>::default();
        let mut model: HashMap<(K, u8), u32> = HashMap::new();
        let batch = ops.len() % 2 == 0;
        let mut i = 0;
        while i < ops.len() {
            // Odd-length sequences go one op at a time; even ones in batches of 1..=5.
            let n = if batch {
                (i % 5 + 1).min(ops.len() - i)
            } else {
                1
            };
            let group = &ops[i..i + n];
            let changes: Vec<(K, u8, Option<u32>)> = group
                .iter()
                .map(|&(add, raw, len, nh)| {
                    let len = len.min(K::BITS as u8);
                    (mask(narrow(raw), len), len, add.then_some(nh))
                })
                .collect();
            let olds = if batch {
                w.apply(&mut a, &mut h, &changes).unwrap()
            } else {
                let (p, len, nh) = changes[0];
                vec![match nh {
                    Some(v) => w.insert(&mut a, &mut h, p, len, v).unwrap(),
                    None => w.remove(&mut a, &mut h, p, len).unwrap(),
                }]
            };
            for (&(p, len, nh), old) in changes.iter().zip(olds) {
                let want = match nh {
                    Some(v) => model.insert((p, len), v),
                    None => model.remove(&(p, len)),
                };
                assert_eq!(old, want, "change {p:?}/{len} -> {nh:?}");
            }
            let p = changes[0].0;
            i += n;
            assert_eq!(h.routes as usize, model.len());
            if i % 7 == 0 {
                a.published(i as u64 + 2);
                a.reclaim(None);
            }
            let mut keys: Vec<K> = probes.iter().map(|&x| narrow(x)).collect();
            keys.push(p);
            let mut bulk = vec![0; keys.len()];
            Fib::lookup_bulk(a.mem(), &h, &keys, &mut bulk);
            for (k, b) in keys.iter().zip(&bulk) {
                let want = naive(&model, *k);
                assert_eq!(
                    Fib::lookup(a.mem(), &h, *k),
                    want,
                    "lookup {k:?} after op {i}"
                );
                assert_eq!(*b, want, "bulk lookup {k:?} after op {i}");
            }
        }
        // The table describes itself: a recovered writer sees the same routes...
        let mut got = Fib::<K>::routes(a.mem(), &h);
        got.sort();
        let mut want: Vec<(K, u8, u32)> = model.iter().map(|(&(p, l), &nh)| (p, l, nh)).collect();
        want.sort();
        assert_eq!(got, want);
        let mut w2 = FibWriter::<K>::recover(a.mem(), &h);
        // ...and can keep changing it.
        for (p, l, _) in want.iter().take(5) {
            w2.remove(&mut a, &mut h, *p, *l).unwrap();
            model.remove(&(*p, *l));
        }
        for &x in probes {
            assert_eq!(
                Fib::lookup(a.mem(), &h, narrow(x)),
                naive(&model, narrow(x))
            );
        }
        // trace covers exactly the live blocks.
        let mut blocks = Vec::new();
        Fib::<K>::trace(a.mem(), &h, &mut blocks);
        let traced: u64 = blocks
            .iter()
            .map(|b| crate::arena::block_size(b.1 as usize))
            .sum();
        assert_eq!(
            traced,
            a.stats().live_bytes,
            "trace lists every live block once"
        );
        w2.clear(&mut a, &mut h);
        assert_eq!(a.stats().live_bytes, 0);
    }

    use proptest::prelude::*;

    fn ops4() -> impl Strategy<Value = Vec<(bool, u128, u8, u32)>> {
        prop::collection::vec(
            (
                prop::bool::weighted(0.7),
                any::<u32>().prop_map(|x| x as u128),
                prop_oneof![Just(0u8), 1u8..=12, 13u8..=20, 21u8..=28, 29u8..=32],
                1u32..20,
            ),
            1..if cfg!(miri) { 12 } else { 120 },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 2 } else { 64 }, ..ProptestConfig::default() })]

        #[test]
        fn v4_matches_linear_scan(ops in ops4(), probes in prop::collection::vec(any::<u32>(), 16)) {
            // Squeeze keys into two /12s so routes collide in slots and subtrees.
            let narrow = |x: u128| -> u32 {
                let x = x as u32;
                (0x0a00_0000 | (x & 0x001f_ffff)) ^ ((x >> 31) << 24)
            };
            let probes: Vec<u128> = probes.iter().map(|&p| p as u128).collect();
            model_check::<u32>(&ops, &probes, narrow);
        }

        #[test]
        fn v6_matches_linear_scan(
            ops in prop::collection::vec(
                (prop::bool::weighted(0.7), any::<u128>(),
                 prop_oneof![Just(0u8), 1u8..=16, 17u8..=64, 65u8..=120, 121u8..=128], 1u32..20),
                1..if cfg!(miri) { 10 } else { 100 }),
            probes in prop::collection::vec(any::<u128>(), 16),
        ) {
            // Two /48s plus a sprinkle anywhere: deep subtrees with root skips.
            let narrow = |x: u128| -> u128 {
                if x & 0xf == 0 { x } else {
                    (0xfd00_0000_0010u128 << 80) | (x & ((1u128 << 81) - 1))
                }
            };
            model_check::<u128>(&ops, &probes, narrow);
        }
    }
}
