//! Network ids, node ids and SRv6 locators, and IP address management (the seed's "IPAM").
//!
//! [`Ipam`] owns every number control hands out, and guarantees:
//!
//! - **Network ids** (`status.id`) start at 1 and are never reused within the state's lifetime:
//!   a persisted monotonic counter, so a deleted and recreated network gets a new id and no
//!   stale table entry can ever match it ([`NetworkId::HOST`] is skipped: it names the node's
//!   host network in the tables). **Node ids** the same.
//! - **Locators**: each node gets a `/locator_len` (≤ 64) of the configured cluster pool, the
//!   lowest free one; stable per node name and never reused while the node exists.
//! - **l3 (host-local)**: the subnet is cut into `hostLocalPrefixLength` blocks; a node gets the
//!   lowest free block of each family the first time one of its pods needs it, and keeps it until
//!   the node or the network is removed (routes do not churn with pods). Where many nodes'
//!   controls take blocks at once (Kubernetes mode, [`Ipam::spread_blocks`]) each node looks
//!   from its own place in the subnet instead — a hash of its name, wrapping around — so that
//!   nodes rarely want the same block (ADR 0043). In a dual-stack network
//!   the node's blocks have the same index in both families (the lowest index free in both), so
//!   one block names the pair (the `Allocation` object of Kubernetes mode, ADR 0015). A node has exactly one
//!   block per family: when it is full, ADD fails with [`IpamError::BlockExhausted`] — no second
//!   block, because the node's gateway is the first address of *its* block and the forwarder
//!   holds one gateway per family and network ([`lace_shared::types::NetworkInfo`]).
//! - **l2 (global)**: addresses come straight from the subnet, skipping addresses claimed
//!   elsewhere that this state holds no lease for ([`Ipam::set_claim`]: in Kubernetes mode, the
//!   `Neighbor` claims of other nodes' allocations in flight, and learned addresses).
//! - **Gateways and reserved addresses** are never handed to a pod: see [`PrefixLayout`]. Pod
//!   addresses are the lowest free ones (a released address is the next one handed out).
//! - **Dual stack**: one address per family the network has, all or nothing.
//! - **Idempotence**: allocations are keyed by (container id, interface) ([`AttachmentKey`]). A
//!   retried ADD with the same key, network, node and pod returns the same lease; the same key
//!   with anything else — another pod UID too ([`PodRef::same_pod`]) — is
//!   [`IpamError::AlreadyExists`] (CNI spec: an interface that exists with another
//!   configuration). [`Ipam::release`] of an unknown key does nothing. A lease records its
//!   pod's UID when the ADD carried one.
//! - **Per attachment**: a forwarder port id (lowest free of 1..[`MAX_PORTS`] − 1 per node;
//!   the highest id is the node's host interface, [`PortId::HOST`]), a host-side interface name
//!   `lace` + 8 hex digits of a hash of (container id, interface), unique per node, and a locally
//!   administered unicast MAC `02:…` from a hash of (network id, address), unique across the
//!   state. Gateways answer with [`gateway_mac`] (`06:…`), which can never equal an endpoint's.
//! - **Endpoint ids** are the node's id in the high 32 bits and a per-node counter in the low
//!   ones: unique in the cluster, never reused on a node (the forwarder acknowledges a port by
//!   endpoint id, so a recycled one could acknowledge an interface that is gone), and each node
//!   takes them without asking anyone. Leases made before this scheme (a global counter below
//!   2^32) keep theirs.
//! - **Sticky identity (l2, ADR 0019)**: pods of one namespace and l2 network that carry the same
//!   identity (the `l2.lace-cni.io/identity` annotation: a migrating VM's source and target
//!   pods) share one set of addresses and one MAC — the first lease's; each still has its own
//!   port, host interface and endpoint id. The addresses and MAC are given back with the last
//!   lease of the identity. An identity on an l3 or external network is refused
//!   ([`IpamError::IdentityNotL2`]): there an address belongs to one node's block.
//!
//! [`Ipam`] is plain data with `&mut self` methods; [`SharedIpam`] puts it behind a mutex and
//! persists every change through [`crate::store::Store`] before answering, so concurrent ADDs
//! never get the same address and a restart never reallocates one. With a journal
//! ([`Ipam::start_journal`]) it also records which records a change touched ([`Dirty`]), so
//! that a store of one object per record writes only those.
//!
//! Call sequence for a pod: [`Ipam::ensure_network`] and [`Ipam::ensure_node`] (from the
//! sources), then per CNI call [`Ipam::allocate`] (ADD), [`Ipam::lease`] (CHECK),
//! [`Ipam::release`] (DEL), [`Ipam::gc`] (GC).

mod objects;
mod pool;
mod ranges;
mod shared;
mod state;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use lace_shared::status::MAX_PORTS;
#[cfg(doc)]
use lace_shared::types::PortKind;
use lace_shared::types::{IfName, MacAddr, NetworkId, NodeId, PortId};
use serde::{Deserialize, Serialize};

use crate::api::NetworkType;
use crate::proto::ErrorCode;
pub use crate::world::AttachmentKey;
use crate::world::NetworkModel;

pub use objects::{
    allocation_name, allocation_spec, endpoint_name, fdb_entry_name, ledger_claims,
    ledger_of_claims, locator_claim_name, neighbor_name, neighbor_spec, network_claims,
    network_id_claim_name, network_record_name, node_claims, node_id_claim_name, node_record_name,
    ClaimedLedger, NotARecord, L2_LABEL, NETWORK_LABEL, NODE_LABEL,
};
use pool::{from_u128, to_u128, width, AddressPool};
pub use pool::{gateway_of, PrefixLayout};
use ranges::FreeRanges;
pub use shared::SharedIpam;
pub use state::{BlockRecord, IpamState, LeaseRecord};

/// Where node locators come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpamConfig {
    /// The cluster's locator pool, e.g. `fc00::/32`.
    pub locator_pool: Ipv6Net,
    /// Length of each node's locator: at least the pool's length, at most 64.
    pub locator_len: u8,
}

impl Default for IpamConfig {
    /// `fc00::/32` cut into /48s (65 536 nodes).
    fn default() -> IpamConfig {
        IpamConfig {
            locator_pool: Ipv6Net::new(std::net::Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 32)
                .unwrap_or_default(),
            locator_len: 48,
        }
    }
}

/// What IPAM needs of a network: its type and subnets (the immutable part of the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkDef {
    /// `spec.type`.
    pub kind: NetworkType,
    /// `spec.ipv4Subnet`: prefix and (l3) `hostLocalPrefixLength`.
    pub v4: Option<(Ipv4Net, Option<u8>)>,
    /// `spec.ipv6Subnet`: prefix and (l3) `hostLocalPrefixLength`.
    pub v6: Option<(Ipv6Net, Option<u8>)>,
}

impl From<&NetworkModel> for NetworkDef {
    fn from(m: &NetworkModel) -> NetworkDef {
        NetworkDef {
            kind: m.kind,
            v4: m.v4,
            v6: m.v6,
        }
    }
}

/// The pod a CNI call is for (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`, `K8S_POD_UID`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`; empty when unknown (a runtime that passes no `K8S_POD_UID`, a lease
    /// made before UIDs were recorded). A pod deleted and recreated under the same name gets
    /// a new UID: it is another pod.
    pub uid: String,
}

impl PodRef {
    /// Whether both UIDs are known and differ: `self` and `other` are different pods, whatever
    /// their names.
    pub fn uid_differs(&self, other: &PodRef) -> bool {
        !self.uid.is_empty() && !other.uid.is_empty() && self.uid != other.uid
    }

    /// Whether `other` may be the same pod: the same namespace and name, and no known UIDs
    /// that differ.
    pub fn same_pod(&self, other: &PodRef) -> bool {
        self.namespace == other.namespace && self.name == other.name && !self.uid_differs(other)
    }
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)?;
        if !self.uid.is_empty() {
            write!(f, " (UID {})", self.uid)?;
        }
        Ok(())
    }
}

/// An ADD: attach `key` to `network` on `node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocateRequest {
    /// (container id, interface).
    pub key: AttachmentKey,
    /// The network the pod is bound to.
    pub network: String,
    /// The node the pod runs on.
    pub node: String,
    /// The pod.
    pub pod: PodRef,
    /// The pod's sticky l2 identity (`l2.lace-cni.io/identity`), if it asks for one.
    pub identity: Option<String>,
}

/// One address of a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseAddress {
    /// The pod's address.
    pub address: IpAddr,
    /// The on-link prefix: the node's block (l3) or the subnet (l2).
    pub prefix: IpNet,
    /// The gateway: first address of that prefix (see [`PrefixLayout`]).
    pub gateway: IpAddr,
}

impl LeaseAddress {
    /// The address with the on-link prefix length, e.g. `10.40.3.7/24`.
    pub fn with_prefix_len(&self) -> IpNet {
        // The length comes from a prefix of the same family: IpNet::new cannot fail.
        IpNet::new(self.address, self.prefix.prefix_len()).unwrap_or(self.prefix)
    }
}

/// Everything one attachment holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointLease {
    /// (container id, interface).
    pub key: AttachmentKey,
    /// The network.
    pub network: String,
    /// Its `status.id`.
    pub network_id: NetworkId,
    /// The node.
    pub node: String,
    /// The pod.
    pub pod: PodRef,
    /// One address per family of the network, IPv4 first.
    pub addresses: Vec<LeaseAddress>,
    /// The pod interface's MAC.
    pub mac: MacAddr,
    /// The forwarder port on the node.
    pub port: PortId,
    /// The host-side interface name.
    pub host_iface: IfName,
    /// Unique in the cluster, never reused on its node: the node id in the high 32 bits, a
    /// per-node counter in the low ones (see the module docs).
    pub endpoint_id: u64,
    /// The sticky l2 identity whose addresses and MAC the lease shares, if any.
    pub identity: Option<String>,
}

impl EndpointLease {
    /// Whether `self` holds `identity` of `network` for a pod of `namespace`.
    fn holds_identity(&self, network: &str, namespace: &str, identity: &str) -> bool {
        self.identity.as_deref() == Some(identity)
            && self.network == network
            && self.pod.namespace == namespace
    }
}

/// A node's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeEntry {
    /// Data-plane id.
    pub id: NodeId,
    /// SRv6 locator.
    pub locator: Ipv6Net,
}

/// Why IPAM refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpamError {
    /// The network is not known (not created yet, or deleted).
    #[error("Network {network} does not exist; create it before attaching pods to it")]
    UnknownNetwork {
        /// The network.
        network: String,
    },
    /// The node is not known.
    #[error("node {node} is not registered with lace-control; register it (NodeLocator) first")]
    UnknownNode {
        /// The node.
        node: String,
    },
    /// The node registers itself, and has not yet (see [`Ipam::register_only`]).
    #[error(
        "node {node} is not registered yet: its own lace-control registers it (its id and \
         locator) when it starts"
    )]
    RegisteredByItsOwnControl {
        /// The node.
        node: String,
    },
    /// An external network has no addresses to hand out.
    #[error(
        "Network {network} is of type external and has no IPAM; bind pods to an l3 or l2 network"
    )]
    NoIpam {
        /// The network.
        network: String,
    },
    /// A subnet field IPAM cannot work with.
    #[error("Network {network}: {field} {value}: {fix}")]
    InvalidNetwork {
        /// The network.
        network: String,
        /// The field, e.g. `spec.ipv4Subnet.hostLocalPrefixLength`.
        field: &'static str,
        /// Its value.
        value: String,
        /// What is wrong and what to do.
        fix: String,
    },
    /// An immutable field changed.
    #[error(
        "Network {network}: {field} is immutable (was {old}, now {new}); restore it, or delete \
         and recreate the network"
    )]
    Immutable {
        /// The network.
        network: String,
        /// The field.
        field: &'static str,
        /// The value IPAM holds.
        old: String,
        /// The value asked for.
        new: String,
    },
    /// The attachment exists with another network, node or pod.
    #[error(
        "container {container_id} already has interface {ifname} ({existing}); the request asks \
         for {requested}: DEL it first"
    )]
    AlreadyExists {
        /// Container id.
        container_id: String,
        /// Interface.
        ifname: String,
        /// The existing lease: `network N, node M, pod ns/name (UID u)`.
        existing: String,
        /// The request, in the same form.
        requested: String,
    },
    /// The node's block of an l3 network is full.
    #[error(
        "Network {network}: node {node}'s block {block} is full ({capacity} pod addresses); use \
         a shorter {field}.hostLocalPrefixLength (larger blocks) or a larger {field}.prefix (both \
         immutable: recreate the network), or run fewer pods of this network on the node"
    )]
    BlockExhausted {
        /// The network.
        network: String,
        /// The node.
        node: String,
        /// `spec.ipv4Subnet` or `spec.ipv6Subnet`.
        field: &'static str,
        /// The node's block.
        block: IpNet,
        /// How many pod addresses a block has.
        capacity: u128,
    },
    /// No block of an l3 subnet is left for a node.
    #[error(
        "Network {network}: {field}.prefix {subnet} has no free /{block_len} block for node \
         {node} (all {blocks} are given to other nodes); use a larger {field}.prefix or a longer \
         {field}.hostLocalPrefixLength (smaller blocks), both immutable: recreate the network"
    )]
    BlocksExhausted {
        /// The network.
        network: String,
        /// The node that needs a block.
        node: String,
        /// `spec.ipv4Subnet` or `spec.ipv6Subnet`.
        field: &'static str,
        /// The subnet.
        subnet: IpNet,
        /// `hostLocalPrefixLength`.
        block_len: u8,
        /// How many blocks the subnet has.
        blocks: u128,
    },
    /// An l2 subnet is full.
    #[error(
        "Network {network}: {field}.prefix {subnet} is full ({capacity} pod addresses, none \
         free for node {node}); use a larger {field}.prefix (immutable: recreate the network) \
         or delete pods of this network"
    )]
    SubnetExhausted {
        /// The network.
        network: String,
        /// The node asking.
        node: String,
        /// `spec.ipv4Subnet` or `spec.ipv6Subnet`.
        field: &'static str,
        /// The subnet.
        subnet: IpNet,
        /// How many pod addresses it has.
        capacity: u128,
    },
    /// The node has no forwarder port left.
    #[error(
        "node {node} has {max} pod interfaces attached, the forwarder's limit; delete pods on it"
    )]
    PortsExhausted {
        /// The node.
        node: String,
        /// The limit.
        max: u32,
    },
    /// The locator pool has no locator left.
    #[error(
        "locator pool {pool} has no free /{len} locator for node {node}; configure a larger pool \
         or a longer locator length"
    )]
    LocatorsExhausted {
        /// The node.
        node: String,
        /// The pool.
        pool: Ipv6Net,
        /// The locator length.
        len: u8,
    },
    /// A counter ran out (2^32 networks or nodes created over the state's lifetime).
    #[error("no {what} id left: ids are never reused; start a new cluster state")]
    IdsExhausted {
        /// `network`, `node` or `endpoint`.
        what: &'static str,
    },
    /// No unique MAC or interface name after many tries (practically impossible).
    #[error("no unique {what} found for container {container_id}; retry the ADD")]
    NoUniqueName {
        /// `MAC` or `host interface name`.
        what: &'static str,
        /// The container.
        container_id: String,
    },
    /// The locator configuration is unusable.
    #[error("locator pool {pool} with locator length {len}: {fix}")]
    InvalidConfig {
        /// The pool.
        pool: Ipv6Net,
        /// The locator length.
        len: u8,
        /// What is wrong and what to do.
        fix: String,
    },
    /// A pod asks for a sticky identity on a network where addresses cannot be shared.
    #[error(
        "pod {pod} asks for l2 identity {identity:?} (annotation l2.lace-cni.io/identity) on \
         Network {network}, which is of type {kind}: only pods of an l2 network can share \
         addresses and a MAC; remove the annotation or bind the pod to an l2 network"
    )]
    IdentityNotL2 {
        /// The pod.
        pod: String,
        /// The identity.
        identity: String,
        /// The network.
        network: String,
        /// Its type.
        kind: String,
    },
    /// A saved state contradicts itself or the configuration.
    #[error(
        "saved IPAM state is inconsistent: {what}; restore the state file from a backup (starting \
         empty would hand out addresses pods still use)"
    )]
    CorruptState {
        /// The contradiction.
        what: String,
    },
    /// Saving the state failed; the change was not made.
    #[error("{0}")]
    Persist(String),
}

impl IpamError {
    /// The CNI error code to answer with.
    pub fn cni_code(&self) -> ErrorCode {
        match self {
            IpamError::UnknownNetwork { .. } | IpamError::NoIpam { .. } => ErrorCode::Unbound,
            IpamError::UnknownNode { .. }
            | IpamError::RegisteredByItsOwnControl { .. }
            | IpamError::Persist(_) => ErrorCode::TryAgainLater,
            IpamError::InvalidNetwork { .. }
            | IpamError::Immutable { .. }
            | IpamError::InvalidConfig { .. } => ErrorCode::InvalidConfig,
            IpamError::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            IpamError::IdentityNotL2 { .. } => ErrorCode::InvalidArgs,
            IpamError::BlockExhausted { .. }
            | IpamError::BlocksExhausted { .. }
            | IpamError::SubnetExhausted { .. }
            | IpamError::PortsExhausted { .. } => ErrorCode::AddressesExhausted,
            IpamError::LocatorsExhausted { .. }
            | IpamError::IdsExhausted { .. }
            | IpamError::NoUniqueName { .. }
            | IpamError::CorruptState { .. } => ErrorCode::Internal,
        }
    }
}

/// A subnet as a user writes it: `10.40.0.0/16 with hostLocalPrefixLength 24`, or `absent`.
pub fn subnet_text(s: Option<(IpNet, Option<u8>)>) -> String {
    match s {
        None => "absent".to_owned(),
        Some((p, None)) => p.to_string(),
        Some((p, Some(l))) => format!("{p} with hostLocalPrefixLength {l}"),
    }
}

/// The MAC the forwarder answers ARP/NDP with for a network's gateway: `06:00:` + the id. Its
/// first octet differs from every endpoint MAC's (`02`), so the two never collide.
pub fn gateway_mac(id: NetworkId) -> MacAddr {
    let b = id.0.to_be_bytes();
    MacAddr([0x06, 0x00, b[0], b[1], b[2], b[3]])
}

/// The largest pod port id (`PortId(0)` is the uplink, [`PortId::HOST`] the host interface).
const MAX_POD_PORT: u32 = MAX_PORTS - 2;
/// Tries before giving up on a unique hash-derived name.
const NAME_TRIES: u32 = 1024;

fn family_field(v6: bool) -> &'static str {
    if v6 {
        "spec.ipv6Subnet"
    } else {
        "spec.ipv4Subnet"
    }
}

/// FNV-1a (64 bits) of `parts`, one after another: what names and places (blocks, locators,
/// network ids) are derived from.
pub fn fnv64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        // Separator so ("ab","c") and ("a","bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Address management of one family of one network.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FamilyIpam {
    /// l3: host-local blocks.
    Blocks {
        subnet: IpNet,
        block_len: u8,
        /// Free block indices of the subnet.
        blocks: FreeRanges,
        /// Each node's block.
        nodes: BTreeMap<String, AddressPool>,
    },
    /// l2: one pool for the whole subnet.
    Flat {
        pool: AddressPool,
        /// Addresses claimed elsewhere (another node's allocation in flight, a learned
        /// address): never handed out, whether or not a lease here holds them.
        claimed: HashSet<IpAddr>,
    },
}

impl FamilyIpam {
    fn build(
        network: &str,
        kind: NetworkType,
        subnet: IpNet,
        block_len: Option<u8>,
    ) -> Result<FamilyIpam, IpamError> {
        let v6 = subnet.addr().is_ipv6();
        let w = width(&subnet);
        let field = family_field(v6);
        let invalid = |field: &'static str, value: String, fix: String| IpamError::InvalidNetwork {
            network: network.to_owned(),
            field,
            value,
            fix,
        };
        if subnet.trunc() != subnet {
            return Err(invalid(
                if v6 {
                    "spec.ipv6Subnet.prefix"
                } else {
                    "spec.ipv4Subnet.prefix"
                },
                subnet.to_string(),
                format!("has host bits set; use {}", subnet.trunc()),
            ));
        }
        if kind == NetworkType::L2 {
            return AddressPool::new(subnet)
                .map(|pool| FamilyIpam::Flat {
                    pool,
                    claimed: HashSet::new(),
                })
                .ok_or_else(|| {
                    invalid(
                        if v6 {
                            "spec.ipv6Subnet.prefix"
                        } else {
                            "spec.ipv4Subnet.prefix"
                        },
                        subnet.to_string(),
                        format!(
                            "leaves no room for a gateway and a pod; use at most /{}",
                            w - 1
                        ),
                    )
                });
        }
        let len_field = if v6 {
            "spec.ipv6Subnet.hostLocalPrefixLength"
        } else {
            "spec.ipv4Subnet.hostLocalPrefixLength"
        };
        let Some(block_len) = block_len else {
            return Err(invalid(
                len_field,
                "(unset)".into(),
                format!(
                    "is required for an l3 network; set it between {} and {}, e.g. {}",
                    subnet.prefix_len(),
                    w - 1,
                    if v6 {
                        64.max(subnet.prefix_len())
                    } else {
                        24.max(subnet.prefix_len())
                    }
                ),
            ));
        };
        if block_len < subnet.prefix_len() || block_len >= w {
            return Err(invalid(
                len_field,
                block_len.to_string(),
                format!(
                    "must be between the {field}.prefix length {} and {} (a block needs room \
                     for a gateway and a pod)",
                    subnet.prefix_len(),
                    w - 1
                ),
            ));
        }
        let bits = u32::from(block_len - subnet.prefix_len());
        let max = if bits == 0 {
            0
        } else {
            u128::MAX >> (128 - bits)
        };
        Ok(FamilyIpam::Blocks {
            subnet,
            block_len,
            blocks: FreeRanges::new(max),
            nodes: BTreeMap::new(),
        })
    }

    fn is_v6(&self) -> bool {
        match self {
            FamilyIpam::Blocks { subnet, .. } => subnet.addr().is_ipv6(),
            FamilyIpam::Flat { pool, .. } => pool.layout.prefix.addr().is_ipv6(),
        }
    }

    /// The prefix of block `i`.
    fn block_prefix(subnet: IpNet, block_len: u8, i: u128) -> IpNet {
        let w = width(&subnet);
        let base = to_u128(subnet.network()) + (i << (w - block_len));
        IpNet::new(from_u128(base, w == 128), block_len).unwrap_or(subnet)
    }

    /// The index of block `p` in `subnet`, if `p` is one of its blocks.
    fn block_index(subnet: IpNet, block_len: u8, p: IpNet) -> Option<u128> {
        if p.prefix_len() != block_len || p.trunc() != p || !subnet.contains(&p) {
            return None;
        }
        let w = width(&subnet);
        Some((to_u128(p.network()) - to_u128(subnet.network())) >> (w - block_len))
    }

    /// The block index a node without a block would get: the lowest free one at or above
    /// `from` (None: l2, or no block left).
    fn free_block_from(&self, from: u128) -> Option<u128> {
        match self {
            FamilyIpam::Blocks { blocks, .. } => blocks.lowest_free_from(from),
            FamilyIpam::Flat { .. } => None,
        }
    }

    /// How many blocks the subnet has (None: l2).
    fn blocks(&self) -> Option<u128> {
        match self {
            FamilyIpam::Blocks { blocks, .. } => Some(blocks.max().saturating_add(1)),
            FamilyIpam::Flat { .. } => None,
        }
    }

    /// Gives `node` block `i` of the subnet; false if it is taken or out of range.
    fn take_block(&mut self, node: &str, i: u128) -> bool {
        let FamilyIpam::Blocks {
            subnet,
            block_len,
            blocks,
            nodes,
        } = self
        else {
            return false;
        };
        let prefix = Self::block_prefix(*subnet, *block_len, i);
        // block_len < width was checked in build: a block always has a layout.
        let Some(pool) = AddressPool::new(prefix) else {
            return false;
        };
        if nodes.contains_key(node) || !blocks.take(i) {
            return false;
        }
        nodes.insert(node.to_owned(), pool);
        true
    }

    /// The error for a subnet with no block left for `node`.
    fn blocks_exhausted(&self, network: &str, node: &str) -> IpamError {
        match self {
            FamilyIpam::Blocks {
                subnet,
                block_len,
                blocks,
                ..
            } => IpamError::BlocksExhausted {
                network: network.to_owned(),
                node: node.to_owned(),
                field: family_field(self.is_v6()),
                subnet: *subnet,
                block_len: *block_len,
                blocks: blocks.taken(),
            },
            FamilyIpam::Flat { .. } => IpamError::CorruptState {
                what: format!("Network {network}: an l2 subnet has no blocks"),
            },
        }
    }

    /// Takes the lowest free address for a pod on `node`, whose block (l3) exists.
    fn allocate(&mut self, network: &str, node: &str) -> Result<LeaseAddress, IpamError> {
        let v6 = self.is_v6();
        let field = family_field(v6);
        let (pool, claimed) = match self {
            FamilyIpam::Blocks { nodes, .. } => {
                let Some(pool) = nodes.get_mut(node) else {
                    return Err(IpamError::CorruptState {
                        what: format!("Network {network}: node {node} has no block"),
                    });
                };
                if pool.layout.capacity() == pool.taken() {
                    return Err(IpamError::BlockExhausted {
                        network: network.to_owned(),
                        node: node.to_owned(),
                        field,
                        block: pool.layout.prefix,
                        capacity: pool.layout.capacity(),
                    });
                }
                (pool, None)
            }
            FamilyIpam::Flat { pool, claimed } => (pool, Some(&*claimed)),
        };
        let layout = pool.layout;
        let address = match claimed {
            None => pool.take_lowest(),
            Some(claimed) => pool.take_lowest_not_in(claimed),
        };
        let Some(address) = address else {
            return Err(match claimed {
                None => IpamError::CorruptState {
                    what: format!(
                        "Network {network}: {} counts a free address it lacks",
                        layout.prefix
                    ),
                },
                Some(_) => IpamError::SubnetExhausted {
                    network: network.to_owned(),
                    node: node.to_owned(),
                    field,
                    subnet: layout.prefix,
                    capacity: layout.capacity(),
                },
            });
        };
        Ok(LeaseAddress {
            address,
            prefix: layout.prefix,
            gateway: layout.gateway,
        })
    }

    /// The pool `a` of a pod on `node` comes from.
    fn pool_mut(&mut self, node: &str) -> Option<&mut AddressPool> {
        match self {
            FamilyIpam::Blocks { nodes, .. } => nodes.get_mut(node),
            FamilyIpam::Flat { pool, .. } => Some(pool),
        }
    }

    /// Returns `a` of a pod on `node`; false if it was not taken here.
    fn release(&mut self, node: &str, a: IpAddr) -> bool {
        self.pool_mut(node).is_some_and(|p| p.free(a))
    }

    /// Drops `node`'s block, returning it to the subnet.
    fn remove_node(&mut self, node: &str) {
        if let FamilyIpam::Blocks {
            subnet,
            block_len,
            blocks,
            nodes,
        } = self
        {
            if let Some(pool) = nodes.remove(node) {
                if let Some(i) = Self::block_index(*subnet, *block_len, pool.layout.prefix) {
                    blocks.free(i);
                }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct NetState {
    id: NetworkId,
    def: NetworkDef,
    /// IPv4 first, then IPv6; empty for external networks.
    families: Vec<FamilyIpam>,
}

impl NetState {
    fn build(name: &str, id: NetworkId, def: &NetworkDef) -> Result<NetState, IpamError> {
        let mut families = Vec::new();
        if def.kind != NetworkType::External {
            if def.v4.is_none() && def.v6.is_none() {
                return Err(IpamError::InvalidNetwork {
                    network: name.to_owned(),
                    field: "spec.ipv4Subnet",
                    value: "(unset)".into(),
                    fix: "an l3 or l2 network needs spec.ipv4Subnet, spec.ipv6Subnet or both"
                        .into(),
                });
            }
            if let Some((p, len)) = def.v4 {
                families.push(FamilyIpam::build(name, def.kind, IpNet::V4(p), len)?);
            }
            if let Some((p, len)) = def.v6 {
                families.push(FamilyIpam::build(name, def.kind, IpNet::V6(p), len)?);
            }
        }
        Ok(NetState {
            id,
            def: def.clone(),
            families,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeState {
    id: NodeId,
    locator: Ipv6Net,
    /// Free ports: index i is `PortId(i + 1)`.
    ports: FreeRanges,
    /// Host-side interface names in use on the node.
    ifaces: HashSet<String>,
    /// The low 32 bits of the node's next endpoint id (see [`endpoint_id`]).
    next_endpoint: u32,
}

/// Endpoint id `seq` of node `node` (see the module docs).
pub fn endpoint_id(node: NodeId, seq: u32) -> u64 {
    u64::from(node.0) << 32 | u64::from(seq)
}

/// A record a change touched (see [`Ipam::start_journal`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dirty {
    /// The cluster-wide part: networks and their ids, nodes and their locators, the id
    /// counters.
    Ledger,
    /// The blocks `node` holds of `network`.
    Blocks {
        /// The network.
        network: String,
        /// The node.
        node: String,
    },
    /// One lease.
    Lease(AttachmentKey),
}

/// The records changed since the journal started; equal to any other journal (it is
/// bookkeeping, not state).
#[derive(Debug, Clone, Default)]
struct Journal(Option<BTreeSet<Dirty>>);

impl PartialEq for Journal {
    fn eq(&self, _: &Journal) -> bool {
        true
    }
}
impl Eq for Journal {}

/// All ids and addresses control hands out (see the module docs for the guarantees).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipam {
    config: IpamConfig,
    next_network_id: u32,
    next_node_id: u32,
    networks: BTreeMap<String, NetState>,
    nodes: BTreeMap<String, NodeState>,
    /// Free locator indices of the pool.
    locators: FreeRanges,
    leases: BTreeMap<AttachmentKey, EndpointLease>,
    /// Endpoint MACs in use (as u64).
    macs: HashSet<u64>,
    /// Endpoint ids in use.
    endpoint_ids: HashSet<u64>,
    /// Bumped by every change: [`SharedIpam`] saves only when it moved.
    generation: u64,
    journal: Journal,
    /// Blocks are looked for from each node's own place in the subnet ([`Ipam::spread_blocks`]).
    spread: bool,
    /// The only node this view registers ([`Ipam::register_only`]); None: any.
    registrar: Option<String>,
    /// Node ids taken by nodes the view does not hold yet ([`Ipam::reserve_node_id`]).
    reserved_node_ids: BTreeSet<u32>,
    /// Network ids claimed, and by which network ([`Ipam::reserve_network_id`]).
    reserved_network_ids: BTreeMap<u32, String>,
}

impl Ipam {
    /// An empty state.
    pub fn new(config: IpamConfig) -> Result<Ipam, IpamError> {
        let pool_len = config.locator_pool.prefix_len();
        if config.locator_pool.trunc() != config.locator_pool
            || config.locator_len < pool_len
            || config.locator_len > 64
        {
            return Err(IpamError::InvalidConfig {
                pool: config.locator_pool,
                len: config.locator_len,
                fix: format!(
                    "the pool must have no host bits set ({}) and the locator length must be \
                     between the pool's length {pool_len} and 64",
                    config.locator_pool.trunc()
                ),
            });
        }
        let bits = u32::from(config.locator_len - pool_len);
        let max = if bits == 0 {
            0
        } else {
            u128::MAX >> (128 - bits)
        };
        Ok(Ipam {
            config,
            next_network_id: 1,
            next_node_id: 1,
            networks: BTreeMap::new(),
            nodes: BTreeMap::new(),
            locators: FreeRanges::new(max),
            leases: BTreeMap::new(),
            macs: HashSet::new(),
            endpoint_ids: HashSet::new(),
            generation: 0,
            journal: Journal::default(),
            spread: false,
            registrar: None,
            reserved_node_ids: BTreeSet::new(),
            reserved_network_ids: BTreeMap::new(),
        })
    }

    /// Starts recording which records every later change touches (see [`Ipam::take_journal`]).
    pub fn start_journal(&mut self) {
        self.journal.0.get_or_insert_with(BTreeSet::new);
    }

    /// The records changed since [`Ipam::start_journal`] (empty when it was not started); the
    /// journal stops.
    pub fn take_journal(&mut self) -> BTreeSet<Dirty> {
        self.journal.0.take().unwrap_or_default()
    }

    fn touch(&mut self, d: Dirty) {
        if let Some(j) = &mut self.journal.0 {
            j.insert(d);
        }
    }

    /// From now on a node without a block of a network looks for one from its own place in
    /// the subnet (a hash of its name), wrapping around, instead of from the lowest: for a
    /// state that many nodes' controls write at once, each taking a block with a
    /// create-if-absent object, so that two nodes rarely race for the same block. Allocation
    /// stays deterministic (the same state and node give the same block). New nodes' locators
    /// and ids and new networks' ids are spread the same way ([`Ipam::ensure_node`],
    /// [`Ipam::ensure_network`]).
    pub fn spread_blocks(&mut self) {
        self.spread = true;
    }

    /// From now on this view registers only node `node` ([`Ipam::ensure_node`] of another is
    /// [`IpamError::RegisteredByItsOwnControl`]): for a state that every node's control
    /// writes, in which each node's control registers its own node, so that a node's id and
    /// locator have one writer and never move.
    pub fn register_only(&mut self, node: &str) {
        self.registrar = Some(node.to_owned());
    }

    /// Whether this view registers node `name` (see [`Ipam::register_only`]).
    pub fn registers(&self, name: &str) -> bool {
        self.registrar.as_ref().is_none_or(|r| r == name)
    }

    /// Marks locator `l` as taken though no node of the view holds it (another node's control
    /// took it and has not recorded its node yet); whether it was free.
    pub fn reserve_locator(&mut self, l: Ipv6Net) -> bool {
        self.locator_index(l).is_some_and(|i| self.locators.take(i))
    }

    /// Marks node id `id` as taken though no node of the view holds it (another node's
    /// control took it and has not recorded its node yet).
    pub fn reserve_node_id(&mut self, id: u32) {
        self.reserved_node_ids.insert(id);
    }

    /// Marks network id `id` as claimed for network `holder` (a claim whose record may not be
    /// there yet): spread ids skip it for any other network.
    pub fn reserve_network_id(&mut self, id: u32, holder: &str) {
        self.reserved_network_ids.insert(id, holder.to_owned());
    }

    /// The locator configuration.
    pub fn config(&self) -> IpamConfig {
        self.config
    }

    /// A counter bumped by every change.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    // ---- networks ----------------------------------------------------------------------------

    /// Registers `name` (or checks it is unchanged) and returns its `status.id`. A new network
    /// gets the next id; a known one keeps its id as long as its type and subnets are the same
    /// (they are immutable: a change is [`IpamError::Immutable`]).
    pub fn ensure_network(&mut self, name: &str, def: &NetworkDef) -> Result<NetworkId, IpamError> {
        if let Some(n) = self.networks.get(name) {
            let immutable = |field: &'static str, old: String, new: String| IpamError::Immutable {
                network: name.to_owned(),
                field,
                old,
                new,
            };
            if n.def.kind != def.kind {
                return Err(immutable(
                    "spec.type",
                    n.def.kind.as_str().to_owned(),
                    def.kind.as_str().to_owned(),
                ));
            }
            if n.def.kind != NetworkType::External {
                if n.def.v4 != def.v4 {
                    return Err(immutable(
                        "spec.ipv4Subnet",
                        subnet_text(n.def.v4.map(|(p, l)| (IpNet::V4(p), l))),
                        subnet_text(def.v4.map(|(p, l)| (IpNet::V4(p), l))),
                    ));
                }
                if n.def.v6 != def.v6 {
                    return Err(immutable(
                        "spec.ipv6Subnet",
                        subnet_text(n.def.v6.map(|(p, l)| (IpNet::V6(p), l))),
                        subnet_text(def.v6.map(|(p, l)| (IpNet::V6(p), l))),
                    ));
                }
            }
            return Ok(n.id);
        }
        let id = if self.spread {
            self.spread_network_id(name)?
        } else {
            // The ids of the node's own tables (host network, external sources) are skipped.
            let mut id = NetworkId(self.next_network_id);
            while !id.assignable() {
                id = NetworkId(
                    id.0.checked_add(1)
                        .ok_or(IpamError::IdsExhausted { what: "network" })?,
                );
            }
            id
        };
        let next =
            id.0.checked_add(1)
                .ok_or(IpamError::IdsExhausted { what: "network" })?
                .max(self.next_network_id);
        let state = NetState::build(name, id, def)?;
        self.networks.insert(name.to_owned(), state);
        self.next_network_id = next;
        self.generation += 1;
        self.touch(Dirty::Ledger);
        Ok(id)
    }

    /// The id a new network `name` takes when ids are spread (see [`Ipam::spread_blocks`]): the
    /// first id from its own place among 1..[`NetworkId::HOST`] (FNV-1a of its name), wrapping
    /// around, that no network holds, no other network claimed and no node table has
    /// ([`NetworkId::assignable`]). Controls that register the same network at once then want
    /// the same id, and agree instead of racing.
    fn spread_network_id(&self, name: &str) -> Result<NetworkId, IpamError> {
        let ids = NetworkId::HOST.0 - 1;
        let held: HashSet<u32> = self.networks.values().map(|n| n.id.0).collect();
        let start = (fnv64(&[name.as_bytes()]) % u64::from(ids)) as u32 + 1;
        (start..=ids)
            .chain(1..start)
            .find(|&id| {
                NetworkId(id).assignable()
                    && !held.contains(&id)
                    && self
                        .reserved_network_ids
                        .get(&id)
                        .is_none_or(|holder| holder == name)
            })
            .map(NetworkId)
            .ok_or(IpamError::IdsExhausted { what: "network" })
    }

    /// Forgets a network: releases every lease on it and returns them. Its id is never given
    /// to another network. Unknown names release nothing.
    pub fn remove_network(&mut self, name: &str) -> Vec<EndpointLease> {
        if !self.networks.contains_key(name) {
            return Vec::new();
        }
        let released = self.release_where(|l| l.network == name);
        for node in self.blocks_of_network(name) {
            self.touch(Dirty::Blocks {
                network: name.to_owned(),
                node,
            });
        }
        self.networks.remove(name);
        self.generation += 1;
        self.touch(Dirty::Ledger);
        released
    }

    /// The `status.id` of a network.
    pub fn network_id(&self, name: &str) -> Option<NetworkId> {
        self.networks.get(name).map(|n| n.id)
    }

    /// The type of a network.
    pub fn network_kind(&self, name: &str) -> Option<NetworkType> {
        self.networks.get(name).map(|n| n.def.kind)
    }

    /// The on-link prefix and gateway of pod address `a` of `network` on `node`: its node's
    /// block (l3) or the subnet (l2).
    pub fn on_link(&self, network: &str, node: &str, a: IpAddr) -> Option<(IpNet, IpAddr)> {
        let net = self.networks.get(network)?;
        net.families.iter().find_map(|f| {
            let layout = match f {
                FamilyIpam::Blocks { nodes, .. } => nodes.get(node)?.layout,
                FamilyIpam::Flat { pool, .. } => pool.layout,
            };
            layout
                .is_pod_address(a)
                .then_some((layout.prefix, layout.gateway))
        })
    }

    /// Every network's `status.id`.
    pub fn network_ids(&self) -> BTreeMap<String, NetworkId> {
        self.networks
            .iter()
            .map(|(k, n)| (k.clone(), n.id))
            .collect()
    }

    // ---- nodes -------------------------------------------------------------------------------

    /// Registers `name` (or returns its entry): a new node gets the next id and the lowest free
    /// locator of the pool.
    pub fn ensure_node(&mut self, name: &str) -> Result<NodeEntry, IpamError> {
        if let Some(n) = self.nodes.get(name) {
            return Ok(NodeEntry {
                id: n.id,
                locator: n.locator,
            });
        }
        if !self.registers(name) {
            return Err(IpamError::RegisteredByItsOwnControl {
                node: name.to_owned(),
            });
        }
        // Spread (many nodes registering at once, each itself): from the node's own place in
        // the pool, and the id that goes with the locator when no node holds it, so that nodes
        // starting together rarely want the same locator or id.
        let start = if self.spread {
            u128::from(fnv64(&[name.as_bytes()])) % self.locators.max().saturating_add(1)
        } else {
            0
        };
        let i = self
            .locators
            .lowest_free_from(start)
            .or_else(|| self.locators.lowest_free_from(0))
            .filter(|i| self.locators.take(*i))
            .ok_or(IpamError::LocatorsExhausted {
                node: name.to_owned(),
                pool: self.config.locator_pool,
                len: self.config.locator_len,
            })?;
        let locator = self.locator(i);
        let own = u32::try_from(i + 1).ok().filter(|id| {
            self.spread
                && !self.reserved_node_ids.contains(id)
                && self.nodes.values().all(|n| n.id.0 != *id)
        });
        let id = NodeId(own.unwrap_or(self.next_node_id));
        let next =
            id.0.checked_add(1)
                .ok_or(IpamError::IdsExhausted { what: "node" })?
                .max(self.next_node_id);
        self.next_node_id = next;
        self.nodes.insert(
            name.to_owned(),
            NodeState {
                id,
                locator,
                ports: FreeRanges::new(u128::from(MAX_POD_PORT - 1)),
                ifaces: HashSet::new(),
                next_endpoint: 1,
            },
        );
        self.generation += 1;
        self.touch(Dirty::Ledger);
        Ok(NodeEntry { id, locator })
    }

    fn locator(&self, i: u128) -> Ipv6Net {
        let shift = 128 - u32::from(self.config.locator_len);
        let base = u128::from(self.config.locator_pool.network()) + (i << shift);
        Ipv6Net::new(base.into(), self.config.locator_len).unwrap_or(self.config.locator_pool)
    }

    fn locator_index(&self, l: Ipv6Net) -> Option<u128> {
        if l.prefix_len() != self.config.locator_len
            || l.trunc() != l
            || !self.config.locator_pool.contains(&l)
        {
            return None;
        }
        let shift = 128 - u32::from(self.config.locator_len);
        Some((u128::from(l.network()) - u128::from(self.config.locator_pool.network())) >> shift)
    }

    /// Forgets a node: releases its leases (returned), its blocks and its locator. Its id is
    /// never given to another node; its locator may be, once it is gone.
    pub fn remove_node(&mut self, name: &str) -> Vec<EndpointLease> {
        let Some(node) = self.nodes.get(name) else {
            return Vec::new();
        };
        let locator = node.locator;
        let released = self.release_where(|l| l.node == name);
        let networks: Vec<String> = self
            .networks
            .iter()
            .filter(|(_, n)| {
                n.families.iter().any(
                    |f| matches!(f, FamilyIpam::Blocks { nodes, .. } if nodes.contains_key(name)),
                )
            })
            .map(|(k, _)| k.clone())
            .collect();
        for network in networks {
            self.touch(Dirty::Blocks {
                network,
                node: name.to_owned(),
            });
        }
        for net in self.networks.values_mut() {
            for f in &mut net.families {
                f.remove_node(name);
            }
        }
        if let Some(i) = self.locator_index(locator) {
            self.locators.free(i);
        }
        self.nodes.remove(name);
        self.generation += 1;
        self.touch(Dirty::Ledger);
        released
    }

    /// The nodes holding blocks of `network`.
    fn blocks_of_network(&self, network: &str) -> Vec<String> {
        let mut out = BTreeSet::new();
        if let Some(net) = self.networks.get(network) {
            for f in &net.families {
                if let FamilyIpam::Blocks { nodes, .. } = f {
                    out.extend(nodes.keys().cloned());
                }
            }
        }
        out.into_iter().collect()
    }

    /// A node's ids.
    pub fn node(&self, name: &str) -> Option<NodeEntry> {
        self.nodes.get(name).map(|n| NodeEntry {
            id: n.id,
            locator: n.locator,
        })
    }

    /// Every node's ids.
    pub fn nodes(&self) -> BTreeMap<String, NodeEntry> {
        self.nodes
            .iter()
            .map(|(k, n)| {
                (
                    k.clone(),
                    NodeEntry {
                        id: n.id,
                        locator: n.locator,
                    },
                )
            })
            .collect()
    }

    // ---- leases ------------------------------------------------------------------------------

    /// ADD: the lease of `req.key`, made now or returned as it was (see the module docs).
    pub fn allocate(&mut self, req: &AllocateRequest) -> Result<EndpointLease, IpamError> {
        if let Some(l) = self.leases.get(&req.key) {
            if l.network == req.network && l.node == req.node && l.pod.same_pod(&req.pod) {
                return Ok(l.clone());
            }
            return Err(IpamError::AlreadyExists {
                container_id: req.key.container_id.clone(),
                ifname: req.key.ifname.clone(),
                existing: format!("network {}, node {}, pod {}", l.network, l.node, l.pod),
                requested: format!(
                    "network {}, node {}, pod {}",
                    req.network, req.node, req.pod
                ),
            });
        }
        let net = self
            .networks
            .get_mut(&req.network)
            .ok_or_else(|| IpamError::UnknownNetwork {
                network: req.network.clone(),
            })?;
        if net.families.is_empty() {
            return Err(IpamError::NoIpam {
                network: req.network.clone(),
            });
        }
        let node = self
            .nodes
            .get_mut(&req.node)
            .ok_or_else(|| IpamError::UnknownNode {
                node: req.node.clone(),
            })?;
        let seq = node.next_endpoint;
        let next_endpoint = seq
            .checked_add(1)
            .ok_or(IpamError::IdsExhausted { what: "endpoint" })?;
        let endpoint_id = endpoint_id(node.id, seq);
        // A sticky identity: the addresses and MAC of the lease that holds it already.
        let shared = match &req.identity {
            Some(identity) if net.def.kind != NetworkType::L2 => {
                return Err(IpamError::IdentityNotL2 {
                    pod: req.pod.to_string(),
                    identity: identity.clone(),
                    network: req.network.clone(),
                    kind: net.def.kind.to_string(),
                })
            }
            Some(identity) => self
                .leases
                .values()
                .find(|l| l.holds_identity(&req.network, &req.pod.namespace, identity))
                .map(|l| (l.addresses.clone(), l.mac)),
            None => None,
        };
        let host_iface = unique_iface(&req.key, &node.ifaces)?;
        if take_blocks(net, &req.network, &req.node, self.spread)? {
            self.touch(Dirty::Blocks {
                network: req.network.clone(),
                node: req.node.clone(),
            });
        }
        // Re-borrowed: `touch` needed the whole state.
        let (Some(net), Some(node)) = (
            self.networks.get_mut(&req.network),
            self.nodes.get_mut(&req.node),
        ) else {
            return Err(IpamError::CorruptState {
                what: format!("Network {} or node {} vanished", req.network, req.node),
            });
        };
        let port_index = node.ports.take_lowest().ok_or(IpamError::PortsExhausted {
            node: req.node.clone(),
            max: MAX_POD_PORT,
        })?;
        if let Some((addresses, mac)) = shared {
            // port_index ≤ MAX_POD_PORT - 1 < u32::MAX.
            let port = PortId(u32::try_from(port_index).unwrap_or(MAX_POD_PORT - 1) + 1);
            node.ifaces.insert(host_iface.as_str().to_owned());
            node.next_endpoint = next_endpoint;
            self.endpoint_ids.insert(endpoint_id);
            let lease = EndpointLease {
                key: req.key.clone(),
                network: req.network.clone(),
                network_id: net.id,
                node: req.node.clone(),
                pod: req.pod.clone(),
                addresses,
                mac,
                port,
                host_iface,
                endpoint_id,
                identity: req.identity.clone(),
            };
            self.leases.insert(req.key.clone(), lease.clone());
            self.generation += 1;
            self.touch(Dirty::Lease(req.key.clone()));
            return Ok(lease);
        }
        let mut addresses = Vec::with_capacity(net.families.len());
        for i in 0..net.families.len() {
            match net.families[i].allocate(&req.network, &req.node) {
                Ok(a) => addresses.push(a),
                Err(e) => {
                    for (f, a) in net.families.iter_mut().zip(&addresses) {
                        f.release(&req.node, a.address);
                    }
                    node.ports.free(port_index);
                    return Err(e);
                }
            }
        }
        let mac = match unique_mac(net.id, &addresses, &self.macs, &req.key) {
            Ok(m) => m,
            Err(e) => {
                for (f, a) in net.families.iter_mut().zip(&addresses) {
                    f.release(&req.node, a.address);
                }
                node.ports.free(port_index);
                return Err(e);
            }
        };
        // port_index ≤ MAX_POD_PORT - 1 < u32::MAX.
        let port = PortId(u32::try_from(port_index).unwrap_or(MAX_POD_PORT - 1) + 1);
        node.ifaces.insert(host_iface.as_str().to_owned());
        node.next_endpoint = next_endpoint;
        self.macs.insert(mac.to_u64());
        self.endpoint_ids.insert(endpoint_id);
        let lease = EndpointLease {
            key: req.key.clone(),
            network: req.network.clone(),
            network_id: net.id,
            node: req.node.clone(),
            pod: req.pod.clone(),
            addresses,
            mac,
            port,
            host_iface,
            endpoint_id,
            identity: req.identity.clone(),
        };
        self.leases.insert(req.key.clone(), lease.clone());
        self.generation += 1;
        self.touch(Dirty::Lease(req.key.clone()));
        Ok(lease)
    }

    /// A retried ADD rebuilt the pod's interface: the lease keeps its addresses, MAC, port and
    /// host interface but gets a new endpoint id, so the forwarder, which acknowledges ports by
    /// endpoint id, replaces its port (the old one was bound to an interface that is gone).
    /// None when there is no lease.
    pub fn renew_endpoint(
        &mut self,
        key: &AttachmentKey,
    ) -> Result<Option<EndpointLease>, IpamError> {
        let Some(lease) = self.leases.get_mut(key) else {
            return Ok(None);
        };
        let node = self
            .nodes
            .get_mut(&lease.node)
            .ok_or_else(|| IpamError::UnknownNode {
                node: lease.node.clone(),
            })?;
        let seq = node.next_endpoint;
        node.next_endpoint = seq
            .checked_add(1)
            .ok_or(IpamError::IdsExhausted { what: "endpoint" })?;
        self.endpoint_ids.remove(&lease.endpoint_id);
        lease.endpoint_id = endpoint_id(node.id, seq);
        self.endpoint_ids.insert(lease.endpoint_id);
        let lease = lease.clone();
        self.generation += 1;
        self.touch(Dirty::Lease(key.clone()));
        Ok(Some(lease))
    }

    /// DEL: releases the lease of `key` and returns it; None (and no change) when there is
    /// none.
    pub fn release(&mut self, key: &AttachmentKey) -> Option<EndpointLease> {
        let lease = self.leases.remove(key)?;
        self.give_back(&lease);
        self.generation += 1;
        self.touch(Dirty::Lease(key.clone()));
        Some(lease)
    }

    /// GC: releases every lease on `node` whose key is not in `keep`; returns them.
    pub fn gc(
        &mut self,
        node: &str,
        keep: &std::collections::BTreeSet<AttachmentKey>,
    ) -> Vec<EndpointLease> {
        self.release_where(|l| l.node == node && !keep.contains(&l.key))
    }

    fn release_where(&mut self, pred: impl Fn(&EndpointLease) -> bool) -> Vec<EndpointLease> {
        let keys: Vec<AttachmentKey> = self
            .leases
            .values()
            .filter(|l| pred(l))
            .map(|l| l.key.clone())
            .collect();
        keys.iter().filter_map(|k| self.release(k)).collect()
    }

    /// Returns what a removed lease held: its addresses and MAC only when no other lease shares
    /// them (a sticky identity's last lease).
    fn give_back(&mut self, l: &EndpointLease) {
        if let Some(node) = self.nodes.get_mut(&l.node) {
            node.ports.free(u128::from(l.port.0.saturating_sub(1)));
            node.ifaces.remove(l.host_iface.as_str());
        }
        if let Some(identity) = &l.identity {
            let shared = self
                .leases
                .values()
                .any(|o| o.holds_identity(&l.network, &l.pod.namespace, identity));
            if shared {
                return;
            }
        }
        if let Some(net) = self.networks.get_mut(&l.network) {
            for a in &l.addresses {
                for f in &mut net.families {
                    if f.is_v6() == a.address.is_ipv6() {
                        f.release(&l.node, a.address);
                    }
                }
            }
        }
        self.macs.remove(&l.mac.to_u64());
        self.endpoint_ids.remove(&l.endpoint_id);
    }

    /// CHECK: the lease of `key`.
    pub fn lease(&self, key: &AttachmentKey) -> Option<&EndpointLease> {
        self.leases.get(key)
    }

    /// Every lease, by key.
    pub fn leases(&self) -> impl Iterator<Item = &EndpointLease> {
        self.leases.values()
    }

    // ---- blocks and exports ------------------------------------------------------------------

    /// The blocks `node` holds of `network` (IPv4 first); empty for l2 and external networks.
    pub fn node_blocks(&self, network: &str, node: &str) -> Vec<IpNet> {
        let Some(net) = self.networks.get(network) else {
            return Vec::new();
        };
        net.families
            .iter()
            .filter_map(|f| match f {
                FamilyIpam::Blocks { nodes, .. } => nodes.get(node).map(|p| p.layout.prefix),
                FamilyIpam::Flat { .. } => None,
            })
            .collect()
    }

    /// Every (network, node) → blocks, the shape of [`crate::world::World::allocations`].
    pub fn allocations(&self) -> BTreeMap<(String, String), Vec<IpNet>> {
        let mut out: BTreeMap<(String, String), Vec<IpNet>> = BTreeMap::new();
        for (name, net) in &self.networks {
            for f in &net.families {
                if let FamilyIpam::Blocks { nodes, .. } = f {
                    for (node, pool) in nodes {
                        out.entry((name.clone(), node.clone()))
                            .or_default()
                            .push(pool.layout.prefix);
                    }
                }
            }
        }
        out
    }
}

/// Gives `node` its blocks of `net` if it has none yet: the lowest index free in every
/// family of blocks (one index names the node's blocks); a family where the node has a block
/// already (a state from before blocks were paired) keeps it. Whether a block was taken.
fn take_blocks(
    net: &mut NetState,
    network: &str,
    node: &str,
    spread: bool,
) -> Result<bool, IpamError> {
    let missing: Vec<usize> = net
        .families
        .iter()
        .enumerate()
        .filter(|(_, f)| matches!(f, FamilyIpam::Blocks { nodes, .. } if !nodes.contains_key(node)))
        .map(|(i, _)| i)
        .collect();
    if missing.is_empty() {
        return Ok(false);
    }
    // Spread: from the node's place among the blocks every missing family has, then from 0.
    let start = match missing
        .iter()
        .filter_map(|&k| net.families[k].blocks())
        .min()
    {
        Some(count) if spread && count > 0 => u128::from(fnv64(&[node.as_bytes()])) % count,
        _ => 0,
    };
    let found = match free_block_from(net, &missing, start) {
        Err(_) if start > 0 => free_block_from(net, &missing, 0),
        found => found,
    };
    let index = found.map_err(|k| net.families[k].blocks_exhausted(network, node))?;
    for &k in &missing {
        if !net.families[k].take_block(node, index) {
            return Err(IpamError::CorruptState {
                what: format!("Network {network}: block {index} for node {node} is not free"),
            });
        }
    }
    Ok(true)
}

/// The lowest block index at or above `at` free in every family of `missing` (indices into
/// `net.families`); the family that has none left is the error.
fn free_block_from(net: &NetState, missing: &[usize], mut at: u128) -> Result<u128, usize> {
    loop {
        let mut agreed = at;
        for &k in missing {
            agreed = net.families[k].free_block_from(agreed).ok_or(k)?;
        }
        if agreed == at {
            return Ok(at);
        }
        at = agreed;
    }
}

/// `lace` + 8 hex digits of a hash of the key, salted until unique among `taken`.
fn unique_iface(key: &AttachmentKey, taken: &HashSet<String>) -> Result<IfName, IpamError> {
    for salt in 0..NAME_TRIES {
        let h = fnv64(&[
            key.container_id.as_bytes(),
            key.ifname.as_bytes(),
            &salt.to_be_bytes(),
        ]);
        let name = format!("lace{:08x}", h as u32);
        if !taken.contains(&name) {
            // 12 ASCII characters: always a valid interface name.
            if let Ok(n) = IfName::new(&name) {
                return Ok(n);
            }
        }
    }
    Err(IpamError::NoUniqueName {
        what: "host interface name",
        container_id: key.container_id.clone(),
    })
}

/// `02:` + 40 bits of a hash of (network id, first address), salted until unique among
/// `taken`.
fn unique_mac(
    id: NetworkId,
    addresses: &[LeaseAddress],
    taken: &HashSet<u64>,
    key: &AttachmentKey,
) -> Result<MacAddr, IpamError> {
    let addr = addresses
        .first()
        .map(|a| to_u128(a.address).to_be_bytes())
        .unwrap_or_default();
    for salt in 0..NAME_TRIES {
        let h = fnv64(&[&id.0.to_be_bytes(), &addr, &salt.to_be_bytes()]).to_be_bytes();
        let mac = MacAddr([0x02, h[0], h[1], h[2], h[3], h[4]]);
        if !taken.contains(&mac.to_u64()) {
            return Ok(mac);
        }
    }
    Err(IpamError::NoUniqueName {
        what: "MAC",
        container_id: key.container_id.clone(),
    })
}
