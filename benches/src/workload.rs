//! Deterministic workloads: route tables, lookup destinations and exact-match keys.
//!
//! Every generator takes a seed (or needs none) and returns the same output for the same
//! arguments on every machine, so two runs — and the anchor and lace sides of one run — see
//! identical tables and lookup streams. IPv4 addresses are host-order `u32`, IPv6 addresses
//! network-order `[u8; 16]`; next hops are `1..=n_nexthops`, never 0 (0 means "no route").

use std::collections::{HashMap, HashSet};

use rand::distributions::WeightedIndex;
use rand::prelude::*;
use rand::rngs::StdRng;

/// An IPv4 route: (prefix, length, next hop). Host bits of the prefix are zero.
pub type Route4 = (u32, u8, u32);

/// An IPv6 route: (prefix, length, next hop). Host bits of the prefix are zero.
pub type Route6 = ([u8; 16], u8, u32);

/// IPv4 prefix-length mix of the global BGP table, in percent per length.
///
/// Modelled on the public IPv4 DFZ prefix-length distribution (CIDR Report / bgp.potaroo.net
/// "BGP table size by prefix length" statistics, 2024, ~950k prefixes), rounded: /24 ≈ 60 %,
/// /22 ≈ 12 %, /23 ≈ 10 %, /21 and /20 ≈ 5 % each, /19 ≈ 3 %, /16 and /18 ≈ 1.5 %, /17 ≈ 1 %,
/// /8–/15 ≈ 1 % together, and a sprinkle (≈ 0.2 %) of /25–/32 that leak past filters.
pub const V4_LENGTH_MIX: &[(u8, f64)] = &[
    (8, 0.02),
    (9, 0.02),
    (10, 0.05),
    (11, 0.10),
    (12, 0.15),
    (13, 0.20),
    (14, 0.20),
    (15, 0.26),
    (16, 1.5),
    (17, 1.0),
    (18, 1.5),
    (19, 3.0),
    (20, 5.0),
    (21, 5.0),
    (22, 12.0),
    (23, 10.0),
    (24, 60.0),
    (25, 0.04),
    (26, 0.03),
    (27, 0.03),
    (28, 0.03),
    (29, 0.02),
    (30, 0.02),
    (31, 0.01),
    (32, 0.02),
];

/// IPv6 prefix-length mix of the global BGP table, in percent per length.
///
/// Modelled on the public IPv6 DFZ prefix-length distribution (bgp.potaroo.net / CIDR Report
/// IPv6 statistics, 2024, ~200k prefixes), rounded: /48 ≈ 47 %, /32 ≈ 8 %, /44 ≈ 7 %,
/// /40 ≈ 6 %, /36 ≈ 4 %, /29 ≈ 3 %, /46 and /47 ≈ 2 % each; the remaining ≈ 21 % spread over
/// /12–/64 with the usual bumps at /28, /33–/35, /38, /42, /45, /56 and /64.
pub const V6_LENGTH_MIX: &[(u8, f64)] = &[
    (12, 0.05),
    (16, 0.1),
    (19, 0.2),
    (20, 0.3),
    (22, 0.3),
    (23, 0.3),
    (24, 0.4),
    (26, 0.3),
    (27, 0.3),
    (28, 2.0),
    (29, 3.0),
    (30, 0.6),
    (31, 0.5),
    (32, 8.0),
    (33, 1.5),
    (34, 1.5),
    (35, 1.2),
    (36, 4.0),
    (37, 0.7),
    (38, 1.5),
    (39, 0.8),
    (40, 6.0),
    (41, 0.6),
    (42, 1.5),
    (43, 0.8),
    (44, 7.0),
    (45, 1.5),
    (46, 2.0),
    (47, 2.0),
    (48, 47.0),
    (52, 0.3),
    (56, 1.5),
    (60, 0.3),
    (64, 1.95),
];

/// `prefix` with all bits past `len` cleared.
pub fn mask_v4(prefix: u32, len: u8) -> u32 {
    match len {
        0 => 0,
        1..=31 => prefix & (u32::MAX << (32 - u32::from(len))),
        _ => prefix,
    }
}

/// `prefix` with all bits past `len` cleared.
pub fn mask_v6(prefix: u128, len: u8) -> u128 {
    match len {
        0 => 0,
        1..=127 => prefix & (u128::MAX << (128 - u32::from(len))),
        _ => prefix,
    }
}

/// Draws unique `(masked prefix, len)` pairs with lengths from `mix`; when a length has run out
/// of free prefixes (e.g. /8s in a 900k table), it draws another length instead.
fn unique_prefixes<A: Copy + Eq + std::hash::Hash>(
    n: usize,
    rng: &mut StdRng,
    mix: &[(u8, f64)],
    mut random_masked: impl FnMut(&mut StdRng, u8) -> A,
) -> Vec<(A, u8)> {
    let lengths = WeightedIndex::new(mix.iter().map(|m| m.1)).expect("positive weights");
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let len = mix[lengths.sample(rng)].0;
        // A few tries per length: short lengths have few distinct prefixes.
        for _ in 0..64 {
            let p = random_masked(rng, len);
            if seen.insert((p, len)) {
                out.push((p, len));
                break;
            }
        }
    }
    out
}

/// `n` unique IPv4 routes shaped like the global BGP table ([`V4_LENGTH_MIX`]), placed
/// uniformly at random in 1.0.0.0–223.255.255.255, next hops uniform in `1..=n_nexthops`.
pub fn bgp_v4_routes(n: usize, seed: u64, n_nexthops: u32) -> Vec<Route4> {
    let mut rng = StdRng::seed_from_u64(seed);
    const LOW: u32 = 0x0100_0000; // 1.0.0.0
    const HIGH: u32 = 0xe000_0000; // 224.0.0.0, exclusive
    let prefixes = unique_prefixes(n, &mut rng, V4_LENGTH_MIX, |rng, len| {
        mask_v4(rng.gen_range(LOW..HIGH), len)
    });
    prefixes
        .into_iter()
        .map(|(p, len)| (p, len, rng.gen_range(1..=n_nexthops.max(1))))
        .collect()
}

/// `n` unique IPv6 routes shaped like the global BGP table ([`V6_LENGTH_MIX`]), placed
/// uniformly at random in 2000::/3, next hops uniform in `1..=n_nexthops`.
pub fn bgp_v6_routes(n: usize, seed: u64, n_nexthops: u32) -> Vec<Route6> {
    let mut rng = StdRng::seed_from_u64(seed);
    let prefixes = unique_prefixes(n, &mut rng, V6_LENGTH_MIX, |rng, len| {
        let addr = (rng.gen::<u128>() >> 3) | (1u128 << 125); // 001 + 125 random bits
        mask_v6(addr, len)
    });
    prefixes
        .into_iter()
        .map(|(p, len)| (p.to_be_bytes(), len, rng.gen_range(1..=n_nexthops.max(1))))
        .collect()
}

/// `n` lookup addresses, each a random address inside a randomly chosen route of `routes`
/// (random host bits under the route's prefix). Every lookup therefore matches a route, and the
/// long-prefix routes are hit as often as the table holds them, so lookups exercise the deep
/// paths (tbl8 groups) in proportion instead of mostly missing, as uniformly random addresses
/// would in a sparse table. An address may match a more specific route than the one it was
/// drawn from; that is fine.
pub fn destinations_v4(routes: &[Route4], n: usize, seed: u64) -> Vec<u32> {
    assert!(!routes.is_empty(), "destinations need at least one route");
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let (prefix, len, _) = routes[rng.gen_range(0..routes.len())];
            let host = if len >= 32 {
                0
            } else {
                rng.gen::<u32>() & (u32::MAX >> len)
            };
            prefix | host
        })
        .collect()
}

/// The IPv6 counterpart of [`destinations_v4`].
pub fn destinations_v6(routes: &[Route6], n: usize, seed: u64) -> Vec<[u8; 16]> {
    assert!(!routes.is_empty(), "destinations need at least one route");
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let (prefix, len, _) = routes[rng.gen_range(0..routes.len())];
            let host = if len >= 128 {
                0
            } else {
                rng.gen::<u128>() & (u128::MAX >> len)
            };
            (u128::from_be_bytes(prefix) | host).to_be_bytes()
        })
        .collect()
}

/// Pods per node in [`pod_routes_v4`]: one /24 route per node plus this many /32 pod routes.
pub const PODS_PER_NODE: usize = 15;

/// A pod-network FIB of `n` routes: a default route (0.0.0.0/0 → next hop 1, the uplink), then
/// per node a /24 block from 10.0.0.0/8 (10.a.b.0/24, next hop = 2 + node: the tunnel to that
/// node) followed by [`PODS_PER_NODE`] /32 pod routes inside it (10.a.b.k, next hop = the pod's
/// port, numbered from 1000). The /32s sit under the /24s, so each node's block uses a tbl8.
pub fn pod_routes_v4(n: usize) -> Vec<Route4> {
    let mut routes = Vec::with_capacity(n);
    if n == 0 {
        return routes;
    }
    routes.push((0, 0, 1));
    let mut port = 1000u32;
    for i in 0..n - 1 {
        let node = (i / (PODS_PER_NODE + 1)) as u32;
        let block = 0x0a00_0000 | ((node & 0xffff) << 8);
        match i % (PODS_PER_NODE + 1) {
            0 => routes.push((block, 24, 2 + node)),
            k => {
                routes.push((block | (k as u32 + 1), 32, port));
                port += 1;
            }
        }
    }
    routes
}

/// `n` BGP-like IPv4 routes ([`bgp_v4_routes`] with `seed`) whose (prefix, length) is neither
/// in `existing` nor repeated: routes to insert into a table already holding `existing`.
pub fn fresh_v4_routes(existing: &[Route4], n: usize, seed: u64, n_nexthops: u32) -> Vec<Route4> {
    let taken: HashSet<(u32, u8)> = existing.iter().map(|r| (r.0, r.1)).collect();
    let mut want = n + n / 4 + 16;
    loop {
        let fresh: Vec<Route4> = bgp_v4_routes(want, seed, n_nexthops)
            .into_iter()
            .filter(|r| !taken.contains(&(r.0, r.1)))
            .take(n)
            .collect();
        if fresh.len() == n {
            return fresh;
        }
        want *= 2;
    }
}

/// `networks` pod networks of `routes_per_network` routes each: network `i` is
/// [`pod_routes_v4`] with its node blocks moved up by `i × stride` /24s inside 10.0.0.0/8
/// (`stride` = the node count rounded up to a power of two, wrapping around 10/8 when the
/// networks do not fit), so every network has its own addresses, as pod networks whose CIDRs
/// are carved from one cluster range do. The default route and the next hops stay as in
/// [`pod_routes_v4`].
pub fn pod_networks_v4(networks: usize, routes_per_network: usize) -> Vec<Vec<Route4>> {
    let base = pod_routes_v4(routes_per_network);
    let nodes = routes_per_network
        .saturating_sub(1)
        .div_ceil(PODS_PER_NODE + 1);
    let stride = nodes.max(1).next_power_of_two() as u32;
    (0..networks as u32)
        .map(|i| {
            let shift = (i.wrapping_mul(stride) & 0xffff) << 8;
            base.iter()
                .map(|&(p, len, nh)| {
                    if len >= 8 && p >> 24 == 10 {
                        (
                            0x0a00_0000 | ((p & 0x00ff_ffff).wrapping_add(shift) & 0x00ff_ffff),
                            len,
                            nh,
                        )
                    } else {
                        (p, len, nh)
                    }
                })
                .collect()
        })
        .collect()
}

/// `n` lookups over several tables: each picks a network uniformly at random, then an address
/// inside a random route of that network (as [`destinations_v4`]). Returns (network index,
/// address) pairs.
pub fn multi_destinations_v4(networks: &[Vec<Route4>], n: usize, seed: u64) -> Vec<(u32, u32)> {
    assert!(
        !networks.is_empty(),
        "destinations need at least one network"
    );
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let net = rng.gen_range(0..networks.len());
            let d = destinations_v4(&networks[net], 1, rng.gen())[0];
            (net as u32, d)
        })
        .collect()
}

/// `n` lookups (rounded up to whole bursts) grouped in bursts of `burst` addresses of one
/// network each, the network drawn at random per burst. Returns the network of every burst and
/// the addresses, burst after burst.
pub fn grouped_destinations_v4(
    networks: &[Vec<Route4>],
    n: usize,
    burst: usize,
    seed: u64,
) -> (Vec<u32>, Vec<u32>) {
    assert!(
        !networks.is_empty(),
        "destinations need at least one network"
    );
    let burst = burst.max(1);
    let mut rng = StdRng::seed_from_u64(seed);
    let bursts = n.div_ceil(burst);
    let mut nets = Vec::with_capacity(bursts);
    let mut addrs = Vec::with_capacity(bursts * burst);
    for _ in 0..bursts {
        let net = rng.gen_range(0..networks.len());
        nets.push(net as u32);
        addrs.extend(destinations_v4(&networks[net], burst, rng.gen()));
    }
    (nets, addrs)
}

/// `n` distinct unicast, locally administered MAC addresses (first octet `xxxxxx10`), random.
pub fn macs(n: usize, seed: u64) -> Vec<[u8; 6]> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let mut mac = [0u8; 6];
        rng.fill(&mut mac);
        mac[0] = (mac[0] & 0xfc) | 0x02;
        if seen.insert(mac) {
            out.push(mac);
        }
    }
    out
}

/// An 8-byte FDB key: the MAC followed by the bridge domain (network id) in network order.
pub fn fdb_key(mac: [u8; 6], bridge_domain: u16) -> [u8; 8] {
    let bd = bridge_domain.to_be_bytes();
    [mac[0], mac[1], mac[2], mac[3], mac[4], mac[5], bd[0], bd[1]]
}

/// `n` distinct FDB keys: the MACs of [`macs`] spread over 16 bridge domains.
pub fn fdb_keys(n: usize, seed: u64) -> Vec<[u8; 8]> {
    macs(n, seed)
        .into_iter()
        .enumerate()
        .map(|(i, m)| fdb_key(m, (i % 16) as u16 + 1))
        .collect()
}

/// `n` distinct pod IPv4 addresses, 10.0.0.1 upwards (host-order `u32`).
///
/// # Panics
/// If `n` does not fit in 10.0.0.0/8 (2^24 - 1 addresses).
pub fn ipv4_keys(n: usize) -> Vec<u32> {
    assert!(
        n < 1 << 24,
        "10.0.0.0/8 holds fewer than {n} host addresses"
    );
    (1..=n as u32).map(|i| 0x0a00_0000 | i).collect()
}

/// `n` distinct pod IPv6 addresses, `fd00:1ace:0:<node>::<pod>` with 256 pods per node.
///
/// # Panics
/// If `n` exceeds 2^16 nodes × 256 pods.
pub fn ipv6_keys(n: usize) -> Vec<[u8; 16]> {
    assert!(n <= (1 << 16) * 256, "at most 2^24 pod addresses");
    (0..n)
        .map(|i| {
            let node = (i / 256) as u128;
            let pod = (i % 256) as u128 + 1;
            (0xfd00_1ace_0000_0000_0000_0000_0000_0000u128 | node << 64 | pod).to_be_bytes()
        })
        .collect()
}

/// `n` items drawn uniformly (with repetition) from `items`: a lookup stream over keys that
/// are all present, in random order.
pub fn sample<T: Copy>(items: &[T], n: usize, seed: u64) -> Vec<T> {
    assert!(!items.is_empty(), "cannot sample from nothing");
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| items[rng.gen_range(0..items.len())])
        .collect()
}

/// A slow, obviously correct IPv4 longest-prefix match (one hash map per length), to check
/// the tables under test against.
#[derive(Debug, Default)]
pub struct ReferenceLpm4 {
    by_len: Vec<(u8, HashMap<u32, u32>)>,
}

impl ReferenceLpm4 {
    /// Indexes `routes`; a later duplicate of a prefix replaces an earlier one, as in a FIB.
    pub fn new(routes: &[Route4]) -> Self {
        let mut map: HashMap<u8, HashMap<u32, u32>> = HashMap::new();
        for &(p, len, nh) in routes {
            map.entry(len).or_default().insert(mask_v4(p, len), nh);
        }
        let mut by_len: Vec<_> = map.into_iter().collect();
        by_len.sort_by_key(|e| std::cmp::Reverse(e.0));
        Self { by_len }
    }

    /// The next hop of the longest route covering `addr`.
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        self.by_len
            .iter()
            .find_map(|(len, m)| m.get(&mask_v4(addr, *len)).copied())
    }
}

/// The IPv6 counterpart of [`ReferenceLpm4`].
#[derive(Debug, Default)]
pub struct ReferenceLpm6 {
    by_len: Vec<(u8, HashMap<u128, u32>)>,
}

impl ReferenceLpm6 {
    /// Indexes `routes`; a later duplicate of a prefix replaces an earlier one, as in a FIB.
    pub fn new(routes: &[Route6]) -> Self {
        let mut map: HashMap<u8, HashMap<u128, u32>> = HashMap::new();
        for &(p, len, nh) in routes {
            map.entry(len)
                .or_default()
                .insert(mask_v6(u128::from_be_bytes(p), len), nh);
        }
        let mut by_len: Vec<_> = map.into_iter().collect();
        by_len.sort_by_key(|e| std::cmp::Reverse(e.0));
        Self { by_len }
    }

    /// The next hop of the longest route covering `addr`.
    pub fn lookup(&self, addr: &[u8; 16]) -> Option<u32> {
        let a = u128::from_be_bytes(*addr);
        self.by_len
            .iter()
            .find_map(|(len, m)| m.get(&mask_v6(a, *len)).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(routes: &[Route4], pred: impl Fn(u8) -> bool) -> f64 {
        routes.iter().filter(|r| pred(r.1)).count() as f64 / routes.len() as f64
    }

    #[test]
    fn v4_routes_are_unique_masked_in_range_and_shaped_like_bgp() {
        let routes = bgp_v4_routes(100_000, 7, 64);
        assert_eq!(routes.len(), 100_000);
        let unique: HashSet<_> = routes.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(unique.len(), routes.len());
        for &(p, len, nh) in &routes {
            assert_eq!(p, mask_v4(p, len));
            assert!((0x0100_0000..0xe000_0000).contains(&p), "{p:#x}/{len}");
            assert!((1..=64).contains(&nh));
        }
        assert!((0.57..0.63).contains(&share(&routes, |l| l == 24)));
        assert!((0.10..0.14).contains(&share(&routes, |l| l == 22)));
        assert!(share(&routes, |l| l > 24) < 0.01);
    }

    #[test]
    fn generators_are_deterministic() {
        assert_eq!(bgp_v4_routes(1000, 1, 8), bgp_v4_routes(1000, 1, 8));
        assert_ne!(bgp_v4_routes(1000, 1, 8), bgp_v4_routes(1000, 2, 8));
        assert_eq!(bgp_v6_routes(1000, 1, 8), bgp_v6_routes(1000, 1, 8));
        assert_eq!(macs(100, 3), macs(100, 3));
    }

    #[test]
    fn v6_routes_are_unique_masked_and_in_2000_slash_3() {
        let routes = bgp_v6_routes(50_000, 9, 16);
        let unique: HashSet<_> = routes.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(unique.len(), routes.len());
        let mut slash48 = 0;
        for &(p, len, _) in &routes {
            let a = u128::from_be_bytes(p);
            assert_eq!(a, mask_v6(a, len));
            assert_eq!(a >> 125, 1, "outside 2000::/3");
            slash48 += usize::from(len == 48);
        }
        let share48 = slash48 as f64 / routes.len() as f64;
        assert!((0.44..0.50).contains(&share48), "{share48}");
    }

    #[test]
    fn short_lengths_running_out_do_not_hang() {
        // Far more routes than /8–/15 prefixes exist for their share at this size.
        assert_eq!(bgp_v4_routes(2_000_000, 5, 4).len(), 2_000_000);
    }

    #[test]
    fn destinations_fall_inside_a_route() {
        let routes = bgp_v4_routes(10_000, 3, 8);
        let lpm = ReferenceLpm4::new(&routes);
        assert!(destinations_v4(&routes, 10_000, 4)
            .iter()
            .all(|&d| lpm.lookup(d).is_some()));
        let routes6 = bgp_v6_routes(10_000, 3, 8);
        let lpm6 = ReferenceLpm6::new(&routes6);
        assert!(destinations_v6(&routes6, 10_000, 4)
            .iter()
            .all(|d| lpm6.lookup(d).is_some()));
    }

    #[test]
    fn reference_lpm_prefers_the_longest_match() {
        let lpm = ReferenceLpm4::new(&[(0, 0, 1), (0x0a00_0000, 8, 2), (0x0a01_0200, 24, 3)]);
        assert_eq!(lpm.lookup(0x0a01_0203), Some(3));
        assert_eq!(lpm.lookup(0x0a02_0000), Some(2));
        assert_eq!(lpm.lookup(0x0b00_0000), Some(1));
        assert_eq!(ReferenceLpm4::new(&[]).lookup(1), None);
    }

    #[test]
    fn pod_table_has_default_node_blocks_and_hosts() {
        let routes = pod_routes_v4(1000);
        assert_eq!(routes.len(), 1000);
        assert_eq!(routes[0], (0, 0, 1));
        assert_eq!(routes[1], (0x0a00_0000, 24, 2));
        assert_eq!(routes[2], (0x0a00_0002, 32, 1000));
        let unique: HashSet<_> = routes.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(unique.len(), routes.len());
        assert!(routes.iter().all(|r| r.2 != 0 && r.0 == mask_v4(r.0, r.1)));
    }

    #[test]
    fn keys_are_distinct() {
        let m = macs(10_000, 1);
        assert!(m.iter().all(|m| m[0] & 0x03 == 0x02));
        assert_eq!(m.iter().collect::<HashSet<_>>().len(), m.len());
        let f = fdb_keys(10_000, 1);
        assert_eq!(f.iter().collect::<HashSet<_>>().len(), f.len());
        let v4 = ipv4_keys(70_000);
        assert_eq!(v4.iter().collect::<HashSet<_>>().len(), v4.len());
        let v6 = ipv6_keys(70_000);
        assert_eq!(v6.iter().collect::<HashSet<_>>().len(), v6.len());
        assert_eq!(v6[0][..4], [0xfd, 0x00, 0x1a, 0xce]);
    }

    #[test]
    fn fresh_routes_are_new() {
        let routes = bgp_v4_routes(20_000, 1, 8);
        let fresh = fresh_v4_routes(&routes, 5_000, 2, 8);
        assert_eq!(fresh.len(), 5_000);
        let all: HashSet<_> = routes.iter().chain(&fresh).map(|r| (r.0, r.1)).collect();
        assert_eq!(all.len(), 25_000);
    }

    #[test]
    fn pod_networks_are_disjoint_pod_tables() {
        let nets = pod_networks_v4(1000, 1000);
        assert_eq!(nets.len(), 1000);
        assert_eq!(nets[0], pod_routes_v4(1000));
        let mut blocks = HashSet::new();
        for net in &nets {
            assert_eq!(net.len(), 1000);
            assert_eq!(net[0], (0, 0, 1));
            for &(p, len, _) in &net[1..] {
                assert_eq!(p >> 24, 10);
                assert_eq!(p, mask_v4(p, len));
                if len == 24 {
                    assert!(blocks.insert(p), "block {p:#x} in two networks");
                }
            }
        }
        let stream = multi_destinations_v4(&nets, 10_000, 3);
        let lpms: Vec<_> = nets.iter().map(|n| ReferenceLpm4::new(n)).collect();
        assert!(stream
            .iter()
            .all(|&(n, a)| lpms[n as usize].lookup(a).is_some()));
        let (bn, ba) = grouped_destinations_v4(&nets, 100, 32, 4);
        assert_eq!((bn.len(), ba.len()), (4, 128));
    }
}
