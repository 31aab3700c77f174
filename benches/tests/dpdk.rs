//! The DPDK wrappers against small tables with known answers. One `rte_eal_init` per process,
//! so this is a single `harness = false` binary running its checks in order.

use lace_benches::dpdk::{DpdkError, DpdkFib4, DpdkFib6, DpdkHash, Eal, EalOptions, NO_ROUTE};
use lace_benches::workload::{self, ReferenceLpm4, ReferenceLpm6};

/// A named check, run with the process's one EAL.
type Check = (&'static str, fn(Eal));

fn main() {
    let options = EalOptions {
        memory_mb: 1024,
        ..EalOptions::default()
    };
    let eal = Eal::init(&options).expect("EAL starts with --no-huge");
    let checks: &[Check] = &[
        ("second init", second_init),
        ("fib4 known routes", fib4_known_routes),
        ("fib4 add/delete", fib4_add_delete),
        ("fib4 matches reference", fib4_matches_reference),
        ("fib4 memory", fib4_memory),
        ("fib6 matches reference", fib6_matches_reference),
        ("fib6 add/delete", fib6_add_delete),
        ("hash k8", hash_k8),
        ("hash k16 chunks", hash_k16_chunks),
        ("invalid arguments", invalid_arguments),
    ];
    for (name, check) in checks {
        check(eal);
        println!("ok: {name}");
    }
    cleanup(eal);
    println!("ok: cleanup");
    // The libtest summary line, which CI counts.
    println!("\ntest result: ok. {} passed; 0 failed", checks.len() + 1);
}

fn second_init(eal: Eal) {
    let again = Eal::init(&eal.options()).expect("same options return the running EAL");
    assert_eq!(again.options(), eal.options());
    let other = EalOptions {
        memory_mb: 512,
        ..eal.options()
    };
    assert!(matches!(
        Eal::init(&other),
        Err(DpdkError::EalAlreadyInitialized { .. })
    ));
}

const fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

fn fib4_known_routes(eal: Eal) {
    let routes = [
        (ip(10, 0, 0, 0), 8, 1),
        (ip(10, 1, 0, 0), 16, 2),
        (ip(10, 1, 2, 0), 24, 3),
        (ip(10, 1, 2, 128), 25, 4),
        (ip(10, 1, 2, 200), 32, 5),
        (ip(192, 168, 0, 0), 16, 6),
    ];
    let (fib, _) = DpdkFib4::new(eal, &routes).expect("fib builds");
    assert_eq!(DpdkFib4::tbl8_groups_needed(&routes), 1);
    let ips = [
        ip(10, 9, 9, 9),
        ip(10, 1, 9, 9),
        ip(10, 1, 2, 3),
        ip(10, 1, 2, 129),
        ip(10, 1, 2, 200),
        ip(10, 1, 2, 201),
        ip(192, 168, 255, 1),
        ip(11, 0, 0, 1),
    ];
    let mut nhs = [0u64; 8];
    fib.lookup_bulk(&ips, &mut nhs);
    assert_eq!(nhs, [1, 2, 3, 4, 5, 4, 6, NO_ROUTE]);
}

fn fib4_add_delete(eal: Eal) {
    let mut fib = DpdkFib4::with_capacity(eal, 16, 4).expect("empty fib");
    let mut nh = [0u64];
    fib.add(ip(172, 16, 0, 0), 12, 7).unwrap();
    fib.add(ip(172, 16, 5, 5), 32, 8).unwrap();
    fib.lookup_bulk(&[ip(172, 16, 5, 5)], &mut nh);
    assert_eq!(nh, [8]);
    fib.delete(ip(172, 16, 5, 5), 32).unwrap();
    fib.lookup_bulk(&[ip(172, 16, 5, 5)], &mut nh);
    assert_eq!(nh, [7]);
    let err = fib.delete(ip(172, 16, 5, 5), 32).unwrap_err();
    assert!(
        matches!(
            err,
            DpdkError::Modify {
                errno: libc::ENOENT,
                ..
            }
        ),
        "{err}"
    );
    // Host bits are ignored; replacing a next hop works.
    fib.add(ip(172, 16, 9, 9), 12, 9).unwrap();
    fib.lookup_bulk(&[ip(172, 31, 0, 1)], &mut nh);
    assert_eq!(nh, [9]);
}

fn fib4_matches_reference(eal: Eal) {
    let routes = workload::bgp_v4_routes(50_000, 11, 32);
    let dests = workload::destinations_v4(&routes, 100_000, 12);
    let (fib, elapsed) = DpdkFib4::new(eal, &routes).expect("fib builds");
    assert!(elapsed.as_nanos() > 0);
    let reference = ReferenceLpm4::new(&routes);
    let mut nhs = vec![0u64; dests.len()];
    fib.lookup_bulk(&dests, &mut nhs);
    for (d, nh) in dests.iter().zip(&nhs) {
        assert_eq!(
            *nh,
            reference.lookup(*d).map_or(NO_ROUTE, u64::from),
            "{d:#x}"
        );
    }
    // The pod table, whose /32s all sit under /24s.
    let pods = workload::pod_routes_v4(1000);
    let (pod_fib, _) = DpdkFib4::new(eal, &pods).expect("pod fib builds");
    let pod_dests = workload::destinations_v4(&pods, 10_000, 13);
    let reference = ReferenceLpm4::new(&pods);
    let mut nhs = vec![0u64; pod_dests.len()];
    pod_fib.lookup_bulk(&pod_dests, &mut nhs);
    for (d, nh) in pod_dests.iter().zip(&nhs) {
        assert_eq!(
            *nh,
            reference.lookup(*d).map_or(NO_ROUTE, u64::from),
            "{d:#x}"
        );
    }
}

fn fib4_memory(eal: Eal) {
    let routes = workload::bgp_v4_routes(20_000, 1, 8);
    let heap_before = eal.heap_allocated_bytes();
    let (fib, _) = DpdkFib4::new(eal, &routes).expect("fib builds");
    // At least the 2^24 4-byte tbl24 entries.
    assert!(fib.bytes() >= 64 << 20, "{}", fib.bytes());
    assert!(eal.heap_allocated_bytes() >= heap_before + (64 << 20));
    drop(fib);
    // Everything comes back on drop.
    assert_eq!(eal.heap_allocated_bytes(), heap_before);
}

fn fib6_matches_reference(eal: Eal) {
    let routes = workload::bgp_v6_routes(20_000, 21, 32);
    let dests = workload::destinations_v6(&routes, 50_000, 22);
    let (fib, _) = DpdkFib6::new(eal, &routes).expect("fib6 builds");
    assert!(DpdkFib6::tbl8_groups_used(&routes) <= DpdkFib6::tbl8_groups_needed(&routes));
    let reference = ReferenceLpm6::new(&routes);
    let mut nhs = vec![0u64; dests.len()];
    fib.lookup_bulk(&dests, &mut nhs);
    for (d, nh) in dests.iter().zip(&nhs) {
        assert_eq!(*nh, reference.lookup(d).map_or(NO_ROUTE, u64::from));
    }
    let mut outside = [0u64];
    fib.lookup_bulk(&[[0xfc; 16]], &mut outside);
    assert_eq!(outside, [NO_ROUTE]);
}

fn fib6_add_delete(eal: Eal) {
    let p: [u8; 16] = "2001:db8:1:2::"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let host: [u8; 16] = "2001:db8:1:2::99"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let mut fib = DpdkFib6::with_capacity(eal, 8, 16).expect("empty fib6");
    fib.add(&p, 32, 1).unwrap();
    fib.add(&p, 64, 2).unwrap();
    fib.add(&host, 128, 3).unwrap();
    let mut nh = [0u64];
    fib.lookup_bulk(&[host], &mut nh);
    assert_eq!(nh, [3]);
    fib.delete(&host, 128).unwrap();
    fib.lookup_bulk(&[host], &mut nh);
    assert_eq!(nh, [2]);
    fib.delete(&p, 64).unwrap();
    fib.lookup_bulk(&[host], &mut nh);
    assert_eq!(nh, [1]);
}

fn hash_k8(eal: Eal) {
    let keys = workload::fdb_keys(100_000, 31);
    let table = DpdkHash::<8>::with_keys(eal, &keys, |i| i as u64 * 3).expect("hash builds");
    assert_eq!(table.len(), keys.len());
    let mut data = vec![0u64; keys.len()];
    assert_eq!(table.lookup_bulk_data(&keys, &mut data), keys.len());
    assert!(data.iter().enumerate().all(|(i, d)| *d == i as u64 * 3));
    let missing = workload::fdb_keys(10, 999);
    let mut data = vec![0u64; missing.len()];
    assert_eq!(table.lookup_bulk_data(&missing, &mut data), 0);
    assert!(data.iter().all(|d| *d == DpdkHash::<8>::MISS));
}

fn hash_k16_chunks(eal: Eal) {
    let keys = workload::ipv6_keys(1000);
    let mut table = DpdkHash::<16>::new(eal, 1000).expect("hash builds");
    // Every other key present; lookups of odd lengths cross the 64-key chunk boundary.
    for (i, k) in keys.iter().enumerate().step_by(2) {
        table.add(k, i as u64).unwrap();
    }
    for n in [1, 63, 64, 65, 129, 1000] {
        let mut data = vec![0u64; n];
        let hits = table.lookup_bulk_data(&keys[..n], &mut data);
        assert_eq!(hits, n.div_ceil(2));
        for (i, d) in data.iter().enumerate() {
            let want = if i % 2 == 0 {
                i as u64
            } else {
                DpdkHash::<16>::MISS
            };
            assert_eq!(*d, want, "n={n} i={i}");
        }
    }
}

fn invalid_arguments(eal: Eal) {
    let mut fib = DpdkFib4::with_capacity(eal, 4, 1).expect("empty fib");
    assert!(matches!(
        fib.add(0, 33, 1),
        Err(DpdkError::InvalidArgument { .. })
    ));
    assert!(matches!(
        fib.add(0, 8, 0),
        Err(DpdkError::InvalidArgument { .. })
    ));
    let mut table = DpdkHash::<8>::new(eal, 8).expect("hash");
    assert!(matches!(
        table.add(&[0; 8], DpdkHash::<8>::MISS),
        Err(DpdkError::InvalidArgument { .. })
    ));
}

fn cleanup(eal: Eal) {
    let fib = DpdkFib4::with_capacity(eal, 4, 1).expect("empty fib");
    assert!(matches!(
        eal.cleanup(),
        Err(DpdkError::TablesAlive { live: 1 })
    ));
    drop(fib);
    eal.cleanup().expect("cleanup with no tables");
    assert!(matches!(
        DpdkFib4::with_capacity(eal, 4, 1),
        Err(DpdkError::EalCleanedUp)
    ));
    assert!(matches!(
        Eal::init(&EalOptions::default()),
        Err(DpdkError::EalCleanedUp)
    ));
}
