//! A small node for packet tests, fuzzing and benches: real shared-memory tables with two pods
//! in an l3 network, a pod in a second network, an l2 network (two local pods, an endpoint on
//! a remote node, its neighbor table, FDB and flood list), an l2 network with learning (two
//! local pods, a VM's MAC learned on one of them, one learned behind node 2, a BUM limit of a
//! burst of four), a port of an external network, two external networks' overlapping
//! prefixes in the sources table, a port whose network is missing, a port
//! that is not up, two remote nodes (one with a static underlay neighbor), local End.DT46,
//! End.DT2U and End.DT2M SIDs and every kind of route; the node's host interface: its port, the
//! host network (every local endpoint) and the node's addresses in network 7's FIB; and a
//! stateful network (policy sets, peer classes, Services, a reply-only route) for the
//! connection tracker. Addresses and ids are the constants below.
#![allow(missing_docs)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lace_shared::policy::*;
use lace_shared::tables::{ReaderHandle, TableReader, TableWriter, TablesConfig};
use lace_shared::types::*;

use super::{Config, UplinkHosts};

// ---- the node under test ------------------------------------------------------------------

pub const NET: NetworkId = NetworkId(7);
pub const OTHER: NetworkId = NetworkId(8);
pub const L2NET: NetworkId = NetworkId(9);
pub const EXTNET: NetworkId = NetworkId(10);
pub const GW_MAC: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 7];
pub const GW4: Ipv4Addr = Ipv4Addr::new(10, 7, 1, 1);
pub const GW6: Ipv6Addr = Ipv6Addr::new(0xfd07, 1, 0, 0, 0, 0, 0, 1);
pub const A: PortId = PortId(1);
pub const B: PortId = PortId(2);
pub const C: PortId = PortId(3);
pub const L2POD: PortId = PortId(4);
pub const ORPHAN: PortId = PortId(5);
pub const DOWN: PortId = PortId(6);
pub const L2B: PortId = PortId(7);
pub const EXTPOD: PortId = PortId(8);
pub const MAC_L2: [u8; 6] = [2, 0, 0, 0, 0, 4];
pub const MAC_L2B: [u8; 6] = [2, 0, 0, 0, 0, 7];
/// The l2 endpoint on node 2.
pub const MAC_L2R: [u8; 6] = [2, 0, 0, 0, 0, 0x29];
pub const L2GW4: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
pub const L2GW6: Ipv6Addr = Ipv6Addr::new(0xfd09, 0, 0, 0, 0, 0, 0, 1);
pub const L2_4: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
pub const L2_6: Ipv6Addr = Ipv6Addr::new(0xfd09, 0, 0, 0, 0, 0, 0, 2);
pub const L2B4: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 3);
pub const L2R4: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 9);
pub const L2R6: Ipv6Addr = Ipv6Addr::new(0xfd09, 0, 0, 0, 0, 0, 0, 9);
/// An address of the l2 subnet nobody holds.
pub const L2FREE6: Ipv6Addr = Ipv6Addr::new(0xfd09, 0, 0, 0, 0, 0, 0, 0x55);
/// The l2 network with learning (aging [`LEARN_AGING`] s, BUM limit [`LEARN_BUM`]).
pub const LNET: NetworkId = NetworkId(11);
pub const LEARN_AGING: u32 = 300;
/// (packets per second, burst) of [`LNET`].
pub const LEARN_BUM: (u32, u32) = (1000, 4);
/// Its two local pods.
pub const LPOD: PortId = PortId(9);
pub const LPOD2: PortId = PortId(10);
pub const MAC_LPOD: [u8; 6] = [2, 0, 0, 0, 0, 0x0b];
pub const MAC_LPOD2: [u8; 6] = [2, 0, 0, 0, 0, 0x0c];
pub const LGW4: Ipv4Addr = Ipv4Addr::new(10, 11, 0, 1);
pub const LGW6: Ipv6Addr = Ipv6Addr::new(0xfd11, 0, 0, 0, 0, 0, 0, 1);
pub const LPOD4: Ipv4Addr = Ipv4Addr::new(10, 11, 0, 2);
pub const LPOD6: Ipv6Addr = Ipv6Addr::new(0xfd11, 0, 0, 0, 0, 0, 0, 2);
pub const LPOD2_4: Ipv4Addr = Ipv4Addr::new(10, 11, 0, 3);
/// A VM's MAC and addresses, learned on [`LPOD`].
pub const MAC_VM: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
pub const VM4: Ipv4Addr = Ipv4Addr::new(10, 11, 0, 200);
pub const VM6: Ipv6Addr = Ipv6Addr::new(0xfd11, 0, 0, 0, 0, 0, 0, 0xc8);
/// A MAC learned behind node 2.
pub const MAC_VMR: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x99];
pub const MY_L_DT2U: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 0xe020, 0, 0, 0, 11);
pub const MY_L_DT2M: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 0xe02f, 0, 0, 0, 11);
pub const PEER_L_DT2U: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 0xe020, 0, 0, 0, 11);
pub const PEER_L_DT2M: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 0xe02f, 0, 0, 0, 11);
/// Members of the l2 network's flood list: its two local ports, nodes 2 and 3.
pub const L2_FLOOD_MEMBERS: usize = 4;
pub const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];
pub const MAC_C: [u8; 6] = [2, 0, 0, 0, 0, 3];
pub const A4: Ipv4Addr = Ipv4Addr::new(10, 7, 1, 2);
pub const B4: Ipv4Addr = Ipv4Addr::new(10, 7, 1, 3);
pub const C4: Ipv4Addr = Ipv4Addr::new(10, 8, 1, 2);
pub const DOWN4: Ipv4Addr = Ipv4Addr::new(10, 7, 1, 6);
pub const A6: Ipv6Addr = Ipv6Addr::new(0xfd07, 1, 0, 0, 0, 0, 0, 2);
pub const B6: Ipv6Addr = Ipv6Addr::new(0xfd07, 1, 0, 0, 0, 0, 0, 3);
pub const REMOTE4: Ipv4Addr = Ipv4Addr::new(10, 7, 2, 5);
pub const REMOTE6: Ipv6Addr = Ipv6Addr::new(0xfd07, 2, 0, 0, 0, 0, 0, 5);
pub const UNRESOLVED4: Ipv4Addr = Ipv4Addr::new(10, 7, 3, 5);
pub const UPLINK_MAC: [u8; 6] = [2, 0xaa, 0, 0, 0, 1];
/// The node's own addresses on an external network through the uplink.
pub const EXT_ME4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
pub const EXT_ME6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
/// A router on that external network.
pub const EXT_ROUTER4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const EXT_ROUTER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
pub const EXT_ROUTER_MAC: [u8; 6] = [2, 0xee, 0, 0, 0, 1];
pub const PEER_MAC: [u8; 6] = [2, 0xbb, 0, 0, 0, 2];
pub const ME: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xa);
pub const PEER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xb);
pub const PEER3: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xc);
pub const MY_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 7, 0, 0, 0, 0);
pub const MY_END_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 0x99, 0, 0, 0, 0);
pub const PEER_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 7, 0, 0, 0, 0);
pub const PEER3_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 3, 7, 0, 0, 0, 0);
pub const MY_DT2U: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 0xe020, 0, 0, 0, 9);
pub const MY_DT2M: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 0xe02f, 0, 0, 0, 9);
/// A local End.DT2U SID whose network is an l3 one (mis-programmed tables).
pub const MY_BAD_DT2U: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 0xe020, 0, 0, 0, 7);
pub const PEER_DT2U: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 0xe020, 0, 0, 0, 9);
pub const PEER_DT2M: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 0xe02f, 0, 0, 0, 9);
pub const PEER3_DT2M: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 3, 0xe02f, 0, 0, 0, 9);
/// The node's host interface: its port and the host side's MAC.
pub const HOST: PortId = PortId::HOST;
pub const HOST_MAC: [u8; 6] = [0x0a, 0, 0, 0, 0, 1];
/// The host network's gateways (the host's routes point at them) and gateway MAC.
pub const HOST_GW4: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 1);
pub const HOST_GW6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
pub const HOST_GW_MAC: [u8; 6] = [0x06, 0, 0, 0, 0xff, 0xff];
/// The node's own addresses (what the host sends from; pods of network 7 reach them).
pub const NODE4: Ipv4Addr = Ipv4Addr::new(192, 168, 100, 1);
pub const NODE6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 0xa);

// ---- external networks' sources (ADR 0054) --------------------------------------------------

/// A second external network, whose prefixes lie inside [`EXTNET`]'s.
pub const EXTNET2: NetworkId = NetworkId(13);
/// [`EXTNET`]'s prefixes: hosts there reach pod [`A`] ([`A4`], [`A6`]).
pub const EXT_PREFIX4: (Ipv4Addr, u8) = (Ipv4Addr::new(203, 0, 113, 0), 24);
pub const EXT_PREFIX6: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0), 48);
/// [`EXTNET2`]'s, longer: hosts there reach pod [`B`] ([`B4`]) only.
pub const EXT2_PREFIX4: (Ipv4Addr, u8) = (Ipv4Addr::new(203, 0, 113, 128), 25);
pub const EXT2_PREFIX6: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2001, 0xdb8, 0x100, 1, 0, 0, 0, 0), 64);

/// The uplink's VLAN of [`EXTNET_V`]: the node's address there is [`EXT_ME4`] too, and
/// [`EXT_ROUTER4`] is its router, as on the untagged uplink.
pub const EXT_VLAN: u16 = 100;
/// An external network on [`EXT_VLAN`], with [`EXTNET`]'s IPv4 prefix: hosts there reach pod
/// [`C`] ([`C4`]) only.
pub const EXTNET_V: NetworkId = NetworkId(14);
/// Where network 7 reaches [`EXTNET_V`]'s hosts: through [`EXT_ROUTER4`] on [`EXT_VLAN`].
pub const EXT_V_OUT4: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 7, 12, 0), 24);

/// The external networks' prefixes in the sources tables, and the pods each may reach.
fn external_sources(w: &mut TableWriter, info: &NetworkInfo) {
    w.set_network(EXTNET2, info).unwrap();
    w.set_network(EXTNET_V, info).unwrap();
    let vlan = NetworkId::external_sources(EXT_VLAN).unwrap();
    w.set_network(vlan, info).unwrap();
    let (p4, l4) = EXT_PREFIX4;
    w.add_route(vlan, IpAddr::V4(p4), l4, NextHop::Network { net: EXTNET_V })
        .unwrap();
    w.set_network(NetworkId::EXTERNAL_SOURCES, info).unwrap();
    for (net, (p4, l4), (p6, l6)) in [
        (EXTNET, EXT_PREFIX4, EXT_PREFIX6),
        (EXTNET2, EXT2_PREFIX4, EXT2_PREFIX6),
    ] {
        let to = NextHop::Network { net };
        w.add_route(NetworkId::EXTERNAL_SOURCES, IpAddr::V4(p4), l4, to)
            .unwrap();
        w.add_route(NetworkId::EXTERNAL_SOURCES, IpAddr::V6(p6), l6, to)
            .unwrap();
    }
    let local = |port, mac| NextHop::Local {
        port,
        mac: MacAddr(mac),
    };
    w.add_route(EXTNET, IpAddr::V4(A4), 32, local(A, MAC_A))
        .unwrap();
    w.add_route(EXTNET, IpAddr::V6(A6), 128, local(A, MAC_A))
        .unwrap();
    w.add_route(EXTNET2, IpAddr::V4(B4), 32, local(B, MAC_B))
        .unwrap();
    w.add_route(EXTNET_V, IpAddr::V4(C4), 32, local(C, MAC_C))
        .unwrap();
}

// ---- the stateful network (connection tracking) ----------------------------------------------

pub const SNET: NetworkId = NetworkId(12);
pub const SGW4: Ipv4Addr = Ipv4Addr::new(10, 11, 1, 1);
pub const SGW6: Ipv6Addr = Ipv6Addr::new(0xfd11, 1, 0, 0, 0, 0, 0, 1);
/// Isolated for ingress and egress (policy set 1).
pub const S1: PortId = PortId(11);
/// Selected by no policy.
pub const S2: PortId = PortId(12);
/// Isolated for ingress (policy set 2).
pub const S3: PortId = PortId(13);
pub const MAC_S1: [u8; 6] = [2, 0, 0, 0, 0, 0x11];
pub const MAC_S2: [u8; 6] = [2, 0, 0, 0, 0, 0x12];
pub const MAC_S3: [u8; 6] = [2, 0, 0, 0, 0, 0x13];
pub const S1_4: Ipv4Addr = Ipv4Addr::new(10, 11, 1, 2);
pub const S2_4: Ipv4Addr = Ipv4Addr::new(10, 11, 1, 3);
pub const S3_4: Ipv4Addr = Ipv4Addr::new(10, 11, 1, 4);
pub const S1_6: Ipv6Addr = Ipv6Addr::new(0xfd11, 1, 0, 0, 0, 0, 0, 2);
pub const S2_6: Ipv6Addr = Ipv6Addr::new(0xfd11, 1, 0, 0, 0, 0, 0, 3);
pub const S3_6: Ipv6Addr = Ipv6Addr::new(0xfd11, 1, 0, 0, 0, 0, 0, 4);
/// An endpoint of the stateful network on node 2 (peer class 2).
pub const SREMOTE4: Ipv4Addr = Ipv4Addr::new(10, 11, 2, 5);
/// An address on node 3 no peer names (class 0).
pub const SWORLD4: Ipv4Addr = Ipv4Addr::new(10, 11, 3, 7);
/// Behind a reply-only route to node 2 (a one-way path's source).
pub const SONEWAY4: Ipv4Addr = Ipv4Addr::new(10, 11, 5, 7);
/// This node's End.DT46 SID of the stateful network, and node 2's.
pub const MY_SSID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 11, 0, 0, 0, 0);
pub const PEER_SSID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 11, 0, 0, 0, 0);
/// A Service: TCP 80 → S3:8080 (IPv4 and IPv6).
pub const VIP4: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd96, 0, 0, 0, 0, 0, 0, 0x10);
/// A Service without backends: TCP 80 rejected.
pub const VIP_EMPTY4: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 11);
/// A node-local Service (`internalTrafficPolicy: Local`) without a backend on this node: TCP 80
/// dropped.
pub const VIP_LOCAL_EMPTY4: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 14);
/// A Service with session affinity: TCP 80 → three backends on node 2.
pub const VIP_AFF4: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 12);
/// A Service without affinity over the same three backends.
pub const VIP_SPREAD4: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 13);
/// The three remote backends (port 8080).
pub const SBACKENDS: [Ipv4Addr; 3] = [
    Ipv4Addr::new(10, 11, 2, 11),
    Ipv4Addr::new(10, 11, 2, 12),
    Ipv4Addr::new(10, 11, 2, 13),
];
pub const SET1: PolicySetId = PolicySetId(1);
pub const SET2: PolicySetId = PolicySetId(2);

fn tcp_ports(lo: u16, hi: u16) -> PortRange {
    PortRange {
        proto: PROTO_TCP,
        lo,
        hi,
    }
}

/// Programs the stateful network: S1 (set 1: egress to S2 on TCP 8080 and UDP 53 and anything
/// to node 2's block; ingress from S2 on TCP 80), S2 (no policy), S3 (set 2: ingress from S2
/// on TCP 8080 and 80), the Services and the routes.
fn stateful(w: &mut TableWriter) {
    w.set_network(
        SNET,
        &NetworkInfo {
            kind: NetworkKind::L3,
            anonymous: false,
            gateway_mac: MacAddr(GW_MAC),
            gateway4: Some(SGW4),
            gateway6: Some(SGW6),
            mtu: 1460,
            stateful: true,
            l2: L2Settings::default(),
        },
    )
    .unwrap();
    let port = |mac, v4, v6, set| PortInfo {
        policy: set,
        transit: false,
        ..pod(SNET, mac, v4, Some(v6))
    };
    w.set_port(S1, &port(MAC_S1, S1_4, S1_6, SET1)).unwrap();
    w.set_port(S2, &port(MAC_S2, S2_4, S2_6, PolicySetId::NONE))
        .unwrap();
    w.set_port(S3, &port(MAC_S3, S3_4, S3_6, SET2)).unwrap();
    for (p, mac, a4, a6) in [
        (S1, MAC_S1, S1_4, S1_6),
        (S2, MAC_S2, S2_4, S2_6),
        (S3, MAC_S3, S3_4, S3_6),
    ] {
        let hop = NextHop::Local {
            port: p,
            mac: MacAddr(mac),
        };
        w.add_route(SNET, IpAddr::V4(a4), 32, hop).unwrap();
        w.add_route(SNET, IpAddr::V6(a6), 128, hop).unwrap();
    }
    let remote = |node, sid| NextHop::Remote {
        node: NodeId(node),
        sid: Sid(sid),
    };
    w.add_route(
        SNET,
        IpAddr::V4(Ipv4Addr::new(10, 11, 2, 0)),
        24,
        remote(2, PEER_SSID),
    )
    .unwrap();
    w.add_route(
        SNET,
        IpAddr::V4(Ipv4Addr::new(10, 11, 3, 0)),
        24,
        remote(2, PEER_SSID),
    )
    .unwrap();
    w.add_route_flags(
        SNET,
        IpAddr::V4(Ipv4Addr::new(10, 11, 5, 0)),
        24,
        remote(2, PEER_SSID),
        RouteFlags::REPLY_ONLY,
    )
    .unwrap();
    w.add_route(SNET, IpAddr::V4(SGW4), 32, NextHop::Receive)
        .unwrap();
    // The node's address, through the host interface (the node always reaches its pods).
    let host = NextHop::Local {
        port: HOST,
        mac: MacAddr(HOST_MAC),
    };
    w.add_route(SNET, IpAddr::V4(NODE4), 32, host).unwrap();
    w.add_route(SNET, IpAddr::V6(SGW6), 128, NextHop::Receive)
        .unwrap();
    w.set_local_sid(Sid(MY_SSID), SidBehavior::EndDt46(SNET))
        .unwrap();
    // Peer classes: S2 (class 1), node 2's block (class 2), the rest is class 0.
    w.set_peer_prefix(SNET, IpAddr::V4(S2_4), 32, PeerClass(1))
        .unwrap();
    w.set_peer_prefix(SNET, IpAddr::V6(S2_6), 128, PeerClass(1))
        .unwrap();
    w.set_peer_prefix(
        SNET,
        IpAddr::V4(Ipv4Addr::new(10, 11, 2, 0)),
        24,
        PeerClass(2),
    )
    .unwrap();
    let set = |ingress, egress| PolicySet {
        network: SNET,
        ingress_isolated: ingress,
        egress_isolated: egress,
    };
    w.set_policy_set(SET1, &set(true, true)).unwrap();
    w.set_policy_set(SET2, &set(true, false)).unwrap();
    w.set_decision(
        SET1,
        PolicyDir::Egress,
        PeerClass(1),
        &Ports::Ranges(vec![
            tcp_ports(8080, 8080),
            PortRange {
                proto: PROTO_UDP,
                lo: 53,
                hi: 53,
            },
        ]),
    )
    .unwrap();
    w.set_decision(SET1, PolicyDir::Egress, PeerClass(2), &Ports::All)
        .unwrap();
    w.set_decision(
        SET1,
        PolicyDir::Ingress,
        PeerClass(1),
        &Ports::Ranges(vec![tcp_ports(80, 80)]),
    )
    .unwrap();
    w.set_decision(
        SET2,
        PolicyDir::Ingress,
        PeerClass(1),
        &Ports::Ranges(vec![tcp_ports(80, 80), tcp_ports(8080, 8080)]),
    )
    .unwrap();
    // Services.
    let ready = BackendState {
        ready: true,
        serving: true,
        terminating: false,
    };
    let backend = |a: IpAddr| Backend {
        addr: a,
        port: 8080,
        state: ready,
    };
    let svc = |backends: Vec<Backend>, affinity, node_local| {
        let names: Vec<String> = backends
            .iter()
            .map(|b| format!("{}:{}", b.addr, b.port))
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        ServiceInfo {
            affinity_timeout_s: affinity,
            table: maglev_table(&refs, maglev_size(refs.len())),
            backends,
            node_local,
        }
    };
    for (vip, info) in [
        (
            IpAddr::V4(VIP4),
            svc(vec![backend(IpAddr::V4(S3_4))], None, false),
        ),
        (
            IpAddr::V6(VIP6),
            svc(vec![backend(IpAddr::V6(S3_6))], None, false),
        ),
        (IpAddr::V4(VIP_EMPTY4), svc(vec![], None, false)),
        (IpAddr::V4(VIP_LOCAL_EMPTY4), svc(vec![], None, true)),
        (
            IpAddr::V4(VIP_AFF4),
            svc(
                SBACKENDS.iter().map(|&a| backend(IpAddr::V4(a))).collect(),
                Some(600),
                false,
            ),
        ),
        (
            IpAddr::V4(VIP_SPREAD4),
            svc(
                SBACKENDS.iter().map(|&a| backend(IpAddr::V4(a))).collect(),
                None,
                false,
            ),
        ),
    ] {
        w.set_service(ServiceKey::new(SNET, vip, PROTO_TCP, 80), &info)
            .unwrap();
        let len = if vip.is_ipv4() { 32 } else { 128 };
        w.add_route(SNET, vip, len, NextHop::Service).unwrap();
    }
}

/// The pipeline configuration of the node.
pub fn cfg() -> Config {
    Config {
        uplink_mac: MacAddr(UPLINK_MAC),
        underlay_addr: ME,
        hop_limit: 64,
        underlay_mtu: 1500,
        flow_seed: 0x5eed,
        uplink_hosts: UplinkHosts::new(&[
            (0, EXT_ME4.into(), 24),
            (0, EXT_ME6.into(), 64),
            (EXT_VLAN, EXT_ME4.into(), 24),
        ])
        .expect("three addresses"),
    }
}

/// A pod port record.
pub fn pod(net: NetworkId, mac: [u8; 6], v4: Ipv4Addr, v6: Option<Ipv6Addr>) -> PortInfo {
    PortInfo {
        kind: PortKind::Pod,
        network: net,
        mac: MacAddr(mac),
        ipv4: Some(v4),
        ipv6: v6,
        endpoint: u64::from(mac[5]),
        iface: IfName::new(&format!("pod{}", mac[5])).unwrap(),
        policy: PolicySetId::NONE,
        transit: false,
    }
}

/// A node with two pods in network 7, one in network 8, one in an l2 network, a port whose
/// network is missing, a port that is not up, two remote nodes and every kind of route.
#[derive(Debug)]
pub struct Node {
    /// The tables' writer (kept alive with the node).
    pub writer: TableWriter,
    /// A registered reader.
    pub reader: ReaderHandle,
}

/// Builds the node's tables in a fresh directory under the system temp dir, removed once the
/// writer and the reader have them mapped.
pub fn node() -> Node {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let k = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("lace-pipeline-{}-{k}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tc = TablesConfig {
        dir: dir.clone(),
        name: "t".into(),
        size: 32 << 20,
        reader_slots: 4,
    };
    let mut w = TableWriter::create(&tc).unwrap();
    w.set_srv6_source(ME).unwrap();
    let l3 = |gw4, gw6| NetworkInfo {
        kind: NetworkKind::L3,
        anonymous: false,
        gateway_mac: MacAddr(GW_MAC),
        gateway4: Some(gw4),
        gateway6: gw6,
        mtu: 1460,
        stateful: false,
        l2: L2Settings::default(),
    };
    w.set_network(NET, &l3(GW4, Some(GW6))).unwrap();
    w.set_network(OTHER, &l3(Ipv4Addr::new(10, 8, 1, 1), None))
        .unwrap();
    w.set_network(
        L2NET,
        &NetworkInfo {
            kind: NetworkKind::L2,
            mtu: 1446,
            stateful: false,
            ..l3(L2GW4, Some(L2GW6))
        },
    )
    .unwrap();
    let external = NetworkInfo {
        kind: NetworkKind::External,
        ..l3(Ipv4Addr::new(10, 10, 0, 1), None)
    };
    w.set_network(EXTNET, &external).unwrap();
    external_sources(&mut w, &external);
    w.set_port(A, &pod(NET, MAC_A, A4, Some(A6))).unwrap();
    w.set_port(B, &pod(NET, MAC_B, B4, Some(B6))).unwrap();
    w.set_port(C, &pod(OTHER, MAC_C, C4, None)).unwrap();
    w.set_port(L2POD, &pod(L2NET, MAC_L2, L2_4, Some(L2_6)))
        .unwrap();
    w.set_port(L2B, &pod(L2NET, MAC_L2B, L2B4, None)).unwrap();
    w.set_port(
        EXTPOD,
        &pod(
            EXTNET,
            [2, 0, 0, 0, 0, 8],
            Ipv4Addr::new(10, 10, 0, 2),
            None,
        ),
    )
    .unwrap();
    w.set_port(
        ORPHAN,
        &pod(
            NetworkId(99),
            [2, 0, 0, 0, 0, 5],
            Ipv4Addr::new(10, 99, 0, 2),
            None,
        ),
    )
    .unwrap();
    w.set_port(DOWN, &pod(NET, [2, 0, 0, 0, 0, 6], DOWN4, None))
        .unwrap();
    w.set_network(
        NetworkId::HOST,
        &NetworkInfo {
            gateway_mac: MacAddr(HOST_GW_MAC),
            mtu: 1446,
            ..l3(HOST_GW4, Some(HOST_GW6))
        },
    )
    .unwrap();
    w.set_port(
        HOST,
        &PortInfo {
            kind: PortKind::Host,
            network: NetworkId::HOST,
            mac: MacAddr(HOST_MAC),
            ipv4: None,
            ipv6: None,
            endpoint: 1 << 63 | 42,
            iface: IfName::new("lacehost-fw").unwrap(),
            policy: PolicySetId::NONE,
            transit: false,
        },
    )
    .unwrap();
    let local = |port, mac| NextHop::Local {
        port,
        mac: MacAddr(mac),
    };
    let v4 = |a: Ipv4Addr| IpAddr::V4(a);
    w.add_route(NET, v4(A4), 32, local(A, MAC_A)).unwrap();
    w.add_route(NET, v4(B4), 32, local(B, MAC_B)).unwrap();
    w.add_route(NET, IpAddr::V6(A6), 128, local(A, MAC_A))
        .unwrap();
    w.add_route(NET, IpAddr::V6(B6), 128, local(B, MAC_B))
        .unwrap();
    w.add_route(NET, v4(DOWN4), 32, local(DOWN, [2, 0, 0, 0, 0, 6]))
        .unwrap();
    w.add_route(OTHER, v4(C4), 32, local(C, MAC_C)).unwrap();
    let remote = |node, sid| NextHop::Remote {
        node: NodeId(node),
        sid: Sid(sid),
    };
    w.add_route(NET, v4(Ipv4Addr::new(10, 7, 2, 0)), 24, remote(2, PEER_SID))
        .unwrap();
    w.add_route(NET, "fd07:2::".parse().unwrap(), 64, remote(2, PEER_SID))
        .unwrap();
    w.add_route(
        NET,
        v4(Ipv4Addr::new(10, 7, 3, 0)),
        24,
        remote(3, PEER3_SID),
    )
    .unwrap();
    w.add_route(
        NET,
        v4(Ipv4Addr::new(10, 7, 11, 0)),
        24,
        remote(77, PEER_SID),
    )
    .unwrap();
    w.add_route(NET, v4(Ipv4Addr::new(10, 7, 9, 0)), 24, NextHop::Drop)
        .unwrap();
    w.add_route(
        NET,
        v4(Ipv4Addr::new(10, 7, 8, 0)),
        24,
        NextHop::Unreachable,
    )
    .unwrap();
    // Out of the uplink, through the external network's router.
    w.add_route(
        NET,
        v4(Ipv4Addr::new(10, 7, 10, 0)),
        24,
        NextHop::Uplink {
            port: PortId::UPLINK,
            gateway: EXT_ROUTER4.to_ipv6_mapped(),
            vlan: 0,
        },
    )
    .unwrap();
    // The same router's address on a VLAN: another router.
    w.add_route(
        NET,
        IpAddr::V4(EXT_V_OUT4.0),
        EXT_V_OUT4.1,
        NextHop::Uplink {
            port: PortId::UPLINK,
            gateway: EXT_ROUTER4.to_ipv6_mapped(),
            vlan: EXT_VLAN,
        },
    )
    .unwrap();
    w.add_route(
        NET,
        IpAddr::V6(Ipv6Addr::new(0xfd07, 0x10, 0, 0, 0, 0, 0, 0)),
        64,
        NextHop::Uplink {
            port: PortId::UPLINK,
            gateway: EXT_ROUTER6,
            vlan: 0,
        },
    )
    .unwrap();
    // The host network: every local endpoint, a block's free addresses unreachable; and the
    // node's addresses in network 7, through the host port.
    for (a, len, nh) in [
        (v4(A4), 32, local(A, MAC_A)),
        (IpAddr::V6(A6), 128, local(A, MAC_A)),
        (v4(B4), 32, local(B, MAC_B)),
        (v4(C4), 32, local(C, MAC_C)),
        (v4(L2_4), 32, local(L2POD, MAC_L2)),
        (v4(S3_4), 32, local(S3, MAC_S3)),
        (v4(Ipv4Addr::new(10, 7, 1, 0)), 24, NextHop::Unreachable),
        (v4(HOST_GW4), 32, NextHop::Receive),
        // The node's own addresses: what the forwarder says back to the host goes there.
        (v4(NODE4), 32, local(HOST, HOST_MAC)),
    ] {
        w.add_route(NetworkId::HOST, a, len, nh).unwrap();
    }
    w.add_route(NET, v4(NODE4), 32, local(HOST, HOST_MAC))
        .unwrap();
    w.add_route(NET, IpAddr::V6(NODE6), 128, local(HOST, HOST_MAC))
        .unwrap();
    // The gateway's own addresses, as control installs them: answered by the forwarder.
    w.add_route(NET, v4(GW4), 32, NextHop::Receive).unwrap();
    w.add_route(NET, IpAddr::V6(GW6), 128, NextHop::Receive)
        .unwrap();
    let locator = |n: u16| Ipv6Addr::new(0xfc00, 0, n, 0, 0, 0, 0, 0);
    w.set_node(
        NodeId(2),
        &NodeInfo {
            locator: locator(2),
            locator_len: 48,
            underlay: PEER,
        },
    )
    .unwrap();
    w.set_node(
        NodeId(3),
        &NodeInfo {
            locator: locator(3),
            locator_len: 48,
            underlay: PEER3,
        },
    )
    .unwrap();
    w.set_underlay_neighbor(PEER, MacAddr(PEER_MAC)).unwrap();
    w.set_local_sid(Sid(MY_SID), SidBehavior::EndDt46(NET))
        .unwrap();
    w.set_local_sid(Sid(MY_END_SID), SidBehavior::End).unwrap();
    // The l2 network as control compiles it: every endpoint's addresses in the neighbor
    // table, every MAC in the FDB, the flood list, this node's DT2U and DT2M SIDs.
    for (ip, mac) in [
        (IpAddr::V4(L2_4), MAC_L2),
        (IpAddr::V6(L2_6), MAC_L2),
        (IpAddr::V4(L2B4), MAC_L2B),
        (IpAddr::V4(L2R4), MAC_L2R),
        (IpAddr::V6(L2R6), MAC_L2R),
        (IpAddr::V4(L2GW4), GW_MAC),
        (IpAddr::V6(L2GW6), GW_MAC),
    ] {
        w.set_neighbor(L2NET, ip, MacAddr(mac), false).unwrap();
    }
    let fdb = |target| FdbEntry {
        target,
        seq: 0,
        learned: false,
    };
    w.set_fdb(L2NET, MacAddr(MAC_L2), fdb(FdbTarget::Port(L2POD)))
        .unwrap();
    w.set_fdb(L2NET, MacAddr(MAC_L2B), fdb(FdbTarget::Port(L2B)))
        .unwrap();
    w.set_fdb(
        L2NET,
        MacAddr(MAC_L2R),
        fdb(FdbTarget::Remote {
            node: NodeId(2),
            sid: Sid(PEER_DT2U),
        }),
    )
    .unwrap();
    w.set_flood(
        L2NET,
        &[
            FloodTarget::Port(L2POD),
            FloodTarget::Port(L2B),
            FloodTarget::Remote {
                node: NodeId(2),
                sid: Sid(PEER_DT2M),
            },
            FloodTarget::Remote {
                node: NodeId(3),
                sid: Sid(PEER3_DT2M),
            },
        ],
    )
    .unwrap();
    // Routed traffic of the l2 network (to and from its gateway) takes its FIB.
    w.add_route(L2NET, IpAddr::V4(L2_4), 32, local(L2POD, MAC_L2))
        .unwrap();
    w.add_route(L2NET, IpAddr::V6(L2_6), 128, local(L2POD, MAC_L2))
        .unwrap();
    w.add_route(L2NET, IpAddr::V4(L2GW4), 32, NextHop::Receive)
        .unwrap();
    w.add_route(L2NET, IpAddr::V6(L2GW6), 128, NextHop::Receive)
        .unwrap();
    w.set_local_sid(Sid(MY_DT2U), SidBehavior::EndDt2u(L2NET))
        .unwrap();
    w.set_local_sid(Sid(MY_DT2M), SidBehavior::EndDt2m(L2NET))
        .unwrap();
    w.set_local_sid(Sid(MY_BAD_DT2U), SidBehavior::EndDt2u(NET))
        .unwrap();
    stateful(&mut w);
    learning_network(&mut w);
    w.publish().unwrap();
    let reader = TableReader::attach(&tc).unwrap().register().unwrap();
    // Both ends hold their mappings: the files can go now, so that nothing is left behind even
    // by a process that exits without dropping the node (a fuzz target's, at libFuzzer's end).
    std::fs::remove_dir_all(&dir).unwrap();
    Node { writer: w, reader }
}

/// The l2 network with learning, as control compiles it after the VM announced itself on
/// [`LPOD`] and another MAC was learned on node 2.
fn learning_network(w: &mut TableWriter) {
    w.set_network(
        LNET,
        &NetworkInfo {
            kind: NetworkKind::L2,
            anonymous: false,
            gateway_mac: MacAddr(GW_MAC),
            gateway4: Some(LGW4),
            gateway6: Some(LGW6),
            mtu: 1446,
            l2: L2Settings {
                learning: std::num::NonZeroU32::new(LEARN_AGING),
                bum_pps: LEARN_BUM.0,
                bum_burst: LEARN_BUM.1,
            },
            stateful: false,
        },
    )
    .unwrap();
    w.set_port(LPOD, &pod(LNET, MAC_LPOD, LPOD4, Some(LPOD6)))
        .unwrap();
    w.set_port(LPOD2, &pod(LNET, MAC_LPOD2, LPOD2_4, None))
        .unwrap();
    for (ip, mac, learned) in [
        (IpAddr::V4(LPOD4), MAC_LPOD, false),
        (IpAddr::V6(LPOD6), MAC_LPOD, false),
        (IpAddr::V4(LPOD2_4), MAC_LPOD2, false),
        (IpAddr::V4(VM4), MAC_VM, true),
        (IpAddr::V6(VM6), MAC_VM, true),
        (IpAddr::V4(LGW4), GW_MAC, false),
        (IpAddr::V6(LGW6), GW_MAC, false),
    ] {
        w.set_neighbor(LNET, ip, MacAddr(mac), learned).unwrap();
    }
    let entry = |target, seq, learned| FdbEntry {
        target,
        seq,
        learned,
    };
    w.set_fdb(
        LNET,
        MacAddr(MAC_LPOD),
        entry(FdbTarget::Port(LPOD), 0, false),
    )
    .unwrap();
    w.set_fdb(
        LNET,
        MacAddr(MAC_LPOD2),
        entry(FdbTarget::Port(LPOD2), 0, false),
    )
    .unwrap();
    w.set_fdb(LNET, MacAddr(MAC_VM), entry(FdbTarget::Port(LPOD), 1, true))
        .unwrap();
    w.set_fdb(
        LNET,
        MacAddr(MAC_VMR),
        entry(
            FdbTarget::Remote {
                node: NodeId(2),
                sid: Sid(PEER_L_DT2U),
            },
            3,
            true,
        ),
    )
    .unwrap();
    w.set_flood(
        LNET,
        &[
            FloodTarget::Port(LPOD),
            FloodTarget::Port(LPOD2),
            FloodTarget::Remote {
                node: NodeId(2),
                sid: Sid(PEER_L_DT2M),
            },
        ],
    )
    .unwrap();
    w.add_route(LNET, IpAddr::V4(LGW4), 32, NextHop::Receive)
        .unwrap();
    // The IP path's host routes: this node's addresses, the VM's learned ones too (ADR 0049).
    for (ip, port, mac) in [
        (IpAddr::V4(LPOD4), LPOD, MAC_LPOD),
        (IpAddr::V6(LPOD6), LPOD, MAC_LPOD),
        (IpAddr::V4(LPOD2_4), LPOD2, MAC_LPOD2),
        (IpAddr::V4(VM4), LPOD, MAC_VM),
        (IpAddr::V6(VM6), LPOD, MAC_VM),
    ] {
        let len = if ip.is_ipv4() { 32 } else { 128 };
        let nh = NextHop::Local {
            port,
            mac: MacAddr(mac),
        };
        w.add_route(LNET, ip, len, nh).unwrap();
    }
    w.set_local_sid(Sid(MY_L_DT2U), SidBehavior::EndDt2u(LNET))
        .unwrap();
    w.set_local_sid(Sid(MY_L_DT2M), SidBehavior::EndDt2m(LNET))
        .unwrap();
}
