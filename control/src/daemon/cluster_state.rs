//! The allocation state kept in the API server (Kubernetes mode): [`ClusterState`], an
//! [`IpamStore`](super::control::IpamStore) whose writes are optimistic-concurrency updates of
//! one object, so that several nodes' controls never hand out the same network id, node id,
//! locator, block, address, MAC or endpoint id (ADR 0015).
//!
//! The state ([`crate::ipam::IpamState`], the same document the standalone state file holds)
//! lives in the ConfigMap `lace-ipam` (key `state.json`) of control's namespace.
//!
//! - [`ClusterState::open`] reads it (absent: a first start, an empty state) — a restarted
//!   control re-reads everything and reallocates nothing.
//! - `mutate(f)` runs `f` on the state as last read and writes the result with the
//!   resourceVersion it was read at (create-if-absent the first time). `409 Conflict` /
//!   `AlreadyExists` means another control wrote in between: the state is read again and `f`
//!   runs again on it — so two controls' allocations are serialised by the API server, never
//!   merged blindly.
//! - `refresh` reads the object and reloads the state when its resourceVersion moved.
//! - A content that does not parse or contradicts the configuration is an error naming the
//!   object, never replaced by an empty state.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

use crate::ipam::{Ipam, IpamConfig, IpamError, IpamState};
use crate::source::kubernetes::KubernetesConfig;

use super::control::IpamStore;
use super::state::StateError;

/// The object's name.
pub const OBJECT: &str = "lace-ipam";
/// The key of the state in its `data`.
pub const KEY: &str = "state.json";

/// The state in the API server, and this control's copy of it.
#[derive(Debug)]
pub struct ClusterState {
    runtime: tokio::runtime::Runtime,
    api: Api<ConfigMap>,
    namespace: String,
    config: IpamConfig,
    ipam: Ipam,
    /// The resourceVersion `ipam` was read or written at; `None`: the object does not exist.
    version: Option<String>,
    /// Writes that met a conflict and were redone (for tests and figures).
    conflicts: u64,
}

impl ClusterState {
    /// Connects as `kube` says and reads the state from `namespace` (empty when the object
    /// does not exist yet). The client runs on this store's own runtime.
    pub fn open(
        kube: &KubernetesConfig,
        namespace: &str,
        config: IpamConfig,
    ) -> Result<ClusterState, StateError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StateError::Api {
                namespace: namespace.to_owned(),
                op: "start the client runtime",
                reason: e.to_string(),
            })?;
        let client = runtime
            .block_on(crate::source::kubernetes::client(kube))
            .map_err(|e| StateError::Api {
                namespace: namespace.to_owned(),
                op: "connect",
                reason: e.to_string(),
            })?;
        let mut s = ClusterState {
            api: Api::namespaced(client, namespace),
            runtime,
            namespace: namespace.to_owned(),
            config,
            ipam: Ipam::new(config)?,
            version: None,
            conflicts: 0,
        };
        s.reload()?;
        Ok(s)
    }

    fn api_error(&self, op: &'static str, e: &kube::Error) -> StateError {
        StateError::Api {
            namespace: self.namespace.clone(),
            op,
            reason: e.to_string(),
        }
    }

    /// Reads the object; whether it changed since last read or written.
    fn reload(&mut self) -> Result<bool, StateError> {
        let got = self.runtime.block_on(self.api.get_opt(OBJECT));
        let cm = got.map_err(|e| self.api_error("get", &e))?;
        let Some(cm) = cm else {
            let changed = self.version.is_some();
            if changed {
                self.ipam = Ipam::new(self.config)?;
                self.version = None;
            }
            return Ok(changed);
        };
        let version = cm.metadata.resource_version.clone();
        if version == self.version {
            return Ok(false);
        }
        let corrupt = |reason: String| StateError::ApiCorrupt {
            namespace: self.namespace.clone(),
            reason,
        };
        let text = cm
            .data
            .as_ref()
            .and_then(|d| d.get(KEY))
            .ok_or_else(|| corrupt(format!("data.{KEY} is missing")))?;
        let state: IpamState =
            serde_json::from_str(text).map_err(|e| corrupt(format!("data.{KEY}: {e}")))?;
        self.ipam = Ipam::from_state(&state, self.config)
            .map_err(|e| corrupt(format!("data.{KEY}: {e}")))?;
        self.version = version;
        Ok(true)
    }

    /// Writes `ipam` conditionally on the version it was derived from; `Ok(false)` on a
    /// conflict (nothing written).
    fn write(&mut self, ipam: &Ipam) -> Result<bool, StateError> {
        let json = serde_json::to_string(&ipam.to_state()).map_err(|e| StateError::ApiCorrupt {
            namespace: self.namespace.clone(),
            reason: format!("cannot serialise the state: {e}"),
        })?;
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(OBJECT.into());
        cm.metadata.resource_version = self.version.clone();
        cm.data = Some([(KEY.to_owned(), json)].into());
        let pp = PostParams {
            field_manager: Some("lace-control".into()),
            ..PostParams::default()
        };
        let result = match &self.version {
            None => self.runtime.block_on(self.api.create(&pp, &cm)),
            Some(_) => self.runtime.block_on(self.api.replace(OBJECT, &pp, &cm)),
        };
        match result {
            Ok(written) => {
                self.version = written.metadata.resource_version;
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(self.api_error(
                if self.version.is_none() {
                    "create"
                } else {
                    "update"
                },
                &e,
            )),
        }
    }

    /// Writes redone after a conflict since this store was opened.
    pub fn conflicts(&self) -> u64 {
        self.conflicts
    }
}

impl IpamStore for ClusterState {
    fn refresh(&mut self) -> Result<bool, StateError> {
        self.reload()
    }

    fn read<R>(&self, f: impl FnOnce(&Ipam) -> R) -> R {
        f(&self.ipam)
    }

    fn mutate<R>(
        &mut self,
        mut f: impl FnMut(&mut Ipam) -> Result<R, IpamError>,
    ) -> Result<R, StateError> {
        loop {
            let mut next = self.ipam.clone();
            let before = next.generation();
            let out = f(&mut next)?;
            if next.generation() == before {
                return Ok(out);
            }
            if self.write(&next)? {
                self.ipam = next;
                return Ok(out);
            }
            // Another control wrote first: start again from what it wrote.
            self.conflicts += 1;
            self.reload()?;
        }
    }
}
