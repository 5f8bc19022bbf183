//! `NodeResourcePolicy` (short name `nrp`): the CPU and topology manager configuration that a
//! set of nodes should run.

// kube's `printcolumn(...)` lists repeat `type_ = "..."`, which clippy mistakes for
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::{CpuManagerConfig, TopologyManagerConfig};
use crate::rules;

/// What a set of nodes should run. Where several policies select a node, the highest
/// `priority` wins, ties broken by name (alphabetically first wins); the others report a
/// Conflict condition.
#[derive(CustomResource, Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "nodetopo.io",
    version = "v1alpha1",
    kind = "NodeResourcePolicy",
    plural = "noderesourcepolicies",
    singular = "noderesourcepolicy",
    shortname = "nrp",
    category = "nodetopo",
    status = "NodeResourcePolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "NodeResourcePolicy states the kubelet CPU manager and topology manager configuration for the nodes it selects.",
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(
        name = "CPU-Manager",
        type_ = "string",
        json_path = ".spec.cpuManager.policy"
    ),
    printcolumn(
        name = "Topology-Manager",
        type_ = "string",
        json_path = ".spec.topologyManager.policy"
    ),
    printcolumn(
        name = "Matched",
        type_ = "integer",
        json_path = ".status.matchedNodes"
    ),
    printcolumn(
        name = "Applied",
        type_ = "integer",
        json_path = ".status.appliedNodes"
    ),
    printcolumn(
        name = "Invalid",
        type_ = "integer",
        json_path = ".status.invalidNodes"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = rules::spec_schema)]
pub struct NodeResourcePolicySpec {
    /// Nodes this policy applies to, by label. Absent or empty selects every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rules::node_selector_schema)]
    pub node_selector: Option<LabelSelector>,
    /// Higher wins where several policies select a node; equal priorities break by name.
    #[serde(default)]
    #[schemars(transform = rules::int32_schema)]
    pub priority: i32,
    /// CPU manager configuration. Absent means policy `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_manager: Option<CpuManagerConfig>,
    /// Topology manager configuration. Absent means policy `none`, scope `container`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_manager: Option<TopologyManagerConfig>,
    /// Whether and how the operator makes the selected kubelets run this (absent: Observe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutSpec>,
}

/// One node where the policy did not (yet) take effect, and why.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeProblem {
    /// Node name.
    pub node: String,
    /// PascalCase reason, e.g. `ReservedCPUsAbsent`, `Overridden`.
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
}

/// Roll-up of the policy's effect across the cluster, written by the operator.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeResourcePolicyStatus {
    /// The policy generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (every node this policy governs runs it), `Conflict` (it selects nodes that
    /// another policy governs), `Invalid` (the spec, or its effect on some nodes, is invalid).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Nodes whose labels match the node selector.
    #[serde(default)]
    #[schemars(transform = rules::int32_schema)]
    pub matched_nodes: i32,
    /// Matched nodes this policy governs (it won there); their NodeTopology spec carries it.
    #[serde(default)]
    #[schemars(transform = rules::int32_schema)]
    pub governed_nodes: i32,
    /// Governed nodes whose agent has applied the current NodeTopology spec without finding
    /// it invalid.
    #[serde(default)]
    #[schemars(transform = rules::int32_schema)]
    pub applied_nodes: i32,
    /// Governed nodes where the configuration cannot apply (found by the agent or by the
    /// operator from the node's reported topology, e.g. a reserved CPU the node lacks).
    #[serde(default)]
    #[schemars(transform = rules::int32_schema)]
    pub invalid_nodes: i32,
    /// Matched nodes governed by another policy (higher priority, or equal priority and an
    /// alphabetically earlier name).
    #[serde(default)]
    #[schemars(transform = rules::int32_schema)]
    pub overridden_nodes: i32,
    /// Rollout: governed nodes whose kubelet runs this policy (Applied True).
    #[serde(default)]
    #[schemars(transform = rules::int32_schema)]
    pub updated_nodes: i32,
    /// Rollout: governed nodes not yet changed or in progress.
    #[serde(default)]
    #[schemars(transform = rules::int32_schema)]
    pub pending_nodes: i32,
    /// Rollout: governed nodes whose change failed (Applied False, reason Failed).
    #[serde(default)]
    #[schemars(transform = rules::int32_schema)]
    pub failed_nodes: i32,
    /// The first few nodes (by name, at most 10) that are invalid, overridden or still
    /// pending, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problem_nodes: Vec<NodeProblem>,
}
