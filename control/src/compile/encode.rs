//! Deterministic encodings the compiler derives from ids: SIDs, gateway MACs, gateway addresses.
//!
//! Guarantees: [`encode_sid`] and [`decode_sid`] are inverse for every locator of /80 or shorter,
//! every [`SidFunction`] and every network id ≥ 1; two different (function, network) pairs under
//! one locator never give the same SID. [`gateway_mac`] is the same on every node, so a pod that
//! moves keeps seeing the same gateway MAC.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use lace_shared::types::{MacAddr, NetworkId, Sid, SidBehavior};

/// Bits of a SID after the locator: a 16-bit behaviour code, then the 32-bit network id.
pub const FUNCTION_BITS: u8 = 48;

/// The longest locator a SID can be built under (`128 − FUNCTION_BITS`).
pub const MAX_LOCATOR_LEN: u8 = 128 - FUNCTION_BITS;

/// The SRv6 behaviours lace gives a (node, network) pair, with their function codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SidFunction {
    /// End.DT46 (l3): code `0xe046`.
    EndDt46,
    /// End.DT2U (l2 unicast): code `0xe020`.
    EndDt2u,
    /// End.DT2M (l2 flooding): code `0xe02f`.
    EndDt2m,
}

impl SidFunction {
    /// The 16-bit code written right after the locator.
    pub const fn code(self) -> u16 {
        match self {
            SidFunction::EndDt46 => 0xe046,
            SidFunction::EndDt2u => 0xe020,
            SidFunction::EndDt2m => 0xe02f,
        }
    }

    /// Back from [`SidFunction::code`]; None for an unknown code.
    pub const fn from_code(code: u16) -> Option<SidFunction> {
        match code {
            0xe046 => Some(SidFunction::EndDt46),
            0xe020 => Some(SidFunction::EndDt2u),
            0xe02f => Some(SidFunction::EndDt2m),
            _ => None,
        }
    }

    /// The local-SID table behaviour for network `net`.
    pub const fn behavior(self, net: NetworkId) -> SidBehavior {
        match self {
            SidFunction::EndDt46 => SidBehavior::EndDt46(net),
            SidFunction::EndDt2u => SidBehavior::EndDt2u(net),
            SidFunction::EndDt2m => SidBehavior::EndDt2m(net),
        }
    }
}

/// Why a SID cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SidError {
    /// The locator leaves too few bits for the function.
    #[error(
        "locator {locator}: a /{len} locator leaves {left} bits, the SID function needs \
         {FUNCTION_BITS}; give nodes locators of /{MAX_LOCATOR_LEN} or shorter (e.g. a /64 or /48)",
        len = locator.prefix_len(),
        left = 128 - u32::from(locator.prefix_len())
    )]
    LocatorTooLong {
        /// The offending locator.
        locator: Ipv6Net,
    },
    /// Network id 0 is reserved.
    #[error("network id 0 is reserved: a SID needs a network status.id of 1 or more")]
    ZeroNetwork,
}

/// The SID of `function` for network `net` under `locator`:
/// `locator | code << (80 − len) + 32 | id << (80 − len)`. A /48 locator `fc00:0:1::/48`
/// gives `fc00:0:1:e046:0:7::` for End.DT46 of network 7; a /64 `fc00:0:0:1::/64` gives
/// `fc00:0:0:1:e046:0:7:0`. Host bits of `locator` are ignored.
pub fn encode_sid(
    locator: Ipv6Net,
    function: SidFunction,
    net: NetworkId,
) -> Result<Sid, SidError> {
    if locator.prefix_len() > MAX_LOCATOR_LEN {
        return Err(SidError::LocatorTooLong { locator });
    }
    if net.0 == 0 {
        return Err(SidError::ZeroNetwork);
    }
    let shift = u32::from(MAX_LOCATOR_LEN - locator.prefix_len());
    let func = (u128::from(function.code()) << 32) | u128::from(net.0);
    let base = u128::from(locator.network());
    Ok(Sid(Ipv6Addr::from(base | (func << shift))))
}

/// Back from [`encode_sid`]: the function and network of `sid` under `locator`; None when
/// `sid` is outside the locator, has bits set after the function, an unknown code or id 0.
pub fn decode_sid(locator: Ipv6Net, sid: Sid) -> Option<(SidFunction, NetworkId)> {
    if locator.prefix_len() > MAX_LOCATOR_LEN || !locator.contains(&sid.0) {
        return None;
    }
    let shift = u32::from(MAX_LOCATOR_LEN - locator.prefix_len());
    let v = u128::from(sid.0);
    if v & ((1u128 << shift) - 1) != 0 {
        return None;
    }
    let func = (v >> shift) & ((1u128 << FUNCTION_BITS) - 1);
    let function = SidFunction::from_code((func >> 32) as u16)?;
    let id = (func & 0xffff_ffff) as u32;
    (id != 0).then_some((function, NetworkId(id)))
}

/// The gateway MAC of network `net`, identical on every node: IPAM's
/// ([`crate::ipam::gateway_mac`], `06:00:` + the 32-bit id), which lives outside the `02:`
/// space IPAM draws endpoint MACs from, so a pod can never share its gateway's MAC.
pub fn gateway_mac(net: NetworkId) -> MacAddr {
    crate::ipam::gateway_mac(net)
}

/// The gateway of an IPv4 block or prefix: its first host address (`.1` of a /24); the
/// network address itself for a /31 or /32, which have no separate host range.
pub fn gateway4(block: Ipv4Net) -> Ipv4Addr {
    let n = block.network();
    if block.prefix_len() >= 31 {
        n
    } else {
        Ipv4Addr::from(u32::from(n) + 1)
    }
}

/// The gateway of an IPv6 block or prefix: its first address after the subnet-router anycast
/// address (`::1`); the prefix address itself for a /127 or /128.
pub fn gateway6(block: Ipv6Net) -> Ipv6Addr {
    let n = block.network();
    if block.prefix_len() >= 127 {
        n
    } else {
        Ipv6Addr::from(u128::from(n) + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sid_layout_examples() {
        let l48: Ipv6Net = "fc00:0:1::/48".parse().unwrap();
        let s = encode_sid(l48, SidFunction::EndDt46, NetworkId(7)).unwrap();
        assert_eq!(s.0, "fc00:0:1:e046:0:7::".parse::<Ipv6Addr>().unwrap());
        let l64: Ipv6Net = "fc00:0:0:1::/64".parse().unwrap();
        let s = encode_sid(l64, SidFunction::EndDt46, NetworkId(0x1_0002)).unwrap();
        assert_eq!(s.0, "fc00:0:0:1:e046:1:2:0".parse::<Ipv6Addr>().unwrap());
        let l80: Ipv6Net = "fc00::/80".parse().unwrap();
        let s = encode_sid(l80, SidFunction::EndDt2m, NetworkId(u32::MAX)).unwrap();
        assert_eq!(s.0, "fc00::e02f:ffff:ffff".parse::<Ipv6Addr>().unwrap());
        let l81: Ipv6Net = "fc00::/81".parse().unwrap();
        let e = encode_sid(l81, SidFunction::EndDt46, NetworkId(1)).unwrap_err();
        assert!(e.to_string().contains("/80 or shorter"), "{e}");
        assert_eq!(
            encode_sid(l48, SidFunction::EndDt46, NetworkId(0)),
            Err(SidError::ZeroNetwork)
        );
    }

    #[test]
    fn decode_rejects_foreign_sids() {
        let l48: Ipv6Net = "fc00:0:1::/48".parse().unwrap();
        for bad in [
            "fc00:0:2:e046:0:7::",  // other locator
            "fc00:0:1:e046:0:7::1", // bits after the function
            "fc00:0:1:e099:0:7::",  // unknown code
            "fc00:0:1:e046::",      // network 0
        ] {
            assert_eq!(decode_sid(l48, Sid(bad.parse().unwrap())), None, "{bad}");
        }
    }

    #[test]
    fn gateways_and_macs() {
        assert_eq!(
            gateway4("10.40.3.0/24".parse().unwrap()),
            "10.40.3.1".parse::<Ipv4Addr>().unwrap()
        );
        assert_eq!(
            gateway4("10.40.3.4/32".parse().unwrap()),
            "10.40.3.4".parse::<Ipv4Addr>().unwrap()
        );
        assert_eq!(
            gateway6("fd00:40:0:3::/64".parse().unwrap()),
            "fd00:40:0:3::1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            gateway_mac(NetworkId(0x0102_0304)).to_string(),
            "06:00:01:02:03:04"
        );
    }

    proptest! {
        #[test]
        fn sid_round_trip(
            loc in any::<u128>(),
            len in 0u8..=MAX_LOCATOR_LEN,
            f in prop_oneof![
                Just(SidFunction::EndDt46),
                Just(SidFunction::EndDt2u),
                Just(SidFunction::EndDt2m)
            ],
            id in 1u32..,
            id2 in 1u32..,
        ) {
            let locator = Ipv6Net::new(Ipv6Addr::from(loc), len).unwrap().trunc();
            let sid = encode_sid(locator, f, NetworkId(id)).unwrap();
            prop_assert!(locator.contains(&sid.0));
            prop_assert_eq!(decode_sid(locator, sid), Some((f, NetworkId(id))));
            if id2 != id {
                prop_assert_ne!(encode_sid(locator, f, NetworkId(id2)).unwrap(), sid);
            }
            for g in [SidFunction::EndDt46, SidFunction::EndDt2u, SidFunction::EndDt2m] {
                if g != f {
                    prop_assert_ne!(encode_sid(locator, g, NetworkId(id)).unwrap(), sid);
                }
            }
        }
    }
}
