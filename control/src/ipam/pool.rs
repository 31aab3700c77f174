//! Addresses of one prefix (an l3 node block or an l2 subnet) handed out one by one.
//!
//! Which addresses of a prefix are never given to a pod (the seed: "the gateway is the first
//! address in the node's block" / "in the network's prefix"; read as the first *usable* one):
//!
//! | prefix | reserved | gateway | pod addresses |
//! |---|---|---|---|
//! | IPv4 /0–/30 | network address, broadcast | network + 1 | network + 2 … broadcast − 1 |
//! | IPv4 /31 (RFC 3021) | none | the first address | the second |
//! | IPv6 /0–/126 | subnet-router anycast (RFC 4291 §2.6.1) | network + 1 | network + 2 … last |
//! | IPv6 /127 (RFC 6164) | none | the first address | the second |
//! | /32, /128 | — | — | refused: no room for a gateway and a pod |

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::ranges::FreeRanges;

/// An address as an integer (IPv4 in the low 32 bits).
pub(crate) fn to_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// Back from [`to_u128`]; `v` must fit the family (IPv4: the low 32 bits).
pub(crate) fn from_u128(v: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(v))
    } else {
        // Truncation is intended: callers stay inside an IPv4 prefix.
        IpAddr::V4(Ipv4Addr::from(v as u32))
    }
}

/// Address width of the prefix's family: 32 or 128.
pub(crate) fn width(p: &IpNet) -> u8 {
    match p {
        IpNet::V4(_) => 32,
        IpNet::V6(_) => 128,
    }
}

/// The gateway and the pod-address range of a prefix (see the module table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixLayout {
    /// The prefix (host bits zero).
    pub prefix: IpNet,
    /// The gateway: never handed to a pod.
    pub gateway: IpAddr,
    /// The lowest pod address.
    pub first: IpAddr,
    /// The highest pod address.
    pub last: IpAddr,
}

impl PrefixLayout {
    /// The layout of `prefix` (host bits are cleared); None for a /32 or /128, which has no
    /// room for a gateway and a pod.
    pub fn new(prefix: IpNet) -> Option<PrefixLayout> {
        let prefix = prefix.trunc();
        let w = width(&prefix);
        let len = prefix.prefix_len();
        if len >= w {
            return None;
        }
        let v6 = w == 128;
        let net = to_u128(prefix.network());
        let hostmask = u128::MAX >> (128 - u32::from(w - len));
        let top = net + hostmask;
        let (gw, first, last) = if len == w - 1 {
            (net, top, top)
        } else if v6 {
            (net + 1, net + 2, top)
        } else {
            (net + 1, net + 2, top - 1)
        };
        Some(PrefixLayout {
            prefix,
            gateway: from_u128(gw, v6),
            first: from_u128(first, v6),
            last: from_u128(last, v6),
        })
    }

    /// How many pod addresses the prefix has.
    pub fn capacity(&self) -> u128 {
        // last ≥ first always; +1 saturates only for an IPv6 /0.
        (to_u128(self.last) - to_u128(self.first)).saturating_add(1)
    }

    /// Whether `a` is a pod address of this prefix.
    pub fn is_pod_address(&self, a: IpAddr) -> bool {
        a.is_ipv6() == self.first.is_ipv6()
            && (to_u128(self.first)..=to_u128(self.last)).contains(&to_u128(a))
    }
}

/// The gateway of an l3 node block or an l2 subnet (None for a /32 or /128).
pub fn gateway_of(prefix: IpNet) -> Option<IpAddr> {
    PrefixLayout::new(prefix).map(|l| l.gateway)
}

/// The free pod addresses of one prefix, lowest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AddressPool {
    pub(crate) layout: PrefixLayout,
    free: FreeRanges,
}

impl AddressPool {
    /// All pod addresses of `prefix` free; None for a /32 or /128.
    pub(crate) fn new(prefix: IpNet) -> Option<AddressPool> {
        let layout = PrefixLayout::new(prefix)?;
        let max = to_u128(layout.last) - to_u128(layout.first);
        Some(AddressPool {
            layout,
            free: FreeRanges::new(max),
        })
    }

    /// Takes the lowest free pod address.
    pub(crate) fn take_lowest(&mut self) -> Option<IpAddr> {
        let i = self.free.take_lowest()?;
        Some(from_u128(
            to_u128(self.layout.first) + i,
            self.layout.first.is_ipv6(),
        ))
    }

    /// Takes the lowest free pod address that is not in `skip` (claimed elsewhere).
    pub(crate) fn take_lowest_not_in(
        &mut self,
        skip: &std::collections::HashSet<IpAddr>,
    ) -> Option<IpAddr> {
        let first = to_u128(self.layout.first);
        let v6 = self.layout.first.is_ipv6();
        let mut from = 0;
        loop {
            let i = self.free.lowest_free_from(from)?;
            let a = from_u128(first + i, v6);
            if !skip.contains(&a) {
                self.free.take(i);
                return Some(a);
            }
            from = i.checked_add(1)?;
        }
    }

    /// Takes `a`; false if it is not a free pod address of this prefix.
    pub(crate) fn take(&mut self, a: IpAddr) -> bool {
        self.layout.is_pod_address(a) && self.free.take(to_u128(a) - to_u128(self.layout.first))
    }

    /// Returns `a`; false if it is not a taken pod address of this prefix.
    pub(crate) fn free(&mut self, a: IpAddr) -> bool {
        self.layout.is_pod_address(a) && self.free.free(to_u128(a) - to_u128(self.layout.first))
    }

    /// How many addresses are taken.
    pub(crate) fn taken(&self) -> u128 {
        self.free.taken()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(p: &str) -> Option<PrefixLayout> {
        PrefixLayout::new(p.parse().unwrap())
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_block_reserves_network_and_broadcast() {
        let l = layout("10.40.3.0/24").unwrap();
        assert_eq!(l.gateway, ip("10.40.3.1"));
        assert_eq!(l.first, ip("10.40.3.2"));
        assert_eq!(l.last, ip("10.40.3.254"));
        assert_eq!(l.capacity(), 253);
        assert!(!l.is_pod_address(ip("10.40.3.0")));
        assert!(!l.is_pod_address(ip("10.40.3.1")));
        assert!(!l.is_pod_address(ip("10.40.3.255")));
        assert!(!l.is_pod_address(ip("::a28:302")), "other family");
        let l = layout("10.40.3.4/30").unwrap();
        assert_eq!(
            (l.gateway, l.first, l.last),
            (ip("10.40.3.5"), ip("10.40.3.6"), ip("10.40.3.6"))
        );
    }

    #[test]
    fn point_to_point_prefixes_have_one_pod_address() {
        let l = layout("10.0.0.6/31").unwrap();
        assert_eq!(
            (l.gateway, l.first, l.last),
            (ip("10.0.0.6"), ip("10.0.0.7"), ip("10.0.0.7"))
        );
        let l = layout("fd00::/127").unwrap();
        assert_eq!(
            (l.gateway, l.first, l.last),
            (ip("fd00::"), ip("fd00::1"), ip("fd00::1"))
        );
        assert_eq!(l.capacity(), 1);
        assert!(layout("10.0.0.1/32").is_none());
        assert!(layout("fd00::1/128").is_none());
    }

    #[test]
    fn ipv6_block_skips_anycast_and_uses_the_last_address() {
        let l = layout("fd00:40:0:3::/64").unwrap();
        assert_eq!(l.gateway, ip("fd00:40:0:3::1"));
        assert_eq!(l.first, ip("fd00:40:0:3::2"));
        assert_eq!(l.last, ip("fd00:40:0:3:ffff:ffff:ffff:ffff"));
        assert_eq!(l.capacity(), (1u128 << 64) - 2);
        let l = layout("::/0").unwrap();
        assert_eq!(l.capacity(), u128::MAX - 1);
    }

    #[test]
    fn pool_hands_out_lowest_first_and_takes_back() {
        let mut p = AddressPool::new("10.0.0.0/29".parse().unwrap()).unwrap();
        let got: Vec<_> = std::iter::from_fn(|| p.take_lowest()).collect();
        assert_eq!(
            got,
            ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"].map(ip)
        );
        assert!(!p.free(ip("10.0.0.1")), "the gateway was never handed out");
        assert!(p.free(ip("10.0.0.4")));
        assert!(!p.free(ip("10.0.0.4")));
        assert_eq!(p.take_lowest(), Some(ip("10.0.0.4")));
        assert_eq!(p.taken(), 5);
    }

    #[test]
    fn claimed_addresses_are_skipped_and_stay_free() {
        let mut p = AddressPool::new("10.0.0.0/29".parse().unwrap()).unwrap();
        let skip = [ip("10.0.0.2"), ip("10.0.0.4")].into_iter().collect();
        assert_eq!(p.take_lowest_not_in(&skip), Some(ip("10.0.0.3")));
        assert_eq!(p.take_lowest_not_in(&skip), Some(ip("10.0.0.5")));
        assert_eq!(p.take_lowest_not_in(&skip), Some(ip("10.0.0.6")));
        assert_eq!(
            p.take_lowest_not_in(&skip),
            None,
            "only claimed ones are left"
        );
        assert_eq!(p.taken(), 3);
        assert_eq!(
            p.take_lowest(),
            Some(ip("10.0.0.2")),
            "a claim takes nothing"
        );
    }
}
