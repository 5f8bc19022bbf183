//! The published shapes (DESIGN.md "shapes that tools and tests rely on"): the topology
//! summary that `discover -o json` prints and `NodeTopology.status.topology` carries, and the
//! per-container allocation and rejection records that the agent publishes and `plan`
//! prints. camelCase, CPU sets as list strings, ids as integers, lists sorted by id.
//!
//! These are plain serde structs so that the engine stays free of Kubernetes; the CRD crate
//! embeds them (with the `schema` feature, they derive `schemars::JsonSchema`).

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::topology::CpuTopology;

/// `status.topology`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TopologyReport {
    /// Online logical CPUs, in list syntax.
    pub cpus: String,
    /// Number of physical cores.
    pub cores: u32,
    /// The largest thread-sibling set (hybrid parts mix 2 and 1).
    pub threads_per_core: u32,
    /// Sockets, ascending by id.
    pub sockets: Vec<SocketReport>,
    /// NUMA nodes (including CPU-less ones), ascending by id.
    pub numa_nodes: Vec<NumaNodeReport>,
    /// Uncore (last-level) caches, ascending by id.
    pub uncore_caches: Vec<UncoreCacheReport>,
}

/// One socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SocketReport {
    /// Socket id.
    pub id: u64,
    /// Its online CPUs, in list syntax.
    pub cpus: String,
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NumaNodeReport {
    /// Node id.
    pub id: u64,
    /// Its online CPUs, in list syntax (empty for memory-only nodes).
    pub cpus: String,
    /// Distances to every node, in ascending node-id order; empty when unknown.
    #[serde(default)]
    pub distances: Vec<u32>,
    /// Memory of the node in bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// One uncore cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct UncoreCacheReport {
    /// Cache id.
    pub id: u64,
    /// Cache level (3 for L3; 0 when the socket stands in for a missing L3).
    pub level: u32,
    /// CPUs sharing it, in list syntax.
    pub cpus: String,
}

/// Alignment of one container's CPUs, per boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Alignment {
    /// Only whole physical cores (every thread sibling of each core used is in the set).
    #[serde(rename = "physicalCPU")]
    pub physical_cpu: bool,
    /// Inside a single uncore cache.
    pub uncore_cache: bool,
    /// Inside a single NUMA node.
    pub numa_node: bool,
    /// Inside a single socket.
    pub socket: bool,
}

/// A topology hint as published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HintReport {
    /// NUMA nodes of the affinity; absent for "no affinity".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_nodes: Option<Vec<u64>>,
    /// Whether the hint is preferred.
    pub preferred: bool,
}

/// One container's exclusive allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AllocationReport {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The pod's UID.
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    /// Container name.
    pub container: String,
    /// Exclusive CPUs, in list syntax.
    pub cpus: String,
    /// NUMA nodes the CPUs lie in, ascending.
    pub numa_nodes: Vec<u64>,
    /// Uncore caches the CPUs lie in, ascending.
    pub uncore_caches: Vec<u64>,
    /// Alignment per boundary.
    pub aligned: Alignment,
    /// The merged topology hint the allocation followed, when a topology manager ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<HintReport>,
    /// The NodeTopology spec generation under which the container was admitted (the agent
    /// sets it; pods admitted under an older spec keep their CPUs after a policy change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_generation: Option<i64>,
    /// nodetopo's own prediction, in list syntax, when `cpus` shows the kubelet's actual
    /// assignment instead (the node's kubelet runs the static policy and its checkpoint has
    /// this container). Absent when `cpus` is nodetopo's decision.
    #[serde(
        default,
        rename = "predictedCPUs",
        skip_serializing_if = "Option::is_none"
    )]
    pub predicted_cpus: Option<String>,
}

/// A container whose admission failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RejectionReport {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The pod's UID.
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    /// Container name.
    pub container: String,
    /// The kubelet's error kind, e.g. `SMTAlignmentError`, `TopologyAffinityError`.
    pub reason: String,
    /// The full message.
    pub message: String,
    /// True when the kubelet itself refused the pod (its status is `Failed` with `reason`
    /// and `message`); false when it is nodetopo's own admission that refused it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub by_kubelet: bool,
    /// Why: nodetopo's replay of the kubelet's refusal on the node's state at that moment
    /// (kubelet refusals only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<ExplanationReport>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Whether nodetopo's replay of a kubelet admission failure reached the kubelet's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Agreement {
    /// The replay refuses the pod with the kubelet's reason.
    #[default]
    Agree,
    /// The replay admits the pod, or refuses it for another reason: a fidelity bug of
    /// nodetopo, to be reported.
    Disagree,
}

impl Agreement {
    /// `Agree` or `Disagree` (also the metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Agreement::Agree => "Agree",
            Agreement::Disagree => "Disagree",
        }
    }
}

/// One hint provider's hints for one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ProviderHintsReport {
    /// `cpu`, `memory` or `devices`.
    pub provider: String,
    /// The resource (`cpu`, `memory`, `hugepages-2Mi`, a device resource); empty when the
    /// provider has no preference for any resource of the container.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// The hints in the kubelet's order; absent: no preference; empty: the resource cannot
    /// be satisfied on any NUMA node combination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<Vec<HintReport>>,
    /// The list is implicit and too long to list (more than 8 NUMA nodes).
    #[serde(default, skip_serializing_if = "is_false")]
    pub not_listed: bool,
}

/// The topology manager's merge of the providers' hints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct MergeReport {
    /// The merged hint.
    pub hint: HintReport,
    /// Whether the policy admits it.
    pub admit: bool,
}

/// What one container asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RequestReport {
    /// Container name.
    pub container: String,
    /// Its CPU request in millicores (0 when none).
    pub cpu_millis: u64,
    /// The exclusive CPUs it gets: whole CPUs of a Guaranteed pod, else 0.
    #[serde(rename = "exclusiveCPUs")]
    pub exclusive_cpus: u64,
    /// Its memory request in bytes, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Device-plugin resources it asks for, by resource.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub devices: std::collections::BTreeMap<String, u64>,
}

/// What one NUMA node had free when the replay ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NumaFreeReport {
    /// NUMA node id.
    pub id: u64,
    /// CPUs that could still be handed out exclusively, in list syntax.
    #[serde(rename = "freeCPUs")]
    pub free_cpus: String,
    /// Their number.
    #[serde(rename = "freeCPUCount")]
    pub free_cpu_count: u64,
    /// Physical cores all of whose threads are free (what `full-pcpus-only` hands out).
    pub free_cores: u64,
    /// Free devices with an affinity to this node, by resource (a device on several nodes
    /// counts on each).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub free_devices: std::collections::BTreeMap<String, u64>,
}

/// Why the kubelet refused a pod, as nodetopo's replay of the same admission saw it: each
/// hint provider's hints, the merge, the policy's verdict and the numbers behind them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExplanationReport {
    /// `Agree`: the replay refuses the pod with the kubelet's reason; `Disagree`: it admits
    /// the pod or refuses it for another reason (a nodetopo fidelity bug, see `summary`).
    pub agreement: Agreement,
    /// The replay's verdict: the reason it refused the pod with, empty when it admits it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub replay_reason: String,
    /// The replay's message (empty when it admits the pod).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub replay_message: String,
    /// The container the hints and the merge are for: the one the replay refused, else the
    /// first one asking for exclusive CPUs or devices, else the first one.
    pub container: String,
    /// The configuration the replay ran: CPU manager policy and options, topology manager
    /// policy and scope.
    pub config: String,
    /// Each provider's hints for `container` (absent when no merge ran: topology manager
    /// policy `none`, or an earlier container was refused first).
    #[serde(default)]
    pub providers: Vec<ProviderHintsReport>,
    /// The merge (absent when no merge ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<MergeReport>,
    /// The merge's error, when it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub merge_error: String,
    /// What each container of the pod asks for.
    #[serde(default)]
    pub requests: Vec<RequestReport>,
    /// What each NUMA node had free before the pod (the pods admitted before it hold the
    /// rest), ascending by id.
    #[serde(default)]
    pub numa_nodes: Vec<NumaFreeReport>,
    /// Free devices without any NUMA affinity, by resource.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub free_devices_without_numa: std::collections::BTreeMap<String, u64>,
    /// The explanation in one paragraph (the Pod Event's note).
    pub summary: String,
}

impl TopologyReport {
    /// Summarises a topology into the published shape.
    pub fn from_topology(t: &CpuTopology) -> Self {
        let all = t.all_cpus();
        let sockets = t
            .ids_of(&all, |c| c.socket)
            .into_iter()
            .map(|s| SocketReport {
                id: s as u64,
                cpus: t.cpus_where(|c| c.socket == s).to_string(),
            })
            .collect();
        let numa_nodes = t
            .numa_nodes()
            .iter()
            .map(|n| NumaNodeReport {
                id: n.id as u64,
                cpus: n.cpus.to_string(),
                distances: n.distances.clone().unwrap_or_default(),
                memory_bytes: n.memory_bytes,
            })
            .collect();
        let uncore_caches = t
            .uncore_caches()
            .iter()
            .map(|u| UncoreCacheReport {
                id: u.id as u64,
                level: u32::from(u.level),
                cpus: u.cpus.to_string(),
            })
            .collect();
        Self {
            cpus: all.to_string(),
            cores: t.ids_of(&all, |c| c.core).len() as u32,
            threads_per_core: t.threads_per_core() as u32,
            sockets,
            numa_nodes,
            uncore_caches,
        }
    }
}

impl AllocationReport {
    /// Sets `cpus` and everything derived from it (NUMA nodes, uncore caches, alignment) on
    /// topology `t`.
    pub fn place(&mut self, t: &CpuTopology, cpus: &CpuSet) {
        let ids = |f: fn(&crate::topology::CpuInfo) -> usize| -> Vec<u64> {
            t.ids_of(cpus, f).into_iter().map(|i| i as u64).collect()
        };
        self.cpus = cpus.to_string();
        self.numa_nodes = ids(|c| c.numa);
        self.uncore_caches = ids(|c| c.uncore);
        self.aligned = Alignment::of(t, cpus);
    }
}

impl Alignment {
    /// Computes the alignment flags of `cpus` on `t`. An empty set is aligned nowhere.
    pub fn of(t: &CpuTopology, cpus: &CpuSet) -> Self {
        if cpus.is_empty() {
            return Self::default();
        }
        let one = |f: fn(&crate::topology::CpuInfo) -> usize| t.ids_of(cpus, f).len() == 1;
        let physical_cpu = t
            .ids_of(cpus, |c| c.core)
            .into_iter()
            .all(|core| t.cpus_where(|c| c.core == core).is_subset(cpus));
        Self {
            physical_cpu,
            uncore_cache: one(|c| c.uncore),
            numa_node: one(|c| c.numa),
            socket: one(|c| c.socket),
        }
    }
}
