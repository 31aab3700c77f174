//! Binding one pod against 1,000 policies (the deciding one last; `_cel`: the seed's per-team
//! CEL rule decides) and against the deciding policy alone. The workload is `lace-bench`'s
//! (`lace_benches::control`); the report gives the same figures as ratios.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use lace_benches::control::{bench_namespace_labels, bench_pod, policy_mix};
use lace_control::api::MatchKind;
use lace_control::bind::{Binding, BindingPolicies};

fn bind(c: &mut Criterion) {
    let labels = bench_namespace_labels();
    let pod = bench_pod();
    let mix = policy_mix(false).expect("policies");
    let sets = [
        ("1000policies.us_per_pod", BindingPolicies::new(&mix)),
        (
            "1000policies_cel.us_per_pod",
            BindingPolicies::new(&policy_mix(true).expect("policies")),
        ),
        ("1policy.us_per_pod", BindingPolicies::new(&mix[999..])),
    ];
    let mut group = c.benchmark_group("bind");
    for (name, set) in &sets {
        assert!(set.errors().is_empty());
        assert_eq!(
            set.bind(MatchKind::Pod, &pod, &labels),
            Binding::Network("blue".into()),
            "{name}: the deciding policy decides"
        );
        group.bench_function(*name, |b| {
            b.iter(|| set.bind(MatchKind::Pod, black_box(&pod), black_box(&labels)))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bind
}
criterion_main!(benches);
