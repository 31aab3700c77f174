//! The CustomResourceDefinitions of the `lace-cni.io/v1alpha1` API, generated from the Rust
//! types and made admission-grade: the API server refuses at `kubectl apply` what
//! [`super::validate`] refuses (ADR 0010).
//!
//! What [`definitions`] adds to the schemas `kube`/`schemars` derive:
//!
//! - **Rules** (`x-kubernetes-validations`, Kubernetes CEL with its `isCIDR`, `cidr()`, `ip()`,
//!   `isIP` libraries) expressing every check of the `validate_*` functions that a schema can
//!   express: CIDRs and their family, host bits, subnet and block sizes, the fields each
//!   network type has or must not have, rules with exactly one of `network`/`celExpression`,
//!   deny rules, selector keys, operators and values, names, MACs, interface names, VLANs,
//!   duplicates, one prefix per family. Each rule's message starts with the field it is about
//!   (and `fieldPath` points there), so `kubectl` names the field as `validate` does.
//! - **Transition rules** on Network `spec`: `type`, `ipv4Subnet` and `ipv6Subnet` are
//!   immutable, as [`super::validate::validate_network_update`].
//! - **Bounds** (`maxItems`, `maxLength`, `maxProperties` from [`super::limits`]): they keep the
//!   rules' estimated cost inside the API server's budget (a CRD whose rules may exceed it is
//!   refused), and `validate` enforces the same limits.
//! - Integer formats the API server does not know (`uint8`, `uint16`, `uint32`, which it warns
//!   about on install) are dropped; the ranges stay as `minimum`/`maximum`.
//! - `nullable` is removed under `spec` (an explicit `null` is then pruned like an absent field,
//!   which is what the Rust types mean and what the rules' `has()` expect); Network `spec.type`
//!   gets its `enum`; kinds with a status get the status subresource.
//!
//! What no CRD can check, the API server does itself (object names and namespaces: DNS
//! subdomains and labels) or control does against its world (references between objects).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use kube::CustomResourceExt;
use serde_json::{json, Value};

use super::limits::*;
use super::{
    Allocation, Claim, FDBEntry, Neighbor, Network, NetworkBindingPolicy, NetworkEndpoint,
    NetworkRoutingPolicy, NetworkType, NodeLocator,
};

/// A CRD whose generated schema does not have the shape the post-processing expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CRD {crd}: {what}; api::crd's post-processing needs updating")]
pub struct ShapeError {
    /// The CRD's name.
    pub crd: String,
    /// The missing part (a schema path such as `spec.rules[].selector`).
    pub what: String,
}

/// One `x-kubernetes-validations` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    rule: String,
    message: String,
    field_path: Option<&'static str>,
}

fn rule(rule: impl Into<String>, message: impl Into<String>) -> Rule {
    Rule {
        rule: rule.into(),
        message: message.into(),
        field_path: None,
    }
}

fn at(field_path: &'static str, rule: impl Into<String>, message: impl Into<String>) -> Rule {
    Rule {
        rule: rule.into(),
        message: message.into(),
        field_path: Some(field_path),
    }
}

// ---- CEL fragments (each a boolean expression over the string `x`) ------------------------

const DNS_SUBDOMAIN_RE: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
const DNS_LABEL_RE: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
const LABEL_NAME_RE: &str = "^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
const LABEL_VALUE_RE: &str = "^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";
const MAC_RE: &str = "^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$";
/// An RFC 3339 time (the shape `validate` checks before parsing it).
const TIME_RE: &str =
    "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$";
const IFNAME_RE: &str = "^[^/:\\\\s]{1,15}$";

fn dns_subdomain(x: &str) -> String {
    format!("(size({x}) <= 253 && {x}.matches('{DNS_SUBDOMAIN_RE}'))")
}

fn dns_label(x: &str) -> String {
    format!("(size({x}) <= 63 && {x}.matches('{DNS_LABEL_RE}'))")
}

/// `[prefix/]name`: the prefix (before the first `/`) a DNS subdomain, the name a label name.
fn label_key(x: &str) -> String {
    format!(
        "({x}.indexOf('/') < 0 ? {x}.matches('{LABEL_NAME_RE}') : \
         ({x}.indexOf('/') <= 253 && {x}.substring(0, {x}.indexOf('/')).matches('{DNS_SUBDOMAIN_RE}') \
         && {x}.substring({x}.indexOf('/') + 1).matches('{LABEL_NAME_RE}')))"
    )
}

fn label_value(x: &str) -> String {
    format!("{x}.matches('{LABEL_VALUE_RE}')")
}

/// A CIDR of `family` (4 or 6) with its host bits zero.
fn network_prefix(x: &str, family: u8) -> String {
    format!(
        "(isCIDR({x}) && cidr({x}).ip().family() == {family} && cidr({x}) == cidr({x}).masked())"
    )
}

/// A CIDR with its host bits zero.
fn any_network_prefix(x: &str) -> String {
    format!("(isCIDR({x}) && cidr({x}) == cidr({x}).masked())")
}

fn unicast_mac(x: &str) -> String {
    format!(
        "(!({x}.substring(1, 2) in ['1', '3', '5', '7', '9', 'b', 'd', 'f', 'B', 'D', 'F']) \
         && {x} != '00:00:00:00:00:00')"
    )
}

// ---- rules per kind ------------------------------------------------------------------------

fn name_rules(what: &str) -> Vec<Rule> {
    vec![rule(
        dns_subdomain("self"),
        format!(
            "{what} is not a DNS-1123 subdomain; use lowercase letters, digits, '-' and '.', \
             starting and ending with a letter or digit, at most 253 characters"
        ),
    )]
}

fn cidr_rules(what: &str, example: &str) -> Vec<Rule> {
    vec![
        rule(
            "isCIDR(self)",
            format!("{what} is not a CIDR; use e.g. {example}"),
        ),
        rule(
            "!isCIDR(self) || cidr(self) == cidr(self).masked()",
            format!("{what} has host bits set; use the network address"),
        ),
    ]
}

fn family_prefix_rules(what: &str, family: u8, example: &str, fix: &str, max_len: u8) -> Vec<Rule> {
    let fam = format!("cidr(self).ip().family() == {family}");
    vec![
        rule(
            "isCIDR(self)",
            format!("{what} is not a CIDR; use e.g. {example}"),
        ),
        rule(
            format!("!isCIDR(self) || {fam}"),
            format!("{what} is not an IPv{family} prefix; {fix}"),
        ),
        rule(
            format!("!isCIDR(self) || !({fam}) || cidr(self) == cidr(self).masked()"),
            format!("{what} has host bits set; use the network address"),
        ),
        rule(
            format!(
                "!{} || cidr(self).prefixLength() <= {max_len}",
                network_prefix("self", family)
            ),
            format!(
                "{what} leaves no address after the gateway; use a prefix length of at most \
                 {max_len}"
            ),
        ),
    ]
}

fn ifname_rules(what: &str) -> Vec<Rule> {
    vec![rule(
        format!("self.matches('{IFNAME_RE}') && self != '.' && self != '..'"),
        format!(
            "{what} is not a Linux interface name; use 1-15 characters without '/', ':' or \
             whitespace, e.g. eth1"
        ),
    )]
}

fn mac_rules(what: &str) -> Vec<Rule> {
    vec![
        rule(
            format!("self.matches('{MAC_RE}')"),
            format!(
                "{what} is not a MAC address; use six hex octets separated by ':', e.g. \
                 02:00:00:00:00:01"
            ),
        ),
        rule(
            format!("!self.matches('{MAC_RE}') || {}", unicast_mac("self")),
            format!(
                "{what} is a multicast or all-zero MAC; use a unicast MAC, e.g. 02:00:00:00:00:01"
            ),
        ),
    ]
}

fn address_rules(what: &str, example: &str) -> Vec<Rule> {
    vec![rule(
        "isIP(self)",
        format!("{what} is not an IP address; use e.g. {example}"),
    )]
}

/// Unique entries among those `valid` accepts, by `same` (over `e` and `f`): duplicates as
/// `validate` counts them (`x-kubernetes-list-type: set` would be structural, compare the raw
/// strings, and be invisible to client-side rule evaluation).
fn unique(what: &str, valid: fn(&str) -> String, same: &str) -> Rule {
    rule(
        format!(
            "self.all(e, !{} || size(self.filter(f, {} && ({same}))) == 1)",
            valid("e"),
            valid("f")
        ),
        format!("{what} lists an entry more than once; list each once"),
    )
}

/// At most one valid prefix of each family in a list (`valid4/6` over `p`).
fn one_per_family(what: &str, valid: fn(&str, u8) -> String) -> Vec<Rule> {
    [4u8, 6]
        .into_iter()
        .map(|f| {
            rule(
                format!("size(self.filter(p, {})) <= 1", valid("p", f)),
                format!("{what} holds more than one IPv{f} entry; keep one per address family"),
            )
        })
        .collect()
}

fn endpoint_address(x: &str, family: u8) -> String {
    format!("(isCIDR({x}) && cidr({x}).ip().family() == {family})")
}

/// The rules of a label selector at `base` (`…matchLabels`, `…matchExpressions[]`).
fn label_selector(out: &mut Vec<(String, Vec<Rule>)>, base: &str) {
    out.push((
        format!("{base}.matchLabels"),
        vec![rule(
            format!("self.all(k, {})", label_key("k")),
            format!(
                "{base}.matchLabels has a key that is not a valid label key; use [prefix/]name: \
                 an optional DNS-1123 subdomain prefix and a name of at most 63 letters, digits, \
                 '-', '_' or '.', starting and ending with a letter or digit"
            ),
        )],
    ));
    out.push((
        format!("{base}.matchLabels{{}}"),
        vec![rule(
            label_value("self"),
            format!(
                "{base}.matchLabels has a value that is not a valid label value; use at most 63 \
                 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, \
                 or an empty value"
            ),
        )],
    ));
    let req = format!("{base}.matchExpressions[]");
    out.push((
        req.clone(),
        vec![
            at(
                ".operator",
                "self.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist']",
                format!(
                    "{base}.matchExpressions[].operator is not a label selector operator; use \
                     In, NotIn, Exists or DoesNotExist"
                ),
            ),
            at(
                ".values",
                "!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)",
                format!("{base}.matchExpressions[].values is empty; operators In and NotIn need at least one value"),
            ),
            at(
                ".values",
                "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0",
                format!("{base}.matchExpressions[].values is set; operators Exists and DoesNotExist take no values, so remove them"),
            ),
        ],
    ));
    out.push((
        format!("{req}.key"),
        vec![rule(
            label_key("self"),
            format!(
                "{base}.matchExpressions[].key is not a valid label key; use [prefix/]name: an \
                 optional DNS-1123 subdomain prefix and a name of at most 63 letters, digits, \
                 '-', '_' or '.', starting and ending with a letter or digit"
            ),
        )],
    ));
    out.push((
        format!("{req}.values[]"),
        vec![rule(
            label_value("self"),
            format!(
                "{base}.matchExpressions[].values has an entry that is not a valid label value; \
                 use at most 63 letters, digits, '-', '_' or '.', starting and ending with a \
                 letter or digit, or an empty value"
            ),
        )],
    ));
}

/// The bounds of a label selector at `base`.
fn label_selector_bounds(out: &mut Vec<(String, Bound)>, base: &str) {
    out.push((format!("{base}.matchLabels"), Bound::Properties(MAX_LABELS)));
    out.push((
        format!("{base}.matchExpressions"),
        Bound::Items(MAX_REQUIREMENTS),
    ));
    out.push((
        format!("{base}.matchExpressions[].values"),
        Bound::Items(MAX_VALUES),
    ));
    out.push((
        format!("{base}.matchExpressions[].key"),
        Bound::Length(MAX_LABEL_KEY_LENGTH),
    ));
    out.push((
        format!("{base}.matchExpressions[].operator"),
        Bound::Length(MAX_OPERATOR_LENGTH),
    ));
    out.push((
        format!("{base}.matchExpressions[].values[]"),
        Bound::Length(MAX_LABEL_VALUE_LENGTH),
    ));
    out.push((
        format!("{base}.matchLabels{{}}"),
        Bound::Length(MAX_LABEL_VALUE_LENGTH),
    ));
}

/// `status.conditions`, as `metav1.Condition` bounds them.
fn condition_bounds(out: &mut Vec<(String, Bound)>) {
    out.push(("status.conditions".into(), Bound::Items(MAX_CONDITIONS)));
    for (field, max) in [
        ("type", MAX_CONDITION_TYPE_LENGTH),
        ("status", MAX_CONDITION_STATUS_LENGTH),
        ("reason", MAX_CONDITION_REASON_LENGTH),
        ("message", MAX_CONDITION_MESSAGE_LENGTH),
        ("lastTransitionTime", MAX_TIMESTAMP_LENGTH),
    ] {
        out.push((format!("status.conditions[].{field}"), Bound::Length(max)));
    }
}

fn network_rules() -> Vec<(String, Vec<Rule>)> {
    let mut out = vec![(
        "spec".to_owned(),
        vec![
            rule(
                "self.type == 'external' || has(self.ipv4Subnet) || has(self.ipv6Subnet)",
                "spec sets neither ipv4Subnet nor ipv6Subnet; an l3 or l2 network needs at least \
                 one, e.g. ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}",
            ),
            at(
                ".externalPrefixes",
                "self.type != 'external' || (has(self.externalPrefixes) && size(self.externalPrefixes) > 0)",
                "spec.externalPrefixes is empty; an external network needs at least one CIDR, e.g. 192.0.2.0/24",
            ),
            at(
                ".externalPrefixes",
                "self.type == 'external' || !has(self.externalPrefixes) || size(self.externalPrefixes) == 0",
                "spec.externalPrefixes is set on an l3 or l2 network; only external networks have \
                 it, so remove it or use type external",
            ),
            at(
                ".uplinks",
                "self.type == 'external' || !has(self.uplinks) || size(self.uplinks) == 0",
                "spec.uplinks is set on an l3 or l2 network; only external networks have it, so \
                 remove it or use type external",
            ),
            at(
                ".l2",
                "self.type == 'l2' || !has(self.l2)",
                "spec.l2 is set on an l3 or external network; only l2 networks have it, so \
                 remove it or use type l2",
            ),
        ],
    )];
    for (path, range, fix) in [
        (
            "spec.l2.learning.agingSeconds",
            AGING_SECONDS,
            "use seconds from 30 (a learned MAC is refreshed every quarter of it) to 86400 (a \
             day), e.g. 300",
        ),
        (
            "spec.l2.bumLimit.packetsPerSecond",
            BUM_PPS,
            "use frames per second from 0 (unlimited) to 10000000, e.g. 1000",
        ),
        (
            "spec.l2.bumLimit.burst",
            BUM_BURST,
            "use a number of frames from 1 to 1000000, e.g. 200",
        ),
    ] {
        let (min, max) = (range.start(), range.end());
        out.push((
            path.to_owned(),
            vec![rule(
                format!("self >= {min} && self <= {max}"),
                format!("{path} is outside {min}..={max}; {fix}"),
            )],
        ));
    }
    for (fam, field, width) in [(4u8, "ipv4Subnet", 32u8), (6, "ipv6Subnet", 128)] {
        let max = width - 1;
        let hl = format!("self.{field}.hostLocalPrefixLength");
        let prefix = format!("self.{field}.prefix");
        let path: &'static str = if fam == 4 {
            ".ipv4Subnet.hostLocalPrefixLength"
        } else {
            ".ipv6Subnet.hostLocalPrefixLength"
        };
        let subnet_path: &'static str = if fam == 4 {
            ".ipv4Subnet"
        } else {
            ".ipv6Subnet"
        };
        let spec = &mut out[0].1;
        spec.push(at(
            subnet_path,
            format!("self.type != 'external' || !has(self.{field})"),
            format!(
                "spec.{field} is set on an external network; external networks have no subnet \
                 and no IPAM, so remove it and list the CIDRs in spec.externalPrefixes"
            ),
        ));
        spec.push(at(
            path,
            format!("self.type != 'l3' || !has(self.{field}) || has({hl})"),
            format!(
                "spec.{field}.hostLocalPrefixLength is required on an l3 network (the length of \
                 each node's block); set it"
            ),
        ));
        spec.push(at(
            path,
            format!("self.type != 'l2' || !has(self.{field}) || !has({hl})"),
            format!(
                "spec.{field}.hostLocalPrefixLength is set on an l2 network, but only l3 networks \
                 cut their subnet into per-node blocks; remove it"
            ),
        ));
        spec.push(at(
            path,
            format!(
                "self.type != 'l3' || !has(self.{field}) || !has({hl}) || !{} || \
                 cidr({prefix}).prefixLength() > {max} || ({hl} >= cidr({prefix}).prefixLength() && {hl} <= {max})",
                network_prefix(&prefix, fam)
            ),
            format!(
                "spec.{field}.hostLocalPrefixLength is outside the subnet's prefix length..={max}; \
                 a block is at least the subnet's prefix length and must hold the gateway and \
                 one pod"
            ),
        ));
        let (example, fix) = if fam == 4 {
            ("10.40.0.0/16", "IPv6 subnets go in spec.ipv6Subnet")
        } else {
            ("fd00:40::/48", "IPv4 subnets go in spec.ipv4Subnet")
        };
        out.push((
            format!("spec.{field}.prefix"),
            family_prefix_rules(&format!("spec.{field}.prefix"), fam, example, fix, max),
        ));
    }
    out.push((
        "spec.externalPrefixes".into(),
        vec![unique(
            "spec.externalPrefixes",
            any_network_prefix,
            "cidr(f) == cidr(e)",
        )],
    ));
    out.push((
        "spec.externalPrefixes[]".into(),
        cidr_rules("spec.externalPrefixes[]", "192.0.2.0/24"),
    ));
    out.push((
        "spec.uplinks[].interface".into(),
        ifname_rules("spec.uplinks[].interface"),
    ));
    out.push((
        "spec.uplinks[].vlan".into(),
        vec![rule(
            "self >= 1 && self <= 4094",
            "spec.uplinks[].vlan is outside 1..=4094; use a VLAN id from 1 to 4094, or omit it for untagged traffic",
        )],
    ));
    out.push((
        "spec.uplinks[].staticRoutes[]".into(),
        vec![at(
            ".nextHop",
            format!(
                "!{} || !isIP(self.nextHop) || cidr(self.destination).ip().family() == ip(self.nextHop).family()",
                any_network_prefix("self.destination")
            ),
            "spec.uplinks[].staticRoutes[].nextHop is not of the address family of its \
             destination; use a next hop of that family",
        )],
    ));
    out.push((
        "spec.uplinks[].staticRoutes[].destination".into(),
        cidr_rules("spec.uplinks[].staticRoutes[].destination", "0.0.0.0/0"),
    ));
    out.push((
        "spec.uplinks[].staticRoutes[].nextHop".into(),
        address_rules("spec.uplinks[].staticRoutes[].nextHop", "192.0.2.1"),
    ));
    label_selector(&mut out, "spec.uplinks[].nodeSelector");
    out
}

fn binding_policy_rules() -> Vec<(String, Vec<Rule>)> {
    let deny = "(has(self.policy) && self.policy == 'deny')";
    let mut out = vec![
        (
            "spec".to_owned(),
            vec![
                at(
                    ".matchKind",
                    "!has(self.matchKind) || size(self.matchKind) > 0",
                    "spec.matchKind is empty; omit it to match every kind, or list pod, service \
                     and/or networkpolicy",
                ),
                at(
                    ".rules",
                    "size(self.rules) > 0",
                    "spec.rules is empty; add at least one rule, e.g. - network: default",
                ),
            ],
        ),
        (
            "spec.matchKind".to_owned(),
            vec![rule(
                "self.all(k, size(self.filter(j, j == k)) == 1)",
                "spec.matchKind lists a kind more than once; list each once",
            )],
        ),
        (
            "spec.rules[]".to_owned(),
            vec![
                rule(
                    format!("{deny} || has(self.network) || has(self.celExpression)"),
                    "spec.rules[] sets neither network nor celExpression; an allow rule sets \
                     exactly one of them",
                ),
                rule(
                    format!("{deny} || !(has(self.network) && has(self.celExpression))"),
                    "spec.rules[] sets both network and celExpression; an allow rule sets exactly \
                     one of them, so remove one",
                ),
                at(
                    ".network",
                    format!("!{deny} || has(self.network)"),
                    "spec.rules[].network is missing; a deny rule names the network it shields",
                ),
                at(
                    ".celExpression",
                    format!("!{deny} || !has(self.celExpression)"),
                    "spec.rules[].celExpression is set on a deny rule; a deny rule shields the \
                     network named in network, so remove celExpression",
                ),
                at(
                    ".selector.matchLabels",
                    format!(
                        "!{deny} || !has(self.selector) || !has(self.selector.matchLabels) || \
                         size(self.selector.matchLabels) == 0"
                    ),
                    "spec.rules[].selector.matchLabels is set on a deny rule; deny rules select by \
                     name only, so remove it and use selector.name",
                ),
                at(
                    ".selector.matchExpressions",
                    format!(
                        "!{deny} || !has(self.selector) || !has(self.selector.matchExpressions) || \
                         size(self.selector.matchExpressions) == 0"
                    ),
                    "spec.rules[].selector.matchExpressions is set on a deny rule; deny rules \
                     select by name only, so remove it and use selector.name",
                ),
                at(
                    ".selector.namespaceSelector",
                    format!(
                        "!{deny} || !has(self.selector) || !has(self.selector.namespaceSelector)"
                    ),
                    "spec.rules[].selector.namespaceSelector is set on a deny rule; deny rules \
                     select by name only, so remove it and use selector.name",
                ),
            ],
        ),
        (
            "spec.rules[].network".to_owned(),
            name_rules("spec.rules[].network"),
        ),
        (
            "spec.rules[].celExpression".to_owned(),
            vec![rule(
                "size(self) > 0",
                "spec.rules[].celExpression is empty; write an expression that evaluates to an \
                 optional string, e.g. optional.of('default')",
            )],
        ),
        (
            "spec.rules[].selector.name".to_owned(),
            name_rules("spec.rules[].selector.name"),
        ),
    ];
    label_selector(&mut out, "spec.rules[].selector");
    label_selector(&mut out, "spec.rules[].selector.namespaceSelector");
    out
}

fn routing_policy_rules() -> Vec<(String, Vec<Rule>)> {
    vec![
        (
            "spec".to_owned(),
            vec![at(
                ".sources",
                "size(self.sources) > 0",
                "spec.sources is empty; list at least one source network",
            )],
        ),
        (
            "spec.sources".to_owned(),
            vec![unique("spec.sources", dns_subdomain, "f == e")],
        ),
        ("spec.sources[]".to_owned(), name_rules("spec.sources[]")),
        (
            "spec.destination.network".to_owned(),
            vec![
                rule(
                    "size(self) > 0",
                    "spec.destination.network is empty; name the destination Network",
                ),
                rule(
                    format!("size(self) == 0 || {}", dns_subdomain("self")),
                    "spec.destination.network is not a DNS-1123 subdomain; use lowercase letters, \
                     digits, '-' and '.', starting and ending with a letter or digit, at most 253 \
                     characters",
                ),
            ],
        ),
        (
            "spec.destination.prefixes".to_owned(),
            vec![unique(
                "spec.destination.prefixes",
                any_network_prefix,
                "cidr(f) == cidr(e)",
            )],
        ),
        (
            "spec.destination.prefixes[]".to_owned(),
            cidr_rules("spec.destination.prefixes[]", "10.40.0.0/24"),
        ),
        (
            "spec.nextHop".to_owned(),
            vec![
                rule(
                    "has(self.endpoint) || has(self.gateway)",
                    "spec.nextHop sets neither endpoint nor gateway; set exactly one, or remove nextHop",
                ),
                rule(
                    "!(has(self.endpoint) && has(self.gateway))",
                    "spec.nextHop sets both endpoint and gateway; set exactly one of them",
                ),
            ],
        ),
        (
            "spec.nextHop.endpoint.namespace".to_owned(),
            vec![rule(
                dns_label("self"),
                "spec.nextHop.endpoint.namespace is not a DNS-1123 label; use lowercase letters, \
                 digits and '-', starting and ending with a letter or digit, at most 63 characters",
            )],
        ),
        (
            "spec.nextHop.endpoint.name".to_owned(),
            name_rules("spec.nextHop.endpoint.name"),
        ),
        (
            "spec.nextHop.gateway".to_owned(),
            address_rules("spec.nextHop.gateway", "192.0.2.1"),
        ),
    ]
}

fn endpoint_rules() -> Vec<(String, Vec<Rule>)> {
    let mut out = vec![
        ("spec.network".to_owned(), name_rules("spec.network")),
        ("spec.pod".to_owned(), name_rules("spec.pod")),
        ("spec.node".to_owned(), name_rules("spec.node")),
        ("spec.interface".to_owned(), ifname_rules("spec.interface")),
        (
            "spec.hostInterface".to_owned(),
            ifname_rules("spec.hostInterface"),
        ),
        (
            "spec.containerId".to_owned(),
            vec![rule(
                "size(self) > 0",
                "spec.containerId is empty; set the CNI container id",
            )],
        ),
        ("spec.mac".to_owned(), mac_rules("spec.mac")),
        (
            "spec.networkId".to_owned(),
            vec![rule(
                "self > 0",
                "spec.networkId is outside 1..; set the network's status.id",
            )],
        ),
        (
            "spec.port".to_owned(),
            vec![rule(
                format!("self >= 1 && self <= {MAX_ENDPOINT_PORT}"),
                format!(
                    "spec.port is outside {ENDPOINT_PORT_RANGE}; use the forwarder port control \
                     allocated"
                ),
            )],
        ),
        (
            "spec.endpointId".to_owned(),
            vec![rule(
                "self > 0",
                "spec.endpointId is outside 1..; use the endpoint id control allocated",
            )],
        ),
        (
            "spec.podUid".to_owned(),
            vec![rule(
                "size(self) > 0",
                "spec.podUid is empty; set the pod's metadata.uid, or omit it",
            )],
        ),
        (
            "spec.addresses[]".to_owned(),
            vec![rule(
                "isCIDR(self)",
                "spec.addresses[] is not a CIDR; use e.g. 10.40.3.7/32",
            )],
        ),
    ];
    let mut addresses = vec![rule(
        "size(self) > 0",
        "spec.addresses is empty; list the interface's addresses with prefix length, e.g. 10.40.3.7/32",
    )];
    addresses.extend(one_per_family("spec.addresses", endpoint_address));
    out.push(("spec.addresses".to_owned(), addresses));
    out
}

fn allocation_rules() -> Vec<(String, Vec<Rule>)> {
    let mut prefixes = vec![rule(
        "size(self) > 0",
        "spec.prefixes is empty; list the node's block, one per address family, e.g. 10.40.3.0/24",
    )];
    prefixes.extend(one_per_family("spec.prefixes", network_prefix));
    vec![
        ("spec.network".to_owned(), name_rules("spec.network")),
        ("spec.node".to_owned(), name_rules("spec.node")),
        ("spec.prefixes".to_owned(), prefixes),
        (
            "spec.prefixes[]".to_owned(),
            cidr_rules("spec.prefixes[]", "10.40.3.0/24"),
        ),
    ]
}

fn claim_rules() -> Vec<(String, Vec<Rule>)> {
    vec![
        ("spec.holder".to_owned(), name_rules("spec.holder")),
        (
            "spec.locator".to_owned(),
            cidr_rules("spec.locator", "fc00:0:3::/48"),
        ),
        (
            "spec.network.ipv4Subnet.prefix".to_owned(),
            cidr_rules("spec.network.ipv4Subnet.prefix", "10.40.0.0/16"),
        ),
        (
            "spec.network.ipv6Subnet.prefix".to_owned(),
            cidr_rules("spec.network.ipv6Subnet.prefix", "fd40::/48"),
        ),
    ]
}

fn neighbor_rules() -> Vec<(String, Vec<Rule>)> {
    vec![
        ("spec.network".to_owned(), name_rules("spec.network")),
        (
            "spec.address".to_owned(),
            address_rules("spec.address", "10.50.0.7"),
        ),
        ("spec.mac".to_owned(), mac_rules("spec.mac")),
    ]
}

fn fdb_rules() -> Vec<(String, Vec<Rule>)> {
    vec![
        ("spec.network".to_owned(), name_rules("spec.network")),
        ("spec.mac".to_owned(), mac_rules("spec.mac")),
        ("spec.node".to_owned(), name_rules("spec.node")),
        (
            "spec.pending.node".to_owned(),
            name_rules("spec.pending.node"),
        ),
        (
            "spec.addresses".to_owned(),
            vec![rule(
                "self.all(a, size(self.filter(b, b == a)) == 1)",
                "spec.addresses lists an address more than once; list each once",
            )],
        ),
        (
            "spec.addresses[]".to_owned(),
            address_rules("spec.addresses[]", "10.50.0.7"),
        ),
        (
            "spec.lastSeen".to_owned(),
            vec![rule(
                format!("self.matches('{TIME_RE}')"),
                "spec.lastSeen is not an RFC 3339 time; use e.g. 2026-01-02T03:04:05.678Z",
            )],
        ),
    ]
}

fn node_locator_rules() -> Vec<(String, Vec<Rule>)> {
    let v6 = "cidr(self).ip().family() == 6";
    vec![
        (
            "spec.locator".to_owned(),
            vec![
                rule(
                    "isCIDR(self)",
                    "spec.locator is not a CIDR; use e.g. fc00:0:3::/48",
                ),
                rule(
                    format!("!isCIDR(self) || {v6}"),
                    "spec.locator is not an IPv6 prefix; a locator is an IPv6 prefix, e.g. fc00:0:3::/48",
                ),
                rule(
                    format!("!isCIDR(self) || !({v6}) || cidr(self) == cidr(self).masked()"),
                    "spec.locator has host bits set; use the network address",
                ),
                rule(
                    format!("!{} || cidr(self).prefixLength() <= 64", network_prefix("self", 6)),
                    "spec.locator is longer than /64; a locator is an IPv6 prefix of length 64 or \
                     shorter, e.g. fc00:0:3::/48",
                ),
            ],
        ),
        (
            "spec.underlay".to_owned(),
            vec![
                rule(
                    "isIP(self)",
                    "spec.underlay is not an IP address; use e.g. 2001:db8::3",
                ),
                rule(
                    "!isIP(self) || ip(self).family() == 6",
                    "spec.underlay is not an IPv6 address; the underlay is IPv6, use the node's \
                     uplink IPv6 address",
                ),
            ],
        ),
        (
            "spec.id".to_owned(),
            vec![rule("self >= 1", "spec.id is 0; data-plane ids start at 1")],
        ),
    ]
}

/// The transition rules on Network `spec`: (rule, message).
pub const NETWORK_TRANSITION_RULES: [(&str, &str); 3] = [
    ("self.type == oldSelf.type", "spec.type is immutable"),
    (
        "has(self.ipv4Subnet) == has(oldSelf.ipv4Subnet) && (!has(oldSelf.ipv4Subnet) || self.ipv4Subnet == oldSelf.ipv4Subnet)",
        "spec.ipv4Subnet is immutable (it cannot be added, removed or changed)",
    ),
    (
        "has(self.ipv6Subnet) == has(oldSelf.ipv6Subnet) && (!has(oldSelf.ipv6Subnet) || self.ipv6Subnet == oldSelf.ipv6Subnet)",
        "spec.ipv6Subnet is immutable (it cannot be added, removed or changed)",
    ),
];

// ---- bounds ----------------------------------------------------------------------------------

/// A size bound on a schema node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    Items(usize),
    Length(usize),
    Properties(usize),
}

fn names(out: &mut Vec<(String, Bound)>, paths: &[&str]) {
    for p in paths {
        out.push(((*p).to_owned(), Bound::Length(253)));
    }
}

fn bounds_of(kind: &str) -> Vec<(String, Bound)> {
    let mut out: Vec<(String, Bound)> = Vec::new();
    match kind {
        "Network" => {
            for p in [
                "spec.ipv4Subnet.prefix",
                "spec.ipv6Subnet.prefix",
                "spec.externalPrefixes[]",
                "spec.uplinks[].staticRoutes[].destination",
                "spec.uplinks[].staticRoutes[].nextHop",
            ] {
                out.push((p.into(), Bound::Length(MAX_ADDRESS_LENGTH)));
            }
            out.push((
                "spec.uplinks[].interface".into(),
                Bound::Length(MAX_INTERFACE_NAME_LENGTH),
            ));
            condition_bounds(&mut out);
            out.push(("spec.externalPrefixes".into(), Bound::Items(MAX_PREFIXES)));
            out.push(("spec.uplinks".into(), Bound::Items(MAX_UPLINKS)));
            out.push((
                "spec.uplinks[].staticRoutes".into(),
                Bound::Items(MAX_STATIC_ROUTES),
            ));
            label_selector_bounds(&mut out, "spec.uplinks[].nodeSelector");
        }
        "NetworkBindingPolicy" => {
            names(
                &mut out,
                &["spec.rules[].network", "spec.rules[].selector.name"],
            );
            out.push(("spec.matchKind".into(), Bound::Items(3)));
            out.push(("spec.rules".into(), Bound::Items(MAX_RULES)));
            out.push((
                "spec.rules[].celExpression".into(),
                Bound::Length(MAX_CEL_LENGTH),
            ));
            label_selector_bounds(&mut out, "spec.rules[].selector");
            label_selector_bounds(&mut out, "spec.rules[].selector.namespaceSelector");
            condition_bounds(&mut out);
        }
        "NetworkRoutingPolicy" => {
            names(
                &mut out,
                &[
                    "spec.sources[]",
                    "spec.destination.network",
                    "spec.nextHop.endpoint.name",
                ],
            );
            out.push(("spec.nextHop.endpoint.namespace".into(), Bound::Length(63)));
            out.push(("spec.sources".into(), Bound::Items(MAX_SOURCES)));
            out.push((
                "spec.destination.prefixes".into(),
                Bound::Items(MAX_PREFIXES),
            ));
            for p in ["spec.destination.prefixes[]", "spec.nextHop.gateway"] {
                out.push((p.into(), Bound::Length(MAX_ADDRESS_LENGTH)));
            }
            condition_bounds(&mut out);
        }
        "NetworkEndpoint" => {
            names(&mut out, &["spec.network", "spec.pod", "spec.node"]);
            out.push(("spec.podUid".into(), Bound::Length(MAX_UID_LENGTH)));
            out.push(("spec.containerId".into(), Bound::Length(MAX_UID_LENGTH)));
            out.push((
                "spec.addresses".into(),
                Bound::Items(MAX_ENDPOINT_ADDRESSES),
            ));
            out.push(("spec.addresses[]".into(), Bound::Length(MAX_ADDRESS_LENGTH)));
            out.push(("spec.mac".into(), Bound::Length(17)));
            for p in ["spec.interface", "spec.hostInterface"] {
                out.push((p.into(), Bound::Length(MAX_INTERFACE_NAME_LENGTH)));
            }
            out.push(("spec.identity".into(), Bound::Length(MAX_IDENTITY_LENGTH)));
        }
        "Allocation" => {
            names(&mut out, &["spec.network", "spec.node"]);
            out.push(("spec.prefixes".into(), Bound::Items(MAX_ENDPOINT_ADDRESSES)));
            out.push(("spec.prefixes[]".into(), Bound::Length(MAX_ADDRESS_LENGTH)));
        }
        "Neighbor" => {
            names(&mut out, &["spec.network"]);
            out.push(("spec.address".into(), Bound::Length(MAX_ADDRESS_LENGTH)));
            out.push(("spec.mac".into(), Bound::Length(17)));
        }
        "FDBEntry" => {
            names(
                &mut out,
                &["spec.network", "spec.node", "spec.pending.node"],
            );
            out.push(("spec.mac".into(), Bound::Length(17)));
            out.push((
                "spec.addresses".into(),
                Bound::Items(MAX_ENDPOINT_ADDRESSES),
            ));
            out.push(("spec.addresses[]".into(), Bound::Length(MAX_ADDRESS_LENGTH)));
            out.push(("spec.lastSeen".into(), Bound::Length(MAX_TIMESTAMP_LENGTH)));
        }
        "NodeLocator" => {
            for p in ["spec.locator", "spec.underlay"] {
                out.push((p.into(), Bound::Length(MAX_ADDRESS_LENGTH)));
            }
        }
        "Claim" => {
            names(&mut out, &["spec.holder"]);
            for p in [
                "spec.locator",
                "spec.network.ipv4Subnet.prefix",
                "spec.network.ipv6Subnet.prefix",
            ] {
                out.push((p.into(), Bound::Length(MAX_ADDRESS_LENGTH)));
            }
        }
        _ => {}
    }
    out
}

fn rules_of(kind: &str) -> Vec<(String, Vec<Rule>)> {
    match kind {
        "Network" => network_rules(),
        "NetworkBindingPolicy" => binding_policy_rules(),
        "NetworkRoutingPolicy" => routing_policy_rules(),
        "NetworkEndpoint" => endpoint_rules(),
        "Allocation" => allocation_rules(),
        "Neighbor" => neighbor_rules(),
        "FDBEntry" => fdb_rules(),
        "NodeLocator" => node_locator_rules(),
        "Claim" => claim_rules(),
        _ => Vec::new(),
    }
}

// ---- post-processing -------------------------------------------------------------------------

/// The schema node at `path` below the object root: `spec.rules[].selector` — `.name` a
/// property, `[]` the items of a list, `{}` the values of a map.
fn node<'v>(root: &'v mut Value, path: &str) -> Option<&'v mut Value> {
    let mut cur = root;
    for seg in path.split('.') {
        let (name, suffix) = match seg.find(['[', '{']) {
            Some(i) => (&seg[..i], &seg[i..]),
            None => (seg, ""),
        };
        cur = cur.get_mut("properties")?.get_mut(name)?;
        let mut rest = suffix;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("[]") {
                cur = cur.get_mut("items")?;
                rest = r;
            } else if let Some(r) = rest.strip_prefix("{}") {
                cur = cur.get_mut("additionalProperties")?;
                rest = r;
            } else {
                return None;
            }
        }
    }
    Some(cur)
}

/// Drops formats the API server does not know and writes integer bounds as integers.
fn clean_formats(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if matches!(
                map.get("format").and_then(Value::as_str),
                Some("uint8" | "uint16" | "uint32" | "uint64" | "uint")
            ) {
                map.remove("format");
            }
            if map.get("type").and_then(Value::as_str) == Some("integer") {
                for key in ["minimum", "maximum"] {
                    if let Some(f) = map.get(key).and_then(Value::as_f64) {
                        // Whole numbers of a Rust integer type: exact in i64/u64.
                        map.insert(key.to_owned(), json!(f as i128 as i64));
                    }
                }
            }
            map.values_mut().for_each(clean_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(clean_formats),
        _ => {}
    }
}

/// Removes `nullable` everywhere below `v`.
fn strip_nullable(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("nullable");
            map.values_mut().for_each(strip_nullable);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nullable),
        _ => {}
    }
}

fn post_process(crd: &str, value: &mut Value) -> Result<(), ShapeError> {
    let shape = |what: &str| ShapeError {
        crd: crd.to_owned(),
        what: format!("{what} not found in the generated schema"),
    };
    let kind = value["spec"]["names"]["kind"]
        .as_str()
        .ok_or_else(|| shape("spec.names.kind"))?
        .to_owned();
    let versions = value["spec"]["versions"]
        .as_array_mut()
        .ok_or_else(|| shape("spec.versions"))?;
    for version in versions {
        let root = &mut version["schema"]["openAPIV3Schema"];
        let has_status = root["properties"].get("status").is_some();
        clean_formats(root);
        {
            let spec = node(root, "spec").ok_or_else(|| shape("spec"))?;
            strip_nullable(spec);
        }
        if kind == "Network" {
            let ty = node(root, "spec.type").ok_or_else(|| shape("spec.type"))?;
            let variants: Vec<Value> = [NetworkType::L3, NetworkType::L2, NetworkType::External]
                .iter()
                .map(|t| json!(t.as_str()))
                .collect();
            ty["type"] = json!("string");
            ty["enum"] = Value::Array(variants);
            let hl = [
                "spec.ipv4Subnet.hostLocalPrefixLength",
                "spec.ipv6Subnet.hostLocalPrefixLength",
            ];
            for p in hl {
                let n = node(root, p).ok_or_else(|| shape(p))?;
                n["maximum"] = json!(128);
            }
        }
        for (path, bound) in bounds_of(&kind) {
            let n = node(root, &path).ok_or_else(|| shape(&path))?;
            let (key, max) = match bound {
                Bound::Items(m) => ("maxItems", m),
                Bound::Length(m) => ("maxLength", m),
                Bound::Properties(m) => ("maxProperties", m),
            };
            n[key] = json!(max);
        }
        for (path, rules) in rules_of(&kind) {
            let n = node(root, &path).ok_or_else(|| shape(&path))?;
            let list: Vec<Value> = rules.iter().map(rule_json).collect();
            n["x-kubernetes-validations"] = Value::Array(list);
        }
        if kind == "Network" {
            let spec = node(root, "spec").ok_or_else(|| shape("spec"))?;
            let list = spec["x-kubernetes-validations"]
                .as_array_mut()
                .ok_or_else(|| shape("spec rules"))?;
            list.extend(
                NETWORK_TRANSITION_RULES
                    .iter()
                    .map(|(rule, message)| json!({"rule": rule, "message": message})),
            );
        }
        // apiVersion, kind and metadata are the API server's own.
        let mut unbounded = Vec::new();
        for part in ["spec", "status"] {
            if let Some(n) = root["properties"].get(part) {
                unbounded_fields(n, part, &mut unbounded);
            }
        }
        if let Some(first) = unbounded.first() {
            return Err(ShapeError {
                crd: crd.to_owned(),
                what: format!(
                    "{first} has no bound (every string, list and map needs one in bounds_of: \
                     the API server sizes an unbounded one by its largest request and refuses \
                     rules over it{})",
                    if unbounded.len() > 1 {
                        format!("; also {}", unbounded[1..].join(", "))
                    } else {
                        String::new()
                    }
                ),
            });
        }
        if has_status {
            version["subresources"]["status"] = json!({});
        }
    }
    Ok(())
}

/// The paths (as [`node`] writes them) of the strings without `maxLength` or `enum`, the lists
/// without `maxItems` and the maps without `maxProperties` at or below `v`.
fn unbounded_fields(v: &Value, path: &str, out: &mut Vec<String>) {
    let has = |key: &str| v.get(key).is_some();
    match v.get("type").and_then(Value::as_str) {
        Some("string") if !has("maxLength") && !has("enum") => out.push(path.to_owned()),
        Some("array") => {
            if !has("maxItems") {
                out.push(path.to_owned());
            }
            if let Some(items) = v.get("items") {
                unbounded_fields(items, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
    if let Some(values) = v.get("additionalProperties").filter(|a| a.is_object()) {
        if !has("maxProperties") {
            out.push(path.to_owned());
        }
        unbounded_fields(values, &format!("{path}{{}}"), out);
    }
    if let Some(props) = v.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            unbounded_fields(child, &format!("{path}.{name}"), out);
        }
    }
}

fn rule_json(r: &Rule) -> Value {
    let mut v = json!({"rule": r.rule, "message": r.message});
    if let Some(p) = r.field_path {
        v["fieldPath"] = json!(p);
        v["reason"] = json!("FieldValueInvalid");
    }
    v
}

/// Every CRD of the API, post-processed (see the module docs): file name
/// (`<group>_<plural>.yaml`) → the CustomResourceDefinition as JSON.
pub fn definitions() -> Result<BTreeMap<String, Value>, ShapeError> {
    let crds = [
        Network::crd(),
        NetworkBindingPolicy::crd(),
        NetworkRoutingPolicy::crd(),
        NetworkEndpoint::crd(),
        Allocation::crd(),
        Neighbor::crd(),
        FDBEntry::crd(),
        NodeLocator::crd(),
        Claim::crd(),
    ];
    let mut out = BTreeMap::new();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let mut value = serde_json::to_value(&crd).map_err(|e| ShapeError {
            crd: name.clone(),
            what: format!("a JSON form ({e})"),
        })?;
        post_process(&name, &mut value)?;
        out.insert(
            format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural),
            value,
        );
    }
    Ok(out)
}

/// The `openAPIV3Schema` of `kind` (`Network`, `NetworkBindingPolicy`, …) as the CRD carries
/// it, for decoding manifests with every structural error reported
/// ([`super::schema::check`]). `None` for kinds outside the API.
pub fn schema(kind: &str) -> Option<&'static Value> {
    static SCHEMAS: OnceLock<BTreeMap<String, Value>> = OnceLock::new();
    let all = SCHEMAS.get_or_init(|| {
        // The generated shapes are fixed at build time and checked by crdgen's tests; a shape
        // error leaves the kind without a schema, and decoding falls back to serde alone.
        definitions()
            .unwrap_or_default()
            .into_values()
            .filter_map(|crd| {
                let kind = crd["spec"]["names"]["kind"].as_str()?.to_owned();
                let schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
                Some((kind, schema))
            })
            .collect()
    });
    all.get(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unbounded_string_list_and_map_is_named() {
        let spec = json!({"type": "object", "properties": {
            "name": {"type": "string"},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "short": {"type": "string", "maxLength": 3},
            "list": {"type": "array", "items": {"type": "string", "maxLength": 3}},
            "bounded": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}},
            "n": {"type": "integer"}
        }});
        let mut out = Vec::new();
        unbounded_fields(&spec, "spec", &mut out);
        out.sort();
        assert_eq!(
            out,
            ["spec.bounded[]", "spec.labels", "spec.list", "spec.name"]
        );
    }
}
