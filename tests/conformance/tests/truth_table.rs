//! Every case of the suite: the evaluator, the compiled tables and the forwarder pipeline agree
//! on every probe of every step, upstream's tables hold, every connection a step refuses finds
//! its policy generation changed and is cut by the pipeline, and what a step still allows
//! survives it.

use lace_conformance::{
    check, generated, kube_vnet, revoke, upstream, Case, Checked, PipelineChecked,
};

fn run_all(cases: &[Case]) -> Checked {
    let mut total = Checked::default();
    let mut failures = Vec::new();
    for c in cases {
        match check(c) {
            Ok(k) => {
                total.probes += k.probes;
                total.upstream += k.upstream;
                total.revoked += k.revoked;
                total.pipeline.add(&k.pipeline);
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    total
}

#[test]
fn upstream_e2e_scenarios() {
    let cases = upstream::cases();
    assert_eq!(cases.len(), 48, "the 48 scenarios of network_policy.go");
    let t = run_all(&cases);
    assert!(t.upstream > 0 && t.probes > t.upstream);
    assert!(t.pipeline.probes > 0 && t.pipeline.allowed < t.pipeline.probes);
    assert!(t.pipeline.revoked > 0 && t.pipeline.survived > 0);
    println!("upstream: {} cases, {t:?}", cases.len());
}

#[test]
fn generated_families() {
    let cases = generated::cases();
    assert!(cases.len() >= 200, "{} generated cases", cases.len());
    let t = run_all(&cases);
    assert!(t.pipeline.probes > 0 && t.pipeline.allowed < t.pipeline.probes);
    println!("generated: {} cases, {t:?}", cases.len());
}

#[test]
fn revoke_on_narrow() {
    let cases = revoke::cases();
    let mut total = PipelineChecked::default();
    for c in &cases {
        let k = check(c).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            k.revoked > 0,
            "{}: the narrowing step revoked nothing",
            c.name
        );
        assert!(
            k.pipeline.revoked + k.pipeline.cut_untracked > 0,
            "{}: the pipeline cut no established connection",
            c.name
        );
        total.add(&k.pipeline);
    }
    // Connections in the flow table were revoked (most cases track the network before they
    // narrow; the deny-all that appears where nothing was isolated cuts untracked ones).
    assert!(total.revoked > 0 && total.cut_untracked > 0, "{total:?}");
    // And what a step still allows survives it (the widening cases).
    assert!(total.survived > 0, "{total:?}");
    println!("revoke: {} cases, pipeline {total:?}", cases.len());
}

#[test]
fn kube_vnet_shapes() {
    let cases = kube_vnet::cases();
    let t = run_all(&cases);
    // kube-vnet's own promises were checked (its Expect tables), the pipeline allowed and
    // denied, and the dynamic case cut what its steps took away.
    assert!(t.upstream > 0 && t.revoked > 0, "{t:?}");
    assert!(t.pipeline.allowed > 0 && t.pipeline.allowed < t.pipeline.probes);
    assert!(t.pipeline.revoked + t.pipeline.cut_untracked > 0, "{t:?}");
    println!("kube-vnet: {} cases, {t:?}", cases.len());
}
