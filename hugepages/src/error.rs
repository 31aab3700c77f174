//! What can go wrong, each message naming the file or directory and the fix.

use std::io;
use std::path::PathBuf;

use crate::PageSize;

/// Errors of reading, reserving, mounting and releasing huge pages.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel exposes no huge page sizes at all.
    #[error(
        "{path}: no huge page sizes (the kernel lacks CONFIG_HUGETLBFS, or /sys is not mounted); \
         for a local run start DPDK with --no-huge"
    )]
    NoHugePages {
        /// The directory that should list `hugepages-<N>kB`.
        path: PathBuf,
    },
    /// A sysfs or procfs file could not be read.
    #[error("read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A counter file did not hold a number.
    #[error("{path}: expected a page count, found {found:?}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it held.
        found: String,
    },
    /// The kernel does not offer the page size asked for.
    #[error(
        "{size} pages: {path} does not exist, this kernel offers {offered}; \
         1G pages need a CPU with pdpe1gb, pick one of those with --size"
    )]
    UnsupportedSize {
        /// The size asked for.
        size: PageSize,
        /// Its sysfs directory.
        path: PathBuf,
        /// The sizes the kernel offers, e.g. `2M, 1G`.
        offered: String,
    },
    /// The NUMA node asked for has no huge page pool of that size.
    #[error("NUMA node {node}: {path} does not exist; the nodes with huge pages are: {nodes}")]
    NoSuchNode {
        /// The node asked for.
        node: u32,
        /// The directory that should exist.
        path: PathBuf,
        /// The nodes that exist, e.g. `0, 1`, or `none`.
        nodes: String,
    },
    /// Changing the reservation or mounting needs root.
    #[error(
        "`lace-hugepages {action}` needs root: it writes {path} and may mount hugetlbfs; \
         run it with sudo"
    )]
    NotRoot {
        /// The subcommand (`reserve`, `release`).
        action: &'static str,
        /// The file it would write.
        path: PathBuf,
    },
    /// Writing a page count was refused.
    #[error(
        "write {value} to {path}: {source}; if this runs in a container, /sys is read-only \
         unless it is privileged: reserve on the host instead"
    )]
    Write {
        /// The `nr_hugepages` file.
        path: PathBuf,
        /// The count written.
        value: u64,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The kernel granted fewer pages than asked for.
    #[error(
        "{path}: asked for {asked} {size} pages (up from {before}), the kernel granted {got}: \
         {short} pages ({short_mib} MiB) short.\n\
         Likely causes: memory is fragmented, or too little is free. Try \
         `echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory` and run \
         again, or reserve at boot with the kernel parameters `hugepagesz={size} hugepages={asked}`.\n\
         The {got} pages stay reserved; `lace-hugepages release --size {size}` gives back the \
         free ones."
    )]
    Shortfall {
        /// The `nr_hugepages` file written.
        path: PathBuf,
        /// The page size.
        size: PageSize,
        /// Pages before the write.
        before: u64,
        /// Pages asked for.
        asked: u64,
        /// Pages the kernel granted (read back).
        got: u64,
        /// `asked - got`.
        short: u64,
        /// `short` in MiB.
        short_mib: u64,
    },
    /// The mount point holds another file system.
    #[error(
        "{dir} is already a {fstype} mount, not hugetlbfs; pick another directory for --mount"
    )]
    NotHugetlbfs {
        /// The mount point.
        dir: PathBuf,
        /// Its file system type.
        fstype: String,
    },
    /// The mount point is hugetlbfs with another page size.
    #[error(
        "{dir} is already hugetlbfs with pagesize={have}, not {want}: give it back with \
         `lace-hugepages release --mount {dir}` or pick another directory"
    )]
    MountSizeMismatch {
        /// The mount point.
        dir: PathBuf,
        /// Its page size.
        have: String,
        /// The page size asked for.
        want: PageSize,
    },
    /// The mount point could not be created.
    #[error("create mount point {dir}: {source}")]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// mount(2) failed.
    #[error(
        "mount hugetlbfs (pagesize={size}) on {dir}: {source}; mounting needs root \
         (CAP_SYS_ADMIN; in a container, a privileged one) and a kernel with hugetlbfs"
    )]
    Mount {
        /// The mount point.
        dir: PathBuf,
        /// The page size.
        size: PageSize,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// umount(2) failed.
    #[error(
        "unmount {dir}: {source}; if it is busy, stop what uses it (`fuser -vm {dir}`) and \
         run again"
    )]
    Unmount {
        /// The mount point.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}
