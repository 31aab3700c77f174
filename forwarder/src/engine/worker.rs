//! One poll-mode worker per lcore: the per-core context, its poll loop, and the mailbox the
//! main thread hands it queues through.
//!
//! A worker owns, for every port, queue pair `i` (its index): it polls the RX queues it owns,
//! runs each burst through its [`Pipeline`], buffers what the pipeline sends per destination
//! port and drains those buffers with `tx_burst` at the end of the round. Because every worker
//! has its own TX queue on every port, any worker can send to any port without a lock.
//!
//! The poll loop takes one table snapshot per round and reports a QSBR quiescent point after
//! it; an adaptive worker goes offline before it sleeps. Between rounds it checks its
//! [`Mailbox`] with one atomic load; only when the main thread has posted something does it
//! take the mailbox lock, apply the commands and acknowledge them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lace_shared::status::{
    DropReason, PortCounter, StatusWriter, WorkerCounter, WorkerCounters, MAX_PORTS,
};
use lace_shared::tables::ReaderHandle;
use lace_shared::types::PortId;

use super::config::Polling;
use crate::dpdk::{tsc, Burst, Mbuf, Mempool, RxQueue, TxQueue, BURST_SIZE};
use crate::pipeline::{Io, Pipeline, Stage};

/// Empty rounds before an adaptive worker starts sleeping.
pub const IDLE_ROUNDS_BEFORE_SLEEP: u32 = 100;
/// First sleep of an adaptive worker.
pub const MIN_SLEEP: Duration = Duration::from_micros(10);
/// Longest sleep of an adaptive worker (and of any worker without tables).
pub const MAX_SLEEP: Duration = Duration::from_millis(1);
/// Busy rounds between two flushes of the poll counters when no packet arrived.
const COUNTER_FLUSH_ROUNDS: u64 = 1024;

/// What the main thread asks a worker to do.
#[derive(Debug)]
pub enum Command {
    /// Read these tables from now on (the first tables, or a replaced region).
    Tables(ReaderHandle),
    /// Poll `rx` (the queues this worker owns; may be empty) and send to `port` on `tx`.
    AddPort {
        /// The port's id in the tables.
        port: PortId,
        /// RX queues to poll.
        rx: Vec<RxQueue>,
        /// This worker's TX queue on the port.
        tx: TxQueue,
    },
    /// Drop every queue handle of `port` (after sending what is buffered for it).
    RemovePort {
        /// The port's id in the tables.
        port: PortId,
    },
}

/// The command channel of one worker: a rarely taken lock around a command list, and two
/// generation counters that make the worker's check between rounds one atomic load.
#[derive(Debug, Default)]
pub struct Mailbox {
    posted: AtomicU64,
    acked: AtomicU64,
    commands: Mutex<Vec<Command>>,
    stop: AtomicBool,
    exited: AtomicBool,
}

/// Why a worker did not acknowledge a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    /// The worker's job returned (stopped or panicked).
    #[error("the worker has exited")]
    Exited,
    /// The worker did not answer in time.
    #[error("the worker did not answer within {0:?}")]
    Timeout(Duration),
}

impl Mailbox {
    fn lock(&self) -> MutexGuard<'_, Vec<Command>> {
        // A push or a drain is one operation; a poisoned list is still a valid list.
        self.commands.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Posts commands; returns the generation to wait for with [`Mailbox::wait_ack`].
    pub fn post(&self, cmds: impl IntoIterator<Item = Command>) -> u64 {
        let mut list = self.lock();
        list.extend(cmds);
        self.posted.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Waits until the worker applied everything posted up to `generation`.
    pub fn wait_ack(&self, generation: u64, timeout: Duration) -> Result<(), AckError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.acked.load(Ordering::Acquire) >= generation {
                return Ok(());
            }
            if self.exited.load(Ordering::Acquire) {
                return Err(AckError::Exited);
            }
            if Instant::now() >= deadline {
                return Err(AckError::Timeout(timeout));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Asks the worker to return from its loop.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Whether the worker's job has returned (or unwound).
    pub fn exited(&self) -> bool {
        self.exited.load(Ordering::Acquire)
    }

    /// Takes what was posted, if anything, with the generation it covers.
    #[inline]
    fn take(&self, seen: u64) -> Option<(u64, Vec<Command>)> {
        let posted = self.posted.load(Ordering::Acquire);
        if posted == seen {
            return None;
        }
        Some((posted, std::mem::take(&mut *self.lock())))
    }
}

/// Marks the mailbox exited when the job returns or unwinds.
struct ExitGuard(Arc<Mailbox>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.0.exited.store(true, Ordering::Release);
    }
}

/// Everything a worker starts with.
#[derive(Debug)]
pub struct WorkerSetup {
    /// The worker's index (its queue on every port, its counter slot).
    pub index: u32,
    /// Its mailbox.
    pub mailbox: Arc<Mailbox>,
    /// The status region (its counter slot and the port counters).
    pub status: Arc<StatusWriter>,
    /// The pool it allocates generated packets from.
    pub pool: Mempool,
    /// Polling mode.
    pub polling: Polling,
    /// Its pipeline.
    pub pipeline: Pipeline<Mbuf>,
    /// TSC ticks per second.
    pub tsc_hz: u64,
}

/// A TX queue and the packets buffered for it this round.
struct TxSlot {
    queue: TxQueue,
    buf: Burst<BURST_SIZE>,
    dirty: bool,
}

/// The pipeline's view of the worker during one round.
struct RoundIo<'a> {
    tx: &'a mut [Option<TxSlot>],
    dirty: &'a mut Vec<u32>,
    pool: &'a Mempool,
    status: &'a StatusWriter,
    now_ns: u64,
    /// Packets the NIC refused this round.
    refused: u64,
    /// Packets sent to a port this worker has no queue on.
    down: u64,
}

impl Io<Mbuf> for RoundIo<'_> {
    #[inline]
    fn send(&mut self, port: PortId, pkt: Mbuf) {
        let Some(Some(slot)) = self.tx.get_mut(port.0 as usize) else {
            self.down += 1;
            drop(pkt);
            return;
        };
        if !slot.dirty {
            slot.dirty = true;
            self.dirty.push(port.0);
        }
        if let Err(pkt) = slot.buf.push(pkt) {
            self.refused += flush(slot, port, self.status);
            slot.dirty = true;
            if slot.buf.push(pkt).is_err() {
                self.refused += 1;
            }
        }
    }

    #[inline]
    fn port_up(&self, port: PortId) -> bool {
        matches!(self.tx.get(port.0 as usize), Some(Some(_)))
    }

    #[inline]
    fn alloc(&mut self) -> Option<Mbuf> {
        self.pool.alloc()
    }

    #[inline]
    fn now_ns(&self) -> u64 {
        self.now_ns
    }
}

/// Sends what `slot` buffered; frees and counts what the NIC refused. Returns the refused count.
#[inline]
fn flush(slot: &mut TxSlot, port: PortId, status: &StatusWriter) -> u64 {
    slot.dirty = false;
    if slot.buf.is_empty() {
        return 0;
    }
    let bytes = |b: &Burst<BURST_SIZE>| b.iter().map(|m| m.pkt_len() as u64).sum::<u64>();
    let before = bytes(&slot.buf);
    let sent = slot.queue.tx_burst(&mut slot.buf) as u64;
    let after = if slot.buf.is_empty() {
        0
    } else {
        bytes(&slot.buf)
    };
    let refused = slot.buf.clear() as u64;
    if let Some(c) = status.port_counters(port) {
        c.add(PortCounter::TxPackets, sent);
        c.add(PortCounter::TxBytes, before - after);
        c.add(PortCounter::TxRefused, refused);
    }
    refused
}

/// Poll-loop figures not yet written to the status region.
#[derive(Default)]
struct LocalCounters {
    polls: u64,
    busy_polls: u64,
    sleeps: u64,
    rx_packets: u64,
    reloads: u64,
}

impl LocalCounters {
    fn flush(&mut self, w: &WorkerCounters<'_>) {
        w.add(WorkerCounter::Polls, self.polls);
        w.add(WorkerCounter::BusyPolls, self.busy_polls);
        w.add(WorkerCounter::Sleeps, self.sleeps);
        w.add(WorkerCounter::RxPackets, self.rx_packets);
        w.add(WorkerCounter::Reloads, self.reloads);
        *self = LocalCounters::default();
    }
}

fn flush_pipeline(pipeline: &mut Pipeline<Mbuf>, w: &WorkerCounters<'_>) {
    let c = pipeline.take_counters();
    for (i, &n) in c.stages.iter().enumerate().take(Stage::COUNT) {
        w.add_stage(i, n);
    }
    for r in DropReason::ALL {
        w.add_drop(r, c.drops[r as usize]);
    }
}

/// The worker's job: polls until asked to stop. Returns 0.
pub fn run(setup: WorkerSetup) -> i32 {
    let WorkerSetup {
        index,
        mailbox,
        status,
        pool,
        polling,
        mut pipeline,
        tsc_hz,
    } = setup;
    let _exit = ExitGuard(Arc::clone(&mailbox));
    let Some(wc) = status.worker(index) else {
        return -1;
    };
    let mut tables: Option<ReaderHandle> = None;
    let mut rx: Vec<(PortId, RxQueue)> = Vec::with_capacity(64);
    let mut tx: Vec<Option<TxSlot>> = Vec::new();
    let mut dirty: Vec<u32> = Vec::with_capacity(MAX_PORTS as usize);
    let mut burst: Burst<BURST_SIZE> = Burst::new();
    let mut pkts: Vec<Mbuf> = Vec::with_capacity(BURST_SIZE);
    let mut local = LocalCounters::default();
    let mut seen = 0u64;
    let mut last_generation = u64::MAX;
    let mut idle_rounds = 0u32;
    let mut sleep = MIN_SLEEP;
    let tsc_hz = u128::from(tsc_hz.max(1));

    while !mailbox.stop.load(Ordering::Relaxed) {
        if let Some((generation, cmds)) = mailbox.take(seen) {
            for cmd in cmds {
                apply(cmd, &mut tables, &mut rx, &mut tx, &status);
            }
            seen = generation;
            mailbox.acked.store(generation, Ordering::Release);
        }
        local.polls += 1;
        let Some(handle) = tables.as_mut() else {
            // Nothing can be forwarded without tables: wait for them without spinning.
            local.sleeps += 1;
            local.flush(&wc);
            std::thread::sleep(MAX_SLEEP);
            continue;
        };

        let now_ns = (u128::from(tsc()) * 1_000_000_000 / tsc_hz) as u64;
        let mut received = 0u64;
        let mut io = RoundIo {
            tx: &mut tx,
            dirty: &mut dirty,
            pool: &pool,
            status: &status,
            now_ns,
            refused: 0,
            down: 0,
        };
        {
            let snap = handle.snapshot();
            if snap.generation() != last_generation {
                last_generation = snap.generation();
                local.reloads += 1;
            }
            for (port, queue) in rx.iter_mut() {
                let n = queue.rx_burst(&mut burst);
                if n == 0 {
                    continue;
                }
                received += n as u64;
                let mut bytes = 0u64;
                for m in burst.drain() {
                    bytes += m.pkt_len() as u64;
                    pkts.push(m);
                }
                if let Some(c) = status.port_counters(*port) {
                    c.add(PortCounter::RxPackets, n as u64);
                    c.add(PortCounter::RxBytes, bytes);
                }
                while !pkts.is_empty() {
                    pipeline.process(&snap, *port, &mut pkts, &mut io);
                }
            }
        }
        handle.quiescent();
        // Drain every TX buffer filled this round.
        for &p in io.dirty.iter() {
            if let Some(Some(slot)) = io.tx.get_mut(p as usize) {
                io.refused += flush(slot, PortId(p), &status);
            }
        }
        io.dirty.clear();
        let (refused, down) = (io.refused, io.down);

        if received > 0 || refused > 0 || down > 0 {
            pipeline.count_drop(DropReason::TxRefused, refused);
            pipeline.count_drop(DropReason::PortDown, down);
            local.busy_polls += 1;
            local.rx_packets += received;
            local.flush(&wc);
            flush_pipeline(&mut pipeline, &wc);
            idle_rounds = 0;
            sleep = MIN_SLEEP;
            continue;
        }
        match polling {
            Polling::Busy => {
                if local.polls >= COUNTER_FLUSH_ROUNDS {
                    local.flush(&wc);
                    // Generated packets (solicitations) are counted even on quiet rounds.
                    flush_pipeline(&mut pipeline, &wc);
                }
            }
            Polling::Adaptive => {
                idle_rounds = idle_rounds.saturating_add(1);
                if idle_rounds >= IDLE_ROUNDS_BEFORE_SLEEP {
                    local.sleeps += 1;
                    local.flush(&wc);
                    flush_pipeline(&mut pipeline, &wc);
                    handle.offline();
                    std::thread::sleep(sleep);
                    sleep = (sleep * 2).min(MAX_SLEEP);
                }
            }
        }
    }

    // Stopping: send what is buffered, hand every queue back, release the QSBR slot.
    for (i, slot) in tx.iter_mut().enumerate() {
        if let Some(s) = slot {
            flush(s, PortId(i as u32), &status);
        }
    }
    local.flush(&wc);
    flush_pipeline(&mut pipeline, &wc);
    drop(rx);
    drop(tx);
    if let Some(mut h) = tables {
        h.offline();
    }
    // Commands posted after the stop request still carry queue handles: drop them here so
    // the main thread can detach their ports.
    drop(std::mem::take(&mut *mailbox.lock()));
    0
}

fn apply(
    cmd: Command,
    tables: &mut Option<ReaderHandle>,
    rx: &mut Vec<(PortId, RxQueue)>,
    tx: &mut Vec<Option<TxSlot>>,
    status: &StatusWriter,
) {
    match cmd {
        Command::Tables(h) => {
            if let Some(mut old) = tables.replace(h) {
                old.offline();
            }
        }
        Command::AddPort {
            port,
            rx: queues,
            tx: queue,
        } => {
            rx.retain(|(p, _)| *p != port);
            rx.extend(queues.into_iter().map(|q| (port, q)));
            let i = port.0 as usize;
            if tx.len() <= i {
                tx.resize_with(i + 1, || None);
            }
            tx[i] = Some(TxSlot {
                queue,
                buf: Burst::new(),
                dirty: false,
            });
        }
        Command::RemovePort { port } => {
            rx.retain(|(p, _)| *p != port);
            if let Some(slot) = tx.get_mut(port.0 as usize) {
                if let Some(mut s) = slot.take() {
                    flush(&mut s, port, status);
                }
            }
        }
    }
}
