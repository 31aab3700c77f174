//! Reading the huge page pools (`/sys`) and hugetlbfs mounts (`/proc/mounts`).
//!
//! The kernel's counters, per page size (Documentation/admin-guide/mm/hugetlbpage.rst):
//! `nr_hugepages` is the persistent pool (what `reserve` sets), `free_hugepages` the pages no
//! process has touched yet, `resv_hugepages` those of them already promised to a mapping, and
//! `surplus_hugepages` pages above the pool taken under overcommit. What a new DPDK process can
//! still get is `free - resv`. Per NUMA node the kernel keeps no `resv` count.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::mounts::{mount_table, HugetlbfsMount};
use crate::{Error, PageSize};

/// Where `/sys` and `/proc` are: `/` on a live system, a fake tree in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// The directory holding `sys/` (the live one: `/`).
    pub sysfs: PathBuf,
    /// The directory holding `proc/` (the live one: `/`).
    pub proc: PathBuf,
}

impl Default for Roots {
    /// The live system.
    fn default() -> Roots {
        Roots {
            sysfs: PathBuf::from("/"),
            proc: PathBuf::from("/"),
        }
    }
}

impl Roots {
    /// Both `sys/` and `proc/` under `root`.
    pub fn under(root: impl Into<PathBuf>) -> Roots {
        let root = root.into();
        Roots {
            sysfs: root.clone(),
            proc: root,
        }
    }

    /// `/sys/kernel/mm/hugepages`: one directory per page size.
    pub fn hugepages_dir(&self) -> PathBuf {
        self.sysfs.join("sys/kernel/mm/hugepages")
    }

    /// `/sys/devices/system/node`: one directory per NUMA node.
    pub fn nodes_dir(&self) -> PathBuf {
        self.sysfs.join("sys/devices/system/node")
    }

    /// The counters of one size: global (`node == None`) or of one NUMA node.
    pub fn pool_dir(&self, size: PageSize, node: Option<u32>) -> PathBuf {
        match node {
            None => self.hugepages_dir().join(size.sysfs_name()),
            Some(n) => self
                .nodes_dir()
                .join(format!("node{n}"))
                .join("hugepages")
                .join(size.sysfs_name()),
        }
    }

    /// `/proc/mounts`.
    pub fn mounts_file(&self) -> PathBuf {
        self.proc.join("proc/mounts")
    }

    /// `/proc/meminfo` (for the default huge page size).
    pub fn meminfo_file(&self) -> PathBuf {
        self.proc.join("proc/meminfo")
    }
}

/// Everything `check` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    /// One entry per page size the kernel offers, smallest first.
    pub sizes: Vec<SizeStatus>,
    /// The hugetlbfs mounts, in `/proc/mounts` order.
    pub mounts: Vec<HugetlbfsMount>,
    /// The default huge page size (`Hugepagesize` in `/proc/meminfo`), if known.
    pub default_size: Option<PageSize>,
}

/// The pool of one page size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SizeStatus {
    /// The page size.
    pub size: PageSize,
    /// The page size in KiB.
    pub size_kb: u64,
    /// Pages reserved in the persistent pool (`nr_hugepages`).
    pub total: u64,
    /// Pages not yet touched by any process (`free_hugepages`; includes `resv`).
    pub free: u64,
    /// Free pages already promised to a mapping (`resv_hugepages`).
    pub resv: u64,
    /// Pages above the pool taken under overcommit (`surplus_hugepages`).
    pub surplus: u64,
    /// Pages holding data: `total + surplus - free`.
    pub in_use: u64,
    /// Pages a new process can get: `free - resv`.
    pub available: u64,
    /// `available` in MiB.
    pub available_mib: u64,
    /// The same pool per NUMA node (empty when the kernel shows no nodes).
    pub nodes: Vec<NodeStatus>,
}

/// The pool of one page size on one NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    /// The NUMA node.
    pub node: u32,
    /// Pages reserved on this node (`nr_hugepages`).
    pub total: u64,
    /// Pages not yet touched (`free_hugepages`; the kernel keeps no per-node `resv`).
    pub free: u64,
    /// Surplus pages on this node (`surplus_hugepages`).
    pub surplus: u64,
    /// Pages holding data: `total + surplus - free`.
    pub in_use: u64,
    /// `free` in MiB.
    pub free_mib: u64,
}

impl SizeStatus {
    fn new(size: PageSize, total: u64, free: u64, resv: u64, surplus: u64) -> SizeStatus {
        let available = free.saturating_sub(resv);
        SizeStatus {
            size,
            size_kb: size.kb(),
            total,
            free,
            resv,
            surplus,
            in_use: (total + surplus).saturating_sub(free),
            available,
            available_mib: size.mib_of(available),
            nodes: Vec::new(),
        }
    }

    /// The pool of `node`, if the kernel shows it.
    pub fn node(&self, node: u32) -> Option<&NodeStatus> {
        self.nodes.iter().find(|n| n.node == node)
    }
}

impl Status {
    /// The pool of `size`, if the kernel offers it.
    pub fn size(&self, size: PageSize) -> Option<&SizeStatus> {
        self.sizes.iter().find(|s| s.size == size)
    }

    /// The size with the most MiB available (the smaller size on a tie).
    pub fn most_available(&self) -> Option<&SizeStatus> {
        self.sizes.iter().rev().max_by_key(|s| s.available_mib)
    }

    /// Whether some size has at least `need_mib` MiB available.
    pub fn has_available_mib(&self, need_mib: u64) -> bool {
        self.sizes.iter().any(|s| s.available_mib >= need_mib)
    }

    /// `None` when some size has `need_mib` MiB available; else what is missing and the command
    /// that fixes it.
    pub fn shortage(&self, need_mib: u64) -> Option<String> {
        if self.has_available_mib(need_mib) {
            return None;
        }
        let have = match self.most_available() {
            Some(s) => format!("at most {} MiB ({} pages)", s.available_mib, s.size),
            None => "no huge page sizes at all".to_owned(),
        };
        Some(format!(
            "need {need_mib} MiB of free huge pages in one size, have {have}; \
             run `lace-hugepages reserve --mb {need_mib}` (as root)"
        ))
    }

    /// The sizes the kernel offers, for messages: `2M, 1G`.
    pub fn offered(&self) -> String {
        let names: Vec<String> = self.sizes.iter().map(|s| s.size.to_string()).collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }
}

/// Reads every huge page pool (global and per NUMA node) and the hugetlbfs mounts.
pub fn status(roots: &Roots) -> Result<Status, Error> {
    let dir = roots.hugepages_dir();
    let entries = fs::read_dir(&dir).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => Error::NoHugePages { path: dir.clone() },
        _ => Error::Read {
            path: dir.clone(),
            source,
        },
    })?;
    let mut sizes = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Read {
            path: dir.clone(),
            source,
        })?;
        let name = entry.file_name();
        let Some(size) = name
            .to_str()
            .and_then(|n| {
                n.strip_prefix("hugepages-")?
                    .strip_suffix("kB")?
                    .parse()
                    .ok()
            })
            .and_then(PageSize::from_kb)
        else {
            continue;
        };
        sizes.push(read_size(roots, size)?);
    }
    if sizes.is_empty() {
        return Err(Error::NoHugePages { path: dir });
    }
    sizes.sort_by_key(|s| s.size);
    Ok(Status {
        sizes,
        mounts: mount_table(roots)?.hugetlbfs(),
        default_size: default_size(roots),
    })
}

fn read_size(roots: &Roots, size: PageSize) -> Result<SizeStatus, Error> {
    let dir = roots.pool_dir(size, None);
    let mut s = SizeStatus::new(
        size,
        read_count(&dir.join("nr_hugepages"))?,
        read_count(&dir.join("free_hugepages"))?,
        read_count(&dir.join("resv_hugepages"))?,
        read_count(&dir.join("surplus_hugepages"))?,
    );
    for node in node_ids(roots)? {
        let dir = roots.pool_dir(size, Some(node));
        if !dir.is_dir() {
            continue;
        }
        let total = read_count(&dir.join("nr_hugepages"))?;
        let free = read_count(&dir.join("free_hugepages"))?;
        let surplus = read_count(&dir.join("surplus_hugepages"))?;
        s.nodes.push(NodeStatus {
            node,
            total,
            free,
            surplus,
            in_use: (total + surplus).saturating_sub(free),
            free_mib: size.mib_of(free),
        });
    }
    Ok(s)
}

/// The NUMA nodes the kernel shows, ascending (none on a kernel without NUMA support).
pub(crate) fn node_ids(roots: &Roots) -> Result<Vec<u32>, Error> {
    let dir = roots.nodes_dir();
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(Error::Read { path: dir, source }),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Read {
            path: dir.clone(),
            source,
        })?;
        if let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("node")?.parse().ok())
        {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Reads one counter file (a decimal number and a newline).
pub(crate) fn read_count(path: &Path) -> Result<u64, Error> {
    let text = fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    text.trim().parse().map_err(|_| Error::Parse {
        path: path.to_owned(),
        found: text.trim().to_owned(),
    })
}

/// `Hugepagesize: 2048 kB` from `/proc/meminfo`; `None` if absent or unreadable.
fn default_size(roots: &Roots) -> Option<PageSize> {
    let text = fs::read_to_string(roots.meminfo_file()).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("Hugepagesize:"))?;
    PageSize::from_kb(line.trim().strip_suffix("kB")?.trim().parse().ok()?)
}

impl fmt::Display for Status {
    /// The table `lace-hugepages check` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>12}",
            "size", "total", "free", "in use", "resv", "surplus", "available"
        )?;
        for s in &self.sizes {
            let default = if self.default_size == Some(s.size) {
                " (default)"
            } else {
                ""
            };
            writeln!(
                f,
                "{:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} MiB{default}",
                s.size.to_string(),
                s.total,
                s.free,
                s.in_use,
                s.resv,
                s.surplus,
                s.available_mib
            )?;
            for n in &s.nodes {
                writeln!(
                    f,
                    "{:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} MiB",
                    format!("  node{}", n.node),
                    n.total,
                    n.free,
                    n.in_use,
                    "-",
                    n.surplus,
                    n.free_mib
                )?;
            }
        }
        if self.mounts.is_empty() {
            writeln!(
                f,
                "hugetlbfs mounts: none (DPDK --in-memory needs none; `lace-hugepages reserve \
                 --mb N --mount /dev/hugepages` makes one)"
            )?;
        } else {
            writeln!(f, "hugetlbfs mounts:")?;
            for m in &self.mounts {
                let size = m
                    .size
                    .map_or_else(|| "unknown".to_owned(), |s| s.to_string());
                writeln!(f, "  {} (pagesize={size})", m.dir.display())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeNode;

    /// Two sizes, two NUMA nodes, one hugetlbfs mount.
    fn two_node_tree() -> FakeNode {
        let t = FakeNode::new();
        t.size(PageSize::SIZE_2M, 512, 300, 44)
            .node(0, PageSize::SIZE_2M, 256, 100)
            .node(1, PageSize::SIZE_2M, 256, 200)
            .size(PageSize::SIZE_1G, 4, 4, 0)
            .node(0, PageSize::SIZE_1G, 4, 4)
            .mount_line("hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0");
        // Not a node: ignored.
        fs::write(t.roots.nodes_dir().join("possible"), "0-1\n").unwrap();
        t
    }

    #[test]
    fn reads_every_size_and_node() {
        let t = two_node_tree();
        let st = status(&t.roots).unwrap();
        assert_eq!(st.default_size, Some(PageSize::SIZE_2M));
        assert_eq!(st.sizes.len(), 2);
        let s = st.size(PageSize::SIZE_2M).unwrap();
        assert_eq!((s.total, s.free, s.resv, s.surplus), (512, 300, 44, 0));
        assert_eq!(s.in_use, 212);
        assert_eq!(s.available, 256);
        assert_eq!(s.available_mib, 512);
        assert_eq!(s.nodes.len(), 2);
        let n1 = s.node(1).unwrap();
        assert_eq!(
            (n1.total, n1.free, n1.in_use, n1.free_mib),
            (256, 200, 56, 400)
        );
        let g = st.size(PageSize::SIZE_1G).unwrap();
        assert_eq!(g.available_mib, 4096);
        assert_eq!(g.nodes.len(), 1, "node1 has no 1G directory");
        assert_eq!(st.mounts.len(), 1);
        assert_eq!(st.mounts[0].size, Some(PageSize::SIZE_2M));
        assert_eq!(st.offered(), "2M, 1G");
    }

    #[test]
    fn check_table_shows_pools_nodes_and_mounts() {
        let t = two_node_tree();
        let text = status(&t.roots).unwrap().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "size          total     free   in use     resv  surplus    available"
        );
        assert_eq!(
            lines[1],
            "2M              512      300      212       44        0      512 MiB (default)"
        );
        assert_eq!(
            lines[2],
            "  node0         256      100      156        -        0      200 MiB"
        );
        assert!(
            lines[3].starts_with("  node1         256      200       56"),
            "{text}"
        );
        assert!(
            lines[4].starts_with("1G                4        4        0"),
            "{text}"
        );
        assert!(lines[4].ends_with("4096 MiB"), "{text}");
        assert_eq!(lines[6], "hugetlbfs mounts:");
        assert_eq!(lines[7], "  /dev/hugepages (pagesize=2M)");
    }

    #[test]
    fn check_table_says_when_nothing_is_mounted() {
        let t = FakeNode::new();
        t.size(PageSize::SIZE_2M, 0, 0, 0);
        let text = status(&t.roots).unwrap().to_string();
        assert!(text.contains("hugetlbfs mounts: none"), "{text}");
    }

    #[test]
    fn json_has_every_counter() {
        let t = two_node_tree();
        let v = serde_json::to_value(status(&t.roots).unwrap()).unwrap();
        let s = &v["sizes"][0];
        assert_eq!(s["size"], "2M");
        assert_eq!(s["size_kb"], 2048);
        assert_eq!(s["total"], 512);
        assert_eq!(s["free"], 300);
        assert_eq!(s["resv"], 44);
        assert_eq!(s["in_use"], 212);
        assert_eq!(s["available_mib"], 512);
        assert_eq!(s["nodes"][1]["node"], 1);
        assert_eq!(s["nodes"][1]["free"], 200);
        assert_eq!(v["sizes"][1]["size_kb"], 1048576);
        assert_eq!(v["mounts"][0]["dir"], "/dev/hugepages");
        assert_eq!(v["mounts"][0]["size"], "2M");
        assert_eq!(v["default_size"], "2M");
    }

    #[test]
    fn shortage_names_the_command() {
        let t = two_node_tree();
        let st = status(&t.roots).unwrap();
        assert_eq!(st.shortage(4096), None, "1G pages have 4096 MiB");
        assert_eq!(st.most_available().unwrap().size, PageSize::SIZE_1G);
        let msg = st.shortage(5000).unwrap();
        assert!(msg.contains("need 5000 MiB"), "{msg}");
        assert!(msg.contains("at most 4096 MiB (1G pages)"), "{msg}");
        assert!(
            msg.contains("run `lace-hugepages reserve --mb 5000`"),
            "{msg}"
        );
    }

    #[test]
    fn a_kernel_without_huge_pages_is_named() {
        let t = FakeNode::new();
        let e = status(&t.roots).unwrap_err();
        assert!(matches!(e, Error::NoHugePages { .. }), "{e}");
        fs::remove_dir_all(t.roots.hugepages_dir()).unwrap();
        let e = status(&t.roots).unwrap_err().to_string();
        assert!(
            e.contains("sys/kernel/mm/hugepages: no huge page sizes"),
            "{e}"
        );
        assert!(e.contains("--no-huge"), "{e}");
    }

    #[test]
    fn a_garbled_counter_names_its_file() {
        let t = FakeNode::new();
        t.size(PageSize::SIZE_2M, 1, 1, 0);
        let f = t
            .roots
            .pool_dir(PageSize::SIZE_2M, None)
            .join("free_hugepages");
        fs::write(&f, "lots\n").unwrap();
        let e = status(&t.roots).unwrap_err().to_string();
        assert!(e.contains("hugepages-2048kB/free_hugepages"), "{e}");
        assert!(e.contains("\"lots\""), "{e}");
    }
}
