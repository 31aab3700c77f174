//! l2 learning and MAC mobility in control (ADR 0019).
//!
//! The forwarder reports what it sees on learning l2 networks ([`LearnEvent`]s in its status
//! region's learn rings); control decides what they mean, records it where every node's
//! control sees it, and compiles the result into every member node's tables
//! ([`crate::world::World::learned`]).
//!
//! - [`LearnedTable`] is the pure decision: one [`MacRecord`] per (network, MAC) control
//!   places — a MAC **learned** from an announcement (gratuitous ARP, unsolicited NA, RARP) that
//!   no endpoint holds, or an **identity** several endpoints share (the pods of a migrating VM,
//!   which ask for it with the `l2.lace-cni.io/identity` annotation). A record has an *active*
//!   location (node, endpoint), for an identity a *pending* one, a sequence number and, for a
//!   learned MAC, its addresses and when it was last seen.
//! - [`store`] keeps the table where every control reads and writes it: a file beside the
//!   shared IPAM state under its own lock (standalone), `Neighbor` and `FDBEntry` objects with
//!   resourceVersion preconditions ([`kube`], Kubernetes mode).
//! - [`intake`] reads the forwarder's learn rings and wakes the event loop.
//!
//! # The rules
//!
//! - **New.** An announcement of a MAC no endpoint holds, from a pod port of a network with
//!   learning on, creates a learned record at that port's endpoint, sequence 1.
//! - **Move.** An announcement at another location than the active one moves the record there
//!   with sequence + 1. Every node compiles the record, so the newest location wins on every
//!   node; writes are serialised by the store (a lock, or resourceVersion), so two controls
//!   never both bump the same sequence number.
//! - **Refresh.** A report that the MAC is still seen at its active location
//!   ([`lace_shared::learn::LearnKind::Seen`],
//!   throttled by the forwarder to once per aging time / 4) or an announcement there updates
//!   `lastSeen`. A refresh never moves a MAC.
//! - **Age.** A learned record not seen for its network's aging time is removed, and so is
//!   one whose endpoint is gone or whose network no longer learns.
//! - **Addresses.** An announced address must lie in the network's subnet and be no
//!   endpoint's and no gateway's; an address another learned MAC held moves to the announcer.
//! - **Identity.** When several endpoints share a MAC, the oldest (lowest endpoint id: a
//!   migration's source) is active and the newest pending: the target's interface coming up
//!   moves nothing. The pending location is promoted (sequence + 1) by the first announcement
//!   from its port — the VM itself, running there — or when the active endpoint goes. The
//!   record goes when one endpoint is left (its own endpoint places the MAC again).
//! - Never from a DAD probe (the forwarder does not report those), never from the underlay,
//!   never from a report about a port since bound to another endpoint.

pub mod intake;
pub mod kube;
pub mod store;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;
use lace_shared::learn::LearnEvent;
use lace_shared::types::MacAddr;
use serde::{Deserialize, Serialize};

use crate::api::NetworkType;
use crate::world::{EndpointModel, LearnedModel, World};

/// The pod annotation that asks for a sticky l2 identity: pods of one namespace and l2 network
/// with the same value share their addresses and MAC (a migrating VM's source and target
/// virt-launcher pods; see [`crate::ipam`]).
pub const IDENTITY_ANNOTATION: &str = "l2.lace-cni.io/identity";

/// Checks an [`IDENTITY_ANNOTATION`] value: a DNS-1123 label (the VM's name, typically).
pub fn check_identity(value: &str) -> Result<(), String> {
    crate::api::validate::dns_label(value).map_err(|reason| {
        format!(
            "annotation {IDENTITY_ANNOTATION} {value:?} is not a DNS-1123 label ({reason}); use \
             lowercase letters, digits and '-', at most 63 characters, e.g. the VM's name"
        )
    })
}

/// Where a MAC lives: an endpoint (its pod port) on a node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Location {
    /// The node.
    pub node: String,
    /// The endpoint id (of the lease whose port the MAC is behind).
    pub endpoint: u64,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "endpoint {} on {}", self.endpoint, self.node)
    }
}

/// Why control places a MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Origin {
    /// Learned from an announcement; ages out.
    Learned,
    /// Shared by several endpoints (sticky identity); lasts while they do.
    Identity,
}

/// Control's record of one MAC of one l2 network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MacRecord {
    /// The network.
    pub network: String,
    /// The MAC, written `52:54:00:12:34:56`.
    #[serde(with = "mac_text")]
    pub mac: MacAddr,
    /// Learned or an identity.
    pub origin: Origin,
    /// Addresses learned with the MAC (learned records).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub addresses: BTreeSet<IpAddr>,
    /// Where frames to the MAC go.
    pub active: Location,
    /// An identity's other location, promoted by the VM's announcement there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Location>,
    /// Mobility sequence number: 1 when recorded, + 1 per move.
    pub sequence: u32,
    /// When the MAC was last seen at its active location (ms since the epoch).
    pub last_seen_ms: u64,
}

/// A MAC as text in the saved form.
mod mac_text {
    use lace_shared::types::MacAddr;
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(m: &MacAddr, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(m)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<MacAddr, D::Error> {
        let text = String::deserialize(d)?;
        crate::api::validate::parse_mac(&text)
            .ok_or_else(|| D::Error::custom(format!("{text:?} is not a MAC address")))
    }
}

/// What a change of the table did, for the log and the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Happened {
    /// A MAC learned at a location.
    Learned {
        /// The record after.
        network: String,
        /// The MAC.
        mac: MacAddr,
        /// Where.
        at: Location,
    },
    /// A MAC moved (sequence + 1): learned and announced elsewhere, or an identity's pending
    /// location promoted.
    Moved {
        /// The network.
        network: String,
        /// The MAC.
        mac: MacAddr,
        /// From.
        from: Location,
        /// To.
        to: Location,
        /// The new sequence number.
        sequence: u32,
    },
    /// A record removed: aged out, its endpoint gone, or learning off.
    Forgotten {
        /// The network.
        network: String,
        /// The MAC.
        mac: MacAddr,
        /// Why.
        why: &'static str,
    },
    /// An announced address left out.
    Refused {
        /// The network.
        network: String,
        /// The MAC.
        mac: MacAddr,
        /// The address.
        address: IpAddr,
        /// Why.
        why: &'static str,
    },
}

impl std::fmt::Display for Happened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Happened::Learned { network, mac, at } => {
                write!(f, "network {network}: learned MAC {mac} at {at}")
            }
            Happened::Moved {
                network,
                mac,
                from,
                to,
                sequence,
            } => write!(
                f,
                "network {network}: MAC {mac} moved from {from} to {to} (sequence {sequence})"
            ),
            Happened::Forgotten { network, mac, why } => {
                write!(f, "network {network}: MAC {mac} forgotten: {why}")
            }
            Happened::Refused {
                network,
                mac,
                address,
                why,
            } => write!(
                f,
                "network {network}: address {address} announced with MAC {mac} not learned: {why}"
            ),
        }
    }
}

/// What one change of the table did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the table changed (it must be saved; the compiler sees what matters to it).
    pub changed: bool,
    /// What happened, in order.
    pub happened: Vec<Happened>,
    /// Reports dropped: about a port since rebound, a network without learning, a MAC an
    /// endpoint holds (no identity to promote), a refresh elsewhere than the active location.
    pub ignored: u64,
}

impl Outcome {
    fn merge(&mut self, other: Outcome) {
        self.changed |= other.changed;
        self.happened.extend(other.happened);
        self.ignored += other.ignored;
    }
}

/// Every MAC control places, by (network, MAC).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LearnedTable {
    records: BTreeMap<(String, MacAddr), MacRecord>,
    /// Which learned MAC holds each learned address, by (network, address).
    holders: HashMap<(String, IpAddr), MacAddr>,
}

/// The saved form of a [`LearnedTable`] (a plain list, versioned).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LearnedState {
    /// Format version ([`LEARNED_VERSION`]).
    pub version: u32,
    /// The records, ordered by network and MAC.
    pub records: Vec<MacRecord>,
}

/// The format version of [`LearnedState`] this build reads and writes.
pub const LEARNED_VERSION: u32 = 1;

/// The world's endpoints indexed for the rules: by (node, endpoint id) and by (network, MAC).
struct Index<'w> {
    by_location: HashMap<(&'w str, u64), &'w EndpointModel>,
    by_mac: HashMap<(&'w str, MacAddr), Vec<&'w EndpointModel>>,
}

impl<'w> Index<'w> {
    fn new(world: &'w World) -> Index<'w> {
        let mut by_location = HashMap::new();
        let mut by_mac: HashMap<(&str, MacAddr), Vec<&EndpointModel>> = HashMap::new();
        for e in world.endpoints.values() {
            let l2 = world
                .networks
                .get(&e.network)
                .is_some_and(|n| n.kind == NetworkType::L2);
            if !l2 {
                continue;
            }
            by_location.insert((e.node.as_str(), e.endpoint_id), e);
            by_mac
                .entry((e.network.as_str(), e.mac))
                .or_default()
                .push(e);
        }
        for v in by_mac.values_mut() {
            v.sort_by_key(|e| e.endpoint_id);
        }
        Index {
            by_location,
            by_mac,
        }
    }

    fn exists(&self, l: &Location) -> bool {
        self.by_location
            .contains_key(&(l.node.as_str(), l.endpoint))
    }
}

fn location(e: &EndpointModel) -> Location {
    Location {
        node: e.node.clone(),
        endpoint: e.endpoint_id,
    }
}

impl LearnedTable {
    /// An empty table.
    pub fn new() -> LearnedTable {
        LearnedTable::default()
    }

    /// Every record, by (network, MAC).
    pub fn records(&self) -> &BTreeMap<(String, MacAddr), MacRecord> {
        &self.records
    }

    /// The saved form.
    pub fn to_state(&self) -> LearnedState {
        LearnedState {
            version: LEARNED_VERSION,
            records: self.records.values().cloned().collect(),
        }
    }

    /// Back from the saved form; an unknown version or a duplicate record is an error.
    pub fn from_state(s: LearnedState) -> Result<LearnedTable, String> {
        if s.version != LEARNED_VERSION {
            return Err(format!(
                "format version {} (this build reads {LEARNED_VERSION})",
                s.version
            ));
        }
        let mut t = LearnedTable::new();
        for r in s.records {
            if t.records.contains_key(&(r.network.clone(), r.mac)) {
                return Err(format!(
                    "network {} MAC {} is recorded twice",
                    r.network, r.mac
                ));
            }
            t.insert(r);
        }
        Ok(t)
    }

    /// Puts a record in, replacing one of the same MAC (the Kubernetes store rebuilds the
    /// table from objects); its addresses leave any other record.
    pub fn insert(&mut self, r: MacRecord) {
        self.remove(&(r.network.clone(), r.mac));
        for a in &r.addresses {
            self.hold(&r.network, *a, r.mac);
        }
        self.records.insert((r.network.clone(), r.mac), r);
    }

    /// Takes a record out, with its addresses.
    fn remove(&mut self, key: &(String, MacAddr)) -> Option<MacRecord> {
        let r = self.records.remove(key)?;
        for a in &r.addresses {
            let k = (r.network.clone(), *a);
            if self.holders.get(&k) == Some(&r.mac) {
                self.holders.remove(&k);
            }
        }
        Some(r)
    }

    /// `mac` holds address `a` of `network` now: another learned MAC that held it loses it
    /// (the newest announcer wins). The caller adds it to `mac`'s record.
    fn hold(&mut self, network: &str, a: IpAddr, mac: MacAddr) {
        let k = (network.to_owned(), a);
        if let Some(old) = self.holders.insert(k, mac) {
            if old != mac {
                if let Some(r) = self.records.get_mut(&(network.to_owned(), old)) {
                    r.addresses.remove(&a);
                }
            }
        }
    }

    /// What the compiler reads: every record at its active location.
    pub fn models(&self) -> BTreeMap<(String, MacAddr), LearnedModel> {
        self.records
            .iter()
            .map(|(k, r)| {
                (
                    k.clone(),
                    LearnedModel {
                        node: r.active.node.clone(),
                        endpoint_id: r.active.endpoint,
                        addresses: r.addresses.iter().copied().collect(),
                        sequence: r.sequence,
                        identity: r.origin == Origin::Identity,
                    },
                )
            })
            .collect()
    }

    /// Applies the reports the forwarder of node `node` made (see the module docs), at
    /// `now_ms`, against `world` (its endpoints and networks; its `learned` is not read).
    pub fn apply_reports(
        &mut self,
        world: &World,
        node: &str,
        reports: &[LearnEvent],
        now_ms: u64,
    ) -> Outcome {
        let ix = Index::new(world);
        let mut out = Outcome::default();
        for ev in reports {
            let Some(ep) = ix.by_location.get(&(node, ev.endpoint)).copied() else {
                out.ignored += 1;
                continue;
            };
            let learning = world
                .networks
                .get(&ep.network)
                .is_some_and(|n| n.l2.learning.is_some());
            if ep.port != ev.port || !learning {
                out.ignored += 1;
                continue;
            }
            let here = location(ep);
            let key = (ep.network.clone(), ev.mac);
            let owners = ix.by_mac.get(&(ep.network.as_str(), ev.mac));
            if owners.is_some_and(|o| !o.is_empty()) {
                // An endpoint's own MAC: an announcement may promote an identity's pending
                // location; nothing else is learned about it.
                match self.records.get_mut(&key) {
                    Some(r)
                        if r.origin == Origin::Identity
                            && ev.kind.is_announcement()
                            && r.pending.as_ref() == Some(&here) =>
                    {
                        let from = std::mem::replace(&mut r.active, here.clone());
                        r.pending = Some(from.clone());
                        r.sequence = r.sequence.wrapping_add(1);
                        r.last_seen_ms = now_ms;
                        out.changed = true;
                        out.happened.push(Happened::Moved {
                            network: key.0.clone(),
                            mac: ev.mac,
                            from,
                            to: here,
                            sequence: r.sequence,
                        });
                    }
                    _ => out.ignored += 1,
                }
                continue;
            }
            let address = ev
                .ip
                .map(|a| admit_address(world, &ix, &ep.network, a))
                .transpose();
            let address = match address {
                Ok(a) => a,
                Err(why) => {
                    out.happened.push(Happened::Refused {
                        network: key.0.clone(),
                        mac: ev.mac,
                        address: ev.ip.unwrap_or(IpAddr::from([0, 0, 0, 0])),
                        why,
                    });
                    None
                }
            };
            let announced = ev.kind.is_announcement();
            match self.records.get_mut(&key) {
                Some(r) if r.origin == Origin::Learned && r.active == here => {
                    r.last_seen_ms = now_ms;
                    r.addresses.extend(address);
                    out.changed = true;
                }
                Some(r) if r.origin == Origin::Learned && announced => {
                    let from = std::mem::replace(&mut r.active, here.clone());
                    r.sequence = r.sequence.wrapping_add(1);
                    r.last_seen_ms = now_ms;
                    r.addresses.extend(address);
                    out.changed = true;
                    out.happened.push(Happened::Moved {
                        network: key.0.clone(),
                        mac: ev.mac,
                        from,
                        to: here,
                        sequence: r.sequence,
                    });
                }
                None if announced => {
                    self.records.insert(
                        key.clone(),
                        MacRecord {
                            network: key.0.clone(),
                            mac: ev.mac,
                            origin: Origin::Learned,
                            addresses: address.into_iter().collect(),
                            active: here.clone(),
                            pending: None,
                            sequence: 1,
                            last_seen_ms: now_ms,
                        },
                    );
                    out.changed = true;
                    out.happened.push(Happened::Learned {
                        network: key.0.clone(),
                        mac: ev.mac,
                        at: here,
                    });
                }
                // A refresh elsewhere than the record says (tables not updated yet), or about
                // a MAC no record holds: never a move.
                _ => {
                    out.ignored += 1;
                    continue;
                }
            }
            if let Some(a) = address {
                // The announcer holds the address now; another learned MAC loses it.
                self.hold(&key.0, a, ev.mac);
            }
        }
        out
    }

    /// Brings the records in line with `world` at `now_ms` (see the module docs): identities
    /// recorded, promoted or released; learned MACs aged out, or forgotten with their
    /// endpoint or their network's learning.
    pub fn reconcile(&mut self, world: &World, now_ms: u64) -> Outcome {
        let ix = Index::new(world);
        let mut out = Outcome::default();
        // Identities: MACs several endpoints of one l2 network share.
        for ((network, mac), owners) in &ix.by_mac {
            if owners.len() < 2 {
                continue;
            }
            let key = ((*network).to_owned(), *mac);
            let oldest = location(owners[0]);
            let newest = location(owners[owners.len() - 1]);
            match self.records.get_mut(&key) {
                Some(r) if r.origin == Origin::Identity => {
                    let pending_ok = r.pending.as_ref().is_some_and(|p| ix.exists(p));
                    if !ix.exists(&r.active) {
                        // The active endpoint went: the pending one (or the oldest left)
                        // takes over.
                        let to = if pending_ok {
                            r.pending.clone().unwrap_or(oldest.clone())
                        } else {
                            oldest.clone()
                        };
                        let from = std::mem::replace(&mut r.active, to.clone());
                        r.sequence = r.sequence.wrapping_add(1);
                        out.happened.push(Happened::Moved {
                            network: key.0.clone(),
                            mac: *mac,
                            from,
                            to,
                            sequence: r.sequence,
                        });
                        out.changed = true;
                    }
                    let pending = if r.active == newest {
                        owners.iter().map(|e| location(e)).find(|l| *l != r.active)
                    } else {
                        Some(newest.clone())
                    };
                    if r.pending != pending {
                        r.pending = pending;
                        out.changed = true;
                    }
                }
                _ => {
                    // A learned record of a MAC an endpoint now holds gives way to it.
                    self.insert(MacRecord {
                        network: key.0.clone(),
                        mac: *mac,
                        origin: Origin::Identity,
                        addresses: BTreeSet::new(),
                        active: oldest,
                        pending: Some(newest),
                        sequence: 1,
                        last_seen_ms: now_ms,
                    });
                    out.changed = true;
                }
            }
        }
        let mut forget = Vec::new();
        for (key, r) in &self.records {
            let network = world.networks.get(&key.0);
            let owners = ix.by_mac.get(&(key.0.as_str(), key.1)).map_or(0, Vec::len);
            let why = match r.origin {
                Origin::Identity if owners < 2 => Some("one endpoint holds it again"),
                Origin::Identity => None,
                Origin::Learned => match network.and_then(|n| n.l2.learning) {
                    _ if owners > 0 => Some("an endpoint holds it"),
                    None => Some("the network no longer learns"),
                    Some(_) if !ix.exists(&r.active) => Some("its endpoint is gone"),
                    Some(aging) => (now_ms.saturating_sub(r.last_seen_ms)
                        > u64::from(aging.get()) * 1000)
                        .then_some("not seen for the network's aging time"),
                },
            };
            if let Some(why) = why {
                forget.push((key.clone(), why));
            }
        }
        for (key, why) in forget {
            self.remove(&key);
            out.changed = true;
            out.happened.push(Happened::Forgotten {
                network: key.0,
                mac: key.1,
                why,
            });
        }
        out
    }

    /// Both steps of a batch: the reports of node `node`, then [`LearnedTable::reconcile`].
    pub fn step(
        &mut self,
        world: &World,
        node: &str,
        reports: &[LearnEvent],
        now_ms: u64,
    ) -> Outcome {
        let mut out = if reports.is_empty() {
            Outcome::default()
        } else {
            self.apply_reports(world, node, reports, now_ms)
        };
        out.merge(self.reconcile(world, now_ms));
        out
    }
}

/// Whether address `a` announced on network `network` may be learned: inside its subnet, no
/// endpoint's, not its gateway (the first address of the prefix).
fn admit_address(
    world: &World,
    ix: &Index<'_>,
    network: &str,
    a: IpAddr,
) -> Result<IpAddr, &'static str> {
    let Some(n) = world.networks.get(network) else {
        return Err("the network is gone");
    };
    let subnet: Option<IpNet> = match a {
        IpAddr::V4(_) => n.v4.map(|(p, _)| IpNet::V4(p)),
        IpAddr::V6(_) => n.v6.map(|(p, _)| IpNet::V6(p)),
    };
    let Some(subnet) = subnet.filter(|s| s.contains(&a)) else {
        return Err("outside the network's subnet");
    };
    let gateway = match subnet {
        IpNet::V4(p) => IpAddr::V4(crate::compile::gateway4(p)),
        IpNet::V6(p) => IpAddr::V6(crate::compile::gateway6(p)),
    };
    if a == gateway || a == subnet.network() || a == subnet.broadcast() {
        return Err("the network's gateway, network or broadcast address");
    }
    let held = ix
        .by_location
        .values()
        .any(|e| e.network == network && e.addresses.contains(&a));
    if held {
        return Err("an endpoint's address");
    }
    Ok(a)
}

#[cfg(test)]
mod tests;
