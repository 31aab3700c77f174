//! The kernel's side of lace's own ports: AF_PACKET sockets with `PACKET_VNET_HDR` on a
//! kernel interface (the host end of a pod's veth, or a veth/NIC uplink the kernel owns), and
//! the epoll and eventfd a worker sleeps on. The only module besides [`crate::dpdk`] that makes
//! system calls through FFI.
//!
//! A [`PacketSocket`] is bound to one interface and receives every frame arriving there (never
//! the ones sent out of it); frames move with one `recvmmsg` / `sendmmsg` per burst directly
//! between the kernel and mbufs (one copy each way, no ring slots: a 64 KiB segment and a
//! 64-byte frame cost the same socket buffer bookkeeping). With the virtio-net header on,
//! frames carry their offload metadata: large segments from the pod arrive whole and are cut
//! once ([`crate::offload::segment`]), partial checksums are completed, and runs of TCP segments
//! toward the pod leave as one large segment with a partial checksum
//! ([`crate::offload::coalesce`]), so the pod's stack sees what a kernel with GRO would give it.
//!
//! Guarantees: the fast-path calls ([`RxQueue::rx_burst`], [`TxQueue::tx_burst`]) allocate
//! nothing (buffers come from the mempool, scratch space is preallocated) and make one system
//! call per burst; a frame the port cannot take (truncated, bad offload metadata) is counted,
//! never delivered half. Several sockets on one interface (one per worker) share its traffic
//! by flow (`PACKET_FANOUT_HASH`).

mod socket;
mod wake;

pub use socket::{
    fanout_group, PacketSocket, PortCounts, RxQueue, SocketStats, TxQueue, MAX_RX_BURST,
};
pub use wake::{Epoll, EventFd};

/// Why a kernel port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The interface is not in this network namespace.
    #[error("interface {iface:?} does not exist in this network namespace")]
    NoInterface {
        /// The interface name.
        iface: String,
    },
    /// A system call failed.
    #[error("{what} on {iface:?}: {source}")]
    Syscall {
        /// The call and its purpose.
        what: &'static str,
        /// The interface.
        iface: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl KernelError {
    /// The positive errno (for the status region).
    pub fn errno(&self) -> u32 {
        match self {
            KernelError::NoInterface { .. } => libc::ENODEV as u32,
            KernelError::Syscall { source, .. } => {
                source.raw_os_error().map_or(libc::EIO as u32, |e| e as u32)
            }
        }
    }
}
