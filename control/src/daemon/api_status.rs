//! Kubernetes mode's status sink: what `lace-control status` shows, also written to the
//! objects themselves — each Network's `status` (`id`, conditions), each NetworkBindingPolicy's
//! and NetworkRoutingPolicy's conditions — with server-side apply of the `status` subresource
//! under the field manager `lace-control`, and an Event on every condition transition, so
//! `kubectl get networks -o yaml` and `kubectl describe` show them (ADR 0024). Services and
//! NetworkPolicies get the Events of their conditions' transitions (`Valid`, `Programmed`,
//! `TargetPortsResolved`; `Valid`) and nothing else: their `status` belongs to Kubernetes
//! (ADR 0037).
//!
//! Every node's control derives these from the same objects and the same allocation state.
//! One of them writes them: the holder of the Lease `lace-control` in control's namespace
//! (`coordination.k8s.io/v1`, taken and renewed with resourceVersion preconditions,
//! [`LEASE_SECONDS`] long, renewed every [`RENEW`]). A control that loses it stops writing;
//! the one that takes it over applies every object's status again and compares the conditions
//! with what the objects show, so a transition is reported once whoever was writing when it
//! happened. For a Service or a NetworkPolicy, whose status holds no lace conditions, what it
//! shows is the last Event lace-control recorded on it (that object, by uid) per condition type.
//! Nothing allocates through this Lease: losing it costs a late status, never a wrong one.
//!
//! The writing happens on a thread of its own: [`ApiStatusSink::publish`] hands it the latest
//! status and returns (a slow API server never delays a CNI answer). An object is applied again
//! only when its status changed since it was last applied; a failed apply (API unreachable,
//! object just deleted) is retried at the next round. The wrapped sink (the status file) is
//! always written first, on the caller's thread.
//!
//! Events are `v1` Events in the object's namespace (`default` for the cluster-scoped lace
//! kinds, where the API server puts them): `involvedObject` the object (with its uid), `reason`
//! the condition's reason, `type` `Normal` when the condition is `True` and `Warning`
//! otherwise, the message `<type>=<status>: <message>`, source and reporting component
//! `lace-control`, reporting instance the node.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use super::status::{StatusFile, StatusSink};
use crate::api::{Condition, Network, NetworkBindingPolicy, NetworkRoutingPolicy};
use crate::source::kubernetes::{KubernetesConfig, KubernetesError};

/// The field manager of everything control writes.
pub const FIELD_MANAGER: &str = "lace-control";
/// The Lease whose holder writes the status and Events.
pub const LEASE: &str = "lace-control";
/// How long a Lease holds without renewal.
pub const LEASE_SECONDS: i32 = 15;
/// How often the holder renews it (and others look whether it expired).
pub const RENEW: Duration = Duration::from_secs(5);
/// The longest Event message the API server takes.
const MAX_NOTE: usize = 1024;

/// One object's wanted status.
#[derive(Debug, Clone, PartialEq)]
struct Wanted {
    kind: &'static str,
    /// A core kind's namespace; `None` for the cluster-scoped lace kinds.
    namespace: Option<String>,
    name: String,
    status: Value,
}

impl Wanted {
    fn key(&self) -> Key {
        (self.kind, self.namespace.clone(), self.name.clone())
    }
}

/// An object: kind, namespace (core kinds), name.
type Key = (&'static str, Option<String>, String);

/// Applies each object's status to the API server, after `inner` (see the module docs).
#[derive(Debug)]
pub struct ApiStatusSink<S> {
    inner: S,
    tx: Option<mpsc::Sender<Vec<Wanted>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<S> Drop for ApiStatusSink<S> {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl<S: StatusSink> ApiStatusSink<S> {
    /// Connects as `kube` says (its node is the Lease's holder identity and the Events'
    /// reporting instance), with the Lease in `namespace`; `inner` keeps receiving the whole
    /// status.
    pub fn new(
        kube: &KubernetesConfig,
        namespace: &str,
        inner: S,
    ) -> Result<Self, KubernetesError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(KubernetesError::Runtime)?;
        // The writer's client lives on the writer's runtime.
        let client = runtime.block_on(crate::source::kubernetes::client(kube))?;
        let (tx, rx) = mpsc::channel();
        let mut writer = Writer {
            runtime,
            kinds: [
                ApiResource::erase::<Network>(&()),
                ApiResource::erase::<NetworkBindingPolicy>(&()),
                ApiResource::erase::<NetworkRoutingPolicy>(&()),
                ApiResource::erase::<Service>(&()),
                ApiResource::erase::<NetworkPolicy>(&()),
            ],
            lease: Leadership {
                api: Api::namespaced(client.clone(), namespace),
                identity: kube.node.clone(),
                observed: None,
                held_until: None,
            },
            client,
            node: kube.node.clone(),
            applied: BTreeMap::new(),
        };
        let thread = std::thread::Builder::new()
            .name("status-writer".into())
            .spawn(move || writer.run(&rx))
            .map_err(KubernetesError::Runtime)?;
        Ok(Self {
            inner,
            tx: Some(tx),
            thread: Some(thread),
        })
    }
}

impl<S: StatusSink> StatusSink for ApiStatusSink<S> {
    fn publish(&mut self, status: &StatusFile) -> Result<(), crate::fsio::WriteError> {
        self.inner.publish(status)?;
        let mut wanted = Vec::new();
        for n in &status.networks {
            let s = serde_json::to_value(&n.status).unwrap_or_default();
            wanted.push(Wanted {
                kind: "Network",
                namespace: None,
                name: n.name.clone(),
                status: bounded(s),
            });
        }
        for (kind, entries) in [
            ("NetworkBindingPolicy", &status.binding_policies),
            ("NetworkRoutingPolicy", &status.routing_policies),
        ] {
            for e in entries {
                wanted.push(Wanted {
                    kind,
                    namespace: None,
                    name: e.name.clone(),
                    status: bounded(json!({"conditions": e.conditions})),
                });
            }
        }
        for (kind, entries) in [
            ("Service", &status.services),
            ("NetworkPolicy", &status.network_policies),
        ] {
            for e in entries {
                wanted.push(Wanted {
                    kind,
                    namespace: Some(e.namespace.clone()),
                    name: e.name.clone(),
                    status: json!({"conditions": e.conditions}),
                });
            }
        }
        if let Some(tx) = &self.tx {
            // The writer gone (it cannot be: it lives as long as the sender) loses nothing
            // the status file does not have.
            let _ = tx.send(wanted);
        }
        Ok(())
    }
}

/// The Lease, as this control sees it.
struct Leadership {
    api: Api<Lease>,
    identity: String,
    /// The holder and renew time last seen, and when they were first seen (the clock that
    /// decides expiry is this control's own, never the holder's).
    observed: Option<(String, Option<MicroTime>, Instant)>,
    /// While this control holds it: until when (its own clock).
    held_until: Option<Instant>,
}

impl Leadership {
    /// Takes or renews the Lease; whether this control holds it now.
    async fn tick(&mut self) -> bool {
        let now = Instant::now();
        let stamp = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let duration = Duration::from_secs(LEASE_SECONDS.unsigned_abs().into());
        let got = match self.api.get_opt(LEASE).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!("Lease {LEASE}: {e}");
                return self.still_held(now);
            }
        };
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let Some(mut lease) = got else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE.into()),
                    ..ObjectMeta::default()
                },
                spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(LEASE_SECONDS),
                    acquire_time: Some(stamp.clone()),
                    renew_time: Some(stamp),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&pp, &lease).await {
                Ok(_) => self.hold(now, duration),
                Err(_) => self.still_held(now),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let seen = (holder.clone(), spec.renew_time.clone());
        let first_seen = match &self.observed {
            Some((h, r, at)) if (h, r) == (&seen.0, &seen.1) => *at,
            _ => now,
        };
        self.observed = Some((seen.0, seen.1, first_seen));
        let theirs = !holder.is_empty() && holder != self.identity;
        let held = Duration::from_secs(
            spec.lease_duration_seconds
                .unwrap_or(LEASE_SECONDS)
                .unsigned_abs()
                .into(),
        );
        if theirs && now < first_seen + held {
            self.held_until = None;
            return false;
        }
        let mut next = spec;
        if theirs || holder.is_empty() {
            next.acquire_time = Some(stamp.clone());
            next.lease_transitions = Some(next.lease_transitions.unwrap_or(0) + 1);
        }
        next.holder_identity = Some(self.identity.clone());
        next.lease_duration_seconds = Some(LEASE_SECONDS);
        next.renew_time = Some(stamp);
        lease.spec = Some(next);
        // Conditional on the version read: two takeovers cannot both succeed.
        match self.api.replace(LEASE, &pp, &lease).await {
            Ok(_) => {
                if theirs {
                    tracing::info!("took over Lease {LEASE} from {holder} (not renewed)");
                }
                self.hold(now, duration)
            }
            Err(_) => self.still_held(now),
        }
    }

    fn hold(&mut self, now: Instant, duration: Duration) -> bool {
        if self.held_until.is_none() {
            tracing::info!("holding Lease {LEASE}: this control writes the status and Events");
        }
        self.held_until = Some(now + duration);
        true
    }

    /// After a failed renewal: held until the Lease would expire.
    fn still_held(&mut self, now: Instant) -> bool {
        match self.held_until {
            Some(t) if now < t => true,
            Some(_) => {
                tracing::warn!("Lease {LEASE} not renewed in time: no longer writing status");
                self.held_until = None;
                false
            }
            None => false,
        }
    }
}

/// The writer thread's state.
struct Writer {
    runtime: tokio::runtime::Runtime,
    /// The kinds whose status or Events are written.
    kinds: [ApiResource; 5],
    lease: Leadership,
    client: kube::Client,
    node: String,
    /// The status last applied (core kinds: reported) per object, while holding the Lease.
    applied: BTreeMap<Key, Value>,
}

impl Writer {
    fn run(&mut self, rx: &mpsc::Receiver<Vec<Wanted>>) {
        let mut wanted: Vec<Wanted> = Vec::new();
        let mut next_tick = Instant::now();
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(w) => wanted = w,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            // Only the latest status counts.
            while let Ok(w) = rx.try_recv() {
                wanted = w;
            }
            let leading = if Instant::now() >= next_tick {
                next_tick = Instant::now() + RENEW;
                self.runtime.block_on(self.lease.tick())
            } else {
                self.lease.held_until.is_some_and(|t| Instant::now() < t)
            };
            if !leading {
                self.applied.clear();
                continue;
            }
            for w in &wanted {
                self.apply(w);
            }
            // A deleted object is forgotten: one made again under its name starts afresh.
            let keys: BTreeSet<Key> = wanted.iter().map(Wanted::key).collect();
            self.applied.retain(|k, _| keys.contains(k));
        }
    }

    /// The API of `w`'s kind (in its namespace), and its resource.
    fn api(&self, w: &Wanted) -> Option<(Api<DynamicObject>, &ApiResource)> {
        let ar = self.kinds.iter().find(|ar| ar.kind == w.kind)?;
        let api = match &w.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, ar),
            None => Api::all_with(self.client.clone(), ar),
        };
        Some((api, ar))
    }

    /// Applies `w` if it changed (a core kind's: only records), and reports its condition
    /// transitions.
    fn apply(&mut self, w: &Wanted) {
        let key = w.key();
        if self.applied.get(&key) == Some(&w.status) {
            return;
        }
        let Some((api, ar)) = self.api(w) else {
            return;
        };
        let ar = ar.clone();
        if w.namespace.is_some() {
            self.record(w, &api, &ar);
            return;
        }
        // The conditions the object shows now: what this control applied, or (after taking
        // the Lease over) what the object holds.
        let before: Vec<Condition> = match self.applied.get(&key) {
            Some(s) => conditions(s),
            None => match self.runtime.block_on(api.get_opt(&w.name)) {
                Ok(Some(o)) => conditions(o.data.get("status").unwrap_or(&Value::Null)),
                _ => Vec::new(),
            },
        };
        let body = json!({
            "apiVersion": "lace-cni.io/v1alpha1",
            "kind": w.kind,
            "metadata": {"name": w.name},
            "status": w.status,
        });
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        match self
            .runtime
            .block_on(api.patch_status(&w.name, &pp, &Patch::Apply(body)))
        {
            Ok(o) => {
                self.applied.insert(key, w.status.clone());
                for c in transitions(&before, &conditions(&w.status)) {
                    self.event(&ar, &o, c);
                }
            }
            Err(e) => {
                tracing::warn!(
                    "{} {}: cannot apply its status: {e}; retrying at the next change",
                    w.kind,
                    w.name
                );
                self.applied.remove(&key);
            }
        }
    }

    /// A core object's condition transitions, as Events only (its status is not lace's).
    fn record(&mut self, w: &Wanted, api: &Api<DynamicObject>, ar: &ApiResource) {
        let o = match self.runtime.block_on(api.get_opt(&w.name)) {
            Ok(Some(o)) => o,
            // Deleted meanwhile: nothing to record on.
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(
                    "{} {}/{}: cannot read it to record its Events: {e}; retrying at the next \
                     change",
                    w.kind,
                    w.namespace.as_deref().unwrap_or_default(),
                    w.name
                );
                return;
            }
        };
        let key = w.key();
        // What the object shows: what this control recorded, or (after taking the Lease over)
        // the Events lace-control recorded on it.
        let before = match self.applied.get(&key) {
            Some(s) => conditions(s),
            None => self.recorded(ar, &o),
        };
        for c in transitions(&before, &conditions(&w.status)) {
            self.event(ar, &o, c);
        }
        self.applied.insert(key, w.status.clone());
    }

    /// The conditions lace-control's Events on `o` (by uid) last recorded, one per type.
    fn recorded(&self, ar: &ApiResource, o: &DynamicObject) -> Vec<Condition> {
        let namespace = o.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let fields = format!(
            "involvedObject.kind={},involvedObject.name={},involvedObject.uid={}",
            ar.kind,
            o.metadata.name.as_deref().unwrap_or_default(),
            o.metadata.uid.as_deref().unwrap_or_default()
        );
        let lp = kube::api::ListParams::default().fields(&fields);
        let events = match self.runtime.block_on(api.list(&lp)) {
            Ok(l) => l.items,
            Err(e) => {
                tracing::debug!("Events of {fields}: {e}");
                Vec::new()
            }
        };
        latest_recorded(&events)
    }

    /// Records condition `c`'s transition on object `o` (of kind `ar`) as an Event.
    fn event(&self, ar: &ApiResource, o: &DynamicObject, c: &Condition) {
        let kind = &ar.kind;
        let name = o.metadata.name.clone().unwrap_or_default();
        let namespace = o.metadata.namespace.clone();
        let now = k8s_openapi::jiff::Timestamp::now();
        let mut note = format!("{}={}: {}", c.type_, c.status, c.message);
        cut(&mut note, MAX_NOTE);
        let reason: String = c.reason.chars().take(128).collect();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace.clone().unwrap_or_else(|| "default".into())),
                ..ObjectMeta::default()
            },
            involved_object: k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(ar.api_version.clone()),
                kind: Some(kind.clone()),
                name: Some(name.clone()),
                namespace: namespace.clone(),
                uid: o.metadata.uid.clone(),
                resource_version: o.metadata.resource_version.clone(),
                ..Default::default()
            },
            reason: Some(reason),
            message: Some(note),
            type_: Some(
                if c.status == "True" {
                    "Normal"
                } else {
                    "Warning"
                }
                .into(),
            ),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some(FIELD_MANAGER.into()),
                host: Some(self.node.clone()),
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            reporting_component: Some(FIELD_MANAGER.into()),
            reporting_instance: Some(self.node.clone()),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(
            self.client.clone(),
            namespace.as_deref().unwrap_or("default"),
        );
        if let Err(e) = self
            .runtime
            .block_on(api.create(&PostParams::default(), &event))
        {
            tracing::warn!(
                "{kind} {name}: cannot record the Event for {}: {e}",
                c.type_
            );
        }
    }
}

/// Cuts `s` to at most `max` bytes, ending in `...` when it was longer.
fn cut(s: &mut String, max: usize) {
    if s.len() > max {
        let mut at = max - 3;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
        s.push_str("...");
    }
}

/// `status` with every condition message cut to what the CRDs allow
/// ([`crate::api::limits::MAX_CONDITION_MESSAGE_LENGTH`]: a longer one would be refused whole).
fn bounded(mut status: Value) -> Value {
    if let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in list {
            if let Some(Value::String(m)) = c.get_mut("message") {
                cut(m, crate::api::limits::MAX_CONDITION_MESSAGE_LENGTH);
            }
        }
    }
    status
}

fn conditions(status: &Value) -> Vec<Condition> {
    status
        .get("conditions")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default()
}

/// The conditions lace-control's `events` of one object record last, one per type: each
/// Event's message starts `<type>=<status>:`, its reason is the condition's, and its name ends
/// in the nanoseconds it was made at.
fn latest_recorded(events: &[Event]) -> Vec<Condition> {
    let mut ours: Vec<(u128, &Event)> = events
        .iter()
        .filter(|e| e.reporting_component.as_deref() == Some(FIELD_MANAGER))
        .filter_map(|e| {
            let name = e.metadata.name.as_deref()?;
            let at = u128::from_str_radix(name.rsplit('.').next()?, 16).ok()?;
            Some((at, e))
        })
        .collect();
    ours.sort_by_key(|(at, _)| *at);
    let mut last: BTreeMap<String, Condition> = BTreeMap::new();
    for (_, e) in ours {
        let message = e.message.as_deref().unwrap_or_default();
        let Some((type_, rest)) = message.split_once('=') else {
            continue;
        };
        let Some((status, _)) = rest.split_once(':') else {
            continue;
        };
        last.insert(
            type_.to_owned(),
            Condition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: e.reason.clone().unwrap_or_default(),
                message: String::new(),
                last_transition_time: None,
                observed_generation: None,
            },
        );
    }
    last.into_values().collect()
}

/// The conditions of `after` whose status or reason differ from `before`'s (a condition that
/// appears is a transition too).
fn transitions<'a>(before: &[Condition], after: &'a [Condition]) -> Vec<&'a Condition> {
    after
        .iter()
        .filter(|c| {
            !before
                .iter()
                .any(|b| b.type_ == c.type_ && b.status == c.status && b.reason == c.reason)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(t: &str, s: &str, r: &str) -> Condition {
        Condition {
            type_: t.into(),
            status: s.into(),
            reason: r.into(),
            message: "m".into(),
            last_transition_time: None,
            observed_generation: None,
        }
    }

    #[test]
    fn a_condition_message_longer_than_the_crd_allows_is_cut_at_a_character() {
        let max = crate::api::limits::MAX_CONDITION_MESSAGE_LENGTH;
        // Two-byte characters, so the cut falls inside one unless it is moved.
        let long = "é".repeat(max);
        let mut c = cond("Valid", "False", "Invalid");
        c.message = long.clone();
        let short = cond("Ready", "True", "Programmed");
        let status = bounded(json!({"conditions": [c, short]}));
        let m = status["conditions"][0]["message"].as_str().unwrap();
        assert!(m.len() <= max, "{} bytes", m.len());
        assert!(m.ends_with("...") && long.starts_with(m.trim_end_matches("...")));
        assert_eq!(status["conditions"][1]["message"], "m");
    }

    #[test]
    fn the_conditions_a_core_object_shows_are_its_last_events_of_lace_control() {
        let event = |at: u64, component: &str, reason: &str, message: &str| Event {
            metadata: ObjectMeta {
                name: Some(format!("web.{at:x}")),
                ..ObjectMeta::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            reporting_component: Some(component.into()),
            ..Event::default()
        };
        // Out of order, as a list may give them; another component's Event does not count.
        let events = [
            event(
                0x30,
                FIELD_MANAGER,
                "Programmed",
                "Programmed=True: ClusterIPs 10.96.0.10",
            ),
            event(
                0x10,
                FIELD_MANAGER,
                "Valid",
                "Valid=True: the spec is valid",
            ),
            event(
                0x20,
                FIELD_MANAGER,
                "ClusterIPConflict",
                "Programmed=False: x: y",
            ),
            event(0x40, "kubelet", "Programmed", "Programmed=False: z"),
        ];
        let got: Vec<(String, String, String)> = latest_recorded(&events)
            .into_iter()
            .map(|c| (c.type_, c.status, c.reason))
            .collect();
        assert_eq!(
            got,
            [
                ("Programmed".into(), "True".into(), "Programmed".into()),
                ("Valid".into(), "True".into(), "Valid".into()),
            ]
        );
    }

    #[test]
    fn a_transition_is_a_new_status_or_reason() {
        let before = [
            cond("Ready", "True", "Programmed"),
            cond("Valid", "True", "Valid"),
        ];
        let after = [
            cond("Ready", "True", "LastGoodSpec"),
            cond("Valid", "True", "Valid"),
            cond("Supported", "False", "NotSupported"),
        ];
        let t: Vec<&str> = transitions(&before, &after)
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(t, ["Ready", "Supported"]);
        assert!(transitions(&after, &after).is_empty());
    }
}
