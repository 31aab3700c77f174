//! `lace-forwarder stats`: the status region, read-only, as a table or as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use lace_shared::status::{PortCounter, PortState, RunState, StatusReader, WorkerCounter};
use lace_shared::types::PortId;
use serde::Serialize;

/// One port in a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortReport {
    /// Port id (0 = uplink).
    pub port: u32,
    /// What the port is, by its id: `uplink`, `host` (the node's host interface) or `pod`.
    pub kind: &'static str,
    /// `absent`, `attaching`, `up` or `failed`.
    pub state: &'static str,
    /// The errno of a failed port.
    pub errno: Option<u32>,
    /// Endpoint id the state answers.
    pub endpoint: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets the NIC refused.
    pub tx_refused: u64,
    /// The device's own counters (DPDK `rte_eth_stats`): imissed, ierrors, rx_nombuf, oerrors.
    pub device_rx_missed: u64,
    /// See `device_rx_missed`.
    pub device_rx_errors: u64,
    /// See `device_rx_missed`.
    pub device_rx_no_mbuf: u64,
    /// See `device_rx_missed`.
    pub device_tx_errors: u64,
    /// Frames the kernel dropped at the forwarder's packet sockets (worker behind).
    pub kernel_rx_dropped: u64,
    /// The kernel interface's receive drops.
    pub iface_rx_dropped: u64,
    /// The kernel interface's transmit drops (a veth: its peer's queue was full).
    pub iface_tx_dropped: u64,
    /// Large segments received and cut.
    pub rx_large_segments: u64,
    /// Runs of segments sent as one large segment.
    pub tx_large_segments: u64,
}

impl PortReport {
    /// Every loss outside lace's pipeline on this port: the device's, the socket's, the
    /// interface's.
    pub fn outside_drops(&self) -> u64 {
        self.device_rx_missed
            + self.device_rx_errors
            + self.device_rx_no_mbuf
            + self.device_tx_errors
            + self.kernel_rx_dropped
            + self.iface_rx_dropped
            + self.iface_tx_dropped
    }
}

/// One worker in a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerReport {
    /// Poll rounds.
    pub polls: u64,
    /// Rounds that received packets.
    pub busy_polls: u64,
    /// Adaptive sleeps.
    pub sleeps: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Table publications picked up.
    pub reloads: u64,
}

/// Everything `stats` shows (the `--json` document).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The forwarder's pid.
    pub pid: u32,
    /// `starting`, `running`, `stopping` or `stopped`.
    pub state: &'static str,
    /// Whether the forwarder that wrote the region still runs.
    pub alive: bool,
    /// Table generation the ports were last reconciled against (0: no tables yet).
    pub generation: u64,
    /// Milliseconds since the last heartbeat.
    pub heartbeat_age_ms: u64,
    /// Ports that are not absent or have counted something.
    pub ports: Vec<PortReport>,
    /// Packets per pipeline stage, summed over workers.
    pub stages: BTreeMap<String, u64>,
    /// Drops per reason, summed over workers (every reason).
    pub drops: BTreeMap<String, u64>,
    /// Per-worker poll figures.
    pub workers: Vec<WorkerReport>,
    /// Frames the kernel dropped because a CPU's input backlog was full (`/proc/net/softnet_stat`,
    /// all CPUs; veth delivers through it), host-wide.
    pub softnet_dropped: u64,
    /// The flow table (connection tracking), if the forwarder has one.
    pub flows: Option<FlowReport>,
    /// The stages in pipeline order (for the table).
    #[serde(skip)]
    pub stage_order: Vec<(String, u64)>,
}

/// The flow table in a [`Report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FlowReport {
    /// Connections it holds at most (`conntrack.max_flows`).
    pub capacity: u32,
    /// Connections tracked now.
    pub in_use: u64,
    /// Connections entered since the table was created or re-attached.
    pub created: u64,
    /// Connections removed (expired, closed, revoked).
    pub removed: u64,
    /// NEW connections refused because the table was full.
    pub refused_full: u64,
}

impl FlowReport {
    /// Reads the flow region at `path`; None if there is none.
    pub fn read(path: &std::path::Path) -> Option<FlowReport> {
        let f = lace_shared::flow::FlowStats::open(path).ok()?;
        let c = f.counts();
        Some(FlowReport {
            capacity: f.capacity(),
            in_use: c.created.saturating_sub(c.removed),
            created: c.created,
            removed: c.removed,
            refused_full: c.full,
        })
    }
}

/// Sum of the `dropped` column (the second) of `/proc/net/softnet_stat` over all CPUs.
pub fn softnet_dropped(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|h| u64::from_str_radix(h, 16).ok())
        .sum()
}

/// What port `id` is in reports: the uplink, the node's host interface, or a pod's.
pub fn port_kind_name(id: PortId) -> &'static str {
    match id {
        PortId::UPLINK => "uplink",
        PortId::HOST => "host",
        _ => "pod",
    }
}

/// The name of a run state in reports.
pub fn run_state_name(s: RunState) -> &'static str {
    match s {
        RunState::Starting => "starting",
        RunState::Running => "running",
        RunState::Stopping => "stopping",
        RunState::Stopped => "stopped",
    }
}

/// The name of a port state in reports.
pub fn port_state_name(s: PortState) -> &'static str {
    match s {
        PortState::Absent => "absent",
        PortState::Attaching => "attaching",
        PortState::Up => "up",
        PortState::Failed(_) => "failed",
    }
}

impl Report {
    /// Reads everything from the status region, and the flow table's counters from `flows`
    /// (None: not shown).
    pub fn read(r: &StatusReader, flows: Option<FlowReport>) -> Report {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let ports = r
            .ports()
            .into_iter()
            .map(|p| PortReport {
                port: p.port.0,
                kind: port_kind_name(p.port),
                state: port_state_name(p.state),
                errno: match p.state {
                    PortState::Failed(e) => Some(e),
                    _ => None,
                },
                endpoint: p.endpoint,
                rx_packets: p.counters[PortCounter::RxPackets as usize],
                rx_bytes: p.counters[PortCounter::RxBytes as usize],
                tx_packets: p.counters[PortCounter::TxPackets as usize],
                tx_bytes: p.counters[PortCounter::TxBytes as usize],
                tx_refused: p.counters[PortCounter::TxRefused as usize],
                device_rx_missed: p.counters[PortCounter::DeviceRxMissed as usize],
                device_rx_errors: p.counters[PortCounter::DeviceRxErrors as usize],
                device_rx_no_mbuf: p.counters[PortCounter::DeviceRxNoMbuf as usize],
                device_tx_errors: p.counters[PortCounter::DeviceTxErrors as usize],
                kernel_rx_dropped: p.counters[PortCounter::KernelRxDropped as usize],
                iface_rx_dropped: p.counters[PortCounter::IfaceRxDropped as usize],
                iface_tx_dropped: p.counters[PortCounter::IfaceTxDropped as usize],
                rx_large_segments: p.counters[PortCounter::RxLargeSegments as usize],
                tx_large_segments: p.counters[PortCounter::TxLargeSegments as usize],
            })
            .collect();
        let stage_order: Vec<(String, u64)> = r
            .stage_names()
            .into_iter()
            .enumerate()
            .map(|(i, name)| (name, r.stage_total(i)))
            .collect();
        let stages = stage_order.iter().cloned().collect();
        let drops = r
            .all_drops()
            .into_iter()
            .map(|(reason, n)| (reason.name().to_owned(), n))
            .collect();
        let workers = (0..r.workers())
            .map(|w| WorkerReport {
                polls: r.worker_counter(w, WorkerCounter::Polls),
                busy_polls: r.worker_counter(w, WorkerCounter::BusyPolls),
                sleeps: r.worker_counter(w, WorkerCounter::Sleeps),
                rx_packets: r.worker_counter(w, WorkerCounter::RxPackets),
                reloads: r.worker_counter(w, WorkerCounter::Reloads),
            })
            .collect();
        Report {
            pid: r.pid(),
            state: run_state_name(r.state()),
            alive: r.alive(),
            generation: r.generation(),
            heartbeat_age_ms: now_ns.saturating_sub(r.heartbeat_ns()) / 1_000_000,
            ports,
            stages,
            drops,
            workers,
            softnet_dropped: softnet_dropped(
                &std::fs::read_to_string("/proc/net/softnet_stat").unwrap_or_default(),
            ),
            flows,
            stage_order,
        }
    }

    /// The report as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The report as tables (drop reasons only where non-zero).
    pub fn to_table(&self, name: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "forwarder {name}: {} (pid {}, {}), tables generation {}, heartbeat {} ms ago",
            self.state,
            self.pid,
            if self.alive { "alive" } else { "not running" },
            self.generation,
            self.heartbeat_age_ms
        );
        let _ = writeln!(
            s,
            "\n{:>5} {:<6} {:<10} {:>10} {:>12} {:>14} {:>12} {:>14} {:>10} {:>9} {:>9}",
            "PORT",
            "KIND",
            "STATE",
            "ENDPOINT",
            "RX_PKTS",
            "RX_BYTES",
            "TX_PKTS",
            "TX_BYTES",
            "REFUSED",
            "RX_LARGE",
            "TX_LARGE"
        );
        for p in &self.ports {
            let state = match p.errno {
                Some(e) => format!("failed({e})"),
                None => p.state.to_owned(),
            };
            let _ = writeln!(
                s,
                "{:>5} {:<6} {:<10} {:>10} {:>12} {:>14} {:>12} {:>14} {:>10} {:>9} {:>9}",
                p.port,
                p.kind,
                state,
                p.endpoint,
                p.rx_packets,
                p.rx_bytes,
                p.tx_packets,
                p.tx_bytes,
                p.tx_refused,
                p.rx_large_segments,
                p.tx_large_segments
            );
        }
        let _ = writeln!(
            s,
            "\nLOSSES OUTSIDE THE PIPELINE (device: imissed ierrors rx_nombuf oerrors; kernel: \
             socket drops; interface: rx/tx dropped)\n{:>5} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9}",
            "PORT", "IMISSED", "IERRORS", "NOMBUF", "OERRORS", "SOCK_DROP", "IF_RXDROP", "IF_TXDROP"
        );
        for p in &self.ports {
            let _ = writeln!(
                s,
                "{:>5} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9}",
                p.port,
                p.device_rx_missed,
                p.device_rx_errors,
                p.device_rx_no_mbuf,
                p.device_tx_errors,
                p.kernel_rx_dropped,
                p.iface_rx_dropped,
                p.iface_tx_dropped
            );
        }
        let _ = writeln!(
            s,
            "host: {} frames dropped at full CPU input backlogs (softnet_stat)",
            self.softnet_dropped
        );
        if let Some(f) = &self.flows {
            let _ = writeln!(
                s,
                "flows: {} of {} tracked ({} created, {} removed, {} refused: table full)",
                f.in_use, f.capacity, f.created, f.removed, f.refused_full
            );
        }
        let _ = writeln!(s, "\n{:<26} {:>14}", "STAGE", "PACKETS");
        for (name, n) in &self.stage_order {
            let _ = writeln!(s, "{name:<26} {n:>14}");
        }
        let _ = writeln!(s, "\n{:<26} {:>14}", "DROP", "PACKETS");
        for (name, n) in self.drops.iter().filter(|(_, &n)| n != 0) {
            let _ = writeln!(s, "{name:<26} {n:>14}");
        }
        let _ = writeln!(
            s,
            "\n{:>6} {:>14} {:>12} {:>12} {:>12} {:>8}",
            "WORKER", "POLLS", "BUSY", "SLEEPS", "RX_PKTS", "RELOADS"
        );
        for (i, w) in self.workers.iter().enumerate() {
            let _ = writeln!(
                s,
                "{i:>6} {:>14} {:>12} {:>12} {:>12} {:>8}",
                w.polls, w.busy_polls, w.sleeps, w.rx_packets, w.reloads
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softnet_drops_sum_over_cpus() {
        let t = "0000a000 00000002 00000000 00000000\n00000010 0000000f 00000000 00000000\n";
        assert_eq!(softnet_dropped(t), 17);
        assert_eq!(softnet_dropped(""), 0);
    }

    #[test]
    fn ports_are_named_by_what_they_are() {
        assert_eq!(port_kind_name(PortId::UPLINK), "uplink");
        assert_eq!(port_kind_name(PortId::HOST), "host");
        assert_eq!(port_kind_name(PortId(7)), "pod");
    }
}
