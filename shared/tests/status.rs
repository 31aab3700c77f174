//! The forwarder's status region: port acknowledgements, counters, one live writer.

use lace_shared::status::*;
use lace_shared::types::PortId;
use lace_shared::Error;

/// A directory of its own for a test's status region, removed (region included) when the
/// test ends, passed or failed.
struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The status region's path in a fresh directory, and the directory's guard.
fn path(name: &str) -> (Dir, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("lace-status-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = status_path(&dir, "node");
    (Dir(dir), p)
}

#[test]
fn counters_and_port_states_reach_a_reader() {
    let (_dir, p) = path("rw");
    let w = StatusWriter::create(&p, 2, &["port-input", "ip4-lookup"]).unwrap();
    let r = StatusReader::open(&p).unwrap();
    assert_eq!(r.stage_names(), ["port-input", "ip4-lookup"]);
    assert_eq!(r.workers(), 2);
    assert_eq!(r.pid(), std::process::id());
    assert!(r.alive());
    assert_eq!(r.state(), RunState::Starting);
    w.set_state(RunState::Running);
    assert_eq!(r.state(), RunState::Running);

    let (w0, w1) = (w.worker(0).unwrap(), w.worker(1).unwrap());
    assert!(w.worker(2).is_none());
    w0.add_stage(1, 5);
    w1.add_stage(1, 7);
    w0.add_drop(DropReason::SpoofedSource, 3);
    w1.add_drop(DropReason::SpoofedSource, 1);
    w1.add(WorkerCounter::Polls, 9);
    assert_eq!(r.stage_total(1), 12);
    assert_eq!(r.stage_total(0), 0);
    assert_eq!(r.drops(DropReason::SpoofedSource), 4);
    assert_eq!(r.drops(DropReason::NoRoute), 0);
    assert_eq!(r.worker_counter(1, WorkerCounter::Polls), 9);

    assert_eq!(r.port(PortId(7)).unwrap().state, PortState::Absent);
    w.set_port(PortId(7), 4242, PortState::Up);
    w.set_port(PortId(8), 4343, PortState::Failed(19));
    let c = w.port_counters(PortId(7)).unwrap();
    c.add(PortCounter::RxPackets, 10);
    c.add(PortCounter::TxRefused, 2);
    c.set(PortCounter::IfaceTxDropped, 5);
    c.set(PortCounter::TxLargeSegments, 6);
    let s = r.port(PortId(7)).unwrap();
    assert_eq!((s.state, s.endpoint), (PortState::Up, 4242));
    assert_eq!(s.counters[PortCounter::RxPackets as usize], 10);
    assert_eq!(s.counters[PortCounter::TxRefused as usize], 2);
    assert_eq!(s.counters[PortCounter::IfaceTxDropped as usize], 5);
    assert_eq!(s.counters[PortCounter::TxLargeSegments as usize], 6);
    assert_eq!(r.port(PortId(8)).unwrap().state, PortState::Failed(19));
    assert_eq!(r.ports().len(), 2);
    w.reset_port_counters(PortId(7));
    assert_eq!(r.port(PortId(7)).unwrap().counters, [0; PortCounter::COUNT]);
    assert!(r.port(PortId(MAX_PORTS)).is_none());
    drop(w);
    assert!(!r.alive(), "the writer's lock goes with it");
}

#[test]
fn a_second_live_writer_is_refused_and_a_stale_region_replaced() {
    let (_dir, p) = path("busy");
    let w = StatusWriter::create(&p, 1, &["a"]).unwrap();
    match StatusWriter::create(&p, 1, &["a"]) {
        Err(Error::WriterBusy { .. }) => {}
        other => panic!("expected WriterBusy, got {other:?}"),
    }
    w.worker(0).unwrap().add_drop(DropReason::NoRoute, 1);
    drop(w);
    // The old writer is gone: a new one replaces the region and starts from zero.
    let w = StatusWriter::create(&p, 3, &["a", "b"]).unwrap();
    let r = StatusReader::open(&p).unwrap();
    assert_eq!(r.workers(), 3);
    assert_eq!(r.drops(DropReason::NoRoute), 0);
    drop(w);
}

#[test]
fn too_many_stages_is_a_clear_error() {
    let (_dir, p) = path("stages");
    let names: Vec<String> = (0..MAX_STAGES + 1).map(|i| format!("s{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let e = StatusWriter::create(&p, 1, &refs).unwrap_err().to_string();
    assert!(e.contains("pipeline stages"), "{e}");
}

#[test]
fn external_uplinks_reach_a_reader() {
    let (_dir, p) = path("external");
    let w = StatusWriter::create(&p, 1, &["port-input"]).unwrap();
    let r = StatusReader::open(&p).unwrap();
    assert!(r.external().is_empty());
    let entries = vec![
        ExternalUplink {
            interface: "eth1".into(),
            vlan: 0,
            addresses: vec![
                ("192.0.2.10".parse().unwrap(), 24),
                ("2001:db8::10".parse().unwrap(), 64),
            ],
        },
        ExternalUplink {
            interface: String::new(),
            vlan: 4094,
            addresses: vec![("::ffff:198.51.100.7".parse().unwrap(), 120)],
        },
        ExternalUplink {
            interface: "x".repeat(EXTERNAL_NAME_LEN),
            vlan: 100,
            addresses: vec![("198.51.100.7".parse().unwrap(), 25)],
        },
        // Entries past the first word of VLANs keep theirs.
        ExternalUplink {
            interface: "eth2".into(),
            vlan: 0,
            addresses: Vec::new(),
        },
        ExternalUplink {
            interface: "eth2".into(),
            vlan: 7,
            addresses: vec![("198.51.100.8".parse().unwrap(), 25)],
        },
    ];
    w.set_external(&entries).unwrap();
    // An IPv4-mapped IPv6 address stays IPv6; a name of the full length is kept whole.
    assert_eq!(r.external(), entries);
    assert_eq!(r.stage_names(), ["port-input"]);

    let too_long = ExternalUplink {
        interface: "x".repeat(EXTERNAL_NAME_LEN + 1),
        ..ExternalUplink::default()
    };
    let too_many = vec![ExternalUplink::default(); MAX_EXTERNAL_UPLINKS + 1];
    let addrs = ExternalUplink {
        interface: "eth1".into(),
        vlan: 0,
        addresses: (0..=MAX_EXTERNAL_ADDRESSES as u8)
            .map(|i| (std::net::IpAddr::from([192, 0, 2, i]), 24))
            .collect(),
    };
    for (refused, why) in [
        (vec![too_long], "longer than"),
        (too_many, "external uplinks"),
        (vec![addrs], "addresses"),
    ] {
        match w.set_external(&refused) {
            Err(Error::Invalid { what }) => assert!(what.contains(why), "{what}"),
            other => panic!("{other:?}"),
        }
        // A refused list changes nothing.
        assert_eq!(r.external(), entries);
    }
}

#[test]
fn unresolved_neighbors_reach_a_reader() {
    let (_dir, p) = path("unresolved");
    let w = StatusWriter::create(&p, 1, &["port-input"]).unwrap();
    let r = StatusReader::open(&p).unwrap();
    assert!(r.unresolved().is_empty());
    // The same address on two VLANs is two neighbors.
    let a: Vec<(u16, std::net::IpAddr)> = vec![
        (0, "192.0.2.1".parse().unwrap()),
        (100, "192.0.2.1".parse().unwrap()),
        (4094, "fd00::1".parse().unwrap()),
    ];
    w.set_unresolved(&a);
    assert_eq!(r.unresolved(), a);
    // The external uplinks beside it are untouched.
    assert!(r.external().is_empty());
    let many: Vec<(u16, std::net::IpAddr)> = (0..=MAX_UNRESOLVED as u8)
        .map(|i| (u16::from(i), std::net::IpAddr::from([192, 0, 2, i])))
        .collect();
    w.set_unresolved(&many);
    assert_eq!(r.unresolved(), many[..MAX_UNRESOLVED]);
    w.set_unresolved(&[]);
    assert!(r.unresolved().is_empty());
}
