//! Per-packet latency through lace-forwarder's real worker loop, under a paced load.
//!
//! Figure ids (µs; each beside the same percentile of the anchor, measured in the same rounds):
//!
//! | id | what | anchor |
//! |---|---|---|
//! | `pipeline.latency.ring_loop.{p50,p99,p999}_us` | a bare loop on the worker lcore: `rx_burst` from the pod ring, `tx_burst` into the uplink ring | — |
//! | `pipeline.latency.busy.{p50,p99,p999}_us`, `.max_us` | [`worker::run`] with [`Polling::Busy`]: the l3_encap path (pod → remote node, H.Encaps.Red) | `pipeline.latency.ring_loop.*` |
//! | `pipeline.latency.adaptive.{p50,p99,p999}_us`, `.max_us` | the same with [`Polling::Adaptive`] (the worker sleeps when idle) | `pipeline.latency.ring_loop.*` |
//!
//! How: three `net_ring` ports make two virtual cables: a generator port on the main lcore
//! transmits into the worker's pod port and receives what the worker's uplink port transmits.
//! The worker is the forwarder's own [`worker::run`] on the second lcore, given its tables and
//! ports through its [`Mailbox`] ([`Command::Tables`], [`Command::AddPort`]) exactly as the
//! engine does, so any change to how it polls or waits shows up here. The main lcore sends one
//! 64-byte UDP/IPv4 packet every [`PACE_NS`] (a fixed rate, not a closed loop), each carrying the
//! TSC read just before its `tx_burst` in its payload, and between sends polls the return ring;
//! a packet's latency is the TSC when it comes back minus the one it carries (one clock, one
//! core: no skew). The anchor does the same through the bare loop, so what the worker adds is
//! the difference. Contenders alternate in rounds; the first packets of each segment are not
//! recorded (warm-up), and a segment starts only once a probe packet has made the round trip.
//! Every packet must come back, encapsulated, with no drop counted in the
//! status region; otherwise the run fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use lace_forwarder::dpdk::{self as fwd, Burst, Mempool, Port, PortConfig, Ring};
use lace_forwarder::engine::worker::{
    self, Command, Mailbox, PortRx, PortTx, TxWhole, WorkerSetup,
};
use lace_forwarder::engine::Polling;
use lace_forwarder::pipeline::{Pipeline, Stage, UnderlayNeighbors};
use lace_forwarder::wire::ethernet;
use lace_shared::status::{StatusReader, StatusWriter};
use lace_shared::types::PortId;

use crate::dpdk::Eal;
use crate::peer::{
    load_average, node_config, udp4_frame, EncapNode, ScratchDir, ENCAP_GROWTH, PAYLOAD_OFFSET,
    POD_A,
};
use crate::report::{rdtsc, tsc_hz, Figure, Histogram, Scale};

/// Time between two packets of the paced load: 10 µs (100,000 packets/s).
pub const PACE_NS: u64 = 10_000;

/// Packets the cables and the generator's pool hold at most.
const IN_FLIGHT: u32 = 1 << 16;

/// What forwards the packets of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    /// The bare ring-to-ring loop.
    RingLoop,
    /// The forwarder's worker with this polling mode.
    Worker(Polling),
}

impl Contender {
    const ALL: [Contender; 3] = [
        Contender::RingLoop,
        Contender::Worker(Polling::Busy),
        Contender::Worker(Polling::Adaptive),
    ];

    const fn name(self) -> &'static str {
        match self {
            Contender::RingLoop => "ring_loop",
            Contender::Worker(Polling::Busy) => "busy",
            Contender::Worker(Polling::Adaptive) => "adaptive",
        }
    }

    /// Where the timestamp is in a frame coming back.
    const fn stamp_offset(self) -> usize {
        match self {
            Contender::RingLoop => PAYLOAD_OFFSET,
            Contender::Worker(_) => PAYLOAD_OFFSET + ENCAP_GROWTH,
        }
    }
}

/// Packets per segment and rounds at a [`Scale`].
fn sizes(scale: &Scale) -> (usize, usize, usize) {
    // (rounds, packets per segment, warm-up packets per segment)
    if scale.smoke {
        (1, 2_000, 200)
    } else if scale.quick {
        (5, 40_000, 1_000)
    } else {
        (11, 100_000, 2_000)
    }
}

/// The ports and rings of the two cables, and the generator's queues.
struct Cables {
    pod: Port,
    uplink: Port,
    gen_rx: fwd::RxQueue,
    gen_tx: fwd::TxQueue,
    pool: Mempool,
    _gen: Port,
}

impl Cables {
    fn new(eal: &fwd::Eal) -> anyhow::Result<Cables> {
        // Room for 0.65 s of packets in flight: a worker thread that other processes keep
        // off its CPU for a while delays them (a tail in the figure) instead of failing the run.
        let pool = Mempool::new(
            eal,
            "lace_latency",
            IN_FLIGHT - 1,
            256,
            Mempool::DEFAULT_DATA_ROOM,
            None,
        )?;
        let ring = |name: &str| Ring::new(eal, name, IN_FLIGHT, None);
        let (to_worker, from_worker, spare) = (
            ring("lat_to_worker")?,
            ring("lat_from_worker")?,
            ring("lat_spare")?,
        );
        let config = PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            ..PortConfig::default()
        };
        let port = |name: &str, rx: &Ring, tx: &Ring| -> anyhow::Result<Port> {
            let mut p = Port::from_rings(
                eal,
                name,
                std::slice::from_ref(rx),
                std::slice::from_ref(tx),
            )?;
            p.configure(&config, &pool)?;
            p.start()?;
            Ok(p)
        };
        // The pod's replies (none expected) and the uplink's receive side go to a spare ring
        // nobody polls.
        let pod = port("lat_pod", &to_worker, &spare)?;
        let uplink = port("lat_up", &spare, &from_worker)?;
        let gen = port("lat_gen", &from_worker, &to_worker)?;
        Ok(Cables {
            gen_rx: gen.rx_queue(0)?,
            gen_tx: gen.tx_queue(0)?,
            pod,
            uplink,
            pool,
            _gen: gen,
        })
    }
}

/// What runs on the worker lcore during a segment.
enum Running {
    RingLoop {
        stop: Arc<AtomicBool>,
        job: fwd::Worker,
    },
    Worker {
        mailbox: Arc<Mailbox>,
        job: fwd::Worker,
    },
}

impl Running {
    fn stop(self) -> anyhow::Result<()> {
        let (ret, what) = match self {
            Running::RingLoop { stop, job } => {
                stop.store(true, Ordering::Release);
                (job.join(), "the ring loop")
            }
            Running::Worker { mailbox, job } => {
                mailbox.request_stop();
                (job.join(), "worker::run")
            }
        };
        if ret != 0 {
            bail!("{what} returned {ret}");
        }
        Ok(())
    }
}

/// The node's tables, status region and neighbors, shared by every worker segment.
struct Forwarder {
    node: EncapNode,
    status: Arc<StatusWriter>,
    status_path: std::path::PathBuf,
    neigh: Arc<UnderlayNeighbors>,
    _dir: ScratchDir,
}

fn start(
    eal: &fwd::Eal,
    lcore: u32,
    c: Contender,
    cables: &Cables,
    fwd: &Forwarder,
) -> anyhow::Result<Running> {
    match c {
        Contender::RingLoop => {
            let (mut rx, mut tx) = (cables.pod.rx_queue(0)?, cables.uplink.tx_queue(0)?);
            let stop = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&stop);
            let job = eal.launch(lcore, move || {
                let mut b: Burst = Burst::new();
                while !flag.load(Ordering::Relaxed) {
                    if rx.rx_burst(&mut b) > 0 {
                        tx.tx_burst(&mut b);
                        b.clear();
                    }
                }
                0
            })?;
            Ok(Running::RingLoop { stop, job })
        }
        Contender::Worker(polling) => {
            let mailbox = Arc::new(Mailbox::default());
            let setup = WorkerSetup {
                index: 0,
                mailbox: Arc::clone(&mailbox),
                status: Arc::clone(&fwd.status),
                pool: cables.pool.clone(),
                large: None,
                polling,
                spin: worker::IDLE_SPIN,
                pipeline: Pipeline::new(node_config(), Arc::clone(&fwd.neigh)),
                tsc_hz: eal.tsc_hz(),
            };
            let job = eal.launch(lcore, move || worker::run(setup))?;
            let running = Running::Worker {
                mailbox: Arc::clone(&mailbox),
                job,
            };
            let generation = mailbox.post([
                Command::Tables(fwd.node.reader.register()?),
                Command::AddPort {
                    port: POD_A,
                    rx: vec![PortRx::Dpdk(cables.pod.rx_queue(0)?, None)],
                    tx: PortTx::Dpdk(cables.pod.tx_queue(0)?, TxWhole::Nothing),
                },
                Command::AddPort {
                    port: PortId::UPLINK,
                    rx: Vec::new(),
                    tx: PortTx::Dpdk(cables.uplink.tx_queue(0)?, TxWhole::Nothing),
                },
            ]);
            if let Err(e) = mailbox.wait_ack(generation, Duration::from_secs(5)) {
                let _ = running.stop();
                bail!("the worker did not take its tables and ports: {e}");
            }
            Ok(running)
        }
    }
}

/// Sends `packets` paced packets through whatever runs, records all but the first `warmup`
/// into `hist`.
fn segment(
    cables: &mut Cables,
    c: Contender,
    packets: usize,
    warmup: usize,
    hist: &mut Histogram,
) -> anyhow::Result<()> {
    let hz = tsc_hz();
    let interval = (PACE_NS as f64 * hz / 1e9) as u64;
    let template = udp4_frame(std::net::Ipv4Addr::new(10, 2, 0, 5), 1024);
    let at = c.stamp_offset();
    let (mut tx, mut rx): (Burst, Burst) = (Burst::new(), Burst::new());
    // First one packet there and back: the far side is then polling (a worker thread that the
    // kernel has not scheduled yet would otherwise make the first packets wait for it).
    let probe = cables
        .pool
        .alloc()
        .ok_or_else(|| anyhow!("the generator's mempool is empty"))?;
    let _ = tx.push(probe);
    if let Some(m) = tx.as_mut_slice().first_mut() {
        m.extend_from_slice(&template);
    }
    if cables.gen_tx.tx_burst(&mut tx) != 1 {
        bail!("latency.{}: the worker's RX ring is full", c.name());
    }
    let probe_sent = rdtsc();
    while cables.gen_rx.rx_burst(&mut rx) == 0 {
        if rdtsc().saturating_sub(probe_sent) > hz as u64 {
            bail!(
                "latency.{}: the probe packet did not come back within 1 s",
                c.name()
            );
        }
        std::hint::spin_loop();
    }
    rx.clear();
    let (mut sent, mut back) = (0usize, 0usize);
    let mut next = rdtsc();
    // Generous: a packet that has not come back 1 s after the last send is lost.
    let patience = hz as u64;
    let mut last_send = rdtsc();
    while back < packets {
        let now = rdtsc();
        if sent < packets && now >= next {
            let mut m = cables
                .pool
                .alloc()
                .ok_or_else(|| anyhow!("the generator's mempool is empty"))?;
            if !m.extend_from_slice(&template) {
                bail!("a 64-byte frame does not fit an mbuf");
            }
            let stamp = rdtsc();
            m.data_mut()[PAYLOAD_OFFSET..PAYLOAD_OFFSET + 8].copy_from_slice(&stamp.to_le_bytes());
            let _ = tx.push(m);
            if cables.gen_tx.tx_burst(&mut tx) != 1 {
                bail!(
                    "latency.{}: the worker's RX ring is full ({IN_FLIGHT} packets): it has not \
                     polled for 0.65 s",
                    c.name()
                );
            }
            sent += 1;
            last_send = stamp;
            next += interval;
        }
        if cables.gen_rx.rx_burst(&mut rx) > 0 {
            let now = rdtsc();
            for m in rx.drain() {
                let d = m.data();
                if d.len() < at + 8 {
                    bail!(
                        "latency.{}: a {}-byte frame came back, expected at least {}",
                        c.name(),
                        d.len(),
                        at + 8
                    );
                }
                if matches!(c, Contender::Worker(_)) {
                    let eth = ethernet::Frame::new_checked(d)
                        .map_err(|e| anyhow!("latency.{}: {e:?}", c.name()))?;
                    if eth.ethertype() != ethernet::EtherType::Ipv6 {
                        bail!("latency.{}: a frame came back unencapsulated", c.name());
                    }
                }
                let stamp = u64::from_le_bytes(d[at..at + 8].try_into().expect("8 bytes"));
                if back >= warmup {
                    hist.record_cycles(now.saturating_sub(stamp));
                }
                back += 1;
            }
        } else if sent == packets && rdtsc().saturating_sub(last_send) > patience {
            bail!(
                "latency.{}: {} of {packets} packets did not come back",
                c.name(),
                packets - back
            );
        }
    }
    Ok(())
}

/// The latency figures and a note; `None` for the worker lcore: not measured (with the reason).
pub fn figures(
    eal: Eal,
    scale: &Scale,
    worker_lcore: Option<u32>,
) -> anyhow::Result<(Vec<Figure>, Vec<String>)> {
    let Some(lcore) = worker_lcore else {
        return Ok((
            Vec::new(),
            vec![
                "pipeline.latency.*: not measured — no second CPU for the worker lcore".to_owned(),
            ],
        ));
    };
    let (rounds, packets, warmup) = sizes(scale);
    let eal = eal.forwarder()?;
    let dir = ScratchDir::new("lace-bench-latency", true)?;
    let status_path = dir.0.join("status");
    let fwd = Forwarder {
        node: EncapNode::create("latency").context("building the latency tables")?,
        status: Arc::new(StatusWriter::create(&status_path, 1, &Stage::names())?),
        status_path,
        neigh: Arc::new(UnderlayNeighbors::new(64)),
        _dir: dir,
    };
    let mut cables = Cables::new(&eal)?;
    let mut hists: Vec<Histogram> = Contender::ALL.iter().map(|_| Histogram::new()).collect();
    for _ in 0..rounds {
        for (c, h) in Contender::ALL.iter().zip(&mut hists) {
            let running = start(&eal, lcore, *c, &cables, &fwd)
                .with_context(|| format!("pipeline.latency.{}", c.name()))?;
            let r = segment(&mut cables, *c, packets, warmup, h);
            running.stop()?;
            r?;
        }
    }
    let drops = StatusReader::open(&fwd.status_path)?.all_drops();
    let dropped: Vec<String> = drops
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| format!("{}: {n}", r.name()))
        .collect();
    if !dropped.is_empty() {
        bail!(
            "pipeline.latency: the worker dropped packets ({}); no figure taken",
            dropped.join(", ")
        );
    }

    let mut figures = Vec::new();
    let pcts = [(50.0, "p50_us"), (99.0, "p99_us"), (99.9, "p999_us")];
    let anchors: Vec<Figure> = pcts
        .iter()
        .map(|(p, s)| {
            Figure::new(
                format!("pipeline.latency.ring_loop.{s}"),
                hists[0].percentile_us(*p),
                "µs",
            )
        })
        .collect();
    figures.extend(anchors.iter().cloned());
    for (c, h) in Contender::ALL.iter().zip(&hists).skip(1) {
        for ((p, s), a) in pcts.iter().zip(&anchors) {
            figures.push(Figure::versus(
                format!("pipeline.latency.{}.{s}", c.name()),
                h.percentile_us(*p),
                a,
            ));
        }
        figures.push(Figure::new(
            format!("pipeline.latency.{}.max_us", c.name()),
            h.max_us(),
            "µs",
        ));
    }
    let note = format!(
        "pipeline.latency.*: one 64-byte UDP/IPv4 packet every {} µs ({} packets/s) from the \
         main lcore into the worker's pod ring, l3_encap to the uplink ring, back to the main \
         lcore; TSC at send → TSC at receive on the same core; worker::run on lcore {lcore} \
         (busy / adaptive: spins {:?} yielding, then sleeps {:?}…{:?}) vs a bare rx→tx ring loop on \
         the same lcore; {rounds} alternating rounds of {packets} packets per contender, the \
         first {warmup} of each not recorded ({} recorded each); machine load average {} \
         (other processes on the worker's CPU show as millisecond tails in every contender)",
        PACE_NS / 1000,
        1_000_000_000 / PACE_NS,
        worker::IDLE_SPIN,
        worker::MIN_SLEEP,
        worker::MAX_SLEEP,
        hists[0].len(),
        load_average()
    );
    Ok((figures, vec![note]))
}
