//! The Internet checksum: one's-complement sums (RFC 1071), the IPv4 and IPv6 pseudo-headers
//! (RFC 768, RFC 9293 §3.1, RFC 8200 §8.1) and incremental updates (RFC 1624).
//!
//! Sums are folded to 16 bits but not complemented; a checksum field holds the complement of
//! the sum of everything it covers ([`finish`]). A buffer whose checksum field is correct sums,
//! field included, to `0xffff`.
//!
//! [`data`] adds 64-bit big-endian words with end-around carry: since 2^16 ≡ 1 modulo
//! 2^16 − 1, that is the same one's-complement sum as adding 16-bit words (RFC 1071 §2(B)),
//! with a quarter of the additions.

use super::ip::Protocol;
use super::{Ipv4Addr, Ipv6Addr};

/// Folds a 64-bit one's-complement accumulator to 16 bits: 64 → 33 → 17 → 16 bits, three
/// steps without a loop.
#[inline(always)]
fn fold(acc: u64) -> u16 {
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    let acc = (acc & 0xffff) + (acc >> 16);
    let acc = (acc & 0xffff) + (acc >> 16);
    ((acc & 0xffff) + (acc >> 16)) as u16
}

/// Adds `word` to the accumulator with end-around carry.
#[inline(always)]
fn add(acc: u64, word: u64) -> u64 {
    let (sum, carry) = acc.overflowing_add(word);
    // Cannot overflow again: when `carry` is set, `sum` <= 2^64 - 2.
    sum + u64::from(carry)
}

/// One's-complement sum of `bytes` as big-endian 16-bit words; an odd last byte is padded with a
/// zero byte (RFC 1071 §4.1).
#[inline(always)]
pub fn data(bytes: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        acc = add(acc, u64::from_be_bytes(word.try_into().unwrap_or([0; 8])));
    }
    // The tail, 0–7 bytes, as the high bytes of one more big-endian word (each piece shifted
    // to its place; no copy through memory).
    let tail = words.remainder();
    let mut w = 0u64;
    let mut at = 0;
    if let Some(four) = tail.get(..4) {
        w |= u64::from(u32::from_be_bytes(four.try_into().unwrap_or([0; 4]))) << 32;
        at = 4;
    }
    if let Some(two) = tail.get(at..at + 2) {
        w |= u64::from(u16::from_be_bytes(two.try_into().unwrap_or([0; 2]))) << (48 - 8 * at);
        at += 2;
    }
    if let Some(&one) = tail.get(at) {
        w |= u64::from(one) << (56 - 8 * at);
    }
    fold(add(acc, w))
}

/// One's-complement sum of partial sums.
#[inline]
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// The value a checksum field holds for data whose sum (field taken as zero) is `sum`.
#[inline]
pub fn finish(sum: u16) -> u16 {
    !sum
}

/// Sum of the IPv4 pseudo-header (RFC 9293 §3.1, RFC 768): source, destination, zero, protocol,
/// upper-layer length.
#[inline]
pub fn pseudo_header_v4(src: &Ipv4Addr, dst: &Ipv4Addr, protocol: Protocol, length: u16) -> u16 {
    let s = u32::from_be_bytes(src.octets());
    let d = u32::from_be_bytes(dst.octets());
    fold(
        u64::from(s >> 16)
            + u64::from(s & 0xffff)
            + u64::from(d >> 16)
            + u64::from(d & 0xffff)
            + u64::from(u8::from(protocol))
            + u64::from(length),
    )
}

/// Sum of the IPv6 pseudo-header (RFC 8200 §8.1): source, destination, 32-bit upper-layer
/// length, three zero bytes, next header.
#[inline]
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: Protocol, length: u32) -> u16 {
    let fold128 = |a: u128| -> u64 {
        let (hi, lo) = ((a >> 64) as u64, a as u64);
        u64::from(fold(hi)) + u64::from(fold(lo))
    };
    fold(
        fold128(u128::from_be_bytes(src.octets()))
            + fold128(u128::from_be_bytes(dst.octets()))
            + u64::from(length >> 16)
            + u64::from(length & 0xffff)
            + u64::from(u8::from(next_header)),
    )
}

/// Updates checksum field `checksum` after a 16-bit word it covers changed from `old` to `new`:
/// `HC' = ~(~HC + ~m + m')`, RFC 1624 eqn. 3 (which, unlike RFC 1141's, never produces the
/// wrong zero).
#[inline(always)]
pub fn update_u16(checksum: u16, old: u16, new: u16) -> u16 {
    !fold(u64::from(!checksum) + u64::from(!old) + u64::from(new))
}

/// [`update_u16`] for a changed 32-bit word (e.g. an IPv4 address in a NAT rewrite).
#[inline]
pub fn update_u32(checksum: u16, old: u32, new: u32) -> u16 {
    let acc = u64::from(!checksum)
        + u64::from(!(old >> 16) as u16)
        + u64::from(!(old as u16))
        + u64::from((new >> 16) as u16)
        + u64::from(new as u16);
    !fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IPv4 header of an ICMP echo request, checksum 0x21be at offset 10: frame 6 of
    /// `forwarder/testdata/wire/samples.pcap`, from `ping -c 1 192.0.2.254` in `capture.sh`.
    static IPV4_HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x54, 0x93, 0xeb, 0x40, 0x00, 0x40, 0x01, 0x21, 0xbe, 0xc0, 0x00, 0x02,
        0x01, 0xc0, 0x00, 0x02, 0xfe,
    ];

    /// The word-at-a-time sum RFC 1071 describes, as the reference.
    fn reference(bytes: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for pair in bytes.chunks(2) {
            let hi = u32::from(pair[0]) << 8;
            let lo = pair.get(1).copied().map_or(0, u32::from);
            acc += hi | lo;
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn real_header_sums_to_all_ones() {
        assert_eq!(data(&IPV4_HEADER), 0xffff);
        let mut zeroed = IPV4_HEADER;
        zeroed[10..12].fill(0);
        assert_eq!(finish(data(&zeroed)), 0x21be);
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        assert_eq!(
            data(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
    }

    #[test]
    fn matches_reference_at_every_length_and_alignment() {
        let bytes: [u8; 41] = core::array::from_fn(|i| (i as u8).wrapping_mul(151).wrapping_add(7));
        for start in 0..8 {
            for end in start..bytes.len() {
                assert_eq!(data(&bytes[start..end]), reference(&bytes[start..end]));
            }
        }
        assert_eq!(data(&[0xff; 4096]), 0xffff);
        assert_eq!(data(&[]), 0);
        assert_eq!(data(&[0xab]), 0xab00);
    }

    #[test]
    fn combine_folds_carries() {
        assert_eq!(combine(&[0xffff, 0x0001]), 0x0001);
        assert_eq!(combine(&[0x8000, 0x8000, 0x0001]), 0x0002);
        assert_eq!(combine(&[]), 0);
    }

    #[test]
    fn pseudo_headers_match_byte_layout() {
        let (s4, d4) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 1));
        let mut v4 = [0u8; 12];
        v4[..4].copy_from_slice(&s4.octets());
        v4[4..8].copy_from_slice(&d4.octets());
        v4[9] = 17;
        v4[10..].copy_from_slice(&13u16.to_be_bytes());
        assert_eq!(pseudo_header_v4(&s4, &d4, Protocol::Udp, 13), data(&v4));

        let s6: Ipv6Addr = "2001:db8:a::1".parse().unwrap();
        let d6: Ipv6Addr = "ff02::1:ff00:fe".parse().unwrap();
        let mut v6 = [0u8; 40];
        v6[..16].copy_from_slice(&s6.octets());
        v6[16..32].copy_from_slice(&d6.octets());
        v6[32..36].copy_from_slice(&0x0001_0020u32.to_be_bytes());
        v6[39] = 58;
        assert_eq!(
            pseudo_header_v6(&s6, &d6, Protocol::Icmpv6, 0x0001_0020),
            data(&v6)
        );
    }

    #[test]
    fn incremental_update_equals_recomputation() {
        // Every TTL value in the real header, and every address change in a sample.
        for ttl in 0..=u8::MAX {
            let mut header = IPV4_HEADER;
            let old = u16::from_be_bytes([header[8], header[9]]);
            header[8] = ttl;
            let new = u16::from_be_bytes([header[8], header[9]]);
            let updated = update_u16(0x21be, old, new);
            header[10..12].fill(0);
            assert_eq!(updated, finish(data(&header)), "ttl {ttl}");
        }
        for i in 0..1000u32 {
            let new_dst = i.wrapping_mul(0x9e37_79b9);
            let mut header = IPV4_HEADER;
            header[16..20].copy_from_slice(&new_dst.to_be_bytes());
            let updated = update_u32(0x21be, 0xc000_02fe, new_dst);
            header[10..12].fill(0);
            assert_eq!(updated, finish(data(&header)), "dst {new_dst:#x}");
        }
    }
}
