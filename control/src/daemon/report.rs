//! The report step: what every object shows, from the core, the IPAM state and the outcome of
//! the last publication — pure (the time is passed in), so the status is a function of state.
//!
//! - Networks show the spec **in force**: the model in the world (the last valid one while a
//!   change is refused), with `status.id` and conditions; a refused change is named in the
//!   `Valid` condition in the user's words.
//! - Every pod, service and Kubernetes NetworkPolicy shows its binding and the rule that
//!   decided it, before any CNI ADD; every Service also shows whether its ClusterIPs are
//!   programmed, and why not, and every NetworkPolicy whether it is valid (their conditions;
//!   Kubernetes mode records their transitions as Events on the objects, see
//!   [`super::api_status`]).
//! - Every problem — decode errors of the source and validation errors of the objects — is in
//!   one list, each with its file, document and field.
//! - A condition's `lastTransitionTime` moves only when its status changes (from `previous`).

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::api::{Condition, NetworkStatus};
use crate::bind::{Binding, ContinuousBindings};
use crate::compile::{Note, NoteKind};
use crate::ipam::Ipam;
use crate::world::AttachmentKey;

use super::core::{condition, Core, ObjectReport, PROGRAMMED};
use super::status::{self, BindingEntry, EndpointEntry, NetworkEntry, ObjectEntry, StatusFile};

/// What the loop knows of the last publication.
#[derive(Debug, Clone, Copy)]
pub struct TablesReport<'a> {
    /// The tables' generation after the last apply.
    pub generation: u64,
    /// Why the tables could not be compiled or published, if so.
    pub error: Option<&'a str>,
    /// The ClusterIPs whose Service records the refused batch held: those Services are not
    /// `Programmed` as they are now (the forwarder keeps their previous records, if any).
    pub unpublished: &'a BTreeSet<IpAddr>,
    /// The compiler's notes.
    pub notes: &'a [Note],
}

/// The prefix length a pod's address is configured with: a host route.
pub fn host_len(a: &std::net::IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}

fn binding_text(b: &Binding) -> String {
    match b {
        Binding::Network(n) => n.clone(),
        Binding::NoMatch => "(unbound)".into(),
        Binding::ExplicitlyUnbound => "(explicitly unbound)".into(),
    }
}

fn continuous(b: &ContinuousBindings) -> Vec<BindingEntry> {
    b.iter()
        .map(|(ns, name, binding)| BindingEntry {
            namespace: ns.to_owned(),
            name: name.to_owned(),
            node: None,
            binding: binding_text(binding),
            decided_by: None,
            conditions: Vec::new(),
        })
        .collect()
}

/// A Service whose ClusterIPs' records the refused batch held is not `Programmed` as it is:
/// its `Programmed` condition becomes `False`, `NotPublished`, with the writer's error.
fn not_published(
    core: &Core,
    e: &BindingEntry,
    unpublished: &BTreeSet<IpAddr>,
    error: &str,
    conds: &mut [Condition],
) {
    let key = crate::source::NamespacedName::new(&e.namespace, &e.name);
    let held = core
        .world()
        .services
        .get(&key)
        .is_some_and(|m| m.cluster_ips.iter().any(|ip| unpublished.contains(ip)));
    if !held {
        return;
    }
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == PROGRAMMED) {
        *c = condition(
            PROGRAMMED,
            false,
            "NotPublished",
            format!(
                "its records are not in the forwarder's tables ({error}); the forwarder keeps \
                 the Service as it was last published until the tables have room"
            ),
        );
    }
}

/// A NetworkPolicy's `Programmed`: `False`, `OverLimit`, while its network's policy tables would
/// exceed the limits (the compiler's `Limit` note on it: the last good tables stay); else
/// `True` when it is in force (its valid spec, or the last valid one); none for a policy that
/// never had a valid spec (`Valid=False` says it all).
fn policy_programmed(core: &Core, e: &BindingEntry, notes: &[Note], conds: &mut Vec<Condition>) {
    let key = crate::source::NamespacedName::new(&e.namespace, &e.name);
    let object = format!("NetworkPolicy {key}");
    let limit = notes
        .iter()
        .find(|n| n.kind == NoteKind::Limit && n.object == object);
    if let Some(n) = limit {
        conds.push(condition(PROGRAMMED, false, "OverLimit", n.message.clone()));
    } else if core.world().network_policies.contains_key(&key) {
        conds.push(condition(
            PROGRAMMED,
            true,
            "Programmed",
            "compiled into the policy tables of the networks it applies to",
        ));
    }
}

/// The status of everything (see the module docs). `now` is RFC 3339.
pub fn report(
    core: &Core,
    ipam: &Ipam,
    attached: &BTreeSet<AttachmentKey>,
    tables: TablesReport<'_>,
    now: &str,
    previous: &StatusFile,
) -> StatusFile {
    let prev_conds = |list: &[ObjectEntry], name: &str| -> Vec<Condition> {
        list.iter()
            .find(|e| e.name == name)
            .map(|e| e.conditions.clone())
            .unwrap_or_default()
    };
    let mut s = StatusFile {
        node: core.node().to_owned(),
        updated: now.to_owned(),
        tables_generation: tables.generation,
        ..StatusFile::default()
    };
    let ids = ipam.network_ids();
    let reports: Vec<ObjectReport> = core.reports().cloned().collect();
    for mut r in reports {
        let previous_conditions = match r.kind {
            "Network" => previous
                .networks
                .iter()
                .find(|n| n.name == r.name)
                .map(|n| n.status.conditions.clone())
                .unwrap_or_default(),
            "NetworkBindingPolicy" => prev_conds(&previous.binding_policies, &r.name),
            "NetworkRoutingPolicy" => prev_conds(&previous.routing_policies, &r.name),
            _ => prev_conds(&previous.nodes, &r.name),
        };
        status::stamp_transitions(&mut r.conditions, &previous_conditions, now);
        let entry = ObjectEntry {
            name: r.name.clone(),
            conditions: r.conditions,
        };
        match r.kind {
            "Network" => {
                let in_force = core.world().networks.get(&r.name);
                let spec = core.objects().networks.get(&r.name).map(|n| &n.spec);
                let (type_, subnets) = match (in_force, spec) {
                    (Some(m), _) => (
                        m.kind.as_str().to_owned(),
                        m.v4.map(|(p, _)| p.to_string())
                            .into_iter()
                            .chain(m.v6.map(|(p, _)| p.to_string()))
                            .collect(),
                    ),
                    (None, Some(spec)) => (
                        spec.type_.as_str().to_owned(),
                        [&spec.ipv4_subnet, &spec.ipv6_subnet]
                            .into_iter()
                            .flatten()
                            .map(|x| x.prefix.clone())
                            .collect(),
                    ),
                    (None, None) => (String::new(), Vec::new()),
                };
                s.networks.push(NetworkEntry {
                    name: r.name.clone(),
                    type_,
                    subnets,
                    status: NetworkStatus {
                        id: in_force
                            .map(|m| m.id.0)
                            .or_else(|| ids.get(&r.name).map(|i| i.0)),
                        conditions: entry.conditions,
                    },
                });
            }
            "NetworkBindingPolicy" => s.binding_policies.push(entry),
            "NetworkRoutingPolicy" => s.routing_policies.push(entry),
            _ => s.nodes.push(entry),
        }
    }
    for l in ipam.leases().filter(|l| l.node == core.node()) {
        let ep = status::Object::new(
            "NetworkEndpoint",
            crate::ipam::endpoint_name(l),
            Some(l.pod.namespace.clone()),
            ipam.endpoint_spec(l),
        );
        s.network_endpoints.push(EndpointEntry {
            object: ep,
            attached: attached.contains(&l.key),
            port: l.port.0,
            endpoint_id: l.endpoint_id,
        });
    }
    for ((network, node), blocks) in ipam.allocations() {
        s.allocations.push(status::Object::new(
            "Allocation",
            crate::ipam::allocation_name(&network, &blocks),
            None,
            crate::ipam::allocation_spec(&network, &node, &blocks),
        ));
    }
    // A pod with a lease is bound to its lease's network, whatever the policies say now.
    let leased: std::collections::BTreeMap<(&str, &str), &str> = ipam
        .leases()
        .map(|l| {
            (
                (l.pod.namespace.as_str(), l.pod.name.as_str()),
                l.network.as_str(),
            )
        })
        .collect();
    for (k, b) in core.pod_bindings() {
        let lease = leased.get(&(k.namespace.as_str(), k.name.as_str()));
        s.pods.push(BindingEntry {
            namespace: k.namespace.clone(),
            name: k.name.clone(),
            node: b.node.clone(),
            binding: lease.map_or_else(|| binding_text(&b.binding), |n| (*n).to_owned()),
            decided_by: b
                .decided_by
                .as_ref()
                .map(|(p, r)| format!("{p} spec.rules[{r}]")),
            conditions: Vec::new(),
        });
    }
    // Kubernetes mode records each transition of these as an Event on the Service or the
    // NetworkPolicy (`api_status`); their status is never written.
    let stamped = |e: &BindingEntry, mut conds: Vec<Condition>, previous: &[BindingEntry]| {
        let before = previous
            .iter()
            .find(|p| p.namespace == e.namespace && p.name == e.name)
            .map_or(&[][..], |p| p.conditions.as_slice());
        status::stamp_transitions(&mut conds, before, now);
        conds
    };
    s.services = continuous(core.service_bindings());
    for e in &mut s.services {
        let mut conds = core.service_conditions(&e.namespace, &e.name).to_vec();
        if let Some(error) = tables.error {
            not_published(core, e, tables.unpublished, error, &mut conds);
        }
        e.conditions = stamped(e, conds, &previous.services);
    }
    s.network_policies = continuous(core.network_policy_bindings());
    for e in &mut s.network_policies {
        let mut conds = core.network_policy_conditions(&e.namespace, &e.name);
        policy_programmed(core, e, tables.notes, &mut conds);
        e.conditions = stamped(e, conds, &previous.network_policies);
    }
    s.notes = tables.notes.iter().map(ToString::to_string).collect();
    s.problems = core.problems().iter().map(ToString::to_string).collect();
    s.error = tables.error.map(str::to_owned);
    if s.content_key() == previous.content_key() {
        s.updated = previous.updated.clone();
    }
    s
}
