//! The event loop's learning step (ADR 0019): the forwarder's reports and the shared records
//! ([`crate::learn`]) turned into the world's learned MACs once per batch.
//!
//! Per batch: the store is re-read when another control changed it (or on a tick), the
//! batch's reports are applied and the records reconciled with the world
//! ([`LearnedTable::step`]) — in the store's read-modify-write, so the decision is made on
//! the latest records — and the records become [`World::learned`]. A failure of the store is
//! logged, shown in the status and retried with the next batch; the reports of that batch
//! are kept for it (the forwarder sends no report twice).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use lace_shared::learn::LearnEvent;
use lace_shared::types::MacAddr;
use serde::{Deserialize, Serialize};

use crate::learn::intake::Wake;
use crate::learn::store::LearnStore;
use crate::learn::{Happened, LearnedTable, Origin, Outcome};
use crate::world::{LearnedModel, World};

/// Reports kept for a store that fails, at most (the oldest go first).
pub const MAX_BACKLOG: usize = 65_536;

/// The learning counters `lace-control status` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LearnStats {
    /// Reports read from the forwarder's learn rings.
    pub reports: u64,
    /// Reports the forwarder overwrote before control read them (`learn-lost`).
    pub lost: u64,
    /// Reports that taught nothing (a stale port, learning off, a refresh elsewhere).
    pub ignored: u64,
    /// MACs learned.
    pub learned: u64,
    /// Moves (sequence + 1).
    pub moved: u64,
    /// Records removed (aged out, endpoint gone, learning off).
    pub forgotten: u64,
    /// Announced addresses refused (outside the subnet, an endpoint's, the gateway).
    pub refused: u64,
}

/// A learned MAC in the status file: its FDBEntry's and Neighbors' content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LearnedEntry {
    /// The network.
    pub network: String,
    /// The MAC.
    pub mac: String,
    /// `learned` or `identity`.
    pub origin: String,
    /// Node and endpoint of the active location.
    pub node: String,
    /// Endpoint id there.
    pub endpoint: u64,
    /// An identity's pending location (`node/endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
    /// Sequence number.
    pub sequence: u32,
    /// Learned addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// When last seen (RFC 3339).
    pub last_seen: String,
}

/// The learning part of the loop's state.
#[derive(Debug)]
pub struct Learning {
    store: Box<dyn LearnStore>,
    node: String,
    backlog: Vec<LearnEvent>,
    refresh: bool,
    stats: LearnStats,
    error: Option<String>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Learning {
    /// The learning of node `node`, its records in `store`.
    pub fn new(store: Box<dyn LearnStore>, node: &str) -> Learning {
        Learning {
            store,
            node: node.to_owned(),
            backlog: Vec::new(),
            refresh: true,
            stats: LearnStats::default(),
            error: None,
        }
    }

    /// Takes what the intake thread woke the loop with.
    pub fn wake(&mut self, w: Wake) {
        match w {
            Wake::Reports(events, read) => {
                self.stats.reports += read.read;
                self.stats.lost += read.lost;
                if read.lost > 0 {
                    tracing::warn!(
                        "{} learn reports lost: the forwarder overwrote them before control \
                         read them (learn-lost)",
                        read.lost
                    );
                }
                self.backlog.extend(events);
                if self.backlog.len() > MAX_BACKLOG {
                    let drop = self.backlog.len() - MAX_BACKLOG;
                    self.backlog.drain(..drop);
                    self.stats.lost += drop as u64;
                }
            }
            Wake::StoreChanged => self.refresh = true,
        }
    }

    /// Whether the loop has learning work this batch even if nothing else happened.
    pub fn pending(&self) -> bool {
        self.refresh || !self.backlog.is_empty()
    }

    /// The step (see the module docs): the learned MACs the world should have now.
    pub fn step(&mut self, world: &World, tick: bool) -> BTreeMap<(String, MacAddr), LearnedModel> {
        if self.refresh || tick {
            match self.store.refresh() {
                Ok(_) => self.refresh = false,
                Err(e) => self.fail(e.to_string()),
            }
        }
        let now = now_ms();
        // Without reports (ticks mostly), decided on a copy first: nothing to change takes no
        // lock and writes nothing.
        let mut out = if self.backlog.is_empty() {
            let mut probe = self.store.table().clone();
            probe.step(world, &self.node, &self.backlog, now)
        } else {
            Outcome {
                changed: true,
                ..Outcome::default()
            }
        };
        if out.changed {
            let (node, reports) = (&self.node, &self.backlog);
            match self
                .store
                .mutate(&mut |t: &mut LearnedTable| t.step(world, node, reports, now))
            {
                Ok(saved) => {
                    out = saved;
                    if self.error.take().is_some() {
                        tracing::info!("learned MACs are saved again");
                    }
                }
                Err(e) => {
                    self.fail(e.to_string());
                    return self.store.table().models();
                }
            }
        }
        self.stats.ignored += out.ignored;
        for h in &out.happened {
            self.count(h);
        }
        self.backlog.clear();
        self.store.table().models()
    }

    fn fail(&mut self, e: String) {
        if self.error.as_deref() != Some(&e) {
            tracing::error!("{e}");
        }
        self.error = Some(e);
    }

    fn count(&mut self, h: &Happened) {
        match h {
            Happened::Learned { .. } => {
                self.stats.learned += 1;
                tracing::info!("{h}");
            }
            Happened::Moved { .. } => {
                self.stats.moved += 1;
                tracing::info!("{h}");
            }
            Happened::Forgotten { .. } => {
                self.stats.forgotten += 1;
                tracing::info!("{h}");
            }
            Happened::Refused { .. } => {
                self.stats.refused += 1;
                tracing::debug!("{h}");
            }
        }
    }

    /// The counters.
    pub fn stats(&self) -> &LearnStats {
        &self.stats
    }

    /// Why the records could not be read or saved, if they cannot.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Every record, for the status file.
    pub fn entries(&self) -> Vec<LearnedEntry> {
        self.store
            .table()
            .records()
            .values()
            .map(|r| LearnedEntry {
                network: r.network.clone(),
                mac: r.mac.to_string(),
                origin: match r.origin {
                    Origin::Learned => "learned",
                    Origin::Identity => "identity",
                }
                .to_owned(),
                node: r.active.node.clone(),
                endpoint: r.active.endpoint,
                pending: r
                    .pending
                    .as_ref()
                    .map(|p| format!("{}/{}", p.node, p.endpoint)),
                sequence: r.sequence,
                addresses: r.addresses.iter().map(ToString::to_string).collect(),
                last_seen: super::status::rfc3339(r.last_seen_ms / 1000),
            })
            .collect()
    }
}
