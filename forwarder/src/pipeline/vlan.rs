//! 802.1Q VLANs on the uplink (ADR 0054): an external network carried on a VLAN arrives
//! tagged and leaves tagged. uplink-input pops the tag of a frame on a VLAN the node has an
//! address on ([`pop`]) and keeps the VLAN in the packet's [`Meta`](super::Meta): the frame
//! goes on untagged, as any, and is classified among the external networks of that VLAN. An
//! answer goes back on the VLAN it came from, and a route out of the uplink names the VLAN its
//! gateway is on; `tx` pushes the tag on what leaves ([`send`]).
//!
//! One tag only: a frame with a second tag (QinQ) or an S-tag, a priority tag (VLAN 0) or VLAN
//! 4095 is an `unknown-vlan` drop, as is a VLAN the node has no address on.

use lace_shared::status::DropReason;
use lace_shared::types::PortId;

use super::{Io, PacketBuf, UplinkHosts};
use crate::offload::OffloadError;
use crate::wire::ethernet::{self, EtherType, VlanTag, TAG_LEN};

/// Where the EtherType (or the tag's TPID) is.
const ETHERTYPE: usize = 12;

/// Takes the 802.1Q tag off a frame from the uplink whose EtherType says it has one: the
/// VLAN, the frame now untagged. `unknown-vlan` for a VLAN the node has no address on
/// (`hosts`), a priority tag, VLAN 4095, or a second tag; `malformed` for a frame too short to
/// hold the tag.
pub(super) fn pop<B: PacketBuf>(pkt: &mut B, hosts: &UplinkHosts) -> Result<u16, DropReason> {
    let d = pkt.data_mut();
    let Some(h) = d.first_chunk_mut::<{ ETHERTYPE + 2 * TAG_LEN }>() else {
        return Err(DropReason::Malformed);
    };
    let vid = VlanTag::from_tci(u16::from_be_bytes([h[14], h[15]])).vid;
    let inner = EtherType::from(u16::from_be_bytes([h[16], h[17]]));
    if !hosts.on_vlan(vid) || matches!(inner, EtherType::Vlan | EtherType::QinQ) {
        return Err(DropReason::UnknownVlan);
    }
    h.copy_within(..ETHERTYPE, TAG_LEN);
    if !pkt.adj(TAG_LEN) {
        return Err(DropReason::Malformed);
    }
    Ok(vid)
}

/// Puts an 802.1Q tag for `vlan` (priority 0) on an untagged frame; false when the buffer has
/// no headroom for it.
pub(super) fn push<B: PacketBuf>(pkt: &mut B, vlan: u16) -> bool {
    if pkt.len() < ETHERTYPE || !pkt.prepend(TAG_LEN) {
        return false;
    }
    let tag = VlanTag {
        vid: vlan,
        ..VlanTag::default()
    };
    ethernet::insert_tag(pkt.data_mut(), tag.to_bytes())
}

/// Sends `pkt` out of the uplink on VLAN `vlan`, tagged. A large segment is cut into frames
/// first, each tagged: the ports cut untagged frames only. The reason when it was not sent
/// (or not wholly: the pieces after a failure are not).
pub(super) fn send<B: PacketBuf, I: Io<B>>(
    io: &mut I,
    mut pkt: B,
    vlan: u16,
) -> Result<(), DropReason> {
    let Some(gso) = pkt.gso() else {
        if !push(&mut pkt, vlan) {
            return Err(DropReason::NoHeadroom);
        }
        io.send(PortId::UPLINK, pkt);
        return Ok(());
    };
    let mut pieces = Vec::new();
    gso.cut(pkt.data(), || io.alloc(), |p| pieces.push(p))
        .map_err(|e| match e {
            OffloadError::NoBuffer => DropReason::NoBuffer,
            OffloadError::Malformed | OffloadError::Unsupported => DropReason::Malformed,
        })?;
    for mut p in pieces {
        if !push(&mut p, vlan) {
            return Err(DropReason::NoHeadroom);
        }
        io.send(PortId::UPLINK, p);
    }
    Ok(())
}
