//! Allocations kept in the API server (`ClusterState`, ADR 0015) against the fake API server:
//! two controls of two nodes allocating at the same time never hand out the same thing, and a
//! restarted control re-reads the state and reallocates nothing.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use lace_control::api::NetworkType;
use lace_control::daemon::cluster_state::ClusterState;
use lace_control::daemon::control::IpamStore;
use lace_control::ipam::{
    AllocateRequest, AttachmentKey, EndpointLease, IpamConfig, NetworkDef, PodRef,
};
use lace_control::source::kubernetes::KubernetesConfig;
use lace_kube_fake::FakeApiServer;

const NS: &str = "lace-system";
const PODS_PER_NODE: usize = 100;

struct Cluster {
    server: FakeApiServer,
    kube: KubernetesConfig,
    _dir: tempfile::TempDir,
}

fn cluster() -> Cluster {
    let server = FakeApiServer::start_new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    server.write_kubeconfig(&path).unwrap();
    let kube = KubernetesConfig {
        kubeconfig: Some(path),
        node: String::new(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = lace_control::source::kubernetes::client(&kube)
            .await
            .unwrap();
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}
        }))
        .unwrap();
        Api::<Namespace>::all(client)
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    });
    Cluster {
        server,
        kube,
        _dir: dir,
    }
}

fn networks() -> [(&'static str, NetworkDef); 2] {
    [
        (
            "backend",
            NetworkDef {
                kind: NetworkType::L3,
                v4: Some(("10.40.0.0/16".parse().unwrap(), Some(26))),
                v6: None,
            },
        ),
        (
            "flat",
            NetworkDef {
                kind: NetworkType::L2,
                v4: Some(("10.50.0.0/16".parse().unwrap(), None)),
                v6: None,
            },
        ),
    ]
}

fn request(node: &str, i: usize) -> AllocateRequest {
    let network = if i % 2 == 0 { "backend" } else { "flat" };
    AllocateRequest {
        key: AttachmentKey {
            container_id: format!("{node}-c{i}"),
            ifname: "eth0".into(),
        },
        network: network.into(),
        node: node.into(),
        pod: PodRef {
            namespace: "shop".into(),
            name: format!("{node}-pod{i}"),
            uid: String::new(),
        },
    }
}

/// One control's allocations: the networks and its node learnt, then one ADD per pod, each its
/// own write (as separate CNI batches are).
fn allocate_all(store: &mut ClusterState, node: &str) -> Vec<EndpointLease> {
    let nets = networks();
    (0..PODS_PER_NODE)
        .map(|i| {
            let req = request(node, i);
            store
                .mutate(|ipam| {
                    for (name, def) in &nets {
                        ipam.ensure_network(name, def)?;
                    }
                    ipam.ensure_node(node)?;
                    ipam.allocate(&req)
                })
                .unwrap()
        })
        .collect()
}

#[test]
fn two_controls_allocating_at_once_never_share_anything_and_a_restart_reallocates_nothing() {
    let c = cluster();
    let handles: Vec<_> = ["node-a", "node-b"]
        .into_iter()
        .map(|node| {
            let kube = c.kube.clone();
            std::thread::spawn(move || {
                let mut store = ClusterState::open(&kube, NS, IpamConfig::default()).unwrap();
                let leases = allocate_all(&mut store, node);
                (leases, store.conflicts())
            })
        })
        .collect();
    let results: Vec<(Vec<EndpointLease>, u64)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    let leases: Vec<&EndpointLease> = results.iter().flat_map(|(l, _)| l).collect();
    assert_eq!(leases.len(), 2 * PODS_PER_NODE);
    eprintln!(
        "writes redone after a conflict: {:?}",
        results.iter().map(|(_, c)| c).collect::<Vec<_>>()
    );

    let mut addresses = BTreeSet::new();
    let mut macs = BTreeSet::new();
    let mut endpoint_ids = BTreeSet::new();
    let mut ports = BTreeSet::new();
    let mut network_ids: BTreeMap<&str, BTreeSet<_>> = BTreeMap::new();
    let mut blocks: BTreeMap<_, BTreeSet<&str>> = BTreeMap::new();
    for l in &leases {
        for a in &l.addresses {
            assert!(
                addresses.insert(a.address),
                "address {} handed out twice",
                a.address
            );
            if l.network == "backend" {
                blocks.entry(a.prefix).or_default().insert(l.node.as_str());
            }
        }
        assert!(macs.insert(l.mac), "MAC {:?} twice", l.mac);
        assert!(
            endpoint_ids.insert(l.endpoint_id),
            "endpoint id {} twice",
            l.endpoint_id
        );
        assert!(
            ports.insert((l.node.clone(), l.port)),
            "port {:?} twice on {}",
            l.port,
            l.node
        );
        network_ids
            .entry(&l.network)
            .or_default()
            .insert(l.network_id);
    }
    // One id per network, the same on both nodes, different between networks.
    assert!(
        network_ids.values().all(|ids| ids.len() == 1),
        "{network_ids:?}"
    );
    let ids: BTreeSet<_> = network_ids.values().flatten().collect();
    assert_eq!(ids.len(), 2);
    // Every l3 block belongs to one node.
    assert!(blocks.values().all(|nodes| nodes.len() == 1), "{blocks:?}");

    // Both nodes in one state, with distinct ids and locators.
    let mut restarted = ClusterState::open(&c.kube, NS, IpamConfig::default()).unwrap();
    let (a, b) = restarted.read(|i| (i.node("node-a"), i.node("node-b")));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.id, b.id);
    assert_ne!(a.locator, b.locator);

    // A restarted control re-reads everything: the same ADDs again change nothing.
    let version = c.server.resource_version();
    let again = allocate_all(&mut restarted, "node-a");
    for (before, after) in results[0].0.iter().zip(&again) {
        assert_eq!(before, after, "a restart reallocated");
    }
    assert_eq!(c.server.resource_version(), version, "nothing was written");
}
