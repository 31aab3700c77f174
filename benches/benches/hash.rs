//! Exact-match bulk lookups: DPDK's `rte_hash` and lace's hash table, side by side
//! (`rte_hash/<burst>`, `lace/<burst>`), with 1M 8-byte keys (FDB-like: MAC + bridge domain,
//! lace: `u64 → u64`) and 1M 16-byte keys (neighbor-like: IPv6 addresses, lace:
//! `u128 → NeighRec`). Same keys, same lookup order, same bursts.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lace_benches::dpdk::{DpdkHash, Eal, EalOptions};
use lace_benches::lace::{LaceHash, REGION_BYTES};
use lace_benches::report::{size_tag, Scale};
use lace_benches::workload;
use lace_shared::hash::HashKey;
use lace_shared::pod::Pod;
use lace_shared::types::{MacAddr, NeighRec};

/// Keys looked up per iteration (all present, random order).
const LOOKUPS: usize = 1 << 16;

fn bench_table<const K: usize, LK: HashKey, V: Pod>(
    c: &mut Criterion,
    eal: Eal,
    group: &str,
    keys: &[[u8; K]],
    seed: u64,
    lace_key: fn(&[u8; K]) -> LK,
    lace_value: fn(usize) -> V,
) {
    let scale = Scale::for_criterion();
    let lookups = workload::sample(keys, LOOKUPS, seed);
    let table = DpdkHash::<K>::with_keys(eal, keys, |i| i as u64).expect("rte_hash builds");
    let entries: Vec<(LK, V)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (lace_key(k), lace_value(i)))
        .collect();
    let (lace, _) =
        LaceHash::<LK, V>::build(group, REGION_BYTES, &entries, scale.seed).expect("lace builds");
    let lace_lookups: Vec<LK> = lookups.iter().map(lace_key).collect();
    let mut hits = vec![None; lace_lookups.len()];
    assert_eq!(
        lace.get_bulk(&lace_lookups, &mut hits),
        lace_lookups.len(),
        "every key is present"
    );
    let mut group = c.benchmark_group(format!("{group}.{}", size_tag(keys.len())));
    group.throughput(Throughput::Elements(lookups.len() as u64));
    for &burst in &scale.bursts {
        let mut out = vec![0u64; burst];
        group.bench_with_input(BenchmarkId::new("rte_hash", burst), &burst, |b, &burst| {
            b.iter(|| {
                for chunk in lookups.chunks(burst) {
                    table.lookup_bulk_data(black_box(chunk), &mut out[..chunk.len()]);
                }
                black_box(&out);
            })
        });
        let mut out: Vec<Option<V>> = vec![None; burst];
        group.bench_with_input(BenchmarkId::new("lace", burst), &burst, |b, &burst| {
            b.iter(|| {
                for chunk in lace_lookups.chunks(burst) {
                    lace.get_bulk(black_box(chunk), &mut out[..chunk.len()]);
                }
                black_box(&out);
            })
        });
    }
    group.finish();
}

fn neigh_value(i: usize) -> NeighRec {
    let b = (i as u64).to_be_bytes();
    NeighRec::new(MacAddr([0x02, 0, b[4], b[5], b[6], b[7]]), false)
}

fn hash(c: &mut Criterion) {
    let eal = Eal::init(&EalOptions::default()).expect("DPDK EAL starts");
    hash_on(c, eal);
    // DPDK's runtime directory (/var/run/dpdk/<prefix>) goes with the EAL; without this each
    // run left one behind.
    eal.cleanup()
        .expect("DPDK EAL cleanup: every table is gone");
}

fn hash_on(c: &mut Criterion, eal: Eal) {
    let scale = Scale::for_criterion();
    let fdb = workload::fdb_keys(scale.hash_entries, scale.seed + 5);
    bench_table(
        c,
        eal,
        "hash.k8",
        &fdb,
        scale.seed + 6,
        |k| u64::from_be_bytes(*k),
        |i| i as u64,
    );
    let neighbors = workload::ipv6_keys(scale.hash_entries);
    bench_table(
        c,
        eal,
        "hash.k16",
        &neighbors,
        scale.seed + 7,
        |k| u128::from_be_bytes(*k),
        neigh_value,
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = hash
}
criterion_main!(benches);
