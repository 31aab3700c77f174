//! The forwarder's status region: what it tells control and operators while it runs.
//!
//! The forwarder creates `lace-<name>.status` beside the tables and is its only writer; control
//! and `lace-forwarder stats` map it read-only. It carries:
//!
//! - **Liveness**: the forwarder's pid, start time and a heartbeat it bumps a few times a
//!   second, so a reader can tell a running forwarder from a stale file; and the packet buffers
//!   (mbufs) in use and in the pool, refreshed with the counters, so a leak shows.
//! - **Pod-port acknowledgements** — the answer half of the pod-port request channel. Control
//!   *requests* a port by publishing a [`crate::types::PortInfo`] with its interface name in the
//!   tables (and requests its removal by removing it); the forwarder reconciles its DPDK ports
//!   with the tables and reports each port's [`PortState`] here, tagged with the endpoint id
//!   it acted on, so control knows when a pod is plugged or why it is not. Because the request
//!   is the desired state, a restarted forwarder re-plugs every port on its own.
//! - **Counters**: per port (rx/tx packets and bytes, packets the NIC refused), per worker and
//!   pipeline stage, and per [`DropReason`]. Every counter is a `u64` that only its writer
//!   increments; readers sum worker slots.
//! - **The learn rings** — the feedback channel of l2 learning (ADR 0019): one ring of
//!   [`LEARN_SLOTS`] [`LearnEvent`] records per worker. The worker is the ring's only writer and
//!   overwrites the oldest records; it never waits for a reader. Control keeps its own cursor
//!   per ring ([`LearnCursor`]) and detects both ways of losing records: a slot overwritten
//!   while it was read (its stamp differs before and after the payload) and an overrun (the
//!   head more than a ring ahead of the cursor). Both are counted, never misread.
//! - **The node's external uplinks** (ADR 0054): each `[[uplink.external]]` entry of the
//!   forwarder's configuration, its interface name and the node's addresses there, so that
//!   control can check a static route's next hop against the node's subnets.
//! - **Neighbors that do not answer**: the uplink's next hops (gateways of external networks,
//!   underlay next hops) that traffic is waiting for and that do not resolve, refreshed every
//!   second: their routes are down.
//!
//! ```text
//!  0 header │ 4096 info (pid, heartbeat, mbufs, stage names, external uplinks)
//!    │ 8192 port slots │ worker slots …
//!    │ learn rings: per worker a head line, then its records
//! ```

use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::learn::{LearnEvent, RECORD_WORDS};
use crate::mem::Mem;
use crate::region::{Region, RegionKind, HEADER_SIZE};
use crate::types::PortId;

/// Why the forwarder dropped a packet. One counter per reason per worker.
///
/// The numbering is part of the ABI (counters are indexed by it): add reasons at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum DropReason {
    /// Headers shorter than they say, bad lengths or checksums, malformed ARP/NDP.
    Malformed = 0,
    /// Received on a port the tables do not (or no longer) describe.
    UnknownPort = 1,
    /// An EtherType the pipeline does not forward (l3 ports take IPv4, IPv6 and ARP).
    UnsupportedEthertype = 2,
    /// The port's network is not in the tables.
    NoNetwork = 3,
    /// The network's kind is not forwarded by this pipeline.
    UnsupportedNetworkKind = 4,
    /// Source MAC is not the endpoint's (anti-spoofing).
    SpoofedMac = 5,
    /// Source IP is not the endpoint's (anti-spoofing).
    SpoofedSource = 6,
    /// No route in the network (isolation, or an address nobody owns); ICMP unreachable sent.
    NoRoute = 7,
    /// A blackhole route.
    Blackhole = 8,
    /// TTL or hop limit ran out; ICMP time exceeded sent.
    TtlExceeded = 9,
    /// Larger than the path MTU; ICMP fragmentation needed / packet too big sent.
    TooBig = 10,
    /// A route to a node the tables do not know.
    UnknownNode = 11,
    /// The underlay next hop's MAC is not resolved yet; a neighbor solicitation was sent.
    NeighborUnresolved = 12,
    /// SRv6 packet to an address in our locator that is not a local SID.
    UnknownSid = 13,
    /// SRH with Segments Left ≠ 0 at a decapsulating SID, or a bad segment list (RFC 8986).
    SrhSegmentsLeft = 14,
    /// Decapsulated payload is neither IPv4 nor IPv6 (RFC 8986 §4.6: not processed).
    DecapUnsupportedInner = 15,
    /// Uplink packet not addressed to this node (its address or a local SID).
    NotForUs = 16,
    /// ARP or NDP for an address the forwarder does not answer for.
    NotGateway = 17,
    /// Addressed to the gateway but not ARP/NDP/echo (nothing listens there).
    ReceiveUnsupported = 18,
    /// Route to a local port that is not plugged (or not up).
    PortDown = 19,
    /// The transmit queue refused the packet (NIC full); freed.
    TxRefused = 20,
    /// No buffer for a generated packet (NDP solicitation).
    NoBuffer = 21,
    /// Not enough headroom to prepend an encapsulation.
    NoHeadroom = 22,
    /// No ICMP error is generated about an ICMP error, a multicast or unspecified source, or a
    /// fragment other than the first (RFC 1812 §4.3.2.7, RFC 4443 §2.4(e)).
    IcmpErrorSuppressed = 23,
    /// A route through an uplink or to a destination kind this pipeline does not forward yet.
    UnsupportedNextHop = 24,
    /// Multicast or broadcast traffic on an l3 network that is not ARP/NDP.
    Multicast = 25,
    /// IPv6 extension headers the pipeline does not traverse (hop-by-hop options to the
    /// gateway, routing headers of other types).
    UnsupportedExtension = 26,
    /// A remote next hop cannot be encapsulated: the node's SRv6 source address is not in the
    /// tables yet (control publishes it with the node's underlay address).
    NoSrv6Source = 27,
    /// l2: a unicast frame to a MAC the network's FDB does not hold, on a network without
    /// learning (with learning it is flooded).
    UnknownUnicast = 28,
    /// l2: a frame that would go back where it came from — to its own port, or from the
    /// underlay to another node (frames from a remote node are delivered locally only).
    SplitHorizon = 29,
    /// l2: a duplicate-address-detection probe (NS from `::`) for an address no endpoint
    /// holds: left unanswered, so the prober takes the address.
    DadProbe = 30,
    /// l2: broadcast, multicast or unknown unicast (or an announcement) beyond its source
    /// endpoint's BUM limit (`spec.l2.bumLimit`): not replicated.
    BumRateLimited = 31,
    /// l2: an announcement (gratuitous ARP, unsolicited NA, RARP) on a network without
    /// learning: nothing learns from it, and announcements are never flooded.
    NotLearning = 32,
    /// A NEW connection NetworkPolicy does not allow (the endpoint is isolated in that
    /// direction and no rule admits the peer, protocol and port).
    PolicyDenied = 33,
    /// A tracked connection a narrowed NetworkPolicy no longer allows: its entry is removed
    /// at its next packet.
    PolicyRevoked = 34,
    /// A packet on a one-way routing path's way back that is not a reply of a connection
    /// opened the allowed way.
    OneWay = 35,
    /// The flow table is full: NEW connections are refused until entries expire (the size is
    /// `conntrack.max_flows`).
    FlowTableFull = 36,
    /// To a Service port with no backend that takes connections (or a ClusterIP port no
    /// Service serves): ICMP port unreachable sent, as kube-proxy rejects.
    ServiceUnavailable = 37,
    /// A fragment of tracked traffic whose ports the tracker cannot see (non-first
    /// fragments to or from an isolated endpoint, or of translated traffic).
    Fragment = 38,
    /// A Service connection whose translated reply would collide with a live connection of
    /// the same client port to the backend.
    NatCollision = 39,
    /// An ICMP error about no connection the tracker knows, to or from an isolated endpoint.
    UnrelatedIcmpError = 40,
    /// To a Service port with `internalTrafficPolicy: Local` and no backend on this node that
    /// takes connections: dropped, as kube-proxy drops it (KEP-2086).
    NoLocalEndpoint = 41,
    /// A plain (not SRv6) packet from the uplink whose source no external network's prefixes
    /// hold (ADR 0054): it belongs to no network.
    NoExternalNetwork = 42,
    /// A route out of the uplink whose gateway does not resolve (no ARP reply or neighbor
    /// advertisement yet): the route is down; the gateway is solicited again at most every
    /// 200 ms while packets want it.
    GatewayUnresolved = 43,
    /// A frame from the uplink tagged with an 802.1Q VLAN the node has no
    /// `[[uplink.external]]` entry for, or with more than one tag (ADR 0054).
    UnknownVlan = 44,
}

impl DropReason {
    /// Number of reasons (counter slots in use).
    pub const COUNT: usize = 45;
    /// Counter slots reserved per worker (room to add reasons without a layout change).
    pub const SLOTS: usize = 64;

    /// Every reason, in counter order.
    pub const ALL: [DropReason; DropReason::COUNT] = {
        use DropReason::*;
        [
            Malformed,
            UnknownPort,
            UnsupportedEthertype,
            NoNetwork,
            UnsupportedNetworkKind,
            SpoofedMac,
            SpoofedSource,
            NoRoute,
            Blackhole,
            TtlExceeded,
            TooBig,
            UnknownNode,
            NeighborUnresolved,
            UnknownSid,
            SrhSegmentsLeft,
            DecapUnsupportedInner,
            NotForUs,
            NotGateway,
            ReceiveUnsupported,
            PortDown,
            TxRefused,
            NoBuffer,
            NoHeadroom,
            IcmpErrorSuppressed,
            UnsupportedNextHop,
            Multicast,
            UnsupportedExtension,
            NoSrv6Source,
            UnknownUnicast,
            SplitHorizon,
            DadProbe,
            BumRateLimited,
            NotLearning,
            PolicyDenied,
            PolicyRevoked,
            OneWay,
            FlowTableFull,
            ServiceUnavailable,
            Fragment,
            NatCollision,
            UnrelatedIcmpError,
            NoLocalEndpoint,
            NoExternalNetwork,
            GatewayUnresolved,
            UnknownVlan,
        ]
    };

    /// Stable kebab-case name (counter name in `stats` and metrics).
    pub const fn name(self) -> &'static str {
        use DropReason::*;
        match self {
            Malformed => "malformed",
            UnknownPort => "unknown-port",
            UnsupportedEthertype => "unsupported-ethertype",
            NoNetwork => "no-network",
            UnsupportedNetworkKind => "unsupported-network-kind",
            SpoofedMac => "spoofed-mac",
            SpoofedSource => "spoofed-source",
            NoRoute => "no-route",
            Blackhole => "blackhole",
            TtlExceeded => "ttl-exceeded",
            TooBig => "too-big",
            UnknownNode => "unknown-node",
            NeighborUnresolved => "neighbor-unresolved",
            UnknownSid => "unknown-sid",
            SrhSegmentsLeft => "srh-segments-left",
            DecapUnsupportedInner => "decap-unsupported-inner",
            NotForUs => "not-for-us",
            NotGateway => "not-gateway",
            ReceiveUnsupported => "receive-unsupported",
            PortDown => "port-down",
            TxRefused => "tx-refused",
            NoBuffer => "no-buffer",
            NoHeadroom => "no-headroom",
            IcmpErrorSuppressed => "icmp-error-suppressed",
            UnsupportedNextHop => "unsupported-next-hop",
            Multicast => "multicast",
            UnsupportedExtension => "unsupported-extension",
            NoSrv6Source => "no-srv6-source",
            UnknownUnicast => "unknown-unicast",
            SplitHorizon => "split-horizon",
            DadProbe => "dad-probe",
            BumRateLimited => "bum-rate-limited",
            NotLearning => "not-learning",
            PolicyDenied => "policy-denied",
            PolicyRevoked => "policy-revoked",
            OneWay => "one-way",
            FlowTableFull => "flow-table-full",
            ServiceUnavailable => "service-unavailable",
            Fragment => "fragment",
            NatCollision => "nat-collision",
            UnrelatedIcmpError => "unrelated-icmp-error",
            NoLocalEndpoint => "no-local-endpoint",
            NoExternalNetwork => "no-external-network",
            GatewayUnresolved => "gateway-unresolved",
            UnknownVlan => "unknown-vlan",
        }
    }

    /// The reason with this counter index.
    pub fn from_index(i: usize) -> Option<DropReason> {
        DropReason::ALL.get(i).copied()
    }

    /// The reason with this name.
    pub fn from_name(name: &str) -> Option<DropReason> {
        DropReason::ALL.iter().copied().find(|r| r.name() == name)
    }
}

const _: () = assert!(DropReason::COUNT <= DropReason::SLOTS);

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the forwarder did with a requested port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// Nothing requested or nothing done yet.
    Absent,
    /// Being attached.
    Attaching,
    /// Attached, started and polled by a worker.
    Up,
    /// Attaching failed; the code is a positive errno (or DPDK's), see the forwarder's log.
    Failed(u32),
}

impl PortState {
    fn encode(self) -> u64 {
        match self {
            PortState::Absent => 0,
            PortState::Attaching => 1,
            PortState::Up => 2,
            PortState::Failed(code) => 3 | (u64::from(code) << 32),
        }
    }
    fn decode(v: u64) -> PortState {
        match v & 0xff {
            1 => PortState::Attaching,
            2 => PortState::Up,
            3 => PortState::Failed((v >> 32) as u32),
            _ => PortState::Absent,
        }
    }
}

/// Most ports a node has (slot 0 is the uplink, [`PortId::UPLINK`]).
pub const MAX_PORTS: u32 = 4096;
/// Most pipeline stages a forwarder reports.
pub const MAX_STAGES: usize = 32;
/// Bytes of a stage name.
pub const STAGE_NAME_LEN: usize = 32;
/// Most external uplink entries the region carries ([`StatusWriter::set_external`]).
pub const MAX_EXTERNAL_UPLINKS: usize = 16;
/// Most addresses over all external uplink entries.
pub const MAX_EXTERNAL_ADDRESSES: usize = 16;
/// Longest external uplink interface name, in bytes.
pub const EXTERNAL_NAME_LEN: usize = 32;

/// One `[[uplink.external]]` entry of the forwarder's configuration, as the status region
/// carries it (ADR 0054): the interface name the operator gave it (which a Network's
/// `spec.uplinks[].interface` names; empty when unnamed), its VLAN, and the node's addresses
/// there, each with its subnet's prefix length.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExternalUplink {
    /// The interface name (at most [`EXTERNAL_NAME_LEN`] bytes; empty: unnamed).
    pub interface: String,
    /// The 802.1Q VLAN (1–4094; 0: untagged).
    pub vlan: u16,
    /// The node's addresses there.
    pub addresses: Vec<(IpAddr, u8)>,
}

/// Per-port counter indices ([`StatusReader::port_counter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum PortCounter {
    /// Packets received.
    RxPackets = 0,
    /// Bytes received.
    RxBytes = 1,
    /// Packets handed to the transmit queue and accepted.
    TxPackets = 2,
    /// Bytes accepted for transmission.
    TxBytes = 3,
    /// Packets the transmit queue refused (freed, also counted as [`DropReason::TxRefused`]).
    TxRefused = 4,
    /// The device's `imissed`: frames it dropped because no receive descriptor was free.
    DeviceRxMissed = 5,
    /// The device's `ierrors`: erroneous frames it received.
    DeviceRxErrors = 6,
    /// The device's `rx_nombuf`: receive buffer allocation failures.
    DeviceRxNoMbuf = 7,
    /// The device's `oerrors`: frames it failed to send.
    DeviceTxErrors = 8,
    /// Frames the kernel dropped at the forwarder's packet socket (its buffer or ring full:
    /// the worker fell behind); `PACKET_STATISTICS` `tp_drops`.
    KernelRxDropped = 9,
    /// The kernel interface's own receive drops (`rx_dropped` of the host-side veth or NIC).
    IfaceRxDropped = 10,
    /// The kernel interface's own transmit drops (`tx_dropped`; on a veth: frames its peer's
    /// queue refused).
    IfaceTxDropped = 11,
    /// Large segments (GSO) received: taken whole, or cut into frames on arrival.
    RxLargeSegments = 12,
    /// Large segments sent: runs of segments sent as one (GRO-like coalescing), segments taken
    /// whole and handed over whole, or cut into frames for a port that takes none.
    TxLargeSegments = 13,
}

impl PortCounter {
    /// Counters per port.
    pub const COUNT: usize = 14;
}

/// Per-worker counter indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum WorkerCounter {
    /// Poll-loop iterations.
    Polls = 0,
    /// Iterations that received at least one packet.
    BusyPolls = 1,
    /// Times the adaptive mode slept.
    Sleeps = 2,
    /// Packets received by this worker.
    RxPackets = 3,
    /// Table snapshots that changed generation (publications picked up).
    Reloads = 4,
    /// Adaptive sleeps ended by a port's socket becoming readable.
    WakeReadiness = 5,
    /// Adaptive sleeps ended by the mailbox only (commands: tables, ports added or removed;
    /// a stop request).
    WakeCommand = 6,
    /// Adaptive sleeps that ran out their time without a reason to wake.
    WakeTimeout = 7,
}

// Layout, all offsets from the start of the region.
const INFO: u64 = HEADER_SIZE;
const INFO_PID: u64 = INFO;
const INFO_STARTED: u64 = INFO + 8;
const INFO_HEARTBEAT: u64 = INFO + 16;
const INFO_STATE: u64 = INFO + 24;
const INFO_GENERATION: u64 = INFO + 32;
const INFO_STAGES: u64 = INFO + 40;
const INFO_MBUFS_IN_USE: u64 = INFO + 48;
const INFO_MBUFS: u64 = INFO + 56;
const INFO_NAMES: u64 = INFO + 64;
/// External uplinks: entry count, address count, the entries' names, then the addresses (two
/// words of address, IPv4 mapped, and a word of family, prefix length and entry index).
const INFO_EXTERNAL: u64 = INFO + 1536;
const EXT_ENTRIES: u64 = INFO_EXTERNAL;
const EXT_ADDRESSES: u64 = INFO_EXTERNAL + 8;
const EXT_NAMES: u64 = INFO_EXTERNAL + 16;
const EXT_ADDRESS: u64 = EXT_NAMES + (MAX_EXTERNAL_UPLINKS * EXTERNAL_NAME_LEN) as u64;
const EXT_ADDRESS_SLOT: u64 = 24;
/// The entries' VLANs, four to a word.
const EXT_VLANS: u64 = EXT_ADDRESS + EXT_ADDRESS_SLOT * MAX_EXTERNAL_ADDRESSES as u64;
const _: () = assert!(INFO_NAMES + (MAX_STAGES * STAGE_NAME_LEN) as u64 <= INFO_EXTERNAL);
/// Unresolved neighbors: a sequence word (odd while written), the count, the addresses (two
/// words each, IPv4 mapped), then their VLANs (a word each).
const INFO_UNRESOLVED: u64 = INFO + 2560;
const UNRESOLVED_SEQ: u64 = INFO_UNRESOLVED;
const UNRESOLVED_COUNT: u64 = INFO_UNRESOLVED + 8;
const UNRESOLVED_ADDRS: u64 = INFO_UNRESOLVED + 16;
/// Most unresolved neighbors the region lists.
pub const MAX_UNRESOLVED: usize = 16;
const UNRESOLVED_VLANS: u64 = UNRESOLVED_ADDRS + 16 * MAX_UNRESOLVED as u64;
const _: () = assert!(EXT_VLANS + 2 * MAX_EXTERNAL_UPLINKS as u64 <= INFO_UNRESOLVED);
const _: () = assert!(UNRESOLVED_VLANS + 8 * MAX_UNRESOLVED as u64 <= INFO + 4096);
const PORTS: u64 = INFO + 4096;
/// Bytes per port slot: state, endpoint, then the [`PortCounter`]s (room for 14).
const PORT_SLOT: u64 = 128;
const PORT_STATE: u64 = 0;
const PORT_ENDPOINT: u64 = 8;
const PORT_COUNTERS: u64 = 16;
const WORKERS: u64 = PORTS + PORT_SLOT * MAX_PORTS as u64;
/// Bytes per worker slot: worker counters (8), stage packets, drop reasons.
const WORKER_SLOT: u64 = 8 * (8 + MAX_STAGES as u64 + DropReason::SLOTS as u64);
const W_STAGES: u64 = 8 * 8;
// The worker counters fit before the stage counters.
const _: () = assert!(8 * (WorkerCounter::WakeTimeout as u64 + 1) <= W_STAGES);
const W_DROPS: u64 = W_STAGES + 8 * MAX_STAGES as u64;

/// Records per worker's learn ring.
pub const LEARN_SLOTS: u64 = 4096;
/// Bytes per learn record (one cache line).
const LEARN_RECORD: u64 = 8 * RECORD_WORDS as u64;
/// Bytes per worker's learn ring: a cache line with the head, then the records.
const LEARN_RING: u64 = 64 + LEARN_SLOTS * LEARN_RECORD;

const _: () = assert!(LEARN_SLOTS.is_power_of_two() && WORKER_SLOT % 64 == 0);

/// Where the learn rings start.
const fn learn_base(workers: u32) -> u64 {
    WORKERS + WORKER_SLOT * workers as u64
}

/// The forwarder's lifecycle as written in the status region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Starting (EAL, ports).
    Starting,
    /// Forwarding.
    Running,
    /// Stopping after SIGTERM.
    Stopping,
    /// Stopped cleanly.
    Stopped,
}

impl RunState {
    fn decode(v: u64) -> RunState {
        match v {
            1 => RunState::Running,
            2 => RunState::Stopping,
            3 => RunState::Stopped,
            _ => RunState::Starting,
        }
    }
}

/// Path of a forwarder's status region beside its tables.
pub fn status_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("lace-{name}.status"))
}

fn region_size(workers: u32) -> u64 {
    learn_base(workers) + LEARN_RING * u64::from(workers)
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The forwarder's (single) writer handle.
#[derive(Debug)]
pub struct StatusWriter {
    region: Region,
    workers: u32,
}

impl StatusWriter {
    /// Creates the status region for `workers` workers and the named pipeline stages, replacing
    /// a stale one. Refused while another live forwarder holds it.
    pub fn create(path: &Path, workers: u32, stages: &[&str]) -> Result<StatusWriter> {
        if stages.len() > MAX_STAGES {
            return Err(Error::Invalid {
                what: format!("{} pipeline stages, at most {MAX_STAGES}", stages.len()),
            });
        }
        if let Ok(old) = Region::open_ro(path, RegionKind::Status) {
            if let Ok(Some(pid)) = old.lock_holder(0, HEADER_SIZE) {
                return Err(Error::WriterBusy {
                    path: path.to_path_buf(),
                    pid,
                });
            }
        }
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::Io {
                    op: "remove stale status region",
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
        let region = Region::create(
            path,
            RegionKind::Status,
            region_size(workers),
            [
                u64::from(workers),
                u64::from(MAX_PORTS),
                stages.len() as u64,
                PORT_SLOT,
            ],
        )?;
        if !region.try_lock(0, HEADER_SIZE)? {
            return Err(Error::WriterBusy {
                path: path.to_path_buf(),
                pid: region.lock_holder(0, HEADER_SIZE)?.unwrap_or(0),
            });
        }
        // Readers may open the file now (mode 0600: root's tools and control); the names and
        // pid are written before the state says Starting→Running, which readers check.
        let w = StatusWriter { region, workers };
        w.store(INFO_PID, u64::from(std::process::id()));
        w.store(INFO_STARTED, now_ns());
        w.store(INFO_STAGES, stages.len() as u64);
        for (i, name) in stages.iter().enumerate() {
            w.store_bytes(
                INFO_NAMES + (i * STAGE_NAME_LEN) as u64,
                STAGE_NAME_LEN,
                name,
            );
        }
        w.heartbeat();
        Ok(w)
    }

    fn cell(&self, off: u64) -> &AtomicU64 {
        // The layout is fixed at creation and every offset below is within `region_size`.
        self.region
            .mem()
            .atomic_u64(off)
            .expect("status offset within the region")
    }

    fn store(&self, off: u64, v: u64) {
        self.cell(off).store(v, Ordering::Release);
    }

    /// Writes `text` into the `len` bytes (a multiple of 8) at `off`, zero-padded; a longer
    /// text is cut.
    fn store_bytes(&self, off: u64, len: usize, text: &str) {
        let mut b = vec![0u8; len];
        let n = text.len().min(len);
        b[..n].copy_from_slice(&text.as_bytes()[..n]);
        for (k, chunk) in b.chunks(8).enumerate() {
            let mut v = [0u8; 8];
            v.copy_from_slice(chunk);
            self.store(off + 8 * k as u64, u64::from_le_bytes(v));
        }
    }

    /// Publishes the node's external uplinks (`[[uplink.external]]`, ADR 0054). Written before
    /// the state says Running; readers read them once it does. Refused beyond
    /// [`MAX_EXTERNAL_UPLINKS`] entries, [`MAX_EXTERNAL_ADDRESSES`] addresses, or a name longer
    /// than [`EXTERNAL_NAME_LEN`] bytes (the configuration's checks keep within them).
    pub fn set_external(&self, entries: &[ExternalUplink]) -> Result<()> {
        let addresses: usize = entries.iter().map(|e| e.addresses.len()).sum();
        let refused = if entries.len() > MAX_EXTERNAL_UPLINKS {
            Some(format!(
                "{} external uplinks, at most {MAX_EXTERNAL_UPLINKS}",
                entries.len()
            ))
        } else if addresses > MAX_EXTERNAL_ADDRESSES {
            Some(format!(
                "{addresses} external uplink addresses, at most {MAX_EXTERNAL_ADDRESSES}"
            ))
        } else {
            entries
                .iter()
                .find(|e| e.interface.len() > EXTERNAL_NAME_LEN)
                .map(|e| {
                    format!(
                        "external uplink interface name {:?}: longer than {EXTERNAL_NAME_LEN} \
                         bytes",
                        e.interface
                    )
                })
        };
        if let Some(what) = refused {
            return Err(Error::Invalid { what });
        }
        let mut vlans = [0u64; MAX_EXTERNAL_UPLINKS / 4];
        for (i, e) in entries.iter().enumerate() {
            vlans[i / 4] |= u64::from(e.vlan) << (16 * (i % 4));
        }
        for (k, &w) in vlans.iter().enumerate() {
            self.store(EXT_VLANS + 8 * k as u64, w);
        }
        let mut slot = EXT_ADDRESS;
        for (i, e) in entries.iter().enumerate() {
            self.store_bytes(
                EXT_NAMES + (i * EXTERNAL_NAME_LEN) as u64,
                EXTERNAL_NAME_LEN,
                &e.interface,
            );
            for &(addr, len) in &e.addresses {
                let (v6, family) = match addr {
                    IpAddr::V4(a) => (a.to_ipv6_mapped(), 4u64),
                    IpAddr::V6(a) => (a, 6),
                };
                let bits = u128::from(v6);
                self.store(slot, (bits >> 64) as u64);
                self.store(slot + 8, bits as u64);
                self.store(slot + 16, family | u64::from(len) << 8 | (i as u64) << 16);
                slot += EXT_ADDRESS_SLOT;
            }
        }
        self.store(EXT_ADDRESSES, addresses as u64);
        self.store(EXT_ENTRIES, entries.len() as u64);
        Ok(())
    }

    /// Records that the forwarder is alive.
    pub fn heartbeat(&self) {
        self.store(INFO_HEARTBEAT, now_ns());
    }

    /// Sets the lifecycle state.
    pub fn set_state(&self, s: RunState) {
        let v = match s {
            RunState::Starting => 0,
            RunState::Running => 1,
            RunState::Stopping => 2,
            RunState::Stopped => 3,
        };
        self.store(INFO_STATE, v);
    }

    /// Records the table generation the forwarder last reconciled ports against.
    pub fn set_generation(&self, g: u64) {
        self.store(INFO_GENERATION, g);
    }

    /// Records the packet buffers in use (held by ports' rings, workers, or in flight) and
    /// the pool's size.
    pub fn set_mbufs(&self, in_use: u64, capacity: u64) {
        self.store(INFO_MBUFS_IN_USE, in_use);
        self.store(INFO_MBUFS, capacity);
    }

    /// Publishes the uplink's neighbors that traffic waits for and that do not answer (the
    /// first [`MAX_UNRESOLVED`]), each with its VLAN (0: untagged); readers never see a list
    /// half written.
    pub fn set_unresolved(&self, addrs: &[(u16, IpAddr)]) {
        let seq = self.cell(UNRESOLVED_SEQ).load(Ordering::Relaxed);
        self.store(UNRESOLVED_SEQ, seq | 1);
        let n = addrs.len().min(MAX_UNRESOLVED);
        for (k, (vlan, a)) in addrs[..n].iter().enumerate() {
            let bits = u128::from(match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => *v6,
            });
            self.store(UNRESOLVED_ADDRS + 16 * k as u64, (bits >> 64) as u64);
            self.store(UNRESOLVED_ADDRS + 16 * k as u64 + 8, bits as u64);
            self.store(UNRESOLVED_VLANS + 8 * k as u64, u64::from(*vlan));
        }
        self.store(UNRESOLVED_COUNT, n as u64);
        self.store(UNRESOLVED_SEQ, (seq | 1) + 1);
    }

    /// Reports what happened to a requested port (for the endpoint `endpoint`).
    pub fn set_port(&self, port: PortId, endpoint: u64, state: PortState) {
        if port.0 >= MAX_PORTS {
            return;
        }
        let base = PORTS + PORT_SLOT * u64::from(port.0);
        self.store(base + PORT_ENDPOINT, endpoint);
        self.store(base + PORT_STATE, state.encode());
    }

    /// Counters for one worker, to be moved to (and used only by) that worker's thread.
    pub fn worker(&self, index: u32) -> Option<WorkerCounters<'_>> {
        (index < self.workers).then(|| WorkerCounters {
            mem: self.region.mem(),
            base: WORKERS + WORKER_SLOT * u64::from(index),
        })
    }

    /// The learn ring of one worker, to be moved to (and written only by) that worker's thread.
    /// Writing continues after the records already in the ring.
    pub fn learn_writer(&self, index: u32) -> Option<LearnWriter<'_>> {
        (index < self.workers).then(|| {
            let base = learn_base(self.workers) + LEARN_RING * u64::from(index);
            let mem = self.region.mem();
            let head = mem
                .atomic_u64(base)
                .expect("learn ring head")
                .load(Ordering::Relaxed);
            LearnWriter { mem, base, head }
        })
    }

    /// Counters of one port.
    pub fn port_counters(&self, port: PortId) -> Option<PortCounters<'_>> {
        (port.0 < MAX_PORTS).then(|| PortCounters {
            mem: self.region.mem(),
            base: PORTS + PORT_SLOT * u64::from(port.0) + PORT_COUNTERS,
        })
    }

    /// Zeroes a port's counters (when its id is bound to a new endpoint).
    pub fn reset_port_counters(&self, port: PortId) {
        if let Some(c) = self.port_counters(port) {
            for i in 0..PortCounter::COUNT as u64 {
                c.cell(i).store(0, Ordering::Relaxed);
            }
        }
    }
}

/// One worker's counters. Only that worker writes them (plain load+store, no RMW).
#[derive(Debug, Clone, Copy)]
pub struct WorkerCounters<'a> {
    mem: Mem<'a>,
    base: u64,
}

impl WorkerCounters<'_> {
    fn cell(&self, off: u64) -> &AtomicU64 {
        self.mem.atomic_u64(self.base + off).expect("worker slot")
    }
    fn add_at(&self, off: u64, n: u64) {
        if n != 0 {
            let c = self.cell(off);
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }
    /// Adds to a worker counter.
    pub fn add(&self, c: WorkerCounter, n: u64) {
        self.add_at(8 * c as u64, n);
    }
    /// Adds packets to a stage counter.
    pub fn add_stage(&self, stage: usize, n: u64) {
        if stage < MAX_STAGES {
            self.add_at(W_STAGES + 8 * stage as u64, n);
        }
    }
    /// Adds drops of one reason.
    pub fn add_drop(&self, r: DropReason, n: u64) {
        self.add_at(W_DROPS + 8 * r as u64, n);
    }
}

/// One port's counters; several workers may add (one per queue), so adds are atomic RMWs.
#[derive(Debug, Clone, Copy)]
pub struct PortCounters<'a> {
    mem: Mem<'a>,
    base: u64,
}

impl PortCounters<'_> {
    fn cell(&self, i: u64) -> &AtomicU64 {
        self.mem.atomic_u64(self.base + 8 * i).expect("port slot")
    }
    /// Adds to a port counter.
    pub fn add(&self, c: PortCounter, n: u64) {
        if n != 0 {
            self.cell(c as u64).fetch_add(n, Ordering::Relaxed);
        }
    }
    /// Sets a counter the forwarder reads from elsewhere (the device's or the kernel's own
    /// counters, which only their owner writes).
    pub fn set(&self, c: PortCounter, v: u64) {
        self.cell(c as u64).store(v, Ordering::Relaxed);
    }
}

/// One worker's learn ring, written by that worker only (see the module docs).
#[derive(Debug)]
pub struct LearnWriter<'a> {
    mem: Mem<'a>,
    base: u64,
    /// Records written so far (the next record's number).
    head: u64,
}

impl LearnWriter<'_> {
    fn word(&self, off: u64) -> &AtomicU64 {
        self.mem
            .atomic_u64(self.base + off)
            .expect("learn ring slot")
    }

    /// Appends a record, overwriting the oldest when the ring is full. Never blocks.
    #[inline]
    pub fn push(&mut self, e: &LearnEvent) {
        let n = self.head;
        let slot = 64 + LEARN_RECORD * (n & (LEARN_SLOTS - 1));
        // A seqlock per slot: the stamp is cleared before the payload changes and set to the
        // record's number after it, so a reader that sees the same stamp before and after
        // reading the payload read one record whole.
        let stamp = self.word(slot);
        stamp.store(0, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        for (i, w) in e.encode().iter().enumerate() {
            self.word(slot + 8 * (i as u64 + 1))
                .store(*w, Ordering::Relaxed);
        }
        stamp.store(n + 1, Ordering::Release);
        self.head = n + 1;
        self.word(0).store(n + 1, Ordering::Release);
    }

    /// Records written to this ring since the region was created.
    pub fn written(&self) -> u64 {
        self.head
    }
}

/// Control's position in every worker's learn ring of one forwarder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnCursor {
    next: Vec<u64>,
}

/// What one [`StatusReader::read_learned`] found besides the records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LearnRead {
    /// Records read whole.
    pub read: u64,
    /// Records lost: overwritten before they were read (overrun, or a slot rewritten while it
    /// was read), or not decodable.
    pub lost: u64,
}

/// A read-only view of a forwarder's status (control, `lace-forwarder stats`, tests).
#[derive(Debug)]
pub struct StatusReader {
    region: Region,
}

/// A port as the status region reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortStatus {
    /// The port.
    pub port: PortId,
    /// Its state.
    pub state: PortState,
    /// Endpoint id of the request the state answers.
    pub endpoint: u64,
    /// Counters, indexed by [`PortCounter`].
    pub counters: [u64; PortCounter::COUNT],
}

impl StatusReader {
    /// Maps a status region read-only.
    pub fn open(path: &Path) -> Result<StatusReader> {
        let region = Region::open_ro(path, RegionKind::Status)?;
        let workers = region.header().params[0];
        if region.header().params[3] != PORT_SLOT {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                what: format!(
                    "port slots of {} bytes where this build reads {PORT_SLOT}: the region was \
                     written by a different lace-forwarder version; use the matching \
                     `lace-forwarder stats`",
                    region.header().params[3]
                ),
            });
        }
        if region_size(workers as u32) > region.len() as u64 || workers > 4096 {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                what: format!(
                    "{workers} worker slots do not fit in {} bytes",
                    region.len()
                ),
            });
        }
        Ok(StatusReader { region })
    }

    fn load(&self, off: u64) -> u64 {
        self.region
            .mem()
            .atomic_u64(off)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// The forwarder's pid.
    pub fn pid(&self) -> u32 {
        self.load(INFO_PID) as u32
    }

    /// Whether the forwarder that wrote this region still holds it (is alive).
    pub fn alive(&self) -> bool {
        matches!(self.region.lock_holder(0, HEADER_SIZE), Ok(Some(_)))
    }

    /// Lifecycle state.
    pub fn state(&self) -> RunState {
        RunState::decode(self.load(INFO_STATE))
    }

    /// Nanoseconds since the epoch of the last heartbeat.
    pub fn heartbeat_ns(&self) -> u64 {
        self.load(INFO_HEARTBEAT)
    }

    /// Nanoseconds since the epoch of the start.
    pub fn started_ns(&self) -> u64 {
        self.load(INFO_STARTED)
    }

    /// Packet buffers in use and the pool's size, as last refreshed (0, 0 before the first).
    pub fn mbufs(&self) -> (u64, u64) {
        (self.load(INFO_MBUFS_IN_USE), self.load(INFO_MBUFS))
    }

    /// Table generation the forwarder's ports were last reconciled against.
    pub fn generation(&self) -> u64 {
        self.load(INFO_GENERATION)
    }

    /// Number of workers.
    pub fn workers(&self) -> u32 {
        self.region.header().params[0] as u32
    }

    /// The `len` bytes at `off` as text, up to the first zero byte.
    fn load_text(&self, off: u64, len: usize) -> String {
        let mut b = Vec::with_capacity(len);
        for k in 0..len as u64 / 8 {
            b.extend_from_slice(&self.load(off + 8 * k).to_le_bytes());
        }
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    }

    /// Names of the pipeline stages, in counter order.
    pub fn stage_names(&self) -> Vec<String> {
        let n = (self.load(INFO_STAGES) as usize).min(MAX_STAGES);
        (0..n)
            .map(|i| self.load_text(INFO_NAMES + (i * STAGE_NAME_LEN) as u64, STAGE_NAME_LEN))
            .collect()
    }

    /// The uplink's neighbors traffic waits for and that do not answer, as last published,
    /// each with its VLAN (0: untagged; IPv4 ones as IPv4); empty while the list is being
    /// rewritten at every try.
    pub fn unresolved(&self) -> Vec<(u16, IpAddr)> {
        for _ in 0..16 {
            let seq = self.load(UNRESOLVED_SEQ);
            if seq & 1 == 1 {
                std::thread::yield_now();
                continue;
            }
            let n = (self.load(UNRESOLVED_COUNT) as usize).min(MAX_UNRESOLVED);
            let out: Vec<(u16, IpAddr)> = (0..n as u64)
                .map(|k| {
                    let hi = u128::from(self.load(UNRESOLVED_ADDRS + 16 * k));
                    let lo = u128::from(self.load(UNRESOLVED_ADDRS + 16 * k + 8));
                    let vlan = self.load(UNRESOLVED_VLANS + 8 * k) as u16;
                    (
                        vlan,
                        IpAddr::V6(Ipv6Addr::from(hi << 64 | lo)).to_canonical(),
                    )
                })
                .collect();
            if self.load(UNRESOLVED_SEQ) == seq {
                return out;
            }
        }
        Vec::new()
    }

    /// The node's external uplinks as the forwarder published them (empty when it has none,
    /// or before it runs). A record that does not decode (a family other than 4 or 6, a
    /// prefix too long, an entry out of range) is skipped.
    pub fn external(&self) -> Vec<ExternalUplink> {
        let entries = (self.load(EXT_ENTRIES) as usize).min(MAX_EXTERNAL_UPLINKS);
        let mut out: Vec<ExternalUplink> = (0..entries)
            .map(|i| ExternalUplink {
                interface: self.load_text(
                    EXT_NAMES + (i * EXTERNAL_NAME_LEN) as u64,
                    EXTERNAL_NAME_LEN,
                ),
                vlan: (self.load(EXT_VLANS + 8 * (i / 4) as u64) >> (16 * (i % 4))) as u16,
                addresses: Vec::new(),
            })
            .collect();
        let addresses = (self.load(EXT_ADDRESSES) as usize).min(MAX_EXTERNAL_ADDRESSES);
        for k in 0..addresses as u64 {
            let slot = EXT_ADDRESS + EXT_ADDRESS_SLOT * k;
            let bits = u128::from(self.load(slot)) << 64 | u128::from(self.load(slot + 8));
            let meta = self.load(slot + 16);
            let (family, len, entry) = (meta & 0xff, (meta >> 8) as u8, (meta >> 16) as usize);
            let v6 = Ipv6Addr::from(bits);
            let addr = match (family, v6.to_ipv4_mapped()) {
                (4, Some(v4)) if len <= 32 => IpAddr::V4(v4),
                (6, _) if len <= 128 => IpAddr::V6(v6),
                _ => continue,
            };
            if let Some(e) = out.get_mut(entry) {
                e.addresses.push((addr, len));
            }
        }
        out
    }

    /// A port's state and counters.
    pub fn port(&self, port: PortId) -> Option<PortStatus> {
        if port.0 >= MAX_PORTS {
            return None;
        }
        let base = PORTS + PORT_SLOT * u64::from(port.0);
        let mut counters = [0u64; PortCounter::COUNT];
        for (i, c) in counters.iter_mut().enumerate() {
            *c = self.load(base + PORT_COUNTERS + 8 * i as u64);
        }
        Some(PortStatus {
            port,
            state: PortState::decode(self.load(base + PORT_STATE)),
            endpoint: self.load(base + PORT_ENDPOINT),
            counters,
        })
    }

    /// Every port that is not absent or has counted something.
    pub fn ports(&self) -> Vec<PortStatus> {
        (0..MAX_PORTS)
            .filter_map(|i| self.port(PortId(i)))
            .filter(|p| p.state != PortState::Absent || p.counters.iter().any(|&c| c != 0))
            .collect()
    }

    /// A worker counter of one worker.
    pub fn worker_counter(&self, worker: u32, c: WorkerCounter) -> u64 {
        self.load(WORKERS + WORKER_SLOT * u64::from(worker) + 8 * c as u64)
    }

    /// Packets through a stage, summed over workers.
    pub fn stage_total(&self, stage: usize) -> u64 {
        (0..self.workers())
            .map(|w| self.load(WORKERS + WORKER_SLOT * u64::from(w) + W_STAGES + 8 * stage as u64))
            .sum()
    }

    /// Drops of one reason, summed over workers.
    pub fn drops(&self, r: DropReason) -> u64 {
        (0..self.workers())
            .map(|w| self.load(WORKERS + WORKER_SLOT * u64::from(w) + W_DROPS + 8 * r as u64))
            .sum()
    }

    /// A cursor at the current end of every worker's learn ring: reading with it returns what
    /// the forwarder reports from now on.
    pub fn learn_cursor(&self) -> LearnCursor {
        LearnCursor {
            next: (0..self.workers())
                .map(|w| self.load(self.learn_ring(w)))
                .collect(),
        }
    }

    /// A cursor at the start of every worker's learn ring: reading with it returns what the
    /// forwarder reported since it created the region (as much as the rings still hold).
    pub fn learn_cursor_from_start(&self) -> LearnCursor {
        LearnCursor {
            next: vec![0; self.workers() as usize],
        }
    }

    fn learn_ring(&self, worker: u32) -> u64 {
        learn_base(self.workers()) + LEARN_RING * u64::from(worker)
    }

    /// Appends the records written since `cursor` to `out` (each ring in order, the rings one
    /// after the other) and advances the cursor. Records the forwarder overwrote before they
    /// could be read are counted in [`LearnRead::lost`].
    pub fn read_learned(&self, cursor: &mut LearnCursor, out: &mut Vec<LearnEvent>) -> LearnRead {
        let mut r = LearnRead::default();
        cursor.next.resize(self.workers() as usize, 0);
        let mem = self.region.mem();
        for (w, next) in cursor.next.iter_mut().enumerate() {
            let base = self.learn_ring(w as u32);
            let head = self.load(base);
            if head < *next {
                // Not the ring this cursor was made for (the region was replaced): start over.
                *next = head;
                continue;
            }
            if head - *next > LEARN_SLOTS {
                r.lost += head - *next - LEARN_SLOTS;
                *next = head - LEARN_SLOTS;
            }
            while *next < head {
                let n = *next;
                *next += 1;
                let slot = base + 64 + LEARN_RECORD * (n & (LEARN_SLOTS - 1));
                let word = |i: u64| mem.atomic_u64(slot + 8 * i).expect("learn slot");
                let before = word(0).load(Ordering::Acquire);
                let mut payload = [0u64; RECORD_WORDS - 1];
                for (i, p) in payload.iter_mut().enumerate() {
                    *p = word(i as u64 + 1).load(Ordering::Relaxed);
                }
                std::sync::atomic::fence(Ordering::Acquire);
                let after = word(0).load(Ordering::Relaxed);
                match LearnEvent::decode(&payload) {
                    Some(e) if before == n + 1 && after == before => {
                        out.push(e);
                        r.read += 1;
                    }
                    _ => r.lost += 1,
                }
            }
        }
        r
    }

    /// Every drop reason with its total.
    pub fn all_drops(&self) -> Vec<(DropReason, u64)> {
        DropReason::ALL
            .iter()
            .map(|&r| (r, self.drops(r)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_reasons_are_numbered_in_order_and_named_uniquely() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            assert_eq!(DropReason::from_index(i), Some(*r));
            assert_eq!(DropReason::from_name(r.name()), Some(*r));
        }
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DropReason::COUNT);
    }

    fn event(i: u64) -> LearnEvent {
        LearnEvent {
            port: crate::types::PortId(1 + (i % 7) as u32),
            endpoint: 100 + i,
            network: crate::types::NetworkId(9),
            kind: crate::learn::LearnKind::Seen,
            mac: crate::types::MacAddr::from_u64(0x02_0000_0000 + i),
            ip: None,
            at_ns: i,
        }
    }

    fn status_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("lace-status-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    #[cfg_attr(miri, ignore = "file mappings are not supported by miri")]
    fn learn_rings_carry_records_in_order_and_count_what_was_lost() {
        let dir = status_dir("learn");
        let path = status_path(&dir, "t");
        let w = StatusWriter::create(&path, 2, &["a"]).unwrap();
        let r = StatusReader::open(&path).unwrap();
        let mut cursor = r.learn_cursor();
        let mut ring0 = w.learn_writer(0).unwrap();
        let mut ring1 = w.learn_writer(1).unwrap();
        assert!(w.learn_writer(2).is_none());
        for i in 0..3 {
            ring0.push(&event(i));
        }
        ring1.push(&event(10));
        let mut out = Vec::new();
        let got = r.read_learned(&mut cursor, &mut out);
        assert_eq!(got, LearnRead { read: 4, lost: 0 });
        assert_eq!(out, [event(0), event(1), event(2), event(10)]);
        // Nothing new: nothing read.
        out.clear();
        assert_eq!(r.read_learned(&mut cursor, &mut out), LearnRead::default());
        // An overrun: more than a ring's worth since the cursor; the oldest are lost.
        let extra = LEARN_SLOTS + 5;
        for i in 0..extra {
            ring0.push(&event(1000 + i));
        }
        let got = r.read_learned(&mut cursor, &mut out);
        assert_eq!(
            got,
            LearnRead {
                read: LEARN_SLOTS,
                lost: 5
            }
        );
        assert_eq!(out.first(), Some(&event(1005)));
        assert_eq!(out.last(), Some(&event(1000 + extra - 1)));
        // A slot caught being written (stamp cleared, as the writer leaves it mid-record).
        out.clear();
        ring0.push(&event(7));
        ring0.push(&event(8));
        let n = ring0.written() - 2;
        let slot = learn_base(2) + 64 + LEARN_RECORD * (n & (LEARN_SLOTS - 1));
        w.region
            .mem()
            .atomic_u64(slot)
            .unwrap()
            .store(0, Ordering::Relaxed);
        let got = r.read_learned(&mut cursor, &mut out);
        assert_eq!(got, LearnRead { read: 1, lost: 1 });
        assert_eq!(out, [event(8)]);
        // A writer made again (a restarted worker) continues after what is there.
        let mut again = w.learn_writer(1).unwrap();
        assert_eq!(again.written(), 1);
        again.push(&event(11));
        out.clear();
        r.read_learned(&mut cursor, &mut out);
        assert_eq!(out, [event(11)]);
        // A cursor made now starts at the end; one from the start reads what the rings hold.
        let mut fresh = r.learn_cursor();
        out.clear();
        assert_eq!(r.read_learned(&mut fresh, &mut out).read, 0);
        let mut all = r.learn_cursor_from_start();
        let got = r.read_learned(&mut all, &mut out);
        assert_eq!(got.read + got.lost, ring0.written() + 2);
        drop(w);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    #[cfg_attr(miri, ignore = "file mappings are not supported by miri")]
    fn a_reader_and_a_writer_at_once_never_see_a_mixed_record() {
        let dir = status_dir("race");
        let path = status_path(&dir, "t");
        let w = StatusWriter::create(&path, 1, &["a"]).unwrap();
        let r = StatusReader::open(&path).unwrap();
        let mut cursor = r.learn_cursor();
        let total = 200_000u64;
        let mut seen = Vec::new();
        let mut lost = 0;
        std::thread::scope(|s| {
            let w = &w;
            s.spawn(move || {
                let mut ring = w.learn_writer(0).unwrap();
                for i in 0..total {
                    ring.push(&event(i));
                }
            });
            let mut out = Vec::new();
            while (seen.len() as u64 + lost) < total {
                out.clear();
                lost += r.read_learned(&mut cursor, &mut out).lost;
                seen.extend(out.iter().copied());
            }
        });
        // Every record read is one the writer wrote whole (its fields agree with each other),
        // in the order written; together with the lost ones they are all of them.
        let mut last = None;
        for e in &seen {
            let i = e.at_ns;
            assert_eq!(*e, event(i), "record {i} read whole");
            assert!(last.is_none_or(|l| i > l), "in order");
            last = Some(i);
        }
        assert_eq!(seen.len() as u64 + lost, total);
        drop(w);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn port_state_round_trips() {
        for s in [
            PortState::Absent,
            PortState::Attaching,
            PortState::Up,
            PortState::Failed(19),
        ] {
            assert_eq!(PortState::decode(s.encode()), s);
        }
    }
}
