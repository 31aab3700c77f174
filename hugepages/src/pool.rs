//! Changing the pools: `reserve` raises a reservation (and mounts hugetlbfs), `release` lowers
//! it (and unmounts).
//!
//! Guarantees: `reserve` never lowers a reservation unless asked for an exact amount, and
//! `release` never asks for fewer pages than are in use or promised (`total + surplus - free +
//! resv`). Both read the count back after writing it, since the kernel grants what it can
//! without failing the write. Other processes may change the same pools at the same time; each
//! decision is made on the counters read just before it.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::mounts::{mount_point, mount_table};
use crate::status::{read_count, status, Status};
use crate::{Error, PageSize, Roots};

/// The system calls that change the node, apart so that the logic runs against a fake tree.
pub(crate) trait Kernel {
    /// Whether this process may change the pools and mount (effective uid 0).
    fn is_root(&self) -> bool;
    /// Writes a page count to an `nr_hugepages` file.
    fn write_pages(&self, path: &Path, pages: u64) -> io::Result<()>;
    /// Mounts hugetlbfs with `pagesize=size` on `dir`.
    fn mount_hugetlbfs(&self, dir: &Path, size: PageSize) -> io::Result<()>;
    /// Unmounts `dir`.
    fn unmount(&self, dir: &Path) -> io::Result<()>;
}

/// The running kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiveKernel;

impl Kernel for LiveKernel {
    fn is_root(&self) -> bool {
        nix::unistd::Uid::effective().is_root()
    }

    fn write_pages(&self, path: &Path, pages: u64) -> io::Result<()> {
        fs::write(path, format!("{pages}\n"))
    }

    fn mount_hugetlbfs(&self, dir: &Path, size: PageSize) -> io::Result<()> {
        use nix::mount::{mount, MsFlags};
        let data = format!("pagesize={size}");
        mount(
            Some("hugetlbfs"),
            dir,
            Some("hugetlbfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(data.as_str()),
        )
        .map_err(io::Error::from)
    }

    fn unmount(&self, dir: &Path) -> io::Result<()> {
        nix::mount::umount2(dir, nix::mount::MntFlags::empty()).map_err(io::Error::from)
    }
}

/// What `reserve` is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserve {
    /// MiB that must be available (free and not promised) afterwards.
    pub mib: u64,
    /// The page size.
    pub size: PageSize,
    /// Reserve on this NUMA node only (its `nr_hugepages`); `None`: the global pool, which the
    /// kernel spreads over the nodes.
    pub node: Option<u32>,
    /// Make exactly `mib` available, lowering the reservation if more is.
    pub exact: bool,
    /// Mount hugetlbfs of this page size here (created if missing) unless already mounted.
    pub mount: Option<PathBuf>,
}

/// What `release` is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The page size; `None`: that of the `mount` if it is hugetlbfs, else 2M.
    pub size: Option<PageSize>,
    /// Release on this NUMA node only; `None`: the global pool.
    pub node: Option<u32>,
    /// Give back at most this many MiB; `None`: every available page.
    pub mib: Option<u64>,
    /// Unmount this directory first if it is a hugetlbfs mount.
    pub mount: Option<PathBuf>,
}

/// What happened to a `--mount` directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountOutcome {
    /// hugetlbfs was mounted there now.
    Mounted(PathBuf),
    /// hugetlbfs of the right page size was already mounted there.
    AlreadyMounted(PathBuf),
    /// The hugetlbfs mount there was unmounted.
    Unmounted(PathBuf),
    /// Nothing was mounted there.
    NotMounted(PathBuf),
}

/// A change of one pool, read back from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolChange {
    /// The page size.
    pub size: PageSize,
    /// The NUMA node, or `None` for the global pool.
    pub node: Option<u32>,
    /// The `nr_hugepages` file.
    pub path: PathBuf,
    /// `nr_hugepages` before.
    pub before: u64,
    /// `nr_hugepages` asked for; equal to `before` when nothing was written.
    pub asked: u64,
    /// `nr_hugepages` read back after the write.
    pub after: u64,
    /// Pages a new process can get afterwards (per node: free pages).
    pub available_after: u64,
    /// What happened at the mount point, if one was given.
    pub mount: Option<MountOutcome>,
}

impl PoolChange {
    /// Whether `nr_hugepages` was written.
    pub fn written(&self) -> bool {
        self.asked != self.before
    }
}

impl fmt::Display for PoolChange {
    /// One or two lines for people: what changed, what is available now.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pool = match self.node {
            Some(n) => format!("{} pages on node{n}", self.size),
            None => format!("{} pages", self.size),
        };
        let avail = format!("{} MiB available", self.size.mib_of(self.available_after));
        if !self.written() {
            write!(f, "{pool}: unchanged at {}, {avail}", self.before)?;
        } else if self.after >= self.before {
            write!(
                f,
                "{pool}: {} -> {} (the kernel granted {}), {avail}",
                self.before,
                self.after,
                self.after - self.before
            )?;
        } else {
            write!(
                f,
                "{pool}: {} -> {} ({} given back), {avail}",
                self.before,
                self.after,
                self.before - self.after
            )?;
        }
        match &self.mount {
            Some(MountOutcome::Mounted(d)) => {
                write!(
                    f,
                    "\nmounted hugetlbfs (pagesize={}) on {}",
                    self.size,
                    d.display()
                )
            }
            Some(MountOutcome::AlreadyMounted(d)) => write!(
                f,
                "\n{}: hugetlbfs (pagesize={}) already mounted",
                d.display(),
                self.size
            ),
            Some(MountOutcome::Unmounted(d)) => write!(f, "\nunmounted {}", d.display()),
            Some(MountOutcome::NotMounted(d)) => {
                write!(f, "\n{}: not a mount, nothing to unmount", d.display())
            }
            None => Ok(()),
        }
    }
}

/// Raises the reservation so that at least `req.mib` MiB are available, then mounts hugetlbfs
/// if asked. Needs root.
pub fn reserve(roots: &Roots, req: &Reserve) -> Result<PoolChange, Error> {
    reserve_with(&LiveKernel, roots, req)
}

/// Unmounts hugetlbfs if asked, then lowers the reservation by the available pages (never below
/// what is in use or promised). Needs root.
pub fn release(roots: &Roots, req: &Release) -> Result<PoolChange, Error> {
    release_with(&LiveKernel, roots, req)
}

/// The counters of one pool that `reserve` and `release` decide on.
struct Pool {
    path: PathBuf,
    /// `nr_hugepages`.
    total: u64,
    /// Pages a new process can get.
    available: u64,
}

fn pool(roots: &Roots, st: &Status, size: PageSize, node: Option<u32>) -> Result<Pool, Error> {
    let s = st.size(size).ok_or_else(|| Error::UnsupportedSize {
        size,
        path: roots.pool_dir(size, None),
        offered: st.offered(),
    })?;
    let (total, available) = match node {
        None => (s.total, s.available),
        Some(n) => {
            let ns = s.node(n).ok_or_else(|| Error::NoSuchNode {
                node: n,
                path: roots.pool_dir(size, Some(n)),
                nodes: if s.nodes.is_empty() {
                    "none".to_owned()
                } else {
                    let ids: Vec<String> = s.nodes.iter().map(|n| n.node.to_string()).collect();
                    ids.join(", ")
                },
            })?;
            (ns.total, ns.free)
        }
    };
    Ok(Pool {
        path: roots.pool_dir(size, node).join("nr_hugepages"),
        total,
        available,
    })
}

/// Writes `asked` and reads back what the kernel made of it.
fn set_pages(kernel: &dyn Kernel, path: &Path, asked: u64) -> Result<u64, Error> {
    kernel
        .write_pages(path, asked)
        .map_err(|source| Error::Write {
            path: path.to_owned(),
            value: asked,
            source,
        })?;
    read_count(path)
}

fn available_now(roots: &Roots, size: PageSize, node: Option<u32>) -> Result<u64, Error> {
    let st = status(roots)?;
    Ok(pool(roots, &st, size, node)?.available)
}

pub(crate) fn reserve_with(
    kernel: &dyn Kernel,
    roots: &Roots,
    req: &Reserve,
) -> Result<PoolChange, Error> {
    let nr_path = roots.pool_dir(req.size, req.node).join("nr_hugepages");
    if !kernel.is_root() {
        return Err(Error::NotRoot {
            action: "reserve",
            path: nr_path,
        });
    }
    let st = status(roots)?;
    let p = pool(roots, &st, req.size, req.node)?;
    let wanted = req.size.pages_for_mib(req.mib);
    // Pages in use or promised stay whatever we write.
    let floor = p.total.saturating_sub(p.available);
    let asked = if req.exact {
        floor.saturating_add(wanted)
    } else if p.available >= wanted {
        p.total
    } else {
        p.total.saturating_add(wanted - p.available)
    };
    let mut after = p.total;
    if asked != p.total {
        after = set_pages(kernel, &p.path, asked)?;
        if after < asked && asked > p.total {
            let short = asked - after;
            return Err(Error::Shortfall {
                path: p.path,
                size: req.size,
                before: p.total,
                asked,
                got: after,
                short,
                short_mib: req.size.mib_of(short),
            });
        }
    }
    let mount = match &req.mount {
        Some(dir) => Some(mount_hugetlbfs(kernel, roots, dir, req.size)?),
        None => None,
    };
    Ok(PoolChange {
        size: req.size,
        node: req.node,
        path: p.path,
        before: p.total,
        asked,
        after,
        available_after: available_now(roots, req.size, req.node)?,
        mount,
    })
}

pub(crate) fn release_with(
    kernel: &dyn Kernel,
    roots: &Roots,
    req: &Release,
) -> Result<PoolChange, Error> {
    let size_hint = req.size.unwrap_or(PageSize::SIZE_2M);
    if !kernel.is_root() {
        return Err(Error::NotRoot {
            action: "release",
            path: roots.pool_dir(size_hint, req.node).join("nr_hugepages"),
        });
    }
    let (mount, mounted_size) = match &req.mount {
        Some(dir) => {
            let (outcome, size) = unmount_hugetlbfs(kernel, roots, dir)?;
            (Some(outcome), size)
        }
        None => (None, None),
    };
    let size = req.size.or(mounted_size).unwrap_or(PageSize::SIZE_2M);
    // Read after unmounting: files on the mount held pages that are free now.
    let st = status(roots)?;
    let p = pool(roots, &st, size, req.node)?;
    let give = req
        .mib
        .map_or(p.available, |mib| size.pages_for_mib(mib))
        .min(p.available);
    let asked = p.total.saturating_sub(give);
    let after = if asked != p.total {
        set_pages(kernel, &p.path, asked)?
    } else {
        p.total
    };
    Ok(PoolChange {
        size,
        node: req.node,
        path: p.path,
        before: p.total,
        asked,
        after,
        available_after: available_now(roots, size, req.node)?,
        mount,
    })
}

/// Mounts hugetlbfs of `size` on `dir` (created if missing) unless it is already there.
fn mount_hugetlbfs(
    kernel: &dyn Kernel,
    roots: &Roots,
    dir: &Path,
    size: PageSize,
) -> Result<MountOutcome, Error> {
    fs::create_dir_all(dir).map_err(|source| Error::CreateDir {
        dir: dir.to_owned(),
        source,
    })?;
    let dir = mount_point(dir);
    if let Some(m) = mount_table(roots)?.at(&dir) {
        if m.fstype != "hugetlbfs" {
            return Err(Error::NotHugetlbfs {
                dir,
                fstype: m.fstype.clone(),
            });
        }
        return match m.page_size() {
            Some(have) if have == size => Ok(MountOutcome::AlreadyMounted(dir)),
            have => Err(Error::MountSizeMismatch {
                dir,
                have: have.map_or_else(|| "unknown".to_owned(), |s| s.to_string()),
                want: size,
            }),
        };
    }
    kernel
        .mount_hugetlbfs(&dir, size)
        .map_err(|source| Error::Mount {
            dir: dir.clone(),
            size,
            source,
        })?;
    Ok(MountOutcome::Mounted(dir))
}

/// Unmounts `dir` if it is hugetlbfs; returns what happened and the mount's page size.
fn unmount_hugetlbfs(
    kernel: &dyn Kernel,
    roots: &Roots,
    dir: &Path,
) -> Result<(MountOutcome, Option<PageSize>), Error> {
    let dir = mount_point(dir);
    let Some(m) = mount_table(roots)?.at(&dir).cloned() else {
        return Ok((MountOutcome::NotMounted(dir), None));
    };
    if m.fstype != "hugetlbfs" {
        return Err(Error::NotHugetlbfs {
            dir,
            fstype: m.fstype,
        });
    }
    kernel.unmount(&dir).map_err(|source| Error::Unmount {
        dir: dir.clone(),
        source,
    })?;
    Ok((MountOutcome::Unmounted(dir), m.page_size()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeKernel, FakeNode};

    const M2: PageSize = PageSize::SIZE_2M;

    fn reserve_req(mib: u64) -> Reserve {
        Reserve {
            mib,
            size: M2,
            node: None,
            exact: false,
            mount: None,
        }
    }

    fn release_req() -> Release {
        Release {
            size: None,
            node: None,
            mib: None,
            mount: None,
        }
    }

    #[test]
    fn enough_free_writes_nothing() {
        let t = FakeNode::new();
        t.size(M2, 300, 260, 4);
        let k = FakeKernel::new(&t);
        let c = reserve_with(&k, &t.roots, &reserve_req(512)).unwrap();
        assert!(k.writes.borrow().is_empty());
        assert!(!c.written());
        assert_eq!((c.before, c.after, c.available_after), (300, 300, 256));
        assert_eq!(
            c.to_string(),
            "2M pages: unchanged at 300, 512 MiB available"
        );
    }

    #[test]
    fn raises_by_the_deficit_counting_promised_pages_as_taken() {
        let t = FakeNode::new();
        t.size(M2, 300, 110, 10);
        let k = FakeKernel::new(&t);
        // 100 available, 256 wanted: 156 more.
        let c = reserve_with(&k, &t.roots, &reserve_req(512)).unwrap();
        assert_eq!(k.writes.borrow().len(), 1);
        assert_eq!(k.writes.borrow()[0].1, 456);
        assert_eq!(t.count(M2, None, "nr_hugepages"), 456);
        assert_eq!(
            (c.before, c.asked, c.after, c.available_after),
            (300, 456, 456, 256)
        );
        assert_eq!(
            c.to_string(),
            "2M pages: 300 -> 456 (the kernel granted 156), 512 MiB available"
        );
    }

    #[test]
    fn odd_mib_round_up_to_whole_pages() {
        let t = FakeNode::new();
        t.size(M2, 0, 0, 0);
        let k = FakeKernel::new(&t);
        reserve_with(&k, &t.roots, &reserve_req(5)).unwrap();
        assert_eq!(t.count(M2, None, "nr_hugepages"), 3);
    }

    #[test]
    fn a_partial_grant_is_an_error_naming_the_shortfall_and_the_fixes() {
        let t = FakeNode::new();
        t.size(M2, 10, 10, 0);
        let k = FakeKernel::new(&t);
        k.limit.set(200);
        let e = reserve_with(&k, &t.roots, &reserve_req(1024)).unwrap_err();
        match &e {
            Error::Shortfall {
                before,
                asked,
                got,
                short,
                short_mib,
                ..
            } => assert_eq!(
                (*before, *asked, *got, *short, *short_mib),
                (10, 512, 200, 312, 624)
            ),
            other => panic!("not a shortfall: {other}"),
        }
        let msg = e.to_string();
        assert!(msg.contains("hugepages-2048kB/nr_hugepages: asked for 512 2M pages (up from 10), the kernel granted 200: 312 pages (624 MiB) short"), "{msg}");
        assert!(
            msg.contains(
                "`echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory`"
            ),
            "{msg}"
        );
        assert!(msg.contains("`hugepagesz=2M hugepages=512`"), "{msg}");
        assert!(msg.contains("`lace-hugepages release --size 2M`"), "{msg}");
    }

    #[test]
    fn a_partial_grant_mounts_nothing() {
        let t = FakeNode::new();
        t.size(M2, 0, 0, 0);
        let k = FakeKernel::new(&t);
        k.limit.set(1);
        let mut req = reserve_req(64);
        req.mount = Some(t.path("mnt/huge"));
        reserve_with(&k, &t.roots, &req).unwrap_err();
        assert!(status(&t.roots).unwrap().mounts.is_empty());
    }

    #[test]
    fn exact_lowers_but_never_below_use() {
        let t = FakeNode::new();
        t.size(M2, 1000, 600, 100);
        let k = FakeKernel::new(&t);
        // 400 in use + 100 promised stay; 64 MiB = 32 pages on top.
        let mut req = reserve_req(64);
        req.exact = true;
        let c = reserve_with(&k, &t.roots, &req).unwrap();
        assert_eq!((c.before, c.after, c.available_after), (1000, 532, 32));
        assert_eq!(
            c.to_string(),
            "2M pages: 1000 -> 532 (468 given back), 64 MiB available"
        );
        req.mib = 0;
        reserve_with(&k, &t.roots, &req).unwrap();
        assert_eq!(t.count(M2, None, "nr_hugepages"), 500);
        // Without --exact the same request never lowers.
        t.size(M2, 1000, 600, 100);
        req.exact = false;
        reserve_with(&k, &t.roots, &req).unwrap();
        assert_eq!(t.count(M2, None, "nr_hugepages"), 1000);
    }

    #[test]
    fn per_node_reserve_writes_the_node_and_counts_its_free_pages() {
        let t = FakeNode::new();
        t.size(M2, 300, 300, 0)
            .node(0, M2, 0, 0)
            .node(1, M2, 300, 300);
        let k = FakeKernel::new(&t);
        let mut req = reserve_req(100);
        req.node = Some(0);
        // 600 MiB are free globally, none on node 0.
        let c = reserve_with(&k, &t.roots, &req).unwrap();
        let w = k.writes.borrow();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].0
                .ends_with("node/node0/hugepages/hugepages-2048kB/nr_hugepages"),
            "{w:?}"
        );
        assert_eq!(w[0].1, 50);
        assert_eq!(t.count(M2, Some(0), "nr_hugepages"), 50);
        assert_eq!(t.count(M2, Some(1), "nr_hugepages"), 300);
        assert_eq!(t.count(M2, None, "nr_hugepages"), 350);
        assert_eq!(
            c.to_string(),
            "2M pages on node0: 0 -> 50 (the kernel granted 50), 100 MiB available"
        );
    }

    #[test]
    fn unknown_node_and_size_are_named() {
        let t = FakeNode::new();
        t.size(M2, 0, 0, 0).node(0, M2, 0, 0);
        let k = FakeKernel::new(&t);
        let mut req = reserve_req(2);
        req.node = Some(3);
        let e = reserve_with(&k, &t.roots, &req).unwrap_err().to_string();
        assert!(e.starts_with("NUMA node 3: "), "{e}");
        assert!(
            e.contains("node3/hugepages/hugepages-2048kB does not exist"),
            "{e}"
        );
        assert!(e.ends_with("the nodes with huge pages are: 0"), "{e}");
        req.node = None;
        req.size = PageSize::SIZE_1G;
        let e = reserve_with(&k, &t.roots, &req).unwrap_err().to_string();
        assert!(
            e.contains("hugepages-1048576kB does not exist, this kernel offers 2M"),
            "{e}"
        );
        assert!(k.writes.borrow().is_empty());
    }

    #[test]
    fn changing_pools_needs_root() {
        let t = FakeNode::new();
        t.size(M2, 0, 0, 0);
        let mut k = FakeKernel::new(&t);
        k.root = false;
        let e = reserve_with(&k, &t.roots, &reserve_req(0))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("`lace-hugepages reserve` needs root: it writes "),
            "{e}"
        );
        assert!(e.ends_with("run it with sudo"), "{e}");
        let e = release_with(&k, &t.roots, &release_req())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("`lace-hugepages release` needs root"), "{e}");
        assert!(k.writes.borrow().is_empty());
    }

    #[test]
    fn mount_is_created_once_and_is_idempotent() {
        let t = FakeNode::new();
        t.size(M2, 0, 0, 0);
        let k = FakeKernel::new(&t);
        let dir = t.path("run/lace/huge");
        let mut req = reserve_req(4);
        req.mount = Some(dir.clone());
        let c = reserve_with(&k, &t.roots, &req).unwrap();
        let canon = fs::canonicalize(&dir).unwrap();
        assert_eq!(c.mount, Some(MountOutcome::Mounted(canon.clone())));
        assert!(c.to_string().ends_with(&format!(
            "\nmounted hugetlbfs (pagesize=2M) on {}",
            canon.display()
        )));
        let c = reserve_with(&k, &t.roots, &req).unwrap();
        assert_eq!(c.mount, Some(MountOutcome::AlreadyMounted(canon.clone())));
        assert!(!c.written());
        let mounts = status(&t.roots).unwrap().mounts;
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].dir, canon);
        assert_eq!(mounts[0].size, Some(M2));
    }

    #[test]
    fn mount_refuses_other_file_systems_and_other_page_sizes() {
        let t = FakeNode::new();
        t.size(M2, 0, 0, 0).size(PageSize::SIZE_1G, 0, 0, 0);
        let k = FakeKernel::new(&t);
        let tmp = t.path("tmpfs");
        let huge = t.path("huge1g");
        fs::create_dir_all(&tmp).unwrap();
        fs::create_dir_all(&huge).unwrap();
        let tmp = fs::canonicalize(tmp).unwrap();
        let huge = fs::canonicalize(huge).unwrap();
        t.mount_line(&format!("tmpfs {} tmpfs rw 0 0", tmp.display()));
        t.mount_line(&format!(
            "nodev {} hugetlbfs rw,pagesize=1G 0 0",
            huge.display()
        ));
        let mut req = reserve_req(0);
        req.mount = Some(tmp.clone());
        let e = reserve_with(&k, &t.roots, &req).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "is already a tmpfs mount, not hugetlbfs; pick another directory for --mount"
            ),
            "{e}"
        );
        req.mount = Some(huge.clone());
        let e = reserve_with(&k, &t.roots, &req).unwrap_err().to_string();
        assert!(
            e.contains("is already hugetlbfs with pagesize=1G, not 2M"),
            "{e}"
        );
        assert!(
            e.contains(&format!(
                "`lace-hugepages release --mount {}`",
                huge.display()
            )),
            "{e}"
        );
        // Neither was touched by release either: tmpfs is refused.
        let mut rel = release_req();
        rel.mount = Some(tmp);
        let e = release_with(&k, &t.roots, &rel).unwrap_err();
        assert!(matches!(e, Error::NotHugetlbfs { .. }), "{e}");
        assert_eq!(status(&t.roots).unwrap().mounts.len(), 1);
    }

    #[test]
    fn release_gives_back_free_pages_never_below_use() {
        let t = FakeNode::new();
        t.size(M2, 1000, 600, 100);
        let k = FakeKernel::new(&t);
        let c = release_with(&k, &t.roots, &release_req()).unwrap();
        // 400 in use, 100 promised: 500 stay.
        assert_eq!(
            (c.before, c.asked, c.after, c.available_after),
            (1000, 500, 500, 0)
        );
        assert_eq!(k.writes.borrow()[0].1, 500);
        // Nothing left to give: no write.
        let c = release_with(&k, &t.roots, &release_req()).unwrap();
        assert!(!c.written());
        assert_eq!(k.writes.borrow().len(), 1);
    }

    #[test]
    fn release_mb_gives_back_at_most_that() {
        let t = FakeNode::new();
        t.size(M2, 100, 100, 0);
        let k = FakeKernel::new(&t);
        let mut rel = release_req();
        rel.mib = Some(20);
        let c = release_with(&k, &t.roots, &rel).unwrap();
        assert_eq!((c.before, c.after), (100, 90));
        rel.mib = Some(1000);
        let c = release_with(&k, &t.roots, &rel).unwrap();
        assert_eq!((c.before, c.after), (90, 0));
    }

    #[test]
    fn release_per_node_lowers_that_node_only() {
        let t = FakeNode::new();
        t.size(M2, 200, 150, 0)
            .node(0, M2, 100, 50)
            .node(1, M2, 100, 100);
        let k = FakeKernel::new(&t);
        let mut rel = release_req();
        rel.node = Some(1);
        let c = release_with(&k, &t.roots, &rel).unwrap();
        assert_eq!((c.before, c.after), (100, 0));
        assert_eq!(t.count(M2, Some(0), "nr_hugepages"), 100);
        rel.node = Some(0);
        let c = release_with(&k, &t.roots, &rel).unwrap();
        assert_eq!((c.before, c.after), (100, 50), "50 in use on node 0");
    }

    #[test]
    fn release_unmounts_and_takes_the_page_size_of_the_mount() {
        let t = FakeNode::new();
        t.size(M2, 10, 10, 0).size(PageSize::SIZE_1G, 2, 2, 0);
        let k = FakeKernel::new(&t);
        let dir = t.path("huge1g");
        let mut req = reserve_req(2048);
        req.size = PageSize::SIZE_1G;
        req.mount = Some(dir.clone());
        reserve_with(&k, &t.roots, &req).unwrap();
        let mut rel = release_req();
        rel.mount = Some(dir.clone());
        let c = release_with(&k, &t.roots, &rel).unwrap();
        let canon = fs::canonicalize(&dir).unwrap();
        assert_eq!(c.mount, Some(MountOutcome::Unmounted(canon.clone())));
        assert_eq!(c.size, PageSize::SIZE_1G);
        assert_eq!((c.before, c.after), (2, 0));
        assert_eq!(t.count(M2, None, "nr_hugepages"), 10, "2M pages untouched");
        assert!(status(&t.roots).unwrap().mounts.is_empty());
        // Again: nothing mounted, nothing to give.
        let c = release_with(&k, &t.roots, &rel).unwrap();
        assert_eq!(c.mount, Some(MountOutcome::NotMounted(canon)));
        assert_eq!(c.size, M2);
        assert!(
            c.to_string().ends_with(": not a mount, nothing to unmount"),
            "{c}"
        );
    }
}
