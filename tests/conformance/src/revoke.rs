//! lace's own revoke-on-narrow cases: a step that narrows what is allowed while connections
//! exist. Every connection the step refuses must find its network's policy generation changed
//! on the node that refuses it, so the flow table classifies the established flow again on its
//! next packet ([`crate::check`] asserts it; each of these cases revokes something).

use crate::case::{policy, Action, Case, Step};
use crate::universe::labels;

fn apply(yaml: &str) -> Action {
    Action::Apply(policy(yaml))
}

/// Every revoke-on-narrow case.
pub fn cases() -> Vec<Case> {
    let two = |name: &str, first: Vec<Action>, then: Vec<Action>| Case {
        name: format!("revoke: {name}"),
        steps: vec![Step::of(first), Step::of(then)],
    };
    vec![
        two(
            "an allow-all ingress narrowed to port 80",
            vec![apply(
                "metadata: {name: p, namespace: x}\nspec: {podSelector: {}, ingress: [{}]}",
            )],
            vec![apply(
                "metadata: {name: p, namespace: x}\nspec: {podSelector: {}, ingress: [{ports: [{port: 80}]}]}",
            )],
        ),
        two(
            "the allowed peer loses its label",
            vec![apply(
                "metadata: {name: p, namespace: x}\n\
                 spec: {podSelector: {matchLabels: {pod: a}}, ingress: [{from: [{podSelector: {matchLabels: {role: client}}, namespaceSelector: {}}]}]}",
            ), Action::PodLabels { ns: "z", pod: "c", labels: labels(&[("pod", "c"), ("role", "client")]) }],
            vec![Action::PodLabels {
                ns: "z",
                pod: "c",
                labels: labels(&[("pod", "c")]),
            }],
        ),
        two(
            "the allowed namespace loses its label",
            vec![
                apply(
                    "metadata: {name: p, namespace: x}\n\
                     spec: {podSelector: {}, ingress: [{from: [{namespaceSelector: {matchLabels: {team: blue}}}]}]}",
                ),
                Action::NamespaceLabels {
                    ns: "y",
                    labels: labels(&[("ns", "y"), ("team", "blue")]),
                },
            ],
            vec![Action::NamespaceLabels {
                ns: "y",
                labels: labels(&[("ns", "y")]),
            }],
        ),
        two(
            "an ipBlock gains an except over a pod",
            vec![apply(
                "metadata: {name: p, namespace: x}\n\
                 spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{ipBlock: {cidr: 10.40.0.0/16}}, {ipBlock: {cidr: 'fd40::/48'}}]}]}",
            )],
            vec![apply(
                "metadata: {name: p, namespace: x}\n\
                 spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{ipBlock: {cidr: 10.40.0.0/16, except: [10.40.1.0/24]}}, {ipBlock: {cidr: 'fd40::/48', except: ['fd40:0:0:1::/64']}}]}]}",
            )],
        ),
        two(
            "a deny-all appears where nothing was isolated",
            vec![],
            vec![apply(
                "metadata: {name: deny, namespace: y}\nspec: {podSelector: {}, policyTypes: [Ingress, Egress]}",
            )],
        ),
        two(
            "one of two allows is deleted",
            vec![
                apply(
                    "metadata: {name: deny, namespace: z}\nspec: {podSelector: {}, policyTypes: [Ingress]}",
                ),
                apply(
                    "metadata: {name: allow-80, namespace: z}\nspec: {podSelector: {}, ingress: [{ports: [{port: 80}]}]}",
                ),
                apply(
                    "metadata: {name: allow-81, namespace: z}\nspec: {podSelector: {}, ingress: [{ports: [{port: 81, protocol: UDP}]}]}",
                ),
            ],
            vec![Action::Delete {
                ns: "z",
                name: "allow-81",
            }],
        ),
        two(
            "an allow-all egress narrowed to one pod",
            vec![apply(
                "metadata: {name: p, namespace: y}\nspec: {podSelector: {matchLabels: {pod: b}}, policyTypes: [Egress], egress: [{}]}",
            )],
            vec![apply(
                "metadata: {name: p, namespace: y}\n\
                 spec: {podSelector: {matchLabels: {pod: b}}, policyTypes: [Egress], egress: [{to: [{podSelector: {matchLabels: {pod: a}}, namespaceSelector: {matchLabels: {ns: x}}}]}]}",
            )],
        ),
        two(
            "a deny-all bound elsewhere is bound to this network",
            vec![
                apply(
                    "metadata: {name: deny, namespace: x}\nspec: {podSelector: {}, policyTypes: [Ingress]}",
                ),
                Action::Bind {
                    ns: "x",
                    name: "deny",
                    network: Some("elsewhere"),
                },
            ],
            vec![Action::Bind {
                ns: "x",
                name: "deny",
                network: Some(crate::universe::NETWORK),
            }],
        ),
        two(
            "a pod's label change moves it under a deny-all",
            vec![apply(
                "metadata: {name: quarantine, namespace: x}\nspec: {podSelector: {matchLabels: {state: quarantined}}, policyTypes: [Ingress, Egress]}",
            )],
            vec![Action::PodLabels {
                ns: "x",
                pod: "b",
                labels: labels(&[("pod", "b"), ("state", "quarantined")]),
            }],
        ),
        Case {
            name: "revoke: a policy narrowed, then widened again: what the narrowing kept \
                   survives the widening"
                .into(),
            steps: vec![
                Step::of(vec![apply(
                    "metadata: {name: p, namespace: z}\nspec: {podSelector: {}, ingress: [{}]}",
                )]),
                Step::of(vec![apply(
                    "metadata: {name: p, namespace: z}\nspec: {podSelector: {}, ingress: [{ports: [{port: 81, protocol: SCTP}]}]}",
                )]),
                Step::of(vec![apply(
                    "metadata: {name: p, namespace: z}\nspec: {podSelector: {}, ingress: [{}, {ports: [{port: 80}]}]}",
                )]),
            ],
        },
        two(
            "a named port's protocol is narrowed",
            vec![apply(
                "metadata: {name: p, namespace: y}\nspec: {podSelector: {}, ingress: [{ports: [{port: serve-80-tcp}, {protocol: UDP, port: serve-80-udp}]}]}",
            )],
            vec![apply(
                "metadata: {name: p, namespace: y}\nspec: {podSelector: {}, ingress: [{ports: [{port: serve-80-tcp}]}]}",
            )],
        ),
    ]
}
