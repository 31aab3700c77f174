//! The API server's storage: resource types, objects, one resourceVersion counter (etcd's
//! revision), the change history watches and exact lists are served from, and the watchers.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::error::{qualified, ApiError, Cause};
use crate::fields::{self, Path};
use crate::selector::{FieldSelector, LabelSelector};

/// A CRD's schema: the OpenAPI v3 schema and its compiled CEL rules.
pub(crate) struct Schema {
    raw: Value,
    compiled: kube_cel::CompiledSchema,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema").finish_non_exhaustive()
    }
}

/// A resource the server serves (`pods`, `networks.lace-cni.io`).
#[derive(Debug, Clone)]
pub(crate) struct ResourceType {
    pub(crate) group: String,
    /// Served versions; the first is the one objects are stored and listed in.
    pub(crate) versions: Vec<String>,
    pub(crate) plural: String,
    pub(crate) singular: String,
    pub(crate) kind: String,
    pub(crate) short_names: Vec<String>,
    pub(crate) namespaced: bool,
    pub(crate) status_subresource: bool,
    /// A built-in kind (list items carry no `kind`/`apiVersion`, as the real server's).
    pub(crate) builtin: bool,
    pub(crate) schema: Option<Arc<Schema>>,
}

impl ResourceType {
    pub(crate) fn id(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    pub(crate) fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_owned()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status: bool,
    ) -> Self {
        Self {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            singular: kind.to_ascii_lowercase(),
            kind: kind.into(),
            short_names: Vec::new(),
            namespaced,
            status_subresource: status,
            builtin: true,
            schema: None,
        }
    }
}

/// The built-in resources (what lace and its tests use).
fn builtins() -> Vec<ResourceType> {
    let b = ResourceType::builtin;
    vec![
        b("", "v1", "namespaces", "Namespace", false, true),
        b("", "v1", "nodes", "Node", false, true),
        b("", "v1", "pods", "Pod", true, true),
        b("", "v1", "services", "Service", true, true),
        b("", "v1", "events", "Event", true, false),
        b("", "v1", "configmaps", "ConfigMap", true, false),
        b("", "v1", "serviceaccounts", "ServiceAccount", true, false),
        b("coordination.k8s.io", "v1", "leases", "Lease", true, false),
        b(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            true,
            false,
        ),
        b("events.k8s.io", "v1", "events", "Event", true, false),
        b(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            true,
            false,
        ),
        b(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            true,
        ),
    ]
}

type Key = (String, String);

#[derive(Debug, Clone)]
struct Change {
    rv: u64,
    res: String,
    key: Key,
    prev: Option<Value>,
    new: Option<Value>,
}

/// What a watch selects.
#[derive(Debug, Clone)]
pub(crate) struct WatchFilter {
    pub(crate) namespace: Option<String>,
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
}

impl WatchFilter {
    fn matches(&self, key: &Key, object: &Value) -> bool {
        self.namespace.as_ref().is_none_or(|ns| *ns == key.0)
            && self.labels.matches(object)
            && self.fields.matches(object)
    }
}

#[derive(Debug)]
struct Watcher {
    id: u64,
    res: String,
    api_version: String,
    kind: String,
    filter: WatchFilter,
    bookmarks: bool,
    tx: UnboundedSender<Bytes>,
}

/// How a list picks the state it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListAt {
    /// `resourceVersion` unset: the latest state.
    Latest,
    /// `resourceVersion=N` (`NotOlderThan`, the default match): any state at least as new.
    NotOlderThan(u64),
    /// `resourceVersion=N&resourceVersionMatch=Exact`.
    Exact(u64),
}

/// A list request's options.
#[derive(Debug, Clone)]
pub(crate) struct ListOptions {
    pub(crate) at: ListAt,
    pub(crate) filter: WatchFilter,
    pub(crate) limit: Option<usize>,
    pub(crate) continue_token: Option<String>,
}

/// How an object is written (what the request's verb and path say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The object (status kept when the resource has a status subresource).
    Main,
    /// The `status` subresource (only status changes).
    Status,
}

/// Deletion options (the DeleteOptions body).
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub(crate) grace_period_seconds: Option<i64>,
    pub(crate) precondition_rv: Option<String>,
    pub(crate) precondition_uid: Option<String>,
}

/// The store.
pub(crate) struct Store {
    types: BTreeMap<String, ResourceType>,
    objects: BTreeMap<String, BTreeMap<Key, Value>>,
    rv: u64,
    /// History holds every change with a resourceVersion above this.
    compacted: u64,
    history: VecDeque<Change>,
    history_limit: usize,
    watchers: Vec<Watcher>,
    next_watcher: u64,
    validator: kube_cel::Validator,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("rv", &self.rv)
            .field("compacted", &self.compacted)
            .field("watchers", &self.watchers.len())
            .finish_non_exhaustive()
    }
}

pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn uid() -> String {
    let b: [u8; 16] = rand::random();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        u16::from_be_bytes([b[4], b[5]]),
        u16::from_be_bytes([b[6], b[7]]) & 0x0fff,
        (u16::from_be_bytes([b[8], b[9]]) & 0x3fff) | 0x8000,
        u64::from_be_bytes([0, 0, b[10], b[11], b[12], b[13], b[14], b[15]])
    )
}

fn meta_str<'a>(o: &'a Value, field: &str) -> Option<&'a str> {
    o.get("metadata")?.get(field)?.as_str()
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `spec.rules[0].network` → the value there.
fn value_at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, idx) = match part.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !name.is_empty() {
            cur = cur.get(name)?;
        }
        if let Some(i) = idx {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

/// The fields of `o` (a custom resource of `rt`) its schema does not declare, as the API
/// server names them for `fieldValidation=Strict` (`.spec.foo`); `metadata`, `apiVersion` and
/// `kind` are not the schema's business.
pub(crate) fn unknown_fields(rt: &ResourceType, o: &Value) -> Vec<String> {
    let Some(schema) = &rt.schema else {
        return Vec::new();
    };
    let mut pruned = o.clone();
    prune(&schema.raw, &mut pruned);
    let mut out = Vec::new();
    removed(o, &pruned, "", &mut out);
    out.retain(|f| !matches!(f.as_str(), ".metadata" | ".apiVersion" | ".kind"));
    out
}

/// The paths of `before` that `after` (a pruned copy) lacks.
fn removed(before: &Value, after: &Value, at: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, v) in b {
                let here = format!("{at}.{k}");
                match a.get(k) {
                    None if !(at.is_empty() && matches!(k.as_str(), "metadata")) => out.push(here),
                    None => {}
                    Some(w) => removed(v, w, &here, out),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for (i, (v, w)) in b.iter().zip(a).enumerate() {
                removed(v, w, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Drops fields the schema does not declare (the API server's pruning).
fn prune(schema: &Value, v: &mut Value) {
    if schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
        && schema.get("properties").is_none()
    {
        return;
    }
    match v {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                let preserve = schema
                    .get("x-kubernetes-preserve-unknown-fields")
                    .and_then(Value::as_bool)
                    == Some(true);
                if !preserve {
                    m.retain(|k, _| props.contains_key(k));
                }
                for (k, child) in m.iter_mut() {
                    if let Some(s) = props.get(k) {
                        prune(s, child);
                    }
                }
            } else if let Some(ap) = schema.get("additionalProperties") {
                if ap.is_object() {
                    for child in m.values_mut() {
                        prune(ap, child);
                    }
                }
            } else if schema.get("type").and_then(Value::as_str) == Some("object") {
                m.clear();
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for i in items {
                    prune(s, i);
                }
            }
        }
        _ => {}
    }
}

/// Whether a name is a DNS-1123 subdomain.
pub(crate) fn dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn dns_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && dns_subdomain(name)
}

/// Everything but `metadata` and (with a status subresource) `status`: what bumps
/// `metadata.generation` when it changes.
fn generation_content(o: &Value, status_subresource: bool) -> Value {
    let mut c = o.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if status_subresource {
            m.remove("status");
        }
    }
    c
}

impl Store {
    pub(crate) fn new(history_limit: usize) -> Self {
        let mut s = Self {
            types: BTreeMap::new(),
            objects: BTreeMap::new(),
            rv: 1,
            compacted: 1,
            history: VecDeque::new(),
            history_limit,
            watchers: Vec::new(),
            next_watcher: 0,
            validator: kube_cel::Validator::new(),
        };
        s.reset_types();
        s
    }

    fn reset_types(&mut self) {
        self.types.clear();
        for t in builtins() {
            self.types.insert(t.id(), t);
        }
    }

    /// The latest resourceVersion.
    pub(crate) fn resource_version(&self) -> u64 {
        self.rv
    }

    /// Forgets the history: watches and exact lists from before now get `410 Gone`.
    pub(crate) fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// Ends every watch (their streams close; clients re-watch from their last version).
    pub(crate) fn drop_watches(&mut self) {
        self.watchers.clear();
    }

    /// Loses every object and CRD (a new, empty etcd); resourceVersions keep increasing and
    /// the history is gone, so every client's next watch is `410 Gone`.
    pub(crate) fn wipe(&mut self) {
        self.objects.clear();
        self.watchers.clear();
        self.reset_types();
        self.rv += 1;
        self.compact();
    }

    /// Every served type (discovery).
    pub(crate) fn types(&self) -> impl Iterator<Item = &ResourceType> {
        self.types.values()
    }

    /// The type served at `group/version/plural`.
    pub(crate) fn resolve(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Result<ResourceType, ApiError> {
        self.types
            .get(&format!("{group}/{plural}"))
            .filter(|t| t.versions.iter().any(|v| v == version))
            .cloned()
            .ok_or_else(|| {
                ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )
            })
    }

    /// The type of objects of `api_version` and `kind` (`v1` `Pod`, `lace-cni.io/v1alpha1`
    /// `Network`), and the version named.
    pub(crate) fn resolve_kind(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ResourceType, String), ApiError> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.types
            .values()
            .find(|t| t.group == group && t.kind == kind && t.versions.iter().any(|v| v == version))
            .map(|t| (t.clone(), version.to_owned()))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "no kind \"{kind}\" is registered for version \"{api_version}\""
                ))
            })
    }

    /// Whether the namespace exists and accepts new objects.
    fn check_namespace(&self, ns: &str) -> Result<(), ApiError> {
        match self
            .objects
            .get("/namespaces")
            .and_then(|m| m.get(&(String::new(), ns.to_owned())))
        {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    fn key(rt: &ResourceType, ns: Option<&str>, name: &str) -> Key {
        (
            if rt.namespaced {
                ns.unwrap_or_default().to_owned()
            } else {
                String::new()
            },
            name.to_owned(),
        )
    }

    /// The object as served under `version`.
    fn present(rt: &ResourceType, version: &str, o: &Value) -> Value {
        let mut o = o.clone();
        o["apiVersion"] = json!(rt.api_version(version));
        o["kind"] = json!(rt.kind);
        o
    }

    pub(crate) fn get(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.objects
            .get(&rt.id())
            .and_then(|m| m.get(&Self::key(rt, ns, name)))
            .map(|o| Self::present(rt, version, o))
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// The objects of `res` as they were at `rv` (which must not be compacted), borrowed: a
    /// list page costs what it returns, not a copy of the collection.
    fn state_at(&self, res: &str, rv: u64) -> BTreeMap<&Key, &Value> {
        let mut state: BTreeMap<&Key, &Value> = self
            .objects
            .get(res)
            .map(|m| m.iter().collect())
            .unwrap_or_default();
        for c in self.history.iter().rev() {
            if c.rv <= rv {
                break;
            }
            if c.res != res {
                continue;
            }
            match &c.prev {
                Some(p) => {
                    state.insert(&c.key, p);
                }
                None => {
                    state.remove(&c.key);
                }
            }
        }
        state
    }

    pub(crate) fn list(
        &self,
        rt: &ResourceType,
        version: &str,
        opts: &ListOptions,
    ) -> Result<Value, ApiError> {
        let continue_from = match &opts.continue_token {
            None => None,
            Some(t) => {
                let bad = || {
                    ApiError::bad_request(
                        "continue key is not valid: the continue token is malformed",
                    )
                };
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(t)
                    .map_err(|_| bad())?;
                let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
                let rv = v["rv"].as_u64().ok_or_else(bad)?;
                let ns = v["ns"].as_str().ok_or_else(bad)?.to_owned();
                let name = v["name"].as_str().ok_or_else(bad)?.to_owned();
                if rv < self.compacted {
                    return Err(ApiError::gone(
                        "The provided continue parameter is too old to display a consistent \
                         list result. You can start a new list without the continue parameter, \
                         or use the continue token in this response to retrieve the remainder \
                         of the results. Continuing with the provided token results in an \
                         inconsistent list - objects that were created, modified, or deleted \
                         between the time the first chunk was returned and now may show up in \
                         the list.",
                    ));
                }
                Some((rv, (ns, name)))
            }
        };
        let at = match (continue_from.as_ref(), opts.at) {
            (Some((rv, _)), _) => *rv,
            (None, ListAt::Latest) => self.rv,
            (None, ListAt::NotOlderThan(n)) => {
                if n > self.rv {
                    return Err(too_large(n, self.rv));
                }
                self.rv
            }
            (None, ListAt::Exact(n)) => {
                if n > self.rv {
                    return Err(too_large(n, self.rv));
                }
                if n < self.compacted {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {n} ({})",
                        self.compacted
                    )));
                }
                n
            }
        };
        let state = self.state_at(&rt.id(), at);
        let after = match &continue_from {
            Some((_, start)) => Bound::Excluded(start),
            None => Bound::Unbounded,
        };
        let mut matching = state
            .range::<&Key, _>((after, Bound::Unbounded))
            .filter(|(k, o)| opts.filter.matches(k, o));
        let mut items = Vec::new();
        let mut last = None;
        while opts.limit.is_none_or(|l| items.len() < l) {
            let Some((k, o)) = matching.next() else { break };
            let mut o = Self::present(rt, version, o);
            if rt.builtin {
                if let Some(m) = o.as_object_mut() {
                    m.remove("apiVersion");
                    m.remove("kind");
                }
            }
            items.push(o);
            last = Some(*k);
        }
        let remaining = matching.count();
        let mut metadata = json!({"resourceVersion": at.to_string()});
        if remaining > 0 {
            if let Some((ns, name)) = last {
                let token = json!({"rv": at, "ns": ns, "name": name}).to_string();
                metadata["continue"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(token));
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
        Ok(json!({
            "kind": format!("{}List", rt.kind),
            "apiVersion": rt.api_version(version),
            "metadata": metadata,
            "items": items,
        }))
    }

    fn event_line(kind: &str, object: &Value) -> Bytes {
        let mut line = json!({"type": kind, "object": object}).to_string();
        line.push('\n');
        Bytes::from(line)
    }

    /// The type of the event a change is for one watcher, if any.
    fn event_type(w: &Watcher, c: &Change) -> Option<&'static str> {
        let was = c.prev.as_ref().is_some_and(|p| w.filter.matches(&c.key, p));
        match &c.new {
            Some(n) if w.filter.matches(&c.key, n) => Some(if was { "MODIFIED" } else { "ADDED" }),
            // Changed out of the watch's selection, or gone.
            _ if was => Some("DELETED"),
            _ => None,
        }
    }

    /// The line of a change's event of type `kind` in `version`: the object as changed, or
    /// (gone) as it was last, at the deletion's resourceVersion.
    fn change_line(rt: &ResourceType, c: &Change, kind: &str, version: &str) -> Option<Bytes> {
        match &c.new {
            Some(n) => Some(Self::event_line(kind, &Self::present(rt, version, n))),
            None => {
                let mut gone = Self::present(rt, version, c.prev.as_ref()?);
                gone["metadata"]["resourceVersion"] = json!(c.rv.to_string());
                Some(Self::event_line(kind, &gone))
            }
        }
    }

    /// The event a change is for one watcher, if any.
    fn event_for(w: &Watcher, rt: &ResourceType, c: &Change, version: &str) -> Option<Bytes> {
        Self::change_line(rt, c, Self::event_type(w, c)?, version)
    }

    /// Starts a watch of `rt` from `from` (`None`: from now, after synthetic ADDED events for
    /// what exists). `initial_events_end`: also send the streaming-list bookmark after them.
    /// Returns the watcher's id; its events go to `tx`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn watch(
        &mut self,
        rt: &ResourceType,
        version: &str,
        filter: WatchFilter,
        from: Option<u64>,
        send_initial: bool,
        bookmarks: bool,
        tx: UnboundedSender<Bytes>,
    ) -> Result<u64, ApiError> {
        let api_version = rt.api_version(version);
        let w = Watcher {
            id: self.next_watcher,
            res: rt.id(),
            api_version: api_version.clone(),
            kind: rt.kind.clone(),
            filter,
            bookmarks,
            tx,
        };
        self.next_watcher += 1;
        match from {
            Some(n) if !send_initial => {
                if n > self.rv {
                    return Err(too_large(n, self.rv));
                }
                if n < self.compacted {
                    let status = ApiError::gone(format!(
                        "too old resource version: {n} ({})",
                        self.compacted
                    ))
                    .status();
                    let _ = w.tx.send(Self::event_line("ERROR", &status));
                    return Ok(w.id);
                }
                for c in self.history.iter().filter(|c| c.rv > n && c.res == w.res) {
                    if let Some(line) = Self::event_for(&w, rt, c, version) {
                        let _ = w.tx.send(line);
                    }
                }
            }
            _ => {
                if let Some(objects) = self.objects.get(&w.res) {
                    for (k, o) in objects {
                        if w.filter.matches(k, o) {
                            let _ = w
                                .tx
                                .send(Self::event_line("ADDED", &Self::present(rt, version, o)));
                        }
                    }
                }
                if send_initial {
                    let mark = json!({
                        "kind": rt.kind,
                        "apiVersion": api_version,
                        "metadata": {
                            "resourceVersion": self.rv.to_string(),
                            "annotations": {"k8s.io/initial-events-end": "true"},
                        },
                    });
                    let _ = w.tx.send(Self::event_line("BOOKMARK", &mark));
                }
            }
        }
        let id = w.id;
        self.watchers.push(w);
        Ok(id)
    }

    /// Removes a watcher (its stream ended).
    pub(crate) fn unwatch(&mut self, id: u64) {
        self.watchers.retain(|w| w.id != id);
    }

    /// Sends every bookmark-enabled watcher a BOOKMARK at the current resourceVersion.
    pub(crate) fn bookmark_all(&mut self) {
        let rv = self.rv.to_string();
        self.watchers.retain(|w| {
            if !w.bookmarks {
                return !w.tx.is_closed();
            }
            let mark = json!({
                "kind": w.kind,
                "apiVersion": w.api_version,
                "metadata": {"resourceVersion": rv},
            });
            w.tx.send(Self::event_line("BOOKMARK", &mark)).is_ok()
        });
    }

    /// Records a change at the next resourceVersion and tells the watchers. Returns the object
    /// as stored (with its resourceVersion).
    fn commit(&mut self, res: &str, key: Key, new: Option<Value>) -> Option<Value> {
        self.rv += 1;
        let rv = self.rv;
        let new = new.map(|mut o| {
            o["metadata"]["resourceVersion"] = json!(rv.to_string());
            o
        });
        let objects = self.objects.entry(res.to_owned()).or_default();
        let prev = match &new {
            Some(o) => objects.insert(key.clone(), o.clone()),
            None => objects.remove(&key),
        };
        let change = Change {
            rv,
            res: res.to_owned(),
            key,
            prev,
            new: new.clone(),
        };
        if let Some(rt) = self.types.get(res).cloned() {
            // Serialized once per event type and version, shared by every watcher it is for
            // (as the API server's watch cache does).
            let mut lines: BTreeMap<(&'static str, String), Option<Bytes>> = BTreeMap::new();
            self.watchers.retain(|w| {
                if w.res != res {
                    return !w.tx.is_closed();
                }
                let Some(kind) = Self::event_type(w, &change) else {
                    return !w.tx.is_closed();
                };
                let version = w.api_version.rsplit('/').next().unwrap_or_default();
                let line = lines
                    .entry((kind, version.to_owned()))
                    .or_insert_with(|| Self::change_line(&rt, &change, kind, version));
                match line {
                    Some(line) => w.tx.send(line.clone()).is_ok(),
                    None => !w.tx.is_closed(),
                }
            });
        }
        self.history.push_back(change);
        while self.history.len() > self.history_limit {
            if let Some(c) = self.history.pop_front() {
                self.compacted = c.rv;
            }
        }
        new
    }

    /// Schema pruning, defaulting, structural checks and CEL rules of a custom resource
    /// (`old`: the stored object, for transition rules).
    fn admit(&self, rt: &ResourceType, o: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
        let name = meta_str(o, "name").unwrap_or_default().to_owned();
        let mut causes = Vec::new();
        if let Some(schema) = &rt.schema {
            let meta = o.get("metadata").cloned();
            prune(&schema.raw, o);
            if let Some(m) = meta {
                o["metadata"] = m;
            }
            *o = kube_cel::apply_defaults(&schema.raw, o);
            for e in lace_control::api::schema::check(&schema.raw, o) {
                let reason = if e.error.starts_with("Required") {
                    "FieldValueRequired"
                } else {
                    "FieldValueInvalid"
                };
                causes.push(Cause {
                    reason,
                    field: e.path,
                    message: e.error,
                });
            }
            if causes.is_empty() {
                if let Err(errors) = self.validator.validate_compiled(&schema.compiled, o, old) {
                    for e in errors.into_vec() {
                        let ty = value_at(o, &e.field_path).map_or("object", json_type);
                        causes.push(Cause {
                            reason: "FieldValueInvalid",
                            field: e.field_path.clone(),
                            message: format!("Invalid value: \"{ty}\": {}", e.message),
                        });
                    }
                }
            }
        }
        if rt.kind == "Pod" {
            let containers = o.pointer("/spec/containers").and_then(Value::as_array);
            match containers {
                Some(cs) if !cs.is_empty() => {
                    for (i, c) in cs.iter().enumerate() {
                        for f in ["name", "image"] {
                            if c.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                                causes.push(Cause {
                                    reason: "FieldValueRequired",
                                    field: format!("spec.containers[{i}].{f}"),
                                    message: "Required value".into(),
                                });
                            }
                        }
                    }
                }
                _ => causes.push(Cause {
                    reason: "FieldValueRequired",
                    field: "spec.containers".into(),
                    message: "Required value".into(),
                }),
            }
        }
        if rt.kind == "Event" {
            causes.extend(crate::events::validate(&rt.group, o, old));
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(&rt.group, &rt.kind, &name, causes))
        }
    }

    fn check_type(rt: &ResourceType, o: &Value) -> Result<(), ApiError> {
        let av = o
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = o.get("kind").and_then(Value::as_str).unwrap_or_default();
        let ok_version = rt.versions.iter().any(|v| rt.api_version(v) == av);
        if !ok_version || kind != rt.kind {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                rt.api_version(&rt.versions[0])
            )));
        }
        Ok(())
    }

    /// `POST` of a new object.
    pub(crate) fn create(
        &mut self,
        rt: &ResourceType,
        version: &str,
        ns: Option<&str>,
        mut o: Value,
        manager: &str,
    ) -> Result<Value, ApiError> {
        Self::check_type(rt, &o)?;
        if !o.get("metadata").is_some_and(Value::is_object) {
            o["metadata"] = json!({});
        }
        if meta_str(&o, "resourceVersion").is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = match (meta_str(&o, "name"), meta_str(&o, "generateName")) {
            (Some(n), _) if !n.is_empty() => n.to_owned(),
            (_, Some(prefix)) if !prefix.is_empty() => {
                let suffix: String = (0..5)
                    .map(|_| {
                        let i = rand::random::<u8>() % 36;
                        char::from_digit(u32::from(i), 36).unwrap_or('x')
                    })
                    .collect();
                format!("{prefix}{suffix}")
            }
            _ => {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    "",
                    vec![Cause {
                        reason: "FieldValueRequired",
                        field: "metadata.name".into(),
                        message: "Required value: name or generateName is required".into(),
                    }],
                ))
            }
        };
        let name_ok = if rt.kind == "Namespace" {
            dns_label(&name)
        } else {
            dns_subdomain(&name)
        };
        if !name_ok {
            return Err(ApiError::invalid(
                &rt.group,
                &rt.kind,
                &name,
                vec![Cause {
                    reason: "FieldValueInvalid",
                    field: "metadata.name".into(),
                    message: format!(
                        "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist \
                         of lower case alphanumeric characters, '-' or '.'"
                    ),
                }],
            ));
        }
        if rt.namespaced {
            let ns = ns.unwrap_or_default();
            if let Some(body_ns) = meta_str(&o, "namespace") {
                if body_ns != ns {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent \
                         on the request",
                    ));
                }
            }
            self.check_namespace(ns)?;
            o["metadata"]["namespace"] = json!(ns);
        } else if let Some(m) = o["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        o["metadata"]["name"] = json!(name);
        let key = Self::key(rt, ns, &name);
        let res = rt.id();
        if self.objects.get(&res).is_some_and(|m| m.contains_key(&key)) {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        if rt.status_subresource {
            if let Some(m) = o.as_object_mut() {
                m.remove("status");
            }
        }
        match rt.kind.as_str() {
            "Namespace" => {
                o["spec"] = json!({"finalizers": ["kubernetes"]});
                o["status"] = json!({"phase": "Active"});
            }
            "Pod" => o["status"] = json!({"phase": "Pending"}),
            _ => {}
        }
        self.admit(rt, &mut o, None)?;
        if rt.kind == "CustomResourceDefinition" {
            self.register_crd(&mut o)?;
        }
        let meta = &mut o["metadata"];
        meta["uid"] = json!(uid());
        meta["creationTimestamp"] = json!(now());
        meta["generation"] = json!(1);
        if let Some(m) = meta.as_object_mut() {
            m.remove("deletionTimestamp");
            m.remove("managedFields");
        }
        record_update(None, &mut o, manager, Target::Main, rt);
        let stored = self.commit(&res, key, Some(o)).unwrap_or_default();
        Ok(Self::present(rt, version, &stored))
    }

    /// Writes `new` over the stored `old`: the subresource rules, immutable metadata, the
    /// generation, admission, finalizers. `new` has the caller's changes applied to `old`.
    fn write(
        &mut self,
        rt: &ResourceType,
        version: &str,
        key: Key,
        old: &Value,
        mut new: Value,
        target: Target,
    ) -> Result<Value, ApiError> {
        let managed = new["metadata"].get("managedFields").cloned();
        // What a write may not change.
        match target {
            Target::Status => {
                let status = new.get("status").cloned();
                new = old.clone();
                match status {
                    Some(s) => new["status"] = s,
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            Target::Main => {
                if rt.status_subresource {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(m) = new.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
            }
        }
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
            "name",
            "namespace",
        ] {
            match old["metadata"].get(f) {
                Some(v) => new["metadata"][f] = v.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(f);
                    }
                }
            }
        }
        match managed.or_else(|| old["metadata"].get("managedFields").cloned()) {
            Some(m) => new["metadata"]["managedFields"] = m,
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
            }
        }
        if rt.kind == "Namespace" {
            new["spec"] = old.get("spec").cloned().unwrap_or_default();
        }
        self.admit(rt, &mut new, Some(old))?;
        if rt.kind == "CustomResourceDefinition" {
            self.register_crd(&mut new)?;
        }
        if generation_content(&new, rt.status_subresource)
            != generation_content(old, rt.status_subresource)
        {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            new["metadata"]["generation"] = json!(g + 1);
        }
        let mut cmp_new = new.clone();
        let mut cmp_old = old.clone();
        for o in [&mut cmp_new, &mut cmp_old] {
            if let Some(m) = o["metadata"].as_object_mut() {
                m.remove("resourceVersion");
                m.remove("managedFields");
            }
        }
        if cmp_new == cmp_old {
            // A no-op write does not bump the resourceVersion (as the real server).
            return Ok(Self::present(rt, version, old));
        }
        let terminating = new.pointer("/metadata/deletionTimestamp").is_some();
        let finalizers_left = new
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        let res = rt.id();
        if terminating && !finalizers_left && rt.kind != "Pod" {
            self.commit(&res, key, None);
            return Ok(Self::present(rt, version, &new));
        }
        let stored = self.commit(&res, key, Some(new)).unwrap_or_default();
        Ok(Self::present(rt, version, &stored))
    }

    fn stored(&self, rt: &ResourceType, key: &Key) -> Result<Value, ApiError> {
        self.objects
            .get(&rt.id())
            .and_then(|m| m.get(key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, &key.1))
    }

    fn check_rv(
        rt: &ResourceType,
        old: &Value,
        given: Option<&str>,
        name: &str,
    ) -> Result<(), ApiError> {
        match given {
            Some(rv) if !rv.is_empty() && Some(rv) != meta_str(old, "resourceVersion") => {
                Err(ApiError::conflict(&rt.group, &rt.plural, name))
            }
            _ => Ok(()),
        }
    }

    /// `PUT`: replaces the object (or its status), conditional on `metadata.resourceVersion`
    /// when the body carries one.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn replace(
        &mut self,
        rt: &ResourceType,
        version: &str,
        ns: Option<&str>,
        name: &str,
        mut body: Value,
        target: Target,
        manager: &str,
    ) -> Result<Value, ApiError> {
        Self::check_type(rt, &body)?;
        if meta_str(&body, "name") != Some(name) {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        let key = Self::key(rt, ns, name);
        let old = self.stored(rt, &key)?;
        Self::check_rv(rt, &old, meta_str(&body, "resourceVersion"), name)?;
        if let Some(m) = body["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        if let Some(m) = old["metadata"].get("managedFields") {
            body["metadata"]["managedFields"] = m.clone();
        }
        record_update(Some(&old), &mut body, manager, target, rt);
        self.write(rt, version, key, &old, body, target)
    }

    /// `PATCH` with `application/merge-patch+json` (RFC 7386). A `metadata.resourceVersion`
    /// in the patch is a precondition.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn merge_patch(
        &mut self,
        rt: &ResourceType,
        version: &str,
        ns: Option<&str>,
        name: &str,
        patch: &Value,
        target: Target,
        manager: &str,
    ) -> Result<Value, ApiError> {
        let key = Self::key(rt, ns, name);
        let old = self.stored(rt, &key)?;
        Self::check_rv(rt, &old, meta_str(patch, "resourceVersion"), name)?;
        let mut new = old.clone();
        merge(&mut new, patch);
        record_update(Some(&old), &mut new, manager, target, rt);
        self.write(rt, version, key, &old, new, target)
    }

    /// `PATCH` with `application/apply-patch+yaml`: server-side apply under `manager`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        &mut self,
        rt: &ResourceType,
        version: &str,
        ns: Option<&str>,
        name: &str,
        applied: Value,
        target: Target,
        manager: &str,
        force: bool,
    ) -> Result<(Value, bool), ApiError> {
        Self::check_type(rt, &applied)?;
        if meta_str(&applied, "name").is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        let key = Self::key(rt, ns, name);
        let old = match self.stored(rt, &key) {
            Ok(o) => o,
            Err(e) if target == Target::Status => return Err(e),
            Err(_) => {
                let mut created = applied.clone();
                created["metadata"]["name"] = json!(name);
                if let Some(m) = created["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
                let mut o = self.create(rt, version, ns, created, manager)?;
                // The creating apply owns what it set (not an Update).
                let key = Self::key(rt, ns, name);
                let set = fields::leaves(&applied, &scope(rt, Target::Main));
                set_managed(&mut o, manager, "Apply", None, rt, version, set);
                if let Some(m) = o["metadata"]["managedFields"].as_array_mut() {
                    m.retain(|e| e["operation"] != "Update" || e["manager"] != manager);
                }
                if let Some(stored) = self.objects.get_mut(&rt.id()).and_then(|m| m.get_mut(&key)) {
                    stored["metadata"]["managedFields"] = o["metadata"]["managedFields"].clone();
                }
                return Ok((o, true));
            }
        };
        Self::check_rv(rt, &old, meta_str(&applied, "resourceVersion"), name)?;
        let in_scope = scope(rt, target);
        let applied_set = fields::leaves(&applied, &in_scope);
        let sub = (target == Target::Status).then_some("status");
        let mut entries = managed_entries(&old);
        let is_me = |e: &ManagedEntry| {
            e.manager == manager && e.operation == "Apply" && e.subresource.as_deref() == sub
        };
        let mut conflicts = Vec::new();
        for p in &applied_set {
            let live = fields::get(&old, p);
            let want = fields::get(&applied, p);
            if live == want || merges_into(want, live) {
                continue;
            }
            for e in entries.iter().filter(|e| !is_me(e) && e.manager != manager) {
                if e.fields.iter().any(|q| fields::overlaps(p, q)) {
                    conflicts.push((e.manager.clone(), p.clone()));
                }
            }
        }
        if !conflicts.is_empty() && !force {
            let n = conflicts.len();
            let list = conflicts
                .iter()
                .map(|(m, p)| format!("conflict with \"{m}\": .{}", p.join(".")))
                .collect::<Vec<_>>();
            let mut e = ApiError::new(
                409,
                "Conflict",
                format!(
                    "Apply failed with {n} conflict{}: {}",
                    if n == 1 { "" } else { "s" },
                    list.join("\n")
                ),
            )
            .with_details(&rt.group, &rt.plural, name);
            e.causes = conflicts
                .iter()
                .map(|(m, p)| Cause {
                    reason: "FieldManagerConflict",
                    field: format!(".{}", p.join(".")),
                    message: format!("conflict with \"{m}\""),
                })
                .collect();
            return Err(e);
        }
        // Forced: the applier takes the fields it changed.
        for (m, p) in &conflicts {
            for e in entries.iter_mut().filter(|e| &e.manager == m) {
                e.fields.retain(|q| !fields::overlaps(p, q));
            }
        }
        let mut new = old.clone();
        for p in &applied_set {
            if let Some(v) = fields::get(&applied, p) {
                if !merges_into(Some(v), fields::get(&old, p)) {
                    fields::set(&mut new, p, v.clone());
                }
            }
        }
        let previously: BTreeSet<Path> = entries
            .iter()
            .filter(|e| is_me(e))
            .flat_map(|e| e.fields.iter().cloned())
            .collect();
        for q in previously.difference(&applied_set) {
            let others = entries
                .iter()
                .filter(|e| !is_me(e))
                .any(|e| e.fields.iter().any(|f| fields::overlaps(f, q)));
            if !others {
                fields::remove(&mut new, q);
            }
        }
        entries.retain(|e| !is_me(e));
        entries.push(ManagedEntry {
            manager: manager.to_owned(),
            operation: "Apply".into(),
            subresource: sub.map(String::from),
            api_version: rt.api_version(version),
            fields: applied_set,
        });
        store_entries(&mut new, entries);
        let out = self.write(rt, version, key, &old, new, target)?;
        Ok((out, false))
    }

    /// `DELETE`: removes the object, or marks it terminating while finalizers remain (or, for
    /// a pod bound to a node, until the kubelet deletes it with a grace period of 0).
    pub(crate) fn delete(
        &mut self,
        rt: &ResourceType,
        version: &str,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let key = Self::key(rt, ns, name);
        let old = self.stored(rt, &key)?;
        if let Some(rv) = &opts.precondition_rv {
            if Some(rv.as_str()) != meta_str(&old, "resourceVersion") {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: \
                         ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        qualified(&rt.plural, &rt.group),
                        meta_str(&old, "resourceVersion").unwrap_or_default()
                    ),
                ));
            }
        }
        if let Some(u) = &opts.precondition_uid {
            if Some(u.as_str()) != meta_str(&old, "uid") {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID \
                         in precondition: {u}, UID in object meta: {}",
                        qualified(&rt.plural, &rt.group),
                        meta_str(&old, "uid").unwrap_or_default()
                    ),
                ));
            }
        }
        let finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty())
            || (rt.kind == "Namespace");
        let graceful_pod = rt.kind == "Pod"
            && old
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty())
            && !matches!(
                old.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            )
            && opts.grace_period_seconds != Some(0);
        if graceful_pod || finalizers {
            if old.pointer("/metadata/deletionTimestamp").is_some() && !graceful_pod {
                return Ok(Self::present(rt, version, &old));
            }
            let mut new = old.clone();
            if old.pointer("/metadata/deletionTimestamp").is_none() {
                new["metadata"]["deletionTimestamp"] = json!(now());
            }
            if graceful_pod {
                let grace = opts.grace_period_seconds.unwrap_or_else(|| {
                    old.pointer("/spec/terminationGracePeriodSeconds")
                        .and_then(Value::as_i64)
                        .unwrap_or(30)
                });
                new["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            }
            if rt.kind == "Namespace" {
                new["status"]["phase"] = json!("Terminating");
            }
            if new == old {
                return Ok(Self::present(rt, version, &old));
            }
            let stored = self.commit(&rt.id(), key, Some(new)).unwrap_or_default();
            return Ok(Self::present(rt, version, &stored));
        }
        if rt.kind == "CustomResourceDefinition" {
            self.unregister_crd(&old);
        }
        self.commit(&rt.id(), key, None);
        Ok(Self::present(rt, version, &old))
    }

    /// A CRD written: checks it and serves (or re-serves) its resource; sets its status.
    fn register_crd(&mut self, crd: &mut Value) -> Result<(), ApiError> {
        let name = meta_str(crd, "name").unwrap_or_default().to_owned();
        let spec = &crd["spec"];
        let group = spec["group"].as_str().unwrap_or_default().to_owned();
        let plural = spec["names"]["plural"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let kind = spec["names"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let invalid = |field: &str, message: String| {
            ApiError::invalid(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                &name,
                vec![Cause {
                    reason: "FieldValueInvalid",
                    field: field.into(),
                    message,
                }],
            )
        };
        if name != format!("{plural}.{group}") {
            return Err(invalid(
                "metadata.name",
                format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
            ));
        }
        if kind.is_empty() {
            return Err(invalid("spec.names.kind", "Required value".into()));
        }
        let versions: Vec<&Value> = spec["versions"]
            .as_array()
            .map(|v| v.iter().filter(|v| v["served"] == true).collect())
            .unwrap_or_default();
        let Some(storage) = versions.iter().find(|v| v["storage"] == true) else {
            return Err(invalid(
                "spec.versions",
                "Invalid value: must have exactly one version marked as storage version".into(),
            ));
        };
        let schema = storage["schema"]["openAPIV3Schema"].clone();
        let compiled = kube_cel::compile_schema(&schema);
        if compiled.has_errors() {
            let errors = compiled
                .compilation_errors()
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ");
            return Err(invalid(
                "spec.validation.openAPIV3Schema",
                format!("Invalid value: compilation failed: {errors}"),
            ));
        }
        let over_budget = crate::cost::refusals(&schema).map_err(|e| {
            invalid(
                &e.field,
                format!("Invalid value: compilation failed: {}", e.message),
            )
        })?;
        if !over_budget.is_empty() {
            return Err(ApiError::invalid(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                &name,
                over_budget
                    .into_iter()
                    .map(|(field, message)| Cause {
                        reason: "FieldValueForbidden",
                        field,
                        message,
                    })
                    .collect(),
            ));
        }
        let mut names: Vec<String> = vec![storage["name"].as_str().unwrap_or_default().to_owned()];
        names.extend(
            versions
                .iter()
                .filter_map(|v| v["name"].as_str())
                .filter(|n| *n != names[0])
                .map(String::from)
                .collect::<Vec<_>>(),
        );
        let rt = ResourceType {
            group: group.clone(),
            versions: names,
            plural: plural.clone(),
            singular: spec["names"]["singular"]
                .as_str()
                .map_or_else(|| kind.to_ascii_lowercase(), String::from),
            kind: kind.clone(),
            short_names: spec["names"]["shortNames"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
            namespaced: spec["scope"] == "Namespaced",
            status_subresource: storage["subresources"]["status"].is_object(),
            builtin: false,
            schema: Some(Arc::new(Schema {
                raw: schema,
                compiled,
            })),
        };
        if let Some(existing) = self.types.get(&rt.id()) {
            if existing.builtin {
                return Err(invalid(
                    "spec.group",
                    "Invalid value: a built-in group".into(),
                ));
            }
        }
        self.types.insert(rt.id(), rt);
        let t = now();
        crd["status"] = json!({
            "acceptedNames": spec["names"].clone(),
            "storedVersions": [storage["name"].clone()],
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": t},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": t},
            ],
        });
        Ok(())
    }

    fn unregister_crd(&mut self, crd: &Value) {
        let group = crd["spec"]["group"].as_str().unwrap_or_default();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
        let id = format!("{group}/{plural}");
        let keys: Vec<Key> = self
            .objects
            .get(&id)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for k in keys {
            self.commit(&id, k, None);
        }
        self.types.remove(&id);
        self.watchers.retain(|w| w.res != id);
    }
}

fn too_large(n: u64, current: u64) -> ApiError {
    let mut e = ApiError::new(
        504,
        "Timeout",
        format!("Too large resource version: {n}, current: {current}"),
    );
    e.details = Some(Box::default());
    e.causes = vec![Cause {
        reason: "ResourceVersionTooLarge",
        field: String::new(),
        message: format!("Too large resource version: {n}, current: {current}"),
    }];
    e
}

/// Whether applying `want` over `live` changes nothing: an empty map merges into a map.
fn merges_into(want: Option<&Value>, live: Option<&Value>) -> bool {
    matches!((want, live), (Some(Value::Object(w)), Some(Value::Object(_))) if w.is_empty())
}

/// RFC 7386 merge patch.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// What a write to `target` of `rt` may own.
fn scope(rt: &ResourceType, target: Target) -> impl Fn(&[String]) -> bool {
    let status_sub = rt.status_subresource;
    move |p: &[String]| {
        let is_status = p.first().map(String::as_str) == Some("status");
        match target {
            Target::Status => is_status,
            Target::Main => !(status_sub && is_status),
        }
    }
}

#[derive(Debug, Clone)]
struct ManagedEntry {
    manager: String,
    operation: String,
    subresource: Option<String>,
    api_version: String,
    fields: BTreeSet<Path>,
}

fn managed_entries(o: &Value) -> Vec<ManagedEntry> {
    o.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| ManagedEntry {
                    manager: e["manager"].as_str().unwrap_or_default().to_owned(),
                    operation: e["operation"].as_str().unwrap_or_default().to_owned(),
                    subresource: e["subresource"].as_str().map(String::from),
                    api_version: e["apiVersion"].as_str().unwrap_or_default().to_owned(),
                    fields: fields::decode(&e["fieldsV1"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn store_entries(o: &mut Value, mut entries: Vec<ManagedEntry>) {
    entries.retain(|e| !e.fields.is_empty());
    let t = now();
    o["metadata"]["managedFields"] = Value::Array(
        entries
            .into_iter()
            .map(|e| {
                let mut v = json!({
                    "manager": e.manager,
                    "operation": e.operation,
                    "apiVersion": e.api_version,
                    "time": t,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields::encode(&e.fields),
                });
                if let Some(s) = e.subresource {
                    v["subresource"] = json!(s);
                }
                v
            })
            .collect(),
    );
}

fn set_managed(
    o: &mut Value,
    manager: &str,
    operation: &str,
    sub: Option<&str>,
    rt: &ResourceType,
    version: &str,
    set: BTreeSet<Path>,
) {
    let mut entries = managed_entries(o);
    entries.retain(|e| {
        !(e.manager == manager && e.operation == operation && e.subresource.as_deref() == sub)
    });
    entries.push(ManagedEntry {
        manager: manager.into(),
        operation: operation.into(),
        subresource: sub.map(String::from),
        api_version: rt.api_version(version),
        fields: set,
    });
    store_entries(o, entries);
}

/// An Update operation (create, PUT, merge patch) by `manager`: it takes the fields it changed
/// from every other manager; fields it removed are owned by nobody.
fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    target: Target,
    rt: &ResourceType,
) {
    let in_scope = scope(rt, target);
    let after = fields::leaves(new, &in_scope);
    let before = old
        .map(|o| fields::leaves(o, &in_scope))
        .unwrap_or_default();
    let changed: BTreeSet<Path> = after
        .iter()
        .filter(|p| old.and_then(|o| fields::get(o, p)) != fields::get(new, p))
        .cloned()
        .collect();
    let removed: BTreeSet<Path> = before.difference(&after).cloned().collect();
    if changed.is_empty() && removed.is_empty() {
        return;
    }
    let sub = (target == Target::Status).then_some("status");
    let version = new["apiVersion"]
        .as_str()
        .and_then(|a| a.rsplit('/').next())
        .unwrap_or("v1")
        .to_owned();
    let mut entries = managed_entries(old.unwrap_or(new));
    for e in &mut entries {
        e.fields.retain(|q| {
            !changed
                .iter()
                .chain(removed.iter())
                .any(|p| fields::overlaps(p, q))
        });
    }
    let mine = entries.iter().position(|e| {
        e.manager == manager && e.operation == "Update" && e.subresource.as_deref() == sub
    });
    match mine {
        Some(i) => entries[i].fields.extend(changed),
        None => entries.push(ManagedEntry {
            manager: manager.into(),
            operation: "Update".into(),
            subresource: sub.map(String::from),
            api_version: rt.api_version(&version),
            fields: changed,
        }),
    }
    store_entries(new, entries);
}
