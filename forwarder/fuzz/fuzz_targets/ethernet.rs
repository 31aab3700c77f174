//! Ethernet: any bytes through `Frame::new_checked`, every getter, `Repr::parse`; a parsed
//! `Repr` emits a header that parses back to the same `Repr`.
#![no_main]

use std::hint::black_box;

use lace_forwarder::wire::ethernet::{Frame, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = Frame::new_checked(data) else {
        return;
    };
    black_box((
        frame.dst_addr(),
        frame.src_addr(),
        frame.ethertype(),
        frame.vlan_tag(),
    ));
    black_box((
        frame.payload_ethertype(),
        frame.header_len(),
        frame.payload(),
    ));
    let Ok(repr) = Repr::parse(&frame) else {
        return;
    };

    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
    let again = Repr::parse(&Frame::new_checked(&buf[..]).expect("emitted frame checks"));
    assert_eq!(again, Ok(repr));
});
