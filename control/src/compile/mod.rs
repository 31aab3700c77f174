//! The table compiler: the world ([`World`]) and one node's name → that node's tables, written
//! to the shared-memory tables ([`lace_shared::tables::TableWriter`]) incrementally.
//!
//! Two halves:
//!
//! - **What the tables should be.** [`desired`] is a pure function of the world, the node and
//!   a [`CompileConfig`]: it returns a [`NodeTables`] (a plain description in ordered maps) and
//!   the [`Note`]s the daemon surfaces as conditions (conflicts, unsupported features,
//!   inconsistent input). [`Compiler::plan`] returns exactly what [`desired`] returns, but
//!   recomputes only the networks the reported [`Change`]s touch (see "Incremental" below).
//! - **Making them so.** [`Compiler::apply`] diffs the tables last published against the next
//!   ones, issues only the set/remove calls for what changed, and publishes once. On a writer
//!   error the batch is abandoned, nothing of it is published, and [`Compiler::last`] stays
//!   what the forwarder sees.
//!
//! What the tables hold (ADR 0008 has the reasons):
//!
//! - **Networks**: every l3 or l2 network with an endpoint or an allocation on this node.
//!   l3 gateways are the first host address of this node's block, l2 gateways the first host
//!   address of the network's prefix; the gateway MAC is [`gateway_mac`] (the same on every
//!   node); MTU is the underlay MTU − 40 (`H.Encaps.Red` without SRH), − 54 on l2.
//! - **Routes** of a network N on this node: its gateways → `Receive`; unless N is anonymous,
//!   N's *route set*: each local endpoint's /32 and /128 → `Local`, this node's block of N →
//!   `Unreachable` (a free address answers ICMP unreachable at once), each other node's block of
//!   N → `Remote` to that node's End.DT46 SID of N. Then, in policy order, for every accepted
//!   routing policy between l3 networks with N among its sources, the destination's route set
//!   narrowed to the policy's prefixes; and for every one with destination N, each source's
//!   route set (not narrowed: the FIB matches destinations only) — flagged
//!   [`RouteFlags::REPLY_ONLY`] when the policy is `sourceToDestination`: such a route carries
//!   only replies of connections the flow table saw opened the allowed way (ADR 0029). A prefix
//!   reached once plainly and once reply-only is plain. An l2 network's route set is every
//!   address its neighbor table resolves (not the gateways) → the local port and MAC, or the
//!   End.DT46 SID of the network on the node the FDB names (ADR 0049). An external network's
//!   route set is its static routes narrowed to its prefixes on a node that carries it, else
//!   its prefixes to a carrier's End.DT46 SID (ADR 0054, `external.rs`). A prefix reached
//!   twice with different next hops keeps the first and is reported as a
//!   [`NoteKind::Conflict`], never silently overwritten.
//! - **Services** (ADR 0029): last, each ClusterIP's host route → `NextHop::Service` in the
//!   FIB of the Service's network (unless it is anonymous) and of every network a policy lets
//!   reach that network (the sources of a policy toward it, and, bidirectional, the destination
//!   of a policy from it), with a record per (ClusterIP, protocol, port) in that network's
//!   [`NetworkTables::services`] ([`service_info`]: the backends, the Maglev table). A ClusterIP
//!   that another route (an endpoint) or another Service already holds is a conflict note.
//!   A network with Services or reply-only routes is [`stateful`].
//! - **Ports**: the endpoints on this node. **Remote nodes**: every other node. **Local SIDs**:
//!   End.DT46 of each l3 and l2 network programmed here ([`encode_sid`]), End.DT2U and End.DT2M of
//!   each l2 one.
//! - **l2** networks, on every node with an endpoint of theirs: gateways → `Receive` and the
//!   local endpoints' host routes (the IP path to and from the gateway); the neighbor table
//!   (every endpoint's addresses and the gateways → MAC: ARP and NDP are answered locally), the
//!   FDB (every endpoint's MAC → its local port or its node's End.DT2U SID) and the flood list
//!   (local ports, then every other member node's End.DT2M SID); End.DT2U and End.DT2M SIDs of
//!   their own. Their MTU leaves room for the inner Ethernet header too
//!   ([`L2_ENCAP_OVERHEAD`]). Routing policy imports into their FIB as into an l3 one's (their
//!   packets to other networks leave through the gateway), with the ClusterIPs of the l3
//!   networks reached; their own Services are not placed (ADR 0049).
//! - **external** networks (`external.rs`, ADR 0054): on a node one of their `spec.uplinks[]`
//!   entries selects, their static routes whose next hop lies on the node's subnets there →
//!   `NextHop::Uplink` (on the entry's VLAN); and, on a node with one, a sources table per
//!   VLAN ([`NetworkId::external_sources`]): the prefixes of the external networks carried on
//!   it → their ids (the untagged one also those of the networks the node does not carry). A
//!   network numbered with a reserved id is not programmed.
//! - **The host interface** (when the world has one, ADR 0023): its port
//!   ([`PortId::HOST`], kind [`lace_shared::types::PortKind::Host`]) in the host network
//!   ([`NetworkId::HOST`]): every local endpoint's addresses → `Local`, this node's l3 blocks →
//!   `Unreachable`, other nodes' blocks of every l3 network → their End.DT46 SIDs
//!   (ADR 0036), every programmed network's ClusterIPs → `Service` (the network is tracked for
//!   them), the node's own addresses → the host port, the gateways [`HOST_GATEWAY4`] /
//!   [`HOST_GATEWAY6`] → `Receive`. Every programmed network routes the node's addresses to the
//!   host port, and an l3 network every other node's addresses (its Node's `InternalIP`s) to
//!   that node's End.DT46 SID of the host network, which every node with a host interface has.
//!   [`host_routes`] is what the host's own routing table sends into the interface.
//!
//! **Incremental.** [`Compiler`] keeps this node's endpoints indexed by network, each
//! network's route set, and each programmed network's compiled tables (shared through [`Arc`]).
//! A [`Change`] invalidates only what depends on it: one pod's change recompiles its network
//! and the networks that import it through routing policy; the diff skips unchanged networks by
//! pointer. The caller must report every change since the previous plan; [`Change::All`] is
//! always correct.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use lace_shared::policy::{RouteFlags, ServiceInfo};
use lace_shared::types::{
    FdbEntry, FloodTarget, MacAddr, NetworkId, NetworkInfo, NetworkKind, NextHop, NodeId, NodeInfo,
    PortId, PortInfo, Sid, SidBehavior,
};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::world::{AttachmentKey, NamespacedName, World};

mod apply;
mod encode;
mod external;
mod next_hop;
mod policy;
mod readback;
mod routes;
mod services;

pub use apply::{ApplyError, ApplyStats};
pub use encode::{
    decode_sid, encode_sid, gateway4, gateway6, gateway_mac, SidError, SidFunction, FUNCTION_BITS,
    MAX_LOCATOR_LEN,
};
pub use policy::{PeerMap, PolicyLimits, PolicyTables, SetTables};
pub use readback::{read_back, ReadBackError};
pub use services::service_info;

use routes::{Cache, LocalIndex, Members};
use services::ServiceIndex;

/// The host network's IPv4 gateway: the next hop of the host's routes into the host interface
/// (link-local; the host knows its MAC from a permanent neighbor entry).
pub const HOST_GATEWAY4: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 1);
/// The host network's IPv6 gateway.
pub const HOST_GATEWAY6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

/// The ClusterIPs whose Service records differ between `published` and `next`, in any network:
/// what a batch the writer refused (a full table or region) leaves out of the forwarder's
/// tables, so that their Services can say so.
pub fn changed_cluster_ips(published: &NodeTables, next: &NodeTables) -> BTreeSet<IpAddr> {
    let empty = BTreeMap::new();
    let mut out = BTreeSet::new();
    for id in published.networks.keys().chain(next.networks.keys()) {
        if let (Some(a), Some(b)) = (published.networks.get(id), next.networks.get(id)) {
            if Arc::ptr_eq(a, b) {
                continue;
            }
        }
        let (old, new) = (
            published.networks.get(id).map_or(&empty, |n| &n.services),
            next.networks.get(id).map_or(&empty, |n| &n.services),
        );
        for port in old.keys().chain(new.keys()) {
            let same = match (old.get(port), new.get(port)) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
                _ => false,
            };
            if !same {
                out.insert(port.addr);
            }
        }
    }
    out
}

/// What the host sends into its host interface: the host network's destinations (local
/// endpoints, this node's blocks, other nodes' blocks of the l3 networks, the ClusterIPs),
/// without those a wider one covers. Empty without a host network.
pub fn host_routes(t: &NodeTables) -> BTreeSet<IpNet> {
    let Some(host) = t.networks.get(&NetworkId::HOST) else {
        return BTreeSet::new();
    };
    let wanted: Vec<IpNet> = host
        .routes
        .iter()
        .filter(|(_, r)| match r.nh {
            NextHop::Local { port, .. } => port != PortId::HOST,
            NextHop::Unreachable | NextHop::Remote { .. } | NextHop::Service => true,
            _ => false,
        })
        .map(|(p, _)| *p)
        .collect();
    wanted
        .iter()
        .filter(|p| !wanted.iter().any(|q| q != *p && q.contains(*p)))
        .copied()
        .collect()
}

/// Bytes `H.Encaps.Red` adds without an SRH: the outer IPv6 header.
pub const ENCAP_OVERHEAD: u16 = 40;
/// Bytes `H.Encaps.L2.Red` adds to an l2 endpoint's IP packet: the outer IPv6 header and the
/// inner frame's Ethernet header, which crosses the underlay too.
pub const L2_ENCAP_OVERHEAD: u16 = ENCAP_OVERHEAD + 14;

/// Settings of the compilation that do not come from the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileConfig {
    /// MTU of the node's uplink (the IPv6 packet size the underlay carries).
    pub underlay_mtu: u16,
    /// How large one network's NetworkPolicy tables may grow.
    pub policy: PolicyLimits,
}

impl Default for CompileConfig {
    fn default() -> Self {
        CompileConfig {
            underlay_mtu: 1500,
            policy: PolicyLimits::default(),
        }
    }
}

impl CompileConfig {
    /// The MTU offered to endpoints of l3 networks: underlay MTU − [`ENCAP_OVERHEAD`].
    pub fn pod_mtu(&self) -> u16 {
        self.underlay_mtu.saturating_sub(ENCAP_OVERHEAD)
    }

    /// The MTU of the host interface: the smallest any pod has, so that what the host sends
    /// fits every pod it reaches.
    pub fn host_mtu(&self) -> u16 {
        self.pod_mtu_of(NetworkKind::L2)
    }

    /// The MTU offered to endpoints of a network of `kind`: l2 endpoints' frames carry their
    /// Ethernet header across the underlay ([`L2_ENCAP_OVERHEAD`]).
    pub fn pod_mtu_of(&self, kind: NetworkKind) -> u16 {
        match kind {
            NetworkKind::L2 => self.underlay_mtu.saturating_sub(L2_ENCAP_OVERHEAD),
            NetworkKind::L3 | NetworkKind::External => self.pod_mtu(),
        }
    }
}

/// A FIB entry: where a prefix goes, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// The next hop.
    pub nh: NextHop,
    /// [`RouteFlags::REPLY_ONLY`] on a one-way path's way back.
    pub flags: RouteFlags,
}

impl From<NextHop> for Route {
    fn from(nh: NextHop) -> Route {
        Route {
            nh,
            flags: RouteFlags::NONE,
        }
    }
}

/// A Service port as a network's tables hold it: (ClusterIP, IP protocol, port) — with the
/// network, the forwarder's [`lace_shared::policy::ServiceKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePort {
    /// The ClusterIP.
    pub addr: IpAddr,
    /// IP protocol number.
    pub protocol: u8,
    /// The Service port.
    pub port: u16,
}

/// Whether a network's local endpoints go through the forwarder's connection tracker
/// ([`NetworkInfo::stateful`]): the one place that decides it. A network is stateful when its
/// endpoints here have NetworkPolicy sets, its FIB leads to a Service (NAT), or it holds
/// reply-only routes (the way back of a one-way path).
pub fn stateful(has_policy_sets: bool, routes: &BTreeMap<IpNet, Route>) -> bool {
    has_policy_sets
        || routes
            .values()
            .any(|r| r.nh == NextHop::Service || r.flags.reply_only())
}

/// One network's tables on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkTables {
    /// Settings (kind, gateways, MTU).
    pub info: NetworkInfo,
    /// FIB, IPv4 and IPv6: prefix (host bits zero) → next hop and flags.
    pub routes: BTreeMap<IpNet, Route>,
    /// Service records of the ClusterIPs this network's FIB routes to `NextHop::Service`.
    pub services: BTreeMap<ServicePort, Arc<ServiceInfo>>,
    /// l2: IP → MAC of every endpoint of the network and of its gateways.
    pub neighbors: BTreeMap<IpAddr, MacAddr>,
    /// l2: MAC → where it lives.
    pub fdb: BTreeMap<MacAddr, FdbEntry>,
    /// l2: where broadcast and multicast go (local ports first, by id; then nodes, by id).
    pub flood: Vec<FloodTarget>,
}

/// A node's tables as a plain description.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeTables {
    /// Networks by id; shared with the compiler's cache (cheap to clone and to compare).
    pub networks: BTreeMap<NetworkId, Arc<NetworkTables>>,
    /// Pod ports by id.
    pub ports: BTreeMap<PortId, PortInfo>,
    /// Remote nodes by id.
    pub nodes: BTreeMap<NodeId, NodeInfo>,
    /// Local SIDs.
    pub sids: BTreeMap<Sid, SidBehavior>,
    /// The node's SRv6 source address (its underlay address): the outer source of everything
    /// it encapsulates, which the tables' precomputed encapsulations carry.
    pub srv6_source: Option<std::net::Ipv6Addr>,
    /// Kubernetes NetworkPolicy tables by network (networks without policy sets or peer
    /// classes have no entry); shared with the compiler's cache.
    pub policies: BTreeMap<NetworkId, Arc<PolicyTables>>,
}

impl NodeTables {
    /// Total number of routes over all networks.
    pub fn route_count(&self) -> usize {
        self.networks.values().map(|n| n.routes.len()).sum()
    }
}

/// What kind of thing a [`Note`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NoteKind {
    /// Two sources wanted different things for one entry; the first (in precedence order) was
    /// kept.
    Conflict,
    /// The world asks for something the data plane does not do yet; it was left out.
    Unsupported,
    /// The world refers to something it does not contain (validation should have caught it);
    /// the reference was skipped.
    Inconsistent,
    /// The world asks for more than the tables hold; the last good tables stay in force.
    Limit,
    /// A path the tables hold does not work now: its next hop on the uplink does not answer.
    Down,
}

/// Something the daemon should surface as a condition: the compilation went ahead without it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Note {
    /// Kind.
    pub kind: NoteKind,
    /// The object concerned, e.g. `Network blue` or `NetworkRoutingPolicy web-to-db`.
    pub object: String,
    /// What happened and what to do about it.
    pub message: String,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}: {}", self.kind, self.object, self.message)
    }
}

/// The result of a compilation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// The node's tables.
    pub tables: NodeTables,
    /// Conditions to surface, sorted, without duplicates.
    pub notes: Vec<Note>,
}

/// Why a node's tables cannot be compiled at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// The node is not in the world (no Node with a locator yet).
    #[error(
        "node {node:?}: not in the world's nodes; the node needs a locator and underlay address \
         before its tables can be compiled (check the node's name and its locator assignment)"
    )]
    UnknownNode {
        /// The node's name.
        node: String,
    },
    /// The node's own locator cannot hold SIDs.
    #[error("node {node:?}: {source}")]
    Locator {
        /// The node's name.
        node: String,
        /// Why.
        #[source]
        source: SidError,
    },
}

/// What changed in the world since the previous [`Compiler::plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Anything, or unknown: recompile everything.
    All,
    /// An endpoint was added, changed or removed (on any node).
    Endpoint(AttachmentKey),
    /// A network was added, changed or removed.
    Network(String),
    /// A node was added, changed or removed.
    Node(String),
    /// The allocation of (network, node) was added, changed or removed.
    Allocation {
        /// Network name.
        network: String,
        /// Node name.
        node: String,
    },
    /// The accepted routing policies changed.
    Routing,
    /// A Service was added, changed (binding, ClusterIPs, ports, backends) or removed.
    Service(NamespacedName),
    /// A pod's labels or named ports changed (or it appeared or went).
    Pod(NamespacedName),
    /// A namespace's labels changed.
    Namespace(String),
    /// A Kubernetes NetworkPolicy or its binding changed.
    NetworkPolicy(NamespacedName),
}

/// What `node`'s tables should be in `world`. Pure; the same as a fresh
/// [`Compiler::plan`] with [`Change::All`].
pub fn desired(world: &World, node: &str, cfg: CompileConfig) -> Result<Compiled, CompileError> {
    Compiler::new(node, cfg).plan(world, &[Change::All])
}

/// The incremental compiler of one node: caches and what is published.
#[derive(Debug)]
pub struct Compiler {
    node: String,
    cfg: CompileConfig,
    last: NodeTables,
    cache: Option<Cache>,
}

impl Compiler {
    /// A compiler that assumes nothing is published: the first [`Compiler::apply`] writes
    /// every entry. Entries already in the region are rewritten with identical values
    /// (harmless to forwarding); entries no longer wanted stay — use [`Compiler::resume`] to
    /// remove those too.
    pub fn new(node: &str, cfg: CompileConfig) -> Compiler {
        Compiler {
            node: node.to_string(),
            cfg,
            last: NodeTables::default(),
            cache: None,
        }
    }

    /// A compiler that starts from the tables already published (read back through `cfg`'s
    /// region, see [`read_back`]): the first apply changes only what differs, and removes what
    /// is no longer wanted.
    pub fn resume(
        node: &str,
        cfg: CompileConfig,
        tables: &lace_shared::tables::TablesConfig,
    ) -> Result<Compiler, ReadBackError> {
        let mut c = Compiler::new(node, cfg);
        c.last = read_back(tables)?;
        Ok(c)
    }

    /// The node this compiler compiles for.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The tables as last published (or read back).
    pub fn last(&self) -> &NodeTables {
        &self.last
    }

    /// The tables the node should have, recomputing only what `changes` touch. `changes` must
    /// list every change to `world` since the previous call (the first call recomputes all).
    pub fn plan(&mut self, world: &World, changes: &[Change]) -> Result<Compiled, CompileError> {
        let me = world
            .nodes
            .get(&self.node)
            .ok_or_else(|| CompileError::UnknownNode {
                node: self.node.clone(),
            })?;
        if me.locator.prefix_len() > MAX_LOCATOR_LEN {
            return Err(CompileError::Locator {
                node: self.node.clone(),
                source: SidError::LocatorTooLong {
                    locator: me.locator,
                },
            });
        }
        let full = self.cache.is_none()
            || changes.iter().any(|c| match c {
                Change::All => true,
                Change::Node(n) => *n == self.node,
                _ => false,
            });
        let cache = match &mut self.cache {
            Some(c) if !full => c,
            slot => {
                let c = slot.insert(Cache::new(
                    LocalIndex::build(world, &self.node),
                    LocalIndex::build_l2(world),
                    ServiceIndex::build(world, &self.node),
                ));
                c.build_policy(world, self.cfg.policy);
                c
            }
        };
        let mut recompile_all = full;
        let mut dirty = BTreeSet::new();
        // Networks whose Services changed: their route sets stay, their tables and their
        // importers' are recompiled.
        let mut dirty_services = BTreeSet::new();
        if !full {
            for c in changes {
                match c {
                    Change::All => recompile_all = true,
                    Change::Endpoint(key) => {
                        // A transit interface anywhere steers paths on this node.
                        recompile_all |= next_hop::may_move_paths(world, key);
                        let (old, new) = cache.index.update(world, Members::Node(&self.node), key);
                        dirty.extend(old);
                        dirty.extend(new);
                        // Every member node of an l2 network holds every endpoint's entries.
                        let (old, new) = cache.l2.update(world, Members::L2, key);
                        dirty.extend(old);
                        dirty.extend(new);
                    }
                    Change::Network(n) => {
                        dirty.insert(n.clone());
                        // Its kind decides whether its endpoints are l2 members.
                        cache.l2 = LocalIndex::build_l2(world);
                    }
                    Change::Node(_) => {
                        // Every route set holds remote nodes' SIDs.
                        cache.sets.clear();
                        recompile_all = true;
                    }
                    Change::Allocation { network, .. } => {
                        dirty.insert(network.clone());
                    }
                    Change::Routing => recompile_all = true,
                    Change::Service(key) => {
                        let (old, new) = cache.services.update(world, &self.node, key);
                        dirty_services.extend(old);
                        dirty_services.extend(new);
                    }
                    // The policy compiler's own business (below).
                    Change::Pod(_) | Change::Namespace(_) | Change::NetworkPolicy(_) => {}
                }
            }
            // NetworkPolicy, after the local index took the endpoint changes; a network whose
            // policy sets appear or vanish changes its settings (`stateful`).
            let wanted = cache.policy_networks(world);
            let index = &cache.index;
            let flipped = cache
                .policy
                .update(world, changes, |n| index.of(n), &wanted);
            dirty.extend(flipped);
        }
        for n in &dirty {
            cache.sets.remove(n);
        }
        dirty.extend(dirty_services);
        let ctx = routes::Ctx {
            world,
            me,
            cfg: self.cfg,
        };
        if recompile_all {
            cache.clear_outs();
            for name in world.networks.keys() {
                cache.compile_network(&ctx, name);
            }
        } else {
            for name in routes::importers(world, &dirty) {
                cache.compile_network(&ctx, &name);
            }
        }
        Ok(cache.assemble(&ctx))
    }

    /// Makes the published tables `next`: only the entries that differ from
    /// [`Compiler::last`] are written, then one publication. On error nothing is published
    /// and [`Compiler::last`] is unchanged.
    pub fn apply(
        &mut self,
        writer: &mut lace_shared::tables::TableWriter,
        next: NodeTables,
    ) -> Result<ApplyStats, ApplyError> {
        let stats = apply::apply(writer, &self.last, &next)?;
        self.last = next;
        Ok(stats)
    }
}

/// A prefix as the writer takes it: (address, length).
fn split(p: &IpNet) -> (IpAddr, u8) {
    (p.network(), p.prefix_len())
}
