//! The `lace-forwarder` binary as a process: configuration errors, `--help`, `check`, the run
//! lifecycle (waiting for tables, attaching, stats, SIGTERM, a second forwarder refused,
//! SIGKILL and restart), pod-port hot-plug on a veth pair (and 1,000 attach/detach cycles that
//! must leave nothing behind), and what wakes a sleeping adaptive worker (a frame on its
//! socket, a port change).
//!
//! Prerequisites for the runtime tests: root (DPDK memory, af_packet, network namespaces),
//! DPDK's PMDs and `ip`. Those tests are `#[ignore]`d, run with `--include-ignored` (as
//! `.ci/run` does); a missing prerequisite then fails the test, named with what provides it.
//! Every process is killed, and every namespace, link and file removed, when a test ends, also
//! on failure (Drop guards).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lace_prereq::{dpdk_null_pmd, file, program, require, root};
use lace_shared::status::{status_path, PortState, StatusReader};
use lace_shared::tables::{TableWriter, TablesConfig};
use lace_shared::types::PortKind;
use lace_shared::types::{
    IfName, L2Settings, MacAddr, NetworkId, NetworkInfo, NetworkKind, NextHop, PortId, PortInfo,
};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_lace-forwarder");
/// Generous bound for anything the forwarder should do "soon" (noisy 2-core machines).
const PATIENCE: Duration = Duration::from_secs(60);

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A name unique to this test process and call.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}x{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Fails the test naming what it lacks: root and DPDK's PMDs, and `ip` when it makes links.
fn prerequisites(needs_ip: bool) {
    let mut needs = vec![root(), dpdk_null_pmd()];
    if needs_ip {
        needs.push(program("ip", "iproute2"));
    }
    require(&needs);
}

/// The EAL runtime directory of forwarder `name` (`/var/run/dpdk/lace-<name>`: root's, and
/// the default file prefix), removed on drop. A forwarder removes its own when it stops
/// cleanly; one killed, or whose EAL failed to start, leaves it.
struct EalRuntime(PathBuf);

impl EalRuntime {
    fn of(name: &str) -> EalRuntime {
        EalRuntime(Path::new("/var/run/dpdk").join(format!("lace-{name}")))
    }
}

impl Drop for EalRuntime {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A directory for one test's tables, status region, configs and logs; removed on drop.
struct Workdir {
    path: PathBuf,
}

impl Workdir {
    fn new(tag: &str) -> Workdir {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let path = base.join(unique(&format!("lace-engine-{tag}-")));
        fs::create_dir_all(&path).expect("create work directory");
        Workdir { path }
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// A forwarder process; killed and reaped on drop.
struct Forwarder {
    child: Option<Child>,
    log: PathBuf,
}

impl Forwarder {
    fn spawn(config: &Path, log: PathBuf) -> Forwarder {
        Forwarder::spawn_with(config, log, &[])
    }

    /// [`Forwarder::spawn`] with more flags for `run`.
    fn spawn_with(config: &Path, log: PathBuf, extra: &[&str]) -> Forwarder {
        let out = fs::File::create(&log).expect("create log");
        let err = out.try_clone().expect("clone log");
        let child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(config)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn lace-forwarder");
        Forwarder {
            child: Some(child),
            log,
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([format!("-{sig}"), self.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig} {}", self.pid());
    }

    /// Waits for the process to exit.
    fn wait_exit(&mut self, what: &str) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.try_wait() {
                self.child = None;
                return s;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "{what}: forwarder did not exit; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn sigkill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.sigkill();
    }
}

fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run lace-forwarder")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const BASE: &str = r#"
[eal]
memory = "no-huge"
memory_mb = 256

[uplink]
device = "net_null0,no-rx=1"
address = "fd00::a"

[workers]
count = 1
polling = "adaptive"
"#;

fn write_config(dir: &Path, name: &str, extra: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let text = format!(
        "name = \"{name}\"\ntables_dir = \"{}\"\n{extra}\n{BASE}",
        dir.display()
    );
    fs::write(&path, text).expect("write config");
    path
}

fn tables_config(dir: &Path, name: &str) -> TablesConfig {
    TablesConfig {
        dir: dir.to_path_buf(),
        name: name.to_owned(),
        size: 64 << 20,
        reader_slots: 32,
    }
}

/// `stats --json`, or None while the status region is missing.
fn stats(config: &Path) -> Option<Value> {
    let out = cli(&["stats", "--json", "--config", config.to_str()?]);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Polls `stats --json` until `pred` holds; panics with the forwarder's log after PATIENCE or
/// when the forwarder exits.
fn wait_for(
    fwd: &mut Forwarder,
    config: &Path,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Some(s) = stats(config) {
            if pred(&s) {
                return s;
            }
            last = Some(s);
        }
        if let Some(st) = fwd.try_wait() {
            panic!(
                "waiting for {what}: forwarder exited ({st}); log:\n{}",
                fwd.log()
            );
        }
        assert!(
            start.elapsed() < PATIENCE,
            "waiting for {what}: last stats {last:?}; log:\n{}",
            fwd.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn port(s: &Value, id: u32) -> Option<&Value> {
    s["ports"]
        .as_array()?
        .iter()
        .find(|p| p["port"].as_u64() == Some(u64::from(id)))
}

fn port_state(s: &Value, id: u32) -> String {
    port(s, id)
        .and_then(|p| p["state"].as_str())
        .unwrap_or("absent")
        .to_owned()
}

fn network_info() -> NetworkInfo {
    NetworkInfo {
        kind: NetworkKind::L3,
        anonymous: false,
        gateway_mac: MacAddr([0x02, 0, 0, 0, 0, 1]),
        gateway4: Some("10.1.0.1".parse().unwrap()),
        gateway6: None,
        mtu: 1460,
        stateful: false,
        l2: L2Settings::default(),
    }
}

fn pod_port(iface: &str, endpoint: u64) -> PortInfo {
    PortInfo {
        kind: PortKind::Pod,
        network: NetworkId(1),
        mac: MacAddr([0x02, 0, 0, 0, 1, endpoint as u8]),
        ipv4: Some(format!("10.1.0.{}", 10 + endpoint).parse().unwrap()),
        ipv6: None,
        endpoint,
        iface: IfName::new(iface).unwrap(),
        policy: lace_shared::policy::PolicySetId::NONE,
        transit: false,
    }
}

// ---- configuration and CLI (no root) ------------------------------------------------------

#[test]
fn config_errors_name_the_field() {
    let dir = Workdir::new("cfg");
    let cases = [
        ("unknown key", "bogus_key = 1\n", "bogus_key"),
        ("bad hop limit", "[srv6]\nhop_limit = 0\n", "srv6.hop_limit"),
    ];
    for (what, extra, field) in cases {
        let cfg = write_config(&dir.path, &unique("c"), extra);
        let out = cli(&["check", "--config", cfg.to_str().unwrap()]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert!(
            err.contains(field),
            "{what}: error does not name {field}: {err}"
        );
    }
    // Replacing a value of the base file: bad polling mode, bad uplink address.
    for (what, from, to, field) in [
        (
            "bad polling mode",
            "polling = \"adaptive\"",
            "polling = \"sometimes\"",
            "workers.polling",
        ),
        (
            "bad uplink address",
            "address = \"fd00::a\"",
            "address = \"10.0.0.300\"",
            "uplink.address",
        ),
        (
            "unknown memory mode",
            "memory = \"no-huge\"",
            "memory = \"lots\"",
            "eal.memory",
        ),
    ] {
        let name = unique("c");
        let path = dir.path.join(format!("{name}.toml"));
        let body = format!("name = \"{name}\"\n{}", BASE.replace(from, to));
        fs::write(&path, body).unwrap();
        let out = cli(&["check", "--config", path.to_str().unwrap()]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert!(
            err.contains(field),
            "{what}: error does not name {field}: {err}"
        );
    }
    // A bad flag value is refused by the parser, naming the flag.
    let cfg = write_config(&dir.path, &unique("c"), "");
    let out = cli(&[
        "check",
        "--config",
        cfg.to_str().unwrap(),
        "--polling",
        "sometimes",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--polling"),
        "{}",
        text(&out.stderr)
    );
    let out = cli(&["check", "--config", "/nonexistent/lace.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/lace.toml"));
}

#[test]
fn help_mentions_every_option() {
    let run = text(&cli(&["run", "--help"]).stdout);
    for flag in [
        "--config",
        "--name",
        "--workers",
        "--polling",
        "--memory ",
        "--memory-mb",
        "--lcores",
        "--uplink",
        "--underlay-addr",
        "--tables-dir",
        "--metrics-listen",
        "busy",
        "adaptive",
        "hugepages",
        "in-memory",
        "no-huge",
    ] {
        assert!(run.contains(flag), "run --help lacks {flag}:\n{run}");
    }
    let stats = text(&cli(&["stats", "--help"]).stdout);
    for flag in ["--config", "--name", "--tables-dir", "--json", "--watch"] {
        assert!(stats.contains(flag), "stats --help lacks {flag}:\n{stats}");
    }
    let top = text(&cli(&["--help"]).stdout);
    for word in [
        "run",
        "stats",
        "check",
        "mechanism",
        "polling",
        "file_prefix",
    ] {
        assert!(top.contains(word), "--help lacks {word}:\n{top}");
    }
}

#[test]
fn check_prints_the_effective_eal_arguments() {
    let dir = Workdir::new("check");
    let name = unique("k");
    let cfg = write_config(&dir.path, &name, "");
    let out = cli(&["check", "--config", cfg.to_str().unwrap(), "--workers", "2"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for want in [
        "--no-huge",
        "--no-shconf",
        "-m 256",
        &format!("--file-prefix=lace-{name}"),
        "--no-pci",
        "--lcores=0@",
        "count = 2",
    ] {
        assert!(
            stdout.contains(want),
            "check output lacks {want}:\n{stdout}"
        );
    }
    let out = cli(&[
        "check",
        "--config",
        cfg.to_str().unwrap(),
        "--uplink",
        "0000:03:00.1",
        "--memory",
        "in-memory",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("-a 0000:03:00.1"), "{stdout}");
    assert!(stdout.contains("--in-memory"), "{stdout}");
    assert!(!stdout.contains("--no-pci"), "{stdout}");
}

// ---- the run lifecycle (root) -------------------------------------------------------------

#[test]
#[ignore = "runs the forwarder: needs root and DPDK's PMDs; run with --include-ignored"]
fn lifecycle_wait_attach_stats_stop_refuse_kill_restart() {
    prerequisites(false);
    let dir = Workdir::new("life");
    let name = unique("l");
    let eal = EalRuntime::of(&name);
    let cfg = write_config(&dir.path, &name, "");
    let mut fwd = Forwarder::spawn(&cfg, dir.path.join("fwd1.log"));

    // Running without tables: waits for them.
    wait_for(&mut fwd, &cfg, "state running", |s| s["state"] == "running");
    let start = Instant::now();
    while !fwd.log().contains("waiting for tables at") {
        assert!(
            start.elapsed() < PATIENCE,
            "no 'waiting for tables' in:\n{}",
            fwd.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = stats(&cfg).unwrap();
    assert_eq!(s["generation"], 0);
    assert_eq!(port_state(&s, 0), "up", "uplink: {s}");

    // Tables appear: attached, reconciled against the published generation.
    let tcfg = tables_config(&dir.path, &name);
    let mut writer = TableWriter::create(&tcfg).expect("create tables");
    writer.set_network(NetworkId(1), &network_info()).unwrap();
    let generation = writer.publish().unwrap();
    wait_for(&mut fwd, &cfg, "tables generation", |s| {
        s["generation"].as_u64() == Some(generation)
    });

    // Workers poll (adaptive: they sleep, but keep polling).
    let polls = |s: &Value| s["workers"][0]["polls"].as_u64().unwrap_or(0);
    let first = polls(&stats(&cfg).unwrap());
    let s = wait_for(&mut fwd, &cfg, "worker polls increasing", |s| {
        polls(s) > first
    });
    for key in ["pid", "alive", "stages", "drops", "workers"] {
        assert!(!s[key].is_null(), "stats --json lacks {key}: {s}");
    }
    assert_eq!(s["alive"], true);
    assert_eq!(s["pid"].as_u64(), Some(u64::from(fwd.pid())));
    assert!(
        s["drops"]["tx-refused"].is_u64(),
        "every drop reason listed: {s}"
    );
    assert!(s["stages"]["uplink-input"].is_u64(), "stage names: {s}");
    let table = cli(&["stats", "--config", cfg.to_str().unwrap()]);
    assert!(
        text(&table.stdout).contains("running"),
        "{}",
        text(&table.stdout)
    );

    // A second forwarder with the same name is refused.
    let mut second = Forwarder::spawn(&cfg, dir.path.join("fwd2.log"));
    let st = second.wait_exit("second forwarder");
    assert!(!st.success(), "a second forwarder with the same name ran");
    assert!(
        second.log().contains("another lace-forwarder"),
        "refusal names the cause:\n{}",
        second.log()
    );
    assert_eq!(
        stats(&cfg).unwrap()["state"],
        "running",
        "the first one is undisturbed"
    );

    // SIGTERM: clean stop, exit 0, state stopped.
    fwd.signal("TERM");
    let st = fwd.wait_exit("SIGTERM");
    assert!(
        st.success(),
        "exit after SIGTERM: {st}; log:\n{}",
        fwd.log()
    );
    let s = stats(&cfg).expect("status region stays after a clean stop");
    assert_eq!(s["state"], "stopped");
    assert_eq!(s["alive"], false);
    // Its EAL runtime directory goes with it (the file prefix, `lace-<name>`, is its own).
    assert!(!eal.0.exists(), "{} left behind", eal.0.display());

    // Start again, SIGKILL, start again: runs on the same tables.
    let mut fwd = Forwarder::spawn(&cfg, dir.path.join("fwd3.log"));
    wait_for(&mut fwd, &cfg, "restart", |s| {
        s["state"] == "running" && s["generation"].as_u64() == Some(generation)
    });
    fwd.sigkill();
    let mut fwd = Forwarder::spawn_with(
        &cfg,
        dir.path.join("fwd4.log"),
        &["--metrics-listen", "127.0.0.1:0"],
    );
    wait_for(&mut fwd, &cfg, "restart after SIGKILL", |s| {
        s["state"] == "running"
            && s["alive"] == true
            && s["generation"].as_u64() == Some(generation)
    });
    // The tables are intact and still writable: a new publication is picked up.
    writer.set_network(NetworkId(2), &network_info()).unwrap();
    let generation = writer.publish().unwrap();
    wait_for(&mut fwd, &cfg, "next publication", |s| {
        s["generation"].as_u64() == Some(generation)
    });

    // Control restarts with a new region (the files are replaced): the forwarder re-attaches.
    drop(writer);
    fs::remove_file(tcfg.tables_path()).unwrap();
    fs::remove_file(tcfg.qsbr_path()).unwrap();
    let mut writer = TableWriter::create(&tcfg).expect("create new tables");
    writer.set_network(NetworkId(3), &network_info()).unwrap();
    let replaced = writer.publish().unwrap();
    assert_ne!(replaced, generation, "the new region starts its own count");
    wait_for(&mut fwd, &cfg, "re-attach to replaced tables", |s| {
        s["generation"].as_u64() == Some(replaced)
    });
    assert!(fwd.log().contains("tables replaced"), "log:\n{}", fwd.log());

    // Its Prometheus endpoint serves the same figures.
    let log = fwd.log();
    let addr = lace_shared::metrics::announced(&log)
        .unwrap_or_else(|| panic!("no metrics address in the log:\n{log}"));
    let (status, body) = lace_shared::metrics::get(addr, "/metrics").expect("GET /metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    for line in [
        "lace_forwarder_up 1".to_owned(),
        format!("lace_forwarder_tables_generation {replaced}"),
        "lace_forwarder_drops_total{reason=\"tx-refused\"} 0".to_owned(),
        "lace_forwarder_port_up{port=\"0\",kind=\"uplink\"} 1".to_owned(),
        "# EOF".to_owned(),
    ] {
        assert!(body.contains(&line), "{line}:\n{body}");
    }

    fwd.signal("INT");
    assert!(fwd.wait_exit("SIGINT").success(), "log:\n{}", fwd.log());
}

#[test]
#[ignore = "runs the forwarder: needs root and DPDK's PMDs; run with --include-ignored"]
fn hugepage_shortage_names_the_fix() {
    prerequisites(false);
    let dir = Workdir::new("huge");
    let name = unique("h");
    let _eal = EalRuntime::of(&name);
    let cfg = write_config(&dir.path, &name, "");
    // A terabyte of huge pages: no machine running these tests has that free.
    let out = cli(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--memory",
        "in-memory",
        "--memory-mb",
        "1048576",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no-huge"),
        "the error offers --memory no-huge: {err}"
    );
    let sizes = fs::read_dir("/sys/kernel/mm/hugepages").map_or(0, |d| d.count());
    if sizes > 0 {
        assert!(
            err.contains("lace-hugepages reserve --mb 1048576"),
            "the error names the reservation command: {err}"
        );
    }
}

// ---- pod-port hot-plug (root) -------------------------------------------------------------

/// A network namespace and a veth pair (host end in the test's namespace); removed on drop.
struct VethPod {
    netns: String,
    host_if: String,
}

fn ip(args: &str) -> Output {
    Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .expect("run ip")
}

fn ip_ok(args: &str) {
    let out = ip(args);
    assert!(out.status.success(), "ip {args}: {}", text(&out.stderr));
}

impl VethPod {
    fn new() -> VethPod {
        let n = unique("");
        let pod = VethPod {
            netns: format!("lace-eng-{n}"),
            host_if: format!("le{}", &n[n.len().saturating_sub(12)..]),
        };
        ip_ok(&format!("netns add {}", pod.netns));
        ip_ok(&format!(
            "link add {} type veth peer name eth0 netns {}",
            pod.host_if, pod.netns
        ));
        ip_ok(&format!("link set {} up", pod.host_if));
        ip_ok(&format!("-n {} link set eth0 up", pod.netns));
        pod
    }

    fn ifindex(&self) -> u32 {
        fs::read_to_string(format!("/sys/class/net/{}/ifindex", self.host_if))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for VethPod {
    fn drop(&mut self) {
        let _ = ip(&format!("link del {}", self.host_if));
        let _ = ip(&format!("netns del {}", self.netns));
    }
}

/// Packet sockets bound to interface `ifindex` (`/proc/net/packet`): what af_packet ports hold.
fn packet_sockets_on(ifindex: u32) -> usize {
    fs::read_to_string("/proc/net/packet")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter(|l| l.split_whitespace().nth(4).and_then(|i| i.parse().ok()) == Some(ifindex))
        .count()
}

#[test]
#[ignore = "runs the forwarder: needs root, DPDK's PMDs and ip; run with --include-ignored"]
fn pod_ports_hot_plug_fail_and_detach() {
    prerequisites(true);
    hot_plug("af_packet");
}

#[test]
#[ignore = "runs the forwarder: needs root, DPDK's PMDs and ip; run with --include-ignored"]
fn pod_ports_hot_plug_packet_socket() {
    prerequisites(true);
    hot_plug("packet_socket");
}

#[test]
#[ignore = "runs the forwarder: needs root, DPDK's PMDs and ip; run with --include-ignored"]
fn pod_ports_hot_plug_af_xdp() {
    prerequisites(true);
    hot_plug("af_xdp");
}

/// Attach, fail, detach and re-attach pod ports with `mechanism`; for af_packet and
/// packet_socket, also checks the kernel side: packet sockets on the interface exist exactly
/// while the port is plugged.
fn hot_plug(mechanism: &str) {
    let af_packet = mechanism != "af_xdp";
    let sockets = |ifindex| {
        if af_packet {
            packet_sockets_on(ifindex)
        } else {
            0
        }
    };
    let dir = Workdir::new("plug");
    let name = unique("p");
    let _eal = EalRuntime::of(&name);
    let pod = VethPod::new();
    let missing = unique("nx");

    let tcfg = tables_config(&dir.path, &name);
    let mut writer = TableWriter::create(&tcfg).expect("create tables");
    writer.set_network(NetworkId(1), &network_info()).unwrap();
    writer.publish().unwrap();

    let cfg = write_config(
        &dir.path,
        &name,
        &format!("[pods]\nmechanism = \"{mechanism}\"\n"),
    );
    let mut fwd = Forwarder::spawn(&cfg, dir.path.join("fwd.log"));
    wait_for(&mut fwd, &cfg, "running with tables", |s| {
        s["state"] == "running" && s["generation"].as_u64() > Some(0)
    });
    assert_eq!(packet_sockets_on(pod.ifindex()), 0);

    // Request a real interface and a missing one.
    writer
        .set_port(PortId(1), &pod_port(&pod.host_if, 11))
        .unwrap();
    writer.set_port(PortId(2), &pod_port(&missing, 12)).unwrap();
    writer.publish().unwrap();
    let s = wait_for(&mut fwd, &cfg, "port 1 up, port 2 failed", |s| {
        port_state(s, 1) == "up" && port_state(s, 2) == "failed"
    });
    assert_eq!(port(&s, 1).unwrap()["endpoint"], 11);
    assert_eq!(
        port(&s, 2).unwrap()["errno"],
        19,
        "ENODEV for a missing interface: {s}"
    );
    assert!(
        !af_packet || packet_sockets_on(pod.ifindex()) > 0,
        "an af_packet socket is bound to {}",
        pod.host_if
    );

    // Remove port 1: detached, the DPDK port's sockets gone; port 2 unaffected.
    writer.remove_port(PortId(1)).unwrap();
    let generation = writer.publish().unwrap();
    let s = wait_for(&mut fwd, &cfg, "port 1 detached", |s| {
        port_state(s, 1) == "absent" && s["generation"].as_u64() == Some(generation)
    });
    assert_eq!(port_state(&s, 2), "failed");
    let start = Instant::now();
    while sockets(pod.ifindex()) > 0 {
        assert!(
            start.elapsed() < PATIENCE,
            "af_packet sockets stay after detach"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Re-request it under a new endpoint: plugged again. DPDK 22.11's af_xdp cannot create an
    // XDP socket again on an interface it used before in the same process, so af_xdp moves the
    // port to a second pod's interface (which also covers "the interface changed").
    let second = (!af_packet).then(VethPod::new);
    let iface = second.as_ref().map_or(&pod.host_if, |p| &p.host_if);
    writer.set_port(PortId(1), &pod_port(iface, 21)).unwrap();
    writer.publish().unwrap();
    let s = wait_for(&mut fwd, &cfg, "port 1 re-plugged", |s| {
        port_state(s, 1) == "up" && port(s, 1).is_some_and(|p| p["endpoint"] == 21)
    });
    assert_eq!(port_state(&s, 2), "failed");
    assert_eq!(port_state(&s, 0), "up");

    fwd.signal("TERM");
    assert!(fwd.wait_exit("SIGTERM").success(), "log:\n{}", fwd.log());
    assert_eq!(
        packet_sockets_on(pod.ifindex()),
        0,
        "ports detached at stop"
    );
    let s = stats(&cfg).unwrap();
    assert_eq!(s["state"], "stopped");
}

// ---- adaptive workers' wake-ups (root) ----------------------------------------------------

/// A forwarder whose ports are all packet sockets (uplink and pods on veths), adaptive, with
/// no spin: its worker sleeps in epoll between frames. The uplink's far end and each pod's
/// `eth0` have IPv6 off, so no frame arrives that the test did not send.
struct IdleNode {
    // Fields drop in order: the forwarder (and its sockets) before the links and the files.
    fwd: Forwarder,
    _eal: EalRuntime,
    cfg: PathBuf,
    /// Its status region.
    status: PathBuf,
    writer: TableWriter,
    _uplink: Option<VethPod>,
    _dir: Workdir,
}

impl IdleNode {
    /// With its uplink on a veth (a packet socket).
    fn start() -> IdleNode {
        let uplink = VethPod::new();
        quiet(&uplink);
        let device = uplink.host_if.clone();
        IdleNode::start_on(&device, Some(uplink))
    }

    /// With `device` as its uplink (`uplink`: the veth it names, if any, removed on drop).
    fn start_on(device: &str, uplink: Option<VethPod>) -> IdleNode {
        let dir = Workdir::new("wake");
        let name = unique("w");
        let mut writer = TableWriter::create(&tables_config(&dir.path, &name)).expect("tables");
        writer.set_network(NetworkId(1), &network_info()).unwrap();
        writer.publish().unwrap();
        let path = dir.path.join(format!("{name}.toml"));
        let base = BASE.replace("net_null0,no-rx=1", device).replace(
            "polling = \"adaptive\"",
            "polling = \"adaptive\"\nspin_us = 0",
        );
        let text = format!(
            "name = \"{name}\"\ntables_dir = \"{}\"\n{base}",
            dir.path.display()
        );
        fs::write(&path, text).expect("write config");
        let mut fwd = Forwarder::spawn(&path, dir.path.join("fwd.log"));
        wait_for(&mut fwd, &path, "running with tables", |s| {
            s["state"] == "running" && s["generation"].as_u64() > Some(0)
        });
        IdleNode {
            fwd,
            _eal: EalRuntime::of(&name),
            cfg: path,
            status: status_path(&dir.path, &name),
            writer,
            _uplink: uplink,
            _dir: dir,
        }
    }

    /// Plugs `pod` in as port `id` (endpoint `id + 10`), with the route to its address, and
    /// waits until it is up.
    fn plug(&mut self, id: u32, pod: &VethPod) {
        let info = pod_port(&pod.host_if, u64::from(id) + 10);
        let (address, mac) = (info.ipv4.unwrap(), info.mac);
        self.writer.set_port(PortId(id), &info).unwrap();
        let local = NextHop::Local {
            port: PortId(id),
            mac,
        };
        self.writer
            .add_route(NetworkId(1), address.into(), 32, local)
            .unwrap();
        self.writer.publish().unwrap();
        wait_for(&mut self.fwd, &self.cfg, "the pod port up", |s| {
            port_state(s, id) == "up"
        });
    }

    /// Waits until the worker has slept its whole time at least once since `s` (it is idle,
    /// asleep on its sockets), and returns the stats then.
    fn asleep_after(&mut self, s: &Value) -> Value {
        let timeouts = wake(s, "wake_timeout");
        wait_for(
            &mut self.fwd,
            &self.cfg,
            "an idle worker's timed-out sleep",
            |t| wake(t, "wake_timeout") > timeouts,
        )
    }
}

/// An [`IdleNode`] with a quiet pod plugged in as port 1, the pod's `eth0` given port 1's
/// endpoint MAC and address (anti-spoofing checks both), so that it can ping the gateway
/// 10.1.0.1. Fails naming what is missing unless root, DPDK's null PMD, ip and ping are there.
fn node_with_a_pod() -> (VethPod, IdleNode) {
    require(&[
        root(),
        dpdk_null_pmd(),
        program("ip", "iproute2"),
        program("ping", "iputils-ping"),
    ]);
    let pod = VethPod::new();
    quiet(&pod);
    let mut node = IdleNode::start();
    node.plug(1, &pod);
    ip_ok(&format!(
        "-n {} link set eth0 address 02:00:00:00:01:0b",
        pod.netns
    ));
    ip_ok(&format!("-n {} addr add 10.1.0.21/24 dev eth0", pod.netns));
    (pod, node)
}

fn wake(s: &Value, key: &str) -> u64 {
    s["workers"][0][key].as_u64().unwrap_or(0)
}

/// Turns IPv6 off on the far end of `pod`'s veth (no router solicitations, MLD or DAD).
fn quiet(pod: &VethPod) {
    let out = Command::new("ip")
        .args(["netns", "exec", &pod.netns, "sysctl", "-qw"])
        .arg("net.ipv6.conf.eth0.disable_ipv6=1")
        .output()
        .expect("run sysctl");
    assert!(out.status.success(), "sysctl: {}", text(&out.stderr));
}

#[test]
#[ignore = "runs the forwarder: needs root, DPDK's PMDs, ip and ping; run with --include-ignored"]
fn a_sleeping_adaptive_worker_wakes_for_a_frame_on_its_socket() {
    let (pod, mut node) = node_with_a_pod();

    let s = stats(&node.cfg).unwrap();
    let s = node.asleep_after(&s);
    assert_eq!(
        wake(&s, "wake_readiness"),
        0,
        "no frame has reached the sockets yet: {s}"
    );

    // Three echoes to the gateway 200 ms apart, the ARP before them: they are answered, and
    // those that arrive while the worker sleeps wake it through the socket's readiness. A frame
    // may also land just as a timed-out sleep ends (on a loaded machine, or while the worker
    // waits for the CPU), so at least one readiness wake-up is asked for, not one per frame.
    let out = Command::new("ip")
        .args(["netns", "exec", &pod.netns, "ping", "-n", "-c", "3"])
        .args(["-i", "0.2", "-W", "5", "10.1.0.1"])
        .output()
        .expect("run ping");
    assert!(
        out.status.success(),
        "ping the gateway: {}{}; stats {:?}; log:\n{}",
        text(&out.stdout),
        text(&out.stderr),
        stats(&node.cfg),
        node.fwd.log()
    );
    let s = wait_for(&mut node.fwd, &node.cfg, "readiness wake-ups", |s| {
        wake(s, "wake_readiness") >= 1
    });
    assert!(
        s["workers"][0]["rx_packets"].as_u64() >= Some(4),
        "the frames were received: {s}"
    );
}

#[test]
#[ignore = "runs the forwarder: needs root, DPDK's PMDs and ip; run with --include-ignored"]
fn a_sleeping_adaptive_worker_wakes_for_a_port_change() {
    prerequisites(true);
    let pod = VethPod::new();
    quiet(&pod);
    let mut node = IdleNode::start();

    // Ports are handed to the worker through its mailbox: the eventfd ends its sleep at once
    // (a command wake-up), not its timeout.
    let s = node.asleep_after(&stats(&node.cfg).unwrap());
    let commands = wake(&s, "wake_command");
    node.plug(1, &pod);
    let s = wait_for(&mut node.fwd, &node.cfg, "a command wake-up", |s| {
        wake(s, "wake_command") > commands
    });
    assert!(packet_sockets_on(pod.ifindex()) > 0, "port 1 is plugged");

    let s = node.asleep_after(&s);
    let commands = wake(&s, "wake_command");
    node.writer.remove_port(PortId(1)).unwrap();
    node.writer.publish().unwrap();
    wait_for(
        &mut node.fwd,
        &node.cfg,
        "port 1 removed, by a command wake-up",
        |s| port_state(s, 1) == "absent" && wake(s, "wake_command") > commands,
    );
}

#[test]
#[ignore = "runs the forwarder: needs root, DPDK's PMDs, ip and /dev/net/tun; run with --include-ignored"]
fn a_sleeping_adaptive_worker_wakes_for_a_frame_on_a_dpdk_port_by_its_rx_interrupt() {
    require(&[
        root(),
        dpdk_null_pmd(),
        program("ip", "iproute2"),
        file("/dev/net/tun", "the kernel's tun driver (CONFIG_TUN)"),
    ]);
    // The uplink is a DPDK net_tap, which has RX interrupts (its queues' descriptors); the
    // forwarder has no packet socket, so a readiness wake-up can only be the tap queue's
    // interrupt. The tap goes when the forwarder exits.
    let tap = unique("lt");
    let mut node = IdleNode::start_on(&format!("net_tap_{tap},iface={tap}"), None);
    let out = Command::new("sysctl")
        .arg("-qw")
        .arg(format!("net.ipv6.conf.{tap}.disable_ipv6=1"))
        .output()
        .expect("run sysctl");
    assert!(out.status.success(), "sysctl: {}", text(&out.stderr));
    ip_ok(&format!("addr add 198.19.77.1/24 dev {tap}"));

    let s = node.asleep_after(&stats(&node.cfg).unwrap());
    let (ready, received) = (
        wake(&s, "wake_readiness"),
        s["workers"][0]["rx_packets"].as_u64().unwrap_or(0),
    );
    // Three broadcasts out of the tap, 200 ms apart: each reaches the sleeping worker's queue.
    let sock = std::net::UdpSocket::bind("198.19.77.1:0").expect("bind to the tap's address");
    sock.set_broadcast(true).unwrap();
    for _ in 0..3 {
        sock.send_to(b"wake up", "198.19.77.255:9")
            .expect("send a broadcast");
        std::thread::sleep(Duration::from_millis(200));
    }
    let s = wait_for(
        &mut node.fwd,
        &node.cfg,
        "the frames received after an interrupt wake-up",
        |s| {
            s["workers"][0]["rx_packets"].as_u64() >= Some(received + 3)
                && wake(s, "wake_readiness") > ready
        },
    );
    assert!(
        node.fwd
            .log()
            .contains("RX interrupt wakes its idle worker"),
        "{s}\n{}",
        node.fwd.log()
    );
}

// ---- attach/detach cycles (root) ----------------------------------------------------------

/// `pid`'s open file descriptors.
fn open_fds(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `pid`'s resident private memory (`RssAnon`: its heap and stacks; DPDK's packet buffers
/// are shared memory, each page touched once as the pool turns over), in KiB.
fn private_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Polls the status region (every millisecond) until `pred` holds; panics with the log after
/// PATIENCE.
fn wait_status(node: &mut IdleNode, what: &str, pred: impl Fn(&StatusReader) -> bool) {
    let start = Instant::now();
    loop {
        if let Ok(r) = StatusReader::open(&node.status) {
            if pred(&r) {
                return;
            }
        }
        if let Some(st) = node.fwd.try_wait() {
            panic!(
                "waiting for {what}: forwarder exited ({st}); log:\n{}",
                node.fwd.log()
            );
        }
        assert!(
            start.elapsed() < PATIENCE,
            "waiting for {what}; stats {:?}; log:\n{}",
            stats(&node.cfg),
            node.fwd.log()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Port 1 requested (`Some`) or removed (`None`), published, and its state reached.
fn set_port1(node: &mut IdleNode, info: Option<&PortInfo>) {
    match info {
        Some(i) => node.writer.set_port(PortId(1), i).unwrap(),
        None => node.writer.remove_port(PortId(1)).unwrap(),
    }
    let generation = node.writer.publish().unwrap();
    let want = if info.is_some() {
        PortState::Up
    } else {
        PortState::Absent
    };
    wait_status(node, &format!("port 1 {want:?}"), |r| {
        r.generation() >= generation && r.port(PortId(1)).map(|p| p.state) == Some(want)
    });
}

/// A pod port attached and detached 1,000 times, with an echo through it every 100th time,
/// leaves nothing behind: the packet buffers in use, the forwarder's open descriptors and
/// the packet sockets on the interface come back to what they were after the first cycle,
/// and its private resident memory grows by less than 1 MiB (1 KiB a cycle) beyond one port's
/// receive buffers, which the allocator may keep.
#[test]
#[ignore = "runs the forwarder: needs root, DPDK's PMDs, ip and ping; run with --include-ignored"]
fn a_thousand_attach_detach_cycles_leave_nothing_behind() {
    const CYCLES: u32 = 1000;
    let (pod, mut node) = node_with_a_pod();
    let info = pod_port(&pod.host_if, 11);
    let echo = |cycle: u32| {
        let out = Command::new("ip")
            .args(["netns", "exec", &pod.netns, "ping", "-n", "-c", "1"])
            .args(["-W", "5", "10.1.0.1"])
            .output()
            .expect("run ping");
        assert!(
            out.status.success(),
            "cycle {cycle}: ping the gateway: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    };
    echo(0);
    set_port1(&mut node, None);
    let pid = node.fwd.pid();
    // What one cycle leaves, once the gauge is refreshed (every 250 ms) after it.
    std::thread::sleep(Duration::from_millis(600));
    let mbufs = |node: &IdleNode| {
        StatusReader::open(&node.status)
            .map(|r| r.mbufs())
            .unwrap_or_default()
    };
    let (in_use, capacity) = mbufs(&node);
    assert!(
        capacity > 0 && in_use > 0,
        "the mbuf gauge is refreshed: {in_use} of {capacity}"
    );
    let (fds, private) = (open_fds(pid), private_kib(pid));

    for cycle in 1..=CYCLES {
        set_port1(&mut node, Some(&info));
        if cycle % 100 == 0 {
            echo(cycle);
        }
        set_port1(&mut node, None);
    }

    let start = Instant::now();
    loop {
        let now = (
            mbufs(&node).0,
            open_fds(pid),
            packet_sockets_on(pod.ifindex()),
        );
        if now == (in_use, fds, 0) {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "after {CYCLES} cycles (mbufs in use, open descriptors, packet sockets on the pod's \
             interface): {now:?}, after the first: {:?}; log:\n{}",
            (in_use, fds, 0),
            node.fwd.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Beyond 1 KiB a cycle, the allocator may keep one port's receive overflow buffers (32
    // of 64 KiB) for the next port, resident once a recycled allocation is zeroed: CI saw 1,868
    // KiB kept so once in four runs, where this machine keeps 8.
    const KEPT_KIB: u64 = 32 * 65 + 1024;
    let grown = private_kib(pid).saturating_sub(private);
    assert!(
        private > 0 && grown < KEPT_KIB,
        "private resident memory grew by {grown} KiB over {CYCLES} cycles (from {private} KiB; \
         at most {KEPT_KIB} allowed)"
    );
    eprintln!(
        "{CYCLES} cycles: {in_use} of {capacity} mbufs in use before and after, {fds} \
         descriptors, private resident memory +{grown} KiB"
    );
}
