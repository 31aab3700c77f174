//! Raw bindings to the system DPDK (22.11 LTS), generated at build time by bindgen over
//! `csrc/wrapper.h`, plus `lace_*` shims (`csrc/shim.c`) for DPDK's static-inline fast-path
//! functions and per-thread macros (`rte_eth_rx_burst`, `rte_pktmbuf_alloc`, `rte_errno`, ...).
//!
//! Nothing here is safe to call without reading DPDK's documentation for the function; the only
//! user is `lace_forwarder::dpdk`, which wraps every call it makes and states why it is sound.
//! The generated file starts with the bindgen command line and the DPDK version it came from.
//!
//! Linking: shared, against the libraries `pkg-config --libs libdpdk` lists, plus
//! `librte_net_ring` for [`rte_eth_from_rings`]. The EAL loads the other PMDs (net_null,
//! net_tap, net_af_packet, ...) from its plugin directory during `rte_eal_init`.

#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks
)]

include!(concat!(env!("OUT_DIR"), "/dpdk_bindings.rs"));

/// The DPDK version the bindings were generated from (`pkg-config --modversion libdpdk`).
pub const DPDK_VERSION: &str = env!("LACE_DPDK_VERSION");
