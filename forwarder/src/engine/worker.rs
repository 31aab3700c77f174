//! One poll-mode worker per lcore: the per-core context, its poll loop, and the mailbox the
//! main thread hands it queues through.
//!
//! A worker owns, for every port, queue pair `i` (its index): it polls the RX queues it owns,
//! runs each burst through its [`Pipeline`], buffers what the pipeline sends per destination
//! port and drains those buffers with `tx_burst` at the end of the round. Because every worker
//! has its own TX queue on every port, any worker can send to any port without a lock.
//!
//! The poll loop takes one table snapshot per round and reports a QSBR quiescent point after
//! it. An adaptive worker spins a configured time after its last packet, yielding the CPU each
//! empty round, then goes offline and sleeps in epoll on its ports' sockets, the RX interrupts
//! of its DPDK queues and its mailbox's eventfd (at most [`MAX_IDLE_SLEEP`]; with a queue that
//! cannot wake it, a 10 µs … 1 ms backoff) and counts what woke it (ADRs 0044, 0051). A DPDK
//! queue's interrupt is armed before the last poll ahead of a sleep and disarmed on waking.
//! Between rounds it checks its [`Mailbox`] with one atomic load; only when the main thread
//! has posted something does it take the mailbox lock, apply the commands and acknowledge
//! them.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lace_shared::learn::LearnEvent;
use lace_shared::status::{
    DropReason, LearnWriter, PortCounter, StatusWriter, WorkerCounter, WorkerCounters, MAX_PORTS,
};
use lace_shared::tables::ReaderHandle;
use lace_shared::types::PortId;

use super::config::Polling;
use crate::dpdk::{self, tsc, Burst, Mbuf, Mempool, BURST_SIZE};
use crate::kernel::{self, Epoll, EventFd, PortCounts};
use crate::offload::{Gso, OffloadError};
use crate::pipeline::{Io, Pipeline, Stage};

/// How long an adaptive worker keeps polling after its last packet before it sleeps, unless
/// configured (`[workers] spin_us`): long enough to catch the reply of a round trip through the
/// other node without a wake-up.
pub const IDLE_SPIN: Duration = Duration::from_micros(200);
/// Packets a worker takes from one receive call at most (the pipeline's vector).
const RX_LIMIT: usize = 256;
/// The epoll token of the mailbox's eventfd.
const MAILBOX_TOKEN: u64 = u64::MAX;
/// The epoll token of the DPDK queues' interrupt set.
const INTERRUPTS_TOKEN: u64 = u64::MAX - 1;
/// First sleep of an adaptive worker that polls a port without wake-ups.
pub const MIN_SLEEP: Duration = Duration::from_micros(10);
/// Longest sleep of an adaptive worker that polls a port without wake-ups (and of any worker
/// without tables).
pub const MAX_SLEEP: Duration = Duration::from_millis(1);
/// Longest sleep of an adaptive worker whose every port wakes it: a worker that saw no packet
/// for this long still runs a round, so its share of the flow table keeps being swept.
pub const MAX_IDLE_SLEEP: Duration = Duration::from_millis(100);
/// Busy rounds between two flushes of the poll counters when no packet arrived.
const COUNTER_FLUSH_ROUNDS: u64 = 1024;

/// A DPDK port on a large-frame link (ADR 0055): frames longer than `max_frame` bytes (the
/// link's MTU and Ethernet header) cross it as whole TCP segments between forwarders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeFrames {
    /// The longest ordinary frame on the link.
    pub max_frame: usize,
    /// The longest frame sent whole: what one large buffer of the receiver holds.
    pub max_whole: usize,
}

/// A receive queue a worker polls: a DPDK ethdev queue, or lace's own packet socket.
#[derive(Debug)]
pub enum PortRx {
    /// An ethdev queue (`rte_eth_rx_burst`), which wakes the worker when its port has RX
    /// interrupts; with [`LargeFrames`] on a large-frame link.
    Dpdk(dpdk::RxQueue, Option<LargeFrames>),
    /// A packet socket (`recvmmsg`), which the worker can also sleep on.
    Kernel(Box<kernel::RxQueue>),
}

impl PortRx {
    /// Whether a packet on this queue ends the worker's sleep.
    fn wakes(&self) -> bool {
        match self {
            PortRx::Dpdk(q, _) => q.wakes(),
            PortRx::Kernel(_) => true,
        }
    }
}

/// What a DPDK transmit queue takes whole of the pods' large segments; the rest is cut in
/// software first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxWhole {
    /// Nothing.
    Nothing,
    /// Encapsulated TCP segments longer than the link's frames, on a large-frame link (ADR
    /// 0055).
    Link(LargeFrames),
    /// Encapsulated TCP segments, which the device's tunnel TSO cuts (ADR 0056).
    Tso(dpdk::TunnelTso),
}

/// A transmit queue a worker sends on.
#[derive(Debug)]
pub enum PortTx {
    /// An ethdev queue (`rte_eth_tx_burst`), with what it takes whole.
    Dpdk(dpdk::TxQueue, TxWhole),
    /// A packet socket (`sendmmsg`).
    Kernel(Box<kernel::TxQueue>),
}

impl PortTx {
    /// Whether `pkt`, large segment `gso`, may be handed to this queue whole, readied for it;
    /// if not, it is cut first.
    #[inline]
    fn takes_large(&mut self, gso: Gso, pkt: &mut Mbuf) -> bool {
        match self {
            PortTx::Dpdk(_, TxWhole::Link(l)) => {
                let frame = pkt.data();
                frame.len() <= l.max_whole && gso.crosses_whole(frame, l.max_frame)
            }
            PortTx::Dpdk(q, TxWhole::Tso(tso)) => to_tso(q, *tso, gso, pkt),
            PortTx::Dpdk(_, TxWhole::Nothing) => false,
            PortTx::Kernel(q) => q.takes_large(),
        }
    }

    /// Sends from the front of `burst`; what is left was refused. Returns (sent, counts).
    #[inline]
    fn tx_burst<const N: usize>(&mut self, burst: &mut Burst<N>) -> (usize, PortCounts) {
        match self {
            PortTx::Dpdk(q, _) => (q.tx_burst(burst), PortCounts::default()),
            PortTx::Kernel(q) => q.tx_burst(burst),
        }
    }
}

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
        rx: Vec<PortRx>,
        /// This worker's TX queue on the port.
        tx: PortTx,
    },
    /// Drop every queue handle of `port` (after sending what is buffered for it).
    RemovePort {
        /// The port's id in the tables.
        port: PortId,
    },
}

/// The command channel of one worker: a rarely taken lock around a command list, two
/// generation counters that make the worker's check between rounds one atomic load, and an
/// eventfd that wakes the worker when it sleeps.
#[derive(Debug)]
pub struct Mailbox {
    posted: AtomicU64,
    acked: AtomicU64,
    commands: Mutex<Vec<Command>>,
    stop: AtomicBool,
    exited: AtomicBool,
    /// `None` when no eventfd could be created: the worker then sleeps at most
    /// [`MAX_SLEEP`] at a time.
    wake: Option<EventFd>,
}

impl Default for Mailbox {
    fn default() -> Self {
        Mailbox {
            posted: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            commands: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            exited: AtomicBool::new(false),
            wake: EventFd::new().ok(),
        }
    }
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
        let g = {
            let mut list = self.lock();
            list.extend(cmds);
            self.posted.fetch_add(1, Ordering::AcqRel) + 1
        };
        if let Some(w) = &self.wake {
            w.notify();
        }
        g
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
        if let Some(w) = &self.wake {
            w.notify();
        }
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
    /// The pool of large buffers (ADR 0053), for frames a DPDK port delivers longer than an
    /// ordinary buffer; `None` without one.
    pub large: Option<Mempool>,
    /// Polling mode.
    pub polling: Polling,
    /// How long an adaptive worker polls after its last packet before it sleeps.
    pub spin: Duration,
    /// Its pipeline.
    pub pipeline: Pipeline<Mbuf>,
    /// TSC ticks per second.
    pub tsc_hz: u64,
}

/// A TX queue and the packets buffered for it this round.
struct TxSlot {
    queue: PortTx,
    buf: Burst<BURST_SIZE>,
    dirty: bool,
}

/// The pipeline's view of the worker during one round.
struct RoundIo<'a, 's> {
    tx: &'a mut [Option<TxSlot>],
    dirty: &'a mut Vec<u32>,
    pool: &'a Mempool,
    status: &'a StatusWriter,
    /// This worker's learn ring (l2 learning reports to control).
    learn: &'a mut LearnWriter<'s>,
    now_ns: u64,
    /// Packets the NIC refused this round.
    refused: u64,
    /// Packets sent to a port this worker has no queue on.
    down: u64,
    /// Large segments lost, wholly or in part, in cutting them: for want of a buffer, and
    /// because their headers could not be cut by.
    uncut: [u64; 2],
}

impl Io<Mbuf> for RoundIo<'_, '_> {
    #[inline(always)]
    fn send(&mut self, port: PortId, mut pkt: Mbuf) {
        let Some(Some(slot)) = self.tx.get_mut(port.0 as usize) else {
            self.down += 1;
            drop(pkt);
            return;
        };
        if !slot.dirty {
            slot.dirty = true;
            self.dirty.push(port.0);
        }
        if let Some(gso) = pkt.gso() {
            if !slot.queue.takes_large(gso, &mut pkt) {
                self.cut(port, pkt);
                return;
            }
            // A packet socket counts what it sends whole; a DPDK port takes it as it is.
            if let (PortTx::Dpdk(..), Some(c)) = (&slot.queue, self.status.port_counters(port)) {
                c.add(PortCounter::TxLargeSegments, 1);
            }
        }
        self.refused += buffer(slot, port, self.status, pkt);
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

    #[inline]
    fn learn(&mut self, event: &LearnEvent) {
        self.learn.push(event);
    }
}

impl RoundIo<'_, '_> {
    /// Buffers the pieces of large segment `pkt` for `port`, whose queue takes none whole.
    #[cold]
    #[inline(never)]
    fn cut(&mut self, port: PortId, pkt: Mbuf) {
        let (Some(gso), Some(Some(slot))) = (pkt.gso(), self.tx.get_mut(port.0 as usize)) else {
            return;
        };
        let (status, pool) = (self.status, self.pool);
        let mut refused = 0;
        let cut = gso.cut(
            pkt.data(),
            || pool.alloc(),
            |piece| refused += buffer(slot, port, status, piece),
        );
        self.refused += refused;
        match cut {
            Ok(_) => {
                if let Some(c) = status.port_counters(port) {
                    c.add(PortCounter::TxLargeSegments, 1);
                }
            }
            Err(OffloadError::NoBuffer) => self.uncut[0] += 1,
            Err(_) => self.uncut[1] += 1,
        }
    }
}

/// Hands `pkt`, large segment `gso`, to queue `q`'s tunnel TSO, `tso`: an encapsulated TCP
/// segment the device can cut, its metadata set and readied by the driver. False when it
/// cannot be: it is then cut in software, which writes every header of each piece anew.
#[inline(never)]
fn to_tso(q: &mut dpdk::TxQueue, tso: dpdk::TunnelTso, gso: Gso, pkt: &mut Mbuf) -> bool {
    gso.tso_headers(pkt.data())
        .is_some_and(|h| pkt.set_tunnel_tso(&h, tso) && q.prepare(pkt))
}

/// What [`take_chains`] did with a burst's odd frames.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Odd {
    /// Large segments taken whole from a large-frame link.
    segments: u64,
    /// Dropped for want of a buffer to join a chain into.
    no_buffer: u64,
    /// Dropped as longer than the link's frames without being a segment that crosses whole.
    malformed: u64,
}

/// Takes the frames of `pkts[from..]` a DPDK queue delivered that the pipeline cannot take as
/// they are. A chain (a frame longer than one of the driver's buffers) is copied into one
/// buffer: an ordinary one when it fits, a large one otherwise. On a large-frame link, a frame
/// longer than the link's frames is the TCP segment another forwarder sent whole, and is
/// marked as one ([`Gso::of_long_frame`]). What cannot be taken is dropped and counted.
#[cold]
#[inline(never)]
fn take_chains(
    pkts: &mut Vec<Mbuf>,
    from: usize,
    large_frames: Option<LargeFrames>,
    pool: &Mempool,
    large: Option<&Mempool>,
) -> Odd {
    let mut odd = Odd::default();
    let mut i = from;
    while i < pkts.len() {
        let m = &mut pkts[i];
        let long = large_frames.filter(|l| m.pkt_len() > l.max_frame);
        if m.segments() == 1 && long.is_none() {
            i += 1;
            continue;
        }
        match take_one(m, long, pool, large) {
            Ok(joined) => {
                if let Some(j) = joined {
                    pkts[i] = j;
                }
                odd.segments += u64::from(long.is_some());
                i += 1;
            }
            Err(why) => {
                drop(pkts.remove(i));
                match why {
                    OffloadError::NoBuffer => odd.no_buffer += 1,
                    _ => odd.malformed += 1,
                }
            }
        }
    }
    odd
}

/// [`take_chains`]' work on one frame `m`: its copy into one buffer when it is a chain, marked
/// as a large segment when it is `long`.
fn take_one(
    m: &mut Mbuf,
    long: Option<LargeFrames>,
    pool: &Mempool,
    large: Option<&Mempool>,
) -> Result<Option<Mbuf>, OffloadError> {
    let mut joined = match m.segments() {
        1 => None,
        _ => Some(
            m.joined(pool)
                .or_else(|| large.and_then(|l| m.joined(l)))
                .ok_or(OffloadError::NoBuffer)?,
        ),
    };
    if let Some(l) = long {
        let whole = joined.as_mut().unwrap_or(m);
        let gso = Gso::of_long_frame(whole.data(), l.max_frame)?;
        whole.set_gso(Some(gso));
    }
    Ok(joined)
}

/// Buffers `pkt` for `slot`, sending what it holds first when it is full. Returns the packets
/// refused.
#[inline(always)]
fn buffer(slot: &mut TxSlot, port: PortId, status: &StatusWriter, pkt: Mbuf) -> u64 {
    match slot.buf.push(pkt) {
        Ok(()) => 0,
        Err(pkt) => {
            let refused = flush(slot, port, status);
            slot.dirty = true;
            refused + u64::from(slot.buf.push(pkt).is_err())
        }
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
    let (taken, k) = slot.queue.tx_burst(&mut slot.buf);
    let after = if slot.buf.is_empty() {
        0
    } else {
        bytes(&slot.buf)
    };
    // Packets the kernel rejected are dropped and counted like refused ones.
    let refused = slot.buf.clear() as u64 + k.malformed;
    let sent = taken as u64 - k.malformed;
    if let Some(c) = status.port_counters(port) {
        c.add(PortCounter::TxPackets, sent);
        c.add(PortCounter::TxBytes, before - after);
        c.add(PortCounter::TxRefused, refused);
        c.add(PortCounter::TxLargeSegments, k.large);
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
    /// Wake-ups by cause, in [`Wake`]'s order.
    wakes: [u64; 3],
}

impl LocalCounters {
    fn flush(&mut self, w: &WorkerCounters<'_>) {
        w.add(WorkerCounter::Polls, self.polls);
        w.add(WorkerCounter::BusyPolls, self.busy_polls);
        w.add(WorkerCounter::Sleeps, self.sleeps);
        w.add(WorkerCounter::RxPackets, self.rx_packets);
        w.add(WorkerCounter::Reloads, self.reloads);
        for wake in [Wake::Readiness, Wake::Command, Wake::Timeout] {
            w.add(wake.counter(), self.wakes[wake as usize]);
        }
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

/// A receive queue with the port it belongs to.
struct RxEntry {
    port: PortId,
    queue: PortRx,
}

/// The worker's epoll set: its mailbox, its ports' sockets, and (adaptive) the set of its DPDK
/// queues' RX interrupts.
struct Sleeper {
    epoll: Option<Epoll>,
    interrupts: Option<dpdk::RxInterrupts>,
}

impl Sleeper {
    fn new(mailbox: &Mailbox, polling: Polling) -> Sleeper {
        let epoll = Epoll::new().ok().filter(|e| match &mailbox.wake {
            Some(w) => e.add(w.as_raw_fd(), MAILBOX_TOKEN).is_ok(),
            None => false,
        });
        let interrupts = match (&epoll, polling) {
            (Some(e), Polling::Adaptive) => dpdk::RxInterrupts::new()
                .and_then(|set| e.add(set.as_raw_fd(), INTERRUPTS_TOKEN).map(|()| set))
                .map_err(|err| tracing::warn!("DPDK queues cannot wake this worker: {err}"))
                .ok(),
            _ => None,
        };
        Sleeper { epoll, interrupts }
    }

    fn watch(&self, q: &mut PortRx, port: PortId) {
        match (&self.epoll, q) {
            (Some(e), PortRx::Kernel(k)) => {
                if let Err(err) = e.add(k.socket().as_raw_fd(), u64::from(port.0)) {
                    tracing::warn!(port = port.0, "cannot sleep on the port's socket: {err}");
                }
            }
            (Some(_), PortRx::Dpdk(d, _)) => {
                let Some(set) = &self.interrupts else { return };
                if d.watch_interrupts(set) {
                    tracing::info!(
                        port = port.0,
                        queue = d.queue_id(),
                        "the queue's RX interrupt wakes its idle worker"
                    );
                } else {
                    tracing::info!(
                        port = port.0,
                        queue = d.queue_id(),
                        "the port has no RX interrupts: an idle worker polls it with backoff"
                    );
                }
            }
            (None, _) => {}
        }
    }

    fn unwatch(&self, q: &PortRx) {
        // A DPDK queue leaves the interrupt set when its handle drops.
        if let (Some(e), PortRx::Kernel(k)) = (&self.epoll, q) {
            e.remove(k.socket().as_raw_fd());
        }
    }

    /// Sleeps until a watched socket is readable, an armed queue interrupts or the mailbox is
    /// written, at most `timeout`; without an epoll set (nothing can wake it), for `timeout`
    /// but at most [`MAX_SLEEP`]. Says what ended the sleep.
    fn sleep(&mut self, timeout: Duration, mailbox: &Mailbox) -> Wake {
        let Some(e) = &mut self.epoll else {
            std::thread::sleep(timeout.min(MAX_SLEEP));
            return Wake::Timeout;
        };
        let events = e.wait(Some(timeout));
        let port_ready = events.iter().any(|ev| ev.u64 != MAILBOX_TOKEN);
        let interrupted = events.iter().any(|ev| ev.u64 == INTERRUPTS_TOKEN);
        let wake = if port_ready {
            Wake::Readiness
        } else if events.is_empty() {
            Wake::Timeout
        } else {
            Wake::Command
        };
        if let (true, Some(set)) = (interrupted, &self.interrupts) {
            set.drain();
        }
        if let Some(w) = &mailbox.wake {
            w.clear();
        }
        wake
    }
}

/// Arms every DPDK queue's interrupt ahead of a sleep; false when one could not be armed (it is
/// polled from then on).
fn arm(rx: &mut [RxEntry]) -> bool {
    let mut all = true;
    for e in rx.iter_mut() {
        if let PortRx::Dpdk(q, _) = &mut e.queue {
            if q.wakes() {
                all &= q.arm();
            }
        }
    }
    all
}

/// Disarms every DPDK queue's interrupt once the worker polls again.
fn disarm(rx: &mut [RxEntry]) {
    for e in rx.iter_mut() {
        if let PortRx::Dpdk(q, _) = &mut e.queue {
            q.disarm();
        }
    }
}

/// What ended a worker's sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// A port's socket became readable or a DPDK queue interrupted.
    Readiness,
    /// Only the mailbox was written (commands or a stop request).
    Command,
    /// Nothing: the sleep's time ran out.
    Timeout,
}

impl Wake {
    fn counter(self) -> WorkerCounter {
        match self {
            Wake::Readiness => WorkerCounter::WakeReadiness,
            Wake::Command => WorkerCounter::WakeCommand,
            Wake::Timeout => WorkerCounter::WakeTimeout,
        }
    }
}

/// The worker's job: polls until asked to stop. Returns 0.
pub fn run(setup: WorkerSetup) -> i32 {
    let WorkerSetup {
        index,
        mailbox,
        status,
        pool,
        large,
        polling,
        spin,
        mut pipeline,
        tsc_hz,
    } = setup;
    let _exit = ExitGuard(Arc::clone(&mailbox));
    let (Some(wc), Some(mut ring)) = (status.worker(index), status.learn_writer(index)) else {
        return -1;
    };
    let mut sleeper = Sleeper::new(&mailbox, polling);
    let mut tables: Option<ReaderHandle> = None;
    let mut rx: Vec<RxEntry> = Vec::with_capacity(64);
    let mut tx: Vec<Option<TxSlot>> = Vec::new();
    let mut dirty: Vec<u32> = Vec::with_capacity(MAX_PORTS as usize);
    let mut burst: Burst<BURST_SIZE> = Burst::new();
    let mut pkts: Vec<Mbuf> = Vec::with_capacity(2 * RX_LIMIT);
    let mut local = LocalCounters::default();
    let mut seen = 0u64;
    let mut last_generation = u64::MAX;
    let mut last_busy_ns = 0u64;
    let mut sleep = MIN_SLEEP;
    // The DPDK queues' interrupts are enabled (the round after arming is the last poll before
    // the sleep).
    let mut armed = false;
    let tsc_hz = u128::from(tsc_hz.max(1));

    while !mailbox.stop.load(Ordering::Relaxed) {
        if let Some((generation, cmds)) = mailbox.take(seen) {
            for cmd in cmds {
                apply(cmd, &mut tables, &mut rx, &mut tx, &status, &sleeper);
            }
            seen = generation;
            mailbox.acked.store(generation, Ordering::Release);
        }
        local.polls += 1;
        let Some(handle) = tables.as_mut() else {
            // Nothing can be forwarded without tables: wait for them without spinning.
            local.sleeps += 1;
            local.flush(&wc);
            let wake = sleeper.sleep(MAX_SLEEP, &mailbox);
            local.wakes[wake as usize] += 1;
            continue;
        };

        let now_ns = (u128::from(tsc()) * 1_000_000_000 / tsc_hz) as u64;
        let mut received = 0u64;
        let mut io = RoundIo {
            tx: &mut tx,
            dirty: &mut dirty,
            pool: &pool,
            status: &status,
            learn: &mut ring,
            now_ns,
            refused: 0,
            uncut: [0; 2],
            down: 0,
        };
        {
            let snap = handle.snapshot();
            if snap.generation() != last_generation {
                last_generation = snap.generation();
                local.reloads += 1;
            }
            for entry in rx.iter_mut() {
                let port = entry.port;
                let (n, bytes) = match &mut entry.queue {
                    PortRx::Dpdk(queue, large_frames) => {
                        let n = queue.rx_burst(&mut burst);
                        let limit = large_frames.map_or(usize::MAX, |l| l.max_frame);
                        let (bytes, odd) = burst.iter().fold((0, false), |(b, odd), m| {
                            let len = m.pkt_len();
                            (b + len as u64, odd | (m.segments() != 1) | (len > limit))
                        });
                        let before = pkts.len();
                        burst.move_into(&mut pkts);
                        if odd {
                            let o = take_chains(
                                &mut pkts,
                                before,
                                *large_frames,
                                &pool,
                                large.as_ref(),
                            );
                            pipeline.count_drop(DropReason::Malformed, o.malformed);
                            pipeline.count_drop(DropReason::NoBuffer, o.no_buffer);
                            if let (true, Some(c)) = (o.segments != 0, status.port_counters(port)) {
                                c.add(PortCounter::RxLargeSegments, o.segments);
                            }
                        }
                        (n as u64, bytes)
                    }
                    PortRx::Kernel(queue) => {
                        let before = pkts.len();
                        let k = queue.rx_burst(&mut pkts, RX_LIMIT);
                        pipeline.count_drop(DropReason::Malformed, k.malformed);
                        pipeline.count_drop(DropReason::NoBuffer, k.no_buffer);
                        if k.large != 0 {
                            if let Some(c) = status.port_counters(port) {
                                c.add(PortCounter::RxLargeSegments, k.large);
                            }
                        }
                        ((pkts.len() - before) as u64, k.bytes)
                    }
                };
                if n == 0 {
                    continue;
                }
                received += n;
                if let Some(c) = status.port_counters(port) {
                    c.add(PortCounter::RxPackets, n);
                    c.add(PortCounter::RxBytes, bytes);
                }
                while !pkts.is_empty() {
                    pipeline.process(&snap, port, &mut pkts, &mut io);
                }
            }
        }
        handle.quiescent();
        pipeline.sweep_flows(now_ns);
        pipeline.maintain_neighbors(&mut io);
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
            pipeline.count_drop(DropReason::NoBuffer, io.uncut[0]);
            pipeline.count_drop(DropReason::Malformed, io.uncut[1]);
            local.busy_polls += 1;
            local.rx_packets += received;
            local.flush(&wc);
            flush_pipeline(&mut pipeline, &wc);
            last_busy_ns = now_ns;
            sleep = MIN_SLEEP;
            if armed {
                disarm(&mut rx);
                armed = false;
            }
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
                if now_ns.saturating_sub(last_busy_ns) < spin.as_nanos() as u64 {
                    // Spinning: let another thread that wants this CPU (the other node's worker
                    // of a demo, a pod) run first rather than keep it waiting out the spin.
                    std::thread::yield_now();
                    continue;
                }
                // Every port wakes the worker: sleep until traffic, a command or the idle limit.
                // A queue without wake-ups (a DPDK driver without RX interrupts) is polled with
                // backoff.
                let all_wake = rx.iter().all(|e| e.queue.wakes());
                if all_wake && !armed {
                    // A packet that arrived before its queue was armed raised no interrupt:
                    // poll once more, armed, before sleeping.
                    armed = true;
                    if !arm(&mut rx) {
                        disarm(&mut rx);
                        armed = false;
                    }
                    continue;
                }
                local.sleeps += 1;
                local.flush(&wc);
                flush_pipeline(&mut pipeline, &wc);
                handle.offline();
                let timeout = if all_wake { MAX_IDLE_SLEEP } else { sleep };
                let wake = sleeper.sleep(timeout, &mailbox);
                local.wakes[wake as usize] += 1;
                if armed {
                    disarm(&mut rx);
                    armed = false;
                }
                if !all_wake {
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
    rx: &mut Vec<RxEntry>,
    tx: &mut Vec<Option<TxSlot>>,
    status: &StatusWriter,
    sleeper: &Sleeper,
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
            remove_rx(rx, port, sleeper);
            for mut q in queues {
                sleeper.watch(&mut q, port);
                rx.push(RxEntry { port, queue: q });
            }
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
            remove_rx(rx, port, sleeper);
            if let Some(slot) = tx.get_mut(port.0 as usize) {
                if let Some(mut s) = slot.take() {
                    flush(&mut s, port, status);
                }
            }
        }
    }
}

fn remove_rx(rx: &mut Vec<RxEntry>, port: PortId, sleeper: &Sleeper) {
    rx.retain(|e| {
        let keep = e.port != port;
        if !keep {
            sleeper.unwatch(&e.queue);
        }
        keep
    });
}
