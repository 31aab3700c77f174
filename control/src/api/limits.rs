//! Size limits of the API. [`super::validate`] refuses what exceeds them, and the CRDs carry
//! them as `maxItems`/`maxLength`/`maxProperties` ([`super::crd`]), which also bounds the
//! estimated cost of their validation rules as the API server requires.

/// `NetworkBindingPolicy.spec.rules`.
pub const MAX_RULES: usize = 64;
/// `matchExpressions` of one selector.
pub const MAX_REQUIREMENTS: usize = 16;
/// `values` of one selector requirement.
pub const MAX_VALUES: usize = 64;
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
