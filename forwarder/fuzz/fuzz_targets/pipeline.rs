//! The pipeline entry: any frame on any kind of port (uplink, pods of l3 and l2 networks, a
//! port whose network is gone, an unknown port) runs through the real stages against real
//! tables without panicking, and every packet leaves accounted for: at most the packet itself
//! (forwarded, answered or turned into an ICMP error) plus one neighbor solicitation comes out,
//! and every frame that goes out starts with a whole Ethernet header.
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

use lace_forwarder::pipeline::fixture::{self, Node};
use lace_forwarder::pipeline::{Io, PacketBuf, Pipeline, UnderlayNeighbors, VecBuf};
use lace_shared::types::PortId;
use libfuzzer_sys::fuzz_target;

struct FuzzIo {
    sent: Vec<(PortId, VecBuf)>,
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

const PORTS: [PortId; 7] = [
    PortId::UPLINK,
    fixture::A,
    fixture::B,
    fixture::C,
    fixture::L2POD,
    fixture::ORPHAN,
    PortId(42),
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let Some(buf) = VecBuf::from_slice(frame) else {
        return;
    };
    let mut s = state().lock().unwrap();
    s.now += 50_000_000;
    let mut io = FuzzIo {
        sent: Vec::new(),
        now: s.now,
    };
    let rx = PORTS[usize::from(sel) % PORTS.len()];
    let State { node, pipe, .. } = &mut *s;
    let mut pkts = vec![buf];
    pipe.process(&node.reader.snapshot(), rx, &mut pkts, &mut io);
    assert!(pkts.is_empty());
    assert!(io.sent.len() <= 2, "one frame in, {} out", io.sent.len());
    for (_, p) in &io.sent {
        assert!(p.len() >= 14, "a {}-byte frame went out", p.len());
    }
    node.reader.quiescent();
});
