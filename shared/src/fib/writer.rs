//! The write side: route changes, one subtree rebuild per touched slot and batch.

use std::collections::{BTreeMap, BTreeSet};

use super::build::{build, trim, Built};
use super::{
    block_of, leaf_shift, mask, n_chunks, records_size, root_of, sub_info, sub_routes,
    visit_routes, ChunkTail, Fib, FibHdr, LpmKey, Node, SubHdr, SubLayout, CHUNK_BITS, CHUNK_BYTES,
    CHUNK_ENTRIES_BYTES, CHUNK_SLOTS, LEAF16, MAX_NEXT_HOP, NODE, ROOT2, SKIPPED, SUBTREE,
    SUB_ALIGN, SUB_OFFSET, UNIFORM,
};
use crate::arena::Arena;
use crate::error::{Error, Result};
use crate::fasthash::FastMap;

/// Routes as (prefix, length, next hop).
type Routes<K> = Vec<(K, u8, u32)>;

/// Entries each scratch buffer keeps whatever its last use (see
/// [`FibWriter::release_scratch`]).
const SCRATCH_KEEP: usize = 256;

/// Slots of one chunk, as a bit set.
type SlotSet = [u64; CHUNK_SLOTS / 64];

/// The writer's side of one FIB: its header lives in the caller's entry, its bookkeeping here.
///
/// Bookkeeping (the short routes, by prefix) is derived from the region and rebuilt by
/// [`FibWriter::recover`]; long routes are read back from their subtree when it is rebuilt.
/// If an operation fails (region full), the caller must abandon the whole batch and recover
/// the writer from the last published header.
#[derive(Debug, Clone)]
pub struct FibWriter<K: LpmKey> {
    /// Routes with `len <= TOP`, by (prefix, len).
    short: FastMap<(K, u8), u32>,
    /// Number of short routes per length.
    per_len: Vec<u32>,
    /// Non-wide short routes of each chunk, shortest first (the order they are painted in).
    by_chunk: FastMap<u32, BTreeSet<(u8, K)>>,
    /// The wide routes (covering whole chunks), in the order of the header's list.
    wide: BTreeMap<(K, u8), u32>,
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
            wide: BTreeMap::new(),
            routes_buf: Vec::new(),
            built: Built::default(),
        }
    }
}

#[inline]
fn chunk_of<K: LpmKey>(p: K) -> u32 {
    p.top() >> CHUNK_BITS
}

/// A route that covers whole chunks (kept in the header's wide list).
#[inline]
fn is_wide<K: LpmKey>(len: u8) -> bool {
    len as u32 <= K::TOP - CHUNK_BITS
}

fn corrupt() -> Error {
    Error::Invalid {
        what: "FIB block outside the region: the table region is corrupt; remove it so control \
               recreates it"
            .into(),
    }
}

impl<K: LpmKey> FibWriter<K> {
    /// Rebuilds the bookkeeping from a published FIB.
    pub fn recover(mem: crate::mem::Mem<'_>, hdr: &FibHdr) -> FibWriter<K> {
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
        Ok(self.apply(arena, hdr, &[(prefix, len, Some(nh))])?[0])
    }

    /// Removes a route; returns its next hop, or None if there was no such route.
    pub fn remove(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        prefix: K,
        len: u8,
    ) -> Result<Option<u32>> {
        Ok(self.apply(arena, hdr, &[(prefix, len, None)])?[0])
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

    /// Applies a batch of changes (`Some(nh)`: add or replace, `None`: remove) in order, and
    /// returns the next hop each one replaced. Long routes are grouped by top slot and short
    /// ones by chunk, so each touched subtree is built, and each touched chunk repainted,
    /// once per batch: this is also the fast path for loading a table. Every change is
    /// checked before any is made.
    pub fn apply(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        changes: &[(K, u8, Option<u32>)],
    ) -> Result<Vec<Option<u32>>> {
        if u32::try_from(changes.len()).is_err() {
            return Err(Error::Invalid {
                what: format!(
                    "{} FIB batch of {} route changes: at most {} per apply; split it",
                    K::NAME,
                    changes.len(),
                    u32::MAX
                ),
            });
        }
        let mut olds = vec![None; changes.len()];
        // Long changes as (slot << 32 | index): sorted, they group by slot in batch order.
        let mut long: Vec<u64> = Vec::new();
        let mut short = Vec::new();
        for (i, &(p, l, nh)) in changes.iter().enumerate() {
            let p = Self::check(p, l, nh)?;
            if l as u32 <= K::TOP {
                short.push((i, p));
            } else {
                long.push((p.top() as u64) << 32 | i as u64);
            }
        }
        if !short.is_empty() {
            self.apply_shorts(arena, hdr, changes, &short, &mut olds)?;
        }
        if !long.is_empty() {
            long.sort_unstable();
            let mut routes = std::mem::take(&mut self.routes_buf);
            let r = self.apply_long(arena, hdr, changes, &long, &mut routes, &mut olds);
            self.routes_buf = routes;
            self.release_scratch();
            r?;
        }
        if hdr.routes == 0 && *hdr != FibHdr::default() {
            self.clear(arena, hdr);
        }
        Ok(olds)
    }

    /// Gives back the room the scratch buffers kept beyond a few times what the last subtree
    /// rebuild used: one big slot (a table load) must not leave every network's writer
    /// holding its size for good. Steady batches of similar slots keep their buffers; a
    /// buffer regrown after a shrink costs no more than the rebuild that needs it.
    fn release_scratch(&mut self) {
        trim(&mut self.routes_buf, SCRATCH_KEEP);
        self.built.release(SCRATCH_KEEP);
    }

    /// Bytes the scratch buffers hold (their capacity).
    #[cfg(test)]
    pub(super) fn scratch_bytes(&self) -> usize {
        self.routes_buf.capacity() * std::mem::size_of::<(K, u8, u32)>() + self.built.bytes()
    }

    // ---- short routes (len <= TOP): slot defaults ------------------------------------------

    /// Best short route covering top slot `slot`, considering lengths in `lens`.
    fn cover(&self, slot: u32, lens: std::ops::RangeInclusive<u32>) -> Option<u32> {
        let key = K::from_wide((slot as u128) << (128 - K::TOP));
        for l in lens.rev() {
            if self.per_len[l as usize] == 0 {
                continue;
            }
            if let Some(&nh) = self.short.get(&(mask(key, l as u8), l as u8)) {
                return Some(nh);
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
        if is_wide::<K>(len) {
            match nh {
                Some(nh) => self.wide.insert((prefix, len), nh),
                None => self.wide.remove(&(prefix, len)),
            };
        }
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

    /// Applies the short-route changes `at` (indices into `changes`, prefixes masked) in
    /// order, then re-derives every chunk they touch once.
    fn apply_shorts(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        changes: &[(K, u8, Option<u32>)],
        at: &[(usize, K)],
        olds: &mut [Option<u32>],
    ) -> Result<()> {
        // Per chunk touched: which of its slots the changes cover, and whether its own list
        // of short routes changed.
        let mut chunks: BTreeMap<u32, (SlotSet, bool)> = BTreeMap::new();
        let mut wide_changed = false;
        for &(i, p) in at {
            let (_, l, nh) = changes[i];
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
                    chunks.entry(c).or_insert(([0; CHUNK_SLOTS / 64], false)).0 =
                        [u64::MAX; CHUNK_SLOTS / 64];
                }
            } else {
                let (bits, own) = chunks
                    .entry(chunk_of(p))
                    .or_insert(([0; CHUNK_SLOTS / 64], false));
                let first = (p.top() & (CHUNK_SLOTS as u32 - 1)) as usize;
                for s in first..first + (1usize << (K::TOP - l as u32)) {
                    bits[s / 64] |= 1 << (s % 64);
                }
                *own = true;
            }
        }
        if wide_changed {
            self.write_wide(arena, hdr)?;
        }
        if chunks.is_empty() {
            return Ok(());
        }
        let dir = Self::ensure_dir(arena, hdr)?;
        for (c, (touched, own)) in chunks {
            self.repaint(arena, dir, c, &touched, own)?;
        }
        Ok(())
    }

    /// Re-derives the `touched` slot defaults of chunk `c` from the short routes (the chunk's
    /// best wide route, overpainted by its own short routes from shortest to longest), and
    /// rewrites its list of short routes when `own` says it changed.
    fn repaint(
        &mut self,
        arena: &mut Arena,
        dir: u64,
        c: u32,
        touched: &SlotSet,
        own: bool,
    ) -> Result<()> {
        let base = self
            .cover(c << CHUNK_BITS, 0..=K::TOP - CHUNK_BITS)
            .unwrap_or(0);
        let d = Self::dir_word(arena, dir, c)?;
        let shorts = self.by_chunk.get(&c);
        if shorts.is_none() && d & UNIFORM != 0 {
            *arena.mem_mut().get_mut::<u64>(dir + 8 * c as u64) = UNIFORM | base as u64;
            return Ok(());
        }
        let off = Self::own_chunk(arena, dir, c)?;
        let mut vals = [base; CHUNK_SLOTS];
        let mut recs: Routes<K> = Vec::new();
        if let Some(set) = self.by_chunk.get(&c) {
            for &(l, p) in set {
                let nh = self.short[&(p, l)];
                let first = (p.top() & (CHUNK_SLOTS as u32 - 1)) as usize;
                vals[first..first + (1usize << (K::TOP - l as u32))].fill(nh);
                if own {
                    recs.push((p, l, nh));
                }
            }
        }
        if own {
            write_chunk_shorts::<K>(arena, off, &recs)?;
        }
        for (i, v) in vals.into_iter().enumerate() {
            if touched[i / 64] & (1 << (i % 64)) != 0 {
                Self::set_default(arena, off + 4 * i as u64, v)?;
            }
        }
        Self::maybe_uniform(arena, dir, c)
    }

    fn write_wide(&mut self, arena: &mut Arena, hdr: &mut FibHdr) -> Result<()> {
        if hdr.wide != 0 {
            arena.retire(hdr.wide, records_size::<K>(hdr.n_wide) as usize);
        }
        hdr.n_wide = self.wide.len() as u32;
        hdr.wide = 0;
        if !self.wide.is_empty() {
            let off = arena.alloc(records_size::<K>(hdr.n_wide) as usize)?;
            let out = arena.mem_mut().slice_mut::<K::Rec>(off, self.wide.len());
            for (r, (&(p, l), &nh)) in out.iter_mut().zip(&self.wide) {
                *r = K::rec(p, l, nh);
            }
            hdr.wide = off;
        }
        Ok(())
    }

    // ---- directory and chunks ----------------------------------------------------------------

    /// Makes sure the directory exists and is writable; returns its offset.
    fn ensure_dir(arena: &mut Arena, hdr: &mut FibHdr) -> Result<u64> {
        let n = 8 * n_chunks::<K>();
        hdr.dir = if hdr.dir == 0 {
            let off = arena.alloc(n)?;
            // Every chunk uniformly "no route".
            arena
                .mem_mut()
                .slice_mut::<u64>(off, n_chunks::<K>())
                .fill(UNIFORM);
            off
        } else {
            arena.cow(hdr.dir, n)?
        };
        Ok(hdr.dir)
    }

    fn dir_word(arena: &Arena, dir: u64, c: u32) -> Result<u64> {
        arena
            .mem()
            .read::<u64>(dir + 8 * c as u64)
            .ok_or_else(corrupt)
    }

    /// Makes chunk `c` (directory at `dir`, writable) a writable block and returns its offset.
    /// A uniform chunk is expanded.
    fn own_chunk(arena: &mut Arena, dir: u64, c: u32) -> Result<u64> {
        let d = Self::dir_word(arena, dir, c)?;
        let off = if d & UNIFORM != 0 {
            let off = arena.alloc(CHUNK_BYTES as usize)?;
            arena
                .mem_mut()
                .slice_mut::<u32>(off, CHUNK_SLOTS)
                .fill(d as u32 & !SUBTREE);
            off
        } else {
            arena.cow(d, CHUNK_BYTES as usize)?
        };
        *arena.mem_mut().get_mut::<u64>(dir + 8 * c as u64) = off;
        Ok(off)
    }

    /// Collapses chunk `c` to a uniform directory word when nothing in it needs a block.
    fn maybe_uniform(arena: &mut Arena, dir: u64, c: u32) -> Result<()> {
        let d = Self::dir_word(arena, dir, c)?;
        if d & UNIFORM != 0 {
            return Ok(());
        }
        let mem = arena.mem();
        let tail = *mem
            .get::<ChunkTail>(d + CHUNK_ENTRIES_BYTES)
            .ok_or_else(corrupt)?;
        if tail.n_short != 0 {
            return Ok(());
        }
        let es = mem.slice::<u32>(d, CHUNK_SLOTS).ok_or_else(corrupt)?;
        let v = es[0];
        if v & SUBTREE != 0 || es.iter().any(|&e| e != v) {
            return Ok(());
        }
        arena.retire(d, CHUNK_BYTES as usize);
        *arena.mem_mut().get_mut::<u64>(dir + 8 * c as u64) = UNIFORM | v as u64;
        Ok(())
    }

    /// Sets the default of the slot whose top entry is at `a` (in a writable chunk) to `v`:
    /// the entry itself, or its subtree root's default (copying the subtree unless it is
    /// fresh).
    fn set_default(arena: &mut Arena, a: u64, v: u32) -> Result<()> {
        let e = *arena.mem().get::<u32>(a).ok_or_else(corrupt)?;
        if e & SUBTREE == 0 {
            *arena.mem_mut().get_mut::<u32>(a) = v;
            return Ok(());
        }
        let root = root_of(e);
        let old = arena
            .mem()
            .read::<Node>(block_of(e) + root)
            .ok_or_else(corrupt)?;
        if old.base0 == v {
            return Ok(());
        }
        let (_, l) = sub_info::<K>(arena.mem(), e).ok_or_else(corrupt)?;
        let nb = arena.cow(block_of(e), l.size as usize)?;
        arena.mem_mut().get_mut::<Node>(nb + root).base0 = v;
        *arena.mem_mut().get_mut::<u32>(a) = sub_ref(e, nb)?;
        Ok(())
    }

    // ---- long routes (len > TOP): subtrees ---------------------------------------------------

    /// The top entry of `slot` (0 when the FIB has no directory).
    fn slot_entry(arena: &Arena, hdr: &FibHdr, slot: u32) -> Result<u32> {
        if hdr.dir == 0 {
            return Ok(0);
        }
        let d = Self::dir_word(arena, hdr.dir, slot >> CHUNK_BITS)?;
        if d & UNIFORM != 0 {
            return Ok(d as u32);
        }
        let a = d + 4 * (slot as u64 & (CHUNK_SLOTS as u64 - 1));
        arena.mem().read::<u32>(a).ok_or_else(corrupt)
    }

    /// Applies the long-route changes (`long`: (slot, index into `changes`, masked prefix),
    /// sorted by slot then index), rebuilding each slot's subtree once.
    fn apply_long(
        &mut self,
        arena: &mut Arena,
        hdr: &mut FibHdr,
        changes: &[(K, u8, Option<u32>)],
        long: &[u64],
        routes: &mut Routes<K>,
        olds: &mut [Option<u32>],
    ) -> Result<()> {
        // The writable directory and the chunk last made writable (slots come in order, so
        // the slots of one chunk follow each other).
        let mut dir = None;
        let mut chunk = None;
        let mut at = 0;
        while at < long.len() {
            let slot = (long[at] >> 32) as u32;
            let mut end = at;
            while end < long.len() && (long[end] >> 32) as u32 == slot {
                end += 1;
            }
            let e = Self::slot_entry(arena, hdr, slot)?;
            routes.clear();
            let default = if e & SUBTREE != 0 {
                routes.extend(sub_routes::<K>(arena.mem(), e).iter().map(K::unrec));
                arena
                    .mem()
                    .read::<Node>(block_of(e) + root_of(e))
                    .ok_or_else(corrupt)?
                    .base0
            } else {
                e
            };
            let mut changed = false;
            for &key in &long[at..end] {
                let i = key as u32 as usize;
                let (p, l, nh) = changes[i];
                let old = edit(routes, mask(p, l), l, nh);
                changed |= old != nh;
                match (old.is_some(), nh.is_some()) {
                    (false, true) => hdr.routes += 1,
                    (true, false) => hdr.routes -= 1,
                    _ => {}
                }
                olds[i] = old;
            }
            if changed {
                let d = match dir {
                    Some(d) => d,
                    None => *dir.insert(Self::ensure_dir(arena, hdr)?),
                };
                chunk = self.write_slot(arena, d, chunk, slot, e, default, routes)?;
            }
            at = end;
        }
        Ok(())
    }

    /// Replaces top slot `slot` (`old`: its current entry, `default`: its best short route)
    /// by a subtree built from `routes` (sorted by prefix and length; none: no subtree), under
    /// the writable directory `dir`. `chunk`: a chunk already writable (number, offset), which
    /// is returned updated.
    #[allow(clippy::too_many_arguments)]
    fn write_slot(
        &mut self,
        arena: &mut Arena,
        dir: u64,
        chunk: Option<(u32, u64)>,
        slot: u32,
        old: u32,
        default: u32,
        routes: &[(K, u8, u32)],
    ) -> Result<Option<(u32, u64)>> {
        let c = slot >> CHUNK_BITS;
        let new = if routes.is_empty() {
            default
        } else {
            let mut built = std::mem::take(&mut self.built);
            build::<K>(routes, &mut built);
            let r = write_subtree::<K>(arena, routes, &built, default);
            self.built = built;
            r?
        };
        let off = match chunk {
            Some((cc, off)) if cc == c => off,
            _ => Self::own_chunk(arena, dir, c)?,
        };
        *arena
            .mem_mut()
            .get_mut::<u32>(off + 4 * (slot as u64 & (CHUNK_SLOTS as u64 - 1))) = new;
        if old & SUBTREE != 0 {
            if let Some((_, l)) = sub_info::<K>(arena.mem(), old) {
                arena.retire(block_of(old), l.size as usize);
            }
        }
        if new & SUBTREE == 0 {
            Self::maybe_uniform(arena, dir, c)?;
            // The chunk may have collapsed to a directory word.
            return Ok(None);
        }
        Ok(Some((c, off)))
    }
}

/// Replaces the short-route records of the (writable) chunk at `chunk` by `recs`.
fn write_chunk_shorts<K: LpmKey>(
    arena: &mut Arena,
    chunk: u64,
    recs: &[(K, u8, u32)],
) -> Result<()> {
    let tail = *arena
        .mem()
        .get::<ChunkTail>(chunk + CHUNK_ENTRIES_BYTES)
        .ok_or_else(corrupt)?;
    if tail.shorts != 0 {
        arena.retire(tail.shorts, records_size::<K>(tail.n_short) as usize);
    }
    let shorts = if recs.is_empty() {
        0
    } else {
        let off = arena.alloc(records_size::<K>(recs.len() as u32) as usize)?;
        for (r, &(p, l, nh)) in arena
            .mem_mut()
            .slice_mut::<K::Rec>(off, recs.len())
            .iter_mut()
            .zip(recs)
        {
            *r = K::rec(p, l, nh);
        }
        off
    };
    *arena
        .mem_mut()
        .get_mut::<ChunkTail>(chunk + CHUNK_ENTRIES_BYTES) = ChunkTail {
        shorts,
        n_short: recs.len() as u32,
        _pad: 0,
    };
    Ok(())
}

/// The top entry of subtree `e` moved to block `block`.
fn sub_ref(e: u32, block: u64) -> Result<u32> {
    if block % SUB_ALIGN != 0 || block >> 6 > SUB_OFFSET as u64 || block == 0 {
        return Err(Error::Invalid {
            what: "FIB subtree beyond the 16 GiB addressable by top entries; use a smaller \
                   region"
                .into(),
        });
    }
    Ok((e & !SUB_OFFSET) | (block >> 6) as u32)
}

/// Applies one change to a slot's route list (sorted by prefix and length); returns the next
/// hop the route had.
fn edit<K: LpmKey>(routes: &mut Routes<K>, prefix: K, len: u8, nh: Option<u32>) -> Option<u32> {
    match (
        routes.binary_search_by(|r| (r.0, r.1).cmp(&(prefix, len))),
        nh,
    ) {
        (Ok(i), Some(v)) => Some(std::mem::replace(&mut routes[i].2, v)),
        (Ok(i), None) => Some(routes.remove(i).2),
        (Err(i), Some(v)) => {
            routes.insert(i, (prefix, len, v));
            None
        }
        (Err(_), None) => None,
    }
}

/// Writes a built subtree, its slot default and its routes into a new block; returns its top
/// entry.
fn write_subtree<K: LpmKey>(
    arena: &mut Arena,
    routes: &[(K, u8, u32)],
    built: &Built,
    default: u32,
) -> Result<u32> {
    let h = SubHdr {
        n_nodes: built.nodes.len() as u32,
        n_leaves: built.leaves.len() as u32,
        n_routes: routes.len() as u32,
        n_singles: built.singles.len() as u32,
    };
    let mut flags = SUBTREE;
    if built.leaves.iter().all(|&v| v <= u16::MAX as u32) {
        flags |= LEAF16;
    }
    let sh = leaf_shift(flags);
    let l = SubLayout::new::<K>(built.skip.is_some(), built.root_leaves, sh, &h);
    let off = arena.alloc(l.size as usize)?;
    if built.skip.is_some() {
        flags |= SKIPPED;
    }
    if l.root + NODE + ((built.root_leaves as u64) << sh) > SUB_ALIGN {
        flags |= ROOT2;
    }
    let e = match sub_ref(flags, off) {
        Ok(e) => e,
        Err(err) => {
            arena.retire(off, l.size as usize);
            return Err(err);
        }
    };
    let node_at = |i: u32| {
        if i == 0 {
            l.root
        } else {
            l.nodes + NODE * (i as u64 - 1)
        }
    };
    let leaf_at = |j: u32| {
        if j < built.root_leaves {
            l.root + NODE + ((j as u64) << sh)
        } else {
            l.leaves + (((j - built.root_leaves) as u64) << sh)
        }
    };
    let m = arena.mem_mut();
    if let Some((start, bits)) = built.skip {
        *m.get_mut::<super::Skip>(off) = super::Skip {
            bits: [(bits >> 64) as u64, bits as u64],
            start,
            _pad: 0,
        };
    }
    for (i, n) in built.nodes.iter().enumerate() {
        let mut n = *n;
        if i == 0 {
            n.base0 = default;
        } else if n.vector | n.leafvec == 0 {
            n.base0 =
                (l.singles + std::mem::size_of::<super::Single>() as u64 * n.base0 as u64) as u32;
        } else {
            n.base0 = leaf_at(n.base0) as u32;
        }
        n.base1 = if n.vector != 0 {
            node_at(n.base1) as u32
        } else {
            0
        };
        *m.get_mut::<Node>(off + node_at(i as u32)) = n;
    }
    for (j, &v) in built.leaves.iter().enumerate() {
        if flags & LEAF16 != 0 {
            *m.get_mut::<u16>(off + leaf_at(j as u32)) = v as u16;
        } else {
            *m.get_mut::<u32>(off + leaf_at(j as u32)) = v;
        }
    }
    *m.get_mut::<SubHdr>(off + l.hdr) = h;
    m.slice_mut::<super::Single>(off + l.singles, built.singles.len())
        .copy_from_slice(&built.singles);
    for (r, &(p, len, nh)) in m
        .slice_mut::<K::Rec>(off + l.routes, routes.len())
        .iter_mut()
        .zip(routes)
    {
        *r = K::rec(p, len, nh);
    }
    Ok(e)
}
