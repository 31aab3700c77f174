//! The DPDK wrapper against real DPDK vdevs (net_null, net_ring, net_tap), without NICs or
//! hugepages. `rte_eal_init` runs once per process, so this is one `harness = false` binary that
//! runs its checks in order and prints `N passed, M failed`.
//!
//! Prerequisites: root (DPDK memory and the tap device), DPDK's PMDs (`libdpdk-dev` / the
//! `dpdk` runtime package) and `/dev/net/tun`. Like libtest's `#[ignore]`d tests, the checks run
//! only with `--include-ignored` (or `--ignored`), as `.ci/run` passes them; otherwise the binary
//! lists them as skipped. Asked to run, a missing prerequisite fails the run, named with what
//! provides it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::ExitCode;

use lace_forwarder::dpdk::{
    lcore_id, Burst, Eal, Error, MacAddr, Mbuf, Mempool, Port, PortConfig, Ring, RxInterrupts,
    DPDK_VERSION, WORKER_PANICKED,
};
use lace_prereq::{dpdk_null_pmd, file, program, root};

/// The vdev the EAL creates at start, looked up with `Port::by_name`.
const EAL_NULL: &str = "net_null_eal0";

/// A named check; a panic (failed assertion) fails it.
type Check = (&'static str, fn(Eal));

/// Set in the child that runs the no-hugepages check in its own mount namespace.
const NO_HUGEPAGES_CHILD: &str = "LACE_DPDK_TEST_NO_HUGEPAGES_CHILD";

/// The checks that run on the EAL, in order (after the two that run before it, and before
/// the cleanup check).
const CHECKS: &[Check] = &[
    ("eal: one init per process, lcores", eal_once),
    (
        "mempool: alloc, bulk alloc, exhaustion, free",
        mempool_alloc_free,
    ),
    ("mempool: bad names and sizes", mempool_errors),
    ("mbuf: prepend/adj/append/trim edges", mbuf_edges),
    (
        "burst: push, pop, drain, move_into, free on drop",
        burst_ownership,
    ),
    (
        "net_null (EAL --vdev): configure, start, tx, rx, stats",
        null_port,
    ),
    ("port: queue handles are exclusive", queue_exclusive),
    (
        "net_ring pair: bytes arrive identical both ways",
        ring_cable,
    ),
    (
        "net_ring: refused tx comes back to the caller",
        ring_tx_refused,
    ),
    (
        "hot-plug net_null: attach, 2 queues with RSS, detach",
        hotplug_null,
    ),
    (
        "hot-plug net_tap: kernel interface appears and goes; its RX interrupt",
        hotplug_tap,
    ),
    (
        "tunnel TSO: only what a device offers; the metadata passes DPDK's check",
        tunnel_tso,
    ),
    ("port errors: not found, bad vdev args, states", port_errors),
    ("lcore launch: result, busy, panic", worker_launch),
    (
        "packet socket: a TCP run leaves as one large segment, arrives cut identical; 1,000 \
         open/close cycles leak no mbuf",
        packet_socket_cycles,
    ),
];

fn main() -> ExitCode {
    if std::env::var_os(NO_HUGEPAGES_CHILD).is_some() {
        return match catch_unwind(no_hugepages_here) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    let asked = std::env::args().any(|a| a == "--include-ignored" || a == "--ignored");
    if !asked {
        println!(
            "skipped: the DPDK checks need root, DPDK's PMDs and /dev/net/tun; run them with \
             `cargo test -p lace-forwarder --test dpdk -- --include-ignored` (.ci/run does)"
        );
        println!("0 passed, 0 failed, {} skipped", CHECKS.len() + 3);
        return ExitCode::SUCCESS;
    }
    let missing = lace_prereq::missing(&[
        root(),
        dpdk_null_pmd(),
        file("/dev/net/tun", "the kernel's tun driver (CONFIG_TUN)"),
        program("ip", "iproute2"),
    ]);
    if !missing.is_empty() {
        println!("FAILED: prerequisites missing: {}", missing.join("; "));
        println!("0 passed, 1 failed");
        return ExitCode::FAILURE;
    }
    let mut passed = 0;
    let mut failed = 0;
    // Before the EAL starts: arguments refused without calling rte_eal_init.
    for (name, check) in [
        (
            "eal: no hugepages -> error naming the fix",
            no_hugepages as fn(),
        ),
        (
            "eal: --in-memory with --no-huge is refused",
            in_memory_no_huge,
        ),
    ] {
        if catch_unwind(check).is_ok() {
            println!("ok: {name}");
            passed += 1;
        } else {
            println!("FAILED: {name}");
            failed += 1;
        }
    }
    let args = eal_args();
    println!("DPDK {DPDK_VERSION}, EAL arguments: {}", args.join(" "));
    let eal = match Eal::init(&args) {
        Ok(eal) => eal,
        Err(e) => {
            eprintln!("FAILED: Eal::init: {e}");
            println!("{passed} passed, {} failed", failed + 1);
            return ExitCode::FAILURE;
        }
    };

    for (name, check) in CHECKS {
        match catch_unwind(AssertUnwindSafe(|| check(eal))) {
            Ok(()) => {
                println!("ok: {name}");
                passed += 1;
            }
            Err(_) => {
                println!("FAILED: {name}");
                failed += 1;
            }
        }
    }
    // Last: everything above must have returned its DPDK objects.
    match catch_unwind(AssertUnwindSafe(|| cleanup(eal))) {
        Ok(()) => {
            println!("ok: eal cleanup (no DPDK object leaked)");
            passed += 1;
        }
        Err(_) => {
            println!("FAILED: eal cleanup");
            failed += 1;
        }
    }
    println!("\n{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The EAL arguments: no hugepages, no PCI scan, two lcores on the first CPU we may run on
/// (lcore 1 only runs the launch check), and one net_null vdev for `Port::by_name`.
fn eal_args() -> Vec<String> {
    let cpu = first_allowed_cpu();
    [
        "--no-huge",
        "-m",
        "256",
        "--no-shconf",
        "--no-pci",
        "--no-telemetry",
        &format!("--lcores=0@{cpu},1@{cpu}"),
        &format!("--vdev={EAL_NULL}"),
        "--log-level=lib.eal:warning",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn first_allowed_cpu() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(|l| {
                    l.trim()
                        .split([',', '-'])
                        .next()
                        .and_then(|c| c.parse().ok())
                })
        })
        .unwrap_or(0)
}

fn pool(eal: Eal, name: &str, n: u32) -> Mempool {
    Mempool::new(&eal, name, n, 0, Mempool::DEFAULT_DATA_ROOM, None)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// An mbuf holding `bytes`.
fn packet(pool: &Mempool, bytes: &[u8]) -> Mbuf {
    let mut m = pool.alloc().expect("pool has room");
    assert!(m.extend_from_slice(bytes), "{} bytes fit", bytes.len());
    m
}

/// A distinct frame of `len` bytes: broadcast Ethernet header, then a pattern seeded by `seed`.
fn frame(len: usize, seed: u8) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, seed]);
    f.extend_from_slice(&[0x88, 0xb5]); // local experimental ethertype
    f.extend((0..len.saturating_sub(14)).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
    f.truncate(len);
    f
}

/// With no free hugepages, asking for them fails before `rte_eal_init`, with the fix. The
/// condition is made, not waited for: a child of this binary runs [`no_hugepages_here`] in its
/// own mount namespace, where `/sys/kernel/mm/hugepages` shows one 2 MiB pool with none free,
/// whatever the machine has reserved.
fn no_hugepages() {
    struct Dir(std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let dir = Dir(std::env::temp_dir().join(format!("lace-no-hugepages-{}", std::process::id())));
    let pool = dir.0.join("hugepages-2048kB");
    std::fs::create_dir_all(&pool).unwrap();
    for (file, value) in [("nr_hugepages", "0\n"), ("free_hugepages", "0\n")] {
        std::fs::write(pool.join(file), value).unwrap();
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind "$1" /sys/kernel/mm/hugepages && exec "$2""#)
        .arg("sh")
        .arg(&dir.0)
        .arg(&exe)
        .env(NO_HUGEPAGES_CHILD, "1")
        .output()
        .expect("unshare (util-linux) runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child: {}\n{stdout}{stderr}",
        out.status
    );
    let msg = stdout.trim();
    assert!(
        msg.contains("--no-huge") && msg.contains("hugepages tool"),
        "{msg}"
    );
    println!("  {msg}");
}

/// The child's half of [`no_hugepages`]: the EAL is refused before it starts, naming the fix.
fn no_hugepages_here() {
    let e = Eal::init(["--in-memory", "--no-pci"]).unwrap_err();
    assert!(matches!(e, Error::NoHugepages { .. }), "{e:?}");
    println!("{e}");
    assert!(Eal::running().is_none());
}

fn in_memory_no_huge() {
    let e = Eal::init(["--no-huge", "--in-memory"]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    println!("  {e}");
    assert!(Eal::running().is_none());
}

fn eal_once(eal: Eal) {
    let again = Eal::init(eal.args());
    assert!(
        matches!(again, Err(Error::EalAlreadyInitialized { .. })),
        "{again:?}"
    );
    println!("  second init: {}", again.unwrap_err());
    assert!(Eal::running().is_some());
    assert_eq!(eal.main_lcore(), 0);
    assert_eq!(lcore_id(), Some(0), "the main thread is lcore 0");
    assert_eq!(eal.worker_lcores(), vec![1]);
    assert_eq!(eal.lcore_count(), 2);
    assert!(eal.tsc_hz() > 0);
    let t0 = lace_forwarder::dpdk::tsc();
    assert!(lace_forwarder::dpdk::tsc() >= t0);
}

fn mempool_alloc_free(eal: Eal) {
    let p = pool(eal, "t_alloc", 255);
    assert_eq!(p.capacity(), 255);
    assert_eq!(p.in_use(), 0);
    let m = p.alloc().expect("one mbuf");
    assert_eq!(p.in_use(), 1);
    assert_eq!(m.len(), 0);
    assert_eq!(m.headroom(), usize::from(Mempool::HEADROOM));
    drop(m);
    assert_eq!(p.in_use(), 0);

    let mut burst: Burst = Burst::new();
    assert!(p.alloc_bulk(&mut burst, 32));
    assert_eq!(burst.len(), 32);
    assert!(!p.alloc_bulk(&mut burst, 1), "a full burst takes no more");
    assert_eq!(p.in_use(), 32);
    assert_eq!(burst.clear(), 32);
    assert_eq!(p.in_use(), 0);

    // Exhaustion: exactly capacity mbufs, then None; all come back.
    let mut held = Vec::new();
    while let Some(m) = p.alloc() {
        held.push(m);
        assert!(held.len() <= 255, "more mbufs than the pool holds");
    }
    assert_eq!(held.len(), 255);
    assert_eq!(p.available(), 0);
    let mut small: Burst<4> = Burst::new();
    assert!(
        !p.alloc_bulk(&mut small, 4),
        "bulk alloc from an empty pool"
    );
    assert!(small.is_empty(), "a failed bulk alloc adds nothing");
    drop(held);
    assert_eq!(p.available(), 255);
}

fn mempool_errors(eal: Eal) {
    let long = "x".repeat(Mempool::MAX_NAME_LEN + 1);
    let e = Mempool::new(&eal, &long, 63, 0, Mempool::DEFAULT_DATA_ROOM, None).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    println!("  {e}");
    let e = Mempool::new(&eal, "t_bad\0", 63, 0, Mempool::DEFAULT_DATA_ROOM, None).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    let e = Mempool::new(&eal, "t_room", 63, 0, 64, None).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    let e = Mempool::new(&eal, "t_cache", 63, 512, Mempool::DEFAULT_DATA_ROOM, None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::MempoolCreate {
                errno: libc::EINVAL,
                ..
            }
        ),
        "{e:?}"
    );
    println!("  {e}");
    let _first = pool(eal, "t_dup", 63);
    let e = Mempool::new(&eal, "t_dup", 63, 0, Mempool::DEFAULT_DATA_ROOM, None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::MempoolCreate {
                errno: libc::EEXIST,
                ..
            }
        ),
        "{e:?}"
    );
    println!("  {e}");
}

fn mbuf_edges(eal: Eal) {
    let p = pool(eal, "t_mbuf", 63);
    let mut m = p.alloc().unwrap();
    let headroom = m.headroom();
    let tailroom = m.tailroom();
    assert_eq!(headroom, 128);
    assert_eq!(tailroom, 2048);
    assert!(m.is_empty());

    // Zero-length operations succeed and change nothing.
    assert_eq!(m.prepend(0).map(|s| s.len()), Some(0));
    assert_eq!(m.append(0).map(|s| s.len()), Some(0));
    assert_eq!(m.adj(0).map(|s| s.len()), Some(0));
    assert_eq!(m.trim(0).map(|s| s.len()), Some(0));

    // Out of room: None, unchanged.
    assert!(m.prepend(headroom + 1).is_none());
    assert!(m.prepend(usize::MAX).is_none());
    assert!(m.append(tailroom + 1).is_none());
    assert!(m.append(1 << 16).is_none());
    assert!(m.adj(1).is_none(), "adj past the data");
    assert!(m.trim(1).is_none(), "trim past the data");
    assert_eq!(
        (m.len(), m.headroom(), m.tailroom()),
        (0, headroom, tailroom)
    );

    // Fill the data, then the headroom exactly.
    m.append(100).unwrap().fill(0xaa);
    let head = m.prepend(headroom).unwrap();
    assert_eq!(head.len(), headroom);
    head.fill(0x55);
    assert_eq!(m.headroom(), 0);
    assert!(m.prepend(1).is_none(), "no headroom left");
    assert_eq!(m.len(), headroom + 100);
    assert_eq!(m.pkt_len(), m.len());
    assert!(m.data()[..headroom].iter().all(|&b| b == 0x55));
    assert!(m.data()[headroom..].iter().all(|&b| b == 0xaa));

    // adj strips the front: the rest is returned.
    let rest = m.adj(headroom).unwrap();
    assert_eq!(rest.len(), 100);
    assert!(rest.iter().all(|&b| b == 0xaa));
    assert!(m.adj(101).is_none());
    assert_eq!(m.len(), 100);

    // Tailroom exactly, then none.
    let room = m.tailroom();
    assert_eq!(m.append(room).unwrap().len(), room);
    assert_eq!(m.tailroom(), 0);
    assert!(!m.extend_from_slice(&[1]), "no tailroom left");
    let len = m.len();
    assert!(m.trim(len + 1).is_none());
    assert_eq!(m.trim(len).unwrap().len(), 0);
    assert!(m.is_empty());

    // Writes through data_mut are what data reads.
    assert!(m.extend_from_slice(b"lace"));
    m.data_mut()[0] = b'L';
    assert_eq!(m.data(), b"Lace");
    assert_eq!(m.segments(), 1);
    assert_eq!(m.rss_hash(), None);
    drop(m);
    assert_eq!(p.in_use(), 0);
}

fn burst_ownership(eal: Eal) {
    let p = pool(eal, "t_burst", 63);
    let mut b: Burst<4> = Burst::new();
    assert_eq!(b.capacity(), 4);
    for i in 0..4u8 {
        assert!(b.push(packet(&p, &[i])).is_ok());
    }
    assert!(b.is_full());
    let extra = b.push(packet(&p, &[9])).unwrap_err();
    assert_eq!(extra.data(), &[9], "a full burst gives the mbuf back");
    drop(extra);
    assert_eq!(
        b.iter().map(|m| m.data()[0]).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    for m in &mut b {
        m.data_mut()[0] += 10;
    }
    assert_eq!(b.pop().unwrap().data(), &[13]);
    assert_eq!(p.in_use(), 3);
    let mut drain = b.drain();
    assert_eq!(drain.len(), 3);
    assert_eq!(drain.next().unwrap().data(), &[10]);
    drop(drain); // frees the two it did not yield
    assert!(b.is_empty());
    assert_eq!(p.in_use(), 0);

    // move_into appends in order and leaves the burst empty, owning nothing.
    let mut out = vec![packet(&p, &[7])];
    for i in 0..3u8 {
        b.push(packet(&p, &[i])).unwrap();
    }
    assert_eq!(b.move_into(&mut out), 3);
    assert!(b.is_empty());
    assert_eq!(
        out.iter().map(|m| m.data()[0]).collect::<Vec<_>>(),
        [7, 0, 1, 2]
    );
    assert_eq!(b.move_into(&mut out), 0);
    assert_eq!(out.len(), 4);
    assert_eq!(p.in_use(), 4);
    drop(out);
    assert_eq!(p.in_use(), 0);

    for i in 0..3u8 {
        b.push(packet(&p, &[i])).unwrap();
    }
    drop(b); // frees what it holds
    assert_eq!(p.in_use(), 0);
}

fn small_config(rx: u16, tx: u16) -> PortConfig {
    PortConfig {
        rx_queues: rx,
        tx_queues: tx,
        rx_descriptors: 128,
        tx_descriptors: 128,
        ..PortConfig::default()
    }
}

fn null_port(eal: Eal) {
    let p = pool(eal, "t_null", 511);
    let mut port = Port::by_name(&eal, EAL_NULL).unwrap_or_else(|e| panic!("{e}"));
    assert!(Port::names(&eal).contains(&EAL_NULL.to_owned()));
    let info = port.info().unwrap();
    assert_eq!(info.driver, "net_null");
    port.configure(&small_config(1, 1), &p).unwrap();
    port.start().unwrap();
    assert!(port.is_started());
    let link = port.link().unwrap();
    println!(
        "  {}: driver {}, mac {}, mtu {}, link {:?}",
        port.name(),
        info.driver,
        port.mac().unwrap(),
        port.mtu().unwrap(),
        link
    );
    assert!(link.up);
    assert_eq!(port.mtu().unwrap(), 1500);
    port.reset_stats().unwrap();

    let mut rxq = port.rx_queue(0).unwrap();
    let mut txq = port.tx_queue(0).unwrap();
    let mut out: Burst = Burst::new();
    for i in 0..32 {
        out.push(packet(&p, &frame(64, i))).unwrap();
    }
    assert_eq!(txq.tx_burst(&mut out), 32, "net_null takes everything");
    assert!(out.is_empty());
    let mut inb: Burst = Burst::new();
    assert_eq!(rxq.rx_burst(&mut inb), 32, "net_null fills the burst");
    assert!(inb.iter().all(|m| m.len() == 64), "net_null's default size");
    assert_eq!(rxq.rx_burst(&mut inb), 0, "a full burst receives nothing");
    drop(inb);

    // net_null and net_ring count packets, not bytes (DPDK 22.11).
    let s = port.stats().unwrap();
    assert_eq!((s.tx_packets, s.rx_packets), (32, 32), "{s:?}");
    assert_eq!(p.in_use(), 0, "every mbuf returned");

    drop((rxq, txq));
    port.stop().unwrap();
    assert!(!port.is_started());
    // Dropping a port found by name only stops it: it can be found again.
    drop(port);
    let port = Port::by_name(&eal, EAL_NULL).unwrap();
    drop(port);
}

fn queue_exclusive(eal: Eal) {
    let p = pool(eal, "t_excl", 511);
    let mut port = Port::by_name(&eal, EAL_NULL).unwrap();
    port.configure(&small_config(1, 1), &p).unwrap();
    let e = port.rx_queue(0).unwrap_err();
    assert!(matches!(e, Error::InvalidState { .. }), "{e:?}");
    println!("  {e}");
    port.start().unwrap();

    let rxq = port.rx_queue(0).unwrap();
    let e = port.rx_queue(0).unwrap_err();
    assert!(matches!(e, Error::QueueUnavailable { .. }), "{e:?}");
    println!("  {e}");
    let e = port.tx_queue(1).unwrap_err();
    assert!(matches!(e, Error::QueueUnavailable { .. }), "{e:?}");
    println!("  {e}");
    assert_eq!(port.queues_in_use(), 1);

    for e in [
        port.stop().unwrap_err(),
        port.configure(&small_config(1, 1), &p).unwrap_err(),
    ] {
        assert!(matches!(e, Error::QueuesInUse { count: 1, .. }), "{e:?}");
    }
    println!("  {}", port.stop().unwrap_err());
    assert!(port.is_started());

    // A queue handle may move to another thread (a worker) and back.
    let rxq = std::thread::spawn(move || rxq).join().unwrap();
    drop(rxq);
    let again = port.rx_queue(0).expect("free again after drop");
    drop(again);
    port.stop().unwrap();
    // Reconfiguring a stopped port with more queues works.
    port.configure(&small_config(2, 2), &p).unwrap();
    port.start().unwrap();
    let q1 = port.tx_queue(1).unwrap();
    drop(q1);
}

fn ring_cable(eal: Eal) {
    let p = pool(eal, "t_cable", 511);
    let ab = Ring::new(&eal, "t_cable_ab", 64, None).unwrap();
    let ba = Ring::new(&eal, "t_cable_ba", 64, None).unwrap();
    let mut a = Port::from_rings(
        &eal,
        "a",
        std::slice::from_ref(&ba),
        std::slice::from_ref(&ab),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut b = Port::from_rings(
        &eal,
        "b",
        std::slice::from_ref(&ab),
        std::slice::from_ref(&ba),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.name(), "net_ring_a");
    assert!(Port::names(&eal).contains(&"net_ring_b".to_owned()));
    for port in [&mut a, &mut b] {
        port.configure(&small_config(1, 1), &p).unwrap();
        port.start().unwrap();
    }

    let lens = [60, 64, 65, 128, 333, 1000, 1500, 1514];
    for (from, to) in [(&a, &b), (&b, &a)] {
        let sent: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(i, &len)| frame(len, i as u8 + from.id() as u8))
            .collect();
        let mut out: Burst = Burst::new();
        for f in &sent {
            out.push(packet(&p, f)).unwrap();
        }
        let mut txq = from.tx_queue(0).unwrap();
        let mut rxq = to.rx_queue(0).unwrap();
        assert_eq!(txq.tx_burst(&mut out), sent.len());
        let mut inb: Burst = Burst::new();
        assert_eq!(rxq.rx_burst(&mut inb), sent.len());
        let got: Vec<&[u8]> = inb.iter().map(Mbuf::data).collect();
        assert_eq!(got, sent, "{} -> {}: bytes differ", from.name(), to.name());
    }
    for port in [&a, &b] {
        let s = port.stats().unwrap();
        assert_eq!(
            (s.tx_packets, s.rx_packets),
            (8, 8),
            "{}: {s:?}",
            port.name()
        );
    }
    assert_eq!(a.rss_hash_functions().unwrap(), 0, "ring ports have no RSS");
    assert_eq!(p.in_use(), 0);
    a.detach().unwrap();
    b.detach().unwrap();
    assert!(!Port::names(&eal).contains(&"net_ring_a".to_owned()));
}

fn ring_tx_refused(eal: Eal) {
    let p = pool(eal, "t_refused", 511);
    let tx = Ring::new(&eal, "t_refused_tx", 16, None).unwrap();
    let rx = Ring::new(&eal, "t_refused_rx", 16, None).unwrap();
    let mut port = Port::from_rings(&eal, "refuse", &[rx], std::slice::from_ref(&tx)).unwrap();
    port.configure(&small_config(1, 1), &p).unwrap();
    port.start().unwrap();
    let mut txq = port.tx_queue(0).unwrap();

    let mut out: Burst = Burst::new();
    for i in 0..32 {
        out.push(packet(&p, &frame(64, i))).unwrap();
    }
    let sent = txq.tx_burst(&mut out);
    assert_eq!(sent, 16, "a 16-slot ring takes 16");
    assert_eq!(out.len(), 16, "the refused 16 come back");
    // The refused are the last 16, in order.
    let firsts: Vec<u8> = out.iter().map(|m| m.data()[11]).collect();
    assert_eq!(firsts, (16..32).collect::<Vec<u8>>());
    assert_eq!(tx.len(), 16);
    assert_eq!(p.in_use(), 32);
    assert_eq!(out.clear(), 16, "the caller frees and counts them");
    assert_eq!(p.in_use(), 16, "the ring holds the sent 16");
    // The ring PMD counts what it took; the refused are the caller's to count.
    let s = port.stats().unwrap();
    assert_eq!(s.tx_packets, 16, "{s:?}");
    assert_eq!(txq.tx_burst(&mut out), 0, "an empty burst sends nothing");

    drop(txq);
    port.detach().unwrap();
    drop(tx); // the last handle: frees the 16 mbufs still in the ring
    assert_eq!(p.in_use(), 0);
}

fn hotplug_null(eal: Eal) {
    let p = pool(eal, "t_hotplug", 1023);
    let mut port =
        Port::attach_vdev(&eal, "net_null_hp0,size=128").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(port.name(), "net_null_hp0");
    assert!(Port::names(&eal).contains(&"net_null_hp0".to_owned()));
    let info = port.info().unwrap();
    let config = PortConfig {
        rx_interrupts: true,
        ..small_config(2, 2)
    };
    port.configure(&config, &p).unwrap();
    port.start().unwrap();
    let rss = port.rss_hash_functions().unwrap();
    assert_eq!(
        rss,
        PortConfig::RSS_IP_TCP_UDP & info.rss_hash_functions,
        "RSS on with 2 RX queues"
    );
    assert_ne!(rss, 0);

    let mut rx = [port.rx_queue(0).unwrap(), port.rx_queue(1).unwrap()];
    // net_null has no RX interrupts: asked for them, its queues must be polled.
    let set = RxInterrupts::new().unwrap();
    assert!(
        !rx[0].watch_interrupts(&set),
        "net_null has no RX interrupts"
    );
    assert!(!rx[0].wakes() && !rx[0].arm());
    let mut tx = port.tx_queue(1).unwrap();
    let mut b: Burst = Burst::new();
    for q in &mut rx {
        assert_eq!(q.rx_burst(&mut b), 32);
        assert!(b.iter().all(|m| m.len() == 128), "size=128 applies");
        assert_eq!(tx.tx_burst(&mut b), 32);
    }
    let s = port.stats().unwrap();
    assert_eq!((s.rx_packets, s.tx_packets), (64, 64), "{s:?}");

    // Detach is refused while a worker could still poll the port.
    let e = port.detach().unwrap_err();
    assert!(matches!(e, Error::QueuesInUse { count: 3, .. }), "{e:?}");
    println!("  {e}");
    // ...and happens when the last queue handle goes.
    assert!(Port::names(&eal).contains(&"net_null_hp0".to_owned()));
    drop((rx, tx));
    assert!(!Port::names(&eal).contains(&"net_null_hp0".to_owned()));

    // The name is free again; detach reports success.
    let port = Port::attach_vdev(&eal, "net_null_hp0").unwrap();
    port.detach().unwrap();
    let e = Port::by_name(&eal, "net_null_hp0").unwrap_err();
    assert!(matches!(e, Error::PortNotFound { .. }), "{e:?}");
    assert_eq!(p.in_use(), 0);
}

fn hotplug_tap(eal: Eal) {
    let iface = "lacetap0";
    let sys = Path::new("/sys/class/net").join(iface);
    let p = pool(eal, "t_tap", 1023);
    let mut port = Port::attach_vdev(&eal, &format!("net_tap_lace0,iface={iface}"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(sys.exists(), "{} appears", sys.display());
    let info = port.info().unwrap();
    assert_eq!(info.driver, "net_tap");
    assert!(info.if_index.is_some());
    let config = PortConfig {
        rx_interrupts: true,
        ..small_config(1, 1)
    };
    port.configure(&config, &p).unwrap();
    port.start().unwrap();

    // Its RX interrupt (the queue's descriptor) makes the set readable for a frame the kernel
    // sends while the queue is armed; draining the set consumes the wake-up, not the frame.
    let set = RxInterrupts::new().unwrap();
    let mut rxq = port.rx_queue(0).unwrap();
    assert!(rxq.watch_interrupts(&set), "net_tap has RX interrupts");
    assert!(rxq.arm());
    assert_eq!(set.drain(), 0, "nothing arrived yet");
    let ip = |args: &str| {
        let out = std::process::Command::new("ip")
            .args(args.split_whitespace())
            .output()
            .expect("run ip");
        assert!(out.status.success(), "ip {args}: {out:?}");
    };
    ip(&format!("addr add 198.19.78.1/24 dev {iface}"));
    let sock = std::net::UdpSocket::bind("198.19.78.1:0").unwrap();
    sock.set_broadcast(true).unwrap();
    sock.send_to(b"interrupt", "198.19.78.255:9").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut interrupts = 0;
    while interrupts == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
        interrupts = set.drain();
    }
    assert!(interrupts >= 1, "the frame raised the queue's interrupt");
    rxq.disarm();
    // Other frames the kernel sends on the tap (router solicitations, MLD) are dropped as
    // they come, so they cannot fill the burst before the test's own frame.
    let mut got: Burst<32> = Burst::new();
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the frame is received"
        );
        rxq.rx_burst(&mut got);
        if got.iter().any(|m| m.data().ends_with(b"interrupt")) {
            break;
        }
        got.clear();
    }
    drop((got, rxq));
    let mac = port.mac().unwrap();
    let kernel_mac = std::fs::read_to_string(sys.join("address")).unwrap();
    println!(
        "  {iface}: mac {mac} (kernel: {}), if_index {:?}",
        kernel_mac.trim(),
        info.if_index
    );

    // A frame sent on the port is received by the kernel interface.
    let rx_file = sys.join("statistics/rx_packets");
    let before: u64 = std::fs::read_to_string(&rx_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut txq = port.tx_queue(0).unwrap();
    let mut out: Burst<1> = Burst::new();
    out.push(packet(&p, &frame(60, 7))).unwrap();
    assert_eq!(txq.tx_burst(&mut out), 1);
    let after: u64 = std::fs::read_to_string(&rx_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(after, before + 1, "the kernel received the frame");
    drop(txq);

    // Control settings reach the kernel interface.
    let new_mac = MacAddr([0x02, 0x1a, 0xce, 0, 0, 1]);
    port.set_mac(new_mac).unwrap();
    assert_eq!(port.mac().unwrap(), new_mac);
    let kernel_mac = std::fs::read_to_string(sys.join("address")).unwrap();
    assert_eq!(kernel_mac.trim(), new_mac.to_string());
    port.set_mtu(1400).unwrap();
    assert_eq!(port.mtu().unwrap(), 1400);
    assert_eq!(
        std::fs::read_to_string(sys.join("mtu")).unwrap().trim(),
        "1400"
    );
    port.set_promiscuous(true).unwrap();
    assert!(port.promiscuous());
    let flags = std::fs::read_to_string(sys.join("flags")).unwrap();
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap();
    assert_ne!(flags & 0x100, 0, "IFF_PROMISC set on {iface}");

    port.detach().unwrap();
    assert!(!sys.exists(), "{} goes with the port", sys.display());
    assert_eq!(p.in_use(), 0);
}

fn port_errors(eal: Eal) {
    let e = Port::by_name(&eal, "no_such_port").unwrap_err();
    assert!(matches!(e, Error::PortNotFound { .. }), "{e:?}");
    println!("  {e}");

    let e = Port::attach_vdev(&eal, "net_null_bad0,bogus=1").unwrap_err();
    assert!(matches!(e, Error::VdevProbe { .. }), "{e:?}");
    println!("  {e}");
    let e = Port::attach_vdev(&eal, "net_nosuchdriver0").unwrap_err();
    assert!(matches!(e, Error::VdevProbe { .. }), "{e:?}");
    println!("  {e}");
    let e = Port::attach_vdev(&eal, ",size=64").unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    println!("  {e}");

    let owner = Port::by_name(&eal, EAL_NULL).unwrap();
    let e = Port::by_name(&eal, EAL_NULL).unwrap_err();
    assert!(matches!(e, Error::PortInUse { .. }), "{e:?}");
    println!("  {e}");
    drop(owner);

    let p = pool(eal, "t_states", 255);
    let mut port = Port::attach_vdev(&eal, "net_null_states0").unwrap();
    let e = port.start().unwrap_err();
    assert!(matches!(e, Error::InvalidState { .. }), "{e:?}");
    println!("  {e}");
    let max = port.info().unwrap().max_rx_queues;
    let e = port.configure(&small_config(max + 1, 1), &p).unwrap_err();
    assert!(matches!(e, Error::TooManyQueues { .. }), "{e:?}");
    println!("  {e}");
    let e = port.configure(&small_config(1, 0), &p).unwrap_err();
    assert!(matches!(e, Error::TooManyQueues { .. }), "{e:?}");
    port.configure(&small_config(1, 1), &p).unwrap();
    port.start().unwrap();
    let e = port.configure(&small_config(1, 1), &p).unwrap_err();
    assert!(matches!(e, Error::InvalidState { .. }), "{e:?}");
    println!("  {e}");
    port.detach().unwrap();

    let ring = Ring::new(&eal, "t_err_ring", 8, None).unwrap();
    let e = Ring::new(&eal, "t_err_ring", 8, None).unwrap_err();
    assert!(matches!(e, Error::RingCreate { .. }), "{e:?}");
    println!("  {e}");
    let e = Port::from_rings(&eal, "empty", &[], std::slice::from_ref(&ring)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
}

fn worker_launch(eal: Eal) {
    let worker = eal
        .launch(1, || lcore_id().map_or(-1, |id| id as i32))
        .unwrap();
    assert_eq!(worker.lcore(), 1);
    assert_eq!(worker.join(), 1, "the job ran on lcore 1");

    let e = eal.launch(0, || 0).unwrap_err();
    assert!(matches!(e, Error::Launch { .. }), "{e:?}");
    println!("  {e}");

    // Busy: a second launch before the first is joined.
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let worker = eal
        .launch(1, move || {
            let _ = wait.recv();
            7
        })
        .unwrap();
    let e = eal.launch(1, || 0).unwrap_err();
    assert!(matches!(e, Error::Launch { .. }), "{e:?}");
    println!("  {e}");
    go.send(()).unwrap();
    assert_eq!(worker.join(), 7);

    // A panicking job is reported, not propagated.
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let worker = eal.launch(1, || panic!("worker job panics")).unwrap();
    let ret = worker.join();
    std::panic::set_hook(prev);
    assert_eq!(ret, WORKER_PANICKED);

    // Another thread is not the main lcore.
    let e = std::thread::spawn(move || eal.launch(1, || 0).map(|w| w.lcore()))
        .join()
        .unwrap()
        .unwrap_err();
    assert!(matches!(e, Error::Launch { .. }), "{e:?}");
}

fn cleanup(eal: Eal) {
    let p = pool(eal, "t_cleanup", 63);
    let m = p.alloc().unwrap();
    drop(p);
    // The pool outlives its last handle while an mbuf is out, and holds cleanup back.
    let e = eal.cleanup().unwrap_err();
    assert!(matches!(e, Error::ObjectsAlive { live: 1 }), "{e:?}");
    println!("  {e}");
    drop(m);
    eal.cleanup().unwrap_or_else(|e| panic!("{e}"));
    assert!(Eal::running().is_none());
    let e = Eal::init(["--no-huge", "--no-shconf"]).unwrap_err();
    assert!(matches!(e, Error::EalCleanedUp), "{e:?}");
}

/// A veth pair in this namespace (IPv6 off, offloads on), removed on drop.
struct VethPair(String, String);

impl VethPair {
    fn new() -> VethPair {
        let (a, b) = (
            format!("lpsa{}", std::process::id() % 100_000),
            format!("lpsb{}", std::process::id() % 100_000),
        );
        let sh = |args: &[&str]| {
            let st = std::process::Command::new(args[0])
                .args(&args[1..])
                .status()
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert!(st.success(), "{args:?}: {st}");
        };
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &a])
            .stderr(std::process::Stdio::null())
            .status();
        sh(&["ip", "link", "add", &a, "type", "veth", "peer", "name", &b]);
        let pair = VethPair(a, b);
        for i in [&pair.0, &pair.1] {
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{i}/disable_ipv6"), "1");
            sh(&[
                "ethtool", "-K", i, "tx", "on", "tso", "on", "gso", "on", "gro", "off",
            ]);
            sh(&["ip", "link", "set", i, "up"]);
        }
        pair
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.0])
            .status();
    }
}

/// Segment `i` of a TCP/IPv4 flow: 1,000 payload bytes, consecutive sequence numbers and
/// identifications, PSH on the last of `n`, checksums correct.
fn tcp_segment(p: &Mempool, i: u32, n: u32) -> Mbuf {
    use lace_forwarder::wire::checksum;
    let payload: Vec<u8> = (0..1000u32).map(|k| (k * 31 + i * 7) as u8).collect();
    let mut f = vec![0u8; 14 + 20 + 20];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xb]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xa]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((20 + 20 + payload.len()) as u16).to_be_bytes());
    f[18..20].copy_from_slice(&(100 + i as u16).to_be_bytes());
    f[20] = 0x40;
    f[22] = 64;
    f[23] = 6;
    f[26..30].copy_from_slice(&[10, 9, 0, 1]);
    f[30..34].copy_from_slice(&[10, 9, 0, 2]);
    let ip_sum = checksum::finish(checksum::data(&f[14..34]));
    f[24..26].copy_from_slice(&ip_sum.to_be_bytes());
    f[34..36].copy_from_slice(&40000u16.to_be_bytes());
    f[36..38].copy_from_slice(&5201u16.to_be_bytes());
    f[38..42].copy_from_slice(&(7 + i * 1000).to_be_bytes());
    f[42..46].copy_from_slice(&1u32.to_be_bytes());
    f[46] = 5 << 4;
    f[47] = if i + 1 == n { 0x18 } else { 0x10 };
    f[48..50].copy_from_slice(&1024u16.to_be_bytes());
    f.extend_from_slice(&payload);
    let pseudo = checksum::pseudo_header_v4(
        &[10, 9, 0, 1].into(),
        &[10, 9, 0, 2].into(),
        6.into(),
        (20 + payload.len()) as u16,
    );
    let sum = checksum::finish(checksum::combine(&[pseudo, checksum::data(&f[34..])]));
    f[50..52].copy_from_slice(&sum.to_be_bytes());
    packet(p, &f)
}

/// `inner` (an Ethernet frame) behind an outer IPv6 header as lace encapsulates it: its
/// packet for an l3 network (next header 4 or 41), the whole frame for an l2 one (143).
fn encapsulated(inner: &[u8], next: u8) -> Vec<u8> {
    let carried = if next == 143 { inner } else { &inner[14..] };
    let mut f = inner[..12].to_vec();
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    let mut outer = [0u8; 40];
    outer[0] = 0x60;
    outer[4..6].copy_from_slice(&(carried.len() as u16).to_be_bytes());
    outer[6] = next;
    outer[7] = 64;
    outer[8..24].copy_from_slice(&[0xfc, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    outer[24..40].copy_from_slice(&[0xfc, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&outer);
    f.extend_from_slice(carried);
    f
}

fn tunnel_tso(eal: Eal) {
    use lace_forwarder::dpdk::TunnelTso;
    use lace_forwarder::offload::{Gso, GsoProto};
    let p = pool(eal, "t_tso", 511);
    let mut port = Port::by_name(&eal, EAL_NULL).unwrap();
    let info = port.info().unwrap();
    // No device here cuts tunnels (net_tap's TSO is plain TCP): the uplink cuts in software.
    assert_eq!(TunnelTso::of(info.tx_offloads), None, "{info:?}");
    let all = TunnelTso {
        ipip: true,
        generic: true,
    };
    let e = port
        .configure(
            &PortConfig {
                tx_offloads: all.offloads(),
                ..small_config(1, 1)
            },
            &p,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not offer"), "{e}");
    port.configure(&small_config(1, 1), &p).unwrap();
    port.start().unwrap();
    let mut txq = port.tx_queue(0).unwrap();

    // An l3 network's IPv4 and IPv6 segments, an l2 network's bridged frame: what each kind of
    // tunnel TSO takes, with metadata DPDK's check accepts, the segment left as it was.
    let v4 = tcp_segment(&p, 0, 1).data().to_vec();
    let mut v6 = v4[..12].to_vec();
    v6.extend_from_slice(&0x86ddu16.to_be_bytes());
    let mut ip6 = [0u8; 40];
    ip6[0] = 0x60;
    ip6[4..6].copy_from_slice(&((v4.len() - 34) as u16).to_be_bytes());
    ip6[6] = 6;
    ip6[7] = 64;
    v6.extend_from_slice(&ip6);
    v6.extend_from_slice(&v4[34..]);
    let gso = Gso {
        proto: GsoProto::Tcp,
        size: 400,
        estimated: false,
    };
    let only_ipip = TunnelTso {
        ipip: true,
        generic: false,
    };
    for (inner, next) in [(&v4, 4), (&v6, 41), (&v4, 143), (&v6, 143)] {
        let f = encapsulated(inner, next);
        let h = gso.tso_headers(&f).unwrap();
        for tso in [only_ipip, all] {
            let mut m = packet(&p, &f);
            m.set_gso(Some(gso));
            let takes = next != 143 || tso.generic;
            assert_eq!(m.set_tunnel_tso(&h, tso), takes, "{next} {tso:?}");
            if takes {
                assert!(txq.prepare(&mut m), "DPDK's check, behind {next}");
            }
            assert_eq!(m.gso(), Some(gso));
            assert_eq!(m.data(), &f[..], "headers the driver did not touch");
        }
    }
    drop(txq);
    port.stop().unwrap();
    assert_eq!(p.in_use(), 0, "every mbuf returned");
}

fn packet_socket_cycles(eal: Eal) {
    use lace_forwarder::kernel::{PacketSocket, RxQueue, TxQueue};
    let p = pool(eal, "t_psock", 8191);
    let pair = VethPair::new();
    const RUN: u32 = 8;
    let expected: Vec<Vec<u8>> = (0..RUN)
        .map(|i| tcp_segment(&p, i, RUN).data().to_vec())
        .collect();
    let baseline = p.in_use();
    let mut large_runs = 0;
    for cycle in 0..1000 {
        let a = PacketSocket::open(&pair.0, true, None).expect("socket on a");
        let b = PacketSocket::open(&pair.1, true, None).expect("socket on b");
        let mut tx = TxQueue::new(a, true);
        let mut rx = RxQueue::new(b, p.clone());
        let mut burst: Burst<32> = Burst::new();
        for i in 0..RUN {
            assert!(burst.push(tcp_segment(&p, i, RUN)).is_ok());
        }
        let (sent, counts) = tx.tx_burst(&mut burst);
        assert_eq!(sent, RUN as usize, "cycle {cycle}: every segment taken");
        large_runs += counts.large;
        let mut got: Vec<Mbuf> = Vec::with_capacity(256);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while got.len() < RUN as usize && std::time::Instant::now() < deadline {
            rx.rx_burst(&mut got, 256);
            got.retain(|m| m.data().get(12..14) == Some(&[0x08, 0x00]));
        }
        let got: Vec<Vec<u8>> = got.iter().map(|m| m.data().to_vec()).collect();
        assert_eq!(got.len(), RUN as usize, "cycle {cycle}: segments received");
        if cycle == 0 || got != expected {
            assert_eq!(got, expected, "cycle {cycle}: the segments arrive as sent");
        }
    }
    assert!(
        large_runs >= 1000,
        "the runs left as large segments ({large_runs})"
    );
    assert_eq!(
        p.in_use(),
        baseline,
        "mbufs out of the pool after 1,000 open/close cycles (held by nothing)"
    );
}
