//! Ethernet ports (`rte_ethdev`): lookup, vdev hot-plug, configuration, and the per-queue
//! handles workers poll.
//!
//! A port's life: [`Port::by_name`], [`Port::attach_vdev`] or [`Port::from_rings`] →
//! [`Port::configure`] → [`Port::start`] → [`Port::rx_queue`] / [`Port::tx_queue`] handed to
//! workers → handles dropped → [`Port::stop`] or [`Port::detach`].
//!
//! A port configured with [`PortConfig::rx_interrupts`] whose driver offers them (a NIC's MSI-X
//! vectors through vfio-pci, `net_tap`'s queue descriptors, virtio) lets an idle worker sleep:
//! [`RxQueue::watch_interrupts`] adds the queue to an [`RxInterrupts`] epoll set, which the
//! worker adds to its own; [`RxQueue::arm`] before sleeping, [`RxQueue::disarm`] after.

use std::collections::BTreeSet;
use std::ffi::{c_char, c_uint, CStr};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use lace_dpdk_sys as sys;

pub use lace_shared::types::MacAddr;

use super::eal::{Eal, Live};
use super::error::{c_string, fix_for, strerror, Error, Result};
use super::mbuf::{Burst, Mbuf};
use super::mempool::Mempool;
use super::ring::Ring;
use crate::offload::TsoHeaders;

/// How to set up a port. `Default` is one RX and one TX queue of 1024 descriptors each, the
/// device's default MTU, IP/TCP/UDP RSS (used only with several RX queues), not promiscuous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// RX queues (one per worker polling the port).
    pub rx_queues: u16,
    /// TX queues (one per worker sending to the port).
    pub tx_queues: u16,
    /// Descriptors per RX queue; adjusted to the device's limits.
    pub rx_descriptors: u16,
    /// Descriptors per TX queue; adjusted to the device's limits.
    pub tx_descriptors: u16,
    /// RSS hash functions (`RTE_ETH_RSS_*` bits) when `rx_queues > 1`, reduced to those the
    /// device supports; with none left (e.g. ring ports), RSS stays off.
    pub rss_hash_functions: u64,
    /// The MTU; `None` keeps the device's default (1500 for most).
    pub mtu: Option<u16>,
    /// Receive frames for any destination MAC.
    pub promiscuous: bool,
    /// Ask the driver for RX queue interrupts (`intr_conf.rxq`), so that a sleeping worker can
    /// be woken by a packet. Drivers without them ignore it (their queues are then polled);
    /// a driver that fails to configure or start with it should be retried without it.
    pub rx_interrupts: bool,
    /// TX offloads to enable (`RTE_ETH_TX_OFFLOAD_*` bits); each must be one the device
    /// offers ([`PortInfo::tx_offloads`]).
    pub tx_offloads: u64,
}

impl PortConfig {
    /// RSS over IPv4/IPv6 addresses and TCP/UDP ports.
    pub const RSS_IP_TCP_UDP: u64 =
        (sys::RTE_ETH_RSS_IP | sys::RTE_ETH_RSS_TCP | sys::RTE_ETH_RSS_UDP) as u64;
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_descriptors: 1024,
            tx_descriptors: 1024,
            rss_hash_functions: Self::RSS_IP_TCP_UDP,
            mtu: None,
            promiscuous: false,
            rx_interrupts: false,
            tx_offloads: 0,
        }
    }
}

/// A port's counters (`rte_eth_stats`), since start or the last [`Port::reset_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets the device dropped because no RX descriptor was free (polling too slowly).
    pub rx_missed: u64,
    /// Erroneous packets received.
    pub rx_errors: u64,
    /// Packets the device failed to send (for ring ports: refused because the ring was full).
    pub tx_errors: u64,
    /// RX mbuf allocation failures (the mempool ran dry).
    pub rx_no_mbuf: u64,
}

/// A port's link state (`rte_eth_link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Whether the link is up.
    pub up: bool,
    /// Speed in Mbit/s; `None` when the driver does not know (virtual devices often do not).
    pub speed_mbps: Option<u32>,
    /// Full duplex.
    pub full_duplex: bool,
    /// Speed negotiated automatically.
    pub autoneg: bool,
}

/// What a device offers (`rte_eth_dev_info`), for sizing a [`PortConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// The PMD's name (`net_null`, `net_tap`, `net_ice`, ...).
    pub driver: String,
    /// The most RX queues.
    pub max_rx_queues: u16,
    /// The most TX queues.
    pub max_tx_queues: u16,
    /// RSS hash functions the device supports (`RTE_ETH_RSS_*` bits).
    pub rss_hash_functions: u64,
    /// The smallest MTU.
    pub min_mtu: u16,
    /// The largest MTU.
    pub max_mtu: u16,
    /// The kernel interface index, when the port has one (tap, af_packet).
    pub if_index: Option<u32>,
    /// TX offloads the device offers (`RTE_ETH_TX_OFFLOAD_*` bits).
    pub tx_offloads: u64,
}

/// How a device cuts encapsulated TCP segments itself: its tunnel TSO (ADR 0056). lace's
/// encapsulation is one outer IPv6 header; DPDK names the offloads that cut behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelTso {
    /// IP in IP (`RTE_ETH_TX_OFFLOAD_IPIP_TNL_TSO`): an l3 network's segments.
    pub ipip: bool,
    /// Any IP tunnel (`RTE_ETH_TX_OFFLOAD_IP_TNL_TSO`): an l2 network's bridged frames too.
    pub generic: bool,
}

impl TunnelTso {
    /// What every tunnel TSO needs besides the tunnel: TCP segmentation, and the TCP and
    /// inner IPv4 header checksums of each piece.
    const BASE: u64 = (sys::RTE_ETH_TX_OFFLOAD_TCP_TSO
        | sys::RTE_ETH_TX_OFFLOAD_TCP_CKSUM
        | sys::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) as u64;
    const IPIP: u64 = sys::RTE_ETH_TX_OFFLOAD_IPIP_TNL_TSO as u64;
    const GENERIC: u64 = sys::RTE_ETH_TX_OFFLOAD_IP_TNL_TSO as u64;

    /// The tunnel TSO a device offering `tx_offloads` has, if any.
    pub fn of(tx_offloads: u64) -> Option<TunnelTso> {
        let t = TunnelTso {
            ipip: tx_offloads & Self::IPIP != 0,
            generic: tx_offloads & Self::GENERIC != 0,
        };
        (tx_offloads & Self::BASE == Self::BASE && (t.ipip || t.generic)).then_some(t)
    }

    /// The offloads to enable ([`PortConfig::tx_offloads`]).
    pub fn offloads(self) -> u64 {
        let tunnel = |on: bool, bit: u64| if on { bit } else { 0 };
        Self::BASE | tunnel(self.ipip, Self::IPIP) | tunnel(self.generic, Self::GENERIC)
    }

    /// The mbuf's tunnel type for segment `h` (`RTE_MBUF_F_TX_TUNNEL_*`): IP in IP where the
    /// device has it (the type NICs know best), the generic IP tunnel otherwise and for a
    /// bridged frame; `None` when the device has neither for it.
    pub(super) fn tunnel_flag(self, h: &TsoHeaders) -> Option<u64> {
        if self.ipip && !h.bridged() {
            Some(sys::RTE_MBUF_F_TX_TUNNEL_IPIP)
        } else if self.generic {
            Some(sys::RTE_MBUF_F_TX_TUNNEL_IP)
        } else {
            None
        }
    }
}

/// Where a port came from, which decides what detaching it undoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Existed before we looked it up (EAL `--vdev`/`-a`, a PCI NIC): dropping only stops it.
    Existing,
    /// Hot-plugged by us: dropping stops, closes and removes it.
    Attached,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Unconfigured,
    Configured,
    Started,
    Closed,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Unconfigured => "unconfigured",
            State::Configured => "configured and stopped",
            State::Started => "started",
            State::Closed => "closed",
        }
    }
}

/// Ports owned by a [`Port`] handle in this process.
static OWNED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

fn owned() -> MutexGuard<'static, BTreeSet<u16>> {
    // Each update is a single insert or remove; a poisoned set is still consistent.
    OWNED.lock().unwrap_or_else(|p| p.into_inner())
}

/// An Ethernet port, owned: at most one `Port` exists per DPDK port in the process. Control
/// calls take `&mut self`; counters and link state take `&self`. Queue handles
/// ([`RxQueue`], [`TxQueue`]) keep the port's DPDK state alive; while any exists, the port
/// cannot be reconfigured, stopped or detached.
///
/// Dropping a port that this process attached ([`Port::attach_vdev`], [`Port::from_rings`])
/// stops, closes and removes the device once the last queue handle is gone; dropping one found
/// by [`Port::by_name`] only stops it, so it can be looked up again.
pub struct Port {
    inner: Arc<PortInner>,
}

struct PortInner {
    id: u16,
    name: String,
    origin: Origin,
    state: State,
    rx_queues: u16,
    tx_queues: u16,
    /// `rx_taken[q]`: an RxQueue handle for queue q exists.
    rx_taken: Box<[AtomicBool]>,
    tx_taken: Box<[AtomicBool]>,
    /// The pool the RX queues fill from, kept alive while the driver may hold its mbufs.
    pool: Option<Mempool>,
    /// The rings of a ring-backed port, kept alive while the driver uses them.
    _rings: Vec<Ring>,
    _live: Live,
}

impl Port {
    /// The names of every Ethernet port DPDK knows, in port-id order.
    pub fn names(_eal: &Eal) -> Vec<String> {
        let mut names = Vec::new();
        // SAFETY: rte_eth_find_next only reads the ethdev table; the EAL is running.
        let mut id = unsafe { sys::rte_eth_find_next(0) };
        while u32::from(id) < sys::RTE_MAX_ETHPORTS {
            if let Some(name) = port_name(id) {
                names.push(name);
            }
            // SAFETY: as above.
            id = unsafe { sys::rte_eth_find_next(id + 1) };
        }
        names
    }

    /// The existing port called `name` (a PCI address such as `0000:3b:00.0`, or a vdev given
    /// to the EAL with `--vdev`). Fails with [`Error::PortNotFound`] (listing the ports there
    /// are) or [`Error::PortInUse`] when another `Port` owns it.
    pub fn by_name(eal: &Eal, name: &str) -> Result<Port> {
        let id = find_port(eal, name)?;
        Port::claim(eal, id, name.to_owned(), Origin::Existing, Vec::new())
    }

    /// Hot-plugs a virtual device (`rte_dev_probe`) and returns its port. `devargs` is the
    /// device name, which starts with the driver's name, then its arguments:
    /// `net_null0`, `net_tap0,iface=lace0`, `net_af_packet0,iface=eth0`,
    /// `net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap`. Workers polling other ports are not
    /// disturbed. A wrong driver name or argument fails with [`Error::VdevProbe`].
    pub fn attach_vdev(eal: &Eal, devargs: &str) -> Result<Port> {
        let name = devargs.split(',').next().unwrap_or_default().trim();
        c_string("vdev name", name, sys::RTE_DEV_NAME_MAX_LEN as usize - 1)?;
        let cargs = c_string("vdev arguments", devargs, 4095)?;
        // SAFETY: cargs is a valid NUL-terminated string DPDK parses and copies; the EAL is
        // running. DPDK serialises hot-plug internally.
        let ret = unsafe { sys::rte_dev_probe(cargs.as_ptr()) };
        if ret < 0 {
            let errno = -ret;
            // Drivers' probe functions mostly return -1, which is not an errno.
            let reason = if errno == 1 {
                "the driver refused the device".to_owned()
            } else {
                strerror(errno)
            };
            return Err(Error::VdevProbe {
                devargs: devargs.to_owned(),
                errno,
                reason,
                fix: match errno {
                    libc::EEXIST => {
                        "a device with this name is already attached: detach it or pick another \
                         name (net_null1, ...)"
                    }
                    // EFAULT: rte_devargs_parse found no bus whose driver matches the name.
                    libc::EFAULT | libc::ENODEV | libc::ENOTSUP | libc::ENOENT => {
                        "no driver matches the name: it must start with a vdev driver's name \
                         (net_null, net_ring, net_tap, net_af_packet, net_af_xdp, net_pcap)"
                    }
                    _ => {
                        "the driver rejected its arguments: the DPDK log above names the bad key \
                         or value"
                    }
                },
            });
        }
        let id = match find_port(eal, name) {
            Ok(id) => id,
            Err(_) => {
                // Probed, but not an Ethernet device (or named differently): undo the probe.
                remove_vdev(name);
                return Err(Error::VdevProbe {
                    devargs: devargs.to_owned(),
                    errno: libc::ENODEV,
                    reason: strerror(libc::ENODEV),
                    fix: "the device is not an Ethernet port: attach a net_* driver",
                });
            }
        };
        Port::claim(eal, id, name.to_owned(), Origin::Attached, Vec::new())
    }

    /// Creates a port backed by rings (`rte_eth_from_rings`): RX queue `i` dequeues from
    /// `rx[i]`, TX queue `i` enqueues into `tx[i]`. Two ports with each other's rings are a
    /// virtual cable; one port with the same rings for both is a loopback. The port is named
    /// `net_ring_<name>` and configured like any other (queue counts must match the rings).
    pub fn from_rings(eal: &Eal, name: &str, rx: &[Ring], tx: &[Ring]) -> Result<Port> {
        // DPDK prefixes "net_ring_" and truncates at RTE_RING_NAMESIZE.
        let cname = c_string(
            "ring port name",
            name,
            Ring::MAX_NAME_LEN - "net_ring_".len(),
        )?;
        if rx.is_empty() || tx.is_empty() {
            return Err(Error::InvalidArgument {
                what: "ring port queues",
                value: format!("{} rx, {} tx", rx.len(), tx.len()),
                why: "a ring port needs at least one RX and one TX ring".to_owned(),
            });
        }
        let rx_ptrs: Vec<*mut sys::rte_ring> = rx.iter().map(Ring::as_ptr).collect();
        let tx_ptrs: Vec<*mut sys::rte_ring> = tx.iter().map(Ring::as_ptr).collect();
        // SAFETY: the name is NUL-terminated; the ring pointers are alive and stay alive while
        // the port exists (PortInner keeps clones of the Rings); DPDK copies the arrays.
        let ret = unsafe {
            sys::rte_eth_from_rings(
                cname.as_ptr(),
                rx_ptrs.as_ptr(),
                rx_ptrs.len() as c_uint,
                tx_ptrs.as_ptr(),
                tx_ptrs.len() as c_uint,
                sys::SOCKET_ID_ANY as c_uint,
            )
        };
        let full_name = format!("net_ring_{name}");
        let Ok(id) = u16::try_from(ret) else {
            let errno = super::error::rte_errno();
            return Err(Error::VdevProbe {
                devargs: full_name,
                errno,
                reason: strerror(errno),
                fix: match errno {
                    libc::EINVAL => {
                        "a device with this name may already exist, or too many rings were \
                         given (at most 16 per direction): pick a unique name"
                    }
                    e => fix_for(e),
                },
            });
        };
        let rings = rx.iter().chain(tx).cloned().collect();
        Port::claim(eal, id, full_name, Origin::Attached, rings)
    }

    fn claim(eal: &Eal, id: u16, name: String, origin: Origin, rings: Vec<Ring>) -> Result<Port> {
        let live = Live::new(eal)?;
        if !owned().insert(id) {
            return Err(Error::PortInUse { name });
        }
        Ok(Port {
            inner: Arc::new(PortInner {
                id,
                name,
                origin,
                state: State::Unconfigured,
                rx_queues: 0,
                tx_queues: 0,
                rx_taken: Box::new([]),
                tx_taken: Box::new([]),
                pool: None,
                _rings: rings,
                _live: live,
            }),
        })
    }

    /// DPDK's port id.
    pub fn id(&self) -> u16 {
        self.inner.id
    }

    /// The port's name (its device name: `net_tap0`, `0000:3b:00.0`, `net_ring_a`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether the port is started.
    pub fn is_started(&self) -> bool {
        self.inner.state == State::Started
    }

    /// RX queue handles and TX queue handles alive.
    pub fn queues_in_use(&self) -> usize {
        Arc::strong_count(&self.inner) - 1
    }

    /// The NUMA socket the device is attached to, when known.
    pub fn socket(&self) -> Option<u32> {
        // SAFETY: the port id is valid while we own the port.
        let s = unsafe { sys::rte_eth_dev_socket_id(self.inner.id) };
        u32::try_from(s).ok()
    }

    /// What the device offers.
    pub fn info(&self) -> Result<PortInfo> {
        let info = self.dev_info()?;
        let driver = if info.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: a non-null driver_name is the PMD's static NUL-terminated name.
            unsafe { CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        Ok(PortInfo {
            driver,
            max_rx_queues: info.max_rx_queues,
            max_tx_queues: info.max_tx_queues,
            rss_hash_functions: info.flow_type_rss_offloads,
            min_mtu: info.min_mtu,
            max_mtu: info.max_mtu,
            if_index: (info.if_index != 0).then_some(info.if_index),
            tx_offloads: info.tx_offload_capa,
        })
    }

    fn dev_info(&self) -> Result<sys::rte_eth_dev_info> {
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: info is a valid, writable rte_eth_dev_info; the port id is valid.
        let ret = unsafe { sys::rte_eth_dev_info_get(self.inner.id, &mut info) };
        self.check("rte_eth_dev_info_get", ret)?;
        Ok(info)
    }

    /// Configures the port (`rte_eth_dev_configure` and the queue setups), filling RX queues
    /// from `pool`. The port must be stopped and no queue handle alive. With more than one RX
    /// queue, RSS spreads flows over them (see [`PortConfig::rss_hash_functions`]).
    pub fn configure(&mut self, config: &PortConfig, pool: &Mempool) -> Result<()> {
        let info = self.dev_info()?;
        let inner = self.exclusive("configure")?;
        if inner.state == State::Started {
            return Err(inner.invalid_state("configure", "stop it first"));
        }
        for (direction, requested, max) in [
            ("rx", config.rx_queues, info.max_rx_queues),
            ("tx", config.tx_queues, info.max_tx_queues),
        ] {
            if requested == 0 || requested > max {
                return Err(Error::TooManyQueues {
                    port: inner.name.clone(),
                    direction,
                    requested,
                    max,
                });
            }
        }
        let mut conf = sys::rte_eth_conf::default();
        let rss = config.rss_hash_functions & info.flow_type_rss_offloads;
        if config.rx_queues > 1 && rss != 0 {
            conf.rxmode.mq_mode = sys::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss;
        }
        if let Some(mtu) = config.mtu {
            conf.rxmode.mtu = u32::from(mtu);
        }
        conf.intr_conf.set_rxq(u32::from(config.rx_interrupts));
        let missing = config.tx_offloads & !info.tx_offload_capa;
        if missing != 0 {
            return Err(Error::InvalidArgument {
                what: "TX offloads",
                value: format!("{:#x}", config.tx_offloads),
                why: format!(
                    "port {}: the device does not offer {missing:#x} (it offers {:#x})",
                    inner.name, info.tx_offload_capa
                ),
            });
        }
        conf.txmode.offloads = config.tx_offloads;
        let id = inner.id;
        // SAFETY: the port is stopped and no queue handle exists (exclusive), so no thread
        // polls it; conf is a valid, zero-initialised rte_eth_conf DPDK copies.
        let ret =
            unsafe { sys::rte_eth_dev_configure(id, config.rx_queues, config.tx_queues, &conf) };
        inner.check("rte_eth_dev_configure", ret)?;
        // A failure past this point leaves the port configured with unusable queues.
        inner.state = State::Unconfigured;
        // Held from the first RX queue setup on: drivers may fill descriptors from it at once.
        inner.pool = Some(pool.clone());
        let (mut nb_rx, mut nb_tx) = (config.rx_descriptors, config.tx_descriptors);
        // SAFETY: the port id is valid; both pointers are to live u16s.
        let ret = unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut nb_rx, &mut nb_tx) };
        inner.check("rte_eth_dev_adjust_nb_rx_tx_desc", ret)?;
        // SAFETY: the port id is valid.
        let socket = unsafe { sys::rte_eth_dev_socket_id(id) } as c_uint;
        for q in 0..config.rx_queues {
            // SAFETY: the port is configured with rx_queues queues and not started; NULL
            // rx_conf selects the driver's defaults; the pool is alive, holds pktmbufs, and is
            // kept alive by `inner.pool` while the driver may hold its mbufs.
            let ret = unsafe {
                sys::rte_eth_rx_queue_setup(id, q, nb_rx, socket, std::ptr::null(), pool.as_ptr())
            };
            inner.check("rte_eth_rx_queue_setup", ret)?;
        }
        for q in 0..config.tx_queues {
            // SAFETY: as above; NULL tx_conf selects the driver's defaults.
            let ret =
                unsafe { sys::rte_eth_tx_queue_setup(id, q, nb_tx, socket, std::ptr::null()) };
            inner.check("rte_eth_tx_queue_setup", ret)?;
        }
        inner.rx_queues = config.rx_queues;
        inner.tx_queues = config.tx_queues;
        inner.rx_taken = (0..config.rx_queues)
            .map(|_| AtomicBool::new(false))
            .collect();
        inner.tx_taken = (0..config.tx_queues)
            .map(|_| AtomicBool::new(false))
            .collect();
        inner.state = State::Configured;
        self.set_promiscuous(config.promiscuous)
    }

    /// Starts the port (`rte_eth_dev_start`); it must be configured.
    pub fn start(&mut self) -> Result<()> {
        let inner = self.exclusive("start")?;
        match inner.state {
            State::Configured => {}
            State::Started => return Ok(()),
            _ => return Err(inner.invalid_state("start", "configure it first")),
        }
        // SAFETY: the port is configured with all queues set up; no queue handle exists.
        let ret = unsafe { sys::rte_eth_dev_start(inner.id) };
        inner.check("rte_eth_dev_start", ret)?;
        inner.state = State::Started;
        Ok(())
    }

    /// Stops the port (`rte_eth_dev_stop`). Refused with [`Error::QueuesInUse`] while queue
    /// handles exist, so no worker polls a stopped queue.
    pub fn stop(&mut self) -> Result<()> {
        let inner = self.exclusive("stop")?;
        inner.stop()
    }

    /// Stops, closes and removes the device, reporting any failure (dropping does the same
    /// silently). Refused with [`Error::QueuesInUse`] while queue handles exist; the port is
    /// then detached when the last of them is dropped.
    pub fn detach(self) -> Result<()> {
        let count = self.queues_in_use();
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => inner.shut_down(true),
            Err(inner) => Err(Error::QueuesInUse {
                port: inner.name.clone(),
                op: "detach",
                count,
            }),
        }
    }

    /// The handle for RX queue `queue`; the port must be started. Each queue has one handle at
    /// a time: a second request fails with [`Error::QueueUnavailable`] until the first handle
    /// is dropped.
    pub fn rx_queue(&self, queue: u16) -> Result<RxQueue> {
        self.take_queue("rx", queue)?;
        Ok(RxQueue {
            port: Arc::clone(&self.inner),
            port_id: self.inner.id,
            queue,
            interrupts: None,
        })
    }

    /// The handle for TX queue `queue`; as [`Port::rx_queue`].
    pub fn tx_queue(&self, queue: u16) -> Result<TxQueue> {
        self.take_queue("tx", queue)?;
        Ok(TxQueue {
            port: Arc::clone(&self.inner),
            port_id: self.inner.id,
            queue,
        })
    }

    fn take_queue(&self, direction: &'static str, queue: u16) -> Result<()> {
        let inner = &*self.inner;
        if inner.state != State::Started {
            return Err(inner.invalid_state("take a queue", "start it first"));
        }
        let (taken, count) = match direction {
            "rx" => (&inner.rx_taken, inner.rx_queues),
            _ => (&inner.tx_taken, inner.tx_queues),
        };
        let unavailable = |why: String| Error::QueueUnavailable {
            port: inner.name.clone(),
            direction,
            queue,
            why,
        };
        let Some(flag) = taken.get(usize::from(queue)) else {
            return Err(unavailable(format!(
                "the port has {count} {direction} queue(s); configure more"
            )));
        };
        if flag.swap(true, Ordering::AcqRel) {
            return Err(unavailable(
                "another handle owns it; drop that handle first".to_owned(),
            ));
        }
        Ok(())
    }

    /// The port's MAC address.
    pub fn mac(&self) -> Result<MacAddr> {
        let mut addr = sys::rte_ether_addr::default();
        // SAFETY: addr is a valid, writable rte_ether_addr; the port id is valid.
        let ret = unsafe { sys::rte_eth_macaddr_get(self.inner.id, &mut addr) };
        self.check("rte_eth_macaddr_get", ret)?;
        Ok(MacAddr(addr.addr_bytes))
    }

    /// Sets the port's MAC address.
    pub fn set_mac(&mut self, mac: MacAddr) -> Result<()> {
        let mut addr = sys::rte_ether_addr { addr_bytes: mac.0 };
        // SAFETY: addr is a valid rte_ether_addr DPDK copies; the port id is valid.
        let ret = unsafe { sys::rte_eth_dev_default_mac_addr_set(self.inner.id, &mut addr) };
        self.check("rte_eth_dev_default_mac_addr_set", ret)
    }

    /// The port's MTU.
    pub fn mtu(&self) -> Result<u16> {
        let mut mtu = 0u16;
        // SAFETY: mtu is a valid, writable u16; the port id is valid.
        let ret = unsafe { sys::rte_eth_dev_get_mtu(self.inner.id, &mut mtu) };
        self.check("rte_eth_dev_get_mtu", ret)?;
        Ok(mtu)
    }

    /// Sets the MTU. Some drivers accept this only while the port is stopped.
    pub fn set_mtu(&mut self, mtu: u16) -> Result<()> {
        // SAFETY: the port id is valid; DPDK validates the value against the device's limits.
        let ret = unsafe { sys::rte_eth_dev_set_mtu(self.inner.id, mtu) };
        self.check("rte_eth_dev_set_mtu", ret)
    }

    /// Turns promiscuous mode on or off. Drivers without the setting (ring, null) are left
    /// as they are: they deliver every frame anyway.
    pub fn set_promiscuous(&mut self, on: bool) -> Result<()> {
        // SAFETY: the port id is valid; the call only changes the device's RX filter.
        let ret = unsafe {
            if on {
                sys::rte_eth_promiscuous_enable(self.inner.id)
            } else {
                sys::rte_eth_promiscuous_disable(self.inner.id)
            }
        };
        if ret == -libc::ENOTSUP {
            return Ok(());
        }
        self.check(
            if on {
                "rte_eth_promiscuous_enable"
            } else {
                "rte_eth_promiscuous_disable"
            },
            ret,
        )
    }

    /// Whether promiscuous mode is on.
    pub fn promiscuous(&self) -> bool {
        // SAFETY: the port id is valid; reads a flag.
        unsafe { sys::rte_eth_promiscuous_get(self.inner.id) == 1 }
    }

    /// The RSS hash functions the port uses now (`RTE_ETH_RSS_*` bits); 0 when RSS is off.
    pub fn rss_hash_functions(&self) -> Result<u64> {
        let mut conf = sys::rte_eth_rss_conf::default();
        // SAFETY: conf is a valid rte_eth_rss_conf; rss_key is NULL, so DPDK does not copy the
        // key out; the port id is valid.
        let ret = unsafe { sys::rte_eth_dev_rss_hash_conf_get(self.inner.id, &mut conf) };
        if ret == -libc::ENOTSUP {
            return Ok(0);
        }
        self.check("rte_eth_dev_rss_hash_conf_get", ret)?;
        Ok(conf.rss_hf)
    }

    /// The counters. Safe to call while workers poll the port.
    pub fn stats(&self) -> Result<PortStats> {
        let mut s = sys::rte_eth_stats::default();
        // SAFETY: s is a valid, writable rte_eth_stats; the port id is valid. Drivers read
        // their counters without stopping the datapath, which DPDK supports.
        let ret = unsafe { sys::rte_eth_stats_get(self.inner.id, &mut s) };
        self.check("rte_eth_stats_get", ret)?;
        Ok(PortStats {
            rx_packets: s.ipackets,
            tx_packets: s.opackets,
            rx_bytes: s.ibytes,
            tx_bytes: s.obytes,
            rx_missed: s.imissed,
            rx_errors: s.ierrors,
            tx_errors: s.oerrors,
            rx_no_mbuf: s.rx_nombuf,
        })
    }

    /// Zeroes the counters.
    pub fn reset_stats(&self) -> Result<()> {
        // SAFETY: the port id is valid.
        let ret = unsafe { sys::rte_eth_stats_reset(self.inner.id) };
        self.check("rte_eth_stats_reset", ret)
    }

    /// The link state, without waiting for negotiation.
    pub fn link(&self) -> Result<Link> {
        let mut link = sys::rte_eth_link::default();
        // SAFETY: link is a valid, writable rte_eth_link; the port id is valid.
        let ret = unsafe { sys::rte_eth_link_get_nowait(self.inner.id, &mut link) };
        self.check("rte_eth_link_get_nowait", ret)?;
        let speed = link.link_speed;
        Ok(Link {
            up: u32::from(link.link_status()) == sys::RTE_ETH_LINK_UP,
            speed_mbps: (speed != sys::RTE_ETH_SPEED_NUM_NONE
                && speed != sys::RTE_ETH_SPEED_NUM_UNKNOWN)
                .then_some(speed),
            full_duplex: u32::from(link.link_duplex()) == sys::RTE_ETH_LINK_FULL_DUPLEX,
            autoneg: u32::from(link.link_autoneg()) == sys::RTE_ETH_LINK_AUTONEG,
        })
    }

    fn check(&self, call: &'static str, ret: i32) -> Result<()> {
        self.inner.check(call, ret)
    }

    /// The port's state for a call that needs no queue handle alive.
    fn exclusive(&mut self, op: &'static str) -> Result<&mut PortInner> {
        let count = self.queues_in_use();
        let name = self.inner.name.clone();
        Arc::get_mut(&mut self.inner).ok_or(Error::QueuesInUse {
            port: name,
            op,
            count,
        })
    }
}

impl fmt::Debug for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Port")
            .field("id", &self.inner.id)
            .field("name", &self.inner.name)
            .field("state", &self.inner.state.name())
            .field("rx_queues", &self.inner.rx_queues)
            .field("tx_queues", &self.inner.tx_queues)
            .field("queues_in_use", &self.queues_in_use())
            .finish()
    }
}

impl PortInner {
    fn check(&self, call: &'static str, ret: i32) -> Result<()> {
        if ret >= 0 {
            return Ok(());
        }
        let errno = -ret;
        Err(Error::Ethdev {
            port: self.name.clone(),
            call,
            errno,
            reason: strerror(errno),
            fix: fix_for(errno),
        })
    }

    fn invalid_state(&self, op: &'static str, fix: &'static str) -> Error {
        Error::InvalidState {
            port: self.name.clone(),
            op,
            state: self.state.name(),
            fix,
        }
    }

    fn stop(&mut self) -> Result<()> {
        if self.state != State::Started {
            return Ok(());
        }
        // SAFETY: callers hold the port exclusively (no queue handle exists), so no thread is
        // polling it.
        let ret = unsafe { sys::rte_eth_dev_stop(self.id) };
        self.check("rte_eth_dev_stop", ret)?;
        self.state = State::Configured;
        Ok(())
    }

    /// Stops; with `remove`, also closes the port and removes its device. Idempotent.
    fn shut_down(&mut self, remove: bool) -> Result<()> {
        if self.state == State::Closed {
            return Ok(());
        }
        let stopped = self.stop();
        if !remove {
            return stopped;
        }
        // The device must be looked up before close releases the port.
        let device = self.device();
        // SAFETY: the port is stopped (or failed to stop, which leaves the hardware to close)
        // and exclusively held; close releases its queues, which hold no Rust-owned memory
        // besides the pool and rings this value still keeps alive.
        let ret = unsafe { sys::rte_eth_dev_close(self.id) };
        self.state = State::Closed;
        let closed = self.check("rte_eth_dev_close", ret);
        let removed = match device {
            Some(dev) => {
                // SAFETY: dev is the rte_device of this port, still registered on its bus
                // (close releases the ethdev, not the device); removed exactly once, as the
                // state is Closed now.
                let ret = unsafe { sys::rte_dev_remove(dev.as_ptr()) };
                if ret < 0 {
                    Err(Error::VdevRemove {
                        name: self.name.clone(),
                        errno: -ret,
                        reason: strerror(-ret),
                        fix: fix_for(-ret),
                    })
                } else {
                    Ok(())
                }
            }
            None => Ok(()),
        };
        stopped.and(closed).and(removed)
    }

    fn device(&self) -> Option<NonNull<sys::rte_device>> {
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: info is valid and writable; the port id is valid until close.
        let ret = unsafe { sys::rte_eth_dev_info_get(self.id, &mut info) };
        if ret < 0 {
            return None;
        }
        NonNull::new(info.device)
    }
}

impl Drop for PortInner {
    fn drop(&mut self) {
        // Errors have nowhere to go from drop; `Port::detach` reports them.
        let _ = self.shut_down(self.origin == Origin::Attached);
        owned().remove(&self.id);
    }
}

/// The port id of `name`, or [`Error::PortNotFound`].
fn find_port(eal: &Eal, name: &str) -> Result<u16> {
    let cname = c_string("port name", name, sys::RTE_ETH_NAME_MAX_LEN as usize - 1)?;
    let mut id = 0u16;
    // SAFETY: cname is NUL-terminated; id is a valid, writable u16.
    let ret = unsafe { sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
    if ret < 0 {
        return Err(Error::PortNotFound {
            name: name.to_owned(),
            known: Port::names(eal).join(", "),
        });
    }
    Ok(id)
}

fn port_name(id: u16) -> Option<String> {
    let mut buf = [0 as c_char; sys::RTE_ETH_NAME_MAX_LEN as usize];
    // SAFETY: buf has RTE_ETH_NAME_MAX_LEN bytes, the size DPDK writes at most (with the NUL).
    let ret = unsafe { sys::rte_eth_dev_get_name_by_port(id, buf.as_mut_ptr()) };
    if ret < 0 {
        return None;
    }
    // SAFETY: on success buf holds a NUL-terminated name.
    Some(
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Undoes a probe that produced no Ethernet port.
fn remove_vdev(name: &str) {
    let (Ok(bus), Ok(dev)) = (c_string("bus", "vdev", 16), c_string("vdev name", name, 63)) else {
        return;
    };
    // SAFETY: both strings are NUL-terminated; the device was probed by us and nothing uses it.
    unsafe { sys::rte_eal_hotplug_remove(bus.as_ptr(), dev.as_ptr()) };
}

/// The handle a worker polls one RX queue with. Exactly one exists per queue; it keeps the
/// port started (see [`Port::stop`]).
pub struct RxQueue {
    port: Arc<PortInner>,
    port_id: u16,
    queue: u16,
    /// The set its interrupt is in, once [`RxQueue::watch_interrupts`] succeeded.
    interrupts: Option<RxInterrupts>,
}

impl RxQueue {
    /// Receives up to `burst`'s free capacity of packets (`rte_eth_rx_burst`), appending them,
    /// and returns how many arrived (0 when none are waiting or the mempool ran dry).
    #[inline]
    pub fn rx_burst<const N: usize>(&mut self, burst: &mut Burst<N>) -> usize {
        let (spare, room) = burst.spare_raw();
        if room == 0 {
            return 0;
        }
        // SAFETY: this handle is the only one for (port, queue) and `&mut self` keeps it on one
        // thread; the port is started and cannot stop while the handle lives. `spare` has
        // `room` (<= u16::MAX, checked by Burst) writable slots; DPDK writes at most that many
        // owned mbuf pointers and returns how many.
        let n = unsafe { sys::lace_rte_eth_rx_burst(self.port_id, self.queue, spare, room as u16) };
        // SAFETY: DPDK initialised n <= room slots with mbufs it handed over.
        unsafe { burst.assume_pushed(usize::from(n)) };
        usize::from(n)
    }

    /// The port's id.
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// The queue's id.
    pub fn queue_id(&self) -> u16 {
        self.queue
    }

    /// Adds the queue's interrupt to `set`, so that a packet arriving while it is armed
    /// ([`RxQueue::arm`]) makes `set` readable. False when the port has no RX interrupts (not
    /// configured with [`PortConfig::rx_interrupts`], or a driver without them: memif, pcap,
    /// null, ring, af_packet): the queue must then be polled.
    pub fn watch_interrupts(&mut self, set: &RxInterrupts) -> bool {
        if self.interrupts.is_some() {
            return true;
        }
        // SAFETY: the port is started and this handle owns the queue; set's epoll fd is open
        // (the Arc in `set`, cloned below, keeps it open until the unwatch in drop).
        let ret = unsafe { sys::lace_rx_intr_watch(self.port_id, self.queue, set.as_raw_fd()) };
        if ret != 0 {
            return false;
        }
        self.interrupts = Some(set.clone());
        true
    }

    /// Whether the queue's interrupt is watched (it can wake a sleeper).
    pub fn wakes(&self) -> bool {
        self.interrupts.is_some()
    }

    /// Enables the queue's interrupt before its poller sleeps. Drivers whose interrupt is
    /// always on (a tap's queue descriptor) have nothing to enable. On a failure the queue is
    /// unwatched (it is polled from then on) and false returned.
    pub fn arm(&mut self) -> bool {
        if self.interrupts.is_none() {
            return false;
        }
        // SAFETY: the port is started and this handle owns the queue.
        let ret = unsafe { sys::rte_eth_dev_rx_intr_enable(self.port_id, self.queue) };
        if ret == 0 || ret == -libc::ENOTSUP {
            return true;
        }
        tracing::warn!(port = %self.port.name, queue = self.queue,
            "enabling the RX interrupt: {}; the queue is polled instead", strerror(-ret));
        self.unwatch();
        false
    }

    /// Disables the queue's interrupt once its poller is awake (a NIC would otherwise raise
    /// one per packet burst while it polls).
    pub fn disarm(&mut self) {
        if self.interrupts.is_some() {
            // SAFETY: the port is started and this handle owns the queue; ENOTSUP (nothing to
            // disable) and other failures leave at worst a spurious wake-up.
            unsafe { sys::rte_eth_dev_rx_intr_disable(self.port_id, self.queue) };
        }
    }

    fn unwatch(&mut self) {
        if let Some(set) = self.interrupts.take() {
            // SAFETY: undoes the watch above on the same (port, queue, epoll fd); the port is
            // still started (this handle keeps it so) and set's fd is still open.
            unsafe {
                sys::rte_eth_dev_rx_intr_disable(self.port_id, self.queue);
                sys::lace_rx_intr_unwatch(self.port_id, self.queue, set.as_raw_fd());
            }
        }
    }
}

impl Drop for RxQueue {
    fn drop(&mut self) {
        self.unwatch();
        if let Some(flag) = self.port.rx_taken.get(usize::from(self.queue)) {
            flag.store(false, Ordering::Release);
        }
    }
}

impl fmt::Debug for RxQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RxQueue")
            .field("port", &self.port.name)
            .field("queue", &self.queue)
            .finish()
    }
}

/// An epoll set of RX queue interrupts ([`RxQueue::watch_interrupts`]). Readable when an armed
/// queue in it received; add its fd to the sleeper's own epoll set and [`RxInterrupts::drain`]
/// it after waking. Clones share the set; it closes with the last clone (watching queues hold
/// one).
#[derive(Debug, Clone)]
pub struct RxInterrupts(Arc<OwnedFd>);

impl RxInterrupts {
    /// A new, empty set.
    pub fn new() -> io::Result<RxInterrupts> {
        // SAFETY: no pointers; a non-negative result is a new fd we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        Ok(RxInterrupts(Arc::new(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Consumes the interrupts that fired, each as its kind needs (a vfio or uio counter is
    /// read; a tap's queue descriptor is left to `rx_burst`), without waiting. Returns how many
    /// there were.
    pub fn drain(&self) -> usize {
        // SAFETY: the fd is an open epoll set whose entries DPDK added (each carries its own
        // rte_epoll_event, owned by the port's interrupt handle while watched).
        let n = unsafe { sys::lace_rx_intr_drain(self.0.as_raw_fd()) };
        usize::try_from(n).unwrap_or(0)
    }
}

impl AsRawFd for RxInterrupts {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// The handle a worker sends on one TX queue with. Exactly one exists per queue; it keeps the
/// port started (see [`Port::stop`]).
pub struct TxQueue {
    port: Arc<PortInner>,
    port_id: u16,
    queue: u16,
}

impl TxQueue {
    /// Readies `m`, whose offload metadata asks the device for work (a tunnel TSO,
    /// [`Mbuf::set_tunnel_tso`]), for this queue: DPDK's consistency check of the metadata,
    /// then the driver's own preparation (`rte_eth_tx_prepare`: Intel NICs want the TSO
    /// pseudo-header checksum without the length). False when the metadata or the driver
    /// refuses it; the packet must then not be sent as it is.
    pub fn prepare(&mut self, m: &mut Mbuf) -> bool {
        let mut raw = m.as_raw();
        // SAFETY: `raw` is the valid mbuf `m` owns, read only.
        if unsafe { sys::lace_rte_validate_tx_offload(raw) } != 0 {
            return false;
        }
        // SAFETY: as in tx_burst for the handle and the port; one valid mbuf we own, which
        // the driver may modify (its headers) but does not take.
        unsafe { sys::lace_rte_eth_tx_prepare(self.port_id, self.queue, &mut raw, 1) == 1 }
    }

    /// Sends the mbufs of `burst` from the front (`rte_eth_tx_burst`) and returns how many the
    /// driver took. Those it refused (queue full) stay in `burst`, in order: retry them, or
    /// drop and count them (`burst.clear()` frees them and returns the count).
    #[inline]
    pub fn tx_burst<const N: usize>(&mut self, burst: &mut Burst<N>) -> usize {
        let (pkts, len) = burst.filled_raw();
        if len == 0 {
            return 0;
        }
        // SAFETY: as in RxQueue::rx_burst for the handle and the port; `pkts[..len]` are owned
        // mbufs (len <= u16::MAX). The driver takes ownership of the first n it returns.
        let n = unsafe { sys::lace_rte_eth_tx_burst(self.port_id, self.queue, pkts, len as u16) };
        let n = usize::from(n).min(len);
        // SAFETY: the first n mbufs now belong to the driver.
        unsafe { burst.forget_front(n) };
        n
    }

    /// The port's id.
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// The queue's id.
    pub fn queue_id(&self) -> u16 {
        self.queue
    }
}

impl Drop for TxQueue {
    fn drop(&mut self) {
        if let Some(flag) = self.port.tx_taken.get(usize::from(self.queue)) {
            flag.store(false, Ordering::Release);
        }
    }
}

impl fmt::Debug for TxQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxQueue")
            .field("port", &self.port.name)
            .field("queue", &self.queue)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(l2: u16) -> TsoHeaders {
        TsoHeaders {
            outer_l2: 14,
            outer_l3: 40,
            l2,
            l3: 20,
            l4: 32,
            v4: true,
            size: 1400,
        }
    }

    #[test]
    fn tunnel_tso_is_what_the_device_offers_in_full() {
        let base = TunnelTso::BASE;
        let (ipip, generic) = (TunnelTso::IPIP, TunnelTso::GENERIC);
        // Nothing without TCP segmentation and both checksums, nothing without a tunnel.
        assert_eq!(TunnelTso::of(0), None);
        assert_eq!(TunnelTso::of(base), None);
        assert_eq!(TunnelTso::of(ipip | generic), None);
        assert_eq!(
            TunnelTso::of(ipip | generic | sys::RTE_ETH_TX_OFFLOAD_TCP_TSO as u64),
            None
        );
        let only_ipip = TunnelTso::of(base | ipip).unwrap();
        let both = TunnelTso::of(base | ipip | generic | 1).unwrap();
        let only_generic = TunnelTso::of(base | generic).unwrap();
        assert_eq!(only_ipip.offloads(), base | ipip);
        assert_eq!(both.offloads(), base | ipip | generic);
        assert_eq!(only_generic.offloads(), base | generic);

        // An l3 network's segment is IP in IP where the device has it; an l2 network's
        // bridged frame needs the generic tunnel.
        let (l3, l2) = (headers(0), headers(14));
        assert_eq!(
            only_ipip.tunnel_flag(&l3),
            Some(sys::RTE_MBUF_F_TX_TUNNEL_IPIP)
        );
        assert_eq!(only_ipip.tunnel_flag(&l2), None);
        assert_eq!(both.tunnel_flag(&l3), Some(sys::RTE_MBUF_F_TX_TUNNEL_IPIP));
        assert_eq!(both.tunnel_flag(&l2), Some(sys::RTE_MBUF_F_TX_TUNNEL_IP));
        assert_eq!(
            only_generic.tunnel_flag(&l3),
            Some(sys::RTE_MBUF_F_TX_TUNNEL_IP)
        );
    }
}
