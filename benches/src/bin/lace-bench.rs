//! `lace-bench`: measures lace's tables beside DPDK's own and prints one report.
//!
//! ```text
//! cargo run --release -p lace-benches --bin lace-bench -- [--quick | --smoke] [--json FILE] [--huge]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;
use lace_benches::anchors::{self, Workloads};
use lace_benches::dpdk::{Eal, EalOptions, DPDK_VERSION};
use lace_benches::report::{tsc_hz, Figure, Report, Scale, Target};

/// Benchmarks lace's tables against DPDK's rte_fib, rte_fib6 and rte_hash in one run.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Same tables, fewer repetitions: the whole report within three minutes.
    #[arg(long, conflicts_with = "smoke")]
    quick: bool,
    /// Tiny tables, one repetition: checks that everything runs (CI); figures are meaningless.
    #[arg(long)]
    smoke: bool,
    /// Also write the figures as a JSON array to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Put DPDK's heap on hugepages (EAL --in-memory; needs free hugepages) instead of
    /// --no-huge anonymous memory.
    #[arg(long)]
    huge: bool,
    /// CPU the measurements run on (the EAL main lcore; the process is pinned to it).
    #[arg(long, default_value_t = 0)]
    lcore: u32,
    /// DPDK heap size in MiB when not using hugepages.
    #[arg(long, default_value_t = 2048)]
    memory_mb: u32,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lace-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let scale = if args.smoke {
        Scale::smoke()
    } else if args.quick {
        Scale::quick()
    } else {
        Scale::full()
    };
    let eal = Eal::init(&EalOptions {
        hugepages: args.huge,
        memory_mb: args.memory_mb,
        lcore: args.lcore,
        file_prefix: None,
    })
    .context("starting DPDK")?;
    println!(
        "lace-bench: DPDK {DPDK_VERSION}, {} memory, lcore {}, TSC {:.3} GHz, {} scale ({} rounds)",
        if args.huge {
            "hugepage"
        } else {
            "4 KiB-page (--no-huge)"
        },
        args.lcore,
        tsc_hz() / 1e9,
        if scale.smoke {
            "smoke"
        } else if scale.quick {
            "quick"
        } else {
            "full"
        },
        scale.rounds,
    );

    let workloads = Workloads::generate(&scale);
    let mut report = Report::new();
    report.extend(anchors::all(eal, &scale, &workloads).context("measuring the DPDK anchors")?);
    let lace = lace_figures(eal, &scale, &workloads, &report).context("measuring lace")?;
    report.extend(lace);
    set_targets(&mut report);

    println!();
    report.print_table(&mut std::io::stdout().lock())?;
    if let Some(path) = &args.json {
        report
            .write_json(path)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("\nfigures written to {}", path.display());
    }
    println!("\ntotal {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// lace's side of the report: one figure per anchor figure it competes with, built with
/// [`Figure::versus`] so it carries the anchor's id and value, e.g.
///
/// ```ignore
/// let anchor = anchors.get("rte_fib.900k.lookup_cycles").expect("anchor measured");
/// let cycles = bulk_lookup_cycles(&w.bgp4_destinations, 32, scale.rounds, |ips, nhs| {
///     fib.lookup_bulk(ips, nhs)
/// });
/// figures.push(Figure::versus("fib4.900k.lookup_cycles", cycles, anchor));
/// ```
///
/// Use the same workloads and the same measurement helper as the anchor.
fn lace_figures(
    _eal: Eal,
    _scale: &Scale,
    _workloads: &Workloads,
    _anchors: &Report,
) -> anyhow::Result<Vec<Figure>> {
    Ok(Vec::new())
}

/// Goals from the issue, printed beside the figures (never asserted), e.g.
/// `report.set_target("fib4.900k.lookup_cycles", Target::RatioAtMost(1.0))`. A target whose
/// figure was not measured is not shown.
fn set_targets(report: &mut Report) {
    let targets: [(&str, Target); 0] = [];
    for (id, target) in targets {
        report.set_target(id, target);
    }
}
