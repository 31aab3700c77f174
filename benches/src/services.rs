//! ClusterIP Services as the forwarder reads them when a NEW connection goes to a ClusterIP:
//! the (network, ClusterIP, protocol, port) key looked up in the node's Service table, then the
//! Maglev pick of a backend by the connection's hash (`Snapshot::service` +
//! `ServiceView::pick`, lace-shared's reader API), on real tables in `/dev/shm` written by
//! [`TableWriter::set_service`] with the records lace-control compiles
//! ([`lace_control::compile::service_info`]).
//!
//! The workload ([`ServiceWorkload`]) is a cluster's worth of Services in one network: `n`
//! Services with a ClusterIP each (10.96.0.0/16 and up), three ports (80/TCP, 443/TCP,
//! 53/UDP), ten ready backends per port; connections pick a Service port at random with a
//! random flow hash.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use lace_control::compile::service_info;
use lace_shared::policy::{Backend, BackendState, ServiceInfo, ServiceKey, PROTO_TCP, PROTO_UDP};
use lace_shared::tables::{ReaderHandle, TableReader, TableWriter, TablesConfig};
use lace_shared::types::{MacAddr, NetworkId, NetworkInfo, NetworkKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::lace::{shm_dir, Cleanup};

/// The network every Service key names.
pub const NETWORK: NetworkId = NetworkId(1);

/// The ports of every Service: (protocol, port).
pub const PORTS: [(u8, u16); 3] = [(PROTO_TCP, 80), (PROTO_TCP, 443), (PROTO_UDP, 53)];

/// The Service ports of the workload and their records.
#[derive(Debug)]
pub struct ServiceWorkload {
    /// Every Service port's key, in the order of `infos`.
    pub keys: Vec<ServiceKey>,
    /// Every Service port's record, as lace-control compiles it.
    pub infos: Vec<ServiceInfo>,
}

impl ServiceWorkload {
    /// `services` Services of [`PORTS`] with `backends` ready backends per port.
    pub fn new(services: usize, backends: usize) -> ServiceWorkload {
        let mut keys = Vec::new();
        let mut infos = Vec::new();
        for s in 0..services {
            let s = s as u32;
            let vip = IpAddr::V4(Ipv4Addr::from(0x0a60_0000 + s));
            for (p, &(proto, port)) in PORTS.iter().enumerate() {
                let list: Vec<Backend> = (0..backends as u32)
                    .map(|b| Backend {
                        // 10.40.0.0/16 onwards: one pod address per backend.
                        addr: IpAddr::V4(Ipv4Addr::from(
                            0x0a28_0000 + s * 16 + b + (p as u32) * 0x10_0000,
                        )),
                        port: 8000 + port,
                        state: BackendState {
                            ready: true,
                            serving: true,
                            terminating: false,
                        },
                    })
                    .collect();
                keys.push(ServiceKey::new(NETWORK, vip, proto, port));
                infos.push(service_info(vip, None, false, &list));
            }
        }
        ServiceWorkload { keys, infos }
    }

    /// `n` NEW connections: a Service port (by index) and a flow hash each.
    pub fn connections(&self, n: usize, seed: u64) -> Vec<(u32, u64)> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| (rng.gen_range(0..self.keys.len() as u32), rng.gen::<u64>()))
            .collect()
    }

    /// The backend index the record of Service port `i` gives `hash`, as lace-control wrote
    /// it (the reference the tables are checked against).
    pub fn expected(&self, i: u32, hash: u64) -> Option<u32> {
        let t = &self.infos[i as usize].table;
        (!t.is_empty()).then(|| t[(hash % t.len() as u64) as usize])
    }
}

/// A Service key as the 24 bytes it is in memory (`rte_hash` hashes the same bytes).
pub fn key_bytes(k: &ServiceKey) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[..16].copy_from_slice(&k.addr);
    b[16..20].copy_from_slice(&k.network.to_ne_bytes());
    b[20..22].copy_from_slice(&k.port.to_ne_bytes());
    b[22] = k.proto;
    b
}

/// The workload's Services in real tables (one network), and a reader of them.
#[derive(Debug)]
pub struct LaceServices {
    _writer: TableWriter,
    reader: Arc<TableReader>,
    _cleanup: Cleanup,
}

impl LaceServices {
    /// Writes every Service port of `w` and publishes; returns the tables and the time the
    /// writes and the publication took.
    pub fn build(w: &ServiceWorkload) -> anyhow::Result<(LaceServices, Duration)> {
        let cfg = TablesConfig {
            dir: shm_dir(),
            name: format!("lace-bench-{}-services", std::process::id()),
            size: 1 << 30,
            reader_slots: 4,
        };
        let mut writer = TableWriter::create(&cfg)
            .with_context(|| format!("creating tables {}", cfg.tables_path().display()))?;
        let cleanup = Cleanup(cfg.clone());
        let start = Instant::now();
        writer.set_network(
            NETWORK,
            &NetworkInfo {
                kind: NetworkKind::L3,
                anonymous: false,
                gateway_mac: MacAddr([6, 0, 0, 0, 0, 1]),
                gateway4: Some(Ipv4Addr::new(10, 40, 0, 1)),
                gateway6: None,
                mtu: 1460,
                stateful: true,
                l2: Default::default(),
            },
        )?;
        for (k, info) in w.keys.iter().zip(&w.infos) {
            writer.set_service(*k, info)?;
        }
        writer.publish()?;
        let took = start.elapsed();
        let reader = TableReader::attach(&cfg).context("attaching the Service tables")?;
        Ok((
            LaceServices {
                _writer: writer,
                reader,
                _cleanup: cleanup,
            },
            took,
        ))
    }

    /// A reader handle (one per measuring thread).
    pub fn handle(&self) -> anyhow::Result<ReaderHandle> {
        self.reader.register().context("a reader slot")
    }
}

/// One burst of NEW connections as the forwarder handles them: a snapshot, then for each the
/// Service lookup and the Maglev pick; `out[i]` is the picked backend's index and target port
/// (`u64::MAX` when the key is missing or the Service rejects).
#[inline(always)]
pub fn pick_burst(
    h: &mut ReaderHandle,
    keys: &[ServiceKey],
    conns: &[(u32, u64)],
    out: &mut [u64],
) {
    {
        let snap = h.snapshot();
        for (o, &(k, hash)) in out.iter_mut().zip(conns) {
            *o = snap
                .service(&keys[k as usize])
                .and_then(|s| s.pick(hash))
                .map_or(u64::MAX, |(i, b)| u64::from(i) << 16 | u64::from(b.port));
        }
    }
    h.quiescent();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables give every connection the backend lace-control's record gives it.
    #[test]
    fn picks_match_the_compiled_records() {
        let w = ServiceWorkload::new(20, 10);
        assert_eq!(w.keys.len(), 60);
        let (t, _) = LaceServices::build(&w).unwrap();
        let mut h = t.handle().unwrap();
        let conns = w.connections(2_000, 7);
        let mut out = vec![0; conns.len()];
        pick_burst(&mut h, &w.keys, &conns, &mut out);
        for (&(k, hash), &o) in conns.iter().zip(&out) {
            let want = w.expected(k, hash).unwrap();
            let port = PORTS[k as usize % 3].1 + 8000;
            assert_eq!(o, u64::from(want) << 16 | u64::from(port));
        }
        assert_ne!(key_bytes(&w.keys[0]), key_bytes(&w.keys[1]));
    }
}
