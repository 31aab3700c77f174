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
//!
//! Names are DNS-1123 subdomains: addresses are written with `-` for `.`, `:` and `/`, IPv6 in
//! full (eight groups), so a name always starts and ends with a letter or digit; a name that
//! would be longer than 253 characters keeps a hash of what it cut.

use std::net::IpAddr;

use ipnet::IpNet;

use super::state::AddressRecord;
use super::{fnv64, EndpointLease, Ipam, LeaseRecord};
use crate::api::{AllocationSpec, NeighborSpec, NetworkEndpointSpec, NetworkType};
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
