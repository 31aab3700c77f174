//! The allocate step: one pure function that applies, to an [`Ipam`], everything a batch of
//! events asks of IPAM — the networks and nodes the objects add or drop ([`IpamActions`]) and the
//! CNI requests' allocations, endpoint renewals, releases and collections ([`IpamRequest`]) — and
//! reports each outcome.
//!
//! It has no I/O and depends on nothing but its inputs, so the store that holds the state may
//! run it more than once: the standalone store runs it once under its file lock; a store with
//! optimistic concurrency (the Kubernetes API) may run it again on a fresh state after a
//! conflict. Each request's failure is reported in its answer and undone by [`Ipam`] itself;
//! the rest of the batch still applies.

use std::collections::BTreeSet;

use lace_shared::types::NetworkId;

use crate::ipam::{AllocateRequest, EndpointLease, Ipam, IpamError, NetworkDef, PodRef};
use crate::world::AttachmentKey;

/// What IPAM must be told about networks and nodes before the world can be built.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpamActions {
    /// Valid networks IPAM does not hold with this definition yet.
    pub ensure_networks: Vec<(String, NetworkDef)>,
    /// Networks IPAM holds that the source no longer has.
    pub remove_networks: Vec<String>,
    /// Lace nodes IPAM does not know yet.
    pub ensure_nodes: Vec<String>,
    /// Nodes IPAM holds that the source no longer has.
    pub remove_nodes: Vec<String>,
    /// This node's leases whose pod the source no longer has (deleted, maybe while control
    /// was down): released, as a DEL would.
    pub release_pods_gone: Vec<AttachmentKey>,
}

impl IpamActions {
    /// Only what releases leases (taken while the allocation state is unreachable: the rest
    /// writes ids and blocks, and waits).
    pub fn releases_only(self) -> IpamActions {
        IpamActions {
            release_pods_gone: self.release_pods_gone,
            ..IpamActions::default()
        }
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.ensure_networks.is_empty()
            && self.remove_networks.is_empty()
            && self.ensure_nodes.is_empty()
            && self.remove_nodes.is_empty()
            && self.release_pods_gone.is_empty()
    }
}

/// What one CNI request asks of IPAM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpamRequest {
    /// ADD: the lease of an attachment (made now, or returned as it is).
    Allocate(AllocateRequest),
    /// A retried ADD rebuilt the pod's interface: a new endpoint id for the lease.
    Renew(AttachmentKey),
    /// DEL: release the lease, unless it belongs to another node or to another pod than the
    /// one the DEL names (a known UID that differs: a pod recreated under the same name).
    Release {
        /// The attachment.
        key: AttachmentKey,
        /// This node.
        node: String,
        /// The pod the DEL is for (`K8S_POD_*`; all empty when the runtime passes none).
        pod: PodRef,
    },
    /// GC: release every lease of `node` not in `keep`.
    Collect {
        /// This node.
        node: String,
        /// The attachments the runtime still knows.
        keep: BTreeSet<AttachmentKey>,
    },
}

/// The outcome of one [`IpamRequest`], in the same order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpamAnswer {
    /// For [`IpamRequest::Allocate`] and [`IpamRequest::Renew`] (`Ok(None)`: no lease to renew).
    Lease(Result<Option<EndpointLease>, IpamError>),
    /// For [`IpamRequest::Release`]: the lease released, if there was one on this node for
    /// that pod.
    Released(Option<EndpointLease>),
    /// For [`IpamRequest::Collect`]: the leases released.
    Collected(Vec<EndpointLease>),
}

/// A network ensured: its name, the definition asked for, IPAM's answer (its id, or why it
/// refused, e.g. an immutable field changed), and the id IPAM holds after that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsuredNetwork {
    /// The network.
    pub name: String,
    /// The definition asked for.
    pub def: NetworkDef,
    /// IPAM's answer.
    pub result: Result<NetworkId, IpamError>,
    /// The id IPAM holds afterwards (a refused change keeps the old one).
    pub id: Option<NetworkId>,
}

/// Everything [`allocate`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllocOutcome {
    /// Each network ensured.
    pub ensured: Vec<EnsuredNetwork>,
    /// Networks and nodes forgotten.
    pub removed: Vec<String>,
    /// Leases released because their network, node or pod went.
    pub released: Vec<EndpointLease>,
    /// Nodes IPAM could not register.
    pub node_errors: Vec<IpamError>,
    /// One answer per request.
    pub answers: Vec<IpamAnswer>,
}

/// Applies `actions`, then `requests` in order, to `ipam` (see the module docs).
pub fn allocate(ipam: &mut Ipam, actions: &IpamActions, requests: &[IpamRequest]) -> AllocOutcome {
    let mut out = AllocOutcome::default();
    for (name, def) in &actions.ensure_networks {
        let result = ipam.ensure_network(name, def);
        out.ensured.push(EnsuredNetwork {
            name: name.clone(),
            def: def.clone(),
            result,
            id: ipam.network_id(name),
        });
    }
    for name in &actions.remove_networks {
        out.released.extend(ipam.remove_network(name));
        out.removed.push(format!("Network {name}"));
    }
    for name in &actions.ensure_nodes {
        if let Err(e) = ipam.ensure_node(name) {
            out.node_errors.push(e);
        }
    }
    for name in &actions.remove_nodes {
        out.released.extend(ipam.remove_node(name));
        out.removed.push(format!("Node {name}"));
    }
    for key in &actions.release_pods_gone {
        out.released.extend(ipam.release(key));
    }
    for r in requests {
        out.answers.push(match r {
            IpamRequest::Allocate(req) => IpamAnswer::Lease(ipam.allocate(req).map(Some)),
            IpamRequest::Renew(key) => IpamAnswer::Lease(ipam.renew_endpoint(key)),
            IpamRequest::Release { key, node, pod } => {
                IpamAnswer::Released(match ipam.lease(key) {
                    Some(l) if l.node != *node || l.pod.uid_differs(pod) => None,
                    _ => ipam.release(key),
                })
            }
            IpamRequest::Collect { node, keep } => IpamAnswer::Collected(ipam.gc(node, keep)),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NetworkType;
    use crate::ipam::{IpamConfig, PodRef};

    fn def(prefix: &str) -> NetworkDef {
        NetworkDef {
            kind: NetworkType::L3,
            v4: Some((prefix.parse().unwrap(), Some(24))),
            v6: None,
        }
    }

    fn key(c: &str) -> AttachmentKey {
        AttachmentKey {
            container_id: c.into(),
            ifname: "eth0".into(),
        }
    }

    /// The pod of container `c` (UID `uid-<c>`).
    fn pod(c: &str) -> PodRef {
        PodRef {
            namespace: "ns".into(),
            name: c.into(),
            uid: format!("uid-{c}"),
        }
    }

    fn alloc(c: &str, node: &str) -> IpamRequest {
        IpamRequest::Allocate(AllocateRequest {
            key: key(c),
            network: "backend".into(),
            node: node.into(),
            pod: pod(c),
            identity: None,
        })
    }

    fn lease(a: &IpamAnswer) -> &EndpointLease {
        match a {
            IpamAnswer::Lease(Ok(Some(l))) => l,
            other => panic!("not a lease: {other:?}"),
        }
    }

    #[test]
    fn one_batch_ensures_then_answers_every_request_in_order() {
        let mut ipam = Ipam::new(IpamConfig::default()).unwrap();
        let actions = IpamActions {
            ensure_networks: vec![("backend".into(), def("10.40.0.0/16"))],
            ensure_nodes: vec!["a".into(), "b".into()],
            ..IpamActions::default()
        };
        let requests = [
            alloc("c1", "a"),
            alloc("c2", "a"),
            alloc("c3", "b"),
            IpamRequest::Renew(key("c1")),
            IpamRequest::Release {
                key: key("c3"),
                node: "a".into(),
                pod: PodRef::default(),
            },
            IpamRequest::Release {
                key: key("c1"),
                node: "a".into(),
                pod: PodRef {
                    uid: "uid-of-another-c1".into(),
                    ..pod("c1")
                },
            },
            IpamRequest::Release {
                key: key("c2"),
                node: "a".into(),
                pod: pod("c2"),
            },
        ];
        let out = allocate(&mut ipam, &actions, &requests);
        assert_eq!(out.ensured.len(), 1);
        assert!(out.ensured[0].result.is_ok());
        let (l1, l2) = (lease(&out.answers[0]), lease(&out.answers[1]));
        assert_ne!(l1.addresses[0].address, l2.addresses[0].address);
        assert_eq!(lease(&out.answers[2]).node, "b");
        let renewed = lease(&out.answers[3]);
        assert_eq!(renewed.addresses, l1.addresses);
        assert!(renewed.endpoint_id > l2.endpoint_id, "node a's next id");
        // Another node's lease is not released by this node's DEL, nor another pod's by a DEL
        // naming another UID; this node's is.
        assert_eq!(out.answers[4], IpamAnswer::Released(None));
        assert_eq!(out.answers[5], IpamAnswer::Released(None));
        assert!(matches!(&out.answers[6], IpamAnswer::Released(Some(l)) if l.key == key("c2")));
        assert_eq!(ipam.leases().count(), 2);
        assert_eq!(ipam.lease(&key("c1")).unwrap().pod.uid, "uid-c1");
    }

    #[test]
    fn a_failed_request_is_answered_and_the_rest_applies() {
        let mut ipam = Ipam::new(IpamConfig::default()).unwrap();
        let actions = IpamActions {
            ensure_networks: vec![("backend".into(), def("10.40.0.0/16"))],
            ensure_nodes: vec!["a".into()],
            ..IpamActions::default()
        };
        let mut unknown = alloc("c0", "a");
        if let IpamRequest::Allocate(r) = &mut unknown {
            r.network = "nowhere".into();
        }
        let out = allocate(&mut ipam, &actions, &[unknown, alloc("c1", "a")]);
        assert!(matches!(
            &out.answers[0],
            IpamAnswer::Lease(Err(IpamError::UnknownNetwork { .. }))
        ));
        assert_eq!(lease(&out.answers[1]).key, key("c1"));
        // An immutable change is refused and reported; the network keeps its id.
        let id = ipam.network_id("backend");
        let again = IpamActions {
            ensure_networks: vec![("backend".into(), def("10.41.0.0/16"))],
            ..IpamActions::default()
        };
        let out = allocate(&mut ipam, &again, &[]);
        assert!(matches!(
            &out.ensured[0].result,
            Err(IpamError::Immutable { .. })
        ));
        assert_eq!(out.ensured[0].id, id);
        // Removing the network releases its leases.
        let gone = IpamActions {
            remove_networks: vec!["backend".into()],
            ..IpamActions::default()
        };
        let out = allocate(&mut ipam, &gone, &[]);
        assert_eq!(out.released.len(), 1);
        assert_eq!(out.removed, ["Network backend"]);
    }

    #[test]
    fn collect_releases_what_the_runtime_no_longer_knows() {
        let mut ipam = Ipam::new(IpamConfig::default()).unwrap();
        let actions = IpamActions {
            ensure_networks: vec![("backend".into(), def("10.40.0.0/16"))],
            ensure_nodes: vec!["a".into()],
            ..IpamActions::default()
        };
        allocate(&mut ipam, &actions, &[alloc("c1", "a"), alloc("c2", "a")]);
        let out = allocate(
            &mut ipam,
            &IpamActions::default(),
            &[IpamRequest::Collect {
                node: "a".into(),
                keep: [key("c2")].into(),
            }],
        );
        assert!(
            matches!(&out.answers[0], IpamAnswer::Collected(l) if l.len() == 1 && l[0].key == key("c1"))
        );
        assert!(ipam.lease(&key("c2")).is_some());
    }
}
