//! Errors of the DPDK wrapper. Each message names the object, what DPDK said, and what to change.
//! These are control-path errors; the fast path reports nothing but counts (see the module docs).

use std::ffi::CStr;

use lace_dpdk_sys as sys;

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while setting up DPDK, its mempools, rings and ports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `rte_eal_init` was not attempted: the EAL arguments ask for hugepages (no `--no-huge`)
    /// and the kernel has none free, of any size.
    #[error(
        "DPDK EAL not started: the EAL arguments [{args}] use hugepages but HugePages_Free is 0 \
         for every page size — reserve some with the node's hugepages tool (hugepages/ in this \
         repository) or `echo 1024 > /proc/sys/vm/nr_hugepages` and use --in-memory, or add \
         --no-huge -m <MiB> to run on ordinary 4 KiB pages (tests, CI)"
    )]
    NoHugepages {
        /// The EAL arguments, space separated.
        args: String,
    },

    /// `rte_eal_init` failed.
    #[error("rte_eal_init failed: {reason} (EAL arguments: [{args}]) — {fix}")]
    EalInit {
        /// The EAL arguments, space separated.
        args: String,
        /// `rte_errno` after the call.
        errno: i32,
        /// DPDK's description of `errno`.
        reason: String,
        /// What to change.
        fix: &'static str,
    },

    /// [`Eal::init`](super::Eal::init) was called again; DPDK allows one `rte_eal_init` per
    /// process.
    #[error(
        "the DPDK EAL is already running in this process (EAL arguments: [{args}]) — \
         rte_eal_init runs once per process: keep the first Eal handle or get it with \
         Eal::running()"
    )]
    EalAlreadyInitialized {
        /// The arguments the running EAL was started with.
        args: String,
    },

    /// The EAL was cleaned up; DPDK cannot start it again in the same process.
    #[error(
        "the DPDK EAL of this process was cleaned up and cannot be started again — call \
         Eal::cleanup only when the process is about to exit"
    )]
    EalCleanedUp,

    /// [`Eal::cleanup`](super::Eal::cleanup) was refused because DPDK objects are still alive.
    #[error(
        "Eal::cleanup refused: {live} DPDK object(s) (ports, queues, mempools, rings) are still \
         alive — drop them first (a mempool stays alive until all its mbufs are back)"
    )]
    ObjectsAlive {
        /// How many wrappers still hold DPDK memory.
        live: usize,
    },

    /// A name or argument string cannot be passed to DPDK.
    #[error("{what} {value:?} is invalid: {why}")]
    InvalidArgument {
        /// What the value is for ("mempool name", "vdev arguments", ...).
        what: &'static str,
        /// The rejected value.
        value: String,
        /// Why, and what is accepted.
        why: String,
    },

    /// `rte_pktmbuf_pool_create` failed.
    #[error("mempool {name}: rte_pktmbuf_pool_create failed: {reason} — {fix}")]
    MempoolCreate {
        /// The pool's name.
        name: String,
        /// `rte_errno` after the call.
        errno: i32,
        /// DPDK's description of `errno`.
        reason: String,
        /// What to change.
        fix: &'static str,
    },

    /// `rte_ring_create` failed.
    #[error("ring {name}: rte_ring_create failed: {reason} — {fix}")]
    RingCreate {
        /// The ring's name.
        name: String,
        /// `rte_errno` after the call.
        errno: i32,
        /// DPDK's description of `errno`.
        reason: String,
        /// What to change.
        fix: &'static str,
    },

    /// No Ethernet port has this name.
    #[error(
        "port {name:?} not found (ports: [{known}]) — attach it with Port::attach_vdev, pass \
         --vdev/-a to the EAL, or bind the NIC to vfio-pci"
    )]
    PortNotFound {
        /// The name looked up.
        name: String,
        /// The names of the ports that exist, comma separated.
        known: String,
    },

    /// Another [`Port`](super::Port) handle already owns this port.
    #[error(
        "port {name} is already owned by another Port handle in this process — use that \
         handle (each port has one owner)"
    )]
    PortInUse {
        /// The port's name.
        name: String,
    },

    /// `rte_dev_probe` (or `rte_eth_from_rings`) could not create the device.
    #[error("attaching vdev {devargs:?} failed: {reason} — {fix}")]
    VdevProbe {
        /// The device arguments passed (`net_tap0,iface=tap0`).
        devargs: String,
        /// The error DPDK returned, as a positive errno.
        errno: i32,
        /// DPDK's description of `errno`.
        reason: String,
        /// What to change.
        fix: &'static str,
    },

    /// `rte_dev_remove` failed; the device may still exist.
    #[error("detaching device {name} failed: {reason} — {fix}")]
    VdevRemove {
        /// The device's name.
        name: String,
        /// The error DPDK returned, as a positive errno.
        errno: i32,
        /// DPDK's description of `errno`.
        reason: String,
        /// What to change.
        fix: &'static str,
    },

    /// An ethdev call on a port failed.
    #[error("port {port}: {call} failed: {reason} — {fix}")]
    Ethdev {
        /// The port's name.
        port: String,
        /// The DPDK function (`rte_eth_dev_configure`, ...).
        call: &'static str,
        /// The error DPDK returned, as a positive errno.
        errno: i32,
        /// DPDK's description of `errno`.
        reason: String,
        /// What to change.
        fix: &'static str,
    },

    /// More queues were requested than the device has.
    #[error(
        "port {port}: {requested} {direction} queue(s) requested, the device offers at most \
         {max} — lower PortConfig::{direction}_queues (one queue per worker core)"
    )]
    TooManyQueues {
        /// The port's name.
        port: String,
        /// `"rx"` or `"tx"`.
        direction: &'static str,
        /// The count asked for.
        requested: u16,
        /// The device's limit.
        max: u16,
    },

    /// The call does not fit the port's current state (e.g. starting an unconfigured port).
    #[error("port {port}: cannot {op} while the port is {state} — {fix}")]
    InvalidState {
        /// The port's name.
        port: String,
        /// What was attempted.
        op: &'static str,
        /// The port's state (`unconfigured`, `configured`, `started`).
        state: &'static str,
        /// What to do first.
        fix: &'static str,
    },

    /// The call needs exclusive use of the port, but queue handles are still alive.
    #[error(
        "port {port}: cannot {op} while {count} RxQueue/TxQueue handle(s) are alive — drop \
         every queue handle (stop the workers polling them) first"
    )]
    QueuesInUse {
        /// The port's name.
        port: String,
        /// What was attempted.
        op: &'static str,
        /// How many queue handles exist.
        count: usize,
    },

    /// A queue id is out of range or its handle is already taken.
    #[error("port {port}: {direction} queue {queue} is not available: {why}")]
    QueueUnavailable {
        /// The port's name.
        port: String,
        /// `"rx"` or `"tx"`.
        direction: &'static str,
        /// The queue id asked for.
        queue: u16,
        /// Why, and what to do.
        why: String,
    },

    /// Launching a function on a worker lcore failed.
    #[error("lcore {lcore}: cannot launch a function: {reason} — {fix}")]
    Launch {
        /// The lcore asked for.
        lcore: u32,
        /// The error, as a positive errno.
        errno: i32,
        /// Its description.
        reason: String,
        /// What to change.
        fix: &'static str,
    },
}

impl Error {
    /// The error as a positive errno, for reports that carry a number (the status region's
    /// port acknowledgements): DPDK's own where it gave one, else the closest POSIX code.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NoHugepages { .. } => libc::ENOMEM,
            Error::EalInit { errno, .. }
            | Error::MempoolCreate { errno, .. }
            | Error::RingCreate { errno, .. }
            | Error::VdevProbe { errno, .. }
            | Error::VdevRemove { errno, .. }
            | Error::Ethdev { errno, .. }
            | Error::Launch { errno, .. } => *errno,
            Error::EalAlreadyInitialized { .. } => libc::EALREADY,
            Error::EalCleanedUp => libc::ESHUTDOWN,
            Error::ObjectsAlive { .. }
            | Error::PortInUse { .. }
            | Error::QueuesInUse { .. }
            | Error::QueueUnavailable { .. } => libc::EBUSY,
            Error::InvalidArgument { .. } | Error::TooManyQueues { .. } => libc::EINVAL,
            Error::InvalidState { .. } => libc::EPERM,
            Error::PortNotFound { .. } => libc::ENODEV,
        }
    }
}

/// `rte_errno` of the calling thread.
pub(crate) fn rte_errno() -> i32 {
    // SAFETY: reads a thread-local integer; no preconditions.
    unsafe { sys::lace_rte_errno() }
}

/// DPDK's description of an errno (covers DPDK's own codes above `__ELASTERROR`).
pub(crate) fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror accepts any value and returns a pointer to a NUL-terminated string,
    // static or in a per-thread buffer, valid until the next call on this thread; it is copied
    // out before that.
    let p = unsafe { sys::rte_strerror(errno) };
    if p.is_null() {
        return format!("error {errno}");
    }
    // SAFETY: non-null and NUL-terminated, per rte_strerror's contract (see above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A generic hint for errnos every DPDK call can return.
pub(crate) fn fix_for(errno: i32) -> &'static str {
    match errno {
        libc::ENOMEM => {
            "DPDK ran out of memory: raise -m (with --no-huge) or reserve more hugepages \
             (the node's hugepages tool), or ask for fewer mbufs/descriptors"
        }
        libc::ENOSPC => "DPDK's memzone table is full: free unused mempools and rings",
        libc::EEXIST => "an object with this name already exists: pick a unique name",
        libc::ENOTSUP => "the driver does not support this: leave the setting at its default",
        libc::ENODEV => "the device is gone or not an Ethernet port: check the port name",
        libc::EBUSY => "the device is busy: stop the port first",
        libc::EIO => "the device was removed: detach the port",
        libc::EPERM | libc::EACCES => "permission denied: run as root or with CAP_NET_ADMIN",
        libc::EINVAL => "DPDK rejected an argument: see the EAL log line above for which",
        _ => "see the DPDK log lines above",
    }
}

/// A C string for DPDK, or [`Error::InvalidArgument`] naming the value when it holds a NUL or
/// is longer than `max_len` bytes (excluding the NUL).
pub(crate) fn c_string(
    what: &'static str,
    value: &str,
    max_len: usize,
) -> Result<std::ffi::CString> {
    if value.is_empty() {
        return Err(Error::InvalidArgument {
            what,
            value: value.to_owned(),
            why: "it is empty".to_owned(),
        });
    }
    if value.len() > max_len {
        return Err(Error::InvalidArgument {
            what,
            value: value.to_owned(),
            why: format!("DPDK allows at most {max_len} bytes; shorten it"),
        });
    }
    std::ffi::CString::new(value).map_err(|_| Error::InvalidArgument {
        what,
        value: value.to_owned(),
        why: "it contains a NUL byte".to_owned(),
    })
}
