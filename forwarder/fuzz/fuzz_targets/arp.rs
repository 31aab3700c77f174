//! ARP: any bytes through `Packet::new_checked`, every getter, `Repr::parse`; a parsed `Repr`
//! emits a packet that parses back to the same `Repr`.
#![no_main]

use std::hint::black_box;

use lace_forwarder::wire::arp::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    black_box((
        packet.hardware_type(),
        packet.protocol_type(),
        packet.hardware_len(),
    ));
    black_box((
        packet.protocol_len(),
        packet.operation(),
        packet.sender_hardware_addr(),
    ));
    black_box((packet.sender_protocol_addr(), packet.target_hardware_addr()));
    black_box(packet.target_protocol_addr());
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };

    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])), Ok(repr));
});
