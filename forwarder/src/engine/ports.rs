//! Pod ports: hot-plugged while the workers run, reconciled against the tables.
//!
//! The tables are the request: a [`PortInfo`] with an interface name asks for that interface
//! to be attached as the port; its disappearance (or a new endpoint or interface on the same
//! port id) asks for the old one to go. [`PodPorts::reconcile`] makes the DPDK ports match and
//! acknowledges each in the status region: `Attaching` → `Up`, or `Failed(errno)` with the
//! error logged, retried with exponential backoff. A failed port never disturbs the others.
//!
//! Attaching: probe the vdev (mechanism from the configuration), configure one queue pair per
//! worker, start it, then hand worker `i` RX and TX queue `i` through its mailbox and wait for
//! every acknowledgement. Detaching: ask every worker to drop the port's queues, wait for the
//! acknowledgements, then stop, close and remove the device. No worker ever polls a stopped
//! port, and no worker stops for it.
//!
//! [`PortInfo`]: lace_shared::types::PortInfo

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lace_shared::status::{PortState, StatusWriter, MAX_PORTS};
use lace_shared::tables::Snapshot;
use lace_shared::types::{PortId, PortKind};

use super::config::Mechanism;
use super::worker::{Command, Mailbox};
use crate::dpdk::{Eal, Mempool, Port, PortConfig};

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

/// Every pod port the snapshot requests (pod ports with an interface name), by id.
pub fn requested(snap: &Snapshot<'_>) -> BTreeMap<PortId, Request> {
    (1..MAX_PORTS)
        .filter_map(|i| {
            let info = snap.port(PortId(i))?;
            let iface = info.iface.as_str();
            (info.kind == PortKind::Pod && !iface.is_empty()).then(|| {
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

enum Plugged {
    Up(Port),
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

/// The pod ports of this forwarder and how to plug more.
pub struct PodPorts {
    eal: Eal,
    mechanism: Mechanism,
    workers: u16,
    pool: Mempool,
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
    /// RX queues filled from `pool`.
    pub fn new(eal: Eal, mechanism: Mechanism, workers: u16, pool: Mempool) -> PodPorts {
        PodPorts {
            eal,
            mechanism,
            workers,
            pool,
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
                    tracing::info!(port = id.0, iface = %req.iface, dpdk_port = port.id(),
                        vdev = port.name(), "pod port up");
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
    ) -> Result<Port, AttachError> {
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
            ..PortConfig::default()
        };
        port.configure(&config, &self.pool).map_err(dpdk)?;
        port.start().map_err(dpdk)?;
        // Take every handle before posting any, so a failure leaves no worker holding one.
        let mut queues = Vec::with_capacity(mailboxes.len());
        for q in 0..mailboxes.len() as u16 {
            queues.push((
                port.rx_queue(q).map_err(dpdk)?,
                port.tx_queue(q).map_err(dpdk)?,
            ));
        }
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
                    message: format!("worker {i} did not take the queues of {devargs}: {e}"),
                });
            }
        }
        Ok(port)
    }

    fn unplug(&mut self, id: PortId, p: PodPort, mailboxes: &[Arc<Mailbox>], st: &StatusWriter) {
        match p.plugged {
            Plugged::Up(port) => {
                remove_from_workers(id, mailboxes);
                let name = port.name().to_owned();
                match port.detach() {
                    Ok(()) => tracing::info!(port = id.0, iface = %p.request.iface, vdev = %name,
                        "pod port detached"),
                    Err(e) => tracing::error!(port = id.0, iface = %p.request.iface,
                        "pod port detach: {e}"),
                }
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
