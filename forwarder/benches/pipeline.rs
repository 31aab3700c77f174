//! The pipeline alone (no DPDK, no I/O): cycles per packet for each path on the fixture node,
//! bursts of 32 heap buffers refilled from a template before each burst. `lace-bench` reports
//! the same paths end to end over DPDK null ports; this bench is for profiling the stages
//! (`cargo bench -p lace-forwarder --bench pipeline`, or under `perf record`).

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use lace_forwarder::pipeline::fixture::{self, Node};
use lace_forwarder::pipeline::{Io, PacketBuf, Pipeline, UnderlayNeighbors, VecBuf};
use lace_shared::types::PortId;

struct SinkIo {
    out: Vec<VecBuf>,
}

impl Io<VecBuf> for SinkIo {
    fn send(&mut self, _port: PortId, pkt: VecBuf) {
        self.out.push(pkt);
    }
    fn port_up(&self, _port: PortId) -> bool {
        true
    }
    fn alloc(&mut self) -> Option<VecBuf> {
        None
    }
    fn now_ns(&self) -> u64 {
        0
    }
    fn learn(&mut self, _event: &lace_shared::learn::LearnEvent) {
        // No path of this bench is on a learning network: a report would be a bug.
        panic!("a learn report on a path without learning");
    }
}

fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn ipv4_udp(src: Ipv4Addr, dst: Ipv4Addr, total: usize) -> Vec<u8> {
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let c = csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp_len = total - 20;
    ip.extend_from_slice(&[0x13, 0x88, 0x27, 0x10]);
    ip.extend_from_slice(&(udp_len as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.resize(total, 0x5a);
    ip
}

fn frame(dst: [u8; 6], src: [u8; 6], ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&ty.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn paths() -> Vec<(&'static str, PortId, Vec<u8>)> {
    let local = frame(
        fixture::GW_MAC,
        fixture::MAC_A,
        0x0800,
        &ipv4_udp(fixture::A4, fixture::B4, 50),
    );
    let encap = frame(
        fixture::GW_MAC,
        fixture::MAC_A,
        0x0800,
        &ipv4_udp(fixture::A4, fixture::REMOTE4, 50),
    );
    let inner = ipv4_udp(fixture::REMOTE4, fixture::A4, 28);
    let mut outer = vec![0x60, 0, 0, 1, 0, inner.len() as u8, 4, 63];
    outer.extend_from_slice(&fixture::PEER.octets());
    outer.extend_from_slice(&fixture::MY_SID.octets());
    outer.extend_from_slice(&inner);
    let decap = frame(fixture::UPLINK_MAC, fixture::PEER_MAC, 0x86dd, &outer);
    let mut arp = vec![0, 1, 8, 0, 6, 4, 0, 1];
    arp.extend_from_slice(&fixture::MAC_A);
    arp.extend_from_slice(&fixture::A4.octets());
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&fixture::GW4.octets());
    let arp = frame([0xff; 6], fixture::MAC_A, 0x0806, &arp);
    // The l2 pod asks for the remote endpoint's addresses (answered from the neighbor table).
    let mut who = vec![0, 1, 8, 0, 6, 4, 0, 1];
    who.extend_from_slice(&fixture::MAC_L2);
    who.extend_from_slice(&fixture::L2_4.octets());
    who.extend_from_slice(&[0; 6]);
    who.extend_from_slice(&fixture::L2R4.octets());
    let arp_proxy = frame([0xff; 6], fixture::MAC_L2, 0x0806, &who);
    let nd_proxy = solicitation(fixture::MAC_L2, fixture::L2_6, fixture::L2R6);
    // The l2 pod's frame to the remote endpoint's MAC (encapsulated whole to node 2's End.DT2U
    // SID), and node 2's frame to the l2 pod, encapsulated to this node's End.DT2U SID.
    let l2_encap = frame(
        fixture::MAC_L2R,
        fixture::MAC_L2,
        0x0800,
        &ipv4_udp(fixture::L2_4, fixture::L2R4, 50),
    );
    let l2_inner = frame(
        fixture::MAC_L2,
        fixture::MAC_L2R,
        0x0800,
        &ipv4_udp(fixture::L2R4, fixture::L2_4, 50),
    );
    let mut l2_outer = vec![0x60, 0, 0, 1];
    l2_outer.extend_from_slice(&(l2_inner.len() as u16).to_be_bytes());
    l2_outer.extend_from_slice(&[143, 63]);
    l2_outer.extend_from_slice(&fixture::PEER.octets());
    l2_outer.extend_from_slice(&fixture::MY_DT2U.octets());
    l2_outer.extend_from_slice(&l2_inner);
    let l2_decap = frame(fixture::UPLINK_MAC, fixture::PEER_MAC, 0x86dd, &l2_outer);
    vec![
        ("l3_local", fixture::A, local),
        ("l3_encap", fixture::A, encap),
        ("l3_decap", PortId::UPLINK, decap),
        ("arp_reply", fixture::A, arp),
        ("arp_proxy", fixture::L2POD, arp_proxy),
        ("nd_proxy", fixture::L2POD, nd_proxy),
        ("l2_encap", fixture::L2POD, l2_encap),
        ("l2_decap", PortId::UPLINK, l2_decap),
    ]
}

/// A neighbor solicitation from `mac`/`src` for `target`, to its solicited-node group, with
/// the source link-layer option.
fn solicitation(mac: [u8; 6], src: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let t = target.octets();
    let group = Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(t[13]),
        u16::from_be_bytes([t[14], t[15]]),
    );
    let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&t);
    icmp.extend_from_slice(&[1, 1]);
    icmp.extend_from_slice(&mac);
    let mut pseudo = src.octets().to_vec();
    pseudo.extend_from_slice(&group.octets());
    pseudo.extend_from_slice(&(icmp.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(&icmp);
    let c = csum(&pseudo);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[58, 255]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&group.octets());
    ip.extend_from_slice(&icmp);
    let g = group.octets();
    frame([0x33, 0x33, g[12], g[13], g[14], g[15]], mac, 0x86dd, &ip)
}

fn bench(c: &mut Criterion) {
    let mut node: Node = fixture::node();
    let mut pipe = Pipeline::new(fixture::cfg(), Arc::new(UnderlayNeighbors::new(64)));
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(32));
    for (name, rx, template) in paths() {
        let mut io = SinkIo {
            out: Vec::with_capacity(64),
        };
        let mut burst: Vec<VecBuf> = (0..32)
            .map(|_| VecBuf::from_slice(&template).unwrap())
            .collect();
        g.bench_function(name, |b| {
            b.iter(|| {
                let snap = node.reader.snapshot();
                pipe.process(&snap, rx, &mut burst, &mut io);
                // Refill the same buffers (a DPDK driver hands out recycled mbufs the same way).
                for mut buf in io.out.drain(..) {
                    buf.reset();
                    let _ = buf.append(template.len());
                    buf.data_mut().copy_from_slice(&template);
                    burst.push(buf);
                }
                black_box(&burst);
                node.reader.quiescent();
            })
        });
        assert_eq!(
            pipe.counters().total_drops(),
            0,
            "{name}: {:?}",
            pipe.counters()
        );
        pipe.take_counters();
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
