//! Software offloads for ports whose kernel side speaks `virtio_net_hdr` (AF_PACKET with
//! `PACKET_VNET_HDR`): completing partial checksums, segmenting large TCP/UDP segments (GSO)
//! and coalescing consecutive TCP segments back into one (GRO).
//!
//! A pod with the kernel's default offloads sends TCP segments of up to 64 KiB with the TCP
//! checksum left partial (the kernel filled in only the pseudo-header sum), and accepts the
//! same in return. [`segment`] cuts such a frame into frames of `gso_size` payload bytes with
//! every header and checksum correct; it also takes the frame with an outer IPv6 header in
//! front (SRv6 H.Encaps.Red: IPv6 carrying IPv4 or IPv6), so the same code segments an
//! encapsulated segment once, on the uplink side. [`coalesce`] finds runs of consecutive
//! segments of one TCP flow in a burst and describes each run as one large segment: the first
//! packet's headers rewritten for the whole, the others contributing their payload, and the
//! `virtio_net_hdr` that tells the kernel its segment size and that its checksum is partial.
//!
//! Guarantees: every function is total over arbitrary bytes (a frame it cannot handle is an
//! [`OffloadError`], never a panic, and is left unchanged); a run is coalesced only when the
//! kernel's own GRO would have merged it (same addresses, ports, acknowledgement, window and
//! options, consecutive sequence numbers, equal segment sizes but the last, only ACK/PSH
//! flags) and every segment's checksum verified, so a corrupted segment is delivered alone and
//! dropped by the pod's stack as it would be without lace.
//!
//! Layout assumed everywhere: an Ethernet header without VLAN tag at offset 0 (14 bytes).

use crate::pipeline::PacketBuf;
use crate::wire::checksum;

const ETH: usize = 14;
const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
const PROTO_IPV4: u8 = 4;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_IPV6: u8 = 41;
const PROTO_ETHERNET: u8 = 143;
const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;
const TCP_URG: u8 = 0x20;
const TCP_CWR: u8 = 0x80;
/// The largest frame a coalesced segment may become: IPv4's total length is 16 bits, and the
/// kernel refuses GSO packets at or above the device's `gso_max_size` (64 KiB by default).
pub const MAX_COALESCED: usize = 65_000;

/// The `virtio_net_hdr` in front of every frame on a `PACKET_VNET_HDR` socket (little endian,
/// as the kernel writes it for packet sockets on little-endian hosts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// [`VnetHdr::NEEDS_CSUM`], [`VnetHdr::DATA_VALID`].
    pub flags: u8,
    /// [`VnetHdr::GSO_NONE`], [`VnetHdr::GSO_TCPV4`], [`VnetHdr::GSO_TCPV6`],
    /// [`VnetHdr::GSO_UDP_L4`], possibly with [`VnetHdr::GSO_ECN`].
    pub gso_type: u8,
    /// Bytes of headers (Ethernet to the end of the transport header), a hint.
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the partial checksum's coverage starts (from the frame's first byte).
    pub csum_start: u16,
    /// Where the checksum field is, from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Bytes on the wire.
    pub const LEN: usize = 10;
    /// The checksum from `csum_start` on is partial: only the pseudo-header sum is filled in.
    pub const NEEDS_CSUM: u8 = 1;
    /// The checksum was verified (receive side).
    pub const DATA_VALID: u8 = 2;
    /// Not a large segment.
    pub const GSO_NONE: u8 = 0;
    /// A TCP/IPv4 segment of several `gso_size` pieces.
    pub const GSO_TCPV4: u8 = 1;
    /// A TCP/IPv6 segment.
    pub const GSO_TCPV6: u8 = 4;
    /// A UDP datagram train (`UDP_SEGMENT`): one datagram per `gso_size` bytes.
    pub const GSO_UDP_L4: u8 = 5;
    /// ECN flag on a TCP GSO type.
    pub const GSO_ECN: u8 = 0x80;

    /// Decodes the header.
    pub fn parse(b: &[u8; Self::LEN]) -> VnetHdr {
        let u = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        }
    }

    /// Encodes the header.
    pub fn emit(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }

    /// Whether the frame is a large segment to be cut.
    pub fn is_gso(&self) -> bool {
        self.gso_type & !Self::GSO_ECN != Self::GSO_NONE
    }
}

/// A large segment carried whole through the pipeline: what the forwarder keeps of the
/// `virtio_net_hdr` it arrived with. Its transport checksum field holds the pseudo-header sum
/// over its whole length (partial), as the kernel hands it over; the rest is found again from
/// the headers wherever it is needed ([`Layout::of`]), so encapsulating, decapsulating or
/// rewriting the packet never leaves it stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gso {
    /// TCP segments or UDP datagrams.
    pub proto: GsoProto,
    /// Payload bytes per piece.
    pub size: u16,
    /// The piece size is the receiver's estimate, not the sender's: the segment crossed a
    /// large-frame link whole ([`Gso::of_long_frame`]), as a NIC's LRO marks what it coalesced.
    /// A TCP segment's pieces may then be made smaller where a limit asks ([`Gso::refit`]).
    pub estimated: bool,
}

/// The transport a [`Gso`] segment is cut by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoProto {
    /// `GSO_TCPV4`, `GSO_TCPV6`.
    Tcp,
    /// `GSO_UDP_L4`.
    Udp,
}

impl GsoProto {
    /// The transport a `virtio_net_hdr` GSO type cuts by (ECN aside); `None` for no segment
    /// or a type the forwarder does not cut.
    fn of(gso_type: u8) -> Option<GsoProto> {
        match gso_type & !VnetHdr::GSO_ECN {
            VnetHdr::GSO_TCPV4 | VnetHdr::GSO_TCPV6 => Some(GsoProto::Tcp),
            VnetHdr::GSO_UDP_L4 => Some(GsoProto::Udp),
            _ => None,
        }
    }
}

impl Gso {
    /// The large segment a received header describes; `None` for an ordinary frame or a GSO
    /// type the forwarder does not carry whole.
    pub fn of(hdr: &VnetHdr) -> Option<Gso> {
        let proto = GsoProto::of(hdr.gso_type)?;
        (hdr.gso_size != 0 && hdr.flags & VnetHdr::NEEDS_CSUM != 0).then_some(Gso {
            proto,
            size: hdr.gso_size,
            estimated: false,
        })
    }

    /// Whether `frame`, this large segment, crosses a large-frame link whole (ADR 0055): a TCP
    /// segment inside an outer IPv6 header, longer than the link's frames of `max_frame` bytes,
    /// so that the receiver takes it back as a segment ([`Gso::of_long_frame`]). Anything else
    /// is cut before it: a UDP train (the receiver could not know where its datagrams end), a
    /// segment short enough to pass as an ordinary frame (its checksum is partial).
    pub fn crosses_whole(&self, frame: &[u8], max_frame: usize) -> bool {
        self.proto == GsoProto::Tcp
            && frame.len() > max_frame
            && Layout::of(frame).is_ok_and(|lay| lay.outer.is_some() && lay.proto == PROTO_TCP)
    }

    /// The large segment `frame` is, having arrived whole on a large-frame link whose frames
    /// are at most `max_frame` bytes, longer than that ([`Gso::crosses_whole`] on the sender):
    /// an encapsulated TCP segment whose checksum the sender left partial. Its pieces are
    /// estimated as the largest that each fit the link inside the same encapsulation: what a
    /// NIC's LRO would have seen arrive.
    pub fn of_long_frame(frame: &[u8], max_frame: usize) -> Result<Gso, OffloadError> {
        let lay = Layout::of(frame)?;
        if lay.outer.is_none() || lay.proto != PROTO_TCP {
            return Err(OffloadError::Unsupported);
        }
        let size = max_frame
            .checked_sub(lay.payload)
            .and_then(|s| u16::try_from(s).ok())
            .filter(|&s| s > 0 && frame.len() > max_frame)
            .ok_or(OffloadError::Malformed)?;
        Ok(Gso {
            proto: GsoProto::Tcp,
            size,
            estimated: true,
        })
    }

    /// This segment with pieces small enough that each, headers included, is at most `max`
    /// bytes: only a TCP segment whose piece size was estimated (a byte stream may be cut
    /// anywhere; the sender's own segments keep their size, and a limit they exceed is an
    /// error the sender must hear of). `None` when it may not be, or no piece could fit.
    pub fn refit(&self, frame: &[u8], max: usize) -> Option<Gso> {
        if !self.estimated || self.proto != GsoProto::Tcp {
            return None;
        }
        let lay = Layout::of(frame).ok()?;
        let size = u16::try_from(max.checked_sub(lay.payload)?).ok()?;
        (size > 0).then_some(Gso {
            size: size.min(self.size),
            ..*self
        })
    }

    /// The header lengths a NIC's tunnel TSO cuts `frame`, this large segment, by (ADR 0056):
    /// an encapsulated TCP segment whose outer IPv6 payload length fits its field. `None` for
    /// anything else, which is cut in software.
    pub fn tso_headers(&self, frame: &[u8]) -> Option<TsoHeaders> {
        let lay = Layout::of(frame).ok()?;
        let outer = lay.outer?;
        let inner = outer + 40;
        if self.proto != GsoProto::Tcp
            || lay.proto != PROTO_TCP
            || self.size == 0
            || frame.len() - inner > usize::from(u16::MAX)
        {
            return None;
        }
        Some(TsoHeaders {
            outer_l2: outer as u16,
            outer_l3: 40,
            l2: (lay.ip - inner) as u16,
            l3: (lay.l4 - lay.ip) as u16,
            l4: (lay.payload - lay.l4) as u16,
            v4: lay.v4,
            size: self.size,
        })
    }

    /// The `virtio_net_hdr` that hands `frame`, this large segment, to the kernel whole:
    /// partial checksum from the transport header on, GSO type from its IP version, with the
    /// ECN flag when the segment carries CWR. An encapsulated segment has none (the header has
    /// no tunnel types the forwarder's encapsulation would match).
    pub fn vnet_hdr(&self, frame: &[u8]) -> Result<VnetHdr, OffloadError> {
        let lay = Layout::of(frame)?;
        let (gso_type, csum_offset, proto) = match self.proto {
            GsoProto::Tcp if lay.v4 => (VnetHdr::GSO_TCPV4, 16, PROTO_TCP),
            GsoProto::Tcp => (VnetHdr::GSO_TCPV6, 16, PROTO_TCP),
            GsoProto::Udp => (VnetHdr::GSO_UDP_L4, 6, PROTO_UDP),
        };
        if lay.proto != proto || self.size == 0 {
            return Err(OffloadError::Malformed);
        }
        if lay.outer.is_some() {
            return Err(OffloadError::Unsupported);
        }
        let ecn = if proto == PROTO_TCP && frame[lay.l4 + 13] & TCP_CWR != 0 {
            VnetHdr::GSO_ECN
        } else {
            0
        };
        Ok(VnetHdr {
            flags: VnetHdr::NEEDS_CSUM,
            gso_type: gso_type | ecn,
            hdr_len: lay.payload as u16,
            gso_size: self.size,
            csum_start: lay.l4 as u16,
            csum_offset,
        })
    }

    /// The length of the longest frame cutting `frame` gives: its headers and one piece.
    pub fn piece_len(&self, frame: &[u8]) -> Result<usize, OffloadError> {
        let lay = Layout::of(frame)?;
        Ok(frame.len().min(lay.payload + usize::from(self.size)))
    }

    /// Cuts `frame`, this large segment (possibly encapsulated since it arrived), into frames
    /// of `size` payload bytes, as [`segment`] does.
    pub fn cut<B: PacketBuf>(
        &self,
        frame: &[u8],
        alloc: impl FnMut() -> Option<B>,
        out: impl FnMut(B),
    ) -> Result<usize, OffloadError> {
        cut_pieces(frame, self.proto, usize::from(self.size), alloc, out)
    }
}

/// What a NIC's tunnel TSO needs to know of an encapsulated TCP segment to cut it as
/// [`Gso::cut`] would (DPDK's `outer_l2_len`, `outer_l3_len`, `l2_len`, `l3_len`, `l4_len`,
/// `tso_segsz`). lace's encapsulation is one outer IPv6 header carrying the inner IP packet
/// (an l3 network: IP in IP) or a bridged Ethernet frame (an l2 network), whose header DPDK
/// counts in `l2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsoHeaders {
    /// The outer Ethernet header.
    pub outer_l2: u16,
    /// The outer IPv6 header.
    pub outer_l3: u16,
    /// Between the outer IPv6 header and the inner IP header: a bridged frame's Ethernet
    /// header, none for IP in IP.
    pub l2: u16,
    /// The inner IP header.
    pub l3: u16,
    /// The TCP header.
    pub l4: u16,
    /// Whether the inner IP header is IPv4 (its checksum is the NIC's to write per piece).
    pub v4: bool,
    /// Payload bytes per piece.
    pub size: u16,
}

impl TsoHeaders {
    /// Whether the inner packet is a bridged Ethernet frame (an l2 network), which only a
    /// generic IP tunnel TSO cuts.
    pub fn bridged(&self) -> bool {
        self.l2 != 0
    }
}

/// Why a frame's offload metadata could not be honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    /// Headers shorter than they say, or checksum offsets outside the frame.
    #[error("malformed headers or offload metadata")]
    Malformed,
    /// A layout the software offloads do not handle (VLAN tags, IPv4 options on an
    /// encapsulated segment, IPv6 extension headers, GSO types other than TCP and UDP).
    #[error("offload of this packet layout is not supported")]
    Unsupported,
    /// No buffer for a segment.
    #[error("no buffer for a segment")]
    NoBuffer,
}

#[inline]
fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

#[inline]
fn be32(d: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

#[inline]
fn put16(d: &mut [u8], at: usize, v: u16) {
    d[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Completes a partial checksum: the field at `start + offset` holds the pseudo-header sum;
/// the one's-complement sum from `start` to the end, field included, becomes the checksum.
pub fn complete_checksum(
    frame: &mut [u8],
    start: usize,
    offset: usize,
) -> Result<(), OffloadError> {
    let field = start.checked_add(offset).ok_or(OffloadError::Malformed)?;
    if field + 2 > frame.len() {
        return Err(OffloadError::Malformed);
    }
    let mut sum = checksum::finish(checksum::data(&frame[start..]));
    // UDP sends a computed zero as all ones (RFC 768); TCP's field never holds zero then
    // either (both are the same one's-complement value).
    if sum == 0 {
        sum = 0xffff;
    }
    put16(frame, field, sum);
    Ok(())
}

/// Where the headers of a TCP or UDP packet (possibly inside one outer IPv6 header) lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the outer IPv6 header of an encapsulated packet (carrying an IP packet, or a
    /// bridged Ethernet frame).
    pub outer: Option<usize>,
    /// Offset of the (inner) IP header.
    pub ip: usize,
    /// Whether the (inner) IP header is IPv4.
    pub v4: bool,
    /// Offset of the TCP or UDP header.
    pub l4: usize,
    /// Transport protocol (6 or 17).
    pub proto: u8,
    /// Offset of the payload (end of the transport header).
    pub payload: usize,
}

impl Layout {
    /// Finds the headers of `frame` (Ethernet, an optional outer IPv6 header carrying IPv4,
    /// IPv6 or an Ethernet frame, IPv4 or IPv6 without extension headers, TCP or UDP),
    /// checking every length.
    pub fn of(frame: &[u8]) -> Result<Layout, OffloadError> {
        if frame.len() < ETH {
            return Err(OffloadError::Malformed);
        }
        let (v4, ip, outer) = match be16(frame, 12) {
            ETH_IPV4 => (true, ETH, None),
            ETH_IPV6 => {
                if frame.len() < ETH + 40 {
                    return Err(OffloadError::Malformed);
                }
                match frame[ETH + 6] {
                    PROTO_IPV4 => (true, ETH + 40, Some(ETH)),
                    PROTO_IPV6 => (false, ETH + 40, Some(ETH)),
                    PROTO_ETHERNET => {
                        // A bridged frame behind the outer header (H.Encaps.L2.Red).
                        let inner = ETH + 40;
                        if frame.len() < inner + ETH {
                            return Err(OffloadError::Malformed);
                        }
                        match be16(frame, inner + 12) {
                            ETH_IPV4 => (true, inner + ETH, Some(ETH)),
                            ETH_IPV6 => (false, inner + ETH, Some(ETH)),
                            _ => return Err(OffloadError::Unsupported),
                        }
                    }
                    _ => (false, ETH, None),
                }
            }
            _ => return Err(OffloadError::Unsupported),
        };
        let (l4, proto) = if v4 {
            if frame.len() < ip + 20 || frame[ip] >> 4 != 4 {
                return Err(OffloadError::Malformed);
            }
            let ihl = usize::from(frame[ip] & 0xf) * 4;
            if ihl < 20 {
                return Err(OffloadError::Malformed);
            }
            // Fragments are never segmented or merged.
            if be16(frame, ip + 6) & 0x3fff != 0 {
                return Err(OffloadError::Unsupported);
            }
            (ip + ihl, frame[ip + 9])
        } else {
            if frame.len() < ip + 40 || frame[ip] >> 4 != 6 {
                return Err(OffloadError::Malformed);
            }
            (ip + 40, frame[ip + 6])
        };
        let payload = match proto {
            PROTO_TCP => {
                if frame.len() < l4 + 20 {
                    return Err(OffloadError::Malformed);
                }
                let doff = usize::from(frame[l4 + 12] >> 4) * 4;
                if doff < 20 {
                    return Err(OffloadError::Malformed);
                }
                l4 + doff
            }
            PROTO_UDP => l4 + 8,
            _ => return Err(OffloadError::Unsupported),
        };
        if payload > frame.len() {
            return Err(OffloadError::Malformed);
        }
        Ok(Layout {
            outer,
            ip,
            v4,
            l4,
            proto,
            payload,
        })
    }
}

/// The pseudo-header sum of a transport segment of `len` bytes (not complemented).
fn pseudo(frame: &[u8], lay: &Layout, len: usize) -> u16 {
    let ip = lay.ip;
    let mut acc: u32 = u32::from(lay.proto) + len as u32;
    let addrs = if lay.v4 {
        &frame[ip + 12..ip + 20]
    } else {
        &frame[ip + 8..ip + 40]
    };
    for w in addrs.chunks_exact(2) {
        acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Rewrites the IP lengths (outer and inner) and the IPv4 header checksum of a packet whose
/// transport segment is `l4_len` bytes long.
fn fix_ip(frame: &mut [u8], lay: &Layout, l4_len: usize) {
    let ip = lay.ip;
    if lay.v4 {
        let total = lay.l4 - ip + l4_len;
        put16(frame, ip + 2, total as u16);
        put16(frame, ip + 10, 0);
        let sum = checksum::finish(checksum::data(&frame[ip..lay.l4]));
        put16(frame, ip + 10, sum);
    } else {
        put16(frame, ip + 4, l4_len as u16);
    }
    if let Some(o) = lay.outer {
        put16(frame, o + 4, (lay.l4 - (o + 40) + l4_len) as u16);
    }
}

/// Cuts the large segment in `frame` (metadata `hdr` from the kernel) into frames of at most
/// `hdr.gso_size` payload bytes, each in a fresh buffer from `alloc`, handed to `out` in order.
/// Every segment gets its own IP lengths, IPv4 identification (consecutive) and header
/// checksum, TCP sequence number and flags (FIN/PSH on the last, CWR on the first) or UDP
/// length, and a full transport checksum. Returns the number of segments.
pub fn segment<B: PacketBuf>(
    frame: &[u8],
    hdr: &VnetHdr,
    alloc: impl FnMut() -> Option<B>,
    out: impl FnMut(B),
) -> Result<usize, OffloadError> {
    let proto = GsoProto::of(hdr.gso_type).ok_or(OffloadError::Unsupported)?;
    Gso {
        proto,
        size: hdr.gso_size,
        estimated: false,
    }
    .cut(frame, alloc, out)
}

/// [`segment`]'s work, for a segment of transport `proto` and pieces of `mss` bytes.
fn cut_pieces<B: PacketBuf>(
    frame: &[u8],
    proto: GsoProto,
    mss: usize,
    mut alloc: impl FnMut() -> Option<B>,
    mut out: impl FnMut(B),
) -> Result<usize, OffloadError> {
    let lay = Layout::of(frame)?;
    let want = match proto {
        GsoProto::Tcp => PROTO_TCP,
        GsoProto::Udp => PROTO_UDP,
    };
    if lay.proto != want {
        return Err(OffloadError::Malformed);
    }
    if mss == 0 {
        return Err(OffloadError::Malformed);
    }
    let hlen = lay.payload;
    let payload = &frame[hlen..];
    let count = payload.len().div_ceil(mss).max(1);
    let seq0 = if lay.proto == PROTO_TCP {
        be32(frame, lay.l4 + 4)
    } else {
        0
    };
    let id0 = if lay.v4 { be16(frame, lay.ip + 4) } else { 0 };
    let flags0 = if lay.proto == PROTO_TCP {
        frame[lay.l4 + 13]
    } else {
        0
    };
    for i in 0..count {
        let chunk = &payload[(i * mss).min(payload.len())..((i + 1) * mss).min(payload.len())];
        let mut b = alloc().ok_or(OffloadError::NoBuffer)?;
        if !b.append(hlen + chunk.len()) {
            return Err(OffloadError::NoBuffer);
        }
        let d = b.data_mut();
        d[..hlen].copy_from_slice(&frame[..hlen]);
        d[hlen..].copy_from_slice(chunk);
        let l4_len = hlen - lay.l4 + chunk.len();
        fix_ip(d, &lay, l4_len);
        if lay.v4 {
            // Consecutive identifications, as the kernel's own segmentation gives them; the
            // header checksum is recomputed.
            put16(d, lay.ip + 4, id0.wrapping_add(i as u16));
            put16(d, lay.ip + 10, 0);
            let s = checksum::finish(checksum::data(&d[lay.ip..lay.l4]));
            put16(d, lay.ip + 10, s);
        }
        let field = if lay.proto == PROTO_TCP {
            let seq = seq0.wrapping_add((i * mss) as u32);
            d[lay.l4 + 4..lay.l4 + 8].copy_from_slice(&seq.to_be_bytes());
            let mut f = flags0;
            if i + 1 != count {
                f &= !(TCP_FIN | TCP_PSH);
            }
            if i != 0 {
                f &= !TCP_CWR;
            }
            d[lay.l4 + 13] = f;
            lay.l4 + 16
        } else {
            put16(d, lay.l4 + 4, l4_len as u16);
            lay.l4 + 6
        };
        put16(d, field, pseudo(d, &lay, l4_len));
        complete_checksum(d, lay.l4, field - lay.l4)?;
        out(b);
    }
    Ok(count)
}

/// Whether the transport checksum of the packet at `lay` is correct.
fn transport_checksum_ok(frame: &[u8], lay: &Layout) -> bool {
    let len = frame.len() - lay.l4;
    checksum::combine(&[pseudo(frame, lay, len), checksum::data(&frame[lay.l4..])]) == 0xffff
}

/// A run of packets [`coalesce`] found: `packets[first..first + count]`, sent as one frame made
/// of the first packet whole and the payload (from `payload`) of each of the others, with
/// `hdr` in front. `count == 1`: the packet alone, unchanged (a large segment taken whole with
/// its own header).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Run {
    /// Index of the first packet.
    pub first: usize,
    /// Packets in the run.
    pub count: usize,
    /// Offset of the payload in each packet of the run (the headers' length).
    pub payload: usize,
    /// The header to send the run with.
    pub hdr: VnetHdr,
}

/// What makes two TCP segments mergeable: everything but the sequence number, the lengths,
/// the IPv4 identification and the checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FlowKey {
    lay: Layout,
    seq: u32,
    len: usize,
}

fn tcp_key(frame: &[u8]) -> Option<FlowKey> {
    let lay = Layout::of(frame).ok()?;
    if lay.proto != PROTO_TCP || lay.outer.is_some() {
        return None;
    }
    let flags = frame[lay.l4 + 13];
    if flags & (TCP_SYN | TCP_RST | TCP_URG | TCP_FIN) != 0 || flags & TCP_ACK == 0 {
        return None;
    }
    if lay.v4 && (frame[lay.ip] & 0xf != 5) {
        return None;
    }
    let len = frame.len() - lay.payload;
    if len == 0 || !transport_checksum_ok(frame, &lay) {
        return None;
    }
    Some(FlowKey {
        lay,
        seq: be32(frame, lay.l4 + 4),
        len,
    })
}

/// Whether `next` continues the run that `first` starts and `prev` ends.
fn continues(first: &[u8], fk: &FlowKey, prev: &FlowKey, next: &[u8], nk: &FlowKey) -> bool {
    let lay = &fk.lay;
    if nk.lay != *lay || nk.seq != prev.seq.wrapping_add(prev.len as u32) || prev.len != fk.len {
        return false;
    }
    // The Ethernet header.
    if first[..ETH] != next[..ETH] {
        return false;
    }
    // IP: version/traffic class/flow label and hop limit (IPv6), TOS and TTL (IPv4), addresses.
    let same_ip = if lay.v4 {
        first[lay.ip + 1] == next[lay.ip + 1]
            && first[lay.ip + 8..lay.ip + 10] == next[lay.ip + 8..lay.ip + 10]
            && first[lay.ip + 12..lay.ip + 20] == next[lay.ip + 12..lay.ip + 20]
    } else {
        first[lay.ip..lay.ip + 4] == next[lay.ip..lay.ip + 4]
            && first[lay.ip + 6..lay.ip + 40] == next[lay.ip + 6..lay.ip + 40]
    };
    // TCP: ports, acknowledgement, data offset and flags (PSH aside), window, options.
    let l4 = lay.l4;
    same_ip
        && first[l4..l4 + 4] == next[l4..l4 + 4]
        && first[l4 + 8..l4 + 13] == next[l4 + 8..l4 + 13]
        && (first[l4 + 13] | TCP_PSH) == (next[l4 + 13] | TCP_PSH)
        && first[l4 + 14..l4 + 16] == next[l4 + 14..l4 + 16]
        && first[l4 + 20..lay.payload] == next[l4 + 20..lay.payload]
}

/// Finds runs of consecutive segments of one TCP flow in `pkts` (at most `runs.len()` runs;
/// packets after the last run that fits are left out: returns how many packets the runs cover)
/// and rewrites the first packet of each run of two or more for the whole run: IP total length
/// or payload length, IPv4 header checksum, PSH if any segment had it, and the TCP checksum
/// field as the pseudo-header sum of the whole (partial, [`VnetHdr::NEEDS_CSUM`]). Returns
/// `(runs, packets covered)`.
pub fn coalesce<B: PacketBuf>(pkts: &mut [B], runs: &mut [Run]) -> (usize, usize) {
    let mut n = 0;
    let mut i = 0;
    while i < pkts.len() && n < runs.len() {
        let first = i;
        // A large segment (taken whole) is a run of its own, sent with its own header.
        let gso = pkts[i].gso();
        let key = match gso {
            None => tcp_key(pkts[i].data()),
            Some(_) => None,
        };
        let mut count = 1;
        let mut total = pkts[i].len();
        if let Some(fk) = key {
            let mut prev = fk;
            while first + count < pkts.len() {
                if pkts[first + count].gso().is_some() {
                    break;
                }
                let next = pkts[first + count].data();
                let Some(nk) = tcp_key(next) else { break };
                if total + nk.len > MAX_COALESCED
                    || !continues(pkts[first].data(), &fk, &prev, next, &nk)
                {
                    break;
                }
                total += nk.len;
                prev = nk;
                count += 1;
                // A pushed segment ends the run, as in the kernel's GRO.
                if next[fk.lay.l4 + 13] & TCP_PSH != 0 {
                    break;
                }
            }
        }
        let mut run = Run {
            first,
            count,
            payload: 0,
            hdr: gso
                .and_then(|g| g.vnet_hdr(pkts[first].data()).ok())
                .unwrap_or_default(),
        };
        if let (Some(fk), true) = (key, count > 1) {
            let lay = fk.lay;
            let push = pkts[first + count - 1].data()[lay.l4 + 13] & TCP_PSH;
            let d = pkts[first].data_mut();
            let l4_len = total - lay.l4;
            fix_ip(d, &lay, l4_len);
            d[lay.l4 + 13] |= push;
            let p = pseudo(d, &lay, l4_len);
            put16(d, lay.l4 + 16, p);
            run.payload = lay.payload;
            run.hdr = VnetHdr {
                flags: VnetHdr::NEEDS_CSUM,
                gso_type: if lay.v4 {
                    VnetHdr::GSO_TCPV4
                } else {
                    VnetHdr::GSO_TCPV6
                },
                hdr_len: lay.payload as u16,
                gso_size: fk.len as u16,
                csum_start: lay.l4 as u16,
                csum_offset: 16,
            };
        }
        runs[n] = run;
        n += 1;
        i += count;
    }
    (n, i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::VecBuf;

    /// A TCP/IPv4 frame with `payload` bytes, checksums correct.
    fn tcp4(seq: u32, payload: &[u8], flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; ETH + 20 + 32];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        put16(&mut f, 12, ETH_IPV4);
        f[ETH] = 0x45;
        put16(&mut f, ETH + 4, 0x1234);
        put16(&mut f, ETH + 6, 0x4000);
        f[ETH + 8] = 64;
        f[ETH + 9] = PROTO_TCP;
        f[ETH + 12..ETH + 16].copy_from_slice(&[10, 40, 0, 2]);
        f[ETH + 16..ETH + 20].copy_from_slice(&[10, 40, 1, 2]);
        let l4 = ETH + 20;
        put16(&mut f, l4, 40000);
        put16(&mut f, l4 + 2, 5201);
        f[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        f[l4 + 8..l4 + 12].copy_from_slice(&7u32.to_be_bytes());
        f[l4 + 12] = 8 << 4;
        f[l4 + 13] = flags;
        put16(&mut f, l4 + 14, 512);
        // Timestamps option (NOP NOP TS).
        f[l4 + 20..l4 + 32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3]);
        f.extend_from_slice(payload);
        let lay = Layout::of(&f).unwrap();
        let l4_len = f.len() - l4;
        fix_ip(&mut f, &lay, l4_len);
        let p = pseudo(&f, &lay, l4_len);
        put16(&mut f, l4 + 16, p);
        complete_checksum(&mut f, l4, 16).unwrap();
        f
    }

    fn tcp6(seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; ETH + 40 + 20];
        put16(&mut f, 12, ETH_IPV6);
        f[ETH] = 0x60;
        f[ETH + 6] = PROTO_TCP;
        f[ETH + 7] = 64;
        f[ETH + 8..ETH + 24]
            .copy_from_slice(&[0xfd, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f[ETH + 24..ETH + 40]
            .copy_from_slice(&[0xfd, 0x40, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        let l4 = ETH + 40;
        f[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        f[l4 + 12] = 5 << 4;
        f[l4 + 13] = TCP_ACK;
        f.extend_from_slice(payload);
        let lay = Layout::of(&f).unwrap();
        let l4_len = f.len() - l4;
        fix_ip(&mut f, &lay, l4_len);
        let p = pseudo(&f, &lay, l4_len);
        put16(&mut f, l4 + 16, p);
        complete_checksum(&mut f, l4, 16).unwrap();
        f
    }

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    fn checksums_ok(f: &[u8]) {
        let lay = Layout::of(f).unwrap();
        if lay.v4 {
            assert_eq!(
                checksum::data(&f[lay.ip..lay.l4]),
                0xffff,
                "IPv4 header checksum"
            );
        }
        assert!(transport_checksum_ok(f, &lay), "transport checksum");
    }

    /// `frame` behind an outer IPv6 header (its length left as is) carrying its packet
    /// (`next` 4 or 41) or the whole frame (143).
    fn encapsulated(frame: &[u8], next: u8) -> Vec<u8> {
        let mut f = frame[..ETH].to_vec();
        f[12..14].copy_from_slice(&ETH_IPV6.to_be_bytes());
        let mut outer = [0u8; 40];
        outer[0] = 0x60;
        outer[6] = next;
        outer[7] = 64;
        f.extend_from_slice(&outer);
        f.extend_from_slice(if next == PROTO_ETHERNET {
            frame
        } else {
            &frame[ETH..]
        });
        f
    }

    /// The large segment as the pod's kernel hands it over: lengths for the whole, checksum
    /// partial.
    fn large(seg: &[u8]) -> Vec<u8> {
        let mut f = seg.to_vec();
        let lay = Layout::of(&f).unwrap();
        let p = pseudo(&f, &lay, f.len() - lay.l4);
        put16(&mut f, lay.l4 + 16, p);
        f
    }

    #[test]
    fn segments_a_tcp4_large_segment_and_coalesces_it_back() {
        let payload = data(10_000);
        let orig = tcp4(1000, &payload, TCP_ACK | TCP_PSH);
        let big = large(&orig);
        let hdr = VnetHdr {
            flags: VnetHdr::NEEDS_CSUM,
            gso_type: VnetHdr::GSO_TCPV4,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let mut segs: Vec<VecBuf> = Vec::new();
        let n = segment(&big, &hdr, || Some(VecBuf::new()), |b| segs.push(b)).unwrap();
        assert_eq!(n, 7);
        let mut joined = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let d = s.data();
            checksums_ok(d);
            assert_eq!(be32(d, 34 + 4), 1000 + (i * 1448) as u32);
            assert_eq!(be16(d, 14 + 4), 0x1234 + i as u16);
            let psh = d[34 + 13] & TCP_PSH != 0;
            assert_eq!(psh, i == 6, "PSH only on the last");
            joined.extend_from_slice(&d[66..]);
        }
        assert_eq!(joined, payload);

        let mut runs = [Run::default(); 4];
        let (r, covered) = coalesce(&mut segs, &mut runs);
        assert_eq!((r, covered), (1, 7));
        let run = runs[0];
        assert_eq!(run.count, 7);
        assert_eq!(run.hdr.gso_type, VnetHdr::GSO_TCPV4);
        assert_eq!(run.hdr.gso_size, 1448);
        // What the kernel would receive: the first packet, then the others' payloads.
        let mut whole = segs[0].data().to_vec();
        for s in &segs[1..] {
            whole.extend_from_slice(&s.data()[run.payload..]);
        }
        complete_checksum(&mut whole, 34, 16).unwrap();
        let mut expect = orig.clone();
        // IPv4 identification is the first segment's.
        put16(&mut expect, 14 + 4, 0x1234);
        assert_eq!(whole, expect);
    }

    #[test]
    fn segments_tcp6_inside_an_outer_ipv6_header() {
        let payload = data(4000);
        let inner = large(&tcp6(5, &payload));
        // H.Encaps.Red: Ethernet, outer IPv6 (next header 41), the inner packet.
        let mut f = inner[..ETH].to_vec();
        let mut outer = [0u8; 40];
        outer[0] = 0x60;
        outer[6] = PROTO_IPV6;
        outer[7] = 64;
        f.extend_from_slice(&outer);
        f.extend_from_slice(&inner[ETH..]);
        let hdr = VnetHdr {
            gso_type: VnetHdr::GSO_TCPV6,
            gso_size: 1000,
            ..VnetHdr::default()
        };
        let mut segs: Vec<VecBuf> = Vec::new();
        assert_eq!(
            segment(&f, &hdr, || Some(VecBuf::new()), |b| segs.push(b)),
            Ok(4)
        );
        for s in &segs {
            let d = s.data();
            checksums_ok(d);
            let inner_len = d.len() - ETH - 40;
            assert_eq!(
                usize::from(be16(d, ETH + 4)),
                inner_len,
                "outer payload length"
            );
            assert_eq!(usize::from(be16(d, ETH + 40 + 4)), inner_len - 40);
        }
    }

    #[test]
    fn a_large_segment_carried_whole_gets_its_header_back_and_is_cut_inside_either_encapsulation() {
        let payload = data(6000);
        let orig = tcp4(77, &payload, TCP_ACK | TCP_CWR);
        let big = large(&orig);
        let got = VnetHdr {
            flags: VnetHdr::NEEDS_CSUM,
            gso_type: VnetHdr::GSO_TCPV4 | VnetHdr::GSO_ECN,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let gso = Gso::of(&got).unwrap();
        assert_eq!(
            gso,
            Gso {
                proto: GsoProto::Tcp,
                size: 1448,
                estimated: false,
            }
        );
        // What the pod's kernel said is what the pod's kernel is told.
        assert_eq!(gso.vnet_hdr(&big), Ok(got));
        assert_eq!(gso.piece_len(&big), Ok(66 + 1448));
        assert_eq!(
            Gso::of(&VnetHdr { flags: 0, ..got }),
            None,
            "no partial checksum"
        );
        assert_eq!(Gso::of(&VnetHdr::default()), None);

        // Behind an outer IPv6 header carrying the packet (l3) or its Ethernet frame (l2).
        for next in [PROTO_IPV4, PROTO_ETHERNET] {
            let f = encapsulated(&big, next);
            let head = f.len() - payload.len();
            assert_eq!(
                gso.vnet_hdr(&f),
                Err(OffloadError::Unsupported),
                "encapsulated"
            );
            assert_eq!(gso.piece_len(&f), Ok(head + 1448));
            let mut pieces: Vec<VecBuf> = Vec::new();
            assert_eq!(
                gso.cut(&f, || Some(VecBuf::new()), |b| pieces.push(b)),
                Ok(5)
            );
            let mut joined = Vec::new();
            for (i, p) in pieces.iter().enumerate() {
                let d = p.data();
                checksums_ok(d);
                assert_eq!(
                    usize::from(be16(d, ETH + 4)),
                    d.len() - ETH - 40,
                    "outer length"
                );
                assert_eq!(d[..ETH + 4], f[..ETH + 4], "outer headers");
                assert_eq!(d[ETH + 6..ETH + 40], f[ETH + 6..ETH + 40], "outer headers");
                let cwr = d[head - 32 + 13] & TCP_CWR != 0;
                assert_eq!(cwr, i == 0, "CWR on the first piece only");
                joined.extend_from_slice(&d[head..]);
            }
            assert_eq!(joined, payload);
        }
    }

    #[test]
    fn a_tcp_segment_crosses_a_large_frame_link_whole_and_comes_back_with_estimated_pieces() {
        const LINK: usize = ETH + 1500;
        let payload = data(20_000);
        let big4 = large(&tcp4(9, &payload, TCP_ACK));
        let big6 = large(&tcp6(9, &payload));
        let sent = Gso {
            proto: GsoProto::Tcp,
            size: 1300,
            estimated: false,
        };
        for (big, next) in [
            (&big4, PROTO_IPV4),
            (&big6, PROTO_IPV6),
            (&big4, PROTO_ETHERNET),
        ] {
            let f = encapsulated(big, next);
            assert!(sent.crosses_whole(&f, LINK));
            // The largest pieces that fit the link in the same encapsulation.
            let head = f.len() - payload.len();
            let got = Gso::of_long_frame(&f, LINK).unwrap();
            assert_eq!(
                got,
                Gso {
                    proto: GsoProto::Tcp,
                    size: (LINK - head) as u16,
                    estimated: true,
                },
                "behind {next}"
            );
            assert_eq!(got.piece_len(&f), Ok(LINK));
            let mut pieces: Vec<VecBuf> = Vec::new();
            assert!(got
                .cut(&f, || Some(VecBuf::new()), |b| pieces.push(b))
                .is_ok());
            let mut joined = Vec::new();
            for p in &pieces {
                assert!(p.len() <= LINK);
                checksums_ok(p.data());
                joined.extend_from_slice(&p.data()[head..]);
            }
            assert_eq!(joined, payload);
        }

        // What does not cross whole is not taken back as a segment either: a UDP train (its
        // datagrams' ends would be lost), a segment without the encapsulation, one no longer
        // than the link's frames (it passes as an ordinary frame, so it is cut).
        let f = encapsulated(&big4, PROTO_IPV4);
        let udp = Gso {
            proto: GsoProto::Udp,
            ..sent
        };
        assert!(!udp.crosses_whole(&f, LINK));
        assert!(!sent.crosses_whole(&big4, LINK));
        assert!(!sent.crosses_whole(&f, f.len()));
        assert_eq!(
            Gso::of_long_frame(&big4, LINK),
            Err(OffloadError::Unsupported)
        );
        assert_eq!(
            Gso::of_long_frame(&f, f.len()),
            Err(OffloadError::Malformed)
        );
        assert_eq!(
            Gso::of_long_frame(&f[..ETH + 30], LINK),
            Err(OffloadError::Malformed)
        );

        // Delivered into a network of a smaller MTU: an estimate is cut finer, never coarser;
        // the sender's own size is never changed; below one byte of payload, nothing fits.
        let got = Gso::of_long_frame(&f, LINK).unwrap();
        let finer = got.refit(&big4, ETH + 1400).unwrap();
        assert_eq!((finer.size, finer.estimated), (1400 - 20 - 32, true));
        assert_eq!(got.refit(&big4, 9000), Some(got));
        assert_eq!(sent.refit(&big4, ETH + 1400), None);
        assert_eq!(got.refit(&big4, ETH + 20 + 32), None);
    }

    #[test]
    fn tunnel_tso_headers_describe_the_pieces_software_would_cut() {
        let payload = data(9000);
        let big4 = large(&tcp4(3, &payload, TCP_ACK));
        let big6 = large(&tcp6(3, &payload));
        let gso = Gso {
            proto: GsoProto::Tcp,
            size: 1400,
            estimated: false,
        };
        for (big, next, v4, l2, l3, l4) in [
            (&big4, PROTO_IPV4, true, 0, 20, 32),
            (&big6, PROTO_IPV6, false, 0, 40, 20),
            (&big4, PROTO_ETHERNET, true, ETH, 20, 32),
            (&big6, PROTO_ETHERNET, false, ETH, 40, 20),
        ] {
            let f = encapsulated(big, next);
            let h = gso.tso_headers(&f).unwrap();
            assert_eq!(
                h,
                TsoHeaders {
                    outer_l2: ETH as u16,
                    outer_l3: 40,
                    l2: l2 as u16,
                    l3: l3 as u16,
                    l4: l4 as u16,
                    v4,
                    size: 1400,
                },
                "behind {next}"
            );
            assert_eq!(h.bridged(), next == PROTO_ETHERNET);
            // A NIC repeats these headers before each piece of `size` bytes: what the
            // software cut gives.
            let head = usize::from(h.outer_l2 + h.outer_l3 + h.l2 + h.l3 + h.l4);
            assert_eq!(head, f.len() - payload.len());
            let inner = usize::from(h.outer_l2 + h.outer_l3 + h.l2);
            assert_eq!(f[inner] >> 4, if v4 { 4 } else { 6 });
            let mut pieces: Vec<VecBuf> = Vec::new();
            let n = gso
                .cut(&f, || Some(VecBuf::new()), |b| pieces.push(b))
                .unwrap();
            assert_eq!(n, payload.len().div_ceil(usize::from(h.size)));
            assert!(pieces.iter().all(|p| p.len() <= head + 1400));
        }

        // What a NIC's tunnel TSO is not given: a UDP train, a segment without the
        // encapsulation, one whose outer payload length would not fit its field, headers that
        // do not parse.
        let f = encapsulated(&big4, PROTO_IPV4);
        let udp = Gso {
            proto: GsoProto::Udp,
            ..gso
        };
        assert_eq!(udp.tso_headers(&f), None);
        assert_eq!(gso.tso_headers(&big4), None);
        let mut huge = encapsulated(&big4, PROTO_IPV4);
        huge.resize(ETH + 40 + usize::from(u16::MAX) + 1, 0);
        assert_eq!(gso.tso_headers(&huge), None);
        assert_eq!(gso.tso_headers(&f[..ETH + 40 + 10]), None);
        assert_eq!(Gso { size: 0, ..gso }.tso_headers(&f), None);
    }

    #[test]
    fn runs_stop_at_gaps_other_flows_and_bad_checksums() {
        let p = data(1000);
        let mut pkts: Vec<VecBuf> = [
            tcp4(0, &p, TCP_ACK),
            tcp4(1000, &p, TCP_ACK),
            tcp4(3000, &p, TCP_ACK), // gap
            tcp4(4000, &p, TCP_ACK),
            tcp4(5000, &p, TCP_ACK),
        ]
        .iter()
        .map(|f| VecBuf::from_slice(f).unwrap())
        .collect();
        // Corrupt the last one's payload: it must be sent alone.
        let last = pkts[4].data_mut();
        let at = last.len() - 1;
        last[at] ^= 0xff;
        let mut runs = [Run::default(); 8];
        let (r, covered) = coalesce(&mut pkts, &mut runs);
        assert_eq!(covered, 5);
        let counts: Vec<usize> = runs[..r].iter().map(|r| r.count).collect();
        assert_eq!(counts, [2, 2, 1]);
        assert_eq!(runs[2].hdr, VnetHdr::default());
    }

    #[test]
    fn partial_checksums_are_completed() {
        let f = tcp4(9, &data(333), TCP_ACK);
        let mut partial = large(&f);
        complete_checksum(&mut partial, 34, 16).unwrap();
        assert_eq!(partial, f);
        assert_eq!(
            complete_checksum(&mut partial, 34, 1000),
            Err(OffloadError::Malformed)
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let hdr = VnetHdr {
            gso_type: VnetHdr::GSO_TCPV4,
            gso_size: 3,
            ..VnetHdr::default()
        };
        let base = tcp4(1, &data(50), TCP_ACK);
        for cut in 0..base.len() {
            let mut f = base[..cut].to_vec();
            let _ = segment(&f, &hdr, || Some(VecBuf::new()), drop);
            let _ = complete_checksum(&mut f, 34, 16);
            let mut one = vec![VecBuf::from_slice(&f).unwrap()];
            let _ = coalesce(&mut one, &mut [Run::default(); 1]);
        }
    }
}
