//! Allocations kept in the API server (`ClusterState`, ADR 0015, 0045) against the fake API
//! server: two controls of two nodes allocating at the same time never hand out the same
//! thing, each allocation is its own object, network and node ids are claims, a restarted
//! control re-reads the state and reallocates nothing, and the states earlier versions kept
//! in ConfigMap lace-ipam (single object, ledger) are migrated.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use lace_control::api::NetworkType;
use lace_control::daemon::cluster_state::ClusterState;
use lace_control::daemon::control::IpamStore;
use lace_control::daemon::local::LocalFile;
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
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// The store of `node`'s control.
    fn open(&self, node: &str) -> ClusterState {
        let kube = KubernetesConfig {
            node: node.into(),
            ..self.kube.clone()
        };
        ClusterState::open(&kube, NS, IpamConfig::default()).unwrap()
    }

    /// Every object of a lace kind (`allocations`, `neighbors`, `networkendpoints`).
    fn list(&self, plural: &str) -> Vec<serde_json::Value> {
        let ar = kube::api::ApiResource {
            group: "lace-cni.io".into(),
            version: "v1alpha1".into(),
            api_version: "lace-cni.io/v1alpha1".into(),
            kind: String::new(),
            plural: plural.into(),
        };
        let api: Api<kube::api::DynamicObject> = Api::all_with(self.client.clone(), &ar);
        self.rt
            .block_on(api.list(&Default::default()))
            .unwrap()
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }
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
    let client = rt.block_on(async {
        let client = lace_control::source::kubernetes::client(&kube)
            .await
            .unwrap();
        for name in [NS, "shop"] {
            let ns: Namespace = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
            }))
            .unwrap();
            Api::<Namespace>::all(client.clone())
                .create(&PostParams::default(), &ns)
                .await
                .unwrap();
        }
        let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
        for e in std::fs::read_dir(crds).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yaml") {
                let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
                    serde_yaml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
                Api::all(client.clone())
                    .create(&PostParams::default(), &crd)
                    .await
                    .unwrap();
            }
        }
        client
    });
    Cluster {
        server,
        kube,
        rt,
        client,
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
        identity: None,
    }
}

/// One control's allocations: the networks and its node learnt, then one ADD per pod, each its
/// own write (as separate CNI batches are).
fn allocate_all(store: &mut ClusterState, node: &str) -> Vec<EndpointLease> {
    (0..PODS_PER_NODE).map(|i| add(store, node, i)).collect()
}

/// Pod `i`'s ADD on `node`, in one write with the networks and the node learnt.
fn add(store: &mut ClusterState, node: &str, i: usize) -> EndpointLease {
    let nets = networks();
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
}

#[test]
fn two_controls_allocating_at_once_never_share_anything_and_a_restart_reallocates_nothing() {
    let c = cluster();
    let handles: Vec<_> = ["node-a", "node-b"]
        .into_iter()
        .map(|node| {
            let kube = KubernetesConfig {
                node: node.into(),
                ..c.kube.clone()
            };
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

    // Each allocation is its object: an endpoint per pod, one Allocation per node's blocks of
    // the l3 network, a Neighbor per l2 address.
    let endpoints = c.list("networkendpoints");
    assert_eq!(endpoints.len(), 2 * PODS_PER_NODE);
    let blocks = c.list("allocations");
    assert_eq!(blocks.len(), 2, "{blocks:#?}");
    let claims = c.list("neighbors");
    assert_eq!(claims.len(), PODS_PER_NODE, "one per l2 address");
    for e in &endpoints {
        let l = leases
            .iter()
            .find(|l| l.key.container_id == e["spec"]["containerId"])
            .unwrap();
        assert_eq!(e["metadata"]["namespace"], "shop");
        assert_eq!(e["metadata"]["labels"]["lace-cni.io/node"], l.node.as_str());
        assert_eq!(e["spec"]["endpointId"], l.endpoint_id);
        assert_eq!(e["spec"]["mac"], l.mac.to_string());
    }

    // Both nodes in one state, with distinct ids and locators.
    let mut restarted = c.open("node-a");
    let (a, b) = restarted.read(|i| (i.node("node-a"), i.node("node-b")));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.id, b.id);
    assert_ne!(a.locator, b.locator);
    assert_eq!(
        restarted.read(|i| i.leases().count()),
        2 * PODS_PER_NODE,
        "its own endpoints and the other node's, l2 and l3 (ADR 0039)"
    );

    // A restarted control re-reads everything: the same ADDs again change nothing.
    let version = c.server.resource_version();
    let again = allocate_all(&mut restarted, "node-a");
    for (before, after) in results[0].0.iter().zip(&again) {
        assert_eq!(before, after, "a restart reallocated");
    }
    assert_eq!(c.server.resource_version(), version, "nothing was written");
}

/// Claims are written when a network or node registers — a node's with its first endpoint-id
/// reservation, so its first ADD writes none — and not again while the reservation lasts:
/// another node's registration rebuilds the view, and this node keeps counting its endpoint
/// ids from where it was, not from its reservation.
#[test]
fn a_rebuilt_view_keeps_the_endpoint_counter_and_writes_no_claim() {
    let c = cluster();
    let claim_writes = || {
        let r = c.server.requests_of("claims");
        r.get("create").copied().unwrap_or(0) + r.get("update").copied().unwrap_or(0)
    };
    let seq = |l: &EndpointLease| l.endpoint_id & 0xffff_ffff;
    let mut a = c.open("node-a");
    let nets = networks();
    // Registered first, as control does (an ensure before any ADD).
    a.mutate(|ipam| {
        for (name, def) in &nets {
            ipam.ensure_network(name, def)?;
        }
        ipam.ensure_node("node-a")
    })
    .unwrap();
    assert_eq!(seq(&add(&mut a, "node-a", 0)), 1);
    assert_eq!(seq(&add(&mut a, "node-a", 1)), 2);
    assert_eq!(
        claim_writes(),
        2 * 2 + 3,
        "each network's id and record, the node's locator, id and record (with its \
         reservation), once"
    );

    // node-b registers: node-a's view is rebuilt with it.
    let mut b = c.open("node-b");
    assert_eq!(seq(&add(&mut b, "node-b", 0)), 1);
    assert_eq!(claim_writes(), 2 * 2 + 3 + 3, "node-b's own claims only");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while a.read(|i| i.node("node-b")).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "node-a never saw node-b"
        );
        a.refresh().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(seq(&add(&mut a, "node-a", 2)), 3, "counted on, not jumped");
    assert_eq!(
        claim_writes(),
        10,
        "no claim written within the reservation"
    );
    assert_eq!(
        a.read(|i| i.node("node-b")),
        b.read(|i| i.node("node-b")),
        "node-b's id and locator as its own control registered them"
    );
    // A node's id and locator are its own control's to register.
    let e = a.mutate(|ipam| ipam.ensure_node("node-c")).unwrap_err();
    assert!(
        e.to_string().contains("its own lace-control registers it"),
        "{e}"
    );
}

/// A node's control removes what it released: the endpoint, and the l2 address's claim; a
/// claim left by a write that failed half way (no endpoint) is collected at start.
#[test]
fn releases_delete_the_objects_and_a_stray_claim_is_collected() {
    let c = cluster();
    let mut store = c.open("node-a");
    let leases = allocate_all(&mut store, "node-a");
    let l2 = leases.iter().find(|l| l.network == "flat").unwrap();
    store.mutate(|ipam| Ok(ipam.release(&l2.key))).unwrap();
    let names = |plural| -> BTreeSet<String> {
        c.list(plural)
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names("networkendpoints").len(), PODS_PER_NODE - 1);
    let claims = names("neighbors");
    assert_eq!(claims.len(), PODS_PER_NODE / 2 - 1);
    let freed = lace_control::ipam::neighbor_name("flat", l2.addresses[0].address);
    assert!(!claims.contains(&freed));
    drop(store);
    // A claim of node-a's with no endpoint behind it (its control died between the two).
    let stray = serde_json::json!({
        "apiVersion": "lace-cni.io/v1alpha1", "kind": "Neighbor",
        "metadata": {"name": freed, "labels": {"lace-cni.io/node": "node-a"}},
        "spec": {"network": "flat", "address": l2.addresses[0].address.to_string(),
                 "mac": l2.mac.to_string()},
    });
    let ar = kube::api::ApiResource::erase::<lace_control::api::Neighbor>(&());
    let api: Api<kube::api::DynamicObject> = Api::all_with(c.client.clone(), &ar);
    c.rt.block_on(api.create(
        &PostParams::default(),
        &serde_json::from_value(stray).unwrap(),
    ))
    .unwrap();
    let mut store = c.open("node-a");
    assert!(!names("neighbors").contains(&freed), "collected at start");
    // The address is free again, and the next l2 ADD takes it.
    let again = store
        .mutate(|ipam| {
            ipam.allocate(&AllocateRequest {
                key: AttachmentKey {
                    container_id: "new".into(),
                    ifname: "eth0".into(),
                },
                ..request("node-a", 1)
            })
        })
        .unwrap();
    assert_eq!(again.addresses, l2.addresses);
}

/// A state of the single-object form (ConfigMap lace-ipam, data.state.json, version 1) is
/// migrated at start: its blocks, claims and endpoints become objects, its networks and nodes
/// claims, the ConfigMap keeps only a note, and the leases are the same.
#[test]
fn a_single_object_state_is_migrated() {
    let c = cluster();
    // What the previous version held: built with IPAM itself, saved as version 1.
    let mut old = lace_control::ipam::Ipam::new(IpamConfig::default()).unwrap();
    for (name, def) in &networks() {
        old.ensure_network(name, def).unwrap();
    }
    let mut leases = Vec::new();
    for node in ["node-a", "node-b"] {
        old.ensure_node(node).unwrap();
        for i in 0..6 {
            leases.push(old.allocate(&request(node, i)).unwrap());
        }
    }
    let mut v = serde_json::to_value(old.to_state()).unwrap();
    v["version"] = 1.into();
    v["nextEndpointId"] = 13.into();
    for (n, l) in v["leases"].as_array_mut().unwrap().iter_mut().enumerate() {
        l["endpointId"] = (n as u64 + 1).into();
    }
    for n in v["nodes"].as_object_mut().unwrap().values_mut() {
        n.as_object_mut().unwrap().remove("nextEndpoint");
    }
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "lace-ipam", "namespace": NS},
        "data": {"state.json": v.to_string()},
    }))
    .unwrap();
    c.rt.block_on(Api::namespaced(c.client.clone(), NS).create(&PostParams::default(), &cm))
        .unwrap();

    let store = c.open("node-a");
    let cm: k8s_openapi::api::core::v1::ConfigMap =
        c.rt.block_on(Api::namespaced(c.client.clone(), NS).get("lace-ipam"))
            .unwrap();
    let data = cm.data.unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["moved.txt"]);
    assert_eq!(c.list("claims").len(), 2 * 2 + 2 * 3);
    assert_eq!(c.list("networkendpoints").len(), 12);
    assert_eq!(c.list("allocations").len(), 2);
    assert_eq!(c.list("neighbors").len(), 6);
    // node-a's view: its own leases as they were (ids kept), and node-b's.
    let mine: Vec<EndpointLease> =
        store.read(|i| i.leases().filter(|l| l.node == "node-a").cloned().collect());
    assert_eq!(mine.len(), 6);
    for l in &mine {
        let before = leases.iter().find(|b| b.key == l.key).unwrap();
        assert_eq!(
            (&l.addresses, l.mac, l.port, l.network_id),
            (
                &before.addresses,
                before.mac,
                before.port,
                before.network_id
            )
        );
        assert!(
            l.endpoint_id <= 12,
            "version 1's id kept: {}",
            l.endpoint_id
        );
    }
    // A second control starting later finds nothing to migrate and the same state.
    let other = c.open("node-b");
    assert_eq!(
        other.read(|i| i.leases().filter(|l| l.node == "node-b").count()),
        6
    );
}

/// The API server away: a release is still taken (out of the view at once) and its deletions
/// are owed — kept in the node's file — while a new allocation is refused; when the API server
/// answers again the same control makes them, and a control restarted while it was away makes
/// them from the file, whether it starts once the API server is back or while it is still away
/// (from the node's copy of its objects). A release is never lost.
#[test]
fn releases_taken_while_the_api_server_is_away_are_made_when_it_returns() {
    let mut c = cluster();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster-node-a.json");
    let open = |c: &Cluster| {
        let kube = KubernetesConfig {
            node: "node-a".into(),
            ..c.kube.clone()
        };
        let local = LocalFile::new(file.clone());
        ClusterState::open_with(&kube, NS, IpamConfig::default(), Some(local)).unwrap()
    };
    let owed_in_file = || {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        v["owed"].as_array().unwrap().len()
    };
    let mut a = open(&c);
    let nets = networks();
    // Pods 0 and 2 on the l3 network, 1 and 3 on the l2 one (each l2 address is a claim).
    for i in 0..4 {
        let req = request("node-a", i);
        a.mutate(|ipam| {
            for (name, def) in &nets {
                ipam.ensure_network(name, def)?;
            }
            ipam.ensure_node("node-a")?;
            ipam.allocate(&req)
        })
        .unwrap();
    }
    let in_api = |c: &Cluster| (c.list("networkendpoints").len(), c.list("neighbors").len());
    assert_eq!(in_api(&c), (4, 2));
    assert!(a.reachable());
    let release = |s: &mut ClusterState, i: usize| {
        let key = request("node-a", i).key;
        s.mutate(|ipam| Ok(ipam.release(&key))).unwrap()
    };
    let has = |s: &ClusterState, i: usize| {
        let key = request("node-a", i).key;
        s.read(|ipam| ipam.lease(&key).is_some())
    };

    // Away: pod 1 (l2) released — its endpoint and its claim owed.
    c.server.stop();
    assert!(release(&mut a, 1).is_some());
    assert!(!a.reachable());
    assert!(!has(&a, 1), "the release is in the view at once");
    assert_eq!(a.owed(), 2);
    assert_eq!(owed_in_file(), 2, "the owed deletions are on disk");
    // A new allocation needs the API server: refused, nothing taken.
    let fresh = request("node-a", 10);
    let e = a.mutate(|ipam| ipam.allocate(&fresh)).unwrap_err();
    assert!(e.to_string().contains("API server"), "{e}");
    assert!(!has(&a, 10));
    // Back: the same control pays what it owes (probed within a few PROBE periods).
    c.server.start().unwrap();
    for _ in 0..100 {
        a.refresh().unwrap();
        if a.owed() == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(a.owed(), 0);
    assert!(a.reachable());
    assert_eq!(in_api(&c), (3, 1));
    assert_eq!(owed_in_file(), 0);
    // The watch's deletion events change nothing: pod 1 stays released, 0, 2, 3 stay.
    std::thread::sleep(std::time::Duration::from_millis(300));
    a.refresh().unwrap();
    assert_eq!(
        (0..4).map(|i| has(&a, i)).collect::<Vec<_>>(),
        [true, false, true, true]
    );

    // Away again: pod 0 (l3) released, then control restarts while the API server is away.
    c.server.stop();
    assert!(release(&mut a, 0).is_some());
    assert_eq!(a.owed(), 1);
    drop(a);
    c.server.start().unwrap();
    assert_eq!(
        in_api(&c),
        (3, 1),
        "the API server never heard of the release"
    );
    let b = open(&c);
    assert_eq!(b.owed(), 0, "paid when opened");
    assert_eq!(in_api(&c), (2, 1));
    assert_eq!(
        (0..4).map(|i| has(&b, i)).collect::<Vec<_>>(),
        [false, false, true, true]
    );
    assert_eq!(owed_in_file(), 0);

    // The API server goes away and control restarts while it is: it starts from the node's
    // copy of its objects (after OFFLINE_AFTER), away, and serves what needs no write.
    c.server.stop();
    drop(b);
    let mut d = open(&c);
    assert!(!d.reachable());
    assert_eq!(
        (0..4).map(|i| has(&d, i)).collect::<Vec<_>>(),
        [false, false, true, true],
        "the leases from the node's copy"
    );
    assert!(release(&mut d, 2).is_some());
    assert_eq!((d.owed(), owed_in_file()), (1, 1));
    let e = d.mutate(|ipam| ipam.allocate(&fresh)).unwrap_err();
    assert!(e.to_string().contains("API server"), "{e}");
    c.server.start().unwrap();
    for _ in 0..100 {
        d.refresh().unwrap();
        if d.owed() == 0 && d.reachable() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!((d.owed(), owed_in_file()), (0, 0));
    assert_eq!(
        in_api(&c),
        (1, 1),
        "only pod 3's endpoint and claim are left"
    );
    // The lists replace the copy's records once the watches reconnect: still only pod 3.
    for _ in 0..100 {
        d.refresh().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        if (0..4).map(|i| has(&d, i)).collect::<Vec<_>>() == [false, false, false, true] {
            break;
        }
    }
    assert_eq!(
        (0..4).map(|i| has(&d, i)).collect::<Vec<_>>(),
        [false, false, false, true]
    );
    // A new allocation works again.
    d.mutate(|ipam| ipam.allocate(&fresh)).unwrap();
    assert!(has(&d, 10));
}

/// A ledger (ConfigMap lace-ipam, data.ledger.json, of the versions before the claims) is
/// migrated at start: every network keeps its id, every node its id, locator and endpoint-id
/// reservation, and the ConfigMap keeps only a note (which those versions refuse).
#[test]
fn a_ledger_is_migrated_to_claims() {
    let c = cluster();
    let mut old = lace_control::ipam::Ipam::new(IpamConfig::default()).unwrap();
    // Ids with a gap (a removed network) and a reservation ahead of node-b's endpoints.
    old.ensure_network("gone", &networks()[0].1).unwrap();
    for (name, def) in &networks() {
        old.ensure_network(name, def).unwrap();
    }
    old.remove_network("gone");
    for node in ["node-a", "node-b"] {
        old.ensure_node(node).unwrap();
    }
    let ledger = old.ledger().with_next_endpoint("node-b", 2049);
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "lace-ipam", "namespace": NS},
        "data": {"ledger.json": serde_json::to_string(&ledger).unwrap()},
    }))
    .unwrap();
    c.rt.block_on(Api::namespaced(c.client.clone(), NS).create(&PostParams::default(), &cm))
        .unwrap();

    let mut a = c.open("node-a");
    let data =
        c.rt.block_on(
            Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(c.client.clone(), NS)
                .get("lace-ipam"),
        )
        .unwrap()
        .data
        .unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["moved.txt"]);
    assert_eq!(c.list("claims").len(), 2 * 2 + 2 * 3);
    for (name, _) in networks() {
        assert_eq!(
            a.read(|i| i.network_id(name)),
            old.network_id(name),
            "{name}"
        );
    }
    for node in ["node-a", "node-b"] {
        assert_eq!(a.read(|i| i.node(node)), old.node(node), "{node}");
    }
    // A new network takes the id of its own place (ADR 0045).
    let next = a
        .mutate(|ipam| ipam.ensure_network("later", &networks()[0].1))
        .unwrap();
    let place = lace_control::ipam::fnv64(&[b"later"]) % 0xfffe + 1;
    assert_eq!(u64::from(next.0), place);
    // node-b counts its endpoint ids from its reservation.
    let mut b = c.open("node-b");
    assert_eq!(add(&mut b, "node-b", 0).endpoint_id & 0xffff_ffff, 2049);
}

/// A network's record decides its id: a control that finds one written by another control
/// takes its id, and an id claim the record does not hold (a control that lost the race for
/// the record) is deleted; a removed network's claims are deleted.
#[test]
fn a_network_record_decides_its_id_and_stray_id_claims_are_deleted() {
    let c = cluster();
    let mut a = c.open("node-a");
    let ar = kube::api::ApiResource::erase::<lace_control::api::Claim>(&());
    let api: Api<kube::api::DynamicObject> = Api::all_with(c.client.clone(), &ar);
    let (name, def) = networks()[0].clone();
    let [id_claim, record] = lace_control::ipam::network_claims(name, 7, &def);
    let (stray, _) = lace_control::ipam::network_claims(name, 3, &def)[0].clone();
    for (object, spec) in [
        id_claim,
        record,
        (
            stray.clone(),
            lace_control::ipam::network_claims(name, 3, &def)[0]
                .1
                .clone(),
        ),
    ] {
        let o = serde_json::json!({
            "apiVersion": "lace-cni.io/v1alpha1", "kind": "Claim",
            "metadata": {"name": object},
            "spec": spec,
        });
        c.rt.block_on(api.create(&PostParams::default(), &serde_json::from_value(o).unwrap()))
            .unwrap();
    }
    let names = || -> BTreeSet<String> {
        c.list("claims")
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while names().contains(&stray) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stray id claim stayed"
        );
        a.refresh().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let lease = add(&mut a, "node-a", 0);
    assert_eq!((lease.network, lease.network_id.0), (name.to_owned(), 7));

    // Removed: its claims go with it (the endpoint first).
    a.mutate(|ipam| Ok(ipam.remove_network(name))).unwrap();
    let left = names();
    assert!(
        !left.contains("backend.network") && !left.contains("network-id.7"),
        "{left:?}"
    );
    assert!(left.contains("flat.network"), "{left:?}");
}
