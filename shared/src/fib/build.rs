//! Building a subtree's nodes and leaves from one top slot's long routes.

use std::collections::VecDeque;

use super::{wmask, LpmKey, Node, Single};

/// A subtree in the writer's memory: nodes in breadth-first order (the root first, the
/// children of each node consecutive), linked by index (`base0`: first leaf or the Single,
/// `base1`: first child), and the leaves in the order the nodes were built.
#[derive(Debug, Clone, Default)]
pub(super) struct Built {
    pub nodes: Vec<Node>,
    pub leaves: Vec<u32>,
    pub singles: Vec<Single>,
    /// Root skip: (start bit, the shared prefix).
    pub skip: Option<(u32, u128)>,
    /// Leaves of the root node (they come first in `leaves`).
    pub root_leaves: u32,
    queue: VecDeque<Task>,
}

/// Shrinks a scratch buffer holding more than four times its contents (and `keep`) to them.
pub(super) fn trim<T>(v: &mut Vec<T>, keep: usize) {
    if v.capacity() > 4 * v.len().max(keep) {
        v.shrink_to(v.len().max(keep));
    }
}

impl Built {
    /// [`trim`]s every buffer.
    pub(super) fn release(&mut self, keep: usize) {
        trim(&mut self.nodes, keep);
        trim(&mut self.leaves, keep);
        trim(&mut self.singles, keep);
        // Empty between builds.
        if self.queue.capacity() > 4 * keep {
            self.queue.shrink_to(keep);
        }
    }

    /// Bytes the buffers hold (their capacity).
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        use std::mem::size_of;
        self.nodes.capacity() * size_of::<Node>()
            + self.leaves.capacity() * size_of::<u32>()
            + self.singles.capacity() * size_of::<Single>()
            + self.queue.capacity() * size_of::<Task>()
    }
}

#[derive(Debug, Clone, Copy)]
struct Task {
    depth: u32,
    /// Range of the routes under this node in the sorted route list.
    from: usize,
    to: usize,
    /// Value of the node's positions no route of its own covers.
    default: u32,
}

/// Builds the subtree of `routes`: all longer than `TOP`, inside one top slot, sorted by
/// (prefix, length), without duplicates. Leaves hold the best of these routes covering each
/// position, 0 where none does (the walk then answers with the slot default).
pub(super) fn build<K: LpmKey>(routes: &[(K, u8, u32)], out: &mut Built) {
    out.nodes.clear();
    out.leaves.clear();
    out.singles.clear();
    out.skip = None;
    out.queue.clear();
    // Root skip: the bits all routes share, but never past the shortest route's own node.
    let min_len = routes.iter().map(|r| r.1 as u32).min().unwrap_or(K::BITS);
    let first = routes.first().map_or(0, |r| r.0.wide());
    let common = routes
        .iter()
        .map(|r| ((r.0.wide() ^ first) | !wmask(r.1 as u32)).leading_zeros())
        .min()
        .unwrap_or(0);
    let skip_to = common.min(min_len - 1).max(K::TOP);
    // Only where it saves a level: otherwise the skip's compare (and its bytes in the root's
    // cache line) buy nothing (e.g. /19../24 routes under an IPv4 /18).
    let max_len = routes.iter().map(|r| r.1 as u32).max().unwrap_or(K::TOP);
    let levels = |from: u32| max_len.saturating_sub(from).div_ceil(6);
    let start = if levels(skip_to) < levels(K::TOP) {
        skip_to
    } else {
        K::TOP
    };
    if start > K::TOP {
        out.skip = Some((start, first & wmask(start)));
    }
    out.queue.push_back(Task {
        depth: start,
        from: 0,
        to: routes.len(),
        default: 0,
    });
    let mut next_index = 1u32;
    while let Some(t) = out.queue.pop_front() {
        let own = &routes[t.from..t.to];
        // A lone route deeper than this node: a Single instead of a chain of nodes (never at
        // the root, whose node also carries the slot default).
        let mut deeper = own.iter().filter(|r| r.1 as u32 > t.depth);
        if let (Some(&(p, l, nh)), None) = (deeper.next(), deeper.next()) {
            if l as u32 > t.depth + 6 && !out.nodes.is_empty() {
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
        // Paint the positions, note the children. A route comes after every route covering it
        // (sorted by prefix, then length), so painting in order leaves the longest match.
        // `edges`: the positions where the painted value may change (a range starts or ends).
        let mut leaf = [t.default; 64];
        let mut edges = 1u64;
        let mut vector = 0u64;
        for &(p, l, nh) in own {
            let l = l as u32;
            if l <= t.depth {
                continue; // above this node: already its default
            }
            let pos = p.bits6(t.depth) as usize;
            if l <= t.depth + 6 {
                let span = 1usize << (t.depth + 6 - l);
                let s = pos & !(span - 1);
                leaf[s..s + span].fill(nh);
                edges |= 1 << s;
                edges |= (1u64 << (s + span - 1)) << 1;
            } else {
                vector |= 1 << pos;
            }
        }
        let mut node = Node {
            vector,
            base0: out.leaves.len() as u32,
            base1: next_index,
            ..Node::default()
        };
        // Children, in position order: each one's routes are a consecutive range, since the
        // routes are sorted by prefix.
        let mut i = t.from;
        let mut v = vector;
        while v != 0 {
            let pos = v.trailing_zeros();
            v &= v - 1;
            while i < t.to && (routes[i].0.bits6(t.depth) < pos || routes[i].1 as u32 <= t.depth) {
                i += 1;
            }
            let from = i;
            while i < t.to && routes[i].0.bits6(t.depth) == pos {
                i += 1;
            }
            out.queue.push_back(Task {
                depth: t.depth + 6,
                from,
                to: i,
                default: leaf[pos as usize],
            });
            next_index += 1;
        }
        // Leaf runs: a run can only start at an edge or right after a child (elsewhere a
        // position holds what the one before it holds).
        let mut last = None;
        let mut starts = (edges | vector << 1) & !vector;
        while starts != 0 {
            let pos = starts.trailing_zeros();
            starts &= starts - 1;
            let value = leaf[pos as usize];
            if last != Some(value) {
                node.leafvec |= 1 << pos;
                out.leaves.push(value);
                last = Some(value);
            }
        }
        if out.nodes.is_empty() {
            out.root_leaves = out.leaves.len() as u32;
        }
        out.nodes.push(node);
    }
}
