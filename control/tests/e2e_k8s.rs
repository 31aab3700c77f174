//! End to end in Kubernetes mode on this machine (root): the fake API server (`lace-kube-fake`,
//! in this process, TLS and a token through a kubeconfig), two nodes as network namespaces on a
//! bridge underlay, each with a `lace-forwarder` and a `lace-control --source kubernetes` that
//! keeps the node's host interface. The test plays the user (`kubectl apply` of the CRDs, the
//! example networks, the seed's CEL binding policy, the pods), the kubelet (Node status, then
//! `lace-cni` with kubelet's CNI_ARGS for each pod) and the operator (deleting a pod, stopping
//! and restarting the API server). Shows:
//!
//! - the binding policy applied with kubectl decides each pod's network (its CEL rule too);
//! - ping and TCP across nodes (l3 over SRv6, and the l2 network), isolation until a
//!   NetworkRoutingPolicy is applied with kubectl;
//! - from each node's host namespace an HTTP probe reaches every local pod (IPv4 and IPv6),
//!   through the host interface, and another node's pod through SRv6; a pod reaches its
//!   node's address, and another node's;
//! - a ClusterIP Service and its EndpointSlice applied as the API server and the EndpointSlice
//!   controller write them: a pod, and the node itself, reach both backends (on both nodes)
//!   through the ClusterIP, and a backend the slice marks terminating takes no new
//!   connections;
//! - a Service whose backend is a node's own address (as the `kubernetes` Service's are the
//!   API servers'): pods on both nodes reach it through the ClusterIP;
//! - a NetworkPolicy isolating the backends: each one's own node still reaches it, another
//!   node's host and the frontend no longer do, until the policy is deleted; a second one
//!   admitting `tier: frontend` pods lets the frontend on the other node in (a podSelector
//!   peer on another node), and nothing else;
//! - the host interface survives a forwarder restart, and `lace-forwarder stats` shows it;
//! - every endpoint is a NetworkEndpoint in its pod's namespace; deleting a pod (no DEL)
//!   removes it;
//! - status with `kubectl get networks -o yaml` (id, conditions, lace-control's field manager);
//! - stopping the API server does not interrupt traffic; the watches survive its restart and a
//!   forced relist (410 Gone) and converge: a pod created afterwards is bound and reachable.
//!
//! Needs root, host tools and kubectl: `#[ignore]`d, run with `--include-ignored` (as `.ci/run`
//! does); a missing prerequisite then fails the test, named with what provides it.

mod e2e_support;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e_support::*;
use ipnet::IpNet;
use lace_kube_fake::{FakeApiServer, Restart};
use lace_prereq::{which, Need};
use serde_json::json;

/// (node, underlay address, the node's own IPv4 and IPv6 addresses).
const NODES: [(&str, &str, &str, &str); 2] = [
    ("node-a", "fd00:100::a", "192.168.200.1", "fd00:200::a"),
    ("node-b", "fd00:100::b", "192.168.200.2", "fd00:200::b"),
];
const HOST_IF: &str = "lace-host";

/// kubectl: `$LACE_DEPLOY_TOOLS/bin`, the workspace's `target/deploy-tools/bin` (what
/// `.ci/install-deps` installs) or PATH.
fn kubectl_bin() -> Option<PathBuf> {
    let tools = std::env::var_os("LACE_DEPLOY_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/deploy-tools"));
    let there = tools.join("bin/kubectl");
    if there.is_file() {
        return Some(there);
    }
    which("kubectl")
}

/// Processes first (dropped first), then the API server, then namespaces and files.
struct Lab {
    controls: Vec<Option<Proc>>,
    forwarders: Vec<Option<Proc>>,
    api: FakeApiServer,
    res: Resources,
    node_ns: Vec<String>,
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    fwd_bin: PathBuf,
}

#[derive(Debug, Clone)]
struct Pod {
    ns: String,
    node: usize,
    namespace: &'static str,
    name: &'static str,
    uid: String,
    container: String,
    v4: IpAddr,
    v6: IpAddr,
}

impl Lab {
    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(&self.kubectl)
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("kubectl: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ))
        }
    }

    fn k(&self, args: &[&str]) -> String {
        self.kubectl(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `kubectl get … -o json`, parsed.
    fn get_json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.k(&a)).unwrap()
    }

    fn tables_name(&self, k: usize) -> String {
        node::tables_name(&self.res.tag, NODES[k].0)
    }

    fn socket(&self, k: usize) -> PathBuf {
        self.res.dir.join(format!("control-{}.sock", NODES[k].0))
    }

    fn start_control(&mut self, k: usize) {
        let (node, ..) = NODES[k];
        let argv: Vec<String> = vec![
            env!("CARGO_BIN_EXE_lace-control").into(),
            "run".into(),
            "--node".into(),
            node.into(),
            "--source".into(),
            "kubernetes".into(),
            "--kubeconfig".into(),
            self.kubeconfig.display().to_string(),
            "--state-dir".into(),
            self.res
                .dir
                .join(format!("state-{node}"))
                .display()
                .to_string(),
            "--socket".into(),
            self.socket(k).display().to_string(),
            "--tables-dir".into(),
            SHM.into(),
            "--tables-name".into(),
            self.tables_name(k),
            "--attach-timeout-ms".into(),
            "30000".into(),
            "--host-interface".into(),
            HOST_IF.into(),
            "--host-netns".into(),
            format!("/var/run/netns/{}", self.node_ns[k]),
        ];
        let log = self.res.dir.join(format!("control-{node}.log"));
        self.controls[k] = Some(Proc::spawn(&format!("lace-control {node}"), &argv, log));
        let sock = self.socket(k);
        let ctl = self.controls[k].as_mut().unwrap();
        wait_for(&format!("lace-control {node} ready"), WAIT, || {
            if let Some(s) = ctl.try_wait() {
                panic!("lace-control {node} exited ({s}):\n{}", ctl.log_tail(40));
            }
            let r = try_control_request(&sock, &json!({"op": "status"})).ok()?;
            (r["result"] == "ok").then_some(())
        });
    }

    fn start_forwarder(&mut self, k: usize) {
        let (node, underlay, ..) = NODES[k];
        let tables = self.tables_name(k);
        let fwd = node::start_forwarder(
            &self.res,
            &self.fwd_bin,
            &self.node_ns[k],
            node,
            &tables,
            underlay,
            "",
        );
        self.forwarders[k] = Some(fwd);
    }

    /// `lace-cni` with kubelet's environment (CNI_ARGS with the pod's namespace, name and UID),
    /// in node k's namespace.
    fn cni(&self, command: &str, pod: &Pod) -> Result<serde_json::Value, node::CniFailure> {
        node::cni(
            &self.node_ns[pod.node],
            &self.socket(pod.node),
            command,
            &pod.container,
            &pod.ns,
            &format!(
                "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};\
                 K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
                pod.namespace, pod.name, pod.container, pod.uid
            ),
        )
    }

    /// As kubelet: the Pod object exists (applied with kubectl); make its sandbox (a network
    /// namespace) and ADD it with its UID.
    fn add_pod(&mut self, namespace: &'static str, name: &'static str) -> Pod {
        let obj = self.get_json(&["pod", "-n", namespace, name]);
        let node_name = obj["spec"]["nodeName"].as_str().unwrap();
        let node = NODES.iter().position(|n| n.0 == node_name).unwrap();
        let ns = self.res.netns(&format!("p-{name}"));
        let mut pod = Pod {
            container: format!("{}-{name}", self.res.tag),
            uid: obj["metadata"]["uid"].as_str().unwrap().to_owned(),
            ns,
            node,
            namespace,
            name,
            v4: IpAddr::from([0, 0, 0, 0]),
            v6: IpAddr::from([0u16; 8]),
        };
        // As kubelet: a sandbox whose ADD failed is torn down (DEL) and made again, until it
        // succeeds; only "try again later" (code 11: the pod not observed yet) is expected here.
        let start = Instant::now();
        let result = loop {
            match self.cni("ADD", &pod) {
                Ok(r) => break r,
                Err(e) if e.code == Some(11) && start.elapsed() < WAIT => {
                    self.cni("DEL", &pod)
                        .unwrap_or_else(|e| panic!("{}", e.text));
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => panic!("{}", e.text),
            }
        };
        (pod.v4, pod.v6) = node::result_ips(&result);
        pod
    }

    /// An HTTP probe from node k's own namespace (as kubelet probes): the body of
    /// `http://addr:8080/probe`.
    fn probe(&self, k: usize, addr: IpAddr) -> Result<String, String> {
        http_get(&self.node_ns[k], addr, 8080)
    }
}

/// The body of `http://addr:port/probe`, fetched from network namespace `ns`.
fn http_get(ns: &str, addr: IpAddr, port: u16) -> Result<String, String> {
    let url = match addr {
        IpAddr::V4(a) => format!("http://{a}:{port}/probe"),
        IpAddr::V6(a) => format!("http://[{a}]:{port}/probe"),
    };
    let script = format!(
        "import urllib.request\nprint(urllib.request.urlopen('{url}', timeout=3).read().decode())"
    );
    run_capture(&["ip", "netns", "exec", ns, "python3", "-c", &script]).map(|s| s.trim().to_owned())
}

/// The `backend` Service of team-blue (bound to the backend network by the `tiers` policy).
const SERVICE: &str = "apiVersion: v1
kind: Service
metadata: {name: backend, namespace: team-blue, labels: {tier: backend}}
spec:
  clusterIP: 10.96.0.40
  clusterIPs: [10.96.0.40]
  selector: {tier: backend}
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
";

/// The `backend` Service's EndpointSlice as the EndpointSlice controller writes it: each
/// backend with its node and conditions (`None`: terminating and no longer serving).
fn backend_slice(backends: &[(&Pod, &str, bool)]) -> String {
    let mut s = String::from(
        "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: backend-x7k2p
  namespace: team-blue
  labels: {kubernetes.io/service-name: backend, endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io}
addressType: IPv4
ports:
- {name: http, port: 8080, protocol: TCP}
endpoints:
",
    );
    for (pod, node, ready) in backends {
        let (serving, terminating) = if *ready { (true, false) } else { (false, true) };
        s.push_str(&format!(
            "- addresses: [\"{}\"]\n  nodeName: {node}\n  targetRef: {{kind: Pod, namespace: team-blue, name: {}}}\n  conditions: {{ready: {ready}, serving: {serving}, terminating: {terminating}}}\n",
            pod.v4, pod.name
        ));
    }
    s
}

/// An HTTP server in network namespace `ns` answering `/probe` with `name` (killed on drop).
fn http_server(dir: &Path, ns: &str, name: &str) -> Proc {
    let root = dir.join(format!("www-{name}"));
    std::fs::create_dir_all(&root).unwrap();
    write(&root.join("probe"), name);
    let argv = [
        "ip",
        "netns",
        "exec",
        ns,
        "python3",
        "-m",
        "http.server",
        "8080",
        "--bind",
        "::",
        "--directory",
        root.to_str().unwrap(),
    ]
    .map(String::from);
    Proc::spawn(
        &format!("http server in {name}"),
        &argv,
        dir.join(format!("http-{name}.log")),
    )
}

fn ping(from: &Pod, to: IpAddr, count: u32) -> bool {
    let c = count.to_string();
    let to = to.to_string();
    run_capture(&[
        "ip", "netns", "exec", &from.ns, "ping", "-c", &c, "-i", "0.2", "-W", "1", &to,
    ])
    .is_ok()
}

fn reachable(from: &Pod, to: IpAddr) {
    wait_for(&format!("{} -> {to} (ping)", from.name), WAIT, || {
        ping(from, to, 1).then_some(())
    });
    assert!(
        ping(from, to, 3),
        "{} -> {to}: lost packets once reachable",
        from.name
    );
}

/// 64 KiB through a TCP connection from `from` to `to` and back, compared.
fn tcp_echo(from: &Pod, to: &Pod, addr: IpAddr) {
    let server = format!(
        "import socket\ns = socket.socket(socket.AF_INET6 if ':' in '{addr}' else socket.AF_INET)\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('{addr}', 7007))\n\
         s.listen(1)\ns.settimeout(30)\nc, _ = s.accept()\nc.settimeout(30)\ngot = b''\n\
         while len(got) < 65536:\n    d = c.recv(65536)\n    if not d:\n        break\n    got += d\n\
         c.sendall(got)\nc.close()\n"
    );
    let mut srv = Command::new("ip")
        .args(["netns", "exec", &to.ns, "python3", "-c", &server])
        .spawn()
        .expect("spawn the TCP server");
    let client = format!(
        "import socket, sys, time\ndata = bytes(range(256)) * 256\nfor _ in range(50):\n    try:\n\
         \x20       c = socket.create_connection(('{addr}', 7007), timeout=10)\n        break\n\
         \x20   except OSError:\n        time.sleep(0.2)\nelse:\n    sys.exit('no connection')\n\
         c.sendall(data)\ngot = b''\nwhile len(got) < len(data):\n    d = c.recv(65536)\n\
         \x20   if not d:\n        break\n    got += d\nsys.exit(0 if got == data else 'echo differs')\n"
    );
    let out = run_capture(&["ip", "netns", "exec", &from.ns, "python3", "-c", &client]);
    let _ = srv.kill();
    let _ = srv.wait();
    if let Err(e) = out {
        panic!("TCP {} -> {} ({addr}): {e}", from.name, to.name);
    }
}

fn in_subnet(a: IpAddr, subnet: &str) -> bool {
    subnet.parse::<IpNet>().unwrap().contains(&a)
}

/// The NetworkEndpoints of `namespace`: (pod, node).
fn endpoints(lab: &Lab, namespace: &str) -> Vec<(String, String)> {
    let list = lab.get_json(&["networkendpoints", "-n", namespace]);
    let mut out: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["spec"]["pod"].as_str().unwrap().to_owned(),
                e["spec"]["node"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
#[ignore = "end-to-end: needs root, ip, ping, ethtool, kubectl; run with --include-ignored"]
fn two_nodes_in_kubernetes_mode_end_to_end() {
    prerequisites([Need::probe(
        "kubectl",
        ".ci/install-deps installs it into target/deploy-tools",
        || kubectl_bin().is_some(),
    )]);
    let kubectl = kubectl_bin().expect("kubectl was just found");
    let fwd_bin = forwarder_bin();
    let mut res = Resources::new();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");

    // ---- the machines: an underlay bridge, two node namespaces with their own addresses ----
    let node_ns = node::underlay(&mut res, &NODES.map(|n| n.0));
    for (ns, (_, _, v4, v6)) in node_ns.iter().zip(NODES) {
        // The node's own addresses (its InternalIP), on lo; the node keeps IPv6 beside `ul`
        // (its host interface reaches the pods' IPv6 addresses).
        ipn(ns, &format!("addr add {v4}/32 dev lo"));
        ipn(ns, &format!("addr add {v6}/128 dev lo nodad"));
    }

    // ---- the cluster: CRDs, namespaces, networks, the seed's binding policy, pods ----
    let api = FakeApiServer::start_new().unwrap();
    let kubeconfig = res.dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig).unwrap();
    let mut lab = Lab {
        controls: vec![None, None],
        forwarders: vec![None, None],
        api,
        res,
        node_ns,
        kubeconfig,
        kubectl,
        fwd_bin,
    };
    lab.k(&["apply", "-f", crds.to_str().unwrap()]);
    let namespaces = lab.res.dir.join("namespaces.yaml");
    write(
        &namespaces,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: lace-system}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n",
    );
    lab.k(&["apply", "-f", namespaces.to_str().unwrap()]);
    for f in [
        "namespaces.yaml",
        "networks.yaml",
        "binding.yaml",
        "nodes.yaml",
        "pods.yaml",
    ] {
        lab.k(&["apply", "-f", examples.join(f).to_str().unwrap()]);
    }
    // As each kubelet: the Node's addresses.
    for (name, _, v4, v6) in NODES {
        let status = json!({"status": {"addresses": [
            {"type": "InternalIP", "address": v4}, {"type": "InternalIP", "address": v6},
            {"type": "Hostname", "address": name}]}});
        lab.k(&[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ]);
    }
    for k in 0..2 {
        lab.start_control(k);
    }
    for k in 0..2 {
        lab.start_forwarder(k);
    }

    // ---- binding: the policies applied with kubectl decide, CEL included ----
    let frontend1 = lab.add_pod("team-blue", "frontend-1");
    let backend2 = lab.add_pod("team-blue", "backend-2");
    let backend1 = lab.add_pod("team-blue", "backend-1");
    let tools1 = lab.add_pod("team-blue", "tools-1");
    let cart1 = lab.add_pod("shop", "cart-1");
    let storage1 = lab.add_pod("team-blue", "storage-1");
    let storage2 = lab.add_pod("team-blue", "storage-2");
    for (p, v4) in [
        (&frontend1, "10.41.0.0/16"),
        (&backend2, "10.40.0.0/16"),
        (&backend1, "10.40.0.0/16"),
        // per-team's CEL rule: team-blue → blue; shop → its second rule, default.
        (&tools1, "10.42.0.0/16"),
        (&cart1, "10.43.0.0/16"),
        (&storage1, "10.50.0.0/24"),
        (&storage2, "10.50.0.0/24"),
    ] {
        assert!(in_subnet(p.v4, v4), "{}: {} not in {v4}", p.name, p.v4);
    }
    assert_ne!(backend1.node, backend2.node);

    // ---- every endpoint is a NetworkEndpoint of its pod, owned by it ----
    assert_eq!(
        endpoints(&lab, "team-blue"),
        [
            ("backend-1", "node-b"),
            ("backend-2", "node-a"),
            ("frontend-1", "node-a"),
            ("storage-1", "node-a"),
            ("storage-2", "node-b"),
            ("tools-1", "node-b"),
        ]
        .map(|(p, n)| (p.to_owned(), n.to_owned()))
    );
    let ep = lab.get_json(&["networkendpoints", "-n", "shop"]);
    let owner = &ep["items"][0]["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["uid"]),
        (&json!("Pod"), &json!(cart1.uid))
    );

    // ---- across nodes: ping both families, TCP; the l2 network too ----
    reachable(&backend2, backend1.v4);
    reachable(&backend2, backend1.v6);
    tcp_echo(&backend2, &backend1, backend1.v4);
    reachable(&storage1, storage2.v4);
    tcp_echo(&storage1, &storage2, storage2.v4);

    // ---- isolation until a NetworkRoutingPolicy is applied with kubectl ----
    assert!(
        !ping(&frontend1, backend1.v4, 2),
        "frontend reached backend without a routing policy"
    );
    assert!(!ping(&tools1, backend1.v4, 2), "blue reached backend");
    lab.k(&[
        "apply",
        "-f",
        examples.join("later/routing.yaml").to_str().unwrap(),
    ]);
    reachable(&frontend1, backend1.v4);
    reachable(&backend1, frontend1.v6);
    assert!(
        !ping(&tools1, backend1.v4, 2),
        "blue reached backend after the policy"
    );

    // ---- the node's own stack reaches its pods (as kubelet's probes do) ----
    let pods = [
        &frontend1, &backend2, &storage1, &backend1, &tools1, &cart1, &storage2,
    ];
    let mut servers: Vec<Proc> = pods
        .iter()
        .map(|p| http_server(&lab.res.dir, &p.ns, p.name))
        .collect();
    for p in pods {
        for a in [p.v4, p.v6] {
            let body = wait_for(
                &format!("HTTP probe from {} to {} ({a})", NODES[p.node].0, p.name),
                WAIT,
                || lab.probe(p.node, a).ok(),
            );
            assert_eq!(body, p.name);
        }
    }
    // A pod reaches its node's address (through the host interface).
    let node_a: IpAddr = NODES[0].2.parse().unwrap();
    reachable(&backend2, node_a);
    // The host reaches another node's pods too, through that node's SID of the pod's network,
    // and a pod reaches another node's address the same way back (ADR 0036).
    for a in [backend1.v4, backend1.v6] {
        let body = wait_for(
            &format!("HTTP probe from node-a to backend-1 on node-b ({a})"),
            WAIT,
            || lab.probe(0, a).ok(),
        );
        assert_eq!(body, backend1.name);
    }
    reachable(&backend1, node_a);

    // ---- a ClusterIP Service and its EndpointSlice, as the API server and the EndpointSlice
    //      controller write them: a frontend pod reaches both backends (one on each node)
    //      through the ClusterIP; a backend the controller marks terminating takes no new
    //      connections ----
    let vip: IpAddr = "10.96.0.40".parse().unwrap();
    let service = lab.res.dir.join("service.yaml");
    write(&service, SERVICE);
    lab.k(&["apply", "-f", service.to_str().unwrap()]);
    let slice = lab.res.dir.join("slice.yaml");
    write(
        &slice,
        &backend_slice(&[(&backend1, "node-b", true), (&backend2, "node-a", true)]),
    );
    lab.k(&["apply", "-f", slice.to_str().unwrap()]);
    let mut seen = std::collections::BTreeSet::new();
    wait_for("both backends through the ClusterIP", WAIT, || {
        seen.extend(http_get(&frontend1.ns, vip, 80).ok());
        (seen.len() == 2).then_some(())
    });
    assert_eq!(
        seen,
        ["backend-1", "backend-2"].map(String::from).into(),
        "frontend-1 -> {vip}:80"
    );
    // The node reaches the ClusterIP too (a backend on it and one on the other node).
    let mut from_host = std::collections::BTreeSet::new();
    wait_for(
        "both backends through the ClusterIP from node-a",
        WAIT,
        || {
            from_host.extend(http_get(&lab.node_ns[0], vip, 80).ok());
            (from_host.len() == 2).then_some(())
        },
    );
    assert_eq!(from_host, seen, "node-a -> {vip}:80");
    write(
        &slice,
        &backend_slice(&[(&backend1, "node-b", false), (&backend2, "node-a", true)]),
    );
    lab.k(&["apply", "-f", slice.to_str().unwrap()]);
    wait_for("backend-1 drained from the Service", WAIT, || {
        (0..8)
            .all(|_| http_get(&frontend1.ns, vip, 80).is_ok_and(|b| b == "backend-2"))
            .then_some(())
    });

    // ---- a Service whose backend is a node's own address, as the `kubernetes` Service's
    //      endpoints are the API servers': a pod on the other node and one on that node reach
    //      it through the ClusterIP ----
    servers.push(http_server(&lab.res.dir, &lab.node_ns[1], "node-b"));
    let apiserver_like = lab.res.dir.join("node-service.yaml");
    write(
        &apiserver_like,
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: node-api, namespace: team-blue, \
             labels: {{tier: backend}}}}\nspec: {{clusterIP: 10.96.0.41, clusterIPs: [10.96.0.41], \
             ports: [{{name: https, port: 443, targetPort: 8080, protocol: TCP}}]}}\n---\n\
             apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: node-api, \
             namespace: team-blue, labels: {{kubernetes.io/service-name: node-api}}}}\n\
             addressType: IPv4\nports: [{{name: https, port: 8080, protocol: TCP}}]\n\
             endpoints: [{{addresses: [\"{}\"], conditions: {{ready: true}}}}]\n",
            NODES[1].2
        ),
    );
    lab.k(&["apply", "-f", apiserver_like.to_str().unwrap()]);
    let node_vip: IpAddr = "10.96.0.41".parse().unwrap();
    for client in [&frontend1, &backend1] {
        let body = wait_for(
            &format!("{} -> node-b's address through {node_vip}", client.name),
            WAIT,
            || http_get(&client.ns, node_vip, 443).ok(),
        );
        assert_eq!(body, "node-b", "{} -> {node_vip}:443", client.name);
    }

    // ---- a NetworkPolicy isolates the backends: only each pod's own node still reaches it
    //      (Kubernetes' rule for the node's traffic); another node's host and the frontend
    //      do not; deleting the policy opens them again ----
    let isolate = lab.res.dir.join("isolate.yaml");
    write(
        &isolate,
        "apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name:          backends-isolated, namespace: team-blue}
spec: {podSelector: {matchLabels: {tier:          backend}}, policyTypes: [Ingress]}
",
    );
    lab.k(&["apply", "-f", isolate.to_str().unwrap()]);
    wait_for("the backends isolated", WAIT, || {
        http_get(&frontend1.ns, backend2.v4, 8080)
            .is_err()
            .then_some(())
    });
    assert!(
        http_get(&frontend1.ns, backend1.v4, 8080).is_err(),
        "frontend-1 reached the isolated backend-1"
    );
    assert_eq!(lab.probe(0, backend2.v4), Ok("backend-2".to_string()));
    assert_eq!(lab.probe(1, backend1.v4), Ok("backend-1".to_string()));
    assert!(
        lab.probe(0, backend1.v4).is_err(),
        "node-a's host reached node-b's isolated pod"
    );

    // ---- a podSelector peer on the other node: a policy admitting `tier: frontend` lets
    //      frontend-1 (node-a) reach backend-1 (node-b), whose node knows frontend-1's labels
    //      from the Pod watch; backend-2 (node-a, not a frontend) and node-a's host still do
    //      not ----
    let admit = lab.res.dir.join("admit.yaml");
    write(
        &admit,
        "apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: frontends-in, namespace: team-blue}
spec:
  podSelector: {matchLabels: {tier: backend}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {tier: frontend}}}]
    ports: [{port: 8080, protocol: TCP}]
",
    );
    lab.k(&["apply", "-f", admit.to_str().unwrap()]);
    let body = wait_for(
        "frontend-1 admitted to backend-1 across nodes",
        WAIT,
        || http_get(&frontend1.ns, backend1.v4, 8080).ok(),
    );
    assert_eq!(body, "backend-1");
    assert_eq!(
        http_get(&frontend1.ns, backend2.v4, 8080).ok().as_deref(),
        Some("backend-2")
    );
    assert!(
        http_get(&backend2.ns, backend1.v4, 8080).is_err(),
        "backend-2 (no frontend) reached the isolated backend-1"
    );
    assert!(
        lab.probe(0, backend1.v4).is_err(),
        "node-a's host reached node-b's isolated pod"
    );
    lab.k(&["delete", "-f", admit.to_str().unwrap()]);
    lab.k(&["delete", "-f", isolate.to_str().unwrap()]);
    wait_for("the backends open again", WAIT, || {
        http_get(&frontend1.ns, backend1.v4, 8080).ok()
    });
    assert_eq!(lab.probe(0, backend1.v4), Ok("backend-1".to_string()));

    // ---- the host interface survives a forwarder restart, and `stats` shows it ----
    lab.forwarders[0] = None;
    lab.start_forwarder(0);
    let body = wait_for("node-a's host reaches backend-2 again", WAIT, || {
        lab.probe(0, backend2.v4).ok()
    });
    assert_eq!(body, "backend-2");
    let stats = run_capture(&[
        lab.fwd_bin.to_str().unwrap(),
        "stats",
        "--name",
        &lab.tables_name(0),
        "--tables-dir",
        SHM,
        "--json",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let report: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let host = report["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "host")
        .unwrap_or_else(|| panic!("no host port in stats: {stats}"));
    assert_eq!(host["state"], "up", "{stats}");
    assert!(host["rx_packets"].as_u64() > Some(0), "{stats}");
    drop(servers);

    // ---- status: kubectl get networks -o yaml ----
    let yaml = wait_for("Network status applied", WAIT, || {
        let y = lab.kubectl(&["get", "networks", "-o", "yaml"]).ok()?;
        (y.matches("type: Ready").count() >= 5).then_some(y)
    });
    let nets = lab.get_json(&["networks", "--show-managed-fields"]);
    for n in nets["items"].as_array().unwrap() {
        let name = n["metadata"]["name"].as_str().unwrap();
        assert!(n["status"]["id"].as_u64().is_some(), "{name}: {yaml}");
        let ready = n["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap_or_else(|| panic!("{name}: no Ready condition: {yaml}"));
        assert_eq!(ready["status"], "True", "{name}: {yaml}");
        let managers = &n["metadata"]["managedFields"];
        assert!(
            managers.as_array().is_some_and(|m| m
                .iter()
                .any(|m| m["manager"] == "lace-control" && m["subresource"] == "status")),
            "{name}: status not applied by lace-control: {n}"
        );
    }
    let described = lab.k(&["describe", "networkroutingpolicy", "frontend-backend"]);
    assert!(
        described.contains("Supported=True"),
        "the transition is an Event kubectl describe shows:\n{described}"
    );

    // ---- deleting a pod (no DEL: its node's control lists pods) removes its endpoint ----
    lab.k(&[
        "delete",
        "pod",
        "-n",
        "team-blue",
        "tools-1",
        "--grace-period=0",
        "--force",
    ]);
    wait_for("tools-1's NetworkEndpoint gone", WAIT, || {
        (!endpoints(&lab, "team-blue")
            .iter()
            .any(|(p, _)| p == "tools-1"))
        .then_some(())
    });

    // ---- the API server goes away: traffic goes on ----
    lab.api.stop();
    for _ in 0..3 {
        assert!(
            ping(&backend2, backend1.v4, 3),
            "forwarding stopped with the API server down"
        );
        assert!(ping(&frontend1, backend1.v4, 2), "the policy path stopped");
    }
    // ---- it returns (a restart, state kept), then history is compacted (410 Gone) ----
    lab.api.restart(Restart::KeepState).unwrap();
    lab.api.drop_watches();
    lab.api.compact();
    let pod3 = lab.res.dir.join("pod3.yaml");
    write(
        &pod3,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: backend-3, namespace: team-blue, labels: \
         {tier: backend}}\nspec: {nodeName: node-b, containers: [{name: app, image: \
         registry.k8s.io/pause:3.10}]}\n",
    );
    lab.k(&["apply", "-f", pod3.to_str().unwrap()]);
    // The watches converge: the new pod is bound (its ADD waits for the watch) and reachable.
    let backend3 = lab.add_pod("team-blue", "backend-3");
    assert!(in_subnet(backend3.v4, "10.40.0.0/16"), "{}", backend3.v4);
    reachable(&backend2, backend3.v4);
    reachable(&frontend1, backend3.v4);
    assert!(endpoints(&lab, "team-blue")
        .iter()
        .any(|(p, n)| p == "backend-3" && n == "node-b"));
    for c in lab.controls.iter_mut().flatten() {
        assert!(c.try_wait().is_none(), "{}: {}", c.name, c.log_tail(30));
    }
}
