//! Routing policy next hops: a transit endpoint (`nextHop.endpoint`, ADR 0057) steers a path
//! through a pod acting as a router or firewall; an uplink gateway (`nextHop.gateway`) sends a
//! path toward an external network out of the uplink to that gateway.
//!
//! - **The transit** is the pod's one interface on a network that is neither a source nor the
//!   destination of the policy (its *transit network*). It must be an l3 network that is not
//!   anonymous: the seed's anonymous networks cannot be used as a transit next hop.
//! - **Steering through a transit**: in the sources' FIBs the destination's routes (narrowed
//!   to the policy's prefixes) point at the transit interface instead of their own next hops,
//!   and in the destination's FIB the sources' routes do too (the policy is bidirectional:
//!   both ways cross the same pod, as a stateful firewall needs). On the transit's node that is
//!   its interface; on the others, the end network's End.DT46 SID on the transit's node, which
//!   programs every end of such a path to steer what arrives there on to the interface. The
//!   transit network's FIB imports both sets, so what the pod forwards goes on as any packet
//!   of its network.
//! - **The port flag**: the forwarder accepts packets with others' source addresses from the
//!   transit interface ([`lace_shared::types::PortInfo::transit`]).
//! - **An uplink gateway**: in the sources' FIBs the external destination's prefixes (narrowed
//!   by the policy) go out of the uplink to the gateway, instead of by the network's static
//!   routes — on a node that carries the network, once the gateway is checked against the
//!   node's subnets there as a static route's next hop is; from the other nodes, to the
//!   source's End.DT46 SID on the node that carries it (the first by name, as for static
//!   routes), which programs the sources for it. The way back is the network's, as without a
//!   next hop.
//!
//! A path whose next hop does not resolve is closed, with a note: traffic never goes around
//! the firewall, nor out another way.

use std::collections::BTreeSet;
use std::net::IpAddr;

use lace_shared::types::{NextHop, PortId};

use super::encode::{encode_sid, SidFunction};
use super::external::{self, UplinkSide};
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

/// Which way along a policy's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Way {
    /// From a source toward the destination.
    Toward,
    /// From the destination back to a source.
    Back,
}

/// How a policy's path leaves a source (or, back, the destination) on this node.
#[derive(Debug, Clone, Copy)]
pub(super) enum Steering {
    /// Straight to the other end: no transit.
    Direct,
    /// Through the transit interface: every route of the other end takes this next hop.
    Through(NextHop),
    /// Not at all from this node (a note says why).
    Closed,
}

/// The transit of policy `p`: `None` without one, else the pod's interface on its transit
/// network or why there is none.
pub(super) fn transit<'w>(
    world: &'w World,
    p: &RoutingModel,
) -> Option<Result<Transit<'w>, String>> {
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

/// How policy `p`'s path leaves its end `from` on this node (`way`: a source toward the
/// destination, or back the destination toward source `toward`); what closes it is noted in
/// `notes`.
pub(super) fn steering(
    ctx: &Ctx<'_>,
    p: &RoutingModel,
    from: &NetworkModel,
    (way, toward): (Way, &str),
    notes: &mut Vec<Note>,
) -> Steering {
    let mut closed = |kind, message: String| {
        notes.push(Note {
            kind,
            object: format!("NetworkRoutingPolicy {}", p.name),
            message,
        });
        Steering::Closed
    };
    if let (Some(gw), Way::Toward) = (p.gateway, way) {
        return match through_gateway(ctx, p, from, gw) {
            Ok((nh, None)) => Steering::Through(nh),
            Ok((nh, Some(down))) => {
                closed(NoteKind::Down, down);
                Steering::Through(nh)
            }
            Err(why) => closed(NoteKind::Inconsistent, why),
        };
    }
    let t = match transit(ctx.world, p) {
        None => return Steering::Direct,
        Some(Err(e)) => return closed(NoteKind::Inconsistent, e),
        Some(Ok(t)) => t,
    };
    if t.endpoint.node == ctx.me.name {
        return Steering::Through(NextHop::Local {
            port: t.endpoint.port,
            mac: t.endpoint.mac,
        });
    }
    let Some(node) = ctx.world.nodes.get(&t.endpoint.node) else {
        return closed(
            NoteKind::Inconsistent,
            format!(
                "transit endpoint {}/{} is on node {}, which is not in the world (no \
                 locator); the path toward {toward} is closed here",
                t.endpoint.namespace, t.endpoint.pod, t.endpoint.node
            ),
        );
    };
    match encode_sid(node.locator, SidFunction::EndDt46, from.id) {
        Ok(sid) => Steering::Through(NextHop::Remote { node: node.id, sid }),
        Err(e) => closed(
            NoteKind::Inconsistent,
            format!(
                "no SID of network {} on node {} toward the transit: {e}",
                from.name, node.name
            ),
        ),
    }
}

/// The next hop of a path from `from` to gateway `gw` of policy `p`'s external destination on
/// this node, with why it is down when it is; `Err`: why there is none.
fn through_gateway(
    ctx: &Ctx<'_>,
    p: &RoutingModel,
    from: &NetworkModel,
    gw: IpAddr,
) -> Result<(NextHop, Option<String>), String> {
    let me = &ctx.me.name;
    let Some(ext) = ctx
        .world
        .networks
        .get(&p.destination)
        .filter(|d| d.kind == NetworkType::External)
    else {
        return Err(format!(
            "spec.nextHop.gateway {gw}: the destination {} is not an external network",
            p.destination
        ));
    };
    if let Some((i, up)) = external::uplink_of(ext, &ctx.me.labels) {
        let side = UplinkSide::of(ctx, up).map_err(|why| {
            format!(
                "spec.nextHop.gateway {gw} is not used on node {me}: network {}'s \
                 spec.uplinks[{i}] selects the node, {why}",
                ext.name
            )
        })?;
        let nh = side.next_hop(gw).map_err(|why| {
            format!("spec.nextHop.gateway {gw} is not used on node {me}: the next hop {why}")
        })?;
        let down = side
            .down(ctx, gw)
            .map(|why| format!("spec.nextHop.gateway {gw} is down on node {me}: {why}"));
        return Ok((nh, down));
    }
    let Some(carrier) = external::carrier(ctx, ext) else {
        return Err(format!(
            "spec.nextHop.gateway {gw}: no node carries network {} (no spec.uplinks[] entry \
             selects a node's labels)",
            ext.name
        ));
    };
    let sid = encode_sid(carrier.locator, SidFunction::EndDt46, from.id).map_err(|e| {
        format!(
            "no SID of network {} on node {} toward the gateway: {e}",
            from.name, carrier.name
        )
    })?;
    Ok((
        NextHop::Remote {
            node: carrier.id,
            sid,
        },
        None,
    ))
}

/// Whether this node programs network `name` for the paths of others: an end of a path
/// through a transit here, or a source of a path to an uplink gateway of an external network
/// it carries. The other nodes send those packets to its End.DT46 SID here ([`steering`]).
pub(super) fn carries_an_end(ctx: &Ctx<'_>, name: &str) -> bool {
    ctx.world.routing.iter().any(|p| {
        let source = p.sources.iter().any(|s| s == name);
        let through_here = (source || p.destination == name)
            && matches!(transit(ctx.world, p), Some(Ok(t)) if t.endpoint.node == ctx.me.name);
        let out_here = source
            && p.gateway.is_some()
            && ctx
                .world
                .networks
                .get(&p.destination)
                .is_some_and(|d| external::uplink_of(d, &ctx.me.labels).is_some());
        through_here || out_here
    })
}

/// The ports of this node's transit interfaces on network `name`.
pub(super) fn transit_ports(ctx: &Ctx<'_>, name: &str) -> BTreeSet<PortId> {
    ctx.world
        .routing
        .iter()
        .filter_map(|p| transit(ctx.world, p)?.ok())
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
