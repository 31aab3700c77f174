//! Exact-match hash tables in shared memory: MAC → location (FDB), IP → MAC (neighbors),
//! SID → behaviour (local SIDs).
//!
//! One writer changes a table through an [`Arena`]; readers in another process look keys up
//! through a [`Mem`] view and the [`HashHdr`] of a published snapshot. The header is stored
//! inline in its parent object; everything else lives in arena blocks.
//!
//! # Layout
//!
//! ```text
//!  HashHdr (inline in parent)       directory block           pages (4 KiB blocks, fewer bytes
//!  ┌──────────────────────┐        ┌──────────────┐          while the table is smaller)
//!  │ dir ─────────────────┼───────▶│ page 0 off ──┼────────▶┌──────────┬──────────┬───┐
//!  │ seed                 │        │ page 1 off ──┼──┐      │ bucket 0 │ bucket 1 │ … │
//!  │ bucket_bits │ count  │        │ …            │  │      └──────────┴──────────┴───┘
//!  └──────────────────────┘        └──────────────┘  └─────▶ bucket 64 …
//!
//!  one bucket = one cache line (or 2, 4, 8 lines when a key and its value are too large for
//!  three of them to share one line); keys first so that 16-byte keys stay aligned:
//!
//!  0                     N·size(K)   (aligned for V)               bucket size − 8
//!  ┌─────────────────────┬──────────────────────────────────────┬─────┬────────────────────┐
//!  │ keys [K; N]         │ values [V; N]                        │ pad │ meta: u64          │
//!  └─────────────────────┴──────────────────────────────────────┴─────┴────────────────────┘
//!    meta byte i (i < N): tag of slot i, 0 = empty slot (tags are forced non-zero)
//!    meta byte 7:         overflow count: keys whose primary bucket is this one but that
//!                         live in their alternative bucket (saturates at 255, then sticky)
//!
//!  u64 → u64: 64-byte bucket, N = 3     u64 → u32:  64-byte bucket, N = 4
//!  u128 → u64: 128-byte bucket, N = 5   u128 → u32: 128-byte bucket, N = 6
//!  u128 → [u64; 4]: 256-byte bucket, N = 5
//! ```
//!
//! A key's 64-bit hash (seeded per table, see [`HashKey`]) gives its primary bucket (low bits),
//! its alternative bucket (primary XOR an odd value from bits 32..) and an 8-bit tag (top byte).
//! Lookup compares the tag against all slots of the primary bucket at once (SWAR over the meta
//! word), compares the key only where a tag matches, and visits the alternative bucket only if
//! the primary bucket's overflow count is non-zero. Keys and values are inline, so a lookup —
//! hit or miss — usually touches exactly one bucket: one cache line for 8-byte keys, two
//! adjacent lines for 16-byte keys (`rte_hash`'s bulk lookup fetches both candidate bucket lines
//! for every key, plus a key-store line per hit). A bulk lookup first hashes a burst and
//! prefetches every primary bucket, then searches them, prefetching alternative buckets only
//! where needed, so that the memory latency of a whole burst overlaps.
//!
//! Inserts prefer the primary bucket, then the alternative, then move keys between their two
//! buckets along the shortest path found by breadth-first search (cuckoo displacement). The
//! table grows (rebuilt at twice the buckets into fresh blocks) past 90 % load (85 % with two
//! slots per bucket) or when no displacement path exists.
//!
//! # Guarantees
//!
//! - Readers never panic, allocate, lock or make system calls; a bad offset reads as "not
//!   found" (see [`Mem`]).
//! - The writer never changes a block readers can reach: a change copies the bucket's page (and
//!   the directory) once per batch; copies stay fresh and are changed in place until the next
//!   publication. An old [`HashHdr`] keeps reading the old contents until its blocks are
//!   reclaimed.
//! - A writer operation that fails (`RegionFull`, `TableFull`) leaves the header and the table
//!   unchanged.
//!
//! Not promised: iteration order; shrinking (removing keys never shrinks the table, [`free`]
//! releases it).
//!
//! [`free`]: HashTable::free

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};

use crate::arena::{Arena, GRANULE};
use crate::error::{Error, Result};
use crate::mem::Mem;
use crate::pod::Pod;

/// Bytes of a full page of buckets.
const PAGE: usize = 4096;
/// Most slots per bucket: one tag byte each in the meta word, whose last byte is the overflow
/// count.
const MAX_SLOTS: usize = 7;
/// Largest bucket, in bytes.
const MAX_BUCKET: usize = 512;
/// Most buckets a table may have, as log2 (keeps capacity below `u32::MAX` entries).
pub const MAX_BUCKET_BITS: u32 = 28;
/// Keys per stage of a bulk lookup.
const BURST: usize = 64;
/// Buckets a displacement search may visit before the insert grows the table instead.
const MAX_PATH_NODES: usize = 1024;
/// Rebuilds attempted (new seed, larger where the load warrants) before `TableFull`.
const MAX_REBUILDS: u32 = 8;
/// Shift of the overflow count in the meta word.
const OVERFLOW_SHIFT: u32 = 56;

const LSB: u64 = 0x0101_0101_0101_0101;
const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// A key of an exact-match table.
///
/// `hash` must depend on every byte of the key and mix well: the table takes the primary bucket
/// from its low bits, the alternative bucket from bits 32 and up and a tag from the top byte.
pub trait HashKey: Pod + Eq {
    /// The key's hash.
    fn hash(&self) -> u64;

    /// The key's hash under a table's secret seed. The default mixes the seed into [`hash`];
    /// keys whose bytes an outsider may choose (learned MACs) should override it so that the
    /// seed enters before the key is compressed, which makes bucket collisions unpredictable.
    ///
    /// [`hash`]: HashKey::hash
    #[inline(always)]
    fn hash_seeded(&self, seed: u64) -> u64 {
        mix64(self.hash() ^ seed)
    }
}

/// The 64-bit finaliser of MurmurHash3: a bijection with full avalanche.
#[inline(always)]
pub const fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Folded 64×64 → 128-bit multiply (as in wyhash): compresses two words into one.
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Hash of a 128-bit key under `seed`: the seed enters both factors, so an outsider who does not
/// know it cannot aim keys at one bucket.
#[inline(always)]
fn hash128(lo: u64, hi: u64, seed: u64) -> u64 {
    mix64(fold_mul(
        lo ^ seed ^ 0xa076_1d64_78bd_642f,
        hi ^ seed.rotate_left(32) ^ 0xe703_7ed1_a0b4_28db,
    ))
}

impl HashKey for u64 {
    #[inline(always)]
    fn hash(&self) -> u64 {
        mix64(*self)
    }
    #[inline(always)]
    fn hash_seeded(&self, seed: u64) -> u64 {
        mix64(*self ^ seed)
    }
}

impl HashKey for u32 {
    #[inline(always)]
    fn hash(&self) -> u64 {
        mix64(u64::from(*self))
    }
    #[inline(always)]
    fn hash_seeded(&self, seed: u64) -> u64 {
        mix64(u64::from(*self) ^ seed)
    }
}

impl HashKey for u128 {
    #[inline(always)]
    fn hash(&self) -> u64 {
        hash128(*self as u64, (*self >> 64) as u64, 0)
    }
    #[inline(always)]
    fn hash_seeded(&self, seed: u64) -> u64 {
        hash128(*self as u64, (*self >> 64) as u64, seed)
    }
}

impl HashKey for [u64; 2] {
    #[inline(always)]
    fn hash(&self) -> u64 {
        hash128(self[0], self[1], 0)
    }
    #[inline(always)]
    fn hash_seeded(&self, seed: u64) -> u64 {
        hash128(self[0], self[1], seed)
    }
}

impl HashKey for [u8; 16] {
    #[inline(always)]
    fn hash(&self) -> u64 {
        self.hash_seeded(0)
    }
    #[inline(always)]
    fn hash_seeded(&self, seed: u64) -> u64 {
        let w = u128::from_le_bytes(*self);
        hash128(w as u64, (w >> 64) as u64, seed)
    }
}

impl HashKey for [u8; 8] {
    #[inline(always)]
    fn hash(&self) -> u64 {
        mix64(u64::from_le_bytes(*self))
    }
    #[inline(always)]
    fn hash_seeded(&self, seed: u64) -> u64 {
        mix64(u64::from_le_bytes(*self) ^ seed)
    }
}

impl HashKey for [u8; 6] {
    #[inline(always)]
    fn hash(&self) -> u64 {
        self.hash_seeded(0)
    }
    #[inline(always)]
    fn hash_seeded(&self, seed: u64) -> u64 {
        let [a, b, c, d, e, f] = *self;
        mix64(u64::from_le_bytes([a, b, c, d, e, f, 0, 0]) ^ seed)
    }
}

/// Header of a hash table, stored inline in its parent. All-zero is the empty table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HashHdr {
    /// Offset of the directory block, `[u64; pages]` of page offsets (0: empty table).
    pub dir: u64,
    /// Seed of the key hash, chosen by the writer when it builds the table.
    pub seed: u64,
    /// log2 of the number of buckets.
    pub bucket_bits: u32,
    /// Number of entries.
    pub count: u32,
}

// SAFETY: repr(C) of two u64 and two u32: no padding (24 bytes, checked below), no pointers,
// every bit pattern valid (readers treat bad offsets as misses), alignment 8.
unsafe impl Pod for HashHdr {}
crate::assert_layout!(HashHdr, 24, 8);

/// Where a key may live, from its hash.
#[derive(Clone, Copy, Debug, Default)]
struct Coord {
    tag: u8,
    b1: u32,
    b2: u32,
}

#[inline(always)]
fn coord(h: u64, bits: u32) -> Coord {
    let mask = ((1u64 << bits) - 1) as u32;
    let b1 = h as u32 & mask;
    // An odd distance: the two buckets differ whenever the table has two or more.
    let b2 = b1 ^ (((h >> 32) as u32 | 1) & mask);
    Coord {
        tag: ((h >> 56) as u8).max(1),
        b1,
        b2,
    }
}

/// Bit 7 of each byte of `meta` that equals `tag`, all other bits clear (exact, no borrow
/// between bytes).
#[inline(always)]
fn tag_matches(meta: u64, tag: u8) -> u64 {
    let x = meta ^ LSB.wrapping_mul(u64::from(tag));
    !(((x & LOW7).wrapping_add(LOW7)) | x | LOW7)
}

#[inline(always)]
fn slot_tag(meta: u64, slot: usize) -> u8 {
    (meta >> (8 * slot)) as u8
}

#[inline(always)]
fn overflow(meta: u64) -> u8 {
    (meta >> OVERFLOW_SHIFT) as u8
}

/// Sizes of a table with `2^bits` buckets.
#[derive(Clone, Copy, Debug)]
struct Geo {
    bits: u32,
    /// log2 of buckets per page.
    shift: u32,
    pages: usize,
    page_bytes: usize,
    /// Bytes of the directory block: 8 per page, at least one allocation granule (so that the
    /// sizes `trace` reports add up to the arena's live bytes).
    dir_bytes: usize,
}

/// Where an existing key is.
#[derive(Clone, Copy, Debug)]
struct Found {
    bucket: u32,
    slot: usize,
    /// The key's primary bucket (≠ `bucket` when it lives in its alternative).
    primary: u32,
}

/// A node of the displacement search: a bucket reached by moving the key in `slot` of the
/// parent's bucket.
#[derive(Clone, Copy, Debug)]
struct PathNode {
    bucket: u32,
    parent: usize,
    slot: usize,
}

fn corrupt() -> Error {
    Error::Invalid {
        what: "hash table: a directory or page offset lies outside the table region; the \
               region is corrupt, remove it so control recreates it"
            .into(),
    }
}

fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x6c61_6365_u64)
}

/// Exact-match table of `K → V` in shared memory; all functions are associated (the table's
/// state is its [`HashHdr`] and the blocks it points to). See the module docs.
pub struct HashTable<K, V>(PhantomData<fn() -> (K, V)>);

impl<K, V> fmt::Debug for HashTable<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HashTable")
    }
}

impl<K: HashKey, V: Pod> HashTable<K, V> {
    const KS: usize = size_of::<K>();
    const VS: usize = size_of::<V>();

    /// Bytes of a bucket of `n` slots.
    const fn bytes_for(n: usize) -> usize {
        let vals = (n * Self::KS).next_multiple_of(align_of::<V>());
        (vals + n * Self::VS).next_multiple_of(8) + 8
    }

    const fn slots_in(bucket: usize) -> usize {
        let mut n = 0;
        while n < MAX_SLOTS && Self::bytes_for(n + 1) <= bucket {
            n += 1;
        }
        n
    }

    /// Bytes of a bucket: the fewest cache lines that hold three slots.
    pub const BUCKET_BYTES: usize = {
        let mut b = 64;
        while b < MAX_BUCKET && Self::slots_in(b) < 3 {
            b *= 2;
        }
        b
    };
    /// Slots per bucket.
    pub const SLOTS: usize = Self::slots_in(Self::BUCKET_BYTES);
    const LINES: usize = Self::BUCKET_BYTES / 64;
    const VAL_OFF: usize = (Self::SLOTS * Self::KS).next_multiple_of(align_of::<V>());
    const META_OFF: usize = Self::BUCKET_BYTES - 8;
    /// log2 of buckets per full page.
    const PAGE_SHIFT: u32 = (PAGE / Self::BUCKET_BYTES).trailing_zeros();
    const SLOT_MASK: u64 = {
        let mut m = 0;
        let mut i = 0;
        while i < Self::SLOTS {
            m |= 0x80 << (8 * i);
            i += 1;
        }
        m
    };
    const LAYOUT_OK: () = assert!(
        Self::SLOTS >= 2 && align_of::<K>() <= 16 && align_of::<V>() <= 16,
        "hash table: key and value too large (two slots must fit a 512-byte bucket)"
    );

    fn geo(bits: u32) -> Geo {
        let bits = bits.min(MAX_BUCKET_BITS);
        let shift = bits.min(Self::PAGE_SHIFT);
        Geo {
            bits,
            shift,
            pages: 1 << (bits - shift),
            page_bytes: Self::BUCKET_BYTES << shift,
            dir_bytes: (8 << (bits - shift)).max(GRANULE as usize),
        }
    }

    /// Entries a table of `2^bits` buckets holds before it grows.
    fn max_entries(bits: u32) -> usize {
        let slots = Self::SLOTS << bits;
        if Self::SLOTS <= 2 {
            slots * 85 / 100
        } else {
            slots * 9 / 10
        }
    }

    /// The fewest buckets (log2, at least 1) that hold `n` entries below the load limit.
    fn bits_for(n: usize) -> Option<u32> {
        (1..=MAX_BUCKET_BITS).find(|&b| Self::max_entries(b) >= n)
    }

    fn table_full() -> Error {
        Error::TableFull {
            table: "hash table",
            capacity: Self::max_entries(MAX_BUCKET_BITS) as u64,
        }
    }

    // ---------------------------------------------------------------------------------------
    // Reader side: no panics, no allocation.

    /// Number of entries.
    #[inline]
    pub fn len(hdr: &HashHdr) -> usize {
        hdr.count as usize
    }

    /// Whether the table has no entries.
    #[inline]
    pub fn is_empty(hdr: &HashHdr) -> bool {
        hdr.count == 0
    }

    /// Entries the table holds before its next growth (0 for the empty header).
    pub fn capacity(hdr: &HashHdr) -> usize {
        if hdr.dir == 0 {
            0
        } else {
            Self::max_entries(hdr.bucket_bits.min(MAX_BUCKET_BITS))
        }
    }

    #[inline(always)]
    fn bucket_at(mem: Mem<'_>, dir: u64, shift: u32, b: u32) -> Option<u64> {
        let page = *mem.get::<u64>(dir.wrapping_add(u64::from(b >> shift) * 8))?;
        if page == 0 {
            return None;
        }
        let within = u64::from(b & ((1u32 << shift) - 1));
        Some(page.wrapping_add(within * Self::BUCKET_BYTES as u64))
    }

    #[inline(always)]
    fn prefetch_bucket(mem: Mem<'_>, bucket: u64) {
        for line in 0..Self::LINES {
            mem.prefetch(bucket.wrapping_add(64 * line as u64));
        }
    }

    #[inline(always)]
    fn slot_of(mem: Mem<'_>, bucket: u64, meta: u64, tag: u8, key: &K) -> Option<usize> {
        let mut m = tag_matches(meta, tag) & Self::SLOT_MASK;
        while m != 0 {
            let i = (m.trailing_zeros() / 8) as usize;
            if mem.get::<K>(bucket.wrapping_add((i * Self::KS) as u64)) == Some(key) {
                return Some(i);
            }
            m &= m - 1;
        }
        None
    }

    /// Looks `key` up in one bucket: the value if present, else whether the key may be in
    /// its alternative bucket (overflow count of this, its primary, bucket).
    #[inline(always)]
    fn search<'a>(mem: Mem<'a>, bucket: u64, tag: u8, key: &K) -> (Option<&'a V>, bool) {
        let Some(&meta) = mem.get::<u64>(bucket.wrapping_add(Self::META_OFF as u64)) else {
            return (None, false);
        };
        match Self::slot_of(mem, bucket, meta, tag, key) {
            Some(i) => {
                let at = bucket.wrapping_add((Self::VAL_OFF + i * Self::VS) as u64);
                (mem.get::<V>(at), false)
            }
            None => (None, overflow(meta) != 0),
        }
    }

    /// The value of `key`, if present.
    #[inline]
    pub fn get<'a>(mem: Mem<'a>, hdr: &HashHdr, key: &K) -> Option<&'a V> {
        let () = Self::LAYOUT_OK;
        if hdr.dir == 0 {
            return None;
        }
        let bits = hdr.bucket_bits.min(MAX_BUCKET_BITS);
        let shift = bits.min(Self::PAGE_SHIFT);
        let c = coord(key.hash_seeded(hdr.seed), bits);
        let b = Self::bucket_at(mem, hdr.dir, shift, c.b1)?;
        match Self::search(mem, b, c.tag, key) {
            (Some(v), _) => Some(v),
            (None, true) => {
                let b = Self::bucket_at(mem, hdr.dir, shift, c.b2)?;
                Self::search(mem, b, c.tag, key).0
            }
            (None, false) => None,
        }
    }

    /// Prefetches the primary bucket of `key` (for callers that pipeline lookups themselves).
    #[inline]
    pub fn prefetch(mem: Mem<'_>, hdr: &HashHdr, key: &K) {
        if hdr.dir == 0 {
            return;
        }
        let bits = hdr.bucket_bits.min(MAX_BUCKET_BITS);
        let c = coord(key.hash_seeded(hdr.seed), bits);
        if let Some(b) = Self::bucket_at(mem, hdr.dir, bits.min(Self::PAGE_SHIFT), c.b1) {
            Self::prefetch_bucket(mem, b);
        }
    }

    /// Looks up `keys[i]` into `out[i]` (copies of the values) for every `i` below the shorter
    /// length, in bursts of 64 whose memory accesses overlap: hash and prefetch every primary
    /// bucket, then search them, prefetching the alternative bucket where the primary one says
    /// the key may have moved, then search those. Returns the number of hits.
    pub fn get_bulk(mem: Mem<'_>, hdr: &HashHdr, keys: &[K], out: &mut [Option<V>]) -> usize {
        let n = keys.len().min(out.len());
        let mut hits = 0;
        Self::lookup_each(mem, hdr, &keys[..n], |i, v| {
            if let Some(o) = out.get_mut(i) {
                *o = v.copied();
            }
            hits += usize::from(v.is_some());
        });
        hits
    }

    /// [`get_bulk`](Self::get_bulk) returning references into the table instead of copies.
    pub fn get_bulk_ref<'a>(
        mem: Mem<'a>,
        hdr: &HashHdr,
        keys: &[K],
        out: &mut [Option<&'a V>],
    ) -> usize {
        let n = keys.len().min(out.len());
        let mut hits = 0;
        Self::lookup_each(mem, hdr, &keys[..n], |i, v| {
            if let Some(o) = out.get_mut(i) {
                *o = v;
            }
            hits += usize::from(v.is_some());
        });
        hits
    }

    /// Calls `f(i, value)` once for every `keys[i]`, in no particular order.
    #[inline(always)]
    fn lookup_each<'a>(
        mem: Mem<'a>,
        hdr: &HashHdr,
        keys: &[K],
        mut f: impl FnMut(usize, Option<&'a V>),
    ) {
        let () = Self::LAYOUT_OK;
        if hdr.dir == 0 {
            (0..keys.len()).for_each(|i| f(i, None));
            return;
        }
        for (c, chunk) in keys.chunks(BURST).enumerate() {
            Self::burst(mem, hdr, chunk, &mut |i, v| f(c * BURST + i, v));
        }
    }

    #[inline(always)]
    fn burst<'a>(
        mem: Mem<'a>,
        hdr: &HashHdr,
        keys: &[K],
        f: &mut impl FnMut(usize, Option<&'a V>),
    ) {
        let bits = hdr.bucket_bits.min(MAX_BUCKET_BITS);
        let shift = bits.min(Self::PAGE_SHIFT);
        let (dir, seed) = (hdr.dir, hdr.seed);
        let mut coords = [Coord::default(); BURST];
        let mut at = [0u64; BURST];
        // Stage 1: hash, find and prefetch every primary bucket.
        for ((k, c), a) in keys.iter().zip(coords.iter_mut()).zip(at.iter_mut()) {
            *c = coord(k.hash_seeded(seed), bits);
            *a = Self::bucket_at(mem, dir, shift, c.b1).unwrap_or(0);
            Self::prefetch_bucket(mem, *a);
        }
        // Stage 2: search the primary buckets; queue the keys that may have moved.
        let mut pending = [0u8; BURST];
        let mut np = 0;
        for (i, ((k, c), a)) in keys
            .iter()
            .zip(coords.iter())
            .zip(at.iter_mut())
            .enumerate()
        {
            if *a == 0 {
                f(i, None);
                continue;
            }
            match Self::search(mem, *a, c.tag, k) {
                (Some(v), _) => f(i, Some(v)),
                (None, true) => {
                    *a = Self::bucket_at(mem, dir, shift, c.b2).unwrap_or(0);
                    Self::prefetch_bucket(mem, *a);
                    if let Some(p) = pending.get_mut(np) {
                        *p = i as u8;
                        np += 1;
                    }
                }
                (None, false) => f(i, None),
            }
        }
        // Stage 3: the alternative buckets.
        for &i in pending.iter().take(np) {
            let i = usize::from(i);
            if let (Some(k), Some(c), Some(&a)) = (keys.get(i), coords.get(i), at.get(i)) {
                let v = if a == 0 {
                    None
                } else {
                    Self::search(mem, a, c.tag, k).0
                };
                f(i, v);
            }
        }
    }

    /// Every entry, in bucket order.
    pub fn iter<'a>(mem: Mem<'a>, hdr: &HashHdr) -> impl Iterator<Item = (&'a K, &'a V)> + 'a {
        let h = *hdr;
        let g = Self::geo(h.bucket_bits);
        let buckets: u64 = if h.dir == 0 { 0 } else { 1 << g.bits };
        (0..buckets).flat_map(move |b| {
            let at = Self::bucket_at(mem, h.dir, g.shift, b as u32);
            let meta = at
                .and_then(|a| mem.get::<u64>(a.wrapping_add(Self::META_OFF as u64)))
                .copied()
                .unwrap_or(0);
            (0..Self::SLOTS).filter_map(move |s| {
                let a = at?;
                if slot_tag(meta, s) == 0 {
                    return None;
                }
                let k = mem.get::<K>(a.wrapping_add((s * Self::KS) as u64))?;
                let v = mem.get::<V>(a.wrapping_add((Self::VAL_OFF + s * Self::VS) as u64))?;
                Some((k, v))
            })
        })
    }

    /// Appends every block of the table, with its allocated size, to `out` (to rebuild the
    /// allocator after a writer restart).
    pub fn trace(mem: Mem<'_>, hdr: &HashHdr, out: &mut Vec<(u64, u64)>) {
        if hdr.dir == 0 {
            return;
        }
        let g = Self::geo(hdr.bucket_bits);
        out.push((hdr.dir, g.dir_bytes as u64));
        if let Some(pages) = mem.slice::<u64>(hdr.dir, g.pages) {
            out.extend(
                pages
                    .iter()
                    .filter(|&&p| p != 0)
                    .map(|&p| (p, g.page_bytes as u64)),
            );
        }
    }

    // ---------------------------------------------------------------------------------------
    // Writer side.

    fn w_bucket(mem: Mem<'_>, hdr: &HashHdr, b: u32) -> Result<u64> {
        let g = Self::geo(hdr.bucket_bits);
        Self::bucket_at(mem, hdr.dir, g.shift, b).ok_or_else(corrupt)
    }

    fn w_meta(mem: Mem<'_>, bucket: u64) -> Result<u64> {
        mem.get::<u64>(bucket + Self::META_OFF as u64)
            .copied()
            .ok_or_else(corrupt)
    }

    fn w_key(mem: Mem<'_>, bucket: u64, slot: usize) -> Result<K> {
        mem.get::<K>(bucket + (slot * Self::KS) as u64)
            .copied()
            .ok_or_else(corrupt)
    }

    fn w_val(mem: Mem<'_>, bucket: u64, slot: usize) -> Result<V> {
        mem.get::<V>(bucket + (Self::VAL_OFF + slot * Self::VS) as u64)
            .copied()
            .ok_or_else(corrupt)
    }

    fn locate(mem: Mem<'_>, hdr: &HashHdr, key: &K) -> Result<Option<Found>> {
        let c = coord(key.hash_seeded(hdr.seed), Self::geo(hdr.bucket_bits).bits);
        let b = Self::w_bucket(mem, hdr, c.b1)?;
        let meta = Self::w_meta(mem, b)?;
        if let Some(slot) = Self::slot_of(mem, b, meta, c.tag, key) {
            return Ok(Some(Found {
                bucket: c.b1,
                slot,
                primary: c.b1,
            }));
        }
        if overflow(meta) == 0 {
            return Ok(None);
        }
        let b = Self::w_bucket(mem, hdr, c.b2)?;
        let meta = Self::w_meta(mem, b)?;
        Ok(Self::slot_of(mem, b, meta, c.tag, key).map(|slot| Found {
            bucket: c.b2,
            slot,
            primary: c.b1,
        }))
    }

    /// Makes the pages holding `buckets` (and the directory, if a page moves) fresh, so they
    /// may be changed in place. Allocates everything before changing anything: on error the
    /// header and all blocks are as they were.
    fn make_writable(arena: &mut Arena, hdr: &mut HashHdr, buckets: &[u32]) -> Result<()> {
        let g = Self::geo(hdr.bucket_bits);
        let mut stale: Vec<(usize, u64)> = Vec::with_capacity(buckets.len());
        {
            let mem = arena.mem();
            let dir = mem.slice::<u64>(hdr.dir, g.pages).ok_or_else(corrupt)?;
            for &b in buckets {
                let p = (b >> g.shift) as usize;
                let off = *dir.get(p).ok_or_else(corrupt)?;
                if !arena.is_fresh(off) && !stale.iter().any(|s| s.0 == p) {
                    stale.push((p, off));
                }
            }
        }
        if stale.is_empty() {
            return Ok(());
        }
        let dir_bytes = g.dir_bytes;
        let new_dir = if arena.is_fresh(hdr.dir) {
            hdr.dir
        } else {
            arena.alloc_copy(hdr.dir, dir_bytes)?
        };
        let mut copies = Vec::with_capacity(stale.len());
        for &(_, off) in &stale {
            match arena.alloc_copy(off, g.page_bytes) {
                Ok(c) => copies.push(c),
                Err(e) => {
                    for c in copies {
                        arena.retire(c, g.page_bytes);
                    }
                    if new_dir != hdr.dir {
                        arena.retire(new_dir, dir_bytes);
                    }
                    return Err(e);
                }
            }
        }
        // Nothing can fail from here on.
        let dir = arena.mem_mut().slice_mut::<u64>(new_dir, g.pages);
        for (&(p, _), &c) in stale.iter().zip(&copies) {
            dir[p] = c;
        }
        for &(_, off) in &stale {
            arena.retire(off, g.page_bytes);
        }
        if new_dir != hdr.dir {
            arena.retire(hdr.dir, dir_bytes);
            hdr.dir = new_dir;
        }
        Ok(())
    }

    fn write_slot(
        arena: &mut Arena,
        hdr: &HashHdr,
        b: u32,
        slot: usize,
        tag: u8,
        key: &K,
        value: &V,
    ) -> Result<()> {
        let at = Self::w_bucket(arena.mem(), hdr, b)?;
        let m = arena.mem_mut();
        *m.get_mut::<K>(at + (slot * Self::KS) as u64) = *key;
        *m.get_mut::<V>(at + (Self::VAL_OFF + slot * Self::VS) as u64) = *value;
        let meta = m.get_mut::<u64>(at + Self::META_OFF as u64);
        *meta = (*meta & !(0xff << (8 * slot))) | (u64::from(tag) << (8 * slot));
        Ok(())
    }

    fn clear_slot(arena: &mut Arena, hdr: &HashHdr, b: u32, slot: usize) -> Result<()> {
        let at = Self::w_bucket(arena.mem(), hdr, b)?;
        let m = arena.mem_mut();
        m.zero(at + (slot * Self::KS) as u64, Self::KS);
        m.zero(at + (Self::VAL_OFF + slot * Self::VS) as u64, Self::VS);
        *m.get_mut::<u64>(at + Self::META_OFF as u64) &= !(0xff << (8 * slot));
        Ok(())
    }

    /// Adds `up ? 1 : -1` to a bucket's overflow count; a saturated count stays saturated (it
    /// may then overstate, which only costs lookups a visit to the alternative bucket).
    fn bump_overflow(arena: &mut Arena, hdr: &HashHdr, b: u32, up: bool) -> Result<()> {
        let at = Self::w_bucket(arena.mem(), hdr, b)?;
        let meta = arena.mem_mut().get_mut::<u64>(at + Self::META_OFF as u64);
        let n = overflow(*meta);
        let n = match (n, up) {
            (u8::MAX, _) => u8::MAX,
            (n, true) => n + 1,
            (n, false) => n.saturating_sub(1),
        };
        *meta = (*meta & !(0xff << OVERFLOW_SHIFT)) | (u64::from(n) << OVERFLOW_SHIFT);
        Ok(())
    }

    /// Shortest chain of moves that frees a slot in one of `c`'s buckets: `[(root bucket,
    /// slot), (next bucket, slot), …, (last bucket, empty slot)]`; the key in each slot but
    /// the last moves to the next bucket, its other candidate. No bucket appears twice.
    fn find_path(mem: Mem<'_>, hdr: &HashHdr, c: Coord) -> Result<Option<Vec<(u32, usize)>>> {
        let bits = Self::geo(hdr.bucket_bits).bits;
        // Most inserts find room in one of their own buckets: no search structures then.
        for b in [c.b1, c.b2] {
            let meta = Self::w_meta(mem, Self::w_bucket(mem, hdr, b)?)?;
            let empty = tag_matches(meta, 0) & Self::SLOT_MASK;
            if empty != 0 {
                return Ok(Some(vec![(b, (empty.trailing_zeros() / 8) as usize)]));
            }
        }
        let mut nodes = vec![PathNode {
            bucket: c.b1,
            parent: usize::MAX,
            slot: 0,
        }];
        if c.b2 != c.b1 {
            nodes.push(PathNode {
                bucket: c.b2,
                parent: usize::MAX,
                slot: 0,
            });
        }
        let mut seen: HashSet<u32> = nodes.iter().map(|n| n.bucket).collect();
        let mut head = 0;
        while let Some(&node) = nodes.get(head) {
            let at = Self::w_bucket(mem, hdr, node.bucket)?;
            let meta = Self::w_meta(mem, at)?;
            let empty = tag_matches(meta, 0) & Self::SLOT_MASK;
            if empty != 0 {
                let mut path = vec![(node.bucket, (empty.trailing_zeros() / 8) as usize)];
                let mut cur = node;
                while cur.parent != usize::MAX {
                    let parent = nodes[cur.parent];
                    path.push((parent.bucket, cur.slot));
                    cur = parent;
                }
                path.reverse();
                return Ok(Some(path));
            }
            if nodes.len() < MAX_PATH_NODES {
                for slot in 0..Self::SLOTS {
                    let k = Self::w_key(mem, at, slot)?;
                    let kc = coord(k.hash_seeded(hdr.seed), bits);
                    let other = if kc.b1 == node.bucket { kc.b2 } else { kc.b1 };
                    if seen.insert(other) {
                        nodes.push(PathNode {
                            bucket: other,
                            parent: head,
                            slot,
                        });
                    }
                }
            }
            head += 1;
        }
        Ok(None)
    }

    /// Performs the moves of `path` and puts the new entry in its first slot. `fresh`: the
    /// whole table is fresh (a rebuild), no page needs copying.
    fn apply_path(
        arena: &mut Arena,
        hdr: &mut HashHdr,
        path: &[(u32, usize)],
        c: Coord,
        key: &K,
        value: &V,
        fresh: bool,
    ) -> Result<()> {
        if !fresh {
            let mut buckets: Vec<u32> = path.iter().map(|p| p.0).collect();
            buckets.push(c.b1);
            Self::make_writable(arena, hdr, &buckets)?;
        }
        let bits = Self::geo(hdr.bucket_bits).bits;
        for pair in path.windows(2).rev() {
            let ((from, fs), (to, ts)) = (pair[0], pair[1]);
            let at = Self::w_bucket(arena.mem(), hdr, from)?;
            let k = Self::w_key(arena.mem(), at, fs)?;
            let v = Self::w_val(arena.mem(), at, fs)?;
            let kc = coord(k.hash_seeded(hdr.seed), bits);
            Self::write_slot(arena, hdr, to, ts, kc.tag, &k, &v)?;
            // Moving to the primary bucket leaves the alternative one, and vice versa.
            Self::bump_overflow(arena, hdr, kc.b1, to != kc.b1)?;
        }
        let (b0, s0) = path[0];
        Self::write_slot(arena, hdr, b0, s0, c.tag, key, value)?;
        if b0 != c.b1 {
            Self::bump_overflow(arena, hdr, c.b1, true)?;
        }
        Ok(())
    }

    /// A fresh, empty table of `2^bits` buckets.
    fn alloc_table(arena: &mut Arena, bits: u32, seed: u64) -> Result<HashHdr> {
        let g = Self::geo(bits);
        let dir = arena.alloc(g.dir_bytes)?;
        for p in 0..g.pages {
            match arena.alloc(g.page_bytes) {
                Ok(off) => arena.mem_mut().slice_mut::<u64>(dir, g.pages)[p] = off,
                Err(e) => {
                    let half = HashHdr {
                        dir,
                        seed,
                        bucket_bits: g.bits,
                        count: 0,
                    };
                    Self::release(arena, &half);
                    return Err(e);
                }
            }
        }
        Ok(HashHdr {
            dir,
            seed,
            bucket_bits: g.bits,
            count: 0,
        })
    }

    fn release(arena: &mut Arena, hdr: &HashHdr) {
        let mut blocks = Vec::new();
        Self::trace(arena.mem(), hdr, &mut blocks);
        for (off, size) in blocks {
            arena.retire(off, size as usize);
        }
    }

    /// Rebuilds the table (plus `extra`, a key not in it) into fresh blocks of at least
    /// `2^bits` buckets, then retires the old blocks. On error nothing has changed.
    fn rebuild(
        arena: &mut Arena,
        hdr: &mut HashHdr,
        bits: u32,
        mut seed: u64,
        extra: Option<(K, V)>,
    ) -> Result<()> {
        let mut entries: Vec<(K, V)> = Self::iter(arena.mem(), hdr)
            .map(|(k, v)| (*k, *v))
            .collect();
        entries.extend(extra);
        let mut bits = bits.max(Self::bits_for(entries.len()).ok_or_else(Self::table_full)?);
        for _ in 0..MAX_REBUILDS {
            if bits > MAX_BUCKET_BITS {
                break;
            }
            let mut new = Self::alloc_table(arena, bits, seed)?;
            match Self::fill(arena, &mut new, &entries) {
                Ok(true) => {
                    new.count = entries.len() as u32;
                    Self::release(arena, hdr);
                    *hdr = new;
                    return Ok(());
                }
                Ok(false) => Self::release(arena, &new),
                Err(e) => {
                    Self::release(arena, &new);
                    return Err(e);
                }
            }
            // No room for some key: try another seed, and more buckets unless the table was
            // less than half full (then the keys collide, more room would not help).
            seed = mix64(seed ^ 0x9e37_79b9_7f4a_7c15);
            if entries.len() * 2 >= Self::SLOTS << bits {
                bits += 1;
            }
        }
        Err(Self::table_full())
    }

    /// Places `entries` (distinct keys) into the fresh table `new`; false if one found no slot.
    fn fill(arena: &mut Arena, new: &mut HashHdr, entries: &[(K, V)]) -> Result<bool> {
        let bits = new.bucket_bits;
        for (k, v) in entries {
            let c = coord(k.hash_seeded(new.seed), bits);
            match Self::find_path(arena.mem(), new, c)? {
                Some(path) => Self::apply_path(arena, new, &path, c, k, v, true)?,
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Sizes the table for at least `entries` entries (building it if empty, rebuilding it if
    /// smaller), so that inserting up to that many does not grow it.
    pub fn with_capacity(arena: &mut Arena, hdr: &mut HashHdr, entries: usize) -> Result<()> {
        let seed = if hdr.dir == 0 {
            random_seed()
        } else {
            hdr.seed
        };
        Self::with_capacity_seeded(arena, hdr, entries, seed)
    }

    /// [`with_capacity`](Self::with_capacity) with a chosen hash seed (for reproducible tests
    /// and benchmarks; production tables should use a random one). The seed applies only if
    /// the table is built or rebuilt, and a later rebuild after a failed insert derives a new
    /// one from it.
    pub fn with_capacity_seeded(
        arena: &mut Arena,
        hdr: &mut HashHdr,
        entries: usize,
        seed: u64,
    ) -> Result<()> {
        let () = Self::LAYOUT_OK;
        let bits = Self::bits_for(entries.max(1)).ok_or_else(Self::table_full)?;
        if hdr.dir != 0 && bits <= hdr.bucket_bits {
            return Ok(());
        }
        Self::rebuild(arena, hdr, bits, seed, None)
    }

    /// Inserts or replaces; returns the value replaced. On error (`RegionFull`, or `TableFull`
    /// when even a rebuilt table cannot place the key) nothing has changed.
    pub fn insert(arena: &mut Arena, hdr: &mut HashHdr, key: K, value: V) -> Result<Option<V>> {
        let () = Self::LAYOUT_OK;
        if hdr.dir == 0 {
            Self::rebuild(arena, hdr, 1, random_seed(), Some((key, value)))?;
            return Ok(None);
        }
        if let Some(f) = Self::locate(arena.mem(), hdr, &key)? {
            let at = Self::w_bucket(arena.mem(), hdr, f.bucket)?;
            let old = Self::w_val(arena.mem(), at, f.slot)?;
            Self::make_writable(arena, hdr, &[f.bucket])?;
            let at = Self::w_bucket(arena.mem(), hdr, f.bucket)?;
            *arena
                .mem_mut()
                .get_mut::<V>(at + (Self::VAL_OFF + f.slot * Self::VS) as u64) = value;
            return Ok(Some(old));
        }
        let bits = Self::geo(hdr.bucket_bits).bits;
        if hdr.count as usize >= Self::max_entries(bits) {
            Self::rebuild(arena, hdr, bits + 1, hdr.seed, Some((key, value)))?;
            return Ok(None);
        }
        let c = coord(key.hash_seeded(hdr.seed), bits);
        match Self::find_path(arena.mem(), hdr, c)? {
            Some(path) => {
                Self::apply_path(arena, hdr, &path, c, &key, &value, false)?;
                hdr.count += 1;
            }
            None => {
                // No displacement path: rebuild with another seed, larger unless the table is
                // less than half full.
                let half = hdr.count as usize * 2 >= Self::SLOTS << bits;
                let seed = mix64(hdr.seed ^ 0x9e37_79b9_7f4a_7c15);
                Self::rebuild(arena, hdr, bits + u32::from(half), seed, Some((key, value)))?;
            }
        }
        Ok(None)
    }

    /// Removes `key`; returns its value. On error (`RegionFull` copying a page) nothing has
    /// changed.
    pub fn remove(arena: &mut Arena, hdr: &mut HashHdr, key: &K) -> Result<Option<V>> {
        if hdr.dir == 0 {
            return Ok(None);
        }
        let Some(f) = Self::locate(arena.mem(), hdr, key)? else {
            return Ok(None);
        };
        let at = Self::w_bucket(arena.mem(), hdr, f.bucket)?;
        let old = Self::w_val(arena.mem(), at, f.slot)?;
        Self::make_writable(arena, hdr, &[f.bucket, f.primary])?;
        Self::clear_slot(arena, hdr, f.bucket, f.slot)?;
        if f.bucket != f.primary {
            Self::bump_overflow(arena, hdr, f.primary, false)?;
        }
        hdr.count -= 1;
        Ok(Some(old))
    }

    /// Releases every block of the table (after a grace period where published) and resets
    /// the header to empty.
    pub fn free(arena: &mut Arena, hdr: &mut HashHdr) {
        Self::release(arena, hdr);
        *hdr = HashHdr::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::MemMut;
    use std::collections::HashMap;
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

    fn pages(n: usize) -> Vec<Page> {
        vec![Page([0; 4096]); n]
    }

    fn traced_bytes<K: HashKey, V: Pod>(a: &Arena, hdr: &HashHdr) -> u64 {
        let mut blocks = Vec::new();
        HashTable::<K, V>::trace(a.mem(), hdr, &mut blocks);
        let mut offs: Vec<u64> = blocks.iter().map(|b| b.0).collect();
        offs.sort_unstable();
        offs.dedup();
        assert_eq!(offs.len(), blocks.len(), "a block traced twice");
        blocks.iter().map(|b| b.1).sum()
    }

    /// A key whose hash ignores it: every key collides.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    #[repr(transparent)]
    struct Clash([u32; 3]);
    // SAFETY: transparent over [u32; 3]: no padding, every bit pattern valid, align 4.
    unsafe impl Pod for Clash {}
    impl HashKey for Clash {
        fn hash(&self) -> u64 {
            7
        }
    }

    /// Checks the table's internal invariants: every key sits in one of its two buckets under
    /// its own tag, the overflow counts are exact, `count` is right, no key appears twice.
    fn check_invariants<K: HashKey + std::hash::Hash, V: Pod>(a: &Arena, h: &HashHdr) {
        type T<K, V> = HashTable<K, V>;
        if h.dir == 0 {
            assert_eq!(*h, HashHdr::default());
            return;
        }
        let mem = a.mem();
        let g = T::<K, V>::geo(h.bucket_bits);
        let mut moved = vec![0u32; 1 << g.bits];
        let mut keys = std::collections::HashSet::new();
        for b in 0..(1u32 << g.bits) {
            let at = T::<K, V>::w_bucket(mem, h, b).unwrap();
            let meta = T::<K, V>::w_meta(mem, at).unwrap();
            for s in 0..T::<K, V>::SLOTS {
                if slot_tag(meta, s) == 0 {
                    continue;
                }
                let k = T::<K, V>::w_key(mem, at, s).unwrap();
                let c = coord(k.hash_seeded(h.seed), g.bits);
                assert_eq!(slot_tag(meta, s), c.tag);
                assert!(b == c.b1 || b == c.b2, "key in a foreign bucket");
                if b != c.b1 {
                    moved[c.b1 as usize] += 1;
                }
                assert!(keys.insert(k), "key twice");
            }
            let unused =
                (0x00ff_ffff_ffff_ffff_u64 >> (8 * T::<K, V>::SLOTS)) << (8 * T::<K, V>::SLOTS);
            assert_eq!(meta & unused, 0, "tag bytes beyond the slots");
        }
        for b in 0..(1u32 << g.bits) {
            let at = T::<K, V>::w_bucket(mem, h, b).unwrap();
            let o = overflow(T::<K, V>::w_meta(mem, at).unwrap());
            assert_eq!(
                u32::from(o),
                moved[b as usize].min(255),
                "overflow of bucket {b}"
            );
        }
        assert_eq!(keys.len(), h.count as usize);
    }

    #[test]
    #[cfg_attr(miri, ignore = "large table: too slow under miri; covered natively")]
    fn invariants_under_churn() {
        let mut buf = pages(1024);
        let mut a = arena(&mut buf);
        let mut h = HashHdr::default();
        type T = HashTable<u64, u32>;
        let mut model = HashMap::new();
        let mut x = 1u64;
        for i in 0..40_000u32 {
            x = mix64(x + u64::from(i));
            let k = x % 6000;
            if x >> 60 < 10 {
                assert_eq!(T::insert(&mut a, &mut h, k, i).unwrap(), model.insert(k, i));
            } else {
                assert_eq!(T::remove(&mut a, &mut h, &k).unwrap(), model.remove(&k));
            }
            if i % 1000 == 0 {
                check_invariants::<u64, u32>(&a, &h);
                a.published(u64::from(i) + 2);
                a.reclaim(None);
            }
        }
        check_invariants::<u64, u32>(&a, &h);
        for (k, v) in &model {
            assert_eq!(T::get(a.mem(), &h, k), Some(v));
        }
        // Full to the load limit at a fixed size: long displacement chains.
        let mut h = HashHdr::default();
        T::with_capacity_seeded(&mut a, &mut h, 3000, 5).unwrap();
        let cap = T::capacity(&h);
        for k in 0..cap as u64 {
            T::insert(&mut a, &mut h, k << 20, k as u32).unwrap();
        }
        assert_eq!(T::capacity(&h), cap);
        check_invariants::<u64, u32>(&a, &h);
        for k in (0..cap as u64).step_by(3) {
            T::remove(&mut a, &mut h, &(k << 20)).unwrap();
        }
        check_invariants::<u64, u32>(&a, &h);
    }

    #[test]
    fn layouts() {
        assert_eq!(HashTable::<u64, u64>::BUCKET_BYTES, 64);
        assert_eq!(HashTable::<u64, u64>::SLOTS, 3);
        assert_eq!(HashTable::<u64, u32>::BUCKET_BYTES, 64);
        assert_eq!(HashTable::<u64, u32>::SLOTS, 4);
        assert_eq!(HashTable::<u128, u64>::BUCKET_BYTES, 128);
        assert_eq!(HashTable::<u128, u64>::SLOTS, 5);
        assert_eq!(HashTable::<[u8; 16], u32>::SLOTS, 6);
        assert_eq!(HashTable::<u32, u32>::SLOTS, 7);
        assert_eq!(HashTable::<u128, [u64; 4]>::BUCKET_BYTES, 256);
        assert_eq!(HashTable::<u128, [u64; 4]>::SLOTS, 5);
        assert_eq!(HashTable::<u128, u64>::VAL_OFF, 80);
        assert_eq!(HashTable::<u128, u64>::META_OFF, 120);
    }

    #[test]
    fn tag_match_is_exact() {
        for tag in [0u8, 1, 0x7f, 0x80, 0xff] {
            for pos in 0..8 {
                for fill in [0u8, 1, 0x80, 0xff, tag ^ 1] {
                    let mut bytes = [fill; 8];
                    bytes[pos] = tag;
                    let m = tag_matches(u64::from_le_bytes(bytes), tag);
                    let want: u64 = (0..8)
                        .filter(|&i| bytes[i] == tag)
                        .map(|i| 0x80 << (8 * i))
                        .sum();
                    assert_eq!(m, want, "tag {tag:#x} fill {fill:#x} pos {pos}");
                }
            }
        }
    }

    /// Chi-square of a histogram against the uniform distribution.
    fn chi2(hist: &[u32], n: usize) -> f64 {
        let e = n as f64 / hist.len() as f64;
        hist.iter().map(|&c| (f64::from(c) - e).powi(2) / e).sum()
    }

    #[test]
    #[cfg_attr(miri, ignore = "large table: too slow under miri; covered natively")]
    fn buckets_spread() {
        // Sequential keys (addresses of one subnet, MACs of one vendor) spread over 2^12
        // buckets as random ones would: chi-square within 6 sigma of its mean (4095 ± 90).
        const N: usize = 1 << 16;
        for seed in [0, 1, 0xdead_beef] {
            let (mut b1, mut b2, mut tags) = (vec![0; 1 << 12], vec![0; 1 << 12], vec![0; 256]);
            for k in 0..N as u64 {
                let c = coord(k.hash_seeded(seed), 12);
                b1[c.b1 as usize] += 1;
                b2[c.b2 as usize] += 1;
                tags[usize::from(c.tag)] += 1;
            }
            assert!(chi2(&b1, N) < 4640.0, "u64 primary: {}", chi2(&b1, N));
            assert!(chi2(&b2, N) < 4640.0, "u64 alternative: {}", chi2(&b2, N));
            assert_eq!(tags[0], 0, "tag 0 means empty");
            let mut b1 = vec![0; 1 << 12];
            for k in 0..N as u128 {
                let key = (0x2001_0db8_u128 << 96) | k;
                b1[coord(key.hash_seeded(seed), 12).b1 as usize] += 1;
            }
            assert!(chi2(&b1, N) < 4640.0, "u128 primary: {}", chi2(&b1, N));
            let mut b1 = vec![0; 1 << 12];
            for k in 0..N as u128 {
                b1[coord((k << 64).hash_seeded(seed), 12).b1 as usize] += 1;
            }
            assert!(chi2(&b1, N) < 4640.0, "u128 high word: {}", chi2(&b1, N));
        }
    }

    #[test]
    fn insert_get_replace_remove() {
        let mut buf = pages(64);
        let mut a = arena(&mut buf);
        let mut h = HashHdr::default();
        type T = HashTable<u64, u64>;
        assert_eq!(T::get(a.mem(), &h, &5), None);
        assert_eq!(T::remove(&mut a, &mut h, &5).unwrap(), None);
        // Enough keys for several resizes; fewer under miri, which interprets every access.
        let keys: u64 = if cfg!(miri) { 300 } else { 1000 };
        for k in 0..keys {
            assert_eq!(T::insert(&mut a, &mut h, k * 7919, k).unwrap(), None);
        }
        assert_eq!(T::len(&h), keys as usize);
        for k in 0..keys {
            assert_eq!(T::get(a.mem(), &h, &(k * 7919)), Some(&k));
        }
        assert_eq!(T::get(a.mem(), &h, &3), None);
        assert_eq!(T::insert(&mut a, &mut h, 7919, 42).unwrap(), Some(1));
        assert_eq!(T::get(a.mem(), &h, &7919), Some(&42));
        for k in (0..keys).step_by(2) {
            assert!(T::remove(&mut a, &mut h, &(k * 7919)).unwrap().is_some());
        }
        assert_eq!(T::len(&h), keys as usize / 2);
        for k in 0..keys {
            assert_eq!(T::get(a.mem(), &h, &(k * 7919)).is_some(), k % 2 == 1);
        }
        assert_eq!(T::iter(a.mem(), &h).count(), keys as usize / 2);
        assert_eq!(traced_bytes::<u64, u64>(&a, &h), a.stats().live_bytes);
        T::free(&mut a, &mut h);
        assert_eq!(h, HashHdr::default());
        assert_eq!(a.stats().live_bytes, 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "large table: too slow under miri; covered natively")]
    fn bulk_matches_single() {
        let mut buf = pages(2048);
        let mut a = arena(&mut buf);
        let mut h = HashHdr::default();
        type T = HashTable<u128, u32>;
        T::with_capacity_seeded(&mut a, &mut h, 20_000, 3).unwrap();
        let cap = T::capacity(&h);
        // Fill to the load limit so that many keys live in their alternative bucket.
        for k in 0..cap as u128 {
            T::insert(&mut a, &mut h, k * 0x1_0000_0001, k as u32).unwrap();
        }
        assert_eq!(T::capacity(&h), cap, "no growth at the load limit");
        let keys: Vec<u128> = (0..(cap as u128 + 500))
            .map(|k| k * 0x1_0000_0001)
            .collect();
        for n in [0, 1, 31, 32, 33, 63, 64, 65, 100, 130, keys.len()] {
            let mut out = vec![None; n];
            let hits = T::get_bulk(a.mem(), &h, &keys[..n], &mut out);
            let mut want = 0;
            for (k, o) in keys[..n].iter().zip(&out) {
                assert_eq!(o.as_ref(), T::get(a.mem(), &h, k));
                want += usize::from(o.is_some());
            }
            assert_eq!(hits, want);
            let mut refs = vec![None; n];
            assert_eq!(T::get_bulk_ref(a.mem(), &h, &keys[..n], &mut refs), want);
        }
        // A shorter output slice bounds the work instead of panicking.
        let mut out = vec![None; 3];
        assert_eq!(T::get_bulk(a.mem(), &h, &keys, &mut out), 3);
    }

    #[test]
    #[cfg_attr(miri, ignore = "large table: too slow under miri; covered natively")]
    fn copy_on_write_and_snapshots() {
        let mut buf = pages(512);
        let mut a = arena(&mut buf);
        let mut h = HashHdr::default();
        type T = HashTable<u64, u64>;
        T::with_capacity_seeded(&mut a, &mut h, 5000, 9).unwrap();
        for k in 0..5000u64 {
            T::insert(&mut a, &mut h, k, k).unwrap();
        }
        a.published(2);
        let old = h;
        let live = a.stats().live_bytes;
        // One batch of many changes copies each touched page and the directory once.
        for k in 0..50u64 {
            T::insert(&mut a, &mut h, k, k + 1).unwrap();
        }
        T::remove(&mut a, &mut h, &4000).unwrap();
        T::insert(&mut a, &mut h, 9999, 1).unwrap();
        let g = T::geo(h.bucket_bits);
        assert_ne!(old.dir, h.dir);
        assert!(a.stats().retired_bytes <= (g.dir_bytes + 53 * 2 * g.page_bytes) as u64);
        assert_eq!(a.stats().live_bytes, live, "copies replace originals");
        a.published(3);
        a.reclaim(Some(2));
        for k in 0..5000u64 {
            assert_eq!(T::get(a.mem(), &old, &k), Some(&k), "old snapshot intact");
        }
        assert_eq!(T::get(a.mem(), &old, &9999), None);
        assert_eq!(T::get(a.mem(), &h, &10), Some(&11));
        assert_eq!(T::get(a.mem(), &h, &4000), None);
        assert_eq!(traced_bytes::<u64, u64>(&a, &h), a.stats().live_bytes);
    }

    #[test]
    #[cfg_attr(miri, ignore = "large table: too slow under miri; covered natively")]
    fn growth_keeps_everything() {
        let mut buf = pages(4096);
        let mut a = arena(&mut buf);
        let mut h = HashHdr::default();
        type T = HashTable<[u8; 16], u64>;
        for k in 0..50_000u64 {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&k.to_be_bytes());
            T::insert(&mut a, &mut h, key, k).unwrap();
            if k % 10_000 == 0 {
                a.published(k + 1);
                a.reclaim(None);
            }
        }
        assert!(T::capacity(&h) >= 50_000);
        let mut seen: HashMap<u64, u64> = HashMap::new();
        for (k, v) in T::iter(a.mem(), &h) {
            seen.insert(u64::from_be_bytes(k[..8].try_into().unwrap()), *v);
        }
        assert_eq!(seen.len(), 50_000);
        assert!(seen.iter().all(|(k, v)| k == v));
    }

    #[test]
    fn colliding_keys_fail_cleanly() {
        let mut buf = pages(256);
        let mut a = arena(&mut buf);
        let mut h = HashHdr::default();
        type T = HashTable<Clash, u32>;
        let per_pair = 2 * T::SLOTS;
        for i in 0..per_pair as u32 {
            T::insert(&mut a, &mut h, Clash([i, 0, 0]), i).unwrap();
        }
        a.published(2);
        let before = (h, a.stats().live_bytes);
        match T::insert(&mut a, &mut h, Clash([99, 0, 0]), 99) {
            Err(Error::TableFull { .. }) => {}
            other => panic!("expected TableFull, got {other:?}"),
        }
        assert_eq!((h, a.stats().live_bytes), before, "nothing changed");
        for i in 0..per_pair as u32 {
            assert_eq!(T::get(a.mem(), &h, &Clash([i, 0, 0])), Some(&i));
        }
    }

    #[test]
    fn region_full_changes_nothing() {
        let mut buf = pages(if cfg!(miri) { 8 } else { 24 });
        let mut a = arena(&mut buf);
        let mut h = HashHdr::default();
        type T = HashTable<u64, u64>;
        let mut n = 0u64;
        let err = loop {
            let before = (h, a.stats().live_bytes);
            match T::insert(&mut a, &mut h, n, n) {
                Ok(_) => n += 1,
                Err(e) => {
                    assert_eq!((h, a.stats().live_bytes), before);
                    break e;
                }
            }
            if n % 97 == 0 {
                a.published(n);
                a.reclaim(None);
            }
        };
        assert!(matches!(err, Error::RegionFull { .. }), "{err}");
        for k in 0..n {
            assert_eq!(T::get(a.mem(), &h, &k), Some(&k));
        }
        assert_eq!(traced_bytes::<u64, u64>(&a, &h), a.stats().live_bytes);
    }

    #[test]
    fn garbage_header_reads_as_miss() {
        let mut buf = pages(8);
        let a = arena(&mut buf);
        type T = HashTable<u64, u64>;
        for h in [
            HashHdr {
                dir: u64::MAX - 3,
                seed: 1,
                bucket_bits: 99,
                count: 5,
            },
            HashHdr {
                dir: 8,
                seed: 0,
                bucket_bits: 0,
                count: 0,
            },
            HashHdr {
                dir: 4096 * 8 - 8,
                seed: 0,
                bucket_bits: 31,
                count: 1,
            },
        ] {
            assert_eq!(T::get(a.mem(), &h, &1), None);
            let mut out = [None; 40];
            T::get_bulk(a.mem(), &h, &[1; 40], &mut out);
            let _ = T::iter(
                a.mem(),
                &HashHdr {
                    bucket_bits: 3,
                    ..h
                },
            )
            .count();
        }
    }
}
