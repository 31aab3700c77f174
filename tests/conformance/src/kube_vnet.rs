//! kube-vnet's shapes (seed `004`): the NetworkPolicies its operator generates from named-network
//! memberships, enforced by lace exactly as the evaluator decides them.
//!
//! What the operator writes, in every managed namespace (here `x`, `y`, `z` unless a case
//! disables one):
//!
//! - `kube-vnet.base`: a deny-all ingress baseline (`podSelector: {}`, `policyTypes:
//!   [Ingress]`, no rule). Egress is never restricted.
//! - per virtual network `<home>.<vnet>` and member namespace, `kube-vnet.mem.<home>.<vnet>-<8hex>`:
//!   it selects the namespace's pods whose membership accepts (`both`, `ingress`) and lets in the
//!   pods of the network's allowed namespaces whose membership initiates (`both`, `egress`).
//!
//! Policies select the operator's stamp, `kube-vnet.system/net.<home>.<vnet>=<direction>`, never
//! the user's request label. The isolation levels are memberships of two system networks every
//! namespace has: `namespace` (reachable by my namespace) and `cluster` (reachable cluster-wide):
//! level `cluster` makes every pod a `both` member of `cluster`, level `namespace` a `both`
//! member of its `namespace` and an `egress` member of `cluster`, level `pod` an `egress` member
//! of both, so only explicit memberships accept.
//!
//! Every case states what kube-vnet promises (its [`Expect`] tables) beside the evaluator's and
//! the pipeline's agreement that [`crate::check`] asserts on every probe; the dynamic ones
//! change a stamp or delete a network while connections are open.

use std::collections::BTreeMap;

use crate::case::{policy, Action, Case, Expect, Filter, Step};
use crate::universe::{labels, NAMESPACES, PODS};

/// The stamp's key prefix.
const STAMP: &str = "kube-vnet.system/net";

/// A virtual network: its home namespace, name, the namespaces whose pods may join (none: any
/// namespace), and the name of its membership policies (the operator's hash suffix fixed).
struct Vnet {
    home: &'static str,
    name: &'static str,
    allowed: &'static [&'static str],
    policy: &'static str,
}

impl Vnet {
    fn key(&self) -> String {
        format!("{STAMP}.{}.{}", self.home, self.name)
    }

    /// Its membership policy in namespace `ns`.
    fn membership(&self, ns: &str) -> Action {
        let key = self.key();
        let allowed = self.allowed.join(", ");
        let peers = if self.allowed.is_empty() {
            // The `cluster` system network: every namespace.
            "namespaceSelector: {}".to_string()
        } else {
            format!(
                "namespaceSelector: {{matchExpressions: [{{key: kubernetes.io/metadata.name, \
                 operator: In, values: [{allowed}]}}]}}"
            )
        };
        Action::Apply(policy(&format!(
            "metadata: {{name: {policy}, namespace: {ns}, labels: {{kube-vnet.system/managed-by: \
             kube-vnet}}}}\n\
             spec:\n\
             \x20 podSelector: {{matchExpressions: [{{key: {key}, operator: In, values: [both, \
             ingress]}}]}}\n\
             \x20 policyTypes: [Ingress]\n\
             \x20 ingress:\n\
             \x20 - from:\n\
             \x20   - {peers}\n\
             \x20     podSelector: {{matchExpressions: [{{key: {key}, operator: In, values: [both, \
             egress]}}]}}",
            policy = self.policy,
        )))
    }

    /// Deleting the network: the operator removes the membership policies it wrote in
    /// `namespaces`.
    fn deleted(&self, namespaces: &[&'static str]) -> Vec<Action> {
        namespaces
            .iter()
            .map(|&ns| Action::Delete {
                ns,
                name: self.policy,
            })
            .collect()
    }
}

/// The deny-all ingress baseline of namespace `ns`.
fn base(ns: &str) -> Action {
    Action::Apply(policy(&format!(
        "metadata: {{name: kube-vnet.base, namespace: {ns}, labels: {{kube-vnet.system/managed-by: \
         kube-vnet}}}}\nspec: {{podSelector: {{}}, policyTypes: [Ingress]}}"
    )))
}

/// `payments`, at home in `x`, which `y` may join too.
const PAYMENTS: Vnet = Vnet {
    home: "x",
    name: "payments",
    allowed: &["x", "y"],
    policy: "kube-vnet.mem.x.payments-5f3a9c21",
};

/// The `cluster` system network.
const CLUSTER: Vnet = Vnet {
    home: "kube-vnet",
    name: "cluster",
    allowed: &[],
    policy: "kube-vnet.mem.kube-vnet.cluster-0c4d7e18",
};

/// The `namespace` system network of `ns`.
fn namespace_vnet(ns: &'static str) -> Vnet {
    let (allowed, policy): (&'static [&'static str], _) = match ns {
        "x" => (&["x"], "kube-vnet.mem.x.namespace-2b81e6f0"),
        "y" => (&["y"], "kube-vnet.mem.y.namespace-9d04c3a7"),
        _ => (&["z"], "kube-vnet.mem.z.namespace-71e5b2d9"),
    };
    Vnet {
        home: ns,
        name: "namespace",
        allowed,
        policy,
    }
}

/// Stamps a pod with its memberships (its `pod` label stays).
fn stamp(ns: &'static str, pod: &'static str, memberships: &[(String, &str)]) -> Action {
    let mut l: BTreeMap<String, String> = labels(&[("pod", pod)]);
    for (k, d) in memberships {
        l.insert(k.clone(), (*d).to_string());
    }
    Action::PodLabels { ns, pod, labels: l }
}

/// The stamps an isolation level gives every pod of `namespaces`, plus `extra` memberships of
/// `ns/pod`.
fn level_stamps(
    level: &str,
    namespaces: &[&'static str],
    extra: &[(&'static str, &'static str, &'static str)],
) -> Vec<Action> {
    let mut out = Vec::new();
    for &ns in namespaces {
        for &pod in &PODS {
            let mut m: Vec<(String, &str)> = match level {
                "cluster" => vec![(CLUSTER.key(), "both")],
                "namespace" => vec![
                    (namespace_vnet(ns).key(), "both"),
                    (CLUSTER.key(), "egress"),
                ],
                _ => vec![
                    (namespace_vnet(ns).key(), "egress"),
                    (CLUSTER.key(), "egress"),
                ],
            };
            for (ens, epod, dir) in extra {
                if *ens == ns && *epod == pod {
                    m.push((PAYMENTS.key(), dir));
                }
            }
            out.push(stamp(ns, pod, &m));
        }
    }
    out
}

/// The operator's policies in the managed `namespaces`: the baselines, the system networks'
/// memberships, and `payments'` in its allowed namespaces.
fn level_policies(namespaces: &[&'static str]) -> Vec<Action> {
    let mut out: Vec<Action> = namespaces.iter().map(|ns| base(ns)).collect();
    for &ns in namespaces {
        out.push(CLUSTER.membership(ns));
        out.push(namespace_vnet(ns).membership(ns));
    }
    out.extend(PAYMENTS.allowed.iter().map(|ns| PAYMENTS.membership(ns)));
    out
}

fn pod(ns: &'static str, p: &'static str) -> Filter {
    Filter::pod(ns, p)
}

/// The members of `payments` in every case: x/a both, x/b ingress, y/c egress.
const MEMBERS: [(&str, &str, &str); 3] = [
    ("x", "a", "both"),
    ("x", "b", "ingress"),
    ("y", "c", "egress"),
];

/// What `payments` opens: initiators (both, egress) to acceptors (both, ingress).
fn payments_paths(e: Expect) -> Expect {
    e.peer(pod("x", "a"), pod("x", "b"), true)
        .peer(pod("y", "c"), pod("x", "a"), true)
        .peer(pod("y", "c"), pod("x", "b"), true)
}

/// Every kube-vnet case.
pub fn cases() -> Vec<Case> {
    let all = NAMESPACES;
    let mut v = Vec::new();

    // Level pod: nothing accepts but explicit memberships.
    let mut actions = level_stamps("pod", &all, &MEMBERS);
    actions.extend(level_policies(&all));
    v.push(Case::single(
        "kube-vnet: isolation level pod, payments with both/ingress/egress members across namespaces",
        Step {
            actions,
            expect: [Expect::tcp(80), Expect::udp(81)]
                .into_iter()
                .map(|e| payments_paths(e.peer(Filter::ANY, Filter::ANY, false)))
                .collect(),
        },
    ));

    // Level namespace: same-namespace pods reach each other; across namespaces only payments.
    let mut actions = level_stamps("namespace", &all, &MEMBERS);
    actions.extend(level_policies(&all));
    let mut e = Expect::tcp(80).peer(Filter::ANY, Filter::ANY, false);
    for ns in all {
        e = e.peer(Filter::ns(ns), Filter::ns(ns), true);
    }
    v.push(Case::single(
        "kube-vnet: isolation level namespace",
        Step::of(actions).expect(payments_paths(e)),
    ));

    // Level cluster: every pod reaches every pod (the baseline still refuses what no pod
    // selector matches: addresses outside the cluster, which the evaluator decides).
    let mut actions = level_stamps("cluster", &all, &MEMBERS);
    actions.extend(level_policies(&all));
    v.push(Case::single(
        "kube-vnet: isolation level cluster",
        Step::of(actions).expect(Expect::tcp(80)),
    ));

    // A disabled namespace (z): no baseline, no policies; its pods cannot join.
    let managed = ["x", "y"];
    let mut actions = level_stamps("pod", &managed, &MEMBERS);
    actions.extend(level_policies(&managed));
    v.push(Case::single(
        "kube-vnet: namespace z disabled, levels pod elsewhere",
        Step::of(actions).expect(payments_paths(
            Expect::tcp(80)
                .peer(Filter::ANY, Filter::ns("x"), false)
                .peer(Filter::ANY, Filter::ns("y"), false),
        )),
    ));

    // Dynamic: a member's stamp changes while connections are open, then the network is
    // deleted.
    let mut first = level_stamps("pod", &all, &MEMBERS);
    first.extend(level_policies(&all));
    let isolated = || Expect::tcp(80).peer(Filter::ANY, Filter::ANY, false);
    let b_stamp: Vec<(String, &str)> = vec![
        (namespace_vnet("x").key(), "egress"),
        (CLUSTER.key(), "egress"),
        (PAYMENTS.key(), "egress"),
    ];
    v.push(Case {
        name: "kube-vnet: a member turns egress-only, then payments is deleted".into(),
        steps: vec![
            Step::of(first).expect(payments_paths(isolated())),
            // x/b now only initiates: what came into it is cut; it reaches x/a.
            Step::of(vec![stamp("x", "b", &b_stamp)]).expect(
                isolated().peer(pod("y", "c"), pod("x", "a"), true).peer(
                    pod("x", "b"),
                    pod("x", "a"),
                    true,
                ),
            ),
            // The network goes, and every membership policy it had with it: nothing accepts.
            Step::of(PAYMENTS.deleted(PAYMENTS.allowed)).expect(isolated()),
        ],
    });
    v
}
