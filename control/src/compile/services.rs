//! Services in the tables: each [`ServiceModel`] compiled once into its Service records (one
//! per ClusterIP, protocol and port: the backends of the ClusterIP's family — on a node-local
//! Service, those on this node — and the Maglev table over the ones in use), and the index of
//! Services by network that the per-network compilation reads to place the ClusterIP routes.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use lace_shared::policy::{maglev_size, maglev_table, ServiceInfo};

use super::routes::ByNetwork;
use super::ServicePort;
use crate::service::in_use;
use crate::source::NamespacedName;
use crate::world::{ServiceModel, World};

/// One Service, compiled.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct CompiledService {
    /// The network it is bound to.
    pub network: String,
    /// Its ClusterIPs.
    pub vips: Vec<IpAddr>,
    /// Its records, by ClusterIP, protocol and port.
    pub records: BTreeMap<ServicePort, Arc<ServiceInfo>>,
}

/// The Service record of one port at one ClusterIP: every backend of the ClusterIP's family,
/// and the Maglev table over those in use ([`in_use`]; empty when none is: the Service rejects,
/// or drops when `node_local`). The table is a function of the in-use backends'
/// `address:port` names only, so every node given the same backends builds the same one.
pub fn service_info(
    vip: IpAddr,
    affinity_timeout_s: Option<u32>,
    node_local: bool,
    backends: &[lace_shared::policy::Backend],
) -> ServiceInfo {
    let backends: Vec<_> = backends
        .iter()
        .filter(|b| b.addr.is_ipv4() == vip.is_ipv4())
        .copied()
        .collect();
    let used = in_use(&backends);
    let names: Vec<String> = used
        .iter()
        .map(|&i| SocketAddr::new(backends[i].addr, backends[i].port).to_string())
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let table = maglev_table(&refs, maglev_size(refs.len()))
        .into_iter()
        .map(|k| used[k as usize] as u32)
        .collect();
    ServiceInfo {
        affinity_timeout_s,
        backends,
        table,
        node_local,
    }
}

/// Service `m` as `node` programs it.
fn compile(m: &ServiceModel, node: &str) -> CompiledService {
    let mut records = BTreeMap::new();
    for p in &m.ports {
        let backends = m.backends_on(p, node);
        for &vip in &m.cluster_ips {
            records.insert(
                ServicePort {
                    addr: vip,
                    protocol: p.protocol.number(),
                    port: p.port,
                },
                Arc::new(service_info(
                    vip,
                    m.affinity_timeout_s,
                    m.node_local,
                    &backends,
                )),
            );
        }
    }
    CompiledService {
        network: m.network.clone(),
        vips: m.cluster_ips.clone(),
        records,
    }
}

/// The compiled Services by network.
#[derive(Debug, Default)]
pub(super) struct ServiceIndex(ByNetwork<NamespacedName, Arc<CompiledService>>);

impl ServiceIndex {
    /// Compiles every Service of `world` for `node`.
    pub fn build(world: &World, node: &str) -> ServiceIndex {
        let mut ix = ServiceIndex::default();
        for (k, m) in &world.services {
            let c = compile(m, node);
            ix.0.insert(c.network.clone(), k.clone(), Arc::new(c));
        }
        ix
    }

    /// Recompiles Service `key` from `world` for `node`: (the network it was bound to, the one
    /// it is bound to now).
    pub fn update(
        &mut self,
        world: &World,
        node: &str,
        key: &NamespacedName,
    ) -> (Option<String>, Option<String>) {
        let old = self.0.remove(key);
        let new = world.services.get(key).map(|m| {
            let c = compile(m, node);
            let net = c.network.clone();
            self.0.insert(net.clone(), key.clone(), Arc::new(c));
            net
        });
        (old, new)
    }

    /// The Services bound to `network`, by namespace and name.
    pub fn of(
        &self,
        network: &str,
    ) -> impl Iterator<Item = (&NamespacedName, &Arc<CompiledService>)> {
        self.0.of(network).into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lace_shared::policy::{Backend, BackendState};

    fn b(addr: &str, port: u16, ready: bool, serving: bool, terminating: bool) -> Backend {
        Backend {
            addr: addr.parse().unwrap(),
            port,
            state: BackendState {
                ready,
                serving,
                terminating,
            },
        }
    }

    #[test]
    fn a_record_holds_its_family_and_tables_only_the_backends_in_use() {
        let backends = [
            b("10.40.1.2", 8080, true, true, false),
            b("10.40.1.3", 8080, false, true, true),
            b("fd40::2", 8080, true, true, false),
            b("10.40.1.4", 8080, true, true, false),
        ];
        let v4 = service_info("10.96.0.10".parse().unwrap(), Some(30), false, &backends);
        assert_eq!(v4.affinity_timeout_s, Some(30));
        let addrs: Vec<String> = v4.backends.iter().map(|b| b.addr.to_string()).collect();
        assert_eq!(addrs, ["10.40.1.2", "10.40.1.3", "10.40.1.4"]);
        assert_eq!(v4.table.len(), maglev_size(2));
        // Only the ready ones (0 and 2), each about half the slots.
        let share = |i: u32| v4.table.iter().filter(|&&t| t == i).count();
        assert_eq!(share(1), 0);
        assert_eq!(share(0) + share(2), v4.table.len());
        assert!(share(0).abs_diff(share(2)) <= 1);
        let v6 = service_info("fd96::10".parse().unwrap(), None, false, &backends);
        assert_eq!(v6.backends.len(), 1);
        assert!(v6.table.iter().all(|&t| t == 0));
        // Nothing ready: the serving-and-terminating one takes every slot.
        let draining = service_info(
            "10.96.0.10".parse().unwrap(),
            None,
            false,
            &[
                b("10.40.1.3", 80, false, true, true),
                b("10.40.1.5", 80, false, false, false),
            ],
        );
        assert!(draining.table.iter().all(|&t| t == 0));
        // Nothing serving: an empty table, the Service rejects.
        let none = service_info(
            "10.96.0.10".parse().unwrap(),
            None,
            false,
            &[b("10.40.1.5", 80, false, false, false)],
        );
        assert!(none.table.is_empty());
        assert_eq!(none.backends.len(), 1);
    }

    #[test]
    fn a_node_local_service_gives_each_node_its_own_backends() {
        use crate::service::{Protocol, ServiceBackend};
        use crate::world::ServicePortModel;
        let on = |addr: &str, node: Option<&str>| ServiceBackend {
            backend: b(addr, 8080, true, true, false),
            node: node.map(str::to_owned),
        };
        let mut m = ServiceModel {
            network: "pods".into(),
            cluster_ips: vec!["10.96.0.10".parse().unwrap()],
            affinity_timeout_s: None,
            node_local: true,
            ports: vec![ServicePortModel {
                name: String::new(),
                protocol: Protocol::Tcp,
                port: 80,
                backends: vec![
                    on("10.40.1.2", Some("node-1")),
                    on("10.40.2.2", Some("node-2")),
                    on("10.40.2.3", Some("node-2")),
                    on("192.168.0.1", None),
                ],
            }],
        };
        let record = |m: &ServiceModel, node: &str| {
            let c = compile(m, node);
            assert_eq!(c.records.len(), 1);
            let info = c.records.values().next().unwrap().clone();
            let addrs: Vec<String> = info.backends.iter().map(|b| b.addr.to_string()).collect();
            (addrs, info.table.is_empty(), info.node_local)
        };
        assert_eq!(
            record(&m, "node-1"),
            (vec!["10.40.1.2".to_owned()], false, true)
        );
        assert_eq!(
            record(&m, "node-2"),
            (
                vec!["10.40.2.2".to_owned(), "10.40.2.3".to_owned()],
                false,
                true
            )
        );
        // A node without a backend of its own drops (the record says so), never rejects.
        assert_eq!(record(&m, "node-3"), (vec![], true, true));
        // Cluster policy: every node uses every backend, host addresses too.
        m.node_local = false;
        assert_eq!(record(&m, "node-3").0.len(), 4);
        assert!(!record(&m, "node-3").2);
    }
}
