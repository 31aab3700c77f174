//! The persisted form of [`Ipam`]: plain, versioned data (see [`crate::store`]).
//!
//! Only what cannot be derived is saved: counters, networks, nodes, blocks and leases. Loading
//! rebuilds the free pools from them and checks that they are consistent (every address inside
//! its block and taken once, every port, MAC and interface name unique, ids below their
//! counters); any contradiction is [`IpamError::CorruptState`], never a silent repair.

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

/// The format version this build writes and reads.
pub const STATE_VERSION: u32 = 1;

/// A saved [`Ipam`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IpamState {
    version: u32,
    config: IpamConfig,
    next_network_id: u32,
    next_node_id: u32,
    next_endpoint_id: u64,
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BlockRecord {
    network: String,
    node: String,
    prefix: IpNet,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AddressRecord {
    address: IpAddr,
    prefix: IpNet,
    gateway: IpAddr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LeaseRecord {
    container_id: String,
    ifname: String,
    network: String,
    node: String,
    pod_namespace: String,
    pod_name: String,
    /// Absent in states written before UIDs were recorded (and for pods of runtimes that pass
    /// no UID): read as unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pod_uid: String,
    addresses: Vec<AddressRecord>,
    mac: String,
    port: u32,
    host_iface: String,
    endpoint_id: u64,
}

impl IpamState {
    /// The format version of this state.
    pub fn version(&self) -> u32 {
        self.version
    }
}

fn corrupt(what: String) -> IpamError {
    IpamError::CorruptState { what }
}

impl Ipam {
    /// The state to save.
    pub fn to_state(&self) -> IpamState {
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
                    },
                )
            })
            .collect();
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
        let leases = self
            .leases
            .values()
            .map(|l| LeaseRecord {
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
            })
            .collect();
        IpamState {
            version: STATE_VERSION,
            config: self.config,
            next_network_id: self.next_network_id,
            next_node_id: self.next_node_id,
            next_endpoint_id: self.next_endpoint_id,
            networks,
            nodes,
            blocks,
            leases,
        }
    }

    /// Rebuilds an [`Ipam`] from a saved state, checking it against itself and against
    /// `config` (the locator pool must not change under existing nodes).
    pub fn from_state(s: &IpamState, config: IpamConfig) -> Result<Ipam, IpamError> {
        if s.version != STATE_VERSION {
            return Err(corrupt(format!(
                "format version {} (this build reads {STATE_VERSION})",
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
        if s.next_network_id == 0 || s.next_node_id == 0 || s.next_endpoint_id == 0 {
            return Err(corrupt("an id counter is 0 (ids start at 1)".into()));
        }
        ipam.next_network_id = s.next_network_id;
        ipam.next_node_id = s.next_node_id;
        ipam.next_endpoint_id = s.next_endpoint_id;

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
            if r.id == 0 || r.id >= s.next_node_id || !ids.insert(r.id) {
                return Err(corrupt(format!(
                    "node {name} has id {} (0, repeated, or not below the counter {})",
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
                },
            );
        }

        for b in &s.blocks {
            if !ipam.nodes.contains_key(&b.node) {
                return Err(corrupt(format!(
                    "block {} of Network {} belongs to unknown node {}",
                    b.prefix, b.network, b.node
                )));
            }
            let net = ipam.networks.get_mut(&b.network).ok_or_else(|| {
                corrupt(format!(
                    "block {} of unknown Network {}",
                    b.prefix, b.network
                ))
            })?;
            let family = net.families.iter_mut().find(|f| {
                f.is_v6() == b.prefix.addr().is_ipv6() && matches!(f, FamilyIpam::Blocks { .. })
            });
            let ok = match family {
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
        }

        let mut endpoint_ids = std::collections::HashSet::new();
        for r in &s.leases {
            let lease =
                restore_lease(&mut ipam, r, &mut endpoint_ids).map_err(|LeaseClash(what)| {
                    corrupt(format!(
                        "lease of container {} interface {}: {what}",
                        r.container_id, r.ifname
                    ))
                })?;
            ipam.leases.insert(lease.key.clone(), lease);
        }
        Ok(ipam)
    }
}

/// What clashed when a saved lease was restored (wrapped into [`IpamError::CorruptState`]).
struct LeaseClash(String);

/// Takes everything `r` holds in `ipam` and returns the lease; the error says what clashed.
fn restore_lease(
    ipam: &mut Ipam,
    r: &LeaseRecord,
    endpoint_ids: &mut std::collections::HashSet<u64>,
) -> Result<EndpointLease, LeaseClash> {
    let key = AttachmentKey {
        container_id: r.container_id.clone(),
        ifname: r.ifname.clone(),
    };
    if ipam.leases.contains_key(&key) {
        return Err(LeaseClash("repeated".into()));
    }
    if r.endpoint_id == 0
        || r.endpoint_id >= ipam.next_endpoint_id
        || !endpoint_ids.insert(r.endpoint_id)
    {
        return Err(LeaseClash(format!(
            "endpoint id {} is 0, repeated or not below the counter",
            r.endpoint_id
        )));
    }
    let mac = parse_mac(&r.mac)
        .ok_or_else(|| LeaseClash(format!("MAC {:?} is not aa:bb:cc:dd:ee:ff", r.mac)))?;
    if !ipam.macs.insert(mac.to_u64()) {
        return Err(LeaseClash(format!("MAC {mac} is repeated")));
    }
    let host_iface = IfName::new(&r.host_iface).map_err(|e| LeaseClash(e.to_string()))?;
    let net = ipam
        .networks
        .get_mut(&r.network)
        .ok_or_else(|| LeaseClash(format!("unknown Network {}", r.network)))?;
    let node = ipam
        .nodes
        .get_mut(&r.node)
        .ok_or_else(|| LeaseClash(format!("unknown node {}", r.node)))?;
    if !(1..=MAX_POD_PORT).contains(&r.port) || !node.ports.take(u128::from(r.port - 1)) {
        return Err(LeaseClash(format!(
            "port {} is outside 1..={MAX_POD_PORT} or repeated",
            r.port
        )));
    }
    if !node.ifaces.insert(r.host_iface.clone()) {
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
    let mut addresses = Vec::new();
    for (f, a) in net.families.iter_mut().zip(&r.addresses) {
        let pool = f.pool_mut(&r.node).ok_or_else(|| {
            LeaseClash(format!(
                "address {} but node {} has no block",
                a.address, r.node
            ))
        })?;
        if pool.layout.prefix != a.prefix
            || pool.layout.gateway != a.gateway
            || !pool.take(a.address)
        {
            return Err(LeaseClash(format!(
                "address {} (prefix {}, gateway {}) is not a free pod address of {}",
                a.address, a.prefix, a.gateway, pool.layout.prefix
            )));
        }
        addresses.push(LeaseAddress {
            address: a.address,
            prefix: a.prefix,
            gateway: a.gateway,
        });
    }
    Ok(EndpointLease {
        key,
        network: r.network.clone(),
        network_id: net.id,
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
    })
}
