//! The pure evaluator: what Kubernetes NetworkPolicy says about one NEW connection, straight
//! from the definitions — no classes, no sets, no tables. It is the oracle the compiled tables
//! are tested against (`tests/conformance`), so it is written for obviousness, not speed.
//!
//! A connection is allowed when the source side allows it to leave and the destination side
//! allows it in:
//!
//! - **Egress** (the source is a pod endpoint): allowed if no policy that applies to the
//!   endpoint isolates it for egress; else if some egress rule of those policies matches the
//!   destination as a peer and the protocol/port (named ports resolved against the destination
//!   pod's container ports; a destination that is not a pod resolves none).
//! - **Ingress** (the destination is a pod endpoint): the same with ingress rules, the source as
//!   the peer, and named ports resolved against the destination pod. A connection from the
//!   node a pod runs on is always allowed in (kubelet's probes; the forwarder's host port).
//!
//! A policy *applies* to an endpoint (a pod's interface on one network) when it selects the
//! pod (same namespace, `podSelector` matches) and it is bound to the endpoint's network or to
//! none. A pod peer is the pod with every address it has; an address that belongs to a pod is
//! that pod, whatever side names it. Replies of an allowed connection are the flow table's
//! business, not the evaluator's.

use std::net::IpAddr;

use crate::world::{AttachmentKey, EndpointModel, PodModel, World};

use super::model::{ContainerPort, Peer, PolicyModel, Rule};

/// One side of a connection.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// A pod's endpoint, with the address the connection uses.
    Pod {
        /// The endpoint.
        endpoint: AttachmentKey,
        /// Its address the connection uses.
        addr: IpAddr,
    },
    /// Any other address (outside the cluster, or a free one).
    Address(IpAddr),
    /// A node's own stack (kubelet, host processes), with the address it uses.
    Node {
        /// The node's name.
        name: String,
        /// The address it uses.
        addr: IpAddr,
    },
}

impl Side {
    /// The address this side uses.
    pub fn addr(&self) -> IpAddr {
        match self {
            Side::Pod { addr, .. } | Side::Address(addr) | Side::Node { addr, .. } => *addr,
        }
    }
}

/// A NEW connection: from `src` to `dst`, IP protocol `proto`, destination port `port` (0 for
/// protocols without ports).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Connection {
    /// Who opens it.
    pub src: Side,
    /// Who it is opened to.
    pub dst: Side,
    /// IP protocol.
    pub proto: u8,
    /// Destination port.
    pub port: u16,
}

/// What each side's policies say about a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Verdict {
    /// The source's egress allows it (true when the source is not an isolated pod).
    pub egress: bool,
    /// The destination's ingress allows it (true when the destination is not an isolated pod).
    pub ingress: bool,
}

impl Verdict {
    /// Both sides allow it.
    pub fn allowed(&self) -> bool {
        self.egress && self.ingress
    }
}

/// A pod as a peer: its namespace, labels and ports.
struct PodPeer<'a> {
    namespace: &'a str,
    pod: Option<&'a PodModel>,
}

/// The pod (if any) behind a side.
fn pod_of_side<'a>(world: &'a World, side: &Side) -> Option<(&'a EndpointModel, PodPeer<'a>)> {
    let e = match side {
        Side::Pod { endpoint, .. } => world.endpoints.get(endpoint)?,
        Side::Address(a) | Side::Node { addr: a, .. } => {
            world.endpoints.values().find(|e| e.addresses.contains(a))?
        }
    };
    Some((
        e,
        PodPeer {
            namespace: &e.namespace,
            pod: world.pod_of(e),
        },
    ))
}

/// Whether `peer` names the other side of the connection (`addr`, and its pod if any).
fn peer_matches(world: &World, peer: &Peer, addr: IpAddr, pod: Option<&PodPeer<'_>>) -> bool {
    match peer {
        Peer::Block(b) => b.contains(addr),
        Peer::Pods { .. } => pod.is_some_and(|p| {
            let empty = Default::default();
            let labels = p.pod.map_or(&empty, |m| &m.labels);
            peer.selects_pod(p.namespace, &world.namespace_labels(p.namespace), labels)
        }),
    }
}

/// What the rules of one side are matched against: the other side (the peer) and the
/// destination's protocol and port.
struct Other<'a> {
    addr: IpAddr,
    pod: Option<&'a PodPeer<'a>>,
    /// The destination pod's container ports (named ports resolve against them).
    dest_ports: Option<&'a [ContainerPort]>,
    proto: u8,
    port: u16,
}

fn rule_matches(world: &World, rule: &Rule, o: &Other<'_>) -> bool {
    let peer_ok = rule.peers.is_empty()
        || rule
            .peers
            .iter()
            .any(|p| peer_matches(world, p, o.addr, o.pod));
    let port_ok = rule.ports.is_empty()
        || rule
            .ports
            .iter()
            .any(|m| m.matches(o.dest_ports, o.proto, o.port));
    peer_ok && port_ok
}

/// The policies that apply to endpoint `e` (see the module docs).
pub fn applying<'a>(
    world: &'a World,
    e: &'a EndpointModel,
) -> impl Iterator<Item = &'a PolicyModel> + 'a {
    let empty = &EMPTY_LABELS;
    let labels = world.pod_of(e).map_or(empty, |p| &p.labels);
    world.network_policies.values().filter_map(move |b| {
        let on_network = b.network.as_ref().is_none_or(|n| *n == e.network);
        (on_network && b.model.selects(&e.namespace, labels)).then_some(&b.model)
    })
}

static EMPTY_LABELS: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();

/// Whether the policies applying to endpoint `e` allow the connection in (`ingress`) or out:
/// true when none of them isolates `e` for that direction.
fn side_allows(world: &World, e: &EndpointModel, ingress: bool, other: &Other<'_>) -> bool {
    let mut isolated = false;
    for p in applying(world, e) {
        let rules = if ingress { &p.ingress } else { &p.egress };
        if let Some(rules) = rules {
            isolated = true;
            if rules.iter().any(|r| rule_matches(world, r, other)) {
                return true;
            }
        }
    }
    !isolated
}

/// What NetworkPolicy says about connection `c` in `world`.
pub fn evaluate(world: &World, c: &Connection) -> Verdict {
    let src = pod_of_side(world, &c.src);
    let dst = pod_of_side(world, &c.dst);
    let dest_ports = dst
        .as_ref()
        .and_then(|(_, p)| p.pod)
        .map(|p| p.ports.as_slice());
    // A node's own stack is never a pod's egress; everything else from a pod's address is.
    let egress = match (&c.src, &src) {
        (Side::Node { .. }, _) | (_, None) => true,
        (_, Some((e, _))) => side_allows(
            world,
            e,
            false,
            &Other {
                addr: c.dst.addr(),
                pod: dst.as_ref().map(|(_, p)| p),
                dest_ports,
                proto: c.proto,
                port: c.port,
            },
        ),
    };
    let ingress = match &dst {
        None => true,
        Some((e, _)) if matches!(&c.src, Side::Node { name, .. } if *name == e.node) => true,
        Some((e, _)) => side_allows(
            world,
            e,
            true,
            &Other {
                addr: c.src.addr(),
                pod: src.as_ref().map(|(_, p)| p),
                dest_ports,
                proto: c.proto,
                port: c.port,
            },
        ),
    };
    Verdict { egress, ingress }
}
