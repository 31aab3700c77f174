//! What a test needs of the machine, probed in one place.
//!
//! Tests that need more than a build — root, a program from a Debian package, a file another
//! step prepares, a kernel feature — are marked `#[ignore = "needs …"]`, so a plain
//! `cargo test` lists them as ignored, with the reason, instead of counting them as passed.
//! `.ci/run` (and anyone who can give them what they need) runs them with
//! `cargo test -- --include-ignored`; each one's first line is [`require`], which fails the
//! test naming every missing prerequisite and what provides it. A test asked to run never
//! passes without having run.
//!
//! ```text
//! #[test]
//! #[ignore = "needs root and ip: cargo test -- --include-ignored"]
//! fn namespaces() {
//!     require(&[root(), program("ip", "iproute2")]);
//!     // …
//! }
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

/// One thing a test needs, and how to get it when it is missing.
pub struct Need {
    what: String,
    fix: String,
    present: Box<dyn Fn() -> bool>,
}

impl fmt::Debug for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Need({})", self.what)
    }
}

impl Need {
    /// A need checked by `present`: `what` names it, `fix` says what provides it.
    pub fn probe(
        what: impl Into<String>,
        fix: impl Into<String>,
        present: impl Fn() -> bool + 'static,
    ) -> Need {
        Need {
            what: what.into(),
            fix: fix.into(),
            present: Box::new(present),
        }
    }

    /// True when the machine has it.
    pub fn is_present(&self) -> bool {
        (self.present)()
    }

    /// "what (fix)", as a failure names it.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.what, self.fix)
    }
}

/// Effective user id 0: network namespaces, DPDK memory, huge pages, raw sockets.
pub fn root() -> Need {
    Need::probe("root", "run the tests as root, as .ci/run does", is_root)
}

/// A program on `PATH` (or in `/usr/sbin`, `/sbin`), from Debian package `package`.
pub fn program(name: &'static str, package: &'static str) -> Need {
    Need::probe(
        format!("the program `{name}`"),
        format!("apt-get install {package}, or .ci/install-deps"),
        move || which(name).is_some(),
    )
}

/// A file or directory that `from` puts there (a setup step, a package).
pub fn file(path: impl Into<PathBuf>, from: impl Into<String>) -> Need {
    let path = path.into();
    Need::probe(path.display().to_string(), from, move || path.exists())
}

/// The needs in `needs` this machine lacks, each described with what provides it.
pub fn missing(needs: &[Need]) -> Vec<String> {
    needs
        .iter()
        .filter(|n| !n.is_present())
        .map(Need::describe)
        .collect()
}

/// Fails the calling test naming every missing prerequisite and what provides it.
///
/// # Panics
///
/// When any of `needs` is missing.
pub fn require(needs: &[Need]) {
    let missing = missing(needs);
    assert!(
        missing.is_empty(),
        "prerequisite{} missing: {}",
        if missing.len() == 1 { "" } else { "s" },
        missing.join("; ")
    );
}

/// Whether the process runs with effective user id 0 (from `/proc/self/status`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| effective_uid_is_root(&s))
}

fn effective_uid_is_root(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0")
}

/// Full path of program `prog` on `PATH`, `/usr/sbin` or `/sbin`.
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// DPDK's PMD directory of Debian's `dpdk` packages holds `librte_net_null.so` (the vdev
/// the DPDK tests and the forwarder's tests start).
pub fn dpdk_null_pmd() -> Need {
    Need::probe(
        "DPDK's net_null PMD (librte_net_null.so under /usr/lib/x86_64-linux-gnu/dpdk)",
        "apt-get install dpdk, or .ci/install-deps",
        || {
            has_pmd(
                Path::new("/usr/lib/x86_64-linux-gnu/dpdk"),
                "librte_net_null.so",
            )
        },
    )
}

fn has_pmd(dir: &Path, lib: &str) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|d| d.path().join(lib).exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_uid_decides_root() {
        let status = "Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
        assert!(effective_uid_is_root(status));
        let status = "Name:\tx\nUid:\t0\t1000\t1000\t1000\n";
        assert!(!effective_uid_is_root(status));
        assert!(!effective_uid_is_root("Name:\tx\n"));
    }

    #[test]
    fn a_missing_need_is_named_with_what_provides_it() {
        let needs = [
            program("sh", "dash"),
            program("lace-no-such-program", "lace-no-such-package"),
            file("/lace/no/such/file", "run tests/linux-peer/prepare"),
        ];
        let m = missing(&needs);
        assert_eq!(
            m,
            [
                "the program `lace-no-such-program` (apt-get install lace-no-such-package, or \
                 .ci/install-deps)",
                "/lace/no/such/file (run tests/linux-peer/prepare)",
            ]
        );
        let failure =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| require(&needs))).unwrap_err();
        let text = failure.downcast_ref::<String>().expect("panic message");
        assert!(text.starts_with("prerequisites missing: "), "{text}");
        assert!(text.contains("lace-no-such-package"), "{text}");
        assert!(text.contains("tests/linux-peer/prepare"), "{text}");
    }

    #[test]
    fn nothing_missing_passes() {
        require(&[program("sh", "dash"), Need::probe("truth", "none", || true)]);
        assert!(missing(&[file("/", "the root file system")]).is_empty());
    }

    #[test]
    fn a_pmd_is_found_in_any_version_directory() {
        let dir = std::env::temp_dir().join(format!("lace-prereq-{}", std::process::id()));
        let version = dir.join("pmds-23.0");
        std::fs::create_dir_all(&version).unwrap();
        assert!(!has_pmd(&dir, "librte_net_null.so"));
        std::fs::write(version.join("librte_net_null.so"), b"").unwrap();
        let found = has_pmd(&dir, "librte_net_null.so");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(found);
    }
}
