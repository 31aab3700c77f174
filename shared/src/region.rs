//! Shared-memory regions: files on hugetlbfs or tmpfs mapped into the writer (read-write) and
//! into readers (read-only), each starting with a [`RegionHeader`].
//!
//! This is one of the modules allowed to use `unsafe` (with `qsbr`, `mem` and `flow`): it owns the
//! `mmap`/`munmap` calls and the open-file-description locks that make a writer exclusive and
//! reveal a reader that has gone away.
//!
//! Guarantees:
//! - A region file is created with mode 0600 and never grows or shrinks after creation, so a
//!   mapping stays valid for as long as it exists.
//! - Readers map with `PROT_READ` only: a stray write from a reader faults instead of corrupting
//!   the tables.
//! - Attaching checks magic, ABI version, layout hash and size before any offset in the region
//!   is trusted; a mismatch is an [`Error`], never undefined behaviour.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use crate::error::{Error, Result};
use crate::mem::Mem;

/// First bytes of every lace region.
pub const MAGIC: [u8; 8] = *b"LACEREG\0";

/// Size reserved for the header at the start of a region (one 4 KiB page).
pub const HEADER_SIZE: u64 = 4096;

/// What a region holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum RegionKind {
    /// The tables, written by control.
    Tables = 1,
    /// QSBR reader slots, written by the forwarder's workers.
    Qsbr = 2,
    /// The forwarder's status: port acknowledgements and counters ([`crate::status`]).
    Status = 3,
    /// The forwarder's flow table ([`crate::flow`]).
    Flows = 4,
}

/// The header at offset 0 of every region. Atomics are read by readers and written only by
/// the region's writer (for `Tables`) — see `tables` for the publication protocol.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct RegionHeader {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// ABI version of the layout ([`crate::ABI_VERSION`]).
    pub abi_version: u32,
    /// [`RegionKind`] as u32.
    pub kind: u32,
    /// Hash of every shared type's size, alignment and field offsets ([`crate::LAYOUT_HASH`]).
    pub layout_hash: u64,
    /// Total size of the mapping in bytes.
    pub region_size: u64,
    /// Kind-specific parameters fixed at creation (e.g. reader slot count).
    pub params: [u64; 4],
    /// Offset of the current root object (0 = nothing published yet).
    pub root: AtomicU64,
    /// Publication epoch, incremented after each publish; readers report the last one they saw.
    pub epoch: AtomicU64,
    /// Number of publications so far (for operators and tests).
    pub generation: AtomicU64,
    /// Highest arena offset ever handed out (writer bookkeeping; readers ignore it).
    pub high_water: AtomicU64,
    _reserved: [u64; 4],
}

/// Flags a region file is opened with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    ReadOnly,
    ReadWrite,
}

/// A mapped region. Dropping it unmaps the memory and closes the file (releasing its locks).
#[derive(Debug)]
pub struct Region {
    path: PathBuf,
    file: File,
    base: NonNull<u8>,
    len: usize,
    access: Access,
}

// SAFETY: the mapping is plain memory owned by this value; sharing the pointer between threads is
// sound because every access goes through `Mem` (immutable published data and atomics) or, for
// the writer, through `&mut Region`.
unsafe impl Send for Region {}
// SAFETY: see `Send`: `&Region` only hands out read access and atomics.
unsafe impl Sync for Region {}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn cpath(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::Invalid {
        what: format!("region path {} contains a NUL byte", path.display()),
    })
}

/// Block size of the filesystem holding `file`: the huge page size on hugetlbfs, 4 KiB on tmpfs.
fn fs_block_size(file: &File, path: &Path) -> Result<u64> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `st` is a valid, writable statfs buffer and the fd is open for the whole call.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io_err("statfs", path)(std::io::Error::last_os_error()));
    }
    // SAFETY: fstatfs returned 0, so it initialised the buffer.
    let st = unsafe { st.assume_init() };
    Ok((st.f_bsize as u64).max(4096))
}

impl Region {
    /// Creates a new region file of at least `size` bytes (rounded up to the filesystem's block
    /// size, i.e. the huge page size on hugetlbfs), mode 0600, fails if it exists.
    pub fn create(path: &Path, kind: RegionKind, size: u64, params: [u64; 4]) -> Result<Region> {
        let c = cpath(path)?;
        // SAFETY: `c` is a NUL-terminated path; flags and mode are plain integers.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io_err("create", path)(std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        let made = Self::init_new(path, file, kind, size, params);
        if made.is_err() {
            // Leave no half-made region behind: the next create would find it and fail.
            let _ = std::fs::remove_file(path);
        }
        made
    }

    fn init_new(
        path: &Path,
        file: File,
        kind: RegionKind,
        size: u64,
        params: [u64; 4],
    ) -> Result<Region> {
        let block = fs_block_size(&file, path)?;
        let size = size.max(HEADER_SIZE * 2).div_ceil(block) * block;
        file.set_len(size).map_err(io_err("resize", path))?;
        let region = Self::map(path.to_path_buf(), file, size, Access::ReadWrite)?;
        let hdr = RegionHeader {
            magic: MAGIC,
            abi_version: crate::ABI_VERSION,
            kind: kind as u32,
            layout_hash: crate::LAYOUT_HASH,
            region_size: size,
            params,
            root: AtomicU64::new(0),
            epoch: AtomicU64::new(1),
            generation: AtomicU64::new(0),
            high_water: AtomicU64::new(HEADER_SIZE),
            _reserved: [0; 4],
        };
        // SAFETY: the mapping is at least HEADER_SIZE bytes, page aligned and writable, and no
        // other process can have attached yet (the file was created exclusively just now).
        unsafe { region.base.as_ptr().cast::<RegionHeader>().write(hdr) };
        region.sync_header();
        Ok(region)
    }

    /// Opens an existing region for writing (the writer re-attaching after a restart).
    pub fn open_rw(path: &Path, kind: RegionKind) -> Result<Region> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_err("open", path))?;
        let len = file.metadata().map_err(io_err("stat", path))?.len();
        let region = Self::map(path.to_path_buf(), file, len, Access::ReadWrite)?;
        region.validate(kind)?;
        Ok(region)
    }

    /// Opens an existing region read-only (a reader attaching).
    pub fn open_ro(path: &Path, kind: RegionKind) -> Result<Region> {
        let file = File::open(path).map_err(io_err("open", path))?;
        let len = file.metadata().map_err(io_err("stat", path))?.len();
        let region = Self::map(path.to_path_buf(), file, len, Access::ReadOnly)?;
        region.validate(kind)?;
        Ok(region)
    }

    fn map(path: PathBuf, file: File, len: u64, access: Access) -> Result<Region> {
        if len < HEADER_SIZE {
            return Err(Error::Corrupt {
                path,
                what: format!("file is {len} bytes, smaller than the {HEADER_SIZE}-byte header"),
            });
        }
        let len = usize::try_from(len).map_err(|_| Error::Corrupt {
            path: path.clone(),
            what: "file larger than the address space".into(),
        })?;
        let prot = match access {
            Access::ReadOnly => libc::PROT_READ,
            Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        };
        // SAFETY: mapping a regular file we hold open; a null hint lets the kernel choose the
        // address; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENOMEM) {
                return Err(Error::Invalid {
                    what: format!(
                        "map {} ({len} bytes): not enough memory; on hugetlbfs this means too few \
                         free huge pages: reserve more (echo N > /proc/sys/vm/nr_hugepages, see \
                         /proc/meminfo HugePages_Free), make the region smaller, or put it on \
                         /dev/shm",
                        path.display()
                    ),
                });
            }
            return Err(io_err("map", &path)(err));
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| Error::Corrupt {
            path: path.clone(),
            what: "mmap returned null".into(),
        })?;
        Ok(Region {
            path,
            file,
            base,
            len,
            access,
        })
    }

    fn validate(&self, kind: RegionKind) -> Result<()> {
        let h = self.header();
        if h.magic != MAGIC {
            return Err(Error::BadMagic {
                path: self.path.clone(),
                found: h.magic,
            });
        }
        if h.abi_version != crate::ABI_VERSION || h.layout_hash != crate::LAYOUT_HASH {
            return Err(Error::AbiMismatch {
                path: self.path.clone(),
                found_abi: h.abi_version,
                want_abi: crate::ABI_VERSION,
                found_layout: h.layout_hash,
                want_layout: crate::LAYOUT_HASH,
            });
        }
        if h.kind != kind as u32 {
            return Err(Error::Corrupt {
                path: self.path.clone(),
                what: format!("region kind {} where {:?} was expected", h.kind, kind),
            });
        }
        if h.region_size != self.len as u64 {
            return Err(Error::Corrupt {
                path: self.path.clone(),
                what: format!("header says {} bytes, file has {}", h.region_size, self.len),
            });
        }
        Ok(())
    }

    /// The region's header.
    pub fn header(&self) -> &RegionHeader {
        // SAFETY: the mapping is page aligned and at least HEADER_SIZE bytes (checked in `map`);
        // RegionHeader is plain integers and atomics, valid for every bit pattern; fields other
        // than the atomics are only written before the file is visible to anyone else.
        unsafe { &*self.base.as_ptr().cast::<RegionHeader>() }
    }

    /// A read view of the whole region.
    pub fn mem(&self) -> Mem<'_> {
        // SAFETY: base/len describe a live mapping that outlives the returned borrow.
        unsafe { Mem::from_raw(self.base.as_ptr(), self.len) }
    }

    /// Raw base pointer and length for the writer's arena (read-write regions only).
    pub(crate) fn raw_mut(&mut self) -> Option<(NonNull<u8>, usize)> {
        (self.access == Access::ReadWrite).then_some((self.base, self.len))
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a region has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The region's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sync_header(&self) {
        // SAFETY: msync on the first page of our own live mapping.
        let _ = unsafe {
            libc::msync(
                self.base.as_ptr().cast(),
                HEADER_SIZE as usize,
                libc::MS_ASYNC,
            )
        };
    }

    /// Takes an exclusive open-file-description lock on `[start, start+len)` without waiting.
    /// Returns `Ok(false)` if another open file description holds a conflicting lock.
    pub fn try_lock(&self, start: u64, len: u64) -> Result<bool> {
        let mut fl = flock_for(libc::F_WRLCK, start, len);
        // SAFETY: F_OFD_SETLK with a valid flock struct on our open fd.
        let rc = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
        if rc == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
            _ => Err(io_err("lock", &self.path)(err)),
        }
    }

    /// Releases a lock taken with [`Region::try_lock`].
    pub fn unlock(&self, start: u64, len: u64) {
        let mut fl = flock_for(libc::F_UNLCK, start, len);
        // SAFETY: F_OFD_SETLK with a valid flock struct on our open fd.
        let _ = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    }

    /// Whether some other open file description holds a write lock on `[start, start+len)`;
    /// returns the holder's pid when the kernel reports one (−1 for OFD locks).
    pub fn lock_holder(&self, start: u64, len: u64) -> Result<Option<i32>> {
        let mut fl = flock_for(libc::F_WRLCK, start, len);
        // SAFETY: F_OFD_GETLK with a valid flock struct on our open fd.
        let rc = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
        if rc != 0 {
            return Err(io_err("query lock", &self.path)(
                std::io::Error::last_os_error(),
            ));
        }
        Ok((fl.l_type != libc::F_UNLCK as libc::c_short).then_some(fl.l_pid))
    }
}

fn flock_for(kind: libc::c_int, start: u64, len: u64) -> libc::flock {
    // SAFETY: flock is a plain C struct for which all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    fl.l_len = len as libc::off_t;
    fl.l_pid = 0; // required by F_OFD_* locks
    fl
}

impl Drop for Region {
    fn drop(&mut self) {
        // Release this description's locks (the writer's, a reader's slot) before the fd closes.
        // Closing alone is not enough while another thread forks: the child holds a copy of the
        // fd, and so of the open file description and its locks, until it execs, and a writer
        // reopened meanwhile would find itself busy. An unlock acts on the description itself.
        self.unlock(0, 0);
        // SAFETY: base/len are exactly what mmap returned; nothing borrows the mapping any more
        // (borrows of `Mem` are tied to `&self`).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "file mappings are not supported by miri")]
    fn a_dropped_region_releases_its_locks_while_a_copy_of_its_fd_lives() {
        let path = std::env::temp_dir().join(format!("lace-region-lock-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let first = Region::create(&path, RegionKind::Tables, 0, [0; 4]).unwrap();
        assert!(first.try_lock(0, HEADER_SIZE).unwrap());
        // What a child forked by another thread holds until it execs: the same open file
        // description, and so the same lock.
        let copy = first.file.try_clone().unwrap();
        drop(first);
        let second = Region::open_rw(&path, RegionKind::Tables).unwrap();
        let relocked = second.try_lock(0, HEADER_SIZE).unwrap();
        drop(copy);
        drop(second);
        std::fs::remove_file(&path).unwrap();
        assert!(
            relocked,
            "the dropped region's lock outlived it in the fd's copy"
        );
    }
}
