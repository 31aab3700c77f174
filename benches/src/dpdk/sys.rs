//! Raw DPDK bindings, generated at build time.
//!
//! `build.rs` runs bindgen over `csrc/wrapper.h` with the full `pkg-config --cflags libdpdk`
//! (DPDK 22.11 LTS on Debian 12; the exact version is [`DPDK_VERSION`]) and writes the result to
//! `$OUT_DIR/dpdk_bindings.rs`, whose first lines repeat the equivalent bindgen command line.
//! Only the functions, types and constants lace-benches calls are allowlisted; the table handles
//! (`rte_fib`, `rte_fib6`, `rte_hash`) are opaque. `csrc/shim.c` supplies `lace_rte_errno`
//! (`rte_errno` is a per-lcore thread-local behind a macro) and `lace_rte_hash_crc` (DPDK's
//! CRC32-C hash is static inline, and `rte_hash` wants a function pointer).
//!
//! Nothing outside `crate::dpdk` uses this module.

#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all
)]

/// The `libdpdk` version pkg-config reported when the bindings were generated.
pub const DPDK_VERSION: &str = env!("LACE_DPDK_VERSION");

include!(concat!(env!("OUT_DIR"), "/dpdk_bindings.rs"));
