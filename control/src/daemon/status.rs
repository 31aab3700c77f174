//! The status file (standalone mode has no API server to write `status` to; Kubernetes mode
//! writes it too, for `lace-control status`): `<state dir>/status-<node>.yaml` (by default
//! `<manifests>/.lace`, see [`super::config`]), replaced atomically ([`crate::fsio`]) after every
//! batch that changed it ([`StatusFileSink`]), and what `lace-control status` prints from it.
//!
//! Format (YAML, camelCase, one document):
//!
//! ```yaml
//! node: node-a
//! updated: 2026-05-01T10:00:00Z        # when this file was written
//! tablesGeneration: 12                 # the tables' publication count after the last apply
//! networks:                            # every Network in the manifests
//! - name: backend
//!   type: l3                           # the spec in force (the last valid one while a
//!   subnets: [10.40.0.0/16, fd40::/48] #  change is refused)
//!   status: {id: 1, conditions: [{type: Valid, status: "True", reason: Valid, message: …, lastTransitionTime: …}, Ready, AddressesAvailable]}
//! bindingPolicies:  [{name, conditions: [CELValid, Valid]}]
//! routingPolicies:  [{name, conditions: [Accepted, Supported]}]
//! nodes:            [{name, conditions: [Ready]}]
//! networkEndpoints: [NetworkEndpoint objects of this node's pods (apiVersion, kind, metadata, spec) + attached: bool]
//! allocations:      [Allocation objects: every node's blocks]
//! pods:             [{namespace, name, node, binding, decidedBy}]  # bound once, when observed
//! services:         [{namespace, name, binding, decidedBy, conditions: [Valid, Programmed, TargetPortsResolved]}]  # bound continuously
//! networkPolicies:  [{namespace, name, binding, decidedBy, conditions: [Valid]}]  # bound continuously
//! learned:          [{network, mac, origin: learned|identity, node, endpoint, pending,
//!                     sequence, addresses, lastSeen}]  # l2 MACs control's learning places
//! learning:         {reports, lost, ignored, learned, moved, forgotten, refused}
//! learningError: "…"                                # why the learned MACs cannot be saved
//! notes:            ["Conflict: NetworkRoutingPolicy x: …"]  # the compiler's notes
//! problems:         ["…"]   # every decode and validation error, with file, document and field
//! error: "…"                                        # why the tables could not be compiled, if so
//! ```
//!
//! A condition's `lastTransitionTime` changes only when its status changes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::api::{Condition, NetworkStatus};

/// A Network's line in the status file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkEntry {
    /// `metadata.name`.
    pub name: String,
    /// `spec.type` (`l3`, `l2`, `external`).
    #[serde(rename = "type")]
    pub type_: String,
    /// `spec.ipv4Subnet.prefix`, `spec.ipv6Subnet.prefix` as written.
    #[serde(default)]
    pub subnets: Vec<String>,
    /// The computed status.
    pub status: NetworkStatus,
}

/// Another object's conditions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectEntry {
    /// `metadata.name`.
    pub name: String,
    /// Conditions.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// `metadata` of an object control writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// Name.
    pub name: String,
    /// Namespace (namespaced kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// An object control writes, as it would be in the API (`apiVersion`, `kind`, `metadata`,
/// `spec`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Object<S> {
    /// `lace-cni.io/v1alpha1`.
    pub api_version: String,
    /// `NetworkEndpoint`, `Allocation`.
    pub kind: String,
    /// Name (and namespace).
    pub metadata: Meta,
    /// The spec.
    pub spec: S,
}

impl<S> Object<S> {
    /// A `lace-cni.io/v1alpha1` object of `kind`.
    pub fn new(kind: &str, name: String, namespace: Option<String>, spec: S) -> Object<S> {
        Object {
            api_version: format!("{}/{}", crate::api::GROUP, crate::api::VERSION),
            kind: kind.to_owned(),
            metadata: Meta { name, namespace },
            spec,
        }
    }
}

/// A pod interface of this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointEntry {
    /// The NetworkEndpoint object (`lace-cni.io/v1alpha1`).
    #[serde(flatten)]
    pub object: Object<crate::api::NetworkEndpointSpec>,
    /// Whether the interface was attached (published to the forwarder).
    pub attached: bool,
    /// The forwarder port.
    pub port: u32,
    /// The endpoint id the forwarder acknowledges.
    pub endpoint_id: u64,
}

/// A resource's binding: a pod, a service or a Kubernetes NetworkPolicy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingEntry {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The node (pods with `spec.nodeName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The network, or `(unbound)` / `(explicitly unbound)`.
    pub binding: String,
    /// The policy and rule that decided, e.g. `tiers spec.rules[1]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// Services: `Valid`, `Programmed`, `TargetPortsResolved`; NetworkPolicies: `Valid`,
    /// `Programmed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusFile {
    /// The node.
    pub node: String,
    /// When it was written (RFC 3339, UTC).
    #[serde(default)]
    pub updated: String,
    /// The tables' generation after the last apply.
    #[serde(default)]
    pub tables_generation: u64,
    /// Networks.
    #[serde(default)]
    pub networks: Vec<NetworkEntry>,
    /// NetworkBindingPolicies.
    #[serde(default)]
    pub binding_policies: Vec<ObjectEntry>,
    /// NetworkRoutingPolicies.
    #[serde(default)]
    pub routing_policies: Vec<ObjectEntry>,
    /// Lace nodes.
    #[serde(default)]
    pub nodes: Vec<ObjectEntry>,
    /// This node's pod interfaces.
    #[serde(default)]
    pub network_endpoints: Vec<EndpointEntry>,
    /// Every node's blocks.
    #[serde(default)]
    pub allocations: Vec<Object<crate::api::AllocationSpec>>,
    /// Pod bindings (every pod of the source, on any node).
    #[serde(default)]
    pub pods: Vec<BindingEntry>,
    /// Service bindings.
    #[serde(default)]
    pub services: Vec<BindingEntry>,
    /// Kubernetes NetworkPolicy bindings.
    #[serde(default)]
    pub network_policies: Vec<BindingEntry>,
    /// The compiler's notes.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Every problem: the source's (decode errors, duplicates, …) and every invalid object's
    /// validation errors, each with its file, document and field.
    #[serde(default)]
    pub problems: Vec<String>,
    /// Why the node's tables could not be compiled or applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// l2 MACs control's learning records place: learned ones and shared identities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub learned: Vec<super::learning::LearnedEntry>,
    /// The learning counters of this node's control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning: Option<super::learning::LearnStats>,
    /// Why the learning records could not be read or saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_error: Option<String>,
}

impl StatusFile {
    /// The file without the fields that change on every write (to decide whether to write).
    pub fn content_key(&self) -> StatusFile {
        StatusFile {
            updated: String::new(),
            ..self.clone()
        }
    }
}

/// Now as RFC 3339 UTC (`2026-05-01T10:00:00Z`).
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Seconds since the epoch as RFC 3339 UTC.
pub fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Sets each condition's `lastTransitionTime`: kept from `previous` (same type) when the
/// status did not change, `now` otherwise.
pub fn stamp_transitions(conds: &mut [Condition], previous: &[Condition], now: &str) {
    for c in conds {
        let prev = previous.iter().find(|p| p.type_ == c.type_);
        c.last_transition_time = match prev {
            Some(p) if p.status == c.status => p
                .last_transition_time
                .clone()
                .or_else(|| Some(now.to_owned())),
            _ => Some(now.to_owned()),
        };
    }
}

/// Port states the forwarder reports, by port number.
pub type PortStates = BTreeMap<u32, String>;

fn conds_line(conds: &[Condition]) -> String {
    conds
        .iter()
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect::<Vec<_>>()
        .join(" ")
}

fn conds_details(out: &mut String, conds: &[Condition]) {
    for c in conds.iter().filter(|c| c.status != "True") {
        let _ = writeln!(out, "      {} {}: {}", c.type_, c.reason, c.message);
    }
}

/// The human-readable report `lace-control status` prints.
pub fn render(s: &StatusFile, ports: Option<&PortStates>) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "node {} (status written {}, tables generation {})",
        s.node, s.updated, s.tables_generation
    );
    if let Some(e) = &s.error {
        let _ = writeln!(o, "ERROR: {e}");
    }
    let _ = writeln!(o, "\nNETWORKS");
    for n in &s.networks {
        let id = n.status.id.map_or("-".to_owned(), |i| i.to_string());
        let _ = writeln!(
            o,
            "  {:<16} id {:<4} {:<8} {:<32} {}",
            n.name,
            id,
            n.type_,
            n.subnets.join(","),
            conds_line(&n.status.conditions)
        );
        conds_details(&mut o, &n.status.conditions);
    }
    for (title, list) in [
        ("BINDING POLICIES", &s.binding_policies),
        ("ROUTING POLICIES", &s.routing_policies),
        ("NODES", &s.nodes),
    ] {
        let _ = writeln!(o, "\n{title}");
        for p in list {
            let _ = writeln!(o, "  {:<24} {}", p.name, conds_line(&p.conditions));
            conds_details(&mut o, &p.conditions);
        }
    }
    let _ = writeln!(o, "\nENDPOINTS (this node)");
    for e in &s.network_endpoints {
        let spec = &e.object.spec;
        let port = match ports {
            Some(p) => p
                .get(&e.port)
                .cloned()
                .unwrap_or_else(|| "absent".to_owned()),
            None => "forwarder not running".to_owned(),
        };
        let _ = writeln!(
            o,
            "  {}/{:<20} {:<12} {:<36} {} {} port {} ({}) {}",
            e.object.metadata.namespace.as_deref().unwrap_or(""),
            spec.pod,
            spec.network,
            spec.addresses.join(","),
            spec.mac,
            spec.host_interface.as_deref().unwrap_or("-"),
            e.port,
            if e.attached { "attached" } else { "allocated" },
            port
        );
    }
    let _ = writeln!(o, "\nALLOCATIONS");
    for a in &s.allocations {
        let _ = writeln!(
            o,
            "  {:<16} {:<12} {}",
            a.spec.network,
            a.spec.node,
            a.spec.prefixes.join(",")
        );
    }
    if !(s.pods.is_empty() && s.services.is_empty() && s.network_policies.is_empty()) {
        let _ = writeln!(o, "\nBINDINGS");
        for (kind, list) in [
            ("pod", &s.pods),
            ("service", &s.services),
            ("networkpolicy", &s.network_policies),
        ] {
            for b in list {
                let tail: Vec<String> = b
                    .decided_by
                    .as_deref()
                    .map(|d| format!("(NetworkBindingPolicy {d})"))
                    .into_iter()
                    .chain((!b.conditions.is_empty()).then(|| conds_line(&b.conditions)))
                    .collect();
                let _ = writeln!(
                    o,
                    "  {kind:<14} {:<36} {:<10} {:<12} {}",
                    format!("{}/{}", b.namespace, b.name),
                    b.node.as_deref().unwrap_or(""),
                    b.binding,
                    tail.join(" ")
                );
                conds_details(&mut o, &b.conditions);
            }
        }
    }
    if s.learning.is_some() || !s.learned.is_empty() {
        let _ = writeln!(o, "\nLEARNED (l2)");
        if let Some(e) = &s.learning_error {
            let _ = writeln!(o, "  ERROR: {e}");
        }
        for l in &s.learned {
            let _ = writeln!(
                o,
                "  {:<16} {} {:<8} at {}/{} seq {} {}{} (last seen {})",
                l.network,
                l.mac,
                l.origin,
                l.node,
                l.endpoint,
                l.sequence,
                l.addresses.join(","),
                l.pending
                    .as_deref()
                    .map_or(String::new(), |p| format!(" pending {p}")),
                l.last_seen
            );
        }
        if let Some(c) = &s.learning {
            let _ = writeln!(
                o,
                "  reports {} (lost {}, ignored {}); learned {}, moved {}, forgotten {}, \
                 addresses refused {}",
                c.reports, c.lost, c.ignored, c.learned, c.moved, c.forgotten, c.refused
            );
        }
    }
    for (title, list) in [("NOTES", &s.notes), ("PROBLEMS", &s.problems)] {
        if !list.is_empty() {
            let _ = writeln!(o, "\n{title}");
            for n in list {
                let _ = writeln!(o, "  {n}");
            }
        }
    }
    o
}

/// Why `lace-control status` could not show the status.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The status file could not be read.
    #[error(
        "{path}: {source}; has `lace-control run --node {node}` run yet with the same \
         --manifests or --state-dir?"
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// This node.
        node: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a status file.
    #[error("{path}: not a lace-control status file: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
}

/// Where the report step's status goes: a file in standalone mode, the objects' `status` in
/// Kubernetes mode. Called after every batch; an unchanged status may be written again.
pub trait StatusSink {
    /// Makes `status` visible.
    fn publish(&mut self, status: &StatusFile) -> Result<(), crate::fsio::WriteError>;
}

/// The standalone sink: the status file, as YAML, written atomically when its content changed.
#[derive(Debug)]
pub struct StatusFileSink {
    path: PathBuf,
    last: Option<StatusFile>,
}

impl StatusFileSink {
    /// A sink writing `path` (its directory is created).
    pub fn new(path: PathBuf) -> StatusFileSink {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        StatusFileSink { path, last: None }
    }
}

impl StatusSink for StatusFileSink {
    fn publish(&mut self, status: &StatusFile) -> Result<(), crate::fsio::WriteError> {
        let key = status.content_key();
        if self.last.as_ref() == Some(&key) {
            return Ok(());
        }
        let yaml = serde_yaml::to_string(status).unwrap_or_default();
        crate::fsio::write_atomically(&self.path, yaml.as_bytes(), 0o644)?;
        self.last = Some(key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_767_225_599), "2025-12-31T23:59:59Z");
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let c = |s: &str, t: Option<&str>| Condition {
            type_: "Ready".into(),
            status: s.into(),
            reason: "R".into(),
            message: String::new(),
            last_transition_time: t.map(str::to_owned),
            observed_generation: None,
        };
        let prev = [c("True", Some("t0"))];
        let mut same = [c("True", None)];
        stamp_transitions(&mut same, &prev, "t1");
        assert_eq!(same[0].last_transition_time.as_deref(), Some("t0"));
        let mut flipped = [c("False", None)];
        stamp_transitions(&mut flipped, &prev, "t1");
        assert_eq!(flipped[0].last_transition_time.as_deref(), Some("t1"));
    }

    #[test]
    fn the_file_round_trips_through_yaml() {
        let s = StatusFile {
            node: "node-a".into(),
            networks: vec![NetworkEntry {
                name: "backend".into(),
                type_: "l3".into(),
                subnets: vec!["10.40.0.0/16".into()],
                status: NetworkStatus {
                    id: Some(1),
                    conditions: vec![],
                },
            }],
            ..StatusFile::default()
        };
        let y = serde_yaml::to_string(&s).unwrap();
        assert_eq!(serde_yaml::from_str::<StatusFile>(&y).unwrap(), s);
        assert!(render(&s, None).contains("backend"));
    }
}
