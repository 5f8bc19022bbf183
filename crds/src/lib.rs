//! nodetopo-crds: the `nodetopo.io/v1alpha1` API types and their validation rules.
//!
//! - [`NodeResourcePolicy`] (short name `nrp`): what a set of nodes should run.
//! - [`NodeTopology`] (short name `ntopo`): one per node; the operator writes its spec (the
//!   effective configuration), the node's agent writes its status (what it found and did).
//!
//! Both kinds are cluster-scoped, have the status subresource and belong to the `nodetopo`
//! category. The validation rules live twice, on purpose: as CEL `x-kubernetes-validations`
//! in the generated CRD schema (the API server rejects bad objects) and as Rust functions in
//! [`validation`] (the operator, `plan` and the agent apply the same rules, with the same
//! messages, to objects that reached them by another way). [`rules`] is the single table
//! both are built from.

#![warn(missing_docs)]

pub mod conditions;
pub mod config;
pub mod generate;
pub mod nodetopology;
pub mod nrt;
pub mod policy;
pub mod rollout;
pub mod rules;
pub mod validation;

pub use config::{
    CpuManagerConfig, CpuManagerPolicy, TopologyManagerConfig, TopologyManagerPolicy,
    TopologyManagerScope,
};
pub use nodetopology::{
    AuditStatus, ChangeStatus, ChangeStepStatus, DriftStatus, KubeletAssignment, KubeletObserved,
    KubeletSource, NodeTopology, NodeTopologySpec, NodeTopologyStatus, NodeTopologySummary,
    NrtReport, PolicyRef, PoolsReport,
};
pub use policy::{
    NodeProblem, NodeResourcePolicy, NodeResourcePolicySpec, NodeResourcePolicyStatus,
};

/// The API group of both kinds.
pub const GROUP: &str = "nodetopo.io";
/// The served and stored version.
pub const VERSION: &str = "v1alpha1";
/// Field manager of the operator (NodeTopology spec, NodeResourcePolicy status).
pub const OPERATOR_FIELD_MANAGER: &str = "nodetopo-operator";
/// Field manager of the agent (NodeTopology status).
pub const AGENT_FIELD_MANAGER: &str = "nodetopo-agent";
/// Field manager of the operator's rollout marks (the annotations below on NodeTopology).
pub const ROLLOUT_FIELD_MANAGER: &str = "nodetopo-rollout";
/// NodeTopology annotation set by the operator's rollout: the NodeTopology
/// `metadata.generation` whose spec the node's agent may make the kubelet run. The agent
/// acts only when it equals the generation it sees, so an edited spec needs a new mark.
pub const APPLY_GENERATION_ANNOTATION: &str = "nodetopo.io/apply-generation";
/// NodeTopology annotation set with the mark: the policy's `rollout.eviction`
/// (`Never` | `Evict`).
pub const EVICTION_ANNOTATION: &str = "nodetopo.io/eviction";
/// NodeTopology annotation set with the mark: when the operator marked the node (RFC 3339).
/// A node without its agent's verdict `rollout.progressDeadlineSeconds` after it counts
/// failed (`ProgressDeadlineExceeded`).
pub const APPLY_STARTED_ANNOTATION: &str = "nodetopo.io/apply-started";
