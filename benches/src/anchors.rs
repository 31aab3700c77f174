//! The DPDK anchor measurements: every lace table figure is reported beside one of these,
//! measured in the same run on the same workload.
//!
//! Figure ids (`<tag>` from [`size_tag`], `<b>` the other burst sizes of [`Scale::bursts`]):
//!
//! | id | unit | what |
//! |---|---|---|
//! | `rte_fib.<tag>.lookup_cycles` | cycles/lookup | `rte_fib_lookup_bulk`, BGP-like table, first burst size |
//! | `rte_fib.<tag>.lookup_cycles.burst<b>` | cycles/lookup | the same at other burst sizes |
//! | `rte_fib.<tag>.mlookups_per_s` | M/s | one core's rate at the first burst size |
//! | `rte_fib.<tag>.inserts_per_s` | 1/s | `rte_fib_add` one route at a time into an empty FIB |
//! | `rte_fib.<tag>.mib` | MiB | DPDK heap the loaded FIB occupies (data plane + RIB) |
//! | `rte_fib.<tag>.dataplane_mib` | MiB | of which the lookup structures (tbl24 + tbl8 pool) |
//! | `rte_fib.<tag>.num_tbl8` | groups | tbl8 groups the FIB was created with |
//! | `rte_fib.pod<tag>.lookup_cycles` | cycles/lookup | pod-network table |
//! | `rte_fib6.<tag>.*` | | as `rte_fib`, for the IPv6 BGP-like table (`rte_fib6`, TRIE) |
//! | `rte_hash.k8.<tag>.*` | | FDB-like: 8-byte keys (MAC + bridge domain); `lookup_cycles`, `lookup_cycles.burst<b>`, `inserts_per_s`, `mib` |
//! | `rte_hash.k16.<tag>.*` | | neighbor-like: 16-byte keys (IPv6 addresses) |
//!
//! Before timing, each table's answers for a sample of the lookups are checked against
//! [`ReferenceLpm4`]/[`ReferenceLpm6`] or the inserted values, so a wrong anchor fails loudly
//! instead of producing a fast wrong number.

use std::time::Duration;

use crate::dpdk::{DpdkError, DpdkFib4, DpdkFib6, DpdkHash, Eal, NO_ROUTE};
use crate::report::{bulk_lookup_cycles, size_tag, tsc_hz, Figure, Scale};
use crate::workload::{self, ReferenceLpm4, ReferenceLpm6, Route4, Route6};

/// Addresses (or keys) per table whose answers are checked before timing.
const CHECK_SAMPLE: usize = 20_000;

/// Why an anchor could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum AnchorError {
    /// A DPDK call failed.
    #[error(transparent)]
    Dpdk(#[from] DpdkError),
    /// A DPDK table answered differently from the reference.
    #[error(
        "{table}: lookup of {key} returned {got}, the reference says {want} — the wrapper or the \
         workload is broken; no figures were taken"
    )]
    WrongAnswer {
        /// Which table.
        table: String,
        /// The address or key, formatted.
        key: String,
        /// What the table returned.
        got: String,
        /// What the reference returned.
        want: String,
    },
}

/// The workloads of one run, generated once and shared by the anchors and lace's tables.
#[derive(Debug, Clone)]
pub struct Workloads {
    /// BGP-like IPv4 routes.
    pub bgp4: Vec<Route4>,
    /// Lookup stream for `bgp4`.
    pub bgp4_destinations: Vec<u32>,
    /// Pod-network IPv4 routes.
    pub pod4: Vec<Route4>,
    /// Lookup stream for `pod4`.
    pub pod4_destinations: Vec<u32>,
    /// BGP-like IPv6 routes.
    pub bgp6: Vec<Route6>,
    /// Lookup stream for `bgp6`.
    pub bgp6_destinations: Vec<[u8; 16]>,
    /// FDB keys (MAC + bridge domain).
    pub fdb_keys: Vec<[u8; 8]>,
    /// Lookup stream over `fdb_keys` (all present, random order).
    pub fdb_lookups: Vec<[u8; 8]>,
    /// Neighbor keys (IPv6 pod addresses).
    pub neighbor_keys: Vec<[u8; 16]>,
    /// Lookup stream over `neighbor_keys` (all present, random order).
    pub neighbor_lookups: Vec<[u8; 16]>,
}

impl Workloads {
    /// Generates every workload for `scale` (deterministic in `scale.seed`).
    pub fn generate(scale: &Scale) -> Self {
        let s = scale.seed;
        let bgp4 = workload::bgp_v4_routes(scale.fib4_routes, s, scale.nexthops);
        let bgp4_destinations = workload::destinations_v4(&bgp4, scale.lookups, s + 1);
        let pod4 = workload::pod_routes_v4(scale.pod_routes);
        let pod4_destinations = workload::destinations_v4(&pod4, scale.lookups, s + 2);
        let bgp6 = workload::bgp_v6_routes(scale.fib6_routes, s + 3, scale.nexthops);
        let bgp6_destinations = workload::destinations_v6(&bgp6, scale.lookups, s + 4);
        let fdb_keys = workload::fdb_keys(scale.hash_entries, s + 5);
        let fdb_lookups = workload::sample(&fdb_keys, scale.lookups, s + 6);
        let neighbor_keys = workload::ipv6_keys(scale.hash_entries);
        let neighbor_lookups = workload::sample(&neighbor_keys, scale.lookups, s + 7);
        Self {
            bgp4,
            bgp4_destinations,
            pod4,
            pod4_destinations,
            bgp6,
            bgp6_destinations,
            fdb_keys,
            fdb_lookups,
            neighbor_keys,
            neighbor_lookups,
        }
    }
}

/// All anchor figures, table by table (each table is dropped before the next is built).
pub fn all(eal: Eal, scale: &Scale, w: &Workloads) -> Result<Vec<Figure>, AnchorError> {
    let mut figures = fib4(
        eal,
        scale,
        "rte_fib",
        &size_tag(w.bgp4.len()),
        &w.bgp4,
        &w.bgp4_destinations,
    )?;
    figures.extend(fib4_lookup_only(
        eal,
        scale,
        &format!("rte_fib.pod{}", size_tag(w.pod4.len())),
        &w.pod4,
        &w.pod4_destinations,
    )?);
    figures.extend(fib6(
        eal,
        scale,
        &size_tag(w.bgp6.len()),
        &w.bgp6,
        &w.bgp6_destinations,
    )?);
    figures.extend(hash(
        eal,
        scale,
        "rte_hash.k8",
        &w.fdb_keys,
        &w.fdb_lookups,
    )?);
    figures.extend(hash(
        eal,
        scale,
        "rte_hash.k16",
        &w.neighbor_keys,
        &w.neighbor_lookups,
    )?);
    Ok(figures)
}

/// Builds a [`DpdkFib4`] from `routes`, checks it against [`ReferenceLpm4`] and measures it:
/// figures `<prefix>.<tag>.{lookup_cycles[.burst<b>], mlookups_per_s, inserts_per_s, mib,
/// dataplane_mib, num_tbl8}`.
pub fn fib4(
    eal: Eal,
    scale: &Scale,
    prefix: &str,
    tag: &str,
    routes: &[Route4],
    destinations: &[u32],
) -> Result<Vec<Figure>, AnchorError> {
    let id = format!("{prefix}.{tag}");
    let (fib, insert_time) = DpdkFib4::new(eal, routes)?;
    check_fib4(&fib, &id, routes, destinations)?;
    let mut figures = lookup_figures(&id, scale, |burst| {
        bulk_lookup_cycles(destinations, burst, scale.rounds, |ips, nhs| {
            fib.lookup_bulk(ips, nhs)
        })
    });
    figures.push(rate_figure(&id, "inserts_per_s", routes.len(), insert_time));
    figures.push(Figure::new(format!("{id}.mib"), mib(fib.bytes()), "MiB"));
    let num_tbl8 = fib.num_tbl8();
    drop(fib);
    // The same FIB with a one-route RIB: what remains is the data plane lookups touch.
    let probe = DpdkFib4::with_capacity(eal, 1, num_tbl8)?;
    figures.push(Figure::new(
        format!("{id}.dataplane_mib"),
        mib(probe.bytes()),
        "MiB",
    ));
    figures.push(Figure::new(
        format!("{id}.num_tbl8"),
        f64::from(num_tbl8),
        "groups",
    ));
    Ok(figures)
}

/// Like [`fib4`] but only the headline lookup figure `<id>.lookup_cycles` (small tables whose
/// memory and insert rate say little).
pub fn fib4_lookup_only(
    eal: Eal,
    scale: &Scale,
    id: &str,
    routes: &[Route4],
    destinations: &[u32],
) -> Result<Vec<Figure>, AnchorError> {
    let (fib, _) = DpdkFib4::new(eal, routes)?;
    check_fib4(&fib, id, routes, destinations)?;
    let burst = scale.bursts.first().copied().unwrap_or(32);
    let cycles = bulk_lookup_cycles(destinations, burst, scale.rounds, |ips, nhs| {
        fib.lookup_bulk(ips, nhs)
    });
    Ok(vec![Figure::new(
        format!("{id}.lookup_cycles"),
        cycles,
        "cycles/lookup",
    )])
}

/// Builds a [`DpdkFib6`] from `routes`, checks it against [`ReferenceLpm6`] and measures it:
/// figures `rte_fib6.<tag>.{lookup_cycles[.burst<b>], mlookups_per_s, inserts_per_s, mib,
/// dataplane_mib, num_tbl8}`.
pub fn fib6(
    eal: Eal,
    scale: &Scale,
    tag: &str,
    routes: &[Route6],
    destinations: &[[u8; 16]],
) -> Result<Vec<Figure>, AnchorError> {
    let id = format!("rte_fib6.{tag}");
    let (fib, insert_time) = DpdkFib6::new(eal, routes)?;
    let reference = ReferenceLpm6::new(routes);
    let sample = &destinations[..destinations.len().min(CHECK_SAMPLE)];
    let mut got = vec![0u64; sample.len()];
    fib.lookup_bulk(sample, &mut got);
    for (addr, got) in sample.iter().zip(&got) {
        let want = reference.lookup(addr).map_or(NO_ROUTE, u64::from);
        if *got != want {
            return Err(AnchorError::WrongAnswer {
                table: id,
                key: std::net::Ipv6Addr::from(*addr).to_string(),
                got: got.to_string(),
                want: want.to_string(),
            });
        }
    }
    let mut figures = lookup_figures(&id, scale, |burst| {
        bulk_lookup_cycles(destinations, burst, scale.rounds, |ips, nhs| {
            fib.lookup_bulk(ips, nhs)
        })
    });
    figures.push(rate_figure(&id, "inserts_per_s", routes.len(), insert_time));
    figures.push(Figure::new(format!("{id}.mib"), mib(fib.bytes()), "MiB"));
    let num_tbl8 = fib.num_tbl8();
    drop(fib);
    let probe = DpdkFib6::with_capacity(eal, 1, num_tbl8)?;
    figures.push(Figure::new(
        format!("{id}.dataplane_mib"),
        mib(probe.bytes()),
        "MiB",
    ));
    figures.push(Figure::new(
        format!("{id}.num_tbl8"),
        f64::from(num_tbl8),
        "groups",
    ));
    Ok(figures)
}

/// Builds a [`DpdkHash`] holding `keys[i] → i`, checks a sample of `lookups` and measures it:
/// figures `<prefix>.<tag>.{lookup_cycles[.burst<b>], mlookups_per_s, inserts_per_s, mib}`.
pub fn hash<const K: usize>(
    eal: Eal,
    scale: &Scale,
    prefix: &str,
    keys: &[[u8; K]],
    lookups: &[[u8; K]],
) -> Result<Vec<Figure>, AnchorError> {
    let id = format!("{prefix}.{}", size_tag(keys.len()));
    let entries = u32::try_from(keys.len()).unwrap_or(u32::MAX);
    let mut table = DpdkHash::<K>::new(eal, entries)?;
    let start = std::time::Instant::now();
    for (i, key) in keys.iter().enumerate() {
        table.add(key, i as u64)?;
    }
    let insert_time = start.elapsed();
    check_hash(&table, &id, keys)?;
    let mut figures = lookup_figures(&id, scale, |burst| {
        bulk_lookup_cycles(lookups, burst, scale.rounds, |keys, data| {
            table.lookup_bulk_data(keys, data);
        })
    });
    figures.push(rate_figure(&id, "inserts_per_s", keys.len(), insert_time));
    figures.push(Figure::new(format!("{id}.mib"), mib(table.bytes()), "MiB"));
    Ok(figures)
}

/// `<id>.lookup_cycles` at the first burst size, `<id>.lookup_cycles.burst<b>` at the others,
/// and `<id>.mlookups_per_s` derived from the first.
fn lookup_figures(id: &str, scale: &Scale, mut measure: impl FnMut(usize) -> f64) -> Vec<Figure> {
    let mut figures = Vec::new();
    for (i, &burst) in scale.bursts.iter().enumerate() {
        let cycles = measure(burst);
        if i == 0 {
            figures.push(Figure::new(
                format!("{id}.lookup_cycles"),
                cycles,
                "cycles/lookup",
            ));
            figures.push(Figure::new(
                format!("{id}.mlookups_per_s"),
                tsc_hz() / cycles / 1e6,
                "M/s",
            ));
        } else {
            figures.push(Figure::new(
                format!("{id}.lookup_cycles.burst{burst}"),
                cycles,
                "cycles/lookup",
            ));
        }
    }
    figures
}

fn check_fib4(
    fib: &DpdkFib4,
    id: &str,
    routes: &[Route4],
    destinations: &[u32],
) -> Result<(), AnchorError> {
    let reference = ReferenceLpm4::new(routes);
    // The sampled destinations, plus addresses no route may cover (0.0.0.0, 255.255.255.255).
    let mut sample: Vec<u32> = destinations[..destinations.len().min(CHECK_SAMPLE)].to_vec();
    sample.extend([0, u32::MAX]);
    let mut got = vec![0u64; sample.len()];
    fib.lookup_bulk(&sample, &mut got);
    for (addr, got) in sample.iter().zip(&got) {
        let want = reference.lookup(*addr).map_or(NO_ROUTE, u64::from);
        if *got != want {
            return Err(AnchorError::WrongAnswer {
                table: id.to_owned(),
                key: std::net::Ipv4Addr::from(*addr).to_string(),
                got: got.to_string(),
                want: want.to_string(),
            });
        }
    }
    Ok(())
}

fn check_hash<const K: usize>(
    table: &DpdkHash<K>,
    id: &str,
    keys: &[[u8; K]],
) -> Result<(), AnchorError> {
    let step = (keys.len() / CHECK_SAMPLE).max(1);
    let sample: Vec<[u8; K]> = keys.iter().step_by(step).copied().collect();
    let mut got = vec![0u64; sample.len()];
    table.lookup_bulk_data(&sample, &mut got);
    for (n, (key, got)) in sample.iter().zip(&got).enumerate() {
        let want = (n * step) as u64;
        if *got != want {
            return Err(AnchorError::WrongAnswer {
                table: id.to_owned(),
                key: format!("{key:02x?}"),
                got: got.to_string(),
                want: want.to_string(),
            });
        }
    }
    Ok(())
}

fn rate_figure(id: &str, what: &str, ops: usize, elapsed: Duration) -> Figure {
    Figure::new(
        format!("{id}.{what}"),
        ops as f64 / elapsed.as_secs_f64().max(1e-9),
        "1/s",
    )
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
