//! Publication latency: from `TableWriter::publish()` until a `TableReader` thread on another
//! CPU (pinned when the process may use one) sees the new generation. One change and one
//! publication per iteration: `neighbor` (one `set_neighbor`) and `route` (one /32 added or
//! removed). The `lace-bench` report gives the distribution (p50/p99/p999); criterion reports
//! the mean.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use lace_benches::lace::{Change, PublishProbe};
use lace_benches::report::Scale;
use lace_benches::{sys, workload};

fn publish(c: &mut Criterion) {
    let scale = Scale::for_criterion();
    let cpus = sys::allowed_cpus().unwrap_or_default();
    let writer_cpu = sys::current_cpu();
    // Keep the writer where it is and put the reader on another CPU.
    if let Some(w) = writer_cpu.filter(|w| cpus.contains(w)) {
        let _ = sys::pin_current_thread(w);
    }
    let reader_cpu = cpus.iter().copied().find(|&c| Some(c) != writer_cpu);
    let mut probe = PublishProbe::start(reader_cpu, &workload::pod_routes_v4(scale.pod_routes))
        .expect("the probe starts");
    eprintln!("publish bench: {}", probe.pinning());
    let mut group = c.benchmark_group("publish");
    for (name, change) in [("neighbor", Change::Neighbor), ("route", Change::Route)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| probe.sample(change).expect("publication seen"))
                    .sum::<Duration>()
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = publish
}
criterion_main!(benches);
