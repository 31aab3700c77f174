//! Two lace nodes in standalone mode on this machine (root), as `tests/e2e.rs` and
//! `tests/e2e_policy.rs` build them: an underlay bridge in its own namespace, a namespace per
//! node with `ul` on the bridge, a `lace-forwarder` and a `lace-control` per node (both controls
//! on one manifest directory), pods made as network namespaces through `lace-cni` exactly as
//! kubelet calls it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use lace_shared::status::{status_path, DropReason, StatusReader};
use serde_json::json;

use super::*;

/// The nodes: name and underlay address (as deploy/examples/nodes.yaml has them).
pub const NODES: [(&str, &str); 2] = [("node-a", "fd00:100::a"), ("node-b", "fd00:100::b")];

/// Processes first (declared first: dropped first), then namespaces and files.
#[derive(Debug)]
pub struct Lab {
    /// lace-control per node (None while stopped).
    pub controls: Vec<Option<Proc>>,
    /// lace-forwarder per node (None while stopped).
    pub forwarders: Vec<Option<Proc>>,
    /// Namespaces, shm files, the work directory.
    pub res: Resources,
    /// Each node's namespace.
    pub node_ns: Vec<String>,
    /// The directory both controls read.
    pub manifests: PathBuf,
    /// More forwarder configuration per node (TOML lines after the lab's own).
    pub forwarder_extra: [String; 2],
    fwd_bin: PathBuf,
}

/// A pod: its namespace and what lace-cni gave it.
#[derive(Debug, Clone)]
pub struct Pod {
    /// Its network namespace.
    pub ns: String,
    /// The node it is on (index into [`NODES`]).
    pub node: usize,
    /// Kubernetes namespace.
    pub namespace: &'static str,
    /// Pod name.
    pub name: &'static str,
    /// CNI container id.
    pub container: String,
    /// Its IPv4 address.
    pub v4: IpAddr,
    /// Its IPv6 address.
    pub v6: IpAddr,
}

impl Lab {
    /// The underlay and the node namespaces (nothing started): `manifests` is the directory
    /// both controls will read.
    pub fn new(mut res: Resources, manifests: PathBuf) -> Lab {
        let fwd_bin = forwarder_bin();
        let node_ns = node::underlay(&mut res, &NODES.map(|n| n.0));
        // IPv6 off in the nodes altogether (no host interface here).
        for ns in &node_ns {
            sysctl(
                ns,
                &[
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                ],
            );
        }
        Lab {
            controls: vec![None, None],
            forwarders: vec![None, None],
            res,
            node_ns,
            manifests,
            forwarder_extra: Default::default(),
            fwd_bin,
        }
    }

    /// Starts both controls, then both forwarders.
    pub fn start(&mut self) {
        for k in 0..NODES.len() {
            self.start_control(k);
        }
        for k in 0..NODES.len() {
            self.start_forwarder(k);
        }
    }

    /// Node k's table set name.
    pub fn tables_name(&self, k: usize) -> String {
        node::tables_name(&self.res.tag, NODES[k].0)
    }

    /// Node k's control socket.
    pub fn socket(&self, k: usize) -> PathBuf {
        self.res.dir.join(format!("control-{}.sock", NODES[k].0))
    }

    /// Starts node k's lace-control and waits until it answers.
    pub fn start_control(&mut self, k: usize) {
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
            "--metrics-listen".into(),
            "127.0.0.1:0".into(),
        ];
        let log = self.control_log(k);
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

    fn control_log(&self, k: usize) -> PathBuf {
        self.res.dir.join(format!("control-{}.log", NODES[k].0))
    }

    /// Node k's lace-control's `/metrics` (the address it logged at start).
    pub fn control_metrics(&self, k: usize) -> String {
        let log = std::fs::read_to_string(self.control_log(k)).unwrap_or_default();
        let addr = lace_shared::metrics::announced(&log)
            .unwrap_or_else(|| panic!("no metrics address in lace-control's log:\n{log}"));
        let (status, body) = lace_shared::metrics::get(addr, "/metrics")
            .unwrap_or_else(|e| panic!("GET http://{addr}/metrics: {e}"));
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        body
    }

    /// Starts node k's lace-forwarder in its namespace and waits until it runs.
    pub fn start_forwarder(&mut self, k: usize) {
        let (name, underlay) = NODES[k];
        let tables = self.tables_name(k);
        let fwd = node::start_forwarder(
            &self.res,
            &self.fwd_bin,
            &self.node_ns[k],
            name,
            &tables,
            underlay,
            &self.forwarder_extra[k],
        );
        self.forwarders[k] = Some(fwd);
    }

    /// Node k's forwarder's drop counter for `reason`.
    pub fn drops(&self, k: usize, reason: DropReason) -> u64 {
        let path = status_path(Path::new(SHM), &self.tables_name(k));
        StatusReader::open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .drops(reason)
    }

    /// `lace-cni` with the CNI environment, run in node k's namespace as kubelet would.
    pub fn cni(&self, k: usize, command: &str, pod: &Pod) -> Result<serde_json::Value, String> {
        node::cni(
            &self.node_ns[k],
            &self.socket(k),
            command,
            &pod.container,
            &pod.ns,
            &format!(
                "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
                pod.namespace, pod.name
            ),
        )
        .map_err(|e| e.text)
    }

    /// Makes a pod namespace and ADDs it through lace-cni on node k.
    pub fn add_pod(&mut self, k: usize, namespace: &'static str, name: &'static str) -> Pod {
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
        (pod.v4, pod.v6) = node::result_ips(&result);
        pod
    }
}

/// `count` pings from `from` to `to`; true when all were answered.
pub fn ping(from: &Pod, to: IpAddr, count: u32) -> bool {
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

/// Waits until `from` pings `to`, then three pings must all be answered.
pub fn reachable(from: &Pod, to: IpAddr) {
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
