//! The world as control sees it, parsed and validated: the input of the compiler.
//!
//! Sources (the standalone directory, later the Kubernetes watcher) deliver API objects; the
//! daemon validates them, assigns ids, runs IPAM and binding, and keeps this model. The
//! compiler ([`crate::compile`]) is a pure function of it and one node's name. Everything
//! here is plain data with addresses parsed — no strings left to validate, no I/O.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use lace_shared::types::{IfName, MacAddr, NetworkId, NodeId, PortId};

use crate::api::{Direction, NetworkType};

/// A validated network with its data-plane id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkModel {
    /// `metadata.name`.
    pub name: String,
    /// `status.id`.
    pub id: NetworkId,
    /// `spec.type`.
    pub kind: NetworkType,
    /// IPv4 subnet and (l3) block length.
    pub v4: Option<(Ipv4Net, Option<u8>)>,
    /// IPv6 subnet and (l3) block length.
    pub v6: Option<(Ipv6Net, Option<u8>)>,
    /// External prefixes.
    pub external: Vec<IpNet>,
    /// `spec.anonymous`.
    pub anonymous: bool,
}

/// A node of the cluster with its SRv6 locator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeModel {
    /// `metadata.name` of the Node.
    pub name: String,
    /// Data-plane id.
    pub id: NodeId,
    /// SRv6 locator.
    pub locator: Ipv6Net,
    /// Underlay (uplink) address.
    pub underlay: Ipv6Addr,
}

/// Identifies an attachment the way CNI does: (container id, interface in the container).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttachmentKey {
    /// CNI container id.
    pub container_id: String,
    /// Interface name in the container (`eth0`).
    pub ifname: String,
}

/// One attached pod interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointModel {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// The network it is attached to.
    pub network: String,
    /// Node it runs on.
    pub node: String,
    /// Its addresses (one per family at most).
    pub addresses: Vec<IpAddr>,
    /// Its MAC.
    pub mac: MacAddr,
    /// Forwarder port on its node.
    pub port: PortId,
    /// Host-side interface the forwarder attaches.
    pub host_iface: IfName,
    /// Stable endpoint id (status acknowledgements, counters).
    pub endpoint_id: u64,
}

/// An accepted routing policy, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingModel {
    /// `metadata.name`.
    pub name: String,
    /// `spec.priority`.
    pub priority: i32,
    /// Source networks.
    pub sources: Vec<String>,
    /// Destination network.
    pub destination: String,
    /// Narrowing prefixes (empty: the whole destination).
    pub prefixes: Vec<IpNet>,
    /// Direction.
    pub direction: Direction,
}

/// Everything the compiler needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct World {
    /// Networks by name.
    pub networks: BTreeMap<String, NetworkModel>,
    /// Nodes by name.
    pub nodes: BTreeMap<String, NodeModel>,
    /// Host-local blocks: (network, node) → one block per family.
    pub allocations: BTreeMap<(String, String), Vec<IpNet>>,
    /// Attached endpoints.
    pub endpoints: BTreeMap<AttachmentKey, EndpointModel>,
    /// Accepted routing policies, in precedence order.
    pub routing: Vec<RoutingModel>,
}
