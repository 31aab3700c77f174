//! The node's host interface as control makes it (ADR 0023), in a network namespace of its
//! own (root): the veth pair, its MAC, MTU and gateway neighbors, the routes kept equal to
//! what the tables want, and a restart that finds it as it was.
//!
//! Needs root: `#[ignore]`d, run with `--include-ignored` (as `.ci/run` does); a missing
//! prerequisite then fails the test, named with what provides it.

mod e2e_support;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;

use e2e_support::{ipn, prerequisites, run_capture, sysctl, Resources};
use ipnet::IpNet;
use lace_control::daemon::host::{host_mac, HostInterface};

/// The routes into `lhtest` (both families, sorted), each as `line` makes it of the words of
/// `ip route show` (skipped when it gives nothing).
fn routes_as(ns: &str, line: impl Fn(&[&str]) -> Option<String>) -> Vec<String> {
    let mut out: Vec<String> = ["-4", "-6"]
        .iter()
        .flat_map(|f| {
            run_capture(&["ip", "-n", ns, f, "route", "show", "dev", "lhtest"])
                .unwrap()
                .lines()
                .filter_map(|l| line(&l.split_whitespace().collect::<Vec<_>>()))
                .collect::<Vec<_>>()
        })
        .collect();
    out.sort();
    out
}

/// The routes into `lhtest` via a gateway: "<destination> via <gateway>".
fn routes(ns: &str) -> Vec<String> {
    routes_as(ns, |w| (w.get(1) == Some(&"via")).then(|| w[..3].join(" ")))
}

/// The routes into `lhtest` with a preferred source: "<destination> <source>".
fn route_sources(ns: &str) -> Vec<String> {
    routes_as(ns, |w| {
        let src = w.iter().position(|x| *x == "src")?;
        Some(format!("{} {}", w[0], w.get(src + 1)?))
    })
}

fn set(list: &[&str]) -> BTreeSet<IpNet> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
#[ignore = "needs root, ip, ping, ethtool; run with --include-ignored"]
fn the_host_interface_is_made_kept_in_sync_and_found_again() {
    prerequisites([]);
    let mut res = Resources::new();
    let ns = res.netns("host");
    let path = PathBuf::from(format!("/var/run/netns/{ns}"));
    let mut h = HostInterface::open("lhtest", Some(&path), "node-a", 1446).unwrap();
    assert_eq!(h.peer(), "lhtest-fw");
    let link = ipn(&ns, "-o link show lhtest");
    assert!(
        link.contains("mtu 1446") && (link.contains("state UP") || link.contains(",UP")),
        "{link}"
    );
    assert!(link.contains(&host_mac("node-a").to_string()), "{link}");
    let peer = ipn(&ns, "-o link show lhtest-fw");
    assert!(peer.contains("mtu 1446"), "{peer}");
    let v6off = run_capture(&[
        "ip",
        "netns",
        "exec",
        &ns,
        "cat",
        "/proc/sys/net/ipv6/conf/lhtest-fw/disable_ipv6",
    ])
    .unwrap();
    assert_eq!(v6off.trim(), "1", "the forwarder answers for its end");
    let neigh = ipn(&ns, "neigh show dev lhtest");
    for gw in ["169.254.0.1", "fe80::1"] {
        let line = neigh
            .lines()
            .find(|l| l.starts_with(gw))
            .unwrap_or_default();
        assert!(
            line.contains("PERMANENT") && line.contains("06:00:00:00:ff:ff"),
            "{neigh}"
        );
    }
    // The routes follow the tables: added, then the ones no longer wanted removed.
    let first = port_endpoint(&h);
    h.sync(
        &set(&["10.40.3.0/24", "fd40:0:0:3::/64", "10.50.0.7/32"]),
        &[],
    )
    .unwrap();
    assert_eq!(
        routes(&ns),
        [
            "10.40.3.0/24 via 169.254.0.1",
            "10.50.0.7 via 169.254.0.1",
            "fd40:0:0:3::/64 via fe80::1"
        ]
    );
    // Each route takes the node's own address of its family as its source: the first of the
    // node's addresses configured here (192.168.200.9 is not), so replies from pods on other
    // nodes find the node.
    ipn(&ns, "link set lo up");
    ipn(&ns, "addr add 192.168.200.1/32 dev lo");
    ipn(&ns, "addr add fd00:200::1/128 dev lo nodad");
    let node: Vec<IpAddr> = ["192.168.200.9", "192.168.200.1", "fd00:200::1"]
        .map(|a| a.parse().unwrap())
        .into();
    h.sync(&set(&["10.40.3.0/24", "fd40:0:0:3::/64"]), &node)
        .unwrap();
    assert_eq!(
        route_sources(&ns),
        ["10.40.3.0/24 192.168.200.1", "fd40:0:0:3::/64 fd00:200::1"]
    );
    h.sync(&set(&["10.40.3.0/24"]), &node).unwrap();
    assert_eq!(routes(&ns), ["10.40.3.0/24 via 169.254.0.1"]);
    assert_eq!(route_sources(&ns), ["10.40.3.0/24 192.168.200.1"]);
    drop(h);

    // A restart finds the pair as it was: the same port, and the routes a previous run left
    // are known (what is no longer wanted goes).
    let mut h = HostInterface::open("lhtest", Some(&path), "node-a", 1446).unwrap();
    assert_eq!(
        port_endpoint(&h),
        first,
        "the same interface, the same endpoint"
    );
    h.sync(&set(&["fd40:0:0:3::/64"]), &node).unwrap();
    assert_eq!(routes(&ns), ["fd40:0:0:3::/64 via fe80::1"]);
    assert_eq!(route_sources(&ns), ["fd40:0:0:3::/64 fd00:200::1"]);
    drop(h);

    // The pair vanished: made again, as a new endpoint the forwarder attaches anew.
    ipn(&ns, "link del lhtest");
    let h = HostInterface::open("lhtest", Some(&path), "node-a", 1446).unwrap();
    assert_ne!(port_endpoint(&h), first);
    drop(h);
    drop(res);
}

fn port_endpoint(h: &HostInterface) -> u64 {
    h.port().endpoint
}

#[test]
#[ignore = "needs root, ip, ping, ethtool; run with --include-ignored"]
fn a_host_without_ipv6_gets_the_ipv4_half() {
    prerequisites([]);
    let mut res = Resources::new();
    let ns = res.netns("v4only");
    sysctl(&ns, &["net.ipv6.conf.default.disable_ipv6=1"]);
    let path = PathBuf::from(format!("/var/run/netns/{ns}"));
    let mut h = HostInterface::open("lhtest", Some(&path), "node-a", 1500).unwrap();
    let neigh = ipn(&ns, "neigh show dev lhtest");
    assert!(neigh.contains("169.254.0.1"), "{neigh}");
    assert!(!neigh.contains("fe80::1"), "{neigh}");
    // The pods' IPv6 blocks are not routed (the host has no IPv6 to reach them with); the
    // IPv4 ones are, and a sync with the same wish changes nothing.
    let wanted = set(&["10.40.3.0/24", "fd40:0:0:3::/64"]);
    h.sync(&wanted, &[]).unwrap();
    assert_eq!(routes(&ns), ["10.40.3.0/24 via 169.254.0.1"]);
    h.sync(&wanted, &[]).unwrap();
    assert_eq!(routes(&ns), ["10.40.3.0/24 via 169.254.0.1"]);
    drop(h);
    drop(res);
}
