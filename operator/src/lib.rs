//! nodetopo-operator: reconciles NodeResourcePolicy objects into per-node NodeTopology specs
//! and rolls the result up into each policy's status.
//!
//! Pipeline: watch (policies, nodes, NodeTopologies) -> [`decide`] (pure) -> [`apply`]
//! (server-side apply, skipping no-ops) -> status and events. [`leader`] makes two replicas
//! safe; [`admin`] serves `/metrics`, `/healthz`, `/readyz`.

pub mod admin;
pub mod apply;
pub mod cli;
pub mod controller;
pub mod decide;
pub mod error;
pub mod leader;
pub mod metrics;
pub mod rollout_controller;
pub mod selector;
pub mod triggers;
