//! The IPv6 Segment Routing Header (RFC 8754), Routing header type 4 (RFC 8200 §4.4).
//!
//! The segment list is stored in reverse: Segment List\[0\] is the *last* segment of the path,
//! Segment List\[Last Entry\] the first. While Segments Left is n > 0 the destination address is
//! Segment List\[n\], and an SRv6 endpoint moves it on to Segment List\[n − 1\]
//! ([`Packet::next_segment`]).
//!
//! [`Packet::check_len`] guarantees the whole header (Hdr Ext Len) is in the buffer and the
//! segment list (Last Entry) fits inside it, so every getter is in bounds. [`Repr::parse`] adds
//! the checks of RFC 8754 §4.3.1.1 that a receiver applies before processing: Routing Type 4,
//! Segments Left ≤ Last Entry + 1, and well-formed TLVs (§2.1). Flags (§2: none defined; Linux
//! still sets 0x08, its pre-RFC HMAC flag) and Tag are carried as read.
//!
//! A Routing header of another type goes through [`Packet::check_len`] only if its fifth byte
//! happens to describe a fitting list; to tell an unknown type apart (RFC 8200 §4.4: ignore it
//! when Segments Left is 0), read [`Packet::routing_type`] and [`Packet::segments_left`] first
//! — they need only the first 4 bytes — on a `new_unchecked` view of at least 8 bytes.

use super::field::Rest;
use super::ip::Protocol;
use super::{read_ipv6, read_u16, read_u32, write_u16, Error, Ipv6Addr, Result};

wire_enum! {
    /// IPv6 Routing Type (IANA "Routing Types").
    pub enum RoutingType(u8) {
        /// Source Route, deprecated (RFC 5095).
        Type0 = 0,
        /// Type 2 Routing Header (Mobile IPv6, RFC 6275).
        Type2 = 2,
        /// RPL Source Route Header (RFC 6554).
        Rpl = 3,
        /// Segment Routing Header (RFC 8754).
        SegmentRouting = 4,
    }
}

wire_enum! {
    /// SRH TLV type (RFC 8754 §2.1, IANA "Segment Routing Header TLVs").
    pub enum TlvType(u8) {
        /// A single byte of padding, without length or value.
        Pad1 = 0,
        /// Padding of 2–7 bytes.
        PadN = 4,
        /// HMAC (RFC 8754 §2.1.2).
        Hmac = 5,
    }
}

/// Byte ranges of the Segment Routing Header (RFC 8754 §2):
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Header   |  Hdr Ext Len  | Routing Type  | Segments Left |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  Last Entry   |     Flags     |              Tag              |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// |            Segment List[0] (128-bit IPv6 address)             |
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                              ...                              |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |            Segment List[n] (128-bit IPv6 address)             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// //         Optional Type Length Value objects (variable)       //
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// Header length: (Hdr Ext Len + 1) × 8 bytes; n = Last Entry.
/// ```
mod field {
    use super::Rest;

    pub(super) const NXT_HDR: usize = 0;
    pub(super) const HDR_EXT_LEN: usize = 1;
    pub(super) const ROUTING_TYPE: usize = 2;
    pub(super) const SEGMENTS_LEFT: usize = 3;
    pub(super) const LAST_ENTRY: usize = 4;
    pub(super) const FLAGS: usize = 5;
    pub(super) const TAG: usize = 6;
    pub(super) const SEGMENTS: Rest = 8..;
}

/// Length of the fixed part, before the segment list.
pub const FIXED_LEN: usize = field::SEGMENTS.start;
/// Length of one segment.
pub const SEGMENT_LEN: usize = 16;
/// Largest header: Hdr Ext Len 255.
pub const MAX_HEADER_LEN: usize = (255 + 1) * 8;
/// Most segments a header can hold.
pub const MAX_SEGMENTS: usize = (MAX_HEADER_LEN - FIXED_LEN) / SEGMENT_LEN;

/// A read/write view of a Segment Routing Header and what follows it.
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

    /// Checks that the header (Hdr Ext Len) lies within the buffer and the segment list (Last
    /// Entry) within the header.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is shorter than 8 bytes or the header;
    /// [`Error::BadLength`] if Last Entry + 1 segments do not fit in the header.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < FIXED_LEN || len < self.header_len() {
            return Err(Error::Truncated);
        }
        if self.segment_list_end() > self.header_len() {
            return Err(Error::BadLength);
        }
        Ok(())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> B {
        self.buffer
    }

    /// End of the segment list, from the start of the header.
    #[inline]
    fn segment_list_end(&self) -> usize {
        FIXED_LEN + self.segment_count() * SEGMENT_LEN
    }

    /// Next Header: what follows the SRH (e.g. IPv6 or IPv4 for an encapsulated packet,
    /// [`Protocol::Ethernet`] for L2).
    #[inline]
    pub fn next_header(&self) -> Protocol {
        Protocol::from(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// Hdr Ext Len: header length in 8-byte units, not counting the first 8 bytes.
    #[inline]
    pub fn hdr_ext_len(&self) -> u8 {
        self.buffer.as_ref()[field::HDR_EXT_LEN]
    }

    /// Header length in bytes: (Hdr Ext Len + 1) × 8.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.hdr_ext_len()) + 1) * 8
    }

    /// Routing Type (4 for an SRH).
    #[inline]
    pub fn routing_type(&self) -> RoutingType {
        RoutingType::from(self.buffer.as_ref()[field::ROUTING_TYPE])
    }

    /// Segments Left: index of the current segment (the destination address).
    #[inline]
    pub fn segments_left(&self) -> u8 {
        self.buffer.as_ref()[field::SEGMENTS_LEFT]
    }

    /// Last Entry: index of the last element of the segment list (the first segment).
    #[inline]
    pub fn last_entry(&self) -> u8 {
        self.buffer.as_ref()[field::LAST_ENTRY]
    }

    /// Number of segments: Last Entry + 1.
    #[inline]
    pub fn segment_count(&self) -> usize {
        usize::from(self.last_entry()) + 1
    }

    /// Flags.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Tag.
    #[inline]
    pub fn tag(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::TAG)
    }

    /// Segment List\[`index`\], or `None` past Last Entry.
    #[inline]
    pub fn segment(&self, index: usize) -> Option<Ipv6Addr> {
        (index < self.segment_count())
            .then(|| read_ipv6(self.buffer.as_ref(), FIXED_LEN + index * SEGMENT_LEN))
    }

    /// The segment an endpoint sends the packet to next: Segment List\[Segments Left − 1\];
    /// `None` when Segments Left is 0 (or beyond the list).
    #[inline]
    pub fn next_segment(&self) -> Option<Ipv6Addr> {
        usize::from(self.segments_left())
            .checked_sub(1)
            .and_then(|i| self.segment(i))
    }

    /// The segment list.
    #[inline]
    pub fn segments(&self) -> SegmentList<'_> {
        SegmentList {
            bytes: &self.buffer.as_ref()[FIXED_LEN..self.segment_list_end()],
        }
    }

    /// The TLV area: from the end of the segment list to the end of the header.
    #[inline]
    pub fn tlv_area(&self) -> &[u8] {
        &self.buffer.as_ref()[self.segment_list_end()..self.header_len()]
    }

    /// The TLVs in the TLV area.
    #[inline]
    pub fn tlvs(&self) -> Tlvs<'_> {
        Tlvs {
            area: self.tlv_area(),
        }
    }

    /// What follows the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Packet<B> {
    /// Sets Next Header.
    #[inline]
    pub fn set_next_header(&mut self, value: Protocol) {
        self.buffer.as_mut()[field::NXT_HDR] = value.into();
    }

    /// Sets Hdr Ext Len.
    #[inline]
    pub fn set_hdr_ext_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::HDR_EXT_LEN] = value;
    }

    /// Sets Routing Type.
    #[inline]
    pub fn set_routing_type(&mut self, value: RoutingType) {
        self.buffer.as_mut()[field::ROUTING_TYPE] = value.into();
    }

    /// Sets Segments Left.
    #[inline]
    pub fn set_segments_left(&mut self, value: u8) {
        self.buffer.as_mut()[field::SEGMENTS_LEFT] = value;
    }

    /// Sets Last Entry.
    #[inline]
    pub fn set_last_entry(&mut self, value: u8) {
        self.buffer.as_mut()[field::LAST_ENTRY] = value;
    }

    /// Sets Flags.
    #[inline]
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    /// Sets Tag.
    #[inline]
    pub fn set_tag(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::TAG, value);
    }

    /// Sets Segment List\[`index`\] (set Last Entry first; `index` ≤ Last Entry).
    #[inline]
    pub fn set_segment(&mut self, index: usize, value: Ipv6Addr) {
        let at = FIXED_LEN + index * SEGMENT_LEN;
        self.buffer.as_mut()[at..at + SEGMENT_LEN].copy_from_slice(&value.octets());
    }

    /// The TLV area, writable (set Hdr Ext Len and Last Entry first).
    #[inline]
    pub fn tlv_area_mut(&mut self) -> &mut [u8] {
        let range = self.segment_list_end()..self.header_len();
        &mut self.buffer.as_mut()[range]
    }

    /// What follows the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Packet<B> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A segment list: 1 to [`MAX_SEGMENTS`] IPv6 addresses, borrowed as wire bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentList<'a> {
    bytes: &'a [u8],
}

impl<'a> SegmentList<'a> {
    /// Uses `bytes` (Segment List\[0\] first) as a segment list.
    ///
    /// # Errors
    /// [`Error::BadLength`] unless `bytes` holds 1 to [`MAX_SEGMENTS`] whole addresses.
    pub fn from_bytes(bytes: &'a [u8]) -> Result<SegmentList<'a>> {
        if bytes.is_empty()
            || bytes.len() % SEGMENT_LEN != 0
            || bytes.len() > MAX_SEGMENTS * SEGMENT_LEN
        {
            return Err(Error::BadLength);
        }
        Ok(SegmentList { bytes })
    }

    /// Number of segments (≥ 1).
    pub fn len(&self) -> usize {
        self.bytes.len() / SEGMENT_LEN
    }

    /// Always false: a segment list has at least one segment.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Segment List\[`index`\].
    pub fn get(&self, index: usize) -> Option<Ipv6Addr> {
        (index < self.len()).then(|| read_ipv6(self.bytes, index * SEGMENT_LEN))
    }

    /// The segments, Segment List\[0\] first.
    pub fn iter(&self) -> impl Iterator<Item = Ipv6Addr> + 'a {
        self.bytes
            .chunks_exact(SEGMENT_LEN)
            .map(|s| read_ipv6(s, 0))
    }

    /// The wire bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// One TLV of the TLV area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tlv<'a> {
    /// Type.
    pub kind: TlvType,
    /// Value (empty for Pad1).
    pub value: &'a [u8],
}

/// The fields of an HMAC TLV (RFC 8754 §2.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hmac<'a> {
    /// The D bit: destination address verification disabled.
    pub d_bit: bool,
    /// HMAC Key ID.
    pub key_id: u32,
    /// The HMAC itself.
    pub hmac: &'a [u8],
}

impl<'a> Tlv<'a> {
    /// Reads an HMAC TLV's fields: `None` for another type or a value shorter than 6 bytes.
    ///
    /// ```text
    /// |     Type      |    Length     |D|        RESERVED             |
    /// |                      HMAC Key ID (4 octets)                   |
    /// //                   HMAC (variable)                           //
    /// ```
    pub fn hmac(&self) -> Option<Hmac<'a>> {
        if self.kind != TlvType::Hmac || self.value.len() < 6 {
            return None;
        }
        Some(Hmac {
            d_bit: self.value[0] & 0x80 != 0,
            key_id: read_u32(self.value, 2),
            hmac: &self.value[6..],
        })
    }
}

/// Iterator over a TLV area: yields each TLV, or one [`Error::BadLength`] for a TLV that
/// overruns the area, after which it stops.
#[derive(Debug, Clone)]
pub struct Tlvs<'a> {
    area: &'a [u8],
}

impl<'a> Tlvs<'a> {
    /// Iterates over the TLVs in `area`.
    pub fn new(area: &'a [u8]) -> Tlvs<'a> {
        Tlvs { area }
    }
}

impl<'a> Iterator for Tlvs<'a> {
    type Item = Result<Tlv<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let area = self.area;
        let (&kind, rest) = area.split_first()?;
        let kind = TlvType::from(kind);
        if kind == TlvType::Pad1 {
            self.area = rest;
            return Some(Ok(Tlv { kind, value: &[] }));
        }
        let Some((&len, rest)) = rest.split_first() else {
            self.area = &[];
            return Some(Err(Error::BadLength));
        };
        let Some((value, rest)) = rest.split_at_checked(usize::from(len)) else {
            self.area = &[];
            return Some(Err(Error::BadLength));
        };
        self.area = rest;
        Some(Ok(Tlv { kind, value }))
    }
}

/// A validated Segment Routing Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// Next Header.
    pub next_header: Protocol,
    /// Segments Left, ≤ the number of segments.
    pub segments_left: u8,
    /// Flags.
    pub flags: u8,
    /// Tag.
    pub tag: u16,
    /// The segment list (Last Entry = its length − 1).
    pub segments: SegmentList<'a>,
    /// The TLV area as wire bytes: well-formed TLVs, a multiple of 8 bytes long.
    pub tlvs: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses and validates an SRH (RFC 8754 §4.3.1.1).
    ///
    /// # Errors
    /// Those of [`Packet::check_len`]; [`Error::Unsupported`] for a Routing Type other than 4;
    /// [`Error::BadSegmentsLeft`] if Segments Left > Last Entry + 1; [`Error::BadLength`] for a
    /// TLV that overruns the TLV area.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a B>) -> Result<Repr<'a>> {
        packet.check_len()?;
        if packet.routing_type() != RoutingType::SegmentRouting {
            return Err(Error::Unsupported);
        }
        if usize::from(packet.segments_left()) > packet.segment_count() {
            return Err(Error::BadSegmentsLeft);
        }
        // Borrow from the buffer itself (lifetime 'a), not from the view.
        let data: &'a [u8] = B::as_ref(packet.buffer);
        let list_end = packet.segment_list_end();
        let repr = Repr {
            next_header: packet.next_header(),
            segments_left: packet.segments_left(),
            flags: packet.flags(),
            tag: packet.tag(),
            segments: SegmentList {
                bytes: &data[FIXED_LEN..list_end],
            },
            tlvs: &data[list_end..packet.header_len()],
        };
        repr.validate()?;
        Ok(repr)
    }

    /// Checks what `emit` relies on: Segments Left within the list, a TLV area of whole 8-byte
    /// units holding well-formed TLVs, and a header of at most [`MAX_HEADER_LEN`] bytes. Call
    /// it once on a `Repr` you built yourself.
    ///
    /// # Errors
    /// [`Error::BadSegmentsLeft`] or [`Error::BadLength`].
    pub fn validate(&self) -> Result<()> {
        if usize::from(self.segments_left) > self.segments.len() {
            return Err(Error::BadSegmentsLeft);
        }
        if self.segments.is_empty()
            || self.tlvs.len() % 8 != 0
            || self.buffer_len() > MAX_HEADER_LEN
        {
            return Err(Error::BadLength);
        }
        for tlv in Tlvs::new(self.tlvs) {
            tlv?;
        }
        Ok(())
    }

    /// Length of the header this emits.
    pub fn buffer_len(&self) -> usize {
        FIXED_LEN + self.segments.as_bytes().len() + self.tlvs.len()
    }

    /// Writes the header: fixed part, segment list and TLV area. Expects a `Repr` that
    /// [`Repr::validate`] accepts.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Repr::buffer_len`].
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<B>) {
        debug_assert_eq!(self.validate(), Ok(()));
        let len = self.buffer_len();
        let data = &mut packet.buffer.as_mut()[..len];
        data[field::NXT_HDR] = self.next_header.into();
        data[field::HDR_EXT_LEN] = (len / 8 - 1) as u8;
        data[field::ROUTING_TYPE] = RoutingType::SegmentRouting.into();
        data[field::SEGMENTS_LEFT] = self.segments_left;
        data[field::LAST_ENTRY] = (self.segments.len() - 1) as u8;
        data[field::FLAGS] = self.flags;
        write_u16(data, field::TAG, self.tag);
        let list_end = FIXED_LEN + self.segments.as_bytes().len();
        data[FIXED_LEN..list_end].copy_from_slice(self.segments.as_bytes());
        data[list_end..].copy_from_slice(self.tlvs);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::ipv6;
    use crate::wire::test_util::prefixes;

    /// Linux SRv6 encapsulation (`ip -6 route add 2001:db8:5::/64 encap seg6 mode encap segs
    /// fc00::1,fc00::2`) of an ICMPv6 echo request: outer IPv6 to fc00::1, SRH (Segments Left 1,
    /// Last Entry 1, list [fc00::2, fc00::1]), inner IPv6 packet. Frame 34 of
    /// `forwarder/testdata/wire/samples.pcap` (`ping -6 -c 1 -W 1 2001:db8:5::1` in
    /// `capture.sh`), from byte 14; the SRH is bytes 40..80.
    pub(crate) static ENCAP: [u8; 184] = [
        0x60, 0x09, 0x05, 0x98, 0x00, 0x90, 0x2b, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfc, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x29, 0x04, 0x04, 0x01, 0x01,
        0x00, 0x00, 0x00, 0xfc, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x02, 0xfc, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x01, 0x60, 0x09, 0x05, 0x98, 0x00, 0x40, 0x3a, 0x40, 0x20, 0x01,
        0x0d, 0xb8, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20,
        0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
        0x80, 0x00, 0xc4, 0x96, 0x37, 0x28, 0x00, 0x01, 0x8b, 0x48, 0x0c, 0x6b, 0x00, 0x00, 0x00,
        0x00, 0xc5, 0xbb, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15,
        0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24,
        0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33,
        0x34, 0x35, 0x36, 0x37,
    ];

    /// The same with an HMAC TLV (`... segs fc00::3,fc00::4 hmac 7` after `ip sr hmac set 7
    /// sha256`): SRH of 80 bytes (Hdr Ext Len 9, Flags 0x08), TLV area of 40 bytes holding one
    /// HMAC TLV (type 5, length 38, key 7, 32-byte SHA-256 HMAC). Frame 36 of the same capture
    /// (`ping -6 -c 1 -W 1 2001:db8:6::1`), from byte 14; the SRH is bytes 40..120.
    static ENCAP_HMAC: [u8; 224] = [
        0x60, 0x0d, 0xef, 0x46, 0x00, 0xb8, 0x2b, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfc, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x29, 0x09, 0x04, 0x01, 0x01,
        0x08, 0x00, 0x00, 0xfc, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x04, 0xfc, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x03, 0x05, 0x26, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x3c, 0x2d,
        0xd1, 0x67, 0xc8, 0x93, 0xae, 0x30, 0x20, 0xa6, 0x6e, 0xd1, 0x05, 0xc3, 0xf6, 0x06, 0x01,
        0xdb, 0xab, 0x61, 0x96, 0x80, 0xec, 0xe0, 0x72, 0x0e, 0xd1, 0x97, 0x76, 0x44, 0xb8, 0xa9,
        0x60, 0x0d, 0xef, 0x46, 0x00, 0x40, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x06,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x80, 0x00, 0xfe, 0xa1, 0x37,
        0xa2, 0x00, 0x01, 0x8d, 0x48, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x93, 0x35, 0x02, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a,
        0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29,
        0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
    ];

    const fn fc00(last: u16) -> Ipv6Addr {
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, last)
    }

    fn srh(sample: &[u8]) -> &[u8] {
        &sample[40..]
    }

    #[test]
    fn deconstruct() {
        let outer = ipv6::Packet::new_checked(&ENCAP[..]).unwrap();
        assert_eq!(outer.next_header(), Protocol::Ipv6Route);
        assert_eq!(outer.dst_addr(), fc00(1));

        let packet = Packet::new_checked(outer.payload()).unwrap();
        assert_eq!(packet.next_header(), Protocol::Ipv6);
        assert_eq!(packet.hdr_ext_len(), 4);
        assert_eq!(packet.header_len(), 40);
        assert_eq!(packet.routing_type(), RoutingType::SegmentRouting);
        assert_eq!(packet.segments_left(), 1);
        assert_eq!(packet.last_entry(), 1);
        assert_eq!(packet.segment_count(), 2);
        assert_eq!(packet.flags(), 0);
        assert_eq!(packet.tag(), 0);
        assert_eq!(packet.segment(0), Some(fc00(2)));
        assert_eq!(packet.segment(1), Some(fc00(1)));
        assert_eq!(packet.segment(2), None);
        // The destination is Segment List[Segments Left]; an endpoint moves on to [SL - 1].
        assert_eq!(
            packet.segment(usize::from(packet.segments_left())),
            Some(outer.dst_addr())
        );
        assert_eq!(packet.next_segment(), Some(fc00(2)));
        let segments = packet.segments();
        assert_eq!(segments.len(), 2);
        assert!(segments.iter().eq([fc00(2), fc00(1)]));
        assert_eq!(packet.tlv_area(), &[] as &[u8]);
        assert_eq!(packet.tlvs().count(), 0);

        let inner = ipv6::Packet::new_checked(packet.payload()).unwrap();
        assert_eq!(
            inner.dst_addr(),
            Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 1)
        );
        assert_eq!(inner.next_header(), Protocol::Icmpv6);
    }

    #[test]
    fn deconstruct_hmac_tlv() {
        let packet = Packet::new_checked(srh(&ENCAP_HMAC)).unwrap();
        assert_eq!(packet.hdr_ext_len(), 9);
        assert_eq!(packet.header_len(), 80);
        assert_eq!(packet.flags(), 0x08);
        assert!(packet.segments().iter().eq([fc00(4), fc00(3)]));
        assert_eq!(packet.tlv_area().len(), 40);
        let mut tlvs = packet.tlvs();
        let tlv = tlvs.next().unwrap().unwrap();
        assert_eq!(tlv.kind, TlvType::Hmac);
        assert_eq!(tlv.value.len(), 38);
        let hmac = tlv.hmac().unwrap();
        assert!(!hmac.d_bit);
        assert_eq!(hmac.key_id, 7);
        assert_eq!(hmac.hmac, &ENCAP_HMAC[88..120]);
        assert_eq!(tlvs.next(), None);
        assert_eq!(packet.payload()[0] >> 4, 6);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 144];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_next_header(Protocol::Ipv6);
        packet.set_hdr_ext_len(4);
        packet.set_routing_type(RoutingType::SegmentRouting);
        packet.set_segments_left(1);
        packet.set_last_entry(1);
        packet.set_flags(0);
        packet.set_tag(0);
        packet.set_segment(0, fc00(2));
        packet.set_segment(1, fc00(1));
        assert_eq!(packet.tlv_area_mut().len(), 0);
        packet.payload_mut().copy_from_slice(&ENCAP[80..]);
        assert_eq!(&bytes[..], srh(&ENCAP));

        let mut bytes = [0xa5u8; 184];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_next_header(Protocol::Ipv6);
        packet.set_hdr_ext_len(9);
        packet.set_routing_type(RoutingType::SegmentRouting);
        packet.set_segments_left(1);
        packet.set_last_entry(1);
        packet.set_flags(0x08);
        packet.set_tag(0);
        packet.set_segment(0, fc00(4));
        packet.set_segment(1, fc00(3));
        packet.tlv_area_mut().copy_from_slice(&ENCAP_HMAC[80..120]);
        packet.payload_mut().copy_from_slice(&ENCAP_HMAC[120..]);
        assert_eq!(&bytes[..], srh(&ENCAP_HMAC));
    }

    fn encap_repr() -> Repr<'static> {
        Repr {
            next_header: Protocol::Ipv6,
            segments_left: 1,
            flags: 0,
            tag: 0,
            segments: SegmentList::from_bytes(&ENCAP[48..80]).unwrap(),
            tlvs: &[],
        }
    }

    #[test]
    fn parse() {
        let packet = Packet::new_unchecked(srh(&ENCAP));
        let repr = Repr::parse(&packet).unwrap();
        assert_eq!(repr, encap_repr());
        assert!(repr.segments.iter().eq([fc00(2), fc00(1)]));

        let packet = Packet::new_unchecked(srh(&ENCAP_HMAC));
        let repr = Repr::parse(&packet).unwrap();
        assert_eq!(repr.flags, 0x08);
        assert_eq!(repr.segments.get(0), Some(fc00(4)));
        assert_eq!(repr.tlvs, &ENCAP_HMAC[80..120]);
    }

    #[test]
    fn emit() {
        for (sample, header_len) in [(&ENCAP[..], 40), (&ENCAP_HMAC[..], 80)] {
            let packet = Packet::new_unchecked(srh(sample));
            let repr = Repr::parse(&packet).unwrap();
            assert_eq!(repr.buffer_len(), header_len);
            let mut bytes = [0xa5u8; 80];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..header_len]));
            assert_eq!(&bytes[..header_len], &srh(sample)[..header_len]);
        }
        // From values alone.
        let segments = [fc00(2).octets(), fc00(1).octets()].concat();
        let repr = Repr {
            segments: SegmentList::from_bytes(&segments).unwrap(),
            ..encap_repr()
        };
        let mut bytes = [0u8; 40];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(&bytes[..], &srh(&ENCAP)[..40]);
    }

    #[test]
    fn truncated_at_every_length() {
        for (sample, header_len) in [(srh(&ENCAP), 40), (srh(&ENCAP_HMAC), 80)] {
            for (n, prefix) in prefixes(sample) {
                let expected = if n < header_len {
                    Err(Error::Truncated)
                } else {
                    Ok(())
                };
                assert_eq!(
                    Packet::new_checked(prefix).map(|_| ()),
                    expected,
                    "length {n}"
                );
                let parsed = Repr::parse(&Packet::new_unchecked(prefix)).map(|_| ());
                assert_eq!(parsed, expected, "length {n}");
            }
        }
    }

    fn parse_edited(sample: &[u8], edit: impl FnOnce(&mut [u8])) -> Result<()> {
        let mut bytes = [0u8; 184];
        let bytes = &mut bytes[..sample.len()];
        bytes.copy_from_slice(sample);
        edit(bytes);
        Repr::parse(&Packet::new_unchecked(&bytes[..])).map(|_| ())
    }

    #[test]
    fn routing_type_must_be_4() {
        for routing_type in [0, 2, 3, 5, 253] {
            let result = parse_edited(srh(&ENCAP), |b| b[2] = routing_type);
            assert_eq!(result, Err(Error::Unsupported), "type {routing_type}");
        }
    }

    #[test]
    fn segments_left_within_the_list() {
        assert_eq!(parse_edited(srh(&ENCAP), |b| b[3] = 0), Ok(()));
        assert_eq!(parse_edited(srh(&ENCAP), |b| b[3] = 2), Ok(()));
        for sl in [3, 4, 255] {
            assert_eq!(
                parse_edited(srh(&ENCAP), |b| b[3] = sl),
                Err(Error::BadSegmentsLeft)
            );
        }
        let packet = Packet::new_unchecked(srh(&ENCAP));
        assert_eq!(packet.next_segment(), Some(fc00(2)));
        let mut bytes = [0u8; 144];
        bytes.copy_from_slice(srh(&ENCAP));
        Packet::new_unchecked(&mut bytes[..]).set_segments_left(0);
        assert_eq!(Packet::new_unchecked(&bytes[..]).next_segment(), None);
    }

    #[test]
    fn last_entry_consistent_with_length() {
        // Three segments do not fit in Hdr Ext Len 4 (40 bytes).
        assert_eq!(
            parse_edited(srh(&ENCAP), |b| b[4] = 2),
            Err(Error::BadLength)
        );
        assert_eq!(
            parse_edited(srh(&ENCAP), |b| b[4] = 255),
            Err(Error::BadLength)
        );
        // Hdr Ext Len 3 (32 bytes) cannot hold two segments.
        assert_eq!(
            parse_edited(srh(&ENCAP), |b| b[1] = 3),
            Err(Error::BadLength)
        );
        // Hdr Ext Len 5: the 8 bytes after the list (the inner header's first bytes) become the
        // TLV area, which is not well-formed TLVs.
        assert_eq!(
            parse_edited(srh(&ENCAP), |b| b[1] = 5),
            Err(Error::BadLength)
        );
        // One segment in Hdr Ext Len 4 leaves a 16-byte TLV area: here fc00::1, not TLVs.
        assert_eq!(
            parse_edited(srh(&ENCAP), |b| b[4] = 0),
            Err(Error::BadLength)
        );
        // ... which is fine once it is padding.
        let padded = parse_edited(srh(&ENCAP), |b| {
            b[4] = 0;
            b[24] = 4; // PadN
            b[25] = 14;
        });
        assert_eq!(padded, Ok(()));
    }

    #[test]
    fn tlvs_must_fit_their_area() {
        // HMAC TLV length 39: overruns the 40-byte area by one.
        assert_eq!(
            parse_edited(srh(&ENCAP_HMAC), |b| b[41] = 39),
            Err(Error::BadLength)
        );
        // Length 30, then 8 bytes of what was HMAC read as TLVs: 0x60... overruns.
        assert_eq!(
            parse_edited(srh(&ENCAP_HMAC), |b| b[41] = 30),
            Err(Error::BadLength)
        );
        // Length 36, then Pad1, Pad1.
        let ok = parse_edited(srh(&ENCAP_HMAC), |b| {
            b[41] = 36;
            b[78] = 0;
            b[79] = 0;
        });
        assert_eq!(ok, Ok(()));
        let kinds: [TlvType; 3] = {
            let mut bytes = [0u8; 184];
            bytes.copy_from_slice(srh(&ENCAP_HMAC));
            bytes[41] = 36;
            bytes[78] = 0;
            bytes[79] = 0;
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            let mut kinds = packet.tlvs().map(|t| t.unwrap().kind);
            [
                kinds.next().unwrap(),
                kinds.next().unwrap(),
                kinds.next().unwrap(),
            ]
        };
        assert_eq!(kinds, [TlvType::Hmac, TlvType::Pad1, TlvType::Pad1]);
        // A lone type byte at the end of the area.
        assert_eq!(
            Tlvs::new(&[0, 0, 4]).collect::<Vec<_>>().last(),
            Some(&Err(Error::BadLength))
        );
    }

    #[test]
    fn segment_list_bounds() {
        assert_eq!(SegmentList::from_bytes(&[]), Err(Error::BadLength));
        assert_eq!(SegmentList::from_bytes(&[0; 15]), Err(Error::BadLength));
        assert_eq!(SegmentList::from_bytes(&[0; 17]), Err(Error::BadLength));
        assert!(SegmentList::from_bytes(&[0; 16 * MAX_SEGMENTS]).is_ok());
        assert_eq!(
            SegmentList::from_bytes(&[0; 16 * (MAX_SEGMENTS + 1)]),
            Err(Error::BadLength)
        );
        let repr = Repr {
            segments_left: 3,
            ..encap_repr()
        };
        assert_eq!(repr.validate(), Err(Error::BadSegmentsLeft));
        let repr = Repr {
            tlvs: &[0; 4],
            ..encap_repr()
        };
        assert_eq!(repr.validate(), Err(Error::BadLength));
        let repr = Repr {
            tlvs: &[4, 6, 0, 0, 0, 0, 0, 0],
            ..encap_repr()
        };
        assert_eq!(repr.validate(), Ok(()));
    }

    #[test]
    fn largest_header_round_trips() {
        let segments = [0x11u8; 16 * MAX_SEGMENTS];
        let tlvs = [0u8; 8];
        let repr = Repr {
            segments_left: MAX_SEGMENTS as u8,
            segments: SegmentList::from_bytes(&segments).unwrap(),
            tlvs: &tlvs,
            ..encap_repr()
        };
        assert_eq!(repr.buffer_len(), MAX_HEADER_LEN);
        let mut bytes = [0u8; MAX_HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[1], 255);
        assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Ok(repr));
    }
}
