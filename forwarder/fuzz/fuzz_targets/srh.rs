//! SRH: any bytes through `Packet::new_checked`, every getter (segments, TLVs), `Repr::parse`;
//! a parsed `Repr` emits a header that parses back to the same `Repr`.
#![no_main]

use std::hint::black_box;

use lace_forwarder::wire::srh::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    black_box((
        packet.next_header(),
        packet.hdr_ext_len(),
        packet.routing_type(),
    ));
    black_box((
        packet.segments_left(),
        packet.last_entry(),
        packet.flags(),
        packet.tag(),
    ));
    black_box((packet.next_segment(), packet.tlv_area(), packet.payload()));
    for i in 0..=packet.segment_count() {
        black_box(packet.segment(i));
    }
    black_box(packet.segments().iter().count());
    for tlv in packet.tlvs().flatten() {
        black_box(tlv.hmac());
    }
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };

    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])), Ok(repr));
});
