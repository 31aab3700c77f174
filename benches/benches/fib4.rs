//! IPv4 FIB bulk lookups: DPDK's `rte_fib` (DIR24_8) and lace's FIB on a 900k-route BGP-like
//! table and a 1k-route pod table, side by side in one group per table (`rte_fib/<burst>`,
//! `lace/<burst>`), on the same addresses in the same bursts.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lace_benches::dpdk::{DpdkFib4, Eal, EalOptions};
use lace_benches::lace::{LaceFib, REGION_BYTES};
use lace_benches::report::{size_tag, Scale};
use lace_benches::workload::{self, Route4};

/// Addresses per iteration: enough to spread over the table, few enough for quick samples.
const LOOKUPS: usize = 1 << 16;

fn bench_table(c: &mut Criterion, eal: Eal, group: &str, routes: &[Route4], seed: u64) {
    let scale = Scale::for_criterion();
    let dests = workload::destinations_v4(routes, LOOKUPS, seed);
    let (fib, _) = DpdkFib4::new(eal, routes).expect("rte_fib builds");
    let (lace, _) = LaceFib::<u32>::load("bench-fib4", REGION_BYTES, routes).expect("lace loads");
    let mut check = vec![0u32; dests.len().min(4096)];
    lace.lookup_bulk(&dests[..check.len()], &mut check);
    let mut want = vec![0u64; check.len()];
    fib.lookup_bulk(&dests[..check.len()], &mut want);
    assert!(
        check.iter().zip(&want).all(|(l, d)| u64::from(*l) == *d),
        "lace and rte_fib disagree"
    );
    let mut group = c.benchmark_group(group);
    group.throughput(Throughput::Elements(dests.len() as u64));
    for &burst in &scale.bursts {
        let mut out = vec![0u64; burst];
        group.bench_with_input(BenchmarkId::new("rte_fib", burst), &burst, |b, &burst| {
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
                for chunk in dests.chunks(burst) {
                    lace.lookup_bulk(black_box(chunk), &mut out[..chunk.len()]);
                }
                black_box(&out);
            })
        });
    }
    group.finish();
}

fn fib4(c: &mut Criterion) {
    let eal = Eal::init(&EalOptions::default()).expect("DPDK EAL starts");
    fib4_on(c, eal);
    // DPDK's runtime directory (/var/run/dpdk/<prefix>) goes with the EAL; without this each
    // run left one behind.
    eal.cleanup()
        .expect("DPDK EAL cleanup: every table is gone");
}

fn fib4_on(c: &mut Criterion, eal: Eal) {
    let scale = Scale::for_criterion();
    let bgp = workload::bgp_v4_routes(scale.fib4_routes, scale.seed, scale.nexthops);
    bench_table(
        c,
        eal,
        &format!("fib4.{}", size_tag(bgp.len())),
        &bgp,
        scale.seed + 1,
    );
    let pods = workload::pod_routes_v4(scale.pod_routes);
    bench_table(
        c,
        eal,
        &format!("fib4.pod{}", size_tag(pods.len())),
        &pods,
        scale.seed + 2,
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = fib4
}
criterion_main!(benches);
