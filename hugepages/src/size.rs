//! Huge page sizes as the kernel names them (`hugepages-2048kB`) and as people write them (`2M`).

use std::fmt;
use std::str::FromStr;

/// One huge page size, in KiB (the unit of `/sys/kernel/mm/hugepages/hugepages-<N>kB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageSize {
    kb: u64,
}

impl PageSize {
    /// 2 MiB pages: x86-64's default, reservable at run time.
    pub const SIZE_2M: PageSize = PageSize { kb: 2048 };
    /// 1 GiB pages: best for DPDK, but in practice reservable only at boot (`hugepagesz=1G`).
    pub const SIZE_1G: PageSize = PageSize { kb: 1024 * 1024 };

    /// A page size of `kb` KiB; `None` for zero.
    pub fn from_kb(kb: u64) -> Option<PageSize> {
        (kb > 0).then_some(PageSize { kb })
    }

    /// The size in KiB.
    pub fn kb(self) -> u64 {
        self.kb
    }

    /// Name of the sysfs directory of this size: `hugepages-2048kB`.
    pub fn sysfs_name(self) -> String {
        format!("hugepages-{}kB", self.kb)
    }

    /// Whole pages needed to hold `mib` MiB (rounded up).
    pub fn pages_for_mib(self, mib: u64) -> u64 {
        mib.saturating_mul(1024).div_ceil(self.kb)
    }

    /// MiB held by `pages` pages (rounded down).
    pub fn mib_of(self, pages: u64) -> u64 {
        pages.saturating_mul(self.kb) / 1024
    }
}

impl fmt::Display for PageSize {
    /// `2M`, `1G`, `64K`: the form hugetlbfs's `pagesize=` option and `--size` take.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MIB: u64 = 1024;
        const GIB: u64 = 1024 * 1024;
        if self.kb % GIB == 0 {
            write!(f, "{}G", self.kb / GIB)
        } else if self.kb % MIB == 0 {
            write!(f, "{}M", self.kb / MIB)
        } else {
            write!(f, "{}K", self.kb)
        }
    }
}

/// A page size that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("page size {0:?}: expected a size such as 2M, 1G or 2048kB")]
pub struct ParsePageSizeError(String);

impl FromStr for PageSize {
    type Err = ParsePageSizeError;

    /// Accepts `2M`, `2MB`, `2MiB`, `2048kB`, `2048K`, `1G`, `1GiB` (case-insensitive).
    fn from_str(s: &str) -> Result<PageSize, ParsePageSizeError> {
        let err = || ParsePageSizeError(s.to_owned());
        let lower = s.trim().to_ascii_lowercase();
        let unit_end = lower
            .strip_suffix("ib")
            .or_else(|| lower.strip_suffix('b'))
            .unwrap_or(&lower);
        let (digits, scale) = match unit_end.as_bytes().last() {
            Some(b'k') => (&unit_end[..unit_end.len() - 1], 1),
            Some(b'm') => (&unit_end[..unit_end.len() - 1], 1024),
            Some(b'g') => (&unit_end[..unit_end.len() - 1], 1024 * 1024),
            _ => return Err(err()),
        };
        let n: u64 = digits.parse().map_err(|_| err())?;
        n.checked_mul(scale)
            .and_then(PageSize::from_kb)
            .ok_or_else(err)
    }
}

impl serde::Serialize for PageSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_spellings() {
        for s in ["2M", "2m", "2MB", "2MiB", "2048kB", "2048K", " 2M "] {
            assert_eq!(s.parse::<PageSize>(), Ok(PageSize::SIZE_2M), "{s}");
        }
        for s in ["1G", "1GB", "1gib", "1024M", "1048576kB"] {
            assert_eq!(s.parse::<PageSize>(), Ok(PageSize::SIZE_1G), "{s}");
        }
        for s in ["", "2", "M", "0M", "2T", "-2M", "2.5M"] {
            assert!(s.parse::<PageSize>().is_err(), "{s}");
        }
    }

    #[test]
    fn prints_like_hugetlbfs() {
        assert_eq!(PageSize::SIZE_2M.to_string(), "2M");
        assert_eq!(PageSize::SIZE_1G.to_string(), "1G");
        assert_eq!(PageSize::from_kb(64).unwrap().to_string(), "64K");
        assert_eq!(PageSize::SIZE_2M.sysfs_name(), "hugepages-2048kB");
    }

    #[test]
    fn page_math_rounds_up_for_need_and_down_for_have() {
        let p = PageSize::SIZE_2M;
        assert_eq!(p.pages_for_mib(0), 0);
        assert_eq!(p.pages_for_mib(1), 1);
        assert_eq!(p.pages_for_mib(512), 256);
        assert_eq!(p.pages_for_mib(513), 257);
        assert_eq!(PageSize::SIZE_1G.pages_for_mib(1025), 2);
        assert_eq!(p.mib_of(3), 6);
        assert_eq!(PageSize::from_kb(64).unwrap().mib_of(15), 0);
        assert_eq!(p.pages_for_mib(u64::MAX), u64::MAX / 2048 + 1);
    }
}
