//! Software offloads: any frame and any virtio-net header through `segment` (every segment it
//! produces has correct checksums and fits), the large segment the header describes (its
//! header back, its pieces' length, its cut: every piece parses and is no longer than said),
//! the frame as arrived whole on a large-frame link (taken back only when a sender would have
//! sent it whole; its estimated pieces, and those refitted to a tighter limit, fit), the
//! header lengths a NIC's tunnel TSO gets (they add up to the piece length's headers),
//! `complete_checksum` and `coalesce` (never panics; a coalesced run's first packet still
//! parses).
#![no_main]

use lace_forwarder::offload::{self, Gso, Layout, Run, VnetHdr};
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
    if let Some(gso) = Gso::of(&hdr).filter(|g| g.size >= 64) {
        let _ = gso.vnet_hdr(frame);
        let longest = gso.piece_len(frame);
        let mut pieces: Vec<VecBuf> = Vec::new();
        if gso.cut(frame, || Some(VecBuf::new()), |b| pieces.push(b)).is_ok() {
            let longest = longest.expect("a frame that was cut has a piece length");
            for p in &pieces {
                assert!(Layout::of(p.data()).is_ok(), "a piece parses");
                assert!(p.len() <= longest, "a piece is no longer than said");
            }
        }
        if let Some(t) = gso.tso_headers(frame) {
            let head = usize::from(t.outer_l2 + t.outer_l3 + t.l2 + t.l3 + t.l4);
            let lay = Layout::of(frame).expect("a segment a NIC cuts parses");
            assert_eq!(head, lay.payload, "the NIC's headers are the segment's");
            assert!(t.l2 < 128 && t.l3 < 512 && t.l4 < 256, "each fits its mbuf field");
        }
    }
    // The link's frame limit and a tighter one, from the header's bytes.
    let (max_frame, tighter) = (usize::from(hdr.csum_start), usize::from(hdr.csum_offset));
    if let Ok(gso) = Gso::of_long_frame(frame, max_frame) {
        assert!(gso.crosses_whole(frame, max_frame), "taken back as sent");
        assert!(gso.piece_len(frame).is_ok_and(|l| l <= max_frame), "pieces fit the link");
        if let Some(finer) = gso.refit(frame, tighter) {
            assert!(finer.size <= gso.size && finer.piece_len(frame).is_ok_and(|l| l <= tighter));
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
