//! The packet buffer the pipeline edits: DPDK's [`Mbuf`] on the fast path, [`VecBuf`] in
//! packet tests and fuzzing. Stages are generic over [`PacketBuf`], so both run the same code.

use crate::dpdk::Mbuf;
use crate::offload::Gso;

/// A packet buffer with headroom, edited in place. Length-changing calls return `false`
/// (buffer unchanged) when there is no room.
pub trait PacketBuf {
    /// The packet bytes.
    fn data(&self) -> &[u8];
    /// The packet bytes, writable.
    fn data_mut(&mut self) -> &mut [u8];
    /// Grows the packet by `n` bytes at the front (contents unspecified).
    fn prepend(&mut self, n: usize) -> bool;
    /// Removes `n` bytes from the front.
    fn adj(&mut self, n: usize) -> bool;
    /// Removes `n` bytes from the end.
    fn trim(&mut self, n: usize) -> bool;
    /// Grows the packet by `n` bytes at the end (contents unspecified).
    fn append(&mut self, n: usize) -> bool;
    /// Packet length.
    #[inline]
    fn len(&self) -> usize {
        self.data().len()
    }
    /// Whether the packet is empty.
    #[inline]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The first `N` bytes as an array, or `None` if the packet is shorter: nodes read the
    /// headers they need at fixed offsets of it, so no access needs a bounds check.
    #[inline(always)]
    fn head<const N: usize>(&self) -> Option<&[u8; N]> {
        self.data().first_chunk::<N>()
    }
    /// The first `N` bytes as an array, writable.
    #[inline(always)]
    fn head_mut<const N: usize>(&mut self) -> Option<&mut [u8; N]> {
        self.data_mut().first_chunk_mut::<N>()
    }
    /// Starts loading the first bytes (the headers) into the cache: nodes call it a few packets
    /// ahead of the one they work on.
    #[inline]
    fn prefetch(&self) {}
    /// The flow hash the NIC computed (RSS), when the driver delivered one.
    #[inline]
    fn rss_hash(&self) -> Option<u32> {
        None
    }
    /// The NIC's verdict on the IPv4 header checksum of the frame as received (its outermost
    /// IPv4 header), when the driver gave one: `Some(true)` verified, `Some(false)` wrong,
    /// `None` not checked — the pipeline then verifies the sum itself.
    #[inline]
    fn rx_ipv4_checksum(&self) -> Option<bool> {
        None
    }
    /// The large segment this packet is (taken whole from a pod), if it is one.
    fn gso(&self) -> Option<Gso>;
    /// Marks the packet as a large segment, or as an ordinary packet (`None`).
    fn set_gso(&mut self, gso: Option<Gso>);
    /// Whether the packet is at most `max` bytes long, or is a large segment each of whose
    /// pieces will be: what a length limit (an MTU) means for a packet cut on its way out.
    #[inline(always)]
    fn fits(&self, max: usize) -> bool {
        self.len() <= max || self.gso().is_some_and(|g| pieces_fit(self.data(), g, max))
    }
    /// [`PacketBuf::fits`], after making the pieces of a large segment whose piece size is an
    /// estimate smaller if they must be ([`Gso::refit`]): what delivery to a pod asks of a
    /// segment that crossed a large-frame link whole.
    #[inline(always)]
    fn fit(&mut self, max: usize) -> bool {
        self.fits(max) || refit(self, max)
    }
    /// Sets the length by trimming (never grows).
    #[inline]
    fn truncate(&mut self, len: usize) -> bool {
        let cur = self.len();
        cur <= len || self.trim(cur - len)
    }
}

#[cold]
fn refit<B: PacketBuf + ?Sized>(pkt: &mut B, max: usize) -> bool {
    let Some(gso) = pkt.gso().and_then(|g| g.refit(pkt.data(), max)) else {
        return false;
    };
    pkt.set_gso(Some(gso));
    true
}

#[cold]
fn pieces_fit(frame: &[u8], gso: Gso, max: usize) -> bool {
    gso.piece_len(frame).is_ok_and(|len| len <= max)
}

impl PacketBuf for Mbuf {
    #[inline]
    fn data(&self) -> &[u8] {
        Mbuf::data(self)
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        Mbuf::data_mut(self)
    }
    #[inline]
    fn prepend(&mut self, n: usize) -> bool {
        Mbuf::prepend(self, n).is_some()
    }
    #[inline]
    fn adj(&mut self, n: usize) -> bool {
        Mbuf::adj(self, n).is_some()
    }
    #[inline]
    fn trim(&mut self, n: usize) -> bool {
        Mbuf::trim(self, n).is_some()
    }
    #[inline]
    fn append(&mut self, n: usize) -> bool {
        Mbuf::append(self, n).is_some()
    }
    #[inline]
    fn len(&self) -> usize {
        Mbuf::len(self)
    }
    #[inline]
    fn prefetch(&self) {
        Mbuf::prefetch_data(self);
    }
    #[inline]
    fn rss_hash(&self) -> Option<u32> {
        Mbuf::rss_hash(self)
    }
    #[inline]
    fn gso(&self) -> Option<Gso> {
        Mbuf::gso(self)
    }
    #[inline]
    fn set_gso(&mut self, gso: Option<Gso>) {
        Mbuf::set_gso(self, gso);
    }
}

/// Headroom of a [`VecBuf`], as DPDK's default `RTE_PKTMBUF_HEADROOM`.
pub const VEC_HEADROOM: usize = 128;
/// Capacity of a [`VecBuf`] (a 2 KiB mbuf data room).
pub const VEC_CAPACITY: usize = 2048 + VEC_HEADROOM;

/// A heap packet buffer shaped like an mbuf (128 bytes of headroom, 2 KiB of room): for packet
/// tests, fuzzing and benches that run the pipeline without DPDK.
#[derive(Clone, PartialEq, Eq)]
pub struct VecBuf {
    storage: Vec<u8>,
    start: usize,
    end: usize,
    gso: Option<Gso>,
}

impl VecBuf {
    /// An empty buffer.
    pub fn new() -> VecBuf {
        VecBuf::with_room(VEC_CAPACITY - VEC_HEADROOM)
    }
    /// An empty buffer with `room` bytes after the headroom (a large segment's buffer).
    pub fn with_room(room: usize) -> VecBuf {
        VecBuf {
            storage: vec![0; VEC_HEADROOM + room],
            start: VEC_HEADROOM,
            end: VEC_HEADROOM,
            gso: None,
        }
    }
    /// Empties the buffer and restores the full headroom (as a recycled mbuf has).
    pub fn reset(&mut self) {
        self.start = VEC_HEADROOM;
        self.end = VEC_HEADROOM;
        self.gso = None;
    }
    /// A buffer holding `bytes` after the headroom; `None` if they do not fit.
    pub fn from_slice(bytes: &[u8]) -> Option<VecBuf> {
        Self::from_slice_in(VecBuf::new(), bytes)
    }
    /// `bytes` in `b` (emptied first); `None` if they do not fit.
    pub fn from_slice_in(mut b: VecBuf, bytes: &[u8]) -> Option<VecBuf> {
        b.reset();
        if !b.append(bytes.len()) {
            return None;
        }
        b.data_mut().copy_from_slice(bytes);
        Some(b)
    }
}

impl Default for VecBuf {
    fn default() -> Self {
        VecBuf::new()
    }
}

impl std::fmt::Debug for VecBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VecBuf({} bytes)", self.len())
    }
}

impl PacketBuf for VecBuf {
    fn data(&self) -> &[u8] {
        &self.storage[self.start..self.end]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.end]
    }
    fn prepend(&mut self, n: usize) -> bool {
        if n > self.start {
            return false;
        }
        self.start -= n;
        true
    }
    fn adj(&mut self, n: usize) -> bool {
        if n > self.end - self.start {
            return false;
        }
        self.start += n;
        true
    }
    fn trim(&mut self, n: usize) -> bool {
        if n > self.end - self.start {
            return false;
        }
        self.end -= n;
        true
    }
    fn append(&mut self, n: usize) -> bool {
        if n > self.storage.len() - self.end {
            return false;
        }
        self.end += n;
        true
    }
    fn gso(&self) -> Option<Gso> {
        self.gso
    }
    fn set_gso(&mut self, gso: Option<Gso>) {
        self.gso = gso;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vecbuf_behaves_like_an_mbuf() {
        let mut b = VecBuf::from_slice(&[1, 2, 3, 4]).unwrap();
        assert!(b.prepend(2));
        assert_eq!(b.len(), 6);
        assert!(b.adj(3));
        assert_eq!(b.data(), &[2, 3, 4]);
        assert!(b.trim(1));
        assert_eq!(b.data(), &[2, 3]);
        assert!(!b.adj(3));
        assert!(!b.prepend(VEC_HEADROOM + 10));
        assert!(b.truncate(1));
        assert_eq!(b.data(), &[2]);
        assert!(VecBuf::from_slice(&vec![0; VEC_CAPACITY]).is_none());
    }
}
