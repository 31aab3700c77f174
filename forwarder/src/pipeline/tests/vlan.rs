//! Packet tests of 802.1Q VLANs on the uplink (ADR 0054): the fixture's node has the address
//! [`EXT_ME4`] both untagged and on [`EXT_VLAN`], where [`EXTNET_V`] holds the same prefix as
//! the untagged [`EXTNET`], and [`EXT_ROUTER4`] is a router on both, a different one on each.

use super::*;

/// A node, its pipeline, its neighbor cache and its I/O, kept across frames.
struct Uplink {
    node: Node,
    neigh: Arc<UnderlayNeighbors>,
    pipe: Pipeline<VecBuf>,
    io: TestIo,
}

impl Uplink {
    fn new() -> Uplink {
        let neigh = Arc::new(UnderlayNeighbors::new(64));
        Uplink {
            node: node(),
            pipe: Pipeline::new(cfg(), Arc::clone(&neigh)),
            neigh,
            io: test_io(),
        }
    }

    fn run(&mut self, rx: PortId, frame: Vec<u8>) -> Run {
        run_on(&mut self.node, &mut self.pipe, &mut self.io, rx, frame)
    }
}

/// The router on the VLAN.
const ROUTER_V_MAC: [u8; 6] = [2, 0xee, 0, 0, 0, 0x64];

/// An IPv4 packet from `src` to `dst` arriving on the uplink, tagged with `vlan` unless 0.
fn from_outside(vlan: u16, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let f = eth(
        UPLINK_MAC,
        ROUTER_V_MAC,
        0x0800,
        &ipv4(src, dst, 17, 64, 0, true, &udp(7, 9, b"outside")),
    );
    match vlan {
        0 => f,
        v => tagged(v, &f),
    }
}

/// The VLAN of a frame that left, and the frame untagged; `None` for an untagged one.
fn untag(f: &[u8]) -> (Option<u16>, Vec<u8>) {
    if f[12..14] != [0x81, 0x00] {
        return (None, f.to_vec());
    }
    let mut plain = f[..12].to_vec();
    plain.extend_from_slice(&f[16..]);
    (Some(u16::from_be_bytes([f[14], f[15]])), plain)
}

/// The one frame a run sent: out of the uplink, tagged with [`EXT_VLAN`], from the uplink's
/// MAC to the VLAN's router; returned untagged.
fn to_the_vlans_router(r: &Run) -> Vec<u8> {
    let (port, out) = r.one();
    assert_eq!(port, PortId::UPLINK);
    let (vlan, plain) = untag(out);
    assert_eq!(vlan, Some(EXT_VLAN));
    assert_eq!(
        (&plain[..6], &plain[6..12]),
        (&ROUTER_V_MAC[..], &UPLINK_MAC[..])
    );
    plain
}

#[test]
fn a_tagged_packet_belongs_to_the_external_network_its_vlan_carries() {
    let mut u = Uplink::new();
    let host = Ipv4Addr::new(203, 0, 113, 5);
    // On the VLAN, 203.0.113.0/24 is EXTNET_V's: it reaches pod C, untagged, as any packet.
    let r = u.run(PortId::UPLINK, from_outside(EXT_VLAN, host, C4));
    let (port, out) = r.one();
    assert_eq!(port, C);
    assert_eq!(untag(out).0, None);
    assert_eq!((&out[..6], &out[12..14]), (&MAC_C[..], &[8, 0][..]));
    assert_eq!(
        &out[14 + 12..14 + 20],
        &[host.octets(), C4.octets()].concat()[..]
    );
    assert_eq!(out[14 + 8], 63, "TTL");
    assert!(checksums_valid(&out[14..]));
    // ... and not pod A, which the same prefix reaches untagged (EXTNET).
    let r = u.run(PortId::UPLINK, from_outside(EXT_VLAN, host, A4));
    assert!(r.sent.iter().all(|(p, _)| *p != A), "{:?}", r.sent);
    // (The ICMP error about it has no route back in EXTNET_V either.)
    assert_eq!(
        r.counters.drop(DropReason::NoRoute),
        2,
        "{:?}",
        r.counters.drops
    );
    let r = u.run(PortId::UPLINK, from_outside(0, host, A4));
    assert_eq!(r.one().0, A);
    let r = u.run(PortId::UPLINK, from_outside(0, host, C4));
    assert!(r.sent.iter().all(|(p, _)| *p != C), "{:?}", r.sent);

    // A source no prefix of the VLAN holds belongs to no network there.
    let elsewhere = Ipv4Addr::new(198, 51, 100, 1);
    u.run(PortId::UPLINK, from_outside(EXT_VLAN, elsewhere, C4))
        .dropped(DropReason::NoExternalNetwork);
    // A VLAN the node has no address on, a priority tag, VLAN 4095 and a second tag are not
    // taken; nor is SRv6 on a VLAN (the underlay is untagged).
    for vlan in [EXT_VLAN + 1, 0, 4095] {
        u.run(PortId::UPLINK, tagged(vlan, &from_outside(0, host, C4)))
            .dropped(DropReason::UnknownVlan);
    }
    u.run(
        PortId::UPLINK,
        tagged(EXT_VLAN, &from_outside(EXT_VLAN, host, C4)),
    )
    .dropped(DropReason::UnknownVlan);
    let inner = ipv4(REMOTE4, A4, 17, 60, 0, true, b"x");
    let srv6 = eth(
        UPLINK_MAC,
        PEER_MAC,
        0x86dd,
        &ipv6(PEER, MY_END_SID, 4, 64, 0, &inner),
    );
    u.run(PortId::UPLINK, tagged(EXT_VLAN, &srv6))
        .dropped(DropReason::NoExternalNetwork);
    // A frame too short to hold its tag.
    u.run(
        PortId::UPLINK,
        tagged(EXT_VLAN, &from_outside(0, host, C4))[..16].to_vec(),
    )
    .dropped(DropReason::Malformed);
}

#[test]
fn arp_and_echo_on_a_vlan_are_answered_on_it_and_teach_its_neighbor_only() {
    let mut u = Uplink::new();
    let request = tagged(
        EXT_VLAN,
        &eth(
            [0xff; 6],
            ROUTER_V_MAC,
            0x0806,
            &arp(1, ROUTER_V_MAC, EXT_ROUTER4, [0; 6], EXT_ME4),
        ),
    );
    let r = u.run(PortId::UPLINK, request);
    let (port, out) = r.one();
    assert_eq!(port, PortId::UPLINK);
    let (vlan, plain) = untag(out);
    assert_eq!(vlan, Some(EXT_VLAN), "answered on the VLAN it came on");
    assert_eq!(
        plain,
        eth(
            ROUTER_V_MAC,
            UPLINK_MAC,
            0x0806,
            &arp(2, UPLINK_MAC, EXT_ME4, ROUTER_V_MAC, EXT_ROUTER4)
        )
    );
    // The asker is learned on the VLAN: the untagged router of the same address is another.
    let on = |vlan| Neighbor {
        vlan,
        addr: EXT_ROUTER4.to_ipv6_mapped(),
    };
    assert_eq!(u.neigh.lookup(on(EXT_VLAN)), Some(MacAddr(ROUTER_V_MAC)));
    assert_eq!(u.neigh.lookup(on(0)), None);
    // A request for another address on the VLAN's subnet is not for the node.
    let other = tagged(
        EXT_VLAN,
        &eth(
            [0xff; 6],
            ROUTER_V_MAC,
            0x0806,
            &arp(1, ROUTER_V_MAC, EXT_ROUTER4, [0; 6], NOT_MINE4),
        ),
    );
    u.run(PortId::UPLINK, other).dropped(DropReason::NotForUs);

    // Ping of the node's address on the VLAN: answered on it.
    let echo = icmp4(8, 0, [0, 7, 0, 1], b"vlan");
    let ping = tagged(
        EXT_VLAN,
        &eth(
            UPLINK_MAC,
            ROUTER_V_MAC,
            0x0800,
            &ipv4(EXT_ROUTER4, EXT_ME4, 1, 64, 0, true, &echo),
        ),
    );
    let plain = to_the_vlans_router(&u.run(PortId::UPLINK, ping));
    assert_eq!(plain[14 + 20], 0, "an echo reply");
    assert_eq!(
        &plain[14 + 12..14 + 20],
        &[EXT_ME4.octets(), EXT_ROUTER4.octets()].concat()[..]
    );
    assert!(checksums_valid(&plain[14..]));
}

/// An address on the VLAN's subnet that is not the node's.
const NOT_MINE4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);

#[test]
fn a_route_out_of_a_vlan_resolves_its_gateway_there_and_leaves_tagged() {
    let mut u = Uplink::new();
    let outside = Ipv4Addr::new(10, 7, 12, 9);
    let pkt = || from_a4(outside, 64, &udp(1, 2, b"out"));
    // Unresolved: asked for on the VLAN, from the node's address there.
    let r = u.run(A, pkt());
    assert_eq!(r.counters.drop(DropReason::GatewayUnresolved), 1);
    let (port, ask) = r.one();
    assert_eq!(port, PortId::UPLINK);
    assert_eq!(
        untag(ask),
        (
            Some(EXT_VLAN),
            eth(
                [0xff; 6],
                UPLINK_MAC,
                0x0806,
                &arp(1, UPLINK_MAC, EXT_ME4, [0; 6], EXT_ROUTER4)
            )
        )
    );
    // The untagged router's answer does not resolve the VLAN's.
    let untagged_reply = eth(
        UPLINK_MAC,
        EXT_ROUTER_MAC,
        0x0806,
        &arp(2, EXT_ROUTER_MAC, EXT_ROUTER4, UPLINK_MAC, EXT_ME4),
    );
    let r = u.run(PortId::UPLINK, untagged_reply);
    assert!(r.sent.is_empty() && r.counters.total_drops() == 0);
    u.run(A, pkt()).dropped(DropReason::GatewayUnresolved);
    // The VLAN's does: the route is up, out tagged to that router's MAC, TTL decremented.
    let reply = tagged(
        EXT_VLAN,
        &eth(
            UPLINK_MAC,
            ROUTER_V_MAC,
            0x0806,
            &arp(2, ROUTER_V_MAC, EXT_ROUTER4, UPLINK_MAC, EXT_ME4),
        ),
    );
    let r = u.run(PortId::UPLINK, reply);
    assert!(r.sent.is_empty() && r.counters.total_drops() == 0);
    let plain = to_the_vlans_router(&u.run(A, pkt()));
    assert_eq!(plain[14 + 8], 63, "TTL");
    assert!(checksums_valid(&plain[14..]));
    // The untagged route still goes to the untagged router, untagged.
    let r = u.run(
        A,
        from_a4(Ipv4Addr::new(10, 7, 10, 9), 64, &udp(1, 2, b"out")),
    );
    let (_, out) = r.one();
    assert_eq!(untag(out).0, None);
    assert_eq!(&out[..6], &EXT_ROUTER_MAC[..]);
}

#[test]
fn a_large_segment_out_of_a_vlan_is_cut_and_each_piece_tagged() {
    let mut u = Uplink::new();
    u.neigh.learn(
        Neighbor {
            vlan: EXT_VLAN,
            addr: EXT_ROUTER4.to_ipv6_mapped(),
        },
        MacAddr(ROUTER_V_MAC),
    );
    let outside = Ipv4Addr::new(10, 7, 12, 9);
    let len = 3 * 1000 + 10;
    let frame = large4(MAC_A, A4, outside, (4000, 80), len);
    let (sent, counters) = run_large(
        &mut u.node,
        &mut u.pipe,
        &mut u.io,
        A,
        &frame,
        tcp_gso(1000),
    );
    assert_eq!(sent.len(), 4, "{:?}", counters.drops);
    let sent: Vec<(PortId, Vec<u8>)> = sent
        .into_iter()
        .map(|(p, b)| (p, b.data().to_vec()))
        .collect();
    let mut carried = 0;
    for (port, f) in &sent {
        assert_eq!(*port, PortId::UPLINK);
        let (vlan, plain) = untag(f);
        assert_eq!(vlan, Some(EXT_VLAN));
        assert_eq!(&plain[..6], &ROUTER_V_MAC[..]);
        assert!(checksums_valid(&plain[14..]));
        carried += plain.len() - 14 - 20 - 20;
    }
    assert_eq!(carried, len);
}

#[test]
fn a_mixed_burst_takes_the_general_nodes_and_tags_only_what_leaves_on_the_vlan() {
    let mut u = Uplink::new();
    for (vlan, mac) in [(EXT_VLAN, ROUTER_V_MAC), (0, EXT_ROUTER_MAC)] {
        u.neigh.learn(
            Neighbor {
                vlan,
                addr: EXT_ROUTER4.to_ipv6_mapped(),
            },
            MacAddr(mac),
        );
    }
    let frames = [
        from_a4(Ipv4Addr::new(10, 7, 12, 9), 64, &udp(1, 2, b"vlan")),
        from_a4(B4, 64, &udp(1, 2, b"local")),
        from_a4(Ipv4Addr::new(10, 7, 10, 9), 64, &udp(1, 2, b"untagged")),
    ];
    let snap = u.node.reader.snapshot();
    let mut v: Vec<VecBuf> = frames
        .iter()
        .map(|f| VecBuf::from_slice(f).unwrap())
        .collect();
    u.pipe.process(&snap, A, &mut v, &mut u.io);
    let sent: Vec<(PortId, Option<u16>, [u8; 6])> =
        u.io.sent
            .drain(..)
            .map(|(p, b)| {
                let (vlan, plain) = untag(b.data());
                assert!(checksums_valid(&plain[14..]));
                (p, vlan, plain[..6].try_into().unwrap())
            })
            .collect();
    assert_eq!(
        sent,
        [
            (PortId::UPLINK, Some(EXT_VLAN), ROUTER_V_MAC),
            (B, None, MAC_B),
            (PortId::UPLINK, None, EXT_ROUTER_MAC),
        ],
        "{:?}",
        u.pipe.take_counters().drops
    );
}
