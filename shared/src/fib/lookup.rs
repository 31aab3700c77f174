//! The read side: single and bulk lookups, route listing and block tracing.

use std::marker::PhantomData;

use super::{
    block_of, leaf_shift, n_chunks, popcnt_upto, records_size, root_of, sub_info, visit_routes,
    ChunkTail, FibHdr, LpmKey, Node, Single, Skip, CHUNK_BITS, CHUNK_BYTES, CHUNK_ENTRIES_BYTES,
    CHUNK_SLOTS, LEAF16, NODE, ROOT2, SKIPPED, SUBTREE, UNIFORM,
};
use crate::mem::Mem;

/// Read side: lookups.
#[derive(Debug, Clone, Copy)]
pub struct Fib<K>(PhantomData<K>);

/// Keys per pass of the bulk lookups.
const GROUP: usize = 64;

/// Where a walk goes next.
enum Step {
    /// The answer: a next hop, or 0 for "no long route" (the slot default then answers).
    Done(u32),
    /// The next node's offset.
    Down(u64),
}

/// A walk's first step, at the root of a subtree.
struct Root {
    /// The slot default.
    default: u32,
    step: Step,
    /// Depth of the node `step` goes down to.
    depth: u32,
}

impl<K: LpmKey> Fib<K> {
    /// Longest-prefix match of `key`; 0 when no route covers it.
    #[inline]
    pub fn lookup(mem: Mem<'_>, hdr: &FibHdr, key: K) -> u32 {
        let e = Self::top_entry(mem, hdr.dir, key);
        if e & SUBTREE == 0 {
            return e;
        }
        let Root {
            default,
            mut step,
            mut depth,
        } = Self::root(mem, e, key);
        // A malformed block can only send the walk elsewhere in the region (every access is
        // bounds-checked), and the walk ends: each step consumes six key bits.
        loop {
            match step {
                Step::Done(0) => return default,
                Step::Done(v) => return v,
                Step::Down(_) if depth >= K::BITS => return default,
                Step::Down(at) => {
                    step = Self::step(mem, e, at, depth, key);
                    depth += 6;
                }
            }
        }
    }

    /// The top entry of `key` in the FIB whose directory is at `dir` (0 when there is none).
    #[inline(always)]
    fn top_entry(mem: Mem<'_>, dir: u64, key: K) -> u32 {
        if dir == 0 {
            return 0;
        }
        let top = key.top();
        let c = (top >> CHUNK_BITS) as u64 & (n_chunks::<K>() as u64 - 1);
        let Some(d) = mem.read::<u64>(dir + 8 * c) else {
            return 0;
        };
        Self::chunk_entry(mem, d, top)
    }

    /// Top entry `top` under directory word `d`.
    #[inline(always)]
    fn chunk_entry(mem: Mem<'_>, d: u64, top: u32) -> u32 {
        if d & UNIFORM != 0 {
            return d as u32 & !SUBTREE;
        }
        mem.read::<u32>(d + 4 * (top as u64 & (CHUNK_SLOTS as u64 - 1)))
            .unwrap_or(0)
    }

    /// The root step of subtree entry `e` for `key`: the slot default, and the leaf or the
    /// child node the root node gives.
    #[inline(always)]
    fn root(mem: Mem<'_>, e: u32, key: K) -> Root {
        let block = block_of(e);
        let at = block + root_of(e);
        let Some(n) = mem.read::<Node>(at) else {
            return Root {
                default: 0,
                step: Step::Done(0),
                depth: K::BITS,
            };
        };
        let mut depth = K::TOP;
        if e & SKIPPED != 0 {
            let start = match mem.read::<Skip>(block) {
                Some(s) if s.start < K::BITS && s.covers(key) => s.start,
                _ => {
                    return Root {
                        default: n.base0,
                        step: Step::Done(0),
                        depth: K::BITS,
                    }
                }
            };
            depth = start;
        }
        let p = key.bits6(depth);
        let step = if (n.vector >> p) & 1 != 0 {
            Step::Down(block + n.base1 as u64 + NODE * (popcnt_upto(n.vector, p) as u64 - 1))
        } else {
            // The root's leaves follow it; a valid node has a run start at or before every
            // leaf position, so the count is at least one.
            Step::Done(Self::leaf(mem, e, at + NODE, popcnt_upto(n.leafvec, p)))
        };
        Root {
            default: n.base0,
            step,
            depth: depth + 6,
        }
    }

    /// Leaf `run - 1` of the leaves at `base` in subtree `e` (0 when outside the region).
    #[inline(always)]
    fn leaf(mem: Mem<'_>, e: u32, base: u64, run: u32) -> u32 {
        let sh = leaf_shift(e);
        let at = (base + ((run as u64) << sh)).wrapping_sub(1 << sh);
        if e & LEAF16 != 0 {
            mem.read::<u16>(at).map_or(0, u32::from)
        } else {
            mem.read::<u32>(at).unwrap_or(0)
        }
    }

    /// One level of a walk below the root of subtree `e`, at node `at` (key bits from
    /// `depth`).
    #[inline(always)]
    fn step(mem: Mem<'_>, e: u32, at: u64, depth: u32, key: K) -> Step {
        let block = block_of(e);
        let Some(n) = mem.read::<Node>(at) else {
            return Step::Done(0);
        };
        if n.vector | n.leafvec == 0 {
            return Step::Done(
                mem.read::<Single>(block + n.base0 as u64)
                    .map_or(0, |s| s.resolve(key)),
            );
        }
        let p = key.bits6(depth);
        if (n.vector >> p) & 1 != 0 {
            Step::Down(block + n.base1 as u64 + NODE * (popcnt_upto(n.vector, p) as u64 - 1))
        } else {
            Step::Done(Self::leaf(
                mem,
                e,
                block + n.base0 as u64,
                popcnt_upto(n.leafvec, p),
            ))
        }
    }

    /// Looks up a burst of keys: `out[i]` = next hop of `keys[i]` (0 = no route).
    ///
    /// Keys go through in groups of 64, in passes: first every key's top entry (the top level
    /// is small enough to stay in cache), prefetching the subtree root of those that have one,
    /// so that the burst's misses are all in flight at once; then every root node, the common
    /// case answered in a few instructions; then the few walks that go deeper, one level per
    /// pass, each pass prefetching the next level of all of them. (Interleaving the passes
    /// key by key, as DPDK's bulk lookups do, measured slower here: a subtree line takes
    /// longer to arrive than a burst takes to go through its top entries.)
    #[inline]
    pub fn lookup_bulk(mem: Mem<'_>, hdr: &FibHdr, keys: &[K], out: &mut [u32]) {
        let n = keys.len().min(out.len());
        let dir = if hdr.dir == 0 {
            None
        } else {
            mem.slice::<u64>(hdr.dir, n_chunks::<K>())
        };
        let Some(dir) = dir else {
            out[..n].fill(0);
            return;
        };
        for (ks, os) in keys[..n].chunks(GROUP).zip(out[..n].chunks_mut(GROUP)) {
            let f = |_, key: K| {
                let top = key.top();
                let d = dir[(top >> CHUNK_BITS) as usize & (n_chunks::<K>() - 1)];
                Self::chunk_entry(mem, d, top)
            };
            Self::bulk_group(mem, ks, os, f);
        }
    }

    /// Looks up a burst whose keys belong to different FIBs (e.g. packets of several
    /// networks): `out[i]` = next hop of `keys[i]` in `hdrs[i]` (0 = no route). Same passes
    /// as [`Fib::lookup_bulk`].
    #[inline]
    pub fn lookup_bulk_mixed(mem: Mem<'_>, hdrs: &[&FibHdr], keys: &[K], out: &mut [u32]) {
        let n = keys.len().min(out.len()).min(hdrs.len());
        for ((ks, os), hs) in keys[..n]
            .chunks(GROUP)
            .zip(out[..n].chunks_mut(GROUP))
            .zip(hdrs[..n].chunks(GROUP))
        {
            Self::bulk_group(mem, ks, os, |i, key| {
                Self::top_entry(mem, hs.get(i).map_or(0, |h| h.dir), key)
            });
        }
    }

    /// One group of at most [`GROUP`] keys; `top(i, key)` is key `i`'s top entry.
    #[inline(always)]
    fn bulk_group(mem: Mem<'_>, keys: &[K], out: &mut [u32], top: impl Fn(usize, K) -> u32) {
        let m = keys.len().min(out.len()).min(GROUP);
        let (keys, out) = (&keys[..m], &mut out[..m]);
        // Pass 1: every key's top entry; prefetch the subtrees (branch-free: a leaf entry
        // prefetches offset 0, the region header, which is in cache anyway), and the second
        // line of a root whose leaves spill into it.
        let mut ent = [0u32; GROUP];
        for (i, ((&key, o), t)) in keys.iter().zip(out.iter_mut()).zip(&mut ent).enumerate() {
            let e = top(i, key);
            *o = e;
            *t = e;
            let b = block_of(e) & ((e as i32 >> 31) as u64);
            mem.prefetch(b);
            if e & ROOT2 != 0 {
                mem.prefetch(b + 64);
            }
        }
        // Pass 2: the root nodes. The common case (no skip, 16-bit leaves, the root's leaf
        // answers) in full here; the others are marked for the general walk.
        let mut slow = 0u64;
        for (i, ((&key, o), &e)) in keys.iter().zip(out.iter_mut()).zip(&ent).enumerate() {
            if e & SUBTREE == 0 {
                continue;
            }
            if e & (SKIPPED | LEAF16) == LEAF16 {
                let b = block_of(e);
                if let Some(n) = mem.read::<Node>(b) {
                    let p = key.bits6(K::TOP);
                    if (n.vector >> p) & 1 == 0 {
                        let run = popcnt_upto(n.leafvec, p) as u64;
                        let leaf = mem
                            .read::<u16>((b + NODE + 2 * run).wrapping_sub(2))
                            .map_or(0, u32::from);
                        *o = if leaf != 0 { leaf } else { n.base0 };
                        continue;
                    }
                }
            }
            slow |= 1 << i;
        }
        if slow != 0 {
            Self::bulk_walks(mem, keys, out, &ent, slow);
        }
    }

    /// The general walks of a group: the keys in bit set `slow`, whose top entries are in
    /// `ent`. Their root steps, then one level per pass, each pass prefetching the next.
    #[inline(never)]
    fn bulk_walks(mem: Mem<'_>, keys: &[K], out: &mut [u32], ent: &[u32; GROUP], slow: u64) {
        let mut at = [0u64; GROUP];
        let mut depth = [0u8; GROUP];
        let mut deep = 0u64;
        let mut todo = slow;
        while todo != 0 {
            let i = todo.trailing_zeros() as usize;
            todo &= todo - 1;
            let (Some(&key), Some(o)) = (keys.get(i), out.get_mut(i)) else {
                continue;
            };
            let r = Self::root(mem, ent[i], key);
            *o = r.default;
            match r.step {
                Step::Down(next) if r.depth < K::BITS => {
                    mem.prefetch(next);
                    at[i] = next;
                    depth[i] = r.depth as u8;
                    deep |= 1 << i;
                }
                Step::Done(v) if v != 0 => *o = v,
                _ => {}
            }
        }
        while deep != 0 {
            let mut todo = deep;
            deep = 0;
            while todo != 0 {
                let i = todo.trailing_zeros() as usize;
                todo &= todo - 1;
                let (Some(&key), Some(o)) = (keys.get(i), out.get_mut(i)) else {
                    continue;
                };
                match Self::step(mem, ent[i], at[i], depth[i] as u32, key) {
                    Step::Down(next) if (depth[i] as u32) + 6 < K::BITS => {
                        mem.prefetch(next);
                        at[i] = next;
                        depth[i] += 6;
                        deep |= 1 << i;
                    }
                    Step::Done(v) if v != 0 => *o = v,
                    _ => {}
                }
            }
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
        out.push((hdr.dir, 8 * n_chunks::<K>() as u64));
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
            out.push((d, CHUNK_BYTES));
            if tail.shorts != 0 {
                out.push((tail.shorts, records_size::<K>(tail.n_short)));
            }
            let Some(entries) = mem.slice::<u32>(d, CHUNK_SLOTS) else {
                continue;
            };
            for &e in entries {
                if e & SUBTREE != 0 {
                    if let Some((_, l)) = sub_info::<K>(mem, e) {
                        out.push((block_of(e), l.size));
                    }
                }
            }
        }
    }
}
