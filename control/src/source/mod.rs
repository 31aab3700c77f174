//! Where control's input comes from: the boundary between the objects (the lace API and the
//! Kubernetes objects control reads) and the place they live.
//!
//! A [`Source`] delivers complete [`Snapshot`]s — every object control reads right now, plus the
//! per-object [`Problem`]s found while reading them — and lets the daemon block until something
//! may have changed. The daemon's event loop takes [`SourceEvent`]s: a whole [`Snapshot`] (a
//! standalone reload, a relist) or one object [`SourceEvent::Applied`] / [`SourceEvent::Deleted`]
//! (a watch event); [`pump`] turns a `Source` into snapshot events. Two implementations:
//!
//! - [`standalone::StandaloneSource`]: a directory of YAML manifests, watched with inotify.
//!   The embedded default, for a node or a laptop without an API server.
//! - [`kubernetes`]: an API server, through kube-rs watchers (`--source kubernetes`).
//!
//! # What is guaranteed
//!
//! - [`Source::load`] returns the *whole* current state, never a delta; calling it twice
//!   without a change in between returns equal [`Objects`]. Objects are keyed by name
//!   (cluster-scoped kinds) or [`NamespacedName`] (pods, services), so iteration order is
//!   deterministic.
//! - A problem with one object never fails `load`: the object is reported in
//!   [`Snapshot::problems`] and either skipped or (for a document that does not parse) replaced
//!   by the last good version the source saw, as [`Consequence`] says. `load` fails
//!   ([`SourceError`]) only when the source as a whole cannot be read, so that the caller keeps
//!   the state it has instead of applying an empty one.
//! - [`Source::wait`] loses no wake-up: a change that [`Source::load`] did not see makes the
//!   next `wait` return `true`. Spurious `true`s are allowed (the caller reloads and finds the
//!   same objects); `false` means the timeout passed with nothing observed.
//!
//! # Nodes
//!
//! A [`LaceNode`] is a Kubernetes `Node` with the two facts lace needs about it, read from
//! annotations:
//!
//! | annotation | required | value |
//! |---|---|---|
//! | `lace-cni.io/underlay` ([`UNDERLAY_ANNOTATION`]) | yes | the node's underlay (uplink) IPv6 address, e.g. `fd00:100::a` |
//! | `lace-cni.io/locator` ([`LOCATOR_ANNOTATION`]) | no | the node's SRv6 locator, e.g. `fc00:0:a::/48`; when absent control allocates one |
//!
//! A Node without a usable underlay annotation is not a lace node: it is reported
//! ([`ProblemKind::Node`]) and left out of [`Objects::nodes`].
//!
//! # The Kubernetes source
//!
//! It does not need [`Source`]'s polling shape: [`kubernetes::run`] runs one
//! `kube::runtime::watcher` per kind and sends the event loop [`SourceEvent`]s directly — see
//! its module docs. Nodes go through [`Objects::insert`] (and so [`LaceNode::from_node`])
//! exactly as here; duplicates cannot happen (the API server keeps names unique).

pub mod kubernetes;
pub mod standalone;

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::Ipv6Net;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;

use crate::api::{Network, NetworkBindingPolicy, NetworkRoutingPolicy};

/// The annotation carrying a node's underlay (uplink) IPv6 address. Required for lace nodes.
pub const UNDERLAY_ANNOTATION: &str = "lace-cni.io/underlay";
/// The annotation carrying a node's SRv6 locator (an IPv6 prefix). Optional: control
/// allocates one when it is absent.
pub const LOCATOR_ANNOTATION: &str = "lace-cni.io/locator";

/// The namespace a namespaced object without `metadata.namespace` lives in (as `kubectl`
/// assumes).
pub const DEFAULT_NAMESPACE: &str = "default";

/// A source of control's input. See the module docs for the contract.
pub trait Source: Send {
    /// The current objects and the problems found reading them. Fails only when nothing
    /// trustworthy can be returned (the caller then keeps its previous state).
    fn load(&mut self) -> Result<Snapshot, SourceError>;

    /// Blocks until something may have changed since the last [`Source::load`] (`true`) or
    /// `timeout` passes without a change (`false`). May return `true` spuriously; may overrun
    /// `timeout` by the source's debounce interval when a change arrives at its end.
    fn wait(&mut self, timeout: Duration) -> bool;
}

/// What [`Source::load`] returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Every object control reads.
    pub objects: Objects,
    /// Per-object problems, in the order they were found (for the standalone source: by file
    /// path, then document).
    pub problems: Vec<Problem>,
    /// Where each object was read from (sources with files), so that control's own findings
    /// about an object (validation errors) name the file and document too.
    pub origins: BTreeMap<ObjectRef, Origin>,
}

/// One input of the daemon's event loop from its source.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceEvent {
    /// Everything, replacing what came before (a standalone reload; a relist after a watch
    /// restarted). Boxed: it holds every object, the other events one.
    Snapshot(Box<Snapshot>),
    /// One object added or changed (a watch event).
    Applied(Object),
    /// One object removed (a watch event).
    Deleted(ObjectRef),
}

/// Runs `source` until `send` returns false: a [`SourceEvent::Snapshot`] now and after every
/// change [`Source::wait`] notices. A load that fails is logged and retried on the next change
/// (the loop keeps what it has; see [`Source::load`]).
pub fn pump(source: &mut dyn Source, poll: Duration, mut send: impl FnMut(SourceEvent) -> bool) {
    let mut due = true;
    loop {
        if due {
            match source.load() {
                Ok(snapshot) => {
                    if !send(SourceEvent::Snapshot(Box::new(snapshot))) {
                        return;
                    }
                }
                Err(e) => tracing::error!("source unreadable, keeping the last state: {e}"),
            }
        }
        due = source.wait(poll);
    }
}

/// A namespaced object's key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NamespacedName {
    /// `metadata.namespace` ([`DEFAULT_NAMESPACE`] when absent).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl NamespacedName {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Kubernetes `Node` that lace can use: it has an underlay address (and maybe a locator).
#[derive(Debug, Clone, PartialEq)]
pub struct LaceNode {
    /// The Node object (labels for node selectors).
    pub node: Node,
    /// From [`UNDERLAY_ANNOTATION`].
    pub underlay: Ipv6Addr,
    /// From [`LOCATOR_ANNOTATION`]; `None` when control is to allocate one.
    pub locator: Option<Ipv6Net>,
}

impl LaceNode {
    /// Reads the lace annotations of `node`.
    pub fn from_node(node: Node) -> Result<Self, NodeAnnotationError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let annotations = node.metadata.annotations.as_ref();
        let underlay =
            match annotations.and_then(|a| a.get(UNDERLAY_ANNOTATION)) {
                None => return Err(NodeAnnotationError::MissingUnderlay { node: name }),
                Some(value) => value.trim().parse::<Ipv6Addr>().map_err(|_| {
                    NodeAnnotationError::BadUnderlay {
                        node: name.clone(),
                        value: value.clone(),
                    }
                })?,
            };
        let locator = match annotations.and_then(|a| a.get(LOCATOR_ANNOTATION)) {
            None => None,
            Some(value) => {
                let net = value.trim().parse::<Ipv6Net>().map_err(|_| {
                    NodeAnnotationError::BadLocator {
                        node: name.clone(),
                        value: value.clone(),
                    }
                })?;
                if net.trunc() != net {
                    return Err(NodeAnnotationError::LocatorHostBits {
                        node: name,
                        value: value.clone(),
                        network: net.trunc(),
                    });
                }
                Some(net)
            }
        };
        Ok(Self {
            node,
            underlay,
            locator,
        })
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.node.metadata.name.as_deref().unwrap_or_default()
    }

    /// The node's own addresses: `status.addresses` of type `InternalIP` (what the kubelet
    /// reports, and the API server's endpoint on a control-plane node); entries that do not
    /// parse are skipped.
    pub fn internal_addresses(&self) -> Vec<std::net::IpAddr> {
        let mut out: Vec<std::net::IpAddr> = self
            .node
            .status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten())
            .filter(|a| a.type_ == "InternalIP")
            .filter_map(|a| a.address.trim().parse().ok())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// Why a Node is not a usable lace node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeAnnotationError {
    /// The underlay annotation is absent.
    #[error(
        "Node {node}: annotation {UNDERLAY_ANNOTATION} is missing; set it to the node's \
         underlay IPv6 address, e.g. {UNDERLAY_ANNOTATION}: \"fd00:100::a\""
    )]
    MissingUnderlay {
        /// The node.
        node: String,
    },
    /// The underlay annotation is not an IPv6 address.
    #[error(
        "Node {node}: annotation {UNDERLAY_ANNOTATION} {value:?} is not an IPv6 address; use \
         e.g. \"fd00:100::a\" (the underlay is IPv6)"
    )]
    BadUnderlay {
        /// The node.
        node: String,
        /// The annotation's value.
        value: String,
    },
    /// The locator annotation is not an IPv6 prefix.
    #[error(
        "Node {node}: annotation {LOCATOR_ANNOTATION} {value:?} is not an IPv6 prefix; use \
         e.g. \"fc00:0:a::/48\", or remove it to let control allocate one"
    )]
    BadLocator {
        /// The node.
        node: String,
        /// The annotation's value.
        value: String,
    },
    /// The locator has bits set beyond its prefix length.
    #[error(
        "Node {node}: annotation {LOCATOR_ANNOTATION} {value:?} has host bits set; use \
         \"{network}\""
    )]
    LocatorHostBits {
        /// The node.
        node: String,
        /// The annotation's value.
        value: String,
        /// The prefix with the host bits cleared.
        network: Ipv6Net,
    },
}

/// Everything control reads, keyed by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Objects {
    /// `lace-cni.io/v1alpha1` Networks.
    pub networks: BTreeMap<String, Network>,
    /// `lace-cni.io/v1alpha1` NetworkBindingPolicies.
    pub binding_policies: BTreeMap<String, NetworkBindingPolicy>,
    /// `lace-cni.io/v1alpha1` NetworkRoutingPolicies.
    pub routing_policies: BTreeMap<String, NetworkRoutingPolicy>,
    /// Namespaces (their labels feed `namespaceSelector`s).
    pub namespaces: BTreeMap<String, Namespace>,
    /// Nodes with their lace annotations read (Nodes without them are problems, not here).
    pub nodes: BTreeMap<String, LaceNode>,
    /// Pods; `metadata.namespace` is always set.
    pub pods: BTreeMap<NamespacedName, Pod>,
    /// Services (bound to networks continuously); `metadata.namespace` is always set.
    pub services: BTreeMap<NamespacedName, Service>,
    /// Kubernetes NetworkPolicies (bound to the network they are enforced in, continuously);
    /// `metadata.namespace` is always set.
    pub network_policies: BTreeMap<NamespacedName, NetworkPolicy>,
    /// `discovery.k8s.io/v1` EndpointSlices (a Service's backends, found by the
    /// `kubernetes.io/service-name` label); `metadata.namespace` is always set.
    pub endpoint_slices: BTreeMap<NamespacedName, EndpointSlice>,
}

impl Objects {
    /// The number of objects of all kinds.
    pub fn len(&self) -> usize {
        self.networks.len()
            + self.binding_policies.len()
            + self.routing_policies.len()
            + self.namespaces.len()
            + self.nodes.len()
            + self.pods.len()
            + self.services.len()
            + self.network_policies.len()
            + self.endpoint_slices.len()
    }

    /// Whether there are no objects at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds or replaces `object`. A Node without usable lace annotations is not a lace node:
    /// it is removed (if it was one) and the reason returned.
    pub fn insert(&mut self, object: Object) -> Result<(), NodeAnnotationError> {
        let r = object.reference();
        let key = || NamespacedName::new(r.namespace.clone().unwrap_or_default(), &r.name);
        match object {
            Object::Network(o) => {
                self.networks.insert(r.name.clone(), *o);
            }
            Object::BindingPolicy(o) => {
                self.binding_policies.insert(r.name.clone(), *o);
            }
            Object::RoutingPolicy(o) => {
                self.routing_policies.insert(r.name.clone(), *o);
            }
            Object::Namespace(o) => {
                self.namespaces.insert(r.name.clone(), *o);
            }
            Object::Node(o) => match LaceNode::from_node(*o) {
                Ok(node) => {
                    self.nodes.insert(r.name.clone(), node);
                }
                Err(e) => {
                    self.nodes.remove(&r.name);
                    return Err(e);
                }
            },
            Object::Pod(o) => {
                self.pods.insert(key(), *o);
            }
            Object::Service(o) => {
                self.services.insert(key(), *o);
            }
            Object::NetworkPolicy(o) => {
                self.network_policies.insert(key(), *o);
            }
            Object::EndpointSlice(o) => {
                self.endpoint_slices.insert(key(), *o);
            }
        }
        Ok(())
    }

    /// Removes the object `r` names; whether there was one.
    pub fn remove(&mut self, r: &ObjectRef) -> bool {
        let key = || NamespacedName::new(r.namespace.clone().unwrap_or_default(), &r.name);
        match r.kind {
            ObjectKind::Network => self.networks.remove(&r.name).is_some(),
            ObjectKind::NetworkBindingPolicy => self.binding_policies.remove(&r.name).is_some(),
            ObjectKind::NetworkRoutingPolicy => self.routing_policies.remove(&r.name).is_some(),
            ObjectKind::Namespace => self.namespaces.remove(&r.name).is_some(),
            ObjectKind::Node => self.nodes.remove(&r.name).is_some(),
            ObjectKind::Pod => self.pods.remove(&key()).is_some(),
            ObjectKind::Service => self.services.remove(&key()).is_some(),
            ObjectKind::NetworkPolicy => self.network_policies.remove(&key()).is_some(),
            ObjectKind::EndpointSlice => self.endpoint_slices.remove(&key()).is_some(),
        }
    }
}

/// One object of a kind sources deliver (boxed: the kinds differ much in size).
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    /// A Network.
    Network(Box<Network>),
    /// A NetworkBindingPolicy.
    BindingPolicy(Box<NetworkBindingPolicy>),
    /// A NetworkRoutingPolicy.
    RoutingPolicy(Box<NetworkRoutingPolicy>),
    /// A Namespace.
    Namespace(Box<Namespace>),
    /// A Node (with or without lace annotations: [`Objects::insert`] decides).
    Node(Box<Node>),
    /// A Pod.
    Pod(Box<Pod>),
    /// A Service.
    Service(Box<Service>),
    /// A Kubernetes NetworkPolicy.
    NetworkPolicy(Box<NetworkPolicy>),
    /// A `discovery.k8s.io/v1` EndpointSlice.
    EndpointSlice(Box<EndpointSlice>),
}

impl Object {
    /// Kind, namespace and name.
    pub fn reference(&self) -> ObjectRef {
        let (kind, meta) = match self {
            Object::Network(o) => (ObjectKind::Network, &o.metadata),
            Object::BindingPolicy(o) => (ObjectKind::NetworkBindingPolicy, &o.metadata),
            Object::RoutingPolicy(o) => (ObjectKind::NetworkRoutingPolicy, &o.metadata),
            Object::Namespace(o) => (ObjectKind::Namespace, &o.metadata),
            Object::Node(o) => (ObjectKind::Node, &o.metadata),
            Object::Pod(o) => (ObjectKind::Pod, &o.metadata),
            Object::Service(o) => (ObjectKind::Service, &o.metadata),
            Object::NetworkPolicy(o) => (ObjectKind::NetworkPolicy, &o.metadata),
            Object::EndpointSlice(o) => (ObjectKind::EndpointSlice, &o.metadata),
        };
        ObjectRef {
            kind,
            namespace: kind.is_namespaced().then(|| {
                meta.namespace
                    .clone()
                    .unwrap_or_else(|| DEFAULT_NAMESPACE.into())
            }),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

/// The kinds a source delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// `lace-cni.io/v1alpha1` Network.
    Network,
    /// `lace-cni.io/v1alpha1` NetworkBindingPolicy.
    NetworkBindingPolicy,
    /// `lace-cni.io/v1alpha1` NetworkRoutingPolicy.
    NetworkRoutingPolicy,
    /// `v1` Namespace.
    Namespace,
    /// `v1` Node.
    Node,
    /// `v1` Pod.
    Pod,
    /// `v1` Service.
    Service,
    /// `networking.k8s.io/v1` NetworkPolicy.
    NetworkPolicy,
    /// `discovery.k8s.io/v1` EndpointSlice.
    EndpointSlice,
}

impl ObjectKind {
    /// Every kind.
    pub const ALL: [ObjectKind; 9] = [
        ObjectKind::Network,
        ObjectKind::NetworkBindingPolicy,
        ObjectKind::NetworkRoutingPolicy,
        ObjectKind::Namespace,
        ObjectKind::Node,
        ObjectKind::Pod,
        ObjectKind::Service,
        ObjectKind::NetworkPolicy,
        ObjectKind::EndpointSlice,
    ];

    /// The `apiVersion` of the kind.
    pub fn api_version(self) -> &'static str {
        match self {
            ObjectKind::Network
            | ObjectKind::NetworkBindingPolicy
            | ObjectKind::NetworkRoutingPolicy => "lace-cni.io/v1alpha1",
            ObjectKind::Namespace | ObjectKind::Node | ObjectKind::Pod | ObjectKind::Service => {
                "v1"
            }
            ObjectKind::NetworkPolicy => "networking.k8s.io/v1",
            ObjectKind::EndpointSlice => "discovery.k8s.io/v1",
        }
    }

    /// The `kind` string.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Network => "Network",
            ObjectKind::NetworkBindingPolicy => "NetworkBindingPolicy",
            ObjectKind::NetworkRoutingPolicy => "NetworkRoutingPolicy",
            ObjectKind::Namespace => "Namespace",
            ObjectKind::Node => "Node",
            ObjectKind::Pod => "Pod",
            ObjectKind::Service => "Service",
            ObjectKind::NetworkPolicy => "NetworkPolicy",
            ObjectKind::EndpointSlice => "EndpointSlice",
        }
    }

    /// The kind for an `apiVersion` and `kind`, if a source delivers it.
    pub fn from_type(api_version: &str, kind: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.api_version() == api_version && k.as_str() == kind)
    }

    /// Whether objects of the kind live in a namespace.
    pub fn is_namespaced(self) -> bool {
        matches!(
            self,
            ObjectKind::Pod
                | ObjectKind::Service
                | ObjectKind::NetworkPolicy
                | ObjectKind::EndpointSlice
        )
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Names one object: its kind, namespace (namespaced kinds only) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// The kind.
    pub kind: ObjectKind,
    /// The namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Where an object was read from (the standalone source: a file and a document in it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    /// The file.
    pub file: PathBuf,
    /// The document in the file, counted from 1 as `---` separates them; `None` when the
    /// problem concerns the whole file.
    pub document: Option<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.document {
            Some(d) => write!(f, "{} document {}", self.file.display(), d),
            None => write!(f, "{}", self.file.display()),
        }
    }
}

/// A problem with one object or one file; the rest of the snapshot is unaffected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where it was found (`None` from sources without files).
    pub origin: Option<Origin>,
    /// The object concerned, when known (a document that is not YAML has none).
    pub object: Option<ObjectRef>,
    /// What is wrong.
    pub kind: ProblemKind,
    /// What the source did about it.
    pub consequence: Consequence,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(origin) = &self.origin {
            write!(f, "{origin}")?;
            // A node error names its node already.
            if let (Some(object), false) = (&self.object, matches!(self.kind, ProblemKind::Node(_)))
            {
                write!(f, " ({object})")?;
            }
            write!(f, ": ")?;
        } else if let Some(object) = &self.object {
            write!(f, "{object}: ")?;
        }
        write!(f, "{}; {}", self.kind, self.consequence)
    }
}

impl std::error::Error for Problem {}

/// What is wrong with an object or a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProblemKind {
    /// The file could not be read.
    #[error("cannot read the file: {error}; check that it exists and is readable")]
    Unreadable {
        /// The I/O error.
        error: String,
    },
    /// The text is not YAML (e.g. a half-saved file).
    #[error("not valid YAML: {error}; fix the syntax")]
    Yaml {
        /// The parser's error, with line and column.
        error: String,
    },
    /// The document is not a mapping with `apiVersion`, `kind` and `metadata.name` strings.
    #[error("{field} is missing or not a string; every document needs apiVersion, kind and metadata.name")]
    MissingField {
        /// The field (`apiVersion`, `kind` or `metadata.name`).
        field: &'static str,
    },
    /// The document does not match its kind's schema.
    #[error("does not decode as {api_version} {kind}: {}; fix {}", render_fields(.errors), if .errors.len() == 1 { "it" } else { "them" })]
    Decode {
        /// The document's `apiVersion`.
        api_version: String,
        /// The document's `kind`.
        kind: String,
        /// Every error found, each with its full field path (e.g. `spec.ipv4Subnet.prefix`;
        /// `the document` for the top level). Never empty.
        errors: Vec<crate::api::schema::FieldError>,
    },
    /// The object decodes but its values are invalid (control's validation, every error).
    #[error("{}", .errors.join("; "))]
    Invalid {
        /// The validation messages, each naming the object, the field and the fix.
        errors: Vec<String>,
    },
    /// A kind this source does not read.
    #[error(
        "unknown kind {api_version} {kind} (named {name:?}); lace reads lace-cni.io/v1alpha1 \
         Network, NetworkBindingPolicy, NetworkRoutingPolicy, v1 Namespace, Node, Pod, \
         Service, networking.k8s.io/v1 NetworkPolicy and discovery.k8s.io/v1 EndpointSlice"
    )]
    UnknownKind {
        /// The document's `apiVersion`.
        api_version: String,
        /// The document's `kind`.
        kind: String,
        /// The document's `metadata.name`, if any.
        name: String,
    },
    /// Another object with the same kind, namespace and name came first.
    #[error("duplicate of the object at {first}; rename or remove one of them")]
    Duplicate {
        /// Where the object that is kept was read.
        first: Origin,
    },
    /// A Node without usable lace annotations.
    #[error("{0}")]
    Node(#[from] NodeAnnotationError),
}

fn render_fields(errors: &[crate::api::schema::FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What the source did about a [`Problem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consequence {
    /// The object is left out of the snapshot.
    Skipped,
    /// The document (or what could not be read of the file) is broken; the last good version
    /// of the objects it held (this many) stays in use until it is fixed.
    KeptLastGood {
        /// Objects kept.
        objects: usize,
    },
    /// The document is broken and no good version of what it held was ever read: it
    /// contributes nothing.
    NothingKept,
    /// The object's values are invalid; the last valid version stays in force.
    LastValidInForce,
}

impl fmt::Display for Consequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Consequence::Skipped => f.write_str("the object is skipped"),
            Consequence::KeptLastGood { objects } => write!(
                f,
                "keeping the last good version of what it held ({objects} objects) until it is \
                 fixed"
            ),
            Consequence::NothingKept => f.write_str("it contributes no objects until it is fixed"),
            Consequence::LastValidInForce => {
                f.write_str("its last valid version stays in force until it is fixed")
            }
        }
    }
}

/// Why [`Source::load`] returned nothing.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The manifest directory cannot be listed.
    #[error(
        "cannot read the manifest directory {}: {source}; check that it exists and is a \
         readable directory",
        dir.display()
    )]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
