//! The learned MACs kept in the API server (`ObjectStore`, ADR 0032) against the fake API
//! server: two nodes' controls share the records (every field round-trips through the
//! FDBEntry, addresses are learned Neighbors), a write that meets another control's newer
//! version runs again on the latest table (and gives up, bounded, when it keeps meeting one),
//! and a malformed or foreign object is left out and named without losing the others.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use lace_control::learn::kube::{ObjectStore, LEARNED_LABEL, MAX_ATTEMPTS};
use lace_control::learn::store::{LearnStore, LearnStoreError};
use lace_control::learn::{LearnedTable, Location, MacRecord, Origin, Outcome};
use lace_control::source::kubernetes::KubernetesConfig;
use lace_kube_fake::FakeApiServer;
use lace_shared::types::MacAddr;

struct Cluster {
    _server: FakeApiServer,
    kube: KubernetesConfig,
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
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
            let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
            for e in std::fs::read_dir(crds).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "yaml") {
                    let crd: CustomResourceDefinition =
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
            _server: server,
            kube,
            rt,
            client,
            _dir: dir,
        }
    }

    /// The store of `node`'s control.
    fn open(&self, node: &str) -> ObjectStore {
        ObjectStore::open(&KubernetesConfig {
            node: node.into(),
            ..self.kube.clone()
        })
        .unwrap()
    }

    fn api(&self, plural: &str) -> Api<DynamicObject> {
        let ar = ApiResource {
            group: "lace-cni.io".into(),
            version: "v1alpha1".into(),
            api_version: "lace-cni.io/v1alpha1".into(),
            kind: String::new(),
            plural: plural.into(),
        };
        Api::all_with(self.client.clone(), &ar)
    }

    /// Every object of a lace kind (`fdbentries`, `neighbors`), by name.
    fn list(&self, plural: &str) -> Vec<(String, serde_json::Value)> {
        self.rt
            .block_on(self.api(plural).list(&Default::default()))
            .unwrap()
            .items
            .into_iter()
            .map(|o| {
                (
                    o.metadata.name.clone().unwrap(),
                    serde_json::to_value(o).unwrap(),
                )
            })
            .collect()
    }

    fn create(&self, plural: &str, o: serde_json::Value) {
        let o: DynamicObject = serde_json::from_value(o).unwrap();
        self.rt
            .block_on(self.api(plural).create(&PostParams::default(), &o))
            .unwrap();
    }
}

fn mac(i: u8) -> MacAddr {
    MacAddr([0x52, 0x54, 0, 0, 0, i])
}

fn at(node: &str, endpoint: u64) -> Location {
    Location {
        node: node.into(),
        endpoint,
    }
}

fn learned(i: u8, addresses: &[&str], active: Location) -> MacRecord {
    MacRecord {
        network: "vms".into(),
        mac: mac(i),
        origin: Origin::Learned,
        addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        active,
        pending: None,
        sequence: 1,
        last_seen_ms: 1_780_000_000_123 + u64::from(i),
    }
}

fn changed() -> Outcome {
    Outcome {
        changed: true,
        ..Outcome::default()
    }
}

/// Puts `r` in (replacing the record of its MAC).
fn put(s: &mut ObjectStore, r: MacRecord) {
    s.mutate(&mut |t: &mut LearnedTable| {
        t.insert(r.clone());
        changed()
    })
    .unwrap();
}

/// Takes the record of MAC `i` out.
fn remove(s: &mut ObjectStore, i: u8) {
    s.mutate(&mut |t: &mut LearnedTable| {
        let mut state = t.to_state();
        state.records.retain(|r| r.mac != mac(i));
        *t = LearnedTable::from_state(state).unwrap();
        changed()
    })
    .unwrap();
}

/// Refreshes `s` until `ok` holds of its table (the watch delivers asynchronously).
fn until(s: &mut ObjectStore, what: &str, ok: impl Fn(&LearnedTable) -> bool) {
    for _ in 0..500 {
        s.refresh().unwrap();
        if ok(s.table()) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{what}: never; the table is {:?}", s.table());
}

fn records(t: &LearnedTable) -> Vec<MacRecord> {
    t.records().values().cloned().collect()
}

#[test]
fn two_controls_share_every_field_of_the_records() {
    let c = Cluster::start();
    let mut a = c.open("node-a");
    let mut b = c.open("node-b");
    assert!(a.table().records().is_empty());
    let signal = b.changes();
    let before = signal.load(Ordering::Acquire);
    // a learns a VM's MAC with an address.
    put(&mut a, learned(1, &["10.60.0.50"], at("node-a", 7)));
    let entries = c.list("fdbentries");
    assert_eq!(entries.len(), 1, "{entries:?}");
    let (name, o) = &entries[0];
    assert_eq!(name, "vms.52-54-00-00-00-01");
    assert_eq!(o["metadata"]["labels"][LEARNED_LABEL], "true");
    let spec = &o["spec"];
    assert_eq!(
        (
            &spec["network"],
            &spec["mac"],
            &spec["node"],
            &spec["endpointId"],
            &spec["sequence"],
            &spec["learned"],
            &spec["addresses"],
            &spec["lastSeen"],
        ),
        (
            &"vms".into(),
            &"52:54:00:00:00:01".into(),
            &"node-a".into(),
            &7.into(),
            &1.into(),
            &true.into(),
            &serde_json::json!(["10.60.0.50"]),
            &"2026-05-28T20:26:40.124Z".into(),
        ),
        "{spec}"
    );
    let neighbors = c.list("neighbors");
    assert_eq!(neighbors.len(), 1, "{neighbors:?}");
    assert_eq!(neighbors[0].0, "vms.10-60-0-50");
    assert_eq!(
        (
            &neighbors[0].1["spec"]["mac"],
            &neighbors[0].1["spec"]["learned"]
        ),
        (&"52:54:00:00:00:01".into(), &true.into())
    );
    // b reads it back whole, and its store's change counter (what wakes its loop) moved.
    until(&mut b, "b sees a's record", |t| t == a.table());
    assert!(signal.load(Ordering::Acquire) > before);
    // An identity's pending location round-trips too.
    let identity = MacRecord {
        origin: Origin::Identity,
        addresses: BTreeSet::new(),
        pending: Some(at("node-b", 9)),
        ..learned(2, &[], at("node-a", 8))
    };
    put(&mut b, identity.clone());
    until(&mut a, "a sees b's identity", |t| t == b.table());
    assert_eq!(a.table().records()[&("vms".into(), mac(2))], identity);
    // b moves the VM to itself (sequence 2); another MAC announces the VM's address: the
    // address moves with its Neighbor.
    let mut moved = learned(1, &["10.60.0.50"], at("node-b", 3));
    moved.sequence = 2;
    put(&mut b, moved);
    put(
        &mut b,
        learned(3, &["10.60.0.50", "fd60::50"], at("node-b", 4)),
    );
    until(&mut a, "a sees the move", |t| t == b.table());
    let r1 = &a.table().records()[&("vms".into(), mac(1))];
    assert_eq!(
        (&r1.active, r1.sequence, r1.addresses.len()),
        (&at("node-b", 3), 2, 0)
    );
    let neighbors: Vec<(String, String)> = c
        .list("neighbors")
        .into_iter()
        .map(|(n, o)| (n, o["spec"]["mac"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        neighbors,
        [
            ("vms.10-60-0-50".to_owned(), "52:54:00:00:00:03".to_owned()),
            (
                "vms.fd60-0000-0000-0000-0000-0000-0000-0050".to_owned(),
                "52:54:00:00:00:03".to_owned()
            ),
        ]
    );
    // a forgets MAC 3: its entry and its Neighbors go; the others stay.
    remove(&mut a, 3);
    assert!(c.list("neighbors").is_empty());
    let names: Vec<String> = c.list("fdbentries").into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["vms.52-54-00-00-00-01", "vms.52-54-00-00-00-02"]);
    until(&mut b, "b sees the removal", |t| t == a.table());
    assert_eq!(records(b.table()).len(), 2);
    // A mutation that changes nothing writes nothing.
    let rv: Vec<String> = c
        .list("fdbentries")
        .into_iter()
        .map(|(_, o)| o["metadata"]["resourceVersion"].to_string())
        .collect();
    b.mutate(&mut |_| Outcome::default()).unwrap();
    let again: Vec<String> = c
        .list("fdbentries")
        .into_iter()
        .map(|(_, o)| o["metadata"]["resourceVersion"].to_string())
        .collect();
    assert_eq!(rv, again);
}

#[test]
fn a_write_that_meets_a_newer_version_runs_again_on_the_latest_table() {
    let c = Cluster::start();
    let mut a = c.open("node-a");
    let mut b = c.open("node-b");
    put(&mut a, learned(1, &[], at("node-a", 7)));
    until(&mut b, "b sees a's record", |t| t == a.table());
    let key = ("vms".to_owned(), mac(1));
    // b bumps the sequence; while its `f` runs (after it read, before it writes) a moves the
    // MAC to sequence 10. b's write is stale: `f` runs again on a's version.
    let mut seen = Vec::new();
    let out = b
        .mutate(&mut |t: &mut LearnedTable| {
            let mut r = t.records()[&key].clone();
            seen.push(r.sequence);
            if seen.len() == 1 {
                let mut theirs = r.clone();
                theirs.sequence = 10;
                theirs.active = at("node-a", 8);
                put(&mut a, theirs);
            }
            r.sequence += 1;
            r.active = at("node-b", 3);
            t.insert(r);
            changed()
        })
        .unwrap();
    assert!(out.changed);
    assert_eq!(seen, [1, 10], "f ran again on the latest table");
    assert_eq!(b.conflicts(), 1);
    let r = &b.table().records()[&key];
    assert_eq!((r.sequence, &r.active), (11, &at("node-b", 3)));
    until(&mut a, "a sees b's write", |t| t == b.table());
    // A write that keeps meeting newer versions gives up after MAX_ATTEMPTS, saying so; the
    // records stay as the last writer left them.
    let mut n = 0u32;
    let e = b
        .mutate(&mut |t: &mut LearnedTable| {
            n += 1;
            let mut r = t.records()[&key].clone();
            let mut theirs = r.clone();
            theirs.sequence += 100;
            put(&mut a, theirs);
            r.sequence += 1;
            t.insert(r);
            changed()
        })
        .unwrap_err();
    assert!(
        matches!(e, LearnStoreError::Contended { attempts } if attempts == MAX_ATTEMPTS),
        "{e}"
    );
    assert!(
        e.to_string().contains("retrying with the next batch"),
        "{e}"
    );
    assert_eq!(n, MAX_ATTEMPTS);
    until(&mut b, "b has a's last write", |t| t == a.table());
    assert_eq!(b.table().records()[&key].sequence, 11 + 100 * MAX_ATTEMPTS);
}

#[test]
fn malformed_and_foreign_objects_are_left_out_and_named_without_losing_the_others() {
    let c = Cluster::start();
    let mut a = c.open("node-a");
    put(&mut a, learned(1, &["10.60.0.51"], at("node-a", 7)));
    let entry = |name: &str, m: &str, labelled: bool| {
        let mut o = serde_json::json!({
            "apiVersion": "lace-cni.io/v1alpha1", "kind": "FDBEntry",
            "metadata": {"name": name},
            "spec": {"network": "vms", "mac": m, "node": "node-a", "sequence": 1, "learned": true},
        });
        if labelled {
            o["metadata"]["labels"] = serde_json::json!({LEARNED_LABEL: "true"});
        }
        o
    };
    // Labelled but not a record: no endpoint id (an FDBEntry of an earlier version, say), a
    // name that is not its network's and MAC's. Unlabelled: someone else's, not read at all.
    c.create(
        "fdbentries",
        entry("vms.52-54-00-00-00-09", "52:54:00:00:00:09", true),
    );
    c.create("fdbentries", entry("stray", "52:54:00:00:00:0a", true));
    c.create(
        "fdbentries",
        entry("vms.52-54-00-00-00-0b", "52:54:00:00:00:0b", false),
    );
    let mut b = c.open("node-b");
    assert_eq!(
        records(b.table()),
        [learned(1, &["10.60.0.51"], at("node-a", 7))]
    );
    let left_out: Vec<(&str, &str)> = b
        .left_out()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(left_out.len(), 2, "{left_out:?}");
    assert_eq!(left_out[0].0, "FDBEntry stray");
    assert!(
        left_out[0]
            .1
            .contains("its name is not vms.52-54-00-00-00-0a"),
        "{left_out:?}"
    );
    assert_eq!(left_out[1].0, "FDBEntry vms.52-54-00-00-00-09");
    assert!(
        left_out[1].1.contains("spec.endpointId is missing"),
        "{left_out:?}"
    );
    // A record learned under the malformed entry's name replaces it.
    put(&mut b, learned(9, &[], at("node-b", 2)));
    assert_eq!(b.left_out().keys().collect::<Vec<_>>(), ["FDBEntry stray"]);
    assert_eq!(records(b.table()).len(), 2);
    until(&mut a, "a reads the replacement", |t| t == b.table());
    // One under the foreign entry's name is refused, naming it and the way out; nothing else
    // is lost.
    let e = b
        .mutate(&mut |t: &mut LearnedTable| {
            t.insert(learned(11, &[], at("node-b", 5)));
            changed()
        })
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("FDBEntry vms.52-54-00-00-00-0b")
            && text.contains(LEARNED_LABEL)
            && text.contains("delete it"),
        "{text}"
    );
    assert_eq!(records(b.table()).len(), 2);
    let names: BTreeSet<String> = c.list("fdbentries").into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 4, "{names:?}");
}

/// A learned address is a claim every node's IPAM honours (ADR 0015's `Neighbor` claims): a
/// control allocating on the network hands it to no pod.
#[test]
fn a_learned_address_is_never_handed_to_a_pod() {
    use k8s_openapi::api::core::v1::Namespace;
    use lace_control::api::NetworkType;
    use lace_control::daemon::cluster_state::ClusterState;
    use lace_control::daemon::control::IpamStore;
    use lace_control::ipam::{AllocateRequest, AttachmentKey, IpamConfig, NetworkDef, PodRef};

    let c = Cluster::start();
    for name in ["lace-system", "shop"] {
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
        }))
        .unwrap();
        c.rt.block_on(Api::<Namespace>::all(c.client.clone()).create(&PostParams::default(), &ns))
            .unwrap();
    }
    let taken: Vec<String> = (2..10).map(|i| format!("10.50.0.{i}")).collect();
    let taken: Vec<&str> = taken.iter().map(String::as_str).collect();
    let mut a = c.open("node-a");
    put(
        &mut a,
        MacRecord {
            network: "flat".into(),
            ..learned(1, &taken, at("node-a", 7))
        },
    );
    let mut ipam = ClusterState::open(
        &KubernetesConfig {
            node: "node-a".into(),
            ..c.kube.clone()
        },
        "lace-system",
        IpamConfig::default(),
    )
    .unwrap();
    let def = NetworkDef {
        kind: NetworkType::L2,
        v4: Some(("10.50.0.0/16".parse().unwrap(), None)),
        v6: None,
    };
    let lease = ipam
        .mutate(|i| {
            i.ensure_network("flat", &def)?;
            i.ensure_node("node-a")?;
            i.allocate(&AllocateRequest {
                key: AttachmentKey {
                    container_id: "c1".into(),
                    ifname: "eth0".into(),
                },
                network: "flat".into(),
                node: "node-a".into(),
                pod: PodRef {
                    namespace: "shop".into(),
                    name: "web".into(),
                    uid: String::new(),
                },
                identity: None,
            })
        })
        .unwrap();
    let got: Vec<String> = lease
        .addresses
        .iter()
        .map(|a| a.address.to_string())
        .collect();
    assert_eq!(got.len(), 1);
    assert!(!taken.contains(&got[0].as_str()), "{got:?} was learned");
}
