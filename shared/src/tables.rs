//! A node's table set: the writer API control uses and the reader API the forwarder uses.
//!
//! ```text
//!  tables region (control: rw, forwarder: ro)            qsbr region (both rw)
//!  ┌──────────────┐                                       ┌──────────┬────────┬───
//!  │ RegionHeader │ root ──► RootRec (one per publish)    │ header   │ slot 0 │ …
//!  ├──────────────┤            networks ─► [NetworkRec]   └──────────┴────────┴───
//!  │ arena        │                         fib4, fib6, neigh, fdb, flood
//!  │  blocks …    │            ports, nodes, next hops ─► paged arrays
//!  └──────────────┘            local SIDs, underlay ─► hash tables
//! ```
//!
//! **Publication.** Changes are staged into blocks the readers cannot reach (copy-on-write);
//! [`TableWriter::publish`] writes a new root record and release-stores its offset in the
//! header. A reader takes a [`Snapshot`] by one acquire-load of that offset, so it sees all of a
//! batch or none of it.
//!
//! **Reclamation.** Blocks replaced by a publication are freed once every online reader has
//! reported a quiescent point after it ([`ReaderHandle::quiescent`]); see [`crate::qsbr`]. The
//! borrow checker enforces the reader's side: a `Snapshot` borrows its handle, and reporting a
//! quiescent point needs the handle mutably, so no snapshot survives a quiescent point.
//!
//! **Restarts.** [`TableWriter::open`] re-attaches existing regions: it rebuilds the allocator
//! and its bookkeeping from what is reachable from the published root, so nothing published is
//! lost and an interrupted batch leaves no trace. [`TableReader::attach`] maps the current
//! tables and can look up at once.
//!
//! **Errors.** A failed change (region or table full, bad argument) leaves the published
//! tables untouched; the staged batch is abandoned ([`TableWriter::abort`]) when the failure
//! happened half-way, and the error says so.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::arena::{Arena, ArenaStats};
use crate::array::{ArrayHdr, PagedArray};
use crate::error::{Error, Result};
use crate::fib::{Fib, FibHdr, FibWriter};
use crate::hash::{HashHdr, HashTable};
use crate::mem::{Mem, MemMut};
use crate::pod::Pod;
use crate::policy::*;
use crate::qsbr::Qsbr;
use crate::region::{Region, RegionKind, HEADER_SIZE};
use crate::types::*;

/// The root record: every global table's header and the networks. One per publication.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RootRec {
    /// Publication number.
    pub generation: u64,
    /// Networks by id ([`NetworkRec`]).
    pub networks: ArrayHdr,
    /// Ports by id ([`PortRec`]).
    pub ports: ArrayHdr,
    /// Remote nodes by id ([`NodeRec`]).
    pub nodes: ArrayHdr,
    /// Next hops by index ([`NextHopRec`]); FIB leaves hold these indices.
    pub nexthops: ArrayHdr,
    /// Local SIDs (SID as u128 → [`SidRec`]).
    pub sids: HashHdr,
    /// Static underlay neighbors (IPv6 as u128 → [`NeighRec`]).
    pub underlay: HashHdr,
    /// Precomputed SRv6 encapsulations by next-hop index ([`EncapRec`]): one per `Remote`
    /// next hop, i.e. per (network, remote node) SID.
    pub encaps: ArrayHdr,
    /// The node's SRv6 source address (outer source of encapsulated packets), network order;
    /// all zero: not configured.
    pub srv6_source: [u8; 16],
    /// Policy sets by id ([`PolicySetRec`]).
    pub policy_sets: ArrayHdr,
    /// Policy decisions: [`decision_key`] → port-set index, or [`PORTS_ALL`].
    pub decisions: HashHdr,
    /// Port sets by index ([`PortSetRec`], chained).
    pub portsets: ArrayHdr,
    /// Service ports: [`ServiceKey`] → index into `service_recs`.
    pub services: HashHdr,
    /// Service records by index ([`ServiceRec`]).
    pub service_recs: ArrayHdr,
}
// SAFETY: repr(C) of Pod fields; every bit pattern valid.
unsafe impl Pod for RootRec {}

/// Where a node's tables live and how big they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablesConfig {
    /// Directory of the region files: a hugetlbfs mount, or tmpfs (`/dev/shm`).
    pub dir: PathBuf,
    /// Name distinguishing table sets in one directory (e.g. the node name).
    pub name: String,
    /// Size of the tables region in bytes (fixed at creation; sparse on tmpfs).
    pub size: u64,
    /// Reader slots (forwarder worker threads, plus tools) in the QSBR region.
    pub reader_slots: u32,
}

impl TablesConfig {
    /// A configuration in the default directory ([`default_dir`]) with a 1 GiB region and
    /// 128 reader slots.
    pub fn new(name: &str) -> TablesConfig {
        TablesConfig {
            dir: default_dir(),
            name: name.to_string(),
            size: 1 << 30,
            reader_slots: 128,
        }
    }
    /// Path of the tables region.
    pub fn tables_path(&self) -> PathBuf {
        self.dir.join(format!("lace-{}.tables", self.name))
    }
    /// Path of the QSBR region.
    pub fn qsbr_path(&self) -> PathBuf {
        self.dir.join(format!("lace-{}.qsbr", self.name))
    }
}

/// The first hugetlbfs mount in `/proc/mounts`, else `/dev/shm`.
pub fn default_dir() -> PathBuf {
    std::fs::read_to_string("/proc/mounts")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                let mut f = l.split_whitespace();
                let (_, at, fs) = (f.next()?, f.next()?, f.next()?);
                (fs == "hugetlbfs").then(|| PathBuf::from(at))
            })
        })
        .unwrap_or_else(|| PathBuf::from("/dev/shm"))
}

/// Writer bookkeeping per network: the FIB writers.
#[derive(Debug, Default, Clone)]
struct NetState {
    fib4: FibWriter<u32>,
    fib6: FibWriter<u128>,
    peers4: FibWriter<u32>,
    peers6: FibWriter<u128>,
}

/// Control's handle on a node's tables. Single writer: a second one is refused.
#[derive(Debug)]
pub struct TableWriter {
    tables: Region,
    qsbr: Qsbr,
    arena: Arena,
    /// The staged root (what the next publish makes visible).
    root: RootRec,
    /// Offset of the published root block.
    published: u64,
    nets: HashMap<u32, NetState>,
    /// Next-hop interning: (value, route flags) → index, and each index's route count.
    nh_index: HashMap<(NextHop, RouteFlags), u32>,
    nh_refs: HashMap<u32, u32>,
    nh_free: Vec<u32>,
    nh_next: u32,
    /// Port-set interning: ranges → (head index, decisions using it); chain records are not
    /// in the map.
    portset_index: HashMap<Vec<PortRange>, (u32, u32)>,
    portset_free: BTreeSet<u32>,
    portset_next: u32,
    /// Service ports: key → record index; free indices.
    service_index: HashMap<ServiceKey, u32>,
    service_free: Vec<u32>,
    service_next: u32,
    dirty: bool,
}

/// Byte range of the tables file locked by the writer.
const WRITER_LOCK: (u64, u64) = (0, 1);

fn ip_key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => v4_key(a),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The address a neighbor-table key stands for (IPv4 keys are v4-mapped).
fn ip_of_key(k: u128) -> IpAddr {
    let a = Ipv6Addr::from(k);
    match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    }
}

/// The next-hop indices a network's FDB entries and flood list hold (their remote targets).
fn l2_hops<'a>(mem: Mem<'a>, rec: &NetworkRec) -> impl Iterator<Item = u32> + 'a {
    let fdb = HashTable::<u64, FdbRec>::iter(mem, &rec.fdb).filter_map(|(_, r)| match r.hop() {
        Some(L2Hop::Remote(h)) => Some(h),
        _ => None,
    });
    let flood = PagedArray::<u32>::iter(mem, &rec.flood).filter_map(|(_, r)| match flood_hop(*r) {
        L2Hop::Remote(h) => Some(h),
        L2Hop::Port(_) => None,
    });
    fdb.chain(flood)
}

impl TableWriter {
    /// Creates fresh regions (fails if they exist).
    pub fn create(cfg: &TablesConfig) -> Result<TableWriter> {
        let mut tables = Region::create(&cfg.tables_path(), RegionKind::Tables, cfg.size, [0; 4])?;
        Self::lock(&tables)?;
        let qsbr = match Qsbr::create(&cfg.qsbr_path(), cfg.reader_slots) {
            Ok(q) => q,
            Err(e) => {
                let _ = std::fs::remove_file(cfg.tables_path());
                return Err(e);
            }
        };
        let arena = Self::arena_of(&mut tables, None)?;
        let mut w = TableWriter {
            tables,
            qsbr,
            arena,
            root: RootRec::default(),
            published: 0,
            nets: HashMap::new(),
            nh_index: HashMap::new(),
            nh_refs: HashMap::new(),
            nh_free: Vec::new(),
            nh_next: 1,
            portset_index: HashMap::new(),
            portset_free: BTreeSet::new(),
            portset_next: 1,
            service_index: HashMap::new(),
            service_free: Vec::new(),
            service_next: 1,
            dirty: true,
        };
        w.publish()?;
        Ok(w)
    }

    /// Re-attaches existing regions after a restart; nothing published is lost.
    pub fn open(cfg: &TablesConfig) -> Result<TableWriter> {
        let mut tables = Region::open_rw(&cfg.tables_path(), RegionKind::Tables)?;
        Self::lock(&tables)?;
        let qsbr = Qsbr::open(&cfg.qsbr_path())?;
        let published = tables.header().root.load(Ordering::Acquire);
        let root = if published == 0 {
            RootRec::default()
        } else {
            *tables
                .mem()
                .get::<RootRec>(published)
                .ok_or_else(|| Error::Corrupt {
                    path: cfg.tables_path(),
                    what: format!("root offset {published} outside the region"),
                })?
        };
        let mut live = Vec::new();
        if published != 0 {
            live.push((published, std::mem::size_of::<RootRec>() as u64));
            trace_root(tables.mem(), &root, &mut live);
        }
        let arena = Self::arena_of(&mut tables, Some(live))?;
        let mut w = TableWriter {
            tables,
            qsbr,
            arena,
            root,
            published,
            nets: HashMap::new(),
            nh_index: HashMap::new(),
            nh_refs: HashMap::new(),
            nh_free: Vec::new(),
            nh_next: 1,
            portset_index: HashMap::new(),
            portset_free: BTreeSet::new(),
            portset_next: 1,
            service_index: HashMap::new(),
            service_free: Vec::new(),
            service_next: 1,
            dirty: false,
        };
        w.rebuild_bookkeeping();
        Ok(w)
    }

    /// [`TableWriter::open`] if the regions exist, else [`TableWriter::create`].
    pub fn open_or_create(cfg: &TablesConfig) -> Result<TableWriter> {
        if cfg.tables_path().exists() && cfg.qsbr_path().exists() {
            Self::open(cfg)
        } else {
            let _ = std::fs::remove_file(cfg.tables_path());
            let _ = std::fs::remove_file(cfg.qsbr_path());
            Self::create(cfg)
        }
    }

    fn lock(tables: &Region) -> Result<()> {
        if tables.try_lock(WRITER_LOCK.0, WRITER_LOCK.1)? {
            Ok(())
        } else {
            Err(Error::WriterBusy {
                path: tables.path().to_path_buf(),
                pid: tables
                    .lock_holder(WRITER_LOCK.0, WRITER_LOCK.1)?
                    .unwrap_or(0),
            })
        }
    }

    fn arena_of(tables: &mut Region, live: Option<Vec<(u64, u64)>>) -> Result<Arena> {
        let len = tables.len() as u64;
        let high_water = tables.header().high_water.load(Ordering::Relaxed);
        let path = tables.path().to_path_buf();
        let (base, n) = tables.raw_mut().ok_or_else(|| Error::Corrupt {
            path,
            what: "tables mapped read-only for the writer".into(),
        })?;
        // SAFETY: `tables` is a read-write mapping of `n` bytes and this is its only MemMut (the
        // OFD lock makes this process the only writer, and one arena is built per writer). The
        // arena lives in the same `TableWriter` as the mapping and is only used through it;
        // MemMut does not touch the memory when dropped, so field drop order does not matter.
        let mem = unsafe { MemMut::from_raw(base, n) };
        match live {
            None => Ok(Arena::new(mem, HEADER_SIZE, len)),
            Some(live) => {
                let epoch = tables.header().epoch.fetch_add(1, Ordering::SeqCst) + 1;
                Arena::recover(mem, HEADER_SIZE, len, high_water, live, epoch)
            }
        }
    }

    /// Rebuilds next-hop interning, reference counts and FIB writers from the staged root.
    fn rebuild_bookkeeping(&mut self) {
        let mem = self.arena.mem();
        self.nets.clear();
        self.nh_index.clear();
        self.nh_refs.clear();
        self.nh_free.clear();
        let mut max = 0;
        for (i, rec) in PagedArray::<NextHopRec>::iter(mem, &self.root.nexthops) {
            if let Some(h) = NextHop::from_rec(rec) {
                self.nh_index.insert((h, RouteFlags(rec.flags)), i);
                self.nh_refs.insert(i, 0);
                max = max.max(i);
            }
        }
        for (id, rec) in PagedArray::<NetworkRec>::iter(mem, &self.root.networks) {
            if rec.kind == 0 {
                continue;
            }
            let st = NetState {
                fib4: FibWriter::recover(mem, &rec.fib4),
                fib6: FibWriter::recover(mem, &rec.fib6),
                peers4: FibWriter::recover(mem, &rec.peers4),
                peers6: FibWriter::recover(mem, &rec.peers6),
            };
            for (_, _, nh) in Fib::<u32>::routes(mem, &rec.fib4).into_iter().chain(
                Fib::<u128>::routes(mem, &rec.fib6)
                    .into_iter()
                    .map(|r| (0, 0, r.2)),
            ) {
                *self.nh_refs.entry(nh).or_insert(0) += 1;
            }
            for nh in l2_hops(mem, rec) {
                *self.nh_refs.entry(nh).or_insert(0) += 1;
            }
            self.nets.insert(id, st);
        }
        self.nh_next = max + 1;
        // Indices below the highest in use that hold nothing are free.
        let used: std::collections::HashSet<u32> = self.nh_index.values().copied().collect();
        self.nh_free = (1..self.nh_next).filter(|i| !used.contains(i)).collect();
        // A next hop no route refers to any more is released at the next change.

        // Port sets: every chain a decision refers to, with its reference count; records no
        // chain reaches are free.
        self.portset_index.clear();
        let mut refs: HashMap<u32, u32> = HashMap::new();
        for (_, &v) in HashTable::<u64, u32>::iter(mem, &self.root.decisions) {
            if v != PORTS_ALL {
                *refs.entry(v).or_insert(0) += 1;
            }
        }
        let mut in_use = std::collections::HashSet::new();
        for (head, n) in refs {
            let (ranges, chain) = read_portset(mem, &self.root.portsets, head);
            in_use.extend(chain);
            self.portset_index.insert(ranges, (head, n));
        }
        let max = PagedArray::<PortSetRec>::len(&self.root.portsets);
        self.portset_next = max.max(1);
        self.portset_free = (1..self.portset_next)
            .filter(|i| !in_use.contains(i))
            .collect();
        self.service_index.clear();
        for (k, &i) in HashTable::<ServiceKey, u32>::iter(mem, &self.root.services) {
            self.service_index.insert(*k, i);
        }
        self.service_next = PagedArray::<ServiceRec>::len(&self.root.service_recs).max(1);
        let used: std::collections::HashSet<u32> = self.service_index.values().copied().collect();
        self.service_free = (1..self.service_next)
            .filter(|i| !used.contains(i))
            .collect();
    }

    /// Abandons everything staged since the last publication.
    pub fn abort(&mut self) {
        self.arena.rollback();
        self.root = if self.published == 0 {
            RootRec::default()
        } else {
            self.arena
                .mem()
                .get::<RootRec>(self.published)
                .copied()
                .unwrap_or_default()
        };
        self.rebuild_bookkeeping();
        self.dirty = false;
    }

    /// Runs a change; if it fails after staging part of it, abandons the batch.
    fn staged<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        match f(self) {
            Ok(v) => {
                self.dirty = true;
                Ok(v)
            }
            Err(e) => {
                self.abort();
                Err(e)
            }
        }
    }

    /// Makes every staged change visible to readers at once. Returns the generation.
    pub fn publish(&mut self) -> Result<u64> {
        if !self.dirty {
            return Ok(self.root.generation);
        }
        let hdr = self.tables.header();
        let generation = hdr.generation.load(Ordering::Relaxed) + 1;
        self.root.generation = generation;
        let size = std::mem::size_of::<RootRec>();
        let off = match self.arena.alloc(size) {
            Ok(o) => o,
            Err(e) => {
                self.abort();
                return Err(e);
            }
        };
        *self.arena.mem_mut().get_mut::<RootRec>(off) = self.root;
        let old = self.published;
        if old != 0 {
            self.arena.retire(old, size);
        }
        let hdr = self.tables.header();
        hdr.root.store(off, Ordering::SeqCst);
        hdr.generation.store(generation, Ordering::Release);
        let epoch = hdr.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        hdr.high_water
            .store(self.arena.stats().high_water, Ordering::Relaxed);
        self.arena.published(epoch);
        self.published = off;
        self.dirty = false;
        self.reclaim()?;
        Ok(generation)
    }

    /// Frees replaced memory that no reader can hold any more. Called by `publish`; call it
    /// periodically when idle so memory returns even without new changes.
    pub fn reclaim(&mut self) -> Result<u64> {
        let Some(needed) = self.arena.oldest_retired_epoch() else {
            return Ok(0);
        };
        let scan = self.qsbr.scan(needed)?;
        Ok(self.arena.reclaim(scan.safe_epoch))
    }

    /// Allocator figures.
    pub fn stats(&self) -> ArenaStats {
        self.arena.stats()
    }

    /// The generation of the last publication.
    pub fn generation(&self) -> u64 {
        self.tables.header().generation.load(Ordering::Relaxed)
    }

    /// The QSBR region (for inspecting readers).
    pub fn qsbr(&self) -> &Qsbr {
        &self.qsbr
    }

    /// Reads the staged (not necessarily published) tables.
    pub fn staged_view(&self) -> Snapshot<'_> {
        Snapshot {
            mem: self.arena.mem(),
            root: self.root,
            id: None,
        }
    }

    // ---- networks -------------------------------------------------------------------------

    fn net_rec(&self, id: NetworkId) -> Option<NetworkRec> {
        PagedArray::<NetworkRec>::get(self.arena.mem(), &self.root.networks, id.0)
            .copied()
            .filter(|r| r.kind != 0)
    }

    fn net_rec_or_err(&self, id: NetworkId) -> Result<NetworkRec> {
        self.net_rec(id).ok_or_else(|| Error::Invalid {
            what: format!(
                "network {}: no such network in the tables; set_network first",
                id.0
            ),
        })
    }

    fn put_net(&mut self, id: NetworkId, rec: NetworkRec) -> Result<()> {
        PagedArray::<NetworkRec>::set(&mut self.arena, &mut self.root.networks, id.0, rec)
            .map(|_| ())
    }

    /// Adds a network or changes its settings (its tables are kept).
    pub fn set_network(&mut self, id: NetworkId, info: &NetworkInfo) -> Result<()> {
        if id.0 == 0 {
            return Err(Error::Invalid {
                what: "network id 0 is reserved; ids start at 1".into(),
            });
        }
        self.staged(|w| {
            let mut rec = w.net_rec(id).unwrap_or_default();
            info.write(&mut rec);
            w.put_net(id, rec)?;
            w.nets.entry(id.0).or_default();
            Ok(())
        })
    }

    /// Removes a network and all its tables.
    pub fn remove_network(&mut self, id: NetworkId) -> Result<bool> {
        let Some(mut rec) = self.net_rec(id) else {
            return Ok(false);
        };
        self.staged(|w| {
            let mut st = w.nets.remove(&id.0).unwrap_or_default();
            let mem = w.arena.mem();
            let hops: Vec<u32> = Fib::<u32>::routes(mem, &rec.fib4)
                .into_iter()
                .map(|r| r.2)
                .chain(Fib::<u128>::routes(mem, &rec.fib6).into_iter().map(|r| r.2))
                .chain(l2_hops(mem, &rec))
                .collect();
            st.fib4.clear(&mut w.arena, &mut rec.fib4);
            st.fib6.clear(&mut w.arena, &mut rec.fib6);
            st.peers4.clear(&mut w.arena, &mut rec.peers4);
            st.peers6.clear(&mut w.arena, &mut rec.peers6);
            HashTable::<u128, NeighRec>::free(&mut w.arena, &mut rec.neigh);
            HashTable::<u64, FdbRec>::free(&mut w.arena, &mut rec.fdb);
            PagedArray::<u32>::free(&mut w.arena, &mut rec.flood);
            for nh in hops {
                w.unref_nh(nh)?;
            }
            PagedArray::<NetworkRec>::remove(&mut w.arena, &mut w.root.networks, id.0)?;
            Ok(true)
        })
    }

    // ---- next hops ------------------------------------------------------------------------

    fn intern_nh(&mut self, h: NextHop) -> Result<u32> {
        self.intern_nh_flags(h, RouteFlags::NONE)
    }

    fn intern_nh_flags(&mut self, h: NextHop, flags: RouteFlags) -> Result<u32> {
        if let Some(&i) = self.nh_index.get(&(h, flags)) {
            *self.nh_refs.entry(i).or_insert(0) += 1;
            return Ok(i);
        }
        let i = match self.nh_free.pop() {
            Some(i) => i,
            None => {
                let i = self.nh_next;
                if i > crate::fib::MAX_NEXT_HOP {
                    return Err(Error::TableFull {
                        table: "next hops",
                        capacity: crate::fib::MAX_NEXT_HOP as u64,
                    });
                }
                self.nh_next += 1;
                i
            }
        };
        PagedArray::<NextHopRec>::set(
            &mut self.arena,
            &mut self.root.nexthops,
            i,
            h.to_rec_flags(flags),
        )?;
        if let Some(e) = self.encap_of(h) {
            PagedArray::<EncapRec>::set(&mut self.arena, &mut self.root.encaps, i, e)?;
        }
        self.nh_index.insert((h, flags), i);
        self.nh_refs.insert(i, 1);
        Ok(i)
    }

    /// The configured SRv6 source address.
    fn srv6_source(&self) -> Option<Ipv6Addr> {
        let a = Ipv6Addr::from(self.root.srv6_source);
        (!a.is_unspecified()).then_some(a)
    }

    /// The encapsulation a next hop needs (`Remote` only), from the staged node table and
    /// source address.
    fn encap_of(&self, h: NextHop) -> Option<EncapRec> {
        let NextHop::Remote { node, sid } = h else {
            return None;
        };
        let underlay = PagedArray::<NodeRec>::get(self.arena.mem(), &self.root.nodes, node.0)
            .and_then(NodeInfo::from_rec)
            .map(|n| n.underlay);
        Some(EncapRec::new(self.srv6_source(), sid, node, underlay))
    }

    /// Rewrites the encapsulation of every `Remote` next hop `which` selects (after its node or
    /// the source address changed).
    fn refresh_encaps(&mut self, which: impl Fn(NodeId) -> bool) -> Result<()> {
        let hops: Vec<(NextHop, u32)> = self
            .nh_index
            .iter()
            .filter(|((h, _), _)| matches!(h, NextHop::Remote { node, .. } if which(*node)))
            .map(|((h, _), i)| (*h, *i))
            .collect();
        for (h, i) in hops {
            if let Some(e) = self.encap_of(h) {
                PagedArray::<EncapRec>::set(&mut self.arena, &mut self.root.encaps, i, e)?;
            }
        }
        Ok(())
    }

    /// Sets the node's SRv6 source address: the outer source of every packet it encapsulates
    /// (usually its underlay address). Until it is set, remote next hops are unusable and the
    /// forwarder drops what they carry (`encap-unconfigured`).
    pub fn set_srv6_source(&mut self, source: Ipv6Addr) -> Result<()> {
        if source.is_unspecified() || source.is_multicast() || source.is_loopback() {
            return Err(Error::Invalid {
                what: format!(
                    "SRv6 source address {source}: must be a unicast address of this node on \
                     the underlay"
                ),
            });
        }
        if self.srv6_source() == Some(source) {
            return Ok(());
        }
        self.staged(|w| {
            w.root.srv6_source = source.octets();
            w.refresh_encaps(|_| true)
        })
    }

    fn unref_nh(&mut self, i: u32) -> Result<()> {
        let r = self.nh_refs.entry(i).or_insert(1);
        *r = r.saturating_sub(1);
        if *r == 0 {
            self.nh_refs.remove(&i);
            if let Some(rec) =
                PagedArray::<NextHopRec>::get(self.arena.mem(), &self.root.nexthops, i).copied()
            {
                if let Some(h) = NextHop::from_rec(&rec) {
                    self.nh_index.remove(&(h, RouteFlags(rec.flags)));
                }
            }
            PagedArray::<NextHopRec>::remove(&mut self.arena, &mut self.root.nexthops, i)?;
            if PagedArray::<EncapRec>::get(self.arena.mem(), &self.root.encaps, i).is_some() {
                PagedArray::<EncapRec>::remove(&mut self.arena, &mut self.root.encaps, i)?;
            }
            self.nh_free.push(i);
        }
        Ok(())
    }

    // ---- routes ---------------------------------------------------------------------------

    /// Adds or replaces the route `prefix/len` in network `net`.
    pub fn add_route(
        &mut self,
        net: NetworkId,
        prefix: IpAddr,
        len: u8,
        nh: NextHop,
    ) -> Result<()> {
        self.add_route_flags(net, prefix, len, nh, RouteFlags::NONE)
    }

    /// Adds or replaces the route `prefix/len` in network `net`, with route flags (e.g.
    /// [`RouteFlags::REPLY_ONLY`]).
    pub fn add_route_flags(
        &mut self,
        net: NetworkId,
        prefix: IpAddr,
        len: u8,
        nh: NextHop,
        flags: RouteFlags,
    ) -> Result<()> {
        let mut rec = self.net_rec_or_err(net)?;
        self.staged(|w| {
            let i = w.intern_nh_flags(nh, flags)?;
            let st = w.nets.entry(net.0).or_default();
            let old = match prefix {
                IpAddr::V4(a) => {
                    st.fib4
                        .insert(&mut w.arena, &mut rec.fib4, u32::from(a), len, i)?
                }
                IpAddr::V6(a) => {
                    st.fib6
                        .insert(&mut w.arena, &mut rec.fib6, u128::from(a), len, i)?
                }
            };
            if let Some(o) = old {
                w.unref_nh(o)?;
            }
            w.put_net(net, rec)
        })
    }

    /// Removes the route `prefix/len` from network `net`; false if it did not exist.
    pub fn remove_route(&mut self, net: NetworkId, prefix: IpAddr, len: u8) -> Result<bool> {
        let mut rec = self.net_rec_or_err(net)?;
        self.staged(|w| {
            let st = w.nets.entry(net.0).or_default();
            let old = match prefix {
                IpAddr::V4(a) => st
                    .fib4
                    .remove(&mut w.arena, &mut rec.fib4, u32::from(a), len)?,
                IpAddr::V6(a) => st
                    .fib6
                    .remove(&mut w.arena, &mut rec.fib6, u128::from(a), len)?,
            };
            if let Some(o) = old {
                w.unref_nh(o)?;
                w.put_net(net, rec)?;
            }
            Ok(old.is_some())
        })
    }

    // ---- neighbors, FDB, flood list -------------------------------------------------------

    /// Sets `ip → mac` in network `net`'s neighbor table.
    pub fn set_neighbor(
        &mut self,
        net: NetworkId,
        ip: IpAddr,
        mac: MacAddr,
        learned: bool,
    ) -> Result<()> {
        let mut rec = self.net_rec_or_err(net)?;
        self.staged(|w| {
            let v = NeighRec::new(mac, learned);
            HashTable::<u128, NeighRec>::insert(&mut w.arena, &mut rec.neigh, ip_key(ip), v)?;
            w.put_net(net, rec)
        })
    }

    /// Removes `ip` from network `net`'s neighbor table.
    pub fn remove_neighbor(&mut self, net: NetworkId, ip: IpAddr) -> Result<bool> {
        let mut rec = self.net_rec_or_err(net)?;
        self.staged(|w| {
            let old =
                HashTable::<u128, NeighRec>::remove(&mut w.arena, &mut rec.neigh, &ip_key(ip))?;
            w.put_net(net, rec)?;
            Ok(old.is_some())
        })
    }

    /// Sets where `mac` lives in network `net`. A learned entry with an older sequence number
    /// than the one present is ignored (MAC mobility: newest wins); returns whether it applied.
    /// A remote target's encapsulation is kept as a next hop, shared with every other entry
    /// (and route) toward the same SID.
    pub fn set_fdb(&mut self, net: NetworkId, mac: MacAddr, entry: FdbEntry) -> Result<bool> {
        let mut rec = self.net_rec_or_err(net)?;
        let cur = HashTable::<u64, FdbRec>::get(self.arena.mem(), &rec.fdb, &mac.to_u64())
            .filter(|r| r.hop().is_some())
            .copied();
        if let Some(cur) = cur {
            if entry.learned && seq_older(entry.seq, cur.seq) {
                return Ok(false);
            }
        }
        self.staged(|w| {
            let hop = match entry.target.next_hop() {
                Some(h) => w.intern_nh(h)?,
                None => 0,
            };
            HashTable::<u64, FdbRec>::insert(
                &mut w.arena,
                &mut rec.fdb,
                mac.to_u64(),
                entry.to_rec(hop),
            )?;
            if let Some(L2Hop::Remote(old)) = cur.and_then(|c| c.hop()) {
                w.unref_nh(old)?;
            }
            w.put_net(net, rec)?;
            Ok(true)
        })
    }

    /// Removes `mac` from network `net`'s FDB.
    pub fn remove_fdb(&mut self, net: NetworkId, mac: MacAddr) -> Result<bool> {
        let mut rec = self.net_rec_or_err(net)?;
        self.staged(|w| {
            let old = HashTable::<u64, FdbRec>::remove(&mut w.arena, &mut rec.fdb, &mac.to_u64())?;
            if let Some(L2Hop::Remote(h)) = old.and_then(|o| o.hop()) {
                w.unref_nh(h)?;
            }
            w.put_net(net, rec)?;
            Ok(old.is_some())
        })
    }

    /// Replaces network `net`'s flood list: its local ports and the remote nodes that host its
    /// endpoints (at most one entry per member; order is kept).
    pub fn set_flood(&mut self, net: NetworkId, members: &[FloodTarget]) -> Result<()> {
        let mut rec = self.net_rec_or_err(net)?;
        for m in members {
            if let FloodTarget::Port(p) = m {
                if p.0 & FLOOD_PORT != 0 || *p == PortId::UPLINK {
                    return Err(Error::Invalid {
                        what: format!("flood list of network {}: port {} ", net.0, p.0)
                            + "is not a pod port id",
                    });
                }
            }
        }
        self.staged(|w| {
            let old: Vec<u32> = PagedArray::<u32>::iter(w.arena.mem(), &rec.flood)
                .map(|(_, r)| *r)
                .collect();
            PagedArray::<u32>::free(&mut w.arena, &mut rec.flood);
            // The new members' next hops are taken before the old ones are released, so a
            // member that stays keeps its next hop (and its index).
            for (i, m) in members.iter().enumerate() {
                let r = match (m, m.next_hop()) {
                    (_, Some(h)) => w.intern_nh(h)?,
                    (FloodTarget::Port(p), None) => FLOOD_PORT | p.0,
                    (FloodTarget::Remote { .. }, None) => {
                        unreachable!("remote members have a next hop")
                    }
                };
                PagedArray::<u32>::set(&mut w.arena, &mut rec.flood, i as u32, r)?;
            }
            for r in old {
                if let L2Hop::Remote(h) = flood_hop(r) {
                    w.unref_nh(h)?;
                }
            }
            w.put_net(net, rec)
        })
    }

    // ---- ports, nodes, SIDs, underlay -----------------------------------------------------

    /// Binds a port. A change of its policy set bumps its network's policy generation.
    pub fn set_port(&mut self, id: PortId, info: &PortInfo) -> Result<()> {
        let old = PagedArray::<PortRec>::get(self.arena.mem(), &self.root.ports, id.0).copied();
        self.staged(|w| {
            PagedArray::<PortRec>::set(&mut w.arena, &mut w.root.ports, id.0, info.to_rec())?;
            if let Some(o) = old.filter(|o| o.kind != 0) {
                if o.policy != info.policy.0 || o.network != info.network.0 {
                    w.bump_policy_gen(o.network())?;
                }
            }
            if old.is_none_or(|o| o.policy != info.policy.0 || o.network != info.network.0) {
                w.bump_policy_gen(info.network)?;
            }
            Ok(())
        })
    }

    /// Unbinds a port.
    pub fn remove_port(&mut self, id: PortId) -> Result<()> {
        let old = PagedArray::<PortRec>::get(self.arena.mem(), &self.root.ports, id.0).copied();
        self.staged(|w| {
            PagedArray::<PortRec>::remove(&mut w.arena, &mut w.root.ports, id.0)?;
            if let Some(o) = old.filter(|o| o.kind != 0 && o.policy != 0) {
                w.bump_policy_gen(o.network())?;
            }
            Ok(())
        })
    }

    /// Adds or changes a remote node (and the encapsulations of the next hops toward it).
    pub fn set_node(&mut self, id: NodeId, info: &NodeInfo) -> Result<()> {
        self.staged(|w| {
            PagedArray::<NodeRec>::set(&mut w.arena, &mut w.root.nodes, id.0, info.to_rec())?;
            w.refresh_encaps(|n| n == id)
        })
    }

    /// Removes a remote node; next hops still pointing at it become unusable (dropped as
    /// `unknown-node`) until routes move away from them.
    pub fn remove_node(&mut self, id: NodeId) -> Result<()> {
        self.staged(|w| {
            PagedArray::<NodeRec>::remove(&mut w.arena, &mut w.root.nodes, id.0)?;
            w.refresh_encaps(|n| n == id)
        })
    }

    /// Installs a local SID.
    pub fn set_local_sid(&mut self, sid: Sid, b: SidBehavior) -> Result<()> {
        self.staged(|w| {
            HashTable::<u128, SidRec>::insert(
                &mut w.arena,
                &mut w.root.sids,
                u128::from(sid.0),
                b.to_rec(),
            )
            .map(|_| ())
        })
    }

    /// Removes a local SID.
    pub fn remove_local_sid(&mut self, sid: Sid) -> Result<bool> {
        self.staged(|w| {
            HashTable::<u128, SidRec>::remove(&mut w.arena, &mut w.root.sids, &u128::from(sid.0))
                .map(|o| o.is_some())
        })
    }

    /// Sets a static underlay neighbor.
    pub fn set_underlay_neighbor(&mut self, ip: Ipv6Addr, mac: MacAddr) -> Result<()> {
        self.staged(|w| {
            let v = NeighRec::new(mac, false);
            HashTable::<u128, NeighRec>::insert(
                &mut w.arena,
                &mut w.root.underlay,
                u128::from(ip),
                v,
            )
            .map(|_| ())
        })
    }

    // ---- policy, services -----------------------------------------------------------------

    /// Bumps network `net`'s policy generation (nothing if the network is not in the tables):
    /// tracked connections of its endpoints are classified again on their next packet.
    fn bump_policy_gen(&mut self, net: NetworkId) -> Result<()> {
        let Some(mut rec) = self.net_rec(net) else {
            return Ok(());
        };
        rec.policy_gen = rec.policy_gen.wrapping_add(1);
        self.put_net(net, rec)
    }

    /// Gives the addresses `prefix/len` of network `net` peer class `class` (longest prefix
    /// wins, as in a FIB). Class 0 is refused: an address without a route is already class 0.
    pub fn set_peer_prefix(
        &mut self,
        net: NetworkId,
        prefix: IpAddr,
        len: u8,
        class: PeerClass,
    ) -> Result<()> {
        if class.0 == 0 || class.0 > PeerClass::MAX {
            return Err(Error::Invalid {
                what: format!(
                    "peer class {} of network {}: classes are 1..={}",
                    class.0,
                    net.0,
                    PeerClass::MAX
                ),
            });
        }
        let mut rec = self.net_rec_or_err(net)?;
        self.staged(|w| {
            let st = w.nets.entry(net.0).or_default();
            match prefix {
                IpAddr::V4(a) => {
                    st.peers4
                        .insert(&mut w.arena, &mut rec.peers4, u32::from(a), len, class.0)?;
                }
                IpAddr::V6(a) => {
                    st.peers6
                        .insert(&mut w.arena, &mut rec.peers6, u128::from(a), len, class.0)?;
                }
            }
            rec.policy_gen = rec.policy_gen.wrapping_add(1);
            w.put_net(net, rec)
        })
    }

    /// Removes the peer prefix `prefix/len` of network `net`; false if it did not exist.
    pub fn remove_peer_prefix(&mut self, net: NetworkId, prefix: IpAddr, len: u8) -> Result<bool> {
        let mut rec = self.net_rec_or_err(net)?;
        self.staged(|w| {
            let st = w.nets.entry(net.0).or_default();
            let old = match prefix {
                IpAddr::V4(a) => {
                    st.peers4
                        .remove(&mut w.arena, &mut rec.peers4, u32::from(a), len)?
                }
                IpAddr::V6(a) => {
                    st.peers6
                        .remove(&mut w.arena, &mut rec.peers6, u128::from(a), len)?
                }
            };
            if old.is_some() {
                rec.policy_gen = rec.policy_gen.wrapping_add(1);
                w.put_net(net, rec)?;
            }
            Ok(old.is_some())
        })
    }

    /// Sets (`Some(class)`) and removes (`None`) peer prefixes of network `net` in one batch,
    /// in order. The same as calling [`TableWriter::set_peer_prefix`] and
    /// [`TableWriter::remove_peer_prefix`] for each, except that every FIB subtree the batch
    /// touches is rebuilt once (one call per prefix rebuilds its subtree every time: thousands
    /// of pod host routes under one node's block cost quadratic time), and the network's
    /// policy generation is bumped once. Class 0 is refused, as by `set_peer_prefix`; on any
    /// error nothing of the batch stays staged.
    pub fn apply_peer_prefixes(
        &mut self,
        net: NetworkId,
        changes: &[(IpAddr, u8, Option<PeerClass>)],
    ) -> Result<()> {
        if let Some((p, l, Some(c))) = changes
            .iter()
            .find(|(_, _, c)| c.is_some_and(|c| c.0 == 0 || c.0 > PeerClass::MAX))
        {
            return Err(Error::Invalid {
                what: format!(
                    "peer class {} of {p}/{l} in network {}: classes are 1..={}",
                    c.0,
                    net.0,
                    PeerClass::MAX
                ),
            });
        }
        if changes.is_empty() {
            return Ok(());
        }
        let mut rec = self.net_rec_or_err(net)?;
        let mut v4: Vec<(u32, u8, Option<u32>)> = Vec::new();
        let mut v6: Vec<(u128, u8, Option<u32>)> = Vec::new();
        for &(p, l, c) in changes {
            match p {
                IpAddr::V4(a) => v4.push((u32::from(a), l, c.map(|c| c.0))),
                IpAddr::V6(a) => v6.push((u128::from(a), l, c.map(|c| c.0))),
            }
        }
        self.staged(|w| {
            let st = w.nets.entry(net.0).or_default();
            if !v4.is_empty() {
                st.peers4.apply(&mut w.arena, &mut rec.peers4, &v4)?;
            }
            if !v6.is_empty() {
                st.peers6.apply(&mut w.arena, &mut rec.peers6, &v6)?;
            }
            rec.policy_gen = rec.policy_gen.wrapping_add(1);
            w.put_net(net, rec)
        })
    }

    /// Every peer prefix of network `net` with its class (IPv4 first).
    pub fn peer_prefixes(&self, net: NetworkId) -> Vec<(IpAddr, u8, PeerClass)> {
        let Some(rec) = self.net_rec(net) else {
            return Vec::new();
        };
        let mem = self.arena.mem();
        Fib::<u32>::routes(mem, &rec.peers4)
            .into_iter()
            .map(|(k, l, c)| (IpAddr::V4(Ipv4Addr::from(k)), l, PeerClass(c)))
            .chain(
                Fib::<u128>::routes(mem, &rec.peers6)
                    .into_iter()
                    .map(|(k, l, c)| (IpAddr::V6(Ipv6Addr::from(k)), l, PeerClass(c))),
            )
            .collect()
    }

    /// Adds or changes policy set `id` (its decisions are kept).
    pub fn set_policy_set(&mut self, id: PolicySetId, set: &PolicySet) -> Result<()> {
        if id.0 == 0 {
            return Err(Error::Invalid {
                what: "policy set id 0 is reserved for \"no policy\"; ids start at 1".into(),
            });
        }
        self.net_rec_or_err(set.network)?;
        let old = PagedArray::<PolicySetRec>::get(self.arena.mem(), &self.root.policy_sets, id.0)
            .and_then(PolicySet::from_rec);
        self.staged(|w| {
            PagedArray::<PolicySetRec>::set(
                &mut w.arena,
                &mut w.root.policy_sets,
                id.0,
                set.to_rec(),
            )?;
            if let Some(o) = old.filter(|o| o.network != set.network) {
                w.bump_policy_gen(o.network)?;
            }
            w.bump_policy_gen(set.network)
        })
    }

    /// Removes policy set `id` and all its decisions; false if it did not exist.
    pub fn remove_policy_set(&mut self, id: PolicySetId) -> Result<bool> {
        let Some(old) =
            PagedArray::<PolicySetRec>::get(self.arena.mem(), &self.root.policy_sets, id.0)
                .and_then(PolicySet::from_rec)
        else {
            return Ok(false);
        };
        let keys: Vec<u64> = HashTable::<u64, u32>::iter(self.arena.mem(), &self.root.decisions)
            .map(|(k, _)| *k)
            .filter(|k| (k >> 32) as u32 == id.0)
            .collect();
        self.staged(|w| {
            for k in keys {
                if let Some(v) =
                    HashTable::<u64, u32>::remove(&mut w.arena, &mut w.root.decisions, &k)?
                {
                    w.unref_portset(v)?;
                }
            }
            PagedArray::<PolicySetRec>::remove(&mut w.arena, &mut w.root.policy_sets, id.0)?;
            w.bump_policy_gen(old.network)?;
            Ok(true)
        })
    }

    /// The network of policy set `id`, if it exists (staged).
    fn policy_set_network(&self, id: PolicySetId) -> Result<NetworkId> {
        PagedArray::<PolicySetRec>::get(self.arena.mem(), &self.root.policy_sets, id.0)
            .and_then(PolicySet::from_rec)
            .map(|s| s.network)
            .ok_or_else(|| Error::Invalid {
                what: format!(
                    "policy set {}: no such set in the tables; set_policy_set first",
                    id.0
                ),
            })
    }

    /// Sets what set `set` allows in direction `dir` with peers of class `class`. An empty
    /// range list is refused (remove the decision to deny).
    pub fn set_decision(
        &mut self,
        set: PolicySetId,
        dir: PolicyDir,
        class: PeerClass,
        ports: &Ports,
    ) -> Result<()> {
        let net = self.policy_set_network(set)?;
        let ports = ports.clone().normalized();
        if matches!(&ports, Ports::Ranges(r) if r.is_empty()) {
            return Err(Error::Invalid {
                what: format!(
                    "decision of policy set {} for class {}: an empty port list allows nothing; \
                     remove the decision instead",
                    set.0, class.0
                ),
            });
        }
        let key = decision_key(set, dir, class);
        let old = HashTable::<u64, u32>::get(self.arena.mem(), &self.root.decisions, &key).copied();
        self.staged(|w| {
            let v = match &ports {
                Ports::All => PORTS_ALL,
                Ports::Ranges(r) => w.intern_portset(r)?,
            };
            HashTable::<u64, u32>::insert(&mut w.arena, &mut w.root.decisions, key, v)?;
            if let Some(o) = old {
                w.unref_portset(o)?;
            }
            w.bump_policy_gen(net)
        })
    }

    /// Removes a decision (the peers of `class` are denied); false if there was none.
    pub fn remove_decision(
        &mut self,
        set: PolicySetId,
        dir: PolicyDir,
        class: PeerClass,
    ) -> Result<bool> {
        let net = self.policy_set_network(set)?;
        let key = decision_key(set, dir, class);
        self.staged(|w| {
            let old = HashTable::<u64, u32>::remove(&mut w.arena, &mut w.root.decisions, &key)?;
            if let Some(o) = old {
                w.unref_portset(o)?;
                w.bump_policy_gen(net)?;
            }
            Ok(old.is_some())
        })
    }

    /// The head index of the chain holding `ranges`, shared with every decision that allows
    /// the same ranges.
    fn intern_portset(&mut self, ranges: &[PortRange]) -> Result<u32> {
        if let Some((head, n)) = self.portset_index.get_mut(ranges) {
            *n += 1;
            return Ok(*head);
        }
        let chunks: Vec<&[PortRange]> = ranges.chunks(PORTSET_RANGES).collect();
        let head = self.portset_run(chunks.len() as u32)?;
        // Consecutive records: readers binary-search a chain by its head's span.
        let span = if chunks.len() > 1 && chunks.len() <= MAX_PORTSET_CHAIN {
            chunks.len() as u16
        } else {
            0
        };
        for (k, c) in chunks.iter().enumerate() {
            let i = head + k as u32;
            let next = if k + 1 < chunks.len() { i + 1 } else { 0 };
            let span = if k == 0 { span } else { 0 };
            PagedArray::<PortSetRec>::set(
                &mut self.arena,
                &mut self.root.portsets,
                i,
                PortSetRec::new(c, next, span),
            )?;
        }
        self.portset_index.insert(ranges.to_vec(), (head, 1));
        Ok(head)
    }

    /// The first of `n` consecutive free port-set record indices: the lowest run of the free
    /// ones that long, else the end of the array.
    fn portset_run(&mut self, n: u32) -> Result<u32> {
        let mut run: Option<(u32, u32)> = None;
        for &i in &self.portset_free {
            run = match run {
                Some((start, len)) if start + len == i => Some((start, len + 1)),
                _ => Some((i, 1)),
            };
            if run.is_some_and(|(_, len)| len == n) {
                break;
            }
        }
        let start = match run {
            Some((start, len)) if len == n => {
                for i in start..start + n {
                    self.portset_free.remove(&i);
                }
                start
            }
            _ => {
                let start = self.portset_next;
                if u64::from(start) + u64::from(n) > u64::from(PORTS_ALL) {
                    return Err(Error::TableFull {
                        table: "port sets",
                        capacity: u64::from(PORTS_ALL - 1),
                    });
                }
                self.portset_next += n;
                start
            }
        };
        Ok(start)
    }

    fn unref_portset(&mut self, head: u32) -> Result<()> {
        if head == PORTS_ALL {
            return Ok(());
        }
        let (ranges, chain) = read_portset(self.arena.mem(), &self.root.portsets, head);
        let Some((_, n)) = self.portset_index.get_mut(&ranges) else {
            return Ok(());
        };
        *n -= 1;
        if *n == 0 {
            self.portset_index.remove(&ranges);
            for i in chain {
                PagedArray::<PortSetRec>::remove(&mut self.arena, &mut self.root.portsets, i)?;
                self.portset_free.insert(i);
            }
        }
        Ok(())
    }

    /// Adds or replaces a Service port.
    pub fn set_service(&mut self, key: ServiceKey, info: &ServiceInfo) -> Result<()> {
        if let Some(&b) = info
            .table
            .iter()
            .find(|&&b| b as usize >= info.backends.len())
        {
            return Err(Error::Invalid {
                what: format!(
                    "service {}:{}/{}: the lookup table names backend {b} of {}",
                    key.ip(),
                    key.port,
                    key.proto,
                    info.backends.len()
                ),
            });
        }
        self.net_rec_or_err(NetworkId(key.network))?;
        let existing = self.service_index.get(&key).copied();
        self.staged(|w| {
            let i = match existing {
                Some(i) => i,
                None => match w.service_free.pop() {
                    Some(i) => i,
                    None => {
                        let i = w.service_next;
                        w.service_next += 1;
                        i
                    }
                },
            };
            let mut rec = ServiceRec::header_of(info);
            if let Some(old) =
                PagedArray::<ServiceRec>::get(w.arena.mem(), &w.root.service_recs, i).copied()
            {
                let (mut b, mut t) = (old.backends, old.table);
                PagedArray::<BackendRec>::free(&mut w.arena, &mut b);
                PagedArray::<u32>::free(&mut w.arena, &mut t);
            }
            for (k, b) in info.backends.iter().enumerate() {
                PagedArray::<BackendRec>::set(
                    &mut w.arena,
                    &mut rec.backends,
                    k as u32,
                    b.to_rec(),
                )?;
            }
            // Stored + 1: an all-zero element reads as absent.
            for (k, &b) in info.table.iter().enumerate() {
                PagedArray::<u32>::set(&mut w.arena, &mut rec.table, k as u32, b + 1)?;
            }
            PagedArray::<ServiceRec>::set(&mut w.arena, &mut w.root.service_recs, i, rec)?;
            HashTable::<ServiceKey, u32>::insert(&mut w.arena, &mut w.root.services, key, i)?;
            w.service_index.insert(key, i);
            Ok(())
        })
    }

    /// Removes a Service port; false if it did not exist.
    pub fn remove_service(&mut self, key: ServiceKey) -> Result<bool> {
        let Some(i) = self.service_index.get(&key).copied() else {
            return Ok(false);
        };
        self.staged(|w| {
            if let Some(old) =
                PagedArray::<ServiceRec>::get(w.arena.mem(), &w.root.service_recs, i).copied()
            {
                let (mut b, mut t) = (old.backends, old.table);
                PagedArray::<BackendRec>::free(&mut w.arena, &mut b);
                PagedArray::<u32>::free(&mut w.arena, &mut t);
            }
            PagedArray::<ServiceRec>::remove(&mut w.arena, &mut w.root.service_recs, i)?;
            HashTable::<ServiceKey, u32>::remove(&mut w.arena, &mut w.root.services, &key)?;
            w.service_index.remove(&key);
            w.service_free.push(i);
            Ok(true)
        })
    }

    /// Every Service port in the tables.
    pub fn service_keys(&self) -> Vec<ServiceKey> {
        self.service_index.keys().copied().collect()
    }
}

/// The ranges of the port-set chain starting at `head`, and the chain's record indices (at
/// most [`MAX_PORTSET_CHAIN`] records: a longer or looping chain is cut there).
fn read_portset(mem: Mem<'_>, arr: &ArrayHdr, head: u32) -> (Vec<PortRange>, Vec<u32>) {
    let mut ranges = Vec::new();
    let mut chain = Vec::new();
    let mut i = head;
    while i != 0 && chain.len() < MAX_PORTSET_CHAIN {
        let Some(r) = PagedArray::<PortSetRec>::get(mem, arr, i) else {
            break;
        };
        chain.push(i);
        ranges.extend(r.ranges().iter().map(|x| PortRange {
            proto: x.proto,
            lo: x.lo,
            hi: x.hi,
        }));
        i = r.next;
    }
    (ranges, chain)
}

/// Sequence-number order with wrap-around (RFC 1982 style): `a` is older than `b`.
fn seq_older(a: u32, b: u32) -> bool {
    a != b && b.wrapping_sub(a) < (1 << 31)
}

/// Lists every block reachable from a root record.
pub(crate) fn trace_root(mem: Mem<'_>, root: &RootRec, out: &mut Vec<(u64, u64)>) {
    PagedArray::<NetworkRec>::trace(mem, &root.networks, out);
    PagedArray::<PortRec>::trace(mem, &root.ports, out);
    PagedArray::<NodeRec>::trace(mem, &root.nodes, out);
    PagedArray::<NextHopRec>::trace(mem, &root.nexthops, out);
    HashTable::<u128, SidRec>::trace(mem, &root.sids, out);
    HashTable::<u128, NeighRec>::trace(mem, &root.underlay, out);
    PagedArray::<EncapRec>::trace(mem, &root.encaps, out);
    PagedArray::<PolicySetRec>::trace(mem, &root.policy_sets, out);
    HashTable::<u64, u32>::trace(mem, &root.decisions, out);
    PagedArray::<PortSetRec>::trace(mem, &root.portsets, out);
    HashTable::<ServiceKey, u32>::trace(mem, &root.services, out);
    PagedArray::<ServiceRec>::trace(mem, &root.service_recs, out);
    for (_, rec) in PagedArray::<ServiceRec>::iter(mem, &root.service_recs) {
        PagedArray::<BackendRec>::trace(mem, &rec.backends, out);
        PagedArray::<u32>::trace(mem, &rec.table, out);
    }
    for (_, rec) in PagedArray::<NetworkRec>::iter(mem, &root.networks) {
        if rec.kind == 0 {
            continue;
        }
        Fib::<u32>::trace(mem, &rec.fib4, out);
        Fib::<u128>::trace(mem, &rec.fib6, out);
        Fib::<u32>::trace(mem, &rec.peers4, out);
        Fib::<u128>::trace(mem, &rec.peers6, out);
        HashTable::<u128, NeighRec>::trace(mem, &rec.neigh, out);
        HashTable::<u64, FdbRec>::trace(mem, &rec.fdb, out);
        PagedArray::<u32>::trace(mem, &rec.flood, out);
    }
}

// ---- readers ----------------------------------------------------------------------------------

/// The forwarder's mapping of a node's tables (read-only) and QSBR slots.
#[derive(Debug)]
pub struct TableReader {
    tables: Region,
    qsbr: Qsbr,
    /// Unique among the process's readers: tells their snapshots apart ([`SnapshotId`]).
    instance: u64,
}

/// Instances of [`TableReader`] handed out so far in this process.
static READER_INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl TableReader {
    /// Maps existing tables read-only. Fails clearly if they are missing or of another ABI.
    pub fn attach(cfg: &TablesConfig) -> Result<Arc<TableReader>> {
        Self::attach_paths(&cfg.tables_path(), &cfg.qsbr_path())
    }

    /// As [`TableReader::attach`], with explicit paths.
    pub fn attach_paths(tables: &Path, qsbr: &Path) -> Result<Arc<TableReader>> {
        Ok(Arc::new(TableReader {
            tables: Region::open_ro(tables, RegionKind::Tables)?,
            qsbr: Qsbr::open(qsbr)?,
            instance: READER_INSTANCES.fetch_add(1, Ordering::Relaxed) + 1,
        }))
    }

    /// Claims a reader slot for the calling worker; the handle starts online.
    pub fn register(self: &Arc<Self>) -> Result<ReaderHandle> {
        let slot = self.qsbr.claim()?;
        let h = ReaderHandle {
            reader: Arc::clone(self),
            slot,
            online: false,
        };
        Ok(h)
    }

    /// Generation of the tables as last published.
    pub fn generation(&self) -> u64 {
        self.tables.header().generation.load(Ordering::Acquire)
    }

    /// The read-only region (tests use it to prove writes fault).
    pub fn region(&self) -> &Region {
        &self.tables
    }
}

/// One reader thread's registration. Not `Sync`: one per worker.
#[derive(Debug)]
pub struct ReaderHandle {
    reader: Arc<TableReader>,
    slot: u32,
    online: bool,
}

impl ReaderHandle {
    /// The current tables. Goes online first if the handle was offline.
    #[inline]
    pub fn snapshot(&mut self) -> Snapshot<'_> {
        let hdr = self.reader.tables.header();
        if !self.online {
            self.reader
                .qsbr
                .online(self.slot, hdr.epoch.load(Ordering::SeqCst));
            self.online = true;
        }
        let off = hdr.root.load(Ordering::Acquire);
        let mem = self.reader.tables.mem();
        let root = if off == 0 {
            RootRec::default()
        } else {
            mem.get::<RootRec>(off).copied().unwrap_or_default()
        };
        let id = SnapshotId {
            reader: self.reader.instance,
            root: off,
            generation: root.generation,
        };
        Snapshot {
            mem,
            root,
            id: Some(id),
        }
    }

    /// Reports a quiescent point: no snapshot taken before is in use any more.
    #[inline]
    pub fn quiescent(&mut self) {
        if self.online {
            let e = self.reader.tables.header().epoch.load(Ordering::Acquire);
            self.reader.qsbr.report(self.slot, e);
        }
    }

    /// Goes offline (e.g. before sleeping): the writer stops waiting for this reader.
    pub fn offline(&mut self) {
        if self.online {
            self.reader.qsbr.offline(self.slot);
            self.online = false;
        }
    }

    /// The QSBR slot index.
    pub fn slot(&self) -> u32 {
        self.slot
    }
}

impl Drop for ReaderHandle {
    fn drop(&mut self) {
        self.reader.qsbr.release(self.slot);
    }
}

/// A consistent view of the tables as of one publication.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    mem: Mem<'a>,
    root: RootRec,
    id: Option<SnapshotId>,
}

/// What a published [`Snapshot`] shows: which reader took it, the root record and its
/// generation. Two snapshots with the same id show the same tables — published blocks never
/// change, and a root record is only reused after a later generation replaced it — so what a
/// reader derives from one (decoded records, lookup results) holds for the other: a worker may
/// keep it from burst to burst while the id stays the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SnapshotId {
    /// The [`TableReader`] instance, unique in the process (its mapping).
    pub reader: u64,
    /// Offset of the root record.
    pub root: u64,
    /// Publication number.
    pub generation: u64,
}

impl<'a> Snapshot<'a> {
    /// Publication number of this view.
    pub fn generation(&self) -> u64 {
        self.root.generation
    }

    /// What identifies the tables this shows ([`SnapshotId`]); `None` for a writer's staged
    /// view, which changes under the same root.
    #[inline]
    pub fn id(&self) -> Option<SnapshotId> {
        self.id
    }

    /// The raw memory view (for bulk lookups by the forwarder's stages).
    pub fn mem(&self) -> Mem<'a> {
        self.mem
    }

    /// A policy set.
    #[inline]
    pub fn policy_set(&self, id: PolicySetId) -> Option<&'a PolicySetRec> {
        PagedArray::<PolicySetRec>::get(self.mem, &self.root.policy_sets, id.0)
            .filter(|r| r.flags & PolicySetRec::PRESENT != 0)
    }

    /// Whether policy set `set` allows `proto`/`port` with a peer of class `class` in
    /// direction `dir` (a set that does not isolate `dir` allows everything; a missing set
    /// allows nothing).
    #[inline]
    pub fn policy_allows(
        &self,
        set: PolicySetId,
        dir: PolicyDir,
        class: PeerClass,
        proto: u8,
        port: u16,
    ) -> bool {
        let Some(rec) = self.policy_set(set) else {
            return false;
        };
        if !rec.isolated(dir) {
            return true;
        }
        let key = decision_key(set, dir, class);
        match HashTable::<u64, u32>::get(self.mem, &self.root.decisions, &key) {
            None => false,
            Some(&PORTS_ALL) => true,
            Some(&head) => self.portset_allows(head, proto, port),
        }
    }

    /// Whether the port-set chain at `head` holds `proto`/`port`. The writer stores a set's
    /// ranges normalized (sorted by protocol and start, disjoint) and chunked in chain order,
    /// so only the first record whose last range ends at or after (`proto`, `port`) can hold
    /// it, and in it only the first such range. A chain of consecutive records (its head's
    /// `span`) is binary-searched for that record; another is walked, passing over each
    /// record on one comparison.
    fn portset_allows(&self, head: u32, proto: u8, port: u16) -> bool {
        let key = (proto, port);
        let get = |i: u32| PagedArray::<PortSetRec>::get(self.mem, &self.root.portsets, i);
        // Whether record `r` ends before the key (the key is in a later record, if any).
        let before = |r: &PortSetRec| r.ranges().last().is_none_or(|l| (l.proto, l.hi) < key);
        let holds = |r: &PortSetRec| {
            r.ranges()
                .iter()
                .find(|x| (x.proto, x.hi) >= key)
                .is_some_and(|x| x.proto == proto && x.lo <= port)
        };
        let Some(first) = get(head) else {
            return false;
        };
        let span = u32::from(first.span);
        if span > 1 {
            // Records below `lo` end before the key; those from `hi` on do not.
            let (mut lo, mut hi) = (0, span);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                let Some(r) = head.checked_add(mid).and_then(get) else {
                    return false;
                };
                if before(r) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            return lo < span && head.checked_add(lo).and_then(get).is_some_and(holds);
        }
        let mut r = first;
        for _ in 0..MAX_PORTSET_CHAIN {
            if !before(r) {
                return holds(r);
            }
            match get(r.next).filter(|_| r.next != 0) {
                Some(next) => r = next,
                None => return false,
            }
        }
        false
    }

    /// The decision of (set, direction, class): None (deny), or the ports allowed.
    pub fn decision(&self, set: PolicySetId, dir: PolicyDir, class: PeerClass) -> Option<Ports> {
        let key = decision_key(set, dir, class);
        match *HashTable::<u64, u32>::get(self.mem, &self.root.decisions, &key)? {
            PORTS_ALL => Some(Ports::All),
            head => Some(Ports::Ranges(
                read_portset(self.mem, &self.root.portsets, head).0,
            )),
        }
    }

    /// A Service port.
    #[inline]
    pub fn service(&self, key: &ServiceKey) -> Option<ServiceView<'a>> {
        let i = *HashTable::<ServiceKey, u32>::get(self.mem, &self.root.services, key)?;
        PagedArray::<ServiceRec>::get(self.mem, &self.root.service_recs, i)
            .filter(|r| r.flags & ServiceRec::PRESENT != 0)
            .map(|rec| ServiceView {
                mem: self.mem,
                rec,
                index: i,
            })
    }

    /// A route's flags, by next-hop index.
    #[inline]
    pub fn nexthop_flags(&self, index: u32) -> RouteFlags {
        self.nexthop_rec(index)
            .map_or(RouteFlags::NONE, |r| RouteFlags(r.flags))
    }

    /// A network's tables.
    #[inline]
    pub fn network(&self, id: NetworkId) -> Option<NetworkView<'a>> {
        PagedArray::<NetworkRec>::get(self.mem, &self.root.networks, id.0)
            .filter(|r| r.kind != 0)
            .map(|rec| NetworkView { mem: self.mem, rec })
    }

    /// Decodes next hop `index` (as returned by FIB lookups).
    #[inline]
    pub fn nexthop(&self, index: u32) -> Option<NextHop> {
        self.nexthop_rec(index).and_then(NextHop::from_rec)
    }

    /// The raw next-hop record `index`.
    #[inline]
    pub fn nexthop_rec(&self, index: u32) -> Option<&'a NextHopRec> {
        PagedArray::<NextHopRec>::get(self.mem, &self.root.nexthops, index).filter(|r| r.kind != 0)
    }

    /// The precomputed encapsulation of next hop `index` (a `Remote` next hop).
    #[inline]
    pub fn encap(&self, index: u32) -> Option<&'a EncapRec> {
        PagedArray::<EncapRec>::get(self.mem, &self.root.encaps, index)
            .filter(|r| r.flags & EncapRec::PRESENT != 0)
    }

    /// The node's SRv6 source address, if configured.
    pub fn srv6_source(&self) -> Option<Ipv6Addr> {
        let a = Ipv6Addr::from(self.root.srv6_source);
        (!a.is_unspecified()).then_some(a)
    }

    /// A port's binding.
    #[inline]
    pub fn port(&self, id: PortId) -> Option<PortInfo> {
        PagedArray::<PortRec>::get(self.mem, &self.root.ports, id.0).and_then(PortInfo::from_rec)
    }

    /// A port's raw record (the fast path reads the fields it needs without decoding).
    #[inline]
    pub fn port_rec(&self, id: PortId) -> Option<&'a PortRec> {
        PagedArray::<PortRec>::get(self.mem, &self.root.ports, id.0).filter(|r| r.kind != 0)
    }

    /// A remote node.
    #[inline]
    pub fn node(&self, id: NodeId) -> Option<NodeInfo> {
        PagedArray::<NodeRec>::get(self.mem, &self.root.nodes, id.0).and_then(NodeInfo::from_rec)
    }

    /// A local SID's behaviour.
    #[inline]
    pub fn local_sid(&self, sid: Sid) -> Option<SidBehavior> {
        HashTable::<u128, SidRec>::get(self.mem, &self.root.sids, &u128::from(sid.0))
            .and_then(SidBehavior::from_rec)
    }

    /// A static underlay neighbor.
    #[inline]
    pub fn underlay_neighbor(&self, ip: Ipv6Addr) -> Option<MacAddr> {
        HashTable::<u128, NeighRec>::get(self.mem, &self.root.underlay, &u128::from(ip))
            .filter(|r| r.flags & 1 != 0)
            .map(|r| MacAddr(r.mac))
    }
}

/// One Service port inside a [`Snapshot`].
#[derive(Debug, Clone, Copy)]
pub struct ServiceView<'a> {
    mem: Mem<'a>,
    rec: &'a ServiceRec,
    index: u32,
}

impl<'a> ServiceView<'a> {
    /// The record's index (stable while the Service port exists).
    #[inline]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// `sessionAffinity: ClientIP`'s timeout in seconds, if set.
    #[inline]
    pub fn affinity_timeout_s(&self) -> Option<u32> {
        (self.rec.flags & ServiceRec::AFFINITY != 0).then_some(self.rec.affinity_timeout_s)
    }

    /// `internalTrafficPolicy: Local`: with no backend, connections are dropped, not rejected.
    #[inline]
    pub fn node_local(&self) -> bool {
        self.rec.flags & ServiceRec::NODE_LOCAL != 0
    }

    /// Entries of the Maglev table (0: no backend takes connections).
    #[inline]
    pub fn table_len(&self) -> u32 {
        self.rec.table_len
    }

    /// The backend the Maglev table gives `hash`: (its index, its record).
    #[inline]
    pub fn pick(&self, hash: u64) -> Option<(u32, &'a BackendRec)> {
        let n = self.rec.table_len;
        if n == 0 {
            return None;
        }
        let slot = (hash % u64::from(n)) as u32;
        let b = PagedArray::<u32>::get(self.mem, &self.rec.table, slot)?.wrapping_sub(1);
        self.backend(b).map(|r| (b, r))
    }

    /// Backend `i`'s record.
    #[inline]
    pub fn backend(&self, i: u32) -> Option<&'a BackendRec> {
        PagedArray::<BackendRec>::get(self.mem, &self.rec.backends, i)
            .filter(|r| r.flags & BackendRec::PRESENT != 0)
    }

    /// Every backend.
    pub fn backends(&self) -> impl Iterator<Item = Backend> + 'a {
        PagedArray::<BackendRec>::iter(self.mem, &self.rec.backends)
            .filter_map(|(_, r)| Backend::from_rec(r))
    }
}

/// One network's tables inside a [`Snapshot`].
#[derive(Debug, Clone, Copy)]
pub struct NetworkView<'a> {
    mem: Mem<'a>,
    rec: &'a NetworkRec,
}

impl<'a> NetworkView<'a> {
    /// Settings.
    pub fn info(&self) -> Option<NetworkInfo> {
        NetworkInfo::read(self.rec)
    }

    /// IPv4 longest-prefix match: the next-hop index (0 = no route).
    #[inline]
    pub fn route4_index(&self, ip: Ipv4Addr) -> u32 {
        Fib::<u32>::lookup(self.mem, &self.rec.fib4, u32::from(ip))
    }

    /// IPv6 longest-prefix match: the next-hop index (0 = no route).
    #[inline]
    pub fn route6_index(&self, ip: Ipv6Addr) -> u32 {
        Fib::<u128>::lookup(self.mem, &self.rec.fib6, u128::from(ip))
    }

    /// The peer class of an IPv4 address (0: no peer names it).
    #[inline]
    pub fn peer_class4(&self, ip: Ipv4Addr) -> PeerClass {
        PeerClass(Fib::<u32>::lookup(
            self.mem,
            &self.rec.peers4,
            u32::from(ip),
        ))
    }

    /// The peer class of an IPv6 address (0: no peer names it).
    #[inline]
    pub fn peer_class6(&self, ip: Ipv6Addr) -> PeerClass {
        PeerClass(Fib::<u128>::lookup(
            self.mem,
            &self.rec.peers6,
            u128::from(ip),
        ))
    }

    /// The peer class of an address.
    #[inline]
    pub fn peer_class(&self, ip: IpAddr) -> PeerClass {
        match ip {
            IpAddr::V4(a) => self.peer_class4(a),
            IpAddr::V6(a) => self.peer_class6(a),
        }
    }

    /// The network's policy generation.
    #[inline]
    pub fn policy_gen(&self) -> u32 {
        self.rec.policy_gen
    }

    /// Whether the network's local endpoints are connection-tracked.
    #[inline]
    pub fn stateful(&self) -> bool {
        self.rec.flags & 2 != 0
    }

    /// Bulk IPv4 lookup (host-order keys) into next-hop indices.
    #[inline]
    pub fn route4_bulk(&self, keys: &[u32], out: &mut [u32]) {
        Fib::<u32>::lookup_bulk(self.mem, &self.rec.fib4, keys, out)
    }

    /// Bulk IPv6 lookup into next-hop indices.
    #[inline]
    pub fn route6_bulk(&self, keys: &[u128], out: &mut [u32]) {
        Fib::<u128>::lookup_bulk(self.mem, &self.rec.fib6, keys, out)
    }

    /// The IPv4 FIB header (for benchmarks and tools).
    pub fn fib4(&self) -> &'a FibHdr {
        &self.rec.fib4
    }

    /// Neighbor lookup.
    #[inline]
    pub fn neighbor(&self, ip: IpAddr) -> Option<MacAddr> {
        HashTable::<u128, NeighRec>::get(self.mem, &self.rec.neigh, &ip_key(ip))
            .filter(|r| r.flags & 1 != 0)
            .map(|r| MacAddr(r.mac))
    }

    /// FDB lookup: where frames to `mac` go.
    #[inline]
    pub fn fdb(&self, mac: MacAddr) -> Option<L2Hop> {
        HashTable::<u64, FdbRec>::get(self.mem, &self.rec.fdb, &mac.to_u64()).and_then(FdbRec::hop)
    }

    /// The raw FDB record of `mac` (sequence number, learned flag).
    #[inline]
    pub fn fdb_rec(&self, mac: MacAddr) -> Option<&'a FdbRec> {
        HashTable::<u64, FdbRec>::get(self.mem, &self.rec.fdb, &mac.to_u64())
            .filter(|r| r.hop().is_some())
    }

    /// Every FDB entry (MAC, record), in no particular order.
    pub fn fdb_entries(&self) -> impl Iterator<Item = (MacAddr, &'a FdbRec)> + 'a {
        HashTable::<u64, FdbRec>::iter(self.mem, &self.rec.fdb)
            .map(|(k, r)| (MacAddr::from_u64(*k), r))
    }

    /// Every neighbor entry (IP, MAC), in no particular order.
    pub fn neighbors(&self) -> impl Iterator<Item = (IpAddr, MacAddr)> + 'a {
        HashTable::<u128, NeighRec>::iter(self.mem, &self.rec.neigh)
            .filter(|(_, r)| r.flags & 1 != 0)
            .map(|(k, r)| (ip_of_key(*k), MacAddr(r.mac)))
    }

    /// The flood list: where copies of a BUM frame go.
    #[inline]
    pub fn flood(&self) -> impl Iterator<Item = L2Hop> + 'a {
        PagedArray::<u32>::iter(self.mem, &self.rec.flood).map(|(_, r)| flood_hop(*r))
    }
}
