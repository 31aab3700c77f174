//! ClusterIP Services: what control reads of a `v1` Service and its `discovery.k8s.io/v1`
//! EndpointSlices, and the backends it compiles into the tables (ADR 0029).
//!
//! - [`parse`]: a Service's spec → its ClusterIPs, ports and session affinity ([`ServiceSpec`]),
//!   or why it has no virtual IP ([`NoVip`]: headless, ExternalName, no ClusterIP), or every
//!   error that makes it unusable ([`ServiceError`]). Pure; the daemon caches it per spec.
//! - [`backends_from_slices`]: the backends of each Service port from the Service's
//!   EndpointSlices (Kubernetes mode, and standalone mode when the directory has slices for the
//!   Service): slice ports matched to Service ports by name and protocol, every endpoint's first
//!   address with its conditions (KEP-1669: `ready` absent means ready, `serving` absent means
//!   `ready`, `terminating` absent means not terminating), duplicates across slices merged.
//! - [`backends_from_selector`]: standalone mode without slices — the pods the selector picks
//!   in the Service's namespace, with their lace endpoints (the one in the Service's network if
//!   the pod has one there, else all of them), a named `targetPort` resolved against each pod's
//!   container ports by name and protocol; conditions as the EndpointSlice controller sets
//!   them (ready = attached and the Pod not terminating nor `Ready=False`).
//! - [`in_use`]: which backends take new connections (KEP-1669): the ready ones; if none, the
//!   serving and terminating ones; if none either, none — the Service rejects.
//!
//! - [`ServiceCidr`]: the cluster's service range (`lace-control run --service-cidr`, as
//!   kube-apiserver's `--service-cluster-ip-range`); a ClusterIP outside it is not programmed.
//!
//! `internalTrafficPolicy: Local` ([`ServiceSpec::node_local`]) is kept with every backend's
//! node ([`ServiceBackend::node`]: the slice endpoint's `nodeName`, the pod endpoint's node);
//! the compiler gives each node the backends on it only (ADR 0038).
//!
//! What is not supported (and reported, never half-done): `type: ExternalName`, node ports and
//! load-balancer addresses (only the ClusterIP part of NodePort and LoadBalancer Services is
//! programmed), `externalIPs`, topology hints and `trafficDistribution` (every backend is used).

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::{Ipv4Net, Ipv6Net};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use lace_shared::policy::{Backend, BackendState, PROTO_SCTP, PROTO_TCP, PROTO_UDP};

use crate::source::NamespacedName;
use crate::world::EndpointModel;

/// The label that names an EndpointSlice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// `sessionAffinityConfig.clientIP.timeoutSeconds` when absent (Kubernetes' default: 3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT_S: u32 = 10_800;

/// The largest affinity timeout Kubernetes accepts (one day).
pub const MAX_AFFINITY_TIMEOUT_S: u32 = 86_400;

/// A Service port's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP (the default).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The protocol named `s` as the API spells it (`TCP`, `UDP`, `SCTP`).
    pub fn parse(s: &str) -> Option<Protocol> {
        match s {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// `protocol` of a port, TCP when absent (the API's default).
    fn of(field: Option<&String>) -> Option<Protocol> {
        field.map_or(Some(Protocol::Tcp), |s| Protocol::parse(s))
    }

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => PROTO_TCP,
            Protocol::Udp => PROTO_UDP,
            Protocol::Sctp => PROTO_SCTP,
        }
    }

    /// As the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

/// Where a Service port sends connections on a backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetPort {
    /// A port number.
    Number(u16),
    /// A container port's name, resolved per backend pod.
    Name(String),
}

/// One port of a Service.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PortSpec {
    /// `name` (empty for the single unnamed port).
    pub name: String,
    /// `protocol`.
    pub protocol: Protocol,
    /// `port`: the port on the ClusterIPs.
    pub port: u16,
    /// `targetPort` (defaults to `port`).
    pub target: TargetPort,
}

impl PortSpec {
    /// `name port/PROTO`, as messages name a port.
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            format!("{}/{}", self.port, self.protocol.as_str())
        } else {
            format!("{} ({}/{})", self.name, self.port, self.protocol.as_str())
        }
    }
}

/// What control programs of a Service with a virtual IP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    /// `spec.clusterIPs` (or `spec.clusterIP`): one per family, the primary first.
    pub cluster_ips: Vec<IpAddr>,
    /// `spec.ports`.
    pub ports: Vec<PortSpec>,
    /// `spec.selector`; `None` for a Service without one (its slices are managed by hand).
    pub selector: Option<BTreeMap<String, String>>,
    /// `sessionAffinity: ClientIP`'s timeout.
    pub affinity_timeout_s: Option<u32>,
    /// `spec.publishNotReadyAddresses`: not-ready pods are backends too (standalone).
    pub publish_not_ready: bool,
    /// `spec.internalTrafficPolicy: Local`: a client uses only the backends on its own node,
    /// and with none there its connections are dropped (KEP-2086, as kube-proxy does).
    pub node_local: bool,
}

/// The cluster's service range: at most one prefix per family, as kube-apiserver's
/// `--service-cluster-ip-range` (the range ClusterIPs are allocated from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServiceCidr {
    /// The IPv4 range, if any.
    pub v4: Option<Ipv4Net>,
    /// The IPv6 range, if any.
    pub v6: Option<Ipv6Net>,
}

impl ServiceCidr {
    /// One message for each of `ips` outside the range of its family (or of a family the
    /// range does not have), naming the address and the range.
    pub fn outside(&self, ips: &[IpAddr]) -> Vec<String> {
        ips.iter()
            .filter_map(|ip| {
                let range = match ip {
                    IpAddr::V4(a) => match self.v4 {
                        Some(r) if r.contains(a) => return None,
                        r => r.map(|r| r.to_string()),
                    },
                    IpAddr::V6(a) => match self.v6 {
                        Some(r) if r.contains(a) => return None,
                        r => r.map(|r| r.to_string()),
                    },
                };
                Some(match range {
                    Some(r) => format!("ClusterIP {ip} lies outside the service CIDR {r}"),
                    None => format!(
                        "ClusterIP {ip} lies outside the service CIDR {self}, which has no \
                         IPv{} range",
                        if ip.is_ipv4() { 4 } else { 6 }
                    ),
                })
            })
            .collect()
    }
}

impl std::fmt::Display for ServiceCidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v4 = self.v4.map(|p| p.to_string());
        let v6 = self.v6.map(|p| p.to_string());
        let all: Vec<String> = v4.into_iter().chain(v6).collect();
        f.write_str(&all.join(","))
    }
}

/// Why a valid Service has no virtual IP to program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoVip {
    /// `clusterIP: None`.
    Headless,
    /// `type: ExternalName`.
    ExternalName,
    /// No `clusterIP` (standalone manifests: nothing allocates one).
    NoClusterIp,
}

impl NoVip {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            NoVip::Headless => "Headless",
            NoVip::ExternalName => "ExternalName",
            NoVip::NoClusterIp => "NoClusterIP",
        }
    }

    /// What it means, for the condition's message.
    pub fn message(&self) -> &'static str {
        match self {
            NoVip::Headless => {
                "headless (clusterIP: None): no virtual IP; clients use the endpoints' own \
                 addresses"
            }
            NoVip::ExternalName => {
                "type ExternalName is a DNS alias; lace programs no virtual IP for it"
            }
            NoVip::NoClusterIp => {
                "spec.clusterIP is not set; in standalone mode nothing allocates ClusterIPs, so \
                 set spec.clusterIP (and spec.clusterIPs for dual stack) in the manifest"
            }
        }
    }
}

/// A Service as control reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// It has ClusterIPs to program.
    Vip(ServiceSpec),
    /// It is valid but has none.
    NoVip(NoVip),
}

/// One reason a Service cannot be used. Each names the Service, the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// A ClusterIP is not an IP address.
    #[error("Service {service}: {field} {value:?} is not an IP address; use e.g. 10.96.0.10 or \"None\" for a headless Service")]
    NotAddress {
        /// `namespace/name`.
        service: String,
        /// The field path.
        field: String,
        /// The value.
        value: String,
    },
    /// `clusterIPs` disagrees with `clusterIP`.
    #[error("Service {service}: spec.clusterIPs[0] {first:?} is not spec.clusterIP {cluster_ip:?}; the primary ClusterIP comes first in clusterIPs")]
    PrimaryMismatch {
        /// `namespace/name`.
        service: String,
        /// `clusterIPs[0]`.
        first: String,
        /// `clusterIP`.
        cluster_ip: String,
    },
    /// Two ClusterIPs of one family, or more than two.
    #[error("Service {service}: spec.clusterIPs {value:?} must hold at most one address per family (IPv4, IPv6)")]
    ClusterIpFamilies {
        /// `namespace/name`.
        service: String,
        /// The list.
        value: Vec<String>,
    },
    /// No ports on a Service with ClusterIPs.
    #[error("Service {service}: spec.ports is empty; a ClusterIP Service needs at least one port")]
    NoPorts {
        /// `namespace/name`.
        service: String,
    },
    /// A port number out of range.
    #[error("Service {service}: {field} {value} is outside 1..=65535")]
    PortRange {
        /// `namespace/name`.
        service: String,
        /// The field path.
        field: String,
        /// The value.
        value: i64,
    },
    /// An unknown protocol.
    #[error("Service {service}: {field} {value:?} is not a protocol lace forwards; use TCP, UDP or SCTP")]
    Protocol {
        /// `namespace/name`.
        service: String,
        /// The field path.
        field: String,
        /// The value.
        value: String,
    },
    /// A named targetPort that is not a port name.
    #[error("Service {service}: {field} {value:?} is not a port name (1-15 lowercase letters, digits and '-', with a letter); use a container port's name or a number")]
    PortName {
        /// `namespace/name`.
        service: String,
        /// The field path.
        field: String,
        /// The value.
        value: String,
    },
    /// Several ports, one without a name.
    #[error("Service {service}: spec.ports[{index}] has no name; with more than one port every port needs a unique name")]
    UnnamedPort {
        /// `namespace/name`.
        service: String,
        /// The port's index.
        index: usize,
    },
    /// Two ports with one name, or one (port, protocol) twice.
    #[error("Service {service}: spec.ports[{index}] repeats {what}; each port's name and each port/protocol must be unique")]
    DuplicatePort {
        /// `namespace/name`.
        service: String,
        /// The port's index.
        index: usize,
        /// What is repeated.
        what: String,
    },
    /// An unknown session affinity.
    #[error("Service {service}: spec.sessionAffinity {value:?} is not None or ClientIP")]
    Affinity {
        /// `namespace/name`.
        service: String,
        /// The value.
        value: String,
    },
    /// An affinity timeout out of range.
    #[error("Service {service}: spec.sessionAffinityConfig.clientIP.timeoutSeconds {value} is outside 1..={MAX_AFFINITY_TIMEOUT_S}")]
    AffinityTimeout {
        /// `namespace/name`.
        service: String,
        /// The value.
        value: i64,
    },
    /// An unknown internal traffic policy.
    #[error("Service {service}: spec.internalTrafficPolicy {value:?} is not Cluster or Local")]
    TrafficPolicy {
        /// `namespace/name`.
        service: String,
        /// The value.
        value: String,
    },
    /// An unknown Service type.
    #[error("Service {service}: spec.type {value:?} is not ClusterIP, NodePort, LoadBalancer or ExternalName")]
    Type {
        /// `namespace/name`.
        service: String,
        /// The value.
        value: String,
    },
}

/// Whether `s` is an IANA service name as Kubernetes accepts for a named port: 1-15
/// characters, lowercase letters, digits and single inner '-', at least one letter.
fn is_port_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

/// Reads Service `key`'s spec: its virtual IPs and ports, or why it has none, or every error.
pub fn parse(key: &NamespacedName, service: &Service) -> Result<Parsed, Vec<ServiceError>> {
    let svc = key.to_string();
    let default = Default::default();
    let spec = service.spec.as_ref().unwrap_or(&default);
    let mut errors = Vec::new();
    match spec.type_.as_deref() {
        None | Some("ClusterIP" | "NodePort" | "LoadBalancer") => {}
        Some("ExternalName") => return Ok(Parsed::NoVip(NoVip::ExternalName)),
        Some(other) => errors.push(ServiceError::Type {
            service: svc.clone(),
            value: other.to_owned(),
        }),
    }
    if spec.cluster_ip.as_deref() == Some("None") {
        return if errors.is_empty() {
            Ok(Parsed::NoVip(NoVip::Headless))
        } else {
            Err(errors)
        };
    }
    // The addresses: clusterIPs if set (its first must be clusterIP), else clusterIP.
    let listed: Vec<(String, String)> = match (&spec.cluster_ips, &spec.cluster_ip) {
        (Some(ips), _) if !ips.is_empty() => ips
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("spec.clusterIPs[{i}]"), v.clone()))
            .collect(),
        (_, Some(ip)) if !ip.is_empty() => vec![("spec.clusterIP".to_owned(), ip.clone())],
        _ => Vec::new(),
    };
    if let (Some(ips), Some(ip)) = (&spec.cluster_ips, &spec.cluster_ip) {
        if let Some(first) = ips.first() {
            if !ip.is_empty() && first != ip {
                errors.push(ServiceError::PrimaryMismatch {
                    service: svc.clone(),
                    first: first.clone(),
                    cluster_ip: ip.clone(),
                });
            }
        }
    }
    let mut cluster_ips = Vec::new();
    for (field, value) in &listed {
        match value.parse::<IpAddr>() {
            Ok(a) => cluster_ips.push(a),
            Err(_) => errors.push(ServiceError::NotAddress {
                service: svc.clone(),
                field: field.clone(),
                value: value.clone(),
            }),
        }
    }
    let v4 = cluster_ips.iter().filter(|a| a.is_ipv4()).count();
    if cluster_ips.len() > 2 || v4 > 1 || cluster_ips.len() - v4 > 1 {
        errors.push(ServiceError::ClusterIpFamilies {
            service: svc.clone(),
            value: listed.iter().map(|(_, v)| v.clone()).collect(),
        });
    }
    let ports = parse_ports(&svc, spec.ports.as_deref().unwrap_or_default(), &mut errors);
    let affinity_timeout_s = match spec.session_affinity.as_deref() {
        None | Some("None") => None,
        Some("ClientIP") => {
            let t = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            match t {
                None => Some(DEFAULT_AFFINITY_TIMEOUT_S),
                Some(t) if (1..=i64::from(MAX_AFFINITY_TIMEOUT_S)).contains(&i64::from(t)) => {
                    Some(t as u32)
                }
                Some(t) => {
                    errors.push(ServiceError::AffinityTimeout {
                        service: svc.clone(),
                        value: i64::from(t),
                    });
                    None
                }
            }
        }
        Some(other) => {
            errors.push(ServiceError::Affinity {
                service: svc.clone(),
                value: other.to_owned(),
            });
            None
        }
    };
    let node_local = match spec.internal_traffic_policy.as_deref() {
        None | Some("Cluster") => false,
        Some("Local") => true,
        Some(other) => {
            errors.push(ServiceError::TrafficPolicy {
                service: svc.clone(),
                value: other.to_owned(),
            });
            false
        }
    };
    if !listed.is_empty() && ports.is_empty() && errors.is_empty() {
        errors.push(ServiceError::NoPorts {
            service: svc.clone(),
        });
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    if cluster_ips.is_empty() {
        return Ok(Parsed::NoVip(NoVip::NoClusterIp));
    }
    Ok(Parsed::Vip(ServiceSpec {
        cluster_ips,
        ports,
        selector: spec.selector.clone(),
        affinity_timeout_s,
        publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false),
        node_local,
    }))
}

fn parse_ports(
    svc: &str,
    ports: &[k8s_openapi::api::core::v1::ServicePort],
    errors: &mut Vec<ServiceError>,
) -> Vec<PortSpec> {
    let mut out: Vec<PortSpec> = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    let mut pairs = std::collections::BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let field = |f: &str| format!("spec.ports[{i}].{f}");
        let mut ok = true;
        let port = u16::try_from(p.port).ok().filter(|&n| n != 0);
        if port.is_none() {
            ok = false;
            errors.push(ServiceError::PortRange {
                service: svc.to_owned(),
                field: field("port"),
                value: i64::from(p.port),
            });
        }
        let protocol = Protocol::of(p.protocol.as_ref());
        if protocol.is_none() {
            ok = false;
            errors.push(ServiceError::Protocol {
                service: svc.to_owned(),
                field: field("protocol"),
                value: p.protocol.clone().unwrap_or_default(),
            });
        }
        let target = match &p.target_port {
            None => port.map(TargetPort::Number),
            Some(IntOrString::Int(0)) => port.map(TargetPort::Number),
            Some(IntOrString::Int(n)) => match u16::try_from(*n) {
                Ok(n) => Some(TargetPort::Number(n)),
                Err(_) => {
                    errors.push(ServiceError::PortRange {
                        service: svc.to_owned(),
                        field: field("targetPort"),
                        value: i64::from(*n),
                    });
                    None
                }
            },
            Some(IntOrString::String(s)) => {
                if let Ok(n) = s.parse::<u16>() {
                    // kubectl writes numbers; a numeric string is the number.
                    (n != 0).then_some(TargetPort::Number(n)).or_else(|| {
                        errors.push(ServiceError::PortRange {
                            service: svc.to_owned(),
                            field: field("targetPort"),
                            value: 0,
                        });
                        None
                    })
                } else if is_port_name(s) {
                    Some(TargetPort::Name(s.clone()))
                } else {
                    errors.push(ServiceError::PortName {
                        service: svc.to_owned(),
                        field: field("targetPort"),
                        value: s.clone(),
                    });
                    None
                }
            }
        };
        let name = p.name.clone().unwrap_or_default();
        if name.is_empty() && ports.len() > 1 {
            errors.push(ServiceError::UnnamedPort {
                service: svc.to_owned(),
                index: i,
            });
            ok = false;
        }
        // Names and port/protocol pairs are unique across every entry, valid or not.
        let dup = if !name.is_empty() && !names.insert(name.clone()) {
            Some(format!("name {name:?}"))
        } else {
            match (port, protocol) {
                (Some(n), Some(p)) if !pairs.insert((n, p)) => {
                    Some(format!("port {n}/{}", p.as_str()))
                }
                _ => None,
            }
        };
        if let Some(what) = dup {
            errors.push(ServiceError::DuplicatePort {
                service: svc.to_owned(),
                index: i,
                what,
            });
            continue;
        }
        let (Some(port), Some(protocol), Some(target), true) = (port, protocol, target, ok) else {
            continue;
        };
        out.push(PortSpec {
            name,
            protocol,
            port,
            target,
        });
    }
    out
}

/// A backend of a Service port and the node its endpoint is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceBackend {
    /// Address, target port and conditions.
    pub backend: Backend,
    /// The endpoint's node (`nodeName`); none for an address that is not a pod of a node
    /// (the `kubernetes` Service's API server addresses), which is never node-local.
    pub node: Option<String>,
}

/// The backends of one Service port, sorted by address and port, without duplicates.
pub type Backends = Vec<ServiceBackend>;

/// Backends of every port of `spec` (in its order) from the Service's EndpointSlices. A slice
/// port matches a Service port by name and protocol; a slice of another address family than
/// IPv4/IPv6 (FQDN), an endpoint without an address, or a port without a number contributes
/// nothing.
pub fn backends_from_slices(spec: &ServiceSpec, slices: &[&EndpointSlice]) -> Vec<Backends> {
    spec.ports
        .iter()
        .map(|p| {
            let mut found: BTreeMap<(IpAddr, u16), (BackendState, Option<&String>)> =
                BTreeMap::new();
            for s in slices {
                let family_ok = matches!(s.address_type.as_str(), "IPv4" | "IPv6");
                let Some(target) = s.ports.iter().flatten().find_map(|sp| {
                    let same_name = sp.name.as_deref().unwrap_or("") == p.name;
                    let same_proto = Protocol::of(sp.protocol.as_ref()) == Some(p.protocol);
                    (same_name && same_proto)
                        .then_some(sp.port)
                        .flatten()
                        .and_then(|n| u16::try_from(n).ok())
                        .filter(|&n| n != 0)
                }) else {
                    continue;
                };
                if !family_ok {
                    continue;
                }
                for e in s.endpoints.iter().flatten() {
                    let Some(addr) = e.addresses.first().and_then(|a| a.parse::<IpAddr>().ok())
                    else {
                        continue;
                    };
                    let c = e.conditions.as_ref();
                    let ready = c.and_then(|c| c.ready).unwrap_or(true);
                    let state = BackendState {
                        ready,
                        serving: c.and_then(|c| c.serving).unwrap_or(ready),
                        terminating: c.and_then(|c| c.terminating).unwrap_or(false),
                    };
                    let node = e.node_name.as_ref();
                    found
                        .entry((addr, target))
                        .and_modify(|old| *old = merge(*old, (state, node)))
                        .or_insert((state, node));
                }
            }
            found
                .into_iter()
                .map(|((addr, port), (state, node))| ServiceBackend {
                    backend: Backend { addr, port, state },
                    node: node.cloned(),
                })
                .collect()
        })
        .collect()
}

/// One endpoint listed twice (slices during a change): the more usable view wins, with its node.
fn merge<'a>(
    a: (BackendState, Option<&'a String>),
    b: (BackendState, Option<&'a String>),
) -> (BackendState, Option<&'a String>) {
    let rank = |(s, _): &(BackendState, _)| (s.ready, s.serving, !s.terminating);
    if rank(&b) > rank(&a) {
        b
    } else {
        a
    }
}

/// A named target port a pod does not have.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Unresolved {
    /// The Service port (its label, see [`PortSpec::label`]).
    pub port: String,
    /// The port name.
    pub target: String,
    /// The pod, `namespace/name`.
    pub pod: String,
}

/// Backends of every port of `spec` computed the way the EndpointSlice controller would, for
/// standalone mode without slices: the pods of `namespace` whose labels include the selector
/// (none without a selector), each with its lace endpoints — the ones in `network` when the
/// pod has any there, else all of them — at the target port (a name resolved against the
/// pod's container ports and restartable init containers, by name and protocol). A pod that
/// lacks a named port is left out of that port and reported.
pub fn backends_from_selector(
    spec: &ServiceSpec,
    namespace: &str,
    network: &str,
    pods: &BTreeMap<NamespacedName, Pod>,
    endpoints: &BTreeMap<(String, String), Vec<&EndpointModel>>,
) -> (Vec<Backends>, Vec<Unresolved>) {
    let mut out = vec![Vec::new(); spec.ports.len()];
    let mut unresolved = Vec::new();
    let Some(selector) = &spec.selector else {
        return (out, unresolved);
    };
    let lo = NamespacedName::new(namespace, "");
    for (key, pod) in pods
        .range(lo..)
        .take_while(|(k, _)| k.namespace == namespace)
    {
        let labels = pod.metadata.labels.as_ref();
        let selected = selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
        if !selected {
            continue;
        }
        let Some(eps) = endpoints.get(&(key.namespace.clone(), key.name.clone())) else {
            continue;
        };
        let in_net: Vec<&EndpointModel> = eps
            .iter()
            .copied()
            .filter(|e| e.network == network)
            .collect();
        let used = if in_net.is_empty() {
            eps.clone()
        } else {
            in_net
        };
        let state = pod_state(pod, spec.publish_not_ready);
        for (p, backends) in spec.ports.iter().zip(out.iter_mut()) {
            let port = match &p.target {
                TargetPort::Number(n) => *n,
                TargetPort::Name(name) => match find_port(pod, name, p.protocol) {
                    Some(n) => n,
                    None => {
                        unresolved.push(Unresolved {
                            port: p.label(),
                            target: name.clone(),
                            pod: key.to_string(),
                        });
                        continue;
                    }
                },
            };
            for e in &used {
                for a in &e.addresses {
                    backends.push(ServiceBackend {
                        backend: Backend {
                            addr: *a,
                            port,
                            state,
                        },
                        node: Some(e.node.clone()),
                    });
                }
            }
        }
    }
    for b in &mut out {
        b.sort_by_key(|b| (b.backend.addr, b.backend.port));
        b.dedup_by_key(|b| (b.backend.addr, b.backend.port));
    }
    (out, unresolved)
}

/// The conditions the EndpointSlice controller gives a pod's endpoint: terminating when the
/// pod is being deleted; serving when its `Ready` condition is not false (a pod without status,
/// as in manifests, is taken as ready); ready when serving and not terminating — or always,
/// with `publishNotReadyAddresses`.
fn pod_state(pod: &Pod, publish_not_ready: bool) -> BackendState {
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let serving = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_none_or(|c| c.status != "False");
    BackendState {
        ready: publish_not_ready || (serving && !terminating),
        serving: publish_not_ready || serving,
        terminating,
    }
}

/// The number of `pod`'s container port `name` of `protocol` (regular containers, then
/// restartable init containers — sidecars — as Kubernetes resolves named ports).
pub fn find_port(pod: &Pod, name: &str, protocol: Protocol) -> Option<u16> {
    let spec = pod.spec.as_ref()?;
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| {
            p.name.as_deref() == Some(name) && Protocol::of(p.protocol.as_ref()) == Some(protocol)
        })
        .and_then(|p| u16::try_from(p.container_port).ok())
        .filter(|&n| n != 0)
}

/// Indices of the backends that take new connections (KEP-1669): the ready ones; if there is
/// none, the serving ones that are terminating; else none (the Service rejects).
pub fn in_use(backends: &[Backend]) -> Vec<usize> {
    let ready: Vec<usize> = (0..backends.len())
        .filter(|&i| backends[i].state.ready)
        .collect();
    if !ready.is_empty() {
        return ready;
    }
    (0..backends.len())
        .filter(|&i| backends[i].state.serving && backends[i].state.terminating)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_cidr_holds_clusterips_of_its_families_only() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let dual = ServiceCidr {
            v4: Some("10.96.0.0/12".parse().unwrap()),
            v6: Some("fd96::/108".parse().unwrap()),
        };
        assert!(dual.outside(&[ip("10.96.0.10"), ip("fd96::10")]).is_empty());
        assert_eq!(
            dual.outside(&[ip("10.112.0.1"), ip("fd96::10"), ip("fd97::1")]),
            [
                "ClusterIP 10.112.0.1 lies outside the service CIDR 10.96.0.0/12",
                "ClusterIP fd97::1 lies outside the service CIDR fd96::/108",
            ]
        );
        let v4 = ServiceCidr {
            v4: dual.v4,
            v6: None,
        };
        assert!(v4.outside(&[ip("10.111.255.255")]).is_empty());
        assert_eq!(
            v4.outside(&[ip("fd96::10")]),
            ["ClusterIP fd96::10 lies outside the service CIDR 10.96.0.0/12, which has no IPv6 range"]
        );
        assert_eq!(dual.to_string(), "10.96.0.0/12,fd96::/108");
    }

    fn service(yaml: &str) -> Service {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn key() -> NamespacedName {
        NamespacedName::new("shop", "web")
    }

    #[test]
    fn a_dual_stack_service_with_named_ports_and_affinity_parses() {
        let s = service(
            r#"
spec:
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10, "fd96::10"]
  selector: {app: web}
  sessionAffinity: ClientIP
  ports:
  - {name: http, port: 80, targetPort: web}
  - {name: dns, port: 53, protocol: UDP}
"#,
        );
        let Ok(Parsed::Vip(spec)) = parse(&key(), &s) else {
            panic!("{:?}", parse(&key(), &s))
        };
        assert_eq!(
            spec.cluster_ips,
            vec![
                "10.96.0.10".parse::<IpAddr>().unwrap(),
                "fd96::10".parse().unwrap()
            ]
        );
        assert_eq!(spec.affinity_timeout_s, Some(DEFAULT_AFFINITY_TIMEOUT_S));
        assert_eq!(spec.ports[0].target, TargetPort::Name("web".into()));
        assert_eq!(spec.ports[0].protocol, Protocol::Tcp);
        assert_eq!(spec.ports[1].target, TargetPort::Number(53));
        assert_eq!(spec.ports[1].protocol, Protocol::Udp);
        assert!(!spec.node_local);
    }

    #[test]
    fn internal_traffic_policy_local_makes_the_service_node_local() {
        let p = |policy: &str| {
            parse(
                &key(),
                &service(&format!(
                    "spec: {{clusterIP: 10.96.0.10, internalTrafficPolicy: {policy}, \
                     ports: [{{port: 80}}]}}"
                )),
            )
        };
        let node_local = |policy: &str| match p(policy) {
            Ok(Parsed::Vip(s)) => s.node_local,
            other => panic!("{policy}: {other:?}"),
        };
        assert!(node_local("Local"));
        assert!(!node_local("Cluster"));
        let errs = p("Nearby").unwrap_err();
        assert_eq!(
            errs[0].to_string(),
            "Service shop/web: spec.internalTrafficPolicy \"Nearby\" is not Cluster or Local"
        );
    }

    #[test]
    fn services_without_a_vip_say_why() {
        let p = |y: &str| parse(&key(), &service(y));
        assert_eq!(
            p("spec: {clusterIP: None, ports: [{port: 80}]}"),
            Ok(Parsed::NoVip(NoVip::Headless))
        );
        assert_eq!(
            p("spec: {type: ExternalName, externalName: db.example.com}"),
            Ok(Parsed::NoVip(NoVip::ExternalName))
        );
        assert_eq!(
            p("spec: {ports: [{port: 80}]}"),
            Ok(Parsed::NoVip(NoVip::NoClusterIp))
        );
    }

    #[test]
    fn every_error_is_reported_with_its_field() {
        let errs = parse(
            &key(),
            &service(
                r#"
spec:
  clusterIP: 10.96.0.300
  clusterIPs: [10.96.0.300, 10.96.0.11]
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 0}}
  ports:
  - {name: a, port: 0}
  - {port: 81, protocol: ICMP}
  - {name: c, port: 82, targetPort: Not_A_Name}
  - {name: a, port: 83}
"#,
            ),
        )
        .unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        for want in [
            "spec.clusterIPs[0] \"10.96.0.300\" is not an IP address",
            "spec.ports[0].port 0 is outside 1..=65535",
            "spec.ports[1].protocol \"ICMP\" is not a protocol lace forwards",
            "spec.ports[1] has no name",
            "spec.ports[2].targetPort \"Not_A_Name\" is not a port name",
            "spec.ports[3] repeats name \"a\"",
            "timeoutSeconds 0 is outside 1..=86400",
        ] {
            assert!(text.iter().any(|t| t.contains(want)), "{want}: {text:#?}");
        }
        assert!(text.iter().all(|t| t.starts_with("Service shop/web: ")));
        let two_v4 = parse(
            &key(),
            &service("spec: {clusterIPs: [10.96.0.1, 10.96.0.2], ports: [{port: 80}]}"),
        )
        .unwrap_err();
        assert!(matches!(two_v4[0], ServiceError::ClusterIpFamilies { .. }));
    }

    fn slice(yaml: &str) -> EndpointSlice {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn slices_give_each_port_its_backends_with_kep1669_defaults() {
        let Ok(Parsed::Vip(spec)) = parse(
            &key(),
            &service(
                "spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: web}, \
                 {name: dns, port: 53, protocol: UDP}]}",
            ),
        ) else {
            panic!()
        };
        let a = slice(
            r#"
metadata: {name: web-a}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}, {name: dns, port: 5353, protocol: UDP}]
endpoints:
- addresses: [10.40.1.2]
  nodeName: node-1
- addresses: [10.40.1.3]
  conditions: {ready: false, serving: true, terminating: true}
  nodeName: node-1
- addresses: [10.40.1.4]
  conditions: {ready: false}
  nodeName: node-1
"#,
        );
        // The same endpoint in a second slice, ready there; another port number for http.
        let b = slice(
            r#"
metadata: {name: web-b}
addressType: IPv4
ports: [{name: http, port: 9090}]
endpoints:
- addresses: [10.40.1.4]
  conditions: {ready: true}
  nodeName: node-2
"#,
        );
        let fqdn = slice(
            "metadata: {name: x}\naddressType: FQDN\nports: [{name: http, port: 80}]\n\
             endpoints: [{addresses: [example.com]}]",
        );
        let got = backends_from_slices(&spec, &[&a, &b, &fqdn]);
        // (address, port, ready, serving, terminating, node)
        type Row<'a> = (String, u16, bool, bool, bool, Option<&'a str>);
        let http: Vec<Row> = got[0]
            .iter()
            .map(|ServiceBackend { backend: b, node }| {
                (
                    b.addr.to_string(),
                    b.port,
                    b.state.ready,
                    b.state.serving,
                    b.state.terminating,
                    node.as_deref(),
                )
            })
            .collect();
        // 10.40.1.4:9090 is in slice b only, on node-2 as b says.
        assert_eq!(
            http,
            [
                ("10.40.1.2".into(), 8080, true, true, false, Some("node-1")),
                ("10.40.1.3".into(), 8080, false, true, true, Some("node-1")),
                (
                    "10.40.1.4".into(),
                    8080,
                    false,
                    false,
                    false,
                    Some("node-1")
                ),
                ("10.40.1.4".into(), 9090, true, true, false, Some("node-2")),
            ]
        );
        let dns: Vec<u16> = got[1].iter().map(|b| b.backend.port).collect();
        assert_eq!(dns, [5353, 5353, 5353]);
    }

    fn backend(ready: bool, serving: bool, terminating: bool) -> Backend {
        Backend {
            addr: "10.0.0.1".parse().unwrap(),
            port: 80,
            state: BackendState {
                ready,
                serving,
                terminating,
            },
        }
    }

    /// KEP-1669: ready ones; else serving-and-terminating ones; else none.
    #[test]
    fn in_use_falls_back_to_serving_terminating_endpoints() {
        let b = [
            backend(false, true, true),
            backend(true, true, false),
            backend(false, false, false),
        ];
        assert_eq!(in_use(&b), [1]);
        let b = [
            backend(false, true, true),
            backend(false, false, true),
            backend(false, true, false),
            backend(false, true, true),
        ];
        assert_eq!(in_use(&b), [0, 3]);
        assert!(in_use(&[backend(false, false, true), backend(false, false, false)]).is_empty());
        assert!(in_use(&[]).is_empty());
    }

    #[test]
    fn named_ports_resolve_by_name_and_protocol_including_sidecars() {
        let pod: Pod = serde_yaml::from_str(
            r#"
metadata: {name: p}
spec:
  initContainers:
  - {name: once, image: x, ports: [{name: metrics, containerPort: 9000}]}
  - {name: side, image: x, restartPolicy: Always, ports: [{name: admin, containerPort: 9901}]}
  containers:
  - name: app
    image: x
    ports:
    - {name: web, containerPort: 8080}
    - {name: web, containerPort: 8053, protocol: UDP}
"#,
        )
        .unwrap();
        assert_eq!(find_port(&pod, "web", Protocol::Tcp), Some(8080));
        assert_eq!(find_port(&pod, "web", Protocol::Udp), Some(8053));
        assert_eq!(find_port(&pod, "web", Protocol::Sctp), None);
        assert_eq!(find_port(&pod, "admin", Protocol::Tcp), Some(9901));
        assert_eq!(find_port(&pod, "metrics", Protocol::Tcp), None);
    }
}
