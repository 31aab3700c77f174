//! Ethernet II frames (IEEE 802.3 §3.2, RFC 894) with at most one IEEE 802.1Q VLAN tag
//! (802.1Q-2018 §9.6).
//!
//! A frame whose EtherType is 0x8100 carries a 4-byte tag before the payload's EtherType: the
//! view then reports [`Frame::vlan_tag`] and a header of 18 bytes. A second tag (QinQ, or an
//! S-tag 0x88a8 outside) is not unwrapped: it shows as the payload EtherType `Vlan`/`QinQ`, and
//! the forwarder does not carry such frames. The FCS is not part of the buffer (NICs strip it).

use core::fmt;

use super::field::{Field, Rest};
use super::{read_u16, write_u16, Error, Result};

/// A 48-bit MAC address (IEEE 802 §8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Address(pub [u8; 6]);

impl Address {
    /// The broadcast address `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: Address = Address([0xff; 6]);

    /// Reads an address from the first 6 bytes of `bytes`; `None` if there are fewer.
    pub fn from_bytes(bytes: &[u8]) -> Option<Address> {
        let octets: [u8; 6] = bytes.get(..6)?.try_into().ok()?;
        Some(Address(octets))
    }

    /// The six octets.
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// `ff:ff:ff:ff:ff:ff`.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// The group bit (I/G, least significant bit of the first octet) is set; includes broadcast.
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// The multicast address an IPv6 multicast group is sent to (RFC 2464 §7: `33:33` and the
    /// group's last four bytes).
    pub const fn ipv6_multicast(group: &super::Ipv6Addr) -> Address {
        let o = group.octets();
        Address([0x33, 0x33, o[12], o[13], o[14], o[15]])
    }

    /// Not multicast (and so not broadcast).
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// The locally administered bit (U/L) is set.
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }

    /// `00:00:00:00:00:00`, which no interface has.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

wire_enum! {
    /// EtherType (IEEE Registration Authority; RFC 7042 §3).
    pub enum EtherType(u16) {
        /// IPv4 (RFC 894).
        Ipv4 = 0x0800,
        /// ARP (RFC 826).
        Arp = 0x0806,
        /// Reverse ARP (RFC 903); QEMU announces a migrated VM's MAC with it.
        Rarp = 0x8035,
        /// IEEE 802.1Q customer VLAN tag (C-tag) follows.
        Vlan = 0x8100,
        /// IPv6 (RFC 2464).
        Ipv6 = 0x86dd,
        /// IEEE 802.1ad service VLAN tag (S-tag) follows; not unwrapped here.
        QinQ = 0x88a8,
    }
}

/// The Tag Control Information of an 802.1Q tag (802.1Q-2018 §9.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority Code Point, 0–7.
    pub pcp: u8,
    /// Drop Eligible Indicator.
    pub dei: bool,
    /// VLAN identifier, 0–4095 (0: priority tag only; 4095: reserved).
    pub vid: u16,
}

impl VlanTag {
    /// Splits a 16-bit TCI.
    pub const fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }

    /// Packs into a 16-bit TCI; out-of-range `pcp` and `vid` bits are dropped.
    pub const fn tci(&self) -> u16 {
        ((self.pcp as u16 & 0x7) << 13) | ((self.dei as u16) << 12) | (self.vid & 0x0fff)
    }

    /// The tag as on the wire: the 802.1Q TPID, then the TCI.
    pub fn to_bytes(&self) -> [u8; TAG_LEN] {
        let [t0, t1] = u16::from(EtherType::Vlan).to_be_bytes();
        let [c0, c1] = self.tci().to_be_bytes();
        [t0, t1, c0, c1]
    }
}

/// Writes an 802.1Q tag (`tag`: TPID and TCI as on the wire) into a frame handed over with
/// [`TAG_LEN`] bytes of room in front of it: the addresses move to the front and the tag
/// follows them. False, with nothing written, when `frame` is too short to hold the room and
/// the addresses.
pub fn insert_tag(frame: &mut [u8], tag: [u8; TAG_LEN]) -> bool {
    let Some(h) = frame.first_chunk_mut::<{ TAG_LEN + field::ETHERTYPE }>() else {
        return false;
    };
    h.copy_within(TAG_LEN.., 0);
    h[field::ETHERTYPE..].copy_from_slice(&tag);
    true
}

/// Byte ranges of the Ethernet header (IEEE 802.3 §3.2.3, 802.1Q §9.3):
///
/// ```text
/// untagged:
/// +--------------------+--------------------+-----------+---------
/// | Destination (6)    | Source (6)         | Type (2)  | Payload
/// +--------------------+--------------------+-----------+---------
/// 0                    6                    12          14
/// one 802.1Q tag:
/// +--------------------+--------------------+-------------+---------+-----------+---------
/// | Destination (6)    | Source (6)         | TPID 0x8100 | TCI (2) | Type (2)  | Payload
/// +--------------------+--------------------+-------------+---------+-----------+---------
/// 0                    6                    12            14        16          18
/// TCI: | PCP (3 bits) | DEI (1) | VID (12) |
/// ```
mod field {
    use super::{Field, Rest};

    pub(super) const DESTINATION: Field = 0..6;
    pub(super) const SOURCE: Field = 6..12;
    pub(super) const ETHERTYPE: usize = 12;
    pub(super) const PAYLOAD: Rest = 14..;
    pub(super) const TCI: usize = 14;
    pub(super) const INNER_ETHERTYPE: usize = 16;
    pub(super) const TAGGED_PAYLOAD: Rest = 18..;
}

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;
/// Length of an Ethernet header with one 802.1Q tag.
pub const VLAN_HEADER_LEN: usize = field::TAGGED_PAYLOAD.start;
/// Length of an 802.1Q tag (TPID and TCI).
pub const TAG_LEN: usize = VLAN_HEADER_LEN - HEADER_LEN;

/// A read/write view of an Ethernet frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<B: AsRef<[u8]>> {
    buffer: B,
}

impl<B: AsRef<[u8]>> Frame<B> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: B) -> Frame<B> {
        Frame { buffer }
    }

    /// Wraps a buffer and checks that every getter can read it ([`Frame::check_len`]).
    pub fn new_checked(buffer: B) -> Result<Frame<B>> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the buffer holds the header: 14 bytes, or 18 with an 802.1Q tag.
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.header_len() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> B {
        self.buffer
    }

    /// Whether the frame carries an 802.1Q tag (EtherType 0x8100).
    ///
    /// Reads the EtherType field if the buffer holds it; false otherwise (so that
    /// [`Frame::check_len`] can use it on a short buffer).
    #[inline(always)]
    pub fn is_tagged(&self) -> bool {
        let data = self.buffer.as_ref();
        data.len() >= HEADER_LEN
            && EtherType::from(read_u16(data, field::ETHERTYPE)) == EtherType::Vlan
    }

    /// Header length: 14, or 18 with an 802.1Q tag.
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Destination address.
    #[inline(always)]
    pub fn dst_addr(&self) -> Address {
        let mut octets = [0u8; 6];
        octets.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        Address(octets)
    }

    /// Source address.
    #[inline(always)]
    pub fn src_addr(&self) -> Address {
        let mut octets = [0u8; 6];
        octets.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        Address(octets)
    }

    /// The EtherType field after the addresses: [`EtherType::Vlan`] for a tagged frame.
    #[inline(always)]
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(read_u16(self.buffer.as_ref(), field::ETHERTYPE))
    }

    /// The 802.1Q tag, if the frame has one.
    #[inline(always)]
    pub fn vlan_tag(&self) -> Option<VlanTag> {
        self.is_tagged()
            .then(|| VlanTag::from_tci(read_u16(self.buffer.as_ref(), field::TCI)))
    }

    /// The payload's EtherType: after the tag if there is one.
    #[inline(always)]
    pub fn payload_ethertype(&self) -> EtherType {
        let at = if self.is_tagged() {
            field::INNER_ETHERTYPE
        } else {
            field::ETHERTYPE
        };
        EtherType::from(read_u16(self.buffer.as_ref(), at))
    }

    /// The payload: everything after the header (including any padding to the 60-byte minimum).
    #[inline(always)]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Frame<B> {
    /// Sets the destination address.
    #[inline(always)]
    pub fn set_dst_addr(&mut self, value: Address) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&value.0);
    }

    /// Sets the source address.
    #[inline(always)]
    pub fn set_src_addr(&mut self, value: Address) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&value.0);
    }

    /// Sets the EtherType field after the addresses ([`EtherType::Vlan`] to tag the frame).
    #[inline(always)]
    pub fn set_ethertype(&mut self, value: EtherType) {
        write_u16(self.buffer.as_mut(), field::ETHERTYPE, value.into());
    }

    /// Sets the tag's TCI. Call after `set_ethertype(EtherType::Vlan)`.
    #[inline(always)]
    pub fn set_vlan_tag(&mut self, value: VlanTag) {
        write_u16(self.buffer.as_mut(), field::TCI, value.tci());
    }

    /// Sets the payload's EtherType: after the tag when the EtherType field says
    /// [`EtherType::Vlan`], else the EtherType field itself.
    #[inline(always)]
    pub fn set_payload_ethertype(&mut self, value: EtherType) {
        let at = if self.is_tagged() {
            field::INNER_ETHERTYPE
        } else {
            field::ETHERTYPE
        };
        write_u16(self.buffer.as_mut(), at, value.into());
    }

    /// The payload, writable.
    #[inline(always)]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Frame<B> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A validated Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address: unicast, not all-zero.
    pub src_addr: Address,
    /// Destination address.
    pub dst_addr: Address,
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// The payload's EtherType (after the tag, if any).
    pub ethertype: EtherType,
}

impl Repr {
    /// Parses and validates a frame's header.
    ///
    /// # Errors
    /// [`Error::Truncated`] for a short buffer; [`Error::Malformed`] for a multicast or all-zero
    /// source address (IEEE 802 §8.2: a source is an individual address; Linux's bridge drops
    /// such frames too).
    pub fn parse<B: AsRef<[u8]> + ?Sized>(frame: &Frame<&B>) -> Result<Repr> {
        frame.check_len()?;
        let src_addr = frame.src_addr();
        if src_addr.is_multicast() || src_addr.is_zero() {
            return Err(Error::Malformed);
        }
        Ok(Repr {
            src_addr,
            dst_addr: frame.dst_addr(),
            vlan: frame.vlan_tag(),
            ethertype: frame.payload_ethertype(),
        })
    }

    /// Length of the header this emits: 14, or 18 with a tag.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan.is_some() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header; the payload is left as it is.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Repr::buffer_len`].
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<B>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        match self.vlan {
            Some(tag) => {
                frame.set_ethertype(EtherType::Vlan);
                frame.set_vlan_tag(tag);
                write_u16(
                    frame.buffer.as_mut(),
                    field::INNER_ETHERTYPE,
                    self.ethertype.into(),
                );
            }
            None => frame.set_ethertype(self.ethertype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_util::prefixes;

    /// ARP reply, untagged: frame 3 of `forwarder/testdata/wire/samples.pcap`, from
    /// `arping -c 1 -I a0 192.0.2.254` in `capture.sh` (R's reply to A).
    static UNTAGGED: [u8; 42] = [
        0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x02, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x02, 0xc0, 0x00,
        0x02, 0xfe, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0xc0, 0x00, 0x02, 0x01,
    ];

    /// ARP request in VLAN 100, broadcast, padded by arping to 60 bytes before the tag was
    /// pushed: frame 3 of `forwarder/testdata/wire/samples-vlan.pcap`, from
    /// `arping -c 1 -w 1 -I a1 203.0.113.254` in `capture.sh` (tag pushed by `vlan_push.c`).
    static TAGGED: [u8; 62] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x0c, 0x01, 0x81, 0x00, 0x00,
        0x64, 0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00,
        0x0c, 0x01, 0xcb, 0x00, 0x71, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xcb, 0x00, 0x71,
        0xfe, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00,
    ];

    const A0: Address = Address([0x02, 0x00, 0x00, 0x00, 0x0a, 0x01]);
    const R0: Address = Address([0x02, 0x00, 0x00, 0x00, 0x0a, 0x02]);
    const A1: Address = Address([0x02, 0x00, 0x00, 0x00, 0x0c, 0x01]);

    fn untagged_repr() -> Repr {
        Repr {
            src_addr: R0,
            dst_addr: A0,
            vlan: None,
            ethertype: EtherType::Arp,
        }
    }

    fn tagged_repr() -> Repr {
        Repr {
            src_addr: A1,
            dst_addr: Address::BROADCAST,
            vlan: Some(VlanTag {
                pcp: 0,
                dei: false,
                vid: 100,
            }),
            ethertype: EtherType::Arp,
        }
    }

    #[test]
    fn deconstruct_untagged() {
        let frame = Frame::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(frame.dst_addr(), A0);
        assert_eq!(frame.src_addr(), R0);
        assert_eq!(frame.ethertype(), EtherType::Arp);
        assert!(!frame.is_tagged());
        assert_eq!(frame.vlan_tag(), None);
        assert_eq!(frame.payload_ethertype(), EtherType::Arp);
        assert_eq!(frame.header_len(), 14);
        assert_eq!(frame.payload(), &UNTAGGED[14..]);
    }

    #[test]
    fn deconstruct_tagged() {
        let frame = Frame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(frame.dst_addr(), Address::BROADCAST);
        assert_eq!(frame.src_addr(), A1);
        assert_eq!(frame.ethertype(), EtherType::Vlan);
        assert_eq!(
            frame.vlan_tag(),
            Some(VlanTag {
                pcp: 0,
                dei: false,
                vid: 100
            })
        );
        assert_eq!(frame.payload_ethertype(), EtherType::Arp);
        assert_eq!(frame.header_len(), 18);
        assert_eq!(frame.payload().len(), 44);
        assert_eq!(frame.payload(), &TAGGED[18..]);
    }

    #[test]
    fn construct_untagged() {
        let mut bytes = [0u8; 42];
        let mut frame = Frame::new_unchecked(&mut bytes[..]);
        frame.set_dst_addr(A0);
        frame.set_src_addr(R0);
        frame.set_ethertype(EtherType::Arp);
        frame.payload_mut().copy_from_slice(&UNTAGGED[14..]);
        assert_eq!(bytes, UNTAGGED);
    }

    #[test]
    fn construct_tagged() {
        let mut bytes = [0u8; 62];
        let mut frame = Frame::new_unchecked(&mut bytes[..]);
        frame.set_dst_addr(Address::BROADCAST);
        frame.set_src_addr(A1);
        frame.set_ethertype(EtherType::Vlan);
        frame.set_vlan_tag(VlanTag {
            pcp: 0,
            dei: false,
            vid: 100,
        });
        frame.set_payload_ethertype(EtherType::Arp);
        frame.payload_mut().copy_from_slice(&TAGGED[18..]);
        assert_eq!(bytes, TAGGED);
    }

    #[test]
    fn parse() {
        let frame = Frame::new_unchecked(&UNTAGGED[..]);
        assert_eq!(Repr::parse(&frame), Ok(untagged_repr()));
        let frame = Frame::new_unchecked(&TAGGED[..]);
        assert_eq!(Repr::parse(&frame), Ok(tagged_repr()));
    }

    #[test]
    fn emit() {
        let repr = untagged_repr();
        assert_eq!(repr.buffer_len(), 14);
        let mut bytes = [0u8; 42];
        bytes[14..].copy_from_slice(&UNTAGGED[14..]);
        repr.emit(&mut Frame::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, UNTAGGED);

        let repr = tagged_repr();
        assert_eq!(repr.buffer_len(), 18);
        let mut bytes = [0u8; 62];
        bytes[18..].copy_from_slice(&TAGGED[18..]);
        repr.emit(&mut Frame::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, TAGGED);
    }

    #[test]
    fn truncated_at_every_length() {
        for (n, prefix) in prefixes(&UNTAGGED) {
            let expected = if n < 14 {
                Err(Error::Truncated)
            } else {
                Ok(())
            };
            assert_eq!(
                Frame::new_unchecked(prefix).check_len(),
                expected,
                "length {n}"
            );
            assert_eq!(
                Repr::parse(&Frame::new_unchecked(prefix)).err(),
                expected.err()
            );
        }
        for (n, prefix) in prefixes(&TAGGED) {
            let expected = if n < 18 {
                Err(Error::Truncated)
            } else {
                Ok(())
            };
            assert_eq!(
                Frame::new_checked(prefix).map(|_| ()),
                expected,
                "length {n}"
            );
        }
    }

    #[test]
    fn source_must_be_unicast() {
        for bad in [
            Address::BROADCAST,
            Address([0x01, 0, 0x5e, 0, 0, 1]),
            Address([0; 6]),
        ] {
            let mut bytes = UNTAGGED;
            Frame::new_unchecked(&mut bytes[..]).set_src_addr(bad);
            assert_eq!(
                Repr::parse(&Frame::new_unchecked(&bytes[..])),
                Err(Error::Malformed)
            );
        }
    }

    #[test]
    fn second_tag_is_not_unwrapped() {
        let mut bytes = TAGGED;
        bytes[16..18].copy_from_slice(&[0x81, 0x00]);
        let frame = Frame::new_checked(&bytes[..]).unwrap();
        assert_eq!(frame.payload_ethertype(), EtherType::Vlan);
        let repr = Repr::parse(&frame).unwrap();
        assert_eq!(repr.ethertype, EtherType::Vlan);
    }

    #[test]
    fn vlan_tci_round_trips() {
        for tci in 0..=u16::MAX {
            assert_eq!(VlanTag::from_tci(tci).tci(), tci);
        }
        let tag = VlanTag {
            pcp: 5,
            dei: true,
            vid: 4094,
        };
        assert_eq!(tag.tci(), 0xbffe);
        assert_eq!(VlanTag::from_tci(0xbffe), tag);
    }

    #[test]
    fn insert_tag_makes_the_tagged_frame() {
        let tag = tagged_repr().vlan.unwrap();
        assert_eq!(tag.to_bytes(), TAGGED[12..16]);
        // The capture's frame before its tag was pushed, with room in front.
        let mut bytes = vec![0xee; TAG_LEN];
        bytes.extend_from_slice(&TAGGED[..12]);
        bytes.extend_from_slice(&TAGGED[16..]);
        assert!(insert_tag(&mut bytes, tag.to_bytes()));
        assert_eq!(bytes, TAGGED);
        let mut short = [0xee; TAG_LEN + 11];
        assert!(!insert_tag(&mut short, tag.to_bytes()));
        assert_eq!(short, [0xee; TAG_LEN + 11]);
    }

    #[test]
    fn address_classes_and_display() {
        assert!(Address::BROADCAST.is_broadcast() && Address::BROADCAST.is_multicast());
        assert!(A0.is_unicast() && A0.is_local() && !A0.is_zero());
        assert!(Address([0x33, 0x33, 0, 0, 0, 1]).is_multicast());
        let group = super::super::Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 0x0a02);
        assert_eq!(
            Address::ipv6_multicast(&group),
            Address([0x33, 0x33, 0xff, 0x00, 0x0a, 0x02])
        );
        assert_eq!(Address::from_bytes(&UNTAGGED[6..]), Some(R0));
        assert_eq!(Address::from_bytes(&UNTAGGED[..5]), None);
        assert_eq!(A0.to_string(), "02:00:00:00:0a:01");
    }

    #[test]
    fn ethertype_round_trips() {
        assert_eq!(EtherType::from(0x86dd), EtherType::Ipv6);
        assert_eq!(u16::from(EtherType::Unknown(0x88cc)), 0x88cc);
    }
}
