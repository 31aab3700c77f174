//! IPAM throughput: one allocate + one release per iteration on an l3 network 10.0.0.0/16 with
//! /24 blocks, 8 nodes each holding about 200 live pods (a realistic, fragmented steady state).
//!
//! Prints `ipam.alloc_per_s <figure>` (allocate+release pairs per second, [`Ipam`] without
//! the mutex or the store) for the bench report.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use lace_control::api::NetworkType;
use lace_control::ipam::{AllocateRequest, AttachmentKey, Ipam, IpamConfig, NetworkDef, PodRef};

const NODES: usize = 8;
const LIVE_PER_NODE: usize = 200;

fn request(i: usize) -> AllocateRequest {
    AllocateRequest {
        key: AttachmentKey {
            container_id: format!("c{i:012}"),
            ifname: "eth0".into(),
        },
        network: "backend".into(),
        node: format!("node-{}", i % NODES),
        pod: PodRef {
            namespace: "default".into(),
            name: format!("pod-{i}"),
        },
    }
}

fn bench(c: &mut Criterion) {
    let mut ipam = Ipam::new(IpamConfig::default()).expect("default config");
    let def = NetworkDef {
        kind: NetworkType::L3,
        v4: Some(("10.0.0.0/16".parse().expect("prefix"), Some(24))),
        v6: None,
    };
    ipam.ensure_network("backend", &def).expect("network");
    for n in 0..NODES {
        ipam.ensure_node(&format!("node-{n}")).expect("node");
    }
    // A ring of requests: the oldest lease is released as a new one is made.
    let ring = NODES * LIVE_PER_NODE;
    let reqs: Vec<AllocateRequest> = (0..ring + NODES).map(request).collect();
    for r in &reqs[..ring] {
        ipam.allocate(r).expect("prefill");
    }
    let mut next = 0usize;
    let mut total = (0u64, Duration::ZERO);
    c.bench_function("ipam/allocate+release /16 with /24 blocks", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let new = &reqs[(next + ring) % reqs.len()];
                let lease = ipam.allocate(new).expect("a block has room");
                std::hint::black_box(&lease);
                ipam.release(&reqs[next % reqs.len()].key);
                next = (next + 1) % reqs.len();
            }
            let took = start.elapsed();
            total.0 += iters;
            total.1 += took;
            took
        })
    });
    if !total.1.is_zero() {
        println!(
            "ipam.alloc_per_s {:.0}",
            total.0 as f64 / total.1.as_secs_f64()
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
