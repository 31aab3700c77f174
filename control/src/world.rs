//! The world as control sees it, parsed and validated: the input of the compiler.
//!
//! Sources (the standalone directory, later the Kubernetes watcher) deliver API objects; the
//! daemon validates them, assigns ids, runs IPAM and binding, and keeps this model. The
//! compiler ([`crate::compile`]) is a pure function of it and one node's name. Everything
//! here is plain data with addresses parsed — no strings left to validate, no I/O.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use lace_shared::policy::Backend;
use lace_shared::status::ExternalUplink;
use lace_shared::types::{IfName, MacAddr, NetworkId, NodeId, PortId};

use crate::api::{Direction, NetworkType};
use crate::bind::{Labels, Requirement};
use crate::netpol::NAMESPACE_NAME_LABEL;
pub use crate::netpol::{BoundPolicy, ContainerPort};
use crate::service::{Protocol, ServiceBackend};
pub use crate::source::NamespacedName;

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
    /// `spec.l2`, defaults applied (l2 networks; the defaults elsewhere).
    pub l2: L2Config,
    /// `spec.uplinks` (external networks), in order: on each node the first entry whose
    /// selector matches the node's labels applies.
    pub uplinks: Vec<UplinkModel>,
}

/// One `spec.uplinks[]` entry of an external network (ADR 0054).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UplinkModel {
    /// `nodeSelector`, compiled (empty: every node).
    pub node_selector: Vec<Requirement>,
    /// `interface`: the `[[uplink.external]]` entry of the node's forwarder that carries the
    /// network (none: any of them).
    pub interface: Option<String>,
    /// `vlan`.
    pub vlan: Option<u16>,
    /// `staticRoutes`: (destination, next hop), in order.
    pub static_routes: Vec<(IpNet, IpAddr)>,
}

impl UplinkModel {
    /// Whether the entry applies to a node with `labels`.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.node_selector.iter().all(|r| r.holds(labels))
    }
}

/// An l2 network's learning and BUM limit (`spec.l2`, ADR 0019), defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2Config {
    /// Learning on, with this aging time in seconds.
    pub learning: Option<std::num::NonZeroU32>,
    /// BUM frames per second per source endpoint (0: unlimited).
    pub bum_pps: u32,
    /// BUM burst per source endpoint.
    pub bum_burst: u32,
}

impl Default for L2Config {
    fn default() -> Self {
        L2Config {
            learning: None,
            bum_pps: crate::api::limits::DEFAULT_BUM_PPS,
            bum_burst: crate::api::limits::DEFAULT_BUM_BURST,
        }
    }
}

impl L2Config {
    /// What the forwarder applies.
    pub fn settings(&self) -> lace_shared::types::L2Settings {
        lace_shared::types::L2Settings {
            learning: self.learning,
            bum_pps: self.bum_pps,
            bum_burst: self.bum_burst,
        }
    }
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
    /// The node's own addresses (`status.addresses`, `InternalIP`): every l3 network routes
    /// them to the node's host network SID, where its host interface takes them (ADR 0036).
    pub addresses: Vec<IpAddr>,
    /// The Node's labels (external networks' `spec.uplinks[].nodeSelector` select by them).
    pub labels: BTreeMap<String, String>,
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
    /// `spec.nextHop.endpoint`: the pod the path crosses (ADR 0057).
    pub transit: Option<NamespacedName>,
    /// `spec.nextHop.gateway`: where a path toward an external network leaves the uplink.
    pub gateway: Option<IpAddr>,
}

/// A ClusterIP Service bound to a network, with its backends resolved (see [`crate::service`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceModel {
    /// The network it is bound to (an l3 network of the world).
    pub network: String,
    /// Its ClusterIPs, at most one per family.
    pub cluster_ips: Vec<IpAddr>,
    /// `sessionAffinity: ClientIP`'s timeout in seconds.
    pub affinity_timeout_s: Option<u32>,
    /// `internalTrafficPolicy: Local`: each node uses the backends on it only.
    pub node_local: bool,
    /// Its ports.
    pub ports: Vec<ServicePortModel>,
}

impl ServiceModel {
    /// The backends of `port` that `node`'s clients use: every one, or for a node-local
    /// Service those on `node`.
    pub fn backends_on(&self, port: &ServicePortModel, node: &str) -> Vec<Backend> {
        port.backends
            .iter()
            .filter(|b| !self.node_local || b.node.as_deref() == Some(node))
            .map(|b| b.backend)
            .collect()
    }
}

/// One port of a [`ServiceModel`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePortModel {
    /// `name` (empty for a single unnamed port).
    pub name: String,
    /// Protocol.
    pub protocol: Protocol,
    /// The port on the ClusterIPs.
    pub port: u16,
    /// Every backend with its conditions and node (both families, sorted by address and
    /// port); each ClusterIP uses those of its family.
    pub backends: Vec<ServiceBackend>,
}

/// A pod as Kubernetes NetworkPolicy sees it (its addresses are its endpoints').
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodModel {
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// Its named container ports (what named ports in policies resolve against).
    pub ports: Vec<ContainerPort>,
}

/// A namespace's labels as selectors see them: its object's labels (if any) and
/// `kubernetes.io/metadata.name`, which the API server sets on every namespace.
#[derive(Debug, Clone, Copy)]
pub struct NamespaceLabels<'a> {
    name: &'a str,
    labels: Option<&'a BTreeMap<String, String>>,
}

impl Labels for NamespaceLabels<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        if key == NAMESPACE_NAME_LABEL {
            return Some(self.name);
        }
        self.labels.and_then(|l| l.get(key)).map(String::as_str)
    }
}

/// The node's host interface: the port through which the node's own network stack reaches its
/// pods (ADR 0023).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostModel {
    /// The forwarder's end of the interface (the port's interface).
    pub iface: IfName,
    /// The host end's MAC: where packets to the node are delivered.
    pub mac: MacAddr,
    /// The port's endpoint id (a new one when the interface is made again).
    pub endpoint: u64,
    /// The node's addresses (`status.addresses`, `InternalIP`): pods of every network reach
    /// them.
    pub addresses: Vec<IpAddr>,
}

/// A MAC of an l2 network that control's learning records place (ADR 0019): one learned from
/// an announcement, or an identity several endpoints share (placed at its active location).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnedModel {
    /// The node of the location.
    pub node: String,
    /// The endpoint there (its pod port is where the MAC's frames go).
    pub endpoint_id: u64,
    /// Addresses learned with the MAC (none for an identity: its endpoints hold them).
    pub addresses: Vec<IpAddr>,
    /// Mobility sequence number: the highest is the newest location.
    pub sequence: u32,
    /// An identity shared by several endpoints (else a learned MAC).
    pub identity: bool,
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
    /// l2 MACs placed by control's learning records, by (network, MAC).
    pub learned: BTreeMap<(String, MacAddr), LearnedModel>,
    /// This node's host interface, if it has one.
    pub host: Option<HostModel>,
    /// ClusterIP Services bound to l3 networks, with unique ClusterIPs.
    pub services: BTreeMap<NamespacedName, ServiceModel>,
    /// Pods with their labels and named ports (Kubernetes NetworkPolicy selects them).
    pub pods: BTreeMap<NamespacedName, PodModel>,
    /// Namespaces' labels, of those that exist as objects.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Valid Kubernetes NetworkPolicies with their binding.
    pub network_policies: BTreeMap<NamespacedName, BoundPolicy>,
    /// This node's `[[uplink.external]]` entries, as its forwarder publishes them in its
    /// status region (ADR 0054): the subnets a static route's next hop must lie on.
    pub external_uplinks: Vec<ExternalUplink>,
    /// The uplink's next hops traffic waits for that do not answer, each with its VLAN (0:
    /// untagged), as this node's forwarder publishes them (sorted): routes through them are
    /// down.
    pub unresolved: Vec<(u16, IpAddr)>,
}

impl World {
    /// The labels of namespace `name` (see [`NamespaceLabels`]).
    pub fn namespace_labels<'a>(&'a self, name: &'a str) -> NamespaceLabels<'a> {
        NamespaceLabels {
            name,
            labels: self.namespaces.get(name),
        }
    }

    /// The pod an endpoint belongs to, if the world has it.
    pub fn pod_of(&self, e: &EndpointModel) -> Option<&PodModel> {
        self.pods
            .get(&NamespacedName::new(e.namespace.clone(), e.pod.clone()))
    }
}
