//! The daemon's event loop with a scripted source and a scripted CNI client: the real
//! [`Control`] loop on its own thread, the IPAM state in memory, the tables a real region in
//! /dev/shm (read back by the test as the forwarder would), the status recorded. No sockets,
//! no forwarder, no root: the test sends the loop what the source thread and the CNI
//! connections send, and plays the forwarder where an Attach needs one. The last tests run the
//! loop against the fake API server (`lace-kube-fake`), and `lace-control` itself in
//! Kubernetes mode.

mod e2e_support;

use std::collections::BTreeSet;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use lace_control::compile::{CompileConfig, Compiler};
use lace_control::daemon::control::{
    Answer, AttachTicket, CniCall, Control, Event, IpamStore, LoopConfig, Published, Reply,
};
use lace_control::daemon::core::{Core, ServiceEndpoints};
use lace_control::daemon::learning::Learning;
use lace_control::daemon::state::AttachedMarks;
use lace_control::daemon::status::{StatusFile, StatusSink};
use lace_control::fsio::WriteError;
use lace_control::ipam::{Ipam, IpamConfig, SharedIpam};
use lace_control::proto::{Allocation, Attachment, ErrorCode, Request, Response};
use lace_control::service::ServiceCidr;
use lace_control::source::standalone::objects_from_yaml;
use lace_control::source::{Snapshot, SourceEvent};
use lace_shared::policy::{ServiceKey, PROTO_TCP};
use lace_shared::tables::{TableReader, TableWriter, TablesConfig};
use lace_shared::types::{NetworkId, NextHop};

const BASE: &str = r#"
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata: {name: backend}
spec:
  type: l3
  ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata: {name: by-label}
spec:
  rules:
  - network: backend
    selector: {matchLabels: {tier: backend}}
  - network: later
    selector: {matchLabels: {tier: later}}
---
apiVersion: v1
kind: Node
metadata:
  name: node-a
  annotations: {lace-cni.io/underlay: "fd00:100::a"}
"#;

fn pod(name: &str, tier: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop, labels: \
         {{tier: {tier}}}}}\nspec: {{nodeName: node-a, containers: [{{name: app, image: x}}]}}\n"
    )
}

fn snapshot(yaml: &str) -> Event {
    let (objects, problems) = objects_from_yaml(yaml);
    assert!(problems.is_empty(), "{problems:?}");
    Event::Source(SourceEvent::Snapshot(Box::new(Snapshot {
        objects,
        problems,
        origins: Default::default(),
    })))
}

/// Every status the loop reported.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<StatusFile>>>);

impl StatusSink for Recorder {
    fn publish(&mut self, status: &StatusFile) -> Result<(), WriteError> {
        self.0.lock().unwrap().push(status.clone());
        Ok(())
    }
}

/// Starts a paused loop's thread.
type Starter = Box<dyn FnOnce() -> JoinHandle<()> + Send>;

/// The loop on its thread, its tables in /dev/shm (removed on drop).
struct Lab {
    events: Sender<Event>,
    thread: Option<JoinHandle<()>>,
    paused: Option<Starter>,
    tables: TablesConfig,
    status: Recorder,
}

impl Lab {
    fn start(pod_wait: Duration) -> Lab {
        let mut lab = Lab::paused(pod_wait);
        lab.resume();
        lab
    }

    /// Starts the loop's thread: everything sent so far is its first batch.
    fn resume(&mut self) {
        if let Some(start) = self.paused.take() {
            self.thread = Some(start());
        }
    }

    /// A loop that does not run until [`Lab::resume`].
    fn paused(pod_wait: Duration) -> Lab {
        Lab::paused_with(
            pod_wait,
            SharedIpam::in_memory(Ipam::new(IpamConfig::default()).unwrap()),
        )
    }

    /// A running loop over `store`.
    fn start_with<S: IpamStore + Send + 'static>(pod_wait: Duration, store: S) -> Lab {
        let mut lab = Lab::paused_with(pod_wait, store);
        lab.resume();
        lab
    }

    fn paused_with<S: IpamStore + Send + 'static>(pod_wait: Duration, store: S) -> Lab {
        Lab::paused_with_sink(pod_wait, store, Core::new("node-a"), |r| r)
    }

    /// A paused loop of `core` over `store` whose status goes to `sink(recorder)`.
    fn paused_with_sink<S, K>(
        pod_wait: Duration,
        store: S,
        core: Core,
        sink: impl FnOnce(Recorder) -> K,
    ) -> Lab
    where
        S: IpamStore + Send + 'static,
        K: StatusSink + Send + 'static,
    {
        Lab::paused_learning(pod_wait, store, core, sink, None)
    }

    /// [`Lab::paused_with_sink`], learning l2 MACs into `learning`'s store when given.
    fn paused_learning<S, K>(
        pod_wait: Duration,
        store: S,
        core: Core,
        sink: impl FnOnce(Recorder) -> K,
        learning: Option<Learning>,
    ) -> Lab
    where
        S: IpamStore + Send + 'static,
        K: StatusSink + Send + 'static,
    {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut tables = TablesConfig::new(&format!("ltd-{}-{n}", std::process::id()));
        tables.size = 64 << 20;
        let writer = TableWriter::open_or_create(&tables).unwrap();
        let status = Recorder::default();
        let cfg = CompileConfig::default();
        let control = Control::new(
            core,
            LoopConfig {
                pod_wait,
                tick: Duration::from_millis(20),
                compile: cfg,
            },
            store,
            AttachedMarks::in_memory(),
            Compiler::new("node-a", cfg),
            writer,
            sink(status.clone()),
            Arc::new(Published::default()),
        );
        let (events, rx): (Sender<Event>, Receiver<Event>) = mpsc::channel();
        let mut control = match learning {
            Some(l) => control.with_learning(l),
            None => control,
        };
        Lab {
            events,
            thread: None,
            paused: Some(Box::new(move || {
                std::thread::spawn(move || control.run(&rx))
            })),
            tables,
            status,
        }
    }

    fn send(&self, e: Event) {
        self.events.send(e).unwrap();
    }

    /// Sends a CNI request; the reply comes on the returned receiver.
    fn call(&self, request: Request) -> Receiver<Reply> {
        let (tx, rx) = mpsc::channel();
        self.send(Event::Cni(CniCall { request, reply: tx }));
        rx
    }

    fn ask(&self, request: Request) -> Reply {
        self.call(request)
            .recv_timeout(Duration::from_secs(30))
            .expect("the loop answers")
    }

    /// The endpoint id the published tables hold for `port` (the forwarder's view).
    fn published_endpoint(&self, t: &AttachTicket) -> Option<u64> {
        let r = TableReader::attach(&self.tables).unwrap();
        let mut h = r.register().unwrap();
        let snap = h.snapshot();
        snap.port(t.port).map(|p| p.endpoint)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.events.send(Event::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(self.tables.tables_path());
        let _ = std::fs::remove_file(self.tables.qsbr_path());
    }
}

fn attachment(container: &str, pod: &str) -> Attachment {
    Attachment {
        container_id: container.into(),
        ifname: "eth0".into(),
        pod_namespace: "shop".into(),
        pod_name: pod.into(),
        pod_uid: String::new(),
        netns: "/var/run/netns/x".into(),
    }
}

fn allocated(r: Reply) -> Allocation {
    match r {
        Reply::Done(Answer {
            response: Response::Allocated(a),
            ..
        }) => a,
        other => panic!("not an allocation: {other:?}"),
    }
}

fn refused(r: Reply) -> (ErrorCode, String, bool) {
    match r {
        Reply::Done(Answer {
            response: Response::Error { code, msg, .. },
            ordinary,
        }) => (code, msg, ordinary),
        other => panic!("not an error: {other:?}"),
    }
}

fn ticket(r: Reply) -> AttachTicket {
    match r {
        Reply::Attached(t) => t,
        other => panic!("not attached: {other:?}"),
    }
}

#[test]
fn status_waits_for_the_first_snapshot() {
    let lab = Lab::start(Duration::from_millis(500));
    let (code, msg, _) = refused(lab.ask(Request::Status));
    assert_eq!(code, ErrorCode::TryAgainLater, "{msg}");
    // A request from before the snapshot is held, not judged against an empty world.
    let early = lab.call(Request::Allocate(attachment("c0", "web")));
    lab.send(snapshot(&format!("{BASE}{}", pod("web", "backend"))));
    let a = allocated(early.recv_timeout(Duration::from_secs(30)).unwrap());
    assert_eq!(a.network, "backend");
    assert_eq!(
        lab.ask(Request::Status),
        Reply::Done(Answer {
            response: Response::Ok,
            ordinary: true
        })
    );
}

/// An ADD for a pod control has not observed waits for it (bounded), and succeeds once the
/// pod appears; one that never appears is refused with 11, never bound with a stand-in.
#[test]
fn an_add_for_an_unobserved_pod_waits_for_it_then_gives_up_with_try_again() {
    let lab = Lab::start(Duration::from_millis(1500));
    lab.send(snapshot(BASE));
    let waiting = lab.call(Request::Allocate(attachment("c1", "late")));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        waiting.try_recv().is_err(),
        "answered before the pod was seen"
    );
    lab.send(snapshot(&format!("{BASE}{}", pod("late", "backend"))));
    let a = allocated(waiting.recv_timeout(Duration::from_secs(30)).unwrap());
    assert_eq!(a.network, "backend");
    assert!(a.fresh);

    let (code, msg, _) = refused(lab.ask(Request::Allocate(attachment("c2", "never"))));
    assert_eq!(code, ErrorCode::TryAgainLater);
    assert!(msg.contains("pod shop/never is not known"), "{msg}");
}

/// A pod bound to a network that does not exist yet is "try again later"; once the network
/// exists, the retry succeeds. A pod no policy binds is 100 (permanent).
#[test]
fn a_pod_bound_to_a_missing_network_is_try_again_later() {
    let lab = Lab::start(Duration::from_millis(500));
    let pods = format!("{}{}", pod("early", "later"), pod("lost", "none"));
    lab.send(snapshot(&format!("{BASE}{pods}")));
    let (code, msg, _) = refused(lab.ask(Request::Allocate(attachment("c1", "early"))));
    assert_eq!(code, ErrorCode::TryAgainLater);
    assert!(
        msg.contains("binds to Network later") && msg.contains("does not exist yet"),
        "{msg}"
    );
    let (code, _, _) = refused(lab.ask(Request::Allocate(attachment("c2", "lost"))));
    assert_eq!(code, ErrorCode::Unbound);
    let later = "---\napiVersion: lace-cni.io/v1alpha1\nkind: Network\nmetadata: {name: later}\nspec: {type: l3, ipv4Subnet: {prefix: 10.41.0.0/16, hostLocalPrefixLength: 24}}\n";
    lab.send(snapshot(&format!("{BASE}{pods}{later}")));
    assert_eq!(
        allocated(lab.ask(Request::Allocate(attachment("c1", "early")))).network,
        "later"
    );
}

/// Attach publishes the port; an Attach of an attached lease (the plugin rebuilt a vanished
/// interface) publishes it again with a new endpoint id, so the forwarder replaces its port.
#[test]
fn a_repeated_attach_renews_the_endpoint_the_forwarder_sees() {
    let lab = Lab::start(Duration::from_millis(500));
    lab.send(snapshot(&format!("{BASE}{}", pod("web", "backend"))));
    let a = allocated(lab.ask(Request::Allocate(attachment("c1", "web"))));
    let first = ticket(lab.ask(Request::Attach(attachment("c1", "web"))));
    assert!(a.same_interface(&first.allocation));
    assert_eq!(lab.published_endpoint(&first), Some(first.endpoint));
    let again = ticket(lab.ask(Request::Attach(attachment("c1", "web"))));
    assert_eq!(again.port, first.port);
    assert!(again.endpoint > first.endpoint);
    assert!(again.generation > first.generation);
    assert_eq!(lab.published_endpoint(&again), Some(again.endpoint));
    // The same addresses, MAC and interface: only the endpoint changed.
    assert_eq!(again.allocation, first.allocation);
    // A retried Allocate returns the lease as it is, not fresh.
    let retried = allocated(lab.ask(Request::Allocate(attachment("c1", "web"))));
    assert!(!retried.fresh);
    assert!(retried.same_interface(&a));
    // The status shows the endpoint attached with its new id.
    let s = lab.status.0.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        (
            s.network_endpoints[0].attached,
            s.network_endpoints[0].endpoint_id
        ),
        (true, again.endpoint)
    );
}

/// A VM's pods: an l2 network `vms` the pods labelled `tier: vm` bind to, and pods carrying
/// the sticky identity annotation `identity` (none when empty).
const VMS: &str = r#"
---
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata: {name: vms}
spec:
  type: l2
  ipv4Subnet: {prefix: 10.60.0.0/24}
  l2: {learning: {enabled: true}}
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata: {name: vm-tier}
spec:
  priority: -10
  rules:
  - network: vms
    selector: {matchLabels: {tier: vm}}
"#;

fn identity_pod(name: &str, tier: &str, identity: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop, labels: \
         {{tier: {tier}}}, annotations: {{l2.lace-cni.io/identity: {identity:?}}}}}\nspec: \
         {{nodeName: node-a, containers: [{{name: app, image: x}}]}}\n"
    )
}

/// Pods asking for one sticky identity (a VM's source and migration target) are given the
/// same addresses and MAC; another identity its own; a malformed identity, or one on an l3
/// network, is refused with the fix and allocates nothing.
#[test]
fn pods_of_one_identity_share_addresses_and_mac() {
    let lab = Lab::start(Duration::from_millis(500));
    let pods = [
        identity_pod("launcher-src", "vm", "vm-1"),
        identity_pod("launcher-dst", "vm", "vm-1"),
        identity_pod("other", "vm", "vm-2"),
        identity_pod("bad", "vm", "VM_1"),
        identity_pod("routed", "backend", "vm-1"),
    ]
    .concat();
    lab.send(snapshot(&format!("{BASE}{VMS}{pods}")));
    let src = allocated(lab.ask(Request::Allocate(attachment("c1", "launcher-src"))));
    let dst = allocated(lab.ask(Request::Allocate(attachment("c2", "launcher-dst"))));
    let other = allocated(lab.ask(Request::Allocate(attachment("c3", "other"))));
    assert_eq!(src.network, "vms");
    assert_eq!((&dst.ips, &dst.mac), (&src.ips, &src.mac));
    assert_ne!(dst.host_interface, src.host_interface);
    assert_ne!(other.mac, src.mac);
    assert_ne!(other.ips, src.ips);
    let (code, msg, _) = refused(lab.ask(Request::Allocate(attachment("c4", "bad"))));
    assert_eq!(code, ErrorCode::InvalidArgs);
    assert!(
        msg.contains("shop/bad")
            && msg.contains("l2.lace-cni.io/identity")
            && msg.contains("DNS-1123 label"),
        "{msg}"
    );
    let (code, msg, _) = refused(lab.ask(Request::Allocate(attachment("c5", "routed"))));
    assert_eq!(code, ErrorCode::InvalidArgs);
    assert!(
        msg.contains("Network backend") && msg.contains("only pods of an l2 network"),
        "{msg}"
    );
    // Both attach: two endpoints of one MAC, the status shows both.
    let a = ticket(lab.ask(Request::Attach(attachment("c1", "launcher-src"))));
    let b = ticket(lab.ask(Request::Attach(attachment("c2", "launcher-dst"))));
    assert_ne!(a.endpoint, b.endpoint);
    let s = lab.status.0.lock().unwrap().last().cloned().unwrap();
    let macs: Vec<_> = s
        .network_endpoints
        .iter()
        .filter(|e| e.object.spec.network == "vms")
        .map(|e| e.object.spec.mac.clone())
        .collect();
    assert_eq!(
        macs.iter().filter(|m| **m == src.mac).count(),
        2,
        "{macs:?}"
    );
}

/// DEL of something already gone, and its lookup, are ordinary (not warnings); GC releases
/// what the runtime no longer knows.
#[test]
fn ordinary_dels_are_quiet_and_gc_releases() {
    let lab = Lab::start(Duration::from_millis(500));
    lab.send(snapshot(&format!(
        "{BASE}{}{}",
        pod("web", "backend"),
        pod("api", "backend")
    )));
    let (code, _, ordinary) = refused(lab.ask(Request::Check(attachment("gone", "web"))));
    assert_eq!((code, ordinary), (ErrorCode::InvalidArgs, true));
    assert_eq!(
        lab.ask(Request::Release(attachment("gone", "web"))),
        Reply::Done(Answer {
            response: Response::Ok,
            ordinary: true
        })
    );
    allocated(lab.ask(Request::Allocate(attachment("c1", "web"))));
    allocated(lab.ask(Request::Allocate(attachment("c2", "api"))));
    let gc = lab.ask(Request::Gc {
        valid: vec![attachment("c2", "api")],
    });
    assert!(matches!(
        gc,
        Reply::Done(Answer {
            response: Response::Ok,
            ..
        })
    ));
    assert!(matches!(
        refused(lab.ask(Request::Check(attachment("c1", "web")))),
        (ErrorCode::InvalidArgs, _, true)
    ));
    allocated(lab.ask(Request::Check(attachment("c2", "api"))));
}

/// Twenty ADDs at once are answered from one batch — one IPAM transaction, one world, one
/// publication, one status — with distinct addresses, and the status shows every pod's binding
/// and endpoint.
#[test]
fn concurrent_adds_are_one_batch_and_never_share_an_address() {
    let mut lab = Lab::paused(Duration::from_millis(500));
    let pods: String = (0..20).map(|i| pod(&format!("p{i}"), "backend")).collect();
    lab.send(snapshot(&format!("{BASE}{pods}")));
    let pending: Vec<Receiver<Reply>> = (0..20)
        .map(|i| {
            lab.call(Request::Allocate(attachment(
                &format!("c{i}"),
                &format!("p{i}"),
            )))
        })
        .collect();
    lab.resume();
    let mut addresses = BTreeSet::new();
    for r in pending {
        let a = allocated(r.recv_timeout(Duration::from_secs(30)).unwrap());
        assert!(addresses.insert(a.ips[0].address.clone()), "{a:?}");
    }
    assert_eq!(addresses.len(), 20);
    let reports = lab.status.0.lock().unwrap().clone();
    assert_eq!(reports.len(), 1, "one batch, one report");
    let s = &reports[0];
    assert_eq!(s.network_endpoints.len(), 20);
    assert_eq!(s.pods.len(), 20);
    assert!(s.pods.iter().all(|p| p.binding == "backend"));
}

// ---- the Kubernetes source, against the fake API server ----------------------------------
//
// The same loop, fed by the real Kubernetes source thread (`source::kubernetes::run`) watching
// `lace-kube-fake` over TLS through a kubeconfig. The test plays kubectl and the kubelet:
// it creates the objects in the API.

mod kube_cluster {
    use std::path::PathBuf;

    use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
    use kube::core::GroupVersionKind;
    use lace_kube_fake::FakeApiServer;

    /// A fake API server with lace's CRDs installed, and a client of it.
    pub struct Cluster {
        pub server: FakeApiServer,
        pub kubeconfig: PathBuf,
        rt: tokio::runtime::Runtime,
        client: kube::Client,
        _dir: tempfile::TempDir,
    }

    impl Cluster {
        pub fn start() -> Cluster {
            let server = FakeApiServer::start_new().unwrap();
            let dir = tempfile::tempdir().unwrap();
            let kubeconfig = dir.path().join("kubeconfig");
            server.write_kubeconfig(&kubeconfig).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let client = rt.block_on(async {
                let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
                let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                    .await
                    .unwrap();
                kube::Client::try_from(cfg).unwrap()
            });
            let c = Cluster {
                server,
                kubeconfig,
                rt,
                client,
                _dir: dir,
            };
            let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
            for e in std::fs::read_dir(crds).unwrap() {
                c.create(&std::fs::read_to_string(e.unwrap().path()).unwrap());
            }
            c
        }

        fn api(&self, o: &DynamicObject) -> Api<DynamicObject> {
            let types = o.types.clone().unwrap();
            let gvk = GroupVersionKind::try_from(&types).unwrap();
            let (ar, caps) = self
                .rt
                .block_on(kube::discovery::pinned_kind(&self.client, &gvk))
                .unwrap();
            match (&caps.scope, &o.metadata.namespace) {
                (kube::discovery::Scope::Namespaced, Some(ns)) => {
                    Api::namespaced_with(self.client.clone(), ns, &ar)
                }
                _ => Api::all_with(self.client.clone(), &ar),
            }
        }

        /// Creates every document of `yaml`.
        pub fn create(&self, yaml: &str) {
            for doc in yaml.split("\n---").filter(|d| d.contains("kind:")) {
                let o: DynamicObject = serde_yaml::from_str(doc).unwrap();
                let api = self.api(&o);
                self.rt
                    .block_on(api.create(&PostParams::default(), &o))
                    .unwrap_or_else(|e| panic!("create {:?}: {e}", o.metadata.name));
            }
        }

        /// The namespaced object as the API server has it; `None` when there is none.
        pub fn get_in(
            &self,
            api_version: &str,
            kind: &str,
            namespace: &str,
            name: &str,
        ) -> Option<serde_json::Value> {
            let o: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": api_version, "kind": kind,
                "metadata": {"name": name, "namespace": namespace}
            }))
            .unwrap();
            let got = self.rt.block_on(self.api(&o).get_opt(name)).unwrap();
            got.map(|o| serde_json::to_value(o).unwrap())
        }

        /// Replaces the `spec` of cluster-scoped object `name`.
        pub fn replace_spec(
            &self,
            api_version: &str,
            kind: &str,
            name: &str,
            spec: serde_json::Value,
        ) {
            let o: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": api_version, "kind": kind, "metadata": {"name": name}
            }))
            .unwrap();
            let api = self.api(&o);
            let mut current = self.rt.block_on(api.get(name)).unwrap();
            current.data["spec"] = spec;
            self.rt
                .block_on(api.replace(name, &PostParams::default(), &current))
                .unwrap();
        }

        /// Every object of a kind in `namespace`.
        pub fn list_in(
            &self,
            api_version: &str,
            kind: &str,
            namespace: &str,
        ) -> Vec<serde_json::Value> {
            let o: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": api_version, "kind": kind,
                "metadata": {"name": "x", "namespace": namespace}
            }))
            .unwrap();
            let list = self
                .rt
                .block_on(self.api(&o).list(&Default::default()))
                .unwrap();
            list.items
                .into_iter()
                .map(|o| serde_json::to_value(o).unwrap())
                .collect()
        }

        /// The object as the API server has it.
        pub fn get(&self, api_version: &str, kind: &str, name: &str) -> serde_json::Value {
            let o: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": api_version, "kind": kind, "metadata": {"name": name}
            }))
            .unwrap();
            let got = self.rt.block_on(self.api(&o).get(name)).unwrap();
            serde_json::to_value(got).unwrap()
        }

        /// Replaces the object `yaml` names with `yaml` (an unconditional PUT).
        pub fn replace(&self, yaml: &str) {
            let o: DynamicObject = serde_yaml::from_str(yaml.trim_start_matches("---")).unwrap();
            let api = self.api(&o);
            let name = o.metadata.name.clone().unwrap();
            self.rt
                .block_on(api.replace(&name, &PostParams::default(), &o))
                .unwrap_or_else(|e| panic!("replace {name}: {e}"));
        }

        /// Deletes the object `yaml` names, as the kubelet finishes it (grace period 0).
        pub fn delete(&self, yaml: &str) {
            let o: DynamicObject = serde_yaml::from_str(yaml.trim_start_matches("---")).unwrap();
            let api = self.api(&o);
            let name = o.metadata.name.clone().unwrap();
            self.rt
                .block_on(api.delete(&name, &DeleteParams::default().grace_period(0)))
                .unwrap();
        }
    }
}

const NAMESPACE: &str = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n";

/// Starts the Kubernetes source thread against `cluster`, sending into `lab`'s loop.
fn kube_source(lab: &Lab, cluster: &kube_cluster::Cluster) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let events = lab.events.clone();
    let cfg = lace_control::source::kubernetes::KubernetesConfig {
        kubeconfig: Some(cluster.kubeconfig.clone()),
        node: "node-a".into(),
    };
    std::thread::spawn(move || {
        lace_control::source::kubernetes::run(&cfg, |e| events.send(Event::Source(e)).is_ok())
    });
}

/// Asks `request` until it is allocated (the watch delivers objects asynchronously; an ADD for
/// a pod not seen yet waits --pod-wait-ms and is then "try again later", as kubelet retries).
fn allocate_eventually(lab: &Lab, container: &str, pod: &str) -> Allocation {
    for _ in 0..100 {
        match lab.ask(Request::Allocate(attachment(container, pod))) {
            Reply::Done(Answer {
                response: Response::Allocated(a),
                ..
            }) => return a,
            Reply::Done(Answer {
                response:
                    Response::Error {
                        code: ErrorCode::TryAgainLater,
                        msg,
                        ..
                    },
                ..
            }) => tracing::info!("ADD of {pod}: {msg}"),
            other => panic!("ADD of {pod}: {other:?}"),
        }
    }
    panic!("ADD of {pod} never succeeded")
}

/// Objects created in the API become a bound, allocated, compiled pod; a pod created later
/// arrives as a watch event; a deleted pod is forgotten.
#[test]
fn objects_in_the_api_server_reach_the_loop_through_the_kubernetes_source() {
    let cluster = kube_cluster::Cluster::start();
    cluster.create(&format!("{NAMESPACE}---{BASE}{}", pod("web", "backend")));
    let lab = Lab::start(Duration::from_millis(300));
    kube_source(&lab, &cluster);
    let a = allocate_eventually(&lab, "c1", "web");
    assert_eq!(a.network, "backend");
    let t = ticket(lab.ask(Request::Attach(attachment("c1", "web"))));
    assert!(
        lab.published_endpoint(&t).is_some(),
        "the pod's port is in the tables"
    );
    // A pod created after the initial list: a watch event.
    cluster.create(&pod("api", "backend"));
    let b = allocate_eventually(&lab, "c2", "api");
    assert_ne!(a.ips, b.ips);
    // A pod of another node is watched too, kept as a policy peer (ADR 0039).
    cluster.create(&pod("elsewhere", "backend").replace("nodeName: node-a", "nodeName: node-b"));
    cluster.delete(&pod("api", "backend"));
    let status = || lab.status.0.lock().unwrap().last().cloned().unwrap();
    for _ in 0..200 {
        let s = status();
        if !s.pods.iter().any(|p| p.name == "api") && s.pods.iter().any(|p| p.name == "elsewhere") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = status();
    assert!(!s.pods.iter().any(|p| p.name == "api"), "{:?}", s.pods);
    let elsewhere = s.pods.iter().find(|p| p.name == "elsewhere");
    assert_eq!(
        elsewhere.and_then(|p| p.node.as_deref()),
        Some("node-b"),
        "{:?}",
        s.pods
    );
    assert!(s.pods.iter().any(|p| p.name == "web"));
    // Its lease went with it (no DEL came): GC by the pod list.
    assert!(matches!(
        refused(lab.ask(Request::Check(attachment("c2", "api")))),
        (ErrorCode::InvalidArgs, _, true)
    ));
}

/// A dropped watch that cannot resume (history compacted: 410) relists and converges; while
/// the API server is down control keeps its state and answers DEL; when it returns, changes
/// made meanwhile arrive.
#[test]
fn the_kubernetes_source_relists_after_gone_and_outlives_the_api_server() {
    let mut cluster = kube_cluster::Cluster::start();
    cluster.create(&format!("{NAMESPACE}---{BASE}{}", pod("web", "backend")));
    let lab = Lab::start(Duration::from_millis(300));
    kube_source(&lab, &cluster);
    allocate_eventually(&lab, "c1", "web");
    // Forced relist.
    cluster.server.drop_watches();
    cluster.create(&pod("after-gone", "backend"));
    cluster.server.compact();
    allocate_eventually(&lab, "c2", "after-gone");
    // The API server goes away: DEL is still answered, ADD of a known pod still works.
    cluster.server.stop();
    assert!(matches!(
        lab.ask(Request::Release(attachment("c2", "after-gone"))),
        Reply::Done(Answer {
            response: Response::Ok,
            ..
        })
    ));
    assert!(matches!(
        refused(lab.ask(Request::Check(attachment("c2", "after-gone")))),
        (ErrorCode::InvalidArgs, _, true)
    ));
    allocated(lab.ask(Request::Allocate(attachment("c3", "web"))));
    // It returns (state kept); what was created meanwhile is seen.
    cluster.server.start().unwrap();
    cluster.create(&pod("back", "backend"));
    allocate_eventually(&lab, "c4", "back");
}

/// Kubernetes mode whole: allocations in the API server (`ClusterState`). A control killed and
/// restarted re-reads its allocations (the same ADD gets the same lease, not a fresh one) and
/// releases the lease of a pod deleted while it was down.
#[test]
fn a_restarted_control_rereads_its_allocations_and_releases_pods_deleted_meanwhile() {
    use lace_control::daemon::cluster_state::ClusterState;
    let cluster = kube_cluster::Cluster::start();
    cluster.create(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: lace-system}}\n---{NAMESPACE}---{BASE}{}{}",
        pod("web", "backend"),
        pod("api", "backend")
    ));
    let kube = lace_control::source::kubernetes::KubernetesConfig {
        kubeconfig: Some(cluster.kubeconfig.clone()),
        node: "node-a".into(),
    };
    let open = || ClusterState::open(&kube, "lace-system", IpamConfig::default()).unwrap();
    let mut lab = Lab::paused_with_sink(Duration::from_millis(300), open(), kube_core(), |r| {
        lace_control::daemon::api_status::ApiStatusSink::new(&kube, "lace-system", r).unwrap()
    });
    lab.resume();
    kube_source(&lab, &cluster);
    let web = allocate_eventually(&lab, "c1", "web");
    // The Network's status is in the API, applied by lace-control to the status subresource.
    // (The status is applied at the end of the batch that answered the ADD.)
    let mut network = serde_json::Value::Null;
    for _ in 0..200 {
        network = cluster.get("lace-cni.io/v1alpha1", "Network", "backend");
        if network["status"]["id"].is_u64() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(network["status"]["id"].as_u64().is_some(), "{network}");
    assert!(network["status"]["conditions"]
        .as_array()
        .is_some_and(|c| !c.is_empty()));
    assert!(network["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["manager"] == "lace-control" && m["subresource"] == "status"));
    allocate_eventually(&lab, "c2", "api");
    drop(lab);
    cluster.delete(&pod("api", "backend"));

    let lab = Lab::start_with(Duration::from_millis(300), open());
    kube_source(&lab, &cluster);
    let again = allocate_eventually(&lab, "c1", "web");
    assert_eq!(again.ips, web.ips);
    assert_eq!(again.mac, web.mac);
    assert!(!again.fresh, "a restart reallocated");
    assert!(matches!(
        refused(lab.ask(Request::Check(attachment("c2", "api")))),
        (ErrorCode::InvalidArgs, _, true)
    ));
    // The deleted pod's NetworkEndpoint is gone from the API (no garbage collector runs: the
    // restarted control deleted it), the live pod's is there.
    let pods = || -> Vec<String> {
        api_leases(&cluster)
            .iter()
            .map(|e| e["spec"]["pod"].as_str().unwrap().to_owned())
            .collect()
    };
    e2e_support::wait_for("the deleted pod's endpoint gone", e2e_support::WAIT, || {
        (pods() == ["web"]).then_some(())
    });
}

// ---- kubelet's CNI_ARGS in a cluster: the pod's UID -----------------------------------------

const LACE_SYSTEM: &str = "apiVersion: v1\nkind: Namespace\nmetadata: {name: lace-system}\n";

/// The pod's `metadata.uid` as the API server assigned it.
fn pod_uid(cluster: &kube_cluster::Cluster, pod: &str) -> String {
    let p = cluster
        .get_in("v1", "Pod", "shop", pod)
        .unwrap_or_else(|| panic!("no Pod shop/{pod}"));
    p["metadata"]["uid"].as_str().unwrap().to_owned()
}

/// `attachment(container, pod)` with `K8S_POD_UID` set, as kubelet calls.
fn attachment_of_uid(container: &str, pod: &str, uid: &str) -> Attachment {
    Attachment {
        pod_uid: uid.into(),
        ..attachment(container, pod)
    }
}

/// The NetworkEndpoints of namespace `shop` in the API server: one per lease of its pods.
fn api_leases(cluster: &kube_cluster::Cluster) -> Vec<serde_json::Value> {
    cluster.list_in("lace-cni.io/v1alpha1", "NetworkEndpoint", "shop")
}

/// The core as Kubernetes mode runs it: Services' backends from their EndpointSlices only.
fn kube_core() -> Core {
    Core::new("node-a").with_service_endpoints(ServiceEndpoints::Slices)
}

/// A loop whose allocations live in `cluster` (Kubernetes mode's store), fed by its watch.
fn kube_lab(cluster: &kube_cluster::Cluster, pod_wait: Duration) -> Lab {
    kube_lab_with(cluster, pod_wait, None)
}

/// [`kube_lab`] with the node's copy of its allocations in `local`.
fn kube_lab_with(
    cluster: &kube_cluster::Cluster,
    pod_wait: Duration,
    local: Option<std::path::PathBuf>,
) -> Lab {
    let kube = lace_control::source::kubernetes::KubernetesConfig {
        kubeconfig: Some(cluster.kubeconfig.clone()),
        node: "node-a".into(),
    };
    let store = lace_control::daemon::cluster_state::ClusterState::open_with(
        &kube,
        "lace-system",
        IpamConfig::default(),
        local.map(lace_control::daemon::local::LocalFile::new),
    )
    .unwrap();
    let mut lab = Lab::paused_with_sink(pod_wait, store, kube_core(), |r| r);
    lab.resume();
    kube_source(&lab, cluster);
    lab
}

/// Waits until the loop reports pod `name` with UID-bound state, i.e. the watch delivered it.
fn wait_observed(lab: &Lab, name: &str) {
    e2e_support::wait_for(&format!("pod {name} observed"), e2e_support::WAIT, || {
        let s = lab.status.0.lock().unwrap().last().cloned()?;
        s.pods.iter().any(|p| p.name == name).then_some(())
    });
}

/// kubelet creates a Pod and calls ADD at once, before control's watch has delivered it (the
/// watch is made to lag: the API server restarted a moment ago, so the watcher is backing off):
/// the first ADD waits for the pod, binds it from the cached object, and its lease records
/// the pod's UID — in the API server's allocation state too.
#[test]
fn an_add_for_a_pod_created_a_moment_ago_waits_for_the_watch() {
    let mut cluster = kube_cluster::Cluster::start();
    cluster.create(&format!("{LACE_SYSTEM}---{NAMESPACE}---{BASE}"));
    let lab = kube_lab(&cluster, Duration::from_millis(4000));
    e2e_support::wait_for("the first snapshot", e2e_support::WAIT, || {
        (!lab.status.0.lock().unwrap().is_empty()).then_some(())
    });
    cluster.server.stop();
    std::thread::sleep(Duration::from_millis(300));
    cluster.server.start().unwrap();
    cluster.create(&pod("fresh", "backend"));
    let uid = pod_uid(&cluster, "fresh");
    let a = allocated(lab.ask(Request::Allocate(attachment_of_uid("c1", "fresh", &uid))));
    assert_eq!(a.network, "backend");
    assert!(a.fresh);
    assert!(a.ips[0].address.starts_with("10.40."), "{a:?}");
    let checked = allocated(lab.ask(Request::Check(attachment_of_uid("c1", "fresh", &uid))));
    assert!(checked.same_interface(&a));
    let leases = api_leases(&cluster);
    assert_eq!(leases.len(), 1, "{leases:?}");
    let spec = &leases[0]["spec"];
    assert_eq!(
        (&spec["containerId"], &spec["pod"], &spec["podUid"]),
        (&"c1".into(), &"fresh".into(), &uid.clone().into())
    );
    // Owned by the Pod: it goes with the pod where a garbage collector runs.
    let owner = &leases[0]["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["uid"]),
        (&"Pod".into(), &uid.clone().into())
    );
    // kubelet's DEL: released, in the API too.
    assert!(matches!(
        lab.ask(Request::Release(attachment_of_uid("c1", "fresh", &uid))),
        Reply::Done(Answer {
            response: Response::Ok,
            ..
        })
    ));
    assert!(api_leases(&cluster).is_empty());
}

/// An ADD whose K8S_POD_UID is not the cached Pod's (kubelet's ADD for a pod that was deleted
/// and recreated under the same name) is refused with a message naming both UIDs, after
/// waiting for the watch; nothing is allocated. The same call with the Pod's UID succeeds.
#[test]
fn an_add_with_another_pods_uid_is_refused_and_allocates_nothing() {
    let cluster = kube_cluster::Cluster::start();
    cluster.create(&format!(
        "{LACE_SYSTEM}---{NAMESPACE}---{BASE}{}",
        pod("web", "backend")
    ));
    let lab = kube_lab(&cluster, Duration::from_millis(500));
    wait_observed(&lab, "web");
    let uid = pod_uid(&cluster, "web");
    let stale = "5e1d0c3b-0000-4000-8000-00000000dead";
    let (code, msg, _) = refused(lab.ask(Request::Allocate(attachment_of_uid("c1", "web", stale))));
    assert_eq!(code, ErrorCode::InvalidArgs, "{msg}");
    assert!(
        msg.contains(stale) && msg.contains(&uid) && msg.contains("K8S_POD_UID"),
        "{msg}"
    );
    assert!(msg.contains("nothing was allocated"), "{msg}");
    // Nothing allocated: no lease for the attachment, in the loop or in the API server.
    let (code, _, _) = refused(lab.ask(Request::Check(attachment_of_uid("c1", "web", stale))));
    assert_eq!(code, ErrorCode::InvalidArgs);
    assert!(api_leases(&cluster).is_empty());
    let s = lab.status.0.lock().unwrap().last().cloned().unwrap();
    assert!(s.network_endpoints.is_empty(), "{:?}", s.network_endpoints);
    let a = allocated(lab.ask(Request::Allocate(attachment_of_uid("c1", "web", &uid))));
    assert!(a.fresh);
    assert_eq!(api_leases(&cluster)[0]["spec"]["podUid"], uid.as_str());
}

/// A pod deleted and recreated under the same name — here by a runtime that reuses the
/// attachment's container id, so both pods' calls name the same attachment — is another pod:
/// the old pod's lease goes, the new one gets its own, and kubelet's late DEL (and CHECK) for
/// the old UID leave the new pod's endpoint allocated and published.
#[test]
fn a_del_for_the_old_uid_after_a_recreate_leaves_the_new_pods_endpoint() {
    let cluster = kube_cluster::Cluster::start();
    cluster.create(&format!(
        "{LACE_SYSTEM}---{NAMESPACE}---{BASE}{}",
        pod("web", "backend")
    ));
    let lab = kube_lab(&cluster, Duration::from_millis(4000));
    wait_observed(&lab, "web");
    let old = pod_uid(&cluster, "web");
    allocated(lab.ask(Request::Allocate(attachment_of_uid("c1", "web", &old))));
    ticket(lab.ask(Request::Attach(attachment_of_uid("c1", "web", &old))));

    cluster.delete(&pod("web", "backend"));
    cluster.create(&pod("web", "backend"));
    let new = pod_uid(&cluster, "web");
    assert_ne!(old, new);
    // The ADD for the new pod waits until the watch delivers it, then gets a lease of its own.
    let a = allocated(lab.ask(Request::Allocate(attachment_of_uid("c1", "web", &new))));
    assert!(a.fresh, "the old pod's lease was taken over");
    let t = ticket(lab.ask(Request::Attach(attachment_of_uid("c1", "web", &new))));
    assert_eq!(lab.published_endpoint(&t), Some(t.endpoint));

    // kubelet finishes the old pod: CHECK and DEL with its UID.
    let (code, msg, _) = refused(lab.ask(Request::Check(attachment_of_uid("c1", "web", &old))));
    assert_eq!(code, ErrorCode::InvalidArgs);
    assert!(msg.contains(&old) && msg.contains(&new), "{msg}");
    assert!(matches!(
        lab.ask(Request::Release(attachment_of_uid("c1", "web", &old))),
        Reply::Done(Answer {
            response: Response::Ok,
            ..
        })
    ));
    // The new pod's endpoint is intact: allocated, recorded in the API, still published.
    let checked = allocated(lab.ask(Request::Check(attachment_of_uid("c1", "web", &new))));
    assert_eq!(checked, Allocation { fresh: false, ..a });
    let leases = api_leases(&cluster);
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(leases[0]["spec"]["podUid"], new.as_str());
    // A batch later (the DEL's marks are saved with it), the port is still the new endpoint's.
    lab.ask(Request::Status);
    assert_eq!(lab.published_endpoint(&t), Some(t.endpoint));
    let s = lab.status.0.lock().unwrap().last().cloned().unwrap();
    assert_eq!(s.network_endpoints.len(), 1);
    assert!(s.network_endpoints[0].attached);
}

/// `lace-control run --source kubernetes` without --manifests (and without --kubeconfig: the
/// configuration is inferred, here from $KUBECONFIG as a pod would from its service account):
/// it serves CNI requests for the API's pods and keeps its own files in --state-dir, which it
/// creates.
#[test]
fn kubernetes_mode_runs_without_a_manifests_directory() {
    let cluster = kube_cluster::Cluster::start();
    cluster.create(&format!(
        "{LACE_SYSTEM}---{NAMESPACE}---{BASE}{}",
        pod("web", "backend")
    ));
    // Tables, socket and state directory in one tmpfs directory, removed on drop.
    let dir = tempfile::Builder::new()
        .prefix("lace-k8s-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let state_dir = dir.path().join("state");
    let socket = dir.path().join("control.sock");
    let argv: Vec<String> = [
        "/usr/bin/env",
        &format!("KUBECONFIG={}", cluster.kubeconfig.display()),
        env!("CARGO_BIN_EXE_lace-control"),
        "run",
        "--node",
        "node-a",
        "--source",
        "kubernetes",
        "--state-dir",
        state_dir.to_str().unwrap(),
        "--socket",
        socket.to_str().unwrap(),
        "--tables-dir",
        dir.path().to_str().unwrap(),
        "--pod-wait-ms",
        "3000",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    let mut control = e2e_support::Proc::spawn("lace-control", &argv, dir.path().join("log"));
    let request = |r: &Request| -> Response {
        let v = e2e_support::control_request(&socket, &serde_json::to_value(r).unwrap());
        serde_json::from_value(v).unwrap()
    };
    e2e_support::wait_for("lace-control ready (STATUS)", e2e_support::WAIT, || {
        assert!(control.try_wait().is_none(), "{}", control.log_tail(20));
        let v = e2e_support::try_control_request(
            &socket,
            &serde_json::to_value(Request::Status).unwrap(),
        )
        .ok()?;
        (serde_json::from_value::<Response>(v).ok()? == Response::Ok).then_some(())
    });
    let uid = pod_uid(&cluster, "web");
    let add = attachment_of_uid("c1", "web", &uid);
    let Response::Allocated(a) = request(&Request::Allocate(add.clone())) else {
        panic!("ADD refused: {}", control.log_tail(20))
    };
    assert_eq!(a.network, "backend");
    assert_eq!(api_leases(&cluster)[0]["spec"]["podUid"], uid.as_str());
    // Its own files are in the state directory: the status file shows the endpoint.
    let status = e2e_support::wait_for("the status file", e2e_support::WAIT, || {
        let text = std::fs::read_to_string(state_dir.join("status-node-a.yaml")).ok()?;
        text.contains("c1").then_some(text)
    });
    assert!(status.contains("backend"), "{status}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lace-control"))
        .args(["status", "--node", "node-a", "--state-dir"])
        .arg(&state_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("backend"));
    assert_eq!(request(&Request::Release(add)), Response::Ok);
    assert!(api_leases(&cluster).is_empty());
    let exit = control.stop(nix::sys::signal::Signal::SIGTERM, e2e_support::WAIT);
    assert!(exit.success(), "{exit:?}: {}", control.log_tail(20));
    assert!(!socket.exists(), "the socket is removed on stop");
}

// ---- l2 learning in Kubernetes mode (ADR 0032) --------------------------------------------

/// Kubernetes mode learns: a VM's announcement on a pod port (the report the learn intake
/// thread reads from the forwarder) becomes an FDBEntry and a learned Neighbor in the API server
/// and a learned FDB entry in the tables; another node's control moving the MAC (its own
/// `ObjectStore`) reaches this loop through the store's watch, and the tables follow.
#[test]
fn kubernetes_mode_learns_into_the_api_and_follows_another_controls_move() {
    use lace_control::learn::intake::Wake;
    use lace_control::learn::kube::ObjectStore;
    use lace_control::learn::store::LearnStore;
    use lace_control::learn::{LearnedTable, Location, Outcome};
    use lace_shared::learn::{LearnEvent, LearnKind};
    use lace_shared::status::LearnRead;
    use lace_shared::types::{L2Hop, MacAddr};

    let cluster = kube_cluster::Cluster::start();
    cluster.create(&format!(
        "{NAMESPACE}---\n{LACE_SYSTEM}---{BASE}{VMS}{}{}",
        pod("launcher-1", "vm"),
        pod("launcher-2", "vm")
    ));
    let kube = |node: &str| lace_control::source::kubernetes::KubernetesConfig {
        kubeconfig: Some(cluster.kubeconfig.clone()),
        node: node.into(),
    };
    let store = lace_control::daemon::cluster_state::ClusterState::open(
        &kube("node-a"),
        "lace-system",
        IpamConfig::default(),
    )
    .unwrap();
    let learning = Learning::new(
        Box::new(ObjectStore::open(&kube("node-a")).unwrap()),
        "node-a",
    );
    let mut lab = Lab::paused_learning(
        Duration::from_millis(300),
        store,
        kube_core(),
        |r| r,
        Some(learning),
    );
    lab.resume();
    kube_source(&lab, &cluster);
    allocate_eventually(&lab, "c1", "launcher-1");
    let t1 = ticket(lab.ask(Request::Attach(attachment("c1", "launcher-1"))));
    allocate_eventually(&lab, "c2", "launcher-2");
    let t2 = ticket(lab.ask(Request::Attach(attachment("c2", "launcher-2"))));
    let vm = MacAddr([0x52, 0x54, 0, 0xaa, 0, 1]);
    lab.send(Event::Learn(Wake::Reports(
        vec![LearnEvent {
            port: t1.port,
            endpoint: t1.endpoint,
            network: NetworkId(1),
            kind: LearnKind::GratuitousArp,
            mac: vm,
            ip: Some("10.60.0.77".parse().unwrap()),
            at_ns: 1,
        }],
        LearnRead { read: 1, lost: 0 },
    )));
    let entry = e2e_support::wait_for("the FDBEntry of the VM", e2e_support::WAIT, || {
        cluster.get_in(
            "lace-cni.io/v1alpha1",
            "FDBEntry",
            "",
            "vms.52-54-00-aa-00-01",
        )
    });
    let spec = &entry["spec"];
    assert_eq!(
        (
            &spec["node"],
            &spec["endpointId"],
            &spec["sequence"],
            &spec["learned"],
            &spec["addresses"]
        ),
        (
            &"node-a".into(),
            &t1.endpoint.into(),
            &1.into(),
            &true.into(),
            &serde_json::json!(["10.60.0.77"])
        ),
        "{spec}"
    );
    let neighbor = cluster
        .get_in("lace-cni.io/v1alpha1", "Neighbor", "", "vms.10-60-0-77")
        .expect("a learned Neighbor for the VM's address");
    assert_eq!(
        (&neighbor["spec"]["mac"], &neighbor["spec"]["learned"]),
        (&"52:54:00:aa:00:01".into(), &true.into())
    );
    let fdb = |lab: &Lab| {
        let id = lab.network_id("vms")?;
        let r = TableReader::attach(&lab.tables).unwrap();
        let mut h = r.register().unwrap();
        let snap = h.snapshot();
        let n = snap.network(NetworkId(id))?;
        Some((n.fdb(vm)?, n.fdb_rec(vm)?.seq))
    };
    e2e_support::wait_for(
        "the tables carry the learned MAC",
        e2e_support::WAIT,
        || (fdb(&lab) == Some((L2Hop::Port(t1.port), 1))).then_some(()),
    );
    // Another node's control moves the MAC to launcher-2's port (sequence 2): this loop's
    // store hears it from its watch and compiles it.
    let mut other = ObjectStore::open(&kube("node-b")).unwrap();
    other
        .mutate(&mut |t: &mut LearnedTable| {
            let mut r = t.records()[&("vms".to_owned(), vm)].clone();
            r.active = Location {
                node: "node-a".into(),
                endpoint: t2.endpoint,
            };
            r.sequence += 1;
            t.insert(r);
            Outcome {
                changed: true,
                ..Outcome::default()
            }
        })
        .unwrap();
    e2e_support::wait_for("the tables follow the move", e2e_support::WAIT, || {
        (fdb(&lab) == Some((L2Hop::Port(t2.port), 2))).then_some(())
    });
    let s = lab.status.0.lock().unwrap().last().cloned().unwrap();
    let learned: Vec<_> = s
        .learned
        .iter()
        .map(|l| (l.mac.as_str(), l.endpoint, l.sequence))
        .collect();
    assert_eq!(learned, [("52:54:00:aa:00:01", t2.endpoint, 2)]);
    assert_eq!(s.learning_error, None);
}

// ---- Services ------------------------------------------------------------------------------

/// A Service record as the forwarder reads it from the loop's tables: (backend address, port,
/// ready) of every backend, and how many lookup-table slots there are.
type ServiceRecord = (Vec<(String, u16, bool)>, u32);

impl Lab {
    /// The id the loop gave Network `name` (from its status).
    fn network_id(&self, name: &str) -> Option<u32> {
        let s = self.status.0.lock().unwrap().last().cloned()?;
        s.networks.iter().find(|n| n.name == name)?.status.id
    }

    /// The record of `vip`:`port`/TCP in network `net` of the published tables, if any, and
    /// whether the network's FIB routes `vip` to the Service.
    fn service(&self, net: &str, vip: &str, port: u16) -> (bool, Option<ServiceRecord>) {
        let Some(id) = self.network_id(net) else {
            return (false, None);
        };
        let r = TableReader::attach(&self.tables).unwrap();
        let mut h = r.register().unwrap();
        let snap = h.snapshot();
        let ip: std::net::IpAddr = vip.parse().unwrap();
        let routed = snap.network(NetworkId(id)).is_some_and(|n| {
            let i = match ip {
                std::net::IpAddr::V4(a) => n.route4_index(a),
                std::net::IpAddr::V6(a) => n.route6_index(a),
            };
            snap.nexthop(i) == Some(NextHop::Service)
        });
        let record = snap
            .service(&ServiceKey::new(NetworkId(id), ip, PROTO_TCP, port))
            .map(|s| {
                let backends = s
                    .backends()
                    .map(|b| (b.addr.to_string(), b.port, b.state.ready))
                    .collect();
                (backends, s.table_len())
            });
        (routed, record)
    }

    /// Waits until `what` holds of the record of `vip`:`port` in network `net`.
    fn wait_service(
        &self,
        what: &str,
        net: &str,
        vip: &str,
        port: u16,
        done: impl Fn(bool, Option<&ServiceRecord>) -> bool,
    ) -> (bool, Option<ServiceRecord>) {
        e2e_support::wait_for(what, e2e_support::WAIT, || {
            let (routed, record) = self.service(net, vip, port);
            done(routed, record.as_ref()).then_some((routed, record))
        })
    }
}

/// A Service of the `backend` tier at 10.96.0.10:80 → 8080.
const WEB_SERVICE: &str = "---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop, labels: {tier: backend}}\nspec: {clusterIP: 10.96.0.10, selector: {tier: backend}, ports: [{port: 80, targetPort: 8080}]}\n";

/// Standalone: a Service in the manifests reaches the published tables with the pods its
/// selector picks as backends once they are attached; a DEL takes the pod out of the record
/// (the Service then rejects: an empty table behind the same route).
#[test]
fn a_standalone_service_follows_its_pods_into_the_tables() {
    let lab = Lab::start(Duration::from_millis(500));
    lab.send(snapshot(&format!(
        "{BASE}{}{WEB_SERVICE}",
        pod("web", "backend")
    )));
    let a = allocated(lab.ask(Request::Allocate(attachment("c1", "web"))));
    ticket(lab.ask(Request::Attach(attachment("c1", "web"))));
    let ip = a.ips[0].address.split('/').next().unwrap().to_owned();
    let (routed, record) = lab.wait_service("web's record", "backend", "10.96.0.10", 80, |_, r| {
        r.is_some_and(|r| !r.0.is_empty())
    });
    assert!(routed, "the ClusterIP routes to the Service");
    let (backends, slots) = record.unwrap();
    assert_eq!(backends, [(ip, 8080, true)]);
    assert_eq!(slots, 251);
    lab.ask(Request::Release(attachment("c1", "web")));
    let (routed, record) = lab.wait_service(
        "web without backends",
        "backend",
        "10.96.0.10",
        80,
        |_, r| r.is_some_and(|r| r.0.is_empty()),
    );
    assert!(routed);
    assert_eq!(record.unwrap().1, 0, "it rejects");
    let s = lab.status.0.lock().unwrap().last().cloned().unwrap();
    let web = s.services.iter().find(|e| e.name == "web").unwrap();
    assert!(
        web.conditions.iter().any(|c| c.type_ == "Programmed"
            && c.status == "True"
            && c.message.contains("80/TCP rejects connections")),
        "{:?}",
        web.conditions
    );
}

/// Kubernetes mode against the API server: a Service and its EndpointSlice created in the API
/// reach the tables (the slice's endpoints are the backends, whatever the selector says); an
/// update of the slice (an endpoint terminating) changes the record; the Service deleted takes
/// its route and record.
#[test]
fn services_and_endpoint_slices_in_the_api_server_reach_the_tables() {
    let cluster = kube_cluster::Cluster::start();
    cluster.create(&format!(
        "{LACE_SYSTEM}---{NAMESPACE}---{BASE}{}{WEB_SERVICE}",
        pod("web", "backend")
    ));
    let slice = |ready: bool| {
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: web-x1, namespace: shop, labels: {{kubernetes.io/service-name: web}}}}\naddressType: IPv4\nports: [{{port: 8080, protocol: TCP}}]\nendpoints:\n- addresses: [10.40.200.7]\n  conditions: {{ready: {ready}, serving: true, terminating: {}}}\n- addresses: [10.40.200.8]\n",
            !ready
        )
    };
    cluster.create(&slice(true));
    let lab = kube_lab(&cluster, Duration::from_millis(300));
    // The network is programmed on this node once a pod of it is here.
    allocate_eventually(&lab, "c1", "web");
    ticket(lab.ask(Request::Attach(attachment("c1", "web"))));
    let (routed, record) = lab.wait_service("web's record", "backend", "10.96.0.10", 80, |_, r| {
        r.is_some_and(|r| r.0.len() == 2)
    });
    assert!(routed);
    assert_eq!(
        record.unwrap(),
        (
            vec![
                ("10.40.200.7".to_owned(), 8080, true),
                ("10.40.200.8".to_owned(), 8080, true)
            ],
            251
        )
    );
    cluster.replace(&slice(false));
    lab.wait_service(
        "the terminating endpoint",
        "backend",
        "10.96.0.10",
        80,
        |_, r| r.is_some_and(|r| r.0.first().is_some_and(|b| !b.2)),
    );
    cluster.delete(WEB_SERVICE);
    lab.wait_service("web gone", "backend", "10.96.0.10", 80, |routed, r| {
        !routed && r.is_none()
    });
}

// ---- status and Events: one writer, the Lease's holder -----------------------------------------

/// The Events of `namespace` about the `kind` `name`, as `kubectl describe` lists them (field
/// selectors on `involvedObject`): (type, reason, message).
fn events_about(
    cluster: &kube_cluster::Cluster,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Vec<(String, String, String)> {
    cluster
        .list_in("v1", "Event", namespace)
        .iter()
        .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name)
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default().to_owned(),
                e["reason"].as_str().unwrap_or_default().to_owned(),
                e["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The Events of `default` about NetworkBindingPolicy `name`.
fn policy_events(cluster: &kube_cluster::Cluster, name: &str) -> Vec<(String, String, String)> {
    events_about(cluster, "default", "NetworkBindingPolicy", name)
}

/// How many of `events` have a message starting with `prefix`.
fn count_starting(events: &[(String, String, String)], prefix: &str) -> usize {
    events
        .iter()
        .filter(|(_, _, m)| m.starts_with(prefix))
        .count()
}

/// A control of `node` with `core`, writing status and Events to `cluster` (when it holds the
/// Lease), fed by its watch.
fn status_writer(cluster: &kube_cluster::Cluster, node: &str, core: Core) -> Lab {
    let kube = lace_control::source::kubernetes::KubernetesConfig {
        kubeconfig: Some(cluster.kubeconfig.clone()),
        node: node.into(),
    };
    let store = lace_control::daemon::cluster_state::ClusterState::open(
        &kube,
        "lace-system",
        IpamConfig::default(),
    )
    .unwrap();
    let mut lab = Lab::paused_with_sink(Duration::from_millis(300), store, core, |r| {
        lace_control::daemon::api_status::ApiStatusSink::new(&kube, "lace-system", r).unwrap()
    });
    lab.resume();
    kube_source(&lab, cluster);
    lab
}

/// Two controls (node-a, node-b) with `core` of each node (see [`status_writer`]).
fn status_writers(cluster: &kube_cluster::Cluster, core: impl Fn(&str) -> Core) -> Vec<Lab> {
    ["node-a", "node-b"]
        .iter()
        .map(|node| status_writer(cluster, node, core(node)))
        .collect()
}

/// The core of a Kubernetes-mode control of `node` with the service CIDR 10.96.0.0/12.
fn service_cidr_core(node: &str) -> Core {
    let cidr = ServiceCidr {
        v4: Some("10.96.0.0/12".parse().unwrap()),
        v6: None,
    };
    Core::new(node)
        .with_service_endpoints(ServiceEndpoints::Slices)
        .with_service_cidr(Some(cidr))
}

/// WEB_SERVICE as `outside`, its ClusterIP outside 10.96.0.0/12.
fn outside_service() -> String {
    WEB_SERVICE
        .replace("name: web,", "name: outside,")
        .replace("10.96.0.10", "10.200.0.10")
}

/// Two controls (two nodes) derive the same conditions; only the holder of Lease
/// lace-system/lace-control applies them and records each transition as one Event — a broken
/// CEL rule (Warning), then its fix (Normal) — with the policy's uid, as `kubectl describe`
/// finds them.
#[test]
fn condition_transitions_are_events_written_once_by_the_lease_holder() {
    let cluster = kube_cluster::Cluster::start();
    cluster.create(&format!(
        "{LACE_SYSTEM}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: default}}\n---{NAMESPACE}---{BASE}"
    ));
    let labs = status_writers(&cluster, |node| {
        Core::new(node).with_service_endpoints(ServiceEndpoints::Slices)
    });
    let broken = "apiVersion: lace-cni.io/v1alpha1\nkind: NetworkBindingPolicy\nmetadata: {name: cel}\nspec:\n  rules:\n  - celExpression: \"object.metadata.name +\"\n";
    cluster.create(broken);
    let warning = e2e_support::wait_for("the Warning Event", e2e_support::WAIT, || {
        policy_events(&cluster, "cel")
            .into_iter()
            .find(|(t, _, m)| t == "Warning" && m.starts_with("CELValid=False"))
    });
    assert!(
        warning.2.contains("spec.rules[0].celExpression"),
        "{warning:?}"
    );
    // The fix: one Normal Event for the transition back.
    cluster.replace_spec(
        "lace-cni.io/v1alpha1",
        "NetworkBindingPolicy",
        "cel",
        serde_json::json!({"rules": [{"celExpression": "optional.of('backend')"}]}),
    );
    e2e_support::wait_for("the Normal Event", e2e_support::WAIT, || {
        policy_events(&cluster, "cel")
            .into_iter()
            .find(|(t, _, m)| t == "Normal" && m.starts_with("CELValid=True"))
    });
    // Both controls saw both transitions; each was recorded once, by the holder.
    std::thread::sleep(2 * lace_control::daemon::api_status::RENEW);
    let events = policy_events(&cluster, "cel");
    for prefix in ["CELValid=False", "CELValid=True"] {
        assert_eq!(count_starting(&events, prefix), 1, "{prefix}: {events:#?}");
    }
    let policy = cluster.get("lace-cni.io/v1alpha1", "NetworkBindingPolicy", "cel");
    let e = cluster
        .list_in("v1", "Event", "default")
        .into_iter()
        .find(|e| e["involvedObject"]["name"] == "cel")
        .unwrap();
    assert_eq!(e["involvedObject"]["uid"], policy["metadata"]["uid"]);
    assert_eq!(e["source"]["component"], "lace-control");
    let lease = cluster.get_in(
        "coordination.k8s.io/v1",
        "Lease",
        "lace-system",
        "lace-control",
    );
    let holder = lease.unwrap()["spec"]["holderIdentity"].clone();
    assert!(holder == "node-a" || holder == "node-b", "{holder}");
    assert_eq!(
        policy["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["manager"] == "lace-control" && m["subresource"] == "status")
            .count(),
        1
    );
    drop(labs);
}

/// Services and NetworkPolicies get Events of their conditions' transitions too, in their
/// namespace, with their uid, once each (two controls, the Lease's holder writes), and their
/// status is never touched: with a service CIDR, a Service whose ClusterIP lies outside it gets
/// one Warning (`Programmed=False`, `ClusterIPOutsideServiceCIDR`, naming address and range);
/// an invalid NetworkPolicy one Warning (`Valid=False`), its fix one Normal.
#[test]
fn services_and_network_policies_get_their_transitions_as_events() {
    let cluster = kube_cluster::Cluster::start();
    cluster.create(&format!("{LACE_SYSTEM}---{NAMESPACE}---{BASE}"));
    let labs = status_writers(&cluster, service_cidr_core);
    cluster.create(&outside_service());
    let warning = e2e_support::wait_for("the Service's Warning", e2e_support::WAIT, || {
        events_about(&cluster, "shop", "Service", "outside")
            .into_iter()
            .find(|(t, r, _)| t == "Warning" && r == "ClusterIPOutsideServiceCIDR")
    });
    assert!(
        warning.2.starts_with(
            "Programmed=False: ClusterIP 10.200.0.10 lies outside the service CIDR 10.96.0.0/12"
        ),
        "{warning:?}"
    );
    let policy = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny, namespace: shop}\nspec: {podSelector: {}, policyTypes: [Sideways]}\n";
    cluster.create(policy);
    let warning = e2e_support::wait_for("the NetworkPolicy's Warning", e2e_support::WAIT, || {
        events_about(&cluster, "shop", "NetworkPolicy", "deny")
            .into_iter()
            .find(|(t, r, _)| t == "Warning" && r == "Invalid")
    });
    assert!(
        warning.2.starts_with("Valid=False:")
            && warning.2.contains("spec.policyTypes[0]")
            && warning
                .2
                .contains("not enforced until the errors are fixed"),
        "{warning:?}"
    );
    cluster.replace(&policy.replace("Sideways", "Ingress"));
    e2e_support::wait_for("the NetworkPolicy's Normal", e2e_support::WAIT, || {
        events_about(&cluster, "shop", "NetworkPolicy", "deny")
            .into_iter()
            .find(|(t, _, m)| t == "Normal" && m.starts_with("Valid=True"))
    });
    // Both controls saw every transition; each was recorded once, by the holder.
    std::thread::sleep(2 * lace_control::daemon::api_status::RENEW);
    let service_events = events_about(&cluster, "shop", "Service", "outside");
    for prefix in ["Valid=True", "Programmed=False"] {
        assert_eq!(
            count_starting(&service_events, prefix),
            1,
            "{prefix}: {service_events:#?}"
        );
    }
    let policy_events = events_about(&cluster, "shop", "NetworkPolicy", "deny");
    for prefix in ["Valid=False", "Valid=True"] {
        assert_eq!(
            count_starting(&policy_events, prefix),
            1,
            "{prefix}: {policy_events:#?}"
        );
    }
    for (api_version, kind, name) in [
        ("v1", "Service", "outside"),
        ("networking.k8s.io/v1", "NetworkPolicy", "deny"),
    ] {
        let object = cluster.get_in(api_version, kind, "shop", name).unwrap();
        for e in cluster
            .list_in("v1", "Event", "shop")
            .iter()
            .filter(|e| e["involvedObject"]["name"] == name)
        {
            assert_eq!(e["involvedObject"]["uid"], object["metadata"]["uid"]);
            assert_eq!(e["involvedObject"]["apiVersion"], api_version);
            assert_eq!(e["involvedObject"]["namespace"], "shop");
            assert_eq!(e["source"]["component"], "lace-control");
        }
        let managers: Vec<&serde_json::Value> = object["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["manager"] == "lace-control")
            .collect();
        assert!(managers.is_empty(), "{kind} {name}: {managers:#?}");
    }
    drop(labs);
}

/// A control taking the Lease over from one that is gone records none of the transitions the
/// old holder recorded on a Service (what a Service shows is the Events already on it), and
/// records the new ones.
#[test]
fn a_new_lease_holder_repeats_no_event_on_a_service() {
    let cluster = kube_cluster::Cluster::start();
    cluster.create(&format!("{LACE_SYSTEM}---{NAMESPACE}---{BASE}"));
    cluster.create(&outside_service());
    let first = status_writer(&cluster, "node-a", service_cidr_core("node-a"));
    e2e_support::wait_for("node-a's Warning", e2e_support::WAIT, || {
        events_about(&cluster, "shop", "Service", "outside")
            .into_iter()
            .find(|(t, _, m)| t == "Warning" && m.starts_with("Programmed=False"))
    });
    drop(first);
    let second = status_writer(&cluster, "node-b", service_cidr_core("node-b"));
    e2e_support::wait_for("node-b holding the Lease", e2e_support::WAIT, || {
        let lease = cluster.get_in(
            "coordination.k8s.io/v1",
            "Lease",
            "lace-system",
            "lace-control",
        )?;
        (lease["spec"]["holderIdentity"] == "node-b").then_some(())
    });
    // A new transition, recorded by the new holder.
    cluster.create(&WEB_SERVICE.replace("name: web,", "name: inside,"));
    e2e_support::wait_for("node-b's Event", e2e_support::WAIT, || {
        cluster
            .list_in("v1", "Event", "shop")
            .into_iter()
            .find(|e| e["involvedObject"]["name"] == "inside" && e["reportingInstance"] == "node-b")
    });
    std::thread::sleep(2 * lace_control::daemon::api_status::RENEW);
    let events = events_about(&cluster, "shop", "Service", "outside");
    for prefix in ["Valid=True", "Programmed=False"] {
        assert_eq!(count_starting(&events, prefix), 1, "{prefix}: {events:#?}");
    }
    drop(second);
}

/// Kubernetes mode with the API server away (issue 24, item 3): DEL is still answered and the
/// pod's port leaves the tables; CHECK and a repeated ADD of a pod control has still answer
/// from its state; an ADD that needs a new allocation is "try again later" naming the API
/// server. When it answers again the release reaches it (the NetworkEndpoint is deleted) and
/// the ADD succeeds.
#[test]
fn with_the_api_server_away_del_and_check_are_served_and_the_release_reaches_it_later() {
    let mut cluster = web_api_late();
    let lab = kube_lab(&cluster, Duration::from_millis(500));
    for p in ["web", "api", "late"] {
        wait_observed(&lab, p);
    }
    let uid = |p: &str| pod_uid(&cluster, p);
    let (web, api, late) = (uid("web"), uid("api"), uid("late"));
    allocated(lab.ask(Request::Allocate(attachment_of_uid("c1", "web", &web))));
    let t = ticket(lab.ask(Request::Attach(attachment_of_uid("c1", "web", &web))));
    let a = allocated(lab.ask(Request::Allocate(attachment_of_uid("c2", "api", &api))));
    assert_eq!(lab.published_endpoint(&t), Some(t.endpoint));
    assert_eq!(api_leases(&cluster).len(), 2);

    cluster.server.stop();
    assert!(matches!(
        lab.ask(Request::Release(attachment_of_uid("c1", "web", &web))),
        Reply::Done(Answer {
            response: Response::Ok,
            ..
        })
    ));
    assert_eq!(lab.published_endpoint(&t), None, "the port left the tables");
    let checked = allocated(lab.ask(Request::Check(attachment_of_uid("c2", "api", &api))));
    assert!(checked.same_interface(&a));
    let again = allocated(lab.ask(Request::Allocate(attachment_of_uid("c2", "api", &api))));
    assert!(again.same_interface(&a) && !again.fresh);
    let (code, msg, _) =
        refused(lab.ask(Request::Allocate(attachment_of_uid("c3", "late", &late))));
    assert_eq!(code, ErrorCode::TryAgainLater, "{msg}");
    assert!(msg.contains("API server is unreachable"), "{msg}");

    cluster.server.start().unwrap();
    e2e_support::wait_for("web's NetworkEndpoint deleted", e2e_support::WAIT, || {
        let leases = api_leases(&cluster);
        (leases.len() == 1 && leases[0]["spec"]["pod"] == "api").then_some(())
    });
    assert!(allocate_eventually(&lab, "c3", "late").fresh);
    assert_eq!(api_leases(&cluster).len(), 2);
}

/// An API server with pods web, api and late of network backend on node-a.
fn web_api_late() -> kube_cluster::Cluster {
    let cluster = kube_cluster::Cluster::start();
    cluster.create(&format!(
        "{LACE_SYSTEM}---{NAMESPACE}---{BASE}{}{}{}",
        pod("web", "backend"),
        pod("api", "backend"),
        pod("late", "backend")
    ));
    cluster
}

/// Kubernetes mode, control (re)started while the API server is away (issue 24, item 3): it
/// starts from the node's copy of its allocations, before any snapshot of the objects: DEL is
/// answered and owed, CHECK answered from the copy, ADD and Status are "try again later"
/// (ADD naming the API server). When it answers again, the release reaches it and ADD works.
#[test]
fn a_control_started_while_the_api_server_is_away_serves_del_and_check_from_its_copy() {
    let mut cluster = web_api_late();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster-node-a.json");
    let uid = |p: &str| pod_uid(&cluster, p);
    let (web, api, late) = (uid("web"), uid("api"), uid("late"));
    let a = {
        let lab = kube_lab_with(&cluster, Duration::from_millis(500), Some(file.clone()));
        for p in ["web", "api"] {
            wait_observed(&lab, p);
        }
        allocated(lab.ask(Request::Allocate(attachment_of_uid("c1", "web", &web))));
        ticket(lab.ask(Request::Attach(attachment_of_uid("c1", "web", &web))));
        let a = allocated(lab.ask(Request::Allocate(attachment_of_uid("c2", "api", &api))));
        ticket(lab.ask(Request::Attach(attachment_of_uid("c2", "api", &api))));
        a
    };
    assert_eq!(api_leases(&cluster).len(), 2);

    cluster.server.stop();
    let lab = kube_lab_with(&cluster, Duration::from_millis(500), Some(file.clone()));
    assert!(matches!(
        lab.ask(Request::Release(attachment_of_uid("c1", "web", &web))),
        Reply::Done(Answer {
            response: Response::Ok,
            ..
        })
    ));
    let checked = allocated(lab.ask(Request::Check(attachment_of_uid("c2", "api", &api))));
    assert!(checked.same_interface(&a), "{checked:?} vs {a:?}");
    let (code, msg, _) =
        refused(lab.ask(Request::Allocate(attachment_of_uid("c3", "late", &late))));
    assert_eq!(code, ErrorCode::TryAgainLater, "{msg}");
    assert!(msg.contains("API server is unreachable"), "{msg}");
    let (code, _, _) = refused(lab.ask(Request::Status));
    assert_eq!(code, ErrorCode::TryAgainLater);

    cluster.server.start().unwrap();
    e2e_support::wait_for("web's NetworkEndpoint deleted", e2e_support::WAIT, || {
        let leases = api_leases(&cluster);
        (leases.len() == 1 && leases[0]["spec"]["pod"] == "api").then_some(())
    });
    let fresh = allocate_eventually(&lab, "c3", "late");
    assert!(fresh.fresh);
    let checked = allocated(lab.ask(Request::Check(attachment_of_uid("c2", "api", &api))));
    assert!(checked.same_interface(&a));
    assert_eq!(api_leases(&cluster).len(), 2);
}
