//! CRC32-C (Castagnoli) over 64-bit words, as DPDK's `rte_hash_crc_8byte` computes it: the
//! SSE4.2 `crc32` instruction, which the x86-64-v2 baseline every lace build targets guarantees
//! (ADR 0003; `.cargo/config.toml`), and a bitwise fallback for other targets.
//!
//! Used for flow hashing on the fast path: one instruction per 8 bytes, 3 cycles of latency.

/// The reflected CRC32-C polynomial.
#[cfg(any(test, not(all(target_arch = "x86_64", target_feature = "sse4.2"))))]
const POLY: u32 = 0x82f6_3b78;

/// Folds the 8 bytes of `word` (little-endian order, as the instruction reads them) into `crc`.
#[inline(always)]
pub fn crc32c_u64(crc: u32, word: u64) -> u32 {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse4.2"))]
    {
        // SAFETY: the instruction only needs SSE4.2, which this cfg proves is enabled for the
        // whole build; it reads and writes registers only.
        unsafe { core::arch::x86_64::_mm_crc32_u64(u64::from(crc), word) as u32 }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse4.2")))]
    {
        bitwise(crc, word)
    }
}

/// The same CRC, one bit at a time (the reference).
#[cfg(any(test, not(all(target_arch = "x86_64", target_feature = "sse4.2"))))]
fn bitwise(mut crc: u32, word: u64) -> u32 {
    for byte in word.to_le_bytes() {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_and_the_standard_check_value() {
        // The CRC-32C check value (RFC 3720 §B.4 polynomial): "123456789" → 0xe3069283, with
        // the usual initial value and final complement. Eight of the nine bytes as one word,
        // the ninth through the bitwise reference.
        let word = u64::from_le_bytes(*b"12345678");
        let crc = crc32c_u64(!0, word);
        let mut last = crc ^ u32::from(b'9');
        for _ in 0..8 {
            last = if last & 1 != 0 {
                (last >> 1) ^ POLY
            } else {
                last >> 1
            };
        }
        assert_eq!(!last, 0xe306_9283);
        for (c, w) in [
            (0, 0),
            (1, 2),
            (0xdead_beef, 0x0123_4567_89ab_cdef),
            (!0, !0),
        ] {
            assert_eq!(crc32c_u64(c, w), bitwise(c, w), "{c:#x} {w:#x}");
        }
    }
}
