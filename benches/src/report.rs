//! Figures, anchors, targets and the helpers that measure them.
//!
//! A [`Figure`] is one measured number. A lace figure names the DPDK figure it is compared with
//! (`anchor`) and carries that figure's value, so the ratio travels with it into the table and
//! the JSON. [`Target`]s are goals printed next to figures ("met"/"MISSED"); nothing here
//! asserts on them — tests never assert on time.

use std::fmt::{self, Write as _};
use std::io;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use crate::dpdk::rdtsc;

/// One measured number, optionally beside the anchor it is compared with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "FigureJson", from = "FigureJson")]
pub struct Figure {
    /// Dotted name, e.g. `fib4.900k.lookup_cycles` or `rte_fib.900k.lookup_cycles`.
    pub id: String,
    /// The measured value, in `unit`.
    pub value: f64,
    /// Unit of `value` and `anchor_value` (`cycles/lookup`, `MiB`, `1/s`, ...).
    pub unit: String,
    /// The id of the anchor figure this one is compared with.
    pub anchor: Option<String>,
    /// The anchor's value, in the same unit.
    pub anchor_value: Option<f64>,
    /// Which way the figure gets better, when its unit does not say (`x`, a count): set with
    /// [`Figure::better`]. The regression gate reads it before the unit
    /// (`crate::baseline::direction`).
    pub better: Option<Direction>,
}

/// Which way a figure gets better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    /// A cost: cycles, time, memory.
    #[serde(rename = "lower")]
    LowerIsBetter,
    /// A rate: anything per second, packets per second.
    #[serde(rename = "higher")]
    HigherIsBetter,
}

impl Figure {
    /// A figure with no anchor (anchors themselves, and informational numbers).
    pub fn new(id: impl Into<String>, value: f64, unit: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            value,
            unit: unit.into(),
            anchor: None,
            anchor_value: None,
            better: None,
        }
    }

    /// The figure with its direction declared, for a unit that does not imply one.
    pub fn better(self, direction: Direction) -> Self {
        Self {
            better: Some(direction),
            ..self
        }
    }

    /// A figure compared with `anchor` (same unit expected, and the anchor's direction), e.g.
    /// lace's lookup cycles against `rte_fib`'s from the same run.
    pub fn versus(id: impl Into<String>, value: f64, anchor: &Figure) -> Self {
        Self {
            id: id.into(),
            value,
            unit: anchor.unit.clone(),
            anchor: Some(anchor.id.clone()),
            anchor_value: Some(anchor.value),
            better: anchor.better,
        }
    }

    /// `value / anchor_value`; `None` without an anchor or when the anchor is 0.
    pub fn ratio(&self) -> Option<f64> {
        self.anchor_value
            .filter(|a| *a != 0.0)
            .map(|a| self.value / a)
    }
}

/// The JSON shape of a figure: its fields plus the derived `ratio` (null without anchor);
/// `better` (`"lower"` or `"higher"`) only when declared.
#[derive(Serialize, Deserialize)]
struct FigureJson {
    id: String,
    value: f64,
    unit: String,
    anchor: Option<String>,
    anchor_value: Option<f64>,
    #[serde(default)]
    ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    better: Option<Direction>,
}

impl From<Figure> for FigureJson {
    fn from(f: Figure) -> Self {
        let ratio = f.ratio();
        Self {
            id: f.id,
            value: f.value,
            unit: f.unit,
            anchor: f.anchor,
            anchor_value: f.anchor_value,
            ratio,
            better: f.better,
        }
    }
}

impl From<FigureJson> for Figure {
    fn from(j: FigureJson) -> Self {
        Self {
            id: j.id,
            value: j.value,
            unit: j.unit,
            anchor: j.anchor,
            anchor_value: j.anchor_value,
            better: j.better,
        }
    }
}

/// A goal for one figure. Report-only: printed as "met" or "MISSED", never asserted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// `value / anchor_value <= x` (e.g. at most as slow as DPDK: `RatioAtMost(1.0)`).
    RatioAtMost(f64),
    /// `value / anchor_value >= x` (e.g. inserts four times DPDK's rate: `RatioAtLeast(4.0)`).
    RatioAtLeast(f64),
    /// `value <= x` in the figure's unit.
    ValueAtMost(f64),
    /// `value >= x` in the figure's unit.
    ValueAtLeast(f64),
}

impl Target {
    /// Whether `figure` meets the target; `None` when it cannot be judged (ratio target
    /// without an anchor value).
    pub fn met(&self, figure: &Figure) -> Option<bool> {
        match *self {
            Target::RatioAtMost(x) => figure.ratio().map(|r| r <= x),
            Target::RatioAtLeast(x) => figure.ratio().map(|r| r >= x),
            Target::ValueAtMost(x) => Some(figure.value <= x),
            Target::ValueAtLeast(x) => Some(figure.value >= x),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::RatioAtMost(x) => write!(f, "ratio <= {x}"),
            Target::RatioAtLeast(x) => write!(f, "ratio >= {x}"),
            Target::ValueAtMost(x) => write!(f, "value <= {x}"),
            Target::ValueAtLeast(x) => write!(f, "value >= {x}"),
        }
    }
}

/// The figures of one run, in insertion order, plus the targets registered for some of them.
///
/// It serialises as its figure array (`--json`'s format, which baselines store run by run);
/// targets are the binary's goals, not measurements, and are not serialised.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Report {
    figures: Vec<Figure>,
    #[serde(skip)]
    targets: Vec<(String, Target)>,
}

impl Report {
    /// An empty report.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a figure.
    pub fn push(&mut self, figure: Figure) {
        self.figures.push(figure);
    }

    /// The figure with this id (the first, should there be several).
    pub fn get(&self, id: &str) -> Option<&Figure> {
        self.figures.iter().find(|f| f.id == id)
    }

    /// All figures, in insertion order.
    pub fn figures(&self) -> &[Figure] {
        &self.figures
    }

    /// Registers a target for the figure `id` (replacing an earlier one).
    pub fn set_target(&mut self, id: impl Into<String>, target: Target) {
        let id = id.into();
        self.targets.retain(|(i, _)| *i != id);
        self.targets.push((id, target));
    }

    /// The target registered for `id`.
    pub fn target(&self, id: &str) -> Option<Target> {
        self.targets.iter().find(|(i, _)| i == id).map(|(_, t)| *t)
    }

    /// The figures as a JSON array of `{"id","value","unit","anchor","anchor_value","ratio"}`.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("figures serialise")
    }

    /// Writes [`Report::to_json`] to `path`.
    pub fn write_json(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.to_json() + "\n")
    }

    /// The report as an aligned text table: id, value, unit, anchor, anchor value, ratio, and a
    /// target column when any target is registered.
    pub fn table(&self) -> String {
        let with_targets = !self.targets.is_empty();
        let mut header = vec!["id", "value", "unit", "anchor", "anchor value", "ratio"];
        if with_targets {
            header.push("target");
        }
        let rows: Vec<Vec<String>> = self
            .figures
            .iter()
            .map(|f| {
                let mut row = vec![
                    f.id.clone(),
                    fmt_value(f.value),
                    f.unit.clone(),
                    f.anchor.clone().unwrap_or_else(|| "-".to_owned()),
                    f.anchor_value.map_or_else(|| "-".to_owned(), fmt_value),
                    f.ratio()
                        .map_or_else(|| "-".to_owned(), |r| format!("{r:.3}")),
                ];
                if with_targets {
                    row.push(match self.target(&f.id) {
                        None => String::new(),
                        Some(t) => match t.met(f) {
                            Some(true) => format!("{t}: met"),
                            Some(false) => format!("{t}: MISSED"),
                            None => format!("{t}: n/a"),
                        },
                    });
                }
                row
            })
            .collect();
        // Numbers right-aligned, text left-aligned.
        text_table(
            &header,
            &rows,
            &[false, true, false, false, true, true, false],
        )
    }

    /// Prints [`Report::table`] to `w`.
    pub fn print_table(&self, w: &mut impl io::Write) -> io::Result<()> {
        w.write_all(self.table().as_bytes())
    }
}

/// An aligned text table: `header`, a rule, then `rows`; column `i` right-aligned where
/// `right[i]`, two spaces between columns, no trailing spaces.
pub(crate) fn text_table<R: AsRef<[String]>>(
    header: &[&str],
    rows: &[R],
    right: &[bool],
) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.as_ref()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            if right.get(i).copied().unwrap_or(false) {
                let _ = write!(s, "{cell:>w$}");
            } else {
                let _ = write!(s, "{cell:<w$}");
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&header.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>());
    line(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>());
    for row in rows {
        line(row.as_ref());
    }
    out
}

impl Extend<Figure> for Report {
    fn extend<I: IntoIterator<Item = Figure>>(&mut self, iter: I) {
        self.figures.extend(iter);
    }
}

/// Four significant digits, without exponent for everyday magnitudes.
fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if !(1e-3..1e15).contains(&a) {
        format!("{v:.3e}")
    } else if a >= 1000.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let decimals = 3 - a.log10().floor() as i32;
        format!("{v:.*}", decimals.clamp(0, 6) as usize)
    }
}

/// Sizes of one run: full for publishable numbers, `--quick` for the three-minute report (the
/// same tables, repeated less; figure ids name the table sizes, so they match full runs), and
/// `--smoke` for CI (tiny tables, one round: proves the pipeline works, figures meaningless).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scale {
    /// Whether this is the quick scale.
    pub quick: bool,
    /// Whether this is the smoke scale.
    pub smoke: bool,
    /// Seed for every workload generator.
    pub seed: u64,
    /// Routes in the BGP-like IPv4 table.
    pub fib4_routes: usize,
    /// Routes in the pod-network IPv4 table.
    pub pod_routes: usize,
    /// Routes in the BGP-like IPv6 table.
    pub fib6_routes: usize,
    /// Distinct next hops in the BGP-like tables.
    pub nexthops: u32,
    /// Addresses looked up per round.
    pub lookups: usize,
    /// Keys in each exact-match (hash) table.
    pub hash_entries: usize,
    /// Burst sizes to measure bulk lookups at (the first is the headline figure).
    pub bursts: Vec<usize>,
    /// Timed rounds per measurement (the median is reported).
    pub rounds: usize,
    /// Networks in the multi-network table set (each holding `pod_routes` routes).
    pub multi_networks: usize,
    /// Routes inserted into the loaded IPv4 table in batches of [`INSERT_BATCH`], one
    /// publication per batch.
    pub batch_inserts: usize,
    /// Routes inserted into the loaded IPv4 table one per publication.
    pub single_inserts: usize,
    /// Publications timed for the publish-latency distribution.
    pub publish_samples: usize,
}

/// Routes per publication in the batched-insert measurement.
pub const INSERT_BATCH: usize = 1000;

impl Scale {
    /// Quick: the same tables as full, fewer rounds.
    pub fn quick() -> Self {
        Self {
            quick: true,
            rounds: 5,
            batch_inserts: 50 * INSERT_BATCH,
            single_inserts: 5_000,
            publish_samples: 5_000,
            ..Self::full()
        }
    }

    /// Smoke: tiny tables, one round.
    pub fn smoke() -> Self {
        Self {
            smoke: true,
            fib4_routes: 10_000,
            fib6_routes: 5_000,
            lookups: 1 << 14,
            hash_entries: 10_000,
            rounds: 1,
            multi_networks: 20,
            batch_inserts: 2 * INSERT_BATCH,
            single_inserts: 200,
            publish_samples: 300,
            ..Self::full()
        }
    }

    /// For criterion benches: [`Scale::quick`] under `cargo bench` (which passes `--bench`),
    /// [`Scale::smoke`] when `cargo test` runs the benches once as tests.
    pub fn for_criterion() -> Self {
        if std::env::args().any(|a| a == "--bench") {
            Self::quick()
        } else {
            Self::smoke()
        }
    }

    /// Full: 900k IPv4 and 200k IPv6 BGP-like routes, 1M-key hash tables, 2^20 lookups per
    /// round, 31 rounds, 1,000 pod networks, 100k batched and 20k single route inserts, 20k
    /// publications.
    pub fn full() -> Self {
        Self {
            quick: false,
            smoke: false,
            seed: 0x1ace,
            fib4_routes: 900_000,
            pod_routes: 1_000,
            fib6_routes: 200_000,
            nexthops: 256,
            lookups: 1 << 20,
            hash_entries: 1_000_000,
            bursts: vec![32, 64],
            rounds: 31,
            multi_networks: 1_000,
            batch_inserts: 100 * INSERT_BATCH,
            single_inserts: 20_000,
            publish_samples: 20_000,
        }
    }
}

/// A short size tag for figure ids: 900000 → `900k`, 1000000 → `1M`, 1000 → `1k`.
pub fn size_tag(n: usize) -> String {
    if n >= 1_000_000 && n % 1_000_000 == 0 {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n % 1000 == 0 {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

/// The TSC frequency in Hz, calibrated once per process against [`Instant`] over ~50 ms.
pub fn tsc_hz() -> f64 {
    static HZ: OnceLock<f64> = OnceLock::new();
    *HZ.get_or_init(|| {
        let t0 = Instant::now();
        let c0 = rdtsc();
        while t0.elapsed() < Duration::from_millis(50) {
            std::hint::spin_loop();
        }
        let c1 = rdtsc();
        let elapsed = t0.elapsed();
        (c1 - c0) as f64 / elapsed.as_secs_f64()
    })
}

/// TSC cycles per operation of `f`, which performs `ops` operations per call: one untimed
/// warm-up call, then `rounds` timed calls; returns the median.
pub fn cycles_per_op(rounds: usize, ops: u64, f: impl FnMut()) -> f64 {
    median(cycle_samples(rounds, ops, f))
}

/// Like [`cycles_per_op`] but returns every round's cycles per operation, in run order.
pub fn cycle_samples(rounds: usize, ops: u64, mut f: impl FnMut()) -> Vec<f64> {
    f();
    (0..rounds.max(1))
        .map(|_| {
            let start = rdtsc();
            f();
            let end = rdtsc();
            end.saturating_sub(start) as f64 / ops.max(1) as f64
        })
        .collect()
}

/// Median cycles per operation of two closures measured in alternating rounds (a, b, a, b, ...
/// after one warm-up call each), so that machine noise — other processes, frequency changes —
/// hits both alike. Use it for a lace table and its anchor when the ratio matters more than
/// either absolute figure.
pub fn paired_cycles_per_op(
    rounds: usize,
    ops: u64,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (f64, f64) {
    a();
    b();
    let time = |f: &mut dyn FnMut()| {
        let start = rdtsc();
        f();
        rdtsc().saturating_sub(start) as f64 / ops.max(1) as f64
    };
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        sa.push(time(&mut a));
        sb.push(time(&mut b));
    }
    (median(sa), median(sb))
}

/// Median cycles per operation of several closures measured round-robin (one warm-up call
/// each, then `rounds` rounds of one timed call per closure, in order), the generalisation of
/// [`paired_cycles_per_op`] to more than two contenders. `ops[i]` is the number of operations
/// closure `i` performs per call. Returns one median per closure.
///
/// # Panics
/// If `ops` and `fs` differ in length.
pub fn interleaved_cycles_per_op(
    rounds: usize,
    ops: &[u64],
    fs: &mut [&mut dyn FnMut()],
) -> Vec<f64> {
    assert_eq!(ops.len(), fs.len(), "one operation count per closure");
    for f in fs.iter_mut() {
        f();
    }
    let mut samples = vec![Vec::with_capacity(rounds.max(1)); fs.len()];
    for _ in 0..rounds.max(1) {
        for ((f, s), &n) in fs.iter_mut().zip(&mut samples).zip(ops) {
            let start = rdtsc();
            f();
            s.push(rdtsc().saturating_sub(start) as f64 / n.max(1) as f64);
        }
    }
    samples.into_iter().map(median).collect()
}

/// The median of `samples` (mean of the middle two for an even count); NaN when empty.
pub fn median(mut samples: Vec<f64>) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    }
}

/// Cycles per lookup of a bulk lookup function: `inputs` are fed to `lookup` in bursts of
/// `burst` (the last may be shorter) with a reused output buffer, as a poll-mode worker would;
/// the median over `rounds` passes is returned. Use the same call for a lace table and its
/// anchor so both are measured identically.
pub fn bulk_lookup_cycles<I, O: Copy + Default>(
    inputs: &[I],
    burst: usize,
    rounds: usize,
    mut lookup: impl FnMut(&[I], &mut [O]),
) -> f64 {
    let burst = burst.max(1);
    let mut out = vec![O::default(); burst];
    cycles_per_op(rounds, inputs.len() as u64, || {
        for chunk in inputs.chunks(burst) {
            let out = &mut out[..chunk.len()];
            lookup(std::hint::black_box(chunk), out);
            std::hint::black_box(&*out);
        }
    })
}

/// Latency distribution recorder over an HDR histogram (1 ns to 1 h, 3 significant digits),
/// reporting in microseconds.
#[derive(Debug, Clone)]
pub struct Histogram {
    inner: hdrhistogram::Histogram<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            inner: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .expect("valid static bounds"),
        }
    }

    /// Records one latency in nanoseconds (clamped into the histogram's range).
    pub fn record_ns(&mut self, ns: u64) {
        self.inner.saturating_record(ns.max(1));
    }

    /// Records one latency given in TSC cycles (converted with [`tsc_hz`]).
    pub fn record_cycles(&mut self, cycles: u64) {
        self.record_ns((cycles as f64 * 1e9 / tsc_hz()) as u64);
    }

    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        self.record_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Number of recorded values.
    pub fn len(&self) -> u64 {
        self.inner.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// The latency at percentile `p` (0–100), in µs.
    pub fn percentile_us(&self, p: f64) -> f64 {
        self.inner.value_at_percentile(p) as f64 / 1000.0
    }

    /// Mean latency in µs.
    pub fn mean_us(&self) -> f64 {
        self.inner.mean() / 1000.0
    }

    /// Maximum latency in µs.
    pub fn max_us(&self) -> f64 {
        self.inner.max() as f64 / 1000.0
    }

    /// Figures `<prefix>.p50_us`, `.p99_us`, `.p999_us` and `.max_us`.
    pub fn figures(&self, prefix: &str) -> Vec<Figure> {
        vec![
            Figure::new(format!("{prefix}.p50_us"), self.percentile_us(50.0), "µs"),
            Figure::new(format!("{prefix}.p99_us"), self.percentile_us(99.0), "µs"),
            Figure::new(format!("{prefix}.p999_us"), self.percentile_us(99.9), "µs"),
            Figure::new(format!("{prefix}.max_us"), self.max_us(), "µs"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_and_json_shape() {
        let anchor = Figure::new("rte_fib.900k.lookup_cycles", 40.0, "cycles/lookup");
        let lace = Figure::versus("fib4.900k.lookup_cycles", 30.0, &anchor);
        assert_eq!(lace.ratio(), Some(0.75));
        assert_eq!(anchor.ratio(), None);
        let mut r = Report::new();
        r.push(anchor);
        r.push(lace.clone());
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v[0]["ratio"], serde_json::Value::Null);
        assert_eq!(v[1]["anchor"], "rte_fib.900k.lookup_cycles");
        assert_eq!(v[1]["ratio"], 0.75);
        let back: Vec<Figure> = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(back[1], lace);
        assert!(
            v[1].get("better").is_none(),
            "only declared directions are written"
        );
        let ideal = Figure::new("ideal", 2.0, "x").better(Direction::HigherIsBetter);
        let scaling = Figure::versus("scaling", 1.8, &ideal);
        assert_eq!(scaling.better, Some(Direction::HigherIsBetter));
        let json = serde_json::to_value(&scaling).unwrap();
        assert_eq!(json["better"], "higher");
        assert_eq!(serde_json::from_value::<Figure>(json).unwrap(), scaling);
    }

    #[test]
    fn table_marks_targets() {
        let anchor = Figure::new("a", 40.0, "cycles");
        let mut r = Report::new();
        r.push(Figure::versus("x", 30.0, &anchor));
        r.push(Figure::versus("y", 50.0, &anchor));
        r.push(anchor);
        r.set_target("x", Target::RatioAtMost(1.0));
        r.set_target("y", Target::RatioAtMost(1.0));
        r.set_target("a", Target::RatioAtLeast(4.0));
        let t = r.table();
        assert!(
            t.lines().nth(2).unwrap().ends_with("ratio <= 1: met"),
            "{t}"
        );
        assert!(
            t.lines().nth(3).unwrap().ends_with("ratio <= 1: MISSED"),
            "{t}"
        );
        assert!(t.lines().nth(4).unwrap().ends_with("n/a"), "{t}");
    }

    #[test]
    fn medians_and_tags() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
        let (x, y) = paired_cycles_per_op(
            3,
            1,
            || {},
            || std::thread::sleep(Duration::from_micros(50)),
        );
        assert!(x < y);
        let (mut n, mut m) = (0u64, 0u64);
        let v = interleaved_cycles_per_op(
            3,
            &[1, 100],
            &mut [&mut || n += 1, &mut || {
                m += 1;
                std::thread::sleep(Duration::from_micros(50));
            }],
        );
        assert_eq!((n, m), (4, 4));
        assert!(v[0] < v[1] * 100.0);
        assert_eq!(size_tag(900_000), "900k");
        assert_eq!(size_tag(1_000_000), "1M");
        assert_eq!(size_tag(1_048_576), "1048576");
        assert_eq!(fmt_value(31.4159), "31.42");
        assert_eq!(fmt_value(123456.7), "123457");
        assert_eq!(fmt_value(81.0), "81");
    }

    #[test]
    fn histogram_percentiles_in_us() {
        let mut h = Histogram::new();
        for ns in 1..=1000u64 {
            h.record_ns(ns * 1000);
        }
        assert!((h.percentile_us(50.0) - 500.0).abs() < 1.0);
        assert!((h.max_us() - 1000.0).abs() < 1.0);
    }
}
