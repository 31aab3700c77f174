//! IPAM allocate + release pairs on a /16 with /24 blocks, 8 nodes and 1,600 live leases: the
//! oldest lease is released as a new one is made. The workload is `lace-bench`'s
//! (`lace_benches::control::filled_ipam`), which reports `ipam.alloc_per_s` against a floor.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use lace_benches::control::filled_ipam;

fn ipam(c: &mut Criterion) {
    let (mut ipam, mut ring) = filled_ipam().expect("IPAM");
    c.bench_function("ipam/allocate+release /16 with /24 blocks", |b| {
        b.iter(|| {
            let (new, old) = ring.step();
            black_box(ipam.allocate(new).expect("a block has room"));
            ipam.release(old);
        })
    });
}

criterion_group!(benches, ipam);
criterion_main!(benches);
