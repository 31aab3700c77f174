//! Transit next hops (ADR 0057): a routing policy's `nextHop.endpoint` steers its path through
//! a pod acting as a router or firewall.
//!
//! - **The transit** is the pod's one interface on a network that is neither a source nor the
//!   destination of the policy (its *transit network*). It must be an l3 network that is not
//!   anonymous: the seed's anonymous networks cannot be used as a transit next hop.
//! - **Steering**: in the sources' FIBs the destination's routes (narrowed to the policy's
//!   prefixes) point at the transit interface instead of their own next hops, and in the
//!   destination's FIB the sources' routes do too (the policy is bidirectional: both ways cross
//!   the same pod, as a stateful firewall needs). On the transit's node that is its interface;
//!   on the others, the end network's End.DT46 SID on the transit's node, which programs every
//!   end of such a path to steer what arrives there on to the interface. The transit
//!   network's FIB imports both sets, so what the pod forwards goes on as any packet of its
//!   network.
//! - **The port flag**: the forwarder accepts packets with others' source addresses from the
//!   transit interface ([`lace_shared::types::PortInfo::transit`]).
//!
//! A path whose transit does not resolve is closed, with a note: traffic never goes around
//! the firewall.

use std::collections::BTreeSet;

use lace_shared::types::{NextHop, PortId};

use super::encode::{encode_sid, SidFunction};
use super::routes::Ctx;
use super::{Note, NoteKind};
use crate::api::NetworkType;
use crate::world::{AttachmentKey, EndpointModel, NetworkModel, RoutingModel, World};

/// The interface a policy's path crosses.
#[derive(Debug, Clone, Copy)]
pub(super) struct Transit<'w> {
    /// The transit network's name.
    pub network: &'w str,
    /// The pod's interface there.
    pub endpoint: &'w EndpointModel,
}

/// How a policy's path leaves a source (or, back, the destination) on this node.
#[derive(Debug)]
pub(super) enum Steering {
    /// Straight to the other end: no transit.
    Direct,
    /// Through the transit interface: every route of the other end takes this next hop.
    Through(NextHop),
    /// Not at all from this node, for the note's reason.
    Closed(Note),
}

/// The transit of policy `p`: `None` without one, else the pod's interface on its transit
/// network or why there is none.
pub(super) fn of<'w>(world: &'w World, p: &RoutingModel) -> Option<Result<Transit<'w>, String>> {
    let pod = p.transit.as_ref()?;
    let on_path = |n: &str| n == p.destination || p.sources.iter().any(|s| s == n);
    let mine: Vec<&EndpointModel> = world
        .endpoints
        .values()
        .filter(|e| e.namespace == pod.namespace && e.pod == pod.name)
        .collect();
    let off_path: Vec<&EndpointModel> = mine
        .iter()
        .copied()
        .filter(|e| !on_path(&e.network))
        .collect();
    let endpoint = match off_path.as_slice() {
        [e] => *e,
        [] if mine.is_empty() => {
            return Some(Err(format!(
                "transit endpoint {}/{} has no interface on a lace network (yet); the path is \
                 closed until it has",
                pod.namespace, pod.name
            )))
        }
        [] => {
            return Some(Err(format!(
                "transit endpoint {}/{} has interfaces only on the path's own networks ({}); \
                 give it one interface on another l3 network, its transit network",
                pod.namespace,
                pod.name,
                networks(&mine)
            )))
        }
        _ => {
            return Some(Err(format!(
                "transit endpoint {}/{} has several interfaces off the path ({}); which one \
                 is the transit is ambiguous: give it exactly one",
                pod.namespace,
                pod.name,
                networks(&off_path)
            )))
        }
    };
    let Some(net) = world.networks.get(&endpoint.network) else {
        return Some(Err(format!(
            "transit endpoint {}/{}'s network {} is not in the world",
            pod.namespace, pod.name, endpoint.network
        )));
    };
    if net.kind != NetworkType::L3 {
        return Some(Err(format!(
            "transit endpoint {}/{} is on network {}, which is not l3; a transit routes, so its \
             network must be l3",
            pod.namespace, pod.name, endpoint.network
        )));
    }
    if net.anonymous {
        return Some(Err(format!(
            "transit endpoint {}/{} is on network {}, which is anonymous: an anonymous network \
             cannot be used as a transit next hop",
            pod.namespace, pod.name, endpoint.network
        )));
    }
    Some(Ok(Transit {
        network: &endpoint.network,
        endpoint,
    }))
}

fn networks(eps: &[&EndpointModel]) -> String {
    let names: BTreeSet<&str> = eps.iter().map(|e| e.network.as_str()).collect();
    names.into_iter().collect::<Vec<_>>().join(", ")
}

/// How policy `p`'s path leaves its end `from` (a source, or back the destination) on this
/// node toward `toward`: on the transit's node, to its interface; elsewhere, over SRv6 to
/// `from`'s End.DT46 SID on the transit's node, whose FIB for `from` steers it on to the
/// interface (that node programs every end of a path through its transits,
/// [`carries_an_end`]).
pub(super) fn steering(
    ctx: &Ctx<'_>,
    p: &RoutingModel,
    from: &NetworkModel,
    toward: &str,
) -> Steering {
    let closed = |message: String| {
        Steering::Closed(Note {
            kind: NoteKind::Inconsistent,
            object: format!("NetworkRoutingPolicy {}", p.name),
            message,
        })
    };
    let t = match of(ctx.world, p) {
        None => return Steering::Direct,
        Some(Err(e)) => return closed(e),
        Some(Ok(t)) => t,
    };
    if t.endpoint.node == ctx.me.name {
        return Steering::Through(NextHop::Local {
            port: t.endpoint.port,
            mac: t.endpoint.mac,
        });
    }
    let Some(node) = ctx.world.nodes.get(&t.endpoint.node) else {
        return closed(format!(
            "transit endpoint {}/{} is on node {}, which is not in the world (no locator); \
             the path toward {toward} is closed here",
            t.endpoint.namespace, t.endpoint.pod, t.endpoint.node
        ));
    };
    match encode_sid(node.locator, SidFunction::EndDt46, from.id) {
        Ok(sid) => Steering::Through(NextHop::Remote { node: node.id, sid }),
        Err(e) => closed(format!(
            "no SID of network {} on node {} toward the transit: {e}",
            from.name, node.name
        )),
    }
}

/// Whether network `name` is an end of a path through a transit on this node: the node then
/// programs it even without endpoints of its own, as the other nodes send that end's packets
/// to its End.DT46 SID here ([`steering`]).
pub(super) fn carries_an_end(ctx: &Ctx<'_>, name: &str) -> bool {
    ctx.world.routing.iter().any(|p| {
        (p.destination == name || p.sources.iter().any(|s| s == name))
            && matches!(of(ctx.world, p), Some(Ok(t)) if t.endpoint.node == ctx.me.name)
    })
}

/// The ports of this node's transit interfaces on network `name`.
pub(super) fn ports(ctx: &Ctx<'_>, name: &str) -> BTreeSet<PortId> {
    ctx.world
        .routing
        .iter()
        .filter_map(|p| of(ctx.world, p)?.ok())
        .filter(|t| t.network == name && t.endpoint.node == ctx.me.name)
        .map(|t| t.endpoint.port)
        .collect()
}

/// The networks linked through a transit to any of `ends`: of a policy with a transit pod,
/// the networks of the pod's interfaces (a transit network imports the path's ends) when an
/// end of the path is among `ends`, and the ends (they steer by the transit's validity) when
/// one of those networks is. What is recompiled with `ends`.
pub(super) fn linked(world: &World, ends: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for p in &world.routing {
        let Some(pod) = &p.transit else { continue };
        let pod_nets: BTreeSet<&str> = world
            .endpoints
            .values()
            .filter(|e| e.namespace == pod.namespace && e.pod == pod.name)
            .map(|e| e.network.as_str())
            .collect();
        let path = || std::iter::once(&p.destination).chain(&p.sources);
        if path().any(|n| ends.contains(n)) {
            out.extend(pod_nets.iter().map(|n| (*n).to_owned()));
        }
        if pod_nets.iter().any(|n| ends.contains(*n)) {
            out.extend(path().cloned());
        }
    }
    out
}

/// Whether the attachment `key` (as `world` has it now, or gone) may be a policy's transit:
/// its change then moves paths, not only its network.
pub(super) fn may_move_paths(world: &World, key: &AttachmentKey) -> bool {
    let mut pods = world.routing.iter().filter_map(|p| p.transit.as_ref());
    match world.endpoints.get(key) {
        Some(e) => pods.any(|t| t.namespace == e.namespace && t.name == e.pod),
        None => pods.next().is_some(),
    }
}
