//! Prometheus metrics (prometheus-client), prefix `nodetopo_operator`. Label values come from
//! small fixed sets (controller kind, error category, node state); the per-policy gauge is
//! labelled by policy name, which administrators create in small numbers.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// `controller` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `node` or `policy`.
    pub controller: &'static str,
}

/// Error labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// `node` or `policy`.
    pub controller: &'static str,
    /// [`crate::error::Error::category`].
    pub category: &'static str,
}

/// Per-policy node counts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// Policy name.
    pub policy: String,
    /// One of [`POLICY_NODE_STATES`].
    pub state: &'static str,
}

/// The `state` label values of the per-policy gauge, in the order
/// [`Metrics::set_policy_nodes`] takes them.
pub const POLICY_NODE_STATES: [&str; 5] =
    ["matched", "governed", "applied", "invalid", "overridden"];

/// All operator metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    /// Reconciles run.
    pub reconciles: Family<ControllerLabels, Counter>,
    /// Reconcile errors by category.
    pub errors: Family<ErrorLabels, Counter>,
    /// Reconcile duration in seconds.
    pub duration: Family<ControllerLabels, Histogram>,
    /// Server-side applies actually sent (no-ops are skipped and not counted).
    pub writes: Family<ControllerLabels, Counter>,
    /// Nodes per policy and state: set through [`Metrics::set_policy_nodes`] so that the
    /// series of a deleted policy can be removed ([`Metrics::forget_policy`]).
    pub nodes_per_policy: Family<PolicyLabels, Gauge>,
    /// The policy names that have series in `nodes_per_policy`.
    labelled_policies: Mutex<BTreeSet<String>>,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nodetopo_operator");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 14))
        });
        let writes = Family::<ControllerLabels, Counter>::default();
        let nodes_per_policy = Family::<PolicyLabels, Gauge>::default();
        let leader = Gauge::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconcile errors by category",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            duration.clone(),
        );
        registry.register("writes", "Server-side applies sent", writes.clone());
        registry.register(
            "policy_nodes",
            "Nodes per NodeResourcePolicy and state",
            nodes_per_policy.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader lease",
            leader.clone(),
        );
        Self {
            reconciles,
            errors,
            duration,
            writes,
            nodes_per_policy,
            labelled_policies: Mutex::new(BTreeSet::new()),
            leader,
            registry,
        }
    }

    /// Counts a reconcile and returns a guard that records its duration when dropped.
    pub fn start(&self, controller: &'static str) -> ReconcileTimer<'_> {
        self.reconciles
            .get_or_create(&ControllerLabels { controller })
            .inc();
        ReconcileTimer {
            metrics: self,
            controller,
            start: Instant::now(),
        }
    }

    /// Sets the per-policy node gauges of `policy`, one value per [`POLICY_NODE_STATES`].
    pub fn set_policy_nodes(&self, policy: &str, counts: [i32; 5]) {
        if let Ok(mut names) = self.labelled_policies.lock() {
            if !names.contains(policy) {
                names.insert(policy.to_string());
            }
        }
        for (state, n) in POLICY_NODE_STATES.into_iter().zip(counts) {
            self.nodes_per_policy
                .get_or_create(&PolicyLabels {
                    policy: policy.to_string(),
                    state,
                })
                .set(i64::from(n));
        }
    }

    /// Removes every series of a deleted policy, so that it stops being exported.
    pub fn forget_policy(&self, policy: &str) {
        if let Ok(mut names) = self.labelled_policies.lock() {
            names.remove(policy);
        }
        for state in POLICY_NODE_STATES {
            self.nodes_per_policy.remove(&PolicyLabels {
                policy: policy.to_string(),
                state,
            });
        }
    }

    /// Removes the series of every policy for which `exists` says false (policies deleted
    /// while their delete event was missed or raced a reconcile).
    pub fn retain_policies(&self, exists: impl Fn(&str) -> bool) {
        let gone: Vec<String> = match self.labelled_policies.lock() {
            Ok(names) => names.iter().filter(|n| !exists(n)).cloned().collect(),
            Err(_) => return,
        };
        for name in gone {
            self.forget_policy(&name);
        }
    }

    /// Text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Records a reconcile's duration on drop.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    controller: &'static str,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .duration
            .get_or_create(&ControllerLabels {
                controller: self.controller,
            })
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_prefixed_metrics() {
        let m = Metrics::new();
        drop(m.start("node"));
        m.errors
            .get_or_create(&ErrorLabels {
                controller: "node",
                category: "conflict",
            })
            .inc();
        let text = m.encode().unwrap();
        assert!(
            text.contains("nodetopo_operator_reconciles_total{controller=\"node\"} 1"),
            "{text}"
        );
        assert!(text.contains(
            "nodetopo_operator_reconcile_errors_total{controller=\"node\",category=\"conflict\"} 1"
        ));
        assert!(text
            .contains("nodetopo_operator_reconcile_duration_seconds_count{controller=\"node\"} 1"));
    }

    fn policy_series(m: &Metrics, policy: &str) -> usize {
        let text = m.encode().unwrap();
        let needle = format!("policy=\"{policy}\"");
        text.lines()
            .filter(|l| l.starts_with("nodetopo_operator_policy_nodes") && l.contains(&needle))
            .count()
    }

    #[test]
    fn deleted_policies_lose_their_series() {
        let m = Metrics::new();
        m.set_policy_nodes("a", [3, 2, 1, 0, 1]);
        m.set_policy_nodes("b", [1, 1, 1, 0, 0]);
        m.set_policy_nodes("c", [0, 0, 0, 0, 0]);
        let text = m.encode().unwrap();
        assert!(
            text.contains("nodetopo_operator_policy_nodes{policy=\"a\",state=\"governed\"} 2"),
            "{text}"
        );
        let before = [
            policy_series(&m, "a"),
            policy_series(&m, "b"),
            policy_series(&m, "c"),
        ];
        assert_eq!(before, [5, 5, 5]);
        m.forget_policy("a");
        m.retain_policies(|n| n != "c");
        let after = [
            policy_series(&m, "a"),
            policy_series(&m, "b"),
            policy_series(&m, "c"),
        ];
        println!("policy series before {before:?}, after deleting a and c {after:?}");
        assert_eq!(after, [0, 5, 0]);
        // A policy of the same name created again is exported again.
        m.set_policy_nodes("a", [1, 1, 0, 0, 0]);
        assert_eq!(policy_series(&m, "a"), 5);
    }
}
