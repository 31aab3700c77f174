//! Unit tests of every IPAM rule (module docs of [`super`]).

use std::collections::{BTreeSet, HashSet};
use std::net::IpAddr;

use super::*;
use crate::store::{Store, StoreError};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}
fn l3(v4: Option<(&str, u8)>, v6: Option<(&str, u8)>) -> NetworkDef {
    NetworkDef {
        kind: NetworkType::L3,
        v4: v4.map(|(p, l)| (p.parse().unwrap(), Some(l))),
        v6: v6.map(|(p, l)| (p.parse().unwrap(), Some(l))),
    }
}
fn l2(v4: Option<&str>, v6: Option<&str>) -> NetworkDef {
    NetworkDef {
        kind: NetworkType::L2,
        v4: v4.map(|p| (p.parse().unwrap(), None)),
        v6: v6.map(|p| (p.parse().unwrap(), None)),
    }
}
fn req(c: &str, network: &str, node: &str) -> AllocateRequest {
    AllocateRequest {
        key: AttachmentKey {
            container_id: c.into(),
            ifname: "eth0".into(),
        },
        network: network.into(),
        node: node.into(),
        pod: PodRef {
            namespace: "default".into(),
            name: format!("pod-{c}"),
            uid: String::new(),
        },
        identity: None,
    }
}
fn key(c: &str) -> AttachmentKey {
    AttachmentKey {
        container_id: c.into(),
        ifname: "eth0".into(),
    }
}
/// An Ipam with nodes n1..n3 and the given network as `net`.
fn setup(def: &NetworkDef) -> Ipam {
    let mut i = Ipam::new(IpamConfig::default()).unwrap();
    i.ensure_network("net", def).unwrap();
    for n in ["n1", "n2", "n3"] {
        i.ensure_node(n).unwrap();
    }
    i
}
fn addrs(l: &EndpointLease) -> Vec<IpAddr> {
    l.addresses.iter().map(|a| a.address).collect()
}

// ---- ids -------------------------------------------------------------------------------------

#[test]
fn network_ids_start_at_1_are_stable_and_never_reused() {
    let mut i = Ipam::new(IpamConfig::default()).unwrap();
    let d = l3(Some(("10.40.0.0/16", 24)), None);
    assert_eq!(i.ensure_network("a", &d).unwrap(), NetworkId(1));
    assert_eq!(i.ensure_network("b", &d).unwrap(), NetworkId(2));
    assert_eq!(i.ensure_network("a", &d).unwrap(), NetworkId(1), "stable");
    i.remove_network("a");
    assert_eq!(i.network_id("a"), None);
    assert_eq!(
        i.ensure_network("a", &d).unwrap(),
        NetworkId(3),
        "not reused"
    );
    let ext = NetworkDef {
        kind: NetworkType::External,
        v4: None,
        v6: None,
    };
    assert_eq!(i.ensure_network("corp", &ext).unwrap(), NetworkId(4));
    assert_eq!(
        i.network_ids().into_iter().collect::<Vec<_>>(),
        [
            ("a".to_owned(), NetworkId(3)),
            ("b".to_owned(), NetworkId(2)),
            ("corp".to_owned(), NetworkId(4))
        ]
    );
}

#[test]
fn subnets_and_type_are_immutable() {
    let mut i = Ipam::new(IpamConfig::default()).unwrap();
    i.ensure_network("a", &l3(Some(("10.40.0.0/16", 24)), None))
        .unwrap();
    let e = i
        .ensure_network("a", &l3(Some(("10.40.0.0/16", 25)), None))
        .unwrap_err();
    assert!(
        matches!(
            e,
            IpamError::Immutable {
                field: "spec.ipv4Subnet",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("recreate"), "{e}");
    let e = i
        .ensure_network("a", &l2(Some("10.40.0.0/16"), None))
        .unwrap_err();
    assert!(
        matches!(
            e,
            IpamError::Immutable {
                field: "spec.type",
                ..
            }
        ),
        "{e}"
    );
    let e = i
        .ensure_network(
            "a",
            &l3(Some(("10.40.0.0/16", 24)), Some(("fd00::/48", 64))),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            IpamError::Immutable {
                field: "spec.ipv6Subnet",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.cni_code(), ErrorCode::InvalidConfig);
}

/// A refused change is described as the user writes the spec, not as Rust debug output.
#[test]
fn immutable_changes_are_described_in_the_users_words() {
    let mut i = Ipam::new(IpamConfig::default()).unwrap();
    i.ensure_network("b", &l3(Some(("10.83.0.0/16", 24)), None))
        .unwrap();
    let e = i
        .ensure_network("b", &l3(Some(("10.84.0.0/16", 24)), None))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Network b: spec.ipv4Subnet is immutable (was 10.83.0.0/16 with hostLocalPrefixLength \
         24, now 10.84.0.0/16 with hostLocalPrefixLength 24); restore it, or delete and \
         recreate the network"
    );
    let e = i
        .ensure_network("b", &l2(Some("10.83.0.0/16"), None))
        .unwrap_err();
    assert!(e.to_string().contains("(was l3, now l2)"), "{e}");
    let e = i
        .ensure_network(
            "b",
            &l3(Some(("10.83.0.0/16", 24)), Some(("fd00::/48", 64))),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("(was absent, now fd00::/48 with hostLocalPrefixLength 64)"),
        "{e}"
    );
}

/// A renewed endpoint keeps everything but its id, which is new and never reused.
#[test]
fn renewing_an_endpoint_gives_a_new_id_only() {
    let mut i = Ipam::new(IpamConfig::default()).unwrap();
    i.ensure_network("net", &l3(Some(("10.40.0.0/16", 24)), None))
        .unwrap();
    i.ensure_node("n1").unwrap();
    let a = i.allocate(&req("a", "net", "n1")).unwrap();
    let b = i.allocate(&req("b", "net", "n1")).unwrap();
    let renewed = i.renew_endpoint(&key("a")).unwrap().unwrap();
    assert_eq!(
        EndpointLease {
            endpoint_id: a.endpoint_id,
            ..renewed.clone()
        },
        a
    );
    assert!(renewed.endpoint_id > b.endpoint_id);
    assert_eq!(i.lease(&key("a")), Some(&renewed));
    assert_eq!(i.renew_endpoint(&key("zz")).unwrap(), None);
    let restored = Ipam::from_state(&i.to_state(), IpamConfig::default()).unwrap();
    assert_eq!(restored.lease(&key("a")), Some(&renewed));
    let c = i.allocate(&req("c", "net", "n1")).unwrap();
    assert!(c.endpoint_id > renewed.endpoint_id);
}

#[test]
fn node_ids_and_locators() {
    let mut i = Ipam::new(IpamConfig::default()).unwrap();
    let a = i.ensure_node("a").unwrap();
    let b = i.ensure_node("b").unwrap();
    assert_eq!((a.id, a.locator), (NodeId(1), "fc00::/48".parse().unwrap()));
    assert_eq!(
        (b.id, b.locator),
        (NodeId(2), "fc00:0:1::/48".parse().unwrap())
    );
    assert_eq!(i.ensure_node("a").unwrap(), a, "stable");
    i.remove_node("a");
    let c = i.ensure_node("c").unwrap();
    assert_eq!(c.id, NodeId(3), "ids are never reused");
    assert_eq!(c.locator, a.locator, "a gone node's locator may be reused");
    assert_eq!(
        i.ensure_node("a").unwrap().locator,
        "fc00:0:2::/48".parse().unwrap()
    );
    assert_eq!(i.nodes().len(), 3);
}

#[test]
fn locator_config_is_checked_and_the_pool_can_run_out() {
    let cfg = |p: &str, len| IpamConfig {
        locator_pool: p.parse().unwrap(),
        locator_len: len,
    };
    for (p, len) in [("fc00::/32", 65), ("fc00::/32", 31), ("fc00::1/32", 48)] {
        let e = Ipam::new(cfg(p, len)).unwrap_err();
        assert!(matches!(e, IpamError::InvalidConfig { .. }), "{e}");
    }
    let mut i = Ipam::new(cfg("fc00::/63", 64)).unwrap();
    assert_eq!(
        i.ensure_node("a").unwrap().locator,
        "fc00::/64".parse().unwrap()
    );
    assert_eq!(
        i.ensure_node("b").unwrap().locator,
        "fc00:0:0:1::/64".parse().unwrap()
    );
    let e = i.ensure_node("c").unwrap_err();
    assert!(matches!(e, IpamError::LocatorsExhausted { .. }));
    assert!(e.to_string().contains("fc00::/63"), "{e}");
}

// ---- l3 ----------------------------------------------------------------------------------------

#[test]
fn l3_blocks_per_node_and_gateway_is_first_address_of_the_block() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    let a = i.allocate(&req("c1", "net", "n1")).unwrap();
    assert_eq!(
        a.addresses,
        [LeaseAddress {
            address: ip("10.40.0.2"),
            prefix: net("10.40.0.0/24"),
            gateway: ip("10.40.0.1"),
        }]
    );
    assert_eq!(a.addresses[0].with_prefix_len().to_string(), "10.40.0.2/24");
    assert_eq!(a.network_id, NetworkId(1));
    let b = i.allocate(&req("c2", "net", "n2")).unwrap();
    assert_eq!(addrs(&b), [ip("10.40.1.2")]);
    assert_eq!(b.addresses[0].gateway, ip("10.40.1.1"));
    let c = i.allocate(&req("c3", "net", "n1")).unwrap();
    assert_eq!(addrs(&c), [ip("10.40.0.3")]);
    assert_eq!(i.node_blocks("net", "n1"), [net("10.40.0.0/24")]);
    assert_eq!(
        i.node_blocks("net", "n3"),
        Vec::<IpNet>::new(),
        "no pod, no block yet"
    );
    assert_eq!(
        i.allocations()
            .iter()
            .map(|((network, node), blocks)| allocation_spec(network, node, blocks))
            .collect::<Vec<_>>(),
        [
            crate::api::AllocationSpec {
                network: "net".into(),
                node: "n1".into(),
                prefixes: vec!["10.40.0.0/24".into()],
            },
            crate::api::AllocationSpec {
                network: "net".into(),
                node: "n2".into(),
                prefixes: vec!["10.40.1.0/24".into()],
            }
        ]
    );
}

#[test]
fn l3_block_fills_without_network_gateway_or_broadcast_then_reports_exhaustion() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 29)), None));
    let got: Vec<IpAddr> = (0..5)
        .map(|n| addrs(&i.allocate(&req(&format!("c{n}"), "net", "n1")).unwrap())[0])
        .collect();
    assert_eq!(
        got,
        [
            "10.40.0.2",
            "10.40.0.3",
            "10.40.0.4",
            "10.40.0.5",
            "10.40.0.6"
        ]
        .map(ip)
    );
    let e = i.allocate(&req("c5", "net", "n1")).unwrap_err();
    assert!(
        matches!(e, IpamError::BlockExhausted { capacity: 5, .. }),
        "{e:?}"
    );
    let msg = e.to_string();
    for part in [
        "Network net",
        "node n1",
        "10.40.0.0/29",
        "hostLocalPrefixLength",
    ] {
        assert!(msg.contains(part), "{msg} lacks {part}");
    }
    assert_eq!(e.cni_code(), ErrorCode::AddressesExhausted);
    assert_eq!(i.node_blocks("net", "n1").len(), 1, "no second block");
    // Another node is unaffected; a freed address is the next one handed out.
    assert_eq!(
        addrs(&i.allocate(&req("d", "net", "n2")).unwrap()),
        [ip("10.40.0.10")]
    );
    i.release(&key("c2"));
    assert_eq!(
        addrs(&i.allocate(&req("c5", "net", "n1")).unwrap()),
        [ip("10.40.0.4")]
    );
}

#[test]
fn l3_subnet_runs_out_of_blocks() {
    let mut i = setup(&l3(Some(("10.40.0.0/23", 24)), None));
    i.allocate(&req("a", "net", "n1")).unwrap();
    i.allocate(&req("b", "net", "n2")).unwrap();
    let e = i.allocate(&req("c", "net", "n3")).unwrap_err();
    assert!(
        matches!(
            e,
            IpamError::BlocksExhausted {
                blocks: 2,
                block_len: 24,
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    for part in ["Network net", "node n3", "10.40.0.0/23", "/24", "larger"] {
        assert!(msg.contains(part), "{msg} lacks {part}");
    }
    // The block returns to the subnet only when its node goes.
    i.release(&key("a"));
    assert!(i.allocate(&req("c", "net", "n3")).is_err());
    let released = i.remove_node("n1");
    assert!(released.is_empty());
    let c = i.allocate(&req("c", "net", "n3")).unwrap();
    assert_eq!(c.addresses[0].prefix, net("10.40.0.0/24"));
}

#[test]
fn point_to_point_blocks_and_subnets() {
    let mut i = setup(&l3(Some(("10.0.0.0/30", 31)), Some(("fd00::/126", 127))));
    let a = i.allocate(&req("a", "net", "n1")).unwrap();
    assert_eq!(
        a.addresses,
        [
            LeaseAddress {
                address: ip("10.0.0.1"),
                prefix: net("10.0.0.0/31"),
                gateway: ip("10.0.0.0"),
            },
            LeaseAddress {
                address: ip("fd00::1"),
                prefix: net("fd00::/127"),
                gateway: ip("fd00::"),
            }
        ]
    );
    assert!(matches!(
        i.allocate(&req("b", "net", "n1")).unwrap_err(),
        IpamError::BlockExhausted { capacity: 1, .. }
    ));
    assert_eq!(
        addrs(&i.allocate(&req("b", "net", "n2")).unwrap()),
        [ip("10.0.0.3"), ip("fd00::3")]
    );

    let mut i = setup(&l2(None, Some("fd00::/127")));
    let a = i.allocate(&req("a", "net", "n1")).unwrap();
    assert_eq!(
        (a.addresses[0].address, a.addresses[0].gateway),
        (ip("fd00::1"), ip("fd00::"))
    );
    assert!(matches!(
        i.allocate(&req("b", "net", "n2")).unwrap_err(),
        IpamError::SubnetExhausted { capacity: 1, .. }
    ));
}

#[test]
fn host_prefixes_and_bad_block_lengths_are_refused() {
    let mut i = Ipam::new(IpamConfig::default()).unwrap();
    let bad = [
        l3(Some(("10.0.0.0/24", 32)), None),
        l3(Some(("10.0.0.0/24", 16)), None),
        l3(None, Some(("fd00::/64", 128))),
        l2(Some("10.0.0.1/32"), None),
        NetworkDef {
            kind: NetworkType::L3,
            v4: Some(("10.0.0.0/16".parse().unwrap(), None)),
            v6: None,
        },
        NetworkDef {
            kind: NetworkType::L2,
            v4: None,
            v6: None,
        },
        NetworkDef {
            kind: NetworkType::L2,
            v4: Some(("10.0.0.1/24".parse().unwrap(), None)),
            v6: None,
        },
    ];
    for d in &bad {
        let e = i.ensure_network("x", d).unwrap_err();
        assert!(matches!(e, IpamError::InvalidNetwork { .. }), "{d:?}: {e}");
        assert!(e.to_string().starts_with("Network x: spec.ipv"), "{e}");
    }
    assert!(i.network_ids().is_empty());
    let e = i.ensure_network("x", &bad[4]).unwrap_err();
    assert!(
        e.to_string().contains("hostLocalPrefixLength (unset)"),
        "{e}"
    );
}

// ---- l2 ----------------------------------------------------------------------------------------

#[test]
fn l2_allocates_from_the_subnet_across_nodes() {
    let mut i = setup(&l2(Some("10.50.0.0/29"), None));
    let got: Vec<IpAddr> = ["n1", "n2", "n3", "n1", "n2"]
        .iter()
        .enumerate()
        .map(|(n, node)| {
            let l = i.allocate(&req(&format!("c{n}"), "net", node)).unwrap();
            assert_eq!(l.addresses[0].gateway, ip("10.50.0.1"));
            assert_eq!(l.addresses[0].prefix, net("10.50.0.0/29"));
            l.addresses[0].address
        })
        .collect();
    assert_eq!(
        got,
        [
            "10.50.0.2",
            "10.50.0.3",
            "10.50.0.4",
            "10.50.0.5",
            "10.50.0.6"
        ]
        .map(ip)
    );
    let e = i.allocate(&req("x", "net", "n3")).unwrap_err();
    assert!(
        matches!(e, IpamError::SubnetExhausted { capacity: 5, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("10.50.0.0/29"), "{e}");
    assert!(i.allocations().is_empty(), "l2 has no blocks");
}

#[test]
fn dual_stack_gets_one_address_per_family_all_or_nothing() {
    // v6 blocks are /127 (one pod each), v4 /24: the second pod on n1 fails on v6.
    let mut i = setup(&l3(
        Some(("10.40.0.0/16", 24)),
        Some(("fd00:40::/120", 127)),
    ));
    let a = i.allocate(&req("a", "net", "n1")).unwrap();
    assert_eq!(addrs(&a), [ip("10.40.0.2"), ip("fd00:40::1")]);
    assert_eq!(a.addresses[1].gateway, ip("fd00:40::"));
    let e = i.allocate(&req("b", "net", "n1")).unwrap_err();
    assert!(
        matches!(
            e,
            IpamError::BlockExhausted {
                field: "spec.ipv6Subnet",
                ..
            }
        ),
        "{e}"
    );
    assert!(i.lease(&key("b")).is_none());
    i.release(&key("a"));
    // The v4 address of the failed ADD was rolled back: the next pod gets .2 again.
    let b = i.allocate(&req("b", "net", "n1")).unwrap();
    assert_eq!(addrs(&b), [ip("10.40.0.2"), ip("fd00:40::1")]);
    assert_eq!(b.port, PortId(1), "the failed ADD's port was rolled back");
}

// ---- keys --------------------------------------------------------------------------------------

#[test]
fn retried_add_is_idempotent() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    let a = i.allocate(&req("a", "net", "n1")).unwrap();
    let g = i.generation();
    assert_eq!(i.allocate(&req("a", "net", "n1")).unwrap(), a);
    assert_eq!(i.generation(), g, "a retry changes nothing");
    assert_eq!(i.leases().count(), 1);
    let b = i.allocate(&req("b", "net", "n1")).unwrap();
    assert_eq!(addrs(&b), [ip("10.40.0.3")], "the retry leaked nothing");
    assert_eq!(i.lease(&key("a")), Some(&a));
}

#[test]
fn same_key_with_another_network_node_or_pod_already_exists() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    i.ensure_network("other", &l2(Some("10.50.0.0/24"), None))
        .unwrap();
    i.allocate(&req("a", "net", "n1")).unwrap();
    let mut other_pod = req("a", "net", "n1");
    other_pod.pod.name = "someone-else".into();
    for r in [req("a", "other", "n1"), req("a", "net", "n2"), other_pod] {
        let e = i.allocate(&r).unwrap_err();
        assert!(matches!(e, IpamError::AlreadyExists { .. }), "{e}");
        assert_eq!(e.cni_code(), ErrorCode::AlreadyExists);
        assert!(
            e.to_string()
                .contains("container a already has interface eth0"),
            "{e}"
        );
    }
    // Another interface of the same container is another key.
    let mut eth1 = req("a", "other", "n1");
    eth1.key.ifname = "eth1".into();
    let l = i.allocate(&eth1).unwrap();
    assert_eq!(l.port, PortId(2));
    assert_ne!(l.host_iface, i.lease(&key("a")).unwrap().host_iface);
}

/// A lease records its pod's UID; the same key for a pod of the same name but another UID is
/// another pod (recreated), and a request without a UID (or a lease without one) matches any.
#[test]
fn a_lease_records_the_pod_uid_and_another_uid_is_another_pod() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    let mut first = req("a", "net", "n1");
    first.pod.uid = "uid-1".into();
    let l = i.allocate(&first).unwrap();
    assert_eq!(l.pod.uid, "uid-1");
    let mut recreated = first.clone();
    recreated.pod.uid = "uid-2".into();
    let e = i.allocate(&recreated).unwrap_err();
    assert!(matches!(e, IpamError::AlreadyExists { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("UID uid-1") && msg.contains("UID uid-2"),
        "{msg}"
    );
    let mut unknown = first.clone();
    unknown.pod.uid = String::new();
    assert_eq!(i.allocate(&unknown).unwrap(), l);
    // The UID survives a save and a load; a state written before UIDs were recorded loads
    // with none.
    let state = i.to_state();
    let json = serde_json::to_value(&state).unwrap();
    assert_eq!(json["leases"][0]["podUid"], "uid-1");
    let restored = Ipam::from_state(&state, IpamConfig::default()).unwrap();
    assert_eq!(restored.lease(&key("a")).unwrap().pod.uid, "uid-1");
    let mut old = json;
    old["leases"][0].as_object_mut().unwrap().remove("podUid");
    let old: IpamState = serde_json::from_value(old).unwrap();
    let restored = Ipam::from_state(&old, IpamConfig::default()).unwrap();
    assert_eq!(restored.lease(&key("a")).unwrap().pod.uid, "");
}

#[test]
fn release_is_idempotent_and_returns_everything() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    assert_eq!(i.release(&key("nope")), None);
    let g = i.generation();
    assert_eq!(i.release(&key("nope")), None);
    assert_eq!(i.generation(), g);
    let a = i.allocate(&req("a", "net", "n1")).unwrap();
    assert_eq!(i.release(&key("a")), Some(a.clone()));
    assert_eq!(i.release(&key("a")), None);
    let b = i.allocate(&req("b", "net", "n1")).unwrap();
    assert_eq!(addrs(&b), addrs(&a));
    assert_eq!(b.port, a.port);
    assert_ne!(
        b.endpoint_id, a.endpoint_id,
        "endpoint ids are never reused"
    );
}

/// `req` for a pod of namespace `ns` carrying sticky identity `identity`.
fn identity_req(c: &str, node: &str, ns: &str, identity: &str) -> AllocateRequest {
    let mut r = req(c, "net", node);
    r.pod.namespace = ns.into();
    r.identity = Some(identity.into());
    r
}

#[test]
fn pods_of_one_identity_share_addresses_and_mac_until_the_last_goes() {
    let mut i = setup(&l2(Some("10.50.0.0/24"), Some("fd50::/64")));
    // The VM's source pod, then its migration target on another node.
    let src = i
        .allocate(&identity_req("src", "n1", "vms", "vm-1"))
        .unwrap();
    let dst = i
        .allocate(&identity_req("dst", "n2", "vms", "vm-1"))
        .unwrap();
    assert_eq!((addrs(&dst), dst.mac), (addrs(&src), src.mac));
    assert_eq!(dst.identity.as_deref(), Some("vm-1"));
    assert_ne!(
        dst.endpoint_id, src.endpoint_id,
        "each pod is its own endpoint"
    );
    assert_ne!(dst.key, src.key);
    // Another identity, the same identity in another namespace, and a pod without one each
    // get their own.
    let other = i.allocate(&identity_req("o", "n1", "vms", "vm-2")).unwrap();
    let elsewhere = i.allocate(&identity_req("e", "n1", "lab", "vm-1")).unwrap();
    let plain = i.allocate(&req("p", "net", "n1")).unwrap();
    let (mut macs, mut taken) = (HashSet::new(), HashSet::new());
    for l in [&src, &other, &elsewhere, &plain] {
        assert!(macs.insert(l.mac), "MAC {} handed out twice", l.mac);
        for a in addrs(l) {
            assert!(taken.insert(a), "address {a} handed out twice");
        }
    }
    // The source goes (migration done): the target keeps the addresses and MAC, and nobody
    // else gets them.
    i.release(&key("src"));
    let next = i.allocate(&req("n", "net", "n1")).unwrap();
    assert!(addrs(&next).iter().all(|a| !addrs(&dst).contains(a)));
    assert_ne!(next.mac, dst.mac);
    // A retried ADD of the target is the same lease; a new pod of the identity shares again.
    assert_eq!(
        i.allocate(&identity_req("dst", "n2", "vms", "vm-1"))
            .unwrap(),
        dst
    );
    let back = i
        .allocate(&identity_req("back", "n1", "vms", "vm-1"))
        .unwrap();
    assert_eq!((addrs(&back), back.mac), (addrs(&dst), dst.mac));
    // The last lease of the identity gives them back: the lowest free address is theirs again.
    i.release(&key("dst"));
    i.release(&key("back"));
    let reuse = i.allocate(&req("r", "net", "n3")).unwrap();
    assert_eq!(
        addrs(&reuse),
        addrs(&src),
        "handed out again only once free"
    );
}

#[test]
fn an_identity_outside_an_l2_network_is_refused() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    let e = i
        .allocate(&identity_req("a", "n1", "vms", "vm-1"))
        .unwrap_err();
    assert!(matches!(e, IpamError::IdentityNotL2 { .. }), "{e}");
    assert_eq!(e.cni_code(), ErrorCode::InvalidArgs);
    let text = e.to_string();
    assert!(
        text.contains("vms/pod-a") && text.contains("vm-1") && text.contains("type l3"),
        "{text}"
    );
    assert_eq!(i.leases().count(), 0, "nothing was taken");
    assert!(i.allocate(&req("a", "net", "n1")).is_ok(), "no port kept");
}

#[test]
fn shared_identities_survive_a_restart_and_a_contradiction_is_corrupt() {
    let mut i = setup(&l2(Some("10.50.0.0/24"), None));
    let a = i.allocate(&identity_req("a", "n1", "vms", "vm-1")).unwrap();
    i.allocate(&identity_req("b", "n2", "vms", "vm-1")).unwrap();
    let state = i.to_state();
    let mut back = Ipam::from_state(&state, IpamConfig::default()).unwrap();
    assert_eq!(back.to_state(), state);
    assert_eq!(
        back.leases().collect::<Vec<_>>(),
        i.leases().collect::<Vec<_>>()
    );
    // Restored, the identity still shares and still keeps its addresses from others.
    let c = back
        .allocate(&identity_req("c", "n3", "vms", "vm-1"))
        .unwrap();
    assert_eq!((addrs(&c), c.mac), (addrs(&a), a.mac));
    back.release(&key("a"));
    let d = back.allocate(&req("d", "net", "n1")).unwrap();
    assert_ne!(addrs(&d), addrs(&a));
    // A saved lease of the identity with another address contradicts the first.
    let mut json = serde_json::to_value(&state).unwrap();
    let leases = json["leases"].as_array_mut().unwrap();
    let b = leases.iter_mut().find(|l| l["containerId"] == "b").unwrap();
    b["addresses"][0]["address"] = "10.50.0.9".into();
    let bad: IpamState = serde_json::from_value(json).unwrap();
    let e = Ipam::from_state(&bad, IpamConfig::default()).unwrap_err();
    assert!(
        matches!(&e, IpamError::CorruptState { what } if what.contains("identity")),
        "{e}"
    );
}

#[test]
fn gc_releases_what_the_runtime_forgot_on_that_node_only() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    for (c, n) in [("a", "n1"), ("b", "n1"), ("c", "n1"), ("d", "n2")] {
        i.allocate(&req(c, "net", n)).unwrap();
    }
    let keep: BTreeSet<_> = [key("b")].into();
    let gone: Vec<_> = i.gc("n1", &keep).into_iter().map(|l| l.key).collect();
    assert_eq!(gone, [key("a"), key("c")]);
    let left: Vec<_> = i.leases().map(|l| l.key.clone()).collect();
    assert_eq!(left, [key("b"), key("d")]);
    assert!(i.gc("n1", &keep).is_empty());
}

#[test]
fn unknown_network_node_and_external_networks() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    let e = i.allocate(&req("a", "nope", "n1")).unwrap_err();
    assert!(matches!(e, IpamError::UnknownNetwork { .. }));
    assert_eq!(e.cni_code(), ErrorCode::Unbound);
    let e = i.allocate(&req("a", "net", "n9")).unwrap_err();
    assert!(matches!(e, IpamError::UnknownNode { .. }));
    i.ensure_network(
        "corp",
        &NetworkDef {
            kind: NetworkType::External,
            v4: None,
            v6: None,
        },
    )
    .unwrap();
    let e = i.allocate(&req("a", "corp", "n1")).unwrap_err();
    assert!(matches!(e, IpamError::NoIpam { .. }));
    assert!(e.to_string().contains("external"), "{e}");
    assert_eq!(i.leases().count(), 0);
}

#[test]
fn removing_a_network_or_node_releases_its_leases() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    i.ensure_network("other", &l2(Some("10.50.0.0/24"), None))
        .unwrap();
    i.allocate(&req("a", "net", "n1")).unwrap();
    i.allocate(&req("b", "other", "n1")).unwrap();
    i.allocate(&req("c", "other", "n2")).unwrap();
    let gone: Vec<_> = i
        .remove_network("other")
        .into_iter()
        .map(|l| l.key)
        .collect();
    assert_eq!(gone, [key("b"), key("c")]);
    assert!(i.remove_network("other").is_empty());
    let gone: Vec<_> = i.remove_node("n1").into_iter().map(|l| l.key).collect();
    assert_eq!(gone, [key("a")]);
    assert_eq!(i.leases().count(), 0);
    assert!(i.allocations().is_empty());
}

// ---- ports, MACs, interface names ---------------------------------------------------------------

#[test]
fn ports_are_lowest_free_and_bounded_by_the_forwarder() {
    let mut i = setup(&l3(None, Some(("fd00::/48", 64))));
    for n in 1..=MAX_POD_PORT {
        let l = i.allocate(&req(&format!("c{n}"), "net", "n1")).unwrap();
        assert_eq!(l.port, PortId(n));
    }
    let e = i.allocate(&req("last", "net", "n1")).unwrap_err();
    assert!(
        matches!(e, IpamError::PortsExhausted { max: 4094, .. }),
        "{e}"
    );
    assert!(i.lease(&key("last")).is_none());
    i.release(&key("c7"));
    assert_eq!(
        i.allocate(&req("last", "net", "n1")).unwrap().port,
        PortId(7)
    );
    assert_eq!(
        i.allocate(&req("x", "net", "n2")).unwrap().port,
        PortId(1),
        "per node"
    );
    let macs: HashSet<_> = i.leases().map(|l| l.mac).collect();
    assert_eq!(macs.len(), i.leases().count(), "MACs are unique");
    let names: HashSet<_> = i
        .leases()
        .filter(|l| l.node == "n1")
        .map(|l| l.host_iface)
        .collect();
    assert_eq!(names.len(), usize::try_from(MAX_POD_PORT).unwrap());
    assert!(
        i.leases().all(|l| l.port != PortId::HOST),
        "the host interface's port is never a pod's"
    );
}

#[test]
fn macs_are_locally_administered_unicast_and_never_a_gateways() {
    let mut i = setup(&l2(Some("10.50.0.0/24"), Some("fd00:50::/64")));
    let l = i.allocate(&req("a", "net", "n1")).unwrap();
    assert_eq!(l.mac.0[0], 0x02);
    assert_eq!(l.mac.0[0] & 1, 0, "unicast");
    let g = gateway_mac(l.network_id);
    assert_eq!(g.0, [0x06, 0, 0, 0, 0, 1]);
    assert_eq!(g.0[0] & 0b11, 0b10, "locally administered unicast");
    assert_ne!(g, l.mac);
    // Deterministic: the same (network, address) gives the same MAC after a release.
    i.release(&key("a"));
    assert_eq!(i.allocate(&req("b", "net", "n2")).unwrap().mac, l.mac);
}

#[test]
fn host_interface_names_fit_and_avoid_collisions() {
    let k = key("0123456789abcdef");
    let first = unique_iface(&k, &HashSet::new()).unwrap();
    assert_eq!(first.as_str().len(), 12);
    assert!(first.as_str().starts_with("lace"));
    assert!(first.as_str()[4..].chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(
        unique_iface(&k, &HashSet::new()).unwrap(),
        first,
        "deterministic"
    );
    let taken: HashSet<String> = [first.as_str().to_owned()].into();
    let second = unique_iface(&k, &taken).unwrap();
    assert_ne!(second, first);
    let taken: HashSet<String> = (0..NAME_TRIES)
        .map(|salt| {
            let h = fnv64(&[
                k.container_id.as_bytes(),
                k.ifname.as_bytes(),
                &salt.to_be_bytes(),
            ]);
            format!("lace{:08x}", h as u32)
        })
        .collect();
    let e = unique_iface(&k, &taken).unwrap_err();
    assert!(matches!(e, IpamError::NoUniqueName { .. }), "{e}");
}

// ---- persistence -------------------------------------------------------------------------------

fn busy_ipam() -> Ipam {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), Some(("fd00:40::/48", 64))));
    i.ensure_network("flat", &l2(Some("10.50.0.0/24"), None))
        .unwrap();
    for n in 0..20 {
        let node = ["n1", "n2", "n3"][n % 3];
        let network = if n % 4 == 0 { "flat" } else { "net" };
        i.allocate(&req(&format!("c{n}"), network, node)).unwrap();
    }
    for n in [3, 4, 11] {
        i.release(&key(&format!("c{n}")));
    }
    i.remove_node("n3");
    i.ensure_node("n4").unwrap();
    i
}

#[test]
fn restart_from_the_store_gives_identical_answers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path().join("state.json"));
    assert_eq!(store.load().unwrap(), None, "first start");
    let mut a = busy_ipam();
    store.save(&a.to_state()).unwrap();
    let mut b = store.load_ipam(IpamConfig::default()).unwrap();
    assert_eq!(b.to_state(), a.to_state());
    assert_eq!(
        b.leases().collect::<Vec<_>>(),
        a.leases().collect::<Vec<_>>()
    );
    // Same answers from here on, and nothing reallocated.
    for n in 100..110 {
        let r = req(
            &format!("c{n}"),
            if n % 2 == 0 { "net" } else { "flat" },
            ["n1", "n4"][n % 2],
        );
        assert_eq!(a.allocate(&r).unwrap(), b.allocate(&r).unwrap());
    }
    let r = req("x", "net", "n2");
    assert_eq!(
        a.ensure_network("new", &l2(Some("10.60.0.0/24"), None))
            .unwrap(),
        b.ensure_network("new", &l2(Some("10.60.0.0/24"), None))
            .unwrap()
    );
    assert_eq!(a.ensure_node("n5").unwrap(), b.ensure_node("n5").unwrap());
    assert_eq!(a.allocate(&r).unwrap(), b.allocate(&r).unwrap());
    let all: Vec<_> = b.leases().flat_map(addrs).collect();
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), distinct.len());
    assert!(
        !dir.path().join("state.json.tmp").exists(),
        "the temporary was renamed"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(store.path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn shared_ipam_persists_every_change_and_reopens_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let s = SharedIpam::open(Store::new(&path), IpamConfig::default()).unwrap();
    s.ensure_network("net", &l3(Some(("10.40.0.0/16", 24)), None))
        .unwrap();
    s.ensure_node("n1").unwrap();
    let a = s.allocate(&req("a", "net", "n1")).unwrap();
    s.allocate(&req("b", "net", "n1")).unwrap();
    s.release(&key("b")).unwrap();
    drop(s);
    // A leftover temporary from a crash mid-save is ignored.
    std::fs::write(dir.path().join("state.json.tmp"), b"{half").unwrap();
    let s = SharedIpam::open(Store::new(&path), IpamConfig::default()).unwrap();
    assert_eq!(s.lease(&key("a")), Some(a.clone()));
    assert_eq!(
        s.allocate(&req("a", "net", "n1")).unwrap(),
        a,
        "retry after restart"
    );
    let c = s.allocate(&req("c", "net", "n1")).unwrap();
    assert_eq!(
        addrs(&c),
        [ip("10.40.0.3")],
        "b's address is free again, a's is not"
    );
    assert_eq!(s.gc("n1", &BTreeSet::new()).unwrap().len(), 2);
    assert_eq!(s.remove_node("n1").unwrap().len(), 0);
    assert_eq!(s.remove_network("net").unwrap().len(), 0);
    let reopened = Store::new(&path).load_ipam(IpamConfig::default()).unwrap();
    assert_eq!(reopened.leases().count(), 0);
    assert!(reopened.network_ids().is_empty());
}

#[test]
fn a_failed_save_undoes_the_change() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let s = SharedIpam::open(Store::new(sub.join("state.json")), IpamConfig::default()).unwrap();
    s.ensure_network("net", &l3(Some(("10.40.0.0/16", 24)), None))
        .unwrap();
    s.ensure_node("n1").unwrap();
    std::fs::remove_dir_all(&sub).unwrap();
    let e = s.allocate(&req("a", "net", "n1")).unwrap_err();
    assert!(matches!(e, IpamError::Persist(_)), "{e}");
    assert!(e.to_string().contains("not made"), "{e}");
    assert_eq!(e.cni_code(), ErrorCode::TryAgainLater);
    assert_eq!(s.lease(&key("a")), None);
    std::fs::create_dir(&sub).unwrap();
    let a = s.allocate(&req("a", "net", "n1")).unwrap();
    assert_eq!(
        addrs(&a),
        [ip("10.40.0.2")],
        "the failed ADD left nothing behind"
    );
    assert_eq!(a.endpoint_id, endpoint_id(NodeId(1), 1));
}

#[test]
fn corrupt_store_files_are_errors_never_an_empty_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let store = Store::new(&path);
    let good = serde_json::to_string(&busy_ipam().to_state()).unwrap();
    for bad in ["", "not json", &good[..good.len() / 2], "{}", "[]"] {
        std::fs::write(&path, bad).unwrap();
        let e = store.load_ipam(IpamConfig::default()).unwrap_err();
        assert!(matches!(e, StoreError::Corrupt { .. }), "{bad:?}: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("state.json") && msg.contains("backup"),
            "{msg}"
        );
    }
    // Parses, but two leases hold the same address.
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    let leases = v["leases"].as_array_mut().unwrap();
    let first = leases[0]["addresses"].clone();
    let net = leases[0]["network"].clone();
    let node = leases[0]["node"].clone();
    let twin = leases
        .iter_mut()
        .skip(1)
        .find(|l| l["network"] == net && l["node"] == node)
        .unwrap();
    twin["addresses"] = first;
    std::fs::write(&path, v.to_string()).unwrap();
    let e = store.load_ipam(IpamConfig::default()).unwrap_err();
    let StoreError::Inconsistent { source, .. } = &e else {
        panic!("{e}")
    };
    assert!(matches!(**source, IpamError::CorruptState { .. }), "{e}");
    assert!(e.to_string().contains("not a free pod address"), "{e}");
    // A wrong version, and a changed locator pool.
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    v["version"] = 3.into();
    std::fs::write(&path, v.to_string()).unwrap();
    assert!(store
        .load_ipam(IpamConfig::default())
        .unwrap_err()
        .to_string()
        .contains("version 3"));
    std::fs::write(&path, &good).unwrap();
    let other = IpamConfig {
        locator_pool: "fd99::/32".parse().unwrap(),
        locator_len: 48,
    };
    let e = store.load_ipam(other).unwrap_err();
    assert!(e.to_string().contains("locators would move"), "{e}");
    assert!(store.load_ipam(IpamConfig::default()).is_ok());
}

#[test]
fn inconsistent_states_are_refused() {
    let good = busy_ipam().to_state();
    let cfg = IpamConfig::default();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = serde_json::to_value(&good).unwrap();
        f(&mut v);
        let s: IpamState = serde_json::from_value(v).unwrap();
        Ipam::from_state(&s, cfg).unwrap_err().to_string()
    };
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("id 0", Box::new(|v| v["networks"]["net"]["id"] = 0.into())),
        ("id 2", Box::new(|v| v["networks"]["net"]["id"] = 2.into())),
        ("counter", Box::new(|v| v["nextNetworkId"] = 2.into())),
        (
            "locator",
            Box::new(|v| v["nodes"]["n2"]["locator"] = v["nodes"]["n1"]["locator"].clone()),
        ),
        (
            "block",
            Box::new(|v| v["blocks"][1]["prefix"] = v["blocks"][0]["prefix"].clone()),
        ),
        ("port", Box::new(|v| v["leases"][1]["port"] = 0.into())),
        (
            "MAC",
            Box::new(|v| v["leases"][1]["mac"] = v["leases"][0]["mac"].clone()),
        ),
        ("MAC", Box::new(|v| v["leases"][1]["mac"] = "zz".into())),
        (
            "endpoint id",
            Box::new(|v| v["leases"][1]["endpointId"] = (9u64 << 32 | 1).into()),
        ),
        (
            "endpoint id",
            Box::new(|v| v["leases"][1]["endpointId"] = v["leases"][0]["endpointId"].clone()),
        ),
        (
            "counter",
            Box::new(|v| v["nodes"]["n1"]["nextEndpoint"] = 0.into()),
        ),
        (
            "unknown Network",
            Box::new(|v| v["leases"][1]["network"] = "gone".into()),
        ),
        (
            "addresses",
            Box::new(|v| v["leases"][1]["addresses"] = serde_json::json!([])),
        ),
    ];
    for (what, f) in cases {
        let msg = edit(&*f);
        assert!(
            msg.contains("inconsistent") && msg.contains(what),
            "{what}: {msg}"
        );
    }
}

// ---- concurrency -------------------------------------------------------------------------------

#[test]
fn concurrent_adds_from_8_threads_get_distinct_addresses() {
    let s = SharedIpam::in_memory(setup(&l3(
        Some(("10.40.0.0/16", 22)),
        Some(("fd00::/48", 64)),
    )));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                (0..100)
                    .map(|n| {
                        let node = ["n1", "n2"][n % 2];
                        s.allocate(&req(&format!("t{t}-{n}"), "net", node)).unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let leases: Vec<EndpointLease> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(leases.len(), 800);
    let all: HashSet<IpAddr> = leases.iter().flat_map(addrs).collect();
    assert_eq!(all.len(), 1600);
    let ports: HashSet<(String, PortId)> =
        leases.iter().map(|l| (l.node.clone(), l.port)).collect();
    assert_eq!(ports.len(), 800);
    let macs: HashSet<MacAddr> = leases.iter().map(|l| l.mac).collect();
    assert_eq!(macs.len(), 800);
    assert_eq!(s.read(|i| i.leases().count()), 800);
}

// ---- per-node endpoint ids, state versions -----------------------------------------------------

#[test]
fn endpoint_ids_carry_their_node_and_count_per_node() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    let a = i.allocate(&req("a", "net", "n1")).unwrap();
    let b = i.allocate(&req("b", "net", "n2")).unwrap();
    let c = i.allocate(&req("c", "net", "n1")).unwrap();
    assert_eq!(a.endpoint_id, endpoint_id(NodeId(1), 1));
    assert_eq!(
        b.endpoint_id,
        endpoint_id(NodeId(2), 1),
        "each node counts alone"
    );
    assert_eq!(c.endpoint_id, endpoint_id(NodeId(1), 2));
    i.release(&key("c"));
    let d = i.allocate(&req("d", "net", "n1")).unwrap();
    assert_eq!(d.port, c.port, "the port is reused");
    assert_eq!(
        d.endpoint_id,
        endpoint_id(NodeId(1), 3),
        "the endpoint id never is"
    );
    assert_eq!(i.next_endpoint("n1"), Some(4));
    assert!(!i.skip_endpoints_to("n1", 2), "never down");
    assert!(i.skip_endpoints_to("n1", 100));
    let e = i.allocate(&req("e", "net", "n1")).unwrap();
    assert_eq!(e.endpoint_id, endpoint_id(NodeId(1), 100));
    // A saved lease above its node's counter is refused; tolerated when not strict (a
    // ledger read before the node's own write of its counter).
    let mut s = serde_json::to_value(i.to_state()).unwrap();
    s["nodes"]["n1"]["nextEndpoint"] = 50.into();
    let s: IpamState = serde_json::from_value(s).unwrap();
    let msg = Ipam::from_state(&s, IpamConfig::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("counter"), "{msg}");
    let mut loose = Ipam::from_ledger(&s, IpamConfig::default()).unwrap();
    for b in i.to_state().blocks() {
        loose.insert_block(b).unwrap();
    }
    for r in i.to_state().leases() {
        loose.insert_lease(r, false).unwrap();
    }
    assert_eq!(loose.leases().count(), i.leases().count());
}

#[test]
fn a_version_1_state_loads_and_keeps_its_endpoint_ids() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    i.allocate(&req("a", "net", "n1")).unwrap();
    i.allocate(&req("b", "net", "n2")).unwrap();
    // What version 1 wrote: one counter for the state, ids 1, 2, … below 2^32.
    let mut v = serde_json::to_value(i.to_state()).unwrap();
    v["version"] = 1.into();
    v["nextEndpointId"] = 3.into();
    for n in v["nodes"].as_object_mut().unwrap().values_mut() {
        n.as_object_mut().unwrap().remove("nextEndpoint");
    }
    v["leases"][0]["endpointId"] = 1.into();
    v["leases"][1]["endpointId"] = 2.into();
    let s: IpamState = serde_json::from_value(v).unwrap();
    let mut j = Ipam::from_state(&s, IpamConfig::default()).unwrap();
    assert_eq!(j.lease(&key("a")).unwrap().endpoint_id, 1);
    assert_eq!(j.lease(&key("b")).unwrap().endpoint_id, 2);
    let c = j.allocate(&req("c", "net", "n1")).unwrap();
    assert_eq!(c.endpoint_id, endpoint_id(NodeId(1), 1));
    // Written back as version 2, without the state's counter.
    let saved = serde_json::to_value(j.to_state()).unwrap();
    assert_eq!(saved["version"], 2);
    assert!(saved.get("nextEndpointId").is_none(), "{saved}");
    assert_eq!(saved["nodes"]["n1"]["nextEndpoint"], 2);
}

// ---- paired blocks, claims, the host network id --------------------------------------------------

#[test]
fn dual_stack_blocks_have_one_index_in_both_families() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), Some(("fd00:40::/48", 64))));
    // A state from before pairing: n9 holds v4 block 0 and v6 block 1.
    i.ensure_node("n9").unwrap();
    i.insert_block(&BlockRecord {
        network: "net".into(),
        node: "n9".into(),
        prefix: net("10.40.0.0/24"),
    })
    .unwrap();
    i.insert_block(&BlockRecord {
        network: "net".into(),
        node: "n9".into(),
        prefix: net("fd00:40:0:1::/64"),
    })
    .unwrap();
    let a = i.allocate(&req("a", "net", "n1")).unwrap();
    assert_eq!(
        a.addresses.iter().map(|x| x.prefix).collect::<Vec<_>>(),
        [net("10.40.2.0/24"), net("fd00:40:0:2::/64")],
        "the lowest index free in both families"
    );
    let b = i.allocate(&req("b", "net", "n2")).unwrap();
    assert_eq!(
        b.addresses.iter().map(|x| x.prefix).collect::<Vec<_>>(),
        [net("10.40.3.0/24"), net("fd00:40:0:3::/64")]
    );
}

#[test]
fn spread_blocks_start_at_the_nodes_place_wrap_around_and_keep_dual_stack_pairs() {
    // 10.40.0.0/20 in /24s: 16 blocks; fd00:40::/60 in /64s: 16 too.
    let def = l3(Some(("10.40.0.0/20", 24)), Some(("fd00:40::/60", 64)));
    let place = |node: &str| (fnv64(&[node.as_bytes()]) % 16) as u8;
    let mut i = setup(&def);
    i.spread_blocks();
    let a = i.allocate(&req("a", "net", "n1")).unwrap();
    let p = place("n1");
    assert_eq!(
        a.addresses.iter().map(|x| x.prefix).collect::<Vec<_>>(),
        [
            net(&format!("10.40.{p}.0/24")),
            net(&format!("fd00:40:0:{p:x}::/64"))
        ],
        "the node's own place, the same index in both families"
    );
    // Deterministic: the same state and node give the same block; without spreading the
    // lowest free one.
    let mut j = setup(&def);
    j.spread_blocks();
    assert_eq!(j.allocate(&req("a", "net", "n1")).unwrap(), a);
    let mut k = setup(&def);
    assert_eq!(
        k.allocate(&req("a", "net", "n1")).unwrap().addresses[0].prefix,
        net("10.40.0.0/24")
    );

    // Every block from n2's place to the end taken: n2 wraps around to the lowest free one.
    let mut w = setup(&def);
    w.spread_blocks();
    let from = place("n2");
    for (n, b) in (from..16).enumerate() {
        let node = format!("t{n}");
        w.ensure_node(&node).unwrap();
        for prefix in [format!("10.40.{b}.0/24"), format!("fd00:40:0:{b:x}::/64")] {
            w.insert_block(&BlockRecord {
                network: "net".into(),
                node: node.clone(),
                prefix: net(&prefix),
            })
            .unwrap();
        }
    }
    assert_ne!(from, 0, "n2's place must leave blocks below it to wrap to");
    let b = w.allocate(&req("b", "net", "n2")).unwrap();
    assert_eq!(
        b.addresses.iter().map(|x| x.prefix).collect::<Vec<_>>(),
        [net("10.40.0.0/24"), net("fd00:40::/64")]
    );
}

/// Spread registration (Kubernetes mode: every node registers itself at once): a node's
/// locator is looked for from its own place in the pool, and its id is the one that goes with
/// that locator unless another node holds or claimed it (then the counter's); only the
/// registrar's node is registered.
#[test]
fn spread_nodes_take_locators_from_their_place_and_the_id_that_goes_with_it() {
    // fc00::/32 in /48s: 65,536 locators.
    let place = |node: &str| fnv64(&[node.as_bytes()]) % 65_536;
    let locator = |i: u64| -> Ipv6Net { format!("fc00:0:{i:x}::/48").parse().unwrap() };
    let mut i = Ipam::new(IpamConfig::default()).unwrap();
    i.spread_blocks();
    let a = i.ensure_node("n1").unwrap();
    assert_eq!(
        (a.locator, a.id.0),
        (locator(place("n1")), place("n1") as u32 + 1)
    );
    // Deterministic; without spreading, the lowest locator and the counter's id.
    let mut j = Ipam::new(IpamConfig::default()).unwrap();
    j.spread_blocks();
    assert_eq!(j.ensure_node("n1").unwrap(), a);
    let mut k = Ipam::new(IpamConfig::default()).unwrap();
    let first = k.ensure_node("n1").unwrap();
    assert_eq!((first.locator, first.id.0), (locator(0), 1));

    // Its place taken: the next free locator; its id claimed by another node: the counter's.
    let mut r = Ipam::new(IpamConfig::default()).unwrap();
    r.spread_blocks();
    let p = place("n2");
    assert!(r.reserve_locator(locator(p)));
    r.reserve_node_id(p as u32 + 2);
    let b = r.ensure_node("n2").unwrap();
    assert_eq!(b.locator, locator(p + 1));
    assert_eq!(b.id.0, 1, "the id that went with it is claimed");

    // A registrar registers only its own node.
    r.register_only("n4");
    assert!(matches!(
        r.ensure_node("n5"),
        Err(IpamError::RegisteredByItsOwnControl { .. })
    ));
    assert!(r.ensure_node("n4").is_ok());
}

/// Spread network ids (Kubernetes mode: every control registers every Network): the id of
/// the network's own place, so that two views registering it want the same id; an id claimed
/// for another network, or held, is passed over.
#[test]
fn spread_network_ids_start_at_the_networks_place() {
    let def = l3(Some(("10.40.0.0/16", 24)), None);
    let place = |name: &str| (fnv64(&[name.as_bytes()]) % 0xfffe) as u32 + 1;
    let mut a = Ipam::new(IpamConfig::default()).unwrap();
    a.spread_blocks();
    let mut b = Ipam::new(IpamConfig::default()).unwrap();
    b.spread_blocks();
    b.ensure_network("other", &def).unwrap();
    let id = a.ensure_network("net", &def).unwrap();
    assert_eq!(id.0, place("net"));
    assert_eq!(
        b.ensure_network("net", &def).unwrap(),
        id,
        "another view agrees"
    );
    // Claimed for another network: the next one; claimed for this one: taken.
    let mut c = Ipam::new(IpamConfig::default()).unwrap();
    c.spread_blocks();
    c.reserve_network_id(place("net"), "someone");
    assert_eq!(c.ensure_network("net", &def).unwrap().0, place("net") + 1);
    let mut d = Ipam::new(IpamConfig::default()).unwrap();
    d.spread_blocks();
    d.reserve_network_id(place("net"), "net");
    assert_eq!(d.ensure_network("net", &def).unwrap().0, place("net"));
    // Without spreading: the counter's.
    let mut e = Ipam::new(IpamConfig::default()).unwrap();
    assert_eq!(e.ensure_network("net", &def).unwrap().0, 1);
}

#[test]
fn claimed_l2_addresses_are_never_handed_out() {
    let mut i = setup(&l2(Some("10.50.0.0/24"), None));
    assert!(i.set_claim("net", ip("10.50.0.2"), true));
    assert!(!i.set_claim("net", ip("10.50.0.2"), true), "no change");
    assert!(
        !i.set_claim("net", ip("10.99.0.2"), true),
        "not of the subnet"
    );
    let a = i.allocate(&req("a", "net", "n1")).unwrap();
    assert_eq!(addrs(&a), [ip("10.50.0.3")]);
    assert!(i.set_claim("net", ip("10.50.0.2"), false));
    let b = i.allocate(&req("b", "net", "n2")).unwrap();
    assert_eq!(addrs(&b), [ip("10.50.0.2")]);
    // A full subnet whose last free address is claimed is exhausted.
    let mut j = setup(&l2(Some("10.60.0.0/30"), None));
    j.set_claim("net", ip("10.60.0.2"), true);
    let e = j.allocate(&req("x", "net", "n1")).unwrap_err();
    assert!(matches!(e, IpamError::SubnetExhausted { .. }), "{e}");
}

#[test]
fn the_node_tables_ids_are_never_a_networks() {
    // The sources tables of the uplink's VLANs and of the untagged uplink (0xf000–0xfffe) and
    // the host network (0xffff) are skipped.
    let mut i = Ipam::new(IpamConfig::default()).unwrap();
    let mut s = serde_json::to_value(i.to_state()).unwrap();
    s["nextNetworkId"] = NetworkId::NODE_TABLES.0.into();
    let s: IpamState = serde_json::from_value(s).unwrap();
    i = Ipam::from_state(&s, IpamConfig::default()).unwrap();
    let a = i
        .ensure_network("a", &l3(Some(("10.40.0.0/16", 24)), None))
        .unwrap();
    assert_eq!(a, NetworkId(NetworkId::HOST.0 + 1));
    let b = i
        .ensure_network("b", &l3(Some(("10.41.0.0/16", 24)), None))
        .unwrap();
    assert_eq!(b, NetworkId(NetworkId::HOST.0 + 2));
}

// ---- records one by one, and the journal ---------------------------------------------------------

#[test]
fn the_journal_names_every_record_a_change_touched() {
    let mut i = setup(&l3(Some(("10.40.0.0/16", 24)), None));
    i.allocate(&req("a", "net", "n1")).unwrap();
    assert!(i.take_journal().is_empty(), "no journal unless started");
    i.start_journal();
    i.allocate(&req("a", "net", "n1")).unwrap();
    assert!(
        i.take_journal().is_empty(),
        "a repeated ADD changes nothing"
    );
    i.start_journal();
    i.allocate(&req("b", "net", "n2")).unwrap();
    i.release(&key("a"));
    assert_eq!(
        i.take_journal(),
        BTreeSet::from([
            Dirty::Blocks {
                network: "net".into(),
                node: "n2".into()
            },
            Dirty::Lease(key("a")),
            Dirty::Lease(key("b")),
        ])
    );
    i.start_journal();
    i.ensure_node("n7").unwrap();
    i.remove_network("net");
    assert_eq!(
        i.take_journal(),
        BTreeSet::from([
            Dirty::Ledger,
            Dirty::Blocks {
                network: "net".into(),
                node: "n1".into()
            },
            Dirty::Blocks {
                network: "net".into(),
                node: "n2".into()
            },
            Dirty::Lease(key("b")),
        ])
    );
}

#[test]
fn records_added_one_by_one_rebuild_the_same_state() {
    let a = busy_ipam();
    let s = a.to_state();
    let mut b = Ipam::from_ledger(&a.ledger(), IpamConfig::default()).unwrap();
    for r in s.leases().iter().rev() {
        // A lease before its block: refused, nothing taken.
        if b.node_blocks(&r.network, &r.node).is_empty() && r.network == "net" {
            assert!(b.insert_lease(r, false).is_err());
        }
    }
    for blk in s.blocks() {
        b.insert_block(blk).unwrap();
        b.insert_block(blk).unwrap();
    }
    for r in s.leases() {
        b.insert_lease(r, false).unwrap();
        b.insert_lease(r, false).unwrap();
    }
    assert_eq!(b.to_state(), s);
    // A changed record replaces the old one; a clashing one is refused and the old one kept.
    let mut renamed = s.leases()[1].clone();
    renamed.pod_uid = "uid-2".into();
    b.insert_lease(&renamed, false).unwrap();
    assert_eq!(b.lease(&renamed.key()).unwrap().pod.uid, "uid-2");
    let mut clash = s.leases()[1].clone();
    clash.mac = s.leases()[0].mac.clone();
    let before = b.lease(&clash.key()).cloned();
    assert!(b.insert_lease(&clash, false).is_err());
    assert_eq!(b.lease(&clash.key()).cloned(), before);
    // A block in use stays; a free one goes.
    let used = s
        .blocks()
        .iter()
        .find(|blk| {
            s.leases()
                .iter()
                .any(|l| l.node == blk.node && l.network == blk.network)
        })
        .unwrap();
    assert!(!b.remove_block(used));
    for r in s
        .leases()
        .iter()
        .filter(|l| l.node == used.node && l.network == used.network)
    {
        b.release(&r.key());
    }
    for blk in s
        .blocks()
        .iter()
        .filter(|blk| blk.node == used.node && blk.network == used.network)
    {
        assert!(b.remove_block(blk));
        assert!(!b.remove_block(blk), "once");
    }
    assert!(b.node_blocks(&used.network, &used.node).is_empty());
}
