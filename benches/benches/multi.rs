//! Many networks: 1,000 pod networks of 1,000 routes each (`pod_networks_v4`) in one arena,
//! their FIB headers in an array. `multi/mixed32`: a random network per address, bursts of 32
//! through `Fib::lookup_bulk_mixed` (`lace-bench`'s `multi.*.lookup_cycles`, reported there
//! against `fib4.900k.lookup_cycles`); `multi/single`: the same stream, one `Fib::lookup` each;
//! `multi/grouped32`: a random network per burst of 32, bulk lookup. The 1k-route pod table
//! alone (`pod1k/single`, `pod1k/bulk32`) is the yardstick of the last two, as in the report
//! (`multi.*.lookup_cycles.single`, `.grouped32` against `fib4.1k.lookup_cycles[.single]`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use lace_benches::lace::{LaceFib, MultiFib, REGION_BYTES};
use lace_benches::report::Scale;
use lace_benches::workload;

/// Lookups per iteration.
const LOOKUPS: usize = 1 << 16;
const BURST: usize = 32;

fn multi(c: &mut Criterion) {
    let scale = Scale::for_criterion();
    let nets = workload::pod_networks_v4(scale.multi_networks, scale.pod_routes);
    let (multi, _) = MultiFib::load(REGION_BYTES, &nets).expect("networks load");
    let (pod, _) =
        LaceFib::<u32>::load("bench-pod", REGION_BYTES, &nets[0]).expect("pod table loads");
    let stream = workload::multi_destinations_v4(&nets, LOOKUPS, scale.seed + 11);
    let (gnets, gaddrs) = workload::grouped_destinations_v4(&nets, LOOKUPS, BURST, scale.seed + 12);
    let pod_dests = workload::destinations_v4(&nets[0], LOOKUPS, scale.seed + 2);
    let lpm = workload::ReferenceLpm4::new(&nets[0]);
    assert!(pod_dests
        .iter()
        .take(1000)
        .all(|&a| Some(pod.lookup(a)) == lpm.lookup(a)));

    let mut group = c.benchmark_group(format!(
        "multi.{}x{}",
        scale.multi_networks, scale.pod_routes
    ));
    group.throughput(Throughput::Elements(LOOKUPS as u64));
    group.bench_function("multi/single", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for &(n, a) in &stream {
                acc = acc.wrapping_add(multi.lookup(n, black_box(a)));
            }
            black_box(acc)
        })
    });
    let mixed_keys: Vec<u32> = stream.iter().map(|&(_, a)| a).collect();
    let mixed_hdrs: Vec<_> = stream
        .iter()
        .map(|&(n, _)| multi.hdr(n).expect("every network of the stream is loaded"))
        .collect();
    let mut out = [0u32; BURST];
    group.bench_function(format!("multi/mixed{BURST}"), |b| {
        b.iter(|| {
            for (keys, hdrs) in mixed_keys.chunks(BURST).zip(mixed_hdrs.chunks(BURST)) {
                multi.lookup_bulk_mixed(black_box(hdrs), black_box(keys), &mut out[..keys.len()]);
                black_box(&out);
            }
        })
    });
    group.bench_function(format!("multi/grouped{BURST}"), |b| {
        b.iter(|| {
            for (&n, keys) in gnets.iter().zip(gaddrs.chunks(BURST)) {
                multi.lookup_bulk(n, black_box(keys), &mut out[..keys.len()]);
                black_box(&out);
            }
        })
    });
    group.bench_function("pod1k/single", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for &a in &pod_dests {
                acc = acc.wrapping_add(pod.lookup(black_box(a)));
            }
            black_box(acc)
        })
    });
    group.bench_function(format!("pod1k/bulk{BURST}"), |b| {
        b.iter(|| {
            for keys in pod_dests.chunks(BURST) {
                pod.lookup_bulk(black_box(keys), &mut out[..keys.len()]);
                black_box(&out);
            }
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = multi
}
criterion_main!(benches);
