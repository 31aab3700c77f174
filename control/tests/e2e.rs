//! End to end on this machine (root): two node namespaces on a bridge underlay, a
//! `lace-forwarder` and a `lace-control` per node (both controls on one temp copy of
//! deploy/examples and one state file), pods made as network namespaces through `lace-cni`
//! exactly as kubelet calls it. Shows: CEL binding puts pods on the right network; pods reach
//! each other across nodes; pods of the l2 network `storage` get subnet-length addresses and
//! reach each other on one node and across nodes (ARP/NDP answered with the peer's MAC, TCP),
//! isolated from the l3 networks; frontend cannot reach backend until later/routing.yaml is copied
//! in; a second ADD of an existing interface is refused (CNI spec) and changes nothing, and an
//! ADD retried after the pod's interface vanished rebuilds the forwarder's port so traffic
//! flows again; forwarding survives a killed lace-control, and after its restart nothing is
//! reallocated; a restarted forwarder forwards again from the shared tables.
//!
//! Without root: prints "skipped: needs root" (fails under CI=true).

mod e2e_support;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use e2e_support::*;
use ipnet::IpNet;
use lace_shared::status::{status_path, RunState, StatusReader};
use nix::sys::signal::Signal;
use serde_json::json;

const NODES: [(&str, &str); 2] = [("node-a", "fd00:100::a"), ("node-b", "fd00:100::b")];

/// Processes first (declared first: dropped first), then namespaces and files.
struct Lab {
    controls: Vec<Option<Proc>>,
    forwarders: Vec<Option<Proc>>,
    res: Resources,
    node_ns: Vec<String>,
    manifests: PathBuf,
    fwd_bin: PathBuf,
}

#[derive(Debug, Clone)]
struct Pod {
    ns: String,
    node: usize,
    namespace: &'static str,
    name: &'static str,
    container: String,
    v4: IpAddr,
    v6: IpAddr,
}

impl Lab {
    fn tables_name(&self, k: usize) -> String {
        format!("{}-{}", self.res.tag, &NODES[k].0[5..])
    }

    fn socket(&self, k: usize) -> PathBuf {
        self.res.dir.join(format!("control-{}.sock", NODES[k].0))
    }

    fn start_control(&mut self, k: usize) {
        let argv: Vec<String> = vec![
            env!("CARGO_BIN_EXE_lace-control").into(),
            "run".into(),
            "--node".into(),
            NODES[k].0.into(),
            "--manifests".into(),
            self.manifests.display().to_string(),
            "--socket".into(),
            self.socket(k).display().to_string(),
            "--tables-dir".into(),
            SHM.into(),
            "--tables-name".into(),
            self.tables_name(k),
            "--attach-timeout-ms".into(),
            "30000".into(),
        ];
        let log = self.res.dir.join(format!("control-{}.log", NODES[k].0));
        let p = Proc::spawn(&format!("lace-control {}", NODES[k].0), &argv, log);
        self.controls[k] = Some(p);
        let sock = self.socket(k);
        let name = NODES[k].0;
        let ctl = self.controls[k].as_mut().unwrap();
        wait_for(&format!("lace-control {name} ready"), WAIT, || {
            if let Some(s) = ctl.try_wait() {
                panic!("lace-control {name} exited ({s}):\n{}", ctl.log_tail(40));
            }
            let r = try_control_request(&sock, &json!({"op": "status"})).ok()?;
            (r["result"] == "ok").then_some(())
        });
    }

    fn start_forwarder(&mut self, k: usize) {
        let cfg = self.res.dir.join(format!("forwarder-{}.toml", NODES[k].0));
        write(
            &cfg,
            &format!(
                r#"name = "{name}"
tables_dir = "{SHM}"

[eal]
memory = "no-huge"
memory_mb = 256

[uplink]
device = "ul"
address = "{ul}"
mtu = 1500

[srv6]
hop_limit = 64

[workers]
count = 1
polling = "adaptive"

[pods]
mechanism = "packet_socket"
"#,
                name = self.tables_name(k),
                ul = NODES[k].1
            ),
        );
        let argv: Vec<String> = vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.node_ns[k].clone(),
            self.fwd_bin.display().to_string(),
            "run".into(),
            "--config".into(),
            cfg.display().to_string(),
        ];
        let log = self.res.dir.join(format!("forwarder-{}.log", NODES[k].0));
        self.forwarders[k] = Some(Proc::spawn(
            &format!("lace-forwarder {}", NODES[k].0),
            &argv,
            log,
        ));
        let path = status_path(Path::new(SHM), &self.tables_name(k));
        let fwd = self.forwarders[k].as_mut().unwrap();
        wait_for(&format!("forwarder {} running", NODES[k].0), WAIT, || {
            if let Some(s) = fwd.try_wait() {
                panic!("forwarder exited ({s}):\n{}", fwd.log_tail(40));
            }
            let r = StatusReader::open(&path).ok()?;
            (r.alive() && r.state() == RunState::Running).then_some(())
        });
    }

    /// `lace-cni` with the CNI environment, run in node k's namespace as kubelet would.
    fn cni(&self, k: usize, command: &str, pod: &Pod) -> Result<serde_json::Value, String> {
        let config = json!({
            "cniVersion": "1.1.0",
            "name": "lace",
            "type": "lace-cni",
            "controlSocket": self.socket(k),
            "attachTimeoutMs": 40000,
        });
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.node_ns[k],
                env!("CARGO_BIN_EXE_lace-cni"),
            ])
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &pod.container)
            .env("CNI_NETNS", format!("/var/run/netns/{}", pod.ns))
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", "/opt/cni/bin")
            .env(
                "CNI_ARGS",
                format!(
                    "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
                    pod.namespace, pod.name
                ),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lace-cni");
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(config.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            return Err(format!(
                "lace-cni {command} {}/{}: {}\nstdout: {stdout}\nstderr: {}",
                pod.namespace,
                pod.name,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if stdout.trim().is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_str(&stdout).map_err(|e| format!("{stdout}: {e}"))
    }

    /// Makes a pod namespace and ADDs it through lace-cni on node k.
    fn add_pod(&mut self, k: usize, namespace: &'static str, name: &'static str) -> Pod {
        let ns = self.res.netns(&format!("p-{name}"));
        let mut pod = Pod {
            container: format!("{}-{name}", self.res.tag),
            ns,
            node: k,
            namespace,
            name,
            v4: IpAddr::from([0, 0, 0, 0]),
            v6: IpAddr::from([0u16; 8]),
        };
        let result = self.cni(k, "ADD", &pod).unwrap_or_else(|e| panic!("{e}"));
        for ip in result["ips"].as_array().expect("ips in the ADD result") {
            let net: IpNet = ip["address"].as_str().unwrap().parse().unwrap();
            match net.addr() {
                a @ IpAddr::V4(_) => pod.v4 = a,
                a @ IpAddr::V6(_) => pod.v6 = a,
            }
        }
        pod
    }
}

fn ping(from: &Pod, to: IpAddr, count: u32) -> bool {
    let c = count.to_string();
    let mut argv = vec![
        "ip", "netns", "exec", &from.ns, "ping", "-c", &c, "-i", "0.2", "-W", "1",
    ];
    if to.is_ipv6() {
        argv.push("-6");
    }
    let to = to.to_string();
    argv.push(&to);
    run_capture(&argv).is_ok()
}

fn reachable(from: &Pod, to: IpAddr) {
    wait_for(
        &format!("{} -> {to} ({}: ping)", from.name, from.ns),
        WAIT,
        || ping(from, to, 1).then_some(()),
    );
    assert!(
        ping(from, to, 3),
        "{} -> {to}: ping lost packets once reachable",
        from.name
    );
}

/// Five numbered UDP broadcasts from `from` to `bcast` (a broadcast address), with a listener
/// in each of `to` (logs in `dir`): every listener must receive each datagram exactly once
/// (head-end replication to the other node, local delivery once per member, nothing twice).
fn broadcast_once(dir: &Path, from: &Pod, to: &[&Pod], bcast: &str) {
    let listener = r#"
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7010))
print("ready", flush=True)
got, end = [], None
s.settimeout(0.5)
start = time.time()
# Until a little after the end marker (a late duplicate still counts), at most 20 s.
while time.time() - start < 20 and (end is None or time.time() - end < 1):
    try:
        d, _ = s.recvfrom(64)
    except socket.timeout:
        continue
    if d == b"end":
        end = end or time.time()
    else:
        got.append(d.decode())
print("got", " ".join(got), flush=True)
"#;
    // Killed and reaped on drop, also when an assertion below fails.
    let listeners: Vec<Proc> = to
        .iter()
        .map(|p| {
            let argv = ["ip", "netns", "exec", &p.ns, "python3", "-c", listener].map(String::from);
            let log = dir.join(format!("broadcast-{}.log", p.name));
            Proc::spawn(&format!("broadcast listener in {}", p.name), &argv, log)
        })
        .collect();
    let line = |p: &Proc, prefix: &str| {
        std::fs::read_to_string(&p.log)
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(prefix).map(str::to_owned))
    };
    for p in &listeners {
        wait_for(&format!("{} ready", p.name), WAIT, || line(p, "ready"));
    }
    let sender = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
for m in ["1", "2", "3", "4", "5", "end"]:
    s.sendto(m.encode(), (sys.argv[1], 7010))
"#;
    run_capture(&[
        "ip", "netns", "exec", &from.ns, "python3", "-c", sender, bcast,
    ])
    .expect("send the broadcasts");
    for p in &listeners {
        let got = wait_for(&format!("{} result", p.name), WAIT, || line(p, "got"));
        assert_eq!(
            got.trim(),
            "1 2 3 4 5",
            "{}: every broadcast from {} exactly once, in order",
            p.name,
            from.name
        );
    }
}

/// A TCP connection from `from` to `to` at `addr`: 64 KiB sent, echoed back, compared.
fn tcp_echo(from: &Pod, to: &Pod, addr: IpAddr) {
    let server = r#"
import socket
s = socket.socket(socket.AF_INET6 if ":" in "@HOST@" else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("@HOST@", 7007))
s.listen(1)
s.settimeout(30)
c, _ = s.accept()
c.settimeout(30)
got = b""
while len(got) < 65536:
    d = c.recv(65536)
    if not d:
        break
    got += d
c.sendall(got)
c.close()
"#
    .replace("@HOST@", &addr.to_string());
    let mut srv = Command::new("ip")
        .args(["netns", "exec", &to.ns, "python3", "-c", &server])
        .spawn()
        .expect("spawn the TCP server");
    let client = r#"
import socket, sys, time
data = bytes(range(256)) * 256
for _ in range(50):
    try:
        c = socket.create_connection(("@HOST@", 7007), timeout=10)
        break
    except OSError:
        time.sleep(0.2)
else:
    sys.exit("no connection")
c.sendall(data)
got = b""
while len(got) < len(data):
    d = c.recv(65536)
    if not d:
        break
    got += d
sys.exit(0 if got == data else "echo differs: %d bytes back" % len(got))
"#
    .replace("@HOST@", &addr.to_string());
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

fn check_ips(lab: &Lab, pod: &Pod) -> Vec<String> {
    let r = control_request(
        &lab.socket(pod.node),
        &json!({"op": "check", "containerId": pod.container, "ifname": "eth0",
                "podNamespace": pod.namespace, "podName": pod.name}),
    );
    assert_eq!(r["result"], "allocated", "CHECK {}: {r}", pod.name);
    r["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["address"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn two_nodes_end_to_end() {
    if !prerequisites() {
        return;
    }
    let fwd_bin = forwarder_bin();
    let mut res = Resources::new();
    let manifests = res.dir.join("manifests");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    copy_manifests(&examples, &manifests);

    // Underlay: a bridge in its own namespace; each node namespace has `ul` on it, IPv6 off
    // in the node (the forwarder is the node's only IPv6 host on the underlay).
    let u = res.netns("u");
    sysctl(
        &u,
        &[
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ],
    );
    ipn(&u, "link add br0 type bridge stp_state 0 mcast_snooping 0");
    ipn(&u, "link set br0 up");
    let mut node_ns = Vec::new();
    for (k, (name, _)) in NODES.iter().enumerate() {
        let ns = res.netns(&format!("n{}", &name[5..]));
        sysctl(
            &ns,
            &[
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
        );
        let port = format!("p{k}");
        sh(&[
            "ip", "link", "add", "name", "ul", "netns", &ns, "mtu", "1500", "type", "veth", "peer",
            "name", &port, "netns", &u, "mtu", "1500",
        ]);
        ipn(&u, &format!("link set dev {port} master br0"));
        ipn(&u, &format!("link set dev {port} up"));
        sysctl(&ns, &["net.ipv6.conf.ul.disable_ipv6=1"]);
        sh(&[
            "ip", "netns", "exec", &ns, "ethtool", "-K", "ul", "tx", "off", "tso", "off", "gso",
            "off", "gro", "off",
        ]);
        ipn(&ns, "link set ul up");
        node_ns.push(ns);
    }
    let tag = res.tag.clone();
    for (name, _) in NODES {
        let t = format!("{tag}-{}", &name[5..]);
        for ext in ["tables", "qsbr", "status"] {
            res.file(Path::new(SHM).join(format!("lace-{t}.{ext}")));
        }
    }
    let mut lab = Lab {
        controls: vec![None, None],
        forwarders: vec![None, None],
        res,
        node_ns,
        manifests,
        fwd_bin,
    };
    for k in 0..2 {
        lab.start_control(k);
    }
    for k in 0..2 {
        lab.start_forwarder(k);
    }

    // ---- binding: the CEL and label policies put each pod on its network ----
    let frontend1 = lab.add_pod(0, "team-blue", "frontend-1");
    let backend2 = lab.add_pod(0, "team-blue", "backend-2");
    let backend1 = lab.add_pod(1, "team-blue", "backend-1");
    let tools1 = lab.add_pod(1, "team-blue", "tools-1");
    let cart1 = lab.add_pod(1, "shop", "cart-1");
    for (p, v4, v6) in [
        (&frontend1, "10.41.0.0/16", "fd41::/48"),
        (&backend2, "10.40.0.0/16", "fd40::/48"),
        (&backend1, "10.40.0.0/16", "fd40::/48"),
        (&tools1, "10.42.0.0/16", "fd42::/48"),
        (&cart1, "10.43.0.0/16", "fd43::/48"),
    ] {
        assert!(in_subnet(p.v4, v4), "{}: {} not in {v4}", p.name, p.v4);
        assert!(in_subnet(p.v6, v6), "{}: {} not in {v6}", p.name, p.v6);
    }
    // Each node has its own block of backend.
    assert_ne!(
        IpNet::new(backend1.v4, 24).unwrap().trunc(),
        IpNet::new(backend2.v4, 24).unwrap().trunc()
    );

    // ---- cross-node forwarding over SRv6, both families ----
    reachable(&backend2, backend1.v4);
    reachable(&backend2, backend1.v6);
    reachable(&backend1, backend2.v4);

    // ---- isolation until the routing policy, then a path ----
    assert!(
        !ping(&frontend1, backend1.v4, 2),
        "frontend reached backend without a routing policy"
    );
    assert!(
        !ping(&frontend1, backend2.v4, 2),
        "frontend reached backend (same node) without a routing policy"
    );
    assert!(!ping(&tools1, backend1.v4, 2), "blue reached backend");
    std::fs::copy(
        examples.join("later/routing.yaml"),
        lab.manifests.join("routing.yaml"),
    )
    .unwrap();
    reachable(&frontend1, backend1.v4);
    reachable(&frontend1, backend2.v4);
    reachable(&backend1, frontend1.v6);
    assert!(
        !ping(&tools1, backend1.v4, 2),
        "blue reached backend after the frontend-backend policy"
    );

    // ---- the l2 network `storage`: one L2 domain across both nodes ----
    let storage1 = lab.add_pod(0, "team-blue", "storage-1");
    let storage2 = lab.add_pod(1, "team-blue", "storage-2");
    let storage3 = lab.add_pod(0, "team-blue", "storage-3");
    for p in [&storage1, &storage2, &storage3] {
        assert!(in_subnet(p.v4, "10.50.0.0/24"), "{}: {}", p.name, p.v4);
        let ips = check_ips(&lab, p);
        assert_eq!(
            ips,
            [format!("{}/24", p.v4), format!("{}/64", p.v6)],
            "an l2 address carries the subnet's prefix length"
        );
    }
    // Across nodes (Ethernet over SRv6) and on one node (switched), both families; the
    // peers are on-link, so each pod asks ARP/NDP for the other and the forwarder answers.
    reachable(&storage1, storage2.v4);
    reachable(&storage1, storage2.v6);
    reachable(&storage2, storage3.v4);
    reachable(&storage1, storage3.v6);
    // The answer was the peer's own MAC, from the network's neighbor table.
    let mac_of = |p: &Pod| {
        ipn(&p.ns, "-j link show eth0")
            .split("\"address\":\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("eth0's MAC")
            .to_owned()
    };
    let neigh = ipn(
        &storage1.ns,
        &format!("neigh show {} dev eth0", storage2.v4),
    );
    assert!(
        neigh.contains(&mac_of(&storage2)),
        "storage-1 resolved storage-2 to its MAC: {neigh}"
    );
    // TCP across nodes.
    tcp_echo(&storage1, &storage2, storage2.v4);
    // Broadcast: once to the member on the other node and once to the one beside the sender.
    broadcast_once(
        &lab.res.dir,
        &storage1,
        &[&storage2, &storage3],
        "255.255.255.255",
    );
    // l2 and l3 networks stay isolated without a routing policy.
    assert!(
        !ping(&storage1, backend1.v4, 2),
        "storage (l2) reached backend (l3) without a routing policy"
    );
    assert!(
        !ping(&backend2, storage2.v4, 2),
        "backend (l3) reached storage (l2) without a routing policy"
    );

    // ---- a second ADD of an interface that exists: refused, nothing changes ----
    let second = lab.cni(0, "ADD", &backend2).unwrap_err();
    assert!(
        second.contains("\"code\":102") && second.contains("eth0"),
        "{second}"
    );
    assert_eq!(
        check_ips(&lab, &backend2),
        [
            format!("{}/32", backend2.v4),
            format!("{}/128", backend2.v6)
        ]
    );
    reachable(&backend2, backend1.v4);

    // ---- the pod's interface vanishes; the runtime's retried ADD makes it again and the
    //      forwarder replaces the port bound to the old one: traffic flows again ----
    ipn(&backend2.ns, "link del eth0");
    assert!(!ping(&backend2, backend1.v4, 1), "no interface, no traffic");
    let again = lab
        .cni(0, "ADD", &backend2)
        .unwrap_or_else(|e| panic!("{e}"));
    let v4_again: Vec<&str> = again["ips"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["address"].as_str())
        .collect();
    assert!(
        v4_again.contains(&format!("{}/32", backend2.v4).as_str()),
        "the same addresses: {again}"
    );
    reachable(&backend2, backend1.v4);
    reachable(&backend1, backend2.v4);
    reachable(&backend2, backend1.v6);

    // ---- status: the file and the command ----
    let status = Command::new(env!("CARGO_BIN_EXE_lace-control"))
        .args(["status", "--node", "node-a", "--manifests"])
        .arg(&lab.manifests)
        .args(["--tables-dir", SHM, "--tables-name", &lab.tables_name(0)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "lace-control status: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(
        text.contains("frontend-backend") && text.contains("Supported=True"),
        "{text}"
    );
    assert!(text.contains("frontend-1") && text.contains("Up"), "{text}");
    // Every pod's binding is shown, ADDed or not (frontend-2 has not been ADDed yet).
    assert!(text.contains("BINDINGS"), "{text}");
    let binding_of = |pod: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with("pod ") && l.contains(&format!("/{pod} ")))
            .unwrap_or_else(|| panic!("no binding line for {pod}:\n{text}"))
            .to_owned()
    };
    assert!(binding_of("frontend-2").contains("frontend"), "{text}");
    assert!(binding_of("tools-1").contains("blue"), "{text}");

    // ---- killing lace-control does not interrupt forwarding ----
    let before = check_ips(&lab, &frontend1);
    let ctl = lab.controls[0].as_mut().unwrap();
    ctl.stop(Signal::SIGKILL, Duration::from_secs(5));
    lab.controls[0] = None;
    assert!(
        ping(&backend2, backend1.v4, 5),
        "forwarding stopped with lace-control down"
    );
    assert!(
        ping(&frontend1, backend1.v4, 3),
        "policy path stopped with lace-control down"
    );
    lab.start_control(0);
    assert_eq!(check_ips(&lab, &frontend1), before, "CHECK after restart");
    lab.cni(0, "CHECK", &frontend1)
        .unwrap_or_else(|e| panic!("{e}"));
    let frontend2 = lab.add_pod(0, "team-blue", "frontend-2");
    for p in [&frontend1, &backend2, &backend1, &tools1, &cart1] {
        assert_ne!(frontend2.v4, p.v4, "new pod reuses {}'s address", p.name);
        assert_ne!(frontend2.v6, p.v6, "new pod reuses {}'s address", p.name);
    }
    reachable(&frontend2, backend1.v4);
    reachable(&frontend2, frontend1.v4);

    // ---- a restarted forwarder forwards again from the shared tables ----
    let f = lab.forwarders[1].as_mut().unwrap();
    f.stop(Signal::SIGTERM, Duration::from_secs(20));
    lab.forwarders[1] = None;
    lab.start_forwarder(1);
    reachable(&backend2, backend1.v4);
    reachable(&frontend1, backend1.v6);

    // ---- DEL releases; the pod is gone from control ----
    lab.cni(0, "DEL", &frontend2)
        .unwrap_or_else(|e| panic!("{e}"));
    let r = control_request(
        &lab.socket(0),
        &json!({"op": "check", "containerId": frontend2.container, "ifname": "eth0"}),
    );
    assert_eq!(r["result"], "error", "CHECK after DEL: {r}");
    assert!(ping(&frontend1, backend1.v4, 2));
}
