//! The `lace-cni.io/v1alpha1` API.
//!
//! | kind | scope | what it is | written by |
//! |---|---|---|---|
//! | [`Network`] | cluster | an isolated network: `l3`, `l2` or `external` (the seed's "Networks") | users; `status` by control |
//! | [`NetworkBindingPolicy`] | cluster | which network a pod / service / NetworkPolicy binds to (priorities, selectors, CEL) | users |
//! | [`NetworkRoutingPolicy`] | cluster | a path between networks (the seed's "Topology") | users |
//! | [`NetworkEndpoint`] | namespaced | one attached pod interface: network, addresses, MAC, node | control |
//! | [`Allocation`] | cluster | one node's host-local block(s) of one network | control |
//! | [`Neighbor`] | cluster | an l2 address → MAC, from an endpoint or learned | control |
//! | [`FdbEntry`] | cluster | an l2 MAC → location, with a mobility sequence number | control |
//! | [`NodeLocator`] | cluster | a node's SRv6 locator, underlay address and data-plane id | control |
//! | [`Claim`] | cluster | a cluster-wide value taken by a Network or node: a network's `status.id`, a node's id or locator (ADR 0045) | control |
//!
//! Field names follow the seed (`spec.type`, `ipv4Subnet.prefix`, `hostLocalPrefixLength`,
//! `externalPrefixes`, `anonymous`, `status.id`; `priority`, `matchKind`, `rules`,
//! `celExpression`, `policy`, `selector`). Addresses and prefixes are strings in the API (so a
//! bad one is a validation error with a message, not a decode failure) and parsed by
//! validation.

pub mod crd;
pub mod limits;
pub mod schema;
pub mod validate;

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group.
pub const GROUP: &str = "lace-cni.io";
/// The API version.
pub const VERSION: &str = "v1alpha1";

// ---- conditions --------------------------------------------------------------------------------

/// A standard Kubernetes condition (`metav1.Condition`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `Ready`, `CELValid`, `Accepted`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason in CamelCase.
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// The `metadata.generation` the condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

// ---- Network -----------------------------------------------------------------------------------

/// `spec.type` of a [`Network`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum NetworkType {
    /// Routed, host-local IPAM, SRv6 between nodes (typical CNI network).
    #[serde(rename = "l3")]
    L3,
    /// Flat L2 domain, global IPAM (KubeVirt VMs).
    #[serde(rename = "l2")]
    L2,
    /// Underlay prefixes outside the cluster, no IPAM.
    #[serde(rename = "external")]
    External,
}

impl NetworkType {
    /// The name a user writes in `spec.type`: `l3`, `l2`, `external`.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkType::L3 => "l3",
            NetworkType::L2 => "l2",
            NetworkType::External => "external",
        }
    }
}

impl std::fmt::Display for NetworkType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A subnet of an l3 or l2 network, per address family.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subnet {
    /// The subnet CIDR.
    pub prefix: String,
    /// l3 only: the size of the block carved out per node (host-local IPAM); between the
    /// prefix length and the address width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_local_prefix_length: Option<u8>,
}

/// Where an external network meets the underlay on the nodes a selector picks (Calico VRF's
/// `hostConfig`): first matching entry wins per node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UplinkAttachment {
    /// Nodes this entry applies to (label selector); omitted or empty = every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// The uplink interface carrying the network (e.g. `eth1`, a VF, or a bond).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// 802.1Q VLAN id on that interface, if the network is tagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// Static routes in the network's table on those nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub static_routes: Vec<StaticRoute>,
}

/// A static route with a next hop.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaticRoute {
    /// Destination CIDR (`0.0.0.0/0` for a default route).
    pub destination: String,
    /// Gateway address, reachable on the uplink.
    pub next_hop: String,
}

/// A lace network (the seed's Network).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "lace-cni.io",
    version = "v1alpha1",
    kind = "Network",
    derive = "PartialEq",
    plural = "networks",
    status = "NetworkStatus",
    shortname = "lnet",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"IPv4","type":"string","jsonPath":".spec.ipv4Subnet.prefix"}"#,
    printcolumn = r#"{"name":"IPv6","type":"string","jsonPath":".spec.ipv6Subnet.prefix"}"#,
    printcolumn = r#"{"name":"ID","type":"integer","jsonPath":".status.id"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    /// `l3`, `l2` or `external`. Immutable.
    #[serde(rename = "type")]
    pub type_: NetworkType,
    /// IPv4 subnet (l3/l2). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4_subnet: Option<Subnet>,
    /// IPv6 subnet (l3/l2). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_subnet: Option<Subnet>,
    /// The CIDRs reachable through an external network; at least one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_prefixes: Vec<String>,
    /// Suppresses the implicit self-route.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub anonymous: bool,
    /// External networks: where they meet the underlay, per node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uplinks: Vec<UplinkAttachment>,
    /// l2 networks: MAC learning and the broadcast limit (ADR 0019). Mutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2: Option<L2Spec>,
}

/// `spec.l2` of an l2 [`Network`]: learning and the BUM limit.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct L2Spec {
    /// MAC learning: addresses and MACs the network's endpoints announce (gratuitous ARP,
    /// unsolicited NA, a VM's RARP after a migration) are learned and may move between
    /// locations; unknown unicast is flooded. Off by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning: Option<Learning>,
    /// How much broadcast, multicast and unknown unicast each endpoint may send, on the node it
    /// is attached to. Default 1000 packets per second, bursts of 200.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bum_limit: Option<BumLimit>,
}

/// `spec.l2.learning`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Learning {
    /// Learning on. Default false.
    #[serde(default)]
    pub enabled: bool,
    /// A learned MAC no longer seen for this long is forgotten: 30..=86400 seconds, default
    /// 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aging_seconds: Option<u32>,
}

/// `spec.l2.bumLimit`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BumLimit {
    /// Frames per second per source endpoint: 0 (unlimited) ..= 10,000,000; default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets_per_second: Option<u32>,
    /// Frames one endpoint may send at once: 1..=1,000,000; default 200.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// Status of a [`Network`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    /// The numeric id used in the data plane; unique, stable, never reused while the network
    /// exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    /// `Ready`, `Valid`, `AddressesAvailable`, `Supported`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

// ---- selectors ---------------------------------------------------------------------------------

/// A label selector requirement (`metav1.LabelSelectorRequirement`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In`/`NotIn`; empty for `Exists`/`DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A label selector (`metav1.LabelSelector`): all requirements must hold; empty selects all.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Exact label matches.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// Selects the resources a binding rule applies to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// The resource's name (exact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Exact label matches.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
    /// Further scopes the match to namespaces whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
}

// ---- NetworkBindingPolicy ----------------------------------------------------------------------

/// A kind of resource a binding policy applies to (`spec.matchKind`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MatchKind {
    /// Pods: matched once, at creation.
    #[serde(rename = "pod")]
    Pod,
    /// Services: matched continuously.
    #[serde(rename = "service")]
    Service,
    /// Kubernetes NetworkPolicy objects, bound to the network they are enforced in.
    #[serde(rename = "networkpolicy")]
    NetworkPolicy,
}

/// `allow` binds a network; `deny` shields it from lower-priority policies.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum RulePolicy {
    /// Bind the network (default).
    #[default]
    #[serde(rename = "allow")]
    Allow,
    /// Shield the named network from lower-priority policies.
    #[serde(rename = "deny")]
    Deny,
}

/// One rule of a binding policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingRule {
    /// The static network the rule binds to, or (deny) shields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Derives the network name from the resource (`object`); must evaluate to an optional
    /// string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel_expression: Option<String>,
    /// `allow` (default) or `deny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<RulePolicy>,
    /// Which resources the rule applies to; omitted = all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ResourceSelector>,
}

/// Decides which network a resource binds to.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "lace-cni.io",
    version = "v1alpha1",
    kind = "NetworkBindingPolicy",
    derive = "PartialEq",
    plural = "networkbindingpolicies",
    status = "PolicyStatus",
    shortname = "lnbp",
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"CELValid","type":"string","jsonPath":".status.conditions[?(@.type==\"CELValid\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkBindingPolicySpec {
    /// Lowest value takes precedence; ties broken by name. Default 0.
    #[serde(default)]
    pub priority: i32,
    /// Kinds the policy applies to; omitted matches every kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_kind: Option<Vec<MatchKind>>,
    /// Ordered rules; at least one.
    pub rules: Vec<BindingRule>,
}

/// Status of a policy: `CELValid` (binding), `Valid`, `Accepted` / `Supported` (routing).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

// ---- NetworkRoutingPolicy ----------------------------------------------------------------------

/// Which way a routing policy opens a path.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Direction {
    /// Sources reach the destination and the destination reaches the sources (default).
    #[default]
    #[serde(rename = "bidirectional")]
    Bidirectional,
    /// Sources reach the destination; replies of those connections come back (stateful), new
    /// connections from the destination do not.
    #[serde(rename = "sourceToDestination")]
    SourceToDestination,
}

/// Where a routing policy leads.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteDestination {
    /// The destination network (l3, l2 or external).
    pub network: String,
    /// Narrows the path to these prefixes of the destination (for an external network: of
    /// its `externalPrefixes`); empty = the whole network.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefixes: Vec<String>,
}

/// A pod acting as transit for the path (e.g. a firewall VM).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointRef {
    /// Namespace of the pod.
    pub namespace: String,
    /// Name of the pod.
    pub name: String,
}

/// How traffic on the path leaves: through a transit endpoint or an uplink gateway.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteNextHop {
    /// A transit endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<EndpointRef>,
    /// An uplink gateway address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

/// Opens a path from source networks to a destination (the seed's "Topology").
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "lace-cni.io",
    version = "v1alpha1",
    kind = "NetworkRoutingPolicy",
    derive = "PartialEq",
    plural = "networkroutingpolicies",
    status = "PolicyStatus",
    shortname = "lnrp",
    printcolumn = r#"{"name":"Destination","type":"string","jsonPath":".spec.destination.network"}"#,
    printcolumn = r#"{"name":"Direction","type":"string","jsonPath":".spec.direction"}"#,
    printcolumn = r#"{"name":"Accepted","type":"string","jsonPath":".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRoutingPolicySpec {
    /// Lowest value takes precedence; ties broken by name. Default 0.
    #[serde(default)]
    pub priority: i32,
    /// Networks whose endpoints get the path; at least one.
    pub sources: Vec<String>,
    /// Where the path leads.
    pub destination: RouteDestination,
    /// Optional transit next hop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_hop: Option<RouteNextHop>,
    /// `bidirectional` (default) or `sourceToDestination`.
    #[serde(default)]
    pub direction: Direction,
}

// ---- resources written by control ------------------------------------------------------------

/// One attached pod interface, written by the control of its node (Kubernetes mode) in the
/// pod's namespace with the Pod as owner, so it goes with the pod (ADR 0015).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "lace-cni.io",
    version = "v1alpha1",
    kind = "NetworkEndpoint",
    plural = "networkendpoints",
    namespaced,
    shortname = "lnep",
    printcolumn = r#"{"name":"Network","type":"string","jsonPath":".spec.network"}"#,
    printcolumn = r#"{"name":"Pod","type":"string","jsonPath":".spec.pod"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"Addresses","type":"string","jsonPath":".spec.addresses"}"#,
    printcolumn = r#"{"name":"MAC","type":"string","jsonPath":".spec.mac"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkEndpointSpec {
    /// The network.
    pub network: String,
    /// The network's `status.id` when the endpoint was made: an endpoint of an earlier network
    /// of the same name is stale.
    pub network_id: u32,
    /// The pod's name.
    pub pod: String,
    /// The pod's `metadata.uid` (`K8S_POD_UID`), when the runtime passed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// Node the pod runs on.
    pub node: String,
    /// Interface in the pod (`eth0`).
    pub interface: String,
    /// The CNI container id.
    pub container_id: String,
    /// The interface's addresses as the pod has them: a host prefix on an l3 network
    /// (`10.40.3.7/32`), the subnet's length on an l2 one (`10.50.0.7/24`).
    pub addresses: Vec<String>,
    /// The interface's MAC.
    pub mac: String,
    /// The host-side interface the forwarder attaches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_interface: Option<String>,
    /// The forwarder port on the node (1–4094).
    pub port: u32,
    /// The id the forwarder acknowledges the port with: the node's id in the high 32 bits, a
    /// per-node counter in the low ones; never reused on the node.
    pub endpoint_id: u64,
    /// The sticky l2 identity (`l2.lace-cni.io/identity`) whose addresses and MAC the endpoint
    /// shares with the other endpoints of its namespace and network that carry it (ADR 0019).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

/// One node's block(s) of one network (host-local IPAM).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "lace-cni.io",
    version = "v1alpha1",
    kind = "Allocation",
    plural = "allocations",
    shortname = "lalloc",
    printcolumn = r#"{"name":"Network","type":"string","jsonPath":".spec.network"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"Prefixes","type":"string","jsonPath":".spec.prefixes"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AllocationSpec {
    /// The network.
    pub network: String,
    /// The node.
    pub node: String,
    /// The blocks, one per address family.
    pub prefixes: Vec<String>,
}

/// An l2 address → MAC.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "lace-cni.io",
    version = "v1alpha1",
    kind = "Neighbor",
    plural = "neighbors",
    printcolumn = r#"{"name":"Network","type":"string","jsonPath":".spec.network"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.address"}"#,
    printcolumn = r#"{"name":"MAC","type":"string","jsonPath":".spec.mac"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NeighborSpec {
    /// The network.
    pub network: String,
    /// The IP address.
    pub address: String,
    /// Its MAC.
    pub mac: String,
    /// Learned from traffic rather than from an endpoint.
    #[serde(default)]
    pub learned: bool,
}

/// An l2 MAC → location.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "lace-cni.io",
    version = "v1alpha1",
    kind = "FDBEntry",
    plural = "fdbentries",
    printcolumn = r#"{"name":"Network","type":"string","jsonPath":".spec.network"}"#,
    printcolumn = r#"{"name":"MAC","type":"string","jsonPath":".spec.mac"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct FdbEntrySpec {
    /// The network.
    pub network: String,
    /// The MAC.
    pub mac: String,
    /// The node where it lives.
    pub node: String,
    /// Mobility sequence number: the highest wins everywhere.
    #[serde(default)]
    pub sequence: u32,
    /// Learned from traffic (else a sticky identity several endpoints share).
    #[serde(default)]
    pub learned: bool,
    /// The endpoint id at `node` the MAC is behind (control's learning writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_id: Option<u64>,
    /// A sticky identity's other location (a migration's target), promoted by the VM's
    /// announcement there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<FdbLocation>,
    /// Addresses learned with the MAC (each also a `Neighbor` with `learned: true`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// When the MAC was last seen at its location (RFC 3339, milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<String>,
}

/// Where a MAC lives: an endpoint on a node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FdbLocation {
    /// The node.
    pub node: String,
    /// The endpoint id there.
    pub endpoint_id: u64,
}

/// A node's SRv6 locator record.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "lace-cni.io",
    version = "v1alpha1",
    kind = "NodeLocator",
    plural = "nodelocators",
    printcolumn = r#"{"name":"Locator","type":"string","jsonPath":".spec.locator"}"#,
    printcolumn = r#"{"name":"Underlay","type":"string","jsonPath":".spec.underlay"}"#,
    printcolumn = r#"{"name":"ID","type":"integer","jsonPath":".spec.id"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeLocatorSpec {
    /// The node's SRv6 locator, e.g. `fc00:0:3::/48`; stable, never reused while the node
    /// exists.
    pub locator: String,
    /// The node's underlay (uplink) IPv6 address.
    pub underlay: String,
    /// The node's data-plane id.
    pub id: u32,
}

/// A cluster-wide value taken by one Network or node, or the record of which values it holds
/// (Kubernetes mode, ADR 0045). A value's object is named after the value (`network-id.7`,
/// `node-id.3`, `locator.fc00-0000-0003-…-48`) and a record after its holder (`network.<name>`,
/// `node.<name>`), so creating one takes it and a second creation of that name is refused.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "lace-cni.io",
    version = "v1alpha1",
    kind = "Claim",
    plural = "claims",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.kind"}"#,
    printcolumn = r#"{"name":"Holder","type":"string","jsonPath":".spec.holder"}"#,
    printcolumn = r#"{"name":"ID","type":"integer","jsonPath":".spec.id"}"#,
    printcolumn = r#"{"name":"Locator","type":"string","jsonPath":".spec.locator"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSpec {
    /// What the object takes or records.
    pub kind: ClaimKind,
    /// The Network or node it is of.
    pub holder: String,
    /// Network and node ids and records: the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    /// Locators and node records: the locator, e.g. `fc00:0:3::/48`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locator: Option<String>,
    /// Node records: no endpoint id of the node at or above this (its low 32 bits) was handed
    /// out (the node's reservation; only the node's own control moves it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_endpoint: Option<u32>,
    /// Network records: the network's type and subnets when it took its id (they are
    /// immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<ClaimedNetwork>,
}

/// What a [`Claim`] takes or records.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum ClaimKind {
    /// A network's record: its id and immutable fields (`network.<name>`).
    Network,
    /// A node's record: its id, locator and endpoint-id reservation (`node.<name>`).
    Node,
    /// A network id taken (`network-id.<id>`).
    NetworkId,
    /// A node id taken (`node-id.<id>`).
    NodeId,
    /// A locator taken (`locator.<prefix>`).
    Locator,
}

/// A network's immutable fields, as its id [`Claim`] records them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedNetwork {
    /// `spec.type`.
    #[serde(rename = "type")]
    pub kind: NetworkType,
    /// `spec.ipv4Subnet`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4_subnet: Option<Subnet>,
    /// `spec.ipv6Subnet`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_subnet: Option<Subnet>,
}
