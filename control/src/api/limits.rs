//! Size limits of the API. [`super::validate`] refuses what exceeds them, and the CRDs carry
//! them as `maxItems`/`maxLength`/`maxProperties` ([`super::crd`]), which also bounds the
//! estimated cost of their validation rules as the API server requires.

/// `NetworkBindingPolicy.spec.rules`.
pub const MAX_RULES: usize = 64;
/// `matchExpressions` of one selector.
pub const MAX_REQUIREMENTS: usize = 16;
/// `values` of one selector requirement. With [`MAX_RULES`] and [`MAX_REQUIREMENTS`] this is how
/// many times the API server counts the label-value rule of a binding policy's selector:
/// 64 × 16 × 32 runs of a 92-unit rule keep it within a third of its per-rule budget (ADR 0033).
pub const MAX_VALUES: usize = 32;
/// `matchLabels` of one selector.
pub const MAX_LABELS: usize = 32;
/// `Network.spec.externalPrefixes`, `NetworkRoutingPolicy.spec.destination.prefixes`.
pub const MAX_PREFIXES: usize = 64;
/// `Network.spec.uplinks`.
pub const MAX_UPLINKS: usize = 16;
/// `staticRoutes` of one uplink.
pub const MAX_STATIC_ROUTES: usize = 64;
/// `NetworkRoutingPolicy.spec.sources`.
pub const MAX_SOURCES: usize = 64;
/// `NetworkEndpoint.spec.addresses`, `Allocation.spec.prefixes`.
pub const MAX_ENDPOINT_ADDRESSES: usize = 8;
/// `celExpression`, in characters.
pub const MAX_CEL_LENGTH: usize = 4096;
/// An address or CIDR string (the longest IPv6 CIDR has 43 characters).
pub const MAX_ADDRESS_LENGTH: usize = 64;
/// A CNI container id or a pod UID, in characters (runtimes use 64 hex digits and 36-character
/// UUIDs).
pub const MAX_UID_LENGTH: usize = 256;

/// A label key: an optional DNS-subdomain prefix (253) and `/`, then a name (63).
pub const MAX_LABEL_KEY_LENGTH: usize = 317;
/// A label value.
pub const MAX_LABEL_VALUE_LENGTH: usize = 63;
/// A selector requirement's operator (`DoesNotExist` is the longest).
pub const MAX_OPERATOR_LENGTH: usize = 12;
/// A Linux interface name (`IFNAMSIZ` − 1).
pub const MAX_INTERFACE_NAME_LENGTH: usize = 15;
/// A sticky l2 identity: a DNS-1123 label.
pub const MAX_IDENTITY_LENGTH: usize = 63;
/// An RFC 3339 timestamp as the API writes them.
pub const MAX_TIMESTAMP_LENGTH: usize = 64;

/// `status.conditions` of a kind, and each condition's fields, bounded as `metav1.Condition`
/// bounds them (control writes a handful of condition types; a longer message is cut).
pub const MAX_CONDITIONS: usize = 16;
/// A condition's `type`.
pub const MAX_CONDITION_TYPE_LENGTH: usize = 316;
/// A condition's `status` (`True`, `False`, `Unknown`).
pub const MAX_CONDITION_STATUS_LENGTH: usize = 7;
/// A condition's `reason`.
pub const MAX_CONDITION_REASON_LENGTH: usize = 1024;
/// A condition's `message`, in bytes.
pub const MAX_CONDITION_MESSAGE_LENGTH: usize = 32768;

/// The highest forwarder port a pod endpoint may have (the forwarder's ports are 0..4096: 0 is
/// the uplink, 4095 the node's host interface).
pub const MAX_ENDPOINT_PORT: u32 = 4094;
/// [`MAX_ENDPOINT_PORT`]'s range as messages write it.
pub const ENDPOINT_PORT_RANGE: &str = "1..=4094";

/// `Network.spec.l2.learning.agingSeconds`: at least half a minute (a learned MAC is refreshed
/// every quarter of it), at most a day.
pub const AGING_SECONDS: std::ops::RangeInclusive<u32> = 30..=86_400;
/// Its default.
pub const DEFAULT_AGING_SECONDS: u32 = 300;
/// `Network.spec.l2.bumLimit.packetsPerSecond` (0: unlimited).
pub const BUM_PPS: std::ops::RangeInclusive<u32> = 0..=10_000_000;
/// Its default.
pub const DEFAULT_BUM_PPS: u32 = 1000;
/// `Network.spec.l2.bumLimit.burst`.
pub const BUM_BURST: std::ops::RangeInclusive<u32> = 1..=1_000_000;
/// Its default.
pub const DEFAULT_BUM_BURST: u32 = 200;
