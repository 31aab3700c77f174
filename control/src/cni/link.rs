//! The pod interface: a veth pair whose host end stays in the plugin's (the node's) network
//! namespace for the forwarder to attach, and whose other end lives in the pod's namespace.
//!
//! Everything here is netlink (`rtnetlink`), except two things that have no netlink interface:
//! per-interface sysctls (`/proc/sys/net/ipv6/conf/<if>/…`) and offload features, which are
//! switched on with the `ethtool` binary (the `ethtool` crate can read features but not set
//! them).
//!
//! Namespace handling: `setns` changes only the calling thread, so work inside the pod's
//! namespace runs on a dedicated, scoped thread that enters the namespace and opens its own
//! netlink socket there (a netlink socket belongs to the namespace it was created in); the
//! `/proc/sys/net` files it opens and the `ethtool` it spawns belong to that namespace too.
//! The calling thread never changes namespace.
//!
//! Guarantees: configuring is idempotent (addresses, routes and neighbors are replaced, not
//! added twice), deleting something already gone succeeds, and the veth is created with its pod
//! end directly in the pod's namespace under its final name (never visible in the node's
//! namespace), so concurrent ADDs cannot collide on a temporary name.

use std::fs::File;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use futures_util::TryStreamExt;
use ipnet::IpNet;
use nix::errno::Errno;
use nix::sched::CloneFlags;
use rtnetlink::packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use rtnetlink::packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use rtnetlink::packet_route::neighbour::NeighbourState;
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use rtnetlink::{Handle, LinkUnspec, LinkVeth, RouteMessageBuilder};

use crate::proto::Allocation;

/// Offload features switched on on both ends (the kernel's defaults for a veth, set
/// explicitly so a pod gets them whatever its namespace's defaults). The forwarder's packet
/// socket port (ADR 0013) takes the pod's large segments whole with their offload metadata,
/// completes partial checksums and cuts segments once, and sends runs of TCP segments back as
/// one large segment with a partial checksum, which the pod end must accept: checksum offload
/// (`tx`) and TSO on the host end keep the kernel from cutting them again, GRO on the pod end
/// merges what lace did not.
pub const OFFLOADS: [&str; 8] = ["tx", "on", "tso", "on", "gso", "on", "gro", "on"];

/// Why link work failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The allocation from control cannot be configured as it is.
    #[error("allocation from lace-control: {field} {value:?} is invalid ({reason}); this is a lace-control bug, see its log")]
    BadAllocation {
        /// The allocation field.
        field: &'static str,
        /// Its value.
        value: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The pod's network namespace does not exist (any more).
    #[error("network namespace {0}: does not exist (the sandbox is gone?)")]
    NetnsGone(PathBuf),
    /// The namespace could not be opened or entered.
    #[error("network namespace {path}: cannot enter it ({reason}); lace-cni must run as root (CAP_SYS_ADMIN, CAP_NET_ADMIN)")]
    Netns {
        /// The namespace path.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The netlink socket or its runtime could not be set up.
    #[error("netlink: cannot open a socket ({0})")]
    Socket(io::Error),
    /// A netlink request failed.
    #[error("netlink: {what} failed ({source})")]
    Netlink {
        /// What was asked, naming the interface.
        what: String,
        /// The error.
        source: rtnetlink::Error,
    },
    /// The pod already has an interface by that name that is not this attachment's.
    #[error(
        "interface {ifname} already exists in {netns} ({found}); another plugin or an earlier \
         attachment owns it: give this network another interface name"
    )]
    AlreadyExists {
        /// `CNI_IFNAME`.
        ifname: String,
        /// `CNI_NETNS`.
        netns: String,
        /// What was found.
        found: String,
    },
    /// An interface that should exist does not.
    #[error("interface {ifname} is missing from {place}")]
    Missing {
        /// The interface.
        ifname: String,
        /// The namespace (path, or "the node's namespace").
        place: String,
    },
    /// A sysctl could not be written.
    #[error("sysctl {path}: cannot write {value} ({source})")]
    Sysctl {
        /// The /proc/sys file.
        path: PathBuf,
        /// The value.
        value: &'static str,
        /// The error.
        source: io::Error,
    },
    /// `ethtool` failed or is missing.
    #[error("ethtool -K {ifname} {}: {detail}", OFFLOADS.join(" "))]
    Ethtool {
        /// The interface.
        ifname: String,
        /// What went wrong (install ethtool when it is missing).
        detail: String,
    },
    /// The interface differs from its allocation (CHECK).
    #[error("interface {ifname} in {netns} differs from its allocation: {}", differences.join("; "))]
    Mismatch {
        /// `CNI_IFNAME`.
        ifname: String,
        /// `CNI_NETNS`.
        netns: String,
        /// Each difference, "what: found X, want Y".
        differences: Vec<String>,
    },
}

/// An allocation, parsed into what the kernel is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLinkSpec {
    /// Host-side name.
    pub host_interface: String,
    /// Pod-side name (`CNI_IFNAME`).
    pub ifname: String,
    /// Pod-side MAC.
    pub mac: [u8; 6],
    /// MTU of both ends.
    pub mtu: u32,
    /// Addresses with their gateways, in allocation order.
    pub addresses: Vec<(IpNet, IpAddr)>,
    /// Routes (destination, gateway): a default route per address family via its gateway, then
    /// the allocation's routes, without duplicates.
    pub routes: Vec<(IpNet, IpAddr)>,
    /// The gateways' MAC.
    pub gateway_mac: [u8; 6],
}

impl PodLinkSpec {
    /// Parses `alloc` for the pod interface `ifname`.
    pub fn from_allocation(alloc: &Allocation, ifname: &str) -> Result<PodLinkSpec, LinkError> {
        let bad = |field: &'static str, value: &str, reason: String| LinkError::BadAllocation {
            field,
            value: value.to_string(),
            reason,
        };
        if alloc.host_interface.is_empty()
            || alloc.host_interface.len() > 15
            || alloc.host_interface.contains(['/', ':', ' '])
        {
            return Err(bad(
                "hostInterface",
                &alloc.host_interface,
                "not a Linux interface name (1 to 15 characters, no '/', ':' or space)".into(),
            ));
        }
        let mac = parse_mac(&alloc.mac).ok_or_else(|| bad("mac", &alloc.mac, MAC_SYNTAX.into()))?;
        let gateway_mac = parse_mac(&alloc.gateway_mac)
            .ok_or_else(|| bad("gatewayMac", &alloc.gateway_mac, MAC_SYNTAX.into()))?;
        if alloc.mtu < 576 {
            return Err(bad("mtu", &alloc.mtu.to_string(), "below 576".into()));
        }
        if alloc.ips.is_empty() {
            return Err(bad("ips", "[]", "no address to configure".into()));
        }
        let mut addresses = Vec::new();
        let mut routes: Vec<(IpNet, IpAddr)> = Vec::new();
        for ip in &alloc.ips {
            let net: IpNet = ip
                .address
                .parse()
                .map_err(|e| bad("ips[].address", &ip.address, format!("{e}")))?;
            let gw: IpAddr = ip
                .gateway
                .parse()
                .map_err(|e| bad("ips[].gateway", &ip.gateway, format!("{e}")))?;
            if net.addr().is_ipv4() != gw.is_ipv4() {
                return Err(bad(
                    "ips[].gateway",
                    &ip.gateway,
                    format!("not of the family of {}", ip.address),
                ));
            }
            let default = match gw {
                IpAddr::V4(_) => "0.0.0.0/0".parse::<IpNet>(),
                IpAddr::V6(_) => "::/0".parse::<IpNet>(),
            }
            .map_err(|e| bad("ips[].gateway", &ip.gateway, format!("{e}")))?;
            if !routes.iter().any(|(d, _)| *d == default) {
                routes.push((default, gw));
            }
            addresses.push((net, gw));
        }
        for r in &alloc.routes {
            let dst: IpNet = r
                .dst
                .parse()
                .map_err(|e| bad("routes[].dst", &r.dst, format!("{e}")))?;
            let gw: IpAddr =
                r.gw.parse()
                    .map_err(|e| bad("routes[].gw", &r.gw, format!("{e}")))?;
            if dst.addr().is_ipv4() != gw.is_ipv4() {
                return Err(bad(
                    "routes[].gw",
                    &r.gw,
                    format!("not of the family of {}", r.dst),
                ));
            }
            let dst = dst.trunc();
            if !routes.iter().any(|(d, _)| *d == dst) {
                routes.push((dst, gw));
            }
        }
        Ok(PodLinkSpec {
            host_interface: alloc.host_interface.clone(),
            ifname: ifname.to_string(),
            mac,
            mtu: u32::from(alloc.mtu),
            addresses,
            routes,
            gateway_mac,
        })
    }

    /// The distinct gateways, each given a permanent neighbor entry.
    pub fn gateways(&self) -> Vec<IpAddr> {
        let mut gws: Vec<IpAddr> = Vec::new();
        for gw in self.addresses.iter().map(|(_, g)| *g) {
            if !gws.contains(&gw) {
                gws.push(gw);
            }
        }
        gws
    }
}

/// What a MAC in an allocation must look like.
const MAC_SYNTAX: &str = "not six two-digit hex octets separated by ':'";

/// Parses `aa:bb:cc:dd:ee:ff` (the API's one MAC parser, as octets).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    crate::api::validate::parse_mac(s).map(|m| m.0)
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// What the pod's namespace holds under `CNI_IFNAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodLinkState {
    /// Nothing by that name.
    Absent,
    /// An interface by that name.
    Present {
        /// Its MAC.
        mac: Vec<u8>,
        /// Whether it is a veth.
        veth: bool,
    },
}

/// Runs `f` with a netlink handle of the calling thread's namespace.
pub(crate) fn with_netlink<T, F, Fut>(f: F) -> Result<T, LinkError>
where
    F: FnOnce(Handle) -> Fut,
    Fut: Future<Output = Result<T, LinkError>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(LinkError::Socket)?;
    rt.block_on(async {
        let (conn, handle, _) = rtnetlink::new_connection().map_err(LinkError::Socket)?;
        let conn = tokio::spawn(conn);
        let out = f(handle).await;
        conn.abort();
        out
    })
}

/// Opens a namespace file, telling a missing namespace apart.
pub(crate) fn open_netns(netns: &Path) -> Result<File, LinkError> {
    File::open(netns).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => LinkError::NetnsGone(netns.to_path_buf()),
        _ => LinkError::Netns {
            path: netns.to_path_buf(),
            reason: e.to_string(),
        },
    })
}

/// Runs `f` with a netlink handle of the namespace at `netns`, on a thread that entered it.
pub(crate) fn in_netns<T, F, Fut>(netns: &Path, f: F) -> Result<T, LinkError>
where
    T: Send,
    F: FnOnce(Handle) -> Fut + Send,
    Fut: Future<Output = Result<T, LinkError>>,
{
    let file = open_netns(netns)?;
    std::thread::scope(|s| {
        let worker = s.spawn(move || {
            nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).map_err(|e| match e {
                // Not a namespace (any more): a bind mount whose namespace was torn down.
                Errno::EINVAL => LinkError::NetnsGone(netns.to_path_buf()),
                e => LinkError::Netns {
                    path: netns.to_path_buf(),
                    reason: format!("setns: {e}"),
                },
            })?;
            with_netlink(f)
        });
        match worker.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

pub(crate) fn is_errno(e: &rtnetlink::Error, errno: Errno) -> bool {
    matches!(e, rtnetlink::Error::NetlinkError(m) if m.raw_code().abs() == errno as i32)
}

pub(crate) fn nl(what: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> LinkError {
    let what = what.into();
    move |source| LinkError::Netlink { what, source }
}

pub(crate) async fn find_link(
    handle: &Handle,
    name: &str,
) -> Result<Option<LinkMessage>, LinkError> {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(link) => Ok(link),
        Err(e) if is_errno(&e, Errno::ENODEV) => Ok(None),
        Err(e) => Err(nl(format!("looking up {name}"))(e)),
    }
}

pub(crate) fn link_mac(link: &LinkMessage) -> Vec<u8> {
    link.attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Address(mac) => Some(mac.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

pub(crate) fn link_mtu(link: &LinkMessage) -> Option<u32> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::Mtu(m) => Some(*m),
        _ => None,
    })
}

fn link_is_veth(link: &LinkMessage) -> bool {
    link.attributes.iter().any(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos
            .iter()
            .any(|i| matches!(i, LinkInfo::Kind(InfoKind::Veth))),
        _ => false,
    })
}

pub(crate) async fn delete_by_name(handle: &Handle, name: &str) -> Result<bool, LinkError> {
    let Some(link) = find_link(handle, name).await? else {
        return Ok(false);
    };
    match handle.link().del(link.header.index).execute().await {
        Ok(()) => Ok(true),
        // Gone between the lookup and the delete (the peer's deletion takes it along).
        Err(e) if is_errno(&e, Errno::ENODEV) => Ok(false),
        Err(e) => Err(nl(format!("deleting {name}"))(e)),
    }
}

/// What the pod's namespace holds under `ifname`.
pub fn pod_link_state(netns: &Path, ifname: &str) -> Result<PodLinkState, LinkError> {
    in_netns(netns, |handle| async move {
        Ok(match find_link(&handle, ifname).await? {
            None => PodLinkState::Absent,
            Some(link) => PodLinkState::Present {
                mac: link_mac(&link),
                veth: link_is_veth(&link),
            },
        })
    })
}

/// Creates the veth pair: host end `spec.host_interface` in the calling thread's namespace,
/// pod end `spec.ifname` directly in `netns`, with the allocation's MAC and MTU. A host-side
/// interface left over under the same name (its peer is not this pod's interface, or the pod
/// end would have been found) is deleted first: control hands each name to one live attachment.
pub fn create_veth(spec: &PodLinkSpec, netns: &Path) -> Result<(), LinkError> {
    let ns = open_netns(netns)?;
    with_netlink(|handle| async move {
        delete_by_name(&handle, &spec.host_interface).await?;
        let peer = LinkUnspec::new_with_name(&spec.ifname)
            .address(spec.mac.to_vec())
            .mtu(spec.mtu)
            .setns_by_fd(ns.as_raw_fd())
            .build();
        let msg = LinkVeth::new(&spec.host_interface, &spec.ifname)
            .mtu(spec.mtu)
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
            .build();
        match handle.link().add(msg).execute().await {
            Ok(()) => Ok(()),
            Err(e) if is_errno(&e, Errno::EEXIST) => Err(LinkError::AlreadyExists {
                ifname: spec.ifname.clone(),
                netns: netns.display().to_string(),
                found: format!(
                    "created concurrently, or {} exists on the node",
                    spec.host_interface
                ),
            }),
            Err(e) => Err(nl(format!(
                "creating veth {} (pod end {} in {})",
                spec.host_interface,
                spec.ifname,
                netns.display()
            ))(e)),
        }
    })
}

/// Configures the host end in the calling thread's namespace: IPv6 off (the forwarder owns the
/// addresses; the kernel must not answer NDP or send router solicitations on it), offloads on,
/// up. Returns its MAC.
pub fn configure_host_end(spec: &PodLinkSpec) -> Result<Vec<u8>, LinkError> {
    let name = &spec.host_interface;
    write_sysctl(&format!("net/ipv6/conf/{name}/disable_ipv6"), "1", true)?;
    offloads_on(name)?;
    with_netlink(|handle| async move {
        let link = find_link(&handle, name)
            .await?
            .ok_or_else(|| LinkError::Missing {
                ifname: name.clone(),
                place: "the node's namespace".into(),
            })?;
        handle
            .link()
            .set(LinkUnspec::new_with_index(link.header.index).up().build())
            .execute()
            .await
            .map_err(nl(format!("setting {name} up")))?;
        Ok(link_mac(&link))
    })
}

/// Configures the pod end inside `netns`: DAD off (addresses usable at once), offloads on,
/// addresses, up, routes via the gateways, and a permanent neighbor entry per gateway.
pub fn configure_pod_end(spec: &PodLinkSpec, netns: &Path) -> Result<(), LinkError> {
    in_netns(netns, |handle| async move {
        let name = &spec.ifname;
        let has_v6 = spec.addresses.iter().any(|(a, _)| a.addr().is_ipv6());
        // Missing only when IPv6 is off in the pod; then an IPv6 address fails below anyway.
        write_sysctl(&format!("net/ipv6/conf/{name}/accept_dad"), "0", !has_v6)?;
        offloads_on(name)?;
        let link = find_link(&handle, name)
            .await?
            .ok_or_else(|| LinkError::Missing {
                ifname: name.clone(),
                place: netns.display().to_string(),
            })?;
        let index = link.header.index;
        for (net, _) in &spec.addresses {
            let mut req = handle
                .address()
                .add(index, net.addr(), net.prefix_len())
                .replace();
            if net.addr().is_ipv6() {
                req.message_mut()
                    .attributes
                    .push(AddressAttribute::Flags(AddressFlags::Nodad));
            }
            req.execute()
                .await
                .map_err(nl(format!("adding {net} to {name}")))?;
        }
        handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .map_err(nl(format!("setting {name} up")))?;
        for gw in spec.gateways() {
            handle
                .neighbours()
                .add(index, gw)
                .link_layer_address(&spec.gateway_mac)
                .state(NeighbourState::Permanent)
                .replace()
                .execute()
                .await
                .map_err(nl(format!(
                    "adding neighbor {gw} lladdr {} on {name}",
                    format_mac(&spec.gateway_mac)
                )))?;
        }
        for (dst, gw) in &spec.routes {
            let what = format!("adding route {dst} via {gw} dev {name}");
            let msg = route_message(*dst, *gw, index)?;
            handle
                .route()
                .add(msg)
                .replace()
                .execute()
                .await
                .map_err(nl(what))?;
        }
        Ok(())
    })
}

pub(crate) fn route_message(dst: IpNet, gw: IpAddr, index: u32) -> Result<RouteMessage, LinkError> {
    let bad = |reason: String| LinkError::BadAllocation {
        field: "routes",
        value: format!("{dst} via {gw}"),
        reason,
    };
    // On-link: the gateway need not lie inside the pod's prefix (a /32 or /128 pod address).
    Ok(RouteMessageBuilder::<IpAddr>::new()
        .destination_prefix(dst.addr(), dst.prefix_len())
        .map_err(|e| bad(e.to_string()))?
        .gateway(gw)
        .map_err(|e| bad(e.to_string()))?
        .output_interface(index)
        .onlink()
        .build())
}

/// Deletes the host end `name` from the calling thread's namespace (and with it the pod end).
/// Returns whether there was one.
pub fn delete_host_end(name: &str) -> Result<bool, LinkError> {
    with_netlink(|handle| async move { delete_by_name(&handle, name).await })
}

/// Deletes `ifname` from `netns` — only if its MAC is `only_mac` when that is given. A missing
/// namespace or interface is not an error. Returns whether an interface was deleted.
pub fn delete_pod_end(
    netns: &Path,
    ifname: &str,
    only_mac: Option<[u8; 6]>,
) -> Result<bool, LinkError> {
    let r = in_netns(netns, |handle| async move {
        match find_link(&handle, ifname).await? {
            Some(link) if only_mac.is_none_or(|m| link_mac(&link) == m) => {
                delete_by_name(&handle, ifname).await
            }
            _ => Ok(false),
        }
    });
    match r {
        Err(LinkError::NetnsGone(_)) => Ok(false),
        r => r,
    }
}

/// Compares the pod end in `netns` and the host end in the calling thread's namespace with
/// `spec` (CHECK).
pub fn verify(spec: &PodLinkSpec, netns: &Path) -> Result<(), LinkError> {
    let mut differences = in_netns(netns, |handle| async move {
        let name = &spec.ifname;
        let mut diffs = Vec::new();
        let Some(link) = find_link(&handle, name).await? else {
            return Err(LinkError::Missing {
                ifname: name.clone(),
                place: netns.display().to_string(),
            });
        };
        let index = link.header.index;
        let mac = link_mac(&link);
        if mac != spec.mac {
            diffs.push(format!(
                "mac: found {}, want {}",
                format_mac(&mac),
                format_mac(&spec.mac)
            ));
        }
        match link_mtu(&link) {
            Some(m) if m == spec.mtu => {}
            m => diffs.push(format!("mtu: found {m:?}, want {}", spec.mtu)),
        }
        if !link.header.flags.contains(LinkFlags::Up) {
            diffs.push("state: found down, want up".into());
        }
        let addrs: Vec<AddressMessage> = handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect()
            .await
            .map_err(nl(format!("listing the addresses of {name}")))?;
        let present: Vec<(IpAddr, u8)> = addrs
            .iter()
            .filter(|a| a.header.index == index)
            .flat_map(|a| {
                a.attributes.iter().filter_map(move |attr| match attr {
                    AddressAttribute::Address(ip) | AddressAttribute::Local(ip) => {
                        Some((*ip, a.header.prefix_len))
                    }
                    _ => None,
                })
            })
            .collect();
        for (net, _) in &spec.addresses {
            if !present.contains(&(net.addr(), net.prefix_len())) {
                diffs.push(format!("address {net}: missing"));
            }
        }
        let mut routes: Vec<RouteMessage> = Vec::new();
        for family in [IpAddr::from([0u8; 4]), IpAddr::from([0u16; 8])] {
            let mut query = RouteMessageBuilder::<IpAddr>::new();
            query.get_mut().header.address_family = match family {
                IpAddr::V4(_) => rtnetlink::packet_route::AddressFamily::Inet,
                IpAddr::V6(_) => rtnetlink::packet_route::AddressFamily::Inet6,
            };
            let mut found: Vec<RouteMessage> = handle
                .route()
                .get(query.build())
                .execute()
                .try_collect()
                .await
                .map_err(nl(format!("listing the routes of {}", netns.display())))?;
            routes.append(&mut found);
        }
        for (dst, gw) in &spec.routes {
            if !routes.iter().any(|r| route_matches(r, *dst, *gw, index)) {
                diffs.push(format!("route {dst} via {gw} dev {name}: missing"));
            }
        }
        Ok(diffs)
    })?;
    let host = &spec.host_interface;
    let host_diff = with_netlink(|handle| async move {
        Ok(match find_link(&handle, host).await? {
            None => Some(format!("host end {host}: missing from the node")),
            Some(l) if !l.header.flags.contains(LinkFlags::Up) => {
                Some(format!("host end {host}: found down, want up"))
            }
            Some(_) => None,
        })
    })?;
    differences.extend(host_diff);
    if differences.is_empty() {
        Ok(())
    } else {
        Err(LinkError::Mismatch {
            ifname: spec.ifname.clone(),
            netns: netns.display().to_string(),
            differences,
        })
    }
}

fn route_matches(r: &RouteMessage, dst: IpNet, gw: IpAddr, index: u32) -> bool {
    if r.header.destination_prefix_length != dst.prefix_len() {
        return false;
    }
    let mut r_dst = None;
    let mut r_gw = None;
    let mut r_oif = None;
    for a in &r.attributes {
        match a {
            RouteAttribute::Destination(d) => r_dst = route_ip(d),
            RouteAttribute::Gateway(g) => r_gw = route_ip(g),
            RouteAttribute::Oif(o) => r_oif = Some(*o),
            _ => {}
        }
    }
    // A default route carries no destination attribute.
    let dst_ok = match r_dst {
        Some(d) => d == dst.addr(),
        None => dst.prefix_len() == 0,
    };
    dst_ok && r_gw == Some(gw) && r_oif == Some(index)
}

pub(crate) fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

/// Writes `/proc/sys/<key>` as seen from the calling thread's namespace. With `missing_ok`, a
/// key that does not exist (IPv6 off) is not an error.
pub(crate) fn write_sysctl(
    key: &str,
    value: &'static str,
    missing_ok: bool,
) -> Result<(), LinkError> {
    let path = Path::new("/proc/sys").join(key);
    match std::fs::write(&path, value) {
        Ok(()) => Ok(()),
        Err(e) if missing_ok && e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(LinkError::Sysctl {
            path,
            value,
            source,
        }),
    }
}

/// Switches checksum and segmentation offloads on on `ifname`, in the calling thread's
/// namespace (a child process starts in its parent thread's namespace).
pub(crate) fn offloads_on(ifname: &str) -> Result<(), LinkError> {
    let out = Command::new("ethtool")
        .arg("-K")
        .arg(ifname)
        .args(OFFLOADS)
        .output()
        .map_err(|e| LinkError::Ethtool {
            ifname: ifname.to_string(),
            detail: if e.kind() == io::ErrorKind::NotFound {
                "ethtool is not installed; install it (Debian: apt-get install ethtool)".into()
            } else {
                e.to_string()
            },
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(LinkError::Ethtool {
            ifname: ifname.to_string(),
            detail: format!(
                "{} ({})",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{IpConfig, RouteConfig};

    fn alloc() -> Allocation {
        Allocation {
            network: "backend".into(),
            host_interface: "lace0a1b".into(),
            mac: "02:00:0a:28:03:07".into(),
            mtu: 1450,
            ips: vec![
                IpConfig {
                    address: "10.40.3.7/24".into(),
                    gateway: "10.40.3.1".into(),
                },
                IpConfig {
                    address: "fd00:40:3::7/64".into(),
                    gateway: "fd00:40:3::1".into(),
                },
            ],
            routes: vec![
                RouteConfig {
                    dst: "0.0.0.0/0".into(),
                    gw: "10.40.3.1".into(),
                },
                RouteConfig {
                    dst: "10.96.0.0/12".into(),
                    gw: "10.40.3.1".into(),
                },
            ],
            gateway_mac: "02:00:00:00:00:01".into(),
            fresh: true,
        }
    }

    #[test]
    fn an_allocation_parses_into_defaults_routes_and_gateways() {
        let s = PodLinkSpec::from_allocation(&alloc(), "eth0").unwrap();
        assert_eq!(s.mac, [2, 0, 0x0a, 0x28, 3, 7]);
        assert_eq!(s.mtu, 1450);
        let routes: Vec<String> = s.routes.iter().map(|(d, g)| format!("{d} {g}")).collect();
        assert_eq!(
            routes,
            [
                "0.0.0.0/0 10.40.3.1",
                "::/0 fd00:40:3::1",
                "10.96.0.0/12 10.40.3.1"
            ]
        );
        assert_eq!(s.gateways().len(), 2);
    }

    #[test]
    fn a_bad_allocation_names_the_field() {
        for (edit, field) in [
            (
                Box::new(|a: &mut Allocation| a.mac = "02:00".into())
                    as Box<dyn Fn(&mut Allocation)>,
                "mac",
            ),
            (
                Box::new(|a: &mut Allocation| a.gateway_mac = "zz:00:00:00:00:01".into()),
                "gatewayMac",
            ),
            (
                Box::new(|a: &mut Allocation| a.host_interface = "a-name-far-too-long".into()),
                "hostInterface",
            ),
            (
                Box::new(|a: &mut Allocation| a.ips[0].address = "10.40.3.7/33".into()),
                "ips[].address",
            ),
            (
                Box::new(|a: &mut Allocation| a.ips[1].gateway = "10.40.3.1".into()),
                "ips[].gateway",
            ),
            (
                Box::new(|a: &mut Allocation| a.routes[1].gw = "fd00::1".into()),
                "routes[].gw",
            ),
            (Box::new(|a: &mut Allocation| a.mtu = 100), "mtu"),
            (Box::new(|a: &mut Allocation| a.ips.clear()), "ips"),
        ] {
            let mut a = alloc();
            edit(&mut a);
            match PodLinkSpec::from_allocation(&a, "eth0") {
                Err(LinkError::BadAllocation { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn macs_round_trip() {
        assert_eq!(
            format_mac(&parse_mac("02:AB:cd:00:00:ff").unwrap()),
            "02:ab:cd:00:00:ff"
        );
        assert!(parse_mac("02:ab:cd:00:00:ff:01").is_none());
        assert!(parse_mac("2:ab:cd:00:00:ff").is_none());
    }
}
