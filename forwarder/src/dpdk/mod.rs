//! The safe face of DPDK: the only module of lace-forwarder that calls into `lace-dpdk-sys`.
//!
//! What it guarantees:
//!
//! * **One EAL per process.** [`Eal::init`] runs `rte_eal_init` at most once; every DPDK object
//!   is created from an [`Eal`] handle, so none exists before the EAL does. [`Eal::cleanup`] is
//!   refused while any port, mempool or ring is alive.
//! * **Ownership of mbufs.** An [`Mbuf`] owns one packet buffer (chain) and frees it on drop; a
//!   [`Burst`] owns up to `N` of them without allocating. Sending moves mbufs to the driver;
//!   those it refuses stay in the burst for the caller to retry, or drop and count.
//! * **Queues are single-owner.** [`Port::rx_queue`] / [`Port::tx_queue`] hand out each queue at
//!   most once; bursting takes `&mut self`, so a queue is polled by one thread at a time, as DPDK
//!   requires. While any queue handle lives, the port cannot be reconfigured, stopped or
//!   detached (those calls return [`Error::QueuesInUse`]): no worker polls a stopped queue.
//! * **Lifetimes follow DPDK's.** A port keeps its mempool and rings alive; a mempool is freed
//!   only when every one of its mbufs is back (otherwise it is left allocated: a leak, never a
//!   use-after-free); a hot-plugged port is stopped, closed and removed when its last handle goes.
//!
//! What it does not: multi-segment packets are carried but [`Mbuf::data`] shows only the first
//! segment; offloads (checksum, TSO, VLAN) and flow rules are not configured; secondary processes
//! are not supported.
//!
//! The fast-path calls ([`RxQueue::rx_burst`], [`TxQueue::tx_burst`], [`Mempool::alloc`],
//! [`Mbuf`]'s accessors) neither allocate, lock, nor format. DPDK's static-inline functions are
//! reached through the `lace_*` shim in lace-dpdk-sys; [`Mbuf::data`] and [`Mbuf::len`] read the
//! `rte_mbuf` fields directly (their offsets are checked at compile time by the generated layout
//! assertions).

mod crc;
mod eal;
mod error;
mod mbuf;
mod mempool;
mod port;
mod ring;

pub use crc::crc32c_u64;
pub use eal::{lcore_id, socket_id, tsc, Eal, Worker, WORKER_PANICKED};
pub use error::{Error, Result};
pub use mbuf::{Burst, Drain, Mbuf, BURST_SIZE};
pub use mempool::Mempool;
pub use port::{
    Link, MacAddr, Port, PortConfig, PortInfo, PortStats, RxInterrupts, RxQueue, TunnelTso, TxQueue,
};
pub use ring::Ring;

/// The DPDK version lace-dpdk-sys was generated from (`pkg-config --modversion libdpdk`).
pub const DPDK_VERSION: &str = lace_dpdk_sys::DPDK_VERSION;
