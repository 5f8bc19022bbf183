//! What the agent publishes besides the NodeTopology status: Prometheus metrics with the
//! admin server, the NodeResourceTopology object for the topology-aware scheduler, the
//! Pod Events explaining kubelet admission failures, and the rate-limited cpuset drift
//! Events.

pub mod drift_events;
pub mod explain_events;
pub mod metrics;
pub mod nrt;
