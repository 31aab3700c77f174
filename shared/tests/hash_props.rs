//! Property tests of the shared-memory tables (`HashTable`, `PagedArray`) against std
//! collections: random batches of changes separated by publications, with the reader's view of
//! every snapshot checked until its memory may be reclaimed, exact `trace`s, and clean failure
//! when the region is full.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use lace_shared::arena::Arena;
use lace_shared::array::{ArrayHdr, PagedArray};
use lace_shared::hash::{HashHdr, HashKey, HashTable};
use lace_shared::pod::Pod;
use lace_shared::region::{Region, RegionKind};
use lace_shared::Error;
use proptest::prelude::*;

/// Removes the region file when dropped, also when a test fails.
struct Unlink(PathBuf);

impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An arena over a new region of `size` bytes. The file is unlinked at once (the mapping lives
/// on inside the arena), so nothing is left behind whatever happens next.
fn arena(size: u64) -> Arena {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!(
        "lace-hash-props-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _unlink = Unlink(path.clone());
    let region = Region::create(&path, RegionKind::Tables, size, [0; 4]).expect("create region");
    Arena::over(region).expect("arena over region")
}

/// Every block once, and together exactly the arena's live bytes (the table is its only user).
fn check_trace(a: &Arena, mut blocks: Vec<(u64, u64)>) {
    let total: u64 = blocks.iter().map(|b| b.1).sum();
    blocks.sort_unstable();
    for w in blocks.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap or repeat: {w:?}");
    }
    assert_eq!(total, a.stats().live_bytes, "trace vs live bytes");
}

/// Live, retired and free bytes (the high-water mark may move on a failed attempt).
fn usage(a: &Arena) -> (u64, u64, u64) {
    let s = a.stats();
    (s.live_bytes, s.retired_bytes, s.free_bytes)
}

#[derive(Clone, Debug)]
enum Op<K, V> {
    Insert(K, V),
    Remove(K),
    Get(K),
    Reserve(u16),
    Publish,
}

fn ops<K: Debug + Clone, V: Debug + Clone>(
    key: impl Strategy<Value = K> + Clone,
    val: impl Strategy<Value = V>,
) -> impl Strategy<Value = Vec<Op<K, V>>> {
    prop::collection::vec(
        prop_oneof![
            8 => (key.clone(), val).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => key.clone().prop_map(Op::Remove),
            3 => key.prop_map(Op::Get),
            1 => (0u16..3000).prop_map(Op::Reserve),
            1 => Just(Op::Publish),
        ],
        1..400,
    )
}

/// The whole content of `hdr` as a reader sees it, checked against `model` through `get`,
/// `get_bulk` (with absent keys mixed in) and `iter`.
fn check_view<K, V>(a: &Arena, hdr: &HashHdr, model: &HashMap<K, V>, absent: &[K])
where
    K: HashKey + std::hash::Hash + Debug,
    V: Pod + PartialEq + Debug,
{
    type T<K, V> = HashTable<K, V>;
    let mem = a.mem();
    assert_eq!(T::<K, V>::len(hdr), model.len());
    for (k, v) in model {
        assert_eq!(T::<K, V>::get(mem, hdr, k), Some(v), "key {k:?}");
    }
    let mut keys: Vec<K> = model.keys().copied().collect();
    keys.extend(absent.iter().filter(|k| !model.contains_key(k)));
    let mut out = vec![None; keys.len()];
    let hits = T::<K, V>::get_bulk(mem, hdr, &keys, &mut out);
    assert_eq!(hits, model.len());
    for (k, o) in keys.iter().zip(&out) {
        assert_eq!(o.as_ref(), model.get(k), "bulk key {k:?}");
    }
    let listed: HashMap<K, V> = T::<K, V>::iter(mem, hdr).map(|(k, v)| (*k, *v)).collect();
    assert_eq!(
        T::<K, V>::iter(mem, hdr).count(),
        model.len(),
        "iter repeats"
    );
    assert_eq!(&listed, model);
}

fn run_hash<K, V>(ops: Vec<Op<K, V>>)
where
    K: HashKey + std::hash::Hash + Debug,
    V: Pod + PartialEq + Debug,
{
    type T<K, V> = HashTable<K, V>;
    let mut a = arena(64 << 20);
    let mut hdr = HashHdr::default();
    let mut model: HashMap<K, V> = HashMap::new();
    // Published snapshots still readable: (header, contents, epoch published).
    let mut snaps: Vec<(HashHdr, HashMap<K, V>, u64)> = Vec::new();
    let mut epoch = 1;
    let mut touched: Vec<K> = Vec::new();
    for op in ops {
        match op {
            Op::Insert(k, v) => {
                touched.push(k);
                let got = T::<K, V>::insert(&mut a, &mut hdr, k, v).unwrap();
                assert_eq!(got, model.insert(k, v), "insert {k:?}");
            }
            Op::Remove(k) => {
                touched.push(k);
                let got = T::<K, V>::remove(&mut a, &mut hdr, &k).unwrap();
                assert_eq!(got, model.remove(&k), "remove {k:?}");
            }
            Op::Get(k) => assert_eq!(T::<K, V>::get(a.mem(), &hdr, &k), model.get(&k)),
            Op::Reserve(n) => {
                let before = T::<K, V>::capacity(&hdr);
                T::<K, V>::with_capacity(&mut a, &mut hdr, usize::from(n)).unwrap();
                assert!(T::<K, V>::capacity(&hdr) >= before.max(usize::from(n)));
            }
            Op::Publish => {
                epoch += 1;
                a.published(epoch);
                check_view(&a, &hdr, &model, &touched);
                for (old, old_model, _) in &snaps {
                    check_view(&a, old, old_model, &touched);
                }
                snaps.push((hdr, model.clone(), epoch));
                // Readers have passed all but the last two publications.
                let safe = epoch - 2;
                a.reclaim(Some(safe));
                snaps.retain(|s| s.2 >= safe);
                let mut blocks = Vec::new();
                T::<K, V>::trace(a.mem(), &hdr, &mut blocks);
                check_trace(&a, blocks);
            }
        }
    }
    check_view(&a, &hdr, &model, &touched);
    for (old, old_model, _) in &snaps {
        check_view(&a, old, old_model, &touched);
    }
    a.published(epoch + 1);
    a.reclaim(None);
    let mut blocks = Vec::new();
    T::<K, V>::trace(a.mem(), &hdr, &mut blocks);
    check_trace(&a, blocks);
    T::<K, V>::free(&mut a, &mut hdr);
    a.published(epoch + 2);
    a.reclaim(None);
    assert_eq!(a.stats().live_bytes, 0);
    assert_eq!(a.stats().retired_bytes, 0);
}

/// Keys from a small set (many hits, replaces and removes of present keys) or anywhere.
fn key64() -> impl Strategy<Value = u64> + Clone {
    prop_oneof![0u64..200, any::<u64>()]
}

fn key128() -> impl Strategy<Value = u128> + Clone {
    prop_oneof![(0u128..200).prop_map(|k| k << 64 | 0xfe80), any::<u128>()]
}

fn key16() -> impl Strategy<Value = [u8; 16]> + Clone {
    prop_oneof![(0u8..200).prop_map(|k| [k; 16]), any::<[u8; 16]>()]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn hash_u64_matches_hashmap(ops in ops(key64(), any::<u64>())) {
        run_hash::<u64, u64>(ops);
    }

    #[test]
    fn hash_u128_matches_hashmap(ops in ops(key128(), any::<u32>())) {
        run_hash::<u128, u32>(ops);
    }

    #[test]
    fn hash_bytes16_large_values_match_hashmap(ops in ops(key16(), any::<[u64; 4]>())) {
        run_hash::<[u8; 16], [u64; 4]>(ops);
    }

    /// Keys that all share one primary bucket: most live in their alternative bucket, and
    /// inserts need displacement chains and growth.
    #[test]
    fn hash_colliding_keys(seed in any::<u64>(), n in 10usize..120, removes in prop::collection::vec(any::<prop::sample::Index>(), 0..60)) {
        type T = HashTable<u64, u64>;
        let mut a = arena(16 << 20);
        let mut hdr = HashHdr::default();
        T::with_capacity_seeded(&mut a, &mut hdr, 150, seed).unwrap();
        let mask = (1u64 << hdr.bucket_bits) - 1;
        let target = 5 & mask;
        let keys: Vec<u64> = (0..)
            .filter(|k: &u64| k.hash_seeded(hdr.seed) & mask == target)
            .take(n)
            .collect();
        let mut model = HashMap::new();
        for (i, &k) in keys.iter().enumerate() {
            prop_assert_eq!(T::insert(&mut a, &mut hdr, k, i as u64).unwrap(), None);
            model.insert(k, i as u64);
        }
        a.published(2);
        let old = (hdr, model.clone());
        for r in removes {
            let k = keys[r.index(keys.len())];
            prop_assert_eq!(T::remove(&mut a, &mut hdr, &k).unwrap(), model.remove(&k));
        }
        a.published(3);
        check_view(&a, &hdr, &model, &keys);
        check_view(&a, &old.0, &old.1, &keys);
        let mut blocks = Vec::new();
        T::trace(a.mem(), &hdr, &mut blocks);
        T::trace(a.mem(), &old.0, &mut blocks);
        blocks.sort_unstable();
        blocks.dedup();
        let total: u64 = blocks.iter().map(|b| b.1).sum();
        prop_assert_eq!(total, a.stats().live_bytes + a.stats().retired_bytes);
    }

    /// Filling a small region: every failure is `RegionFull` and changes nothing; everything
    /// inserted before stays readable.
    #[test]
    fn hash_region_full(keys in prop::collection::vec(any::<u64>(), 1..3000), publish_every in 1usize..500) {
        type T = HashTable<u64, u64>;
        let mut a = arena(64 << 10);
        let mut hdr = HashHdr::default();
        let mut model = HashMap::new();
        let mut epoch = 1;
        for (i, k) in keys.into_iter().enumerate() {
            let before = (hdr, usage(&a));
            match T::insert(&mut a, &mut hdr, k, i as u64) {
                Ok(old) => prop_assert_eq!(old, model.insert(k, i as u64)),
                Err(Error::RegionFull { .. }) => {
                    prop_assert_eq!((hdr, usage(&a)), before);
                }
                Err(e) => panic!("unexpected {e}"),
            }
            if i % publish_every == 0 {
                epoch += 1;
                a.published(epoch);
                a.reclaim(Some(epoch - 1));
            }
        }
        check_view(&a, &hdr, &model, &[]);
        let mut blocks = Vec::new();
        T::trace(a.mem(), &hdr, &mut blocks);
        check_trace(&a, blocks);
    }
}

// ------------------------------------------------------------------------------------------
// PagedArray

#[derive(Clone, Debug)]
enum ArrOp {
    Set(u32, u64),
    Remove(u32),
    Publish,
}

fn index() -> impl Strategy<Value = u32> + Clone {
    prop_oneof![
        8 => 0u32..1200,
        1 => 0u32..PagedArray::<u64>::MAX_LEN,
    ]
}

fn arr_ops() -> impl Strategy<Value = Vec<ArrOp>> {
    prop::collection::vec(
        prop_oneof![
            8 => (index(), prop_oneof![1 => Just(0u64), 6 => any::<u64>()])
                .prop_map(|(i, v)| ArrOp::Set(i, v)),
            3 => index().prop_map(ArrOp::Remove),
            1 => Just(ArrOp::Publish),
        ],
        1..300,
    )
}

fn check_array(a: &Arena, hdr: &ArrayHdr, model: &BTreeMap<u32, u64>, probes: &[u32]) {
    type P = PagedArray<u64>;
    let mem = a.mem();
    for &i in probes.iter().chain(model.keys()) {
        assert_eq!(P::get(mem, hdr, i), model.get(&i), "index {i}");
    }
    let listed: Vec<(u32, u64)> = P::iter(mem, hdr).map(|(i, v)| (i, *v)).collect();
    let want: Vec<(u32, u64)> = model.iter().map(|(i, v)| (*i, *v)).collect();
    assert_eq!(listed, want);
    assert!(model.keys().all(|&i| i < P::len(hdr)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn array_matches_btreemap(ops in arr_ops()) {
        type P = PagedArray<u64>;
        let mut a = arena(256 << 20);
        let mut hdr = ArrayHdr::default();
        let mut model: BTreeMap<u32, u64> = BTreeMap::new();
        let mut snaps: Vec<(ArrayHdr, BTreeMap<u32, u64>, u64)> = Vec::new();
        let mut probes = Vec::new();
        let mut epoch = 1;
        for op in ops {
            match op {
                ArrOp::Set(i, v) => {
                    probes.push(i);
                    P::set(&mut a, &mut hdr, i, v).unwrap();
                    if v == 0 {
                        model.remove(&i);
                    } else {
                        model.insert(i, v);
                    }
                }
                ArrOp::Remove(i) => {
                    probes.push(i);
                    P::remove(&mut a, &mut hdr, i).unwrap();
                    model.remove(&i);
                }
                ArrOp::Publish => {
                    epoch += 1;
                    a.published(epoch);
                    check_array(&a, &hdr, &model, &probes);
                    for (old, old_model, _) in &snaps {
                        check_array(&a, old, old_model, &probes);
                    }
                    snaps.push((hdr, model.clone(), epoch));
                    let safe = epoch - 2;
                    a.reclaim(Some(safe));
                    snaps.retain(|s| s.2 >= safe);
                    let mut blocks = Vec::new();
                    P::trace(a.mem(), &hdr, &mut blocks);
                    check_trace(&a, blocks);
                }
            }
        }
        check_array(&a, &hdr, &model, &probes);
        a.published(epoch + 1);
        a.reclaim(None);
        let mut blocks = Vec::new();
        P::trace(a.mem(), &hdr, &mut blocks);
        check_trace(&a, blocks.clone());
        // Pages hold at least one element each (empty pages are freed).
        let pages = blocks.len().saturating_sub(1);
        let used: std::collections::BTreeSet<usize> =
            model.keys().map(|&i| i as usize / P::PER_PAGE).collect();
        prop_assert_eq!(pages, used.len());
        P::free(&mut a, &mut hdr);
        a.published(epoch + 2);
        a.reclaim(None);
        prop_assert_eq!(a.stats().live_bytes, 0);
    }

    /// A full region fails `set` with `RegionFull` and changes nothing.
    #[test]
    fn array_region_full(idx in prop::collection::vec(0u32..(1 << 20), 1..60)) {
        type P = PagedArray<u64>;
        let mut a = arena(64 << 10);
        let mut hdr = ArrayHdr::default();
        let mut model = BTreeMap::new();
        for (n, i) in idx.into_iter().enumerate() {
            let before = (hdr, usage(&a));
            match P::set(&mut a, &mut hdr, i, n as u64 + 1) {
                Ok(()) => {
                    model.insert(i, n as u64 + 1);
                }
                Err(Error::RegionFull { .. }) => prop_assert_eq!((hdr, usage(&a)), before),
                Err(e) => panic!("unexpected {e}"),
            }
        }
        check_array(&a, &hdr, &model, &[]);
        let mut blocks = Vec::new();
        P::trace(a.mem(), &hdr, &mut blocks);
        check_trace(&a, blocks);
    }
}
