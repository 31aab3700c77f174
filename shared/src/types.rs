//! Identifiers and table entries shared by control and forwarder.
//!
//! Each entry exists twice: as a typed Rust value the APIs take and return (an enum where the
//! domain has alternatives), and as the `#[repr(C)]` record stored in shared memory. Decoding a
//! record never fails: an unknown tag decodes as the entry being absent or as a drop, so a
//! reader of a newer writer's region degrades to dropping, never to undefined behaviour.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::pod::Pod;
use crate::policy::PolicySetId;

/// A network's numeric id (`status.id` of a lace-cni.io Network). 0 is never a valid id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NetworkId(pub u32);

impl NetworkId {
    /// The node's host network: the FIB that packets from the [`PortKind::Host`] port are
    /// looked up in (every local endpoint's addresses). Control never gives this id to a
    /// Network; it is small so that the networks table stays small.
    pub const HOST: NetworkId = NetworkId(0xffff);
    /// The external networks' prefixes (ADR 0054): the FIB a plain packet arriving on the
    /// uplink is looked up in by its **source** address, each route's next hop the
    /// [`NextHop::Network`] it belongs to, the longest match across all external networks
    /// winning. Control never gives this id to a Network either.
    /// This is the untagged uplink's; each VLAN has its own ([`NetworkId::external_sources`]).
    pub const EXTERNAL_SOURCES: NetworkId = NetworkId(0xfffe);
    /// The first id of the block the node's own tables are numbered in (through
    /// [`NetworkId::HOST`]): the sources tables of VLANs 1–4094, the untagged one's, the host
    /// network's.
    pub const NODE_TABLES: NetworkId = NetworkId(0xf000);

    /// The sources table of the uplink's VLAN `vlan` (0: untagged, [`NetworkId::EXTERNAL_SOURCES`];
    /// `None` for 4095 and above, which are not VLANs): a packet arriving tagged is classified
    /// among the external networks the node carries on that VLAN only, so that two networks
    /// with overlapping prefixes on different VLANs stay apart (ADR 0054).
    pub const fn external_sources(vlan: u16) -> Option<NetworkId> {
        match vlan {
            0 => Some(NetworkId::EXTERNAL_SOURCES),
            1..=4094 => Some(NetworkId(NetworkId::NODE_TABLES.0 + vlan as u32 - 1)),
            _ => None,
        }
    }

    /// Whether control may give this id to a Network: not 0, not in the block of the node's
    /// own tables ([`NetworkId::NODE_TABLES`] through [`NetworkId::HOST`]).
    pub fn assignable(self) -> bool {
        self.0 != 0 && !(NetworkId::NODE_TABLES.0..=NetworkId::HOST.0).contains(&self.0)
    }
}

/// A node's numeric id, unique in the cluster while the node exists. 0 is never valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

/// A forwarder port on this node. Pod ports are numbered from 1 by control; [`PortId::UPLINK`]
/// (0) is the node's uplink, which the forwarder's configuration names, not the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub u32);

impl PortId {
    /// The node's uplink to the underlay.
    pub const UPLINK: PortId = PortId(0);
    /// The node's host interface ([`PortKind::Host`]): the highest port id, never a pod's.
    pub const HOST: PortId = PortId(crate::status::MAX_PORTS - 1);
}

/// A Linux interface name (at most 15 bytes, `IFNAMSIZ` − 1): the host side of a pod
/// interface, which the forwarder attaches as a port.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IfName([u8; 16]);

impl IfName {
    /// Validates a name the way the kernel does: 1–15 bytes, no `/`, whitespace, `:` or NUL,
    /// not `.` or `..`.
    pub fn new(name: &str) -> Result<IfName, crate::Error> {
        let b = name.as_bytes();
        let bad = b.is_empty()
            || b.len() > 15
            || name == "."
            || name == ".."
            || b.iter()
                .any(|&c| c == b'/' || c == b':' || c == 0 || c.is_ascii_whitespace());
        if bad {
            return Err(crate::Error::Invalid {
                what: format!(
                    "interface name {name:?}: must be 1-15 bytes without '/', ':', NUL or \
                     whitespace"
                ),
            });
        }
        let mut out = [0u8; 16];
        out[..b.len()].copy_from_slice(b);
        Ok(IfName(out))
    }
    /// The name (empty for the default, unnamed value).
    pub fn as_str(&self) -> &str {
        let n = self.0.iter().position(|&c| c == 0).unwrap_or(16);
        std::str::from_utf8(&self.0[..n]).unwrap_or("")
    }
    /// Raw bytes, NUL padded.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0
    }
    /// From raw NUL-padded bytes; None unless they form a valid name.
    pub fn from_bytes(b: [u8; 16]) -> Option<IfName> {
        let n = b.iter().position(|&c| c == 0).unwrap_or(16);
        let s = std::str::from_utf8(&b[..n]).ok()?;
        IfName::new(s).ok()
    }
}

impl std::fmt::Debug for IfName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for IfName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An SRv6 segment identifier (an IPv6 address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sid(pub Ipv6Addr);

/// An Ethernet MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl std::fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl MacAddr {
    /// The MAC as the low 48 bits of a u64 (the FDB key).
    #[inline]
    pub fn to_u64(self) -> u64 {
        let m = self.0;
        u64::from_be_bytes([0, 0, m[0], m[1], m[2], m[3], m[4], m[5]])
    }
    /// Back from [`MacAddr::to_u64`].
    #[inline]
    pub fn from_u64(v: u64) -> MacAddr {
        let b = v.to_be_bytes();
        MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]])
    }
}

/// An IPv4 address as a neighbor-table key (IPv4-mapped IPv6, host order).
#[inline]
pub fn v4_key(a: Ipv4Addr) -> u128 {
    u128::from(a.to_ipv6_mapped())
}

/// Where a FIB route sends a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NextHop {
    /// Deliver to a pod port on this node, rewriting the destination MAC.
    Local {
        /// The pod's port.
        port: PortId,
        /// The pod's MAC.
        mac: MacAddr,
    },
    /// Encapsulate to another node (`H.Encaps.Red` to `sid`).
    Remote {
        /// The node owning the destination.
        node: NodeId,
        /// That node's SID for this network (End.DT46 / End.DT2U), precomputed by control.
        sid: Sid,
    },
    /// Out of an uplink to a gateway (external networks, static routes).
    Uplink {
        /// The uplink port.
        port: PortId,
        /// The gateway, IPv4-mapped for IPv4.
        gateway: Ipv6Addr,
        /// The 802.1Q VLAN the gateway is on (1–4094; 0: untagged).
        vlan: u16,
    },
    /// Addressed to the forwarder itself (the network gateway): ARP/NDP/echo are answered.
    Receive,
    /// Silently dropped and counted (a blackhole route).
    Drop,
    /// Dropped with ICMP destination unreachable.
    Unreachable,
    /// A ClusterIP: the connection tracker picks a backend of the Service the packet's
    /// (network, address, protocol, port) names ([`crate::policy::ServiceKey`]).
    Service,
    /// The packet belongs to network `net` and goes on in its table: an external network's
    /// prefix in [`NetworkId::EXTERNAL_SOURCES`].
    Network {
        /// The network.
        net: NetworkId,
    },
}

/// Next-hop record in shared memory.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NextHopRec {
    /// [`NextHop`] variant: 0 absent, 1 Local, 3 Remote, 4 Uplink, 5 Receive, 6 Drop,
    /// 7 Unreachable, 8 Service, 9 Network (2 is unused: it decodes as absent).
    pub kind: u8,
    /// The MAC of `Local`.
    pub mac: [u8; 6],
    /// The route's [`crate::policy::RouteFlags`].
    pub flags: u8,
    /// Port (`Local`, `Uplink`), node (`Remote`) or network (`Network`).
    pub id: u32,
    /// SID (`Remote`) or gateway (`Uplink`), network order.
    pub addr: [u8; 16],
    /// The VLAN of `Uplink` (0: untagged).
    pub vlan: u16,
    _pad2: u16,
}
// SAFETY: repr(C), integers and byte arrays, explicit padding, every bit pattern valid.
unsafe impl Pod for NextHopRec {}
crate::assert_layout!(NextHopRec, 32, 4);

impl NextHop {
    /// Encodes for shared memory.
    pub fn to_rec(self) -> NextHopRec {
        let mut r = NextHopRec::default();
        match self {
            NextHop::Local { port, mac } => {
                r.kind = 1;
                r.id = port.0;
                r.mac = mac.0;
            }
            NextHop::Remote { node, sid } => {
                r.kind = 3;
                r.id = node.0;
                r.addr = sid.0.octets();
            }
            NextHop::Uplink {
                port,
                gateway,
                vlan,
            } => {
                r.kind = 4;
                r.id = port.0;
                r.addr = gateway.octets();
                r.vlan = vlan;
            }
            NextHop::Receive => r.kind = 5,
            NextHop::Drop => r.kind = 6,
            NextHop::Unreachable => r.kind = 7,
            NextHop::Service => r.kind = 8,
            NextHop::Network { net } => {
                r.kind = 9;
                r.id = net.0;
            }
        }
        r
    }

    /// Encodes with route flags.
    pub fn to_rec_flags(self, flags: crate::policy::RouteFlags) -> NextHopRec {
        let mut r = self.to_rec();
        r.flags = flags.0;
        r
    }

    /// Decodes; None for an absent or unknown record.
    pub fn from_rec(r: &NextHopRec) -> Option<NextHop> {
        Some(match r.kind {
            1 => NextHop::Local {
                port: PortId(r.id),
                mac: MacAddr(r.mac),
            },
            3 => NextHop::Remote {
                node: NodeId(r.id),
                sid: Sid(Ipv6Addr::from(r.addr)),
            },
            4 => NextHop::Uplink {
                port: PortId(r.id),
                gateway: Ipv6Addr::from(r.addr),
                vlan: r.vlan,
            },
            5 => NextHop::Receive,
            6 => NextHop::Drop,
            7 => NextHop::Unreachable,
            8 => NextHop::Service,
            9 => NextHop::Network {
                net: NetworkId(r.id),
            },
            _ => return None,
        })
    }
}

/// Kind of a lace network (the seed's `spec.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetworkKind {
    /// Routed, host-local blocks.
    L3,
    /// Flat L2 domain.
    L2,
    /// Underlay prefixes outside the cluster.
    External,
}

/// A network's data-plane settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkInfo {
    /// Kind.
    pub kind: NetworkKind,
    /// `spec.anonymous`: no implicit self-route.
    pub anonymous: bool,
    /// MAC the forwarder answers ARP/NDP with for the gateway.
    pub gateway_mac: MacAddr,
    /// IPv4 gateway (first address of the block/prefix), if the network has IPv4.
    pub gateway4: Option<Ipv4Addr>,
    /// IPv6 gateway, if the network has IPv6.
    pub gateway6: Option<Ipv6Addr>,
    /// MTU offered to endpoints.
    pub mtu: u16,
    /// Traffic of the network's local endpoints goes through the connection tracker: the
    /// network has policy sets, Services or reply-only routes ([`crate::policy`]).
    pub stateful: bool,
    /// l2 networks: learning and the BUM limit (ignored on other kinds).
    pub l2: L2Settings,
}

/// An l2 network's learning and broadcast settings (ADR 0019), as the forwarder applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct L2Settings {
    /// Learning on, with this aging time in seconds: the forwarder reports announcements
    /// (gratuitous ARP, unsolicited NA, RARP) and, at most every `aging / 4`, that a learned
    /// MAC is still seen on its port; unknown unicast is flooded. `None`: learning off.
    pub learning: Option<std::num::NonZeroU32>,
    /// Broadcast, multicast and unknown unicast (and announcements) each source endpoint may
    /// send per second; 0: unlimited.
    pub bum_pps: u32,
    /// How many such frames may come at once (the token bucket's depth).
    pub bum_burst: u32,
}

/// What a port is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortKind {
    /// A pod (or VM) interface attached to one network.
    Pod,
    /// The node's uplink to the underlay.
    Uplink,
    /// The node's own network stack (a veth into the host namespace): packets from it are the
    /// node's — kubelet's probes, host-network pods, node agents — looked up in the host
    /// network ([`NetworkId::HOST`]) with no anti-spoofing check, and always allowed to local
    /// pods (Kubernetes semantics: the node reaches its pods). Its `mac` is the host side's
    /// MAC, the destination of packets delivered to it.
    Host,
}

/// A port's binding: which network and endpoint it is, for ingress checks and delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortInfo {
    /// Kind.
    pub kind: PortKind,
    /// The network packets from this port belong to (pods); unused for uplinks.
    pub network: NetworkId,
    /// The endpoint's MAC (anti-spoofing source check, delivery rewrite).
    pub mac: MacAddr,
    /// The endpoint's IPv4 address, if any.
    pub ipv4: Option<Ipv4Addr>,
    /// The endpoint's IPv6 address, if any.
    pub ipv6: Option<Ipv6Addr>,
    /// Opaque endpoint id from control (for counters and events).
    pub endpoint: u64,
    /// The host-side interface the forwarder attaches as this port (pods); the forwarder
    /// hot-plugs it when the port appears in the tables and removes it when it goes.
    pub iface: IfName,
    /// The endpoint's policy set ([`PolicySetId::NONE`]: no policy selects it).
    pub policy: PolicySetId,
    /// A transit endpoint (ADR 0057): routing policy steers paths through it, so it forwards
    /// packets whose source address is not its own; pod-input checks only their MAC.
    pub transit: bool,
}

/// A remote node: where its SIDs live and how to reach it on the underlay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's SRv6 locator prefix.
    pub locator: Ipv6Addr,
    /// Locator prefix length.
    pub locator_len: u8,
    /// The node's underlay address (outer destination when no SRH is used).
    pub underlay: Ipv6Addr,
}

/// SRv6 endpoint behaviours a local SID can have (RFC 8986).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SidBehavior {
    /// End: the node's own SID, advance to the next segment.
    End,
    /// End.DT46: decapsulate and look the inner packet up in a network's FIB.
    EndDt46(NetworkId),
    /// End.DT2U: decapsulate and forward the inner frame by the network's FDB.
    EndDt2u(NetworkId),
    /// End.DT2M: decapsulate and flood the inner frame to the network's local ports.
    EndDt2m(NetworkId),
}

/// Where a MAC lives (FDB value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FdbTarget {
    /// On a local port.
    Port(PortId),
    /// Behind a remote node: frames to it are encapsulated (`H.Encaps.L2.Red`) to that node's
    /// End.DT2U SID of the network. The writer keeps the encapsulation as a next hop
    /// ([`NextHop::Remote`]), so it is precomputed and follows the node's changes.
    Remote {
        /// The node.
        node: NodeId,
        /// Its End.DT2U SID of the network.
        sid: Sid,
    },
}

impl FdbTarget {
    /// The next hop that carries frames to a remote target.
    pub fn next_hop(&self) -> Option<NextHop> {
        match *self {
            FdbTarget::Port(_) => None,
            FdbTarget::Remote { node, sid } => Some(NextHop::Remote { node, sid }),
        }
    }
}

/// An FDB entry: location plus the mobility sequence number (newest wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FdbEntry {
    /// Location.
    pub target: FdbTarget,
    /// Mobility sequence number.
    pub seq: u32,
    /// Learned from traffic (as opposed to from an endpoint).
    pub learned: bool,
}

/// One member of an l2 network's flood list: where a copy of a broadcast, multicast (or,
/// with learning, unknown unicast) frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FloodTarget {
    /// A local port of the network (never the frame's own port).
    Port(PortId),
    /// A remote node hosting endpoints of the network: one copy to its End.DT2M SID (head-end
    /// replication); frames that arrived from a remote node are never sent on to another.
    Remote {
        /// The node.
        node: NodeId,
        /// Its End.DT2M SID of the network.
        sid: Sid,
    },
}

impl FloodTarget {
    /// The next hop that carries copies to a remote member.
    pub fn next_hop(&self) -> Option<NextHop> {
        match *self {
            FloodTarget::Port(_) => None,
            FloodTarget::Remote { node, sid } => Some(NextHop::Remote { node, sid }),
        }
    }
}

/// Where an l2 frame goes, as the forwarder reads it from an FDB entry or a flood-list member:
/// a local port, or the precomputed encapsulation of next hop `index`
/// ([`crate::tables::Snapshot::encap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L2Hop {
    /// A local port.
    Port(PortId),
    /// A remote node, through next hop `index`.
    Remote(u32),
}

/// Bit of a flood-list record marking a local port (else the record is a next-hop index).
pub const FLOOD_PORT: u32 = 1 << 31;

/// Decodes a flood-list record (see [`FLOOD_PORT`]).
#[inline]
pub fn flood_hop(rec: u32) -> L2Hop {
    if rec & FLOOD_PORT != 0 {
        L2Hop::Port(PortId(rec & !FLOOD_PORT))
    } else {
        L2Hop::Remote(rec)
    }
}

/// Network record in shared memory.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NetworkRec {
    /// 0 absent, 1 L3, 2 L2, 3 External.
    pub kind: u8,
    /// Bit 0: anonymous; bit 1: stateful.
    pub flags: u8,
    /// MTU.
    pub mtu: u16,
    /// IPv4 gateway (host order), 0 = none.
    pub gateway4: u32,
    /// IPv6 gateway (network order), all zero = none.
    pub gateway6: [u8; 16],
    /// Gateway MAC.
    pub gateway_mac: [u8; 6],
    _pad: [u8; 2],
    /// IPv4 FIB.
    pub fib4: crate::fib::FibHdr,
    /// IPv6 FIB.
    pub fib6: crate::fib::FibHdr,
    /// Neighbor table (IP → MAC).
    pub neigh: crate::hash::HashHdr,
    /// FDB (MAC → location).
    pub fdb: crate::hash::HashHdr,
    /// Flood list: nodes hosting endpoints of this (l2) network.
    pub flood: crate::array::ArrayHdr,
    /// Peer classes of IPv4 addresses ([`crate::policy`]).
    pub peers4: crate::fib::FibHdr,
    /// Peer classes of IPv6 addresses.
    pub peers6: crate::fib::FibHdr,
    /// Policy generation: bumped by the writer on every change of the network's peer classes,
    /// policy sets, decisions or ports' policy sets.
    pub policy_gen: u32,
    /// l2 learning aging time in seconds; 0: learning off.
    pub learn_aging: u32,
    /// l2 BUM limit per source endpoint, packets per second; 0: unlimited.
    pub bum_pps: u32,
    /// l2 BUM burst.
    pub bum_burst: u32,
}
// SAFETY: repr(C) of Pod fields with explicit padding (the four u32 after the 8-aligned headers
// end the record on an 8-byte boundary; checked below); every bit pattern valid.
unsafe impl Pod for NetworkRec {}
const _: () =
    assert!(std::mem::size_of::<NetworkRec>() == std::mem::offset_of!(NetworkRec, bum_burst) + 4);

impl NetworkInfo {
    /// Encodes into an existing record (keeping its tables).
    pub fn write(&self, r: &mut NetworkRec) {
        r.kind = match self.kind {
            NetworkKind::L3 => 1,
            NetworkKind::L2 => 2,
            NetworkKind::External => 3,
        };
        r.flags = self.anonymous as u8 | (self.stateful as u8) << 1;
        r.mtu = self.mtu;
        r.gateway4 = self.gateway4.map_or(0, u32::from);
        r.gateway6 = self.gateway6.map_or([0; 16], |a| a.octets());
        r.gateway_mac = self.gateway_mac.0;
        r.learn_aging = self.l2.learning.map_or(0, std::num::NonZeroU32::get);
        r.bum_pps = self.l2.bum_pps;
        r.bum_burst = self.l2.bum_burst;
    }

    /// Decodes; None for an absent record.
    pub fn read(r: &NetworkRec) -> Option<NetworkInfo> {
        Some(NetworkInfo {
            kind: match r.kind {
                1 => NetworkKind::L3,
                2 => NetworkKind::L2,
                3 => NetworkKind::External,
                _ => return None,
            },
            anonymous: r.flags & 1 != 0,
            stateful: r.flags & 2 != 0,
            gateway_mac: MacAddr(r.gateway_mac),
            gateway4: (r.gateway4 != 0).then(|| Ipv4Addr::from(r.gateway4)),
            gateway6: (r.gateway6 != [0; 16]).then(|| Ipv6Addr::from(r.gateway6)),
            mtu: r.mtu,
            l2: L2Settings {
                learning: std::num::NonZeroU32::new(r.learn_aging),
                bum_pps: r.bum_pps,
                bum_burst: r.bum_burst,
            },
        })
    }
}

/// Port record in shared memory.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortRec {
    /// 0 absent, 1 Pod, 2 Uplink, 3 Host ([`PortKind`]).
    pub kind: u8,
    /// Bit 0: has IPv4; bit 1: has IPv6; bit 2: a transit endpoint.
    pub flags: u8,
    /// MAC.
    pub mac: [u8; 6],
    /// Network id.
    pub network: u32,
    /// IPv4 (host order).
    pub ipv4: u32,
    /// IPv6 (network order).
    pub ipv6: [u8; 16],
    /// Endpoint id.
    pub endpoint: u64,
    /// Interface name, NUL padded.
    pub iface: [u8; 16],
    /// Policy set ([`PolicySetId`]).
    pub policy: u32,
    _pad: u32,
}
// SAFETY: repr(C), integers and byte arrays without implicit padding
// (1+1+6+4+4+16+8+16+4+4 = 64).
unsafe impl Pod for PortRec {}
crate::assert_layout!(PortRec, 64, 8);

impl PortRec {
    /// Whether the record is a pod port (the only kind packets are accepted from as a pod).
    #[inline]
    pub fn is_pod(&self) -> bool {
        self.kind == 1
    }
    /// Whether the record is the node's host interface ([`PortKind::Host`]): traffic from it
    /// is the node's own.
    #[inline]
    pub fn is_host(&self) -> bool {
        self.kind == 3
    }
    /// Whether the endpoint forwards others' packets ([`PortInfo::transit`]).
    #[inline]
    pub fn is_transit(&self) -> bool {
        self.flags & 4 != 0
    }
    /// The endpoint's IPv4 address, if it has one.
    #[inline]
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        (self.flags & 1 != 0).then(|| Ipv4Addr::from(self.ipv4))
    }
    /// The endpoint's IPv6 address, if it has one.
    #[inline]
    pub fn ipv6(&self) -> Option<Ipv6Addr> {
        (self.flags & 2 != 0).then(|| Ipv6Addr::from(self.ipv6))
    }
    /// The network packets from this port belong to.
    #[inline]
    pub fn network(&self) -> NetworkId {
        NetworkId(self.network)
    }
    /// The endpoint's policy set.
    #[inline]
    pub fn policy(&self) -> PolicySetId {
        PolicySetId(self.policy)
    }
}

impl PortInfo {
    /// Encodes.
    pub fn to_rec(&self) -> PortRec {
        PortRec {
            kind: match self.kind {
                PortKind::Pod => 1,
                PortKind::Uplink => 2,
                PortKind::Host => 3,
            },
            flags: self.ipv4.is_some() as u8
                | (self.ipv6.is_some() as u8) << 1
                | (self.transit as u8) << 2,
            mac: self.mac.0,
            network: self.network.0,
            ipv4: self.ipv4.map_or(0, u32::from),
            ipv6: self.ipv6.map_or([0; 16], |a| a.octets()),
            endpoint: self.endpoint,
            iface: self.iface.to_bytes(),
            policy: self.policy.0,
            _pad: 0,
        }
    }
    /// Decodes; None for an absent record.
    pub fn from_rec(r: &PortRec) -> Option<PortInfo> {
        Some(PortInfo {
            kind: match r.kind {
                1 => PortKind::Pod,
                2 => PortKind::Uplink,
                3 => PortKind::Host,
                _ => return None,
            },
            network: NetworkId(r.network),
            mac: MacAddr(r.mac),
            ipv4: (r.flags & 1 != 0).then(|| Ipv4Addr::from(r.ipv4)),
            ipv6: (r.flags & 2 != 0).then(|| Ipv6Addr::from(r.ipv6)),
            endpoint: r.endpoint,
            iface: IfName::from_bytes(r.iface).unwrap_or_default(),
            policy: PolicySetId(r.policy),
            transit: r.flags & 4 != 0,
        })
    }
}

/// The precomputed SRv6 encapsulation of one remote next hop (`H.Encaps.Red` to a remote
/// node's SID for one network), kept by the writer beside the next hop it belongs to: the
/// forwarder copies [`EncapRec::ip6`] in front of the inner packet and patches only the payload
/// length, the flow label, the traffic class, the next header and the hop limit.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncapRec {
    /// The outer IPv6 header: version 6, source = the node's SRv6 source address, destination =
    /// the remote SID; traffic class, flow label, payload length, next header and hop limit 0.
    pub ip6: [u8; 40],
    /// The remote node's underlay address: the outer next hop resolved on the uplink.
    pub underlay: [u8; 16],
    /// The remote node.
    pub node: u32,
    /// Bit 0: present; bit 1: the remote node is known (its underlay address is set); bit 2:
    /// an SRv6 source address is configured.
    pub flags: u32,
}
// SAFETY: repr(C), byte arrays and u32s without implicit padding (40+16+4+4 = 64).
unsafe impl Pod for EncapRec {}
crate::assert_layout!(EncapRec, 64, 4);

impl Default for EncapRec {
    fn default() -> Self {
        EncapRec {
            ip6: [0; 40],
            underlay: [0; 16],
            node: 0,
            flags: 0,
        }
    }
}

impl EncapRec {
    /// Flag: the record is present.
    pub const PRESENT: u32 = 1;
    /// Flag: the remote node's underlay address is known.
    pub const NODE_KNOWN: u32 = 2;
    /// Flag: the outer source address is configured.
    pub const SOURCE_SET: u32 = 4;

    /// The rewrite of `H.Encaps.Red` from `source` to `sid`, for a remote node reached at
    /// `underlay` (`None`: node unknown) — `source` `None`: not configured yet.
    pub fn new(
        source: Option<Ipv6Addr>,
        sid: Sid,
        node: NodeId,
        underlay: Option<Ipv6Addr>,
    ) -> Self {
        let mut ip6 = [0u8; 40];
        ip6[0] = 0x60;
        if let Some(s) = source {
            ip6[8..24].copy_from_slice(&s.octets());
        }
        ip6[24..40].copy_from_slice(&sid.0.octets());
        let mut flags = Self::PRESENT;
        if underlay.is_some() {
            flags |= Self::NODE_KNOWN;
        }
        if source.is_some() {
            flags |= Self::SOURCE_SET;
        }
        EncapRec {
            ip6,
            underlay: underlay.map_or([0; 16], |a| a.octets()),
            node: node.0,
            flags,
        }
    }
    /// Whether it can be used: present, with the node's underlay address and a source.
    #[inline]
    pub fn usable(&self) -> bool {
        self.flags & (Self::PRESENT | Self::NODE_KNOWN | Self::SOURCE_SET)
            == Self::PRESENT | Self::NODE_KNOWN | Self::SOURCE_SET
    }
    /// The remote node.
    #[inline]
    pub fn node_id(&self) -> NodeId {
        NodeId(self.node)
    }
    /// The outer next hop on the underlay.
    #[inline]
    pub fn underlay_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.underlay)
    }
}

/// Node record in shared memory.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeRec {
    /// 0 absent, 1 present.
    pub present: u8,
    /// Locator length.
    pub locator_len: u8,
    _pad: [u8; 6],
    /// Locator (network order).
    pub locator: [u8; 16],
    /// Underlay address (network order).
    pub underlay: [u8; 16],
}
// SAFETY: repr(C), byte arrays with explicit padding (1+1+6+16+16 = 40).
unsafe impl Pod for NodeRec {}
crate::assert_layout!(NodeRec, 40, 1);

impl NodeInfo {
    /// Encodes.
    pub fn to_rec(&self) -> NodeRec {
        NodeRec {
            present: 1,
            locator_len: self.locator_len,
            _pad: [0; 6],
            locator: self.locator.octets(),
            underlay: self.underlay.octets(),
        }
    }
    /// Decodes; None for an absent record.
    pub fn from_rec(r: &NodeRec) -> Option<NodeInfo> {
        (r.present == 1).then(|| NodeInfo {
            locator: Ipv6Addr::from(r.locator),
            locator_len: r.locator_len,
            underlay: Ipv6Addr::from(r.underlay),
        })
    }
}

/// Local SID record (value of the SID table).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SidRec {
    /// 0 absent, 1 End, 2 End.DT46, 3 End.DT2U, 4 End.DT2M.
    pub behavior: u32,
    /// Network id (DT behaviours).
    pub network: u32,
}
// SAFETY: repr(C), two u32, every bit pattern valid.
unsafe impl Pod for SidRec {}
crate::assert_layout!(SidRec, 8, 4);

impl SidBehavior {
    /// Encodes.
    pub fn to_rec(self) -> SidRec {
        let (behavior, network) = match self {
            SidBehavior::End => (1, 0),
            SidBehavior::EndDt46(n) => (2, n.0),
            SidBehavior::EndDt2u(n) => (3, n.0),
            SidBehavior::EndDt2m(n) => (4, n.0),
        };
        SidRec { behavior, network }
    }
    /// Decodes; None for an absent or unknown record.
    pub fn from_rec(r: &SidRec) -> Option<SidBehavior> {
        Some(match r.behavior {
            1 => SidBehavior::End,
            2 => SidBehavior::EndDt46(NetworkId(r.network)),
            3 => SidBehavior::EndDt2u(NetworkId(r.network)),
            4 => SidBehavior::EndDt2m(NetworkId(r.network)),
            _ => return None,
        })
    }
}

/// FDB record (value of a network's FDB).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FdbRec {
    /// 0 absent, 1 port, 2 remote node; bit 7: learned.
    pub kind: u8,
    _pad: [u8; 3],
    /// Port or node id.
    pub id: u32,
    /// Mobility sequence number.
    pub seq: u32,
    /// Remote: the next-hop index of the node's End.DT2U encapsulation.
    pub hop: u32,
}
// SAFETY: repr(C), integers with explicit padding, every bit pattern valid.
unsafe impl Pod for FdbRec {}
crate::assert_layout!(FdbRec, 16, 4);

impl FdbRec {
    /// Where frames to this MAC go; None for an absent or unknown record.
    #[inline]
    pub fn hop(&self) -> Option<L2Hop> {
        match self.kind & 0x7f {
            1 => Some(L2Hop::Port(PortId(self.id))),
            2 => Some(L2Hop::Remote(self.hop)),
            _ => None,
        }
    }
    /// Learned from traffic.
    #[inline]
    pub fn learned(&self) -> bool {
        self.kind & 0x80 != 0
    }
}

impl FdbEntry {
    /// Encodes; `hop` is the next-hop index of a remote target's encapsulation (0 for a port).
    pub fn to_rec(&self, hop: u32) -> FdbRec {
        let (k, id) = match self.target {
            FdbTarget::Port(p) => (1, p.0),
            FdbTarget::Remote { node, .. } => (2, node.0),
        };
        FdbRec {
            kind: k | if self.learned { 0x80 } else { 0 },
            _pad: [0; 3],
            id,
            seq: self.seq,
            hop,
        }
    }
    /// Decodes, with `next_hop` resolving a remote record's next-hop index; None for an absent
    /// or unknown record, or a remote one whose next hop is not a remote next hop.
    pub fn from_rec(r: &FdbRec, next_hop: impl Fn(u32) -> Option<NextHop>) -> Option<FdbEntry> {
        let target = match r.hop()? {
            L2Hop::Port(p) => FdbTarget::Port(p),
            L2Hop::Remote(i) => match next_hop(i)? {
                NextHop::Remote { node, sid } if node.0 == r.id => FdbTarget::Remote { node, sid },
                _ => return None,
            },
        };
        Some(FdbEntry {
            target,
            seq: r.seq,
            learned: r.learned(),
        })
    }
}

/// Neighbor record (value of a network's neighbor table, and of the underlay neighbors).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NeighRec {
    /// The MAC.
    pub mac: [u8; 6],
    /// Bit 0: present; bit 1: learned.
    pub flags: u8,
    _pad: u8,
}
// SAFETY: repr(C), bytes only, every bit pattern valid.
unsafe impl Pod for NeighRec {}
crate::assert_layout!(NeighRec, 8, 1);

impl NeighRec {
    /// A present entry for `mac`.
    pub fn new(mac: MacAddr, learned: bool) -> NeighRec {
        NeighRec {
            mac: mac.0,
            flags: 1 | (learned as u8) << 1,
            _pad: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sources_tables_are_node_tables_apart_from_each_other() {
        let ids: Vec<NetworkId> = (0..=4094)
            .map(|v| NetworkId::external_sources(v).unwrap())
            .collect();
        let distinct: std::collections::BTreeSet<u32> = ids.iter().map(|n| n.0).collect();
        assert_eq!(distinct.len(), ids.len());
        assert!(!distinct.contains(&NetworkId::HOST.0));
        assert!(ids.iter().all(|n| !n.assignable()));
        assert_eq!(
            NetworkId::external_sources(0),
            Some(NetworkId::EXTERNAL_SOURCES)
        );
        assert_eq!(NetworkId::external_sources(1), Some(NetworkId::NODE_TABLES));
        assert_eq!(NetworkId::external_sources(4095), None);
        assert!(NetworkId(NetworkId::NODE_TABLES.0 - 1).assignable());
        assert!(NetworkId(NetworkId::HOST.0 + 1).assignable());
        assert!(!NetworkId(0).assignable());
    }

    #[test]
    fn records_round_trip() {
        let hops = [
            NextHop::Local {
                port: PortId(3),
                mac: MacAddr([2, 0, 0, 0, 0, 9]),
            },
            NextHop::Remote {
                node: NodeId(7),
                sid: Sid("fc00:0:7:e000::1".parse().unwrap()),
            },
            NextHop::Uplink {
                port: PortId(1),
                gateway: "::ffff:192.0.2.1".parse().unwrap(),
                vlan: 0,
            },
            NextHop::Uplink {
                port: PortId(0),
                gateway: "2001:db8::1".parse().unwrap(),
                vlan: 4094,
            },
            NextHop::Receive,
            NextHop::Drop,
            NextHop::Unreachable,
            NextHop::Service,
            NextHop::Network { net: NetworkId(12) },
        ];
        for h in hops {
            assert_eq!(NextHop::from_rec(&h.to_rec()), Some(h));
        }
        assert_eq!(NextHop::from_rec(&NextHopRec::default()), None);
        let p = PortInfo {
            kind: PortKind::Pod,
            network: NetworkId(4),
            mac: MacAddr([2, 1, 2, 3, 4, 5]),
            ipv4: Some("10.40.1.2".parse().unwrap()),
            ipv6: None,
            endpoint: 99,
            iface: IfName::new("lace0a1b2c").unwrap(),
            policy: PolicySetId(7),
            transit: false,
        };
        assert_eq!(PortInfo::from_rec(&p.to_rec()), Some(p));
        assert!(p.to_rec().is_pod() && !p.to_rec().is_host());
        let host = PortInfo {
            kind: PortKind::Host,
            network: NetworkId::HOST,
            ipv4: None,
            ..p
        };
        let rec = host.to_rec();
        assert!(rec.is_host() && !rec.is_pod());
        assert_eq!(PortInfo::from_rec(&rec), Some(host));
        let transit = PortInfo { transit: true, ..p };
        assert!(transit.to_rec().is_transit() && !p.to_rec().is_transit());
        assert_eq!(PortInfo::from_rec(&transit.to_rec()), Some(transit));
        for b in [
            SidBehavior::End,
            SidBehavior::EndDt46(NetworkId(2)),
            SidBehavior::EndDt2u(NetworkId(3)),
            SidBehavior::EndDt2m(NetworkId(4)),
        ] {
            assert_eq!(SidBehavior::from_rec(&b.to_rec()), Some(b));
        }
        let sid = Sid("fc00:0:5::e020:0:3".parse().unwrap());
        let f = FdbEntry {
            target: FdbTarget::Remote {
                node: NodeId(5),
                sid,
            },
            seq: 12,
            learned: true,
        };
        let hop = |i: u32| {
            (i == 9).then_some(NextHop::Remote {
                node: NodeId(5),
                sid,
            })
        };
        assert_eq!(FdbEntry::from_rec(&f.to_rec(9), hop), Some(f));
        assert_eq!(f.to_rec(9).hop(), Some(L2Hop::Remote(9)));
        // A record whose next hop leads elsewhere does not decode.
        assert_eq!(FdbEntry::from_rec(&f.to_rec(8), hop), None);
        let p = FdbEntry {
            target: FdbTarget::Port(PortId(3)),
            seq: 0,
            learned: false,
        };
        assert_eq!(FdbEntry::from_rec(&p.to_rec(0), hop), Some(p));
        assert_eq!(flood_hop(FLOOD_PORT | 3), L2Hop::Port(PortId(3)));
        assert_eq!(flood_hop(7), L2Hop::Remote(7));
        for l2 in [
            L2Settings::default(),
            L2Settings {
                learning: std::num::NonZeroU32::new(300),
                bum_pps: 1000,
                bum_burst: 200,
            },
        ] {
            let info = NetworkInfo {
                kind: NetworkKind::L2,
                anonymous: true,
                gateway_mac: MacAddr([2, 0xfe, 0, 0, 0, 9]),
                gateway4: Some("10.50.0.1".parse().unwrap()),
                gateway6: None,
                mtu: 1446,
                // Both values of the flag, beside both l2 settings.
                stateful: l2.learning.is_some(),
                l2,
            };
            let mut rec = NetworkRec::default();
            info.write(&mut rec);
            assert_eq!(NetworkInfo::read(&rec), Some(info));
        }
        let mac = MacAddr([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]);
        assert_eq!(MacAddr::from_u64(mac.to_u64()), mac);
        assert_eq!(mac.to_string(), "aa:bb:cc:dd:ee:ff");
    }
}
