//! Reading the published tables back into a [`NodeTables`] (control restarting over an
//! existing region).
//!
//! Guarantees: what is read is exactly the latest publication (the region is mapped
//! read-only; call it while no batch is being published, i.e. from the writer's own thread);
//! `read_back` after `Compiler::apply(next)` returns a value equal to `next`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use lace_shared::array::{ArrayHdr, PagedArray};
use lace_shared::fib::Fib;
use lace_shared::hash::HashTable;
use lace_shared::mem::Mem;
use lace_shared::region::{Region, RegionKind};
use lace_shared::tables::{RootRec, TablesConfig};
use lace_shared::types::{
    flood_hop, FdbEntry, FdbRec, FloodTarget, L2Hop, MacAddr, NeighRec, NetworkId, NetworkInfo,
    NetworkRec, NextHop, NextHopRec, NodeId, NodeInfo, NodeRec, PortId, PortInfo, PortRec, Sid,
    SidBehavior, SidRec,
};

use lace_shared::policy::{
    Backend, BackendRec, PeerClass, PolicyDir, PolicySet, PolicySetId, PolicySetRec, PortRange,
    PortSetRec, Ports, RouteFlags, ServiceInfo, ServiceKey, ServiceRec, MAX_PORTSET_CHAIN,
    PORTS_ALL,
};

use super::policy::{PeerMap, PolicyTables, SetTables};
use super::{NetworkTables, NodeTables, Route, ServicePort};

/// Why the published tables could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadBackError {
    /// The region could not be mapped (missing, other ABI, corrupt header).
    #[error("reading back the published tables: {0}")]
    Region(#[from] lace_shared::Error),
    /// A published record does not decode.
    #[error(
        "reading back the published tables of {path}: {what}; remove the region so control \
         recreates it, or start the compiler with Compiler::new (rewrites everything)"
    )]
    Corrupt {
        /// The tables file.
        path: String,
        /// What did not decode.
        what: String,
    },
}

/// The tables as last published in `cfg`'s region; empty if nothing was published yet.
pub fn read_back(cfg: &TablesConfig) -> Result<NodeTables, ReadBackError> {
    let path = cfg.tables_path();
    let region = Region::open_ro(&path, RegionKind::Tables)?;
    let corrupt = |what: String| ReadBackError::Corrupt {
        path: path.display().to_string(),
        what,
    };
    let mem = region.mem();
    let off = region.header().root.load(Ordering::Acquire);
    let mut t = NodeTables::default();
    if off == 0 {
        return Ok(t);
    }
    let mut policies: BTreeMap<NetworkId, PolicyTables> = BTreeMap::new();
    let root = *mem
        .get::<RootRec>(off)
        .ok_or_else(|| corrupt(format!("root offset {off} outside the region")))?;
    let hop_rec = |i: u32| -> Result<(NextHop, RouteFlags), ReadBackError> {
        PagedArray::<NextHopRec>::get(mem, &root.nexthops, i)
            .and_then(|r| NextHop::from_rec(r).map(|h| (h, RouteFlags(r.flags))))
            .ok_or_else(|| corrupt(format!("next hop {i} is missing or of an unknown kind")))
    };
    let hop = |i: u32| hop_rec(i).map(|(h, _)| h);
    let route = |i: u32| hop_rec(i).map(|(nh, flags)| Route { nh, flags });
    let mut services = read_services(mem, &root).map_err(corrupt)?;
    for (id, rec) in PagedArray::<NetworkRec>::iter(mem, &root.networks) {
        let Some(info) = NetworkInfo::read(rec) else {
            continue;
        };
        let mut peers = PeerMap::default();
        for (k, len, c) in Fib::<u32>::routes(mem, &rec.peers4) {
            let p = Ipv4Net::new(Ipv4Addr::from(k), len)
                .map_err(|_| corrupt(format!("network {id}: IPv4 peer prefix of length {len}")))?;
            peers.insert(IpNet::V4(p), PeerClass(c));
        }
        for (k, len, c) in Fib::<u128>::routes(mem, &rec.peers6) {
            let p = Ipv6Net::new(Ipv6Addr::from(k), len)
                .map_err(|_| corrupt(format!("network {id}: IPv6 peer prefix of length {len}")))?;
            peers.insert(IpNet::V6(p), PeerClass(c));
        }
        if !peers.is_empty() {
            policies.entry(NetworkId(id)).or_default().peers = peers;
        }
        let mut routes = BTreeMap::new();
        for (k, len, nh) in Fib::<u32>::routes(mem, &rec.fib4) {
            let p = Ipv4Net::new(Ipv4Addr::from(k), len)
                .map_err(|_| corrupt(format!("network {id}: IPv4 route of length {len}")))?;
            routes.insert(IpNet::V4(p), route(nh)?);
        }
        for (k, len, nh) in Fib::<u128>::routes(mem, &rec.fib6) {
            let p = Ipv6Net::new(Ipv6Addr::from(k), len)
                .map_err(|_| corrupt(format!("network {id}: IPv6 route of length {len}")))?;
            routes.insert(IpNet::V6(p), route(nh)?);
        }
        let mut neighbors = BTreeMap::new();
        for (k, r) in HashTable::<u128, NeighRec>::iter(mem, &rec.neigh) {
            if r.flags & 1 != 0 {
                let a = Ipv6Addr::from(*k);
                let ip = a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4);
                neighbors.insert(ip, MacAddr(r.mac));
            }
        }
        let next_hop = |i: u32| hop(i).ok();
        let mut fdb = BTreeMap::new();
        for (k, r) in HashTable::<u64, FdbRec>::iter(mem, &rec.fdb) {
            let e = FdbEntry::from_rec(r, next_hop).ok_or_else(|| {
                corrupt(format!(
                    "network {id}: FDB entry of {} does not decode",
                    MacAddr::from_u64(*k)
                ))
            })?;
            fdb.insert(MacAddr::from_u64(*k), e);
        }
        let mut flood = Vec::new();
        for (_, r) in PagedArray::<u32>::iter(mem, &rec.flood) {
            flood.push(match flood_hop(*r) {
                L2Hop::Port(p) => FloodTarget::Port(p),
                L2Hop::Remote(i) => match hop(i)? {
                    NextHop::Remote { node, sid } => FloodTarget::Remote { node, sid },
                    other => {
                        return Err(corrupt(format!(
                            "network {id}: flood-list member {i} is {other:?}, not a remote node"
                        )))
                    }
                },
            });
        }
        t.networks.insert(
            NetworkId(id),
            Arc::new(NetworkTables {
                info,
                routes,
                services: services.remove(&id).unwrap_or_default(),
                neighbors,
                fdb,
                flood,
            }),
        );
    }
    for (id, rec) in records::<PortRec>(mem, &root.ports) {
        if let Some(p) = PortInfo::from_rec(rec) {
            t.ports.insert(PortId(id), p);
        }
    }
    for (id, rec) in records::<NodeRec>(mem, &root.nodes) {
        if let Some(n) = NodeInfo::from_rec(rec) {
            t.nodes.insert(NodeId(id), n);
        }
    }
    let source = Ipv6Addr::from(root.srv6_source);
    t.srv6_source = (!source.is_unspecified()).then_some(source);
    for (k, rec) in HashTable::<u128, SidRec>::iter(mem, &root.sids) {
        if let Some(b) = SidBehavior::from_rec(rec) {
            t.sids.insert(Sid(Ipv6Addr::from(*k)), b);
        }
    }
    // Policy sets and their decisions.
    let mut sets: BTreeMap<PolicySetId, SetTables> = BTreeMap::new();
    for (id, rec) in records::<PolicySetRec>(mem, &root.policy_sets) {
        if let Some(set) = PolicySet::from_rec(rec) {
            sets.insert(
                PolicySetId(id),
                SetTables {
                    set,
                    decisions: BTreeMap::new(),
                },
            );
        }
    }
    for (&k, &v) in HashTable::<u64, u32>::iter(mem, &root.decisions) {
        let sid = PolicySetId((k >> 32) as u32);
        let dir = if k & (1 << 31) != 0 {
            PolicyDir::Egress
        } else {
            PolicyDir::Ingress
        };
        let class = PeerClass((k & 0x7fff_ffff) as u32);
        let Some(s) = sets.get_mut(&sid) else {
            return Err(corrupt(format!(
                "a decision of policy set {} that does not exist",
                sid.0
            )));
        };
        let ports = if v == PORTS_ALL {
            Ports::All
        } else {
            Ports::Ranges(portset(mem, &root.portsets, v).ok_or_else(|| {
                corrupt(format!(
                    "policy set {}: port set {v} is missing or loops",
                    sid.0
                ))
            })?)
        };
        s.decisions.insert((dir, class), ports);
    }
    for (id, s) in sets {
        policies
            .entry(s.set.network)
            .or_default()
            .sets
            .insert(id, Arc::new(s));
    }
    t.policies = policies
        .into_iter()
        .map(|(k, v)| (k, Arc::new(v)))
        .collect();
    Ok(t)
}

/// Every Service record, by network id and port.
fn read_services(
    mem: Mem<'_>,
    root: &RootRec,
) -> Result<BTreeMap<u32, BTreeMap<ServicePort, Arc<ServiceInfo>>>, String> {
    let mut out: BTreeMap<u32, BTreeMap<ServicePort, Arc<ServiceInfo>>> = BTreeMap::new();
    for (key, &i) in HashTable::<ServiceKey, u32>::iter(mem, &root.services) {
        let what = || format!("service {}:{}/{}", key.ip(), key.port, key.proto);
        let rec = PagedArray::<ServiceRec>::get(mem, &root.service_recs, i)
            .filter(|r| r.flags & ServiceRec::PRESENT != 0)
            .ok_or_else(|| format!("{}: record {i} is missing", what()))?;
        let mut backends = Vec::new();
        for (k, b) in PagedArray::<BackendRec>::iter(mem, &rec.backends) {
            let b = Backend::from_rec(b)
                .filter(|_| k as usize == backends.len())
                .ok_or_else(|| format!("{}: backend {k} is missing", what()))?;
            backends.push(b);
        }
        let mut table = Vec::with_capacity(rec.table_len as usize);
        for k in 0..rec.table_len {
            let b = PagedArray::<u32>::get(mem, &rec.table, k)
                .and_then(|b| b.checked_sub(1))
                .filter(|&b| (b as usize) < backends.len())
                .ok_or_else(|| format!("{}: lookup-table slot {k} is invalid", what()))?;
            table.push(b);
        }
        let affinity_timeout_s =
            (rec.flags & ServiceRec::AFFINITY != 0).then_some(rec.affinity_timeout_s);
        out.entry(key.network).or_default().insert(
            ServicePort {
                addr: key.ip(),
                protocol: key.proto,
                port: key.port,
            },
            Arc::new(ServiceInfo {
                affinity_timeout_s,
                backends,
                table,
                node_local: rec.flags & ServiceRec::NODE_LOCAL != 0,
            }),
        );
    }
    Ok(out)
}

/// The ranges of the port-set chain at `head`; None for a missing record or a chain longer than
/// the readers follow.
fn portset(mem: Mem<'_>, arr: &ArrayHdr, head: u32) -> Option<Vec<PortRange>> {
    let mut out = Vec::new();
    let mut i = head;
    for _ in 0..MAX_PORTSET_CHAIN {
        let r = PagedArray::<PortSetRec>::get(mem, arr, i)?;
        out.extend(r.ranges().iter().map(|x| PortRange {
            proto: x.proto,
            lo: x.lo,
            hi: x.hi,
        }));
        if r.next == 0 {
            return Some(out);
        }
        i = r.next;
    }
    None
}

fn records<'a, T: lace_shared::pod::Pod>(
    mem: Mem<'a>,
    hdr: &ArrayHdr,
) -> impl Iterator<Item = (u32, &'a T)> + 'a {
    PagedArray::<T>::iter(mem, hdr)
}
