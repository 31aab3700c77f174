//! The regression gate: a run of `lace-bench` compared with a saved baseline (ADR 0042).
//!
//! A [`Baseline`] is several runs of the same report, each stored exactly as `--json` writes a
//! report (the figure array), under a format name and version. The runs are what judges noise:
//! each figure's **noise band** is how far its runs strayed from their median, times
//! [`BAND_FACTOR`], never less than [`MIN_BAND`] — [`MIN_COUNTED_BAND`] for instruction counts,
//! which the machine's load does not move (see [`band`]). [`compare`] sets the median of
//! the current runs against the baseline's median, per figure:
//!
//! * the compared quantity is the ratio to the figure's anchor when it has one in every run on
//!   both sides (the anchor is measured in the same run, so machine noise cancels), the raw value
//!   otherwise;
//! * the direction is the figure's own when it declares one ([`crate::report::Figure::better`]),
//!   else the unit's ([`direction`]): costs (cycles, time, memory) are better lower, rates
//!   (`…/s`, `Mpps`) higher; a figure with neither is shown, not gated;
//! * a change larger than the band is `REGRESSED` in the worse direction and `improved` in the
//!   other; figures present on one side only are listed, not failed.
//!
//! Everything here is a pure function over [`Report`]s, so the gate is tested without running a
//! benchmark. Nothing asserts on time: the gate's verdicts are about two sets of numbers given.

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::report::Direction;
use crate::report::{median, text_table, Report};

/// The `format` field of every baseline file.
pub const FORMAT: &str = "lace-bench baseline";

/// The version of the baseline file's layout; a file of another version is refused.
pub const VERSION: u32 = 1;

/// Fewest runs a baseline may be saved with: a band needs a spread, and fewer runs give too
/// unstable a one (ADR 0042).
pub const MIN_RUNS: usize = 3;

/// The band is this many times the largest relative distance of a baseline run from the
/// baseline's median.
pub const BAND_FACTOR: f64 = 3.0;

/// The narrowest band (relative): below it a figure's runs agreeing closely is taken as luck,
/// not as a promise that a later run will.
pub const MIN_BAND: f64 = 0.02;

/// The narrowest band of a counted figure (instructions, whose unit starts with
/// `instructions`): a count does not move with the machine's load, so a change of half a
/// percent is the code's.
pub const MIN_COUNTED_BAND: f64 = 0.005;

/// The narrowest band for a figure in `unit`: [`MIN_COUNTED_BAND`] for counted figures, else
/// [`MIN_BAND`].
pub fn min_band(unit: &str) -> f64 {
    if unit.starts_with("instructions") {
        MIN_COUNTED_BAND
    } else {
        MIN_BAND
    }
}

/// Errors of reading, checking and writing baselines.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// The baseline file could not be read (usually: no baseline of that name was saved).
    #[error("baseline {path}: cannot read it ({error}); save one first with --save-baseline NAME")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why (part of the message, so not a `source` printed again after it).
        error: std::io::Error,
    },
    /// The file is not JSON, or not a baseline's shape.
    #[error(
        "baseline {path}: not a lace-bench baseline ({error}); save it again with --save-baseline"
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser found (part of the message).
        error: serde_json::Error,
    },
    /// The file is JSON with another `format` (e.g. a `--json` report, not a baseline).
    #[error("baseline {path}: format is {}, not {FORMAT:?} (a --json report is not a baseline); save one with --save-baseline", .found.as_deref().unwrap_or("missing"))]
    Format {
        /// The file.
        path: PathBuf,
        /// The `format` field found, if any.
        found: Option<String>,
    },
    /// The file was written by a lace-bench with another baseline layout.
    #[error("baseline {path}: format version {found}, this lace-bench reads version {VERSION}; save the baseline again with this lace-bench")]
    Version {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u64,
    },
    /// Too few runs to measure a band.
    #[error("a baseline needs at least {MIN_RUNS} runs to measure each figure's noise band, got {0}; use --runs {MIN_RUNS} or more")]
    TooFewRuns(usize),
    /// A baseline name that is not a plain file name.
    #[error("baseline name {0:?}: use letters, digits, '.', '_' and '-' (not starting with '.')")]
    Name(String),
    /// The baseline file could not be written.
    #[error("baseline {path}: cannot write it: {error}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why (part of the message, so not a `source` printed again after it).
        error: std::io::Error,
    },
}

/// A saved baseline: several runs of one report and the command line that ran them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Baseline {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`] when written by this lace-bench.
    pub version: u32,
    /// lace-bench's arguments for each run (`--quick --only ct`, ...), to tell a comparison of
    /// different scales or sections from a regression.
    pub args: Vec<String>,
    /// The machine's 1-minute load average before each run, when it could be read: the band
    /// is the noise of the machine as loaded then, so a gate run under another load is read
    /// with that in mind.
    pub load_averages: Vec<Option<f64>>,
    /// Each run's report, as `--json` writes it.
    pub runs: Vec<Report>,
}

impl Baseline {
    /// A baseline of `runs` made with `args`; at least [`MIN_RUNS`] runs.
    pub fn new(args: Vec<String>, runs: Vec<Report>) -> Result<Self, BaselineError> {
        if runs.len() < MIN_RUNS {
            return Err(BaselineError::TooFewRuns(runs.len()));
        }
        Ok(Self {
            format: FORMAT.to_owned(),
            version: VERSION,
            args,
            load_averages: Vec::new(),
            runs,
        })
    }

    /// The baseline as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a baseline serialises")
    }

    /// Parses a baseline file's text; `path` only names it in errors. The format name and
    /// version are checked before the rest, so a file of another version says so instead of
    /// failing on its shape.
    pub fn from_json(text: &str, path: &Path) -> Result<Self, BaselineError> {
        let parse = |error| BaselineError::Parse {
            path: path.to_owned(),
            error,
        };
        let value: serde_json::Value = serde_json::from_str(text).map_err(parse)?;
        let format = value.get("format").and_then(|f| f.as_str());
        if format != Some(FORMAT) {
            return Err(BaselineError::Format {
                path: path.to_owned(),
                found: format.map(str::to_owned),
            });
        }
        match value.get("version").and_then(|v| v.as_u64()) {
            Some(v) if v == u64::from(VERSION) => {}
            found => {
                return Err(BaselineError::Version {
                    path: path.to_owned(),
                    found: found.unwrap_or(0),
                })
            }
        }
        serde_json::from_value(value).map_err(parse)
    }

    /// Reads and checks the baseline at `path`.
    pub fn read(path: &Path) -> Result<Self, BaselineError> {
        let text = std::fs::read_to_string(path).map_err(|error| BaselineError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::from_json(&text, path)
    }

    /// Writes the baseline to `path`, creating its directory.
    pub fn write(&self, path: &Path) -> Result<(), BaselineError> {
        let write = |error| BaselineError::Write {
            path: path.to_owned(),
            error,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(write)?;
        }
        std::fs::write(path, self.to_json() + "\n").map_err(write)
    }
}

/// Where baselines live: `$LACE_BENCH_BASELINES` when set, else
/// `$CARGO_TARGET_DIR/lace-bench/baselines`, else `target/lace-bench/baselines` under the
/// current directory (the workspace root, where `cargo run` is usually typed).
pub fn baselines_dir(
    lace_bench_baselines: Option<PathBuf>,
    cargo_target_dir: Option<PathBuf>,
) -> PathBuf {
    lace_bench_baselines.unwrap_or_else(|| {
        cargo_target_dir
            .unwrap_or_else(|| PathBuf::from("target"))
            .join("lace-bench")
            .join("baselines")
    })
}

/// The file of baseline `name` in `dir`: `dir/name.json`.
pub fn baseline_path(dir: &Path, name: &str) -> Result<PathBuf, BaselineError> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !plain {
        return Err(BaselineError::Name(name.to_owned()));
    }
    Ok(dir.join(format!("{name}.json")))
}

/// The direction a unit implies, or `None` when it implies none (counts, `x`, ratios of
/// counts): such figures are reported, not gated. A parenthesised remark after the unit
/// (`1/s (1 route/call)`) is ignored. The unit's numerator decides when it is a cost (`cycles`,
/// `cycles/lookup`, `µs/pod`, `bytes`); a denominator of seconds makes it a rate (`M/s`,
/// `pairs/s`, `Gbit/s`), as does `Mpps`.
pub fn direction(unit: &str) -> Option<Direction> {
    let unit = unit.split(" (").next().unwrap_or(unit).trim();
    let (numerator, denominator) = match unit.split_once('/') {
        Some((n, d)) => (n.trim(), Some(d.trim())),
        None => (unit, None),
    };
    const COSTS: [&str; 14] = [
        "cycles",
        "instructions",
        "ns",
        "us",
        "µs",
        "ms",
        "s",
        "B",
        "bytes",
        "KiB",
        "MiB",
        "GiB",
        "kB",
        "MB",
    ];
    if COSTS.contains(&numerator) && denominator != Some("s") {
        return Some(Direction::LowerIsBetter);
    }
    if denominator == Some("s") || matches!(unit, "Mpps" | "pps" | "kpps") {
        return Some(Direction::HigherIsBetter);
    }
    None
}

/// What is compared for a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// The ratio to its anchor measured in the same run.
    Ratio,
    /// Its value (it has no anchor in every run).
    Value,
}

/// Why a figure has no band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoBand {
    /// It is in this many baseline runs, fewer than [`MIN_RUNS`].
    TooFewRuns(usize),
    /// A baseline run's quantity is not a finite number.
    NotFinite,
    /// The baseline's median is 0: no change relative to it exists.
    ZeroMedian,
}

impl fmt::Display for NoBand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoBand::TooFewRuns(n) => write!(f, "in {n} baseline run(s), a band needs {MIN_RUNS}"),
            NoBand::NotFinite => f.write_str("a baseline run has no finite value"),
            NoBand::ZeroMedian => f.write_str("the baseline is 0 (no relative change)"),
        }
    }
}

/// The noise band of a figure from its baseline runs' quantities: the largest relative distance
/// of a run from their median, times [`BAND_FACTOR`], at least `min` ([`min_band`]).
pub fn band(samples: &[f64], min: f64) -> Result<f64, NoBand> {
    if samples.len() < MIN_RUNS {
        return Err(NoBand::TooFewRuns(samples.len()));
    }
    if samples.iter().any(|s| !s.is_finite()) {
        return Err(NoBand::NotFinite);
    }
    let m = median(samples.to_vec());
    if m == 0.0 {
        return Err(NoBand::ZeroMedian);
    }
    let spread = samples
        .iter()
        .map(|s| ((s - m) / m).abs())
        .fold(0.0, f64::max);
    Ok((BAND_FACTOR * spread).max(min))
}

/// The gate's verdict on one figure.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Better than the baseline by more than the band.
    Improved,
    /// Within the band either way.
    WithinBand,
    /// Worse than the baseline by more than the band: fails the gate.
    Regressed,
    /// Shown, not judged, and why (unknown direction, no band).
    NotGated(String),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Improved => f.write_str("improved"),
            Verdict::WithinBand => f.write_str("within band"),
            Verdict::Regressed => f.write_str("REGRESSED"),
            Verdict::NotGated(why) => write!(f, "not gated: {why}"),
        }
    }
}

/// One figure of both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The figure's id.
    pub id: String,
    /// Its unit (the current run's).
    pub unit: String,
    /// Ratio or value.
    pub quantity: Quantity,
    /// The baseline runs' median of the quantity.
    pub baseline: f64,
    /// The current runs' median of the quantity.
    pub now: f64,
    /// `now / baseline - 1` (NaN when the baseline is 0).
    pub change: f64,
    /// The relative band, when one could be measured.
    pub band: Option<f64>,
    /// The verdict.
    pub verdict: Verdict,
}

/// The whole comparison: one row per figure in both, and the figures in only one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Comparison {
    /// Figures of both, in the current report's order.
    pub rows: Vec<Row>,
    /// Figures of the baseline the current runs do not have.
    pub only_in_baseline: Vec<String>,
    /// Figures of the current runs the baseline does not have.
    pub only_now: Vec<String>,
}

/// Each run's value of the quantity for `id`, if every run has the figure.
fn samples(runs: &[Report], id: &str, quantity: Quantity) -> Option<Vec<f64>> {
    runs.iter()
        .map(|r| {
            let f = r.get(id)?;
            match quantity {
                Quantity::Ratio => f.ratio(),
                Quantity::Value => Some(f.value),
            }
        })
        .collect()
}

/// The figure ids of `runs`, first appearance first.
fn ids(runs: &[Report]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for f in runs.iter().flat_map(|r| r.figures()) {
        if !ids.contains(&f.id) {
            ids.push(f.id.clone());
        }
    }
    ids
}

/// Compares the current runs `now` with `baseline` figure by figure (see the module doc).
pub fn compare(baseline: &Baseline, now: &[Report]) -> Comparison {
    let old_ids = ids(&baseline.runs);
    let new_ids = ids(now);
    let mut out = Comparison {
        only_in_baseline: old_ids
            .iter()
            .filter(|id| !new_ids.contains(id))
            .cloned()
            .collect(),
        ..Comparison::default()
    };
    for id in &new_ids {
        if !old_ids.contains(id) {
            out.only_now.push(id.clone());
            continue;
        }
        out.rows.push(row(baseline, now, id));
    }
    out
}

/// The row of a figure both sides have.
fn row(baseline: &Baseline, now: &[Report], id: &str) -> Row {
    let current = now.iter().find_map(|r| r.get(id));
    let unit = current.map(|f| f.unit.clone()).unwrap_or_default();
    let declared = current.and_then(|f| f.better);
    let ratios = samples(&baseline.runs, id, Quantity::Ratio)
        .zip(samples(now, id, Quantity::Ratio).filter(|s| !s.is_empty()));
    let (quantity, old, new) = match ratios {
        Some((old, new)) => (Quantity::Ratio, old, new),
        None => (
            Quantity::Value,
            present(&baseline.runs, id, Quantity::Value),
            present(now, id, Quantity::Value),
        ),
    };
    let (b, n) = (median(old.clone()), median(new));
    let change = if b == 0.0 { f64::NAN } else { n / b - 1.0 };
    let band = band(&old, min_band(&unit));
    let old_unit = baseline
        .runs
        .iter()
        .filter_map(|r| r.get(id))
        .map(|f| f.unit.as_str())
        .find(|u| *u != unit);
    let verdict = match (old_unit, band) {
        (Some(u), _) => Verdict::NotGated(format!("unit was {u}, is {unit}")),
        (None, Err(why)) => Verdict::NotGated(why.to_string()),
        (None, Ok(_)) if !change.is_finite() => {
            Verdict::NotGated("the current runs have no finite value".to_owned())
        }
        (None, Ok(band)) => match declared.or_else(|| direction(&unit)) {
            None => Verdict::NotGated(format!("unit {unit:?} has no direction")),
            Some(_) if change.abs() <= band => Verdict::WithinBand,
            Some(Direction::LowerIsBetter) if change > 0.0 => Verdict::Regressed,
            Some(Direction::HigherIsBetter) if change < 0.0 => Verdict::Regressed,
            Some(_) => Verdict::Improved,
        },
    };
    Row {
        id: id.to_owned(),
        unit,
        quantity,
        baseline: b,
        now: n,
        change,
        band: band.ok(),
        verdict,
    }
}

/// The quantity in the runs that have the figure.
fn present(runs: &[Report], id: &str, quantity: Quantity) -> Vec<f64> {
    runs.iter()
        .filter_map(|r| r.get(id))
        .map(|f| match quantity {
            Quantity::Ratio => f.ratio().unwrap_or(f64::NAN),
            Quantity::Value => f.value,
        })
        .collect()
}

impl Comparison {
    /// The rows that regressed beyond their band.
    pub fn regressed(&self) -> Vec<&Row> {
        self.rows
            .iter()
            .filter(|r| r.verdict == Verdict::Regressed)
            .collect()
    }

    /// The comparison as an aligned text table (figure, compared quantity, baseline, now,
    /// change, band, verdict), then the figures found on one side only.
    pub fn table(&self) -> String {
        let header = [
            "figure", "compared", "baseline", "now", "change", "band", "verdict",
        ];
        let rows: Vec<[String; 7]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.id.clone(),
                    match r.quantity {
                        Quantity::Ratio => "ratio".to_owned(),
                        Quantity::Value => r.unit.clone(),
                    },
                    fmt_number(r.baseline),
                    fmt_number(r.now),
                    if r.change.is_finite() {
                        format!("{:+.1}%", r.change * 100.0)
                    } else {
                        "-".to_owned()
                    },
                    r.band
                        .map_or_else(|| "-".to_owned(), |b| format!("±{:.1}%", b * 100.0)),
                    r.verdict.to_string(),
                ]
            })
            .collect();
        let mut out = text_table(
            &header,
            &rows,
            &[false, false, true, true, true, true, false],
        );
        for id in &self.only_in_baseline {
            let _ = writeln!(out, "{id}  only in the baseline (not measured now)");
        }
        for id in &self.only_now {
            let _ = writeln!(out, "{id}  only in this run (not in the baseline)");
        }
        out
    }
}

/// Four significant digits.
fn fmt_number(v: f64) -> String {
    if !v.is_finite() {
        return "-".to_owned();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if !(1e-3..1e9).contains(&a) {
        format!("{v:.3e}")
    } else {
        let decimals = 3 - a.log10().floor() as i32;
        format!("{v:.*}", decimals.clamp(0, 6) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Figure;

    /// A run of `(id, value, unit, anchor value)`; the anchor, when given, is `<id>.anchor`.
    fn run(figures: &[(&str, f64, &str, Option<f64>)]) -> Report {
        let mut r = Report::new();
        for &(id, value, unit, anchor) in figures {
            match anchor {
                Some(a) => {
                    let a = Figure::new(format!("{id}.anchor"), a, unit);
                    r.push(Figure::versus(id, value, &a));
                }
                None => r.push(Figure::new(id, value, unit)),
            }
        }
        r
    }

    /// A baseline whose runs have the figure `id` at each of `values` (no anchor).
    fn baseline_of(id: &str, unit: &str, values: &[f64]) -> Baseline {
        let runs = values
            .iter()
            .map(|&v| run(&[(id, v, unit, None)]))
            .collect();
        Baseline::new(vec!["--quick".to_owned()], runs).unwrap()
    }

    fn verdict(b: &Baseline, now: &Report, id: &str) -> Verdict {
        let c = compare(b, std::slice::from_ref(now));
        c.rows.iter().find(|r| r.id == id).unwrap().verdict.clone()
    }

    #[test]
    fn direction_comes_from_the_unit() {
        use Direction::*;
        for unit in [
            "cycles",
            "cycles/lookup",
            "cycles/packet",
            "instructions/packet",
            "µs",
            "ms",
            "s",
            "µs/pod",
            "µs/segment",
            "bytes",
            "MiB",
        ] {
            assert_eq!(direction(unit), Some(LowerIsBetter), "{unit}");
        }
        for unit in [
            "1/s",
            "1/s (1 route/call)",
            "M/s",
            "Mpps",
            "Gbit/s",
            "pairs/s",
            "transactions/s",
            "MB/s",
        ] {
            assert_eq!(direction(unit), Some(HigherIsBetter), "{unit}");
        }
        for unit in ["x", "requests", "retransmitted/sent", "groups", ""] {
            assert_eq!(direction(unit), None, "{unit}");
        }
    }

    #[test]
    fn band_is_three_times_the_spread_with_a_floor() {
        let b = band(&[100.0, 102.0, 99.0], MIN_BAND).unwrap();
        assert!((b - 0.06).abs() < 1e-12, "{b}");
        assert_eq!(band(&[50.0, 50.0, 50.0, 50.0], MIN_BAND), Ok(MIN_BAND));
        assert_eq!(band(&[1.0, 2.0], MIN_BAND), Err(NoBand::TooFewRuns(2)));
        assert_eq!(band(&[0.0, 0.0, 0.0], MIN_BAND), Err(NoBand::ZeroMedian));
        assert_eq!(
            band(&[1.0, f64::NAN, 1.0], MIN_BAND),
            Err(NoBand::NotFinite)
        );
    }

    #[test]
    fn a_counted_figure_is_gated_within_half_a_percent() {
        assert_eq!(min_band("instructions/packet"), MIN_COUNTED_BAND);
        assert_eq!(min_band("cycles/packet"), MIN_BAND);
        // Identical runs of an exact count: a 1% rise is the code's, a 0.4% one is within band.
        let id = "pipeline.l3_encap.instructions";
        let b = baseline_of(id, "instructions/packet", &[509.9, 509.9, 509.9]);
        let worse = run(&[(id, 515.0, "instructions/packet", None)]);
        assert_eq!(verdict(&b, &worse, id), Verdict::Regressed);
        let same = run(&[(id, 511.9, "instructions/packet", None)]);
        assert_eq!(verdict(&b, &same, id), Verdict::WithinBand);
        // The same 1% on a timed figure stays within its 2% floor.
        let b = baseline_of("c", "cycles/packet", &[509.9, 509.9, 509.9]);
        let timed = run(&[("c", 515.0, "cycles/packet", None)]);
        assert_eq!(verdict(&b, &timed, "c"), Verdict::WithinBand);
    }

    #[test]
    fn a_regression_beyond_the_band_fails_the_gate() {
        // Band: 3 × 1% = 3%; 120 cycles is 20% worse.
        let b = baseline_of("fib4.lookup_cycles", "cycles/lookup", &[100.0, 101.0, 99.0]);
        let now = run(&[("fib4.lookup_cycles", 120.0, "cycles/lookup", None)]);
        let c = compare(&b, &[now]);
        assert_eq!(c.rows.len(), 1);
        assert_eq!(c.rows[0].verdict, Verdict::Regressed);
        assert!((c.rows[0].change - 0.2).abs() < 1e-12);
        assert!((c.rows[0].band.unwrap() - 0.03).abs() < 1e-12);
        let regressed: Vec<&str> = c.regressed().iter().map(|r| r.id.as_str()).collect();
        assert_eq!(regressed, ["fib4.lookup_cycles"]);
        assert!(c.table().contains("REGRESSED"), "{}", c.table());
    }

    #[test]
    fn a_change_within_the_band_passes() {
        let b = baseline_of("fib4.lookup_cycles", "cycles/lookup", &[100.0, 101.0, 99.0]);
        let now = run(&[("fib4.lookup_cycles", 102.9, "cycles/lookup", None)]);
        assert_eq!(verdict(&b, &now, "fib4.lookup_cycles"), Verdict::WithinBand);
        assert!(compare(&b, &[now]).regressed().is_empty());
    }

    #[test]
    fn an_improvement_passes_in_either_direction() {
        let cost = baseline_of("c", "cycles/packet", &[100.0, 101.0, 99.0]);
        let faster = run(&[("c", 80.0, "cycles/packet", None)]);
        assert_eq!(verdict(&cost, &faster, "c"), Verdict::Improved);
        assert!(compare(&cost, &[faster]).regressed().is_empty());

        let rate = baseline_of("r", "1/s", &[1000.0, 1010.0, 990.0]);
        let more = run(&[("r", 1200.0, "1/s", None)]);
        let fewer = run(&[("r", 800.0, "1/s", None)]);
        assert_eq!(verdict(&rate, &more, "r"), Verdict::Improved);
        assert_eq!(verdict(&rate, &fewer, "r"), Verdict::Regressed);
    }

    #[test]
    fn anchored_figures_compare_their_ratio() {
        // The machine got 30% slower: lace and its anchor both moved, the ratio did not.
        let runs = [(100.0, 50.0), (101.0, 50.0), (99.0, 50.0)]
            .iter()
            .map(|&(v, a)| run(&[("ct_hit", v, "cycles/packet", Some(a))]))
            .collect();
        let b = Baseline::new(Vec::new(), runs).unwrap();
        let slower = run(&[("ct_hit", 130.0, "cycles/packet", Some(65.0))]);
        let c = compare(&b, &[slower]);
        let row = c.rows.iter().find(|r| r.id == "ct_hit").unwrap();
        assert_eq!(row.quantity, Quantity::Ratio);
        assert_eq!((row.baseline, row.now), (2.0, 2.0));
        assert_eq!(row.verdict, Verdict::WithinBand);
        // lace slower against the same anchor: the ratio regresses.
        let worse = run(&[("ct_hit", 130.0, "cycles/packet", Some(50.0))]);
        let row = &compare(&b, &[worse]).rows[0];
        assert_eq!(
            (row.quantity, row.verdict.clone()),
            (Quantity::Ratio, Verdict::Regressed)
        );
    }

    #[test]
    fn the_median_of_several_current_runs_is_compared() {
        let b = baseline_of("c", "cycles", &[100.0, 101.0, 99.0]);
        let now: Vec<Report> = [100.0, 150.0, 101.0]
            .iter()
            .map(|&v| run(&[("c", v, "cycles", None)]))
            .collect();
        let c = compare(&b, &now);
        assert_eq!(c.rows[0].now, 101.0);
        assert_eq!(c.rows[0].verdict, Verdict::WithinBand);
    }

    #[test]
    fn a_figure_without_direction_is_reported_not_gated() {
        let b = baseline_of("pipeline.l3_encap.scaling_2w", "x", &[1.8, 1.81, 1.79]);
        let now = run(&[("pipeline.l3_encap.scaling_2w", 0.9, "x", None)]);
        let c = compare(&b, &[now]);
        assert!(
            matches!(&c.rows[0].verdict, Verdict::NotGated(why) if why.contains("no direction")),
            "{c:?}"
        );
        assert!(c.regressed().is_empty());
        assert!(c.table().contains("not gated: unit \"x\" has no direction"));
    }

    #[test]
    fn a_declared_direction_is_gated() {
        let ideal = |d| Figure::new("ideal", 2.0, "x").better(d);
        let runs = [1.80, 1.81, 1.79]
            .iter()
            .map(|&v| {
                let mut r = Report::new();
                r.push(Figure::versus(
                    "scaling_2w",
                    v,
                    &ideal(Direction::HigherIsBetter),
                ));
                r
            })
            .collect();
        let b = Baseline::new(Vec::new(), runs).unwrap();
        let mut now = Report::new();
        now.push(Figure::versus(
            "scaling_2w",
            1.2,
            &ideal(Direction::HigherIsBetter),
        ));
        assert_eq!(verdict(&b, &now, "scaling_2w"), Verdict::Regressed);
        let mut now = Report::new();
        now.push(Figure::versus(
            "scaling_2w",
            1.2,
            &ideal(Direction::LowerIsBetter),
        ));
        assert_eq!(verdict(&b, &now, "scaling_2w"), Verdict::Improved);
    }

    #[test]
    fn figures_on_one_side_only_are_listed_not_failed() {
        let runs = (0..3)
            .map(|_| run(&[("gone", 1.0, "ms", None), ("kept", 5.0, "ms", None)]))
            .collect();
        let b = Baseline::new(Vec::new(), runs).unwrap();
        let now = run(&[("kept", 5.0, "ms", None), ("new", 2.0, "ms", None)]);
        let c = compare(&b, &[now]);
        assert_eq!(c.only_in_baseline, ["gone"]);
        assert_eq!(c.only_now, ["new"]);
        assert_eq!(c.rows.len(), 1);
        assert_eq!(c.rows[0].verdict, Verdict::WithinBand);
        assert!(c.regressed().is_empty());
        let t = c.table();
        assert!(t.contains("gone  only in the baseline"), "{t}");
        assert!(t.contains("new  only in this run"), "{t}");
    }

    #[test]
    fn a_figure_in_too_few_baseline_runs_or_of_another_unit_is_not_gated() {
        let runs = vec![
            run(&[("a", 1.0, "ms", None), ("u", 1.0, "ms", None)]),
            run(&[("a", 1.0, "ms", None), ("u", 1.0, "ms", None)]),
            run(&[("u", 1.0, "ms", None)]),
        ];
        let b = Baseline::new(Vec::new(), runs).unwrap();
        let now = run(&[("a", 9.0, "ms", None), ("u", 9.0, "µs", None)]);
        let c = compare(&b, &[now]);
        assert_eq!(
            c.rows[0].verdict,
            Verdict::NotGated("in 2 baseline run(s), a band needs 3".to_owned())
        );
        assert_eq!(
            c.rows[1].verdict,
            Verdict::NotGated("unit was ms, is µs".to_owned())
        );
        assert!(c.regressed().is_empty());
    }

    #[test]
    fn a_baseline_round_trips_as_json_reports() {
        let mut b = baseline_of("c", "cycles", &[100.0, 101.0, 99.0]);
        b.load_averages = vec![Some(1.5), None, Some(2.25)];
        let text = b.to_json();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["format"], FORMAT);
        assert_eq!(v["version"], VERSION);
        // Each run is exactly what --json writes for that report.
        let as_json: serde_json::Value = serde_json::from_str(&b.runs[1].to_json()).unwrap();
        assert_eq!(v["runs"][1], as_json);
        let back = Baseline::from_json(&text, Path::new("t.json")).unwrap();
        assert_eq!(back.args, ["--quick"]);
        assert_eq!(back.load_averages, [Some(1.5), None, Some(2.25)]);
        assert_eq!(back.runs.len(), 3);
        for (a, b) in back.runs.iter().zip(&b.runs) {
            assert_eq!(a.figures(), b.figures());
        }
    }

    #[test]
    fn a_corrupt_or_foreign_baseline_is_an_error() {
        let p = Path::new("target/lace-bench/baselines/x.json");
        let err = Baseline::from_json("{\"format\": \"lace-bench baseline\", \"ver", p);
        assert!(matches!(err, Err(BaselineError::Parse { .. })), "{err:?}");
        let report = run(&[("c", 1.0, "cycles", None)]).to_json();
        let err = Baseline::from_json(&report, p).unwrap_err();
        assert!(
            matches!(err, BaselineError::Format { found: None, .. }),
            "{err:?}"
        );
        assert!(err
            .to_string()
            .contains("a --json report is not a baseline"));
        let mut v: serde_json::Value =
            serde_json::from_str(&baseline_of("c", "cycles", &[1.0, 1.0, 1.0]).to_json()).unwrap();
        v["version"] = 2.into();
        let err = Baseline::from_json(&v.to_string(), p).unwrap_err();
        assert!(
            matches!(err, BaselineError::Version { found: 2, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("save the baseline again"), "{err}");
        v["version"] = VERSION.into();
        v["runs"] = serde_json::json!([[{"id": "c", "value": "fast"}]]);
        let err = Baseline::from_json(&v.to_string(), p).unwrap_err();
        assert!(matches!(err, BaselineError::Parse { .. }), "{err:?}");
        let err = Baseline::read(Path::new("/nonexistent/lace-bench/none.json")).unwrap_err();
        assert!(matches!(err, BaselineError::Read { .. }), "{err:?}");
    }

    #[test]
    fn a_baseline_needs_three_runs_and_a_plain_name() {
        let two = vec![Report::new(), Report::new()];
        assert!(matches!(
            Baseline::new(Vec::new(), two),
            Err(BaselineError::TooFewRuns(2))
        ));
        let dir = baselines_dir(None, None);
        assert_eq!(dir, Path::new("target/lace-bench/baselines"));
        assert_eq!(
            baselines_dir(None, Some("/tmp/t".into())),
            Path::new("/tmp/t/lace-bench/baselines")
        );
        assert_eq!(
            baselines_dir(Some("/b".into()), Some("/tmp/t".into())),
            Path::new("/b")
        );
        assert_eq!(
            baseline_path(&dir, "main-2026.12_05").unwrap(),
            dir.join("main-2026.12_05.json")
        );
        for bad in ["", ".hidden", "../main", "a/b", "a b"] {
            assert!(
                matches!(baseline_path(&dir, bad), Err(BaselineError::Name(_))),
                "{bad}"
            );
        }
    }
}
