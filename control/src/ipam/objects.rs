//! IPAM's records as the API objects Kubernetes mode keeps them in (ADR 0015), and back: the
//! names derived from what each object allocates, the labels the watches select by, and the
//! specs. The status file of every mode shows the same objects.
//!
//! | record | object | name |
//! |---|---|---|
//! | a lease | `NetworkEndpoint` in the pod's namespace | `<pod>-<interface>-<hash of (container id, interface)>` |
//! | a node's blocks of a network | `Allocation` | `<network>.<first block>` (the node's blocks share one index) |
//! | an l2 address taken | `Neighbor` | `<network>.<address>` |
//! | a learned or shared MAC (control's learning) | `FDBEntry` | `<network>.<MAC>` |
//! | a network's id and immutable fields | `Claim` (record) | `<network>.network` |
//! | a node's id, locator and endpoint-id reservation | `Claim` (record) | `<node>.node` |
//! | a network id, node id or locator taken | `Claim` | `network-id.<id>`, `node-id.<id>`, `locator.<prefix>` |
//!
//! Names are DNS-1123 subdomains: addresses are written with `-` for `.`, `:` and `/`, IPv6 in
//! full (eight groups), so a name always starts and ends with a letter or digit; a name that
//! would be longer than 253 characters keeps a hash of what it cut.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::{IpNet, Ipv6Net};

use super::state::AddressRecord;
use super::{fnv64, EndpointLease, Ipam, IpamConfig, IpamState, LeaseRecord, NetworkDef};
use crate::api::{
    AllocationSpec, ClaimKind, ClaimSpec, ClaimedNetwork, NeighborSpec, NetworkEndpointSpec,
    NetworkType, Subnet,
};
use crate::daemon::report::host_len;

/// The label naming an object's node (NetworkEndpoint, Allocation, the Neighbor claims).
pub const NODE_LABEL: &str = "lace-cni.io/node";
/// The label naming an object's network.
pub const NETWORK_LABEL: &str = "lace-cni.io/network";
/// The label marking endpoints of l2 networks (`"true"`): every node watches those.
pub const L2_LABEL: &str = "lace-cni.io/l2";

/// The longest object name.
const MAX_NAME: usize = 253;

/// `s` as part of a DNS-1123 subdomain: lowercase; anything but letters, digits, `-` and `.`
/// becomes `-`.
fn dns_part(s: &str) -> String {
    s.chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect()
}

/// `<head><sep><tail>`, with `head` cut (and a hash of it added) when the whole would be
/// longer than a name may be. `tail` ends with a letter or digit.
fn join_name(head: &str, sep: char, tail: &str) -> String {
    let full = format!("{head}{sep}{tail}");
    if full.len() <= MAX_NAME {
        return full;
    }
    let hash = format!("{:08x}", fnv64(&[head.as_bytes()]) as u32);
    let room = MAX_NAME - tail.len() - hash.len() - 2;
    let cut: String = head.chars().take(room).collect();
    format!("{}-{hash}{sep}{tail}", cut.trim_end_matches(['-', '.']))
}

/// An address as part of a name: `10-50-0-7`, `fd50-0000-…-0007`.
fn address_part(a: IpAddr) -> String {
    match a {
        IpAddr::V4(a) => a.to_string().replace('.', "-"),
        IpAddr::V6(a) => a
            .segments()
            .iter()
            .map(|s| format!("{s:04x}"))
            .collect::<Vec<_>>()
            .join("-"),
    }
}

/// The `NetworkEndpoint` of a lease.
pub fn endpoint_name(l: &EndpointLease) -> String {
    let h = fnv64(&[l.key.container_id.as_bytes(), l.key.ifname.as_bytes()]) as u32;
    join_name(
        &dns_part(&l.pod.name),
        '-',
        &format!("{}-{h:08x}", dns_part(&l.key.ifname)),
    )
}

/// The `Allocation` of a node's blocks of `network` (IPv4 first).
pub fn allocation_name(network: &str, blocks: &[IpNet]) -> String {
    let tail = blocks.first().map_or_else(String::new, |b| {
        format!("{}-{}", address_part(b.network()), b.prefix_len())
    });
    join_name(network, '.', &tail)
}

/// The `Neighbor` that claims l2 address `a` of `network`.
pub fn neighbor_name(network: &str, a: IpAddr) -> String {
    join_name(network, '.', &address_part(a))
}

/// The `FDBEntry` of learned (or shared) MAC `mac` of `network` (control's learning, ADR 0032):
/// `<network>.<MAC with '-' for ':'>`.
pub fn fdb_entry_name(network: &str, mac: lace_shared::types::MacAddr) -> String {
    join_name(network, '.', &mac.to_string().replace(':', "-"))
}

/// The spec of an `Allocation`.
pub fn allocation_spec(network: &str, node: &str, blocks: &[IpNet]) -> AllocationSpec {
    AllocationSpec {
        network: network.to_owned(),
        node: node.to_owned(),
        prefixes: blocks.iter().map(ToString::to_string).collect(),
    }
}

/// The spec of the `Neighbor` claiming address `a` of an l2 lease.
pub fn neighbor_spec(l: &EndpointLease, a: IpAddr) -> NeighborSpec {
    NeighborSpec {
        network: l.network.clone(),
        address: a.to_string(),
        mac: l.mac.to_string(),
        learned: false,
    }
}

/// Why an object cannot be a record of this state (yet): its network, node or block is
/// unknown, or a field does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotARecord(pub String);

impl Ipam {
    /// The `NetworkEndpoint` spec of `l`: its addresses as the pod has them (a host prefix on
    /// an l3 network, the subnet's length on an l2 one).
    pub fn endpoint_spec(&self, l: &EndpointLease) -> NetworkEndpointSpec {
        let l2 = self.network_kind(&l.network) == Some(NetworkType::L2);
        NetworkEndpointSpec {
            network: l.network.clone(),
            network_id: l.network_id.0,
            pod: l.pod.name.clone(),
            pod_uid: (!l.pod.uid.is_empty()).then(|| l.pod.uid.clone()),
            node: l.node.clone(),
            interface: l.key.ifname.clone(),
            container_id: l.key.container_id.clone(),
            addresses: l
                .addresses
                .iter()
                .map(|a| {
                    if l2 {
                        a.with_prefix_len().to_string()
                    } else {
                        format!("{}/{}", a.address, host_len(&a.address))
                    }
                })
                .collect(),
            mac: l.mac.to_string(),
            host_interface: Some(l.host_iface.as_str().to_owned()),
            identity: l.identity.clone(),
            port: l.port.0,
            endpoint_id: l.endpoint_id,
        }
    }

    /// The lease a `NetworkEndpoint` of `namespace` records: each address's on-link prefix and
    /// gateway come from its node's block (l3) or the subnet (l2), which must be known.
    pub fn lease_record(
        &self,
        namespace: &str,
        s: &NetworkEndpointSpec,
    ) -> Result<LeaseRecord, NotARecord> {
        let id = self
            .network_id(&s.network)
            .ok_or_else(|| NotARecord(format!("Network {} is not known (yet)", s.network)))?;
        if id.0 != s.network_id {
            return Err(NotARecord(format!(
                "made for Network {} with id {}, which now has id {}: a deleted network's",
                s.network, s.network_id, id.0
            )));
        }
        let mut addresses = Vec::new();
        for a in &s.addresses {
            let address = a
                .parse::<IpNet>()
                .map_err(|_| NotARecord(format!("address {a:?} is not a CIDR")))?
                .addr();
            let (prefix, gateway) =
                self.on_link(&s.network, &s.node, address).ok_or_else(|| {
                    NotARecord(format!(
                        "address {address} is in no block of node {} (yet) or not in Network {}",
                        s.node, s.network
                    ))
                })?;
            addresses.push(AddressRecord {
                address,
                prefix,
                gateway,
            });
        }
        Ok(LeaseRecord {
            container_id: s.container_id.clone(),
            ifname: s.interface.clone(),
            network: s.network.clone(),
            node: s.node.clone(),
            pod_namespace: namespace.to_owned(),
            pod_name: s.pod.clone(),
            pod_uid: s.pod_uid.clone().unwrap_or_default(),
            addresses,
            mac: s.mac.clone(),
            port: s.port,
            host_iface: s.host_interface.clone().unwrap_or_default(),
            endpoint_id: s.endpoint_id,
            identity: s.identity.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_subdomains_derived_from_what_they_allocate() {
        assert_eq!(
            allocation_name("backend", &["10.40.3.0/24".parse().unwrap()]),
            "backend.10-40-3-0-24"
        );
        assert_eq!(
            neighbor_name("storage", "fd50::7".parse().unwrap()),
            "storage.fd50-0000-0000-0000-0000-0000-0000-0007"
        );
        assert_eq!(
            neighbor_name("storage", "fd50:0:0:1::".parse().unwrap()),
            "storage.fd50-0000-0000-0001-0000-0000-0000-0000",
            "ends with a digit"
        );
        let long = "n".repeat(250);
        let a = neighbor_name(&long, "10.0.0.1".parse().unwrap());
        let b = neighbor_name(
            &format!("{}m", "n".repeat(249)),
            "10.0.0.1".parse().unwrap(),
        );
        assert!(a.len() <= 253 && b.len() <= 253, "{a}");
        assert_ne!(a, b, "the hash keeps what was cut apart");
        assert!(a.ends_with(".10-0-0-1"), "{a}");
        assert_eq!(dns_part("Net_1"), "net-1");
    }
}

// ---- claims (ADR 0045) -----------------------------------------------------------------------

/// The `Claim` recording Network `network`'s id and immutable fields: `<network>.network`.
pub fn network_record_name(network: &str) -> String {
    join_name(&dns_part(network), '.', "network")
}

/// The `Claim` recording node `node`'s id, locator and endpoint-id reservation: `<node>.node`.
pub fn node_record_name(node: &str) -> String {
    join_name(&dns_part(node), '.', "node")
}

/// The `Claim` taking network id `id`.
pub fn network_id_claim_name(id: u32) -> String {
    format!("network-id.{id}")
}

/// The `Claim` taking node id `id`.
pub fn node_id_claim_name(id: u32) -> String {
    format!("node-id.{id}")
}

/// The `Claim` taking locator `l`.
pub fn locator_claim_name(l: Ipv6Net) -> String {
    format!(
        "locator.{}-{}",
        address_part(IpAddr::V6(l.network())),
        l.prefix_len()
    )
}

/// A claim of `kind` by `holder`, its other fields empty.
fn claim(kind: ClaimKind, holder: &str) -> ClaimSpec {
    ClaimSpec {
        kind,
        holder: holder.to_owned(),
        id: None,
        locator: None,
        next_endpoint: None,
        network: None,
    }
}

/// The claims of network `name` with id `id` and definition `def`, the id first and the record
/// last (the order they are created in): object name → spec.
pub fn network_claims(name: &str, id: u32, def: &NetworkDef) -> [(String, ClaimSpec); 2] {
    let subnet = |p: String, l: Option<u8>| Subnet {
        prefix: p,
        host_local_prefix_length: l,
    };
    let record = ClaimSpec {
        id: Some(id),
        network: Some(ClaimedNetwork {
            kind: def.kind,
            ipv4_subnet: def.v4.map(|(p, l)| subnet(p.to_string(), l)),
            ipv6_subnet: def.v6.map(|(p, l)| subnet(p.to_string(), l)),
        }),
        ..claim(ClaimKind::Network, name)
    };
    [
        (
            network_id_claim_name(id),
            ClaimSpec {
                id: Some(id),
                ..claim(ClaimKind::NetworkId, name)
            },
        ),
        (network_record_name(name), record),
    ]
}

/// The claims of node `name` with id `id`, locator `locator` and endpoint-id reservation
/// `next_endpoint`: the locator's, the id's, then the record.
pub fn node_claims(
    name: &str,
    id: u32,
    locator: Ipv6Net,
    next_endpoint: u32,
) -> [(String, ClaimSpec); 3] {
    [
        (
            locator_claim_name(locator),
            ClaimSpec {
                locator: Some(locator.to_string()),
                ..claim(ClaimKind::Locator, name)
            },
        ),
        (
            node_id_claim_name(id),
            ClaimSpec {
                id: Some(id),
                ..claim(ClaimKind::NodeId, name)
            },
        ),
        (
            node_record_name(name),
            ClaimSpec {
                id: Some(id),
                locator: Some(locator.to_string()),
                next_endpoint: Some(next_endpoint),
                ..claim(ClaimKind::Node, name)
            },
        ),
    ]
}

/// Every claim of a ledger's networks and nodes, in the order they are created.
pub fn ledger_claims(l: &IpamState) -> Vec<(String, ClaimSpec)> {
    let mut out = Vec::new();
    for (name, id, def) in l.networks() {
        out.extend(network_claims(name, id, def));
    }
    for (name, id, locator, next) in l.nodes() {
        out.extend(node_claims(name, id, locator, next));
    }
    out
}

/// The ledger the claims of a cluster make (see [`ledger_of_claims`]).
#[derive(Debug, Clone)]
pub struct ClaimedLedger {
    /// Networks and nodes from their records; each id counter above every id taken and at
    /// least its floor.
    pub ledger: IpamState,
    /// Locators taken by another node whose record is not there (yet).
    pub reserved_locators: Vec<Ipv6Net>,
    /// Node ids taken by another node.
    pub reserved_node_ids: Vec<u32>,
    /// Network ids claimed, and for which network.
    pub reserved_network_ids: Vec<(u32, String)>,
    /// Claims left out, and why.
    pub left_out: Vec<(String, String)>,
}

/// The ledger that `claims` (object name → spec) make, as control `me` sees it: the networks
/// and nodes of their records, the id counters past every id claimed (and at least
/// `floors`: network, node), the locators and node ids claimed by other nodes and every network
/// id claimed reserved.
/// A record that does not parse, is misnamed, or repeats another record's id or locator (the
/// first by name is kept) is left out.
pub fn ledger_of_claims<'a>(
    config: IpamConfig,
    me: &str,
    claims: impl IntoIterator<Item = (&'a str, &'a ClaimSpec)>,
    floors: (u32, u32),
) -> ClaimedLedger {
    let (mut next_network, mut next_node) = (floors.0.max(1), floors.1.max(1));
    let mut networks: Vec<(String, u32, NetworkDef)> = Vec::new();
    let mut nodes: Vec<(String, u32, Ipv6Net, u32)> = Vec::new();
    let mut locators: Vec<(String, Ipv6Net)> = Vec::new();
    let mut reserved_node_ids = Vec::new();
    let mut reserved_network_ids = Vec::new();
    let mut left_out = Vec::new();
    let mut leave = |name: &str, why: String| left_out.push((format!("Claim {name}"), why));
    let (mut net_ids, mut node_ids, mut node_locators) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::<Ipv6Net>::new());
    for (name, c) in claims {
        let id = c.id.filter(|i| *i > 0);
        let locator = c.locator.as_deref().map(str::parse::<Ipv6Net>);
        match c.kind {
            ClaimKind::NetworkId | ClaimKind::NodeId => {
                let Some(id) = id else {
                    leave(name, "spec.id is missing or 0".into());
                    continue;
                };
                let counter = if c.kind == ClaimKind::NetworkId {
                    reserved_network_ids.push((id, c.holder.clone()));
                    &mut next_network
                } else {
                    if c.holder != me {
                        reserved_node_ids.push(id);
                    }
                    &mut next_node
                };
                *counter = (*counter).max(id.saturating_add(1));
            }
            ClaimKind::Locator => match locator {
                Some(Ok(l)) => locators.push((c.holder.clone(), l)),
                _ => leave(name, "spec.locator is not an IPv6 prefix".into()),
            },
            ClaimKind::Network => {
                let def = c.network.as_ref().map(network_def);
                let (Some(id), Some(Ok(def))) = (id, def) else {
                    leave(
                        name,
                        "a network record without spec.id or a valid spec.network".into(),
                    );
                    continue;
                };
                if name != network_record_name(&c.holder) {
                    leave(
                        name,
                        format!("not the name of Network {}'s record", c.holder),
                    );
                } else if !net_ids.insert(id) {
                    leave(
                        name,
                        format!("network id {id} is recorded for another network"),
                    );
                } else {
                    next_network = next_network.max(id.saturating_add(1));
                    networks.push((c.holder.clone(), id, def));
                }
            }
            ClaimKind::Node => {
                let (Some(id), Some(Ok(l))) = (id, locator) else {
                    leave(
                        name,
                        "a node record without spec.id or a valid spec.locator".into(),
                    );
                    continue;
                };
                if name != node_record_name(&c.holder) {
                    leave(name, format!("not the name of node {}'s record", c.holder));
                } else if node_ids.contains(&id) || node_locators.contains(&l) {
                    leave(
                        name,
                        format!("node id {id} or locator {l} is recorded for another node"),
                    );
                } else {
                    node_ids.insert(id);
                    node_locators.insert(l);
                    next_node = next_node.max(id.saturating_add(1));
                    let next_endpoint = c.next_endpoint.filter(|n| *n > 0).unwrap_or(1);
                    nodes.push((c.holder.clone(), id, l, next_endpoint));
                }
            }
        }
    }
    let reserved_locators = locators
        .into_iter()
        .filter(|(holder, l)| holder != me && !node_locators.contains(l))
        .map(|(_, l)| l)
        .collect();
    ClaimedLedger {
        ledger: IpamState::ledger_of(config, next_network, next_node, networks, nodes),
        reserved_locators,
        reserved_node_ids,
        reserved_network_ids,
        left_out,
    }
}

/// The definition a network record holds.
fn network_def(c: &ClaimedNetwork) -> Result<NetworkDef, NotARecord> {
    fn parse<P: std::str::FromStr>(s: &Subnet) -> Result<(P, Option<u8>), NotARecord> {
        let p = s
            .prefix
            .parse()
            .map_err(|_| NotARecord(format!("subnet {:?} is not a prefix", s.prefix)))?;
        Ok((p, s.host_local_prefix_length))
    }
    Ok(NetworkDef {
        kind: c.kind,
        v4: c.ipv4_subnet.as_ref().map(parse).transpose()?,
        v6: c.ipv6_subnet.as_ref().map(parse).transpose()?,
    })
}
