//! ICMP for IPv6 (RFC 4443) and the Neighbor Discovery messages the forwarder answers and sends
//! (RFC 4861 §4.3, §4.4: Neighbor Solicitation and Advertisement, with their link-layer
//! address options, §4.6.1).
//!
//! A view covers one ICMPv6 message: pass exactly the IPv6 payload (after any extension
//! headers). The checksum covers the IPv6 pseudo-header (RFC 8200 §8.1), so verifying and
//! filling it takes the IPv6 source and destination addresses. ICMPv6 has no length field: a
//! message cut short is caught by the IPv6 Payload Length, or else only by its checksum.
//!
//! [`Repr::parse`] applies the receive checks of RFC 4861 §7.1.1 and §7.1.2 that need only the
//! message and its addresses; the hop-limit check (the IPv6 Hop Limit must be
//! [`NDISC_HOP_LIMIT`]) is the caller's, which holds the IPv6 header.

use core::ops::BitOr;

use super::checksum;
use super::ethernet::Address as EthernetAddress;
use super::field::{Field, Rest};
use super::ip::Protocol;
use super::{read_ipv6, read_u16, read_u32, write_u16, write_u32, Error, Ipv6Addr, Result};

wire_enum! {
    /// ICMPv6 message type (RFC 4443 §2.1; IANA "ICMPv6 Type Numbers").
    pub enum Message(u8) {
        /// Destination Unreachable.
        DstUnreachable = 1,
        /// Packet Too Big.
        PktTooBig = 2,
        /// Time Exceeded.
        TimeExceeded = 3,
        /// Parameter Problem.
        ParamProblem = 4,
        /// Echo Request.
        EchoRequest = 128,
        /// Echo Reply.
        EchoReply = 129,
        /// Multicast Listener Query (RFC 2710).
        MldQuery = 130,
        /// Multicast Listener Report (RFC 2710).
        MldReport = 131,
        /// Multicast Listener Done (RFC 2710).
        MldDone = 132,
        /// Router Solicitation (RFC 4861 §4.1).
        RouterSolicit = 133,
        /// Router Advertisement (RFC 4861 §4.2).
        RouterAdvert = 134,
        /// Neighbor Solicitation (RFC 4861 §4.3).
        NeighborSolicit = 135,
        /// Neighbor Advertisement (RFC 4861 §4.4).
        NeighborAdvert = 136,
        /// Redirect (RFC 4861 §4.5).
        Redirect = 137,
        /// Version 2 Multicast Listener Report (RFC 9777).
        MldReportV2 = 143,
    }
}

impl Message {
    /// Whether this is an error message (types 0–127, RFC 4443 §2.1).
    pub fn is_error(self) -> bool {
        u8::from(self) < 128
    }
}

wire_enum! {
    /// Destination Unreachable codes (RFC 4443 §3.1; 7: RFC 6554).
    pub enum DstUnreachable(u8) {
        /// No route to destination.
        NoRoute = 0,
        /// Communication administratively prohibited.
        AdminProhibit = 1,
        /// Beyond scope of source address.
        BeyondScope = 2,
        /// Address unreachable.
        AddrUnreachable = 3,
        /// Port unreachable.
        PortUnreachable = 4,
        /// Source address failed ingress/egress policy.
        FailedPolicy = 5,
        /// Reject route to destination.
        RejectRoute = 6,
        /// Error in Source Routing Header.
        SrcRoutingHeader = 7,
    }
}

wire_enum! {
    /// Time Exceeded codes (RFC 4443 §3.3).
    pub enum TimeExceeded(u8) {
        /// Hop limit exceeded in transit.
        HopLimitExceeded = 0,
        /// Fragment reassembly time exceeded.
        FragReassemblyExceeded = 1,
    }
}

wire_enum! {
    /// Parameter Problem codes (RFC 4443 §3.4; 3: RFC 7112; 4: RFC 8754 §5.4).
    pub enum ParamProblem(u8) {
        /// Erroneous header field encountered (e.g. SRH Segments Left, RFC 8754 §4.3.1.1).
        ErroneousHdrField = 0,
        /// Unrecognized Next Header type encountered.
        UnrecognizedNxtHdr = 1,
        /// Unrecognized IPv6 option encountered.
        UnrecognizedOption = 2,
        /// IPv6 first fragment has incomplete IPv6 header chain.
        IncompleteHeaderChain = 3,
        /// SR upper-layer header error.
        SrUpperLayerHeader = 4,
    }
}

wire_enum! {
    /// Neighbor Discovery option type (RFC 4861 §4.6; 14: RFC 3971).
    pub enum NdiscOptionType(u8) {
        /// Source Link-Layer Address.
        SourceLinkLayerAddr = 1,
        /// Target Link-Layer Address.
        TargetLinkLayerAddr = 2,
        /// Prefix Information.
        PrefixInformation = 3,
        /// Redirected Header.
        RedirectedHeader = 4,
        /// MTU.
        Mtu = 5,
        /// Nonce (sent by Linux in DAD solicitations).
        Nonce = 14,
    }
}

/// Neighbor Advertisement flags (RFC 4861 §4.4): Router, Solicited, Override.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NeighborFlags(u8);

impl NeighborFlags {
    /// R: the sender is a router.
    pub const ROUTER: NeighborFlags = NeighborFlags(0x80);
    /// S: sent in response to a solicitation.
    pub const SOLICITED: NeighborFlags = NeighborFlags(0x40);
    /// O: override an existing cache entry.
    pub const OVERRIDE: NeighborFlags = NeighborFlags(0x20);
    /// No flags.
    pub const EMPTY: NeighborFlags = NeighborFlags(0);

    /// The flags in a flags byte; reserved bits are dropped.
    pub const fn from_bits_truncate(bits: u8) -> NeighborFlags {
        NeighborFlags(bits & 0xe0)
    }

    /// The flags byte.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: NeighborFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for NeighborFlags {
    type Output = NeighborFlags;

    fn bitor(self, rhs: NeighborFlags) -> NeighborFlags {
        NeighborFlags(self.0 | rhs.0)
    }
}

/// Byte ranges of ICMPv6 messages (RFC 4443 §2.1, §3, §4; RFC 4861 §4.3, §4.4):
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     Type      |     Code      |          Checksum             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           Identifier          |        Sequence Number        |  echo
/// |                              MTU                              |  packet too big
/// |                            Pointer                            |  parameter problem
/// |                             Unused                            |  unreachable, time exceeded
/// |                           Reserved                            |  neighbor solicitation
/// |R|S|O|                     Reserved                            |  neighbor advertisement
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |   echo data, or as much of the invoking packet as fits 1280   |
///
/// neighbor solicitation and advertisement, from byte 8:
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                       Target Address (16)                     |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |   Options: | Type | Length (× 8 bytes) | value ... |  ...
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// Link-layer address option (Ethernet): | 1 or 2 | 1 | MAC (6) |
/// ```
mod field {
    use super::{Field, Rest};

    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: usize = 2;
    pub(super) const ECHO_IDENT: usize = 4;
    pub(super) const ECHO_SEQNO: usize = 6;
    pub(super) const MTU: usize = 4;
    pub(super) const POINTER: usize = 4;
    pub(super) const BODY: Field = 4..8;
    pub(super) const NEIGHBOR_FLAGS: usize = 4;
    pub(super) const DATA: Rest = 8..;
    pub(super) const TARGET_ADDR: Field = 8..24;
    pub(super) const NDISC_OPTIONS: Rest = 24..;
}

/// Length of the ICMPv6 header (type, code, checksum and the 4-byte message body).
pub const HEADER_LEN: usize = field::DATA.start;
/// Length of a Neighbor Solicitation or Advertisement without options.
pub const NEIGHBOR_LEN: usize = field::NDISC_OPTIONS.start;
/// Length of an Ethernet link-layer address option.
pub const LLADDR_OPTION_LEN: usize = 8;
/// The only Hop Limit a Neighbor Discovery message may arrive with (RFC 4861 §7.1).
pub const NDISC_HOP_LIMIT: u8 = 255;
/// Bytes of the invoking packet an error message carries at most: what keeps the error, in a
/// 40-byte IPv6 header, within the minimum MTU of 1280 (RFC 4443 §2.4(c)).
pub const MAX_ERROR_DATA_LEN: usize = 1280 - 40 - HEADER_LEN;

/// A read/write view of an ICMPv6 message.
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

    /// Checks that the buffer holds the 8-byte header, and the 24 bytes of a Neighbor
    /// Solicitation or Advertisement (RFC 4861 §7.1.1: "ICMP length is 24 or more octets").
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || (self.is_neighbor_message() && len < NEIGHBOR_LEN) {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> B {
        self.buffer
    }

    fn is_neighbor_message(&self) -> bool {
        matches!(
            self.buffer.as_ref().first().map(|&t| Message::from(t)),
            Some(Message::NeighborSolicit | Message::NeighborAdvert)
        )
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

    /// MTU (Packet Too Big).
    #[inline]
    pub fn pkt_too_big_mtu(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::MTU)
    }

    /// Pointer to the offending byte of the invoking packet (Parameter Problem).
    #[inline]
    pub fn param_problem_ptr(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::POINTER)
    }

    /// Neighbor Advertisement flags (byte 4; meaningful for advertisements only).
    #[inline]
    pub fn neighbor_flags(&self) -> NeighborFlags {
        NeighborFlags::from_bits_truncate(self.buffer.as_ref()[field::NEIGHBOR_FLAGS])
    }

    /// Target address of a Neighbor Solicitation or Advertisement; `None` for other types.
    #[inline]
    pub fn target_addr(&self) -> Option<Ipv6Addr> {
        if !self.is_neighbor_message() {
            return None;
        }
        let bytes = self.buffer.as_ref().get(field::TARGET_ADDR)?;
        Some(read_ipv6(bytes, 0))
    }

    /// The options of a Neighbor Solicitation or Advertisement (none for other types).
    #[inline]
    pub fn ndisc_options(&self) -> NdiscOptions<'_> {
        let area = if self.is_neighbor_message() {
            self.buffer
                .as_ref()
                .get(field::NDISC_OPTIONS)
                .unwrap_or_default()
        } else {
            &[]
        };
        NdiscOptions { area }
    }

    /// Everything after the 8-byte header: echo data, an error's invoking packet, or a neighbor
    /// message's target address and options.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// Whether the checksum over the pseudo-header and the whole buffer verifies.
    #[inline]
    pub fn verify_checksum(&self, src_addr: &Ipv6Addr, dst_addr: &Ipv6Addr) -> bool {
        let data = self.buffer.as_ref();
        let pseudo =
            checksum::pseudo_header_v6(src_addr, dst_addr, Protocol::Icmpv6, data.len() as u32);
        checksum::combine(&[pseudo, checksum::data(data)]) == 0xffff
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

    /// Sets the Packet Too Big MTU.
    #[inline]
    pub fn set_pkt_too_big_mtu(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::MTU, value);
    }

    /// Sets the Parameter Problem pointer.
    #[inline]
    pub fn set_param_problem_ptr(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::POINTER, value);
    }

    /// Zeroes the 4-byte message body (bytes 4..8: unused or reserved fields).
    #[inline]
    pub fn clear_body(&mut self) {
        self.buffer.as_mut()[field::BODY].fill(0);
    }

    /// Sets the Neighbor Advertisement flags (the rest of byte 4 is zeroed).
    #[inline]
    pub fn set_neighbor_flags(&mut self, value: NeighborFlags) {
        self.buffer.as_mut()[field::NEIGHBOR_FLAGS] = value.bits();
    }

    /// Sets the target address (of a neighbor message).
    #[inline]
    pub fn set_target_addr(&mut self, value: Ipv6Addr) {
        self.buffer.as_mut()[field::TARGET_ADDR].copy_from_slice(&value.octets());
    }

    /// The options area of a neighbor message (from byte 24), writable.
    #[inline]
    pub fn ndisc_options_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::NDISC_OPTIONS]
    }

    /// Everything after the 8-byte header, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }

    /// Computes and writes the checksum over the pseudo-header and the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self, src_addr: &Ipv6Addr, dst_addr: &Ipv6Addr) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let pseudo =
            checksum::pseudo_header_v6(src_addr, dst_addr, Protocol::Icmpv6, data.len() as u32);
        let sum = checksum::combine(&[pseudo, checksum::data(data)]);
        self.set_checksum(checksum::finish(sum));
    }
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Packet<B> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// One Neighbor Discovery option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NdiscOption<'a> {
    /// Type.
    pub kind: NdiscOptionType,
    /// The bytes after type and length (length × 8 − 2 of them).
    pub value: &'a [u8],
}

impl NdiscOption<'_> {
    /// The Ethernet address of a link-layer address option of length 1; `None` otherwise.
    pub fn ethernet_addr(&self) -> Option<EthernetAddress> {
        match self.kind {
            NdiscOptionType::SourceLinkLayerAddr | NdiscOptionType::TargetLinkLayerAddr
                if self.value.len() == 6 =>
            {
                EthernetAddress::from_bytes(self.value)
            }
            _ => None,
        }
    }
}

/// Iterator over Neighbor Discovery options: yields each option, or one [`Error::BadLength`]
/// for an option of length 0 or one that overruns the message (RFC 4861 §4.6: such a packet is
/// discarded), after which it stops.
#[derive(Debug, Clone)]
pub struct NdiscOptions<'a> {
    area: &'a [u8],
}

impl<'a> NdiscOptions<'a> {
    /// Iterates over the options in `area`.
    pub fn new(area: &'a [u8]) -> NdiscOptions<'a> {
        NdiscOptions { area }
    }
}

impl<'a> Iterator for NdiscOptions<'a> {
    type Item = Result<NdiscOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let area = self.area;
        if area.is_empty() {
            return None;
        }
        let len = usize::from(area.get(1).copied().unwrap_or(0)) * 8;
        let Some(option) = area.get(..len).filter(|_| len > 0) else {
            self.area = &[];
            return Some(Err(Error::BadLength));
        };
        self.area = &area[len..];
        Some(Ok(NdiscOption {
            kind: NdiscOptionType::from(option[0]),
            value: &option[2..],
        }))
    }
}

/// Finds the first option of `kind` and reads it as an Ethernet address.
fn find_lladdr(
    options: NdiscOptions<'_>,
    kind: NdiscOptionType,
) -> Result<Option<EthernetAddress>> {
    let mut found = None;
    for option in options {
        let option = option?;
        // The first one counts; later duplicates are ignored, as Linux does.
        if option.kind == kind && found.is_none() {
            found = Some(option.ethernet_addr().ok_or(Error::Malformed)?);
        }
    }
    Ok(found)
}

/// A validated ICMPv6 message of a type the forwarder answers or generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Repr<'a> {
    /// Echo Request (type 128).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data.
        data: &'a [u8],
    },
    /// Echo Reply (type 129).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data.
        data: &'a [u8],
    },
    /// Destination Unreachable (type 1).
    DstUnreachable {
        /// Code.
        reason: DstUnreachable,
        /// The invoking packet's leading bytes.
        data: &'a [u8],
    },
    /// Packet Too Big (type 2).
    PktTooBig {
        /// MTU of the next-hop link.
        mtu: u32,
        /// The invoking packet's leading bytes.
        data: &'a [u8],
    },
    /// Time Exceeded (type 3).
    TimeExceeded {
        /// Code.
        reason: TimeExceeded,
        /// The invoking packet's leading bytes.
        data: &'a [u8],
    },
    /// Parameter Problem (type 4).
    ParamProblem {
        /// Code.
        reason: ParamProblem,
        /// Offset of the offending byte in the invoking packet.
        pointer: u32,
        /// The invoking packet's leading bytes.
        data: &'a [u8],
    },
    /// Neighbor Solicitation (type 135).
    NeighborSolicit {
        /// The address whose link-layer address is sought.
        target_addr: Ipv6Addr,
        /// The Source Link-Layer Address option, if present.
        source_lladdr: Option<EthernetAddress>,
    },
    /// Neighbor Advertisement (type 136).
    NeighborAdvert {
        /// Router / Solicited / Override.
        flags: NeighborFlags,
        /// The address advertised.
        target_addr: Ipv6Addr,
        /// The Target Link-Layer Address option, if present.
        target_lladdr: Option<EthernetAddress>,
    },
}

impl<'a> Repr<'a> {
    /// Parses and validates a message sent from `src_addr` to `dst_addr`, checksum included.
    ///
    /// Neighbor messages get RFC 4861's checks: code 0, a non-multicast target, options of
    /// non-zero length within the message, an Ethernet-sized link-layer address option; for a
    /// solicitation from the unspecified address, a solicited-node destination and no source
    /// link-layer address (§7.1.1); for an advertisement to a multicast address, no Solicited
    /// flag (§7.1.2). Unknown options are skipped.
    ///
    /// # Errors
    /// [`Error::Truncated`]; [`Error::BadChecksum`]; [`Error::BadLength`] for a bad option
    /// length; [`Error::Malformed`] for a failed RFC 4861 check; [`Error::Unsupported`] for a
    /// type without a `Repr`.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(
        src_addr: &Ipv6Addr,
        dst_addr: &Ipv6Addr,
        packet: &Packet<&'a B>,
    ) -> Result<Repr<'a>> {
        packet.check_len()?;
        if !packet.verify_checksum(src_addr, dst_addr) {
            return Err(Error::BadChecksum);
        }
        let bytes: &'a [u8] = B::as_ref(packet.buffer);
        let data = &bytes[field::DATA];
        let code = packet.msg_code();
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
            Message::DstUnreachable => Ok(Repr::DstUnreachable {
                reason: DstUnreachable::from(code),
                data,
            }),
            Message::PktTooBig => Ok(Repr::PktTooBig {
                mtu: packet.pkt_too_big_mtu(),
                data,
            }),
            Message::TimeExceeded => Ok(Repr::TimeExceeded {
                reason: TimeExceeded::from(code),
                data,
            }),
            Message::ParamProblem => Ok(Repr::ParamProblem {
                reason: ParamProblem::from(code),
                pointer: packet.param_problem_ptr(),
                data,
            }),
            Message::NeighborSolicit => {
                let target_addr = read_ipv6(bytes, field::TARGET_ADDR.start);
                if code != 0 || target_addr.is_multicast() {
                    return Err(Error::Malformed);
                }
                let options = NdiscOptions::new(&bytes[field::NDISC_OPTIONS]);
                let source_lladdr = find_lladdr(options, NdiscOptionType::SourceLinkLayerAddr)?;
                if src_addr.is_unspecified()
                    && (source_lladdr.is_some() || !is_solicited_node(dst_addr))
                {
                    return Err(Error::Malformed);
                }
                Ok(Repr::NeighborSolicit {
                    target_addr,
                    source_lladdr,
                })
            }
            Message::NeighborAdvert => {
                let target_addr = read_ipv6(bytes, field::TARGET_ADDR.start);
                let flags = packet.neighbor_flags();
                if code != 0
                    || target_addr.is_multicast()
                    || (dst_addr.is_multicast() && flags.contains(NeighborFlags::SOLICITED))
                {
                    return Err(Error::Malformed);
                }
                let options = NdiscOptions::new(&bytes[field::NDISC_OPTIONS]);
                let target_lladdr = find_lladdr(options, NdiscOptionType::TargetLinkLayerAddr)?;
                Ok(Repr::NeighborAdvert {
                    flags,
                    target_addr,
                    target_lladdr,
                })
            }
            _ => Err(Error::Unsupported),
        }
    }

    /// Length of the message this emits.
    pub fn buffer_len(&self) -> usize {
        match *self {
            Repr::EchoRequest { data, .. }
            | Repr::EchoReply { data, .. }
            | Repr::DstUnreachable { data, .. }
            | Repr::PktTooBig { data, .. }
            | Repr::TimeExceeded { data, .. }
            | Repr::ParamProblem { data, .. } => HEADER_LEN + data.len(),
            Repr::NeighborSolicit {
                source_lladdr: lladdr,
                ..
            }
            | Repr::NeighborAdvert {
                target_lladdr: lladdr,
                ..
            } => {
                NEIGHBOR_LEN
                    + if lladdr.is_some() {
                        LLADDR_OPTION_LEN
                    } else {
                        0
                    }
            }
        }
    }

    /// Writes the message, with its checksum for `src_addr` → `dst_addr`, into the first
    /// [`Repr::buffer_len`] bytes of the buffer (the IPv6 Payload Length must say that many).
    ///
    /// # Panics
    /// If the buffer is shorter than [`Repr::buffer_len`].
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        src_addr: &Ipv6Addr,
        dst_addr: &Ipv6Addr,
        packet: &mut Packet<B>,
    ) {
        let len = self.buffer_len();
        let mut packet = Packet::new_unchecked(&mut packet.buffer.as_mut()[..len]);
        packet.clear_body();
        let (kind, code, data) = match *self {
            Repr::EchoRequest {
                ident,
                seq_no,
                data,
            }
            | Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                let kind = match self {
                    Repr::EchoRequest { .. } => Message::EchoRequest,
                    _ => Message::EchoReply,
                };
                (kind, 0, data)
            }
            Repr::DstUnreachable { reason, data } => (Message::DstUnreachable, reason.into(), data),
            Repr::PktTooBig { mtu, data } => {
                packet.set_pkt_too_big_mtu(mtu);
                (Message::PktTooBig, 0, data)
            }
            Repr::TimeExceeded { reason, data } => (Message::TimeExceeded, reason.into(), data),
            Repr::ParamProblem {
                reason,
                pointer,
                data,
            } => {
                packet.set_param_problem_ptr(pointer);
                (Message::ParamProblem, reason.into(), data)
            }
            Repr::NeighborSolicit {
                target_addr,
                source_lladdr,
            } => {
                packet.set_target_addr(target_addr);
                emit_lladdr(
                    &mut packet,
                    NdiscOptionType::SourceLinkLayerAddr,
                    source_lladdr,
                );
                (Message::NeighborSolicit, 0, &[][..])
            }
            Repr::NeighborAdvert {
                flags,
                target_addr,
                target_lladdr,
            } => {
                packet.set_neighbor_flags(flags);
                packet.set_target_addr(target_addr);
                emit_lladdr(
                    &mut packet,
                    NdiscOptionType::TargetLinkLayerAddr,
                    target_lladdr,
                );
                (Message::NeighborAdvert, 0, &[][..])
            }
        };
        packet.set_msg_type(kind);
        packet.set_msg_code(code);
        if !data.is_empty() {
            packet.data_mut().copy_from_slice(data);
        }
        packet.fill_checksum(src_addr, dst_addr);
    }
}

/// Writes a link-layer address option after a neighbor message's target address.
fn emit_lladdr(
    packet: &mut Packet<&mut [u8]>,
    kind: NdiscOptionType,
    lladdr: Option<EthernetAddress>,
) {
    if let Some(lladdr) = lladdr {
        let option = &mut packet.ndisc_options_mut()[..LLADDR_OPTION_LEN];
        option[0] = kind.into();
        option[1] = (LLADDR_OPTION_LEN / 8) as u8;
        option[2..].copy_from_slice(lladdr.as_bytes());
    }
}

/// Whether `addr` is a solicited-node multicast address, ff02::1:ffXX:XXXX (RFC 4291 §2.7.1).
pub fn is_solicited_node(addr: &Ipv6Addr) -> bool {
    let o = addr.octets();
    o[..13] == [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff]
}

/// The solicited-node multicast address of `addr` (RFC 4291 §2.7.1), where a Neighbor
/// Solicitation for it is sent.
pub fn solicited_node(addr: &Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    let mut s = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0, 0, 0];
    s[13..].copy_from_slice(&o[13..]);
    Ipv6Addr::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_util::prefixes;
    use crate::wire::{ipv6, srh};

    const A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 1);
    const R: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0xfe);
    const B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 1);
    const R_SOLICITED: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 0xfe);
    const A_MAC: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x0a, 0x01]);
    const R_MAC: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x0a, 0x02]);

    /// Neighbor Solicitation A → ff02::1:ff00:fe for R's address, with A's source link-layer
    /// address: frame 22 of `forwarder/testdata/wire/samples.pcap` (`ping -6 -c 1 -W 1
    /// 2001:db8:a::fe` in `capture.sh`), from byte 54 (after Ethernet and IPv6).
    static NEIGHBOR_SOLICIT: [u8; 32] = [
        0x87, 0x00, 0x10, 0x1b, 0x00, 0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x01, 0x01, 0x02, 0x00, 0x00, 0x00,
        0x0a, 0x01,
    ];

    /// Neighbor Advertisement R → A (Router, Solicited, Override) with R's target link-layer
    /// address: frame 23 of the same capture, from byte 54.
    static NEIGHBOR_ADVERT: [u8; 32] = [
        0x88, 0x00, 0xfe, 0x5a, 0xe0, 0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x02, 0x01, 0x02, 0x00, 0x00, 0x00,
        0x0a, 0x02,
    ];

    /// Echo Request A → R: frame 24, from byte 54.
    static ECHO_REQUEST: [u8; 64] = [
        0x80, 0x00, 0x34, 0x5d, 0x36, 0xfc, 0x00, 0x01, 0x8a, 0x48, 0x0c, 0x6b, 0x00, 0x00, 0x00,
        0x00, 0x59, 0x1f, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15,
        0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24,
        0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33,
        0x34, 0x35, 0x36, 0x37,
    ];

    /// Echo Reply R → A: frame 25, from byte 54.
    static ECHO_REPLY: [u8; 64] = [
        0x81, 0x00, 0x33, 0x5d, 0x36, 0xfc, 0x00, 0x01, 0x8a, 0x48, 0x0c, 0x6b, 0x00, 0x00, 0x00,
        0x00, 0x59, 0x1f, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15,
        0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24,
        0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33,
        0x34, 0x35, 0x36, 0x37,
    ];

    /// Time Exceeded (hop limit) R → A for A's echo request to B sent with hop limit 1: frame
    /// 29 (`ping -6 -c 1 -W 1 -t 1 2001:db8:b::1`), from byte 54.
    static TIME_EXCEEDED: [u8; 112] = [
        0x03, 0x00, 0x39, 0x20, 0x00, 0x00, 0x00, 0x00, 0x60, 0x01, 0xcc, 0xe7, 0x00, 0x40, 0x3a,
        0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x80, 0x00, 0x2a, 0x80, 0x37, 0x09, 0x00, 0x01, 0x8a, 0x48, 0x0c, 0x6b,
        0x00, 0x00, 0x00, 0x00, 0x5f, 0xeb, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12,
        0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21,
        0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30,
        0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
    ];

    /// Port Unreachable B → A for A's UDP datagram to port 33434: frame 33 (`echo lace
    /// >/dev/udp/2001:db8:b::1/33434`), from byte 54.
    static PORT_UNREACHABLE: [u8; 61] = [
        0x01, 0x04, 0xbf, 0xc8, 0x00, 0x00, 0x00, 0x00, 0x60, 0x00, 0x72, 0x04, 0x00, 0x0d, 0x11,
        0x3f, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0xa7, 0x80, 0x82, 0x9a, 0x00, 0x0d, 0xa0, 0x69, 0x6c, 0x61, 0x63, 0x65,
        0x0a,
    ];

    /// Destination Unreachable (no route) R → A for A's SRv6-encapsulated echo request to
    /// fc00::1 (R has no route to fc00::/16); the invoking packet carries the SRH: frame 35
    /// (`ping -6 -c 1 -W 1 2001:db8:5::1` through the seg6 route), from byte 54.
    static NO_ROUTE: [u8; 192] = [
        0x01, 0x00, 0x20, 0x97, 0x00, 0x00, 0x00, 0x00, 0x60, 0x09, 0x05, 0x98, 0x00, 0x90, 0x2b,
        0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0xfc, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x29, 0x04, 0x04, 0x01, 0x01, 0x00, 0x00, 0x00, 0xfc, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0xfc, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x60, 0x09,
        0x05, 0x98, 0x00, 0x40, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x80, 0x00, 0xc4, 0x96, 0x37, 0x28, 0x00,
        0x01, 0x8b, 0x48, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0xc5, 0xbb, 0x0c, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c,
        0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b,
        0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
    ];

    /// Packet Too Big (MTU 1280) R → A for A's 1448-byte echo request (R–B has MTU 1280), with
    /// the first 1232 bytes of it so that the error fills 1280: frame 31 (`ping -6 -c 1 -W 1
    /// -M do -s 1400 2001:db8:b::1`), from byte 54.
    static PKT_TOO_BIG: [u8; 1240] = [
        0x02, 0x00, 0x09, 0xbe, 0x00, 0x00, 0x05, 0x00, 0x60, 0x01, 0xcc, 0xe7, 0x05, 0x80, 0x3a,
        0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x80, 0x00, 0xf1, 0x7b, 0x37, 0x0f, 0x00, 0x01, 0x8b, 0x48, 0x0c, 0x6b,
        0x00, 0x00, 0x00, 0x00, 0xf0, 0x5f, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12,
        0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21,
        0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30,
        0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f,
        0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e,
        0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d,
        0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c,
        0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b,
        0x7c, 0x7d, 0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a,
        0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99,
        0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
        0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7,
        0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6,
        0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5,
        0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2, 0xe3, 0xe4,
        0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf2, 0xf3,
        0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0x00, 0x01, 0x02,
        0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11,
        0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20,
        0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
        0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e,
        0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d,
        0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c,
        0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b,
        0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a,
        0x7b, 0x7c, 0x7d, 0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
        0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98,
        0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
        0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6,
        0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5,
        0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4,
        0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2, 0xe3,
        0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf2,
        0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0x00, 0x01,
        0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10,
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
        0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e,
        0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d,
        0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c,
        0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b,
        0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a,
        0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79,
        0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88,
        0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97,
        0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6,
        0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5,
        0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4,
        0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3,
        0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2,
        0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1,
        0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0x00,
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
        0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e,
        0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d,
        0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c,
        0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b,
        0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a,
        0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
        0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78,
        0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
        0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96,
        0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5,
        0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3, 0xb4,
        0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3,
        0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2,
        0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1,
        0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xf0,
        0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e,
        0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d,
        0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c,
        0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b,
        0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a,
        0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59,
        0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
        0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77,
        0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86,
        0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95,
        0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f,
    ];

    /// Router Solicitation fe80::ff:fe00:c01 → ff02::2 with a source link-layer address option
    /// (no `Repr`: the forwarder does not act on it): frame 2 of
    /// `forwarder/testdata/wire/samples-vlan.pcap` (sent by the kernel when a1 came up), from
    /// byte 58 (after Ethernet, the VLAN tag and IPv6).
    static ROUTER_SOLICIT: [u8; 16] = [
        0x85, 0x00, 0x63, 0x2c, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0c,
        0x01,
    ];

    /// Every sample with the addresses it was sent between and what it parses to.
    fn samples() -> [(&'static [u8], Ipv6Addr, Ipv6Addr, Repr<'static>); 8] {
        [
            (
                &NEIGHBOR_SOLICIT,
                A,
                R_SOLICITED,
                Repr::NeighborSolicit {
                    target_addr: R,
                    source_lladdr: Some(A_MAC),
                },
            ),
            (
                &NEIGHBOR_ADVERT,
                R,
                A,
                Repr::NeighborAdvert {
                    flags: NeighborFlags::ROUTER
                        | NeighborFlags::SOLICITED
                        | NeighborFlags::OVERRIDE,
                    target_addr: R,
                    target_lladdr: Some(R_MAC),
                },
            ),
            (
                &ECHO_REQUEST,
                A,
                R,
                Repr::EchoRequest {
                    ident: 0x36fc,
                    seq_no: 1,
                    data: &ECHO_REQUEST[8..],
                },
            ),
            (
                &ECHO_REPLY,
                R,
                A,
                Repr::EchoReply {
                    ident: 0x36fc,
                    seq_no: 1,
                    data: &ECHO_REPLY[8..],
                },
            ),
            (
                &TIME_EXCEEDED,
                R,
                A,
                Repr::TimeExceeded {
                    reason: TimeExceeded::HopLimitExceeded,
                    data: &TIME_EXCEEDED[8..],
                },
            ),
            (
                &PORT_UNREACHABLE,
                B,
                A,
                Repr::DstUnreachable {
                    reason: DstUnreachable::PortUnreachable,
                    data: &PORT_UNREACHABLE[8..],
                },
            ),
            (
                &NO_ROUTE,
                R,
                A,
                Repr::DstUnreachable {
                    reason: DstUnreachable::NoRoute,
                    data: &NO_ROUTE[8..],
                },
            ),
            (
                &PKT_TOO_BIG,
                R,
                A,
                Repr::PktTooBig {
                    mtu: 1280,
                    data: &PKT_TOO_BIG[8..],
                },
            ),
        ]
    }

    #[test]
    fn deconstruct_neighbor_solicit() {
        let packet = Packet::new_checked(&NEIGHBOR_SOLICIT[..]).unwrap();
        assert_eq!(packet.msg_type(), Message::NeighborSolicit);
        assert_eq!(packet.msg_code(), 0);
        assert_eq!(packet.checksum(), 0x101b);
        assert_eq!(packet.target_addr(), Some(R));
        assert!(packet.verify_checksum(&A, &R_SOLICITED));
        assert!(!packet.verify_checksum(&A, &R));
        let mut options = packet.ndisc_options();
        let option = options.next().unwrap().unwrap();
        assert_eq!(option.kind, NdiscOptionType::SourceLinkLayerAddr);
        assert_eq!(option.ethernet_addr(), Some(A_MAC));
        assert_eq!(options.next(), None);
        assert_eq!(solicited_node(&R), R_SOLICITED);
        assert!(is_solicited_node(&R_SOLICITED) && !is_solicited_node(&R));
    }

    #[test]
    fn deconstruct_neighbor_advert() {
        let packet = Packet::new_checked(&NEIGHBOR_ADVERT[..]).unwrap();
        assert_eq!(packet.msg_type(), Message::NeighborAdvert);
        let flags = packet.neighbor_flags();
        assert!(flags.contains(NeighborFlags::ROUTER));
        assert!(flags.contains(NeighborFlags::SOLICITED));
        assert!(flags.contains(NeighborFlags::OVERRIDE));
        assert_eq!(flags.bits(), 0xe0);
        assert_eq!(packet.target_addr(), Some(R));
        let option = packet.ndisc_options().next().unwrap().unwrap();
        assert_eq!(option.kind, NdiscOptionType::TargetLinkLayerAddr);
        assert_eq!(option.ethernet_addr(), Some(R_MAC));
        assert!(packet.verify_checksum(&R, &A));
    }

    #[test]
    fn deconstruct_echo() {
        let packet = Packet::new_checked(&ECHO_REQUEST[..]).unwrap();
        assert_eq!(packet.msg_type(), Message::EchoRequest);
        assert!(!packet.msg_type().is_error());
        assert_eq!(packet.echo_ident(), 0x36fc);
        assert_eq!(packet.echo_seq_no(), 1);
        assert_eq!(packet.data(), &ECHO_REQUEST[8..]);
        assert_eq!(packet.target_addr(), None);
        assert_eq!(packet.ndisc_options().count(), 0);
        assert!(packet.verify_checksum(&A, &R));
        let packet = Packet::new_checked(&ECHO_REPLY[..]).unwrap();
        assert_eq!(packet.msg_type(), Message::EchoReply);
        assert!(packet.verify_checksum(&R, &A));
    }

    #[test]
    fn deconstruct_errors() {
        let packet = Packet::new_checked(&TIME_EXCEEDED[..]).unwrap();
        assert!(packet.msg_type().is_error());
        assert_eq!(
            TimeExceeded::from(packet.msg_code()),
            TimeExceeded::HopLimitExceeded
        );
        let invoking = ipv6::Packet::new_checked(packet.data()).unwrap();
        assert_eq!((invoking.hop_limit(), invoking.dst_addr()), (1, B));

        let packet = Packet::new_checked(&PKT_TOO_BIG[..]).unwrap();
        assert_eq!(packet.msg_type(), Message::PktTooBig);
        assert_eq!(packet.pkt_too_big_mtu(), 1280);
        assert_eq!(packet.data().len(), MAX_ERROR_DATA_LEN);
        assert!(packet.verify_checksum(&R, &A));
        let invoking = ipv6::Packet::new_unchecked(packet.data());
        assert_eq!(invoking.payload_len(), 1408);
        assert_eq!(
            ipv6::Packet::new_checked(packet.data()),
            Err(Error::Truncated)
        );

        let packet = Packet::new_checked(&PORT_UNREACHABLE[..]).unwrap();
        assert_eq!(
            DstUnreachable::from(packet.msg_code()),
            DstUnreachable::PortUnreachable
        );
        let invoking = ipv6::Packet::new_checked(packet.data()).unwrap();
        assert_eq!(invoking.next_header(), Protocol::Udp);
        assert_eq!(&invoking.payload()[8..], b"lace\n");

        let packet = Packet::new_checked(&NO_ROUTE[..]).unwrap();
        assert_eq!(
            DstUnreachable::from(packet.msg_code()),
            DstUnreachable::NoRoute
        );
        let invoking = ipv6::Packet::new_checked(packet.data()).unwrap();
        assert_eq!(invoking.next_header(), Protocol::Ipv6Route);
        let header = srh::Packet::new_checked(invoking.payload()).unwrap();
        assert_eq!(header.segment(1), Some(invoking.dst_addr()));
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 32];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_msg_type(Message::NeighborSolicit);
        packet.set_msg_code(0);
        packet.clear_body();
        packet.set_target_addr(R);
        packet
            .ndisc_options_mut()
            .copy_from_slice(&[1, 1, 2, 0, 0, 0, 0x0a, 0x01]);
        packet.fill_checksum(&A, &R_SOLICITED);
        assert_eq!(bytes, NEIGHBOR_SOLICIT);

        let mut bytes = [0xa5u8; 32];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_msg_type(Message::NeighborAdvert);
        packet.set_msg_code(0);
        packet.clear_body();
        packet.set_neighbor_flags(
            NeighborFlags::ROUTER | NeighborFlags::SOLICITED | NeighborFlags::OVERRIDE,
        );
        packet.set_target_addr(R);
        packet
            .ndisc_options_mut()
            .copy_from_slice(&[2, 1, 2, 0, 0, 0, 0x0a, 0x02]);
        packet.fill_checksum(&R, &A);
        assert_eq!(bytes, NEIGHBOR_ADVERT);

        let mut bytes = [0xa5u8; 1240];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_msg_type(Message::PktTooBig);
        packet.set_msg_code(0);
        packet.set_pkt_too_big_mtu(1280);
        packet.data_mut().copy_from_slice(&PKT_TOO_BIG[8..]);
        packet.fill_checksum(&R, &A);
        assert_eq!(bytes, PKT_TOO_BIG);
    }

    #[test]
    fn parse() {
        for (bytes, src, dst, expected) in samples() {
            assert_eq!(
                Repr::parse(&src, &dst, &Packet::new_unchecked(bytes)),
                Ok(expected)
            );
        }
    }

    #[test]
    fn emit() {
        for (expected, src, dst, repr) in samples() {
            assert_eq!(repr.buffer_len(), expected.len());
            let mut bytes = [0xa5u8; 1300];
            repr.emit(&src, &dst, &mut Packet::new_unchecked(&mut bytes[..]));
            assert_eq!(&bytes[..expected.len()], expected);
            assert!(
                bytes[expected.len()..].iter().all(|&b| b == 0xa5),
                "wrote past the message"
            );
        }
    }

    #[test]
    fn advert_answers_solicit() {
        // What the gateway does: answer a solicitation for its address.
        let solicit = Packet::new_unchecked(&NEIGHBOR_SOLICIT[..]);
        let Ok(Repr::NeighborSolicit { target_addr, .. }) = Repr::parse(&A, &R_SOLICITED, &solicit)
        else {
            panic!("not a solicitation");
        };
        let advert = Repr::NeighborAdvert {
            flags: NeighborFlags::ROUTER | NeighborFlags::SOLICITED | NeighborFlags::OVERRIDE,
            target_addr,
            target_lladdr: Some(R_MAC),
        };
        let mut bytes = [0u8; 32];
        advert.emit(&R, &A, &mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, NEIGHBOR_ADVERT);
    }

    #[test]
    fn unsupported_types() {
        let fe80 = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 0x0c01);
        let all_routers = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
        let packet = Packet::new_checked(&ROUTER_SOLICIT[..]).unwrap();
        assert_eq!(packet.msg_type(), Message::RouterSolicit);
        assert!(packet.verify_checksum(&fe80, &all_routers));
        assert_eq!(
            Repr::parse(&fe80, &all_routers, &packet),
            Err(Error::Unsupported)
        );
    }

    #[test]
    fn truncated_at_every_length() {
        for (sample, src, dst, _) in samples() {
            for (n, prefix) in prefixes(sample) {
                let packet = Packet::new_unchecked(prefix);
                let min = if packet.is_neighbor_message() {
                    NEIGHBOR_LEN
                } else {
                    HEADER_LEN
                };
                let parsed = Repr::parse(&src, &dst, &packet);
                if n < min {
                    assert_eq!(packet.check_len(), Err(Error::Truncated), "length {n}");
                    assert_eq!(parsed, Err(Error::Truncated), "length {n}");
                } else if packet.verify_checksum(&src, &dst) {
                    // ICMPv6 has no length field: a cut that keeps the sum is a shorter message.
                    assert!(parsed.is_ok(), "length {n}");
                } else {
                    assert_eq!(parsed, Err(Error::BadChecksum), "length {n}");
                }
            }
        }
    }

    /// Edits a copy of `sample` (into a buffer of `len` bytes), refills the checksum for
    /// `src` → `dst` and parses it.
    fn parse_edited(
        sample: &[u8],
        len: usize,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        edit: impl FnOnce(&mut [u8]),
    ) -> Result<Repr<'static>> {
        let mut bytes = [0u8; 64];
        let n = sample.len().min(len);
        bytes[..n].copy_from_slice(&sample[..n]);
        edit(&mut bytes[..len]);
        Packet::new_unchecked(&mut bytes[..len]).fill_checksum(&src, &dst);
        let parsed = Repr::parse(&src, &dst, &Packet::new_unchecked(&bytes[..len]));
        // Detach from the local buffer: neighbor Reprs borrow nothing.
        parsed.map(|repr| match repr {
            Repr::NeighborSolicit {
                target_addr,
                source_lladdr,
            } => Repr::NeighborSolicit {
                target_addr,
                source_lladdr,
            },
            Repr::NeighborAdvert {
                flags,
                target_addr,
                target_lladdr,
            } => Repr::NeighborAdvert {
                flags,
                target_addr,
                target_lladdr,
            },
            _ => Repr::EchoRequest {
                ident: 0,
                seq_no: 0,
                data: &[],
            },
        })
    }

    #[test]
    fn neighbor_solicit_checks() {
        let ns = &NEIGHBOR_SOLICIT[..];
        let ok = parse_edited(ns, 32, A, R_SOLICITED, |_| {});
        assert_eq!(
            ok,
            Ok(Repr::NeighborSolicit {
                target_addr: R,
                source_lladdr: Some(A_MAC)
            })
        );
        // Code must be 0.
        assert_eq!(
            parse_edited(ns, 32, A, R_SOLICITED, |b| b[1] = 1),
            Err(Error::Malformed)
        );
        // Target must not be multicast.
        let multicast = |b: &mut [u8]| b[8..24].copy_from_slice(&R_SOLICITED.octets());
        assert_eq!(
            parse_edited(ns, 32, A, R_SOLICITED, multicast),
            Err(Error::Malformed)
        );
        // Option length 0, and an option running past the message.
        assert_eq!(
            parse_edited(ns, 32, A, R_SOLICITED, |b| b[25] = 0),
            Err(Error::BadLength)
        );
        assert_eq!(
            parse_edited(ns, 32, A, R_SOLICITED, |b| b[25] = 2),
            Err(Error::BadLength)
        );
        // A 16-byte source link-layer address is not an Ethernet address.
        assert_eq!(
            parse_edited(ns, 40, A, R_SOLICITED, |b| b[25] = 2),
            Err(Error::Malformed)
        );
        // DAD: from the unspecified address, to the solicited-node group, without SLLA.
        let dad = parse_edited(ns, 24, Ipv6Addr::UNSPECIFIED, R_SOLICITED, |_| {});
        assert_eq!(
            dad,
            Ok(Repr::NeighborSolicit {
                target_addr: R,
                source_lladdr: None
            })
        );
        let dad_with_slla = parse_edited(ns, 32, Ipv6Addr::UNSPECIFIED, R_SOLICITED, |_| {});
        assert_eq!(dad_with_slla, Err(Error::Malformed));
        let dad_unicast = parse_edited(ns, 24, Ipv6Addr::UNSPECIFIED, R, |_| {});
        assert_eq!(dad_unicast, Err(Error::Malformed));
        // Unknown options (a nonce) are skipped; the first SLLA counts.
        let nonce_then_two = parse_edited(ns, 48, A, R_SOLICITED, |b| {
            b[24..32].copy_from_slice(&[14, 1, 1, 2, 3, 4, 5, 6]);
            b[32..40].copy_from_slice(&NEIGHBOR_SOLICIT[24..32]);
            b[40..48].copy_from_slice(&[1, 1, 2, 0, 0, 0, 0xff, 0xff]);
        });
        assert_eq!(nonce_then_two, ok);
    }

    #[test]
    fn neighbor_advert_checks() {
        let na = &NEIGHBOR_ADVERT[..];
        let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
        assert_eq!(
            parse_edited(na, 32, R, A, |b| b[1] = 7),
            Err(Error::Malformed)
        );
        let multicast = |b: &mut [u8]| b[8..24].copy_from_slice(&all_nodes.octets());
        assert_eq!(parse_edited(na, 32, R, A, multicast), Err(Error::Malformed));
        // Solicited, to a multicast address.
        assert_eq!(
            parse_edited(na, 32, R, all_nodes, |_| {}),
            Err(Error::Malformed)
        );
        // Unsolicited (S clear) to all nodes, without TLLA: fine.
        let unsolicited = parse_edited(na, 24, R, all_nodes, |b| b[4] = 0x20);
        let expected = Repr::NeighborAdvert {
            flags: NeighborFlags::OVERRIDE,
            target_addr: R,
            target_lladdr: None,
        };
        assert_eq!(unsolicited, Ok(expected));
        // Reserved bits are ignored.
        let reserved = parse_edited(na, 32, R, A, |b| b[4..8].copy_from_slice(&[0xff; 4]));
        assert!(matches!(reserved, Ok(Repr::NeighborAdvert { flags, .. }) if flags.bits() == 0xe0));
        assert_eq!(
            parse_edited(na, 32, R, A, |b| b[25] = 0),
            Err(Error::BadLength)
        );
    }

    #[test]
    fn bad_checksum() {
        for (sample, src, dst, _) in samples() {
            let mut bytes = [0u8; 1240];
            let bytes = &mut bytes[..sample.len()];
            bytes.copy_from_slice(sample);
            bytes[sample.len() - 1] ^= 0x01;
            let packet = Packet::new_unchecked(&bytes[..]);
            assert_eq!(Repr::parse(&src, &dst, &packet), Err(Error::BadChecksum));
        }
        // The right bytes with the wrong addresses.
        let packet = Packet::new_unchecked(&ECHO_REQUEST[..]);
        assert_eq!(Repr::parse(&R, &A, &packet).map(|_| ()), Ok(())); // the sum is symmetric
        assert_eq!(Repr::parse(&A, &B, &packet), Err(Error::BadChecksum));
    }

    #[test]
    fn param_problem_round_trip() {
        // What the forwarder sends for an SRH with Segments Left beyond the list (RFC 8754
        // §4.3.1.1): code 0, pointer to Segments Left (IPv6 header 40 + 3).
        let invoking = &NO_ROUTE[8..];
        let repr = Repr::ParamProblem {
            reason: ParamProblem::ErroneousHdrField,
            pointer: 43,
            data: invoking,
        };
        let mut bytes = [0u8; 192];
        repr.emit(&R, &A, &mut Packet::new_unchecked(&mut bytes[..]));
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.param_problem_ptr(), 43);
        assert_eq!(Repr::parse(&R, &A, &packet), Ok(repr));
    }
}
