//! Owned packet buffers ([`Mbuf`]) and fixed-capacity groups of them ([`Burst`]).

use std::fmt;
use std::mem::{self, MaybeUninit};
use std::ptr::NonNull;
use std::slice;

use lace_dpdk_sys as sys;

use super::{Mempool, TunnelTso};
use crate::offload::{Gso, GsoProto, TsoHeaders};

/// The burst size the forwarder polls and sends with (DPDK's customary 32).
pub const BURST_SIZE: usize = 32;

/// One packet buffer (an `rte_mbuf`, possibly the head of a chain), owned: dropping it returns
/// it (and its chain) to its mempool.
///
/// [`Mbuf::data`] is the first segment's data. Packets received on the ports this module
/// configures are single-segment unless the driver chains on its own (memif, for a frame longer
/// than its 2 KiB buffers); [`Mbuf::joined`] copies such a chain into one buffer.
/// Length-changing calls return `None`, leaving the buffer unchanged, when there is no room;
/// none of them panics.
#[repr(transparent)]
pub struct Mbuf(NonNull<sys::rte_mbuf>);

// A Burst hands its storage to rx/tx burst functions as `*mut *mut rte_mbuf`.
const _: () = assert!(mem::size_of::<Mbuf>() == mem::size_of::<*mut sys::rte_mbuf>());
const _: () = assert!(mem::align_of::<Mbuf>() == mem::align_of::<*mut sys::rte_mbuf>());

// SAFETY: an Mbuf is the only reference to its buffer (it is never cloned or refcount-shared),
// and returning it to its pool on drop is thread-safe (mempool ring_mp_mc ops).
unsafe impl Send for Mbuf {}
// SAFETY: `&Mbuf` only allows reading the buffer; all mutation needs `&mut Mbuf`.
unsafe impl Sync for Mbuf {}

impl Mbuf {
    /// Takes ownership of `m`.
    ///
    /// # Safety
    /// `m` points to a valid pktmbuf that nothing else owns or references (e.g. fresh from a
    /// pool or handed over by a driver's RX), whose pool outlives it.
    #[inline]
    pub(crate) unsafe fn from_raw(m: NonNull<sys::rte_mbuf>) -> Mbuf {
        Mbuf(m)
    }

    #[inline]
    fn raw(&self) -> &sys::rte_mbuf {
        // SAFETY: we own a valid mbuf; shared access matches `&self`.
        unsafe { self.0.as_ref() }
    }

    /// Bytes of data in the first segment (`data_len`).
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.raw().data_len)
    }

    /// Whether the first segment holds no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.raw().data_len == 0
    }

    /// Bytes of data in the whole chain (`pkt_len`); equal to [`Mbuf::len`] for one segment.
    #[inline]
    pub fn pkt_len(&self) -> usize {
        self.raw().pkt_len as usize
    }

    /// Segments in the chain.
    #[inline]
    pub fn segments(&self) -> u16 {
        self.raw().nb_segs
    }

    /// Free bytes in front of the data (room for [`Mbuf::prepend`]).
    #[inline]
    pub fn headroom(&self) -> usize {
        usize::from(self.raw().data_off)
    }

    /// Free bytes after the data in the last segment (room for [`Mbuf::append`]).
    #[inline]
    pub fn tailroom(&self) -> usize {
        // SAFETY: we own a valid mbuf; the shim only reads its fields (walking to the last
        // segment of the chain, which we own as well).
        usize::from(unsafe { sys::lace_rte_pktmbuf_tailroom(self.0.as_ptr()) })
    }

    /// The input port the driver recorded (`port`).
    #[inline]
    pub fn port(&self) -> u16 {
        self.raw().port
    }

    /// The RSS hash the NIC computed, when it delivered one.
    #[inline]
    pub fn rss_hash(&self) -> Option<u32> {
        let m = self.raw();
        if m.ol_flags & u64::from(sys::RTE_MBUF_F_RX_RSS_HASH) == 0 {
            return None;
        }
        // SAFETY: RTE_MBUF_F_RX_RSS_HASH says the driver wrote the `rss` member of the union;
        // any u32 bit pattern is valid.
        Some(unsafe { m.__bindgen_anon_2.hash.rss })
    }

    /// The large segment this packet is, if it is one: set by [`Mbuf::set_gso`], kept in
    /// DPDK's own fields: `RTE_MBUF_F_TX_TCP_SEG` or `RTE_MBUF_F_TX_UDP_SEG` and `tso_segsz`,
    /// with `RTE_MBUF_F_RX_LRO` when the piece size is an estimate (as an LRO NIC marks what it
    /// coalesced).
    #[inline]
    pub fn gso(&self) -> Option<Gso> {
        let m = self.raw();
        let proto = if m.ol_flags & sys::RTE_MBUF_F_TX_TCP_SEG != 0 {
            GsoProto::Tcp
        } else if m.ol_flags & sys::RTE_MBUF_F_TX_UDP_SEG != 0 {
            GsoProto::Udp
        } else {
            return None;
        };
        // SAFETY: `tx_offload` and its bit-field view are two views of one u64 with no invalid
        // bit patterns; the pool's constructor zeroes it and only `set_gso` writes it here.
        let size = unsafe { m.__bindgen_anon_3.__bindgen_anon_1.tso_segsz() } as u16;
        Some(Gso {
            proto,
            size,
            estimated: m.ol_flags & u64::from(sys::RTE_MBUF_F_RX_LRO) != 0,
        })
    }

    /// Marks the packet as a large segment to be cut into pieces of `gso.size` payload bytes
    /// (or as an ordinary packet, `None`).
    #[inline]
    pub fn set_gso(&mut self, gso: Option<Gso>) {
        // SAFETY: we own a valid mbuf exclusively (`&mut self`).
        let m = unsafe { self.0.as_mut() };
        let lro = u64::from(sys::RTE_MBUF_F_RX_LRO);
        m.ol_flags &= !(sys::RTE_MBUF_F_TX_TCP_SEG | sys::RTE_MBUF_F_TX_UDP_SEG | lro);
        let (flag, size) = match gso {
            Some(g) => {
                let proto = match g.proto {
                    GsoProto::Tcp => sys::RTE_MBUF_F_TX_TCP_SEG,
                    GsoProto::Udp => sys::RTE_MBUF_F_TX_UDP_SEG,
                };
                (proto | if g.estimated { lro } else { 0 }, g.size)
            }
            None => (0, 0),
        };
        m.ol_flags |= flag;
        // SAFETY: writing a bit-field of the `tx_offload` union through its view; every u64
        // is a valid value of either view.
        unsafe {
            m.__bindgen_anon_3
                .__bindgen_anon_1
                .set_tso_segsz(u64::from(size))
        };
    }

    /// Hands the packet, the encapsulated TCP segment `h` describes, to a device's tunnel
    /// TSO (ADR 0056): DPDK's offload flags and header lengths, as `rte_mbuf_core.h` asks for
    /// them. Returns false, the packet unchanged, when the device's `tso` cannot cut it (a
    /// bridged frame on a device with only IP-in-IP TSO). The transport checksum field is
    /// the device's to ready ([`super::TxQueue::prepare`]).
    pub fn set_tunnel_tso(&mut self, h: &TsoHeaders, tso: TunnelTso) -> bool {
        let Some(tunnel) = tso.tunnel_flag(h) else {
            return false;
        };
        let inner = if h.v4 {
            sys::RTE_MBUF_F_TX_IPV4 | sys::RTE_MBUF_F_TX_IP_CKSUM
        } else {
            sys::RTE_MBUF_F_TX_IPV6
        };
        // SAFETY: we own a valid mbuf exclusively (`&mut self`).
        let m = unsafe { self.0.as_mut() };
        m.ol_flags &= !(sys::RTE_MBUF_F_TX_UDP_SEG | u64::from(sys::RTE_MBUF_F_RX_LRO));
        m.ol_flags |= sys::RTE_MBUF_F_TX_TCP_SEG
            | sys::RTE_MBUF_F_TX_TCP_CKSUM
            | sys::RTE_MBUF_F_TX_OUTER_IPV6
            | tunnel
            | inner;
        // SAFETY: writing bit-fields of the `tx_offload` union through its view; every u64 is
        // a valid value of either view. Each length fits its field: Layout bounds them.
        unsafe {
            let f = &mut m.__bindgen_anon_3.__bindgen_anon_1;
            f.set_outer_l2_len(u64::from(h.outer_l2));
            f.set_outer_l3_len(u64::from(h.outer_l3));
            f.set_l2_len(u64::from(h.l2));
            f.set_l3_len(u64::from(h.l3));
            f.set_l4_len(u64::from(h.l4));
            f.set_tso_segsz(u64::from(h.size));
        }
        true
    }

    /// The `rte_mbuf` for a DPDK call that may modify it (`&mut self`), without giving it up.
    pub(super) fn as_raw(&mut self) -> *mut sys::rte_mbuf {
        self.0.as_ptr()
    }

    /// Each segment's data, first to last: the whole packet of a chain (a driver's receive of a
    /// frame longer than one buffer).
    pub fn chain(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut seg: *const sys::rte_mbuf = self.0.as_ptr();
        std::iter::from_fn(move || {
            // SAFETY: `seg` is null or a segment of the chain we own (the head, then each
            // `next` its driver linked); nothing writes the chain while `&self` lives.
            let m = unsafe { seg.as_ref() }?;
            seg = m.next;
            // SAFETY: as in `data`, for this segment.
            Some(unsafe {
                slice::from_raw_parts(
                    m.buf_addr.cast::<u8>().add(usize::from(m.data_off)),
                    usize::from(m.data_len),
                )
            })
        })
    }

    /// The whole packet, chain included, copied into one buffer from `pool`; `None` when the
    /// pool has none free or its buffers are too short for it.
    pub fn joined(&self, pool: &Mempool) -> Option<Mbuf> {
        let mut whole = pool.alloc()?;
        if whole.tailroom() < self.pkt_len() {
            return None;
        }
        for seg in self.chain() {
            if !whole.extend_from_slice(seg) {
                return None;
            }
        }
        Some(whole)
    }

    /// The first segment's data.
    #[inline]
    pub fn data(&self) -> &[u8] {
        let m = self.raw();
        // SAFETY: buf_addr + data_off .. + data_len lies inside the mbuf's buffer (a pktmbuf
        // invariant every DPDK function maintains); we own the mbuf, so nothing writes it while
        // `&self` lives; the buffer outlives the borrow.
        unsafe {
            slice::from_raw_parts(
                m.buf_addr.cast::<u8>().add(usize::from(m.data_off)),
                usize::from(m.data_len),
            )
        }
    }

    /// Starts loading the first cache line of the data (the headers) into the cache.
    #[inline]
    pub fn prefetch_data(&self) {
        let m = self.raw();
        let p = m
            .buf_addr
            .cast::<u8>()
            .wrapping_add(usize::from(m.data_off));
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint: it never faults and reads nothing into the program, so
        // any address is sound; this one is the data start inside the mbuf's buffer.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }

    /// The first segment's data, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: we own a valid mbuf exclusively (`&mut self`).
        let m = unsafe { self.0.as_mut() };
        // SAFETY: as in `data`; `&mut self` makes the access exclusive.
        unsafe {
            slice::from_raw_parts_mut(
                m.buf_addr.cast::<u8>().add(usize::from(m.data_off)),
                usize::from(m.data_len),
            )
        }
    }

    /// Grows the data by `n` bytes at the front (into the headroom) and returns them, or `None`
    /// (unchanged) when the headroom is smaller than `n`. What `rte_pktmbuf_prepend` does,
    /// written here so that the fast path does not call out for three field updates.
    #[inline]
    pub fn prepend(&mut self, n: usize) -> Option<&mut [u8]> {
        let len = u16::try_from(n).ok()?;
        // SAFETY: we own a valid mbuf exclusively (`&mut self`).
        let m = unsafe { self.0.as_mut() };
        if len > m.data_off {
            return None;
        }
        // data_off + data_len <= buf_len <= u16::MAX, so the new data_len cannot overflow.
        m.data_off -= len;
        m.data_len += len;
        m.pkt_len += u32::from(len);
        // SAFETY: buf_addr + data_off is the new data start inside the buffer (the headroom
        // just claimed), followed by at least n bytes of it, borrowed exclusively with `self`.
        Some(unsafe {
            slice::from_raw_parts_mut(m.buf_addr.cast::<u8>().add(usize::from(m.data_off)), n)
        })
    }

    /// Removes `n` bytes from the front and returns the remaining data, or `None` (unchanged)
    /// when the first segment holds fewer than `n` bytes (`rte_pktmbuf_adj`).
    #[inline]
    pub fn adj(&mut self, n: usize) -> Option<&mut [u8]> {
        let len = u16::try_from(n).ok()?;
        {
            // SAFETY: we own a valid mbuf exclusively (`&mut self`).
            let m = unsafe { self.0.as_mut() };
            if len > m.data_len {
                return None;
            }
            m.data_len -= len;
            m.data_off += len;
            m.pkt_len -= u32::from(len);
        }
        Some(self.data_mut())
    }

    /// Grows the data by `n` bytes at the end (of the last segment) and returns them, or `None`
    /// (unchanged) when the tailroom is smaller than `n` (`rte_pktmbuf_append`).
    #[inline]
    pub fn append(&mut self, n: usize) -> Option<&mut [u8]> {
        let len = u16::try_from(n).ok()?;
        if self.raw().nb_segs != 1 {
            // SAFETY: we own the mbuf exclusively; rte_pktmbuf_append checks the tailroom of
            // the last segment and returns NULL, changing nothing, when it is too small.
            let p = unsafe { sys::lace_rte_pktmbuf_append(self.0.as_ptr(), len) };
            let p = NonNull::new(p.cast::<u8>())?;
            // SAFETY: on success p is the start of the n bytes just added to the last segment,
            // inside its buffer, borrowed exclusively for the lifetime of `&mut self`.
            return Some(unsafe { slice::from_raw_parts_mut(p.as_ptr(), n) });
        }
        // SAFETY: we own a valid mbuf exclusively (`&mut self`).
        let m = unsafe { self.0.as_mut() };
        let end = usize::from(m.data_off) + usize::from(m.data_len);
        if end + n > usize::from(m.buf_len) {
            return None;
        }
        m.data_len += len;
        m.pkt_len += u32::from(len);
        // SAFETY: [end, end + n) lies inside the buffer (checked against buf_len above), just
        // added to the data, borrowed exclusively with `self`.
        Some(unsafe { slice::from_raw_parts_mut(m.buf_addr.cast::<u8>().add(end), n) })
    }

    /// Removes `n` bytes from the end (of the last segment) and returns the remaining data of
    /// the first segment, or `None` (unchanged) when the last segment holds fewer than `n`
    /// (`rte_pktmbuf_trim`).
    #[inline]
    pub fn trim(&mut self, n: usize) -> Option<&mut [u8]> {
        let len = u16::try_from(n).ok()?;
        if self.raw().nb_segs != 1 {
            // SAFETY: we own the mbuf exclusively; rte_pktmbuf_trim checks the last segment's
            // data_len and returns -1, changing nothing, when it is shorter than n.
            let ret = unsafe { sys::lace_rte_pktmbuf_trim(self.0.as_ptr(), len) };
            if ret != 0 {
                return None;
            }
            return Some(self.data_mut());
        }
        {
            // SAFETY: we own a valid mbuf exclusively (`&mut self`).
            let m = unsafe { self.0.as_mut() };
            if len > m.data_len {
                return None;
            }
            m.data_len -= len;
            m.pkt_len -= u32::from(len);
        }
        Some(self.data_mut())
    }

    /// Appends `bytes` at the end; `false` (unchanged) when they do not fit in the tailroom.
    #[inline]
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> bool {
        match self.append(bytes.len()) {
            Some(tail) => {
                tail.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own the mbuf (and its chain); it is returned to its pool exactly once.
        unsafe { sys::lace_rte_pktmbuf_free(self.0.as_ptr()) };
    }
}

impl fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mbuf")
            .field("len", &self.len())
            .field("pkt_len", &self.pkt_len())
            .field("segments", &self.segments())
            .field("headroom", &self.headroom())
            .finish()
    }
}

/// Up to `N` mbufs, stored inline (no allocation): what [`RxQueue::rx_burst`] fills and
/// [`TxQueue::tx_burst`] drains. Dropping or [`Burst::clear`]ing it frees the mbufs it holds
/// with one bulk call.
///
/// [`RxQueue::rx_burst`]: super::RxQueue::rx_burst
/// [`TxQueue::tx_burst`]: super::TxQueue::tx_burst
pub struct Burst<const N: usize = BURST_SIZE> {
    /// `mbufs[..len]` are initialised and owned; the rest are not.
    mbufs: [MaybeUninit<Mbuf>; N],
    len: usize,
}

impl<const N: usize> Burst<N> {
    /// An empty burst.
    #[inline]
    pub const fn new() -> Self {
        const {
            assert!(
                N > 0 && N <= u16::MAX as usize,
                "a burst holds 1..=65535 mbufs"
            )
        };
        Burst {
            mbufs: [const { MaybeUninit::uninit() }; N],
            len: 0,
        }
    }

    /// Mbufs held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the burst holds none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the burst holds `N`.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == N
    }

    /// `N`.
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Adds `m` at the end, or gives it back when the burst is full.
    #[inline(always)]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == N {
            return Err(m);
        }
        self.mbufs[self.len].write(m);
        self.len += 1;
        Ok(())
    }

    /// Removes and returns the last mbuf.
    #[inline]
    pub fn pop(&mut self) -> Option<Mbuf> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: slot `len` was initialised; lowering len first hands its ownership to us.
        Some(unsafe { self.mbufs[self.len].assume_init_read() })
    }

    /// The mbufs, in order.
    #[inline]
    pub fn as_slice(&self) -> &[Mbuf] {
        // SAFETY: the first `len` slots are initialised; MaybeUninit<Mbuf> has Mbuf's layout.
        unsafe { slice::from_raw_parts(self.mbufs.as_ptr().cast::<Mbuf>(), self.len) }
    }

    /// The mbufs, in order, writable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Mbuf] {
        // SAFETY: as in `as_slice`, exclusively borrowed.
        unsafe { slice::from_raw_parts_mut(self.mbufs.as_mut_ptr().cast::<Mbuf>(), self.len) }
    }

    /// Iterates over the mbufs.
    #[inline]
    pub fn iter(&self) -> slice::Iter<'_, Mbuf> {
        self.as_slice().iter()
    }

    /// Iterates over the mbufs, writable.
    #[inline]
    pub fn iter_mut(&mut self) -> slice::IterMut<'_, Mbuf> {
        self.as_mut_slice().iter_mut()
    }

    /// Moves every mbuf out, in order, leaving the burst empty (mbufs the iterator does not
    /// yield are freed when it is dropped).
    #[inline]
    pub fn drain(&mut self) -> Drain<'_, N> {
        let end = mem::replace(&mut self.len, 0);
        Drain {
            burst: self,
            next: 0,
            end,
        }
    }

    /// Moves every mbuf to the end of `out`, in order, with one copy of the pointers (what a
    /// worker does with each received burst before the pipeline takes it); returns how many.
    #[inline]
    pub fn move_into(&mut self, out: &mut Vec<Mbuf>) -> usize {
        let n = mem::replace(&mut self.len, 0);
        out.reserve(n);
        // SAFETY: the first n slots held owned mbufs (MaybeUninit<Mbuf> has Mbuf's layout) and
        // len is 0 now, so the burst no longer owns them; `out` has room for n more after its
        // length (reserved above), the two buffers do not overlap, and set_len covers exactly
        // the n values written.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.mbufs.as_ptr().cast::<Mbuf>(),
                out.as_mut_ptr().add(out.len()),
                n,
            );
            out.set_len(out.len() + n);
        }
        n
    }

    /// Frees every mbuf (one `rte_pktmbuf_free_bulk` call) and returns how many there were.
    #[inline]
    pub fn clear(&mut self) -> usize {
        let n = mem::replace(&mut self.len, 0);
        // SAFETY: the first n slots held owned mbufs; len is 0 now, so they are freed only here.
        unsafe { free_raw(self.mbufs.as_mut_ptr().cast(), n) };
        n
    }

    /// Frees the first `n` mbufs (all of them when `n` exceeds the length) and moves the rest
    /// to the front, in order.
    #[inline]
    pub fn free_front(&mut self, n: usize) {
        let n = n.min(self.len);
        // SAFETY: the first n slots hold owned mbufs; they are freed once here and then
        // forgotten by forget_front, which moves the remaining ones to the front.
        unsafe {
            free_raw(self.mbufs.as_mut_ptr().cast(), n);
            self.forget_front(n);
        }
    }

    /// The first `len` slots as DPDK's `struct rte_mbuf **` (for tx), and len.
    #[inline]
    pub(crate) fn filled_raw(&mut self) -> (*mut *mut sys::rte_mbuf, usize) {
        (self.mbufs.as_mut_ptr().cast(), self.len)
    }

    /// The free slots after `len` as DPDK's `struct rte_mbuf **` (for rx/alloc), and their
    /// count.
    #[inline]
    pub(crate) fn spare_raw(&mut self) -> (*mut *mut sys::rte_mbuf, usize) {
        // SAFETY: len <= N, so the pointer stays within (or one past) the array.
        let p = unsafe { self.mbufs.as_mut_ptr().add(self.len) };
        (p.cast(), N - self.len)
    }

    /// Marks `n` more slots as holding owned mbufs.
    ///
    /// # Safety
    /// The `n` slots after the current length hold valid mbufs the caller handed over, and
    /// `len + n <= N`.
    #[inline]
    pub(crate) unsafe fn assume_pushed(&mut self, n: usize) {
        debug_assert!(self.len + n <= N);
        self.len += n;
    }

    /// Forgets the first `n` mbufs (the driver took them) and moves the rest to the front.
    ///
    /// # Safety
    /// The first `n` (`<= len`) mbufs were handed over to DPDK and must not be freed here.
    #[inline]
    pub(crate) unsafe fn forget_front(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        let rest = self.len - n;
        if rest > 0 && n > 0 {
            // SAFETY: source and destination lie within the array; ptr::copy handles overlap;
            // the moved slots are initialised and change owner from slot i+n to slot i.
            unsafe {
                std::ptr::copy(self.mbufs.as_ptr().add(n), self.mbufs.as_mut_ptr(), rest);
            }
        }
        self.len = rest;
    }
}

impl<const N: usize> Default for Burst<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Drop for Burst<N> {
    fn drop(&mut self) {
        self.clear();
    }
}

impl<const N: usize> fmt::Debug for Burst<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Burst")
            .field("len", &self.len)
            .field("capacity", &N)
            .finish()
    }
}

impl<'a, const N: usize> IntoIterator for &'a Burst<N> {
    type Item = &'a Mbuf;
    type IntoIter = slice::Iter<'a, Mbuf>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a, const N: usize> IntoIterator for &'a mut Burst<N> {
    type Item = &'a mut Mbuf;
    type IntoIter = slice::IterMut<'a, Mbuf>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

/// The iterator of [`Burst::drain`].
pub struct Drain<'a, const N: usize> {
    burst: &'a mut Burst<N>,
    /// Slots `next..end` still hold owned mbufs (the burst's len is already 0).
    next: usize,
    end: usize,
}

impl<const N: usize> Iterator for Drain<'_, N> {
    type Item = Mbuf;

    #[inline]
    fn next(&mut self) -> Option<Mbuf> {
        if self.next == self.end {
            return None;
        }
        let i = self.next;
        self.next += 1;
        // SAFETY: slot i < end is initialised and owned by the drain; advancing `next` first
        // hands it over exactly once.
        Some(unsafe { self.burst.mbufs[i].assume_init_read() })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl<const N: usize> ExactSizeIterator for Drain<'_, N> {}

impl<const N: usize> Drop for Drain<'_, N> {
    fn drop(&mut self) {
        let n = self.end - self.next;
        // SAFETY: slots next..end are still owned by the drain and freed only here.
        unsafe { free_raw(self.burst.mbufs.as_mut_ptr().add(self.next).cast(), n) };
    }
}

impl<const N: usize> fmt::Debug for Drain<'_, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drain")
            .field("remaining", &(self.end - self.next))
            .finish()
    }
}

/// Frees `n` owned mbufs stored at `p` (`rte_pktmbuf_free_bulk`).
///
/// # Safety
/// `p[..n]` are valid, owned mbufs that nothing frees or uses afterwards.
#[inline]
unsafe fn free_raw(p: *mut *mut sys::rte_mbuf, n: usize) {
    if n > 0 {
        // SAFETY: per this function's contract; n <= N <= u16::MAX fits in c_uint.
        unsafe { sys::rte_pktmbuf_free_bulk(p, n as std::ffi::c_uint) };
    }
}
