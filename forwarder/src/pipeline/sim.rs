//! Running the pipeline without DPDK: a worker's side that records what leaves
//! ([`RecordingIo`]) and builders of well-formed packets (every checksum correct) to feed it.
//! The forwarder's packet tests use them, and so do suites outside the crate that decide
//! traffic by the real pipeline over real tables (the NetworkPolicy truth tables of
//! `lace-conformance`).
//!
//! The builders are written from the RFCs, independently of the pipeline's parsers, so a
//! packet test compares the pipeline with the wire format and not with itself. Frames are plain
//! byte vectors; [`VecBuf::from_slice`] puts one in a buffer shaped like an mbuf.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lace_shared::learn::LearnEvent;
use lace_shared::policy::{PROTO_SCTP, PROTO_TCP, PROTO_UDP};
use lace_shared::types::PortId;

use super::{Io, VecBuf};
use crate::wire::checksum;

/// The worker's side of a pipeline run without NICs: every packet sent is kept with its output
/// port, in order.
#[derive(Debug, Default)]
pub struct RecordingIo {
    /// What the pipeline sent, in order.
    pub sent: Vec<(PortId, VecBuf)>,
    /// The ports that are up; `None`: every port is.
    pub up: Option<Vec<PortId>>,
    /// Buffer allocation fails (a mempool run dry).
    pub no_buffers: bool,
    /// The clock ([`Io::now_ns`]), in nanoseconds.
    pub now: u64,
    /// The l2 learn reports the pipeline made ([`Io::learn`]), in order.
    pub learned: Vec<LearnEvent>,
}

impl Io<VecBuf> for RecordingIo {
    fn send(&mut self, port: PortId, pkt: VecBuf) {
        self.sent.push((port, pkt));
    }
    fn port_up(&self, port: PortId) -> bool {
        self.up.as_ref().is_none_or(|up| up.contains(&port))
    }
    fn alloc(&mut self) -> Option<VecBuf> {
        (!self.no_buffers).then(VecBuf::new)
    }
    fn now_ns(&self) -> u64 {
        self.now
    }
    fn learn(&mut self, event: &LearnEvent) {
        self.learned.push(*event);
    }
}

/// EtherType of IPv4.
pub const ETH_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETH_IPV6: u16 = 0x86dd;

/// An Ethernet frame (no VLAN tag).
pub fn eth(dst: [u8; 6], src: [u8; 6], ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ty.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// `frame` with an 802.1Q tag for `vlan` (priority 0) after its addresses.
pub fn tagged(vlan: u16, frame: &[u8]) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&0x8100u16.to_be_bytes());
    f.extend_from_slice(&vlan.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

/// An IPv4 packet without options (identification 0x1234), header checksum filled.
pub fn ipv4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    ttl: u8,
    tos: u8,
    df: bool,
    payload: &[u8],
) -> Vec<u8> {
    let mut h = vec![0x45, tos];
    h.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34, if df { 0x40 } else { 0 }, 0, ttl, proto, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let c = !checksum::data(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

/// An IPv6 packet without extension headers.
pub fn ipv6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next: u8,
    hlim: u8,
    flow: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut h = (6u32 << 28 | flow).to_be_bytes().to_vec();
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, hlim]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(payload);
    h
}

/// An IP packet of `src`'s family (both addresses must be of one family; IPv4 with DF set,
/// IPv6 with flow label 0).
///
/// # Panics
///
/// When the families differ.
pub fn ip(src: IpAddr, dst: IpAddr, proto: u8, ttl: u8, payload: &[u8]) -> Vec<u8> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => ipv4(s, d, proto, ttl, 0, true, payload),
        (IpAddr::V6(s), IpAddr::V6(d)) => ipv6(s, d, proto, ttl, 0, payload),
        _ => panic!("an IP packet from {src} to {dst}: the families differ"),
    }
}

/// A UDP datagram with checksum 0 (none: allowed over IPv4 only; see [`udp_checked`]).
pub fn udp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    u
}

/// A UDP datagram with its checksum over `src`/`dst`'s pseudo-header.
pub fn udp_checked(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = udp(sport, dport, data);
    let c = match upper_checksum(src, dst, PROTO_UDP, &u) {
        0 => 0xffff,
        c => c,
    };
    u[6..8].copy_from_slice(&c.to_be_bytes());
    u
}

/// TCP flag bits.
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// A TCP segment without options (sequence number 1, acknowledgment 0, window 65535) with its
/// checksum over `src`/`dst`'s pseudo-header.
pub fn tcp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut t = sport.to_be_bytes().to_vec();
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(data);
    let c = upper_checksum(src, dst, PROTO_TCP, &t);
    t[16..18].copy_from_slice(&c.to_be_bytes());
    t
}

/// [`tcp`] over IPv4.
pub fn tcp4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    flags: u8,
    data: &[u8],
) -> Vec<u8> {
    tcp(src.into(), dst.into(), sport, dport, flags, data)
}

/// [`tcp`] over IPv6.
pub fn tcp6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    sport: u16,
    dport: u16,
    flags: u8,
    data: &[u8],
) -> Vec<u8> {
    tcp(src.into(), dst.into(), sport, dport, flags, data)
}

/// An SCTP packet (RFC 9260 §3): the common header with verification tag `vtag`, then
/// `chunks` (each already padded to 4 bytes), the CRC32-C filled.
pub fn sctp(sport: u16, dport: u16, vtag: u32, chunks: &[u8]) -> Vec<u8> {
    let mut s = sport.to_be_bytes().to_vec();
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&vtag.to_be_bytes());
    s.extend_from_slice(&[0; 4]);
    s.extend_from_slice(chunks);
    let crc = checksum::crc32c(&s);
    s[8..12].copy_from_slice(&crc.to_le_bytes());
    s
}

/// An SCTP INIT chunk (type 1) announcing initiate tag `tag`, 10 streams each way, initial
/// TSN `tag` (an association's first packet carries it alone, with verification tag 0).
pub fn sctp_init(tag: u32) -> Vec<u8> {
    let mut c = vec![1, 0, 0, 20];
    c.extend_from_slice(&tag.to_be_bytes());
    c.extend_from_slice(&65535u32.to_be_bytes());
    c.extend_from_slice(&[0, 10, 0, 10]);
    c.extend_from_slice(&tag.to_be_bytes());
    c
}

/// An SCTP INIT ACK chunk (type 2) announcing `tag`, with a state cookie `cookie`.
pub fn sctp_init_ack(tag: u32, cookie: [u8; 4]) -> Vec<u8> {
    let mut c = vec![2, 0, 0, 28];
    c.extend_from_slice(&tag.to_be_bytes());
    c.extend_from_slice(&65535u32.to_be_bytes());
    c.extend_from_slice(&[0, 10, 0, 10]);
    c.extend_from_slice(&tag.to_be_bytes());
    // State Cookie parameter (type 7).
    c.extend_from_slice(&[0, 7, 0, 8]);
    c.extend_from_slice(&cookie);
    c
}

/// An SCTP DATA chunk (type 0, a whole unfragmented message on stream 0), padded to 4 bytes.
pub fn sctp_data(tsn: u32, data: &[u8]) -> Vec<u8> {
    let mut c = vec![0, 0x03];
    c.extend_from_slice(&((16 + data.len()) as u16).to_be_bytes());
    c.extend_from_slice(&tsn.to_be_bytes());
    c.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
    c.extend_from_slice(data);
    c.resize(c.len().next_multiple_of(4), 0);
    c
}

/// An ICMP echo request or reply (ICMPv4 types 8/0 from an IPv4 `src`, ICMPv6 types 128/129
/// with the pseudo-header in the checksum from an IPv6 one). Returns the IP protocol number to
/// carry it (1 or 58) and the message.
pub fn icmp_echo(
    src: IpAddr,
    dst: IpAddr,
    request: bool,
    ident: u16,
    seq: u16,
    data: &[u8],
) -> (u8, Vec<u8>) {
    let (proto, kind) = match (src.is_ipv4(), request) {
        (true, true) => (1, 8),
        (true, false) => (1, 0),
        (false, true) => (58, 128),
        (false, false) => (58, 129),
    };
    let mut m = vec![kind, 0, 0, 0];
    m.extend_from_slice(&ident.to_be_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(data);
    let c = if proto == 1 {
        !checksum::data(&m)
    } else {
        upper_checksum(src, dst, proto, &m)
    };
    m[2..4].copy_from_slice(&c.to_be_bytes());
    (proto, m)
}

/// The checksum field value of upper-layer message `msg` (its own field zero) under
/// `src`/`dst`'s pseudo-header (RFC 9293 §3.1, RFC 8200 §8.1).
fn upper_checksum(src: IpAddr, dst: IpAddr, proto: u8, msg: &[u8]) -> u16 {
    let mut pseudo = Vec::with_capacity(40 + msg.len());
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&[0, proto]);
            pseudo.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        }
        _ => {
            pseudo.extend_from_slice(&v6_of(src).octets());
            pseudo.extend_from_slice(&v6_of(dst).octets());
            pseudo.extend_from_slice(&(msg.len() as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, proto]);
        }
    }
    pseudo.extend_from_slice(msg);
    !checksum::data(&pseudo)
}

fn v6_of(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The upper-layer message of an IP packet whose header is at the front of `ip` and whose
/// checksum covers its pseudo-header (TCP, UDP with a checksum, ICMPv6) sums correctly; SCTP's
/// CRC32-C is correct; an IPv4 header's own checksum is correct. `false` for anything else
/// unparsed (extension headers, options-less IPv4 only).
pub fn checksums_valid(ip: &[u8]) -> bool {
    let Some(&first) = ip.first() else {
        return false;
    };
    let (src, dst, proto, l4, end) = match first >> 4 {
        4 if ip.len() >= 20 && first == 0x45 => {
            if checksum::data(&ip[..20]) != 0xffff {
                return false;
            }
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            let s: [u8; 4] = ip[12..16].try_into().unwrap_or_default();
            let d: [u8; 4] = ip[16..20].try_into().unwrap_or_default();
            (IpAddr::from(s), IpAddr::from(d), ip[9], 20, total)
        }
        6 if ip.len() >= 40 => {
            let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            let s: [u8; 16] = ip[8..24].try_into().unwrap_or_default();
            let d: [u8; 16] = ip[24..40].try_into().unwrap_or_default();
            (IpAddr::from(s), IpAddr::from(d), ip[6], 40, 40 + plen)
        }
        _ => return false,
    };
    let Some(msg) = ip.get(l4..end) else {
        return false;
    };
    match proto {
        PROTO_TCP | 58 => upper_sum_ok(src, dst, proto, msg),
        PROTO_UDP if src.is_ipv4() && msg.get(6..8) == Some(&[0, 0]) => true,
        PROTO_UDP => upper_sum_ok(src, dst, proto, msg),
        1 => checksum::data(msg) == 0xffff,
        PROTO_SCTP if msg.len() >= 12 => {
            let mut zeroed = msg.to_vec();
            zeroed[8..12].fill(0);
            msg[8..12] == checksum::crc32c(&zeroed).to_le_bytes()
        }
        _ => false,
    }
}

fn upper_sum_ok(src: IpAddr, dst: IpAddr, proto: u8, msg: &[u8]) -> bool {
    let at = match proto {
        PROTO_TCP => 16,
        PROTO_UDP => 6,
        _ => 2,
    };
    if msg.len() < at + 2 {
        return false;
    }
    let mut zeroed = msg.to_vec();
    zeroed[at..at + 2].fill(0);
    let want = upper_checksum(src, dst, proto, &zeroed);
    let want = if proto == PROTO_UDP && want == 0 {
        0xffff
    } else {
        want
    };
    msg[at..at + 2] == want.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_packets_carry_valid_checksums_and_a_flipped_bit_is_caught() {
        let (a4, b4): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let (a6, b6): (IpAddr, IpAddr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        for (a, b) in [(a4, b4), (a6, b6)] {
            let (icmp_proto, echo) = icmp_echo(a, b, true, 7, 1, b"ping");
            for (proto, msg) in [
                (PROTO_TCP, tcp(a, b, 40000, 80, tcp_flags::SYN, b"")),
                (PROTO_UDP, udp_checked(a, b, 40000, 80, b"datagram")),
                (PROTO_SCTP, sctp(40000, 80, 0, &sctp_init(0x1ace))),
                (PROTO_SCTP, sctp(80, 40000, 0x1ace, &sctp_data(1, b"abcde"))),
                (icmp_proto, echo.clone()),
            ] {
                let p = ip(a, b, proto, 64, &msg);
                assert!(checksums_valid(&p), "{a} proto {proto}");
                let mut bad = p.clone();
                let last = bad.len() - 1;
                bad[last] ^= 0x10;
                assert!(
                    !checksums_valid(&bad),
                    "{a} proto {proto}: a flipped bit passes"
                );
            }
        }
        // RFC 9260: an INIT alone in its packet, with verification tag 0; chunks 4-byte aligned.
        assert_eq!(sctp_init(1).len(), 20);
        assert_eq!(sctp_init_ack(1, [0; 4]).len(), 28);
        assert_eq!(sctp_data(1, b"abcde").len(), 24);
    }
}
