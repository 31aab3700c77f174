//! The table set in one process: full regions, reader states and reclamation, bulk lookups.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use lace_prereq::{require, root};
use lace_shared::fib::Fib;
use lace_shared::tables::{TableReader, TableWriter, TablesConfig};
use lace_shared::types::*;
use lace_shared::Error;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = PathBuf::from(format!(
            "/dev/shm/lace-tables-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn cfg(&self, size: u64) -> TablesConfig {
        TablesConfig {
            dir: self.0.clone(),
            name: "n".into(),
            size,
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

fn info() -> NetworkInfo {
    NetworkInfo {
        kind: NetworkKind::L3,
        anonymous: false,
        gateway_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        gateway4: Some(Ipv4Addr::new(10, 0, 0, 1)),
        gateway6: None,
        mtu: 1450,
        stateful: false,
        l2: L2Settings::default(),
    }
}

fn remote(n: u32) -> NextHop {
    NextHop::Remote {
        node: NodeId(n),
        sid: Sid(Ipv6Addr::new(0xfc00, 0, n as u16, 0, 0, 0, 0, 1)),
    }
}

#[test]
fn full_region_is_a_clear_error_and_the_published_tables_survive() {
    let dir = TempDir::new("full");
    let mut w = TableWriter::create(&dir.cfg(1 << 20)).unwrap();
    w.set_network(NET, &info()).unwrap();
    for i in 0..100u32 {
        let p = Ipv4Addr::from(0x0a00_0000 | (i << 8));
        w.add_route(NET, IpAddr::V4(p), 24, remote(i + 1)).unwrap();
    }
    w.publish().unwrap();
    let before = w.stats();
    let r = TableReader::attach(&dir.cfg(1 << 20)).unwrap();
    let mut h = r.register().unwrap();

    // Fill the 1 MiB region with scattered host routes until it refuses.
    let mut err = None;
    for i in 0..1_000_000u32 {
        let p = Ipv4Addr::from(i.wrapping_mul(2_654_435_761));
        if let Err(e) = w.add_route(NET, IpAddr::V4(p), 32, remote(7)) {
            err = Some(e);
            break;
        }
    }
    let err = err.expect("a 1 MiB region must fill up");
    assert!(matches!(err, Error::RegionFull { .. }), "{err}");
    assert!(err.to_string().contains("larger region"), "{err}");

    // The batch was abandoned: nothing leaked, readers see the last publication unchanged.
    let after = w.stats();
    assert_eq!(
        after.live_bytes, before.live_bytes,
        "staged blocks were freed"
    );
    {
        let s = h.snapshot();
        let n = s.network(NET).unwrap();
        for i in 0..100u32 {
            let ip = Ipv4Addr::from(0x0a00_0000 | (i << 8) | 9);
            assert_eq!(s.nexthop(n.route4_index(ip)), Some(remote(i + 1)));
        }
    }
    h.quiescent();
    // The writer is still usable and consistent with what is published.
    assert_eq!(
        w.staged_view()
            .network(NET)
            .unwrap()
            .route4_index(Ipv4Addr::new(10, 0, 5, 5)),
        h.snapshot()
            .network(NET)
            .unwrap()
            .route4_index(Ipv4Addr::new(10, 0, 5, 5))
    );
    w.remove_route(NET, IpAddr::V4(Ipv4Addr::new(10, 0, 5, 0)), 24)
        .unwrap();
    w.publish().unwrap();
    let s = h.snapshot();
    assert_eq!(
        s.network(NET)
            .unwrap()
            .route4_index(Ipv4Addr::new(10, 0, 5, 5)),
        0
    );
}

#[test]
fn online_readers_hold_memory_offline_and_quiescent_ones_do_not() {
    let dir = TempDir::new("qsbr");
    let cfg = dir.cfg(64 << 20);
    let mut w = TableWriter::create(&cfg).unwrap();
    w.set_network(NET, &info()).unwrap();
    w.publish().unwrap();
    let r = TableReader::attach(&cfg).unwrap();
    let mut a = r.register().unwrap();
    let mut b = r.register().unwrap();
    assert_ne!(a.slot(), b.slot());
    let _ = a.snapshot();
    let _ = b.snapshot();
    a.quiescent();
    b.quiescent();

    // A reader that has not passed a quiescent point since the change holds the old blocks.
    w.add_route(NET, "10.1.0.0".parse().unwrap(), 16, remote(1))
        .unwrap();
    w.publish().unwrap();
    w.reclaim().unwrap();
    assert!(
        w.stats().retired_bytes > 0,
        "old root must wait for readers"
    );

    // One quiescent, one offline: nothing is held any more.
    let _ = a.snapshot();
    a.quiescent();
    b.offline();
    w.reclaim().unwrap();
    assert_eq!(w.stats().retired_bytes, 0);

    // Offline readers come back online with their next snapshot and see the latest tables.
    w.add_route(NET, "10.2.0.0".parse().unwrap(), 16, remote(2))
        .unwrap();
    w.publish().unwrap();
    let s = b.snapshot();
    assert_eq!(
        s.nexthop(
            s.network(NET)
                .unwrap()
                .route4_index("10.2.3.4".parse().unwrap())
        ),
        Some(remote(2))
    );
    assert_eq!(s.generation(), w.generation());
}

#[test]
fn a_snapshot_id_names_the_tables_it_shows() {
    let dir = TempDir::new("snapid");
    let cfg = dir.cfg(16 << 20);
    let mut w = TableWriter::create(&cfg).unwrap();
    w.set_network(NET, &info()).unwrap();
    w.publish().unwrap();
    let r = TableReader::attach(&cfg).unwrap();
    let mut a = r.register().unwrap();
    let mut b = r.register().unwrap();
    let first = a.snapshot().id().unwrap();
    a.quiescent();
    // The same tables through another handle of the same reader: the same id.
    assert_eq!(b.snapshot().id(), Some(first));
    b.quiescent();
    assert_eq!(first.generation, w.generation());
    // A publication: another id, from then on.
    w.add_route(NET, "10.1.0.0".parse().unwrap(), 16, remote(1))
        .unwrap();
    w.publish().unwrap();
    let second = a.snapshot().id().unwrap();
    a.quiescent();
    assert_ne!(second, first);
    assert_eq!(second.generation, first.generation + 1);
    assert_eq!(a.snapshot().id(), Some(second));
    a.quiescent();
    // Another mapping of the same tables: its snapshots are told apart.
    let again = TableReader::attach(&cfg).unwrap();
    let mut c = again.register().unwrap();
    let other = c.snapshot().id().unwrap();
    c.quiescent();
    assert_eq!(other.generation, second.generation);
    assert_ne!(other.reader, second.reader);
    // The writer's staged view changes without a publication: no id.
    assert_eq!(w.staged_view().id(), None);
}

#[test]
fn every_table_round_trips_and_bulk_lookups_agree() {
    let dir = TempDir::new("all");
    let cfg = dir.cfg(64 << 20);
    let mut w = TableWriter::create(&cfg).unwrap();
    w.set_network(NET, &info()).unwrap();
    let l2 = NetworkId(4);
    w.set_network(
        l2,
        &NetworkInfo {
            kind: NetworkKind::L2,
            gateway6: Some("fd00::1".parse().unwrap()),
            ..info()
        },
    )
    .unwrap();
    let port = PortInfo {
        kind: PortKind::Pod,
        network: NET,
        mac: MacAddr([2, 0, 0, 0, 0, 9]),
        ipv4: Some(Ipv4Addr::new(10, 0, 0, 9)),
        ipv6: Some("fd00::9".parse().unwrap()),
        endpoint: 77,
        iface: Default::default(),
        policy: lace_shared::policy::PolicySetId::NONE,
        transit: false,
    };
    w.set_port(PortId(5), &port).unwrap();
    let node = NodeInfo {
        locator: "fc00:0:2::".parse().unwrap(),
        locator_len: 48,
        underlay: "2001:db8::2".parse().unwrap(),
    };
    w.set_node(NodeId(2), &node).unwrap();
    let sid = Sid("fc00:0:1:e000::3".parse().unwrap());
    w.set_local_sid(sid, SidBehavior::EndDt46(NET)).unwrap();
    w.set_underlay_neighbor("2001:db8::2".parse().unwrap(), MacAddr([2, 9, 9, 9, 9, 9]))
        .unwrap();
    w.set_neighbor(
        l2,
        "fd00::7".parse().unwrap(),
        MacAddr([2, 7, 7, 7, 7, 7]),
        true,
    )
    .unwrap();
    let mac = MacAddr([2, 7, 7, 7, 7, 7]);
    let dt2u = Sid("fc00:0:2:e020::9".parse().unwrap());
    let dt2m = Sid("fc00:0:2:e02f::9".parse().unwrap());
    let dt2m3 = Sid("fc00:0:3:e02f::9".parse().unwrap());
    let at_node = FdbEntry {
        target: FdbTarget::Remote {
            node: NodeId(2),
            sid: dt2u,
        },
        seq: 10,
        learned: true,
    };
    assert!(w.set_fdb(l2, mac, at_node).unwrap());
    // MAC mobility: an older learned location does not overwrite a newer one.
    let stale = FdbEntry {
        target: FdbTarget::Port(PortId(5)),
        seq: 9,
        learned: true,
    };
    assert!(!w.set_fdb(l2, mac, stale).unwrap());
    let members = [
        FloodTarget::Port(PortId(5)),
        FloodTarget::Remote {
            node: NodeId(2),
            sid: dt2m,
        },
        FloodTarget::Remote {
            node: NodeId(3),
            sid: dt2m3,
        },
    ];
    w.set_flood(l2, &members).unwrap();
    assert!(
        w.set_flood(l2, &[FloodTarget::Port(PortId::UPLINK)])
            .is_err(),
        "the uplink is not a flood member"
    );
    for i in 0..500u32 {
        w.add_route(
            NET,
            IpAddr::V4(Ipv4Addr::from(0x0a80_0000 + (i << 8))),
            24,
            remote(i % 7 + 1),
        )
        .unwrap();
        w.add_route(
            NET,
            IpAddr::V6(Ipv6Addr::from(
                (0xfd00_0000_0000_0001u128 << 64) | ((i as u128) << 16),
            )),
            112,
            remote(i % 5 + 1),
        )
        .unwrap();
    }
    w.publish().unwrap();

    let r = TableReader::attach(&cfg).unwrap();
    let mut h = r.register().unwrap();
    let s = h.snapshot();
    assert_eq!(s.port(PortId(5)), Some(port));
    assert_eq!(s.port(PortId(6)), None);
    assert_eq!(s.node(NodeId(2)), Some(node));
    assert_eq!(s.local_sid(sid), Some(SidBehavior::EndDt46(NET)));
    assert_eq!(
        s.underlay_neighbor("2001:db8::2".parse().unwrap()),
        Some(MacAddr([2, 9, 9, 9, 9, 9]))
    );
    let n2 = s.network(l2).unwrap();
    assert_eq!(n2.info().unwrap().kind, NetworkKind::L2);
    assert_eq!(n2.neighbor("fd00::7".parse().unwrap()), Some(mac));
    // The remote FDB target is a next hop with a precomputed encapsulation to the DT2U SID.
    let Some(L2Hop::Remote(hop)) = n2.fdb(mac) else {
        panic!("fdb entry of {mac}: {:?}", n2.fdb(mac));
    };
    assert_eq!(
        s.nexthop(hop),
        Some(NextHop::Remote {
            node: NodeId(2),
            sid: dt2u
        })
    );
    let e = s.encap(hop).unwrap();
    assert_eq!(e.node_id(), NodeId(2));
    assert_eq!(e.underlay_addr(), node.underlay);
    assert_eq!(e.ip6[24..40], dt2u.0.octets());
    assert_eq!(
        n2.fdb_rec(mac).map(|r| (r.seq, r.learned())),
        Some((10, true))
    );
    let flood: Vec<L2Hop> = n2.flood().collect();
    assert_eq!(flood.len(), 3);
    assert_eq!(flood[0], L2Hop::Port(PortId(5)));
    let dests: Vec<Option<NextHop>> = flood[1..]
        .iter()
        .map(|f| match f {
            L2Hop::Remote(i) => s.nexthop(*i),
            L2Hop::Port(_) => None,
        })
        .collect();
    assert_eq!(
        dests,
        vec![
            Some(NextHop::Remote {
                node: NodeId(2),
                sid: dt2m
            }),
            Some(NextHop::Remote {
                node: NodeId(3),
                sid: dt2m3
            })
        ]
    );
    assert_eq!(
        n2.neighbors().collect::<Vec<_>>(),
        vec![("fd00::7".parse().unwrap(), mac)]
    );
    let n = s.network(NET).unwrap();
    let keys: Vec<u32> = (0..600u32).map(|i| 0x0a80_0000 + (i << 8) + 3).collect();
    let mut bulk = vec![0; keys.len()];
    n.route4_bulk(&keys, &mut bulk);
    for (k, b) in keys.iter().zip(&bulk) {
        assert_eq!(*b, n.route4_index(Ipv4Addr::from(*k)));
    }
    assert_eq!(s.nexthop(bulk[0]), Some(remote(1)));
    assert_eq!(bulk[599], 0, "beyond the 500 routes");
    let keys6: Vec<u128> = (0..500u128)
        .map(|i| (0xfd00_0000_0000_0001u128 << 64) | (i << 16) | 5)
        .collect();
    let mut bulk6 = vec![0; keys6.len()];
    n.route6_bulk(&keys6, &mut bulk6);
    for (i, b) in bulk6.iter().enumerate() {
        assert_eq!(s.nexthop(*b), Some(remote(i as u32 % 5 + 1)));
    }
    assert_eq!(Fib::<u32>::routes(s.mem(), n.fib4()).len(), 500);
    h.quiescent();

    // Removing a network frees its tables and the next hops only it used.
    let live_before = w.stats().live_bytes;
    assert!(w.remove_network(NET).unwrap());
    assert!(w.remove_network(l2).unwrap());
    w.remove_port(PortId(5)).unwrap();
    w.remove_node(NodeId(2)).unwrap();
    w.remove_local_sid(sid).unwrap();
    w.publish().unwrap();
    assert!(w.stats().live_bytes < live_before / 4, "{:?}", w.stats());
    let s = h.snapshot();
    assert!(s.network(NET).is_none());
    assert_eq!(s.nexthop(1), None, "unused next hops are released");
}

#[test]
fn errors_name_the_object() {
    let dir = TempDir::new("err");
    let mut w = TableWriter::create(&dir.cfg(8 << 20)).unwrap();
    let e = w
        .add_route(NetworkId(9), "10.0.0.0".parse().unwrap(), 8, NextHop::Drop)
        .unwrap_err();
    assert!(e.to_string().contains("network 9"), "{e}");
    w.set_network(NET, &info()).unwrap();
    let e = w
        .add_route(NET, "10.0.0.0".parse().unwrap(), 33, NextHop::Drop)
        .unwrap_err();
    assert!(e.to_string().contains("/33"), "{e}");
    let e = w.set_network(NetworkId(0), &info()).unwrap_err();
    assert!(e.to_string().contains("reserved"), "{e}");
}

/// Tests that change the huge-page reservation run one at a time.
static HUGE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Reserves huge pages and mounts a private hugetlbfs; restores both when dropped.
struct HugeMount {
    dir: PathBuf,
    nr_before: u64,
    mounted: bool,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl HugeMount {
    const NR: &'static str = "/proc/sys/vm/nr_hugepages";

    fn new(pages: u64) -> Result<HugeMount, String> {
        let serial = HUGE.lock().unwrap_or_else(|p| p.into_inner());
        let nr_before: u64 = std::fs::read_to_string(Self::NR)
            .map_err(|e| format!("read {}: {e}", Self::NR))?
            .trim()
            .parse()
            .map_err(|e| format!("parse {}: {e}", Self::NR))?;
        let dir = std::env::temp_dir().join(format!(
            "lace-huge-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let mut m = HugeMount {
            dir,
            nr_before,
            mounted: false,
            _serial: serial,
        };
        std::fs::write(Self::NR, (nr_before + pages).to_string())
            .map_err(|e| format!("reserve huge pages: {e}"))?;
        let st = std::process::Command::new("mount")
            .args(["-t", "hugetlbfs", "-o", "mode=0700", "lace-test"])
            .arg(&m.dir)
            .status()
            .map_err(|e| format!("run mount: {e}"))?;
        if !st.success() {
            return Err(format!("mount hugetlbfs on {}: {st}", m.dir.display()));
        }
        m.mounted = true;
        Ok(m)
    }
}

impl Drop for HugeMount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = std::process::Command::new("umount").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir(&self.dir);
        let _ = std::fs::write(Self::NR, self.nr_before.to_string());
    }
}

#[test]
#[ignore = "needs root (reserves huge pages, mounts hugetlbfs); run with --include-ignored"]
fn tables_live_on_hugetlbfs_when_mounted() {
    require(&[root()]);
    let mount = HugeMount::new(48).unwrap_or_else(|e| panic!("hugetlbfs setup: {e}"));
    let cfg = TablesConfig {
        dir: mount.dir.clone(),
        name: "huge".into(),
        size: 33 << 20, // not a multiple of the huge page size: rounded up
        reader_slots: 4,
    };
    let mut w = TableWriter::create(&cfg).unwrap();
    let len = std::fs::metadata(cfg.tables_path()).unwrap().len();
    assert_eq!(len % (2 << 20), 0, "rounded to whole huge pages: {len}");
    assert!(len >= 33 << 20);
    w.set_network(NET, &info()).unwrap();
    for i in 0..2000u32 {
        w.add_route(
            NET,
            IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (i << 8))),
            24,
            remote(i % 9 + 1),
        )
        .unwrap();
    }
    w.publish().unwrap();
    let r = TableReader::attach(&cfg).unwrap();
    let mut h = r.register().unwrap();
    let s = h.snapshot();
    let n = s.network(NET).unwrap();
    for i in (0..2000u32).step_by(97) {
        let ip = Ipv4Addr::from(0x0a00_0000 | (i << 8) | 1);
        assert_eq!(s.nexthop(n.route4_index(ip)), Some(remote(i % 9 + 1)));
    }
    h.quiescent();
    drop(h);
    drop(r);
    drop(w);
    // A restarted writer re-attaches on hugetlbfs too.
    let w = TableWriter::open(&cfg).unwrap();
    assert!(w.generation() >= 1);
    drop(w);
    drop(mount);
}

#[test]
#[ignore = "needs root (reserves huge pages, mounts hugetlbfs); run with --include-ignored"]
fn too_few_huge_pages_is_a_clear_error() {
    require(&[root()]);
    // A mount with no pages reserved for us beyond what other tests hold: ask for far more.
    let mount = HugeMount::new(1).unwrap_or_else(|e| panic!("hugetlbfs setup: {e}"));
    let cfg = TablesConfig {
        dir: mount.dir.clone(),
        name: "starved".into(),
        size: 64 << 30,
        reader_slots: 4,
    };
    let err = TableWriter::create(&cfg).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("huge pages") && msg.contains("nr_hugepages"),
        "{msg}"
    );
    assert!(
        !cfg.tables_path().exists(),
        "a failed create leaves no half-made region behind"
    );
    drop(mount);
}

#[test]
fn remote_next_hops_carry_their_precomputed_encapsulation() {
    let dir = TempDir::new("encap");
    let cfg = dir.cfg(8 << 20);
    let mut w = TableWriter::create(&cfg).unwrap();
    w.set_network(NET, &info()).unwrap();
    let src: Ipv6Addr = "fd00::a".parse().unwrap();
    let under: Ipv6Addr = "fd00::b".parse().unwrap();
    // A route to a node that is not known yet, before any source is configured.
    w.add_route(NET, "10.0.2.0".parse().unwrap(), 24, remote(2))
        .unwrap();
    w.publish().unwrap();
    let r = TableReader::attach(&cfg).unwrap();
    let mut h = r.register().unwrap();
    let index = |h: &mut lace_shared::tables::ReaderHandle| {
        let s = h.snapshot();
        let v = s.network(NET).unwrap();
        v.route4_index("10.0.2.9".parse().unwrap())
    };
    let i = index(&mut h);
    {
        let s = h.snapshot();
        let e = s.encap(i).expect("a remote next hop has an encapsulation");
        assert!(!e.usable(), "neither the node nor the source is known");
        assert_eq!(e.node_id(), NodeId(2));
        assert_eq!(e.flags, EncapRec::PRESENT);
    }
    h.quiescent();

    w.set_node(
        NodeId(2),
        &NodeInfo {
            locator: "fc00:0:2::".parse().unwrap(),
            locator_len: 48,
            underlay: under,
        },
    )
    .unwrap();
    assert!(w.set_srv6_source(Ipv6Addr::UNSPECIFIED).is_err());
    assert!(w.set_srv6_source("ff02::1".parse().unwrap()).is_err());
    w.set_srv6_source(src).unwrap();
    w.publish().unwrap();
    {
        let s = h.snapshot();
        assert_eq!(s.srv6_source(), Some(src));
        let e = s.encap(i).unwrap();
        assert!(e.usable());
        assert_eq!(e.underlay_addr(), under);
        let mut want = [0u8; 40];
        want[0] = 0x60;
        want[8..24].copy_from_slice(&src.octets());
        want[24..40].copy_from_slice(&Ipv6Addr::new(0xfc00, 0, 2, 0, 0, 0, 0, 1).octets());
        assert_eq!(
            e.ip6, want,
            "version 6, source, SID; the rest patched per packet"
        );
    }
    h.quiescent();

    // A restarted writer keeps them; a new source rewrites every one.
    drop(w);
    let mut w = TableWriter::open(&cfg).unwrap();
    let src2: Ipv6Addr = "fd00::aa".parse().unwrap();
    w.set_srv6_source(src2).unwrap();
    w.publish().unwrap();
    {
        let s = h.snapshot();
        assert_eq!(&s.encap(i).unwrap().ip6[8..24], &src2.octets());
    }
    h.quiescent();

    // The node goes: still present, no longer usable; the route goes: the record goes.
    w.remove_node(NodeId(2)).unwrap();
    w.publish().unwrap();
    {
        let s = h.snapshot();
        assert!(!s.encap(i).unwrap().usable());
    }
    h.quiescent();
    w.remove_route(NET, "10.0.2.0".parse().unwrap(), 24)
        .unwrap();
    w.publish().unwrap();
    assert!(h.snapshot().encap(i).is_none());
}

#[test]
fn l2_remote_targets_share_next_hops_and_release_them() {
    let dir = TempDir::new("l2hops");
    let cfg = dir.cfg(8 << 20);
    let mut w = TableWriter::create(&cfg).unwrap();
    let l2 = NetworkId(4);
    w.set_network(
        l2,
        &NetworkInfo {
            kind: NetworkKind::L2,
            ..info()
        },
    )
    .unwrap();
    let (node, sid) = match remote(2) {
        NextHop::Remote { node, sid } => (node, sid),
        _ => unreachable!(),
    };
    let target = FdbTarget::Remote { node, sid };
    let entry = |seq| FdbEntry {
        target,
        seq,
        learned: false,
    };
    let (a, b) = (MacAddr([2, 0, 0, 0, 0, 0xa]), MacAddr([2, 0, 0, 0, 0, 0xb]));
    w.set_fdb(l2, a, entry(1)).unwrap();
    w.set_fdb(l2, b, entry(1)).unwrap();
    w.set_flood(l2, &[FloodTarget::Remote { node, sid }])
        .unwrap();
    w.publish().unwrap();
    let r = TableReader::attach(&cfg).unwrap();
    let mut h = r.register().unwrap();
    let hop = |h: &mut lace_shared::tables::ReaderHandle, mac| {
        let s = h.snapshot();
        match s.network(l2).unwrap().fdb(mac) {
            Some(L2Hop::Remote(i)) => Some(i),
            _ => None,
        }
    };
    let i = hop(&mut h, a).unwrap();
    assert_eq!(
        hop(&mut h, b),
        Some(i),
        "entries to one SID share a next hop"
    );
    h.quiescent();

    // Removing some users keeps the next hop for the others, across a writer restart.
    w.remove_fdb(l2, a).unwrap();
    w.publish().unwrap();
    drop(w);
    let mut w = TableWriter::open(&cfg).unwrap();
    w.remove_fdb(l2, b).unwrap();
    w.publish().unwrap();
    {
        let s = h.snapshot();
        assert_eq!(
            s.nexthop(i),
            Some(remote(2)),
            "the flood list still uses it"
        );
        let flood: Vec<L2Hop> = s.network(l2).unwrap().flood().collect();
        assert_eq!(flood, vec![L2Hop::Remote(i)]);
    }
    h.quiescent();
    // The last user gone, the next hop and its encapsulation are released.
    w.set_flood(l2, &[FloodTarget::Port(PortId(3))]).unwrap();
    w.publish().unwrap();
    {
        let s = h.snapshot();
        assert_eq!(s.nexthop(i), None);
        assert!(s.encap(i).is_none());
        let flood: Vec<L2Hop> = s.network(l2).unwrap().flood().collect();
        assert_eq!(flood, vec![L2Hop::Port(PortId(3))]);
    }
    h.quiescent();
    // Removing the network releases what its tables held.
    w.set_fdb(l2, a, entry(2)).unwrap();
    w.publish().unwrap();
    let j = hop(&mut h, a).unwrap();
    h.quiescent();
    w.remove_network(l2).unwrap();
    w.publish().unwrap();
    assert_eq!(h.snapshot().nexthop(j), None);
}
