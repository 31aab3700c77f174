//! Harness of the end-to-end test (`tests/e2e.rs`): namespaces, a bridge underlay, forwarder
//! and control processes, pods made through `lace-cni` — each behind a guard that removes it
//! on drop, also when the test panics. A few helpers follow forwarder/tests/support (copied,
//! not imported: test crates do not share code).
//!
//! Naming: everything a run makes is called `lce-<pid>-…` (namespaces, table sets in
//! /dev/shm, the work directory), so leftovers of a crashed run (whose pid is gone) are
//! recognised and removed by the next run.
//!
//! The forwarder binary: Cargo gives integration tests only their own package's binaries, so
//! [`forwarder_bin`] runs `cargo build -p lace-forwarder --bin lace-forwarder` (through
//! `$CARGO`, same profile as this test) — a no-op when it is fresh — and takes it from this
//! test's target directory (the parent of the `deps/` directory the test runs from).

#![allow(dead_code)]

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

pub mod node;
pub mod standalone;

/// Where table sets and status regions live.
pub const SHM: &str = "/dev/shm";
/// Bound for anything the test waits for (small, noisy machine).
pub const WAIT: Duration = Duration::from_secs(60);

use lace_prereq::{program, require, root, Need};

/// Fails the test naming whatever it lacks of what every end-to-end test needs (root, `ip`,
/// `ping`, `ethtool`, `sysctl`) and of `extra`; then removes what dead runs left behind.
pub fn prerequisites(extra: impl IntoIterator<Item = Need>) {
    let mut needs = vec![
        root(),
        program("ip", "iproute2"),
        program("ping", "iputils-ping"),
        program("ethtool", "ethtool"),
        program("sysctl", "procps"),
    ];
    needs.extend(extra);
    require(&needs);
    cleanup_leftovers();
}

/// The tests of one binary run one at a time: each is a whole two-node cluster.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn pid_alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

/// Removes `lce-<pid>-…` namespaces, shm files and work directories of dead runs.
pub fn cleanup_leftovers() {
    let me = std::process::id();
    let dead = |name: &str| -> bool {
        let Some(rest) = name.strip_prefix("lce-") else {
            return false;
        };
        rest.split('-')
            .next()
            .and_then(|p| p.parse::<i32>().ok())
            .is_some_and(|p| p as u32 != me && !pid_alive(p))
    };
    if let Ok(list) = run_capture(&["ip", "netns", "list"]) {
        for ns in list.lines().filter_map(|l| l.split_whitespace().next()) {
            if dead(ns) {
                eprintln!("e2e: removing leftover namespace {ns}");
                kill_netns_pids(ns);
                let _ = run_capture(&["ip", "netns", "del", ns]);
            }
        }
    }
    for dir in [PathBuf::from(SHM), std::env::temp_dir()] {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if dead(name.strip_prefix("lace-").unwrap_or(&name)) {
                eprintln!("e2e: removing leftover {}", e.path().display());
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
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Runs a command; Ok(stdout) on exit 0, Err(description with output) otherwise.
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

/// `ip -n <ns> <args…>`, must succeed.
pub fn ipn(ns: &str, args: &str) -> String {
    let mut v = vec!["ip", "-n", ns];
    v.extend(args.split_whitespace());
    sh(&v)
}

/// Sets sysctls inside a namespace.
pub fn sysctl(ns: &str, kv: &[&str]) {
    let mut v = vec!["ip", "netns", "exec", ns, "sysctl", "-q", "-w"];
    v.extend(kv);
    sh(&v);
}

/// Polls `f` every 100 ms until it yields a value; panics naming `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() <= timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The lace-forwarder binary (see the module docs).
pub fn forwarder_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/e2e-<hash>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable in target/<profile>/deps");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_owned();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "lace-forwarder", "--bin", "lace-forwarder"]);
    if profile == "release" {
        cmd.arg("--release");
    } else if profile != "debug" {
        cmd.args(["--profile", &profile]);
    }
    if let Some(target) = profile_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .expect("run cargo build for lace-forwarder");
    assert!(
        out.status.success(),
        "cargo build -p lace-forwarder failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = profile_dir.join("lace-forwarder");
    assert!(bin.is_file(), "{} missing after cargo build", bin.display());
    bin
}

/// A child with its output in a log file; killed and reaped on drop, its log printed if the
/// test is panicking.
#[derive(Debug)]
pub struct Proc {
    /// What it is.
    pub name: String,
    child: Child,
    /// Its log.
    pub log: PathBuf,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Spawns `argv`, output appended to `log`.
    pub fn spawn(name: &str, argv: &[String], log: PathBuf) -> Proc {
        let f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let f2 = f.try_clone().expect("dup log fd");
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::from(f))
            .stderr(Stdio::from(f2))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", argv.join(" ")));
        Proc {
            name: name.to_string(),
            child,
            log,
            status: None,
        }
    }

    /// Exit status if it exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.status = Some(s);
            }
        }
        self.status
    }

    /// Sends `sig`, waits up to `timeout`, then SIGKILLs and reaps.
    pub fn stop(&mut self, sig: Signal, timeout: Duration) -> ExitStatus {
        if self.try_wait().is_none() {
            let _ = kill(Pid::from_raw(self.child.id() as i32), sig);
            let start = Instant::now();
            while self.try_wait().is_none() && start.elapsed() < timeout {
                std::thread::sleep(Duration::from_millis(50));
            }
            if self.try_wait().is_none() {
                let _ = self.child.kill();
                self.status = self.child.wait().ok();
            }
        }
        self.status.expect("reaped")
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let t = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Signal::SIGTERM, Duration::from_secs(10));
        if std::thread::panicking() {
            eprintln!(
                "----- {} log (last 60 lines) -----\n{}\n----- end {} -----",
                self.name,
                self.log_tail(60),
                self.name
            );
        }
    }
}

/// Namespaces, shm files and the work directory of one run; removed on drop (processes must
/// be dropped first: keep `Proc`s in a struct field declared before this one).
#[derive(Debug)]
pub struct Resources {
    /// `lce-<pid>-<n>`.
    pub tag: String,
    /// Work directory.
    pub dir: PathBuf,
    netns: Vec<String>,
    files: Vec<PathBuf>,
}

impl Resources {
    /// A fresh run: `lce-<pid>-<n>`, n counting the runs of this process.
    pub fn new() -> Resources {
        static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("lce-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(&tag);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("work dir");
        eprintln!("e2e: {tag}, work dir {}", dir.display());
        Resources {
            tag,
            dir,
            netns: Vec::new(),
            files: Vec::new(),
        }
    }

    /// Creates namespace `<tag>-<suffix>` with `lo` up.
    pub fn netns(&mut self, suffix: &str) -> String {
        let ns = format!("{}-{suffix}", self.tag);
        sh(&["ip", "netns", "add", &ns]);
        self.netns.push(ns.clone());
        ipn(&ns, "link set lo up");
        ns
    }

    /// Removes `path` on drop.
    pub fn file(&mut self, path: PathBuf) {
        self.files.push(path);
    }
}

impl Drop for Resources {
    fn drop(&mut self) {
        for ns in self.netns.iter().rev() {
            kill_netns_pids(ns);
            if let Err(e) = run_capture(&["ip", "netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
        for f in &self.files {
            let _ = fs::remove_file(f);
        }
        if std::thread::panicking() {
            eprintln!("work directory kept: {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// One JSON request line to lace-control, one response line back.
pub fn control_request(socket: &Path, request: &serde_json::Value) -> serde_json::Value {
    try_control_request(socket, request).unwrap_or_else(|e| panic!("{}: {e}", socket.display()))
}

/// [`control_request`], with transport errors returned (a daemon not listening yet).
pub fn try_control_request(
    socket: &Path,
    request: &serde_json::Value,
) -> Result<serde_json::Value, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(WAIT)).map_err(|e| e.to_string())?;
    let mut line = request.to_string();
    line.push('\n');
    s.write_all(line.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut out = String::new();
    BufReader::new(&s)
        .read_line(&mut out)
        .map_err(|e| format!("read: {e}"))?;
    serde_json::from_str(&out).map_err(|e| format!("response {out:?}: {e}"))
}

/// Copies the top-level `*.yaml` of `from` into `to`.
pub fn copy_manifests(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "yaml") {
            fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// Creates `path` with `text`.
pub fn write(path: &Path, text: &str) {
    let mut f = File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.write_all(text.as_bytes()).unwrap();
}
