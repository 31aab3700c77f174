//! Raw DPDK bindings: lace's own `lace-dpdk-sys` (bindgen over the system DPDK 22.11 plus a C
//! shim for static-inline functions), shared with lace-forwarder. The bench anchors use the
//! table APIs (`rte_fib`, `rte_fib6`, `rte_hash`), the EAL and heap statistics, and the shims
//! `lace_rte_errno` (`rte_errno` is a per-lcore thread-local behind a macro) and
//! `lace_rte_hash_crc` (DPDK's CRC32-C hash is static inline; `rte_hash` wants a function
//! pointer).
//!
//! Nothing outside `crate::dpdk` uses this module.

pub use lace_dpdk_sys::*;
