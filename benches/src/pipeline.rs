//! End-to-end forwarding figures: packets from a DPDK `net_null` port through lace-forwarder's
//! real [`Pipeline`] over real shared-memory tables, out to another `net_null` port, beside the
//! plain DPDK null-PMD forward loop measured in the same rounds.
//!
//! Figure ids (cycles per packet, and the same as Mpps on one core):
//!
//! | id | frame | path through the pipeline | anchor |
//! |---|---|---|---|
//! | `dpdk.null_fwd.cycles`, `.mpps` | 64 B | none: `rx_burst` from a null port, `tx_burst` to another | — |
//! | `dpdk.null_fwd_write.cycles`, `.mpps` | 64 B | none: as above plus writing the 64-byte template | `dpdk.null_fwd.*` |
//! | `pipeline.l3_local.cycles`, `.mpps` | 64 B UDP/IPv4 | pod A → pod B on this node: pod-input, ip4-lookup, local-rewrite, tx | `dpdk.null_fwd.*` |
//! | `pipeline.l3_encap.cycles`, `.mpps` | 64 B UDP/IPv4 | pod A → a remote /24: pod-input, ip4-lookup, srv6-encap (H.Encaps.Red, +40 B), underlay-out, tx | `dpdk.null_fwd.*` |
//! | `pipeline.l3_decap.cycles`, `.mpps` | 82 B IPv6(SID) + UDP/IPv4 | uplink → pod B: uplink-input, srv6-decap (End.DT46), ip4-lookup, local-rewrite, tx | `dpdk.null_fwd.*` |
//! | `pipeline.<path>.above_floor` | as the path | the path's cycles minus `dpdk.null_fwd_write.cycles` in the same round (median over rounds): the pipeline's own cost | `dpdk.null_fwd_write.cycles` |
//! | `pipeline.external_in.cycles`, `.mpps` | 64 B UDP/IPv4 | a host of an external network, through the uplink, → a pod behind the remote node: uplink-input (the external network by source, ADR 0054), ip4-lookup in it, srv6-encap, underlay-out, tx | `dpdk.null_fwd.*` |
//! | `pipeline.vlan_out.cycles`, `.mpps` | 64 B UDP/IPv4 | pod A → a host outside, through an external network's router on VLAN 100 of the uplink (ADR 0054): pod-input, ip4-lookup, local-rewrite (the router's MAC), tx (the 802.1Q tag pushed) | `dpdk.null_fwd.*` |
//! | `pipeline.arp_reply.cycles`, `.mpps` | 64 B ARP (42 B + padding) | pod A asks for its gateway: pod-input, arp-reply, tx | `dpdk.null_fwd.*` |
//! | `pipeline.l2_encap.cycles`, `.mpps` | 64 B UDP/IPv4 | l2 pod → the MAC of an endpoint on the remote node: pod-input, l2-forward, l2-encap (H.Encaps.L2.Red, +54 B), underlay-out, tx | `dpdk.null_fwd.*` |
//! | `pipeline.l2_decap.cycles`, `.mpps` | 118 B IPv6(DT2U SID) + the 64 B frame | uplink → l2 pod: uplink-input, l2-decap (End.DT2U), l2-forward, tx | `dpdk.null_fwd.*` |
//! | `pipeline.arp_proxy.cycles`, `.mpps` | 64 B ARP | l2 pod asks for the remote endpoint's address: pod-input, arp-reply (answered from the neighbor table), tx | `dpdk.null_fwd.*` |
//! | `pipeline.nd_proxy.cycles`, `.mpps` | 86 B NS (+ 32 B Ethernet padding: the 118 B port) | l2 pod solicits the remote endpoint's IPv6 address: pod-input, nd-reply (NA built in place), tx | `dpdk.null_fwd.*` |
//! | `pipeline.l2_flood.cycles`, `.mpps`, `.cycles_per_copy` | 64 B UDP/IPv4 broadcast | l2 pod → everyone: pod-input, l2-flood, three copies (the other local pod; nodes 2 and 3 at their End.DT2M SIDs: l2-encap, underlay-out), tx; BUM limit off | `dpdk.null_fwd.*` |
//! | `pipeline.l3_encap.scaling_2w` | 64 B | l3_encap throughput with two workers ÷ with one | `pipeline.scaling_2w.ideal` (2.0) |
//! | `pipeline.l3_encap.mpps_1w`, `.mpps_2w` | 64 B | the two throughputs behind it (Mpps, both workers together) | — |
//! | `churn.100k_per_s.l3_encap.cycles` | 64 B | l3_encap while a writer thread moves routes between two remote nodes, 100,000 changes per second (100 per publication), the packets' route among them | `churn.quiet.l3_encap.cycles` |
//! | `churn.quiet.l3_encap.cycles` | 64 B | l3_encap in the rounds alternating with those, the writer paused | — |
//!
//! How: each worker owns a mempool and three `net_null` ports (hot-plugged): RX with
//! `size=64`, RX with `size=82` (the decap frame: 14 + 40 + 20 + 8 bytes, the smallest valid
//! End.DT46 packet), and a TX port with one queue per output (the anchor's, the uplink's, pod
//! A's, pod B's). A burst is: `rx_burst` of 32 mbufs (net_null hands out mbufs of `size` bytes
//! without touching their data), the path's precomputed frame copied into each (standing in for
//! the NIC's DMA), a table [`Snapshot`](lace_shared::tables::Snapshot) taken,
//! [`Pipeline::process`], the per-port [`Burst`]s drained with `tx_burst`, and a quiescent point
//! — what a forwarder worker does per burst. One round is many bursts timed with the TSC; the
//! anchor and the four paths run in alternating rounds (round-robin) so machine noise hits all
//! alike; the median round is reported.
//!
//! Before timing, and after every timed round, the pipeline's counters must show that every
//! packet went through exactly the stages of its path and out of the expected port, with no
//! drop: otherwise the run fails naming the drop reasons, so a figure never measures the drop
//! path by accident.
//!
//! Scaling: the main lcore and one worker lcore (another CPU) each run the encap loop on their
//! own ports, mempool, pipeline and reader handle, for the same TSC window; packets of both ÷
//! window, against the main lcore alone, in alternating rounds.
//!
//! Churn: as control does when routes move, a thread (on another CPU when there is one) stages
//! 100 route changes and publishes them, paced to 100,000 changes per second, over 257 /24s
//! (the encap frame's among them) alternating between the two remote nodes, while the main
//! lcore runs timed l3_encap rounds, alternately with the writer running and paused; the counters are checked as above (every packet still
//! encapsulated, no drop). The test `route_churn_never_misforwards` checks each packet's outer
//! destination against its snapshot's route.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use lace_forwarder::dpdk::{self as fwd, Burst, Mbuf, Mempool, Port, PortConfig, RxQueue, TxQueue};
use lace_forwarder::pipeline::{
    Config, Counters, CtTimeouts, Io, Neighbor, Pipeline, Stage, UnderlayNeighbors,
};
use lace_forwarder::wire::checksum;
use lace_shared::flow::{FlowCache, FlowCounts, FlowKey, FlowTable, FlowView, Origin};
use lace_shared::policy::{
    maglev_size, maglev_table, Backend, BackendState, PeerClass, PolicyDir, PolicySet, PolicySetId,
    PortRange, Ports, ServiceInfo, ServiceKey, PROTO_TCP,
};
use lace_shared::status::DropReason;
use lace_shared::tables::{ReaderHandle, TableReader, TableWriter, TablesConfig};
use lace_shared::types::{
    FdbEntry, FdbTarget, FloodTarget, IfName, L2Settings, MacAddr, NetworkId, NetworkInfo,
    NetworkKind, NextHop, NodeId, NodeInfo, PortId, PortInfo, PortKind, Sid, SidBehavior,
};

use crate::dpdk::Eal;
use crate::report::{median, rdtsc, tsc_hz, Direction, Figure, Scale};

// ---- the node ----------------------------------------------------------------------------------

const NET: NetworkId = NetworkId(1);
/// An external network (ADR 0054): its hosts reach the remote node's /24 of [`NET`].
const EXTNET: NetworkId = NetworkId(4);
/// The node's address on it, through the uplink.
const EXT_ME4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
/// A host of it, behind its router.
const EXT_HOST4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 5);
const EXT_ROUTER_MAC: [u8; 6] = [0x02, 0xee, 0, 0, 0, 1];
/// The uplink's VLAN of another external network: the node has [`EXT_ME4`] there too, and
/// pods of [`NET`] reach [`EXT_OUT4`] through its router [`EXT_ROUTER4`] (of MAC
/// [`EXT_ROUTER_MAC`]).
const EXT_VLAN: u16 = 100;
const EXT_ROUTER4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const EXT_OUT4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 9);
const GW_MAC: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 1];
const GW4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const GW6: Ipv6Addr = Ipv6Addr::new(0xfd01, 0, 0, 0, 0, 0, 0, 1);
const POD_A: PortId = PortId(1);
const POD_B: PortId = PortId(2);
const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const A4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
const B4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 3);
/// A pod on the remote node, inside its /24.
const REMOTE4: Ipv4Addr = Ipv4Addr::new(10, 1, 2, 5);
const REMOTE_NODE: NodeId = NodeId(2);
/// The second remote node, to which churned routes move.
const REMOTE_NODE3: NodeId = NodeId(3);
const UPLINK_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 2];
/// This node's underlay address.
const ME: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xa);
/// The remote node's underlay address.
const PEER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xb);
/// This node's End.DT46 SID for [`NET`].
const MY_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 1, 0, 0, 0, 0);
/// The remote node's End.DT46 SID for [`NET`].
const PEER_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 1, 0, 0, 0, 0);
/// The l2 network, its two pods and the endpoint behind the remote node.
const L2NET: NetworkId = NetworkId(2);
const POD_L2A: PortId = PortId(3);
const POD_L2B: PortId = PortId(4);
const MAC_L2A: [u8; 6] = [0x02, 0, 0, 0, 2, 3];
const MAC_L2B: [u8; 6] = [0x02, 0, 0, 0, 2, 4];
const MAC_L2R: [u8; 6] = [0x02, 0, 0, 0, 2, 9];
const L2A4: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 2);
const L2A6: Ipv6Addr = Ipv6Addr::new(0xfd02, 0, 0, 0, 0, 0, 0, 2);
const L2B4: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 3);
const L2R4: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 9);
const L2R6: Ipv6Addr = Ipv6Addr::new(0xfd02, 0, 0, 0, 0, 0, 0, 9);
const L2GW_MAC: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 2];
/// This node's End.DT2U SID for [`L2NET`], and the remote nodes' End.DT2U / End.DT2M.
const MY_DT2U: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 0xe020, 0, 0, 0, 2);
const PEER_DT2U: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 0xe020, 0, 0, 0, 2);
const PEER_DT2M: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 0xe02f, 0, 0, 0, 2);
const PEER3_DT2M: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 3, 0xe02f, 0, 0, 0, 2);
/// The second remote node's underlay address, MAC and End.DT46 SID.
const PEER3: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xc);
const PEER3_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 3];
const PEER3_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 3, 1, 0, 0, 0, 0);

// The stateful network (connection tracking: NetworkPolicy and a ClusterIP Service).
const SNET: NetworkId = NetworkId(3);
const SGW4: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 1);
/// The pod of the ct_hit figure: it reaches the Service's ClusterIP.
const POD_S: PortId = PortId(5);
/// The pod of the new-connection figure: every packet a connection of its own.
const POD_N: PortId = PortId(6);
const MAC_S: [u8; 6] = [0x02, 0, 0, 0, 3, 5];
const MAC_N: [u8; 6] = [0x02, 0, 0, 0, 3, 6];
const S4: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 2);
const N4: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 3);
/// The stateful network's pods on the remote node (peer class [`REMOTE_CLASS`]).
const SREMOTE_BLOCK: Ipv4Addr = Ipv4Addr::new(10, 3, 2, 0);
const REMOTE_CLASS: PeerClass = PeerClass(2);
/// The Service's ClusterIP (TCP 80) and its one backend on the remote node (TCP 8080).
const VIP4: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
const BACKEND4: Ipv4Addr = Ipv4Addr::new(10, 3, 2, 5);
const BACKEND_PORT: u16 = 8080;
/// The remote node's End.DT46 SID for [`SNET`].
const PEER_SSID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 2, 3, 0, 0, 0, 0);
/// The policy set of both pods: isolated for ingress and egress; egress allowed to the remote
/// block on TCP 8080 (and to nothing else).
const SET: PolicySetId = PolicySetId(1);
/// This node's End.DT46 SID for [`SNET`]: the policy figures' packets come from the remote
/// node's pods through it.
const MY_SSID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0, 1, 3, 0, 0, 0, 0);
/// The pods of the policy figures, isolated for ingress: H (the policy_hit connection's) and D
/// (policy_new's) by [`SET_1K`], E (policy_new_1rule's) by [`SET_1`].
const POD_H: PortId = PortId(7);
const POD_D: PortId = PortId(8);
const POD_E: PortId = PortId(9);
const MAC_H: [u8; 6] = [0x02, 0, 0, 0, 3, 7];
const MAC_D: [u8; 6] = [0x02, 0, 0, 0, 3, 8];
const MAC_E: [u8; 6] = [0x02, 0, 0, 0, 3, 9];
const H4: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 4);
const D4: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 5);
const E4: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 6);
/// The remote pod of the policy_hit connection (its source port [`CT_SPORT`]); the policy_new
/// connections come from 10.3.2.1 … 10.3.2.250, so never from it.
const R4: Ipv4Addr = Ipv4Addr::new(10, 3, 2, 251);
/// Rules of the 1,000-rule set: rule i (i < [`RULES`]) is `from: [ipBlock 10.3.2.0/24]`,
/// `ports: [TCP 10000 + 2i]`.
const RULES: u16 = 1000;
/// The port of the last rule, which every policy connection goes to.
const POLICY_PORT: u16 = rule_port(RULES - 1);
/// The set of the 1,000 rules (pods H and D): isolated for ingress, one decision for the remote
/// block's class — the union of the rules' ports, as control compiles it: 1,000 ranges (no two
/// adjacent, so none merge) in a chain of 112 port-set records.
const SET_1K: PolicySetId = PolicySetId(2);
/// The set of the one rule (pod E): the 1,000-rule set's last rule alone.
const SET_1: PolicySetId = PolicySetId(3);

/// The TCP port rule `i` of the 1,000-rule set allows.
const fn rule_port(i: u16) -> u16 {
    10_000 + 2 * i
}

/// What the 1,000-rule set's rules `first..RULES` allow together, as control compiles a
/// decision: the union of their ports.
fn rules(first: u16) -> Ports {
    Ports::Ranges(
        (first..RULES)
            .map(|i| PortRange {
                proto: PROTO_TCP,
                lo: rule_port(i),
                hi: rule_port(i),
            })
            .collect(),
    )
}

/// Connections the flow table holds: the forwarder's default (`conntrack.max_flows`).
pub const FLOWS: u32 = lace_forwarder::engine::config::DEFAULT_MAX_FLOWS;

/// The pipeline configuration of the node.
fn config() -> Config {
    Config {
        uplink_mac: MacAddr(UPLINK_MAC),
        underlay_addr: ME,
        hop_limit: 64,
        underlay_mtu: 1500,
        flow_seed: 0x1ace,
        uplink_hosts: lace_forwarder::pipeline::UplinkHosts::new(&[
            (0, EXT_ME4.into(), 24),
            (EXT_VLAN, EXT_ME4.into(), 24),
        ])
        .expect("two addresses"),
    }
}

/// A directory removed on drop.
#[derive(Debug)]
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The node's tables on `/dev/shm`: one l3 network with two local pods, two remote nodes with
/// static underlay neighbors and a /24 behind the first's End.DT46 SID, and this node's
/// End.DT46 SID; a stateful network (connection tracking) with two pods under a NetworkPolicy
/// set, a /24 on the first remote node and a ClusterIP Service whose backend is there; a flow
/// table of the forwarder's default size.
#[derive(Debug)]
struct Node {
    reader: Arc<TableReader>,
    // Declared after `reader`: the files go once nothing maps them any more.
    writer: TableWriter,
    /// The node's flow table (every worker's pipeline tracks connections in it).
    flows: Arc<FlowTable>,
    _dir: TempDir,
}

impl Node {
    fn create() -> anyhow::Result<Node> {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("lace-bench-pipeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = TempDir(dir);
        let tc = TablesConfig {
            dir: dir.0.clone(),
            name: "pipeline".into(),
            size: 64 << 20,
            reader_slots: 8,
        };
        let mut w = TableWriter::create(&tc)?;
        w.set_srv6_source(ME)?;
        w.set_network(
            NET,
            &NetworkInfo {
                kind: NetworkKind::L3,
                anonymous: false,
                gateway_mac: MacAddr(GW_MAC),
                gateway4: Some(GW4),
                gateway6: Some(GW6),
                mtu: 1460,
                stateful: false,
                l2: L2Settings::default(),
            },
        )?;
        for (port, mac, ip) in [(POD_A, MAC_A, A4), (POD_B, MAC_B, B4)] {
            w.set_port(
                port,
                &PortInfo {
                    kind: PortKind::Pod,
                    network: NET,
                    mac: MacAddr(mac),
                    ipv4: Some(ip),
                    ipv6: None,
                    endpoint: u64::from(port.0),
                    iface: IfName::new(&format!("pod{}", port.0))?,
                    policy: lace_shared::policy::PolicySetId::NONE,
                    transit: false,
                },
            )?;
            w.add_route(
                NET,
                ip.into(),
                32,
                NextHop::Local {
                    port,
                    mac: MacAddr(mac),
                },
            )?;
        }
        w.set_node(
            REMOTE_NODE,
            &NodeInfo {
                locator: Ipv6Addr::new(0xfc00, 0, 2, 0, 0, 0, 0, 0),
                locator_len: 48,
                underlay: PEER,
            },
        )?;
        w.set_underlay_neighbor(PEER, MacAddr(PEER_MAC))?;
        w.set_node(
            REMOTE_NODE3,
            &NodeInfo {
                locator: Ipv6Addr::new(0xfc00, 0, 3, 0, 0, 0, 0, 0),
                locator_len: 48,
                underlay: PEER3,
            },
        )?;
        w.set_underlay_neighbor(PEER3, MacAddr(PEER3_MAC))?;
        remote_block(&mut w, NET)?;
        w.set_local_sid(Sid(MY_SID), SidBehavior::EndDt46(NET))?;
        l2_network(&mut w)?;
        stateful(&mut w)?;
        external_network(&mut w)?;
        w.publish()?;
        let reader = TableReader::attach(&tc)?;
        Ok(Node {
            reader,
            writer: w,
            flows: Arc::new(FlowTable::in_memory(FLOWS)?),
            _dir: dir,
        })
    }
}

/// An external network's tables (ADR 0054): its prefix, among other external networks' in the
/// sources table; in its FIB, the remote node's /24 of [`NET`] (as a routing policy opens it).
fn external_network(w: &mut TableWriter) -> anyhow::Result<()> {
    let info = NetworkInfo {
        kind: NetworkKind::External,
        anonymous: false,
        gateway_mac: MacAddr(GW_MAC),
        gateway4: None,
        gateway6: None,
        mtu: 1500,
        stateful: false,
        l2: L2Settings::default(),
    };
    w.set_network(EXTNET, &info)?;
    w.set_network(NetworkId::EXTERNAL_SOURCES, &info)?;
    let sources = NetworkId::EXTERNAL_SOURCES;
    w.add_route(
        sources,
        Ipv4Addr::new(203, 0, 113, 0).into(),
        24,
        NextHop::Network { net: EXTNET },
    )?;
    // Other external networks' prefixes (their networks are not measured).
    for (i, net) in (0..8u8).zip(10..) {
        w.add_route(
            sources,
            Ipv4Addr::new(198, 51, 100 + i, 0).into(),
            24,
            NextHop::Network {
                net: NetworkId(net),
            },
        )?;
    }
    remote_block(w, EXTNET)?;
    // Out of the uplink on a VLAN, as routing policy toward a network carried there opens it.
    w.add_route(
        NET,
        Ipv4Addr::new(198, 18, 0, 0).into(),
        16,
        NextHop::Uplink {
            port: PortId::UPLINK,
            gateway: EXT_ROUTER4.to_ipv6_mapped(),
            vlan: EXT_VLAN,
        },
    )?;
    Ok(())
}

/// In `net`'s FIB, the remote node's /24 of [`NET`] ([`REMOTE4`] is in it), to its End.DT46
/// SID.
fn remote_block(w: &mut TableWriter, net: NetworkId) -> anyhow::Result<()> {
    w.add_route(
        net,
        Ipv4Addr::new(10, 1, 2, 0).into(),
        24,
        NextHop::Remote {
            node: REMOTE_NODE,
            sid: Sid(PEER_SID),
        },
    )?;
    Ok(())
}

/// The l2 network as control compiles it: two local pods, an endpoint behind node 2, every
/// address in the neighbor table, every MAC in the FDB, the flood list (the two pods, nodes 2
/// and 3), this node's End.DT2U SID; no learning and no BUM limit (the flood figure measures
/// replication, not the bucket).
fn l2_network(w: &mut TableWriter) -> anyhow::Result<()> {
    w.set_network(
        L2NET,
        &NetworkInfo {
            kind: NetworkKind::L2,
            anonymous: false,
            gateway_mac: MacAddr(L2GW_MAC),
            gateway4: Some(Ipv4Addr::new(10, 2, 0, 1)),
            gateway6: Some(Ipv6Addr::new(0xfd02, 0, 0, 0, 0, 0, 0, 1)),
            mtu: 1446,
            l2: L2Settings {
                learning: None,
                bum_pps: 0,
                bum_burst: 1,
            },
            stateful: false,
        },
    )?;
    for (port, mac, ip4, ip6) in [
        (POD_L2A, MAC_L2A, L2A4, Some(L2A6)),
        (POD_L2B, MAC_L2B, L2B4, None),
    ] {
        w.set_port(
            port,
            &PortInfo {
                kind: PortKind::Pod,
                network: L2NET,
                mac: MacAddr(mac),
                ipv4: Some(ip4),
                ipv6: ip6,
                endpoint: u64::from(port.0),
                iface: IfName::new(&format!("pod{}", port.0))?,
                policy: lace_shared::policy::PolicySetId::NONE,
                transit: false,
            },
        )?;
        w.set_fdb(
            L2NET,
            MacAddr(mac),
            FdbEntry {
                target: FdbTarget::Port(port),
                seq: 0,
                learned: false,
            },
        )?;
    }
    w.set_fdb(
        L2NET,
        MacAddr(MAC_L2R),
        FdbEntry {
            target: FdbTarget::Remote {
                node: REMOTE_NODE,
                sid: Sid(PEER_DT2U),
            },
            seq: 0,
            learned: false,
        },
    )?;
    for (ip, mac) in [
        (IpAddr::V4(L2A4), MAC_L2A),
        (IpAddr::V6(L2A6), MAC_L2A),
        (IpAddr::V4(L2B4), MAC_L2B),
        (IpAddr::V4(L2R4), MAC_L2R),
        (IpAddr::V6(L2R6), MAC_L2R),
    ] {
        w.set_neighbor(L2NET, ip, MacAddr(mac), false)?;
    }
    w.set_flood(
        L2NET,
        &[
            FloodTarget::Port(POD_L2A),
            FloodTarget::Port(POD_L2B),
            FloodTarget::Remote {
                node: REMOTE_NODE,
                sid: Sid(PEER_DT2M),
            },
            FloodTarget::Remote {
                node: REMOTE_NODE3,
                sid: Sid(PEER3_DT2M),
            },
        ],
    )?;
    w.set_local_sid(Sid(MY_DT2U), SidBehavior::EndDt2u(L2NET))?;
    Ok(())
}

/// Programs the stateful network: pods S and N (policy set [`SET`]), H and D ([`SET_1K`]) and E
/// ([`SET_1`]), the remote node's block (peer class [`REMOTE_CLASS`]), the Service
/// `VIP4:80/TCP → BACKEND4:8080` and this node's End.DT46 SID of the network.
fn stateful(w: &mut TableWriter) -> anyhow::Result<()> {
    w.set_network(
        SNET,
        &NetworkInfo {
            kind: NetworkKind::L3,
            anonymous: false,
            gateway_mac: MacAddr(GW_MAC),
            gateway4: Some(SGW4),
            gateway6: None,
            mtu: 1460,
            stateful: true,
            l2: L2Settings::default(),
        },
    )?;
    for (port, mac, ip, policy) in [
        (POD_S, MAC_S, S4, SET),
        (POD_N, MAC_N, N4, SET),
        (POD_H, MAC_H, H4, SET_1K),
        (POD_D, MAC_D, D4, SET_1K),
        (POD_E, MAC_E, E4, SET_1),
    ] {
        w.set_port(
            port,
            &PortInfo {
                kind: PortKind::Pod,
                network: SNET,
                mac: MacAddr(mac),
                ipv4: Some(ip),
                ipv6: None,
                endpoint: u64::from(port.0),
                iface: IfName::new(&format!("pod{}", port.0))?,
                policy,
                transit: false,
            },
        )?;
        w.add_route(
            SNET,
            ip.into(),
            32,
            NextHop::Local {
                port,
                mac: MacAddr(mac),
            },
        )?;
    }
    w.add_route(
        SNET,
        SREMOTE_BLOCK.into(),
        24,
        NextHop::Remote {
            node: REMOTE_NODE,
            sid: Sid(PEER_SSID),
        },
    )?;
    w.set_peer_prefix(SNET, SREMOTE_BLOCK.into(), 24, REMOTE_CLASS)?;
    w.set_policy_set(
        SET,
        &PolicySet {
            network: SNET,
            ingress_isolated: true,
            egress_isolated: true,
        },
    )?;
    for (set, ports) in [(SET_1K, rules(0)), (SET_1, rules(RULES - 1))] {
        w.set_policy_set(
            set,
            &PolicySet {
                network: SNET,
                ingress_isolated: true,
                egress_isolated: false,
            },
        )?;
        w.set_decision(set, PolicyDir::Ingress, REMOTE_CLASS, &ports)?;
    }
    w.set_local_sid(Sid(MY_SSID), SidBehavior::EndDt46(SNET))?;
    w.set_decision(
        SET,
        PolicyDir::Egress,
        REMOTE_CLASS,
        &Ports::Ranges(vec![PortRange {
            proto: PROTO_TCP,
            lo: BACKEND_PORT,
            hi: BACKEND_PORT,
        }]),
    )?;
    let backend = Backend {
        addr: BACKEND4.into(),
        port: BACKEND_PORT,
        state: BackendState {
            ready: true,
            serving: true,
            terminating: false,
        },
    };
    let name = format!("{BACKEND4}:{BACKEND_PORT}");
    w.set_service(
        ServiceKey::new(SNET, VIP4.into(), PROTO_TCP, 80),
        &ServiceInfo {
            affinity_timeout_s: None,
            backends: vec![backend],
            table: maglev_table(&[&name], maglev_size(1)),
            node_local: false,
        },
    )?;
    w.add_route(SNET, VIP4.into(), 32, NextHop::Service)?;
    Ok(())
}

// ---- frames ------------------------------------------------------------------------------------

/// The measured paths through the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Pod A → pod B on this node (64-byte UDP/IPv4).
    L3Local,
    /// Pod A → a pod behind the remote node: SRv6 H.Encaps.Red (64-byte UDP/IPv4 in).
    L3Encap,
    /// From the uplink to this node's End.DT46 SID, inner packet to pod B (82 bytes in).
    L3Decap,
    /// A host of an external network, through the uplink, → a pod behind the remote node:
    /// classified by source, looked up in the external network, SRv6 H.Encaps.Red (64-byte
    /// UDP/IPv4 in).
    ExternalIn,
    /// Pod A → a host behind an external network's router on a VLAN of the uplink: the
    /// route's gateway resolved, the frame rewritten to it and tagged.
    VlanOut,
    /// Pod A's ARP request for its gateway, answered in place (64 bytes, padded).
    ArpReply,
    /// l2 pod → the MAC of the endpoint behind node 2: H.Encaps.L2.Red (64-byte UDP/IPv4 in).
    L2Encap,
    /// From the uplink to this node's End.DT2U SID, the inner frame to the l2 pod (118 in).
    L2Decap,
    /// The l2 pod's ARP request for the remote endpoint's address, answered in place.
    ArpProxy,
    /// The l2 pod's neighbor solicitation for the remote endpoint's IPv6 address, answered.
    NdProxy,
    /// The l2 pod's broadcast, replicated to three members.
    L2Flood,
    /// Pod S → the Service's ClusterIP, on a tracked connection (64-byte TCP/IPv4 ACK): a
    /// flow-table hit in S's zone, DNAT to the backend, lookup again, SRv6 encap.
    CtHit,
    /// Pod N → a pod behind the remote node, every packet a new connection (64-byte TCP/IPv4
    /// SYN, its source port and destination varied per packet): policy classification, a new
    /// flow-table entry, SRv6 encap.
    CtNew,
    /// From the uplink to this node's End.DT46 SID of the stateful network, the inner packet
    /// to pod H on a connection tracked in H's zone (118 bytes in, a TCP/IPv4 ACK inside):
    /// srv6-decap, a flow-table hit in H's zone (the 1,000-rule set's verdict), delivery.
    PolicyHit,
    /// As `PolicyHit` to pod D, every packet a new connection (a SYN, its source address and
    /// port varied per packet): classified against the 1,000-rule set, entered, delivered.
    PolicyNew,
    /// As `PolicyNew` to pod E, classified against the 1-rule set.
    PolicyNew1,
}

/// Copies of each flooded frame: the other local pod, nodes 2 and 3.
pub const FLOOD_COPIES: u64 = 3;

impl Path {
    /// Every path, in report order (the variants' order: templates are kept by discriminant,
    /// these first, then [`Path::CT`], then [`Path::POLICY`]).
    pub const ALL: [Path; 11] = [
        Path::L3Local,
        Path::L3Encap,
        Path::L3Decap,
        Path::ExternalIn,
        Path::VlanOut,
        Path::ArpReply,
        Path::L2Encap,
        Path::L2Decap,
        Path::ArpProxy,
        Path::NdProxy,
        Path::L2Flood,
    ];
    /// The connection-tracking paths.
    pub const CT: [Path; 2] = [Path::CtHit, Path::CtNew];
    /// The NetworkPolicy paths (ingress on this node).
    pub const POLICY: [Path; 3] = [Path::PolicyHit, Path::PolicyNew, Path::PolicyNew1];

    /// The figure-id component.
    pub const fn name(self) -> &'static str {
        match self {
            Path::L3Local => "l3_local",
            Path::L3Encap => "l3_encap",
            Path::L3Decap => "l3_decap",
            Path::ExternalIn => "external_in",
            Path::VlanOut => "vlan_out",
            Path::ArpReply => "arp_reply",
            Path::L2Encap => "l2_encap",
            Path::L2Decap => "l2_decap",
            Path::ArpProxy => "arp_proxy",
            Path::NdProxy => "nd_proxy",
            Path::L2Flood => "l2_flood",
            Path::CtHit => "ct_hit",
            Path::CtNew => "ct_new",
            Path::PolicyHit => "policy_hit",
            Path::PolicyNew => "policy_new",
            Path::PolicyNew1 => "policy_new_1rule",
        }
    }

    /// Bytes of each received frame (the null port's `size`).
    pub const fn frame_len(self) -> usize {
        match self {
            Path::L3Decap => DECAP_LEN,
            Path::L2Decap | Path::NdProxy => L2_DECAP_LEN,
            Path::PolicyHit | Path::PolicyNew | Path::PolicyNew1 => POLICY_LEN,
            _ => FRAME_LEN,
        }
    }

    /// The port the frames arrive on.
    const fn rx_port(self) -> PortId {
        match self {
            Path::L3Decap
            | Path::ExternalIn
            | Path::L2Decap
            | Path::PolicyHit
            | Path::PolicyNew
            | Path::PolicyNew1 => PortId::UPLINK,
            Path::L2Encap | Path::ArpProxy | Path::NdProxy | Path::L2Flood => POD_L2A,
            Path::CtHit => POD_S,
            Path::CtNew => POD_N,
            _ => POD_A,
        }
    }

    /// The ports the packets leave on, and how many per packet received.
    const fn tx_ports(self) -> &'static [(PortId, u64)] {
        match self {
            Path::L3Local | Path::L3Decap => &[(POD_B, 1)],
            Path::L3Encap
            | Path::ExternalIn
            | Path::VlanOut
            | Path::L2Encap
            | Path::CtHit
            | Path::CtNew => &[(PortId::UPLINK, 1)],
            Path::ArpReply => &[(POD_A, 1)],
            Path::L2Decap | Path::ArpProxy | Path::NdProxy => &[(POD_L2A, 1)],
            Path::L2Flood => &[(POD_L2B, 1), (PortId::UPLINK, FLOOD_COPIES - 1)],
            Path::PolicyHit => &[(POD_H, 1)],
            Path::PolicyNew => &[(POD_D, 1)],
            Path::PolicyNew1 => &[(POD_E, 1)],
        }
    }

    /// The zone a tracked path's connections are in: the sending pod's (egress), or from the
    /// uplink the receiving pod's (ingress).
    fn zone(self) -> PortId {
        match self.rx_port() {
            PortId::UPLINK => self.tx_ports()[0].0,
            pod => pod,
        }
    }

    /// Where a new-connection path's frames differ per connection ([`vary_connection`]): the
    /// offset of the IPv4 header and of the remote end's address in it — the destination of a
    /// pod's connection, the source of one from the uplink. `None`: the path opens none.
    const fn varied(self) -> Option<(usize, usize)> {
        match self {
            Path::CtNew => Some((14, 16)),
            Path::PolicyNew | Path::PolicyNew1 => Some((POLICY_L3, 12)),
            _ => None,
        }
    }

    /// Whether every packet of the path is a new connection.
    const fn opens_each(self) -> bool {
        self.varied().is_some()
    }

    /// How many times each packet passes `s` (a flooded frame's copies pass the nodes after
    /// l2-flood each).
    fn passes(self, s: Stage) -> u64 {
        match (self, s) {
            (Path::L2Flood, Stage::Tx) => FLOOD_COPIES,
            (Path::L2Flood, Stage::L2Encap | Stage::UnderlayOut) => FLOOD_COPIES - 1,
            _ => self.stages().iter().filter(|&&p| p == s).count() as u64,
        }
    }

    /// The stages every packet must go through (as often as listed), and no others.
    const fn stages(self) -> &'static [Stage] {
        match self {
            Path::L3Local | Path::VlanOut => &[
                Stage::PodInput,
                Stage::Ip4Lookup,
                Stage::LocalRewrite,
                Stage::Tx,
            ],
            Path::L3Encap => &[
                Stage::PodInput,
                Stage::Ip4Lookup,
                Stage::Srv6Encap,
                Stage::UnderlayOut,
                Stage::Tx,
            ],
            Path::L3Decap => &[
                Stage::UplinkInput,
                Stage::Srv6Decap,
                Stage::Ip4Lookup,
                Stage::LocalRewrite,
                Stage::Tx,
            ],
            Path::ExternalIn => &[
                Stage::UplinkInput,
                Stage::Ip4Lookup,
                Stage::Srv6Encap,
                Stage::UnderlayOut,
                Stage::Tx,
            ],
            Path::ArpReply | Path::ArpProxy => &[Stage::PodInput, Stage::ArpReply, Stage::Tx],
            Path::L2Encap => &[
                Stage::PodInput,
                Stage::L2Forward,
                Stage::L2Encap,
                Stage::UnderlayOut,
                Stage::Tx,
            ],
            Path::L2Decap => &[
                Stage::UplinkInput,
                Stage::L2Decap,
                Stage::L2Forward,
                Stage::Tx,
            ],
            Path::NdProxy => &[Stage::PodInput, Stage::NdReply, Stage::Tx],
            Path::L2Flood => &[
                Stage::PodInput,
                Stage::L2Flood,
                Stage::L2Encap,
                Stage::UnderlayOut,
                Stage::Tx,
            ],
            // The ClusterIP's route leads to conntrack; the translated packet is looked up again.
            Path::CtHit => &[
                Stage::PodInput,
                Stage::Ip4Lookup,
                Stage::Conntrack,
                Stage::Ip4Lookup,
                Stage::Srv6Encap,
                Stage::UnderlayOut,
                Stage::Tx,
            ],
            Path::CtNew => &[
                Stage::PodInput,
                Stage::Ip4Lookup,
                Stage::Conntrack,
                Stage::Srv6Encap,
                Stage::UnderlayOut,
                Stage::Tx,
            ],
            // The pod's port is tracked: the lookup hands the packet to conntrack (its ingress
            // zone), which hands it to local-rewrite.
            Path::PolicyHit | Path::PolicyNew | Path::PolicyNew1 => &[
                Stage::UplinkInput,
                Stage::Srv6Decap,
                Stage::Ip4Lookup,
                Stage::Conntrack,
                Stage::LocalRewrite,
                Stage::Tx,
            ],
        }
    }

    /// The frame written into every received mbuf.
    fn template(self) -> Vec<u8> {
        match self {
            Path::L3Local => udp4_frame(MAC_A, GW_MAC, A4, B4, FRAME_LEN),
            Path::L3Encap => udp4_frame(MAC_A, GW_MAC, A4, REMOTE4, FRAME_LEN),
            Path::ExternalIn => {
                udp4_frame(EXT_ROUTER_MAC, UPLINK_MAC, EXT_HOST4, REMOTE4, FRAME_LEN)
            }
            Path::VlanOut => udp4_frame(MAC_A, GW_MAC, A4, EXT_OUT4, FRAME_LEN),
            Path::L3Decap => encapsulated(
                MY_SID,
                &udp4_frame(PEER_MAC, UPLINK_MAC, REMOTE4, B4, 14 + 28),
            ),
            Path::ArpReply => {
                let mut f = eth([0xff; 6], MAC_A, 0x0806);
                f.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]); // Ethernet/IPv4, request
                f.extend_from_slice(&MAC_A);
                f.extend_from_slice(&A4.octets());
                f.extend_from_slice(&[0; 6]);
                f.extend_from_slice(&GW4.octets());
                f.resize(FRAME_LEN, 0); // Ethernet padding
                f
            }
            Path::L2Encap => udp4_frame(MAC_L2A, MAC_L2R, L2A4, L2R4, FRAME_LEN),
            Path::L2Decap => {
                // Node 2's H.Encaps.L2.Red: outer IPv6 to our DT2U SID, the frame whole.
                let inner = udp4_frame(MAC_L2R, MAC_L2A, L2R4, L2A4, FRAME_LEN);
                let mut f = eth(UPLINK_MAC, PEER_MAC, 0x86dd);
                f.extend_from_slice(&ipv6_header(FRAME_LEN as u16, 143, PEER, MY_DT2U));
                f.extend_from_slice(&inner);
                debug_assert_eq!(f.len(), L2_DECAP_LEN);
                f
            }
            Path::ArpProxy => {
                let mut f = eth([0xff; 6], MAC_L2A, 0x0806);
                f.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]);
                f.extend_from_slice(&MAC_L2A);
                f.extend_from_slice(&L2A4.octets());
                f.extend_from_slice(&[0; 6]);
                f.extend_from_slice(&L2R4.octets());
                f.resize(FRAME_LEN, 0);
                f
            }
            Path::NdProxy => {
                // To the target's solicited-node address, with the source link-layer option.
                let o = L2R6.octets();
                let snm = Ipv6Addr::new(
                    0xff02,
                    0,
                    0,
                    0,
                    0,
                    1,
                    0xff00 | u16::from(o[13]),
                    u16::from_be_bytes([o[14], o[15]]),
                );
                let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
                icmp.extend_from_slice(&o);
                icmp.extend_from_slice(&[1, 1]);
                icmp.extend_from_slice(&MAC_L2A);
                let mut pseudo = Vec::new();
                pseudo.extend_from_slice(&L2A6.octets());
                pseudo.extend_from_slice(&snm.octets());
                pseudo.extend_from_slice(&(icmp.len() as u32).to_be_bytes());
                pseudo.extend_from_slice(&[0, 0, 0, 58]);
                pseudo.extend_from_slice(&icmp);
                let sum = checksum(&pseudo);
                icmp[2..4].copy_from_slice(&sum.to_be_bytes());
                let s = snm.octets();
                let mut f = eth([0x33, 0x33, s[12], s[13], s[14], s[15]], MAC_L2A, 0x86dd);
                let mut ip = ipv6_header(icmp.len() as u16, 58, L2A6, snm);
                ip[7] = 255;
                f.extend_from_slice(&ip);
                f.extend_from_slice(&icmp);
                f.resize(L2_DECAP_LEN, 0); // Ethernet padding: the 118-byte port
                f
            }
            Path::L2Flood => udp4_frame(MAC_L2A, [0xff; 6], L2A4, Ipv4Addr::BROADCAST, FRAME_LEN),
            Path::CtHit => tcp4_frame(MAC_S, S4, VIP4, CT_SPORT, 80, TCP_ACK, FRAME_LEN),
            Path::CtNew => tcp4_frame(
                MAC_N,
                N4,
                SREMOTE_BLOCK,
                0,
                BACKEND_PORT,
                TCP_SYN,
                FRAME_LEN,
            ),
            Path::PolicyHit => policy_frame(R4, H4, CT_SPORT, POLICY_PORT, TCP_ACK),
            Path::PolicyNew => policy_frame(SREMOTE_BLOCK, D4, 0, POLICY_PORT, TCP_SYN),
            Path::PolicyNew1 => policy_frame(SREMOTE_BLOCK, E4, 0, POLICY_PORT, TCP_SYN),
        }
    }

    /// The receive port (by frame size) of this path among a worker's `[rx64, rx82, rx118]`.
    fn rx_queue(self, queues: [&mut RxQueue; 3]) -> &mut RxQueue {
        let [q64, q82, q118] = queues;
        match self.frame_len() {
            DECAP_LEN => q82,
            L2_DECAP_LEN => q118,
            _ => q64,
        }
    }
}

/// The ct_hit connection's source port.
const CT_SPORT: u16 = 40_000;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
/// Connections of the ct_new frames before their (port, address) repeat: 64,000 source ports
/// × 250 addresses of the remote block.
const NEW_PORTS: u64 = 64_000;
const NEW_HOSTS: u64 = 250;

/// Makes a new-connection frame `frame` connection number `k`, its TCP/IPv4 packet at `l3`
/// and the remote end's address at `l3 + addr` (see [`Path::varied`]): source port 1024 + k mod
/// 64,000, the remote end 10.3.2.(1 + k / 64,000 mod 250); the IPv4 and TCP checksums updated
/// in place.
#[inline(always)]
fn vary_connection(frame: &mut [u8], k: u64, (l3, addr): (usize, usize)) {
    let sport = 1024 + (k % NEW_PORTS) as u16;
    let host = 1 + (k / NEW_PORTS % NEW_HOSTS) as u16;
    // The last 16 bits of the remote address, the source port, the two checksums.
    let (at_host, at_sport, at_ip, at_tcp) = (l3 + addr + 2, l3 + 20, l3 + 10, l3 + 36);
    let read = |f: &[u8], at: usize| u16::from_be_bytes([f[at], f[at + 1]]);
    let old_host = read(frame, at_host);
    let new_host = old_host & 0xff00 | host;
    let old_sport = read(frame, at_sport);
    let ip = checksum::update_u16(read(frame, at_ip), old_host, new_host);
    let tcp = checksum::update_u16(
        checksum::update_u16(read(frame, at_tcp), old_host, new_host),
        old_sport,
        sport,
    );
    frame[at_ip..at_ip + 2].copy_from_slice(&ip.to_be_bytes());
    frame[at_host..at_host + 2].copy_from_slice(&new_host.to_be_bytes());
    frame[at_sport..at_sport + 2].copy_from_slice(&sport.to_be_bytes());
    frame[at_tcp..at_tcp + 2].copy_from_slice(&tcp.to_be_bytes());
}

/// Frame size of the 64-byte figures.
pub const FRAME_LEN: usize = 64;
/// Frame size of the decap figure: Ethernet + outer IPv6 + IPv4 + UDP.
pub const DECAP_LEN: usize = 14 + 40 + 20 + 8;
/// Frame size of the l2 decap figure: Ethernet + outer IPv6 + the 64-byte inner frame (the
/// nd_proxy frame comes padded to it).
pub const L2_DECAP_LEN: usize = 14 + 40 + FRAME_LEN;
/// Frame size of the policy figures (the 118-byte port's): Ethernet + outer IPv6 + a 64-byte
/// TCP/IPv4 packet (24 bytes of payload).
pub const POLICY_LEN: usize = L2_DECAP_LEN;
/// Where the policy frames' inner IPv4 header starts.
const POLICY_L3: usize = 14 + 40;

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(128);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// The one's-complement checksum of `bytes` (RFC 1071).
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet + IPv4 + UDP frame of `len` bytes (zero payload), TTL 64, valid checksums
/// (the UDP checksum is 0: none, allowed over IPv4).
fn udp4_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    len: usize,
) -> Vec<u8> {
    let mut f = eth(dst_mac, src_mac, 0x0800);
    let ip_len = (len - 14) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&40_000u16.to_be_bytes());
    f.extend_from_slice(&5_001u16.to_be_bytes());
    f.extend_from_slice(&(ip_len - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(len, 0);
    f
}

/// An Ethernet + IPv4 + TCP frame of `len` bytes from pod `src_mac` to its gateway (payload to
/// fill it), TTL 64, valid IPv4 and TCP checksums.
fn tcp4_frame(
    src_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    flags: u8,
    len: usize,
) -> Vec<u8> {
    let mut f = udp4_frame(src_mac, GW_MAC, src, dst, len);
    f[23] = 6;
    f[24..26].copy_from_slice(&[0, 0]);
    let sum = checksum(&f[14..34]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&sport.to_be_bytes());
    tcp[2..4].copy_from_slice(&dport.to_be_bytes());
    tcp[4..8].copy_from_slice(&1u32.to_be_bytes());
    tcp[12] = 0x50;
    tcp[13] = flags;
    tcp[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    f[34..54].copy_from_slice(&tcp);
    f[54..].fill(0x5a);
    let mut pseudo = Vec::with_capacity(12 + len - 34);
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&((len - 34) as u16).to_be_bytes());
    pseudo.extend_from_slice(&f[34..]);
    let sum = checksum(&pseudo);
    f[50..52].copy_from_slice(&sum.to_be_bytes());
    f
}

/// `frame`'s IP packet as the remote node's H.Encaps.Red sends it to this node's `sid`: outer
/// IPv6 from the remote node, no SRH.
fn encapsulated(sid: Ipv6Addr, frame: &[u8]) -> Vec<u8> {
    let inner = &frame[14..];
    let mut f = eth(UPLINK_MAC, PEER_MAC, 0x86dd);
    f.extend_from_slice(&ipv6_header(inner.len() as u16, 4, PEER, sid));
    f.extend_from_slice(inner);
    f
}

/// A policy figure's frame: TCP/IPv4 from the remote pod `src`:`sport` to the pod `dst`:`dport`
/// of this node, encapsulated to this node's SID of the stateful network ([`POLICY_LEN`]).
fn policy_frame(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let inner = tcp4_frame(PEER_MAC, src, dst, sport, dport, flags, POLICY_LEN - 40);
    encapsulated(MY_SSID, &inner)
}

fn ipv6_header(payload_len: u16, next: u8, src: Ipv6Addr, dst: Ipv6Addr) -> [u8; 40] {
    let mut h = [0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&payload_len.to_be_bytes());
    h[6] = next;
    h[7] = 64;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    h
}

// ---- a worker ----------------------------------------------------------------------------------

/// One output port: its TX queue, the burst the pipeline's sends are buffered in, and the
/// packets the driver took.
#[derive(Debug)]
struct Output {
    port: PortId,
    txq: TxQueue,
    burst: Burst,
    sent: u64,
}

/// The worker's [`Io`]: sends are buffered per output port and drained with `tx_burst` at the
/// end of each burst (or when a buffer fills); refused packets are freed and counted.
#[derive(Debug)]
struct BenchIo {
    outputs: Vec<Output>,
    /// The index in `outputs` of each port id's output, as the forwarder's worker indexes its
    /// transmit buffers by port id (a port id without output: `None`).
    by_port: Vec<Option<usize>>,
    pool: Mempool,
    /// Packets sent to a port without an output (never expected).
    unknown_port: u64,
    /// Learn reports (no measured path is on a learning network: each one is a failure).
    learned: u64,
    /// Packets the driver refused.
    refused: u64,
    hz: f64,
    /// While `Some`: the first packet sent is copied here (checks before timing).
    capture: Option<Option<(PortId, Vec<u8>)>>,
}

impl BenchIo {
    /// Drains every output; returns how many packets the driver refused (freed).
    #[inline]
    fn flush(&mut self) -> u64 {
        let mut refused = 0;
        for o in &mut self.outputs {
            if !o.burst.is_empty() {
                o.sent += o.txq.tx_burst(&mut o.burst) as u64;
                refused += o.burst.clear() as u64;
            }
        }
        self.refused += refused;
        refused
    }
}

impl Io<Mbuf> for BenchIo {
    #[inline(always)]
    fn send(&mut self, port: PortId, pkt: Mbuf) {
        if let Some(c @ None) = &mut self.capture {
            *c = Some((port, pkt.data().to_vec()));
        }
        let Some(&Some(k)) = self.by_port.get(port.0 as usize) else {
            self.unknown_port += 1;
            return;
        };
        let o = &mut self.outputs[k];
        if let Err(pkt) = o.burst.push(pkt) {
            o.sent += o.txq.tx_burst(&mut o.burst) as u64;
            self.refused += o.burst.clear() as u64;
            if o.burst.push(pkt).is_err() {
                self.refused += 1;
            }
        }
    }

    #[inline]
    fn port_up(&self, port: PortId) -> bool {
        matches!(self.by_port.get(port.0 as usize), Some(Some(_)))
    }

    fn alloc(&mut self) -> Option<Mbuf> {
        self.pool.alloc()
    }

    fn now_ns(&self) -> u64 {
        (rdtsc() as f64 * 1e9 / self.hz) as u64
    }

    fn learn(&mut self, _event: &lace_shared::learn::LearnEvent) {
        self.learned += 1;
    }
}

/// What one timed round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    /// `rx_burst` + `tx_burst`, nothing else.
    NullFwd,
    /// As `NullFwd`, writing the 64-byte template into each mbuf in between.
    NullFwdWrite,
    /// A path through the pipeline.
    Pipeline(Path),
}

impl Contender {
    /// Bursts of a round of this contender when a round is `bursts`: a new-connection path's
    /// rounds are bounded by the flow table ([`new_bursts`]).
    fn bursts(self, bursts: usize) -> usize {
        match self {
            Contender::Pipeline(p) if p.opens_each() => new_bursts(bursts),
            _ => bursts,
        }
    }
}

/// Everything one forwarding core owns: a mempool, its null ports and queues, a pipeline, a
/// table reader handle.
#[derive(Debug)]
struct Worker {
    name: String,
    pipeline: Pipeline<Mbuf>,
    reader: ReaderHandle,
    io: BenchIo,
    rx64: RxQueue,
    rx82: RxQueue,
    rx118: RxQueue,
    anchor_tx: TxQueue,
    burst: Burst,
    pkts: Vec<Mbuf>,
    templates: Vec<Vec<u8>>,
    /// The node's flow table, its counters at the last check, the next new connection's
    /// number (of every new-connection path), and the free entries of their removal sweeps.
    flows: Arc<FlowTable>,
    flow_base: FlowCounts,
    next_conn: u64,
    sweep_cache: FlowCache,
    /// Kept for their lifetime (the queues keep them attached too).
    _ports: Vec<Port>,
}

/// Queues of the TX port: the anchor's, then one per output port.
const OUTPUT_PORTS: [PortId; 8] = [
    PortId::UPLINK,
    POD_A,
    POD_B,
    POD_L2A,
    POD_L2B,
    POD_H,
    POD_D,
    POD_E,
];

impl Worker {
    /// Creates worker `index`'s mempool and null ports, and registers its reader.
    fn new(
        eal: &fwd::Eal,
        index: usize,
        node: &Node,
        neigh: &Arc<UnderlayNeighbors>,
    ) -> anyhow::Result<Worker> {
        let name = format!("w{index}");
        let pool = Mempool::new(
            eal,
            &format!("lace_bench_{name}"),
            4095,
            256,
            Mempool::DEFAULT_DATA_ROOM,
            None,
        )?;
        let port = |suffix: &str, args: &str, tx_queues: u16| -> anyhow::Result<Port> {
            let devargs = format!("net_null_bench_{name}_{suffix}{args}");
            let mut p = Port::attach_vdev(eal, &devargs)?;
            p.configure(
                &PortConfig {
                    rx_queues: 1,
                    tx_queues,
                    rx_descriptors: 512,
                    tx_descriptors: 512,
                    ..PortConfig::default()
                },
                &pool,
            )
            .with_context(|| format!("configuring {devargs}"))?;
            p.start().with_context(|| format!("starting {devargs}"))?;
            Ok(p)
        };
        let p64 = port("rx64", &format!(",size={FRAME_LEN}"), 1)?;
        let p82 = port("rx82", &format!(",size={DECAP_LEN}"), 1)?;
        let p118 = port("rx118", &format!(",size={L2_DECAP_LEN}"), 1)?;
        let ptx = port("tx", "", 1 + OUTPUT_PORTS.len() as u16)?;
        let outputs = OUTPUT_PORTS
            .iter()
            .enumerate()
            .map(|(i, &port)| {
                Ok(Output {
                    port,
                    txq: ptx.tx_queue(1 + i as u16)?,
                    burst: Burst::new(),
                    sent: 0,
                })
            })
            .collect::<Result<Vec<_>, fwd::Error>>()?;
        let mut pipeline = Pipeline::new(config(), Arc::clone(neigh));
        pipeline.set_flows(Arc::clone(&node.flows), index, 2, CtTimeouts::default());
        Ok(Worker {
            pipeline,
            reader: node.reader.register()?,
            io: BenchIo {
                by_port: {
                    let top = OUTPUT_PORTS.iter().map(|p| p.0 as usize).max();
                    let mut by_port = vec![None; top.map_or(0, |t| t + 1)];
                    for (k, o) in outputs.iter().enumerate() {
                        by_port[o.port.0 as usize] = Some(k);
                    }
                    by_port
                },
                outputs,
                pool,
                unknown_port: 0,
                learned: 0,
                refused: 0,
                hz: tsc_hz(),
                capture: None,
            },
            rx64: p64.rx_queue(0)?,
            rx82: p82.rx_queue(0)?,
            rx118: p118.rx_queue(0)?,
            anchor_tx: ptx.tx_queue(0)?,
            burst: Burst::new(),
            pkts: Vec::with_capacity(fwd::BURST_SIZE),
            templates: Path::ALL
                .iter()
                .chain(&Path::CT)
                .chain(&Path::POLICY)
                .map(|p| p.template())
                .collect(),
            flow_base: node.flows.counts(),
            flows: Arc::clone(&node.flows),
            next_conn: 0,
            sweep_cache: FlowCache::default(),
            _ports: vec![p64, p82, p118, ptx],
            name,
        })
    }

    /// One burst of `c`; returns the packets received (and forwarded).
    #[inline]
    fn burst(&mut self, c: Contender) -> u64 {
        match c {
            Contender::NullFwd => {
                let n = self.rx64.rx_burst(&mut self.burst);
                self.anchor_tx.tx_burst(&mut self.burst);
                self.burst.clear();
                n as u64
            }
            Contender::NullFwdWrite => {
                let n = self.rx64.rx_burst(&mut self.burst);
                write_template(&mut self.burst, &self.templates[0]);
                self.anchor_tx.tx_burst(&mut self.burst);
                self.burst.clear();
                n as u64
            }
            Contender::Pipeline(path) => {
                let n = path
                    .rx_queue([&mut self.rx64, &mut self.rx82, &mut self.rx118])
                    .rx_burst(&mut self.burst);
                write_template(&mut self.burst, &self.templates[path as usize]);
                if let Some(at) = path.varied() {
                    for m in self.burst.iter_mut() {
                        vary_connection(m.data_mut(), self.next_conn, at);
                        self.next_conn += 1;
                    }
                }
                self.burst.move_into(&mut self.pkts);
                let snap = self.reader.snapshot();
                self.pipeline
                    .process(&snap, path.rx_port(), &mut self.pkts, &mut self.io);
                let refused = self.io.flush();
                if refused > 0 {
                    self.pipeline.count_drop(DropReason::TxRefused, refused);
                }
                self.reader.quiescent();
                n as u64
            }
        }
    }

    /// `bursts` bursts of `c`; returns the packets received.
    #[inline(never)]
    fn round(&mut self, c: Contender, bursts: usize) -> u64 {
        (0..bursts).map(|_| self.burst(c)).sum()
    }

    /// Bursts of `path` from TSC `start` (spinning until then) until `end`; returns the
    /// packets and the TSC of the first burst and after the last.
    fn run_window(&mut self, path: Path, start: u64, end: u64) -> anyhow::Result<Window> {
        while rdtsc() < start {
            std::hint::spin_loop();
        }
        let first = rdtsc();
        let mut packets = 0;
        // At least one batch, even when this worker starts after the window closed (a late
        // wake-up then shows as a longer span, never as an empty window).
        let last = loop {
            for _ in 0..16 {
                packets += self.burst(Contender::Pipeline(path));
            }
            let now = rdtsc();
            if now >= end {
                break now;
            }
        };
        self.check(path, packets)?;
        Ok(Window {
            packets,
            first,
            last,
        })
    }

    /// Checks the counters since the last check: `packets` went through exactly `path`'s
    /// stages and out of its port, with no drop, and entered as many connections in the flow
    /// table as the path opens (ct_new, policy_new*: one per packet; the others none). Resets
    /// the counters.
    fn check(&mut self, path: Path, packets: u64) -> anyhow::Result<()> {
        let opened = if path.opens_each() { packets } else { 0 };
        self.check_opening(path, packets, opened)
    }

    /// What happened since the last check: the pipeline's counters, the packets each output
    /// port sent, those sent to ports without output, the learn reports, and the flow table's
    /// counts then and now. Resets them.
    fn take_round(&mut self) -> Taken {
        let flows = self.flows.counts();
        Taken {
            counters: self.pipeline.take_counters(),
            sent: self
                .io
                .outputs
                .iter_mut()
                .map(|o| (o.port, std::mem::take(&mut o.sent)))
                .collect(),
            unknown: std::mem::take(&mut self.io.unknown_port),
            learned: std::mem::take(&mut self.io.learned),
            base: std::mem::replace(&mut self.flow_base, flows),
            flows,
        }
    }

    /// [`Worker::check`] with `opened` new connections expected.
    fn check_opening(&mut self, path: Path, packets: u64, opened: u64) -> anyhow::Result<()> {
        let Taken {
            counters: c,
            sent,
            unknown,
            learned,
            base,
            flows,
        } = self.take_round();
        let id = format!("pipeline.{} ({})", path.name(), self.name);
        if packets == 0 {
            bail!("{id}: the null port delivered no packets (mempool exhausted?)");
        }
        if learned > 0 {
            bail!("{id}: {learned} learn reports on a path without learning; no figure taken");
        }
        if c.total_drops() > 0 {
            bail!(
                "{id}: {} of {packets} packets DROPPED ({}) — the frame does not take the \
                 intended path; no figure taken. Stages: {}",
                c.total_drops(),
                drop_summary(&c),
                stage_summary(&c)
            );
        }
        for s in Stage::ALL {
            let want = path.passes(s) * packets;
            if c.stage(s) != want {
                bail!(
                    "{id}: stage {} handled {} packets, expected {want} of {packets} — the \
                     frame does not take the intended path; no figure taken. Stages: {}",
                    s.name(),
                    c.stage(s),
                    stage_summary(&c)
                );
            }
        }
        for (port, n) in sent {
            let want = path
                .tx_ports()
                .iter()
                .find(|(p, _)| *p == port)
                .map_or(0, |(_, k)| k * packets);
            if n != want {
                bail!(
                    "{id}: {n} packets left on port {}, expected {want} of {packets} \
                     ({unknown} sent to ports without output)",
                    port.0
                );
            }
        }
        if unknown > 0 {
            bail!("{id}: {unknown} packets sent to ports without output");
        }
        let (created, full) = (flows.created - base.created, flows.full - base.full);
        if created != opened || full != 0 || flows.removed != base.removed {
            bail!(
                "{id}: {created} connections entered in the flow table ({} removed, {full} \
                 refused as full), expected {opened} of {packets} packets — no figure taken",
                flows.removed - base.removed
            );
        }
        Ok(())
    }

    /// Opens the connection of hit path `path` with one burst (its first packet: one new
    /// entry, the rest hits) and checks the counters; returns the connection's entry, found by
    /// `key`, and the first packet that left (its port, its bytes).
    fn open(&mut self, path: Path, key: &FlowKey) -> anyhow::Result<(FlowView, PortId, Vec<u8>)> {
        let id = format!("pipeline.{}", path.name());
        self.io.capture = Some(None);
        let n = self.burst(Contender::Pipeline(path));
        let captured = self.io.capture.take().flatten();
        self.check_opening(path, n, 1)?;
        let v = self
            .flows
            .lookup(key, key.hash(self.flows.seed()))
            .ok_or_else(|| anyhow!("{id}: the connection is not in the flow table"))?;
        let Some((port, f)) = captured else {
            bail!("{id}: no packet left the pipeline");
        };
        Ok((v, port, f))
    }

    /// Opens the ct_hit connection and checks what a packet of it becomes: DNAT to the
    /// backend, encapsulated to the remote node's SID of the stateful network, out of the
    /// uplink.
    fn open_ct_hit(&mut self) -> anyhow::Result<()> {
        let key = FlowKey {
            zone: POD_S.0,
            proto: PROTO_TCP,
            v6: false,
            remote: VIP4.to_ipv6_mapped().octets(),
            rport: 80,
            lport: CT_SPORT,
        };
        let (v, port, f) = self.open(Path::CtHit, &key)?;
        let nat = v.nat.map(|t| (t.addr, t.port));
        if nat != Some((BACKEND4.to_ipv6_mapped().octets(), BACKEND_PORT)) {
            bail!("pipeline.ct_hit: the connection's translation is {nat:?}, not the backend");
        }
        // Ethernet, outer IPv6 (destination at 38..54), inner IPv4 at 54, TCP at 74.
        let ok = port == PortId::UPLINK
            && f.len() == FRAME_LEN + 40
            && f[12..14] == [0x86, 0xdd]
            && f[38..54] == PEER_SSID.octets()
            && f[54 + 16..54 + 20] == BACKEND4.octets()
            && f[74 + 2..74 + 4] == BACKEND_PORT.to_be_bytes()
            && checksum(&f[54..74]) == 0
            && {
                let mut pseudo = S4.octets().to_vec();
                pseudo.extend_from_slice(&BACKEND4.octets());
                pseudo.extend_from_slice(&[0, 6, 0, (FRAME_LEN - 34) as u8]);
                pseudo.extend_from_slice(&f[74..]);
                checksum(&pseudo) == 0
            };
        if !ok {
            bail!(
                "pipeline.ct_hit: the packet left on port {} as {:02x?}, not DNATed to \
                 {BACKEND4}:{BACKEND_PORT} and encapsulated to {PEER_SSID}",
                port.0,
                f
            );
        }
        Ok(())
    }

    /// Opens the policy_hit connection and checks it: its entry is in H's zone, opened from
    /// the remote pod (ingress), untranslated, under the network's current policy generation —
    /// an entry is only made for a connection the policy allows, and the generation says that
    /// verdict is the current policy's, so every timed packet is a hit that carries it; the
    /// tables hold the two sets the figures name, and the remote pods are in the class they
    /// decide; the packet left on H's port decapsulated and delivered (H's MAC from the
    /// gateway's, TTL 63, the segment as sent). Then a packet that each policy path's set
    /// denies is dropped as policy-denied ([`Worker::denied`]).
    fn open_policy_hit(&mut self) -> anyhow::Result<()> {
        let path = Path::PolicyHit;
        let key = FlowKey {
            zone: POD_H.0,
            proto: PROTO_TCP,
            v6: false,
            remote: R4.to_ipv6_mapped().octets(),
            rport: CT_SPORT,
            lport: POLICY_PORT,
        };
        let (v, port, f) = self.open(path, &key)?;
        let (gen, class, sets) = {
            let snap = self.reader.snapshot();
            let net = snap.network(SNET);
            let sets = [SET_1K, SET_1].map(|s| snap.decision(s, PolicyDir::Ingress, REMOTE_CLASS));
            (
                net.map(|n| n.policy_gen()),
                net.map(|n| n.peer_class4(R4)),
                sets,
            )
        };
        self.reader.quiescent();
        if v.origin != Origin::Ingress || v.reverse || v.nat.is_some() || Some(v.gen) != gen {
            bail!(
                "pipeline.policy_hit: the connection's entry is {v:?} (the network's policy \
                 generation {gen:?}), not an untranslated ingress connection allowed under the \
                 current policy"
            );
        }
        if class != Some(REMOTE_CLASS) || sets != [Some(rules(0)), Some(rules(RULES - 1))] {
            bail!(
                "pipeline.policy_hit: {R4} is in peer class {class:?} and the sets decide \
                 {sets:?} for class {}, not the 1,000-rule and 1-rule sets",
                REMOTE_CLASS.0
            );
        }
        let sent = path.template();
        let ok = port == POD_H
            && f.len() == POLICY_LEN - 40
            && f[..6] == MAC_H
            && f[6..12] == GW_MAC
            && f[12..14] == [0x08, 0x00]
            && f[14 + 8] == 63
            && checksum(&f[14..34]) == 0
            && f[14 + 12..14 + 20] == sent[POLICY_L3 + 12..POLICY_L3 + 20]
            && f[34..] == sent[POLICY_L3 + 20..];
        if !ok {
            bail!(
                "pipeline.policy_hit: the packet left on port {} as {:02x?}, not delivered to \
                 pod H ({H4}) as sent",
                port.0,
                f
            );
        }
        for (path, dst, dport, flags) in [
            // An ACK of no connection to a port between the last two rules' (the whole chain
            // scanned, nothing allows it).
            (path, H4, POLICY_PORT - 1, TCP_ACK),
            (Path::PolicyNew, D4, POLICY_PORT - 1, TCP_SYN),
            // The second-to-last rule's port: allowed by the 1,000 rules, not by the one.
            (Path::PolicyNew1, E4, rule_port(RULES - 2), TCP_SYN),
        ] {
            self.denied(path, &policy_frame(R4, dst, CT_SPORT + 1, dport, flags))?;
        }
        Ok(())
    }

    /// One round of `bursts` bursts of `c` (a new-connection path's: at most
    /// [`new_bursts`], the table holds four of them), timed and checked: its cycles per packet,
    /// and for a new-connection path the timed sweep that removes its connections after it
    /// (cycles per connection).
    fn timed_round(&mut self, c: Contender, bursts: usize) -> anyhow::Result<(f64, Option<f64>)> {
        let start = rdtsc();
        let n = self.round(c, c.bursts(bursts));
        let cycles = rdtsc().saturating_sub(start) as f64 / n.max(1) as f64;
        let sweep = self.after_round(c, n)?;
        Ok((cycles, sweep.map(|s| s as f64 / n as f64)))
    }

    /// Checks a round of `c` that forwarded `n` packets (every packet took its path; see
    /// [`Worker::check`]) and, after a new-connection path, removes its connections with the
    /// sweep; returns the sweep's cycles.
    fn after_round(&mut self, c: Contender, n: u64) -> anyhow::Result<Option<u64>> {
        let Contender::Pipeline(path) = c else {
            if n == 0 {
                bail!("the null port delivered no packets");
            }
            return Ok(None);
        };
        self.check(path, n)?;
        if !path.opens_each() {
            return Ok(None);
        }
        let (sweep, removed) = self.remove_new(path);
        if removed != n {
            bail!(
                "pipeline.{}: the sweep removed {removed} of {n} new connections",
                path.name()
            );
        }
        Ok(Some(sweep))
    }

    /// `bursts` bursts of `c` in a function of their own: the only code callgrind counts
    /// ([`COUNTED_FN`] is its `--toggle-collect` and `--dump-after` pattern), so each call's
    /// dump holds the instructions of exactly these bursts.
    #[inline(never)]
    fn instructions_window(&mut self, c: Contender, bursts: usize) -> u64 {
        self.round(c, bursts)
    }

    /// Runs one burst of `path` with `frame` in place of its template and checks that every
    /// packet was dropped in conntrack as policy-denied: none left, no connection entered.
    fn denied(&mut self, path: Path, frame: &[u8]) -> anyhow::Result<()> {
        let template = std::mem::replace(&mut self.templates[path as usize], frame.to_vec());
        let n = self.burst(Contender::Pipeline(path));
        self.templates[path as usize] = template;
        let Taken {
            counters: c,
            sent,
            unknown,
            base,
            flows,
            ..
        } = self.take_round();
        let left: u64 = sent.iter().map(|(_, k)| k).sum::<u64>() + unknown;
        if n == 0
            || c.stage(Stage::Conntrack) != n
            || c.drop(DropReason::PolicyDenied) != n
            || c.total_drops() != n
            || left != 0
            || flows.created != base.created
        {
            bail!(
                "pipeline.{}: a packet its policy denies (dport {}) was not dropped as \
                 policy-denied: of {n}, {left} left, {} connections entered, drops: {}; \
                 stages: {}",
                path.name(),
                u16::from_be_bytes([frame[POLICY_L3 + 22], frame[POLICY_L3 + 23]]),
                flows.created - base.created,
                drop_summary(&c),
                stage_summary(&c)
            );
        }
        Ok(())
    }

    /// Removes every connection of new-connection path `path` from the flow table as the
    /// forwarder's sweep does (every entry of the table visited), returning the TSC cycles it
    /// took and the connections removed.
    fn remove_new(&mut self, path: Path) -> (u64, u64) {
        let zone = path.zone().0;
        let start = rdtsc();
        let (_, removed) =
            self.flows
                .sweep(0, self.flows.capacity(), &mut self.sweep_cache, 0, |v| {
                    v.key.zone == zone
                });
        self.flows.return_cache(&mut self.sweep_cache);
        let cycles = rdtsc().saturating_sub(start);
        self.flow_base = self.flows.counts();
        (cycles, u64::from(removed))
    }
}

/// Copies `template` over each mbuf's data (as much as fits; the null ports' `size` equals
/// the template's length, checked before timing).
#[inline]
fn write_template(burst: &mut Burst, template: &[u8]) {
    for m in burst.iter_mut() {
        let d = m.data_mut();
        let n = d.len().min(template.len());
        d[..n].copy_from_slice(&template[..n]);
    }
}

/// What happened since a worker's last check ([`Worker::take_round`]).
#[derive(Debug)]
struct Taken {
    counters: Counters,
    /// Packets sent per output port.
    sent: Vec<(PortId, u64)>,
    /// Packets sent to ports without output.
    unknown: u64,
    /// Learn reports.
    learned: u64,
    /// The flow table's counts at the last check, and now.
    base: FlowCounts,
    flows: FlowCounts,
}

/// One worker's part of a scaling window.
#[derive(Debug, Clone, Copy)]
struct Window {
    packets: u64,
    first: u64,
    last: u64,
}

fn drop_summary(c: &Counters) -> String {
    DropReason::ALL
        .iter()
        .filter(|r| c.drop(**r) > 0)
        .map(|r| format!("{}: {}", r.name(), c.drop(*r)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn stage_summary(c: &Counters) -> String {
    Stage::ALL
        .iter()
        .filter(|s| c.stage(**s) > 0)
        .map(|s| format!("{} {}", s.name(), c.stage(*s)))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---- the figures -------------------------------------------------------------------------------

/// Sizes of the pipeline measurements at a [`Scale`].
#[derive(Debug, Clone, Copy)]
struct Sizes {
    /// Bursts of 32 per timed round.
    bursts: usize,
    /// Timed rounds per contender.
    rounds: usize,
    /// Bursts of the untimed warm-up (checked) per contender.
    warmup: usize,
    /// Scaling: window length in ms, and alternating (1 worker, 2 workers) pairs.
    window_ms: f64,
    pairs: usize,
}

impl Sizes {
    fn of(scale: &Scale) -> Sizes {
        if scale.smoke {
            Sizes {
                bursts: 64,
                rounds: 1,
                warmup: 16,
                window_ms: 2.0,
                pairs: 1,
            }
        } else if scale.quick {
            Sizes {
                bursts: 16_384,
                rounds: 31,
                warmup: 1024,
                window_ms: 50.0,
                pairs: 11,
            }
        } else {
            Sizes {
                bursts: 16_384,
                rounds: 101,
                warmup: 4096,
                window_ms: 200.0,
                pairs: 31,
            }
        }
    }
}

/// Which pipeline figures a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    /// `dpdk.null_fwd*`, every `pipeline.<path>` of [`Path::ALL`], churn and scaling.
    pub paths: bool,
    /// `pipeline.ct_hit.*` and `ct.new_conns*` (with `pipeline.l3_encap.*` in the same rounds,
    /// their anchor), `pipeline.policy_hit.*` and `policy.new_conns*` (with
    /// `pipeline.l3_decap.*` and `policy.1rule.new_conns*`).
    pub ct: bool,
}

/// Bursts of a new-connection round of `bursts`: at most a quarter of the flow table's
/// connections, so that the table never fills between removal sweeps.
fn new_bursts(bursts: usize) -> usize {
    bursts.min(FLOWS as usize / 4 / fwd::BURST_SIZE).max(1)
}

/// The timed rounds, every contender once per round (round-robin): contender 0 is
/// `dpdk.null_fwd`, 1 `dpdk.null_fwd_write`, 2 onwards `paths` in order.
#[derive(Debug)]
struct Rounds {
    paths: Vec<Path>,
    /// Cycles per packet of each contender in each round.
    samples: Vec<Vec<f64>>,
    /// For a new-connection path, the removal sweep's cycles per connection after each round.
    removal: Vec<Vec<f64>>,
}

impl Rounds {
    /// The contender index of `path`.
    fn at(&self, path: Path) -> usize {
        2 + self.paths.iter().position(|&p| p == path).unwrap_or(0)
    }

    /// Contender `k`'s median cycles per packet.
    fn median(&self, k: usize) -> f64 {
        median(self.samples[k].clone())
    }

    /// Contender `k`'s cycles minus `base`'s in the same round, median over the rounds.
    fn above(&self, k: usize, base: usize) -> f64 {
        median(
            self.samples[k]
                .iter()
                .zip(&self.samples[base])
                .map(|(a, b)| a - b)
                .collect(),
        )
    }

    /// New connections per second on one core of new-connection contender `k`: TSC Hz ÷
    /// (cycles per new connection + its removal), median over the rounds.
    fn per_s(&self, k: usize) -> f64 {
        let total = self.samples[k]
            .iter()
            .zip(&self.removal[k])
            .map(|(open, remove)| open + remove)
            .collect();
        tsc_hz() / median(total)
    }

    /// `pipeline.<path>.cycles` and `.mpps`, as anchors.
    fn anchors(&self, path: Path) -> (Figure, Figure) {
        let cycles = self.median(self.at(path));
        (
            Figure::new(
                format!("pipeline.{}.cycles", path.name()),
                cycles,
                "cycles/packet",
            ),
            Figure::new(
                format!("pipeline.{}.mpps", path.name()),
                tsc_hz() / cycles / 1e6,
                "Mpps",
            ),
        )
    }

    /// `pipeline.<hit>.cycles`, `.mpps`, `.<above>` (hit − `anchor` per round) and
    /// `.above_floor` of a tracked path beside its untracked `anchor` of the same rounds.
    fn hit_figures(&self, hit: Path, anchor: Path, above: &str, floor: &Figure) -> Vec<Figure> {
        let (k, a) = (self.at(hit), self.at(anchor));
        let (cycles, mpps) = self.anchors(anchor);
        let id = |what: &str| format!("pipeline.{}.{what}", hit.name());
        vec![
            Figure::versus(id("cycles"), self.median(k), &cycles),
            Figure::versus(id("mpps"), tsc_hz() / self.median(k) / 1e6, &mpps),
            Figure::versus(id(above), self.above(k, a), &cycles),
            Figure::versus(id("above_floor"), self.above(k, 1), floor),
        ]
    }

    /// `<id>.cycles` (beside `cycles_anchor`), `<id>.removal_cycles` and `<id>_per_s` (beside
    /// `per_s_anchor` when there is one) of new-connection path `new`.
    fn new_conns_figures(
        &self,
        id: &str,
        new: Path,
        cycles_anchor: &Figure,
        per_s_anchor: Option<&Figure>,
    ) -> [Figure; 3] {
        let k = self.at(new);
        let per_s = format!("{id}_per_s");
        [
            Figure::versus(format!("{id}.cycles"), self.median(k), cycles_anchor),
            Figure::new(
                format!("{id}.removal_cycles"),
                median(self.removal[k].clone()),
                "cycles/connection",
            ),
            match per_s_anchor {
                Some(a) => Figure::versus(per_s, self.per_s(k), a),
                None => Figure::new(per_s, self.per_s(k), "1/s"),
            },
        ]
    }
}

/// The node's uplink neighbor cache: the VLAN's router answered ARP once (the bench keeps no
/// neighbor fresh, so it stays resolved).
fn neighbors() -> Arc<UnderlayNeighbors> {
    let neigh = Arc::new(UnderlayNeighbors::new(64));
    neigh.learn(
        Neighbor {
            vlan: EXT_VLAN,
            addr: EXT_ROUTER4.to_ipv6_mapped(),
        },
        MacAddr(EXT_ROUTER_MAC),
    );
    neigh
}

/// Every pipeline figure `want` asks for, and notes for the report. `worker_lcore` is an EAL
/// worker lcore for the two-worker scaling figure (`None`: skipped, with a note).
pub fn figures(
    eal: Eal,
    scale: &Scale,
    worker_lcore: Option<u32>,
    want: Want,
) -> anyhow::Result<(Vec<Figure>, Vec<String>)> {
    let sizes = Sizes::of(scale);
    let fwd_eal = eal.forwarder()?;
    let mut node = Node::create().context("building the pipeline tables")?;
    let neigh = neighbors();
    let mut w0 = Worker::new(&fwd_eal, 0, &node, &neigh).context("setting up worker 0")?;
    let mut figures = Vec::new();
    let mut notes = Vec::new();

    let mut paths: Vec<Path> = if want.paths {
        Path::ALL.to_vec()
    } else {
        vec![Path::L3Encap, Path::L3Decap]
    };
    if want.ct {
        paths.extend(Path::CT);
        paths.extend(Path::POLICY);
        w0.open_ct_hit().context("pipeline.ct_hit")?;
        w0.open_policy_hit().context("pipeline.policy_hit")?;
    }
    let contenders: Vec<Contender> = [Contender::NullFwd, Contender::NullFwdWrite]
        .into_iter()
        .chain(paths.iter().map(|&p| Contender::Pipeline(p)))
        .collect();
    // Warm up and check every contender: every packet must take its path.
    for &c in &contenders {
        w0.timed_round(c, sizes.warmup)?;
    }
    let mut rounds = Rounds {
        paths,
        samples: vec![Vec::with_capacity(sizes.rounds); contenders.len()],
        removal: vec![Vec::new(); contenders.len()],
    };
    // The frames must fit the null ports' mbufs exactly.
    for &path in &rounds.paths {
        let mut b: Burst = Burst::new();
        path.rx_queue([&mut w0.rx64, &mut w0.rx82, &mut w0.rx118])
            .rx_burst(&mut b);
        if let Some(len) = b.iter().map(Mbuf::len).find(|&l| l != path.frame_len()) {
            bail!(
                "pipeline.{}: the null port delivers {len}-byte mbufs, the frame is {}",
                path.name(),
                path.frame_len()
            );
        }
    }

    // Timed: every contender once per round, round-robin.
    for _ in 0..sizes.rounds {
        for (k, &c) in contenders.iter().enumerate() {
            let (cycles, removal) = w0.timed_round(c, sizes.bursts)?;
            rounds.samples[k].push(cycles);
            rounds.removal[k].extend(removal);
        }
    }
    let medians: Vec<f64> = (0..contenders.len()).map(|k| rounds.median(k)).collect();
    let mpps = |cycles: f64| tsc_hz() / cycles / 1e6;

    let a_cycles = Figure::new("dpdk.null_fwd.cycles", medians[0], "cycles/packet");
    let a_mpps = Figure::new("dpdk.null_fwd.mpps", mpps(medians[0]), "Mpps");
    let floor = Figure::versus("dpdk.null_fwd_write.cycles", medians[1], &a_cycles);
    if want.paths {
        figures.push(a_cycles.clone());
        figures.push(a_mpps.clone());
        figures.push(floor.clone());
        figures.push(Figure::versus(
            "dpdk.null_fwd_write.mpps",
            mpps(medians[1]),
            &a_mpps,
        ));
    }
    // The pipeline's own cost of a path: its cycles minus the I/O floor of the same round (rx,
    // the frame written, tx), median over the rounds.
    for &path in rounds.paths.iter().filter(|p| Path::ALL.contains(p)) {
        let k = rounds.at(path);
        figures.push(Figure::versus(
            format!("pipeline.{}.cycles", path.name()),
            medians[k],
            &a_cycles,
        ));
        figures.push(Figure::versus(
            format!("pipeline.{}.mpps", path.name()),
            mpps(medians[k]),
            &a_mpps,
        ));
        figures.push(Figure::versus(
            format!("pipeline.{}.above_floor", path.name()),
            rounds.above(k, 1),
            &floor,
        ));
        if path == Path::L2Flood {
            // Replication's cost per copy (the frame itself is the last one).
            figures.push(Figure::versus(
                "pipeline.l2_flood.cycles_per_copy",
                medians[k] / FLOOD_COPIES as f64,
                &a_cycles,
            ));
        }
    }
    if want.paths {
        notes.push(format!(
            "pipeline.*: one core, {} timed rounds of {} bursts of 32 per figure, all figures and \
             dpdk.null_fwd round-robin, median; per burst: rx_burst from net_null, the path's \
             frame written into each mbuf, snapshot, Pipeline::process, tx_burst per output \
             port, quiescent (dpdk.null_fwd: rx_burst + tx_burst only; dpdk.null_fwd_write: plus \
             the 64-byte write). Frames: l3_local/l3_encap UDP/IPv4 {FRAME_LEN} B, l3_decap \
             IPv6+UDP/IPv4 {DECAP_LEN} B (net_null size={DECAP_LEN}), arp_reply ARP padded to \
             {FRAME_LEN} B; l2_encap/arp_proxy/l2_flood {FRAME_LEN} B, l2_decap IPv6 + the \
             {FRAME_LEN} B frame = {L2_DECAP_LEN} B, nd_proxy an 86 B NS padded to \
             {L2_DECAP_LEN} B (net_null size={L2_DECAP_LEN}); l2_flood: {FLOOD_COPIES} copies \
             per frame, BUM limit off; stage counters checked every round (no drop, intended \
             stages only)",
            sizes.rounds, sizes.bursts
        ));
    }
    if want.ct {
        let (figs, ct_notes) = tracked_figures(&rounds, &floor, &sizes);
        figures.extend(figs);
        notes.extend(ct_notes);
    }
    if !want.paths {
        return Ok((figures, notes));
    }

    let (churn_figures, note) =
        churn(&mut w0, &mut node.writer, &sizes).context("churn.100k_per_s.l3_encap")?;
    figures.extend(churn_figures);
    notes.push(note);

    match worker_lcore {
        Some(lcore) => {
            let (fig, note) = scaling(&fwd_eal, lcore, &node, &neigh, &mut w0, &sizes)
                .context("pipeline.l3_encap.scaling_2w")?;
            figures.extend(fig);
            notes.push(note);
        }
        None => notes.push(
            "pipeline.l3_encap.scaling_2w: not measured — no second CPU for a worker lcore"
                .to_owned(),
        ),
    }
    Ok((figures, notes))
}

/// The `--toggle-collect` and `--dump-after` pattern of callgrind naming
/// [`Worker::instructions_window`], the one function whose instructions are counted.
pub const COUNTED_FN: &str = "*::instructions_window";

/// The first word of each line [`count_instructions`] prints per counted window, in order:
/// `<WINDOW_TAG> <figure-id stem> <packets>`.
pub const WINDOW_TAG: &str = "lace-bench-window";

/// The contenders whose instructions are counted, with their figure-id stems: the I/O floor
/// (`dpdk.null_fwd_write`), then every path (`pipeline.<path>`).
fn counted_contenders() -> Vec<(String, Contender)> {
    std::iter::once(("dpdk.null_fwd_write".to_owned(), Contender::NullFwdWrite))
        .chain(
            Path::ALL
                .iter()
                .chain(&Path::CT)
                .chain(&Path::POLICY)
                .map(|&p| (format!("pipeline.{}", p.name()), Contender::Pipeline(p))),
        )
        .collect()
}

/// The counting side of the instruction figures (`lace-bench --count-instructions`, run under
/// callgrind by `crate::instructions`): worker 0 set up as for [`figures`], the tracked paths'
/// connections opened, then per contender a checked warm-up round of `bursts` bursts, `bursts`
/// bursts in [`Worker::instructions_window`] — checked the same way afterwards: every packet
/// took its path, a new-connection path's connections are swept — and a [`WINDOW_TAG`] line
/// naming it and its packets on stdout.
pub fn count_instructions(eal: Eal, bursts: usize) -> anyhow::Result<()> {
    let fwd_eal = eal.forwarder()?;
    let node = Node::create().context("building the pipeline tables")?;
    let neigh = neighbors();
    let mut w = Worker::new(&fwd_eal, 0, &node, &neigh).context("setting up worker 0")?;
    w.open_ct_hit().context("pipeline.ct_hit")?;
    w.open_policy_hit().context("pipeline.policy_hit")?;
    for (id, c) in counted_contenders() {
        w.timed_round(c, bursts)
            .with_context(|| format!("{id}: warm-up round"))?;
        let n = w.instructions_window(c, c.bursts(bursts));
        w.after_round(c, n)
            .with_context(|| format!("{id}: counted round"))?;
        println!("{WINDOW_TAG} {id} {n}");
    }
    Ok(())
}

/// The connection-tracking and NetworkPolicy figures from the round-robin rounds, and their
/// notes.
fn tracked_figures(r: &Rounds, floor: &Figure, sizes: &Sizes) -> (Vec<Figure>, Vec<String>) {
    let (encap_cycles, _) = r.anchors(Path::L3Encap);
    let (decap_cycles, _) = r.anchors(Path::L3Decap);
    let mut figures = r.hit_figures(Path::CtHit, Path::L3Encap, "above_encap", floor);
    figures.extend(r.new_conns_figures("ct.new_conns", Path::CtNew, &encap_cycles, None));
    figures.extend(r.hit_figures(Path::PolicyHit, Path::L3Decap, "above_decap", floor));
    let [one_cycles, one_removal, one_per_s] = r.new_conns_figures(
        "policy.1rule.new_conns",
        Path::PolicyNew1,
        &decap_cycles,
        None,
    );
    figures.extend(r.new_conns_figures(
        "policy.new_conns",
        Path::PolicyNew,
        &one_cycles,
        Some(&one_per_s),
    ));
    figures.extend([one_cycles, one_removal, one_per_s]);
    let ct_note = format!(
        "pipeline.ct_hit / ct.new_conns: the same rounds as pipeline.l3_encap ({} rounds, \
         round-robin, medians), a stateful network whose pods are isolated for ingress and \
         egress (one policy set, egress allowed to the remote node's /24 on TCP 8080), a flow \
         table of {FLOWS} connections (the forwarder's default conntrack.max_flows). ct_hit: \
         64 B TCP ACKs from pod S to a ClusterIP (TCP 80 → one backend on the remote node, \
         :8080) on a connection opened and checked before timing (one entry, DNAT to the \
         backend, inner IPv4 and TCP checksums valid, encapsulated to the remote SID); every \
         timed packet a flow-table hit + DNAT + lookup again + SRv6 encap, no entry created \
         (checked every round); above_encap = ct_hit − l3_encap per round, median (published \
         anchor: VPP's stateful ACL session hit ≈ 101 clocks). ct.new_conns: 64 B TCP SYNs \
         from pod N to pods of the remote /24, each a new (address, port) — egress \
         classification (peer class, port set) + flow-table insert + SRv6 encap; rounds of {} \
         bursts (a quarter of the table), every packet checked to have entered one connection; \
         after each round the forwarder's sweep (FlowTable::sweep over every entry of the \
         table) removes them, timed: removal_cycles per connection; new_conns_per_s = TSC Hz ÷ \
         (cycles per new connection + its removal), median over rounds, one core. No anchor \
         beside it: OVS-DPDK's conntrack (`ct(commit)`) is not driven — its peer replays a \
         pcap in a loop (net_pcap infinite_rx), so after the first pass every packet would be \
         an established connection, not a new one, and OVS counts no per-phase cycles that \
         separate the two",
        sizes.rounds,
        new_bursts(sizes.bursts)
    );
    let policy_note = format!(
        "pipeline.policy_hit / policy.new_conns: the same rounds as pipeline.l3_decap ({} \
         rounds, round-robin, medians). Ingress NetworkPolicy is decided on the destination's \
         node, so the packets arrive as the remote node sends them: {POLICY_LEN} B frames from \
         the uplink to this node's End.DT46 SID of the stateful network, inside a 64 B TCP/IPv4 \
         packet from a remote pod ({SREMOTE_BLOCK}/24, one peer class) to a pod of this node \
         isolated for ingress — uplink-input, srv6-decap, ip4-lookup, conntrack in the pod's \
         zone, local-rewrite (anchor l3_decap: the same path to an untracked pod, {DECAP_LEN} B \
         with UDP inside, delivered on the fused way). The 1,000-rule set: rule i (i < \
         {RULES}) = from ipBlock {SREMOTE_BLOCK}/24, TCP port {} + 2i, one decision of {RULES} \
         ranges (none adjacent, none merged) in a chain of 112 port-set records, as control \
         compiles it (consecutive: binary-searched by record); every connection goes to the last \
         rule's port ({POLICY_PORT}), the farthest range — the most 1,000 rules cost a NEW \
         connection (rules \
         naming 1,000 different peers compile to 1,000 peer classes instead: one LPM and one \
         hash lookup whatever their number; not measured here). policy_hit: ACKs from {R4} to pod H ({H4}, the \
         1,000-rule set) on a connection opened and checked before timing (its entry in H's \
         zone, ingress, untranslated, under the network's current policy generation; the \
         packet delivered as sent, TTL 63), every timed packet a flow-table hit carrying that \
         verdict, no entry created (checked every round); above_decap = policy_hit − l3_decap \
         per round, median. policy.new_conns: SYNs to pod D ({D4}, the 1,000-rule set), each \
         from a new (remote address, port): ingress classification + flow-table insert + \
         delivery, rounds of {} bursts, every packet checked to have entered one connection, \
         the sweep that removes them timed after each round; its anchor policy.1rule.new_conns: \
         the same to pod E ({E4}: one rule, the last one alone), same rounds; new_conns_per_s = \
         TSC Hz ÷ (cycles per new connection + its removal), one core. Before timing, a packet \
         each set denies is dropped as policy-denied: an ACK of no connection to H and a SYN to \
         D on port {} (between the last two rules' ports), a SYN to E on \
         {} (allowed by the 1,000 rules, not by the one)",
        sizes.rounds,
        rule_port(0),
        new_bursts(sizes.bursts),
        POLICY_PORT - 1,
        rule_port(RULES - 2),
    );
    (figures, vec![ct_note, policy_note])
}

/// Route changes per second of the churn figure, and per publication.
const CHURN_PER_S: f64 = 100_000.0;
const CHURN_PER_PUBLICATION: usize = 100;
/// The churned /24s: the encap frame's (10.1.2.0/24) and 10.3.0.0/24 … 10.3.255.0/24.
const CHURN_PREFIXES: usize = 257;

fn churn_prefix(i: usize) -> Ipv4Addr {
    match i {
        0 => Ipv4Addr::new(10, 1, 2, 0),
        _ => Ipv4Addr::new(10, 3, (i - 1) as u8, 0),
    }
}

/// What the churn thread did: changes published, publications and the seconds it ran.
#[derive(Debug, Clone, Copy)]
struct Churned {
    changes: usize,
    publications: usize,
    secs: f64,
}

/// Moves the churned routes between the two remote nodes, paced to [`CHURN_PER_S`] while
/// `paused` is false, until `stop`; every route is set back on the first remote node at the end.
fn churn_routes(
    writer: &mut TableWriter,
    paused: &AtomicBool,
    stop: &AtomicBool,
) -> anyhow::Result<Churned> {
    let hop = |node: NodeId| NextHop::Remote {
        node,
        sid: Sid(if node == REMOTE_NODE {
            PEER_SID
        } else {
            PEER3_SID
        }),
    };
    let period = Duration::from_secs_f64(CHURN_PER_PUBLICATION as f64 / CHURN_PER_S);
    let mut on_first = vec![true; CHURN_PREFIXES];
    let mut active = Duration::ZERO;
    let (mut changes, mut publications) = (0usize, 0usize);
    while !stop.load(Ordering::Relaxed) {
        if paused.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        let t0 = Instant::now();
        for _ in 0..CHURN_PER_PUBLICATION {
            let i = changes % CHURN_PREFIXES;
            on_first[i] = !on_first[i];
            let node = if on_first[i] {
                REMOTE_NODE
            } else {
                REMOTE_NODE3
            };
            writer.add_route(NET, churn_prefix(i).into(), 24, hop(node))?;
            changes += 1;
        }
        writer.publish()?;
        publications += 1;
        while !stop.load(Ordering::Relaxed) && !paused.load(Ordering::Relaxed) {
            let spent = t0.elapsed();
            if spent >= period {
                break;
            }
            std::thread::sleep((period - spent).min(Duration::from_millis(1)));
        }
        active += t0.elapsed();
    }
    for (i, _) in on_first.iter().enumerate().filter(|(_, first)| !**first) {
        writer.add_route(NET, churn_prefix(i).into(), 24, hop(REMOTE_NODE))?;
    }
    writer.publish()?;
    Ok(Churned {
        changes,
        publications,
        secs: active.as_secs_f64(),
    })
}

/// `churn.100k_per_s.l3_encap.cycles` beside `churn.quiet.l3_encap.cycles`: timed l3_encap
/// rounds on the main lcore, alternately with [`churn_routes`] running on a thread and paused.
fn churn(
    w0: &mut Worker,
    writer: &mut TableWriter,
    sizes: &Sizes,
) -> anyhow::Result<(Vec<Figure>, String)> {
    let path = Path::L3Encap;
    let paused = AtomicBool::new(true);
    let stop = AtomicBool::new(false);
    let (quiet, busy, churned) = std::thread::scope(|s| {
        let churner = s.spawn(|| churn_routes(writer, &paused, &stop));
        let timed = |w0: &mut Worker, bursts| -> anyhow::Result<f64> {
            let start = rdtsc();
            let n = w0.round(Contender::Pipeline(path), bursts);
            let cycles = rdtsc().saturating_sub(start);
            w0.check(path, n)?;
            Ok(cycles as f64 / n as f64)
        };
        let measured = (|| -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
            paused.store(false, Ordering::Relaxed);
            timed(w0, sizes.warmup)?;
            let (mut quiet, mut busy) = (Vec::new(), Vec::new());
            for _ in 0..sizes.rounds {
                paused.store(true, Ordering::Relaxed);
                quiet.push(timed(w0, sizes.bursts)?);
                paused.store(false, Ordering::Relaxed);
                busy.push(timed(w0, sizes.bursts)?);
            }
            Ok((quiet, busy))
        })();
        stop.store(true, Ordering::Relaxed);
        let churned = churner
            .join()
            .map_err(|_| anyhow!("the churn thread panicked"))?;
        let (quiet, busy) = measured?;
        Ok::<_, anyhow::Error>((quiet, busy, churned?))
    })?;
    let rate = churned.changes as f64 / churned.secs.max(1e-9);
    let quiet = Figure::new(
        "churn.quiet.l3_encap.cycles",
        median(quiet),
        "cycles/packet",
    );
    let busy = Figure::versus("churn.100k_per_s.l3_encap.cycles", median(busy), &quiet);
    let note = format!(
        "churn.100k_per_s.l3_encap.cycles: {} pairs of timed l3_encap rounds of {} bursts \
         (median), alternately while a thread moved {CHURN_PREFIXES} /24s (the frame's among \
         them) between two remote nodes and while it paused (churn.quiet): {} changes in {} \
         publications over {:.2} s of churn = {:.0} changes/s (target pace {CHURN_PER_S}); \
         every packet still left encapsulated, no drop",
        sizes.rounds, sizes.bursts, churned.changes, churned.publications, churned.secs, rate
    );
    Ok((vec![quiet, busy], note))
}

/// What the main lcore asks of the worker lcore.
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u64,
    end: u64,
}

/// The two-worker scaling figure: `w0` on the main lcore, a second worker on `lcore`.
fn scaling(
    eal: &fwd::Eal,
    lcore: u32,
    node: &Node,
    neigh: &Arc<UnderlayNeighbors>,
    w0: &mut Worker,
    sizes: &Sizes,
) -> anyhow::Result<(Vec<Figure>, String)> {
    let path = Path::L3Encap;
    let mut w1 = Worker::new(eal, 1, node, neigh).context("setting up worker 1")?;
    let n = w1.round(Contender::Pipeline(path), sizes.warmup);
    w1.check(path, n)?;

    let (run_tx, run_rx) = mpsc::channel::<Run>();
    let (res_tx, res_rx) = mpsc::channel::<Result<Window, String>>();
    let job = eal.launch(lcore, move || {
        let mut w = w1;
        while let Ok(run) = run_rx.recv() {
            let r = w
                .run_window(path, run.start, run.end)
                .map_err(|e| format!("{e:#}"));
            if res_tx.send(r).is_err() {
                break;
            }
        }
        0
    })?;

    let hz = tsc_hz();
    let window = (sizes.window_ms * 1e-3 * hz) as u64;
    // Time for the worker lcore to wake up and be spinning before the window opens.
    let lead = (2e-3 * hz) as u64;
    let mut one = Vec::with_capacity(sizes.pairs);
    let mut two = Vec::with_capacity(sizes.pairs);
    let mut skew_us = Vec::with_capacity(sizes.pairs);
    let measured = (|| -> anyhow::Result<()> {
        for _ in 0..sizes.pairs {
            let start = rdtsc() + lead;
            let w = w0.run_window(path, start, start + window)?;
            one.push(w.packets as f64 * hz / (w.last - w.first) as f64);

            let start = rdtsc() + lead;
            run_tx
                .send(Run {
                    start,
                    end: start + window,
                })
                .map_err(|_| anyhow!("the worker lcore's job has ended"))?;
            let a = w0.run_window(path, start, start + window)?;
            let b = res_rx
                .recv()
                .map_err(|_| anyhow!("the worker lcore's job has ended"))?
                .map_err(|e| anyhow!(e))?;
            let span = a.last.max(b.last) - a.first.min(b.first);
            two.push((a.packets + b.packets) as f64 * hz / span as f64);
            skew_us.push(a.first.abs_diff(b.first) as f64 * 1e6 / hz);
        }
        Ok(())
    })();
    drop(run_tx);
    let ret = job.join();
    measured?;
    if ret != 0 {
        bail!("the worker lcore's job returned {ret}");
    }

    let (one, two) = (median(one), median(two));
    let ideal =
        Figure::new("pipeline.scaling_2w.ideal", 2.0, "x").better(Direction::HigherIsBetter);
    let figures = vec![
        Figure::new("pipeline.l3_encap.mpps_1w", one / 1e6, "Mpps"),
        Figure::new("pipeline.l3_encap.mpps_2w", two / 1e6, "Mpps"),
        ideal.clone(),
        Figure::versus("pipeline.l3_encap.scaling_2w", two / one, &ideal),
    ];
    let note = format!(
        "pipeline.l3_encap.scaling_2w: l3_encap throughput of two workers (main lcore {} and \
         lcore {lcore}, each with its own mempool, null ports, pipeline and reader handle) ÷ \
         one (main lcore alone), {} alternating pairs of {} ms windows, medians (the two \
         workers started {:.1} µs apart, median); ratio = scaling ÷ 2",
        eal.main_lcore(),
        sizes.pairs,
        sizes.window_ms,
        median(skew_us)
    );
    Ok((figures, note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_connection_frames_stay_valid() {
        let tcp_ok = |f: &[u8]| {
            let mut pseudo = f[26..34].to_vec();
            pseudo.extend_from_slice(&[0, 6, 0, (f.len() - 34) as u8]);
            pseudo.extend_from_slice(&f[34..]);
            checksum(&f[14..34]) == 0 && checksum(&pseudo) == 0
        };
        assert!(tcp_ok(&Path::CtHit.template()));
        assert!(tcp_ok(&Path::PolicyHit.template()[POLICY_L3 - 14..]));
        for path in [Path::CtNew, Path::PolicyNew, Path::PolicyNew1] {
            let (l3, addr) = path.varied().expect("a new-connection path");
            let mut seen = std::collections::HashSet::new();
            for k in [0, 1, 63_999, 64_000, 5_000_000, NEW_PORTS * NEW_HOSTS - 1] {
                let mut f = path.template();
                vary_connection(&mut f, k, (l3, addr));
                // The inner packet behind an Ethernet header's worth of bytes, as tcp_ok reads.
                let f = &f[l3 - 14..];
                assert!(tcp_ok(f), "{path:?} connection {k}");
                let remote = (f[14 + addr..14 + addr + 4]).to_vec();
                assert!(seen.insert((remote, u16::from_be_bytes([f[34], f[35]]))));
            }
        }
    }

    #[test]
    fn policy_sets_hold_the_rules_the_figures_name() {
        let Ports::Ranges(all) = rules(0).normalized() else {
            panic!("ranges");
        };
        assert_eq!(all.len(), usize::from(RULES), "no two rules' ports merge");
        let records = all.len().div_ceil(lace_shared::policy::PORTSET_RANGES);
        assert_eq!(records, 112, "port-set records");
        assert_eq!(all.last().map(|r| r.lo), Some(POLICY_PORT));
        let (thousand, one) = (rules(0), rules(RULES - 1));
        assert!(thousand.allows(PROTO_TCP, POLICY_PORT) && one.allows(PROTO_TCP, POLICY_PORT));
        // The denied probes' ports.
        assert!(!thousand.allows(PROTO_TCP, POLICY_PORT - 1));
        let second_last = rule_port(RULES - 2);
        assert!(thousand.allows(PROTO_TCP, second_last) && !one.allows(PROTO_TCP, second_last));
    }

    #[test]
    fn frames_have_their_sizes_and_valid_checksums() {
        for (i, p) in Path::ALL
            .into_iter()
            .chain(Path::CT)
            .chain(Path::POLICY)
            .enumerate()
        {
            assert_eq!(p.template().len(), p.frame_len(), "{p:?}");
            assert_eq!(
                p as usize, i,
                "{p:?}: its template is kept at its discriminant"
            );
        }
        let f = Path::L3Local.template();
        assert_eq!(checksum(&f[14..34]), 0, "IPv4 header checksum verifies");
        let d = Path::L3Decap.template();
        assert_eq!(
            u16::from_be_bytes([d[18], d[19]]),
            28,
            "outer payload length"
        );
        assert_eq!(
            checksum(&d[54..74]),
            0,
            "inner IPv4 header checksum verifies"
        );
    }
}
