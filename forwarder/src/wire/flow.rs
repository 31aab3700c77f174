//! Flow identification: the 5-tuple of an IPv4 or IPv6 packet, and a fast hash of it for the
//! outer IPv6 flow label of SRv6 encapsulation (RFC 6437 §3: a stateless hash of the flow,
//! 20 bits, never 0) and for spreading flows over paths and queues. The hash is CRC32-C
//! (the SSE4.2 instruction of the x86-64-v2 baseline): two instructions for an IPv4 flow.
//!
//! What counts as the flow:
//! - addresses and the upper-layer protocol, after any IPv6 extension headers (Hop-by-Hop,
//!   Routing incl. the SRH, Destination Options, Fragment, AH; at most
//!   [`MAX_EXTENSION_HEADERS`]);
//! - ports for TCP, UDP and SCTP; for an ICMP or ICMPv6 echo, its identifier as both ports (so
//!   a ping keeps to one path, as Linux's flow dissector does); 0 otherwise;
//! - for any fragment (IPv4, or an IPv6 Fragment header), ports 0 even in the first fragment,
//!   so all fragments of a packet hash alike.
//!
//! The hash depends on direction (A → B and B → A differ) and on a seed, so that different
//! nodes can spread differently; it is not meant to resist an adversary choosing flows.

use core::net::IpAddr;

use super::ip::Protocol;
use super::{icmpv4, icmpv6, ipv4, ipv6, read_u16, Error, Result};
use crate::dpdk::crc32c_u64;

/// Most IPv6 extension headers walked before giving up on finding the upper layer (the
/// protocol is then the last extension header, with ports 0).
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// A flow's 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    /// Source address.
    pub src_addr: IpAddr,
    /// Destination address.
    pub dst_addr: IpAddr,
    /// Upper-layer protocol.
    pub protocol: Protocol,
    /// Source port (see the module docs for non-port protocols).
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

/// The ports of an upper-layer header, or (0, 0).
#[inline(always)]
fn ports(protocol: Protocol, l4: &[u8]) -> Result<(u16, u16)> {
    let echo_ident = |is_echo: bool| -> Result<(u16, u16)> {
        if l4.len() < icmpv4::HEADER_LEN {
            return Err(Error::Truncated);
        }
        let ident = if is_echo { read_u16(l4, 4) } else { 0 };
        Ok((ident, ident))
    };
    match protocol {
        p if p.has_ports() => {
            if l4.len() < 4 {
                return Err(Error::Truncated);
            }
            Ok((read_u16(l4, 0), read_u16(l4, 2)))
        }
        Protocol::Icmp => echo_ident(matches!(
            l4.first().map(|&t| icmpv4::Message::from(t)),
            Some(icmpv4::Message::EchoRequest | icmpv4::Message::EchoReply)
        )),
        Protocol::Icmpv6 => echo_ident(matches!(
            l4.first().map(|&t| icmpv6::Message::from(t)),
            Some(icmpv6::Message::EchoRequest | icmpv6::Message::EchoReply)
        )),
        _ => Ok((0, 0)),
    }
}

impl FiveTuple {
    /// Extracts the 5-tuple of an IPv4 or IPv6 packet, by its version nibble.
    ///
    /// # Errors
    /// [`Error::Truncated`] for an empty buffer; [`Error::BadVersion`] for another version;
    /// otherwise those of [`FiveTuple::from_ipv4`] / [`FiveTuple::from_ipv6`].
    pub fn from_ip(packet: &[u8]) -> Result<FiveTuple> {
        match packet.first().map(|b| b >> 4) {
            None => Err(Error::Truncated),
            Some(4) => Self::from_ipv4(packet),
            Some(6) => Self::from_ipv6(packet),
            Some(_) => Err(Error::BadVersion),
        }
    }

    /// Extracts the 5-tuple of an IPv4 packet. The header checksum is not verified.
    ///
    /// # Errors
    /// Those of [`ipv4::Packet::check_len`]; [`Error::Truncated`] if the upper-layer header
    /// is too short for its ports (or an ICMP header).
    pub fn from_ipv4(packet: &[u8]) -> Result<FiveTuple> {
        let packet = ipv4::Packet::new_checked(packet)?;
        let protocol = packet.protocol();
        let (src_port, dst_port) = if packet.is_fragment() {
            (0, 0)
        } else {
            ports(protocol, packet.payload())?
        };
        Ok(FiveTuple {
            src_addr: IpAddr::V4(packet.src_addr()),
            dst_addr: IpAddr::V4(packet.dst_addr()),
            protocol,
            src_port,
            dst_port,
        })
    }

    /// Extracts the 5-tuple of an IPv6 packet, walking its extension headers.
    ///
    /// # Errors
    /// Those of [`ipv6::Packet::check_len`]; [`Error::Truncated`] if an extension header or
    /// the upper-layer header runs past the payload.
    pub fn from_ipv6(packet: &[u8]) -> Result<FiveTuple> {
        let packet = ipv6::Packet::new_checked(packet)?;
        let mut protocol = packet.next_header();
        let mut rest = packet.payload();
        let mut fragment = false;
        for _ in 0..MAX_EXTENSION_HEADERS {
            let len = match protocol {
                Protocol::HopByHop | Protocol::Ipv6Route | Protocol::Ipv6Opts => {
                    (usize::from(*rest.get(1).ok_or(Error::Truncated)?) + 1) * 8
                }
                Protocol::Ah => (usize::from(*rest.get(1).ok_or(Error::Truncated)?) + 2) * 4,
                Protocol::Ipv6Frag => {
                    // Offset (13 bits) and M flag: anything but 0/0 is a fragment.
                    let offset_m = rest.get(2..4).ok_or(Error::Truncated)?;
                    fragment |= read_u16(offset_m, 0) & 0xfff9 != 0;
                    8
                }
                _ => break,
            };
            let header = rest.get(..len).ok_or(Error::Truncated)?;
            protocol = Protocol::from(header[0]);
            rest = &rest[len..];
        }
        let (src_port, dst_port) = if fragment || protocol.is_ipv6_extension() {
            (0, 0)
        } else {
            ports(protocol, rest)?
        };
        Ok(FiveTuple {
            src_addr: IpAddr::V6(packet.src_addr()),
            dst_addr: IpAddr::V6(packet.dst_addr()),
            protocol,
            src_port,
            dst_port,
        })
    }

    /// A 32-bit hash of the tuple under `seed`: CRC32-C of its words ([`hash_v4`] /
    /// [`hash_v6`]).
    #[inline]
    pub fn hash(&self, seed: u64) -> u32 {
        let tail = tail(self.protocol, self.src_port, self.dst_port);
        match (self.src_addr, self.dst_addr) {
            (IpAddr::V4(s), IpAddr::V4(d)) => hash_v4(seed, s.to_bits(), d.to_bits(), tail),
            (s, d) => hash_v6(seed, to_u128(s), to_u128(d), tail),
        }
    }

    /// A 20-bit, non-zero IPv6 flow label for the tuple under `seed` (RFC 6437 §3).
    #[inline]
    pub fn flow_label(&self, seed: u64) -> u32 {
        label_of(self.hash(seed))
    }
}

/// The flow label of a valid IPv4 packet (its header passed `ipv4::Packet::check_len`), without
/// building the [`FiveTuple`]: the same label as `FiveTuple::from_ipv4(packet)?.flow_label(seed)`,
/// and 1 when that fails (an upper-layer header too short for its ports).
#[inline(always)]
pub fn ipv4_flow_label(packet: &[u8], seed: u64) -> u32 {
    if let Some(label) = common_ipv4_label(packet, seed) {
        return label;
    }
    let ip = ipv4::Packet::new_unchecked(packet);
    let protocol = ip.protocol();
    let ports = if ip.is_fragment() {
        Ok((0, 0))
    } else {
        ports(protocol, ip.payload())
    };
    match ports {
        Ok((s, d)) => label_of(hash_v4(
            seed,
            ip.src_addr().to_bits(),
            ip.dst_addr().to_bits(),
            tail(protocol, s, d),
        )),
        Err(_) => 1,
    }
}

/// The flow label of the common IPv4 packet, read at fixed offsets from any bytes: IPv4 without
/// options, not a fragment, TCP, UDP or SCTP, its ports inside a Total Length that the bytes
/// hold. `None` for anything else. Where it gives a label, the packet passes
/// `ipv4::Packet::check_len` and [`ipv4_flow_label`] gives the same one, so a bridged frame
/// (whose IPv4 header nobody checked) and a routed packet of one flow share their label.
#[inline(always)]
pub fn common_ipv4_label(packet: &[u8], seed: u64) -> Option<u32> {
    let h = packet.first_chunk::<{ ipv4::HEADER_LEN + 4 }>()?;
    let ip = ipv4::Packet::new_unchecked(&h[..]);
    // The Protocol byte as it is (offset 9, RFC 791 §3.1): TCP, UDP or SCTP.
    let protocol = h[9];
    let total = usize::from(ip.total_len());
    let common = h[0] == 0x45
        && matches!(protocol, 6 | 17 | 132)
        && !ip.is_fragment()
        && total >= h.len()
        && total <= packet.len();
    if !common {
        return None;
    }
    let (s, d) = (read_u16(h, 20), read_u16(h, 22));
    let (src, dst) = (ip.src_addr().to_bits(), ip.dst_addr().to_bits());
    Some(label_of(hash_v4(seed, src, dst, raw_tail(protocol, s, d))))
}

/// A 20-bit, non-zero flow label from a 32-bit flow hash (ours, or the NIC's RSS hash).
#[inline(always)]
pub fn label_of(hash: u32) -> u32 {
    // Fold the top bits in so that all 32 count; 0 means "unlabelled".
    let label = (hash ^ (hash >> 20)) & super::ipv6::FLOW_LABEL_MASK;
    if label == 0 {
        1
    } else {
        label
    }
}

/// The protocol and ports as one word.
#[inline(always)]
fn tail(protocol: Protocol, src_port: u16, dst_port: u16) -> u64 {
    raw_tail(u8::from(protocol), src_port, dst_port)
}

/// [`tail`] of a protocol number.
#[inline(always)]
fn raw_tail(protocol: u8, src_port: u16, dst_port: u16) -> u64 {
    (u64::from(protocol) << 32) | (u64::from(src_port) << 16) | u64::from(dst_port)
}

/// The initial CRC for `seed`.
#[inline(always)]
fn start(seed: u64) -> u32 {
    (seed ^ (seed >> 32)) as u32
}

/// CRC32-C of an IPv4 flow: both addresses in one word, then the protocol and ports.
#[inline(always)]
pub fn hash_v4(seed: u64, src: u32, dst: u32, tail: u64) -> u32 {
    let addrs = (u64::from(src) << 32) | u64::from(dst);
    crc32c_u64(crc32c_u64(start(seed), addrs), tail)
}

/// CRC32-C of an IPv6 flow: four address words, then the protocol and ports (tagged so that an
/// IPv4 flow and an IPv6 flow never share a word sequence).
#[inline]
pub fn hash_v6(seed: u64, src: u128, dst: u128, tail: u64) -> u32 {
    let mut h = crc32c_u64(start(seed), (src >> 64) as u64);
    h = crc32c_u64(h, src as u64);
    h = crc32c_u64(h, (dst >> 64) as u64);
    h = crc32c_u64(h, dst as u64);
    crc32c_u64(h, tail | (1 << 48))
}

fn to_u128(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(a.to_bits()),
        IpAddr::V6(a) => a.to_bits(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ipv4, ipv6, srh, Ipv4Addr, Ipv6Addr};

    /// UDP 192.0.2.1:39707 → 198.51.100.1:33434: frame 18 of
    /// `forwarder/testdata/wire/samples.pcap` (`echo lace >/dev/udp/198.51.100.1/33434` in
    /// `capture.sh`), from byte 14.
    static UDP_V4: [u8; 33] = [
        0x45, 0x00, 0x00, 0x21, 0x48, 0xf7, 0x40, 0x00, 0x40, 0x11, 0x05, 0x9f, 0xc0, 0x00, 0x02,
        0x01, 0xc6, 0x33, 0x64, 0x01, 0x9b, 0x1b, 0x82, 0x9a, 0x00, 0x0d, 0x1c, 0x21, 0x6c, 0x61,
        0x63, 0x65, 0x0a,
    ];

    /// UDP [2001:db8:a::1]:42880 → [2001:db8:b::1]:33434: frame 32 (`echo lace
    /// >/dev/udp/2001:db8:b::1/33434`), from byte 14.
    static UDP_V6: [u8; 53] = [
        0x60, 0x00, 0x72, 0x04, 0x00, 0x0d, 0x11, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0b,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xa7, 0x80, 0x82, 0x9a, 0x00,
        0x0d, 0xa0, 0x69, 0x6c, 0x61, 0x63, 0x65, 0x0a,
    ];

    /// TCP SYN 192.0.2.1:49590 → 198.51.100.1:80: frame 20 (`exec 3<>/dev/tcp/198.51.100.1/80`),
    /// from byte 14.
    static TCP_V4: [u8; 60] = [
        0x45, 0x00, 0x00, 0x3c, 0xfe, 0xad, 0x40, 0x00, 0x40, 0x06, 0x4f, 0xd8, 0xc0, 0x00, 0x02,
        0x01, 0xc6, 0x33, 0x64, 0x01, 0xc1, 0xb6, 0x00, 0x50, 0x63, 0x96, 0x5a, 0x78, 0x00, 0x00,
        0x00, 0x00, 0xa0, 0x02, 0xfb, 0xe0, 0xdf, 0x20, 0x00, 0x00, 0x02, 0x04, 0x04, 0xd8, 0x04,
        0x02, 0x08, 0x0a, 0x41, 0xab, 0xbf, 0xe0, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x0a,
    ];

    /// MLDv2 report from R's link-local address, behind a Hop-by-Hop header (Router Alert):
    /// frame 1 (sent by R's kernel when r0 came up), from byte 14.
    static HOP_BY_HOP: [u8; 156] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x74, 0x00, 0x01, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xff, 0xfe, 0x00, 0x0a, 0x02, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x16, 0x3a, 0x00, 0x05, 0x02, 0x00,
        0x00, 0x01, 0x00, 0x8f, 0x00, 0x52, 0x9c, 0x00, 0x00, 0x00, 0x05, 0x04, 0x00, 0x00, 0x00,
        0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x00, 0x0a,
        0x02, 0x04, 0x00, 0x00, 0x00, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0xff, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xff, 0x05, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x04, 0x00, 0x00, 0x00,
        0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, 0x04, 0x00, 0x00, 0x00, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0xff, 0x00, 0x00, 0xfe,
    ];

    const A4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const B4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 1);
    const B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 1);

    fn tuple(
        src: impl Into<IpAddr>,
        dst: impl Into<IpAddr>,
        p: Protocol,
        sp: u16,
        dp: u16,
    ) -> FiveTuple {
        FiveTuple {
            src_addr: src.into(),
            dst_addr: dst.into(),
            protocol: p,
            src_port: sp,
            dst_port: dp,
        }
    }

    #[test]
    fn extracts_from_real_packets() {
        assert_eq!(
            FiveTuple::from_ip(&UDP_V4),
            Ok(tuple(A4, B4, Protocol::Udp, 39707, 33434))
        );
        assert_eq!(
            FiveTuple::from_ip(&UDP_V6),
            Ok(tuple(A6, B6, Protocol::Udp, 42880, 33434))
        );
        assert_eq!(
            FiveTuple::from_ip(&TCP_V4),
            Ok(tuple(A4, B4, Protocol::Tcp, 49590, 80))
        );
        let r4 = Ipv4Addr::new(192, 0, 2, 254);
        let echo4 = FiveTuple::from_ip(&ipv4::tests::ECHO_REQUEST);
        assert_eq!(echo4, Ok(tuple(A4, r4, Protocol::Icmp, 0x35de, 0x35de)));
        let r6 = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0xfe);
        let echo6 = FiveTuple::from_ip(&ipv6::tests::ECHO_REQUEST);
        assert_eq!(echo6, Ok(tuple(A6, r6, Protocol::Icmpv6, 0x36fc, 0x36fc)));
    }

    #[test]
    fn walks_extension_headers() {
        // Through the SRH of an SRv6 encapsulation to the inner IPv6 packet.
        let fc00_1 = Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 1);
        let encap = FiveTuple::from_ip(&srh::tests::ENCAP);
        assert_eq!(encap, Ok(tuple(A6, fc00_1, Protocol::Ipv6, 0, 0)));
        // Through Hop-by-Hop to an MLD report (not an echo: no ports).
        let fe80 = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 0x0a02);
        let mld = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x16);
        assert_eq!(
            FiveTuple::from_ip(&HOP_BY_HOP),
            Ok(tuple(fe80, mld, Protocol::Icmpv6, 0, 0))
        );
    }

    /// The UDP/IPv6 sample with a Fragment header inserted (offset and M flag given).
    fn v6_fragment(offset_m: u16) -> [u8; 61] {
        let mut bytes = [0u8; 61];
        bytes[..40].copy_from_slice(&UDP_V6[..40]);
        let mut packet = ipv6::Packet::new_unchecked(&mut bytes[..]);
        packet.set_next_header(Protocol::Ipv6Frag);
        packet.set_payload_len(21);
        bytes[40] = u8::from(Protocol::Udp);
        bytes[42..44].copy_from_slice(&offset_m.to_be_bytes());
        bytes[44..48].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        bytes[48..].copy_from_slice(&UDP_V6[40..]);
        bytes
    }

    #[test]
    fn fragments_have_no_ports() {
        let last = FiveTuple::from_ip(&ipv4::tests::LAST_FRAGMENT).unwrap();
        assert_eq!(
            (last.protocol, last.src_port, last.dst_port),
            (Protocol::Icmp, 0, 0)
        );
        // IPv4 first fragment: the UDP sample with More Fragments set.
        let mut bytes = UDP_V4;
        ipv4::Packet::new_unchecked(&mut bytes[..]).set_more_frags(true);
        assert_eq!(
            FiveTuple::from_ip(&bytes),
            Ok(tuple(A4, B4, Protocol::Udp, 0, 0))
        );
        // IPv6: an atomic fragment (offset 0, M clear) keeps its ports; real fragments do not.
        let atomic = FiveTuple::from_ip(&v6_fragment(0));
        assert_eq!(atomic, Ok(tuple(A6, B6, Protocol::Udp, 42880, 33434)));
        for offset_m in [0x0001, 0x05c8, 0x05c9] {
            let fragment = FiveTuple::from_ip(&v6_fragment(offset_m));
            assert_eq!(
                fragment,
                Ok(tuple(A6, B6, Protocol::Udp, 0, 0)),
                "{offset_m:#x}"
            );
        }
    }

    #[test]
    fn errors() {
        assert_eq!(FiveTuple::from_ip(&[]), Err(Error::Truncated));
        assert_eq!(FiveTuple::from_ip(&[0x50; 40]), Err(Error::BadVersion));
        // IPv4 header fine, UDP header cut to 3 bytes.
        let mut bytes = [0u8; 23];
        bytes.copy_from_slice(&UDP_V4[..23]);
        ipv4::Packet::new_unchecked(&mut bytes[..]).set_total_len(23);
        assert_eq!(FiveTuple::from_ip(&bytes), Err(Error::Truncated));
        // An extension header running past the payload.
        let mut bytes = HOP_BY_HOP;
        bytes[41] = 200;
        assert_eq!(FiveTuple::from_ip(&bytes), Err(Error::Truncated));
        // A chain longer than MAX_EXTENSION_HEADERS: protocol is the last one walked, no ports.
        let mut bytes = [0u8; 40 + 8 * (MAX_EXTENSION_HEADERS + 1)];
        bytes[..40].copy_from_slice(&UDP_V6[..40]);
        let mut packet = ipv6::Packet::new_unchecked(&mut bytes[..]);
        packet.set_next_header(Protocol::Ipv6Opts);
        packet.set_payload_len((8 * (MAX_EXTENSION_HEADERS + 1)) as u16);
        for i in 0..=MAX_EXTENSION_HEADERS {
            bytes[40 + 8 * i] = u8::from(Protocol::Ipv6Opts);
        }
        let long = FiveTuple::from_ip(&bytes).unwrap();
        assert_eq!((long.protocol, long.src_port), (Protocol::Ipv6Opts, 0));
    }

    #[test]
    fn hash_is_deterministic_and_seeded() {
        let t = FiveTuple::from_ip(&UDP_V4).unwrap();
        assert_eq!(t.hash(0), t.hash(0));
        assert_ne!(t.hash(0), t.hash(1));
        let reverse = tuple(B4, A4, Protocol::Udp, 33434, 39707);
        assert_ne!(t.hash(0), reverse.hash(0));
        // A v4 tuple and the v6 tuple of the same numbers differ.
        let mapped = tuple(
            Ipv6Addr::from_bits(u128::from(A4.to_bits())),
            Ipv6Addr::from_bits(u128::from(B4.to_bits())),
            Protocol::Udp,
            39707,
            33434,
        );
        assert_ne!(t.hash(0), mapped.hash(0));
    }

    #[test]
    fn flow_labels_spread() {
        // 4096 flows differing only in the source port: labels nearly all distinct (about 8
        // collisions expected in 2^20), low bits (an RSS queue index) evenly used.
        let mut labels = [0u32; 4096];
        let mut buckets = [0u32; 16];
        for (i, label) in labels.iter_mut().enumerate() {
            let t = tuple(A6, B6, Protocol::Tcp, 1024 + i as u16, 443);
            *label = t.flow_label(0x1ace);
            assert!(*label != 0 && *label <= 0xf_ffff);
            buckets[(*label & 0xf) as usize] += 1;
        }
        labels.sort_unstable();
        let distinct = 1 + labels.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(distinct >= 4070, "{distinct} distinct labels");
        for (i, &n) in buckets.iter().enumerate() {
            assert!((192..=320).contains(&n), "bucket {i}: {n}");
        }
    }

    #[test]
    fn the_ipv4_fast_label_is_the_tuples_label() {
        let seed = 0x5eed;
        for packet in [&UDP_V4[..], &TCP_V4[..]] {
            let t = FiveTuple::from_ipv4(packet).unwrap();
            assert_eq!(ipv4_flow_label(packet, seed), t.flow_label(seed));
        }
        // A fragment: no ports, in both.
        let mut frag = UDP_V4;
        frag[6] = 0x20;
        let t = FiveTuple::from_ipv4(&frag).unwrap();
        assert_eq!((t.src_port, t.dst_port), (0, 0));
        assert_eq!(ipv4_flow_label(&frag, seed), t.flow_label(seed));
        // UDP with its ports cut off: the tuple fails, the label is 1.
        let mut short = UDP_V4[..22].to_vec();
        short[2..4].copy_from_slice(&22u16.to_be_bytes());
        assert!(FiveTuple::from_ipv4(&short).is_err());
        assert_eq!(ipv4_flow_label(&short, seed), 1);
        // Same flow, same label, whatever the payload; another port, another label.
        let mut other = UDP_V4;
        other[30] ^= 0xff;
        assert_eq!(
            ipv4_flow_label(&other, seed),
            ipv4_flow_label(&UDP_V4, seed)
        );
        other[21] ^= 1;
        assert_ne!(
            ipv4_flow_label(&other, seed),
            ipv4_flow_label(&UDP_V4, seed)
        );
    }

    #[test]
    fn the_common_label_from_unchecked_bytes_is_the_checked_label_or_none() {
        let seed = 0x5eed;
        for packet in [&UDP_V4[..], &TCP_V4[..]] {
            assert!(ipv4::Packet::new_checked(packet).is_ok());
            assert_eq!(
                common_ipv4_label(packet, seed),
                Some(ipv4_flow_label(packet, seed))
            );
        }
        let edit = |at: usize, v: u8| {
            let mut p = UDP_V4.to_vec();
            p[at] = v;
            p
        };
        let longer = {
            let mut p = UDP_V4.to_vec();
            p[2..4].copy_from_slice(&(UDP_V4.len() as u16 + 1).to_be_bytes());
            p
        };
        for (what, p) in [
            ("a fragment", edit(6, 0x20)),
            ("options", edit(0, 0x46)),
            ("version 6", edit(0, 0x65)),
            ("ICMP", edit(9, 1)),
            ("Total Length beyond the bytes", longer),
            ("shorter than its ports", UDP_V4[..23].to_vec()),
        ] {
            assert_eq!(common_ipv4_label(&p, seed), None, "{what}");
        }
    }

    #[test]
    fn rss_hashes_fold_to_non_zero_labels() {
        assert_eq!(label_of(0), 1);
        assert_eq!(label_of(0x0010_0001), 1, "the folded top bits cancel");
        assert_eq!(label_of(0x0000_0005), 5);
        assert!(label_of(u32::MAX) <= 0xf_ffff);
    }
}
