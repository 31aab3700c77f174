//! l2 learning figures (ADR 0019): how many forwarder reports control takes in, and how fast
//! a VM's move reaches every node's tables.
//!
//! | id | what | anchor |
//! |---|---|---|
//! | `learn.events_per_s` | reports per second through control's learning, in process: a thread writes gratuitous ARPs into a forwarder status region's learn ring (as a worker does), control's intake thread reads them and the loop's learning step ([`Learning`]) decides and saves them in the shared records' file ([`FileStore`], a temporary directory on the same disk as the state) — 10,000 MACs, each announced from one of two ports in turn, so every pass moves all of them | `learn.ring_floor.events_per_s`: the same stream through the ring and the intake alone (nothing decided, nothing saved) |
//! | `mobility.converge_ms.{p50,p99}` | the full stack (root; the two-node stack of the `cni` figures with their `lace-forwarder`s and `lace-control`s): a VM's MAC announced by a RARP from a pod on one node, then on the other, in turn; from the moment the frame is sent until both nodes' published tables place the MAC at its new location with the new sequence number | `mobility.local_ms.{p50,p99}`: the same moves until the announcing node's own tables show it (one control round, no propagation) |
//!
//! The producer of `learn.events_per_s` keeps at most half a ring ahead of what control's
//! intake has read and half the loop's backlog ahead of what it decided, so the figure is
//! control's sustained rate, never a loss; a run that loses
//! reports anyway fails. As in the daemon, the loop takes every report queued since its last
//! step in one batch. The RARPs of the mobility figure are sent by one `python3` process per pod
//! network namespace, started before the clock (the clock starts when the command is written
//! to it); the tables are read every 100 µs.

use std::io::{BufRead, BufReader, Write as _};
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use lace_control::api::NetworkType;
use lace_control::daemon::learning::{Learning, MAX_BACKLOG};
use lace_control::learn::intake::{self, Intake, Wake};
use lace_control::learn::store::FileStore;
use lace_control::world::{AttachmentKey, EndpointModel, L2Config, NetworkModel, World};
use lace_shared::learn::{LearnEvent, LearnKind};
use lace_shared::status::{status_path, StatusWriter, LEARN_SLOTS};
use lace_shared::tables::{ReaderHandle, TableReader};
use lace_shared::types::{IfName, L2Hop, MacAddr, NetworkId, PortId};

use crate::control::{Outcome, Stack, TempDir};
use crate::report::{Figure, Histogram, Scale};

/// Target of `learn.events_per_s` (issue 11).
pub const EVENTS_TARGET: f64 = 100_000.0;
/// The mobility figure with its target (issue 11): p99 at most 50 ms.
pub const CONVERGE_FIGURE: &str = "mobility.converge_ms.p99";

// ---- learn.events_per_s ------------------------------------------------------------------

/// MACs and reports of the events figure at a scale.
fn event_sizes(scale: &Scale) -> (u64, u64) {
    if scale.smoke {
        (100, 2_000)
    } else if scale.quick {
        (10_000, 200_000)
    } else {
        (10_000, 1_000_000)
    }
}

/// The world of the events figure: a learning l2 network with two pods on node `a`.
fn events_world() -> anyhow::Result<World> {
    let mut w = World::default();
    w.networks.insert(
        "vms".into(),
        NetworkModel {
            name: "vms".into(),
            id: NetworkId(1),
            kind: NetworkType::L2,
            v4: Some(("10.64.0.0/16".parse()?, None)),
            v6: None,
            external: vec![],
            anonymous: false,
            l2: L2Config {
                learning: NonZeroU32::new(300),
                ..L2Config::default()
            },
            uplinks: Vec::new(),
        },
    );
    for i in 1..=2u32 {
        w.endpoints.insert(
            AttachmentKey {
                container_id: format!("c{i}"),
                ifname: "eth0".into(),
            },
            EndpointModel {
                namespace: "vms".into(),
                pod: format!("launcher-{i}"),
                network: "vms".into(),
                node: "a".into(),
                addresses: vec![IpAddr::V4(Ipv4Addr::new(10, 64, 255, i as u8))],
                mac: MacAddr([2, 0, 0, 0, 0, i as u8]),
                port: PortId(i),
                host_iface: IfName::new(&format!("lace{i}"))?,
                endpoint_id: u64::from(i),
            },
        );
    }
    Ok(w)
}

/// Report `k` of the stream: MAC `k % macs`, from port 1 or 2 by pass.
fn event(k: u64, macs: u64) -> LearnEvent {
    let i = k % macs;
    let port = 1 + ((k / macs) % 2) as u32;
    LearnEvent {
        port: PortId(port),
        endpoint: u64::from(port),
        network: NetworkId(1),
        kind: LearnKind::GratuitousArp,
        mac: MacAddr::from_u64(0x5254_0000_0000 + i),
        ip: Some(IpAddr::V4(Ipv4Addr::new(10, 64, (i >> 8) as u8, i as u8))),
        at_ns: k,
    }
}

/// Writes `total` reports into worker 0's ring of `w`, never more than half a ring ahead of
/// what the intake has `read`, nor half the loop's backlog ahead of what it `decided`.
fn produce(
    w: &StatusWriter,
    total: u64,
    macs: u64,
    (read, decided): (&AtomicU64, &AtomicU64),
    stop: &AtomicBool,
) {
    let Some(mut ring) = w.learn_writer(0) else {
        return;
    };
    let backlog = MAX_BACKLOG as u64 / 2;
    for k in 0..total {
        while k.saturating_sub(read.load(Ordering::Acquire)) >= LEARN_SLOTS / 2
            || k.saturating_sub(decided.load(Ordering::Acquire)) >= backlog
        {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            // Not a spin: on a small machine the forwarder's core is control's too.
            std::thread::sleep(Duration::from_micros(50));
        }
        ring.push(&event(k, macs));
    }
}

/// One run: the producer, the intake thread (which, as in the daemon, keeps reading the ring
/// while the loop works) and `consume` taking every wake-up queued at once (the loop's batch);
/// returns the reports per second and the reports lost.
fn run_stream(
    dir: &std::path::Path,
    name: &str,
    total: u64,
    macs: u64,
    mut consume: impl FnMut(Vec<Wake>) -> anyhow::Result<u64>,
) -> anyhow::Result<(f64, u64)> {
    let path = status_path(dir, name);
    let writer = StatusWriter::create(&path, 1, &["bench"])?;
    let (tx, rx) = mpsc::channel();
    let read = Arc::new(AtomicU64::new(0));
    let intake_read = Arc::clone(&read);
    // No records' store in this figure: a counter nobody bumps never signals a change.
    let no_store = intake::StoreSignal::Counter(Arc::new(AtomicU64::new(0)));
    intake::spawn(Intake::new(&path), no_store, move |w| {
        if let Wake::Reports(_, r) = &w {
            intake_read.fetch_add(r.read + r.lost, Ordering::Release);
        }
        tx.send(w).is_ok()
    })?;
    // The intake maps the region at its first poll: before the first report.
    std::thread::sleep(intake::POLL * 10);
    let stop = AtomicBool::new(false);
    let decided = AtomicU64::new(0);
    let (mut done, mut lost) = (0u64, 0u64);
    let mut elapsed = Duration::ZERO;
    std::thread::scope(|s| -> anyhow::Result<()> {
        let start = Instant::now();
        let producer = s.spawn(|| produce(&writer, total, macs, (&read, &decided), &stop));
        let result = (|| {
            while done + lost < total {
                let first = rx
                    .recv_timeout(Duration::from_secs(30))
                    .map_err(|_| anyhow!("no report for 30 s ({done} of {total} taken in)"))?;
                let mut batch = vec![first];
                batch.extend(rx.try_iter());
                for w in &batch {
                    if let Wake::Reports(_, r) = w {
                        lost += r.lost;
                    }
                }
                done += consume(batch)?;
                decided.store(done + lost, Ordering::Release);
            }
            Ok(())
        })();
        elapsed = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        let _ = producer.join();
        result
    })?;
    // The intake thread ends with the channel: its next wake-up fails to send.
    drop(rx);
    Ok((done as f64 / elapsed.as_secs_f64(), lost))
}

/// `learn.events_per_s` and its ring floor.
pub fn events_figures(scale: &Scale, out: &mut Outcome) -> anyhow::Result<()> {
    let (macs, total) = event_sizes(scale);
    let dir = TempDir::new("lace-bench-learn", &std::env::temp_dir())?;
    let count = |batch: &[Wake]| -> u64 {
        batch
            .iter()
            .map(|w| match w {
                Wake::Reports(events, _) => events.len() as u64,
                Wake::StoreChanged => 0,
            })
            .sum()
    };
    let (floor, floor_lost) = run_stream(&dir.0, "floor", total, macs, |batch| Ok(count(&batch)))?;
    let world = events_world()?;
    let store = FileStore::open(&dir.0.join("lace-state.json.learned"))?;
    let mut learning = Learning::new(Box::new(store), "a");
    let mut decided = 0u64;
    let mut steps = 0u64;
    let (rate, lost) = run_stream(&dir.0, "learn", total, macs, |batch| {
        let n = count(&batch);
        steps += 1;
        for w in batch {
            learning.wake(w);
        }
        // The loop's step, once per batch.
        learning.step(&world, false);
        if let Some(e) = learning.error() {
            bail!("the learned MACs could not be saved: {e}");
        }
        decided += n;
        Ok(n)
    })?;
    let lost = lost + learning.stats().lost;
    if lost + floor_lost > 0 {
        bail!("learn.events_per_s: {lost} (floor {floor_lost}) reports lost; no figure taken");
    }
    let stats = learning.stats();
    if stats.learned != macs || decided != total {
        bail!(
            "learn.events_per_s: control learned {} MACs (want {macs}) from {decided} of \
             {total} reports — the stream did not take the intended path",
            stats.learned
        );
    }
    let anchor = out.push(Figure::new(
        "learn.ring_floor.events_per_s",
        floor,
        "reports/s",
    ));
    out.push(Figure::versus("learn.events_per_s", rate, &anchor));
    out.notes.push(format!(
        "learn.events_per_s: {total} gratuitous ARPs about {macs} MACs from two ports in turn \
         (control: {} learned, {} moves, {} ignored, {} addresses refused; {steps} steps, {} \
         reports per step on average), written into a status region's learn ring at most half a ring ahead of \
         control's intake; the intake thread (every {} ms) and the loop's learning step, one \
         per batch of what was queued: decided and saved to the shared records' file (JSON, \
         write + fsync + rename per step, {} records) in {}; ring_floor: the same stream, the \
         intake alone",
        stats.learned,
        stats.moved,
        stats.ignored,
        stats.refused,
        decided / steps.max(1),
        intake::POLL.as_millis(),
        macs,
        dir.0.display()
    ));
    Ok(())
}

// ---- mobility.converge_ms ----------------------------------------------------------------

/// Moves of the mobility figure at a scale.
fn moves(scale: &Scale) -> usize {
    if scale.smoke {
        3
    } else if scale.quick {
        40
    } else {
        200
    }
}

/// The learning network and the two launcher pods of the mobility figure.
const VMS: &str = "apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata: {name: vms}
spec:
  type: l2
  ipv4Subnet: {prefix: 10.60.0.0/24}
  l2: {learning: {enabled: true}}
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata: {name: vm-tier}
spec:
  priority: -20
  matchKind: [pod]
  rules:
  - network: vms
    selector: {matchLabels: {tier: vm}}
---
apiVersion: v1
kind: Pod
metadata: {name: launcher-a, namespace: team-blue, labels: {tier: vm}}
spec: {nodeName: node-a, containers: [{name: compute, image: registry.k8s.io/pause:3.10}]}
---
apiVersion: v1
kind: Pod
metadata: {name: launcher-b, namespace: team-blue, labels: {tier: vm}}
spec: {nodeName: node-b, containers: [{name: compute, image: registry.k8s.io/pause:3.10}]}
";

/// The VM's MAC.
const VM: MacAddr = MacAddr([0x52, 0x54, 0, 0x6c, 0xac, 0xe1]);

/// A process in a pod's namespace that sends the VM's RARP from eth0 at each line it reads.
struct Announcer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Announcer {
    fn start(netns: &str) -> anyhow::Result<Announcer> {
        let script = r#"
import socket, struct, sys
mac = bytes.fromhex(sys.argv[1])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
frame = b"\xff" * 6 + mac + struct.pack("!H", 0x8035) + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 3) + mac + bytes(4) + mac + bytes(4) + bytes(18)
print("ready", flush=True)
for line in sys.stdin:
    s.send(frame)
    print("sent", flush=True)
"#;
        let hex: String = VM.0.iter().map(|b| format!("{b:02x}")).collect();
        let mut child = Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{netns}"))
            .args(["python3", "-u", "-c", script, &hex])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting python3 in the pod's namespace")?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        let stdout = BufReader::new(child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?);
        let mut a = Announcer {
            child,
            stdin,
            stdout,
        };
        a.expect("ready")?;
        Ok(a)
    }

    fn expect(&mut self, what: &str) -> anyhow::Result<()> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        if line.trim() != what {
            bail!("the announcer said {line:?}, expected {what:?} (python3 missing?)");
        }
        Ok(())
    }

    /// Sends one RARP; returns when it was asked to (before the send).
    fn announce(&mut self) -> anyhow::Result<Instant> {
        let t = Instant::now();
        self.stdin.write_all(b"go\n")?;
        self.expect("sent")?;
        Ok(t)
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where node `n`'s tables place the VM: (on a local port, sequence number).
fn placed(h: &mut ReaderHandle, net: NetworkId) -> Option<(bool, u32)> {
    let found = {
        let snap = h.snapshot();
        snap.network(net)
            .and_then(|v| v.fdb_rec(VM).copied())
            .and_then(|r| Some((matches!(r.hop()?, L2Hop::Port(_)), r.seq)))
    };
    h.quiescent();
    found
}

/// `mobility.converge_ms` and its local anchor, on the two-node stack.
pub fn mobility_figures(scale: &Scale, out: &mut Outcome) -> anyhow::Result<()> {
    let mut stack = Stack::start()?;
    let result = measure_mobility(&mut stack, scale, out);
    if result.is_err() {
        let logs = stack.log_tails();
        return result.map_err(|e| anyhow!("{e:#}; {logs}"));
    }
    result
}

fn measure_mobility(stack: &mut Stack, scale: &Scale, out: &mut Outcome) -> anyhow::Result<()> {
    std::fs::write(stack.manifests().join("bench-vms.yaml"), VMS)?;
    stack.launch(0, 0)?;
    stack
        .add("a", "launcher-a")
        .context("attaching launcher-a")?;
    stack
        .add("b", "launcher-b")
        .context("attaching launcher-b")?;
    let mut senders = [
        Announcer::start(&stack.pod_ns("launcher-a"))?,
        Announcer::start(&stack.pod_ns("launcher-b"))?,
    ];
    let readers = [
        TableReader::attach(&stack.tables("a"))?,
        TableReader::attach(&stack.tables("b"))?,
    ];
    let mut handles = [readers[0].register()?, readers[1].register()?];
    let status = stack.manifests().join(".lace/status-node-a.yaml");
    let net = (|| -> anyhow::Result<NetworkId> {
        let s: lace_control::daemon::status::StatusFile =
            serde_yaml::from_str(&std::fs::read_to_string(&status)?)?;
        let id = s
            .networks
            .iter()
            .find(|n| n.name == "vms")
            .and_then(|n| n.status.id)
            .ok_or_else(|| anyhow!("network vms has no id yet"))?;
        Ok(NetworkId(id))
    })()
    .with_context(|| format!("reading {}", status.display()))?;
    let (mut local, mut converge) = (Histogram::new(), Histogram::new());
    let n = moves(scale);
    // Move 0 (untimed) learns the VM on node-a; each later one moves it to the other node.
    for m in 0..=n {
        let at = m % 2;
        let seq = m as u32 + 1;
        let sent = senders[at].announce()?;
        let (mut here, mut everywhere) = (None, None);
        while everywhere.is_none() {
            if sent.elapsed() > Duration::from_secs(10) {
                stack.check_alive()?;
                bail!(
                    "move {m}: the VM's entries did not reach sequence {seq} within 10 s \
                     (node-a {:?}, node-b {:?})",
                    placed(&mut handles[0], net),
                    placed(&mut handles[1], net)
                );
            }
            let mine = placed(&mut handles[at], net) == Some((true, seq));
            let other = placed(&mut handles[1 - at], net) == Some((false, seq));
            if mine && here.is_none() {
                here = Some(sent.elapsed());
            }
            if mine && other {
                everywhere = Some(sent.elapsed());
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        if m > 0 {
            local.record(here.unwrap_or_default());
            converge.record(everywhere.unwrap_or_default());
        }
    }
    drop(handles);
    let ms = |h: &Histogram, p: f64| h.percentile_us(p) / 1000.0;
    let l50 = out.push(Figure::new("mobility.local_ms.p50", ms(&local, 50.0), "ms"));
    let l99 = out.push(Figure::new("mobility.local_ms.p99", ms(&local, 99.0), "ms"));
    out.push(Figure::versus(
        "mobility.converge_ms.p50",
        ms(&converge, 50.0),
        &l50,
    ));
    out.push(Figure::versus(CONVERGE_FIGURE, ms(&converge, 99.0), &l99));
    out.notes.push(format!(
        "mobility: {n} moves of a VM's MAC between a pod on node-a and one on node-b of a \
         learning l2 network, each a RARP (QEMU's self-announcement) sent from the pod's \
         namespace; converge: until both nodes' published tables place the MAC at the new \
         location with the new sequence number; local: until the announcing node's do; tables \
         read every 100 µs; two lace-forwarders and two lace-controls (standalone, one shared \
         records file on disk), the stack of the cni figures"
    ));
    Ok(())
}
