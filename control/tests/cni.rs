//! `lace-cni` run exactly as kubelet runs it — `CNI_*` environment, network configuration on
//! stdin, result or error JSON on stdout, exit code — against a fake `lace-control` served from
//! this test on a unix socket.
//!
//! Tests that make interfaces need root: they run the plugin inside a fresh "node" network
//! namespace (so nothing touches this machine's own links) and give it a fresh "pod" namespace.
//! They are `#[ignore]`d, run with `--include-ignored` (as `.ci/run` does); without root or `ip`
//! they then fail, naming what is missing.
//! Every namespace and socket is removed by a guard, also when a test fails.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use lace_control::proto::{
    Allocation, Attachment, ErrorCode, IpConfig, Request, Response, RouteConfig,
};
use lace_prereq::{program, require, root};
use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_lace-cni");
const POD_MAC: &str = "02:00:0a:28:03:07";
const GW_MAC: &str = "02:00:00:00:00:01";
const HOST_IF: &str = "lace_h0";
/// The `K8S_POD_UID` the tests pass, as kubelet does.
const POD_UID: &str = "2f0e6c1d-5a4b-4c3d-9e8f-0123456789ab";

static SEQ: AtomicUsize = AtomicUsize::new(0);

fn unique(tag: &str) -> String {
    format!(
        "lcni{}-{}-{tag}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Fails the test unless it may make namespaces and links (root, `ip`).
fn prerequisites() {
    require(&[root(), program("ip", "iproute2")]);
}

// ---------------------------------------------------------------------------------------------
// The fake lace-control.

/// What the fake answers a request with; `None` holds the connection open without answering
/// until the plugin gives up.
type Responder = dyn Fn(&Request) -> Option<Response> + Send + Sync;

/// A thread serving the control socket, recording every request.
struct FakeControl {
    dir: tempfile::TempDir,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeControl {
    fn start(respond: impl Fn(&Request) -> Option<Response> + Send + Sync + 'static) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let respond: Arc<Responder> = Arc::new(respond);
        let (reqs, stop2) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let mut reader = BufReader::new(&conn);
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    continue;
                }
                let req: Request = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("the plugin sent {line:?}: {e}"));
                reqs.lock().unwrap().push(req.clone());
                match respond(&req) {
                    Some(resp) => {
                        let mut out = serde_json::to_vec(&resp).unwrap();
                        out.push(b'\n');
                        let _ = (&conn).write_all(&out);
                    }
                    None => {
                        // Wait until the plugin hangs up.
                        let mut rest = String::new();
                        let _ = reader.read_line(&mut rest);
                    }
                }
            }
        });
        FakeControl {
            dir,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("control.sock")
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    fn ops(&self) -> Vec<&'static str> {
        self.requests()
            .iter()
            .map(lace_control::cni::client::op_name)
            .collect()
    }
}

impl Drop for FakeControl {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = std::os::unix::net::UnixStream::connect(self.socket());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn allocation() -> Allocation {
    Allocation {
        network: "backend".into(),
        host_interface: HOST_IF.into(),
        mac: POD_MAC.into(),
        mtu: 1450,
        ips: vec![
            IpConfig {
                address: "10.40.3.7/24".into(),
                gateway: "10.40.3.1".into(),
            },
            IpConfig {
                address: "fd00:40:3::7/64".into(),
                gateway: "fd00:40:3::1".into(),
            },
        ],
        routes: vec![RouteConfig {
            dst: "10.96.0.0/12".into(),
            gw: "10.40.3.1".into(),
        }],
        gateway_mac: GW_MAC.into(),
        fresh: true,
    }
}

/// A control that knows one attachment and does what a healthy control does.
fn healthy_control() -> FakeControl {
    FakeControl::start(|req| {
        Some(match req {
            Request::Allocate(_) | Request::Attach(_) | Request::Check(_) => {
                Response::Allocated(allocation())
            }
            Request::Release(_) | Request::Status | Request::Gc { .. } => Response::Ok,
        })
    })
}

fn unknown(what: &str) -> Response {
    Response::Error {
        code: ErrorCode::InvalidArgs,
        msg: format!("no attachment {what}"),
        details: String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Namespaces and the plugin.

/// A named network namespace, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new(tag: &str) -> Self {
        let name = unique(tag);
        sh(&["ip", "netns", "add", &name]);
        Netns { name }
    }

    fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    /// `ip -n <ns> -j <args>` as JSON.
    fn ip_json(&self, args: &[&str]) -> Value {
        let mut full = vec!["ip", "-n", &self.name, "-j"];
        full.extend_from_slice(args);
        let out = sh(&full);
        if out.trim().is_empty() {
            return json!([]);
        }
        serde_json::from_str(&out).unwrap()
    }

    fn exec(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        sh(&full)
    }

    fn has_link(&self, name: &str) -> bool {
        self.ip_json(&["link", "show"])
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["ifname"] == name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What the plugin printed and returned.
#[derive(Debug)]
struct Outcome {
    code: i32,
    stdout: String,
}

impl Outcome {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }

    #[track_caller]
    fn ok(&self) -> &Self {
        assert_eq!(self.code, 0, "plugin failed: {}", self.stdout);
        self
    }

    /// Asserts a CNI error result with `code`; returns "msg details".
    #[track_caller]
    fn error(&self, code: u64) -> String {
        assert_ne!(self.code, 0, "plugin succeeded: {}", self.stdout);
        let j = self.json();
        assert_eq!(j["code"], code, "{j}");
        assert_eq!(j["cniVersion"], "1.1.0", "{j}");
        assert!(j["msg"].as_str().is_some_and(|m| !m.is_empty()), "{j}");
        format!("{} {}", j["msg"], j["details"])
    }
}

/// One CNI invocation.
struct Invocation<'a> {
    command: &'a str,
    config: Value,
    env: Vec<(&'a str, String)>,
    node: Option<&'a Netns>,
    stdin: Option<String>,
}

impl<'a> Invocation<'a> {
    fn new(command: &'a str, socket: &Path) -> Self {
        Invocation {
            command,
            config: json!({
                "cniVersion": "1.1.0",
                "name": "lace",
                "type": "lace-cni",
                "controlSocket": socket,
                "connectTimeoutMs": 2000,
                "requestTimeoutMs": 5000,
                "attachTimeoutMs": 5000,
            }),
            env: Vec::new(),
            node: None,
            stdin: None,
        }
    }

    /// The parameters of a pod attachment (ADD/DEL/CHECK).
    fn pod(mut self, container: &str, netns: Option<&Path>) -> Self {
        self.env.push(("CNI_CONTAINERID", container.into()));
        self.env.push(("CNI_IFNAME", "eth0".into()));
        self.env.push((
            "CNI_ARGS",
            format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=team-blue;K8S_POD_NAME=web-0;K8S_POD_UID={POD_UID}"),
        ));
        if let Some(ns) = netns {
            self.env.push(("CNI_NETNS", ns.display().to_string()));
        }
        self
    }

    fn in_node(mut self, node: &'a Netns) -> Self {
        self.node = Some(node);
        self
    }

    fn config_key(mut self, key: &str, value: Value) -> Self {
        self.config[key] = value;
        self
    }

    fn run(&self) -> Outcome {
        let mut cmd = match self.node {
            Some(node) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &node.name, PLUGIN]);
                c
            }
            None => Command::new(PLUGIN),
        };
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("CNI_COMMAND", self.command)
            .env("CNI_PATH", "/opt/cni/bin")
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        let input = self
            .stdin
            .clone()
            .unwrap_or_else(|| self.config.to_string());
        // VERSION does not read stdin: a closed pipe is the plugin's right.
        if let Err(e) = child.stdin.take().unwrap().write_all(input.as_bytes()) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
        }
        let out = child.wait_with_output().unwrap();
        Outcome {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8(out.stdout).unwrap(),
        }
    }
}

fn attachment_of(req: &Request) -> &Attachment {
    match req {
        Request::Allocate(a) | Request::Attach(a) | Request::Release(a) | Request::Check(a) => a,
        other => panic!("not an attachment request: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Commands that need no namespaces.

#[test]
fn version_lists_the_supported_versions() {
    let control = healthy_control();
    let out = Invocation::new("VERSION", &control.socket()).run();
    out.ok();
    let j = out.json();
    assert_eq!(j["cniVersion"], "1.1.0");
    assert_eq!(
        j["supportedVersions"],
        json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
    assert!(control.requests().is_empty());
}

#[test]
fn stdin_that_is_not_json_is_a_decode_error() {
    let control = healthy_control();
    let mut inv = Invocation::new("ADD", &control.socket()).pod("c1", Some(Path::new("/x")));
    inv.stdin = Some("{\"cniVersion\": \"1.1.0\", \"name\": ".into());
    let msg = inv.run().error(6);
    assert!(msg.contains("EOF"), "{msg}");
    assert!(control.requests().is_empty());
}

#[test]
fn a_missing_ifname_is_an_environment_error() {
    let control = healthy_control();
    let mut inv = Invocation::new("ADD", &control.socket()).pod("c1", Some(Path::new("/x")));
    inv.env.retain(|(k, _)| *k != "CNI_IFNAME");
    let msg = inv.run().error(4);
    assert!(msg.contains("CNI_IFNAME"), "{msg}");
    assert!(control.requests().is_empty());
}

/// The error's message itself names the variable (not only its details), for every command
/// that needs one.
#[test]
fn a_missing_variable_is_named_in_the_message() {
    let control = healthy_control();
    for (command, var) in [
        ("ADD", "CNI_NETNS"),
        ("ADD", "CNI_CONTAINERID"),
        ("CHECK", "CNI_NETNS"),
        ("DEL", "CNI_IFNAME"),
    ] {
        let mut inv = Invocation::new(command, &control.socket()).pod("c1", Some(Path::new("/x")));
        inv.env.retain(|(k, _)| *k != var);
        let out = inv.run();
        out.error(4);
        let msg = out.json()["msg"].as_str().unwrap().to_owned();
        assert!(msg.contains(var), "{command} without {var}: {msg}");
    }
    assert!(control.requests().is_empty());
}

#[test]
fn a_bad_lace_key_is_a_configuration_error() {
    let control = healthy_control();
    let msg = Invocation::new("ADD", &control.socket())
        .pod("c1", Some(Path::new("/x")))
        .config_key("attachTimeoutMs", json!(0))
        .run()
        .error(7);
    assert!(msg.contains("attachTimeoutMs"), "{msg}");
    assert!(control.requests().is_empty());
}

#[test]
fn status_reports_whether_control_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    let down = dir.path().join("nobody.sock");
    let msg = Invocation::new("STATUS", &down).run().error(50);
    assert!(msg.contains("nobody.sock"), "{msg}");

    let control = healthy_control();
    let out = Invocation::new("STATUS", &control.socket()).run();
    out.ok();
    assert!(out.stdout.trim().is_empty(), "{}", out.stdout);
    assert_eq!(control.ops(), ["Status"]);

    let not_ready = FakeControl::start(|_| {
        Some(Response::Error {
            code: ErrorCode::TryAgainLater,
            msg: "tables not published yet".into(),
            details: String::new(),
        })
    });
    let msg = Invocation::new("STATUS", &not_ready.socket())
        .run()
        .error(50);
    assert!(msg.contains("tables not published yet"), "{msg}");
}

#[test]
fn gc_sends_the_valid_attachments() {
    let control = healthy_control();
    Invocation::new("GC", &control.socket())
        .config_key(
            "cni.dev/valid-attachments",
            json!([{"containerID": "c1", "ifname": "eth0"}, {"containerID": "c2", "ifname": "net1"}]),
        )
        .run()
        .ok();
    match control.requests().as_slice() {
        [Request::Gc { valid }] => {
            let pairs: Vec<(&str, &str)> = valid
                .iter()
                .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
                .collect();
            assert_eq!(pairs, [("c1", "eth0"), ("c2", "net1")]);
        }
        other => panic!("{other:?}"),
    }

    // Without the list GC would release everything: refused, nothing sent.
    let control = healthy_control();
    let msg = Invocation::new("GC", &control.socket()).run().error(7);
    assert!(msg.contains("valid-attachments"), "{msg}");
    assert!(control.requests().is_empty());
}

#[test]
fn del_without_add_succeeds() {
    let control = FakeControl::start(|req| {
        Some(match req {
            Request::Check(_) => unknown("c-none/eth0"),
            Request::Release(_) => Response::Ok,
            other => panic!("unexpected {other:?}"),
        })
    });
    let out = Invocation::new("DEL", &control.socket())
        .pod("c-none", None)
        .run();
    out.ok();
    assert!(out.stdout.trim().is_empty());
    assert_eq!(control.ops(), ["Check", "Release"]);
    let a = attachment_of(&control.requests()[1]).clone();
    assert_eq!(
        (
            a.container_id.as_str(),
            a.ifname.as_str(),
            a.pod_namespace.as_str(),
            a.pod_name.as_str(),
            a.pod_uid.as_str()
        ),
        ("c-none", "eth0", "team-blue", "web-0", POD_UID)
    );
}

#[test]
fn del_with_control_down_asks_to_try_again() {
    let dir = tempfile::tempdir().unwrap();
    let msg = Invocation::new("DEL", &dir.path().join("down.sock"))
        .pod("c1", None)
        .run()
        .error(11);
    assert!(msg.contains("down.sock"), "{msg}");
}

#[test]
fn add_into_a_missing_netns_fails_and_releases() {
    let control = healthy_control();
    let msg = Invocation::new("ADD", &control.socket())
        .pod("c1", Some(Path::new("/run/netns/lace-cni-test-no-such-ns")))
        .run()
        .error(3);
    assert!(msg.contains("no-such-ns"), "{msg}");
    assert_eq!(control.ops(), ["Allocate", "Release"]);
}

#[test]
fn add_with_control_refusing_passes_the_code_on() {
    let control = FakeControl::start(|_| {
        Some(Response::Error {
            code: ErrorCode::AddressesExhausted,
            msg: "Network backend: no address left in 10.40.0.0/16".into(),
            details: "grow spec.ipv4Subnet".into(),
        })
    });
    let msg = Invocation::new("ADD", &control.socket())
        .pod("c1", Some(Path::new("/run/netns/whatever")))
        .run()
        .error(101);
    assert!(
        msg.contains("no address left") && msg.contains("grow"),
        "{msg}"
    );
    assert_eq!(control.ops(), ["Allocate"]);
}

// ---------------------------------------------------------------------------------------------
// ADD, CHECK and DEL on real namespaces.

/// A node namespace (where the plugin runs) and a pod namespace.
struct Sandbox {
    node: Netns,
    pod: Netns,
}

impl Sandbox {
    fn new() -> Self {
        let node = Netns::new("node");
        let pod = Netns::new("pod");
        Sandbox { node, pod }
    }

    fn invoke<'a>(
        &'a self,
        command: &'a str,
        control: &FakeControl,
        container: &str,
    ) -> Invocation<'a> {
        Invocation::new(command, &control.socket())
            .pod(container, Some(&self.pod.path()))
            .in_node(&self.node)
    }

    fn veths_in_pod(&self) -> usize {
        self.pod
            .ip_json(&["-d", "link", "show"])
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["linkinfo"]["info_kind"] == "veth")
            .count()
    }
}

#[test]
#[ignore = "needs root and ip (network namespaces); run with --include-ignored"]
fn add_creates_the_configured_pod_interface() {
    prerequisites();
    let sb = Sandbox::new();
    let control = healthy_control();
    let out = sb.invoke("ADD", &control, "c-add").run();
    out.ok();

    // The result.
    let r = out.json();
    assert_eq!(r["cniVersion"], "1.1.0");
    let ifs = r["interfaces"].as_array().unwrap();
    assert_eq!(ifs.len(), 2, "{r}");
    assert_eq!(ifs[0]["name"], HOST_IF);
    assert!(ifs[0].get("sandbox").is_none(), "{r}");
    assert_eq!(ifs[1]["name"], "eth0");
    assert_eq!(ifs[1]["mac"], POD_MAC);
    assert_eq!(ifs[1]["sandbox"], sb.pod.path().display().to_string());
    assert_eq!(
        r["ips"],
        json!([
            {"address": "10.40.3.7/24", "gateway": "10.40.3.1", "interface": 1},
            {"address": "fd00:40:3::7/64", "gateway": "fd00:40:3::1", "interface": 1},
        ])
    );
    assert_eq!(
        r["routes"],
        json!([
            {"dst": "0.0.0.0/0", "gw": "10.40.3.1"},
            {"dst": "::/0", "gw": "fd00:40:3::1"},
            {"dst": "10.96.0.0/12", "gw": "10.40.3.1"},
        ])
    );

    // The requests.
    assert_eq!(control.ops(), ["Allocate", "Attach"]);
    let a = attachment_of(&control.requests()[0]).clone();
    assert_eq!(a.container_id, "c-add");
    assert_eq!(a.ifname, "eth0");
    assert_eq!(a.pod_namespace, "team-blue");
    assert_eq!(a.pod_name, "web-0");
    assert_eq!(a.pod_uid, POD_UID);
    assert_eq!(a.netns, sb.pod.path().display().to_string());

    // The pod end.
    let link = &sb.pod.ip_json(&["link", "show", "eth0"])[0];
    assert_eq!(link["address"], POD_MAC);
    assert_eq!(link["mtu"], 1450);
    assert!(
        link["flags"].as_array().unwrap().contains(&json!("UP")),
        "{link}"
    );
    assert_eq!(
        ifs[0]["mac"],
        sb.node.ip_json(&["link", "show", HOST_IF])[0]["address"]
    );
    let addrs = &sb.pod.ip_json(&["addr", "show", "dev", "eth0"])[0]["addr_info"];
    for (ip, len) in [("10.40.3.7", 24), ("fd00:40:3::7", 64)] {
        let a = addrs
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["local"] == ip)
            .unwrap_or_else(|| panic!("{ip} missing: {addrs}"));
        assert_eq!(a["prefixlen"], len);
        assert!(a.get("tentative").is_none(), "DAD must be off: {a}");
    }
    let routes4 = sb.pod.ip_json(&["route", "show", "dev", "eth0"]);
    let routes6 = sb.pod.ip_json(&["-6", "route", "show", "dev", "eth0"]);
    let has = |routes: &Value, dst: &str, gw: &str| {
        routes
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["dst"] == dst && r["gateway"] == gw)
    };
    assert!(has(&routes4, "default", "10.40.3.1"), "{routes4}");
    assert!(has(&routes4, "10.96.0.0/12", "10.40.3.1"), "{routes4}");
    assert!(has(&routes6, "default", "fd00:40:3::1"), "{routes6}");
    let neigh = sb.pod.ip_json(&["neigh", "show", "dev", "eth0"]);
    for gw in ["10.40.3.1", "fd00:40:3::1"] {
        let n = neigh
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["dst"] == gw)
            .unwrap_or_else(|| panic!("no neighbor {gw}: {neigh}"));
        assert_eq!(n["lladdr"], GW_MAC);
        assert_eq!(n["state"], json!(["PERMANENT"]));
    }
    assert_eq!(
        sb.pod
            .exec(&["cat", "/proc/sys/net/ipv6/conf/eth0/accept_dad"])
            .trim(),
        "0"
    );

    // The host end, and offloads on on both ends (ADR 0013: the forwarder takes large segments).
    let host = &sb.node.ip_json(&["link", "show", HOST_IF])[0];
    assert_eq!(host["mtu"], 1450);
    assert!(
        host["flags"].as_array().unwrap().contains(&json!("UP")),
        "{host}"
    );
    assert_eq!(
        sb.node
            .exec(&[
                "cat",
                &format!("/proc/sys/net/ipv6/conf/{HOST_IF}/disable_ipv6")
            ])
            .trim(),
        "1"
    );
    for (ns, ifname) in [(&sb.node, HOST_IF), (&sb.pod, "eth0")] {
        let features = ns.exec(&["ethtool", "-k", ifname]);
        for f in [
            "tx-checksumming: on",
            "tcp-segmentation-offload: on",
            "generic-segmentation-offload: on",
            "generic-receive-offload: on",
        ] {
            assert!(
                features.contains(f),
                "{ifname}: {f} expected in\n{features}"
            );
        }
    }
}

/// A control that remembers which attachments it allocated: a second Allocate of the same one
/// is not fresh, as lace-control answers it.
fn remembering_control() -> FakeControl {
    let seen = std::sync::Mutex::new(std::collections::BTreeSet::new());
    FakeControl::start(move |req| {
        Some(match req {
            Request::Allocate(a) => {
                let fresh = seen.lock().unwrap().insert(a.container_id.clone());
                Response::Allocated(Allocation {
                    fresh,
                    ..allocation()
                })
            }
            Request::Attach(_) | Request::Check(_) => Response::Allocated(Allocation {
                fresh: false,
                ..allocation()
            }),
            Request::Release(_) | Request::Status | Request::Gc { .. } => Response::Ok,
        })
    })
}

/// The CNI spec: "If an interface of the requested name already exists in the container, the
/// CNI plugin MUST return with an error." A second ADD without a DEL fails and leaves the first
/// ADD's interface, addresses and allocation as they were.
#[test]
#[ignore = "needs root and ip (network namespaces); run with --include-ignored"]
fn a_second_add_for_an_existing_interface_is_an_error_and_changes_nothing() {
    prerequisites();
    let sb = Sandbox::new();
    let control = remembering_control();
    sb.invoke("ADD", &control, "c-retry").run().ok();
    let msg = sb.invoke("ADD", &control, "c-retry").run().error(102);
    assert!(
        msg.contains("eth0") && msg.contains("earlier ADD") && msg.contains("DEL"),
        "{msg}"
    );
    assert_eq!(sb.veths_in_pod(), 1);
    assert!(sb.node.has_link(HOST_IF));
    // No Release: the allocation is the first ADD's.
    assert_eq!(control.ops(), ["Allocate", "Attach", "Allocate"]);
    let addrs = &sb.pod.ip_json(&["addr", "show", "dev", "eth0"])[0]["addr_info"];
    let globals = addrs
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["scope"] == "global")
        .count();
    assert_eq!(globals, 2, "{addrs}");
}

/// A retried ADD after the pod's interface vanished makes it again (same allocation) and
/// attaches it; control's side (a new endpoint id, the forwarder's new port) is shown by the
/// end-to-end test with the real forwarder.
#[test]
#[ignore = "needs root and ip (network namespaces); run with --include-ignored"]
fn a_retried_add_after_the_interface_vanished_makes_it_again() {
    prerequisites();
    let sb = Sandbox::new();
    let control = remembering_control();
    let first = sb.invoke("ADD", &control, "c-gone").run();
    first.ok();
    sb.pod.exec(&["ip", "link", "del", "eth0"]);
    assert!(!sb.pod.has_link("eth0"));
    assert!(
        !sb.node.has_link(HOST_IF),
        "the host end goes with its peer"
    );
    let second = sb.invoke("ADD", &control, "c-gone").run();
    second.ok();
    // The same pod interface and addresses (the new host end has a new random MAC).
    let (a, b) = (first.json(), second.json());
    for field in ["ips", "routes"] {
        assert_eq!(a[field], b[field], "{field}");
    }
    assert_eq!(a["interfaces"][1], b["interfaces"][1]);
    assert_eq!(sb.veths_in_pod(), 1);
    assert!(sb.node.has_link(HOST_IF));
    assert_eq!(control.ops(), ["Allocate", "Attach", "Allocate", "Attach"]);
}

#[test]
#[ignore = "needs root and ip (network namespaces); run with --include-ignored"]
fn add_over_a_foreign_interface_is_already_exists_and_leaves_it() {
    prerequisites();
    let sb = Sandbox::new();
    sh(&[
        "ip",
        "-n",
        &sb.pod.name,
        "link",
        "add",
        "name",
        "eth0",
        "address",
        "02:99:99:99:99:99",
        "type",
        "veth",
        "peer",
        "name",
        "other0",
    ]);
    let control = healthy_control();
    let msg = sb.invoke("ADD", &control, "c-foreign").run().error(102);
    assert!(
        msg.contains("eth0") && msg.contains("02:99:99:99:99:99"),
        "{msg}"
    );
    // The foreign veth is untouched, nothing was created on the node, the allocation was released.
    assert_eq!(
        sb.pod.ip_json(&["link", "show", "eth0"])[0]["address"],
        "02:99:99:99:99:99"
    );
    assert!(!sb.node.has_link(HOST_IF));
    assert_eq!(control.ops(), ["Allocate", "Release"]);
}

#[test]
#[ignore = "needs root and ip (network namespaces); run with --include-ignored"]
fn a_failed_attach_removes_the_interface_and_releases() {
    prerequisites();
    let sb = Sandbox::new();
    let control = FakeControl::start(|req| {
        Some(match req {
            Request::Allocate(_) => Response::Allocated(allocation()),
            Request::Attach(_) => Response::Error {
                code: ErrorCode::TryAgainLater,
                msg: "forwarder has not reported port 7 up".into(),
                details: String::new(),
            },
            Request::Release(_) => Response::Ok,
            other => panic!("unexpected {other:?}"),
        })
    });
    let msg = sb.invoke("ADD", &control, "c-fail").run().error(11);
    assert!(msg.contains("port 7"), "{msg}");
    assert_eq!(control.ops(), ["Allocate", "Attach", "Release"]);
    assert!(!sb.pod.has_link("eth0"));
    assert!(!sb.node.has_link(HOST_IF));
}

#[test]
#[ignore = "needs root and ip (network namespaces); run with --include-ignored"]
fn an_attach_that_never_answers_times_out_and_cleans_up() {
    prerequisites();
    let sb = Sandbox::new();
    let control = FakeControl::start(|req| match req {
        Request::Allocate(_) => Some(Response::Allocated(allocation())),
        Request::Attach(_) => None,
        _ => Some(Response::Ok),
    });
    let msg = sb
        .invoke("ADD", &control, "c-slow")
        .config_key("attachTimeoutMs", json!(300))
        .run()
        .error(11);
    assert!(msg.contains("Attach"), "{msg}");
    assert_eq!(control.ops(), ["Allocate", "Attach", "Release"]);
    assert!(!sb.pod.has_link("eth0"));
    assert!(!sb.node.has_link(HOST_IF));
}

#[test]
#[ignore = "needs root and ip (network namespaces); run with --include-ignored"]
fn check_passes_after_add_and_names_what_was_tampered_with() {
    prerequisites();
    let sb = Sandbox::new();
    let control = healthy_control();
    sb.invoke("ADD", &control, "c-check").run().ok();
    let out = sb.invoke("CHECK", &control, "c-check").run();
    out.ok();
    assert!(out.stdout.trim().is_empty());

    sh(&[
        "ip",
        "-n",
        &sb.pod.name,
        "link",
        "set",
        "eth0",
        "mtu",
        "1300",
    ]);
    sh(&["ip", "-n", &sb.pod.name, "route", "del", "10.96.0.0/12"]);
    let msg = sb.invoke("CHECK", &control, "c-check").run().error(999);
    assert!(
        msg.contains("mtu") && msg.contains("1300") && msg.contains("1450"),
        "{msg}"
    );
    assert!(msg.contains("10.96.0.0/12"), "{msg}");
    assert_eq!(control.ops(), ["Allocate", "Attach", "Check", "Check"]);
}

#[test]
#[ignore = "needs root and ip (network namespaces); run with --include-ignored"]
fn del_after_add_removes_both_ends() {
    prerequisites();
    let sb = Sandbox::new();
    let control = healthy_control();
    sb.invoke("ADD", &control, "c-del").run().ok();
    sb.invoke("DEL", &control, "c-del").run().ok();
    assert!(!sb.pod.has_link("eth0"));
    assert!(!sb.node.has_link(HOST_IF));
    // DEL again: still success.
    sb.invoke("DEL", &control, "c-del").run().ok();
    assert_eq!(
        control.ops(),
        ["Allocate", "Attach", "Check", "Release", "Check", "Release"]
    );
}

#[test]
#[ignore = "needs root and ip (network namespaces); run with --include-ignored"]
fn del_after_the_netns_is_gone_succeeds() {
    prerequisites();
    let node = Netns::new("node");
    let pod = Netns::new("pod");
    let pod_path = pod.path();
    let control = healthy_control();
    Invocation::new("ADD", &control.socket())
        .pod("c-gone", Some(&pod_path))
        .in_node(&node)
        .run()
        .ok();
    drop(pod);
    assert!(!pod_path.exists());
    Invocation::new("DEL", &control.socket())
        .pod("c-gone", Some(&pod_path))
        .in_node(&node)
        .run()
        .ok();
    assert!(!node.has_link(HOST_IF));
    assert_eq!(control.ops(), ["Allocate", "Attach", "Check", "Release"]);
}

#[test]
#[ignore = "needs root and ip (network namespaces); run with --include-ignored"]
fn del_without_netns_removes_the_host_end_by_name() {
    prerequisites();
    let sb = Sandbox::new();
    let control = healthy_control();
    sb.invoke("ADD", &control, "c-nons").run().ok();
    Invocation::new("DEL", &control.socket())
        .pod("c-nons", None)
        .in_node(&sb.node)
        .run()
        .ok();
    assert!(!sb.node.has_link(HOST_IF));
    assert!(!sb.pod.has_link("eth0"));
}
