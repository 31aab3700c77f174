//! The rules of [`super::LearnedTable`], one scenario per rule.

use std::net::IpAddr;
use std::num::NonZeroU32;

use lace_shared::learn::{LearnEvent, LearnKind};
use lace_shared::types::{IfName, MacAddr, NetworkId, PortId};

use super::*;
use crate::world::{AttachmentKey, L2Config, NetworkModel};

const VM: MacAddr = MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x56]);
const AGING_S: u32 = 300;
const T0: u64 = 1_700_000_000_000;

fn net(name: &str, id: u32, learning: bool) -> NetworkModel {
    NetworkModel {
        name: name.into(),
        id: NetworkId(id),
        kind: NetworkType::L2,
        v4: Some(("10.60.0.0/24".parse().unwrap(), None)),
        v6: Some(("fd60::/64".parse().unwrap(), None)),
        external: vec![],
        anonymous: false,
        l2: L2Config {
            learning: learning.then(|| NonZeroU32::new(AGING_S).unwrap()),
            ..L2Config::default()
        },
        uplinks: Vec::new(),
    }
}

fn endpoint(
    network: &str,
    node: &str,
    id: u64,
    port: u32,
    mac: MacAddr,
    v4: &str,
) -> EndpointModel {
    EndpointModel {
        namespace: "vms".into(),
        pod: format!("pod-{id}"),
        network: network.into(),
        node: node.into(),
        addresses: vec![v4.parse().unwrap()],
        mac,
        port: PortId(port),
        host_iface: IfName::new(&format!("lace{id}")).unwrap(),
        endpoint_id: id,
    }
}

/// Network `vms` (learning) with a pod on node a (endpoint 1) and one on node b (endpoint 2);
/// network `plain` (no learning) with a pod on node a (endpoint 3).
fn world() -> World {
    let mut w = World::default();
    w.networks.insert("vms".into(), net("vms", 1, true));
    w.networks.insert("plain".into(), net("plain", 2, false));
    for e in [
        endpoint("vms", "a", 1, 1, MacAddr([2, 0, 0, 0, 0, 1]), "10.60.0.2"),
        endpoint("vms", "b", 2, 1, MacAddr([2, 0, 0, 0, 0, 2]), "10.60.0.3"),
        endpoint("plain", "a", 3, 2, MacAddr([2, 0, 0, 0, 0, 3]), "10.60.0.4"),
    ] {
        add(&mut w, e);
    }
    w
}

fn add(w: &mut World, e: EndpointModel) {
    let key = AttachmentKey {
        container_id: format!("c{}", e.endpoint_id),
        ifname: "eth0".into(),
    };
    w.endpoints.insert(key, e);
}

fn remove(w: &mut World, endpoint_id: u64) {
    w.endpoints.retain(|_, e| e.endpoint_id != endpoint_id);
}

fn report(endpoint: u64, port: u32, kind: LearnKind, mac: MacAddr, ip: Option<&str>) -> LearnEvent {
    LearnEvent {
        port: PortId(port),
        endpoint,
        network: NetworkId(1),
        kind,
        mac,
        ip: ip.map(|a| a.parse().unwrap()),
        at_ns: 0,
    }
}

fn at(node: &str, endpoint: u64) -> Location {
    Location {
        node: node.into(),
        endpoint,
    }
}

fn record<'t>(t: &'t LearnedTable, network: &str, mac: MacAddr) -> &'t MacRecord {
    t.records()
        .get(&(network.to_owned(), mac))
        .unwrap_or_else(|| panic!("no record of {mac} in {network}: {:?}", t.records()))
}

fn ips(list: &[&str]) -> BTreeSet<IpAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}

#[test]
fn an_announced_mac_is_learned_refreshed_and_moved_by_an_announcement_only() {
    let w = world();
    let mut t = LearnedTable::new();
    let garp = report(1, 1, LearnKind::GratuitousArp, VM, Some("10.60.0.200"));
    let out = t.apply_reports(&w, "a", &[garp], T0);
    assert!(out.changed);
    assert_eq!(
        out.happened,
        [Happened::Learned {
            network: "vms".into(),
            mac: VM,
            at: at("a", 1)
        }]
    );
    let r = record(&t, "vms", VM);
    assert_eq!(
        (r.origin, r.sequence, &r.active),
        (Origin::Learned, 1, &at("a", 1))
    );
    assert_eq!(r.addresses, ips(&["10.60.0.200"]));
    // Still seen there: a refresh, nothing moves.
    let seen = report(1, 1, LearnKind::Seen, VM, None);
    let out = t.apply_reports(&w, "a", &[seen], T0 + 5000);
    assert!(out.changed && out.happened.is_empty());
    assert_eq!(record(&t, "vms", VM).last_seen_ms, T0 + 5000);
    assert_eq!(record(&t, "vms", VM).sequence, 1);
    // Its unsolicited NA adds its IPv6 address.
    let na = report(1, 1, LearnKind::UnsolicitedNa, VM, Some("fd60::c8"));
    t.apply_reports(&w, "a", &[na], T0 + 6000);
    assert_eq!(
        record(&t, "vms", VM).addresses,
        ips(&["10.60.0.200", "fd60::c8"])
    );
    // The VM runs on node b now: QEMU's RARP there moves it, sequence + 1, addresses kept.
    let rarp = report(2, 1, LearnKind::Rarp, VM, None);
    let out = t.apply_reports(&w, "b", &[rarp], T0 + 7000);
    assert_eq!(
        out.happened,
        [Happened::Moved {
            network: "vms".into(),
            mac: VM,
            from: at("a", 1),
            to: at("b", 2),
            sequence: 2
        }]
    );
    let r = record(&t, "vms", VM);
    assert_eq!((r.sequence, &r.active), (2, &at("b", 2)));
    assert_eq!(r.addresses.len(), 2);
    // A late refresh from the old location never moves it back.
    let out = t.apply_reports(&w, "a", &[seen], T0 + 8000);
    assert_eq!((out.changed, out.ignored), (false, 1));
    assert_eq!(record(&t, "vms", VM).active, at("b", 2));
    // A refresh of a MAC nobody announced creates nothing.
    let stray = report(1, 1, LearnKind::Seen, MacAddr([0x52, 0, 0, 0, 0, 9]), None);
    assert_eq!(t.apply_reports(&w, "a", &[stray], T0).ignored, 1);
    assert_eq!(t.records().len(), 1);
}

#[test]
fn stale_reports_and_networks_without_learning_teach_nothing() {
    let w = world();
    let mut t = LearnedTable::new();
    let cases = [
        // Endpoint 1 is on node a, not b.
        ("b", report(1, 1, LearnKind::Rarp, VM, None)),
        // Port 1 was rebound: endpoint 1 is not on port 9.
        ("a", report(1, 9, LearnKind::Rarp, VM, None)),
        // An endpoint id nobody has (a pod since deleted).
        ("a", report(77, 1, LearnKind::Rarp, VM, None)),
        // Network plain does not learn.
        (
            "a",
            report(3, 2, LearnKind::GratuitousArp, VM, Some("10.60.0.9")),
        ),
    ];
    for (node, ev) in cases {
        let out = t.apply_reports(&w, node, &[ev], T0);
        assert_eq!((out.changed, out.ignored), (false, 1), "{node} {ev:?}");
    }
    assert!(t.records().is_empty());
}

#[test]
fn announced_addresses_must_be_free_addresses_of_the_subnet() {
    let w = world();
    let mut t = LearnedTable::new();
    for (ip, why) in [
        ("10.99.0.5", "outside the network's subnet"),
        ("10.60.0.3", "an endpoint's address"),
        (
            "10.60.0.1",
            "the network's gateway, network or broadcast address",
        ),
        (
            "10.60.0.255",
            "the network's gateway, network or broadcast address",
        ),
        ("fd61::5", "outside the network's subnet"),
    ] {
        let ev = report(1, 1, LearnKind::GratuitousArp, VM, Some(ip));
        let out = t.apply_reports(&w, "a", &[ev], T0);
        assert!(
            out.happened.contains(&Happened::Refused {
                network: "vms".into(),
                mac: VM,
                address: ip.parse().unwrap(),
                why
            }),
            "{ip}: {:?}",
            out.happened
        );
    }
    // The MAC itself is learned, without those addresses.
    assert!(record(&t, "vms", VM).addresses.is_empty());
    // An address another learned MAC held moves to the newest announcer.
    let other = MacAddr([0x52, 0, 0, 0, 0, 7]);
    t.apply_reports(
        &w,
        "a",
        &[report(
            1,
            1,
            LearnKind::GratuitousArp,
            VM,
            Some("10.60.0.50"),
        )],
        T0,
    );
    t.apply_reports(
        &w,
        "b",
        &[report(
            2,
            1,
            LearnKind::GratuitousArp,
            other,
            Some("10.60.0.50"),
        )],
        T0,
    );
    assert!(record(&t, "vms", VM).addresses.is_empty());
    assert_eq!(record(&t, "vms", other).addresses, ips(&["10.60.0.50"]));
}

#[test]
fn learned_macs_age_out_and_go_with_their_endpoint_or_learning() {
    let mut w = world();
    let mut t = LearnedTable::new();
    t.apply_reports(&w, "a", &[report(1, 1, LearnKind::Rarp, VM, None)], T0);
    let aging_ms = u64::from(AGING_S) * 1000;
    assert!(
        !t.reconcile(&w, T0 + aging_ms).changed,
        "kept for exactly the aging time"
    );
    let out = t.reconcile(&w, T0 + aging_ms + 1);
    assert_eq!(
        out.happened,
        [Happened::Forgotten {
            network: "vms".into(),
            mac: VM,
            why: "not seen for the network's aging time"
        }]
    );
    assert!(t.records().is_empty());
    // Its endpoint deleted: forgotten at once.
    t.apply_reports(&w, "a", &[report(1, 1, LearnKind::Rarp, VM, None)], T0);
    remove(&mut w, 1);
    assert!(t.reconcile(&w, T0).changed);
    assert!(t.records().is_empty());
    // Learning turned off on the network.
    let mut w = world();
    t.apply_reports(&w, "b", &[report(2, 1, LearnKind::Rarp, VM, None)], T0);
    w.networks.insert("vms".into(), net("vms", 1, false));
    let out = t.reconcile(&w, T0);
    assert!(matches!(
        out.happened[..],
        [Happened::Forgotten {
            why: "the network no longer learns",
            ..
        }]
    ));
    // A learned MAC an endpoint now holds gives way to it.
    let mut w = world();
    t.apply_reports(&w, "b", &[report(2, 1, LearnKind::Rarp, VM, None)], T0);
    add(&mut w, endpoint("vms", "a", 9, 4, VM, "10.60.0.9"));
    t.reconcile(&w, T0);
    assert!(t.records().is_empty());
}

#[test]
fn an_identity_moves_only_on_the_vms_own_announcement() {
    let mut w = world();
    // The source pod (endpoint 10, node a) and, later, the migration's target (endpoint 11,
    // node b) share the VM's MAC and address.
    add(&mut w, endpoint("vms", "a", 10, 5, VM, "10.60.0.100"));
    let mut t = LearnedTable::new();
    assert!(
        !t.reconcile(&w, T0).changed,
        "one endpoint: nothing to record"
    );
    add(&mut w, endpoint("vms", "b", 11, 6, VM, "10.60.0.100"));
    // The target's interface coming up moves nothing: the source stays active.
    assert!(t.reconcile(&w, T0).changed);
    let r = record(&t, "vms", VM);
    assert_eq!(r.origin, Origin::Identity);
    assert_eq!(
        (&r.active, &r.pending, r.sequence),
        (&at("a", 10), &Some(at("b", 11)), 1)
    );
    assert!(!t.reconcile(&w, T0).changed, "reconciled: stable");
    // Traffic refreshes from the target's port are no announcement.
    let seen = report(11, 6, LearnKind::Seen, VM, None);
    assert!(!t.apply_reports(&w, "b", &[seen], T0).changed);
    // The VM announces itself on the target: promoted, sequence 2.
    let rarp = report(11, 6, LearnKind::Rarp, VM, None);
    let out = t.apply_reports(&w, "b", &[rarp], T0 + 10);
    assert_eq!(
        out.happened,
        [Happened::Moved {
            network: "vms".into(),
            mac: VM,
            from: at("a", 10),
            to: at("b", 11),
            sequence: 2
        }]
    );
    let r = record(&t, "vms", VM);
    assert_eq!((&r.active, &r.pending), (&at("b", 11), &Some(at("a", 10))));
    // A migration back (the source still exists): its announcement there moves it again.
    let back = report(10, 5, LearnKind::GratuitousArp, VM, Some("10.60.0.100"));
    t.apply_reports(&w, "a", &[back], T0 + 20);
    assert_eq!(record(&t, "vms", VM).sequence, 3);
    assert_eq!(record(&t, "vms", VM).active, at("a", 10));
    // The source pod is deleted after the migration: one endpoint holds the MAC again, which
    // places it by itself.
    t.apply_reports(&w, "b", &[rarp], T0 + 30);
    remove(&mut w, 10);
    let out = t.reconcile(&w, T0 + 40);
    assert!(matches!(
        out.happened[..],
        [Happened::Forgotten {
            why: "one endpoint holds it again",
            ..
        }]
    ));
    assert!(t.records().is_empty());
}

#[test]
fn an_identitys_active_endpoint_going_promotes_the_pending_one() {
    let mut w = world();
    for (id, node) in [(10, "a"), (11, "b"), (12, "b")] {
        add(
            &mut w,
            endpoint("vms", node, id, id as u32, VM, "10.60.0.100"),
        );
    }
    let mut t = LearnedTable::new();
    t.reconcile(&w, T0);
    assert_eq!(record(&t, "vms", VM).active, at("a", 10));
    assert_eq!(record(&t, "vms", VM).pending, Some(at("b", 12)));
    remove(&mut w, 10);
    let out = t.reconcile(&w, T0);
    assert!(out.happened.iter().any(|h| matches!(
        h,
        Happened::Moved { to, sequence: 2, .. } if *to == at("b", 12)
    )));
    let r = record(&t, "vms", VM);
    assert_eq!((&r.active, &r.pending), (&at("b", 12), &Some(at("b", 11))));
}

#[test]
fn models_and_the_saved_form() {
    let w = world();
    let mut t = LearnedTable::new();
    t.apply_reports(
        &w,
        "b",
        &[report(
            2,
            1,
            LearnKind::GratuitousArp,
            VM,
            Some("10.60.0.200"),
        )],
        T0,
    );
    let m = &t.models()[&("vms".to_owned(), VM)];
    assert_eq!(
        (m.node.as_str(), m.endpoint_id, m.sequence, m.identity),
        ("b", 2, 1, false)
    );
    assert_eq!(m.addresses, ["10.60.0.200".parse::<IpAddr>().unwrap()]);
    let state = t.to_state();
    let json = serde_json::to_string(&state).unwrap();
    assert!(json.contains("\"lastSeenMs\""), "{json}");
    let back: LearnedState = serde_json::from_str(&json).unwrap();
    assert_eq!(LearnedTable::from_state(back), Ok(t.clone()));
    let mut twice = t.to_state();
    twice.records.push(twice.records[0].clone());
    assert!(LearnedTable::from_state(twice)
        .unwrap_err()
        .contains("recorded twice"));
    let mut newer = t.to_state();
    newer.version = 2;
    assert!(LearnedTable::from_state(newer)
        .unwrap_err()
        .contains("version 2"));
}
