//! TCP headers (RFC 9293 §3.1), as much as the forwarder needs: ports (flow hashing, NAT),
//! flags (connection tracking) and the checksum over the IPv4 or IPv6 pseudo-header. Options
//! are bytes, not parsed.
//!
//! TCP has no length field: the segment is the whole buffer, so pass exactly the IP payload.

use core::ops::BitOr;

use super::checksum;
use super::ip::Protocol;
use super::{read_u16, read_u32, write_u16, write_u32, Error, Ipv4Addr, Ipv6Addr, Result};

/// TCP control bits (RFC 9293 §3.1; ECE and CWR from RFC 3168).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    /// No more data from sender.
    pub const FIN: Flags = Flags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: Flags = Flags(0x02);
    /// Reset the connection.
    pub const RST: Flags = Flags(0x04);
    /// Push.
    pub const PSH: Flags = Flags(0x08);
    /// Acknowledgment field is significant.
    pub const ACK: Flags = Flags(0x10);
    /// Urgent pointer field is significant.
    pub const URG: Flags = Flags(0x20);
    /// ECN-Echo.
    pub const ECE: Flags = Flags(0x40);
    /// Congestion Window Reduced.
    pub const CWR: Flags = Flags(0x80);

    /// The flags in a flags byte.
    pub const fn from_bits(bits: u8) -> Flags {
        Flags(bits)
    }

    /// The flags byte.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Flags {
    type Output = Flags;

    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

/// Byte ranges of the TCP header (RFC 9293 §3.1):
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |          Source Port          |       Destination Port        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                        Sequence Number                        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                    Acknowledgment Number                      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  Data |       |C|E|U|A|P|R|S|F|                               |
/// | Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
/// |       |       |R|E|G|K|H|T|N|N|                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           Checksum            |         Urgent Pointer        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                  Options (Data Offset × 4 − 20)               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
mod field {
    pub(super) const SRC_PORT: usize = 0;
    pub(super) const DST_PORT: usize = 2;
    pub(super) const SEQ_NUM: usize = 4;
    pub(super) const ACK_NUM: usize = 8;
    pub(super) const DATA_OFFSET: usize = 12;
    pub(super) const FLAGS: usize = 13;
    pub(super) const WINDOW: usize = 14;
    pub(super) const CHECKSUM: usize = 16;
    pub(super) const URGENT: usize = 18;
    pub(super) const OPTIONS: usize = 20;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = field::OPTIONS;

/// A read/write view of a TCP segment.
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

    /// Checks that the header, options included, lies within the buffer.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is shorter than 20 bytes or the Data Offset;
    /// [`Error::BadLength`] if the Data Offset is below 5.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if header_len > len {
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

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SEQ_NUM)
    }

    /// Acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ACK_NUM)
    }

    /// Header length in bytes (Data Offset × 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFFSET] >> 4) * 4
    }

    /// Control bits.
    #[inline]
    pub fn flags(&self) -> Flags {
        Flags(self.buffer.as_ref()[field::FLAGS])
    }

    /// Window.
    #[inline]
    pub fn window_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent_at(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::URGENT)
    }

    /// The options bytes.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The payload: everything after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    fn sum(&self, pseudo: u16) -> u16 {
        checksum::combine(&[pseudo, checksum::data(self.buffer.as_ref())])
    }

    /// Whether the checksum verifies over IPv4 (the segment is the whole buffer).
    #[inline]
    pub fn verify_checksum_v4(&self, src_addr: &Ipv4Addr, dst_addr: &Ipv4Addr) -> bool {
        let len = self.buffer.as_ref().len() as u16;
        self.sum(checksum::pseudo_header_v4(
            src_addr,
            dst_addr,
            Protocol::Tcp,
            len,
        )) == 0xffff
    }

    /// Whether the checksum verifies over IPv6 (the segment is the whole buffer).
    #[inline]
    pub fn verify_checksum_v6(&self, src_addr: &Ipv6Addr, dst_addr: &Ipv6Addr) -> bool {
        let len = self.buffer.as_ref().len() as u32;
        self.sum(checksum::pseudo_header_v6(
            src_addr,
            dst_addr,
            Protocol::Tcp,
            len,
        )) == 0xffff
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

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::SEQ_NUM, value);
    }

    /// Sets the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::ACK_NUM, value);
    }

    /// Sets the header length in bytes (a multiple of 4, 20–60); clears the reserved bits.
    #[inline]
    pub fn set_header_len(&mut self, value: usize) {
        self.buffer.as_mut()[field::DATA_OFFSET] = ((value / 4) as u8) << 4;
    }

    /// Sets the control bits.
    #[inline]
    pub fn set_flags(&mut self, value: Flags) {
        self.buffer.as_mut()[field::FLAGS] = value.bits();
    }

    /// Sets the window.
    #[inline]
    pub fn set_window_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::WINDOW, value);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the urgent pointer.
    #[inline]
    pub fn set_urgent_at(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::URGENT, value);
    }

    /// The options bytes, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// Computes and writes the checksum over the IPv4 pseudo-header and the whole buffer.
    #[inline]
    pub fn fill_checksum_v4(&mut self, src_addr: &Ipv4Addr, dst_addr: &Ipv4Addr) {
        self.set_checksum(0);
        let len = self.buffer.as_ref().len() as u16;
        let sum = self.sum(checksum::pseudo_header_v4(
            src_addr,
            dst_addr,
            Protocol::Tcp,
            len,
        ));
        self.set_checksum(checksum::finish(sum));
    }

    /// Computes and writes the checksum over the IPv6 pseudo-header and the whole buffer.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src_addr: &Ipv6Addr, dst_addr: &Ipv6Addr) {
        self.set_checksum(0);
        let len = self.buffer.as_ref().len() as u32;
        let sum = self.sum(checksum::pseudo_header_v6(
            src_addr,
            dst_addr,
            Protocol::Tcp,
            len,
        ));
        self.set_checksum(checksum::finish(sum));
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

    /// SYN 192.0.2.1:49590 → 198.51.100.1:80 with options (MSS 1240, SACK permitted,
    /// timestamps, NOP, window scale 10): frame 20 of `forwarder/testdata/wire/samples.pcap`
    /// (`exec 3<>/dev/tcp/198.51.100.1/80` in `capture.sh`, checksum offload off), from byte 34.
    static SYN: [u8; 40] = [
        0xc1, 0xb6, 0x00, 0x50, 0x63, 0x96, 0x5a, 0x78, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfb,
        0xe0, 0xdf, 0x20, 0x00, 0x00, 0x02, 0x04, 0x04, 0xd8, 0x04, 0x02, 0x08, 0x0a, 0x41, 0xab,
        0xbf, 0xe0, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x0a,
    ];

    /// B's RST+ACK answer (nothing listens on port 80): frame 21, from byte 34.
    static RST_ACK: [u8; 20] = [
        0x00, 0x50, 0xc1, 0xb6, 0x00, 0x00, 0x00, 0x00, 0x63, 0x96, 0x5a, 0x79, 0x50, 0x14, 0x00,
        0x00, 0x43, 0x84, 0x00, 0x00,
    ];

    const A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);

    #[test]
    fn deconstruct() {
        let packet = Packet::new_checked(&SYN[..]).unwrap();
        assert_eq!((packet.src_port(), packet.dst_port()), (49590, 80));
        assert_eq!(packet.seq_number(), 0x6396_5a78);
        assert_eq!(packet.ack_number(), 0);
        assert_eq!(packet.header_len(), 40);
        assert_eq!(packet.flags(), Flags::SYN);
        assert_eq!(packet.window_len(), 64480);
        assert_eq!(packet.checksum(), 0xdf20);
        assert_eq!(packet.urgent_at(), 0);
        assert_eq!(&packet.options()[..4], &[0x02, 0x04, 0x04, 0xd8]); // MSS 1240
        assert_eq!(packet.payload(), &[] as &[u8]);
        assert!(packet.verify_checksum_v4(&A, &B));
        assert!(!packet.verify_checksum_v4(&B, &B));

        let packet = Packet::new_checked(&RST_ACK[..]).unwrap();
        assert!(packet.flags().contains(Flags::RST | Flags::ACK));
        assert!(!packet.flags().contains(Flags::SYN));
        assert_eq!(packet.ack_number(), 0x6396_5a79);
        assert!(packet.verify_checksum_v4(&B, &A));
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 40];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_src_port(49590);
        packet.set_dst_port(80);
        packet.set_seq_number(0x6396_5a78);
        packet.set_ack_number(0);
        packet.set_header_len(40);
        packet.set_flags(Flags::SYN);
        packet.set_window_len(64480);
        packet.set_urgent_at(0);
        packet.options_mut().copy_from_slice(&SYN[20..]);
        packet.fill_checksum_v4(&A, &B);
        assert_eq!(bytes, SYN);
    }

    #[test]
    fn checksum_v6_round_trips() {
        let (a, b) = (
            Ipv6Addr::LOCALHOST,
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
        );
        let mut bytes = SYN;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.fill_checksum_v6(&a, &b);
        assert!(packet.verify_checksum_v6(&a, &b));
        assert!(!packet.verify_checksum_v6(&b, &b));
    }

    #[test]
    fn truncated_at_every_length() {
        for (n, prefix) in prefixes(&SYN) {
            assert_eq!(
                Packet::new_checked(prefix).err(),
                Some(Error::Truncated),
                "length {n}"
            );
        }
    }

    #[test]
    fn bad_data_offset() {
        for offset in 0..5u8 {
            let mut bytes = RST_ACK;
            bytes[12] = offset << 4;
            assert_eq!(Packet::new_checked(&bytes[..]), Err(Error::BadLength));
        }
    }
}
