//! Kubernetes NetworkPolicy on lace: the parsed model ([`model`]), the pure evaluator that
//! states what upstream `networking.k8s.io/v1` semantics allow ([`eval`]), and the compiler of
//! policies into the forwarder's peer classes, policy sets and decisions ([`compile`], ADR
//! 0028).
//!
//! **Where a policy applies.** A NetworkPolicy bound to a network by a NetworkBindingPolicy
//! (`matchKind: networkpolicy`) applies to its pods' endpoints on that network; an unbound one
//! (no rule matched, or a CEL rule returned `""`) applies on every network its pods are
//! attached to, as a policy does on a single-network cluster. A pod peer is the pod with every
//! address it has, on any network.
//!
//! **Node traffic.** A connection from the node a pod runs on to that pod is always allowed
//! (kubelet's probes): the forwarder never applies ingress policy to what its host port sends.
//! A pod's connections to node addresses are egress like any other, matched by `ipBlock`s.

pub mod eval;
pub mod model;

pub use eval::{evaluate, Connection, Side, Verdict};
pub use model::{
    namespace_labels, protocol_number, resolve_named, BoundPolicy, ContainerPort, IpBlock,
    NamespaceScope, Peer, PolicyModel, PortMatch, Rule, NAMESPACE_NAME_LABEL,
};
