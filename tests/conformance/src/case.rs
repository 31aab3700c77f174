//! What a case is: steps of actions on the universe, each optionally with the verdict tables
//! upstream expects after it.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use lace_control::api::validate::network_policy_model;
use lace_control::world::{BoundPolicy, NamespacedName};
use lace_shared::policy::{PROTO_SCTP, PROTO_TCP, PROTO_UDP};

use crate::universe::{Universe, NETWORK};

/// Parses a NetworkPolicy written as YAML (`metadata` and `spec`; `apiVersion` and `kind` are
/// added), unbound. A case's policy that does not validate is a bug in the case: it panics
/// with the errors.
pub fn policy(yaml: &str) -> BoundPolicy {
    let doc = format!("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n{yaml}");
    let np: NetworkPolicy = serde_yaml::from_str(&doc)
        .unwrap_or_else(|e| panic!("policy does not decode: {e}\n{yaml}"));
    let ns = np
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = np
        .metadata
        .name
        .clone()
        .expect("policies in cases have names");
    let model = network_policy_model(&ns, &name, &np.spec.unwrap_or_default())
        .unwrap_or_else(|e| panic!("policy {ns}/{name} is invalid: {e}"));
    BoundPolicy {
        model,
        network: None,
    }
}

/// One change to the universe.
#[derive(Debug, Clone)]
pub enum Action {
    /// Creates or replaces (by namespace and name) a policy.
    Apply(BoundPolicy),
    /// Deletes a policy.
    Delete {
        /// Namespace.
        ns: &'static str,
        /// Name.
        name: &'static str,
    },
    /// Sets a pod's labels (all of them).
    PodLabels {
        /// Namespace.
        ns: &'static str,
        /// Pod.
        pod: &'static str,
        /// The labels.
        labels: BTreeMap<String, String>,
    },
    /// Sets a namespace's labels (all of them; `kubernetes.io/metadata.name` stays).
    NamespaceLabels {
        /// Namespace.
        ns: &'static str,
        /// The labels.
        labels: BTreeMap<String, String>,
    },
    /// Adds a pod (it serves the standard ports).
    AddPod {
        /// Namespace.
        ns: &'static str,
        /// Pod.
        pod: &'static str,
        /// Labels.
        labels: BTreeMap<String, String>,
    },
    /// Removes a pod.
    RemovePod {
        /// Namespace.
        ns: &'static str,
        /// Pod.
        pod: &'static str,
    },
    /// Binds a policy to a network (`Some`) or leaves it unbound.
    Bind {
        /// Namespace.
        ns: &'static str,
        /// Name.
        name: &'static str,
        /// The network.
        network: Option<&'static str>,
    },
}

impl Action {
    /// Applies the action.
    pub fn run(&self, u: &mut Universe) {
        match self {
            Action::Apply(p) => u.apply_policy(p.clone()),
            Action::Delete { ns, name } => {
                u.world
                    .network_policies
                    .remove(&NamespacedName::new(*ns, *name));
            }
            Action::PodLabels { ns, pod, labels } => {
                if let Some(p) = u.world.pods.get_mut(&NamespacedName::new(*ns, *pod)) {
                    p.labels = labels.clone();
                }
            }
            Action::NamespaceLabels { ns, labels } => {
                u.world.namespaces.insert(ns.to_string(), labels.clone());
            }
            Action::AddPod { ns, pod, labels } => u.add_pod(ns, pod, labels.clone()),
            Action::RemovePod { ns, pod } => u.remove_pod(ns, pod),
            Action::Bind { ns, name, network } => {
                if let Some(p) = u
                    .world
                    .network_policies
                    .get_mut(&NamespacedName::new(*ns, *name))
                {
                    p.network = network.map(str::to_owned);
                }
            }
        }
    }
}

/// Pods a reachability rule talks about: a namespace and/or a pod name (`None`: any).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filter {
    /// Namespace.
    pub ns: Option<&'static str>,
    /// Pod name.
    pub pod: Option<&'static str>,
}

impl Filter {
    /// Every pod.
    pub const ANY: Filter = Filter {
        ns: None,
        pod: None,
    };

    /// The pods of namespace `ns`.
    pub fn ns(ns: &'static str) -> Filter {
        Filter {
            ns: Some(ns),
            pod: None,
        }
    }

    /// Pod `ns/pod`.
    pub fn pod(ns: &'static str, pod: &'static str) -> Filter {
        Filter {
            ns: Some(ns),
            pod: Some(pod),
        }
    }

    fn matches(&self, p: &NamespacedName) -> bool {
        self.ns.is_none_or(|n| n == p.namespace) && self.pod.is_none_or(|n| n == p.name)
    }
}

/// Upstream's expected connectivity between pods for one port and protocol: everything allowed,
/// then each rule in order sets the pairs it matches (as upstream's `Reachability` builds
/// it). Connections of a pod to itself are not compared (upstream ignores loopback).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    /// IP protocol.
    pub proto: u8,
    /// Destination port.
    pub port: u16,
    /// (from, to, allowed), applied in order.
    pub rules: Vec<(Filter, Filter, bool)>,
}

impl Expect {
    /// Everything allowed on `proto`/`port`.
    pub fn new(proto: u8, port: u16) -> Expect {
        Expect {
            proto,
            port,
            rules: Vec::new(),
        }
    }

    /// TCP on `port`.
    pub fn tcp(port: u16) -> Expect {
        Expect::new(PROTO_TCP, port)
    }

    /// UDP on `port`.
    pub fn udp(port: u16) -> Expect {
        Expect::new(PROTO_UDP, port)
    }

    /// SCTP on `port`.
    pub fn sctp(port: u16) -> Expect {
        Expect::new(PROTO_SCTP, port)
    }

    /// Connections from the pods of `from` to those of `to` are `allowed` (upstream's
    /// `ExpectPeer`; also `Expect` with two pods).
    pub fn peer(mut self, from: Filter, to: Filter, allowed: bool) -> Expect {
        self.rules.push((from, to, allowed));
        self
    }

    /// Every connection into `to` is `allowed` (upstream's `ExpectAllIngress`).
    pub fn all_ingress(self, to: Filter, allowed: bool) -> Expect {
        self.peer(Filter::ANY, to, allowed)
    }

    /// Every connection out of `from` is `allowed` (upstream's `ExpectAllEgress`).
    pub fn all_egress(self, from: Filter, allowed: bool) -> Expect {
        self.peer(from, Filter::ANY, allowed)
    }

    /// What the table says about `from` → `to`.
    pub fn allowed(&self, from: &NamespacedName, to: &NamespacedName) -> bool {
        let mut v = true;
        for (f, t, a) in &self.rules {
            if f.matches(from) && t.matches(to) {
                v = *a;
            }
        }
        v
    }
}

/// One step: actions, then (optionally) what upstream expects.
#[derive(Debug, Clone)]
pub struct Step {
    /// The actions, in order.
    pub actions: Vec<Action>,
    /// Upstream's expectations after them (none for generated cases, whose only oracle is the
    /// evaluator).
    pub expect: Vec<Expect>,
}

impl Step {
    /// A step of `actions` with no upstream expectation.
    pub fn of(actions: Vec<Action>) -> Step {
        Step {
            actions,
            expect: Vec::new(),
        }
    }

    /// Adds an expectation.
    pub fn expect(mut self, e: Expect) -> Step {
        self.expect.push(e);
        self
    }
}

/// A named sequence of steps.
#[derive(Debug, Clone)]
pub struct Case {
    /// Where it comes from and what it checks.
    pub name: String,
    /// The steps.
    pub steps: Vec<Step>,
}

impl Case {
    /// A case of one step.
    pub fn single(name: impl Into<String>, step: Step) -> Case {
        Case {
            name: name.into(),
            steps: vec![step],
        }
    }
}

/// Binds every policy of the step's `Apply` actions to [`NETWORK`] (the case then checks a
/// policy bound by a NetworkBindingPolicy instead of an unbound one).
pub fn bound(mut c: Case) -> Case {
    c.name = format!("{} (bound to network {NETWORK})", c.name);
    for s in &mut c.steps {
        for a in &mut s.actions {
            if let Action::Apply(p) = a {
                p.network = Some(NETWORK.to_owned());
            }
        }
    }
    c
}
