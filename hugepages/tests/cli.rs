//! The `lace-hugepages` binary against a fake `/sys` + `/proc` tree (no root needed).

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

/// A node with 2M pages (6 free, 12 MiB) on one NUMA node, 1G pages none, no mounts.
fn fake_tree(root: &Path) {
    for (dir, files) in [
        (
            "sys/kernel/mm/hugepages/hugepages-2048kB",
            &[
                ("nr_hugepages", 8),
                ("free_hugepages", 6),
                ("resv_hugepages", 0),
                ("surplus_hugepages", 0),
            ][..],
        ),
        (
            "sys/kernel/mm/hugepages/hugepages-1048576kB",
            &[
                ("nr_hugepages", 0),
                ("free_hugepages", 0),
                ("resv_hugepages", 0),
                ("surplus_hugepages", 0),
            ][..],
        ),
        (
            "sys/devices/system/node/node0/hugepages/hugepages-2048kB",
            &[
                ("nr_hugepages", 8),
                ("free_hugepages", 6),
                ("surplus_hugepages", 0),
            ][..],
        ),
    ] {
        let d = root.join(dir);
        fs::create_dir_all(&d).unwrap();
        for (f, v) in files {
            fs::write(d.join(f), format!("{v}\n")).unwrap();
        }
    }
    fs::create_dir_all(root.join("proc")).unwrap();
    fs::write(root.join("proc/mounts"), "proc /proc proc rw 0 0\n").unwrap();
    fs::write(root.join("proc/meminfo"), "Hugepagesize:       2048 kB\n").unwrap();
}

fn lace_hugepages(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lace-hugepages"))
        .arg("--sysfs-root")
        .arg(root)
        .arg("--proc-root")
        .arg(root)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn check_passes_when_enough_is_free() {
    let tmp = tempfile::tempdir().unwrap();
    fake_tree(tmp.path());
    let out = lace_hugepages(tmp.path(), &["check", "--need-mb", "12"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains(
            "2M                8        6        2        0        0       12 MiB (default)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("  node0"), "{stdout}");
    assert!(stdout.contains("hugetlbfs mounts: none"), "{stdout}");
}

#[test]
fn check_fails_with_the_command_to_run() {
    let tmp = tempfile::tempdir().unwrap();
    fake_tree(tmp.path());
    let out = lace_hugepages(tmp.path(), &["check", "--need-mb", "512"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr.contains("have at most 12 MiB (2M pages)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("run `lace-hugepages reserve --mb 512`"),
        "{stderr}"
    );
}

#[test]
fn check_json_carries_the_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    fake_tree(tmp.path());
    let out = lace_hugepages(tmp.path(), &["check", "--json", "--need-mb", "100"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["need_mb"], 100);
    assert_eq!(v["enough"], false);
    assert_eq!(v["sizes"][0]["size"], "2M");
    assert_eq!(v["sizes"][0]["available_mib"], 12);
    assert_eq!(v["sizes"][0]["nodes"][0]["free"], 6);
    assert_eq!(v["sizes"][1]["size_kb"], 1048576);
    assert_eq!(v["mounts"], serde_json::json!([]));
}

#[test]
fn a_missing_tree_is_an_error_not_a_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let out = lace_hugepages(tmp.path(), &["check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr.contains("no huge page sizes"), "{stderr}");
}

#[test]
fn help_documents_every_option() {
    let tmp = tempfile::tempdir().unwrap();
    let out = lace_hugepages(tmp.path(), &["reserve", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for opt in ["--mb", "--size", "--node", "--exact", "--mount"] {
        assert!(help.contains(opt), "{opt} in {help}");
    }
    assert!(!help.contains("--sysfs-root"), "hidden: {help}");
    let out = lace_hugepages(tmp.path(), &["release", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for opt in ["--mb", "--size", "--node", "--mount"] {
        assert!(help.contains(opt), "{opt} in {help}");
    }
}
