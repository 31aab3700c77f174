//! ICMP for IPv4 (RFC 792): echo, destination unreachable (with RFC 1191's next-hop MTU for
//! Fragmentation Needed) and time exceeded; the others are read by the view but have no
//! [`Repr`].
//!
//! A view covers one ICMP message: pass exactly the IPv4 payload, since the checksum covers
//! every byte to the end of the buffer. ICMP has no length field of its own: a message cut
//! short is caught by the IPv4 Total Length, or else only by its checksum. Error messages carry the invoking packet's leading
//! bytes as `data`, unparsed; [`MAX_ERROR_DATA_LEN`] is how much of it a router includes.

use super::checksum;
use super::field::Rest;
use super::{read_u16, write_u16, Error, Result};

wire_enum! {
    /// ICMP message type (RFC 792; IANA "ICMP Type Numbers").
    pub enum Message(u8) {
        /// Echo Reply.
        EchoReply = 0,
        /// Destination Unreachable.
        DstUnreachable = 3,
        /// Redirect.
        Redirect = 5,
        /// Echo.
        EchoRequest = 8,
        /// Router Advertisement (RFC 1256).
        RouterAdvert = 9,
        /// Router Solicitation (RFC 1256).
        RouterSolicit = 10,
        /// Time Exceeded.
        TimeExceeded = 11,
        /// Parameter Problem.
        ParamProblem = 12,
        /// Timestamp.
        Timestamp = 13,
        /// Timestamp Reply.
        TimestampReply = 14,
    }
}

wire_enum! {
    /// Destination Unreachable codes (RFC 792, RFC 1122 §3.2.2.1, RFC 1812 §5.2.7.1).
    pub enum DstUnreachable(u8) {
        /// Net unreachable.
        NetUnreachable = 0,
        /// Host unreachable.
        HostUnreachable = 1,
        /// Protocol unreachable.
        ProtoUnreachable = 2,
        /// Port unreachable.
        PortUnreachable = 3,
        /// Fragmentation needed and DF set; carries the next-hop MTU (RFC 1191).
        FragRequired = 4,
        /// Source route failed.
        SrcRouteFailed = 5,
        /// Destination network unknown.
        DstNetUnknown = 6,
        /// Destination host unknown.
        DstHostUnknown = 7,
        /// Source host isolated.
        SrcHostIsolated = 8,
        /// Network administratively prohibited.
        NetProhibited = 9,
        /// Host administratively prohibited.
        HostProhibited = 10,
        /// Network unreachable for ToS.
        NetUnreachToS = 11,
        /// Host unreachable for ToS.
        HostUnreachToS = 12,
        /// Communication administratively prohibited (RFC 1812).
        CommProhibited = 13,
        /// Host precedence violation.
        HostPrecedViol = 14,
        /// Precedence cutoff in effect.
        PrecedCutoff = 15,
    }
}

wire_enum! {
    /// Time Exceeded codes (RFC 792).
    pub enum TimeExceeded(u8) {
        /// TTL exceeded in transit.
        TtlExpired = 0,
        /// Fragment reassembly time exceeded.
        FragExpired = 1,
    }
}

/// Byte ranges of an ICMP message (RFC 792; next-hop MTU RFC 1191 §4):
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     Type      |     Code      |          Checksum             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           Identifier          |        Sequence Number        |  echo
/// |             unused            |         Next-Hop MTU          |  dest. unreachable
/// |                             unused                            |  time exceeded
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     Data: echo data, or the invoking IP header + leading data  |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
mod field {
    use super::Rest;

    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: usize = 2;
    pub(super) const ECHO_IDENT: usize = 4;
    pub(super) const ECHO_SEQNO: usize = 6;
    pub(super) const UNUSED: core::ops::Range<usize> = 4..8;
    pub(super) const MTU: usize = 6;
    pub(super) const DATA: Rest = 8..;
}

/// Length of the ICMP header (type, code, checksum and the 4-byte rest of header).
pub const HEADER_LEN: usize = field::DATA.start;

/// Bytes of the invoking packet an error message carries at most: what keeps the ICMP error,
/// in a 20-byte IPv4 header, within 576 bytes (RFC 1812 §4.3.2.3).
pub const MAX_ERROR_DATA_LEN: usize = 576 - 20 - HEADER_LEN;

/// A read/write view of an ICMP message.
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

    /// Checks that the buffer holds the 8-byte header.
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> B {
        self.buffer
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> Message {
        Message::from(self.buffer.as_ref()[field::TYPE])
    }

    /// Message code (its meaning depends on the type).
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Echo identifier (echo request and reply).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// Echo sequence number (echo request and reply).
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_SEQNO)
    }

    /// Next-hop MTU (Destination Unreachable, Fragmentation Needed; RFC 1191).
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::MTU)
    }

    /// The data after the 8-byte header.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// Whether the checksum over the whole buffer verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xffff
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Packet<B> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, value: Message) {
        self.buffer.as_mut()[field::TYPE] = value.into();
    }

    /// Sets the message code.
    #[inline]
    pub fn set_msg_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_IDENT, value);
    }

    /// Sets the echo sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_SEQNO, value);
    }

    /// Sets the next-hop MTU.
    #[inline]
    pub fn set_next_hop_mtu(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::MTU, value);
    }

    /// Zeroes bytes 4..8 (the unused part of error messages).
    #[inline]
    pub fn clear_rest_of_header(&mut self) {
        self.buffer.as_mut()[field::UNUSED].fill(0);
    }

    /// The data, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }

    /// Computes and writes the checksum over the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::data(self.buffer.as_ref());
        self.set_checksum(checksum::finish(sum));
    }
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Packet<B> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A validated ICMP message of a type the forwarder answers or generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Repr<'a> {
    /// Echo request (type 8).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data, returned as is in the reply.
        data: &'a [u8],
    },
    /// Echo reply (type 0).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data.
        data: &'a [u8],
    },
    /// Destination unreachable (type 3).
    DstUnreachable {
        /// Code.
        reason: DstUnreachable,
        /// Next-hop MTU for [`DstUnreachable::FragRequired`]; 0 otherwise.
        next_hop_mtu: u16,
        /// The invoking packet's leading bytes.
        data: &'a [u8],
    },
    /// Time exceeded (type 11).
    TimeExceeded {
        /// Code.
        reason: TimeExceeded,
        /// The invoking packet's leading bytes.
        data: &'a [u8],
    },
}

impl<'a> Repr<'a> {
    /// Parses and validates a message, checksum included. The echo code is not checked (RFC 792
    /// says 0; nothing depends on it).
    ///
    /// # Errors
    /// [`Error::Truncated`] for fewer than 8 bytes; [`Error::BadChecksum`];
    /// [`Error::Unsupported`] for a type without a `Repr`.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a B>) -> Result<Repr<'a>> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        let data = &B::as_ref(packet.buffer)[field::DATA];
        match packet.msg_type() {
            Message::EchoRequest => Ok(Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Message::EchoReply => Ok(Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Message::DstUnreachable => {
                let reason = DstUnreachable::from(packet.msg_code());
                let next_hop_mtu = match reason {
                    DstUnreachable::FragRequired => packet.next_hop_mtu(),
                    _ => 0,
                };
                Ok(Repr::DstUnreachable {
                    reason,
                    next_hop_mtu,
                    data,
                })
            }
            Message::TimeExceeded => Ok(Repr::TimeExceeded {
                reason: TimeExceeded::from(packet.msg_code()),
                data,
            }),
            _ => Err(Error::Unsupported),
        }
    }

    /// The message's data.
    pub fn data(&self) -> &'a [u8] {
        match *self {
            Repr::EchoRequest { data, .. }
            | Repr::EchoReply { data, .. }
            | Repr::DstUnreachable { data, .. }
            | Repr::TimeExceeded { data, .. } => data,
        }
    }

    /// Length of the message this emits: 8 plus the data.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data().len()
    }

    /// Writes the whole message, checksum included, into the first [`Repr::buffer_len`] bytes
    /// of the buffer (the IPv4 Total Length must end the message there).
    ///
    /// # Panics
    /// If the buffer is shorter than [`Repr::buffer_len`].
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<B>) {
        let len = self.buffer_len();
        let packet = &mut Packet::new_unchecked(&mut packet.buffer.as_mut()[..len]);
        packet.clear_rest_of_header();
        match *self {
            Repr::EchoRequest { ident, seq_no, .. } | Repr::EchoReply { ident, seq_no, .. } => {
                let kind = match self {
                    Repr::EchoRequest { .. } => Message::EchoRequest,
                    _ => Message::EchoReply,
                };
                packet.set_msg_type(kind);
                packet.set_msg_code(0);
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
            }
            Repr::DstUnreachable {
                reason,
                next_hop_mtu,
                ..
            } => {
                packet.set_msg_type(Message::DstUnreachable);
                packet.set_msg_code(reason.into());
                if reason == DstUnreachable::FragRequired {
                    packet.set_next_hop_mtu(next_hop_mtu);
                }
            }
            Repr::TimeExceeded { reason, .. } => {
                packet.set_msg_type(Message::TimeExceeded);
                packet.set_msg_code(reason.into());
            }
        }
        let data = self.data();
        packet.data_mut()[..data.len()].copy_from_slice(data);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ip::Protocol;
    use crate::wire::ipv4;
    use crate::wire::test_util::prefixes;

    /// Echo request A → R: frame 6 of `forwarder/testdata/wire/samples.pcap` (`ping -c 1
    /// 192.0.2.254` in `capture.sh`), from byte 34 (after Ethernet and IPv4).
    static ECHO_REQUEST: [u8; 64] = [
        0x08, 0x00, 0x75, 0x3a, 0x35, 0xde, 0x00, 0x01, 0x85, 0x48, 0x0c, 0x6b, 0x00, 0x00, 0x00,
        0x00, 0xf1, 0x5f, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15,
        0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24,
        0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33,
        0x34, 0x35, 0x36, 0x37,
    ];

    /// Echo reply R → A: frame 7 of the same capture, from byte 34.
    static ECHO_REPLY: [u8; 64] = [
        0x00, 0x00, 0x7d, 0x3a, 0x35, 0xde, 0x00, 0x01, 0x85, 0x48, 0x0c, 0x6b, 0x00, 0x00, 0x00,
        0x00, 0xf1, 0x5f, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15,
        0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24,
        0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33,
        0x34, 0x35, 0x36, 0x37,
    ];

    /// Time Exceeded (TTL) from R for A's echo request to B sent with TTL 1, carrying the whole
    /// 84-byte request: frame 11 of the same capture (`ping -c 1 -W 1 -t 1 198.51.100.1`),
    /// from byte 34.
    static TIME_EXCEEDED: [u8; 92] = [
        0x0b, 0x00, 0xf4, 0xff, 0x00, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x54, 0x81, 0xd7, 0x40,
        0x00, 0x01, 0x01, 0x0b, 0x9c, 0xc0, 0x00, 0x02, 0x01, 0xc6, 0x33, 0x64, 0x01, 0x08, 0x00,
        0xb7, 0xf5, 0x35, 0xee, 0x00, 0x01, 0x86, 0x48, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0xb3,
        0x94, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
        0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26,
        0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35,
        0x36, 0x37,
    ];

    /// Port Unreachable from B for A's UDP datagram to port 33434 (IPv4 header, UDP header and
    /// the 5 bytes "lace\n"): frame 19 of the same capture (`echo lace >/dev/udp/198.51.100.1/
    /// 33434`), from byte 34.
    static PORT_UNREACHABLE: [u8; 41] = [
        0x03, 0x03, 0xe9, 0x51, 0x00, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x21, 0x48, 0xf7, 0x40,
        0x00, 0x3f, 0x11, 0x06, 0x9f, 0xc0, 0x00, 0x02, 0x01, 0xc6, 0x33, 0x64, 0x01, 0x9b, 0x1b,
        0x82, 0x9a, 0x00, 0x0d, 0x1c, 0x21, 0x6c, 0x61, 0x63, 0x65, 0x0a,
    ];

    /// Fragmentation Needed, next-hop MTU 1280, from R for A's 1428-byte echo request with DF
    /// (R–B has MTU 1280), carrying the request's first 548 bytes so that the error is 576
    /// bytes: frame 13 of the same capture (`ping -c 1 -W 1 -M do -s 1400 198.51.100.1`), from
    /// byte 34.
    static FRAG_NEEDED: [u8; 556] = [
        0x03, 0x04, 0x0e, 0xc9, 0x00, 0x00, 0x05, 0x00, 0x45, 0x00, 0x05, 0x94, 0x00, 0x00, 0x40,
        0x00, 0x40, 0x01, 0x49, 0x33, 0xc0, 0x00, 0x02, 0x01, 0xc6, 0x33, 0x64, 0x01, 0x08, 0x00,
        0x25, 0xdb, 0x36, 0x02, 0x00, 0x01, 0x86, 0x48, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x94,
        0x51, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
        0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26,
        0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35,
        0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44,
        0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53,
        0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62,
        0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71,
        0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f, 0x80,
        0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f,
        0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e,
        0x9f, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad,
        0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc,
        0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb,
        0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda,
        0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9,
        0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
        0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
        0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
        0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25,
        0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34,
        0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43,
        0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52,
        0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61,
        0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70,
        0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f,
        0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e,
        0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d,
        0x9e, 0x9f, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac,
        0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb,
        0xbc, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca,
        0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9,
        0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8,
        0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7,
        0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
        0x07,
    ];

    const A: [u8; 4] = [192, 0, 2, 1];
    const B: [u8; 4] = [198, 51, 100, 1];

    fn echo_request_repr() -> Repr<'static> {
        Repr::EchoRequest {
            ident: 0x35de,
            seq_no: 1,
            data: &ECHO_REQUEST[8..],
        }
    }

    fn samples() -> [(&'static [u8], Repr<'static>); 5] {
        [
            (&ECHO_REQUEST, echo_request_repr()),
            (
                &ECHO_REPLY,
                Repr::EchoReply {
                    ident: 0x35de,
                    seq_no: 1,
                    data: &ECHO_REPLY[8..],
                },
            ),
            (
                &TIME_EXCEEDED,
                Repr::TimeExceeded {
                    reason: TimeExceeded::TtlExpired,
                    data: &TIME_EXCEEDED[8..],
                },
            ),
            (
                &PORT_UNREACHABLE,
                Repr::DstUnreachable {
                    reason: DstUnreachable::PortUnreachable,
                    next_hop_mtu: 0,
                    data: &PORT_UNREACHABLE[8..],
                },
            ),
            (
                &FRAG_NEEDED,
                Repr::DstUnreachable {
                    reason: DstUnreachable::FragRequired,
                    next_hop_mtu: 1280,
                    data: &FRAG_NEEDED[8..],
                },
            ),
        ]
    }

    #[test]
    fn deconstruct_echo() {
        let packet = Packet::new_checked(&ECHO_REQUEST[..]).unwrap();
        assert_eq!(packet.msg_type(), Message::EchoRequest);
        assert_eq!(packet.msg_code(), 0);
        assert_eq!(packet.checksum(), 0x753a);
        assert_eq!(packet.echo_ident(), 0x35de);
        assert_eq!(packet.echo_seq_no(), 1);
        assert_eq!(packet.data(), &ECHO_REQUEST[8..]);
        assert!(packet.verify_checksum());

        let packet = Packet::new_checked(&ECHO_REPLY[..]).unwrap();
        assert_eq!(packet.msg_type(), Message::EchoReply);
        assert_eq!(packet.echo_ident(), 0x35de);
        assert!(packet.verify_checksum());
    }

    #[test]
    fn deconstruct_errors() {
        let packet = Packet::new_checked(&TIME_EXCEEDED[..]).unwrap();
        assert_eq!(packet.msg_type(), Message::TimeExceeded);
        assert_eq!(
            TimeExceeded::from(packet.msg_code()),
            TimeExceeded::TtlExpired
        );
        assert!(packet.verify_checksum());
        let invoking = ipv4::Packet::new_checked(packet.data()).unwrap();
        assert_eq!(invoking.ttl(), 1);
        assert_eq!(invoking.dst_addr().octets(), B);

        let packet = Packet::new_checked(&PORT_UNREACHABLE[..]).unwrap();
        assert_eq!(packet.msg_type(), Message::DstUnreachable);
        assert_eq!(
            DstUnreachable::from(packet.msg_code()),
            DstUnreachable::PortUnreachable
        );
        let invoking = ipv4::Packet::new_checked(packet.data()).unwrap();
        assert_eq!(invoking.protocol(), Protocol::Udp);
        assert_eq!(invoking.src_addr().octets(), A);
        assert_eq!(&invoking.payload()[8..], b"lace\n");

        let packet = Packet::new_checked(&FRAG_NEEDED[..]).unwrap();
        assert_eq!(
            DstUnreachable::from(packet.msg_code()),
            DstUnreachable::FragRequired
        );
        assert_eq!(packet.next_hop_mtu(), 1280);
        assert_eq!(packet.data().len(), MAX_ERROR_DATA_LEN);
        assert!(packet.verify_checksum());
        // The invoking packet is cut short: its header says 1428 bytes.
        let invoking = ipv4::Packet::new_unchecked(packet.data());
        assert_eq!(invoking.total_len(), 1428);
        assert!(invoking.dont_frag());
        assert_eq!(
            ipv4::Packet::new_checked(packet.data()),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 64];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_msg_type(Message::EchoRequest);
        packet.set_msg_code(0);
        packet.set_echo_ident(0x35de);
        packet.set_echo_seq_no(1);
        packet.data_mut().copy_from_slice(&ECHO_REQUEST[8..]);
        packet.fill_checksum();
        assert_eq!(bytes, ECHO_REQUEST);

        let mut bytes = [0xa5u8; 556];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_msg_type(Message::DstUnreachable);
        packet.set_msg_code(DstUnreachable::FragRequired.into());
        packet.clear_rest_of_header();
        packet.set_next_hop_mtu(1280);
        packet.data_mut().copy_from_slice(&FRAG_NEEDED[8..]);
        packet.fill_checksum();
        assert_eq!(bytes, FRAG_NEEDED);
    }

    #[test]
    fn parse() {
        for (bytes, expected) in samples() {
            assert_eq!(Repr::parse(&Packet::new_unchecked(bytes)), Ok(expected));
        }
    }

    #[test]
    fn emit() {
        for (expected, repr) in samples() {
            assert_eq!(repr.buffer_len(), expected.len());
            let mut bytes = [0xa5u8; 600];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            assert_eq!(&bytes[..expected.len()], expected);
            assert!(
                bytes[expected.len()..].iter().all(|&b| b == 0xa5),
                "wrote past the message"
            );
        }
    }

    #[test]
    fn reply_from_request() {
        // What the gateway does: the reply echoes ident, sequence number and data.
        let Ok(Repr::EchoRequest {
            ident,
            seq_no,
            data,
        }) = Repr::parse(&Packet::new_unchecked(&ECHO_REQUEST[..]))
        else {
            panic!("not an echo request");
        };
        let reply = Repr::EchoReply {
            ident,
            seq_no,
            data,
        };
        let mut bytes = [0u8; 64];
        reply.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, ECHO_REPLY);
    }

    #[test]
    fn truncated_at_every_length() {
        for (sample, _) in samples() {
            for (n, prefix) in prefixes(sample) {
                let packet = Packet::new_unchecked(prefix);
                if n < HEADER_LEN {
                    assert_eq!(packet.check_len(), Err(Error::Truncated), "length {n}");
                    assert_eq!(Repr::parse(&packet), Err(Error::Truncated));
                } else if packet.verify_checksum() {
                    // ICMP has no length field: a cut that happens to keep the sum (the cut
                    // bytes summing to zero) is a valid, shorter message.
                    assert_eq!(
                        Repr::parse(&packet).unwrap().data(),
                        &prefix[8..],
                        "length {n}"
                    );
                } else {
                    assert_eq!(Repr::parse(&packet), Err(Error::BadChecksum), "length {n}");
                }
            }
        }
    }

    #[test]
    fn bad_fields() {
        let mut bytes = ECHO_REQUEST;
        bytes[20] ^= 0x40;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&bytes[..])),
            Err(Error::BadChecksum)
        );

        // Timestamp request (13), checksum fixed: well-formed, but no Repr.
        let mut bytes = ECHO_REQUEST;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_msg_type(Message::Timestamp);
        packet.fill_checksum();
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&bytes[..])),
            Err(Error::Unsupported)
        );

        // An unknown unreachable code is kept.
        let mut bytes = PORT_UNREACHABLE;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_msg_code(42);
        packet.fill_checksum();
        let repr = Repr::parse(&Packet::new_unchecked(&bytes[..])).unwrap();
        assert!(matches!(
            repr,
            Repr::DstUnreachable {
                reason: DstUnreachable::Unknown(42),
                next_hop_mtu: 0,
                ..
            }
        ));
    }
}
