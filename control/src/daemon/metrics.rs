//! lace-control's Prometheus metrics (`lace-control run --metrics-listen ADDR`, served by
//! [`lace_shared::metrics::MetricsServer`] at `/metrics`). The loop updates them after every
//! batch ([`Metrics::observe_status`], [`Metrics::observe_publish`]), the CNI server per
//! request ([`Metrics::observe_cni`]); the names and help texts are listed in the README.

use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::status::StatusFile;

type Labels = Vec<(&'static str, String)>;

/// Every metric of one control, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    objects: Family<Labels, Gauge>,
    endpoints: Gauge,
    problems: Gauge,
    tables_generation: Gauge,
    publish_seconds: Histogram,
    publish_errors: Counter,
    cni_requests: Family<Labels, Counter>,
    conflicts: Counter,
    api_errors: Counter,
    api_reachable: Gauge,
    owed_deletions: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// The metrics, all zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("lace_control");
        let m = Metrics {
            objects: Family::default(),
            endpoints: Gauge::default(),
            problems: Gauge::default(),
            tables_generation: Gauge::default(),
            // 100 µs to ~13 s.
            publish_seconds: Histogram::new(exponential_buckets(1e-4, 2.0, 18)),
            publish_errors: Counter::default(),
            cni_requests: Family::default(),
            conflicts: Counter::default(),
            api_errors: Counter::default(),
            api_reachable: Gauge::default(),
            owed_deletions: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "objects",
            "objects control knows, by kind (Network, NetworkBindingPolicy, \
             NetworkRoutingPolicy, Node, Pod, Service, NetworkPolicy)",
            m.objects.clone(),
        );
        registry.register(
            "endpoints",
            "pod interfaces with an allocation on this node",
            m.endpoints.clone(),
        );
        registry.register(
            "problems",
            "objects or documents the source could not use (lace-control status lists them)",
            m.problems.clone(),
        );
        registry.register(
            "tables_generation",
            "generation of the tables last published to the forwarder",
            m.tables_generation.clone(),
        );
        registry.register(
            "publish_seconds",
            "time to compile and publish the node's tables after a change",
            m.publish_seconds.clone(),
        );
        registry.register(
            "publish_errors",
            "publications that failed (the forwarder kept the previous tables)",
            m.publish_errors.clone(),
        );
        registry.register(
            "cni_requests",
            "lace-cni requests answered, by request and result (ok, or the CNI error code)",
            m.cni_requests.clone(),
        );
        registry.register(
            "allocation_conflicts",
            "Kubernetes mode: allocation writes redone because another node's control wrote \
             first",
            m.conflicts.clone(),
        );
        registry.register(
            "api_errors",
            "Kubernetes mode: requests to the API server that failed (retried)",
            m.api_errors.clone(),
        );
        registry.register(
            "api_reachable",
            "Kubernetes mode: 1 while the API server answers, 0 while it is unreachable (new \
             allocations wait; releases are kept)",
            m.api_reachable.clone(),
        );
        registry.register(
            "owed_deletions",
            "Kubernetes mode: objects of releases taken while the API server was unreachable, \
             deleted when it answers again",
            m.owed_deletions.clone(),
        );
        Metrics { registry, ..m }
    }

    /// What the status of the last batch says.
    pub fn observe_status(&self, s: &StatusFile) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for (kind, n) in [
            ("Network", s.networks.len()),
            ("NetworkBindingPolicy", s.binding_policies.len()),
            ("NetworkRoutingPolicy", s.routing_policies.len()),
            ("Node", s.nodes.len()),
            ("Pod", s.pods.len()),
            ("Service", s.services.len()),
            ("NetworkPolicy", s.network_policies.len()),
        ] {
            self.objects
                .get_or_create(&vec![("kind", kind.to_owned())])
                .set(count(n));
        }
        self.endpoints.set(count(s.network_endpoints.len()));
        self.problems.set(count(s.problems.len()));
        self.tables_generation
            .set(i64::try_from(s.tables_generation).unwrap_or(i64::MAX));
    }

    /// The allocation store's totals since it opened: (conflicts, API errors).
    pub fn observe_store(&self, (conflicts, api_errors): (u64, u64)) {
        for (c, total) in [(&self.conflicts, conflicts), (&self.api_errors, api_errors)] {
            c.inc_by(total.saturating_sub(c.get()));
        }
    }

    /// Whether the allocation state is reachable, and the deletions owed to it.
    pub fn observe_api(&self, reachable: bool, owed: usize) {
        self.api_reachable.set(i64::from(reachable));
        self.owed_deletions
            .set(i64::try_from(owed).unwrap_or(i64::MAX));
    }

    /// One compilation and publication: how long it took and whether it was published.
    pub fn observe_publish(&self, took: Duration, published: bool) {
        self.publish_seconds.observe(took.as_secs_f64());
        if !published {
            self.publish_errors.inc();
        }
    }

    /// One lace-cni request answered.
    pub fn observe_cni(&self, request: &'static str, result: String) {
        self.cni_requests
            .get_or_create(&vec![("request", request.to_owned()), ("result", result)])
            .inc();
    }

    /// The OpenMetrics text `/metrics` serves.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::status::BindingEntry;

    #[test]
    fn what_the_loop_observes_is_encoded() {
        let m = Metrics::new();
        let mut s = StatusFile {
            tables_generation: 7,
            problems: vec!["one".into()],
            ..StatusFile::default()
        };
        let pod = |name: &str| BindingEntry {
            namespace: "shop".into(),
            name: name.into(),
            node: None,
            binding: "backend".into(),
            decided_by: None,
            conditions: Vec::new(),
        };
        s.pods = vec![pod("a"), pod("b"), pod("c")];
        m.observe_status(&s);
        m.observe_publish(Duration::from_millis(3), true);
        m.observe_publish(Duration::from_millis(5), false);
        m.observe_cni("Allocate", "ok".into());
        m.observe_cni("Allocate", "ok".into());
        m.observe_cni("Attach", "TryAgainLater".into());
        m.observe_store((3, 1));
        m.observe_store((5, 1));
        m.observe_api(false, 2);
        let text = m.encode();
        for line in [
            "lace_control_objects{kind=\"Pod\"} 3",
            "lace_control_objects{kind=\"Network\"} 0",
            "lace_control_problems 1",
            "lace_control_allocation_conflicts_total 5",
            "lace_control_api_errors_total 1",
            "lace_control_api_reachable 0",
            "lace_control_owed_deletions 2",
            "lace_control_tables_generation 7",
            "lace_control_publish_seconds_count 2",
            "lace_control_publish_errors_total 1",
            "lace_control_cni_requests_total{request=\"Allocate\",result=\"ok\"} 2",
            "lace_control_cni_requests_total{request=\"Attach\",result=\"TryAgainLater\"} 1",
            "# HELP lace_control_publish_seconds time to compile and publish",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }
}
