//! The lookup cache: what one [`super::Pipeline::process`] call resolves once and reuses for the
//! packets after it — the receiving port's record, the last network, the last next hop, local
//! SID, FIB result, encapsulation plan and underlay neighbor. A burst's packets mostly share
//! all of them, so each costs one table lookup per change of path, not one per packet.
//!
//! What is decoded or derived from the tables (copies, never references into them) is kept
//! from call to call in a [`Memo`] for as long as the snapshots show the same tables (the same
//! [`SnapshotId`]), and a MAC learned from the underlay for as long as the neighbor cache is
//! unchanged: a worker forwarding one flow looks nothing up again until control publishes.
//! References into the snapshot (a network's tables, a rewrite) are valid for one call and
//! kept per call.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lace_shared::tables::{NetworkView, Snapshot, SnapshotId};
use lace_shared::types::{
    EncapRec, MacAddr, NetworkId, NetworkKind, NextHop, PortId, PortRec, Sid, SidBehavior,
};

use super::neigh::{Neighbor, UnderlayNeighbors};
use super::srv6::EncapPlan;

/// A network's settings the nodes need, decoded once per call.
#[derive(Debug, Clone, Copy)]
pub(super) struct NetCtx {
    pub(super) kind: NetworkKind,
    pub(super) gw_mac: MacAddr,
    pub(super) gw4: Option<Ipv4Addr>,
    pub(super) gw6: Option<Ipv6Addr>,
    /// The network's local endpoints are connection-tracked.
    pub(super) stateful: bool,
    /// Its policy generation.
    pub(super) policy_gen: u32,
    /// l2 learning on: how often a learned MAC that keeps sending is reported (aging / 4).
    pub(super) learn_period_ns: Option<u64>,
    /// l2 BUM limit per source endpoint: (packets per second, 0 = unlimited; burst).
    pub(super) bum: (u32, u32),
}

/// Where a lookup sent a packet (read by local-rewrite, srv6-encap and underlay-out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hop {
    /// Not routed yet.
    None,
    /// A pod on this node.
    Local {
        /// Its port.
        port: PortId,
        /// Its MAC.
        mac: MacAddr,
    },
    /// Another node, through the encapsulation kept with next hop `nh`.
    Remote {
        /// The next-hop index (also the index of its [`EncapRec`]).
        nh: u32,
    },
    /// Out of the uplink to a gateway on an external network (a static route, ADR 0054).
    Uplink {
        /// The gateway, on its VLAN.
        gateway: Neighbor,
    },
}

/// What a FIB result means for the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// No route (or a next hop the tables do not hold).
    None,
    /// Forward as [`Hop`] says.
    Forward(Hop),
    /// Forward as [`Hop`] says, but only replies of tracked connections (a one-way path's way
    /// back).
    ReplyOnly(Hop),
    /// A ClusterIP: conntrack picks a backend.
    Service,
    /// To the forwarder itself (the gateway).
    Receive,
    /// A blackhole route.
    Blackhole,
    /// An unreachable route (ICMP administratively prohibited).
    Unreachable,
    /// A next hop this pipeline does not forward to yet (another port than the uplink,
    /// another network's table).
    Unsupported,
}

/// What the cache keeps from call to call: copies decoded from one snapshot's tables, dropped
/// when a call brings a snapshot with another id (or none).
#[derive(Debug, Default)]
pub(super) struct Memo {
    /// The snapshot everything below comes from.
    id: Option<SnapshotId>,
    port: Option<(PortId, Option<PortRec>)>,
    net: Option<(NetworkId, Option<NetCtx>)>,
    /// The last two next hops decoded (a translated connection's packets need two: the
    /// ClusterIP's and the backend's), the latest first.
    route: [Option<(u32, Route)>; 2],
    sid: Option<(Ipv6Addr, Option<SidBehavior>)>,
    /// The last two single IPv4 FIB lookups (network, key, next-hop index), the latest first.
    route4: [Option<(NetworkId, u32, u32)>; 2],
    /// The encapsulation toward next hop `.0`, built while the neighbor cache was at version
    /// `.1` (its underlay MAC may be a learned one).
    plan: Option<(u32, u64, EncapPlan)>,
    /// The last two underlay next hops' MACs, each found while the neighbor cache was at
    /// version `.2`, the latest first (a frame flooded to two nodes alternates between them).
    underlay: [Option<(Neighbor, MacAddr, u64)>; 2],
}

/// A local destination port's record and whether its network is connection-tracked.
type Dst<'a> = Option<(&'a PortRec, bool)>;

/// The cache of one call: the [`Memo`] (moved in for the call), and the references into the
/// snapshot resolved in this call.
pub(super) struct Cx<'s, 'a> {
    snap: &'s Snapshot<'a>,
    memo: Memo,
    view: Option<(NetworkId, Option<NetworkView<'a>>)>,
    /// The last two remote next hops' rewrites, the latest first (a frame flooded to two
    /// nodes alternates between them).
    encap: [Option<(u32, Option<&'a EncapRec>)>; 2],
    /// The last destination port: its record and whether its network is stateful, and the
    /// largest IP packet its network takes (its MTU).
    dst: Option<(PortId, Dst<'a>, u16)>,
}

impl<'s, 'a> Cx<'s, 'a> {
    /// The cache of a call over `snap`, with what `memo` kept from earlier calls if they saw the
    /// same tables.
    pub(super) fn new(snap: &'s Snapshot<'a>, memo: Memo) -> Self {
        let id = snap.id();
        let memo = if id.is_some() && memo.id == id {
            memo
        } else {
            Memo {
                id,
                ..Memo::default()
            }
        };
        Cx {
            snap,
            memo,
            view: None,
            encap: [None; 2],
            dst: None,
        }
    }

    /// What to keep for the next call.
    pub(super) fn into_memo(self) -> Memo {
        self.memo
    }

    /// The snapshot the cache reads.
    #[inline(always)]
    pub(super) fn snap(&self) -> &'s Snapshot<'a> {
        self.snap
    }

    /// A local destination port's record, and whether its network is connection-tracked.
    #[inline(always)]
    pub(super) fn dst_port(&mut self, id: PortId) -> Dst<'a> {
        match self.dst {
            Some((p, v, _)) if p == id => v,
            _ => self.dst_miss(id).0,
        }
    }

    /// The MTU of a local destination port's network: the largest IP packet delivered to it
    /// (`u16::MAX` when the port or its network is unknown, or the network sets none).
    #[inline(always)]
    pub(super) fn dst_mtu(&mut self, id: PortId) -> u16 {
        match self.dst {
            Some((p, _, mtu)) if p == id => mtu,
            _ => self.dst_miss(id).1,
        }
    }

    #[inline(never)]
    fn dst_miss(&mut self, id: PortId) -> (Dst<'a>, u16) {
        let mut mtu = u16::MAX;
        let v = self.snap.port_rec(id).map(|rec| {
            let net = self.snap.network(rec.network());
            if let Some(m) = net.and_then(|n| n.info()).map(|i| i.mtu) {
                mtu = if m == 0 { u16::MAX } else { m };
            }
            (rec, net.is_some_and(|n| n.stateful()))
        });
        self.dst = Some((id, v, mtu));
        (v, mtu)
    }

    /// A port's record.
    #[inline(always)]
    pub(super) fn port(&mut self, id: PortId) -> Option<PortRec> {
        match self.memo.port {
            Some((p, rec)) if p == id => rec,
            _ => self.port_miss(id),
        }
    }

    #[inline(never)]
    fn port_miss(&mut self, id: PortId) -> Option<PortRec> {
        let rec = self.snap.port_rec(id).copied();
        self.memo.port = Some((id, rec));
        rec
    }

    /// A network's settings.
    #[inline(always)]
    pub(super) fn net_ctx(&mut self, id: NetworkId) -> Option<NetCtx> {
        match self.memo.net {
            Some((n, ctx)) if n == id => ctx,
            _ => self.net_miss(id),
        }
    }

    #[inline(never)]
    fn net_miss(&mut self, id: NetworkId) -> Option<NetCtx> {
        let ctx = self.view(id).and_then(|view| {
            let info = view.info()?;
            Some(NetCtx {
                kind: info.kind,
                gw_mac: info.gateway_mac,
                gw4: info.gateway4,
                gw6: info.gateway6,
                stateful: info.stateful,
                policy_gen: view.policy_gen(),
                learn_period_ns: info
                    .l2
                    .learning
                    .map(|aging| u64::from(aging.get()) * 1_000_000_000 / 4),
                bum: (info.l2.bum_pps, info.l2.bum_burst),
            })
        });
        self.memo.net = Some((id, ctx));
        ctx
    }

    /// A network's tables (valid for this call).
    #[inline(always)]
    pub(super) fn view(&mut self, id: NetworkId) -> Option<NetworkView<'a>> {
        match self.view {
            Some((n, v)) if n == id => v,
            _ => self.view_miss(id),
        }
    }

    #[inline(never)]
    fn view_miss(&mut self, id: NetworkId) -> Option<NetworkView<'a>> {
        let v = self.snap.network(id);
        self.view = Some((id, v));
        v
    }

    /// A network's tables and settings.
    #[inline(always)]
    pub(super) fn net(&mut self, id: NetworkId) -> Option<(NetworkView<'a>, NetCtx)> {
        let ctx = self.net_ctx(id)?;
        Some((self.view(id)?, ctx))
    }

    /// The IPv4 FIB result (next-hop index, 0 = no route) for `key` in network `net`; `None`:
    /// no such network.
    #[inline(always)]
    pub(super) fn route4(&mut self, net: NetworkId, key: u32) -> Option<u32> {
        match self.memo.route4 {
            [Some((n, k, nh)), _] | [_, Some((n, k, nh))] if n == net && k == key => Some(nh),
            _ => self.route4_miss(net, key),
        }
    }

    #[inline(never)]
    fn route4_miss(&mut self, net: NetworkId, key: u32) -> Option<u32> {
        let nh = self.view(net)?.route4_index(Ipv4Addr::from(key));
        self.memo.route4 = [Some((net, key, nh)), self.memo.route4[0]];
        Some(nh)
    }

    /// What next hop `index` (a FIB result; 0 = no route) means.
    #[inline(always)]
    pub(super) fn route(&mut self, index: u32) -> Route {
        match self.memo.route {
            [Some((i, r)), _] | [_, Some((i, r))] if i == index => r,
            _ => self.route_miss(index),
        }
    }

    #[inline(never)]
    fn route_miss(&mut self, index: u32) -> Route {
        let forward = |hop| {
            if self.snap.nexthop_flags(index).reply_only() {
                Route::ReplyOnly(hop)
            } else {
                Route::Forward(hop)
            }
        };
        let r = match self.snap.nexthop(index) {
            None => Route::None,
            Some(NextHop::Local { port, mac }) => forward(Hop::Local { port, mac }),
            Some(NextHop::Remote { .. }) => forward(Hop::Remote { nh: index }),
            Some(NextHop::Receive) => Route::Receive,
            Some(NextHop::Drop) => Route::Blackhole,
            Some(NextHop::Unreachable) => Route::Unreachable,
            Some(NextHop::Service) => Route::Service,
            Some(NextHop::Uplink {
                port,
                gateway,
                vlan,
            }) if port == PortId::UPLINK => forward(Hop::Uplink {
                gateway: Neighbor {
                    vlan,
                    addr: gateway,
                },
            }),
            Some(NextHop::Uplink { .. } | NextHop::Network { .. }) => Route::Unsupported,
        };
        self.memo.route = [Some((index, r)), self.memo.route[0]];
        r
    }

    /// The external network a plain packet from the uplink's VLAN `vlan` (0: untagged)
    /// belongs to, by its source `src` (ADR 0054): the network of the longest external prefix
    /// holding it, across the external networks of that VLAN's sources table
    /// ([`NetworkId::external_sources`]); `None` when none does.
    #[inline(never)]
    pub(super) fn external_network(&mut self, vlan: u16, src: IpAddr) -> Option<NetworkId> {
        let view = self.view(NetworkId::external_sources(vlan)?)?;
        let index = match src {
            IpAddr::V4(a) => view.route4_index(a),
            IpAddr::V6(a) => view.route6_index(a),
        };
        match self.snap.nexthop(index)? {
            NextHop::Network { net } => Some(net),
            _ => None,
        }
    }

    /// A local SID's behaviour.
    #[inline(always)]
    pub(super) fn local_sid(&mut self, addr: Ipv6Addr) -> Option<SidBehavior> {
        match self.memo.sid {
            Some((a, b)) if a == addr => b,
            _ => self.sid_miss(addr),
        }
    }

    #[inline(never)]
    fn sid_miss(&mut self, addr: Ipv6Addr) -> Option<SidBehavior> {
        let b = self.snap.local_sid(Sid(addr));
        self.memo.sid = Some((addr, b));
        b
    }

    /// The encapsulation rewrite of remote next hop `nh` (valid for this call).
    #[inline(always)]
    pub(super) fn encap(&mut self, nh: u32) -> Option<&'a EncapRec> {
        match self.encap {
            [Some((i, e)), _] | [_, Some((i, e))] if i == nh => e,
            _ => self.encap_miss(nh),
        }
    }

    #[inline(never)]
    fn encap_miss(&mut self, nh: u32) -> Option<&'a EncapRec> {
        let e = self.snap.encap(nh);
        self.encap = [Some((nh, e)), self.encap[0]];
        e
    }

    /// The whole way out toward remote next hop `nh` — its rewrite usable, its underlay MAC
    /// resolved — as `build` makes it from the two; `None` otherwise.
    #[inline(always)]
    pub(super) fn encap_plan(
        &mut self,
        neigh: &UnderlayNeighbors,
        nh: u32,
        build: impl FnOnce(&EncapRec, MacAddr) -> EncapPlan,
    ) -> Option<EncapPlan> {
        match self.memo.plan {
            Some((at, version, plan)) if at == nh && version == neigh.version() => Some(plan),
            _ => self.plan_miss(neigh, nh, build),
        }
    }

    #[inline(never)]
    fn plan_miss(
        &mut self,
        neigh: &UnderlayNeighbors,
        nh: u32,
        build: impl FnOnce(&EncapRec, MacAddr) -> EncapPlan,
    ) -> Option<EncapPlan> {
        // Read before the MAC: a change after this makes the next call build again.
        let version = neigh.version();
        let rewrite = self.encap(nh).filter(|e| e.usable())?;
        let mac = self.underlay_mac(neigh, Neighbor::untagged(rewrite.underlay_addr()))?;
        let plan = build(rewrite, mac);
        self.memo.plan = Some((nh, version, plan));
        Some(plan)
    }

    /// The MAC of next hop `who` on the uplink: for an untagged one the static table first,
    /// then what NDP and ARP learned.
    #[inline(always)]
    pub(super) fn underlay_mac(
        &mut self,
        neigh: &UnderlayNeighbors,
        who: Neighbor,
    ) -> Option<MacAddr> {
        let version = neigh.version();
        match self.memo.underlay {
            [Some((a, mac, v)), _] | [_, Some((a, mac, v))] if a == who && v == version => {
                Some(mac)
            }
            _ => self.underlay_miss(neigh, who),
        }
    }

    #[inline(never)]
    fn underlay_miss(&mut self, neigh: &UnderlayNeighbors, who: Neighbor) -> Option<MacAddr> {
        let version = neigh.version();
        let fixed = match who.vlan {
            0 => self.snap.underlay_neighbor(who.addr),
            _ => None,
        };
        let mac = fixed.or_else(|| neigh.lookup(who))?;
        self.memo.underlay = [Some((who, mac, version)), self.memo.underlay[0]];
        Some(mac)
    }
}
