//! What the agent publishes besides the NodeTopology status: Prometheus metrics with the
//! admin server, rate-limited drift events, and the NodeResourceTopology object for the topology-aware scheduler.

pub mod drift_events;
pub mod metrics;
pub mod nrt;
