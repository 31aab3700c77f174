//! `rte_fib6` with the TRIE data plane and 4-byte next hops: DPDK's IPv6 LPM anchor.

use std::collections::HashSet;
use std::ffi::{c_int, CString};
use std::net::Ipv6Addr;
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

/// An IPv6 FIB built on DPDK's `rte_fib6` (TRIE, 4-byte next hops). Addresses are network-order
/// byte arrays, as `rte_fib6` expects.
#[derive(Debug)]
pub struct DpdkFib6 {
    fib: NonNull<sys::rte_fib6>,
    name: String,
    max_routes: u32,
    num_tbl8: u32,
    bytes: usize,
    _live: LiveTable,
}

// SAFETY: the rte_fib6 is owned exclusively by this value; DPDK keeps no thread affinity for it.
// Writers (`add`, `delete`) take `&mut self`, so they never run concurrently with anything else.
unsafe impl Send for DpdkFib6 {}
// SAFETY: `&self` methods only call rte_fib6_lookup_bulk, which reads the trie and is safe to
// run from many threads at once while no writer runs (guaranteed by `&mut self` writes).
unsafe impl Sync for DpdkFib6 {}

impl DpdkFib6 {
    /// Builds a FIB holding `routes` (`(prefix, length, next hop)`), inserted one by one with
    /// `rte_fib6_add`. Returns the FIB and the time the inserts took (creation excluded).
    ///
    /// Sizing: `max_routes` = `routes.len()` (rte_fib6 reserves twice that many RIB nodes);
    /// `num_tbl8` = [`DpdkFib6::tbl8_groups_needed`] plus a small margin.
    pub fn new(eal: Eal, routes: &[([u8; 16], u8, u32)]) -> Result<(Self, Duration), DpdkError> {
        let num_tbl8 = Self::tbl8_groups_needed(routes) + TBL8_MARGIN;
        let max_routes = u32::try_from(routes.len().max(1)).unwrap_or(u32::MAX);
        let heap_before = eal.heap_allocated_bytes();
        let mut fib = Self::with_capacity(eal, max_routes, num_tbl8)?;
        let start = Instant::now();
        for (prefix, len, nh) in routes {
            fib.add(prefix, *len, *nh)?;
        }
        let elapsed = start.elapsed();
        fib.bytes = eal.heap_allocated_bytes().saturating_sub(heap_before);
        Ok((fib, elapsed))
    }

    /// Creates an empty FIB for up to `max_routes` routes and `num_tbl8` tbl8 groups (256
    /// entries each; every 8 bits past /24 a route extends through one). DPDK allocates all of
    /// it here: the 64 MiB tbl24, the tbl8 pool and the RIB's node pool.
    pub fn with_capacity(eal: Eal, max_routes: u32, num_tbl8: u32) -> Result<Self, DpdkError> {
        let live = eal.register_table()?;
        let heap_before = eal.heap_allocated_bytes();
        let name = format!("lf6_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
        let cname = CString::new(name.as_str()).expect("generated names have no NUL");
        let max_routes_c = c_int::try_from(max_routes).map_err(|_| DpdkError::InvalidArgument {
            what: format!("max_routes {max_routes}"),
            why: "rte_fib6 takes max_routes as a C int; use at most i32::MAX",
        })?;
        let mut conf = sys::rte_fib6_conf {
            type_: sys::rte_fib6_type_RTE_FIB6_TRIE,
            default_nh: NO_ROUTE,
            max_routes: max_routes_c,
            rib_ext_sz: 0,
            __bindgen_anon_1: sys::rte_fib6_conf__bindgen_ty_1 {
                trie: sys::rte_fib6_conf__bindgen_ty_1__bindgen_ty_1 {
                    nh_sz: sys::rte_fib_trie_nh_sz_RTE_FIB6_TRIE_4B,
                    num_tbl8: num_tbl8.max(1),
                },
            },
        };
        // SAFETY: cname is a valid NUL-terminated string and conf a fully initialised
        // rte_fib6_conf, both alive for the call (DPDK copies what it keeps); the EAL is running.
        let raw = unsafe { sys::rte_fib6_create(cname.as_ptr(), sys::SOCKET_ID_ANY, &mut conf) };
        let fib = NonNull::new(raw).ok_or_else(|| {
            let errno = rte_errno();
            DpdkError::Create {
                call: "rte_fib6_create",
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

    /// tbl8 groups the TRIE must have for `routes` to be added: trie.c reserves, per route
    /// longer than /24, one group per 8 bits between the covering route's depth (at least 24)
    /// and the route's depth rounded up to 8, and none when a route already lies inside the new
    /// prefix rounded down to 8 bits. Summing `(ceil8(len) - 24) / 8` over all routes is
    /// therefore an upper bound for any insertion order, and is exact when no route longer than
    /// /24 covers or lies near another — the case for randomly placed BGP-like tables.
    pub fn tbl8_groups_needed(routes: &[([u8; 16], u8, u32)]) -> u32 {
        let total: u64 = routes
            .iter()
            .filter(|r| r.1 > 24)
            .map(|r| (u64::from(r.1).div_ceil(8) * 8 - 24) / 8)
            .sum();
        u32::try_from(total).unwrap_or(u32::MAX)
    }

    /// tbl8 groups the routes actually occupy once loaded: distinct 24-, 32-, 40-, ... bit
    /// prefixes among routes extending past them. Never more than [`Self::tbl8_groups_needed`];
    /// the difference is what trie.c's conservative reservation costs.
    pub fn tbl8_groups_used(routes: &[([u8; 16], u8, u32)]) -> u32 {
        let mut groups: HashSet<(u128, u8)> = HashSet::new();
        for (prefix, len, _) in routes {
            let addr = u128::from_be_bytes(*prefix);
            let mut level = 24u8;
            while level < *len {
                groups.insert((addr >> (128 - u32::from(level)), level));
                level += 8;
            }
        }
        u32::try_from(groups.len()).unwrap_or(u32::MAX)
    }

    /// Adds (or replaces) the route `prefix/len → next_hop`. Host bits of `prefix` are ignored.
    pub fn add(&mut self, prefix: &[u8; 16], len: u8, next_hop: u32) -> Result<(), DpdkError> {
        if len > 128 || u64::from(next_hop) == NO_ROUTE || next_hop > MAX_NEXT_HOP {
            return Err(DpdkError::InvalidArgument {
                what: format!("route {}/{len} via {next_hop}", Ipv6Addr::from(*prefix)),
                why: "length must be 0..=128 and the next hop 1..=2^31-1 (0 means no route)",
            });
        }
        // SAFETY: self.fib is a live rte_fib6 we own; prefix points to 16 readable bytes (the
        // size rte_fib6_add reads); `&mut self` excludes concurrent lookups.
        let ret = unsafe {
            sys::rte_fib6_add(self.fib.as_ptr(), prefix.as_ptr(), len, u64::from(next_hop))
        };
        self.check("rte_fib6_add", prefix, len, ret)
    }

    /// Deletes the route `prefix/len`.
    pub fn delete(&mut self, prefix: &[u8; 16], len: u8) -> Result<(), DpdkError> {
        if len > 128 {
            return Err(DpdkError::InvalidArgument {
                what: format!("route {}/{len}", Ipv6Addr::from(*prefix)),
                why: "length must be 0..=128",
            });
        }
        // SAFETY: self.fib is a live rte_fib6 we own; prefix points to 16 readable bytes;
        // `&mut self` excludes concurrent lookups.
        let ret = unsafe { sys::rte_fib6_delete(self.fib.as_ptr(), prefix.as_ptr(), len) };
        self.check("rte_fib6_delete", prefix, len, ret)
    }

    fn check(
        &self,
        call: &'static str,
        prefix: &[u8; 16],
        len: u8,
        ret: c_int,
    ) -> Result<(), DpdkError> {
        if ret == 0 {
            return Ok(());
        }
        let errno = -ret;
        Err(DpdkError::Modify {
            call,
            what: format!("{} {}/{len}", self.name, Ipv6Addr::from(*prefix)),
            errno,
            reason: strerror(errno),
            fix: fix_for(errno),
        })
    }

    /// Looks up every address in `ips`, writing the next hop (or [`NO_ROUTE`]) to the same
    /// index of `next_hops`.
    ///
    /// # Panics
    /// If the slices differ in length.
    pub fn lookup_bulk(&self, ips: &[[u8; 16]], next_hops: &mut [u64]) {
        assert_eq!(ips.len(), next_hops.len(), "one next-hop slot per address");
        const CHUNK: usize = i32::MAX as usize;
        for (ips, nhs) in ips.chunks(CHUNK).zip(next_hops.chunks_mut(CHUNK)) {
            let n = ips.len() as c_int;
            // SAFETY: self.fib is live; ips and nhs hold n elements each, and [u8; 16] is the
            // element type rte_fib6_lookup_bulk declares. It takes a non-const array but only
            // reads it, so the const-to-mut cast is never written through.
            unsafe {
                sys::rte_fib6_lookup_bulk(
                    self.fib.as_ptr(),
                    ips.as_ptr().cast_mut(),
                    nhs.as_mut_ptr(),
                    n,
                );
            }
        }
    }

    /// DPDK heap bytes this FIB occupies, measured as for [`super::DpdkFib4::bytes`].
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

impl Drop for DpdkFib6 {
    fn drop(&mut self) {
        // SAFETY: self.fib came from rte_fib6_create and is freed exactly once, here, with
        // exclusive access; `_live` drops afterwards.
        unsafe { sys::rte_fib6_free(self.fib.as_ptr()) };
    }
}
