//! RARP (RFC 903): the ARP packet layout ([`arp::Packet`], 28 bytes for Ethernet/IPv4) under
//! EtherType 0x8035, with operations 3 ("request reverse") and 4 ("reply reverse").
//!
//! lace never answers RARP; it reads one kind of it. After a live migration QEMU announces the
//! VM on the target host with a broadcast reverse request whose sender and target hardware
//! addresses are the VM's MAC and whose protocol addresses are 0.0.0.0 (the VM's address is
//! not known to QEMU) — a learning l2 network learns the MAC's new location from it
//! (ADR 0019). [`Repr::parse`] accepts any Ethernet/IPv4 reverse request or reply; what a
//! request announces is [`Repr::announced`].

use super::arp::{self, Hardware, Operation};
use super::ethernet::{Address as EthernetAddress, EtherType};
use super::{Error, Ipv4Addr, Result};

/// Length of an Ethernet/IPv4 RARP packet (the ARP layout).
pub const PACKET_LEN: usize = arp::PACKET_LEN;

/// A validated Ethernet/IPv4 RARP request or reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// [`Operation::RequestReverse`] or [`Operation::ReplyReverse`].
    pub operation: Operation,
    /// Sender hardware address.
    pub sender_hardware_addr: EthernetAddress,
    /// Sender protocol address (0.0.0.0 in a request that does not know it).
    pub sender_protocol_addr: Ipv4Addr,
    /// Target hardware address: whose protocol address is asked for.
    pub target_hardware_addr: EthernetAddress,
    /// Target protocol address (the answer, in a reply).
    pub target_protocol_addr: Ipv4Addr,
}

impl Repr {
    /// Parses and validates a RARP packet (the payload of a 0x8035 frame).
    ///
    /// # Errors
    /// [`Error::Truncated`] for fewer than 28 bytes; [`Error::Unsupported`] unless it is an
    /// Ethernet/IPv4 (1, 0x0800, 6, 4) reverse request or reply.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &arp::Packet<&B>) -> Result<Repr> {
        packet.check_len()?;
        let operation = packet.operation();
        if packet.hardware_type() != Hardware::Ethernet
            || packet.protocol_type() != EtherType::Ipv4
            || packet.hardware_len() != 6
            || packet.protocol_len() != 4
            || !matches!(
                operation,
                Operation::RequestReverse | Operation::ReplyReverse
            )
        {
            return Err(Error::Unsupported);
        }
        Ok(Repr {
            operation,
            sender_hardware_addr: packet.sender_hardware_addr(),
            sender_protocol_addr: packet.sender_protocol_addr(),
            target_hardware_addr: packet.target_hardware_addr(),
            target_protocol_addr: packet.target_protocol_addr(),
        })
    }

    /// The MAC a host announces with this packet: a reverse request asking for its own address
    /// (sender hardware address = target hardware address, as QEMU's self-announcement is),
    /// else `None` (a reply, or a request on someone else's behalf).
    pub fn announced(&self) -> Option<EthernetAddress> {
        (self.operation == Operation::RequestReverse
            && self.sender_hardware_addr == self.target_hardware_addr)
            .then_some(self.sender_hardware_addr)
    }

    /// Length of the packet this emits: 28.
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes the packet.
    ///
    /// # Panics
    /// If the buffer is shorter than 28 bytes.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut arp::Packet<B>) {
        packet.set_hardware_type(Hardware::Ethernet);
        packet.set_protocol_type(EtherType::Ipv4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation);
        packet.set_sender_hardware_addr(self.sender_hardware_addr);
        packet.set_sender_protocol_addr(self.sender_protocol_addr);
        packet.set_target_hardware_addr(self.target_hardware_addr);
        packet.set_target_protocol_addr(self.target_protocol_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_util::prefixes;

    /// A VM's self-announcement after a migration as QEMU builds it (`qemu_announce_self`):
    /// a reverse request for MAC 52:54:00:12:34:56, protocol addresses 0.0.0.0; the 28 bytes
    /// after the Ethernet header (which QEMU pads to 60).
    static ANNOUNCE: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x03, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x00,
        0x00, 0x00, 0x00, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x00, 0x00, 0x00, 0x00,
    ];

    const VM: EthernetAddress = EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);

    fn announce() -> Repr {
        Repr {
            operation: Operation::RequestReverse,
            sender_hardware_addr: VM,
            sender_protocol_addr: Ipv4Addr::UNSPECIFIED,
            target_hardware_addr: VM,
            target_protocol_addr: Ipv4Addr::UNSPECIFIED,
        }
    }

    #[test]
    fn deconstruct_and_parse() {
        let packet = arp::Packet::new_checked(&ANNOUNCE[..]).unwrap();
        assert_eq!(packet.operation(), Operation::RequestReverse);
        assert_eq!(packet.sender_hardware_addr(), VM);
        assert_eq!(Repr::parse(&packet), Ok(announce()));
        assert_eq!(announce().announced(), Some(VM));
        // QEMU's padding after the 28 bytes is ignored.
        let mut padded = ANNOUNCE.to_vec();
        padded.extend_from_slice(&[0; 18]);
        let packet = arp::Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(Repr::parse(&packet), Ok(announce()));
    }

    #[test]
    fn construct_and_emit() {
        let mut bytes = [0xa5u8; 28];
        announce().emit(&mut arp::Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, ANNOUNCE);
        assert_eq!(announce().buffer_len(), 28);
    }

    #[test]
    fn only_a_request_for_its_own_mac_announces() {
        let reply = Repr {
            operation: Operation::ReplyReverse,
            ..announce()
        };
        assert_eq!(reply.announced(), None);
        let on_behalf = Repr {
            target_hardware_addr: EthernetAddress([2, 0, 0, 0, 0, 9]),
            ..announce()
        };
        assert_eq!(on_behalf.announced(), None);
    }

    #[test]
    fn truncated_and_unsupported() {
        for (n, prefix) in prefixes(&ANNOUNCE) {
            assert_eq!(
                Repr::parse(&arp::Packet::new_unchecked(prefix)),
                Err(Error::Truncated),
                "length {n}"
            );
        }
        let cases: [(usize, u8); 6] = [
            (1, 6),    // hardware type 6
            (2, 0x86), // protocol type 0x8600
            (4, 8),    // hardware length 8
            (5, 16),   // protocol length 16
            (7, 1),    // an ARP request, not RARP
            (7, 2),    // an ARP reply
        ];
        for (at, value) in cases {
            let mut bytes = ANNOUNCE;
            bytes[at] = value;
            assert_eq!(
                Repr::parse(&arp::Packet::new_unchecked(&bytes[..])),
                Err(Error::Unsupported),
                "byte {at} = {value}"
            );
        }
    }
}
