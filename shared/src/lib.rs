//! # lace-shared — the contract between lace-control and lace-forwarder
//!
//! Control (one writer) compiles a node's forwarding tables; the forwarder (many reader cores,
//! another process) looks packets up in them. This crate is everything both sides must agree
//! on, and nothing else: no I/O beyond mapping memory (and the one metrics listener both
//! processes serve, [`metrics`]), no async runtime, no Kubernetes.
//!
//! What it promises:
//! - **Tables in shared memory** (`/dev/shm`, or hugetlbfs when mounted), created by the writer
//!   with mode 0600 and mapped read-only by readers. Layouts are `#[repr(C)]`, pointer-free
//!   (offsets, never addresses) and checked at attach by magic, ABI version and layout hash.
//! - **Atomic publication**: a batch of changes becomes visible to readers at once, by one
//!   release-store of the root offset. Readers never lock, block, allocate or make system calls
//!   to look up.
//! - **Safe reclamation**: memory a change replaced is reused only after every online reader has
//!   passed a quiescent point (QSBR). A reader that dies or goes offline never blocks it.
//! - **Restartability**: a writer re-attaches the existing tables and continues; a reader
//!   re-attaches and reads the current tables at once. A full region is an error, never a
//!   corruption.
//!
//! Module map: [`region`] (files, mapping, header, locks), [`mem`] (bounds-checked access by
//! offset), [`arena`] (the writer's allocator), [`qsbr`] (reader slots and grace periods),
//! [`fib`] (LPM), [`hash`] (exact-match tables), [`array`] (dense tables), [`types`] (ids and
//! table entries), [`policy`] (policy, service and stateful-path tables), [`tables`] (the
//! node's table set: writer and reader APIs), [`status`] (the forwarder's status region),
//! [`flow`] (the forwarder's flow table, a region of its own) and [`learn`] (the l2 learning
//! reports the status region carries to control).

#![cfg_attr(not(test), warn(missing_docs))]

pub mod arena;
pub mod array;
pub mod error;
pub mod fasthash;
pub mod fib;
pub mod flow;
pub mod hash;
pub mod learn;
pub mod mem;
pub mod metrics;
pub mod pod;
pub mod policy;
pub mod qsbr;
pub mod region;
pub mod status;
pub mod tables;
pub mod types;

pub use error::{Error, Result};

/// ABI version of the shared-memory layout. Bump on any change a layout hash would not catch.
/// 2: FDB records carry the next-hop index of a remote target's encapsulation, flood lists
/// hold local ports and next-hop indices.
/// 3: policy and service tables ([`policy`]): peer classes per network, policy sets, decisions,
/// port sets, services; ports carry a policy set, next hops route flags; port kind 3, the node's
/// host interface (`PortKind::Host`), which an older forwarder would read as an absent port.
/// network records carry l2 learning and the BUM limit; the status region has learn rings.
pub const ABI_VERSION: u32 = 3;

/// Hash of the layout of every type stored in shared memory. Computed at compile time from
/// sizes, alignments and field offsets, so two builds that disagree on a layout refuse to attach.
pub const LAYOUT_HASH: u64 = layout::HASH;

mod layout {
    use crate::region::RegionHeader;
    use std::mem::{align_of, offset_of, size_of};

    const fn fnv(mut h: u64, v: u64) -> u64 {
        let mut i = 0;
        while i < 8 {
            h ^= (v >> (i * 8)) & 0xff;
            h = h.wrapping_mul(0x100_0000_01b3);
            i += 1;
        }
        h
    }

    const fn fold(vals: &[usize]) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325;
        let mut i = 0;
        while i < vals.len() {
            h = fnv(h, vals[i] as u64);
            i += 1;
        }
        h
    }

    pub(super) const HASH: u64 = {
        use crate::array::ArrayHdr;
        use crate::hash::{mix64, HashHdr, HashTable};
        use crate::tables::RootRec;
        use crate::types::*;
        let mut h = fold(&[
            size_of::<RegionHeader>(),
            align_of::<RegionHeader>(),
            offset_of!(RegionHeader, root),
            offset_of!(RegionHeader, epoch),
            offset_of!(RegionHeader, params),
            size_of::<RootRec>(),
            size_of::<ArrayHdr>(),
            size_of::<HashHdr>(),
            size_of::<NetworkRec>(),
            offset_of!(NetworkRec, fib4),
            offset_of!(NetworkRec, fdb),
            offset_of!(NetworkRec, learn_aging),
            size_of::<PortRec>(),
            size_of::<NodeRec>(),
            size_of::<NextHopRec>(),
            size_of::<EncapRec>(),
            offset_of!(RootRec, encaps),
            offset_of!(RootRec, srv6_source),
            size_of::<SidRec>(),
            size_of::<FdbRec>(),
            size_of::<NeighRec>(),
            HashTable::<u64, FdbRec>::BUCKET_BYTES,
            HashTable::<u64, FdbRec>::SLOTS,
            HashTable::<u128, NeighRec>::BUCKET_BYTES,
            HashTable::<u128, NeighRec>::SLOTS,
            HashTable::<u128, SidRec>::BUCKET_BYTES,
            HashTable::<u128, SidRec>::SLOTS,
            offset_of!(NetworkRec, peers4),
            offset_of!(NetworkRec, policy_gen),
            offset_of!(PortRec, policy),
            offset_of!(RootRec, decisions),
            offset_of!(RootRec, service_recs),
            size_of::<crate::policy::PolicySetRec>(),
            size_of::<crate::policy::PortSetRec>(),
            size_of::<crate::policy::ServiceKey>(),
            size_of::<crate::policy::ServiceRec>(),
            size_of::<crate::policy::BackendRec>(),
            HashTable::<u64, u32>::BUCKET_BYTES,
            HashTable::<crate::policy::ServiceKey, u32>::BUCKET_BYTES,
            HashTable::<crate::policy::ServiceKey, u32>::SLOTS,
            crate::qsbr::SLOT_SIZE as usize,
            crate::status::MAX_PORTS as usize,
            crate::status::MAX_STAGES,
            crate::status::DropReason::SLOTS,
            crate::status::LEARN_SLOTS as usize,
            crate::learn::RECORD_WORDS,
        ]);
        // The hash function is part of the layout: a different one puts keys in other buckets.
        h = fnv(h, mix64(0x6c61_6365));
        let fib = crate::fib::LAYOUT;
        let mut i = 0;
        while i < fib.len() {
            h = fnv(h, fib[i] as u64);
            i += 1;
        }
        h
    };
}
