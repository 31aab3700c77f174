//! The standalone source: a directory of YAML manifests, watched.
//!
//! # Which files
//!
//! Every regular file (or symlink to one) directly in the directory whose name ends in `.yaml`
//! or `.yml`, in path order. The directory is read **non-recursively**: subdirectories are
//! ignored, so manifests can be held back in one (e.g. `deploy/examples/later/`) and copied in
//! when wanted. Ignored as well: names starting with `.` (dotfiles, vim's `.x.yaml.swp`,
//! emacs' `.#x.yaml`) or `#` (emacs' `#x.yaml#`), and anything not ending in `.yaml`/`.yml`
//! (`x.yaml~`, `x.yaml.tmp`, vim's `4913`).
//!
//! # What each file holds
//!
//! Any number of `---`-separated documents; empty documents are skipped. Each is dispatched by
//! `apiVersion` and `kind`: `lace-cni.io/v1alpha1` `Network`, `NetworkBindingPolicy`,
//! `NetworkRoutingPolicy`, `v1` `Namespace`, `Node`, `Pod`, `Service`, `networking.k8s.io/v1`
//! `NetworkPolicy` and `discovery.k8s.io/v1` `EndpointSlice` (a Service's backends, by its
//! `kubernetes.io/service-name` label; without one, standalone control computes a Service's
//! backends from its selector, see [`crate::service`]). Namespaced objects without `metadata.namespace` are put in
//! [`DEFAULT_NAMESPACE`]. Nodes need the [`UNDERLAY_ANNOTATION`](super::UNDERLAY_ANNOTATION)
//! (see [`super::LaceNode`]).
//!
//! # What is guaranteed when a file is wrong
//!
//! - A document of an unknown kind, a Node without usable lace annotations, or an object whose
//!   kind, namespace and name an earlier object already has (earlier = an earlier file by
//!   path, or earlier in the same file) is reported and skipped ([`Consequence::Skipped`]);
//!   the rest of the file is used.
//! - A document that does not decode as its kind is reported with **every** error and its full
//!   field path (lace kinds are checked against their CRD schema first, see
//!   [`crate::api::schema`]); the file's other, valid documents are used, and the object the
//!   broken document names keeps its last good version ([`Consequence::KeptLastGood`]), or is
//!   absent if it never had one ([`Consequence::NothingKept`]).
//! - When what a file holds cannot be known — it cannot be read, its YAML breaks off, or a
//!   document has no `apiVersion`, `kind` or `metadata.name` — every object the file held last
//!   time and that no good document accounts for is kept. A half-saved file therefore never
//!   deletes networks. Problems disappear with the next `load` after the file is fixed.
//! - A file that is deleted (or renamed to an ignored name) takes its objects with it.
//! - [`Source::load`] fails only when the directory itself cannot be listed.
//!
//! # Watching
//!
//! With inotify (the `notify` crate) by default: events on manifest names (and on the
//! directory, and on `..data`, which the kubelet swaps when a mounted ConfigMap changes) wake
//! [`Source::wait`], which then waits until events pause for [`DEBOUNCE`] (at most
//! [`DEBOUNCE_MAX`]) so an editor's burst of writes costs one reload. Our own reads do not
//! wake it. If inotify cannot be set up (no instances left, an unsupported filesystem), or on
//! request ([`StandaloneSource::polling`]), the source polls every [`POLL_INTERVAL`] instead,
//! comparing each manifest's inode, size, mtime and ctime; polling can miss a rewrite that
//! keeps all four (same size within one timestamp tick), inotify cannot. If the directory is
//! replaced, `wait` notices within [`POLL_INTERVAL`] and the next `load` watches the new one.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::{
    Consequence, Object, ObjectKind, ObjectRef, Objects, Origin, Problem, ProblemKind, Snapshot,
    Source, SourceError, DEFAULT_NAMESPACE,
};
use crate::api::schema::FieldError;

/// After the first event, [`Source::wait`] returns once no event came for this long.
pub const DEBOUNCE: Duration = Duration::from_millis(100);
/// … or once it has debounced this long, so a file rewritten continuously still gets loaded.
pub const DEBOUNCE_MAX: Duration = Duration::from_secs(1);
/// How often the polling fallback looks at the files (and inotify mode at the directory's
/// identity).
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// How the source notices changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchMode {
    /// inotify events.
    Inotify,
    /// Polling every [`POLL_INTERVAL`], with the reason inotify is not used.
    Poll {
        /// Why: the inotify error, or "requested".
        reason: String,
    },
}

/// A [`Source`] reading a directory of YAML manifests. See the module docs.
#[derive(Debug)]
pub struct StandaloneSource {
    dir: PathBuf,
    /// Per file: the objects of its last version that parsed completely.
    last_good: BTreeMap<PathBuf, Vec<Parsed>>,
    watch: Watch,
}

#[derive(Debug)]
enum Watch {
    Inotify {
        /// Kept alive for its events; dropping it stops them.
        _watcher: RecommendedWatcher,
        /// One token per relevant event (coalesced: capacity 1).
        events: Receiver<()>,
        /// (dev, inode) of the directory being watched.
        dir_id: Option<(u64, u64)>,
    },
    Poll {
        reason: String,
        /// The files as the last `load` (or `wait` that returned `true`) saw them.
        seen: Option<Fingerprint>,
    },
}

/// One object read from a file.
#[derive(Debug, Clone)]
struct Parsed {
    origin: Origin,
    object: Object,
}

impl StandaloneSource {
    /// Reads (on each [`Source::load`]) and watches `dir`; falls back to polling when inotify
    /// cannot be set up. Fails when `dir` cannot be listed.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, SourceError> {
        let dir = dir.into();
        check_dir(&dir)?;
        let watch = match inotify_watch(&dir) {
            Ok(watch) => watch,
            Err(e) => Watch::Poll {
                reason: e.to_string(),
                seen: None,
            },
        };
        Ok(Self {
            dir,
            last_good: BTreeMap::new(),
            watch,
        })
    }

    /// Like [`StandaloneSource::new`] but always polls (filesystems where inotify sees no
    /// changes, e.g. NFS).
    pub fn polling(dir: impl Into<PathBuf>) -> Result<Self, SourceError> {
        let dir = dir.into();
        check_dir(&dir)?;
        Ok(Self {
            dir,
            last_good: BTreeMap::new(),
            watch: Watch::Poll {
                reason: "requested".to_owned(),
                seen: None,
            },
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How changes are noticed.
    pub fn watch_mode(&self) -> WatchMode {
        match &self.watch {
            Watch::Inotify { .. } => WatchMode::Inotify,
            Watch::Poll { reason, .. } => WatchMode::Poll {
                reason: reason.clone(),
            },
        }
    }

    /// Prepares the watch for a load: forgets events so far (the load is about to see their
    /// effect) and re-arms inotify if the directory was replaced.
    fn before_load(&mut self) {
        match &mut self.watch {
            Watch::Inotify { events, dir_id, .. } => {
                while let Ok(()) = events.try_recv() {}
                let current = dir_identity(&self.dir);
                if current.is_some() && current != *dir_id {
                    self.watch = match inotify_watch(&self.dir) {
                        Ok(watch) => watch,
                        Err(e) => Watch::Poll {
                            reason: e.to_string(),
                            seen: None,
                        },
                    };
                    self.before_load();
                }
            }
            Watch::Poll { seen, .. } => *seen = Some(fingerprint(&self.dir)),
        }
    }

    /// Reads one file into `self.last_good` and problems (see the module docs for what is
    /// kept when a document is broken).
    fn read_file(&mut self, path: &Path, problems: &mut Vec<Problem>) {
        let file = match fs::read_to_string(path) {
            Ok(text) => parse_file(path, &text),
            // Deleted between the listing and the read: gone, like a file not listed.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.last_good.remove(path);
                return;
            }
            Err(e) => ParsedFile {
                broken: vec![(
                    Origin {
                        file: path.to_owned(),
                        document: None,
                    },
                    None,
                    ProblemKind::Unreadable {
                        error: e.to_string(),
                    },
                )],
                ..ParsedFile::default()
            },
        };
        problems.extend(file.skipped);
        let last = self.last_good.remove(path).unwrap_or_default();
        let mut objects = file.objects;
        let has =
            |objects: &[Parsed], r: &ObjectRef| objects.iter().any(|p| p.object.reference() == *r);
        // A broken document that names its object keeps that object's last good version.
        let mut consequences = Vec::with_capacity(file.broken.len());
        for (_, object, _) in &file.broken {
            let kept = object.as_ref().and_then(|r| {
                let old = last.iter().find(|p| p.object.reference() == *r)?;
                (!has(&objects, r)).then(|| old.clone())
            });
            consequences.push(match kept {
                Some(old) => {
                    objects.push(old);
                    Consequence::KeptLastGood { objects: 1 }
                }
                None if object.is_some() => Consequence::NothingKept,
                // Decided below.
                None => Consequence::Skipped,
            });
        }
        // What the file holds is not fully known: keep what no good document accounts for.
        let unknown = file.broken.iter().any(|(_, object, _)| object.is_none());
        let mut kept_unknown = 0;
        if unknown {
            for old in &last {
                if !has(&objects, &old.object.reference()) {
                    objects.push(old.clone());
                    kept_unknown += 1;
                }
            }
        }
        for ((origin, object, kind), consequence) in file.broken.into_iter().zip(consequences) {
            let consequence = match (&object, consequence) {
                (None, _) if kept_unknown > 0 => Consequence::KeptLastGood {
                    objects: kept_unknown,
                },
                (None, _) => Consequence::NothingKept,
                (Some(_), c) => c,
            };
            problems.push(Problem {
                origin: Some(origin),
                object,
                kind,
                consequence,
            });
        }
        self.last_good.insert(path.to_owned(), objects);
    }

    /// Where every object of the last load came from.
    fn origins(&self) -> BTreeMap<ObjectRef, Origin> {
        let mut out = BTreeMap::new();
        for p in self.last_good.values().flatten() {
            out.entry(p.object.reference())
                .or_insert_with(|| p.origin.clone());
        }
        out
    }
}

impl Source for StandaloneSource {
    fn load(&mut self) -> Result<Snapshot, SourceError> {
        self.before_load();
        let files = list_manifests(&self.dir)?;
        self.last_good.retain(|path, _| files.contains(path));
        let mut problems = Vec::new();
        for path in &files {
            self.read_file(path, &mut problems);
        }
        let objects = assemble(&self.last_good, &mut problems);
        Ok(Snapshot {
            objects,
            problems,
            origins: self.origins(),
        })
    }

    fn wait(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            match &mut self.watch {
                Watch::Inotify { events, dir_id, .. } => {
                    if now >= deadline {
                        return false;
                    }
                    match events.recv_timeout((deadline - now).min(POLL_INTERVAL)) {
                        Ok(()) => {
                            debounce(events);
                            return true;
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            if dir_identity(&self.dir) != *dir_id {
                                return true;
                            }
                        }
                        Err(RecvTimeoutError::Disconnected) => {
                            // The watcher's thread is gone: poll from now on, and reload since
                            // events may have been lost.
                            self.watch = Watch::Poll {
                                reason: "the inotify watcher stopped".to_owned(),
                                seen: None,
                            };
                            return true;
                        }
                    }
                }
                Watch::Poll { seen, .. } => {
                    let current = fingerprint(&self.dir);
                    if seen.as_ref() != Some(&current) {
                        *seen = Some(current);
                        return true;
                    }
                    if now >= deadline {
                        return false;
                    }
                    std::thread::sleep((deadline - now).min(POLL_INTERVAL));
                }
            }
        }
    }
}

/// The objects of one multi-document YAML text as the source would read them from a file
/// (duplicates and Nodes without lace annotations reported, broken documents skipped), with
/// every problem. For tests and tools that hold manifests in memory.
pub fn objects_from_yaml(text: &str) -> (Objects, Vec<Problem>) {
    let path = Path::new("<memory>");
    let file = parse_file(path, text);
    let mut problems = file.skipped;
    problems.extend(
        file.broken
            .into_iter()
            .map(|(origin, object, kind)| Problem {
                origin: Some(origin),
                object,
                kind,
                consequence: Consequence::NothingKept,
            }),
    );
    let files = BTreeMap::from([(path.to_path_buf(), file.objects)]);
    let objects = assemble(&files, &mut problems);
    (objects, problems)
}

/// Waits until events pause for [`DEBOUNCE`], at most [`DEBOUNCE_MAX`].
fn debounce(events: &Receiver<()>) {
    let start = Instant::now();
    while start.elapsed() < DEBOUNCE_MAX {
        match events.recv_timeout(DEBOUNCE) {
            Ok(()) => continue,
            Err(_) => return,
        }
    }
}

fn check_dir(dir: &Path) -> Result<(), SourceError> {
    fs::read_dir(dir)
        .map(drop)
        .map_err(|source| SourceError::ReadDir {
            dir: dir.to_owned(),
            source,
        })
}

fn dir_identity(dir: &Path) -> Option<(u64, u64)> {
    fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

fn inotify_watch(dir: &Path) -> notify::Result<Watch> {
    let (tx, events) = mpsc::sync_channel::<()>(1);
    let watched = dir.to_owned();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let relevant = match &event {
            Ok(event) => is_relevant(&watched, event),
            // Errors (e.g. a queue overflow) may hide changes: reload.
            Err(_) => true,
        };
        if relevant {
            // Full means a token is already waiting; closed means the source is gone.
            let _ = tx.try_send(());
        }
    })?;
    let dir_id = dir_identity(dir);
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    Ok(Watch::Inotify {
        _watcher: watcher,
        events,
        dir_id,
    })
}

/// Whether an event may change what `load` returns. Opens and reads (our own) do not.
fn is_relevant(dir: &Path, event: &notify::Event) -> bool {
    let kind = match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    };
    kind && (event.need_rescan()
        || event.paths.is_empty()
        || event.paths.iter().any(|p| {
            p == dir
                || p.file_name().is_some_and(|n| {
                    is_manifest_name(n) || n.to_str().is_some_and(|n| n.starts_with(".."))
                })
        }))
}

/// Whether a file name is one the source reads (see the module docs).
pub fn is_manifest_name(name: &std::ffi::OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    !name.starts_with('.')
        && !name.starts_with('#')
        && (name.ends_with(".yaml") || name.ends_with(".yml"))
}

/// The manifests in `dir`, sorted by path.
fn list_manifests(dir: &Path) -> Result<Vec<PathBuf>, SourceError> {
    let read_err = |source| SourceError::ReadDir {
        dir: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        if !is_manifest_name(&entry.file_name()) {
            continue;
        }
        let path = entry.path();
        // Follows symlinks; a dangling one or a directory named x.yaml is not a manifest.
        if fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// What polling compares: per manifest, (dev, inode, size, mtime, ctime) of its target.
type Fingerprint = BTreeMap<OsString, (u64, u64, u64, i64, i64, i64, i64)>;

fn fingerprint(dir: &Path) -> Fingerprint {
    let mut stamps = Fingerprint::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return stamps;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !is_manifest_name(&name) {
            continue;
        }
        if let Ok(m) = fs::metadata(entry.path()) {
            let stamp = (
                m.dev(),
                m.ino(),
                m.len(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            );
            stamps.insert(name, stamp);
        }
    }
    stamps
}

/// One file, parsed.
#[derive(Debug, Default)]
struct ParsedFile {
    objects: Vec<Parsed>,
    /// Problems that skip one object (unknown kinds).
    skipped: Vec<Problem>,
    /// Problems that make the whole file broken.
    broken: Vec<(Origin, Option<ObjectRef>, ProblemKind)>,
}

fn parse_file(path: &Path, text: &str) -> ParsedFile {
    let mut file = ParsedFile::default();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let origin = Origin {
            file: path.to_owned(),
            document: Some(index + 1),
        };
        let mut value = match serde_yaml::Value::deserialize(document) {
            Ok(serde_yaml::Value::Null) => continue,
            Ok(value) => value,
            Err(e) => {
                // The parser stops at a syntax error; nothing after it is reliable.
                file.broken.push((
                    origin,
                    None,
                    ProblemKind::Yaml {
                        error: e.to_string(),
                    },
                ));
                break;
            }
        };
        if let Err(e) = value.apply_merge() {
            file.broken.push((
                origin,
                None,
                ProblemKind::Yaml {
                    error: e.to_string(),
                },
            ));
            continue;
        }
        match parse_document(value) {
            Ok(object) => file.objects.push(Parsed { origin, object }),
            Err(DocumentError::Unknown(kind)) => file.skipped.push(Problem {
                origin: Some(origin),
                object: None,
                kind: *kind,
                consequence: Consequence::Skipped,
            }),
            Err(DocumentError::Broken(broken)) => {
                let (object, kind) = *broken;
                file.broken.push((origin, object, kind));
            }
        }
    }
    file
}

/// Why a document yields no object (boxed: problems are large, documents many).
enum DocumentError {
    /// Skip the document.
    Unknown(Box<ProblemKind>),
    /// The file is broken.
    Broken(Box<(Option<ObjectRef>, ProblemKind)>),
}

/// Decodes one object as the standalone source does (kind, schema check with full field
/// paths, then the typed decode): the object, or the problem.
/// The Kubernetes source decodes what the API server sends through this too.
pub(crate) fn decode_object(value: serde_yaml::Value) -> Result<Object, Box<ProblemKind>> {
    parse_document(value).map_err(|e| match e {
        DocumentError::Unknown(kind) => kind,
        DocumentError::Broken(broken) => Box::new(broken.1),
    })
}

fn parse_document(value: serde_yaml::Value) -> Result<Object, DocumentError> {
    let field = |name: &'static str, v: Option<&serde_yaml::Value>| {
        v.and_then(serde_yaml::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                DocumentError::Broken(Box::new((None, ProblemKind::MissingField { field: name })))
            })
    };
    let api_version = field("apiVersion", value.get("apiVersion"))?;
    let kind = field("kind", value.get("kind"))?;
    let metadata = value.get("metadata");
    let name = field("metadata.name", metadata.and_then(|m| m.get("name")))?;
    let namespace = metadata
        .and_then(|m| m.get("namespace"))
        .and_then(serde_yaml::Value::as_str);

    let Some(object_kind) = ObjectKind::from_type(&api_version, &kind) else {
        return Err(DocumentError::Unknown(Box::new(ProblemKind::UnknownKind {
            api_version,
            kind,
            name,
        })));
    };
    let reference = ObjectRef {
        kind: object_kind,
        namespace: object_kind
            .is_namespaced()
            .then(|| namespace.unwrap_or(DEFAULT_NAMESPACE).to_owned()),
        name,
    };
    let broken = |errors: Vec<FieldError>| {
        DocumentError::Broken(Box::new((
            Some(reference.clone()),
            ProblemKind::Decode {
                api_version: api_version.clone(),
                kind: kind.clone(),
                errors,
            },
        )))
    };
    // Lace kinds: every structural error, with full paths, from the CRD's schema.
    if let Some(schema) = crate::api::crd::schema(&kind) {
        let json = serde_json::to_value(&value).unwrap_or_default();
        let errors = crate::api::schema::check(schema, &json);
        if !errors.is_empty() {
            return Err(broken(errors));
        }
    }
    let decode_error =
        |e: serde_path_to_error::Error<serde_yaml::Error>| broken(vec![decode_field_error(e)]);
    /// Decodes keeping track of where in the document the decoder failed.
    fn decode<T: DeserializeOwned>(
        value: serde_yaml::Value,
    ) -> Result<Box<T>, serde_path_to_error::Error<serde_yaml::Error>> {
        serde_path_to_error::deserialize(value).map(Box::new)
    }
    let namespaced = reference.namespace.clone();
    let object = match object_kind {
        ObjectKind::Network => Object::Network(decode(value).map_err(decode_error)?),
        ObjectKind::NetworkBindingPolicy => {
            Object::BindingPolicy(decode(value).map_err(decode_error)?)
        }
        ObjectKind::NetworkRoutingPolicy => {
            Object::RoutingPolicy(decode(value).map_err(decode_error)?)
        }
        ObjectKind::Namespace => {
            Object::Namespace(decode::<Namespace>(value).map_err(decode_error)?)
        }
        ObjectKind::Node => Object::Node(decode::<Node>(value).map_err(decode_error)?),
        ObjectKind::Pod => {
            let mut pod: Box<Pod> = decode(value).map_err(decode_error)?;
            pod.metadata.namespace = namespaced;
            Object::Pod(pod)
        }
        ObjectKind::Service => {
            let mut service: Box<Service> = decode(value).map_err(decode_error)?;
            service.metadata.namespace = namespaced;
            Object::Service(service)
        }
        ObjectKind::NetworkPolicy => {
            let mut policy: Box<NetworkPolicy> = decode(value).map_err(decode_error)?;
            policy.metadata.namespace = namespaced;
            Object::NetworkPolicy(policy)
        }
        ObjectKind::EndpointSlice => {
            let mut slice: Box<EndpointSlice> = decode(value).map_err(decode_error)?;
            slice.metadata.namespace = namespaced;
            Object::EndpointSlice(slice)
        }
    };
    Ok(object)
}

/// The decoder's error with its full path: a missing field is named itself
/// (`spec.ipv4Subnet.prefix`), not by its parent, which is all serde's path knows.
fn decode_field_error(e: serde_path_to_error::Error<serde_yaml::Error>) -> FieldError {
    let parent = match e.path().to_string() {
        top if top == "." => String::new(),
        path => path,
    };
    let error = e.into_inner().to_string();
    let missing = error
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    let path = match (missing, parent.is_empty()) {
        (Some(f), true) => f.to_owned(),
        (Some(f), false) => format!("{parent}.{f}"),
        (None, true) => "the document".to_owned(),
        (None, false) => parent,
    };
    FieldError { path, error }
}

/// Builds the objects from every file's good version, first (by path) wins.
fn assemble(files: &BTreeMap<PathBuf, Vec<Parsed>>, problems: &mut Vec<Problem>) -> Objects {
    let mut objects = Objects::default();
    let mut first: HashMap<ObjectRef, &Origin> = HashMap::new();
    for parsed in files.values().flatten() {
        let reference = parsed.object.reference();
        if let Some(first) = first.get(&reference) {
            problems.push(Problem {
                origin: Some(parsed.origin.clone()),
                object: Some(reference),
                kind: ProblemKind::Duplicate {
                    first: (*first).clone(),
                },
                consequence: Consequence::Skipped,
            });
            continue;
        }
        first.insert(reference.clone(), &parsed.origin);
        if let Err(e) = objects.insert(parsed.object.clone()) {
            problems.push(Problem {
                origin: Some(parsed.origin.clone()),
                object: Some(reference),
                kind: ProblemKind::Node(e),
                consequence: Consequence::Skipped,
            });
        }
    }
    objects
}
