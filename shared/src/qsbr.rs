//! Quiescent-state-based reclamation across processes.
//!
//! The QSBR region is a small file beside the tables, mapped read-write by the writer and by
//! every reader. It holds one cache-line slot per reader thread:
//!
//! ```text
//!  0      4096            4096+64·i
//!  │header│ slot 0 │ slot 1 │ … │ slot i: epoch (0 = offline) │ pid │ quiescent count │
//! ```
//!
//! - A reader claims a slot by taking an open-file-description write lock on the slot's bytes.
//!   The kernel drops the lock when the reader's process dies, however it dies, so the writer can
//!   tell a slot whose owner is gone ([`Qsbr::safe_epoch`]) and never waits for it.
//! - At each quiescent point (between bursts) a reader stores the tables' current epoch in its
//!   slot: it holds no reference into the tables from before that point.
//! - The writer retires replaced blocks tagged with the epoch of the publication that replaced
//!   them, and frees them once every online, live reader reports at least that epoch.
//!
//! Ordering (the classic store-buffer argument): a reader going online stores its slot and then
//! (SeqCst) loads the root; the writer stores the root, bumps the epoch and then (SeqCst) loads
//! the slots. Either the writer sees the reader online, or the reader sees the new root.

use std::path::Path;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::region::{Region, RegionKind, HEADER_SIZE};

/// Bytes per reader slot (one cache line, so readers never share a line).
pub const SLOT_SIZE: u64 = 64;
const EPOCH: u64 = 0;
const PID: u64 = 8;
const COUNT: u64 = 16;

/// A mapped QSBR region.
#[derive(Debug)]
pub struct Qsbr {
    region: Region,
    slots: u32,
    /// Slots claimed by this process (OFD locks do not conflict within one open file).
    claimed: Mutex<Vec<bool>>,
}

/// What the writer learned from scanning the slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotScan {
    /// Oldest epoch reported by an online, live reader (None: no reader online).
    pub safe_epoch: Option<u64>,
    /// Online readers.
    pub online: u32,
    /// Slots found held by a dead reader and reset.
    pub reaped: u32,
}

impl Qsbr {
    /// Creates the region with `slots` reader slots (writer side).
    pub fn create(path: &Path, slots: u32) -> Result<Qsbr> {
        let size = HEADER_SIZE + SLOT_SIZE * slots as u64;
        let region = Region::create(path, RegionKind::Qsbr, size, [slots as u64, 0, 0, 0])?;
        Ok(Self::wrap(region))
    }

    /// Maps an existing region read-write (readers, and a restarted writer).
    pub fn open(path: &Path) -> Result<Qsbr> {
        let region = Region::open_rw(path, RegionKind::Qsbr)?;
        let slots = region.header().params[0];
        if HEADER_SIZE + SLOT_SIZE * slots > region.len() as u64 {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                what: format!("{slots} reader slots do not fit in {} bytes", region.len()),
            });
        }
        Ok(Self::wrap(region))
    }

    fn wrap(region: Region) -> Qsbr {
        let slots = region.header().params[0] as u32;
        Qsbr {
            region,
            slots,
            claimed: Mutex::new(vec![false; slots as usize]),
        }
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    #[inline(always)]
    fn word(&self, slot: u32, field: u64) -> &AtomicU64 {
        let off = HEADER_SIZE + SLOT_SIZE * slot as u64 + field;
        // The slot index is always < self.slots, checked against the mapping in `open`/`create`.
        self.region
            .mem()
            .atomic_u64(off)
            .expect("QSBR slot inside the mapping")
    }

    /// Claims a free slot for a reader thread; the slot starts offline.
    pub fn claim(&self) -> Result<u32> {
        let mut claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        for i in 0..self.slots {
            if claimed[i as usize] {
                continue;
            }
            let start = HEADER_SIZE + SLOT_SIZE * i as u64;
            if self.region.try_lock(start, SLOT_SIZE)? {
                claimed[i as usize] = true;
                self.word(i, EPOCH).store(0, Ordering::SeqCst);
                self.word(i, PID)
                    .store(std::process::id() as u64, Ordering::Relaxed);
                return Ok(i);
            }
        }
        Err(Error::NoReaderSlot {
            path: self.region.path().to_path_buf(),
            slots: self.slots,
        })
    }

    /// Gives a slot back (goes offline first).
    pub fn release(&self, slot: u32) {
        self.word(slot, EPOCH).store(0, Ordering::SeqCst);
        self.word(slot, PID).store(0, Ordering::Relaxed);
        self.region
            .unlock(HEADER_SIZE + SLOT_SIZE * slot as u64, SLOT_SIZE);
        let mut claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        claimed[slot as usize] = false;
    }

    /// Reader: reports a quiescent point at `epoch`. One store, no fence, no system call.
    #[inline(always)]
    pub fn report(&self, slot: u32, epoch: u64) {
        self.word(slot, EPOCH).store(epoch, Ordering::Release);
        let c = self.word(slot, COUNT);
        c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// Reader: comes online at `epoch`. The caller loads the root only after this returns.
    pub fn online(&self, slot: u32, epoch: u64) {
        self.word(slot, EPOCH).store(epoch.max(1), Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Reader: goes offline (holds no reference into the tables until `online` again).
    pub fn offline(&self, slot: u32) {
        self.word(slot, EPOCH).store(0, Ordering::Release);
    }

    /// Quiescent points a slot has reported (for tests and stats).
    pub fn quiescent_count(&self, slot: u32) -> u64 {
        self.word(slot, COUNT).load(Ordering::Relaxed)
    }

    /// Writer: scans the slots. Readers reporting an epoch below `needed` are checked for
    /// liveness (one `fcntl` each); a slot whose owner died is reset and ignored.
    pub fn scan(&self, needed: u64) -> Result<SlotScan> {
        fence(Ordering::SeqCst);
        let mut scan = SlotScan::default();
        for i in 0..self.slots {
            let w = self.word(i, EPOCH);
            let e = w.load(Ordering::SeqCst);
            if e == 0 {
                continue;
            }
            if e < needed {
                let start = HEADER_SIZE + SLOT_SIZE * i as u64;
                if self.region.lock_holder(start, SLOT_SIZE)?.is_none() {
                    // The owner is gone: nobody holds the lock. Reset unless it came back.
                    if w.compare_exchange(e, 0, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                    {
                        scan.reaped += 1;
                    }
                    continue;
                }
            }
            scan.online += 1;
            scan.safe_epoch = Some(scan.safe_epoch.map_or(e, |s: u64| s.min(e)));
        }
        Ok(scan)
    }
}
