//! Writer and readers in separate processes, as control and the forwarder run.
//!
//! The test binary re-executes itself with `LACE_ROLE` set to play the child's part, so every
//! scenario uses real processes, real shared mappings and real signals.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lace_shared::tables::{TableReader, TableWriter, TablesConfig};
use lace_shared::types::*;
use lace_shared::Error;

const NET: NetworkId = NetworkId(7);

/// A unique directory under /dev/shm, removed on drop (also when a test fails).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = PathBuf::from(format!(
            "/dev/shm/lace-test-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn cfg(&self) -> TablesConfig {
        TablesConfig {
            dir: self.0.clone(),
            name: "node".into(),
            size: 256 << 20,
            reader_slots: 8,
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed on drop (no orphan survives a failing test).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(role: &str, test: &str, dir: &PathBuf) -> ChildGuard {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("LACE_ROLE", role)
        .env("LACE_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    ChildGuard(child)
}

fn role() -> Option<(String, TablesConfig)> {
    let role = std::env::var("LACE_ROLE").ok()?;
    let dir = PathBuf::from(std::env::var("LACE_DIR").unwrap());
    Some((
        role,
        TablesConfig {
            dir,
            name: "node".into(),
            size: 256 << 20,
            reader_slots: 8,
        },
    ))
}

fn mac_of(g: u64) -> MacAddr {
    let b = g.to_be_bytes();
    MacAddr([0x02, b[3], b[4], b[5], b[6], b[7]])
}

fn ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 | (i << 8))
}

fn net_info() -> NetworkInfo {
    NetworkInfo {
        kind: NetworkKind::L3,
        anonymous: false,
        gateway_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        gateway4: Some(Ipv4Addr::new(10, 0, 0, 1)),
        gateway6: None,
        mtu: 1450,
        stateful: false,
        l2: L2Settings::default(),
    }
}

/// One batch of generation `g`: four tables changed together, so a torn read shows up as
/// disagreement between them. Also adds one route per generation so content grows.
fn write_generation(w: &mut TableWriter, g: u64) {
    let port = PortId(1 + (g % 1000) as u32);
    w.set_port(
        PortId(1),
        &PortInfo {
            kind: PortKind::Pod,
            network: NET,
            mac: mac_of(g),
            ipv4: Some(Ipv4Addr::new(10, 0, 0, 2)),
            ipv6: None,
            endpoint: g,
            iface: Default::default(),
            policy: lace_shared::policy::PolicySetId::NONE,
            transit: false,
        },
    )
    .unwrap();
    w.add_route(
        NET,
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)),
        24,
        NextHop::Local {
            port,
            mac: mac_of(g),
        },
    )
    .unwrap();
    w.set_neighbor(
        NET,
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        mac_of(g),
        false,
    )
    .unwrap();
    w.set_fdb(
        NET,
        MacAddr([2, 0, 0, 0, 0, 2]),
        FdbEntry {
            target: FdbTarget::Port(port),
            seq: g as u32,
            learned: false,
        },
    )
    .unwrap();
    w.add_route(
        NET,
        IpAddr::V4(ip(g as u32)),
        24,
        NextHop::Remote {
            node: NodeId(g as u32),
            sid: Sid("fc00::1".parse().unwrap()),
        },
    )
    .unwrap();
}

/// Reads generation `g`'s batch from a snapshot; panics on a torn view. Returns g.
fn check_snapshot(s: &lace_shared::tables::Snapshot<'_>) -> Option<u64> {
    let p = s.port(PortId(1))?;
    let g = p.endpoint;
    let n = s.network(NET).expect("network present once port is");
    let nh = s
        .nexthop(n.route4_index(Ipv4Addr::new(10, 0, 0, 9)))
        .expect("route present");
    let want_port = PortId(1 + (g % 1000) as u32);
    assert_eq!(
        nh,
        NextHop::Local {
            port: want_port,
            mac: mac_of(g)
        },
        "torn read: route from another generation than the port (g={g})"
    );
    assert_eq!(
        n.neighbor(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
        Some(mac_of(g)),
        "torn read: neighbor"
    );
    let f = n.fdb_rec(MacAddr([2, 0, 0, 0, 0, 2])).expect("fdb present");
    assert_eq!(f.hop(), Some(L2Hop::Port(want_port)), "torn read: fdb");
    assert_eq!(f.seq, g as u32);
    // Every route of every generation up to g is there.
    for i in [1, g / 2, g].into_iter().filter(|&i| i >= 1) {
        let nh = s.nexthop(n.route4_index(ip(i as u32)));
        assert!(
            matches!(nh, Some(NextHop::Remote { node, .. }) if node == NodeId(i as u32)),
            "route of generation {i} missing at generation {g}"
        );
    }
    Some(g)
}

/// Child: reader that checks every snapshot and reports the generations it saw.
fn reader_child(cfg: &TablesConfig, paced: bool) {
    let r = TableReader::attach(cfg).unwrap();
    let mut h = r.register().unwrap();
    let mut out = std::io::stdout();
    // The harness has printed "test <name> ... " without a newline: end that line first.
    writeln!(out, "\nready").unwrap();
    out.flush().unwrap();
    let mut last = 0;
    loop {
        let g = {
            let s = h.snapshot();
            check_snapshot(&s)
        };
        if let Some(g) = g {
            assert!(g >= last, "generation went backwards: {last} -> {g}");
            if g != last {
                writeln!(out, "saw {g}").unwrap();
                out.flush().unwrap();
                last = g;
            }
            if g == u64::MAX {
                break;
            }
        }
        if paced || g.is_some() {
            h.quiescent();
        }
    }
}

#[test]
fn reader_sees_every_batch_whole_and_in_order() {
    if let Some((role, cfg)) = role() {
        if role == "reader" {
            reader_child(&cfg, true);
        }
        return;
    }
    let dir = TempDir::new("stream");
    let mut w = TableWriter::create(&dir.cfg()).unwrap();
    w.set_network(NET, &net_info()).unwrap();
    w.publish().unwrap();
    let mut child = spawn(
        "reader",
        "reader_sees_every_batch_whole_and_in_order",
        &dir.0,
    );
    let mut lines = tagged(&mut child);
    assert_eq!(lines.next().unwrap(), "ready");
    const N: u64 = 300;
    for g in 1..=N {
        write_generation(&mut w, g);
        w.publish().unwrap();
        // Pace on the reader: it must report generation g before the next batch, so it
        // observes every change (and reports each exactly once, in order).
        let line = lines.next().expect("reader alive");
        assert_eq!(line, format!("saw {g}"));
    }
    // Memory replaced by the stream was reclaimed while the reader kept reading.
    w.reclaim().unwrap();
    let st = w.stats();
    assert!(
        st.retired_bytes < 64 << 10,
        "retired memory not reclaimed: {st:?}"
    );
}

#[test]
fn unpaced_stream_never_tears() {
    if let Some((role, cfg)) = role() {
        if role == "reader" {
            reader_child(&cfg, false);
        }
        return;
    }
    let dir = TempDir::new("unpaced");
    let mut w = TableWriter::create(&dir.cfg()).unwrap();
    w.set_network(NET, &net_info()).unwrap();
    w.publish().unwrap();
    let mut child = spawn("reader", "unpaced_stream_never_tears", &dir.0);
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(g) = line.strip_prefix("saw ") {
                let _ = tx.send(g.parse::<u64>().unwrap());
            }
        }
    });
    const N: u64 = 2000;
    for g in 1..=N {
        write_generation(&mut w, g);
        w.publish().unwrap();
    }
    // The reader reports generations as it meets them (skipping some: it is not paced) and
    // must end on the last one. A torn or invalid entry makes it panic and exit instead.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    let mut last = 0;
    while last < N {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(g) => {
                seen += 1;
                last = g;
            }
            Err(_) => break,
        }
    }
    assert_eq!(last, N, "reader must reach the last published batch");
    assert!(seen > 1, "reader observed the stream");
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "reader died: it found a torn or invalid entry (see its panic above)"
    );
}

/// The child's protocol lines (the test harness in the child prints its own lines too).
fn tagged(child: &mut ChildGuard) -> impl Iterator<Item = String> {
    BufReader::new(child.0.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter(|l| l == "ready" || l.starts_with("saw ") || l.starts_with("published "))
}

fn drain(child: &mut ChildGuard) {
    let out = child.0.stdout.take().unwrap();
    std::thread::spawn(move || for _ in BufReader::new(out).lines().map_while(Result::ok) {});
}

/// Child: writer that publishes forever and reports each generation after publish returns.
fn writer_child(cfg: &TablesConfig) {
    let mut w = TableWriter::open(cfg).unwrap();
    let mut g = w.staged_view().port(PortId(1)).map_or(0, |p| p.endpoint);
    let mut out = std::io::stdout();
    writeln!(out).unwrap();
    loop {
        g += 1;
        write_generation(&mut w, g);
        w.publish().unwrap();
        writeln!(out, "published {g}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn killed_writer_and_reader_leave_regions_that_reattach_with_nothing_lost() {
    if let Some((role, cfg)) = role() {
        match role.as_str() {
            "writer" => writer_child(&cfg),
            "reader" => reader_child(&cfg, false),
            _ => {}
        }
        return;
    }
    let dir = TempDir::new("kill");
    {
        let mut w = TableWriter::create(&dir.cfg()).unwrap();
        w.set_network(NET, &net_info()).unwrap();
        w.publish().unwrap();
    }
    let test = "killed_writer_and_reader_leave_regions_that_reattach_with_nothing_lost";
    let mut last_published = 0u64;
    for round in 0..3 {
        let mut reader = spawn("reader", test, &dir.0);
        drain(&mut reader);
        let mut writer = spawn("writer", test, &dir.0);
        let mut lines = tagged(&mut writer);
        // Let it publish a varying amount, then kill both without warning: the writer is in
        // the middle of staging or publishing, the reader in the middle of a lookup.
        let target = last_published + 50 + 37 * round;
        for line in lines.by_ref() {
            let g: u64 = line.strip_prefix("published ").unwrap().parse().unwrap();
            last_published = g;
            if g >= target {
                break;
            }
        }
        writer.0.kill().unwrap();
        writer.0.wait().unwrap();
        // Lines still in the pipe were reported before the kill landed.
        for line in lines {
            last_published = line.strip_prefix("published ").unwrap().parse().unwrap();
        }
        reader.0.kill().unwrap();
        reader.0.wait().unwrap();
        // Re-attach: every reported publication is there, the batch in flight is either whole
        // or absent.
        let r = TableReader::attach(&dir.cfg()).unwrap();
        let mut h = r.register().unwrap();
        let g = check_snapshot(&h.snapshot()).unwrap();
        assert!(
            g == last_published || g == last_published + 1,
            "published {last_published}, found {g} after re-attach"
        );
        drop(h);
        // The writer re-attaches, reclaims what the dead reader held, and continues.
        let mut w = TableWriter::open(&dir.cfg()).unwrap();
        assert_eq!(w.staged_view().port(PortId(1)).unwrap().endpoint, g);
        write_generation(&mut w, g + 1);
        w.publish().unwrap();
        w.reclaim().unwrap();
        let st = w.stats();
        assert_eq!(
            st.retired_bytes, 0,
            "a dead reader blocked reclamation: {st:?}"
        );
        last_published = g + 1;
    }
    assert!(last_published > 200);
}

#[test]
fn reader_mapping_is_read_only() {
    if let Some((role, cfg)) = role() {
        if role == "scribbler" {
            let r = TableReader::attach(&cfg).unwrap();
            println!("attached");
            // A safe store through the reader's read-only mapping: the kernel must refuse it.
            r.region()
                .header()
                .epoch
                .store(12345, std::sync::atomic::Ordering::SeqCst);
            println!("wrote");
        }
        return;
    }
    let dir = TempDir::new("ro");
    let w = TableWriter::create(&dir.cfg()).unwrap();
    let before = w.generation();
    let child = spawn("scribbler", "reader_mapping_is_read_only", &dir.0);
    let out = child_output(child);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.0.signal(),
        Some(libc_sigsegv()),
        "writing through a reader's mapping must fault, got {:?}; stdout: {}",
        out.0,
        out.1
    );
    assert!(out.1.contains("attached") && !out.1.contains("wrote"));
    assert_eq!(w.generation(), before);
}

fn libc_sigsegv() -> i32 {
    11
}

fn child_output(mut c: ChildGuard) -> (std::process::ExitStatus, String) {
    let mut s = String::new();
    use std::io::Read;
    c.0.stdout.take().unwrap().read_to_string(&mut s).unwrap();
    (c.0.wait().unwrap(), s)
}

#[test]
fn wrong_abi_or_magic_is_refused_with_a_clear_message() {
    if role().is_some() {
        return;
    }
    let dir = TempDir::new("abi");
    let cfg = dir.cfg();
    drop(TableWriter::create(&cfg).unwrap());
    let path = cfg.tables_path();
    let patch = |off: u64, bytes: &[u8]| {
        use std::io::{Seek, SeekFrom};
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(SeekFrom::Start(off)).unwrap();
        f.write_all(bytes).unwrap();
    };
    // ABI version lives right after the 8-byte magic.
    patch(8, &99u32.to_ne_bytes());
    let err = TableReader::attach(&cfg).unwrap_err();
    assert!(
        matches!(err, Error::AbiMismatch { found_abi: 99, .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("ABI version 99") && msg.contains("same release"),
        "{msg}"
    );
    assert!(matches!(
        TableWriter::open(&cfg).unwrap_err(),
        Error::AbiMismatch { .. }
    ));
    patch(0, b"NOTLACE!");
    let err = TableReader::attach(&cfg).unwrap_err();
    assert!(matches!(err, Error::BadMagic { .. }), "{err}");
    assert!(err.to_string().contains("is not a lace region"));
    // A missing region names the file.
    std::fs::remove_file(&path).unwrap();
    let err = TableReader::attach(&cfg).unwrap_err();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn second_writer_is_refused() {
    if role().is_some() {
        return;
    }
    let dir = TempDir::new("excl");
    let _w = TableWriter::create(&dir.cfg()).unwrap();
    let err = TableWriter::open(&dir.cfg()).unwrap_err();
    assert!(matches!(err, Error::WriterBusy { .. }), "{err}");
}
