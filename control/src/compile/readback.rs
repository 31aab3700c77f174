//! Reading the published tables back into a [`NodeTables`] (control restarting over an
//! existing region).
//!
//! Guarantees: what is read is exactly the latest publication (the region is mapped
//! read-only; call it while no batch is being published, i.e. from the writer's own thread);
//! `read_back` after `Compiler::apply(next)` returns a value equal to `next`.

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

use super::{NetworkTables, NodeTables};

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
    let root = *mem
        .get::<RootRec>(off)
        .ok_or_else(|| corrupt(format!("root offset {off} outside the region")))?;
    let hop = |i: u32| -> Result<NextHop, ReadBackError> {
        PagedArray::<NextHopRec>::get(mem, &root.nexthops, i)
            .and_then(NextHop::from_rec)
            .ok_or_else(|| corrupt(format!("next hop {i} is missing or of an unknown kind")))
    };
    for (id, rec) in PagedArray::<NetworkRec>::iter(mem, &root.networks) {
        let Some(info) = NetworkInfo::read(rec) else {
            continue;
        };
        let mut routes = std::collections::BTreeMap::new();
        for (k, len, nh) in Fib::<u32>::routes(mem, &rec.fib4) {
            let p = Ipv4Net::new(Ipv4Addr::from(k), len)
                .map_err(|_| corrupt(format!("network {id}: IPv4 route of length {len}")))?;
            routes.insert(IpNet::V4(p), hop(nh)?);
        }
        for (k, len, nh) in Fib::<u128>::routes(mem, &rec.fib6) {
            let p = Ipv6Net::new(Ipv6Addr::from(k), len)
                .map_err(|_| corrupt(format!("network {id}: IPv6 route of length {len}")))?;
            routes.insert(IpNet::V6(p), hop(nh)?);
        }
        let mut neighbors = std::collections::BTreeMap::new();
        for (k, r) in HashTable::<u128, NeighRec>::iter(mem, &rec.neigh) {
            if r.flags & 1 != 0 {
                let a = Ipv6Addr::from(*k);
                let ip = a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4);
                neighbors.insert(ip, MacAddr(r.mac));
            }
        }
        let next_hop = |i: u32| hop(i).ok();
        let mut fdb = std::collections::BTreeMap::new();
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
    Ok(t)
}

fn records<'a, T: lace_shared::pod::Pod>(
    mem: Mem<'a>,
    hdr: &ArrayHdr,
) -> impl Iterator<Item = (u32, &'a T)> + 'a {
    PagedArray::<T>::iter(mem, hdr)
}
