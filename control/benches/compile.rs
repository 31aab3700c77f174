//! Compiler latency for one pod change at cluster scale: 100 l3 networks × 50 nodes × 20 pods
//! per (node, network) — 100 000 endpoints, 2 000 of them on the compiled node — with 10
//! bidirectional routing policies joining network pairs. Each iteration adds or removes one
//! pod on the compiled node and measures `Compiler::plan` (incremental) + `Compiler::apply`
//! (diff, writes, one publication) into real shared-memory tables.
//!
//! Prints `compile.one_pod.p99_us` (and p50/max) from an HDR histogram of 2 000 changes, then
//! criterion's mean. The target is p99 ≤ 1000 µs; it is reported, never asserted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use hdrhistogram::Histogram;
use ipnet::IpNet;
use lace_control::api::{Direction, NetworkType};
use lace_control::compile::{Change, CompileConfig, Compiler};
use lace_control::world::{
    AttachmentKey, EndpointModel, NetworkModel, NodeModel, RoutingModel, World,
};
use lace_shared::tables::{TableWriter, TablesConfig};
use lace_shared::types::{IfName, MacAddr, NetworkId, NodeId, PortId};

const NETWORKS: u32 = 100;
const NODES: u32 = 50;
const PODS: u32 = 20;
const ME: &str = "node-1";

fn key(n: u32, k: u32, i: u32) -> AttachmentKey {
    AttachmentKey {
        container_id: format!("c-{n}-{k}-{i}"),
        ifname: "eth0".into(),
    }
}

fn pod(n: u32, k: u32, i: u32) -> EndpointModel {
    EndpointModel {
        namespace: "bench".into(),
        pod: format!("pod-{n}-{k}-{i}"),
        network: format!("net-{n}"),
        node: format!("node-{k}"),
        addresses: vec![
            IpAddr::V4(Ipv4Addr::new(10, n as u8, k as u8, (i + 2) as u8)),
            IpAddr::V6(Ipv6Addr::new(
                0xfd00,
                n as u16,
                0,
                k as u16,
                0,
                0,
                0,
                i as u16 + 2,
            )),
        ],
        mac: MacAddr([2, 0, n as u8, k as u8, 0, i as u8]),
        port: PortId(n * 100 + i + 1),
        host_iface: IfName::new(&format!("lc{n}x{i}")).unwrap(),
        endpoint_id: u64::from(n) << 32 | u64::from(k) << 16 | u64::from(i),
    }
}

fn world() -> World {
    let mut w = World::default();
    for k in 1..=NODES {
        w.nodes.insert(
            format!("node-{k}"),
            NodeModel {
                name: format!("node-{k}"),
                id: NodeId(k),
                locator: format!("fc00:0:{k:x}::/48").parse().unwrap(),
                underlay: format!("fd00::{k:x}").parse().unwrap(),
            },
        );
    }
    for n in 1..=NETWORKS {
        w.networks.insert(
            format!("net-{n}"),
            NetworkModel {
                name: format!("net-{n}"),
                id: NetworkId(n),
                kind: NetworkType::L3,
                v4: Some((format!("10.{n}.0.0/16").parse().unwrap(), Some(24))),
                v6: Some((format!("fd00:{n:x}::/32").parse().unwrap(), Some(64))),
                external: vec![],
                anonymous: false,
            },
        );
        for k in 1..=NODES {
            w.allocations.insert(
                (format!("net-{n}"), format!("node-{k}")),
                vec![
                    IpNet::V4(format!("10.{n}.{k}.0/24").parse().unwrap()),
                    IpNet::V6(format!("fd00:{n:x}:0:{k:x}::/64").parse().unwrap()),
                ],
            );
            for i in 0..PODS {
                w.endpoints.insert(key(n, k, i), pod(n, k, i));
            }
        }
    }
    for p in 0..10 {
        w.routing.push(RoutingModel {
            name: format!("policy-{p}"),
            priority: 0,
            sources: vec![format!("net-{}", 2 * p + 1)],
            destination: format!("net-{}", 2 * p + 2),
            prefixes: vec![],
            direction: Direction::Bidirectional,
        });
    }
    w
}

struct Bench {
    world: World,
    compiler: Compiler,
    writer: TableWriter,
    turn: u32,
    _dir: Dir,
}

struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Bench {
    fn new() -> Bench {
        let dir = std::env::temp_dir().join(format!("lace-compile-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = TablesConfig {
            dir: dir.clone(),
            name: "bench".into(),
            size: 512 << 20,
            reader_slots: 4,
        };
        let mut writer = TableWriter::open_or_create(&cfg).unwrap();
        let world = world();
        let mut compiler = Compiler::new(ME, CompileConfig::default());
        let first = compiler.plan(&world, &[Change::All]).unwrap();
        let stats = compiler.apply(&mut writer, first.tables).unwrap();
        eprintln!(
            "compile bench: {} endpoints, {} on {ME}: {} routes, {} ports, {} SIDs, {} nodes",
            world.endpoints.len(),
            compiler.last().ports.len(),
            compiler.last().route_count(),
            stats.ports_set,
            stats.sids_set,
            stats.nodes_set,
        );
        Bench {
            world,
            compiler,
            writer,
            turn: 0,
            _dir: Dir(dir),
        }
    }

    /// Adds or removes pod 20 of one network on this node; returns (plan + apply, plan) time.
    fn one_pod(&mut self) -> (Duration, Duration) {
        let n = self.turn % NETWORKS + 1;
        let adding = (self.turn / NETWORKS) % 2 == 0;
        self.turn += 1;
        let k = key(n, 1, PODS);
        if adding {
            self.world.endpoints.insert(k.clone(), pod(n, 1, PODS));
        } else {
            self.world.endpoints.remove(&k);
        }
        let t = Instant::now();
        let next = self
            .compiler
            .plan(&self.world, &[Change::Endpoint(k)])
            .unwrap();
        let planned = t.elapsed();
        let st = self.compiler.apply(&mut self.writer, next.tables).unwrap();
        let d = t.elapsed();
        assert!(st.ports_set + st.ports_removed == 1, "{st:?}");
        (d, planned)
    }
}

fn compile(c: &mut Criterion) {
    let mut b = Bench::new();
    let mut total = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut plan = total.clone();
    for _ in 0..200 {
        b.one_pod();
    }
    for _ in 0..2000 {
        let (t, p) = b.one_pod();
        total.saturating_record(t.as_nanos() as u64);
        plan.saturating_record(p.as_nanos() as u64);
    }
    let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!("compile.one_pod.p50_us {:.1}", us(&total, 0.5));
    println!(
        "compile.one_pod.p99_us {:.1} (target <= 1000)",
        us(&total, 0.99)
    );
    println!("compile.one_pod.max_us {:.1}", total.max() as f64 / 1000.0);
    println!(
        "compile.one_pod.plan_p50_us {:.1} plan_p99_us {:.1}",
        us(&plan, 0.5),
        us(&plan, 0.99)
    );
    c.bench_function("compile/one_pod", |bch| {
        bch.iter_custom(|iters| (0..iters).map(|_| b.one_pod().0).sum::<Duration>())
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    targets = compile
}
criterion_main!(benches);
