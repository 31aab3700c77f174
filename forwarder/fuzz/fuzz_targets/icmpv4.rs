//! ICMPv4: any bytes through `Packet::new_checked`, every getter, `Repr::parse`; a parsed
//! `Repr` emits a message that parses back to the same `Repr`.
#![no_main]

use std::hint::black_box;

use lace_forwarder::wire::icmpv4::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    black_box((packet.msg_type(), packet.msg_code(), packet.checksum()));
    black_box((
        packet.echo_ident(),
        packet.echo_seq_no(),
        packet.next_hop_mtu(),
    ));
    black_box((packet.data(), packet.verify_checksum()));
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };

    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])), Ok(repr));
});
