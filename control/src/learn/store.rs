//! Where the learning records live, so that every node's control reads and writes the same
//! ones: [`LearnStore`], with [`FileStore`] for standalone mode (this module) and
//! [`super::kube::ObjectStore`] for Kubernetes mode (`FDBEntry` and `Neighbor` objects, ADR
//! 0032).
//!
//! # The standalone file
//!
//! `<state>.learned` beside the shared IPAM state file (both nodes' controls share it, as they
//! share the state), a [`LearnedState`] as JSON, replaced atomically ([`crate::fsio`]), mode
//! 0600. Every change is a read-modify-write under an exclusive `flock(2)` of
//! `<state>.learned.lock` — its own lock, not the IPAM state's: learning writes come with
//! traffic, allocations with pods, and neither should wait for the other. Reads take the lock
//! shared and notice other processes' writes by the file's (inode, size, mtime). A missing
//! file is an empty table; one that does not parse is an error naming the file (the records
//! are re-learned from traffic, so deleting it is the way out, unlike the IPAM state).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nix::fcntl::{Flock, FlockArg};

use super::{LearnedState, LearnedTable, Outcome};

/// Why the learning records could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LearnStoreError {
    /// A file operation failed.
    #[error("{op} {path}: {source}; check that the state directory is writable by lace-control")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a learning table this build reads.
    #[error(
        "{path} is not a valid table of learned MACs ({reason}); delete it — the MACs are \
         learned again from the VMs' next announcements"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The API server refused or failed a request (Kubernetes mode).
    #[error(
        "learned MACs (FDBEntry/Neighbor objects): cannot {op}: {reason}; check that the API \
         server is reachable and that lace-control may list, create, update and delete them"
    )]
    Api {
        /// What was being done.
        op: &'static str,
        /// The error.
        reason: String,
    },
    /// Writes kept meeting conflicts (Kubernetes mode).
    #[error(
        "learned MACs: {attempts} writes in a row met a newer version written by another \
         control; retrying with the next batch"
    )]
    Contended {
        /// How many times.
        attempts: u32,
    },
}

/// The learning records shared by every node's control (see the module docs).
pub trait LearnStore: Send + std::fmt::Debug {
    /// Re-reads what other controls changed since this store last read or wrote; whether
    /// anything did.
    fn refresh(&mut self) -> Result<bool, LearnStoreError>;

    /// The table as last read or written.
    fn table(&self) -> &LearnedTable;

    /// Runs `f` on the latest table and keeps what it changed, atomically with respect to
    /// every other control. `f` may run more than once (after a conflict), each time on the
    /// latest table, so it must be a function of the table it is given. Nothing is written
    /// when `f` reports no change.
    fn mutate(
        &mut self,
        f: &mut dyn FnMut(&mut LearnedTable) -> Outcome,
    ) -> Result<Outcome, LearnStoreError>;
}

/// What identifies a version of the file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        ino: m.ino(),
        len: m.len(),
        mtime: m.modified().ok(),
    })
}

/// The standalone store: a file shared by the controls of one machine (see the module docs).
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    lock_path: PathBuf,
    table: LearnedTable,
    stamp: Option<Stamp>,
}

impl FileStore {
    /// The file beside the IPAM state file `state`: `<state>.learned`.
    pub fn path_for(state: &Path) -> PathBuf {
        let mut s = state.as_os_str().to_owned();
        s.push(".learned");
        PathBuf::from(s)
    }

    /// Opens `path` (absent: an empty table), locking through `<path>.lock`.
    pub fn open(path: &Path) -> Result<FileStore, LearnStoreError> {
        let mut lock = path.as_os_str().to_owned();
        lock.push(".lock");
        let mut s = FileStore {
            path: path.to_path_buf(),
            lock_path: PathBuf::from(lock),
            table: LearnedTable::new(),
            stamp: None,
        };
        s.reload()?;
        Ok(s)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self, exclusive: bool) -> Result<Flock<File>, LearnStoreError> {
        let err = |source| LearnStoreError::Io {
            op: "lock",
            path: self.lock_path.clone(),
            source,
        };
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&self.lock_path)
            .map_err(err)?;
        let arg = if exclusive {
            FlockArg::LockExclusive
        } else {
            FlockArg::LockShared
        };
        Flock::lock(f, arg).map_err(|(_, e)| err(std::io::Error::from(e)))
    }

    fn load(&self) -> Result<LearnedTable, LearnStoreError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LearnedTable::new()),
            Err(source) => {
                return Err(LearnStoreError::Io {
                    op: "read",
                    path: self.path.clone(),
                    source,
                })
            }
        };
        let corrupt = |reason: String| LearnStoreError::Corrupt {
            path: self.path.clone(),
            reason,
        };
        let state: LearnedState =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        LearnedTable::from_state(state).map_err(corrupt)
    }

    fn reload(&mut self) -> Result<(), LearnStoreError> {
        let _guard = self.lock(false)?;
        self.stamp = stamp(&self.path);
        self.table = self.load()?;
        Ok(())
    }
}

impl LearnStore for FileStore {
    fn refresh(&mut self) -> Result<bool, LearnStoreError> {
        if stamp(&self.path) == self.stamp {
            return Ok(false);
        }
        self.reload()?;
        Ok(true)
    }

    fn table(&self) -> &LearnedTable {
        &self.table
    }

    fn mutate(
        &mut self,
        f: &mut dyn FnMut(&mut LearnedTable) -> Outcome,
    ) -> Result<Outcome, LearnStoreError> {
        let _guard = self.lock(true)?;
        let mut table = self.load()?;
        let out = f(&mut table);
        if out.changed {
            let json =
                serde_json::to_vec(&table.to_state()).map_err(|e| LearnStoreError::Corrupt {
                    path: self.path.clone(),
                    reason: format!("cannot serialise: {e}"),
                })?;
            crate::fsio::write_atomically(&self.path, &json, 0o600).map_err(|e| {
                LearnStoreError::Io {
                    op: e.op,
                    path: e.path,
                    source: e.source,
                }
            })?;
        }
        self.stamp = stamp(&self.path);
        self.table = table;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Location, MacRecord, Origin};
    use super::*;
    use lace_shared::types::MacAddr;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lace-learned-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn record(mac: u8, sequence: u32) -> MacRecord {
        MacRecord {
            network: "vms".into(),
            mac: MacAddr([0x52, 0, 0, 0, 0, mac]),
            origin: Origin::Learned,
            addresses: Default::default(),
            active: Location {
                node: "a".into(),
                endpoint: 1,
            },
            pending: None,
            sequence,
            last_seen_ms: 1,
        }
    }

    #[test]
    fn two_controls_share_one_file_and_see_each_others_changes() {
        let d = dir("share");
        let path = FileStore::path_for(&d.join("lace-state.json"));
        let mut a = FileStore::open(&path).unwrap();
        let mut b = FileStore::open(&path).unwrap();
        assert!(a.table().records().is_empty(), "absent: empty");
        let out = a
            .mutate(&mut |t| {
                t.insert(record(1, 1));
                Outcome {
                    changed: true,
                    ..Outcome::default()
                }
            })
            .unwrap();
        assert!(out.changed);
        assert!(b.refresh().unwrap(), "b notices a's write");
        assert_eq!(b.table(), a.table());
        assert!(!b.refresh().unwrap(), "nothing new");
        // b changes on top of what it loads under the lock, not of a stale copy.
        b.mutate(&mut |t| {
            t.insert(record(2, 1));
            Outcome {
                changed: true,
                ..Outcome::default()
            }
        })
        .unwrap();
        assert_eq!(b.table().records().len(), 2);
        // An unchanged outcome writes nothing.
        let before = std::fs::metadata(&path).unwrap().modified().unwrap();
        a.mutate(&mut |_| Outcome::default()).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            before
        );
        assert_eq!(a.table().records().len(), 2, "the mutation saw b's record");
        // Mode 0600.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A corrupt file is an error naming it and the way out.
        std::fs::write(&path, b"{not json").unwrap();
        let e = b.refresh().unwrap_err().to_string();
        assert!(
            e.contains(&path.display().to_string()) && e.contains("delete it"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
