//! The fake API server against the real kube-rs client and `kube::runtime::watcher`: what the
//! watcher documents it needs (an initial list with a resourceVersion, watches resumed from
//! it, bookmarks, a relist after `410 Gone`) and the semantics lace depends on.

use std::collections::BTreeSet;

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use kube::Client;
use lace_kube_fake::{FakeApiServer, Restart};
use serde_json::json;

async fn client_for(server: &FakeApiServer) -> (Client, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    server.write_kubeconfig(&path).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    (Client::try_from(cfg).unwrap(), dir)
}

fn status_code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API error: {other:?}"),
    }
}

fn cm(name: &str, data: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "lace"}},
        "data": {"v": data},
    }))
    .unwrap()
}

async fn namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap()
}

#[tokio::test]
async fn tls_and_token_are_required_and_writes_are_checked() {
    let server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    // A wrong token is 401.
    let mut bad = kube::Config::new(server.url().parse().unwrap());
    bad.root_cert = Some(vec![rustls_pem(server.ca_pem())]);
    bad.auth_info.token = Some("wrong".to_owned().into());
    let bad = Client::try_from(bad).unwrap();
    let e = Api::<Namespace>::all(bad)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 401);

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "t");
    // A namespace that does not exist: 404.
    let e = cms
        .create(&PostParams::default(), &cm("a", "1"))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 404);
    namespace(&client, "t").await;
    let a = cms
        .create(&PostParams::default(), &cm("a", "1"))
        .await
        .unwrap();
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());
    // Create of an existing name: 409 AlreadyExists.
    let e = cms
        .create(&PostParams::default(), &cm("a", "2"))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 409);
    let kube::Error::Api(s) = &e else {
        unreachable!()
    };
    assert_eq!(s.reason, "AlreadyExists");
    // A replace with the current resourceVersion succeeds; with a stale one, 409 Conflict.
    let mut b = a.clone();
    b.data = Some([("v".to_owned(), "2".to_owned())].into());
    let b = cms.replace("a", &PostParams::default(), &b).await.unwrap();
    assert_ne!(b.metadata.resource_version, a.metadata.resource_version);
    let e = cms
        .replace("a", &PostParams::default(), &a)
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 409);
    // A create carrying a resourceVersion is refused.
    let e = cms.create(&PostParams::default(), &b).await.unwrap_err();
    assert_eq!(status_code(&e), 400);
}

fn rustls_pem(pem: &str) -> Vec<u8> {
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64_decode(&b64)
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

#[tokio::test]
async fn lists_paginate_one_snapshot_and_expire_after_compaction() {
    let server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    namespace(&client, "t").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "t");
    for i in 0..7 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), "0"))
            .await
            .unwrap();
    }
    let first = cms.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(first.items.len(), 3);
    let token = first.metadata.continue_.clone().unwrap();
    assert_eq!(first.metadata.remaining_item_count, Some(4));
    // Changes after the first page do not show in the next ones.
    cms.delete("c5", &DeleteParams::default()).await.unwrap();
    cms.create(&PostParams::default(), &cm("c9", "0"))
        .await
        .unwrap();
    let second = cms
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    let names: Vec<_> = second
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["c3", "c4", "c5"]);
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    // An exact list at the first page's version shows that state too.
    let rv = first.metadata.resource_version.clone().unwrap();
    let exact = cms
        .list(
            &ListParams::default()
                .at(&rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap();
    assert_eq!(exact.items.len(), 7);
    // After compaction the token and the exact version are gone (410).
    server.compact();
    let e = cms
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 410);
    let e = cms
        .list(
            &ListParams::default()
                .at(&rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 410);
    // The latest list is current.
    let now = cms.list(&ListParams::default()).await.unwrap();
    let names: BTreeSet<_> = now
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert!(names.contains("c9") && !names.contains("c5"));
}

#[tokio::test]
async fn watches_resume_from_a_version_bookmark_and_report_gone() {
    let server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    namespace(&client, "t").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "t");
    let a = cms
        .create(&PostParams::default(), &cm("a", "0"))
        .await
        .unwrap();
    let from = a.metadata.resource_version.clone().unwrap();
    cms.create(&PostParams::default(), &cm("b", "0"))
        .await
        .unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let mut events = cms
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    while let Some(e) = events.try_next().await.unwrap() {
        match e {
            WatchEvent::Added(c) => seen.push(format!("ADDED {}", c.metadata.name.unwrap())),
            WatchEvent::Deleted(c) => seen.push(format!("DELETED {}", c.metadata.name.unwrap())),
            WatchEvent::Bookmark(b) => {
                assert_eq!(
                    b.metadata.resource_version,
                    server.resource_version().to_string()
                );
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["ADDED b", "DELETED a"]);
    // From a compacted version: HTTP 200, then one ERROR event with 410.
    server.compact();
    let mut events = cms
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    assert!(
        events.try_next().await.unwrap().is_none(),
        "the stream closes after the error"
    );
}

/// Drives a watcher into a reflector store until `done` holds for its names.
async fn converge<S>(
    stream: &mut S,
    store: &kube::runtime::reflector::Store<ConfigMap>,
    done: impl Fn(&BTreeSet<String>) -> bool,
) -> Vec<&'static str>
where
    S: futures_util::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin,
{
    let mut kinds = Vec::new();
    loop {
        let names: BTreeSet<String> = store
            .state()
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        if done(&names) && !kinds.is_empty() {
            return kinds;
        }
        match stream.next().await {
            Some(Ok(e)) => kinds.push(match e {
                watcher::Event::Init => "Init",
                watcher::Event::InitApply(_) => "InitApply",
                watcher::Event::InitDone => "InitDone",
                watcher::Event::Apply(_) => "Apply",
                watcher::Event::Delete(_) => "Delete",
            }),
            Some(Err(_)) => kinds.push("Error"),
            None => panic!("the watcher ended"),
        }
    }
}

#[tokio::test]
async fn the_kube_watcher_relists_after_gone_and_survives_restarts() {
    let mut server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    namespace(&client, "t").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "t");
    for i in 0..5 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), "0"))
            .await
            .unwrap();
    }
    let (reader, writer) = kube::runtime::reflector::store();
    let cfg = watcher::Config::default().page_size(2);
    let mut stream = kube::runtime::reflector(writer, watcher(cms.clone(), cfg)).boxed();
    let kinds = converge(&mut stream, &reader, |n| n.len() == 5).await;
    assert_eq!(
        kinds.iter().filter(|k| **k == "InitDone").count(),
        1,
        "{kinds:?}"
    );
    // A change the watch sees.
    cms.create(&PostParams::default(), &cm("c5", "0"))
        .await
        .unwrap();
    converge(&mut stream, &reader, |n| n.contains("c5")).await;
    // Forced relist: the watch ends, a change is made and the history compacted before the
    // watcher (not polled meanwhile) watches again from its version: 410, then a relist.
    server.drop_watches();
    cms.delete("c0", &DeleteParams::default()).await.unwrap();
    server.compact();
    let kinds = converge(&mut stream, &reader, |n| !n.contains("c0") && n.len() == 5).await;
    assert!(
        kinds.contains(&"Error") && kinds.contains(&"Init"),
        "relisted after 410: {kinds:?}"
    );
    // A restart keeping the state: the watch resumes.
    server.restart(Restart::KeepState).unwrap();
    cms.create(&PostParams::default(), &cm("c6", "0"))
        .await
        .unwrap();
    converge(&mut stream, &reader, |n| n.contains("c6")).await;
    // A restart losing the state: everything is gone and the watcher converges to empty.
    server.restart(Restart::LoseState).unwrap();
    namespace(&client, "t").await;
    cms.create(&PostParams::default(), &cm("fresh", "0"))
        .await
        .unwrap();
    converge(&mut stream, &reader, |n| {
        n.len() == 1 && n.contains("fresh")
    })
    .await;
}

#[tokio::test]
async fn streaming_lists_end_with_the_initial_events_bookmark() {
    let server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    namespace(&client, "t").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "t");
    for i in 0..3 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), "0"))
            .await
            .unwrap();
    }
    let (reader, writer) = kube::runtime::reflector::store();
    let mut stream = kube::runtime::reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().streaming_lists()),
    )
    .boxed();
    let kinds = converge(&mut stream, &reader, |n| n.len() == 3).await;
    assert_eq!(kinds.first(), Some(&"Init"));
    assert_eq!(kinds.last(), Some(&"InitDone"));
}

#[tokio::test]
async fn selectors_select_and_watches_follow_them() {
    let server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    namespace(&client, "t").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "t");
    pods.create(&PostParams::default(), &pod("a", "node-a"))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("b", "node-b"))
        .await
        .unwrap();
    let on_a = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields("spec.nodeName=node-a"))
        .await
        .unwrap();
    assert_eq!(on_a.items.len(), 1);
    assert_eq!(on_a.items[0].metadata.name.as_deref(), Some("a"));
    let e = pods
        .list(&ListParams::default().fields("spec.image=x"))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 400);
    let e = pods.create(&PostParams::default(), &serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"}, "spec": {"containers": []}
    })).unwrap()).await.unwrap_err();
    assert_eq!(status_code(&e), 422);
    // A watch with a label selector sees an object leave it as DELETED.
    let rv = on_a.metadata.resource_version.clone().unwrap();
    let mut events = pods
        .watch(&WatchParams::default().labels("app=web"), &rv)
        .await
        .unwrap()
        .boxed();
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Deleted(p)) => assert_eq!(p.metadata.name.as_deref(), Some("a")),
        other => panic!("expected DELETED, got {other:?}"),
    }
    // A pod bound to a node is deleted gracefully: it stays (terminating) until the kubelet
    // deletes it with a grace period of 0.
    pods.delete("b", &DeleteParams::default()).await.unwrap();
    let b = pods.get("b").await.unwrap();
    assert!(b.metadata.deletion_timestamp.is_some());
    pods.delete("b", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(status_code(&pods.get("b").await.unwrap_err()), 404);
}

#[tokio::test]
async fn server_side_apply_tracks_field_managers() {
    let server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    namespace(&client, "t").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "t");
    let apply = |data: serde_json::Value| {
        Patch::Apply(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": data}),
        )
    };
    // Apply creates.
    cms.patch(
        "x",
        &PatchParams::apply("one"),
        &apply(json!({"a": "1", "b": "1"})),
    )
    .await
    .unwrap();
    // Another manager changing a field "one" owns: 409 Conflict, unless forced.
    let e = cms
        .patch("x", &PatchParams::apply("two"), &apply(json!({"a": "2"})))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 409);
    let x = cms
        .patch(
            "x",
            &PatchParams::apply("two").force(),
            &apply(json!({"a": "2"})),
        )
        .await
        .unwrap();
    assert_eq!(x.data.as_ref().unwrap()["a"], "2");
    let managers: BTreeSet<_> = x
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| (m.manager.clone().unwrap(), m.operation.clone().unwrap()))
        .collect();
    assert_eq!(
        managers,
        [
            ("one".into(), "Apply".into()),
            ("two".into(), "Apply".into())
        ]
        .into()
    );
    // "one" applying without b removes b (it owned it alone); a is "two"'s now and stays.
    let x = cms
        .patch("x", &PatchParams::apply("one"), &apply(json!({})))
        .await
        .unwrap();
    assert_eq!(x.data.unwrap(), [("a".to_owned(), "2".to_owned())].into());
    // Apply needs a field manager.
    let e = cms
        .patch("x", &PatchParams::default(), &apply(json!({"a": "3"})))
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), 422);
}

#[tokio::test]
async fn injected_faults_fail_stall_and_restart() {
    let mut server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    let nss: Api<Namespace> = Api::all(client.clone());
    server.fail_requests(2);
    assert_eq!(
        status_code(&nss.list(&ListParams::default()).await.unwrap_err()),
        500
    );
    assert_eq!(
        status_code(&nss.list(&ListParams::default()).await.unwrap_err()),
        500
    );
    nss.list(&ListParams::default()).await.unwrap();
    // Stalled: a request does not complete until released.
    server.stall();
    let pending = tokio::spawn({
        let nss = nss.clone();
        async move {
            nss.list(&ListParams::default())
                .await
                .map(|l| l.items.len())
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!pending.is_finished(), "a stalled server answered");
    server.unstall();
    assert_eq!(pending.await.unwrap().unwrap(), 0);
    // Stopped: requests fail to connect; started again on the same port, they work.
    namespace(&client, "kept").await;
    server.stop();
    assert!(nss.list(&ListParams::default()).await.is_err());
    server.start().unwrap();
    assert_eq!(
        nss.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    assert!(server.requests()["get"] >= 5);
}

/// What kubectl reads before it writes: OpenAPI v3 says every resource's PATCH takes
/// `fieldValidation`, so kubectl sends `fieldValidation=Strict` and leaves checking to the
/// server, which then refuses a custom resource with a field its schema does not declare (and
/// prunes it under `Ignore`), and refuses a directive it does not know.
#[tokio::test]
async fn openapi_v3_offers_field_validation_and_strict_refuses_unknown_fields() {
    let server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_yaml::from_str(include_str!("../../deploy/crds/lace-cni.io_networks.yaml")).unwrap();
    Api::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let get = |path: &str| {
        let client = client.clone();
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        async move { client.request::<serde_json::Value>(req).await }
    };
    let root = get("/openapi/v3").await.unwrap();
    let url = root["paths"]["apis/lace-cni.io/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(root["paths"]["api/v1"].is_object(), "{root}");
    let doc = get(&url).await.unwrap();
    let patch = &doc["paths"]["/apis/lace-cni.io/v1alpha1/networks/{name}"]["patch"];
    assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Network");
    assert!(patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));

    let network = |name: &str| {
        json!({"apiVersion": "lace-cni.io/v1alpha1", "kind": "Network",
               "metadata": {"name": name},
               "spec": {"type": "l3", "bogus": 1,
                        "ipv4Subnet": {"prefix": "10.9.0.0/16", "hostLocalPrefixLength": 24}}})
    };
    let post = |name: &str, directive: &str| {
        let client = client.clone();
        let req = http::Request::post(format!(
            "/apis/lace-cni.io/v1alpha1/networks?fieldValidation={directive}"
        ))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&network(name)).unwrap())
        .unwrap();
        async move { client.request::<serde_json::Value>(req).await }
    };
    let e = post("strict", "Strict").await.unwrap_err();
    assert_eq!(status_code(&e), 400);
    assert!(
        e.to_string().contains("unknown field \"spec.bogus\""),
        "{e}"
    );
    let made = post("ignored", "Ignore").await.unwrap();
    assert!(made["spec"].get("bogus").is_none(), "pruned: {made}");
    assert_eq!(
        status_code(&post("odd", "Sometimes").await.unwrap_err()),
        400
    );
}

/// A CRD whose validation rules may cost more than the API server's budget is refused, as
/// kube-apiserver refuses it: lace's binding-policy CRD with the bound on selector values taken
/// away (as it was before they were bounded) is `422 Invalid`, naming the rule and the whole
/// schema's total; every committed lace CRD is accepted.
#[tokio::test]
async fn a_crd_over_the_cel_cost_budget_is_refused_and_lace_crds_are_accepted() {
    type Crd =
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    let crds: Api<Crd> = Api::all(client.clone());
    let text = include_str!("../../deploy/crds/lace-cni.io_networkbindingpolicies.yaml");
    let mut unbounded: serde_json::Value = serde_yaml::from_str(text).unwrap();
    let values = &mut unbounded["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        ["spec"]["properties"]["rules"]["items"]["properties"]["selector"]["properties"]
        ["matchExpressions"]["items"]["properties"]["values"]["items"];
    assert!(
        values
            .as_object_mut()
            .unwrap()
            .remove("maxLength")
            .is_some(),
        "the committed CRD bounds selector values: {values}"
    );
    let crd: Crd = serde_json::from_value(unbounded).unwrap();
    let e = crds.create(&PostParams::default(), &crd).await.unwrap_err();
    assert_eq!(status_code(&e), 422, "{e}");
    let message = e.to_string();
    assert!(
        message.contains(
            "properties[matchExpressions].items.properties[values].items.x-kubernetes-validations[0].rule: \
             Forbidden: estimated rule cost exceeds budget by factor of more than 100x"
        ),
        "{message}"
    );
    assert!(
        message.contains("estimated rule cost total for entire OpenAPIv3 schema"),
        "{message}"
    );
    assert!(crds
        .get_opt(&crd.metadata.name.clone().unwrap())
        .await
        .unwrap()
        .is_none());

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    let mut accepted = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        let crd: Crd = serde_yaml::from_str(&text).unwrap();
        crds.create(&PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("{:?} refused: {e}", crd.metadata.name));
        accepted += 1;
    }
    assert_eq!(accepted, 9);
}

/// Objects put in the store directly (a benchmark's large cluster) are what a client sees:
/// paginated lists and field selectors serve them, a watcher lists them and then follows new
/// ones; refusals are the API server's (missing namespace, name taken, unknown kind); none of
/// it counts as a request.
#[tokio::test]
async fn seeded_objects_are_listed_and_watched_but_not_counted() {
    let server = FakeApiServer::start_new().unwrap();
    let seed_pod = |i: usize| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p{i:04}"), "namespace": "s"},
            "spec": {"nodeName": format!("node-{}", i % 3),
                "containers": [{"name": "c", "image": "busybox"}]},
        })
    };
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "s"}});
    let created = server
        .create_objects(std::iter::once(ns).chain((0..1200).map(seed_pod)))
        .unwrap();
    assert_eq!(created.len(), 1201);
    let uids: BTreeSet<&str> = created
        .iter()
        .map(|o| o["metadata"]["uid"].as_str().unwrap())
        .collect();
    assert_eq!(uids.len(), 1201);
    assert_eq!(created[1]["status"]["phase"], "Pending");
    assert!(server.requests().is_empty(), "{:?}", server.requests());

    let (client, _dir) = client_for(&server).await;
    let pods: Api<Pod> = Api::all(client.clone());
    let mut names = BTreeSet::new();
    let mut pages = 0;
    let mut lp = ListParams::default()
        .fields("spec.nodeName=node-1")
        .limit(150);
    loop {
        let page = pods.list(&lp).await.unwrap();
        pages += 1;
        names.extend(page.items.into_iter().map(|p| p.metadata.name.unwrap()));
        match page.metadata.continue_ {
            Some(t) if !t.is_empty() => lp = lp.continue_token(&t),
            _ => break,
        }
    }
    assert_eq!(names.len(), 400);
    assert!(names
        .iter()
        .all(|n| n[1..].parse::<usize>().unwrap() % 3 == 1));
    assert_eq!(pages, 3);

    let mut w = watcher(
        pods.clone(),
        watcher::Config::default().fields("spec.nodeName=node-1"),
    )
    .boxed();
    let mut listed = 0;
    loop {
        match w.try_next().await.unwrap().unwrap() {
            watcher::Event::InitApply(_) => listed += 1,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(listed, 400);
    server.create_objects([seed_pod(1201)]).unwrap();
    match w.try_next().await.unwrap().unwrap() {
        watcher::Event::Apply(p) => assert_eq!(p.metadata.name.as_deref(), Some("p1201")),
        other => panic!("expected the seeded pod's Apply, got {other:?}"),
    }

    let refused = |objects: Vec<serde_json::Value>| server.create_objects(objects).unwrap_err();
    let mut elsewhere = seed_pod(5000);
    elsewhere["metadata"]["namespace"] = json!("nowhere");
    let e = refused(vec![seed_pod(5001), elsewhere]);
    assert_eq!((e.index, e.code, e.reason), (1, 404, "NotFound"));
    assert_eq!(e.what, "Pod nowhere/p5000");
    assert_eq!(refused(vec![seed_pod(3)]).code, 409);
    let e = refused(vec![
        json!({"apiVersion": "v9", "kind": "Pod", "metadata": {"name": "x"}}),
    ]);
    assert_eq!(e.code, 400);
    // The first of the refused batch was created.
    assert!(Api::<Pod>::namespaced(client.clone(), "s")
        .get_opt("p5001")
        .await
        .unwrap()
        .is_some());
}

/// The request counter counts what reaches the server, one per request, by verb: a list and a
/// get are `get`, a watch is `watch` however long it streams.
#[tokio::test]
async fn requests_are_counted_one_each_by_verb() {
    let server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    namespace(&client, "t").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "t");
    cms.create(&PostParams::default(), &cm("a", "1"))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("b", "1"))
        .await
        .unwrap();
    cms.list(&ListParams::default()).await.unwrap();
    let mut a = cms.get("a").await.unwrap();
    a.data = Some([("v".to_owned(), "2".to_owned())].into());
    cms.replace("a", &PostParams::default(), &a).await.unwrap();
    cms.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "3"}})),
    )
    .await
    .unwrap();
    cms.delete("b", &DeleteParams::default()).await.unwrap();
    let mut events = cms
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap()
        .boxed();
    // The watch streams the one object left, then ends at its timeout: still one request.
    let mut streamed = 0;
    while let Some(e) = events.try_next().await.unwrap() {
        if matches!(e, WatchEvent::Added(_)) {
            streamed += 1;
        }
    }
    assert_eq!(streamed, 1);
    let expected: std::collections::BTreeMap<String, u64> = [
        ("create", 3),
        ("get", 2),
        ("update", 1),
        ("patch", 1),
        ("delete", 1),
        ("watch", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(server.requests(), expected);
}
