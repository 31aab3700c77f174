//! `lace-forwarder`: the node's DPDK data plane. Parses the command line and the configuration
//! and hands over to [`lace_forwarder::engine`].

use std::io::IsTerminal;
use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lace_forwarder::engine::{self, stats::Report, Config, Memory, Overrides, Polling};
use lace_shared::status::StatusReader;

/// lace's data plane: DPDK poll-mode workers forwarding pod and underlay traffic (SRv6)
/// through the tables lace-control publishes in shared memory.
#[derive(Debug, Parser)]
#[command(name = "lace-forwarder", version, after_help = CONFIG_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

const CONFIG_HELP: &str = "\
Configuration file (TOML; flags override it):
  name, tables_dir
  [eal]     memory (hugepages|in-memory|no-huge), memory_mb, lcores, file_prefix, extra
  [uplink]  device (net_… devargs or PCI address), address, mtu, queues,
            large_frames (a memif link between forwarders: TCP segments cross whole)
  [[uplink.external]]  addresses (the node's own on external networks, e.g. 192.0.2.10/24),
            interface (optional: the name Networks' spec.uplinks[].interface give it)
  [srv6]    hop_limit, flow_seed (the outer source comes from lace-control's tables)
  [workers] count, polling (busy|adaptive)
  [pods]    mechanism (packet_socket|af_packet|af_xdp)
  [conntrack] max_flows (default 262144), tcp_syn_s, tcp_established_s, tcp_closing_s,
            tcp_time_wait_s, tcp_close_s, udp_s, udp_stream_s, icmp_s (seconds)
Logging: RUST_LOG (default info), to stderr.";

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the forwarder until SIGTERM/SIGINT (clean stop, exit 0).
    Run {
        #[command(flatten)]
        settings: Settings,
        /// Serve Prometheus metrics (drops by reason, per-port counters and losses, the
        /// table generation, the flow table) at http://ADDR/metrics, e.g. 0.0.0.0:9411.
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<std::net::SocketAddr>,
    },
    /// Show a forwarder's status region: ports, stages, drops, workers.
    Stats {
        /// The forwarder's configuration file (for its name and tables directory).
        #[arg(long, value_name = "FILE", required_unless_present = "name")]
        config: Option<PathBuf>,
        /// The forwarder's name (instead of --config).
        #[arg(long, value_name = "N", conflicts_with = "config")]
        name: Option<String>,
        /// Directory of the tables and status region (with --name; default: the hugetlbfs
        /// mount if any, else /dev/shm).
        #[arg(long, value_name = "DIR")]
        tables_dir: Option<PathBuf>,
        /// Print JSON (one object per line): pid, state, alive, generation, ports, stages,
        /// drops (every reason), workers.
        #[arg(long)]
        json: bool,
        /// Print again every SECS seconds until interrupted.
        #[arg(long, value_name = "SECS")]
        watch: Option<f64>,
    },
    /// Validate the configuration; print the effective configuration and EAL arguments.
    Check {
        #[command(flatten)]
        settings: Settings,
    },
}

/// The configuration file and the flags that override it.
#[derive(Debug, Args)]
struct Settings {
    /// The configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Name of the table set and status region (`lace-<name>.tables`, `.status`).
    #[arg(long, value_name = "N")]
    name: Option<String>,
    /// Number of workers (one lcore each).
    #[arg(long, value_name = "N")]
    workers: Option<u16>,
    /// Polling mode: busy never sleeps; adaptive sleeps when queues stay empty.
    #[arg(long, value_enum)]
    polling: Option<Polling>,
    /// Where DPDK's memory comes from.
    #[arg(long, value_enum)]
    memory: Option<Memory>,
    /// MiB of memory DPDK reserves.
    #[arg(long, value_name = "N")]
    memory_mb: Option<u32>,
    /// DPDK --lcores list (default: main lcore plus one per worker on the allowed CPUs).
    #[arg(long, value_name = "LIST")]
    lcores: Option<String>,
    /// The uplink: vdev devargs (net_…) or a PCI address.
    #[arg(long, value_name = "DEVARGS")]
    uplink: Option<String>,
    /// This node's underlay IPv6 address.
    #[arg(long, value_name = "IPV6")]
    underlay_addr: Option<Ipv6Addr>,
    /// Directory of the tables and the status region.
    #[arg(long, value_name = "DIR")]
    tables_dir: Option<PathBuf>,
}

impl Settings {
    fn load(&self) -> Result<Config, engine::ConfigError> {
        let o = Overrides {
            name: self.name.clone(),
            tables_dir: self.tables_dir.clone(),
            workers: self.workers,
            polling: self.polling,
            memory: self.memory,
            memory_mb: self.memory_mb,
            lcores: self.lcores.clone(),
            uplink: self.uplink.clone(),
            underlay_addr: self.underlay_addr,
        };
        Config::load(self.config.as_deref(), &o)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match cli.command {
        Cmd::Run {
            settings,
            metrics_listen,
        } => {
            let config = match settings.load() {
                Ok(c) => c,
                Err(e) => return config_error(&e),
            };
            let status = config.status_path();
            let flows = lace_shared::flow::flows_path(&config.tables_dir, &config.name);
            let _metrics = match metrics_listen.map(|addr| {
                lace_shared::metrics::MetricsServer::start(addr, move || {
                    engine::stats::openmetrics(&status, &flows)
                })
                .map_err(|e| (addr, e))
            }) {
                Some(Ok(m)) => {
                    tracing::info!("{}", m.announcement());
                    Some(m)
                }
                Some(Err((addr, e))) => {
                    eprintln!("lace-forwarder: --metrics-listen {addr}: {e}");
                    return ExitCode::FAILURE;
                }
                None => None,
            };
            let stop = match engine::install_signal_handlers() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("lace-forwarder: {e:#}");
                    return ExitCode::FAILURE;
                }
            };
            match engine::run(&config, &stop) {
                Ok(()) => {
                    tracing::info!("stopped");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("lace-forwarder: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Check { settings } => match settings.load() {
            Ok(c) => {
                match toml::to_string(&c) {
                    Ok(t) => println!("# effective configuration\n{t}"),
                    Err(e) => println!("# effective configuration (not printable: {e})\n{c:#?}"),
                }
                let args = c.eal_args(&engine::config::allowed_cpus());
                println!("# EAL arguments\n{}", args.join(" "));
                println!("# status region\n{}", c.status_path().display());
                ExitCode::SUCCESS
            }
            Err(e) => config_error(&e),
        },
        Cmd::Stats {
            config,
            name,
            tables_dir,
            json,
            watch,
        } => {
            let (name, dir) = match (config, name) {
                (Some(path), _) => match Config::load(Some(&path), &Overrides::default()) {
                    Ok(c) => (c.name, tables_dir.unwrap_or(c.tables_dir)),
                    Err(e) => return config_error(&e),
                },
                (None, Some(n)) => (
                    n,
                    tables_dir.unwrap_or_else(lace_shared::tables::default_dir),
                ),
                (None, None) => {
                    eprintln!("lace-forwarder stats: give --config FILE or --name N");
                    return ExitCode::from(2);
                }
            };
            stats(&name, &dir, json, watch)
        }
    }
}

fn config_error(e: &engine::ConfigError) -> ExitCode {
    eprintln!("lace-forwarder: invalid configuration: {e}");
    ExitCode::from(2)
}

fn stats(name: &str, dir: &std::path::Path, json: bool, watch: Option<f64>) -> ExitCode {
    let path = lace_shared::status::status_path(dir, name);
    let interval = match watch {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            eprintln!("lace-forwarder stats: --watch {s}: give a positive number of seconds");
            return ExitCode::from(2);
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    loop {
        let reader = match StatusReader::open(&path) {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "lace-forwarder stats: no status region for {name:?} at {}: {e} — is the \
                     forwarder running (with this --tables-dir)?",
                    path.display()
                );
                return ExitCode::FAILURE;
            }
        };
        let flows = engine::stats::FlowReport::read(&lace_shared::flow::flows_path(dir, name));
        let report = Report::read(&reader, flows);
        if json {
            println!("{}", report.to_json());
        } else {
            println!("{}", report.to_table(name));
        }
        match interval {
            Some(d) => std::thread::sleep(d),
            None => return ExitCode::SUCCESS,
        }
    }
}
