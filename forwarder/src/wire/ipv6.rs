//! IPv6 fixed headers (RFC 8200 §3; flow label RFC 6437; traffic class RFC 2474/3168).
//!
//! The view covers the 40-byte fixed header and bounds the payload by Payload Length, so
//! Ethernet padding is ignored. Extension headers are payload here: the Next Header field
//! names the first one ([`srh`](super::srh) reads the Segment Routing Header). Jumbograms
//! (RFC 2675, Payload Length 0 with a Hop-by-Hop option) are not supported: Payload Length 0
//! means an empty payload.

use super::field::Field;
use super::ip::Protocol;
use super::{read_ipv6, read_u16, read_u32, write_u16, write_u32, Error, Ipv6Addr, Result};

/// Byte ranges of the IPv6 fixed header (RFC 8200 §3):
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |Version| Traffic Class |           Flow Label                  |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |         Payload Length        |  Next Header  |   Hop Limit   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// +                                                               +
/// |                         Source Address                        |
/// +                                                               +
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// +                                                               +
/// |                      Destination Address                      |
/// +                                                               +
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
mod field {
    use super::Field;

    pub(super) const VER_TC_FLOW: usize = 0;
    pub(super) const LENGTH: usize = 4;
    pub(super) const NXT_HDR: usize = 6;
    pub(super) const HOP_LIMIT: usize = 7;
    pub(super) const SRC_ADDR: Field = 8..24;
    pub(super) const DST_ADDR: Field = 24..40;
}

/// Length of the fixed header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// Mask of the 20-bit flow label.
pub const FLOW_LABEL_MASK: u32 = 0x000f_ffff;

/// A read/write view of an IPv6 packet.
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

    /// Checks the version and that the fixed header and Payload Length lie within the buffer.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is shorter than 40 bytes plus Payload Length;
    /// [`Error::BadVersion`] if the version is not 6.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::BadVersion);
        }
        if HEADER_LEN + usize::from(self.payload_len()) > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> B {
        self.buffer
    }

    /// Version (6).
    #[inline(always)]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }

    /// Traffic Class (DSCP << 2 | ECN).
    #[inline(always)]
    pub fn traffic_class(&self) -> u8 {
        (read_u32(self.buffer.as_ref(), field::VER_TC_FLOW) >> 20) as u8
    }

    /// Flow Label, 20 bits (0: unlabelled).
    #[inline(always)]
    pub fn flow_label(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::VER_TC_FLOW) & FLOW_LABEL_MASK
    }

    /// Payload Length: bytes after the fixed header, extension headers included.
    #[inline(always)]
    pub fn payload_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Next Header: the first extension header or the upper-layer protocol.
    #[inline(always)]
    pub fn next_header(&self) -> Protocol {
        Protocol::from(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// Hop Limit.
    #[inline(always)]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline(always)]
    pub fn src_addr(&self) -> Ipv6Addr {
        read_ipv6(self.buffer.as_ref(), field::SRC_ADDR.start)
    }

    /// Destination address.
    #[inline(always)]
    pub fn dst_addr(&self) -> Ipv6Addr {
        read_ipv6(self.buffer.as_ref(), field::DST_ADDR.start)
    }

    /// The payload: Payload Length bytes after the fixed header.
    #[inline(always)]
    pub fn payload(&self) -> &[u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &self.buffer.as_ref()[HEADER_LEN..end]
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Packet<B> {
    #[inline(always)]
    fn update_first_word(&mut self, mask: u32, bits: u32) {
        let word = read_u32(self.buffer.as_ref(), field::VER_TC_FLOW);
        write_u32(
            self.buffer.as_mut(),
            field::VER_TC_FLOW,
            (word & !mask) | (bits & mask),
        );
    }

    /// Sets the version.
    #[inline(always)]
    pub fn set_version(&mut self, value: u8) {
        self.update_first_word(0xf000_0000, u32::from(value) << 28);
    }

    /// Sets the Traffic Class.
    #[inline(always)]
    pub fn set_traffic_class(&mut self, value: u8) {
        self.update_first_word(0x0ff0_0000, u32::from(value) << 20);
    }

    /// Sets the Flow Label (the low 20 bits of `value`).
    #[inline(always)]
    pub fn set_flow_label(&mut self, value: u32) {
        self.update_first_word(FLOW_LABEL_MASK, value);
    }

    /// Sets version 6, the Traffic Class and the Flow Label (the low 20 bits of `label`) in one
    /// store: the whole first word, as an encapsulation writes it.
    #[inline(always)]
    pub fn set_version_class_label(&mut self, class: u8, label: u32) {
        let word = (6u32 << 28) | (u32::from(class) << 20) | (label & FLOW_LABEL_MASK);
        write_u32(self.buffer.as_mut(), field::VER_TC_FLOW, word);
    }

    /// Sets the Payload Length.
    #[inline(always)]
    pub fn set_payload_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, value);
    }

    /// Sets the Next Header.
    #[inline(always)]
    pub fn set_next_header(&mut self, value: Protocol) {
        self.buffer.as_mut()[field::NXT_HDR] = value.into();
    }

    /// Sets the Hop Limit.
    #[inline(always)]
    pub fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = value;
    }

    /// Sets the source address.
    #[inline(always)]
    pub fn set_src_addr(&mut self, value: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&value.octets());
    }

    /// Sets the destination address.
    #[inline(always)]
    pub fn set_dst_addr(&mut self, value: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&value.octets());
    }

    /// Forwards the packet one hop: decrements the Hop Limit and returns the new value.
    ///
    /// Returns `None`, leaving the packet as it is, when the Hop Limit is 0 or 1: the packet
    /// must be discarded with ICMPv6 Time Exceeded (RFC 8200 §3, RFC 4443 §3.3).
    #[inline(always)]
    pub fn decrement_hop_limit(&mut self) -> Option<u8> {
        let hop_limit = self.hop_limit();
        if hop_limit <= 1 {
            return None;
        }
        self.set_hop_limit(hop_limit - 1);
        Some(hop_limit - 1)
    }

    /// The payload, writable.
    #[inline(always)]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Packet<B> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A validated IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next Header.
    pub next_header: Protocol,
    /// Payload Length in bytes (at most 65535).
    pub payload_len: usize,
    /// Hop Limit.
    pub hop_limit: u8,
    /// Traffic Class.
    pub traffic_class: u8,
    /// Flow Label, 20 bits.
    pub flow_label: u32,
}

impl Repr {
    /// Parses and validates a fixed header.
    ///
    /// # Errors
    /// Those of [`Packet::check_len`].
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &Packet<&B>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// Length of the header this emits: 40.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the fixed header; the payload is left as it is.
    ///
    /// # Panics
    /// If the buffer is shorter than 40 bytes.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<B>) {
        packet.set_version_class_label(self.traffic_class, self.flow_label);
        packet.set_payload_len(self.payload_len as u16);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::test_util::prefixes;

    /// ICMPv6 echo request A → R, flow label 0xdfe05: frame 24 of
    /// `forwarder/testdata/wire/samples.pcap` (`ping -6 -c 1 -W 1 2001:db8:a::fe` in
    /// `capture.sh`), from byte 14.
    pub(crate) static ECHO_REQUEST: [u8; 104] = [
        0x60, 0x0d, 0xfe, 0x05, 0x00, 0x40, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x80, 0x00, 0x34, 0x5d, 0x36,
        0xfc, 0x00, 0x01, 0x8a, 0x48, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x59, 0x1f, 0x09, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a,
        0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29,
        0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
    ];

    const A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 1);
    const R: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0xfe);

    fn echo_repr() -> Repr {
        Repr {
            src_addr: A,
            dst_addr: R,
            next_header: Protocol::Icmpv6,
            payload_len: 64,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0xdfe05,
        }
    }

    #[test]
    fn deconstruct() {
        let packet = Packet::new_checked(&ECHO_REQUEST[..]).unwrap();
        assert_eq!(packet.version(), 6);
        assert_eq!(packet.traffic_class(), 0);
        assert_eq!(packet.flow_label(), 0xdfe05);
        assert_eq!(packet.payload_len(), 64);
        assert_eq!(packet.next_header(), Protocol::Icmpv6);
        assert_eq!(packet.hop_limit(), 64);
        assert_eq!(packet.src_addr(), A);
        assert_eq!(packet.dst_addr(), R);
        assert_eq!(packet.payload(), &ECHO_REQUEST[40..]);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 104];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_version(6);
        packet.set_traffic_class(0);
        packet.set_flow_label(0xdfe05);
        packet.set_payload_len(64);
        packet.set_next_header(Protocol::Icmpv6);
        packet.set_hop_limit(64);
        packet.set_src_addr(A);
        packet.set_dst_addr(R);
        packet.payload_mut().copy_from_slice(&ECHO_REQUEST[40..]);
        assert_eq!(bytes, ECHO_REQUEST);
    }

    #[test]
    fn traffic_class_and_flow_label_do_not_overlap() {
        let mut bytes = ECHO_REQUEST;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_traffic_class(0xb9);
        assert_eq!((packet.version(), packet.traffic_class()), (6, 0xb9));
        assert_eq!(packet.flow_label(), 0xdfe05);
        packet.set_flow_label(0xfff_ffff);
        assert_eq!(packet.flow_label(), 0xf_ffff);
        assert_eq!(packet.traffic_class(), 0xb9);
        // The whole first word at once, whatever it held.
        bytes[0] = 0x4f;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_version_class_label(0x2e, 0x1234_5678);
        assert_eq!(
            (
                packet.version(),
                packet.traffic_class(),
                packet.flow_label()
            ),
            (6, 0x2e, 0x4_5678)
        );
        assert_eq!(&bytes[..4], &[0x62, 0xe4, 0x56, 0x78]);
    }

    #[test]
    fn parse() {
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&ECHO_REQUEST[..])),
            Ok(echo_repr())
        );
    }

    #[test]
    fn emit() {
        let repr = echo_repr();
        assert_eq!(repr.buffer_len(), 40);
        let mut bytes = [0xa5u8; 104];
        bytes[40..].copy_from_slice(&ECHO_REQUEST[40..]);
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, ECHO_REQUEST);
    }

    #[test]
    fn ethernet_padding_is_not_payload() {
        let mut bytes = [0u8; 110];
        bytes[..104].copy_from_slice(&ECHO_REQUEST);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.payload(), &ECHO_REQUEST[40..]);
    }

    #[test]
    fn truncated_at_every_length() {
        for (n, prefix) in prefixes(&ECHO_REQUEST) {
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
    fn bad_fields() {
        for version in [0u8, 4, 7, 15] {
            let mut bytes = ECHO_REQUEST;
            bytes[0] = (version << 4) | (bytes[0] & 0x0f);
            assert_eq!(Packet::new_checked(&bytes[..]), Err(Error::BadVersion));
        }
        let mut bytes = ECHO_REQUEST;
        bytes[4..6].copy_from_slice(&65u16.to_be_bytes());
        assert_eq!(Packet::new_checked(&bytes[..]), Err(Error::Truncated));
        bytes[4..6].copy_from_slice(&0u16.to_be_bytes());
        assert_eq!(
            Packet::new_checked(&bytes[..]).unwrap().payload(),
            &[] as &[u8]
        );
    }

    #[test]
    fn decrement_hop_limit() {
        let mut bytes = ECHO_REQUEST;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        assert_eq!(packet.decrement_hop_limit(), Some(63));
        assert_eq!(packet.hop_limit(), 63);
        for hop_limit in [0, 1] {
            packet.set_hop_limit(hop_limit);
            assert_eq!(packet.decrement_hop_limit(), None);
            assert_eq!(packet.hop_limit(), hop_limit);
        }
    }
}
