//! The connection tracker's flow table without the pipeline: its memory for a million
//! connections (`ct.1m_flows.*`). The per-packet figures (`pipeline.ct_hit.*`,
//! `ct.new_conns*`) run through the pipeline, in [`crate::pipeline`].
//!
//! | id | what | anchor |
//! |---|---|---|
//! | `ct.1m_flows.bytes` | bytes of the flow region the forwarder sizes for `conntrack.max_flows` = 1,048,576 (`lace_shared::flow::region_bytes`: header, per-worker counters, buckets, entries), the table filled with as many connections | none |
//! | `ct.1m_flows.bytes_per_flow` | the same ÷ 1,048,576 | none |
//!
//! | `ct.1m_flows.half_translated_refused` | connections of the fill (every other one translated) refused for want of a slot near their keys' home before the table was full | none |
//!
//! Before the figure is taken the table is filled through [`FlowTable::insert`] with 1,048,576
//! distinct connections, every other one translated (a Service's DNAT: two keys); those refused
//! for want of a slot are counted and replaced by untranslated ones until the table holds its
//! capacity; the counters must show exactly that, one more must be refused as full, and every
//! forward and reverse key must find its entry again.

use anyhow::{bail, Context as _};
use lace_shared::flow::{
    region_bytes, FlowCache, FlowInit, FlowKey, FlowTable, InsertError, Inserted, Nat, Origin,
    PROBE,
};
use lace_shared::policy::{PROTO_TCP, PROTO_UDP};

use crate::report::{Figure, Scale};

/// The figure's id.
pub const FLOWS_1M_BYTES: &str = "ct.1m_flows.bytes";
/// Connections of the figure.
pub const FLOWS_1M: u32 = 1 << 20;

/// Connection `i` of the fill: zone (pod port) 1 + i mod 1024, a remote address of its own,
/// TCP (UDP every fourth); the odd ones translated to a backend address of their own.
fn connection(i: u32) -> FlowInit {
    let remote = |net: u8| {
        std::net::Ipv4Addr::new(10, net + (i >> 16) as u8, (i >> 8) as u8, i as u8)
            .to_ipv6_mapped()
            .octets()
    };
    FlowInit {
        key: FlowKey {
            zone: 1 + i % 1024,
            proto: if i % 4 == 0 { PROTO_UDP } else { PROTO_TCP },
            v6: false,
            remote: remote(96),
            rport: if i % 2 == 1 { 80 } else { 443 },
            lport: 32_768 + (i % 28_000) as u16,
        },
        origin: Origin::Egress,
        nat: (i % 2 == 1).then(|| Nat {
            addr: remote(160),
            port: 8080,
            hairpin: false,
        }),
        state: 3,
        gen: 1,
        now: 1_000,
        timeout: 0,
    }
}

/// `ct.1m_flows.*` and a note; the table is filled and checked first (see the module docs).
pub fn flow_table_figures(_scale: &Scale) -> anyhow::Result<(Vec<Figure>, String)> {
    let t = FlowTable::in_memory(FLOWS_1M).context("a flow table of 1,048,576 connections")?;
    let mut cache = FlowCache::default();
    let started = std::time::Instant::now();
    // The fill: half of the connections translated. A key whose home and next buckets are
    // full is refused (NoSlot, counted as full) before the table holds its capacity; the
    // refused ones are counted, and untranslated connections (one key each) take their room.
    let mut entered = vec![false; FLOWS_1M as usize];
    let mut refused = 0u64;
    for i in 0..FLOWS_1M {
        match t.insert(&connection(i), &mut cache, 0) {
            Ok(Inserted::New(_)) => entered[i as usize] = true,
            Err(InsertError::NoSlot) => refused += 1,
            other => bail!("{FLOWS_1M_BYTES}: connection {i} of the fill: {other:?}"),
        }
    }
    let plain = |j: u32| FlowInit {
        key: FlowKey {
            zone: 2_000 + j % 1024,
            ..connection(2 * j).key
        },
        nat: None,
        ..connection(2 * j)
    };
    let mut extra = 0u32;
    let mut tries = 0u32;
    while u64::from(extra) < refused {
        tries += 1;
        if tries > FLOWS_1M / 2 {
            bail!("{FLOWS_1M_BYTES}: {refused} refused connections could not be replaced");
        }
        match t.insert(&plain(tries), &mut cache, 0) {
            Ok(Inserted::New(_)) => extra += 1,
            Err(InsertError::NoSlot) => {}
            other => bail!("{FLOWS_1M_BYTES}: an untranslated connection of the fill: {other:?}"),
        }
    }
    let fill_s = started.elapsed().as_secs_f64();
    let c = t.counts();
    if c.created != u64::from(FLOWS_1M)
        || c.removed != 0
        || c.full != refused + u64::from(tries - extra)
    {
        bail!(
            "{FLOWS_1M_BYTES}: after the fill the table counts {c:?}, expected {FLOWS_1M} created \
             and {refused} + {} refused",
            tries - extra
        );
    }
    match t.insert(&plain(FLOWS_1M), &mut cache, 0) {
        Err(InsertError::Full) => {}
        other => bail!(
            "{FLOWS_1M_BYTES}: a connection beyond the capacity was {other:?}, not refused as full"
        ),
    }
    let mut translated = 0u32;
    let found = |f: &FlowInit| {
        t.lookup(&f.key, f.key.hash(t.seed()))
            .filter(|v| !v.reverse && v.key == f.key && v.nat == f.nat)
    };
    for i in (0..FLOWS_1M).filter(|&i| entered[i as usize]) {
        let Some(v) = found(&connection(i)) else {
            bail!("{FLOWS_1M_BYTES}: connection {i} is not found by its key");
        };
        if let Some(rk) = v.reverse_key() {
            match t.lookup(&rk, rk.hash(t.seed())) {
                Some(r) if r.reverse && r.idx == v.idx => translated += 1,
                _ => bail!("{FLOWS_1M_BYTES}: connection {i} is not found by its reply key"),
            }
        }
    }
    let extra_found = (1..=tries).filter(|&j| found(&plain(j)).is_some()).count();
    if extra_found != extra as usize {
        bail!("{FLOWS_1M_BYTES}: {extra_found} of {extra} untranslated fill connections found");
    }
    t.return_cache(&mut cache);
    let bytes = region_bytes(FLOWS_1M) as f64;
    let figures = vec![
        Figure::new(FLOWS_1M_BYTES, bytes, "bytes"),
        Figure::new(
            "ct.1m_flows.bytes_per_flow",
            bytes / f64::from(FLOWS_1M),
            "bytes",
        ),
        Figure::new(
            "ct.1m_flows.half_translated_refused",
            refused as f64,
            "connections",
        ),
    ];
    let note = format!(
        "{FLOWS_1M_BYTES}: the flow region for conntrack.max_flows = {FLOWS_1M} \
         (lace_shared::flow::region_bytes: 64-byte entries + buckets of 7 slots, a power of two \
         with room for two keys per entry), filled with {FLOWS_1M} connections in {fill_s:.2} s: \
         {FLOWS_1M} of which every other translated (two keys), {refused} of those refused \
         (no free slot within the key's {PROBE} buckets: counted as flow-table-full though the \
         table was not) and replaced by {extra} untranslated ones ({} more refused on the way); \
         counters checked, one more refused as full, every forward and reply key found again \
         ({translated} translated)",
        tries - extra
    );
    Ok((figures, note))
}
