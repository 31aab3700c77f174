//! Validation of every `lace-cni.io/v1alpha1` resource, and parsing of valid specs into the
//! compiler's model ([`crate::world`]).
//!
//! # Guarantees
//!
//! - Every function here is pure: no I/O, no clock, no global state.
//! - A `validate_*` function returns **all** the errors it finds, not only the first, as
//!   [`Errors`]. Each [`ValidationError`] names the object (`Network backend`), the field
//!   (`spec.ipv4Subnet.prefix`, with list indices) and the fix.
//! - A spec that validates clean parses: [`network_model`], [`routing_model`], [`node_model`],
//!   [`allocation_prefixes`] and [`parse_mac`] succeed on exactly the input the matching
//!   `validate_*` accepts (plus a non-zero id where one is passed in).
//! - [`validate_network_update`] mirrors the CEL transition rules `crdgen` writes into the
//!   Network CRD, so a standalone control (no API server) enforces the same immutability.
//!
//! # Not checked here
//!
//! - CEL compilation of `celExpression` (the binding module compiles it and reports the
//!   `CELValid` condition).
//! - Rules across objects: whether a referenced network exists, overlapping subnets of two
//!   networks, whether a routing policy's prefixes lie inside its destination. The daemon
//!   checks those against its world.
//! - What the compiler implements: [`routing_support`] says which valid routing policies are
//!   not supported yet, so the daemon can set `Supported=False` instead of ignoring them.
//!
//! # Decisions where the seed is silent
//!
//! - `hostLocalPrefixLength` is **required** on every subnet of an l3 network: without it the
//!   subnet cannot be cut into per-node blocks. It ranges from the subnet's prefix length
//!   (one block: the whole subnet goes to a single node) to the address width − 1 (/31, /127):
//!   a block must hold its gateway (the first address) and at least one pod. A /32 or /128
//!   block would hold only the gateway.
//! - For the same reason a subnet itself (l3 or l2) is at most a /31 or /127.
//! - Subnets are immutable as a whole, presence included: adding `ipv4Subnet` to an IPv6-only
//!   network, removing it, or changing `hostLocalPrefixLength` are all rejected (existing
//!   pods and blocks would not match the new subnet).
//! - An allow rule's static `network` must name a Network (a DNS-1123 subdomain); an empty
//!   string is rejected. To leave a resource unbound, a CEL rule returns `optional.of('')`.
//! - A deny rule may omit `selector` (it then shields the network from lower-priority policies
//!   for every resource); if it has one, the selector sets only `name`.
//! - `matchKind: []` is rejected: omitting the field matches every kind, and an empty list
//!   would match none.
//! - Endpoint addresses carry a prefix length and may have host bits set (they are interface
//!   addresses); block and subnet prefixes may not.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::ops::RangeInclusive;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use lace_shared::types::{IfName, MacAddr, NetworkId, NodeId};

use crate::api::limits::*;
use crate::api::Direction;
use crate::api::{
    AllocationSpec, FdbEntrySpec, L2Spec, LabelSelector, LabelSelectorRequirement, NeighborSpec,
    NetworkBindingPolicySpec, NetworkEndpointSpec, NetworkRoutingPolicySpec, NetworkSpec,
    NetworkType, NodeLocatorSpec, RulePolicy, Subnet,
};
use crate::world::{L2Config, NamespacedName, NetworkModel, NodeModel, RoutingModel, UplinkModel};

/// Where an error is: the object's kind and name, and the field path inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The object's kind, e.g. `Network`.
    pub kind: &'static str,
    /// The object's name (`namespace/name` for namespaced objects).
    pub object: String,
    /// The field, e.g. `spec.rules[1].selector.name`.
    pub path: String,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.kind, self.object, self.path)
    }
}

/// One validation error. Its message names the object, the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// A name or a reference to a named object is not a DNS-1123 subdomain.
    #[error(
        "{at} {value:?} is not a DNS-1123 subdomain ({reason}); use lowercase letters, digits, \
         '-' and '.', starting and ending with a letter or digit, at most 253 characters"
    )]
    NotDnsSubdomain {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A namespace is not a DNS-1123 label.
    #[error(
        "{at} {value:?} is not a DNS-1123 label ({reason}); use lowercase letters, digits and \
         '-', starting and ending with a letter or digit, at most 63 characters"
    )]
    NotDnsLabel {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An immutable field changed on update.
    #[error(
        "{at} is immutable (was {old}, now {new}); delete and recreate the Network to change it"
    )]
    Immutable {
        /// Where.
        at: Field,
        /// The old value, rendered.
        old: String,
        /// The new value, rendered.
        new: String,
    },
    /// An l3 or l2 network sets neither subnet.
    #[error("{at} sets neither ipv4Subnet nor ipv6Subnet; an {kind} network needs at least one, e.g. {example}")]
    NoSubnet {
        /// Where (`spec`).
        at: Field,
        /// The network's type.
        kind: &'static str,
        /// A subnet that would do.
        example: &'static str,
    },
    /// A prefix does not parse as a CIDR.
    #[error("{at} {value:?} is not a CIDR; use e.g. {example}")]
    NotCidr {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// A valid value.
        example: &'static str,
    },
    /// A prefix or address is of the wrong address family.
    #[error("{at} {value:?} is not {expected}; {fix}")]
    WrongFamily {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// What was expected, e.g. `an IPv4 prefix`.
        expected: &'static str,
        /// How to fix it.
        fix: &'static str,
    },
    /// A network prefix has bits set beyond its length.
    #[error("{at} {value:?} has host bits set; use {truncated}")]
    HostBitsSet {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// The prefix with the host bits cleared.
        truncated: String,
    },
    /// A subnet too small to hold the gateway and one endpoint.
    #[error(
        "{at} {value:?} leaves no address after the gateway; use a prefix length of at most {max}"
    )]
    SubnetTooSmall {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// The longest usable prefix length.
        max: u8,
    },
    /// `hostLocalPrefixLength` on a network that is not l3.
    #[error(
        "{at} is set on an {kind} network, but only l3 networks cut their subnet into per-node \
         blocks; remove it"
    )]
    HostLocalNotL3 {
        /// Where.
        at: Field,
        /// The network's type.
        kind: &'static str,
    },
    /// `hostLocalPrefixLength` missing on an l3 subnet.
    #[error("{at} is required on an l3 network (the length of each node's block); set it, e.g. to {example}")]
    HostLocalRequired {
        /// Where.
        at: Field,
        /// A length that would do.
        example: u8,
    },
    /// `hostLocalPrefixLength` outside [prefix length, width − 1].
    #[error(
        "{at} {value} is outside {min}..={max}; a block is at least the subnet's prefix length \
         and must hold the gateway and one pod, so use a length from {min} to {max}"
    )]
    HostLocalOutOfRange {
        /// Where.
        at: Field,
        /// The offending value.
        value: u8,
        /// The subnet's prefix length.
        min: u8,
        /// Address width − 1.
        max: u8,
    },
    /// A field that only external networks have.
    #[error("{at} is set on an {kind} network; only external networks have it, so remove it or use type external")]
    OnlyForExternal {
        /// Where.
        at: Field,
        /// The network's type.
        kind: &'static str,
    },
    /// A subnet on an external network.
    #[error(
        "{at} is set on an external network; external networks have no subnet and no IPAM, so \
         remove it and list the CIDRs in spec.externalPrefixes"
    )]
    SubnetOnExternal {
        /// Where.
        at: Field,
    },
    /// An interface name the kernel would refuse.
    #[error("{at} {value:?} is not a Linux interface name; use 1-15 characters without '/', ':' or whitespace, e.g. eth1")]
    NotInterfaceName {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
    },
    /// A field of l2 networks on another kind.
    #[error(
        "{at} is set on an {kind} network; only l2 networks have it, so remove it or use type l2"
    )]
    OnlyForL2 {
        /// Where.
        at: Field,
        /// The network's type.
        kind: &'static str,
    },
    /// A number outside the range its field allows.
    #[error("{at} {value} is outside {range}; {fix}")]
    OutOfRange {
        /// Where.
        at: Field,
        /// The offending value.
        value: u64,
        /// The allowed range, e.g. `1..=4094`.
        range: String,
        /// What to do.
        fix: &'static str,
    },
    /// A VLAN id outside 1..=4094.
    #[error("{at} {value} is outside 1..=4094; use a VLAN id from 1 to 4094, or omit it for untagged traffic")]
    VlanOutOfRange {
        /// Where.
        at: Field,
        /// The offending value.
        value: u16,
    },
    /// An address that does not parse.
    #[error("{at} {value:?} is not an IP address; use e.g. {example}")]
    NotAddress {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// A valid value.
        example: &'static str,
    },
    /// A time that is not an RFC 3339 timestamp.
    #[error("{at} {value:?} is not an RFC 3339 time; use e.g. 2026-01-02T03:04:05.678Z")]
    NotTimestamp {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
    },
    /// Two related values of different address families.
    #[error("{at} {value:?} is not of the same address family as {other_path} {other:?}; use a {what} of that family")]
    FamilyMismatch {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// The related field.
        other_path: String,
        /// Its value.
        other: String,
        /// What the offending field is, e.g. `next hop`.
        what: &'static str,
    },
    /// A list holds the same value twice.
    #[error("{at} lists {value:?} more than once; list each once")]
    Duplicate {
        /// Where.
        at: Field,
        /// The repeated value.
        value: String,
    },
    /// A required list or string is empty.
    #[error("{at} is empty; {fix}")]
    Empty {
        /// Where.
        at: Field,
        /// How to fix it.
        fix: &'static str,
    },
    /// A required field is absent.
    #[error("{at} is missing; {fix}")]
    Missing {
        /// Where.
        at: Field,
        /// How to fix it.
        fix: &'static str,
    },
    /// An allow rule with neither `network` nor `celExpression`.
    #[error("{at} sets neither network nor celExpression; an allow rule sets exactly one of them")]
    AllowNeedsTarget {
        /// Where (the rule).
        at: Field,
    },
    /// An allow rule with both `network` and `celExpression`.
    #[error("{at} sets both network and celExpression; an allow rule sets exactly one of them, so remove one")]
    AllowBothTargets {
        /// Where (the rule).
        at: Field,
    },
    /// A deny rule with a `celExpression`.
    #[error("{at} is set on a deny rule; a deny rule shields the network named in network, so remove celExpression")]
    DenyWithCel {
        /// Where (the rule's `celExpression`).
        at: Field,
    },
    /// A deny rule whose selector uses more than the name.
    #[error("{at} is set on a deny rule; deny rules select by name only, so remove it and use selector.name")]
    DenySelectsByNameOnly {
        /// Where (`matchLabels`, `matchExpressions` or `namespaceSelector`).
        at: Field,
    },
    /// An unknown label selector operator.
    #[error(
        "{at} {value:?} is not a label selector operator; use In, NotIn, Exists or DoesNotExist"
    )]
    UnknownOperator {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
    },
    /// `In`/`NotIn` without values.
    #[error("{at} is empty; operator {operator} needs at least one value")]
    ValuesRequired {
        /// Where (`values`).
        at: Field,
        /// The operator.
        operator: &'static str,
    },
    /// `Exists`/`DoesNotExist` with values.
    #[error("{at} is set; operator {operator} takes no values, so remove them")]
    ValuesForbidden {
        /// Where (`values`).
        at: Field,
        /// The operator.
        operator: &'static str,
    },
    /// A label key that Kubernetes would refuse.
    #[error(
        "{at} {value:?} is not a valid label key ({reason}); use [prefix/]name: an optional \
         DNS-1123 subdomain prefix and a name of at most 63 letters, digits, '-', '_' or '.', \
         starting and ending with a letter or digit"
    )]
    InvalidLabelKey {
        /// Where.
        at: Field,
        /// The offending key.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A label value that Kubernetes would refuse.
    #[error(
        "{at} {value:?} is not a valid label value ({reason}); use at most 63 letters, digits, \
         '-', '_' or '.', starting and ending with a letter or digit, or an empty value"
    )]
    InvalidLabelValue {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A `nextHop` with neither `endpoint` nor `gateway`.
    #[error("{at} sets neither endpoint nor gateway; set exactly one, or remove nextHop")]
    NextHopNeedsTarget {
        /// Where (`spec.nextHop`).
        at: Field,
    },
    /// A `nextHop` with both `endpoint` and `gateway`.
    #[error("{at} sets both endpoint and gateway; set exactly one of them")]
    NextHopBothTargets {
        /// Where (`spec.nextHop`).
        at: Field,
    },
    /// A MAC that does not parse.
    #[error("{at} {value:?} is not a MAC address; use six hex octets separated by ':', e.g. 02:00:00:00:00:01")]
    NotMac {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
    },
    /// A multicast or all-zero MAC where a station's MAC is needed.
    #[error(
        "{at} {value:?} is a multicast or all-zero MAC; use a unicast MAC, e.g. 02:00:00:00:00:01"
    )]
    MacNotUnicast {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
    },
    /// More than one entry of an address family where one is allowed.
    #[error("{at} holds more than one {family} entry; keep one per address family")]
    TooManyPerFamily {
        /// Where.
        at: Field,
        /// `IPv4` or `IPv6`.
        family: &'static str,
    },
    /// A locator longer than /64.
    #[error("{at} {value:?} is a /{len}; a locator is an IPv6 prefix of length 64 or shorter, e.g. fc00:0:3::/48")]
    LocatorTooLong {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// Its prefix length.
        len: u8,
    },
    /// A data-plane id of 0.
    #[error("{at} is 0; data-plane ids start at 1")]
    ZeroId {
        /// Where.
        at: Field,
    },
    /// More entries (or characters) than the API allows ([`crate::api::limits`]).
    #[error(
        "{at} has {count} {what}; at most {max} are allowed, so split the object or shorten it"
    )]
    TooMany {
        /// Where.
        at: Field,
        /// How many there are.
        count: usize,
        /// The limit.
        max: usize,
        /// What is counted (`entries`, `characters`).
        what: &'static str,
    },
    /// An `ipBlock.except` entry that is not strictly inside its `cidr`.
    #[error(
        "{at} {value:?} is not strictly inside ipBlock.cidr {cidr}; an except must be a longer \
         prefix inside the cidr (Kubernetes refuses it at admission), so fix or remove it"
    )]
    ExceptOutsideCidr {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// The block's cidr.
        cidr: String,
    },
    /// A NetworkPolicy peer with `ipBlock` and a selector.
    #[error(
        "{at} sets ipBlock together with podSelector or namespaceSelector; a peer is either an \
         ipBlock or selectors, so split it into two peers"
    )]
    IpBlockWithSelector {
        /// Where (the peer).
        at: Field,
    },
    /// A NetworkPolicy peer that sets nothing.
    #[error(
        "{at} sets none of podSelector, namespaceSelector and ipBlock; set one (podSelector: {{}} \
         selects every pod of the policy's namespace)"
    )]
    EmptyPeer {
        /// Where (the peer).
        at: Field,
    },
    /// A protocol NetworkPolicy does not know.
    #[error("{at} {value:?} is not a protocol NetworkPolicy knows; use TCP, UDP or SCTP")]
    UnknownProtocol {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
    },
    /// A port number outside 1..=65535.
    #[error("{at} {value} is outside 1..=65535; use a port number from 1 to 65535")]
    PortOutOfRange {
        /// Where.
        at: Field,
        /// The offending value.
        value: i64,
    },
    /// `endPort` below `port`.
    #[error(
        "{at} {end} is below port {port}; endPort is the last port of the range, at least port"
    )]
    EndPortBelowPort {
        /// Where (`endPort`).
        at: Field,
        /// `endPort`.
        end: i32,
        /// `port`.
        port: i32,
    },
    /// `endPort` without a numeric `port`.
    #[error("{at} is set {why}; a range needs a numeric port, so {fix}")]
    EndPortNeedsNumber {
        /// Where (`endPort`).
        at: Field,
        /// What the port is instead.
        why: &'static str,
        /// How to fix it.
        fix: &'static str,
    },
    /// A named port that is not an IANA service name.
    #[error(
        "{at} {value:?} is not a port name ({reason}); use 1-15 lowercase letters, digits and \
         '-', with at least one letter, no '-' at either end and no '--'"
    )]
    NotPortName {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A `policyTypes` entry other than `Ingress` and `Egress`.
    #[error("{at} {value:?} is not a policy type; use Ingress or Egress")]
    UnknownPolicyType {
        /// Where.
        at: Field,
        /// The offending value.
        value: String,
    },
}

/// Whether `a` is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`), which Kubernetes' IP and
/// CIDR libraries refuse.
fn is_v4_mapped(a: &IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

/// All the errors found in one object (never empty when returned as `Err`). Displayed one
/// per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.0))]
pub struct Errors(pub Vec<ValidationError>);

fn render(errors: &[ValidationError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl Errors {
    /// The messages, one per error.
    pub fn messages(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}

/// A feature of a valid routing policy that the compiler does not implement yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// A transit endpoint on a one-way path: the way back would need the transit's flow state
    /// (reply-only routes through it).
    #[error("spec.nextHop.endpoint (a transit endpoint) with direction sourceToDestination is not supported yet (use bidirectional: both ways cross the transit)")]
    OneWayThroughTransit,
    /// A one-way path toward an external network: its replies come back through the uplink
    /// node, which does not track the connections opened toward it yet.
    #[error("spec.destination.network {network:?} is an external network and the direction is sourceToDestination; one-way paths to external networks are not supported yet (use bidirectional)")]
    OneWayToExternal {
        /// The network.
        network: String,
    },
}

/// A valid routing policy that asks for what the compiler does not implement yet: the daemon
/// sets `Supported=False` (reason [`NotSupported::REASON`]) with this message and compiles
/// nothing for the policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NetworkRoutingPolicy {policy}: {}", render_unsupported(.features))]
pub struct NotSupported {
    /// The policy's name.
    pub policy: String,
    /// Every unsupported feature it uses (never empty).
    pub features: Vec<Unsupported>,
}

impl NotSupported {
    /// The condition reason for `Supported=False`.
    pub const REASON: &'static str = "NotSupported";
}

fn render_unsupported(features: &[Unsupported]) -> String {
    features
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

// ---- the error collector -------------------------------------------------------------------

/// Collects the errors of one object.
struct Check {
    kind: &'static str,
    object: String,
    errors: Vec<ValidationError>,
}

impl Check {
    fn new(kind: &'static str, object: &str) -> Check {
        Check {
            kind,
            object: object.to_string(),
            errors: Vec::new(),
        }
    }

    fn at(&self, path: impl Into<String>) -> Field {
        Field {
            kind: self.kind,
            object: self.object.clone(),
            path: path.into(),
        }
    }

    fn push(&mut self, e: ValidationError) {
        self.errors.push(e);
    }

    fn finish(self) -> Result<(), Errors> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(Errors(self.errors))
        }
    }

    /// A DNS-1123 subdomain (names of cluster objects and references to them).
    fn subdomain(&mut self, path: &str, value: &str) -> bool {
        match dns_subdomain(value) {
            Ok(()) => true,
            Err(reason) => {
                let at = self.at(path);
                self.push(ValidationError::NotDnsSubdomain {
                    at,
                    value: value.to_string(),
                    reason,
                });
                false
            }
        }
    }

    /// A DNS-1123 label (namespaces).
    fn label(&mut self, path: &str, value: &str) {
        if let Err(reason) = dns_label(value) {
            let at = self.at(path);
            self.push(ValidationError::NotDnsLabel {
                at,
                value: value.to_string(),
                reason,
            });
        }
    }

    /// A network prefix (host bits zero), optionally of one family.
    fn prefix(
        &mut self,
        path: &str,
        value: &str,
        example: &'static str,
        family: Option<(Family, &'static str)>,
    ) -> Option<IpNet> {
        // Kubernetes' isCIDR refuses IPv4-mapped IPv6 prefixes; so does lace.
        let Some(net) = value
            .parse::<IpNet>()
            .ok()
            .filter(|n| !is_v4_mapped(&n.addr()))
        else {
            let at = self.at(path);
            self.push(ValidationError::NotCidr {
                at,
                value: value.to_string(),
                example,
            });
            return None;
        };
        if let Some((family, fix)) = family {
            if Family::of_net(&net) != family {
                let at = self.at(path);
                self.push(ValidationError::WrongFamily {
                    at,
                    value: value.to_string(),
                    expected: family.prefix_name(),
                    fix,
                });
                return None;
            }
        }
        if net.trunc() != net {
            let at = self.at(path);
            self.push(ValidationError::HostBitsSet {
                at,
                value: value.to_string(),
                truncated: net.trunc().to_string(),
            });
            return None;
        }
        Some(net)
    }

    fn address(&mut self, path: &str, value: &str, example: &'static str) -> Option<IpAddr> {
        match value.parse::<IpAddr>().ok().filter(|a| !is_v4_mapped(a)) {
            Some(a) => Some(a),
            None => {
                let at = self.at(path);
                self.push(ValidationError::NotAddress {
                    at,
                    value: value.to_string(),
                    example,
                });
                None
            }
        }
    }

    fn mac(&mut self, path: &str, value: &str) -> Option<MacAddr> {
        let Some(mac) = parse_mac(value) else {
            let at = self.at(path);
            self.push(ValidationError::NotMac {
                at,
                value: value.to_string(),
            });
            return None;
        };
        if mac.0[0] & 1 == 1 || mac.0 == [0; 6] {
            let at = self.at(path);
            self.push(ValidationError::MacNotUnicast {
                at,
                value: value.to_string(),
            });
            return None;
        }
        Some(mac)
    }

    fn ifname(&mut self, path: &str, value: &str) {
        if IfName::new(value).is_err() {
            let at = self.at(path);
            self.push(ValidationError::NotInterfaceName {
                at,
                value: value.to_string(),
            });
        }
    }

    /// At most `max` entries (or characters) in `path`.
    fn at_most(&mut self, path: &str, count: usize, max: usize, what: &'static str) {
        if count > max {
            let at = self.at(path);
            self.push(ValidationError::TooMany {
                at,
                count,
                max,
                what,
            });
        }
    }

    fn not_empty(&mut self, path: &str, value: &str, fix: &'static str) -> bool {
        if value.is_empty() {
            let at = self.at(path);
            self.push(ValidationError::Empty { at, fix });
            false
        } else {
            true
        }
    }

    /// At most one prefix or address per family in `list`.
    fn one_per_family(&mut self, path: &str, families: impl IntoIterator<Item = Family>) {
        let (mut v4, mut v6) = (0, 0);
        for f in families {
            match f {
                Family::V4 => v4 += 1,
                Family::V6 => v6 += 1,
            }
        }
        for (n, family) in [(v4, "IPv4"), (v6, "IPv6")] {
            if n > 1 {
                let at = self.at(path);
                self.push(ValidationError::TooManyPerFamily { at, family });
            }
        }
    }

    fn label_selector(&mut self, path: &str, sel: &LabelSelector) {
        self.match_labels(path, &sel.match_labels, Limits::Lace);
        self.match_expressions(path, &sel.match_expressions, Limits::Lace);
    }

    fn match_labels(
        &mut self,
        path: &str,
        labels: &std::collections::BTreeMap<String, String>,
        limits: Limits,
    ) {
        if limits == Limits::Lace {
            self.at_most(
                &format!("{path}.matchLabels"),
                labels.len(),
                MAX_LABELS,
                "entries",
            );
        }
        for (k, v) in labels {
            self.label_key(&format!("{path}.matchLabels"), k);
            if let Err(reason) = label_value(v) {
                let at = self.at(format!("{path}.matchLabels[{k:?}]"));
                self.push(ValidationError::InvalidLabelValue {
                    at,
                    value: v.clone(),
                    reason,
                });
            }
        }
    }

    fn match_expressions(
        &mut self,
        path: &str,
        exprs: &[LabelSelectorRequirement],
        limits: Limits,
    ) {
        if limits == Limits::Lace {
            self.at_most(
                &format!("{path}.matchExpressions"),
                exprs.len(),
                MAX_REQUIREMENTS,
                "entries",
            );
        }
        for (j, req) in exprs.iter().enumerate() {
            let p = format!("{path}.matchExpressions[{j}]");
            if limits == Limits::Lace {
                self.at_most(
                    &format!("{p}.values"),
                    req.values.len(),
                    MAX_VALUES,
                    "entries",
                );
            }
            self.label_key(&format!("{p}.key"), &req.key);
            let (operator, needs_values): (&'static str, bool) = match req.operator.as_str() {
                "In" => ("In", true),
                "NotIn" => ("NotIn", true),
                "Exists" => ("Exists", false),
                "DoesNotExist" => ("DoesNotExist", false),
                other => {
                    let at = self.at(format!("{p}.operator"));
                    self.push(ValidationError::UnknownOperator {
                        at,
                        value: other.to_string(),
                    });
                    continue;
                }
            };
            if needs_values && req.values.is_empty() {
                let at = self.at(format!("{p}.values"));
                self.push(ValidationError::ValuesRequired { at, operator });
            }
            if !needs_values && !req.values.is_empty() {
                let at = self.at(format!("{p}.values"));
                self.push(ValidationError::ValuesForbidden { at, operator });
            }
            for (k, v) in req.values.iter().enumerate() {
                if let Err(reason) = label_value(v) {
                    let at = self.at(format!("{p}.values[{k}]"));
                    self.push(ValidationError::InvalidLabelValue {
                        at,
                        value: v.clone(),
                        reason,
                    });
                }
            }
        }
    }

    fn label_key(&mut self, path: &str, key: &str) {
        if let Err(reason) = label_key(key) {
            let at = self.at(path);
            self.push(ValidationError::InvalidLabelKey {
                at,
                value: key.to_string(),
                reason,
            });
        }
    }
}

/// Which size limits a selector obeys: lace's own objects' ([`crate::api::limits`], which
/// bound the CRDs' validation cost), or none beyond the syntax (Kubernetes' own objects, which
/// the API server admitted without such limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limits {
    Lace,
    Kubernetes,
}

/// An address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

impl Family {
    fn of_net(n: &IpNet) -> Family {
        match n {
            IpNet::V4(_) => Family::V4,
            IpNet::V6(_) => Family::V6,
        }
    }
    fn of_addr(a: &IpAddr) -> Family {
        match a {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
    fn width(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }
    fn prefix_name(self) -> &'static str {
        match self {
            Family::V4 => "an IPv4 prefix",
            Family::V6 => "an IPv6 prefix",
        }
    }
    fn subnet_fix(self) -> &'static str {
        match self {
            Family::V4 => "IPv6 subnets go in spec.ipv6Subnet",
            Family::V6 => "IPv4 subnets go in spec.ipv4Subnet",
        }
    }
    fn field(self) -> &'static str {
        match self {
            Family::V4 => "spec.ipv4Subnet",
            Family::V6 => "spec.ipv6Subnet",
        }
    }
    fn example_cidr(self) -> &'static str {
        match self {
            Family::V4 => "10.40.0.0/16",
            Family::V6 => "fd00:40::/48",
        }
    }
}

// ---- syntax of names, labels and MACs ----------------------------------------------------

/// Checks a DNS-1123 subdomain (Kubernetes object names): at most 253 characters, dot-separated
/// parts of lowercase letters, digits and `-`, each starting and ending with a letter or digit.
pub fn dns_subdomain(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("it is empty");
    }
    if s.len() > 253 {
        return Err("it is longer than 253 characters");
    }
    if !s
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
    {
        return Err("it has a character other than a-z, 0-9, '-' and '.'");
    }
    if s.split('.').any(|part| !alnum_ends(part, false)) {
        return Err("a dot-separated part does not start and end with a letter or digit");
    }
    Ok(())
}

/// Checks a DNS-1123 label (namespace names): at most 63 lowercase letters, digits and `-`,
/// starting and ending with a letter or digit.
pub fn dns_label(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("it is empty");
    }
    if s.len() > 63 {
        return Err("it is longer than 63 characters");
    }
    if !s
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        return Err("it has a character other than a-z, 0-9 and '-'");
    }
    if !alnum_ends(s, false) {
        return Err("it does not start and end with a letter or digit");
    }
    Ok(())
}

/// Non-empty and starting and ending with an (optionally also uppercase) letter or digit.
fn alnum_ends(s: &str, upper: bool) -> bool {
    let ok =
        |c: u8| c.is_ascii_digit() || c.is_ascii_lowercase() || (upper && c.is_ascii_uppercase());
    match (s.bytes().next(), s.bytes().last()) {
        (Some(a), Some(b)) => ok(a) && ok(b),
        _ => false,
    }
}

/// What is wrong with a label name or value.
#[derive(Debug, Clone, Copy)]
enum LabelProblem {
    TooLong,
    BadChar,
    BadEnds,
}

/// The name part of a label key, or a label value: at most 63 letters, digits, `-`, `_`, `.`,
/// starting and ending with a letter or digit (the empty string passes; keys check it).
fn label_name(s: &str) -> Result<(), LabelProblem> {
    if s.len() > 63 {
        return Err(LabelProblem::TooLong);
    }
    if !s
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
    {
        return Err(LabelProblem::BadChar);
    }
    if !s.is_empty() && !alnum_ends(s, true) {
        return Err(LabelProblem::BadEnds);
    }
    Ok(())
}

/// Checks a label key: `[prefix/]name`, the prefix a DNS-1123 subdomain, the name 1–63
/// letters, digits, `-`, `_`, `.`, alphanumeric at both ends.
pub fn label_key(key: &str) -> Result<(), &'static str> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if dns_subdomain(prefix).is_err() {
                return Err("its prefix is not a DNS-1123 subdomain");
            }
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err("its name is empty");
    }
    label_name(name).map_err(|p| match p {
        LabelProblem::TooLong => "its name is longer than 63 characters",
        LabelProblem::BadChar => {
            "its name has a character other than letters, digits, '-', '_' and '.'"
        }
        LabelProblem::BadEnds => "its name does not start and end with a letter or digit",
    })
}

/// Checks a label value: empty, or at most 63 letters, digits, `-`, `_`, `.`, alphanumeric at
/// both ends.
pub fn label_value(v: &str) -> Result<(), &'static str> {
    label_name(v).map_err(|p| match p {
        LabelProblem::TooLong => "it is longer than 63 characters",
        LabelProblem::BadChar => "it has a character other than letters, digits, '-', '_' and '.'",
        LabelProblem::BadEnds => "it does not start and end with a letter or digit",
    })
}

/// Parses a MAC written as six two-digit hex octets separated by `:` (either case).
pub fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for byte in &mut out {
        let p = parts.next()?;
        if p.len() != 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        *byte = u8::from_str_radix(p, 16).ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(MacAddr(out))
}

// ---- Network -------------------------------------------------------------------------------

/// A parsed network spec (what [`NetworkModel`] needs apart from name and id).
struct ParsedNetwork {
    v4: Option<(Ipv4Net, Option<u8>)>,
    v6: Option<(Ipv6Net, Option<u8>)>,
    external: Vec<IpNet>,
    l2: L2Config,
    uplinks: Vec<UplinkModel>,
}

fn check_network(c: &mut Check, name: &str, spec: &NetworkSpec) -> ParsedNetwork {
    c.subdomain("metadata.name", name);
    let kind = spec.type_.as_str();
    let mut parsed = ParsedNetwork {
        v4: None,
        v6: None,
        external: Vec::new(),
        l2: L2Config::default(),
        uplinks: Vec::new(),
    };
    let is_external = spec.type_ == NetworkType::External;
    if let Some(l2) = &spec.l2 {
        if spec.type_ == NetworkType::L2 {
            parsed.l2 = check_l2(c, l2);
        } else {
            let at = c.at("spec.l2");
            c.push(ValidationError::OnlyForL2 { at, kind });
        }
    }

    if is_external {
        for (family, subnet) in [
            (Family::V4, &spec.ipv4_subnet),
            (Family::V6, &spec.ipv6_subnet),
        ] {
            if subnet.is_some() {
                let at = c.at(family.field());
                c.push(ValidationError::SubnetOnExternal { at });
            }
        }
        if spec.external_prefixes.is_empty() {
            let at = c.at("spec.externalPrefixes");
            c.push(ValidationError::Empty {
                at,
                fix: "an external network needs at least one CIDR, e.g. 192.0.2.0/24",
            });
        }
        let mut seen = BTreeSet::new();
        c.at_most(
            "spec.externalPrefixes",
            spec.external_prefixes.len(),
            MAX_PREFIXES,
            "entries",
        );
        for (i, p) in spec.external_prefixes.iter().enumerate() {
            let path = format!("spec.externalPrefixes[{i}]");
            if let Some(net) = c.prefix(&path, p, "192.0.2.0/24", None) {
                if seen.insert(net) {
                    parsed.external.push(net);
                } else {
                    let at = c.at("spec.externalPrefixes");
                    c.push(ValidationError::Duplicate {
                        at,
                        value: net.to_string(),
                    });
                }
            }
        }
        c.at_most("spec.uplinks", spec.uplinks.len(), MAX_UPLINKS, "entries");
        parsed.uplinks = spec
            .uplinks
            .iter()
            .enumerate()
            .filter_map(|(i, up)| check_uplink(c, i, up))
            .collect();
        return parsed;
    }

    if spec.ipv4_subnet.is_none() && spec.ipv6_subnet.is_none() {
        let at = c.at("spec");
        c.push(ValidationError::NoSubnet {
            at,
            kind,
            example: if spec.type_ == NetworkType::L3 {
                "ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}"
            } else {
                "ipv4Subnet: {prefix: 10.50.0.0/24}"
            },
        });
    }
    if let Some(s) = &spec.ipv4_subnet {
        if let Some((IpNet::V4(net), len)) = check_subnet(c, spec.type_, Family::V4, s) {
            parsed.v4 = Some((net, len));
        }
    }
    if let Some(s) = &spec.ipv6_subnet {
        if let Some((IpNet::V6(net), len)) = check_subnet(c, spec.type_, Family::V6, s) {
            parsed.v6 = Some((net, len));
        }
    }
    if !spec.external_prefixes.is_empty() {
        let at = c.at("spec.externalPrefixes");
        c.push(ValidationError::OnlyForExternal { at, kind });
    }
    if !spec.uplinks.is_empty() {
        let at = c.at("spec.uplinks");
        c.push(ValidationError::OnlyForExternal { at, kind });
    }
    parsed
}

/// One subnet of an l3/l2 network: the prefix and, for l3, the block length.
fn check_subnet(
    c: &mut Check,
    t: NetworkType,
    family: Family,
    s: &Subnet,
) -> Option<(IpNet, Option<u8>)> {
    let field = family.field();
    let prefix_path = format!("{field}.prefix");
    let hl_path = format!("{field}.hostLocalPrefixLength");
    let net = c.prefix(
        &prefix_path,
        &s.prefix,
        family.example_cidr(),
        Some((family, family.subnet_fix())),
    );
    let max = family.width() - 1;
    let mut ok = true;
    if let Some(net) = net {
        if net.prefix_len() > max {
            let at = c.at(&prefix_path);
            c.push(ValidationError::SubnetTooSmall {
                at,
                value: s.prefix.clone(),
                max,
            });
            ok = false;
        }
    }
    match (t, s.host_local_prefix_length) {
        (NetworkType::L3, None) => {
            let example = match (family, net) {
                (Family::V4, Some(n)) => n.prefix_len().clamp(24, max),
                (Family::V4, None) => 24,
                (Family::V6, Some(n)) => n.prefix_len().clamp(112, max),
                (Family::V6, None) => 112,
            };
            let at = c.at(&hl_path);
            c.push(ValidationError::HostLocalRequired { at, example });
            ok = false;
        }
        (NetworkType::L3, Some(len)) => {
            // Without a valid prefix the lower bound is unknown; its error is reported already.
            if let Some(net) = net.filter(|n| n.prefix_len() <= max) {
                let min = net.prefix_len();
                if len < min || len > max {
                    let at = c.at(&hl_path);
                    c.push(ValidationError::HostLocalOutOfRange {
                        at,
                        value: len,
                        min,
                        max,
                    });
                    ok = false;
                }
            }
        }
        (_, Some(_)) => {
            let at = c.at(&hl_path);
            c.push(ValidationError::HostLocalNotL3 {
                at,
                kind: t.as_str(),
            });
            ok = false;
        }
        (_, None) => {}
    }
    match net {
        Some(net) if ok => Some((net, s.host_local_prefix_length)),
        _ => None,
    }
}

/// `spec.l2` of an l2 network: its ranges, and the settings with defaults applied.
fn check_l2(c: &mut Check, l2: &L2Spec) -> L2Config {
    let mut out = L2Config::default();
    let range = |c: &mut Check, path: &str, value: Option<u32>, ok: RangeInclusive<u32>, fix| {
        let v = value?;
        if ok.contains(&v) {
            return Some(v);
        }
        let at = c.at(path);
        c.push(ValidationError::OutOfRange {
            at,
            value: u64::from(v),
            range: format!("{}..={}", ok.start(), ok.end()),
            fix,
        });
        None
    };
    if let Some(l) = &l2.learning {
        let aging = range(
            c,
            "spec.l2.learning.agingSeconds",
            l.aging_seconds,
            AGING_SECONDS,
            "use seconds from 30 (a learned MAC is refreshed every quarter of it) to 86400 \
             (a day), e.g. 300",
        )
        .unwrap_or(DEFAULT_AGING_SECONDS);
        if l.enabled {
            out.learning = std::num::NonZeroU32::new(aging);
        }
    }
    if let Some(b) = &l2.bum_limit {
        if let Some(pps) = range(
            c,
            "spec.l2.bumLimit.packetsPerSecond",
            b.packets_per_second,
            BUM_PPS,
            "use frames per second from 0 (unlimited) to 10000000, e.g. 1000",
        ) {
            out.bum_pps = pps;
        }
        if let Some(burst) = range(
            c,
            "spec.l2.bumLimit.burst",
            b.burst,
            BUM_BURST,
            "use a number of frames from 1 to 1000000, e.g. 200",
        ) {
            out.bum_burst = burst;
        }
    }
    out
}

/// One `spec.uplinks[]` entry, checked and parsed (`None` when something in it is invalid).
fn check_uplink(c: &mut Check, i: usize, up: &crate::api::UplinkAttachment) -> Option<UplinkModel> {
    let p = format!("spec.uplinks[{i}]");
    let errors = c.errors.len();
    let mut node_selector = Vec::new();
    if let Some(sel) = &up.node_selector {
        c.label_selector(&format!("{p}.nodeSelector"), sel);
        // The selector's problems are the check's (above); what compiles is kept.
        node_selector = crate::bind::compile_requirements(
            &sel.match_labels,
            sel.match_expressions
                .iter()
                .map(|e| (e.key.as_str(), e.operator.as_str(), e.values.as_slice())),
            "",
            &mut Vec::new(),
        );
    }
    if let Some(ifname) = &up.interface {
        c.ifname(&format!("{p}.interface"), ifname);
    }
    if let Some(vlan) = up.vlan {
        if !(1..=4094).contains(&vlan) {
            let at = c.at(format!("{p}.vlan"));
            c.push(ValidationError::VlanOutOfRange { at, value: vlan });
        }
    }
    c.at_most(
        &format!("{p}.staticRoutes"),
        up.static_routes.len(),
        MAX_STATIC_ROUTES,
        "entries",
    );
    let mut static_routes = Vec::new();
    for (j, r) in up.static_routes.iter().enumerate() {
        let rp = format!("{p}.staticRoutes[{j}]");
        let dst = c.prefix(
            &format!("{rp}.destination"),
            &r.destination,
            "0.0.0.0/0",
            None,
        );
        let nh = c.address(&format!("{rp}.nextHop"), &r.next_hop, "192.0.2.1");
        if let (Some(dst), Some(nh)) = (dst, nh) {
            if Family::of_net(&dst) != Family::of_addr(&nh) {
                let at = c.at(format!("{rp}.nextHop"));
                c.push(ValidationError::FamilyMismatch {
                    at,
                    value: r.next_hop.clone(),
                    other_path: format!("{rp}.destination"),
                    other: r.destination.clone(),
                    what: "next hop",
                });
            }
            static_routes.push((dst, nh));
        }
    }
    (c.errors.len() == errors).then(|| UplinkModel {
        node_selector,
        interface: up.interface.clone(),
        vlan: up.vlan,
        static_routes,
    })
}

/// Validates a Network named `name` (its `metadata.name`): the type's required and forbidden
/// fields, CIDRs, block lengths and uplinks. See the module docs for the decisions taken.
pub fn validate_network(name: &str, spec: &NetworkSpec) -> Result<(), Errors> {
    let mut c = Check::new("Network", name);
    check_network(&mut c, name, spec);
    c.finish()
}

fn render_subnet(s: &Option<Subnet>) -> String {
    match s {
        None => "absent".to_string(),
        Some(Subnet {
            prefix,
            host_local_prefix_length: None,
        }) => format!("{prefix:?}"),
        Some(Subnet {
            prefix,
            host_local_prefix_length: Some(l),
        }) => format!("{prefix:?} with hostLocalPrefixLength {l}"),
    }
}

/// Checks an update of Network `name` from `old` to `new`: `spec.type`, `spec.ipv4Subnet` and
/// `spec.ipv6Subnet` are immutable (a subnet may not be added, removed or changed). Only the
/// transition is checked; validate `new` itself with [`validate_network`].
pub fn validate_network_update(
    name: &str,
    old: &NetworkSpec,
    new: &NetworkSpec,
) -> Result<(), Errors> {
    let mut c = Check::new("Network", name);
    if old.type_ != new.type_ {
        let at = c.at("spec.type");
        c.push(ValidationError::Immutable {
            at,
            old: old.type_.as_str().to_string(),
            new: new.type_.as_str().to_string(),
        });
    }
    for (path, o, n) in [
        ("spec.ipv4Subnet", &old.ipv4_subnet, &new.ipv4_subnet),
        ("spec.ipv6Subnet", &old.ipv6_subnet, &new.ipv6_subnet),
    ] {
        if o != n {
            let at = c.at(path);
            c.push(ValidationError::Immutable {
                at,
                old: render_subnet(o),
                new: render_subnet(n),
            });
        }
    }
    c.finish()
}

/// A Network's spec validated and parsed: its model but for the data-plane id, which IPAM
/// assigns ([`ValidNetwork::model`]). Parse once per spec version, then reuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidNetwork {
    /// `spec.type`.
    pub kind: NetworkType,
    /// IPv4 subnet and (l3) block length.
    pub v4: Option<(Ipv4Net, Option<u8>)>,
    /// IPv6 subnet and (l3) block length.
    pub v6: Option<(Ipv6Net, Option<u8>)>,
    /// External prefixes.
    pub external: Vec<IpNet>,
    /// `spec.anonymous`.
    pub anonymous: bool,
    /// `spec.l2`, defaults applied.
    pub l2: L2Config,
    /// `spec.uplinks`, parsed.
    pub uplinks: Vec<UplinkModel>,
}

impl ValidNetwork {
    /// The compiler's model of Network `name` with id `id`.
    pub fn model(&self, name: &str, id: NetworkId) -> NetworkModel {
        NetworkModel {
            name: name.to_string(),
            id,
            kind: self.kind,
            v4: self.v4,
            v6: self.v6,
            external: self.external.clone(),
            anonymous: self.anonymous,
            l2: self.l2,
            uplinks: self.uplinks.clone(),
        }
    }
}

/// Validates Network `name` and parses it (errors are those of [`validate_network`]).
pub fn parse_network(name: &str, spec: &NetworkSpec) -> Result<ValidNetwork, Errors> {
    let mut c = Check::new("Network", name);
    let parsed = check_network(&mut c, name, spec);
    c.finish()?;
    Ok(ValidNetwork {
        kind: spec.type_,
        v4: parsed.v4,
        v6: parsed.v6,
        external: parsed.external,
        anonymous: spec.anonymous,
        l2: parsed.l2,
        uplinks: parsed.uplinks,
    })
}

/// Parses a valid Network into the compiler's model, with the data-plane id `id`
/// (`status.id`, never 0). Errors are those of [`validate_network`], plus `status.id` 0.
pub fn network_model(
    name: &str,
    id: NetworkId,
    spec: &NetworkSpec,
) -> Result<NetworkModel, Errors> {
    let mut c = Check::new("Network", name);
    let parsed = check_network(&mut c, name, spec);
    if id.0 == 0 {
        let at = c.at("status.id");
        c.push(ValidationError::ZeroId { at });
    }
    c.finish()?;
    Ok(NetworkModel {
        name: name.to_string(),
        id,
        kind: spec.type_,
        v4: parsed.v4,
        v6: parsed.v6,
        external: parsed.external,
        anonymous: spec.anonymous,
        l2: parsed.l2,
        uplinks: parsed.uplinks,
    })
}

// ---- NetworkBindingPolicy -------------------------------------------------------------------

/// Validates a NetworkBindingPolicy: at least one rule; an allow rule sets exactly one of
/// `network`/`celExpression`; a deny rule names a network, has no `celExpression` and selects
/// by name only; `matchKind` entries unique; selectors syntactically valid. The CEL expression
/// is not compiled here.
pub fn validate_binding_policy(name: &str, spec: &NetworkBindingPolicySpec) -> Result<(), Errors> {
    let mut c = Check::new("NetworkBindingPolicy", name);
    c.subdomain("metadata.name", name);
    if let Some(kinds) = &spec.match_kind {
        if kinds.is_empty() {
            let at = c.at("spec.matchKind");
            c.push(ValidationError::Empty {
                at,
                fix: "omit it to match every kind, or list pod, service and/or networkpolicy",
            });
        }
        let mut seen = BTreeSet::new();
        for k in kinds {
            let k = match k {
                crate::api::MatchKind::Pod => "pod",
                crate::api::MatchKind::Service => "service",
                crate::api::MatchKind::NetworkPolicy => "networkpolicy",
            };
            if !seen.insert(k) {
                let at = c.at("spec.matchKind");
                c.push(ValidationError::Duplicate {
                    at,
                    value: k.to_string(),
                });
            }
        }
    }
    c.at_most("spec.rules", spec.rules.len(), MAX_RULES, "entries");
    if spec.rules.is_empty() {
        let at = c.at("spec.rules");
        c.push(ValidationError::Empty {
            at,
            fix: "add at least one rule, e.g. - network: default",
        });
    }
    for (i, rule) in spec.rules.iter().enumerate() {
        let p = format!("spec.rules[{i}]");
        if let Some(network) = &rule.network {
            c.subdomain(&format!("{p}.network"), network);
        }
        if let Some(expr) = &rule.cel_expression {
            c.at_most(
                &format!("{p}.celExpression"),
                expr.chars().count(),
                MAX_CEL_LENGTH,
                "characters",
            );
            c.not_empty(
                &format!("{p}.celExpression"),
                expr,
                "write an expression that evaluates to an optional string, e.g. optional.of('default')",
            );
        }
        match rule.policy.unwrap_or_default() {
            RulePolicy::Allow => match (&rule.network, &rule.cel_expression) {
                (None, None) => {
                    let at = c.at(&p);
                    c.push(ValidationError::AllowNeedsTarget { at });
                }
                (Some(_), Some(_)) => {
                    let at = c.at(&p);
                    c.push(ValidationError::AllowBothTargets { at });
                }
                _ => {}
            },
            RulePolicy::Deny => {
                if rule.network.is_none() {
                    let at = c.at(format!("{p}.network"));
                    c.push(ValidationError::Missing {
                        at,
                        fix: "a deny rule names the network it shields",
                    });
                }
                if rule.cel_expression.is_some() {
                    let at = c.at(format!("{p}.celExpression"));
                    c.push(ValidationError::DenyWithCel { at });
                }
                if let Some(sel) = &rule.selector {
                    let sp = format!("{p}.selector");
                    for (set, field) in [
                        (!sel.match_labels.is_empty(), "matchLabels"),
                        (!sel.match_expressions.is_empty(), "matchExpressions"),
                        (sel.namespace_selector.is_some(), "namespaceSelector"),
                    ] {
                        if set {
                            let at = c.at(format!("{sp}.{field}"));
                            c.push(ValidationError::DenySelectsByNameOnly { at });
                        }
                    }
                }
            }
        }
        if let Some(sel) = &rule.selector {
            let sp = format!("{p}.selector");
            if let Some(n) = &sel.name {
                c.subdomain(&format!("{sp}.name"), n);
            }
            c.match_labels(&sp, &sel.match_labels, Limits::Lace);
            c.match_expressions(&sp, &sel.match_expressions, Limits::Lace);
            if let Some(ns) = &sel.namespace_selector {
                c.label_selector(&format!("{sp}.namespaceSelector"), ns);
            }
        }
    }
    c.finish()
}

// ---- NetworkRoutingPolicy -------------------------------------------------------------------

fn check_routing(c: &mut Check, name: &str, spec: &NetworkRoutingPolicySpec) -> Vec<IpNet> {
    c.subdomain("metadata.name", name);
    c.at_most("spec.sources", spec.sources.len(), MAX_SOURCES, "entries");
    if spec.sources.is_empty() {
        let at = c.at("spec.sources");
        c.push(ValidationError::Empty {
            at,
            fix: "list at least one source network",
        });
    }
    let mut seen = BTreeSet::new();
    for (i, s) in spec.sources.iter().enumerate() {
        if c.subdomain(&format!("spec.sources[{i}]"), s) && !seen.insert(s.as_str()) {
            let at = c.at("spec.sources");
            c.push(ValidationError::Duplicate {
                at,
                value: s.clone(),
            });
        }
    }
    if c.not_empty(
        "spec.destination.network",
        &spec.destination.network,
        "name the destination Network",
    ) {
        c.subdomain("spec.destination.network", &spec.destination.network);
    }
    let mut prefixes = Vec::new();
    c.at_most(
        "spec.destination.prefixes",
        spec.destination.prefixes.len(),
        MAX_PREFIXES,
        "entries",
    );
    for (i, p) in spec.destination.prefixes.iter().enumerate() {
        if let Some(net) = c.prefix(
            &format!("spec.destination.prefixes[{i}]"),
            p,
            "10.40.0.0/24",
            None,
        ) {
            if prefixes.contains(&net) {
                let at = c.at("spec.destination.prefixes");
                c.push(ValidationError::Duplicate {
                    at,
                    value: net.to_string(),
                });
            } else {
                prefixes.push(net);
            }
        }
    }
    if let Some(nh) = &spec.next_hop {
        match (&nh.endpoint, &nh.gateway) {
            (None, None) => {
                let at = c.at("spec.nextHop");
                c.push(ValidationError::NextHopNeedsTarget { at });
            }
            (Some(_), Some(_)) => {
                let at = c.at("spec.nextHop");
                c.push(ValidationError::NextHopBothTargets { at });
            }
            _ => {}
        }
        if let Some(ep) = &nh.endpoint {
            c.label("spec.nextHop.endpoint.namespace", &ep.namespace);
            c.subdomain("spec.nextHop.endpoint.name", &ep.name);
        }
        if let Some(gw) = &nh.gateway {
            c.address("spec.nextHop.gateway", gw, "192.0.2.1");
        }
    }
    prefixes
}

/// Validates a NetworkRoutingPolicy: at least one source, unique; a destination network; the
/// destination's prefixes are CIDRs; a next hop sets exactly one of endpoint/gateway. Whether
/// the compiler implements what the policy asks for is [`routing_support`]'s question.
pub fn validate_routing_policy(name: &str, spec: &NetworkRoutingPolicySpec) -> Result<(), Errors> {
    let mut c = Check::new("NetworkRoutingPolicy", name);
    check_routing(&mut c, name, spec);
    c.finish()
}

/// Parses a valid routing policy into the compiler's model. Errors are those of
/// [`validate_routing_policy`]; support is not checked (see [`routing_support`]).
pub fn routing_model(name: &str, spec: &NetworkRoutingPolicySpec) -> Result<RoutingModel, Errors> {
    let mut c = Check::new("NetworkRoutingPolicy", name);
    let prefixes = check_routing(&mut c, name, spec);
    c.finish()?;
    Ok(RoutingModel {
        name: name.to_string(),
        priority: spec.priority,
        sources: spec.sources.clone(),
        destination: spec.destination.network.clone(),
        prefixes,
        direction: spec.direction,
        transit: spec
            .next_hop
            .as_ref()
            .and_then(|nh| nh.endpoint.as_ref())
            .map(|ep| NamespacedName::new(&ep.namespace, &ep.name)),
        gateway: spec
            .next_hop
            .as_ref()
            .and_then(|nh| nh.gateway.as_ref())
            .and_then(|gw| gw.parse().ok()),
    })
}

/// Says whether the compiler implements a (valid) routing policy. Not yet: a transit endpoint
/// on a one-way path, and a one-way path toward an external network (its replies come back
/// through the uplink node, which does not track them). Both directions are supported
/// otherwise (`sourceToDestination`: the way back is reply-only, ADR 0029). `kind_of` gives the type
/// of a network by name (`None` for a network not known yet: nothing is rejected for it).
/// The daemon sets `Supported=False` with the error's message, never silently ignores.
pub fn routing_support(
    name: &str,
    spec: &NetworkRoutingPolicySpec,
    kind_of: impl Fn(&str) -> Option<NetworkType>,
) -> Result<(), NotSupported> {
    let mut features = Vec::new();
    if let Some(nh) = &spec.next_hop {
        if nh.endpoint.is_some() && spec.direction == Direction::SourceToDestination {
            features.push(Unsupported::OneWayThroughTransit);
        }
    }
    if spec.direction == Direction::SourceToDestination
        && kind_of(&spec.destination.network) == Some(NetworkType::External)
    {
        features.push(Unsupported::OneWayToExternal {
            network: spec.destination.network.clone(),
        });
    }
    if features.is_empty() {
        Ok(())
    } else {
        Err(NotSupported {
            policy: name.to_string(),
            features,
        })
    }
}

// ---- resources written by control ----------------------------------------------------------

/// Validates a NetworkEndpoint `namespace/name`: names, interface names, addresses (with
/// prefix length, at least one, at most one per family), a unicast MAC.
pub fn validate_endpoint(
    namespace: &str,
    name: &str,
    spec: &NetworkEndpointSpec,
) -> Result<(), Errors> {
    let mut c = Check::new("NetworkEndpoint", &format!("{namespace}/{name}"));
    c.label("metadata.namespace", namespace);
    c.subdomain("metadata.name", name);
    c.subdomain("spec.network", &spec.network);
    c.subdomain("spec.pod", &spec.pod);
    c.subdomain("spec.node", &spec.node);
    c.ifname("spec.interface", &spec.interface);
    if let Some(h) = &spec.host_interface {
        c.ifname("spec.hostInterface", h);
    }
    c.not_empty(
        "spec.containerId",
        &spec.container_id,
        "set the CNI container id",
    );
    c.at_most(
        "spec.containerId",
        spec.container_id.chars().count(),
        MAX_UID_LENGTH,
        "characters",
    );
    if let Some(uid) = &spec.pod_uid {
        c.not_empty("spec.podUid", uid, "set the pod's metadata.uid, or omit it");
        c.at_most(
            "spec.podUid",
            uid.chars().count(),
            MAX_UID_LENGTH,
            "characters",
        );
    }
    c.at_most(
        "spec.addresses",
        spec.addresses.len(),
        MAX_ENDPOINT_ADDRESSES,
        "entries",
    );
    if spec.addresses.is_empty() {
        let at = c.at("spec.addresses");
        c.push(ValidationError::Empty {
            at,
            fix: "list the interface's addresses with prefix length, e.g. 10.40.3.7/32",
        });
    }
    let mut families = Vec::new();
    for (i, a) in spec.addresses.iter().enumerate() {
        match a.parse::<IpNet>() {
            Ok(n) => families.push(Family::of_net(&n)),
            Err(_) => {
                let at = c.at(format!("spec.addresses[{i}]"));
                c.push(ValidationError::NotCidr {
                    at,
                    value: a.clone(),
                    example: "10.40.3.7/32",
                });
            }
        }
    }
    c.one_per_family("spec.addresses", families);
    c.mac("spec.mac", &spec.mac);
    for (field, value, ok, range, fix) in [
        (
            "spec.networkId",
            u64::from(spec.network_id),
            spec.network_id > 0,
            "1..",
            "set the network's status.id",
        ),
        (
            "spec.port",
            u64::from(spec.port),
            (1..=MAX_ENDPOINT_PORT).contains(&spec.port),
            ENDPOINT_PORT_RANGE,
            "use the forwarder port control allocated",
        ),
        (
            "spec.endpointId",
            spec.endpoint_id,
            spec.endpoint_id > 0,
            "1..",
            "use the endpoint id control allocated",
        ),
    ] {
        if !ok {
            let at = c.at(field);
            c.push(ValidationError::OutOfRange {
                at,
                value,
                range: range.to_owned(),
                fix,
            });
        }
    }
    c.finish()
}

fn check_allocation(c: &mut Check, name: &str, spec: &AllocationSpec) -> Vec<IpNet> {
    c.subdomain("metadata.name", name);
    c.subdomain("spec.network", &spec.network);
    c.subdomain("spec.node", &spec.node);
    c.at_most(
        "spec.prefixes",
        spec.prefixes.len(),
        MAX_ENDPOINT_ADDRESSES,
        "entries",
    );
    if spec.prefixes.is_empty() {
        let at = c.at("spec.prefixes");
        c.push(ValidationError::Empty {
            at,
            fix: "list the node's block, one per address family, e.g. 10.40.3.0/24",
        });
    }
    let mut out = Vec::new();
    for (i, p) in spec.prefixes.iter().enumerate() {
        if let Some(net) = c.prefix(&format!("spec.prefixes[{i}]"), p, "10.40.3.0/24", None) {
            out.push(net);
        }
    }
    c.one_per_family("spec.prefixes", out.iter().map(Family::of_net));
    out
}

/// Validates an Allocation: names, and blocks that are CIDRs with host bits zero, at least one
/// and at most one per family.
pub fn validate_allocation(name: &str, spec: &AllocationSpec) -> Result<(), Errors> {
    let mut c = Check::new("Allocation", name);
    check_allocation(&mut c, name, spec);
    c.finish()
}

/// The blocks of a valid Allocation, parsed. Errors are those of [`validate_allocation`].
pub fn allocation_prefixes(name: &str, spec: &AllocationSpec) -> Result<Vec<IpNet>, Errors> {
    let mut c = Check::new("Allocation", name);
    let out = check_allocation(&mut c, name, spec);
    c.finish()?;
    Ok(out)
}

/// Validates a Neighbor: names, an IP address and a unicast MAC.
pub fn validate_neighbor(name: &str, spec: &NeighborSpec) -> Result<(), Errors> {
    let mut c = Check::new("Neighbor", name);
    c.subdomain("metadata.name", name);
    c.subdomain("spec.network", &spec.network);
    c.address("spec.address", &spec.address, "10.50.0.7");
    c.mac("spec.mac", &spec.mac);
    c.finish()
}

/// Validates an FDBEntry: names, a unicast MAC, the pending location's node, the learned
/// addresses (each once) and the time last seen.
pub fn validate_fdb_entry(name: &str, spec: &FdbEntrySpec) -> Result<(), Errors> {
    let mut c = Check::new("FDBEntry", name);
    c.subdomain("metadata.name", name);
    c.subdomain("spec.network", &spec.network);
    c.mac("spec.mac", &spec.mac);
    c.subdomain("spec.node", &spec.node);
    if let Some(p) = &spec.pending {
        c.subdomain("spec.pending.node", &p.node);
    }
    c.at_most(
        "spec.addresses",
        spec.addresses.len(),
        MAX_ENDPOINT_ADDRESSES,
        "entries",
    );
    let mut seen = std::collections::BTreeSet::new();
    for (i, a) in spec.addresses.iter().enumerate() {
        let path = format!("spec.addresses[{i}]");
        if let Some(a) = c.address(&path, a, "10.50.0.7") {
            if !seen.insert(a) {
                let at = c.at("spec.addresses");
                c.push(ValidationError::Duplicate {
                    at,
                    value: a.to_string(),
                });
            }
        }
    }
    if let Some(t) = &spec.last_seen {
        if !rfc3339_shape(t) || t.parse::<k8s_openapi::jiff::Timestamp>().is_err() {
            let at = c.at("spec.lastSeen");
            c.push(ValidationError::NotTimestamp {
                at,
                value: t.clone(),
            });
        }
    }
    c.finish()
}

/// Whether `t` is written as RFC 3339 (what the CRD's rule for times matches):
/// `YYYY-MM-DDTHH:MM:SS`, optional fraction, then `Z` or `±HH:MM`.
fn rfc3339_shape(t: &str) -> bool {
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let fixed = digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10)
        && b.get(10) == Some(&b'T')
        && digits(11..13)
        && b.get(13) == Some(&b':')
        && digits(14..16)
        && b.get(16) == Some(&b':')
        && digits(17..19);
    if !fixed {
        return false;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        let n = b[i + 1..].iter().take_while(|d| d.is_ascii_digit()).count();
        if n == 0 {
            return false;
        }
        i += 1 + n;
    }
    match &b[i..] {
        [b'Z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit()),
        _ => false,
    }
}

fn check_node_locator(
    c: &mut Check,
    name: &str,
    spec: &NodeLocatorSpec,
) -> Option<(Ipv6Net, Ipv6Addr)> {
    c.subdomain("metadata.name", name);
    let locator = c.prefix(
        "spec.locator",
        &spec.locator,
        "fc00:0:3::/48",
        Some((
            Family::V6,
            "a locator is an IPv6 prefix, e.g. fc00:0:3::/48",
        )),
    );
    let locator = match locator {
        Some(IpNet::V6(l)) if l.prefix_len() > 64 => {
            let at = c.at("spec.locator");
            c.push(ValidationError::LocatorTooLong {
                at,
                value: spec.locator.clone(),
                len: l.prefix_len(),
            });
            None
        }
        Some(IpNet::V6(l)) => Some(l),
        _ => None,
    };
    let underlay = match c.address("spec.underlay", &spec.underlay, "2001:db8::3") {
        Some(IpAddr::V6(a)) => Some(a),
        Some(IpAddr::V4(_)) => {
            let at = c.at("spec.underlay");
            c.push(ValidationError::WrongFamily {
                at,
                value: spec.underlay.clone(),
                expected: "an IPv6 address",
                fix: "the underlay is IPv6, use the node's uplink IPv6 address",
            });
            None
        }
        None => None,
    };
    if spec.id == 0 {
        let at = c.at("spec.id");
        c.push(ValidationError::ZeroId { at });
    }
    Some((locator?, underlay?))
}

/// Validates a NodeLocator: the locator an IPv6 prefix of length 64 or shorter with host bits
/// zero, the underlay an IPv6 address, the id non-zero.
pub fn validate_node_locator(name: &str, spec: &NodeLocatorSpec) -> Result<(), Errors> {
    let mut c = Check::new("NodeLocator", name);
    check_node_locator(&mut c, name, spec);
    c.finish()
}

/// Parses a valid NodeLocator (named after its node) into the compiler's node model. Errors
/// are those of [`validate_node_locator`].
pub fn node_model(name: &str, spec: &NodeLocatorSpec) -> Result<NodeModel, Errors> {
    let mut c = Check::new("NodeLocator", name);
    let parsed = check_node_locator(&mut c, name, spec);
    c.finish()?;
    // Each field that fails to parse pushes an error, so a clean check has parsed both.
    let (locator, underlay) = parsed.expect("a NodeLocator without errors has parsed fields");
    Ok(NodeModel {
        name: name.to_string(),
        id: NodeId(spec.id),
        locator,
        underlay,
        addresses: Vec::new(),
        labels: Default::default(),
    })
}

// ---- Kubernetes NetworkPolicy --------------------------------------------------------------

/// Checks an IANA service name (a named port): 1-15 characters of lowercase letters, digits and
/// `-`, at least one letter, no `-` at either end, no `--`.
pub fn port_name(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || s.len() > 15 {
        return Err("it is empty or longer than 15 characters");
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("it has a character other than lowercase letters, digits and '-'");
    }
    if !s.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err("it has no letter");
    }
    if s.starts_with('-') || s.ends_with('-') || s.contains("--") {
        return Err("it starts or ends with '-' or holds '--'");
    }
    Ok(())
}

/// A Kubernetes label selector as lace's own type (which the checks and the selector compiler
/// take); `None` is the empty selector.
fn lace_selector(
    sel: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> LabelSelector {
    let Some(sel) = sel else {
        return LabelSelector::default();
    };
    LabelSelector {
        match_labels: sel.match_labels.clone().unwrap_or_default(),
        match_expressions: sel
            .match_expressions
            .iter()
            .flatten()
            .map(|e| LabelSelectorRequirement {
                key: e.key.clone(),
                operator: e.operator.clone(),
                values: e.values.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

impl Check {
    /// A Kubernetes label selector at `path`, compiled (empty when it has errors; the errors
    /// are pushed).
    fn k8s_selector(&mut self, path: &str, sel: &LabelSelector) -> Vec<crate::bind::Requirement> {
        let before = self.errors.len();
        self.match_labels(path, &sel.match_labels, Limits::Kubernetes);
        self.match_expressions(path, &sel.match_expressions, Limits::Kubernetes);
        if self.errors.len() > before {
            return Vec::new();
        }
        let mut problems = Vec::new();
        let reqs = crate::bind::compile_requirements(
            &sel.match_labels,
            sel.match_expressions
                .iter()
                .map(|e| (e.key.as_str(), e.operator.as_str(), e.values.as_slice())),
            "",
            &mut problems,
        );
        // The checks above refuse everything the compiler would.
        debug_assert!(problems.is_empty());
        reqs
    }

    /// A NetworkPolicy `ipBlock.cidr` or `except` entry: a CIDR (host bits are cleared, as the
    /// API server accepts them).
    fn policy_cidr(&mut self, path: &str, value: &str) -> Option<IpNet> {
        match value
            .parse::<IpNet>()
            .ok()
            .filter(|n| !is_v4_mapped(&n.addr()))
        {
            Some(n) => Some(n.trunc()),
            None => {
                let at = self.at(path);
                self.push(ValidationError::NotCidr {
                    at,
                    value: value.to_string(),
                    example: "10.40.0.0/16 or fd00:40::/48",
                });
                None
            }
        }
    }

    fn policy_peer(
        &mut self,
        path: &str,
        namespace: &str,
        p: &k8s_openapi::api::networking::v1::NetworkPolicyPeer,
    ) -> Option<crate::netpol::Peer> {
        use crate::netpol::{IpBlock, NamespaceScope, Peer};
        if let Some(b) = &p.ip_block {
            if p.pod_selector.is_some() || p.namespace_selector.is_some() {
                let at = self.at(path);
                self.push(ValidationError::IpBlockWithSelector { at });
                return None;
            }
            let cidr = self.policy_cidr(&format!("{path}.ipBlock.cidr"), &b.cidr);
            let mut except = Vec::new();
            for (i, e) in b.except.iter().flatten().enumerate() {
                let ep = format!("{path}.ipBlock.except[{i}]");
                let Some(net) = self.policy_cidr(&ep, e) else {
                    continue;
                };
                if let Some(c) = cidr {
                    let inside = c.contains(&net) && net.prefix_len() > c.prefix_len();
                    if !inside {
                        let at = self.at(ep);
                        self.push(ValidationError::ExceptOutsideCidr {
                            at,
                            value: e.clone(),
                            cidr: b.cidr.clone(),
                        });
                        continue;
                    }
                }
                except.push(net);
            }
            except.sort();
            except.dedup();
            return cidr.map(|cidr| Peer::Block(IpBlock { cidr, except }));
        }
        if p.pod_selector.is_none() && p.namespace_selector.is_none() {
            let at = self.at(path);
            self.push(ValidationError::EmptyPeer { at });
            return None;
        }
        let pods = self.k8s_selector(
            &format!("{path}.podSelector"),
            &lace_selector(p.pod_selector.as_ref()),
        );
        let namespaces = match &p.namespace_selector {
            None => NamespaceScope::Policy(namespace.to_owned()),
            Some(ns) => NamespaceScope::Selected(self.k8s_selector(
                &format!("{path}.namespaceSelector"),
                &lace_selector(Some(ns)),
            )),
        };
        Some(Peer::Pods { namespaces, pods })
    }

    fn policy_port(
        &mut self,
        path: &str,
        p: &k8s_openapi::api::networking::v1::NetworkPolicyPort,
    ) -> Option<crate::netpol::PortMatch> {
        use crate::netpol::PortMatch;
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let proto = match p.protocol.as_deref() {
            None => Some(lace_shared::policy::PROTO_TCP),
            Some(name) => {
                let n = crate::netpol::protocol_number(name);
                if n.is_none() {
                    let at = self.at(format!("{path}.protocol"));
                    self.push(ValidationError::UnknownProtocol {
                        at,
                        value: name.to_owned(),
                    });
                }
                n
            }
        };
        let in_range = |c: &mut Check, field: &str, v: i32| -> Option<u16> {
            match u16::try_from(v) {
                Ok(v) if v > 0 => Some(v),
                _ => {
                    let at = c.at(format!("{path}.{field}"));
                    c.push(ValidationError::PortOutOfRange {
                        at,
                        value: i64::from(v),
                    });
                    None
                }
            }
        };
        let m = match (&p.port, p.end_port) {
            (None, None) => proto.map(PortMatch::AnyPort),
            (None, Some(_)) => {
                let at = self.at(format!("{path}.endPort"));
                self.push(ValidationError::EndPortNeedsNumber {
                    at,
                    why: "without port",
                    fix: "set port to the first port of the range",
                });
                None
            }
            (Some(IntOrString::String(name)), end) => {
                if end.is_some() {
                    let at = self.at(format!("{path}.endPort"));
                    self.push(ValidationError::EndPortNeedsNumber {
                        at,
                        why: "with a named port",
                        fix: "use a numeric port or remove endPort",
                    });
                }
                if let Err(reason) = port_name(name) {
                    let at = self.at(format!("{path}.port"));
                    self.push(ValidationError::NotPortName {
                        at,
                        value: name.clone(),
                        reason,
                    });
                    return None;
                }
                proto.map(|proto| PortMatch::Named {
                    proto,
                    name: name.clone(),
                })
            }
            (Some(IntOrString::Int(port)), end) => {
                let lo = in_range(self, "port", *port);
                let hi = match end {
                    None => lo,
                    Some(e) => {
                        let hi = in_range(self, "endPort", e);
                        if e < *port {
                            let at = self.at(format!("{path}.endPort"));
                            self.push(ValidationError::EndPortBelowPort {
                                at,
                                end: e,
                                port: *port,
                            });
                            return None;
                        }
                        hi
                    }
                };
                match (proto, lo, hi) {
                    (Some(proto), Some(lo), Some(hi)) => Some(PortMatch::Range { proto, lo, hi }),
                    _ => None,
                }
            }
        };
        m
    }

    fn policy_rules<'a>(
        &mut self,
        path: &str,
        namespace: &str,
        rules: impl Iterator<
            Item = (
                Option<&'a Vec<k8s_openapi::api::networking::v1::NetworkPolicyPeer>>,
                Option<&'a Vec<k8s_openapi::api::networking::v1::NetworkPolicyPort>>,
            ),
        >,
        peers_field: &str,
    ) -> Vec<crate::netpol::Rule> {
        let mut out = Vec::new();
        for (i, (peers, ports)) in rules.enumerate() {
            let rp = format!("{path}[{i}]");
            let peers = peers
                .into_iter()
                .flatten()
                .enumerate()
                .filter_map(|(j, p)| {
                    self.policy_peer(&format!("{rp}.{peers_field}[{j}]"), namespace, p)
                })
                .collect();
            let ports = ports
                .into_iter()
                .flatten()
                .enumerate()
                .filter_map(|(j, p)| self.policy_port(&format!("{rp}.ports[{j}]"), p))
                .collect();
            out.push(crate::netpol::Rule { peers, ports });
        }
        out
    }
}

/// Validates a Kubernetes NetworkPolicy as the API server's admission would (lace reads
/// manifests no API server admitted) and parses it: every error, each with its field; on
/// success the model with `policyTypes` resolved (see [`crate::netpol::PolicyModel`]).
pub fn network_policy_model(
    namespace: &str,
    name: &str,
    spec: &k8s_openapi::api::networking::v1::NetworkPolicySpec,
) -> Result<crate::netpol::PolicyModel, Errors> {
    let mut c = Check::new("NetworkPolicy", &format!("{namespace}/{name}"));
    c.subdomain("metadata.name", name);
    c.label("metadata.namespace", namespace);
    let pod_selector = c.k8s_selector(
        "spec.podSelector",
        &lace_selector(spec.pod_selector.as_ref()),
    );
    let mut types = BTreeSet::new();
    for (i, t) in spec.policy_types.iter().flatten().enumerate() {
        let at = c.at(format!("spec.policyTypes[{i}]"));
        match t.as_str() {
            "Ingress" | "Egress" => {
                if !types.insert(t.as_str()) {
                    c.push(ValidationError::Duplicate {
                        at,
                        value: t.clone(),
                    });
                }
            }
            _ => c.push(ValidationError::UnknownPolicyType {
                at,
                value: t.clone(),
            }),
        }
    }
    let ingress_rules = spec.ingress.as_deref().unwrap_or_default();
    let egress_rules = spec.egress.as_deref().unwrap_or_default();
    // Upstream defaulting: without policyTypes, Ingress always and Egress when egress rules
    // exist.
    if spec.policy_types.as_ref().is_none_or(Vec::is_empty) {
        types.insert("Ingress");
        if !egress_rules.is_empty() {
            types.insert("Egress");
        }
    }
    let ingress = c.policy_rules(
        "spec.ingress",
        namespace,
        ingress_rules
            .iter()
            .map(|r| (r.from.as_ref(), r.ports.as_ref())),
        "from",
    );
    let egress = c.policy_rules(
        "spec.egress",
        namespace,
        egress_rules
            .iter()
            .map(|r| (r.to.as_ref(), r.ports.as_ref())),
        "to",
    );
    c.finish()?;
    Ok(crate::netpol::PolicyModel {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        pod_selector,
        ingress: types.contains("Ingress").then_some(ingress),
        egress: types.contains("Egress").then_some(egress),
    })
}
