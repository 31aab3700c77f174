//! The engine: what `lace-forwarder run` does, from configuration to a clean stop.
//!
//! ```text
//!  main lcore (this thread)                    worker lcores (one per worker, pinned)
//!  ─────────────────────────                   ──────────────────────────────────────
//!  status region, EAL, mempool, uplink         poll RX queues ─► pipeline ─► TX buffers
//!  launch workers ──── mailbox: queues ───────►  (snapshot per round, quiescent after)
//!  every 20 ms: heartbeat, signals,            drain TX buffers, flush counters
//!    tables (wait / attach / replaced),        adaptive: sleep 10 µs … 1 ms when idle
//!    reconcile pod ports ◄── acks ─────────────  mailbox checked between rounds
//! ```
//!
//! Guarantees: the forwarder never writes the tables (it maps them read-only); a second
//! forwarder with the same name is refused before DPDK starts (the status region's writer
//! lock); SIGTERM/SIGINT stop it cleanly (workers return their queues, ports are stopped and
//! detached, the status says `stopped`, exit 0); a second signal exits at once. After SIGKILL
//! the tables are untouched and the next start replaces the stale status region.
//!
//! Not guaranteed: workers are not restarted if one panics (the engine stops with an error);
//! per-NUMA mempools are not created (one pool, any socket).

pub mod config;
pub mod ports;
pub mod stats;
pub mod worker;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use lace_shared::status::{PortState, RunState, StatusWriter};
use lace_shared::tables::{ReaderHandle, TableReader};
use lace_shared::types::PortId;

use crate::dpdk::{self, Eal, Mempool, Port, PortConfig, TunnelTso, Worker};
use crate::pipeline::{self, Pipeline, Stage, UnderlayNeighbors};

pub use config::{Config, ConfigError, Mechanism, Memory, Overrides, Polling, MEMIF_LARGE_FRAMES};
use ports::{Attached, KernelPort, KernelRole, NetDev, PodPorts, Request};
use worker::{Command, LargeFrames, Mailbox, PortRx, PortTx, TxWhole, WorkerSetup};

/// How often the main thread wakes: heartbeat, signals, tables, pod ports. Short, because a
/// new pod waits for its port on this tick (`cni.add_to_reachable`); a tick is one atomic load
/// of the tables' generation when nothing changed.
pub const TICK: Duration = Duration::from_millis(5);
/// How often the tables file is checked for replacement.
const REPLACED_CHECK: Duration = Duration::from_secs(1);
/// How often the devices' and the kernel's counters are copied into the status region.
const COUNTER_REFRESH: Duration = Duration::from_millis(250);

/// Registers SIGTERM and SIGINT: the first sets the returned flag (a clean stop), a second
/// exits the process at once with status 1.
pub fn install_signal_handlers() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // Registered first, so it sees the flag before this signal's own handler sets it.
        signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop))
            .context("installing the signal handlers")?;
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing the signal handlers")?;
    }
    Ok(stop)
}

/// The tables as the main thread holds them.
struct Tables {
    /// The main thread's own reader slot (for reconciling ports).
    handle: ReaderHandle,
    /// (device, inode) of the tables file when attached.
    identity: (u64, u64),
    /// Generation the ports were last reconciled against.
    reconciled: Option<u64>,
    /// The requests of that generation.
    wanted: BTreeMap<PortId, Request>,
}

/// Runs the forwarder until `stop` is set. Returns an error (for a non-zero exit) when it
/// cannot start or a worker died.
pub fn run(config: &Config, stop: &AtomicBool) -> anyhow::Result<()> {
    let workers = config.workers.count;
    std::fs::create_dir_all(&config.tables_dir).with_context(|| {
        format!(
            "tables_dir {}: cannot create it",
            config.tables_dir.display()
        )
    })?;
    let status_path = config.status_path();
    let status = StatusWriter::create(&status_path, u32::from(workers), &Stage::names()).map_err(
        |e| match e {
            lace_shared::Error::WriterBusy { pid, .. } => anyhow::anyhow!(
                "another lace-forwarder (pid {pid}) is running as {:?}: its status region {} is \
                 held — stop it first, or give this one another name",
                config.name,
                status_path.display()
            ),
            e => anyhow::Error::new(e).context(format!(
                "creating the status region {}",
                status_path.display()
            )),
        },
    )?;
    let status = Arc::new(status);
    status.set_state(RunState::Starting);
    status
        .set_external(&config.uplink.external_uplinks())
        .context("publishing uplink.external in the status region")?;

    let args = config.eal_args(&config::allowed_cpus());
    tracing::info!(name = %config.name, "starting DPDK: {}", args.join(" "));
    let eal = Eal::init(&args).map_err(|e| eal_error(e, config))?;
    let result = run_with_eal(config, eal, &status, stop);
    // The file prefix is this forwarder's own (`eal.file_prefix`): its runtime directory goes
    // with it.
    let runtime = eal.runtime_dir();
    match eal.cleanup() {
        Ok(()) => {
            if let Err(e) = std::fs::remove_dir_all(&runtime) {
                tracing::debug!(
                    "removing the EAL's runtime directory {}: {e}",
                    runtime.display()
                );
            }
        }
        Err(e) => tracing::debug!("EAL cleanup skipped: {e}"),
    }
    status.set_state(RunState::Stopped);
    status.heartbeat();
    result
}

/// An EAL start failure, with the fix for a lack of memory.
fn eal_error(e: dpdk::Error, config: &Config) -> anyhow::Error {
    let memory = matches!(e, dpdk::Error::NoHugepages { .. })
        || (e.errno() == libc::ENOMEM && config.eal.memory != Memory::NoHuge);
    if memory {
        let hint = lace_hugepages::shortage_hint(u64::from(config.eal.memory_mb));
        anyhow::anyhow!(
            "{e}\n\nfix: {hint}\nor, for a local run without huge pages: `--memory no-huge` \
             (`[eal] memory = \"no-huge\"`)"
        )
    } else {
        anyhow::Error::new(e).context("starting DPDK")
    }
}

fn mbufs_for(config: &Config) -> u32 {
    let workers = u32::from(config.workers.count);
    let rx = u32::from(config.uplink_rx_queues());
    // RX rings of the uplink, bursts in flight per worker, TX rings, pod-port bursts, and the
    // receive buffers packet-socket queues keep ready (32 per queue, for ~64 ports).
    let want = 8192 + 1024 * rx + 4096 * workers + 2048 * workers;
    want.next_power_of_two() - 1
}

fn data_room(config: &Config) -> u16 {
    // Ethernet + VLAN + FCS on top of the MTU, plus the headroom for encapsulation.
    let frame = u32::from(config.uplink.mtu) + 22 + u32::from(Mempool::HEADROOM);
    let room = frame.max(u32::from(Mempool::DEFAULT_DATA_ROOM));
    u16::try_from(room.div_ceil(1024) * 1024).unwrap_or(u16::MAX)
}

/// The pool large segments from pods are taken into whole (ADR 0053): buffers of the largest
/// room an mbuf has, enough for the bursts in flight. Without it (memory too short) segments
/// are cut on arrival, as before, and the forwarder says so.
fn large_pool(config: &Config, eal: &Eal) -> Option<Mempool> {
    let n = (256 * u32::from(config.workers.count)).next_power_of_two() - 1;
    match Mempool::new(eal, "lace-large", n, 32, u16::MAX, None) {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!(
                "no pool for large segments ({e}; raise eal.memory_mb by {} MiB): pods' large \
                 segments are cut on arrival",
                (u64::from(n) * (u64::from(u16::MAX) + 256)) >> 20
            );
            None
        }
    }
}

fn run_with_eal(
    config: &Config,
    eal: Eal,
    status: &Arc<StatusWriter>,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let workers = config.workers.count;
    let lcores = eal.worker_lcores();
    if lcores.len() < usize::from(workers) {
        bail!(
            "eal.lcores: DPDK has {} worker lcore(s) but workers.count is {workers} — give \
             --lcores one lcore per worker plus the main one, or lower --workers",
            lcores.len()
        );
    }
    let pool = Mempool::new(
        &eal,
        "lace-mbufs",
        mbufs_for(config),
        256,
        data_room(config),
        None,
    )
    .context("creating the packet buffer pool (raise eal.memory_mb)")?;

    let large = large_pool(config, &eal);
    let (mut uplink, uplink_queues, uplink_mac) = open_uplink(config, &eal, &pool, large.as_ref())?;
    status.set_port(PortId::UPLINK, 0, PortState::Up);

    let flow_seed = config.srv6.flow_seed.unwrap_or_else(random_seed);
    let uplink_hosts = pipeline::UplinkHosts::new(&config.uplink.external_addresses())
        .context("uplink.external.addresses: too many per address family")?;
    let pipeline_config = pipeline::Config {
        uplink_mac,
        underlay_addr: config.uplink.address,
        hop_limit: config.srv6.hop_limit,
        underlay_mtu: config.uplink.mtu,
        flow_seed,
        uplink_hosts,
    };
    let neighbors = Arc::new(UnderlayNeighbors::new(1024));
    let (flows, kept) = lace_shared::flow::FlowTable::open_or_create(
        &config.flows_path(),
        config.conntrack.max_flows,
    )
    .with_context(|| {
        format!(
            "opening the flow table {} ({} connections; conntrack.max_flows)",
            config.flows_path().display(),
            config.conntrack.max_flows
        )
    })?;
    let flows = Arc::new(flows);
    {
        let c = flows.counts();
        tracing::info!(
            path = %config.flows_path().display(),
            capacity = flows.capacity(),
            kept = c.created.saturating_sub(c.removed),
            "flow table {}",
            if kept { "re-attached" } else { "created" }
        );
    }
    let mut mailboxes: Vec<Arc<Mailbox>> = Vec::new();
    let mut running: Vec<Worker> = Vec::new();
    for (i, &lcore) in lcores.iter().take(usize::from(workers)).enumerate() {
        let mailbox = Arc::new(Mailbox::default());
        let setup = WorkerSetup {
            index: i as u32,
            mailbox: Arc::clone(&mailbox),
            status: Arc::clone(status),
            pool: pool.clone(),
            large: large.clone(),
            polling: config.workers.polling,
            spin: Duration::from_micros(u64::from(config.workers.spin_us)),
            pipeline: {
                let mut p = Pipeline::new(pipeline_config, Arc::clone(&neighbors));
                p.set_flows(
                    Arc::clone(&flows),
                    i,
                    usize::from(workers),
                    config.conntrack.timeouts(),
                );
                p
            },
            tsc_hz: eal.tsc_hz(),
        };
        match eal.launch(lcore, move || worker::run(setup)) {
            Ok(w) => {
                mailboxes.push(mailbox);
                running.push(w);
            }
            Err(e) => {
                if let Err(w) = stop_workers(&mailboxes, running) {
                    tracing::error!("{w}");
                }
                return Err(anyhow::Error::new(e).context(format!("launching worker {i}")));
            }
        }
    }

    let result = give_uplink_queues(uplink_queues, &mailboxes).and_then(|()| {
        status.set_state(RunState::Running);
        tracing::info!(
            name = %config.name,
            workers,
            polling = config.workers.polling.name(),
            uplink = %config.uplink.device,
            mac = %uplink_mac,
            address = %config.uplink.address,
            "forwarding"
        );
        let mut pods = PodPorts::new(
            eal,
            config.pods.mechanism,
            workers,
            pool.clone(),
            large,
            config.workers.polling == Polling::Adaptive,
        );
        let r = main_loop(
            config,
            status,
            &mailboxes,
            &mut pods,
            &mut uplink,
            Gauges {
                pool: &pool,
                neighbors: &neighbors,
            },
            stop,
        );
        status.set_state(RunState::Stopping);
        tracing::info!("stopping");
        let clean = stop_workers(&mailboxes, running);
        pods.detach_all(&[], status);
        r.and(clean)
    });
    if let Attached::Dpdk(port) = &mut uplink {
        if let Err(e) = port.stop() {
            tracing::debug!("uplink stop: {e}");
        }
    }
    drop(uplink);
    status.set_port(PortId::UPLINK, 0, PortState::Absent);
    result
}

/// Each worker's uplink queues: the RX queues it polls and its TX queue.
type WorkerQueues = Vec<(Vec<PortRx>, PortTx)>;

/// Opens the uplink: a kernel interface with lace's packet sockets, or a DPDK device
/// (configured and started). Returns it, each worker's queues, and its MAC. A large-frame link
/// (ADR 0055) receives into the pool of large buffers, `large`, which it needs: a segment
/// then arrives in one buffer, copied once.
fn open_uplink(
    config: &Config,
    eal: &Eal,
    pool: &Mempool,
    large: Option<&Mempool>,
) -> anyhow::Result<(Attached, WorkerQueues, lace_shared::types::MacAddr)> {
    let dev = &config.uplink.device;
    if config.uplink.is_kernel_interface() {
        let (k, queues) =
            KernelPort::open(dev, config.workers.count, pool, KernelRole::Uplink, None)
                .with_context(|| format!("uplink.device {dev:?}"))?;
        let mac = k.sockets[0]
            .mac()
            .with_context(|| format!("uplink.device {dev:?}: reading its MAC"))?;
        let queues = queues.into_iter().map(|(rx, tx)| (vec![rx], tx)).collect();
        return Ok((
            Attached::Kernel(k),
            queues,
            lace_shared::types::MacAddr(mac),
        ));
    }
    let mut port = if config.uplink.is_pci() {
        Port::by_name(eal, dev)
    } else {
        Port::attach_vdev(eal, dev)
    }
    .with_context(|| format!("uplink.device {dev:?}"))?;
    let (rx_pool, large_frames) = match (config.uplink.large_frames, large) {
        (false, _) => (pool, None),
        (true, Some(large)) => (
            large,
            Some(LargeFrames {
                max_frame: 14 + usize::from(config.uplink.mtu),
                max_whole: usize::from(u16::MAX - Mempool::HEADROOM),
            }),
        ),
        (true, None) => bail!(
            "uplink.large_frames: the pool of large buffers could not be made (see above): \
             raise eal.memory_mb"
        ),
    };
    let mtu = match port.mtu() {
        Ok(m) if m == config.uplink.mtu => None,
        _ => Some(config.uplink.mtu),
    };
    // A large-frame link carries segments whole; otherwise a device with tunnel TSO cuts
    // them (ADR 0056), and the workers do for any other.
    let whole = match large_frames {
        Some(l) => TxWhole::Link(l),
        None => {
            let offered = port.info().context("reading the uplink's offloads")?;
            match TunnelTso::of(offered.tx_offloads) {
                Some(t) => {
                    tracing::info!(
                        driver = offered.driver,
                        ip_in_ip = t.ipip,
                        generic = t.generic,
                        "uplink: the device cuts encapsulated TCP segments (tunnel TSO)"
                    );
                    TxWhole::Tso(t)
                }
                None => TxWhole::Nothing,
            }
        }
    };
    let pc = PortConfig {
        rx_queues: config.uplink_rx_queues(),
        tx_queues: config.workers.count,
        mtu,
        // Neighbor discovery uses multicast; SRv6 arrives for our MAC.
        promiscuous: true,
        rx_interrupts: config.workers.polling == Polling::Adaptive,
        tx_offloads: match whole {
            TxWhole::Tso(t) => t.offloads(),
            _ => 0,
        },
        ..PortConfig::default()
    };
    ports::start_port(&mut port, &pc, rx_pool)
        .with_context(|| format!("uplink.device {dev:?}: configuring {pc:?} and starting"))?;
    let mac = port.mac().context("reading the uplink's MAC")?;
    // Worker `i` gets TX queue `i` and the RX queues `q` with `q % workers == i`.
    let workers = config.workers.count;
    let rx_queues = config.uplink_rx_queues();
    let mut queues = Vec::new();
    for i in 0..workers {
        let rx = (i..rx_queues)
            .step_by(usize::from(workers))
            .map(|q| port.rx_queue(q).map(|q| PortRx::Dpdk(q, large_frames)))
            .collect::<Result<Vec<_>, _>>()
            .context("taking the uplink's RX queues")?;
        let tx = port.tx_queue(i).context("taking the uplink's TX queue")?;
        queues.push((rx, PortTx::Dpdk(tx, whole)));
    }
    Ok((Attached::Dpdk(port), queues, mac))
}

/// Hands each worker its uplink queues and waits for every acknowledgement.
fn give_uplink_queues(queues: WorkerQueues, mailboxes: &[Arc<Mailbox>]) -> anyhow::Result<()> {
    let mut generations = Vec::new();
    for (mb, (rx, tx)) in mailboxes.iter().zip(queues) {
        generations.push(mb.post([Command::AddPort {
            port: PortId::UPLINK,
            rx,
            tx,
        }]));
    }
    for (i, (mb, g)) in mailboxes.iter().zip(generations).enumerate() {
        mb.wait_ack(g, ports::ACK_TIMEOUT)
            .with_context(|| format!("worker {i} taking the uplink's queues"))?;
    }
    Ok(())
}

/// Stops every worker and waits for it; an error if one panicked or failed.
fn stop_workers(mailboxes: &[Arc<Mailbox>], running: Vec<Worker>) -> anyhow::Result<()> {
    for mb in mailboxes {
        mb.request_stop();
    }
    let mut failed = Vec::new();
    for (i, w) in running.into_iter().enumerate() {
        let lcore = w.lcore();
        match w.join() {
            0 => {}
            dpdk::WORKER_PANICKED => failed.push(format!("worker {i} (lcore {lcore}) panicked")),
            rc => failed.push(format!("worker {i} (lcore {lcore}) returned {rc}")),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("{}", failed.join("; "))
    }
}

/// The main thread's loop: heartbeat, signals, tables, pod ports, counters (and the packet
/// buffers of `pool` in use).
/// What the main loop publishes in the status region beside the counters.
struct Gauges<'a> {
    /// The packet buffers (in use, capacity).
    pool: &'a Mempool,
    /// The uplink's neighbors (those traffic waits for that do not answer).
    neighbors: &'a UnderlayNeighbors,
}

fn main_loop(
    config: &Config,
    status: &StatusWriter,
    mailboxes: &[Arc<Mailbox>],
    pods: &mut PodPorts,
    uplink: &mut Attached,
    gauges: Gauges<'_>,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let Gauges { pool, neighbors } = gauges;
    let tables_cfg = config.tables();
    let mut next_counters = Instant::now();
    let tables_path = tables_cfg.tables_path();
    let mut tables: Option<Tables> = None;
    let mut last_error: Option<String> = None;
    let mut next_attach = Instant::now();
    let mut next_replaced_check = Instant::now() + REPLACED_CHECK;
    while !stop.load(Ordering::Acquire) {
        status.heartbeat();
        if let Some(i) = mailboxes.iter().position(|mb| mb.exited()) {
            bail!("worker {i} exited unexpectedly (see the log above)");
        }
        let now = Instant::now();
        let replaced = match &tables {
            Some(t) if now >= next_replaced_check => {
                next_replaced_check = now + REPLACED_CHECK;
                file_identity(&tables_path).is_some_and(|id| id != t.identity)
            }
            _ => false,
        };
        if (tables.is_none() && now >= next_attach) || replaced {
            next_attach = now + Duration::from_millis(200);
            match attach_tables(&tables_cfg, mailboxes) {
                Ok(t) => {
                    if replaced {
                        tracing::info!(path = %tables_path.display(),
                            "tables replaced (control restarted with a new region): re-attached");
                    } else {
                        tracing::info!(path = %tables_path.display(), "tables attached");
                    }
                    last_error = None;
                    tables = Some(t);
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    if last_error.is_none() {
                        tracing::info!("waiting for tables at {} ({msg})", tables_path.display());
                    } else if last_error.as_deref() != Some(msg.as_str()) {
                        tracing::warn!("tables at {}: {msg}", tables_path.display());
                    }
                    last_error = Some(msg);
                }
            }
        }
        if let Some(t) = tables.as_mut() {
            let (generation, wanted) = {
                let snap = t.handle.snapshot();
                let g = snap.generation();
                let wanted = (t.reconciled != Some(g)).then(|| ports::requested(&snap));
                (g, wanted)
            };
            // Attaching takes a while: let the writer reclaim meanwhile.
            t.handle.offline();
            if let Some(w) = wanted {
                t.wanted = w;
            }
            if t.reconciled != Some(generation) || pods.retry_due(Instant::now()) {
                pods.reconcile(&t.wanted, mailboxes, status);
                t.reconciled = Some(generation);
                status.set_generation(generation);
            }
        }
        if Instant::now() >= next_counters {
            next_counters = Instant::now() + COUNTER_REFRESH;
            let net_dev = NetDev::read();
            if let Some(c) = status.port_counters(PortId::UPLINK) {
                uplink.refresh(&c, &net_dev);
            }
            pods.refresh_counters(status, &net_dev);
            status.set_mbufs(u64::from(pool.in_use()), u64::from(pool.capacity()));
            let waiting: Vec<(u16, std::net::IpAddr)> = neighbors
                .waiting()
                .into_iter()
                .map(|w| (w.vlan, std::net::IpAddr::V6(w.addr).to_canonical()))
                .collect();
            status.set_unresolved(&waiting);
        }
        std::thread::sleep(TICK);
    }
    tracing::info!(signal = true, "stop requested");
    pods.detach_all(mailboxes, status);
    Ok(())
}

/// Maps the tables, hands every worker a reader slot, keeps one for the main thread.
fn attach_tables(
    cfg: &lace_shared::tables::TablesConfig,
    mailboxes: &[Arc<Mailbox>],
) -> anyhow::Result<Tables> {
    let path = cfg.tables_path();
    let before = file_identity(&path).context("no tables file yet")?;
    let reader = TableReader::attach(cfg)?;
    if file_identity(&path) != Some(before) {
        bail!("the tables file was replaced while attaching; retrying");
    }
    let handle = reader.register().context("claiming a QSBR reader slot")?;
    let mut handles = Vec::with_capacity(mailboxes.len());
    for _ in mailboxes {
        handles.push(reader.register().context("claiming a QSBR reader slot")?);
    }
    let generations: Vec<u64> = mailboxes
        .iter()
        .zip(handles)
        .map(|(mb, h)| mb.post([Command::Tables(h)]))
        .collect();
    for (i, (mb, g)) in mailboxes.iter().zip(generations).enumerate() {
        mb.wait_ack(g, ports::ACK_TIMEOUT)
            .with_context(|| format!("worker {i} taking the tables"))?;
    }
    Ok(Tables {
        handle,
        identity: before,
        reconciled: None,
        wanted: BTreeMap::new(),
    })
}

fn file_identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// A per-process random seed (the standard library's OS-seeded hasher keys).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}
