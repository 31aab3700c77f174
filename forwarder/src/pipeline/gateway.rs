//! Gateways on external networks (ADR 0054): a static route's next hop out of the uplink,
//! resolved like any host on the subnet would — an ARP request for an IPv4 gateway, a
//! neighbor solicitation for an IPv6 one, from the node's own address there — into the neighbor
//! cache the uplink's ARP replies and advertisements teach. While a gateway does not resolve,
//! its route is down: packets are dropped (`gateway-unresolved`) and it is asked again at most
//! every [`super::neigh::SOLICIT_INTERVAL_NS`].

use std::net::{IpAddr, Ipv4Addr};

use lace_shared::status::DropReason;

use super::input::L3;
use super::neigh::{Neighbor, UnderlayNeighbors};
use super::srv6::build_solicitation;
use super::{vlan, Config, Io, PacketBuf};
use crate::wire::arp;
use crate::wire::ethernet::{self, EtherType};
use crate::wire::EthernetAddress;

/// Gateway `gateway` has no MAC yet: ask for it (rate-limited) from the node's address on its
/// subnet. The packet that wanted it is dropped for the reason returned.
pub(super) fn unresolved<B: PacketBuf, I: Io<B>>(
    cfg: &Config,
    neigh: &UnderlayNeighbors,
    gateway: Neighbor,
    io: &mut I,
) -> DropReason {
    if neigh.should_solicit(gateway, io.now_ns()) {
        if let Err(e) = solicit(cfg, gateway, io) {
            return e;
        }
    }
    DropReason::GatewayUnresolved
}

/// Asks the uplink for `who`'s MAC, on its VLAN (tagged when it has one): an ARP request for
/// an IPv4 address (IPv4-mapped), from the node's IPv4 address there
/// ([`super::UplinkHosts::source_for`]); a neighbor solicitation for an IPv6 one, from the
/// node's address on its subnet (an `[[uplink.external]]` address) or else, untagged, its
/// underlay address. Not rate-limited: the caller is ([`UnderlayNeighbors::should_solicit`],
/// [`UnderlayNeighbors::maintain`]).
pub(super) fn solicit<B: PacketBuf, I: Io<B>>(
    cfg: &Config,
    who: Neighbor,
    io: &mut I,
) -> Result<(), DropReason> {
    let hosts = &cfg.uplink_hosts;
    let src = match (who.addr.to_ipv4_mapped(), who.vlan) {
        // No IPv4 address of the node's on the uplink (or the VLAN): nothing to ask from.
        (Some(_), _) => hosts.source_for(who.vlan, who.addr),
        (None, 0) => Some(
            hosts
                .on_subnet(0, who.addr)
                .unwrap_or(IpAddr::V6(cfg.underlay_addr)),
        ),
        (None, v) => hosts.source_for(v, who.addr),
    }
    .ok_or(DropReason::GatewayUnresolved)?;
    let mut b = io.alloc().ok_or(DropReason::NoBuffer)?;
    let built = match (src, who.addr.to_ipv4_mapped()) {
        (IpAddr::V4(src), Some(target)) => build_arp_request(cfg, src, target, &mut b),
        (IpAddr::V6(src), None) => build_solicitation(cfg, src, who.addr, &mut b),
        // `source_for` answers in the address's family.
        _ => false,
    };
    if !built {
        return Err(DropReason::NoBuffer);
    }
    match who.vlan {
        0 => io.send(lace_shared::types::PortId::UPLINK, b),
        v => vlan::send(io, b, v)?,
    }
    Ok(())
}
/// Writes a broadcast ARP request for `target` from `src` and the uplink's MAC into an empty
/// buffer.
fn build_arp_request<B: PacketBuf>(
    cfg: &Config,
    src: Ipv4Addr,
    target: Ipv4Addr,
    b: &mut B,
) -> bool {
    let repr = arp::Repr {
        operation: arp::Operation::Request,
        sender_hardware_addr: EthernetAddress(cfg.uplink_mac.0),
        sender_protocol_addr: src,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: target,
    };
    let len = repr.buffer_len();
    if !b.append(L3 + len) {
        return false;
    }
    let d = b.data_mut();
    ethernet::Repr {
        dst_addr: ethernet::Address::BROADCAST,
        src_addr: EthernetAddress(cfg.uplink_mac.0),
        ethertype: EtherType::Arp,
        vlan: None,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut d[..L3]));
    repr.emit(&mut arp::Packet::new_unchecked(&mut d[L3..]));
    true
}
