//! IPv6 FIB bulk lookups: DPDK's `rte_fib6` (TRIE) and lace's FIB on a 200k-route BGP-like
//! table, side by side (`rte_fib6/<burst>`, `lace/<burst>`), same addresses, same bursts.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lace_benches::dpdk::{DpdkFib6, Eal, EalOptions};
use lace_benches::lace::{routes6_host, LaceFib, REGION_BYTES};
use lace_benches::report::{size_tag, Scale};
use lace_benches::workload;

/// Addresses per iteration.
const LOOKUPS: usize = 1 << 16;

fn fib6(c: &mut Criterion) {
    let eal = Eal::init(&EalOptions::default()).expect("DPDK EAL starts");
    fib6_on(c, eal);
    // DPDK's runtime directory (/var/run/dpdk/<prefix>) goes with the EAL; without this each
    // run left one behind.
    eal.cleanup()
        .expect("DPDK EAL cleanup: every table is gone");
}

fn fib6_on(c: &mut Criterion, eal: Eal) {
    let scale = Scale::for_criterion();
    let routes = workload::bgp_v6_routes(scale.fib6_routes, scale.seed + 3, scale.nexthops);
    let dests = workload::destinations_v6(&routes, LOOKUPS, scale.seed + 4);
    let (fib, _) = DpdkFib6::new(eal, &routes).expect("rte_fib6 builds");
    let (lace, _) = LaceFib::<u128>::load("bench-fib6", REGION_BYTES, &routes6_host(&routes))
        .expect("lace loads");
    // lace takes host-order u128 keys; rte_fib6 network-order bytes: the same addresses.
    let keys: Vec<u128> = dests.iter().map(|a| u128::from_be_bytes(*a)).collect();
    let mut check = vec![0u32; keys.len().min(4096)];
    lace.lookup_bulk(&keys[..check.len()], &mut check);
    let mut want = vec![0u64; check.len()];
    fib.lookup_bulk(&dests[..check.len()], &mut want);
    assert!(
        check.iter().zip(&want).all(|(l, d)| u64::from(*l) == *d),
        "lace and rte_fib6 disagree"
    );
    let mut group = c.benchmark_group(format!("fib6.{}", size_tag(routes.len())));
    group.throughput(Throughput::Elements(dests.len() as u64));
    for &burst in &scale.bursts {
        let mut out = vec![0u64; burst];
        group.bench_with_input(BenchmarkId::new("rte_fib6", burst), &burst, |b, &burst| {
            b.iter(|| {
                for chunk in dests.chunks(burst) {
                    fib.lookup_bulk(black_box(chunk), &mut out[..chunk.len()]);
                }
                black_box(&out);
            })
        });
        let mut out = vec![0u32; burst];
        group.bench_with_input(BenchmarkId::new("lace", burst), &burst, |b, &burst| {
            b.iter(|| {
                for chunk in keys.chunks(burst) {
                    lace.lookup_bulk(black_box(chunk), &mut out[..chunk.len()]);
                }
                black_box(&out);
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = fib6
}
criterion_main!(benches);
