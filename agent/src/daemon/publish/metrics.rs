//! Metrics (prometheus-client, kubelet names under the `nodetopo_` prefix) and the admin HTTP
//! server: `/metrics`, `/healthz` (alive), `/readyz` (pods synced and a configuration in
//! effect; false again once SIGTERM arrives).
//!
//! The kubelet's `container_aligned_compute_resources_count` is a counter of allocations; the
//! agent publishes the current number of containers per boundary instead (a gauge of the
//! same name), which is what a dashboard of one node wants and what survives restarts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use nodetopo_runtime::admin::Readiness;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::daemon::core::{Core, Tally};

/// Labels of the alignment gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlignLabels {
    /// `container` (the agent aligns per container).
    pub scope: &'static str,
    /// `physical_cpu`, `uncore_cache`, `numa_node` or `socket`.
    pub boundary: &'static str,
}

/// Labels of the admission-explanation counter (values from fixed sets: the kubelet's
/// resource-manager reasons, `Agree`/`Disagree`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExplainLabels {
    /// The kubelet's reason (`TopologyAffinityError`, `SMTAlignmentError`,
    /// `UnexpectedAdmissionError`, `EmptyPodSharedPoolError`).
    pub reason: &'static str,
    /// `Agree` or `Disagree` (nodetopo's replay against the kubelet's reason).
    pub agreement: &'static str,
}

/// Labels of the drift gauge: one of the audit's fixed reasons.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DriftLabels {
    /// `StaleCheckpointEntry`, `ContainerNotFound`, ... (see docs/audit.md).
    pub reason: &'static str,
}

/// The agent's metrics.
pub struct Metrics {
    registry: Registry,
    pinning_requests: Counter,
    pinning_errors: Counter,
    shared_pool_millicores: Gauge,
    exclusive_cpus: Gauge,
    aligned: Family<AlignLabels, Gauge>,
    aligned_failures: Family<AlignLabels, Gauge>,
    admission_requests: Counter,
    admission_errors: Counter,
    admission_duration: Histogram,
    kubelet_disagreements: Gauge,
    explanations: Family<ExplainLabels, Counter>,
    drift: Family<DriftLabels, Gauge>,
    cgroups_unreadable: Gauge,
    cycle_duration: Histogram,
    last: Mutex<Tally>,
    ready: Readiness,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nodetopo");
        let m = Self {
            pinning_requests: Counter::default(),
            pinning_errors: Counter::default(),
            shared_pool_millicores: Gauge::default(),
            exclusive_cpus: Gauge::default(),
            aligned: Family::default(),
            aligned_failures: Family::default(),
            admission_requests: Counter::default(),
            admission_errors: Counter::default(),
            admission_duration: Histogram::new(exponential_buckets(0.0001, 4.0, 10)),
            kubelet_disagreements: Gauge::default(),
            explanations: Family::default(),
            drift: Family::default(),
            cgroups_unreadable: Gauge::default(),
            cycle_duration: Histogram::new(exponential_buckets(0.0001, 4.0, 10)),
            last: Mutex::new(Tally::default()),
            ready: Readiness::new(),
            registry: Registry::default(),
        };
        registry.register(
            "cpu_manager_pinning_requests",
            "Containers that asked for exclusive CPUs",
            m.pinning_requests.clone(),
        );
        registry.register(
            "cpu_manager_pinning_errors",
            "Exclusive CPU requests that failed",
            m.pinning_errors.clone(),
        );
        registry.register(
            "cpu_manager_shared_pool_size_millicores",
            "Size of the shared CPU pool in millicores",
            m.shared_pool_millicores.clone(),
        );
        registry.register(
            "cpu_manager_exclusive_cpu_allocation_count",
            "CPUs exclusively allocated to containers",
            m.exclusive_cpus.clone(),
        );
        registry.register(
            "container_aligned_compute_resources_count",
            "Containers whose CPUs are aligned at a boundary",
            m.aligned.clone(),
        );
        registry.register(
            "container_aligned_compute_resources_failure_count",
            "Containers whose CPUs are not aligned at a boundary",
            m.aligned_failures.clone(),
        );
        registry.register(
            "topology_manager_admission_requests",
            "Pod admissions through the topology manager",
            m.admission_requests.clone(),
        );
        registry.register(
            "topology_manager_admission_errors",
            "Pod admissions refused",
            m.admission_errors.clone(),
        );
        registry.register(
            "topology_manager_admission_duration_seconds",
            "Time to admit a batch of pods",
            m.admission_duration.clone(),
        );
        registry.register(
            "kubelet_disagreements",
            "Containers whose kubelet CPU assignment differs from nodetopo's",
            m.kubelet_disagreements.clone(),
        );
        registry.register(
            "admission_explanations",
            "Kubelet admission failures nodetopo replayed and explained, by the kubelet's reason and whether the replay agrees",
            m.explanations.clone(),
        );
        registry.register(
            "cpuset_drift_containers",
            "Running containers whose real cpuset (cgroup) differs from their assignment, by reason (agent with --cgroup-root)",
            m.drift.clone(),
        );
        registry.register(
            "cpuset_unreadable_containers",
            "Running containers whose cgroup cpuset could not be read (agent with --cgroup-root)",
            m.cgroups_unreadable.clone(),
        );
        registry.register(
            "event_cycle_duration_seconds",
            "Time from reading the inputs to writing state and status",
            m.cycle_duration.clone(),
        );
        Self { registry, ..m }
    }

    /// Records an admission batch's duration.
    pub fn admission_duration(&self, d: Duration) {
        self.admission_duration.observe(d.as_secs_f64());
    }

    /// Updates the gauges and counters from the core after a cycle.
    pub fn observe(&self, core: &Core, cycle: Duration) {
        self.cycle_duration.observe(cycle.as_secs_f64());
        if let Ok(mut last) = self.last.lock() {
            let t = &core.tally;
            self.pinning_requests
                .inc_by(t.pinning_requests.saturating_sub(last.pinning_requests));
            self.pinning_errors
                .inc_by(t.pinning_errors.saturating_sub(last.pinning_errors));
            self.admission_requests
                .inc_by(t.admission_requests.saturating_sub(last.admission_requests));
            self.admission_errors
                .inc_by(t.admission_errors.saturating_sub(last.admission_errors));
            for ((reason, agreement), n) in &t.explanations {
                let seen = last
                    .explanations
                    .get(&(reason.clone(), *agreement))
                    .copied()
                    .unwrap_or(0);
                // The core explains only these reasons; the label set stays fixed.
                let Some(reason) = nodetopo_engine::admission::replay::MANAGER_REASONS
                    .iter()
                    .find(|r| *r == reason)
                else {
                    continue;
                };
                self.explanations
                    .get_or_create(&ExplainLabels { reason, agreement })
                    .inc_by(n.saturating_sub(seen));
            }
            *last = t.clone();
        }
        if let Some(pools) = core.pools() {
            self.shared_pool_millicores
                .set(pools.shared.len() as i64 * 1000);
            self.exclusive_cpus.set(pools.exclusive.len() as i64);
        }
        let mut counts = [0i64; 4];
        let mut total = 0i64;
        for a in core.allocations() {
            total += 1;
            let flags = [
                a.aligned.physical_cpu,
                a.aligned.uncore_cache,
                a.aligned.numa_node,
                a.aligned.socket,
            ];
            for (c, f) in counts.iter_mut().zip(flags) {
                *c += i64::from(f);
            }
        }
        for (i, b) in ["physical_cpu", "uncore_cache", "numa_node", "socket"]
            .into_iter()
            .enumerate()
        {
            let l = AlignLabels {
                scope: "container",
                boundary: b,
            };
            self.aligned.get_or_create(&l).set(counts[i]);
            self.aligned_failures
                .get_or_create(&l)
                .set(total - counts[i]);
        }
        self.kubelet_disagreements
            .set(core.kubelet_differences().len() as i64);
        if let Some(report) = core.audit_report() {
            for (reason, n) in report.containers_by_reason() {
                self.drift
                    .get_or_create(&DriftLabels {
                        reason: reason.as_str(),
                    })
                    .set(n as i64);
            }
            self.cgroups_unreadable.set(report.unreadable.len() as i64);
        }
        self.ready.set(core.ready());
    }

    /// Not ready for good: the agent is stopping.
    pub fn stopping(&self) {
        self.ready.stop();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Starts the admin server ([`nodetopo_runtime::admin`]) on `addr` in the background.
pub async fn serve(addr: &str, metrics: Arc<Metrics>) -> anyhow::Result<()> {
    let ready = metrics.ready.clone();
    let router = nodetopo_runtime::admin::router(ready, move || Ok(metrics.encode()));
    nodetopo_runtime::admin::spawn(addr, router)
        .await
        .context("starting the admin server")?;
    Ok(())
}
