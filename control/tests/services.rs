//! Services in the daemon's pure core: manifests in (Networks, binding policies, Pods,
//! Services, EndpointSlices), the world's Services and every Service's conditions out — the
//! backends from slices or from the selector (standalone), named target ports, KEP-1669
//! conditions, the last good spec, ClusterIP conflicts, what is not programmed and why, and
//! the status file that shows it.

use std::collections::BTreeSet;
use std::net::IpAddr;

use lace_control::api::Condition;
use lace_control::compile::Change;
use lace_control::daemon::allocate::{allocate, IpamRequest};
use lace_control::daemon::core::{BuildInputs, Core, ServiceEndpoints, PROGRAMMED, VALID};
use lace_control::daemon::report::{report, TablesReport};
use lace_control::daemon::status::{render, StatusFile};
use lace_control::ipam::{AllocateRequest, Ipam, IpamConfig, PodRef};
use lace_control::service::{Protocol, ServiceCidr};
use lace_control::source::standalone::objects_from_yaml;
use lace_control::source::{NamespacedName, Snapshot, SourceEvent};
use lace_control::world::{AttachmentKey, ServiceModel};
use lace_shared::policy::{Backend, BackendState};

const BASE: &str = r#"
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata: {name: backend}
spec:
  type: l3
  ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}
  ipv6Subnet: {prefix: "fd40::/48", hostLocalPrefixLength: 64}
---
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata: {name: flat}
spec:
  type: l2
  ipv4Subnet: {prefix: 10.50.0.0/24}
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata: {name: shop}
spec:
  rules:
  - network: flat
    selector: {matchLabels: {net: flat}}
  - network: backend
    selector: {namespaceSelector: {matchLabels: {team: shop}}}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: shop}}
---
apiVersion: v1
kind: Namespace
metadata: {name: elsewhere}
---
apiVersion: v1
kind: Node
metadata:
  name: node-a
  annotations: {lace-cni.io/underlay: "fd00:100::a"}
---
apiVersion: v1
kind: Node
metadata:
  name: node-b
  annotations: {lace-cni.io/underlay: "fd00:100::b"}
"#;

/// Pod `name` of app `web` on `node`, serving TCP 8080 as `http` (or without ports).
fn pod(name: &str, node: &str, http: bool) -> String {
    let ports = if http {
        ", ports: [{name: http, containerPort: 8080}, {name: dns, containerPort: 5353, protocol: UDP}]"
    } else {
        ""
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop, labels: {{app: web}}}}\n\
         spec: {{nodeName: {node}, containers: [{{name: app, image: x{ports}}}]}}\n"
    )
}

const WEB: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10, "fd96::10"]
  selector: {app: web}
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}
  ports:
  - {name: http, port: 80, targetPort: http}
  - {name: dns, port: 53, protocol: UDP, targetPort: dns}
  - {name: raw, port: 9000}
"#;

struct Lab {
    core: Core,
    ipam: Ipam,
    attached: BTreeSet<AttachmentKey>,
}

fn key(c: &str) -> AttachmentKey {
    AttachmentKey {
        container_id: c.into(),
        ifname: "eth0".into(),
    }
}

fn svc(name: &str) -> NamespacedName {
    NamespacedName::new("shop", name)
}

impl Lab {
    fn new(core: Core) -> Lab {
        Lab {
            core,
            ipam: Ipam::new(IpamConfig::default()).unwrap(),
            attached: BTreeSet::new(),
        }
    }

    /// One batch of the loop over `docs`, with ADDs of `pods` as (container, pod, node);
    /// the ones on the core's node are attached.
    fn batch(&mut self, docs: &[&str], pods: &[(&str, &str, &str)]) -> Vec<Change> {
        let (objects, problems) = objects_from_yaml(&docs.join("---\n"));
        assert!(problems.is_empty(), "{problems:?}");
        self.core.observe(SourceEvent::Snapshot(Box::new(Snapshot {
            objects,
            problems,
            origins: Default::default(),
        })));
        self.core.plan();
        // Networks and nodes first (the loop's first batch), then the ADDs.
        for requests in [vec![], pods.to_vec()] {
            let requests: Vec<IpamRequest> = requests
                .iter()
                .map(|(c, p, node)| {
                    IpamRequest::Allocate(AllocateRequest {
                        key: key(c),
                        network: "backend".into(),
                        node: (*node).into(),
                        pod: PodRef {
                            namespace: "shop".into(),
                            name: (*p).into(),
                            uid: String::new(),
                        },
                        identity: None,
                    })
                })
                .collect();
            let actions = self.core.ipam_actions(&self.ipam);
            let out = allocate(&mut self.ipam, &actions, &requests);
            self.core.absorb(&out);
        }
        for (c, _, node) in pods {
            if *node == self.core.node() {
                self.attached.insert(key(c));
            }
        }
        self.core.build(BuildInputs {
            ipam: &self.ipam,
            attached: &self.attached,
            host: None,
            external_uplinks: &[],
            unresolved: &[],
        })
    }

    /// The status file the loop would publish, the tables in this state.
    fn status(&self, error: Option<&str>, unpublished: &BTreeSet<IpAddr>) -> StatusFile {
        let tables = TablesReport {
            generation: 1,
            error,
            unpublished,
            notes: &[],
        };
        report(
            &self.core,
            &self.ipam,
            &self.attached,
            tables,
            "t0",
            &StatusFile::default(),
        )
    }

    fn service(&self, name: &str) -> Option<&ServiceModel> {
        self.core.world().services.get(&svc(name))
    }

    fn cond(&self, name: &str, ty: &str) -> Condition {
        self.core
            .service_conditions("shop", name)
            .iter()
            .find(|c| c.type_ == ty)
            .cloned()
            .unwrap_or_else(|| panic!("Service shop/{name}: no {ty}"))
    }

    /// The address of pod `container`'s lease in `family`.
    fn addr(&self, container: &str, v4: bool) -> IpAddr {
        self.ipam
            .lease(&key(container))
            .unwrap()
            .addresses
            .iter()
            .map(|a| a.address)
            .find(|a| a.is_ipv4() == v4)
            .unwrap()
    }
}

fn ready(addr: IpAddr, port: u16) -> Backend {
    Backend {
        addr,
        port,
        state: BackendState {
            ready: true,
            serving: true,
            terminating: false,
        },
    }
}

/// Standalone without slices: the selector picks the pods in the Service's namespace, their
/// endpoints on any node are backends at the named target port of the right protocol; a pod
/// without the named port is left out of that port and named in `TargetPortsResolved`; a pod
/// without an endpoint yet is no backend; both ClusterIPs, the ports and the affinity are in the
/// world; one pod that starts terminating is one change of the Service.
#[test]
fn standalone_services_get_backends_from_their_selector() {
    let mut lab = Lab::new(Core::new("node-a"));
    let p1 = pod("web-1", "node-a", true);
    let p2 = pod("web-2", "node-b", true);
    let p3 = pod("web-3", "node-a", false);
    let p4 = pod("web-4", "node-b", true);
    let docs = [BASE, WEB, &p1, &p2, &p3, &p4];
    let changes = lab.batch(
        &docs,
        &[
            ("c1", "web-1", "node-a"),
            ("c2", "web-2", "node-b"),
            ("c3", "web-3", "node-a"),
        ],
    );
    assert!(
        changes.contains(&Change::Service(svc("web"))),
        "{changes:?}"
    );
    let m = lab.service("web").unwrap().clone();
    assert_eq!(m.network, "backend");
    assert_eq!(
        m.cluster_ips,
        [
            "10.96.0.10".parse::<IpAddr>().unwrap(),
            "fd96::10".parse().unwrap()
        ]
    );
    assert_eq!(m.affinity_timeout_s, Some(60));
    let ports: Vec<(&str, Protocol, u16)> = m
        .ports
        .iter()
        .map(|p| (p.name.as_str(), p.protocol, p.port))
        .collect();
    assert_eq!(
        ports,
        [
            ("http", Protocol::Tcp, 80),
            ("dns", Protocol::Udp, 53),
            ("raw", Protocol::Tcp, 9000)
        ]
    );
    let mut http: Vec<(Backend, Option<&str>)> = [("c1", "node-a"), ("c2", "node-b")]
        .iter()
        .flat_map(|&(c, node)| {
            [
                (ready(lab.addr(c, true), 8080), Some(node)),
                (ready(lab.addr(c, false), 8080), Some(node)),
            ]
        })
        .collect();
    http.sort_by_key(|(b, _)| (b.addr, b.port));
    let got: Vec<(Backend, Option<&str>)> = m.ports[0]
        .backends
        .iter()
        .map(|b| (b.backend, b.node.as_deref()))
        .collect();
    assert_eq!(got, http);
    let dns: Vec<u16> = m.ports[1].backends.iter().map(|b| b.backend.port).collect();
    assert_eq!(dns, [5353; 4]);
    // A numeric target port needs no container port: web-3 is a backend of raw.
    assert_eq!(m.ports[2].backends.len(), 6);
    let t = lab.cond("web", "TargetPortsResolved");
    assert_eq!(
        (t.status.as_str(), t.reason.as_str()),
        ("False", "NamedPortUnresolved")
    );
    assert!(
        t.message.contains(
            "port http (80/TCP): targetPort \"http\" is no container port of pod shop/web-3"
        ) && t.message.contains("port dns (53/UDP)"),
        "{}",
        t.message
    );
    let p = lab.cond("web", PROGRAMMED);
    assert_eq!(p.status, "True");
    assert!(
        p.message
            .contains("ClusterIPs 10.96.0.10, fd96::10 in network backend")
            && p.message.contains("http (80/TCP): 4 backends in use"),
        "{}",
        p.message
    );

    // web-2 starts terminating: serving, not ready — the Service changes, nothing else.
    let terminating = p2.replace(
        "namespace: shop,",
        "namespace: shop, deletionTimestamp: \"2026-01-01T00:00:00Z\",",
    );
    let changes = lab.batch(&[BASE, WEB, &p1, &terminating, &p3, &p4], &[]);
    assert_eq!(changes, [Change::Service(svc("web"))]);
    let b = lab.service("web").unwrap().ports[0]
        .backends
        .iter()
        .find(|b| b.backend.addr == lab.addr("c2", true))
        .map(|b| b.backend)
        .unwrap();
    assert_eq!(
        b.state,
        BackendState {
            ready: false,
            serving: true,
            terminating: true
        }
    );
    // A pod whose Ready condition is False is neither ready nor serving.
    let unready = format!("{p1}status: {{conditions: [{{type: Ready, status: \"False\"}}]}}\n");
    lab.batch(&[BASE, WEB, &unready, &terminating, &p3, &p4], &[]);
    let b = lab.service("web").unwrap().ports[0]
        .backends
        .iter()
        .find(|b| b.backend.addr == lab.addr("c1", true))
        .map(|b| b.backend)
        .unwrap();
    assert!(!b.state.ready && !b.state.serving && !b.state.terminating);
}

/// `internalTrafficPolicy: Local`: the world keeps every backend with its node, and each node's
/// `Programmed` message counts the backends on that node — on a node with none, the Service
/// drops that node's connections (kube-proxy's behaviour), which the message says.
#[test]
fn a_node_local_service_counts_the_backends_of_each_node() {
    let local = WEB.replace(
        "  selector: {app: web}\n",
        "  selector: {app: web}\n  internalTrafficPolicy: Local\n",
    );
    let p1 = pod("web-1", "node-a", true);
    let p2 = pod("web-2", "node-b", true);
    let adds = [("c1", "web-1", "node-a"), ("c2", "web-2", "node-b")];
    for (node, want) in [
        ("node-a", "http (80/TCP): 2 backends in use on node node-a"),
        ("node-b", "http (80/TCP): 2 backends in use on node node-b"),
        (
            "node-c",
            "http (80/TCP) drops connections from node node-c: internalTrafficPolicy is Local \
             and no backend on this node is ready",
        ),
    ] {
        let mut lab = Lab::new(Core::new(node));
        lab.batch(&[BASE, &local, &p1, &p2], &adds);
        let m = lab.service("web").unwrap();
        assert!(m.node_local);
        assert_eq!(
            m.ports[0].backends.len(),
            4,
            "{node}: every node's backends are kept"
        );
        let mine: Vec<IpAddr> = m
            .backends_on(&m.ports[0], node)
            .iter()
            .map(|b| b.addr)
            .collect();
        let expect: Vec<IpAddr> = match node {
            "node-a" => vec![lab.addr("c1", true), lab.addr("c1", false)],
            "node-b" => vec![lab.addr("c2", true), lab.addr("c2", false)],
            _ => vec![],
        };
        assert_eq!(
            mine.iter().collect::<BTreeSet<_>>(),
            expect.iter().collect::<BTreeSet<_>>(),
            "{node}"
        );
        let p = lab.cond("web", PROGRAMMED);
        assert_eq!(p.status, "True");
        assert!(p.message.contains(want), "{node}: {}", p.message);
    }
}

/// A Service's EndpointSlices are its backends (matched by the kubernetes.io/service-name
/// label in its namespace), in standalone mode as in Kubernetes mode; Kubernetes mode never
/// computes from the selector (other nodes' pods are not even watched): without slices the
/// Service is programmed and rejects.
#[test]
fn endpoint_slices_are_the_backends_and_kubernetes_mode_uses_only_them() {
    let slice = r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
- {name: http, port: 8443, protocol: TCP}
endpoints:
- addresses: [10.40.7.7]
  conditions: {ready: false, serving: true, terminating: true}
- addresses: [10.40.7.8]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: other-abc
  namespace: elsewhere
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
- {name: http, port: 1}
endpoints:
- addresses: [10.40.9.9]
"#;
    let p1 = pod("web-1", "node-a", true);
    for core in [
        Core::new("node-a"),
        Core::new("node-a").with_service_endpoints(ServiceEndpoints::Slices),
    ] {
        let mut lab = Lab::new(core);
        lab.batch(&[BASE, WEB, slice, &p1], &[("c1", "web-1", "node-a")]);
        let m = lab.service("web").unwrap();
        let http: Vec<(String, u16, bool)> = m.ports[0]
            .backends
            .iter()
            .map(|b| b.backend)
            .map(|b| (b.addr.to_string(), b.port, b.state.ready))
            .collect();
        assert_eq!(
            http,
            [
                ("10.40.7.7".to_owned(), 8443, false),
                ("10.40.7.8".to_owned(), 8443, true)
            ]
        );
        // The slice has no dns or raw port: those reject.
        assert!(m.ports[1].backends.is_empty() && m.ports[2].backends.is_empty());
        let p = lab.cond("web", PROGRAMMED);
        assert!(
            p.message.contains("dns (53/UDP) rejects connections"),
            "{}",
            p.message
        );
        assert_eq!(lab.cond("web", "TargetPortsResolved").status, "True");
    }
    let mut lab = Lab::new(Core::new("node-a").with_service_endpoints(ServiceEndpoints::Slices));
    lab.batch(&[BASE, WEB, &p1], &[("c1", "web-1", "node-a")]);
    let m = lab.service("web").unwrap();
    assert!(m.ports.iter().all(|p| p.backends.is_empty()));
    assert_eq!(lab.cond("web", PROGRAMMED).status, "True");
}

/// A Service whose spec turns invalid keeps its last good spec in force (and its backends keep
/// following the endpoints); one invalid from the start is not programmed; both are among the
/// problems with every error.
#[test]
fn an_invalid_service_keeps_its_last_good_spec() {
    let mut lab = Lab::new(Core::new("node-a"));
    let p1 = pod("web-1", "node-a", true);
    lab.batch(&[BASE, WEB, &p1], &[("c1", "web-1", "node-a")]);
    let good = lab.service("web").unwrap().clone();
    let broken = WEB
        .replace("clusterIP: 10.96.0.10\n", "clusterIP: 10.96.0.300\n")
        .replace("[10.96.0.10,", "[10.96.0.300,");
    let fresh = broken.replace("name: web,", "name: fresh,");
    let changes = lab.batch(&[BASE, &broken, &fresh, &p1], &[]);
    assert!(changes.is_empty(), "{changes:?}");
    assert_eq!(lab.service("web"), Some(&good));
    let v = lab.cond("web", VALID);
    assert_eq!((v.status.as_str(), v.reason.as_str()), ("False", "Invalid"));
    assert!(
        v.message
            .contains("Service shop/web: spec.clusterIPs[0] \"10.96.0.300\" is not an IP address"),
        "{}",
        v.message
    );
    let p = lab.cond("web", PROGRAMMED);
    assert_eq!(
        (p.status.as_str(), p.reason.as_str()),
        ("True", "LastGoodSpec")
    );
    assert!(lab.service("fresh").is_none());
    assert_eq!(lab.cond("fresh", PROGRAMMED).reason, "Invalid");
    let problems: Vec<String> = lab
        .core
        .problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("Service shop/web: spec.clusterIPs[0]")
                && p.contains("last valid version stays in force")),
        "{problems:#?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("Service shop/fresh") && p.contains("skipped")),
        "{problems:#?}"
    );
    // The endpoints still move the last good Service's backends.
    let p2 = pod("web-2", "node-a", true);
    let changes = lab.batch(
        &[BASE, &broken, &fresh, &p1, &p2],
        &[("c2", "web-2", "node-a")],
    );
    assert!(
        changes.contains(&Change::Service(svc("web"))),
        "{changes:?}"
    );
    assert_eq!(lab.service("web").unwrap().ports[0].backends.len(), 4);
    // Fixed: Valid again.
    lab.batch(&[BASE, WEB, &p1, &p2], &[]);
    assert_eq!(lab.cond("web", PROGRAMMED).reason, "Programmed");
}

/// Each reason a Service is not programmed, in its condition: a ClusterIP inside a network's
/// subnet, one another Service has (the first by namespace and name keeps it), no binding, a
/// binding to an l2 network, headless, no ClusterIP in a manifest.
#[test]
fn services_that_cannot_be_programmed_say_why() {
    let mut lab = Lab::new(Core::new("node-a"));
    let named = |name: &str, spec: &str| {
        format!("apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: shop}}\nspec: {spec}\n")
    };
    let inside = named("inside", "{clusterIP: 10.40.200.1, ports: [{port: 80}]}");
    let first = named("a-first", "{clusterIP: 10.96.0.77, ports: [{port: 80}]}");
    let second = named("b-second", "{clusterIP: 10.96.0.77, ports: [{port: 80}]}");
    let unbound = named("x", "{clusterIP: 10.96.0.78, ports: [{port: 80}]}")
        .replace("namespace: shop", "namespace: elsewhere");
    let on_l2 = named("l2", "{clusterIP: 10.96.0.79, ports: [{port: 80}]}")
        .replace("namespace: shop}", "namespace: shop, labels: {net: flat}}");
    let headless = named("headless", "{clusterIP: None, ports: [{port: 80}]}");
    let none = named("no-ip", "{ports: [{port: 80}]}");
    lab.batch(
        &[
            BASE, &inside, &first, &second, &unbound, &on_l2, &headless, &none,
        ],
        &[],
    );
    let reason = |name: &str| {
        let c = lab.cond(name, PROGRAMMED);
        assert_eq!(c.status, "False", "{name}: {c:?}");
        (c.reason, c.message)
    };
    let (r, m) = reason("inside");
    assert_eq!(r, "ClusterIPConflict");
    assert!(
        m.contains("ClusterIP 10.40.200.1 lies inside Network backend's 10.40.0.0/16"),
        "{m}"
    );
    assert_eq!(lab.cond("a-first", PROGRAMMED).status, "True");
    let (r, m) = reason("b-second");
    assert_eq!(r, "ClusterIPConflict");
    assert!(
        m.contains("ClusterIP 10.96.0.77 is already Service shop/a-first's"),
        "{m}"
    );
    let c = lab
        .core
        .service_conditions("elsewhere", "x")
        .iter()
        .find(|c| c.type_ == PROGRAMMED)
        .unwrap()
        .clone();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NotBound")
    );
    let (r, m) = reason("l2");
    assert_eq!(r, "UnsupportedNetwork");
    assert!(m.contains("an l2 network"), "{m}");
    assert_eq!(reason("headless").0, "Headless");
    let (r, m) = reason("no-ip");
    assert_eq!(r, "NoClusterIP");
    assert!(m.contains("set spec.clusterIP"), "{m}");
    let programmed: Vec<&NamespacedName> = lab.core.world().services.keys().collect();
    assert_eq!(programmed, [&svc("a-first")]);
}

/// The status file carries each Service's conditions, and `lace-control status` shows them
/// with the reasons of those that are not true.
#[test]
fn the_status_shows_each_services_conditions() {
    let mut lab = Lab::new(Core::new("node-a"));
    let p3 = pod("web-3", "node-a", false);
    lab.batch(&[BASE, WEB, &p3], &[("c3", "web-3", "node-a")]);
    let s = lab.status(None, &BTreeSet::new());
    let web = s.services.iter().find(|e| e.name == "web").unwrap();
    assert_eq!(web.binding, "backend");
    let types: Vec<(&str, &str)> = web
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("Valid", "True"),
            ("Programmed", "True"),
            ("TargetPortsResolved", "False")
        ]
    );
    assert!(web
        .conditions
        .iter()
        .all(|c| c.last_transition_time.is_some()));
    let yaml = serde_yaml::to_string(&s).unwrap();
    let back: StatusFile = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(back, s);
    let text = render(&s, None);
    assert!(
        text.contains("Valid=True Programmed=True TargetPortsResolved=False")
            && text.contains("TargetPortsResolved NamedPortUnresolved: port dns (53/UDP)"),
        "{text}"
    );
}

/// A programmed Service keeps its ClusterIPs: an update to a conflicting one leaves the spec
/// last programmed in force (and says why), and a newcomer asking for a working Service's
/// ClusterIP does not get it, even when it comes first by name.
#[test]
fn a_conflicting_update_or_newcomer_never_takes_a_working_services_address() {
    let mut lab = Lab::new(Core::new("node-a"));
    let named = |name: &str, ip: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: shop}}\nspec: {{clusterIP: {ip}, ports: [{{port: 80}}]}}\n"
        )
    };
    lab.batch(&[BASE, &named("web", "10.96.0.10")], &[]);
    let ip = |lab: &Lab, name: &str| lab.service(name).map(|m| m.cluster_ips.clone());
    assert_eq!(ip(&lab, "web"), Some(vec!["10.96.0.10".parse().unwrap()]));
    // Moved into a network's subnet: the old ClusterIP stays.
    let changes = lab.batch(&[BASE, &named("web", "10.40.9.9")], &[]);
    assert!(changes.is_empty(), "{changes:?}");
    let p = lab.cond("web", PROGRAMMED);
    assert_eq!(
        (p.status.as_str(), p.reason.as_str()),
        ("True", "LastGoodSpec")
    );
    assert!(
        p.message
            .contains("ClusterIP 10.40.9.9 lies inside Network backend's 10.40.0.0/16")
            && p.message.contains("stays in force (ClusterIPs 10.96.0.10)"),
        "{}",
        p.message
    );
    // Back to a good address; then a newcomer (first by name) wants it.
    lab.batch(&[BASE, &named("web", "10.96.0.10")], &[]);
    lab.batch(
        &[
            BASE,
            &named("web", "10.96.0.10"),
            &named("aaa", "10.96.0.10"),
        ],
        &[],
    );
    assert_eq!(ip(&lab, "web"), Some(vec!["10.96.0.10".parse().unwrap()]));
    assert!(lab.service("aaa").is_none());
    let p = lab.cond("aaa", PROGRAMMED);
    assert_eq!(p.reason, "ClusterIPConflict");
    assert!(
        p.message.contains("already Service shop/web's"),
        "{}",
        p.message
    );
}

/// Service `name` in `shop` at `ips` (the primary first), port 80.
fn service_at(name: &str, ips: &[&str]) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: shop}}\nspec: {{clusterIP: \"{}\", clusterIPs: [{}], ports: [{{port: 80}}]}}\n",
        ips[0],
        ips.iter().map(|i| format!("\"{i}\"")).collect::<Vec<_>>().join(", ")
    )
}

fn dual_stack_cidr() -> ServiceCidr {
    ServiceCidr {
        v4: Some("10.96.0.0/12".parse().unwrap()),
        v6: Some("fd96::/108".parse().unwrap()),
    }
}

/// With a service CIDR, a Service with a ClusterIP outside it, of either family, is not
/// programmed (`ClusterIPOutsideServiceCIDR`, naming the address and the range); one inside
/// both ranges is; an update that leaves the range keeps the spec last programmed in force.
/// Without a service CIDR, nothing is checked.
#[test]
fn clusterips_outside_the_service_cidr_are_not_programmed() {
    let mut lab = Lab::new(Core::new("node-a").with_service_cidr(Some(dual_stack_cidr())));
    let web = service_at("web", &["10.96.0.10", "fd96::10"]);
    let v4_out = service_at("v4-out", &["10.200.0.1"]);
    let v6_out = service_at("v6-out", &["10.96.0.11", "fd97::11"]);
    lab.batch(&[BASE, &web, &v4_out, &v6_out], &[]);
    let p = lab.cond("web", PROGRAMMED);
    assert_eq!(
        (p.status.as_str(), p.reason.as_str()),
        ("True", "Programmed")
    );
    for (name, says) in [
        (
            "v4-out",
            "ClusterIP 10.200.0.1 lies outside the service CIDR 10.96.0.0/12",
        ),
        (
            "v6-out",
            "ClusterIP fd97::11 lies outside the service CIDR fd96::/108",
        ),
    ] {
        let p = lab.cond(name, PROGRAMMED);
        assert_eq!(
            (p.status.as_str(), p.reason.as_str()),
            ("False", "ClusterIPOutsideServiceCIDR"),
            "{name}"
        );
        assert!(
            p.message.contains(says) && p.message.contains("--service-cidr"),
            "{}",
            p.message
        );
        assert!(lab.service(name).is_none(), "{name} is programmed");
    }
    assert_eq!(lab.cond("v6-out", VALID).status, "True");
    // web moved out of the range: its last programmed spec stays.
    let moved = service_at("web", &["10.200.0.10", "fd96::10"]);
    let changes = lab.batch(&[BASE, &moved], &[]);
    assert!(changes.is_empty(), "{changes:?}");
    assert_eq!(
        lab.service("web").unwrap().cluster_ips,
        [
            "10.96.0.10".parse::<IpAddr>().unwrap(),
            "fd96::10".parse().unwrap()
        ]
    );
    let p = lab.cond("web", PROGRAMMED);
    assert_eq!(
        (p.status.as_str(), p.reason.as_str()),
        ("True", "LastGoodSpec")
    );
    assert!(
        p.message
            .contains("ClusterIP 10.200.0.10 lies outside the service CIDR 10.96.0.0/12")
            && p.message
                .contains("stays in force (ClusterIPs 10.96.0.10, fd96::10)"),
        "{}",
        p.message
    );
    // No service CIDR: no check.
    let mut lab = Lab::new(Core::new("node-a"));
    lab.batch(&[BASE, &v4_out, &v6_out], &[]);
    for name in ["v4-out", "v6-out"] {
        assert_eq!(lab.cond(name, PROGRAMMED).reason, "Programmed", "{name}");
        assert!(lab.service(name).is_some(), "{name}");
    }
}

/// `lace-control status` shows why a Service outside the service CIDR is not programmed.
#[test]
fn the_status_names_a_clusterip_outside_the_service_cidr() {
    let mut lab = Lab::new(Core::new("node-a").with_service_cidr(Some(dual_stack_cidr())));
    lab.batch(&[BASE, &service_at("v4-out", &["10.200.0.1"])], &[]);
    let s = lab.status(None, &BTreeSet::new());
    let text = render(&s, None);
    assert!(
        text.contains("shop/v4-out")
            && text.contains("Valid=True Programmed=False")
            && text.contains(
                "Programmed ClusterIPOutsideServiceCIDR: ClusterIP 10.200.0.1 lies outside the \
                 service CIDR 10.96.0.0/12"
            ),
        "{text}"
    );
}

/// A batch the tables refused (a full table or region): each Service whose ClusterIP records
/// it held shows `Programmed=False`, `NotPublished`, with the writer's error; the others keep
/// their conditions; once published again the Service is `Programmed` again.
#[test]
fn a_service_the_tables_refused_is_not_published() {
    let mut lab = Lab::new(Core::new("node-a"));
    let docs = [BASE, WEB, &service_at("db", &["10.96.0.20"])];
    lab.batch(&docs, &[]);
    let error = "publishing the tables: tables: set_service 10.96.0.10:80/6 failed: table \
                 region full";
    let refused: BTreeSet<IpAddr> = ["10.96.0.10".parse().unwrap()].into();
    let programmed = |s: &StatusFile, name: &str| {
        let e = s.services.iter().find(|e| e.name == name).unwrap();
        let c = e.conditions.iter().find(|c| c.type_ == PROGRAMMED).unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    };
    let s = lab.status(Some(error), &refused);
    let (st, reason, message) = programmed(&s, "web");
    assert_eq!((st.as_str(), reason.as_str()), ("False", "NotPublished"));
    assert!(message.contains(error), "{message}");
    assert_eq!(programmed(&s, "db").1, "Programmed");
    let s = lab.status(None, &BTreeSet::new());
    assert_eq!(programmed(&s, "web").1, "Programmed");
}

/// A one-way routing policy between l3 networks is compiled now: `Supported=True`, in the world
/// with its direction.
#[test]
fn one_way_routing_policies_are_supported() {
    let mut lab = Lab::new(Core::new("node-a"));
    let policy = r#"
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata: {name: frontend}
spec:
  type: l3
  ipv4Subnet: {prefix: 10.41.0.0/16, hostLocalPrefixLength: 24}
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkRoutingPolicy
metadata: {name: fe-to-be}
spec:
  sources: [frontend]
  destination: {network: backend}
  direction: sourceToDestination
"#;
    lab.batch(&[BASE, policy], &[]);
    let supported = lab
        .core
        .reports()
        .find(|r| r.kind == "NetworkRoutingPolicy" && r.name == "fe-to-be")
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Supported")
        .unwrap()
        .clone();
    assert_eq!(supported.status, "True", "{supported:?}");
    let r = &lab.core.world().routing[0];
    assert_eq!(
        (r.name.as_str(), r.direction),
        (
            "fe-to-be",
            lace_control::api::Direction::SourceToDestination
        )
    );
}
