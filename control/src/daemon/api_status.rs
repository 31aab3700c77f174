//! Kubernetes mode's status sink: what `lace-control status` shows, also written to the
//! objects themselves — each Network's `status` (`id`, conditions), each NetworkBindingPolicy's
//! and NetworkRoutingPolicy's conditions — with server-side apply of the `status` subresource
//! under the field manager `lace-control`, so `kubectl get networks -o yaml` and `kubectl
//! describe` show them.
//!
//! Every node's control derives these from the same objects and the same allocation state, so
//! they apply the same values under the one field manager (forced: a manager taking back its
//! own fields); an object is applied again only when its status changed since this sink last
//! applied it. A failed apply (API unreachable, object just deleted) is logged and retried at
//! the next publication; the wrapped sink (the status file) is always written first.

use std::collections::BTreeMap;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};

use super::status::{StatusFile, StatusSink};
use crate::api::{Network, NetworkBindingPolicy, NetworkRoutingPolicy};
use crate::source::kubernetes::{KubernetesConfig, KubernetesError};

/// The field manager of everything control writes.
pub const FIELD_MANAGER: &str = "lace-control";

/// Applies each object's status to the API server, after `inner`.
#[derive(Debug)]
pub struct ApiStatusSink<S> {
    inner: S,
    runtime: tokio::runtime::Runtime,
    apis: [(&'static str, Api<DynamicObject>); 3],
    /// The status last applied per (kind, name).
    applied: BTreeMap<(&'static str, String), Value>,
}

impl<S: StatusSink> ApiStatusSink<S> {
    /// Connects as `kube` says; `inner` keeps receiving the whole status.
    pub fn new(kube: &KubernetesConfig, inner: S) -> Result<Self, KubernetesError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(KubernetesError::Runtime)?;
        let client = runtime.block_on(crate::source::kubernetes::client(kube))?;
        let api = |ar: ApiResource| Api::<DynamicObject>::all_with(client.clone(), &ar);
        let apis = [
            ("Network", api(ApiResource::erase::<Network>(&()))),
            (
                "NetworkBindingPolicy",
                api(ApiResource::erase::<NetworkBindingPolicy>(&())),
            ),
            (
                "NetworkRoutingPolicy",
                api(ApiResource::erase::<NetworkRoutingPolicy>(&())),
            ),
        ];
        Ok(Self {
            inner,
            runtime,
            apis,
            applied: BTreeMap::new(),
        })
    }
}

impl<S: StatusSink> StatusSink for ApiStatusSink<S> {
    fn publish(&mut self, status: &StatusFile) -> Result<(), crate::fsio::WriteError> {
        self.inner.publish(status)?;
        let mut wanted: Vec<(&'static str, String, Value)> = Vec::new();
        for n in &status.networks {
            let s = serde_json::to_value(&n.status).unwrap_or_default();
            wanted.push(("Network", n.name.clone(), s));
        }
        for (kind, entries) in [
            ("NetworkBindingPolicy", &status.binding_policies),
            ("NetworkRoutingPolicy", &status.routing_policies),
        ] {
            for e in entries {
                wanted.push((kind, e.name.clone(), json!({"conditions": e.conditions})));
            }
        }
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        for (kind, name, s) in wanted {
            let key = (kind, name);
            if self.applied.get(&key) == Some(&s) {
                continue;
            }
            let Some((_, api)) = self.apis.iter().find(|(k, _)| *k == kind) else {
                continue;
            };
            let body = json!({
                "apiVersion": "lace-cni.io/v1alpha1",
                "kind": kind,
                "metadata": {"name": key.1},
                "status": s,
            });
            match self
                .runtime
                .block_on(api.patch_status(&key.1, &pp, &Patch::Apply(body)))
            {
                Ok(_) => {
                    self.applied.insert(key, s);
                }
                Err(e) => {
                    tracing::warn!(
                        "{kind} {}: cannot apply its status: {e}; retrying at the next change",
                        key.1
                    );
                    self.applied.remove(&key);
                }
            }
        }
        Ok(())
    }
}
