//! One pod change → incremental plan + diff + publish into real tables, on the world of
//! `lace-bench` (`lace_benches::control::CompileBench`: 100 networks × 50 nodes × 20 pods under
//! `--bench`, tiny when run as a test). The report gives p50/p99 against a full replan.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use lace_benches::control::{CompileBench, CompileSizes};
use lace_benches::report::Scale;

fn compile(c: &mut Criterion) {
    let mut b = CompileBench::new(CompileSizes::of(&Scale::for_criterion())).expect("world");
    c.bench_function("compile/one_pod", |bch| {
        bch.iter_custom(|iters| {
            (0..iters)
                .map(|_| b.one_pod(false).expect("one pod"))
                .sum::<Duration>()
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    targets = compile
}
criterion_main!(benches);
