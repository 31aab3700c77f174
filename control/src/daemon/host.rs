//! The node's host interface (ADR 0023): how the node's own network stack — kubelet's probes,
//! host-network pods, node agents — reaches its pods, whose traffic otherwise never touches
//! the kernel.
//!
//! A veth pair in the host's network namespace: the *host end* (`--host-interface`, e.g.
//! `lace-host`) is the kernel's, the *forwarder's end* (`<name>-fw`) is attached by the
//! forwarder as the port [`lace_shared::types::PortId::HOST`] of kind
//! [`lace_shared::types::PortKind::Host`], exactly as a pod's host-side interface is. Control
//! makes and keeps it:
//!
//! - the host end gets a MAC derived from the node's name (`0a:…`: locally administered,
//!   never a pod's `02:…` nor a gateway's `06:…`) and the smallest pod MTU, so what the host
//!   sends fits every pod;
//! - permanent neighbor entries for the host network's gateways ([`HOST_GATEWAY4`],
//!   [`HOST_GATEWAY6`]) with the host network's gateway MAC, so the host never has to resolve
//!   them;
//! - one route per destination of the host network ([`crate::compile::host_routes`]: every
//!   node's l3 blocks, this node's l2 endpoints) `via` that gateway `dev` the host end, with the
//!   node's own address of the family (its first `InternalIP` configured in the namespace) as
//!   the preferred source, so that replies from pods on other nodes find the node (ADR 0036);
//!   kept equal to the compiled tables by [`HostInterface::sync`] (added, replaced, and removed
//!   when they go — also routes a previous run left);
//! - the forwarder's end: IPv6 off (the forwarder answers for it) and offloads on, as pod
//!   ports have them.
//!
//! A host with IPv6 off on the host end (`disable_ipv6`) gets the IPv4 half only: no IPv6
//! neighbor, no IPv6 routes (the pods' IPv6 addresses are then not reachable from the host).
//!
//! The port's endpoint id is derived from the forwarder's end's interface index: an interface
//! made again (it vanished) is a new endpoint, which the forwarder attaches anew. A control
//! that restarts finds the pair as it left it and changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use futures_util::TryStreamExt as _;
use ipnet::IpNet;
use lace_shared::types::{IfName, MacAddr, NetworkId};
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::packet_route::link::{InfoData, InfoVeth};
use rtnetlink::packet_route::neighbour::NeighbourState;
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use rtnetlink::{Handle, LinkUnspec, LinkVeth, RouteMessageBuilder};

use super::core::HostPort;
use crate::cni::link::{
    delete_by_name, find_link, in_netns, link_mac, nl, offloads_on, route_ip, route_message,
    with_netlink, write_sysctl, LinkError,
};
use crate::compile::{gateway_mac, HOST_GATEWAY4, HOST_GATEWAY6};

/// Longest host end name: `-fw` must fit an interface name after it.
pub const MAX_NAME: usize = 12;

/// Why the host interface could not be made or kept.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The name is not usable.
    #[error(
        "--host-interface {0:?}: use 1-{MAX_NAME} characters without '/', ':' or whitespace \
         (the forwarder's end is the name with -fw appended)"
    )]
    Name(String),
    /// Netlink, sysctl or ethtool failed.
    #[error("host interface {name}: {source}")]
    Link {
        /// The host end.
        name: String,
        /// What failed.
        #[source]
        source: Box<LinkError>,
    },
}

/// The host interface, made (see the module docs).
#[derive(Debug)]
pub struct HostInterface {
    name: String,
    peer: String,
    netns: Option<PathBuf>,
    mtu: u32,
    port: HostPort,
    /// The routes into the host end as last made (or found at start); None after a failed
    /// sync: read them again first.
    routes: Option<Routes>,
    /// The node's addresses the last sync chose sources from.
    sources: Vec<IpAddr>,
    /// Whether the host end has IPv6.
    v6: bool,
}

/// Routes into the host end: each destination with its preferred source address.
type Routes = BTreeMap<IpNet, Option<IpAddr>>;

/// The host end's MAC for `node`: `0a` and 40 bits of a hash of the name.
pub fn host_mac(node: &str) -> MacAddr {
    let h = crate::ipam::fnv64(&[b"lace-host", node.as_bytes()]).to_be_bytes();
    MacAddr([0x0a, h[0], h[1], h[2], h[3], h[4]])
}

/// The endpoint id of the port on the forwarder's end with interface index `index`: the top
/// bit set, never a pod's (node ids stay below 2^31).
fn endpoint_of(index: u32) -> u64 {
    1 << 63 | u64::from(index)
}

fn in_ns<T, F, Fut>(netns: Option<&Path>, f: F) -> Result<T, LinkError>
where
    T: Send,
    F: FnOnce(Handle) -> Fut + Send,
    Fut: Future<Output = Result<T, LinkError>>,
{
    match netns {
        Some(p) => in_netns(p, f),
        None => with_netlink(f),
    }
}

impl HostInterface {
    /// Makes the pair `name` / `<name>-fw` in `netns` (default: control's own namespace) for
    /// `node`, with MTU `mtu`, or takes it as a previous run left it.
    pub fn open(
        name: &str,
        netns: Option<&Path>,
        node: &str,
        mtu: u16,
    ) -> Result<HostInterface, HostError> {
        if name.len() > MAX_NAME || IfName::new(name).is_err() {
            return Err(HostError::Name(name.to_owned()));
        }
        let peer = format!("{name}-fw");
        let mac = host_mac(node);
        let gw_mac = gateway_mac(NetworkId::HOST);
        let mtu = u32::from(mtu);
        let link = |source| HostError::Link {
            name: name.to_owned(),
            source: Box::new(source),
        };
        let (index, routes, v6) = in_ns(netns, |handle| {
            let (name, peer) = (name.to_owned(), peer.clone());
            async move {
                let host = find_link(&handle, &name).await?;
                let fw = find_link(&handle, &peer).await?;
                let intact = matches!((&host, &fw), (Some(h), Some(_)) if link_mac(h) == mac.0);
                if !intact {
                    delete_by_name(&handle, &name).await?;
                    delete_by_name(&handle, &peer).await?;
                    let p = LinkUnspec::new_with_name(&peer).mtu(mtu).build();
                    let msg = LinkVeth::new(&name, &peer)
                        .mtu(mtu)
                        .address(mac.0.to_vec())
                        .set_info_data(InfoData::Veth(InfoVeth::Peer(p)))
                        .build();
                    handle
                        .link()
                        .add(msg)
                        .execute()
                        .await
                        .map_err(nl(format!("creating veth {name} (peer {peer})")))?;
                }
                let (Some(host), Some(fw)) = (
                    find_link(&handle, &name).await?,
                    find_link(&handle, &peer).await?,
                ) else {
                    return Err(LinkError::Missing {
                        ifname: name.clone(),
                        place: "the host namespace".into(),
                    });
                };
                // The forwarder answers for its end: no IPv6 of the kernel's there.
                write_sysctl(&format!("net/ipv6/conf/{peer}/disable_ipv6"), "1", true)?;
                let v6 =
                    std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"))
                        .is_ok_and(|v| v.trim() == "0");
                offloads_on(&peer)?;
                offloads_on(&name)?;
                for (index, what) in [(host.header.index, &name), (fw.header.index, &peer)] {
                    handle
                        .link()
                        .set(LinkUnspec::new_with_index(index).mtu(mtu).up().build())
                        .execute()
                        .await
                        .map_err(nl(format!("setting {what} up (mtu {mtu})")))?;
                }
                let gateways = [IpAddr::V4(HOST_GATEWAY4), IpAddr::V6(HOST_GATEWAY6)];
                for gw in gateways.into_iter().filter(|g| v6 || g.is_ipv4()) {
                    handle
                        .neighbours()
                        .add(host.header.index, gw)
                        .link_layer_address(&gw_mac.0)
                        .state(NeighbourState::Permanent)
                        .replace()
                        .execute()
                        .await
                        .map_err(nl(format!("adding neighbor {gw} on {name}")))?;
                }
                let routes = routes_on(&handle, host.header.index).await?;
                Ok((fw.header.index, routes, v6))
            }
        })
        .map_err(link)?;
        Ok(HostInterface {
            name: name.to_owned(),
            peer: peer.clone(),
            netns: netns.map(Path::to_path_buf),
            mtu,
            port: HostPort {
                iface: IfName::new(&peer).map_err(|_| HostError::Name(name.to_owned()))?,
                mac,
                endpoint: endpoint_of(index),
            },
            routes: Some(routes),
            sources: Vec::new(),
            v6,
        })
    }

    /// The port the tables carry for it.
    pub fn port(&self) -> HostPort {
        self.port
    }

    /// The host end's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Makes the routes into the host end exactly `wanted` (see the module docs), each with
    /// the first of `sources` (the node's addresses) of its family that is configured in the
    /// host namespace as its preferred source. Nothing is asked of the kernel when they are
    /// already so.
    pub fn sync(&mut self, wanted: &BTreeSet<IpNet>, sources: &[IpAddr]) -> Result<(), HostError> {
        let wanted: BTreeSet<IpNet> = wanted
            .iter()
            .filter(|p| self.v6 || p.addr().is_ipv4())
            .copied()
            .collect();
        let unchanged = self
            .routes
            .as_ref()
            .is_some_and(|r| r.keys().eq(wanted.iter()));
        if unchanged && self.sources == sources {
            return Ok(());
        }
        let name = self.name.clone();
        let known = self.routes.clone();
        let candidates = sources.to_vec();
        let result = in_ns(self.netns.as_deref(), |handle| {
            let name = name.clone();
            async move {
                let Some(host) = find_link(&handle, &name).await? else {
                    return Err(LinkError::Missing {
                        ifname: name.clone(),
                        place: "the host namespace".into(),
                    });
                };
                let index = host.header.index;
                let local = local_addresses(&handle).await?;
                let source = |dst: &IpNet| {
                    candidates
                        .iter()
                        .find(|a| a.is_ipv4() == dst.addr().is_ipv4() && local.contains(a))
                        .copied()
                };
                let desired: Routes = wanted.iter().map(|d| (*d, source(d))).collect();
                let there = match known {
                    Some(r) => r,
                    None => routes_on(&handle, index).await?,
                };
                for (dst, src) in &desired {
                    if there.get(dst) == Some(src) {
                        continue;
                    }
                    let mut msg = route_message(*dst, gateway_for(dst), index)?;
                    if let Some(a) = src {
                        msg.attributes.push(RouteAttribute::PrefSource(match a {
                            IpAddr::V4(v4) => RouteAddress::Inet(*v4),
                            IpAddr::V6(v6) => RouteAddress::Inet6(*v6),
                        }));
                    }
                    handle
                        .route()
                        .add(msg)
                        .replace()
                        .execute()
                        .await
                        .map_err(nl(format!("adding route {dst} dev {name} src {src:?}")))?;
                }
                for dst in there.keys().filter(|d| !desired.contains_key(*d)) {
                    let msg = route_message(*dst, gateway_for(dst), index)?;
                    match handle.route().del(msg).execute().await {
                        Ok(()) => {}
                        // Gone already (the interface was made again, or by hand).
                        Err(e) if crate::cni::link::is_errno(&e, nix::errno::Errno::ESRCH) => {}
                        Err(e) => return Err(nl(format!("removing route {dst} dev {name}"))(e)),
                    }
                }
                Ok(desired)
            }
        });
        match result {
            Ok(desired) => {
                self.routes = Some(desired);
                self.sources = sources.to_vec();
                Ok(())
            }
            Err(source) => {
                // The next sync starts from what is there.
                self.routes = None;
                Err(HostError::Link {
                    name,
                    source: Box::new(source),
                })
            }
        }
    }

    /// The MTU of both ends.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The forwarder's end.
    pub fn peer(&self) -> &str {
        &self.peer
    }
}

/// The host network's gateway of `dst`'s family.
fn gateway_for(dst: &IpNet) -> IpAddr {
    match dst {
        IpNet::V4(_) => IpAddr::V4(HOST_GATEWAY4),
        IpNet::V6(_) => IpAddr::V6(HOST_GATEWAY6),
    }
}

/// Every address configured in the namespace.
async fn local_addresses(handle: &Handle) -> Result<BTreeSet<IpAddr>, LinkError> {
    let found: Vec<AddressMessage> = handle
        .address()
        .get()
        .execute()
        .try_collect()
        .await
        .map_err(nl("listing addresses"))?;
    Ok(found
        .iter()
        .flat_map(|a| &a.attributes)
        .filter_map(|attr| match attr {
            AddressAttribute::Address(ip) | AddressAttribute::Local(ip) => Some(*ip),
            _ => None,
        })
        .collect())
}

/// The routes of the main table through interface `index` via a host network gateway, with
/// their preferred sources.
async fn routes_on(handle: &Handle, index: u32) -> Result<Routes, LinkError> {
    let mut out = Routes::new();
    for v6 in [false, true] {
        let mut query = RouteMessageBuilder::<IpAddr>::new();
        query.get_mut().header.address_family = if v6 {
            rtnetlink::packet_route::AddressFamily::Inet6
        } else {
            rtnetlink::packet_route::AddressFamily::Inet
        };
        let found: Vec<RouteMessage> = handle
            .route()
            .get(query.build())
            .execute()
            .try_collect()
            .await
            .map_err(nl("listing routes"))?;
        for r in found {
            let (mut dst, mut gw, mut oif, mut src) = (None, None, None, None);
            for a in &r.attributes {
                match a {
                    RouteAttribute::Destination(d) => dst = route_ip(d),
                    RouteAttribute::Gateway(g) => gw = route_ip(g),
                    RouteAttribute::Oif(o) => oif = Some(*o),
                    RouteAttribute::PrefSource(p) => src = route_ip(p),
                    _ => {}
                }
            }
            let ours =
                gw == Some(IpAddr::V4(HOST_GATEWAY4)) || gw == Some(IpAddr::V6(HOST_GATEWAY6));
            if let (Some(d), true, Some(i)) = (dst, ours, oif) {
                if i == index {
                    if let Ok(p) = IpNet::new(d, r.header.destination_prefix_length) {
                        out.insert(p, src);
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_mac_is_local_unicast_and_never_a_pods_or_a_gateways() {
        let m = host_mac("node-a");
        assert_eq!(m.0[0], 0x0a);
        assert_ne!(host_mac("node-a"), host_mac("node-b"));
        assert_eq!(host_mac("node-a"), m, "stable");
        assert!(
            endpoint_of(7) >= 1 << 63,
            "above every pod's (node ids stay below 2^31)"
        );
    }

    #[test]
    fn names_leave_room_for_the_forwarders_end() {
        for bad in ["", "a-very-long-nam", "has space", "sl/sh"] {
            assert!(matches!(
                HostInterface::open(bad, None, "n", 1446),
                Err(HostError::Name(_))
            ));
        }
    }
}
