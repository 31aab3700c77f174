//! External networks on this node (ADR 0054): which of them it carries, their tables, and the
//! sources table that classifies what arrives from outside.
//!
//! - **Which.** An external network is programmed on this node when one of its
//!   `spec.uplinks[]` entries selects the node (the first whose `nodeSelector` matches the
//!   node's labels wins): untagged on the uplink, or on the 802.1Q VLAN the entry names.
//! - **Its table.** Each static route of that entry, `destination → NextHop::Uplink { UPLINK,
//!   nextHop, vlan }`, once its next hop is checked against the node's subnets there: the
//!   addresses of the `[[uplink.external]]` entries of the node's forwarder
//!   ([`World::external_uplinks`]) on the entry's VLAN that its `interface` names (every one
//!   when it names none). A next hop on none of them,
//!   or one of the node's own addresses, is noted with the route and the reason, and the route
//!   is left out. A route whose next hop the forwarder reports as not answering
//!   ([`World::unresolved`]) stays, noted as down.
//! - **Its route set** (what routing policy imports into other networks, [`route_set`]): on a
//!   node that carries it, its static routes narrowed to its `externalPrefixes` (traffic leaves
//!   here); elsewhere its `externalPrefixes` to its End.DT46 SID on the first node (by name)
//!   that carries it, which decapsulates into the network's table. Its own table imports the
//!   route sets of the networks policy opens to it, as an l3 network's does; the node gets the
//!   network's End.DT46 SID.
//! - **The sources tables** ([`NetworkId::external_sources`]), one per VLAN the node carries an
//!   external network on: `externalPrefixes` → `NextHop::Network { id }`, the forwarder's
//!   classification of a plain packet from the uplink by its source, longest match across
//!   networks. A VLAN's table holds the networks carried on it here, so that two networks with
//!   overlapping prefixes on different VLANs stay apart; the untagged table also holds every
//!   network this node does not carry (the seed's match across all external networks; their
//!   packets then find no table here). Programmed when the node carries an external network. A
//!   prefix two networks of one table list stays the first's (by name), noted.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use lace_shared::status::ExternalUplink;
use lace_shared::types::{
    L2Settings, MacAddr, NetworkId, NetworkInfo, NetworkKind, NextHop, PortId,
};

use super::encode::{encode_sid, SidFunction};
use super::routes::{narrowed, net_obj, Ctx};
use super::{NetworkTables, Note, NoteKind, Route};
use crate::api::NetworkType;
use crate::world::{NetworkModel, NodeModel, UplinkModel};

/// An external network this node carries: its static routes, before routing policy's.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Carried<'w> {
    /// The network.
    pub net: &'w NetworkModel,
    /// Its static routes that fit the node's subnets.
    pub routes: BTreeMap<IpNet, Route>,
}

/// The external networks' tables on this node.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ExternalTables<'w> {
    /// Each external network this node carries, by name.
    pub networks: Vec<Carried<'w>>,
    /// The sources tables, one per VLAN ([`NetworkId::external_sources`]; none unless the
    /// node carries an external network).
    pub sources: BTreeMap<NetworkId, NetworkTables>,
    /// What was left out, and why.
    pub notes: Vec<Note>,
}

/// The first `spec.uplinks[]` entry of `net` that selects a node with `labels`, with its index.
pub(super) fn uplink_of<'a>(
    net: &'a NetworkModel,
    labels: &BTreeMap<String, String>,
) -> Option<(usize, &'a UplinkModel)> {
    net.uplinks
        .iter()
        .enumerate()
        .find(|(_, u)| u.selects(labels))
}

/// Whether a node with `labels` carries `net`.
fn carries(net: &NetworkModel, labels: &BTreeMap<String, String>) -> bool {
    uplink_of(net, labels).is_some()
}

/// The node other nodes send external network `net`'s traffic to: the first (by name) that
/// carries it, other than this one.
pub(super) fn carrier<'w>(ctx: &Ctx<'w>, net: &NetworkModel) -> Option<&'w NodeModel> {
    ctx.world
        .nodes
        .values()
        .find(|n| n.name != ctx.me.name && carries(net, &n.labels))
}

/// External network `net`'s route set on this node (see the module docs).
pub(super) fn route_set(ctx: &Ctx<'_>, net: &NetworkModel) -> (BTreeMap<IpNet, Route>, Vec<Note>) {
    if let Some((i, up)) = uplink_of(net, &ctx.me.labels) {
        // The network's own compilation notes what its static routes leave out.
        let routes = static_routes(ctx, net, i, up, &mut Vec::new());
        return (narrowed(&routes, &net.external).collect(), Vec::new());
    }
    let Some(carrier) = carrier(ctx, net) else {
        return (BTreeMap::new(), Vec::new());
    };
    match encode_sid(carrier.locator, SidFunction::EndDt46, net.id) {
        Ok(sid) => {
            let nh = Route::from(NextHop::Remote {
                node: carrier.id,
                sid,
            });
            (
                net.external.iter().map(|p| (p.trunc(), nh)).collect(),
                Vec::new(),
            )
        }
        Err(e) => (
            BTreeMap::new(),
            vec![Note {
                kind: NoteKind::Unsupported,
                object: format!("Node {}", carrier.name),
                message: format!(
                    "it carries external network {}, unreachable from here: {e}",
                    net.name
                ),
            }],
        ),
    }
}

/// The external networks' tables on this node (see the module docs).
pub(super) fn compile<'w>(ctx: &Ctx<'w>) -> ExternalTables<'w> {
    let mut out = ExternalTables::default();
    let externals = || {
        ctx.world
            .networks
            .values()
            .filter(|n| n.kind == NetworkType::External)
    };
    for net in externals() {
        if !ctx.world.nodes.values().any(|n| carries(net, &n.labels)) {
            out.notes.push(Note {
                kind: NoteKind::Inconsistent,
                object: net_obj(&net.name),
                message: "no node carries it: no spec.uplinks[] entry selects a node's \
                          labels, so routing policy toward it opens nothing"
                    .into(),
            });
        }
        let Some((i, up)) = uplink_of(net, &ctx.me.labels) else {
            continue;
        };
        let routes = static_routes(ctx, net, i, up, &mut out.notes);
        out.networks.push(Carried { net, routes });
    }
    if !out.networks.is_empty() {
        out.sources = sources(ctx, &mut out.notes)
            .into_iter()
            .map(|(id, routes)| (id, tables(ctx, routes)))
            .collect();
    }
    out
}

/// An external network's tables with `routes`: no gateway of its own (the node's addresses
/// there are the forwarder's configuration), nothing tracked.
pub(super) fn tables(ctx: &Ctx<'_>, routes: BTreeMap<IpNet, Route>) -> NetworkTables {
    NetworkTables {
        info: NetworkInfo {
            kind: NetworkKind::External,
            anonymous: false,
            gateway_mac: MacAddr([0; 6]),
            gateway4: None,
            gateway6: None,
            mtu: ctx.cfg.pod_mtu_of(NetworkKind::External),
            stateful: false,
            l2: L2Settings::default(),
        },
        routes,
        services: BTreeMap::new(),
        neighbors: BTreeMap::new(),
        fdb: BTreeMap::new(),
        flood: Vec::new(),
    }
}

/// The node's side of one `spec.uplinks[]` entry: the subnets of its forwarder's
/// `[[uplink.external]]` entries there (the entry's VLAN, and its interface when it names one),
/// which a next hop must lie on.
pub(super) struct UplinkSide {
    /// The entry's VLAN (0: untagged).
    pub vlan: u16,
    /// Where, for messages (`interface "eth1"`, `VLAN 100 of the uplink`).
    pub place: String,
    /// The node's addresses there, with their subnets.
    subnets: Vec<(IpAddr, IpNet)>,
}

impl UplinkSide {
    /// The node's side of entry `up`; `Err` (the note's message, after "…selects node X,
    /// whose forwarder…") when its forwarder has no `[[uplink.external]]` entry there.
    pub fn of(ctx: &Ctx<'_>, up: &UplinkModel) -> Result<UplinkSide, String> {
        let vlan = up.vlan.unwrap_or(0);
        let carriers: Vec<&ExternalUplink> = ctx
            .world
            .external_uplinks
            .iter()
            .filter(|u| u.vlan == vlan && up.interface.as_ref().is_none_or(|i| *i == u.interface))
            .collect();
        let place = match (&up.interface, up.vlan) {
            (Some(i), None) => format!("interface {i:?}"),
            (Some(i), Some(v)) => format!("VLAN {v} of interface {i:?}"),
            (None, None) => "the uplink".to_owned(),
            (None, Some(v)) => format!("VLAN {v} of the uplink"),
        };
        if carriers.is_empty() {
            return Err(format!(
                "whose forwarder has no [[uplink.external]] entry for {place}. Give the \
                 forwarder the node's address on the network's subnet{}",
                match (&up.interface, up.vlan) {
                    (Some(i), None) => format!(" in an entry with interface = {i:?}"),
                    (Some(i), Some(v)) => {
                        format!(" in an entry with interface = {i:?} and vlan = {v}")
                    }
                    (None, None) => String::new(),
                    (None, Some(v)) => format!(" in an entry with vlan = {v}"),
                }
            ));
        }
        let subnets = carriers
            .iter()
            .flat_map(|u| &u.addresses)
            .filter_map(|&(a, len)| Some((a, IpNet::new(a, len).ok()?.trunc())))
            .collect();
        Ok(UplinkSide {
            vlan,
            place,
            subnets,
        })
    }

    /// The uplink next hop to gateway `nh` here; `Err` says why `nh` cannot be one (after "the
    /// next hop …").
    pub fn next_hop(&self, nh: IpAddr) -> Result<NextHop, String> {
        let place = &self.place;
        if self.subnets.iter().any(|(a, _)| *a == nh) {
            return Err("is the node's own address there".to_owned());
        }
        if !self.subnets.iter().any(|(_, s)| s.contains(&nh)) {
            let mut on: Vec<String> = self
                .subnets
                .iter()
                .filter(|(a, _)| a.is_ipv4() == nh.is_ipv4())
                .map(|(_, s)| s.to_string())
                .collect();
            on.dedup();
            return Err(if on.is_empty() {
                format!(
                    "is on none of its subnets on {place}: the node has no {} address there",
                    if nh.is_ipv4() { "IPv4" } else { "IPv6" }
                )
            } else {
                format!("is on none of its subnets on {place} ({})", on.join(", "))
            });
        }
        Ok(NextHop::Uplink {
            port: PortId::UPLINK,
            gateway: match nh {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            },
            vlan: self.vlan,
        })
    }

    /// Why gateway `nh` is down here (after "… is down on node X: "), when the forwarder
    /// reports it as not answering.
    pub fn down(&self, ctx: &Ctx<'_>, nh: IpAddr) -> Option<String> {
        ctx.world.unresolved.contains(&(self.vlan, nh)).then(|| {
            format!(
                "the next hop does not answer {}; its packets are dropped (gateway-unresolved) \
                 until it does",
                if nh.is_ipv4() {
                    "ARP"
                } else {
                    "neighbor solicitations"
                }
            )
        })
    }
}

/// Entry `up` (the `i`th of `net`)'s static routes on this node, each next hop checked against
/// the node's subnets there; what is left out (or down) is noted in `notes`.
fn static_routes(
    ctx: &Ctx<'_>,
    net: &NetworkModel,
    i: usize,
    up: &UplinkModel,
    notes: &mut Vec<Note>,
) -> BTreeMap<IpNet, Route> {
    let mut routes = BTreeMap::new();
    if up.static_routes.is_empty() {
        return routes;
    }
    let node = &ctx.me.name;
    let side = match UplinkSide::of(ctx, up) {
        Ok(side) => side,
        Err(why) => {
            notes.push(Note {
                kind: NoteKind::Inconsistent,
                object: net_obj(&net.name),
                message: format!(
                    "spec.uplinks[{i}] selects node {node}, {why}; its static routes are not \
                     programmed there"
                ),
            });
            return routes;
        }
    };
    for (j, (dst, nh)) in up.static_routes.iter().enumerate() {
        let route = match side.next_hop(*nh) {
            Ok(hop) => Route::from(hop),
            Err(why) => {
                notes.push(Note {
                    kind: NoteKind::Inconsistent,
                    object: net_obj(&net.name),
                    message: format!(
                        "spec.uplinks[{i}].staticRoutes[{j}] ({dst} via {nh}) is not programmed \
                         on node {node}: the next hop {why}"
                    ),
                });
                continue;
            }
        };
        if let Some(why) = side.down(ctx, *nh) {
            notes.push(Note {
                kind: NoteKind::Down,
                object: net_obj(&net.name),
                message: format!(
                    "spec.uplinks[{i}].staticRoutes[{j}] ({dst} via {nh}) is down on node \
                     {node}: {why}"
                ),
            });
        }
        match routes.get(dst) {
            None => {
                routes.insert(*dst, route);
            }
            Some(kept) if *kept == route => {}
            Some(kept) => notes.push(Note {
                kind: NoteKind::Conflict,
                object: net_obj(&net.name),
                message: format!(
                    "spec.uplinks[{i}].staticRoutes[{j}]: {dst} via {nh}, but an earlier route \
                     sends {dst} via {}; kept the first",
                    match kept.nh {
                        NextHop::Uplink { gateway, .. } => gateway.to_canonical().to_string(),
                        other => format!("{other:?}"),
                    }
                ),
            }),
        }
    }
    routes
}

/// The sources tables' routes by table id: each external network's prefixes → the network, in
/// the table of the VLAN this node carries it on, or the untagged one when it does not carry
/// it; in one table a prefix stays the first network's (by name).
fn sources(ctx: &Ctx<'_>, notes: &mut Vec<Note>) -> BTreeMap<NetworkId, BTreeMap<IpNet, Route>> {
    let mut owner: BTreeMap<(NetworkId, IpNet), &str> = BTreeMap::new();
    let mut tables: BTreeMap<NetworkId, BTreeMap<IpNet, Route>> = BTreeMap::new();
    for net in ctx
        .world
        .networks
        .values()
        .filter(|n| n.kind == NetworkType::External)
    {
        let vlan = uplink_of(net, &ctx.me.labels).map_or(0, |(_, u)| u.vlan.unwrap_or(0));
        let Some(table) = NetworkId::external_sources(vlan) else {
            // Validation keeps VLANs within 1–4094.
            continue;
        };
        for p in &net.external {
            let p = p.trunc();
            if let Some(first) = owner.get(&(table, p)) {
                notes.push(Note {
                    kind: NoteKind::Conflict,
                    object: net_obj(&net.name),
                    message: format!(
                        "external prefix {p} is also network {first}'s{}; packets from it \
                         belong to {first}. Give external networks distinct prefixes, or \
                         distinct VLANs",
                        match vlan {
                            0 => String::new(),
                            v => format!(" on VLAN {v}"),
                        }
                    ),
                });
                continue;
            }
            owner.insert((table, p), &net.name);
            tables
                .entry(table)
                .or_default()
                .insert(p, Route::from(NextHop::Network { net: net.id }));
        }
    }
    tables
}
