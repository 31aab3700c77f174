//! `bind.1000policies.us_per_pod`: one pod bound against 1,000 policies in a realistic mix —
//! most select other namespaces (`namespaceSelector`) or other apps (`matchLabels`), some are
//! CEL rules scoped to other namespaces, some pin nothing (`Exists` on a label the pod lacks),
//! some are for services only — with the deciding policy last. `1000policies_cel` is the same
//! with the seed's per-team CEL policy deciding (the pod is converted for CEL once). The anchor
//! is one policy (`1policy`), in the same run.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use lace_control::api::{MatchKind, NetworkBindingPolicy};
use lace_control::bind::{Binding, BindingPolicies};
use serde_json::{json, Value};

fn policy(name: &str, priority: usize, spec: Value) -> NetworkBindingPolicy {
    let mut spec = spec;
    spec["priority"] = json!(priority);
    serde_json::from_value(json!({
        "apiVersion": "lace-cni.io/v1alpha1",
        "kind": "NetworkBindingPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("bench policy")
}

fn mix(cel_decides: bool) -> Vec<NetworkBindingPolicy> {
    let mut out = Vec::with_capacity(1000);
    for i in 0..999 {
        let spec = match i % 100 {
            0..=84 => json!({"rules": [{"network": format!("net-{i}"),
                "selector": {"namespaceSelector": {"matchLabels": {"team": format!("team-{i}")}}}}]}),
            85..=92 => json!({"matchKind": ["pod"], "rules": [{"network": format!("app-{i}"),
                "selector": {"matchLabels": {"app": format!("app-{i}")}}}]}),
            93..=96 => json!({"matchKind": ["pod"], "rules": [{
                "celExpression": "object.metadata.namespace.startsWith('team-') ? optional.of(object.metadata.namespace.substring(5)) : optional.none()",
                "selector": {"namespaceSelector": {"matchLabels": {"team": format!("cel-{i}")}}}}]}),
            97..=98 => json!({"rules": [{"network": format!("special-{i}"),
                "selector": {"matchExpressions": [{"key": format!("special-{i}"), "operator": "Exists"}]}}]}),
            _ => json!({"matchKind": ["service"], "rules": [{"network": format!("svc-{i}")}]}),
        };
        out.push(policy(&format!("policy-{i:04}"), i, spec));
    }
    let last = if cel_decides {
        json!({"matchKind": ["pod"], "rules": [{
            "celExpression": "object.metadata.namespace.startsWith('team-') ? optional.of(object.metadata.namespace.substring(5)) : optional.none()",
            "selector": {"namespaceSelector": {"matchLabels": {"team": "blue"}}}}, {"network": "default"}]})
    } else {
        json!({"rules": [{"network": "blue", "selector": {"namespaceSelector": {"matchLabels": {"team": "blue"}}}}]})
    };
    out.push(policy("policy-9999", 999, last));
    out
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-7d4b9c8f6-x2k9p",
            "namespace": "team-blue",
            "uid": "0d0c6f3e-2a5b-4c1d-9e8f-7a6b5c4d3e2f",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c8f6", "version": "v1"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2024-01-01T00:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f6"}]
        },
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "web", "image": "nginx:1.25", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
            "restartPolicy": "Always"
        }
    })
}

fn bind(c: &mut Criterion) {
    let namespace_labels: BTreeMap<String, String> = [
        ("team", "blue"),
        ("kubernetes.io/metadata.name", "team-blue"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let pod = pod();
    let sets = [
        ("1000policies.us_per_pod", BindingPolicies::new(&mix(false))),
        (
            "1000policies_cel.us_per_pod",
            BindingPolicies::new(&mix(true)),
        ),
        (
            "1policy.us_per_pod",
            BindingPolicies::new(&mix(false)[999..]),
        ),
    ];
    let mut group = c.benchmark_group("bind");
    for (name, set) in &sets {
        assert!(set.errors().is_empty());
        assert_eq!(
            set.bind(MatchKind::Pod, &pod, &namespace_labels),
            Binding::Network("blue".into()),
            "{name}: the deciding policy decides"
        );
        group.bench_function(*name, |b| {
            b.iter(|| {
                set.bind(
                    MatchKind::Pod,
                    black_box(&pod),
                    black_box(&namespace_labels),
                )
            })
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
