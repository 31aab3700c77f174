//! The IPAM state shared by several `lace-control` processes, and this node's attachment marks.
//!
//! # Cross-process serialisation
//!
//! In the standalone demo both nodes' control processes run on one machine over the same
//! manifests and the same state file. Every mutation ([`SharedState::mutate`]) is a
//! read-modify-write under an exclusive `flock(2)` on `<state>.lock`:
//!
//! 1. take the lock (blocking; the holder's critical section is one load, one in-memory
//!    change and one atomic save — milliseconds);
//! 2. **reload** the state file (the other process may have changed it since we last looked);
//! 3. apply the change to that fresh state;
//! 4. if it changed anything, save it (write-temp, fsync, rename: [`crate::store::Store`]);
//! 5. release the lock.
//!
//! So two processes never hand out the same address, block, port, network id or node id: each
//! decides on the latest saved state, and no save can slip in between its read and its write.
//! This is the standalone analogue of Kubernetes' optimistic concurrency (read, modify, write
//! with `resourceVersion`, retry on conflict): the lock turns "retry on conflict" into "wait
//! your turn". Readers ([`SharedState::refresh`]) take the lock shared, so they never see a
//! half-written file (the rename makes that impossible anyway) and notice the other process's
//! changes by the file's (inode, size, mtime) stamp, polled by the daemon's main loop.
//!
//! A lock is released by the kernel when its holder dies, so a killed process never wedges
//! the other.
//!
//! # Attachment marks
//!
//! A lease exists from Allocate; its port is published only once the plugin has made the
//! interface (Attach). Which of this node's leases are attached is this node's own fact, kept
//! in `attached-<node>.json` beside the state file (replaced atomically by
//! [`crate::fsio::write_atomically`]; one writer: this process's event loop, which changes the
//! marks of a whole batch and saves them once). Other nodes' leases do not need the mark (the
//! compiler publishes ports only for this node's endpoints).

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::ipam::{Ipam, IpamConfig, IpamError};
use crate::store::{Store, StoreError};
use crate::world::AttachmentKey;

/// Why the shared state could not be read, locked or changed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The state file could not be loaded or saved.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// IPAM refused the change (nothing was saved).
    #[error(transparent)]
    Ipam(#[from] IpamError),
    /// The lock file could not be created or locked.
    #[error("lock {path}: {source}; check that the state directory is writable by lace-control")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The allocation state in the API server could not be read or written (Kubernetes mode).
    #[error(
        "allocation state in the API server ({object}): cannot {op}: {reason}; check that the \
         API server is reachable and that lace-control may read, watch and write it (the \
         lace-node ClusterRole and Role)"
    )]
    Api {
        /// The object or kind, e.g. `Claim backend.network`.
        object: String,
        /// What was being done.
        op: &'static str,
        /// The error.
        reason: String,
    },
    /// The allocation state in the API server is not a state this build can read.
    #[error(
        "allocation state in the API server ({object}) is not a valid lace-control state \
         ({reason}); restore it from a backup — deleting it makes control hand out addresses \
         and ids that may still be in use"
    )]
    ApiCorrupt {
        /// The object.
        object: String,
        /// What is wrong.
        reason: String,
    },
    /// The node's copy of its allocation objects and the deletions it owes the API server
    /// could not be read or written (Kubernetes mode).
    #[error(
        "{op} {path}: {reason}; the file is this node's copy of its allocations and lists \
         releases the API server has not been told of yet — fix its directory's permissions; \
         a corrupt file may be deleted while the API server is reachable (releases it listed \
         then leave their NetworkEndpoints until their pods are deleted)"
    )]
    Local {
        /// `read`, `parse`, `serialise`, `write`, `rename`, ...
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The attachment marks could not be read or written.
    #[error("{op} {path}: {reason}; the file lists this node's attached interfaces — fix its directory's permissions, or delete a corrupt file (the node's pods must then be re-added)")]
    Attached {
        /// `read`, `parse`, `write` or `rename`.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// What identifies a version of the state file without reading it.
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

/// The IPAM state of the cluster as this process last saw it, changed only under the
/// cross-process lock (see the module docs).
#[derive(Debug)]
pub struct SharedState {
    store: Store,
    lock_path: PathBuf,
    config: IpamConfig,
    ipam: Ipam,
    stamp: Option<Stamp>,
}

impl SharedState {
    /// Opens (or, on first start, creates the directory of) the state file `path`, locking
    /// through `lock_path`, and loads it.
    pub fn open(
        path: &Path,
        lock_path: &Path,
        config: IpamConfig,
    ) -> Result<SharedState, StateError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StateError::Lock {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let store = Store::new(path);
        let mut s = SharedState {
            ipam: Ipam::new(config)?,
            store,
            lock_path: lock_path.to_path_buf(),
            config,
            stamp: None,
        };
        s.reload()?;
        Ok(s)
    }

    fn lock(&self, exclusive: bool) -> Result<Flock<File>, StateError> {
        let err = |source| StateError::Lock {
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

    fn reload(&mut self) -> Result<(), StateError> {
        let _guard = self.lock(false)?;
        self.stamp = stamp(self.store.path());
        self.ipam = self.store.load_ipam(self.config)?;
        Ok(())
    }

    /// The state as last loaded or changed by this process.
    pub fn ipam(&self) -> &Ipam {
        &self.ipam
    }

    /// Reloads the file if another process changed it since this one last read or wrote it.
    /// Returns whether it did.
    pub fn refresh(&mut self) -> Result<bool, StateError> {
        if stamp(self.store.path()) == self.stamp {
            return Ok(false);
        }
        self.reload()?;
        Ok(true)
    }

    /// Runs `f` on the latest saved state under the exclusive lock and saves the result if it
    /// changed anything (see the module docs). On an error from `f` nothing is saved and the
    /// freshly loaded state is kept (it is the truth on disk).
    pub fn mutate<R>(
        &mut self,
        mut f: impl FnMut(&mut Ipam) -> Result<R, IpamError>,
    ) -> Result<R, StateError> {
        let _guard = self.lock(true)?;
        let mut ipam = self.store.load_ipam(self.config)?;
        let before = ipam.generation();
        let out = f(&mut ipam);
        if out.is_ok() && ipam.generation() != before {
            self.store.save(&ipam.to_state())?;
        }
        self.stamp = stamp(self.store.path());
        if out.is_ok() {
            self.ipam = ipam;
        } else {
            // `f` may have failed half-way in memory; the file is unchanged: reload it.
            self.ipam = self.store.load_ipam(self.config)?;
        }
        Ok(out?)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AttachedEntry {
    container_id: String,
    ifname: String,
}

/// This node's attached leases, persisted (see the module docs) or in memory.
#[derive(Debug)]
pub struct AttachedMarks {
    path: Option<PathBuf>,
    set: BTreeSet<AttachmentKey>,
}

impl AttachedMarks {
    /// Loads the marks at `path` (none when the file does not exist).
    pub fn open(path: &Path) -> Result<AttachedMarks, StateError> {
        let err = |op, reason: String| StateError::Attached {
            op,
            path: path.to_path_buf(),
            reason,
        };
        let set = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice::<Vec<AttachedEntry>>(&bytes)
                .map_err(|e| err("parse", e.to_string()))?
                .into_iter()
                .map(|e| AttachmentKey {
                    container_id: e.container_id,
                    ifname: e.ifname,
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
            Err(e) => return Err(err("read", e.to_string())),
        };
        Ok(AttachedMarks {
            path: Some(path.to_path_buf()),
            set,
        })
    }

    /// Marks kept in memory only (a process whose pods do not outlive it: tests, benches).
    pub fn in_memory() -> AttachedMarks {
        AttachedMarks {
            path: None,
            set: BTreeSet::new(),
        }
    }

    /// The attached keys.
    pub fn keys(&self) -> &BTreeSet<AttachmentKey> {
        &self.set
    }

    /// Whether `key` is attached.
    pub fn contains(&self, key: &AttachmentKey) -> bool {
        self.set.contains(key)
    }

    /// Marks `key` attached (saved by [`AttachedMarks::save`]); whether it was new.
    pub fn insert(&mut self, key: &AttachmentKey) -> bool {
        self.set.insert(key.clone())
    }

    /// Unmarks `key` (saved by [`AttachedMarks::save`]); whether it was marked.
    pub fn remove(&mut self, key: &AttachmentKey) -> bool {
        self.set.remove(key)
    }

    /// Writes the marks (nothing for in-memory marks).
    pub fn save(&self) -> Result<(), StateError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let err = |op, reason: String| StateError::Attached {
            op,
            path: path.clone(),
            reason,
        };
        let entries: Vec<AttachedEntry> = self
            .set
            .iter()
            .map(|k| AttachedEntry {
                container_id: k.container_id.clone(),
                ifname: k.ifname.clone(),
            })
            .collect();
        let json = serde_json::to_vec_pretty(&entries).map_err(|e| err("write", e.to_string()))?;
        crate::fsio::write_atomically(path, &json, 0o600).map_err(|e| err(e.op, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NetworkType;
    use crate::ipam::{AllocateRequest, NetworkDef, PodRef};

    fn def() -> NetworkDef {
        NetworkDef {
            kind: NetworkType::L3,
            v4: Some(("10.40.0.0/16".parse().unwrap(), Some(24))),
            v6: None,
        }
    }

    fn req(c: &str, node: &str) -> AllocateRequest {
        AllocateRequest {
            key: AttachmentKey {
                container_id: c.into(),
                ifname: "eth0".into(),
            },
            network: "backend".into(),
            node: node.into(),
            pod: PodRef {
                namespace: "ns".into(),
                name: c.into(),
                uid: String::new(),
            },
            identity: None,
        }
    }

    #[test]
    fn two_handles_on_one_file_never_hand_out_the_same_address() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let lock = dir.path().join("state.json.lock");
        let cfg = IpamConfig::default();
        let mut a = SharedState::open(&path, &lock, cfg).unwrap();
        let mut b = SharedState::open(&path, &lock, cfg).unwrap();
        let net_a = a.mutate(|i| i.ensure_network("backend", &def())).unwrap();
        // b has not refreshed: its mutation still sees a's network (reloaded under the lock).
        let net_b = b.mutate(|i| i.ensure_network("backend", &def())).unwrap();
        assert_eq!(net_a, net_b);
        a.mutate(|i| i.ensure_node("node-a")).unwrap();
        b.mutate(|i| i.ensure_node("node-a")).unwrap();
        let la = a.mutate(|i| i.allocate(&req("c1", "node-a"))).unwrap();
        let lb = b.mutate(|i| i.allocate(&req("c2", "node-a"))).unwrap();
        assert_ne!(la.addresses[0].address, lb.addresses[0].address);
        assert_ne!(la.port, lb.port);
        assert_ne!(la.endpoint_id, lb.endpoint_id);
        // a learns of b's lease by refreshing.
        assert!(a.ipam().lease(&lb.key).is_none());
        assert!(a.refresh().unwrap());
        assert_eq!(a.ipam().lease(&lb.key), Some(&lb));
        assert!(!a.refresh().unwrap(), "nothing changed since");
    }

    #[test]
    fn concurrent_processes_simulated_by_threads_get_distinct_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let lock = dir.path().join("state.json.lock");
        let cfg = IpamConfig::default();
        let mut s = SharedState::open(&path, &lock, cfg).unwrap();
        s.mutate(|i| {
            i.ensure_network("backend", &def())?;
            i.ensure_node("node-a")
        })
        .unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (path, lock) = (path.clone(), lock.clone());
                std::thread::spawn(move || {
                    let mut s = SharedState::open(&path, &lock, cfg).unwrap();
                    (0..10)
                        .map(|i| {
                            s.mutate(|ipam| ipam.allocate(&req(&format!("t{t}-{i}"), "node-a")))
                                .unwrap()
                                .addresses[0]
                                .address
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<_> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "an address was handed out twice");
        s.refresh().unwrap();
        assert_eq!(s.ipam().leases().count(), 40);
    }

    #[test]
    fn a_refused_change_saves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut s = SharedState::open(&path, &dir.path().join("l"), IpamConfig::default()).unwrap();
        let e = s.mutate(|i| i.allocate(&req("c1", "node-a"))).unwrap_err();
        assert!(
            matches!(e, StateError::Ipam(IpamError::UnknownNetwork { .. })),
            "{e}"
        );
        assert!(!path.exists());
    }

    #[test]
    fn attached_marks_persist() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/attached-node-a.json");
        let k = AttachmentKey {
            container_id: "c1".into(),
            ifname: "eth0".into(),
        };
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut m = AttachedMarks::open(&path).unwrap();
        assert!(m.insert(&k));
        assert!(!m.insert(&k));
        m.save().unwrap();
        let mut m2 = AttachedMarks::open(&path).unwrap();
        assert!(m2.contains(&k));
        assert!(m2.remove(&k));
        m2.save().unwrap();
        assert!(AttachedMarks::open(&path).unwrap().keys().is_empty());
        std::fs::write(&path, b"{").unwrap();
        assert!(AttachedMarks::open(&path).is_err());
    }
}
