//! `lace-hugepages` on this machine's kernel: reserve 2M pages, see them in `check --json`,
//! mount hugetlbfs, release. Needs root: `#[ignore]`d, run with `--include-ignored` (as `.ci/run`
//! does); without root it then fails saying so.
//!
//! Other tests may reserve huge pages at the same time: this one raises only by what it needs
//! over what is available when it starts, gives back only what it was granted, touches only
//! its own mount, and restores the `nr_hugepages` it read at the start even when it fails.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lace_hugepages::{PageSize, Roots};
use lace_prereq::{require, root};

const NR: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";

fn read_nr() -> u64 {
    fs::read_to_string(NR)
        .unwrap_or_else(|e| panic!("read {NR}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// The hugetlbfs `/proc/mounts` lines at `dir`.
fn mounts_at(dir: &Path) -> Vec<String> {
    let dir = dir.to_str().unwrap();
    fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some(dir))
        .map(str::to_owned)
        .collect()
}

/// Unmounts the test's mount and restores `nr_hugepages` when dropped, pass or fail.
struct Restore {
    nr_before: u64,
    mount: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if !mounts_at(&self.mount).is_empty() {
            use nix::mount::{umount2, MntFlags};
            if let Err(e) = umount2(&self.mount, MntFlags::empty()) {
                eprintln!("unmount {}: {e}; detaching", self.mount.display());
                let _ = umount2(&self.mount, MntFlags::MNT_DETACH);
            }
        }
        if read_nr() != self.nr_before {
            if let Err(e) = fs::write(NR, format!("{}\n", self.nr_before)) {
                eprintln!("restore {NR} to {}: {e}", self.nr_before);
            }
        }
    }
}

fn lace_hugepages(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lace-hugepages"))
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The number before `marker` in `s` (`"... 12 MiB available"` → 12).
fn number_before(s: &str, marker: &str) -> u64 {
    let head = &s[..s
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} in {s}"))];
    head.trim_end()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("number before {marker:?} in {s}"))
}

#[test]
#[ignore = "needs root (reserves huge pages, mounts hugetlbfs); run with --include-ignored"]
fn reserve_check_mount_release_on_the_live_kernel() {
    require(&[root()]);
    assert!(
        Path::new(NR).exists(),
        "{NR} missing: this kernel has no 2M huge pages"
    );
    let tmp = tempfile::tempdir().unwrap();
    let guard = Restore {
        nr_before: read_nr(),
        mount: fs::canonicalize(tmp.path()).unwrap().join("huge"),
        _tmp: tmp,
    };
    let dir = guard.mount.to_str().unwrap().to_owned();

    // Ask for 8 pages (16 MiB) more than are available now.
    let st = lace_hugepages::status(&Roots::default()).unwrap();
    let want = st.size(PageSize::SIZE_2M).unwrap().available_mib + 16;
    let want_s = want.to_string();
    let out = lace_hugepages(&["reserve", "--mb", &want_s, "--size", "2M", "--mount", &dir]);
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("2M pages: "), "{report}");
    let granted = if report.contains("unchanged") {
        0 // Another process raised the pool meanwhile.
    } else {
        number_before(&report, ")")
    };
    assert!(number_before(&report, "MiB available") >= want, "{report}");
    assert!(
        report.contains(&format!("mounted hugetlbfs (pagesize=2M) on {dir}")),
        "{report}"
    );

    // `check --json` shows the pages and the mount.
    let out = lace_hugepages(&["check", "--json", "--need-mb", &want_s]);
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(v["enough"], true);
    let two_m = v["sizes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["size_kb"] == 2048)
        .expect("2M pool in check --json");
    assert!(two_m["available_mib"].as_u64().unwrap() >= want, "{two_m}");
    assert!(two_m["total"].as_u64().unwrap() >= 8, "{two_m}");
    let ours: Vec<_> = v["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["dir"] == dir.as_str())
        .collect();
    assert_eq!(ours.len(), 1, "{v}");
    assert_eq!(ours[0]["size"], "2M");

    // The kernel's own view.
    let lines = mounts_at(&guard.mount);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains(" hugetlbfs "), "{lines:?}");
    assert!(lines[0].contains("pagesize=2M"), "{lines:?}");

    // Again: nothing to do, no second mount.
    let out = lace_hugepages(&["reserve", "--mb", "2", "--mount", &dir]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("already mounted"), "{}", text(&out));
    assert_eq!(mounts_at(&guard.mount).len(), 1);

    // Give back what was granted, and the mount.
    let give = (granted * 2).to_string();
    let out = lace_hugepages(&["release", "--mount", &dir, "--mb", &give]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("unmounted {dir}")),
        "{}",
        text(&out)
    );
    assert!(mounts_at(&guard.mount).is_empty());
    drop(guard);
}
