//! A fast hasher for the writer's private bookkeeping maps (offsets, prefixes).
//!
//! SipHash, std's default, resists collision attacks at a cost the writer pays on every
//! allocation and route. The keys here are block offsets and route prefixes the writer itself
//! chose or validated, never read off the wire, so a multiply-rotate hash (as rustc uses) is
//! enough. Nothing hashed here lives in shared memory.

use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate hasher state.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

const K: u64 = 0xf135_7aea_2e62_a9c5;

impl FastHasher {
    #[inline(always)]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(26) ^ v).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(b));
        }
    }
    #[inline(always)]
    fn write_u8(&mut self, v: u8) {
        self.add(v as u64);
    }
    #[inline(always)]
    fn write_u32(&mut self, v: u32) {
        self.add(v as u64);
    }
    #[inline(always)]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    #[inline(always)]
    fn write_u128(&mut self, v: u128) {
        self.add(v as u64);
        self.add((v >> 64) as u64);
    }
    #[inline(always)]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    #[inline(always)]
    fn finish(&self) -> u64 {
        // Fold the high bits down: hashbrown takes bucket bits from the bottom.
        self.0 ^ (self.0 >> 29)
    }
}

/// `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FastHasher>>;
/// `HashSet` with [`FastHasher`].
pub type FastSet<K> = std::collections::HashSet<K, BuildHasherDefault<FastHasher>>;
