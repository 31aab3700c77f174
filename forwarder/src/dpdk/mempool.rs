//! Packet-buffer pools (`rte_pktmbuf_pool_create`).

use std::ffi::c_uint;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use lace_dpdk_sys as sys;

use super::eal::{Eal, Live};
use super::error::{c_string, fix_for, rte_errno, strerror, Error, Result};
use super::mbuf::{Burst, Mbuf};

/// A pool of packet buffers. Cloning is cheap and shares the pool; ports keep a clone for their
/// RX queues. The pool is freed when the last clone is dropped, but only if every mbuf has come
/// back: while any is still out, the pool stays allocated (freeing it would leave that mbuf
/// pointing into freed memory) and counts as alive for [`Eal::cleanup`], which frees it once
/// its mbufs are back.
///
/// The pool uses DPDK's default multi-producer/multi-consumer ring, so mbufs may be allocated
/// and freed on any thread; EAL lcores also get a per-lcore cache of `cache` mbufs.
#[derive(Clone)]
pub struct Mempool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    pool: NonNull<sys::rte_mempool>,
    name: String,
    size: u32,
    /// Moved to [`ORPHANS`] by `Drop` when mbufs are still out.
    live: Option<Live>,
}

/// A pool whose last handle was dropped while some of its mbufs were still out. It is freed by
/// [`free_orphans`] once they are all back; until then it counts as alive.
struct Orphan {
    pool: NonNull<sys::rte_mempool>,
    _live: Live,
}

// SAFETY: the pointer is only used under the ORPHANS lock, for thread-safe DPDK calls (count,
// free); no handle to the pool exists any more.
unsafe impl Send for Orphan {}

static ORPHANS: Mutex<Vec<Orphan>> = Mutex::new(Vec::new());

fn orphans() -> MutexGuard<'static, Vec<Orphan>> {
    // Each update is one push or retain; a poisoned list is still consistent.
    ORPHANS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Frees the orphaned pools whose mbufs have all come back. Called by [`Mempool::new`] and
/// [`Eal::cleanup`].
pub(crate) fn free_orphans() {
    orphans().retain(|o| {
        // SAFETY: an orphan's pool is alive until freed below, under this lock.
        if unsafe { sys::rte_mempool_in_use_count(o.pool.as_ptr()) } != 0 {
            return true;
        }
        // SAFETY: no handle to the pool exists (it was orphaned by the last one's drop), so
        // nobody can allocate from it, and every mbuf is back; removed from the list here, so
        // freed once.
        unsafe { sys::rte_mempool_free(o.pool.as_ptr()) };
        false
    });
}

// SAFETY: the rte_mempool is shared by design: its default ops (ring_mp_mc) make get and put
// safe from any thread, and the per-lcore caches are indexed by the calling thread's lcore id.
// The fields besides the pointer are immutable after construction.
unsafe impl Send for PoolInner {}
// SAFETY: see Send; every `&self` method is a thread-safe DPDK call or reads immutable fields.
unsafe impl Sync for PoolInner {}

impl Mempool {
    /// The `data_room` DPDK's examples use: 2048 bytes of packet data plus
    /// [`Mempool::HEADROOM`] bytes of headroom.
    pub const DEFAULT_DATA_ROOM: u16 = sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16;
    /// Headroom reserved in front of received and freshly allocated packets (for prepending
    /// encapsulation headers).
    pub const HEADROOM: u16 = sys::RTE_PKTMBUF_HEADROOM as u16;
    /// The longest pool name DPDK accepts, in bytes.
    pub const MAX_NAME_LEN: usize = sys::RTE_MEMPOOL_NAMESIZE as usize - 1;

    /// Creates a pool of `n_mbufs` buffers, each with `data_room` bytes for headroom plus packet
    /// data ([`Mempool::DEFAULT_DATA_ROOM`] suits a 1500-byte MTU), with a per-lcore cache of
    /// `cache` buffers (0 for none; at most 512 and at most `n_mbufs / 1.5`), on NUMA `socket`
    /// (`None`: any). `name` must be unique in the process and at most
    /// [`Mempool::MAX_NAME_LEN`] bytes.
    pub fn new(
        eal: &Eal,
        name: &str,
        n_mbufs: u32,
        cache: u32,
        data_room: u16,
        socket: Option<u32>,
    ) -> Result<Mempool> {
        let cname = c_string("mempool name", name, Self::MAX_NAME_LEN)?;
        // An orphan may still hold this name.
        free_orphans();
        if data_room < Self::HEADROOM {
            return Err(Error::InvalidArgument {
                what: "mempool data_room",
                value: data_room.to_string(),
                why: format!(
                    "it must hold at least the {} bytes of headroom; use \
                     Mempool::DEFAULT_DATA_ROOM",
                    Self::HEADROOM
                ),
            });
        }
        let live = Live::new(eal)?;
        let socket = socket.map_or(sys::SOCKET_ID_ANY, |s| s as i32);
        // SAFETY: cname is a valid NUL-terminated name that DPDK copies; the EAL is running
        // (we hold an Eal); the remaining arguments are plain values DPDK validates itself.
        let pool = unsafe {
            sys::rte_pktmbuf_pool_create(
                cname.as_ptr(),
                n_mbufs as c_uint,
                cache as c_uint,
                0,
                data_room,
                socket,
            )
        };
        let Some(pool) = NonNull::new(pool) else {
            let errno = rte_errno();
            return Err(Error::MempoolCreate {
                name: name.to_owned(),
                errno,
                reason: strerror(errno),
                fix: match errno {
                    libc::EINVAL => {
                        "check the sizes: cache must be at most 512 and at most n_mbufs / 1.5"
                    }
                    e => fix_for(e),
                },
            });
        };
        Ok(Mempool {
            inner: Arc::new(PoolInner {
                pool,
                name: name.to_owned(),
                size: n_mbufs,
                live: Some(live),
            }),
        })
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The number of mbufs the pool was created with.
    pub fn capacity(&self) -> u32 {
        self.inner.size
    }

    /// Mbufs currently in the pool (including per-lcore caches). A snapshot: other threads may
    /// allocate or free concurrently.
    pub fn available(&self) -> u32 {
        // SAFETY: the pool is alive (we hold a reference); the count reads ring indexes and
        // cache lengths without modifying them.
        unsafe { sys::rte_mempool_avail_count(self.as_ptr()) }
    }

    /// Mbufs currently allocated from the pool (held by the application, a port's RX ring, or
    /// in flight). A snapshot, like [`Mempool::available`].
    pub fn in_use(&self) -> u32 {
        // SAFETY: as in `available`.
        unsafe { sys::rte_mempool_in_use_count(self.as_ptr()) }
    }

    /// One mbuf, reset (empty, [`Mempool::HEADROOM`] bytes of headroom), or `None` when the
    /// pool is exhausted.
    #[inline]
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool is alive and was created by rte_pktmbuf_pool_create, so it holds
        // pktmbufs; allocation is thread-safe (see the Send impl).
        let m = unsafe { sys::lace_rte_pktmbuf_alloc(self.as_ptr()) };
        // SAFETY: a non-null result is a freshly allocated mbuf nobody else references.
        NonNull::new(m).map(|m| unsafe { Mbuf::from_raw(m) })
    }

    /// Appends `n` fresh mbufs to `burst`, all or nothing: returns false (and leaves `burst`
    /// unchanged) when the pool has fewer than `n` or `burst` has room for fewer than `n`.
    #[inline]
    pub fn alloc_bulk<const N: usize>(&self, burst: &mut Burst<N>, n: usize) -> bool {
        let (spare, room) = burst.spare_raw();
        if n > room {
            return false;
        }
        // SAFETY: `spare` points to `room >= n` writable slots of `burst`; the pool is alive and
        // holds pktmbufs. On success DPDK wrote n valid, exclusively owned mbuf pointers there.
        let ret = unsafe { sys::lace_rte_pktmbuf_alloc_bulk(self.as_ptr(), spare, n as c_uint) };
        if ret != 0 {
            return false;
        }
        // SAFETY: the n slots after the current length were just initialised with owned mbufs.
        unsafe { burst.assume_pushed(n) };
        true
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::rte_mempool {
        self.inner.pool.as_ptr()
    }
}

impl fmt::Debug for Mempool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mempool")
            .field("name", &self.inner.name)
            .field("capacity", &self.inner.size)
            .field("available", &self.available())
            .finish()
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // SAFETY: the pool is alive until the free below.
        let in_use = unsafe { sys::rte_mempool_in_use_count(self.pool.as_ptr()) };
        if in_use != 0 {
            // An mbuf is still out (owned by the application or a driver): freeing the pool
            // would leave it dangling. Free it later, when they are back.
            if let Some(live) = self.live.take() {
                orphans().push(Orphan {
                    pool: self.pool,
                    _live: live,
                });
            }
            return;
        }
        // SAFETY: this is the last handle (Arc), so nobody can allocate from the pool any more,
        // every mbuf is back (in_use == 0, and none can be taken without a handle), and ports
        // keep a handle while their RX queues may hold mbufs; the pool is freed exactly once.
        unsafe { sys::rte_mempool_free(self.pool.as_ptr()) };
    }
}
