//! What both two-node end-to-end tests (`tests/e2e.rs` and `tests/e2e_policy.rs` through
//! [`super::standalone`], and `tests/e2e_k8s.rs`) build the same way: the underlay, a node's
//! forwarder, a `lace-cni` call as kubelet makes it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use lace_shared::status::{status_path, RunState, StatusReader};

use super::*;

/// Node `node`'s table set name in run `tag` (`lce-<pid>-a` for node-a).
pub fn tables_name(tag: &str, node: &str) -> String {
    format!("{tag}-{}", node.strip_prefix("node-").unwrap_or(node))
}

/// An underlay bridge in namespace `<tag>-u` and a namespace per node (`<tag>-n<x>` for
/// node-x) with `ul` on the bridge (IPv6 off on `ul`: the forwarder is the node's IPv6 host on
/// the underlay; offloads off, the forwarder sees frames as sent). Registers each node's table
/// set, status and flow table files for removal. Returns the node namespaces.
pub fn underlay(res: &mut Resources, nodes: &[&str]) -> Vec<String> {
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
    for (k, node) in nodes.iter().enumerate() {
        let t = tables_name(&res.tag, node);
        for ext in ["tables", "qsbr", "status", "flows"] {
            res.file(Path::new(SHM).join(format!("lace-{t}.{ext}")));
        }
        let ns = res.netns(&format!("n{}", node.strip_prefix("node-").unwrap_or(node)));
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
    node_ns
}

/// Starts `fwd_bin` in `node_ns` for table set `tables` (uplink `ul` with address
/// `underlay`, one adaptive worker, packet-socket pods, no huge pages, then `extra` lines of
/// configuration) and waits until it runs. Config and log in `res.dir`, named after `node`.
pub fn start_forwarder(
    res: &Resources,
    fwd_bin: &Path,
    node_ns: &str,
    node: &str,
    tables: &str,
    underlay: &str,
    extra: &str,
) -> Proc {
    let cfg = res.dir.join(format!("forwarder-{node}.toml"));
    write(
        &cfg,
        &format!(
            r#"name = "{tables}"
tables_dir = "{SHM}"

[eal]
memory = "no-huge"
memory_mb = 256

[uplink]
device = "ul"
address = "{underlay}"
mtu = 1500

[srv6]
hop_limit = 64

[workers]
count = 1
polling = "adaptive"

[pods]
mechanism = "packet_socket"
{extra}"#
        ),
    );
    let argv: Vec<String> = vec![
        "ip".into(),
        "netns".into(),
        "exec".into(),
        node_ns.into(),
        fwd_bin.display().to_string(),
        "run".into(),
        "--config".into(),
        cfg.display().to_string(),
    ];
    let log = res.dir.join(format!("forwarder-{node}.log"));
    let mut fwd = Proc::spawn(&format!("lace-forwarder {node}"), &argv, log);
    let path = status_path(Path::new(SHM), tables);
    wait_for(&format!("forwarder {node} running"), WAIT, || {
        if let Some(s) = fwd.try_wait() {
            panic!("forwarder exited ({s}):\n{}", fwd.log_tail(40));
        }
        let r = StatusReader::open(&path).ok()?;
        (r.alive() && r.state() == RunState::Running).then_some(())
    });
    fwd
}

/// A failed `lace-cni` call: the CNI error code (when its output was an error object) and
/// what to print.
#[derive(Debug)]
pub struct CniFailure {
    /// The error object's `code`.
    pub code: Option<u64>,
    /// Command, status, stdout and stderr.
    pub text: String,
}

/// One `lace-cni` call as kubelet makes it: run in `node_ns`, the CNI environment for
/// interface eth0 of network namespace `pod_ns`, `cni_args` as CNI_ARGS, the network
/// configuration (control's `socket`) on stdin. The result object (Null when empty).
pub fn cni(
    node_ns: &str,
    socket: &Path,
    command: &str,
    container: &str,
    pod_ns: &str,
    cni_args: &str,
) -> Result<serde_json::Value, CniFailure> {
    let config = serde_json::json!({
        "cniVersion": "1.1.0",
        "name": "lace",
        "type": "lace-cni",
        "controlSocket": socket,
        "attachTimeoutMs": 40000,
    });
    let mut child = Command::new("ip")
        .args(["netns", "exec", node_ns, env!("CARGO_BIN_EXE_lace-cni")])
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", container)
        .env("CNI_NETNS", PathBuf::from("/var/run/netns").join(pod_ns))
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/opt/cni/bin")
        .env("CNI_ARGS", cni_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lace-cni");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(config.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let code = serde_json::from_str::<serde_json::Value>(&stdout)
            .ok()
            .and_then(|e| e["code"].as_u64());
        return Err(CniFailure {
            code,
            text: format!(
                "lace-cni {command} ({cni_args}): {}\nstdout: {stdout}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    if stdout.trim().is_empty() {
        return Ok(serde_json::Value::Null);
    }
    serde_json::from_str(&stdout).map_err(|e| CniFailure {
        code: None,
        text: format!("lace-cni {command}: {stdout}: {e}"),
    })
}

/// The addresses of a CNI ADD result: (IPv4, IPv6), unspecified when absent.
pub fn result_ips(result: &serde_json::Value) -> (std::net::IpAddr, std::net::IpAddr) {
    let mut v4 = std::net::IpAddr::from([0, 0, 0, 0]);
    let mut v6 = std::net::IpAddr::from([0u16; 8]);
    for ip in result["ips"].as_array().expect("ips in the ADD result") {
        let net: ipnet::IpNet = ip["address"].as_str().unwrap().parse().unwrap();
        match net.addr() {
            a @ std::net::IpAddr::V4(_) => v4 = a,
            a @ std::net::IpAddr::V6(_) => v6 = a,
        }
    }
    (v4, v6)
}
