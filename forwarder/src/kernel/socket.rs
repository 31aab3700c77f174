//! AF_PACKET sockets with `PACKET_VNET_HDR`, and the per-worker queues built on them.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use super::KernelError;
use crate::dpdk::{Burst, Mbuf, Mempool};
use crate::offload::{self, Gso, OffloadError, Run, VnetHdr};
use crate::wire::ethernet::{self, TAG_LEN};

/// Most frames one `recvmmsg` takes (and mbufs a queue keeps ready).
pub const MAX_RX_BURST: usize = 32;
/// The largest frame a queue receives: a 64 KiB segment plus its Ethernet header.
const MAX_FRAME: usize = 65_536 + 64;
/// Socket buffer sizes: enough for a few hundred full-size frames or a few large segments
/// while the worker sleeps.
const RCVBUF: libc::c_int = 8 << 20;
const SNDBUF: libc::c_int = 4 << 20;
/// At most this many iovecs per burst: one header and one buffer per packet, plus a header.
const TX_IOVS: usize = 2 * 64;
/// Words of a received message's control buffer: room for the `PACKET_AUXDATA` message
/// (`CMSG_SPACE` of a `tpacket_auxdata`, 40 bytes on Linux) with some to spare.
const CTL_WORDS: usize = 8;

/// Fanout group ids handed out in this process (unique per socket group on a host when
/// combined with the pid).
static NEXT_FANOUT: AtomicU32 = AtomicU32::new(0);

/// A fanout group id for the sockets of one port (one per worker).
pub fn fanout_group() -> u16 {
    let n = NEXT_FANOUT.fetch_add(1, Ordering::Relaxed);
    ((std::process::id() << 6) ^ n) as u16
}

/// An AF_PACKET socket bound to one interface. Shared between the worker that polls it and the
/// main thread that reads its statistics.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    iface: String,
    ifindex: u32,
    vnet: bool,
    /// The interface takes large segments with partial checksums (TSO and checksum offload
    /// on): without them the kernel fails to cut ours (`ENOBUFS`). Refreshed by the main
    /// thread ([`PacketSocket::refresh_offloads`]), read by the worker per burst.
    takes_large: AtomicBool,
}

/// The kernel's counters of one socket since the last read (`PACKET_STATISTICS` resets them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Frames queued to the socket.
    pub packets: u64,
    /// Frames the kernel dropped because the socket's buffer was full (the worker fell
    /// behind).
    pub drops: u64,
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size; the kernel copies it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&raw const v).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl PacketSocket {
    /// Opens a socket on `iface` receiving every frame that arrives there (not those sent out
    /// of it), with the virtio-net header in front of each frame when `vnet`, sent without the
    /// qdisc, and — with `fanout` — sharing the interface's traffic by flow hash with the other
    /// sockets of the same group.
    pub fn open(
        iface: &str,
        vnet: bool,
        fanout: Option<u16>,
    ) -> Result<Arc<PacketSocket>, KernelError> {
        let err = |what: &'static str| {
            let source = io::Error::last_os_error();
            move || KernelError::Syscall {
                what,
                iface: iface.to_owned(),
                source,
            }
        };
        let name = CString::new(iface).map_err(|_| KernelError::NoInterface {
            iface: iface.to_owned(),
        })?;
        // SAFETY: name is NUL-terminated.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(KernelError::NoInterface {
                iface: iface.to_owned(),
            });
        }
        // Protocol 0: no frames until bound to the interface (else every interface's traffic
        // would queue up in between).
        // SAFETY: no pointers; a non-negative result is a new fd we own.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(err("socket(AF_PACKET)")());
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        let opt = |level, opt, v, what| {
            setsockopt_int(raw, level, opt, v).map_err(|source| KernelError::Syscall {
                what,
                iface: iface.to_owned(),
                source,
            })
        };
        if vnet {
            opt(
                libc::SOL_PACKET,
                libc::PACKET_VNET_HDR,
                1,
                "PACKET_VNET_HDR",
            )?;
        }
        opt(
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            1,
            "PACKET_QDISC_BYPASS",
        )?;
        opt(
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            1,
            "PACKET_IGNORE_OUTGOING",
        )?;
        if setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF).is_err() {
            opt(libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF, "SO_RCVBUF")?;
        }
        if setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, SNDBUF).is_err() {
            opt(libc::SOL_SOCKET, libc::SO_SNDBUF, SNDBUF, "SO_SNDBUF")?;
        }
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: passes a live sockaddr_ll and its size; the kernel copies it.
        let r = unsafe {
            libc::bind(
                raw,
                (&raw const sll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(err("bind")());
        }
        if let Some(group) = fanout {
            let mode = (libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_DEFRAG) as libc::c_int;
            opt(
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                libc::c_int::from(group) | (mode << 16),
                "PACKET_FANOUT",
            )?;
        }
        let s = PacketSocket {
            fd,
            iface: iface.to_owned(),
            ifindex,
            vnet,
            takes_large: AtomicBool::new(false),
        };
        s.refresh_offloads();
        Ok(Arc::new(s))
    }

    /// One legacy ethtool flag of the interface (`SIOCETHTOOL`), `None` when unreadable.
    fn ethtool_flag(&self, cmd: u32) -> Option<bool> {
        #[repr(C)]
        struct EthtoolValue {
            cmd: u32,
            data: u32,
        }
        let mut v = EthtoolValue { cmd, data: 0 };
        // SAFETY: ifreq is plain data; all-zero is valid.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req
            .ifr_name
            .iter_mut()
            .zip(self.iface.bytes().take(libc::IFNAMSIZ - 1))
        {
            *d = s as libc::c_char;
        }
        req.ifr_ifru.ifru_data = (&raw mut v).cast();
        // SAFETY: req is a live, NUL-terminated ifreq whose data member points to a live
        // ethtool_value the kernel reads the command from and writes the answer to.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), 0x8946, &mut req) };
        (r >= 0).then_some(v.data != 0)
    }

    /// Reads the interface's TSO and checksum-offload settings again (an operator or the pod
    /// may switch them): large segments are sent only while both are on.
    pub fn refresh_offloads(&self) {
        const ETHTOOL_GTXCSUM: u32 = 0x16;
        const ETHTOOL_GTSO: u32 = 0x1e;
        let on = self.vnet
            && self.ethtool_flag(ETHTOOL_GTXCSUM) == Some(true)
            && self.ethtool_flag(ETHTOOL_GTSO) == Some(true);
        self.takes_large.store(on, Ordering::Relaxed);
    }

    /// Whether the interface takes large segments with partial checksums now.
    pub fn takes_large(&self) -> bool {
        self.takes_large.load(Ordering::Relaxed)
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The interface's MAC address (`SIOCGIFHWADDR`).
    pub fn mac(&self) -> io::Result<[u8; 6]> {
        // SAFETY: ifreq is plain data; all-zero is valid.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req
            .ifr_name
            .iter_mut()
            .zip(self.iface.bytes().take(libc::IFNAMSIZ - 1))
        {
            *d = s as libc::c_char;
        }
        // SAFETY: req is a live, NUL-terminated ifreq; SIOCGIFHWADDR writes its hwaddr member.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: after SIOCGIFHWADDR the union holds ifru_hwaddr.
        let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
        let mut mac = [0u8; 6];
        for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
            *m = *b as u8;
        }
        Ok(mac)
    }

    /// Reads (and resets) the kernel's counters of this socket.
    pub fn take_stats(&self) -> io::Result<SocketStats> {
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: st and len are live and sized for PACKET_STATISTICS' answer.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&raw mut st).cast(),
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SocketStats {
            packets: u64::from(st.tp_packets),
            drops: u64::from(st.tp_drops),
        })
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// What one burst call did besides moving packets, for the port's counters and drop reasons.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounts {
    /// Frames taken from or given to the kernel (a large segment counts once).
    pub frames: u64,
    /// Bytes of those frames.
    pub bytes: u64,
    /// Large segments cut into frames (receive) or runs sent as one (transmit).
    pub large: u64,
    /// Frames dropped as malformed: truncated, or offload metadata that does not fit them.
    pub malformed: u64,
    /// Frames dropped for want of a buffer.
    pub no_buffer: u64,
}

/// A worker's receive half of a [`PacketSocket`].
pub struct RxQueue {
    sock: Arc<PacketSocket>,
    pool: Mempool,
    /// Buffers a large segment is taken into whole ([`RxQueue::take_large_into`]); without
    /// one (none given, none free, or a segment longer) it is cut into `pool`'s.
    large: Option<Mempool>,
    /// A buffer per message slot, appended to its full room.
    slots: [Option<Mbuf>; MAX_RX_BURST],
    /// Overflow space per slot for frames longer than an mbuf's room.
    big: Vec<Box<[u8]>>,
    hdrs: [[u8; VnetHdr::LEN]; MAX_RX_BURST],
    /// A control buffer per message slot (the `PACKET_AUXDATA` message), when frames keep
    /// their 802.1Q tags ([`RxQueue::keep_vlan_tags`]).
    ctl: Option<Box<[[u64; CTL_WORDS]; MAX_RX_BURST]>>,
    /// Large segments received into `big`, waiting for room in the output: (slot, length).
    pending: [(u8, u32); MAX_RX_BURST],
    pending_head: usize,
    pending_len: usize,
}

impl std::fmt::Debug for RxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxQueue")
            .field("iface", &self.sock.iface)
            .field("pending", &(self.pending_len - self.pending_head))
            .finish()
    }
}

/// The 802.1Q tag the kernel took off a received frame, as `PACKET_AUXDATA` reports it in
/// `msg`'s control buffer: the tag's 4 bytes (TPID, TCI) as on the wire.
fn stripped_tag(msg: &libc::msghdr) -> Option<[u8; TAG_LEN]> {
    // SAFETY: `msg` is a message recvmmsg filled: its control buffer is live, and
    // `msg_controllen` says how much of it the kernel wrote; the CMSG macros walk only within
    // that, and the auxiliary data is read unaligned from inside the message that holds it.
    let aux = unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        loop {
            if c.is_null() {
                return None;
            }
            if (*c).cmsg_level == libc::SOL_PACKET
                && (*c).cmsg_type == libc::PACKET_AUXDATA
                && (*c).cmsg_len as usize
                    >= libc::CMSG_LEN(std::mem::size_of::<libc::tpacket_auxdata>() as u32) as usize
            {
                break std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::tpacket_auxdata>());
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    };
    if aux.tp_status & libc::TP_STATUS_VLAN_VALID == 0 {
        return None;
    }
    let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
        aux.tp_vlan_tpid
    } else {
        0x8100
    };
    let [t0, t1] = tpid.to_be_bytes();
    let [c0, c1] = aux.tp_vlan_tci.to_be_bytes();
    Some([t0, t1, c0, c1])
}

/// Puts `tag` back after the addresses of the frame in `m`; false without the headroom.
fn retag(m: &mut Mbuf, tag: [u8; TAG_LEN]) -> bool {
    m.prepend(TAG_LEN).is_some() && ethernet::insert_tag(m.data_mut(), tag)
}

/// Segments a large frame (or completes a partial checksum) into `out`.
fn deliver_large(
    frame: &[u8],
    hdr: &VnetHdr,
    pool: &Mempool,
    out: &mut Vec<Mbuf>,
    c: &mut PortCounts,
) {
    match offload::segment(frame, hdr, || pool.alloc(), |m| out.push(m)) {
        Ok(_) => c.large += 1,
        Err(OffloadError::NoBuffer) => c.no_buffer += 1,
        Err(_) => c.malformed += 1,
    }
}

/// Segments a large frame with `payload` bytes after its headers would be cut into.
fn segments_of(frame_len: usize, hdr: &VnetHdr) -> usize {
    let payload = frame_len.saturating_sub(usize::from(hdr.hdr_len.max(54)));
    payload.div_ceil(usize::from(hdr.gso_size.max(1))).max(1) + 1
}

impl RxQueue {
    /// The receive half of `sock`, filling mbufs from `pool`.
    pub fn new(sock: Arc<PacketSocket>, pool: Mempool) -> RxQueue {
        RxQueue {
            sock,
            pool,
            large: None,
            slots: [const { None }; MAX_RX_BURST],
            big: (0..MAX_RX_BURST)
                .map(|_| vec![0u8; MAX_FRAME].into_boxed_slice())
                .collect(),
            hdrs: [[0; VnetHdr::LEN]; MAX_RX_BURST],
            ctl: None,
            pending: [(0, 0); MAX_RX_BURST],
            pending_head: 0,
            pending_len: 0,
        }
    }

    /// Takes large segments whole into buffers from `large` (a pool with room for them), each
    /// one packet marked with its segment size, instead of cutting them on arrival: the
    /// pipeline then handles a 64 KiB segment once, and it is cut only on its way out through
    /// a port that cannot take it whole.
    pub fn take_large_into(mut self, large: Mempool) -> RxQueue {
        self.large = Some(large);
        self
    }

    /// Gives received frames back the 802.1Q tag the kernel takes off (into the packet's
    /// metadata) before any packet socket sees them, so that they come in as on the wire: the
    /// uplink's, where external networks ride VLANs. Each frame then brings a control message
    /// (`PACKET_AUXDATA`) to read, so a pod's port does without.
    pub fn keep_vlan_tags(mut self) -> Result<RxQueue, KernelError> {
        setsockopt_int(
            self.sock.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_AUXDATA,
            1,
        )
        .map_err(|source| KernelError::Syscall {
            what: "PACKET_AUXDATA",
            iface: self.sock.iface.clone(),
            source,
        })?;
        self.ctl = Some(Box::new([[0; CTL_WORDS]; MAX_RX_BURST]));
        Ok(self)
    }

    /// A large segment `len` bytes long, its first `room` bytes in `head` and the rest in
    /// `tail` after as many bytes, in one buffer from the large pool; `None` when there is no
    /// such buffer or the segment is not one the forwarder carries whole.
    fn whole(&self, hdr: &VnetHdr, head: &[u8], tail: &[u8], len: usize) -> Option<Mbuf> {
        let large = self.large.as_ref()?;
        let gso = Gso::of(hdr)?;
        let mut m = large.alloc()?;
        let d = m.append(len)?;
        let split = head.len().min(len);
        d[..split].copy_from_slice(&head[..split]);
        d[split..].copy_from_slice(tail.get(split..len)?);
        // Only a layout whose pieces the forwarder can cut later is taken whole.
        gso.vnet_hdr(d).ok()?;
        m.set_gso(Some(gso));
        Some(m)
    }

    /// The socket (for the worker's epoll set).
    pub fn socket(&self) -> &Arc<PacketSocket> {
        &self.sock
    }

    /// Cuts pending large segments into `out` while at least `room` is left for the next.
    fn drain_pending(&mut self, out: &mut Vec<Mbuf>, limit: usize, c: &mut PortCounts) {
        while self.pending_head < self.pending_len {
            let (slot, len) = self.pending[self.pending_head];
            let (slot, len) = (usize::from(slot), len as usize);
            let hdr = VnetHdr::parse(&self.hdrs[slot]);
            if out.len() + segments_of(len, &hdr) > limit {
                return;
            }
            self.pending_head += 1;
            deliver_large(&self.big[slot][..len], &hdr, &self.pool, out, c);
        }
        self.pending_head = 0;
        self.pending_len = 0;
    }

    /// Receives frames into `out` without growing it past `limit` (its capacity must be at
    /// least `limit`; a large segment needs room for all its pieces). One `recvmmsg`.
    pub fn rx_burst(&mut self, out: &mut Vec<Mbuf>, limit: usize) -> PortCounts {
        let mut c = PortCounts::default();
        let limit = limit.min(out.capacity());
        self.drain_pending(out, limit, &mut c);
        if self.pending_len != 0 || out.len() >= limit {
            return c;
        }
        let want = (limit - out.len()).min(MAX_RX_BURST);
        let vnet = self.sock.vnet;
        // SAFETY: iovec and mmsghdr are plain data; zero is valid for both.
        let mut iovs: [[libc::iovec; 3]; MAX_RX_BURST] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_RX_BURST] = unsafe { std::mem::zeroed() };
        let mut ready = 0;
        let mut room = 0;
        while ready < want {
            if self.slots[ready].is_none() {
                let Some(mut m) = self.pool.alloc() else {
                    break;
                };
                let r = m.tailroom();
                if m.append(r).is_none() {
                    break;
                }
                self.slots[ready] = Some(m);
            }
            let Some(m) = self.slots[ready].as_mut() else {
                break;
            };
            let data = m.data_mut();
            room = data.len();
            let mut k = 0;
            if vnet {
                iovs[ready][k] = libc::iovec {
                    iov_base: self.hdrs[ready].as_mut_ptr().cast(),
                    iov_len: VnetHdr::LEN,
                };
                k += 1;
            }
            iovs[ready][k] = libc::iovec {
                iov_base: data.as_mut_ptr().cast(),
                iov_len: data.len(),
            };
            let big = &mut self.big[ready];
            let start = room.min(big.len());
            let tail = &mut big[start..];
            iovs[ready][k + 1] = libc::iovec {
                iov_base: tail.as_mut_ptr().cast(),
                iov_len: tail.len(),
            };
            msgs[ready].msg_hdr.msg_iov = iovs[ready].as_mut_ptr();
            msgs[ready].msg_hdr.msg_iovlen = k + 2;
            if let Some(ctl) = self.ctl.as_mut() {
                msgs[ready].msg_hdr.msg_control = ctl[ready].as_mut_ptr().cast();
                msgs[ready].msg_hdr.msg_controllen = std::mem::size_of_val(&ctl[ready]);
            }
            ready += 1;
        }
        if ready == 0 {
            c.no_buffer += u64::from(want > 0);
            return c;
        }
        // SAFETY: msgs[..ready] point to iovecs describing live, writable memory owned by this
        // queue (the slots' mbuf rooms, the headers, the overflow buffers) and, when it keeps
        // tags, to its control buffers, none of which moves or is touched elsewhere during the call; no names.
        let n = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                ready as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let n = usize::try_from(n).unwrap_or(0);
        let hdr_len = if vnet { VnetHdr::LEN } else { 0 };
        for (i, msg) in msgs.iter().enumerate().take(n) {
            let total = msg.msg_len as usize;
            let truncated = msg.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            if total < hdr_len + 14 || truncated {
                c.malformed += 1;
                continue;
            }
            let len = total - hdr_len;
            c.frames += 1;
            c.bytes += len as u64;
            let hdr = if vnet {
                VnetHdr::parse(&self.hdrs[i])
            } else {
                VnetHdr::default()
            };
            let tag = if self.ctl.is_some() {
                stripped_tag(&msg.msg_hdr)
            } else {
                None
            };
            if tag.is_some() && hdr.is_gso() {
                // A large segment on a VLAN: the software segmentation cuts untagged frames
                // only (turn GRO off on a trunk interface).
                c.malformed += 1;
                continue;
            }
            if len <= room && !hdr.is_gso() {
                let Some(mut m) = self.slots[i].take() else {
                    continue;
                };
                m.trim(room - len);
                if hdr.flags & VnetHdr::NEEDS_CSUM != 0
                    && offload::complete_checksum(
                        m.data_mut(),
                        usize::from(hdr.csum_start),
                        usize::from(hdr.csum_offset),
                    )
                    .is_err()
                {
                    c.malformed += 1;
                    continue;
                }
                if let Some(tag) = tag {
                    if !retag(&mut m, tag) {
                        c.no_buffer += 1;
                        continue;
                    }
                    c.bytes += TAG_LEN as u64;
                }
                out.push(m);
                continue;
            }
            if !hdr.is_gso() {
                // Longer than an mbuf and not a segment the port may cut: the interface's MTU
                // is above the forwarder's.
                c.malformed += 1;
                continue;
            }
            // A large segment: whole in a large buffer, or contiguous in the overflow buffer
            // and cut later.
            if let Some(m) = self.slots[i].as_ref() {
                if let Some(whole) = self.whole(&hdr, &m.data()[..room], &self.big[i], len) {
                    c.large += 1;
                    out.push(whole);
                    continue;
                }
                let head = len.min(room);
                self.big[i][..head].copy_from_slice(&m.data()[..head]);
            }
            self.pending[self.pending_len] = (i as u8, len as u32);
            self.pending_len += 1;
        }
        self.drain_pending(out, limit, &mut c);
        c
    }
}

/// A worker's transmit half of a [`PacketSocket`].
pub struct TxQueue {
    sock: Arc<PacketSocket>,
    /// Merge runs of TCP segments into large segments (toward pods).
    coalesce: bool,
    runs: [Run; 64],
    hdrs: [[u8; VnetHdr::LEN]; 64],
}

impl std::fmt::Debug for TxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxQueue")
            .field("iface", &self.sock.iface)
            .field("coalesce", &self.coalesce)
            .finish()
    }
}

impl TxQueue {
    /// The transmit half of `sock`; with `coalesce` (and the socket's virtio-net header),
    /// consecutive TCP segments of a flow leave as one large segment.
    pub fn new(sock: Arc<PacketSocket>, coalesce: bool) -> TxQueue {
        let coalesce = coalesce && sock.vnet;
        TxQueue {
            sock,
            coalesce,
            runs: [Run::default(); 64],
            hdrs: [[0; VnetHdr::LEN]; 64],
        }
    }

    /// Whether a large segment may be handed over whole: the queue is toward a pod (it
    /// coalesces, so it speaks the virtio-net header) and the interface takes large segments
    /// now. An uplink's never does: the header cannot describe an encapsulated segment.
    pub fn takes_large(&self) -> bool {
        self.coalesce && self.sock.takes_large()
    }

    /// Sends the burst's packets from the front (one `sendmmsg`, more only to step over a
    /// frame the kernel rejects) and frees them. Packets the socket had no room for stay in
    /// the burst, in order. `c.frames` counts frames handed to the kernel, `c.large` those that
    /// were large segments (runs of several packets, or one taken whole: the worker hands one
    /// over only when [`TxQueue::takes_large`], which is when runs are coalesced),
    /// `c.malformed` packets the kernel rejected (freed).
    pub fn tx_burst<const N: usize>(&mut self, burst: &mut Burst<N>) -> (usize, PortCounts) {
        let mut c = PortCounts::default();
        let pkts = burst.as_mut_slice();
        if pkts.is_empty() {
            return (0, c);
        }
        let (nruns, covered) = if self.coalesce && self.sock.takes_large() {
            offload::coalesce(pkts, &mut self.runs)
        } else {
            let n = pkts.len().min(self.runs.len());
            for (i, r) in self.runs[..n].iter_mut().enumerate() {
                *r = Run {
                    first: i,
                    count: 1,
                    payload: 0,
                    hdr: VnetHdr::default(),
                };
            }
            (n, n)
        };
        let vnet = self.sock.vnet;
        // SAFETY: plain data; zero is valid.
        let mut iovs: [libc::iovec; TX_IOVS] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; 64] = unsafe { std::mem::zeroed() };
        let mut next_iov = 0;
        let mut built = 0;
        for (k, run) in self.runs[..nruns].iter().enumerate() {
            let need = run.count + usize::from(vnet);
            if next_iov + need > TX_IOVS {
                break;
            }
            let start = next_iov;
            if vnet {
                self.hdrs[k] = run.hdr.emit();
                iovs[next_iov] = libc::iovec {
                    iov_base: self.hdrs[k].as_mut_ptr().cast(),
                    iov_len: VnetHdr::LEN,
                };
                next_iov += 1;
            }
            for (j, p) in pkts[run.first..run.first + run.count].iter().enumerate() {
                let d = if j == 0 {
                    p.data()
                } else {
                    &p.data()[run.payload..]
                };
                iovs[next_iov] = libc::iovec {
                    iov_base: d.as_ptr().cast_mut().cast(),
                    iov_len: d.len(),
                };
                next_iov += 1;
            }
            msgs[k].msg_hdr.msg_iov = iovs[start..].as_mut_ptr();
            msgs[k].msg_hdr.msg_iovlen = need;
            built += 1;
        }
        let mut done = 0;
        while done < built {
            // SAFETY: msgs[done..built] point to iovecs describing live memory (the burst's
            // packets, which nothing else touches during the call, and this queue's headers);
            // the kernel only reads them. No name: the socket is bound to its interface.
            let r = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    msgs[done..].as_mut_ptr(),
                    (built - done) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                for m in &msgs[done..done + r as usize] {
                    c.bytes +=
                        u64::from(m.msg_len).saturating_sub(VnetHdr::LEN as u64 * u64::from(vnet));
                }
                for run in &self.runs[done..done + r as usize] {
                    c.frames += 1;
                    c.large += u64::from(run.hdr.is_gso());
                }
                done += r as usize;
                continue;
            }
            let e = io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if r == 0 || matches!(e, libc::EAGAIN | libc::ENOBUFS | libc::EINTR) {
                break;
            }
            // The kernel rejects this frame (too long for the interface, bad metadata): drop it
            // and go on with the rest.
            c.malformed += self.runs[done].count as u64;
            done += 1;
        }
        let taken = if done == nruns {
            covered
        } else {
            self.runs.get(done).map_or(covered, |r| r.first)
        };
        burst.free_front(taken);
        (taken, c)
    }
}
