//! ICMPv6 and NDP: the first 32 bytes are the IPv6 source and destination (the checksum
//! covers them), the rest the message: through `Packet::new_checked`, every getter (target,
//! options), `Repr::parse`; a parsed `Repr` emits a message that parses back to the same `Repr`.
#![no_main]

use std::hint::black_box;
use std::net::Ipv6Addr;

use lace_forwarder::wire::icmpv6::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((addrs, message)) = data.split_at_checked(32) else {
        return;
    };
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(&addrs[..16]).unwrap());
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&addrs[16..]).unwrap());

    let Ok(packet) = Packet::new_checked(message) else {
        return;
    };
    black_box((packet.msg_type(), packet.msg_code(), packet.checksum()));
    black_box((
        packet.echo_ident(),
        packet.echo_seq_no(),
        packet.pkt_too_big_mtu(),
    ));
    black_box((
        packet.param_problem_ptr(),
        packet.neighbor_flags(),
        packet.target_addr(),
    ));
    for option in packet.ndisc_options().flatten() {
        black_box(option.ethernet_addr());
    }
    black_box((packet.data(), packet.verify_checksum(&src, &dst)));
    let Ok(repr) = Repr::parse(&src, &dst, &packet) else {
        return;
    };

    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&src, &dst, &mut Packet::new_unchecked(&mut buf[..]));
    assert_eq!(
        Repr::parse(&src, &dst, &Packet::new_unchecked(&buf[..])),
        Ok(repr)
    );
});
