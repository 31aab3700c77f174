//! Instructions per packet of every pipeline path (`pipeline.<path>.instructions`): the figure
//! the machine's load does not change, printed beside the cycle figures for users to gate on.
//!
//! How: `lace-bench` runs itself under callgrind (`valgrind --tool=callgrind`) with
//! `--count-instructions`: the child sets up the same worker, ports, tables and frames as the
//! cycle figures ([`crate::pipeline::count_instructions`]) and runs, per contender — the I/O
//! floor `dpdk.null_fwd_write` (rx_burst from `net_null`, the 64-byte frame written, tx_burst)
//! and every path —, a checked warm-up round and then one round inside
//! `Worker::instructions_window`. Callgrind collects only inside that function
//! (`--collect-atstart=no --toggle-collect`) and writes one dump per call (`--dump-after`), so
//! each dump holds the instructions of exactly one contender's bursts: rx, the frame written,
//! snapshot, `Pipeline::process`, tx, quiescent point — what each `.cycles` figure times. The
//! figure is those instructions ÷ the packets received; `.instructions` of a path is beside the
//! floor's, so its ratio's excess over 1 is the pipeline's own share.
//!
//! Counts are exact up to what differs between runs (the flow table's random hash seed moves a
//! tracked path's bucket probes by a few instructions); callgrind runs the child about 50×
//! slower than the CPU, which does not change a count.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context as _};

use crate::control::TempDir;
use crate::pipeline::{COUNTED_FN, WINDOW_TAG};
use crate::report::{Figure, Scale};

/// The unit of every instruction figure.
pub const UNIT: &str = "instructions/packet";

/// Bursts of 32 counted per contender (and in its warm-up round).
fn bursts(scale: &Scale) -> usize {
    if scale.smoke {
        4
    } else if scale.quick {
        64
    } else {
        256
    }
}

/// The instructions callgrind counted in one dump: its `totals:` line (`summary:` in older
/// formats), the event being `Ir`.
fn dump_total(text: &str) -> Option<u64> {
    let events = text
        .lines()
        .find_map(|l| l.strip_prefix("events:"))?
        .split_whitespace()
        .collect::<Vec<_>>();
    let ir = events.iter().position(|&e| e == "Ir")?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("totals:"))
        .or_else(|| text.lines().find_map(|l| l.strip_prefix("summary:")))?;
    line.split_whitespace().nth(ir)?.parse().ok()
}

/// The windows the child reported, in order: figure-id stem and packets.
fn windows(stdout: &str) -> anyhow::Result<Vec<(String, u64)>> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(WINDOW_TAG))
        .map(|rest| {
            let mut it = rest.split_whitespace();
            match (it.next(), it.next().and_then(|n| n.parse().ok()), it.next()) {
                (Some(id), Some(packets), None) => Ok((id.to_owned(), packets)),
                _ => Err(anyhow!("unreadable window line {rest:?}")),
            }
        })
        .collect()
}

/// The figures from the child's windows and callgrind's dumps `<base>.1`, `<base>.2`, … (one
/// per window, in order).
fn from_dumps(windows: &[(String, u64)], base: &Path) -> anyhow::Result<Vec<Figure>> {
    let mut figures: Vec<Figure> = Vec::new();
    for (k, (stem, packets)) in windows.iter().enumerate() {
        let dump = PathBuf::from(format!("{}.{}", base.display(), k + 1));
        let text = std::fs::read_to_string(&dump)
            .with_context(|| format!("{stem}: reading callgrind's dump {}", dump.display()))?;
        let total = dump_total(&text)
            .ok_or_else(|| anyhow!("{stem}: no instruction total in {}", dump.display()))?;
        if *packets == 0 || total == 0 {
            bail!("{stem}: {total} instructions counted over {packets} packets");
        }
        let id = format!("{stem}.instructions");
        let per_packet = total as f64 / *packets as f64;
        figures.push(match figures.first() {
            Some(floor) => Figure::versus(id, per_packet, floor),
            None => Figure::new(id, per_packet, UNIT),
        });
    }
    Ok(figures)
}

/// `dpdk.null_fwd_write.instructions` and `pipeline.<path>.instructions` of every path, and a
/// note; an error names what is missing (valgrind) or what failed.
pub fn figures(scale: &Scale) -> anyhow::Result<(Vec<Figure>, String)> {
    let version = Command::new("valgrind")
        .arg("--version")
        .output()
        .map_err(|e| {
            anyhow!(
                "valgrind not found ({e}): install it (apt-get install valgrind; \
                 .ci/install-deps does)"
            )
        })?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    let dir = TempDir::new("lace-bench-instructions", &std::env::temp_dir())?;
    let base = dir.0.join("callgrind.out");
    let exe = std::env::current_exe().context("finding lace-bench's own executable")?;
    let bursts = bursts(scale);
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={COUNTED_FN}"))
        .arg(format!("--dump-after={COUNTED_FN}"))
        .arg(format!("--callgrind-out-file={}", base.display()))
        .arg(&exe)
        .arg("--count-instructions")
        .arg(bursts.to_string())
        .output()
        .with_context(|| format!("starting valgrind on {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        bail!(
            "the counting run under callgrind failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    let windows = windows(&stdout)?;
    if windows.is_empty() {
        bail!("the counting run reported no window");
    }
    let figures = from_dumps(&windows, &base)?;
    let above: Vec<String> = figures
        .iter()
        .skip(1)
        .map(|f| {
            format!(
                "{} {:.0}",
                f.id.trim_start_matches("pipeline.")
                    .trim_end_matches(".instructions"),
                f.value - figures[0].value
            )
        })
        .collect();
    let note = format!(
        "*.instructions: {version} callgrind, one process; per contender a checked warm-up \
         round, then {bursts} bursts of 32 counted (only inside the burst loop: rx_burst, the \
         frame written, snapshot, Pipeline::process, tx_burst, quiescent — what .cycles times), \
         ÷ packets received; above the floor ({:.0}): {}",
        figures[0].value,
        above.join(", ")
    );
    Ok((figures, note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dump_total_is_its_ir_column() {
        let dump = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\n\nfn=(1) f\n5 12\n\
                    totals: 123456\n";
        assert_eq!(dump_total(dump), Some(123_456));
        let two = "events: Dr Ir\nsummary: 7 42\n";
        assert_eq!(dump_total(two), Some(42));
        assert_eq!(dump_total("events: Dr\ntotals: 7\n"), None);
        assert_eq!(dump_total("events: Ir\n"), None);
    }

    #[test]
    fn windows_are_read_in_order_and_bad_lines_refused() {
        let out = format!(
            "noise\n{WINDOW_TAG} dpdk.null_fwd_write 128\n{WINDOW_TAG} pipeline.l3_local 96\n"
        );
        assert_eq!(
            windows(&out).unwrap(),
            [
                ("dpdk.null_fwd_write".to_owned(), 128),
                ("pipeline.l3_local".to_owned(), 96)
            ]
        );
        assert!(windows(&format!("{WINDOW_TAG} pipeline.x many\n")).is_err());
        assert!(windows(&format!("{WINDOW_TAG} pipeline.x 1 2\n")).is_err());
    }
}
