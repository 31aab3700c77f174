//! lace-benches: lace's table benchmarks and the DPDK anchors they are compared with.
//!
//! * [`dpdk`]: safe wrappers over `rte_eal`, `rte_fib` (DIR24_8), `rte_fib6` (TRIE) and
//!   `rte_hash`, bound with bindgen at build time against the system DPDK (22.11).
//! * [`sys`]: CPU affinity (pinning the publish-latency reader to its own core, giving the peer
//!   processes their CPUs back). With
//!   [`dpdk`], the only modules allowed `unsafe`; every block carries a `// SAFETY:` comment.
//! * [`lace`]: lace's tables (`lace-shared`) built on `/dev/shm` regions the way the figures
//!   need them: FIBs, hash tables, many networks, and a writer/reader pair timing publication.
//! * [`services`]: ClusterIP Services in real tables (a cluster's worth of Service ports with
//!   their Maglev records, as lace-control compiles them) and the NEW-connection lookup + pick.
//! * [`workload`]: deterministic route tables (BGP-like IPv4/IPv6, pod networks), lookup
//!   streams and exact-match keys.
//! * [`report`]: [`report::Figure`]s with anchors and ratios, targets, the text table and
//!   JSON, and the cycle/latency measurement helpers.
//! * [`baseline`]: the regression gate — runs saved as a baseline, each figure's noise band
//!   from their spread, a later run compared with them figure by figure.
//! * [`anchors`]: the DPDK measurements every lace figure is reported beside.
//! * [`pipeline`]: packets through lace-forwarder's pipeline between DPDK `net_null` ports,
//!   beside the plain null-PMD forward loop, and its two-worker scaling; with connection
//!   tracking (a tracked connection through a ClusterIP, new connections per second).
//! * [`instructions`]: instructions per packet of every pipeline path, counted by running
//!   lace-bench's own pipeline rounds under callgrind.
//! * [`ct`]: the connection tracker's flow table filled with a million connections, its memory.
//! * [`peer`]: lace's l3_encap path beside OVS-DPDK 3.1 (dec_ttl + GRE/IPv6 push) and
//!   `dpdk-testpmd` (the I/O floor) on the same pcap, ports and core; [`peer_host`] runs and
//!   reads those peer processes.
//! * [`latency`]: per-packet latency through lace-forwarder's real worker loop (busy and
//!   adaptive polling) under a paced load, beside a bare ring-to-ring loop.
//! * [`control`]: lace-control's binding, IPAM and table compiler in process, and the whole
//!   stack (forwarders, controls, lace-cni in network namespaces) from a CNI ADD to the first
//!   packet through.
//! * [`policy`]: Kubernetes NetworkPolicy compiled for one node of a kube-vnet-shaped cluster
//!   (10,000 pods, 1,000 policies), beside the same compile of 1,000 pods.
//! * [`podpath`]: pod-to-pod TCP, UDP and ping across two nodes, lace beside the kernel's own
//!   SRv6, or its VXLAN where it has no seg6, built on the same machine (`lace-bench
//!   --pod-path`, root).
//! * [`rttsplit`]: where a pod round trip's microseconds go, segment by segment, from packet
//!   captures at four points (part of `--pod-path`).
//! * [`servicepath`]: TCP connect/request/response/close through a ClusterIP across two nodes,
//!   lace beside the kernel's own Service path (kube-proxy's nftables rules) on the same
//!   machine (`lace-bench --service-path`, root).
//!
//! The `lace-bench` binary prints the whole report; the criterion benches under `benches/`
//! reuse the same pieces. Timing figures are never asserted on.

pub mod anchors;
pub mod baseline;
pub mod control;
pub mod ct;
pub mod dpdk;
pub mod instructions;
pub mod k8s;
pub mod k8s_scale;
pub mod lace;
pub mod latency;
pub mod learning;
pub mod peer;
pub mod peer_host;
pub mod pipeline;
pub mod podpath;
pub mod policy;
pub mod report;
pub mod rttsplit;
pub mod servicepath;
pub mod services;
pub mod sys;
pub mod workload;
