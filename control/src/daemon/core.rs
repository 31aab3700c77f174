//! The pure core of the daemon: everything control decides, as plain data and functions — no
//! files, sockets, shared memory, clocks or threads. The event loop ([`super::control`]) feeds it
//! source events, runs its steps once per batch and does the I/O around them:
//!
//! 1. **observe** ([`Core::observe`]): source snapshots and watch events update the objects;
//! 2. **plan** ([`Core::plan`]): every object is validated once per version of its spec (a
//!    cache keyed by name and spec: an unchanged network costs a comparison), binding policies
//!    are compiled, pods are bound at their first observation, services and NetworkPolicies
//!    continuously; the result says what IPAM must learn or forget ([`Core::ipam_actions`]);
//! 3. **allocate** ([`super::allocate::allocate`], pure, run by the store);
//! 4. **world** ([`Core::build`]): the compiler's [`World`] and every object's conditions, from
//!    the plan and the IPAM state;
//! 5. **diff** ([`world_changes`]): the compiler's [`Change`]s between the last world and this one;
//! 6. compile and publish (the loop, with the [`crate::compile::Compiler`]);
//! 7. **report** ([`super::report`]): the status every object shows.
//!
//! Guarantees:
//!
//! - Nothing here fails or panics on bad input; an invalid object is left out of the world and
//!   reported with all its errors (in its conditions and, with its file and document, among
//!   the problems).
//! - A Network that turns invalid (or whose immutable fields change) after it was in the world
//!   keeps its **last good** model, so its pods keep forwarding; its `Valid` condition says
//!   why, `Ready` says it serves the last good spec, and the status shows the spec in force.
//! - A routing policy is compiled only when it validates, its networks exist and are valid, its
//!   prefixes lie inside the destination, and [`routing_support`] accepts it.
//! - A pod is bound once, when control first observes it, with the policies valid then; a
//!   decision that binds nothing ([`Binding::NoMatch`]) is retried when the pod policies change
//!   (there is no binding to keep). The lease made at ADD then carries the network for good.
//!   A pod is its UID: one recreated under the same name is bound afresh, and the leases of
//!   the one it replaced are released ([`Core::ipam_actions`]).

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Pod;

use crate::api::validate::{
    parse_network, routing_model, routing_support, validate_binding_policy, Errors, NotSupported,
    ValidNetwork,
};
use crate::api::{
    Condition, MatchKind, NetworkBindingPolicy, NetworkRoutingPolicySpec, NetworkSpec, NetworkType,
};
use crate::bind::{Binding, BindingPolicies, ContinuousBindings};
use crate::compile::Change;
use crate::diff::changed_keys;
use crate::ipam::{Ipam, IpamError, NetworkDef, PodRef};
use crate::source::{
    Consequence, NamespacedName, ObjectKind, ObjectRef, Objects, Origin, Problem, ProblemKind,
    SourceEvent,
};
use crate::world::{AttachmentKey, EndpointModel, NetworkModel, NodeModel, RoutingModel, World};

use super::allocate::{AllocOutcome, IpamActions};

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

/// Builds a condition (no transition time: the reporter keeps or sets it).
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

/// What IPAM said last time about a network's definition (so that an unchanged network costs
/// no lock and no write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    /// The definition IPAM was given.
    pub def: NetworkDef,
    /// The id IPAM holds for the network after that (None: refused before it had one).
    pub id: Option<lace_shared::types::NetworkId>,
    /// IPAM's refusal, e.g. an immutable field changed.
    pub error: Option<String>,
}

impl From<&ValidNetwork> for NetworkDef {
    fn from(v: &ValidNetwork) -> NetworkDef {
        NetworkDef {
            kind: v.kind,
            v4: v.v4,
            v6: v.v6,
        }
    }
}

/// One object validated: the spec it was validated for and the verdict.
#[derive(Debug, Clone)]
struct Checked<S, T> {
    spec: S,
    verdict: Result<T, Errors>,
}

/// Every Network and NetworkRoutingPolicy validated, cached by spec.
#[derive(Debug, Default)]
pub struct Plan {
    networks: BTreeMap<String, Checked<NetworkSpec, ValidNetwork>>,
    routing: BTreeMap<String, Checked<NetworkRoutingPolicySpec, RoutingModel>>,
    validations: u64,
}

impl Plan {
    /// Validates what changed in `objects` since the last call (see the module docs).
    pub fn update(&mut self, objects: &Objects) {
        self.networks
            .retain(|n, _| objects.networks.contains_key(n));
        for (name, net) in &objects.networks {
            if self.networks.get(name).is_some_and(|c| c.spec == net.spec) {
                continue;
            }
            self.validations += 1;
            self.networks.insert(
                name.clone(),
                Checked {
                    spec: net.spec.clone(),
                    verdict: parse_network(name, &net.spec),
                },
            );
        }
        self.routing
            .retain(|n, _| objects.routing_policies.contains_key(n));
        for (name, rp) in &objects.routing_policies {
            if self.routing.get(name).is_some_and(|c| c.spec == rp.spec) {
                continue;
            }
            self.validations += 1;
            self.routing.insert(
                name.clone(),
                Checked {
                    spec: rp.spec.clone(),
                    verdict: routing_model(name, &rp.spec),
                },
            );
        }
    }

    /// The parsed network `name`, if it is valid.
    pub fn network(&self, name: &str) -> Option<&ValidNetwork> {
        self.networks.get(name)?.verdict.as_ref().ok()
    }

    /// How many object versions were validated since the plan was made (each spec once).
    pub fn validations(&self) -> u64 {
        self.validations
    }
}

/// How a pod is bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodBinding {
    /// The decision.
    pub binding: Binding,
    /// The policy and rule that decided.
    pub decided_by: Option<(String, usize)>,
    /// The node the pod runs on (`spec.nodeName`), if set.
    pub node: Option<String>,
    /// The pod's `metadata.uid` as observed; empty when the object has none (a manifest
    /// without one). A pod recreated under the same name is bound afresh.
    pub uid: String,
    /// Expression evaluations that failed on the pod.
    pub errors: Vec<String>,
    /// The pod policies' versions the decision was made with (a `NoMatch` is retried when
    /// they change).
    fingerprint: Vec<u64>,
}

/// What control knows of a pod a CNI ADD names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodLookup {
    /// Not (yet) among the objects.
    NotObserved,
    /// Observed and bound.
    Bound(PodBinding),
}

/// The inputs of [`Core::build`] that live outside the core.
#[derive(Debug, Clone, Copy)]
pub struct BuildInputs<'a> {
    /// The IPAM state.
    pub ipam: &'a Ipam,
    /// This node's attached leases.
    pub attached: &'a BTreeSet<AttachmentKey>,
}

/// The core's state (see the module docs).
#[derive(Debug)]
pub struct Core {
    node: String,
    /// Whether the source has delivered its first snapshot: until then the objects are not
    /// the cluster's, and nothing may be allocated or forgotten because of them.
    synced: bool,
    objects: Objects,
    origins: BTreeMap<ObjectRef, Origin>,
    source_problems: Vec<Problem>,
    plan: Plan,
    policies: BindingPolicies,
    policy_reports: Vec<ObjectReport>,
    services: ContinuousBindings,
    network_policies: ContinuousBindings,
    pods: BTreeMap<NamespacedName, PodBinding>,
    ensured: BTreeMap<String, Ensured>,
    exhausted: BTreeMap<String, String>,
    world: World,
    reports: Vec<ObjectReport>,
}

impl Core {
    /// An empty core for `node`.
    pub fn new(node: &str) -> Core {
        Core {
            node: node.to_owned(),
            synced: false,
            objects: Objects::default(),
            origins: BTreeMap::new(),
            source_problems: Vec::new(),
            plan: Plan::default(),
            policies: BindingPolicies::new(&[]),
            policy_reports: Vec::new(),
            services: ContinuousBindings::new(MatchKind::Service),
            network_policies: ContinuousBindings::new(MatchKind::NetworkPolicy),
            pods: BTreeMap::new(),
            ensured: BTreeMap::new(),
            exhausted: BTreeMap::new(),
            world: World::default(),
            reports: Vec::new(),
        }
    }

    /// This node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Whether the source has delivered its first snapshot (before that, the loop answers
    /// nothing that depends on the objects, and IPAM is not touched).
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// The objects as observed.
    pub fn objects(&self) -> &Objects {
        &self.objects
    }

    /// The world last built.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The validated objects.
    pub fn plan_state(&self) -> &Plan {
        &self.plan
    }

    /// The compiled binding policies.
    pub fn policies(&self) -> &BindingPolicies {
        &self.policies
    }

    /// Step 1: takes a source event.
    pub fn observe(&mut self, event: SourceEvent) {
        match event {
            SourceEvent::Snapshot(s) => {
                self.synced = true;
                self.objects = s.objects;
                self.origins = s.origins;
                self.source_problems = s.problems;
            }
            SourceEvent::Applied(object) => {
                let r = object.reference();
                self.source_problems
                    .retain(|p| p.object.as_ref() != Some(&r));
                if let Err(e) = self.objects.insert(object) {
                    self.source_problems.push(Problem {
                        origin: None,
                        object: Some(r),
                        kind: ProblemKind::Node(e),
                        consequence: Consequence::Skipped,
                    });
                }
            }
            SourceEvent::Deleted(r) => {
                self.objects.remove(&r);
                self.source_problems
                    .retain(|p| p.object.as_ref() != Some(&r));
                self.origins.remove(&r);
            }
        }
    }

    /// Step 2: validates what changed, compiles the binding policies, binds new pods and
    /// re-evaluates services and NetworkPolicies.
    pub fn plan(&mut self) {
        self.plan.update(&self.objects);
        self.policy_reports = update_binding(&self.objects, &mut self.policies);
        let objects = &self.objects;
        for bindings in [&mut self.services, &mut self.network_policies] {
            let mut seen = BTreeSet::new();
            for (name, ns) in &objects.namespaces {
                let labels = ns.metadata.labels.clone().unwrap_or_default();
                bindings.set_namespace_labels(&self.policies, name, labels);
            }
            bindings.policies_changed(&self.policies);
            let present: Vec<(NamespacedName, serde_json::Value)> = match bindings.kind() {
                MatchKind::Service => objects
                    .services
                    .iter()
                    .map(|(k, s)| (k.clone(), unstructured(s, k)))
                    .collect(),
                _ => objects
                    .network_policies
                    .iter()
                    .map(|(k, p)| (k.clone(), unstructured(p, k)))
                    .collect(),
            };
            for (k, v) in present {
                // The objects have their namespace and name: tracking cannot fail.
                let _ = bindings.apply(&self.policies, v);
                seen.insert((k.namespace, k.name));
            }
            let gone: Vec<(String, String)> = bindings
                .iter()
                .map(|(ns, n, _)| (ns.to_owned(), n.to_owned()))
                .filter(|k| !seen.contains(k))
                .collect();
            for (ns, n) in gone {
                bindings.remove(&ns, &n);
            }
        }
        let fingerprint = self.policies.fingerprint(MatchKind::Pod).to_vec();
        self.pods.retain(|k, _| objects.pods.contains_key(k));
        for (key, pod) in &objects.pods {
            let uid = pod_uid(pod);
            let decided = self.pods.get(key).is_some_and(|b| {
                b.uid == uid && (b.binding != Binding::NoMatch || b.fingerprint == fingerprint)
            });
            if decided {
                continue;
            }
            let labels = objects
                .namespaces
                .get(&key.namespace)
                .and_then(|n| n.metadata.labels.clone())
                .unwrap_or_default();
            let d = self.policies.bind_pod(&unstructured(pod, key), &labels);
            self.pods.insert(
                key.clone(),
                PodBinding {
                    binding: d.binding,
                    decided_by: d.decided_by.map(|(p, r)| (p.to_string(), r)),
                    node: pod_node(pod),
                    uid: uid.to_owned(),
                    errors: d.errors.iter().map(ToString::to_string).collect(),
                    fingerprint: fingerprint.clone(),
                },
            );
        }
    }

    /// What control knows of `pod` (for a CNI ADD).
    pub fn pod(&self, pod: &PodRef) -> PodLookup {
        match self
            .pods
            .get(&NamespacedName::new(&pod.namespace, &pod.name))
        {
            Some(b) => PodLookup::Bound(b.clone()),
            None => PodLookup::NotObserved,
        }
    }

    /// Whether Network `name` can take pods: valid now, or serving its last good spec.
    pub fn network_usable(&self, name: &str) -> bool {
        self.plan.network(name).is_some() || self.world.networks.contains_key(name)
    }

    /// Whether node `name` is a lace node of the objects.
    pub fn node_known(&self, name: &str) -> bool {
        self.objects.nodes.contains_key(name)
    }

    /// What IPAM lacks or holds in excess, compared with the valid objects: a valid network is
    /// (re)ensured unless IPAM already answered for this very definition and still holds the
    /// same id. A network whose immutable fields changed is listed too: IPAM refuses it
    /// ([`IpamError::Immutable`]) and the refusal becomes its `Valid=False`.
    pub fn ipam_actions(&self, ipam: &Ipam) -> IpamActions {
        let mut a = IpamActions::default();
        if !self.synced {
            return a;
        }
        for name in self.objects.networks.keys() {
            let Some(valid) = self.plan.network(name) else {
                continue;
            };
            let def = NetworkDef::from(valid);
            let fresh = self
                .ensured
                .get(name)
                .is_some_and(|e| e.def == def && e.id == ipam.network_id(name) && e.id.is_some());
            if !fresh {
                a.ensure_networks.push((name.clone(), def));
            }
        }
        for name in ipam.network_ids().keys() {
            if !self.objects.networks.contains_key(name) {
                a.remove_networks.push(name.clone());
            }
        }
        let nodes = ipam.nodes();
        for name in self.objects.nodes.keys() {
            if !nodes.contains_key(name) {
                a.ensure_nodes.push(name.clone());
            }
        }
        for name in nodes.keys() {
            if !self.objects.nodes.contains_key(name) {
                a.remove_nodes.push(name.clone());
            }
        }
        // GC by listing: the source's pods are the truth (in Kubernetes mode, every pod of
        // this node), so a lease of a pod that is gone is released even if no DEL came — also
        // when a new pod of the same name (another UID) took its place.
        for l in ipam.leases().filter(|l| l.node == self.node) {
            let pod = NamespacedName::new(&l.pod.namespace, &l.pod.name);
            let gone = self.objects.pods.get(&pod).is_none_or(|p| {
                let uid = pod_uid(p);
                !uid.is_empty() && !l.pod.uid.is_empty() && uid != l.pod.uid
            });
            if gone {
                a.release_pods_gone.push(l.key.clone());
            }
        }
        a
    }

    /// Takes what the allocate step did about networks into the core's caches.
    pub fn absorb(&mut self, outcome: &AllocOutcome) {
        for e in &outcome.ensured {
            self.ensured.insert(
                e.name.clone(),
                Ensured {
                    def: e.def.clone(),
                    id: e.id,
                    error: e.result.as_ref().err().map(ToString::to_string),
                },
            );
        }
        let networks = &self.objects.networks;
        self.ensured.retain(|n, _| networks.contains_key(n));
    }

    /// Records the outcome of an ADD on `network`: addresses found, or exhausted (reported as
    /// the network's `AddressesAvailable=False`).
    pub fn note_allocation(&mut self, network: &str, result: Result<(), &IpamError>) {
        match result {
            Ok(()) => {
                self.exhausted.remove(network);
            }
            Err(
                e @ (IpamError::BlockExhausted { .. }
                | IpamError::BlocksExhausted { .. }
                | IpamError::SubnetExhausted { .. }),
            ) => {
                self.exhausted.insert(network.to_owned(), e.to_string());
            }
            Err(_) => {}
        }
    }

    /// Steps 4 and 5: builds the world and every object's conditions, keeps them, and returns
    /// the compiler's changes from the previous world.
    pub fn build(&mut self, inputs: BuildInputs<'_>) -> Vec<Change> {
        let built = build_world(self, inputs);
        let changes = world_changes(&self.world, &built.world);
        self.world = built.world;
        self.reports = built.reports;
        changes
    }

    /// Networks, routing policies and nodes (as built), then binding policies: each with its
    /// conditions.
    pub fn reports(&self) -> impl Iterator<Item = &ObjectReport> {
        self.reports.iter().chain(self.policy_reports.iter())
    }

    /// The source's problems, then every invalid object's errors with its origin, in one list.
    pub fn problems(&self) -> Vec<Problem> {
        let mut out = self.source_problems.clone();
        let mut invalid = |kind: ObjectKind, name: &str, errors: &Errors, last_good: bool| {
            let r = ObjectRef {
                kind,
                namespace: None,
                name: name.to_owned(),
            };
            out.push(Problem {
                origin: self.origins.get(&r).cloned(),
                object: Some(r),
                kind: ProblemKind::Invalid {
                    errors: errors.messages(),
                },
                consequence: if last_good {
                    Consequence::LastValidInForce
                } else {
                    Consequence::Skipped
                },
            });
        };
        for (name, c) in &self.plan.networks {
            if let Err(e) = &c.verdict {
                invalid(
                    ObjectKind::Network,
                    name,
                    e,
                    self.world.networks.contains_key(name),
                );
            }
        }
        for (name, c) in &self.plan.routing {
            if let Err(e) = &c.verdict {
                invalid(ObjectKind::NetworkRoutingPolicy, name, e, false);
            }
        }
        for (name, p) in &self.objects.binding_policies {
            if let Err(e) = validate_binding_policy(name, &p.spec) {
                invalid(ObjectKind::NetworkBindingPolicy, name, &e, false);
            }
        }
        out
    }

    /// Every pod's binding, by namespace and name.
    pub fn pod_bindings(&self) -> &BTreeMap<NamespacedName, PodBinding> {
        &self.pods
    }

    /// Every service's binding.
    pub fn service_bindings(&self) -> &ContinuousBindings {
        &self.services
    }

    /// Every Kubernetes NetworkPolicy's binding.
    pub fn network_policy_bindings(&self) -> &ContinuousBindings {
        &self.network_policies
    }
}

fn pod_node(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// `metadata.uid`, empty when absent.
fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// An object as binding sees it: unstructured, with its namespace and name set.
fn unstructured<T: serde::Serialize>(object: &T, key: &NamespacedName) -> serde_json::Value {
    let mut v = serde_json::to_value(object).unwrap_or_default();
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        m.insert("namespace".into(), key.namespace.clone().into());
        m.insert("name".into(), key.name.clone().into());
    }
    v
}

/// The world and the conditions of networks, routing policies and nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Built {
    /// The compiler's input.
    pub world: World,
    /// Networks, routing policies and nodes, in that order, each sorted by name.
    pub reports: Vec<ObjectReport>,
}

/// Builds the world from the plan and IPAM (see the module docs for what is left out and why).
fn build_world(core: &Core, cx: BuildInputs<'_>) -> Built {
    let mut world = World::default();
    let mut reports = Vec::new();
    let last_good = &core.world.networks;

    // ---- networks ----
    for name in core.objects.networks.keys() {
        let mut conds = Vec::new();
        let id = cx.ipam.network_id(name);
        let checked = core.plan.networks.get(name);
        let ipam_error = core.ensured.get(name).and_then(|e| e.error.clone());
        let invalid = match checked.map(|c| &c.verdict) {
            Some(Err(e)) => Some(("Invalid", e.messages().join("; "))),
            _ => ipam_error.map(|m| ("Immutable", m)),
        };
        let model = match (&invalid, id, checked.map(|c| &c.verdict)) {
            (None, Some(id), Some(Ok(valid))) => Some(valid.model(name, id)),
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
            None => match last_good.get(name) {
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
            match core.exhausted.get(name) {
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
                    format!("no ADD on node {} has run out of addresses", core.node),
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
    for (name, rp) in &core.objects.routing_policies {
        let mut conds = Vec::new();
        let verdict = core.plan.routing.get(name).map(|c| &c.verdict);
        let accepted = match verdict {
            Some(Err(e)) => Err(("Invalid", e.messages().join("; "))),
            Some(Ok(_)) => check_routing_refs(name, &rp.spec, &world.networks),
            None => Err(("Invalid", "not validated yet".to_owned())),
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
                match (routing_support(name, &rp.spec, kind_of), verdict) {
                    (Err(e), _) => conds.push(condition(
                        SUPPORTED,
                        false,
                        NotSupported::REASON,
                        format!("{e}; nothing is compiled for this policy"),
                    )),
                    (Ok(()), Some(Ok(m))) => {
                        conds.push(condition(SUPPORTED, true, "Supported", "compiled"));
                        routing.push(m.clone());
                    }
                    (Ok(()), _) => {}
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
    for (name, n) in &core.objects.nodes {
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
        if l.node == core.node && !cx.attached.contains(&l.key) {
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
    spec: &NetworkRoutingPolicySpec,
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
    out.extend(
        changed_keys(&old.networks, &new.networks)
            .into_iter()
            .map(Change::Network),
    );
    out.extend(
        changed_keys(&old.nodes, &new.nodes)
            .into_iter()
            .map(Change::Node),
    );
    out.extend(
        changed_keys(&old.allocations, &new.allocations)
            .into_iter()
            .map(|(network, node)| Change::Allocation { network, node }),
    );
    out.extend(
        changed_keys(&old.endpoints, &new.endpoints)
            .into_iter()
            .map(Change::Endpoint),
    );
    if old.routing != new.routing {
        out.push(Change::Routing);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::allocate::{allocate, IpamAnswer, IpamRequest};
    use crate::daemon::report::{report, TablesReport};
    use crate::daemon::status::StatusFile;
    use crate::ipam::{AllocateRequest, IpamConfig};
    use crate::source::standalone::objects_from_yaml;
    use crate::source::Snapshot;

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
  ipv4Subnet: {prefix: 10.60.0.1/16, hostLocalPrefixLength: 24}
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
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkRoutingPolicy
metadata: {name: to-flat}
spec:
  sources: [frontend]
  destination: {network: flat}
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkRoutingPolicy
metadata: {name: to-nowhere}
spec:
  sources: [frontend]
  destination: {network: nowhere}
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkRoutingPolicy
metadata: {name: outside}
spec:
  sources: [frontend]
  destination: {network: backend, prefixes: [10.99.0.0/24]}
"#;

    const BINDING: &str = r#"
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata: {name: tiers}
spec:
  rules:
  - network: backend
    selector: {matchLabels: {tier: backend}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {tier: backend}}
spec: {nodeName: node-a, containers: [{name: app, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: other, namespace: shop}
spec: {nodeName: node-b, containers: [{name: app, image: x}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop, labels: {tier: backend}}
spec: {selector: {tier: backend}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: only-web, namespace: shop, labels: {tier: backend}}
spec: {podSelector: {}}
"#;

    fn snapshot(docs: &[&str]) -> SourceEvent {
        let (objects, problems) = objects_from_yaml(&docs.join("---\n"));
        SourceEvent::Snapshot(Snapshot {
            objects,
            problems,
            origins: BTreeMap::new(),
        })
    }

    /// observe → plan → allocate (in memory) → build, as one batch of the loop.
    fn batch(
        core: &mut Core,
        ipam: &mut Ipam,
        attached: &BTreeSet<AttachmentKey>,
        requests: &[IpamRequest],
    ) -> (Vec<Change>, Vec<IpamAnswer>) {
        core.plan();
        let actions = core.ipam_actions(ipam);
        let out = allocate(ipam, &actions, requests);
        core.absorb(&out);
        let changes = core.build(BuildInputs { ipam, attached });
        (changes, out.answers)
    }

    fn cond<'a>(core: &'a Core, kind: &str, name: &str, ty: &str) -> &'a Condition {
        core.reports()
            .find(|r| r.kind == kind && r.name == name)
            .unwrap_or_else(|| panic!("no report for {kind} {name}"))
            .conditions
            .iter()
            .find(|c| c.type_ == ty)
            .unwrap_or_else(|| panic!("{kind} {name}: no {ty}"))
    }

    fn new_ipam() -> Ipam {
        Ipam::new(IpamConfig::default()).unwrap()
    }

    fn key(c: &str) -> AttachmentKey {
        AttachmentKey {
            container_id: c.into(),
            ifname: "eth0".into(),
        }
    }

    fn alloc(c: &str, network: &str) -> IpamRequest {
        IpamRequest::Allocate(AllocateRequest {
            key: key(c),
            network: network.into(),
            node: "node-a".into(),
            pod: PodRef {
                namespace: "shop".into(),
                name: c.into(),
                uid: String::new(),
            },
        })
    }

    #[test]
    fn each_spec_is_validated_once() {
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        core.observe(snapshot(&[NETWORKS, ROUTING]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        let first = core.plan_state().validations();
        assert_eq!(first, 8, "4 networks and 4 routing policies");
        // The same objects again (a reload, a CNI request's batch): nothing validated again.
        core.observe(snapshot(&[NETWORKS, ROUTING]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        assert_eq!(core.plan_state().validations(), first);
        // One network changed: that one.
        let changed = NETWORKS.replace("10.50.0.0/24", "10.51.0.0/24");
        core.observe(snapshot(&[&changed, ROUTING]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        assert_eq!(core.plan_state().validations(), first + 1);
    }

    #[test]
    fn invalid_objects_are_reported_in_one_place_and_left_out() {
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        core.observe(snapshot(&[NETWORKS, ROUTING]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        assert_eq!(
            core.world().networks.keys().collect::<Vec<_>>(),
            ["backend", "flat", "frontend"]
        );
        let v = cond(&core, "Network", "broken", VALID);
        assert_eq!((v.status.as_str(), v.reason.as_str()), ("False", "Invalid"));
        assert!(
            v.message.contains("spec.ipv4Subnet.prefix"),
            "{}",
            v.message
        );
        assert_eq!(cond(&core, "Network", "broken", READY).status, "False");
        assert_eq!(cond(&core, "Network", "backend", READY).status, "True");
        // The value error is among the problems too, where the decode errors are.
        let problems: Vec<String> = core.problems().iter().map(ToString::to_string).collect();
        assert!(
            problems.iter().any(|p| p.starts_with("Network broken: ")
                && p.contains("spec.ipv4Subnet.prefix \"10.60.0.1/16\" has host bits set")),
            "{problems:?}"
        );
        let nowhere = cond(&core, "NetworkRoutingPolicy", "to-nowhere", ACCEPTED);
        assert_eq!(
            (nowhere.status.as_str(), nowhere.reason.as_str()),
            ("False", "UnknownNetwork")
        );
        let outside = cond(&core, "NetworkRoutingPolicy", "outside", ACCEPTED);
        assert_eq!(outside.reason, "PrefixOutsideDestination");
        let s = cond(&core, "NetworkRoutingPolicy", "to-flat", SUPPORTED);
        assert_eq!(
            (s.status.as_str(), s.reason.as_str()),
            ("False", "NotSupported")
        );
        let names: Vec<&str> = core
            .world()
            .routing
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(names, ["fe-be"]);
    }

    /// A refused immutable update keeps the old spec in force, and the status shows that spec
    /// (not the refused one), with the refusal in the user's words.
    #[test]
    fn a_refused_immutable_change_shows_the_spec_in_force() {
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        core.observe(snapshot(&[NETWORKS]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        let before = core.world().networks["backend"].clone();
        core.observe(snapshot(&[&NETWORKS
            .replace(
                "type: l3\n  ipv4Subnet: {prefix: 10.40.0.0/16",
                "type: l2\n  ipv4Subnet: {prefix: 10.45.0.0/16",
            )
            .replace("10.45.0.0/16, hostLocalPrefixLength: 24", "10.45.0.0/16")]));
        let (changes, _) = batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        assert!(changes.is_empty(), "{changes:?}");
        assert_eq!(core.world().networks["backend"], before);
        let v = cond(&core, "Network", "backend", VALID);
        assert_eq!(
            (v.status.as_str(), v.reason.as_str()),
            ("False", "Immutable")
        );
        assert_eq!(
            v.message,
            "Network backend: spec.type is immutable (was l3, now l2); restore it, or delete \
             and recreate the network"
        );
        assert_eq!(
            cond(&core, "Network", "backend", READY).reason,
            "LastGoodSpec"
        );
        let tables = TablesReport {
            generation: 1,
            error: None,
            notes: &[],
        };
        let s = report(
            &core,
            &ipam,
            &BTreeSet::new(),
            tables,
            "t0",
            &StatusFile::default(),
        );
        let entry = s.networks.iter().find(|n| n.name == "backend").unwrap();
        assert_eq!(
            (entry.type_.as_str(), entry.subnets.clone()),
            ("l3", vec!["10.40.0.0/16".to_owned()])
        );
    }

    #[test]
    fn local_endpoints_appear_once_attached_and_one_pod_is_one_change() {
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        core.observe(snapshot(&[NETWORKS, POD_C1]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        let (_, answers) = batch(
            &mut core,
            &mut ipam,
            &BTreeSet::new(),
            &[alloc("c1", "backend")],
        );
        assert!(matches!(&answers[0], IpamAnswer::Lease(Ok(Some(_)))));
        assert!(core.world().endpoints.is_empty(), "allocated, not attached");
        let attached: BTreeSet<_> = [key("c1")].into();
        let (changes, _) = batch(&mut core, &mut ipam, &attached, &[]);
        assert_eq!(changes, vec![Change::Endpoint(key("c1"))]);
        assert_eq!(core.world().endpoints[&key("c1")].network, "backend");
        let (changes, _) = batch(&mut core, &mut ipam, &attached, &[]);
        assert!(changes.is_empty());
        // A renewed endpoint id is a change of that endpoint only.
        let (changes, _) = batch(
            &mut core,
            &mut ipam,
            &attached,
            &[IpamRequest::Renew(key("c1"))],
        );
        assert_eq!(changes, vec![Change::Endpoint(key("c1"))]);
    }

    /// The pod `alloc("c1", …)` allocates for.
    const POD_C1: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: c1, namespace: shop}
spec: {nodeName: node-a, containers: [{name: app, image: x}]}
"#;

    #[test]
    fn a_lease_whose_pod_is_gone_is_released_without_a_del() {
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        core.observe(snapshot(&[NETWORKS, POD_C1]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        batch(
            &mut core,
            &mut ipam,
            &BTreeSet::new(),
            &[alloc("c1", "backend")],
        );
        assert!(core.ipam_actions(&ipam).release_pods_gone.is_empty());
        // The pod is deleted (maybe while control was down): the next snapshot lacks it.
        core.observe(snapshot(&[NETWORKS]));
        core.plan();
        assert_eq!(core.ipam_actions(&ipam).release_pods_gone, [key("c1")]);
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        assert!(ipam.lease(&key("c1")).is_none());
    }

    /// A pod is its UID: one recreated under the same name (another `metadata.uid`, other
    /// labels) is bound afresh, and the lease of the pod it replaced is released without a DEL;
    /// a lease or object without a UID is matched by name as before.
    #[test]
    fn a_pod_recreated_under_the_same_name_is_another_pod() {
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        let web = |uid: &str, labels: &str| {
            BINDING.replace(
                "metadata: {name: web, namespace: shop, labels: {tier: backend}}",
                &format!("metadata: {{name: web, namespace: shop, uid: {uid}, labels: {labels}}}"),
            )
        };
        core.observe(snapshot(&[NETWORKS, &web("uid-1", "{tier: backend}")]));
        let request = IpamRequest::Allocate(AllocateRequest {
            key: key("w1"),
            network: "backend".into(),
            node: "node-a".into(),
            pod: PodRef {
                namespace: "shop".into(),
                name: "web".into(),
                uid: "uid-1".into(),
            },
        });
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[request]);
        assert_eq!(ipam.lease(&key("w1")).unwrap().pod.uid, "uid-1");
        let lookup = |core: &Core| match core.pod(&PodRef {
            namespace: "shop".into(),
            name: "web".into(),
            uid: String::new(),
        }) {
            PodLookup::Bound(b) => (b.uid, b.binding),
            PodLookup::NotObserved => panic!("web not observed"),
        };
        assert_eq!(
            lookup(&core),
            ("uid-1".into(), Binding::Network("backend".into()))
        );
        // The same UID again (a resync): nothing to release.
        core.observe(snapshot(&[NETWORKS, &web("uid-1", "{tier: backend}")]));
        core.plan();
        assert!(core.ipam_actions(&ipam).release_pods_gone.is_empty());
        // Deleted and recreated without the label, before control saw the deletion.
        core.observe(snapshot(&[NETWORKS, &web("uid-2", "{}")]));
        core.plan();
        assert_eq!(lookup(&core), ("uid-2".into(), Binding::NoMatch));
        assert_eq!(core.ipam_actions(&ipam).release_pods_gone, [key("w1")]);
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        assert!(ipam.lease(&key("w1")).is_none());
    }

    #[test]
    fn ipam_forgets_what_the_source_dropped() {
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        core.observe(snapshot(&[NETWORKS]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        assert!(core.ipam_actions(&ipam).is_empty(), "IPAM holds it all");
        core.observe(SourceEvent::Snapshot(Snapshot::default()));
        core.plan();
        let a = core.ipam_actions(&ipam);
        assert_eq!(a.remove_networks, ["backend", "flat", "frontend"]);
        assert_eq!(a.remove_nodes, ["node-a"]);
    }

    #[test]
    fn watch_events_update_the_objects_as_snapshots_do() {
        let (objects, _) = objects_from_yaml(NETWORKS);
        let mut core = Core::new("node-a");
        // The initial list (empty), then one watch event per object.
        core.observe(SourceEvent::Snapshot(Snapshot::default()));
        for n in objects.networks.values() {
            core.observe(SourceEvent::Applied(crate::source::Object::Network(
                Box::new(n.clone()),
            )));
        }
        for n in objects.nodes.values() {
            core.observe(SourceEvent::Applied(crate::source::Object::Node(Box::new(
                n.node.clone(),
            ))));
        }
        let mut ipam = new_ipam();
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        assert_eq!(core.world().networks.len(), 3);
        core.observe(SourceEvent::Deleted(ObjectRef {
            kind: ObjectKind::Network,
            namespace: None,
            name: "flat".into(),
        }));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        assert!(!core.world().networks.contains_key("flat"));
        assert_eq!(ipam.network_id("flat"), None);
    }

    /// Pods are bound when first observed; every pod, service and NetworkPolicy shows its
    /// binding before any ADD.
    #[test]
    fn every_resource_shows_its_binding() {
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        core.observe(snapshot(&[NETWORKS, BINDING]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        let web = PodRef {
            namespace: "shop".into(),
            name: "web".into(),
            uid: String::new(),
        };
        let PodLookup::Bound(b) = core.pod(&web) else {
            panic!("web not bound")
        };
        assert_eq!(b.binding, Binding::Network("backend".into()));
        assert_eq!(b.decided_by, Some(("tiers".into(), 0)));
        let tables = TablesReport {
            generation: 1,
            error: None,
            notes: &[],
        };
        let s = report(
            &core,
            &ipam,
            &BTreeSet::new(),
            tables,
            "t0",
            &StatusFile::default(),
        );
        let pods: Vec<(String, Option<String>, String)> = s
            .pods
            .iter()
            .map(|p| (p.name.clone(), p.node.clone(), p.binding.clone()))
            .collect();
        assert_eq!(
            pods,
            [
                (
                    "other".to_owned(),
                    Some("node-b".to_owned()),
                    "(unbound)".to_owned()
                ),
                (
                    "web".to_owned(),
                    Some("node-a".to_owned()),
                    "backend".to_owned()
                ),
            ]
        );
        assert_eq!(s.services[0].binding, "backend");
        assert_eq!(
            (
                s.network_policies[0].name.as_str(),
                s.network_policies[0].binding.as_str()
            ),
            ("only-web", "backend")
        );
        // A pod that no rule binds is decided again when the pod policies change; a bound pod
        // keeps its binding.
        let more = BINDING.replace(
            "  - network: backend\n    selector: {matchLabels: {tier: backend}}",
            "  - network: frontend\n    selector: {matchLabels: {tier: backend}}\n  - network: flat",
        );
        core.observe(snapshot(&[NETWORKS, &more]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        let other = PodRef {
            namespace: "shop".into(),
            name: "other".into(),
            uid: String::new(),
        };
        assert!(
            matches!(core.pod(&other), PodLookup::Bound(b) if b.binding == Binding::Network("flat".into()))
        );
        assert!(
            matches!(core.pod(&web), PodLookup::Bound(b) if b.binding == Binding::Network("backend".into()))
        );
        assert!(matches!(
            core.pod(&PodRef {
                namespace: "shop".into(),
                name: "new".into(),
                uid: String::new(),
            }),
            PodLookup::NotObserved
        ));
    }

    #[test]
    fn invalid_binding_policies_are_reported_and_not_used() {
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        core.observe(snapshot(&[r#"
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
metadata: {name: typed-wrong}
spec:
  priority: -7
  rules:
  - celExpression: "object.metadata.name + '-net'"
"#]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        let get = |n: &str, t: &str| cond(&core, "NetworkBindingPolicy", n, t).clone();
        assert_eq!(get("good", "Valid").status, "True");
        assert_eq!(get("no-rules", "Valid").status, "False");
        let cel = get("typed-wrong", "CELValid");
        assert_eq!(cel.status, "False");
        assert!(
            cel.message.contains("evaluates to a string"),
            "{}",
            cel.message
        );
        assert_eq!(core.policies().active(), ["good"]);
    }
}
