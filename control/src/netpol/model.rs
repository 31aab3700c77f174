//! Kubernetes NetworkPolicy (`networking.k8s.io/v1`) as lace reads it: the parsed form the
//! evaluator ([`super::eval`]) and the compiler ([`super::compile`]) share. Parsing and
//! validation are [`crate::api::validate::network_policy_model`]'s (every error, with its
//! field); everything here is already valid.
//!
//! Upstream semantics kept in the model:
//!
//! - `policyTypes` is resolved: [`PolicyModel::ingress`] is `Some` exactly when the policy
//!   isolates the pods it selects for ingress (listed in `policyTypes`, or `policyTypes` absent
//!   or empty — Ingress is always implied then), [`PolicyModel::egress`] when it isolates them
//!   for egress (listed, or `policyTypes` absent or empty and `egress` has rules). Rules of a
//!   direction the policy does not isolate are dropped, as upstream ignores them.
//! - A rule with no peers (`from`/`to` absent or empty) matches every peer; a rule with no
//!   ports matches every protocol and port, ICMP included.
//! - A peer with `podSelector` alone selects pods of the policy's namespace
//!   ([`NamespaceScope::Policy`]); with `namespaceSelector` (alone or with `podSelector`) pods
//!   of the namespaces it selects; both must hold (AND). An empty selector selects everything.
//! - A port's protocol defaults to TCP; a named port resolves against the destination pod's
//!   container ports of that name *and* protocol (for ingress the selected pod, for egress the
//!   peer); one that resolves to nothing matches nothing.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use lace_shared::policy::{PROTO_SCTP, PROTO_TCP, PROTO_UDP};

use crate::bind::{Labels, Requirement};

/// A protocol as NetworkPolicy names it: `TCP`, `UDP` or `SCTP` (the IP protocol number).
pub fn protocol_number(name: &str) -> Option<u8> {
    match name {
        "TCP" => Some(PROTO_TCP),
        "UDP" => Some(PROTO_UDP),
        "SCTP" => Some(PROTO_SCTP),
        _ => None,
    }
}

/// A pod's container port (`spec.containers[].ports[]` with a name): what named ports resolve
/// against.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContainerPort {
    /// `name`.
    pub name: String,
    /// `protocol` (default TCP) as an IP protocol number.
    pub proto: u8,
    /// `containerPort`.
    pub port: u16,
}

/// The named port `name`/`proto` of a pod with `ports`, if it has one.
pub fn resolve_named(ports: &[ContainerPort], proto: u8, name: &str) -> Option<u16> {
    ports
        .iter()
        .find(|p| p.proto == proto && p.name == name)
        .map(|p| p.port)
}

/// One entry of a rule's `ports`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortMatch {
    /// `protocol` without `port`: every port of the protocol.
    AnyPort(u8),
    /// A numeric `port`, or `port`..=`endPort`.
    Range {
        /// Protocol.
        proto: u8,
        /// `port`.
        lo: u16,
        /// `endPort`, or `port`.
        hi: u16,
    },
    /// A named port: resolved against the destination pod's container ports.
    Named {
        /// Protocol.
        proto: u8,
        /// The port's name.
        name: String,
    },
}

impl PortMatch {
    /// Whether `proto`/`port` matches, named ports resolved against `dest` (the destination
    /// pod's container ports; `None` when the destination is not a pod).
    pub fn matches(&self, dest: Option<&[ContainerPort]>, proto: u8, port: u16) -> bool {
        match self {
            PortMatch::AnyPort(p) => *p == proto,
            PortMatch::Range { proto: p, lo, hi } => *p == proto && *lo <= port && port <= *hi,
            PortMatch::Named { proto: p, name } => {
                *p == proto && dest.and_then(|d| resolve_named(d, *p, name)) == Some(port)
            }
        }
    }
}

/// Which namespaces a pod peer looks in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NamespaceScope {
    /// No `namespaceSelector`: the policy's own namespace.
    Policy(String),
    /// `namespaceSelector`: the namespaces whose labels it selects (empty: all).
    Selected(Vec<Requirement>),
}

/// An `ipBlock`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpBlock {
    /// `cidr` (host bits cleared).
    pub cidr: IpNet,
    /// `except`: each strictly inside `cidr` (host bits cleared).
    pub except: Vec<IpNet>,
}

impl IpBlock {
    /// Whether `a` is in the block.
    pub fn contains(&self, a: IpAddr) -> bool {
        self.cidr.contains(&a) && !self.except.iter().any(|e| e.contains(&a))
    }
}

/// One entry of a rule's `from`/`to`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    /// Pods: in the namespaces of `namespaces` with labels `pods` selects (both must hold).
    Pods {
        /// The namespaces.
        namespaces: NamespaceScope,
        /// `podSelector` (empty: every pod).
        pods: Vec<Requirement>,
    },
    /// Addresses (pods' included).
    Block(IpBlock),
}

impl Peer {
    /// Whether a pod in `namespace` (labels `ns_labels`) with `labels` is a member.
    pub fn selects_pod(
        &self,
        namespace: &str,
        ns_labels: &impl Labels,
        labels: &impl Labels,
    ) -> bool {
        match self {
            Peer::Pods { namespaces, pods } => {
                let ns_ok = match namespaces {
                    NamespaceScope::Policy(ns) => ns == namespace,
                    NamespaceScope::Selected(reqs) => reqs.iter().all(|r| r.holds(ns_labels)),
                };
                ns_ok && pods.iter().all(|r| r.holds(labels))
            }
            Peer::Block(_) => false,
        }
    }
}

/// One ingress or egress rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// `from`/`to`; empty: every peer.
    pub peers: Vec<Peer>,
    /// `ports`; empty: every protocol and port.
    pub ports: Vec<PortMatch>,
}

/// A valid NetworkPolicy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PolicyModel {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.podSelector` (empty: every pod of the namespace).
    pub pod_selector: Vec<Requirement>,
    /// The ingress rules, if the policy isolates its pods for ingress (see the module docs).
    pub ingress: Option<Vec<Rule>>,
    /// The egress rules, if the policy isolates its pods for egress.
    pub egress: Option<Vec<Rule>>,
}

impl PolicyModel {
    /// Whether the policy selects a pod of `namespace` with `labels`.
    pub fn selects(&self, namespace: &str, labels: &impl Labels) -> bool {
        self.namespace == namespace && self.pod_selector.iter().all(|r| r.holds(labels))
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A NetworkPolicy with where it applies: the network a binding policy
/// (`matchKind: networkpolicy`) bound it to, or none (it applies on every network its pods are
/// attached to).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BoundPolicy {
    /// The policy.
    pub model: PolicyModel,
    /// The network it is bound to; `None`: unbound.
    pub network: Option<String>,
}

/// Labels of a namespace, with `kubernetes.io/metadata.name` set to its name as the API server
/// does (since Kubernetes 1.21; policies select namespaces by it).
pub fn namespace_labels(name: &str, labels: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut l = labels;
    l.insert(NAMESPACE_NAME_LABEL.to_owned(), name.to_owned());
    l
}

/// The label the API server puts on every namespace: its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
