//! The persisted form of [`Ipam`]: plain, versioned data (see [`crate::store`]).
//!
//! Only what cannot be derived is saved: counters, networks, nodes, blocks and leases. Loading
//! rebuilds the free pools from them and checks that they are consistent (every address inside
//! its block and taken once, every port, MAC and interface name unique, ids below their
//! counters — except that the leases of one sticky identity share their addresses and MAC,
//! which must then be equal); any contradiction is [`IpamError::CorruptState`], never a silent
//! repair.
//!
//! The same records are the unit of a store that keeps one object per record (Kubernetes mode,
//! `daemon::cluster_state`): [`IpamState`] without blocks and leases is its *ledger* (networks,
//! nodes, counters), built from the network and node claims ([`super::ledger_of_claims`]), and
//! [`Ipam::insert_block`] / [`Ipam::insert_lease`] add the rest one at a time with the same
//! checks.
//!
//! Versions: 2 keeps one endpoint counter per node (`nodes.*.nextEndpoint`); version 1 kept one
//! for the whole state (`nextEndpointId`), and is read as version 2 with every node's counter
//! at 1 (version 1's ids are below 2^32, so they never meet a node's).

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::{IpNet, Ipv6Net};
use lace_shared::types::{IfName, NetworkId, NodeId, PortId};
use serde::{Deserialize, Serialize};

use super::ranges::FreeRanges;
use super::{
    AttachmentKey, EndpointLease, FamilyIpam, Ipam, IpamConfig, IpamError, LeaseAddress, NetState,
    NetworkDef, NodeState, PodRef, MAX_POD_PORT,
};
use crate::api::validate::parse_mac;

/// The format version this build writes (it reads 1 too).
pub const STATE_VERSION: u32 = 2;

/// A saved [`Ipam`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IpamState {
    version: u32,
    config: IpamConfig,
    next_network_id: u32,
    next_node_id: u32,
    /// Version 1 only: the state's endpoint counter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_endpoint_id: Option<u64>,
    networks: BTreeMap<String, NetworkRecord>,
    nodes: BTreeMap<String, NodeRecord>,
    blocks: Vec<BlockRecord>,
    leases: Vec<LeaseRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NetworkRecord {
    id: u32,
    def: NetworkDef,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeRecord {
    id: u32,
    locator: Ipv6Net,
    /// No endpoint id of the node at or above this (low 32 bits) was handed out. Absent in
    /// version 1.
    #[serde(default = "first_endpoint")]
    next_endpoint: u32,
}

fn first_endpoint() -> u32 {
    1
}

/// One node's block of one network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlockRecord {
    /// The network.
    pub network: String,
    /// The node.
    pub node: String,
    /// The block.
    pub prefix: IpNet,
}

/// One address of a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddressRecord {
    /// The pod's address.
    pub address: IpAddr,
    /// The on-link prefix (the node's block, or the l2 subnet).
    pub prefix: IpNet,
    /// The gateway.
    pub gateway: IpAddr,
}

/// One lease ([`EndpointLease`]) as saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaseRecord {
    /// CNI container id.
    pub container_id: String,
    /// Interface in the container.
    pub ifname: String,
    /// The network.
    pub network: String,
    /// The node.
    pub node: String,
    /// The pod's namespace.
    pub pod_namespace: String,
    /// The pod's name.
    pub pod_name: String,
    /// Absent in states written before UIDs were recorded (and for pods of runtimes that pass
    /// no UID): read as unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_uid: String,
    /// One per family of the network, IPv4 first.
    pub addresses: Vec<AddressRecord>,
    /// MAC, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// Forwarder port.
    pub port: u32,
    /// Host-side interface.
    pub host_iface: String,
    /// Endpoint id.
    pub endpoint_id: u64,
    /// The sticky l2 identity the lease shares its addresses and MAC with (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

impl From<&EndpointLease> for LeaseRecord {
    fn from(l: &EndpointLease) -> LeaseRecord {
        LeaseRecord {
            container_id: l.key.container_id.clone(),
            ifname: l.key.ifname.clone(),
            network: l.network.clone(),
            node: l.node.clone(),
            pod_namespace: l.pod.namespace.clone(),
            pod_name: l.pod.name.clone(),
            pod_uid: l.pod.uid.clone(),
            addresses: l
                .addresses
                .iter()
                .map(|a| AddressRecord {
                    address: a.address,
                    prefix: a.prefix,
                    gateway: a.gateway,
                })
                .collect(),
            mac: l.mac.to_string(),
            port: l.port.0,
            host_iface: l.host_iface.as_str().to_owned(),
            endpoint_id: l.endpoint_id,
            identity: l.identity.clone(),
        }
    }
}

impl LeaseRecord {
    /// The attachment it is for.
    pub fn key(&self) -> AttachmentKey {
        AttachmentKey {
            container_id: self.container_id.clone(),
            ifname: self.ifname.clone(),
        }
    }
}

impl IpamState {
    /// The format version of this state.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Its blocks.
    pub fn blocks(&self) -> &[BlockRecord] {
        &self.blocks
    }

    /// Its leases.
    pub fn leases(&self) -> &[LeaseRecord] {
        &self.leases
    }

    /// The low 32 bits below which `node`'s endpoint ids were handed out.
    pub fn next_endpoint(&self, node: &str) -> Option<u32> {
        self.nodes.get(node).map(|n| n.next_endpoint)
    }

    /// Its id counters: the next network id and the next node id.
    pub fn next_ids(&self) -> (u32, u32) {
        (self.next_network_id, self.next_node_id)
    }

    /// Its networks: name, id and definition.
    pub fn networks(&self) -> impl Iterator<Item = (&str, u32, &NetworkDef)> {
        self.networks
            .iter()
            .map(|(k, n)| (k.as_str(), n.id, &n.def))
    }

    /// Its nodes: name, id, locator and endpoint counter.
    pub fn nodes(&self) -> impl Iterator<Item = (&str, u32, Ipv6Net, u32)> {
        self.nodes
            .iter()
            .map(|(k, n)| (k.as_str(), n.id, n.locator, n.next_endpoint))
    }

    /// A ledger (a state without blocks and leases) of `networks` (name, id, definition) and
    /// `nodes` (name, id, locator, endpoint counter), its id counters at `next_network_id` and
    /// `next_node_id`. [`Ipam::from_ledger`] checks it.
    pub fn ledger_of(
        config: IpamConfig,
        next_network_id: u32,
        next_node_id: u32,
        networks: impl IntoIterator<Item = (String, u32, NetworkDef)>,
        nodes: impl IntoIterator<Item = (String, u32, Ipv6Net, u32)>,
    ) -> IpamState {
        IpamState {
            version: STATE_VERSION,
            config,
            next_network_id,
            next_node_id,
            next_endpoint_id: None,
            networks: networks
                .into_iter()
                .map(|(name, id, def)| (name, NetworkRecord { id, def }))
                .collect(),
            nodes: nodes
                .into_iter()
                .map(|(name, id, locator, next_endpoint)| {
                    (
                        name,
                        NodeRecord {
                            id,
                            locator,
                            next_endpoint,
                        },
                    )
                })
                .collect(),
            blocks: Vec::new(),
            leases: Vec::new(),
        }
    }

    /// The same state with `node`'s endpoint counter at `seq` (a reservation ahead of the ids
    /// handed out: none at or above it was); a node it does not hold is left as it is.
    pub fn with_next_endpoint(mut self, node: &str, seq: u32) -> IpamState {
        if let Some(n) = self.nodes.get_mut(node) {
            n.next_endpoint = seq;
        }
        self
    }
}

fn corrupt(what: String) -> IpamError {
    IpamError::CorruptState { what }
}

impl Ipam {
    /// The state to save.
    pub fn to_state(&self) -> IpamState {
        let blocks = self
            .allocations()
            .into_iter()
            .flat_map(|((network, node), prefixes)| {
                prefixes.into_iter().map(move |prefix| BlockRecord {
                    network: network.clone(),
                    node: node.clone(),
                    prefix,
                })
            })
            .collect();
        let leases = self.leases.values().map(LeaseRecord::from).collect();
        IpamState {
            blocks,
            leases,
            ..self.ledger()
        }
    }

    /// The cluster-wide part of the state: networks, nodes and the counters, without blocks
    /// and leases (the ledger of a store with one object per block and lease).
    pub fn ledger(&self) -> IpamState {
        let networks = self
            .networks
            .iter()
            .map(|(k, n)| {
                (
                    k.clone(),
                    NetworkRecord {
                        id: n.id.0,
                        def: n.def.clone(),
                    },
                )
            })
            .collect();
        let nodes = self
            .nodes
            .iter()
            .map(|(k, n)| {
                (
                    k.clone(),
                    NodeRecord {
                        id: n.id.0,
                        locator: n.locator,
                        next_endpoint: n.next_endpoint,
                    },
                )
            })
            .collect();
        IpamState {
            version: STATE_VERSION,
            config: self.config,
            next_network_id: self.next_network_id,
            next_node_id: self.next_node_id,
            next_endpoint_id: None,
            networks,
            nodes,
            blocks: Vec::new(),
            leases: Vec::new(),
        }
    }

    /// Rebuilds an [`Ipam`] from a saved state, checking it against itself and against
    /// `config` (the locator pool must not change under existing nodes).
    pub fn from_state(s: &IpamState, config: IpamConfig) -> Result<Ipam, IpamError> {
        let mut ipam = Ipam::from_ledger(s, config)?;
        for b in &s.blocks {
            ipam.insert_block(b)?;
        }
        for r in &s.leases {
            ipam.insert_lease(r, true)?;
        }
        Ok(ipam)
    }

    /// Rebuilds the networks, nodes and counters of `s` (its blocks and leases are not read).
    pub fn from_ledger(s: &IpamState, config: IpamConfig) -> Result<Ipam, IpamError> {
        if s.version != STATE_VERSION && s.version != 1 {
            return Err(corrupt(format!(
                "format version {} (this build reads 1 and {STATE_VERSION})",
                s.version
            )));
        }
        if s.config != config {
            return Err(IpamError::InvalidConfig {
                pool: config.locator_pool,
                len: config.locator_len,
                fix: format!(
                    "the saved state was made with pool {} and length {}; existing nodes' \
                     locators would move: configure those again",
                    s.config.locator_pool, s.config.locator_len
                ),
            });
        }
        let mut ipam = Ipam::new(config)?;
        if s.next_network_id == 0 || s.next_node_id == 0 || s.next_endpoint_id == Some(0) {
            return Err(corrupt("an id counter is 0 (ids start at 1)".into()));
        }
        ipam.next_network_id = s.next_network_id;
        ipam.next_node_id = s.next_node_id;

        let mut ids = std::collections::HashSet::new();
        for (name, r) in &s.networks {
            if r.id == 0 || r.id >= s.next_network_id || !ids.insert(r.id) {
                return Err(corrupt(format!(
                    "Network {name} has id {} (0, repeated, or not below the counter {})",
                    r.id, s.next_network_id
                )));
            }
            let net = NetState::build(name, NetworkId(r.id), &r.def)?;
            ipam.networks.insert(name.clone(), net);
        }

        let mut ids = std::collections::HashSet::new();
        for (name, r) in &s.nodes {
            if r.id == 0 || r.id >= s.next_node_id || !ids.insert(r.id) || r.next_endpoint == 0 {
                return Err(corrupt(format!(
                    "node {name} has id {} (0, repeated, or not below the counter {}) or \
                     endpoint counter 0",
                    r.id, s.next_node_id
                )));
            }
            let taken = ipam
                .locator_index(r.locator)
                .is_some_and(|i| ipam.locators.take(i));
            if !taken {
                return Err(corrupt(format!(
                    "node {name}'s locator {} is outside {}, not a /{}, or repeated",
                    r.locator, config.locator_pool, config.locator_len
                )));
            }
            ipam.nodes.insert(
                name.clone(),
                NodeState {
                    id: NodeId(r.id),
                    locator: r.locator,
                    ports: FreeRanges::new(u128::from(MAX_POD_PORT - 1)),
                    ifaces: Default::default(),
                    next_endpoint: r.next_endpoint,
                },
            );
        }
        Ok(ipam)
    }

    /// Adds block `b` (idempotent: a block the node holds already is no change). Refused
    /// ([`IpamError::CorruptState`]) when its network or node is unknown, it is not a block of
    /// the subnet, another node holds it, or the node holds another block of that family.
    pub fn insert_block(&mut self, b: &BlockRecord) -> Result<(), IpamError> {
        if !self.nodes.contains_key(&b.node) {
            return Err(corrupt(format!(
                "block {} of Network {} belongs to unknown node {}",
                b.prefix, b.network, b.node
            )));
        }
        let net = self.networks.get_mut(&b.network).ok_or_else(|| {
            corrupt(format!(
                "block {} of unknown Network {}",
                b.prefix, b.network
            ))
        })?;
        let family = net.families.iter_mut().find(|f| {
            f.is_v6() == b.prefix.addr().is_ipv6() && matches!(f, FamilyIpam::Blocks { .. })
        });
        let ok = match family {
            Some(FamilyIpam::Blocks { nodes, .. })
                if nodes
                    .get(&b.node)
                    .is_some_and(|p| p.layout.prefix == b.prefix) =>
            {
                return Ok(());
            }
            Some(FamilyIpam::Blocks {
                subnet,
                block_len,
                blocks,
                nodes,
            }) => {
                !nodes.contains_key(&b.node)
                    && FamilyIpam::block_index(*subnet, *block_len, b.prefix)
                        .is_some_and(|i| blocks.take(i))
                    && super::pool::AddressPool::new(b.prefix)
                        .map(|p| nodes.insert(b.node.clone(), p))
                        .is_some()
            }
            _ => false,
        };
        if !ok {
            return Err(corrupt(format!(
                "block {} of Network {} for node {}: not a block of the subnet, taken \
                 twice, or the node's second block of the family",
                b.prefix, b.network, b.node
            )));
        }
        self.generation += 1;
        Ok(())
    }

    /// Removes block `b` if the node holds it and no lease of the node on the network uses
    /// it; whether it was removed.
    pub fn remove_block(&mut self, b: &BlockRecord) -> bool {
        if self
            .leases
            .values()
            .any(|l| l.node == b.node && l.network == b.network)
        {
            return false;
        }
        let Some(net) = self.networks.get_mut(&b.network) else {
            return false;
        };
        for f in &mut net.families {
            if let FamilyIpam::Blocks {
                subnet,
                block_len,
                blocks,
                nodes,
            } = f
            {
                if nodes
                    .get(&b.node)
                    .is_some_and(|p| p.layout.prefix == b.prefix)
                {
                    nodes.remove(&b.node);
                    if let Some(i) = FamilyIpam::block_index(*subnet, *block_len, b.prefix) {
                        blocks.free(i);
                    }
                    self.generation += 1;
                    return true;
                }
            }
        }
        false
    }

    /// Adds lease `r`, replacing the lease of the same attachment if it differs. `strict`: its
    /// endpoint id must also be below its node's counter (a saved state; in a store of one
    /// object per record, another node's counter may be read after its leases). Refused
    /// ([`IpamError::CorruptState`], nothing changed) when anything it holds is taken or
    /// invalid.
    pub fn insert_lease(&mut self, r: &LeaseRecord, strict: bool) -> Result<(), IpamError> {
        let key = r.key();
        let old = match self.leases.get(&key) {
            Some(l) if LeaseRecord::from(l) == *r => return Ok(()),
            Some(_) => self.release(&key),
            None => None,
        };
        match restore_lease(self, r, strict) {
            Ok(lease) => {
                self.leases.insert(key, lease);
                self.generation += 1;
                Ok(())
            }
            Err(LeaseClash(what)) => {
                if let Some(old) = old {
                    // It was consistent before: putting it back cannot clash.
                    let _ = restore_lease(self, &LeaseRecord::from(&old), false)
                        .map(|l| self.leases.insert(key, l));
                }
                Err(corrupt(format!(
                    "lease of container {} interface {}: {what}",
                    r.container_id, r.ifname
                )))
            }
        }
    }

    /// Marks `address` of `network` as claimed elsewhere (never handed out here) or not;
    /// whether that changed anything. Only l2 networks hold claims; others ignore them.
    pub fn set_claim(&mut self, network: &str, address: IpAddr, claimed: bool) -> bool {
        let Some(net) = self.networks.get_mut(network) else {
            return false;
        };
        let changed = net.families.iter_mut().any(|f| match f {
            FamilyIpam::Flat { pool, claimed: c } if pool.layout.is_pod_address(address) => {
                if claimed {
                    c.insert(address)
                } else {
                    c.remove(&address)
                }
            }
            _ => false,
        });
        if changed {
            self.generation += 1;
        }
        changed
    }

    /// The low 32 bits of `node`'s next endpoint id.
    pub fn next_endpoint(&self, node: &str) -> Option<u32> {
        self.nodes.get(node).map(|n| n.next_endpoint)
    }

    /// Moves `node`'s endpoint counter up to `seq` (never down): ids below it are not handed
    /// out. Whether it moved.
    pub fn skip_endpoints_to(&mut self, node: &str, seq: u32) -> bool {
        match self.nodes.get_mut(node) {
            Some(n) if n.next_endpoint < seq => {
                n.next_endpoint = seq;
                true
            }
            _ => false,
        }
    }
}

/// What clashed when a saved lease was restored (wrapped into [`IpamError::CorruptState`]).
struct LeaseClash(String);

/// Takes everything `r` holds in `ipam` and returns the lease (not inserted); on a clash
/// nothing is taken and the error says what clashed.
fn restore_lease(
    ipam: &mut Ipam,
    r: &LeaseRecord,
    strict: bool,
) -> Result<EndpointLease, LeaseClash> {
    let key = r.key();
    if ipam.leases.contains_key(&key) {
        return Err(LeaseClash("repeated".into()));
    }
    let mac = parse_mac(&r.mac)
        .ok_or_else(|| LeaseClash(format!("MAC {:?} is not aa:bb:cc:dd:ee:ff", r.mac)))?;
    // A later lease of a sticky identity shares the first one's addresses and MAC.
    let sharing = r.identity.as_deref().and_then(|identity| {
        ipam.leases
            .values()
            .find(|l| l.holds_identity(&r.network, &r.pod_namespace, identity))
            .map(|l| (l.mac, l.addresses.clone()))
    });
    let host_iface = IfName::new(&r.host_iface).map_err(|e| LeaseClash(e.to_string()))?;
    let net = ipam
        .networks
        .get(&r.network)
        .ok_or_else(|| LeaseClash(format!("unknown Network {}", r.network)))?;
    let node = ipam
        .nodes
        .get(&r.node)
        .ok_or_else(|| LeaseClash(format!("unknown node {}", r.node)))?;
    // An id of this node's (node id in the high bits, below its counter in strict mode), or a
    // version-1 id (below 2^32); never 0, never another lease's.
    let (hi, lo) = ((r.endpoint_id >> 32) as u32, r.endpoint_id as u32);
    let id_ok = r.endpoint_id != 0
        && (hi == 0 || (hi == node.id.0 && lo != 0 && (!strict || lo < node.next_endpoint)))
        && !ipam.endpoint_ids.contains(&r.endpoint_id);
    if !id_ok {
        return Err(LeaseClash(format!(
            "endpoint id {} is 0, repeated, another node's or not below node {}'s counter",
            r.endpoint_id, r.node
        )));
    }
    if sharing.is_none() && ipam.macs.contains(&mac.to_u64()) {
        return Err(LeaseClash(format!("MAC {mac} is repeated")));
    }
    if !(1..=MAX_POD_PORT).contains(&r.port) || !node.ports.is_free(u128::from(r.port - 1)) {
        return Err(LeaseClash(format!(
            "port {} is outside 1..={MAX_POD_PORT} or repeated",
            r.port
        )));
    }
    if node.ifaces.contains(&r.host_iface) {
        return Err(LeaseClash(format!(
            "host interface {} is repeated on node {}",
            r.host_iface, r.node
        )));
    }
    if r.addresses.len() != net.families.len() {
        return Err(LeaseClash(format!(
            "{} addresses for a network with {} families",
            r.addresses.len(),
            net.families.len()
        )));
    }
    if r.identity.is_some() && net.def.kind != crate::api::NetworkType::L2 {
        return Err(LeaseClash(format!(
            "identity {:?} on Network {}, which is not l2",
            r.identity, r.network
        )));
    }
    let (network_id, node_name) = (net.id, r.node.clone());
    // Addresses last: they are the only part taken one by one, and given back on a clash.
    let net = ipam
        .networks
        .get_mut(&r.network)
        .ok_or_else(|| LeaseClash(format!("unknown Network {}", r.network)))?;
    let addresses = match sharing {
        Some((first_mac, first)) => {
            let same = first_mac == mac
                && first.len() == r.addresses.len()
                && first.iter().zip(&r.addresses).all(|(f, a)| {
                    f.address == a.address && f.prefix == a.prefix && f.gateway == a.gateway
                });
            if !same {
                return Err(LeaseClash(format!(
                    "identity {:?} of namespace {} is held with MAC {first_mac} and other \
                     addresses by another lease",
                    r.identity, r.pod_namespace
                )));
            }
            first
        }
        None => {
            let mut addresses: Vec<LeaseAddress> = Vec::new();
            for (i, a) in r.addresses.iter().enumerate() {
                let f = &mut net.families[i];
                let taken = match f.pool_mut(&node_name) {
                    Some(pool) => {
                        pool.layout.prefix == a.prefix
                            && pool.layout.gateway == a.gateway
                            && pool.take(a.address)
                    }
                    None => false,
                };
                if !taken {
                    for (f, done) in net.families.iter_mut().zip(&addresses) {
                        f.release(&node_name, done.address);
                    }
                    return Err(LeaseClash(format!(
                    "address {} (prefix {}, gateway {}) is not a free pod address of node {}'s \
                     block or the subnet",
                    a.address, a.prefix, a.gateway, node_name
                )));
                }
                addresses.push(LeaseAddress {
                    address: a.address,
                    prefix: a.prefix,
                    gateway: a.gateway,
                });
            }
            addresses
        }
    };
    ipam.macs.insert(mac.to_u64());
    ipam.endpoint_ids.insert(r.endpoint_id);
    if let Some(node) = ipam.nodes.get_mut(&r.node) {
        node.ports.take(u128::from(r.port - 1));
        node.ifaces.insert(r.host_iface.clone());
    }
    Ok(EndpointLease {
        key,
        network: r.network.clone(),
        network_id,
        node: r.node.clone(),
        pod: PodRef {
            namespace: r.pod_namespace.clone(),
            name: r.pod_name.clone(),
            uid: r.pod_uid.clone(),
        },
        addresses,
        mac,
        port: PortId(r.port),
        host_iface,
        endpoint_id: r.endpoint_id,
        identity: r.identity.clone(),
    })
}
