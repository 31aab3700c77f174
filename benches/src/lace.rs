//! lace's tables as the benchmarks build them, on real shared memory.
//!
//! * [`shm_arena`]: an [`Arena`] over a fresh region file in `/dev/shm`, unlinked as soon as it
//!   is mapped (nothing is left behind, even if the process dies).
//! * [`LaceFib`]: one FIB (`u32` IPv4 or `u128` IPv6 keys, host order) with its writer; every
//!   change is a batch that ends with `arena.published(epoch)` and `arena.reclaim(None)`, as the
//!   table writer does with no reader online.
//! * [`LaceHash`]: one exact-match table.
//! * [`MultiFib`]: many small FIBs in one arena, their headers in an array (one per network).
//! * [`PublishProbe`]: a real [`TableWriter`] and a [`TableReader`] thread, for the time from
//!   `publish()` until the reader sees the new generation.
//!
//! The `lace-bench` binary measures the figures with these types; the criterion benches use
//! them directly.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use lace_shared::arena::{Arena, ArenaStats};
use lace_shared::fib::{Fib, FibHdr, FibWriter, LpmKey};
use lace_shared::hash::{HashHdr, HashKey, HashTable};
use lace_shared::pod::Pod;
use lace_shared::region::{Region, RegionKind};
use lace_shared::tables::{TableReader, TableWriter, TablesConfig};
use lace_shared::types::{
    L2Settings, MacAddr, NetworkId, NetworkInfo, NetworkKind, NextHop, PortId,
};

use crate::workload::Route4;

/// Size of the region behind each benchmark arena. Regions are sparse tmpfs files, so only the
/// pages the tables touch cost memory; this is an upper bound, not a reservation.
pub const REGION_BYTES: u64 = 4 << 30;

/// Where the benchmark's region files go.
pub fn shm_dir() -> PathBuf {
    PathBuf::from("/dev/shm")
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A name unique in this machine for a region file of this process.
fn unique_name(what: &str) -> String {
    format!(
        "lace-bench-{}-{}-{what}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// An empty arena over a new `size`-byte region in [`shm_dir`], whose file is removed right
/// after it is mapped.
pub fn shm_arena(what: &str, size: u64) -> anyhow::Result<Arena> {
    let path = shm_dir().join(format!("{}.region", unique_name(what)));
    let region = Region::create(&path, RegionKind::Tables, size, [0; 4])
        .with_context(|| format!("creating the {what} region {}", path.display()))?;
    std::fs::remove_file(&path).with_context(|| format!("unlinking {}", path.display()))?;
    Arena::over(region).with_context(|| format!("an arena over {}", path.display()))
}

/// A short size tag for lace's figure ids: 900000 → `900k`, 1000000 → `1m` (the issue's
/// spelling; the DPDK anchors keep [`crate::report::size_tag`]'s `1M`).
pub fn lace_tag(n: usize) -> String {
    crate::report::size_tag(n).to_lowercase()
}

/// One lace FIB in its own arena, with its writer. Keys are host-order `u32` or `u128`.
#[derive(Debug)]
pub struct LaceFib<K: LpmKey> {
    arena: Arena,
    hdr: FibHdr,
    writer: FibWriter<K>,
    epoch: u64,
}

impl<K: LpmKey> LaceFib<K> {
    /// An empty FIB over a new region of `region_bytes`.
    pub fn empty(what: &str, region_bytes: u64) -> anyhow::Result<Self> {
        Ok(Self {
            arena: shm_arena(what, region_bytes)?,
            hdr: FibHdr::default(),
            writer: FibWriter::default(),
            epoch: 0,
        })
    }

    /// A FIB holding `routes`, loaded with one [`FibWriter::apply`] and published. Returns the
    /// FIB and the time the apply and the publication took.
    pub fn load(
        what: &str,
        region_bytes: u64,
        routes: &[(K, u8, u32)],
    ) -> anyhow::Result<(Self, Duration)> {
        let mut fib = Self::empty(what, region_bytes)?;
        let changes = as_changes(routes);
        let start = Instant::now();
        fib.apply(&changes)?;
        Ok((fib, start.elapsed()))
    }

    /// Applies a batch of changes (`Some(nh)`: add or replace, `None`: remove) and publishes it.
    pub fn apply(&mut self, changes: &[(K, u8, Option<u32>)]) -> anyhow::Result<()> {
        self.writer
            .apply(&mut self.arena, &mut self.hdr, changes)
            .with_context(|| format!("applying {} route changes", changes.len()))?;
        self.publish();
        Ok(())
    }

    /// Inserts one route and publishes it.
    pub fn insert(&mut self, prefix: K, len: u8, nh: u32) -> anyhow::Result<()> {
        self.writer
            .insert(&mut self.arena, &mut self.hdr, prefix, len, nh)
            .with_context(|| format!("inserting {prefix:?}/{len}"))?;
        self.publish();
        Ok(())
    }

    /// Ends a batch: everything retired waits for the (absent) readers, then is freed.
    fn publish(&mut self) {
        self.epoch += 1;
        self.arena.published(self.epoch);
        self.arena.reclaim(None);
    }

    /// Longest-prefix match of one key (0 = no route).
    #[inline]
    pub fn lookup(&self, key: K) -> u32 {
        Fib::<K>::lookup(self.arena.mem(), &self.hdr, key)
    }

    /// Longest-prefix match of a burst: `out[i]` for `keys[i]`.
    #[inline]
    pub fn lookup_bulk(&self, keys: &[K], out: &mut [u32]) {
        Fib::<K>::lookup_bulk(self.arena.mem(), &self.hdr, keys, out)
    }

    /// Bytes of every block the FIB uses (lookup structures and the route records it keeps).
    pub fn live_bytes(&self) -> u64 {
        self.arena.stats().live_bytes
    }

    /// The arena's figures.
    pub fn stats(&self) -> ArenaStats {
        self.arena.stats()
    }

    /// The FIB's header.
    pub fn hdr(&self) -> &FibHdr {
        &self.hdr
    }

    /// Every route the FIB holds, read back from its blocks (in no particular order).
    pub fn routes(&self) -> Vec<(K, u8, u32)> {
        Fib::<K>::routes(self.arena.mem(), &self.hdr)
    }
}

/// `routes` as additions for [`FibWriter::apply`].
pub fn as_changes<K: Copy>(routes: &[(K, u8, u32)]) -> Vec<(K, u8, Option<u32>)> {
    routes.iter().map(|&(p, l, nh)| (p, l, Some(nh))).collect()
}

/// IPv6 routes with host-order `u128` prefixes, as [`LaceFib<u128>`] takes them.
pub fn routes6_host(routes: &[crate::workload::Route6]) -> Vec<(u128, u8, u32)> {
    routes
        .iter()
        .map(|&(p, l, nh)| (u128::from_be_bytes(p), l, nh))
        .collect()
}

/// One lace exact-match table in its own arena.
#[derive(Debug)]
pub struct LaceHash<K, V> {
    arena: Arena,
    hdr: HashHdr,
    _kv: std::marker::PhantomData<fn() -> (K, V)>,
}

impl<K: HashKey, V: Pod> LaceHash<K, V> {
    /// A table sized for `entries.len()` entries (hash seed `seed`, for reproducible runs),
    /// holding `entries`, published. Returns it and the time the inserts took.
    pub fn build(
        what: &str,
        region_bytes: u64,
        entries: &[(K, V)],
        seed: u64,
    ) -> anyhow::Result<(Self, Duration)> {
        let mut arena = shm_arena(what, region_bytes)?;
        let mut hdr = HashHdr::default();
        let start = Instant::now();
        HashTable::<K, V>::with_capacity_seeded(&mut arena, &mut hdr, entries.len(), seed)
            .with_context(|| format!("sizing {what} for {} entries", entries.len()))?;
        for (k, v) in entries {
            HashTable::<K, V>::insert(&mut arena, &mut hdr, *k, *v)
                .with_context(|| format!("inserting into {what}"))?;
        }
        arena.published(1);
        arena.reclaim(None);
        let elapsed = start.elapsed();
        Ok((
            Self {
                arena,
                hdr,
                _kv: std::marker::PhantomData,
            },
            elapsed,
        ))
    }

    /// Looks up a burst: `out[i]` for `keys[i]`; returns the hits.
    #[inline]
    pub fn get_bulk(&self, keys: &[K], out: &mut [Option<V>]) -> usize {
        HashTable::<K, V>::get_bulk(self.arena.mem(), &self.hdr, keys, out)
    }

    /// Entries in the table.
    pub fn len(&self) -> usize {
        HashTable::<K, V>::len(&self.hdr)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of every block the table uses.
    pub fn live_bytes(&self) -> u64 {
        self.arena.stats().live_bytes
    }
}

/// Many IPv4 FIBs (one per network) in one arena, their headers in an array.
#[derive(Debug)]
pub struct MultiFib {
    arena: Arena,
    hdrs: Vec<FibHdr>,
}

impl MultiFib {
    /// Loads `networks[i]` into FIB `i`, one apply and one publication per network, as control
    /// does when networks appear one after another. Returns the tables and the load time.
    pub fn load(region_bytes: u64, networks: &[Vec<Route4>]) -> anyhow::Result<(Self, Duration)> {
        let mut arena = shm_arena("multi", region_bytes)?;
        let changes: Vec<_> = networks.iter().map(|r| as_changes(r)).collect();
        let mut hdrs = vec![FibHdr::default(); networks.len()];
        let start = Instant::now();
        for (i, (c, hdr)) in changes.iter().zip(&mut hdrs).enumerate() {
            // The writer's bookkeeping is heap, not region; the benchmark only reads afterwards.
            let mut w = FibWriter::<u32>::default();
            w.apply(&mut arena, hdr, c)
                .with_context(|| format!("loading network {i}"))?;
            arena.published(i as u64 + 1);
            arena.reclaim(None);
        }
        Ok((Self { arena, hdrs }, start.elapsed()))
    }

    /// Longest-prefix match of `key` in network `net` (0 = no route or no such network).
    #[inline]
    pub fn lookup(&self, net: u32, key: u32) -> u32 {
        match self.hdrs.get(net as usize) {
            Some(h) => Fib::<u32>::lookup(self.arena.mem(), h, key),
            None => 0,
        }
    }

    /// Bulk lookup of keys that all belong to network `net`.
    #[inline]
    pub fn lookup_bulk(&self, net: u32, keys: &[u32], out: &mut [u32]) {
        if let Some(h) = self.hdrs.get(net as usize) {
            Fib::<u32>::lookup_bulk(self.arena.mem(), h, keys, out)
        } else {
            out.fill(0);
        }
    }

    /// The FIB header of network `net`.
    pub fn hdr(&self, net: u32) -> Option<&FibHdr> {
        self.hdrs.get(net as usize)
    }

    /// Bulk lookup of keys of different networks: `out[i]` for `keys[i]` in the FIB whose
    /// header is `hdrs[i]` (from [`MultiFib::hdr`]), as a burst of several networks' packets.
    #[inline]
    pub fn lookup_bulk_mixed(&self, hdrs: &[&FibHdr], keys: &[u32], out: &mut [u32]) {
        Fib::<u32>::lookup_bulk_mixed(self.arena.mem(), hdrs, keys, out)
    }

    /// Networks held.
    pub fn networks(&self) -> usize {
        self.hdrs.len()
    }

    /// Arena bytes in use plus the header array (24 bytes per network).
    pub fn bytes(&self) -> u64 {
        self.arena.stats().live_bytes + std::mem::size_of_val(self.hdrs.as_slice()) as u64
    }
}

/// What the publish-latency reader thread did about its CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pinning {
    /// Pinned to this CPU.
    Pinned(usize),
    /// Not pinned: why.
    NotPinned(String),
}

impl std::fmt::Display for Pinning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pinning::Pinned(c) => write!(f, "reader pinned to cpu {c}"),
            Pinning::NotPinned(why) => write!(f, "reader NOT pinned ({why})"),
        }
    }
}

/// The kind of change each publish-latency sample publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// `set_neighbor` of one of 1,024 addresses to a new MAC.
    Neighbor,
    /// One /32 route added, or (every other sample) removed again.
    Route,
}

/// State shared by the writer and the reader thread of a [`PublishProbe`].
#[derive(Debug, Default)]
struct ProbeShared {
    stop: AtomicBool,
    /// The last generation the reader saw, stored after `seen_ns` (release).
    seen_gen: AtomicU64,
    /// When the reader first saw `seen_gen`, in ns since the probe's base instant.
    seen_ns: AtomicU64,
}

/// Removes a table set's files when dropped.
#[derive(Debug)]
pub(crate) struct Cleanup(pub(crate) TablesConfig);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0.tables_path());
        let _ = std::fs::remove_file(self.0.qsbr_path());
    }
}

/// A [`TableWriter`] with one network preloaded, and a reader thread spinning on
/// `snapshot()` + `quiescent()` (pinned to another CPU when asked), to time publications.
#[derive(Debug)]
pub struct PublishProbe {
    writer: TableWriter,
    shared: Arc<ProbeShared>,
    reader: Option<JoinHandle<()>>,
    pinning: Pinning,
    base: Instant,
    /// Samples taken so far, per [`Change`] kind.
    samples: [u64; 2],
    _cleanup: Cleanup,
}

/// The network every probe change goes to.
const PROBE_NET: NetworkId = NetworkId(1);

fn probe_mac(i: u64) -> MacAddr {
    let b = i.to_be_bytes();
    MacAddr([0x02, 0x1a, b[4], b[5], b[6], b[7]])
}

impl PublishProbe {
    /// Creates fresh tables in [`shm_dir`] (removed again when the probe drops) holding one L3
    /// network with `routes` (next hop: a local port per route) and 1,024 neighbors, starts the
    /// reader on `reader_cpu` and checks that it sees the network.
    pub fn start(reader_cpu: Option<usize>, routes: &[Route4]) -> anyhow::Result<Self> {
        let cfg = TablesConfig {
            dir: shm_dir(),
            name: unique_name("publish"),
            size: 256 << 20,
            reader_slots: 4,
        };
        let mut writer = TableWriter::create(&cfg)
            .with_context(|| format!("creating tables {}", cfg.tables_path().display()))?;
        let cleanup = Cleanup(cfg.clone());
        writer.set_network(
            PROBE_NET,
            &NetworkInfo {
                kind: NetworkKind::L3,
                anonymous: false,
                gateway_mac: MacAddr([2, 0, 0, 0, 0, 1]),
                gateway4: Some("10.0.0.1".parse().expect("literal")),
                gateway6: None,
                mtu: 1500,
                stateful: false,
                l2: L2Settings::default(),
            },
        )?;
        for &(p, len, nh) in routes {
            let hop = NextHop::Local {
                port: PortId(nh),
                mac: probe_mac(u64::from(nh)),
            };
            writer.add_route(PROBE_NET, std::net::Ipv4Addr::from(p).into(), len, hop)?;
        }
        for i in 0..1024u64 {
            writer.set_neighbor(PROBE_NET, neighbor_ip(i), probe_mac(i), false)?;
        }
        let first = writer.publish()?;
        let probe_ip = routes
            .iter()
            .find(|r| r.1 == 32)
            .or(routes.last())
            .map(|r| std::net::Ipv4Addr::from(r.0));

        let shared = Arc::new(ProbeShared::default());
        let base = Instant::now();
        let (tx, rx) = mpsc::channel::<anyhow::Result<Pinning>>();
        let reader = {
            let shared = Arc::clone(&shared);
            let cfg = cfg.clone();
            std::thread::Builder::new()
                .name("lace-reader".into())
                .spawn(move || reader_loop(&cfg, reader_cpu, probe_ip, &shared, base, &tx))
                .context("spawning the reader thread")?
        };
        let pinning = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                let _ = reader.join();
                return Err(e.context("starting the publish-latency reader"));
            }
            Err(_) => {
                shared.stop.store(true, Ordering::Relaxed);
                let _ = reader.join();
                bail!("the publish-latency reader did not start within 10 s");
            }
        };
        let probe = Self {
            writer,
            shared,
            reader: Some(reader),
            pinning,
            base,
            samples: [0; 2],
            _cleanup: cleanup,
        };
        probe.wait_seen(first)?;
        Ok(probe)
    }

    /// What the reader thread did about its CPU.
    pub fn pinning(&self) -> &Pinning {
        &self.pinning
    }

    /// Nanoseconds since the probe's base instant (the same clock on both threads).
    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Waits (spinning, at most one second) until the reader has seen `generation`; returns
    /// when it first saw it, in ns since the base instant.
    fn wait_seen(&self, generation: u64) -> anyhow::Result<u64> {
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut spins = 0u32;
        loop {
            if self.shared.seen_gen.load(Ordering::Acquire) >= generation {
                return Ok(self.shared.seen_ns.load(Ordering::Relaxed));
            }
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                if Instant::now() > deadline {
                    bail!(
                        "the reader did not see generation {generation} within 1 s (it saw {})",
                        self.shared.seen_gen.load(Ordering::Relaxed)
                    );
                }
                if self.reader.as_ref().is_none_or(|r| r.is_finished()) {
                    bail!("the reader thread stopped");
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Stages one change of kind `change`, then times from calling `publish()` until the
    /// reader sees the new generation.
    pub fn sample(&mut self, change: Change) -> anyhow::Result<Duration> {
        let counter = &mut self.samples[change as usize];
        let i = *counter;
        *counter += 1;
        match change {
            Change::Neighbor => {
                self.writer.set_neighbor(
                    PROBE_NET,
                    neighbor_ip(i % 1024),
                    probe_mac(i + 1024),
                    true,
                )?;
            }
            Change::Route => {
                let k = (i / 2) % 4096;
                let ip = std::net::Ipv4Addr::from(0x0ac8_0000 | k as u32).into();
                if i % 2 == 0 {
                    let hop = NextHop::Local {
                        port: PortId(1 + (k % 64) as u32),
                        mac: probe_mac(k),
                    };
                    self.writer.add_route(PROBE_NET, ip, 32, hop)?;
                } else if !self.writer.remove_route(PROBE_NET, ip, 32)? {
                    bail!("route {ip}/32 was not there to remove");
                }
            }
        }
        let t0 = self.now_ns();
        let generation = self.writer.publish()?;
        let seen = self.wait_seen(generation)?;
        Ok(Duration::from_nanos(seen.saturating_sub(t0)))
    }
}

impl Drop for PublishProbe {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

fn neighbor_ip(i: u64) -> std::net::IpAddr {
    std::net::Ipv4Addr::from(0x0a64_0000 | (i as u32 & 0xffff)).into()
}

/// The reader thread: pin, attach, check, report, then spin on snapshot + quiescent until told
/// to stop, recording when each new generation first appears.
fn reader_loop(
    cfg: &TablesConfig,
    cpu: Option<usize>,
    probe_ip: Option<std::net::Ipv4Addr>,
    shared: &ProbeShared,
    base: Instant,
    ready: &mpsc::Sender<anyhow::Result<Pinning>>,
) {
    let pinning = match cpu {
        None => Pinning::NotPinned("no second CPU available".into()),
        Some(c) => match crate::sys::pin_current_thread(c) {
            Ok(()) => Pinning::Pinned(c),
            Err(e) => Pinning::NotPinned(format!("sched_setaffinity(cpu {c}): {e}")),
        },
    };
    let start = || -> anyhow::Result<lace_shared::tables::ReaderHandle> {
        let reader = TableReader::attach(cfg).context("attaching the tables")?;
        let mut handle = reader.register().context("registering a reader")?;
        {
            let snap = handle.snapshot();
            let net = snap
                .network(PROBE_NET)
                .ok_or_else(|| anyhow!("the reader does not see network {}", PROBE_NET.0))?;
            if let Some(ip) = probe_ip {
                if net.route4_index(ip) == 0 {
                    bail!(
                        "the reader finds no route for {ip} in network {}",
                        PROBE_NET.0
                    );
                }
            }
        }
        Ok(handle)
    };
    let mut handle = match start() {
        Ok(h) => {
            let _ = ready.send(Ok(pinning));
            h
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut last = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let generation = handle.snapshot().generation();
        handle.quiescent();
        if generation != last {
            last = generation;
            let ns = u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
            shared.seen_ns.store(ns, Ordering::Relaxed);
            shared.seen_gen.store(generation, Ordering::Release);
        }
    }
    handle.offline();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload;

    #[test]
    fn fib_loads_inserts_and_matches_the_reference() {
        let routes = workload::bgp_v4_routes(5_000, 1, 16);
        let (mut fib, _) = LaceFib::<u32>::load("test-fib", 64 << 20, &routes).unwrap();
        let lpm = workload::ReferenceLpm4::new(&routes);
        let dests = workload::destinations_v4(&routes, 2_000, 2);
        let mut out = vec![0u32; dests.len()];
        fib.lookup_bulk(&dests, &mut out);
        for (d, got) in dests.iter().zip(&out) {
            assert_eq!(Some(*got), lpm.lookup(*d));
            assert_eq!(fib.lookup(*d), *got);
        }
        let bytes = fib.live_bytes();
        assert!(bytes > 0);
        let fresh = workload::fresh_v4_routes(&routes, 100, 3, 16);
        fib.apply(&as_changes(&fresh[..50])).unwrap();
        for r in &fresh[50..] {
            fib.insert(r.0, r.1, r.2).unwrap();
        }
        let all: Vec<_> = routes.iter().chain(&fresh).copied().collect();
        let lpm = workload::ReferenceLpm4::new(&all);
        for d in workload::destinations_v4(&fresh, 500, 4) {
            assert_eq!(Some(fib.lookup(d)), lpm.lookup(d));
        }
        assert_eq!(
            fib.stats().retired_bytes,
            0,
            "reclaim(None) frees everything"
        );
    }

    #[test]
    fn hash_and_multi_answer() {
        let entries: Vec<(u64, u64)> = (0..1000u64).map(|i| (i * 7919, i)).collect();
        let (h, _) = LaceHash::<u64, u64>::build("test-hash", 16 << 20, &entries, 5).unwrap();
        assert_eq!(h.len(), 1000);
        let keys: Vec<u64> = entries.iter().map(|e| e.0).chain([1]).collect();
        let mut out = vec![None; keys.len()];
        assert_eq!(h.get_bulk(&keys, &mut out), 1000);
        assert_eq!(out[10], Some(10));
        assert_eq!(out[1000], None);

        let nets = workload::pod_networks_v4(10, 100);
        let (m, _) = MultiFib::load(64 << 20, &nets).unwrap();
        assert_eq!(m.networks(), 10);
        for (n, a) in workload::multi_destinations_v4(&nets, 500, 1) {
            let want = workload::ReferenceLpm4::new(&nets[n as usize]).lookup(a);
            assert_eq!(Some(m.lookup(n, a)), want);
        }
        assert!(m.bytes() > 10 * 24);
    }

    #[test]
    fn publish_probe_sees_every_change() {
        let cpus = crate::sys::allowed_cpus().unwrap_or_default();
        let mut probe =
            PublishProbe::start(cpus.last().copied(), &workload::pod_routes_v4(100)).unwrap();
        for _ in 0..20 {
            probe.sample(Change::Neighbor).unwrap();
            probe.sample(Change::Route).unwrap();
        }
        let name = probe._cleanup.0.tables_path();
        drop(probe);
        assert!(!name.exists());
    }

    #[test]
    fn tags() {
        assert_eq!(lace_tag(1_000_000), "1m");
        assert_eq!(lace_tag(900_000), "900k");
    }
}
