//! Huge pages for lace's forwarder: what the node has, reserving more, mounting hugetlbfs,
//! giving them back.
//!
//! DPDK takes its memory from huge pages; when too few are free it fails at start-up with a
//! message about memory that names no fix. This crate reads the kernel's pools
//! ([`status`]), explains a shortage in one or two lines ([`shortage_hint`]) and changes the
//! pools ([`reserve`], [`release`]); the `lace-hugepages` binary wraps it (`check`, `reserve`,
//! `release`).
//!
//! What is promised:
//! - Reading needs no privileges and changes nothing.
//! - [`reserve`] never lowers a reservation unless [`Reserve::exact`] is set, reads the count
//!   back and fails with [`Error::Shortfall`] when the kernel granted fewer pages than asked.
//! - [`release`] never asks for fewer pages than are in use or promised to a mapping, and
//!   unmounts only a hugetlbfs mount.
//! - Every path is taken relative to [`Roots`], so all of it runs against a fake tree.
//!
//! What is not: the pools are global, so another process may change them between two reads;
//! the kernel keeps no per-NUMA-node count of promised (`resv`) pages.

mod error;
mod mounts;
mod pool;
mod size;
mod status;

#[cfg(test)]
mod fake;

pub use error::Error;
pub use mounts::HugetlbfsMount;
pub use pool::{release, reserve, MountOutcome, PoolChange, Release, Reserve};
pub use size::{PageSize, ParsePageSizeError};
pub use status::{status, NodeStatus, Roots, SizeStatus, Status};

/// One or two lines for a process that found too little huge page memory (DPDK's EAL failing
/// to allocate): what is free on this node and the command that fixes it.
///
/// `need_mib` is the memory the process wanted. Reads the live system ([`Roots::default`]).
pub fn shortage_hint(need_mib: u64) -> String {
    shortage_hint_at(&Roots::default(), need_mib)
}

/// [`shortage_hint`] for the system under `roots`.
pub fn shortage_hint_at(roots: &Roots, need_mib: u64) -> String {
    let reserve = format!("lace-hugepages reserve --mb {need_mib}");
    let st = match status(roots) {
        Ok(st) => st,
        Err(e) => {
            return format!(
                "no huge pages usable: {e}\n\
                 (for a local run, start with --no-huge: no huge pages needed)"
            )
        }
    };
    let Some(best) = st.most_available() else {
        return "no huge page sizes on this node; start with --no-huge for a local run".to_owned();
    };
    if best.available_mib < need_mib {
        return format!(
            "only {} MiB of {} huge pages free (need {need_mib} MiB); run `{reserve}` as root \
             (or start with --no-huge / --in-memory for a local run)",
            best.available_mib, best.size
        );
    }
    match st.mounts.iter().find(|m| m.size == Some(best.size)) {
        None => format!(
            "{} MiB of {} huge pages free (need {need_mib} MiB) but no hugetlbfs of that size is \
             mounted: start with --in-memory, or run `{reserve} --size {} --mount /dev/hugepages`",
            best.available_mib, best.size, best.size
        ),
        Some(m) => format!(
            "{} MiB of {} huge pages free (need {need_mib} MiB), hugetlbfs mounted at {}; \
             if memory still runs short, it is per NUMA node: see `lace-hugepages check`",
            best.available_mib,
            best.size,
            m.dir.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeNode;

    #[test]
    fn hint_names_what_is_free_and_the_command() {
        let t = FakeNode::new();
        t.size(PageSize::SIZE_2M, 6, 6, 0)
            .size(PageSize::SIZE_1G, 0, 0, 0);
        let h = shortage_hint_at(&t.roots, 512);
        assert_eq!(
            h,
            "only 12 MiB of 2M huge pages free (need 512 MiB); run \
             `lace-hugepages reserve --mb 512` as root (or start with --no-huge / --in-memory \
             for a local run)"
        );
    }

    #[test]
    fn hint_when_enough_is_free_points_at_the_mount() {
        let t = FakeNode::new();
        t.size(PageSize::SIZE_2M, 512, 512, 0);
        let h = shortage_hint_at(&t.roots, 512);
        assert!(h.contains("no hugetlbfs of that size is mounted"), "{h}");
        assert!(h.contains("--in-memory"), "{h}");
        t.mount_line("hugetlbfs /mnt/h hugetlbfs rw,pagesize=2M 0 0");
        let h = shortage_hint_at(&t.roots, 512);
        assert!(h.contains("hugetlbfs mounted at /mnt/h"), "{h}");
        assert!(h.contains("per NUMA node"), "{h}");
    }

    #[test]
    fn hint_without_huge_pages_suggests_no_huge() {
        let t = FakeNode::new();
        let h = shortage_hint_at(&t.roots, 64);
        assert!(h.starts_with("no huge pages usable:"), "{h}");
        assert!(h.contains("--no-huge"), "{h}");
        assert!(h.lines().count() <= 2, "{h}");
    }
}
