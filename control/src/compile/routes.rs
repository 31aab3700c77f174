//! Route sets, per-network compilation and the caches behind [`super::Compiler::plan`].
//!
//! A network's *route set* is where its addresses go when looked up on this node (local
//! endpoints, this node's block, other nodes' blocks). A programmed network's FIB is its
//! gateways, its own route set (unless anonymous) and the route sets routing policy imports.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use lace_shared::policy::{PolicySetId, RouteFlags};
use lace_shared::types::{
    FdbEntry, FdbTarget, FloodTarget, L2Settings, MacAddr, NetworkId, NetworkInfo, NetworkKind,
    NextHop, NodeInfo, PortId, PortInfo, PortKind, Sid, SidBehavior,
};

use super::encode::{encode_sid, gateway4, gateway6, gateway_mac, SidFunction};
use super::next_hop::{self, Steering, Way};
use super::policy::PolicyCompiler;
use super::services::ServiceIndex;
use super::{
    stateful, CompileConfig, Compiled, NetworkTables, NodeTables, Note, NoteKind, Route,
    ServicePort, HOST_GATEWAY4, HOST_GATEWAY6,
};
use crate::api::{Direction, NetworkType};
use crate::source::NamespacedName;
use crate::world::{AttachmentKey, EndpointModel, NetworkModel, NodeModel, World};

/// What every per-network computation reads.
pub(super) struct Ctx<'a> {
    pub world: &'a World,
    pub me: &'a NodeModel,
    pub cfg: CompileConfig,
}

/// Objects grouped by the network they belong to, with each object's network: the shape of the
/// compiler's indexes (endpoints, Services), so that a changed object names the networks to
/// recompile.
#[derive(Debug)]
pub(super) struct ByNetwork<K, V> {
    by_net: BTreeMap<String, BTreeMap<K, V>>,
    net_of: BTreeMap<K, String>,
}

impl<K, V> Default for ByNetwork<K, V> {
    fn default() -> Self {
        ByNetwork {
            by_net: BTreeMap::new(),
            net_of: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone, V> ByNetwork<K, V> {
    /// Adds `key` in network `net` (it must not be in the index).
    pub fn insert(&mut self, net: String, key: K, value: V) {
        self.net_of.insert(key.clone(), net.clone());
        self.by_net.entry(net).or_default().insert(key, value);
    }

    /// Removes `key`; the network it was in.
    pub fn remove(&mut self, key: &K) -> Option<String> {
        let net = self.net_of.remove(key)?;
        if let Some(m) = self.by_net.get_mut(&net) {
            m.remove(key);
            if m.is_empty() {
                self.by_net.remove(&net);
            }
        }
        Some(net)
    }

    /// The objects of network `net`.
    pub fn of(&self, net: &str) -> Option<&BTreeMap<K, V>> {
        self.by_net.get(net)
    }

    /// Every network with an object.
    pub fn networks(&self) -> impl Iterator<Item = &String> {
        self.by_net.keys()
    }
}

/// Endpoints by network name: this node's ([`LocalIndex::build`]), or every node's endpoints
/// of l2 networks ([`LocalIndex::build_l2`]), which every member node's tables hold.
#[derive(Debug, Default)]
pub(super) struct LocalIndex(ByNetwork<AttachmentKey, EndpointModel>);

/// Which endpoints an index holds.
#[derive(Debug, Clone, Copy)]
pub(super) enum Members<'a> {
    /// Those of one node.
    Node(&'a str),
    /// Those of l2 networks, on any node.
    L2,
}

impl Members<'_> {
    fn keep(&self, world: &World, e: &EndpointModel) -> bool {
        match self {
            Members::Node(n) => e.node == *n,
            Members::L2 => world
                .networks
                .get(&e.network)
                .is_some_and(|n| n.kind == NetworkType::L2),
        }
    }
}

impl LocalIndex {
    /// Scans every endpoint of the world for this node's.
    pub fn build(world: &World, node: &str) -> LocalIndex {
        Self::build_of(world, Members::Node(node))
    }

    /// Scans every endpoint of the world for those of l2 networks.
    pub fn build_l2(world: &World) -> LocalIndex {
        Self::build_of(world, Members::L2)
    }

    fn build_of(world: &World, members: Members<'_>) -> LocalIndex {
        let mut ix = LocalIndex::default();
        for (k, e) in &world.endpoints {
            if members.keep(world, e) {
                ix.insert(k.clone(), e.clone());
            }
        }
        ix
    }

    fn insert(&mut self, k: AttachmentKey, e: EndpointModel) {
        self.0.insert(e.network.clone(), k, e);
    }

    /// Re-reads endpoint `key` from the world: (network it was a member of, network it is a
    /// member of now).
    pub fn update(
        &mut self,
        world: &World,
        members: Members<'_>,
        key: &AttachmentKey,
    ) -> (Option<String>, Option<String>) {
        let old = self.0.remove(key);
        let new = world
            .endpoints
            .get(key)
            .filter(|e| members.keep(world, e))
            .map(|e| {
                self.insert(key.clone(), e.clone());
                e.network.clone()
            });
        (old, new)
    }

    pub fn of(&self, net: &str) -> Option<&BTreeMap<AttachmentKey, EndpointModel>> {
        self.0.of(net)
    }

    /// Every network with endpoints in the index, with them.
    pub fn networks(
        &self,
    ) -> impl Iterator<Item = (&String, &BTreeMap<AttachmentKey, EndpointModel>)> {
        self.0.by_net.iter()
    }
}

/// An l2 network's neighbor table, FDB and flood list on this node.
#[derive(Debug, Default)]
struct L2Tables {
    neighbors: BTreeMap<IpAddr, MacAddr>,
    fdb: BTreeMap<MacAddr, FdbEntry>,
    flood: Vec<FloodTarget>,
}

/// An l2 network's gateways: the first address of each prefix, at the gateway MAC.
struct L2Gateways {
    v4: Option<std::net::Ipv4Addr>,
    v6: Option<std::net::Ipv6Addr>,
    mac: MacAddr,
}

impl L2Gateways {
    fn of(net: &NetworkModel) -> L2Gateways {
        L2Gateways {
            v4: net.v4.map(|(p, _)| gateway4(p)),
            v6: net.v6.map(|(p, _)| gateway6(p)),
            mac: gateway_mac(net.id),
        }
    }
}

/// Which of an l2 network's addresses [`l2_routes`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum L2Reach {
    /// Those on this node: the l2 network's own FIB (the IP path of its gateway).
    Local,
    /// Every one: the route set other networks import.
    All,
}

/// The host routes of an l2 network's addresses on this node, from its compiled tables: every
/// address the neighbor table resolves (each endpoint's, on any node, and the learned ones;
/// not the gateways) → the local port and that MAC, or (with [`L2Reach::All`]) the network's
/// End.DT46 SID on the node whose End.DT2U the FDB sends the MAC to (ADR 0049). The FDB
/// decides, so a shared identity's address follows its active location and a learned one its
/// last announcement.
fn l2_routes(
    ctx: &Ctx<'_>,
    net: &NetworkModel,
    t: &L2Tables,
    reach: L2Reach,
    fib: &mut FibBuilder<'_>,
) {
    let mut sids: BTreeMap<lace_shared::types::NodeId, Option<Sid>> = BTreeMap::new();
    for (a, mac) in &t.neighbors {
        let Some(entry) = t.fdb.get(mac) else {
            // The gateways (answered by the forwarder itself).
            continue;
        };
        let nh = match entry.target {
            FdbTarget::Port(port) => NextHop::Local { port, mac: *mac },
            FdbTarget::Remote { .. } if reach == L2Reach::Local => continue,
            FdbTarget::Remote { node, .. } => {
                let sid = *sids.entry(node).or_insert_with(|| {
                    let peer = ctx.world.nodes.values().find(|n| n.id == node)?;
                    encode_sid(peer.locator, SidFunction::EndDt46, net.id).ok()
                });
                // The FDB holds only nodes whose locator took the network's SIDs.
                let Some(sid) = sid else { continue };
                NextHop::Remote { node, sid }
            }
        };
        fib.insert(host(*a), nh, &|| format!("the l2 address {a} (MAC {mac})"));
    }
}

/// The local endpoints of a network as host routes: (endpoint, next hop, address).
fn ports_of<'a>(
    eps: Option<&'a BTreeMap<AttachmentKey, EndpointModel>>,
) -> impl Iterator<Item = (&'a EndpointModel, NextHop, IpAddr)> + 'a {
    eps.into_iter().flatten().flat_map(|(_, e)| {
        let nh = NextHop::Local {
            port: e.port,
            mac: e.mac,
        };
        e.addresses.iter().map(move |a| (e, nh, *a))
    })
}

/// A network's route set on this node.
#[derive(Debug, Default)]
pub(super) struct RouteSet {
    routes: BTreeMap<IpNet, Route>,
    notes: Vec<Note>,
}

/// A programmed network's compiled output.
#[derive(Debug)]
pub(super) struct NetOut {
    id: NetworkId,
    tables: Arc<NetworkTables>,
    ports: Vec<(PortId, PortInfo)>,
    sids: Vec<(Sid, SidBehavior)>,
    notes: Vec<Note>,
}

/// The compiler's caches, valid for the world of the last plan.
#[derive(Debug)]
pub(super) struct Cache {
    pub index: LocalIndex,
    /// Every node's endpoints of l2 networks.
    pub l2: LocalIndex,
    /// The Services, compiled, by network.
    pub services: ServiceIndex,
    /// Route sets by network name (computed on demand).
    pub sets: BTreeMap<String, Arc<RouteSet>>,
    /// Programmed networks by name.
    pub outs: BTreeMap<String, Arc<NetOut>>,
    /// Every port of `outs`, kept up to date by `compile_network` while no two networks claim
    /// one port id (None: rebuild in `assemble`).
    ports: Option<BTreeMap<PortId, PortInfo>>,
    /// Kubernetes NetworkPolicy's tables.
    pub policy: PolicyCompiler,
    /// The external networks' tables and the sources table as last assembled.
    external: BTreeMap<NetworkId, Arc<NetworkTables>>,
}

pub(super) fn net_obj(name: &str) -> String {
    format!("Network {name}")
}

fn policy_obj(name: &str) -> String {
    format!("NetworkRoutingPolicy {name}")
}

fn host(a: IpAddr) -> IpNet {
    IpNet::from(a)
}

/// The networks whose compiled tables depend on any of `dirty`: themselves and those that
/// import them through routing policy (the sources of a policy toward one, and the destination
/// of a policy from one: bidirectional, or one-way with its reply-only routes back), and those
/// a transit links to them ([`next_hop::linked`]).
pub(super) fn importers(world: &World, dirty: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = dirty.clone();
    out.extend(next_hop::linked(world, dirty));
    for p in &world.routing {
        if dirty.contains(&p.destination) {
            out.extend(p.sources.iter().cloned());
        }
        if p.sources.iter().any(|s| dirty.contains(s)) {
            out.insert(p.destination.clone());
        }
    }
    out
}

/// A FIB under construction: first writer of a prefix wins, later different ones are noted;
/// the same next hop reached plainly and reply-only is plain (the path carries new
/// connections either way).
struct FibBuilder<'a> {
    net: &'a str,
    routes: BTreeMap<IpNet, Route>,
    notes: Vec<Note>,
}

impl FibBuilder<'_> {
    fn insert(&mut self, prefix: IpNet, route: impl Into<Route>, origin: &dyn Fn() -> String) {
        let prefix = prefix.trunc();
        let route = route.into();
        match self.routes.get_mut(&prefix) {
            None => {
                self.routes.insert(prefix, route);
            }
            Some(kept) if *kept == route => {}
            Some(kept) if kept.nh == route.nh => {
                if !route.flags.reply_only() {
                    kept.flags = route.flags;
                }
            }
            Some(kept) => self.notes.push(Note {
                kind: NoteKind::Conflict,
                object: net_obj(self.net),
                message: format!(
                    "route {prefix}: {} wants {:?} but {:?} is already there; kept the first. \
                     The address spaces overlap: give the networks disjoint subnets",
                    origin(),
                    route.nh,
                    kept.nh
                ),
            }),
        }
    }
}

/// `routes` narrowed to `prefixes` (all of them when empty): a route inside a prefix stays; a
/// prefix inside a route is added with the route's next hop.
pub(super) fn narrowed<'r, V: Copy>(
    routes: &'r BTreeMap<IpNet, V>,
    prefixes: &'r [IpNet],
) -> impl Iterator<Item = (IpNet, V)> + 'r {
    routes.iter().flat_map(move |(r, nh)| {
        let all = prefixes.is_empty().then_some((*r, *nh));
        let some = prefixes.iter().filter_map(move |p| {
            let p = p.trunc();
            if p.contains(r) {
                Some((*r, *nh))
            } else if r.contains(&p) {
                Some((p, *nh))
            } else {
                None
            }
        });
        all.into_iter().chain(some)
    })
}

fn overlaps(a: &NetworkModel, b: &NetworkModel) -> bool {
    let v4 = match (a.v4, b.v4) {
        (Some((x, _)), Some((y, _))) => x.contains(&y) || y.contains(&x),
        _ => false,
    };
    let v6 = match (a.v6, b.v6) {
        (Some((x, _)), Some((y, _))) => x.contains(&y) || y.contains(&x),
        _ => false,
    };
    v4 || v6
}

impl Cache {
    pub fn new(index: LocalIndex, l2: LocalIndex, services: ServiceIndex) -> Cache {
        Cache {
            index,
            l2,
            services,
            sets: BTreeMap::new(),
            outs: BTreeMap::new(),
            ports: None,
            policy: PolicyCompiler::default(),
            external: BTreeMap::new(),
        }
    }

    /// The networks whose local endpoints the policy compiler covers: those with endpoints
    /// here that are programmed (l3 and l2).
    pub fn policy_networks(&self, world: &World) -> BTreeSet<String> {
        self.index
            .networks()
            .map(|(n, _)| n)
            .filter(|n| {
                world
                    .networks
                    .get(*n)
                    .is_some_and(|m| m.kind != NetworkType::External)
            })
            .cloned()
            .collect()
    }

    /// Compiles the policy tables from nothing.
    pub fn build_policy(&mut self, world: &World, limits: super::policy::PolicyLimits) {
        let wanted = self.policy_networks(world);
        self.policy = PolicyCompiler::build(
            world,
            self.index.networks().filter(|(n, _)| wanted.contains(*n)),
            limits,
        );
    }

    /// Network `name`'s route set (empty for an unknown network).
    fn set(&mut self, ctx: &Ctx<'_>, name: &str) -> Arc<RouteSet> {
        if let Some(s) = self.sets.get(name) {
            return Arc::clone(s);
        }
        let s = Arc::new(match ctx.world.networks.get(name) {
            Some(n) if n.kind == NetworkType::L3 => self.compute_set(ctx, name, n),
            Some(n) if n.kind == NetworkType::L2 => self.compute_l2_set(ctx, name, n),
            Some(n) => {
                let (routes, notes) = super::external::route_set(ctx, n);
                RouteSet { routes, notes }
            }
            None => RouteSet::default(),
        });
        self.sets.insert(name.to_string(), Arc::clone(&s));
        s
    }

    fn compute_set(&self, ctx: &Ctx<'_>, name: &str, net: &NetworkModel) -> RouteSet {
        let mut fib = FibBuilder {
            net: name,
            routes: BTreeMap::new(),
            notes: Vec::new(),
        };
        if let Some(eps) = self.index.of(name) {
            for (k, e) in eps {
                let nh = NextHop::Local {
                    port: e.port,
                    mac: e.mac,
                };
                for a in &e.addresses {
                    fib.insert(host(*a), nh, &|| {
                        format!(
                            "endpoint {}/{} ({} {})",
                            e.namespace, e.pod, k.container_id, k.ifname
                        )
                    });
                }
            }
        }
        let lo = (name.to_string(), String::new());
        for ((_, node), blocks) in ctx
            .world
            .allocations
            .range(lo..)
            .take_while(|((n, _), _)| n == name)
        {
            if *node == ctx.me.name {
                for b in blocks {
                    fib.insert(*b, NextHop::Unreachable, &|| "this node's block".into());
                }
                continue;
            }
            let Some(peer) = ctx.world.nodes.get(node) else {
                fib.notes.push(Note {
                    kind: NoteKind::Inconsistent,
                    object: net_obj(name),
                    message: format!(
                        "the allocation of node {node} refers to a node that is not in the \
                         world (no locator); its block is not routed"
                    ),
                });
                continue;
            };
            match encode_sid(peer.locator, SidFunction::EndDt46, net.id) {
                Ok(sid) => {
                    let nh = NextHop::Remote { node: peer.id, sid };
                    for b in blocks {
                        fib.insert(*b, nh, &|| format!("the block of node {node}"));
                    }
                }
                Err(e) => fib.notes.push(Note {
                    kind: NoteKind::Unsupported,
                    object: format!("Node {node}"),
                    message: format!("its block of network {name} is not routed: {e}"),
                }),
            }
        }
        RouteSet {
            routes: fib.routes,
            notes: fib.notes,
        }
    }

    /// An l2 network's route set on this node: its addresses' host routes ([`l2_routes`]),
    /// local and remote. Routing policy imports it into other networks' FIBs: their packets
    /// reach an l2 endpoint routed, from the gateway MAC, as its own packets toward them leave
    /// through its gateway. The l2 tables' own notes belong to the network's compilation
    /// ([`Cache::compute_out`]), not to the set.
    fn compute_l2_set(&self, ctx: &Ctx<'_>, name: &str, net: &NetworkModel) -> RouteSet {
        let t = self.compile_l2(ctx, name, net, &L2Gateways::of(net), &mut Vec::new());
        let mut fib = FibBuilder {
            net: name,
            routes: BTreeMap::new(),
            notes: Vec::new(),
        };
        l2_routes(ctx, net, &t, L2Reach::All, &mut fib);
        RouteSet {
            routes: fib.routes,
            notes: fib.notes,
        }
    }

    /// (Re)compiles network `name` into `outs` (or removes it if it is not programmed here).
    pub fn compile_network(&mut self, ctx: &Ctx<'_>, name: &str) {
        let new = self.compute_out(ctx, name).map(Arc::new);
        let old = match &new {
            Some(o) => self.outs.insert(name.to_string(), Arc::clone(o)),
            None => self.outs.remove(name),
        };
        if let Some(map) = &mut self.ports {
            // Without duplicates, the old output's ports are exactly its entries in the map.
            for (p, _) in old.iter().flat_map(|o| &o.ports) {
                map.remove(p);
            }
            for (p, i) in new.iter().flat_map(|o| &o.ports) {
                if map.insert(*p, *i).is_some() {
                    self.ports = None;
                    break;
                }
            }
        }
    }

    /// Forgets every compiled network (before recompiling them all).
    pub fn clear_outs(&mut self) {
        self.outs.clear();
        self.ports = None;
    }

    fn compute_out(&mut self, ctx: &Ctx<'_>, name: &str) -> Option<NetOut> {
        let world = ctx.world;
        let net = world.networks.get(name)?;
        let mine = world
            .allocations
            .get(&(name.to_string(), ctx.me.name.clone()));
        let transits = next_hop::transit_ports(ctx, name);
        let ports: Vec<(PortId, PortInfo)> = self
            .index
            .of(name)
            .into_iter()
            .flat_map(|m| m.values())
            .map(|e| (e.port, port_info(net.id, e, transits.contains(&e.port))))
            .collect();
        let unused = ports.is_empty() && mine.is_none() && !next_hop::carries_an_end(ctx, name);
        if unused || net.kind == NetworkType::External {
            return None;
        }
        let mut notes = Vec::new();
        let (kind, g4, g6) = match net.kind {
            NetworkType::L3 => {
                let blocks = mine.map(Vec::as_slice).unwrap_or(&[]);
                let g4 = blocks.iter().find_map(|b| match b {
                    IpNet::V4(b) => Some(gateway4(*b)),
                    IpNet::V6(_) => None,
                });
                let g6 = blocks.iter().find_map(|b| match b {
                    IpNet::V6(b) => Some(gateway6(*b)),
                    IpNet::V4(_) => None,
                });
                if mine.is_none() && !ports.is_empty() {
                    notes.push(Note {
                        kind: NoteKind::Inconsistent,
                        object: net_obj(name),
                        message: format!(
                            "endpoints on node {} but no allocation (block) for it: the network \
                             has no gateway there until IPAM allocates a block",
                            ctx.me.name
                        ),
                    });
                }
                (NetworkKind::L3, g4, g6)
            }
            _ => {
                let g = L2Gateways::of(net);
                (NetworkKind::L2, g.v4, g.v6)
            }
        };
        let mut info = NetworkInfo {
            kind,
            anonymous: net.anonymous,
            gateway_mac: gateway_mac(net.id),
            gateway4: g4,
            gateway6: g6,
            mtu: ctx.cfg.pod_mtu_of(kind),
            stateful: false,
            l2: if kind == NetworkKind::L2 {
                net.l2.settings()
            } else {
                L2Settings::default()
            },
        };
        let mut fib = FibBuilder {
            net: name,
            routes: BTreeMap::new(),
            notes: Vec::new(),
        };
        let mut sids = Vec::new();
        let mut l2 = L2Tables::default();
        let mut services = BTreeMap::new();
        if kind == NetworkKind::L2 {
            for g in g4.map(IpAddr::V4).into_iter().chain(g6.map(IpAddr::V6)) {
                fib.insert(host(g), NextHop::Receive, &|| "the gateway".into());
            }
            l2 = self.compile_l2(ctx, name, net, &L2Gateways::of(net), &mut notes);
            // The IP path of the l2 network (the gateway's answers, routed packets from other
            // networks) reaches the addresses on this node: endpoints' and learned VMs'.
            l2_routes(ctx, net, &l2, L2Reach::Local, &mut fib);
            node_addresses(ctx, false, &mut fib);
            for (f, b) in [
                (SidFunction::EndDt2u, SidBehavior::EndDt2u(net.id)),
                (SidFunction::EndDt2m, SidBehavior::EndDt2m(net.id)),
            ] {
                match encode_sid(ctx.me.locator, f, net.id) {
                    Ok(s) => sids.push((s, b)),
                    Err(e) => notes.push(Note {
                        kind: NoteKind::Inconsistent,
                        object: net_obj(name),
                        message: format!("no {f:?} SID: {e}"),
                    }),
                }
            }
            // Routing policy's paths leave through the gateway, toward the ClusterIPs of the
            // l3 networks reached too (a backend answers through the client's gateway, so the
            // reverse NAT sees the reply). The l2 network's own Services are not placed: a
            // backend on the client's subnet would answer it directly, around the NAT.
            let reached = self.import(ctx, name, net, &mut fib);
            services = self.services_of(name, reached.iter().map(String::as_str), &mut fib);
        }
        if kind == NetworkKind::L3 {
            for g in g4.map(IpAddr::V4).into_iter().chain(g6.map(IpAddr::V6)) {
                fib.insert(host(g), NextHop::Receive, &|| "the gateway".into());
            }
            node_addresses(ctx, true, &mut fib);
            let own = self.set(ctx, name);
            notes.extend(own.notes.iter().cloned());
            if !net.anonymous {
                for (p, nh) in &own.routes {
                    fib.insert(*p, *nh, &|| format!("the self-route of {name}"));
                }
            }
            let reached = self.import(ctx, name, net, &mut fib);
            services = self.place_services(name, net, &reached, &mut fib);
        }
        // Routed packets from other nodes (an l2 network's: those routing policy sends it).
        // `plan` checked the locator length; network ids are never 0 after validation.
        match encode_sid(ctx.me.locator, SidFunction::EndDt46, net.id) {
            Ok(s) => sids.push((s, SidBehavior::EndDt46(net.id))),
            Err(e) => notes.push(Note {
                kind: NoteKind::Inconsistent,
                object: net_obj(name),
                message: format!("no End.DT46 SID: {e}"),
            }),
        }
        notes.append(&mut fib.notes);
        info.stateful = stateful(self.policy.has_sets(name), &fib.routes);
        Some(NetOut {
            id: net.id,
            tables: Arc::new(NetworkTables {
                info,
                routes: fib.routes,
                services,
                neighbors: l2.neighbors,
                fdb: l2.fdb,
                flood: l2.flood,
            }),
            ports,
            sids,
            notes,
        })
    }

    /// The l2 tables of network `name` on this node: every endpoint's addresses → its MAC and
    /// the gateways → the gateway MAC (neighbor table, for the synthetic ARP/NDP answers); every
    /// endpoint's MAC → its local port or its node's End.DT2U SID (FDB); the local ports and
    /// every other node hosting endpoints, at its End.DT2M SID (flood list). Then control's
    /// learning records ([`World::learned`], ADR 0019): a MAC several endpoints share (a
    /// migrating VM's identity) goes to its record's active location, a learned MAC to where
    /// it was last announced — both with the record's sequence number — and learned addresses
    /// to their MAC, unless an endpoint or a gateway holds them.
    fn compile_l2(
        &self,
        ctx: &Ctx<'_>,
        name: &str,
        net: &NetworkModel,
        gateways: &L2Gateways,
        notes: &mut Vec<Note>,
    ) -> L2Tables {
        let mut t = L2Tables::default();
        for g in gateways
            .v4
            .map(IpAddr::V4)
            .into_iter()
            .chain(gateways.v6.map(IpAddr::V6))
        {
            t.neighbors.insert(g, gateways.mac);
        }
        let mut remote_nodes = BTreeMap::new();
        let mut local_ports = BTreeSet::new();
        // Oldest endpoint first: of endpoints sharing a MAC without a record yet, the first
        // holder (a migration's source) keeps it.
        let mut members: Vec<(&AttachmentKey, &EndpointModel)> =
            self.l2.of(name).into_iter().flatten().collect();
        members.sort_by_key(|(_, e)| e.endpoint_id);
        // Where each endpoint's frames go: (node, endpoint id) → FDB target.
        let mut located: BTreeMap<(&str, u64), FdbTarget> = BTreeMap::new();
        for (k, e) in &members {
            let who = || {
                format!(
                    "endpoint {}/{} ({} {})",
                    e.namespace, e.pod, k.container_id, k.ifname
                )
            };
            let target = if e.node == ctx.me.name {
                local_ports.insert(e.port);
                FdbTarget::Port(e.port)
            } else {
                let Some(peer) = ctx.world.nodes.get(&e.node) else {
                    notes.push(Note {
                        kind: NoteKind::Inconsistent,
                        object: net_obj(name),
                        message: format!(
                            "{} is on node {}, which is not in the world (no locator); it is \
                             not reachable from here",
                            who(),
                            e.node
                        ),
                    });
                    continue;
                };
                let (Ok(unicast), Ok(flood)) = (
                    encode_sid(peer.locator, SidFunction::EndDt2u, net.id),
                    encode_sid(peer.locator, SidFunction::EndDt2m, net.id),
                ) else {
                    notes.push(Note {
                        kind: NoteKind::Unsupported,
                        object: format!("Node {}", e.node),
                        message: format!(
                            "its locator {} cannot hold the SIDs of network {name}; its \
                             endpoints are not reachable from here",
                            peer.locator
                        ),
                    });
                    continue;
                };
                remote_nodes.insert(peer.id, flood);
                FdbTarget::Remote {
                    node: peer.id,
                    sid: unicast,
                }
            };
            located.insert((e.node.as_str(), e.endpoint_id), target);
            // A record whose active endpoint is gone (not reconciled yet) places nothing.
            let record = ctx
                .world
                .learned
                .get(&(name.to_owned(), e.mac))
                .filter(|r| {
                    r.identity
                        && members.iter().any(|(_, m)| {
                            (m.node.as_str(), m.endpoint_id) == (r.node.as_str(), r.endpoint_id)
                        })
                });
            let entry = match record {
                // A shared identity: only its active location is in the FDB.
                Some(r) if (r.node.as_str(), r.endpoint_id) != (e.node.as_str(), e.endpoint_id) => {
                    None
                }
                Some(r) => Some(FdbEntry {
                    target,
                    seq: r.sequence,
                    learned: true,
                }),
                None => Some(FdbEntry {
                    target,
                    seq: 0,
                    learned: false,
                }),
            };
            match (entry, t.fdb.get(&e.mac)) {
                (None, _) => {}
                (Some(entry), Some(kept)) if *kept != entry => notes.push(Note {
                    kind: NoteKind::Conflict,
                    object: net_obj(name),
                    message: format!(
                        "MAC {} of {} is already another endpoint's; frames to it go to the \
                         first (pods share a MAC and addresses through the \
                         l2.lace-cni.io/identity annotation)",
                        e.mac,
                        who()
                    ),
                }),
                (Some(_), Some(_)) => {}
                (Some(entry), None) => {
                    t.fdb.insert(e.mac, entry);
                }
            }
            for a in &e.addresses {
                match t.neighbors.get(a) {
                    Some(kept) if *kept != e.mac => notes.push(Note {
                        kind: NoteKind::Conflict,
                        object: net_obj(name),
                        message: format!(
                            "address {a} of {} is already held by MAC {kept}; ARP and NDP \
                             answer with the first",
                            who()
                        ),
                    }),
                    Some(_) => {}
                    None => {
                        t.neighbors.insert(*a, e.mac);
                    }
                }
            }
        }
        self.learned_l2(ctx, name, &located, &mut t, notes);
        t.flood = local_ports
            .into_iter()
            .map(FloodTarget::Port)
            .chain(
                remote_nodes
                    .into_iter()
                    .map(|(node, sid)| FloodTarget::Remote { node, sid }),
            )
            .collect();
        t
    }

    /// The learned MACs of network `name` (not an endpoint's own): each at the endpoint where
    /// it was last announced (`located`: every endpoint of the network by node and id), with
    /// its sequence number, and its addresses.
    fn learned_l2(
        &self,
        ctx: &Ctx<'_>,
        name: &str,
        located: &BTreeMap<(&str, u64), FdbTarget>,
        t: &mut L2Tables,
        notes: &mut Vec<Note>,
    ) {
        let range = (name.to_owned(), MacAddr([0; 6]))..=(name.to_owned(), MacAddr([0xff; 6]));
        for ((_, mac), r) in ctx.world.learned.range(range).filter(|(_, r)| !r.identity) {
            if t.fdb.contains_key(mac) {
                // Control records a learned MAC only while no endpoint holds it.
                continue;
            }
            let Some(&target) = located.get(&(r.node.as_str(), r.endpoint_id)) else {
                notes.push(Note {
                    kind: NoteKind::Inconsistent,
                    object: net_obj(name),
                    message: format!(
                        "learned MAC {mac} is at endpoint {} of node {}, which is not one of \
                         the network's endpoints; left out until it is announced again",
                        r.endpoint_id, r.node
                    ),
                });
                continue;
            };
            t.fdb.insert(
                *mac,
                FdbEntry {
                    target,
                    seq: r.sequence,
                    learned: true,
                },
            );
            for a in &r.addresses {
                match t.neighbors.get(a) {
                    Some(kept) if kept != mac => notes.push(Note {
                        kind: NoteKind::Conflict,
                        object: net_obj(name),
                        message: format!(
                            "address {a} learned with MAC {mac} is held by MAC {kept}; ARP and \
                             NDP answer with {kept}"
                        ),
                    }),
                    Some(_) => {}
                    None => {
                        t.neighbors.insert(*a, *mac);
                    }
                }
            }
        }
    }

    /// Adds the route sets routing policy opens toward `name`'s endpoints' destinations, and
    /// returns the l3 networks whose
    /// Services `name` reaches through policy (each once, in policy order; an l2 network's own
    /// Services are not placed, see [`Cache::compute_out`]).
    fn import(
        &mut self,
        ctx: &Ctx<'_>,
        name: &str,
        net: &NetworkModel,
        fib: &mut FibBuilder<'_>,
    ) -> Vec<String> {
        let world = ctx.world;
        let mut reached: Vec<String> = Vec::new();
        let mut reach = |n: &str| {
            if !reached.iter().any(|r| r == n) {
                reached.push(n.to_owned());
            }
        };
        for p in &world.routing {
            let routed = |n: &str| world.networks.get(n);
            if p.sources.iter().any(|s| s == name) {
                if let Some(d) = routed(&p.destination) {
                    if p.destination != name && overlaps(net, d) {
                        fib.notes.push(overlap_note(&p.name, name, &p.destination));
                    }
                    let way = (Way::Toward, p.destination.as_str());
                    let steer = next_hop::steering(ctx, p, net, way, &mut fib.notes);
                    let origin = || format!("{} (toward {})", policy_obj(&p.name), p.destination);
                    match (steer, p.gateway) {
                        (Steering::Through(nh), Some(_)) => {
                            // Out to the gateway: the network's prefixes, not its own routes.
                            let prefixes: BTreeMap<IpNet, ()> =
                                d.external.iter().map(|x| (x.trunc(), ())).collect();
                            for (pfx, ()) in narrowed(&prefixes, &p.prefixes) {
                                fib.insert(pfx, nh, &origin);
                            }
                        }
                        (Steering::Closed, _) => {}
                        (steer, _) => {
                            let set = self.set(ctx, &p.destination);
                            for (pfx, r) in narrowed(&set.routes, &p.prefixes) {
                                let r = match steer {
                                    Steering::Through(nh) => Route { nh, ..r },
                                    _ => r,
                                };
                                fib.insert(pfx, r, &origin);
                            }
                        }
                    }
                    if d.kind == NetworkType::L3 {
                        reach(&p.destination);
                    }
                }
            }
            if let Some(Ok(t)) = next_hop::transit(world, p) {
                if t.network == name {
                    // What the transit forwards goes on as its network's own packets: to the
                    // destination, and back to the sources (the policy is bidirectional).
                    let set = self.set(ctx, &p.destination);
                    for (pfx, r) in narrowed(&set.routes, &p.prefixes) {
                        fib.insert(pfx, r, &|| {
                            format!("{} (through to {})", policy_obj(&p.name), p.destination)
                        });
                    }
                    for s in &p.sources {
                        let set = self.set(ctx, s);
                        for (pfx, r) in set.routes.iter() {
                            fib.insert(*pfx, *r, &|| {
                                format!("{} (back through to {s})", policy_obj(&p.name))
                            });
                        }
                    }
                }
            }
            // (A one-way path toward an external network never gets here: `routing_support`
            // refuses it, as the uplink node does not track its connections.)
            if p.destination == name {
                // One way: the sources' routes carry only the replies of connections they
                // opened (the flow table decides); both ways: anything.
                let flags = match p.direction {
                    Direction::Bidirectional => RouteFlags::NONE,
                    Direction::SourceToDestination => RouteFlags::REPLY_ONLY,
                };
                for s in &p.sources {
                    if s == name {
                        continue;
                    }
                    let Some(sm) = routed(s) else { continue };
                    if overlaps(net, sm) {
                        fib.notes.push(overlap_note(&p.name, name, s));
                    }
                    let way = (Way::Back, s.as_str());
                    let steer = next_hop::steering(ctx, p, net, way, &mut fib.notes);
                    let set = self.set(ctx, s);
                    for (pfx, r) in set.routes.iter() {
                        let r = match steer {
                            Steering::Direct => Route { flags, ..*r },
                            Steering::Through(nh) => Route { nh, flags },
                            Steering::Closed => break,
                        };
                        fib.insert(*pfx, r, &|| {
                            format!("{} (back toward {s})", policy_obj(&p.name))
                        });
                    }
                    if p.direction == Direction::Bidirectional && sm.kind == NetworkType::L3 {
                        reach(s);
                    }
                }
            }
        }
        reached
    }

    /// The ClusterIP routes and Service records of network `name`: its own Services (unless
    /// it is anonymous), then those of the networks it reaches (`reached`, in policy order).
    fn place_services(
        &self,
        name: &str,
        net: &NetworkModel,
        reached: &[String],
        fib: &mut FibBuilder<'_>,
    ) -> BTreeMap<ServicePort, Arc<lace_shared::policy::ServiceInfo>> {
        let own = (!net.anonymous).then_some(name);
        let nets = own.into_iter().chain(
            reached
                .iter()
                .map(String::as_str)
                .filter(|n| Some(*n) != own),
        );
        self.services_of(name, nets, fib)
    }

    /// The ClusterIP routes and Service records, in `fib` of network `name`, of the Services
    /// of networks `nets`, in that order. A ClusterIP another route or another Service already
    /// holds is a conflict note.
    fn services_of<'n>(
        &self,
        name: &str,
        nets: impl Iterator<Item = &'n str>,
        fib: &mut FibBuilder<'_>,
    ) -> BTreeMap<ServicePort, Arc<lace_shared::policy::ServiceInfo>> {
        let mut owner: BTreeMap<std::net::IpAddr, &NamespacedName> = BTreeMap::new();
        let mut out = BTreeMap::new();
        for svc_net in nets {
            for (key, svc) in self.services.of(svc_net) {
                let obj = || format!("Service {key}");
                for &vip in &svc.vips {
                    if let Some(other) = owner.get(&vip) {
                        fib.notes.push(Note {
                            kind: NoteKind::Conflict,
                            object: obj(),
                            message: format!(
                                "ClusterIP {vip} is also Service {other}'s, which network \
                                 {name} reaches first; this Service is not reachable there at \
                                 that address. Give every Service its own ClusterIP"
                            ),
                        });
                        continue;
                    }
                    let route = Route::from(NextHop::Service);
                    fib.insert(host(vip), route, &|| format!("{} (ClusterIP)", obj()));
                    if fib.routes.get(&host(vip)) != Some(&route) {
                        // The conflict is noted; the address stays the other route's.
                        continue;
                    }
                    owner.insert(vip, key);
                    for (port, info) in svc.records.range(
                        ServicePort {
                            addr: vip,
                            protocol: 0,
                            port: 0,
                        }..,
                    ) {
                        if port.addr != vip {
                            break;
                        }
                        out.insert(*port, Arc::clone(info));
                    }
                }
            }
        }
        out
    }

    /// The node's tables from the cached per-network outputs, plus every note.
    pub fn assemble(&mut self, ctx: &Ctx<'_>) -> Compiled {
        let world = ctx.world;
        let mut t = NodeTables {
            srv6_source: Some(ctx.me.underlay),
            ..NodeTables::default()
        };
        let mut notes = global_notes(world, &self.index);
        let cached = self.ports.is_some();
        let mut duplicates = false;
        let mut ports = Vec::new();
        if !cached {
            ports.reserve(self.outs.values().map(|o| o.ports.len()).sum());
        }
        for (name, o) in &self.outs {
            if !o.id.assignable() {
                notes.push(reserved_note(name, o.id));
                continue;
            }
            if t.networks.contains_key(&o.id) {
                if cached {
                    // The cached ports include the skipped network's: rebuild without them.
                    self.ports = None;
                    return self.assemble(ctx);
                }
                duplicates = true;
                notes.push(Note {
                    kind: NoteKind::Conflict,
                    object: net_obj(name),
                    message: format!(
                        "network id {} is also another network's; this one is not programmed",
                        o.id.0
                    ),
                });
                continue;
            }
            t.networks.insert(o.id, Arc::clone(&o.tables));
            notes.extend(o.notes.iter().cloned());
            if !cached {
                ports.extend(o.ports.iter().map(|(p, i)| (*p, *i, name.as_str())));
            }
            t.sids.extend(o.sids.iter().copied());
        }
        // A stable sort keeps the first network (by name) of a duplicated port; building the map
        // from sorted keys needs no searches.
        ports.sort_by_key(|(p, _, _)| *p);
        let mut kept: Vec<(PortId, PortInfo)> = Vec::with_capacity(ports.len());
        for (port, info, name) in ports {
            if kept.last().is_some_and(|(p, _)| *p == port) {
                duplicates = true;
                notes.push(Note {
                    kind: NoteKind::Conflict,
                    object: net_obj(name),
                    message: format!(
                        "port {} of endpoint {} is already another endpoint's; this one is not \
                         attached",
                        port.0, info.endpoint
                    ),
                });
            } else {
                kept.push((port, info));
            }
        }
        match &self.ports {
            Some(map) => t.ports = map.clone(),
            None => {
                t.ports = kept.into_iter().collect();
                if !duplicates {
                    self.ports = Some(t.ports.clone());
                }
            }
        }
        for n in world.nodes.values() {
            if n.name != ctx.me.name {
                t.nodes.insert(n.id, node_info(n));
            }
        }
        self.policy.assemble(world, &mut t);
        notes.extend(self.policy.notes(world));
        self.assemble_external(ctx, &mut t, &mut notes);
        if let Some(h) = &world.host {
            let (tables, port) = self.host_network(ctx, h, &mut notes);
            t.networks.insert(NetworkId::HOST, Arc::new(tables));
            // Where other nodes send what their pods address to this node's addresses.
            match encode_sid(ctx.me.locator, SidFunction::EndDt46, NetworkId::HOST) {
                Ok(sid) => {
                    t.sids.insert(sid, SidBehavior::EndDt46(NetworkId::HOST));
                }
                Err(e) => notes.push(Note {
                    kind: NoteKind::Inconsistent,
                    object: "the host interface".into(),
                    message: format!("no End.DT46 SID for the host network: {e}"),
                }),
            }
            if t.ports.insert(PortId::HOST, port).is_some() {
                notes.push(Note {
                    kind: NoteKind::Conflict,
                    object: "the host interface".into(),
                    message: format!(
                        "port {} is an endpoint's too; the host interface took it",
                        PortId::HOST.0
                    ),
                });
            }
        }
        notes.sort();
        notes.dedup();
        Compiled { tables: t, notes }
    }
}

impl Cache {
    /// The external networks this node carries and the sources table, into `t`; each table
    /// equal to the one assembled before is shared with it, so the diff skips it by pointer.
    fn assemble_external(&mut self, ctx: &Ctx<'_>, t: &mut NodeTables, notes: &mut Vec<Note>) {
        let ext = super::external::compile(ctx);
        notes.extend(ext.notes);
        let prev = std::mem::take(&mut self.external);
        let mut kept = BTreeMap::new();
        let mut add = |id: NetworkId, tables: NetworkTables, t: &mut NodeTables| {
            let shared = match prev.get(&id) {
                Some(prev) if **prev == tables => Arc::clone(prev),
                _ => Arc::new(tables),
            };
            kept.insert(id, Arc::clone(&shared));
            t.networks.insert(id, shared);
        };
        for carried in ext.networks {
            let (name, id) = (&carried.net.name, carried.net.id);
            if !id.assignable() {
                notes.push(reserved_note(name, id));
                continue;
            }
            if t.networks.contains_key(&id) {
                notes.push(Note {
                    kind: NoteKind::Conflict,
                    object: net_obj(name),
                    message: format!(
                        "network id {} is also another network's; this one is not programmed",
                        id.0
                    ),
                });
                continue;
            }
            // Its static routes, then what routing policy opens to it.
            let mut fib = FibBuilder {
                net: name,
                routes: BTreeMap::new(),
                notes: Vec::new(),
            };
            for (p, r) in carried.routes {
                fib.insert(p, r, &|| "a static route".into());
            }
            self.import(ctx, name, carried.net, &mut fib);
            notes.append(&mut fib.notes);
            add(id, super::external::tables(ctx, fib.routes), t);
            // Where other nodes send what leaves through this node's uplink.
            match encode_sid(ctx.me.locator, SidFunction::EndDt46, id) {
                Ok(s) => {
                    t.sids.insert(s, SidBehavior::EndDt46(id));
                }
                Err(e) => notes.push(Note {
                    kind: NoteKind::Inconsistent,
                    object: net_obj(name),
                    message: format!("no End.DT46 SID: {e}"),
                }),
            }
        }
        for (id, sources) in ext.sources {
            add(id, sources, t);
        }
        self.external = kept;
    }
}

/// A network numbered with a reserved table's id (possible only for one numbered before the
/// id was reserved) is not programmed: its tables would be the reserved table's.
fn reserved_note(name: &str, id: NetworkId) -> Note {
    Note {
        kind: NoteKind::Conflict,
        object: net_obj(name),
        message: format!(
            "network id {} is reserved for the forwarder's own tables (0x{:x}); this network is \
             not programmed. Delete and recreate it to get another id",
            id.0, id.0
        ),
    }
}

/// The nodes' own addresses, in a pod network's FIB: this node's to the host port; in an l3
/// network (`l3`), every other node's to that node's End.DT46 SID of the host network, where
/// that node's host port takes them (ADR 0036).
fn node_addresses(ctx: &Ctx<'_>, l3: bool, fib: &mut FibBuilder<'_>) {
    if let Some(h) = &ctx.world.host {
        let nh = NextHop::Local {
            port: PortId::HOST,
            mac: h.mac,
        };
        for a in &h.addresses {
            fib.insert(host(*a), nh, &|| "the node's address".into());
        }
    }
    if !l3 {
        return;
    }
    for (name, peer) in &ctx.world.nodes {
        if *name == ctx.me.name || peer.addresses.is_empty() {
            continue;
        }
        match encode_sid(peer.locator, SidFunction::EndDt46, NetworkId::HOST) {
            Ok(sid) => {
                let nh = NextHop::Remote { node: peer.id, sid };
                for a in &peer.addresses {
                    fib.insert(host(*a), nh, &|| format!("the address of node {name}"));
                }
            }
            Err(e) => fib.notes.push(Note {
                kind: NoteKind::Unsupported,
                object: format!("Node {name}"),
                message: format!("its addresses are not routed: {e}"),
            }),
        }
    }
}

impl Cache {
    /// The host network and the host port (see the module docs of [`super`]).
    fn host_network(
        &self,
        ctx: &Ctx<'_>,
        h: &crate::world::HostModel,
        notes: &mut Vec<Note>,
    ) -> (NetworkTables, PortInfo) {
        let mut fib = FibBuilder {
            net: "(host)",
            routes: BTreeMap::new(),
            notes: Vec::new(),
        };
        for g in [IpAddr::V4(HOST_GATEWAY4), IpAddr::V6(HOST_GATEWAY6)] {
            fib.insert(host(g), NextHop::Receive, &|| {
                "the host network's gateway".into()
            });
        }
        let me = NextHop::Local {
            port: PortId::HOST,
            mac: h.mac,
        };
        for a in &h.addresses {
            fib.insert(host(*a), me, &|| "the node's address".into());
        }
        // Every programmed network's local endpoints (by network name: the first network of
        // an address shared by two wins, and the other is noted).
        for name in self.outs.keys() {
            for (e, nh, a) in ports_of(self.index.of(name)) {
                fib.insert(host(a), nh, &|| {
                    format!(
                        "endpoint {}/{} of Network {}",
                        e.namespace, e.pod, e.network
                    )
                });
            }
        }
        // This node's blocks (a free address is not forwarded anywhere), and every other
        // node's blocks of every l3 network — programmed here or not — to that node's End.DT46
        // SID of the network: the host reaches every pod of the cluster, and answers a pod of
        // any node (ADR 0036).
        for ((net, node), blocks) in &ctx.world.allocations {
            if *node == ctx.me.name {
                if !self.outs.contains_key(net) {
                    continue;
                }
                for b in blocks {
                    fib.insert(*b, NextHop::Unreachable, &|| {
                        format!("this node's block of Network {net}")
                    });
                }
                continue;
            }
            let (Some(model), Some(peer)) =
                (ctx.world.networks.get(net), ctx.world.nodes.get(node))
            else {
                // The network's own compilation names a block of an unknown node.
                continue;
            };
            if model.kind != NetworkType::L3 {
                continue;
            }
            if let Ok(sid) = encode_sid(peer.locator, SidFunction::EndDt46, model.id) {
                let nh = NextHop::Remote { node: peer.id, sid };
                for b in blocks {
                    fib.insert(*b, nh, &|| {
                        format!("the block of node {node} of Network {net}")
                    });
                }
            }
        }
        // Every ClusterIP of the programmed networks' Services (ADR 0036).
        let services = self.services_of("(host)", self.outs.keys().map(String::as_str), &mut fib);
        notes.append(&mut fib.notes);
        let tables = NetworkTables {
            info: NetworkInfo {
                kind: NetworkKind::L3,
                anonymous: false,
                gateway_mac: gateway_mac(NetworkId::HOST),
                gateway4: Some(HOST_GATEWAY4),
                gateway6: Some(HOST_GATEWAY6),
                mtu: ctx.cfg.host_mtu(),
                // Tracked only for its ClusterIPs (no policy set: the node's own traffic is
                // never isolated, and its pods' policies let it in).
                stateful: stateful(false, &fib.routes),
                l2: L2Settings::default(),
            },
            routes: fib.routes,
            neighbors: BTreeMap::new(),
            fdb: BTreeMap::new(),
            flood: Vec::new(),
            services,
        };
        let port = PortInfo {
            kind: PortKind::Host,
            network: NetworkId::HOST,
            mac: h.mac,
            ipv4: None,
            ipv6: None,
            endpoint: h.endpoint,
            iface: h.iface,
            policy: PolicySetId::NONE,
            transit: false,
        };
        (tables, port)
    }
}

fn overlap_note(policy: &str, a: &str, b: &str) -> Note {
    Note {
        kind: NoteKind::Conflict,
        object: policy_obj(policy),
        message: format!(
            "networks {a} and {b} have overlapping subnets: the path between them is ambiguous \
             (longest prefix wins); give them disjoint subnets"
        ),
    }
}

fn node_info(n: &NodeModel) -> NodeInfo {
    NodeInfo {
        locator: n.locator.network(),
        locator_len: n.locator.prefix_len(),
        underlay: n.underlay,
    }
}

/// Endpoint `e`'s port record in network `net`; `transit`: a policy steers paths through it.
fn port_info(net: NetworkId, e: &EndpointModel, transit: bool) -> PortInfo {
    let ipv4 = e.addresses.iter().find_map(|a| match a {
        IpAddr::V4(a) => Some(*a),
        IpAddr::V6(_) => None,
    });
    let ipv6 = e.addresses.iter().find_map(|a| match a {
        IpAddr::V6(a) => Some(*a),
        IpAddr::V4(_) => None,
    });
    PortInfo {
        kind: PortKind::Pod,
        network: net,
        mac: e.mac,
        ipv4,
        ipv6,
        endpoint: e.endpoint_id,
        iface: e.host_iface,
        policy: PolicySetId::NONE,
        transit,
    }
}

/// Notes that do not belong to one programmed network: references to missing networks.
fn global_notes(world: &World, index: &LocalIndex) -> Vec<Note> {
    let mut notes = Vec::new();
    for p in &world.routing {
        if !world.networks.contains_key(&p.destination) {
            notes.push(Note {
                kind: NoteKind::Inconsistent,
                object: policy_obj(&p.name),
                message: format!(
                    "destination network {} does not exist; the policy opens nothing",
                    p.destination
                ),
            });
        }
        for s in p
            .sources
            .iter()
            .filter(|s| !world.networks.contains_key(*s))
        {
            notes.push(Note {
                kind: NoteKind::Inconsistent,
                object: policy_obj(&p.name),
                message: format!("source network {s} does not exist; skipped"),
            });
        }
    }
    for net in index.0.networks() {
        if !world.networks.contains_key(net) {
            notes.push(Note {
                kind: NoteKind::Inconsistent,
                object: net_obj(net),
                message: "endpoints on this node refer to it but it does not exist; they are \
                          not attached"
                    .into(),
            });
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn narrowing_keeps_inner_routes_and_cuts_wide_ones() {
        let routes: BTreeMap<IpNet, NextHop> = [
            (p("10.1.1.0/24"), NextHop::Unreachable),
            (p("10.1.1.7/32"), NextHop::Receive),
            (p("10.1.2.0/24"), NextHop::Drop),
            (p("fd01::/64"), NextHop::Drop),
        ]
        .into();
        let got: BTreeMap<IpNet, NextHop> = narrowed(&routes, &[p("10.1.1.0/29")]).collect();
        let want: BTreeMap<IpNet, NextHop> = [
            (p("10.1.1.0/29"), NextHop::Unreachable),
            (p("10.1.1.7/32"), NextHop::Receive),
        ]
        .into();
        assert_eq!(got, want);
        // Host bits of a prefix are ignored; a covering prefix keeps routes as they are.
        let got: Vec<_> = narrowed(&routes, &[p("10.1.2.9/16")]).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(narrowed(&routes, &[]).count(), 4);
        assert_eq!(narrowed(&routes, &[p("192.0.2.0/24")]).count(), 0);
    }

    #[test]
    fn importers_follow_policy_direction() {
        let mut w = World::default();
        let pol = |name: &str, s: &str, d: &str, dir| crate::world::RoutingModel {
            name: name.into(),
            priority: 0,
            sources: vec![s.into()],
            destination: d.into(),
            prefixes: vec![],
            direction: dir,
            transit: None,
            gateway: None,
        };
        w.routing
            .push(pol("ab", "a", "b", Direction::Bidirectional));
        w.routing
            .push(pol("cd", "c", "d", Direction::SourceToDestination));
        let of = |d: &[&str]| -> Vec<String> {
            importers(&w, &d.iter().map(|s| s.to_string()).collect())
                .into_iter()
                .collect()
        };
        assert_eq!(of(&["b"]), ["a", "b"]);
        assert_eq!(of(&["a"]), ["a", "b"]);
        assert_eq!(of(&["d"]), ["c", "d"]);
        // One way: the destination holds the source's routes (reply-only) too.
        assert_eq!(of(&["c"]), ["c", "d"]);
        assert_eq!(of(&["x"]), ["x"]);
    }
}
