//! Safe wrappers over the DPDK tables lace is measured against, and the crate's only `unsafe`.
//!
//! * [`Eal`]: `rte_eal_init` once per process (a second call with the same options returns the
//!   running EAL; different options, or a call after [`Eal::cleanup`], are errors). Every table
//!   constructor takes an `Eal`, so none can exist before the EAL runs, and `cleanup` is refused
//!   while any table is alive.
//! * [`DpdkFib4`] (`rte_fib`, DIR24_8), [`DpdkFib6`] (`rte_fib6`, TRIE), [`DpdkHash`]
//!   (`rte_hash`, CRC32-C): created sized for their content, freed on drop, with the DPDK heap
//!   bytes they took recorded at creation.
//!
//! Guarantees: lookups take `&self` and may run on any thread concurrently; writes take
//! `&mut self`. The wrappers never hand out DPDK pointers. Not guaranteed: timing stability —
//! that is the caller's business (pin threads, repeat, take medians).

mod eal;
mod error;
mod fib4;
mod fib6;
mod hash;
mod sys;
mod tsc;

pub use eal::{Eal, EalOptions};
pub use error::DpdkError;
pub use fib4::DpdkFib4;
pub use fib6::DpdkFib6;
pub use hash::{DpdkHash, LOOKUP_BULK_MAX};
pub use tsc::rdtsc;

/// The DPDK version the bindings were generated from (pkg-config `libdpdk` modversion).
pub const DPDK_VERSION: &str = sys::DPDK_VERSION;

/// Next hop [`DpdkFib4::lookup_bulk`] and [`DpdkFib6::lookup_bulk`] return for an address no
/// route covers (the FIBs' `default_nh`); never a valid next hop.
pub const NO_ROUTE: u64 = 0;

/// The largest next hop the FIBs' 4-byte entries hold (one bit flags "continues in a tbl8").
pub const MAX_NEXT_HOP: u32 = (1 << 31) - 1;
