//! The universe the cases run in, as the upstream netpol e2e builds it: namespaces `x`, `y`,
//! `z` (labelled `ns: <name>`, and `kubernetes.io/metadata.name` as every namespace is), pods
//! `a`, `b`, `c` in each (labelled `pod: <name>`), every pod serving ports 80 and 81 on TCP,
//! UDP and SCTP with the named ports `serve-80-tcp` … `serve-81-sctp`. On lace: one l3 network
//! `pods` over two nodes (IPv4 and IPv6), the pods spread over both, plus addresses that are no
//! pod's (outside the cluster, and a free one inside the pod subnet).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use lace_control::api::NetworkType;
use lace_control::netpol::{ContainerPort, Side};
use lace_control::world::{
    AttachmentKey, BoundPolicy, EndpointModel, NamespacedName, NetworkModel, NodeModel, PodModel,
    World,
};
use lace_shared::policy::{PROTO_SCTP, PROTO_TCP, PROTO_UDP};
use lace_shared::types::{IfName, MacAddr, NetworkId, NodeId, PortId};

/// The namespaces.
pub const NAMESPACES: [&str; 3] = ["x", "y", "z"];
/// The pods of each namespace.
pub const PODS: [&str; 3] = ["a", "b", "c"];
/// The nodes.
pub const NODES: [&str; 2] = ["node-1", "node-2"];
/// The network every pod is on.
pub const NETWORK: &str = "pods";
/// Its id.
pub const NETWORK_ID: NetworkId = NetworkId(1);

/// An address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// Both.
    pub const ALL: [Family; 2] = [Family::V4, Family::V6];
}

/// Addresses that belong to no pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum External {
    /// Outside the cluster (192.0.2.10, 2001:db8::10).
    Outside,
    /// Inside the pod subnet, but no pod's (10.40.200.7, fd40:0:0:c8::7).
    FreeInSubnet,
}

impl External {
    /// Both.
    pub const ALL: [External; 2] = [External::Outside, External::FreeInSubnet];

    /// The address in `f`.
    pub fn addr(self, f: Family) -> IpAddr {
        match (self, f) {
            (External::Outside, Family::V4) => IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10)),
            (External::Outside, Family::V6) => "2001:db8::10".parse().expect("literal"),
            (External::FreeInSubnet, Family::V4) => IpAddr::V4(Ipv4Addr::new(10, 40, 200, 7)),
            (External::FreeInSubnet, Family::V6) => "fd40:0:0:c8::7".parse().expect("literal"),
        }
    }
}

/// One side of a probe.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Party {
    /// A pod (its interface on [`NETWORK`]).
    Pod(NamespacedName),
    /// An address no pod has.
    External(External),
    /// A node's own stack (from its gateway address on [`NETWORK`]).
    Node(&'static str),
}

impl std::fmt::Display for Party {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Party::Pod(p) => write!(f, "{p}"),
            Party::External(e) => write!(f, "{e:?}"),
            Party::Node(n) => write!(f, "{n}"),
        }
    }
}

/// Where a pod lives in the data plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Its node.
    pub node: &'static str,
    /// Its forwarder port there.
    pub port: PortId,
    /// Its endpoint's key.
    pub endpoint: AttachmentKey,
    /// IPv4 and IPv6 addresses.
    pub v4: Ipv4Addr,
    /// IPv6.
    pub v6: Ipv6Addr,
}

impl Placement {
    /// The address in `f`.
    pub fn addr(&self, f: Family) -> IpAddr {
        match f {
            Family::V4 => IpAddr::V4(self.v4),
            Family::V6 => IpAddr::V6(self.v6),
        }
    }
}

/// The universe: a world the cases change step by step.
#[derive(Debug, Clone)]
pub struct Universe {
    /// The compiler's (and the evaluator's) input.
    pub world: World,
    /// Where each pod lives.
    pub placement: BTreeMap<NamespacedName, Placement>,
    next_index: u32,
}

/// The named container ports every pod serves.
pub fn served_ports() -> Vec<ContainerPort> {
    let mut v = Vec::new();
    for port in [80, 81] {
        for (proto, p) in [(PROTO_TCP, "tcp"), (PROTO_UDP, "udp"), (PROTO_SCTP, "sctp")] {
            v.push(ContainerPort {
                name: format!("serve-{port}-{p}"),
                proto,
                port,
            });
        }
    }
    v
}

fn node_index(node: &str) -> u32 {
    NODES
        .iter()
        .position(|n| *n == node)
        .map_or(1, |i| i as u32 + 1)
}

/// A node's gateway on [`NETWORK`] (the first address of its block): the address its own stack
/// uses toward its pods.
pub fn gateway(node: &str, f: Family) -> IpAddr {
    let k = node_index(node);
    match f {
        Family::V4 => IpAddr::V4(Ipv4Addr::new(10, 40, k as u8, 1)),
        Family::V6 => IpAddr::V6(Ipv6Addr::new(0xfd40, 0, 0, k as u16, 0, 0, 0, 1)),
    }
}

/// Labels from `k=v` pairs.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Universe {
    /// The upstream universe (see the module docs).
    pub fn standard() -> Universe {
        let mut world = World::default();
        for (k, n) in NODES.iter().enumerate() {
            let k = k as u32 + 1;
            world.nodes.insert(
                n.to_string(),
                NodeModel {
                    name: n.to_string(),
                    id: NodeId(k),
                    locator: format!("fc00:0:{k:x}::/48").parse().expect("literal"),
                    underlay: format!("fd00::{k:x}").parse().expect("literal"),
                    addresses: Vec::new(),
                    labels: Default::default(),
                },
            );
            world.allocations.insert(
                (NETWORK.to_owned(), n.to_string()),
                vec![
                    format!("10.40.{k}.0/24").parse::<IpNet>().expect("literal"),
                    format!("fd40:0:0:{k:x}::/64").parse().expect("literal"),
                ],
            );
        }
        world.networks.insert(
            NETWORK.to_owned(),
            NetworkModel {
                name: NETWORK.to_owned(),
                id: NETWORK_ID,
                kind: NetworkType::L3,
                v4: Some(("10.40.0.0/16".parse().expect("literal"), Some(24))),
                v6: Some(("fd40::/48".parse().expect("literal"), Some(64))),
                external: vec![],
                anonymous: false,
                l2: Default::default(),
                uplinks: Vec::new(),
            },
        );
        let mut u = Universe {
            world,
            placement: BTreeMap::new(),
            next_index: 0,
        };
        for ns in NAMESPACES {
            u.world
                .namespaces
                .insert(ns.to_owned(), labels(&[("ns", ns)]));
            for pod in PODS {
                u.add_pod(ns, pod, labels(&[("pod", pod)]));
            }
        }
        u
    }

    /// Adds pod `ns/name` with `labels` on the next node in turn (the standard pods alternate).
    pub fn add_pod(&mut self, ns: &str, name: &str, labels: BTreeMap<String, String>) {
        let i = self.next_index;
        self.next_index += 1;
        let k = i % 2 + 1;
        let node = NODES[(k - 1) as usize];
        let host = 10 + i;
        let key = NamespacedName::new(ns, name);
        let endpoint = AttachmentKey {
            container_id: format!("c-{ns}-{name}"),
            ifname: "eth0".into(),
        };
        let p = Placement {
            node,
            port: PortId(100 + i),
            endpoint: endpoint.clone(),
            v4: Ipv4Addr::new(10, 40, k as u8, host as u8),
            v6: Ipv6Addr::new(0xfd40, 0, 0, k as u16, 0, 0, 0, host as u16),
        };
        self.world.endpoints.insert(
            endpoint,
            EndpointModel {
                namespace: ns.to_owned(),
                pod: name.to_owned(),
                network: NETWORK.to_owned(),
                node: node.to_owned(),
                addresses: vec![IpAddr::V4(p.v4), IpAddr::V6(p.v6)],
                mac: MacAddr([0x02, 0, 0, 0, (i >> 8) as u8, i as u8]),
                port: p.port,
                host_iface: IfName::new(&format!("lcf{i}")).expect("short name"),
                endpoint_id: u64::from(i) + 1,
            },
        );
        self.world.pods.insert(
            key.clone(),
            PodModel {
                labels,
                ports: served_ports(),
            },
        );
        self.placement.insert(key, p);
    }

    /// Removes pod `ns/name` and its endpoint.
    pub fn remove_pod(&mut self, ns: &str, name: &str) {
        let key = NamespacedName::new(ns, name);
        if let Some(p) = self.placement.remove(&key) {
            self.world.endpoints.remove(&p.endpoint);
        }
        self.world.pods.remove(&key);
    }

    /// Every pod.
    pub fn pods(&self) -> impl Iterator<Item = &NamespacedName> {
        self.placement.keys()
    }

    /// The address `party` uses in family `f`.
    pub fn addr(&self, party: &Party, f: Family) -> IpAddr {
        match party {
            Party::Pod(p) => self.placement[p].addr(f),
            Party::External(e) => e.addr(f),
            Party::Node(n) => gateway(n, f),
        }
    }

    /// `party` as the evaluator sees it.
    pub fn side(&self, party: &Party, f: Family) -> Side {
        match party {
            Party::Pod(p) => Side::Pod {
                endpoint: self.placement[p].endpoint.clone(),
                addr: self.placement[p].addr(f),
            },
            Party::External(e) => Side::Address(e.addr(f)),
            Party::Node(n) => Side::Node {
                name: n.to_string(),
                addr: gateway(n, f),
            },
        }
    }

    /// Creates or replaces a policy.
    pub fn apply_policy(&mut self, p: BoundPolicy) {
        self.world.network_policies.insert(
            NamespacedName::new(p.model.namespace.clone(), p.model.name.clone()),
            p,
        );
    }
}
