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
///
/// The words are added in the machine's byte order and the sum swapped once at the end: the
/// one's-complement sum of byte-swapped words is the byte-swapped sum (RFC 1071 §2(B)), so no
/// word is swapped on the way.
#[inline(always)]
pub fn data(bytes: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        acc = add(acc, u64::from_ne_bytes(word.try_into().unwrap_or([0; 8])));
    }
    // The tail, 0–7 bytes, as one more word padded with zeros after it.
    let tail = words.remainder();
    let mut last = [0u8; 8];
    if let Some(head) = last.get_mut(..tail.len()) {
        head.copy_from_slice(tail);
    }
    u16::from_be(fold(add(acc, u64::from_ne_bytes(last))))
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
    update_by(checksum, delta_u16(old, new))
}

/// [`update_u16`] for a changed 32-bit word (e.g. an IPv4 address in a NAT rewrite).
#[inline]
pub fn update_u32(checksum: u16, old: u32, new: u32) -> u16 {
    update_by(checksum, delta_u32(old, new))
}

/// The change of a 16-bit word from `old` to `new` as [`update_by`] takes it: `~m + m'`.
#[inline(always)]
pub fn delta_u16(old: u16, new: u16) -> u64 {
    u64::from(!old) + u64::from(new)
}

/// [`delta_u16`] of both halves of a 32-bit word.
#[inline(always)]
pub fn delta_u32(old: u32, new: u32) -> u64 {
    delta_u16((old >> 16) as u16, (new >> 16) as u16) + delta_u16(old as u16, new as u16)
}

/// Updates checksum field `checksum` by the sum of several changes ([`delta_u16`],
/// [`delta_u32`]): the same result as [`update_u16`] for each in turn, with one fold. A
/// translation that changes the same words of many packets sums their changes once.
#[inline(always)]
pub fn update_by(checksum: u16, delta: u64) -> u16 {
    !fold(u64::from(!checksum) + delta)
}

/// CRC32-C (Castagnoli, reflected), bitwise: SCTP's checksum (RFC 9260 appendix A), which
/// the packet stores little endian. Only SCTP port translations and test packets need it.
pub fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
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
    fn summed_changes_equal_changes_one_at_a_time() {
        // Including the checksums and words whose sums fold to either zero.
        let words = [0x0000u16, 0x0001, 0x7fff, 0x8000, 0xfffe, 0xffff, 0x1234];
        for &c in &words {
            for &o in &words {
                for &n in &words {
                    let (o32, n32) = (u32::from(o) << 16 | u32::from(n), u32::from(n) << 16);
                    let one_by_one = update_u16(update_u32(c, o32, n32), n, o);
                    let summed = update_by(c, delta_u32(o32, n32) + delta_u16(n, o));
                    assert_eq!(summed, one_by_one, "{c:#x} {o:#x} {n:#x}");
                }
            }
        }
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

    #[test]
    fn crc32c_is_castagnolis() {
        // The check value of CRC-32C (RFC 3720 appendix B.4's algorithm).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }
}
