//! The policy and service tables (`lace_shared::policy`): what control writes and the
//! forwarder's connection tracker reads, including across a writer restart.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use lace_shared::policy::*;
use lace_shared::tables::{ReaderHandle, TableReader, TableWriter, TablesConfig};
use lace_shared::types::*;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = PathBuf::from(format!(
            "/dev/shm/lace-policy-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn cfg(&self) -> TablesConfig {
        TablesConfig {
            dir: self.0.clone(),
            name: "n".into(),
            size: 16 << 20,
            reader_slots: 4,
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const NET: NetworkId = NetworkId(3);
const OTHER: NetworkId = NetworkId(4);

fn info() -> NetworkInfo {
    NetworkInfo {
        kind: NetworkKind::L3,
        anonymous: false,
        gateway_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        gateway4: Some(Ipv4Addr::new(10, 0, 0, 1)),
        gateway6: None,
        mtu: 1450,
        stateful: true,
        l2: Default::default(),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn tcp(lo: u16, hi: u16) -> PortRange {
    PortRange {
        proto: PROTO_TCP,
        lo,
        hi,
    }
}

fn gen(h: &mut ReaderHandle, net: NetworkId) -> u32 {
    let g = h.snapshot().network(net).unwrap().policy_gen();
    h.quiescent();
    g
}

#[test]
fn peer_classes_are_longest_prefix_matches_with_except_holes() {
    let dir = TempDir::new("peers");
    let mut w = TableWriter::create(&dir.cfg()).unwrap();
    w.set_network(NET, &info()).unwrap();
    // ipBlock 10.0.0.0/8 except 10.1.0.0/16 → class 1 with a hole of class 2 (the except,
    // which another peer's pod 10.1.2.3 lies in: class 3).
    w.set_peer_prefix(NET, ip("10.0.0.0"), 8, PeerClass(1))
        .unwrap();
    w.set_peer_prefix(NET, ip("10.1.0.0"), 16, PeerClass(2))
        .unwrap();
    w.set_peer_prefix(NET, ip("10.1.2.3"), 32, PeerClass(3))
        .unwrap();
    w.set_peer_prefix(NET, ip("fd00::"), 64, PeerClass(4))
        .unwrap();
    assert!(w
        .set_peer_prefix(NET, ip("10.9.9.9"), 32, PeerClass(0))
        .is_err());
    w.publish().unwrap();
    let r = TableReader::attach(&dir.cfg()).unwrap();
    let mut h = r.register().unwrap();
    {
        let s = h.snapshot();
        let n = s.network(NET).unwrap();
        assert!(n.stateful());
        assert_eq!(n.peer_class(ip("10.200.0.1")), PeerClass(1));
        assert_eq!(n.peer_class(ip("10.1.0.9")), PeerClass(2));
        assert_eq!(n.peer_class(ip("10.1.2.3")), PeerClass(3));
        assert_eq!(n.peer_class(ip("192.0.2.1")), PeerClass::WORLD);
        assert_eq!(n.peer_class(ip("fd00::5")), PeerClass(4));
        assert_eq!(n.peer_class(ip("fd01::5")), PeerClass::WORLD);
    }
    h.quiescent();
    let g0 = gen(&mut h, NET);
    assert!(w.remove_peer_prefix(NET, ip("10.1.2.3"), 32).unwrap());
    assert!(!w.remove_peer_prefix(NET, ip("10.1.2.3"), 32).unwrap());
    w.publish().unwrap();
    assert_ne!(gen(&mut h, NET), g0, "a class change bumps the generation");
    assert_eq!(
        h.snapshot()
            .network(NET)
            .unwrap()
            .peer_class(ip("10.1.2.3")),
        PeerClass(2)
    );
    h.quiescent();
    let mut listed = w.peer_prefixes(NET);
    listed.sort();
    assert_eq!(
        listed,
        vec![
            (ip("10.0.0.0"), 8, PeerClass(1)),
            (ip("10.1.0.0"), 16, PeerClass(2)),
            (ip("fd00::"), 64, PeerClass(4)),
        ]
    );
}

#[test]
fn peer_prefixes_in_one_batch_equal_one_by_one() {
    let (da, db) = (TempDir::new("batch-a"), TempDir::new("batch-b"));
    let mut a = TableWriter::create(&da.cfg()).unwrap();
    let mut b = TableWriter::create(&db.cfg()).unwrap();
    for w in [&mut a, &mut b] {
        w.set_network(NET, &info()).unwrap();
        w.set_peer_prefix(NET, ip("10.0.0.0"), 8, PeerClass(1))
            .unwrap();
        w.set_peer_prefix(NET, ip("10.3.0.1"), 32, PeerClass(5))
            .unwrap();
        w.publish().unwrap();
    }
    // Hosts under one block (one subtree), an except hole, an IPv6 host, a removal, and a
    // removal of what is not there.
    let mut changes: Vec<(IpAddr, u8, Option<PeerClass>)> = (0..300u32)
        .map(|i| {
            (
                IpAddr::V4(Ipv4Addr::from(0x0a02_0000 + i)),
                32,
                Some(PeerClass(2 + i % 3)),
            )
        })
        .collect();
    changes.push((ip("10.2.0.0"), 24, Some(PeerClass(7))));
    changes.push((ip("fd00::7"), 128, Some(PeerClass(4))));
    changes.push((ip("10.3.0.1"), 32, None));
    changes.push((ip("10.9.0.1"), 32, None));
    for &(p, l, c) in &changes {
        match c {
            Some(c) => a.set_peer_prefix(NET, p, l, c).unwrap(),
            None => {
                a.remove_peer_prefix(NET, p, l).unwrap();
            }
        }
    }
    let g = b.staged_view().network(NET).unwrap().policy_gen();
    b.apply_peer_prefixes(NET, &changes).unwrap();
    assert_eq!(
        b.staged_view().network(NET).unwrap().policy_gen(),
        g.wrapping_add(1),
        "one batch, one generation"
    );
    let (mut pa, mut pb) = (a.peer_prefixes(NET), b.peer_prefixes(NET));
    pa.sort();
    pb.sort();
    assert_eq!(pa, pb);
    assert_eq!(pa.len(), 303);
    for probe in [
        "10.2.0.5",
        "10.2.1.5",
        "10.3.0.1",
        "fd00::7",
        "fd00::8",
        "10.200.0.1",
    ] {
        assert_eq!(
            a.staged_view().network(NET).unwrap().peer_class(ip(probe)),
            b.staged_view().network(NET).unwrap().peer_class(ip(probe)),
            "{probe}"
        );
    }
    // Class 0 is refused and nothing of the batch stays.
    let before = b.peer_prefixes(NET);
    assert!(b
        .apply_peer_prefixes(
            NET,
            &[
                (ip("10.4.0.1"), 32, Some(PeerClass(3))),
                (ip("10.4.0.2"), 32, Some(PeerClass(0)))
            ]
        )
        .is_err());
    assert_eq!(b.peer_prefixes(NET).len(), before.len());
}

#[test]
fn decisions_allow_what_they_say_and_nothing_else() {
    let dir = TempDir::new("decisions");
    let mut w = TableWriter::create(&dir.cfg()).unwrap();
    w.set_network(NET, &info()).unwrap();
    w.set_network(OTHER, &info()).unwrap();
    let (open, locked) = (PolicySetId(1), PolicySetId(2));
    w.set_policy_set(
        open,
        &PolicySet {
            network: NET,
            ingress_isolated: false,
            egress_isolated: false,
        },
    )
    .unwrap();
    w.set_policy_set(
        locked,
        &PolicySet {
            network: NET,
            ingress_isolated: true,
            egress_isolated: true,
        },
    )
    .unwrap();
    assert!(w
        .set_policy_set(
            PolicySetId(0),
            &PolicySet {
                network: NET,
                ingress_isolated: true,
                egress_isolated: false
            }
        )
        .is_err());
    let web = Ports::Ranges(vec![tcp(443, 443), tcp(80, 80)]);
    w.set_decision(locked, PolicyDir::Ingress, PeerClass(1), &web)
        .unwrap();
    w.set_decision(locked, PolicyDir::Ingress, PeerClass(2), &Ports::All)
        .unwrap();
    w.set_decision(
        locked,
        PolicyDir::Egress,
        PeerClass(0),
        &Ports::Ranges(vec![PortRange {
            proto: PROTO_UDP,
            lo: 53,
            hi: 53,
        }]),
    )
    .unwrap();
    assert!(w
        .set_decision(
            locked,
            PolicyDir::Egress,
            PeerClass(1),
            &Ports::Ranges(vec![])
        )
        .is_err());
    assert!(w
        .set_decision(PolicySetId(9), PolicyDir::Egress, PeerClass(1), &Ports::All)
        .is_err());
    w.publish().unwrap();
    let r = TableReader::attach(&dir.cfg()).unwrap();
    let mut h = r.register().unwrap();
    {
        let s = h.snapshot();
        let a =
            |set, dir, class, proto, port| s.policy_allows(set, dir, PeerClass(class), proto, port);
        // Not isolated: everything.
        assert!(a(open, PolicyDir::Ingress, 7, PROTO_TCP, 1));
        assert!(a(open, PolicyDir::Egress, 0, 1, 0));
        // Isolated: only the decisions.
        assert!(a(locked, PolicyDir::Ingress, 1, PROTO_TCP, 443));
        assert!(a(locked, PolicyDir::Ingress, 1, PROTO_TCP, 80));
        assert!(!a(locked, PolicyDir::Ingress, 1, PROTO_TCP, 81));
        assert!(!a(locked, PolicyDir::Ingress, 1, PROTO_UDP, 443));
        assert!(
            !a(locked, PolicyDir::Ingress, 1, 1, 0),
            "ICMP is not a port rule's"
        );
        assert!(
            a(locked, PolicyDir::Ingress, 2, 1, 0),
            "a rule without ports allows ICMP"
        );
        assert!(
            !a(locked, PolicyDir::Ingress, 3, PROTO_TCP, 80),
            "no decision: deny"
        );
        assert!(a(locked, PolicyDir::Egress, 0, PROTO_UDP, 53));
        assert!(!a(locked, PolicyDir::Egress, 1, PROTO_UDP, 53));
        // A set that does not exist allows nothing.
        assert!(!a(PolicySetId(9), PolicyDir::Ingress, 1, PROTO_TCP, 80));
        assert_eq!(
            s.decision(locked, PolicyDir::Ingress, PeerClass(1)),
            Some(Ports::Ranges(vec![tcp(80, 80), tcp(443, 443)]))
        );
        assert_eq!(
            s.decision(locked, PolicyDir::Ingress, PeerClass(2)),
            Some(Ports::All)
        );
        assert_eq!(s.decision(locked, PolicyDir::Egress, PeerClass(1)), None);
    }
    h.quiescent();

    // Narrowing bumps the generation of the set's network only.
    let (g, g_other) = (gen(&mut h, NET), gen(&mut h, OTHER));
    assert!(w
        .remove_decision(locked, PolicyDir::Ingress, PeerClass(2))
        .unwrap());
    w.publish().unwrap();
    assert_ne!(gen(&mut h, NET), g);
    assert_eq!(gen(&mut h, OTHER), g_other);
    assert!(!h
        .snapshot()
        .policy_allows(locked, PolicyDir::Ingress, PeerClass(2), 1, 0));
    h.quiescent();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// A decision of any ranges over TCP, UDP and SCTP, one record or a long chain, allows
    /// exactly the ports its normalized ranges hold: every port of every protocol checked
    /// against `Ports::allows`. Other decisions made and removed first leave holes of
    /// `holes` records among the free ones, so the chain is consecutive (binary-searched)
    /// where a run is free, and at the end of the array otherwise.
    #[test]
    fn a_decision_allows_exactly_its_ranges(
        raw in proptest::collection::vec((0u8..3, 0u16..=65535, 0u16..600), 1..120),
        holes in proptest::collection::vec(1usize..30, 0..4),
    ) {
        let protos = [PROTO_TCP, PROTO_UDP, PROTO_SCTP];
        let ports = Ports::Ranges(
            raw.iter()
                .map(|&(p, lo, len)| PortRange {
                    proto: protos[usize::from(p)],
                    lo,
                    hi: lo.saturating_add(len),
                })
                .collect(),
        )
        .normalized();
        let dir = TempDir::new("portset-prop");
        let cfg = dir.cfg();
        let mut w = TableWriter::create(&cfg).unwrap();
        w.set_network(NET, &info()).unwrap();
        let set = PolicySetId(1);
        w.set_policy_set(
            set,
            &PolicySet {
                network: NET,
                ingress_isolated: true,
                egress_isolated: false,
            },
        )
        .unwrap();
        // Chains of `holes[k] * 9` ranges, every other one removed again.
        for (k, &n) in holes.iter().enumerate() {
            let filler: Vec<PortRange> =
                (0..n * 9).map(|i| tcp(i as u16 * 3, i as u16 * 3)).collect();
            let class = PeerClass(10 + k as u32);
            w.set_decision(set, PolicyDir::Egress, class, &Ports::Ranges(filler))
                .unwrap();
            if k % 2 == 0 {
                w.remove_decision(set, PolicyDir::Egress, class).unwrap();
            }
        }
        w.set_decision(set, PolicyDir::Ingress, PeerClass(1), &ports)
            .unwrap();
        w.publish().unwrap();
        let r = TableReader::attach(&cfg).unwrap();
        let mut h = r.register().unwrap();
        let s = h.snapshot();
        for proto in protos.into_iter().chain([1]) {
            for port in 0..=u16::MAX {
                let got = s.policy_allows(set, PolicyDir::Ingress, PeerClass(1), proto, port);
                proptest::prop_assert_eq!(got, ports.allows(proto, port), "{}/{}", port, proto);
            }
        }
    }
}

#[test]
fn port_sets_are_shared_chained_and_released_across_a_restart() {
    let dir = TempDir::new("portsets");
    let cfg = dir.cfg();
    let mut w = TableWriter::create(&cfg).unwrap();
    w.set_network(NET, &info()).unwrap();
    let set = PolicySetId(5);
    w.set_policy_set(
        set,
        &PolicySet {
            network: NET,
            ingress_isolated: true,
            egress_isolated: false,
        },
    )
    .unwrap();
    // 30 disjoint ranges: more than one record holds, so the set is a chain.
    let many: Vec<PortRange> = (0..30u16)
        .map(|i| tcp(1000 + i * 10, 1000 + i * 10 + 2))
        .collect();
    for class in 1..=3 {
        w.set_decision(
            set,
            PolicyDir::Ingress,
            PeerClass(class),
            &Ports::Ranges(many.clone()),
        )
        .unwrap();
    }
    w.publish().unwrap();
    let r = TableReader::attach(&cfg).unwrap();
    let mut h = r.register().unwrap();
    let check = |h: &mut ReaderHandle, class: u32, expect: bool| {
        let s = h.snapshot();
        for p in [1000u16, 1002, 1290, 1292] {
            assert_eq!(
                s.policy_allows(set, PolicyDir::Ingress, PeerClass(class), PROTO_TCP, p),
                expect,
                "class {class} port {p}"
            );
        }
        assert!(!s.policy_allows(set, PolicyDir::Ingress, PeerClass(class), PROTO_TCP, 1003));
        assert!(!s.policy_allows(set, PolicyDir::Ingress, PeerClass(class), PROTO_TCP, 1293));
        h.quiescent();
    };
    check(&mut h, 1, true);
    let live_one_chain = w.stats().live_bytes;

    // Restart the writer: sharing survives (a fourth user adds no records, removing users
    // keeps the chain until the last one goes).
    drop(w);
    let mut w = TableWriter::open(&cfg).unwrap();
    w.set_decision(
        set,
        PolicyDir::Ingress,
        PeerClass(4),
        &Ports::Ranges(many.clone()),
    )
    .unwrap();
    w.remove_decision(set, PolicyDir::Ingress, PeerClass(1))
        .unwrap();
    w.remove_decision(set, PolicyDir::Ingress, PeerClass(2))
        .unwrap();
    w.publish().unwrap();
    check(&mut h, 1, false);
    check(&mut h, 3, true);
    check(&mut h, 4, true);
    // Removing the set removes its decisions and frees the chain.
    assert!(w.remove_policy_set(set).unwrap());
    assert!(!w.remove_policy_set(set).unwrap());
    w.publish().unwrap();
    {
        let s = h.snapshot();
        assert!(s.policy_set(set).is_none());
        assert_eq!(s.decision(set, PolicyDir::Ingress, PeerClass(3)), None);
    }
    h.quiescent();
    w.reclaim().unwrap();
    assert!(
        w.stats().live_bytes < live_one_chain,
        "{} vs {live_one_chain}",
        w.stats().live_bytes
    );
    // A new chain reuses the freed records.
    w.set_policy_set(
        set,
        &PolicySet {
            network: NET,
            ingress_isolated: true,
            egress_isolated: false,
        },
    )
    .unwrap();
    w.set_decision(set, PolicyDir::Ingress, PeerClass(1), &Ports::Ranges(many))
        .unwrap();
    w.publish().unwrap();
    check(&mut h, 1, true);
}

#[test]
fn services_pick_backends_by_their_maglev_table() {
    let dir = TempDir::new("services");
    let cfg = dir.cfg();
    let mut w = TableWriter::create(&cfg).unwrap();
    w.set_network(NET, &info()).unwrap();
    let key = ServiceKey::new(NET, ip("10.96.0.10"), PROTO_TCP, 80);
    let backends: Vec<Backend> = (1..=3)
        .map(|i| Backend {
            addr: IpAddr::V4(Ipv4Addr::new(10, 40, 1, i)),
            port: 8080,
            state: BackendState {
                ready: true,
                serving: true,
                terminating: false,
            },
        })
        .collect();
    let names: Vec<String> = backends
        .iter()
        .map(|b| format!("{}:{}", b.addr, b.port))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let table = maglev_table(&refs, maglev_size(refs.len()));
    let svc = ServiceInfo {
        affinity_timeout_s: Some(10800),
        backends: backends.clone(),
        table: table.clone(),
        node_local: false,
    };
    w.set_service(key, &svc).unwrap();
    let bad = ServiceInfo {
        table: vec![7],
        ..svc.clone()
    };
    assert!(
        w.set_service(key, &bad).is_err(),
        "a table naming a missing backend"
    );
    w.add_route(NET, ip("10.96.0.10"), 32, NextHop::Service)
        .unwrap();
    w.publish().unwrap();
    let r = TableReader::attach(&cfg).unwrap();
    let mut h = r.register().unwrap();
    let first_index;
    {
        let s = h.snapshot();
        let n = s.network(NET).unwrap();
        assert_eq!(
            s.nexthop(n.route4_index(Ipv4Addr::new(10, 96, 0, 10))),
            Some(NextHop::Service)
        );
        let v = s.service(&key).unwrap();
        first_index = v.index();
        assert_eq!(v.affinity_timeout_s(), Some(10800));
        assert!(!v.node_local());
        assert_eq!(v.table_len() as usize, table.len());
        assert_eq!(v.backends().collect::<Vec<_>>(), backends);
        for hash in [0u64, 1, 77, 12345, u64::MAX] {
            let (b, rec) = v.pick(hash).unwrap();
            assert_eq!(b, table[(hash % table.len() as u64) as usize]);
            assert_eq!(rec.ip(), backends[b as usize].addr);
            assert_eq!(rec.port, 8080);
        }
        assert!(s
            .service(&ServiceKey::new(NET, ip("10.96.0.10"), PROTO_UDP, 80))
            .is_none());
        assert!(s
            .service(&ServiceKey::new(OTHER, ip("10.96.0.10"), PROTO_TCP, 80))
            .is_none());
    }
    h.quiescent();
    // No backend takes connections: the Service stays, with an empty table (reject; a
    // node-local one drops).
    let empty = ServiceInfo {
        affinity_timeout_s: None,
        backends: vec![],
        table: vec![],
        node_local: true,
    };
    drop(w);
    let mut w = TableWriter::open(&cfg).unwrap();
    w.set_service(key, &empty).unwrap();
    w.publish().unwrap();
    {
        let s = h.snapshot();
        let v = s.service(&key).unwrap();
        assert_eq!(
            v.index(),
            first_index,
            "the restarted writer kept the index"
        );
        assert_eq!(v.affinity_timeout_s(), None);
        assert!(v.pick(5).is_none());
        assert!(v.node_local());
    }
    h.quiescent();
    assert_eq!(w.service_keys(), vec![key]);
    assert!(w.remove_service(key).unwrap());
    assert!(!w.remove_service(key).unwrap());
    w.publish().unwrap();
    assert!(h.snapshot().service(&key).is_none());
    h.quiescent();
}

#[test]
fn reply_only_routes_are_their_own_next_hops_and_ports_carry_their_set() {
    let dir = TempDir::new("flags");
    let cfg = dir.cfg();
    let mut w = TableWriter::create(&cfg).unwrap();
    w.set_network(NET, &info()).unwrap();
    let hop = NextHop::Remote {
        node: NodeId(2),
        sid: Sid(Ipv6Addr::new(0xfc00, 0, 2, 0, 0, 0, 0, 1)),
    };
    w.add_route(NET, ip("10.1.0.0"), 24, hop).unwrap();
    w.add_route_flags(NET, ip("10.2.0.0"), 24, hop, RouteFlags::REPLY_ONLY)
        .unwrap();
    let port = PortInfo {
        kind: PortKind::Pod,
        network: NET,
        mac: MacAddr([2, 0, 0, 0, 0, 9]),
        ipv4: Some(Ipv4Addr::new(10, 0, 0, 9)),
        ipv6: None,
        endpoint: 9,
        iface: IfName::new("pod9").unwrap(),
        policy: PolicySetId(3),
        transit: false,
    };
    w.set_port(PortId(9), &port).unwrap();
    w.publish().unwrap();
    let r = TableReader::attach(&cfg).unwrap();
    let mut h = r.register().unwrap();
    let (a, b) = {
        let s = h.snapshot();
        let n = s.network(NET).unwrap();
        let a = n.route4_index(Ipv4Addr::new(10, 1, 0, 1));
        let b = n.route4_index(Ipv4Addr::new(10, 2, 0, 1));
        assert_ne!(a, b);
        assert_eq!(s.nexthop(a), s.nexthop(b));
        assert!(!s.nexthop_flags(a).reply_only());
        assert!(s.nexthop_flags(b).reply_only());
        assert!(
            s.encap(b).is_some(),
            "a reply-only remote hop has its encapsulation"
        );
        assert_eq!(s.port(PortId(9)).unwrap().policy, PolicySetId(3));
        assert_eq!(s.port_rec(PortId(9)).unwrap().policy(), PolicySetId(3));
        (a, b)
    };
    h.quiescent();
    // A restarted writer keeps both next hops apart.
    drop(w);
    let mut w = TableWriter::open(&cfg).unwrap();
    w.add_route_flags(NET, ip("10.3.0.0"), 24, hop, RouteFlags::REPLY_ONLY)
        .unwrap();
    w.add_route(NET, ip("10.4.0.0"), 24, hop).unwrap();
    // Changing the port's set bumps the network's generation; rewriting it unchanged does not.
    let g = gen(&mut h, NET);
    w.set_port(PortId(9), &port).unwrap();
    w.publish().unwrap();
    assert_eq!(gen(&mut h, NET), g);
    w.set_port(
        PortId(9),
        &PortInfo {
            policy: PolicySetId(4),
            transit: false,
            ..port
        },
    )
    .unwrap();
    w.publish().unwrap();
    assert_ne!(gen(&mut h, NET), g);
    let s = h.snapshot();
    let n = s.network(NET).unwrap();
    assert_eq!(n.route4_index(Ipv4Addr::new(10, 3, 0, 1)), b);
    assert_eq!(n.route4_index(Ipv4Addr::new(10, 4, 0, 1)), a);
}
