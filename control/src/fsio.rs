//! The one way control replaces a file it owns (allocation state, attachment marks, status):
//! written whole to `<file>.tmp` with the given mode, fsynced, renamed over `<file>`, and the
//! directory fsynced. After a crash the file holds the previous or the new content, never a
//! mix; readers never see a half-written file. The directory must exist (a state file whose
//! directory vanished is an error to report, not something to paper over).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A step of [`write_atomically`] failed; nothing was replaced.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path}: {source}; check that the directory exists and is writable by lace-control")]
pub struct WriteError {
    /// What was being done: `create`, `write`, `fsync`, `rename`, `fsync directory`.
    pub op: &'static str,
    /// The file or directory.
    pub path: PathBuf,
    /// The operating system's error.
    #[source]
    pub source: std::io::Error,
}

/// Replaces `path` with `bytes`, atomically (see the module docs). `mode` applies to a newly
/// created file (e.g. `0o600` for state only control may read).
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<(), WriteError> {
    let fail = |op: &'static str, p: &Path| {
        let path = p.to_path_buf();
        move |source| WriteError { op, path, source }
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(fail("create", &tmp))?;
    f.write_all(bytes).map_err(fail("write", &tmp))?;
    f.sync_all().map_err(fail("fsync", &tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(fail("rename", path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(fail("fsync directory", dir))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn replaces_whole_files_with_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let path = dir.path().join("sub/state.json");
        write_atomically(&path, b"one", 0o600).unwrap();
        write_atomically(&path, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!dir.path().join("sub/state.json.tmp").exists());
        let e = write_atomically(&dir.path().join("gone/state.json"), b"", 0o600).unwrap_err();
        assert_eq!(e.op, "create");
        assert!(e.to_string().contains("gone/state.json.tmp"), "{e}");
    }
}
