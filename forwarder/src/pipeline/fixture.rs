//! A small node for packet tests, fuzzing and benches: real shared-memory tables with two pods
//! in an l3 network, a pod in a second network, an l2 network (two local pods, an endpoint on
//! a remote node, its neighbor table, FDB and flood list), a port of an external network, a
//! port whose network is missing, a port that is not up, two remote nodes (one with a static
//! underlay neighbor), local End.DT46, End.DT2U and End.DT2M SIDs and every kind of route.
//! Addresses and ids are the constants below.
#![allow(missing_docs)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lace_shared::tables::{ReaderHandle, TableReader, TableWriter, TablesConfig};
use lace_shared::types::*;

use super::Config;

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

/// The pipeline configuration of the node.
pub fn cfg() -> Config {
    Config {
        uplink_mac: MacAddr(UPLINK_MAC),
        underlay_addr: ME,
        hop_limit: 64,
        underlay_mtu: 1500,
        flow_seed: 0x5eed,
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
    }
}

/// A node with two pods in network 7, one in network 8, one in an l2 network, a port whose
/// network is missing, a port that is not up, two remote nodes and every kind of route.
#[derive(Debug)]
pub struct Node {
    _dir: TempDir,
    /// The tables' writer (kept alive with the node).
    pub writer: TableWriter,
    /// A registered reader.
    pub reader: ReaderHandle,
}

/// A directory removed on drop.
#[derive(Debug)]
pub struct TempDir(std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds the node's tables in a fresh directory under the system temp dir.
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
    };
    w.set_network(NET, &l3(GW4, Some(GW6))).unwrap();
    w.set_network(OTHER, &l3(Ipv4Addr::new(10, 8, 1, 1), None))
        .unwrap();
    w.set_network(
        L2NET,
        &NetworkInfo {
            kind: NetworkKind::L2,
            mtu: 1446,
            ..l3(L2GW4, Some(L2GW6))
        },
    )
    .unwrap();
    w.set_network(
        EXTNET,
        &NetworkInfo {
            kind: NetworkKind::External,
            ..l3(Ipv4Addr::new(10, 10, 0, 1), None)
        },
    )
    .unwrap();
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
    w.add_route(
        NET,
        v4(Ipv4Addr::new(10, 7, 10, 0)),
        24,
        NextHop::Uplink {
            port: PortId::UPLINK,
            gateway: "::ffff:192.0.2.1".parse().unwrap(),
        },
    )
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
    w.publish().unwrap();
    let reader = TableReader::attach(&tc).unwrap().register().unwrap();
    Node {
        _dir: TempDir(dir),
        writer: w,
        reader,
    }
}
