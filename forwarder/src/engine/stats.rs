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
    /// Adaptive sleeps ended by a port's socket becoming readable.
    pub wake_readiness: u64,
    /// Adaptive sleeps ended by the mailbox alone (commands, stop).
    pub wake_command: u64,
    /// Adaptive sleeps that ran out their time.
    pub wake_timeout: u64,
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
    /// Packet buffers (mbufs) in use: held by ports' receive rings and queues, workers, or in
    /// flight (refreshed every 250 ms).
    pub mbufs_in_use: u64,
    /// Packet buffers in the pool.
    pub mbufs: u64,
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

/// Help text of `lace_forwarder_up`.
const UP_HELP: &str = "1 while the forwarder that writes the status region runs";

/// What `GET /metrics` answers: the report of the status region at `status` (and the flow
/// region at `flows`), or only `lace_forwarder_up 0` while there is no status region.
pub fn openmetrics(status: &std::path::Path, flows: &std::path::Path) -> String {
    match StatusReader::open(status) {
        Ok(r) => Report::read(&r, FlowReport::read(flows)).to_openmetrics(),
        Err(_) => {
            let mut reg = prometheus_client::registry::Registry::with_prefix("lace_forwarder");
            reg.register(
                "up",
                UP_HELP,
                prometheus_client::metrics::gauge::Gauge::<i64>::default(),
            );
            let mut out = String::new();
            let _ = prometheus_client::encoding::text::encode(&mut out, &reg);
            out
        }
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
                wake_readiness: r.worker_counter(w, WorkerCounter::WakeReadiness),
                wake_command: r.worker_counter(w, WorkerCounter::WakeCommand),
                wake_timeout: r.worker_counter(w, WorkerCounter::WakeTimeout),
            })
            .collect();
        let (mbufs_in_use, mbufs) = r.mbufs();
        Report {
            pid: r.pid(),
            state: run_state_name(r.state()),
            alive: r.alive(),
            generation: r.generation(),
            heartbeat_age_ms: now_ns.saturating_sub(r.heartbeat_ns()) / 1_000_000,
            mbufs_in_use,
            mbufs,
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

    /// The report as Prometheus metrics (the OpenMetrics text `GET /metrics` serves; the
    /// names and help texts are listed in the README).
    pub fn to_openmetrics(&self) -> String {
        use prometheus_client::metrics::counter::Counter;
        use prometheus_client::metrics::family::Family;
        use prometheus_client::metrics::gauge::Gauge;
        use prometheus_client::registry::Registry;
        type Labels = Vec<(&'static str, String)>;
        let mut reg = Registry::with_prefix("lace_forwarder");
        let gauge = |reg: &mut Registry, name: &str, help: &str, v: u64| {
            let g = Gauge::<i64>::default();
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
            reg.register(name, help, g);
        };
        let counter = |reg: &mut Registry, name: &str, help: &str, v: u64| {
            let c = Counter::<u64>::default();
            c.inc_by(v);
            reg.register(name, help, c);
        };
        gauge(&mut reg, "up", UP_HELP, u64::from(self.alive));
        gauge(
            &mut reg,
            "tables_generation",
            "table generation the ports were last reconciled against (0: no tables yet)",
            self.generation,
        );
        gauge(
            &mut reg,
            "heartbeat_age_seconds",
            "seconds since the forwarder's last heartbeat",
            self.heartbeat_age_ms / 1000,
        );
        let drops = Family::<Labels, Counter>::default();
        for (reason, n) in &self.drops {
            drops
                .get_or_create(&vec![("reason", reason.clone())])
                .inc_by(*n);
        }
        reg.register(
            "drops",
            "packets the pipeline dropped, by reason (every reason, summed over workers)",
            drops,
        );
        let stages = Family::<Labels, Counter>::default();
        for (stage, n) in &self.stages {
            stages
                .get_or_create(&vec![("stage", stage.clone())])
                .inc_by(*n);
        }
        reg.register(
            "stage_packets",
            "packets through each pipeline stage, summed over workers",
            stages,
        );
        type Value = fn(&PortReport) -> u64;
        let port_counters: [(&str, &str, Value); 5] = [
            ("port_rx_packets", "packets received on the port", |p| {
                p.rx_packets
            }),
            ("port_rx_bytes", "bytes received on the port", |p| {
                p.rx_bytes
            }),
            ("port_tx_packets", "packets sent on the port", |p| {
                p.tx_packets
            }),
            ("port_tx_bytes", "bytes sent on the port", |p| p.tx_bytes),
            (
                "port_tx_refused",
                "packets the port's transmit queue refused",
                |p| p.tx_refused,
            ),
        ];
        let port_labels = |p: &PortReport| -> Labels {
            vec![("port", p.port.to_string()), ("kind", p.kind.to_owned())]
        };
        for (name, help, value) in port_counters {
            let f = Family::<Labels, Counter>::default();
            for p in &self.ports {
                f.get_or_create(&port_labels(p)).inc_by(value(p));
            }
            reg.register(name, help, f);
        }
        let losses = Family::<Labels, Counter>::default();
        for p in &self.ports {
            for (place, n) in [
                ("device_rx_missed", p.device_rx_missed),
                ("device_rx_errors", p.device_rx_errors),
                ("device_rx_no_mbuf", p.device_rx_no_mbuf),
                ("device_tx_errors", p.device_tx_errors),
                ("kernel_rx_dropped", p.kernel_rx_dropped),
                ("iface_rx_dropped", p.iface_rx_dropped),
                ("iface_tx_dropped", p.iface_tx_dropped),
            ] {
                let mut l = port_labels(p);
                l.push(("where", place.to_owned()));
                losses.get_or_create(&l).inc_by(n);
            }
        }
        reg.register(
            "port_losses",
            "frames lost outside the pipeline on the port: by the device, the packet socket or \
             the kernel interface",
            losses,
        );
        let up = Family::<Labels, Gauge>::default();
        for p in &self.ports {
            up.get_or_create(&port_labels(p))
                .set(i64::from(p.state == "up"));
        }
        reg.register("port_up", "1 while the port is up", up);
        counter(
            &mut reg,
            "softnet_dropped",
            "frames the kernel dropped host-wide because a CPU's input backlog was full",
            self.softnet_dropped,
        );
        gauge(
            &mut reg,
            "mbufs_in_use",
            "packet buffers held by ports' rings and queues, workers, or in flight",
            self.mbufs_in_use,
        );
        gauge(&mut reg, "mbufs", "packet buffers in the pool", self.mbufs);
        if let Some(f) = &self.flows {
            gauge(&mut reg, "flows", "connections tracked now", f.in_use);
            gauge(
                &mut reg,
                "flows_capacity",
                "connections the flow table holds at most (conntrack.max_flows)",
                u64::from(f.capacity),
            );
            counter(&mut reg, "flows_created", "connections entered", f.created);
            counter(
                &mut reg,
                "flows_removed",
                "connections removed (expired, closed, revoked)",
                f.removed,
            );
            counter(
                &mut reg,
                "flows_refused",
                "NEW connections refused because the flow table was full",
                f.refused_full,
            );
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &reg);
        out
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
        let _ = writeln!(s, "mbufs: {} of {} in use", self.mbufs_in_use, self.mbufs);
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
            "\n{:>6} {:>14} {:>12} {:>12} {:>12} {:>8} {:>12} {:>10} {:>10}",
            "WORKER",
            "POLLS",
            "BUSY",
            "SLEEPS",
            "RX_PKTS",
            "RELOADS",
            "WAKE_READY",
            "WAKE_CMD",
            "WAKE_TIME"
        );
        for (i, w) in self.workers.iter().enumerate() {
            let _ = writeln!(
                s,
                "{i:>6} {:>14} {:>12} {:>12} {:>12} {:>8} {:>12} {:>10} {:>10}",
                w.polls,
                w.busy_polls,
                w.sleeps,
                w.rx_packets,
                w.reloads,
                w.wake_readiness,
                w.wake_command,
                w.wake_timeout
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

    #[test]
    fn the_report_is_served_as_openmetrics() {
        let port = |port: u32, state: &'static str| PortReport {
            port,
            kind: port_kind_name(PortId(port)),
            state,
            errno: None,
            endpoint: 0,
            rx_packets: 10 + u64::from(port),
            rx_bytes: 1000,
            tx_packets: 20,
            tx_bytes: 2000,
            tx_refused: 0,
            device_rx_missed: 3,
            device_rx_errors: 0,
            device_rx_no_mbuf: 0,
            device_tx_errors: 0,
            kernel_rx_dropped: 4,
            iface_rx_dropped: 0,
            iface_tx_dropped: 0,
            rx_large_segments: 0,
            tx_large_segments: 0,
        };
        let r = Report {
            pid: 1,
            state: "running",
            alive: true,
            generation: 42,
            heartbeat_age_ms: 2500,
            mbufs_in_use: 300,
            mbufs: 16383,
            ports: vec![port(0, "up"), port(5, "failed")],
            stages: [("pod-input".to_owned(), 7)].into(),
            drops: [("no-route".to_owned(), 2), ("policy-denied".to_owned(), 0)].into(),
            workers: Vec::new(),
            softnet_dropped: 1,
            flows: Some(FlowReport {
                capacity: 1024,
                in_use: 3,
                created: 5,
                removed: 2,
                refused_full: 0,
            }),
            stage_order: Vec::new(),
        };
        let text = r.to_openmetrics();
        for line in [
            "lace_forwarder_up 1",
            "lace_forwarder_tables_generation 42",
            "lace_forwarder_heartbeat_age_seconds 2",
            "lace_forwarder_drops_total{reason=\"no-route\"} 2",
            "lace_forwarder_drops_total{reason=\"policy-denied\"} 0",
            "lace_forwarder_stage_packets_total{stage=\"pod-input\"} 7",
            "lace_forwarder_port_rx_packets_total{port=\"5\",kind=\"pod\"} 15",
            "lace_forwarder_port_losses_total{port=\"0\",kind=\"uplink\",where=\"device_rx_missed\"} 3",
            "lace_forwarder_port_up{port=\"5\",kind=\"pod\"} 0",
            "lace_forwarder_mbufs_in_use 300",
            "lace_forwarder_mbufs 16383",
            "lace_forwarder_flows 3",
            "lace_forwarder_flows_capacity 1024",
            "lace_forwarder_flows_refused_total 0",
            "# HELP lace_forwarder_drops packets the pipeline dropped, by reason",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }
}
