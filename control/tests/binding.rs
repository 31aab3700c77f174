//! NetworkBindingPolicy evaluation, one table per sentence group of the seed's "Binding",
//! "NetworkBindingPolicy fields" and "Dynamic network names with CEL".

use std::collections::BTreeMap;

use lace_control::api::{MatchKind, NetworkBindingPolicy};
use lace_control::bind::{
    Binding, BindingPolicies, CelEvalError, ContinuousBindings, PolicyError, CEL_VALID, VALID,
};
use serde_json::{json, Value};

/// Policies from a multi-document YAML stream of `spec`s, each prefixed by `# name`.
fn policies(yaml: &str) -> Vec<NetworkBindingPolicy> {
    yaml.split("---")
        .filter(|d| !d.trim().is_empty())
        .map(|doc| {
            let doc = doc.trim_start();
            let (first, spec) = doc.split_once('\n').expect("name line then spec");
            let name = first.trim().strip_prefix("# ").expect("a `# name` line");
            let spec: Value = serde_yaml::from_str(spec).expect("spec is YAML");
            serde_json::from_value(json!({
                "apiVersion": "lace-cni.io/v1alpha1",
                "kind": "NetworkBindingPolicy",
                "metadata": {"name": name, "generation": 1},
                "spec": spec,
            }))
            .expect("a NetworkBindingPolicy")
        })
        .collect()
}

fn object(namespace: &str, name: &str, labels: &[(&str, &str)]) -> Value {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    json!({"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": {"port": 80}})
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn net(n: &str) -> Binding {
    Binding::Network(n.to_owned())
}

/// One resource and the binding it must get.
struct Case {
    what: &'static str,
    kind: MatchKind,
    namespace: &'static str,
    name: &'static str,
    labels: &'static [(&'static str, &'static str)],
    namespace_labels: &'static [(&'static str, &'static str)],
    want: Binding,
}

fn pod(what: &'static str, namespace: &'static str, want: Binding) -> Case {
    Case {
        what,
        kind: MatchKind::Pod,
        namespace,
        name: "p",
        labels: &[],
        namespace_labels: &[],
        want,
    }
}

fn check(yaml: &str, cases: &[Case]) {
    let set = BindingPolicies::new(&policies(yaml));
    assert!(
        set.errors().is_empty(),
        "policies invalid: {:?}",
        set.errors()
    );
    for c in cases {
        let o = object(c.namespace, c.name, c.labels);
        let d = set.decide(c.kind, &o, &labels(c.namespace_labels));
        assert_eq!(
            d.binding, c.want,
            "{}: decided by {:?}",
            c.what, d.decided_by
        );
        assert!(d.errors.is_empty(), "{}: {:?}", c.what, d.errors);
    }
}

const PER_TEAM: &str = r#"
# per-team
matchKind: [pod]
rules:
- celExpression: >-
    object.metadata.namespace.startsWith('team-')
      ? optional.of(object.metadata.namespace.substring(5))
      : optional.none()
- network: default
"#;

#[test]
fn the_seeds_per_team_example() {
    check(
        PER_TEAM,
        &[
            pod("team-blue → blue", "team-blue", net("blue")),
            pod("team-red-x → red-x", "team-red-x", net("red-x")),
            pod(
                "no prefix falls through to default",
                "kube-system",
                net("default"),
            ),
            pod(
                "prefix only → '' → unbound",
                "team-",
                Binding::ExplicitlyUnbound,
            ),
            Case {
                kind: MatchKind::Service,
                ..pod(
                    "matchKind [pod] does not bind services",
                    "team-blue",
                    Binding::NoMatch,
                )
            },
        ],
    );
}

#[test]
fn priority_lowest_first_default_zero_ties_by_name() {
    let yaml = r#"
# z-late
priority: 10
rules: [{network: ten}]
---
# m-default
rules: [{network: zero}]
---
# a-negative
priority: -1
rules: [{network: minus-one}, ]
"#;
    check(
        yaml,
        &[pod("lowest priority value wins", "ns", net("minus-one"))],
    );
    let without_negative = r#"
# z-late
priority: 10
rules: [{network: ten}]
---
# m-default
rules: [{network: zero}]
"#;
    check(
        without_negative,
        &[pod("omitted priority is 0, before 10", "ns", net("zero"))],
    );
    let ties = r#"
# beta
priority: 3
rules: [{network: from-beta}]
---
# alpha
priority: 3
rules: [{network: from-alpha}]
---
# Alpha-upper
priority: 3
rules: [{network: from-upper}]
"#;
    check(
        ties,
        &[pod(
            "ties broken lexicographically by name (bytes: 'A' < 'a')",
            "ns",
            net("from-upper"),
        )],
    );
    let set = BindingPolicies::new(&policies(ties));
    assert_eq!(set.active(), vec!["Alpha-upper", "alpha", "beta"]);
}

#[test]
fn match_kind_scopes_policies_and_omission_matches_every_kind() {
    let yaml = r#"
# a-services
priority: 0
matchKind: [service]
rules: [{network: svc-net}]
---
# b-pods-and-policies
priority: 1
matchKind: [pod, networkpolicy]
rules: [{network: pod-net}]
---
# c-everything
priority: 2
rules: [{network: any-net}]
"#;
    let set = BindingPolicies::new(&policies(yaml));
    let o = object("ns", "x", &[]);
    let none = BTreeMap::new();
    for (kind, want) in [
        (MatchKind::Service, "svc-net"),
        (MatchKind::Pod, "pod-net"),
        (MatchKind::NetworkPolicy, "pod-net"),
    ] {
        assert_eq!(set.bind(kind, &o, &none), net(want), "{kind:?}");
    }
    let only_omitted =
        BindingPolicies::new(&policies("# c-everything\nrules: [{network: any-net}]\n"));
    for kind in [MatchKind::Service, MatchKind::Pod, MatchKind::NetworkPolicy] {
        assert_eq!(
            only_omitted.bind(kind, &o, &none),
            net("any-net"),
            "{kind:?}"
        );
    }
}

#[test]
fn rules_are_tried_in_order_and_the_first_match_decides() {
    let yaml = r#"
# ordered
rules:
- network: frontends
  selector: {matchLabels: {tier: frontend}}
- network: everyone
- network: never-reached
  selector: {matchLabels: {tier: backend}}
"#;
    check(
        yaml,
        &[
            Case {
                labels: &[("tier", "frontend")],
                ..pod("first rule matches", "ns", net("frontends"))
            },
            Case {
                labels: &[("tier", "backend")],
                ..pod(
                    "second rule decides before the third",
                    "ns",
                    net("everyone"),
                )
            },
        ],
    );
}

#[test]
fn cel_absent_optional_continues_with_next_rule_then_next_policy() {
    let yaml = r#"
# a-cel-only
rules:
- celExpression: "has(object.metadata.labels.net) ? optional.of(object.metadata.labels.net) : optional.none()"
- celExpression: "object.?metadata.?labels.?alt"
---
# b-fallback
priority: 5
rules: [{network: fallback}]
"#;
    check(
        yaml,
        &[
            Case {
                labels: &[("net", "red")],
                ..pod("present → network", "ns", net("red"))
            },
            Case {
                labels: &[("alt", "green")],
                ..pod("first absent, second present", "ns", net("green"))
            },
            pod("both absent → next policy", "ns", net("fallback")),
        ],
    );
}

#[test]
fn cel_empty_string_unbinds_and_stops() {
    let yaml = r#"
# a-unbind
rules:
- celExpression: "object.metadata.namespace == 'isolated' ? optional.of('') : optional.none()"
---
# b-default
priority: 1
rules: [{network: default}]
"#;
    check(
        yaml,
        &[
            pod(
                "'' → unbound, later policy not reached",
                "isolated",
                Binding::ExplicitlyUnbound,
            ),
            pod("none → later policy", "ns", net("default")),
        ],
    );
}

#[test]
fn cel_sees_the_resource_as_an_unstructured_map() {
    let yaml = r#"
# fields
rules:
- celExpression: "object.spec.port + 1 == 81 && object.metadata.labels['app'] == 'web' ? optional.of(object.metadata.name + '-' + string(object.spec.port)) : optional.none()"
- celExpression: "[79, 80].exists(c, c == object.spec.port) && object.metadata.labels.all(k, k != 'x') ? optional.of('macro') : optional.none()"
"#;
    check(
        yaml,
        &[
            Case {
                name: "web",
                labels: &[("app", "web")],
                ..pod("ints are int, labels a map", "ns", net("web-80"))
            },
            Case {
                name: "db",
                labels: &[("app", "db")],
                ..pod("macro variables are not undeclared", "ns", net("macro"))
            },
        ],
    );
}

#[test]
fn selectors_by_name_labels_expressions_and_namespace() {
    let yaml = r#"
# a-by-name
rules: [{network: by-name, selector: {name: special}}]
---
# b-match-labels
priority: 1
rules: [{network: by-labels, selector: {matchLabels: {app: web, tier: front}}}]
---
# c-in
priority: 2
rules: [{network: in, selector: {matchExpressions: [{key: app, operator: In, values: [db, cache]}]}}]
---
# d-notin
priority: 3
rules: [{network: notin, selector: {matchExpressions: [{key: env, operator: NotIn, values: [prod]}, {key: app, operator: Exists}]}}]
---
# e-exists
priority: 4
rules: [{network: exists, selector: {matchExpressions: [{key: gpu, operator: Exists}]}}]
---
# f-does-not-exist
priority: 5
rules: [{network: dne, selector: {matchExpressions: [{key: app, operator: DoesNotExist}, {key: gpu, operator: DoesNotExist}, {key: tag, operator: DoesNotExist}]}}]
---
# g-namespace
priority: 6
rules:
- network: ns-net
  selector:
    matchLabels: {tag: x}
    namespaceSelector:
      matchLabels: {team: blue}
      matchExpressions: [{key: stage, operator: In, values: [dev, test]}]
"#;
    let c = |what, labels, namespace_labels, want: &str| Case {
        labels,
        namespace_labels,
        ..pod(what, "ns", net(want))
    };
    check(
        yaml,
        &[
            Case {
                name: "special",
                labels: &[("app", "web"), ("tier", "front")],
                ..pod("name selects exactly", "ns", net("by-name"))
            },
            c(
                "all matchLabels hold",
                &[("app", "web"), ("tier", "front")],
                &[],
                "by-labels",
            ),
            c("In: one of the values", &[("app", "cache")], &[], "in"),
            c(
                "NotIn: value not listed",
                &[("app", "web"), ("env", "dev")],
                &[],
                "notin",
            ),
            c("NotIn: label absent holds", &[("app", "web")], &[], "notin"),
            c(
                "Exists",
                &[("app", "db2"), ("env", "prod"), ("gpu", "")],
                &[],
                "exists",
            ),
            c("DoesNotExist", &[], &[], "dne"),
            c(
                "namespaceSelector matchLabels + In",
                &[("tag", "x")],
                &[("team", "blue"), ("stage", "test")],
                "ns-net",
            ),
        ],
    );
    let set = BindingPolicies::new(&policies(yaml));
    let none = BTreeMap::new();
    for (what, l, nl) in [
        (
            "one matchLabel missing",
            &[("tier", "front"), ("tag", "y")][..],
            &[][..],
        ),
        (
            "NotIn with the listed value",
            &[("app", "web2"), ("env", "prod"), ("tag", "y")],
            &[],
        ),
        (
            "namespace label mismatch",
            &[("tag", "x")],
            &[("team", "red"), ("stage", "dev")],
        ),
        (
            "namespace In mismatch",
            &[("tag", "x")],
            &[("team", "blue"), ("stage", "prod")],
        ),
        ("namespace labels absent", &[("tag", "x")], &[]),
    ] {
        let b = set.bind(MatchKind::Pod, &object("ns", "p", l), &labels(nl));
        assert_eq!(b, Binding::NoMatch, "{what}");
    }
    assert_eq!(
        set.bind(MatchKind::Pod, &object("ns", "other", &[]), &none),
        net("dne"),
        "name selector does not match another name"
    );
}

#[test]
fn deny_shields_from_lower_priority_only() {
    let yaml = r#"
# a-high
priority: -10
rules: [{network: secure, selector: {name: vip}}]
---
# b-deny
priority: 0
rules:
- policy: deny
  network: secure
- policy: deny
  network: red
  selector: {name: only-this}
- network: secure
  selector: {name: same-policy-later}
---
# c-low
priority: 10
rules:
- network: secure
  selector: {matchLabels: {want: secure}}
- celExpression: "optional.of(object.metadata.labels.want)"
  selector: {matchLabels: {cel: "yes"}}
- network: red
  selector: {matchLabels: {want: red}}
- network: fallback
"#;
    let c = |what, name, l, want: Binding| Case {
        name,
        labels: l,
        ..pod(what, "ns", want)
    };
    check(
        yaml,
        &[
            c(
                "higher priority allow wins over deny",
                "vip",
                &[],
                net("secure"),
            ),
            c(
                "lower-priority static allow shielded, next rule decides",
                "p",
                &[("want", "secure")],
                net("fallback"),
            ),
            c(
                "CEL naming a shielded network skipped",
                "p",
                &[("want", "secure"), ("cel", "yes")],
                net("fallback"),
            ),
            c(
                "CEL naming another network binds",
                "p",
                &[("want", "blue"), ("cel", "yes")],
                net("blue"),
            ),
            c(
                "later rule of the deny's own policy shielded",
                "same-policy-later",
                &[],
                net("fallback"),
            ),
            c(
                "deny by name: other names unaffected",
                "p",
                &[("want", "red")],
                net("red"),
            ),
            c(
                "deny by name: that name shielded",
                "only-this",
                &[("want", "red")],
                net("fallback"),
            ),
        ],
    );
}

/// A broken spec, a fragment of the message it must produce, the error variant, and whether
/// it is a CEL problem (`CELValid=False`).
type InvalidCase = (&'static str, &'static str, fn(&PolicyError) -> bool, bool);

#[test]
fn invalid_policies_are_ignored_and_reported() {
    let table: &[InvalidCase] = &[
        (
            "rules: [{celExpression: \"object.metadata.\"}]",
            "Syntax error",
            |e| matches!(e, PolicyError::Cel { rule: 0, .. }),
            true,
        ),
        (
            "rules: [{celExpression: \"optional.of(ns)\"}]",
            "undeclared variable(s) ns",
            |e| matches!(e, PolicyError::Cel { .. }),
            true,
        ),
        (
            "rules: [{network: a}, {celExpression: \"'blue'\"}]",
            "evaluates to a string",
            |e| matches!(e, PolicyError::Cel { rule: 1, .. }),
            true,
        ),
        ("rules: []", "spec.rules is empty", |e| matches!(e, PolicyError::NoRules { .. }), false),
        (
            "rules: [{network: a, celExpression: \"optional.none()\"}]",
            "sets both network and celExpression",
            |e| matches!(e, PolicyError::NetworkAndExpression { .. }),
            false,
        ),
        (
            "rules: [{selector: {name: x}}]",
            "sets neither network nor celExpression",
            |e| matches!(e, PolicyError::NoTarget { .. }),
            false,
        ),
        (
            "rules: [{policy: deny, network: a, selector: {matchLabels: {x: y}}}]",
            "selects by name only",
            |e| matches!(e, PolicyError::DenyByLabels { .. }),
            false,
        ),
        (
            "rules: [{policy: deny, celExpression: \"optional.none()\"}]",
            "deny rule with a celExpression",
            |e| matches!(e, PolicyError::DenyWithExpression { .. }),
            false,
        ),
        (
            "rules: [{policy: deny}]",
            "deny rule without network",
            |e| matches!(e, PolicyError::DenyWithoutNetwork { .. }),
            false,
        ),
        (
            "rules: [{network: \"\"}]",
            "network is empty",
            |e| matches!(e, PolicyError::EmptyNetwork { .. }),
            false,
        ),
        (
            "rules: [{network: a, selector: {matchExpressions: [{key: k, operator: Gt, values: [\"1\"]}]}}]",
            "selector.matchExpressions[0]: operator \"Gt\"",
            |e| matches!(e, PolicyError::Selector { .. }),
            false,
        ),
        (
            "rules: [{network: a, selector: {namespaceSelector: {matchExpressions: [{key: k, operator: In}]}}}]",
            "namespaceSelector.matchExpressions[0]: operator In for key \"k\" needs at least one value",
            |e| matches!(e, PolicyError::Selector { .. }),
            false,
        ),
    ];
    for (spec, message, is, cel) in table {
        let yaml = format!(
            "# a-broken\n{spec}\n---\n# b-fallback\npriority: 1\nrules: [{{network: fallback}}]\n"
        );
        let set = BindingPolicies::new(&policies(&yaml));
        assert_eq!(
            set.active(),
            vec!["b-fallback"],
            "{spec}: the invalid policy is not used"
        );
        let o = object("ns", "x", &[]);
        assert_eq!(
            set.bind(MatchKind::Pod, &o, &BTreeMap::new()),
            net("fallback"),
            "{spec}"
        );
        let errors = set.errors();
        assert_eq!(errors.len(), 1, "{spec}: {errors:?}");
        assert!(is(errors[0]), "{spec}: {:?}", errors[0]);
        let status = set.status("a-broken").expect("status of the broken policy");
        let by_type = |t: &str| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == t)
                .cloned()
                .expect("condition present")
        };
        let valid = by_type(VALID);
        assert_eq!(
            (valid.status.as_str(), valid.reason.as_str()),
            ("False", "Invalid"),
            "{spec}"
        );
        assert!(valid.message.contains(message), "{spec}: {}", valid.message);
        assert!(
            valid.message.contains("a-broken"),
            "{spec}: names the policy: {}",
            valid.message
        );
        let cel_valid = by_type(CEL_VALID);
        assert_eq!(cel_valid.observed_generation, Some(1));
        if *cel {
            assert_eq!(cel_valid.status, "False", "{spec}");
            assert_eq!(cel_valid.reason, "CompileError");
            assert!(
                cel_valid.message.contains(message),
                "{spec}: {}",
                cel_valid.message
            );
        } else {
            assert_eq!(cel_valid.status, "True", "{spec}: not a CEL problem");
        }
    }
}

/// Expressions are compiled and validated once (seed): an unknown function or a result that
/// is not an optional string is `CELValid=False` with the reason, and the policy is not used —
/// not accepted and then failing per object at run time.
#[test]
fn cel_expressions_are_type_checked_when_compiled() {
    for (expr, reason) in [
        (
            "object.metadata.name.frobnicate()",
            "unknown method frobnicate()",
        ),
        (
            "optional.of(lookup(object.metadata.name))",
            "unknown function lookup()",
        ),
        (
            "object.metadata.name + '-net'",
            "evaluates to a string, not an optional string",
        ),
        (
            "object.metadata.namespace.startsWith('team-')",
            "evaluates to a bool, not an optional string",
        ),
        (
            "optional.of(object.metadata.name == 'web')",
            "evaluates to an optional(bool), not an optional string",
        ),
    ] {
        let yaml = format!(
            "# typed\nrules: [{{celExpression: {expr:?}}}]\n---\n# fallback\npriority: 1\nrules: [{{network: fallback}}]\n"
        );
        let set = BindingPolicies::new(&policies(&yaml));
        assert_eq!(set.active(), vec!["fallback"], "{expr}");
        let status = set.status("typed").unwrap();
        let cel = status
            .conditions
            .iter()
            .find(|c| c.type_ == CEL_VALID)
            .unwrap();
        assert_eq!(
            (cel.status.as_str(), cel.reason.as_str()),
            ("False", "CompileError"),
            "{expr}"
        );
        assert!(cel.message.contains(reason), "{expr}: {}", cel.message);
        assert!(
            cel.message.contains("spec.rules[0].celExpression"),
            "{}",
            cel.message
        );
    }
}

#[test]
fn valid_policies_report_cel_valid_true() {
    let yaml = format!("{PER_TEAM}---\n# static\nrules: [{{network: a}}]\n");
    let set = BindingPolicies::new(&policies(&yaml));
    let conditions: BTreeMap<String, (String, String)> = set
        .conditions()
        .into_iter()
        .map(|(n, c)| {
            assert_eq!(c.type_, CEL_VALID);
            (n, (c.status, c.reason))
        })
        .collect();
    assert_eq!(conditions["per-team"], ("True".into(), "Compiled".into()));
    assert_eq!(
        conditions["static"],
        ("True".into(), "NoExpressions".into())
    );
    let status = set.status("per-team").unwrap();
    assert!(status
        .conditions
        .iter()
        .any(|c| c.type_ == VALID && c.status == "True"));
    assert!(set.status("missing").is_none());
}

#[test]
fn evaluation_errors_do_not_match_and_are_counted() {
    let yaml = r#"
# a-errors
rules:
- celExpression: "optional.of(object.metadata.labels.missing)"
- celExpression: "object.metadata.name"
- celExpression: "optional.of(object.spec.port)"
- celExpression: "optional.of(object.metadata.name.substring(40))"
- network: after-errors
"#;
    let set = BindingPolicies::new(&policies(yaml));
    let d = set.decide(MatchKind::Pod, &object("ns", "p", &[]), &BTreeMap::new());
    assert_eq!(d.binding, net("after-errors"));
    assert_eq!(
        d.decided_by.as_ref().map(|(p, r)| (&**p, *r)),
        Some(("a-errors", 4))
    );
    let kinds: Vec<(usize, &CelEvalError)> = d.errors.iter().map(|e| (e.rule, &e.error)).collect();
    assert!(
        matches!(kinds[0], (0, CelEvalError::Execution(m)) if m.contains("missing")),
        "{kinds:?}"
    );
    assert!(
        matches!(kinds[1], (1, CelEvalError::NotOptional(t)) if t == "string"),
        "{kinds:?}"
    );
    assert!(
        matches!(kinds[2], (2, CelEvalError::NotString(t)) if t == "int"),
        "{kinds:?}"
    );
    assert!(
        matches!(kinds[3], (3, CelEvalError::Execution(_))),
        "{kinds:?}"
    );
    assert_eq!(kinds.len(), 4);
    let message = d.errors[1].to_string();
    assert!(
        message.contains("a-errors")
            && message.contains("spec.rules[1].celExpression")
            && message.contains("ns/p"),
        "{message}"
    );
    assert_eq!(set.evaluation_errors(), vec![("a-errors", 4)]);
}

#[test]
fn unchanged_policies_are_not_recompiled() {
    let mut set = BindingPolicies::new(&policies(PER_TEAM));
    assert_eq!(set.compilations(), 1);
    let mut same = policies(PER_TEAM);
    same[0].metadata.generation = Some(2);
    assert_eq!(set.update(&same), 0, "same spec: no compilation");
    assert_eq!(
        set.cel_condition("per-team").unwrap().observed_generation,
        Some(2)
    );
    let changed = policies(&PER_TEAM.replace("network: default", "network: other"));
    assert_eq!(set.update(&changed), 1);
    assert_eq!(
        set.bind(
            MatchKind::Pod,
            &object("kube-system", "p", &[]),
            &BTreeMap::new()
        ),
        net("other")
    );
    assert_eq!(set.update(&[]), 0);
    assert!(set.active().is_empty());
    assert!(
        set.conditions().is_empty(),
        "a deleted policy has no status"
    );
}

#[test]
fn services_are_re_evaluated_on_policy_and_namespace_changes() {
    let mut set = BindingPolicies::new(&policies(
        "# svc\nmatchKind: [service]\nrules: [{network: one, selector: {namespaceSelector: {matchLabels: {team: a}}}}]\n",
    ));
    let mut services = ContinuousBindings::new(MatchKind::Service);
    let change = services
        .apply(&set, object("ns1", "web", &[]))
        .unwrap()
        .expect("a new service is a change");
    assert_eq!(
        (change.before, change.after),
        (None, Some(Binding::NoMatch))
    );
    let changes = services.set_namespace_labels(&set, "ns1", labels(&[("team", "a")]));
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].after, Some(net("one")));
    assert!(services
        .set_namespace_labels(&set, "ns1", labels(&[("team", "a")]))
        .is_empty());

    set.update(&policies(
        "# svc\nmatchKind: [service]\nrules: [{network: two}]\n",
    ));
    let changes = services.policies_changed(&set);
    assert_eq!(changes.len(), 1);
    assert_eq!(
        (changes[0].before.clone(), changes[0].after.clone()),
        (Some(net("one")), Some(net("two")))
    );
    assert_eq!(services.binding("ns1", "web"), Some(&net("two")));

    // A pod-only policy change leaves services' policies as they were: nothing re-evaluated.
    set.update(&policies(
        "# svc\nmatchKind: [service]\nrules: [{network: two}]\n---\n# pods\nmatchKind: [pod]\nrules: [{network: p}]\n",
    ));
    assert!(services.policies_changed(&set).is_empty());

    let gone = services.remove("ns1", "web").unwrap();
    assert_eq!((gone.before, gone.after), (Some(net("two")), None));
    assert!(services
        .apply(&set, json!({"metadata": {"name": "x"}}))
        .is_err());
}

#[test]
fn pods_are_decided_by_bind_pod_and_keep_their_decision() {
    // The daemon stores a pod's decision at creation; a policy change affects only pods
    // created afterwards. `bind_pod` is the pod-kind decision.
    let mut set = BindingPolicies::new(&policies(PER_TEAM));
    let pod = object("team-blue", "p", &[]);
    let stored = set.bind_pod(&pod, &BTreeMap::new());
    assert_eq!(stored.binding, net("blue"));
    set.update(&policies("# other\nrules: [{network: green}]\n"));
    assert_eq!(
        set.bind_pod(&pod, &BTreeMap::new()).binding,
        net("green"),
        "new pods see new policies"
    );
    assert_eq!(stored.binding, net("blue"));
}
