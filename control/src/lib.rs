//! # lace-control — the node's control plane
//!
//! Module map: [`api`] (the `lace-cni.io/v1alpha1` resources as Rust types, their validation,
//! and the admission-grade CRDs generated from them), [`source`] (where objects come from:
//! snapshots and watch events), [`bind`] (binding policies, CEL), [`ipam`] (ids, blocks,
//! addresses), [`service`] (ClusterIP Services: spec, EndpointSlices, backends), [`world`] (the
//! parsed, validated model the compiler reads), [`compile`] (world →
//! one node's tables), [`learn`] (l2 learning and MAC mobility: the forwarder's reports, the
//! shared records), [`daemon`] (`lace-control run`: one event loop over a pure core),
//! [`proto`] (the protocol between `lace-cni` and `lace-control`), [`cni`] (the plugin),
//! [`store`] (the standalone state file), [`fsio`] and [`diff`] (the one atomic file write and
//! the one map diff).

#![cfg_attr(not(test), warn(missing_docs))]

pub mod api;
pub mod bind;
pub mod cni;
pub mod compile;
pub mod daemon;
pub mod diff;
pub mod fsio;
pub mod ipam;
pub mod learn;
pub mod netpol;
pub mod proto;
pub mod service;
pub mod source;
pub mod store;
pub mod world;
