//! Packet tests of the connection tracker: the stateful network of the fixture (policy sets 1
//! and 2, Services, a reply-only route) through the real pipeline; exact headers, checksums,
//! output ports, drop reasons and flow-table contents.

use lace_shared::flow::FlowKey;
use lace_shared::policy::{PeerClass, PolicyDir, PortRange, Ports};
use lace_shared::tables::TableWriter;

use super::*;

use tcp_flags::{ACK, FIN, RST, SYN};
const SYNACK: u8 = SYN | ACK;

fn mac_of(p: PortId) -> [u8; 6] {
    match p {
        S1 => MAC_S1,
        S2 => MAC_S2,
        _ => MAC_S3,
    }
}

/// A TCP/IPv4 frame from pod `from` (its MAC) to the gateway.
fn seg4(from: PortId, src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    eth(
        GW_MAC,
        mac_of(from),
        0x0800,
        &ipv4(
            src,
            dst,
            6,
            64,
            0,
            true,
            &tcp4(src, dst, sport, dport, flags, b"ct"),
        ),
    )
}

fn seg6(from: PortId, src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    eth(
        GW_MAC,
        mac_of(from),
        0x86dd,
        &ipv6(
            src,
            dst,
            6,
            64,
            0,
            &tcp6(src, dst, sport, dport, flags, b"ct"),
        ),
    )
}

/// A UDP/IPv4 frame from pod `from`.
fn dgram4(from: PortId, src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> Vec<u8> {
    eth(
        GW_MAC,
        mac_of(from),
        0x0800,
        &ipv4(src, dst, 17, 64, 0, true, &udp(sport, dport, b"ct")),
    )
}

/// The IPv4 packet of a frame sent to a pod (after the Ethernet header), checked: header and
/// TCP checksums valid. Returns (src, dst, sport, dport).
fn tcp4_of(frame: &[u8]) -> (Ipv4Addr, Ipv4Addr, u16, u16) {
    let ip = &frame[14..];
    assert_eq!(ip[0], 0x45);
    assert_eq!(checksum::data(&ip[..20]), 0xffff, "IPv4 header checksum");
    let len = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    let t = &ip[20..len];
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&(t.len() as u16).to_be_bytes());
    pseudo.extend_from_slice(t);
    assert_eq!(checksum::data(&pseudo), 0xffff, "TCP checksum");
    (
        src,
        dst,
        u16::from_be_bytes([t[0], t[1]]),
        u16::from_be_bytes([t[2], t[3]]),
    )
}

/// A node, its pipeline and the I/O, kept across packets (the flow table lives in the pipeline).
struct Ct {
    node: Node,
    pipe: Pipeline<VecBuf>,
    io: TestIo,
}

impl Ct {
    fn new() -> Ct {
        Ct {
            node: node(),
            pipe: Pipeline::new(cfg(), Arc::new(UnderlayNeighbors::new(64))),
            io: TestIo {
                now: 1_000_000_000_000,
                ..TestIo::default()
            },
        }
    }
    fn send(&mut self, rx: PortId, frame: Vec<u8>) -> Run {
        run_on(&mut self.node, &mut self.pipe, &mut self.io, rx, frame)
    }
    /// The packet arrives at `to`, translated as it says: its (src, dst, sport, dport).
    fn deliver(
        &mut self,
        rx: PortId,
        frame: Vec<u8>,
        to: PortId,
    ) -> (Ipv4Addr, Ipv4Addr, u16, u16) {
        let r = self.send(rx, frame);
        let (port, f) = r.one();
        assert_eq!(port, to, "{:?}", r.counters.drops);
        assert_eq!(r.counters.total_drops(), 0, "{:?}", r.counters.drops);
        tcp4_of(f)
    }
    fn later(&mut self, secs: u64) {
        self.io.now += secs * 1_000_000_000;
    }
    fn entries(&self) -> u64 {
        let c = self.pipe.flows().counts();
        c.created - c.removed
    }
}

#[test]
fn an_allowed_connection_is_tracked_and_its_replies_pass_whatever_the_policy() {
    let mut t = Ct::new();
    // S1 (egress isolated) may reach S2 on TCP 8080.
    let (s, d, sp, dp) = t.deliver(S1, seg4(S1, S1_4, S2_4, 40000, 8080, SYN), S2);
    assert_eq!((s, d, sp, dp), (S1_4, S2_4, 40000, 8080));
    // One entry in S1's zone (egress) and one in S2's (ingress).
    assert_eq!(t.entries(), 2);
    // The reply reaches S1 though S1 is isolated for ingress and allows only TCP 80 from S2.
    t.deliver(S2, seg4(S2, S2_4, S1_4, 8080, 40000, SYNACK), S1);
    t.deliver(S1, seg4(S1, S1_4, S2_4, 40000, 8080, ACK), S2);
    let key = FlowKey {
        zone: S1.0,
        proto: 6,
        v6: false,
        remote: S2_4.to_ipv6_mapped().octets(),
        rport: 8080,
        lport: 40000,
    };
    let flows = Arc::clone(t.pipe.flows());
    let v = flows.lookup(&key, key.hash(flows.seed())).unwrap();
    assert_eq!(v.state, 3, "established");
    // The close: FIN both ways, then time-wait.
    t.deliver(S1, seg4(S1, S1_4, S2_4, 40000, 8080, FIN | ACK), S2);
    t.deliver(S2, seg4(S2, S2_4, S1_4, 8080, 40000, FIN | ACK), S1);
    let v = flows.lookup(&key, key.hash(flows.seed())).unwrap();
    assert_eq!(v.state, 5, "time-wait");
    // Other ports and protocols toward S2 are denied; so is anything to a class-0 address.
    t.send(S1, seg4(S1, S1_4, S2_4, 40001, 8081, SYN))
        .dropped(DropReason::PolicyDenied);
    t.send(S1, dgram4(S1, S1_4, S2_4, 5000, 54))
        .dropped(DropReason::PolicyDenied);
    t.send(S1, seg4(S1, S1_4, SWORLD4, 40002, 80, SYN))
        .dropped(DropReason::PolicyDenied);
    // UDP 53 to S2 is allowed; anything to node 2's block too (Ports::All).
    let r = t.send(S1, dgram4(S1, S1_4, S2_4, 5000, 53));
    assert_eq!(r.one().0, S2);
    let r = t.send(S1, seg4(S1, S1_4, SREMOTE4, 40003, 22, SYN));
    assert_eq!(r.one().0, PortId::UPLINK);
}

#[test]
fn ingress_isolation_admits_only_what_the_set_allows() {
    let mut t = Ct::new();
    t.send(S2, seg4(S2, S2_4, S1_4, 41000, 22, SYN))
        .dropped(DropReason::PolicyDenied);
    t.deliver(S2, seg4(S2, S2_4, S1_4, 41000, 80, SYN), S1);
    // S1's reply leaves although S1's egress allows only 8080/53 to S2: it is a reply.
    t.deliver(S1, seg4(S1, S1_4, S2_4, 80, 41000, SYNACK), S2);
    // A connection opened from node 2's block to S1 is not allowed (no ingress decision).
    let inner = ipv4(
        SREMOTE4,
        S1_4,
        6,
        63,
        0,
        true,
        &tcp4(SREMOTE4, S1_4, 42000, 80, SYN, b"x"),
    );
    let r = t.send(PortId::UPLINK, to_sid(MY_SSID, &inner, 4));
    r.dropped(DropReason::PolicyDenied);
    // S2 is isolated in no direction: everything reaches it from the underlay.
    let inner = ipv4(
        SREMOTE4,
        S2_4,
        6,
        63,
        0,
        true,
        &tcp4(SREMOTE4, S2_4, 42000, 9999, SYN, b"x"),
    );
    let r = t.send(PortId::UPLINK, to_sid(MY_SSID, &inner, 4));
    assert_eq!(r.one().0, S2);
}

/// A protocol without ports is a protocol like the others: an echo request into a pod
/// isolated for ingress is a NEW connection its set must allow (S1 admits TCP 80 from S2 only),
/// from a local pod or from the underlay, over IPv4 and IPv6.
#[test]
fn an_echo_request_into_an_isolated_pod_is_a_new_connection_to_classify() {
    let mut t = Ct::new();
    let (proto, echo) = icmp_echo(S2_4.into(), S1_4.into(), true, 7, 1, b"ping");
    t.send(
        S2,
        eth(
            GW_MAC,
            MAC_S2,
            0x0800,
            &ipv4(S2_4, S1_4, proto, 64, 0, true, &echo),
        ),
    )
    .dropped(DropReason::PolicyDenied);
    let (proto, echo) = icmp_echo(S2_6.into(), S1_6.into(), true, 7, 1, b"ping");
    t.send(
        S2,
        eth(
            GW_MAC,
            MAC_S2,
            0x86dd,
            &ipv6(S2_6, S1_6, proto, 64, 0, &echo),
        ),
    )
    .dropped(DropReason::PolicyDenied);
    let (proto, echo) = icmp_echo(SREMOTE4.into(), S1_4.into(), true, 7, 1, b"ping");
    let inner = ipv4(SREMOTE4, S1_4, proto, 63, 0, true, &echo);
    t.send(PortId::UPLINK, to_sid(MY_SSID, &inner, 4))
        .dropped(DropReason::PolicyDenied);
    // S1 may not ping S2 either: its egress set allows TCP 8080 and UDP 53 to S2 only.
    let (proto, echo) = icmp_echo(S1_4.into(), S2_4.into(), true, 7, 1, b"ping");
    t.send(
        S1,
        eth(
            GW_MAC,
            MAC_S1,
            0x0800,
            &ipv4(S1_4, S2_4, proto, 64, 0, true, &echo),
        ),
    )
    .dropped(DropReason::PolicyDenied);
}

/// An echo request is never the reply of another: S3 (isolated for ingress: TCP from S2 only)
/// pings S2 with identifier 7 and gets its reply; S2's own echo request with identifier 7 to
/// S3 is a NEW connection, and denied.
#[test]
fn an_echo_request_is_never_taken_for_the_reply_of_one() {
    let mut t = Ct::new();
    let ping = |from: PortId, src: Ipv4Addr, dst: Ipv4Addr, request: bool| {
        let (proto, echo) = icmp_echo(src.into(), dst.into(), request, 7, 1, b"ping");
        eth(
            GW_MAC,
            mac_of(from),
            0x0800,
            &ipv4(src, dst, proto, 64, 0, true, &echo),
        )
    };
    assert_eq!(t.send(S3, ping(S3, S3_4, S2_4, true)).one().0, S2);
    assert_eq!(t.send(S2, ping(S2, S2_4, S3_4, false)).one().0, S3);
    t.send(S2, ping(S2, S2_4, S3_4, true))
        .dropped(DropReason::PolicyDenied);
}

/// The node reaches its own pods whatever NetworkPolicy says (kubelet's probes): a connection
/// from the host interface to S3 (isolated for ingress, TCP 8080/80 from S2 only) on another
/// port is admitted and its replies go back to the host; S2 cannot open the same.
#[test]
fn the_node_reaches_an_isolated_pod_through_the_host_port() {
    let mut t = Ct::new();
    let syn = eth(
        HOST_GW_MAC,
        HOST_MAC,
        0x0800,
        &ipv4(
            NODE4,
            S3_4,
            6,
            64,
            0,
            true,
            &tcp4(NODE4, S3_4, 45000, 10250, SYN, b""),
        ),
    );
    let (s, d, sp, dp) = t.deliver(HOST, syn, S3);
    assert_eq!((s, d, sp, dp), (NODE4, S3_4, 45000, 10250));
    let (s, d, _, _) = t.deliver(S3, seg4(S3, S3_4, NODE4, 10250, 45000, SYNACK), HOST);
    assert_eq!((s, d), (S3_4, NODE4));
    t.send(S2, seg4(S2, S2_4, S3_4, 45000, 10250, SYN))
        .dropped(DropReason::PolicyDenied);
}

#[test]
fn a_large_segment_to_a_cluster_ip_keeps_a_partial_checksum_of_its_new_addresses() {
    let mut t = Ct::new();
    t.deliver(S2, seg4(S2, S2_4, VIP4, 43000, 80, SYN), S3);
    t.deliver(S3, seg4(S3, S3_4, S2_4, 8080, 43000, SYNACK), S2);
    let frame = large4(MAC_S2, S2_4, VIP4, (43000, 80), 30_000);
    let (sent, c) = run_large(
        &mut t.node,
        &mut t.pipe,
        &mut t.io,
        S2,
        &frame,
        tcp_gso(1400),
    );
    assert_eq!(c.total_drops(), 0, "{:?}", c.drops);
    let [(port, out)] = &sent[..] else {
        panic!("{} packets out", sent.len())
    };
    assert_eq!(*port, S3);
    let ip = &out.data()[14..];
    assert_eq!(checksum::data(&ip[..20]), 0xffff, "IPv4 header checksum");
    assert_eq!(&ip[16..20], &S3_4.octets());
    assert_eq!(u16::from_be_bytes([ip[22], ip[23]]), 8080);
    // The field the pod's kernel completes: the pseudo-header over the backend's address and
    // the whole length (the port is not in it: the kernel sums the header itself).
    let partial = checksum::pseudo_header_v4(&S2_4, &S3_4, 6.into(), (ip.len() - 20) as u16);
    assert_eq!(u16::from_be_bytes([ip[36], ip[37]]), partial);
    assert_eq!(cut_and_join(out, 0, 14 + 1460), frame[14 + 40..]);

    // To a Service whose backends are on other nodes, the connection established: translated
    // on the fused encapsulating path.
    let r = t.send(S2, seg4(S2, S2_4, VIP_SPREAD4, 46000, 80, SYN));
    let ip = &r.one().1[14 + 40..];
    let backend = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let synack = under4(backend, S2_4, 8080, 46000, SYNACK);
    assert_eq!(t.send(PortId::UPLINK, synack).one().0, S2);
    t.send(S2, seg4(S2, S2_4, VIP_SPREAD4, 46000, 80, ACK));
    let frame = large4(MAC_S2, S2_4, VIP_SPREAD4, (46000, 80), 30_000);
    let fused = t.pipe.fused_hits();
    let (sent, c) = run_large(
        &mut t.node,
        &mut t.pipe,
        &mut t.io,
        S2,
        &frame,
        tcp_gso(1400),
    );
    assert_eq!(c.total_drops(), 0, "{:?}", c.drops);
    assert_eq!(t.pipe.fused_hits(), fused + 1, "the fused hit took it");
    let [(port, out)] = &sent[..] else {
        panic!("{} packets out", sent.len())
    };
    assert_eq!(*port, PortId::UPLINK);
    let ip = &out.data()[14 + 40..];
    assert_eq!(&ip[16..20], &backend.octets());
    let partial = checksum::pseudo_header_v4(&S2_4, &backend, 6.into(), (ip.len() - 20) as u16);
    assert_eq!(u16::from_be_bytes([ip[36], ip[37]]), partial);
    assert_eq!(cut_and_join(out, 40, 14 + 1500), frame[14 + 40..]);
}

#[test]
fn a_cluster_ip_is_translated_to_its_backend_and_back() {
    let mut t = Ct::new();
    // S2 → VIP:80 → S3:8080 (S3's ingress allows S2 on 8080: the client's own address).
    let got = t.deliver(S2, seg4(S2, S2_4, VIP4, 43000, 80, SYN), S3);
    assert_eq!(got, (S2_4, S3_4, 43000, 8080));
    // The backend's reply comes back from the ClusterIP and port.
    let got = t.deliver(S3, seg4(S3, S3_4, S2_4, 8080, 43000, SYNACK), S2);
    assert_eq!(got, (VIP4, S2_4, 80, 43000));
    // Later packets keep the translation.
    let got = t.deliver(S2, seg4(S2, S2_4, VIP4, 43000, 80, ACK), S3);
    assert_eq!(got, (S2_4, S3_4, 43000, 8080));
    // IPv6: the same Service over fd96::10.
    let r = t.send(S2, seg6(S2, S2_6, VIP6, 43001, 80, SYN));
    let (port, f) = r.one();
    assert_eq!(port, S3, "{:?}", r.counters.drops);
    let ip = &f[14..];
    assert_eq!(&ip[24..40], &S3_6.octets());
    assert_eq!(u16::from_be_bytes([ip[42], ip[43]]), 8080);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&ip[8..40]);
    pseudo.extend_from_slice(&((ip.len() - 40) as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 6]);
    pseudo.extend_from_slice(&ip[40..]);
    assert_eq!(checksum::data(&pseudo), 0xffff, "TCP checksum over IPv6");
    let r = t.send(S3, seg6(S3, S3_6, S2_6, 8080, 43001, SYNACK));
    let (port, f) = r.one();
    assert_eq!(port, S2);
    assert_eq!(&f[14 + 8..14 + 24], &VIP6.octets());
    assert_eq!(u16::from_be_bytes([f[54], f[55]]), 80);
}

#[test]
fn a_service_without_backends_or_port_rejects() {
    let mut t = Ct::new();
    for frame in [
        seg4(S2, S2_4, VIP_EMPTY4, 44000, 80, SYN),
        seg4(S2, S2_4, VIP4, 44001, 81, SYN),
    ] {
        let r = t.send(S2, frame);
        let (port, f) = r.one();
        assert_eq!(port, S2, "the rejection goes back to the client");
        assert_eq!(r.counters.drop(DropReason::ServiceUnavailable), 1);
        let ip = &f[14..];
        assert_eq!(ip[9], 1, "ICMP");
        assert_eq!((ip[20], ip[21]), (3, 3), "port unreachable");
        assert_eq!(checksum::data(&ip[20..]), 0xffff);
    }
}

#[test]
fn a_node_local_service_without_a_local_backend_drops() {
    let mut t = Ct::new();
    let r = t.send(S2, seg4(S2, S2_4, VIP_LOCAL_EMPTY4, 44000, 80, SYN));
    assert!(r.sent.is_empty(), "no rejection: {:?}", r.sent);
    assert_eq!(r.counters.drop(DropReason::NoLocalEndpoint), 1);
    assert_eq!(r.counters.drop(DropReason::ServiceUnavailable), 0);
}

#[test]
fn a_pod_reaches_itself_through_its_service() {
    let mut t = Ct::new();
    // S3 → VIP:80 → S3:8080, from the ClusterIP (hairpin).
    let got = t.deliver(S3, seg4(S3, S3_4, VIP4, 45000, 80, SYN), S3);
    assert_eq!(got, (VIP4, S3_4, 45000, 8080));
    // S3 answers the ClusterIP; it gets the answer from the ClusterIP's port 80.
    let got = t.deliver(S3, seg4(S3, S3_4, VIP4, 8080, 45000, SYNACK), S3);
    assert_eq!(got, (VIP4, S3_4, 80, 45000));
}

#[test]
fn session_affinity_keeps_a_client_on_one_backend() {
    let mut t = Ct::new();
    let backend_of = |r: &Run| {
        let (port, f) = r.one();
        assert_eq!(port, PortId::UPLINK);
        // Ethernet + outer IPv6 (40) + inner IPv4: its destination.
        let ip = &f[14 + 40..];
        Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19])
    };
    let mut spread = HashSet::new();
    let mut sticky = HashSet::new();
    for sport in 46000..46024 {
        let r = t.send(S2, seg4(S2, S2_4, VIP_SPREAD4, sport, 80, SYN));
        spread.insert(backend_of(&r));
        // Other client ports: one port to two Services sharing a backend would collide.
        let r = t.send(S2, seg4(S2, S2_4, VIP_AFF4, sport + 100, 80, SYN));
        sticky.insert(backend_of(&r));
    }
    assert!(spread.len() > 1, "Maglev spreads connections: {spread:?}");
    assert_eq!(sticky.len(), 1, "affinity keeps one backend: {sticky:?}");
    assert!(SBACKENDS.contains(sticky.iter().next().unwrap()));
    // After the affinity timeout (600 s) the client may land elsewhere; the entry is gone.
    let before = t.entries();
    t.later(601);
    t.pipe.sweep_flows(t.io.now);
    let mut again = HashSet::new();
    for sport in 47000..47024 {
        let r = t.send(S2, seg4(S2, S2_4, VIP_AFF4, sport, 80, SYN));
        again.insert(backend_of(&r));
    }
    assert_eq!(again.len(), 1);
    assert!(t.entries() <= before + 24);
}

#[test]
fn a_one_way_path_carries_replies_only() {
    let mut t = Ct::new();
    // S2 may not open a connection on the way back.
    t.send(S2, seg4(S2, S2_4, SONEWAY4, 48000, 80, SYN))
        .dropped(DropReason::OneWay);
    // A connection opened from the path's source to S2 is carried back.
    let inner = ipv4(
        SONEWAY4,
        S2_4,
        6,
        63,
        0,
        true,
        &tcp4(SONEWAY4, S2_4, 48001, 80, SYN, b"x"),
    );
    assert_eq!(
        t.send(PortId::UPLINK, to_sid(MY_SSID, &inner, 4)).one().0,
        S2
    );
    let r = t.send(S2, seg4(S2, S2_4, SONEWAY4, 80, 48001, SYNACK));
    assert_eq!(r.one().0, PortId::UPLINK, "{:?}", r.counters.drops);
}

#[test]
fn a_narrowed_policy_cuts_established_connections_at_their_next_packet() {
    let mut t = Ct::new();
    t.deliver(S1, seg4(S1, S1_4, S2_4, 49000, 8080, SYN), S2);
    t.deliver(S2, seg4(S2, S2_4, S1_4, 8080, 49000, SYNACK), S1);
    t.deliver(S1, seg4(S1, S1_4, S2_4, 49000, 8080, ACK), S2);
    // A change that keeps the connection allowed re-checks it and lets it go on.
    t.node
        .writer
        .set_decision(SET1, PolicyDir::Egress, PeerClass(3), &Ports::All)
        .unwrap();
    t.node.writer.publish().unwrap();
    t.deliver(S1, seg4(S1, S1_4, S2_4, 49000, 8080, ACK), S2);
    // Narrowing S1's egress: the next packet either way is dropped and the entry removed.
    t.node
        .writer
        .remove_decision(SET1, PolicyDir::Egress, PeerClass(1))
        .unwrap();
    t.node.writer.publish().unwrap();
    let before = t.entries();
    t.send(S2, seg4(S2, S2_4, S1_4, 8080, 49000, ACK))
        .dropped(DropReason::PolicyRevoked);
    assert_eq!(t.entries(), before - 1);
    t.send(S1, seg4(S1, S1_4, S2_4, 49000, 8080, ACK))
        .dropped(DropReason::PolicyDenied);
}

#[test]
fn connections_expire_by_state_and_sweeping_frees_them() {
    let mut t = Ct::new();
    let r = t.send(S2, dgram4(S2, S2_4, SREMOTE4, 50000, 53));
    assert_eq!(r.one().0, PortId::UPLINK);
    t.deliver(S2, seg4(S2, S2_4, S3_4, 50001, 80, SYN), S3);
    t.deliver(S3, seg4(S3, S3_4, S2_4, 80, 50001, SYNACK), S2);
    t.deliver(S2, seg4(S2, S2_4, S3_4, 50001, 80, ACK), S3);
    let n = t.entries();
    assert_eq!(n, 3, "UDP in S2's zone, TCP in S2's and S3's");
    // 31 s later the unreplied UDP flow is gone; the established TCP connection is not.
    t.later(31);
    for _ in 0..8 {
        t.later(1);
        t.pipe.sweep_flows(t.io.now);
    }
    assert_eq!(t.entries(), 2);
    // A reset closes it; 10 s later it is gone too.
    t.deliver(S3, seg4(S3, S3_4, S2_4, 80, 50001, RST), S2);
    t.later(11);
    for _ in 0..8 {
        t.later(1);
        t.pipe.sweep_flows(t.io.now);
    }
    assert_eq!(t.entries(), 0);
    // Once removed, a packet of it is a NEW connection again (S3 allows S2 on 80).
    t.deliver(S2, seg4(S2, S2_4, S3_4, 50001, 80, ACK), S3);
}

#[test]
fn a_full_flow_table_refuses_new_connections_only() {
    let mut t = Ct::new();
    let cap = t.pipe.flows().capacity();
    // The first connection, kept alive.
    t.deliver(S2, seg4(S2, S2_4, S3_4, 1, 80, SYN), S3);
    let mut full = 0;
    for k in 0..cap {
        let sport = 2 + (k % 60000) as u16;
        let dst = Ipv4Addr::from(u32::from(SREMOTE4) + k / 60000);
        let r = t.send(S2, dgram4(S2, S2_4, dst, sport, 53));
        full += r.counters.drop(DropReason::FlowTableFull);
    }
    assert!(full > 0, "capacity {cap} reached");
    assert!(t.pipe.flows().counts().full >= full);
    // The established connection still passes.
    t.deliver(S3, seg4(S3, S3_4, S2_4, 80, 1, SYNACK), S2);
}

#[test]
fn fragments_that_need_ports_are_dropped() {
    let mut t = Ct::new();
    let mut ip = ipv4(S1_4, S2_4, 17, 64, 0, false, &udp(5000, 53, b"frag"));
    ip[6] |= 0x20; // more fragments
    let c = {
        ip[10] = 0;
        ip[11] = 0;
        sum(&ip[..20])
    };
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    t.send(S1, eth(GW_MAC, MAC_S1, 0x0800, &ip))
        .dropped(DropReason::Fragment);
    // From S2 (not isolated) to S3's node 2 neighbour: passes untracked.
    let mut ip = ipv4(S2_4, SREMOTE4, 17, 64, 0, false, &udp(5000, 53, b"frag"));
    ip[6] |= 0x20;
    ip[10] = 0;
    ip[11] = 0;
    let c = sum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(
        t.send(S2, eth(GW_MAC, MAC_S2, 0x0800, &ip)).one().0,
        PortId::UPLINK
    );
}

#[test]
fn a_translation_colliding_with_a_direct_connection_is_refused() {
    let mut t = Ct::new();
    t.deliver(S2, seg4(S2, S2_4, S3_4, 51000, 8080, SYN), S3);
    t.send(S2, seg4(S2, S2_4, VIP4, 51000, 80, SYN))
        .dropped(DropReason::NatCollision);
}

#[test]
fn icmp_errors_follow_their_connection_and_are_translated_back() {
    let mut t = Ct::new();
    // S2 → VIP → S3; S3's stack answers with port unreachable about the translated packet.
    t.deliver(S2, seg4(S2, S2_4, VIP4, 52000, 80, SYN), S3);
    let quoted = ipv4(
        S2_4,
        S3_4,
        6,
        63,
        0,
        true,
        &tcp4(S2_4, S3_4, 52000, 8080, SYN, b""),
    );
    let err = eth(
        GW_MAC,
        MAC_S3,
        0x0800,
        &ipv4(S3_4, S2_4, 1, 64, 0, true, &icmp4(3, 3, [0; 4], &quoted)),
    );
    let r = t.send(S3, err);
    let (port, f) = r.one();
    assert_eq!(port, S2, "{:?}", r.counters.drops);
    let ip = &f[14..];
    assert_eq!(&ip[12..16], &VIP4.octets(), "from the ClusterIP");
    assert_eq!(checksum::data(&ip[..20]), 0xffff);
    let icmp = &ip[20..];
    assert_eq!(checksum::data(icmp), 0xffff, "ICMP checksum");
    let q = &icmp[8..];
    assert_eq!(&q[16..20], &VIP4.octets(), "the quote names the ClusterIP");
    assert_eq!(
        checksum::data(&q[..20]),
        0xffff,
        "the quote's header checksum"
    );
    assert_eq!(u16::from_be_bytes([q[22], q[23]]), 80, "and its port");
    // An error about no connection of S1's (isolated) is dropped.
    let quoted = ipv4(
        S1_4,
        SWORLD4,
        6,
        63,
        0,
        true,
        &tcp4(S1_4, SWORLD4, 1, 2, SYN, b""),
    );
    let inner = ipv4(
        SREMOTE4,
        S1_4,
        1,
        63,
        0,
        true,
        &icmp4(3, 1, [0; 4], &quoted),
    );
    t.send(PortId::UPLINK, to_sid(MY_SSID, &inner, 4))
        .dropped(DropReason::UnrelatedIcmpError);
}

#[test]
fn a_colliding_translation_takes_another_backend() {
    let mut t = Ct::new();
    let to = |r: &Run| {
        let (port, f) = r.one();
        assert_eq!(port, PortId::UPLINK, "{:?}", r.counters.drops);
        let ip = &f[14 + 40..];
        Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19])
    };
    // One client port to two Services over the same backends: the second connection cannot
    // use the first one's backend (its replies would be indistinguishable), so it gets another.
    let a = to(&t.send(S2, seg4(S2, S2_4, VIP_SPREAD4, 46500, 80, SYN)));
    let b = to(&t.send(S2, seg4(S2, S2_4, VIP_AFF4, 46500, 80, SYN)));
    assert_ne!(a, b);
    assert!(SBACKENDS.contains(&a) && SBACKENDS.contains(&b));
}

/// Where a connection from S2 to `vip`:80 from `sport` goes (its backend), through the uplink.
fn backend_of(t: &mut Ct, vip: Ipv4Addr, sport: u16, flags: u8) -> Ipv4Addr {
    let r = t.send(S2, seg4(S2, S2_4, vip, sport, 80, flags));
    let (port, f) = r.one();
    assert_eq!(port, PortId::UPLINK, "{:?}", r.counters.drops);
    // Ethernet + outer IPv6 (40) + inner IPv4: its destination.
    let ip = &f[14 + 40..];
    Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19])
}

#[test]
fn session_affinity_records_the_backend_a_colliding_connection_went_to() {
    // For each client port: a live connection to the spread Service, then the first
    // connection to the sticky one from the same port. When the sticky Service's first draw
    // is the live connection's backend, that draw collides and the connection goes elsewhere:
    // the client's affinity must be where it went, so every later connection joins it.
    for sport in 46700..46732 {
        let mut t = Ct::new();
        let live = backend_of(&mut t, VIP_SPREAD4, sport, SYN);
        let first = backend_of(&mut t, VIP_AFF4, sport, SYN);
        assert_ne!(
            first, live,
            "port {sport}: the live connection's reply key is taken"
        );
        for other in 46800..46806 {
            assert_eq!(
                backend_of(&mut t, VIP_AFF4, other, SYN),
                first,
                "port {sport}: later connections join the first one's backend"
            );
        }
    }
}

#[test]
fn a_connection_that_is_over_leaves_its_reply_key_to_a_new_one() {
    let mut t = Ct::new();
    // The client's affinity for the sticky Service.
    let sticky = backend_of(&mut t, VIP_AFF4, 46900, SYN);
    // A connection to the spread Service that lands on that backend, reset by the client.
    let sport = (47100..47200)
        .find(|&p| backend_of(&mut t, VIP_SPREAD4, p, SYN) == sticky)
        .expect("Maglev sends some port to every backend");
    backend_of(&mut t, VIP_SPREAD4, sport, RST);
    // The same port to the sticky Service: the reset connection's reply key is free, so the
    // connection goes where the affinity says.
    assert_eq!(backend_of(&mut t, VIP_AFF4, sport, SYN), sticky);
    // A live connection's reply key is not taken over: another port to the spread Service
    // on the sticky backend, still open, sends the sticky Service's connection elsewhere.
    let open = (47200..47300)
        .find(|&p| backend_of(&mut t, VIP_SPREAD4, p, SYN) == sticky)
        .expect("Maglev sends some port to every backend");
    assert_ne!(backend_of(&mut t, VIP_AFF4, open, SYN), sticky);
}

// ---- the fused established hit --------------------------------------------------------------

/// `frames` from `rx` as one burst through `t`'s pipeline.
fn burst(t: &mut Ct, rx: PortId, frames: &[Vec<u8>]) -> Run {
    let snap = t.node.reader.snapshot();
    let mut v: Vec<VecBuf> = frames
        .iter()
        .map(|f| VecBuf::from_slice(f).unwrap())
        .collect();
    t.pipe.process(&snap, rx, &mut v, &mut t.io);
    assert!(v.is_empty());
    Run {
        sent: t
            .io
            .sent
            .drain(..)
            .map(|(p, b)| (p, b.data().to_vec()))
            .collect(),
        learned: std::mem::take(&mut t.io.learned),
        counters: t.pipe.take_counters(),
    }
}

/// Every entry of a flow table, free ones as `None`.
fn table_of(t: &Ct) -> Vec<Option<lace_shared::flow::FlowView>> {
    let flows = t.pipe.flows();
    (0..flows.capacity()).map(|i| flows.get(i)).collect()
}

/// Two nodes alike, one taking bursts as they come (`fast`) and one taking each burst behind a
/// malformed frame, which sends the whole burst the general way (`general`), from a pod or from
/// the uplink.
struct Twins {
    fast: Ct,
    general: Ct,
}

impl Twins {
    fn new() -> Twins {
        Twins {
            fast: Ct::new(),
            general: Ct::new(),
        }
    }

    /// `frames` from `rx` on both nodes: the same packets out (in the same order when
    /// `ordered`: the general path may interleave flows otherwise), the same counters but for
    /// the malformed frame's, the same flow table, the general node's fused hit never taken.
    /// Returns what went out and how many packets the fast node's fused hit took.
    fn both(&mut self, rx: PortId, frames: &[Vec<u8>], ordered: bool) -> (Run, u64) {
        let before = self.fast.pipe.fused_hits();
        let fast = burst(&mut self.fast, rx, frames);
        let fused = self.fast.pipe.fused_hits() - before;
        let mut behind = vec![vec![0u8; 10]];
        behind.extend_from_slice(frames);
        let general = burst(&mut self.general, rx, &behind);
        assert_eq!(self.general.pipe.fused_hits(), 0);
        let (mut a, mut b) = (fast.sent.clone(), general.sent.clone());
        if !ordered {
            a.sort();
            b.sort();
        }
        assert_eq!(a, b, "the same packets out");
        let mut want = fast.counters.clone();
        let input = if rx == PortId::UPLINK {
            Stage::UplinkInput
        } else {
            Stage::PodInput
        };
        want.stages[input as usize] += 1;
        want.stages[Stage::Drop as usize] += 1;
        want.drops[DropReason::Malformed as usize] += 1;
        assert_eq!(general.counters, want, "the same counters");
        assert!(
            table_of(&self.fast) == table_of(&self.general),
            "the same flow table"
        );
        assert_eq!(
            self.fast.pipe.flows().counts(),
            self.general.pipe.flows().counts()
        );
        (fast, fused)
    }

    /// One frame from `rx` on both nodes (a single frame is never sent the general way by the
    /// malformed one: the uplink's and the openings'), the same packets out.
    fn one(&mut self, rx: PortId, frame: Vec<u8>) -> (PortId, Vec<u8>) {
        let a = self.fast.send(rx, frame.clone());
        let b = self.general.send(rx, frame);
        assert_eq!(a.sent, b.sent);
        assert_eq!(a.counters, b.counters);
        let (port, f) = a.one();
        (port, f.to_vec())
    }

    fn later(&mut self, secs: u64) {
        self.fast.later(secs);
        self.general.later(secs);
    }

    /// The same change of the tables on both nodes, published.
    fn program(&mut self, change: impl Fn(&mut TableWriter)) {
        for ct in [&mut self.fast, &mut self.general] {
            change(&mut ct.node.writer);
            ct.node.writer.publish().unwrap();
        }
    }

    /// Opens S2's TCP connection from `sport` to `dst`:`dport` through the handshake (the
    /// reply from the remote end `peer` via the uplink); returns where it went (the backend,
    /// for a ClusterIP).
    fn open(&mut self, dst: Ipv4Addr, sport: u16, dport: u16) -> Ipv4Addr {
        let (port, f) = self.one(S2, seg4(S2, S2_4, dst, sport, dport, SYN));
        assert_eq!(port, PortId::UPLINK);
        let ip = &f[14 + 40..];
        let peer = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
        let pport = u16::from_be_bytes([ip[22], ip[23]]);
        let synack = under4(peer, S2_4, pport, sport, SYNACK);
        assert_eq!(self.one(PortId::UPLINK, synack).0, S2);
        let (_, frames) = self.both(S2, &[seg4(S2, S2_4, dst, sport, dport, ACK)], true);
        assert_eq!(frames, 0, "the handshake's last ACK changes the state");
        peer
    }
}

fn acks(dst: Ipv4Addr, sport: u16, dport: u16, n: usize) -> Vec<Vec<u8>> {
    vec![seg4(S2, S2_4, dst, sport, dport, ACK); n]
}

fn state_of(t: &Ct, key: &FlowKey) -> (u8, u8) {
    let flows = t.pipe.flows();
    let v = flows.lookup(key, key.hash(flows.seed())).unwrap();
    (v.state, v.seen)
}

fn s2_key(dst: Ipv4Addr, sport: u16, dport: u16) -> FlowKey {
    FlowKey {
        zone: S2.0,
        proto: 6,
        v6: false,
        remote: dst.to_ipv6_mapped().octets(),
        rport: dport,
        lport: sport,
    }
}

#[test]
fn established_bursts_take_the_fused_hit_with_the_general_paths_bytes() {
    let mut t = Twins::new();
    // A ClusterIP connection (translated to a backend on node 2) and a direct one.
    let backend = t.open(VIP_SPREAD4, 44000, 80);
    assert!(SBACKENDS.contains(&backend));
    t.open(SREMOTE4, 44001, 22);
    // One flow, the whole burst: tracked, translated, encapsulated in the fused hit.
    let (r, fused) = t.both(S2, &acks(VIP_SPREAD4, 44000, 80, 32), true);
    assert_eq!(fused, 32);
    assert_eq!(r.sent.len(), 32);
    for (port, f) in &r.sent {
        assert_eq!(*port, PortId::UPLINK);
        assert_eq!(tcp4_of(&f[40..]), (S2_4, backend, 44000, 8080));
    }
    assert_eq!(r.counters.stage(Stage::Ip4Lookup), 64, "looked up again");
    assert_eq!(r.counters.stage(Stage::Conntrack), 32);
    assert_eq!(r.counters.stage(Stage::Tx), 32);
    // Two flows that go on differently (translated or not): the first run is fused, the rest
    // goes the general way.
    let mut mixed = acks(VIP_SPREAD4, 44000, 80, 8);
    mixed.extend(acks(SREMOTE4, 44001, 22, 8));
    mixed.extend(acks(VIP_SPREAD4, 44000, 80, 4));
    assert_eq!(t.both(S2, &mixed, false).1, 8);
    // The direct connection alone, and UDP (unreplied, in its opening direction).
    assert_eq!(t.both(S2, &acks(SREMOTE4, 44001, 22, 16), true).1, 16);
    let udp = vec![dgram4(S2, S2_4, SREMOTE4, 5353, 53); 4];
    assert_eq!(t.both(S2, &udp, true).1, 0, "NEW, then its own packets");
    assert_eq!(t.both(S2, &udp, true).1, 4);
    assert_eq!(
        state_of(&t.fast, &s2_key(VIP_SPREAD4, 44000, 80)),
        (3, 0),
        "established"
    );
}

#[test]
fn state_changes_expiry_and_policy_changes_take_the_general_path() {
    let mut t = Twins::new();
    t.open(VIP_SPREAD4, 45000, 80);
    let key = s2_key(VIP_SPREAD4, 45000, 80);
    // A FIN changes the state: the packets before it are fused, it and those after are not.
    let mut frames = acks(VIP_SPREAD4, 45000, 80, 3);
    frames.push(seg4(S2, S2_4, VIP_SPREAD4, 45000, 80, FIN | ACK));
    frames.extend(acks(VIP_SPREAD4, 45000, 80, 3));
    assert_eq!(t.both(S2, &frames, true).1, 3);
    assert_eq!(
        state_of(&t.fast, &key),
        (4, 1),
        "closing, the client's FIN seen"
    );
    // A closing connection is not an established one.
    assert_eq!(t.both(S2, &acks(VIP_SPREAD4, 45000, 80, 4), true).1, 0);
    // A reset.
    t.open(VIP_SPREAD4, 45001, 80);
    let mut frames = acks(VIP_SPREAD4, 45001, 80, 2);
    frames.push(seg4(S2, S2_4, VIP_SPREAD4, 45001, 80, RST));
    assert_eq!(t.both(S2, &frames, true).1, 2);
    assert_eq!(state_of(&t.fast, &s2_key(VIP_SPREAD4, 45001, 80)).0, 6);

    // Expiry: an unreplied UDP flow 31 s later is removed and entered again, the general way.
    let udp = vec![dgram4(S2, S2_4, SREMOTE4, 5400, 53); 4];
    t.both(S2, &udp, true);
    assert_eq!(t.both(S2, &udp, true).1, 4);
    let created = t.fast.pipe.flows().counts().created;
    t.later(31);
    assert_eq!(t.both(S2, &udp, true).1, 0);
    let counts = t.fast.pipe.flows().counts();
    assert_eq!(counts.created, created + 1, "entered again");
    assert!(counts.removed >= 1);
}

#[test]
fn a_policy_change_revalidates_then_revokes_outside_the_fused_hit() {
    let mut t = Twins::new();
    // S1 (egress isolated) may reach node 2's block on any port.
    let open = |t: &mut Twins, sport: u16| {
        let syn = seg4(S1, S1_4, SREMOTE4, sport, 22, SYN);
        assert_eq!(t.one(S1, syn).0, PortId::UPLINK);
        let synack = under4(SREMOTE4, S1_4, 22, sport, SYNACK);
        assert_eq!(t.one(PortId::UPLINK, synack).0, S1);
        t.both(S1, &[seg4(S1, S1_4, SREMOTE4, sport, 22, ACK)], true);
    };
    open(&mut t, 49600);
    let frames = vec![seg4(S1, S1_4, SREMOTE4, 49600, 22, ACK); 8];
    assert_eq!(t.both(S1, &frames, true).1, 8);
    // A policy change that keeps the connection allowed: the first burst after it is
    // classified again, the general way; the next one is fused again.
    t.program(|w| {
        w.set_decision(SET1, PolicyDir::Egress, PeerClass(3), &Ports::All)
            .unwrap();
    });
    assert_eq!(t.both(S1, &frames, true).1, 0);
    assert_eq!(t.both(S1, &frames, true).1, 8);
    // Narrowed: the connection is revoked at its next packet, the others are NEW and denied.
    t.program(|w| {
        w.remove_decision(SET1, PolicyDir::Egress, PeerClass(2))
            .unwrap();
    });
    let (r, fused) = t.both(S1, &frames, true);
    assert_eq!(fused, 0);
    assert!(r.sent.is_empty());
    assert_eq!(r.counters.drop(DropReason::PolicyRevoked), 1);
    assert_eq!(r.counters.drop(DropReason::PolicyDenied), 7);
}

// ---- the fused established hit in the receiver's zone ---------------------------------------

/// A TCP/IPv4 packet from the underlay (node 2's `src`) to `dst`, in End.DT46 to this node.
fn under4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let inner = ipv4(
        src,
        dst,
        6,
        63,
        0,
        true,
        &tcp4(src, dst, sport, dport, flags, b"in"),
    );
    to_sid(MY_SSID, &inner, 4)
}

fn under_udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> Vec<u8> {
    let inner = ipv4(src, dst, 17, 63, 0, true, &udp(sport, dport, b"in"));
    to_sid(MY_SSID, &inner, 4)
}

/// `n` ACKs of SREMOTE4's connection from `sport` to S3's port 80.
fn acks_in(sport: u16, n: usize) -> Vec<Vec<u8>> {
    vec![under4(SREMOTE4, S3_4, sport, 80, ACK); n]
}

/// The key of SREMOTE4's connection from `sport` to S3's `dport`, in S3's zone.
fn s3_key(proto: u8, sport: u16, dport: u16) -> FlowKey {
    FlowKey {
        zone: S3.0,
        proto,
        v6: false,
        remote: SREMOTE4.to_ipv6_mapped().octets(),
        rport: sport,
        lport: dport,
    }
}

impl Twins {
    /// S3 (isolated for ingress) admits node 2's block on `ports`, on both nodes.
    fn admit_remote(&mut self, ports: &Ports) {
        self.program(|w| {
            w.set_decision(SET2, PolicyDir::Ingress, PeerClass(2), ports)
                .unwrap();
        });
    }

    /// Opens SREMOTE4's TCP connection from `sport` to S3's port 80 through the handshake.
    fn open_in(&mut self, sport: u16) {
        let syn = under4(SREMOTE4, S3_4, sport, 80, SYN);
        assert_eq!(self.one(PortId::UPLINK, syn).0, S3);
        let synack = seg4(S3, S3_4, SREMOTE4, 80, sport, SYNACK);
        assert_eq!(self.one(S3, synack).0, PortId::UPLINK);
        let (_, fused) = self.both(PortId::UPLINK, &acks_in(sport, 1), true);
        assert_eq!(fused, 0, "the handshake's last ACK changes the state");
        assert_eq!(state_of(&self.fast, &s3_key(6, sport, 80)), (3, 0));
    }
}

#[test]
fn established_bursts_into_an_isolated_pod_take_the_fused_hit_with_the_general_paths_bytes() {
    let mut t = Twins::new();
    t.admit_remote(&Ports::Ranges(vec![
        PortRange {
            proto: 6,
            lo: 80,
            hi: 80,
        },
        PortRange {
            proto: 17,
            lo: 53,
            hi: 53,
        },
    ]));
    t.open_in(43000);
    t.open_in(43001);
    // One flow, the whole burst, a little later: tracked (its entry touched) and delivered in
    // the fused hit.
    t.later(2);
    let (r, fused) = t.both(PortId::UPLINK, &acks_in(43000, 32), true);
    assert_eq!(fused, 32);
    assert_eq!(r.sent.len(), 32);
    for (port, f) in &r.sent {
        assert_eq!(*port, S3);
        assert_eq!(tcp4_of(f), (SREMOTE4, S3_4, 43000, 80));
    }
    assert_eq!(r.counters.stage(Stage::Conntrack), 32);
    assert_eq!(r.counters.stage(Stage::LocalRewrite), 32);
    assert_eq!(r.counters.stage(Stage::Tx), 32);
    // Two established flows interleaved: all fused, in order.
    let mut two = acks_in(43000, 4);
    two.extend(acks_in(43001, 4));
    two.extend(acks_in(43000, 4));
    assert_eq!(t.both(PortId::UPLINK, &two, true).1, 12);
    // A NEW connection in the middle: the runs before it are fused, it and the rest are not.
    let mut mixed = acks_in(43000, 8);
    mixed.push(under4(SREMOTE4, S3_4, 43002, 80, SYN));
    mixed.extend(acks_in(43001, 4));
    mixed.extend(acks_in(43000, 4));
    assert_eq!(t.both(PortId::UPLINK, &mixed, false).1, 8);
    // A NEW connection the policy denies, first: nothing fused, the same drops.
    let mut denied = vec![under4(SREMOTE4, S3_4, 43003, 81, ACK)];
    denied.extend(acks_in(43000, 4));
    let (r, fused) = t.both(PortId::UPLINK, &denied, true);
    assert_eq!((fused, r.counters.drop(DropReason::PolicyDenied)), (0, 1));
    // UDP: NEW, then in its opening direction (unreplied), fused.
    let udp = vec![under_udp4(SREMOTE4, S3_4, 5300, 53); 4];
    assert_eq!(
        t.both(PortId::UPLINK, &udp, true).1,
        0,
        "NEW, then its own packets"
    );
    assert_eq!(t.both(PortId::UPLINK, &udp, true).1, 4);
    assert_eq!(
        state_of(&t.fast, &s3_key(17, 5300, 53)).0,
        8,
        "still unreplied"
    );
    // Replies to a connection S2 (tracked, not isolated) opened: fused in its zone.
    t.open(SREMOTE4, 44100, 22);
    let replies = vec![under4(SREMOTE4, S2_4, 22, 44100, ACK); 8];
    assert_eq!(t.both(PortId::UPLINK, &replies, true).1, 8);
    // A translated connection's replies (from a backend on node 2) are translated back on the
    // general path.
    let backend = t.open(VIP_SPREAD4, 44101, 80);
    let replies = vec![under4(backend, S2_4, 8080, 44101, ACK); 4];
    let (r, fused) = t.both(PortId::UPLINK, &replies, true);
    assert_eq!(fused, 0);
    assert_eq!(tcp4_of(&r.sent[0].1), (VIP_SPREAD4, S2_4, 80, 44101));
}

#[test]
fn state_changes_and_expiry_into_an_isolated_pod_take_the_general_path() {
    let mut t = Twins::new();
    t.admit_remote(&Ports::All);
    t.open_in(43100);
    // A FIN: the packets before it are fused, it and those after are not.
    let mut frames = acks_in(43100, 3);
    frames.push(under4(SREMOTE4, S3_4, 43100, 80, FIN | ACK));
    frames.extend(acks_in(43100, 3));
    assert_eq!(t.both(PortId::UPLINK, &frames, true).1, 3);
    assert_eq!(state_of(&t.fast, &s3_key(6, 43100, 80)), (4, 1), "closing");
    assert_eq!(t.both(PortId::UPLINK, &acks_in(43100, 4), true).1, 0);
    // S3's own FIN closes it both ways.
    let fin = seg4(S3, S3_4, SREMOTE4, 80, 43100, FIN | ACK);
    assert_eq!(t.one(S3, fin).0, PortId::UPLINK);
    assert_eq!(
        state_of(&t.fast, &s3_key(6, 43100, 80)),
        (5, 3),
        "time wait"
    );
    // A reset.
    t.open_in(43101);
    let mut frames = acks_in(43101, 2);
    frames.push(under4(SREMOTE4, S3_4, 43101, 80, RST));
    frames.extend(acks_in(43101, 2));
    assert_eq!(t.both(PortId::UPLINK, &frames, true).1, 2);
    assert_eq!(state_of(&t.fast, &s3_key(6, 43101, 80)).0, 6);
    // Expiry: an unreplied UDP flow 31 s later is removed and entered again, the general way.
    let udp = vec![under_udp4(SREMOTE4, S3_4, 5400, 53); 4];
    t.both(PortId::UPLINK, &udp, true);
    assert_eq!(t.both(PortId::UPLINK, &udp, true).1, 4);
    let created = t.fast.pipe.flows().counts().created;
    t.later(31);
    assert_eq!(t.both(PortId::UPLINK, &udp, true).1, 0);
    let counts = t.fast.pipe.flows().counts();
    assert_eq!(counts.created, created + 1, "entered again");
    assert!(counts.removed >= 1);
    // IPv6 is not fused: the general path, the same bytes.
    const SREMOTE6: Ipv6Addr = Ipv6Addr::new(0xfd11, 2, 0, 0, 0, 0, 0, 5);
    let inner = ipv6(
        SREMOTE6,
        S3_6,
        6,
        63,
        0,
        &tcp6(SREMOTE6, S3_6, 43102, 80, ACK, b"in"),
    );
    let frames = vec![to_sid(MY_SSID, &inner, 41); 4];
    assert_eq!(t.both(PortId::UPLINK, &frames, true).1, 0);
}

#[test]
fn a_policy_change_revalidates_then_revokes_a_connection_into_an_isolated_pod() {
    let mut t = Twins::new();
    t.admit_remote(&Ports::All);
    t.open_in(43200);
    let frames = acks_in(43200, 8);
    assert_eq!(t.both(PortId::UPLINK, &frames, true).1, 8);
    // A policy change that keeps the connection allowed: the first burst after it is
    // classified again, the general way; the next one is fused again.
    t.admit_remote(&Ports::Ranges(vec![PortRange {
        proto: 6,
        lo: 80,
        hi: 80,
    }]));
    assert_eq!(t.both(PortId::UPLINK, &frames, true).1, 0);
    assert_eq!(t.both(PortId::UPLINK, &frames, true).1, 8);
    // Narrowed mid-flow: the connection is revoked at its next packet, the others are NEW and
    // denied.
    t.program(|w| {
        w.remove_decision(SET2, PolicyDir::Ingress, PeerClass(2))
            .unwrap();
    });
    let (r, fused) = t.both(PortId::UPLINK, &frames, true);
    assert_eq!(fused, 0);
    assert!(r.sent.is_empty());
    assert_eq!(r.counters.drop(DropReason::PolicyRevoked), 1);
    assert_eq!(r.counters.drop(DropReason::PolicyDenied), 7);
}
