//! A fake `/sys` + `/proc` tree in a temporary directory, and a kernel that acts on it the way
//! the real one does on the real tree (for the unit tests).

use std::cell::{Cell, RefCell};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::pool::Kernel;
use crate::status::read_count;
use crate::{PageSize, Roots};

/// A node's `sys/` and `proc/` under one temporary directory.
pub(crate) struct FakeNode {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) roots: Roots,
}

impl FakeNode {
    /// No page sizes, no NUMA nodes, no mounts; default page size 2M.
    pub(crate) fn new() -> FakeNode {
        let dir = tempfile::tempdir().unwrap();
        let roots = Roots::under(dir.path());
        fs::create_dir_all(roots.hugepages_dir()).unwrap();
        fs::create_dir_all(dir.path().join("proc")).unwrap();
        fs::write(roots.mounts_file(), "sysfs /sys sysfs rw 0 0\n").unwrap();
        fs::write(
            roots.meminfo_file(),
            "MemTotal:       16000000 kB\nHugepagesize:       2048 kB\n",
        )
        .unwrap();
        FakeNode { dir, roots }
    }

    /// Sets the global counters of `size`.
    pub(crate) fn size(&self, size: PageSize, total: u64, free: u64, resv: u64) -> &FakeNode {
        let d = self.roots.pool_dir(size, None);
        fs::create_dir_all(&d).unwrap();
        for (f, v) in [
            ("nr_hugepages", total),
            ("free_hugepages", free),
            ("resv_hugepages", resv),
            ("surplus_hugepages", 0),
        ] {
            fs::write(d.join(f), format!("{v}\n")).unwrap();
        }
        self
    }

    /// Sets the counters of `size` on NUMA `node`.
    pub(crate) fn node(&self, node: u32, size: PageSize, total: u64, free: u64) -> &FakeNode {
        let d = self.roots.pool_dir(size, Some(node));
        fs::create_dir_all(&d).unwrap();
        for (f, v) in [
            ("nr_hugepages", total),
            ("free_hugepages", free),
            ("surplus_hugepages", 0),
        ] {
            fs::write(d.join(f), format!("{v}\n")).unwrap();
        }
        self
    }

    /// Appends lines to `proc/mounts`.
    pub(crate) fn mount_line(&self, line: &str) -> &FakeNode {
        let mut text = fs::read_to_string(self.roots.mounts_file()).unwrap();
        text.push_str(line);
        text.push('\n');
        fs::write(self.roots.mounts_file(), text).unwrap();
        self
    }

    /// A counter of `size` (global or of one node).
    pub(crate) fn count(&self, size: PageSize, node: Option<u32>, file: &str) -> u64 {
        read_count(&self.roots.pool_dir(size, node).join(file)).unwrap()
    }

    /// A directory inside the tree, for mount points.
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
}

/// Acts on a [`FakeNode`]: grants pages up to a limit, keeps `free` and the per-node counters in
/// step, and records mounts in `proc/mounts`.
pub(crate) struct FakeKernel<'a> {
    tree: &'a FakeNode,
    /// Whether the caller is root.
    pub(crate) root: bool,
    /// The most pages any pool can grow to (fragmentation).
    pub(crate) limit: Cell<u64>,
    /// Every `nr_hugepages` write: (path, value asked).
    pub(crate) writes: RefCell<Vec<(PathBuf, u64)>>,
}

impl<'a> FakeKernel<'a> {
    pub(crate) fn new(tree: &'a FakeNode) -> FakeKernel<'a> {
        FakeKernel {
            tree,
            root: true,
            limit: Cell::new(u64::MAX),
            writes: RefCell::new(Vec::new()),
        }
    }

    fn add(path: &Path, delta: i64) {
        let v = read_count(path).unwrap();
        fs::write(path, format!("{}\n", v.saturating_add_signed(delta))).unwrap();
    }
}

impl Kernel for FakeKernel<'_> {
    fn is_root(&self) -> bool {
        self.root
    }

    fn write_pages(&self, path: &Path, pages: u64) -> io::Result<()> {
        self.writes.borrow_mut().push((path.to_owned(), pages));
        let before = read_count(path).unwrap();
        let after = pages.min(self.limit.get());
        let delta = after as i64 - before as i64;
        fs::write(path, format!("{after}\n"))?;
        let dir = path.parent().unwrap();
        Self::add(&dir.join("free_hugepages"), delta);
        // Keep the global pool and node 0 in step, as the kernel sums nodes into the global one.
        let size_dir = dir.file_name().unwrap();
        let global = self.tree.roots.hugepages_dir().join(size_dir);
        let node0 = self
            .tree
            .roots
            .nodes_dir()
            .join("node0/hugepages")
            .join(size_dir);
        let other = if dir == global { node0 } else { global };
        if other.is_dir() {
            Self::add(&other.join("nr_hugepages"), delta);
            Self::add(&other.join("free_hugepages"), delta);
        }
        Ok(())
    }

    fn mount_hugetlbfs(&self, dir: &Path, size: PageSize) -> io::Result<()> {
        self.tree.mount_line(&format!(
            "hugetlbfs {} hugetlbfs rw,relatime,pagesize={size} 0 0",
            dir.display()
        ));
        Ok(())
    }

    fn unmount(&self, dir: &Path) -> io::Result<()> {
        let file = self.tree.roots.mounts_file();
        let text = fs::read_to_string(&file)?;
        let mut lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .rposition(|l| l.split(' ').nth(1) == Some(dir.to_str().unwrap()))
            .ok_or_else(|| io::Error::from_raw_os_error(22))?;
        lines.remove(at);
        fs::write(&file, lines.join("\n") + "\n")
    }
}
