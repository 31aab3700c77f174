//! The table compiler against real shared-memory tables: a world in, the node's tables read
//! back through `TableReader` + `Snapshot` the way the forwarder reads them.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use lace_control::api::{Direction, NetworkType};
use lace_control::bind::Requirement;
use lace_control::compile::{
    changed_cluster_ips, decode_sid, desired, encode_sid, gateway_mac, host_routes, read_back,
    Change, CompileConfig, Compiler, NoteKind, Route, SidFunction, HOST_GATEWAY4, HOST_GATEWAY6,
};
use lace_control::service::{Protocol, ServiceBackend};
use lace_control::source::NamespacedName;
use lace_control::world::{
    AttachmentKey, EndpointModel, HostModel, L2Config, LearnedModel, NetworkModel, NodeModel,
    RoutingModel, ServiceModel, ServicePortModel, UplinkModel, World,
};
use lace_shared::policy::{
    maglev_size, Backend, BackendState, RouteFlags, ServiceKey, PROTO_TCP, PROTO_UDP,
};
use lace_shared::status::ExternalUplink;
use lace_shared::tables::{TableReader, TableWriter, TablesConfig};
use lace_shared::types::{
    FdbEntry, FdbTarget, FloodTarget, IfName, L2Hop, MacAddr, NetworkId, NetworkKind, NextHop,
    NodeId, NodeInfo, PortId, PortKind, Sid, SidBehavior,
};
use proptest::prelude::*;

// ---- the world ------------------------------------------------------------------------------

/// Node k: id k, locator fc00:0:k::/48, underlay fd00::k.
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

fn name(k: u32) -> String {
    format!("node-{k}")
}

/// Network n (`net-n`): 10.n.0.0/16 in /24 blocks, fd0n::/48 in /64 blocks. Network
/// [`L2`] is an l2 network over the same subnets (no blocks).
fn network(n: u32) -> NetworkModel {
    let l2 = n == L2;
    NetworkModel {
        name: format!("net-{n}"),
        id: NetworkId(n),
        kind: if l2 { NetworkType::L2 } else { NetworkType::L3 },
        v4: Some((
            format!("10.{n}.0.0/16").parse().unwrap(),
            (!l2).then_some(24),
        )),
        v6: Some((
            format!("fd{n:02x}::/48").parse().unwrap(),
            (!l2).then_some(64),
        )),
        external: vec![],
        anonymous: false,
        l2: L2Config::default(),
        uplinks: Vec::new(),
    }
}

/// The l2 network of these tests.
const L2: u32 = 4;

fn block4(n: u32, k: u32) -> Ipv4Net {
    format!("10.{n}.{k}.0/24").parse().unwrap()
}

fn block6(n: u32, k: u32) -> Ipv6Net {
    format!("fd{n:02x}:0:0:{k:x}::/64").parse().unwrap()
}

fn addr4(n: u32, k: u32, i: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, n as u8, k as u8, i as u8)
}

fn addr6(n: u32, k: u32, i: u32) -> Ipv6Addr {
    format!("fd{n:02x}:0:0:{k:x}::{i:x}").parse().unwrap()
}

fn pod_mac(n: u32, k: u32, i: u32) -> MacAddr {
    MacAddr([0x02, 0, 0, n as u8, k as u8, i as u8])
}

/// Port of pod i of network n on a node: unique per node.
fn port(n: u32, i: u32) -> PortId {
    PortId(n * 1000 + i)
}

fn key(n: u32, k: u32, i: u32) -> AttachmentKey {
    AttachmentKey {
        container_id: format!("c-{n}-{k}-{i}"),
        ifname: "eth0".into(),
    }
}

fn net_name(n: u32) -> String {
    format!("net-{n}")
}

fn add_network(w: &mut World, n: u32) {
    w.networks.insert(net_name(n), network(n));
}

fn allocate(w: &mut World, n: u32, k: u32) {
    w.allocations.insert(
        (net_name(n), name(k)),
        vec![IpNet::V4(block4(n, k)), IpNet::V6(block6(n, k))],
    );
}

fn add_pod(w: &mut World, n: u32, k: u32, i: u32) {
    w.endpoints.insert(
        key(n, k, i),
        EndpointModel {
            namespace: "default".into(),
            pod: format!("pod-{n}-{k}-{i}"),
            network: net_name(n),
            node: name(k),
            addresses: vec![IpAddr::V4(addr4(n, k, i)), IpAddr::V6(addr6(n, k, i))],
            mac: pod_mac(n, k, i),
            port: port(n, i),
            host_iface: IfName::new(&format!("lc{n}p{i}")).unwrap(),
            endpoint_id: u64::from(n * 1_000_000 + k * 1000 + i),
        },
    );
}

/// Two nodes (1, 2); network 1 on both, one pod (.2) on each.
fn two_nodes() -> World {
    let mut w = World::default();
    for k in [1, 2] {
        w.nodes.insert(name(k), node(k));
    }
    add_network(&mut w, 1);
    for k in [1, 2] {
        allocate(&mut w, 1, k);
        add_pod(&mut w, 1, k, 2);
    }
    w
}

fn policy(name: &str, sources: &[u32], dest: u32, prefixes: &[&str]) -> RoutingModel {
    RoutingModel {
        name: name.into(),
        priority: 0,
        sources: sources.iter().map(|&n| net_name(n)).collect(),
        destination: net_name(dest),
        prefixes: prefixes.iter().map(|p| p.parse().unwrap()).collect(),
        direction: Direction::Bidirectional,
        transit: None,
        gateway: None,
    }
}

fn sid(k: u32, n: u32) -> Sid {
    encode_sid(node(k).locator, SidFunction::EndDt46, NetworkId(n)).unwrap()
}

fn remote(k: u32, n: u32) -> NextHop {
    NextHop::Remote {
        node: NodeId(k),
        sid: sid(k, n),
    }
}

fn local(n: u32, k: u32, i: u32) -> NextHop {
    NextHop::Local {
        port: port(n, i),
        mac: pod_mac(n, k, i),
    }
}

/// A FIB's next hops (every route plain).
fn hops(routes: &BTreeMap<IpNet, Route>) -> BTreeMap<IpNet, NextHop> {
    routes
        .iter()
        .map(|(p, r)| {
            assert_eq!(r.flags, RouteFlags::NONE, "{p}");
            (*p, r.nh)
        })
        .collect()
}

// ---- tables ---------------------------------------------------------------------------------

/// A fresh table region, removed when dropped.
struct Region {
    cfg: TablesConfig,
}

impl Region {
    fn new() -> Region {
        Region::sized(32 << 20)
    }
    /// A region of `size` bytes.
    fn sized(size: u64) -> Region {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lace-compile-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Region {
            cfg: TablesConfig {
                dir,
                name: "t".into(),
                size,
                reader_slots: 4,
            },
        }
    }
    fn writer(&self) -> TableWriter {
        TableWriter::open_or_create(&self.cfg).unwrap()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(PathBuf::from(&self.cfg.dir));
    }
}

/// What the forwarder sees: settings, next hop of an address, ports, nodes, SIDs.
struct View {
    reader: std::sync::Arc<TableReader>,
}

impl View {
    fn new(r: &Region) -> View {
        View {
            reader: TableReader::attach(&r.cfg).unwrap(),
        }
    }
    fn hop(&self, net: u32, ip: IpAddr) -> Option<NextHop> {
        let mut h = self.reader.register().unwrap();
        let snap = h.snapshot();
        let v = snap.network(NetworkId(net))?;
        let i = match ip {
            IpAddr::V4(a) => v.route4_index(a),
            IpAddr::V6(a) => v.route6_index(a),
        };
        if i == 0 {
            None
        } else {
            Some(snap.nexthop(i).expect("a route's next hop exists"))
        }
    }
    /// The next hop of `ip` in network `net` and its route's flags.
    fn route(&self, net: u32, ip: IpAddr) -> Option<(NextHop, RouteFlags)> {
        let mut h = self.reader.register().unwrap();
        let snap = h.snapshot();
        let v = snap.network(NetworkId(net))?;
        let i = match ip {
            IpAddr::V4(a) => v.route4_index(a),
            IpAddr::V6(a) => v.route6_index(a),
        };
        (i != 0).then(|| (snap.nexthop(i).unwrap(), snap.nexthop_flags(i)))
    }
    fn hop4(&self, net: u32, ip: Ipv4Addr) -> Option<NextHop> {
        self.hop(net, IpAddr::V4(ip))
    }
    fn hop6(&self, net: u32, ip: Ipv6Addr) -> Option<NextHop> {
        self.hop(net, IpAddr::V6(ip))
    }
    fn info(&self, net: u32) -> Option<lace_shared::types::NetworkInfo> {
        let mut h = self.reader.register().unwrap();
        let snap = h.snapshot();
        snap.network(NetworkId(net)).and_then(|v| v.info())
    }
    fn port(&self, p: PortId) -> Option<lace_shared::types::PortInfo> {
        self.reader.register().unwrap().snapshot().port(p)
    }
    fn node(&self, k: u32) -> Option<NodeInfo> {
        self.reader.register().unwrap().snapshot().node(NodeId(k))
    }
    fn sid(&self, s: Sid) -> Option<SidBehavior> {
        self.reader.register().unwrap().snapshot().local_sid(s)
    }
}

fn cfg() -> CompileConfig {
    CompileConfig::default()
}

/// Plans and applies; returns the stats.
fn step(
    c: &mut Compiler,
    w: &mut TableWriter,
    world: &World,
    changes: &[Change],
) -> lace_control::compile::ApplyStats {
    let next = c.plan(world, changes).unwrap();
    assert_eq!(
        next,
        desired(world, c.node(), cfg()).unwrap(),
        "incremental plan differs from a full compilation"
    );
    c.apply(w, next.tables).unwrap()
}

// ---- tests ----------------------------------------------------------------------------------

/// The host tests' two-node world, compiled for node 1: exactly the hand-written tables.
#[test]
fn two_node_world_gives_the_expected_tables() {
    let world = two_nodes();
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    let compiled = c.plan(&world, &[Change::All]).unwrap();
    assert!(compiled.notes.is_empty(), "{:?}", compiled.notes);
    let st = c.apply(&mut w, compiled.tables.clone()).unwrap();
    assert_eq!(
        (
            st.networks_set,
            st.routes_set,
            st.ports_set,
            st.nodes_set,
            st.sids_set
        ),
        (1, 8, 1, 1, 1)
    );
    assert!(st.generation.is_some());

    let v = View::new(&r);
    let info = v.info(1).unwrap();
    assert_eq!(info.kind, NetworkKind::L3);
    assert!(!info.anonymous);
    assert_eq!(info.gateway4, Some(addr4(1, 1, 1)));
    assert_eq!(info.gateway6, Some(addr6(1, 1, 1)));
    assert_eq!(info.gateway_mac, MacAddr([0x06, 0x00, 0, 0, 0, 1]));
    assert_eq!(info.gateway_mac, gateway_mac(NetworkId(1)));
    assert_eq!(info.mtu, 1460);

    // Own pod: delivered locally; own gateway: received; free address of own block:
    // unreachable; the other node's block: encapsulated to its End.DT46 SID of network 1.
    assert_eq!(v.hop4(1, addr4(1, 1, 2)), Some(local(1, 1, 2)));
    assert_eq!(v.hop6(1, addr6(1, 1, 2)), Some(local(1, 1, 2)));
    assert_eq!(v.hop4(1, addr4(1, 1, 1)), Some(NextHop::Receive));
    assert_eq!(v.hop6(1, addr6(1, 1, 1)), Some(NextHop::Receive));
    assert_eq!(v.hop4(1, addr4(1, 1, 77)), Some(NextHop::Unreachable));
    assert_eq!(v.hop6(1, addr6(1, 1, 77)), Some(NextHop::Unreachable));
    for i in [1, 2, 200] {
        assert_eq!(v.hop4(1, addr4(1, 2, i)), Some(remote(2, 1)));
        assert_eq!(v.hop6(1, addr6(1, 2, i)), Some(remote(2, 1)));
    }
    assert_eq!(
        sid(2, 1).0,
        "fc00:0:2:e046:0:1::".parse::<Ipv6Addr>().unwrap()
    );
    // Outside the network's blocks: no route.
    assert_eq!(v.hop4(1, addr4(1, 3, 2)), None);
    assert_eq!(v.hop4(1, Ipv4Addr::new(192, 0, 2, 1)), None);

    let p = v.port(port(1, 2)).unwrap();
    assert_eq!(p.kind, PortKind::Pod);
    assert_eq!(p.network, NetworkId(1));
    assert_eq!(p.mac, pod_mac(1, 1, 2));
    assert_eq!(p.ipv4, Some(addr4(1, 1, 2)));
    assert_eq!(p.ipv6, Some(addr6(1, 1, 2)));
    assert_eq!(p.iface.as_str(), "lc1p2");
    assert_eq!(p.endpoint, 1_001_002);

    assert_eq!(
        v.node(2),
        Some(NodeInfo {
            locator: "fc00:0:2::".parse().unwrap(),
            locator_len: 48,
            underlay: "fd00::2".parse().unwrap(),
        })
    );
    assert_eq!(v.node(1), None, "a node is not its own remote node");
    assert_eq!(v.sid(sid(1, 1)), Some(SidBehavior::EndDt46(NetworkId(1))));
    assert_eq!(v.sid(sid(2, 1)), None, "the other node's SID is not local");

    // The exact route list, and the region read back equals what was applied.
    let routes: Vec<(String, NextHop)> = compiled.tables.networks[&NetworkId(1)]
        .routes
        .iter()
        .map(|(p, r)| {
            assert_eq!(r.flags, RouteFlags::NONE);
            (p.to_string(), r.nh)
        })
        .collect();
    let want: Vec<(String, NextHop)> = vec![
        ("10.1.1.0/24".into(), NextHop::Unreachable),
        ("10.1.1.1/32".into(), NextHop::Receive),
        ("10.1.1.2/32".into(), local(1, 1, 2)),
        ("10.1.2.0/24".into(), remote(2, 1)),
        ("fd01:0:0:1::/64".into(), NextHop::Unreachable),
        ("fd01:0:0:1::1/128".into(), NextHop::Receive),
        ("fd01:0:0:1::2/128".into(), local(1, 1, 2)),
        ("fd01:0:0:2::/64".into(), remote(2, 1)),
    ];
    assert_eq!(routes, want);
    assert_eq!(read_back(&r.cfg).unwrap(), compiled.tables);

    // Applying the same tables again changes nothing and publishes nothing.
    let st = c.apply(&mut w, compiled.tables).unwrap();
    assert_eq!(st.changes(), 0);
    assert_eq!(st.generation, None);
}

/// Every local SID decodes back to End.DT46 of its own network under the node's locator.
#[test]
fn local_sids_decode_to_their_networks() {
    let mut world = two_nodes();
    for n in [2, 3, 200] {
        add_network(&mut world, n);
        allocate(&mut world, n, 1);
    }
    // Ids beyond 16 bits encode too.
    world.networks.get_mut("net-200").unwrap().id = NetworkId(0x0012_3456);
    let t = desired(&world, &name(1), cfg()).unwrap().tables;
    assert_eq!(t.sids.len(), 4);
    for (s, b) in &t.sids {
        let (f, net) = decode_sid(node(1).locator, *s).unwrap();
        assert_eq!(f, SidFunction::EndDt46);
        assert_eq!(*b, SidBehavior::EndDt46(net));
        assert!(t.networks.contains_key(&net));
    }
    assert!(t.networks.contains_key(&NetworkId(0x0012_3456)));
}

/// A third node with a /64 locator: its block appears as Remote with its own SID layout.
#[test]
fn remote_block_uses_the_owning_nodes_sid() {
    let mut world = two_nodes();
    let mut n3 = node(3);
    n3.locator = "fc00:0:0:3::/64".parse().unwrap();
    world.nodes.insert(name(3), n3);
    allocate(&mut world, 1, 3);
    let t = desired(&world, &name(1), cfg()).unwrap().tables;
    let want = NextHop::Remote {
        node: NodeId(3),
        sid: Sid("fc00:0:0:3:e046:0:1:0".parse().unwrap()),
    };
    let routes = &t.networks[&NetworkId(1)].routes;
    assert_eq!(routes[&IpNet::V4(block4(1, 3))].nh, want);
    assert_eq!(routes[&IpNet::V6(block6(1, 3))].nh, want);
    assert_eq!(t.nodes[&NodeId(3)].locator_len, 64);
}

/// Two networks without a policy: neither FIB has a route into the other.
#[test]
fn networks_are_isolated_without_policy() {
    let mut world = two_nodes();
    add_network(&mut world, 2);
    for k in [1, 2] {
        allocate(&mut world, 2, k);
        add_pod(&mut world, 2, k, 5);
    }
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    let v = View::new(&r);
    for (a, b) in [(1, 2), (2, 1)] {
        for k in [1, 2] {
            for i in [1, 2, 5, 9] {
                assert_eq!(v.hop4(a, addr4(b, k, i)), None, "net {a} → 10.{b}.{k}.{i}");
                assert_eq!(v.hop6(a, addr6(b, k, i)), None, "net {a} → net {b}");
            }
        }
    }
    assert_eq!(v.hop4(2, addr4(2, 1, 5)), Some(local(2, 1, 5)));
    assert_eq!(v.hop4(2, addr4(2, 2, 5)), Some(remote(2, 2)));
    assert_eq!(v.port(port(2, 5)).unwrap().network, NetworkId(2));
}

/// An anonymous network has no self-route — only its gateway — until a policy opens it.
#[test]
fn anonymous_network_needs_a_policy() {
    let mut world = two_nodes();
    world.networks.get_mut("net-1").unwrap().anonymous = true;
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    let v = View::new(&r);
    assert!(v.info(1).unwrap().anonymous);
    assert_eq!(v.hop4(1, addr4(1, 1, 2)), None);
    assert_eq!(v.hop4(1, addr4(1, 2, 2)), None);
    assert_eq!(v.hop6(1, addr6(1, 2, 2)), None);
    assert_eq!(v.hop4(1, addr4(1, 1, 1)), Some(NextHop::Receive));
    assert!(v.port(port(1, 2)).is_some(), "the pod is still attached");

    world.routing.push(policy("self", &[1], 1, &[]));
    step(&mut c, &mut w, &world, &[Change::Routing]);
    assert_eq!(v.hop4(1, addr4(1, 1, 2)), Some(local(1, 1, 2)));
    assert_eq!(v.hop4(1, addr4(1, 2, 2)), Some(remote(2, 1)));
}

/// A policy from network 1 to network 2, narrowed to two prefixes, opens exactly those both
/// ways; removing it closes the path again.
#[test]
fn policy_opens_a_narrowed_path_both_ways_and_closes_on_removal() {
    let mut world = two_nodes();
    add_network(&mut world, 2);
    for k in [1, 2] {
        allocate(&mut world, 2, k);
        for i in [2, 3, 100] {
            add_pod(&mut world, 2, k, i);
        }
    }
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    let v = View::new(&r);
    assert_eq!(v.hop4(1, addr4(2, 1, 2)), None);

    // 10.2.1.0/30: part of this node's block (pods .2, .3 local, .1 the gateway of network 2,
    // which network 1 does not receive for); 10.2.2.0/25: part of node 2's block.
    world.routing.push(policy(
        "one-to-two",
        &[1],
        2,
        &["10.2.1.0/30", "10.2.2.0/25", "fd02:0:0:2::/64"],
    ));
    let st = step(&mut c, &mut w, &world, &[Change::Routing]);
    assert_eq!(
        st.ports_set + st.ports_removed + st.sids_set + st.nodes_set,
        0
    );
    assert_eq!(st.routes_removed, 0);
    assert_eq!(v.hop4(1, addr4(2, 1, 2)), Some(local(2, 1, 2)));
    assert_eq!(v.hop4(1, addr4(2, 1, 3)), Some(local(2, 1, 3)));
    assert_eq!(v.hop4(1, addr4(2, 1, 0)), Some(NextHop::Unreachable));
    assert_eq!(v.hop4(1, addr4(2, 1, 1)), Some(NextHop::Unreachable));
    assert_eq!(v.hop4(1, addr4(2, 1, 100)), None, "outside the /30");
    assert_eq!(v.hop4(1, addr4(2, 2, 100)), Some(remote(2, 2)));
    assert_eq!(v.hop4(1, addr4(2, 2, 200)), None, "outside the /25");
    assert_eq!(v.hop6(1, addr6(2, 2, 3)), Some(remote(2, 2)));
    assert_eq!(
        v.hop6(1, addr6(2, 1, 2)),
        None,
        "v6 narrowed to node 2's block"
    );
    // The way back (bidirectional): network 2's FIB reaches network 1.
    assert_eq!(v.hop4(2, addr4(1, 1, 2)), Some(local(1, 1, 2)));
    assert_eq!(v.hop4(2, addr4(1, 2, 2)), Some(remote(2, 1)));
    assert_eq!(v.hop6(2, addr6(1, 2, 2)), Some(remote(2, 1)));
    // Network 2 still reaches itself.
    assert_eq!(v.hop4(2, addr4(2, 2, 200)), Some(remote(2, 2)));

    world.routing.clear();
    let st = step(&mut c, &mut w, &world, &[Change::Routing]);
    assert!(st.routes_removed > 0);
    assert_eq!(st.routes_set, 0);
    assert_eq!(v.hop4(1, addr4(2, 1, 2)), None);
    assert_eq!(v.hop4(1, addr4(2, 2, 100)), None);
    assert_eq!(v.hop4(2, addr4(1, 1, 2)), None);
    assert_eq!(v.hop4(2, addr4(2, 2, 200)), Some(remote(2, 2)));
}

/// One pod added or removed changes its port and its two host routes — in its own network and
/// in the networks that import it — and nothing else. A pod on another node changes nothing.
#[test]
fn one_pod_changes_only_its_entries() {
    let mut world = two_nodes();
    add_network(&mut world, 2);
    allocate(&mut world, 2, 1);
    add_pod(&mut world, 2, 1, 9);
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    let v = View::new(&r);

    add_pod(&mut world, 1, 1, 7);
    let st = step(&mut c, &mut w, &world, &[Change::Endpoint(key(1, 1, 7))]);
    assert_eq!((st.ports_set, st.routes_set, st.changes()), (1, 2, 3));
    assert_eq!(v.hop4(1, addr4(1, 1, 7)), Some(local(1, 1, 7)));

    world.endpoints.remove(&key(1, 1, 7));
    let st = step(&mut c, &mut w, &world, &[Change::Endpoint(key(1, 1, 7))]);
    assert_eq!(
        (st.ports_removed, st.routes_removed, st.changes()),
        (1, 2, 3)
    );
    assert_eq!(v.hop4(1, addr4(1, 1, 7)), Some(NextHop::Unreachable));
    assert_eq!(v.port(port(1, 7)), None);

    // With network 1 imported into network 2, the pod's routes go into both FIBs.
    world.routing.push(policy("p", &[2], 1, &[]));
    step(&mut c, &mut w, &world, &[Change::Routing]);
    add_pod(&mut world, 1, 1, 7);
    let st = step(&mut c, &mut w, &world, &[Change::Endpoint(key(1, 1, 7))]);
    assert_eq!((st.ports_set, st.routes_set, st.changes()), (1, 4, 5));
    assert_eq!(v.hop4(2, addr4(1, 1, 7)), Some(local(1, 1, 7)));

    // A pod on node 2 is covered by node 2's block: nothing to do on node 1.
    add_pod(&mut world, 1, 2, 8);
    let st = step(&mut c, &mut w, &world, &[Change::Endpoint(key(1, 2, 8))]);
    assert_eq!(st.changes(), 0);
    assert_eq!(st.generation, None);
}

/// Control restarts over an existing region: `resume` reads the tables back and removes only
/// what went stale; `new` rewrites everything with identical values and forwarding agrees.
#[test]
fn restart_from_an_existing_region() {
    let mut world = two_nodes();
    add_pod(&mut world, 1, 1, 3);
    let r = Region::new();
    let before = {
        let mut w = r.writer();
        let mut c = Compiler::new(&name(1), cfg());
        step(&mut c, &mut w, &world, &[Change::All]);
        w.generation()
    };
    // While control was down, pod .3 went away.
    world.endpoints.remove(&key(1, 1, 3));

    let mut w = r.writer();
    let mut c = Compiler::resume(&name(1), cfg(), &r.cfg).unwrap();
    assert_eq!(c.last().ports.len(), 2);
    let st = step(&mut c, &mut w, &world, &[Change::All]);
    assert_eq!(
        (st.ports_removed, st.routes_removed, st.changes()),
        (1, 2, 3)
    );
    assert_eq!(st.generation, Some(before + 1));
    let v = View::new(&r);
    assert_eq!(v.port(port(1, 3)), None);
    assert_eq!(v.hop4(1, addr4(1, 1, 3)), Some(NextHop::Unreachable));
    drop(w);

    // A compiler that starts from nothing rewrites every entry with the same values.
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    let next = c.plan(&world, &[Change::All]).unwrap().tables;
    let st = c.apply(&mut w, next.clone()).unwrap();
    assert_eq!(st.routes_set, next.route_count());
    assert_eq!(st.routes_removed + st.ports_removed, 0);
    assert_eq!(read_back(&r.cfg).unwrap(), next);
    assert_eq!(v.hop4(1, addr4(1, 1, 2)), Some(local(1, 1, 2)));
}

/// Overlapping networks joined by a policy: the conflicting prefix keeps the first next hop
/// (the network's own) and the conflict is reported.
#[test]
fn overlapping_routes_are_reported_not_overwritten() {
    let mut world = two_nodes();
    let mut clash = network(2);
    clash.v4 = Some(("10.1.0.0/16".parse().unwrap(), Some(24)));
    world.networks.insert(net_name(2), clash);
    world.allocations.insert(
        (net_name(2), name(2)),
        vec![IpNet::V4(block4(1, 1)), IpNet::V6(block6(2, 2))],
    );
    world.routing.push(policy("clash", &[1], 2, &[]));
    let out = desired(&world, &name(1), cfg()).unwrap();
    let routes = &out.tables.networks[&NetworkId(1)].routes;
    assert_eq!(routes[&IpNet::V4(block4(1, 1))].nh, NextHop::Unreachable);
    assert!(
        out.notes
            .iter()
            .any(|n| n.kind == NoteKind::Conflict && n.message.contains("10.1.1.0/24")),
        "{:#?}",
        out.notes
    );
}

fn l2_sid(k: u32, f: SidFunction) -> Sid {
    encode_sid(node(k).locator, f, NetworkId(L2)).unwrap()
}

/// l2 networks, on the nodes with endpoints of theirs: gateway = first address of the prefix,
/// the MTU leaves room for the inner Ethernet header; every endpoint's addresses and MAC (on
/// any node) in the neighbor table and FDB, the flood list, DT2U, DT2M and DT46 SIDs.
#[test]
fn l2_networks_get_neighbors_fdb_flood_list_and_their_sids() {
    let mut world = two_nodes();
    world.nodes.insert(name(3), node(3));
    add_network(&mut world, L2);
    add_pod(&mut world, L2, 1, 7);
    add_pod(&mut world, L2, 1, 8);
    add_pod(&mut world, L2, 2, 9);
    add_pod(&mut world, L2, 3, 5);
    let out = desired(&world, &name(1), cfg()).unwrap();
    let t = &out.tables.networks[&NetworkId(L2)];
    assert_eq!(t.info.kind, NetworkKind::L2);
    assert_eq!(t.info.gateway4, Some("10.4.0.1".parse().unwrap()));
    assert_eq!(t.info.gateway6, Some("fd04::1".parse().unwrap()));
    assert_eq!(t.info.mtu, 1500 - 54);
    // The FIB: the gateways, and the local endpoints (the gateway's replies).
    let gw_mac = t.info.gateway_mac;
    let mut want_routes = BTreeMap::new();
    want_routes.insert(
        IpNet::from(IpAddr::from(Ipv4Addr::new(10, 4, 0, 1))),
        NextHop::Receive,
    );
    want_routes.insert(
        IpNet::from(IpAddr::from("fd04::1".parse::<Ipv6Addr>().unwrap())),
        NextHop::Receive,
    );
    for i in [7, 8] {
        want_routes.insert(IpNet::from(IpAddr::V4(addr4(L2, 1, i))), local(L2, 1, i));
        want_routes.insert(IpNet::from(IpAddr::V6(addr6(L2, 1, i))), local(L2, 1, i));
    }
    assert_eq!(hops(&t.routes), want_routes);
    let mut want_neigh = BTreeMap::new();
    want_neigh.insert("10.4.0.1".parse().unwrap(), gw_mac);
    want_neigh.insert("fd04::1".parse().unwrap(), gw_mac);
    for (k, i) in [(1, 7), (1, 8), (2, 9), (3, 5)] {
        want_neigh.insert(IpAddr::V4(addr4(L2, k, i)), pod_mac(L2, k, i));
        want_neigh.insert(IpAddr::V6(addr6(L2, k, i)), pod_mac(L2, k, i));
    }
    assert_eq!(t.neighbors, want_neigh);
    let entry = |target| FdbEntry {
        target,
        seq: 0,
        learned: false,
    };
    let remote = |k| {
        entry(FdbTarget::Remote {
            node: NodeId(k),
            sid: l2_sid(k, SidFunction::EndDt2u),
        })
    };
    let want_fdb: BTreeMap<_, _> = [
        (pod_mac(L2, 1, 7), entry(FdbTarget::Port(port(L2, 7)))),
        (pod_mac(L2, 1, 8), entry(FdbTarget::Port(port(L2, 8)))),
        (pod_mac(L2, 2, 9), remote(2)),
        (pod_mac(L2, 3, 5), remote(3)),
    ]
    .into_iter()
    .collect();
    assert_eq!(t.fdb, want_fdb);
    let flood_to = |k| FloodTarget::Remote {
        node: NodeId(k),
        sid: l2_sid(k, SidFunction::EndDt2m),
    };
    assert_eq!(
        t.flood,
        vec![
            FloodTarget::Port(port(L2, 7)),
            FloodTarget::Port(port(L2, 8)),
            flood_to(2),
            flood_to(3)
        ]
    );
    assert_eq!(
        out.tables.sids.get(&l2_sid(1, SidFunction::EndDt2u)),
        Some(&SidBehavior::EndDt2u(NetworkId(L2)))
    );
    assert_eq!(
        out.tables.sids.get(&l2_sid(1, SidFunction::EndDt2m)),
        Some(&SidBehavior::EndDt2m(NetworkId(L2)))
    );
    assert_eq!(
        out.tables.sids.get(&sid(1, L2)),
        Some(&SidBehavior::EndDt46(NetworkId(L2))),
        "routed packets from other nodes (routing policy's)"
    );
    assert_eq!(out.tables.ports[&port(L2, 7)].network, NetworkId(L2));
    assert!(out.notes.is_empty(), "{:#?}", out.notes);

    // Published, the forwarder reads them; the published tables read back equal them.
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    assert_eq!(&read_back(&r.cfg).unwrap(), c.last());
    {
        let v = View::new(&r);
        let mut h = v.reader.register().unwrap();
        let snap = h.snapshot();
        let net = snap.network(NetworkId(L2)).unwrap();
        assert_eq!(
            net.neighbor(IpAddr::V4(addr4(L2, 2, 9))),
            Some(pod_mac(L2, 2, 9))
        );
        let Some(L2Hop::Remote(i)) = net.fdb(pod_mac(L2, 2, 9)) else {
            panic!("the remote endpoint's MAC is behind node 2");
        };
        let e = snap.encap(i).unwrap();
        assert!(e.usable());
        assert_eq!(e.ip6[24..40], l2_sid(2, SidFunction::EndDt2u).0.octets());
        assert_eq!(net.flood().count(), 4);
    }

    // The endpoint on node 3 goes: node 3 leaves the flood list, its MAC the FDB; nothing else
    // is rewritten.
    world.endpoints.remove(&key(L2, 3, 5));
    let st = step(&mut c, &mut w, &world, &[Change::Endpoint(key(L2, 3, 5))]);
    assert_eq!((st.l2_removed, st.l2_set), (3, 1), "{st:?}");
    assert_eq!(st.changes(), 4);
    let t = &c.last().networks[&NetworkId(L2)];
    assert_eq!(t.flood.len(), 3);
    assert!(!t.fdb.contains_key(&pod_mac(L2, 3, 5)));
    assert_eq!(&read_back(&r.cfg).unwrap(), c.last());

    // A node without endpoints of the network does not program it.
    let on3 = desired(&world, &name(3), cfg()).unwrap();
    assert!(!on3.tables.networks.contains_key(&NetworkId(L2)));
}

/// A routing policy with an l2 end: the l2 network's FIB gets the l3 destination's routes (its
/// endpoints' packets leave through the gateway), and the l3 network's FIB every address the
/// l2 network's neighbor table resolves — an endpoint on this node at its port and MAC, one on
/// another node at that node's End.DT46 SID of the l2 network, a learned VM address wherever
/// its MAC was last announced (followed incrementally; the l2 FIB of the node it is on routes
/// it to its port), never the gateways. One way, the l3
/// network's routes back are reply-only; removed, both FIBs lose them. Incremental plans
/// equal full ones throughout.
#[test]
fn routing_policy_routes_between_l2_and_l3_networks() {
    let mut world = two_nodes();
    add_network(&mut world, L2);
    add_pod(&mut world, L2, 1, 7);
    add_pod(&mut world, L2, 2, 9);
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    let v = View::new(&r);
    assert_eq!(
        v.hop4(1, addr4(L2, 1, 7)),
        None,
        "isolated without a policy"
    );
    assert_eq!(
        v.hop4(L2, addr4(1, 2, 2)),
        None,
        "isolated without a policy"
    );

    world.routing.push(policy("storage-backend", &[L2], 1, &[]));
    step(&mut c, &mut w, &world, &[Change::Routing]);
    assert_eq!(c.last(), &desired(&world, &name(1), cfg()).unwrap().tables);
    // Out of the l2 network, through its gateway.
    assert_eq!(v.hop4(L2, addr4(1, 1, 2)), Some(local(1, 1, 2)));
    assert_eq!(v.hop4(L2, addr4(1, 2, 2)), Some(remote(2, 1)));
    assert_eq!(v.hop6(L2, addr6(1, 2, 2)), Some(remote(2, 1)));
    // Into it: this node's endpoint at its port, node 2's at node 2's End.DT46 SID of the l2
    // network (which node 2 programs).
    assert_eq!(v.hop4(1, addr4(L2, 1, 7)), Some(local(L2, 1, 7)));
    assert_eq!(v.hop6(1, addr6(L2, 1, 7)), Some(local(L2, 1, 7)));
    assert_eq!(v.hop4(1, addr4(L2, 2, 9)), Some(remote(2, L2)));
    assert_eq!(v.hop6(1, addr6(L2, 2, 9)), Some(remote(2, L2)));
    assert_eq!(
        v.hop4(1, "10.4.0.1".parse().unwrap()),
        None,
        "not the gateway"
    );
    let on2 = desired(&world, &name(2), cfg()).unwrap();
    assert_eq!(
        on2.tables.sids.get(&sid(2, L2)),
        Some(&SidBehavior::EndDt46(NetworkId(L2)))
    );
    assert_eq!(
        hops(&on2.tables.networks[&NetworkId(L2)].routes)
            .get(&IpNet::from(IpAddr::V4(addr4(L2, 2, 9)))),
        Some(&local(L2, 2, 9)),
        "node 2 delivers what arrives at that SID"
    );
    assert!(
        !on2.notes.iter().any(|n| n.kind == NoteKind::Unsupported),
        "{:#?}",
        on2.notes
    );
    // The l3 network's Services are reached from the l2 one (its backends answer through the
    // client's gateway); the l2 network's own are not placed, here or there.
    world.services.insert(
        svc_key("api"),
        service(
            1,
            &["10.96.0.10"],
            None,
            vec![svc_port(
                "http",
                Protocol::Tcp,
                80,
                pod_backends(1, 2, 2, 8080).to_vec(),
            )],
        ),
    );
    world.services.insert(
        svc_key("vm"),
        service(
            L2,
            &["10.96.0.20"],
            None,
            vec![svc_port(
                "http",
                Protocol::Tcp,
                80,
                pod_backends(L2, 2, 9, 8080).to_vec(),
            )],
        ),
    );
    let services = [
        Change::Service(svc_key("api")),
        Change::Service(svc_key("vm")),
    ];
    step(&mut c, &mut w, &world, &services);
    assert_eq!(
        v.hop4(L2, "10.96.0.10".parse().unwrap()),
        Some(NextHop::Service)
    );
    assert!(v.service(L2, "10.96.0.10", PROTO_TCP, 80).is_some());
    assert!(
        v.info(L2).unwrap().stateful,
        "its connections to the Service are tracked"
    );
    assert_eq!(v.hop4(L2, "10.96.0.20".parse().unwrap()), None);
    assert_eq!(v.hop4(1, "10.96.0.20".parse().unwrap()), None);
    assert_eq!(c.last(), &desired(&world, &name(1), cfg()).unwrap().tables);
    world.services.clear();
    step(&mut c, &mut w, &world, &services);
    assert_eq!(v.hop4(L2, "10.96.0.10".parse().unwrap()), None);

    // A VM's learned address goes where its MAC was last announced, and follows it.
    let vm = MacAddr([0x52, 0x54, 0, 0, 0, 1]);
    let vm4: Ipv4Addr = "10.4.0.200".parse().unwrap();
    world.learned.insert(
        (net_name(L2), vm),
        LearnedModel {
            node: name(2),
            endpoint_id: u64::from(L2 * 1_000_000 + 2000 + 9),
            addresses: vec![IpAddr::V4(vm4)],
            sequence: 1,
            identity: false,
        },
    );
    step(&mut c, &mut w, &world, &[Change::Network(net_name(L2))]);
    assert_eq!(v.hop4(1, vm4), Some(remote(2, L2)));
    assert_eq!(
        v.hop4(L2, vm4),
        None,
        "the l2 FIB holds only this node's addresses"
    );
    let record = world.learned.get_mut(&(net_name(L2), vm)).unwrap();
    record.node = name(1);
    record.endpoint_id = u64::from(L2 * 1_000_000 + 1000 + 7);
    record.sequence = 2;
    step(&mut c, &mut w, &world, &[Change::Network(net_name(L2))]);
    let at_7 = NextHop::Local {
        port: port(L2, 7),
        mac: vm,
    };
    assert_eq!(v.hop4(1, vm4), Some(at_7));
    assert_eq!(
        v.hop4(L2, vm4),
        Some(at_7),
        "what arrives at this node's End.DT46 SID reaches the VM"
    );
    assert_eq!(c.last(), &desired(&world, &name(1), cfg()).unwrap().tables);

    // One way from the l2 network: the routes back into it carry only replies.
    world.routing[0].direction = Direction::SourceToDestination;
    step(&mut c, &mut w, &world, &[Change::Routing]);
    assert_eq!(
        v.route(1, IpAddr::V4(addr4(L2, 2, 9))),
        Some((remote(2, L2), RouteFlags::REPLY_ONLY))
    );
    assert!(c.last().networks[&NetworkId(1)].info.stateful);
    assert_eq!(v.hop4(L2, addr4(1, 2, 2)), Some(remote(2, 1)));

    world.routing.clear();
    step(&mut c, &mut w, &world, &[Change::Routing]);
    assert_eq!(v.hop4(1, addr4(L2, 1, 7)), None);
    assert_eq!(v.hop4(L2, addr4(1, 2, 2)), None);
    assert_eq!(&read_back(&r.cfg).unwrap(), c.last());
}

/// A one-way policy: the source's FIB gets the destination's routes as a bidirectional one
/// would; the destination's FIB gets the source's routes flagged reply-only, and the
/// destination becomes stateful. A bidirectional policy between the same networks makes the way
/// back plain again. What the forwarder reads (next hop and flags) is checked in the tables.
#[test]
fn a_one_way_policy_gives_the_destination_reply_only_routes_back() {
    let mut world = two_nodes();
    add_network(&mut world, 2);
    for k in [1, 2] {
        allocate(&mut world, 2, k);
    }
    add_pod(&mut world, 2, 1, 4);
    add_pod(&mut world, 2, 2, 5);
    let mut p = policy("one-way", &[1], 2, &[]);
    p.direction = Direction::SourceToDestination;
    world.routing.push(p);
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    assert!(c.plan(&world, &[]).unwrap().notes.is_empty());
    let v = View::new(&r);
    let plain = |nh| Some((nh, RouteFlags::NONE));
    let back = |nh| Some((nh, RouteFlags::REPLY_ONLY));
    // Network 1 opens connections into network 2, as with a bidirectional policy.
    assert_eq!(
        v.route(1, IpAddr::V4(addr4(2, 1, 4))),
        plain(local(2, 1, 4))
    );
    assert_eq!(v.route(1, IpAddr::V6(addr6(2, 2, 5))), plain(remote(2, 2)));
    // Network 2 reaches network 1 only with replies: every route back is flagged.
    assert_eq!(v.route(2, IpAddr::V4(addr4(1, 1, 2))), back(local(1, 1, 2)));
    assert_eq!(v.route(2, IpAddr::V6(addr6(1, 1, 2))), back(local(1, 1, 2)));
    assert_eq!(v.route(2, IpAddr::V4(addr4(1, 2, 9))), back(remote(2, 1)));
    assert_eq!(
        v.route(2, IpAddr::V4(addr4(1, 1, 77))),
        back(NextHop::Unreachable)
    );
    // Its own routes stay plain.
    assert_eq!(
        v.route(2, IpAddr::V4(addr4(2, 1, 4))),
        plain(local(2, 1, 4))
    );
    assert!(
        v.info(2).unwrap().stateful,
        "the destination tracks connections"
    );
    assert!(!v.info(1).unwrap().stateful);
    assert_eq!(&read_back(&r.cfg).unwrap(), c.last());

    // Both ways as well: the way back carries new connections again, nothing is stateful.
    world.routing.push(policy("both", &[1], 2, &[]));
    let st = step(&mut c, &mut w, &world, &[Change::Routing]);
    assert_eq!(
        st.routes_set, 6,
        "the reply-only routes became plain: {st:?}"
    );
    assert_eq!(
        v.route(2, IpAddr::V4(addr4(1, 1, 2))),
        plain(local(1, 1, 2))
    );
    assert!(!v.info(2).unwrap().stateful);
    assert_eq!(&read_back(&r.cfg).unwrap(), c.last());

    // The one-way policy alone again, and then none: the routes back go.
    world.routing.pop();
    step(&mut c, &mut w, &world, &[Change::Routing]);
    assert_eq!(v.route(2, IpAddr::V4(addr4(1, 1, 2))), back(local(1, 1, 2)));
    world.routing.clear();
    step(&mut c, &mut w, &world, &[Change::Routing]);
    assert_eq!(v.route(2, IpAddr::V4(addr4(1, 1, 2))), None);
    assert_eq!(v.route(1, IpAddr::V4(addr4(2, 1, 4))), None);
    assert!(!v.info(2).unwrap().stateful);
}

/// A policy with a transit endpoint (ADR 0057): on the transit's node both ends' routes
/// point at its interface, which is flagged transit, and its network's FIB carries both ends;
/// on another node they point at the end's End.DT46 SID on the transit's node, which programs
/// every end; a missing or ambiguous transit, an anonymous transit network close the path
/// with a note, never around the transit. Every step checks the incremental
/// plan against a full compilation.
#[test]
fn a_transit_endpoint_takes_the_path_through_it() {
    let mut world = two_nodes();
    for n in [2, 3] {
        add_network(&mut world, n);
        for k in [1, 2] {
            allocate(&mut world, n, k);
        }
    }
    add_pod(&mut world, 2, 1, 4);
    add_pod(&mut world, 2, 2, 5);
    let mut p = policy("through-fw", &[1], 2, &[]);
    p.transit = Some(NamespacedName::new("default", "pod-3-1-9"));
    world.routing.push(p);
    let note_of = |c: &mut Compiler, world: &World, text: &str| {
        let notes = c.plan(world, &[]).unwrap().notes;
        assert!(
            notes.iter().any(|n| n.kind == NoteKind::Inconsistent
                && n.object == "NetworkRoutingPolicy through-fw"
                && n.message.contains(text)),
            "no note with {text:?}: {notes:#?}"
        );
    };
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    let v = View::new(&r);
    // No transit pod yet: the path is closed.
    assert_eq!(v.hop4(1, addr4(2, 1, 4)), None);
    assert_eq!(v.hop4(2, addr4(1, 1, 2)), None);
    note_of(&mut c, &world, "has no interface on a lace network (yet)");

    // The transit pod comes up on this node, in network 3.
    add_pod(&mut world, 3, 1, 9);
    step(&mut c, &mut w, &world, &[Change::Endpoint(key(3, 1, 9))]);
    assert!(c.plan(&world, &[]).unwrap().notes.is_empty());
    let fw = local(3, 1, 9);
    for (net, dst) in [
        (1, addr4(2, 1, 4)),
        (1, addr4(2, 2, 5)),
        (2, addr4(1, 1, 2)),
        (2, addr4(1, 2, 2)),
    ] {
        assert_eq!(v.hop4(net, dst), Some(fw), "network {net} to {dst}");
    }
    assert_eq!(v.hop6(1, addr6(2, 2, 5)), Some(fw));
    // Each end still reaches itself directly.
    assert_eq!(v.hop4(1, addr4(1, 2, 2)), Some(remote(2, 1)));
    // The transit network carries what the pod forwards, both ways.
    assert_eq!(v.hop4(3, addr4(2, 1, 4)), Some(local(2, 1, 4)));
    assert_eq!(v.hop4(3, addr4(2, 2, 5)), Some(remote(2, 2)));
    assert_eq!(v.hop4(3, addr4(1, 1, 2)), Some(local(1, 1, 2)));
    assert_eq!(v.hop6(3, addr6(1, 2, 2)), Some(remote(2, 1)));
    assert!(v.port(port(3, 9)).unwrap().transit);
    assert!(!v.port(port(2, 4)).unwrap().transit);
    assert!(!v.port(port(1, 2)).unwrap().transit);
    assert_eq!(&read_back(&r.cfg).unwrap(), c.last());

    // On node 2 the transit is elsewhere: both ends go to their own network's End.DT46 SID on
    // node 1, whose FIBs steer them on to the interface.
    let r2 = Region::new();
    let mut w2 = r2.writer();
    let mut c2 = Compiler::new(&name(2), cfg());
    step(&mut c2, &mut w2, &world, &[Change::All]);
    let v2 = View::new(&r2);
    assert_eq!(v2.hop4(1, addr4(2, 2, 5)), Some(remote(1, 1)));
    assert_eq!(v2.hop6(1, addr6(2, 1, 4)), Some(remote(1, 1)));
    assert_eq!(v2.hop4(2, addr4(1, 2, 2)), Some(remote(1, 2)));
    assert!(c2.plan(&world, &[]).unwrap().notes.is_empty());

    // An end with no endpoint on the transit's node is programmed there all the same, with
    // its SID, so that the other nodes' packets of it reach the transit.
    add_network(&mut world, 7);
    allocate(&mut world, 7, 2);
    add_pod(&mut world, 7, 2, 3);
    let mut p7 = policy("seven-through-fw", &[7], 2, &[]);
    p7.transit = Some(NamespacedName::new("default", "pod-3-1-9"));
    world.routing.push(p7);
    let changes = [
        Change::Network(net_name(7)),
        Change::Endpoint(key(7, 2, 3)),
        Change::Routing,
    ];
    step(&mut c, &mut w, &world, &changes);
    assert_eq!(v.hop4(7, addr4(2, 2, 5)), Some(fw));
    assert_eq!(v.hop4(2, addr4(7, 2, 3)), Some(fw));
    assert_eq!(v.hop4(3, addr4(7, 2, 3)), Some(remote(2, 7)));
    assert!(c.last().sids.contains_key(&sid(1, 7)));
    step(&mut c2, &mut w2, &world, &changes);
    assert_eq!(v2.hop4(7, addr4(2, 1, 4)), Some(remote(1, 7)));
    world.routing.pop();
    step(&mut c, &mut w, &world, &[Change::Routing]);
    assert!(v.info(7).is_none(), "no longer an end here: not programmed");

    // A second interface off the path makes the transit ambiguous; it closes the path.
    add_network(&mut world, 5);
    allocate(&mut world, 5, 1);
    let mut second = world.endpoints[&key(3, 1, 9)].clone();
    second.network = net_name(5);
    second.port = port(5, 9);
    second.addresses = vec![IpAddr::V4(addr4(5, 1, 9))];
    let second_key = AttachmentKey {
        container_id: key(3, 1, 9).container_id,
        ifname: "net1".into(),
    };
    world.endpoints.insert(second_key.clone(), second);
    step(
        &mut c,
        &mut w,
        &world,
        &[
            Change::Network(net_name(5)),
            Change::Endpoint(second_key.clone()),
        ],
    );
    assert_eq!(v.hop4(1, addr4(2, 1, 4)), None);
    assert!(!v.port(port(3, 9)).unwrap().transit);
    note_of(
        &mut c,
        &world,
        "several interfaces off the path (net-3, net-5)",
    );
    world.endpoints.remove(&second_key);
    step(&mut c, &mut w, &world, &[Change::Endpoint(second_key)]);
    assert_eq!(v.hop4(1, addr4(2, 1, 4)), Some(fw));

    // An anonymous transit network is refused, with the seed's reason.
    world.networks.get_mut(&net_name(3)).unwrap().anonymous = true;
    step(&mut c, &mut w, &world, &[Change::Network(net_name(3))]);
    assert_eq!(v.hop4(1, addr4(2, 1, 4)), None);
    assert_eq!(v.hop4(2, addr4(1, 1, 2)), None);
    note_of(&mut c, &world, "cannot be used as a transit next hop");
    world.networks.get_mut(&net_name(3)).unwrap().anonymous = false;
    step(&mut c, &mut w, &world, &[Change::Network(net_name(3))]);
    assert_eq!(v.hop4(2, addr4(1, 1, 2)), Some(fw));

    // The transit pod goes: closed again, the flag with it.
    world.endpoints.remove(&key(3, 1, 9));
    step(&mut c, &mut w, &world, &[Change::Endpoint(key(3, 1, 9))]);
    assert_eq!(v.hop4(1, addr4(2, 1, 4)), None);
    assert_eq!(v.port(port(3, 9)), None);
    // Without the next hop, the policy is a plain one again.
    world.routing[0].transit = None;
    step(&mut c, &mut w, &world, &[Change::Routing]);
    assert_eq!(v.hop4(1, addr4(2, 1, 4)), Some(local(2, 1, 4)));
    assert_eq!(v.hop4(3, addr4(2, 1, 4)), None);
}

/// A batch the region cannot hold is abandoned: the error names the call, nothing is
/// published, and `last` stays the published tables.
#[test]
fn writer_error_abandons_the_batch() {
    let r = Region::sized(1 << 20);
    let mut w = r.writer();
    let mut world = two_nodes();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    let published = c.last().clone();
    let gen = w.generation();
    for n in 2..40 {
        add_network(&mut world, n);
        allocate(&mut world, n, 1);
        for i in 2..200 {
            add_pod(&mut world, n, 1, i);
        }
    }
    let next = c.plan(&world, &[Change::All]).unwrap().tables;
    let e = c.apply(&mut w, next).unwrap_err();
    assert!(e.to_string().contains("batch was abandoned"), "{e}");
    assert_eq!(w.generation(), gen);
    assert_eq!(c.last(), &published);
    assert_eq!(read_back(&r.cfg).unwrap(), published);
    // The writer still works after the failed batch.
    world = two_nodes();
    add_pod(&mut world, 1, 1, 4);
    let st = step(&mut c, &mut w, &world, &[Change::All]);
    assert_eq!((st.ports_set, st.routes_set), (1, 2));
}

/// A Service the region cannot hold: the batch is refused, and `changed_cluster_ips` names
/// the ClusterIPs whose records it held (the daemon marks their Services `NotPublished`) — not
/// the Service already published and unchanged.
#[test]
fn a_refused_batch_names_the_services_it_held() {
    let r = Region::sized(1 << 20);
    let mut w = r.writer();
    let mut world = two_nodes();
    let backends = |n: u32| -> Vec<Backend> {
        (0..n)
            .map(|i| {
                be(
                    IpAddr::V4((0x0a02_0000 + i).into()),
                    8080,
                    true,
                    true,
                    false,
                )
            })
            .collect()
    };
    let one = |vip: &str, n: u32| {
        service(
            1,
            &[vip],
            None,
            vec![svc_port("http", Protocol::Tcp, 80, backends(n))],
        )
    };
    world.services.insert(svc_key("web"), one("10.96.0.10", 3));
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    world
        .services
        .insert(svc_key("big"), one("10.96.0.20", 60_000));
    let next = c
        .plan(&world, &[Change::Service(svc_key("big"))])
        .unwrap()
        .tables;
    let changed = changed_cluster_ips(c.last(), &next);
    assert_eq!(changed, [ip("10.96.0.20")].into());
    let e = c.apply(&mut w, next).unwrap_err();
    assert!(e.to_string().contains("full"), "{e}");
    // Nothing changed: the same comparison against what is published still names it.
    let next = c.plan(&world, &[]).unwrap().tables;
    assert_eq!(changed_cluster_ips(c.last(), &next), changed);
}

/// Two endpoints claiming one port id: the first network (by name) keeps it, the conflict is
/// noted, and when the holder goes the other one gets the port — incrementally as in full.
#[test]
fn duplicate_port_ids_are_reported_and_resolved() {
    let mut world = two_nodes();
    add_network(&mut world, 2);
    allocate(&mut world, 2, 1);
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    add_pod(&mut world, 2, 1, 2);
    world.endpoints.get_mut(&key(2, 1, 2)).unwrap().port = port(1, 2);
    step(&mut c, &mut w, &world, &[Change::Endpoint(key(2, 1, 2))]);
    let out = c.plan(&world, &[]).unwrap();
    assert!(
        out.notes
            .iter()
            .any(|n| n.kind == NoteKind::Conflict && n.object == "Network net-2"),
        "{:#?}",
        out.notes
    );
    let v = View::new(&r);
    assert_eq!(v.port(port(1, 2)).unwrap().network, NetworkId(1));
    world.endpoints.remove(&key(1, 1, 2));
    step(&mut c, &mut w, &world, &[Change::Endpoint(key(1, 1, 2))]);
    assert_eq!(v.port(port(1, 2)).unwrap().network, NetworkId(2));
    assert!(c.plan(&world, &[]).unwrap().notes.is_empty());
}

/// The node must be in the world.
#[test]
fn unknown_node_is_an_error() {
    let e = desired(&two_nodes(), "nowhere", cfg()).unwrap_err();
    assert!(e.to_string().contains("\"nowhere\""), "{e}");
}

// ---- external networks (ADR 0054) ----------------------------------------------------------

fn external(name: &str, id: u32, prefixes: &[&str], uplinks: Vec<UplinkModel>) -> NetworkModel {
    NetworkModel {
        name: name.into(),
        id: NetworkId(id),
        kind: NetworkType::External,
        v4: None,
        v6: None,
        external: prefixes.iter().map(|p| p.parse().unwrap()).collect(),
        anonymous: false,
        l2: L2Config::default(),
        uplinks,
    }
}

fn uplink(
    selector: &[(&str, &str)],
    interface: Option<&str>,
    routes: &[(&str, &str)],
) -> UplinkModel {
    UplinkModel {
        node_selector: selector
            .iter()
            .map(|(k, v)| Requirement::Equals((*k).into(), (*v).into()))
            .collect(),
        interface: interface.map(Into::into),
        vlan: None,
        static_routes: routes
            .iter()
            .map(|(d, nh)| (d.parse().unwrap(), nh.parse().unwrap()))
            .collect(),
    }
}

fn p(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn via(gateway: &str) -> NextHop {
    via_vlan(gateway, 0)
}

fn via_vlan(gateway: &str, vlan: u16) -> NextHop {
    NextHop::Uplink {
        port: PortId::UPLINK,
        gateway: match gateway.parse::<IpAddr>().unwrap() {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        },
        vlan,
    }
}

/// Three external networks over the two-node world: `ext-a` with uplinks on node 1 (its first
/// entry selects another rack, its second node 1) and static routes some of which do not fit
/// the node's subnets; `ext-b`, on node 1's VLAN 100 (the same subnet and gateway address as
/// `ext-a`'s, untagged), with a prefix inside `ext-a`'s and one the same as `ext-a`'s;
/// `ext-c`, on no node here, with a prefix the same as `ext-a`'s.
fn external_world() -> World {
    let mut w = two_nodes();
    w.nodes
        .get_mut(&name(1))
        .unwrap()
        .labels
        .insert("lace-cni.io/uplink".into(), "a".into());
    let a = external(
        "ext-a",
        20,
        &["203.0.113.0/24", "2001:db8:100::/48"],
        vec![
            uplink(&[("rack", "b")], None, &[("0.0.0.0/0", "192.0.2.99")]),
            uplink(
                &[("lace-cni.io/uplink", "a")],
                Some("eth1"),
                &[
                    ("0.0.0.0/0", "192.0.2.1"),
                    ("::/0", "2001:db8::1"),
                    ("10.9.0.0/16", "198.51.100.1"),
                    ("10.8.0.0/16", "192.0.2.10"),
                    ("0.0.0.0/0", "192.0.2.2"),
                ],
            ),
        ],
    );
    let mut b = external(
        "ext-b",
        21,
        &["203.0.113.128/25", "203.0.113.0/24"],
        vec![uplink(
            &[("lace-cni.io/uplink", "a")],
            Some("eth1"),
            &[("0.0.0.0/0", "192.0.2.1")],
        )],
    );
    b.uplinks[0].vlan = Some(100);
    let c = external(
        "ext-c",
        22,
        &["198.18.0.0/15", "2001:db8:100::/48"],
        vec![uplink(&[("lace-cni.io/uplink", "z")], None, &[])],
    );
    for n in [a, b, c] {
        w.networks.insert(n.name.clone(), n);
    }
    w.external_uplinks = vec![
        ExternalUplink {
            interface: "eth1".into(),
            vlan: 0,
            addresses: vec![(ip("192.0.2.10"), 24), (ip("2001:db8::10"), 64)],
        },
        ExternalUplink {
            interface: "eth1".into(),
            vlan: 100,
            addresses: vec![(ip("192.0.2.10"), 24)],
        },
    ];
    w
}

/// A node carries an external network when one of its uplink entries selects it: the static
/// routes whose next hop is on one of the node's subnets there go out of the uplink to that
/// next hop; the sources table holds every external network's prefixes; the rest is noted.
#[test]
fn external_networks_get_their_static_routes_and_the_sources_table() {
    let mut world = external_world();
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    let compiled = c.plan(&world, &[Change::All]).unwrap();
    let notes = compiled.notes.clone();
    step(&mut c, &mut w, &world, &[Change::All]);
    let v = View::new(&r);

    let info = v.info(20).expect("ext-a is programmed on node 1");
    assert_eq!(info.kind, NetworkKind::External);
    assert_eq!(
        (info.gateway4, info.gateway6, info.stateful),
        (None, None, false)
    );
    assert_eq!(
        hops(&compiled.tables.networks[&NetworkId(20)].routes),
        BTreeMap::from([
            (p("0.0.0.0/0"), via("192.0.2.1")),
            (p("::/0"), via("2001:db8::1")),
        ])
    );
    assert_eq!(
        v.hop4(20, Ipv4Addr::new(8, 8, 8, 8)),
        Some(via("192.0.2.1"))
    );
    assert_eq!(v.hop(20, ip("2001:4860::8888")), Some(via("2001:db8::1")));
    // ext-b leaves tagged with its VLAN, to the gateway of the same address there.
    assert_eq!(v.info(21).map(|i| i.kind), Some(NetworkKind::External));
    assert_eq!(
        hops(&compiled.tables.networks[&NetworkId(21)].routes),
        BTreeMap::from([(p("0.0.0.0/0"), via_vlan("192.0.2.1", 100))])
    );
    // ext-c selects no node here.
    assert_eq!(v.info(22), None);

    // Classification by source, longest match across the networks of the VLAN a packet
    // arrives on: ext-b's prefixes, inside and equal to ext-a's, are its own on VLAN 100 only.
    let sources = NetworkId::EXTERNAL_SOURCES.0;
    let vlan100 = NetworkId::external_sources(100).unwrap().0;
    for (table, src, net) in [
        (sources, "203.0.113.5", Some(20)),
        (sources, "203.0.113.200", Some(20)),
        (sources, "2001:db8:100::7", Some(20)),
        (sources, "198.19.1.1", Some(22)),
        (sources, "192.0.2.50", None),
        (vlan100, "203.0.113.5", Some(21)),
        (vlan100, "203.0.113.200", Some(21)),
        (vlan100, "2001:db8:100::7", None),
        (vlan100, "198.19.1.1", None),
    ] {
        assert_eq!(
            v.hop(table, ip(src)),
            net.map(|n| NextHop::Network { net: NetworkId(n) }),
            "{src} in table {table}"
        );
    }

    let has = |kind: NoteKind, object: &str, text: &[&str]| {
        assert!(
            notes.iter().any(|n| n.kind == kind
                && n.object == object
                && text.iter().all(|t| n.message.contains(t))),
            "no {kind:?} note on {object} with {text:?}: {notes:#?}"
        );
    };
    has(
        NoteKind::Inconsistent,
        "Network ext-a",
        &[
            "spec.uplinks[1].staticRoutes[2] (10.9.0.0/16 via 198.51.100.1)",
            "node-1",
            "on none of its subnets on interface \"eth1\" (192.0.2.0/24)",
        ],
    );
    has(
        NoteKind::Inconsistent,
        "Network ext-a",
        &[
            "staticRoutes[3] (10.8.0.0/16 via 192.0.2.10)",
            "the node's own address",
        ],
    );
    has(
        NoteKind::Conflict,
        "Network ext-a",
        &[
            "staticRoutes[4]",
            "0.0.0.0/0 via 192.0.2.2",
            "via 192.0.2.1; kept the first",
        ],
    );
    has(
        NoteKind::Conflict,
        "Network ext-c",
        &["2001:db8:100::/48 is also network ext-a's"],
    );
    has(
        NoteKind::Inconsistent,
        "Network ext-c",
        &["no node carries it"],
    );
    assert_eq!(notes.len(), 5, "{notes:#?}");
    // Other nodes reach the network through node 1's End.DT46 SID of it.
    let dt46 = encode_sid(node(1).locator, SidFunction::EndDt46, NetworkId(20)).unwrap();
    assert_eq!(v.sid(dt46), Some(SidBehavior::EndDt46(NetworkId(20))));

    // What the tables hold is read back as it was compiled.
    assert_eq!(read_back(&r.cfg).unwrap(), compiled.tables);

    // A pod's change leaves the external tables as they were, shared.
    add_pod(&mut world, 1, 1, 3);
    let next = c.plan(&world, &[Change::Endpoint(key(1, 1, 3))]).unwrap();
    for id in [
        NetworkId(20),
        NetworkId(21),
        NetworkId::EXTERNAL_SOURCES,
        NetworkId(vlan100),
    ] {
        assert!(std::sync::Arc::ptr_eq(
            &next.tables.networks[&id],
            &c.last().networks[&id]
        ));
    }
    step(&mut c, &mut w, &world, &[Change::Endpoint(key(1, 1, 3))]);

    // The forwarder reports the default route's next hop as not answering: the route stays
    // (the forwarder drops its packets while it does not resolve), noted as down. The same
    // address on VLAN 100 is another neighbor, and ext-b's route is not down.
    world.unresolved = vec![(0, ip("192.0.2.1"))];
    let down = c.plan(&world, &[Change::All]).unwrap();
    step(&mut c, &mut w, &world, &[Change::All]);
    assert_eq!(
        down.tables.networks[&NetworkId(20)].routes[&p("0.0.0.0/0")].nh,
        via("192.0.2.1")
    );
    assert!(
        down.notes.iter().any(|n| n.kind == NoteKind::Down
            && n.object == "Network ext-a"
            && n.message.contains(
                "spec.uplinks[1].staticRoutes[0] (0.0.0.0/0 via 192.0.2.1) is down on node node-1"
            )),
        "{:#?}",
        down.notes
    );
    assert!(
        !down
            .notes
            .iter()
            .any(|n| n.kind == NoteKind::Down && n.object == "Network ext-b"),
        "{:#?}",
        down.notes
    );
    world.unresolved = vec![(100, ip("192.0.2.1"))];
    let down = c.plan(&world, &[Change::All]).unwrap();
    assert!(
        down.notes.iter().any(|n| n.kind == NoteKind::Down
            && n.object == "Network ext-b"
            && n.message.contains("(0.0.0.0/0 via 192.0.2.1) is down")),
        "{:#?}",
        down.notes
    );
    world.unresolved.clear();

    // The forwarder's entries are renamed: the uplink entry names an interface the node has
    // no addresses on, so no static route is programmed; the network and the sources stay.
    for e in &mut world.external_uplinks {
        e.interface = "eth2".into();
    }
    let compiled = c.plan(&world, &[Change::All]).unwrap();
    step(&mut c, &mut w, &world, &[Change::All]);
    assert!(compiled.tables.networks[&NetworkId(20)].routes.is_empty());
    assert_eq!(v.hop4(20, Ipv4Addr::new(8, 8, 8, 8)), None);
    assert_eq!(
        v.hop(sources, ip("203.0.113.5")),
        Some(NextHop::Network { net: NetworkId(20) })
    );
    assert!(compiled.notes.iter().any(|n| n.object == "Network ext-a"
        && n.message
            .contains("no [[uplink.external]] entry for interface \"eth1\"")));

    // Node 2 carries no external network: no sources table either.
    let other = desired(&world, &name(2), cfg()).unwrap();
    assert!(!other.tables.networks.contains_key(&NetworkId(20)));
    assert!(!other
        .tables
        .networks
        .contains_key(&NetworkId::EXTERNAL_SOURCES));
}

/// Routing policy to and from an external network: the pods' network reaches the external
/// prefixes (narrowed by the policy) out of the uplink on the node that carries the external
/// network, and through that node's End.DT46 SID of it elsewhere; the external network's table
/// there reaches the pods back. One way from outside: the pods' network gets the external
/// prefixes reply-only.
#[test]
fn routing_policy_opens_paths_to_and_from_an_external_network() {
    let mut world = external_world();
    add_network(&mut world, 2);
    allocate(&mut world, 2, 1);
    allocate(&mut world, 2, 2);
    add_pod(&mut world, 2, 1, 2);
    add_pod(&mut world, 2, 2, 2);
    world.routing.push(policy(
        "out",
        &[1],
        0,
        &["203.0.113.64/26", "2001:db8:100::/48"],
    ));
    world.routing[0].destination = "ext-a".into();
    let mut back = policy("in", &[0], 2, &[]);
    back.sources = vec!["ext-a".into()];
    back.direction = Direction::SourceToDestination;
    world.routing.push(back);

    let uplink = desired(&world, &name(1), cfg()).unwrap();
    let elsewhere = desired(&world, &name(2), cfg()).unwrap();
    let fib = |t: &lace_control::compile::Compiled, n: u32| {
        t.tables.networks[&NetworkId(n)].routes.clone()
    };

    // Node 1 carries ext-a: net-1 leaves through the uplink, by ext-a's static routes, for the
    // policy's prefixes of ext-a only.
    let n1 = fib(&uplink, 1);
    assert_eq!(
        n1.get(&p("203.0.113.64/26")).map(|r| r.nh),
        Some(via("192.0.2.1"))
    );
    assert_eq!(
        n1.get(&p("2001:db8:100::/48")).map(|r| r.nh),
        Some(via("2001:db8::1"))
    );
    assert!(!n1.contains_key(&p("203.0.113.0/24")) && !n1.contains_key(&p("0.0.0.0/0")));
    // Node 2 does not: the same prefixes go to node 1's End.DT46 SID of ext-a.
    let to_uplink = NextHop::Remote {
        node: NodeId(1),
        sid: encode_sid(node(1).locator, SidFunction::EndDt46, NetworkId(20)).unwrap(),
    };
    let n2 = fib(&elsewhere, 1);
    assert_eq!(n2.get(&p("203.0.113.64/26")).map(|r| r.nh), Some(to_uplink));
    assert_eq!(
        n2.get(&p("2001:db8:100::/48")).map(|r| r.nh),
        Some(to_uplink)
    );
    assert!(!elsewhere.tables.networks.contains_key(&NetworkId(20)));

    // ext-a's table on node 1: its static routes, net-1's pods back (bidirectional) and net-2's
    // (it is the source of "in").
    let ext = fib(&uplink, 20);
    assert_eq!(ext[&p("0.0.0.0/0")].nh, via("192.0.2.1"));
    assert_eq!(
        ext[&IpNet::from(IpAddr::V4(addr4(1, 1, 2)))].nh,
        local(1, 1, 2)
    );
    assert_eq!(ext[&IpNet::V4(block4(1, 2))].nh, remote(2, 1));
    assert_eq!(ext[&IpNet::V4(block4(2, 2))].nh, remote(2, 2));
    assert_eq!(
        ext[&IpNet::from(IpAddr::V4(addr4(2, 1, 2)))].nh,
        local(2, 1, 2)
    );
    assert!(ext.values().all(|r| r.flags == RouteFlags::NONE));
    assert!(!uplink.tables.networks[&NetworkId(20)].info.stateful);

    // One way from outside: net-2 answers ext-a's hosts only (reply-only routes), and tracks.
    for (t, nh) in [(&uplink, via("192.0.2.1")), (&elsewhere, to_uplink)] {
        let n = fib(t, 2);
        let r = n[&p("203.0.113.0/24")];
        assert_eq!((r.nh, r.flags), (nh, RouteFlags::REPLY_ONLY));
        assert!(t.tables.networks[&NetworkId(2)].info.stateful);
    }
    assert!(
        uplink
            .notes
            .iter()
            .all(|n| !n.object.starts_with("NetworkRoutingPolicy")),
        "{:#?}",
        uplink.notes
    );
}

/// A policy toward an external network with an uplink gateway: on the node that carries the
/// network, the sources' FIBs send its prefixes (narrowed by the policy) out of the uplink to
/// the gateway, on the VLAN the node carries it on, instead of by its static routes; the other
/// nodes send them to the source's End.DT46 SID on that node, which programs the source for it
/// without endpoints there. A gateway off the node's subnets there closes the path, noted; one
/// the forwarder reports as not answering is noted down. Every step checks the incremental
/// plan against a full compilation.
#[test]
fn an_uplink_gateway_takes_the_path_out_there() {
    let mut world = external_world();
    add_network(&mut world, 5);
    allocate(&mut world, 5, 2);
    add_pod(&mut world, 5, 2, 3);
    let mut p = policy("via-gw", &[1, 5], 0, &["203.0.113.128/25"]);
    p.destination = "ext-b".into();
    p.gateway = Some(ip("192.0.2.7"));
    world.routing.push(p);
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    let v = View::new(&r);
    let gw = via_vlan("192.0.2.7", 100);
    // Node 1 carries ext-b on VLAN 100: out to the gateway there, not by the static default.
    assert_eq!(v.hop4(1, "203.0.113.200".parse().unwrap()), Some(gw));
    assert_eq!(v.hop4(1, "203.0.113.5".parse().unwrap()), None, "narrowed");
    // net-5 has no endpoint on node 1, and is programmed there for the others' packets.
    assert_eq!(v.hop4(5, "203.0.113.200".parse().unwrap()), Some(gw));
    assert!(c.last().sids.contains_key(&sid(1, 5)));
    // The way back is ext-b's own.
    assert_eq!(v.hop4(21, addr4(5, 2, 3)), Some(remote(2, 5)));
    assert!(c
        .plan(&world, &[])
        .unwrap()
        .notes
        .iter()
        .all(|n| !n.object.contains("via-gw")));

    // Node 2 does not carry it: to the source's SID on node 1.
    let r2 = Region::new();
    let mut w2 = r2.writer();
    let mut c2 = Compiler::new(&name(2), cfg());
    step(&mut c2, &mut w2, &world, &[Change::All]);
    let v2 = View::new(&r2);
    assert_eq!(
        v2.hop4(5, "203.0.113.200".parse().unwrap()),
        Some(remote(1, 5))
    );
    assert_eq!(
        v2.hop4(1, "203.0.113.129".parse().unwrap()),
        Some(remote(1, 1))
    );

    // The gateway does not answer: still routed (its packets wait, counted), and noted down.
    world.unresolved = vec![(100, ip("192.0.2.7"))];
    step(&mut c, &mut w, &world, &[Change::All]);
    assert_eq!(v.hop4(1, "203.0.113.200".parse().unwrap()), Some(gw));
    let notes = c.plan(&world, &[]).unwrap().notes;
    assert!(
        notes.iter().any(|n| n.kind == NoteKind::Down
            && n.object == "NetworkRoutingPolicy via-gw"
            && n.message
                .contains("spec.nextHop.gateway 192.0.2.7 is down on node node-1")),
        "{notes:#?}"
    );
    world.unresolved.clear();

    // A gateway off the node's subnets on that VLAN closes the path there, and says why.
    world.routing[0].gateway = Some(ip("198.51.100.7"));
    step(&mut c, &mut w, &world, &[Change::Routing]);
    assert_eq!(v.hop4(1, "203.0.113.200".parse().unwrap()), None);
    let notes = c.plan(&world, &[]).unwrap().notes;
    assert!(
        notes.iter().any(|n| n.kind == NoteKind::Inconsistent
            && n.message.contains(
                "spec.nextHop.gateway 198.51.100.7 is not used on node node-1: the next hop is \
                 on none of its subnets on VLAN 100 of interface \"eth1\" (192.0.2.0/24)"
            )),
        "{notes:#?}"
    );
}

/// A network numbered with a reserved table's id (one numbered before the id was reserved) is
/// not programmed, and says why.
#[test]
fn a_network_with_a_reserved_id_is_not_programmed() {
    let mut world = external_world();
    let mut reserved = network(9);
    reserved.id = NetworkId::EXTERNAL_SOURCES;
    world.networks.insert(net_name(9), reserved);
    allocate(&mut world, 9, 1);
    add_pod(&mut world, 9, 1, 2);
    let t = desired(&world, &name(1), cfg()).unwrap();
    assert!(t.notes.iter().any(|n| n.kind == NoteKind::Conflict
        && n.object == "Network net-9"
        && n.message.contains("reserved")));
    // The id keeps the sources table.
    assert_eq!(
        t.tables.networks[&NetworkId::EXTERNAL_SOURCES].info.kind,
        NetworkKind::External
    );
    assert!(!t.tables.ports.contains_key(&port(9, 2)));
}

// ---- services --------------------------------------------------------------------------------

fn svc_key(name: &str) -> NamespacedName {
    NamespacedName::new("shop", name)
}

fn be(addr: IpAddr, port: u16, ready: bool, serving: bool, terminating: bool) -> Backend {
    Backend {
        addr,
        port,
        state: BackendState {
            ready,
            serving,
            terminating,
        },
    }
}

/// Pod i of network n on node k as a ready backend at `port`, both families.
fn pod_backends(n: u32, k: u32, i: u32, port: u16) -> [Backend; 2] {
    [
        be(IpAddr::V4(addr4(n, k, i)), port, true, true, false),
        be(IpAddr::V6(addr6(n, k, i)), port, true, true, false),
    ]
}

fn svc_port(name: &str, protocol: Protocol, port: u16, backends: Vec<Backend>) -> ServicePortModel {
    let mut backends = backends;
    backends.sort_by_key(|b| (b.addr, b.port));
    ServicePortModel {
        name: name.into(),
        protocol,
        port,
        backends: backends
            .into_iter()
            .map(|backend| ServiceBackend {
                backend,
                node: None,
            })
            .collect(),
    }
}

fn service(
    net: u32,
    vips: &[&str],
    affinity: Option<u32>,
    ports: Vec<ServicePortModel>,
) -> ServiceModel {
    ServiceModel {
        network: net_name(net),
        cluster_ips: vips.iter().map(|v| v.parse().unwrap()).collect(),
        affinity_timeout_s: affinity,
        node_local: false,
        ports,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A Service record as the forwarder reads it: affinity, backends, and the backend each slot
/// of the lookup table picks (`ServiceView::pick` of every hash below the table's length).
#[derive(Debug, PartialEq, Eq)]
struct Record {
    affinity: Option<u32>,
    node_local: bool,
    backends: Vec<Backend>,
    slots: Vec<u32>,
}

impl Record {
    /// How many slots backend `addr` has.
    fn share(&self, addr: IpAddr) -> usize {
        let i = self.backends.iter().position(|b| b.addr == addr);
        self.slots
            .iter()
            .filter(|&&s| Some(s as usize) == i)
            .count()
    }
}

impl View {
    fn service(&self, net: u32, vip: &str, proto: u8, port: u16) -> Option<Record> {
        let mut h = self.reader.register().unwrap();
        let snap = h.snapshot();
        let key = ServiceKey::new(NetworkId(net), ip(vip), proto, port);
        let s = snap.service(&key)?;
        let slots = (0..u64::from(s.table_len()))
            .map(|h| s.pick(h).unwrap().0)
            .collect();
        Some(Record {
            affinity: s.affinity_timeout_s(),
            node_local: s.node_local(),
            backends: s.backends().collect(),
            slots,
        })
    }
}

/// Two Services in two networks and a one-way policy from the second to the first: each
/// network's FIB routes its own ClusterIPs to `Service`, the source also the destination's
/// (not the other way round), with a record per ClusterIP and port — the backends of the
/// ClusterIP's family, an even Maglev table over them, the affinity timeout; a port without
/// backends is installed with an empty table (it rejects). Networks with Services are stateful;
/// one the policy does not reach has nothing.
#[test]
fn services_get_cluster_ip_routes_and_records_where_policy_reaches() {
    let mut world = two_nodes();
    for n in [2, 3] {
        add_network(&mut world, n);
        allocate(&mut world, n, 1);
    }
    add_pod(&mut world, 2, 1, 4);
    add_pod(&mut world, 3, 1, 6);
    let mut http = Vec::new();
    for k in [1, 2] {
        http.extend(pod_backends(1, k, 2, 8080));
    }
    world.services.insert(
        svc_key("web"),
        service(
            1,
            &["10.96.0.10", "fd96::10"],
            Some(600),
            vec![
                svc_port("http", Protocol::Tcp, 80, http),
                svc_port("dns", Protocol::Udp, 53, vec![]),
            ],
        ),
    );
    world.services.insert(
        svc_key("db"),
        service(
            2,
            &["10.96.0.20"],
            None,
            vec![svc_port(
                "",
                Protocol::Tcp,
                5432,
                pod_backends(2, 1, 4, 5432).to_vec(),
            )],
        ),
    );
    let mut p = policy("db-to-web", &[2], 1, &[]);
    p.direction = Direction::SourceToDestination;
    world.routing.push(p);
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    let st = step(&mut c, &mut w, &world, &[Change::All]);
    assert_eq!(
        st.services_set,
        4 + 5,
        "web's 4 records twice, db's once: {st:?}"
    );
    assert!(c.plan(&world, &[]).unwrap().notes.is_empty());
    let v = View::new(&r);
    let svc = Some((NextHop::Service, RouteFlags::NONE));
    for net in [1, 2] {
        assert_eq!(v.route(net, ip("10.96.0.10")), svc, "net-{net}");
        assert_eq!(v.route(net, ip("fd96::10")), svc, "net-{net}");
        let web = v.service(net, "10.96.0.10", PROTO_TCP, 80).unwrap();
        assert_eq!(web.affinity, Some(600));
        assert_eq!(
            web.backends,
            [
                be(IpAddr::V4(addr4(1, 1, 2)), 8080, true, true, false),
                be(IpAddr::V4(addr4(1, 2, 2)), 8080, true, true, false),
            ]
        );
        assert_eq!(web.slots.len(), maglev_size(2));
        let (a, b) = (
            web.share(IpAddr::V4(addr4(1, 1, 2))),
            web.share(IpAddr::V4(addr4(1, 2, 2))),
        );
        assert_eq!(a + b, web.slots.len());
        assert!(a.abs_diff(b) <= 1, "{a} / {b}");
        let web6 = v.service(net, "fd96::10", PROTO_TCP, 80).unwrap();
        assert!(web6.backends.iter().all(|b| b.addr.is_ipv6()));
        assert_eq!(web6.backends.len(), 2);
        let dns = v.service(net, "10.96.0.10", PROTO_UDP, 53).unwrap();
        assert!(dns.slots.is_empty() && dns.backends.is_empty(), "rejects");
        // Only the Service's own ports.
        assert!(v.service(net, "10.96.0.10", PROTO_UDP, 80).is_none());
        assert!(v.info(net).unwrap().stateful);
    }
    // db is network 2's; the one-way policy does not take network 1 there.
    assert_eq!(v.route(2, ip("10.96.0.20")), svc);
    assert_eq!(v.route(1, ip("10.96.0.20")), None);
    assert!(v.service(1, "10.96.0.20", PROTO_TCP, 5432).is_none());
    let db = v.service(2, "10.96.0.20", PROTO_TCP, 5432).unwrap();
    assert_eq!(db.affinity, None);
    assert!(db.slots.iter().all(|&s| s == 0) && db.slots.len() == maglev_size(1));
    // Network 3 reaches nothing.
    assert_eq!(v.route(3, ip("10.96.0.10")), None);
    assert!(v.service(3, "10.96.0.10", PROTO_TCP, 80).is_none());
    assert!(!v.info(3).unwrap().stateful);
    assert_eq!(&read_back(&r.cfg).unwrap(), c.last());
    // A restarted control reads records and flags back: its first apply writes nothing.
    drop(w);
    let mut w = r.writer();
    let mut again = Compiler::resume(&name(1), cfg(), &r.cfg).unwrap();
    let st = step(&mut again, &mut w, &world, &[Change::All]);
    assert_eq!(st.changes(), 0, "{st:?}");
}

/// An endpoint's change rewrites that Service's records only; KEP-1669 in the tables: a
/// terminating backend leaves the lookup table while a ready one remains, serving-and-
/// terminating ones take it when none is ready, and with none serving the Service rejects
/// (an empty table behind the same route). A Service bound to a network makes it stateful and
/// its removal takes its routes and records.
#[test]
fn an_endpoint_change_rewrites_one_service() {
    let mut world = two_nodes();
    add_network(&mut world, 2);
    allocate(&mut world, 2, 1);
    add_pod(&mut world, 2, 1, 4);
    world.routing.push(policy("both", &[2], 1, &[]));
    let backends = |states: [(bool, bool, bool); 2]| {
        let mut out = Vec::new();
        for (k, (r, s, t)) in [1, 2].into_iter().zip(states) {
            out.push(be(IpAddr::V4(addr4(1, k, 2)), 8080, r, s, t));
        }
        out
    };
    let web = |states| {
        service(
            1,
            &["10.96.0.10"],
            None,
            vec![svc_port("http", Protocol::Tcp, 80, backends(states))],
        )
    };
    let ready = (true, true, false);
    let draining = (false, true, true);
    let gone = (false, false, true);
    world.services.insert(svc_key("web"), web([ready, ready]));
    world.services.insert(
        svc_key("other"),
        service(
            2,
            &["10.96.0.30"],
            None,
            vec![svc_port(
                "",
                Protocol::Tcp,
                80,
                pod_backends(2, 1, 4, 80).to_vec(),
            )],
        ),
    );
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    step(&mut c, &mut w, &world, &[Change::All]);
    let v = View::new(&r);
    let one = IpAddr::V4(addr4(1, 1, 2));
    let two = IpAddr::V4(addr4(1, 2, 2));
    let before = v.service(1, "10.96.0.10", PROTO_TCP, 80).unwrap();
    assert!(before.share(one) > 0 && before.share(two) > 0);

    world
        .services
        .insert(svc_key("web"), web([ready, draining]));
    let st = step(&mut c, &mut w, &world, &[Change::Service(svc_key("web"))]);
    assert_eq!(
        (st.services_set, st.changes()),
        (2, 2),
        "web's record in both networks, nothing else: {st:?}"
    );
    for net in [1, 2] {
        let now = v.service(net, "10.96.0.10", PROTO_TCP, 80).unwrap();
        assert_eq!(now.backends.len(), 2, "the draining backend stays listed");
        assert_eq!(now.share(one), now.slots.len());
        // Maglev: the slots the remaining backend had are still its.
        for (a, b) in before.slots.iter().zip(&now.slots) {
            if before.backends[*a as usize].addr == one {
                assert_eq!(now.backends[*b as usize].addr, one);
            }
        }
    }
    world.services.insert(svc_key("web"), web([draining, gone]));
    step(&mut c, &mut w, &world, &[Change::Service(svc_key("web"))]);
    assert_eq!(
        v.service(1, "10.96.0.10", PROTO_TCP, 80)
            .unwrap()
            .share(one),
        maglev_size(1),
        "serving and terminating: used when nothing is ready"
    );
    world.services.insert(svc_key("web"), web([gone, gone]));
    step(&mut c, &mut w, &world, &[Change::Service(svc_key("web"))]);
    let rejects = v.service(1, "10.96.0.10", PROTO_TCP, 80).unwrap();
    assert!(rejects.slots.is_empty() && rejects.backends.len() == 2);
    assert_eq!(
        v.route(1, ip("10.96.0.10")),
        Some((NextHop::Service, RouteFlags::NONE))
    );
    // Removed: routes and records go, from both networks.
    world.services.remove(&svc_key("web"));
    let st = step(&mut c, &mut w, &world, &[Change::Service(svc_key("web"))]);
    assert_eq!((st.services_removed, st.routes_removed), (2, 2), "{st:?}");
    assert_eq!(v.route(1, ip("10.96.0.10")), None);
    assert!(v.service(2, "10.96.0.10", PROTO_TCP, 80).is_none());
    // Network 1 keeps reaching the other Service; a network without Services, reply-only
    // routes or policy sets is stateless.
    assert!(v.service(1, "10.96.0.30", PROTO_TCP, 80).is_some());
    world.services.remove(&svc_key("other"));
    step(&mut c, &mut w, &world, &[Change::Service(svc_key("other"))]);
    assert!(!v.info(1).unwrap().stateful && !v.info(2).unwrap().stateful);
    assert_eq!(&read_back(&r.cfg).unwrap(), c.last());
}

/// The controls of nodes 1 and 2, each with its own tables.
struct Pair {
    regions: [Region; 2],
    controls: [(Compiler, TableWriter); 2],
}

impl Pair {
    fn new() -> Pair {
        let regions = [Region::new(), Region::new()];
        let controls = [1, 2].map(|k| {
            (
                Compiler::new(&name(k), cfg()),
                regions[k as usize - 1].writer(),
            )
        });
        Pair { regions, controls }
    }
    /// Both controls take `changes` of `world`.
    fn step(&mut self, world: &World, changes: &[Change]) {
        for (c, w) in &mut self.controls {
            step(c, w, world, changes);
        }
    }
}

/// `internalTrafficPolicy: Local`: each node's tables hold the backends on that node only, with
/// the record flagged node-local (a node without one drops, never rejects); the flag is read
/// back by a restarted control; a backend's move to the other node is one Service change.
#[test]
fn a_node_local_service_has_each_nodes_backends() {
    let mut world = two_nodes();
    let on = |k: u32, i: u32| ServiceBackend {
        backend: be(IpAddr::V4(addr4(1, k, i)), 8080, true, true, false),
        node: Some(name(k)),
    };
    let web = |backends: Vec<ServiceBackend>| ServiceModel {
        network: net_name(1),
        cluster_ips: vec![ip("10.96.0.10")],
        affinity_timeout_s: None,
        node_local: true,
        ports: vec![ServicePortModel {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            backends,
        }],
    };
    world
        .services
        .insert(svc_key("web"), web(vec![on(1, 2), on(1, 3), on(2, 2)]));
    let mut pair = Pair::new();
    pair.step(&world, &[Change::All]);
    let (v1, v2) = (View::new(&pair.regions[0]), View::new(&pair.regions[1]));
    let addrs = |r: &Record| r.backends.iter().map(|b| b.addr).collect::<Vec<_>>();
    let t1 = v1.service(1, "10.96.0.10", PROTO_TCP, 80).unwrap();
    let t2 = v2.service(1, "10.96.0.10", PROTO_TCP, 80).unwrap();
    assert!(t1.node_local && t2.node_local);
    assert_eq!(
        addrs(&t1),
        [IpAddr::V4(addr4(1, 1, 2)), IpAddr::V4(addr4(1, 1, 3))]
    );
    assert_eq!(addrs(&t2), [IpAddr::V4(addr4(1, 2, 2))]);
    assert_eq!(t2.slots.len(), maglev_size(1));
    // Node 2's backend moves to node 1: node 2 has none left and drops.
    world
        .services
        .insert(svc_key("web"), web(vec![on(1, 2), on(1, 3), on(1, 4)]));
    let change = [Change::Service(svc_key("web"))];
    pair.step(&world, &change);
    assert_eq!(
        v1.service(1, "10.96.0.10", PROTO_TCP, 80)
            .unwrap()
            .backends
            .len(),
        3
    );
    let t2 = v2.service(1, "10.96.0.10", PROTO_TCP, 80).unwrap();
    assert!(t2.node_local && t2.backends.is_empty() && t2.slots.is_empty());
    assert_eq!(
        &read_back(&pair.regions[1].cfg).unwrap(),
        pair.controls[1].0.last()
    );
}

/// Two controls (nodes 1 and 2, each with its own tables) compile the same lookup table for a
/// Service of ten backends, slot for slot; one backend gone moves only its own slots and a few
/// more.
#[test]
fn two_nodes_compile_the_same_maglev_table() {
    let mut world = two_nodes();
    let ten: Vec<Backend> = (1..=2)
        .flat_map(|k| {
            (10..15).map(move |i| be(IpAddr::V4(addr4(1, k, i)), 8080, true, true, false))
        })
        .collect();
    world.services.insert(
        svc_key("web"),
        service(
            1,
            &["10.96.0.10"],
            None,
            vec![svc_port("http", Protocol::Tcp, 80, ten.clone())],
        ),
    );
    let mut pair = Pair::new();
    pair.step(&world, &[Change::All]);
    let (v1, v2) = (View::new(&pair.regions[0]), View::new(&pair.regions[1]));
    let t1 = v1.service(1, "10.96.0.10", PROTO_TCP, 80).unwrap();
    let t2 = v2.service(1, "10.96.0.10", PROTO_TCP, 80).unwrap();
    assert_eq!(t1, t2);
    assert_eq!(t1.slots.len(), maglev_size(10));
    for b in &ten {
        let n = t1.share(b.addr);
        assert!((102..=103).contains(&n), "{} has {n} of 1021 slots", b.addr);
    }
    let leaving = ten[3].addr;
    let nine: Vec<Backend> = ten.iter().filter(|b| b.addr != leaving).copied().collect();
    world.services.insert(
        svc_key("web"),
        service(
            1,
            &["10.96.0.10"],
            None,
            vec![svc_port("http", Protocol::Tcp, 80, nine)],
        ),
    );
    pair.step(&world, &[Change::Service(svc_key("web"))]);
    let u1 = v1.service(1, "10.96.0.10", PROTO_TCP, 80).unwrap();
    assert_eq!(u1, v2.service(1, "10.96.0.10", PROTO_TCP, 80).unwrap());
    let addr = |r: &Record, s: u32| r.backends[s as usize].addr;
    let moved = t1
        .slots
        .iter()
        .zip(&u1.slots)
        .filter(|(a, b)| addr(&t1, **a) != leaving && addr(&t1, **a) != addr(&u1, **b))
        .count();
    assert!(
        moved < t1.slots.len() / 20,
        "{moved} slots of staying backends moved"
    );
}

/// A ClusterIP that a route already holds (an endpoint's address) or that another Service
/// holds where both are reached is a conflict: noted, never overwritten.
#[test]
fn cluster_ip_conflicts_are_noted_and_never_overwrite() {
    let mut world = two_nodes();
    add_network(&mut world, 2);
    allocate(&mut world, 2, 1);
    world.routing.push(policy("both", &[2], 1, &[]));
    let port = |b: Vec<Backend>| vec![svc_port("", Protocol::Tcp, 80, b)];
    let pod = addr4(1, 1, 2).to_string();
    world.services.insert(
        svc_key("on-a-pod"),
        service(
            1,
            &[pod.as_str()],
            None,
            port(pod_backends(1, 2, 2, 80).to_vec()),
        ),
    );
    world.services.insert(
        svc_key("a"),
        service(1, &["10.96.0.50"], None, port(vec![])),
    );
    world.services.insert(
        svc_key("b"),
        service(2, &["10.96.0.50"], None, port(vec![])),
    );
    let out = desired(&world, &name(1), cfg()).unwrap();
    let net1 = &out.tables.networks[&NetworkId(1)];
    let net2 = &out.tables.networks[&NetworkId(2)];
    assert_eq!(net1.routes[&IpNet::from(ip(&pod))].nh, local(1, 1, 2));
    assert!(!net1.services.keys().any(|k| k.addr == ip(&pod)));
    assert!(
        out.notes.iter().any(|n| n.kind == NoteKind::Conflict
            && n.object == "Network net-1"
            && n.message.contains("Service shop/on-a-pod (ClusterIP)")),
        "{:#?}",
        out.notes
    );
    // Each network keeps its own Service at the shared address: network 1 reaches a first
    // (its own), network 2 reaches b (its own) first.
    let holder = |t: &lace_control::compile::NetworkTables| {
        t.services
            .iter()
            .find(|(k, _)| k.addr == ip("10.96.0.50"))
            .map(|(_, i)| i.backends.len())
    };
    assert_eq!((holder(net1), holder(net2)), (Some(0), Some(0)));
    for (svc, other) in [("shop/b", "shop/a"), ("shop/a", "shop/b")] {
        assert!(
            out.notes
                .iter()
                .any(|n| n.object == format!("Service {svc}")
                    && n.message.contains(&format!("also Service {other}'s"))),
            "{svc}: {:#?}",
            out.notes
        );
    }
}

/// An anonymous network's own Services are not in its FIB until a policy opens the network to
/// itself; the networks that reach it still get them.
#[test]
fn an_anonymous_network_reaches_its_services_only_through_policy() {
    let mut world = two_nodes();
    world.networks.get_mut(&net_name(1)).unwrap().anonymous = true;
    add_network(&mut world, 2);
    allocate(&mut world, 2, 1);
    world.routing.push(policy("two-to-one", &[2], 1, &[]));
    world.services.insert(
        svc_key("web"),
        service(
            1,
            &["10.96.0.10"],
            None,
            vec![svc_port("", Protocol::Tcp, 80, vec![])],
        ),
    );
    let t = desired(&world, &name(1), cfg()).unwrap().tables;
    let vip = IpNet::from(ip("10.96.0.10"));
    assert!(!t.networks[&NetworkId(1)].routes.contains_key(&vip));
    assert!(t.networks[&NetworkId(2)].routes.contains_key(&vip));
    world.routing.push(policy("self", &[1], 1, &[]));
    let t = desired(&world, &name(1), cfg()).unwrap().tables;
    assert_eq!(t.networks[&NetworkId(1)].routes[&vip].nh, NextHop::Service);
}

// ---- incremental == full ----------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    AddPod(u32, u32, u32),
    RemovePod(u32, u32, u32),
    MovePod(u32, u32, u32),
    /// Gives a pod the port of network 1's pod with the same index (a duplicate port id).
    StealPort(u32, u32, u32),
    Allocate(u32, u32),
    Release(u32, u32),
    Anonymous(u32, bool),
    AddPolicy(u32, u32, bool),
    ClearPolicies,
    RemoveNode(u32),
    AddNode(u32),
    RemoveNetwork(u32),
    AddNetwork(u32),
    /// Service s bound to network n: ClusterIP 10.96.0.s (or one shared by every Service, or
    /// network 1's pod 2 on node 1's address), backends network n's pods 2 and 3 on nodes 1 and
    /// 2, ready by the mask's bits.
    SetService(u32, u32, u8, u8),
    RemoveService(u32),
}

fn op() -> impl Strategy<Value = Op> {
    // Networks 1–3 are l3, network 4 (L2) is l2.
    let n = 1u32..5;
    let k = 1u32..4;
    let i = 2u32..6;
    prop_oneof![
        4 => (n.clone(), k.clone(), i.clone()).prop_map(|(n, k, i)| Op::AddPod(n, k, i)),
        3 => (n.clone(), k.clone(), i.clone()).prop_map(|(n, k, i)| Op::RemovePod(n, k, i)),
        1 => (n.clone(), k.clone(), i.clone()).prop_map(|(n, k, i)| Op::MovePod(n, k, i)),
        1 => (n.clone(), k.clone(), i).prop_map(|(n, k, i)| Op::StealPort(n, k, i)),
        2 => (n.clone(), k.clone()).prop_map(|(n, k)| Op::Allocate(n, k)),
        1 => (n.clone(), k.clone()).prop_map(|(n, k)| Op::Release(n, k)),
        1 => (n.clone(), any::<bool>()).prop_map(|(n, b)| Op::Anonymous(n, b)),
        2 => (n.clone(), n.clone(), any::<bool>()).prop_map(|(a, b, x)| Op::AddPolicy(a, b, x)),
        1 => Just(Op::ClearPolicies),
        1 => (2u32..4).prop_map(Op::RemoveNode),
        1 => k.prop_map(Op::AddNode),
        1 => n.clone().prop_map(Op::RemoveNetwork),
        1 => n.clone().prop_map(Op::AddNetwork),
        3 => (0u32..3, n, 0u8..3, any::<u8>()).prop_map(|(s, n, v, m)| Op::SetService(s, n, v, m)),
        1 => (0u32..3).prop_map(Op::RemoveService),
    ]
}

/// Applies `op` to `world` and says what changed.
fn run(world: &mut World, op: &Op) -> Vec<Change> {
    match *op {
        Op::AddPod(n, k, i) => {
            add_pod(world, n, k, i);
            vec![Change::Endpoint(key(n, k, i))]
        }
        Op::RemovePod(n, k, i) => {
            world.endpoints.remove(&key(n, k, i));
            vec![Change::Endpoint(key(n, k, i))]
        }
        Op::MovePod(n, k, i) => match world.endpoints.get_mut(&key(n, k, i)) {
            Some(e) => {
                e.node = name(k % 3 + 1);
                vec![Change::Endpoint(key(n, k, i))]
            }
            None => vec![],
        },
        Op::StealPort(n, k, i) => match world.endpoints.get_mut(&key(n, k, i)) {
            Some(e) => {
                e.port = port(1, i);
                vec![Change::Endpoint(key(n, k, i))]
            }
            None => vec![],
        },
        Op::Allocate(n, k) => {
            allocate(world, n, k);
            vec![Change::Allocation {
                network: net_name(n),
                node: name(k),
            }]
        }
        Op::Release(n, k) => {
            world.allocations.remove(&(net_name(n), name(k)));
            vec![Change::Allocation {
                network: net_name(n),
                node: name(k),
            }]
        }
        Op::Anonymous(n, b) => match world.networks.get_mut(&net_name(n)) {
            Some(m) => {
                m.anonymous = b;
                vec![Change::Network(net_name(n))]
            }
            None => vec![],
        },
        Op::AddPolicy(a, b, bidi) => {
            let mut p = policy(&format!("p{}", world.routing.len()), &[a], b, &[]);
            if !bidi {
                p.direction = Direction::SourceToDestination;
                p.prefixes = vec![IpNet::V4(block4(b, 2))];
            }
            world.routing.push(p);
            vec![Change::Routing]
        }
        Op::ClearPolicies => {
            world.routing.clear();
            vec![Change::Routing]
        }
        Op::RemoveNode(k) => {
            world.nodes.remove(&name(k));
            vec![Change::Node(name(k))]
        }
        Op::AddNode(k) => {
            world.nodes.insert(name(k), node(k));
            vec![Change::Node(name(k))]
        }
        Op::RemoveNetwork(n) => {
            world.networks.remove(&net_name(n));
            vec![Change::Network(net_name(n))]
        }
        Op::AddNetwork(n) => {
            add_network(world, n);
            vec![Change::Network(net_name(n))]
        }
        Op::SetService(s, n, vip, mask) => {
            let vip = match vip {
                0 => format!("10.96.0.{s}"),
                1 => "10.96.0.99".to_owned(),
                _ => addr4(1, 1, 2).to_string(),
            };
            let mut backends = Vec::new();
            for (bit, (k, i)) in [(1, 2), (1, 3), (2, 2), (2, 3)].into_iter().enumerate() {
                let ready = mask & (1 << bit) != 0;
                backends.push(be(IpAddr::V4(addr4(n, k, i)), 80, ready, true, !ready));
                backends.push(be(IpAddr::V6(addr6(n, k, i)), 80, ready, true, !ready));
            }
            let ports = vec![svc_port("", Protocol::Tcp, 80, backends)];
            world.services.insert(
                svc_key(&format!("s{s}")),
                service(n, &[vip.as_str(), "fd96::1"], None, ports),
            );
            vec![Change::Service(svc_key(&format!("s{s}")))]
        }
        Op::RemoveService(s) => {
            world.services.remove(&svc_key(&format!("s{s}")));
            vec![Change::Service(svc_key(&format!("s{s}")))]
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// After any sequence of changes, the incremental plan equals the full compilation, and
    /// the published tables read back equal it.
    #[test]
    fn incremental_plans_equal_full_compilation(ops in proptest::collection::vec(op(), 1..30)) {
        let mut world = two_nodes();
        world.nodes.insert(name(3), node(3));
        add_network(&mut world, 2);
        add_network(&mut world, L2);
        let r = Region::new();
        let mut w = r.writer();
        let mut c = Compiler::new(&name(1), cfg());
        let first = c.plan(&world, &[]).unwrap();
        c.apply(&mut w, first.tables).unwrap();
        for o in &ops {
            let changes = run(&mut world, o);
            let inc = c.plan(&world, &changes).unwrap();
            let full = desired(&world, &name(1), cfg()).unwrap();
            prop_assert_eq!(&inc, &full, "after {:?}", o);
            c.apply(&mut w, inc.tables).unwrap();
        }
        prop_assert_eq!(&read_back(&r.cfg).unwrap(), c.last());
    }
}

// ---- the host interface ----------------------------------------------------------------------

/// Node 1 with its host interface: the port, the host network holding every local endpoint of
/// every network (l3 and l2), this node's blocks and other nodes' l3 blocks (through SRv6) and
/// every ClusterIP, the node's addresses routed to the host port in every programmed network and
/// another node's to that node's SID in the l3 ones, and the host's routes: the blocks, the l2
/// endpoints and the ClusterIPs.
#[test]
fn the_host_interface_reaches_every_pod_and_pods_reach_every_node() {
    let mut world = two_nodes();
    add_network(&mut world, 2);
    allocate(&mut world, 2, 1);
    add_pod(&mut world, 2, 1, 7);
    add_network(&mut world, L2);
    add_pod(&mut world, L2, 1, 5);
    let host_mac = MacAddr([0x0a, 0, 0, 0, 0, 1]);
    let node4: IpAddr = "192.168.100.1".parse().unwrap();
    let node6: IpAddr = "fd00:200::1".parse().unwrap();
    let other4: IpAddr = "192.168.100.2".parse().unwrap();
    let other6: IpAddr = "fd00:200::2".parse().unwrap();
    world.nodes.get_mut(&name(2)).unwrap().addresses = vec![other4, other6];
    add_network(&mut world, 3);
    allocate(&mut world, 3, 2);
    let mut http = Vec::new();
    for k in [1, 2] {
        http.extend(pod_backends(1, k, 2, 8080));
    }
    world.services.insert(
        svc_key("web"),
        service(
            1,
            &["10.96.0.10"],
            None,
            vec![svc_port("http", Protocol::Tcp, 80, http)],
        ),
    );
    world.host = Some(HostModel {
        iface: IfName::new("lace-host-fw").unwrap(),
        mac: host_mac,
        endpoint: 1 << 63 | 9,
        addresses: vec![node4, node6],
    });
    let r = Region::new();
    let mut w = r.writer();
    let mut c = Compiler::new(&name(1), cfg());
    let compiled = c.plan(&world, &[Change::All]).unwrap();
    assert!(compiled.notes.is_empty(), "{:?}", compiled.notes);
    step(&mut c, &mut w, &world, &[Change::All]);
    let v = View::new(&r);
    let port = v.port(PortId::HOST).unwrap();
    assert_eq!(
        (
            port.kind,
            port.network,
            port.mac,
            port.endpoint,
            port.iface.as_str()
        ),
        (
            PortKind::Host,
            NetworkId::HOST,
            host_mac,
            1 << 63 | 9,
            "lace-host-fw"
        )
    );
    let info = v.info(NetworkId::HOST.0).unwrap();
    assert_eq!(
        (info.gateway4, info.gateway6, info.mtu),
        (Some(HOST_GATEWAY4), Some(HOST_GATEWAY6), 1446)
    );
    let to_host = Some(NextHop::Local {
        port: PortId::HOST,
        mac: host_mac,
    });
    let host = NetworkId::HOST.0;
    // The host reaches the local pods of every network; a free address of a local block is
    // unreachable; another node's pods through that node's SID of their network.
    assert_eq!(v.hop4(host, addr4(1, 1, 2)), Some(local(1, 1, 2)));
    assert_eq!(v.hop6(host, addr6(1, 1, 2)), Some(local(1, 1, 2)));
    assert_eq!(v.hop4(host, addr4(2, 1, 7)), Some(local(2, 1, 7)));
    assert_eq!(v.hop4(host, addr4(L2, 1, 5)), Some(local(L2, 1, 5)));
    assert_eq!(v.hop4(host, addr4(1, 1, 99)), Some(NextHop::Unreachable));
    assert_eq!(v.hop4(host, addr4(1, 2, 2)), Some(remote(2, 1)));
    assert_eq!(v.hop6(host, addr6(1, 2, 2)), Some(remote(2, 1)));
    // Another node's addresses are not the host network's: the host reaches them its own way.
    assert_eq!(v.hop(host, other4), None);
    // Every ClusterIP, with its Service's record, the host network tracked for it.
    assert_eq!(v.hop(host, ip("10.96.0.10")), Some(NextHop::Service));
    let web = v.service(host, "10.96.0.10", 6, 80).expect("web's record");
    assert_eq!(
        web.backends.iter().map(|b| b.addr).collect::<Vec<_>>(),
        [IpAddr::V4(addr4(1, 1, 2)), IpAddr::V4(addr4(1, 2, 2))]
    );
    assert!(v.info(host).unwrap().stateful);
    assert_eq!(
        v.hop(host, node4),
        to_host,
        "answers to the host go back to it"
    );
    // Pods of every programmed network reach the node's addresses, and those of an l3
    // network another node's addresses through that node's SID of the network (where its host
    // port takes them).
    for n in [1, 2, L2] {
        assert_eq!(v.hop(n, node4), to_host, "net-{n}");
        assert_eq!(v.hop(n, node6), to_host, "net-{n}");
    }
    let to_other_host = Some(NextHop::Remote {
        node: NodeId(2),
        sid: encode_sid(node(2).locator, SidFunction::EndDt46, NetworkId::HOST).unwrap(),
    });
    for n in [1, 2] {
        assert_eq!(v.hop(n, other4), to_other_host, "net-{n}");
        assert_eq!(v.hop(n, other6), to_other_host, "net-{n}");
    }
    assert_eq!(
        v.hop(L2, other4),
        None,
        "l2 networks reach only their own node"
    );
    // This node decapsulates into its host network what other nodes' pods send its addresses.
    let host_sid = encode_sid(node(1).locator, SidFunction::EndDt46, NetworkId::HOST).unwrap();
    assert_eq!(
        c.last().sids.get(&host_sid),
        Some(&SidBehavior::EndDt46(NetworkId::HOST))
    );
    // Another node's block of a network with no endpoint here is routed too: the host answers
    // that network's pods.
    assert_eq!(v.hop4(host, addr4(3, 2, 9)), Some(remote(2, 3)));
    // The host's routes: every node's blocks (this node's pods inside them) and the l2
    // endpoints.
    let routes: Vec<String> = host_routes(c.last())
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        routes,
        [
            "10.1.1.0/24",
            "10.1.2.0/24",
            "10.2.1.0/24",
            "10.3.2.0/24",
            "10.4.1.5/32",
            "10.96.0.10/32",
            "fd01:0:0:1::/64",
            "fd01:0:0:2::/64",
            "fd02:0:0:1::/64",
            "fd03:0:0:2::/64",
            "fd04:0:0:1::5/128"
        ]
    );
    // Without the host interface: no port, no host network, no routes to the node.
    world.host = None;
    step(&mut c, &mut w, &world, &[Change::All]);
    assert_eq!(v.port(PortId::HOST), None);
    assert_eq!(v.info(host), None);
    assert_eq!(v.hop(1, node4), None);
    assert!(host_routes(c.last()).is_empty());
}

/// Control's learning records (ADR 0019) in an l2 network's tables: a learned MAC behind the
/// endpoint where it was announced (local port or that node's DT2U SID) with its sequence
/// number and addresses; a MAC two endpoints share only at its record's active location,
/// however the endpoints are ordered; a learned address an endpoint holds is left out and
/// noted; a change of a record recompiles the network, and the learning settings reach the
/// network's record.
#[test]
fn learned_macs_and_identities_are_placed_by_their_records() {
    let mut world = two_nodes();
    let mut l2 = network(L2);
    l2.l2 = L2Config {
        learning: std::num::NonZeroU32::new(120),
        bum_pps: 50,
        bum_burst: 10,
    };
    world.networks.insert(net_name(L2), l2);
    add_pod(&mut world, L2, 1, 7);
    add_pod(&mut world, L2, 2, 9);
    let vm = MacAddr([0x52, 0x54, 0, 0, 0, 1]);
    let vm4: IpAddr = "10.4.0.200".parse().unwrap();
    let ep = |k: u32, i: u32| u64::from(L2 * 1_000_000 + k * 1000 + i);
    world.learned.insert(
        (net_name(L2), vm),
        LearnedModel {
            node: name(2),
            endpoint_id: ep(2, 9),
            addresses: vec![vm4, IpAddr::V4(addr4(L2, 1, 7))],
            sequence: 4,
            identity: false,
        },
    );
    // A shared identity: pod 1/20 (older) and pod 2/21 (newer) hold the same MAC; the record
    // says the newer one is active (the VM announced itself there).
    let shared = MacAddr([0x52, 0x54, 0, 0, 0, 2]);
    for (k, i) in [(1, 20), (2, 21)] {
        add_pod(&mut world, L2, k, i);
        let e = world.endpoints.get_mut(&key(L2, k, i)).unwrap();
        e.mac = shared;
        e.addresses = vec!["10.4.0.100".parse().unwrap()];
    }
    world.learned.insert(
        (net_name(L2), shared),
        LearnedModel {
            node: name(2),
            endpoint_id: ep(2, 21),
            addresses: vec![],
            sequence: 2,
            identity: true,
        },
    );
    let learned = |target, seq| FdbEntry {
        target,
        seq,
        learned: true,
    };
    let behind2 = FdbTarget::Remote {
        node: NodeId(2),
        sid: l2_sid(2, SidFunction::EndDt2u),
    };
    let out = desired(&world, &name(1), cfg()).unwrap();
    let t = &out.tables.networks[&NetworkId(L2)];
    assert_eq!(t.info.l2.learning.map(|a| a.get()), Some(120));
    assert_eq!((t.info.l2.bum_pps, t.info.l2.bum_burst), (50, 10));
    assert_eq!(t.fdb[&vm], learned(behind2, 4));
    assert_eq!(t.neighbors[&vm4], vm);
    // The learned address held by an endpoint stays the endpoint's, and is noted.
    assert_eq!(t.neighbors[&IpAddr::V4(addr4(L2, 1, 7))], pod_mac(L2, 1, 7));
    assert!(
        out.notes.iter().any(|n| n.kind == NoteKind::Conflict
            && n.message.contains("learned with MAC 52:54:00:00:00:01")),
        "{:#?}",
        out.notes
    );
    // The identity at its active location (node 2), not at the older local endpoint; both
    // endpoints' ports still get broadcast (the local one is a flood member).
    assert_eq!(t.fdb[&shared], learned(behind2, 2));
    assert_eq!(
        t.neighbors[&"10.4.0.100".parse::<IpAddr>().unwrap()],
        shared
    );
    assert!(t.flood.contains(&FloodTarget::Port(port(L2, 20))));
    assert!(
        !out.notes
            .iter()
            .any(|n| n.message.contains("already another endpoint's")),
        "an identity is no conflict: {:#?}",
        out.notes
    );
    // On node 2 the identity and the learned MAC are local ports.
    let out2 = desired(&world, &name(2), cfg()).unwrap();
    let t2 = &out2.tables.networks[&NetworkId(L2)];
    assert_eq!(t2.fdb[&shared], learned(FdbTarget::Port(port(L2, 21)), 2));
    assert_eq!(t2.fdb[&vm], learned(FdbTarget::Port(port(L2, 9)), 4));
    // The VM moves to node 1 (sequence 5): the incremental compiler recompiles the network.
    let mut c = Compiler::new(&name(1), cfg());
    c.plan(&world, &[Change::All]).unwrap();
    let before = world.clone();
    world.learned.get_mut(&(net_name(L2), vm)).unwrap().node = name(1);
    world
        .learned
        .get_mut(&(net_name(L2), vm))
        .unwrap()
        .endpoint_id = ep(1, 7);
    world.learned.get_mut(&(net_name(L2), vm)).unwrap().sequence = 5;
    let changes = lace_control::daemon::core::world_changes(&before, &world);
    assert_eq!(changes, [Change::Network(net_name(L2))]);
    let out = c.plan(&world, &changes).unwrap();
    assert_eq!(
        out.tables.networks[&NetworkId(L2)].fdb[&vm],
        learned(FdbTarget::Port(port(L2, 7)), 5)
    );
    assert_eq!(out, desired(&world, &name(1), cfg()).unwrap());
    // Without a record, of two endpoints sharing a MAC the older one holds it.
    world.learned.remove(&(net_name(L2), shared));
    let out = desired(&world, &name(1), cfg()).unwrap();
    assert_eq!(
        out.tables.networks[&NetworkId(L2)].fdb[&shared],
        FdbEntry {
            target: FdbTarget::Port(port(L2, 20)),
            seq: 0,
            learned: false
        }
    );
}
