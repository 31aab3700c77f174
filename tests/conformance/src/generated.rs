//! Generated families in the style of cyclonus (mattfenwick/cyclonus, `pkg/generator`): a base
//! policy on `x/a` varied along one axis at a time — its target, its peers (none, each kind,
//! every pair), its ports and protocols (none, each kind: numbered, named, ranges), conflicts
//! between policies, and actions while policies are in force. Their only oracle is the
//! evaluator: the tables must agree with it on every probe.

use crate::case::{bound, policy, Action, Case, Step};
use crate::universe::labels;

/// A direction of a generated rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Ingress,
    Egress,
}

impl Dir {
    const BOTH: [Dir; 2] = [Dir::Ingress, Dir::Egress];

    fn name(self) -> &'static str {
        match self {
            Dir::Ingress => "ingress",
            Dir::Egress => "egress",
        }
    }

    fn peers_field(self) -> &'static str {
        match self {
            Dir::Ingress => "from",
            Dir::Egress => "to",
        }
    }

    fn policy_type(self) -> &'static str {
        match self {
            Dir::Ingress => "Ingress",
            Dir::Egress => "Egress",
        }
    }
}

/// A policy named `name` in `ns` selecting `selector`, isolating `dir` with `rules` (a YAML
/// flow sequence).
fn policy_yaml(name: &str, ns: &str, selector: &str, dir: Dir, rules: &str) -> String {
    format!(
        "metadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  podSelector: {selector}\n  policyTypes: [{}]\n  {}: {rules}",
        dir.policy_type(),
        dir.name()
    )
}

/// The base policy (on `x/a`) with one rule of `peers` and `ports` (YAML flow sequences;
/// `None` leaves the field out).
fn base(dir: Dir, peers: Option<&str>, ports: Option<&str>) -> Action {
    let mut rule = Vec::new();
    if let Some(p) = peers {
        rule.push(format!("{}: {p}", dir.peers_field()));
    }
    if let Some(p) = ports {
        rule.push(format!("ports: {p}"));
    }
    Action::Apply(policy(&policy_yaml(
        "base",
        "x",
        "{matchLabels: {pod: a}}",
        dir,
        &format!("[{{{}}}]", rule.join(", ")),
    )))
}

/// The peers of the peer family: every combination of pod and namespace selector (nil, empty,
/// by label), and ipBlocks with and without `except`, in each family (the blocks hold some of
/// node-1's pods; the except holes some of those).
const PEERS: [(&str, &str); 12] = [
    ("empty pods, policy namespace", "{podSelector: {}}"),
    (
        "pods by label, policy namespace",
        "{podSelector: {matchLabels: {pod: c}}}",
    ),
    ("all pods, empty namespaces", "{namespaceSelector: {}}"),
    (
        "empty pods, empty namespaces",
        "{podSelector: {}, namespaceSelector: {}}",
    ),
    (
        "pods by label, empty namespaces",
        "{podSelector: {matchLabels: {pod: c}}, namespaceSelector: {}}",
    ),
    (
        "all pods, namespaces by label",
        "{namespaceSelector: {matchLabels: {ns: x}}}",
    ),
    (
        "empty pods, namespaces by label",
        "{podSelector: {}, namespaceSelector: {matchLabels: {ns: x}}}",
    ),
    (
        "pods by label, namespaces by label",
        "{podSelector: {matchLabels: {pod: c}}, namespaceSelector: {matchLabels: {ns: x}}}",
    ),
    ("IPv4 ipBlock", "{ipBlock: {cidr: 10.40.1.0/24}}"),
    (
        "IPv4 ipBlock with except",
        "{ipBlock: {cidr: 10.40.1.0/24, except: [10.40.1.0/28]}}",
    ),
    ("IPv6 ipBlock", "{ipBlock: {cidr: 'fd40:0:0:1::/120'}}"),
    (
        "IPv6 ipBlock with except",
        "{ipBlock: {cidr: 'fd40:0:0:1::/120', except: ['fd40:0:0:1::/124']}}",
    ),
];

/// The port family: every protocol (unset, TCP, UDP, SCTP) with every port (unset, 80, 81);
/// named ports on their protocol and one on the wrong protocol; ranges on each protocol that
/// end before and after 81.
const PORTS: [&str; 25] = [
    "{}",
    "{port: 80}",
    "{port: 81}",
    "{protocol: TCP}",
    "{protocol: TCP, port: 80}",
    "{protocol: TCP, port: 81}",
    "{protocol: UDP}",
    "{protocol: UDP, port: 80}",
    "{protocol: UDP, port: 81}",
    "{protocol: SCTP}",
    "{protocol: SCTP, port: 80}",
    "{protocol: SCTP, port: 81}",
    "{protocol: TCP, port: serve-80-tcp}",
    "{protocol: TCP, port: serve-81-tcp}",
    "{protocol: UDP, port: serve-80-udp}",
    "{protocol: UDP, port: serve-81-udp}",
    "{protocol: SCTP, port: serve-80-sctp}",
    "{protocol: SCTP, port: serve-81-sctp}",
    "{protocol: TCP, port: serve-80-udp}",
    "{protocol: TCP, port: 53, endPort: 80}",
    "{protocol: TCP, port: 53, endPort: 84}",
    "{protocol: UDP, port: 53, endPort: 80}",
    "{protocol: UDP, port: 53, endPort: 84}",
    "{protocol: SCTP, port: 53, endPort: 80}",
    "{protocol: SCTP, port: 53, endPort: 84}",
];

fn targets() -> Vec<Case> {
    let mut v = Vec::new();
    for ns in ["x", "y", "z"] {
        for (what, sel) in [
            ("all pods", "{}"),
            ("pod a", "{matchLabels: {pod: a}}"),
            (
                "pods a and b",
                "{matchExpressions: [{key: pod, operator: In, values: [a, b]}]}",
            ),
        ] {
            for dir in Dir::BOTH {
                let rules = format!(
                    "[{{{}: [{{podSelector: {{matchLabels: {{pod: b}}}}}}], ports: [{{port: 80}}]}}]",
                    dir.peers_field()
                );
                v.push(Case::single(
                    format!("target: {what} of namespace {ns}, {}", dir.name()),
                    Step::of(vec![Action::Apply(policy(&policy_yaml(
                        "target", ns, sel, dir, &rules,
                    )))]),
                ));
            }
        }
    }
    v
}

fn peers() -> Vec<Case> {
    let mut v = Vec::new();
    for dir in Dir::BOTH {
        v.push(Case::single(
            format!("peers: {}, empty peer list", dir.name()),
            Step::of(vec![base(dir, Some("[]"), None)]),
        ));
        for (what, p) in PEERS {
            v.push(Case::single(
                format!("peers: {}, {what}", dir.name()),
                Step::of(vec![base(dir, Some(&format!("[{p}]")), None)]),
            ));
        }
        for (i, (w1, p1)) in PEERS.iter().enumerate() {
            for (w2, p2) in &PEERS[i + 1..] {
                v.push(Case::single(
                    format!("peers: {}, {w1} + {w2}", dir.name()),
                    Step::of(vec![base(dir, Some(&format!("[{p1}, {p2}]")), None)]),
                ));
            }
        }
    }
    v
}

fn ports() -> Vec<Case> {
    let mut v = Vec::new();
    for dir in Dir::BOTH {
        v.push(Case::single(
            format!("ports: {}, empty port list", dir.name()),
            Step::of(vec![base(dir, None, Some("[]"))]),
        ));
        for p in PORTS {
            v.push(Case::single(
                format!("ports: {}, {p}", dir.name()),
                Step::of(vec![base(dir, None, Some(&format!("[{p}]")))]),
            ));
        }
        // Two ports of one rule, and a peer with ports.
        v.push(Case::single(
            format!("ports: {}, 80/TCP + serve-81-udp", dir.name()),
            Step::of(vec![base(
                dir,
                None,
                Some("[{port: 80}, {protocol: UDP, port: serve-81-udp}]"),
            )]),
        ));
        v.push(Case::single(
            format!("ports: {}, pods b of any namespace on 81/SCTP", dir.name()),
            Step::of(vec![base(
                dir,
                Some("[{podSelector: {matchLabels: {pod: b}}, namespaceSelector: {}}]"),
                Some("[{protocol: SCTP, port: 81}]"),
            )]),
        ));
    }
    v
}

fn conflicts() -> Vec<Case> {
    let p = |yaml: &str| Action::Apply(policy(yaml));
    let deny_all = |dir: Dir| p(&policy_yaml("deny-all", "x", "{}", dir, "[]"));
    let mut v = Vec::new();
    for dir in Dir::BOTH {
        let f = dir.peers_field();
        v.push(Case::single(
            format!(
                "conflict: {} deny-all with an allow layered on it",
                dir.name()
            ),
            Step::of(vec![
                deny_all(dir),
                base(dir, Some("[{podSelector: {matchLabels: {pod: b}}}]"), None),
            ]),
        ));
        v.push(Case::single(
            format!(
                "conflict: {} deny all addresses, allow all pods",
                dir.name()
            ),
            Step::of(vec![
                p(&policy_yaml(
                    "deny-ips",
                    "x",
                    "{matchLabels: {pod: a}}",
                    dir,
                    &format!("[{{{f}: [{{ipBlock: {{cidr: 0.0.0.0/31}}}}]}}]"),
                )),
                p(&policy_yaml(
                    "allow-pods",
                    "x",
                    "{matchLabels: {pod: a}}",
                    dir,
                    &format!("[{{{f}: [{{namespaceSelector: {{}}}}]}}]"),
                )),
            ]),
        ));
        v.push(Case::single(
            format!("conflict: {} allow all addresses, deny all pods", dir.name()),
            Step::of(vec![
                p(&policy_yaml(
                    "allow-ips",
                    "x",
                    "{matchLabels: {pod: a}}",
                    dir,
                    &format!("[{{{f}: [{{ipBlock: {{cidr: 0.0.0.0/0}}}}, {{ipBlock: {{cidr: '::/0'}}}}]}}]"),
                )),
                p(&policy_yaml(
                    "deny-pods",
                    "x",
                    "{matchLabels: {pod: a}}",
                    dir,
                    &format!("[{{{f}: [{{podSelector: {{matchLabels: {{pod: nobody}}}}}}]}}]"),
                )),
            ]),
        ));
        v.push(Case::single(
            format!(
                "conflict: {} allow a CIDR, except a smaller one, allow the smaller one elsewhere",
                dir.name()
            ),
            Step::of(vec![
                p(&policy_yaml(
                    "allow-cidr",
                    "x",
                    "{}",
                    dir,
                    &format!(
                        "[{{{f}: [{{ipBlock: {{cidr: 10.40.0.0/16, except: [10.40.2.0/24]}}}}]}}]"
                    ),
                )),
                p(&policy_yaml(
                    "allow-smaller",
                    "x",
                    "{matchLabels: {pod: b}}",
                    dir,
                    &format!(
                        "[{{{f}: [{{ipBlock: {{cidr: 10.40.2.0/25}}}}], ports: [{{port: 81}}]}}]"
                    ),
                )),
            ]),
        ));
        v.push(Case::single(
            format!("conflict: {} two policies, one peer, different ports", dir.name()),
            Step::of(vec![
                p(&policy_yaml(
                    "p80",
                    "x",
                    "{matchLabels: {pod: a}}",
                    dir,
                    &format!("[{{{f}: [{{namespaceSelector: {{matchLabels: {{ns: y}}}}}}], ports: [{{port: 80}}]}}]"),
                )),
                p(&policy_yaml(
                    "p81",
                    "x",
                    "{}",
                    dir,
                    &format!("[{{{f}: [{{namespaceSelector: {{matchLabels: {{ns: y}}}}}}], ports: [{{protocol: UDP, port: 81}}]}}]"),
                )),
            ]),
        ));
    }
    v.push(Case::single(
        "conflict: the source's egress allows, the destination's ingress denies",
        Step::of(vec![
            p(&policy_yaml("egress-all", "x", "{}", Dir::Egress, "[{}]")),
            p(&policy_yaml(
                "ingress-x-only",
                "y",
                "{}",
                Dir::Ingress,
                "[{from: [{podSelector: {}}]}]",
            )),
        ]),
    ));
    v.push(Case::single(
        "conflict: the destination's ingress allows, the source's egress denies",
        Step::of(vec![
            p(&policy_yaml(
                "egress-to-z",
                "x",
                "{}",
                Dir::Egress,
                "[{to: [{namespaceSelector: {matchLabels: {ns: z}}}]}]",
            )),
            p(&policy_yaml(
                "ingress-from-x",
                "y",
                "{}",
                Dir::Ingress,
                "[{from: [{namespaceSelector: {matchLabels: {ns: x}}}]}]",
            )),
        ]),
    ));
    v.push(Case::single(
        "conflict: ingress and egress in one policy, ranges across policies",
        Step::of(vec![
            p("metadata: {name: both, namespace: z}\n\
               spec:\n  podSelector: {matchExpressions: [{key: pod, operator: NotIn, values: [c]}]}\n\
               \x20 ingress: [{ports: [{port: 80, endPort: 80}]}]\n\
               \x20 egress: [{to: [{podSelector: {}}], ports: [{protocol: UDP, port: 1, endPort: 65535}]}]"),
            p(&policy_yaml(
                "more",
                "z",
                "{matchLabels: {pod: a}}",
                Dir::Ingress,
                "[{ports: [{port: 81, endPort: 90}, {protocol: SCTP, port: serve-80-sctp}]}]",
            )),
        ]),
    ));
    v
}

fn actions() -> Vec<Case> {
    let base_ingress = || {
        base(
            Dir::Ingress,
            Some("[{namespaceSelector: {matchLabels: {ns: y}}}]"),
            Some("[{port: 80}]"),
        )
    };
    vec![
        Case {
            name: "action: create and delete a policy".into(),
            steps: vec![
                Step::of(vec![base_ingress()]),
                Step::of(vec![Action::Delete {
                    ns: "x",
                    name: "base",
                }]),
            ],
        },
        Case {
            name: "action: create and update a policy".into(),
            steps: vec![
                Step::of(vec![base_ingress()]),
                Step::of(vec![base(
                    Dir::Ingress,
                    None,
                    Some("[{protocol: UDP, port: serve-81-udp}]"),
                )]),
            ],
        },
        Case {
            name: "action: create and delete a namespace with pods".into(),
            steps: vec![
                Step::of(vec![base_ingress()]),
                Step::of(vec![
                    Action::NamespaceLabels {
                        ns: "y2",
                        labels: labels(&[("ns", "y")]),
                    },
                    Action::AddPod {
                        ns: "y2",
                        pod: "a",
                        labels: labels(&[("pod", "a")]),
                    },
                    Action::AddPod {
                        ns: "y2",
                        pod: "b",
                        labels: labels(&[("pod", "b")]),
                    },
                ]),
                Step::of(vec![
                    Action::RemovePod { ns: "y2", pod: "a" },
                    Action::RemovePod { ns: "y2", pod: "b" },
                ]),
            ],
        },
        Case {
            name: "action: namespace labels make a policy apply, then no longer".into(),
            steps: vec![
                Step::of(vec![base(
                    Dir::Ingress,
                    Some("[{namespaceSelector: {matchLabels: {new-ns: qrs}}}]"),
                    None,
                )]),
                Step::of(vec![Action::NamespaceLabels {
                    ns: "y",
                    labels: labels(&[("ns", "y"), ("new-ns", "qrs")]),
                }]),
                Step::of(vec![Action::NamespaceLabels {
                    ns: "y",
                    labels: labels(&[("ns", "y")]),
                }]),
            ],
        },
        Case {
            name: "action: create and delete a pod".into(),
            steps: vec![
                Step::of(vec![base_ingress()]),
                Step::of(vec![Action::AddPod {
                    ns: "x",
                    pod: "d",
                    labels: labels(&[("pod", "d")]),
                }]),
                Step::of(vec![Action::RemovePod { ns: "x", pod: "d" }]),
            ],
        },
        Case {
            name: "action: pod labels make a policy apply, then no longer".into(),
            steps: vec![
                Step::of(vec![base(
                    Dir::Ingress,
                    Some("[{podSelector: {matchLabels: {new-label: abc}}, namespaceSelector: {matchExpressions: [{key: ns, operator: In, values: [y, z]}]}}]"),
                    None,
                )]),
                Step::of(vec![Action::PodLabels {
                    ns: "y",
                    pod: "b",
                    labels: labels(&[("pod", "b"), ("new-label", "abc")]),
                }]),
                Step::of(vec![Action::PodLabels {
                    ns: "y",
                    pod: "b",
                    labels: labels(&[("pod", "b")]),
                }]),
            ],
        },
        Case {
            name: "action: pod labels move a pod between targets".into(),
            steps: vec![
                Step::of(vec![base(Dir::Egress, Some("[{podSelector: {}}]"), None)]),
                Step::of(vec![Action::PodLabels {
                    ns: "x",
                    pod: "c",
                    labels: labels(&[("pod", "a")]),
                }]),
                Step::of(vec![Action::PodLabels {
                    ns: "x",
                    pod: "a",
                    labels: labels(&[("pod", "c")]),
                }]),
            ],
        },
        Case {
            name: "action: a policy bound to another network applies nowhere here, then bound here"
                .into(),
            steps: vec![
                Step::of(vec![
                    base_ingress(),
                    Action::Bind {
                        ns: "x",
                        name: "base",
                        network: Some("elsewhere"),
                    },
                ]),
                Step::of(vec![Action::Bind {
                    ns: "x",
                    name: "base",
                    network: Some(crate::universe::NETWORK),
                }]),
                Step::of(vec![Action::Bind {
                    ns: "x",
                    name: "base",
                    network: None,
                }]),
            ],
        },
    ]
}

/// Every generated case: targets, peers, ports, conflicts, actions, and the single-peer cases
/// again with the policy bound to the network.
pub fn cases() -> Vec<Case> {
    let mut v = targets();
    let single_peers: Vec<Case> = peers()
        .into_iter()
        .filter(|c| !c.name.contains(" + "))
        .map(bound)
        .collect();
    v.extend(peers());
    v.extend(ports());
    v.extend(conflicts());
    v.extend(actions());
    v.extend(single_peers);
    v
}
