//! What the forwarder learns on l2 networks and reports to control (ADR 0019): the records of
//! the feedback channel, one ring per worker in the status region ([`crate::status`]).
//!
//! A record says that a MAC (and, for ARP and NDP announcements, an address) was seen on a pod
//! port: announced by the endpoint itself (gratuitous ARP, unsolicited neighbor advertisement,
//! RARP as QEMU sends it after a migration) or, for a MAC learned earlier on that port, still
//! sending ([`LearnKind::Seen`], throttled by the forwarder). The forwarder only reports; what
//! a report means — a new entry, a move with a higher sequence number, a refresh — is control's
//! decision, and the tables stay read-only to the forwarder.
//!
//! A record is eight 64-bit words, written and read with atomic accesses only (the ring is
//! shared memory that one process writes while another reads):
//!
//! ```text
//!  word 0  stamp: record number + 1, 0 while the slot is being written
//!  word 1  port (bits 0-31) | kind (32-39) | family 0, 4 or 6 (40-47)
//!  word 2  MAC (bits 0-47)
//!  word 3  address, high 64 bits (IPv6; IPv4 as IPv4-mapped IPv6)
//!  word 4  address, low 64 bits
//!  word 5  endpoint id of the port's binding
//!  word 6  network id (bits 0-31)
//!  word 7  the forwarder's clock (ns) when it saw the frame
//! ```

use std::net::{IpAddr, Ipv6Addr};

use crate::types::{MacAddr, NetworkId, PortId};

/// Why the forwarder reports a MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LearnKind {
    /// A gratuitous ARP (request or reply whose sender and target address are the same,
    /// not 0.0.0.0): the sender announces its address and MAC.
    GratuitousArp,
    /// An unsolicited neighbor advertisement (Solicited clear, Override set, unicast source):
    /// the target address at the advertised (or the frame's source) MAC.
    UnsolicitedNa,
    /// A reverse ARP request (EtherType 0x8035) as QEMU sends to announce a VM after a
    /// migration: the MAC only.
    Rarp,
    /// A MAC learned on this port is still sending (a refresh, at most every aging time / 4).
    Seen,
}

impl LearnKind {
    /// Every kind, in code order.
    pub const ALL: [LearnKind; 4] = [
        LearnKind::GratuitousArp,
        LearnKind::UnsolicitedNa,
        LearnKind::Rarp,
        LearnKind::Seen,
    ];

    fn code(self) -> u64 {
        match self {
            LearnKind::GratuitousArp => 1,
            LearnKind::UnsolicitedNa => 2,
            LearnKind::Rarp => 3,
            LearnKind::Seen => 4,
        }
    }

    fn from_code(c: u64) -> Option<LearnKind> {
        Some(match c {
            1 => LearnKind::GratuitousArp,
            2 => LearnKind::UnsolicitedNa,
            3 => LearnKind::Rarp,
            4 => LearnKind::Seen,
            _ => return None,
        })
    }

    /// Whether the endpoint announced itself (everything but [`LearnKind::Seen`]): an
    /// announcement may move a MAC or promote a pending location, a refresh never does.
    pub fn is_announcement(self) -> bool {
        self != LearnKind::Seen
    }

    /// Stable name (logs, `lace-control status`).
    pub const fn name(self) -> &'static str {
        match self {
            LearnKind::GratuitousArp => "garp",
            LearnKind::UnsolicitedNa => "unsolicited-na",
            LearnKind::Rarp => "rarp",
            LearnKind::Seen => "seen",
        }
    }
}

impl std::fmt::Display for LearnKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One report: a MAC (and maybe an address) seen on a pod port of an l2 network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LearnEvent {
    /// The pod port it came from.
    pub port: PortId,
    /// The endpoint id of the port's binding when the frame arrived (control checks it
    /// against the port's current binding: a report about a port since rebound is stale).
    pub endpoint: u64,
    /// The port's network.
    pub network: NetworkId,
    /// Why it is reported.
    pub kind: LearnKind,
    /// The MAC.
    pub mac: MacAddr,
    /// The announced address (gratuitous ARP, unsolicited NA); `None` for RARP and refreshes.
    pub ip: Option<IpAddr>,
    /// The forwarder's monotonic clock when the frame arrived, in nanoseconds.
    pub at_ns: u64,
}

/// Words of one record.
pub const RECORD_WORDS: usize = 8;

impl LearnEvent {
    /// The record's payload (words 1 to 7; word 0, the stamp, is the ring's).
    pub fn encode(&self) -> [u64; RECORD_WORDS - 1] {
        let (family, ip) = match self.ip {
            None => (0u64, 0u128),
            Some(IpAddr::V4(a)) => (4, u128::from(a.to_ipv6_mapped())),
            Some(IpAddr::V6(a)) => (6, u128::from(a)),
        };
        [
            u64::from(self.port.0) | self.kind.code() << 32 | family << 40,
            self.mac.to_u64(),
            (ip >> 64) as u64,
            ip as u64,
            self.endpoint,
            u64::from(self.network.0),
            self.at_ns,
        ]
    }

    /// Decodes a payload; `None` for an unknown kind or family (a record of a newer forwarder,
    /// or garbage): such a record is skipped and counted as lost, never misread.
    pub fn decode(w: &[u64; RECORD_WORDS - 1]) -> Option<LearnEvent> {
        let kind = LearnKind::from_code((w[0] >> 32) & 0xff)?;
        let ip = (u128::from(w[2]) << 64) | u128::from(w[3]);
        let ip = match (w[0] >> 40) & 0xff {
            0 => None,
            4 => Some(IpAddr::V4(Ipv6Addr::from(ip).to_ipv4_mapped()?)),
            6 => Some(IpAddr::V6(Ipv6Addr::from(ip))),
            _ => return None,
        };
        if w[1] >> 48 != 0 || w[5] >> 32 != 0 {
            return None;
        }
        Some(LearnEvent {
            port: PortId(w[0] as u32),
            endpoint: w[4],
            network: NetworkId(w[5] as u32),
            kind,
            mac: MacAddr::from_u64(w[1]),
            ip,
            at_ns: w[6],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let base = LearnEvent {
            port: PortId(4095),
            endpoint: u64::MAX - 3,
            network: NetworkId(9),
            kind: LearnKind::GratuitousArp,
            mac: MacAddr([0x02, 0xaa, 0, 0, 0, 0x10]),
            ip: Some("10.50.0.200".parse().unwrap()),
            at_ns: 123_456_789,
        };
        for (kind, ip) in [
            (
                LearnKind::GratuitousArp,
                Some("10.50.0.200".parse().unwrap()),
            ),
            (LearnKind::UnsolicitedNa, Some("fd50::c8".parse().unwrap())),
            (LearnKind::Rarp, None),
            (LearnKind::Seen, None),
        ] {
            let e = LearnEvent { kind, ip, ..base };
            assert_eq!(LearnEvent::decode(&e.encode()), Some(e));
        }
        let mut bad = base.encode();
        bad[0] |= 9 << 32;
        assert_eq!(LearnEvent::decode(&bad), None, "unknown kind");
        let mut bad = base.encode();
        bad[0] = (bad[0] & !(0xff << 40)) | 5 << 40;
        assert_eq!(LearnEvent::decode(&bad), None, "unknown family");
        let mut bad = base.encode();
        bad[2] = 1 << 40;
        assert_eq!(
            LearnEvent::decode(&bad),
            None,
            "family 4 without a mapped address"
        );
        assert!(LearnKind::ALL
            .iter()
            .all(|k| k.is_announcement() == (*k != LearnKind::Seen)));
    }
}
