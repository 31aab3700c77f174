//! IPv4: any bytes through `Packet::new_checked`, every getter, `Repr::parse`, and TTL
//! decrement (whose incremental checksum must equal a full recomputation); a parsed `Repr`
//! emits a header that parses back to the same `Repr`.
#![no_main]

use std::hint::black_box;

use lace_forwarder::wire::ipv4::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    black_box((
        packet.version(),
        packet.header_len(),
        packet.dscp(),
        packet.ecn(),
    ));
    black_box((
        packet.total_len(),
        packet.ident(),
        packet.dont_frag(),
        packet.more_frags(),
    ));
    black_box((
        packet.frag_offset(),
        packet.is_fragment(),
        packet.ttl(),
        packet.protocol(),
    ));
    black_box((packet.checksum(), packet.src_addr(), packet.dst_addr()));
    black_box((packet.verify_checksum(), packet.options(), packet.payload()));
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };

    let mut forwarded = data.to_vec();
    let mut view = Packet::new_unchecked(&mut forwarded[..]);
    if let Some(ttl) = view.decrement_ttl() {
        assert_eq!(ttl, repr.ttl - 1);
        assert!(
            view.verify_checksum(),
            "incremental checksum update broke the header"
        );
    }

    let mut buf = vec![0u8; repr.buffer_len() + repr.payload_len];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])), Ok(repr));
});
