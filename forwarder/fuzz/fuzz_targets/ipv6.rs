//! IPv6: any bytes through `Packet::new_checked`, every getter, `Repr::parse`; a parsed `Repr`
//! emits a header that parses back to the same `Repr`.
#![no_main]

use std::hint::black_box;

use lace_forwarder::wire::ipv6::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    black_box((
        packet.version(),
        packet.traffic_class(),
        packet.flow_label(),
    ));
    black_box((
        packet.payload_len(),
        packet.next_header(),
        packet.hop_limit(),
    ));
    black_box((packet.src_addr(), packet.dst_addr(), packet.payload()));
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };

    let mut buf = vec![0u8; repr.buffer_len() + repr.payload_len];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])), Ok(repr));
});
