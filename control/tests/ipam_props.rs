//! Property tests of IPAM against a deliberately naive model: random sequences of ADD, DEL, GC,
//! node removal and re-registration, and save/restart through the store.
//!
//! The model recomputes every answer from scratch (lowest free block, lowest free pod address,
//! by scanning lists), so it shares no code with the pools. After every step the real leases
//! must equal the model's: that covers no duplicates, no leaks (a freed address is the next one
//! handed out), gateways and reserved addresses never allocated, and exhaustion reported exactly
//! when the model's block or subnet is full.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lace_control::api::NetworkType;
use lace_control::ipam::{
    AllocateRequest, AttachmentKey, EndpointLease, Ipam, IpamConfig, IpamError, NetworkDef, PodRef,
};
use lace_control::store::Store;
use proptest::prelude::*;

const NODES: usize = 5;
const KEYS: usize = 24;

/// The networks under test: (name, def, pod addresses of block/subnet `i`, how many blocks).
struct Net {
    name: &'static str,
    def: NetworkDef,
    /// l3: the blocks' pod addresses in block order; l2: one entry, the subnet's.
    pools: Vec<Vec<IpAddr>>,
    l3: bool,
}

fn v4(a: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}
fn v6(a: u128) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(a))
}

fn nets() -> Vec<Net> {
    let base4 = u32::from(Ipv4Addr::new(10, 0, 0, 0));
    let base6 = u128::from("fd00::".parse::<Ipv6Addr>().unwrap());
    let l2base = u32::from(Ipv4Addr::new(10, 1, 0, 0));
    vec![
        // 10.0.0.0/27 in /29 blocks: 4 blocks of 5 pods (.2–.6 of each 8).
        Net {
            name: "l3",
            def: NetworkDef {
                kind: NetworkType::L3,
                v4: Some(("10.0.0.0/27".parse().unwrap(), Some(29))),
                v6: None,
            },
            pools: (0..4)
                .map(|b| (2..=6).map(|h| v4(base4 + b * 8 + h)).collect())
                .collect(),
            l3: true,
        },
        // fd00::/125 in /126 blocks: 2 blocks of 2 pods (::2, ::3 of each 4).
        Net {
            name: "l3v6",
            def: NetworkDef {
                kind: NetworkType::L3,
                v4: None,
                v6: Some(("fd00::/125".parse().unwrap(), Some(126))),
            },
            pools: (0..2)
                .map(|b| (2..=3).map(|h| v6(base6 + b * 4 + h)).collect())
                .collect(),
            l3: true,
        },
        // 10.1.0.0/28 flat: .2–.14.
        Net {
            name: "l2",
            def: NetworkDef {
                kind: NetworkType::L2,
                v4: Some(("10.1.0.0/28".parse().unwrap(), None)),
                v6: None,
            },
            pools: vec![(2..=14).map(|h| v4(l2base + h)).collect()],
            l3: false,
        },
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Add { key: usize, net: usize, node: usize },
    Del { key: usize },
    Gc { node: usize, keep: u32 },
    RemoveNode { node: usize },
    AddNode { node: usize },
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..KEYS, 0..3usize, 0..NODES).prop_map(|(key, net, node)| Op::Add { key, net, node }),
        4 => (0..KEYS).prop_map(|key| Op::Del { key }),
        1 => (0..NODES, any::<u32>()).prop_map(|(node, keep)| Op::Gc { node, keep }),
        1 => (0..NODES).prop_map(|node| Op::RemoveNode { node }),
        1 => (0..NODES).prop_map(|node| Op::AddNode { node }),
        1 => Just(Op::Restart),
    ]
}

fn key(k: usize) -> AttachmentKey {
    AttachmentKey {
        container_id: format!("c{k}"),
        ifname: "eth0".into(),
    }
}
fn node_name(n: usize) -> String {
    format!("n{n}")
}

/// What the model expects of an ADD.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    Lease(IpAddr),
    Same,
    AlreadyExists,
    UnknownNode,
    BlockExhausted,
    BlocksExhausted,
    SubnetExhausted,
}

fn kind(r: &Result<EndpointLease, IpamError>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(IpamError::AlreadyExists { .. }) => "AlreadyExists",
        Err(IpamError::UnknownNode { .. }) => "UnknownNode",
        Err(IpamError::BlockExhausted { .. }) => "BlockExhausted",
        Err(IpamError::BlocksExhausted { .. }) => "BlocksExhausted",
        Err(IpamError::SubnetExhausted { .. }) => "SubnetExhausted",
        Err(_) => "other",
    }
}

#[derive(Default)]
struct Model {
    nodes: BTreeSet<usize>,
    /// key → (net, node, address).
    leases: BTreeMap<usize, (usize, usize, IpAddr)>,
    /// (net, node) → block index, l3 only.
    blocks: BTreeMap<(usize, usize), usize>,
}

impl Model {
    fn add(&mut self, nets: &[Net], k: usize, n: usize, node: usize) -> Expect {
        if let Some(&(ln, lnode, _)) = self.leases.get(&k) {
            return if (ln, lnode) == (n, node) {
                Expect::Same
            } else {
                Expect::AlreadyExists
            };
        }
        if !self.nodes.contains(&node) {
            return Expect::UnknownNode;
        }
        let net = &nets[n];
        let pool = if net.l3 {
            let b = match self.blocks.get(&(n, node)) {
                Some(&b) => b,
                None => {
                    let used: HashSet<usize> = self
                        .blocks
                        .iter()
                        .filter(|((bn, _), _)| *bn == n)
                        .map(|(_, &b)| b)
                        .collect();
                    let Some(b) = (0..net.pools.len()).find(|b| !used.contains(b)) else {
                        return Expect::BlocksExhausted;
                    };
                    self.blocks.insert((n, node), b);
                    b
                }
            };
            &net.pools[b]
        } else {
            &net.pools[0]
        };
        let used: HashSet<IpAddr> = self
            .leases
            .values()
            .filter(|(ln, _, _)| *ln == n)
            .map(|&(_, _, a)| a)
            .collect();
        match pool.iter().find(|a| !used.contains(a)) {
            Some(&a) => {
                self.leases.insert(k, (n, node, a));
                Expect::Lease(a)
            }
            None if net.l3 => Expect::BlockExhausted,
            None => Expect::SubnetExhausted,
        }
    }

    fn remove_node(&mut self, node: usize) {
        self.nodes.remove(&node);
        self.leases.retain(|_, (_, ln, _)| *ln != node);
        self.blocks.retain(|(_, bn), _| *bn != node);
    }
}

fn check(ipam: &Ipam, model: &Model, nets: &[Net]) -> Result<(), TestCaseError> {
    let real: BTreeMap<String, (String, String, Vec<IpAddr>)> = ipam
        .leases()
        .map(|l| {
            (
                l.key.container_id.clone(),
                (
                    l.network.clone(),
                    l.node.clone(),
                    l.addresses.iter().map(|a| a.address).collect(),
                ),
            )
        })
        .collect();
    let want: BTreeMap<String, (String, String, Vec<IpAddr>)> = model
        .leases
        .iter()
        .map(|(&k, &(n, node, a))| {
            (
                format!("c{k}"),
                (nets[n].name.to_owned(), node_name(node), vec![a]),
            )
        })
        .collect();
    prop_assert_eq!(&real, &want);
    let mut seen = HashSet::new();
    let mut ports = HashSet::new();
    let mut macs = HashSet::new();
    for l in ipam.leases() {
        for a in &l.addresses {
            prop_assert!(
                seen.insert((l.network.clone(), a.address)),
                "duplicate {}",
                a.address
            );
            prop_assert_ne!(a.address, a.gateway);
            prop_assert_ne!(a.address, a.prefix.network());
            if a.address.is_ipv4() {
                prop_assert_ne!(a.address, a.prefix.broadcast());
            }
            prop_assert!(a.prefix.contains(&a.address));
        }
        prop_assert!(ports.insert((l.node.clone(), l.port)));
        prop_assert!(macs.insert(l.mac));
    }
    for (&(n, node), &b) in &model.blocks {
        let blocks = ipam.node_blocks(nets[n].name, &node_name(node));
        prop_assert_eq!(blocks.len(), 1);
        prop_assert!(blocks[0].contains(&nets[n].pools[b][0]));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn ipam_matches_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        let nets = nets();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("state.json"));
        let mut ipam = Ipam::new(IpamConfig::default()).unwrap();
        let mut model = Model::default();
        for n in &nets {
            ipam.ensure_network(n.name, &n.def).unwrap();
        }
        for node in 0..NODES {
            ipam.ensure_node(&node_name(node)).unwrap();
            model.nodes.insert(node);
        }
        for op in ops {
            match op {
                Op::Add { key: k, net: n, node } => {
                    let before = ipam.lease(&key(k)).cloned();
                    let r = ipam.allocate(&AllocateRequest {
                        key: key(k),
                        network: nets[n].name.into(),
                        node: node_name(node),
                        pod: PodRef { namespace: "ns".into(), name: format!("pod-{k}"), uid: String::new() },
                        identity: None,
                    });
                    match model.add(&nets, k, n, node) {
                        Expect::Lease(a) => {
                            let l = r.map_err(|e| TestCaseError::fail(e.to_string()))?;
                            prop_assert_eq!(l.addresses[0].address, a);
                        }
                        Expect::Same => prop_assert_eq!(r.ok(), before),
                        e => prop_assert_eq!(kind(&r), format!("{e:?}")),
                    }
                }
                Op::Del { key: k } => {
                    let released = ipam.release(&key(k));
                    prop_assert_eq!(released.is_some(), model.leases.remove(&k).is_some());
                }
                Op::Gc { node, keep } => {
                    let keep_keys: BTreeSet<AttachmentKey> =
                        (0..KEYS).filter(|k| keep & (1 << k) != 0).map(key).collect();
                    let gone: BTreeSet<String> = ipam
                        .gc(&node_name(node), &keep_keys)
                        .into_iter()
                        .map(|l| l.key.container_id)
                        .collect();
                    let want: BTreeSet<String> = model
                        .leases
                        .iter()
                        .filter(|(k, (_, ln, _))| *ln == node && keep & (1 << **k) == 0)
                        .map(|(k, _)| format!("c{k}"))
                        .collect();
                    model.leases.retain(|k, (_, ln, _)| !(*ln == node && keep & (1 << *k) == 0));
                    prop_assert_eq!(gone, want);
                }
                Op::RemoveNode { node } => {
                    ipam.remove_node(&node_name(node));
                    model.remove_node(node);
                }
                Op::AddNode { node } => {
                    ipam.ensure_node(&node_name(node)).unwrap();
                    model.nodes.insert(node);
                }
                Op::Restart => {
                    store.save(&ipam.to_state()).unwrap();
                    let again = store.load_ipam(IpamConfig::default()).unwrap();
                    prop_assert_eq!(again.to_state(), ipam.to_state());
                    ipam = again;
                }
            }
            check(&ipam, &model, &nets)?;
        }
    }
}
