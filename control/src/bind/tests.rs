//! The index only skips rules that cannot match: an indexed bind equals a walk over every rule,
//! for random policies (names, labels, namespace labels, `In`, deny, CEL) and resources.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::api::{BindingRule, LabelSelector, LabelSelectorRequirement, ResourceSelector};

const KEYS: &[&str] = &["app", "team", "tier"];
const VALUES: &[&str] = &["a", "b", "c"];
const NETS: &[&str] = &["n1", "n2", "n3"];

fn requirement() -> impl Strategy<Value = LabelSelectorRequirement> {
    (
        0..KEYS.len(),
        prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist"]),
        prop::collection::vec(0..VALUES.len(), 1..3),
    )
        .prop_map(|(k, op, vs)| LabelSelectorRequirement {
            key: KEYS[k].into(),
            operator: op.into(),
            values: if matches!(op, "In" | "NotIn") {
                vs.into_iter().map(|v| VALUES[v].into()).collect()
            } else {
                Vec::new()
            },
        })
}

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        (0..KEYS.len()).prop_map(|k| KEYS[k].to_owned()),
        (0..VALUES.len()).prop_map(|v| VALUES[v].to_owned()),
        0..3,
    )
}

fn rule() -> impl Strategy<Value = BindingRule> {
    (
        0..4u8,
        prop::option::of(prop::sample::select(vec!["p0", "p1"])),
        labels(),
        prop::collection::vec(requirement(), 0..2),
        prop::option::of((labels(), prop::collection::vec(requirement(), 0..2))),
        0..NETS.len(),
    )
        .prop_map(|(shape, name, ml, me, ns, net)| {
            let selector = ResourceSelector {
                name: name.map(str::to_owned),
                match_labels: ml,
                match_expressions: me,
                namespace_selector: ns.map(|(match_labels, match_expressions)| LabelSelector {
                    match_labels,
                    match_expressions,
                }),
            };
            match shape {
                0 => BindingRule {
                    policy: Some(RulePolicy::Deny),
                    network: Some(NETS[net].into()),
                    selector: Some(ResourceSelector {
                        name: selector.name,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                1 => BindingRule {
                    cel_expression: Some(
                        "has(object.metadata.labels.app) ? optional.of('n' + string(size(object.metadata.labels.app))) : optional.none()".into(),
                    ),
                    selector: Some(selector),
                    ..Default::default()
                },
                _ => BindingRule {
                    network: Some(NETS[net].into()),
                    selector: Some(selector),
                    ..Default::default()
                },
            }
        })
}

fn policy() -> impl Strategy<Value = NetworkBindingPolicySpec> {
    (
        -2..3i32,
        prop::option::of(prop::collection::vec(
            prop::sample::select(vec![MatchKind::Pod, MatchKind::Service]),
            1..3,
        )),
        prop::collection::vec(rule(), 1..4),
    )
        .prop_map(|(priority, match_kind, rules)| NetworkBindingPolicySpec {
            priority,
            match_kind,
            rules,
        })
}

proptest! {
    #[test]
    fn index_equals_full_walk(
        specs in prop::collection::vec(policy(), 0..12),
        name in prop::sample::select(vec!["p0", "p1", "p2"]),
        pod_labels in labels(),
        ns_labels in labels(),
        service in any::<bool>(),
    ) {
        let policies: Vec<NetworkBindingPolicy> = specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| NetworkBindingPolicy::new(&format!("policy-{i:02}"), spec))
            .collect();
        let set = BindingPolicies::new(&policies);
        prop_assert!(set.errors().is_empty(), "{:?}", set.errors());
        let kind = if service { MatchKind::Service } else { MatchKind::Pod };
        let object = json!({"metadata": {"name": name, "namespace": "ns", "labels": pod_labels}});
        let all: Vec<u32> = (0..set.order.len() as u32).collect();
        let indexed = set.decide(kind, &object, &ns_labels);
        let full = set.walk(kind, &object, &all, &ns_labels);
        prop_assert_eq!(indexed, full);
    }
}
