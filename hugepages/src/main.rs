//! `lace-hugepages`: reserves (and mounts) huge pages on a node or for a local run, and checks
//! that enough are free.
//!
//! ```text
//! lace-hugepages check [--json] [--need-mb N]
//! sudo lace-hugepages reserve --mb N [--size 2M|1G] [--node K] [--exact] [--mount DIR]
//! sudo lace-hugepages release [--size 2M|1G] [--node K] [--mb N] [--mount DIR]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use lace_hugepages::{PageSize, Release, Reserve, Roots};

/// Reserve, mount, check and release huge pages for lace's forwarder (DPDK).
///
/// DPDK takes its packet memory from huge pages. On a node, reserve 1G pages at boot (kernel
/// parameters `default_hugepagesz=1G hugepagesz=1G hugepages=N`) and 2M pages at run time with
/// `reserve`; for a local run, `reserve --mb 512` is enough, or start the forwarder with
/// --no-huge and need none.
#[derive(Debug, Parser)]
#[command(name = "lace-hugepages", version)]
struct Cli {
    /// Directory holding `sys/` (tests point it at a fake tree).
    #[arg(
        long,
        global = true,
        hide = true,
        default_value = "/",
        value_name = "PATH"
    )]
    sysfs_root: PathBuf,
    /// Directory holding `proc/` (tests point it at a fake tree).
    #[arg(
        long,
        global = true,
        hide = true,
        default_value = "/",
        value_name = "PATH"
    )]
    proc_root: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the huge page pools and hugetlbfs mounts; fail if too little is free.
    ///
    /// Per page size (and per NUMA node): total = pages reserved (nr_hugepages), free = not yet
    /// touched, in use = holding data, resv = free but promised to a mapping, surplus = taken
    /// above the reservation under overcommit, available = free - resv (what a new process can
    /// get). Then every hugetlbfs mount and its page size.
    ///
    /// Exits 0 when some page size has at least --need-mb MiB available, else 1 with the
    /// command that reserves them.
    Check {
        /// Print JSON (the same figures, plus `need_mb` and `enough`) instead of a table.
        #[arg(long)]
        json: bool,
        /// MiB that must be available in one page size.
        #[arg(long, value_name = "N", default_value_t = 0)]
        need_mb: u64,
    },
    /// Raise the reservation so that at least N MiB are free (root).
    ///
    /// Writes nr_hugepages (global, or of one NUMA node), reads it back and reports how many
    /// pages the kernel granted. It never lowers the reservation unless --exact is given. When
    /// the kernel grants fewer pages than needed (fragmented memory), it says how many are
    /// missing and what to try, and exits 1. Run it again at any time: it changes nothing when
    /// enough is free and the mount is there.
    Reserve {
        /// MiB that must be free (available) afterwards.
        #[arg(long, value_name = "N")]
        mb: u64,
        /// Page size: 2M (reservable at run time) or 1G (usually only at boot).
        #[arg(long, value_name = "SIZE", default_value = "2M")]
        size: PageSize,
        /// Reserve on this NUMA node (put the pages next to the NIC's node).
        #[arg(long, value_name = "K")]
        node: Option<u32>,
        /// Make exactly N MiB free, lowering the reservation if more is (never below use).
        #[arg(long)]
        exact: bool,
        /// Also mount hugetlbfs with this page size on DIR (created if missing), unless it is
        /// mounted there already.
        #[arg(long, value_name = "DIR")]
        mount: Option<PathBuf>,
    },
    /// Give huge pages back (root): unmount DIR, lower the reservation to what is in use.
    ///
    /// Never lowers below the pages in use or promised to a mapping. 1G pages given back are
    /// hard to get again without a reboot, hence the default of 2M.
    Release {
        /// Page size [default: that of the --mount if it is hugetlbfs, else 2M].
        #[arg(long, value_name = "SIZE")]
        size: Option<PageSize>,
        /// Release on this NUMA node only.
        #[arg(long, value_name = "K")]
        node: Option<u32>,
        /// Give back at most N MiB [default: every free page].
        #[arg(long, value_name = "N")]
        mb: Option<u64>,
        /// Unmount DIR first if it is a hugetlbfs mount (other file systems are refused).
        #[arg(long, value_name = "DIR")]
        mount: Option<PathBuf>,
    },
}

/// `check --json`: the status and the verdict.
#[derive(Debug, serde::Serialize)]
struct CheckReport<'a> {
    /// `--need-mb`.
    need_mb: u64,
    /// Whether some page size has `need_mb` MiB available (the exit code says the same).
    enough: bool,
    #[serde(flatten)]
    status: &'a lace_hugepages::Status,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lace-hugepages: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let roots = Roots {
        sysfs: cli.sysfs_root,
        proc: cli.proc_root,
    };
    match cli.command {
        Command::Check { json, need_mb } => {
            let st = lace_hugepages::status(&roots)?;
            let shortage = st.shortage(need_mb);
            if json {
                let report = CheckReport {
                    need_mb,
                    enough: shortage.is_none(),
                    status: &st,
                };
                let text = serde_json::to_string_pretty(&report).context("encode status")?;
                println!("{text}");
            } else {
                print!("{st}");
            }
            Ok(match shortage {
                None => ExitCode::SUCCESS,
                Some(msg) => {
                    eprintln!("lace-hugepages: {msg}");
                    ExitCode::FAILURE
                }
            })
        }
        Command::Reserve {
            mb,
            size,
            node,
            exact,
            mount,
        } => {
            let req = Reserve {
                mib: mb,
                size,
                node,
                exact,
                mount,
            };
            println!("{}", lace_hugepages::reserve(&roots, &req)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Release {
            size,
            node,
            mb,
            mount,
        } => {
            let req = Release {
                size,
                node,
                mib: mb,
                mount,
            };
            println!("{}", lace_hugepages::release(&roots, &req)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}
