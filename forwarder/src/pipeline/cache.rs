//! The per-call lookup cache: what one [`super::Pipeline::process`] call resolves once and
//! reuses for the packets after it — the receiving port's record, the last network, the last
//! next hop, local SID, encapsulation rewrite and underlay neighbor. A burst's packets mostly
//! share all of them, so each costs one table lookup per change of path, not one per packet.
//! Entries are valid for one snapshot, so the cache lives on the stack of one call.

use std::net::{Ipv4Addr, Ipv6Addr};

use lace_shared::tables::{NetworkView, Snapshot};
use lace_shared::types::{
    EncapRec, MacAddr, NetworkId, NetworkKind, NextHop, PortId, PortRec, Sid, SidBehavior,
};

use super::neigh::UnderlayNeighbors;

/// A network's settings the nodes need, decoded once per call.
#[derive(Debug, Clone, Copy)]
pub(super) struct NetCtx {
    pub(super) kind: NetworkKind,
    pub(super) gw_mac: MacAddr,
    pub(super) gw4: Option<Ipv4Addr>,
    pub(super) gw6: Option<Ipv6Addr>,
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
}

/// What a FIB result means for the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// No route (or a next hop the tables do not hold).
    None,
    /// Forward as [`Hop`] says.
    Forward(Hop),
    /// To the forwarder itself (the gateway).
    Receive,
    /// A blackhole route.
    Blackhole,
    /// An unreachable route (ICMP administratively prohibited).
    Unreachable,
    /// A next hop this pipeline does not forward to yet (uplink gateways).
    Unsupported,
}

/// The cache itself.
pub(super) struct Cx<'s, 'a> {
    snap: &'s Snapshot<'a>,
    port: Option<(PortId, Option<&'a PortRec>)>,
    net: Option<(NetworkId, Option<(NetworkView<'a>, NetCtx)>)>,
    route: Option<(u32, Route)>,
    sid: Option<(Ipv6Addr, Option<SidBehavior>)>,
    encap: Option<(u32, Option<&'a EncapRec>)>,
    underlay: Option<(Ipv6Addr, MacAddr)>,
}

impl<'s, 'a> Cx<'s, 'a> {
    pub(super) fn new(snap: &'s Snapshot<'a>) -> Self {
        Cx {
            snap,
            port: None,
            net: None,
            route: None,
            sid: None,
            encap: None,
            underlay: None,
        }
    }

    /// A port's record.
    #[inline(always)]
    pub(super) fn port(&mut self, id: PortId) -> Option<&'a PortRec> {
        match self.port {
            Some((p, rec)) if p == id => rec,
            _ => self.port_miss(id),
        }
    }

    #[inline(never)]
    fn port_miss(&mut self, id: PortId) -> Option<&'a PortRec> {
        let rec = self.snap.port_rec(id);
        self.port = Some((id, rec));
        rec
    }

    /// A network's tables and settings.
    #[inline(always)]
    pub(super) fn net(&mut self, id: NetworkId) -> Option<(NetworkView<'a>, NetCtx)> {
        match self.net {
            Some((n, v)) if n == id => v,
            _ => self.net_miss(id),
        }
    }

    #[inline(never)]
    fn net_miss(&mut self, id: NetworkId) -> Option<(NetworkView<'a>, NetCtx)> {
        let v = self.snap.network(id).and_then(|view| {
            let info = view.info()?;
            Some((
                view,
                NetCtx {
                    kind: info.kind,
                    gw_mac: info.gateway_mac,
                    gw4: info.gateway4,
                    gw6: info.gateway6,
                },
            ))
        });
        self.net = Some((id, v));
        v
    }

    /// What next hop `index` (a FIB result; 0 = no route) means.
    #[inline(always)]
    pub(super) fn route(&mut self, index: u32) -> Route {
        match self.route {
            Some((i, r)) if i == index => r,
            _ => self.route_miss(index),
        }
    }

    #[inline(never)]
    fn route_miss(&mut self, index: u32) -> Route {
        let r = match self.snap.nexthop(index) {
            None => Route::None,
            Some(NextHop::Local { port, mac }) => Route::Forward(Hop::Local { port, mac }),
            Some(NextHop::Remote { .. }) => Route::Forward(Hop::Remote { nh: index }),
            Some(NextHop::Receive) => Route::Receive,
            Some(NextHop::Drop) => Route::Blackhole,
            Some(NextHop::Unreachable) => Route::Unreachable,
            Some(NextHop::Uplink { .. }) => Route::Unsupported,
        };
        self.route = Some((index, r));
        r
    }

    /// A local SID's behaviour.
    #[inline(always)]
    pub(super) fn local_sid(&mut self, addr: Ipv6Addr) -> Option<SidBehavior> {
        match self.sid {
            Some((a, b)) if a == addr => b,
            _ => self.sid_miss(addr),
        }
    }

    #[inline(never)]
    fn sid_miss(&mut self, addr: Ipv6Addr) -> Option<SidBehavior> {
        let b = self.snap.local_sid(Sid(addr));
        self.sid = Some((addr, b));
        b
    }

    /// The encapsulation rewrite of remote next hop `nh`.
    #[inline(always)]
    pub(super) fn encap(&mut self, nh: u32) -> Option<&'a EncapRec> {
        match self.encap {
            Some((i, e)) if i == nh => e,
            _ => self.encap_miss(nh),
        }
    }

    #[inline(never)]
    fn encap_miss(&mut self, nh: u32) -> Option<&'a EncapRec> {
        let e = self.snap.encap(nh);
        self.encap = Some((nh, e));
        e
    }

    /// The MAC of underlay next hop `addr`: the static table first, then what NDP learned.
    #[inline(always)]
    pub(super) fn underlay_mac(
        &mut self,
        neigh: &UnderlayNeighbors,
        addr: Ipv6Addr,
    ) -> Option<MacAddr> {
        match self.underlay {
            Some((a, mac)) if a == addr => Some(mac),
            _ => self.underlay_miss(neigh, addr),
        }
    }

    #[inline(never)]
    fn underlay_miss(&mut self, neigh: &UnderlayNeighbors, addr: Ipv6Addr) -> Option<MacAddr> {
        let mac = self
            .snap
            .underlay_neighbor(addr)
            .or_else(|| neigh.lookup(addr))?;
        self.underlay = Some((addr, mac));
        Some(mac)
    }
}
