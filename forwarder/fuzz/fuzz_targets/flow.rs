//! Flow: any bytes through `FiveTuple::from_ip`; an extracted tuple hashes deterministically to
//! a 20-bit non-zero label, and a packet built from the tuple extracts back to the same tuple.
#![no_main]

use std::net::IpAddr;

use lace_forwarder::wire::flow::FiveTuple;
use lace_forwarder::wire::ip::Protocol;
use lace_forwarder::wire::{icmpv4, icmpv6, ipv4, ipv6};
use libfuzzer_sys::fuzz_target;

/// An upper-layer header with the tuple's ports: ports for TCP/UDP/SCTP, an echo request with
/// the identifier for ICMP/ICMPv6 (ports (0, 0) then mean identifier 0), zeros otherwise.
fn l4(tuple: &FiveTuple) -> [u8; 8] {
    let mut l4 = [0u8; 8];
    if tuple.protocol.has_ports() {
        l4[..2].copy_from_slice(&tuple.src_port.to_be_bytes());
        l4[2..4].copy_from_slice(&tuple.dst_port.to_be_bytes());
    } else if matches!(tuple.protocol, Protocol::Icmp | Protocol::Icmpv6) {
        assert_eq!(tuple.src_port, tuple.dst_port);
        l4[0] = match tuple.protocol {
            Protocol::Icmp => icmpv4::Message::EchoRequest.into(),
            _ => icmpv6::Message::EchoRequest.into(),
        };
        l4[4..6].copy_from_slice(&tuple.src_port.to_be_bytes());
    } else {
        assert_eq!((tuple.src_port, tuple.dst_port), (0, 0));
    }
    l4
}

fuzz_target!(|data: &[u8]| {
    let Ok(tuple) = FiveTuple::from_ip(data) else {
        return;
    };
    assert_eq!(tuple.hash(7), tuple.hash(7));
    let label = tuple.flow_label(7);
    assert!(label != 0 && label <= 0xf_ffff);

    let rebuilt = match (tuple.src_addr, tuple.dst_addr) {
        (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => {
            let mut buf = [0u8; 28];
            let repr = ipv4::Repr {
                src_addr,
                dst_addr,
                protocol: tuple.protocol,
                payload_len: 8,
                ttl: 64,
                dscp: 0,
                ecn: 0,
                ident: 0,
                dont_frag: true,
                more_frags: false,
                frag_offset: 0,
            };
            repr.emit(&mut ipv4::Packet::new_unchecked(&mut buf[..]));
            buf[20..].copy_from_slice(&l4(&tuple));
            FiveTuple::from_ip(&buf)
        }
        (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) => {
            // A chain cut at MAX_EXTENSION_HEADERS or a fragment is not rebuilt.
            if tuple.protocol.is_ipv6_extension() || tuple.protocol == Protocol::Ah {
                return;
            }
            let mut buf = [0u8; 48];
            let repr = ipv6::Repr {
                src_addr,
                dst_addr,
                next_header: tuple.protocol,
                payload_len: 8,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            };
            repr.emit(&mut ipv6::Packet::new_unchecked(&mut buf[..]));
            buf[40..].copy_from_slice(&l4(&tuple));
            FiveTuple::from_ip(&buf)
        }
        _ => panic!("mixed address families in {tuple:?}"),
    };
    assert_eq!(rebuilt, Ok(tuple));
});
