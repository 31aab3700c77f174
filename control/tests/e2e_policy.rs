//! End to end, connection tracking on this machine (root): two standalone nodes as
//! `tests/e2e.rs` builds them (`e2e_support::standalone`), one l3 network `apps`, pods as
//! network namespaces made through `lace-cni`, every pod running a small server (TCP 8080 and
//! 9090, UDP 5353 and 5354) that greets each connection with its name and the address it sees
//! the client at, and echoes. Real TCP and UDP connections between the pods show:
//!
//! - **NetworkPolicy** (bound to `apps` by a NetworkBindingPolicy with `matchKind:
//!   networkpolicy`): the pods it selects take exactly what its rule allows — pods labelled
//!   `role: client` of its namespace, on the named port `http` (TCP 8080) and UDP 5353 — on one
//!   node and across nodes; another port, another pod, a `role: client` pod of another
//!   namespace and UDP to another port are dropped (`policy-denied` counted); pods no policy
//!   selects take everything;
//! - **ClusterIP Service** (`x/web`, named target port): TCP to the ClusterIP reaches every
//!   backend (on both nodes), the backend sees the client's own address, the reply comes back
//!   from the ClusterIP (the connection is made to it), UDP too; the backends' policy applies
//!   through the Service;
//! - **sessionAffinity: ClientIP** (`x/web-sticky`): every connection of one client lands on
//!   one backend;
//! - **drain**: a backend whose labels stop matching the selector and one deleted through
//!   `lace-cni DEL` take no new connections (all go to the remaining one) while the relabelled
//!   one's established connection goes on;
//! - **revoke on narrow**: an established connection (same node and across nodes) is cut when the
//!   policy is rewritten to no longer allow it — its next data never reaches the server, and the
//!   forwarder counts `policy-revoked`;
//! - **no backend**: once the last backend is deleted the Service rejects TCP and UDP (refused,
//!   `service-unavailable` counted), never blackholes.
//!
//! A second cluster shows what pods of a real cluster lean on:
//!
//! - **cluster DNS**: a real DNS server (dnsmasq) in a pod behind a ClusterIP Service (port 53,
//!   UDP and TCP) answers a pod on the other node resolving a name through the ClusterIP over
//!   UDP and over TCP;
//! - **hairpin**: a pod reaches itself through its own Service, and sees the connection come
//!   from the Service's address;
//! - **terminating backends**: a Service whose EndpointSlice holds only a serving, terminating
//!   endpoint (and one that is not serving) still serves, from that endpoint only (KEP-1669);
//! - **`internalTrafficPolicy: Local`**: a pod on the backend's node reaches it through the
//!   ClusterIP; a pod on the other node, where the Service has no backend, gets no answer and
//!   its forwarder counts `no-local-endpoint` (dropped, as kube-proxy drops it).
//!
//! Needs root and host tools: `#[ignore]`d, run with `--include-ignored` (as `.ci/run` does); a
//! missing prerequisite then fails the test, named with what provides it.

mod e2e_support;

use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use e2e_support::standalone::*;
use e2e_support::*;
use lace_prereq::program;
use lace_shared::status::DropReason;

/// The Services' ClusterIPs (outside the network's subnet, as standalone manifests carry them).
const WEB_VIP: &str = "10.96.0.20";
const STICKY_VIP: &str = "10.96.0.21";

/// The network every cluster of this file runs on (`cluster` writes it).
const APPS: &str = r#"
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata: {name: apps}
spec:
  type: l3
  ipv4Subnet: {prefix: 10.60.0.0/16, hostLocalPrefixLength: 24}
  ipv6Subnet: {prefix: "fd60::/48", hostLocalPrefixLength: 64}
"#;

const BASE: &str = r#"
# Pods, Services and NetworkPolicies all on apps.
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata: {name: apps}
spec:
  matchKind: [pod, service, networkpolicy]
  rules:
  - network: apps
---
apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {team: x}}
---
apiVersion: v1
kind: Namespace
metadata: {name: y, labels: {team: y}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: x}
spec:
  clusterIP: 10.96.0.20
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: http, protocol: TCP}
  - {name: dns, port: 53, targetPort: 5353, protocol: UDP}
---
apiVersion: v1
kind: Service
metadata: {name: web-sticky, namespace: x}
spec:
  clusterIP: 10.96.0.21
  selector: {app: web}
  sessionAffinity: ClientIP
  ports:
  - {port: 80, targetPort: 8080, protocol: TCP}
"#;

/// `web` pods take TCP on their `http` port and UDP 5353 from `role: client` pods of x only.
fn policy(client_role: &str) -> String {
    format!(
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: web-ingress, namespace: x}}
spec:
  podSelector: {{matchLabels: {{app: web}}}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: {{matchLabels: {{role: {client_role}}}}}
    ports:
    - {{protocol: TCP, port: http}}
    - {{protocol: UDP, port: 5353}}
"#
    )
}

fn pod_manifest(namespace: &str, name: &str, node: usize, labels: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}, labels: {{{labels}}}}}
spec:
  nodeName: {node}
  containers:
  - name: app
    image: registry.k8s.io/pause:3.10
    ports:
    - {{name: http, containerPort: 8080, protocol: TCP}}
"#,
        node = NODES[node].0
    )
}

/// Every pod's server: greets each TCP connection with "<name> <client address>", then echoes
/// each line as "<name> <line>"; answers each UDP datagram with "<name> <client address>
/// <datagram>"; logs every line and datagram it receives as "got <port> <client> <data>".
const SERVER: &str = r#"
import socket, sys, threading
name = sys.argv[1]
def conn(c, port, peer):
    c.sendall(("%s %s\n" % (name, peer)).encode())
    for line in c.makefile("rb"):
        line = line.decode().strip()
        print("got %d %s %s" % (port, peer, line), flush=True)
        c.sendall(("%s %s\n" % (name, line)).encode())
def tcp(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(64)
    while True:
        c, peer = s.accept()
        threading.Thread(target=conn, args=(c, port, peer[0]), daemon=True).start()
def udp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    while True:
        d, peer = s.recvfrom(512)
        print("got %d %s %s" % (port, peer[0], d.decode()), flush=True)
        s.sendto(("%s %s %s" % (name, peer[0], d.decode())).encode(), peer)
ts = [threading.Thread(target=f, args=(p,), daemon=True)
      for f, p in [(tcp, 8080), (tcp, 9090), (udp, 5353), (udp, 5354)]]
for t in ts:
    t.start()
print("ready", flush=True)
for t in ts:
    t.join()
"#;

/// One connection: `probe.py tcp|udp HOST PORT`. Prints "<server name> <address the server saw
/// the client at>" after a full exchange (TCP: greeting, a line echoed; UDP: a datagram answered
/// on a connected socket, so only the address connected to can answer); exit 3 when nothing
/// answers within 3 s, 4 when refused, 5 when unreachable (an ICMP unreachable other than port
/// unreachable: e.g. a deleted pod's address while the tables still name it).
const PROBE: &str = r#"
import socket, sys
proto, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    if proto == "tcp":
        c = socket.create_connection((host, port), timeout=3)
        f = c.makefile("rb")
        greeting = f.readline().decode().split()
        c.sendall(b"ping\n")
        echo = f.readline().decode().strip()
        if echo != "%s ping" % greeting[0]:
            sys.exit("bad echo %r after greeting %r" % (echo, greeting))
        print(greeting[0], greeting[1])
    else:
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        c.settimeout(3)
        c.connect((host, port))
        c.send(b"ping")
        name, seen, data = c.recv(512).decode().split()
        if data != "ping":
            sys.exit("bad answer %r" % data)
        print(name, seen)
except socket.timeout:
    print("timeout")
    sys.exit(3)
except ConnectionRefusedError:
    print("refused")
    sys.exit(4)
except OSError as e:
    print("unreachable", e.errno)
    sys.exit(5)
"#;

/// A held connection: `hold.py HOST PORT WANT TRIGGER`. Connects until the greeting names WANT
/// ("-": any), sends "before", prints "before <echo>"; once the file TRIGGER exists sends
/// "after" and prints "after <echo>", "after none" (nothing within 5 s) or "after closed".
const HOLD: &str = r#"
import os, socket, sys, time
host, port, want, trigger = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
for _ in range(64):
    c = socket.create_connection((host, port), timeout=10)
    f = c.makefile("rb")
    name = f.readline().decode().split()[0]
    if want in ("-", name):
        break
    c.close()
else:
    sys.exit("no connection to %s" % want)
c.sendall(b"before\n")
print("before", f.readline().decode().strip(), flush=True)
while not os.path.exists(trigger):
    time.sleep(0.05)
c.sendall(b"after\n")
c.settimeout(5)
try:
    line = f.readline().decode().strip()
    print("after", line or "closed", flush=True)
except socket.timeout:
    print("after none", flush=True)
except OSError as e:
    print("after closed", e, flush=True)
"#;

#[derive(Debug, PartialEq, Eq)]
enum Probe {
    /// The server's name and the address it saw the client at.
    Answered(String, IpAddr),
    /// Nothing came back.
    Timeout,
    /// Refused (TCP RST, ICMP port unreachable).
    Refused,
    /// Host or network unreachable (ICMP).
    Unreachable,
}

/// The scripts the pods run, written in the lab's directory.
struct Scripts {
    probe: PathBuf,
    hold: PathBuf,
    server: PathBuf,
    resolve: PathBuf,
}

/// A pod of a cluster: namespace, name, node, labels.
type PodSpec = (&'static str, &'static str, usize, &'static str);

/// Two standalone nodes over the examples' `nodes.yaml`, the network [`APPS`] and the manifest
/// `files` (name, text), with `pods` written as Pod manifests and the scripts in place;
/// started.
fn cluster(files: &[(&str, &str)], pods: &[PodSpec]) -> (Lab, Scripts) {
    let res = Resources::new();
    let manifests = res.dir.join("manifests");
    fs::create_dir_all(&manifests).unwrap();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    fs::copy(examples.join("nodes.yaml"), manifests.join("nodes.yaml")).unwrap();
    write(&manifests.join("apps.yaml"), APPS);
    for (name, text) in files {
        write(&manifests.join(name), text);
    }
    for &(namespace, name, node, labels) in pods {
        write(
            &manifests.join(format!("pod-{name}.yaml")),
            &pod_manifest(namespace, name, node, labels),
        );
    }
    let scripts = Scripts {
        probe: res.dir.join("probe.py"),
        hold: res.dir.join("hold.py"),
        server: res.dir.join("server.py"),
        resolve: res.dir.join("resolve.py"),
    };
    for (path, text) in [
        (&scripts.probe, PROBE),
        (&scripts.hold, HOLD),
        (&scripts.server, SERVER),
        (&scripts.resolve, RESOLVE),
    ] {
        write(path, text);
    }
    let mut lab = Lab::new(res, manifests);
    lab.start();
    (lab, scripts)
}

/// Starts the pods' server ([`SERVER`]) in `p` and waits until it listens.
fn serve(lab: &Lab, s: &Scripts, p: &Pod) -> Proc {
    let argv = [
        "ip",
        "netns",
        "exec",
        &p.ns,
        "python3",
        &s.server.display().to_string(),
        p.name,
    ]
    .map(String::from);
    let log = lab.res.dir.join(format!("server-{}.log", p.name));
    let srv = Proc::spawn(&format!("server in {}", p.name), &argv, log);
    wait_for(&format!("{} ready", srv.name), WAIT, || {
        printed(&srv, "ready")
    });
    srv
}

fn probe(s: &Scripts, from: &Pod, proto: &str, to: &str, port: u16) -> Probe {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &from.ns, "python3"])
        .arg(&s.probe)
        .args([proto, to, &port.to_string()])
        .output()
        .expect("run the probe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    match out.status.code() {
        Some(0) => {
            let mut w = stdout.split_whitespace();
            let name = w.next().expect("server name").to_owned();
            let seen = w.next().expect("client address").parse().unwrap();
            Probe::Answered(name, seen)
        }
        Some(3) => Probe::Timeout,
        Some(4) => Probe::Refused,
        Some(5) => Probe::Unreachable,
        _ => panic!(
            "probe {proto} {} -> {to}:{port}: {}\n{stdout}{}",
            from.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Waits until `from` reaches `to:port` and it answers as `server`, seeing `from`'s address.
fn allowed(s: &Scripts, from: &Pod, proto: &str, to: &Pod, port: u16) {
    let what = format!("{proto} {} -> {}:{port}", from.name, to.name);
    wait_for(&what, WAIT, || {
        match probe(s, from, proto, &to.v4.to_string(), port) {
            Probe::Answered(name, seen) => {
                assert_eq!((name.as_str(), seen), (to.name, from.v4), "{what}");
                Some(())
            }
            Probe::Timeout | Probe::Refused | Probe::Unreachable => None,
        }
    });
}

/// Total of a drop counter over both nodes.
fn drops(lab: &Lab, reason: DropReason) -> u64 {
    (0..NODES.len()).map(|k| lab.drops(k, reason)).sum()
}

/// `from` cannot reach `to:port` (it gets no answer) and the forwarders count the drop as
/// `policy-denied`.
fn denied(lab: &Lab, s: &Scripts, from: &Pod, proto: &str, to: &str, port: u16) {
    let before = drops(lab, DropReason::PolicyDenied);
    assert_eq!(
        probe(s, from, proto, to, port),
        Probe::Timeout,
        "{proto} {} -> {to}:{port} must be dropped by policy",
        from.name
    );
    let after = drops(lab, DropReason::PolicyDenied);
    assert!(
        after > before,
        "{proto} {} -> {to}:{port}: no policy-denied drop counted ({before} -> {after})",
        from.name
    );
}

/// Which backends answer `count` TCP connections from `from` to `vip:80`, checking each saw
/// the client's own address.
fn backends(s: &Scripts, from: &Pod, vip: &str, count: usize) -> Vec<String> {
    (0..count)
        .map(|_| match probe(s, from, "tcp", vip, 80) {
            Probe::Answered(name, seen) => {
                assert_eq!(
                    seen, from.v4,
                    "{vip}: the backend sees the client's address"
                );
                name
            }
            // Named so a wait retries and an assertion shows it (a removed backend may still
            // be picked until the tables drop it: its address is unreachable then).
            p => format!("{p:?}"),
        })
        .collect()
}

/// A line a process printed, starting with `prefix` (its rest).
fn printed(p: &Proc, prefix: &str) -> Option<String> {
    fs::read_to_string(&p.log)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(prefix).map(str::to_owned))
}

fn hold(lab: &Lab, s: &Scripts, from: &Pod, to: &str, port: u16, want: &str) -> (Proc, PathBuf) {
    let trigger = lab
        .res
        .dir
        .join(format!("trigger-{}-{to}-{port}", from.name));
    let argv = [
        "ip",
        "netns",
        "exec",
        &from.ns,
        "python3",
        &s.hold.display().to_string(),
        to,
        &port.to_string(),
        want,
        &trigger.display().to_string(),
    ]
    .map(String::from);
    let log = lab
        .res
        .dir
        .join(format!("hold-{}-{to}-{port}.log", from.name));
    let p = Proc::spawn(
        &format!("connection {} -> {to}:{port}", from.name),
        &argv,
        log,
    );
    let before = wait_for(&format!("{} established", p.name), WAIT, || {
        printed(&p, "before ")
    });
    let server = if want == "-" { "" } else { want };
    assert!(
        before.starts_with(server) && before.ends_with(" before"),
        "{}: {before}",
        p.name
    );
    (p, trigger)
}

/// Lets a held connection send "after"; returns what it got back.
fn release(p: &Proc, trigger: &Path) -> String {
    write(trigger, "");
    wait_for(&format!("{} after", p.name), WAIT, || printed(p, "after "))
}

#[test]
#[ignore = "end-to-end: needs root, ip, ping, ethtool, python3; run with --include-ignored"]
fn policy_and_services_end_to_end() {
    let _serial = serial();
    prerequisites([program("python3", "python3")]);
    let pods: [PodSpec; 8] = [
        ("x", "web-a", 0, "app: web"),
        ("x", "web-b", 1, "app: web"),
        ("x", "web-c", 1, "app: web"),
        ("x", "client-a", 0, "role: client"),
        ("x", "client-b", 1, "role: client"),
        ("x", "other-a", 0, "role: other"),
        ("x", "other-b", 1, "role: other"),
        ("y", "client-y", 1, "role: client"),
    ];
    let (mut lab, scripts) = cluster(
        &[("base.yaml", BASE), ("policy.yaml", &policy("client"))],
        &pods,
    );
    let mut servers = Vec::new();
    let mut pod = std::collections::BTreeMap::new();
    for (namespace, name, node, _) in pods {
        let p = lab.add_pod(node, namespace, name);
        servers.push(serve(&lab, &scripts, &p));
        pod.insert(name, p);
    }
    let [web_a, web_b, web_c, client_a, client_b, other_a, other_b, client_y] = [
        "web-a", "web-b", "web-c", "client-a", "client-b", "other-a", "other-b", "client-y",
    ]
    .map(|n| pod[n].clone());
    let s = &scripts;

    // ---- NetworkPolicy: allowed exactly as it says, on one node and across nodes ----
    allowed(s, &client_a, "tcp", &web_a, 8080); // same node
    allowed(s, &client_b, "tcp", &web_a, 8080); // across nodes
    allowed(s, &client_a, "tcp", &web_b, 8080);
    allowed(s, &client_a, "udp", &web_a, 5353);
    allowed(s, &client_b, "udp", &web_a, 5353);
    // Pods no policy selects take everything, any port.
    allowed(s, &other_a, "tcp", &client_b, 9090);
    allowed(s, &other_b, "udp", &client_a, 5354);
    allowed(s, &client_y, "tcp", &other_a, 8080);
    // … and what the policy does not allow is dropped.
    let web_a4 = web_a.v4.to_string();
    denied(&lab, s, &client_a, "tcp", &web_a4, 9090); // another port, same node
    denied(&lab, s, &client_b, "tcp", &web_a4, 9090); // another port, across nodes
    denied(&lab, s, &other_a, "tcp", &web_a4, 8080); // another pod, same node
    denied(&lab, s, &other_b, "tcp", &web_a4, 8080); // another pod, across nodes
    denied(&lab, s, &client_y, "tcp", &web_a4, 8080); // role: client of namespace y
    denied(&lab, s, &other_b, "udp", &web_a4, 5353);
    denied(&lab, s, &client_a, "udp", &web_a4, 5354);

    // ---- ClusterIP Service: every backend, the client's address kept, replies from the VIP ----
    let webs = ["web-a", "web-b", "web-c"].map(String::from);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..64 {
        seen.extend(backends(s, &client_a, WEB_VIP, 1));
        if seen.len() == webs.len() {
            break;
        }
    }
    assert_eq!(
        seen,
        webs.clone().into(),
        "64 connections to {WEB_VIP}:80 from client-a reach every backend"
    );
    let from_b = backends(s, &client_b, WEB_VIP, 4);
    assert!(from_b.iter().all(|b| webs.contains(b)), "{from_b:?}");
    match probe(s, &client_b, "udp", WEB_VIP, 53) {
        Probe::Answered(name, seen) => {
            assert!(webs.contains(&name), "{name}");
            assert_eq!(seen, client_b.v4);
        }
        p => panic!("udp client-b -> {WEB_VIP}:53: {p:?}"),
    }
    // The backends' policy holds through the Service.
    denied(&lab, s, &other_a, "tcp", WEB_VIP, 80);
    denied(&lab, s, &client_y, "tcp", WEB_VIP, 80);

    // ---- sessionAffinity: ClientIP: one backend per client ----
    for client in [&client_a, &client_b] {
        let got = backends(s, client, STICKY_VIP, 12);
        assert!(
            got.iter().all(|b| *b == got[0]),
            "{}: every connection to {STICKY_VIP} on one backend: {got:?}",
            client.name
        );
    }

    // ---- drain: web-b stops matching the selector (its open connection goes on), web-c is
    //      deleted (lace-cni DEL); new connections all go to web-a ----
    let (drain, drain_trigger) = hold(&lab, s, &client_a, WEB_VIP, 80, "web-b");
    write(
        &lab.manifests.join("pod-web-b.yaml"),
        &pod_manifest("x", "web-b", 1, "app: web-retired"),
    );
    lab.cni(web_c.node, "DEL", &web_c)
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("web-b out of the Service", WAIT, || {
        backends(s, &client_a, WEB_VIP, 8)
            .iter()
            .all(|b| b == "web-a")
            .then_some(())
    });
    let got = backends(s, &client_a, WEB_VIP, 16);
    assert!(
        got.iter().all(|b| b == "web-a"),
        "new connections avoid the removed backend: {got:?}"
    );
    assert_eq!(
        release(&drain, &drain_trigger),
        "web-b after",
        "the connection to the removed backend goes on"
    );

    // ---- revoke on narrow: established connections cut when the policy narrows ----
    let (same, same_trigger) = hold(&lab, s, &client_a, &web_a4, 8080, "web-a");
    let (across, across_trigger) = hold(&lab, s, &client_b, &web_a4, 8080, "web-a");
    let revoked = lab.drops(web_a.node, DropReason::PolicyRevoked);
    write(&lab.manifests.join("policy.yaml"), &policy("client-v2"));
    // In force once a new connection is dropped.
    wait_for("the narrowed policy in force", WAIT, || {
        (probe(s, &client_a, "tcp", &web_a4, 8080) == Probe::Timeout).then_some(())
    });
    assert_eq!(release(&same, &same_trigger), "none", "{}", same.name);
    assert_eq!(release(&across, &across_trigger), "none", "{}", across.name);
    assert!(
        lab.drops(web_a.node, DropReason::PolicyRevoked) >= revoked + 2,
        "both connections counted policy-revoked on web-a's node"
    );
    let web_a_log = fs::read_to_string(&servers[0].log).unwrap();
    assert!(
        !web_a_log.contains(" after"),
        "web-a received data after the narrowing:\n{web_a_log}"
    );
    // Other traffic is untouched.
    allowed(s, &other_a, "tcp", &client_b, 9090);

    // ---- the last backend deleted: the Service rejects (never blackholes) ----
    lab.cni(web_a.node, "DEL", &web_a)
        .unwrap_or_else(|e| panic!("{e}"));
    let unavailable = drops(&lab, DropReason::ServiceUnavailable);
    wait_for("web without backends", WAIT, || {
        (probe(s, &client_b, "tcp", WEB_VIP, 80) == Probe::Refused).then_some(())
    });
    assert_eq!(probe(s, &client_a, "udp", WEB_VIP, 53), Probe::Refused);
    assert!(
        drops(&lab, DropReason::ServiceUnavailable) >= unavailable + 2,
        "rejected connections counted service-unavailable"
    );
}

/// The DNS test's Services and their ClusterIPs.
const DNS_VIP: &str = "10.96.0.10";
const HAIRPIN_VIP: &str = "10.96.0.30";
const DRAINING_VIP: &str = "10.96.0.31";
/// `x/web-local`: web's pods, `internalTrafficPolicy: Local`.
const LOCAL_VIP: &str = "10.96.0.32";
/// The name the DNS server answers, and its address.
const WEB_NAME: &str = "web.x.svc.cluster.local";

const CLUSTER: &str = r#"
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata: {name: apps}
spec:
  matchKind: [pod, service]
  rules:
  - network: apps
---
apiVersion: v1
kind: Namespace
metadata: {name: x}
---
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: x}
spec:
  clusterIP: 10.96.0.10
  selector: {app: dns}
  ports:
  - {name: dns, port: 53, targetPort: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: 53, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: x}
spec:
  clusterIP: 10.96.0.30
  selector: {app: web}
  ports:
  - {port: 80, targetPort: 8080, protocol: TCP}
---
# No selector: its backends are the EndpointSlice the test writes once the pods have addresses.
apiVersion: v1
kind: Service
metadata: {name: draining, namespace: x}
spec:
  clusterIP: 10.96.0.31
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: web-local, namespace: x}
spec:
  clusterIP: 10.96.0.32
  selector: {app: web}
  internalTrafficPolicy: Local
  ports:
  - {port: 80, targetPort: 8080, protocol: TCP}
"#;

/// The `draining` Service's slice, as the EndpointSlice controller writes it while its pods
/// terminate: `serving` is still serving, `gone` no longer is.
fn draining_slice(serving: IpAddr, gone: IpAddr) -> String {
    format!(
        r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: draining-1
  namespace: x
  labels: {{kubernetes.io/service-name: draining}}
addressType: IPv4
ports:
- {{name: http, port: 8080, protocol: TCP}}
endpoints:
- addresses: ["{serving}"]
  conditions: {{ready: false, serving: true, terminating: true}}
- addresses: ["{gone}"]
  conditions: {{ready: false, serving: false, terminating: true}}
"#
    )
}

/// `resolve.py udp|tcp SERVER NAME`: one A query; prints each address of the answer. Exit 3
/// when nothing answers within 3 s, 4 when refused, 6 when the answer is not a valid answer
/// to the query (its id, flags or counts).
const RESOLVE: &str = r#"
import random, socket, struct, sys
proto, server, name = sys.argv[1], sys.argv[2], sys.argv[3]
qid = random.randrange(1 << 16)
query = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
query += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
query += struct.pack(">HH", 1, 1)
def exact(s, n):
    b = b""
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            sys.exit(6)
        b += d
    return b
try:
    if proto == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        s.connect((server, 53))
        s.send(query)
        r = s.recv(4096)
    else:
        s = socket.create_connection((server, 53), timeout=3)
        s.sendall(struct.pack(">H", len(query)) + query)
        r = exact(s, struct.unpack(">H", exact(s, 2))[0])
except socket.timeout:
    print("timeout"); sys.exit(3)
except ConnectionRefusedError:
    print("refused"); sys.exit(4)
rid, flags, qd, an = struct.unpack(">HHHH", r[:8])
if rid != qid or not flags & 0x8000 or flags & 0xF != 0 or qd != 1:
    print("bad answer", rid, qid, hex(flags), qd); sys.exit(6)
def skip_name(o):
    while r[o] != 0:
        if r[o] & 0xC0 == 0xC0:
            return o + 2
        o += 1 + r[o]
    return o + 1
o = skip_name(12) + 4
for _ in range(an):
    o = skip_name(o)
    rtype, rclass, ttl, size = struct.unpack(">HHIH", r[o:o + 10])
    o += 10
    if rtype == 1 and size == 4:
        print(socket.inet_ntoa(r[o:o + 4]))
    o += size
"#;

/// Resolves `name` through `server` over `proto` from `from`: the addresses, or why not.
fn resolve(
    script: &Path,
    from: &Pod,
    proto: &str,
    server: &str,
    name: &str,
) -> Result<Vec<String>, String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &from.ns, "python3"])
        .arg(script)
        .args([proto, server, name])
        .output()
        .expect("run the resolver");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    match out.status.code() {
        Some(0) => Ok(stdout.split_whitespace().map(str::to_owned).collect()),
        Some(3 | 4) => Err(stdout),
        _ => panic!(
            "resolve {proto} {name} via {server} from {}: {}\n{stdout}{}",
            from.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[test]
#[ignore = "end-to-end: needs root, ip, ping, ethtool, python3, dnsmasq; run with --include-ignored"]
fn cluster_dns_hairpin_terminating_and_node_local_backends_end_to_end() {
    let _serial = serial();
    prerequisites([
        program("python3", "python3"),
        program("dnsmasq", "dnsmasq-base"),
    ]);
    let pods: [PodSpec; 5] = [
        ("x", "dns-a", 0, "app: dns"),
        ("x", "web-a", 0, "app: web"),
        ("x", "client-b", 1, "role: client"),
        ("x", "old-b", 1, "role: old"),
        ("x", "gone-a", 0, "role: old"),
    ];
    let (mut lab, scripts) = cluster(&[("cluster.yaml", CLUSTER)], &pods);
    let mut running = Vec::new();
    let mut pod = std::collections::BTreeMap::new();
    for (_, name, node, _) in pods {
        let p = lab.add_pod(node, "x", name);
        let proc = if name == "dns-a" {
            // A real DNS server, as cluster DNS is one: it answers the Service's name with its
            // ClusterIP, over UDP and TCP, and logs every query.
            let argv = [
                "ip",
                "netns",
                "exec",
                &p.ns,
                "dnsmasq",
                "--keep-in-foreground",
                "--log-facility=-",
                "--log-queries",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--pid-file=",
                "--user=root",
                "--port=53",
                &format!("--address=/{WEB_NAME}/{HAIRPIN_VIP}"),
            ]
            .map(String::from);
            let log = lab.res.dir.join("dnsmasq.log");
            Proc::spawn("dnsmasq in dns-a", &argv, log)
        } else {
            serve(&lab, &scripts, &p)
        };
        running.push(proc);
        pod.insert(name, p);
    }
    let [web_a, client_b, old_b, gone_a] =
        ["web-a", "client-b", "old-b", "gone-a"].map(|n| pod[n].clone());
    let s = &scripts;

    // ---- cluster DNS: a pod on the other node resolves through the ClusterIP, UDP and TCP ----
    for proto in ["udp", "tcp"] {
        let got = wait_for(
            &format!("{WEB_NAME} over {proto} via {DNS_VIP}"),
            WAIT,
            || resolve(&scripts.resolve, &client_b, proto, DNS_VIP, WEB_NAME).ok(),
        );
        assert_eq!(got, [HAIRPIN_VIP], "{proto}: the DNS answer");
    }
    let dns_log = fs::read_to_string(&running[0].log).unwrap_or_default();
    assert!(
        dns_log.contains(&format!("query[A] {WEB_NAME} from {}", client_b.v4)),
        "dnsmasq saw the query from client-b's own address:\n{dns_log}"
    );

    // ---- hairpin: web-a through its own Service reaches itself, from the Service address ----
    let vip: IpAddr = HAIRPIN_VIP.parse().unwrap();
    for _ in 0..4 {
        assert_eq!(
            probe(s, &web_a, "tcp", HAIRPIN_VIP, 80),
            Probe::Answered("web-a".into(), vip),
            "web-a -> {HAIRPIN_VIP}:80 (its own Service)"
        );
    }

    // ---- terminating backends: only the serving one, while no endpoint is ready ----
    write(
        &lab.manifests.join("slice-draining.yaml"),
        &draining_slice(old_b.v4, gone_a.v4),
    );
    let first = wait_for("the draining Service programmed", WAIT, || {
        match probe(s, &client_b, "tcp", DRAINING_VIP, 80) {
            Probe::Answered(name, seen) => Some((name, seen)),
            _ => None,
        }
    });
    assert_eq!(first, ("old-b".to_string(), client_b.v4));
    let got = backends(s, &client_b, DRAINING_VIP, 12);
    assert!(
        got.iter().all(|b| b == "old-b"),
        "only the serving terminating endpoint takes connections: {got:?}"
    );
    let gone_log = fs::read_to_string(&running[4].log).unwrap_or_default();
    assert!(
        !gone_log.contains("got 8080"),
        "the endpoint that no longer serves got a connection:\n{gone_log}"
    );

    // ---- internalTrafficPolicy: Local: web-a's node only ----
    let got = wait_for("web-local from web-a's node", WAIT, || {
        match probe(s, &gone_a, "tcp", LOCAL_VIP, 80) {
            Probe::Answered(name, seen) => Some((name, seen)),
            _ => None,
        }
    });
    assert_eq!(got, ("web-a".to_string(), gone_a.v4));
    let before = lab.drops(client_b.node, DropReason::NoLocalEndpoint);
    assert_eq!(
        probe(s, &client_b, "tcp", LOCAL_VIP, 80),
        Probe::Timeout,
        "no backend on client-b's node: dropped, neither served nor refused"
    );
    assert!(
        lab.drops(client_b.node, DropReason::NoLocalEndpoint) > before,
        "client-b's forwarder counted no-local-endpoint"
    );

    // ---- each control's /metrics ----
    let m = lab.control_metrics(client_b.node);
    for line in [
        "lace_control_objects{kind=\"Service\"} 4",
        "lace_control_endpoints 2",
        "lace_control_cni_requests_total{request=\"Attach\",result=\"ok\"} 2",
        "lace_control_publish_errors_total 0",
        "# EOF",
    ] {
        assert!(m.contains(line), "{line}:\n{m}");
    }
    let published = m
        .lines()
        .find_map(|l| l.strip_prefix("lace_control_publish_seconds_count "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(published > Some(0), "publications timed:\n{m}");
}
