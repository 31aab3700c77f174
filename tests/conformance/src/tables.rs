//! The compiled side: each node's tables, written by lace-control's real compiler into a real
//! [`TableWriter`] in `/dev/shm`, and the decision read from them the way the forwarder's
//! connection tracker reads it for a NEW connection.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use lace_control::compile::{desired, read_back, CompileConfig, Compiler, Note};
use lace_control::netpol::Verdict;
use lace_control::world::World;
use lace_shared::policy::{PolicyDir, PolicySetId};
use lace_shared::tables::{Snapshot, TableWriter, TablesConfig};

use crate::universe::{Family, Party, Universe, NETWORK_ID};

/// One node's tables: its compiler and the writer of its region (both files are removed when
/// this is dropped).
#[derive(Debug)]
pub struct NodeTables {
    /// The node.
    pub node: &'static str,
    /// Where the region lives (a forwarder attaches here).
    pub cfg: TablesConfig,
    /// The writer.
    pub writer: TableWriter,
    compiler: Compiler,
}

impl Drop for NodeTables {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.cfg.tables_path());
        let _ = std::fs::remove_file(self.cfg.qsbr_path());
    }
}

static REGIONS: AtomicU32 = AtomicU32::new(0);

impl NodeTables {
    /// Fresh tables for `node` in `/dev/shm`.
    pub fn new(node: &'static str) -> NodeTables {
        let cfg = TablesConfig {
            dir: PathBuf::from("/dev/shm"),
            name: format!(
                "conformance-{}-{}-{node}",
                std::process::id(),
                REGIONS.fetch_add(1, Ordering::Relaxed)
            ),
            size: 256 << 20,
            reader_slots: 4,
        };
        let writer = TableWriter::create(&cfg)
            .unwrap_or_else(|e| panic!("tables for {node} in /dev/shm: {e}"));
        NodeTables {
            node,
            cfg,
            writer,
            compiler: Compiler::new(node, CompileConfig::default()),
        }
    }

    /// Compiles `world` incrementally (`changes` since the last call), checks the result
    /// against a fresh compilation (equal up to numbering), publishes it and checks that the
    /// region reads back as what was applied. Returns the compiler's notes.
    pub fn compile(
        &mut self,
        world: &World,
        changes: &[lace_control::compile::Change],
    ) -> Vec<Note> {
        let inc = self
            .compiler
            .plan(world, changes)
            .unwrap_or_else(|e| panic!("{}: {e}", self.node));
        let full = desired(world, self.node, CompileConfig::default())
            .unwrap_or_else(|e| panic!("{}: {e}", self.node));
        assert_eq!(
            inc.tables.renumbered(),
            full.tables.renumbered(),
            "{}: the incremental compilation differs from a fresh one",
            self.node
        );
        assert_eq!(inc.notes, full.notes, "{}: notes differ", self.node);
        self.compiler
            .apply(&mut self.writer, inc.tables)
            .unwrap_or_else(|e| panic!("{}: {e}", self.node));
        assert_eq!(
            &read_back(&self.cfg).unwrap_or_else(|e| panic!("{}: {e}", self.node)),
            self.compiler.last(),
            "{}: the published tables read back differ from what was applied",
            self.node
        );
        inc.notes
    }

    /// The published tables.
    pub fn snapshot(&self) -> Snapshot<'_> {
        self.writer.staged_view()
    }

    /// The policy generation of the universe's network here.
    pub fn policy_gen(&self) -> u32 {
        self.snapshot()
            .network(NETWORK_ID)
            .map_or(0, |n| n.policy_gen())
    }
}

/// Whether the tables of the node where a pod's port is allow a NEW connection in `dir` with
/// the peer at `peer_addr` (port `port` of protocol `proto`): the port's policy set (none:
/// not isolated), the peer's class in the port's network's LPM, the set's decision.
fn side_allows(
    snap: &Snapshot<'_>,
    port: lace_shared::types::PortId,
    dir: PolicyDir,
    peer_addr: std::net::IpAddr,
    proto: u8,
    dport: u16,
) -> bool {
    let Some(p) = snap.port(port) else {
        panic!("port {} is not in the tables", port.0);
    };
    if p.policy == PolicySetId::NONE {
        return true;
    }
    let class = snap
        .network(p.network)
        .map(|n| n.peer_class(peer_addr))
        .unwrap_or_default();
    snap.policy_allows(p.policy, dir, class, proto, dport)
}

/// What the tables say about a NEW connection from `src` to `dst`: the source pod's egress on
/// its node, the destination pod's ingress on its. A connection a node's own stack opens to a
/// pod of that node enters through the host port and is never subject to ingress policy.
pub fn table_verdict(
    u: &Universe,
    nodes: &[NodeTables],
    src: &Party,
    dst: &Party,
    f: Family,
    proto: u8,
    port: u16,
) -> Verdict {
    let tables = |node: &str| {
        nodes
            .iter()
            .find(|n| n.node == node)
            .unwrap_or_else(|| panic!("no tables for {node}"))
    };
    let egress = match src {
        Party::Pod(p) => {
            let pl = &u.placement[p];
            side_allows(
                &tables(pl.node).snapshot(),
                pl.port,
                PolicyDir::Egress,
                u.addr(dst, f),
                proto,
                port,
            )
        }
        _ => true,
    };
    let ingress = match dst {
        Party::Pod(p) => {
            let pl = &u.placement[p];
            if matches!(src, Party::Node(n) if *n == pl.node) {
                true
            } else {
                side_allows(
                    &tables(pl.node).snapshot(),
                    pl.port,
                    PolicyDir::Ingress,
                    u.addr(src, f),
                    proto,
                    port,
                )
            }
        }
        _ => true,
    };
    Verdict { egress, ingress }
}
