//! Pod ports: hot-plugged while the workers run, reconciled against the tables.
//!
//! The tables are the request: a [`PortInfo`] with an interface name asks for that interface
//! to be attached as the port; its disappearance (or a new endpoint or interface on the same
//! port id) asks for the old one to go. [`PodPorts::reconcile`] makes the DPDK ports match and
//! acknowledges each in the status region: `Attaching` → `Up`, or `Failed(errno)` with the
//! error logged, retried with exponential backoff. A failed port never disturbs the others.
//!
//! Attaching (mechanism from the configuration): `packet_socket` opens one packet socket per
//! worker on the interface (a few system calls, no DPDK hot-plug); `af_packet`/`af_xdp` probe
//! the vdev, configure one queue pair per worker and start it. Then worker `i` gets its RX and
//! TX queue through its mailbox and every acknowledgement is awaited. Detaching: ask every
//! worker to drop the port's queues, wait for the acknowledgements, then close the sockets (or
//! stop, close and remove the device). No worker ever polls a stopped port, and no worker
//! stops for it.
//!
//! [`PodPorts::refresh_counters`] copies what the device and the kernel count for each port
//! (drops where lace does not look: the driver's `imissed`/`ierrors`/`rx_nombuf`/`oerrors`,
//! the packet sockets' `tp_drops`, the interface's own drop counters) into the status region.
//!
//! [`PortInfo`]: lace_shared::types::PortInfo

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lace_shared::status::{PortCounter, PortCounters, PortState, StatusWriter, MAX_PORTS};
use lace_shared::tables::Snapshot;
use lace_shared::types::{PortId, PortKind};

use super::config::Mechanism;
use super::worker::{Command, Mailbox, PortRx, PortTx, TxWhole};
use crate::dpdk::{Eal, Mempool, Port, PortConfig};
use crate::kernel::{self, KernelError, PacketSocket};

/// How long the main thread waits for a worker to take or drop queues.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// First retry delay of a failed port.
pub const RETRY_MIN: Duration = Duration::from_millis(250);
/// Longest retry delay of a failed port.
pub const RETRY_MAX: Duration = Duration::from_secs(10);

/// A pod port as the tables request it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The host-side interface.
    pub iface: String,
    /// The endpoint id.
    pub endpoint: u64,
}

/// Every port the snapshot requests (pod ports and the node's host interface, with an
/// interface name), by id: both are attached the same way.
pub fn requested(snap: &Snapshot<'_>) -> BTreeMap<PortId, Request> {
    (1..MAX_PORTS)
        .filter_map(|i| {
            let info = snap.port(PortId(i))?;
            let iface = info.iface.as_str();
            (matches!(info.kind, PortKind::Pod | PortKind::Host) && !iface.is_empty()).then(|| {
                (
                    PortId(i),
                    Request {
                        iface: iface.to_owned(),
                        endpoint: info.endpoint,
                    },
                )
            })
        })
        .collect()
}

/// A failed attachment: the errno acknowledged in the status region and the message logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachError {
    /// Positive errno.
    pub errno: u32,
    /// What went wrong and what to do.
    pub message: String,
}

/// A port as attached: a DPDK device, or lace's packet sockets (one per worker).
#[derive(Debug)]
pub enum Attached {
    /// A DPDK ethdev.
    Dpdk(Port),
    /// Packet sockets on a kernel interface, one per worker.
    Kernel(KernelPort),
}

/// What a kernel interface behind packet sockets is to the forwarder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelRole {
    /// A pod's interface: TCP runs toward it are merged, so that the pod's stack sees what a
    /// kernel with GRO would give it.
    Pod,
    /// The uplink: frames keep their 802.1Q tags (external networks on VLANs).
    Uplink,
}

/// The main thread's side of a packet-socket port: the sockets (for their counters).
#[derive(Debug)]
pub struct KernelPort {
    /// The interface.
    pub iface: String,
    /// One socket per worker.
    pub sockets: Vec<Arc<PacketSocket>>,
    /// Kernel socket drops counted so far (`PACKET_STATISTICS` resets on every read).
    dropped: u64,
}

impl KernelPort {
    /// Opens one socket per worker on `iface` (sharing its flows when there are several) and
    /// builds each worker's queues for the interface's `role`; `large`: take large segments
    /// from it whole into that pool's buffers.
    pub fn open(
        iface: &str,
        workers: u16,
        pool: &Mempool,
        role: KernelRole,
        large: Option<&Mempool>,
    ) -> Result<(KernelPort, Vec<(PortRx, PortTx)>), KernelError> {
        let fanout = (workers > 1).then(kernel::fanout_group);
        let mut sockets = Vec::with_capacity(usize::from(workers));
        let mut queues = Vec::with_capacity(usize::from(workers));
        for _ in 0..workers {
            let s = PacketSocket::open(iface, true, fanout)?;
            let mut rx = kernel::RxQueue::new(Arc::clone(&s), pool.clone());
            if let Some(large) = large {
                rx = rx.take_large_into(large.clone());
            }
            if role == KernelRole::Uplink {
                rx = rx.keep_vlan_tags()?;
            }
            let coalesce = role == KernelRole::Pod;
            queues.push((
                PortRx::Kernel(Box::new(rx)),
                PortTx::Kernel(Box::new(kernel::TxQueue::new(Arc::clone(&s), coalesce))),
            ));
            sockets.push(s);
        }
        Ok((
            KernelPort {
                iface: iface.to_owned(),
                sockets,
                dropped: 0,
            },
            queues,
        ))
    }

    /// Copies the sockets' and the interface's drop counters into `c`, and reads the
    /// interface's offload settings again.
    pub fn refresh(&mut self, c: &PortCounters<'_>, net_dev: &NetDev) {
        for s in &self.sockets {
            if let Ok(st) = s.take_stats() {
                self.dropped += st.drops;
            }
            s.refresh_offloads();
        }
        c.set(PortCounter::KernelRxDropped, self.dropped);
        if let Some(d) = net_dev.drops(&self.iface) {
            c.set(PortCounter::IfaceRxDropped, d.0);
            c.set(PortCounter::IfaceTxDropped, d.1);
        }
    }
}

impl Attached {
    /// Copies the device's or the kernel's counters into the port's status slot.
    pub fn refresh(&mut self, c: &PortCounters<'_>, net_dev: &NetDev) {
        match self {
            Attached::Dpdk(p) => {
                if let Ok(st) = p.stats() {
                    c.set(PortCounter::DeviceRxMissed, st.rx_missed);
                    c.set(PortCounter::DeviceRxErrors, st.rx_errors);
                    c.set(PortCounter::DeviceRxNoMbuf, st.rx_no_mbuf);
                    c.set(PortCounter::DeviceTxErrors, st.tx_errors);
                }
                if let Some(iface) = p.info().ok().and_then(|i| i.if_index).and_then(if_name) {
                    if let Some(d) = net_dev.drops(&iface) {
                        c.set(PortCounter::IfaceRxDropped, d.0);
                        c.set(PortCounter::IfaceTxDropped, d.1);
                    }
                }
            }
            Attached::Kernel(k) => k.refresh(c, net_dev),
        }
    }
}

/// The name of the interface with index `index` in this namespace.
fn if_name(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf has IF_NAMESIZE bytes, as if_indextoname requires; it NUL-terminates.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success buf holds a NUL-terminated name.
    Some(
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The interfaces' drop counters of this network namespace (`/proc/self/net/dev`, which
/// follows the namespace even where `/sys` was not remounted for it).
#[derive(Debug, Default)]
pub struct NetDev {
    drops: BTreeMap<String, (u64, u64)>,
}

impl NetDev {
    /// Reads the table now (empty when it cannot be read).
    pub fn read() -> NetDev {
        let text = std::fs::read_to_string("/proc/self/net/dev").unwrap_or_default();
        NetDev::parse(&text)
    }

    /// Parses `/proc/net/dev`: per interface, receive `drop` (4th field) and transmit `drop`
    /// (12th).
    pub fn parse(text: &str) -> NetDev {
        let drops = text
            .lines()
            .skip(2)
            .filter_map(|l| {
                let (name, rest) = l.split_once(':')?;
                let f: Vec<u64> = rest
                    .split_whitespace()
                    .map(|x| x.parse().unwrap_or(0))
                    .collect();
                Some((name.trim().to_owned(), (*f.get(3)?, *f.get(11)?)))
            })
            .collect();
        NetDev { drops }
    }

    /// (receive drops, transmit drops) of `iface`.
    pub fn drops(&self, iface: &str) -> Option<(u64, u64)> {
        self.drops.get(iface).copied()
    }
}

enum Plugged {
    Up(Attached),
    Failed {
        error: AttachError,
        attempts: u32,
        retry_at: Instant,
    },
}

struct PodPort {
    request: Request,
    plugged: Plugged,
}

/// Configures and starts `port`. A driver that fails with RX interrupts (at configure or at
/// start: a NIC without enough interrupt vectors) is set up again without them; idle workers then
/// poll its queues with backoff.
pub(crate) fn start_port(
    port: &mut Port,
    config: &PortConfig,
    pool: &Mempool,
) -> crate::dpdk::Result<()> {
    match port.configure(config, pool).and_then(|()| port.start()) {
        Err(e) if config.rx_interrupts => {
            tracing::warn!(
                port = port.name(),
                "setting the port up with RX interrupts failed ({e}); trying again without them"
            );
            let plain = PortConfig {
                rx_interrupts: false,
                ..config.clone()
            };
            port.configure(&plain, pool)?;
            port.start()
        }
        done => done,
    }
}

/// The pod ports of this forwarder and how to plug more.
pub struct PodPorts {
    eal: Eal,
    mechanism: Mechanism,
    workers: u16,
    pool: Mempool,
    /// Buffers large segments from pods are taken into whole (packet-socket pod ports).
    large: Option<Mempool>,
    /// Ask DPDK pod ports for RX interrupts (adaptive workers sleep on them).
    rx_interrupts: bool,
    next_vdev: u32,
    ports: BTreeMap<PortId, PodPort>,
}

impl std::fmt::Debug for PodPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodPorts")
            .field("mechanism", &self.mechanism)
            .field("workers", &self.workers)
            .field("ports", &self.ports.len())
            .finish()
    }
}

impl PodPorts {
    /// No ports yet; pods will be attached with `mechanism`, one queue pair per worker, their
    /// RX queues filled from `pool` (large segments whole from `large`, when given); a DPDK
    /// pod port asks for RX interrupts when `rx_interrupts`.
    pub fn new(
        eal: Eal,
        mechanism: Mechanism,
        workers: u16,
        pool: Mempool,
        large: Option<Mempool>,
        rx_interrupts: bool,
    ) -> PodPorts {
        PodPorts {
            eal,
            mechanism,
            workers,
            pool,
            large,
            rx_interrupts,
            next_vdev: 0,
            ports: BTreeMap::new(),
        }
    }

    /// Ports attached and up.
    pub fn up(&self) -> usize {
        self.ports
            .values()
            .filter(|p| matches!(p.plugged, Plugged::Up(_)))
            .count()
    }

    /// Whether a failed port is due for another attempt.
    pub fn retry_due(&self, now: Instant) -> bool {
        self.ports.values().any(|p| match &p.plugged {
            Plugged::Failed { retry_at, .. } => *retry_at <= now,
            Plugged::Up(_) => false,
        })
    }

    /// Makes the attached ports match `wanted`: detaches what is no longer requested (or
    /// requested differently), attaches what is new, retries failed ports that are due.
    pub fn reconcile(
        &mut self,
        wanted: &BTreeMap<PortId, Request>,
        mailboxes: &[Arc<Mailbox>],
        status: &StatusWriter,
    ) {
        let stale: Vec<PortId> = self
            .ports
            .iter()
            .filter(|(id, p)| wanted.get(id) != Some(&p.request))
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            if let Some(p) = self.ports.remove(&id) {
                self.unplug(id, p, mailboxes, status);
            }
        }
        let now = Instant::now();
        for (&id, req) in wanted {
            let attempts = match self.ports.get(&id).map(|p| &p.plugged) {
                Some(Plugged::Up(_)) => continue,
                Some(Plugged::Failed {
                    retry_at, attempts, ..
                }) => {
                    if *retry_at > now {
                        continue;
                    }
                    *attempts
                }
                None => {
                    status.reset_port_counters(id);
                    status.set_port(id, req.endpoint, PortState::Attaching);
                    tracing::info!(port = id.0, iface = %req.iface, endpoint = req.endpoint,
                        mechanism = self.mechanism.name(), "attaching pod port");
                    0
                }
            };
            let plugged = match self.plug(id, &req.iface, mailboxes) {
                Ok(port) => {
                    status.set_port(id, req.endpoint, PortState::Up);
                    match &port {
                        Attached::Dpdk(p) => tracing::info!(port = id.0, iface = %req.iface,
                            dpdk_port = p.id(), vdev = p.name(), "pod port up"),
                        Attached::Kernel(k) => tracing::info!(port = id.0, iface = %req.iface,
                            sockets = k.sockets.len(), "pod port up"),
                    }
                    Plugged::Up(port)
                }
                Err(error) => {
                    let delay = backoff(attempts);
                    if attempts == 0 {
                        tracing::warn!(port = id.0, iface = %req.iface, errno = error.errno,
                            "pod port failed: {}; retrying in {delay:?}", error.message);
                    } else {
                        tracing::debug!(port = id.0, iface = %req.iface, errno = error.errno,
                            attempts, "pod port still failing: {}", error.message);
                    }
                    status.set_port(id, req.endpoint, PortState::Failed(error.errno));
                    Plugged::Failed {
                        error,
                        attempts: attempts.saturating_add(1),
                        retry_at: Instant::now() + delay,
                    }
                }
            };
            self.ports.insert(
                id,
                PodPort {
                    request: req.clone(),
                    plugged,
                },
            );
        }
    }

    /// Copies the devices' and the kernel's counters of every attached port into the status
    /// region.
    pub fn refresh_counters(&mut self, status: &StatusWriter, net_dev: &NetDev) {
        for (id, p) in &mut self.ports {
            if let (Plugged::Up(a), Some(c)) = (&mut p.plugged, status.port_counters(*id)) {
                a.refresh(&c, net_dev);
            }
        }
    }

    /// Detaches every port (at shutdown, after the workers returned their queues).
    pub fn detach_all(&mut self, mailboxes: &[Arc<Mailbox>], status: &StatusWriter) {
        for (id, p) in std::mem::take(&mut self.ports) {
            self.unplug(id, p, mailboxes, status);
        }
    }

    /// The DPDK vdev arguments attaching `iface` with the configured mechanism (ADR 0005: a
    /// 4096-frame ring for af_packet, no busy-poll syscalls for af_xdp). Pod devices are
    /// named `<driver>_pod<index>` so they never collide with an uplink vdev the configuration
    /// names `<driver><n>` (DPDK matches the driver by the name's prefix).
    pub fn devargs(mechanism: Mechanism, index: u32, iface: &str, workers: u16) -> String {
        match mechanism {
            // No vdev: named for logs only.
            Mechanism::PacketSocket => format!("packet_socket{index},iface={iface}"),
            Mechanism::AfPacket => {
                format!(
                    "net_af_packet_pod{index},iface={iface},qpairs={workers},qdisc_bypass=1,\
                     framecnt=4096"
                )
            }
            Mechanism::AfXdp => {
                format!(
                    "net_af_xdp_pod{index},iface={iface},start_queue=0,queue_count={workers},\
                     busy_budget=0"
                )
            }
        }
    }

    fn plug(
        &mut self,
        id: PortId,
        iface: &str,
        mailboxes: &[Arc<Mailbox>],
    ) -> Result<Attached, AttachError> {
        if !interface_exists(iface) {
            return Err(AttachError {
                errno: libc::ENODEV as u32,
                message: format!(
                    "interface {iface:?} does not exist on this host (the CNI plugin creates \
                     it before control publishes the port)"
                ),
            });
        }
        let devargs = Self::devargs(self.mechanism, self.next_vdev, iface, self.workers);
        self.next_vdev = self.next_vdev.wrapping_add(1);
        if self.mechanism == Mechanism::PacketSocket {
            let (k, queues) = KernelPort::open(
                iface,
                self.workers,
                &self.pool,
                KernelRole::Pod,
                self.large.as_ref(),
            )
            .map_err(|e| AttachError {
                errno: e.errno(),
                message: e.to_string(),
            })?;
            hand_out(id, queues, mailboxes, &devargs)?;
            return Ok(Attached::Kernel(k));
        }
        let dpdk = |e: crate::dpdk::Error| AttachError {
            errno: e.errno().unsigned_abs(),
            message: e.to_string(),
        };
        let mut port = Port::attach_vdev(&self.eal, &devargs).map_err(dpdk)?;
        let config = PortConfig {
            rx_queues: self.workers,
            tx_queues: self.workers,
            // Pods send to the gateway's MAC, not the interface's.
            promiscuous: true,
            rx_interrupts: self.rx_interrupts,
            ..PortConfig::default()
        };
        start_port(&mut port, &config, &self.pool).map_err(dpdk)?;
        // Take every handle before posting any, so a failure leaves no worker holding one.
        let mut queues = Vec::with_capacity(mailboxes.len());
        for q in 0..mailboxes.len() as u16 {
            queues.push((
                PortRx::Dpdk(port.rx_queue(q).map_err(dpdk)?, None),
                PortTx::Dpdk(port.tx_queue(q).map_err(dpdk)?, TxWhole::Nothing),
            ));
        }
        hand_out(id, queues, mailboxes, &devargs)?;
        Ok(Attached::Dpdk(port))
    }

    fn unplug(&mut self, id: PortId, p: PodPort, mailboxes: &[Arc<Mailbox>], st: &StatusWriter) {
        match p.plugged {
            Plugged::Up(Attached::Dpdk(port)) => {
                remove_from_workers(id, mailboxes);
                let name = port.name().to_owned();
                match port.detach() {
                    Ok(()) => tracing::info!(port = id.0, iface = %p.request.iface, vdev = %name,
                        "pod port detached"),
                    Err(e) => tracing::error!(port = id.0, iface = %p.request.iface,
                        "pod port detach: {e}"),
                }
            }
            Plugged::Up(Attached::Kernel(k)) => {
                remove_from_workers(id, mailboxes);
                // The workers dropped their queues: the sockets close with these handles.
                drop(k);
                tracing::info!(port = id.0, iface = %p.request.iface, "pod port detached");
            }
            Plugged::Failed { error, .. } => {
                tracing::info!(port = id.0, iface = %p.request.iface,
                    "failed pod port withdrawn (last error: {})", error.message);
            }
        }
        st.set_port(id, p.request.endpoint, PortState::Absent);
    }
}

/// Whether the process's network namespace has `iface` (`/proc/self/net/dev`, which follows
/// the namespace even where `/sys` was not remounted for it). When the file cannot be read,
/// the answer is yes and the driver reports the problem.
fn interface_exists(iface: &str) -> bool {
    match std::fs::read_to_string("/proc/self/net/dev") {
        Ok(dev) => dev
            .lines()
            .skip(2)
            .filter_map(|l| l.split_once(':'))
            .any(|(name, _)| name.trim() == iface),
        Err(_) => true,
    }
}

/// Hands worker `i` the `i`th queue pair of port `id` and waits for every acknowledgement; on
/// a timeout every worker drops the port again.
pub fn hand_out(
    id: PortId,
    queues: Vec<(PortRx, PortTx)>,
    mailboxes: &[Arc<Mailbox>],
    what: &str,
) -> Result<(), AttachError> {
    let generations: Vec<u64> = mailboxes
        .iter()
        .zip(queues)
        .map(|(mb, (rx, tx))| {
            mb.post([Command::AddPort {
                port: id,
                rx: vec![rx],
                tx,
            }])
        })
        .collect();
    for (i, (mb, g)) in mailboxes.iter().zip(generations).enumerate() {
        if let Err(e) = mb.wait_ack(g, ACK_TIMEOUT) {
            remove_from_workers(id, mailboxes);
            return Err(AttachError {
                errno: libc::ETIMEDOUT as u32,
                message: format!("worker {i} did not take the queues of {what}: {e}"),
            });
        }
    }
    Ok(())
}

/// Asks every worker to drop `id`'s queues and waits for them.
fn remove_from_workers(id: PortId, mailboxes: &[Arc<Mailbox>]) {
    let generations: Vec<u64> = mailboxes
        .iter()
        .map(|mb| mb.post([Command::RemovePort { port: id }]))
        .collect();
    for (i, (mb, g)) in mailboxes.iter().zip(generations).enumerate() {
        match mb.wait_ack(g, ACK_TIMEOUT) {
            Ok(()) | Err(super::worker::AckError::Exited) => {}
            Err(e) => tracing::error!(port = id.0, worker = i, "dropping queues: {e}"),
        }
    }
}

/// Retry delay after `attempts` failures: 250 ms doubling up to 10 s.
pub fn backoff(attempts: u32) -> Duration {
    RETRY_MIN
        .saturating_mul(1u32 << attempts.min(16))
        .min(RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_cap() {
        assert_eq!(backoff(0), RETRY_MIN);
        assert_eq!(backoff(1), RETRY_MIN * 2);
        assert_eq!(backoff(40), RETRY_MAX);
    }

    #[test]
    fn net_dev_drops_per_interface() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
            face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n \
            lo: 100 2 0 0 0 0 0 0 100 2 0 0 0 0 0 0\n\
            lace0a1b: 5000 40 0 7 0 0 0 0 9000 60 0 3 0 0 0 0\n";
        let d = NetDev::parse(text);
        assert_eq!(d.drops("lace0a1b"), Some((7, 3)));
        assert_eq!(d.drops("lo"), Some((0, 0)));
        assert_eq!(d.drops("eth9"), None);
    }

    #[test]
    fn devargs_per_mechanism() {
        assert_eq!(
            PodPorts::devargs(Mechanism::AfPacket, 3, "veth1", 2),
            "net_af_packet_pod3,iface=veth1,qpairs=2,qdisc_bypass=1,framecnt=4096"
        );
        assert_eq!(
            PodPorts::devargs(Mechanism::AfXdp, 0, "veth1", 1),
            "net_af_xdp_pod0,iface=veth1,start_queue=0,queue_count=1,busy_budget=0"
        );
    }
}
