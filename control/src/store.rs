//! Control's allocation state on disk (standalone mode): one JSON file, replaced atomically.
//!
//! Guarantees:
//! - A save writes `<file>.tmp`, fsyncs it, renames it over `<file>` and fsyncs the directory,
//!   so after a crash the file holds either the previous or the new state, never a mix.
//! - A missing file is a first start ([`Store::load`] returns `None`). A file that cannot be
//!   read, parsed or checked is an error naming the file and the way out: starting empty would
//!   hand out addresses and ids that pods and tables still use.
//! - The file is created with mode 0600.
//!
//! In Kubernetes mode the same state is published as API objects instead
//! ([`crate::ipam::Ipam::allocation_specs`], [`crate::ipam::Ipam::network_ids`]).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::ipam::{Ipam, IpamConfig, IpamError, IpamState};

/// Why the state could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file-system operation failed.
    #[error(
        "{op} {path}: {source}; check that the directory exists and is writable by lace-control"
    )]
    Io {
        /// What was being done (`read`, `write`, `rename`, …).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a state this build can read.
    #[error(
        "{path} is not a valid lace-control state ({reason}); restore it from a backup — \
         deleting it makes control hand out addresses and ids that may still be in use"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong (parse error with line and column, or the version).
        reason: String,
    },
    /// The file parses but contradicts itself or the configuration.
    #[error("{path}: {source}")]
    Inconsistent {
        /// The file.
        path: PathBuf,
        /// The contradiction.
        #[source]
        source: Box<IpamError>,
    },
}

/// The state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    path: PathBuf,
}

impl Store {
    /// A store at `path` (e.g. `lace-state.json` beside the manifests directory).
    pub fn new(path: impl Into<PathBuf>) -> Store {
        Store { path: path.into() }
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn tmp_path(&self) -> PathBuf {
        let mut s = self.path.clone().into_os_string();
        s.push(".tmp");
        PathBuf::from(s)
    }

    fn io(&self, op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
        let path = path.to_owned();
        move |source| StoreError::Io { op, path, source }
    }

    /// The saved state; None when the file does not exist (first start).
    pub fn load(&self) -> Result<Option<IpamState>, StoreError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io("read", &self.path)(e)),
        };
        let state: IpamState = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        Ok(Some(state))
    }

    /// The saved [`Ipam`], checked against `config`; an empty one on first start.
    pub fn load_ipam(&self, config: IpamConfig) -> Result<Ipam, StoreError> {
        let inconsistent = |source| StoreError::Inconsistent {
            path: self.path.clone(),
            source: Box::new(source),
        };
        match self.load()? {
            Some(s) => Ipam::from_state(&s, config).map_err(inconsistent),
            None => Ipam::new(config).map_err(inconsistent),
        }
    }

    /// Replaces the saved state with `state`, atomically (see the module docs).
    pub fn save(&self, state: &IpamState) -> Result<(), StoreError> {
        let tmp = self.tmp_path();
        let json = serde_json::to_vec_pretty(state).map_err(|e| StoreError::Corrupt {
            path: tmp.clone(),
            reason: format!("cannot serialise: {e}"),
        })?;
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(self.io("create", &tmp))?;
        f.write_all(&json).map_err(self.io("write", &tmp))?;
        f.sync_all().map_err(self.io("fsync", &tmp))?;
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(self.io("rename", &self.path))?;
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(self.io("fsync directory", dir))?;
        Ok(())
    }
}
