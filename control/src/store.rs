//! Control's allocation state on disk (standalone mode): one JSON file, replaced atomically.
//!
//! Guarantees:
//! - A save replaces the file atomically ([`crate::fsio::write_atomically`]): after a crash the
//!   file holds either the previous or the new state, never a mix.
//! - A missing file is a first start ([`Store::load`] returns `None`). A file that cannot be
//!   read, parsed or checked is an error naming the file and the way out: starting empty would
//!   hand out addresses and ids that pods and tables still use.
//! - The file is created with mode 0600.
//!
//! In Kubernetes mode the same records are API objects instead (`daemon::cluster_state`,
//! [`crate::ipam::allocation_name`], [`crate::ipam::endpoint_name`]).

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

    /// The saved state; None when the file does not exist (first start).
    pub fn load(&self) -> Result<Option<IpamState>, StoreError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StoreError::Io {
                    op: "read",
                    path: self.path.clone(),
                    source,
                })
            }
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
        let json = serde_json::to_vec_pretty(state).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            reason: format!("cannot serialise: {e}"),
        })?;
        crate::fsio::write_atomically(&self.path, &json, 0o600).map_err(|e| StoreError::Io {
            op: e.op,
            path: e.path,
            source: e.source,
        })
    }
}
