use super::build::{build, Built};
use super::*;
use crate::arena::Arena;
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
    assert!(w.insert(&mut a, &mut h, 1, 8, MAX_NEXT_HOP + 1).is_err());
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
    sorted.sort_unstable();
    let mut built = Built::default();
    build::<u128>(&sorted, &mut built);
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

/// Large batches (hundreds of changes, many to the same slots and chunks) into three FIBs that
/// share one arena, published and reclaimed between batches: every lookup flavour (single,
/// bulk, bulk across the three FIBs) against the linear scan, the routes read back, and the
/// arena's live bytes equal to what the FIBs trace.
#[test]
fn large_batches_in_shared_arena_match_linear_scan() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xf1b4);
    let (_b, mut a) = test_arena(if cfg!(miri) { 4 << 20 } else { 64 << 20 });
    let mut hdrs = [FibHdr::default(); 3];
    let mut writers: Vec<FibWriter<u32>> = (0..3).map(|_| FibWriter::default()).collect();
    let mut models: Vec<HashMap<(u32, u8), u32>> = vec![HashMap::new(); 3];
    // Four /14s: prefixes collide in slots, chunks and subtrees; a few routes anywhere.
    let key = |rng: &mut rand::rngs::StdRng| -> u32 {
        let x: u32 = rng.gen();
        if x % 16 == 0 {
            x
        } else {
            0x0a00_0000 | ((x % 4) << 18) | (x >> 14 & 0x3_ffff)
        }
    };
    let rounds = if cfg!(miri) { 2 } else { 12 };
    let per_batch = if cfg!(miri) { 20 } else { 400 };
    for round in 0..rounds {
        for f in 0..3 {
            let changes: Vec<(u32, u8, Option<u32>)> = (0..per_batch)
                .map(|_| {
                    let len = match rng.gen_range(0..10) {
                        0 => rng.gen_range(0..=12),
                        1 | 2 => rng.gen_range(13..=18),
                        3..=6 => rng.gen_range(19..=24),
                        _ => rng.gen_range(25..=32),
                    };
                    let p = mask(key(&mut rng), len);
                    // Removals mostly of routes that exist.
                    if rng.gen_bool(0.3) {
                        let existing = models[f]
                            .keys()
                            .nth(rng.gen_range(0..models[f].len().max(1)));
                        let (p, len) = existing.copied().unwrap_or((p, len));
                        (p, len, None)
                    } else {
                        (p, len, Some(rng.gen_range(1..70_000)))
                    }
                })
                .collect();
            let olds = writers[f].apply(&mut a, &mut hdrs[f], &changes).unwrap();
            for (&(p, len, nh), old) in changes.iter().zip(olds) {
                let want = match nh {
                    Some(v) => models[f].insert((p, len), v),
                    None => models[f].remove(&(p, len)),
                };
                assert_eq!(
                    old, want,
                    "fib {f} round {round}: change {p:#x}/{len} -> {nh:?}"
                );
            }
            assert_eq!(hdrs[f].routes as usize, models[f].len());
        }
        a.published(round + 2);
        a.reclaim(None);
        let probes: Vec<(usize, u32)> = (0..if cfg!(miri) { 50 } else { 3000 })
            .map(|_| (rng.gen_range(0..3), key(&mut rng)))
            .collect();
        let keys: Vec<u32> = probes.iter().map(|p| p.1).collect();
        let hs: Vec<&FibHdr> = probes.iter().map(|p| &hdrs[p.0]).collect();
        let mut mixed = vec![0; keys.len()];
        Fib::lookup_bulk_mixed(a.mem(), &hs, &keys, &mut mixed);
        let mut bulk = vec![0; keys.len()];
        Fib::lookup_bulk(a.mem(), &hdrs[1], &keys, &mut bulk);
        for (i, &(f, k)) in probes.iter().enumerate() {
            let want = naive(&models[f], k);
            assert_eq!(
                Fib::lookup(a.mem(), &hdrs[f], k),
                want,
                "fib {f} key {k:#x}"
            );
            assert_eq!(mixed[i], want, "mixed bulk, fib {f} key {k:#x}");
            assert_eq!(bulk[i], naive(&models[1], k), "bulk, fib 1 key {k:#x}");
        }
        let mut traced = 0;
        for (f, h) in hdrs.iter().enumerate() {
            let mut got = Fib::<u32>::routes(a.mem(), h);
            got.sort();
            let mut want: Vec<(u32, u8, u32)> =
                models[f].iter().map(|(&(p, l), &nh)| (p, l, nh)).collect();
            want.sort();
            assert_eq!(got, want, "fib {f} reads back its routes");
            let mut blocks = Vec::new();
            Fib::<u32>::trace(a.mem(), h, &mut blocks);
            traced += blocks
                .iter()
                .map(|b| crate::arena::block_size(b.1 as usize))
                .sum::<u64>();
        }
        assert_eq!(
            traced,
            a.stats().live_bytes,
            "round {round}: live bytes = traced blocks"
        );
        assert_eq!(
            a.stats().retired_bytes,
            0,
            "everything retired was reclaimed"
        );
    }
    for (w, h) in writers.iter_mut().zip(&mut hdrs) {
        w.clear(&mut a, h);
    }
    assert_eq!(a.stats().live_bytes, 0);
}

/// A big subtree rebuild (a table load: 16,384 host routes under one /18) followed by small
/// ones leaves the writer's scratch buffers sized for the small ones, not the big one; the
/// table stays right.
#[test]
#[cfg_attr(
    miri,
    ignore = "a 16,384-route rebuild takes most of an hour under miri; the shrink is safe code"
)]
fn scratch_buffers_shrink_after_a_big_rebuild() {
    let (_b, mut a) = test_arena(1 << 24);
    let mut h = FibHdr::default();
    let mut w = FibWriter::<u32>::default();
    let base = u32::from_be_bytes([10, 64, 0, 0]);
    let load: Vec<(u32, u8, Option<u32>)> = (0..1u32 << 14)
        .map(|i| (base + i, 32, Some(1 + i % 7)))
        .collect();
    w.apply(&mut a, &mut h, &load).unwrap();
    // Scratch of the load's rebuild: at least its 16,384 routes of 12 bytes.
    assert!(w.scratch_bytes() >= 12 << 14, "{}", w.scratch_bytes());
    // Small batches in another slot (a pod network's few routes).
    let other = u32::from_be_bytes([10, 128, 0, 0]);
    for i in 0..4 {
        w.insert(&mut a, &mut h, other + i, 32, 9).unwrap();
    }
    // Bounded by what SCRATCH_KEEP entries of each buffer hold, far below the load's.
    assert!(w.scratch_bytes() <= 64 << 10, "{}", w.scratch_bytes());
    assert_eq!(h.routes, (1 << 14) + 4);
    assert_eq!(Fib::lookup(a.mem(), &h, base + 100), 1 + 100 % 7);
    assert_eq!(Fib::lookup(a.mem(), &h, other + 3), 9);
    // Steady small batches keep their room (no shrink and regrow at each).
    let kept = w.scratch_bytes();
    w.insert(&mut a, &mut h, other + 5, 32, 9).unwrap();
    assert_eq!(w.scratch_bytes(), kept);
}
