//! What `lace-cni` reads besides the CNI parameters themselves: lace's own keys of the network
//! configuration and the Kubernetes keys of `CNI_ARGS` (the pod's namespace, name and UID).
//!
//! The lace keys of a network configuration (all optional):
//!
//! ```json
//! {
//!   "cniVersion": "1.1.0", "name": "lace", "type": "lace-cni",
//!   "controlSocket": "/run/lace/control.sock",
//!   "connectTimeoutMs": 2000,
//!   "requestTimeoutMs": 5000,
//!   "attachTimeoutMs": 20000
//! }
//! ```
//!
//! The defaults stay well below kubelet's own CNI deadline, so a plugin that cannot reach
//! `lace-control` answers "try again later" instead of being killed mid-way. Keys this module
//! does not know are left alone: runtimes and meta-plugins add their own.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::proto;

/// Default for `connectTimeoutMs`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default for `requestTimeoutMs`: every request but Attach.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Default for `attachTimeoutMs`: Attach waits until the forwarder reports the port up.
pub const DEFAULT_ATTACH_TIMEOUT: Duration = Duration::from_secs(20);
/// The largest timeout accepted: kubelet gives a whole sandbox setup about two minutes.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(110);

/// A network configuration key or a `CNI_ARGS` value that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A lace key holds a value of the wrong type.
    #[error("network configuration: key \"{key}\" is invalid ({reason}); {fix}")]
    BadKey {
        /// The key.
        key: &'static str,
        /// What serde said.
        reason: String,
        /// How to fix it.
        fix: &'static str,
    },
    /// A timeout is zero or larger than [`MAX_TIMEOUT`].
    #[error(
        "network configuration: \"{key}\" is {value} ms; use a value from 1 to {max} ms \
         (kubelet's own CNI deadline must stay above it)"
    )]
    TimeoutOutOfRange {
        /// The key.
        key: &'static str,
        /// The value given.
        value: u64,
        /// [`MAX_TIMEOUT`] in milliseconds.
        max: u128,
    },
    /// `controlSocket` is empty.
    #[error("network configuration: \"controlSocket\" is empty; give the path of lace-control's socket (default {})", proto::DEFAULT_SOCKET)]
    EmptySocket,
    /// A `CNI_ARGS` entry is not `KEY=VALUE`.
    #[error("CNI_ARGS: entry \"{0}\" is not KEY=VALUE; separate entries with ';' (e.g. K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0)")]
    BadArgsEntry(String),
}

/// lace's keys of the network configuration, with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginConfig {
    /// `controlSocket`: where `lace-control` listens.
    pub control_socket: PathBuf,
    /// `connectTimeoutMs`: how long to wait for the connection to control.
    pub connect_timeout: Duration,
    /// `requestTimeoutMs`: the whole round trip of a request other than Attach.
    pub request_timeout: Duration,
    /// `attachTimeoutMs`: the whole round trip of Attach.
    pub attach_timeout: Duration,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            control_socket: PathBuf::from(proto::DEFAULT_SOCKET),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            attach_timeout: DEFAULT_ATTACH_TIMEOUT,
        }
    }
}

impl PluginConfig {
    /// Reads lace's keys from the configuration keys the CNI library did not know
    /// (`NetConf::custom`).
    pub fn from_custom(custom: &HashMap<String, Value>) -> Result<PluginConfig, ConfigError> {
        let mut config = PluginConfig::default();
        if let Some(v) = custom.get("controlSocket") {
            let path: String = typed(v, "controlSocket", "give a path string")?;
            if path.is_empty() {
                return Err(ConfigError::EmptySocket);
            }
            config.control_socket = PathBuf::from(path);
        }
        for (key, slot) in [
            ("connectTimeoutMs", &mut config.connect_timeout),
            ("requestTimeoutMs", &mut config.request_timeout),
            ("attachTimeoutMs", &mut config.attach_timeout),
        ] {
            if let Some(v) = custom.get(key) {
                let ms: u64 = typed(v, key, "give a whole number of milliseconds")?;
                let d = Duration::from_millis(ms);
                if ms == 0 || d > MAX_TIMEOUT {
                    return Err(ConfigError::TimeoutOutOfRange {
                        key,
                        value: ms,
                        max: MAX_TIMEOUT.as_millis(),
                    });
                }
                *slot = d;
            }
        }
        Ok(config)
    }
}

fn typed<T: for<'de> Deserialize<'de>>(
    v: &Value,
    key: &'static str,
    fix: &'static str,
) -> Result<T, ConfigError> {
    T::deserialize(v).map_err(|e| ConfigError::BadKey {
        key,
        reason: e.to_string(),
        fix,
    })
}

/// The Kubernetes keys of `CNI_ARGS` kubelet passes (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`,
/// `K8S_POD_UID`); other keys, such as `IgnoreUnknown` or `K8S_POD_INFRA_CONTAINER_ID`, are
/// accepted and ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodArgs {
    /// `K8S_POD_NAMESPACE`, empty when absent.
    pub namespace: String,
    /// `K8S_POD_NAME`, empty when absent.
    pub name: String,
    /// `K8S_POD_UID`, empty when absent (runtimes other than kubelet may not pass it).
    pub uid: String,
}

impl PodArgs {
    /// Parses `CNI_ARGS` (`KEY=VALUE` entries separated by `;`; empty entries are skipped).
    pub fn parse(cni_args: Option<&str>) -> Result<PodArgs, ConfigError> {
        let mut args = PodArgs::default();
        for entry in cni_args.unwrap_or("").split(';') {
            if entry.is_empty() {
                continue;
            }
            let Some((key, value)) = entry.split_once('=') else {
                return Err(ConfigError::BadArgsEntry(entry.to_string()));
            };
            match key {
                "K8S_POD_NAMESPACE" => args.namespace = value.to_string(),
                "K8S_POD_NAME" => args.name = value.to_string(),
                "K8S_POD_UID" => args.uid = value.to_string(),
                _ => {}
            }
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn custom(v: Value) -> HashMap<String, Value> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn defaults_apply_when_keys_are_absent() {
        let c = PluginConfig::from_custom(&custom(json!({"somethingElse": 1}))).unwrap();
        assert_eq!(c, PluginConfig::default());
        assert_eq!(c.control_socket, PathBuf::from(proto::DEFAULT_SOCKET));
        assert!(c.connect_timeout < c.attach_timeout);
    }

    #[test]
    fn lace_keys_are_read() {
        let c = PluginConfig::from_custom(&custom(json!({
            "controlSocket": "/tmp/x.sock",
            "connectTimeoutMs": 100,
            "requestTimeoutMs": 200,
            "attachTimeoutMs": 300
        })))
        .unwrap();
        assert_eq!(c.control_socket, PathBuf::from("/tmp/x.sock"));
        assert_eq!(c.connect_timeout, Duration::from_millis(100));
        assert_eq!(c.request_timeout, Duration::from_millis(200));
        assert_eq!(c.attach_timeout, Duration::from_millis(300));
    }

    #[test]
    fn bad_values_name_the_key_and_the_fix() {
        let e = PluginConfig::from_custom(&custom(json!({"attachTimeoutMs": "soon"})))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("attachTimeoutMs") && e.contains("milliseconds"),
            "{e}"
        );
        let e = PluginConfig::from_custom(&custom(json!({"connectTimeoutMs": 0}))).unwrap_err();
        assert!(matches!(
            e,
            ConfigError::TimeoutOutOfRange {
                key: "connectTimeoutMs",
                ..
            }
        ));
        let e =
            PluginConfig::from_custom(&custom(json!({"requestTimeoutMs": 3_600_000}))).unwrap_err();
        assert!(matches!(
            e,
            ConfigError::TimeoutOutOfRange {
                key: "requestTimeoutMs",
                ..
            }
        ));
        let e = PluginConfig::from_custom(&custom(json!({"controlSocket": ""}))).unwrap_err();
        assert_eq!(e, ConfigError::EmptySocket);
        let e = PluginConfig::from_custom(&custom(json!({"controlSocket": 7}))).unwrap_err();
        assert!(matches!(
            e,
            ConfigError::BadKey {
                key: "controlSocket",
                ..
            }
        ));
    }

    #[test]
    fn cni_args_give_the_pod() {
        let a = PodArgs::parse(Some(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-blue;K8S_POD_NAME=web-0;\
             K8S_POD_UID=7d3b2c1a-0000-4000-8000-000000000001;K8S_POD_INFRA_CONTAINER_ID=x",
        ))
        .unwrap();
        assert_eq!(a.namespace, "team-blue");
        assert_eq!(a.name, "web-0");
        assert_eq!(a.uid, "7d3b2c1a-0000-4000-8000-000000000001");
        assert_eq!(PodArgs::parse(Some("K8S_POD_NAME=a")).unwrap().uid, "");
        assert_eq!(PodArgs::parse(None).unwrap(), PodArgs::default());
        assert_eq!(PodArgs::parse(Some("")).unwrap(), PodArgs::default());
        assert_eq!(
            PodArgs::parse(Some("K8S_POD_NAME=a;oops")).unwrap_err(),
            ConfigError::BadArgsEntry("oops".into())
        );
    }
}
