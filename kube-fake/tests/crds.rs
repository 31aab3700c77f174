//! lace's CRDs (`deploy/crds`, what `crdgen` emits) installed in the fake API server: the
//! server itself enforces their schemas and CEL rules on every write, keeps status apart, and
//! prunes unknown fields.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::Client;
use lace_kube_fake::FakeApiServer;
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

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    }
}

async fn install_crds(client: &Client) -> usize {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        // deploy/crds also holds its kustomization (`Kustomization`), which is no CRD.
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        let crd: DynamicObject = serde_yaml::from_str(&text).unwrap();
        let created = crds.create(&PostParams::default(), &crd).await.unwrap();
        let established = created.data["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        assert!(established, "{:?} not established", created.metadata.name);
        n += 1;
    }
    n
}

fn networks(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("lace-cni.io", "v1alpha1", "Network"),
            "networks",
        ),
    )
}

fn network(name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "lace-cni.io/v1alpha1", "kind": "Network",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn every_crd_installs_and_its_rules_are_enforced_by_the_server() {
    let server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    assert_eq!(install_crds(&client).await, 9);
    let nets = networks(&client);
    let good = json!({"type": "l3", "ipv4Subnet": {"prefix": "10.1.0.0/16", "hostLocalPrefixLength": 24}, "unknownField": 1});
    let created = nets
        .create(&PostParams::default(), &network("blue", good))
        .await
        .unwrap();
    // Unknown fields are pruned, as the real server does.
    assert!(created.data["spec"].get("unknownField").is_none());
    // A CEL rule on create.
    let e = api_error(
        nets.create(
            &PostParams::default(),
            &network(
                "bad",
                json!({"type": "l3", "ipv4Subnet": {"prefix": "10.1.0.1/16"}}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.contains("spec.ipv4Subnet.prefix"),
        "{}",
        e.message
    );
    // A structural error (enum).
    let e = api_error(
        nets.create(
            &PostParams::default(),
            &network("bad", json!({"type": "l9"})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    // A transition rule: spec.type is immutable — refused by the API server itself.
    let e = api_error(
        nets.patch(
            "blue",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "l2", "ipv4Subnet": null}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("spec.type is immutable"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn status_is_a_subresource_written_with_server_side_apply() {
    let server = FakeApiServer::start_new().unwrap();
    let (client, _dir) = client_for(&server).await;
    install_crds(&client).await;
    let nets = networks(&client);
    nets.create(
        &PostParams::default(),
        &network("blue", json!({"type": "l3", "ipv4Subnet": {"prefix": "10.1.0.0/16", "hostLocalPrefixLength": 24}})),
    )
    .await
    .unwrap();
    // Status in a write of the object is ignored.
    let n = nets
        .patch(
            "blue",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"id": 7}})),
        )
        .await
        .unwrap();
    assert!(n.data.get("status").is_none());
    let generation = n.metadata.generation;
    // Applied to the status subresource it is kept, and does not bump the generation.
    let applied = json!({
        "apiVersion": "lace-cni.io/v1alpha1", "kind": "Network",
        "metadata": {"name": "blue"}, "status": {"id": 7},
    });
    let n = nets
        .patch_status(
            "blue",
            &PatchParams::apply("lace-control"),
            &Patch::Apply(applied),
        )
        .await
        .unwrap();
    assert_eq!(n.data["status"]["id"], 7);
    assert_eq!(n.metadata.generation, generation);
    let entry = n
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|m| m.manager.as_deref() == Some("lace-control"))
        .unwrap();
    assert_eq!(entry.subresource.as_deref(), Some("status"));
    // A status the schema refuses is refused (status.id is an integer).
    let bad = json!({
        "apiVersion": "lace-cni.io/v1alpha1", "kind": "Network",
        "metadata": {"name": "blue"}, "status": {"id": "seven"},
    });
    let e = api_error(
        nets.patch_status(
            "blue",
            &PatchParams::apply("lace-control"),
            &Patch::Apply(bad),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
}
