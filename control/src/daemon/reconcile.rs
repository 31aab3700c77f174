//! Reconcile decisions: from the source's objects and the IPAM state to the compiler's
//! [`World`] and every object's conditions. Pure functions (no I/O, no clock); the daemon
//! ([`super::Daemon`]) does the IPAM side effects ([`ipam_actions`]) and the publishing.
//!
//! Guarantees:
//!
//! - Every object is validated; an invalid one is left out of the world and reported with all
//!   its errors in its conditions. Nothing here fails or panics on bad input.
//! - A Network that turns invalid (or whose immutable fields change) after it was in the world
//!   keeps its **last good** model, so its pods keep forwarding; its `Valid` condition says
//!   why and `Ready` says it serves the last good spec.
//! - A routing policy is compiled only when it validates, its networks exist and are valid,
//!   its prefixes lie inside the destination, and [`routing_support`] accepts it; otherwise it
//!   gets `Accepted=False` or `Supported=False` with the message.
//! - [`world_changes`] lists every difference between two worlds as the compiler's
//!   [`Change`]s, so one pod's change is one [`Change::Endpoint`].

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;

use crate::api::validate::{
    network_model, routing_support, validate_binding_policy, validate_network,
    validate_routing_policy, NotSupported,
};
use crate::api::{Condition, NetworkBindingPolicy, NetworkType};
use crate::bind::BindingPolicies;
use crate::compile::Change;
use crate::ipam::{Ipam, NetworkDef};
use crate::source::Objects;
use crate::world::{AttachmentKey, EndpointModel, NetworkModel, NodeModel, RoutingModel, World};

/// Condition type: the object is valid.
pub const VALID: &str = "Valid";
/// Condition type: the network is programmed (in the world with an id).
pub const READY: &str = "Ready";
/// Condition type: the network's last ADD on this node found addresses.
pub const ADDRESSES_AVAILABLE: &str = "AddressesAvailable";
/// Condition type: the routing policy is accepted (valid, its networks exist).
pub const ACCEPTED: &str = "Accepted";
/// Condition type: the compiler implements what the routing policy asks.
pub const SUPPORTED: &str = "Supported";

/// Builds a condition (no transition time: the status writer keeps or sets it).
pub fn condition(type_: &str, ok: bool, reason: &str, message: impl Into<String>) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        last_transition_time: None,
        observed_generation: None,
    }
}

/// One object's computed conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectReport {
    /// `Network`, `NetworkBindingPolicy`, `NetworkRoutingPolicy`, `Node`.
    pub kind: &'static str,
    /// `metadata.name`.
    pub name: String,
    /// Conditions, in a fixed order per kind.
    pub conditions: Vec<Condition>,
}

/// What IPAM must be told before the world can be built.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpamActions {
    /// Valid networks IPAM does not hold with this definition yet.
    pub ensure_networks: Vec<(String, NetworkDef)>,
    /// Networks IPAM holds that the source no longer has.
    pub remove_networks: Vec<String>,
    /// Lace nodes IPAM does not know yet.
    pub ensure_nodes: Vec<String>,
    /// Nodes IPAM holds that the source no longer has.
    pub remove_nodes: Vec<String>,
}

impl IpamActions {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.ensure_networks.is_empty()
            && self.remove_networks.is_empty()
            && self.ensure_nodes.is_empty()
            && self.remove_nodes.is_empty()
    }
}

fn network_def(name: &str, spec: &crate::api::NetworkSpec) -> Option<NetworkDef> {
    // Any non-zero id parses the spec; the id itself is not used here.
    network_model(name, lace_shared::types::NetworkId(u32::MAX), spec)
        .ok()
        .map(|m| NetworkDef::from(&m))
}

/// What IPAM said last time about a network's definition (the daemon's cache, so that an
/// unchanged network costs no lock and no write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    /// The definition IPAM was given.
    pub def: NetworkDef,
    /// The id IPAM holds for the network after that (None: refused before it had one).
    pub id: Option<lace_shared::types::NetworkId>,
    /// IPAM's refusal, e.g. an immutable field changed.
    pub error: Option<String>,
}

/// What IPAM lacks or holds in excess, compared with the valid objects: a valid network is
/// (re)ensured unless `cache` says IPAM already answered for this very definition and IPAM
/// still holds the same id. A network whose immutable fields changed is listed too (IPAM
/// refuses it: [`crate::ipam::IpamError::Immutable`], which the daemon caches and reports as
/// the network's `Valid=False`).
pub fn ipam_actions(
    objects: &Objects,
    ipam: &Ipam,
    cache: &BTreeMap<String, Ensured>,
) -> IpamActions {
    let mut a = IpamActions::default();
    for (name, net) in &objects.networks {
        if validate_network(name, &net.spec).is_err() {
            continue;
        }
        let Some(def) = network_def(name, &net.spec) else {
            continue;
        };
        let fresh = cache
            .get(name)
            .is_some_and(|e| e.def == def && e.id == ipam.network_id(name) && e.id.is_some());
        if !fresh {
            a.ensure_networks.push((name.clone(), def));
        }
    }
    for name in ipam.network_ids().keys() {
        if !objects.networks.contains_key(name) {
            a.remove_networks.push(name.clone());
        }
    }
    let nodes = ipam.nodes();
    for name in objects.nodes.keys() {
        if !nodes.contains_key(name) {
            a.ensure_nodes.push(name.clone());
        }
    }
    for name in nodes.keys() {
        if !objects.nodes.contains_key(name) {
            a.remove_nodes.push(name.clone());
        }
    }
    a
}

/// Inputs of [`build_world`] besides the objects.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// This node.
    pub node: &'a str,
    /// The IPAM state.
    pub ipam: &'a Ipam,
    /// This node's attached leases.
    pub attached: &'a BTreeSet<AttachmentKey>,
    /// IPAM's refusals of networks (name → message), from the last [`ipam_actions`] run.
    pub ipam_errors: &'a BTreeMap<String, String>,
    /// Networks whose last ADD on this node ran out of addresses (name → message).
    pub exhausted: &'a BTreeMap<String, String>,
    /// The network models last put in the world, by name.
    pub last_good: &'a BTreeMap<String, NetworkModel>,
}

/// The world and the conditions of networks, routing policies and nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Built {
    /// The compiler's input.
    pub world: World,
    /// Networks, routing policies and nodes, in that order, each sorted by name.
    pub reports: Vec<ObjectReport>,
}

/// Builds the world (see the module docs for what is left out and why).
pub fn build_world(objects: &Objects, cx: Context<'_>) -> Built {
    let mut world = World::default();
    let mut reports = Vec::new();

    // ---- networks ----
    for (name, net) in &objects.networks {
        let mut conds = Vec::new();
        let id = cx.ipam.network_id(name);
        let invalid = match validate_network(name, &net.spec) {
            Err(e) => Some(("Invalid", e.messages().join("; "))),
            Ok(()) => cx.ipam_errors.get(name).map(|m| ("Immutable", m.clone())),
        };
        let model = match (&invalid, id) {
            (None, Some(id)) => network_model(name, id, &net.spec).ok(),
            _ => None,
        };
        match &invalid {
            None => conds.push(condition(VALID, true, "Valid", "the spec is valid")),
            Some((reason, msg)) => conds.push(condition(VALID, false, reason, msg.clone())),
        }
        let used = match model {
            Some(m) => {
                conds.push(condition(
                    READY,
                    true,
                    "Programmed",
                    format!("network id {}", m.id.0),
                ));
                Some(m)
            }
            None => match cx.last_good.get(name) {
                Some(m) if cx.ipam.network_id(name) == Some(m.id) => {
                    conds.push(condition(
                        READY,
                        true,
                        "LastGoodSpec",
                        format!(
                            "serving the last valid spec (id {}) until the errors are fixed",
                            m.id.0
                        ),
                    ));
                    Some(m.clone())
                }
                _ => {
                    let msg = if invalid.is_some() {
                        "not programmed: fix the errors in the Valid condition"
                    } else {
                        "not programmed: no network id yet (IPAM state not writable?)"
                    };
                    conds.push(condition(READY, false, "NotProgrammed", msg));
                    None
                }
            },
        };
        if let Some(m) = &used {
            match cx.exhausted.get(name) {
                Some(msg) => conds.push(condition(
                    ADDRESSES_AVAILABLE,
                    false,
                    "Exhausted",
                    msg.clone(),
                )),
                None if m.kind == NetworkType::External => conds.push(condition(
                    ADDRESSES_AVAILABLE,
                    false,
                    "NoIpam",
                    "external networks hand out no addresses",
                )),
                None => conds.push(condition(
                    ADDRESSES_AVAILABLE,
                    true,
                    "Available",
                    format!("no ADD on node {} has run out of addresses", cx.node),
                )),
            }
            world.networks.insert(name.clone(), m.clone());
        }
        reports.push(ObjectReport {
            kind: "Network",
            name: name.clone(),
            conditions: conds,
        });
    }

    // ---- routing policies ----
    let kind_of = |n: &str| world.networks.get(n).map(|m| m.kind);
    let mut routing = Vec::new();
    for (name, rp) in &objects.routing_policies {
        let mut conds = Vec::new();
        let accepted = match validate_routing_policy(name, &rp.spec) {
            Err(e) => Err(("Invalid", e.messages().join("; "))),
            Ok(()) => check_routing_refs(name, &rp.spec, &world.networks),
        };
        match accepted {
            Err((reason, msg)) => {
                conds.push(condition(ACCEPTED, false, reason, msg));
                conds.push(condition(
                    SUPPORTED,
                    false,
                    "NotAccepted",
                    "not evaluated: the policy is not accepted",
                ));
            }
            Ok(()) => {
                conds.push(condition(ACCEPTED, true, "Accepted", "the policy is valid"));
                match routing_support(name, &rp.spec, kind_of) {
                    Err(e) => conds.push(condition(
                        SUPPORTED,
                        false,
                        NotSupported::REASON,
                        format!("{e}; nothing is compiled for this policy"),
                    )),
                    Ok(()) => match crate::api::validate::routing_model(name, &rp.spec) {
                        Ok(m) => {
                            conds.push(condition(SUPPORTED, true, "Supported", "compiled"));
                            routing.push(m);
                        }
                        Err(e) => conds.push(condition(
                            SUPPORTED,
                            false,
                            "Invalid",
                            e.messages().join("; "),
                        )),
                    },
                }
            }
        }
        reports.push(ObjectReport {
            kind: "NetworkRoutingPolicy",
            name: name.clone(),
            conditions: conds,
        });
    }
    routing.sort_by(|a: &RoutingModel, b| (a.priority, &a.name).cmp(&(b.priority, &b.name)));
    world.routing = routing;

    // ---- nodes ----
    for (name, n) in &objects.nodes {
        let conds = match cx.ipam.node(name) {
            Some(e) => {
                let locator = n.locator.unwrap_or(e.locator);
                world.nodes.insert(
                    name.clone(),
                    NodeModel {
                        name: name.clone(),
                        id: e.id,
                        locator,
                        underlay: n.underlay,
                    },
                );
                vec![condition(
                    READY,
                    true,
                    "Registered",
                    format!(
                        "node id {}, locator {locator}, underlay {}",
                        e.id.0, n.underlay
                    ),
                )]
            }
            None => vec![condition(
                READY,
                false,
                "NotRegistered",
                "no node id yet (IPAM state not writable?)",
            )],
        };
        reports.push(ObjectReport {
            kind: "Node",
            name: name.clone(),
            conditions: conds,
        });
    }

    // ---- allocations and endpoints ----
    for ((network, node), blocks) in cx.ipam.allocations() {
        if world.networks.contains_key(&network) && world.nodes.contains_key(&node) {
            world.allocations.insert((network, node), blocks);
        }
    }
    for l in cx.ipam.leases() {
        if !world.networks.contains_key(&l.network) || !world.nodes.contains_key(&l.node) {
            continue;
        }
        if l.node == cx.node && !cx.attached.contains(&l.key) {
            continue;
        }
        world.endpoints.insert(
            l.key.clone(),
            EndpointModel {
                namespace: l.pod.namespace.clone(),
                pod: l.pod.name.clone(),
                network: l.network.clone(),
                node: l.node.clone(),
                addresses: l.addresses.iter().map(|a| a.address).collect(),
                mac: l.mac,
                port: l.port,
                host_iface: l.host_iface,
                endpoint_id: l.endpoint_id,
            },
        );
    }
    Built { world, reports }
}

/// Cross-object checks of a valid routing policy: its networks exist (and are valid) and its
/// prefixes lie inside the destination's subnets.
fn check_routing_refs(
    name: &str,
    spec: &crate::api::NetworkRoutingPolicySpec,
    networks: &BTreeMap<String, NetworkModel>,
) -> Result<(), (&'static str, String)> {
    let mut missing = Vec::new();
    for (i, s) in spec.sources.iter().enumerate() {
        if !networks.contains_key(s) {
            missing.push(format!("spec.sources[{i}] {s:?}"));
        }
    }
    let dest = &spec.destination.network;
    let Some(d) = networks.get(dest) else {
        missing.push(format!("spec.destination.network {dest:?}"));
        return Err(unknown(name, &missing));
    };
    if !missing.is_empty() {
        return Err(unknown(name, &missing));
    }
    let mut outside = Vec::new();
    for (i, p) in spec.destination.prefixes.iter().enumerate() {
        let Ok(p) = p.parse::<IpNet>() else { continue };
        let inside = match p {
            IpNet::V4(p4) => {
                d.v4.is_some_and(|(s, _)| s.contains(&p4))
                    || d.external.iter().any(|e| e.contains(&p))
            }
            IpNet::V6(p6) => {
                d.v6.is_some_and(|(s, _)| s.contains(&p6))
                    || d.external.iter().any(|e| e.contains(&p))
            }
        };
        if !inside {
            outside.push(format!("spec.destination.prefixes[{i}] {p}"));
        }
    }
    if outside.is_empty() {
        Ok(())
    } else {
        Err((
            "PrefixOutsideDestination",
            format!(
                "NetworkRoutingPolicy {name}: {} not inside Network {dest}'s subnets; narrow \
                 them to the destination's addresses",
                outside.join(", ")
            ),
        ))
    }
}

fn unknown(name: &str, missing: &[String]) -> (&'static str, String) {
    (
        "UnknownNetwork",
        format!(
            "NetworkRoutingPolicy {name}: {} name no valid Network; create the network or fix \
             the name",
            missing.join(", ")
        ),
    )
}

/// Validates the binding policies, gives the valid ones to `policies` (compiling what
/// changed) and returns every policy's conditions: `CELValid` and `Valid`. A policy that fails
/// [`validate_binding_policy`] is not given to binding at all (its `CELValid` is `Unknown`).
pub fn update_binding(objects: &Objects, policies: &mut BindingPolicies) -> Vec<ObjectReport> {
    let mut valid: Vec<NetworkBindingPolicy> = Vec::new();
    let mut rejected: BTreeMap<String, String> = BTreeMap::new();
    for (name, p) in &objects.binding_policies {
        match validate_binding_policy(name, &p.spec) {
            Ok(()) => valid.push(p.clone()),
            Err(e) => {
                rejected.insert(name.clone(), e.messages().join("; "));
            }
        }
    }
    policies.update(&valid);
    let mut out = Vec::new();
    for name in objects.binding_policies.keys() {
        let conditions = match rejected.get(name) {
            Some(msg) => vec![
                Condition {
                    status: "Unknown".into(),
                    ..condition(
                        crate::bind::CEL_VALID,
                        false,
                        "NotCompiled",
                        "not compiled: the policy has validation errors (see Valid)",
                    )
                },
                condition(
                    crate::bind::VALID,
                    false,
                    "Invalid",
                    format!("ignored by binding: {msg}"),
                ),
            ],
            None => policies
                .status(name)
                .map(|s| s.conditions)
                .unwrap_or_default(),
        };
        out.push(ObjectReport {
            kind: "NetworkBindingPolicy",
            name: name.clone(),
            conditions,
        });
    }
    out
}

/// Every difference between `old` and `new` as compiler changes.
pub fn world_changes(old: &World, new: &World) -> Vec<Change> {
    let mut out = Vec::new();
    for n in keys_differing(&old.networks, &new.networks) {
        out.push(Change::Network(n));
    }
    for n in keys_differing(&old.nodes, &new.nodes) {
        out.push(Change::Node(n));
    }
    for (network, node) in keys_differing(&old.allocations, &new.allocations) {
        out.push(Change::Allocation { network, node });
    }
    for k in keys_differing(&old.endpoints, &new.endpoints) {
        out.push(Change::Endpoint(k));
    }
    if old.routing != new.routing {
        out.push(Change::Routing);
    }
    out
}

fn keys_differing<K: Ord + Clone, V: PartialEq>(a: &BTreeMap<K, V>, b: &BTreeMap<K, V>) -> Vec<K> {
    let mut out: Vec<K> = a
        .iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect();
    out.extend(b.keys().filter(|k| !a.contains_key(*k)).cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::{AllocateRequest, IpamConfig, PodRef};
    use crate::source::standalone::StandaloneSource;
    use crate::source::Source;

    const NETWORKS: &str = r#"
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata: {name: backend}
spec:
  type: l3
  ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}
---
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata: {name: frontend}
spec:
  type: l3
  ipv4Subnet: {prefix: 10.41.0.0/16, hostLocalPrefixLength: 24}
---
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata: {name: flat}
spec:
  type: l2
  ipv4Subnet: {prefix: 10.50.0.0/24}
---
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata: {name: broken}
spec:
  type: l3
  ipv4Subnet: {prefix: 10.60.0.0/33, hostLocalPrefixLength: 24}
---
apiVersion: v1
kind: Node
metadata:
  name: node-a
  annotations: {lace-cni.io/underlay: "fd00:100::a"}
"#;

    const ROUTING: &str = r#"
apiVersion: lace-cni.io/v1alpha1
kind: NetworkRoutingPolicy
metadata: {name: fe-be}
spec:
  sources: [frontend]
  destination: {network: backend}
  direction: bidirectional
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkRoutingPolicy
metadata: {name: to-flat}
spec:
  sources: [frontend]
  destination: {network: flat}
  direction: bidirectional
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkRoutingPolicy
metadata: {name: to-nowhere}
spec:
  sources: [frontend]
  destination: {network: nowhere}
  direction: bidirectional
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkRoutingPolicy
metadata: {name: outside}
spec:
  sources: [frontend]
  destination: {network: backend, prefixes: [10.99.0.0/24]}
  direction: bidirectional
"#;

    fn objects(docs: &[&str]) -> Objects {
        let dir = tempfile::tempdir().unwrap();
        for (i, d) in docs.iter().enumerate() {
            std::fs::write(dir.path().join(format!("{i}.yaml")), d).unwrap();
        }
        let mut s = StandaloneSource::polling(dir.path()).unwrap();
        s.load().unwrap().objects
    }

    fn ipam_for(objects: &Objects) -> (Ipam, BTreeMap<String, String>) {
        let mut ipam = Ipam::new(IpamConfig::default()).unwrap();
        let a = ipam_actions(objects, &ipam, &BTreeMap::new());
        let mut errors = BTreeMap::new();
        for (n, d) in &a.ensure_networks {
            if let Err(e) = ipam.ensure_network(n, d) {
                errors.insert(n.clone(), e.to_string());
            }
        }
        for n in &a.ensure_nodes {
            ipam.ensure_node(n).unwrap();
        }
        (ipam, errors)
    }

    fn cond<'a>(b: &'a Built, kind: &str, name: &str, ty: &str) -> &'a Condition {
        b.reports
            .iter()
            .find(|r| r.kind == kind && r.name == name)
            .unwrap_or_else(|| panic!("no report for {kind} {name}"))
            .conditions
            .iter()
            .find(|c| c.type_ == ty)
            .unwrap_or_else(|| panic!("{kind} {name}: no {ty}"))
    }

    fn build(objects: &Objects, ipam: &Ipam, errors: &BTreeMap<String, String>) -> Built {
        let none = BTreeSet::new();
        let empty = BTreeMap::new();
        let no_models = BTreeMap::new();
        build_world(
            objects,
            Context {
                node: "node-a",
                ipam,
                attached: &none,
                ipam_errors: errors,
                exhausted: &empty,
                last_good: &no_models,
            },
        )
    }

    #[test]
    fn invalid_objects_are_reported_and_left_out() {
        let o = objects(&[NETWORKS, ROUTING]);
        let (ipam, errors) = ipam_for(&o);
        let b = build(&o, &ipam, &errors);
        assert_eq!(
            b.world.networks.keys().collect::<Vec<_>>(),
            ["backend", "flat", "frontend"]
        );
        let v = cond(&b, "Network", "broken", VALID);
        assert_eq!((v.status.as_str(), v.reason.as_str()), ("False", "Invalid"));
        assert!(
            v.message.contains("spec.ipv4Subnet.prefix"),
            "{}",
            v.message
        );
        assert_eq!(cond(&b, "Network", "broken", READY).status, "False");
        assert_eq!(cond(&b, "Network", "backend", READY).status, "True");
        let nowhere = cond(&b, "NetworkRoutingPolicy", "to-nowhere", ACCEPTED);
        assert_eq!(
            (nowhere.status.as_str(), nowhere.reason.as_str()),
            ("False", "UnknownNetwork")
        );
        assert!(
            nowhere.message.contains("\"nowhere\""),
            "{}",
            nowhere.message
        );
        let outside = cond(&b, "NetworkRoutingPolicy", "outside", ACCEPTED);
        assert_eq!(outside.reason, "PrefixOutsideDestination");
        assert_eq!(
            b.world.nodes["node-a"].underlay,
            "fd00:100::a".parse::<std::net::Ipv6Addr>().unwrap()
        );
    }

    #[test]
    fn unsupported_routing_policy_is_reported_and_not_compiled() {
        let o = objects(&[NETWORKS, ROUTING]);
        let (ipam, errors) = ipam_for(&o);
        let b = build(&o, &ipam, &errors);
        let s = cond(&b, "NetworkRoutingPolicy", "to-flat", SUPPORTED);
        assert_eq!(
            (s.status.as_str(), s.reason.as_str()),
            ("False", "NotSupported")
        );
        assert!(s.message.contains("l2"), "{}", s.message);
        assert_eq!(
            cond(&b, "NetworkRoutingPolicy", "to-flat", ACCEPTED).status,
            "True"
        );
        assert_eq!(
            cond(&b, "NetworkRoutingPolicy", "fe-be", SUPPORTED).status,
            "True"
        );
        let names: Vec<&str> = b.world.routing.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["fe-be"]);
    }

    #[test]
    fn immutable_change_keeps_the_last_good_network() {
        let o = objects(&[NETWORKS]);
        let (mut ipam, errors) = ipam_for(&o);
        let b = build(&o, &ipam, &errors);
        let last_good = b.world.networks.clone();
        let changed = NETWORKS.replace("10.40.0.0/16", "10.45.0.0/16");
        let o2 = objects(&[&changed]);
        let a = ipam_actions(&o2, &ipam, &BTreeMap::new());
        let mut errors = BTreeMap::new();
        for (n, d) in &a.ensure_networks {
            if let Err(e) = ipam.ensure_network(n, d) {
                errors.insert(n.clone(), e.to_string());
            }
        }
        assert_eq!(errors.keys().collect::<Vec<_>>(), ["backend"], "{errors:?}");
        let none = BTreeSet::new();
        let empty = BTreeMap::new();
        let b2 = build_world(
            &o2,
            Context {
                node: "node-a",
                ipam: &ipam,
                attached: &none,
                ipam_errors: &errors,
                exhausted: &empty,
                last_good: &last_good,
            },
        );
        assert_eq!(b2.world.networks["backend"], last_good["backend"]);
        let v = cond(&b2, "Network", "backend", VALID);
        assert_eq!(
            (v.status.as_str(), v.reason.as_str()),
            ("False", "Immutable")
        );
        assert_eq!(
            cond(&b2, "Network", "backend", READY).reason,
            "LastGoodSpec"
        );
    }

    #[test]
    fn local_endpoints_appear_once_attached_and_one_pod_is_one_change() {
        let o = objects(&[NETWORKS]);
        let (mut ipam, errors) = ipam_for(&o);
        let key = AttachmentKey {
            container_id: "c1".into(),
            ifname: "eth0".into(),
        };
        ipam.allocate(&AllocateRequest {
            key: key.clone(),
            network: "backend".into(),
            node: "node-a".into(),
            pod: PodRef {
                namespace: "ns".into(),
                name: "p".into(),
            },
        })
        .unwrap();
        let before = build(&o, &ipam, &errors);
        assert!(before.world.endpoints.is_empty());
        let attached: BTreeSet<_> = [key.clone()].into();
        let empty = BTreeMap::new();
        let no_models = BTreeMap::new();
        let after = build_world(
            &o,
            Context {
                node: "node-a",
                ipam: &ipam,
                attached: &attached,
                ipam_errors: &errors,
                exhausted: &empty,
                last_good: &no_models,
            },
        );
        assert_eq!(after.world.endpoints[&key].pod, "p");
        assert_eq!(
            world_changes(&before.world, &after.world),
            vec![Change::Endpoint(key)]
        );
        assert!(world_changes(&after.world, &after.world).is_empty());
    }

    #[test]
    fn ipam_actions_remove_what_the_source_dropped() {
        let o = objects(&[NETWORKS]);
        let (ipam, _) = ipam_for(&o);
        let cache: BTreeMap<String, Ensured> = o
            .networks
            .iter()
            .filter_map(|(n, net)| {
                let def = network_def(n, &net.spec)?;
                Some((
                    n.clone(),
                    Ensured {
                        def,
                        id: ipam.network_id(n),
                        error: None,
                    },
                ))
            })
            .collect();
        assert!(ipam_actions(&o, &ipam, &cache).is_empty());
        assert_eq!(
            ipam_actions(&o, &ipam, &BTreeMap::new())
                .ensure_networks
                .len(),
            3
        );
        let a = ipam_actions(&Objects::default(), &ipam, &cache);
        assert_eq!(a.remove_networks, ["backend", "flat", "frontend"]);
        assert_eq!(a.remove_nodes, ["node-a"]);
    }

    #[test]
    fn invalid_binding_policies_are_reported_and_not_used() {
        let o = objects(&[r#"
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata: {name: good}
spec:
  rules:
  - network: backend
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata: {name: no-rules}
spec:
  priority: -5
  rules: []
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata: {name: bad-cel}
spec:
  priority: -7
  rules:
  - celExpression: "object.metadata.name +"
"#]);
        let mut p = BindingPolicies::new(&[]);
        let r = update_binding(&o, &mut p);
        let get = |n: &str, t: &str| {
            r.iter()
                .find(|x| x.name == n)
                .unwrap()
                .conditions
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .clone()
        };
        assert_eq!(get("good", "Valid").status, "True");
        assert_eq!(get("no-rules", "Valid").status, "False");
        assert_eq!(get("bad-cel", "CELValid").status, "False");
        let pod = serde_json::json!({"metadata": {"name": "x", "namespace": "y"}});
        assert_eq!(
            p.bind_pod(&pod, &BTreeMap::new()).binding,
            crate::bind::Binding::Network("backend".into())
        );
    }
}
