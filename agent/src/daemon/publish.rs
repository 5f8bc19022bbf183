//! What the agent publishes besides the NodeTopology status: Prometheus metrics with the
//! admin server, and the NodeResourceTopology object for the topology-aware scheduler.

pub mod metrics;
pub mod nrt;
