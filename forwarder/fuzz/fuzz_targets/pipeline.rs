//! The pipeline entry: any frame on any kind of port (uplink, the node's host interface, pods
//! of l3 and l2 networks — one with learning, whose announcements, refreshes, BUM limit and
//! unknown-unicast flooding it reaches —, pods of a stateful network through the connection
//! tracker, a port whose network is gone, an unknown port) runs through the real stages against
//! real tables without panicking, and every packet leaves accounted for: at most the packet
//! itself (forwarded, answered or turned into an ICMP error) plus one neighbor solicitation — or,
//! for a flooded l2 frame, one copy per flood-list member plus solicitations — comes out, every
//! frame that goes out starts with a whole Ethernet header, and learn reports come only from the
//! learning network's ports.
//!
//! Input: the first byte picks the receiving port (its low 7 bits). With its top bit clear the
//! rest is one frame; with it set the rest is a burst received together on that port — frames
//! of `u16` little-endian length each, the last one taking what remains — so mixed vectors
//! (the general path) and uniform ones (handed over whole, fused nodes) both meet the fuzzer.
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

use lace_forwarder::pipeline::fixture::{self, Node};
use lace_forwarder::pipeline::{Io, PacketBuf, Pipeline, UnderlayNeighbors, VecBuf};
use lace_shared::learn::LearnEvent;
use lace_shared::types::PortId;
use libfuzzer_sys::fuzz_target;

struct FuzzIo {
    sent: Vec<(PortId, VecBuf)>,
    learned: Vec<LearnEvent>,
    now: u64,
}

impl Io<VecBuf> for FuzzIo {
    fn send(&mut self, port: PortId, pkt: VecBuf) {
        self.sent.push((port, pkt));
    }
    fn port_up(&self, port: PortId) -> bool {
        port != fixture::DOWN
    }
    fn alloc(&mut self) -> Option<VecBuf> {
        Some(VecBuf::new())
    }
    fn now_ns(&self) -> u64 {
        self.now
    }
    fn learn(&mut self, event: &LearnEvent) {
        self.learned.push(*event);
    }
}

struct State {
    node: Node,
    pipe: Pipeline<VecBuf>,
    now: u64,
}

fn state() -> &'static Mutex<State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(|| {
        Mutex::new(State {
            node: fixture::node(),
            pipe: Pipeline::new(fixture::cfg(), Arc::new(UnderlayNeighbors::new(64))),
            now: 0,
        })
    })
}

const PORTS: [PortId; 15] = [
    PortId::UPLINK,
    fixture::HOST,
    fixture::A,
    fixture::B,
    fixture::C,
    fixture::L2POD,
    fixture::L2B,
    fixture::EXTPOD,
    fixture::ORPHAN,
    PortId(42),
    fixture::LPOD,
    fixture::LPOD2,
    fixture::S1,
    fixture::S2,
    fixture::S3,
];

/// The vector a burst input describes (see the module doc), at most 8 frames.
fn burst(mut rest: &[u8]) -> Vec<VecBuf> {
    let mut pkts = Vec::new();
    while !rest.is_empty() && pkts.len() < 8 {
        let frame = match rest {
            [lo, hi, tail @ ..] if pkts.len() < 7 => {
                let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
                let (frame, after) = tail.split_at(len);
                rest = after;
                frame
            }
            _ => std::mem::take(&mut rest),
        };
        if let Some(buf) = VecBuf::from_slice(frame) {
            pkts.push(buf);
        }
    }
    pkts
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut pkts = if sel & 0x80 == 0 {
        VecBuf::from_slice(rest).into_iter().collect()
    } else {
        burst(rest)
    };
    if pkts.is_empty() {
        return;
    }
    let frames = pkts.len();
    let mut s = state().lock().unwrap();
    s.now += 50_000_000;
    let mut io = FuzzIo {
        sent: Vec::new(),
        learned: Vec::new(),
        now: s.now,
    };
    let rx = PORTS[usize::from(sel & 0x7f) % PORTS.len()];
    let State { node, pipe, .. } = &mut *s;
    pipe.process(&node.reader.snapshot(), rx, &mut pkts, &mut io);
    assert!(pkts.is_empty());
    // Each frame: itself (forwarded, answered, an ICMP error) or its flooded copies, plus a
    // neighbor solicitation per copy toward an unresolved node.
    let most = frames * (1 + fixture::L2_FLOOD_MEMBERS);
    assert!(
        io.sent.len() <= most,
        "{frames} frames in, {} out",
        io.sent.len()
    );
    for (_, p) in &io.sent {
        assert!(p.len() >= 14, "a {}-byte frame went out", p.len());
    }
    // Learn reports: at most two per frame (an announcement, or a refresh of a learned MAC),
    // only from pod ports of the learning network, and only about that network.
    assert!(io.learned.len() <= 2 * frames, "{} reports", io.learned.len());
    for e in &io.learned {
        assert!(
            matches!(e.port, fixture::LPOD | fixture::LPOD2) && e.port == rx,
            "a report from port {:?} (frames on {rx:?})",
            e.port
        );
        assert_eq!(e.network, fixture::LNET);
    }
    node.reader.quiescent();
});
