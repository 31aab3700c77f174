//! Zero-copy packet views: read and write protocol headers in place, in the style of smoltcp's
//! `wire` module.
//!
//! Every protocol has two layers:
//!
//! - a **view**, `Packet<B>` (`Frame<B>` for Ethernet), over any buffer `B: AsRef<[u8]>`. Getters
//!   read fields straight from the bytes; with `B: AsMut<[u8]>` setters write them. Build one
//!   with `new_checked` for received data, or `new_unchecked` when you will call `check_len`
//!   yourself or are filling a buffer you sized.
//! - a **`Repr`**, the header's meaning as plain values, with `parse` (validates, including
//!   checksums) and `emit` (writes a complete, valid header into a view).
//!
//! What is guaranteed:
//!
//! - **No panics on received data.** Once `check_len` (or `new_checked`) has succeeded, no getter
//!   of that view panics, whatever the bytes are. Getters that read a part only some messages
//!   have return `Option`. Setters and `emit` write into buffers the caller sized; they panic if
//!   the buffer is shorter than the view or `Repr::buffer_len` says.
//! - **No allocation, no `unsafe`, no I/O** anywhere in this module (`core` only): it runs on the
//!   fast path.
//! - **`Repr::parse` accepts only what `emit` can reproduce**: for every buffer that parses, emitting
//!   the `Repr` and parsing the result gives the same `Repr` (the fuzz targets in
//!   `forwarder/fuzz` check exactly this).
//!
//! What is not: views do not validate fields they do not need for their own bounds (a view can
//! read a packet with a bad checksum; `Repr::parse` refuses it). `Unknown(raw)` protocol numbers
//! round-trip through `u8`/`u16`, but `Unknown(x)` for an `x` that has a name converts back to
//! the named variant.
//!
//! Modules: [`ethernet`] (incl. one 802.1Q tag), [`arp`], [`rarp`], [`ipv4`], [`ipv6`], [`srh`] (SRv6
//! Segment Routing Header), [`icmpv4`], [`icmpv6`] (incl. NDP neighbor messages), [`udp`] and
//! [`tcp`] (ports and checksums only), [`checksum`] (RFC 1071 sums, RFC 1624 updates), [`flow`]
//! (5-tuple and flow-label hash), [`ip`] (protocol numbers).

#![forbid(unsafe_code)]

#[macro_use]
mod macros;

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod flow;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod rarp;
pub mod srh;
pub mod tcp;
pub mod udp;

pub use core::net::{Ipv4Addr, Ipv6Addr};
pub use ethernet::Address as EthernetAddress;
pub use ip::Protocol as IpProtocol;

/// Why a buffer is not a valid packet of the protocol a view or `Repr` reads.
///
/// Each variant is a distinct drop reason on the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the fixed header, than a length field of the header says the
    /// header or packet is, or than the message type needs.
    #[error("packet truncated: the buffer is shorter than its headers or length fields say")]
    Truncated,
    /// The IP version nibble is not the one the view reads (4 for IPv4, 6 for IPv6).
    #[error("wrong IP version")]
    BadVersion,
    /// A length field is below its minimum or disagrees with another field: IPv4 IHL < 5 or
    /// total length < header length, TCP data offset < 5, UDP length < 8, an SRH whose Last
    /// Entry does not fit its Hdr Ext Len, a TLV or NDP option overrunning its area, or an NDP
    /// option of length 0.
    #[error("inconsistent length field")]
    BadLength,
    /// A checksum does not verify (IPv4 header, ICMPv4, ICMPv6).
    #[error("bad checksum")]
    BadChecksum,
    /// SRH Segments Left is greater than Last Entry + 1 (RFC 8754 §4.3.1.1).
    #[error("SRH segments left beyond the segment list")]
    BadSegmentsLeft,
    /// A well-formed packet of a kind this module does not represent: ARP for other than
    /// Ethernet/IPv4 or with another operation, a Routing header of a type other than 4, an ICMP
    /// message type without a `Repr`.
    #[error("unsupported protocol, message type or operation")]
    Unsupported,
    /// A field holds a value the protocol forbids: a multicast or all-zero Ethernet source, an
    /// NDP message with a non-zero code, a multicast target, a link-layer address option that is
    /// not an Ethernet address, a source link-layer address with an unspecified IPv6 source, or
    /// the Solicited flag on a multicast advertisement (RFC 4861 §7.1).
    #[error("field value not allowed by the protocol")]
    Malformed,
}

/// Result of parsing wire data.
pub type Result<T> = core::result::Result<T, Error>;

/// Byte ranges of header fields, as each protocol's private `field` module spells them.
mod field {
    /// A fixed-size field.
    pub(crate) type Field = core::ops::Range<usize>;
    /// Everything from an offset to the end of the header or packet.
    pub(crate) type Rest = core::ops::RangeFrom<usize>;
}

/// Reads a big-endian `u16` at `at`. Callers establish the bounds (`check_len`).
#[inline(always)]
fn read_u16(data: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([data[at], data[at + 1]])
}

/// Reads a big-endian `u32` at `at`. Callers establish the bounds (`check_len`).
#[inline(always)]
fn read_u32(data: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
}

/// Writes a big-endian `u16` at `at`.
#[inline(always)]
fn write_u16(data: &mut [u8], at: usize, value: u16) {
    data[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// Writes a big-endian `u32` at `at`.
#[inline(always)]
fn write_u32(data: &mut [u8], at: usize, value: u32) {
    data[at..at + 4].copy_from_slice(&value.to_be_bytes());
}

/// Reads an IPv4 address at `at`. Callers establish the bounds.
#[inline(always)]
fn read_ipv4(data: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(data[at], data[at + 1], data[at + 2], data[at + 3])
}

/// Reads an IPv6 address at `at`. Callers establish the bounds.
#[inline(always)]
fn read_ipv6(data: &[u8], at: usize) -> Ipv6Addr {
    let mut octets = [0u8; 16];
    octets.copy_from_slice(&data[at..at + 16]);
    Ipv6Addr::from(octets)
}

#[cfg(test)]
mod test_util {
    /// Every proper prefix of `bytes`, with its length.
    pub(crate) fn prefixes(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
        (0..bytes.len()).map(move |n| (n, &bytes[..n]))
    }
}
