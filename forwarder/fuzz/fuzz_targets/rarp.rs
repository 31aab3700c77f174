//! RARP: any bytes through `rarp::Repr::parse` (over the ARP view); a parsed `Repr` emits a
//! packet that parses back to the same `Repr`, and only a reverse request for the sender's own
//! MAC announces it.
#![no_main]

use lace_forwarder::wire::arp::{Operation, Packet};
use lace_forwarder::wire::rarp::Repr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };
    assert!(matches!(
        repr.operation,
        Operation::RequestReverse | Operation::ReplyReverse
    ));
    if let Some(mac) = repr.announced() {
        assert_eq!(repr.operation, Operation::RequestReverse);
        assert_eq!(mac, repr.sender_hardware_addr);
        assert_eq!(mac, repr.target_hardware_addr);
    }
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])), Ok(repr));
});
