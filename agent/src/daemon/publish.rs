//! What the agent publishes besides the NodeTopology status: Prometheus metrics with the
//! admin server, the NodeResourceTopology object for the topology-aware scheduler, and the
//! Pod Events explaining kubelet admission failures.

pub mod explain_events;
pub mod metrics;
pub mod nrt;
