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
//! - A Service is programmed when its spec has ClusterIPs ([`crate::service::parse`]), it is
//!   bound to an l3 network, and its ClusterIPs are its own (inside the service CIDR when one
//!   is configured, not another Service's, not inside a network's subnet); an invalid or
//!   refused spec leaves the one it was last programmed with in force, and a newcomer never
//!   takes a programmed Service's ClusterIP. Its backends come from its EndpointSlices, or —
//!   standalone, without slices — from its selector and lace's endpoints
//!   ([`ServiceEndpoints`]). Every Service shows why it is or is not programmed, and which
//!   pods a named target port skipped ([`Core::service_conditions`]); every Kubernetes
//!   NetworkPolicy whether it is valid ([`Core::network_policy_conditions`]).
//! - A pod is bound once, when control first observes it, with the policies valid then; a
//!   decision that binds nothing ([`Binding::NoMatch`]) is retried when the pod policies change
//!   (there is no binding to keep). The lease made at ADD then carries the network for good.
//!   A pod is its UID: one recreated under the same name is bound afresh, and the leases of
//!   the one it replaced are released ([`Core::ipam_actions`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicySpec;

use crate::api::validate::{
    network_policy_model, parse_network, routing_model, routing_support, validate_binding_policy,
    Errors, NotSupported, ValidNetwork,
};
use crate::api::{
    Condition, MatchKind, NetworkBindingPolicy, NetworkRoutingPolicySpec, NetworkSpec, NetworkType,
};
use crate::bind::{Binding, BindingPolicies, ContinuousBindings};
use crate::compile::Change;
use crate::diff::changed_keys;
use crate::ipam::{Ipam, IpamError, NetworkDef, PodRef};
use crate::netpol::{BoundPolicy, ContainerPort, PolicyModel};
use crate::service::{self, Parsed, ServiceCidr, ServiceError, ServiceSpec, SERVICE_NAME_LABEL};
use crate::source::{
    Consequence, NamespacedName, ObjectKind, ObjectRef, Objects, Origin, Problem, ProblemKind,
    SourceEvent,
};
use crate::world::{
    AttachmentKey, EndpointModel, NetworkModel, NodeModel, PodModel, RoutingModel, ServiceModel,
    ServicePortModel, World,
};

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
/// Condition type: the Service's ClusterIPs are in the tables.
pub const PROGRAMMED: &str = "Programmed";
/// Condition type: every backend pod has the Service's named target ports.
pub const TARGET_PORTS_RESOLVED: &str = "TargetPortsResolved";

/// Where a Service's backends come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceEndpoints {
    /// Its EndpointSlices only (Kubernetes mode: the EndpointSlice controller writes them).
    Slices,
    /// Its EndpointSlices if there are any, else its selector over lace's endpoints
    /// (standalone mode: nothing writes slices unless the directory has them).
    SlicesOrSelector,
}

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
struct Checked<S, T, E = Errors> {
    spec: S,
    verdict: Result<T, E>,
}

/// Every Network, NetworkRoutingPolicy, Service and Kubernetes NetworkPolicy validated, cached by
/// spec.
#[derive(Debug, Default)]
pub struct Plan {
    networks: BTreeMap<String, Checked<NetworkSpec, ValidNetwork>>,
    routing: BTreeMap<String, Checked<NetworkRoutingPolicySpec, RoutingModel>>,
    services: BTreeMap<NamespacedName, ServiceChecked>,
    network_policies: BTreeMap<NamespacedName, Checked<NetworkPolicySpec, PolicyModel>>,
    validations: u64,
}

type ServiceChecked =
    Checked<Option<k8s_openapi::api::core::v1::ServiceSpec>, Parsed, Vec<ServiceError>>;

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
        self.services
            .retain(|k, _| objects.services.contains_key(k));
        for (key, svc) in &objects.services {
            if self.services.get(key).is_some_and(|c| c.spec == svc.spec) {
                continue;
            }
            self.validations += 1;
            self.services.insert(
                key.clone(),
                Checked {
                    spec: svc.spec.clone(),
                    verdict: service::parse(key, svc),
                },
            );
        }
        self.network_policies
            .retain(|k, _| objects.network_policies.contains_key(k));
        for (key, np) in &objects.network_policies {
            let spec = np.spec.clone().unwrap_or_default();
            if self
                .network_policies
                .get(key)
                .is_some_and(|c| c.spec == spec)
            {
                continue;
            }
            self.validations += 1;
            let verdict = network_policy_model(&key.namespace, &key.name, &spec);
            self.network_policies
                .insert(key.clone(), Checked { spec, verdict });
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
    /// The pod's sticky l2 identity: its [`crate::learn::IDENTITY_ANNOTATION`] as written
    /// (checked when the pod is attached).
    pub identity: Option<String>,
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

/// The node's host interface as the loop made it: the port's identity (ADR 0023).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPort {
    /// The forwarder's end.
    pub iface: lace_shared::types::IfName,
    /// The host end's MAC.
    pub mac: lace_shared::types::MacAddr,
    /// The port's endpoint id.
    pub endpoint: u64,
}

/// The inputs of [`Core::build`] that live outside the core.
#[derive(Debug, Clone, Copy)]
pub struct BuildInputs<'a> {
    /// The IPAM state.
    pub ipam: &'a Ipam,
    /// This node's attached leases.
    pub attached: &'a BTreeSet<AttachmentKey>,
    /// This node's host interface, if it has one.
    pub host: Option<HostPort>,
    /// This node's `[[uplink.external]]` entries, as its forwarder publishes them.
    pub external_uplinks: &'a [lace_shared::status::ExternalUplink],
    /// The uplink's next hops that do not answer, with their VLANs, as its forwarder
    /// publishes them.
    pub unresolved: &'a [(u16, std::net::IpAddr)],
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
    service_endpoints: ServiceEndpoints,
    service_cidr: Option<ServiceCidr>,
    service_conditions: BTreeMap<NamespacedName, Vec<Condition>>,
    /// The spec each programmed Service was last programmed with: in force while a later one
    /// is invalid or conflicts.
    services_in_force: BTreeMap<NamespacedName, ServiceSpec>,
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
            service_endpoints: ServiceEndpoints::SlicesOrSelector,
            service_cidr: None,
            service_conditions: BTreeMap::new(),
            services_in_force: BTreeMap::new(),
            pods: BTreeMap::new(),
            ensured: BTreeMap::new(),
            exhausted: BTreeMap::new(),
            world: World::default(),
            reports: Vec::new(),
        }
    }

    /// The same core taking Services' backends from `from` (the default is
    /// [`ServiceEndpoints::SlicesOrSelector`], standalone mode's).
    pub fn with_service_endpoints(mut self, from: ServiceEndpoints) -> Core {
        self.service_endpoints = from;
        self
    }

    /// The same core programming only ClusterIPs inside `cidr` (the default: any).
    pub fn with_service_cidr(mut self, cidr: Option<ServiceCidr>) -> Core {
        self.service_cidr = cidr;
        self
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
                let s = *s;
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
            let identity = pod_identity(pod);
            let decided = self.pods.get(key).is_some_and(|b| {
                b.uid == uid
                    && b.identity.as_deref() == identity
                    && (b.binding != Binding::NoMatch || b.fingerprint == fingerprint)
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
                    identity: identity.map(str::to_owned),
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
        // In Kubernetes mode each node's control registers its own node (the others read its
        // record, ADR 0045).
        for name in self.objects.nodes.keys() {
            if !nodes.contains_key(name) && ipam.registers(name) {
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
        let mut built = build_world(self, inputs);
        // The learning records are set apart ([`Core::set_learned`]), after the endpoints.
        built.world.learned = std::mem::take(&mut self.world.learned);
        let changes = world_changes(&self.world, &built.world);
        self.world = built.world;
        self.reports = built.reports;
        self.service_conditions = built.services;
        self.services_in_force = built.services_in_force;
        changes
    }

    /// Step 5b: the MACs control's learning records place (ADR 0019), decided against the
    /// world [`Core::build`] made; returns the networks to recompile.
    pub fn set_learned(
        &mut self,
        learned: BTreeMap<(String, lace_shared::types::MacAddr), crate::world::LearnedModel>,
    ) -> Vec<Change> {
        let changes = learned_changes(&self.world.learned, &learned);
        self.world.learned = learned;
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
        for (key, c) in &self.plan.services {
            if let Err(errors) = &c.verdict {
                let r = ObjectRef {
                    kind: ObjectKind::Service,
                    namespace: Some(key.namespace.clone()),
                    name: key.name.clone(),
                };
                out.push(Problem {
                    origin: self.origins.get(&r).cloned(),
                    object: Some(r),
                    kind: ProblemKind::Invalid {
                        errors: errors.iter().map(ToString::to_string).collect(),
                    },
                    consequence: if self.services_in_force.contains_key(key) {
                        Consequence::LastValidInForce
                    } else {
                        Consequence::Skipped
                    },
                });
            }
        }
        for (key, c) in &self.plan.network_policies {
            if let Err(e) = &c.verdict {
                let r = ObjectRef {
                    kind: ObjectKind::NetworkPolicy,
                    namespace: Some(key.namespace.clone()),
                    name: key.name.clone(),
                };
                out.push(Problem {
                    origin: self.origins.get(&r).cloned(),
                    object: Some(r),
                    kind: ProblemKind::Invalid {
                        errors: e.messages(),
                    },
                    consequence: if self.world.network_policies.contains_key(key) {
                        Consequence::LastValidInForce
                    } else {
                        Consequence::Skipped
                    },
                });
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

    /// Service `namespace/name`'s conditions as last built: `Valid`, then `Programmed` and
    /// `TargetPortsResolved` when it got that far.
    pub fn service_conditions(&self, namespace: &str, name: &str) -> &[Condition] {
        self.service_conditions
            .get(&NamespacedName::new(namespace, name))
            .map_or(&[], Vec::as_slice)
    }

    /// Every Kubernetes NetworkPolicy's binding.
    pub fn network_policy_bindings(&self) -> &ContinuousBindings {
        &self.network_policies
    }

    /// Kubernetes NetworkPolicy `namespace/name`'s condition, `Valid`: when its spec is invalid,
    /// the errors and whether its last valid version stays enforced (as of the last build).
    pub fn network_policy_conditions(&self, namespace: &str, name: &str) -> Vec<Condition> {
        let key = NamespacedName::new(namespace, name);
        match self.plan.network_policies.get(&key).map(|c| &c.verdict) {
            Some(Ok(_)) => vec![condition(VALID, true, "Valid", "the spec is valid")],
            Some(Err(e)) => {
                let consequence = if self.world.network_policies.contains_key(&key) {
                    "the last valid version stays enforced"
                } else {
                    "not enforced until the errors are fixed"
                };
                vec![condition(
                    VALID,
                    false,
                    "Invalid",
                    format!("{}; {consequence}", e.messages().join("; ")),
                )]
            }
            None => Vec::new(),
        }
    }
}

/// A pod's labels and named container ports (ports of an unknown protocol or outside
/// 1..=65535 name nothing a policy can use).
fn pod_model(pod: &Pod) -> PodModel {
    let ports = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            Some(ContainerPort {
                name: p.name.clone()?,
                proto: crate::netpol::protocol_number(p.protocol.as_deref().unwrap_or("TCP"))?,
                port: u16::try_from(p.container_port).ok().filter(|&n| n > 0)?,
            })
        })
        .collect();
    PodModel {
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        ports,
    }
}

fn pod_node(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// `metadata.uid`, empty when absent.
fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

fn pod_identity(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(crate::learn::IDENTITY_ANNOTATION)
        .map(String::as_str)
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

/// The world and the conditions of networks, routing policies, nodes and Services.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Built {
    /// The compiler's input.
    pub world: World,
    /// Networks, routing policies and nodes, in that order, each sorted by name.
    pub reports: Vec<ObjectReport>,
    /// Every Service's conditions.
    pub services: BTreeMap<NamespacedName, Vec<Condition>>,
    /// The spec each programmed Service is programmed with.
    pub services_in_force: BTreeMap<NamespacedName, ServiceSpec>,
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
                        addresses: n.internal_addresses(),
                        labels: n.node.metadata.labels.clone().unwrap_or_default(),
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
                if cx.ipam.registers(name) {
                    "no node id yet: the allocation state could not be written".to_owned()
                } else {
                    format!(
                        "no node id yet: the lace-control on node {name} registers it when it \
                         starts"
                    )
                },
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

    // ---- what Kubernetes NetworkPolicy reads ----
    for (key, pod) in &core.objects.pods {
        world.pods.insert(key.clone(), pod_model(pod));
    }
    for (name, ns) in &core.objects.namespaces {
        world
            .namespaces
            .insert(name.clone(), ns.metadata.labels.clone().unwrap_or_default());
    }
    for key in core.objects.network_policies.keys() {
        let model = match core.plan.network_policies.get(key).map(|c| &c.verdict) {
            Some(Ok(m)) => Some(m.clone()),
            // Invalid now: its last valid version stays in force.
            _ => core
                .world
                .network_policies
                .get(key)
                .map(|b| b.model.clone()),
        };
        let Some(model) = model else { continue };
        let network = core
            .network_policies
            .binding(&key.namespace, &key.name)
            .and_then(|b| b.network())
            .map(str::to_owned);
        world
            .network_policies
            .insert(key.clone(), BoundPolicy { model, network });
    }
    world.host = cx.host.map(|h| crate::world::HostModel {
        iface: h.iface,
        mac: h.mac,
        endpoint: h.endpoint,
        addresses: core
            .objects
            .nodes
            .get(&core.node)
            .map(|n| n.internal_addresses())
            .unwrap_or_default(),
    });
    world.external_uplinks = cx.external_uplinks.to_vec();
    world.unresolved = cx.unresolved.to_vec();
    let (services, services_in_force) = build_services(core, &mut world);
    Built {
        world,
        reports,
        services,
        services_in_force,
    }
}

/// The Services of the world (see the module docs), every Service's conditions and the spec
/// each programmed one is programmed with.
///
/// A Service whose spec is invalid, or whose ClusterIPs are refused ([`cluster_ip_refusal`]),
/// keeps the spec it was last programmed with (if that one is not refused). Services keeping
/// their ClusterIPs are placed first, so a newcomer never takes a working Service's address.
fn build_services(
    core: &Core,
    world: &mut World,
) -> (
    BTreeMap<NamespacedName, Vec<Condition>>,
    BTreeMap<NamespacedName, ServiceSpec>,
) {
    let mut out = BTreeMap::new();
    let mut in_force = BTreeMap::new();
    let mut slices: BTreeMap<NamespacedName, Vec<&EndpointSlice>> = BTreeMap::new();
    for (k, s) in &core.objects.endpoint_slices {
        if let Some(svc) = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
        {
            slices
                .entry(NamespacedName::new(&k.namespace, svc))
                .or_default()
                .push(s);
        }
    }
    let mut by_pod: BTreeMap<(String, String), Vec<&EndpointModel>> = BTreeMap::new();
    for e in world.endpoints.values() {
        by_pod
            .entry((e.namespace.clone(), e.pod.clone()))
            .or_default()
            .push(e);
    }
    let mut candidates = Vec::new();
    for key in core.objects.services.keys() {
        let mut conds = Vec::new();
        let spec = service_spec(core, key, &mut conds);
        let incumbent = spec.is_some_and(|(s, _)| {
            core.services_in_force
                .get(key)
                .is_some_and(|last| last.cluster_ips == s.cluster_ips)
        });
        candidates.push((key, spec, conds, incumbent));
    }
    // Stable: within each group, by namespace and name.
    candidates.sort_by_key(|c| !c.3);
    let mut taken: BTreeMap<IpAddr, &NamespacedName> = BTreeMap::new();
    let mut models = BTreeMap::new();
    for (key, spec, mut conds, _) in candidates {
        let model = spec.and_then(|(spec, last_good)| {
            let network = service_network(core, key, world, &mut conds)?;
            let refused = cluster_ip_refusal(core, spec, &taken, world);
            let (spec, last_good) = match (refused, core.services_in_force.get(key)) {
                (Some(why), Some(last))
                    if last != spec && cluster_ip_refusal(core, last, &taken, world).is_none() =>
                {
                    conds.push(condition(
                        PROGRAMMED,
                        true,
                        "LastGoodSpec",
                        format!(
                            "{}; the spec last programmed stays in force (ClusterIPs {})",
                            why.problems,
                            ips(last)
                        ),
                    ));
                    (last, true)
                }
                (Some(why), _) => {
                    conds.push(condition(
                        PROGRAMMED,
                        false,
                        why.reason,
                        format!("{}; {}", why.problems, why.fix),
                    ));
                    return None;
                }
                (None, _) => (spec, last_good),
            };
            for ip in &spec.cluster_ips {
                taken.insert(*ip, key);
            }
            in_force.insert(key.clone(), spec.clone());
            let ns_slices = slices.get(key).map(Vec::as_slice).unwrap_or(&[]);
            let (backends, unresolved) = match core.service_endpoints {
                _ if !ns_slices.is_empty() => {
                    (service::backends_from_slices(spec, ns_slices), Vec::new())
                }
                ServiceEndpoints::SlicesOrSelector => service::backends_from_selector(
                    spec,
                    &key.namespace,
                    &network,
                    &core.objects.pods,
                    &by_pod,
                ),
                ServiceEndpoints::Slices => (vec![Vec::new(); spec.ports.len()], Vec::new()),
            };
            let ports: Vec<ServicePortModel> = spec
                .ports
                .iter()
                .zip(backends)
                .map(|(p, backends)| ServicePortModel {
                    name: p.name.clone(),
                    protocol: p.protocol,
                    port: p.port,
                    backends,
                })
                .collect();
            let model = ServiceModel {
                network,
                cluster_ips: spec.cluster_ips.clone(),
                affinity_timeout_s: spec.affinity_timeout_s,
                node_local: spec.node_local,
                ports,
            };
            let summary: Vec<String> = spec
                .ports
                .iter()
                .zip(&model.ports)
                .map(|(p, m)| {
                    let used = service::in_use(&model.backends_on(m, &core.node)).len();
                    match (used, model.node_local) {
                        (0, false) => format!(
                            "{} rejects connections: no backend is ready, or serving while \
                             terminating",
                            p.label()
                        ),
                        (0, true) => format!(
                            "{} drops connections from node {}: internalTrafficPolicy is \
                             Local and no backend on this node is ready, or serving while \
                             terminating",
                            p.label(),
                            core.node
                        ),
                        (n, false) => format!("{}: {n} backends in use", p.label()),
                        (n, true) => format!(
                            "{}: {n} backends in use on node {} (internalTrafficPolicy: Local)",
                            p.label(),
                            core.node
                        ),
                    }
                })
                .collect();
            let programmed = format!(
                "ClusterIPs {} in network {}; {}",
                ips(spec),
                model.network,
                summary.join("; ")
            );
            // A conflicting spec's condition is already there; an invalid one's is this.
            if !conds.iter().any(|c| c.type_ == PROGRAMMED) {
                conds.push(if last_good {
                    condition(
                        PROGRAMMED,
                        true,
                        "LastGoodSpec",
                        format!(
                            "the last valid spec is in force until the errors are fixed: \
                             {programmed}"
                        ),
                    )
                } else {
                    condition(PROGRAMMED, true, "Programmed", programmed)
                });
            }
            conds.push(target_ports_condition(&unresolved));
            Some(model)
        });
        if let Some(m) = model {
            models.insert(key.clone(), m);
        }
        out.insert(key.clone(), conds);
    }
    world.services = models;
    (out, in_force)
}

fn ips(spec: &ServiceSpec) -> String {
    spec.cluster_ips
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a Service's ClusterIPs cannot be programmed.
struct Refusal {
    /// The `Programmed` condition's reason.
    reason: &'static str,
    /// Every problem, naming the address.
    problems: String,
    /// What to do.
    fix: &'static str,
}

/// Why `spec`'s ClusterIPs cannot be programmed, if so: one outside the service CIDR
/// (`ClusterIPOutsideServiceCIDR`), else one taken by another Service or inside a network's
/// subnet (`ClusterIPConflict`).
fn cluster_ip_refusal(
    core: &Core,
    spec: &ServiceSpec,
    taken: &BTreeMap<IpAddr, &NamespacedName>,
    world: &World,
) -> Option<Refusal> {
    let outside = core
        .service_cidr
        .map(|c| c.outside(&spec.cluster_ips))
        .unwrap_or_default();
    if !outside.is_empty() {
        return Some(Refusal {
            reason: "ClusterIPOutsideServiceCIDR",
            problems: outside.join("; "),
            fix: "ClusterIPs come from kube-apiserver's --service-cluster-ip-range: give the \
                  Service one inside it, or give lace-control run the same range with \
                  --service-cidr",
        });
    }
    let clashes = cluster_ip_clashes(spec, taken, world);
    (!clashes.is_empty()).then(|| Refusal {
        reason: "ClusterIPConflict",
        problems: clashes.join("; "),
        fix: "give the Service a ClusterIP of its own, outside every network's subnets (the \
              cluster's service range)",
    })
}

/// Why `spec`'s ClusterIPs clash: one taken by another Service, or inside a network's subnet
/// (it would shadow an address).
fn cluster_ip_clashes(
    spec: &ServiceSpec,
    taken: &BTreeMap<IpAddr, &NamespacedName>,
    world: &World,
) -> Vec<String> {
    let mut clashes = Vec::new();
    for ip in &spec.cluster_ips {
        if let Some(other) = taken.get(ip) {
            clashes.push(format!("ClusterIP {ip} is already Service {other}'s"));
        }
        for n in world.networks.values() {
            let subnets = n.v4.map(|(p, _)| IpNet::V4(p)).into_iter();
            let subnets = subnets
                .chain(n.v6.map(|(p, _)| IpNet::V6(p)))
                .chain(n.external.iter().copied());
            for p in subnets.filter(|p| p.contains(ip)) {
                clashes.push(format!(
                    "ClusterIP {ip} lies inside Network {}'s {p}, where it would shadow an \
                     address",
                    n.name
                ));
            }
        }
    }
    clashes
}

/// Service `key`'s spec in force and whether it is the last good one (`Valid` pushed; a
/// `Programmed=False` too when there is nothing to program).
fn service_spec<'a>(
    core: &'a Core,
    key: &NamespacedName,
    conds: &mut Vec<Condition>,
) -> Option<(&'a ServiceSpec, bool)> {
    match core.plan.services.get(key).map(|c| &c.verdict) {
        Some(Ok(Parsed::Vip(spec))) => {
            conds.push(condition(VALID, true, "Valid", "the spec is valid"));
            Some((spec, false))
        }
        Some(Ok(Parsed::NoVip(why))) => {
            conds.push(condition(VALID, true, "Valid", "the spec is valid"));
            conds.push(condition(PROGRAMMED, false, why.reason(), why.message()));
            None
        }
        Some(Err(errors)) => {
            let msgs: Vec<String> = errors.iter().map(ToString::to_string).collect();
            conds.push(condition(VALID, false, "Invalid", msgs.join("; ")));
            match core.services_in_force.get(key) {
                Some(spec) => Some((spec, true)),
                None => {
                    conds.push(condition(
                        PROGRAMMED,
                        false,
                        "Invalid",
                        "not programmed: fix the errors in the Valid condition",
                    ));
                    None
                }
            }
        }
        None => None,
    }
}

/// The l3 network Service `key` is bound to (a `Programmed=False` pushed when there is none).
fn service_network(
    core: &Core,
    key: &NamespacedName,
    world: &World,
    conds: &mut Vec<Condition>,
) -> Option<String> {
    let binding = core.services.binding(&key.namespace, &key.name);
    let not = |reason: &str, msg: String| condition(PROGRAMMED, false, reason, msg);
    let network = match binding {
        Some(Binding::Network(n)) => n,
        Some(Binding::ExplicitlyUnbound) => {
            conds.push(not(
                "NotBound",
                "a binding policy leaves the Service unbound on purpose; it has no network to \
                 be reached in"
                    .into(),
            ));
            return None;
        }
        _ => {
            conds.push(not(
                "NotBound",
                "no NetworkBindingPolicy binds the Service to a network (matchKind service); \
                 add a rule that does"
                    .into(),
            ));
            return None;
        }
    };
    match world.networks.get(network) {
        None => {
            conds.push(not(
                "UnknownNetwork",
                format!("bound to network {network}, which is not a valid Network (yet)"),
            ));
            None
        }
        Some(n) if n.kind != NetworkType::L3 => {
            conds.push(not(
                "UnsupportedNetwork",
                format!(
                    "bound to network {network}, an {} network; Services are supported on l3 \
                     networks only",
                    n.kind.as_str()
                ),
            ));
            None
        }
        Some(_) => Some(network.clone()),
    }
}

/// `TargetPortsResolved`: whether every selected pod had the named target ports.
fn target_ports_condition(unresolved: &[service::Unresolved]) -> Condition {
    if unresolved.is_empty() {
        return condition(
            TARGET_PORTS_RESOLVED,
            true,
            "Resolved",
            "every backend has the target ports",
        );
    }
    let mut by_port: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for u in unresolved {
        by_port
            .entry((u.port.as_str(), u.target.as_str()))
            .or_default()
            .push(u.pod.as_str());
    }
    let parts: Vec<String> = by_port
        .iter()
        .map(|((port, target), pods)| {
            format!(
                "port {port}: targetPort {target:?} is no container port of pod{} {}",
                if pods.len() == 1 { "" } else { "s" },
                pods.join(", ")
            )
        })
        .collect();
    condition(
        TARGET_PORTS_RESOLVED,
        false,
        "NamedPortUnresolved",
        format!(
            "{}; those pods are not backends of that port: name the container port (with the \
             port's protocol) or use a number",
            parts.join("; ")
        ),
    )
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
    if let Some(gw) = spec.next_hop.as_ref().and_then(|nh| nh.gateway.as_ref()) {
        if d.kind != NetworkType::External {
            return Err((
                "GatewayNeedsExternal",
                format!(
                    "NetworkRoutingPolicy {name}: spec.nextHop.gateway {gw} is an uplink \
                     gateway, for a destination of type external; Network {dest} is not one. \
                     Use spec.nextHop.endpoint for a pod on the path"
                ),
            ));
        }
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
    out.extend(
        changed_keys(&old.services, &new.services)
            .into_iter()
            .map(Change::Service),
    );
    out.extend(
        changed_keys(&old.pods, &new.pods)
            .into_iter()
            .map(Change::Pod),
    );
    out.extend(
        changed_keys(&old.namespaces, &new.namespaces)
            .into_iter()
            .map(Change::Namespace),
    );
    out.extend(
        changed_keys(&old.network_policies, &new.network_policies)
            .into_iter()
            .map(Change::NetworkPolicy),
    );
    if old.host != new.host
        || old.external_uplinks != new.external_uplinks
        || old.unresolved != new.unresolved
    {
        // Every programmed network routes the node's addresses to the host; static routes'
        // next hops are checked against the node's external subnets.
        out.push(Change::All);
    }
    out.extend(learned_changes(&old.learned, &new.learned));
    out
}

/// A network whose learned MACs changed is recompiled (every member node holds them all).
fn learned_changes(
    old: &BTreeMap<(String, lace_shared::types::MacAddr), crate::world::LearnedModel>,
    new: &BTreeMap<(String, lace_shared::types::MacAddr), crate::world::LearnedModel>,
) -> Vec<Change> {
    let networks: BTreeSet<String> = changed_keys(old, new)
        .into_iter()
        .map(|(network, _)| network)
        .collect();
    networks.into_iter().map(Change::Network).collect()
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
  nextHop: {gateway: 192.0.2.1}
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
        SourceEvent::Snapshot(Box::new(Snapshot {
            objects,
            problems,
            origins: BTreeMap::new(),
        }))
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
        let changes = core.build(BuildInputs {
            ipam,
            attached,
            host: None,
            external_uplinks: &[],
            unresolved: &[],
        });
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
            identity: None,
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
    fn a_node_another_control_registers_waits_for_it() {
        const NODE_B: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: node-b
  annotations: {lace-cni.io/underlay: "fd00:100::b"}
"#;
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        ipam.register_only("node-a");
        core.observe(snapshot(&[NETWORKS, NODE_B]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        assert_eq!(cond(&core, "Node", "node-a", READY).status, "True");
        let b = cond(&core, "Node", "node-b", READY);
        assert_eq!(
            (b.status.as_str(), b.reason.as_str(), b.message.as_str()),
            (
                "False",
                "NotRegistered",
                "no node id yet: the lace-control on node node-b registers it when it starts"
            )
        );
        assert!(!core.world().nodes.contains_key("node-b"));
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
        // An uplink gateway is a next hop toward an external network only.
        let a = cond(&core, "NetworkRoutingPolicy", "to-flat", ACCEPTED);
        assert_eq!(
            (a.status.as_str(), a.reason.as_str(), a.message.as_str()),
            (
                "False",
                "GatewayNeedsExternal",
                "NetworkRoutingPolicy to-flat: spec.nextHop.gateway 192.0.2.1 is an uplink \
                 gateway, for a destination of type external; Network flat is not one. Use \
                 spec.nextHop.endpoint for a pod on the path"
            )
        );
        assert_eq!(
            cond(&core, "NetworkRoutingPolicy", "to-flat", SUPPORTED).reason,
            "NotAccepted"
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
        let s = status_of(&core, &ipam, &[]);
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
            identity: None,
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
        core.observe(SourceEvent::Snapshot(Box::default()));
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
        core.observe(SourceEvent::Snapshot(Box::default()));
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
    /// The status file with the tables published at generation 1 and `notes`.
    fn status_of(core: &Core, ipam: &Ipam, notes: &[crate::compile::Note]) -> StatusFile {
        let tables = TablesReport {
            generation: 1,
            error: None,
            unpublished: &BTreeSet::new(),
            notes,
        };
        report(
            core,
            ipam,
            &BTreeSet::new(),
            tables,
            "t0",
            &StatusFile::default(),
        )
    }

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
        let s = status_of(&core, &ipam, &[]);
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

    /// NetworkPolicies reach the world with their binding, pods with labels and named ports,
    /// namespaces with labels; an invalid update keeps the last valid version in force and is
    /// a problem naming the field; an invalid new policy is left out.
    #[test]
    fn network_policies_reach_the_world_bound_and_validated() {
        const OBJECTS: &str = r#"
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata: {name: policies-in-backend}
spec:
  matchKind: [networkpolicy]
  rules:
  - network: backend
    selector: {matchLabels: {tier: backend}}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: blue}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  nodeName: node-a
  containers: [{name: app, image: x, ports: [{name: http, containerPort: 8080}, {name: dns, containerPort: 53, protocol: UDP}, {containerPort: 9}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: shop, labels: {tier: backend}}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: anywhere, namespace: shop}
spec: {podSelector: {}, policyTypes: [Egress]}
"#;
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        core.observe(snapshot(&[NETWORKS, OBJECTS]));
        let (changes, _) = batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        let key = crate::source::NamespacedName::new("shop", "web");
        let w = core.world();
        assert_eq!(w.network_policies[&key].network.as_deref(), Some("backend"));
        let anywhere = crate::source::NamespacedName::new("shop", "anywhere");
        assert_eq!(w.network_policies[&anywhere].network, None);
        assert!(w.network_policies[&anywhere].model.ingress.is_none());
        let pod = &w.pods[&key];
        assert_eq!(pod.labels["app"], "web");
        assert_eq!(
            pod.ports
                .iter()
                .map(|p| (p.name.as_str(), p.proto, p.port))
                .collect::<Vec<_>>(),
            [("http", 6, 8080), ("dns", 17, 53)],
            "named ports only, protocol TCP by default"
        );
        assert_eq!(w.namespaces["shop"]["team"], "blue");
        for c in [
            Change::Pod(key.clone()),
            Change::Namespace("shop".into()),
            Change::NetworkPolicy(key.clone()),
        ] {
            assert!(changes.contains(&c), "{c:?} not in {changes:?}");
        }
        let good = w.network_policies[&key].clone();
        // An invalid update: the last valid version stays, the problem names the field.
        let bad = OBJECTS.replace("except: [10.1.0.0/16]", "except: [192.168.0.0/16]");
        core.observe(snapshot(&[NETWORKS, &bad]));
        let (changes, _) = batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        assert!(changes.is_empty(), "{changes:?}");
        assert_eq!(core.world().network_policies[&key], good);
        let problems: Vec<String> = core.problems().iter().map(ToString::to_string).collect();
        assert!(
            problems.iter().any(|p| p.starts_with("NetworkPolicy shop/web: ")
                && p.contains("spec.ingress[0].from[0].ipBlock.except[0] \"192.168.0.0/16\" is not strictly inside ipBlock.cidr 10.0.0.0/8")
                && p.ends_with("its last valid version stays in force until it is fixed")),
            "{problems:?}"
        );
        // A new invalid policy is skipped.
        let new_bad = format!(
            "{bad}---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
             metadata: {{name: fresh, namespace: shop}}\n\
             spec: {{podSelector: {{}}, ingress: [{{ports: [{{port: 0}}]}}]}}\n"
        );
        core.observe(snapshot(&[NETWORKS, &new_bad]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        let fresh = crate::source::NamespacedName::new("shop", "fresh");
        assert!(!core.world().network_policies.contains_key(&fresh));
        let problems: Vec<String> = core.problems().iter().map(ToString::to_string).collect();
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("NetworkPolicy shop/fresh: ")
                    && p.contains("spec.ingress[0].ports[0].port 0 is outside 1..=65535")
                    && p.ends_with("the object is skipped")),
            "{problems:?}"
        );
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

    /// A NetworkPolicy in force is `Programmed`; one whose network's tables are over the
    /// limits (the compiler's `Limit` note) is `Programmed=False`, `OverLimit`, with the note's
    /// message; one that never had a valid spec has `Valid=False` only.
    #[test]
    fn network_policies_show_whether_they_are_programmed() {
        use crate::compile::{Note, NoteKind};
        let mut core = Core::new("node-a");
        let mut ipam = new_ipam();
        core.observe(snapshot(&[
            NETWORKS,
            BINDING,
            r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: shop}
spec: {podSelector: {}, policyTypes: [Ingress]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: huge, namespace: shop}
spec: {podSelector: {}, policyTypes: [Egress]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: broken, namespace: shop}
spec: {podSelector: {}, policyTypes: [Sideways]}
"#,
        ]));
        batch(&mut core, &mut ipam, &BTreeSet::new(), &[]);
        let notes = [Note {
            kind: NoteKind::Limit,
            object: "NetworkPolicy shop/huge".into(),
            message: "network backend: 5000000 decisions exceed the limit of 4194304".into(),
        }];
        let s = status_of(&core, &ipam, &notes);
        let programmed = |name: &str| {
            let e = s.network_policies.iter().find(|e| e.name == name).unwrap();
            e.conditions
                .iter()
                .find(|c| c.type_ == PROGRAMMED)
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        assert_eq!(programmed("deny").unwrap().1, "Programmed");
        let (status, reason, message) = programmed("huge").unwrap();
        assert_eq!((status.as_str(), reason.as_str()), ("False", "OverLimit"));
        assert!(message.contains("exceed the limit"), "{message}");
        assert_eq!(programmed("broken"), None);
        assert_eq!(s.notes, [notes[0].to_string()]);
    }
}
