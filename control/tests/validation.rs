//! Validation of every lace-cni.io resource: each sentence of the seed's "Network fields" and
//! "NetworkBindingPolicy fields", the routing policy API, the resources control writes, and
//! every error message, exactly. Inputs are YAML as a user writes it.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use lace_control::api::validate::{
    allocation_prefixes, dns_label, dns_subdomain, label_key, label_value, network_model,
    node_model, parse_mac, routing_model, routing_support, validate_allocation,
    validate_binding_policy, validate_endpoint, validate_fdb_entry, validate_neighbor,
    validate_network, validate_network_update, validate_node_locator, validate_routing_policy,
    Errors, NotSupported, Unsupported,
};
use lace_control::api::{
    AllocationSpec, Direction, FdbEntrySpec, MatchKind, NeighborSpec, Network,
    NetworkBindingPolicy, NetworkBindingPolicySpec, NetworkEndpointSpec, NetworkRoutingPolicySpec,
    NetworkSpec, NetworkType, NodeLocatorSpec,
};
use lace_shared::types::{MacAddr, NetworkId, NodeId};

fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("test input does not parse: {e}\n{text}"))
}

fn messages<T>(r: Result<T, Errors>) -> Vec<String> {
    match r {
        Ok(_) => Vec::new(),
        Err(e) => {
            assert!(!e.0.is_empty(), "Err(Errors) must never be empty");
            e.messages()
        }
    }
}

/// Runs a table: (what the case covers, spec YAML, the exact messages expected). Every case is
/// also fed to the committed CRD of `kind` ([`crd_agrees`]), so admission and `validate` can
/// never drift apart.
fn table<S: serde::de::DeserializeOwned>(
    kind: &str,
    cases: &[(&str, &str, &[&str])],
    validate: impl Fn(&S) -> Result<(), Errors>,
) {
    for (what, text, want) in cases {
        let spec: S = yaml(text);
        let got = messages(validate(&spec));
        assert_eq!(got, *want, "case: {what}");
        crd_agrees(kind, text, None, &got, what);
    }
}

// ---- the CRDs' admission rules ------------------------------------------------------------

/// The committed `deploy/crds` schema of `kind` (what `kubectl apply` installs).
fn crd_schema(kind: &str) -> serde_json::Value {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    for e in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        let crd: serde_json::Value = serde_yaml::from_str(&text).unwrap();
        if crd["spec"]["names"]["kind"] == kind {
            return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
        }
    }
    panic!("no CRD of kind {kind} in {}", dir.display())
}

/// The object a user would apply: `spec` (YAML) under the kind's apiVersion.
fn object_of(kind: &str, spec_yaml: &str) -> serde_json::Value {
    let spec: serde_json::Value = serde_yaml::from_str(spec_yaml).unwrap();
    serde_json::json!({
        "apiVersion": "lace-cni.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "n"},
        "spec": spec,
    })
}

/// The field a `validate` message is about: "Network n: spec.x[1].y \"v\" is …" → `spec.x[1].y`
/// (map keys written `["k"]` become `.k`, as the API server writes them).
fn field_of(message: &str) -> String {
    let rest = message.split_once(": ").map_or(message, |(_, r)| r);
    let field = rest.split(' ').next().unwrap_or(rest);
    normalize(field)
}

fn normalize(path: &str) -> String {
    path.replace("[\"", ".").replace("\"]", "")
}

/// The CRD's rules (through kube-cel's validator, as the API server evaluates them) give the
/// same verdict as `validate` (its `messages`), and name every field `validate` names: by the
/// error's field path, or by a message that starts with the field. `metadata` fields are the
/// API server's own (every object name is a DNS subdomain), not the CRD's. `old` is the spec of
/// an update (transition rules).
fn crd_agrees(kind: &str, spec_yaml: &str, old: Option<&str>, messages: &[String], what: &str) {
    let schema = crd_schema(kind);
    let object = object_of(kind, spec_yaml);
    let old_object = old.map(|o| object_of(kind, o));
    let errors = match kube_cel::Validator::new().validate(&schema, &object, old_object.as_ref()) {
        Ok(()) => Vec::new(),
        Err(e) => e.into_vec(),
    };
    for e in &errors {
        assert_eq!(
            e.kind,
            kube_cel::ErrorKind::ValidationFailure,
            "case {what}: a rule did not evaluate: {e}"
        );
    }
    let spec_messages: Vec<&String> = messages
        .iter()
        .filter(|m| !field_of(m).starts_with("metadata."))
        .collect();
    assert_eq!(
        errors.is_empty(),
        messages.is_empty(),
        "case {what}: validate says {messages:#?}, the CRD {errors:#?}"
    );
    for m in spec_messages {
        let field = field_of(m);
        let named = errors.iter().any(|e| {
            normalize(&e.field_path) == field || e.message.starts_with(&format!("{field} "))
        });
        assert!(
            named,
            "case {what}: no CRD error names {field} ({m}); the CRD says {errors:#?}"
        );
    }
}

// ---- the seed's examples ---------------------------------------------------------------------

const BACKEND: &str = "
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata:
  name: backend
spec:
  type: l3
  ipv4Subnet:
    prefix: 10.40.0.0/16
    hostLocalPrefixLength: 24
";

const STORAGE: &str = "
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata:
  name: storage
spec:
  type: l2
  ipv4Subnet:
    prefix: 10.50.0.0/24
";

const CORP: &str = "
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata:
  name: corp
spec:
  type: external
  externalPrefixes:
    - 192.0.2.0/24
";

const PER_TEAM: &str = "
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata:
  name: per-team
spec:
  matchKind: [pod]
  rules:
  - celExpression: >-
      object.metadata.namespace.startsWith('team-')
        ? optional.of(object.metadata.namespace.substring(5))
        : optional.none()
  - network: default
";

#[test]
fn seed_networks_parse_validate_and_model() {
    for (id, text, kind) in [
        (1, BACKEND, NetworkType::L3),
        (2, STORAGE, NetworkType::L2),
        (3, CORP, NetworkType::External),
    ] {
        let net: Network = yaml(text);
        let name = net.metadata.name.clone().unwrap();
        assert_eq!(net.spec.type_, kind);
        assert_eq!(validate_network(&name, &net.spec), Ok(()), "{name}");
        let model = network_model(&name, NetworkId(id), &net.spec).unwrap();
        assert_eq!(model.name, name);
        assert_eq!(model.id, NetworkId(id));
        assert_eq!(model.kind, kind);
        assert!(!model.anonymous);
    }
    let backend: Network = yaml(BACKEND);
    let m = network_model("backend", NetworkId(7), &backend.spec).unwrap();
    assert_eq!(m.v4, Some(("10.40.0.0/16".parse().unwrap(), Some(24))));
    assert_eq!(m.v6, None);
    assert!(m.external.is_empty());
    let storage: Network = yaml(STORAGE);
    let m = network_model("storage", NetworkId(8), &storage.spec).unwrap();
    assert_eq!(m.v4, Some(("10.50.0.0/24".parse().unwrap(), None)));
    let corp: Network = yaml(CORP);
    let m = network_model("corp", NetworkId(9), &corp.spec).unwrap();
    assert_eq!(m.v4, None);
    assert_eq!(m.external, vec!["192.0.2.0/24".parse::<IpNet>().unwrap()]);
}

#[test]
fn seed_per_team_policy_parses_and_validates() {
    let p: NetworkBindingPolicy = yaml(PER_TEAM);
    assert_eq!(p.spec.priority, 0, "priority defaults to 0");
    assert_eq!(p.spec.match_kind, Some(vec![MatchKind::Pod]));
    assert_eq!(p.spec.rules.len(), 2);
    assert!(p.spec.rules[0]
        .cel_expression
        .as_deref()
        .unwrap()
        .starts_with("object.metadata.namespace.startsWith('team-')"));
    assert_eq!(p.spec.rules[1].network.as_deref(), Some("default"));
    assert_eq!(validate_binding_policy("per-team", &p.spec), Ok(()));
}

// ---- Network fields ----------------------------------------------------------------------------

fn network(spec: &NetworkSpec) -> Result<(), Errors> {
    validate_network("n", spec)
}

#[test]
fn network_type_is_l3_l2_or_external() {
    for t in ["l3", "l2", "external"] {
        let spec: NetworkSpec = yaml(&format!(
            "{{type: {t}, ipv4Subnet: {{prefix: 10.0.0.0/8}}}}"
        ));
        assert_eq!(serde_json::to_value(spec.type_).unwrap(), t);
    }
    for bad in ["l4", "L3", "External"] {
        let r: Result<NetworkSpec, _> = serde_yaml::from_str(&format!("{{type: {bad}}}"));
        assert!(r.is_err(), "type {bad} must not decode");
    }
}

#[test]
fn network_subnets() {
    table::<NetworkSpec>(
        "Network",
        &[
            (
                "l3: at least one subnet is required",
                "{type: l3}",
                &["Network n: spec sets neither ipv4Subnet nor ipv6Subnet; an l3 network needs at least one, e.g. ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}"],
            ),
            (
                "l2: at least one subnet is required",
                "{type: l2, anonymous: true}",
                &["Network n: spec sets neither ipv4Subnet nor ipv6Subnet; an l2 network needs at least one, e.g. ipv4Subnet: {prefix: 10.50.0.0/24}"],
            ),
            (
                "l3 IPv6 only",
                "{type: l3, ipv6Subnet: {prefix: 'fd00:40::/48', hostLocalPrefixLength: 64}}",
                &[],
            ),
            (
                "l3 dual stack",
                "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}, ipv6Subnet: {prefix: 'fd00:40::/48', hostLocalPrefixLength: 112}}",
                &[],
            ),
            (
                "l2 dual stack",
                "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, ipv6Subnet: {prefix: 'fd00:50::/64'}}",
                &[],
            ),
            (
                "prefix is a CIDR: length out of range",
                "{type: l2, ipv4Subnet: {prefix: 10.40.0.0/33}}",
                &["Network n: spec.ipv4Subnet.prefix \"10.40.0.0/33\" is not a CIDR; use e.g. 10.40.0.0/16"],
            ),
            (
                "prefix is a CIDR: no length",
                "{type: l2, ipv4Subnet: {prefix: 10.40.0.0}}",
                &["Network n: spec.ipv4Subnet.prefix \"10.40.0.0\" is not a CIDR; use e.g. 10.40.0.0/16"],
            ),
            (
                "prefix is a CIDR: IPv6 garbage",
                "{type: l2, ipv6Subnet: {prefix: 'fd00::g/64'}}",
                &["Network n: spec.ipv6Subnet.prefix \"fd00::g/64\" is not a CIDR; use e.g. fd00:40::/48"],
            ),
            (
                "prefix has host bits zero",
                "{type: l2, ipv4Subnet: {prefix: 10.40.0.1/16}}",
                &["Network n: spec.ipv4Subnet.prefix \"10.40.0.1/16\" has host bits set; use 10.40.0.0/16"],
            ),
            (
                "IPv6 prefix has host bits zero",
                "{type: l2, ipv6Subnet: {prefix: 'fd00:40::1/64'}}",
                &["Network n: spec.ipv6Subnet.prefix \"fd00:40::1/64\" has host bits set; use fd00:40::/64"],
            ),
            (
                "ipv4Subnet holds IPv4",
                "{type: l2, ipv4Subnet: {prefix: 'fd00::/64'}}",
                &["Network n: spec.ipv4Subnet.prefix \"fd00::/64\" is not an IPv4 prefix; IPv6 subnets go in spec.ipv6Subnet"],
            ),
            (
                "ipv6Subnet holds IPv6",
                "{type: l2, ipv6Subnet: {prefix: 10.50.0.0/24}}",
                &["Network n: spec.ipv6Subnet.prefix \"10.50.0.0/24\" is not an IPv6 prefix; IPv4 subnets go in spec.ipv4Subnet"],
            ),
            (
                "a subnet leaves room for the gateway and one endpoint: /31 is enough",
                "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/31}, ipv6Subnet: {prefix: 'fd00::/127'}}",
                &[],
            ),
            (
                "a /32 subnet holds only the gateway",
                "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/32}}",
                &["Network n: spec.ipv4Subnet.prefix \"10.50.0.0/32\" leaves no address after the gateway; use a prefix length of at most 31"],
            ),
            (
                "a /128 subnet holds only the gateway (l3: no block range either)",
                "{type: l3, ipv6Subnet: {prefix: 'fd00::/128', hostLocalPrefixLength: 128}}",
                &["Network n: spec.ipv6Subnet.prefix \"fd00::/128\" leaves no address after the gateway; use a prefix length of at most 127"],
            ),
        ],
        network,
    );
}

#[test]
fn network_host_local_prefix_length() {
    table::<NetworkSpec>(
        "Network",
        &[
            (
                "l3 only: l2 must not set it",
                "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24, hostLocalPrefixLength: 26}}",
                &["Network n: spec.ipv4Subnet.hostLocalPrefixLength is set on an l2 network, but only l3 networks cut their subnet into per-node blocks; remove it"],
            ),
            (
                "l3 only: l2 IPv6 must not set it",
                "{type: l2, ipv6Subnet: {prefix: 'fd00::/64', hostLocalPrefixLength: 80}}",
                &["Network n: spec.ipv6Subnet.hostLocalPrefixLength is set on an l2 network, but only l3 networks cut their subnet into per-node blocks; remove it"],
            ),
            (
                "required for l3 (IPv4)",
                "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/16}}",
                &["Network n: spec.ipv4Subnet.hostLocalPrefixLength is required on an l3 network (the length of each node's block); set it, e.g. to 24"],
            ),
            (
                "required for l3: the example fits a small subnet",
                "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/28}}",
                &["Network n: spec.ipv4Subnet.hostLocalPrefixLength is required on an l3 network (the length of each node's block); set it, e.g. to 28"],
            ),
            (
                "required for l3 (IPv6)",
                "{type: l3, ipv6Subnet: {prefix: 'fd00:40::/48'}}",
                &["Network n: spec.ipv6Subnet.hostLocalPrefixLength is required on an l3 network (the length of each node's block); set it, e.g. to 112"],
            ),
            (
                "equal to the prefix length: one block, one node",
                "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/24, hostLocalPrefixLength: 24}}",
                &[],
            ),
            (
                "width - 1: gateway and one pod",
                "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/24, hostLocalPrefixLength: 31}, ipv6Subnet: {prefix: 'fd00::/64', hostLocalPrefixLength: 127}}",
                &[],
            ),
            (
                "shorter than the prefix",
                "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 8}}",
                &["Network n: spec.ipv4Subnet.hostLocalPrefixLength 8 is outside 16..=31; a block is at least the subnet's prefix length and must hold the gateway and one pod, so use a length from 16 to 31"],
            ),
            (
                "the address width: a /32 block holds only the gateway",
                "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 32}}",
                &["Network n: spec.ipv4Subnet.hostLocalPrefixLength 32 is outside 16..=31; a block is at least the subnet's prefix length and must hold the gateway and one pod, so use a length from 16 to 31"],
            ),
            (
                "IPv6 beyond the width",
                "{type: l3, ipv6Subnet: {prefix: 'fd00::/64', hostLocalPrefixLength: 129}}",
                &["Network n: spec.ipv6Subnet.hostLocalPrefixLength 129 is outside 64..=127; a block is at least the subnet's prefix length and must hold the gateway and one pod, so use a length from 64 to 127"],
            ),
            (
                "IPv6 the address width",
                "{type: l3, ipv6Subnet: {prefix: 'fd00::/64', hostLocalPrefixLength: 128}}",
                &["Network n: spec.ipv6Subnet.hostLocalPrefixLength 128 is outside 64..=127; a block is at least the subnet's prefix length and must hold the gateway and one pod, so use a length from 64 to 127"],
            ),
            (
                "a bad prefix reports only the prefix, not the range",
                "{type: l3, ipv4Subnet: {prefix: nonsense, hostLocalPrefixLength: 24}}",
                &["Network n: spec.ipv4Subnet.prefix \"nonsense\" is not a CIDR; use e.g. 10.40.0.0/16"],
            ),
        ],
        network,
    );
}

#[test]
fn network_external_prefixes() {
    table::<NetworkSpec>(
        "Network",
        &[
            (
                "external: several prefixes, both families",
                "{type: external, externalPrefixes: [192.0.2.0/24, '2001:db8::/32', 0.0.0.0/0]}",
                &[],
            ),
            (
                "external: at least one required",
                "{type: external}",
                &["Network n: spec.externalPrefixes is empty; an external network needs at least one CIDR, e.g. 192.0.2.0/24"],
            ),
            (
                "external: each a CIDR",
                "{type: external, externalPrefixes: [192.0.2.0/24, 192.0.2.0, 198.51.100.7/24]}",
                &[
                    "Network n: spec.externalPrefixes[1] \"192.0.2.0\" is not a CIDR; use e.g. 192.0.2.0/24",
                    "Network n: spec.externalPrefixes[2] \"198.51.100.7/24\" has host bits set; use 198.51.100.0/24",
                ],
            ),
            (
                "external: no duplicates",
                "{type: external, externalPrefixes: [192.0.2.0/24, 192.0.2.0/24]}",
                &["Network n: spec.externalPrefixes lists \"192.0.2.0/24\" more than once; list each once"],
            ),
            (
                "external only: not on l3",
                "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}, externalPrefixes: [192.0.2.0/24]}",
                &["Network n: spec.externalPrefixes is set on an l3 network; only external networks have it, so remove it or use type external"],
            ),
            (
                "external only: not on l2",
                "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, externalPrefixes: [192.0.2.0/24]}",
                &["Network n: spec.externalPrefixes is set on an l2 network; only external networks have it, so remove it or use type external"],
            ),
            (
                "external: no subnet, no IPAM",
                "{type: external, externalPrefixes: [192.0.2.0/24], ipv4Subnet: {prefix: 10.0.0.0/8}, ipv6Subnet: {prefix: 'fd00::/64'}}",
                &[
                    "Network n: spec.ipv4Subnet is set on an external network; external networks have no subnet and no IPAM, so remove it and list the CIDRs in spec.externalPrefixes",
                    "Network n: spec.ipv6Subnet is set on an external network; external networks have no subnet and no IPAM, so remove it and list the CIDRs in spec.externalPrefixes",
                ],
            ),
        ],
        network,
    );
}

#[test]
fn network_anonymous_is_accepted_on_every_type() {
    for text in [
        "{type: l3, anonymous: true, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}}",
        "{type: l2, anonymous: true, ipv4Subnet: {prefix: 10.50.0.0/24}}",
        "{type: external, anonymous: true, externalPrefixes: [192.0.2.0/24]}",
    ] {
        let spec: NetworkSpec = yaml(text);
        assert!(spec.anonymous);
        assert_eq!(network(&spec), Ok(()), "{text}");
        assert!(network_model("n", NetworkId(1), &spec).unwrap().anonymous);
    }
}

#[test]
fn network_l2_learning_and_bum_limit() {
    table::<NetworkSpec>(
        "Network",
        &[
            (
                "learning and a BUM limit on an l2 network",
                "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, l2: {learning: {enabled: true, agingSeconds: 600}, bumLimit: {packetsPerSecond: 0, burst: 1}}}",
                &[],
            ),
            (
                "the bounds themselves",
                "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, l2: {learning: {enabled: true, agingSeconds: 30}, bumLimit: {packetsPerSecond: 10000000, burst: 1000000}}}",
                &[],
            ),
            (
                "an empty block, learning off with an aging time",
                "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, l2: {learning: {agingSeconds: 86400}}}",
                &[],
            ),
            (
                "l2 only: not on l3",
                "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}, l2: {learning: {enabled: true}}}",
                &["Network n: spec.l2 is set on an l3 network; only l2 networks have it, so remove it or use type l2"],
            ),
            (
                "l2 only: not on external",
                "{type: external, externalPrefixes: [192.0.2.0/24], l2: {}}",
                &["Network n: spec.l2 is set on an external network; only l2 networks have it, so remove it or use type l2"],
            ),
            (
                "ranges",
                "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, l2: {learning: {enabled: true, agingSeconds: 29}, bumLimit: {packetsPerSecond: 10000001, burst: 0}}}",
                &[
                    "Network n: spec.l2.learning.agingSeconds 29 is outside 30..=86400; use seconds from 30 (a learned MAC is refreshed every quarter of it) to 86400 (a day), e.g. 300",
                    "Network n: spec.l2.bumLimit.packetsPerSecond 10000001 is outside 0..=10000000; use frames per second from 0 (unlimited) to 10000000, e.g. 1000",
                    "Network n: spec.l2.bumLimit.burst 0 is outside 1..=1000000; use a number of frames from 1 to 1000000, e.g. 200",
                ],
            ),
            (
                "a day at most",
                "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, l2: {learning: {enabled: true, agingSeconds: 86401}}}",
                &["Network n: spec.l2.learning.agingSeconds 86401 is outside 30..=86400; use seconds from 30 (a learned MAC is refreshed every quarter of it) to 86400 (a day), e.g. 300"],
            ),
        ],
        network,
    );
    // The model carries the settings with the defaults applied.
    let model = |text: &str| network_model("n", NetworkId(1), &yaml(text)).unwrap().l2;
    let plain = model("{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}}");
    assert_eq!(
        (plain.learning, plain.bum_pps, plain.bum_burst),
        (None, 1000, 200),
        "learning off, 1000 frames/s in bursts of 200"
    );
    let on =
        model("{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, l2: {learning: {enabled: true}}}");
    assert_eq!(
        on.learning.map(|a| a.get()),
        Some(300),
        "aging 300 s by default"
    );
    let set = model(
        "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, l2: {learning: {enabled: true, agingSeconds: 60}, bumLimit: {packetsPerSecond: 0, burst: 9}}}",
    );
    assert_eq!(
        (set.learning.map(|a| a.get()), set.bum_pps, set.bum_burst),
        (Some(60), 0, 9)
    );
    let off = model(
        "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, l2: {learning: {enabled: false, agingSeconds: 60}}}",
    );
    assert_eq!(
        off.learning, None,
        "an aging time alone does not turn learning on"
    );
    // spec.l2 is mutable: changing it is no update error.
    let old: NetworkSpec = yaml("{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}}");
    let new: NetworkSpec =
        yaml("{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, l2: {learning: {enabled: true}}}");
    assert_eq!(validate_network_update("n", &old, &new), Ok(()));
}

#[test]
fn network_uplinks() {
    table::<NetworkSpec>(
        "Network",
        &[
            (
                "a full uplink configuration",
                "
type: external
externalPrefixes: [192.0.2.0/24, '2001:db8::/32']
uplinks:
- nodeSelector: {matchLabels: {rack: r1}}
  interface: eth1
  vlan: 100
  staticRoutes:
  - {destination: 0.0.0.0/0, nextHop: 192.0.2.1}
  - {destination: '::/0', nextHop: '2001:db8::1'}
- interface: bond0.200
  vlan: 4094
- vlan: 1
",
                &[],
            ),
            (
                "external only: not on l3",
                "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}, uplinks: [{interface: eth1}]}",
                &["Network n: spec.uplinks is set on an l3 network; only external networks have it, so remove it or use type external"],
            ),
            (
                "external only: not on l2",
                "{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}, uplinks: [{vlan: 5}]}",
                &["Network n: spec.uplinks is set on an l2 network; only external networks have it, so remove it or use type external"],
            ),
            (
                "interface names are 1-15 characters without '/', ':' or whitespace",
                "{type: external, externalPrefixes: [192.0.2.0/24], uplinks: [{interface: ''}, {interface: abcdefghijklmnop}, {interface: 'eth 1'}, {interface: 'a/b'}, {interface: abcdefghijklmno}]}",
                &[
                    "Network n: spec.uplinks[0].interface \"\" is not a Linux interface name; use 1-15 characters without '/', ':' or whitespace, e.g. eth1",
                    "Network n: spec.uplinks[1].interface \"abcdefghijklmnop\" is not a Linux interface name; use 1-15 characters without '/', ':' or whitespace, e.g. eth1",
                    "Network n: spec.uplinks[2].interface \"eth 1\" is not a Linux interface name; use 1-15 characters without '/', ':' or whitespace, e.g. eth1",
                    "Network n: spec.uplinks[3].interface \"a/b\" is not a Linux interface name; use 1-15 characters without '/', ':' or whitespace, e.g. eth1",
                ],
            ),
            (
                "VLAN ids are 1-4094",
                "{type: external, externalPrefixes: [192.0.2.0/24], uplinks: [{vlan: 0}, {vlan: 4095}]}",
                &[
                    "Network n: spec.uplinks[0].vlan 0 is outside 1..=4094; use a VLAN id from 1 to 4094, or omit it for untagged traffic",
                    "Network n: spec.uplinks[1].vlan 4095 is outside 1..=4094; use a VLAN id from 1 to 4094, or omit it for untagged traffic",
                ],
            ),
            (
                "static routes: destination CIDR, next-hop address, same family",
                "
type: external
externalPrefixes: [192.0.2.0/24]
uplinks:
- staticRoutes:
  - {destination: default, nextHop: 192.0.2.1}
  - {destination: 10.0.0.1/8, nextHop: 192.0.2.1}
  - {destination: 10.0.0.0/8, nextHop: 192.0.2.1/32}
  - {destination: 10.0.0.0/8, nextHop: '2001:db8::1'}
  - {destination: '::/0', nextHop: 192.0.2.1}
",
                &[
                    "Network n: spec.uplinks[0].staticRoutes[0].destination \"default\" is not a CIDR; use e.g. 0.0.0.0/0",
                    "Network n: spec.uplinks[0].staticRoutes[1].destination \"10.0.0.1/8\" has host bits set; use 10.0.0.0/8",
                    "Network n: spec.uplinks[0].staticRoutes[2].nextHop \"192.0.2.1/32\" is not an IP address; use e.g. 192.0.2.1",
                    "Network n: spec.uplinks[0].staticRoutes[3].nextHop \"2001:db8::1\" is not of the same address family as spec.uplinks[0].staticRoutes[3].destination \"10.0.0.0/8\"; use a next hop of that family",
                    "Network n: spec.uplinks[0].staticRoutes[4].nextHop \"192.0.2.1\" is not of the same address family as spec.uplinks[0].staticRoutes[4].destination \"::/0\"; use a next hop of that family",
                ],
            ),
            (
                "node selectors are label selectors",
                "{type: external, externalPrefixes: [192.0.2.0/24], uplinks: [{nodeSelector: {matchExpressions: [{key: rack, operator: In}]}}]}",
                &["Network n: spec.uplinks[0].nodeSelector.matchExpressions[0].values is empty; operator In needs at least one value"],
            ),
        ],
        network,
    );
}

/// The model carries each uplink entry parsed: the node selector compiled, the static routes
/// as prefixes and addresses, in order.
#[test]
fn network_uplinks_are_parsed_into_the_model() {
    let spec: NetworkSpec = yaml(
        "
type: external
externalPrefixes: [192.0.2.0/24]
uplinks:
- nodeSelector: {matchLabels: {rack: r1}, matchExpressions: [{key: zone, operator: NotIn, values: [b]}]}
  interface: eth1
  staticRoutes:
  - {destination: 0.0.0.0/0, nextHop: 192.0.2.1}
  - {destination: '2001:db8:1::/48', nextHop: '2001:db8::1'}
- vlan: 7
",
    );
    let m = network_model("ext", NetworkId(9), &spec).unwrap();
    assert_eq!(m.uplinks.len(), 2);
    let (a, b) = (&m.uplinks[0], &m.uplinks[1]);
    assert_eq!(a.interface.as_deref(), Some("eth1"));
    assert_eq!(
        a.static_routes,
        [
            ("0.0.0.0/0".parse().unwrap(), "192.0.2.1".parse().unwrap()),
            (
                "2001:db8:1::/48".parse().unwrap(),
                "2001:db8::1".parse().unwrap()
            ),
        ]
    );
    let labels = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    };
    assert!(a.selects(&labels(&[("rack", "r1")])));
    assert!(a.selects(&labels(&[("rack", "r1"), ("zone", "a")])));
    assert!(!a.selects(&labels(&[("rack", "r1"), ("zone", "b")])));
    assert!(!a.selects(&labels(&[("rack", "r2")])));
    // No selector: every node.
    assert!(b.selects(&labels(&[])));
    assert_eq!((b.vlan, b.interface.as_deref()), (Some(7), None));
    assert!(b.static_routes.is_empty());
}

#[test]
fn network_name_is_a_dns_subdomain() {
    let spec: NetworkSpec = yaml("{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}}");
    for good in ["backend", "team-1.backend", "0", &"a".repeat(253)] {
        assert_eq!(validate_network(good, &spec), Ok(()), "{good}");
    }
    let long = "a".repeat(254);
    for (bad, reason) in [
        ("", "it is empty"),
        (long.as_str(), "it is longer than 253 characters"),
        (
            "Backend",
            "it has a character other than a-z, 0-9, '-' and '.'",
        ),
        (
            "back_end",
            "it has a character other than a-z, 0-9, '-' and '.'",
        ),
        (
            "-backend",
            "a dot-separated part does not start and end with a letter or digit",
        ),
        (
            "backend-",
            "a dot-separated part does not start and end with a letter or digit",
        ),
        (
            "a..b",
            "a dot-separated part does not start and end with a letter or digit",
        ),
        (
            "a.-b",
            "a dot-separated part does not start and end with a letter or digit",
        ),
    ] {
        assert_eq!(
            messages(validate_network(bad, &spec)),
            [format!(
                "Network {bad}: metadata.name {bad:?} is not a DNS-1123 subdomain ({reason}); use \
                 lowercase letters, digits, '-' and '.', starting and ending with a letter or \
                 digit, at most 253 characters"
            )],
        );
    }
}

#[test]
fn network_reports_every_error_not_only_the_first() {
    let spec: NetworkSpec = yaml(
        "{type: l3, ipv4Subnet: {prefix: 10.40.0.1/16}, ipv6Subnet: {prefix: 'fd00::/64', hostLocalPrefixLength: 50}, externalPrefixes: [x], uplinks: [{vlan: 0}]}",
    );
    assert_eq!(
        messages(validate_network("Bad", &spec)),
        [
            "Network Bad: metadata.name \"Bad\" is not a DNS-1123 subdomain (it has a character other than a-z, 0-9, '-' and '.'); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
            "Network Bad: spec.ipv4Subnet.prefix \"10.40.0.1/16\" has host bits set; use 10.40.0.0/16",
            "Network Bad: spec.ipv4Subnet.hostLocalPrefixLength is required on an l3 network (the length of each node's block); set it, e.g. to 24",
            "Network Bad: spec.ipv6Subnet.hostLocalPrefixLength 50 is outside 64..=127; a block is at least the subnet's prefix length and must hold the gateway and one pod, so use a length from 64 to 127",
            "Network Bad: spec.externalPrefixes is set on an l3 network; only external networks have it, so remove it or use type external",
            "Network Bad: spec.uplinks is set on an l3 network; only external networks have it, so remove it or use type external",
        ]
    );
    let text = "{type: l3, ipv4Subnet: {prefix: 10.40.0.1/16}, ipv6Subnet: {prefix: 'fd00::/64', hostLocalPrefixLength: 50}, externalPrefixes: [x], uplinks: [{vlan: 0}]}";
    crd_agrees(
        "Network",
        text,
        None,
        &messages(validate_network("Bad", &spec)),
        "every error",
    );
    // The errors display one per line.
    let e = validate_network("Bad", &spec).unwrap_err();
    assert_eq!(e.to_string().lines().count(), 6);
    // The model refuses the same spec with the same errors.
    assert_eq!(network_model("Bad", NetworkId(1), &spec), Err(e));
}

#[test]
fn network_model_needs_a_nonzero_id_and_parses_both_families() {
    let spec: NetworkSpec = yaml(
        "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}, ipv6Subnet: {prefix: 'fd00:40::/48', hostLocalPrefixLength: 112}}",
    );
    assert_eq!(
        messages(network_model("backend", NetworkId(0), &spec)),
        ["Network backend: status.id is 0; data-plane ids start at 1"]
    );
    let m = network_model("backend", NetworkId(3), &spec).unwrap();
    assert_eq!(m.v4.unwrap().0.addr(), Ipv4Addr::new(10, 40, 0, 0));
    assert_eq!(m.v4.unwrap().1, Some(24));
    assert_eq!(m.v6.unwrap().0, "fd00:40::/48".parse().unwrap());
    assert_eq!(m.v6.unwrap().1, Some(112));
}

#[test]
fn network_type_and_subnets_are_immutable() {
    let base: NetworkSpec =
        yaml("{type: l3, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}}");
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "unchanged, other fields changed",
            "{type: l3, anonymous: true, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}}",
            &[],
        ),
        (
            "type changed",
            "{type: l2, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}}",
            &["Network backend: spec.type is immutable (was l3, now l2); delete and recreate the Network to change it"],
        ),
        (
            "prefix changed",
            "{type: l3, ipv4Subnet: {prefix: 10.41.0.0/16, hostLocalPrefixLength: 24}}",
            &["Network backend: spec.ipv4Subnet is immutable (was \"10.40.0.0/16\" with hostLocalPrefixLength 24, now \"10.41.0.0/16\" with hostLocalPrefixLength 24); delete and recreate the Network to change it"],
        ),
        (
            "block length changed",
            "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 26}}",
            &["Network backend: spec.ipv4Subnet is immutable (was \"10.40.0.0/16\" with hostLocalPrefixLength 24, now \"10.40.0.0/16\" with hostLocalPrefixLength 26); delete and recreate the Network to change it"],
        ),
        (
            "subnet removed, another added",
            "{type: l3, ipv6Subnet: {prefix: 'fd00::/64', hostLocalPrefixLength: 112}}",
            &[
                "Network backend: spec.ipv4Subnet is immutable (was \"10.40.0.0/16\" with hostLocalPrefixLength 24, now absent); delete and recreate the Network to change it",
                "Network backend: spec.ipv6Subnet is immutable (was absent, now \"fd00::/64\" with hostLocalPrefixLength 112); delete and recreate the Network to change it",
            ],
        ),
    ];
    let base_text = "{type: l3, ipv4Subnet: {prefix: 10.40.0.0/16, hostLocalPrefixLength: 24}}";
    for (what, text, want) in cases {
        let new: NetworkSpec = yaml(text);
        let got = messages(validate_network_update("backend", &base, &new));
        assert_eq!(got, *want, "case: {what}");
        // The update as the API server sees it: the transition rules and the new spec's own.
        let mut all = got.clone();
        all.extend(messages(validate_network("backend", &new)));
        crd_agrees("Network", text, Some(base_text), &all, what);
    }
    let l2: NetworkSpec = yaml("{type: l2, ipv4Subnet: {prefix: 10.50.0.0/24}}");
    let l2_other: NetworkSpec = yaml("{type: l2, ipv4Subnet: {prefix: 10.50.1.0/24}}");
    assert_eq!(
        messages(validate_network_update("storage", &l2, &l2_other)),
        ["Network storage: spec.ipv4Subnet is immutable (was \"10.50.0.0/24\", now \"10.50.1.0/24\"); delete and recreate the Network to change it"]
    );
    let corp: NetworkSpec = yaml(CORP_SPEC);
    let corp_more: NetworkSpec =
        yaml("{type: external, externalPrefixes: [192.0.2.0/24, 198.51.100.0/24]}");
    assert_eq!(
        validate_network_update("corp", &corp, &corp_more),
        Ok(()),
        "externalPrefixes may change"
    );
}

const CORP_SPEC: &str = "{type: external, externalPrefixes: [192.0.2.0/24]}";

// ---- NetworkBindingPolicy fields -------------------------------------------------------------

fn binding(spec: &NetworkBindingPolicySpec) -> Result<(), Errors> {
    validate_binding_policy("p", spec)
}

#[test]
fn binding_priority_and_match_kind() {
    let spec: NetworkBindingPolicySpec = yaml("{rules: [{network: a}]}");
    assert_eq!(spec.priority, 0);
    assert_eq!(spec.match_kind, None, "omitted matches every kind");
    let spec: NetworkBindingPolicySpec =
        yaml("{priority: -5, matchKind: [pod, service, networkpolicy], rules: [{network: a}]}");
    assert_eq!(spec.priority, -5);
    assert_eq!(binding(&spec), Ok(()));
    let r: Result<NetworkBindingPolicySpec, _> =
        serde_yaml::from_str("{matchKind: [deployment], rules: [{network: a}]}");
    assert!(r.is_err(), "an unknown kind does not decode");
    table::<NetworkBindingPolicySpec>(
        "NetworkBindingPolicy",
        &[
            (
                "matchKind entries are unique",
                "{matchKind: [pod, service, pod, service], rules: [{network: a}]}",
                &[
                    "NetworkBindingPolicy p: spec.matchKind lists \"pod\" more than once; list each once",
                    "NetworkBindingPolicy p: spec.matchKind lists \"service\" more than once; list each once",
                ],
            ),
            (
                "an empty matchKind would match nothing",
                "{matchKind: [], rules: [{network: a}]}",
                &["NetworkBindingPolicy p: spec.matchKind is empty; omit it to match every kind, or list pod, service and/or networkpolicy"],
            ),
        ],
        binding,
    );
}

#[test]
fn binding_rules() {
    table::<NetworkBindingPolicySpec>(
        "NetworkBindingPolicy",
        &[
            (
                "at least one rule",
                "{rules: []}",
                &["NetworkBindingPolicy p: spec.rules is empty; add at least one rule, e.g. - network: default"],
            ),
            (
                "allow (default) with a static network",
                "{rules: [{network: blue}, {network: red, policy: allow}]}",
                &[],
            ),
            (
                "allow with a CEL expression, which is not compiled here",
                "{rules: [{celExpression: 'optional.of(\"blue\")'}, {celExpression: '((( not CEL'}]}",
                &[],
            ),
            (
                "allow: exactly one of network or celExpression, not neither",
                "{rules: [{network: a}, {selector: {name: x}}]}",
                &["NetworkBindingPolicy p: spec.rules[1] sets neither network nor celExpression; an allow rule sets exactly one of them"],
            ),
            (
                "allow: exactly one of network or celExpression, not both",
                "{rules: [{network: a, celExpression: 'optional.none()', policy: allow}]}",
                &["NetworkBindingPolicy p: spec.rules[0] sets both network and celExpression; an allow rule sets exactly one of them, so remove one"],
            ),
            (
                "network names a Network",
                "{rules: [{network: Blue}, {network: ''}]}",
                &[
                    "NetworkBindingPolicy p: spec.rules[0].network \"Blue\" is not a DNS-1123 subdomain (it has a character other than a-z, 0-9, '-' and '.'); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
                    "NetworkBindingPolicy p: spec.rules[1].network \"\" is not a DNS-1123 subdomain (it is empty); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
                ],
            ),
            (
                "an empty celExpression",
                "{rules: [{celExpression: ''}]}",
                &["NetworkBindingPolicy p: spec.rules[0].celExpression is empty; write an expression that evaluates to an optional string, e.g. optional.of('default')"],
            ),
            (
                "deny shields a named network, selecting by name",
                "{rules: [{policy: deny, network: secure, selector: {name: web}}, {policy: deny, network: secure}]}",
                &[],
            ),
            (
                "deny names a network",
                "{rules: [{policy: deny, selector: {name: web}}]}",
                &["NetworkBindingPolicy p: spec.rules[0].network is missing; a deny rule names the network it shields"],
            ),
            (
                "deny has no celExpression",
                "{rules: [{policy: deny, network: secure, celExpression: 'optional.none()'}]}",
                &["NetworkBindingPolicy p: spec.rules[0].celExpression is set on a deny rule; a deny rule shields the network named in network, so remove celExpression"],
            ),
            (
                "deny with only a celExpression: both errors",
                "{rules: [{policy: deny, celExpression: 'optional.of(\"x\")'}]}",
                &[
                    "NetworkBindingPolicy p: spec.rules[0].network is missing; a deny rule names the network it shields",
                    "NetworkBindingPolicy p: spec.rules[0].celExpression is set on a deny rule; a deny rule shields the network named in network, so remove celExpression",
                ],
            ),
            (
                "deny selects by name only",
                "{rules: [{policy: deny, network: secure, selector: {name: web, matchLabels: {app: web}, matchExpressions: [{key: tier, operator: Exists}], namespaceSelector: {matchLabels: {team: a}}}}]}",
                &[
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchLabels is set on a deny rule; deny rules select by name only, so remove it and use selector.name",
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchExpressions is set on a deny rule; deny rules select by name only, so remove it and use selector.name",
                    "NetworkBindingPolicy p: spec.rules[0].selector.namespaceSelector is set on a deny rule; deny rules select by name only, so remove it and use selector.name",
                ],
            ),
        ],
        binding,
    );
}

#[test]
fn binding_selectors() {
    table::<NetworkBindingPolicySpec>(
        "NetworkBindingPolicy",
        &[
            (
                "name, labels, expressions and a nested namespaceSelector",
                "
rules:
- network: a
  selector:
    name: web-0
    matchLabels: {app.kubernetes.io/name: web, tier: ''}
    matchExpressions:
    - {key: env, operator: In, values: [prod, Staging_2]}
    - {key: env, operator: NotIn, values: [dev]}
    - {key: example.com/canary, operator: Exists}
    - {key: legacy, operator: DoesNotExist}
    namespaceSelector:
      matchLabels: {team: blue}
      matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [team-blue]}]
",
                &[],
            ),
            (
                "operators: In and NotIn need values, Exists and DoesNotExist take none, others are unknown",
                "
rules:
- network: a
  selector:
    matchExpressions:
    - {key: a, operator: In}
    - {key: a, operator: NotIn}
    - {key: a, operator: Exists, values: [x]}
    - {key: a, operator: DoesNotExist, values: [x]}
    - {key: a, operator: Equals, values: [x]}
    - {key: a, operator: in, values: [x]}
",
                &[
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchExpressions[0].values is empty; operator In needs at least one value",
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchExpressions[1].values is empty; operator NotIn needs at least one value",
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchExpressions[2].values is set; operator Exists takes no values, so remove them",
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchExpressions[3].values is set; operator DoesNotExist takes no values, so remove them",
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchExpressions[4].operator \"Equals\" is not a label selector operator; use In, NotIn, Exists or DoesNotExist",
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchExpressions[5].operator \"in\" is not a label selector operator; use In, NotIn, Exists or DoesNotExist",
                ],
            ),
            (
                "label keys and values are syntactically valid",
                "
rules:
- network: a
  selector:
    matchLabels: {'-app': x, 'app': '-x'}
    matchExpressions:
    - {key: 'Example.com/x', operator: Exists}
    - {key: 'example.com/', operator: Exists}
    - {key: 'a b', operator: In, values: ['ok', 'not ok']}
",
                &[
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchLabels \"-app\" is not a valid label key (its name does not start and end with a letter or digit); use [prefix/]name: an optional DNS-1123 subdomain prefix and a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchLabels[\"app\"] \"-x\" is not a valid label value (it does not start and end with a letter or digit); use at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or an empty value",
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchExpressions[0].key \"Example.com/x\" is not a valid label key (its prefix is not a DNS-1123 subdomain); use [prefix/]name: an optional DNS-1123 subdomain prefix and a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchExpressions[1].key \"example.com/\" is not a valid label key (its name is empty); use [prefix/]name: an optional DNS-1123 subdomain prefix and a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchExpressions[2].key \"a b\" is not a valid label key (its name has a character other than letters, digits, '-', '_' and '.'); use [prefix/]name: an optional DNS-1123 subdomain prefix and a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                    "NetworkBindingPolicy p: spec.rules[0].selector.matchExpressions[2].values[1] \"not ok\" is not a valid label value (it has a character other than letters, digits, '-', '_' and '.'); use at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or an empty value",
                ],
            ),
            (
                "the namespaceSelector is checked too, and selector.name is an object name",
                "{rules: [{network: a, selector: {name: 'Web', namespaceSelector: {matchExpressions: [{key: team, operator: Exists, values: [a]}]}}}]}",
                &[
                    "NetworkBindingPolicy p: spec.rules[0].selector.name \"Web\" is not a DNS-1123 subdomain (it has a character other than a-z, 0-9, '-' and '.'); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
                    "NetworkBindingPolicy p: spec.rules[0].selector.namespaceSelector.matchExpressions[0].values is set; operator Exists takes no values, so remove them",
                ],
            ),
        ],
        binding,
    );
}

#[test]
fn label_syntax() {
    assert_eq!(
        label_key(&format!("{}/{}", "a".repeat(253), "b".repeat(63))),
        Ok(())
    );
    assert_eq!(
        label_key(&"b".repeat(64)),
        Err("its name is longer than 63 characters")
    );
    assert_eq!(label_key(""), Err("its name is empty"));
    assert_eq!(
        label_key("a/b/c"),
        Err("its name has a character other than letters, digits, '-', '_' and '.'")
    );
    assert_eq!(label_value(""), Ok(()));
    assert_eq!(label_value("A-b_c.9"), Ok(()));
    assert_eq!(
        label_value(&"v".repeat(64)),
        Err("it is longer than 63 characters")
    );
    assert_eq!(
        label_value("x."),
        Err("it does not start and end with a letter or digit")
    );
    assert_eq!(dns_label("team-blue"), Ok(()));
    assert_eq!(
        dns_label("team.blue"),
        Err("it has a character other than a-z, 0-9 and '-'")
    );
    assert_eq!(
        dns_label(&"a".repeat(64)),
        Err("it is longer than 63 characters")
    );
    assert_eq!(
        dns_label("a-"),
        Err("it does not start and end with a letter or digit")
    );
    assert_eq!(dns_label(""), Err("it is empty"));
    assert_eq!(dns_subdomain("a.b-c.d"), Ok(()));
}

// ---- NetworkRoutingPolicy -------------------------------------------------------------------

fn routing(spec: &NetworkRoutingPolicySpec) -> Result<(), Errors> {
    validate_routing_policy("r", spec)
}

const ROUTING_FULL: &str = "
apiVersion: lace-cni.io/v1alpha1
kind: NetworkRoutingPolicy
metadata:
  name: frontend-to-backend
spec:
  priority: 10
  sources: [frontend, batch]
  destination:
    network: backend
    prefixes: [10.40.8.0/24, 'fd00:40:0:8::/64']
";

#[test]
fn routing_policy_parses_validates_and_models() {
    let p: lace_control::api::NetworkRoutingPolicy = yaml(ROUTING_FULL);
    assert_eq!(
        p.spec.direction,
        Direction::Bidirectional,
        "bidirectional is the default"
    );
    assert_eq!(p.spec.next_hop, None);
    assert_eq!(
        validate_routing_policy("frontend-to-backend", &p.spec),
        Ok(())
    );
    let m = routing_model("frontend-to-backend", &p.spec).unwrap();
    assert_eq!(m.name, "frontend-to-backend");
    assert_eq!(m.priority, 10);
    assert_eq!(m.sources, ["frontend", "batch"]);
    assert_eq!(m.destination, "backend");
    assert_eq!(
        m.prefixes,
        [
            "10.40.8.0/24".parse::<IpNet>().unwrap(),
            "fd00:40:0:8::/64".parse().unwrap()
        ]
    );
    assert_eq!(m.direction, Direction::Bidirectional);
    let kinds = |n: &str| match n {
        "frontend" | "batch" | "backend" => Some(NetworkType::L3),
        _ => None,
    };
    assert_eq!(
        routing_support("frontend-to-backend", &p.spec, kinds),
        Ok(())
    );
    // A whole network, to itself (an anonymous network opening its own self-route).
    let own: NetworkRoutingPolicySpec = yaml("{sources: [vault], destination: {network: vault}}");
    assert_eq!(routing(&own), Ok(()));
    assert!(routing_model("own", &own).unwrap().prefixes.is_empty());
}

#[test]
fn routing_policy_errors() {
    table::<NetworkRoutingPolicySpec>(
        "NetworkRoutingPolicy",
        &[
            (
                "at least one source",
                "{sources: [], destination: {network: b}}",
                &["NetworkRoutingPolicy r: spec.sources is empty; list at least one source network"],
            ),
            (
                "sources are Network names, each once",
                "{sources: [a, A_, a], destination: {network: b}}",
                &[
                    "NetworkRoutingPolicy r: spec.sources[1] \"A_\" is not a DNS-1123 subdomain (it has a character other than a-z, 0-9, '-' and '.'); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
                    "NetworkRoutingPolicy r: spec.sources lists \"a\" more than once; list each once",
                ],
            ),
            (
                "the destination network is set",
                "{sources: [a], destination: {network: ''}}",
                &["NetworkRoutingPolicy r: spec.destination.network is empty; name the destination Network"],
            ),
            (
                "the destination network is a Network name",
                "{sources: [a], destination: {network: 'b.'}}",
                &["NetworkRoutingPolicy r: spec.destination.network \"b.\" is not a DNS-1123 subdomain (a dot-separated part does not start and end with a letter or digit); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters"],
            ),
            (
                "prefixes are CIDRs with host bits zero, each once",
                "{sources: [a], destination: {network: b, prefixes: [10.0.0.0/33, 10.0.0.1/24, 10.0.1.0/24, 10.0.1.0/24]}}",
                &[
                    "NetworkRoutingPolicy r: spec.destination.prefixes[0] \"10.0.0.0/33\" is not a CIDR; use e.g. 10.40.0.0/24",
                    "NetworkRoutingPolicy r: spec.destination.prefixes[1] \"10.0.0.1/24\" has host bits set; use 10.0.0.0/24",
                    "NetworkRoutingPolicy r: spec.destination.prefixes lists \"10.0.1.0/24\" more than once; list each once",
                ],
            ),
            (
                "nextHop sets exactly one of endpoint and gateway: not neither",
                "{sources: [a], destination: {network: b}, nextHop: {}}",
                &["NetworkRoutingPolicy r: spec.nextHop sets neither endpoint nor gateway; set exactly one, or remove nextHop"],
            ),
            (
                "nextHop sets exactly one of endpoint and gateway: not both",
                "{sources: [a], destination: {network: b}, nextHop: {gateway: 192.0.2.1, endpoint: {namespace: fw, name: fw-0}}}",
                &["NetworkRoutingPolicy r: spec.nextHop sets both endpoint and gateway; set exactly one of them"],
            ),
            (
                "the gateway is an address",
                "{sources: [a], destination: {network: b}, nextHop: {gateway: 192.0.2.1/24}}",
                &["NetworkRoutingPolicy r: spec.nextHop.gateway \"192.0.2.1/24\" is not an IP address; use e.g. 192.0.2.1"],
            ),
            (
                "the endpoint is a pod: namespace a DNS label, name a DNS subdomain",
                "{sources: [a], destination: {network: b}, nextHop: {endpoint: {namespace: fw.x, name: ''}}}",
                &[
                    "NetworkRoutingPolicy r: spec.nextHop.endpoint.namespace \"fw.x\" is not a DNS-1123 label (it has a character other than a-z, 0-9 and '-'); use lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters",
                    "NetworkRoutingPolicy r: spec.nextHop.endpoint.name \"\" is not a DNS-1123 subdomain (it is empty); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
                ],
            ),
            (
                "valid next hop and direction (one way through a transit is not supported yet)",
                "{sources: [a], destination: {network: b}, direction: sourceToDestination, nextHop: {endpoint: {namespace: fw, name: fw-0.x}}}",
                &[],
            ),
        ],
        routing,
    );
    let r: Result<NetworkRoutingPolicySpec, _> =
        serde_yaml::from_str("{sources: [a], destination: {network: b}, direction: both}");
    assert!(r.is_err(), "an unknown direction does not decode");
    let r: Result<NetworkRoutingPolicySpec, _> = serde_yaml::from_str("{sources: [a]}");
    assert!(r.is_err(), "the destination is required");
    let bad: NetworkRoutingPolicySpec = yaml("{sources: [], destination: {network: b}}");
    assert_eq!(routing_model("r", &bad), Err(routing(&bad).unwrap_err()));
}

#[test]
fn routing_support_says_what_is_not_supported_yet() {
    let kinds = |n: &str| match n {
        "corp" | "internet" => Some(NetworkType::External),
        "backend" | "frontend" => Some(NetworkType::L3),
        "storage" => Some(NetworkType::L2),
        _ => None,
    };
    let cases: &[(&str, &[Unsupported])] = &[
        ("{sources: [frontend], destination: {network: backend}}", &[]),
        ("{sources: [frontend], destination: {network: unknown-yet}}", &[]),
        // A transit endpoint, both ways (ADR 0057); one way is not carried yet.
        (
            "{sources: [frontend], destination: {network: backend}, nextHop: {endpoint: {namespace: fw, name: fw-0}}}",
            &[],
        ),
        (
            "{sources: [frontend], destination: {network: backend}, direction: sourceToDestination, nextHop: {endpoint: {namespace: fw, name: fw-0}}}",
            &[Unsupported::OneWayThroughTransit],
        ),
        // An uplink gateway toward an external network (that the destination is one is the
        // daemon's check against its world).
        ("{sources: [frontend], destination: {network: corp}, nextHop: {gateway: 192.0.2.1}}", &[]),
        // External networks are routed to and from; one way only from them.
        ("{sources: [frontend], destination: {network: corp}}", &[]),
        ("{sources: [corp], destination: {network: backend}, direction: sourceToDestination}", &[]),
        ("{sources: [corp], destination: {network: internet}}", &[]),
        (
            "{sources: [frontend], destination: {network: corp}, direction: sourceToDestination}",
            &[Unsupported::OneWayToExternal { network: "corp".into() }],
        ),
        // l2 networks are routed to and from (through their gateway).
        ("{sources: [frontend], destination: {network: storage}}", &[]),
        ("{sources: [storage], destination: {network: backend}, direction: sourceToDestination}", &[]),
        ("{sources: [frontend, internet, storage], destination: {network: backend}}", &[]),
        // One-way paths between l3 networks are compiled (reply-only routes back).
        (
            "{sources: [frontend], destination: {network: backend}, direction: sourceToDestination}",
            &[],
        ),
        (
            "{sources: [corp], destination: {network: corp}, direction: sourceToDestination, nextHop: {gateway: 192.0.2.1}}",
            &[Unsupported::OneWayToExternal { network: "corp".into() }],
        ),
    ];
    for (text, want) in cases {
        let spec: NetworkRoutingPolicySpec = yaml(text);
        assert_eq!(routing(&spec), Ok(()), "valid: {text}");
        match routing_support("p", &spec, kinds) {
            Ok(()) => assert!(want.is_empty(), "{text} should not be supported"),
            Err(e) => {
                assert_eq!(e.policy, "p");
                assert_eq!(e.features, *want, "{text}");
            }
        }
    }
    // The messages, exactly: one per feature, joined after the policy's name.
    let messages = [
        (
            Unsupported::OneWayThroughTransit,
            "spec.nextHop.endpoint (a transit endpoint) with direction sourceToDestination is not supported yet (use bidirectional: both ways cross the transit)",
        ),
        (
            Unsupported::OneWayToExternal { network: "corp".into() },
            "spec.destination.network \"corp\" is an external network and the direction is sourceToDestination; one-way paths to external networks are not supported yet (use bidirectional)",
        ),
    ];
    for (u, m) in &messages {
        assert_eq!(u.to_string(), *m);
    }
    let e = NotSupported {
        policy: "p".into(),
        features: vec![
            Unsupported::OneWayThroughTransit,
            Unsupported::OneWayToExternal {
                network: "corp".into(),
            },
        ],
    };
    assert_eq!(
        e.to_string(),
        "NetworkRoutingPolicy p: spec.nextHop.endpoint (a transit endpoint) with direction sourceToDestination is not supported yet (use bidirectional: both ways cross the transit); spec.destination.network \"corp\" is an external network and the direction is sourceToDestination; one-way paths to external networks are not supported yet (use bidirectional)"
    );
    assert_eq!(NotSupported::REASON, "NotSupported");
}

// ---- resources written by control -------------------------------------------------------------

const ENDPOINT: &str = "
network: backend
pod: web-0
node: node-1
interface: eth0
containerId: 0123abcd
addresses: [10.40.3.7/32, 'fd00:40::3:7/128']
mac: 02:00:0a:28:03:07
hostInterface: lace1a2b3c
networkId: 3
podUid: 5e1d0c3b-1111-4000-8000-000000000001
port: 7
endpointId: 4294967303
";

#[test]
fn endpoint() {
    let good: NetworkEndpointSpec = yaml(ENDPOINT);
    assert_eq!(validate_endpoint("team-a", "web-0-eth0", &good), Ok(()));
    // Interface addresses may carry the subnet's length (host bits set).
    let mut on_subnet = good.clone();
    on_subnet.addresses = vec!["10.50.0.7/24".into()];
    assert_eq!(
        validate_endpoint("team-a", "web-0-eth0", &on_subnet),
        Ok(())
    );
    let bad: NetworkEndpointSpec = yaml(
        "
network: Backend
pod: web_0
node: ''
interface: 'eth 0'
containerId: ''
addresses: [10.40.3.7, 10.40.3.8/32, 10.40.3.9/32]
mac: 02:00:0a:28:03
hostInterface: way-too-long-name
networkId: 0
podUid: ''
port: 4095
endpointId: 0
",
    );
    assert_eq!(
        messages(validate_endpoint("Team", "x", &bad)),
        [
            "NetworkEndpoint Team/x: metadata.namespace \"Team\" is not a DNS-1123 label (it has a character other than a-z, 0-9 and '-'); use lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters",
            "NetworkEndpoint Team/x: spec.network \"Backend\" is not a DNS-1123 subdomain (it has a character other than a-z, 0-9, '-' and '.'); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
            "NetworkEndpoint Team/x: spec.pod \"web_0\" is not a DNS-1123 subdomain (it has a character other than a-z, 0-9, '-' and '.'); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
            "NetworkEndpoint Team/x: spec.node \"\" is not a DNS-1123 subdomain (it is empty); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
            "NetworkEndpoint Team/x: spec.interface \"eth 0\" is not a Linux interface name; use 1-15 characters without '/', ':' or whitespace, e.g. eth1",
            "NetworkEndpoint Team/x: spec.hostInterface \"way-too-long-name\" is not a Linux interface name; use 1-15 characters without '/', ':' or whitespace, e.g. eth1",
            "NetworkEndpoint Team/x: spec.containerId is empty; set the CNI container id",
            "NetworkEndpoint Team/x: spec.podUid is empty; set the pod's metadata.uid, or omit it",
            "NetworkEndpoint Team/x: spec.addresses[0] \"10.40.3.7\" is not a CIDR; use e.g. 10.40.3.7/32",
            "NetworkEndpoint Team/x: spec.addresses holds more than one IPv4 entry; keep one per address family",
            "NetworkEndpoint Team/x: spec.mac \"02:00:0a:28:03\" is not a MAC address; use six hex octets separated by ':', e.g. 02:00:00:00:00:01",
            "NetworkEndpoint Team/x: spec.networkId 0 is outside 1..; set the network's status.id",
            "NetworkEndpoint Team/x: spec.port 4095 is outside 1..=4094; use the forwarder port control allocated",
            "NetworkEndpoint Team/x: spec.endpointId 0 is outside 1..; use the endpoint id control allocated",
        ]
    );
    let bad_text = "{network: Backend, pod: web_0, node: '', interface: 'eth 0', containerId: '', addresses: [10.40.3.7, 10.40.3.8/32, 10.40.3.9/32], mac: '02:00:0a:28:03', hostInterface: way-too-long-name, networkId: 0, podUid: '', port: 4095, endpointId: 0}";
    crd_agrees(
        "NetworkEndpoint",
        bad_text,
        None,
        &messages(validate_endpoint("Team", "x", &yaml(bad_text))),
        "bad endpoint",
    );
    crd_agrees("NetworkEndpoint", ENDPOINT, None, &[], "good endpoint");
    let mut none = good.clone();
    none.addresses.clear();
    none.mac = "01:00:5e:00:00:01".into();
    assert_eq!(
        messages(validate_endpoint("team-a", "e", &none)),
        [
            "NetworkEndpoint team-a/e: spec.addresses is empty; list the interface's addresses with prefix length, e.g. 10.40.3.7/32",
            "NetworkEndpoint team-a/e: spec.mac \"01:00:5e:00:00:01\" is a multicast or all-zero MAC; use a unicast MAC, e.g. 02:00:00:00:00:01",
        ]
    );
    crd_agrees(
        "NetworkEndpoint",
        &serde_yaml::to_string(&none).unwrap(),
        None,
        &messages(validate_endpoint("team-a", "e", &none)),
        "no addresses, multicast MAC",
    );
}

#[test]
fn mac_parsing() {
    assert_eq!(
        parse_mac("02:00:0A:28:03:ff"),
        Some(MacAddr([2, 0, 0x0a, 0x28, 3, 0xff]))
    );
    for bad in [
        "",
        "02:00:0a:28:03",
        "02:00:0a:28:03:07:08",
        "02-00-0a-28-03-07",
        "2:0:a:28:3:7",
        "02:00:0a:28:03:0g",
        "0200.0a28.0307",
    ] {
        assert_eq!(parse_mac(bad), None, "{bad:?}");
    }
    let mut n: NeighborSpec =
        yaml("{network: storage, address: 10.50.0.7, mac: '00:00:00:00:00:00'}");
    assert_eq!(
        messages(validate_neighbor("storage-10.50.0.7", &n)),
        ["Neighbor storage-10.50.0.7: spec.mac \"00:00:00:00:00:00\" is a multicast or all-zero MAC; use a unicast MAC, e.g. 02:00:00:00:00:01"]
    );
    crd_agrees(
        "Neighbor",
        &serde_yaml::to_string(&n).unwrap(),
        None,
        &messages(validate_neighbor("storage-10.50.0.7", &n)),
        "all-zero MAC",
    );
    n.mac = "02:00:00:00:00:07".into();
    assert_eq!(validate_neighbor("storage-10.50.0.7", &n), Ok(()));
}

#[test]
fn allocation() {
    let good: AllocationSpec =
        yaml("{network: backend, node: node-1, prefixes: [10.40.3.0/24, 'fd00:40::3:0/112']}");
    assert_eq!(validate_allocation("backend-node-1", &good), Ok(()));
    assert_eq!(
        allocation_prefixes("backend-node-1", &good).unwrap(),
        [
            "10.40.3.0/24".parse::<IpNet>().unwrap(),
            "fd00:40::3:0/112".parse().unwrap()
        ]
    );
    table::<AllocationSpec>(
        "Allocation",
        &[
            (
                "at least one block",
                "{network: backend, node: node-1, prefixes: []}",
                &["Allocation a: spec.prefixes is empty; list the node's block, one per address family, e.g. 10.40.3.0/24"],
            ),
            (
                "blocks are CIDRs, host bits zero, one per family",
                "{network: backend, node: node-1, prefixes: [10.40.3.1/24, x, 10.40.4.0/24, 10.40.5.0/24]}",
                &[
                    "Allocation a: spec.prefixes[0] \"10.40.3.1/24\" has host bits set; use 10.40.3.0/24",
                    "Allocation a: spec.prefixes[1] \"x\" is not a CIDR; use e.g. 10.40.3.0/24",
                    "Allocation a: spec.prefixes holds more than one IPv4 entry; keep one per address family",
                ],
            ),
        ],
        |s| validate_allocation("a", s),
    );
}

#[test]
fn neighbor_and_fdb_entry() {
    table::<NeighborSpec>(
        "Neighbor",
        &[
            ("learned", "{network: storage, address: 'fd00:50::7', mac: '02:00:00:00:00:07', learned: true}", &[]),
            (
                "the address is an address, not a prefix",
                "{network: storage, address: 10.50.0.7/32, mac: '02:00:00:00:00:07'}",
                &["Neighbor nb: spec.address \"10.50.0.7/32\" is not an IP address; use e.g. 10.50.0.7"],
            ),
        ],
        |s| validate_neighbor("nb", s),
    );
    table::<FdbEntrySpec>(
        "FDBEntry",
        &[
            ("moved, sequence 3", "{network: storage, mac: '02:00:00:00:00:07', node: node-2, sequence: 3, learned: true}", &[]),
            (
                "a record of control's learning",
                "{network: storage, mac: '02:00:00:00:00:07', node: node-2, endpointId: 4294967303, sequence: 2, pending: {node: node-3, endpointId: 12884901895}, addresses: [10.50.0.9, 'fd00:50::9'], lastSeen: '2026-05-28T20:26:40.124Z'}",
                &[],
            ),
            (
                "learned addresses, pending node, last seen",
                "{network: storage, mac: '02:00:00:00:00:07', node: node-2, endpointId: 7, pending: {node: Node-3, endpointId: 8}, addresses: [10.50.0.9, 10.50.0.9/32, 10.50.0.9], lastSeen: 'yesterday'}",
                &[
                    "FDBEntry f: spec.pending.node \"Node-3\" is not a DNS-1123 subdomain (it has a character other than a-z, 0-9, '-' and '.'); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
                    "FDBEntry f: spec.addresses[1] \"10.50.0.9/32\" is not an IP address; use e.g. 10.50.0.7",
                    "FDBEntry f: spec.addresses lists \"10.50.0.9\" more than once; list each once",
                    "FDBEntry f: spec.lastSeen \"yesterday\" is not an RFC 3339 time; use e.g. 2026-01-02T03:04:05.678Z",
                ],
            ),
            (
                "MAC and node",
                "{network: storage, mac: 'ff:ff:ff:ff:ff:ff', node: Node-2}",
                &[
                    "FDBEntry f: spec.mac \"ff:ff:ff:ff:ff:ff\" is a multicast or all-zero MAC; use a unicast MAC, e.g. 02:00:00:00:00:01",
                    "FDBEntry f: spec.node \"Node-2\" is not a DNS-1123 subdomain (it has a character other than a-z, 0-9, '-' and '.'); use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
                ],
            ),
            (
                "MAC syntax",
                "{network: storage, mac: '02:00:00:00:00', node: node-2}",
                &["FDBEntry f: spec.mac \"02:00:00:00:00\" is not a MAC address; use six hex octets separated by ':', e.g. 02:00:00:00:00:01"],
            ),
        ],
        |s| validate_fdb_entry("f", s),
    );
}

#[test]
fn node_locator() {
    let good: NodeLocatorSpec = yaml("{locator: 'fc00:0:3::/48', underlay: '2001:db8::3', id: 3}");
    assert_eq!(validate_node_locator("node-3", &good), Ok(()));
    let m = node_model("node-3", &good).unwrap();
    assert_eq!(m.name, "node-3");
    assert_eq!(m.id, NodeId(3));
    assert_eq!(m.locator, "fc00:0:3::/48".parse().unwrap());
    assert_eq!(m.underlay, "2001:db8::3".parse::<Ipv6Addr>().unwrap());
    table::<NodeLocatorSpec>(
        "NodeLocator",
        &[
            ("a /64 is the longest locator", "{locator: 'fc00:0:3:4::/64', underlay: '2001:db8::3', id: 1}", &[]),
            (
                "a /65 is too long",
                "{locator: 'fc00:0:3:4::/65', underlay: '2001:db8::3', id: 1}",
                &["NodeLocator nl: spec.locator \"fc00:0:3:4::/65\" is a /65; a locator is an IPv6 prefix of length 64 or shorter, e.g. fc00:0:3::/48"],
            ),
            (
                "an IPv6 prefix, host bits zero",
                "{locator: 10.0.0.0/8, underlay: '2001:db8::3', id: 1}",
                &["NodeLocator nl: spec.locator \"10.0.0.0/8\" is not an IPv6 prefix; a locator is an IPv6 prefix, e.g. fc00:0:3::/48"],
            ),
            (
                "host bits",
                "{locator: 'fc00:0:3::1/48', underlay: '2001:db8::3', id: 1}",
                &["NodeLocator nl: spec.locator \"fc00:0:3::1/48\" has host bits set; use fc00:0:3::/48"],
            ),
            (
                "not a CIDR",
                "{locator: 'fc00:0:3::', underlay: '2001:db8::3', id: 1}",
                &["NodeLocator nl: spec.locator \"fc00:0:3::\" is not a CIDR; use e.g. fc00:0:3::/48"],
            ),
            (
                "the underlay is an IPv6 address, the id non-zero",
                "{locator: 'fc00:0:3::/48', underlay: 192.0.2.3, id: 0}",
                &[
                    "NodeLocator nl: spec.underlay \"192.0.2.3\" is not an IPv6 address; the underlay is IPv6, use the node's uplink IPv6 address",
                    "NodeLocator nl: spec.id is 0; data-plane ids start at 1",
                ],
            ),
            (
                "the underlay parses",
                "{locator: 'fc00:0:3::/48', underlay: 'node-3', id: 1}",
                &["NodeLocator nl: spec.underlay \"node-3\" is not an IP address; use e.g. 2001:db8::3"],
            ),
        ],
        |s| validate_node_locator("nl", s),
    );
    let bad: NodeLocatorSpec = yaml("{locator: 'fc00:0:3::/80', underlay: '2001:db8::3', id: 1}");
    assert_eq!(
        node_model("nl", &bad),
        Err(validate_node_locator("nl", &bad).unwrap_err())
    );
}
