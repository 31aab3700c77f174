//! Exact-match bulk lookups: DPDK's `rte_hash` with 1M 8-byte keys (FDB-like: MAC + bridge
//! domain) and 1M 16-byte keys (neighbor-like: IPv6 addresses). lace's FDB and neighbor tables
//! go into the same groups as `lace/<burst>`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lace_benches::dpdk::{DpdkHash, Eal, EalOptions};
use lace_benches::report::{size_tag, Scale};
use lace_benches::workload;

/// Keys looked up per iteration (all present, random order).
const LOOKUPS: usize = 1 << 16;

fn bench_table<const K: usize>(
    c: &mut Criterion,
    eal: Eal,
    group: &str,
    keys: &[[u8; K]],
    seed: u64,
) {
    let scale = Scale::for_criterion();
    let lookups = workload::sample(keys, LOOKUPS, seed);
    let table = DpdkHash::<K>::with_keys(eal, keys, |i| i as u64).expect("rte_hash builds");
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
    }
    group.finish();
}

fn hash(c: &mut Criterion) {
    let eal = Eal::init(&EalOptions::default()).expect("DPDK EAL starts");
    let scale = Scale::for_criterion();
    let fdb = workload::fdb_keys(scale.hash_entries, scale.seed + 5);
    bench_table(c, eal, "hash.k8", &fdb, scale.seed + 6);
    let neighbors = workload::ipv6_keys(scale.hash_entries);
    bench_table(c, eal, "hash.k16", &neighbors, scale.seed + 7);
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
