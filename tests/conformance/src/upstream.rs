//! The 48 scenarios of upstream Kubernetes' `test/e2e/network/netpol/network_policy.go`
//! (`NetworkPolicy between server and client`, its UDP and its SCTP variants), transliterated:
//! the same policies and the same expected tables, written for this universe's nine pods (the
//! upstream tests create a subset of them; where a pod upstream leaves out is affected, the
//! expectation says so, as the older full-universe versions of these tests did). Upstream
//! probes one family; here both run, and the tests that build an `ipBlock` from a pod's
//! address name both of its addresses.

use lace_control::world::NamespacedName;

use crate::case::{policy, Action, Case, Expect, Filter, Step};
use crate::universe::{labels, Family, Universe};

const MD: &str = "kubernetes.io/metadata.name";

fn apply(yaml: &str) -> Action {
    Action::Apply(policy(yaml))
}

fn one(name: &str, actions: Vec<Action>, expect: Vec<Expect>) -> Case {
    Case {
        name: format!("e2e: {name}"),
        steps: vec![Step { actions, expect }],
    }
}

/// `ns/pod`'s address as a host prefix, in each family.
fn host_cidrs(ns: &str, pod: &str) -> [String; 2] {
    let u = Universe::standard();
    let p = &u.placement[&NamespacedName::new(ns, pod)];
    [
        format!("{}/32", p.addr(Family::V4)),
        format!("{}/128", p.addr(Family::V6)),
    ]
}

/// The /4 around `ns/pod`'s address, in each family (upstream's `makeLargeCIDRForIP`).
fn large_cidrs(ns: &str, pod: &str) -> [String; 2] {
    let u = Universe::standard();
    let p = &u.placement[&NamespacedName::new(ns, pod)];
    let v4 = ipnet::Ipv4Net::new(p.v4, 4).expect("length").trunc();
    let v6 = ipnet::Ipv6Net::new(p.v6, 4).expect("length").trunc();
    [v4.to_string(), v6.to_string()]
}

const X: &str = "x";
const Y: &str = "y";
const Z: &str = "z";

fn ns(n: &'static str) -> Filter {
    Filter::ns(n)
}

fn pod(n: &'static str, p: &'static str) -> Filter {
    Filter::pod(n, p)
}

/// Every scenario, in the order of the upstream file.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();

    v.push(one(
        "should support a 'default-deny-ingress' policy",
        vec![apply(
            "metadata: {name: deny-ingress, namespace: x}\n\
             spec: {podSelector: {}, policyTypes: [Ingress]}",
        )],
        vec![Expect::tcp(80).peer(Filter::ANY, ns(X), false)],
    ));

    v.push(one(
        "should support a 'default-deny-all' policy",
        vec![apply(
            "metadata: {name: deny-all, namespace: x}\n\
             spec: {podSelector: {}, policyTypes: [Ingress, Egress]}",
        )],
        vec![Expect::tcp(80)
            .peer(Filter::ANY, ns(X), false)
            .peer(ns(X), Filter::ANY, false)],
    ));

    v.push(one(
        "should enforce policy to allow traffic from pods within server namespace based on PodSelector",
        vec![apply(
            "metadata: {name: x-a-allows-x-b, namespace: x}\n\
             spec:\n  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Ingress]\n\
             \x20 ingress: [{from: [{podSelector: {matchLabels: {pod: b}}}]}]",
        )],
        vec![Expect::tcp(80)
            .all_ingress(pod(X, "a"), false)
            .peer(pod(X, "b"), pod(X, "a"), true)],
    ));

    v.push(one(
        "should enforce policy to allow ingress traffic for a target",
        vec![
            apply(
                "metadata: {name: deny-all, namespace: x}\n\
                 spec: {podSelector: {}, policyTypes: [Ingress]}",
            ),
            apply(
                "metadata: {name: allow-all-to-a, namespace: x}\n\
                 spec:\n  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Ingress]\n\
                 \x20 ingress: [{from: [{podSelector: {}, namespaceSelector: {}}]}]",
            ),
        ],
        vec![Expect::tcp(80)
            .all_ingress(pod(X, "a"), true)
            .all_ingress(pod(X, "b"), false)
            .all_ingress(pod(X, "c"), false)],
    ));

    v.push(one(
        "should enforce policy to allow ingress traffic from pods in all namespaces",
        vec![apply(
            "metadata: {name: allow-from-another-ns, namespace: x}\n\
             spec:\n  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Ingress]\n\
             \x20 ingress: [{from: [{namespaceSelector: {matchLabels: {}}}]}]",
        )],
        vec![Expect::tcp(80)],
    ));

    v.push(one(
        "should enforce policy to allow traffic only from a different namespace, based on NamespaceSelector",
        vec![apply(&format!(
            "metadata: {{name: allow-client-a-via-ns-selector, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
             \x20 ingress: [{{from: [{{namespaceSelector: {{matchLabels: {{{MD}: y}}}}}}]}}]"
        ))],
        vec![Expect::tcp(80)
            .peer(ns(X), pod(X, "a"), false)
            .peer(ns(Z), pod(X, "a"), false)],
    ));

    v.push(one(
        "should enforce policy based on PodSelector with MatchExpressions",
        vec![apply(
            "metadata: {name: x-a-allows-x-b, namespace: x}\n\
             spec:\n  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Ingress]\n\
             \x20 ingress: [{from: [{podSelector: {matchExpressions: [{key: pod, operator: In, values: [b]}]}}]}]",
        )],
        vec![Expect::tcp(80)
            .all_ingress(pod(X, "a"), false)
            .peer(pod(X, "b"), pod(X, "a"), true)],
    ));

    v.push(one(
        "should enforce policy based on NamespaceSelector with MatchExpressions",
        vec![apply(&format!(
            "metadata: {{name: allow-ns-y-match-selector, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
             \x20 ingress: [{{from: [{{namespaceSelector: {{matchExpressions: [{{key: {MD}, operator: In, values: [y]}}]}}}}]}}]"
        ))],
        vec![Expect::tcp(80)
            .peer(ns(X), pod(X, "a"), false)
            .peer(ns(Z), pod(X, "a"), false)],
    ));

    v.push(one(
        "should enforce policy based on PodSelector or NamespaceSelector",
        vec![apply(&format!(
            "metadata: {{name: allow-ns-y-match-selector, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
             \x20 ingress:\n  - from:\n    - namespaceSelector: {{matchExpressions: [{{key: {MD}, operator: NotIn, values: [x]}}]}}\n\
             \x20   - podSelector: {{matchLabels: {{pod: b}}}}"
        ))],
        vec![Expect::tcp(80)
            .peer(pod(X, "a"), pod(X, "a"), false)
            .peer(pod(X, "c"), pod(X, "a"), false)],
    ));

    v.push(one(
        "should enforce policy based on PodSelector and NamespaceSelector",
        vec![apply(&format!(
            "metadata: {{name: allow-ns-y-podselector-and-nsselector, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
             \x20 ingress:\n  - from:\n    - namespaceSelector: {{matchExpressions: [{{key: {MD}, operator: NotIn, values: [x]}}]}}\n\
             \x20     podSelector: {{matchLabels: {{pod: b}}}}"
        ))],
        vec![Expect::tcp(80)
            .all_ingress(pod(X, "a"), false)
            .peer(pod(Y, "b"), pod(X, "a"), true)
            .peer(pod(Z, "b"), pod(X, "a"), true)],
    ));

    v.push(one(
        "should enforce policy based on Multiple PodSelectors and NamespaceSelectors",
        vec![apply(&format!(
            "metadata: {{name: allow-ns-y-z-pod-b-c, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
             \x20 ingress:\n  - from:\n    - namespaceSelector: {{matchExpressions: [{{key: {MD}, operator: NotIn, values: [x]}}]}}\n\
             \x20     podSelector: {{matchExpressions: [{{key: pod, operator: In, values: [b, c]}}]}}"
        ))],
        vec![Expect::tcp(80)
            .peer(ns(X), pod(X, "a"), false)
            .peer(pod(Y, "a"), pod(X, "a"), false)
            .peer(pod(Z, "a"), pod(X, "a"), false)],
    ));

    v.push(one(
        "should enforce policy based on any PodSelectors",
        vec![apply(
            "metadata: {name: allow-ns-x-pod-b-c, namespace: x}\n\
             spec:\n  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Ingress]\n\
             \x20 ingress: [{from: [{podSelector: {matchLabels: {pod: b}}}, {podSelector: {matchLabels: {pod: c}}}]}]",
        )],
        vec![Expect::tcp(80)
            .all_ingress(pod(X, "a"), false)
            .peer(pod(X, "b"), pod(X, "a"), true)
            .peer(pod(X, "c"), pod(X, "a"), true)],
    ));

    v.push(one(
        "should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector",
        vec![apply(&format!(
            "metadata: {{name: allow-ns-y-pod-a-via-namespace-pod-selector, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
             \x20 ingress: [{{from: [{{namespaceSelector: {{matchLabels: {{{MD}: y}}}}, podSelector: {{matchLabels: {{pod: a}}}}}}]}}]"
        ))],
        vec![Expect::tcp(80)
            .all_ingress(pod(X, "a"), false)
            .peer(pod(Y, "a"), pod(X, "a"), true)],
    ));

    let port81_from_y = || {
        apply(&format!(
            "metadata: {{name: allow-client-a-via-ns-selector, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
             \x20 ingress: [{{from: [{{namespaceSelector: {{matchLabels: {{{MD}: y}}}}}}], ports: [{{port: 81, protocol: TCP}}]}}]"
        ))
    };
    let allow_from_y = |e: Expect| {
        e.peer(ns(X), pod(X, "a"), false)
            .peer(ns(Y), pod(X, "a"), true)
            .peer(ns(Z), pod(X, "a"), false)
    };
    v.push(one(
        "should enforce policy based on Ports",
        vec![port81_from_y()],
        vec![allow_from_y(Expect::tcp(81))],
    ));

    v.push(Case {
        name: "e2e: should enforce multiple, stacked policies with overlapping podSelectors".into(),
        steps: vec![
            Step {
                actions: vec![port81_from_y()],
                expect: vec![
                    allow_from_y(Expect::tcp(81)),
                    Expect::tcp(80).all_ingress(pod(X, "a"), false),
                ],
            },
            Step {
                actions: vec![apply(&format!(
                    "metadata: {{name: allow-client-a-via-ns-selector-80, namespace: x}}\n\
                     spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
                     \x20 ingress: [{{from: [{{namespaceSelector: {{matchLabels: {{{MD}: y}}}}}}], ports: [{{port: 80, protocol: TCP}}]}}]"
                ))],
                expect: vec![allow_from_y(Expect::tcp(80))],
            },
        ],
    });

    v.push(one(
        "should support allow-all policy",
        vec![apply(
            "metadata: {name: allow-all, namespace: x}\n\
             spec: {podSelector: {matchLabels: {}}, policyTypes: [Ingress], ingress: [{}]}",
        )],
        vec![Expect::tcp(80), Expect::tcp(81)],
    ));

    v.push(one(
        "should allow ingress access on one named port",
        vec![apply(
            "metadata: {name: allow-all, namespace: x}\n\
             spec: {podSelector: {matchLabels: {}}, policyTypes: [Ingress], ingress: [{ports: [{port: serve-81-tcp}]}]}",
        )],
        vec![
            Expect::tcp(81),
            Expect::tcp(80).peer(Filter::ANY, ns(X), false),
        ],
    ));

    v.push(one(
        "should allow ingress access from namespace on one named port",
        vec![apply(&format!(
            "metadata: {{name: allow-client-a-via-ns-selector-80, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
             \x20 ingress: [{{from: [{{namespaceSelector: {{matchLabels: {{{MD}: y}}}}}}], ports: [{{port: serve-80-tcp, protocol: TCP}}]}}]"
        ))],
        vec![
            Expect::tcp(80)
                .peer(ns(X), pod(X, "a"), false)
                .peer(ns(Z), pod(X, "a"), false),
            Expect::tcp(81).all_ingress(pod(X, "a"), false),
        ],
    ));

    v.push(one(
        "should allow egress access on one named port",
        vec![apply(
            "metadata: {name: allow-egress, namespace: x}\n\
             spec: {podSelector: {matchLabels: {}}, policyTypes: [Egress], egress: [{ports: [{port: serve-80-tcp}]}]}",
        )],
        vec![
            Expect::tcp(80),
            Expect::tcp(81).peer(ns(X), Filter::ANY, false),
        ],
    ));

    v.push(Case {
        name: "e2e: should enforce updated policy".into(),
        steps: vec![
            Step {
                actions: vec![apply(
                    "metadata: {name: allow-all-mutate-to-deny-all, namespace: x}\n\
                     spec: {podSelector: {matchLabels: {}}, policyTypes: [Ingress], ingress: [{}]}",
                )],
                expect: vec![Expect::tcp(81)],
            },
            Step {
                actions: vec![apply(
                    "metadata: {name: allow-all-mutate-to-deny-all, namespace: x}\n\
                     spec: {podSelector: {matchLabels: {}}, policyTypes: [Ingress], ingress: []}",
                )],
                expect: vec![Expect::tcp(81).peer(Filter::ANY, ns(X), false)],
            },
        ],
    });

    v.push(Case {
        name: "e2e: should allow ingress access from updated namespace".into(),
        steps: vec![
            Step {
                actions: vec![apply(
                    "metadata: {name: allow-client-a-via-ns-selector, namespace: x}\n\
                     spec:\n  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Ingress]\n\
                     \x20 ingress: [{from: [{namespaceSelector: {matchLabels: {ns2: updated}}}]}]",
                )],
                expect: vec![Expect::tcp(80).all_ingress(pod(X, "a"), false)],
            },
            Step {
                actions: vec![Action::NamespaceLabels {
                    ns: Y,
                    labels: labels(&[("ns", "y"), ("ns2", "updated")]),
                }],
                expect: vec![Expect::tcp(80).all_ingress(pod(X, "a"), false).peer(
                    ns(Y),
                    Filter::ANY,
                    true,
                )],
            },
        ],
    });

    v.push(Case {
        name: "e2e: should allow ingress access from updated pod".into(),
        steps: vec![
            Step {
                actions: vec![apply(
                    "metadata: {name: allow-client-a-via-pod-selector, namespace: x}\n\
                     spec:\n  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Ingress]\n\
                     \x20 ingress: [{from: [{podSelector: {matchLabels: {pod: b, pod2: updated}}}]}]",
                )],
                expect: vec![Expect::tcp(80).all_ingress(pod(X, "a"), false)],
            },
            Step {
                actions: vec![Action::PodLabels {
                    ns: X,
                    pod: "b",
                    labels: labels(&[("pod", "b"), ("pod2", "updated")]),
                }],
                expect: vec![Expect::tcp(80)
                    .all_ingress(pod(X, "a"), false)
                    .peer(pod(X, "b"), pod(X, "a"), true)],
            },
        ],
    });

    v.push(one(
        "should deny ingress from pods on other namespaces",
        vec![apply(
            "metadata: {name: deny-empty-policy, namespace: x}\n\
             spec: {podSelector: {}, policyTypes: [Ingress], ingress: [{from: [{podSelector: {matchLabels: {}}}]}]}",
        )],
        vec![Expect::tcp(80)
            .peer(ns(Y), ns(X), false)
            .peer(ns(Z), ns(X), false)],
    ));

    v.push(Case {
        name: "e2e: should deny ingress access to updated pod".into(),
        steps: vec![
            Step {
                actions: vec![apply(
                    "metadata: {name: deny-ingress-via-label-selector, namespace: x}\n\
                     spec: {podSelector: {matchLabels: {target: isolated}}, policyTypes: [Ingress]}",
                )],
                expect: vec![Expect::tcp(80)],
            },
            Step {
                actions: vec![Action::PodLabels {
                    ns: X,
                    pod: "a",
                    labels: labels(&[("pod", "a"), ("target", "isolated")]),
                }],
                expect: vec![Expect::tcp(80).all_ingress(pod(X, "a"), false)],
            },
        ],
    });

    v.push(one(
        "should deny egress from pods based on PodSelector",
        vec![apply(
            "metadata: {name: deny-egress-pod-a, namespace: x}\n\
             spec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Egress]}",
        )],
        vec![Expect::tcp(80).all_egress(pod(X, "a"), false)],
    ));

    v.push(one(
        "should deny egress from all pods in a namespace",
        vec![apply(
            "metadata: {name: deny-egress-ns-x, namespace: x}\n\
             spec: {podSelector: {}, policyTypes: [Egress]}",
        )],
        vec![Expect::tcp(80).peer(ns(X), Filter::ANY, false)],
    ));

    v.push(one(
        "should work with Ingress, Egress specified together",
        vec![apply(
            "metadata: {name: allow-client-a-via-pod-selector, namespace: x}\n\
             spec:\n  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress, Ingress]\n\
             \x20 ingress: [{from: [{podSelector: {matchLabels: {pod: b}}}]}]\n\
             \x20 egress: [{ports: [{port: 80}]}]",
        )],
        vec![
            Expect::tcp(80)
                .all_ingress(pod(X, "a"), false)
                .peer(pod(X, "b"), pod(X, "a"), true),
            Expect::tcp(81)
                .all_ingress(pod(X, "a"), false)
                .all_egress(pod(X, "a"), false)
                .peer(pod(X, "b"), pod(X, "a"), true),
        ],
    ));

    let from_xa = format!(
        "  ingress: [{{from: [{{namespaceSelector: {{matchLabels: {{{MD}: x}}}}, podSelector: {{matchLabels: {{pod: a}}}}}}]}}]"
    );
    v.push(one(
        "should support denying of egress traffic on the client side (even if the server explicitly allows this traffic)",
        vec![
            apply(&format!(
                "metadata: {{name: allow-to-ns-y-pod-a, namespace: x}}\n\
                 spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Egress]\n\
                 \x20 egress: [{{to: [{{namespaceSelector: {{matchLabels: {{{MD}: y}}}}, podSelector: {{matchLabels: {{pod: a}}}}}}]}}]"
            )),
            apply(&format!(
                "metadata: {{name: allow-from-xa-on-ya-match-selector, namespace: y}}\n\
                 spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n{from_xa}"
            )),
            apply(&format!(
                "metadata: {{name: allow-from-xa-on-yb-match-selector, namespace: y}}\n\
                 spec:\n  podSelector: {{matchLabels: {{pod: b}}}}\n  policyTypes: [Ingress]\n{from_xa}"
            )),
        ],
        vec![Expect::tcp(80)
            .peer(pod(X, "a"), Filter::ANY, false)
            .peer(Filter::ANY, pod(Y, "a"), false)
            .peer(pod(X, "a"), pod(Y, "a"), true)
            .peer(Filter::ANY, pod(Y, "b"), false)],
    ));

    v.push(one(
        "should enforce egress policy allowing traffic to a server in a different namespace based on PodSelector and NamespaceSelector",
        vec![apply(&format!(
            "metadata: {{name: allow-to-ns-y-pod-a, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Egress]\n\
             \x20 egress: [{{to: [{{namespaceSelector: {{matchLabels: {{{MD}: y}}}}, podSelector: {{matchLabels: {{pod: a}}}}}}]}}]"
        ))],
        vec![Expect::tcp(80)
            .all_egress(pod(X, "a"), false)
            .peer(pod(X, "a"), pod(Y, "a"), true)],
    ));

    v.push(one(
        "should enforce ingress policy allowing any port traffic to a server on a specific protocol",
        vec![apply(
            "metadata: {name: allow-ingress-by-proto, namespace: x}\n\
             spec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Ingress], ingress: [{ports: [{protocol: TCP}]}]}",
        )],
        vec![
            Expect::tcp(80),
            Expect::udp(80).peer(Filter::ANY, pod(X, "a"), false),
        ],
    ));

    v.push(Case {
        name: "e2e: should enforce multiple ingress policies with ingress allow-all policy taking precedence".into(),
        steps: vec![
            Step {
                actions: vec![apply(
                    "metadata: {name: allow-ingress-port-80, namespace: x}\n\
                     spec: {podSelector: {matchLabels: {}}, policyTypes: [Ingress], ingress: [{ports: [{port: 80}]}]}",
                )],
                expect: vec![Expect::tcp(81).peer(Filter::ANY, ns(X), false)],
            },
            Step {
                actions: vec![apply(
                    "metadata: {name: allow-ingress, namespace: x}\n\
                     spec: {podSelector: {matchLabels: {}}, policyTypes: [Ingress], ingress: [{}]}",
                )],
                expect: vec![Expect::tcp(81)],
            },
        ],
    });

    v.push(Case {
        name: "e2e: should enforce multiple egress policies with egress allow-all policy taking precedence".into(),
        steps: vec![
            Step {
                actions: vec![apply(
                    "metadata: {name: allow-egress-port-80, namespace: x}\n\
                     spec: {podSelector: {matchLabels: {}}, policyTypes: [Egress], egress: [{ports: [{port: 80}]}]}",
                )],
                expect: vec![Expect::tcp(81).peer(ns(X), Filter::ANY, false)],
            },
            Step {
                actions: vec![apply(
                    "metadata: {name: allow-egress, namespace: x}\n\
                     spec: {podSelector: {matchLabels: {}}, policyTypes: [Egress], egress: [{}]}",
                )],
                expect: vec![Expect::tcp(81)],
            },
        ],
    });

    v.push(Case {
        name: "e2e: should stop enforcing policies after they are deleted".into(),
        steps: vec![
            Step {
                actions: vec![apply(
                    "metadata: {name: deny-all, namespace: x}\n\
                     spec: {podSelector: {}, policyTypes: [Ingress, Egress]}",
                )],
                expect: vec![Expect::tcp(80).peer(ns(X), Filter::ANY, false).peer(
                    Filter::ANY,
                    ns(X),
                    false,
                )],
            },
            Step {
                actions: vec![Action::Delete {
                    ns: X,
                    name: "deny-all",
                }],
                expect: vec![Expect::tcp(80)],
            },
        ],
    });

    let [yb4, yb6] = host_cidrs(Y, "b");
    v.push(one(
        "should allow egress access to server in CIDR block",
        vec![apply(&format!(
            "metadata: {{name: allow-client-a-via-cidr-egress-rule, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Egress]\n\
             \x20 egress: [{{to: [{{ipBlock: {{cidr: \"{yb4}\"}}}}, {{ipBlock: {{cidr: \"{yb6}\"}}}}]}}]"
        ))],
        vec![Expect::tcp(80)
            .all_egress(pod(X, "a"), false)
            .peer(pod(X, "a"), pod(Y, "b"), true)],
    ));

    let [xb4, xb6] = host_cidrs(X, "b");
    let [big4, big6] = large_cidrs(X, "b");
    let except = format!(
        "metadata: {{name: allow-client-a-via-cidr-egress-rule, namespace: x}}\n\
         spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Egress]\n\
         \x20 egress: [{{to: [{{ipBlock: {{cidr: \"{big4}\", except: [\"{xb4}\"]}}}}, {{ipBlock: {{cidr: \"{big6}\", except: [\"{xb6}\"]}}}}]}}]"
    );
    v.push(one(
        "should enforce except clause while egress access to server in CIDR block",
        vec![apply(&except)],
        vec![Expect::tcp(80).peer(pod(X, "a"), pod(X, "b"), false)],
    ));

    v.push(Case {
        name: "e2e: should ensure an IP overlapping both IPBlock.CIDR and IPBlock.Except is allowed"
            .into(),
        steps: vec![
            Step {
                actions: vec![apply(&except)],
                expect: vec![Expect::tcp(80).peer(pod(X, "a"), pod(X, "b"), false)],
            },
            Step {
                actions: vec![apply(&format!(
                    "metadata: {{name: allow-client-a-via-cidr-egress-rule, namespace: x}}\n\
                     spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Egress]\n\
                     \x20 egress: [{{to: [{{ipBlock: {{cidr: \"{xb4}\"}}}}, {{ipBlock: {{cidr: \"{xb6}\"}}}}]}}]"
                ))],
                expect: vec![Expect::tcp(80)
                    .all_egress(pod(X, "a"), false)
                    .peer(pod(X, "a"), pod(X, "b"), true)],
            },
        ],
    });

    v.push(Case {
        name: "e2e: should enforce policies to check ingress and egress policies can be controlled independently based on PodSelector".into(),
        steps: vec![
            Step {
                actions: vec![apply(
                    "metadata: {name: allow-egress-for-target, namespace: x}\n\
                     spec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Egress], egress: [{}]}",
                )],
                expect: vec![Expect::tcp(80)],
            },
            Step {
                actions: vec![apply(
                    "metadata: {name: deny-ingress-via-label-selector, namespace: x}\n\
                     spec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Ingress]}",
                )],
                expect: vec![Expect::tcp(80).all_ingress(pod(X, "a"), false)],
            },
        ],
    });

    v.push(one(
        "should not mistakenly treat 'protocol: SCTP' as 'protocol: TCP', even if the plugin doesn't support SCTP",
        vec![
            apply(
                "metadata: {name: deny-ingress, namespace: x}\n\
                 spec: {podSelector: {}, policyTypes: [Ingress]}",
            ),
            apply(
                "metadata: {name: allow-only-sctp-ingress-on-port-81, namespace: x}\n\
                 spec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Ingress], ingress: [{ports: [{port: 81, protocol: SCTP}]}]}",
            ),
        ],
        vec![Expect::tcp(81).peer(Filter::ANY, ns(X), false)],
    ));

    v.push(one(
        "should properly isolate pods that are selected by a policy allowing SCTP, even if the plugin doesn't support SCTP",
        vec![apply(
            "metadata: {name: allow-only-sctp-ingress-on-port-80, namespace: x}\n\
             spec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Ingress], ingress: [{ports: [{port: 80, protocol: SCTP}]}]}",
        )],
        vec![Expect::tcp(81).all_ingress(pod(X, "a"), false)],
    ));

    v.push(one(
        "should not allow access by TCP when a policy specifies only UDP",
        vec![apply(
            "metadata: {name: allow-only-udp-ingress-on-port-81, namespace: x}\n\
             spec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Ingress], ingress: [{ports: [{port: 81, protocol: UDP}]}]}",
        )],
        vec![Expect::tcp(81).all_ingress(pod(X, "a"), false)],
    ));

    v.push(one(
        "should enforce policy to allow traffic based on NamespaceSelector with MatchLabels using default ns label",
        vec![apply(&format!(
            "metadata: {{name: allow-client-a-via-ns-selector-for-immutable-ns-label, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
             \x20 ingress: [{{from: [{{namespaceSelector: {{matchLabels: {{{MD}: y}}}}}}]}}]"
        ))],
        vec![Expect::tcp(80)
            .peer(ns(X), pod(X, "a"), false)
            .peer(ns(Z), pod(X, "a"), false)],
    ));

    v.push(one(
        "should enforce policy based on NamespaceSelector with MatchExpressions using default ns label",
        vec![apply(&format!(
            "metadata: {{name: allow-ns-y-match-selector-for-immutable-ns-label, namespace: x}}\n\
             spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Egress]\n\
             \x20 egress: [{{to: [{{namespaceSelector: {{matchExpressions: [{{key: {MD}, operator: NotIn, values: [y]}}]}}}}]}}]"
        ))],
        vec![Expect::tcp(80).peer(pod(X, "a"), ns(Y), false)],
    ));

    // The UDP and SCTP variants.
    for (proto, expect) in [
        ("UDP", Expect::udp as fn(u16) -> Expect),
        ("SCTP", Expect::sctp as fn(u16) -> Expect),
    ] {
        v.push(one(
            &format!("{proto}: should support a 'default-deny-ingress' policy"),
            vec![apply(
                "metadata: {name: deny-all, namespace: x}\n\
                 spec: {podSelector: {}, policyTypes: [Ingress]}",
            )],
            vec![expect(80).peer(Filter::ANY, ns(X), false)],
        ));
        v.push(one(
            &format!("{proto}: should enforce policy based on Ports"),
            vec![apply(&format!(
                "metadata: {{name: allow-ingress-on-port-81-ns-x, namespace: x}}\n\
                 spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
                 \x20 ingress: [{{from: [{{namespaceSelector: {{matchLabels: {{{MD}: y}}}}}}], ports: [{{port: 81, protocol: {proto}}}]}}]"
            ))],
            vec![expect(81)
                .peer(ns(X), pod(X, "a"), false)
                .peer(ns(Z), pod(X, "a"), false)],
        ));
        v.push(one(
            &format!("{proto}: should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector"),
            vec![apply(&format!(
                "metadata: {{name: allow-ns-y-pod-a-via-namespace-pod-selector, namespace: x}}\n\
                 spec:\n  podSelector: {{matchLabels: {{pod: a}}}}\n  policyTypes: [Ingress]\n\
                 \x20 ingress: [{{from: [{{namespaceSelector: {{matchLabels: {{{MD}: y}}}}, podSelector: {{matchLabels: {{pod: a}}}}}}]}}]"
            ))],
            vec![expect(80)
                .all_ingress(pod(X, "a"), false)
                .peer(pod(Y, "a"), pod(X, "a"), true)],
        ));
    }
    v
}
