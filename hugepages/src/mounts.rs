//! `/proc/mounts`: which directories are hugetlbfs, and with which page size.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::{Error, PageSize, Roots};

/// One hugetlbfs mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HugetlbfsMount {
    /// The mount point.
    pub dir: PathBuf,
    /// Its page size (`pagesize=` option), if shown.
    pub size: Option<PageSize>,
    /// All its mount options, as `/proc/mounts` shows them.
    pub options: String,
}

/// One line of `/proc/mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    pub(crate) dir: PathBuf,
    pub(crate) fstype: String,
    pub(crate) options: String,
}

/// The mounts of `/proc/mounts`, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountTable(Vec<MountEntry>);

/// Reads `/proc/mounts`.
pub(crate) fn mount_table(roots: &Roots) -> Result<MountTable, Error> {
    let path = roots.mounts_file();
    let text = fs::read_to_string(&path).map_err(|source| Error::Read { path, source })?;
    Ok(MountTable::parse(&text))
}

impl MountTable {
    /// Parses `/proc/mounts` text; malformed lines are skipped.
    pub(crate) fn parse(text: &str) -> MountTable {
        let entries = text
            .lines()
            .filter_map(|line| {
                let mut f = line.split_ascii_whitespace();
                let (_source, dir, fstype, options) = (f.next()?, f.next()?, f.next()?, f.next()?);
                Some(MountEntry {
                    dir: PathBuf::from(unescape(dir)),
                    fstype: fstype.to_owned(),
                    options: options.to_owned(),
                })
            })
            .collect();
        MountTable(entries)
    }

    /// The topmost mount at `dir` (later lines cover earlier ones), if any.
    pub(crate) fn at(&self, dir: &Path) -> Option<&MountEntry> {
        self.0.iter().rev().find(|m| m.dir == dir)
    }

    /// The hugetlbfs mounts.
    pub(crate) fn hugetlbfs(&self) -> Vec<HugetlbfsMount> {
        self.0
            .iter()
            .filter(|m| m.fstype == "hugetlbfs")
            .map(|m| HugetlbfsMount {
                dir: m.dir.clone(),
                size: m.page_size(),
                options: m.options.clone(),
            })
            .collect()
    }
}

impl MountEntry {
    /// The `pagesize=` option.
    pub(crate) fn page_size(&self) -> Option<PageSize> {
        self.options
            .split(',')
            .find_map(|o| o.strip_prefix("pagesize="))?
            .parse()
            .ok()
    }
}

/// Undoes the octal escapes of `/proc/mounts` (`\040` is a space).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| {
            b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3'
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `dir` as `/proc/mounts` would show it: absolute, symbolic links resolved where it exists.
pub(crate) fn mount_point(dir: &Path) -> PathBuf {
    fs::canonicalize(dir)
        .or_else(|_| std::path::absolute(dir))
        .unwrap_or_else(|_| dir.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0
tmpfs /mnt/huge\\0401g tmpfs rw 0 0
nodev /mnt/huge\\0401g hugetlbfs rw,relatime,pagesize=1024M 0 0
none /mnt/old hugetlbfs rw 0 0
garbage
";

    #[test]
    fn finds_hugetlbfs_mounts_and_their_page_size() {
        let t = MountTable::parse(MOUNTS);
        let h = t.hugetlbfs();
        assert_eq!(h.len(), 3);
        assert_eq!(h[0].dir, Path::new("/dev/hugepages"));
        assert_eq!(h[0].size, Some(PageSize::SIZE_2M));
        assert_eq!(h[1].dir, Path::new("/mnt/huge 1g"));
        assert_eq!(h[1].size, Some(PageSize::SIZE_1G));
        assert_eq!(h[2].size, None);
    }

    #[test]
    fn the_last_mount_at_a_directory_wins() {
        let t = MountTable::parse(MOUNTS);
        assert_eq!(t.at(Path::new("/mnt/huge 1g")).unwrap().fstype, "hugetlbfs");
        assert_eq!(t.at(Path::new("/sys")).unwrap().fstype, "sysfs");
        assert!(t.at(Path::new("/mnt")).is_none());
    }

    #[test]
    fn unescapes_octal_only() {
        assert_eq!(unescape(r"/a\040b\011c\134d"), "/a b\tc\\d");
        assert_eq!(unescape(r"/a\0b\9"), r"/a\0b\9");
    }
}
