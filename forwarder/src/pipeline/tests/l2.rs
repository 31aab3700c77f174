//! Packet tests of the l2 fast paths: a vector pod-input or uplink-input checks whole takes
//! l2-forward (and l2-encap, underlay-out, tx) fused into the input node, and a vector of ARP or
//! NDP requests goes to its answering node without per-packet classification. The same bursts
//! behind a malformed frame take the general nodes; both ways must give the same bytes out,
//! counters, learn reports, BUM buckets and underlay neighbor cache.

use super::*;

/// A node, its pipeline, its underlay neighbor cache and its I/O.
struct Side {
    node: Node,
    neigh: Arc<UnderlayNeighbors>,
    pipe: Pipeline<VecBuf>,
    io: TestIo,
}

impl Side {
    fn new(setup: &dyn Fn(&mut Node)) -> Side {
        let mut node = node();
        setup(&mut node);
        let neigh = Arc::new(UnderlayNeighbors::new(64));
        Side {
            node,
            pipe: Pipeline::new(cfg(), Arc::clone(&neigh)),
            neigh,
            io: test_io(),
        }
    }

    /// `frames` from `rx` as one burst.
    fn burst(&mut self, rx: PortId, frames: &[Vec<u8>]) -> Run {
        let snap = self.node.reader.snapshot();
        let mut v: Vec<VecBuf> = frames
            .iter()
            .map(|f| VecBuf::from_slice(f).unwrap())
            .collect();
        self.pipe.process(&snap, rx, &mut v, &mut self.io);
        assert!(v.is_empty());
        Run {
            sent: self
                .io
                .sent
                .drain(..)
                .map(|(p, b)| (p, b.data().to_vec()))
                .collect(),
            learned: std::mem::take(&mut self.io.learned),
            counters: self.pipe.take_counters(),
        }
    }
}

/// Two nodes alike (the fixture, changed by `setup`): `fast` takes each burst as it comes,
/// `general` behind a malformed frame, which sends the whole burst the general way.
struct Twins {
    fast: Side,
    general: Side,
}

impl Twins {
    fn new(setup: impl Fn(&mut Node)) -> Twins {
        Twins {
            fast: Side::new(&setup),
            general: Side::new(&setup),
        }
    }

    /// `frames` from `rx` on both: the same packets out, the same counters but for the
    /// malformed frame's, the same learn reports, the same underlay neighbor cache. Returns the
    /// fast node's run.
    fn both(&mut self, rx: PortId, frames: &[Vec<u8>]) -> Run {
        let fast = self.fast.burst(rx, frames);
        let mut behind = vec![vec![0u8; 10]];
        behind.extend_from_slice(frames);
        let general = self.general.burst(rx, &behind);
        // Frames sent on in the fused loop leave before those the general nodes send.
        let (mut a, mut b) = (fast.sent.clone(), general.sent.clone());
        a.sort();
        b.sort();
        assert_eq!(a, b, "the same packets out");
        let input = if rx == PortId::UPLINK {
            Stage::UplinkInput
        } else {
            Stage::PodInput
        };
        let mut want = fast.counters.clone();
        want.stages[input as usize] += 1;
        want.stages[Stage::Drop as usize] += 1;
        want.drops[DropReason::Malformed as usize] += 1;
        assert_eq!(general.counters, want, "the same counters");
        let key = |e: &LearnEvent| (e.port, e.kind, e.mac, e.ip);
        let (mut a, mut b) = (fast.learned.clone(), general.learned.clone());
        a.sort_by_key(key);
        b.sort_by_key(key);
        assert_eq!(a, b, "the same learn reports");
        assert_eq!(self.fast.neigh.version(), self.general.neigh.version());
        for addr in [PEER, PEER3] {
            assert_eq!(
                self.fast.neigh.lookup(Neighbor::untagged(addr)),
                self.general.neigh.lookup(Neighbor::untagged(addr))
            );
        }
        fast
    }
}

/// A MAC the FDB places on node 3 (whose underlay MAC nobody knows yet) and one on a port that
/// is down.
const MAC_ON_3: [u8; 6] = [2, 0, 0, 0, 0, 0x33];
const MAC_DOWN: [u8; 6] = [2, 0, 0, 0, 0, 0x66];
const MAC_NOBODY: [u8; 6] = [2, 0, 0, 0, 0, 0x77];

fn with_more_macs(node: &mut Node) {
    let entry = |target| FdbEntry {
        target,
        seq: 0,
        learned: false,
    };
    node.writer
        .set_fdb(
            L2NET,
            MacAddr(MAC_ON_3),
            entry(FdbTarget::Remote {
                node: NodeId(3),
                sid: Sid(PEER3_DT2M),
            }),
        )
        .unwrap();
    node.writer
        .set_fdb(L2NET, MacAddr(MAC_DOWN), entry(FdbTarget::Port(DOWN)))
        .unwrap();
    node.writer.publish().unwrap();
}

/// A bridged IPv4/UDP frame from the l2 pod, `k` its flow (the source port).
fn bridged4(dst: [u8; 6], k: u16) -> Vec<u8> {
    eth(
        dst,
        MAC_L2,
        0x0800,
        &ipv4(L2_4, L2R4, 17, 64, 0, true, &udp(5000 + k, 6000, b"fused")),
    )
}

/// A bridged IPv6/UDP frame (not NDP) from the l2 pod.
fn bridged6(dst: [u8; 6], k: u16) -> Vec<u8> {
    eth(
        dst,
        MAC_L2,
        0x86dd,
        &ipv6(L2_6, L2R6, 17, 64, 0, &udp(5000 + k, 6000, b"fused")),
    )
}

#[test]
fn bridged_vectors_from_a_pod_take_the_fused_forward_with_the_general_bytes() {
    let mut t = Twins::new(with_more_macs);
    // One remote MAC: every frame encapsulated to node 2's End.DT2U SID in the fused loop.
    let remote: Vec<Vec<u8>> = (0..32).map(|k| bridged4(MAC_L2R, k)).collect();
    let r = t.both(L2POD, &remote);
    assert_eq!(r.sent.len(), 32);
    assert!(r.sent.iter().all(|(p, _)| *p == PortId::UPLINK));
    assert_eq!(r.counters.stage(Stage::L2Encap), 32);
    assert_eq!(r.counters.stage(Stage::UnderlayOut), 32);
    assert_eq!(r.counters.total_drops(), 0);
    // One local MAC: sent unchanged.
    let local: Vec<Vec<u8>> = (0..32).map(|k| bridged4(MAC_L2B, k)).collect();
    let r = t.both(L2POD, &local);
    assert_eq!(r.sent.len(), 32);
    assert!(r.sent.iter().all(|(p, _)| *p == L2B));
    assert_eq!(r.counters.stage(Stage::L2Forward), 32);
    // Every kind of unicast frame the fused forward takes or leaves to the general node:
    // remote and local (IPv4, IPv6, not IP, an IPv4 header cut short), back to its own port,
    // an unknown MAC, a port that is down, a node whose MAC is unresolved, too big.
    let mixed: Vec<Vec<u8>> = (0..48)
        .map(|k| match k % 12 {
            0 | 1 => bridged4(MAC_L2R, k),
            2 => bridged6(MAC_L2R, k),
            3 => eth(MAC_L2R, MAC_L2, 0x88b5, b"experimental ethertype"),
            4 => eth(MAC_L2R, MAC_L2, 0x0800, &[0x45, 0, 0, 60, 0, 0]),
            5 => bridged4(MAC_L2B, k),
            6 => bridged6(MAC_L2B, k),
            7 => bridged4(MAC_L2, k),
            8 => bridged4(MAC_NOBODY, k),
            9 => bridged4(MAC_DOWN, k),
            10 => bridged4(MAC_ON_3, k),
            _ => l2_frame(MAC_L2R, MAC_L2, &vec![0; 1461 - 14 - 28]),
        })
        .collect();
    let r = t.both(L2POD, &mixed);
    assert_eq!(r.sent.iter().filter(|(p, _)| *p == L2B).count(), 8);
    // 20 encapsulated and node 3's solicitation (once: rate-limited).
    assert_eq!(
        r.sent.iter().filter(|(p, _)| *p == PortId::UPLINK).count(),
        21
    );
    for reason in [
        DropReason::SplitHorizon,
        DropReason::UnknownUnicast,
        DropReason::PortDown,
        DropReason::NeighborUnresolved,
        DropReason::TooBig,
    ] {
        assert_eq!(r.counters.drop(reason), 4, "{reason}");
    }
    // A vector the bridged pass turns away (a broadcast, ARP, NDP, to the gateway among the
    // frames): the general nodes for all of them, on both nodes.
    let turned: Vec<Vec<u8>> = (0..16)
        .map(|k| match k % 4 {
            0 => bridged4(MAC_L2R, k),
            1 => bridged4([0xff; 6], k),
            2 => eth(
                [0xff; 6],
                MAC_L2,
                0x0806,
                &arp(1, MAC_L2, L2_4, [0; 6], L2R4),
            ),
            _ => bridged4(GW_MAC, k),
        })
        .collect();
    t.both(L2POD, &turned);
}

#[test]
fn bridged_vectors_on_a_learning_network_take_the_fused_forward_with_the_general_bytes() {
    let mut t = Twins::new(|_| {});
    let frame = |dst, k: u16| {
        eth(
            dst,
            MAC_LPOD,
            0x0800,
            &ipv4(LPOD4, LPOD2_4, 17, 64, 0, true, &udp(k, 9, b"learn")),
        )
    };
    // To the other local pod, to a MAC learned on node 2, to an unknown MAC (flooded within
    // the BUM burst), and a learned MAC's own frames (the general checks, reported as seen).
    let uniform: Vec<Vec<u8>> = (0..32).map(|k| frame(MAC_LPOD2, k)).collect();
    let r = t.both(LPOD, &uniform);
    assert_eq!(r.sent.len(), 32);
    let mixed: Vec<Vec<u8>> = (0..24)
        .map(|k| match k % 3 {
            0 => frame(MAC_LPOD2, k),
            1 => frame(MAC_VMR, k),
            _ => frame([2, 0, 0, 0, 0, 0x78], k),
        })
        .collect();
    let r = t.both(LPOD, &mixed);
    assert_eq!(r.counters.drop(DropReason::BumRateLimited), 8 - 4);
    let vm: Vec<Vec<u8>> = (0..8)
        .map(|k| {
            eth(
                MAC_LPOD2,
                MAC_VM,
                0x0800,
                &ipv4(VM4, LPOD2_4, 17, 64, 0, true, &udp(k, 9, b"vm")),
            )
        })
        .collect();
    let r = t.both(LPOD, &vm);
    assert_eq!(r.learned.len(), 1);
}

#[test]
fn end_dt2u_vectors_take_the_fused_decap_and_forward_with_the_general_bytes() {
    let mut t = Twins::new(with_more_macs);
    let inner = |dst, k: u16| {
        eth(
            dst,
            MAC_L2R,
            0x0800,
            &ipv4(L2R4, L2_4, 17, 64, 0, true, &udp(k, 9, b"from node 2")),
        )
    };
    let padded = |mut f: Vec<u8>, k: u16| {
        f.resize(f.len() + usize::from(k % 3) * 5, 0);
        f
    };
    // One local MAC: decapsulated and delivered in the fused loop, padding or not.
    let uniform: Vec<Vec<u8>> = (0..32)
        .map(|k| padded(to_sid(MY_DT2U, &inner(MAC_L2, k), 143), k))
        .collect();
    let r = t.both(PortId::UPLINK, &uniform);
    assert_eq!(r.sent.len(), 32);
    assert!(r.sent.iter().all(|(p, _)| *p == L2POD));
    assert_eq!(r.sent[0].1, inner(MAC_L2, 0));
    assert_eq!(r.counters.stage(Stage::L2Decap), 32);
    assert_eq!(r.counters.stage(Stage::L2Forward), 32);
    // Every case the fused pass takes whole, the general node deciding some: the other local
    // pod, a MAC on another node (never sent on), unknown, a port that is down, a broadcast
    // to the unicast SID, the smallest inner frame.
    let mixed: Vec<Vec<u8>> = (0..28)
        .map(|k| {
            let f = match k % 7 {
                0 => inner(MAC_L2, k),
                1 => inner(MAC_L2B, k),
                2 => inner(MAC_L2R, k),
                3 => inner(MAC_NOBODY, k),
                4 => inner(MAC_DOWN, k),
                5 => inner([0xff; 6], k),
                _ => eth(MAC_L2B, MAC_L2R, 0x88b5, b""),
            };
            padded(to_sid(MY_DT2U, &f, 143), k)
        })
        .collect();
    let r = t.both(PortId::UPLINK, &mixed);
    assert_eq!(r.sent.len(), 12);
    assert_eq!(r.counters.drop(DropReason::SplitHorizon), 4);
    assert_eq!(r.counters.drop(DropReason::UnknownUnicast), 8);
    assert_eq!(r.counters.drop(DropReason::PortDown), 4);
    // Vectors the fast pass turns away: End.DT46 among them, an SRH, End.DT2M, a truncated
    // inner frame, a DT2U SID of an l3 network, the learning network's SID.
    let mut srh_frame = srh(143, 0, 4, &[MY_DT2U, PEER_SID]);
    srh_frame.extend_from_slice(&inner(MAC_L2, 0));
    let turned: Vec<Vec<u8>> = (0..21)
        .map(|k| match k % 7 {
            0 => to_sid(MY_DT2U, &inner(MAC_L2, k), 143),
            1 => encapsulated(&ipv4(REMOTE4, A4, 17, 60, 0, true, &udp(k, 9, b"x")), 4),
            2 => to_sid(MY_DT2U, &srh_frame, 43),
            3 => to_sid(MY_DT2M, &inner([0xff; 6], k), 143),
            4 => to_sid(MY_DT2U, &inner(MAC_L2, k)[..10], 143),
            5 => to_sid(MY_BAD_DT2U, &inner(MAC_L2, k), 143),
            _ => to_sid(MY_L_DT2U, &inner(MAC_LPOD, k), 143),
        })
        .collect();
    t.both(PortId::UPLINK, &turned);
    // The learning network's SID: unknown MACs flooded to its local ports.
    let learning: Vec<Vec<u8>> = (0..16)
        .map(|k| {
            let dst = [MAC_LPOD, [2, 0, 0, 0, 0, 0x79]][usize::from(k % 2)];
            to_sid(MY_L_DT2U, &inner(dst, k), 143)
        })
        .collect();
    let r = t.both(PortId::UPLINK, &learning);
    assert_eq!(r.counters.total_drops(), 0);
    assert_eq!(r.sent.len(), 8 + 8 * 2);
}

#[test]
fn request_vectors_skip_the_per_packet_classification_with_the_general_bytes() {
    let mut t = Twins::new(|_| {});
    let ll = ENDPOINT_LL;
    let nd = l2_nd_mixed();
    let uniform: Vec<Vec<u8>> = (0..32).map(|k| solicit(MAC_L2, L2_6, L2R6, k)).collect();
    let r = t.both(L2POD, &uniform);
    assert_eq!(r.sent.len(), 32);
    assert_eq!(r.counters.stage(Stage::NdReply), 32);
    t.both(L2POD, &nd);
    // An NDP frame whose IPv6 header is cut short: malformed in pod-input on both nodes.
    let mut cut = solicit(MAC_L2, L2_6, L2R6, 0);
    cut.truncate(14 + 40 + 8);
    let r = t.both(L2POD, &[cut.clone(), cut]);
    assert_eq!(r.counters.drop(DropReason::Malformed), 2);
    // l3: solicitations for the gateway (to its address or a multicast one), and one for
    // another address, routed IPv6 among them (turned away by the request pass).
    let gw: Vec<Vec<u8>> = (0..32)
        .map(|k| {
            let src = [A6, ll][usize::from(k % 2)];
            let mut f = eth(GW_MAC, MAC_A, 0x86dd, &ns(src, GW6, GW6, Some(MAC_A)));
            if k % 3 == 0 {
                f = solicit(MAC_A, src, GW6, k);
            }
            f
        })
        .collect();
    let r = t.both(A, &gw);
    assert_eq!(r.sent.len(), 32);
    let l3_mixed: Vec<Vec<u8>> = (0..16)
        .map(|k| match k % 4 {
            0 => solicit(MAC_A, A6, GW6, k),
            1 => eth(GW_MAC, MAC_A, 0x86dd, &ns(A6, B6, B6, Some(MAC_A))),
            2 => from_a6(REMOTE6, 64, &udp(k, 9, b"x")),
            _ => solicit(MAC_B, A6, GW6, k),
        })
        .collect();
    t.both(A, &l3_mixed);
    // ARP: requests for other endpoints and the gateway, a probe, an announcement, a reply,
    // in another MAC's name; and on the learning network a learned MAC's requests.
    let asks = |tpa| {
        eth(
            [0xff; 6],
            MAC_L2,
            0x0806,
            &arp(1, MAC_L2, L2_4, [0; 6], tpa),
        )
    };
    let uniform: Vec<Vec<u8>> = (0..32).map(|_| asks(L2R4)).collect();
    let r = t.both(L2POD, &uniform);
    assert_eq!(r.sent.len(), 32);
    let arp_mixed: Vec<Vec<u8>> = (0..32)
        .map(|k| match k % 8 {
            0 | 1 => asks(L2R4),
            2 => asks(L2GW4),
            3 => asks(Ipv4Addr::new(10, 9, 0, 77)),
            4 => asks(L2_4),
            5 => eth(
                [0xff; 6],
                MAC_L2,
                0x0806,
                &arp(1, MAC_L2, Ipv4Addr::UNSPECIFIED, [0; 6], L2R4),
            ),
            6 => eth(
                [0xff; 6],
                MAC_L2,
                0x0806,
                &arp(2, MAC_L2, L2_4, MAC_L2R, L2R4),
            ),
            _ => eth(
                [0xff; 6],
                MAC_L2,
                0x0806,
                &arp(1, MAC_L2B, L2_4, [0; 6], L2R4),
            ),
        })
        .collect();
    t.both(L2POD, &arp_mixed);
    let learned: Vec<Vec<u8>> = (0..8)
        .map(|k| match k % 2 {
            0 => eth(
                [0xff; 6],
                MAC_LPOD,
                0x0806,
                &arp(1, MAC_LPOD, LPOD4, [0; 6], LGW4),
            ),
            _ => eth(
                [0xff; 6],
                MAC_VM,
                0x0806,
                &arp(1, MAC_VM, VM4, [0; 6], LPOD2_4),
            ),
        })
        .collect();
    t.both(LPOD, &learned);
}
