//! `rte_fib` with the DIR24_8 data plane and 4-byte next hops: DPDK's IPv4 LPM anchor.

use std::collections::HashSet;
use std::ffi::{c_int, CString};
use std::net::Ipv4Addr;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::eal::{Eal, LiveTable};
use super::error::{fix_for, rte_errno, strerror, DpdkError};
use super::sys;
use super::{MAX_NEXT_HOP, NO_ROUTE};

/// Extra tbl8 groups beyond what the routes need, so a few later `add`s of long prefixes fit.
const TBL8_MARGIN: u32 = 64;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// An IPv4 FIB built on DPDK's `rte_fib` (DIR24_8, 4-byte next hops). Addresses and prefixes are
/// host-order `u32` (10.0.0.1 is `0x0a00_0001`), as `rte_fib` expects.
#[derive(Debug)]
pub struct DpdkFib4 {
    fib: NonNull<sys::rte_fib>,
    name: String,
    max_routes: u32,
    num_tbl8: u32,
    bytes: usize,
    _live: LiveTable,
}

// SAFETY: the rte_fib is owned exclusively by this value; DPDK keeps no thread affinity for it.
// Writers (`add`, `delete`) take `&mut self`, so they never run concurrently with anything else.
unsafe impl Send for DpdkFib4 {}
// SAFETY: `&self` methods only call rte_fib_lookup_bulk, which reads the DIR24_8 tables and is
// safe to run from many threads at once while no writer runs (guaranteed by `&mut self` writes).
unsafe impl Sync for DpdkFib4 {}

impl DpdkFib4 {
    /// Builds a FIB holding `routes` (`(prefix, length, next hop)`), inserted one by one with
    /// `rte_fib_add`. Returns the FIB and the time the inserts took (creation excluded), so
    /// inserts per second is `routes.len() / elapsed`.
    ///
    /// Sizing: `max_routes` = `routes.len()` (rte_fib reserves twice that many RIB nodes, which
    /// covers the RIB's branching nodes); `num_tbl8` = [`DpdkFib4::tbl8_groups_needed`] plus a
    /// small margin.
    pub fn new(eal: Eal, routes: &[(u32, u8, u32)]) -> Result<(Self, Duration), DpdkError> {
        let num_tbl8 = Self::tbl8_groups_needed(routes) + TBL8_MARGIN;
        let max_routes = u32::try_from(routes.len().max(1)).unwrap_or(u32::MAX);
        let heap_before = eal.heap_allocated_bytes();
        let mut fib = Self::with_capacity(eal, max_routes, num_tbl8)?;
        let start = Instant::now();
        for &(prefix, len, nh) in routes {
            fib.add(prefix, len, nh)?;
        }
        let elapsed = start.elapsed();
        fib.bytes = eal.heap_allocated_bytes().saturating_sub(heap_before);
        Ok((fib, elapsed))
    }

    /// Creates an empty FIB for up to `max_routes` routes and `num_tbl8` tbl8 groups (one group
    /// of 256 entries per /24 that holds routes longer than /24). DPDK allocates all of it here:
    /// the 64 MiB tbl24, the tbl8 pool and the RIB's node pool.
    pub fn with_capacity(eal: Eal, max_routes: u32, num_tbl8: u32) -> Result<Self, DpdkError> {
        let live = eal.register_table()?;
        let heap_before = eal.heap_allocated_bytes();
        let name = format!("lf4_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
        let cname = CString::new(name.as_str()).expect("generated names have no NUL");
        let max_routes_c = c_int::try_from(max_routes).map_err(|_| DpdkError::InvalidArgument {
            what: format!("max_routes {max_routes}"),
            why: "rte_fib takes max_routes as a C int; use at most i32::MAX",
        })?;
        let mut conf = sys::rte_fib_conf {
            type_: sys::rte_fib_type_RTE_FIB_DIR24_8,
            default_nh: NO_ROUTE,
            max_routes: max_routes_c,
            rib_ext_sz: 0,
            __bindgen_anon_1: sys::rte_fib_conf__bindgen_ty_1 {
                dir24_8: sys::rte_fib_conf__bindgen_ty_1__bindgen_ty_1 {
                    nh_sz: sys::rte_fib_dir24_8_nh_sz_RTE_FIB_DIR24_8_4B,
                    num_tbl8: num_tbl8.max(1),
                },
            },
        };
        // SAFETY: cname is a valid NUL-terminated string and conf a fully initialised
        // rte_fib_conf, both alive for the call (DPDK copies what it keeps); the EAL is running
        // (we hold an Eal).
        let raw = unsafe { sys::rte_fib_create(cname.as_ptr(), sys::SOCKET_ID_ANY, &mut conf) };
        let fib = NonNull::new(raw).ok_or_else(|| {
            let errno = rte_errno();
            DpdkError::Create {
                call: "rte_fib_create",
                name: name.clone(),
                errno,
                reason: strerror(errno),
                fix: fix_for(errno),
            }
        })?;
        let bytes = eal.heap_allocated_bytes().saturating_sub(heap_before);
        Ok(Self {
            fib,
            name,
            max_routes,
            num_tbl8: num_tbl8.max(1),
            bytes,
            _live: live,
        })
    }

    /// tbl8 groups a DIR24_8 table needs for `routes`: one per distinct /24 that contains a
    /// route longer than /24. This is what `dir24_8_modify` reserves (it counts a /24 when its
    /// first longer-than-/24 route arrives), and also what the table uses.
    pub fn tbl8_groups_needed(routes: &[(u32, u8, u32)]) -> u32 {
        let slash24s: HashSet<u32> = routes
            .iter()
            .filter(|r| r.1 > 24)
            .map(|r| r.0 >> 8)
            .collect();
        u32::try_from(slash24s.len()).unwrap_or(u32::MAX)
    }

    /// Adds (or replaces) the route `prefix/len → next_hop`. Host bits of `prefix` are ignored.
    pub fn add(&mut self, prefix: u32, len: u8, next_hop: u32) -> Result<(), DpdkError> {
        if len > 32 || u64::from(next_hop) == NO_ROUTE || next_hop > MAX_NEXT_HOP {
            return Err(DpdkError::InvalidArgument {
                what: format!("route {}/{len} via {next_hop}", Ipv4Addr::from(prefix)),
                why: "length must be 0..=32 and the next hop 1..=2^31-1 (0 means no route)",
            });
        }
        // SAFETY: self.fib is a live rte_fib we own; `&mut self` excludes concurrent lookups.
        let ret = unsafe { sys::rte_fib_add(self.fib.as_ptr(), prefix, len, u64::from(next_hop)) };
        self.check("rte_fib_add", prefix, len, ret)
    }

    /// Deletes the route `prefix/len`.
    pub fn delete(&mut self, prefix: u32, len: u8) -> Result<(), DpdkError> {
        if len > 32 {
            return Err(DpdkError::InvalidArgument {
                what: format!("route {}/{len}", Ipv4Addr::from(prefix)),
                why: "length must be 0..=32",
            });
        }
        // SAFETY: self.fib is a live rte_fib we own; `&mut self` excludes concurrent lookups.
        let ret = unsafe { sys::rte_fib_delete(self.fib.as_ptr(), prefix, len) };
        self.check("rte_fib_delete", prefix, len, ret)
    }

    fn check(&self, call: &'static str, prefix: u32, len: u8, ret: c_int) -> Result<(), DpdkError> {
        if ret == 0 {
            return Ok(());
        }
        let errno = -ret;
        Err(DpdkError::Modify {
            call,
            what: format!("{} {}/{len}", self.name, Ipv4Addr::from(prefix)),
            errno,
            reason: strerror(errno),
            fix: fix_for(errno),
        })
    }

    /// Looks up every address in `ips`, writing the next hop (or [`NO_ROUTE`]) to the same
    /// index of `next_hops`, with one `rte_fib_lookup_bulk` call per 2^31-1 addresses.
    ///
    /// # Panics
    /// If the slices differ in length.
    pub fn lookup_bulk(&self, ips: &[u32], next_hops: &mut [u64]) {
        assert_eq!(ips.len(), next_hops.len(), "one next-hop slot per address");
        const CHUNK: usize = i32::MAX as usize;
        for (ips, nhs) in ips.chunks(CHUNK).zip(next_hops.chunks_mut(CHUNK)) {
            let n = ips.len() as c_int;
            // SAFETY: self.fib is live; ips and nhs hold n elements each. rte_fib_lookup_bulk
            // takes `uint32_t *ips` but only reads it, so the const-to-mut cast is never written
            // through. Concurrent `&self` lookups are read-only (see `impl Sync`).
            unsafe {
                sys::rte_fib_lookup_bulk(
                    self.fib.as_ptr(),
                    ips.as_ptr().cast_mut(),
                    nhs.as_mut_ptr(),
                    n,
                );
            }
        }
    }

    /// DPDK heap bytes this FIB occupies: the growth of `heap_allocsz_bytes` (all sockets)
    /// across `rte_fib_create` and, for [`DpdkFib4::new`], the route inserts. It covers the
    /// tbl24, the tbl8 pool, the RIB node pool and DPDK's bookkeeping. Exact only when nothing
    /// else allocates from DPDK's heap meanwhile (true in the single-threaded benches).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The `num_tbl8` the FIB was created with.
    pub fn num_tbl8(&self) -> u32 {
        self.num_tbl8
    }

    /// The `max_routes` the FIB was created with.
    pub fn max_routes(&self) -> u32 {
        self.max_routes
    }
}

impl Drop for DpdkFib4 {
    fn drop(&mut self) {
        // SAFETY: self.fib came from rte_fib_create and is freed exactly once, here; no lookup
        // can be running because drop has exclusive access. `_live` drops after this, so the EAL
        // cannot be cleaned up before the free.
        unsafe { sys::rte_fib_free(self.fib.as_ptr()) };
    }
}
