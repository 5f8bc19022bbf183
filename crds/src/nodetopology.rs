//! `NodeTopology` (short name `ntopo`): one per node, named after it and owned by its Node.
//! The operator writes `spec` (field manager `nodetopo-operator`); the node's agent writes
//! `status` (field manager `nodetopo-agent`).

// kube's `printcolumn(...)` lists repeat `type_ = "..."`, which clippy mistakes for
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use nodetopo_engine::report::{AllocationReport, RejectionReport, TopologyReport};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::{CpuManagerConfig, TopologyManagerConfig};
use crate::rules;

/// The effective configuration of one node, written by the operator.
#[derive(CustomResource, Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "nodetopo.io",
    version = "v1alpha1",
    kind = "NodeTopology",
    plural = "nodetopologies",
    singular = "nodetopology",
    shortname = "ntopo",
    category = "nodetopo",
    status = "NodeTopologyStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "NodeTopology is one node's effective CPU/topology manager configuration (spec, from the operator) and its discovered topology and CPU allocations (status, from the node agent).",
    printcolumn(name = "Policy", type_ = "string", json_path = ".spec.policyRef.name"),
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
    printcolumn(name = "CPUs", type_ = "integer", json_path = ".status.summary.cpus"),
    printcolumn(
        name = "NUMA",
        type_ = "integer",
        json_path = ".status.summary.numaNodes"
    ),
    printcolumn(
        name = "Uncore",
        type_ = "integer",
        json_path = ".status.summary.uncoreCaches"
    ),
    printcolumn(
        name = "Exclusive",
        type_ = "integer",
        json_path = ".status.summary.exclusiveCPUs"
    ),
    printcolumn(
        name = "NUMA-Aligned",
        type_ = "integer",
        description = "Exclusive containers whose CPUs lie inside one NUMA node and on whole physical cores (aligned.numaNode and aligned.physicalCPU).",
        json_path = ".status.summary.alignedContainers"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Kubelet-Agreement",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"KubeletAgreement\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = rules::spec_schema)]
pub struct NodeTopologySpec {
    /// CPU manager configuration in effect for this node.
    pub cpu_manager: CpuManagerConfig,
    /// Topology manager configuration in effect for this node.
    pub topology_manager: TopologyManagerConfig,
    /// The NodeResourcePolicy this configuration came from; absent when no policy selects the
    /// node (then both managers run policy `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_ref: Option<PolicyRef>,
}

/// Reference to the policy (and its generation) a NodeTopology spec was rendered from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRef {
    /// NodeResourcePolicy name.
    pub name: String,
    /// Its `metadata.generation` when the spec was rendered.
    pub generation: i64,
}

/// CPU pools of the node, in list syntax.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolsReport {
    /// Reserved CPUs (system daemons).
    pub reserved: String,
    /// The shared pool: every CPU not exclusively assigned (includes the reserved CPUs
    /// unless strict-cpu-reservation is set).
    pub shared: String,
    /// CPUs exclusively assigned to containers.
    pub exclusive: String,
    /// CPUs that can still be assigned exclusively.
    pub free: String,
}

/// One exclusive assignment read from the kubelet's CPU manager checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletAssignment {
    /// The pod's UID; empty where the source names the pod only (PodResources reports
    /// namespace and name) and the agent has not seen the pod yet.
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    /// `namespace/name` of the pod, where known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod: String,
    /// Container name; empty for a pod-level allocation (the kubelet's
    /// PodLevelResourceManagers: CPUs held by the pod as a whole).
    pub container: String,
    /// CPUs, in list syntax.
    pub cpus: String,
}

/// Where the agent read the kubelet's view from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum KubeletSource {
    /// The kubelet's PodResources gRPC API (`List` and `GetAllocatableResources`).
    PodResources,
    /// The kubelet's CPU manager checkpoint file (`cpu_manager_state`). Also what an object
    /// written before this field existed means: the checkpoint was the only source then.
    #[default]
    Checkpoint,
    /// Neither was readable: nothing of the kubelet is published, and `KubeletAgreement`
    /// says why.
    None,
}

/// What the kubelet itself did, where the agent can read it, and from where.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletObserved {
    /// `PodResources`, `Checkpoint` or `None`.
    #[serde(default)]
    pub source: KubeletSource,
    /// The kubelet's CPU manager policy name (`none`, `static`): the checkpoint's, or, from
    /// PodResources, `none` when the kubelet reports no allocatable CPUs (its `none` policy
    /// hands none out) and `static` otherwise. Empty with source `None`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy_name: String,
    /// The kubelet's default (shared) CPU set, in list syntax (from PodResources: the
    /// online CPUs minus the exclusive ones).
    #[serde(
        default,
        rename = "defaultCPUSet",
        skip_serializing_if = "String::is_empty"
    )]
    pub default_cpu_set: String,
    /// The kubelet's exclusive assignments, sorted by pod UID then container.
    #[serde(default)]
    pub assignments: Vec<KubeletAssignment>,
}

/// Counts for `kubectl get nodetopology`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTopologySummary {
    /// CPU manager policy the agent runs.
    pub cpu_manager_policy: String,
    /// Topology manager policy the agent runs.
    pub topology_manager_policy: String,
    /// Online logical CPUs.
    #[schemars(transform = rules::int32_schema)]
    pub cpus: i32,
    /// NUMA nodes.
    #[schemars(transform = rules::int32_schema)]
    pub numa_nodes: i32,
    /// Uncore caches.
    #[schemars(transform = rules::int32_schema)]
    pub uncore_caches: i32,
    /// CPUs exclusively assigned.
    #[serde(rename = "exclusiveCPUs")]
    #[schemars(transform = rules::int32_schema)]
    pub exclusive_cpus: i32,
    /// Containers holding exclusive CPUs.
    #[schemars(transform = rules::int32_schema)]
    pub containers: i32,
    /// Of those, containers whose CPUs lie inside one NUMA node and on whole physical cores
    /// (`aligned.numaNode` and `aligned.physicalCPU`; the `NUMA-Aligned` printer column).
    #[schemars(transform = rules::int32_schema)]
    pub aligned_containers: i32,
    /// Rejected container admissions.
    #[schemars(transform = rules::int32_schema)]
    pub rejections: i32,
}

/// What the node's agent found and decided, written by the agent only.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTopologyStatus {
    /// The NodeTopology `metadata.generation` (spec) the agent has applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (the agent runs the current spec), `Invalid` (the spec cannot apply on this
    /// node; reason e.g. `ReservedCPUsAbsent`), `KubeletAgreement` (the kubelet's checkpoint
    /// matches the agent's assignments).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The discovered CPU topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rules::uint32_schema)]
    pub topology: Option<TopologyReport>,
    /// CPU pools under the applied configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<PoolsReport>,
    /// Exclusive allocations, in admission order.
    #[serde(default)]
    pub allocations: Vec<AllocationReport>,
    /// Admissions that failed, with the kubelet's reason.
    #[serde(default)]
    pub rejections: Vec<RejectionReport>,
    /// What the kubelet itself did (PodResources, else its checkpoint), and the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletObserved>,
    /// Counts for printer columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<NodeTopologySummary>,
    /// Actuation: the last change the agent planned for the kubelet, and what it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<ChangeStatus>,
    /// Agent with `--nrt`: what its NodeResourceTopology publishes of the topology manager,
    /// and from where (the `TopologyManagerAgreement` condition says whether the sources
    /// agree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_resource_topology: Option<NrtReport>,
    /// The cpuset audit: every running container's real cpuset (its cgroup) against the
    /// kubelet's assignment (agent with `--cgroup-root`; see docs/audit.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditStatus>,
}

/// The topology manager configuration the node's NodeResourceTopology publishes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NrtReport {
    /// `topologyManagerPolicy` as published.
    pub topology_manager_policy: String,
    /// `topologyManagerScope` as published.
    pub topology_manager_scope: String,
    /// `topologyManagerMaxNUMANodes` as published.
    #[serde(rename = "topologyManagerMaxNUMANodes")]
    #[schemars(transform = rules::int32_schema)]
    pub topology_manager_max_numa_nodes: i32,
    /// Where they came from: `KubeletConfig` (the kubelet's configuration file and
    /// drop-ins), `KubeletCommandLine` (a topology manager flag on the running kubelet's
    /// command line, which wins over its files), `Applied` (the configuration actuation
    /// applied and verified) or `SpecUnverified` (the spec; nothing confirms the kubelet
    /// runs it).
    pub topology_manager_source: String,
}

/// One container whose real cpuset is wrong, and why.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftStatus {
    /// `namespace/name` (the UID where the pod is not on the node).
    pub pod: String,
    /// The pod's UID.
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    /// Container name.
    pub container: String,
    /// What it should run on (list syntax), where known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expected: String,
    /// What its cgroup says it runs on (list syntax), where read.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub actual: String,
    /// `StaleCheckpointEntry`, `ContainerNotFound`, `CpuInTwoExclusiveSets`,
    /// `SharedOnExclusiveCpu`, `ReservedCpuUsedByPod` or `ChangedOutsideKubelet`.
    pub reason: String,
    /// The particulars.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The last cpuset audit (`status.audit`), bounded: counts of everything, the first
/// mismatches listed, `truncated` when more were found.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditStatus {
    /// Running containers whose cgroup was read.
    #[schemars(transform = rules::int32_schema)]
    pub checked_containers: i32,
    /// Containers with at least one mismatch.
    #[schemars(transform = rules::int32_schema)]
    pub drift_containers: i32,
    /// Containers whose cgroup could not be read.
    #[schemars(transform = rules::int32_schema)]
    pub unreadable_containers: i32,
    /// Containers per mismatch reason (every reason listed).
    #[serde(default)]
    pub reasons: std::collections::BTreeMap<String, i32>,
    /// The first mismatches, by pod UID, container, reason.
    #[serde(default)]
    pub drift: Vec<DriftStatus>,
    /// The first unreadable cgroups (`namespace/name/container: error`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    /// More mismatches or unreadable cgroups were found than are listed.
    #[serde(default)]
    pub truncated: bool,
}

/// One step of a change plan.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangeStepStatus {
    /// `NoChange`, `RestartOnly`, `RewriteState`, `EvictFirst` or `Drain`.
    pub class: String,
    /// Why, for a person.
    pub reason: String,
    /// Pods concerned (`namespace/name`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
}

/// The last change plan for this node's kubelet and its outcome (`status.change`). What is
/// listed under `done` happened; the plan's steps are what the planner decided, not a
/// prediction of the kubelet's behaviour.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangeStatus {
    /// The NodeTopology generation this change is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The most disruptive class of the steps.
    pub class: String,
    /// The owned kubelet fields that change (`field: old -> new`).
    #[serde(default)]
    pub config_changes: Vec<String>,
    /// The steps, in order.
    #[serde(default)]
    pub steps: Vec<ChangeStepStatus>,
    /// Containers kept although the new configuration would place them otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub non_conforming: Vec<String>,
    /// What the agent actually did (files written, kubelet restarted, evictions requested).
    #[serde(default)]
    pub done: Vec<String>,
    /// Backups left beside the kubelet's files (restorable by hand).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backups: Vec<String>,
}
