//! The learn rings of this node's forwarder, read by a thread of control ([`spawn`]) that
//! wakes the event loop: with the reports ([`Wake::Reports`]) and when another control changed
//! the shared learning records ([`Wake::StoreChanged`]) — so that a VM's announcement on one
//! node reaches every node's tables in one round, not at the next tick.
//!
//! The thread polls every [`POLL`]: the rings with one atomic load each when nothing is new,
//! the records' [`StoreSignal`] with one `stat` of the file (standalone) or one atomic load
//! of the object store's change counter (Kubernetes mode). It maps the forwarder's status region read-only and
//! follows a forwarder restart (a new region file): the first region is read from its current
//! end (what came before control started is not acted on: it may be older than what other
//! controls recorded since), a later one from its start (all of it is newer).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lace_shared::learn::LearnEvent;
use lace_shared::status::{LearnCursor, LearnRead, StatusReader};

/// How often the thread looks.
pub const POLL: Duration = Duration::from_millis(2);
/// How often it checks whether the forwarder replaced its status region.
const REOPEN_EVERY: u32 = 50;

/// What the thread wakes the loop with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Reports read from the rings, and how many were lost.
    Reports(Vec<LearnEvent>, LearnRead),
    /// Another control changed the shared records (the file, or the API objects).
    StoreChanged,
}

struct Open {
    reader: StatusReader,
    ino: u64,
    cursor: LearnCursor,
}

/// The reader of one forwarder's learn rings.
pub struct Intake {
    path: PathBuf,
    open: Option<Open>,
    /// Whether a region was read before (a later one is read from its start).
    seen_one: bool,
    polls: u32,
}

impl std::fmt::Debug for Intake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intake")
            .field("path", &self.path)
            .field("open", &self.open.is_some())
            .finish()
    }
}

fn inode(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

impl Intake {
    /// Reads the status region at `path` (the forwarder's, beside its tables) once it exists.
    pub fn new(path: &Path) -> Intake {
        Intake {
            path: path.to_path_buf(),
            open: None,
            seen_one: false,
            polls: 0,
        }
    }

    /// Appends what the forwarder reported since the last call to `out`.
    pub fn poll(&mut self, out: &mut Vec<LearnEvent>) -> LearnRead {
        self.polls = self.polls.wrapping_add(1);
        let check = self.open.is_none() || self.polls % REOPEN_EVERY == 0;
        if check {
            let current = inode(&self.path);
            let stale = match (&self.open, current) {
                (Some(o), Some(ino)) => o.ino != ino,
                (Some(_), None) => true,
                (None, _) => true,
            };
            if stale {
                self.open = current.and_then(|ino| {
                    let reader = StatusReader::open(&self.path).ok()?;
                    let cursor = if self.seen_one {
                        reader.learn_cursor_from_start()
                    } else {
                        reader.learn_cursor()
                    };
                    self.seen_one = true;
                    Some(Open {
                        reader,
                        ino,
                        cursor,
                    })
                });
            }
        }
        match &mut self.open {
            Some(o) => o.reader.read_learned(&mut o.cursor, out),
            None => LearnRead::default(),
        }
    }
}

/// What tells the thread that another control changed the shared records.
#[derive(Debug, Clone)]
pub enum StoreSignal {
    /// The records' file (standalone mode): one `stat` per look.
    File(PathBuf),
    /// A counter the store's watch thread bumps per event (Kubernetes mode,
    /// [`super::kube::ObjectStore::changes`]): one atomic load per look.
    Counter(Arc<AtomicU64>),
}

/// What a look at a [`StoreSignal`] saw: a different value means a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    File(Option<(u64, u64, Option<SystemTime>)>),
    Counter(u64),
}

impl StoreSignal {
    fn look(&self) -> Seen {
        match self {
            StoreSignal::File(path) => Seen::File(
                std::fs::metadata(path)
                    .ok()
                    .map(|m| (m.ino(), m.len(), m.modified().ok())),
            ),
            StoreSignal::Counter(c) => Seen::Counter(c.load(Ordering::Acquire)),
        }
    }
}

/// Starts the thread: polls `intake` and the records' `signal` every [`POLL`] and calls
/// `wake` with what it found; stops when `wake` returns false.
pub fn spawn(
    mut intake: Intake,
    signal: StoreSignal,
    mut wake: impl FnMut(Wake) -> bool + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("learn-intake".into())
        .spawn(move || {
            let mut last = signal.look();
            let mut out = Vec::new();
            loop {
                std::thread::sleep(POLL);
                let read = intake.poll(&mut out);
                if (!out.is_empty() || read.lost > 0)
                    && !wake(Wake::Reports(std::mem::take(&mut out), read))
                {
                    return;
                }
                let now = signal.look();
                if now != last {
                    last = now;
                    if !wake(Wake::StoreChanged) {
                        return;
                    }
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lace_shared::learn::LearnKind;
    use lace_shared::status::{status_path, StatusWriter};
    use lace_shared::types::{MacAddr, NetworkId, PortId};

    fn event(i: u8) -> LearnEvent {
        LearnEvent {
            port: PortId(1),
            endpoint: 7,
            network: NetworkId(1),
            kind: LearnKind::Rarp,
            mac: MacAddr([0x52, 0, 0, 0, 0, i]),
            ip: None,
            at_ns: u64::from(i),
        }
    }

    #[test]
    fn follows_the_forwarder_through_a_restart() {
        let dir = std::env::temp_dir().join(format!("lace-intake-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = status_path(&dir, "t");
        let mut intake = Intake::new(&path);
        let mut out = Vec::new();
        // No forwarder yet: nothing, no error.
        assert_eq!(intake.poll(&mut out), LearnRead::default());
        let w = StatusWriter::create(&path, 1, &["a"]).unwrap();
        // What the forwarder reported before control looked is not acted on.
        w.learn_writer(0).unwrap().push(&event(1));
        intake.poll(&mut out);
        assert!(out.is_empty());
        w.learn_writer(0).unwrap().push(&event(2));
        let got = intake.poll(&mut out);
        assert_eq!((got.read, out.clone()), (1, vec![event(2)]));
        // The forwarder restarts: a new region; what it reported before the next look is read.
        drop(w);
        let w = StatusWriter::create(&path, 1, &["a"]).unwrap();
        w.learn_writer(0).unwrap().push(&event(3));
        out.clear();
        for _ in 0..REOPEN_EVERY {
            intake.poll(&mut out);
        }
        assert_eq!(out, [event(3)]);
        drop(w);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
