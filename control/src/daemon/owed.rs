//! Deletions control owes the API server (Kubernetes mode), kept on the node's disk.
//!
//! A CNI DEL (or GC, or a pod gone) releases a lease: its `NetworkEndpoint`, its l2 address
//! claims and a block given back are deleted in the API server. When the API server cannot be
//! reached, the release is still taken — the pod's port leaves the tables, DEL is answered —
//! and each deletion is written here, so that it is made when the API server returns, even
//! across a restart of control ([`super::cluster_state::ClusterState`]). Until then the
//! objects are left out of control's view, as if they were gone.
//!
//! The file (`owed-<node>.json` in the state directory) is replaced atomically
//! ([`crate::fsio`]) before the release is answered.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::StateError;

/// The file's format version.
const VERSION: u32 = 1;

/// One deletion owed: the object, and the uid it had (a precondition of the deletion: an
/// object made again under that name since is not deleted).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Owed {
    /// `NetworkEndpoint`, `Neighbor` or `Allocation`.
    pub kind: String,
    /// Empty for cluster-scoped kinds.
    #[serde(default)]
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// Its uid as control last saw it (empty: unknown, deleted whatever it is).
    #[serde(default)]
    pub uid: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct File {
    version: u32,
    owed: Vec<Owed>,
}

/// The deletions owed, as kept in their file.
#[derive(Debug)]
pub struct OwedFile {
    path: PathBuf,
}

impl OwedFile {
    /// The file at `path` (created with the first deletion owed).
    pub fn new(path: PathBuf) -> OwedFile {
        OwedFile { path }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, op: &'static str, reason: String) -> StateError {
        StateError::Owed {
            op,
            path: self.path.clone(),
            reason,
        }
    }

    /// The deletions the file holds; none when there is no file.
    pub fn load(&self) -> Result<Vec<Owed>, StateError> {
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.error("read", e.to_string())),
        };
        let file: File =
            serde_json::from_slice(&text).map_err(|e| self.error("parse", e.to_string()))?;
        if file.version != VERSION {
            return Err(self.error(
                "parse",
                format!(
                    "format version {} (this build reads {VERSION})",
                    file.version
                ),
            ));
        }
        Ok(file.owed)
    }

    /// Replaces the file's content with `owed` (the file is removed when nothing is owed).
    pub fn save(&self, owed: &[Owed]) -> Result<(), StateError> {
        if owed.is_empty() {
            return match std::fs::remove_file(&self.path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(self.error("remove", e.to_string())),
            };
        }
        let file = File {
            version: VERSION,
            owed: owed.to_vec(),
        };
        let bytes =
            serde_json::to_vec_pretty(&file).map_err(|e| self.error("serialise", e.to_string()))?;
        crate::fsio::write_atomically(&self.path, &bytes, 0o600)
            .map_err(|e| self.error(e.op, e.source.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owed(name: &str) -> Owed {
        Owed {
            kind: "NetworkEndpoint".into(),
            namespace: "shop".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    #[test]
    fn saved_deletions_load_back_and_an_empty_list_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = OwedFile::new(dir.path().join("owed-node-a.json"));
        assert_eq!(f.load().unwrap(), Vec::new(), "no file: nothing owed");
        let both = vec![owed("a"), owed("b")];
        f.save(&both).unwrap();
        assert_eq!(f.load().unwrap(), both);
        f.save(&[]).unwrap();
        assert!(!f.path().exists());
        assert_eq!(f.load().unwrap(), Vec::new());
    }

    #[test]
    fn a_corrupt_or_newer_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("owed-node-a.json");
        let f = OwedFile::new(path.clone());
        std::fs::write(&path, b"{not json").unwrap();
        let e = f.load().unwrap_err().to_string();
        assert!(e.contains("owed-node-a.json") && e.contains("parse"), "{e}");
        std::fs::write(&path, br#"{"version": 9, "owed": []}"#).unwrap();
        let e = f.load().unwrap_err().to_string();
        assert!(e.contains("format version 9"), "{e}");
    }
}
