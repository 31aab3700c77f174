//! Kubernetes NetworkPolicy compiled into one node's policy tables (ADR 0028): for every
//! network with endpoints on the node, a **peer-class LPM** and the **policy sets** of its
//! local endpoints, each with its **decisions** ([`lace_shared::policy`] has the contract).
//!
//! # What is compiled
//!
//! - **Relevant policies** of network N: the policies that apply on N (bound to it, or
//!   unbound) and select at least one of N's endpoints on this node. Only they matter here:
//!   a connection's egress is decided on the source's node, its ingress on the destination's.
//! - **Peers** of N: the selector peers, `ipBlock`s and egress named ports of the relevant
//!   policies' rules. An address's **vector** is what those peers say about it: the selector
//!   peers whose pods it belongs to, the blocks that contain it, and for each named port an
//!   egress rule names, the number it resolves to on the pod behind the address.
//! - **Peer classes**: every `ipBlock` `cidr` and `except` is a prefix of the LPM, with the
//!   vector of the addresses whose longest match it is; a pod address whose vector differs from
//!   its longest prefix's gets a host route. Entries with equal vectors share a class, so two
//!   addresses are in one class exactly when every peer treats them alike. An address without
//!   an entry is class 0 (the empty vector). The addresses that count are those of pods'
//!   endpoints on N and on the networks routing policy joins to N; where two pods claim one
//!   address, the first by namespace and name holds it.
//! - **Policy sets**: endpoints selected by the same relevant policies, with the same
//!   resolutions of the ingress named ports those policies use, share a set. A set is isolated
//!   for a direction when one of its policies is.
//! - **Decisions**: for a set, a direction it isolates and a class, the union of the ports of
//!   every rule of that direction whose peers match the class's vector (a rule without peers
//!   matches every class, a rule without ports allows everything); none when nothing matches.
//!
//! # Incremental
//!
//! The node-wide [`index`] keeps identities and selector-peer memberships between plans. Per
//! network, a pod change re-derives only that pod's host routes; a class that appears gets its
//! decisions in every set, one that disappears loses them; an endpoint whose selection changes
//! moves to another set. A change to the relevant policies themselves (a policy added,
//! changed or removed, an endpoint that brings a policy no other local endpoint had) rebuilds
//! that network's policy tables. Class and set numbers are kept for as long as their vector or
//! key exists, so an unchanged entry is never rewritten; a fresh compilation may number them
//! differently ([`NodeTables::renumbered`] compares the two).
//!
//! # Limits
//!
//! A network whose policy tables would exceed [`PolicyLimits`] keeps its last good tables
//! (ports that appeared since get no set); every relevant policy gets a [`NoteKind::Limit`]
//! note saying what overflowed.

mod index;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use lace_shared::policy::{
    PeerClass, PolicyDir, PolicySet, PolicySetId, PortRange, Ports, MAX_PORTSET_CHAIN,
    PORTSET_RANGES,
};
use lace_shared::types::{NetworkId, PortId};

use super::{Change, NodeTables, Note, NoteKind};
use crate::netpol::{resolve_named, IpBlock, PortMatch};
use crate::world::{AttachmentKey, EndpointModel, NamespacedName, World};

use index::{CPeer, CRule, Index, PeerId};

/// How large one network's policy tables may grow before the compiler keeps its last good
/// ones instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyLimits {
    /// Peer classes.
    pub max_classes: u32,
    /// Decisions over all the network's sets.
    pub max_decisions: usize,
    /// Port ranges of one decision (what a chain of port-set records holds).
    pub max_ranges: usize,
}

impl Default for PolicyLimits {
    fn default() -> Self {
        PolicyLimits {
            max_classes: 1 << 20,
            max_decisions: 1 << 22,
            max_ranges: MAX_PORTSET_CHAIN * PORTSET_RANGES,
        }
    }
}

/// One policy set: its record and its decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetTables {
    /// The set's record (network, isolation).
    pub set: PolicySet,
    /// (direction, class) → ports allowed; a missing entry denies.
    pub decisions: BTreeMap<(PolicyDir, PeerClass), Ports>,
}

/// Shards of a [`PeerMap`].
const PEER_SHARDS: usize = 64;

/// A network's peer-class LPM entries (IPv4 and IPv6 prefixes, host bits zero → class), kept
/// in shards by a hash of the prefix: a change copies and compares one shard, not the whole
/// map (a network's pods are tens of thousands of host routes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerMap {
    shards: Vec<Arc<BTreeMap<IpNet, PeerClass>>>,
}

impl Default for PeerMap {
    fn default() -> Self {
        // Empty shards share one map until written (`Arc::make_mut` copies it then).
        let empty = Arc::new(BTreeMap::new());
        PeerMap {
            shards: (0..PEER_SHARDS).map(|_| Arc::clone(&empty)).collect(),
        }
    }
}

fn shard_of(p: &IpNet) -> usize {
    let bits = match p.network() {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    };
    let h = (bits as u64 ^ (bits >> 64) as u64 ^ u64::from(p.prefix_len()))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 58) as usize % PEER_SHARDS
}

impl PeerMap {
    /// The class of prefix `p`'s entry.
    pub fn get(&self, p: &IpNet) -> Option<PeerClass> {
        self.shards[shard_of(p)].get(p).copied()
    }

    /// Sets an entry; returns the class it had.
    pub fn insert(&mut self, p: IpNet, c: PeerClass) -> Option<PeerClass> {
        Arc::make_mut(&mut self.shards[shard_of(&p)]).insert(p, c)
    }

    /// Removes an entry; returns the class it had.
    pub fn remove(&mut self, p: &IpNet) -> Option<PeerClass> {
        let s = &mut self.shards[shard_of(p)];
        if !s.contains_key(p) {
            return None;
        }
        Arc::make_mut(s).remove(p)
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.is_empty())
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&IpNet, &PeerClass)> {
        self.shards.iter().flat_map(|s| s.iter())
    }

    /// Every entry, by prefix.
    pub fn sorted(&self) -> BTreeMap<IpNet, PeerClass> {
        self.iter().map(|(p, c)| (*p, *c)).collect()
    }

    /// Calls `f(prefix, new class)` for every entry that differs from `old` (`None`: removed),
    /// skipping shards both share.
    pub fn diff<E>(
        old: &PeerMap,
        new: &PeerMap,
        mut f: impl FnMut(&IpNet, Option<&PeerClass>) -> Result<(), E>,
    ) -> Result<(), E> {
        for (a, b) in old.shards.iter().zip(&new.shards) {
            if Arc::ptr_eq(a, b) {
                continue;
            }
            crate::diff::merge_diff(a, b, |p, _, c| f(p, c))?;
        }
        Ok(())
    }
}

impl FromIterator<(IpNet, PeerClass)> for PeerMap {
    fn from_iter<I: IntoIterator<Item = (IpNet, PeerClass)>>(it: I) -> Self {
        let mut m = PeerMap::default();
        for (p, c) in it {
            m.insert(p, c);
        }
        m
    }
}

/// One network's policy tables on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyTables {
    /// The peer-class LPM.
    pub peers: PeerMap,
    /// The policy sets of the network's local endpoints.
    pub sets: BTreeMap<PolicySetId, Arc<SetTables>>,
}

/// An element of a vector (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Elem {
    /// Member of a selector peer.
    Peer(PeerId),
    /// Inside block (index into the network's blocks).
    Block(u32),
    /// Named port group (index into the network's egress named ports) resolves to a port.
    Named(u32, u16),
}

type Vector = Arc<[Elem]>;

/// What decides a policy set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SetKey {
    /// The selecting policies, sorted.
    policies: Vec<NamespacedName>,
    /// Each ingress named port (protocol, name) of those policies with what it resolves to on
    /// the endpoint's pod, sorted.
    ingress_named: Vec<(u8, String, Option<u16>)>,
}

/// Policy set numbers, node-wide (they are global in the tables).
#[derive(Debug, Default)]
struct SetIds {
    used: BTreeSet<u32>,
    /// Numbers a frozen network's last good tables still use.
    reserved: BTreeSet<u32>,
}

impl SetIds {
    fn alloc(&mut self) -> PolicySetId {
        let mut id = 1;
        // Both sets are sorted: walk them together for the lowest free number.
        let mut taken = self
            .used
            .iter()
            .chain(self.reserved.iter())
            .copied()
            .collect::<Vec<_>>();
        taken.sort_unstable();
        for t in taken {
            if t == id {
                id += 1;
            } else if t > id {
                break;
            }
        }
        self.used.insert(id);
        PolicySetId(id)
    }

    fn free(&mut self, id: PolicySetId) {
        self.used.remove(&id.0);
    }
}

#[derive(Debug, Clone)]
struct Local {
    pod: NamespacedName,
    port: PortId,
    key: Option<Arc<SetKey>>,
}

#[derive(Debug)]
struct SetState {
    id: PolicySetId,
    refs: usize,
    /// The key's policies, compiled (in the key's order).
    policies: Vec<Arc<index::CPolicy>>,
}

#[derive(Debug)]
struct Class {
    id: u32,
    refs: usize,
}

/// One network's policy state.
#[derive(Debug)]
struct NetState {
    id: NetworkId,
    /// Networks whose pod addresses count in this one's LPM: itself and those routing policy
    /// joins to it.
    joined: BTreeSet<String>,
    locals: BTreeMap<AttachmentKey, Local>,
    /// Relevant policies with the number of local endpoints each selects.
    relevant: BTreeMap<NamespacedName, usize>,
    sel_peers: HashSet<PeerId>,
    blocks: Vec<IpBlock>,
    block_ix: HashMap<IpBlock, u32>,
    named: Vec<(u8, String)>,
    named_ix: HashMap<(u8, String), u32>,
    /// Block prefixes with their vectors; prefix lengths present, per family.
    prefix_vec: HashMap<IpNet, Vector>,
    lens4: BTreeSet<u8>,
    lens6: BTreeSet<u8>,
    /// Pods claiming each address that counts, and the addresses each pod claims.
    claims: HashMap<IpAddr, BTreeSet<NamespacedName>>,
    pod_claims: HashMap<NamespacedName, Vec<IpAddr>>,
    /// The LPM with each entry's vector.
    lpm: BTreeMap<IpNet, Vector>,
    classes: HashMap<Vector, Class>,
    class_vec: BTreeMap<u32, Vector>,
    sets: HashMap<Arc<SetKey>, SetState>,
    out: Arc<PolicyTables>,
    ports: BTreeMap<PortId, PolicySetId>,
    /// The last good output while the current one exceeds the limits.
    frozen: Option<(Arc<PolicyTables>, BTreeMap<PortId, PolicySetId>)>,
    notes: Vec<Note>,
}

/// What one rule allows, accumulated over rules.
#[derive(Debug, Default)]
enum Acc {
    #[default]
    Nothing,
    All,
    Ranges(Vec<PortRange>),
}

impl Acc {
    fn add(&mut self, r: PortRange) {
        match self {
            Acc::All => {}
            Acc::Nothing => *self = Acc::Ranges(vec![r]),
            Acc::Ranges(v) => v.push(r),
        }
    }
    fn into_ports(self) -> Option<Ports> {
        match self {
            Acc::Nothing => None,
            Acc::All => Some(Ports::All),
            Acc::Ranges(v) => Some(Ports::Ranges(v).normalized()),
        }
    }
}

fn policy_obj(k: &NamespacedName) -> String {
    format!("NetworkPolicy {k}")
}

impl NetState {
    fn new(id: NetworkId) -> NetState {
        NetState {
            id,
            joined: BTreeSet::new(),
            locals: BTreeMap::new(),
            relevant: BTreeMap::new(),
            sel_peers: HashSet::new(),
            blocks: Vec::new(),
            block_ix: HashMap::new(),
            named: Vec::new(),
            named_ix: HashMap::new(),
            prefix_vec: HashMap::new(),
            lens4: BTreeSet::new(),
            lens6: BTreeSet::new(),
            claims: HashMap::new(),
            pod_claims: HashMap::new(),
            lpm: BTreeMap::new(),
            classes: HashMap::new(),
            class_vec: BTreeMap::new(),
            sets: HashMap::new(),
            out: Arc::new(PolicyTables::default()),
            ports: BTreeMap::new(),
            frozen: None,
            notes: Vec::new(),
        }
    }

    /// The key of a local endpoint of pod `pod`: None when no policy selects it.
    fn key_of(ix: &Index, net: &str, pod: &NamespacedName) -> Option<Arc<SetKey>> {
        let entry = ix.pods.get(pod)?;
        let (ns, labels) = ix.ident(entry.ident);
        let policies = ix.selecting(net, ns, labels);
        if policies.is_empty() {
            return None;
        }
        let mut ingress_named: Vec<(u8, String, Option<u16>)> = Vec::new();
        for k in &policies {
            for r in ix.policies[k].rules(true).into_iter().flatten() {
                for m in &r.ports {
                    if let PortMatch::Named { proto, name } = m {
                        ingress_named.push((
                            *proto,
                            name.clone(),
                            resolve_named(&entry.ports, *proto, name),
                        ));
                    }
                }
            }
        }
        ingress_named.sort();
        ingress_named.dedup();
        Some(Arc::new(SetKey {
            policies,
            ingress_named,
        }))
    }

    /// The relevant policies the local endpoints' keys name.
    fn relevant_of(&self) -> BTreeMap<NamespacedName, usize> {
        let mut r = BTreeMap::new();
        for l in self.locals.values() {
            for p in l.key.iter().flat_map(|k| &k.policies) {
                *r.entry(p.clone()).or_insert(0) += 1;
            }
        }
        r
    }

    /// Rebuilds everything from the index (see the module docs).
    fn rebuild(
        &mut self,
        ix: &Index,
        world: &World,
        name: &str,
        locals: Option<&BTreeMap<AttachmentKey, EndpointModel>>,
        ids: &mut SetIds,
    ) {
        for s in self.sets.values() {
            ids.free(s.id);
        }
        let id = self.id;
        let frozen = self.frozen.take();
        *self = NetState::new(id);
        self.frozen = frozen;
        self.joined = joined(world, name);
        for (k, e) in locals.into_iter().flatten() {
            let pod = NamespacedName::new(e.namespace.clone(), e.pod.clone());
            let key = Self::key_of(ix, name, &pod);
            self.locals.insert(
                k.clone(),
                Local {
                    pod,
                    port: e.port,
                    key,
                },
            );
        }
        self.relevant = self.relevant_of();
        // The peers of the relevant policies.
        let mut blocks = BTreeSet::new();
        let mut named = BTreeSet::new();
        for p in self.relevant.keys() {
            let pol = &ix.policies[p];
            for (ingress, r) in pol
                .rules(true)
                .into_iter()
                .flatten()
                .map(|r| (true, r))
                .chain(pol.rules(false).into_iter().flatten().map(|r| (false, r)))
            {
                for peer in &r.peers {
                    match peer {
                        CPeer::Sel(id) => {
                            self.sel_peers.insert(*id);
                        }
                        CPeer::Block(b) => {
                            blocks.insert(b.clone());
                        }
                    }
                }
                if !ingress {
                    for m in &r.ports {
                        if let PortMatch::Named { proto, name } = m {
                            named.insert((*proto, name.clone()));
                        }
                    }
                }
            }
        }
        self.blocks = blocks.into_iter().collect();
        self.block_ix = self
            .blocks
            .iter()
            .enumerate()
            .map(|(i, b)| (b.clone(), i as u32))
            .collect();
        self.named = named.into_iter().collect();
        self.named_ix = self
            .named
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as u32))
            .collect();
        // Block prefixes and their vectors.
        let mut prefixes: BTreeSet<IpNet> = BTreeSet::new();
        for b in &self.blocks {
            prefixes.insert(b.cidr);
            prefixes.extend(b.except.iter().copied());
        }
        for p in prefixes {
            let v: Vec<Elem> = self
                .blocks
                .iter()
                .enumerate()
                .filter(|(_, b)| b.cidr.contains(&p) && !b.except.iter().any(|e| e.contains(&p)))
                .map(|(i, _)| Elem::Block(i as u32))
                .collect();
            match p {
                IpNet::V4(_) => self.lens4.insert(p.prefix_len()),
                IpNet::V6(_) => self.lens6.insert(p.prefix_len()),
            };
            self.prefix_vec.insert(p, v.into());
        }
        let mut lpm: Vec<(IpNet, Vector)> = self
            .prefix_vec
            .iter()
            .map(|(p, v)| (*p, Arc::clone(v)))
            .collect();
        lpm.sort_by_key(|a| a.0);
        for (p, v) in lpm {
            self.set_entry(p, Some(v));
        }
        // Pod addresses.
        let claimed: Vec<(NamespacedName, Vec<IpAddr>)> = ix
            .pods
            .iter()
            .map(|(k, e)| (k.clone(), self.counted(&e.addrs)))
            .filter(|(_, a)| !a.is_empty())
            .collect();
        for (k, addrs) in claimed {
            for a in &addrs {
                self.claims.entry(*a).or_default().insert(k.clone());
            }
            self.pod_claims.insert(k, addrs);
        }
        let mut addrs: Vec<IpAddr> = self.claims.keys().copied().collect();
        addrs.sort();
        for a in addrs {
            self.refresh_host(ix, a);
        }
        // Sets.
        let keys: Vec<Arc<SetKey>> = self.locals.values().filter_map(|l| l.key.clone()).collect();
        for k in keys {
            self.ref_set(ix, &k, ids);
        }
        self.ports = self
            .locals
            .values()
            .filter_map(|l| Some((l.port, self.sets.get(l.key.as_ref()?)?.id)))
            .collect();
    }

    /// The addresses among `addrs` that count in this network.
    fn counted(&self, addrs: &[(String, IpAddr)]) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = addrs
            .iter()
            .filter(|(n, _)| self.joined.contains(n))
            .map(|(_, a)| *a)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The vector of the longest block prefix containing `a` (empty if none).
    fn block_vec(&self, a: IpAddr) -> Vector {
        let lens = match a {
            IpAddr::V4(_) => &self.lens4,
            IpAddr::V6(_) => &self.lens6,
        };
        for &len in lens.iter().rev() {
            let p = IpNet::new(a, len).map(|p| p.trunc());
            if let Some(v) = p.ok().and_then(|p| self.prefix_vec.get(&p)) {
                return Arc::clone(v);
            }
        }
        Arc::from([])
    }

    /// The vector of pod `pod`'s address `a`.
    fn pod_vec(&self, ix: &Index, pod: &NamespacedName, a: IpAddr) -> Vector {
        let Some(e) = ix.pods.get(pod) else {
            return self.block_vec(a);
        };
        let mut v: Vec<Elem> = ix
            .ident_peers(e.ident)
            .iter()
            .filter(|p| self.sel_peers.contains(p))
            .map(|&p| Elem::Peer(p))
            .collect();
        v.extend(self.block_vec(a).iter().copied());
        for (g, (proto, name)) in self.named.iter().enumerate() {
            if let Some(port) = resolve_named(&e.ports, *proto, name) {
                v.push(Elem::Named(g as u32, port));
            }
        }
        v.sort_unstable();
        v.into()
    }

    /// Recomputes the LPM entry of address `a` from its claimants.
    fn refresh_host(&mut self, ix: &Index, a: IpAddr) {
        let p = IpNet::from(a);
        let owner = self.claims.get(&a).and_then(|c| c.iter().next()).cloned();
        let new = match owner {
            Some(o) => {
                let v = self.pod_vec(ix, &o, a);
                if v == self.block_vec(a) {
                    // The prefixes say the same: no host route (unless the block itself is
                    // this very host prefix).
                    self.prefix_vec.get(&p).cloned()
                } else {
                    Some(v)
                }
            }
            None => self.prefix_vec.get(&p).cloned(),
        };
        self.set_entry(p, new);
    }

    /// Sets (or removes) the LPM entry `p`, keeping classes, decisions and the output in step.
    fn set_entry(&mut self, p: IpNet, v: Option<Vector>) {
        let old = match &v {
            Some(v) => self.lpm.insert(p, Arc::clone(v)),
            None => self.lpm.remove(&p),
        };
        if old == v {
            return;
        }
        let class = v.map(|v| self.ref_class(v));
        {
            let out = Arc::make_mut(&mut self.out);
            match class {
                Some(c) => {
                    out.peers.insert(p, c);
                }
                None => {
                    out.peers.remove(&p);
                }
            }
        }
        if let Some(o) = old {
            self.unref_class(&o);
        }
    }

    fn ref_class(&mut self, v: Vector) -> PeerClass {
        if let Some(c) = self.classes.get_mut(&v) {
            c.refs += 1;
            return PeerClass(c.id);
        }
        let id = (1..)
            .zip(self.class_vec.keys())
            .find(|(want, have)| *want != **have)
            .map_or(self.class_vec.len() as u32 + 1, |(want, _)| want);
        self.classes.insert(Arc::clone(&v), Class { id, refs: 1 });
        self.class_vec.insert(id, Arc::clone(&v));
        // Every set gets its decisions for the new class.
        let sets: Vec<(Arc<SetKey>, PolicySetId, Vec<Arc<index::CPolicy>>)> = self
            .sets
            .iter()
            .map(|(k, s)| (Arc::clone(k), s.id, s.policies.clone()))
            .collect();
        for (k, sid, pols) in sets {
            let d = self.decide(&pols, &k, &v);
            let out = Arc::make_mut(&mut self.out);
            let st = Arc::make_mut(out.sets.get_mut(&sid).expect("set in the output"));
            for (dir, ports) in d {
                st.decisions.insert((dir, PeerClass(id)), ports);
            }
        }
        PeerClass(id)
    }

    fn unref_class(&mut self, v: &Vector) {
        let Some(c) = self.classes.get_mut(v) else {
            return;
        };
        c.refs -= 1;
        if c.refs > 0 {
            return;
        }
        let id = c.id;
        self.classes.remove(v);
        self.class_vec.remove(&id);
        let out = Arc::make_mut(&mut self.out);
        for st in out.sets.values_mut() {
            if st
                .decisions
                .contains_key(&(PolicyDir::Ingress, PeerClass(id)))
                || st
                    .decisions
                    .contains_key(&(PolicyDir::Egress, PeerClass(id)))
            {
                let st = Arc::make_mut(st);
                st.decisions.remove(&(PolicyDir::Ingress, PeerClass(id)));
                st.decisions.remove(&(PolicyDir::Egress, PeerClass(id)));
            }
        }
    }

    fn matches(&self, rule: &CRule, v: &[Elem]) -> bool {
        rule.peers.is_empty()
            || rule.peers.iter().any(|p| {
                let e = match p {
                    CPeer::Sel(id) => Elem::Peer(*id),
                    CPeer::Block(b) => match self.block_ix.get(b) {
                        Some(&i) => Elem::Block(i),
                        None => return false,
                    },
                };
                v.binary_search(&e).is_ok()
            })
    }

    /// The decisions of set `key` (whose policies are `pols`) for a class with vector `v`.
    fn decide(
        &self,
        pols: &[Arc<index::CPolicy>],
        key: &SetKey,
        v: &[Elem],
    ) -> Vec<(PolicyDir, Ports)> {
        let mut out = Vec::with_capacity(2);
        for (dir, ingress) in [(PolicyDir::Ingress, true), (PolicyDir::Egress, false)] {
            let mut isolated = false;
            let mut acc = Acc::Nothing;
            for p in pols {
                let Some(rules) = p.rules(ingress) else {
                    continue;
                };
                isolated = true;
                for r in rules {
                    if matches!(acc, Acc::All) {
                        break;
                    }
                    if !self.matches(r, v) {
                        continue;
                    }
                    if r.ports.is_empty() {
                        acc = Acc::All;
                        continue;
                    }
                    for m in &r.ports {
                        let range = match m {
                            PortMatch::AnyPort(proto) => Some((*proto, 0, u16::MAX)),
                            PortMatch::Range { proto, lo, hi } => Some((*proto, *lo, *hi)),
                            PortMatch::Named { proto, name } => {
                                let n = if ingress {
                                    key.ingress_named
                                        .iter()
                                        .find(|(p, nm, _)| p == proto && nm == name)
                                        .and_then(|x| x.2)
                                } else {
                                    self.named_ix.get(&(*proto, name.clone())).and_then(|&g| {
                                        v.iter().find_map(|e| match e {
                                            Elem::Named(h, port) if *h == g => Some(*port),
                                            _ => None,
                                        })
                                    })
                                };
                                n.map(|n| (*proto, n, n))
                            }
                        };
                        if let Some((proto, lo, hi)) = range {
                            acc.add(PortRange { proto, lo, hi });
                        }
                    }
                }
            }
            if isolated {
                if let Some(ports) = acc.into_ports() {
                    out.push((dir, ports));
                }
            }
        }
        out
    }

    /// Takes a reference on the set of `key`, creating it (with every decision) if new.
    fn ref_set(&mut self, ix: &Index, key: &Arc<SetKey>, ids: &mut SetIds) -> PolicySetId {
        if let Some(s) = self.sets.get_mut(key) {
            s.refs += 1;
            return s.id;
        }
        let id = ids.alloc();
        let pols: Vec<Arc<index::CPolicy>> = key
            .policies
            .iter()
            .map(|p| Arc::clone(&ix.policies[p]))
            .collect();
        let set = PolicySet {
            network: self.id,
            ingress_isolated: pols.iter().any(|p| p.ingress.is_some()),
            egress_isolated: pols.iter().any(|p| p.egress.is_some()),
        };
        let mut decisions = BTreeMap::new();
        for (dir, ports) in self.decide(&pols, key, &[]) {
            decisions.insert((dir, PeerClass::WORLD), ports);
        }
        for (&c, v) in &self.class_vec {
            for (dir, ports) in self.decide(&pols, key, v) {
                decisions.insert((dir, PeerClass(c)), ports);
            }
        }
        Arc::make_mut(&mut self.out)
            .sets
            .insert(id, Arc::new(SetTables { set, decisions }));
        self.sets.insert(
            Arc::clone(key),
            SetState {
                id,
                refs: 1,
                policies: pols,
            },
        );
        id
    }

    fn unref_set(&mut self, key: &Arc<SetKey>, ids: &mut SetIds) {
        let Some(s) = self.sets.get_mut(key) else {
            return;
        };
        s.refs -= 1;
        if s.refs > 0 {
            return;
        }
        let id = s.id;
        self.sets.remove(key);
        Arc::make_mut(&mut self.out).sets.remove(&id);
        ids.free(id);
    }

    /// Re-reads pod `pod` (its addresses' entries, its local endpoints' sets). Returns false
    /// when the relevant policies changed: the caller must rebuild.
    fn update_pod(
        &mut self,
        ix: &Index,
        net: &str,
        pod: &NamespacedName,
        ids: &mut SetIds,
    ) -> bool {
        // Local endpoints of the pod first: a new selection may change the relevant policies.
        let locals: Vec<AttachmentKey> = self
            .locals
            .iter()
            .filter(|(_, l)| l.pod == *pod)
            .map(|(k, _)| k.clone())
            .collect();
        if !self.rekey(ix, net, &locals, ids) {
            return false;
        }
        let new = ix
            .pods
            .get(pod)
            .map(|e| self.counted(&e.addrs))
            .unwrap_or_default();
        let old = self.pod_claims.remove(pod).unwrap_or_default();
        for a in &old {
            if let Some(c) = self.claims.get_mut(a) {
                c.remove(pod);
                if c.is_empty() {
                    self.claims.remove(a);
                }
            }
        }
        for a in &new {
            self.claims.entry(*a).or_default().insert(pod.clone());
        }
        let mut touched: Vec<IpAddr> = old.iter().chain(&new).copied().collect();
        touched.sort();
        touched.dedup();
        if !new.is_empty() {
            self.pod_claims.insert(pod.clone(), new);
        }
        for a in touched {
            self.refresh_host(ix, a);
        }
        true
    }

    /// Recomputes the keys of local endpoints `eps` (which were re-read into `locals`). False
    /// when the relevant policies changed.
    fn rekey(&mut self, ix: &Index, net: &str, eps: &[AttachmentKey], ids: &mut SetIds) -> bool {
        if eps.is_empty() {
            return true;
        }
        let mut changes = Vec::new();
        for k in eps {
            let Some(l) = self.locals.get(k) else {
                continue;
            };
            let key = Self::key_of(ix, net, &l.pod);
            if key != l.key {
                changes.push((k.clone(), l.key.clone(), key));
            }
        }
        for (k, _, new) in &changes {
            if let Some(l) = self.locals.get_mut(k) {
                l.key = new.clone();
            }
        }
        if self.relevant_of().keys().ne(self.relevant.keys()) {
            return false;
        }
        self.relevant = self.relevant_of();
        for (k, old, new) in changes {
            if let Some(n) = &new {
                let id = self.ref_set(ix, n, ids);
                if let Some(l) = self.locals.get(&k) {
                    self.ports.insert(l.port, id);
                }
            } else if let Some(l) = self.locals.get(&k) {
                self.ports.remove(&l.port);
            }
            if let Some(o) = &old {
                self.unref_set(o, ids);
            }
        }
        true
    }

    /// Adds, changes or removes local endpoint `k` (from `locals`). False when the relevant
    /// policies changed.
    fn local_changed(
        &mut self,
        ix: &Index,
        net: &str,
        k: &AttachmentKey,
        e: Option<&EndpointModel>,
        ids: &mut SetIds,
    ) -> bool {
        let old = self.locals.remove(k);
        let new = e.map(|e| {
            let pod = NamespacedName::new(e.namespace.clone(), e.pod.clone());
            let key = Self::key_of(ix, net, &pod);
            Local {
                pod,
                port: e.port,
                key,
            }
        });
        if let Some(n) = &new {
            self.locals.insert(k.clone(), n.clone());
        }
        if self.relevant_of().keys().ne(self.relevant.keys()) {
            return false;
        }
        self.relevant = self.relevant_of();
        if let Some(n) = &new {
            if let Some(key) = &n.key {
                let id = self.ref_set(ix, key, ids);
                self.ports.insert(n.port, id);
            }
        }
        if let Some(o) = old.and_then(|o| o.key) {
            self.unref_set(&o, ids);
        }
        // Ports may be shared by two endpoints only in conflict; keep the map exact.
        self.ports = self
            .locals
            .values()
            .filter_map(|l| Some((l.port, self.sets.get(l.key.as_ref()?)?.id)))
            .collect();
        true
    }

    /// Whether the current output fits the limits; why not otherwise.
    fn over_limits(&self, limits: &PolicyLimits) -> Option<String> {
        if self.classes.len() > limits.max_classes as usize {
            return Some(format!(
                "the network's policies need {} peer classes; at most {} fit",
                self.classes.len(),
                limits.max_classes
            ));
        }
        let decisions: usize = self.out.sets.values().map(|s| s.decisions.len()).sum();
        if decisions > limits.max_decisions {
            return Some(format!(
                "the network's policies need {decisions} decisions (policy sets × directions × \
                 peer classes); at most {} fit",
                limits.max_decisions
            ));
        }
        let widest = self
            .out
            .sets
            .values()
            .flat_map(|s| s.decisions.values())
            .map(|p| match p {
                Ports::All => 0,
                Ports::Ranges(r) => r.len(),
            })
            .max()
            .unwrap_or(0);
        if widest > limits.max_ranges {
            return Some(format!(
                "a decision needs {widest} port ranges; at most {} fit in one",
                limits.max_ranges
            ));
        }
        None
    }
}

/// Network `name` and the networks routing policy joins to it.
fn joined(world: &World, name: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::from([name.to_owned()]);
    for p in &world.routing {
        let from_src = p.sources.iter().any(|s| s == name);
        if from_src {
            out.insert(p.destination.clone());
        }
        if p.destination == name {
            out.extend(p.sources.iter().cloned());
        }
    }
    out
}

/// The node's policy compiler: the index and every network's state.
#[derive(Debug, Default)]
pub(super) struct PolicyCompiler {
    index: Index,
    nets: BTreeMap<String, NetState>,
    ids: SetIds,
    limits: PolicyLimits,
}

impl PolicyCompiler {
    /// Compiles everything from nothing. `locals(net)` gives network `net`'s endpoints on this
    /// node.
    pub fn build<'a>(
        world: &World,
        nets: impl Iterator<Item = (&'a String, &'a BTreeMap<AttachmentKey, EndpointModel>)>,
        limits: PolicyLimits,
    ) -> PolicyCompiler {
        let mut c = PolicyCompiler {
            index: Index::build(world),
            limits,
            ..PolicyCompiler::default()
        };
        for (name, locals) in nets {
            c.rebuild(world, name, Some(locals));
        }
        c
    }

    fn rebuild(
        &mut self,
        world: &World,
        name: &str,
        locals: Option<&BTreeMap<AttachmentKey, EndpointModel>>,
    ) {
        let Some(net) = world.networks.get(name) else {
            if let Some(st) = self.nets.remove(name) {
                self.release(st);
            }
            return;
        };
        if locals.is_none_or(BTreeMap::is_empty) {
            if let Some(st) = self.nets.remove(name) {
                self.release(st);
            }
            return;
        }
        let st = self
            .nets
            .entry(name.to_owned())
            .or_insert_with(|| NetState::new(net.id));
        if st.id != net.id {
            for s in st.sets.values() {
                self.ids.free(s.id);
            }
            st.sets.clear();
            st.id = net.id;
        }
        let good = (Arc::clone(&st.out), st.ports.clone());
        st.rebuild(&self.index, world, name, locals, &mut self.ids);
        Self::check(st, &mut self.ids, &self.limits, good);
    }

    fn release(&mut self, st: NetState) {
        for s in st.sets.values() {
            self.ids.free(s.id);
        }
        if let Some((f, _)) = &st.frozen {
            for id in f.sets.keys() {
                self.ids.reserved.remove(&id.0);
            }
        }
    }

    /// Freezes (or thaws) `st`'s output after a change, against the limits; sets its notes.
    fn check(
        st: &mut NetState,
        ids: &mut SetIds,
        limits: &PolicyLimits,
        good: (Arc<PolicyTables>, BTreeMap<PortId, PolicySetId>),
    ) {
        st.notes.clear();
        match st.over_limits(limits) {
            None => {
                if let Some((f, _)) = st.frozen.take() {
                    for id in f.sets.keys() {
                        ids.reserved.remove(&id.0);
                    }
                }
            }
            Some(why) => {
                if st.frozen.is_none() {
                    for id in good.0.sets.keys() {
                        ids.reserved.insert(id.0);
                    }
                    st.frozen = Some(good);
                }
                for k in st.relevant.keys() {
                    st.notes.push(Note {
                        kind: NoteKind::Limit,
                        object: policy_obj(k),
                        message: format!(
                            "{why}; the network's last good policy tables stay in force until \
                             its policies shrink"
                        ),
                    });
                }
            }
        }
    }

    /// Applies `changes` (every change since the last call), `locals` being the local
    /// endpoints by network after them. Returns the networks whose output changed from or to
    /// having policy sets (their settings' `stateful` flips).
    pub fn update<'a>(
        &mut self,
        world: &World,
        changes: &[Change],
        locals: impl Fn(&str) -> Option<&'a BTreeMap<AttachmentKey, EndpointModel>>,
        wanted: &BTreeSet<String>,
    ) -> BTreeSet<String> {
        let before: BTreeSet<String> = self
            .nets
            .keys()
            .filter(|n| self.has_sets(n))
            .cloned()
            .collect();
        let mut all = false;
        let mut full: BTreeSet<String> = BTreeSet::new();
        let mut pods: BTreeSet<NamespacedName> = BTreeSet::new();
        let mut eps: BTreeSet<AttachmentKey> = BTreeSet::new();
        for c in changes {
            match c {
                Change::All | Change::Node(_) | Change::Routing => all = true,
                Change::Network(n) => {
                    full.insert(n.clone());
                }
                Change::Allocation { .. } | Change::Service(_) => {}
                Change::Endpoint(k) => {
                    pods.extend(self.index.endpoint_changed(world, k));
                    eps.insert(k.clone());
                }
                Change::Pod(k) => {
                    pods.insert(k.clone());
                }
                Change::Namespace(ns) => {
                    if self.index.namespace_changed(world, ns) {
                        pods.extend(self.index.pods_in(ns).cloned());
                    }
                }
                Change::NetworkPolicy(k) => {
                    for n in self.index.set_policy(world, k).into_iter().flatten() {
                        match n {
                            None => all = true,
                            Some(n) => {
                                full.insert(n);
                            }
                        }
                    }
                }
            }
        }
        for p in &pods {
            self.index.set_pod(world, p);
        }
        let gone: Vec<String> = self
            .nets
            .keys()
            .filter(|n| !wanted.contains(*n))
            .cloned()
            .collect();
        for n in gone {
            if let Some(st) = self.nets.remove(&n) {
                self.release(st);
            }
        }
        for name in wanted {
            let rebuild = all
                || full.contains(name)
                || !self.nets.contains_key(name)
                || world.networks.get(name).map(|n| n.id) != self.nets.get(name).map(|s| s.id);
            if rebuild {
                self.rebuild(world, name, locals(name));
                continue;
            }
            let st = self.nets.get_mut(name).expect("checked above");
            let good = (Arc::clone(&st.out), st.ports.clone());
            let mut ok = true;
            for k in &eps {
                let e = world.endpoints.get(k).filter(|e| {
                    e.network == *name && locals(name).is_some_and(|m| m.contains_key(k))
                });
                if e.is_none() && !st.locals.contains_key(k) {
                    continue;
                }
                if !st.local_changed(&self.index, name, k, e, &mut self.ids) {
                    ok = false;
                    break;
                }
            }
            if ok {
                for p in &pods {
                    if !st.update_pod(&self.index, name, p, &mut self.ids) {
                        ok = false;
                        break;
                    }
                }
            }
            if ok {
                Self::check(st, &mut self.ids, &self.limits, good);
            } else {
                self.rebuild(world, name, locals(name));
            }
        }
        let after: BTreeSet<String> = self
            .nets
            .keys()
            .filter(|n| self.has_sets(n))
            .cloned()
            .collect();
        before.symmetric_difference(&after).cloned().collect()
    }

    /// Whether network `name`'s output has policy sets.
    pub fn has_sets(&self, name: &str) -> bool {
        self.output(name).is_some_and(|(t, _)| !t.sets.is_empty())
    }

    /// Network `name`'s output: its tables and its local ports' sets.
    pub fn output(
        &self,
        name: &str,
    ) -> Option<(&Arc<PolicyTables>, &BTreeMap<PortId, PolicySetId>)> {
        let st = self.nets.get(name)?;
        Some(match &st.frozen {
            Some((t, p)) => (t, p),
            None => (&st.out, &st.ports),
        })
    }

    /// Every network's notes, and those of policies bound to networks that do not exist.
    pub fn notes(&self, world: &World) -> Vec<Note> {
        let mut out: Vec<Note> = self.nets.values().flat_map(|s| s.notes.clone()).collect();
        for (k, p) in &self.index.policies {
            if let Some(n) = &p.network {
                if !world.networks.contains_key(n) {
                    out.push(Note {
                        kind: NoteKind::Inconsistent,
                        object: policy_obj(k),
                        message: format!(
                            "bound to network {n}, which does not exist; it applies nowhere \
                             until the network exists or a binding policy binds it elsewhere"
                        ),
                    });
                }
            }
        }
        out
    }

    /// Puts the policy tables into `t` and the sets into its ports.
    pub fn assemble(&self, world: &World, t: &mut NodeTables) {
        for name in self.nets.keys() {
            let Some(net) = world.networks.get(name) else {
                continue;
            };
            let Some((tables, ports)) = self.output(name) else {
                continue;
            };
            if !t.networks.contains_key(&net.id) {
                continue;
            }
            if !tables.peers.is_empty() || !tables.sets.is_empty() {
                t.policies.insert(net.id, Arc::clone(tables));
            }
            for (port, set) in ports {
                if let Some(p) = t.ports.get_mut(port) {
                    if p.network == net.id {
                        p.policy = *set;
                    }
                }
            }
        }
    }
}

impl NodeTables {
    /// These tables with peer classes and policy sets numbered in order of first use (classes
    /// per network by their first LPM entry; sets by the first port using them, then by
    /// network and content): two tables that differ only in how the compiler numbered them
    /// are equal after it.
    pub fn renumbered(&self) -> NodeTables {
        let mut t = self.clone();
        let mut set_map: BTreeMap<PolicySetId, PolicySetId> = BTreeMap::new();
        let mut next = 1;
        for p in t.ports.values() {
            if p.policy != PolicySetId::NONE && !set_map.contains_key(&p.policy) {
                set_map.insert(p.policy, PolicySetId(next));
                next += 1;
            }
        }
        let mut rest: Vec<(NetworkId, String, PolicySetId)> = t
            .policies
            .iter()
            .flat_map(|(n, pt)| {
                pt.sets
                    .iter()
                    .map(move |(id, s)| (*n, format!("{s:?}"), *id))
            })
            .filter(|(_, _, id)| !set_map.contains_key(id))
            .collect();
        rest.sort();
        for (_, _, id) in rest {
            set_map.insert(id, PolicySetId(next));
            next += 1;
        }
        for p in t.ports.values_mut() {
            if let Some(n) = set_map.get(&p.policy) {
                p.policy = *n;
            }
        }
        for pt in t.policies.values_mut() {
            let mut class_map: BTreeMap<PeerClass, PeerClass> =
                BTreeMap::from([(PeerClass::WORLD, PeerClass::WORLD)]);
            let sorted = pt.peers.sorted();
            for c in sorted.values() {
                let n = class_map.len() as u32;
                class_map.entry(*c).or_insert(PeerClass(n));
            }
            let peers = sorted.iter().map(|(p, c)| (*p, class_map[c])).collect();
            let sets = pt
                .sets
                .iter()
                .map(|(id, s)| {
                    let decisions = s
                        .decisions
                        .iter()
                        .map(|((d, c), p)| ((*d, *class_map.get(c).unwrap_or(c)), p.clone()))
                        .collect();
                    (
                        set_map[id],
                        Arc::new(SetTables {
                            set: s.set,
                            decisions,
                        }),
                    )
                })
                .collect();
            *pt = Arc::new(PolicyTables { peers, sets });
        }
        t
    }
}
