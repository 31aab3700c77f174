//! Errors from the DPDK wrappers. Each message names what failed and how to fix it.

use std::ffi::CStr;

use super::sys;

/// Everything that can go wrong while initialising DPDK or building an anchor table.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    /// `rte_eal_init` returned an error.
    #[error("rte_eal_init failed: {reason} (args: {args}) — {fix}")]
    EalInit {
        /// The EAL arguments that were passed, space separated.
        args: String,
        /// `rte_errno` after the call.
        errno: i32,
        /// DPDK's description of `errno`.
        reason: String,
        /// What to change.
        fix: &'static str,
    },

    /// Hugepages were requested but the kernel has none free.
    #[error(
        "rte_eal_init not attempted: hugepages requested but HugePages_Free is 0 in /proc/meminfo \
         — reserve some (e.g. `echo 1024 > /proc/sys/vm/nr_hugepages`) or run without --huge"
    )]
    NoHugepages,

    /// The EAL is already running with different options; DPDK allows one `rte_eal_init` per
    /// process.
    #[error(
        "the DPDK EAL is already initialised in this process with {existing}; cannot re-initialise \
         it with {requested} — DPDK allows one rte_eal_init per process: reuse the first Eal handle"
    )]
    EalAlreadyInitialized {
        /// The options of the running EAL.
        existing: String,
        /// The options of the refused call.
        requested: String,
    },

    /// The EAL was cleaned up; DPDK cannot initialise it a second time in one process.
    #[error(
        "the DPDK EAL of this process was cleaned up and cannot be initialised again — \
         create every table before calling Eal::cleanup"
    )]
    EalCleanedUp,

    /// `Eal::cleanup` was called while tables still hold DPDK memory.
    #[error("Eal::cleanup refused: {live} DPDK table(s) still alive — drop them first")]
    TablesAlive {
        /// How many wrappers are alive.
        live: usize,
    },

    /// A table could not be created.
    #[error("{call}({name}) failed: {reason} — {fix}")]
    Create {
        /// The DPDK function that failed (`rte_fib_create`, ...).
        call: &'static str,
        /// The DPDK object name we passed.
        name: String,
        /// `rte_errno` after the call.
        errno: i32,
        /// DPDK's description of `errno`.
        reason: String,
        /// What to change.
        fix: &'static str,
    },

    /// A route or key could not be added or deleted.
    #[error("{call}({what}) failed: {reason} — {fix}")]
    Modify {
        /// The DPDK function that failed (`rte_fib_add`, ...).
        call: &'static str,
        /// The route or key, formatted.
        what: String,
        /// The negative return value, made positive.
        errno: i32,
        /// DPDK's description of `errno`.
        reason: String,
        /// What to change.
        fix: &'static str,
    },

    /// An argument DPDK would reject or misread (depth out of range, reserved next hop, ...).
    #[error("{what}: {why}")]
    InvalidArgument {
        /// The argument, formatted.
        what: String,
        /// Why it is refused.
        why: &'static str,
    },
}

/// DPDK's text for an errno value (covers both libc and `rte_errno`-specific codes).
pub(crate) fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror accepts any value and returns a pointer to a static or thread-local
    // NUL-terminated string that stays valid until the next call on this thread; we copy it at once.
    let ptr = unsafe { sys::rte_strerror(errno) };
    if ptr.is_null() {
        return format!("errno {errno}");
    }
    // SAFETY: ptr is non-null and NUL-terminated (see above); it is read before any other DPDK call.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// The calling thread's `rte_errno`.
pub(crate) fn rte_errno() -> i32 {
    // SAFETY: the shim only reads the calling thread's per-lcore errno variable.
    unsafe { sys::lace_rte_errno() }
}

/// The usual fix for an errno returned by a table operation.
pub(crate) fn fix_for(errno: i32) -> &'static str {
    match errno {
        libc::ENOMEM => {
            "DPDK's heap is exhausted: raise EalOptions::memory_mb (-m) or run with hugepages (--huge)"
        }
        libc::ENOSPC => "the table is full: raise max_routes / num_tbl8 / entries for this table",
        libc::EEXIST => "an object of that name exists already: use a unique name",
        libc::EINVAL => "DPDK rejected the parameters: check depth, next-hop width and sizes",
        libc::ENOENT => "no such route or key",
        _ => "see the DPDK log above for details",
    }
}
