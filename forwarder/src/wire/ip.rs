//! IP protocol numbers, shared by the IPv4 Protocol field and the IPv6 Next Header field.
//!
//! Values from the IANA "Assigned Internet Protocol Numbers" registry (RFC 5237); 143
//! (Ethernet) is RFC 8986's payload type for SRv6 L2 encapsulation.

wire_enum! {
    /// An IPv4 Protocol / IPv6 Next Header value.
    pub enum Protocol(u8) {
        /// IPv6 Hop-by-Hop Options (RFC 8200 §4.3).
        HopByHop = 0,
        /// ICMP for IPv4 (RFC 792).
        Icmp = 1,
        /// IPv4 encapsulated in IP (RFC 2003; SRv6 End.DT4/DT46 payload).
        Ipv4 = 4,
        /// TCP (RFC 9293).
        Tcp = 6,
        /// UDP (RFC 768).
        Udp = 17,
        /// IPv6 encapsulated in IP (RFC 2473; SRv6 End.DT6/DT46 payload).
        Ipv6 = 41,
        /// IPv6 Routing header (RFC 8200 §4.4), e.g. the SRH.
        Ipv6Route = 43,
        /// IPv6 Fragment header (RFC 8200 §4.5).
        Ipv6Frag = 44,
        /// Encapsulating Security Payload (RFC 4303).
        Esp = 50,
        /// Authentication Header (RFC 4302).
        Ah = 51,
        /// ICMP for IPv6 (RFC 4443).
        Icmpv6 = 58,
        /// IPv6 No Next Header (RFC 8200 §4.7).
        Ipv6NoNxt = 59,
        /// IPv6 Destination Options (RFC 8200 §4.6).
        Ipv6Opts = 60,
        /// SCTP (RFC 9260): ports at the same offsets as UDP and TCP.
        Sctp = 132,
        /// Ethernet frame (RFC 8986 §8.1: SRv6 L2 encapsulation).
        Ethernet = 143,
    }
}

impl Protocol {
    /// Whether this is an IPv6 extension header whose length follows the generic
    /// `Hdr Ext Len` rule ((n + 1) × 8 bytes) or the Fragment header (8 bytes).
    pub fn is_ipv6_extension(self) -> bool {
        matches!(
            self,
            Protocol::HopByHop | Protocol::Ipv6Route | Protocol::Ipv6Frag | Protocol::Ipv6Opts
        )
    }

    /// Whether the upper-layer header starts with a 16-bit source and destination port.
    #[inline(always)]
    pub fn has_ports(self) -> bool {
        matches!(self, Protocol::Tcp | Protocol::Udp | Protocol::Sctp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_value() {
        for raw in 0..=u8::MAX {
            assert_eq!(u8::from(Protocol::from(raw)), raw);
        }
        assert_eq!(Protocol::from(43), Protocol::Ipv6Route);
        assert_eq!(Protocol::from(200), Protocol::Unknown(200));
    }

    #[test]
    fn classifies() {
        assert!(Protocol::Udp.has_ports());
        assert!(!Protocol::Icmp.has_ports());
        assert!(Protocol::Ipv6Route.is_ipv6_extension());
        assert!(!Protocol::Icmpv6.is_ipv6_extension());
    }
}
