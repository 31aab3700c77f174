//! The standalone source: parsing, problems, last-good state, duplicates, and the watcher.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lace_control::api::{validate, NetworkType};
use lace_control::source::standalone::{StandaloneSource, WatchMode};
use lace_control::source::{
    Consequence, NamespacedName, NodeAnnotationError, ObjectKind, Objects, ProblemKind, Snapshot,
    Source, SourceError,
};

/// Long enough for any loaded machine; a correct watcher wakes far sooner.
const GENEROUS: Duration = Duration::from_secs(60);

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path
}

fn load(source: &mut impl Source) -> Snapshot {
    source.load().expect("the directory is readable")
}

fn network(name: &str, v4: &str) -> String {
    format!(
        "apiVersion: lace-cni.io/v1alpha1\nkind: Network\nmetadata:\n  name: {name}\nspec:\n  \
         type: l3\n  ipv4Subnet:\n    prefix: {v4}\n    hostLocalPrefixLength: 24\n"
    )
}

fn v4_prefix(objects: &Objects, name: &str) -> Option<String> {
    objects
        .networks
        .get(name)?
        .spec
        .ipv4_subnet
        .as_ref()
        .map(|s| s.prefix.clone())
}

const EVERY_KIND: &str = r#"
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata:
  name: backend
spec:
  type: l3
  ipv4Subnet:
    prefix: 10.40.0.0/16
    hostLocalPrefixLength: 24
---
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
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkRoutingPolicy
metadata:
  name: open
spec:
  sources: [frontend]
  destination:
    network: backend
---
---
apiVersion: v1
kind: Namespace
metadata:
  name: team-blue
  labels:
    team: blue
---
apiVersion: v1
kind: Node
metadata:
  name: node-a
  annotations:
    lace-cni.io/underlay: "fd00:100::a"
    lace-cni.io/locator: "fc00:0:a::/48"
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    tier: frontend
spec:
  nodeName: node-a
  containers:
  - name: app
    image: pause
---
apiVersion: v1
kind: Service
metadata:
  name: api
  namespace: team-blue
spec:
  selector:
    tier: backend
  ports:
  - port: 80
"#;

#[test]
fn a_multi_document_file_yields_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "all.yaml", EVERY_KIND);
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(snapshot.problems, vec![]);
    let o = &snapshot.objects;
    assert_eq!(o.len(), 7);
    assert_eq!(o.networks["backend"].spec.type_, NetworkType::L3);
    assert_eq!(v4_prefix(o, "backend").as_deref(), Some("10.40.0.0/16"));
    assert_eq!(o.binding_policies["per-team"].spec.rules.len(), 2);
    assert_eq!(
        o.routing_policies["open"].spec.destination.network,
        "backend"
    );
    assert_eq!(
        o.namespaces["team-blue"].metadata.labels.as_ref().unwrap()["team"],
        "blue".to_owned()
    );
    let node = &o.nodes["node-a"];
    assert_eq!(
        node.underlay,
        "fd00:100::a".parse::<std::net::Ipv6Addr>().unwrap()
    );
    assert_eq!(node.locator, Some("fc00:0:a::/48".parse().unwrap()));
    assert_eq!(node.name(), "node-a");
    // A pod without a namespace lives in `default`, and says so.
    let pod = &o.pods[&NamespacedName::new("default", "web")];
    assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-a")
    );
    let service = &o.services[&NamespacedName::new("team-blue", "api")];
    assert_eq!(service.metadata.namespace.as_deref(), Some("team-blue"));
}

#[test]
fn objects_merge_across_files_and_both_extensions() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &network("a", "10.1.0.0/16"));
    write(dir.path(), "b.yml", &network("b", "10.2.0.0/16"));
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    let first = load(&mut source);
    assert_eq!(first.problems, vec![]);
    assert_eq!(
        first.objects.networks.keys().collect::<Vec<_>>(),
        ["a", "b"]
    );
    // Loading again without a change gives the same snapshot.
    assert_eq!(load(&mut source), first);
}

#[test]
fn an_unknown_kind_is_reported_and_the_rest_of_the_file_used() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata: {{}}\n",
        network("a", "10.1.0.0/16")
    );
    let path = write(dir.path(), "mixed.yaml", &text);
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    let snapshot = load(&mut source);
    assert!(snapshot.objects.networks.contains_key("a"));
    assert_eq!(snapshot.problems.len(), 1, "{:?}", snapshot.problems);
    let problem = &snapshot.problems[0];
    let origin = problem.origin.as_ref().unwrap();
    assert_eq!(
        (origin.file.as_path(), origin.document),
        (path.as_path(), Some(2))
    );
    assert_eq!(problem.consequence, Consequence::Skipped);
    assert!(matches!(
        &problem.kind,
        ProblemKind::UnknownKind { api_version, kind, name }
            if api_version == "v1" && kind == "ConfigMap" && name == "settings"
    ));
    let message = problem.to_string();
    assert!(message.contains("mixed.yaml document 2"), "{message}");
    assert!(message.contains("ConfigMap"), "{message}");
}

#[test]
fn a_broken_file_keeps_its_last_good_objects_until_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.yaml", &network("backend", "10.40.0.0/16"));
    write(dir.path(), "b.yaml", &network("other", "10.50.0.0/16"));
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    assert_eq!(load(&mut source).problems, vec![]);

    // Half-saved: a YAML syntax error.
    write(
        dir.path(),
        "a.yaml",
        "apiVersion: lace-cni.io/v1alpha1\nkind: Network\nmetadata: [\n",
    );
    let snapshot = load(&mut source);
    assert_eq!(
        v4_prefix(&snapshot.objects, "backend").as_deref(),
        Some("10.40.0.0/16")
    );
    assert_eq!(
        v4_prefix(&snapshot.objects, "other").as_deref(),
        Some("10.50.0.0/16")
    );
    assert_eq!(snapshot.problems.len(), 1, "{:?}", snapshot.problems);
    let problem = &snapshot.problems[0];
    assert_eq!(problem.origin.as_ref().unwrap().file, a);
    assert!(
        matches!(problem.kind, ProblemKind::Yaml { .. }),
        "{problem}"
    );
    assert_eq!(
        problem.consequence,
        Consequence::KeptLastGood { objects: 1 }
    );
    assert!(
        problem
            .to_string()
            .contains("keeping the last good version"),
        "{problem}"
    );

    // Valid YAML that does not decode as a Network: that object keeps its last good version,
    // and the file's other, valid documents are used.
    let bad = network("backend", "10.99.0.0/16").replace("type: l3", "type: l4");
    write(
        dir.path(),
        "a.yaml",
        &format!("{}---\n{bad}", network("extra", "10.60.0.0/16")),
    );
    let snapshot = load(&mut source);
    assert_eq!(
        v4_prefix(&snapshot.objects, "backend").as_deref(),
        Some("10.40.0.0/16")
    );
    assert_eq!(
        v4_prefix(&snapshot.objects, "extra").as_deref(),
        Some("10.60.0.0/16")
    );
    assert_eq!(snapshot.problems.len(), 1, "{:?}", snapshot.problems);
    let problem = &snapshot.problems[0];
    assert_eq!(problem.origin.as_ref().unwrap().document, Some(2));
    assert_eq!(
        problem.object.as_ref().unwrap().to_string(),
        "Network backend"
    );
    assert!(matches!(&problem.kind, ProblemKind::Decode { kind, .. } if kind == "Network"));
    let message = problem.to_string();
    assert!(
        message.contains("a.yaml document 2 (Network backend)"),
        "{message}"
    );
    assert!(
        message.contains("l4"),
        "the serde error is shown: {message}"
    );
    assert!(
        message.contains("at spec.type"),
        "the field is named: {message}"
    );

    // A document without a name breaks the file too.
    write(
        dir.path(),
        "a.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {}\n",
    );
    let snapshot = load(&mut source);
    assert!(snapshot.objects.networks.contains_key("backend"));
    assert!(matches!(
        snapshot.problems[..],
        [ref p] if p.kind == ProblemKind::MissingField { field: "metadata.name" }
    ));

    // Fixed: the new version is used and the problem is gone.
    write(dir.path(), "a.yaml", &network("backend", "10.41.0.0/16"));
    let snapshot = load(&mut source);
    assert_eq!(snapshot.problems, vec![]);
    assert_eq!(
        v4_prefix(&snapshot.objects, "backend").as_deref(),
        Some("10.41.0.0/16")
    );
    assert_eq!(
        v4_prefix(&snapshot.objects, "other").as_deref(),
        Some("10.50.0.0/16")
    );
}

/// Every decode error of a document is reported, each with its full field path, in one
/// problem; the document's object is absent (it never had a good version) while the file's
/// other documents are used.
#[test]
fn every_decode_error_of_a_document_is_reported_with_its_full_path() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.yaml",
        &format!(
            "{}---\n{}",
            network("good", "10.1.0.0/16"),
            "apiVersion: lace-cni.io/v1alpha1\nkind: Network\nmetadata: {name: bad}\nspec:\n  \
             type: l4\n  ipv4Subnet: {hostLocalPrefixLength: 24}\n  externalPrefixes: 10.0.0.0/8\n"
        ),
    );
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    let snapshot = load(&mut source);
    assert!(snapshot.objects.networks.contains_key("good"));
    assert!(!snapshot.objects.networks.contains_key("bad"));
    assert_eq!(snapshot.problems.len(), 1, "{:?}", snapshot.problems);
    let p = &snapshot.problems[0];
    assert_eq!(p.consequence, Consequence::NothingKept);
    let ProblemKind::Decode { errors, .. } = &p.kind else {
        panic!("{p}")
    };
    let mut paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    paths.sort_unstable();
    assert_eq!(
        paths,
        [
            "spec.externalPrefixes",
            "spec.ipv4Subnet.prefix",
            "spec.type"
        ],
        "{p}"
    );
    let text = p.to_string();
    assert!(
        text.contains("at spec.ipv4Subnet.prefix: Required value"),
        "{text}"
    );
    // A Kubernetes kind goes through serde, which names the field with its full path too.
    write(
        dir.path(),
        "b.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec:\n  ports:\n  - {name: web, port: http}\n",
    );
    let snapshot = load(&mut source);
    let p = snapshot
        .problems
        .iter()
        .find(|p| p.origin.as_ref().unwrap().file.ends_with("b.yaml"))
        .unwrap();
    assert!(
        p.to_string()
            .contains("at spec.ports[0].port: invalid type"),
        "{p}"
    );
}

#[test]
fn network_policies_are_read() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "np.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny-all, namespace: shop, labels: {tier: backend}}\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n",
    );
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(snapshot.problems, vec![]);
    let np = &snapshot.objects.network_policies[&NamespacedName::new("shop", "deny-all")];
    assert_eq!(np.metadata.namespace.as_deref(), Some("shop"));
    assert_eq!(
        snapshot
            .origins
            .keys()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["NetworkPolicy shop/deny-all"]
    );
}

/// EndpointSlices are read into their namespace (the default one without a namespace); one that
/// does not decode is reported with its field and keeps its last good version.
#[test]
fn endpoint_slices_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let slice = |port: &str| {
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-1\n  \
             namespace: shop\n  labels: {{kubernetes.io/service-name: web}}\naddressType: IPv4\n\
             ports: [{{name: http, port: {port}}}]\nendpoints:\n- addresses: [10.40.1.2]\n  \
             conditions: {{ready: true}}\n"
        )
    };
    write(dir.path(), "slices.yaml", &format!(
        "{}---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: bare}}\naddressType: IPv6\n",
        slice("8080")
    ));
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(snapshot.problems, vec![]);
    let s = &snapshot.objects.endpoint_slices[&NamespacedName::new("shop", "web-1")];
    assert_eq!(s.address_type, "IPv4");
    assert_eq!(s.endpoints.as_ref().unwrap()[0].addresses, ["10.40.1.2"]);
    let bare = &snapshot.objects.endpoint_slices[&NamespacedName::new("default", "bare")];
    assert_eq!(bare.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(
        snapshot
            .origins
            .keys()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["EndpointSlice default/bare", "EndpointSlice shop/web-1"]
    );
    // Broken: reported with the field, the last good version kept.
    write(dir.path(), "slices.yaml", &slice("eighty"));
    let snapshot = load(&mut source);
    let [p] = &snapshot.problems[..] else {
        panic!("{:?}", snapshot.problems)
    };
    assert_eq!(p.consequence, Consequence::KeptLastGood { objects: 1 });
    assert!(p.to_string().contains("ports[0].port"), "{p}");
    assert!(snapshot
        .objects
        .endpoint_slices
        .contains_key(&NamespacedName::new("shop", "web-1")));
}

#[test]
fn a_file_broken_from_the_start_contributes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", "kind: Network\n");
    write(dir.path(), "b.yaml", &network("b", "10.2.0.0/16"));
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(snapshot.objects.networks.keys().collect::<Vec<_>>(), ["b"]);
    assert!(matches!(
        snapshot.problems[..],
        [ref p] if p.kind == ProblemKind::MissingField { field: "apiVersion" }
            && p.consequence == Consequence::NothingKept
    ));
}

#[test]
fn an_unreadable_file_keeps_its_last_good_objects() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &network("a", "10.1.0.0/16"));
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    assert!(load(&mut source).objects.networks.contains_key("a"));
    // Not UTF-8: read_to_string fails (root ignores permissions, so this is how to fail a read).
    fs::write(dir.path().join("a.yaml"), [0xff, 0xfe, 0x00]).unwrap();
    let snapshot = load(&mut source);
    assert!(snapshot.objects.networks.contains_key("a"));
    assert!(matches!(
        snapshot.problems[..],
        [ref p] if matches!(p.kind, ProblemKind::Unreadable { .. })
            && p.consequence == Consequence::KeptLastGood { objects: 1 }
    ));
}

#[test]
fn duplicates_across_files_keep_the_first_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.yaml", &network("backend", "10.40.0.0/16"));
    let b = write(dir.path(), "b.yaml", &network("backend", "10.99.0.0/16"));
    // Same name, different kind or namespace: not duplicates.
    write(
        dir.path(),
        "c.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: backend\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: x\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: y\n",
    );
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(
        v4_prefix(&snapshot.objects, "backend").as_deref(),
        Some("10.40.0.0/16")
    );
    assert!(snapshot.objects.namespaces.contains_key("backend"));
    assert_eq!(snapshot.objects.pods.len(), 2);
    assert_eq!(snapshot.problems.len(), 1, "{:?}", snapshot.problems);
    let problem = &snapshot.problems[0];
    assert_eq!(problem.origin.as_ref().unwrap().file, b);
    assert_eq!(problem.consequence, Consequence::Skipped);
    assert!(matches!(&problem.kind, ProblemKind::Duplicate { first } if first.file == a));
    let message = problem.to_string();
    assert!(message.contains(&*a.to_string_lossy()), "{message}");
    assert!(message.contains(&*b.to_string_lossy()), "{message}");

    // The first one deleted: the second takes over, no problem left.
    fs::remove_file(&a).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(snapshot.problems, vec![]);
    assert_eq!(
        v4_prefix(&snapshot.objects, "backend").as_deref(),
        Some("10.99.0.0/16")
    );
}

#[test]
fn a_duplicate_within_one_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}---\n{}",
        network("n", "10.1.0.0/16"),
        network("n", "10.2.0.0/16")
    );
    write(dir.path(), "a.yaml", &text);
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(
        v4_prefix(&snapshot.objects, "n").as_deref(),
        Some("10.1.0.0/16")
    );
    assert!(matches!(
        &snapshot.problems[..],
        [p] if matches!(&p.kind, ProblemKind::Duplicate { first } if first.document == Some(1))
    ));
}

#[test]
fn a_deleted_file_takes_its_objects_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.yaml", &network("a", "10.1.0.0/16"));
    write(dir.path(), "b.yaml", &network("b", "10.2.0.0/16"));
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    assert_eq!(load(&mut source).objects.networks.len(), 2);
    fs::remove_file(a).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(snapshot.objects.networks.keys().collect::<Vec<_>>(), ["b"]);
    assert_eq!(snapshot.problems, vec![]);
}

#[test]
fn dotfiles_editor_files_other_extensions_and_subdirectories_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "real.yaml", &network("real", "10.1.0.0/16"));
    for name in [
        ".hidden.yaml",
        ".#real.yaml",
        "#real.yaml#",
        "real.yaml~",
        "real.yaml.swp",
        "notes.txt",
    ] {
        write(dir.path(), name, &network("ignored", "10.9.0.0/16"));
    }
    fs::create_dir(dir.path().join("later")).unwrap();
    write(
        &dir.path().join("later"),
        "later.yaml",
        &network("later", "10.8.0.0/16"),
    );
    fs::create_dir(dir.path().join("dir.yaml")).unwrap();
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(snapshot.problems, vec![]);
    assert_eq!(
        snapshot.objects.networks.keys().collect::<Vec<_>>(),
        ["real"]
    );
}

#[test]
fn nodes_need_a_valid_underlay_annotation() {
    let dir = tempfile::tempdir().unwrap();
    let node = |name: &str, annotations: &str| {
        format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n{annotations}---\n")
    };
    let text = [
        node(
            "good",
            "  annotations:\n    lace-cni.io/underlay: \"fd00:100::a\"\n",
        ),
        node("bare", ""),
        node(
            "v4",
            "  annotations:\n    lace-cni.io/underlay: \"192.0.2.1\"\n",
        ),
        node(
            "hostbits",
            "  annotations:\n    lace-cni.io/underlay: \"fd00::b\"\n    \
             lace-cni.io/locator: \"fc00:0:b::1/48\"\n",
        ),
    ]
    .concat();
    write(dir.path(), "nodes.yaml", &text);
    let mut source = StandaloneSource::polling(dir.path()).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(snapshot.objects.nodes.keys().collect::<Vec<_>>(), ["good"]);
    assert_eq!(snapshot.objects.nodes["good"].locator, None);
    let errors: Vec<_> = snapshot
        .problems
        .iter()
        .map(|p| {
            assert_eq!(p.consequence, Consequence::Skipped);
            assert_eq!(p.object.as_ref().unwrap().kind, ObjectKind::Node);
            match &p.kind {
                ProblemKind::Node(e) => e.clone(),
                other => panic!("unexpected problem {other}"),
            }
        })
        .collect();
    assert!(matches!(
        &errors[..],
        [
            NodeAnnotationError::MissingUnderlay { node: a },
            NodeAnnotationError::BadUnderlay { node: b, .. },
            NodeAnnotationError::LocatorHostBits { node: c, .. },
        ] if a == "bare" && b == "v4" && c == "hostbits"
    ));
    let message = snapshot.problems[0].to_string();
    assert!(
        message.contains("lace-cni.io/underlay is missing"),
        "{message}"
    );
    assert!(snapshot.problems[2].to_string().contains("fc00:0:b::/48"));
}

#[test]
fn a_missing_directory_is_an_error_not_an_empty_world() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    assert!(matches!(
        StandaloneSource::new(&missing),
        Err(SourceError::ReadDir { .. })
    ));

    let watched = dir.path().join("manifests");
    fs::create_dir(&watched).unwrap();
    write(&watched, "a.yaml", &network("a", "10.1.0.0/16"));
    let mut source = StandaloneSource::new(&watched).unwrap();
    assert!(load(&mut source).objects.networks.contains_key("a"));
    fs::remove_dir_all(&watched).unwrap();
    let error = source.load().unwrap_err();
    assert!(error.to_string().contains("manifests"), "{error}");
}

// ---- watching -----------------------------------------------------------------------------

/// Waits and reloads until `done` holds; fails if a `wait` times out or it never holds.
/// Spurious wake-ups are allowed (the source's contract), hence the loop.
fn until(source: &mut StandaloneSource, what: &str, done: impl Fn(&Snapshot) -> bool) {
    for _ in 0..20 {
        assert!(source.wait(GENEROUS), "wait() did not wake for: {what}");
        if done(&load(source)) {
            return;
        }
    }
    panic!("never saw: {what}");
}

/// Returns once a `wait` with nothing changing returns `false`: our own reads must not wake
/// the watcher (events from setup may still trickle in once or twice).
fn settle(source: &mut StandaloneSource) {
    for _ in 0..10 {
        if !source.wait(Duration::from_millis(300)) {
            return;
        }
        load(source);
    }
    panic!("wait() keeps waking with nothing changing");
}

fn watch_lifecycle(mut source: StandaloneSource, dir: &Path) {
    load(&mut source);
    settle(&mut source);

    write(dir, "a.yaml", &network("a", "10.1.0.0/16"));
    until(&mut source, "create", |s| {
        s.objects.networks.contains_key("a")
    });
    settle(&mut source);

    write(dir, "a.yaml", &network("a", "10.2.0.0/16"));
    until(&mut source, "modify", |s| {
        v4_prefix(&s.objects, "a").as_deref() == Some("10.2.0.0/16")
    });
    settle(&mut source);

    // An editor's atomic save: write a temp file, rename it over the manifest.
    write(dir, ".a.yaml.tmp", &network("a", "10.3.0.0/16"));
    fs::rename(dir.join(".a.yaml.tmp"), dir.join("a.yaml")).unwrap();
    until(&mut source, "rename over", |s| {
        v4_prefix(&s.objects, "a").as_deref() == Some("10.3.0.0/16")
    });
    settle(&mut source);

    // Renamed to a name the source ignores: the objects go.
    fs::rename(dir.join("a.yaml"), dir.join("a.yaml.bak")).unwrap();
    until(&mut source, "rename away", |s| {
        s.objects.networks.is_empty()
    });
    settle(&mut source);

    // …and back.
    fs::rename(dir.join("a.yaml.bak"), dir.join("b.yml")).unwrap();
    until(&mut source, "rename in", |s| {
        s.objects.networks.contains_key("a")
    });
    settle(&mut source);

    fs::remove_file(dir.join("b.yml")).unwrap();
    until(&mut source, "delete", |s| s.objects.is_empty());
}

#[test]
fn the_inotify_watcher_wakes_wait_on_create_modify_rename_delete() {
    let dir = tempfile::tempdir().unwrap();
    let source = StandaloneSource::new(dir.path()).unwrap();
    assert_eq!(source.watch_mode(), WatchMode::Inotify);
    watch_lifecycle(source, dir.path());
}

#[test]
fn the_polling_fallback_wakes_wait_on_create_modify_rename_delete() {
    let dir = tempfile::tempdir().unwrap();
    let source = StandaloneSource::polling(dir.path()).unwrap();
    assert!(matches!(source.watch_mode(), WatchMode::Poll { .. }));
    watch_lifecycle(source, dir.path());
}

#[test]
fn changes_to_ignored_files_do_not_wake_the_watcher() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &network("a", "10.1.0.0/16"));
    let mut source = StandaloneSource::new(dir.path()).unwrap();
    load(&mut source);
    settle(&mut source);
    write(dir.path(), ".a.yaml.swp", "junk");
    write(dir.path(), "notes.txt", "junk");
    assert!(
        !source.wait(Duration::from_millis(500)),
        "an ignored file woke wait()"
    );
}

// ---- the demo's manifests -----------------------------------------------------------------

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples")
}

#[test]
fn the_demo_manifests_parse() {
    let mut source = StandaloneSource::polling(examples()).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(snapshot.problems, vec![], "{:#?}", snapshot.problems);
    let o = &snapshot.objects;
    assert_eq!(
        o.networks.keys().collect::<Vec<_>>(),
        ["backend", "blue", "default", "frontend", "storage"]
    );
    assert_eq!(o.networks["storage"].spec.type_, NetworkType::L2);
    let backend = &o.networks["backend"].spec;
    assert_eq!(backend.type_, NetworkType::L3);
    let v4 = backend.ipv4_subnet.as_ref().unwrap();
    assert_eq!(
        (v4.prefix.as_str(), v4.host_local_prefix_length),
        ("10.40.0.0/16", Some(24))
    );
    assert_eq!(
        o.binding_policies.keys().collect::<Vec<_>>(),
        ["per-team", "tiers"]
    );
    // The seed's policy, verbatim.
    let per_team = &o.binding_policies["per-team"].spec;
    assert_eq!(per_team.priority, 0);
    assert_eq!(
        per_team.rules[0].cel_expression.as_deref(),
        Some(
            "object.metadata.namespace.startsWith('team-')\n  \
             ? optional.of(object.metadata.namespace.substring(5))\n  : optional.none()"
        )
    );
    assert_eq!(per_team.rules[1].network.as_deref(), Some("default"));
    // Tiers decide first.
    assert!(o.binding_policies["tiers"].spec.priority < per_team.priority);
    assert!(
        o.routing_policies.is_empty(),
        "routing is applied later in the demo"
    );
    assert_eq!(o.nodes.keys().collect::<Vec<_>>(), ["node-a", "node-b"]);
    assert_eq!(
        o.nodes["node-b"].underlay,
        "fd00:100::b".parse::<std::net::Ipv6Addr>().unwrap()
    );
    assert_eq!(
        o.namespaces.keys().collect::<Vec<_>>(),
        ["shop", "team-blue"]
    );
    assert_eq!(o.pods.len(), 9);
    let nodes: std::collections::BTreeSet<_> = o
        .pods
        .values()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(nodes.len(), 2, "pods are spread over both nodes");
    assert_eq!(o.services.len(), 1);
    for (k, svc) in &o.services {
        assert!(
            matches!(
                lace_control::service::parse(k, svc),
                Ok(lace_control::service::Parsed::Vip(_))
            ),
            "{k}: {:?}",
            lace_control::service::parse(k, svc)
        );
    }

    // Valid per the API, object by object.
    for (name, network) in &o.networks {
        let checked = validate::validate_network(name, &network.spec);
        assert!(checked.is_ok(), "{:?}", checked.map_err(|e| e.messages()));
    }
    for (name, policy) in &o.binding_policies {
        let checked = validate::validate_binding_policy(name, &policy.spec);
        assert!(checked.is_ok(), "{:?}", checked.map_err(|e| e.messages()));
    }

    let mut later = StandaloneSource::polling(examples().join("later")).unwrap();
    let snapshot = load(&mut later);
    assert_eq!(snapshot.problems, vec![]);
    let routing = &snapshot.objects.routing_policies["frontend-backend"].spec;
    assert_eq!(routing.sources, ["frontend"]);
    assert_eq!(routing.destination.network, "backend");
    let checked = validate::validate_routing_policy("frontend-backend", routing);
    assert!(checked.is_ok(), "{:?}", checked.map_err(|e| e.messages()));
}

/// `transit/`: the path frontend ↔ backend through tools-1 parses, validates and is supported.
#[test]
fn the_transit_example_parses_and_is_supported() {
    let mut source = StandaloneSource::polling(examples().join("transit")).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(snapshot.problems, vec![], "{:#?}", snapshot.problems);
    let name = "frontend-backend-through-tools";
    let spec = &snapshot.objects.routing_policies[name].spec;
    let checked = validate::validate_routing_policy(name, spec);
    assert!(checked.is_ok(), "{:?}", checked.map_err(|e| e.messages()));
    let model = validate::routing_model(name, spec).unwrap();
    assert_eq!(
        model.transit,
        Some(lace_control::source::NamespacedName::new(
            "team-blue",
            "tools-1"
        ))
    );
    let kinds = |_: &str| Some(lace_control::api::NetworkType::L3);
    assert_eq!(validate::routing_support(name, spec, kinds), Ok(()));
}

/// `calico-vrf/`: Calico's VRF Network sample (seed 003) as lace objects. They parse and
/// validate; the uplink entry is Calico's `hostConfig` (every node, eth1 VLAN 100, the default
/// route); the routing policy opens it both ways (supported); the binding policy puts a pod
/// with Calico's annotation on `vrf1` and leaves others alone.
#[test]
fn the_calico_vrf_example_parses_and_binds() {
    let mut source = StandaloneSource::polling(examples().join("calico-vrf")).unwrap();
    let snapshot = load(&mut source);
    assert_eq!(snapshot.problems, vec![], "{:#?}", snapshot.problems);
    let o = &snapshot.objects;
    assert_eq!(
        o.networks.keys().collect::<Vec<_>>(),
        ["vrf1", "vrf1-uplink"]
    );
    let uplink = validate::network_model(
        "vrf1-uplink",
        lace_shared::types::NetworkId(2),
        &o.networks["vrf1-uplink"].spec,
    )
    .unwrap();
    assert_eq!(uplink.kind, NetworkType::External);
    assert_eq!(uplink.uplinks.len(), 1);
    let entry = &uplink.uplinks[0];
    assert!(
        entry.node_selector.is_empty(),
        "every node, as nodeSelector \"\""
    );
    assert_eq!(
        (entry.interface.as_deref(), entry.vlan),
        (Some("eth1"), Some(100))
    );
    assert_eq!(
        entry.static_routes,
        [("0.0.0.0/0".parse().unwrap(), "2.100.0.1".parse().unwrap())]
    );
    validate::network_model(
        "vrf1",
        lace_shared::types::NetworkId(1),
        &o.networks["vrf1"].spec,
    )
    .unwrap();
    let out = &o.routing_policies["vrf1-out"].spec;
    assert!(validate::validate_routing_policy("vrf1-out", out).is_ok());
    let kinds = |n: &str| o.networks.get(n).map(|n| n.spec.type_);
    assert_eq!(validate::routing_support("vrf1-out", out, kinds), Ok(()));

    let policies: Vec<_> = o.binding_policies.values().cloned().collect();
    let set = lace_control::bind::BindingPolicies::new(&policies);
    assert!(set.errors().is_empty(), "{:?}", set.errors());
    let pod = |annotations: serde_json::Value| serde_json::json!({"metadata": {"name": "p", "namespace": "apps", "annotations": annotations}});
    let none = std::collections::BTreeMap::new();
    let kind = lace_control::api::MatchKind::Pod;
    let d = set.decide(
        kind,
        &pod(serde_json::json!({"cni.projectcalico.org/networks": "vrf1"})),
        &none,
    );
    assert_eq!(
        d.binding,
        lace_control::bind::Binding::Network("vrf1".into())
    );
    for other in [
        serde_json::json!({"cni.projectcalico.org/networks": "vrf2"}),
        serde_json::json!({}),
    ] {
        let d = set.decide(kind, &pod(other), &none);
        assert!(d.errors.is_empty(), "{:?}", d.errors);
        assert_ne!(
            d.binding,
            lace_control::bind::Binding::Network("vrf1".into())
        );
    }
    let d = set.decide(
        kind,
        &serde_json::json!({"metadata": {"name": "p", "namespace": "apps"}}),
        &none,
    );
    assert!(d.errors.is_empty(), "no annotations at all: {:?}", d.errors);
}
