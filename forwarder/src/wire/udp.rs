//! UDP headers (RFC 768), as much as the forwarder needs: ports (flow hashing, NAT) and the
//! checksum over the IPv4 or IPv6 pseudo-header (RFC 768, RFC 8200 §8.1).
//!
//! The payload is bounded by the UDP Length field. Over IPv4 a zero checksum means "none";
//! over IPv6 it is invalid. A computed checksum of zero is sent as `0xffff`.

use super::checksum;
use super::field::Rest;
use super::ip::Protocol;
use super::{read_u16, write_u16, Error, Ipv4Addr, Ipv6Addr, Result};

/// Byte ranges of the UDP header (RFC 768):
///
/// ```text
///  0      7 8     15 16    23 24    31
/// +--------+--------+--------+--------+
/// |     Source      |   Destination   |
/// |      Port       |      Port       |
/// +--------+--------+--------+--------+
/// |                 |                 |
/// |     Length      |    Checksum     |
/// +--------+--------+--------+--------+
/// |          data octets ...
/// +---------------- ...
/// Length counts the header and the data.
/// ```
mod field {
    use super::Rest;

    pub(super) const SRC_PORT: usize = 0;
    pub(super) const DST_PORT: usize = 2;
    pub(super) const LENGTH: usize = 4;
    pub(super) const CHECKSUM: usize = 6;
    pub(super) const PAYLOAD: Rest = 8..;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of a UDP datagram.
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

    /// Checks that the header and the Length lie within the buffer.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is shorter than 8 bytes or the Length;
    /// [`Error::BadLength`] if the Length is below 8.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let udp_len = usize::from(self.len());
        if udp_len < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if udp_len > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> B {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length: header plus payload.
    #[inline]
    pub fn len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Whether the payload is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The payload, up to the Length.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    fn sum(&self, pseudo: u16) -> u16 {
        let datagram = &self.buffer.as_ref()[..usize::from(self.len())];
        checksum::combine(&[pseudo, checksum::data(datagram)])
    }

    /// Whether the checksum verifies over IPv4 (a zero checksum, "none", does).
    #[inline]
    pub fn verify_checksum_v4(&self, src_addr: &Ipv4Addr, dst_addr: &Ipv4Addr) -> bool {
        self.checksum() == 0
            || self.sum(checksum::pseudo_header_v4(
                src_addr,
                dst_addr,
                Protocol::Udp,
                self.len(),
            )) == 0xffff
    }

    /// Whether the checksum verifies over IPv6 (where zero is invalid).
    #[inline]
    pub fn verify_checksum_v6(&self, src_addr: &Ipv6Addr, dst_addr: &Ipv6Addr) -> bool {
        let pseudo =
            checksum::pseudo_header_v6(src_addr, dst_addr, Protocol::Udp, u32::from(self.len()));
        self.checksum() != 0 && self.sum(pseudo) == 0xffff
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Packet<B> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, value);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, value);
    }

    /// Sets the Length.
    #[inline]
    pub fn set_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, value);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    fn fill(&mut self, pseudo: u16) {
        self.set_checksum(0);
        let sum = checksum::finish(self.sum(pseudo));
        // Zero means "no checksum": a real zero is sent as its other form (RFC 768).
        self.set_checksum(if sum == 0 { 0xffff } else { sum });
    }

    /// Computes and writes the checksum over the IPv4 pseudo-header and the Length bytes.
    #[inline]
    pub fn fill_checksum_v4(&mut self, src_addr: &Ipv4Addr, dst_addr: &Ipv4Addr) {
        let pseudo = checksum::pseudo_header_v4(src_addr, dst_addr, Protocol::Udp, self.len());
        self.fill(pseudo);
    }

    /// Computes and writes the checksum over the IPv6 pseudo-header and the Length bytes.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src_addr: &Ipv6Addr, dst_addr: &Ipv6Addr) {
        let pseudo =
            checksum::pseudo_header_v6(src_addr, dst_addr, Protocol::Udp, u32::from(self.len()));
        self.fill(pseudo);
    }
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Packet<B> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_util::prefixes;

    /// UDP 192.0.2.1:39707 → 198.51.100.1:33434, "lace\n": frame 18 of
    /// `forwarder/testdata/wire/samples.pcap` (`echo lace >/dev/udp/198.51.100.1/33434` in
    /// `capture.sh`, checksum offload off), from byte 34.
    static DATAGRAM_V4: [u8; 13] = [
        0x9b, 0x1b, 0x82, 0x9a, 0x00, 0x0d, 0x1c, 0x21, 0x6c, 0x61, 0x63, 0x65, 0x0a,
    ];

    /// UDP [2001:db8:a::1]:42880 → [2001:db8:b::1]:33434, "lace\n": frame 32 (`echo lace
    /// >/dev/udp/2001:db8:b::1/33434`), from byte 54.
    static DATAGRAM_V6: [u8; 13] = [
        0xa7, 0x80, 0x82, 0x9a, 0x00, 0x0d, 0xa0, 0x69, 0x6c, 0x61, 0x63, 0x65, 0x0a,
    ];

    const A4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const B4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 1);
    const B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 1);

    #[test]
    fn deconstruct() {
        let packet = Packet::new_checked(&DATAGRAM_V4[..]).unwrap();
        assert_eq!(packet.src_port(), 39707);
        assert_eq!(packet.dst_port(), 33434);
        assert_eq!(packet.len(), 13);
        assert!(!packet.is_empty());
        assert_eq!(packet.checksum(), 0x1c21);
        assert_eq!(packet.payload(), b"lace\n");
        assert!(packet.verify_checksum_v4(&A4, &B4));
        assert!(!packet.verify_checksum_v4(&B4, &B4));

        let packet = Packet::new_checked(&DATAGRAM_V6[..]).unwrap();
        assert_eq!((packet.src_port(), packet.dst_port()), (42880, 33434));
        assert!(packet.verify_checksum_v6(&A6, &B6));
        assert!(!packet.verify_checksum_v6(&A6, &A6));
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 13];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_src_port(39707);
        packet.set_dst_port(33434);
        packet.set_len(13);
        packet.payload_mut().copy_from_slice(b"lace\n");
        packet.fill_checksum_v4(&A4, &B4);
        assert_eq!(bytes, DATAGRAM_V4);

        let mut bytes = [0xa5u8; 13];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_src_port(42880);
        packet.set_dst_port(33434);
        packet.set_len(13);
        packet.payload_mut().copy_from_slice(b"lace\n");
        packet.fill_checksum_v6(&A6, &B6);
        assert_eq!(bytes, DATAGRAM_V6);
    }

    #[test]
    fn zero_checksum() {
        let mut bytes = DATAGRAM_V4;
        bytes[6..8].fill(0);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert!(packet.verify_checksum_v4(&A4, &B4), "IPv4: zero means none");
        let mut bytes = DATAGRAM_V6;
        bytes[6..8].fill(0);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert!(
            !packet.verify_checksum_v6(&A6, &B6),
            "IPv6: zero is invalid"
        );
    }

    #[test]
    fn computed_zero_is_sent_as_all_ones() {
        // Pick a payload word that makes the sum 0xffff, i.e. the checksum 0.
        let mut bytes = [0u8; 10];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_len(10);
        packet.fill_checksum_v4(&A4, &B4);
        let word = packet.checksum();
        packet.payload_mut().copy_from_slice(&word.to_be_bytes());
        packet.fill_checksum_v4(&A4, &B4);
        assert_eq!(packet.checksum(), 0xffff);
        assert!(packet.verify_checksum_v4(&A4, &B4));
    }

    #[test]
    fn truncated_at_every_length() {
        for (n, prefix) in prefixes(&DATAGRAM_V4) {
            assert_eq!(
                Packet::new_checked(prefix).err(),
                Some(Error::Truncated),
                "length {n}"
            );
        }
        // Ethernet padding after the datagram is not payload.
        let mut bytes = [0u8; 20];
        bytes[..13].copy_from_slice(&DATAGRAM_V4);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.payload(), b"lace\n");
        assert!(packet.verify_checksum_v4(&A4, &B4));
    }

    #[test]
    fn bad_length() {
        for len in 0..8u16 {
            let mut bytes = DATAGRAM_V4;
            bytes[4..6].copy_from_slice(&len.to_be_bytes());
            assert_eq!(Packet::new_checked(&bytes[..]), Err(Error::BadLength));
        }
    }
}
