//! The node-wide index the policy compiler keeps between plans: every pod's identity
//! (namespace and labels), every selector peer the policies name with the identities it
//! selects, and the parsed policies. Kept up to date change by change, so that a pod or label
//! change costs the peers it can affect, not a pass over the world.
//!
//! - An **identity** is (namespace, labels): pods with the same ones are selected alike by
//!   every selector. A new identity is matched against every selector peer once.
//! - A **selector peer** is a `podSelector`/`namespaceSelector` pair in one policy namespace,
//!   interned by content (policies that name the same peer share it). A new peer is matched
//!   against the identities of the namespaces it can select.
//! - A namespace's label change re-matches its identities against the peers that select by
//!   namespace labels.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use crate::bind::{Labels, Requirement};
use crate::netpol::{ContainerPort, IpBlock, NamespaceScope, Peer, PolicyModel, PortMatch};
use crate::world::{AttachmentKey, NamespaceLabels, NamespacedName, World};

/// An identity's index.
pub(super) type IdentId = u32;
/// A selector peer's index.
pub(super) type PeerId = u32;

#[derive(Debug)]
struct Ident {
    namespace: String,
    labels: BTreeMap<String, String>,
    /// Pods with this identity.
    pods: usize,
    /// The selector peers that select it, sorted.
    peers: Vec<PeerId>,
}

#[derive(Debug)]
struct SelPeer {
    scope: NamespaceScope,
    pods: Vec<Requirement>,
    /// Rule references to it (from the indexed policies).
    refs: usize,
}

/// A rule's peer, compiled: a selector peer by id, or an ipBlock.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum CPeer {
    /// A selector peer.
    Sel(PeerId),
    /// An ipBlock.
    Block(IpBlock),
}

/// A rule, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CRule {
    /// Empty: every peer.
    pub peers: Vec<CPeer>,
    /// Empty: every port.
    pub ports: Vec<PortMatch>,
}

/// A policy, compiled.
#[derive(Debug, Clone)]
pub(super) struct CPolicy {
    pub model: PolicyModel,
    /// The network it is bound to, if any.
    pub network: Option<String>,
    pub ingress: Option<Vec<CRule>>,
    pub egress: Option<Vec<CRule>>,
}

impl CPolicy {
    /// Whether the policy applies on network `net` (bound to it, or unbound).
    pub fn on(&self, net: &str) -> bool {
        self.network.as_deref().is_none_or(|n| n == net)
    }

    /// The rules of one direction.
    pub fn rules(&self, ingress: bool) -> Option<&[CRule]> {
        if ingress {
            self.ingress.as_deref()
        } else {
            self.egress.as_deref()
        }
    }

    fn peers(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.ingress
            .iter()
            .chain(self.egress.iter())
            .flatten()
            .flat_map(|r| &r.peers)
            .filter_map(|p| match p {
                CPeer::Sel(id) => Some(*id),
                CPeer::Block(_) => None,
            })
    }
}

/// A pod as the compiler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PodEntry {
    pub ident: IdentId,
    pub ports: Arc<[ContainerPort]>,
    /// (network, address) of each of its endpoints, sorted.
    pub addrs: Vec<(String, IpAddr)>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Index {
    idents: Vec<Option<Ident>>,
    ident_of: HashMap<(String, BTreeMap<String, String>), IdentId>,
    free_idents: Vec<IdentId>,
    /// Identities by namespace.
    ns_idents: BTreeMap<String, BTreeSet<IdentId>>,
    peers: Vec<Option<SelPeer>>,
    peer_of: HashMap<(NamespaceScope, Vec<Requirement>), PeerId>,
    free_peers: Vec<PeerId>,
    pub pods: BTreeMap<NamespacedName, PodEntry>,
    /// Every endpoint's pod, and every pod's endpoints.
    endpoint_pod: BTreeMap<AttachmentKey, NamespacedName>,
    pod_endpoints: BTreeMap<NamespacedName, BTreeSet<AttachmentKey>>,
    pub policies: BTreeMap<NamespacedName, Arc<CPolicy>>,
    /// Policies by namespace.
    pub ns_policies: BTreeMap<String, BTreeSet<NamespacedName>>,
}

fn selects_ns(scope: &NamespaceScope, ns: &str, labels: &NamespaceLabels<'_>) -> bool {
    match scope {
        NamespaceScope::Policy(p) => p == ns,
        NamespaceScope::Selected(reqs) => reqs.iter().all(|r| r.holds(labels)),
    }
}

impl Index {
    /// Builds the index of `world` from nothing.
    pub fn build(world: &World) -> Index {
        let mut ix = Index::default();
        for key in world.network_policies.keys() {
            ix.set_policy(world, key);
        }
        for (k, e) in &world.endpoints {
            let pod = NamespacedName::new(e.namespace.clone(), e.pod.clone());
            ix.pod_endpoints
                .entry(pod.clone())
                .or_default()
                .insert(k.clone());
            ix.endpoint_pod.insert(k.clone(), pod);
        }
        for key in pod_keys(world) {
            ix.set_pod(world, &key);
        }
        ix
    }

    /// Re-reads endpoint `key`'s owner from `world`: the pods whose addresses it may have
    /// changed (re-read them with [`Index::set_pod`]).
    pub fn endpoint_changed(&mut self, world: &World, key: &AttachmentKey) -> Vec<NamespacedName> {
        let mut pods = Vec::new();
        if let Some(old) = self.endpoint_pod.remove(key) {
            if let Some(s) = self.pod_endpoints.get_mut(&old) {
                s.remove(key);
                if s.is_empty() {
                    self.pod_endpoints.remove(&old);
                }
            }
            pods.push(old);
        }
        if let Some(e) = world.endpoints.get(key) {
            let pod = NamespacedName::new(e.namespace.clone(), e.pod.clone());
            self.pod_endpoints
                .entry(pod.clone())
                .or_default()
                .insert(key.clone());
            self.endpoint_pod.insert(key.clone(), pod.clone());
            if !pods.contains(&pod) {
                pods.push(pod);
            }
        }
        pods
    }

    /// The identity of a pod.
    pub fn ident(&self, id: IdentId) -> (&str, &BTreeMap<String, String>) {
        let i = self.idents[id as usize].as_ref().expect("live identity");
        (&i.namespace, &i.labels)
    }

    /// The selector peers that select identity `id`, sorted.
    pub fn ident_peers(&self, id: IdentId) -> &[PeerId] {
        self.idents[id as usize]
            .as_ref()
            .map_or(&[], |i| i.peers.as_slice())
    }

    /// Re-reads pod `key` (its labels, ports and endpoints' addresses) from `world`; whether it
    /// changed.
    pub fn set_pod(&mut self, world: &World, key: &NamespacedName) -> bool {
        let model = world.pods.get(key);
        let mut addrs: Vec<(String, IpAddr)> = self
            .pod_endpoints
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|k| world.endpoints.get(k))
            .flat_map(|e| e.addresses.iter().map(|a| (e.network.clone(), *a)))
            .collect();
        addrs.sort();
        if model.is_none() && addrs.is_empty() {
            return self.remove_pod(key);
        }
        let labels = model.map(|m| m.labels.clone()).unwrap_or_default();
        let ports: Arc<[ContainerPort]> =
            model.map_or_else(|| Arc::from([]), |m| m.ports.clone().into());
        if let Some(old) = self.pods.get(key) {
            let (ns, l) = self.ident(old.ident);
            if ns == key.namespace && *l == labels && *old.ports == *ports && old.addrs == addrs {
                return false;
            }
        }
        let ident = self.intern_ident(world, &key.namespace, labels);
        if let Some(old) = self.pods.insert(
            key.clone(),
            PodEntry {
                ident,
                ports,
                addrs,
            },
        ) {
            self.release_ident(old.ident);
        }
        true
    }

    fn remove_pod(&mut self, key: &NamespacedName) -> bool {
        match self.pods.remove(key) {
            Some(old) => {
                self.release_ident(old.ident);
                true
            }
            None => false,
        }
    }

    fn intern_ident(
        &mut self,
        world: &World,
        ns: &str,
        labels: BTreeMap<String, String>,
    ) -> IdentId {
        let k = (ns.to_owned(), labels);
        if let Some(&id) = self.ident_of.get(&k) {
            if let Some(i) = self.idents[id as usize].as_mut() {
                i.pods += 1;
            }
            return id;
        }
        let ns_labels = world.namespace_labels(ns);
        let peers: Vec<PeerId> = self
            .peers
            .iter()
            .enumerate()
            .filter_map(|(pid, p)| {
                let p = p.as_ref()?;
                (selects_ns(&p.scope, ns, &ns_labels) && p.pods.iter().all(|r| r.holds(&k.1)))
                    .then_some(pid as PeerId)
            })
            .collect();
        let ident = Ident {
            namespace: ns.to_owned(),
            labels: k.1.clone(),
            pods: 1,
            peers,
        };
        let id = match self.free_idents.pop() {
            Some(id) => {
                self.idents[id as usize] = Some(ident);
                id
            }
            None => {
                self.idents.push(Some(ident));
                (self.idents.len() - 1) as IdentId
            }
        };
        self.ident_of.insert(k, id);
        self.ns_idents.entry(ns.to_owned()).or_default().insert(id);
        id
    }

    fn release_ident(&mut self, id: IdentId) {
        let Some(i) = self.idents[id as usize].as_mut() else {
            return;
        };
        i.pods -= 1;
        if i.pods > 0 {
            return;
        }
        let i = self.idents[id as usize].take().expect("checked above");
        self.ident_of.remove(&(i.namespace.clone(), i.labels));
        if let Some(s) = self.ns_idents.get_mut(&i.namespace) {
            s.remove(&id);
            if s.is_empty() {
                self.ns_idents.remove(&i.namespace);
            }
        }
        self.free_idents.push(id);
    }

    /// Re-matches namespace `ns`'s identities against the peers that select by namespace
    /// labels (after its labels changed); returns whether any membership changed.
    pub fn namespace_changed(&mut self, world: &World, ns: &str) -> bool {
        let Some(ids) = self.ns_idents.get(ns) else {
            return false;
        };
        let ns_labels = world.namespace_labels(ns);
        let mut changed = false;
        for &id in ids {
            let Some(i) = self.idents[id as usize].as_ref() else {
                continue;
            };
            let peers: Vec<PeerId> = self
                .peers
                .iter()
                .enumerate()
                .filter_map(|(pid, p)| {
                    let p = p.as_ref()?;
                    (selects_ns(&p.scope, ns, &ns_labels)
                        && p.pods.iter().all(|r| r.holds(&i.labels)))
                    .then_some(pid as PeerId)
                })
                .collect();
            if peers != i.peers {
                changed = true;
                if let Some(i) = self.idents[id as usize].as_mut() {
                    i.peers = peers;
                }
            }
        }
        changed
    }

    /// The pods of namespace `ns`.
    pub fn pods_in<'a>(&'a self, ns: &'a str) -> impl Iterator<Item = &'a NamespacedName> + 'a {
        self.pods
            .range(NamespacedName::new(ns, "")..)
            .take_while(move |(k, _)| k.namespace == ns)
            .map(|(k, _)| k)
    }

    fn intern_peer(
        &mut self,
        world: &World,
        scope: NamespaceScope,
        pods: Vec<Requirement>,
    ) -> PeerId {
        let k = (scope, pods);
        if let Some(&id) = self.peer_of.get(&k) {
            if let Some(p) = self.peers[id as usize].as_mut() {
                p.refs += 1;
            }
            return id;
        }
        let id = match self.free_peers.pop() {
            Some(id) => id,
            None => {
                self.peers.push(None);
                (self.peers.len() - 1) as PeerId
            }
        };
        // Match it against the identities of the namespaces it can select.
        let namespaces: Vec<String> = match &k.0 {
            NamespaceScope::Policy(ns) => vec![ns.clone()],
            NamespaceScope::Selected(_) => self.ns_idents.keys().cloned().collect(),
        };
        for ns in namespaces {
            if !selects_ns(&k.0, &ns, &world.namespace_labels(&ns)) {
                continue;
            }
            for &iid in self.ns_idents.get(&ns).into_iter().flatten() {
                if let Some(i) = self.idents[iid as usize].as_mut() {
                    if k.1.iter().all(|r| r.holds(&i.labels)) {
                        let at = i.peers.partition_point(|&p| p < id);
                        i.peers.insert(at, id);
                    }
                }
            }
        }
        self.peers[id as usize] = Some(SelPeer {
            scope: k.0.clone(),
            pods: k.1.clone(),
            refs: 1,
        });
        self.peer_of.insert(k, id);
        id
    }

    fn release_peer(&mut self, id: PeerId) {
        let Some(p) = self.peers[id as usize].as_mut() else {
            return;
        };
        p.refs -= 1;
        if p.refs > 0 {
            return;
        }
        let p = self.peers[id as usize].take().expect("checked above");
        self.peer_of.remove(&(p.scope, p.pods));
        for i in self.idents.iter_mut().flatten() {
            if let Ok(at) = i.peers.binary_search(&id) {
                i.peers.remove(at);
            }
        }
        self.free_peers.push(id);
    }

    fn compile_rules(
        &mut self,
        world: &World,
        rules: &Option<Vec<crate::netpol::Rule>>,
    ) -> Option<Vec<CRule>> {
        rules.as_ref().map(|rules| {
            rules
                .iter()
                .map(|r| CRule {
                    peers: r
                        .peers
                        .iter()
                        .map(|p| match p {
                            Peer::Pods { namespaces, pods } => CPeer::Sel(self.intern_peer(
                                world,
                                namespaces.clone(),
                                pods.clone(),
                            )),
                            Peer::Block(b) => CPeer::Block(b.clone()),
                        })
                        .collect(),
                    ports: r.ports.clone(),
                })
                .collect()
        })
    }

    /// Re-reads policy `key` from `world`; whether it changed. Returns the networks the old
    /// and the new version applied on (`None`: every network), for the caller to recompile.
    pub fn set_policy(
        &mut self,
        world: &World,
        key: &NamespacedName,
    ) -> Option<Vec<Option<String>>> {
        let new = world.network_policies.get(key);
        let old = self.policies.get(key);
        match (old, new) {
            (None, None) => return None,
            (Some(o), Some(n)) if o.model == n.model && o.network == n.network => return None,
            _ => {}
        }
        let mut touched = Vec::new();
        if let Some(old) = self.policies.remove(key) {
            touched.push(old.network.clone());
            let ids: Vec<PeerId> = old.peers().collect();
            for id in ids {
                self.release_peer(id);
            }
            if let Some(s) = self.ns_policies.get_mut(&key.namespace) {
                s.remove(key);
                if s.is_empty() {
                    self.ns_policies.remove(&key.namespace);
                }
            }
        }
        if let Some(b) = new {
            touched.push(b.network.clone());
            let ingress = self.compile_rules(world, &b.model.ingress);
            let egress = self.compile_rules(world, &b.model.egress);
            self.policies.insert(
                key.clone(),
                Arc::new(CPolicy {
                    model: b.model.clone(),
                    network: b.network.clone(),
                    ingress,
                    egress,
                }),
            );
            self.ns_policies
                .entry(key.namespace.clone())
                .or_default()
                .insert(key.clone());
        }
        Some(touched)
    }

    /// The policies of namespace `ns` that apply on network `net` and select a pod with
    /// `labels`, sorted.
    pub fn selecting(&self, net: &str, ns: &str, labels: &impl Labels) -> Vec<NamespacedName> {
        self.ns_policies
            .get(ns)
            .into_iter()
            .flatten()
            .filter(|k| {
                let p = &self.policies[*k];
                p.on(net) && p.model.pod_selector.iter().all(|r| r.holds(labels))
            })
            .cloned()
            .collect()
    }
}

/// Every pod the policy compiler knows: those with an object and those with an endpoint.
pub(super) fn pod_keys(world: &World) -> BTreeSet<NamespacedName> {
    let mut keys: BTreeSet<NamespacedName> = world.pods.keys().cloned().collect();
    keys.extend(
        world
            .endpoints
            .values()
            .map(|e| NamespacedName::new(e.namespace.clone(), e.pod.clone())),
    );
    keys
}
