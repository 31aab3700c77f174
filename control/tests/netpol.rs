//! Kubernetes NetworkPolicy in lace-control: validation of what admission would refuse, the
//! compiled tables of small worlds read back as the forwarder reads them, limits, and worlds of
//! several networks. The truth tables over the upstream scenarios are `tests/conformance`'s.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use lace_control::api::validate::network_policy_model;
use lace_control::api::{Direction, NetworkType};
use lace_control::compile::{desired, CompileConfig, Compiler, NoteKind, PolicyLimits};
use lace_control::netpol::{evaluate, Connection, Side};
use lace_control::world::{
    AttachmentKey, BoundPolicy, EndpointModel, NamespacedName, NetworkModel, NodeModel, PodModel,
    RoutingModel, World,
};
use lace_shared::policy::{PeerClass, PolicyDir, PolicySetId, PortRange, Ports, PROTO_TCP};
use lace_shared::tables::{TableWriter, TablesConfig};
use lace_shared::types::{IfName, MacAddr, NetworkId, NodeId, PortId};

fn parse(yaml: &str) -> Result<lace_control::netpol::PolicyModel, String> {
    let np: NetworkPolicy = serde_yaml::from_str(&format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n{yaml}"
    ))
    .expect("decodes");
    network_policy_model(
        np.metadata.namespace.as_deref().unwrap_or("default"),
        np.metadata.name.as_deref().unwrap_or_default(),
        &np.spec.unwrap_or_default(),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn what_admission_refuses_is_refused_with_every_field_named() {
    let e = parse(
        r#"
metadata: {name: bad, namespace: shop}
spec:
  podSelector: {matchExpressions: [{key: app, operator: Has}]}
  policyTypes: [Ingress, Sideways]
  ingress:
  - from:
    - ipBlock: {cidr: 10.0.0.0/16, except: [10.1.0.0/24, 10.0.0.0/16]}
    - ipBlock: {cidr: 10.0.0.0/8}
      podSelector: {}
    - {}
    ports:
    - {protocol: ICMP, port: 80}
    - {port: 0}
    - {port: 90, endPort: 80}
    - {port: serve-http, endPort: 90}
    - {port: Serve_HTTP}
    - {endPort: 90}
"#,
    )
    .unwrap_err();
    for want in [
        "NetworkPolicy shop/bad: spec.podSelector.matchExpressions[0].operator \"Has\" is not a label selector operator",
        "NetworkPolicy shop/bad: spec.policyTypes[1] \"Sideways\" is not a policy type; use Ingress or Egress",
        "NetworkPolicy shop/bad: spec.ingress[0].from[0].ipBlock.except[0] \"10.1.0.0/24\" is not strictly inside ipBlock.cidr 10.0.0.0/16",
        "NetworkPolicy shop/bad: spec.ingress[0].from[0].ipBlock.except[1] \"10.0.0.0/16\" is not strictly inside",
        "NetworkPolicy shop/bad: spec.ingress[0].from[1] sets ipBlock together with podSelector or namespaceSelector",
        "NetworkPolicy shop/bad: spec.ingress[0].from[2] sets none of podSelector, namespaceSelector and ipBlock",
        "NetworkPolicy shop/bad: spec.ingress[0].ports[0].protocol \"ICMP\" is not a protocol NetworkPolicy knows; use TCP, UDP or SCTP",
        "NetworkPolicy shop/bad: spec.ingress[0].ports[1].port 0 is outside 1..=65535",
        "NetworkPolicy shop/bad: spec.ingress[0].ports[2].endPort 80 is below port 90",
        "NetworkPolicy shop/bad: spec.ingress[0].ports[3].endPort is set with a named port",
        "NetworkPolicy shop/bad: spec.ingress[0].ports[4].port \"Serve_HTTP\" is not a port name",
        "NetworkPolicy shop/bad: spec.ingress[0].ports[5].endPort is set without port",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
    assert_eq!(e.lines().count(), 12, "{e}");
}

#[test]
fn policy_types_default_as_upstream() {
    let m = parse(
        "metadata: {name: p, namespace: x}\nspec: {podSelector: {}, egress: [{}], ingress: [{}]}",
    )
    .unwrap();
    assert!(m.ingress.is_some() && m.egress.is_some());
    let m =
        parse("metadata: {name: p, namespace: x}\nspec: {podSelector: {}, egress: []}").unwrap();
    assert!(m.ingress.is_some() && m.egress.is_none());
    // Listed types rule: ingress rules of an egress-only policy are ignored.
    let m = parse(
        "metadata: {name: p, namespace: x}\nspec: {podSelector: {}, policyTypes: [Egress], ingress: [{}]}",
    )
    .unwrap();
    assert!(m.ingress.is_none() && m.egress == Some(vec![]));
    // An ipBlock's host bits are cleared, as the API server accepts them.
    let m = parse(
        "metadata: {name: p, namespace: x}\nspec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 10.1.2.3/16, except: [10.1.9.9/24]}}]}]}",
    )
    .unwrap();
    let rules = m.ingress.unwrap();
    assert_eq!(
        format!("{:?}", rules[0].peers[0]),
        "Block(IpBlock { cidr: 10.1.0.0/16, except: [10.1.9.0/24] })"
    );
}

// ---- small worlds ---------------------------------------------------------------------------

fn node(k: u32) -> NodeModel {
    NodeModel {
        name: format!("node-{k}"),
        id: NodeId(k),
        locator: format!("fc00:0:{k:x}::/48").parse().unwrap(),
        underlay: format!("fd00::{k:x}").parse().unwrap(),
        addresses: Vec::new(),
        labels: Default::default(),
    }
}

/// Network n (`net-n`, l3 unless `l2`): 10.n.0.0/16 and fd0n::/48.
fn network(w: &mut World, n: u32, kind: NetworkType) {
    let l3 = kind == NetworkType::L3;
    w.networks.insert(
        format!("net-{n}"),
        NetworkModel {
            name: format!("net-{n}"),
            id: NetworkId(n),
            kind,
            v4: Some((format!("10.{n}.0.0/16").parse().unwrap(), l3.then_some(24))),
            v6: Some((format!("fd{n:02x}::/48").parse().unwrap(), l3.then_some(64))),
            external: vec![],
            anonymous: false,
            l2: Default::default(),
            uplinks: Vec::new(),
        },
    );
    if l3 {
        for k in [1, 2] {
            w.allocations.insert(
                (format!("net-{n}"), format!("node-{k}")),
                vec![
                    format!("10.{n}.{k}.0/24").parse().unwrap(),
                    format!("fd{n:02x}:0:0:{k:x}::/64").parse().unwrap(),
                ],
            );
        }
    }
}

fn v4(n: u32, k: u32, i: u32) -> IpAddr {
    format!("10.{n}.{k}.{i}").parse().unwrap()
}

/// Pod `ns/name` with `labels` on network n, node k, host i.
fn pod(w: &mut World, ns: &str, name: &str, labels: &[(&str, &str)], n: u32, k: u32, i: u32) {
    let key = AttachmentKey {
        container_id: format!("c-{ns}-{name}-{n}"),
        ifname: "eth0".into(),
    };
    w.endpoints.insert(
        key,
        EndpointModel {
            namespace: ns.into(),
            pod: name.into(),
            network: format!("net-{n}"),
            node: format!("node-{k}"),
            addresses: vec![
                v4(n, k, i),
                format!("fd{n:02x}:0:0:{k:x}::{i:x}").parse().unwrap(),
            ],
            mac: MacAddr([2, 0, 0, n as u8, k as u8, i as u8]),
            port: PortId(n * 100 + i),
            host_iface: IfName::new(&format!("t{n}x{i}")).unwrap(),
            endpoint_id: u64::from(n * 1000 + i),
        },
    );
    w.pods.insert(
        NamespacedName::new(ns, name),
        PodModel {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ports: vec![],
        },
    );
}

fn policy(w: &mut World, yaml: &str, network: Option<&str>) {
    let model = parse(yaml).unwrap();
    w.network_policies.insert(
        NamespacedName::new(model.namespace.clone(), model.name.clone()),
        BoundPolicy {
            model,
            network: network.map(str::to_owned),
        },
    );
}

/// Tables on /dev/shm, removed when dropped.
struct Region {
    cfg: TablesConfig,
}

impl Region {
    fn new() -> Region {
        static N: AtomicU32 = AtomicU32::new(0);
        Region {
            cfg: TablesConfig {
                dir: PathBuf::from("/dev/shm"),
                name: format!(
                    "netpol-test-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ),
                size: 64 << 20,
                reader_slots: 2,
            },
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.cfg.tables_path());
        let _ = std::fs::remove_file(self.cfg.qsbr_path());
    }
}

fn base() -> World {
    let mut w = World::default();
    w.nodes.insert("node-1".into(), node(1));
    w.nodes.insert("node-2".into(), node(2));
    network(&mut w, 1, NetworkType::L3);
    pod(&mut w, "x", "a", &[("app", "a")], 1, 1, 10);
    pod(&mut w, "x", "b", &[("app", "b")], 1, 2, 11);
    pod(&mut w, "x", "c", &[("app", "c")], 1, 1, 12);
    w
}

#[test]
fn a_small_world_compiles_to_classes_sets_and_decisions() {
    let mut w = base();
    policy(
        &mut w,
        "metadata: {name: web, namespace: x}\n\
         spec: {podSelector: {matchLabels: {app: a}}, ingress: [{from: [{podSelector: {matchLabels: {app: b}}}], ports: [{port: 80}]}]}",
        None,
    );
    let r = Region::new();
    let mut wr = TableWriter::create(&r.cfg).unwrap();
    let mut c = Compiler::new("node-1", CompileConfig::default());
    let out = c.plan(&w, &[]).unwrap();
    assert!(out.notes.is_empty(), "{:?}", out.notes);
    let pt = &out.tables.policies[&NetworkId(1)];
    // b's addresses are one class; nothing else is named.
    let b_class = pt.peers.get(&IpNet::from(v4(1, 2, 11))).unwrap();
    assert_ne!(b_class, PeerClass::WORLD);
    assert_eq!(pt.peers.len(), 2, "{:?}", pt.peers);
    assert_eq!(
        pt.peers
            .get(&"fd01:0:0:2::b/128".parse::<IpNet>().unwrap())
            .unwrap(),
        b_class
    );
    // One set, a's: isolated for ingress only, b's class on TCP 80.
    assert_eq!(pt.sets.len(), 1);
    let (&sid, set) = pt.sets.iter().next().unwrap();
    assert!(set.set.ingress_isolated && !set.set.egress_isolated);
    assert_eq!(
        set.decisions,
        BTreeMap::from([(
            (PolicyDir::Ingress, b_class),
            Ports::Ranges(vec![PortRange {
                proto: PROTO_TCP,
                lo: 80,
                hi: 80
            }])
        )])
    );
    assert_eq!(out.tables.ports[&PortId(110)].policy, sid);
    assert_eq!(out.tables.ports[&PortId(112)].policy, PolicySetId::NONE);
    assert!(out.tables.networks[&NetworkId(1)].info.stateful);
    // Published, the forwarder's reading agrees.
    c.apply(&mut wr, out.tables).unwrap();
    let snap = wr.staged_view();
    let net = snap.network(NetworkId(1)).unwrap();
    assert!(net.stateful());
    let class_of = |a: &str| net.peer_class(a.parse().unwrap());
    assert_eq!(class_of("10.1.2.11"), b_class);
    assert_eq!(class_of("10.1.1.12"), PeerClass::WORLD);
    assert!(snap.policy_allows(sid, PolicyDir::Ingress, b_class, PROTO_TCP, 80));
    assert!(!snap.policy_allows(sid, PolicyDir::Ingress, b_class, PROTO_TCP, 81));
    assert!(!snap.policy_allows(sid, PolicyDir::Ingress, PeerClass::WORLD, PROTO_TCP, 80));
    assert!(snap.policy_allows(sid, PolicyDir::Egress, PeerClass::WORLD, PROTO_TCP, 1));
    // Node-2 has no endpoint a policy selects: no set, not stateful.
    let t2 = desired(&w, "node-2", CompileConfig::default())
        .unwrap()
        .tables;
    assert!(t2.policies.is_empty());
    assert!(!t2.networks[&NetworkId(1)].info.stateful);
}

#[test]
fn over_the_limits_the_last_good_tables_stay() {
    let mut w = base();
    policy(
        &mut w,
        "metadata: {name: one, namespace: x}\n\
         spec: {podSelector: {}, ingress: [{from: [{podSelector: {matchLabels: {app: b}}}]}]}",
        None,
    );
    let cfg = CompileConfig {
        policy: PolicyLimits {
            max_classes: 1,
            ..PolicyLimits::default()
        },
        ..CompileConfig::default()
    };
    let mut c = Compiler::new("node-1", cfg);
    let good = c.plan(&w, &[]).unwrap();
    assert!(good.notes.is_empty());
    // A second peer needs a second class.
    policy(
        &mut w,
        "metadata: {name: two, namespace: x}\n\
         spec: {podSelector: {}, ingress: [{from: [{podSelector: {matchLabels: {app: c}}}]}]}",
        None,
    );
    let key = NamespacedName::new("x", "two");
    let over = c
        .plan(&w, &[lace_control::compile::Change::NetworkPolicy(key)])
        .unwrap();
    assert_eq!(over.tables.policies, good.tables.policies);
    assert_eq!(over.tables.ports, good.tables.ports);
    let limits: Vec<_> = over
        .notes
        .iter()
        .filter(|n| n.kind == NoteKind::Limit)
        .collect();
    assert_eq!(limits.len(), 2, "{:?}", over.notes);
    assert!(limits[0].object == "NetworkPolicy x/one" && limits[1].object == "NetworkPolicy x/two");
    assert!(
        limits[0]
            .message
            .contains("need 2 peer classes; at most 1 fit; the network's last good policy tables stay in force"),
        "{}",
        limits[0].message
    );
    // Back within the limits: the new tables.
    w.network_policies.remove(&NamespacedName::new("x", "one"));
    let key = NamespacedName::new("x", "one");
    let back = c
        .plan(&w, &[lace_control::compile::Change::NetworkPolicy(key)])
        .unwrap();
    assert!(back.notes.is_empty(), "{:?}", back.notes);
    assert_ne!(back.tables.policies, good.tables.policies);
}

fn conn(w: &World, from: &str, to: &str, port: u16) -> Connection {
    let side = |name: &str| {
        let (k, e) = w
            .endpoints
            .iter()
            .find(|(k, _)| k.container_id == name)
            .unwrap();
        Side::Pod {
            endpoint: k.clone(),
            addr: e.addresses[0],
        }
    };
    Connection {
        src: side(from),
        dst: side(to),
        proto: PROTO_TCP,
        port,
    }
}

/// Table verdict of `c` from node-1's tables (both ends on node-1).
fn tables_allow(t: &TableWriter, w: &World, c: &Connection) -> bool {
    let snap = t.staged_view();
    let side = |s: &Side| match s {
        Side::Pod { endpoint, addr } => (w.endpoints[endpoint].port, *addr),
        _ => unreachable!(),
    };
    let ((sp, sa), (dp, da)) = (side(&c.src), side(&c.dst));
    let allows = |port: PortId, dir: PolicyDir, peer: IpAddr| {
        let p = snap.port(port).unwrap();
        p.policy == PolicySetId::NONE || {
            let class = snap.network(p.network).unwrap().peer_class(peer);
            snap.policy_allows(p.policy, dir, class, c.proto, c.port)
        }
    };
    allows(sp, PolicyDir::Egress, da) && allows(dp, PolicyDir::Ingress, sa)
}

/// Pods on two networks joined by routing policy; a policy on each network (one bound, one
/// not), peers on the other network; an l2 network with a policy too.
#[test]
fn policies_across_networks_and_bindings() {
    let mut w = World::default();
    w.nodes.insert("node-1".into(), node(1));
    w.nodes.insert("node-2".into(), node(2));
    network(&mut w, 1, NetworkType::L3);
    network(&mut w, 2, NetworkType::L3);
    network(&mut w, 3, NetworkType::L2);
    w.routing.push(RoutingModel {
        name: "one-two".into(),
        priority: 0,
        sources: vec!["net-1".into()],
        destination: "net-2".into(),
        prefixes: vec![],
        direction: Direction::Bidirectional,
        transit: None,
        gateway: None,
    });
    pod(&mut w, "x", "a", &[("app", "a")], 1, 1, 10);
    pod(&mut w, "y", "b", &[("app", "b")], 2, 1, 11);
    pod(&mut w, "y", "c", &[("app", "c")], 2, 1, 12);
    pod(&mut w, "z", "d", &[("app", "d")], 3, 1, 13);
    pod(&mut w, "z", "e", &[("app", "e")], 3, 1, 14);
    // In net-1, x/a takes connections from y/b only (b lives on net-2).
    policy(
        &mut w,
        "metadata: {name: a-from-b, namespace: x}\n\
         spec: {podSelector: {}, ingress: [{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}, podSelector: {matchLabels: {app: b}}}]}]}",
        Some("net-1"),
    );
    // Bound to net-1, so y's pods (on net-2) are not isolated by it.
    policy(
        &mut w,
        "metadata: {name: deny, namespace: y}\nspec: {podSelector: {}, policyTypes: [Ingress, Egress]}",
        Some("net-1"),
    );
    // Unbound: applies to z's pods on the l2 network.
    policy(
        &mut w,
        "metadata: {name: deny, namespace: z}\nspec: {podSelector: {matchLabels: {app: e}}, policyTypes: [Ingress]}",
        None,
    );
    let r = Region::new();
    let mut wr = TableWriter::create(&r.cfg).unwrap();
    let mut c = Compiler::new("node-1", CompileConfig::default());
    let out = c.plan(&w, &[]).unwrap();
    let pt1 = &out.tables.policies[&NetworkId(1)];
    // y/b's net-2 address is a peer class in net-1.
    assert!(
        pt1.peers.get(&IpNet::from(v4(2, 1, 11))).is_some(),
        "{:?}",
        pt1.peers
    );
    assert!(!out.tables.policies.contains_key(&NetworkId(2)));
    assert_eq!(out.tables.policies[&NetworkId(3)].sets.len(), 1);
    c.apply(&mut wr, out.tables).unwrap();
    for (from, to) in [
        ("c-y-b-2", "c-x-a-1"),
        ("c-y-c-2", "c-x-a-1"),
        ("c-x-a-1", "c-y-b-2"),
        ("c-y-b-2", "c-y-c-2"),
        ("c-z-d-3", "c-z-e-3"),
        ("c-z-e-3", "c-z-d-3"),
    ] {
        let cn = conn(&w, from, to, 80);
        assert_eq!(
            tables_allow(&wr, &w, &cn),
            evaluate(&w, &cn).allowed(),
            "{from} -> {to}"
        );
    }
    assert!(!evaluate(&w, &conn(&w, "c-y-c-2", "c-x-a-1", 80)).allowed());
    assert!(evaluate(&w, &conn(&w, "c-y-b-2", "c-x-a-1", 80)).allowed());
    assert!(!evaluate(&w, &conn(&w, "c-z-d-3", "c-z-e-3", 80)).allowed());
}
