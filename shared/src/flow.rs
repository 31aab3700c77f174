//! The forwarder's flow table: one entry per tracked connection, shared by every worker of one
//! forwarder, in a region of its own (`lace-<name>.flows`) so that established connections
//! survive a forwarder restart.
//!
//! This module is storage and concurrency only; what a state means, when a connection is NEW
//! and what is allowed is the forwarder's connection tracker (`lace-forwarder`'s
//! `pipeline::ct`, ADR 0025).
//!
//! # Keys and zones
//!
//! A connection is tracked per *zone*: the local endpoint (pod port) it belongs to. Its key is
//! (zone, protocol, remote address, remote port, local port) — the local address is the
//! endpoint's own, so both directions of a connection have the same key: a packet the endpoint
//! sends has the destination as its remote, a packet it receives has the source. A connection
//! between two endpoints of one node has an entry in each endpoint's zone. An entry whose
//! connection is translated (a Service's DNAT) is also found by its *reverse key* — the key the
//! replies carry: (zone, protocol, backend address, backend port, local port), or for a
//! hairpin (a pod reaching itself through its Service) (zone, protocol, Service address, local
//! port, backend port).
//!
//! # Layout
//!
//! ```text
//!  0      region header
//!  4096   FlowHeader: geometry, seed
//!  8192   per-worker counters (64 B each, MAX_WORKERS)
//!  …      buckets: 64 B each = 7 slots + meta   (power of two)
//!  …      entries: 64 B each                     (capacity)
//! ```
//!
//! A slot is `idx + 1` (bits 0–31; 0 = empty), the reverse-key bit (32) and 31 bits of the
//! key's hash (33–63), so a lookup compares the key only where the signature matches. A key
//! lives in its home bucket or, when that is full, in one of the next [`PROBE`] − 1 buckets;
//! the home bucket's meta word counts keys displaced that way (a lookup only looks further when
//! the count is non-zero) and carries a lock bit. A bucket's 7 slots and meta are one cache
//! line, so a lookup usually reads one bucket line and one entry line.
//!
//! # Concurrency
//!
//! - **Lookups are lock-free.** An entry's identity (zone, key, translation) is written under a
//!   per-entry sequence lock: a reader that sees an odd or changed sequence number retries, so it
//!   never returns a torn key. Its mutable part (last seen, state, policy generation) is atomic
//!   words updated in place.
//! - **Linking and unlinking a key** take its home bucket's lock bit (a spin on one cache line,
//!   held for a few dozen instructions): only NEW connections and removals pay it. Slots are
//!   claimed with compare-and-swap, because keys of several homes share a bucket.
//! - **Entries are allocated** from a per-worker cache of free indices refilled in batches from a
//!   process-wide pool (a mutex taken once per [`CACHE_BATCH`] allocations or frees); an entry
//!   is freed only by the worker that sweeps its index range, so no index is freed twice.
//! - An entry freed while another worker still holds its view can see that worker's touch land
//!   on the index's next use (a later last-seen time): harmless, it only delays expiry.
//!
//! # Restarts
//!
//! [`FlowTable::open_or_create`] re-attaches an existing region of the same geometry: lock bits
//! a dead forwarder held are cleared, entries half-written or not reachable from any slot are
//! freed, slots pointing at free entries are cleared and overflow counts recomputed — then every
//! established connection is still there. A region of another geometry (the configured
//! capacity changed) is recreated.

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::hash::mix64;
use crate::region::{Region, RegionKind, HEADER_SIZE};

/// Buckets a key may live in (its home and the next ones).
pub const PROBE: u64 = 4;
/// Slots per bucket (the eighth word is the meta word).
const SLOTS: usize = 7;
/// Workers with their own counter slot.
pub const MAX_WORKERS: usize = 64;
/// Free indices moved between a worker's cache and the pool at a time.
pub const CACHE_BATCH: usize = 64;
/// Smallest table.
pub const MIN_CAPACITY: u32 = 1024;
/// Largest table (entry indices are 31 bits in a slot; 64 B each, this is 16 GiB).
pub const MAX_CAPACITY: u32 = 1 << 28;

const FLOW_HEADER: u64 = HEADER_SIZE;
const COUNTERS: u64 = HEADER_SIZE * 2;
const BUCKETS: u64 = COUNTERS + (MAX_WORKERS as u64) * 64;
const LOCK: u64 = 1 << 63;
const REV: u64 = 1 << 32;

/// Path of a forwarder's flow region: `lace-<name>.flows` in `dir`.
pub fn flows_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("lace-{name}.flows"))
}

/// A connection's key (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    /// The local endpoint's zone (its port id), never 0.
    pub zone: u32,
    /// IP protocol.
    pub proto: u8,
    /// IPv6 (else the addresses are IPv4-mapped).
    pub v6: bool,
    /// The remote address, IPv4-mapped for IPv4, network order.
    pub remote: [u8; 16],
    /// The remote port (ICMP echo: the identifier).
    pub rport: u16,
    /// The local port (ICMP echo: the identifier).
    pub lport: u16,
}

impl FlowKey {
    #[inline(always)]
    fn words(&self) -> [u64; 4] {
        let r = u128::from_be_bytes(self.remote);
        [
            u64::from(self.zone),
            (r >> 64) as u64,
            r as u64,
            u64::from(self.rport)
                | u64::from(self.lport) << 16
                | u64::from(self.proto) << 32
                | u64::from(self.v6) << 40,
        ]
    }

    #[inline(always)]
    fn from_words(w: [u64; 4]) -> FlowKey {
        let r = u128::from(w[1]) << 64 | u128::from(w[2]);
        FlowKey {
            zone: w[0] as u32,
            proto: (w[3] >> 32) as u8,
            v6: (w[3] >> 40) & 1 != 0,
            remote: r.to_be_bytes(),
            rport: w[3] as u16,
            lport: (w[3] >> 16) as u16,
        }
    }

    /// The key's hash under `seed`.
    #[inline(always)]
    pub fn hash(&self, seed: u64) -> u64 {
        let w = self.words();
        let a = (w[1] ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ w[0].rotate_left(17);
        let b = (w[2] ^ seed.rotate_left(29)).wrapping_mul(0xc2b2_ae3d_27d4_eb4f) ^ w[3];
        mix64(a ^ b.rotate_left(31))
    }
}

/// How a tracked connection was opened, seen from its zone's endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The endpoint opened it (the first packet left the endpoint).
    Egress,
    /// It was opened toward the endpoint.
    Ingress,
}

/// The translation of a connection (a Service's DNAT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nat {
    /// The backend's address (IPv4-mapped for IPv4).
    pub addr: [u8; 16],
    /// The backend's port.
    pub port: u16,
    /// The backend is the endpoint itself: its source is translated to the Service address too.
    pub hairpin: bool,
}

/// What a new entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowInit {
    /// The key (the first packet's, in its zone).
    pub key: FlowKey,
    /// Who opened the connection.
    pub origin: Origin,
    /// Its translation, if any.
    pub nat: Option<Nat>,
    /// Initial state (the tracker's encoding, never 0).
    pub state: u8,
    /// The zone network's policy generation the connection was allowed under.
    pub gen: u32,
    /// Now, in the tracker's clock (seconds).
    pub now: u32,
    /// Timeout of the entry when its state has none of its own (session affinity), seconds
    /// (kept in 2-second units, at most 131,070 s).
    pub timeout: u32,
}

impl FlowInit {
    /// The key its replies will carry when it is translated (the backend's side).
    pub fn reverse_key(&self) -> Option<FlowKey> {
        reverse_key(&self.key, self.nat.as_ref())
    }
}

/// An entry as a lookup saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowView {
    /// The entry's index.
    pub idx: u32,
    /// The lookup matched the reverse key (a reply of a translated connection).
    pub reverse: bool,
    /// The forward key.
    pub key: FlowKey,
    /// Who opened the connection.
    pub origin: Origin,
    /// Its translation.
    pub nat: Option<Nat>,
    /// State.
    pub state: u8,
    /// Bits the tracker keeps beside the state (e.g. which FINs it saw).
    pub seen: u8,
    /// Policy generation.
    pub gen: u32,
    /// Last packet, seconds.
    pub last_seen: u32,
    /// The entry's own timeout, seconds.
    pub timeout: u32,
}

impl FlowView {
    /// The key replies of the connection carry, if it has one of its own (translated
    /// connections).
    pub fn reverse_key(&self) -> Option<FlowKey> {
        reverse_key(&self.key, self.nat.as_ref())
    }
}

fn reverse_key(key: &FlowKey, nat: Option<&Nat>) -> Option<FlowKey> {
    let nat = nat?;
    Some(if nat.hairpin {
        FlowKey {
            rport: key.lport,
            lport: nat.port,
            ..*key
        }
    } else {
        FlowKey {
            remote: nat.addr,
            rport: nat.port,
            ..*key
        }
    })
}

/// Why an entry could not be inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// No free entry (the table holds its capacity).
    Full,
    /// No free slot within [`PROBE`] buckets of the key's home.
    NoSlot,
    /// The translated connection's reply key is another live connection's key (the client
    /// reaches the backend directly from the same port): the new connection is refused.
    Collision,
}

/// Outcome of an insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// A new entry.
    New(u32),
    /// Another worker inserted the same connection first: its entry.
    Exists(FlowView),
}

/// Per-worker counters in the region.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowCounts {
    /// Entries created.
    pub created: u64,
    /// Entries removed (expired or revoked).
    pub removed: u64,
    /// NEW connections refused for lack of room.
    pub full: u64,
}

/// An entry: eight words, one cache line.
///
/// ```text
///  0  seq (low 32, odd while the identity is written) | zone (high 32; 0 = free)
///  1  remote address, high half            ┐
///  2  remote address, low half             │ identity: written under the
///  3  rport | lport<<16 | proto<<32 |      │ sequence lock, read only with it
///     v6<<40 | ingress<<41 | nat<<42 |     │
///     hairpin<<43                          │
///  4  NAT address, high half               │
///  5  NAT address, low half                ┘
///  6  NAT port | timeout/2 s <<16 | last seen <<32    (last seen: updated in place)
///  7  state | seen<<8 | policy generation <<32         (updated in place)
/// ```
#[repr(C, align(64))]
struct Entry {
    w: [AtomicU64; 8],
}

const W3_ORIGIN_INGRESS: u64 = 1 << 41;
const W3_NAT: u64 = 1 << 42;
const W3_HAIRPIN: u64 = 1 << 43;
const W3_KEY_MASK: u64 = (1 << 41) - 1;

#[repr(C, align(64))]
struct Bucket {
    slots: [AtomicU64; SLOTS],
    meta: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 64 && std::mem::size_of::<Bucket>() == 64);

/// Geometry stored after the region header.
#[repr(C)]
#[derive(Clone, Copy)]
struct FlowHeader {
    capacity: u64,
    buckets: u64,
    seed: u64,
    /// Where the entries start.
    entries: u64,
}

/// A worker's cache of free entry indices.
#[derive(Debug, Default)]
pub struct FlowCache {
    free: Vec<u32>,
}

/// What holds a table's memory.
#[derive(Debug)]
enum Backing {
    /// The forwarder's region file.
    Region(Region),
    /// Process memory (benches, tests, miri): 64-byte aligned words.
    Heap(#[allow(dead_code)] Vec<Line>),
}

/// One 64-byte line of a heap-backed table.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy)]
struct Line([u64; 8]);

/// The flow table of one forwarder (see the module docs).
#[derive(Debug)]
pub struct FlowTable {
    backing: Backing,
    base: NonNull<u8>,
    capacity: u32,
    mask: u64,
    seed: u64,
    entries: u64,
    pool: Mutex<Vec<u32>>,
}

// SAFETY: every access to the mapping goes through atomics (or happens before the table is
// shared, in `open_or_create`); the pool is a Mutex.
unsafe impl Send for FlowTable {}
// SAFETY: as above.
unsafe impl Sync for FlowTable {}

/// Buckets for a table of `capacity` entries: a fifth of the slots free when every entry has
/// two keys (every connection translated), three fifths when none is.
fn buckets_for(capacity: u32) -> u64 {
    (u64::from(capacity) * 5 / 2)
        .div_ceil(SLOTS as u64)
        .next_power_of_two()
        .max(16)
}

/// Bytes of a region for `capacity` entries.
pub fn region_bytes(capacity: u32) -> u64 {
    BUCKETS + buckets_for(capacity) * 64 + u64::from(capacity) * 64
}

impl FlowTable {
    /// Opens the region at `path` if it exists with `capacity` entries, else creates it (an
    /// existing region of another capacity or ABI is replaced: its connections are lost, which
    /// the caller reports). Returns the table and whether existing connections were kept.
    pub fn open_or_create(path: &Path, capacity: u32) -> Result<(FlowTable, bool)> {
        if !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(Error::Invalid {
                what: format!(
                    "flow table capacity {capacity}: must be {MIN_CAPACITY}..={MAX_CAPACITY} \
                     entries"
                ),
            });
        }
        if path.exists() {
            if let Ok(region) = Region::open_rw(path, RegionKind::Flows) {
                let t = Self::from_region(region)?;
                if t.capacity == capacity && t.mask + 1 == buckets_for(capacity) {
                    t.recover();
                    return Ok((t, true));
                }
            }
            std::fs::remove_file(path).map_err(|source| Error::Io {
                op: "remove",
                path: path.to_path_buf(),
                source,
            })?;
        }
        let size = region_bytes(capacity);
        let mut region = Region::create(path, RegionKind::Flows, size, [0; 4])?;
        let (base, _) = region.raw_mut().ok_or_else(|| Error::Invalid {
            what: format!("flow region {}: not writable", path.display()),
        })?;
        let buckets = buckets_for(capacity);
        let hdr = FlowHeader {
            capacity: u64::from(capacity),
            buckets,
            seed: random_seed(),
            entries: BUCKETS + buckets * 64,
        };
        // SAFETY: the region was just created (exclusively) with at least `size` bytes, so the
        // header page after the region header is mapped, writable and not shared yet.
        unsafe {
            base.as_ptr()
                .add(FLOW_HEADER as usize)
                .cast::<FlowHeader>()
                .write(hdr)
        };
        let t = Self::from_region(region)?;
        *t.lock_pool() = (0..capacity).rev().collect();
        Ok((t, false))
    }

    /// A table in process memory (benches and tests): the same structure, not persistent.
    pub fn in_memory(capacity: u32) -> Result<FlowTable> {
        if !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(Error::Invalid {
                what: format!(
                    "flow table capacity {capacity}: must be {MIN_CAPACITY}..={MAX_CAPACITY} \
                     entries"
                ),
            });
        }
        let bytes = region_bytes(capacity);
        let mut lines = vec![Line([0; 8]); (bytes / 64) as usize];
        let base = NonNull::new(lines.as_mut_ptr().cast::<u8>()).ok_or_else(|| Error::Invalid {
            what: "flow table: empty allocation".into(),
        })?;
        let buckets = buckets_for(capacity);
        let hdr = FlowHeader {
            capacity: u64::from(capacity),
            buckets,
            seed: random_seed(),
            entries: BUCKETS + buckets * 64,
        };
        // SAFETY: `lines` holds `bytes` ≥ FLOW_HEADER + 32 bytes, 64-byte aligned, owned here
        // and not shared yet; moving the Vec into the table does not move its heap buffer.
        unsafe {
            base.as_ptr()
                .add(FLOW_HEADER as usize)
                .cast::<FlowHeader>()
                .write(hdr)
        };
        let t = FlowTable {
            backing: Backing::Heap(lines),
            base,
            capacity,
            mask: buckets - 1,
            seed: hdr.seed,
            entries: hdr.entries,
            pool: Mutex::new((0..capacity).rev().collect()),
        };
        Ok(t)
    }

    fn from_region(mut region: Region) -> Result<FlowTable> {
        let path = region.path().to_path_buf();
        let len = region.len() as u64;
        let (base, _) = region.raw_mut().ok_or_else(|| Error::Invalid {
            what: format!("flow region {}: not writable", path.display()),
        })?;
        // SAFETY: the region is at least two pages (Region::create's minimum, checked by
        // open_rw's size validation), so the FlowHeader page is mapped.
        let hdr = unsafe {
            base.as_ptr()
                .add(FLOW_HEADER as usize)
                .cast::<FlowHeader>()
                .read()
        };
        let corrupt = |what: String| Error::Corrupt {
            path: path.clone(),
            what,
        };
        if hdr.capacity == 0
            || hdr.capacity > u64::from(MAX_CAPACITY)
            || !hdr.buckets.is_power_of_two()
            || hdr.entries != BUCKETS + hdr.buckets * 64
            || hdr.entries + hdr.capacity * 64 > len
        {
            return Err(corrupt(format!(
                "flow table geometry (capacity {}, buckets {}) does not fit the {len}-byte file",
                hdr.capacity, hdr.buckets
            )));
        }
        Ok(FlowTable {
            backing: Backing::Region(region),
            base,
            capacity: hdr.capacity as u32,
            mask: hdr.buckets - 1,
            seed: hdr.seed,
            entries: hdr.entries,
            pool: Mutex::new(Vec::new()),
        })
    }

    /// Entries the table holds at most.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The region's path (None for a table in process memory).
    pub fn path(&self) -> Option<&Path> {
        match &self.backing {
            Backing::Region(r) => Some(r.path()),
            Backing::Heap(_) => None,
        }
    }

    /// The hash seed (the tracker hashes keys with it).
    #[inline]
    pub fn seed(&self) -> u64 {
        self.seed
    }

    #[inline(always)]
    fn bucket(&self, i: u64) -> &Bucket {
        // SAFETY: `i & mask` < buckets; the bucket array lies inside the mapping (checked in
        // from_region) and Bucket is atomics only, valid for every bit pattern.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add((BUCKETS + (i & self.mask) * 64) as usize)
                .cast::<Bucket>()
        }
    }

    #[inline(always)]
    fn entry(&self, idx: u32) -> Option<&Entry> {
        if idx >= self.capacity {
            return None;
        }
        // SAFETY: idx < capacity; the entry array lies inside the mapping (checked in
        // from_region) and Entry is atomics only, valid for every bit pattern.
        Some(unsafe {
            &*self
                .base
                .as_ptr()
                .add((self.entries + u64::from(idx) * 64) as usize)
                .cast::<Entry>()
        })
    }

    #[inline(always)]
    fn counters(&self, worker: usize) -> &[AtomicU64; 8] {
        let w = worker.min(MAX_WORKERS - 1) as u64;
        // SAFETY: the counter page holds MAX_WORKERS 64-byte slots inside the mapping.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add((COUNTERS + w * 64) as usize)
                .cast::<[AtomicU64; 8]>()
        }
    }

    /// Prefetches the home bucket of a key's hash.
    #[inline(always)]
    pub fn prefetch(&self, hash: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let p = self.bucket(hash) as *const Bucket as *const i8;
            // SAFETY: prefetching a mapped address has no effect on program state.
            unsafe { std::arch::x86_64::_mm_prefetch(p, std::arch::x86_64::_MM_HINT_T0) };
        }
    }

    /// Reads entry `idx` consistently; None if it is free or keeps changing.
    #[inline]
    fn read(&self, idx: u32) -> Option<FlowView> {
        let e = self.entry(idx)?;
        for _ in 0..8 {
            let w0 = e.w[0].load(Ordering::Acquire);
            if w0 & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let w1 = e.w[1].load(Ordering::Relaxed);
            let w2 = e.w[2].load(Ordering::Relaxed);
            let w3 = e.w[3].load(Ordering::Relaxed);
            let w4 = e.w[4].load(Ordering::Relaxed);
            let w5 = e.w[5].load(Ordering::Relaxed);
            let w6 = e.w[6].load(Ordering::Relaxed);
            let w7 = e.w[7].load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if e.w[0].load(Ordering::Relaxed) != w0 {
                continue;
            }
            let zone = (w0 >> 32) as u32;
            if zone == 0 {
                return None;
            }
            let key = FlowKey::from_words([u64::from(zone), w1, w2, w3 & W3_KEY_MASK]);
            let nat = (w3 & W3_NAT != 0).then(|| Nat {
                addr: (u128::from(w4) << 64 | u128::from(w5)).to_be_bytes(),
                port: w6 as u16,
                hairpin: w3 & W3_HAIRPIN != 0,
            });
            return Some(FlowView {
                idx,
                reverse: false,
                key,
                origin: if w3 & W3_ORIGIN_INGRESS != 0 {
                    Origin::Ingress
                } else {
                    Origin::Egress
                },
                nat,
                state: w7 as u8,
                seen: (w7 >> 8) as u8,
                gen: (w7 >> 32) as u32,
                last_seen: (w6 >> 32) as u32,
                timeout: ((w6 >> 16) & 0xffff) as u32 * 2,
            });
        }
        None
    }

    /// Looks a key up (`hash` = `key.hash(seed)`): the entry and whether the reverse key matched.
    #[inline]
    pub fn lookup(&self, key: &FlowKey, hash: u64) -> Option<FlowView> {
        let sig = hash >> 33;
        let home = hash & self.mask;
        for b in 0..PROBE {
            let bucket = self.bucket(home + b);
            for s in &bucket.slots {
                let v = s.load(Ordering::Acquire);
                if v == 0 || v >> 33 != sig {
                    continue;
                }
                let idx = (v as u32).wrapping_sub(1);
                let rev = v & REV != 0;
                if let Some(mut view) = self.read(idx) {
                    let k = if rev {
                        view.reverse_key()
                    } else {
                        Some(view.key)
                    };
                    if k.as_ref() == Some(key) {
                        view.reverse = rev;
                        return Some(view);
                    }
                }
            }
            if b == 0 && bucket.meta.load(Ordering::Acquire) & 0xffff == 0 {
                break;
            }
        }
        None
    }

    fn lock_home(&self, home: u64) -> &Bucket {
        let b = self.bucket(home);
        loop {
            let m = b.meta.load(Ordering::Relaxed);
            if m & LOCK == 0
                && b.meta
                    .compare_exchange_weak(m, m | LOCK, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return b;
            }
            std::hint::spin_loop();
        }
    }

    fn unlock(b: &Bucket) {
        b.meta.fetch_and(!LOCK, Ordering::Release);
    }

    /// Links `key` (`rev`: as the reverse key) to entry `idx`, unless a live entry already has
    /// it: that entry's view. Err: no free slot near its home.
    fn link(
        &self,
        key: &FlowKey,
        idx: u32,
        rev: bool,
    ) -> std::result::Result<Option<FlowView>, ()> {
        let hash = key.hash(self.seed);
        let home = hash & self.mask;
        let hb = self.lock_home(home);
        if let Some(v) = self.lookup(key, hash) {
            Self::unlock(hb);
            return Ok(Some(v));
        }
        let val = u64::from(idx + 1) | if rev { REV } else { 0 } | (hash >> 33) << 33;
        for b in 0..PROBE {
            let bucket = self.bucket(home + b);
            for s in &bucket.slots {
                if s.load(Ordering::Relaxed) == 0
                    && s.compare_exchange(0, val, Ordering::Release, Ordering::Relaxed)
                        .is_ok()
                {
                    if b > 0 {
                        hb.meta.fetch_add(1, Ordering::Release);
                    }
                    Self::unlock(hb);
                    return Ok(None);
                }
            }
        }
        Self::unlock(hb);
        Err(())
    }

    /// Unlinks `key` (`rev`) from entry `idx`, if linked.
    fn unlink(&self, key: &FlowKey, idx: u32, rev: bool) {
        let hash = key.hash(self.seed);
        let home = hash & self.mask;
        let hb = self.lock_home(home);
        let val = u64::from(idx + 1) | if rev { REV } else { 0 } | (hash >> 33) << 33;
        'find: for b in 0..PROBE {
            let bucket = self.bucket(home + b);
            for s in &bucket.slots {
                if s.load(Ordering::Relaxed) == val
                    && s.compare_exchange(val, 0, Ordering::Release, Ordering::Relaxed)
                        .is_ok()
                {
                    if b > 0 {
                        hb.meta.fetch_sub(1, Ordering::Release);
                    }
                    break 'find;
                }
            }
        }
        Self::unlock(hb);
    }

    fn write(&self, idx: u32, f: &FlowInit) {
        let Some(e) = self.entry(idx) else { return };
        let w = f.key.words();
        let seq = (e.w[0].load(Ordering::Relaxed) as u32) | 1;
        e.w[0].store(u64::from(seq), Ordering::Relaxed);
        fence(Ordering::Release);
        let nat = f.nat.unwrap_or(Nat {
            addr: [0; 16],
            port: 0,
            hairpin: false,
        });
        let na = u128::from_be_bytes(nat.addr);
        e.w[1].store(w[1], Ordering::Relaxed);
        e.w[2].store(w[2], Ordering::Relaxed);
        e.w[3].store(
            w[3] | if f.origin == Origin::Ingress {
                W3_ORIGIN_INGRESS
            } else {
                0
            } | if f.nat.is_some() { W3_NAT } else { 0 }
                | if nat.hairpin { W3_HAIRPIN } else { 0 },
            Ordering::Relaxed,
        );
        e.w[4].store((na >> 64) as u64, Ordering::Relaxed);
        e.w[5].store(na as u64, Ordering::Relaxed);
        e.w[6].store(
            u64::from(nat.port)
                | u64::from(f.timeout.div_ceil(2).min(0xffff)) << 16
                | u64::from(f.now) << 32,
            Ordering::Relaxed,
        );
        e.w[7].store(
            u64::from(f.state) | u64::from(f.gen) << 32,
            Ordering::Relaxed,
        );
        e.w[0].store(
            u64::from(seq.wrapping_add(1)) | u64::from(f.key.zone) << 32,
            Ordering::Release,
        );
    }

    fn clear(&self, idx: u32) {
        let Some(e) = self.entry(idx) else { return };
        let seq = (e.w[0].load(Ordering::Relaxed) as u32) | 1;
        e.w[0].store(u64::from(seq), Ordering::Relaxed);
        fence(Ordering::Release);
        e.w[7].store(0, Ordering::Relaxed);
        e.w[0].store(u64::from(seq.wrapping_add(1)), Ordering::Release);
    }

    /// Inserts a connection: a new entry linked by its key (and reverse key), or the entry
    /// another worker inserted for the same key meanwhile.
    pub fn insert(
        &self,
        f: &FlowInit,
        cache: &mut FlowCache,
        worker: usize,
    ) -> std::result::Result<Inserted, InsertError> {
        let c = self.counters(worker);
        let Some(idx) = self.alloc(cache) else {
            c[2].fetch_add(1, Ordering::Relaxed);
            return Err(InsertError::Full);
        };
        self.write(idx, f);
        let rev = reverse_key(&f.key, f.nat.as_ref());
        match self.link(&f.key, idx, false) {
            Ok(None) => {}
            Ok(Some(v)) => {
                self.clear(idx);
                self.release(cache, idx);
                return Ok(Inserted::Exists(v));
            }
            Err(()) => {
                self.clear(idx);
                self.release(cache, idx);
                c[2].fetch_add(1, Ordering::Relaxed);
                return Err(InsertError::NoSlot);
            }
        }
        if let Some(rk) = rev {
            match self.link(&rk, idx, true) {
                Ok(None) => {}
                r @ (Ok(Some(_)) | Err(())) => {
                    self.unlink(&f.key, idx, false);
                    self.clear(idx);
                    self.release(cache, idx);
                    return Err(if r.is_err() {
                        c[2].fetch_add(1, Ordering::Relaxed);
                        InsertError::NoSlot
                    } else {
                        InsertError::Collision
                    });
                }
            }
        }
        c[0].fetch_add(1, Ordering::Relaxed);
        Ok(Inserted::New(idx))
    }

    /// Records a packet on entry `idx` at `now` (seconds).
    #[inline]
    pub fn touch(&self, idx: u32, now: u32) {
        if let Some(e) = self.entry(idx) {
            let w6 = e.w[6].load(Ordering::Relaxed);
            if (w6 >> 32) as u32 != now {
                e.w[6].store(w6 & 0xffff_ffff | u64::from(now) << 32, Ordering::Relaxed);
            }
        }
    }

    /// Sets entry `idx`'s state and seen bits if they are still `from` (state, seen): another
    /// worker's transition in between wins. Returns whether it applied.
    #[inline]
    pub fn transition(&self, idx: u32, from: (u8, u8), to: (u8, u8)) -> bool {
        let Some(e) = self.entry(idx) else {
            return false;
        };
        let w7 = e.w[7].load(Ordering::Relaxed);
        if (w7 as u8, (w7 >> 8) as u8) != from {
            return false;
        }
        let new = w7 & !0xffff | u64::from(to.0) | u64::from(to.1) << 8;
        e.w[7]
            .compare_exchange(w7, new, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Records that entry `idx` was allowed again under policy generation `gen`.
    #[inline]
    pub fn set_gen(&self, idx: u32, gen: u32) {
        if let Some(e) = self.entry(idx) {
            let w7 = e.w[7].load(Ordering::Relaxed);
            let _ = e.w[7].compare_exchange(
                w7,
                w7 & 0xffff_ffff | u64::from(gen) << 32,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Removes entry `idx` at once (its keys unlinked, the index back to `cache`), if it is
    /// still the connection `view` describes.
    pub fn remove(&self, view: &FlowView, cache: &mut FlowCache, worker: usize) -> bool {
        match self.read(view.idx) {
            Some(v) if v.key == view.key && v.nat == view.nat => {}
            _ => return false,
        }
        self.unlink(&view.key, view.idx, false);
        if let Some(rk) = view.reverse_key() {
            self.unlink(&rk, view.idx, true);
        }
        self.clear(view.idx);
        self.release(cache, view.idx);
        self.counters(worker)[1].fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Sweeps `count` entries from index `from` (wrapping): removes those `expired` says are
    /// done. Returns where to continue and how many were removed.
    pub fn sweep(
        &self,
        from: u32,
        count: u32,
        cache: &mut FlowCache,
        worker: usize,
        mut expired: impl FnMut(&FlowView) -> bool,
    ) -> (u32, u32) {
        let mut i = from % self.capacity;
        let mut removed = 0;
        for _ in 0..count.min(self.capacity) {
            if let Some(v) = self.read(i) {
                if expired(&v) && self.remove(&v, cache, worker) {
                    removed += 1;
                }
            }
            i = (i + 1) % self.capacity;
        }
        (i, removed)
    }

    /// An entry's current contents (None: free).
    pub fn get(&self, idx: u32) -> Option<FlowView> {
        self.read(idx)
    }

    fn lock_pool(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[inline]
    fn alloc(&self, cache: &mut FlowCache) -> Option<u32> {
        if cache.free.is_empty() {
            let mut pool = self.lock_pool();
            let n = pool.len().min(CACHE_BATCH);
            let at = pool.len() - n;
            cache.free.extend(pool.drain(at..));
        }
        cache.free.pop()
    }

    #[inline]
    fn release(&self, cache: &mut FlowCache, idx: u32) {
        cache.free.push(idx);
        if cache.free.len() >= 2 * CACHE_BATCH {
            let at = cache.free.len() - CACHE_BATCH;
            self.lock_pool().extend(cache.free.drain(at..));
        }
    }

    /// Gives a worker's cached free indices back to the pool (the worker stops).
    pub fn return_cache(&self, cache: &mut FlowCache) {
        self.lock_pool().append(&mut cache.free);
    }

    /// Entries in use (capacity minus free ones, as the counters tell).
    pub fn counts(&self) -> FlowCounts {
        counts_of(|w| self.counters(w))
    }

    /// Makes a re-attached table consistent (see the module docs); the table is not shared yet.
    fn recover(&self) {
        for b in 0..=self.mask {
            self.bucket(b).meta.store(0, Ordering::Relaxed);
        }
        // Which entries some slot reaches, as forward and as reverse key.
        let mut reached = vec![0u8; self.capacity as usize];
        for b in 0..=self.mask {
            for s in &self.bucket(b).slots {
                let v = s.load(Ordering::Relaxed);
                if v == 0 {
                    continue;
                }
                let idx = (v as u32).wrapping_sub(1);
                let ok = self.read(idx).is_some_and(|view| {
                    let k = if v & REV != 0 {
                        view.reverse_key()
                    } else {
                        Some(view.key)
                    };
                    // The slot must be where the key hashes to.
                    k.is_some_and(|k| {
                        let h = k.hash(self.seed);
                        h >> 33 == v >> 33 && (b.wrapping_sub(h & self.mask) & self.mask) < PROBE
                    })
                });
                if ok {
                    reached[idx as usize] |= if v & REV != 0 { 2 } else { 1 };
                } else {
                    s.store(0, Ordering::Relaxed);
                }
            }
        }
        let mut free = Vec::new();
        for idx in (0..self.capacity).rev() {
            let keep = match self.read(idx) {
                None => false,
                Some(v) => {
                    let want = if v.nat.is_some() { 3 } else { 1 };
                    reached[idx as usize] == want
                }
            };
            if !keep {
                if reached[idx as usize] != 0 {
                    // Half-linked: drop the slots that reach it.
                    for b in 0..=self.mask {
                        for s in &self.bucket(b).slots {
                            let v = s.load(Ordering::Relaxed);
                            if v != 0 && (v as u32).wrapping_sub(1) == idx {
                                s.store(0, Ordering::Relaxed);
                            }
                        }
                    }
                }
                self.clear(idx);
                free.push(idx);
            }
        }
        // Overflow counts from where every key sits relative to its home.
        for b in 0..=self.mask {
            for s in &self.bucket(b).slots {
                let v = s.load(Ordering::Relaxed);
                if v == 0 {
                    continue;
                }
                let idx = (v as u32).wrapping_sub(1);
                if let Some(view) = self.read(idx) {
                    let k = if v & REV != 0 {
                        view.reverse_key()
                    } else {
                        Some(view.key)
                    };
                    if let Some(k) = k {
                        let home = k.hash(self.seed) & self.mask;
                        if home != b {
                            self.bucket(home).meta.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        let in_use = u64::from(self.capacity) - free.len() as u64;
        for w in 0..MAX_WORKERS {
            for c in self.counters(w) {
                c.store(0, Ordering::Relaxed);
            }
        }
        self.counters(0)[0].store(in_use, Ordering::Relaxed);
        *self.lock_pool() = free;
    }
}

fn counts_of<'a>(slot: impl Fn(usize) -> &'a [AtomicU64; 8]) -> FlowCounts {
    let mut c = FlowCounts::default();
    for w in 0..MAX_WORKERS {
        let s = slot(w);
        c.created += s[0].load(Ordering::Relaxed);
        c.removed += s[1].load(Ordering::Relaxed);
        c.full += s[2].load(Ordering::Relaxed);
    }
    c
}

/// A read-only view of a forwarder's flow region (for `stats`).
#[derive(Debug)]
pub struct FlowStats {
    region: Region,
    capacity: u32,
}

impl FlowStats {
    /// Maps the region read-only.
    pub fn open(path: &Path) -> Result<FlowStats> {
        let region = Region::open_ro(path, RegionKind::Flows)?;
        let hdr = region
            .mem()
            .read::<[u64; 4]>(FLOW_HEADER)
            .ok_or_else(|| Error::Corrupt {
                path: path.to_path_buf(),
                what: "flow header outside the file".into(),
            })?;
        Ok(FlowStats {
            capacity: hdr[0].min(u64::from(MAX_CAPACITY)) as u32,
            region,
        })
    }

    /// Entries the table holds at most.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The counters.
    pub fn counts(&self) -> FlowCounts {
        let mem = self.region.mem();
        let mut c = FlowCounts::default();
        for w in 0..MAX_WORKERS as u64 {
            let at = COUNTERS + w * 64;
            let get = |i: u64| {
                mem.atomic_u64(at + i * 8)
                    .map_or(0, |a| a.load(Ordering::Relaxed))
            };
            c.created += get(0);
            c.removed += get(1);
            c.full += get(2);
        }
        c
    }
}

fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x666c_6f77_u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(zone: u32, n: u32) -> FlowKey {
        let mut remote = [0u8; 16];
        remote[10] = 0xff;
        remote[11] = 0xff;
        remote[12..].copy_from_slice(&(0x0a00_0000 | n).to_be_bytes());
        FlowKey {
            zone,
            proto: 6,
            v6: false,
            remote,
            rport: 80,
            lport: (n % 50_000) as u16 + 1024,
        }
    }

    fn init(key: FlowKey, nat: Option<Nat>) -> FlowInit {
        FlowInit {
            key,
            origin: Origin::Egress,
            nat,
            state: 1,
            gen: 7,
            now: 100,
            timeout: 0,
        }
    }

    fn backend(n: u8) -> Nat {
        let mut addr = [0u8; 16];
        addr[10] = 0xff;
        addr[11] = 0xff;
        addr[12..].copy_from_slice(&[10, 40, 1, n]);
        Nat {
            addr,
            port: 8080,
            hairpin: false,
        }
    }

    fn find(t: &FlowTable, k: &FlowKey) -> Option<FlowView> {
        t.lookup(k, k.hash(t.seed()))
    }

    #[test]
    fn insert_lookup_remove_and_reverse_keys() {
        let t = FlowTable::in_memory(MIN_CAPACITY).unwrap();
        let mut c = FlowCache::default();
        let k = key(3, 1);
        let idx = match t.insert(&init(k, None), &mut c, 0).unwrap() {
            Inserted::New(i) => i,
            other => panic!("{other:?}"),
        };
        let v = find(&t, &k).unwrap();
        assert_eq!((v.idx, v.reverse, v.key, v.nat), (idx, false, k, None));
        assert_eq!(
            (v.state, v.gen, v.last_seen, v.origin),
            (1, 7, 100, Origin::Egress)
        );
        assert!(
            find(&t, &key(4, 1)).is_none(),
            "the zone is part of the key"
        );
        assert!(find(&t, &key(3, 2)).is_none());

        // A translated connection is found by the reply's key too.
        let svc = key(3, 99);
        let nat = backend(7);
        t.insert(&init(svc, Some(nat)), &mut c, 0).unwrap();
        let rk = FlowKey {
            remote: nat.addr,
            rport: 8080,
            ..svc
        };
        let r = find(&t, &rk).unwrap();
        assert!(r.reverse);
        assert_eq!(r.key, svc);
        assert_eq!(r.nat, Some(nat));
        assert_eq!(r.reverse_key(), Some(rk));
        // Hairpin: the reply comes from the endpoint itself, to the Service address.
        let hp = key(5, 1);
        let hnat = Nat {
            addr: [0; 16],
            port: 9090,
            hairpin: true,
        };
        t.insert(&init(hp, Some(hnat)), &mut c, 1).unwrap();
        let hk = FlowKey {
            rport: hp.lport,
            lport: 9090,
            ..hp
        };
        assert_eq!(find(&t, &hk).map(|v| (v.reverse, v.key)), Some((true, hp)));

        // Mutable fields.
        t.touch(idx, 150);
        assert!(t.transition(idx, (1, 0), (3, 2)));
        assert!(
            !t.transition(idx, (1, 0), (4, 0)),
            "a stale expectation loses"
        );
        t.set_gen(idx, 9);
        let v = find(&t, &k).unwrap();
        assert_eq!((v.last_seen, v.state, v.seen, v.gen), (150, 3, 2, 9));

        // Removal unlinks every key of the entry.
        let r = find(&t, &svc).unwrap();
        assert!(t.remove(&r, &mut c, 0));
        assert!(!t.remove(&r, &mut c, 0), "already gone");
        assert!(find(&t, &svc).is_none());
        assert!(find(&t, &rk).is_none());
        assert!(find(&t, &k).is_some());
        let n = t.counts();
        assert_eq!((n.created, n.removed), (3, 1));
    }

    #[test]
    fn duplicates_collisions_and_a_full_table() {
        let t = FlowTable::in_memory(MIN_CAPACITY).unwrap();
        let mut c = FlowCache::default();
        let k = key(3, 1);
        let Inserted::New(first) = t.insert(&init(k, None), &mut c, 0).unwrap() else {
            panic!()
        };
        // The same connection inserted again (another worker won the race): the first entry.
        match t.insert(&init(k, None), &mut c, 1).unwrap() {
            Inserted::Exists(v) => assert_eq!(v.idx, first),
            other => panic!("{other:?}"),
        }
        // A translation whose reply key is a live connection's key is refused.
        let direct = FlowKey {
            remote: backend(7).addr,
            rport: 8080,
            ..key(3, 50)
        };
        t.insert(&init(direct, None), &mut c, 0).unwrap();
        let svc = FlowKey {
            lport: direct.lport,
            ..key(3, 60)
        };
        assert_eq!(
            t.insert(&init(svc, Some(backend(7))), &mut c, 0),
            Err(InsertError::Collision)
        );
        assert!(
            find(&t, &svc).is_none(),
            "nothing of the refused connection stays"
        );
        // Fill the table.
        let mut n = 2;
        let mut full = false;
        for i in 1000..1000 + MIN_CAPACITY + 10 {
            match t.insert(&init(key(9, i), None), &mut c, 0) {
                Ok(Inserted::New(_)) => n += 1,
                Ok(Inserted::Exists(_)) => panic!("distinct keys"),
                Err(InsertError::Full) => {
                    full = true;
                    break;
                }
                Err(e) => panic!("{e:?} with {n} entries"),
            }
        }
        assert!(full);
        assert_eq!(n, MIN_CAPACITY as usize);
        assert_eq!(t.counts().full, 1);
        // Every key still reads back, displaced ones included.
        assert!(find(&t, &k).is_some());
        for i in 1000..1000 + MIN_CAPACITY - 2 {
            assert!(find(&t, &key(9, i)).is_some(), "{i}");
        }
    }

    #[test]
    fn sweeping_removes_what_expired_and_indices_come_back() {
        let t = FlowTable::in_memory(MIN_CAPACITY).unwrap();
        let mut c = FlowCache::default();
        for i in 0..300 {
            let mut f = init(
                key(2, i),
                if i % 3 == 0 {
                    Some(backend(i as u8))
                } else {
                    None
                },
            );
            f.now = i;
            t.insert(&f, &mut c, 0).unwrap();
        }
        // Expire what was last seen before 150, in two sweeps across the whole table.
        let (next, a) = t.sweep(0, MIN_CAPACITY / 2, &mut c, 1, |v| v.last_seen < 150);
        let (_, b) = t.sweep(next, MIN_CAPACITY / 2, &mut c, 1, |v| v.last_seen < 150);
        assert_eq!(a + b, 150);
        for i in 0..300 {
            assert_eq!(find(&t, &key(2, i)).is_some(), i >= 150, "{i}");
        }
        for i in (0..150).step_by(3) {
            let rk = FlowKey {
                remote: backend(i as u8).addr,
                rport: 8080,
                ..key(2, i)
            };
            assert!(find(&t, &rk).is_none());
        }
        // Every bucket's displacement count went back to what its keys need.
        let mut displaced = 0;
        for b in 0..=t.mask {
            displaced += t.bucket(b).meta.load(Ordering::Relaxed) & 0xffff;
            assert_eq!(t.bucket(b).meta.load(Ordering::Relaxed) & LOCK, 0);
        }
        let mut expect = 0;
        for b in 0..=t.mask {
            for s in &t.bucket(b).slots {
                let v = s.load(Ordering::Relaxed);
                if v == 0 {
                    continue;
                }
                let view = t.read((v as u32) - 1).unwrap();
                let k = if v & REV != 0 {
                    view.reverse_key().unwrap()
                } else {
                    view.key
                };
                if k.hash(t.seed) & t.mask != b {
                    expect += 1;
                }
            }
        }
        assert_eq!(displaced, expect);
        let n = t.counts();
        assert_eq!(n.created - n.removed, 150);
        // The freed indices are allocated again: the table takes its capacity once more.
        for i in 0..MIN_CAPACITY - 150 {
            t.insert(&init(key(7, i), None), &mut c, 2).unwrap();
        }
        assert_eq!(
            t.insert(&init(key(8, 1), None), &mut c, 2),
            Err(InsertError::Full)
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "threads over a large table are too slow interpreted")]
    fn concurrent_workers_never_see_torn_entries() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let t = Arc::new(FlowTable::in_memory(4096).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        // A writer keeps inserting and removing translated connections whose NAT address is a
        // function of the key; readers check every view they get is whole.
        let writer = {
            let t = Arc::clone(&t);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut c = FlowCache::default();
                let mut round = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..500 {
                        let k = key(1, i + (round % 7) * 500);
                        let _ = t.insert(&init(k, Some(backend(k.lport as u8))), &mut c, 0);
                    }
                    t.sweep(0, 4096, &mut c, 0, |_| true);
                    round += 1;
                }
            })
        };
        let mut seen = 0u64;
        for _ in 0..200 {
            for i in 0..3500 {
                let k = key(1, i);
                if let Some(v) = find(&t, &k) {
                    assert_eq!(v.key, k);
                    assert_eq!(v.nat, Some(backend(k.lport as u8)));
                    seen += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        assert!(seen > 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "file mappings are not supported by miri")]
    fn a_reopened_region_keeps_its_connections() {
        let dir = std::env::temp_dir().join(format!("lace-flowtest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = flows_path(&dir, "t");
        let _ = std::fs::remove_file(&path);
        {
            let (t, kept) = FlowTable::open_or_create(&path, 2048).unwrap();
            assert!(!kept);
            let mut c = FlowCache::default();
            for i in 0..1500 {
                t.insert(
                    &init(key(4, i), (i % 2 == 0).then(|| backend(1))),
                    &mut c,
                    3,
                )
                .unwrap();
            }
            // A crash in the middle of a removal: one key unlinked, the entry still in use,
            // a bucket lock held.
            let v = find(&t, &key(4, 3)).unwrap();
            t.unlink(&v.key, v.idx, false);
            t.bucket(0).meta.fetch_or(LOCK, Ordering::Relaxed);
        }
        let (t, kept) = FlowTable::open_or_create(&path, 2048).unwrap();
        assert!(kept);
        let mut c = FlowCache::default();
        for i in 0..1500 {
            assert_eq!(find(&t, &key(4, i)).is_some(), i != 3, "{i}");
        }
        let n = t.counts();
        assert_eq!(
            n.created - n.removed,
            1499,
            "the half-unlinked entry was freed"
        );
        // Nothing is stuck: inserting into every bucket works.
        for i in 0..500 {
            t.insert(&init(key(6, i), None), &mut c, 0).unwrap();
        }
        drop(t);
        // Another capacity: a fresh table.
        let (t, kept) = FlowTable::open_or_create(&path, 4096).unwrap();
        assert!(!kept);
        assert!(find(&t, &key(4, 0)).is_none());
        let s = FlowStats::open(&path).unwrap();
        assert_eq!(s.capacity(), 4096);
        drop(t);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
