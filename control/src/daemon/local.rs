//! What Kubernetes mode's control keeps of the allocation state on the node's disk
//! (`<state-dir>/cluster-<node>.json`, [`super::config::NodePaths::cluster_file`]), so that it
//! serves DEL and CHECK while the API server is away — even when it starts then — and never
//! loses a release (ADR 0041; [`super::cluster_state::ClusterState`] decides what goes in it):
//!
//! - this node's allocation objects as last seen (its endpoints, blocks and l2 claims, and every
//!   network's and node's id claims), written after every change this control makes, read when control starts and the
//!   API server cannot be reached;
//! - the deletions it owes the API server ([`Owed`]): a DEL, GC or pod gone releases a lease,
//!   and the objects the API server could not delete then are deleted when it returns.
//!
//! The file is versioned JSON, replaced atomically ([`crate::fsio`]) before the change it
//! records is answered.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
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
struct Envelope<T> {
    version: u32,
    #[serde(flatten)]
    content: T,
}

/// The file, holding a `T`.
#[derive(Debug)]
pub struct LocalFile {
    path: PathBuf,
}

impl LocalFile {
    /// The file at `path` (created by the first save).
    pub fn new(path: PathBuf) -> LocalFile {
        LocalFile { path }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, op: &'static str, reason: String) -> StateError {
        StateError::Local {
            op,
            path: self.path.clone(),
            reason,
        }
    }

    /// What the file holds; `None` when there is no file.
    pub fn load<T: DeserializeOwned>(&self) -> Result<Option<T>, StateError> {
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.error("read", e.to_string())),
        };
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let v: Version =
            serde_json::from_slice(&text).map_err(|e| self.error("parse", e.to_string()))?;
        if v.version != VERSION {
            return Err(self.error(
                "parse",
                format!("format version {} (this build reads {VERSION})", v.version),
            ));
        }
        let file: Envelope<T> =
            serde_json::from_slice(&text).map_err(|e| self.error("parse", e.to_string()))?;
        Ok(Some(file.content))
    }

    /// Replaces the file's content with `content`.
    pub fn save<T: Serialize>(&self, content: &T) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(&Envelope {
            version: VERSION,
            content,
        })
        .map_err(|e| self.error("serialise", e.to_string()))?;
        crate::fsio::write_atomically(&self.path, &bytes, 0o600)
            .map_err(|e| self.error(e.op, e.source.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Content {
        owed: Vec<Owed>,
    }

    fn owed(name: &str) -> Owed {
        Owed {
            kind: "NetworkEndpoint".into(),
            namespace: "shop".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    #[test]
    fn what_is_saved_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let f = LocalFile::new(dir.path().join("cluster-node-a.json"));
        assert_eq!(f.load::<Content>().unwrap(), None, "no file");
        let c = Content {
            owed: vec![owed("a"), owed("b")],
        };
        f.save(&c).unwrap();
        assert_eq!(f.load::<Content>().unwrap(), Some(c));
        f.save(&Content { owed: Vec::new() }).unwrap();
        assert_eq!(
            f.load::<Content>().unwrap(),
            Some(Content { owed: Vec::new() })
        );
    }

    #[test]
    fn a_corrupt_or_newer_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster-node-a.json");
        let f = LocalFile::new(path.clone());
        std::fs::write(&path, b"{not json").unwrap();
        let e = f.load::<Content>().unwrap_err().to_string();
        assert!(
            e.contains("cluster-node-a.json") && e.contains("parse"),
            "{e}"
        );
        std::fs::write(&path, br#"{"version": 9, "owed": []}"#).unwrap();
        let e = f.load::<Content>().unwrap_err().to_string();
        assert!(e.contains("format version 9"), "{e}");
    }
}
