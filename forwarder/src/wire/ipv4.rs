//! IPv4 headers (RFC 791 §3.1; DSCP and ECN per RFC 2474 and RFC 3168).
//!
//! The view reads any header length the IHL gives (options are bytes, not parsed) and bounds
//! the payload by Total Length, so Ethernet padding after the packet is ignored. Fragments are
//! read like any packet; [`Packet::is_fragment`] flags them (the forwarder does not reassemble,
//! and only the first fragment carries ports). [`Packet::decrement_ttl`] updates the header
//! checksum incrementally (RFC 1624) instead of recomputing it.

use super::checksum;
use super::field::Field;
use super::ip::Protocol;
use super::{read_ipv4, read_u16, write_u16, Error, Ipv4Addr, Result};

/// Byte ranges of the IPv4 header (RFC 791 §3.1):
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |Version|  IHL  |   DSCP    |ECN|          Total Length         |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |         Identification        |0|D|M|     Fragment Offset     |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  Time to Live |    Protocol   |         Header Checksum       |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                       Source Address                          |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                    Destination Address                        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                    Options (IHL × 4 − 20 bytes)               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// D: Don't Fragment, M: More Fragments; the offset counts 8-byte units.
/// ```
mod field {
    use super::Field;

    pub(super) const VER_IHL: usize = 0;
    pub(super) const DSCP_ECN: usize = 1;
    pub(super) const LENGTH: usize = 2;
    pub(super) const IDENT: usize = 4;
    pub(super) const FLG_OFF: usize = 6;
    pub(super) const TTL: usize = 8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: usize = 10;
    pub(super) const SRC_ADDR: Field = 12..16;
    pub(super) const DST_ADDR: Field = 16..20;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A read/write view of an IPv4 packet.
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

    /// Checks the version and that the header and the Total Length lie within the buffer.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is shorter than 20 bytes, the IHL or the Total
    /// Length; [`Error::BadVersion`] if the version is not 4; [`Error::BadLength`] if IHL < 5 or
    /// Total Length < IHL × 4.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 4 {
            return Err(Error::BadVersion);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if header_len > len {
            return Err(Error::Truncated);
        }
        let total_len = usize::from(self.total_len());
        if total_len < header_len {
            return Err(Error::BadLength);
        }
        if total_len > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> B {
        self.buffer
    }

    /// Version (4).
    #[inline(always)]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4), options included.
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// Differentiated Services Code Point.
    #[inline(always)]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// Explicit Congestion Notification bits.
    #[inline(always)]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// Total Length: header plus payload, in bytes.
    #[inline(always)]
    pub fn total_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification.
    #[inline(always)]
    pub fn ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Don't Fragment flag.
    #[inline(always)]
    pub fn dont_frag(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    /// More Fragments flag.
    #[inline(always)]
    pub fn more_frags(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the field × 8).
    #[inline(always)]
    pub fn frag_offset(&self) -> u16 {
        (read_u16(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// Whether this is a fragment: More Fragments set or a non-zero offset.
    #[inline(always)]
    pub fn is_fragment(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & (FLAG_MF | OFFSET_MASK) != 0
    }

    /// Time to Live.
    #[inline(always)]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    #[inline(always)]
    pub fn protocol(&self) -> Protocol {
        Protocol::from(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// Header checksum field.
    #[inline(always)]
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    #[inline(always)]
    pub fn src_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::SRC_ADDR.start)
    }

    /// Destination address.
    #[inline(always)]
    pub fn dst_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::DST_ADDR.start)
    }

    /// Whether the header checksum (over the header, options included) verifies.
    #[inline(always)]
    pub fn verify_checksum(&self) -> bool {
        checksum::data(&self.buffer.as_ref()[..self.header_len()]) == 0xffff
    }

    /// The options bytes (empty for IHL 5).
    #[inline(always)]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The payload: from the end of the header to Total Length.
    #[inline(always)]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Packet<B> {
    /// Sets the version.
    #[inline(always)]
    pub fn set_version(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (value << 4);
    }

    /// Sets the header length in bytes (a multiple of 4, 20–60).
    #[inline(always)]
    pub fn set_header_len(&mut self, value: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((value / 4) as u8 & 0x0f);
    }

    /// Sets the DSCP (6 bits).
    #[inline(always)]
    pub fn set_dscp(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0x03) | (value << 2);
    }

    /// Sets the ECN bits (2 bits).
    #[inline(always)]
    pub fn set_ecn(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0xfc) | (value & 0x03);
    }

    /// Sets the Total Length.
    #[inline(always)]
    pub fn set_total_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, value);
    }

    /// Sets the Identification.
    #[inline(always)]
    pub fn set_ident(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::IDENT, value);
    }

    fn set_flag(&mut self, flag: u16, value: bool) {
        let raw = read_u16(self.buffer.as_ref(), field::FLG_OFF);
        let raw = if value { raw | flag } else { raw & !flag };
        write_u16(self.buffer.as_mut(), field::FLG_OFF, raw);
    }

    /// Clears the reserved flag bit and all the flags and the offset.
    #[inline(always)]
    pub fn clear_flags_and_offset(&mut self) {
        write_u16(self.buffer.as_mut(), field::FLG_OFF, 0);
    }

    /// Sets Don't Fragment.
    #[inline(always)]
    pub fn set_dont_frag(&mut self, value: bool) {
        self.set_flag(FLAG_DF, value);
    }

    /// Sets More Fragments.
    #[inline(always)]
    pub fn set_more_frags(&mut self, value: bool) {
        self.set_flag(FLAG_MF, value);
    }

    /// Sets the fragment offset in bytes (a multiple of 8).
    #[inline(always)]
    pub fn set_frag_offset(&mut self, value: u16) {
        let raw = read_u16(self.buffer.as_ref(), field::FLG_OFF);
        let raw = (raw & !OFFSET_MASK) | ((value >> 3) & OFFSET_MASK);
        write_u16(self.buffer.as_mut(), field::FLG_OFF, raw);
    }

    /// Sets the Time to Live (the checksum is not updated: see [`Packet::decrement_ttl`]).
    #[inline(always)]
    pub fn set_ttl(&mut self, value: u8) {
        self.buffer.as_mut()[field::TTL] = value;
    }

    /// Sets the protocol.
    #[inline(always)]
    pub fn set_protocol(&mut self, value: Protocol) {
        self.buffer.as_mut()[field::PROTOCOL] = value.into();
    }

    /// Sets the header checksum field.
    #[inline(always)]
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the source address.
    #[inline(always)]
    pub fn set_src_addr(&mut self, value: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&value.octets());
    }

    /// Sets the destination address.
    #[inline(always)]
    pub fn set_dst_addr(&mut self, value: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&value.octets());
    }

    /// Computes and writes the header checksum (over the header length the IHL gives).
    #[inline(always)]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::data(&self.buffer.as_ref()[..self.header_len()]);
        self.set_checksum(checksum::finish(sum));
    }

    /// Forwards the packet one hop: decrements the TTL and updates the checksum incrementally
    /// (RFC 1624 eqn. 3), returning the new TTL.
    ///
    /// Returns `None`, leaving the packet as it is, when the TTL is 0 or 1: a router must then
    /// discard it and send ICMP Time Exceeded (RFC 1812 §5.3.1). Needs only the first 12 bytes.
    #[inline(always)]
    pub fn decrement_ttl(&mut self) -> Option<u8> {
        let data = self.buffer.as_mut();
        let ttl = data[field::TTL];
        if ttl <= 1 {
            return None;
        }
        data[field::TTL] = ttl - 1;
        // TTL and Protocol form one 16-bit word m of the checksummed header, and m' = m - 0x100
        // exactly, so RFC 1624 eqn. 3, HC' = ~(~HC + ~m + m'), is ~(~HC + 0xfeff): one add and
        // one fold.
        let hc = read_u16(data, field::CHECKSUM);
        let sum = u32::from(!hc) + 0xfeff;
        let sum = (sum & 0xffff) + (sum >> 16);
        write_u16(data, field::CHECKSUM, !(sum as u16));
        Some(ttl - 1)
    }

    /// The options bytes, writable.
    #[inline(always)]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// The payload, writable.
    #[inline(always)]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.header_len()..usize::from(self.total_len());
        &mut self.buffer.as_mut()[range]
    }
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Packet<B> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A validated IPv4 header. Options are not represented: [`Repr::emit`] writes a 20-byte
/// header, and `payload_len` counts from the end of the header that was parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: Protocol,
    /// Payload length in bytes (Total Length − header length).
    pub payload_len: usize,
    /// Time to Live.
    pub ttl: u8,
    /// DSCP, 0–63.
    pub dscp: u8,
    /// ECN, 0–3.
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
    /// More Fragments.
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
}

impl Repr {
    /// Parses and validates a header, checksum included.
    ///
    /// # Errors
    /// Those of [`Packet::check_len`], and [`Error::BadChecksum`].
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &Packet<&B>) -> Result<Repr> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: packet.payload().len(),
            ttl: packet.ttl(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            more_frags: packet.more_frags(),
            frag_offset: packet.frag_offset(),
        })
    }

    /// Length of the header this emits: 20.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header with its checksum; the payload is left as it is.
    ///
    /// `payload_len` must be at most 65515 (the Total Length field is 16 bits).
    ///
    /// # Panics
    /// If the buffer is shorter than 20 bytes.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<B>) {
        packet.set_version(4);
        packet.set_header_len(HEADER_LEN);
        packet.set_dscp(self.dscp);
        packet.set_ecn(self.ecn);
        packet.set_total_len((HEADER_LEN + self.payload_len) as u16);
        packet.set_ident(self.ident);
        packet.clear_flags_and_offset();
        packet.set_dont_frag(self.dont_frag);
        packet.set_more_frags(self.more_frags);
        packet.set_frag_offset(self.frag_offset);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::test_util::prefixes;

    /// ICMP echo request A → R: frame 6 of `forwarder/testdata/wire/samples.pcap`
    /// (`ping -c 1 192.0.2.254` in `capture.sh`), from byte 14.
    pub(crate) static ECHO_REQUEST: [u8; 84] = [
        0x45, 0x00, 0x00, 0x54, 0x93, 0xeb, 0x40, 0x00, 0x40, 0x01, 0x21, 0xbe, 0xc0, 0x00, 0x02,
        0x01, 0xc0, 0x00, 0x02, 0xfe, 0x08, 0x00, 0x75, 0x3a, 0x35, 0xde, 0x00, 0x01, 0x85, 0x48,
        0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0xf1, 0x5f, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10,
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
        0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e,
        0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
    ];

    /// ICMP echo request with a Record Route option (IHL 15: NOP, then RR of 39 bytes): frame 8
    /// of the same capture (`ping -c 1 -W 1 -R 192.0.2.254`), from byte 14.
    static RECORD_ROUTE: [u8; 124] = [
        0x4f, 0x00, 0x00, 0x7c, 0x93, 0xf5, 0x40, 0x00, 0x40, 0x01, 0x2d, 0x7b, 0xc0, 0x00, 0x02,
        0x01, 0xc0, 0x00, 0x02, 0xfe, 0x01, 0x07, 0x27, 0x08, 0xc0, 0x00, 0x02, 0x01, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x08, 0x00, 0x80, 0xbf, 0x35, 0xe1, 0x00, 0x01, 0x86, 0x48, 0x0c, 0x6b, 0x00, 0x00, 0x00,
        0x00, 0xef, 0xd7, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15,
        0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24,
        0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33,
        0x34, 0x35, 0x36, 0x37,
    ];

    /// Header only (the packet is 1500 bytes) of the first fragment of a 1508-byte echo
    /// request: frame 14 of the same capture (`ping -c 1 -W 1 -s 1480 192.0.2.254`), bytes
    /// 14..34.
    static FIRST_FRAGMENT_HEADER: [u8; 20] = [
        0x45, 0x00, 0x05, 0xdc, 0x94, 0x45, 0x20, 0x00, 0x40, 0x01, 0x3b, 0xdc, 0xc0, 0x00, 0x02,
        0x01, 0xc0, 0x00, 0x02, 0xfe,
    ];

    /// The last fragment of that request, offset 1480, 8 bytes of payload: frame 15, from
    /// byte 14.
    pub(crate) static LAST_FRAGMENT: [u8; 28] = [
        0x45, 0x00, 0x00, 0x1c, 0x94, 0x45, 0x00, 0xb9, 0x40, 0x01, 0x60, 0xe3, 0xc0, 0x00, 0x02,
        0x01, 0xc0, 0x00, 0x02, 0xfe, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7,
    ];

    const A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const R: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 254);

    fn echo_repr() -> Repr {
        Repr {
            src_addr: A,
            dst_addr: R,
            protocol: Protocol::Icmp,
            payload_len: 64,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 0x93eb,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        }
    }

    #[test]
    fn deconstruct() {
        let packet = Packet::new_checked(&ECHO_REQUEST[..]).unwrap();
        assert_eq!(packet.version(), 4);
        assert_eq!(packet.header_len(), 20);
        assert_eq!(packet.dscp(), 0);
        assert_eq!(packet.ecn(), 0);
        assert_eq!(packet.total_len(), 84);
        assert_eq!(packet.ident(), 0x93eb);
        assert!(packet.dont_frag());
        assert!(!packet.more_frags());
        assert_eq!(packet.frag_offset(), 0);
        assert!(!packet.is_fragment());
        assert_eq!(packet.ttl(), 64);
        assert_eq!(packet.protocol(), Protocol::Icmp);
        assert_eq!(packet.checksum(), 0x21be);
        assert_eq!(packet.src_addr(), A);
        assert_eq!(packet.dst_addr(), R);
        assert!(packet.verify_checksum());
        assert_eq!(packet.options(), &[] as &[u8]);
        assert_eq!(packet.payload(), &ECHO_REQUEST[20..]);
    }

    #[test]
    fn deconstruct_options() {
        let packet = Packet::new_checked(&RECORD_ROUTE[..]).unwrap();
        assert_eq!(packet.header_len(), 60);
        assert_eq!(packet.total_len(), 124);
        assert!(packet.verify_checksum());
        let options = packet.options();
        assert_eq!(options.len(), 40);
        // NOP, then Record Route (type 7, length 39, pointer 8, A's address recorded).
        assert_eq!(
            &options[..8],
            &[0x01, 0x07, 0x27, 0x08, 0xc0, 0x00, 0x02, 0x01]
        );
        assert_eq!(packet.payload(), &RECORD_ROUTE[60..]);
        assert_eq!(packet.payload()[0], 8); // ICMP echo request
    }

    #[test]
    fn deconstruct_fragments() {
        let first = Packet::new_unchecked(&FIRST_FRAGMENT_HEADER[..]);
        assert!(first.more_frags() && !first.dont_frag());
        assert_eq!(first.frag_offset(), 0);
        assert!(first.is_fragment());
        assert_eq!(first.total_len(), 1500);
        assert!(first.verify_checksum());
        // The header alone is not the packet its Total Length describes.
        assert_eq!(
            Packet::new_checked(&FIRST_FRAGMENT_HEADER[..]),
            Err(Error::Truncated)
        );

        let last = Packet::new_checked(&LAST_FRAGMENT[..]).unwrap();
        assert!(!last.more_frags());
        assert_eq!(last.frag_offset(), 1480);
        assert!(last.is_fragment());
        assert_eq!(last.ident(), first.ident());
        assert_eq!(
            last.payload(),
            &[0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7]
        );
        let repr = Repr::parse(&last).unwrap();
        assert_eq!(
            (repr.more_frags, repr.frag_offset, repr.payload_len),
            (false, 1480, 8)
        );
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 84];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_version(4);
        packet.set_header_len(20);
        packet.set_dscp(0);
        packet.set_ecn(0);
        packet.set_total_len(84);
        packet.set_ident(0x93eb);
        packet.clear_flags_and_offset();
        packet.set_dont_frag(true);
        packet.set_more_frags(false);
        packet.set_frag_offset(0);
        packet.set_ttl(64);
        packet.set_protocol(Protocol::Icmp);
        packet.set_src_addr(A);
        packet.set_dst_addr(R);
        packet.payload_mut().copy_from_slice(&ECHO_REQUEST[20..]);
        packet.fill_checksum();
        assert_eq!(bytes, ECHO_REQUEST);

        let mut bytes = LAST_FRAGMENT;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.clear_flags_and_offset();
        packet.set_more_frags(true);
        packet.set_frag_offset(1480);
        packet.set_more_frags(false);
        packet.fill_checksum();
        assert_eq!(bytes, LAST_FRAGMENT);
    }

    #[test]
    fn construct_options() {
        let mut bytes = [0u8; 124];
        bytes[..20].copy_from_slice(&RECORD_ROUTE[..20]);
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_header_len(60);
        packet.options_mut().copy_from_slice(&RECORD_ROUTE[20..60]);
        packet.payload_mut().copy_from_slice(&RECORD_ROUTE[60..]);
        packet.fill_checksum();
        assert_eq!(bytes, RECORD_ROUTE);
    }

    #[test]
    fn parse() {
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&ECHO_REQUEST[..])),
            Ok(echo_repr())
        );
        // Options are skipped: the payload starts after them.
        let repr = Repr::parse(&Packet::new_unchecked(&RECORD_ROUTE[..])).unwrap();
        assert_eq!(
            repr,
            Repr {
                ident: 0x93f5,
                ..echo_repr()
            }
        );
    }

    #[test]
    fn emit() {
        let repr = echo_repr();
        assert_eq!(repr.buffer_len(), 20);
        let mut bytes = [0xa5u8; 84];
        bytes[20..].copy_from_slice(&ECHO_REQUEST[20..]);
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, ECHO_REQUEST);
    }

    #[test]
    fn ethernet_padding_is_not_payload() {
        let mut bytes = [0u8; 94];
        bytes[..84].copy_from_slice(&ECHO_REQUEST);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.payload(), &ECHO_REQUEST[20..]);
        assert_eq!(Repr::parse(&packet), Ok(echo_repr()));
    }

    #[test]
    fn truncated_at_every_length() {
        for sample in [&ECHO_REQUEST[..], &RECORD_ROUTE[..], &LAST_FRAGMENT[..]] {
            for (n, prefix) in prefixes(sample) {
                assert_eq!(
                    Packet::new_checked(prefix).err(),
                    Some(Error::Truncated),
                    "len {n}"
                );
                assert_eq!(
                    Repr::parse(&Packet::new_unchecked(prefix)),
                    Err(Error::Truncated)
                );
            }
        }
    }

    #[test]
    fn bad_fields() {
        let check = |edit: &dyn Fn(&mut [u8]), expected: Error| {
            let mut bytes = ECHO_REQUEST;
            edit(&mut bytes);
            let packet = Packet::new_unchecked(&bytes[..]);
            assert_eq!(Repr::parse(&packet), Err(expected));
        };
        check(&|b| b[0] = 0x65, Error::BadVersion);
        check(&|b| b[0] = 0x44, Error::BadLength); // IHL 4
        check(&|b| b[0] = 0x40, Error::BadLength); // IHL 0
                                                   // IHL 15 (60 bytes) with a total length of 40.
        check(&|b| (b[0], b[3]) = (0x4f, 40), Error::BadLength);
        check(&|b| b[0] = 0x4f, Error::BadChecksum); // 60-byte header: the sum covers 40 more
        check(
            &|b| b[2..4].copy_from_slice(&19u16.to_be_bytes()),
            Error::BadLength,
        );
        check(
            &|b| b[2..4].copy_from_slice(&85u16.to_be_bytes()),
            Error::Truncated,
        );
        check(&|b| b[10] ^= 0x01, Error::BadChecksum);
        check(&|b| b[15] ^= 0x01, Error::BadChecksum);
    }

    #[test]
    fn decrement_ttl_updates_checksum() {
        let mut bytes = ECHO_REQUEST;
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        assert_eq!(packet.decrement_ttl(), Some(63));
        assert_eq!(packet.ttl(), 63);
        assert!(packet.verify_checksum());
        let incremental = packet.checksum();
        packet.fill_checksum();
        assert_eq!(packet.checksum(), incremental);

        for ttl in 2..=u8::MAX {
            let mut bytes = ECHO_REQUEST;
            let mut packet = Packet::new_unchecked(&mut bytes[..]);
            packet.set_ttl(ttl);
            packet.fill_checksum();
            assert_eq!(packet.decrement_ttl(), Some(ttl - 1));
            let incremental = packet.checksum();
            packet.fill_checksum();
            assert_eq!(packet.checksum(), incremental, "ttl {ttl}");
        }
    }

    #[test]
    fn expiring_ttl_is_left_alone() {
        for ttl in [0, 1] {
            let mut bytes = ECHO_REQUEST;
            let mut packet = Packet::new_unchecked(&mut bytes[..]);
            packet.set_ttl(ttl);
            packet.fill_checksum();
            let before = bytes;
            assert_eq!(Packet::new_unchecked(&mut bytes[..]).decrement_ttl(), None);
            assert_eq!(bytes, before);
        }
    }
}
