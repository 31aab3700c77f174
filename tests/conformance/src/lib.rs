//! # lace-conformance — Kubernetes NetworkPolicy truth tables
//!
//! A **universe** ([`universe`]: namespaces `x`, `y`, `z` × pods `a`, `b`, `c` × ports 80/81
//! × TCP/UDP/SCTP, as the upstream netpol e2e builds it, on two lace nodes), **cases**
//! ([`case`]: steps of actions — policies created, updated, deleted, bound; pod and namespace
//! labels changed; pods added and removed), and **probes** ([`Probe`]: every source × destination
//! × protocol/port × address family, pods, addresses outside the cluster and the nodes' own
//! stacks included). Every probe of every step is decided three ways and the answers compared:
//!
//! 1. by lace-control's pure evaluator ([`lace_control::netpol::evaluate`]), the statement of
//!    upstream semantics;
//! 2. by the tables lace-control's compiler publishes for each node into a real
//!    `TableWriter` in `/dev/shm` ([`tables`]): the port's policy set, the peer's class in the
//!    network's LPM, `Snapshot::policy_allows` — the source's egress on its node and the
//!    destination's ingress on its;
//! 3. by lace-forwarder's real pipeline, one per node, reading those very tables as a worker
//!    does ([`pipeline`]): every probe between two pods is a real packet (TCP SYN, UDP
//!    datagram, SCTP INIT, ICMP echo) from the source pod's port, encapsulated to the other
//!    node when it leaves on the uplink and processed there; allowed when it reaches the
//!    destination pod's port, denied when dropped as `policy-denied` (any other fate fails the
//!    case). Replies of allowed connections must come back, and the connections a step
//!    established must be cut (`policy-revoked`) on their next packet by the node that refuses
//!    them after the next step, and pass when still allowed.
//!
//! Upstream's own expected tables ([`case::Expect`]) are checked against the evaluator, and
//! between steps every connection that was allowed and no longer is must find its network's
//! policy generation changed on the node that now refuses it (so the flow table re-classifies
//! established flows: revoke on narrow) — and the pipeline shows the flow cut.
//!
//! The cases: [`upstream::cases`] (the 48 `test/e2e/network/netpol` scenarios of
//! `network_policy.go`, transliterated), [`generated::cases`] (families in the style of
//! cyclonus: targets, peers, ports and protocols, conflicts, actions), [`kube_vnet::cases`]
//! (the NetworkPolicies kube-vnet's operator generates: baselines, memberships by direction,
//! isolation levels, cross-namespace members, a disabled namespace, a member's direction
//! changed and a network deleted while connections are open) and [`revoke::cases`] (lace's own
//! revoke-on-narrow cases).
//!
//! ## Driving a case
//!
//! [`drive`] runs a case and calls back after every step with a [`StepContext`]: the world, each
//! node's tables (their [`lace_shared::tables::TablesConfig`]: a forwarder attaches there), and
//! every probe with the pods' ports and addresses and the evaluator's verdict; [`check`] makes
//! the three decisions there.

pub mod case;
pub mod generated;
pub mod kube_vnet;
pub mod pipeline;
pub mod revoke;
pub mod tables;
pub mod universe;
pub mod upstream;

use std::collections::BTreeMap;

use lace_control::compile::{Change, Note};
use lace_control::daemon::core::world_changes;
use lace_control::netpol::{evaluate, Connection, Verdict};
use lace_shared::policy::{PROTO_SCTP, PROTO_TCP, PROTO_UDP};

pub use case::{Action, Case, Expect, Filter, Step};
pub use pipeline::{Cluster, PipelineChecked};
pub use tables::{table_verdict, NodeTables};
pub use universe::{External, Family, Party, Universe, NODES};

/// IP protocol number of ICMP (and of ICMPv6's probes here: only "a protocol without ports"
/// matters).
pub const PROTO_ICMP: u8 = 1;

/// The protocol/port pairs every probe set covers: the served ports on each protocol, and a
/// protocol without ports.
pub const PROBED: [(u8, u16); 7] = [
    (PROTO_TCP, 80),
    (PROTO_TCP, 81),
    (PROTO_UDP, 80),
    (PROTO_UDP, 81),
    (PROTO_SCTP, 80),
    (PROTO_SCTP, 81),
    (PROTO_ICMP, 0),
];

/// One NEW connection to decide.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Probe {
    /// Who opens it.
    pub src: Party,
    /// To whom.
    pub dst: Party,
    /// Address family.
    pub family: Family,
    /// IP protocol.
    pub proto: u8,
    /// Destination port (0 without ports).
    pub port: u16,
}

impl Probe {
    /// The connection as the evaluator takes it.
    pub fn connection(&self, u: &Universe) -> Connection {
        Connection {
            src: u.side(&self.src, self.family),
            dst: u.side(&self.dst, self.family),
            proto: self.proto,
            port: self.port,
        }
    }
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} -> {} {:?} proto {} port {}",
            self.src, self.dst, self.family, self.proto, self.port
        )
    }
}

/// Every probe of the universe: pods, outside addresses and nodes to pods; pods to pods,
/// outside addresses and nodes; on every protocol/port of [`PROBED`], in both families.
pub fn probes(u: &Universe) -> Vec<Probe> {
    let pods: Vec<Party> = u.pods().cloned().map(Party::Pod).collect();
    let others: Vec<Party> = External::ALL
        .into_iter()
        .map(Party::External)
        .chain(NODES.into_iter().map(Party::Node))
        .collect();
    let mut pairs: Vec<(Party, Party)> = Vec::new();
    for s in pods.iter().chain(&others) {
        for d in &pods {
            pairs.push((s.clone(), d.clone()));
        }
    }
    for s in &pods {
        for d in &others {
            pairs.push((s.clone(), d.clone()));
        }
    }
    let mut out = Vec::with_capacity(pairs.len() * PROBED.len() * 2);
    for (src, dst) in pairs {
        for family in Family::ALL {
            for (proto, port) in PROBED {
                out.push(Probe {
                    src: src.clone(),
                    dst: dst.clone(),
                    family,
                    proto,
                    port,
                });
            }
        }
    }
    out
}

/// What a step left for the checks (and for a third decision).
#[derive(Debug)]
pub struct StepContext<'a> {
    /// The case.
    pub case: &'a Case,
    /// The step's index.
    pub step: usize,
    /// The universe after the step.
    pub universe: &'a Universe,
    /// Each node's published tables.
    pub nodes: &'a [NodeTables],
    /// Every probe with the evaluator's verdict.
    pub probes: &'a [(Probe, Verdict)],
    /// The compilers' notes.
    pub notes: &'a [Note],
}

/// Runs `case` from the standard universe, compiling and publishing every node's tables after
/// each step, and calls `per_step` then.
pub fn drive(case: &Case, mut per_step: impl FnMut(&StepContext<'_>)) {
    let mut u = Universe::standard();
    let mut nodes: Vec<NodeTables> = NODES.iter().map(|n| NodeTables::new(n)).collect();
    for n in &mut nodes {
        n.compile(&u.world, &[Change::All]);
    }
    for (i, step) in case.steps.iter().enumerate() {
        let before = u.world.clone();
        for a in &step.actions {
            a.run(&mut u);
        }
        let changes = world_changes(&before, &u.world);
        let mut notes = Vec::new();
        for n in &mut nodes {
            notes.extend(n.compile(&u.world, &changes));
        }
        let probes: Vec<(Probe, Verdict)> = probes(&u)
            .into_iter()
            .map(|p| {
                let v = evaluate(&u.world, &p.connection(&u));
                (p, v)
            })
            .collect();
        per_step(&StepContext {
            case,
            step: i,
            universe: &u,
            nodes: &nodes,
            probes: &probes,
            notes: &notes,
        });
    }
}

/// What [`check`] compared.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// Probes decided both ways.
    pub probes: usize,
    /// Probes also compared with upstream's expected tables.
    pub upstream: usize,
    /// Connections revoked by a step (their generation checked).
    pub revoked: usize,
    /// What the forwarder pipeline decided.
    pub pipeline: PipelineChecked,
}

/// A step's verdicts and each node's policy generation after it.
type StepRecord = (BTreeMap<Probe, Verdict>, BTreeMap<&'static str, u32>);

/// Runs `case` and checks every step (see the crate docs); the first difference is an error
/// naming the case, the step and the probe.
pub fn check(case: &Case) -> Result<Checked, String> {
    let mut out = Checked::default();
    let mut err: Option<String> = None;
    // The previous step's verdicts and generations, for revocation.
    let mut before: Option<StepRecord> = None;
    let mut cluster: Option<Cluster> = None;
    drive(case, |cx| {
        if err.is_some() {
            return;
        }
        let u = cx.universe;
        let gens: BTreeMap<&'static str, u32> =
            cx.nodes.iter().map(|n| (n.node, n.policy_gen())).collect();
        for (p, eval) in cx.probes {
            let tab = table_verdict(u, cx.nodes, &p.src, &p.dst, p.family, p.proto, p.port);
            out.probes += 1;
            if tab != *eval {
                err = Some(format!(
                    "{} step {}: {p}: evaluator {eval:?}, tables {tab:?}",
                    cx.case.name, cx.step
                ));
                return;
            }
        }
        for e in &cx.case.steps[cx.step].expect {
            for (p, eval) in cx.probes {
                let (Party::Pod(s), Party::Pod(d)) = (&p.src, &p.dst) else {
                    continue;
                };
                if s == d || p.proto != e.proto || p.port != e.port {
                    continue;
                }
                out.upstream += 1;
                if eval.allowed() != e.allowed(s, d) {
                    err = Some(format!(
                        "{} step {}: {p}: upstream expects {}, the evaluator says {eval:?}",
                        cx.case.name,
                        cx.step,
                        e.allowed(s, d)
                    ));
                    return;
                }
            }
        }
        if let Some((prev, prev_gens)) = &before {
            for (p, eval) in cx.probes {
                let Some(was) = prev.get(p) else { continue };
                if !was.allowed() || eval.allowed() {
                    continue;
                }
                out.revoked += 1;
                let node_of = |party: &Party| match party {
                    Party::Pod(x) => Some(u.placement[x].node),
                    _ => None,
                };
                let refused_by = if was.egress && !eval.egress {
                    node_of(&p.src)
                } else {
                    node_of(&p.dst)
                };
                if let Some(n) = refused_by {
                    if prev_gens.get(n) == gens.get(n) {
                        err = Some(format!(
                            "{} step {}: {p} was allowed and is refused now, but {n}'s policy \
                             generation did not change: an established flow would survive",
                            cx.case.name, cx.step
                        ));
                        return;
                    }
                }
            }
        }
        let decided = match cluster.take() {
            Some(c) => Ok(c),
            None => Cluster::attach(cx),
        }
        .and_then(|mut c| c.step(cx).map(|k| (c, k)));
        match decided {
            Ok((c, k)) => {
                cluster = Some(c);
                out.pipeline.add(&k);
            }
            Err(e) => {
                err = Some(format!("{} step {}: pipeline: {e}", cx.case.name, cx.step));
                return;
            }
        }
        before = Some((
            cx.probes.iter().map(|(p, v)| (p.clone(), *v)).collect(),
            gens,
        ));
    });
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
