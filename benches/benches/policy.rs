//! NetworkPolicy compilation on `lace-bench`'s kube-vnet-shaped world
//! (`lace_benches::policy`): node-1's tables compiled and applied from nothing, and one pod's
//! membership label toggled (incremental plan + apply). Full size under `--bench`, the smoke
//! size when run as a test.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use lace_benches::policy::{full_compile, vnet_world, LabelBench, VnetSizes};
use lace_benches::report::Scale;

fn sizes() -> VnetSizes {
    if Scale::for_criterion().smoke {
        VnetSizes {
            pods: 1_000,
            namespaces: 20,
            vnets: 30,
            nodes: 4,
            ..VnetSizes::FULL
        }
    } else {
        VnetSizes::FULL
    }
}

fn policy(c: &mut Criterion) {
    let world = vnet_world(&sizes()).expect("world");
    let dir = std::path::PathBuf::from("/dev/shm");
    c.bench_function("policy/compile_full", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|i| {
                    full_compile(
                        &world,
                        &dir,
                        &format!("crit-policy-{}-{i}", std::process::id()),
                    )
                    .expect("compile")
                    .1
                })
                .sum::<Duration>()
        })
    });
    let mut inc = LabelBench::new(&sizes()).expect("world");
    c.bench_function("policy/one_pod_label", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| inc.one_pod_label().expect("one label"))
                .sum::<Duration>()
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3));
    targets = policy
}
criterion_main!(benches);
