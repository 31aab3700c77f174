//! Diff-and-publish: from the tables last published to the next ones in one batch.
//!
//! Guarantees: only entries that differ are written; one publication per batch (none when
//! nothing differs); on any writer error the batch is abandoned ([`TableWriter::abort`]), so
//! the published tables are exactly the previous ones.

use std::collections::BTreeMap;
use std::sync::Arc;

use lace_shared::policy::ServiceKey;
use lace_shared::tables::TableWriter;
use lace_shared::types::NetworkId;

use lace_shared::policy::{PolicyDir, PolicySetId};

use super::policy::{PeerMap, PolicyTables, SetTables};
use super::{split, NetworkTables, NodeTables};
use crate::diff::merge_diff;

/// What one [`super::Compiler::apply`] changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// Networks added or whose settings changed.
    pub networks_set: usize,
    /// Networks removed (with all their routes).
    pub networks_removed: usize,
    /// Routes added or whose next hop changed.
    pub routes_set: usize,
    /// Routes removed from networks that stay.
    pub routes_removed: usize,
    /// Service records set (added or changed).
    pub services_set: usize,
    /// Service records removed.
    pub services_removed: usize,
    /// l2 neighbor and FDB entries set, and flood lists replaced.
    pub l2_set: usize,
    /// l2 neighbor and FDB entries removed from networks that stay.
    pub l2_removed: usize,
    /// Ports bound or changed.
    pub ports_set: usize,
    /// Ports unbound.
    pub ports_removed: usize,
    /// Remote nodes added or changed.
    pub nodes_set: usize,
    /// Remote nodes removed.
    pub nodes_removed: usize,
    /// Local SIDs installed or changed.
    pub sids_set: usize,
    /// Local SIDs removed.
    pub sids_removed: usize,
    /// The SRv6 source address set (1) or not (0).
    pub source_set: usize,
    /// Peer-class prefixes, policy sets and decisions set.
    pub policy_set: usize,
    /// Peer-class prefixes, policy sets and decisions removed.
    pub policy_removed: usize,
    /// The generation published; None when nothing changed (no publication).
    pub generation: Option<u64>,
}

impl ApplyStats {
    /// Total writer calls issued.
    pub fn changes(&self) -> usize {
        self.networks_set
            + self.networks_removed
            + self.routes_set
            + self.routes_removed
            + self.services_set
            + self.services_removed
            + self.l2_set
            + self.l2_removed
            + self.ports_set
            + self.ports_removed
            + self.nodes_set
            + self.nodes_removed
            + self.sids_set
            + self.sids_removed
            + self.source_set
            + self.policy_set
            + self.policy_removed
    }
}

/// Why a batch was not published.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A writer call failed (region or table full, bad argument); the batch was abandoned.
    #[error(
        "tables: {op} failed: {source}; the batch was abandoned and the forwarder keeps the \
         previous tables (for a full region, recreate it larger: TablesConfig::size)"
    )]
    Tables {
        /// The call and its object, e.g. `add_route network 3 10.40.1.0/24`.
        op: String,
        /// The writer's error.
        #[source]
        source: lace_shared::Error,
    },
}

fn fail(op: impl FnOnce() -> String) -> impl FnOnce(lace_shared::Error) -> ApplyError {
    move |source| ApplyError::Tables { op: op(), source }
}

/// Stages `last → next` into `w` and publishes; aborts the batch on error.
pub(super) fn apply(
    w: &mut TableWriter,
    last: &NodeTables,
    next: &NodeTables,
) -> Result<ApplyStats, ApplyError> {
    let mut st = ApplyStats::default();
    match stage(w, last, next, &mut st) {
        Ok(()) => {}
        Err(e) => {
            w.abort();
            return Err(e);
        }
    }
    if st.changes() > 0 {
        // `publish` abandons the batch itself when it fails.
        st.generation = Some(w.publish().map_err(fail(|| "publish".into()))?);
    }
    Ok(st)
}

fn stage(
    w: &mut TableWriter,
    last: &NodeTables,
    next: &NodeTables,
    st: &mut ApplyStats,
) -> Result<(), ApplyError> {
    // The source and the nodes first (next hops' encapsulations are built from them), removals
    // of nodes last.
    if let (Some(s), true) = (next.srv6_source, next.srv6_source != last.srv6_source) {
        w.set_srv6_source(s)
            .map_err(fail(|| format!("set_srv6_source {s}")))?;
        st.source_set += 1;
    }
    merge_diff(&last.nodes, &next.nodes, |id, _, new| {
        if let Some(n) = new {
            w.set_node(*id, n)
                .map_err(fail(|| format!("set_node {}", id.0)))?;
            st.nodes_set += 1;
        }
        Ok(())
    })?;
    // Networks: a cheap pointer comparison skips the unchanged ones before `diff` compares
    // contents.
    let mut a = last.networks.iter().peekable();
    let mut b = next.networks.iter().peekable();
    loop {
        let (old, new) = match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some(&(ka, _)), Some(&(kb, _))) if ka == kb => (a.next(), b.next()),
            (Some(&(ka, _)), Some(&(kb, _))) if ka < kb => (a.next(), None),
            (Some(_), None) => (a.next(), None),
            _ => (None, b.next()),
        };
        match (old, new) {
            (Some((id, o)), None) => {
                // Service records are keyed by network but live beside the networks: they go
                // first.
                for port in o.services.keys() {
                    remove_service(w, *id, port, st)?;
                }
                w.remove_network(*id)
                    .map_err(fail(|| format!("remove_network {}", id.0)))?;
                st.networks_removed += 1;
            }
            (old, Some((id, n))) => {
                let old = old.map(|(_, o)| o);
                if old.is_some_and(|o| Arc::ptr_eq(o, n)) {
                    continue;
                }
                network(w, *id, old.map(Arc::as_ref), n, st)?;
            }
            (None, None) => break,
        }
    }
    // Policy tables after the networks (a set names its network) and before the ports (a port
    // names its set).
    policies(w, last, next, st)?;
    merge_diff(&last.ports, &next.ports, |id, _, new| {
        match new {
            Some(p) => {
                w.set_port(*id, p)
                    .map_err(fail(|| format!("set_port {}", id.0)))?;
                st.ports_set += 1;
            }
            None => {
                w.remove_port(*id)
                    .map_err(fail(|| format!("remove_port {}", id.0)))?;
                st.ports_removed += 1;
            }
        }
        Ok(())
    })?;
    merge_diff(&last.sids, &next.sids, |sid, _, new| {
        match new {
            Some(b) => {
                w.set_local_sid(*sid, *b)
                    .map_err(fail(|| format!("set_local_sid {}", sid.0)))?;
                st.sids_set += 1;
            }
            None => {
                w.remove_local_sid(*sid)
                    .map_err(fail(|| format!("remove_local_sid {}", sid.0)))?;
                st.sids_removed += 1;
            }
        }
        Ok(())
    })?;
    merge_diff(&last.nodes, &next.nodes, |id, _, new| {
        if new.is_none() {
            w.remove_node(*id)
                .map_err(fail(|| format!("remove_node {}", id.0)))?;
            st.nodes_removed += 1;
        }
        Ok(())
    })
}

fn network(
    w: &mut TableWriter,
    id: NetworkId,
    old: Option<&NetworkTables>,
    new: &NetworkTables,
    st: &mut ApplyStats,
) -> Result<(), ApplyError> {
    if old.map(|o| o.info) != Some(new.info) {
        w.set_network(id, &new.info)
            .map_err(fail(|| format!("set_network {}", id.0)))?;
        st.networks_set += 1;
    }
    let empty = BTreeMap::new();
    let old_routes = old.map_or(&empty, |o| &o.routes);
    let empty_neigh = BTreeMap::new();
    merge_diff(
        old.map_or(&empty_neigh, |o| &o.neighbors),
        &new.neighbors,
        |ip, _, mac| {
            match mac {
                Some(mac) => {
                    w.set_neighbor(id, *ip, *mac, false)
                        .map_err(fail(|| format!("set_neighbor network {} {ip}", id.0)))?;
                    st.l2_set += 1;
                }
                None => {
                    w.remove_neighbor(id, *ip)
                        .map_err(fail(|| format!("remove_neighbor network {} {ip}", id.0)))?;
                    st.l2_removed += 1;
                }
            }
            Ok(())
        },
    )?;
    let empty_fdb = BTreeMap::new();
    merge_diff(
        old.map_or(&empty_fdb, |o| &o.fdb),
        &new.fdb,
        |mac, _, entry| {
            match entry {
                Some(e) => {
                    w.set_fdb(id, *mac, *e)
                        .map_err(fail(|| format!("set_fdb network {} {mac}", id.0)))?;
                    st.l2_set += 1;
                }
                None => {
                    w.remove_fdb(id, *mac)
                        .map_err(fail(|| format!("remove_fdb network {} {mac}", id.0)))?;
                    st.l2_removed += 1;
                }
            }
            Ok(())
        },
    )?;
    if old.map_or(!new.flood.is_empty(), |o| o.flood != new.flood) {
        w.set_flood(id, &new.flood)
            .map_err(fail(|| format!("set_flood network {}", id.0)))?;
        st.l2_set += 1;
    }
    merge_diff(old_routes, &new.routes, |p, _, r| {
        let (addr, len) = split(p);
        match r {
            Some(r) => {
                w.add_route_flags(id, addr, len, r.nh, r.flags)
                    .map_err(fail(|| format!("add_route network {} {p}", id.0)))?;
                st.routes_set += 1;
            }
            None => {
                w.remove_route(id, addr, len)
                    .map_err(fail(|| format!("remove_route network {} {p}", id.0)))?;
                st.routes_removed += 1;
            }
        }
        Ok(())
    })?;
    let empty_services = BTreeMap::new();
    // `Arc<ServiceInfo>` compares by pointer first: the compiler's cache shares unchanged
    // records.
    merge_diff(
        old.map_or(&empty_services, |o| &o.services),
        &new.services,
        |port, _, info| match info {
            Some(info) => {
                let key = ServiceKey::new(id, port.addr, port.protocol, port.port);
                w.set_service(key, info).map_err(fail(|| {
                    format!(
                        "set_service network {} {}:{}/{}",
                        id.0, port.addr, port.port, port.protocol
                    )
                }))?;
                st.services_set += 1;
                Ok(())
            }
            None => remove_service(w, id, port, st),
        },
    )
}

fn remove_service(
    w: &mut TableWriter,
    id: NetworkId,
    port: &super::ServicePort,
    st: &mut ApplyStats,
) -> Result<(), ApplyError> {
    let key = ServiceKey::new(id, port.addr, port.protocol, port.port);
    w.remove_service(key).map_err(fail(|| {
        format!(
            "remove_service network {} {}:{}/{}",
            id.0, port.addr, port.port, port.protocol
        )
    }))?;
    st.services_removed += 1;
    Ok(())
}

fn policies(
    w: &mut TableWriter,
    last: &NodeTables,
    next: &NodeTables,
    st: &mut ApplyStats,
) -> Result<(), ApplyError> {
    let empty = PolicyTables::default();
    let mut keys: Vec<NetworkId> = last
        .policies
        .keys()
        .chain(next.policies.keys())
        .copied()
        .collect();
    keys.sort();
    keys.dedup();
    for &id in &keys {
        let (old, new) = (last.policies.get(&id), next.policies.get(&id));
        if let (Some(o), Some(n)) = (old, new) {
            if Arc::ptr_eq(o, n) {
                continue;
            }
        }
        // A removed network took its peer prefixes with it.
        if !next.networks.contains_key(&id) {
            continue;
        }
        let (old, new) = (old.map_or(&empty, |o| o), new.map_or(&empty, |n| n));
        let mut batch = Vec::new();
        PeerMap::diff(&old.peers, &new.peers, |p, class| {
            let (addr, len) = split(p);
            match class {
                Some(_) => st.policy_set += 1,
                None => st.policy_removed += 1,
            }
            batch.push((addr, len, class.copied()));
            Ok::<(), ApplyError>(())
        })?;
        w.apply_peer_prefixes(id, &batch).map_err(fail(|| {
            format!(
                "apply_peer_prefixes network {} ({} changes)",
                id.0,
                batch.len()
            )
        }))?;
    }
    // Sets by number over every network: a number may move from one network to another.
    let sets_of = |t: &NodeTables| -> BTreeMap<PolicySetId, Arc<SetTables>> {
        t.policies
            .values()
            .flat_map(|p| p.sets.iter().map(|(k, v)| (*k, Arc::clone(v))))
            .collect()
    };
    let (old, new) = (sets_of(last), sets_of(next));
    merge_diff(&old, &new, |sid, o, n| match n {
        Some(n) => {
            if o.is_some_and(|o| Arc::ptr_eq(o, n)) {
                return Ok(());
            }
            set(w, *sid, o.map(Arc::as_ref), n, st)
        }
        None => {
            w.remove_policy_set(*sid)
                .map_err(fail(|| format!("remove_policy_set {}", sid.0)))?;
            st.policy_removed += 1;
            Ok(())
        }
    })
}

fn set(
    w: &mut TableWriter,
    sid: PolicySetId,
    old: Option<&SetTables>,
    new: &SetTables,
    st: &mut ApplyStats,
) -> Result<(), ApplyError> {
    if old.map(|o| o.set) != Some(new.set) {
        w.set_policy_set(sid, &new.set)
            .map_err(fail(|| format!("set_policy_set {}", sid.0)))?;
        st.policy_set += 1;
    }
    let empty = BTreeMap::new();
    merge_diff(
        old.map_or(&empty, |o| &o.decisions),
        &new.decisions,
        |(dir, class), _, ports| {
            let what = || {
                let d = match dir {
                    PolicyDir::Ingress => "ingress",
                    PolicyDir::Egress => "egress",
                };
                format!("set {} {d} class {}", sid.0, class.0)
            };
            match ports {
                Some(p) => {
                    w.set_decision(sid, *dir, *class, p)
                        .map_err(fail(|| format!("set_decision {}", what())))?;
                    st.policy_set += 1;
                }
                None => {
                    w.remove_decision(sid, *dir, *class)
                        .map_err(fail(|| format!("remove_decision {}", what())))?;
                    st.policy_removed += 1;
                }
            }
            Ok(())
        },
    )
}
