//! Lock-free rings of mbufs (`rte_ring`), the queues behind ring-backed ports
//! ([`Port::from_rings`](super::Port::from_rings)).

use std::ffi::{c_uint, c_void};
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use lace_dpdk_sys as sys;

use super::eal::{Eal, Live};
use super::error::{c_string, fix_for, rte_errno, strerror, Error, Result};
use super::mbuf::BURST_SIZE;

/// A ring that carries mbufs between ports: what one ring-backed port transmits into it, another
/// (or the same) receives from it. Multi-producer/multi-consumer, holding exactly `capacity`
/// mbufs. Cloning shares the ring; ports keep a clone. When the last clone goes, mbufs still in
/// the ring are freed with it.
///
/// Only mbufs ever enter a ring created here (the API offers no other enqueue), which is what
/// makes freeing them on drop sound.
#[derive(Clone)]
pub struct Ring {
    inner: Arc<RingInner>,
}

struct RingInner {
    ring: NonNull<sys::rte_ring>,
    name: String,
    capacity: u32,
    _live: Live,
}

// SAFETY: rte_ring with default flags is multi-producer/multi-consumer: enqueue, dequeue and
// count are safe from any thread. The other fields are immutable.
unsafe impl Send for RingInner {}
// SAFETY: see Send.
unsafe impl Sync for RingInner {}

impl Ring {
    /// The longest ring name DPDK accepts, in bytes.
    pub const MAX_NAME_LEN: usize = sys::RTE_RING_NAMESIZE as usize - 1;

    /// Creates a ring holding up to `capacity` mbufs (any value from 1 to 2^28) on NUMA
    /// `socket` (`None`: any). `name` must be unique and at most [`Ring::MAX_NAME_LEN`] bytes.
    pub fn new(eal: &Eal, name: &str, capacity: u32, socket: Option<u32>) -> Result<Ring> {
        let cname = c_string("ring name", name, Self::MAX_NAME_LEN)?;
        let live = Live::new(eal)?;
        let socket = socket.map_or(sys::SOCKET_ID_ANY, |s| s as i32);
        // SAFETY: cname is a valid NUL-terminated name DPDK copies; the EAL is running;
        // RING_F_EXACT_SZ makes any count up to RTE_RING_SZ_MASK valid (DPDK checks it).
        let ring = unsafe {
            sys::rte_ring_create(
                cname.as_ptr(),
                capacity as c_uint,
                socket,
                sys::RING_F_EXACT_SZ as c_uint,
            )
        };
        let Some(ring) = NonNull::new(ring) else {
            let errno = rte_errno();
            return Err(Error::RingCreate {
                name: name.to_owned(),
                errno,
                reason: strerror(errno),
                fix: match errno {
                    libc::EINVAL => "the capacity must be between 1 and 268435455",
                    e => fix_for(e),
                },
            });
        };
        Ok(Ring {
            inner: Arc::new(RingInner {
                ring,
                name: name.to_owned(),
                capacity,
                _live: live,
            }),
        })
    }

    /// The ring's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The most mbufs the ring holds.
    pub fn capacity(&self) -> u32 {
        self.inner.capacity
    }

    /// Mbufs in the ring now (a snapshot).
    pub fn len(&self) -> u32 {
        // SAFETY: the ring is alive; counting reads its indexes.
        unsafe { sys::lace_rte_ring_count(self.as_ptr()) }
    }

    /// Whether the ring is empty now (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::rte_ring {
        self.inner.ring.as_ptr()
    }
}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("name", &self.inner.name)
            .field("capacity", &self.inner.capacity)
            .field("len", &self.len())
            .finish()
    }
}

impl Drop for RingInner {
    fn drop(&mut self) {
        let mut batch = [std::ptr::null_mut::<c_void>(); BURST_SIZE];
        loop {
            // SAFETY: the ring is alive and this is its last handle (ports hold clones, so none
            // uses it); `batch` has room for BURST_SIZE pointers.
            let n = unsafe {
                sys::lace_rte_ring_dequeue_burst(
                    self.ring.as_ptr(),
                    batch.as_mut_ptr(),
                    BURST_SIZE as c_uint,
                )
            };
            if n == 0 {
                break;
            }
            // SAFETY: everything enqueued into this ring is an owned mbuf (see the type docs);
            // dequeued, it is ours to free, once.
            unsafe { sys::rte_pktmbuf_free_bulk(batch.as_mut_ptr().cast(), n) };
        }
        // SAFETY: the ring is empty and unused (last handle); it is freed exactly once.
        unsafe { sys::rte_ring_free(self.ring.as_ptr()) };
    }
}
