//! ARP for IPv4 over Ethernet (RFC 826; operation codes RFC 5494). The same packet layout
//! carries RARP (RFC 903) under another EtherType, with operations 3 and 4: [`super::rarp`].
//!
//! The view reads the Ethernet/IPv4 layout (hardware length 6, protocol length 4: 28 bytes);
//! [`Repr::parse`] refuses any other hardware or protocol type. Trailing bytes (Ethernet
//! padding) are ignored.

use super::ethernet::{Address as EthernetAddress, EtherType};
use super::field::Field;
use super::{read_ipv4, read_u16, write_u16, Error, Ipv4Addr, Result};

wire_enum! {
    /// ARP hardware type (IANA "Hardware Types").
    pub enum Hardware(u16) {
        /// Ethernet (10Mb), used for every IEEE 802 MAC.
        Ethernet = 1,
    }
}

wire_enum! {
    /// ARP operation (RFC 826, RFC 5494).
    pub enum Operation(u16) {
        /// Who has the target protocol address?
        Request = 1,
        /// The sender has the sender protocol address.
        Reply = 2,
        /// RARP (RFC 903): who has the protocol address of the target hardware address?
        RequestReverse = 3,
        /// RARP (RFC 903): the answer to a reverse request.
        ReplyReverse = 4,
    }
}

/// Byte ranges of an Ethernet/IPv4 ARP packet (RFC 826, "Packet format"):
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |        Hardware Type          |        Protocol Type          |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  HW Addr Len  | Proto Addr Len|          Operation            |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                 Sender Hardware Address (6)                   |
/// +                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                               | Sender Protocol Address (4)   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
/// |                               |                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
/// |                 Target Hardware Address (6)                   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                 Target Protocol Address (4)                   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
mod field {
    use super::Field;

    pub(super) const HTYPE: usize = 0;
    pub(super) const PTYPE: usize = 2;
    pub(super) const HLEN: usize = 4;
    pub(super) const PLEN: usize = 5;
    pub(super) const OPER: usize = 6;
    pub(super) const SHA: Field = 8..14;
    pub(super) const SPA: Field = 14..18;
    pub(super) const THA: Field = 18..24;
    pub(super) const TPA: Field = 24..28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = field::TPA.end;

/// A read/write view of an ARP packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<B: AsRef<[u8]>> {
    buffer: B,
}

impl<B: AsRef<[u8]>> Packet<B> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: B) -> Packet<B> {
        Packet { buffer }
    }

    /// Wraps a buffer and checks that every getter can read it ([`Packet::check_len`]).
    pub fn new_checked(buffer: B) -> Result<Packet<B>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the 28 bytes of the Ethernet/IPv4 layout.
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < PACKET_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> B {
        self.buffer
    }

    /// Hardware type.
    #[inline]
    pub fn hardware_type(&self) -> Hardware {
        Hardware::from(read_u16(self.buffer.as_ref(), field::HTYPE))
    }

    /// Protocol type (an EtherType).
    #[inline]
    pub fn protocol_type(&self) -> EtherType {
        EtherType::from(read_u16(self.buffer.as_ref(), field::PTYPE))
    }

    /// Hardware address length.
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length.
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Operation.
    #[inline]
    pub fn operation(&self) -> Operation {
        Operation::from(read_u16(self.buffer.as_ref(), field::OPER))
    }

    /// Sender hardware address.
    #[inline]
    pub fn sender_hardware_addr(&self) -> EthernetAddress {
        let mut octets = [0u8; 6];
        octets.copy_from_slice(&self.buffer.as_ref()[field::SHA]);
        EthernetAddress(octets)
    }

    /// Sender protocol address.
    #[inline]
    pub fn sender_protocol_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::SPA.start)
    }

    /// Target hardware address.
    #[inline]
    pub fn target_hardware_addr(&self) -> EthernetAddress {
        let mut octets = [0u8; 6];
        octets.copy_from_slice(&self.buffer.as_ref()[field::THA]);
        EthernetAddress(octets)
    }

    /// Target protocol address.
    #[inline]
    pub fn target_protocol_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::TPA.start)
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Packet<B> {
    /// Sets the hardware type.
    #[inline]
    pub fn set_hardware_type(&mut self, value: Hardware) {
        write_u16(self.buffer.as_mut(), field::HTYPE, value.into());
    }

    /// Sets the protocol type.
    #[inline]
    pub fn set_protocol_type(&mut self, value: EtherType) {
        write_u16(self.buffer.as_mut(), field::PTYPE, value.into());
    }

    /// Sets the hardware address length.
    #[inline]
    pub fn set_hardware_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::HLEN] = value;
    }

    /// Sets the protocol address length.
    #[inline]
    pub fn set_protocol_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::PLEN] = value;
    }

    /// Sets the operation.
    #[inline]
    pub fn set_operation(&mut self, value: Operation) {
        write_u16(self.buffer.as_mut(), field::OPER, value.into());
    }

    /// Sets the sender hardware address.
    #[inline]
    pub fn set_sender_hardware_addr(&mut self, value: EthernetAddress) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&value.0);
    }

    /// Sets the sender protocol address.
    #[inline]
    pub fn set_sender_protocol_addr(&mut self, value: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&value.octets());
    }

    /// Sets the target hardware address.
    #[inline]
    pub fn set_target_hardware_addr(&mut self, value: EthernetAddress) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&value.0);
    }

    /// Sets the target protocol address.
    #[inline]
    pub fn set_target_protocol_addr(&mut self, value: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&value.octets());
    }
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Packet<B> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A validated Ethernet/IPv4 ARP request or reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Request or reply (never `Unknown`).
    pub operation: Operation,
    /// Sender hardware address.
    pub sender_hardware_addr: EthernetAddress,
    /// Sender protocol address.
    pub sender_protocol_addr: Ipv4Addr,
    /// Target hardware address (zero, or ignored, in a request).
    pub target_hardware_addr: EthernetAddress,
    /// Target protocol address.
    pub target_protocol_addr: Ipv4Addr,
}

impl Repr {
    /// Parses and validates an ARP packet.
    ///
    /// # Errors
    /// [`Error::Truncated`] for fewer than 28 bytes; [`Error::Unsupported`] unless it is an
    /// Ethernet/IPv4 (1, 0x0800, 6, 4) request or reply.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &Packet<&B>) -> Result<Repr> {
        packet.check_len()?;
        let operation = packet.operation();
        if packet.hardware_type() != Hardware::Ethernet
            || packet.protocol_type() != EtherType::Ipv4
            || packet.hardware_len() != 6
            || packet.protocol_len() != 4
            || !matches!(operation, Operation::Request | Operation::Reply)
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

    /// Length of the packet this emits: 28.
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes the packet.
    ///
    /// # Panics
    /// If the buffer is shorter than 28 bytes.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<B>) {
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

    /// ARP request, A asks for R's address: frame 4 of `forwarder/testdata/wire/samples.pcap`
    /// (`ping -c 1 192.0.2.254` in `capture.sh`), from byte 14 (after the Ethernet header).
    static REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0xc0,
        0x00, 0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x02, 0xfe,
    ];

    /// ARP reply from R: frame 5 of the same capture, from byte 14.
    static REPLY: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x02, 0xc0,
        0x00, 0x02, 0xfe, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0xc0, 0x00, 0x02, 0x01,
    ];

    /// ARP request as arping sends it, 16 bytes of padding after the 28: frame 2 of the same
    /// capture (`arping -c 1 -I a0 192.0.2.254`), from byte 14.
    static PADDED_REQUEST: [u8; 44] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0xc0,
        0x00, 0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x02, 0xfe, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    const A_MAC: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x0a, 0x01]);
    const R_MAC: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x0a, 0x02]);
    const A_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const R_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 254);

    fn request_repr() -> Repr {
        Repr {
            operation: Operation::Request,
            sender_hardware_addr: A_MAC,
            sender_protocol_addr: A_IP,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: R_IP,
        }
    }

    fn reply_repr() -> Repr {
        Repr {
            operation: Operation::Reply,
            sender_hardware_addr: R_MAC,
            sender_protocol_addr: R_IP,
            target_hardware_addr: A_MAC,
            target_protocol_addr: A_IP,
        }
    }

    #[test]
    fn deconstruct() {
        let packet = Packet::new_checked(&REPLY[..]).unwrap();
        assert_eq!(packet.hardware_type(), Hardware::Ethernet);
        assert_eq!(packet.protocol_type(), EtherType::Ipv4);
        assert_eq!(packet.hardware_len(), 6);
        assert_eq!(packet.protocol_len(), 4);
        assert_eq!(packet.operation(), Operation::Reply);
        assert_eq!(packet.sender_hardware_addr(), R_MAC);
        assert_eq!(packet.sender_protocol_addr(), R_IP);
        assert_eq!(packet.target_hardware_addr(), A_MAC);
        assert_eq!(packet.target_protocol_addr(), A_IP);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 28];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_hardware_type(Hardware::Ethernet);
        packet.set_protocol_type(EtherType::Ipv4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(Operation::Request);
        packet.set_sender_hardware_addr(A_MAC);
        packet.set_sender_protocol_addr(A_IP);
        packet.set_target_hardware_addr(EthernetAddress([0; 6]));
        packet.set_target_protocol_addr(R_IP);
        assert_eq!(bytes, REQUEST);
    }

    #[test]
    fn parse() {
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&REQUEST[..])),
            Ok(request_repr())
        );
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&REPLY[..])),
            Ok(reply_repr())
        );
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&PADDED_REQUEST[..])),
            Ok(request_repr())
        );
    }

    #[test]
    fn emit() {
        for (repr, expected) in [(request_repr(), &REQUEST), (reply_repr(), &REPLY)] {
            assert_eq!(repr.buffer_len(), 28);
            let mut bytes = [0xa5u8; 28];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            assert_eq!(&bytes, expected);
        }
    }

    #[test]
    fn truncated_at_every_length() {
        for (n, prefix) in prefixes(&REQUEST) {
            assert_eq!(
                Packet::new_checked(prefix).err(),
                Some(Error::Truncated),
                "length {n}"
            );
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(prefix)),
                Err(Error::Truncated)
            );
        }
    }

    #[test]
    fn unsupported_fields() {
        let cases: [(usize, u8); 6] = [
            (1, 6),    // hardware type 6 (IEEE 802)
            (2, 0x86), // protocol type 0x8600
            (4, 8),    // hardware length 8
            (5, 16),   // protocol length 16
            (7, 3),    // operation 3 (RARP request)
            (7, 0),    // operation 0
        ];
        for (at, value) in cases {
            let mut bytes = REQUEST;
            bytes[at] = value;
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            assert_eq!(
                Repr::parse(&packet),
                Err(Error::Unsupported),
                "byte {at} = {value}"
            );
        }
        assert_eq!(Operation::from(3), Operation::RequestReverse);
        assert_eq!(Operation::from(5), Operation::Unknown(5));
    }
}
