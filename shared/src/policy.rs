//! Policy, service and stateful-path tables: what control compiles from Kubernetes
//! NetworkPolicy, ClusterIP Services (with their EndpointSlices) and one-way routing paths, and
//! what the forwarder's connection tracker reads when it sees a NEW connection.
//!
//! The forwarder classifies only NEW connections; everything after that is the flow table's
//! business (`lace-forwarder`'s `ct` module, ADR 0025). The tables here answer three questions:
//!
//! 1. **Who is the peer?** Every network has two LPM tables of *peer classes* (IPv4 and IPv6,
//!    [`crate::tables::NetworkView::peer_class4`]). Control partitions the address space by
//!    every peer that the network's policies name — pods picked by `podSelector` /
//!    `namespaceSelector` (their addresses as host routes) and `ipBlock`s (their prefixes, with
//!    the `except` holes as more specific prefixes) — and gives each part a class: two addresses
//!    are in one class exactly when every peer of every policy treats them alike. Class 0 is the
//!    rest of the world (no peer names it).
//! 2. **Is this endpoint isolated, and what does it allow?** A port's record carries its
//!    [`PolicySetId`] (0: no policy selects the endpoint, it is isolated in neither direction).
//!    Endpoints selected by the same policies with the same named-port resolutions share a set.
//!    A set says whether the endpoint is isolated for ingress and for egress; the *decisions*
//!    table maps (set, direction, peer class) to the ports allowed ([`Ports`]); a missing
//!    decision is a deny. Deciding a NEW connection is one LPM lookup, one hash lookup and a scan
//!    of a few port ranges.
//! 3. **Is the destination a Service?** A ClusterIP is a host route to [`NextHop::Service`] in
//!    the FIB of every network that reaches the Service; the (network, address, protocol,
//!    port) [`ServiceKey`] finds its [`ServiceRec`]: the backends, a Maglev lookup table over the
//!    ones in use (ready, else serving-and-terminating — KEP-1669), and the session-affinity
//!    timeout. Control builds the Maglev table (the same on every node: one function of the
//!    same inputs), so a backend change moves few flows.
//!
//! One-way routing paths put the destination's routes back to the sources into the
//! destination's FIB flagged [`RouteFlags::REPLY_ONLY`]: such a route carries only replies of
//! connections the flow table has seen opened the allowed way.
//!
//! A network whose local endpoints need connection tracking (it has policy sets, Services or
//! reply-only routes) is marked `stateful` in its [`crate::types::NetworkInfo`]; traffic of other
//! networks never touches the flow table. Every change to a network's peer classes, to a policy
//! set or decision of it, or to the policy set of one of its ports bumps the network's *policy
//! generation* (the writer does it): a tracked connection created under an older generation is
//! classified again on its next packet, so a narrowed policy revokes established flows without a
//! table walk.
//!
//! [`NextHop::Service`]: crate::types::NextHop::Service

use std::net::{IpAddr, Ipv6Addr};

use crate::array::ArrayHdr;
use crate::hash::{mix64, HashKey};
use crate::pod::Pod;
use crate::types::NetworkId;

/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IP protocol number of SCTP.
pub const PROTO_SCTP: u8 = 132;

/// A set of endpoints' policies (the value of a port's `policy` field). 0 is "no policy".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PolicySetId(pub u32);

impl PolicySetId {
    /// No policy selects the endpoint: it is isolated in neither direction.
    pub const NONE: PolicySetId = PolicySetId(0);
}

/// A peer class of a network (the value of its peer LPM tables). 0 is "no peer".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PeerClass(pub u32);

impl PeerClass {
    /// Addresses no peer of the network's policies names.
    pub const WORLD: PeerClass = PeerClass(0);
    /// The largest class a table can hold.
    pub const MAX: u32 = crate::fib::MAX_NEXT_HOP;
}

/// The direction a policy decision applies to, seen from the selected endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyDir {
    /// Connections opened toward the endpoint (the peer is the source).
    Ingress = 0,
    /// Connections the endpoint opens (the peer is the destination).
    Egress = 1,
}

/// What a policy set says about one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicySet {
    /// The network of the endpoints that use the set.
    pub network: NetworkId,
    /// Some policy selects the endpoints for ingress: only what a decision allows comes in.
    pub ingress_isolated: bool,
    /// Some policy selects the endpoints for egress: only what a decision allows goes out.
    pub egress_isolated: bool,
}

/// Policy-set record (by [`PolicySetId`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicySetRec {
    /// Network id.
    pub network: u32,
    /// [`PolicySetRec::PRESENT`], [`PolicySetRec::INGRESS`], [`PolicySetRec::EGRESS`].
    pub flags: u32,
}
// SAFETY: repr(C), two u32, every bit pattern valid.
unsafe impl Pod for PolicySetRec {}
crate::assert_layout!(PolicySetRec, 8, 4);

impl PolicySetRec {
    /// The record holds a set.
    pub const PRESENT: u32 = 1;
    /// Isolated for ingress.
    pub const INGRESS: u32 = 2;
    /// Isolated for egress.
    pub const EGRESS: u32 = 4;

    /// Whether the set isolates its endpoints in `dir`.
    #[inline]
    pub fn isolated(&self, dir: PolicyDir) -> bool {
        let bit = match dir {
            PolicyDir::Ingress => Self::INGRESS,
            PolicyDir::Egress => Self::EGRESS,
        };
        self.flags & (Self::PRESENT | bit) == Self::PRESENT | bit
    }
}

impl PolicySet {
    /// Encodes.
    pub fn to_rec(&self) -> PolicySetRec {
        PolicySetRec {
            network: self.network.0,
            flags: PolicySetRec::PRESENT
                | if self.ingress_isolated {
                    PolicySetRec::INGRESS
                } else {
                    0
                }
                | if self.egress_isolated {
                    PolicySetRec::EGRESS
                } else {
                    0
                },
        }
    }
    /// Decodes; None for an absent record.
    pub fn from_rec(r: &PolicySetRec) -> Option<PolicySet> {
        (r.flags & PolicySetRec::PRESENT != 0).then_some(PolicySet {
            network: NetworkId(r.network),
            ingress_isolated: r.flags & PolicySetRec::INGRESS != 0,
            egress_isolated: r.flags & PolicySetRec::EGRESS != 0,
        })
    }
}

/// A protocol's port range a decision allows (`lo..=hi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRange {
    /// IP protocol: [`PROTO_TCP`], [`PROTO_UDP`] or [`PROTO_SCTP`].
    pub proto: u8,
    /// First port.
    pub lo: u16,
    /// Last port (inclusive).
    pub hi: u16,
}

/// What a decision allows toward (egress) or from (ingress) a peer class.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ports {
    /// Every protocol and port (a rule without `ports`): ICMP too.
    All,
    /// Only these (protocol, port range)s — sorted, merged, not empty.
    Ranges(Vec<PortRange>),
}

impl Ports {
    /// Whether `proto`/`port` is allowed.
    pub fn allows(&self, proto: u8, port: u16) -> bool {
        match self {
            Ports::All => true,
            Ports::Ranges(r) => r
                .iter()
                .any(|r| r.proto == proto && r.lo <= port && port <= r.hi),
        }
    }

    /// The canonical form: ranges sorted by protocol and start, overlapping and adjacent ones
    /// of one protocol merged. An empty list stays empty (the writer refuses it).
    pub fn normalized(self) -> Ports {
        match self {
            Ports::All => Ports::All,
            Ports::Ranges(mut v) => {
                v.sort();
                let mut out: Vec<PortRange> = Vec::with_capacity(v.len());
                for r in v {
                    match out.last_mut() {
                        Some(l) if l.proto == r.proto && u32::from(r.lo) <= u32::from(l.hi) + 1 => {
                            l.hi = l.hi.max(r.hi);
                        }
                        _ => out.push(r),
                    }
                }
                Ports::Ranges(out)
            }
        }
    }
}

/// One range in a [`PortSetRec`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortRangeRec {
    /// First port.
    pub lo: u16,
    /// Last port (inclusive).
    pub hi: u16,
    /// IP protocol.
    pub proto: u8,
    _pad: u8,
}
// SAFETY: repr(C), integers with explicit padding (2+2+1+1 = 6), every bit pattern valid.
unsafe impl Pod for PortRangeRec {}
crate::assert_layout!(PortRangeRec, 6, 2);

/// Ranges per [`PortSetRec`].
pub const PORTSET_RANGES: usize = 9;

/// A port set in the portsets array: up to [`PORTSET_RANGES`] ranges, continued in record
/// `next` (0: none) when there are more.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortSetRec {
    /// Ranges used in this record.
    pub count: u16,
    /// In a chain's first record: the chain's length when its records are consecutive
    /// (`head..head + span`, which a reader may binary-search); 0 otherwise.
    pub span: u16,
    /// Index of the continuation record, 0 for none.
    pub next: u32,
    /// The ranges, sorted.
    pub ranges: [PortRangeRec; PORTSET_RANGES],
    _pad2: [u8; 2],
}
// SAFETY: repr(C), integers and arrays of Pod with explicit padding (2+2+4+54+2 = 64).
unsafe impl Pod for PortSetRec {}
crate::assert_layout!(PortSetRec, 64, 4);

impl PortSetRec {
    /// A record of up to [`PORTSET_RANGES`] ranges continued at `next`; `span` as the field
    /// says.
    pub fn new(ranges: &[PortRange], next: u32, span: u16) -> PortSetRec {
        let mut r = PortSetRec {
            count: ranges.len().min(PORTSET_RANGES) as u16,
            span,
            next,
            ..PortSetRec::default()
        };
        for (d, s) in r.ranges.iter_mut().zip(ranges) {
            *d = PortRangeRec {
                lo: s.lo,
                hi: s.hi,
                proto: s.proto,
                _pad: 0,
            };
        }
        r
    }

    /// The ranges this record holds.
    #[inline]
    pub fn ranges(&self) -> &[PortRangeRec] {
        &self.ranges[..usize::from(self.count).min(PORTSET_RANGES)]
    }
}

/// Value of a decision that allows every protocol and port.
pub const PORTS_ALL: u32 = u32::MAX;

/// Longest chain of port-set records a reader follows (a corrupt chain reads as a deny).
pub const MAX_PORTSET_CHAIN: usize = 256;

/// Key of the decisions table: (set, direction, class) packed in a u64.
#[inline]
pub fn decision_key(set: PolicySetId, dir: PolicyDir, class: PeerClass) -> u64 {
    (u64::from(set.0) << 32) | ((dir as u64) << 31) | u64::from(class.0 & 0x7fff_ffff)
}

/// A Service port as the forwarder looks it up: (network, ClusterIP, protocol, port).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ServiceKey {
    /// The ClusterIP, IPv4-mapped for IPv4, network order.
    pub addr: [u8; 16],
    /// The network the ClusterIP is looked up in.
    pub network: u32,
    /// The Service port.
    pub port: u16,
    /// IP protocol.
    pub proto: u8,
    _pad: u8,
}
// SAFETY: repr(C), byte array and integers with explicit padding (16+4+2+1+1 = 24).
unsafe impl Pod for ServiceKey {}
crate::assert_layout!(ServiceKey, 24, 4);

impl ServiceKey {
    /// The key of `proto`/`port` at `addr` in `network`.
    pub fn new(network: NetworkId, addr: IpAddr, proto: u8, port: u16) -> ServiceKey {
        ServiceKey {
            addr: ip_octets(addr),
            network: network.0,
            port,
            proto,
            _pad: 0,
        }
    }
    /// The ClusterIP.
    pub fn ip(&self) -> IpAddr {
        ip_of_octets(self.addr)
    }
}

impl HashKey for ServiceKey {
    #[inline(always)]
    fn hash(&self) -> u64 {
        self.hash_seeded(0)
    }
    #[inline(always)]
    fn hash_seeded(&self, seed: u64) -> u64 {
        let a = u128::from_le_bytes(self.addr);
        let rest =
            u64::from(self.network) << 32 | u64::from(self.port) << 8 | u64::from(self.proto);
        [a as u64 ^ mix64(rest ^ seed), (a >> 64) as u64].hash_seeded(seed)
    }
}

/// An IP address as 16 bytes (IPv4-mapped for IPv4).
#[inline]
pub fn ip_octets(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

/// Back from [`ip_octets`].
#[inline]
pub fn ip_of_octets(b: [u8; 16]) -> IpAddr {
    let a = Ipv6Addr::from(b);
    match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    }
}

/// A backend's EndpointSlice conditions (KEP-1669).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BackendState {
    /// `ready`.
    pub ready: bool,
    /// `serving`.
    pub serving: bool,
    /// `terminating`.
    pub terminating: bool,
}

/// One backend of a Service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Backend {
    /// The endpoint's address.
    pub addr: IpAddr,
    /// The target port.
    pub port: u16,
    /// Its conditions.
    pub state: BackendState,
}

/// Backend record (a [`ServiceRec`]'s `backends` array).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendRec {
    /// Address, IPv4-mapped for IPv4, network order.
    pub addr: [u8; 16],
    /// Target port.
    pub port: u16,
    /// [`BackendRec::PRESENT`] and the conditions.
    pub flags: u8,
    _pad: u8,
}
// SAFETY: repr(C), byte array and integers with explicit padding (16+2+1+1 = 20).
unsafe impl Pod for BackendRec {}
crate::assert_layout!(BackendRec, 20, 2);

impl BackendRec {
    /// The record holds a backend.
    pub const PRESENT: u8 = 1;
    /// `ready`.
    pub const READY: u8 = 2;
    /// `serving`.
    pub const SERVING: u8 = 4;
    /// `terminating`.
    pub const TERMINATING: u8 = 8;

    /// The backend's address.
    #[inline]
    pub fn ip(&self) -> IpAddr {
        ip_of_octets(self.addr)
    }
}

impl Backend {
    /// Encodes.
    pub fn to_rec(&self) -> BackendRec {
        BackendRec {
            addr: ip_octets(self.addr),
            port: self.port,
            flags: BackendRec::PRESENT
                | if self.state.ready {
                    BackendRec::READY
                } else {
                    0
                }
                | if self.state.serving {
                    BackendRec::SERVING
                } else {
                    0
                }
                | if self.state.terminating {
                    BackendRec::TERMINATING
                } else {
                    0
                },
            _pad: 0,
        }
    }
    /// Decodes; None for an absent record.
    pub fn from_rec(r: &BackendRec) -> Option<Backend> {
        (r.flags & BackendRec::PRESENT != 0).then(|| Backend {
            addr: r.ip(),
            port: r.port,
            state: BackendState {
                ready: r.flags & BackendRec::READY != 0,
                serving: r.flags & BackendRec::SERVING != 0,
                terminating: r.flags & BackendRec::TERMINATING != 0,
            },
        })
    }
}

/// A Service port's data-plane form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    /// `sessionAffinity: ClientIP`'s timeout in seconds; None without affinity.
    pub affinity_timeout_s: Option<u32>,
    /// Every backend (the table refers to them by index).
    pub backends: Vec<Backend>,
    /// The Maglev lookup table: backend indices; its length is a prime. Empty when no backend
    /// can take connections: the Service rejects them (ICMP port unreachable), never blackholes
    /// — unless it is node-local.
    pub table: Vec<u32>,
    /// `internalTrafficPolicy: Local`: the backends are this node's only, and with none that
    /// takes connections they are dropped (counted `no-local-endpoint`), not rejected, as
    /// kube-proxy does (KEP-2086).
    pub node_local: bool,
}

/// Service record (by the index a [`ServiceKey`] maps to).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ServiceRec {
    /// [`ServiceRec::PRESENT`], [`ServiceRec::AFFINITY`], [`ServiceRec::NODE_LOCAL`].
    pub flags: u32,
    /// Session affinity timeout in seconds.
    pub affinity_timeout_s: u32,
    /// The backends ([`BackendRec`] by index).
    pub backends: ArrayHdr,
    /// The Maglev table (u32 backend indices + 1: an all-zero element is absent).
    pub table: ArrayHdr,
    /// Entries of the Maglev table.
    pub table_len: u32,
    _pad: u32,
}
// SAFETY: repr(C) of Pod fields with explicit padding (4+4+16+16+4+4 = 48), every bit pattern valid.
unsafe impl Pod for ServiceRec {}
crate::assert_layout!(ServiceRec, 48, 8);

impl ServiceRec {
    /// The record holds a Service.
    pub const PRESENT: u32 = 1;
    /// `sessionAffinity: ClientIP`.
    pub const AFFINITY: u32 = 2;
    /// `internalTrafficPolicy: Local` ([`ServiceInfo::node_local`]).
    pub const NODE_LOCAL: u32 = 4;

    /// A record for `info` (the arrays are filled by the writer).
    pub(crate) fn header_of(info: &ServiceInfo) -> ServiceRec {
        ServiceRec {
            flags: ServiceRec::PRESENT
                | if info.affinity_timeout_s.is_some() {
                    ServiceRec::AFFINITY
                } else {
                    0
                }
                | if info.node_local {
                    ServiceRec::NODE_LOCAL
                } else {
                    0
                },
            affinity_timeout_s: info.affinity_timeout_s.unwrap_or(0),
            table_len: info.table.len() as u32,
            ..ServiceRec::default()
        }
    }
}

/// Flags of a route's next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RouteFlags(pub u8);

impl RouteFlags {
    /// An ordinary route.
    pub const NONE: RouteFlags = RouteFlags(0);
    /// The route carries only replies of connections opened the other way (a one-way routing
    /// path's way back): a packet that is not such a reply is dropped.
    pub const REPLY_ONLY: RouteFlags = RouteFlags(1);

    /// Whether the route carries replies only.
    #[inline]
    pub fn reply_only(self) -> bool {
        self.0 & Self::REPLY_ONLY.0 != 0
    }
}

/// Maglev's lookup table (Eisenbud et al., NSDI 2016) for `backends` (each a stable name, e.g.
/// "address:port"): every backend gets a permutation of the `m` slots from two hashes of its
/// name, and backends take turns claiming their next free slot until every slot is taken. The
/// result depends only on the set of names (they are sorted first) and `m`, so every node
/// computes the same table, and removing one backend moves few slots of the others. `m` must be
/// a prime larger than the number of backends; [`maglev_size`] picks one.
pub fn maglev_table(backends: &[&str], m: usize) -> Vec<u32> {
    if backends.is_empty() || m == 0 {
        return Vec::new();
    }
    let mut order: Vec<(usize, &str)> = backends.iter().copied().enumerate().collect();
    order.sort_by(|a, b| a.1.cmp(b.1));
    let perm: Vec<(usize, usize)> = order
        .iter()
        .map(|(_, name)| {
            let h = fnv1a(name.as_bytes());
            let offset = (mix64(h ^ 0x6d61_676c_6576) as usize) % m;
            let skip = (mix64(h ^ 0x736b_6970) as usize) % (m - 1) + 1;
            (offset, skip)
        })
        .collect();
    let mut next = vec![0usize; order.len()];
    let mut table = vec![u32::MAX; m];
    let mut filled = 0;
    'fill: loop {
        for (i, &(offset, skip)) in perm.iter().enumerate() {
            let mut c = (offset + next[i] * skip) % m;
            while table[c] != u32::MAX {
                next[i] += 1;
                c = (offset + next[i] * skip) % m;
            }
            table[c] = order[i].0 as u32;
            next[i] += 1;
            filled += 1;
            if filled == m {
                break 'fill;
            }
        }
    }
    table
}

/// FNV-1a over a name: stable across builds and nodes (the Maglev table must be the same on
/// every node).
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The Maglev table size for `n` backends: the smallest of a list of primes that is at least
/// 100 × n (Maglev's guidance for an even spread), at most 65,521.
pub fn maglev_size(n: usize) -> usize {
    const PRIMES: [usize; 9] = [251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521];
    let want = n.saturating_mul(100);
    PRIMES
        .iter()
        .copied()
        .find(|&p| p >= want)
        .unwrap_or(PRIMES[PRIMES.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_normalize_and_allow() {
        let p = Ports::Ranges(vec![
            PortRange {
                proto: PROTO_TCP,
                lo: 80,
                hi: 80,
            },
            PortRange {
                proto: PROTO_UDP,
                lo: 53,
                hi: 53,
            },
            PortRange {
                proto: PROTO_TCP,
                lo: 81,
                hi: 90,
            },
            PortRange {
                proto: PROTO_TCP,
                lo: 85,
                hi: 85,
            },
        ])
        .normalized();
        assert_eq!(
            p,
            Ports::Ranges(vec![
                PortRange {
                    proto: PROTO_TCP,
                    lo: 80,
                    hi: 90
                },
                PortRange {
                    proto: PROTO_UDP,
                    lo: 53,
                    hi: 53
                },
            ])
        );
        assert!(p.allows(PROTO_TCP, 88));
        assert!(!p.allows(PROTO_TCP, 53));
        assert!(p.allows(PROTO_UDP, 53));
        assert!(!p.allows(PROTO_SCTP, 80));
        assert!(Ports::All.allows(1, 0));
    }

    #[test]
    fn records_round_trip() {
        let s = PolicySet {
            network: NetworkId(3),
            ingress_isolated: true,
            egress_isolated: false,
        };
        let r = s.to_rec();
        assert_eq!(PolicySet::from_rec(&r), Some(s));
        assert!(r.isolated(PolicyDir::Ingress));
        assert!(!r.isolated(PolicyDir::Egress));
        assert_eq!(PolicySet::from_rec(&PolicySetRec::default()), None);
        let b = Backend {
            addr: "10.40.1.7".parse().unwrap(),
            port: 8080,
            state: BackendState {
                ready: false,
                serving: true,
                terminating: true,
            },
        };
        assert_eq!(Backend::from_rec(&b.to_rec()), Some(b));
        let k = ServiceKey::new(NetworkId(2), "fd40::10".parse().unwrap(), PROTO_TCP, 443);
        assert_eq!(k.ip(), "fd40::10".parse::<IpAddr>().unwrap());
        let k4 = ServiceKey::new(NetworkId(2), "10.96.0.10".parse().unwrap(), PROTO_UDP, 53);
        assert_eq!(k4.ip(), "10.96.0.10".parse::<IpAddr>().unwrap());
        assert_ne!(k.hash_seeded(1), k4.hash_seeded(1));
        // Every field enters the hash.
        let mut k5 = k4;
        k5.port = 54;
        assert_ne!(k4.hash_seeded(7), k5.hash_seeded(7));
        let mut k6 = k4;
        k6.network = 3;
        assert_ne!(k4.hash_seeded(7), k6.hash_seeded(7));
    }

    #[test]
    fn decision_keys_are_distinct() {
        let a = decision_key(PolicySetId(1), PolicyDir::Ingress, PeerClass(5));
        let b = decision_key(PolicySetId(1), PolicyDir::Egress, PeerClass(5));
        let c = decision_key(PolicySetId(2), PolicyDir::Ingress, PeerClass(5));
        let d = decision_key(PolicySetId(1), PolicyDir::Ingress, PeerClass(6));
        let all = [a, b, c, d];
        for i in 0..all.len() {
            for j in i + 1..all.len() {
                assert_ne!(all[i], all[j]);
            }
        }
    }

    #[test]
    fn maglev_spreads_evenly_and_moves_little() {
        let names: Vec<String> = (0..5).map(|i| format!("10.40.1.{i}:8080")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let m = maglev_size(refs.len());
        assert_eq!(m, 509);
        let t = maglev_table(&refs, m);
        assert_eq!(t.len(), m);
        let mut count = [0usize; 5];
        for &b in &t {
            count[b as usize] += 1;
        }
        // Maglev's guarantee: each backend gets ⌊m/n⌋ or ⌈m/n⌉ slots.
        for c in count {
            assert!((101..=102).contains(&c), "{count:?}");
        }
        // Order of the input does not matter.
        let mut rev = refs.clone();
        rev.reverse();
        let t2 = maglev_table(&rev, m);
        for (a, b) in t.iter().zip(&t2) {
            assert_eq!(refs[*a as usize], rev[*b as usize]);
        }
        // Removing one backend moves few of the other backends' slots.
        let fewer: Vec<&str> = refs.iter().copied().filter(|n| *n != refs[2]).collect();
        let t3 = maglev_table(&fewer, m);
        let moved = t
            .iter()
            .zip(&t3)
            .filter(|(a, b)| **a != 2 && refs[**a as usize] != fewer[**b as usize])
            .count();
        assert!(moved < m / 10, "{moved} of {m} slots moved");
        assert!(maglev_table(&[], m).is_empty());
    }
}
