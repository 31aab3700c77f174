//! The protocol between `lace-cni` and `lace-control`: one JSON request and one JSON response
//! per connection on a unix socket (default [`DEFAULT_SOCKET`]), each a single line.
//!
//! An ADD is two round trips, so that control never waits on a half-made interface and the
//! plugin never publishes anything itself:
//!
//! 1. [`Request::Allocate`]: control binds the pod to a network, allocates its addresses
//!    (idempotent per (container id, interface): a retried ADD gets the same answer), and
//!    chooses the port id, MAC, MTU and host-side interface name.
//! 2. The plugin creates the interface pair, moves one end into the pod and configures it.
//! 3. [`Request::Attach`]: control publishes the port and its routes to the forwarder and waits
//!    (bounded) until the forwarder reports the port up.
//!
//! Errors carry a CNI error code ([`ErrorCode`]) so the plugin can return them as is.

use serde::{Deserialize, Serialize};

/// Where `lace-control` listens by default.
pub const DEFAULT_SOCKET: &str = "/run/lace/control.sock";

/// Identifies the pod and interface of a CNI call.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `K8S_POD_NAMESPACE` from `CNI_ARGS`.
    #[serde(default)]
    pub pod_namespace: String,
    /// `K8S_POD_NAME` from `CNI_ARGS`.
    #[serde(default)]
    pub pod_name: String,
    /// `K8S_POD_UID` from `CNI_ARGS`; empty when the runtime passes none. Control refuses an
    /// ADD whose UID is not the observed Pod's, and a DEL or CHECK whose UID is not the one
    /// its attachment was made for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_uid: String,
    /// `CNI_NETNS` (a path).
    #[serde(default)]
    pub netns: String,
}

/// A request from the plugin.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Request {
    /// Bind and allocate (ADD, step 1).
    Allocate(Attachment),
    /// The interface exists: publish it and wait until it forwards (ADD, step 3).
    Attach(Attachment),
    /// Release everything of the attachment; succeeds when there is nothing to release.
    Release(Attachment),
    /// What control has for the attachment (CHECK).
    Check(Attachment),
    /// Whether control is ready to take ADDs (STATUS).
    Status,
    /// Release every attachment not in this list (GC).
    Gc {
        /// The attachments the runtime still knows.
        valid: Vec<Attachment>,
    },
}

/// An address of the pod interface with its gateway.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct IpConfig {
    /// Address with prefix length (`10.40.3.7/24`).
    pub address: String,
    /// The gateway (first address of the block / prefix).
    pub gateway: String,
}

/// A route to install in the pod.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RouteConfig {
    /// Destination CIDR.
    pub dst: String,
    /// Gateway.
    pub gw: String,
}

/// What the plugin configures for an attachment.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Allocation {
    /// The network the pod is bound to.
    pub network: String,
    /// Host-side interface name (created by the plugin, attached by the forwarder).
    pub host_interface: String,
    /// MAC of the pod interface.
    pub mac: String,
    /// MTU of the pod interface (underlay MTU − encapsulation).
    pub mtu: u16,
    /// Addresses.
    pub ips: Vec<IpConfig>,
    /// Routes.
    pub routes: Vec<RouteConfig>,
    /// The gateway's MAC, for a static neighbor entry in the pod (saves the first ARP/NDP).
    pub gateway_mac: String,
    /// Allocate only: whether this request made the lease (`false`: an earlier ADD of the same
    /// container and interface did, so a failing ADD must not release it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fresh: bool,
}

impl Allocation {
    /// Whether `other` configures the same interface (everything but [`Allocation::fresh`]).
    pub fn same_interface(&self, other: &Allocation) -> bool {
        Allocation {
            fresh: other.fresh,
            ..self.clone()
        } == *other
    }
}

/// CNI error codes (CNI spec 1.1, "Error").
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ErrorCode {
    /// 7: invalid network configuration (bad configuration or request).
    InvalidConfig,
    /// 4: invalid environment variables / arguments.
    InvalidArgs,
    /// 11: try again later (control not ready, forwarder not up yet).
    TryAgainLater,
    /// 102 (lace's range; the CNI spec requires an error but names no code): the container
    /// has an interface by that name already with another configuration, or the attachment
    /// exists for another pod or network.
    AlreadyExists,
    /// 100: no network binds the pod (lace's own range, ≥ 100).
    Unbound,
    /// 101: the network has no address left.
    AddressesExhausted,
    /// 999: anything else.
    Internal,
}

impl ErrorCode {
    /// The numeric CNI code.
    pub fn code(self) -> u32 {
        match self {
            ErrorCode::InvalidConfig => 7,
            ErrorCode::InvalidArgs => 4,
            ErrorCode::TryAgainLater => 11,
            ErrorCode::AlreadyExists => 102,
            ErrorCode::Unbound => 100,
            ErrorCode::AddressesExhausted => 101,
            ErrorCode::Internal => 999,
        }
    }
}

/// A response from control.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum Response {
    /// The allocation (Allocate, Attach, Check).
    Allocated(Allocation),
    /// Done, nothing to return (Release, Gc, Status).
    Ok,
    /// Failed.
    Error {
        /// CNI error code.
        code: ErrorCode,
        /// Message naming the object and the fix.
        msg: String,
        /// Details.
        #[serde(default)]
        details: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_round_trip_as_single_lines() {
        let a = Attachment {
            container_id: "abc".into(),
            ifname: "eth0".into(),
            pod_namespace: "team-blue".into(),
            pod_name: "web-0".into(),
            pod_uid: "7d3b2c1a-0000-4000-8000-000000000001".into(),
            netns: "/var/run/netns/x".into(),
        };
        for r in [
            Request::Allocate(a.clone()),
            Request::Attach(a.clone()),
            Request::Release(a.clone()),
            Request::Check(a.clone()),
            Request::Status,
            Request::Gc { valid: vec![a] },
        ] {
            let line = serde_json::to_string(&r).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), r);
        }
        let e = Response::Error {
            code: ErrorCode::AddressesExhausted,
            msg: "Network backend: no address left".into(),
            details: String::new(),
        };
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<Response>(&line).unwrap(), e);
        assert_eq!(ErrorCode::AlreadyExists.code(), 102);
        assert_eq!(ErrorCode::InvalidArgs.code(), 4);
        assert_eq!(ErrorCode::InvalidConfig.code(), 7);
    }
}
