//! Harness for the host tests (`tests/host.rs`): network namespaces, veths, a bridge as the
//! underlay, forwarder processes, Linux SRv6 peers, captures — every one of them behind a guard
//! that removes it on drop, also when a test panics.
//!
//! Naming: everything a test run makes is called `lht-<pid>-<seq>-…` (namespaces, table sets in
//! `/dev/shm`, the work directory under the system temp directory), so parallel runs never collide
//! and leftovers of a crashed run (whose pid is gone) are recognised and removed by the next run.

#![allow(dead_code)] // each test uses a different part of the harness

pub mod guest;

use std::fmt::Write as _;
use std::fs::{self, File};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use lace_prereq::{program, require, root, Need};
use lace_shared::status::{status_path, DropReason, PortState, RunState, StatusReader};
use lace_shared::tables::{TableWriter, TablesConfig};
use lace_shared::types::{
    FdbEntry, FdbTarget, FloodTarget, IfName, L2Settings, MacAddr, NetworkId, NetworkInfo,
    NetworkKind, NextHop, NodeId, NodeInfo, PortId, PortInfo, PortKind, Sid, SidBehavior,
};

/// Where the table sets and status regions live (tmpfs: no huge pages needed).
pub const SHM: &str = "/dev/shm";
/// Underlay MTU.
pub const UNDERLAY_MTU: u32 = 1500;
/// Pod MTU: underlay MTU minus the outer IPv6 header (H.Encaps.Red, no SRH).
pub const POD_MTU: u32 = UNDERLAY_MTU - 40;
/// Generous bound for anything the tests wait for (the machine is small and noisy).
pub const WAIT: Duration = Duration::from_secs(60);

// ---- prerequisites, serialisation, leftovers ---------------------------------------------

static SERIAL: Mutex<()> = Mutex::new(());
static CLEANUP: Once = Once::new();
static SEQ: AtomicU32 = AtomicU32::new(0);

/// Runs the host tests one at a time (each loads both cores); a panicked test does not poison
/// the others.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

pub use lace_prereq::which;

/// Fails the test naming whatever it lacks of what every host test needs (root and the tools
/// it runs) and of `extra`; then removes, once per process, what dead runs left behind.
pub fn prerequisites(extra: impl IntoIterator<Item = Need>) {
    let mut needs = vec![
        root(),
        program("ip", "iproute2"),
        program("tshark", "tshark"),
        program("ping", "iputils-ping"),
        program("python3", "python3"),
        program("ethtool", "ethtool"),
        program("sysctl", "procps"),
    ];
    needs.extend(extra);
    require(&needs);
    CLEANUP.call_once(cleanup_leftovers);
}

/// The forwarder binary Cargo built for this test crate.
pub fn forwarder_bin() -> PathBuf {
    match option_env!("CARGO_BIN_EXE_lace-forwarder") {
        Some(p) => PathBuf::from(p),
        None => panic!(
            "the lace-forwarder binary does not exist in this crate yet \
             (no forwarder/src/main.rs or src/bin/lace-forwarder.rs); rebuild once it does"
        ),
    }
}

/// Whether the process `pid` is a live run of this test binary (leftovers are keyed by pid): it
/// exists, is not a zombie, and runs an executable named like this one (not a reused pid).
fn pid_alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S …": the state follows the last ')'.
    let zombie = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']));
    let exe = |p: &str| {
        fs::read_link(p)
            .ok()
            .and_then(|e| e.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default()
    };
    let theirs = exe(&format!("/proc/{pid}/exe"));
    let ours = exe("/proc/self/exe");
    let same_binary = |a: &str, b: &str| a.split('-').next() == b.split('-').next();
    !zombie && (theirs.is_empty() || same_binary(&theirs, &ours))
}

/// Removes what crashed runs left: `lht-<pid>-*` namespaces (killing what still runs in them),
/// table sets and status regions, work directories — of pids that no longer exist.
pub fn cleanup_leftovers() {
    let me = std::process::id();
    let dead = |name: &str| -> bool {
        let Some(rest) = name.strip_prefix("lht-") else {
            return false;
        };
        let pid: Option<u32> = rest.split('-').next().and_then(|p| p.parse().ok());
        pid.is_some_and(|p| p != me && !pid_alive(p))
    };
    if let Ok(list) = run_capture(&["ip", "netns", "list"]) {
        for line in list.lines() {
            let ns = line.split_whitespace().next().unwrap_or("");
            if dead(ns) {
                eprintln!("host tests: removing leftover namespace {ns}");
                kill_netns_pids(ns);
                let _ = run_capture(&["ip", "netns", "del", ns]);
            }
        }
    }
    for dir in [PathBuf::from(SHM), std::env::temp_dir()] {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let key = name.strip_prefix("lace-").unwrap_or(&name);
            if dead(key) {
                eprintln!("host tests: removing leftover {}", e.path().display());
                let _ = fs::remove_dir_all(e.path()).or_else(|_| fs::remove_file(e.path()));
            }
        }
    }
}

fn kill_netns_pids(ns: &str) {
    if let Ok(pids) = run_capture(&["ip", "netns", "pids", ns]) {
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: kill with a pid and a signal number has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

// ---- commands ------------------------------------------------------------------------------

/// Runs a command; Ok(stdout) on exit 0, Err(description with stderr) otherwise.
pub fn run_capture(argv: &[&str]) -> Result<String, String> {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", argv.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{}` failed ({}): {}{}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}

/// Runs a command that must succeed.
pub fn sh(argv: &[&str]) -> String {
    run_capture(argv).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a command given as one whitespace-separated string (no quoting), must succeed.
pub fn shs(cmd: &str) -> String {
    let v: Vec<&str> = cmd.split_whitespace().collect();
    sh(&v)
}

/// Runs `ip netns exec <ns> <cmd…>` (cmd whitespace-separated), must succeed — on this host
/// or in the guest `ns` lives in.
pub fn nsx(ns: &str, cmd: &str) -> String {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend(cmd.split_whitespace());
    guest::in_ns(ns, &v).unwrap_or_else(|e| panic!("{e}"))
}

/// `ip -n <ns> <args…>`, must succeed (on this host or in `ns`'s guest).
pub fn ipn(ns: &str, args: &str) -> String {
    let mut v = vec!["ip", "-n", ns];
    v.extend(args.split_whitespace());
    guest::in_ns(ns, &v).unwrap_or_else(|e| panic!("{e}"))
}

/// Sets sysctls inside a namespace (`key=value` pairs).
pub fn sysctl(ns: &str, kv: &[&str]) {
    let mut v = vec!["ip", "netns", "exec", ns, "sysctl", "-q", "-w"];
    v.extend(kv);
    guest::in_ns(ns, &v).unwrap_or_else(|e| panic!("{e}"));
}

/// Polls `f` every 100 ms until it yields a value; panics naming `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---- child processes ---------------------------------------------------------------------

/// A child process with its stdout+stderr in a log file; killed and reaped on drop, its log
/// printed if the test is panicking.
#[derive(Debug)]
pub struct Proc {
    /// What it is (for messages).
    pub name: String,
    child: Option<Child>,
    /// stdout and stderr.
    pub log: PathBuf,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Spawns `argv` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, argv: &[String], log: PathBuf) -> Proc {
        let f = File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let f2 = f.try_clone().expect("dup log fd");
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::from(f))
            .stderr(Stdio::from(f2));
        // If the test process dies without unwinding (SIGKILL, abort), its children die too
        // rather than keep forwarding in a namespace nobody deletes until the next run.
        // SAFETY: runs in the child between fork and exec and only calls prctl, which is
        // async-signal-safe; no allocation, no locks.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", argv.join(" ")));
        Proc {
            name: name.to_string(),
            child: Some(child),
            log,
            status: None,
        }
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Exit status if it has exited (reaping it).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(s)) = c.try_wait() {
                    self.status = Some(s);
                }
            }
        }
        self.status
    }

    /// Sends a signal (if still running).
    pub fn signal(&mut self, sig: i32) {
        if self.try_wait().is_none() {
            if let Some(pid) = self.pid() {
                // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
                unsafe { libc::kill(pid as i32, sig) };
            }
        }
    }

    /// Waits up to `timeout` for the exit.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.try_wait() {
                return Some(s);
            }
            if start.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `sig`, waits up to `timeout`, then SIGKILLs; returns the exit status and whether
    /// it exited by itself (before the SIGKILL).
    pub fn stop(&mut self, sig: i32, timeout: Duration) -> (ExitStatus, bool) {
        self.signal(sig);
        if let Some(s) = self.wait_timeout(timeout) {
            return (s, true);
        }
        self.signal(libc::SIGKILL);
        let s = self
            .child
            .as_mut()
            .expect("child")
            .wait()
            .expect("wait for killed child");
        self.status = Some(s);
        (s, false)
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its last `n` lines.
    pub fn log_tail(&self, n: usize) -> String {
        let t = self.log_text();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.is_some() && self.try_wait().is_none() {
            self.stop(libc::SIGTERM, Duration::from_secs(10));
        }
        if std::thread::panicking() {
            eprintln!(
                "----- {} ({}) log {} (last 80 lines) -----\n{}\n----- end {} -----",
                self.name,
                self.status.map_or("?".to_string(), |s| s.to_string()),
                self.log.display(),
                self.log_tail(80),
                self.name
            );
        }
    }
}

// ---- addressing plan ----------------------------------------------------------------------
//
// Node k (1 = a, 2 = b: forwarders; 3, 4: Linux peers). Network n (1 = red, 2 = blue).

/// A node's letter for names (`a`, `b`, `l3`, …).
pub fn node_label(k: u32) -> String {
    match k {
        1 => "a".into(),
        2 => "b".into(),
        _ => format!("l{k}"),
    }
}
/// Underlay address of node k.
pub fn underlay(k: u32) -> Ipv6Addr {
    format!("fd00:100::{k:x}").parse().unwrap()
}
/// SRv6 locator of node k (/48).
pub fn locator(k: u32) -> Ipv6Addr {
    format!("fc00:0:{k:x}::").parse().unwrap()
}
/// End.DT46 SID of forwarder node k for network n.
pub fn sid_dt46(k: u32, n: u32) -> Ipv6Addr {
    format!("fc00:0:{k:x}:e{n:03x}::").parse().unwrap()
}
/// End.DT6 SID of Linux node k (table main).
pub fn sid_dt6(k: u32) -> Ipv6Addr {
    format!("fc00:0:{k:x}:6::").parse().unwrap()
}
/// End.DX4 SID of Linux node k (toward its pod).
pub fn sid_dx4(k: u32) -> Ipv6Addr {
    format!("fc00:0:{k:x}:4::").parse().unwrap()
}
/// End.DX2 SID of Linux node k (its l2 pod's frames, out of `lp` whole).
pub fn sid_dx2(k: u32) -> Ipv6Addr {
    format!("fc00:0:{k:x}:2::").parse().unwrap()
}
/// End.DT2U SID of forwarder node k for l2 network n.
pub fn sid_dt2u(k: u32, n: u32) -> Ipv6Addr {
    format!("fc00:0:{k:x}:e020:0:{n:x}::").parse().unwrap()
}
/// End.DT2M SID of forwarder node k for l2 network n.
pub fn sid_dt2m(k: u32, n: u32) -> Ipv6Addr {
    format!("fc00:0:{k:x}:e02f:0:{n:x}::").parse().unwrap()
}
/// IPv4 address `i` in network n's block on node k (`.1` is the gateway).
pub fn pod4(n: u32, k: u32, i: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, n as u8, k as u8, i as u8)
}
/// IPv6 address `i` in network n's block on node k (`::1` is the gateway).
pub fn pod6(n: u32, k: u32, i: u32) -> Ipv6Addr {
    format!("fd{n:02x}:0:0:{k:x}::{i:x}").parse().unwrap()
}
/// MAC of pod i of network n on node k.
pub fn pod_mac(n: u32, k: u32, i: u32) -> MacAddr {
    MacAddr([0x02, 0, 0, n as u8, k as u8, i as u8])
}
/// The MAC of Linux node k's underlay NIC (a guest's; QEMU's prefix, locally administered).
pub fn linux_mac(k: u32) -> MacAddr {
    MacAddr([0x52, 0x54, 0, 0x1a, 0xce, k as u8])
}
/// The gateway MAC the forwarder of node k answers with for network n.
pub fn gateway_mac(n: u32, k: u32) -> MacAddr {
    MacAddr([0x02, 0x1a, 0xce, 0, k as u8, n as u8])
}

// ---- the lab ---------------------------------------------------------------------------------

/// A pod: a namespace with `eth0`, attached to a forwarder node (or to a Linux node).
#[derive(Debug, Clone)]
pub struct Pod {
    /// Namespace.
    pub ns: String,
    /// Node index.
    pub node: u32,
    /// Network id.
    pub net: u32,
    /// Host index in the node's block.
    pub idx: u32,
    /// Forwarder port (forwarder nodes).
    pub port: PortId,
    /// MAC of eth0.
    pub mac: MacAddr,
    /// IPv4 address.
    pub ip4: Ipv4Addr,
    /// IPv6 address.
    pub ip6: Ipv6Addr,
    /// Host-side interface in the node namespace.
    pub host_if: String,
}

/// A node run by a forwarder.
#[derive(Debug)]
pub struct FwdNode {
    /// Node index.
    pub k: u32,
    /// Node namespace (the forwarder runs there; `ul` is its uplink).
    pub ns: String,
    /// Table set name (`lht-<pid>-<seq>-a`).
    pub name: String,
    writer: Option<TableWriter>,
    /// The forwarder process, once started.
    pub fwd: Option<Proc>,
    next_port: u32,
}

impl FwdNode {
    /// Path of its status region.
    pub fn status_path(&self) -> PathBuf {
        status_path(Path::new(SHM), &self.name)
    }
}

/// A node whose data plane is the Linux kernel (seg6 / seg6local): an independent SRv6 peer.
#[derive(Debug)]
pub struct LinuxNode {
    /// Node index.
    pub k: u32,
    /// Namespace (`ul` to the underlay, `lp` to its pod).
    pub ns: String,
    /// Its one pod (network 1), reached via `lp`.
    pub pod: Pod,
}

/// An endpoint of an l2 network behind another node, as control compiles it for the
/// forwarder: its MAC and addresses, at that node's SID (the Linux interop test: a Linux
/// node's End.DX2 SID).
#[derive(Debug, Clone)]
pub struct RemoteL2 {
    /// Network id.
    pub net: u32,
    /// The node.
    pub node: u32,
    /// The SID its frames are sent to.
    pub sid: Ipv6Addr,
    /// Its MAC.
    pub mac: MacAddr,
    /// Its addresses.
    pub addrs: Vec<IpAddr>,
}

/// One test's topology. Dropping it stops every process, deletes every namespace (and with
/// them every veth and the bridge), table set, status region and (unless the test failed) the
/// work directory.
///
/// Field order is drop order where it matters: processes are stopped in `Drop::drop` first.
#[derive(Debug)]
pub struct Lab {
    /// `lht-<pid>-<seq>`.
    pub tag: String,
    /// Work directory (configs, logs, captures).
    pub dir: PathBuf,
    /// The underlay namespace (bridge `br0`, one port per node named by the node label).
    pub underlay_ns: String,
    /// Forwarder nodes.
    pub nodes: Vec<FwdNode>,
    /// Linux nodes.
    pub linux: Vec<LinuxNode>,
    /// Pods on forwarder nodes.
    pub pods: Vec<Pod>,
    /// Networks in the tables.
    pub nets: Vec<u32>,
    /// Those of them that are l2 networks (no routes: neighbor table, FDB, flood list).
    pub l2_nets: Vec<u32>,
    /// l2 endpoints behind other nodes, in every forwarder's FDB.
    pub l2_remote: Vec<RemoteL2>,
    /// `[pods] mechanism` of the forwarders (`packet_socket`, the default, or `af_packet`,
    /// which also attaches the uplink with DPDK's af_packet driver).
    pub mechanism: &'static str,
    /// Whether pods keep the kernel's checksum and segmentation offloads (large segments);
    /// off, they send MTU-sized frames with complete checksums.
    pub pod_offloads: bool,
    /// The forwarder nodes' own addresses on an external network through the uplink
    /// (`[[uplink.external]]`, one entry per VLAN): (node, VLAN (0: untagged),
    /// `address/prefix-length`).
    pub external: Vec<(u32, u16, &'static str)>,
    /// The uplinks of forwarder nodes 1 and 2 are one DPDK `net_memif` link between their
    /// processes (node 1 the server: start it first) that carries large frames (ADR 0055),
    /// instead of the underlay bridge.
    pub memif: bool,
    /// Linux peer guests (their namespaces are not in `netns`: they go with the guest).
    guests: Vec<std::sync::Arc<guest::Guest>>,
    netns: Vec<String>,
    shm: Vec<PathBuf>,
}

impl Lab {
    /// A new lab with just the underlay bridge.
    pub fn new(label: &str) -> Lab {
        let tag = format!(
            "lht-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(&tag);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("work dir");
        eprintln!("host test {label}: {tag}, work dir {}", dir.display());
        let mut lab = Lab {
            underlay_ns: format!("{tag}-u"),
            tag,
            dir,
            nodes: Vec::new(),
            linux: Vec::new(),
            pods: Vec::new(),
            nets: vec![1],
            l2_nets: Vec::new(),
            l2_remote: Vec::new(),
            mechanism: "packet_socket",
            pod_offloads: false,
            external: Vec::new(),
            memif: false,
            guests: Vec::new(),
            netns: Vec::new(),
            shm: Vec::new(),
        };
        let u = lab.underlay_ns.clone();
        lab.add_netns(&u);
        sysctl(
            &u,
            &[
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
        );
        ipn(&u, "link add br0 type bridge stp_state 0 mcast_snooping 0");
        ipn(&u, "link set br0 up");
        lab
    }

    fn add_netns(&mut self, ns: &str) {
        sh(&["ip", "netns", "add", ns]);
        self.netns.push(ns.to_string());
        ipn(ns, "link set lo up");
    }

    /// A veth from `ns` (named `name`) to a bridge port `port` in the underlay namespace.
    fn underlay_link(&mut self, ns: &str, name: &str, port: &str) {
        let u = self.underlay_ns.clone();
        sh(&[
            "ip", "link", "add", "name", name, "netns", ns, "mtu", "1500", "type", "veth", "peer",
            "name", port, "netns", &u, "mtu", "1500",
        ]);
        ipn(&u, &format!("link set dev {port} master br0"));
        ipn(&u, &format!("link set dev {port} up"));
    }

    /// Adds forwarder node k: namespace `<tag>-n<label>` with uplink `ul` on the bridge (port
    /// named by the node label), IPv6 off on `ul` so that the forwarder alone is the IPv6 host.
    pub fn add_fwd_node(&mut self, k: u32) {
        let ns = format!("{}-n{}", self.tag, node_label(k));
        self.add_netns(&ns);
        // Kernel stays silent on every interface of the node namespace (uplink, pod host ends).
        sysctl(
            &ns,
            &[
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
        );
        self.underlay_link(&ns, "ul", &node_label(k));
        sysctl(&ns, &["net.ipv6.conf.ul.disable_ipv6=1"]);
        nsx(&ns, "ethtool -K ul tx off tso off gso off gro off");
        ipn(&ns, "link set ul up");
        let name = format!("{}-{}", self.tag, node_label(k));
        for ext in ["tables", "qsbr", "status", "flows"] {
            self.shm
                .push(Path::new(SHM).join(format!("lace-{name}.{ext}")));
        }
        self.nodes.push(FwdNode {
            k,
            ns,
            name,
            writer: None,
            fwd: None,
            next_port: 1,
        });
    }

    /// Forwarder node k.
    pub fn node(&self, k: u32) -> &FwdNode {
        self.nodes.iter().find(|n| n.k == k).expect("no such node")
    }
    fn node_mut(&mut self, k: u32) -> &mut FwdNode {
        self.nodes
            .iter_mut()
            .find(|n| n.k == k)
            .expect("no such node")
    }

    /// Creates a pod namespace with `eth0` (MAC, MTU, /32 and /128, default routes via the
    /// gateway) whose peer `host_if` is in `host_ns`, up, IPv6 off.
    #[allow(clippy::too_many_arguments)]
    fn make_pod_ns(
        &mut self,
        ns: &str,
        host_ns: &str,
        host_if: &str,
        mac: MacAddr,
        ip4: Ipv4Addr,
        ip6: Ipv6Addr,
        gw4: Ipv4Addr,
        gw6: Ipv6Addr,
        host_plen: (u8, u8),
    ) {
        match guest::of(host_ns) {
            Some(g) => {
                g.add_netns(ns);
                ipn(ns, "link set lo up");
            }
            None => self.add_netns(ns),
        }
        guest::in_ns(
            host_ns,
            &[
                "ip", "link", "add", "name", "eth0", "netns", ns, "type", "veth", "peer", "name",
                host_if, "netns", host_ns,
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mtu = POD_MTU;
        ipn(ns, &format!("link set eth0 address {mac} mtu {mtu}"));
        ipn(host_ns, &format!("link set dev {host_if} mtu {mtu}"));
        sysctl(
            ns,
            &[
                "net.ipv6.conf.eth0.accept_dad=0",
                "net.ipv6.conf.eth0.router_solicitations=0",
                "net.ipv6.conf.all.accept_ra=0",
            ],
        );
        // Off: the pod's kernel checksums and segments in software, so frames leave eth0
        // complete and MTU-sized (what the af_packet mechanism needs). On: large segments
        // with partial checksums both ways (the packet_socket mechanism takes them).
        let state = if self.pod_offloads { "on" } else { "off" };
        nsx(
            ns,
            &format!("ethtool -K eth0 tx {state} tso {state} gso {state} gro {state}"),
        );
        nsx(
            host_ns,
            &format!("ethtool -K {host_if} tx {state} tso {state} gso {state} gro {state}"),
        );
        ipn(ns, "link set eth0 up");
        ipn(host_ns, &format!("link set dev {host_if} up"));
        let (p4, p6) = host_plen;
        ipn(ns, &format!("addr add {ip4}/{p4} dev eth0"));
        ipn(ns, &format!("-6 addr add {ip6}/{p6} dev eth0 nodad"));
        if p4 == 32 {
            ipn(ns, &format!("route add {gw4} dev eth0 scope link"));
        }
        ipn(ns, &format!("route add default via {gw4} dev eth0"));
        if p6 == 128 {
            ipn(ns, &format!("-6 route add {gw6} dev eth0"));
        }
        ipn(ns, &format!("-6 route add default via {gw6} dev eth0"));
    }

    /// Adds pod `idx` of network `net` to forwarder node k (a port in its tables once
    /// published). Returns the pod.
    pub fn add_pod(&mut self, k: u32, net: u32, idx: u32) -> Pod {
        self.add_pod_with(k, net, idx, (32, 128))
    }

    fn add_pod_with(&mut self, k: u32, net: u32, idx: u32, plen: (u8, u8)) -> Pod {
        if !self.nets.contains(&net) {
            self.nets.push(net);
        }
        let node_ns = self.node(k).ns.clone();
        let port = {
            let n = self.node_mut(k);
            let p = n.next_port;
            n.next_port += 1;
            PortId(p)
        };
        let pod = Pod {
            ns: format!("{}-p{}{}x{}", self.tag, node_label(k), net, idx),
            node: k,
            net,
            idx,
            port,
            mac: pod_mac(net, k, idx),
            ip4: pod4(net, k, idx),
            ip6: pod6(net, k, idx),
            host_if: format!("v{net}x{idx}"),
        };
        self.make_pod_ns(
            &pod.ns,
            &node_ns,
            &pod.host_if,
            pod.mac,
            pod.ip4,
            pod.ip6,
            pod4(net, k, 1),
            pod6(net, k, 1),
            plen,
        );
        self.pods.push(pod.clone());
        pod
    }

    /// Adds pod `idx` of l2 network `net` to forwarder node k: its addresses carry the
    /// network's prefix length (10.n.0.0/16, fdnn::/48: one L2 domain).
    pub fn add_l2_pod(&mut self, k: u32, net: u32, idx: u32) -> Pod {
        if !self.l2_nets.contains(&net) {
            self.l2_nets.push(net);
        }
        self.add_pod_with(k, net, idx, (16, 48))
    }

    /// Removes pod `pod` from its node: its port and routes leave the tables (published: the
    /// forwarder unplugs it) and its namespace goes, taking the veth along.
    pub fn remove_pod(&mut self, pod: &Pod) {
        let k = pod.node;
        let node = self.node_mut(k);
        let w = node.writer.as_mut().expect("tables written");
        let net = NetworkId(pod.net);
        w.remove_port(pod.port)
            .unwrap_or_else(|e| panic!("remove port {}: {e}", pod.port.0));
        let _ = w.remove_route(net, IpAddr::V4(pod.ip4), 32);
        let _ = w.remove_route(net, IpAddr::V6(pod.ip6), 128);
        w.publish()
            .unwrap_or_else(|e| panic!("publish tables of node {k}: {e}"));
        self.pods.retain(|p| p.ns != pod.ns);
        kill_netns_pids(&pod.ns);
        if let Err(e) = run_capture(&["ip", "netns", "del", &pod.ns]) {
            panic!("removing {}: {e}", pod.ns);
        }
        self.netns.retain(|n| *n != pod.ns);
    }

    /// Linux node k's namespace `<tag>-n<label>`, inside a guest of its own (Debian's kernel:
    /// see `guest`) whose NIC is the node's underlay bridge port: `ul` at `underlay(k)`,
    /// routing and SRv6 on, the SRv6 source address set. Returns the namespace.
    fn linux_node_base(&mut self, k: u32) -> String {
        let ns = format!("{}-n{}", self.tag, node_label(k));
        let port = node_label(k);
        let u = self.underlay_ns.clone();
        let g = guest::Guest::boot(&port, &self.dir, &u, &port, linux_mac(k));
        self.guests.push(g.clone());
        ipn(&u, &format!("link set dev {port} master br0"));
        ipn(&u, &format!("link set dev {port} up"));
        g.add_netns(&ns);
        for cmd in [
            vec!["ip", "link", "set", "eth0", "netns", &ns],
            vec!["ip", "-n", &ns, "link", "set", "eth0", "name", "ul"],
            vec!["ip", "-n", &ns, "link", "set", "lo", "up"],
        ] {
            g.run(&cmd).unwrap_or_else(|e| panic!("{e}"));
        }
        sysctl(
            &ns,
            &[
                "net.ipv4.ip_forward=1",
                "net.ipv6.conf.all.forwarding=1",
                "net.ipv6.conf.all.seg6_enabled=1",
                "net.ipv6.conf.default.seg6_enabled=1",
                "net.ipv6.conf.all.accept_dad=0",
                "net.ipv6.conf.default.accept_dad=0",
                "net.ipv4.conf.all.rp_filter=0",
                "net.ipv4.conf.default.rp_filter=0",
            ],
        );
        nsx(&ns, "ethtool -K ul tx off tso off gso off gro off");
        sysctl(&ns, &["net.ipv6.conf.ul.seg6_enabled=1"]);
        ipn(&ns, "link set ul up");
        ipn(&ns, &format!("-6 addr add {}/64 dev ul nodad", underlay(k)));
        ipn(&ns, &format!("sr tunsrc set {}", underlay(k)));
        ns
    }

    /// Adds Linux node k: the kernel's SRv6 on the underlay (address `underlay(k)`), with
    /// End.DT6 (table main) and End.DX4 (toward its pod) SIDs, and one pod of network 1 behind
    /// `lp` (10.1.k.2/24, fd01:0:0:k::2/64, gateway .1 on `lp`).
    pub fn add_linux_node(&mut self, k: u32) -> Pod {
        let ns = self.linux_node_base(k);
        let pod = Pod {
            ns: format!("{}-p{}1x2", self.tag, node_label(k)),
            node: k,
            net: 1,
            idx: 2,
            port: PortId(0),
            mac: pod_mac(1, k, 2),
            ip4: pod4(1, k, 2),
            ip6: pod6(1, k, 2),
            host_if: "lp".into(),
        };
        self.make_pod_ns(
            &pod.ns,
            &ns,
            "lp",
            pod.mac,
            pod.ip4,
            pod.ip6,
            pod4(1, k, 1),
            pod6(1, k, 1),
            (24, 64),
        );
        // Routes of a Linux node toward a forwarder may use `mode encap` (with an SRH: 40 + 8 +
        // 16 bytes), so its pod's MTU leaves room for that, as the operator of such a node sets
        // it: the kernel's seg6 does not fit a full-sized forwarded packet in the underlay.
        let mtu = UNDERLAY_MTU - 64;
        ipn(&pod.ns, &format!("link set eth0 mtu {mtu}"));
        ipn(&ns, &format!("link set lp mtu {mtu}"));
        sysctl(&ns, &["net.ipv6.conf.lp.disable_ipv6=0"]);
        ipn(&ns, &format!("addr add {}/24 dev lp", pod4(1, k, 1)));
        ipn(
            &ns,
            &format!("-6 addr add {}/64 dev lp nodad", pod6(1, k, 1)),
        );
        // The SIDs, exactly as an operator would configure a Linux SRv6 endpoint.
        ipn(
            &ns,
            &format!(
                "-6 route add {}/128 encap seg6local action End.DT6 table 254 dev ul",
                sid_dt6(k)
            ),
        );
        ipn(
            &ns,
            &format!(
                "-6 route add {}/128 encap seg6local action End.DX4 nh4 {} dev lp",
                sid_dx4(k),
                pod.ip4
            ),
        );
        self.linux.push(LinuxNode {
            k,
            ns,
            pod: pod.clone(),
        });
        pod
    }

    /// Adds Linux node k as a peer of l2 network `net` (the kernel's own SRv6 L2 VPN, as its
    /// selftests set it up): a pod behind `lp` (MAC, addresses of the network, a static
    /// neighbor entry for `peer`), an End.DX2 SID that sends decapsulated frames out of `lp`
    /// whole, and `encap seg6 mode l2encap.red` routes that carry the pod's frames to `peer`
    /// whole to `peer`'s node's End.DT2U SID. The kernel routes (and so encapsulates) only
    /// frames addressed to its own MAC, so `lp` takes `peer`'s MAC — the pod's frames to `peer`
    /// are then the ones it encapsulates. Registers the pod as an l2 endpoint behind this node
    /// (its End.DX2 SID) for the forwarders' tables.
    pub fn add_linux_l2_node(&mut self, k: u32, net: u32, peer: &Pod) -> Pod {
        let ns = self.linux_node_base(k);
        let pod = Pod {
            ns: format!("{}-p{}{}x2", self.tag, node_label(k), net),
            node: k,
            net,
            idx: 2,
            port: PortId(0),
            mac: pod_mac(net, k, 2),
            ip4: pod4(net, k, 2),
            ip6: pod6(net, k, 2),
            host_if: "lp".into(),
        };
        self.make_pod_ns(
            &pod.ns,
            &ns,
            "lp",
            pod.mac,
            pod.ip4,
            pod.ip6,
            pod4(net, 0, 1),
            pod6(net, 0, 1),
            (16, 48),
        );
        sysctl(
            &ns,
            &[
                "net.ipv6.conf.lp.disable_ipv6=0",
                "net.ipv4.conf.lp.rp_filter=0",
            ],
        );
        ipn(&ns, &format!("link set dev lp address {}", peer.mac));
        // Where the peer's frames come from: its node's locator over the underlay.
        ipn(
            &ns,
            &format!(
                "-6 route add {}/48 via {} dev ul",
                locator(peer.node),
                underlay(peer.node)
            ),
        );
        let dt2u = sid_dt2u(peer.node, net);
        ipn(
            &ns,
            &format!(
                "route add {}/32 encap seg6 mode l2encap.red segs {dt2u} dev ul",
                peer.ip4
            ),
        );
        ipn(
            &ns,
            &format!(
                "-6 route add {}/128 encap seg6 mode l2encap.red segs {dt2u} dev ul",
                peer.ip6
            ),
        );
        ipn(
            &ns,
            &format!(
                "-6 route add {}/128 encap seg6local action End.DX2 oif lp dev ul",
                sid_dx2(k)
            ),
        );
        // Static neighbours on the Linux side: ARP and NDP never cross the underlay.
        for ip in [IpAddr::V4(peer.ip4), IpAddr::V6(peer.ip6)] {
            ipn(
                &pod.ns,
                &format!(
                    "neigh replace {ip} lladdr {} nud permanent dev eth0",
                    peer.mac
                ),
            );
        }
        self.l2_remote.push(RemoteL2 {
            net,
            node: k,
            sid: sid_dx2(k),
            mac: pod.mac,
            addrs: vec![IpAddr::V4(pod.ip4), IpAddr::V6(pod.ip6)],
        });
        self.linux.push(LinuxNode {
            k,
            ns,
            pod: pod.clone(),
        });
        pod
    }

    /// On Linux node `k`: reach node `peer`'s locator over the underlay and encapsulate traffic
    /// for `prefix` (v4 or v6) toward `sid` with `encap seg6 mode <mode>`: `encap` (H.Encaps:
    /// the kernel adds an SRH even for one segment, Segments Left 0) or `encap.red`
    /// (H.Encaps.Red: no SRH).
    pub fn linux_encap(&self, k: u32, peer: u32, prefix: &str, sid: Ipv6Addr, mode: &str) {
        let ns = &self.linux.iter().find(|l| l.k == k).expect("linux node").ns;
        let loc_route = format!("{}/48", locator(peer));
        let routes = ipn(ns, "-6 route show");
        if !routes.contains(&format!("{loc_route} ")) {
            ipn(
                ns,
                &format!("-6 route add {loc_route} via {} dev ul", underlay(peer)),
            );
        }
        let fam = if prefix.contains(':') { "-6" } else { "-4" };
        ipn(
            ns,
            &format!("{fam} route add {prefix} encap seg6 mode {mode} segs {sid} dev ul"),
        );
    }

    /// Adds to node k's published tables what `f` writes (what the lab does not make itself:
    /// external networks, their sources tables, routes out of the uplink), and publishes.
    pub fn tables(&mut self, k: u32, f: impl FnOnce(&mut TableWriter)) {
        let w = self
            .node_mut(k)
            .writer
            .as_mut()
            .unwrap_or_else(|| panic!("node {k}'s tables are published at start"));
        f(w);
        w.publish()
            .unwrap_or_else(|e| panic!("publish tables of node {k}: {e}"));
    }

    /// A router outside the cluster on 802.1Q VLANs of the underlay: a Linux guest (this
    /// kernel may have no 802.1Q devices; the guest's has) whose NIC is the bridge port named
    /// by `label`, with one namespace per VLAN holding that VLAN's device `v<vlan>` of MAC
    /// `mac`, up and without addresses. Returns the namespaces, in `vlans`' order.
    pub fn add_vlan_router(&mut self, label: &str, vlans: &[(u16, MacAddr)]) -> Vec<String> {
        let u = self.underlay_ns.clone();
        let g = guest::Guest::boot(label, &self.dir, &u, label, MacAddr([2, 0xee, 0, 0, 0, 0]));
        self.guests.push(g.clone());
        ipn(&u, &format!("link set dev {label} master br0"));
        ipn(&u, &format!("link set dev {label} up"));
        g.run(&["ip", "link", "set", "eth0", "up"])
            .unwrap_or_else(|e| panic!("{e}"));
        vlans
            .iter()
            .map(|&(vlan, mac)| {
                let ns = format!("{}-r{vlan}", self.tag);
                let dev = format!("v{vlan}");
                g.add_netns(&ns);
                for cmd in [
                    vec![
                        "ip".to_owned(),
                        "link".into(),
                        "add".into(),
                        "link".into(),
                        "eth0".into(),
                        "name".into(),
                        dev.clone(),
                        "address".into(),
                        mac.to_string(),
                        "type".into(),
                        "vlan".into(),
                        "id".into(),
                        vlan.to_string(),
                    ],
                    vec![
                        "ip".into(),
                        "link".into(),
                        "set".into(),
                        dev.clone(),
                        "netns".into(),
                        ns.clone(),
                    ],
                ] {
                    let argv: Vec<&str> = cmd.iter().map(String::as_str).collect();
                    g.run(&argv).unwrap_or_else(|e| panic!("{e}"));
                }
                ipn(&ns, "link set lo up");
                ipn(&ns, &format!("link set {dev} up"));
                ns
            })
            .collect()
    }

    /// Writes (creating on first use) and publishes node k's tables from the lab's model:
    /// networks with this node's gateway, its pods as ports with /32 and /128 routes, the other
    /// forwarder nodes' blocks via their End.DT46 SIDs, Linux nodes' pod prefixes via their
    /// End.DX4 (IPv4) and End.DT6 (IPv6) SIDs, and this node's End.DT46 SIDs.
    pub fn publish(&mut self, k: u32) {
        let nets = self.nets.clone();
        let (l2_nets, l2_remote) = (self.l2_nets.clone(), self.l2_remote.clone());
        let pods: Vec<Pod> = self.pods.iter().filter(|p| p.node == k).cloned().collect();
        let others: Vec<u32> = self.nodes.iter().map(|n| n.k).filter(|&j| j != k).collect();
        let linux: Vec<u32> = self.linux.iter().map(|l| l.k).collect();
        let node = self.node_mut(k);
        if node.writer.is_none() {
            let cfg = TablesConfig {
                dir: PathBuf::from(SHM),
                name: node.name.clone(),
                size: 64 << 20,
                reader_slots: 16,
            };
            let _ = fs::remove_file(cfg.tables_path());
            let _ = fs::remove_file(cfg.qsbr_path());
            node.writer =
                Some(TableWriter::create(&cfg).unwrap_or_else(|e| panic!("create tables: {e}")));
        }
        let w = node.writer.as_mut().unwrap();
        let ok = |r: lace_shared::Result<()>, what: &str| {
            r.unwrap_or_else(|e| panic!("tables of node {k}: {what}: {e}"))
        };
        // What control publishes with the node's underlay address: the outer source.
        ok(w.set_srv6_source(underlay(k)), "set_srv6_source");
        for &n in &nets {
            let net = NetworkId(n);
            if l2_nets.contains(&n) {
                publish_l2(w, k, n, &pods, &l2_remote);
                continue;
            }
            ok(
                w.set_network(
                    net,
                    &NetworkInfo {
                        kind: NetworkKind::L3,
                        anonymous: false,
                        gateway_mac: gateway_mac(n, k),
                        gateway4: Some(pod4(n, k, 1)),
                        gateway6: Some(pod6(n, k, 1)),
                        mtu: POD_MTU as u16,
                        stateful: false,
                        l2: L2Settings::default(),
                    },
                ),
                "set_network",
            );
            ok(
                w.set_local_sid(Sid(sid_dt46(k, n)), SidBehavior::EndDt46(net)),
                "set_local_sid",
            );
            for &j in &others {
                let hop = NextHop::Remote {
                    node: NodeId(j),
                    sid: Sid(sid_dt46(j, n)),
                };
                ok(w.add_route(net, pod4(n, j, 0).into(), 24, hop), "route4");
                ok(w.add_route(net, pod6(n, j, 0).into(), 64, hop), "route6");
            }
            if n == 1 {
                for &j in &linux {
                    let dx4 = NextHop::Remote {
                        node: NodeId(j),
                        sid: Sid(sid_dx4(j)),
                    };
                    let dt6 = NextHop::Remote {
                        node: NodeId(j),
                        sid: Sid(sid_dt6(j)),
                    };
                    ok(w.add_route(net, pod4(1, j, 0).into(), 24, dx4), "route4");
                    ok(w.add_route(net, pod6(1, j, 0).into(), 64, dt6), "route6");
                }
            }
        }
        for &j in others.iter().chain(&linux) {
            ok(
                w.set_node(
                    NodeId(j),
                    &NodeInfo {
                        locator: locator(j),
                        locator_len: 48,
                        underlay: underlay(j),
                    },
                ),
                "set_node",
            );
        }
        for p in &pods {
            let net = NetworkId(p.net);
            ok(
                w.set_port(
                    p.port,
                    &PortInfo {
                        kind: PortKind::Pod,
                        network: net,
                        mac: p.mac,
                        ipv4: Some(p.ip4),
                        ipv6: Some(p.ip6),
                        endpoint: endpoint_id(p),
                        iface: IfName::new(&p.host_if).unwrap(),
                        policy: lace_shared::policy::PolicySetId::NONE,
                        transit: false,
                    },
                ),
                "set_port",
            );
            if l2_nets.contains(&p.net) {
                continue;
            }
            let hop = NextHop::Local {
                port: p.port,
                mac: p.mac,
            };
            ok(w.add_route(net, IpAddr::V4(p.ip4), 32, hop), "pod route4");
            ok(w.add_route(net, IpAddr::V6(p.ip6), 128, hop), "pod route6");
        }
        w.publish()
            .unwrap_or_else(|e| panic!("publish tables of node {k}: {e}"));
    }

    /// The forwarder configuration file of node k.
    pub fn write_config(&self, k: u32) -> PathBuf {
        let node = self.node(k);
        let path = self.dir.join(format!("{}.toml", node_label(k)));
        let mut vlans: Vec<u16> = self
            .external
            .iter()
            .filter(|(n, _, _)| *n == k)
            .map(|&(_, v, _)| v)
            .collect();
        vlans.dedup();
        let external: Vec<String> = vlans
            .iter()
            .map(|&vlan| {
                let addrs: Vec<String> = self
                    .external
                    .iter()
                    .filter(|&&(n, v, _)| n == k && v == vlan)
                    .map(|(_, _, a)| format!("\"{a}\""))
                    .collect();
                let tag = match vlan {
                    0 => String::new(),
                    v => format!("vlan = {v}\n"),
                };
                format!(
                    "\n[[uplink.external]]\n{tag}addresses = [{}]\n",
                    addrs.join(", ")
                )
            })
            .collect();
        let mut text = format!(
            r#"name = "{name}"
tables_dir = "{SHM}"

[eal]
memory = "no-huge"
memory_mb = 256

[uplink]
device = "{device}"
address = "{ul}"
mtu = {UNDERLAY_MTU}
large_frames = {memif}

[srv6]
hop_limit = 64

[workers]
count = 1
polling = "adaptive"

[pods]
mechanism = "{mechanism}"
"#,
            name = node.name,
            ul = underlay(k),
            mechanism = self.mechanism,
            memif = self.memif,
            device = match (self.memif, self.mechanism) {
                (true, _) => format!(
                    "net_memif0,role={},id=0,socket={},socket-abstract=no,{}",
                    if k == 1 { "server" } else { "client" },
                    self.dir.join("underlay.memif").display(),
                    lace_forwarder::engine::MEMIF_LARGE_FRAMES
                ),
                (false, "packet_socket") => "ul".to_owned(),
                (false, _) => "net_af_packet0,iface=ul".to_owned(),
            },
        );
        text.push_str(&external.concat());
        fs::write(&path, text).expect("write config");
        path
    }

    /// Publishes node k's tables, starts its forwarder in the node namespace and waits until
    /// it runs and every pod port is up.
    pub fn start(&mut self, k: u32) {
        self.publish(k);
        let cfg = self.write_config(k);
        let bin = forwarder_bin();
        let node = self.node(k);
        let argv: Vec<String> = vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            node.ns.clone(),
            bin.display().to_string(),
            "run".into(),
            "--config".into(),
            cfg.display().to_string(),
        ];
        let log = self.dir.join(format!("forwarder-{}.log", node_label(k)));
        let proc = Proc::spawn(&format!("forwarder {}", node_label(k)), &argv, log);
        self.node_mut(k).fwd = Some(proc);
        self.wait_running(k);
    }

    /// Waits for node k's forwarder: status region present, state Running, every pod port Up
    /// for the endpoint requested. A forwarder that exits or a port that fails ends the wait
    /// with the reason.
    pub fn wait_running(&mut self, k: u32) {
        let ports: Vec<(PortId, u64, String)> = self
            .pods
            .iter()
            .filter(|p| p.node == k)
            .map(|p| (p.port, endpoint_id(p), p.host_if.clone()))
            .collect();
        let path = self.node(k).status_path();
        let mut last;
        let start = Instant::now();
        loop {
            let node = self.node_mut(k);
            let fwd = node.fwd.as_mut().expect("forwarder started");
            if let Some(s) = fwd.try_wait() {
                panic!(
                    "forwarder of node {k} exited during start-up ({s}); log:\n{}",
                    fwd.log_tail(60)
                );
            }
            if let Ok(r) = StatusReader::open(&path) {
                let state = r.state();
                let mut pending = Vec::new();
                for (port, ep, ifname) in &ports {
                    match r.port(*port) {
                        Some(ps) if ps.state == PortState::Up && ps.endpoint == *ep => {}
                        // Failed may be transient (the forwarder retries): keep waiting, and
                        // report the last state if it never comes up.
                        Some(ps) => pending.push(format!("{}({ifname}):{:?}", port.0, ps.state)),
                        None => pending.push(format!("{}({ifname}):none", port.0)),
                    }
                }
                if state == RunState::Running && pending.is_empty() {
                    return;
                }
                last = format!("state {state:?}, ports not up: {}", pending.join(" "));
            } else {
                last = format!("no status region at {}", path.display());
            }
            if start.elapsed() > WAIT {
                panic!(
                    "node {k}: forwarder not running with its ports up after {WAIT:?}: {last}\n{}",
                    status_report(&path)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The status region of node k.
    pub fn status(&self, k: u32) -> StatusReader {
        let path = self.node(k).status_path();
        StatusReader::open(&path).unwrap_or_else(|e| panic!("status of node {k}: {e}"))
    }

    /// Drops of one reason at node k.
    pub fn drops(&self, k: u32, r: DropReason) -> u64 {
        self.status(k).drops(r)
    }

    /// Status of every forwarder plus kernel views, for failure messages.
    pub fn diagnose(&self) -> String {
        let mut s = String::new();
        for n in &self.nodes {
            let _ = writeln!(
                s,
                "== node {} ({}) status ==\n{}",
                node_label(n.k),
                n.name,
                status_report(&n.status_path())
            );
            if let Some(bin) = option_env!("CARGO_BIN_EXE_lace-forwarder") {
                let _ = writeln!(
                    s,
                    "== node {} `lace-forwarder stats` ==\n{}",
                    node_label(n.k),
                    run_capture(&[bin, "stats", "--name", &n.name, "--tables-dir", SHM])
                        .unwrap_or_else(|e| e)
                );
            }
            let _ = writeln!(
                s,
                "== node {} links ==\n{}",
                node_label(n.k),
                run_capture(&["ip", "-n", &n.ns, "-s", "-br", "link"]).unwrap_or_else(|e| e)
            );
        }
        for p in &self.pods {
            let _ = writeln!(
                s,
                "== pod {} neighbors ==\n{}",
                p.ns,
                run_capture(&["ip", "-n", &p.ns, "neigh"]).unwrap_or_else(|e| e)
            );
        }
        for l in &self.linux {
            let _ = writeln!(
                s,
                "== linux node {} neighbors/routes ==\n{}{}",
                l.ns,
                guest::in_ns(&l.ns, &["ip", "-n", &l.ns, "-6", "neigh"]).unwrap_or_else(|e| e),
                guest::in_ns(&l.ns, &["ip", "-n", &l.ns, "-6", "route"]).unwrap_or_else(|e| e)
            );
        }
        s
    }

    /// Stops node k's forwarder with SIGTERM; returns its exit status and whether it stopped
    /// by itself within the timeout.
    pub fn stop(&mut self, k: u32) -> (ExitStatus, bool) {
        let fwd = self.node_mut(k).fwd.as_mut().expect("forwarder started");
        fwd.stop(libc::SIGTERM, Duration::from_secs(20))
    }

    /// A path in the work directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!(
                "===== lab {} diagnosis =====\n{}",
                self.tag,
                self.diagnose()
            );
        }
        // Processes first (they keep namespaces alive), then the writers, then the rest.
        for n in &mut self.nodes {
            n.fwd.take();
        }
        for n in &mut self.nodes {
            n.writer.take();
        }
        for g in self.guests.drain(..) {
            g.unregister();
            if panicking {
                eprintln!("{}", g.log());
            }
            g.stop();
        }
        for ns in self.netns.iter().rev() {
            kill_netns_pids(ns);
            if let Err(e) = run_capture(&["ip", "netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
        for f in &self.shm {
            let _ = fs::remove_file(f);
        }
        if panicking {
            eprintln!("work directory kept: {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Endpoint id of a pod (unique per lab).
pub fn endpoint_id(p: &Pod) -> u64 {
    0x1ace_0000_0000 | u64::from(p.node) << 16 | u64::from(p.net) << 8 | u64::from(p.idx)
}

/// A human-readable dump of a status region: state, ports, stages, non-zero drops.
pub fn status_report(path: &Path) -> String {
    let r = match StatusReader::open(path) {
        Ok(r) => r,
        Err(e) => return format!("(no status region: {e})"),
    };
    let mut s = format!(
        "state {:?} alive {} pid {} generation {} workers {}\n",
        r.state(),
        r.alive(),
        r.pid(),
        r.generation(),
        r.workers()
    );
    for p in r.ports() {
        let c = p.counters;
        let _ = writeln!(
            s,
            "  port {:>3} {:?} endpoint {:#x}: rx {} pkts/{} B, tx {} pkts/{} B, refused {}",
            p.port.0, p.state, p.endpoint, c[0], c[1], c[2], c[3], c[4]
        );
    }
    let stages: Vec<String> = r
        .stage_names()
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{n}={}", r.stage_total(i)))
        .collect();
    let _ = writeln!(s, "  stages: {}", stages.join(" "));
    let drops: Vec<String> = r
        .all_drops()
        .into_iter()
        .filter(|&(_, n)| n != 0)
        .map(|(d, n)| format!("{d}={n}"))
        .collect();
    let _ = writeln!(s, "  drops: {}", drops.join(" "));
    s
}

// ---- traffic -------------------------------------------------------------------------------

/// Result of one `ping` run.
#[derive(Debug, Clone)]
pub struct PingResult {
    /// Exit status 0.
    pub ok: bool,
    /// Echo requests sent.
    pub transmitted: u32,
    /// Replies received.
    pub received: u32,
    /// Its output.
    pub output: String,
}

/// `ping [-6] -c count -i 0.2 -W 2 [-I src] dst` in a namespace.
pub fn ping(ns: &str, dst: IpAddr, count: u32, src: Option<IpAddr>) -> PingResult {
    let src = src.map(|s| s.to_string());
    let extra: Vec<&str> = match &src {
        Some(s) => vec!["-I", s],
        None => vec![],
    };
    ping_with(ns, dst, count, &extra)
}

/// `ping [-6] -c count -i 0.2 -W 2 <extra…> dst` in a namespace.
pub fn ping_with(ns: &str, dst: IpAddr, count: u32, extra: &[&str]) -> PingResult {
    let mut argv: Vec<String> = ["ip", "netns", "exec", ns, "ping", "-n"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if dst.is_ipv6() {
        argv.push("-6".into());
    }
    argv.extend(
        ["-c", &count.to_string(), "-i", "0.2", "-W", "2"]
            .iter()
            .map(|s| s.to_string()),
    );
    argv.push("-w".into());
    argv.push((count * 2 + 2).to_string());
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv.push(dst.to_string());
    let (ok, output) = match guest::of(ns) {
        Some(g) => {
            let v: Vec<&str> = argv.iter().map(String::as_str).collect();
            let (rc, out) = g.run_status(&v);
            (rc == 0, out)
        }
        None => {
            let out = Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::null())
                .output()
                .expect("run ping");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.success(), text)
        }
    };
    let stat = |word: &str| -> u32 {
        output
            .lines()
            .find(|l| l.contains("packets transmitted"))
            .and_then(|l| {
                l.split(',')
                    .find(|f| f.contains(word))
                    .and_then(|f| f.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or(0)
    };
    PingResult {
        ok,
        transmitted: stat("transmitted"),
        received: stat("received"),
        output,
    }
}

/// Pings until neighbor resolution has happened (one reply, up to `tries` single pings), then
/// requires `count` of `count` replies (retrying the round up to 3 times: the machine is
/// noisy). Panics with the last output and `diag()` on failure.
pub fn ping_ok(ns: &str, dst: IpAddr, count: u32, diag: impl Fn() -> String) {
    let mut last = String::new();
    let mut warm = false;
    for _ in 0..10 {
        let r = ping(ns, dst, 1, None);
        last = r.output;
        if r.received > 0 {
            warm = true;
            break;
        }
    }
    if !warm {
        panic!(
            "ping from {ns} to {dst}: no reply in 10 attempts; last output:\n{last}\n{}",
            diag()
        );
    }
    for _ in 0..3 {
        let r = ping(ns, dst, count, None);
        if r.received == count {
            return;
        }
        last = r.output;
    }
    panic!(
        "ping from {ns} to {dst}: fewer than {count}/{count} replies in 3 rounds; last:\n{last}\n{}",
        diag()
    );
}

/// l2 network `n` in forwarder node k's tables, as control compiles it: the local pods' ports,
/// every endpoint's MAC and addresses (local ports, remote endpoints at their SIDs), the
/// flood list (local ports), this node's End.DT2U and End.DT2M SIDs. No learning, no BUM
/// limit.
fn publish_l2(w: &mut TableWriter, k: u32, n: u32, pods: &[Pod], remote: &[RemoteL2]) {
    let ok = |r: lace_shared::Result<()>, what: &str| {
        r.unwrap_or_else(|e| panic!("tables of node {k}: {what}: {e}"))
    };
    let net = NetworkId(n);
    ok(
        w.set_network(
            net,
            &NetworkInfo {
                kind: NetworkKind::L2,
                anonymous: false,
                gateway_mac: gateway_mac(n, k),
                gateway4: Some(pod4(n, 0, 1)),
                gateway6: Some(pod6(n, 0, 1)),
                mtu: POD_MTU as u16 - 14,
                l2: L2Settings {
                    learning: None,
                    bum_pps: 0,
                    bum_burst: 1,
                },
                stateful: false,
            },
        ),
        "set_network (l2)",
    );
    let mut flood = Vec::new();
    for p in pods.iter().filter(|p| p.net == n) {
        flood.push(FloodTarget::Port(p.port));
        let entry = FdbEntry {
            target: FdbTarget::Port(p.port),
            seq: 0,
            learned: false,
        };
        w.set_fdb(net, p.mac, entry)
            .unwrap_or_else(|e| panic!("tables of node {k}: fdb: {e}"));
        for ip in [IpAddr::V4(p.ip4), IpAddr::V6(p.ip6)] {
            ok(w.set_neighbor(net, ip, p.mac, false), "neighbor");
        }
    }
    for r in remote.iter().filter(|r| r.net == n) {
        let entry = FdbEntry {
            target: FdbTarget::Remote {
                node: NodeId(r.node),
                sid: Sid(r.sid),
            },
            seq: 0,
            learned: false,
        };
        w.set_fdb(net, r.mac, entry)
            .unwrap_or_else(|e| panic!("tables of node {k}: fdb: {e}"));
        for ip in &r.addrs {
            ok(w.set_neighbor(net, *ip, r.mac, false), "neighbor");
        }
    }
    ok(w.set_flood(net, &flood), "flood list");
    ok(
        w.set_local_sid(Sid(sid_dt2u(k, n)), SidBehavior::EndDt2u(net)),
        "DT2U SID",
    );
    ok(
        w.set_local_sid(Sid(sid_dt2m(k, n)), SidBehavior::EndDt2m(net)),
        "DT2M SID",
    );
}

// ---- captures --------------------------------------------------------------------------------

/// A tshark capture running in a namespace, writing a pcapng file.
#[derive(Debug)]
pub struct Capture {
    proc: Proc,
    /// The capture file.
    pub file: PathBuf,
}

/// One encapsulated packet as seen on the underlay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncapRow {
    /// Outer IPv6 source.
    pub outer_src: Ipv6Addr,
    /// Outer IPv6 destination (the SID).
    pub outer_dst: Ipv6Addr,
    /// Outer flow label.
    pub flow: u32,
    /// Outer hop limit.
    pub hlim: u8,
    /// Outer next header (4, 41 or 143; 43 when an SRH follows).
    pub nxt: u8,
    /// What is carried (4, 41, or 143: an Ethernet frame), after the SRH if there is one.
    pub payload: u8,
    /// Inner (IP) source; of an Ethernet frame, its IP packet's.
    pub inner_src: IpAddr,
    /// Inner destination.
    pub inner_dst: IpAddr,
}

impl Capture {
    /// Starts `tshark -i iface -w file -f filter` in `ns` and waits until it captures.
    pub fn start(lab: &Lab, ns: &str, iface: &str, filter: &str, label: &str) -> Capture {
        let file = lab.path(&format!("{label}.pcapng"));
        let tshark = which("tshark").expect("tshark").display().to_string();
        let argv: Vec<String> = vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            ns.into(),
            tshark,
            "-n".into(),
            "-i".into(),
            iface.into(),
            "-f".into(),
            filter.into(),
            "-w".into(),
            file.display().to_string(),
        ];
        let mut proc = Proc::spawn(
            &format!("tshark {label}"),
            &argv,
            lab.path(&format!("{label}.tshark.log")),
        );
        wait_for("tshark to start capturing", WAIT, || {
            if let Some(s) = proc.try_wait() {
                panic!("tshark exited at start ({s}): {}", proc.log_text());
            }
            proc.log_text().contains("Capturing on").then_some(())
        });
        // dumpcap reports before the socket is fully live on a loaded machine.
        std::thread::sleep(Duration::from_millis(500));
        Capture { proc, file }
    }

    /// Stops the capture cleanly (SIGINT flushes the file) and returns the encapsulated
    /// packets (IPv4 or IPv6 inside, directly or after an SRH) it saw.
    pub fn finish(mut self) -> (Vec<EncapRow>, String) {
        std::thread::sleep(Duration::from_millis(500));
        let (status, clean) = self.proc.stop(libc::SIGINT, Duration::from_secs(20));
        assert!(
            clean,
            "tshark did not stop on SIGINT ({status}): {}",
            self.proc.log_text()
        );
        let out = sh(&[
            "tshark",
            "-n",
            "-r",
            &self.file.display().to_string(),
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-E",
            "aggregator=,",
            "-e",
            "ipv6.src",
            "-e",
            "ipv6.dst",
            "-e",
            "ipv6.flow",
            "-e",
            "ipv6.hlim",
            "-e",
            "ipv6.nxt",
            "-e",
            "ip.src",
            "-e",
            "ip.dst",
            "-e",
            "ipv6.routing.nxt",
        ]);
        let rows = out.lines().filter_map(parse_row).collect();
        (rows, out)
    }
}

fn first(field: &str) -> Option<&str> {
    field.split(',').next().filter(|s| !s.is_empty())
}

fn parse_num(s: &str) -> Option<u32> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// One tshark fields line → an encapsulated packet, or None for anything else (NDP, …).
fn parse_row(line: &str) -> Option<EncapRow> {
    let f: Vec<&str> = line.split('|').collect();
    if f.len() < 8 {
        return None;
    }
    let nxt = parse_num(first(f[4])?)? as u8;
    let payload = if nxt == 43 {
        parse_num(first(f[7])?)? as u8
    } else {
        nxt
    };
    // An Ethernet frame (143): IPv4 when the frame carries it, else its IPv6 (the second).
    let payload_ip = match payload {
        143 if first(f[5]).is_some() => 4,
        143 => 41,
        p => p,
    };
    let (inner_src, inner_dst): (IpAddr, IpAddr) = match payload_ip {
        4 => (
            first(f[5])?.parse::<Ipv4Addr>().ok()?.into(),
            first(f[6])?.parse::<Ipv4Addr>().ok()?.into(),
        ),
        41 => (
            f[0].split(',').nth(1)?.parse::<Ipv6Addr>().ok()?.into(),
            f[1].split(',').nth(1)?.parse::<Ipv6Addr>().ok()?.into(),
        ),
        _ => return None,
    };
    Some(EncapRow {
        outer_src: first(f[0])?.parse().ok()?,
        outer_dst: first(f[1])?.parse().ok()?,
        flow: parse_num(first(f[2])?)?,
        hlim: parse_num(first(f[3])?)? as u8,
        nxt,
        payload,
        inner_src,
        inner_dst,
    })
}

// ---- TCP transfer ----------------------------------------------------------------------------

/// Receiver: listens, regenerates the sender's stream from the seed, compares every byte,
/// reports `received <n> <sha256> mismatch_at <offset|-1>`.
pub const TCP_RECEIVER: &str = r#"
import socket, sys, hashlib, random
addr, port, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fam = socket.AF_INET6 if ':' in addr else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port)); s.listen(1)
print("ready", flush=True)
s.settimeout(600)
c, peer = s.accept()
c.settimeout(120)
rng = random.Random(seed)
h = hashlib.sha256()
buf = b""; off = 0; n = 0; bad = -1
while True:
    d = c.recv(1 << 20)
    if not d:
        break
    h.update(d)
    if len(buf) - off < len(d):
        buf = buf[off:] + rng.randbytes(1 << 20); off = 0
    exp = buf[off:off + len(d)]
    if bad < 0 and exp != d:
        bad = n + next(i for i in range(len(d)) if exp[i] != d[i])
    off += len(d)
    n += len(d)
print("received", n, h.hexdigest(), "mismatch_at", bad, flush=True)
"#;

/// Sender: connects (retrying), sends `total` bytes of the seeded stream in 1 MiB chunks,
/// reports `sent <n> <sha256>`.
pub const TCP_SENDER: &str = r#"
import socket, sys, hashlib, random, time
addr, port, seed, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fam = socket.AF_INET6 if ':' in addr else socket.AF_INET
for attempt in range(100):
    try:
        s = socket.create_connection((addr, port), timeout=5)
        break
    except OSError as e:
        err = e; time.sleep(0.3)
else:
    print("connect failed:", err, flush=True); sys.exit(2)
s.settimeout(120)
rng = random.Random(seed); h = hashlib.sha256(); sent = 0; t0 = time.time()
while sent < total:
    chunk = rng.randbytes(1 << 20)[:total - sent]
    s.sendall(chunk); h.update(chunk); sent += len(chunk)
s.shutdown(socket.SHUT_WR)
s.recv(1)
print("sent", sent, h.hexdigest(), "seconds", round(time.time() - t0, 2), flush=True)
"#;

/// A program a test runs: a guarded process on this host, or a task in a Linux peer guest.
#[derive(Debug)]
pub enum Running {
    /// On this host.
    Host(Proc),
    /// In a guest.
    Guest(guest::Task),
}

impl Running {
    /// `Some(succeeded)` once it has ended, `None` while it runs.
    pub fn ended(&mut self) -> Option<bool> {
        match self {
            Running::Host(p) => p.try_wait().map(|s| s.success()),
            Running::Guest(t) => t.exit_status().map(|rc| rc == 0),
        }
    }

    /// Waits up to `timeout` for it to end: `Some(succeeded)`, or `None` if it still runs.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<bool> {
        let start = Instant::now();
        loop {
            if let Some(ok) = self.ended() {
                return Some(ok);
            }
            if start.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its output so far.
    pub fn log_text(&self) -> String {
        match self {
            Running::Host(p) => p.log_text(),
            Running::Guest(t) => t.log_text(),
        }
    }
}

/// Runs a Python program in namespace `ns` — on this host, or in the guest `ns` lives in.
pub fn python_in(lab: &Lab, ns: &str, label: &str, script: &str, args: &[String]) -> Running {
    let py = which("python3").expect("python3").display().to_string();
    let guest = guest::of(ns);
    let file = match &guest {
        Some(g) => {
            let file = format!("/run/lace-{label}.py");
            g.write_file(&file, script.as_bytes());
            file
        }
        None => {
            let file = lab.path(&format!("{label}.py"));
            fs::write(&file, script).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
            file.display().to_string()
        }
    };
    let mut argv: Vec<String> = vec![
        "ip".into(),
        "netns".into(),
        "exec".into(),
        ns.into(),
        py,
        file,
    ];
    argv.extend_from_slice(args);
    match guest {
        Some(g) => {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            Running::Guest(g.spawn(label, &argv))
        }
        None => Running::Host(Proc::spawn(label, &argv, lab.path(&format!("{label}.log")))),
    }
}
