//! A NEW connection to a ClusterIP: lace's Service lookup + Maglev pick (`lace/<burst>`:
//! `Snapshot::service` + `ServiceView::pick`, one snapshot per burst) beside `rte_hash` looking
//! up the same 24-byte keys (`rte_hash/<burst>`), 1,000 Services × 3 ports × 10 backends, the
//! same connections in the same bursts.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lace_benches::dpdk::{DpdkHash, Eal, EalOptions};
use lace_benches::report::Scale;
use lace_benches::services::{key_bytes, pick_burst, LaceServices, ServiceWorkload};

/// Connections per iteration.
const CONNECTIONS: usize = 1 << 16;

fn service(c: &mut Criterion) {
    let eal = Eal::init(&EalOptions::default()).expect("DPDK EAL starts");
    service_on(c, eal);
    // DPDK's runtime directory (/var/run/dpdk/<prefix>) goes with the EAL; without this each
    // run left one behind.
    eal.cleanup()
        .expect("DPDK EAL cleanup: every table is gone");
}

fn service_on(c: &mut Criterion, eal: Eal) {
    let scale = Scale::for_criterion();
    let w = ServiceWorkload::new(1000, 10);
    let (tables, _) = LaceServices::build(&w).expect("the Service tables build");
    let mut h = tables.handle().expect("a reader slot");
    let conns = w.connections(CONNECTIONS, scale.seed + 12);
    let keys: Vec<[u8; 24]> = w.keys.iter().map(key_bytes).collect();
    let dpdk = DpdkHash::<24>::with_keys(eal, &keys, |i| i as u64).expect("rte_hash builds");
    let lookups: Vec<[u8; 24]> = conns.iter().map(|(k, _)| keys[*k as usize]).collect();
    let mut group = c.benchmark_group("service.lb.3k");
    group.throughput(Throughput::Elements(conns.len() as u64));
    for &burst in &scale.bursts {
        let mut out = vec![0u64; burst];
        group.bench_with_input(BenchmarkId::new("rte_hash", burst), &burst, |b, &burst| {
            b.iter(|| {
                for chunk in lookups.chunks(burst) {
                    dpdk.lookup_bulk_data(black_box(chunk), &mut out[..chunk.len()]);
                }
                black_box(&out);
            })
        });
        group.bench_with_input(BenchmarkId::new("lace", burst), &burst, |b, &burst| {
            b.iter(|| {
                for chunk in conns.chunks(burst) {
                    pick_burst(&mut h, &w.keys, black_box(chunk), &mut out[..chunk.len()]);
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
    targets = service
}
criterion_main!(benches);
