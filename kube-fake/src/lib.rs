//! A fake Kubernetes API server for lace's tests (test rung 4): no kube-apiserver can be
//! installed on the test machines, so this one behaves as kube-apiserver v1.36 does wherever
//! lace depends on it, and is reached the way a cluster is — through a kubeconfig, TLS and a
//! bearer token, by the real kube-rs client.
//!
//! # Contract
//!
//! **Transport.** HTTPS (HTTP/1.1) on `127.0.0.1:<port>` with a certificate signed by a CA made
//! at start ([`FakeApiServer::ca_pem`]); every request needs `Authorization: Bearer <token>`
//! (else `401 Unauthorized`). [`FakeApiServer::write_kubeconfig`] writes a kubeconfig with
//! both.
//!
//! **Resources.** Built in: `v1` namespaces, nodes, pods, services, events, configmaps,
//! serviceaccounts; `coordination.k8s.io/v1` leases; `networking.k8s.io/v1` networkpolicies;
//! `events.k8s.io/v1` events; `discovery.k8s.io/v1` endpointslices; `apiextensions.k8s.io/v1`
//! customresourcedefinitions. Creating a CRD serves its resource at once (status
//! `Established=True`); deleting it deletes its objects. Legacy discovery (`/api`, `/apis`,
//! `/api/v1`, `/apis/{g}/{v}`) and `/version` are served for kubectl, and OpenAPI v3 as far as
//! kubectl reads it before writing: `/openapi/v3` and one document per group version whose
//! resources' PATCH operations carry `x-kubernetes-group-version-kind` and the
//! `fieldValidation` parameter (no schemas). Writes honour `fieldValidation`: `Strict` refuses
//! a custom resource with fields its schema does not declare (`400`, `strict decoding error:
//! unknown field "spec.x"`; built-in kinds, whose schemas the fake lacks, are not checked),
//! `Ignore` and `Warn` prune them, other values are `400`.
//!
//! **Events** (`v1` and `events.k8s.io/v1`) are validated as kube-apiserver does
//! (`ValidateEventCreate`/`ValidateEventUpdate`): namespace agreement with the involved object,
//! the reporting fields, lengths, and for `events.k8s.io/v1` the required `eventTime`, `type`,
//! series and immutable fields (see the `events` module).
//!
//! **Objects.** Create sets `uid`, `creationTimestamp`, `generation: 1` and
//! `resourceVersion`; refuses a body with a `resourceVersion` (400), an existing name
//! (`409 AlreadyExists`), a namespaced object in a namespace that does not exist (404) or is
//! terminating (403). `generateName` is honoured. `metadata.generation` increases when
//! anything but metadata (and status, with a status subresource) changes; a write that changes
//! nothing does not bump the resourceVersion. `ownerReferences` and `finalizers` are stored;
//! **no garbage collector or controller runs** (as in envtest): deleting an owner leaves its
//! dependents; a Namespace deleted stays `Terminating`. Deleting an object with finalizers sets
//! `deletionTimestamp`; the update that removes the last finalizer deletes it. A Pod bound to a
//! node (`spec.nodeName`) is deleted gracefully: `deletionTimestamp` and
//! `deletionGracePeriodSeconds` are set and it goes away only when deleted again with
//! `gracePeriodSeconds=0` (what the kubelet does), as on a real cluster. Pods need
//! `spec.containers` with `name` and `image` (422). Create resets `status` of kinds with a
//! status subresource (Pods start `phase: Pending`, Namespaces `Active`).
//!
//! **Writes.** `PUT` with `metadata.resourceVersion` is conditional (`409 Conflict` when
//! stale), without one unconditional; `PATCH` as `application/merge-patch+json` (a
//! `resourceVersion` in the patch is a precondition), `application/strategic-merge-patch+json`
//! for built-in kinds (merged as a merge patch), and `application/apply-patch+yaml`
//! (server-side apply: `fieldManager` required, `force` honoured). Other patch types are
//! `415`. `DELETE` honours `gracePeriodSeconds` and `preconditions` (`409` on mismatch). With a
//! status subresource, writes to the object keep the stored `status` and writes to `/status`
//! change only `status`.
//!
//! **Server-side apply.** `metadata.managedFields` records, per manager, operation (`Apply` /
//! `Update`) and subresource, the fields it owns (`FieldsV1`). Apply sets the fields of the
//! applied configuration, removes fields the manager applied before and no longer applies
//! (unless another manager owns them too), and answers `409 Conflict` (`FieldManagerConflict`
//! causes) when it would change a field another manager owns, unless `force=true` takes it.
//! Updates take ownership of the fields they change. Lists are owned atomically (a
//! simplification of `listType: map`); in `metadata` only labels, annotations,
//! ownerReferences and finalizers are owned. Apply of a missing object creates it; apply of a
//! missing object's status is `404`.
//!
//! **Custom resources.** Every write is pruned of fields the schema does not declare,
//! defaulted, checked structurally (`lace_control::api::schema::check`: types, required,
//! enums, bounds) and then against the CRD's CEL rules (`x-kubernetes-validations`, with
//! `oldSelf` on updates, through `kube-cel`) — `422 Invalid` with one cause per error. A CRD
//! is refused as the real server refuses it when its rules' estimated cost exceeds the budget
//! ([`cost`]: one rule times the number of times it can run, and all rules together).
//!
//! **Lists.** `resourceVersion` unset: the latest state; `resourceVersion=N` (`NotOlderThan`,
//! also `0`): the latest state, `504 ResourceVersionTooLarge` when `N` is in the future;
//! `resourceVersionMatch=Exact`: the state at `N` (`410 Expired` once compacted). `limit` and
//! `continue` paginate one consistent snapshot; a `continue` token older than the compaction is
//! `410 Expired`. `labelSelector` (`=`, `==`, `!=`, `in`, `notin`, exists, `!`) and
//! `fieldSelector` (`metadata.name`, `metadata.namespace`, and per kind what the real server
//! supports, e.g. Pod `spec.nodeName`; anything else is `400 field label not supported`).
//! Built-in kinds' list items carry no `apiVersion`/`kind` (as the real server's JSON).
//!
//! **Watches.** `watch=true` from `resourceVersion=N` replays every change after `N`, then
//! streams; from unset or `0`, synthetic `ADDED` events for what exists first.
//! `sendInitialEvents=true` (needs `resourceVersionMatch=NotOlderThan` and
//! `allowWatchBookmarks=true`, else 422) ends the initial events with a `BOOKMARK` annotated
//! `k8s.io/initial-events-end`. With `allowWatchBookmarks=true`, `BOOKMARK` events carry the
//! current resourceVersion every [`Options::bookmark_interval`]. A watch from a compacted
//! version gets HTTP 200 and one `ERROR` event with a `410 Expired` Status, then the stream
//! closes. An object that stops matching the selectors is `DELETED`, one that starts matching
//! `ADDED`. `timeoutSeconds` ends the stream. Deletions carry the deletion's
//! resourceVersion.
//!
//! **History.** The server keeps the last [`Options::history_limit`] changes;
//! [`FakeApiServer::compact`] forgets them all (etcd compaction).
//!
//! **Faults.** [`FakeApiServer::drop_watches`] ends every watch stream;
//! [`FakeApiServer::fail_requests`] answers the next `n` requests `500 InternalError`;
//! [`FakeApiServer::stall`] holds every request until [`FakeApiServer::unstall`];
//! [`FakeApiServer::stop`] / [`FakeApiServer::start`] take the listener down and up on the same
//! port (connections are cut); [`FakeApiServer::restart`] does both, keeping the state or
//! losing it ([`Restart::LoseState`]: a new etcd — every object and CRD gone, resourceVersions
//! keep increasing, history compacted so every client relists).
//!
//! **Observation.** [`FakeApiServer::requests`] counts requests by verb (for the API
//! requests per pod figure), [`FakeApiServer::requests_of`] those to one resource.
//!
//! **Seeding.** [`FakeApiServer::create_objects`] stores objects as `POST`s would (the same
//! checks, metadata, resourceVersions, watch events and history) without HTTP and without
//! counting them as requests: a benchmark's 10,000 pods in a fraction of a second, served by
//! list and watch like any other.

pub mod cost;
mod error;
mod events;
mod fields;
mod http;
mod selector;
mod store;
mod tls;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use hyper::Method;
use tokio::task::JoinHandle;

use store::Store;

/// Why the fake API server could not start or write its kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum FakeError {
    /// The certificates could not be made.
    #[error("cannot make the fake API server's certificates: {0}")]
    Certificate(String),
    /// The runtime could not start.
    #[error("cannot start the fake API server's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}; is another process using the port?")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The kubeconfig could not be written.
    #[error("cannot write the kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Tunables.
#[derive(Debug, Clone)]
pub struct Options {
    /// Changes kept for watches and exact lists before older ones are compacted.
    pub history_limit: usize,
    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK.
    pub bookmark_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            history_limit: 100_000,
            bookmark_interval: Duration::from_secs(1),
        }
    }
}

/// Why [`FakeApiServer::create_objects`] refused an object: what the API server would have
/// answered its `POST`.
#[derive(Debug, thiserror::Error)]
#[error("cannot create {what} (object {index} of the batch): {code} {reason}: {message}")]
pub struct SeedError {
    /// The object's position in the batch (0-based); the ones before it were created.
    pub index: usize,
    /// `<kind> <namespace>/<name>` as far as the object says.
    pub what: String,
    /// The HTTP status code a `POST` would have had.
    pub code: u16,
    /// The Status reason (`AlreadyExists`, `NotFound`, `Invalid`, …).
    pub reason: &'static str,
    /// The Status message.
    pub message: String,
}

/// What [`FakeApiServer::restart`] does to the stored objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Objects, CRDs and history survive (etcd kept).
    KeepState,
    /// Everything is gone (a new etcd).
    LoseState,
}

/// What the request handlers share.
pub(crate) struct Shared {
    store: Mutex<Store>,
    token: String,
    addr: SocketAddr,
    failures: AtomicU64,
    stall: tokio::sync::watch::Sender<bool>,
    counts: Mutex<BTreeMap<String, u64>>,
    /// Requests by (resource plural, verb).
    counts_of: Mutex<BTreeMap<(String, String), u64>>,
}

impl Shared {
    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this request is to fail (an injected 500).
    pub(crate) fn take_failure(&self) -> bool {
        self.failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Counts a request of `method` to `plural` (None: discovery and other non-resource
    /// paths) with `query`.
    pub(crate) fn count(&self, method: &Method, plural: Option<&str>, query: Option<&str>) {
        let watch =
            query.is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let verb = match *method {
            Method::GET if watch => "watch",
            Method::GET => "get",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "other",
        };
        *self
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(verb.to_owned())
            .or_default() += 1;
        if let Some(plural) = plural {
            *self
                .counts_of
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry((plural.to_owned(), verb.to_owned()))
                .or_default() += 1;
        }
    }
}

/// A running fake API server. Dropping it stops it.
pub struct FakeApiServer {
    shared: Arc<Shared>,
    /// `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    tls: tokio_rustls::TlsAcceptor,
    ca_pem: String,
    /// The serving task's stop signal and its acknowledgement (sent once the listener and every
    /// connection are closed).
    serving: Option<(
        tokio::sync::oneshot::Sender<()>,
        std::sync::mpsc::Receiver<()>,
    )>,
    bookmarks: JoinHandle<()>,
}

impl std::fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("addr", &self.shared.addr)
            .field("serving", &self.serving.is_some())
            .finish_non_exhaustive()
    }
}

impl FakeApiServer {
    /// Starts a server on a free port of 127.0.0.1 with [`Options::default`].
    pub fn start_new() -> Result<Self, FakeError> {
        Self::with_options(Options::default())
    }

    /// Starts a server on a free port of 127.0.0.1.
    pub fn with_options(options: Options) -> Result<Self, FakeError> {
        let tls = tls::generate()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kube-fake")
            .enable_all()
            .build()
            .map_err(FakeError::Runtime)?;
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let listener = std::net::TcpListener::bind(any)
            .map_err(|source| FakeError::Bind { addr: any, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| FakeError::Bind { addr: any, source })?;
        let token: String = (0..32)
            .map(|_| char::from_digit(u32::from(rand::random::<u8>() % 36), 36).unwrap_or('x'))
            .collect();
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(options.history_limit)),
            token,
            addr,
            failures: AtomicU64::new(0),
            stall: tokio::sync::watch::Sender::new(false),
            counts: Mutex::new(BTreeMap::new()),
            counts_of: Mutex::new(BTreeMap::new()),
        });
        let bookmarks = {
            let shared = shared.clone();
            let every = options.bookmark_interval;
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    shared.store().bookmark_all();
                }
            })
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.config.clone());
        let mut server = Self {
            shared,
            runtime: Some(runtime),
            tls: acceptor,
            ca_pem: tls.ca_pem,
            serving: None,
            bookmarks,
        };
        server.serve(listener)?;
        Ok(server)
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("the runtime lives until drop")
    }

    fn serve(&mut self, listener: std::net::TcpListener) -> Result<(), FakeError> {
        let addr = self.shared.addr;
        let bind_err = |source| FakeError::Bind { addr, source };
        listener.set_nonblocking(true).map_err(bind_err)?;
        let listener = {
            let _in_runtime = self.runtime().enter();
            tokio::net::TcpListener::from_std(listener).map_err(bind_err)?
        };
        let shared = self.shared.clone();
        let tls = self.tls.clone();
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ack_tx, ack_rx) = std::sync::mpsc::channel();
        self.runtime().spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    _ = &mut stop_rx => break,
                    accepted = listener.accept() => {
                        let Ok((tcp, _)) = accepted else { continue };
                        let shared = shared.clone();
                        let tls = tls.clone();
                        connections.spawn(async move {
                            let Ok(stream) = tls.accept(tcp).await else { return };
                            let service = hyper::service::service_fn(move |req| {
                                let shared = shared.clone();
                                async move {
                                    Ok::<_, std::convert::Infallible>(http::handle(shared, req).await)
                                }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await;
                        });
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
            drop(listener);
            connections.shutdown().await;
            let _ = ack_tx.send(());
        });
        self.serving = Some((stop_tx, ack_rx));
        Ok(())
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.shared.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The CA certificate (PEM) the serving certificate is signed by.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The bearer token every request needs.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The kubeconfig for this server (cluster `lace-kube-fake`, the CA, the token).
    pub fn kubeconfig(&self) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: lace-kube-fake\n  cluster:\n    \
             server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: lace\n  user:\n    \
             token: {}\ncontexts:\n- name: lace-kube-fake\n  context:\n    cluster: \
             lace-kube-fake\n    user: lace\ncurrent-context: lace-kube-fake\n",
            self.url(),
            self.shared.token
        )
    }

    /// Writes [`FakeApiServer::kubeconfig`] to `path` (mode 0600).
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), FakeError> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let err = |source| FakeError::Kubeconfig {
            path: path.to_owned(),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        f.write_all(self.kubeconfig().as_bytes()).map_err(err)
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().resource_version()
    }

    /// Forgets the change history (etcd compaction): watches and exact lists from an older
    /// version get `410`.
    pub fn compact(&self) {
        self.shared.store().compact();
    }

    /// Ends every open watch stream.
    pub fn drop_watches(&self) {
        self.shared.store().drop_watches();
    }

    /// Answers the next `n` requests with `500 InternalError`.
    pub fn fail_requests(&self, n: u64) {
        self.shared.failures.store(n, Ordering::SeqCst);
    }

    /// Holds every request (new and already waiting) until [`FakeApiServer::unstall`].
    pub fn stall(&self) {
        self.shared.stall.send_replace(true);
    }

    /// Releases [`FakeApiServer::stall`].
    pub fn unstall(&self) {
        self.shared.stall.send_replace(false);
    }

    /// Stops listening and cuts every connection (watches end). The state is kept. Returns
    /// once the port is closed.
    pub fn stop(&mut self) {
        if let Some((stop, ack)) = self.serving.take() {
            let _ = stop.send(());
            let _ = ack.recv();
        }
        self.shared.store().drop_watches();
    }

    /// Listens again on the same port (after [`FakeApiServer::stop`]).
    pub fn start(&mut self) -> Result<(), FakeError> {
        if self.serving.is_some() {
            return Ok(());
        }
        let addr = self.shared.addr;
        let listener =
            std::net::TcpListener::bind(addr).map_err(|source| FakeError::Bind { addr, source })?;
        self.serve(listener)
    }

    /// [`FakeApiServer::stop`], then [`FakeApiServer::start`], keeping or losing the state.
    pub fn restart(&mut self, state: Restart) -> Result<(), FakeError> {
        self.stop();
        if state == Restart::LoseState {
            self.shared.store().wipe();
        }
        self.start()
    }

    /// Creates `objects` in the store, in order, as `POST`s of each to its collection would
    /// (the same checks, defaults, `uid`, resourceVersions, watch events and history), without
    /// HTTP and without counting them in [`FakeApiServer::requests`]. Each object names its
    /// `apiVersion` and `kind`, and its `metadata.namespace` when namespaced; the field manager
    /// is `lace-kube-fake`. A CustomResourceDefinition serves its resource at once, so later
    /// objects of the batch may be of its kind. Returns the created objects as a `POST` would;
    /// stops at the first refused object (the ones before it stay).
    pub fn create_objects(
        &self,
        objects: impl IntoIterator<Item = serde_json::Value>,
    ) -> Result<Vec<serde_json::Value>, SeedError> {
        let mut created = Vec::new();
        for (index, o) in objects.into_iter().enumerate() {
            let field = |k: &str| o.get(k).and_then(serde_json::Value::as_str).unwrap_or("");
            let (api_version, kind) = (field("apiVersion").to_owned(), field("kind").to_owned());
            let meta = |k: &str| o["metadata"].get(k).and_then(serde_json::Value::as_str);
            let namespace = meta("namespace").map(String::from);
            let what = format!(
                "{kind} {}{}",
                namespace
                    .as_deref()
                    .map_or(String::new(), |n| format!("{n}/")),
                meta("name").unwrap_or("")
            );
            let fail = |e: error::ApiError| SeedError {
                index,
                what: what.clone(),
                code: e.code,
                reason: e.reason,
                message: e.message,
            };
            let mut store = self.shared.store();
            let (rt, version) = store.resolve_kind(&api_version, &kind).map_err(fail)?;
            let ns = match (rt.namespaced, namespace.as_deref()) {
                (true, Some(ns)) => Some(ns),
                (true, None) => {
                    return Err(fail(error::ApiError::bad_request(
                        "a namespaced object needs metadata.namespace",
                    )))
                }
                (false, _) => Some(""),
            };
            created.push(
                store
                    .create(&rt, &version, ns, o, "lace-kube-fake")
                    .map_err(fail)?,
            );
        }
        Ok(created)
    }

    /// Requests served so far, by verb (`get`, `list` counts as `get`, `watch`, `create`,
    /// `update`, `patch`, `delete`).
    pub fn requests(&self) -> BTreeMap<String, u64> {
        self.shared
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Requests served so far to resource `plural` (`configmaps`, `networkendpoints`; any
    /// group, namespace or object), by verb as [`FakeApiServer::requests`] names them.
    pub fn requests_of(&self, plural: &str) -> BTreeMap<String, u64> {
        self.shared
            .counts_of
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|((p, _), _)| p == plural)
            .map(|((_, verb), n)| (verb.clone(), *n))
            .collect()
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.stop();
        self.bookmarks.abort();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
