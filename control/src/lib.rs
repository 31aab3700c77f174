//! # lace-control — the node's control plane
//!
//! Module map: [`api`] (the `lace-cni.io/v1alpha1` resources as Rust types), [`world`] (the
//! parsed, validated model the compiler reads), [`proto`] (the protocol between `lace-cni` and
//! `lace-control`).

#![cfg_attr(not(test), warn(missing_docs))]

pub mod api;
pub mod bind;
pub mod cni;
pub mod compile;
pub mod daemon;
pub mod diff;
pub mod fsio;
pub mod ipam;
pub mod proto;
pub mod source;
pub mod store;
pub mod world;
