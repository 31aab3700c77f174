//! `rte_hash` with fixed-size keys and CRC32-C hashing: DPDK's exact-match anchor (FDB, neighbor
//! tables).

use std::ffi::{c_void, CString};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};

use super::eal::{Eal, LiveTable};
use super::error::{fix_for, rte_errno, strerror, DpdkError};
use super::sys;

/// Most keys `rte_hash_lookup_bulk_data` takes per call (`RTE_HASH_LOOKUP_BULK_MAX`).
pub const LOOKUP_BULK_MAX: usize = sys::RTE_HASH_LOOKUP_BULK_MAX as usize;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A DPDK `rte_hash` mapping `K`-byte keys to 64-bit values (stored in the table's pointer-sized
/// data slot). Built with DPDK's CRC32-C hash (`rte_hash_crc`, SSE4.2 where available) and no
/// extra flags: single writer, lock-free readers only while nothing writes.
#[derive(Debug)]
pub struct DpdkHash<const K: usize> {
    hash: NonNull<sys::rte_hash>,
    name: String,
    entries: u32,
    bytes: usize,
    _live: LiveTable,
}

// SAFETY: the rte_hash is owned exclusively by this value; DPDK keeps no thread affinity for it
// (no per-lcore cache: the multi-writer flag is off). Writers take `&mut self`.
unsafe impl<const K: usize> Send for DpdkHash<K> {}
// SAFETY: `&self` methods only call rte_hash_lookup_bulk_data / rte_hash_count, which read the
// table and are safe from many threads at once while no writer runs (writers take `&mut self`).
unsafe impl<const K: usize> Sync for DpdkHash<K> {}

impl<const K: usize> DpdkHash<K> {
    /// What `lookup_bulk_data` writes for a key that is not in the table. `add` refuses it.
    pub const MISS: u64 = u64::MAX;

    const KEY_LEN: u32 = {
        assert!(K > 0 && K <= 1024, "rte_hash keys are 1..=1024 bytes here");
        K as u32
    };

    /// Creates an empty table sized for `entries` keys. rte_hash rounds the bucket count up to
    /// a power of two (8 slots per bucket) and allocates everything here; whether all `entries`
    /// keys fit depends on cuckoo displacement succeeding at that load.
    pub fn new(eal: Eal, entries: u32) -> Result<Self, DpdkError> {
        let live = eal.register_table()?;
        let heap_before = eal.heap_allocated_bytes();
        let name = format!("lh{K}_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
        let cname = CString::new(name.as_str()).expect("generated names have no NUL");
        let params = sys::rte_hash_parameters {
            name: cname.as_ptr(),
            // rte_hash refuses fewer entries than one bucket (8).
            entries: entries.max(8),
            reserved: 0,
            key_len: Self::KEY_LEN,
            hash_func: Some(sys::lace_rte_hash_crc),
            hash_func_init_val: 0,
            socket_id: sys::SOCKET_ID_ANY,
            extra_flag: 0,
        };
        // SAFETY: params is fully initialised, its name points to a NUL-terminated string that
        // outlives the call (DPDK copies it), and hash_func has rte_hash_function's signature;
        // the EAL is running.
        let raw = unsafe { sys::rte_hash_create(&params) };
        let hash = NonNull::new(raw).ok_or_else(|| {
            let errno = rte_errno();
            DpdkError::Create {
                call: "rte_hash_create",
                name: name.clone(),
                errno,
                reason: strerror(errno),
                fix: fix_for(errno),
            }
        })?;
        let bytes = eal.heap_allocated_bytes().saturating_sub(heap_before);
        Ok(Self {
            hash,
            name,
            entries: entries.max(8),
            bytes,
            _live: live,
        })
    }

    /// Creates a table sized for `keys.len()` entries and adds `keys[i] → data(i)`.
    pub fn with_keys(
        eal: Eal,
        keys: &[[u8; K]],
        mut data: impl FnMut(usize) -> u64,
    ) -> Result<Self, DpdkError> {
        let entries = u32::try_from(keys.len()).map_err(|_| DpdkError::InvalidArgument {
            what: format!("{} keys", keys.len()),
            why: "rte_hash holds at most u32::MAX entries",
        })?;
        let mut table = Self::new(eal, entries)?;
        for (i, key) in keys.iter().enumerate() {
            table.add(key, data(i))?;
        }
        Ok(table)
    }

    /// Adds or replaces `key → data`.
    pub fn add(&mut self, key: &[u8; K], data: u64) -> Result<(), DpdkError> {
        let slot = usize::try_from(data)
            .ok()
            .filter(|_| data != Self::MISS)
            .ok_or_else(|| DpdkError::InvalidArgument {
                what: format!("{}: value {data:#x}", self.name),
                why: "values must fit a pointer and differ from DpdkHash::MISS",
            })?;
        // SAFETY: self.hash is live and ours; key points to K = key_len readable bytes; the data
        // slot stores an integer, never dereferenced by DPDK. `&mut self` excludes concurrent
        // lookups, as the table has no reader/writer concurrency flag.
        let ret = unsafe {
            sys::rte_hash_add_key_data(
                self.hash.as_ptr(),
                key.as_ptr().cast(),
                ptr::without_provenance_mut(slot),
            )
        };
        if ret == 0 {
            return Ok(());
        }
        let errno = -ret;
        Err(DpdkError::Modify {
            call: "rte_hash_add_key_data",
            what: format!("{} key {key:02x?}", self.name),
            errno,
            reason: strerror(errno),
            fix: fix_for(errno),
        })
    }

    /// Looks up every key, writing its value (or [`Self::MISS`]) to the same index of `data`,
    /// [`LOOKUP_BULK_MAX`] keys per `rte_hash_lookup_bulk_data` call. Returns the number of hits.
    ///
    /// # Panics
    /// If the slices differ in length.
    pub fn lookup_bulk_data(&self, keys: &[[u8; K]], data: &mut [u64]) -> usize {
        assert_eq!(keys.len(), data.len(), "one value slot per key");
        let mut key_ptrs = [ptr::null::<c_void>(); LOOKUP_BULK_MAX];
        let mut values = [ptr::null_mut::<c_void>(); LOOKUP_BULK_MAX];
        let mut hits = 0;
        for (keys, out) in keys
            .chunks(LOOKUP_BULK_MAX)
            .zip(data.chunks_mut(LOOKUP_BULK_MAX))
        {
            for (p, k) in key_ptrs.iter_mut().zip(keys) {
                *p = k.as_ptr().cast();
            }
            let mut hit_mask = 0u64;
            // SAFETY: self.hash is live; key_ptrs[..n] point to keys of key_len bytes borrowed
            // for the call; hit_mask and values have room for n <= RTE_HASH_LOOKUP_BULK_MAX
            // results; n > 0 because chunks() yields no empty chunk. Lookups only read the table.
            unsafe {
                sys::rte_hash_lookup_bulk_data(
                    self.hash.as_ptr(),
                    key_ptrs.as_mut_ptr(),
                    keys.len() as u32,
                    &mut hit_mask,
                    values.as_mut_ptr(),
                );
            }
            for (i, (o, v)) in out.iter_mut().zip(&values).enumerate() {
                *o = if hit_mask & (1 << i) != 0 {
                    v.addr() as u64
                } else {
                    Self::MISS
                };
            }
            hits += hit_mask.count_ones() as usize;
        }
        hits
    }

    /// Number of keys in the table (`rte_hash_count`).
    pub fn len(&self) -> usize {
        // SAFETY: self.hash is live; rte_hash_count only reads the table.
        let n = unsafe { sys::rte_hash_count(self.hash.as_ptr()) };
        usize::try_from(n).unwrap_or(0)
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `entries` the table was created with.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// DPDK heap bytes the table occupies: the growth of `heap_allocsz_bytes` (all sockets)
    /// across `rte_hash_create`, which allocates buckets, key store and free-slot ring up front.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl<const K: usize> Drop for DpdkHash<K> {
    fn drop(&mut self) {
        // SAFETY: self.hash came from rte_hash_create and is freed exactly once, here, with
        // exclusive access; `_live` drops afterwards.
        unsafe { sys::rte_hash_free(self.hash.as_ptr()) };
    }
}
