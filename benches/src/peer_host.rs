//! The peer processes of [`crate::peer`]: `dpdk-testpmd` and OVS-DPDK (`ovsdb-server` +
//! `ovs-vswitchd-dpdk`), started, driven through their own command-line tools, read back and
//! stopped completely.
//!
//! Guarantees: every process started here is a child of lace-bench and is waited for (never
//! `--detach`ed, so none is left as an orphan or a zombie); OVS runs in its own network
//! namespace (its kernel taps `br0`, `br-phy`, `ovs-netdev` live and die there, so two runs
//! never collide and nothing is left in the host's namespace) with its own database, sockets and
//! logs in a temporary directory; DPDK runtime directories get a per-run `--file-prefix` and are
//! removed. All of it also happens when a step fails (guards with `Drop`). The peers' threads run
//! on the CPUs the process had before the EAL pinned it; their forwarding thread on
//! [`Placement::lcore`], everything else on [`Placement::other`].
//!
//! Not guaranteed: figures are whatever the peers' own counters say; the counters are parsed from
//! their text output, and an unrecognised output is an error naming the command.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};

use crate::peer::{Placement, Sizes};
use crate::report::median;
use crate::sys;

/// Debian's OVS-DPDK daemon (package `openvswitch-switch-dpdk`).
const VSWITCHD_DPDK: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";
/// OVS's database schema (package `openvswitch-common`).
const OVS_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";
/// The OVS side's underlay: its tap address, the tunnel's remote end and its MAC.
const OVS_LOCAL6: &str = "fd00:16::1/64";
const OVS_REMOTE6: &str = "fd00:16::2";
const OVS_REMOTE_MAC: &str = "02:00:00:00:99:02";

/// The tools and CPUs the peers need, found.
#[derive(Debug, Clone)]
pub(crate) struct PeerHost {
    placement: Placement,
    testpmd: PathBuf,
    ovsdb_tool: PathBuf,
    ovsdb_server: PathBuf,
    vsctl: PathBuf,
    appctl: PathBuf,
    ofctl: PathBuf,
    ip: PathBuf,
    /// Distinguishes this run's names (namespace, DPDK file prefixes).
    tag: String,
}

/// `name` on `PATH`, or in the sbin directories root's `PATH` usually has.
fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

impl PeerHost {
    /// Finds every tool; the reason (with the fix) when something is missing.
    pub(crate) fn check(placement: &Placement) -> Result<PeerHost, String> {
        if !is_root() {
            return Err(
                "needs root (OVS runs in its own network namespace); run lace-bench as \
                        root"
                    .to_owned(),
            );
        }
        if placement.lcore == placement.other {
            return Err(format!(
                "needs a second CPU for OVS's and testpmd's non-forwarding threads (only cpu {} \
                 is available)",
                placement.lcore
            ));
        }
        let missing = |what: &str, package: &str| {
            format!(
                "{what} is not installed: apt-get install {package} (.ci/install-deps installs \
                 it)"
            )
        };
        let tool =
            |name: &str, package: &str| find_tool(name).ok_or_else(|| missing(name, package));
        if !Path::new(VSWITCHD_DPDK).is_file() {
            return Err(missing(VSWITCHD_DPDK, "openvswitch-switch-dpdk"));
        }
        if !Path::new(OVS_SCHEMA).is_file() {
            return Err(missing(OVS_SCHEMA, "openvswitch-common"));
        }
        Ok(PeerHost {
            placement: placement.clone(),
            testpmd: tool("dpdk-testpmd", "dpdk-dev")?,
            ovsdb_tool: tool("ovsdb-tool", "openvswitch-common")?,
            ovsdb_server: tool("ovsdb-server", "openvswitch-switch")?,
            vsctl: tool("ovs-vsctl", "openvswitch-switch")?,
            appctl: tool("ovs-appctl", "openvswitch-common")?,
            ofctl: tool("ovs-ofctl", "openvswitch-common")?,
            ip: tool("ip", "iproute2")?,
            tag: std::process::id().to_string(),
        })
    }

    /// A command for `program` whose process may use every CPU lace-bench had.
    fn command(&self, program: &Path) -> anyhow::Result<Command> {
        let mut c = Command::new(program);
        sys::child_on_cpus(&mut c, &self.placement.cpus)
            .context("giving a peer process the CPUs")?;
        Ok(c)
    }

    /// EAL memory options matching lace-bench's own: hugepages (`--in-memory`) or `--no-huge`
    /// with `mb` MiB.
    fn eal_memory(&self, mb: u64) -> Vec<String> {
        if self.placement.hugepages {
            vec!["--in-memory".to_owned()]
        } else {
            vec![
                "--no-huge".to_owned(),
                "--no-shconf".to_owned(),
                "-m".to_owned(),
                mb.to_string(),
            ]
        }
    }
}

/// MiB of DPDK heap for a pool of `mbufs` default-sized mbufs, with room for the rest.
fn heap_mb(mbufs: u64) -> u64 {
    mbufs * 2560 / (1 << 20) + 512
}

/// Mbufs a reader of an infinite_rx pcap of `frames` frames needs: the PMD keeps one per frame.
fn pcap_mbufs(frames: usize) -> u64 {
    (frames as u64 + 16_384).next_power_of_two()
}

/// Runs `cmd` to completion; its stdout, or an error with its stderr.
fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let o = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !o.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}{}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim(),
            String::from_utf8_lossy(&o.stdout).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Polls `ready` every 10 ms until it holds or `timeout` passes.
fn wait_until(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Nanoseconds a thread has spent on a CPU: the first field of its `schedstat` file.
pub(crate) fn runtime_ns(schedstat: &Path) -> Option<u64> {
    std::fs::read_to_string(schedstat)
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
}

/// The share (at most 1) of `wall` a thread ran, from its runtime at both ends; 1 when unknown.
pub(crate) fn share(before: Option<u64>, after: Option<u64>, wall: Duration) -> f64 {
    match (before, after) {
        (Some(a), Some(b)) if b > a => {
            (b.saturating_sub(a) as f64 / wall.as_nanos().max(1) as f64).min(1.0)
        }
        _ => 1.0,
    }
}

/// A child process that is stopped (SIGTERM, then SIGKILL after 5 s) and waited for on drop.
#[derive(Debug)]
struct Daemon {
    name: &'static str,
    child: Child,
}

impl Daemon {
    /// Whether it has exited (reaped) within `timeout`.
    fn exited_within(&mut self, timeout: Duration) -> bool {
        wait_until(timeout, || !matches!(self.child.try_wait(), Ok(None)))
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if !self.running() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        if !self.exited_within(Duration::from_secs(5)) {
            eprintln!(
                "lace-bench: {} did not stop on SIGTERM; killing it",
                self.name
            );
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A network namespace, deleted on drop (with the links still in it).
#[derive(Debug)]
struct Netns {
    name: String,
    ip: PathBuf,
}

impl Netns {
    fn add(ip: &Path, name: String) -> anyhow::Result<Netns> {
        let _ = Command::new(ip)
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        run(Command::new(ip).args(["netns", "add", &name]))?;
        Ok(Netns {
            name,
            ip: ip.to_owned(),
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new(&self.ip)
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

/// A DPDK runtime directory (`/var/run/dpdk/<prefix>`), removed on drop.
#[derive(Debug)]
struct DpdkPrefix(String);

impl Drop for DpdkPrefix {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&self.0));
    }
}

// ---- dpdk-testpmd --------------------------------------------------------------------------------

/// `dpdk-testpmd` in `io` forward mode: the I/O floor of the pcap → null ports.
pub(crate) struct Testpmd;

impl Testpmd {
    /// testpmd's cycles per packet forwarding `pcap` into net_null: its `--record-core-cycles`
    /// counters read with `show fwd stats all` after `sizes.warmup` and then after each window,
    /// the median window.
    pub(crate) fn io_cycles(
        host: &PeerHost,
        pcap: &Path,
        frames: usize,
        sizes: &Sizes,
        scratch: &Path,
    ) -> anyhow::Result<f64> {
        let p = &host.placement;
        let prefix = DpdkPrefix(format!("lace-bench-testpmd-{}", host.tag));
        let mbufs = pcap_mbufs(frames);
        let log_path = scratch.join("testpmd.log");
        let log =
            File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
        let mut cmd = host.command(&host.testpmd)?;
        cmd.arg("-l")
            .arg(format!("{},{}", p.lcore, p.other))
            .arg("--main-lcore")
            .arg(p.other.to_string())
            .args(host.eal_memory(heap_mb(mbufs)))
            .args(["--no-pci", "--no-telemetry", "--file-prefix", &prefix.0])
            .arg("--vdev")
            .arg(format!(
                "net_pcap_tpmd0,rx_pcap={},infinite_rx=1",
                pcap.display()
            ))
            .args(["--vdev", "net_null_tpmd1,no-rx=1", "--"])
            .args([
                "-i",
                "--nb-cores=1",
                "--forward-mode=io",
                "--record-core-cycles",
            ])
            .arg(format!("--total-num-mbufs={mbufs}"))
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
        let mut d = Daemon {
            name: "dpdk-testpmd",
            child,
        };
        let mut stdin = d.child.stdin.take().context("testpmd's stdin")?;
        let log_text = || std::fs::read_to_string(&log_path).unwrap_or_default();
        let prompt = wait_until(Duration::from_secs(60), || {
            log_text().contains("testpmd> ") || !matches!(d.child.try_wait(), Ok(None))
        });
        if !prompt || !d.running() {
            bail!("dpdk-testpmd did not come up: {}", tail(&log_text(), 12));
        }
        let say = |stdin: &mut ChildStdin, line: &str| -> anyhow::Result<()> {
            writeln!(stdin, "{line}").context("writing to testpmd's stdin")
        };
        say(&mut stdin, "start")?;
        std::thread::sleep(sizes.warmup);
        say(&mut stdin, "show fwd stats all")?;
        for _ in 0..sizes.windows {
            std::thread::sleep(sizes.window);
            say(&mut stdin, "show fwd stats all")?;
        }
        say(&mut stdin, "quit")?;
        drop(stdin);
        if !d.exited_within(Duration::from_secs(30)) {
            bail!("dpdk-testpmd did not quit: {}", tail(&log_text(), 12));
        }
        let text = log_text();
        let counts = testpmd_cycle_counts(&text);
        if counts.len() < sizes.windows + 1 {
            bail!(
                "{} `CPU cycles/packet=… (total cycles=… / total io packets=…)` lines in \
                 testpmd's output, expected {}: {}",
                counts.len(),
                sizes.windows + 1,
                tail(&text, 12)
            );
        }
        // testpmd reads its stdin on its main lcore: when that thread was not scheduled for a
        // while, two `show` commands run back to back and the window between them holds a
        // burst or nothing. A window is therefore closed only once it holds at least a tenth
        // of the packets of the fullest one (short ones are merged into the next).
        let counts = &counts[..=sizes.windows];
        let fullest = counts
            .windows(2)
            .map(|w| w[1].1.saturating_sub(w[0].1))
            .max()
            .unwrap_or(0);
        let mut per_window = Vec::with_capacity(sizes.windows);
        let mut open = counts[0];
        for &c in &counts[1..] {
            let packets = c.1.saturating_sub(open.1);
            if packets > 0 && packets * 10 >= fullest {
                per_window.push(c.0.saturating_sub(open.0) as f64 / packets as f64);
                open = c;
            }
        }
        if per_window.is_empty() {
            bail!(
                "dpdk-testpmd forwarded no packets in any window: {}",
                tail(&text, 12)
            );
        }
        Ok(median(per_window))
    }
}

/// The `(total cycles, total io packets)` of every cycles line testpmd printed, in order.
fn testpmd_cycle_counts(text: &str) -> Vec<(u64, u64)> {
    let number_after = |line: &str, key: &str| -> Option<u64> {
        let rest = &line[line.find(key)? + key.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
    };
    text.lines()
        .filter(|l| l.contains("CPU cycles/packet="))
        .filter_map(|l| {
            Some((
                number_after(l, "total cycles=")?,
                number_after(l, "total io packets=")?,
            ))
        })
        .collect()
}

/// The last `n` lines of `text`, on one line.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

// ---- OVS-DPDK ------------------------------------------------------------------------------------

/// One OVS measurement.
#[derive(Debug, Clone)]
pub(crate) struct OvsPoint {
    /// PMD cycles per received packet while the PMD thread was on its CPU, the median window.
    pub(crate) cycles: f64,
    /// pmd-perf-show's own cycles per packet (TSC cycles of its iterations ÷ packets), the
    /// median window: includes the time other processes held its CPU.
    pub(crate) counter_cycles: f64,
    /// The share of the windows' wall time the PMD thread was running (its schedstat); `cycles`
    /// is `counter_cycles` scaled by it, window by window.
    pub(crate) on_cpu: f64,
    /// Packets received in all windows.
    pub(crate) packets: f64,
    /// Which caches served the packets (EMC / SMC / megaflow / upcalls).
    pub(crate) caches: String,
    /// The datapath actions of the pcap port's megaflows.
    pub(crate) actions: String,
}

/// A running OVS-DPDK: database, vswitchd, bridges and tunnel configured. Stopped (exit
/// `--cleanup`, database server stopped, namespace deleted, runtime directory removed) by
/// [`OvsDpdk::stop`] or on drop.
#[derive(Debug)]
pub(crate) struct OvsDpdk {
    host: PeerHost,
    dir: PathBuf,
    version: String,
    // Dropped in this order: vswitchd, database server, namespace, DPDK runtime directory.
    vswitchd: Option<Daemon>,
    db: Option<Daemon>,
    netns: Netns,
    _prefix: DpdkPrefix,
}

impl OvsDpdk {
    /// Starts OVS-DPDK in its own namespace with its database in `scratch/ovs` and configures
    /// the underlay bridge, the GRE/IPv6 tunnel and the OpenFlow rules (the pcap port is added
    /// per measurement).
    pub(crate) fn start(host: &PeerHost, scratch: &Path) -> anyhow::Result<OvsDpdk> {
        let p = &host.placement;
        let dir = scratch.join("ovs");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let netns = Netns::add(&host.ip, format!("lace-bench-ovs-{}", host.tag))?;
        let prefix = DpdkPrefix(format!("lace-bench-ovs-{}", host.tag));
        let db_path = dir.join("conf.db");
        run(host
            .command(&host.ovsdb_tool)?
            .arg("create")
            .arg(&db_path)
            .arg(OVS_SCHEMA))?;
        let env = |c: &mut Command| {
            for v in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR"] {
                c.env(v, &dir);
            }
        };
        let mut c = host.command(&host.ovsdb_server)?;
        env(&mut c);
        c.arg(&db_path)
            .arg(format!("--remote=punix:{}", dir.join("db.sock").display()))
            .arg(format!("--unixctl={}", dir.join("db.ctl").display()))
            .arg(format!("--log-file={}", dir.join("db.log").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let db = Daemon {
            name: "ovsdb-server",
            child: c.spawn().with_context(|| format!("starting {c:?}"))?,
        };
        let mut ovs = OvsDpdk {
            host: host.clone(),
            dir: dir.clone(),
            version: String::new(),
            vswitchd: None,
            db: Some(db),
            netns,
            _prefix: prefix,
        };
        if !wait_until(Duration::from_secs(10), || dir.join("db.sock").exists()) {
            bail!(
                "ovsdb-server did not create its socket: {}",
                ovs.log_tail("db.log")
            );
        }
        ovs.vsctl(&["--no-wait", "init"])?;
        let memory = if p.hugepages {
            vec![
                "other_config:dpdk-socket-mem=1024".to_owned(),
                "other_config:dpdk-socket-limit=1024".to_owned(),
            ]
        } else {
            Vec::new()
        };
        // --legacy-mem with --no-huge: OVS adds --in-memory otherwise, which --no-huge refuses.
        let extra = if p.hugepages {
            format!("--no-pci --no-telemetry --file-prefix={}", ovs._prefix.0)
        } else {
            format!(
                "--no-pci --no-telemetry --no-huge --legacy-mem -m {} --file-prefix={}",
                heap_mb(262_144),
                ovs._prefix.0
            )
        };
        let mut set = vec![
            "--no-wait".to_owned(),
            "set".to_owned(),
            "Open_vSwitch".to_owned(),
            ".".to_owned(),
            "other_config:dpdk-init=true".to_owned(),
            format!("other_config:dpdk-extra={extra}"),
            format!("other_config:dpdk-lcore-mask={:#x}", 1u64 << p.other),
            format!("other_config:pmd-cpu-mask={:#x}", 1u64 << p.lcore),
        ];
        set.extend(memory);
        ovs.vsctl(&set.iter().map(String::as_str).collect::<Vec<_>>())?;

        let mut c = host.command(&host.ip)?;
        env(&mut c);
        c.args(["netns", "exec", &ovs.netns.name])
            .arg(VSWITCHD_DPDK)
            .arg(format!("unix:{}", dir.join("db.sock").display()))
            .arg(format!("--unixctl={}", dir.join("vsd.ctl").display()))
            .arg(format!("--log-file={}", dir.join("vsd.log").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        ovs.vswitchd = Some(Daemon {
            name: "ovs-vswitchd-dpdk",
            child: c.spawn().with_context(|| format!("starting {c:?}"))?,
        });
        let up = wait_until(Duration::from_secs(60), || {
            dir.join("vsd.ctl").exists() || !ovs.vswitchd.as_mut().is_some_and(Daemon::running)
        });
        if !up || !ovs.vswitchd.as_mut().is_some_and(Daemon::running) {
            bail!(
                "ovs-vswitchd-dpdk did not start: {}",
                ovs.log_tail("vsd.log")
            );
        }
        ovs.version = ovs
            .appctl(&["version"])?
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned();

        ovs.vsctl(&[
            "--timeout=60",
            "add-br",
            "br-phy",
            "--",
            "set",
            "bridge",
            "br-phy",
            "datapath_type=netdev",
            "other_config:hwaddr=02:00:00:00:99:01",
            "--",
            "add-port",
            "br-phy",
            "p2",
            "--",
            "set",
            "Interface",
            "p2",
            "type=dpdk",
            "options:dpdk-devargs=net_null_ovs0,no-rx=1",
            "ofport_request=2",
        ])?;
        ovs.vsctl(&[
            "--timeout=60",
            "add-br",
            "br0",
            "--",
            "set",
            "bridge",
            "br0",
            "datapath_type=netdev",
            "--",
            "add-port",
            "br0",
            "gre6",
            "--",
            "set",
            "Interface",
            "gre6",
            "type=gre",
            &format!("options:remote_ip={OVS_REMOTE6}"),
            "options:packet_type=legacy_l3",
            "ofport_request=5",
        ])?;
        ovs.check_interface("p2")?;
        // The underlay: OVS learns br-phy's address from the kernel (netlink), then routes and
        // resolves the tunnel's remote end through it.
        ovs.in_netns(&["ip", "addr", "add", OVS_LOCAL6, "dev", "br-phy", "nodad"])?;
        ovs.in_netns(&["ip", "link", "set", "br-phy", "up"])?;
        let route = format!("{OVS_REMOTE6}/128");
        let mut last = None;
        let routed = wait_until(Duration::from_secs(10), || {
            match ovs.appctl(&["ovs/route/add", &route, "br-phy"]) {
                Ok(_) => true,
                Err(e) => {
                    last = Some(e);
                    false
                }
            }
        });
        if !routed {
            bail!(
                "ovs/route/add {route} br-phy kept failing: {:#}",
                last.unwrap_or_else(|| anyhow!("no attempt"))
            );
        }
        ovs.appctl(&["tnl/neigh/set", "br-phy", OVS_REMOTE6, OVS_REMOTE_MAC])?;
        ovs.ofctl(&["add-flow", "br-phy", "in_port=LOCAL,actions=output:2"])?;
        ovs.ofctl(&["del-flows", "br0"])?;
        ovs.ofctl(&["add-flow", "br0", "in_port=1,ip,actions=dec_ttl,output:5"])?;
        Ok(ovs)
    }

    /// `ovs-vswitchd --version`'s first line, as the daemon reports it.
    pub(crate) fn version(&self) -> &str {
        &self.version
    }

    fn log_tail(&self, file: &str) -> String {
        tail(
            &std::fs::read_to_string(self.dir.join(file)).unwrap_or_default(),
            8,
        )
    }

    fn vsctl(&self, args: &[&str]) -> anyhow::Result<String> {
        run(self
            .host
            .command(&self.host.vsctl)?
            .arg(format!("--db=unix:{}", self.dir.join("db.sock").display()))
            .args(args))
        .map_err(|e| anyhow!("{e:#}; vswitchd log: {}", self.log_tail("vsd.log")))
    }

    fn appctl(&self, args: &[&str]) -> anyhow::Result<String> {
        run(self
            .host
            .command(&self.host.appctl)?
            .arg("-t")
            .arg(self.dir.join("vsd.ctl"))
            .args(args))
    }

    /// `ovs-ofctl <verb> <bridge> args…` over the bridge's management socket.
    fn ofctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let (verb, rest) = args.split_first().context("an ovs-ofctl verb")?;
        let (bridge, rest) = rest.split_first().context("an ovs-ofctl bridge")?;
        run(self
            .host
            .command(&self.host.ofctl)?
            .arg(verb)
            .arg(format!(
                "unix:{}",
                self.dir.join(format!("{bridge}.mgmt")).display()
            ))
            .args(rest))
    }

    fn in_netns(&self, args: &[&str]) -> anyhow::Result<String> {
        run(self
            .host
            .command(&self.host.ip)?
            .args(["netns", "exec", &self.netns.name])
            .args(args))
    }

    /// Fails when OVS could not open `iface` (its `error` column is set or it has no port).
    fn check_interface(&self, iface: &str) -> anyhow::Result<()> {
        let error = self.vsctl(&["get", "Interface", iface, "error"])?;
        let ofport = self.vsctl(&["get", "Interface", iface, "ofport"])?;
        let error = error.trim();
        if !(error.is_empty() || error == "[]") || ofport.trim().starts_with('-') {
            bail!(
                "OVS could not open interface {iface}: {error} (ofport {}); vswitchd log: {}",
                ofport.trim(),
                self.log_tail("vsd.log")
            );
        }
        Ok(())
    }

    /// Feeds `pcap` (the `i`-th of the run) into br0 and reads the PMD's counters over the
    /// window, after purging the megaflows of earlier points and warming up.
    pub(crate) fn measure(
        &mut self,
        i: usize,
        pcap: &Path,
        frames: usize,
        sizes: &Sizes,
    ) -> anyhow::Result<OvsPoint> {
        if i > 0 {
            self.vsctl(&["--timeout=60", "del-port", "br0", "p1"])?;
        }
        let devargs = format!(
            "options:dpdk-devargs=net_pcap_ovs{i},rx_pcap={},infinite_rx=1",
            pcap.display()
        );
        self.vsctl(&[
            "--timeout=60",
            "add-port",
            "br0",
            "p1",
            "--",
            "set",
            "Interface",
            "p1",
            "type=dpdk",
            &devargs,
            "ofport_request=1",
        ])?;
        self.check_interface("p1")?;
        // Megaflows of the previous pcap would otherwise keep serving (never dpctl/del-flows:
        // it leaves the ukeys behind and every packet then takes a failing upcall).
        self.appctl(&["revalidator/purge"])?;
        std::thread::sleep(sizes.warmup);
        let core = self.host.placement.lcore;
        let id = format!("pcap {} ({frames} frames)", pcap.display());
        // Cumulative counters read at each window's edges and subtracted: a clear is applied
        // by the PMD thread itself at its next iteration, so reading right after one races.
        self.appctl(&["dpif-netdev/pmd-stats-clear"])?;
        std::thread::sleep(Duration::from_millis(100));
        let read = |ovs: &OvsDpdk| -> anyhow::Result<PmdPerf> {
            let perf = ovs.appctl(&["dpif-netdev/pmd-perf-show"])?;
            PmdPerf::parse(&perf, core).with_context(|| {
                format!(
                    "no PMD on core {core} in pmd-perf-show: {}",
                    tail(&perf, 30)
                )
            })
        };
        let first = read(self)?;
        let mut edge = (self.pmd_runtime_ns(), Instant::now());
        let start = edge.1;
        let runtime_start = edge.0;
        let mut last = first.clone();
        let mut raw = Vec::with_capacity(sizes.windows);
        let mut on_cpu = Vec::with_capacity(sizes.windows);
        for _ in 0..sizes.windows {
            std::thread::sleep(sizes.window);
            let now = read(self)?;
            let now_edge = (self.pmd_runtime_ns(), Instant::now());
            let w = now.since(&last);
            if w.rx == 0 || w.used_cycles == 0 {
                bail!(
                    "{id}: OVS's PMD counted {} packets in {} cycles in a window; vswitchd log: \
                     {}",
                    w.rx,
                    w.used_cycles,
                    self.log_tail("vsd.log")
                );
            }
            let cycles = w.used_cycles as f64 / w.rx as f64;
            raw.push(cycles);
            on_cpu.push(cycles * share(edge.0, now_edge.0, now_edge.1 - edge.1));
            last = now;
            edge = now_edge;
        }
        let pmd = last.since(&first);
        let ran = share(runtime_start, edge.0, edge.1 - start);
        let flows = self.appctl(&["dpctl/dump-flows", "-m"])?;
        if pmd.lost_upcalls > 0 || pmd.tx + 64 * (sizes.windows as u64) < pmd.rx {
            bail!(
                "{id}: OVS lost {} upcalls and sent {} of {} packets — not forwarding every \
                 packet; no figure taken",
                pmd.lost_upcalls,
                pmd.tx,
                pmd.rx
            );
        }
        let actions = tunnel_actions(&flows).with_context(|| {
            format!(
                "{id}: no datapath flow from p1 that decrements the TTL and pushes the 58-byte \
                 Eth + IPv6 + GRE header: {}",
                tail(&flows, 10)
            )
        })?;
        let pct = |n: u64| 100.0 * n as f64 / pmd.passes.max(1) as f64;
        Ok(OvsPoint {
            cycles: median(on_cpu),
            counter_cycles: median(raw),
            on_cpu: ran,
            packets: pmd.rx as f64,
            caches: format!(
                "EMC {:.1} %, SMC {:.1} %, megaflow {:.1} % ({} subtable lookups/hit), simple \
                 match {:.1} %, upcalls {}",
                pct(pmd.emc),
                pct(pmd.smc),
                pct(pmd.megaflow),
                pmd.subtable_lookups.as_deref().unwrap_or("?"),
                pct(pmd.simple_match),
                pmd.upcalls
            ),
            actions,
        })
    }

    /// Nanoseconds the PMD thread on the forwarding CPU has run (`/proc/<pid>/task/<tid>/
    /// schedstat`; OVS names that thread `pmd-c<core>/id:<n>`).
    fn pmd_runtime_ns(&mut self) -> Option<u64> {
        let pid = self.vswitchd.as_mut()?.child.id();
        let name = format!("pmd-c{:02}", self.host.placement.lcore);
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
            .find(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(&name))
            })
            .and_then(|t| runtime_ns(&t.path().join("schedstat")))
    }

    /// Stops everything; an error when vswitchd or the database server did not exit on its own
    /// (they are killed then).
    pub(crate) fn stop(mut self) -> anyhow::Result<()> {
        let mut problems = Vec::new();
        if let Some(mut d) = self.vswitchd.take() {
            // --cleanup removes the taps and the datapath before exiting.
            let _ = self.appctl(&["exit", "--cleanup"]);
            if !d.exited_within(Duration::from_secs(15)) {
                problems.push("ovs-vswitchd-dpdk did not exit on `exit --cleanup`");
            }
        }
        if let Some(mut d) = self.db.take() {
            let _ = run(self
                .host
                .command(&self.host.appctl)?
                .arg("-t")
                .arg(self.dir.join("db.ctl"))
                .arg("exit"));
            if !d.exited_within(Duration::from_secs(5)) {
                problems.push("ovsdb-server did not exit on `exit`");
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            bail!("{} (killed)", problems.join("; "))
        }
    }
}

impl Drop for OvsDpdk {
    fn drop(&mut self) {
        if self.vswitchd.is_some() {
            let _ = self.appctl(&["exit", "--cleanup"]);
            if let Some(d) = self.vswitchd.as_mut() {
                d.exited_within(Duration::from_secs(15));
            }
        }
        // The Daemon guards stop whatever still runs; the namespace takes any tap left.
    }
}

/// The datapath actions of the megaflows from `p1`, when every one of them decrements the TTL
/// and pushes the 58-byte Eth + IPv6 + GRE (protocol 47) header; the first one's.
fn tunnel_actions(flows: &str) -> Option<String> {
    let from_p1: Vec<&str> = flows
        .lines()
        .filter(|l| l.contains("in_port(p1)"))
        .collect();
    let ok = |l: &&str| {
        l.contains("set(ipv4(ttl=63))")
            && l.contains("tnl_push(")
            && l.contains("header(size=58")
            && l.contains("proto=47")
    };
    if from_p1.is_empty() || !from_p1.iter().all(ok) {
        return None;
    }
    let first = from_p1[0];
    Some(
        first[first.find("actions:")? + "actions:".len()..]
            .trim()
            .to_owned(),
    )
}

/// The counters of one PMD thread in `dpif-netdev/pmd-perf-show`.
#[derive(Debug, Clone, Default, PartialEq)]
struct PmdPerf {
    used_cycles: u64,
    rx: u64,
    passes: u64,
    simple_match: u64,
    emc: u64,
    smc: u64,
    megaflow: u64,
    /// As printed ("1.00"): over everything since the last clear.
    subtable_lookups: Option<String>,
    upcalls: u64,
    lost_upcalls: u64,
    tx: u64,
}

impl PmdPerf {
    /// The section of the PMD on `core` (`pmd thread numa_id N core_id <core>:`).
    fn parse(text: &str, core: u32) -> Option<PmdPerf> {
        let header = format!("core_id {core}:");
        let mut lines = text.lines();
        lines.find(|l| l.contains("pmd thread") && l.trim_end().ends_with(&header))?;
        let mut p = PmdPerf::default();
        let mut seen_rx = false;
        for line in lines {
            if line.contains("pmd thread") {
                break;
            }
            let line = line.trim().trim_start_matches("- ");
            let Some((key, rest)) = line.split_once(':') else {
                continue;
            };
            let value: Option<u64> = rest.split_whitespace().next().and_then(|v| v.parse().ok());
            let Some(value) = value else { continue };
            match key.trim() {
                "Used TSC cycles" => p.used_cycles = value,
                "Rx packets" => {
                    p.rx = value;
                    seen_rx = true;
                }
                "Datapath passes" => p.passes = value,
                "Simple Match hits" => p.simple_match = value,
                "EMC hits" => p.emc = value,
                "SMC hits" => p.smc = value,
                "Megaflow hits" => {
                    p.megaflow = value;
                    p.subtable_lookups = rest
                        .split(',')
                        .nth(1)
                        .and_then(|s| s.split_whitespace().next())
                        .map(str::to_owned);
                }
                "Upcalls" => p.upcalls = value,
                "Lost upcalls" => p.lost_upcalls = value,
                "Tx packets" => p.tx = value,
                _ => {}
            }
        }
        seen_rx.then_some(p)
    }

    /// The counts since `earlier` (a previous read of the same cumulative counters).
    fn since(&self, earlier: &PmdPerf) -> PmdPerf {
        PmdPerf {
            used_cycles: self.used_cycles.saturating_sub(earlier.used_cycles),
            rx: self.rx.saturating_sub(earlier.rx),
            passes: self.passes.saturating_sub(earlier.passes),
            simple_match: self.simple_match.saturating_sub(earlier.simple_match),
            emc: self.emc.saturating_sub(earlier.emc),
            smc: self.smc.saturating_sub(earlier.smc),
            megaflow: self.megaflow.saturating_sub(earlier.megaflow),
            subtable_lookups: self.subtable_lookups.clone(),
            upcalls: self.upcalls.saturating_sub(earlier.upcalls),
            lost_upcalls: self.lost_upcalls.saturating_sub(earlier.lost_upcalls),
            tx: self.tx.saturating_sub(earlier.tx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pmd-perf-show of OVS 3.1 on this kind of machine (one PMD on core 0).
    const PERF: &str = "Time: 23:50:58.479
Measurement duration: 3.032 s

pmd thread numa_id 0 core_id 0:

  Iterations:               497593  (6.09 us/it)
  - Used TSC cycles:    6973594236  (100.0 % of total cycles)
  - idle iterations:             0  (  0.0 % of used cycles)
  - busy iterations:        497593  (100.0 % of used cycles)
  - sleep iterations:            0  (  0.0 % of iterations)
  Sleep time (us):               0  (  0 us/iteration avg.)
  Rx packets:             15923008  (5252 Kpps, 438 cycles/pkt)
  Datapath passes:        15923008  (1.00 passes/pkt)
  - PHWOL hits:                  0  (  0.0 %)
  - MFEX Opt hits:               0  (  0.0 %)
  - Simple Match hits:           0  (  0.0 %)
  - EMC hits:             15923008  (100.0 %)
  - SMC hits:                    0  (  0.0 %)
  - Megaflow hits:               0  (  0.0 %, 0.00 subtbl lookups/hit)
  - Upcalls:                     0  (  0.0 %, 0.0 us/upcall)
  - Lost upcalls:                0  (  0.0 %)
  Tx packets:             15922976  (5252 Kpps)
  Tx batches:               497593  (32.00 pkts/batch)
";

    #[test]
    fn parses_pmd_perf_show() {
        let p = PmdPerf::parse(PERF, 0).unwrap();
        assert_eq!(p.used_cycles, 6_973_594_236);
        assert_eq!(p.rx, 15_923_008);
        assert_eq!(p.emc, 15_923_008);
        assert_eq!(p.passes, 15_923_008);
        assert_eq!((p.smc, p.megaflow, p.upcalls, p.lost_upcalls), (0, 0, 0, 0));
        assert_eq!(p.subtable_lookups.as_deref(), Some("0.00"));
        let none = p.since(&p);
        assert_eq!((none.rx, none.used_cycles, none.tx), (0, 0, 0));
        let d = p.since(&PmdPerf::default());
        assert_eq!((d.rx, d.tx), (p.rx, p.tx));
        assert_eq!(p.tx, 15_922_976);
        assert_eq!(PmdPerf::parse(PERF, 1), None);
    }

    #[test]
    fn parses_testpmd_cycles() {
        let t = "  CPU cycles/packet=119.84 (total cycles=3340919362 / total io packets=27878208) \
                 at 2300 MHz Clock\nother\n  CPU cycles/packet=119.84 (total cycles=3341145662 \
                 / total io packets=27880544) at 2300 MHz Clock\n";
        assert_eq!(
            testpmd_cycle_counts(t),
            vec![(3_340_919_362, 27_878_208), (3_341_145_662, 27_880_544)]
        );
    }

    #[test]
    fn tunnel_actions_need_every_piece() {
        let good = "ufid:dc50, recirc_id(0),in_port(p1),eth_type(0x0800),ipv4(ttl=64,frag=no), \
                    packets:2, bytes:128, used:0.0s, actions:pop_eth,set(ipv4(ttl=63)),\
                    tnl_push(tnl_port(gre_sys),header(size=58,type=109,eth(dst=02:00:00:00:99:02),\
                    ipv6(src=fd00:16::1,dst=fd00:16::2,proto=47,hlimit=64),gre((flags=0x0,\
                    proto=0x800))),out_port(br-phy)),p2";
        assert!(tunnel_actions(good)
            .unwrap()
            .starts_with("pop_eth,set(ipv4(ttl=63))"));
        assert_eq!(tunnel_actions(&good.replace("ttl=63", "ttl=64")), None);
        assert_eq!(tunnel_actions(&good.replace("size=58", "size=50")), None);
        assert_eq!(tunnel_actions(""), None);
    }
}
