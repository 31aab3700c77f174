//! # lace-forwarder — the node's data plane
//!
//! Module map: [`wire`] (zero-copy packet views: parse and build headers without copying or
//! allocating), [`dpdk`] (the safe DPDK layer: EAL, mempools, mbufs and bursts, ports and their
//! queues, vdev hot-plug; the only module that calls into `lace-dpdk-sys`).

#![cfg_attr(not(test), warn(missing_docs))]

pub mod dpdk;
pub mod engine;
pub mod kernel;
pub mod offload;
pub mod pipeline;
pub mod wire;
