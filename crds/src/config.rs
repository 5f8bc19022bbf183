//! The node configuration both kinds carry: the kubelet's CPU manager and topology manager
//! settings, with the kubelet's names. `NodeResourcePolicy.spec` states them as intent,
//! `NodeTopology.spec` as the effective configuration of one node; `plan -o json` prints the
//! same shapes.

use std::collections::BTreeMap;
use std::fmt;

use nodetopo_engine::topologymanager::{TmPolicy, TmScope};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rules;

/// The kubelet CPU manager policy.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    JsonSchema,
)]
pub enum CpuManagerPolicy {
    /// No exclusive CPUs: every container runs on the shared pool.
    #[default]
    #[serde(rename = "none")]
    None,
    /// Exclusive CPUs for integer-CPU containers of Guaranteed pods.
    #[serde(rename = "static")]
    Static,
}

impl CpuManagerPolicy {
    /// The kubelet's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Static => "static",
        }
    }
}

impl fmt::Display for CpuManagerPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kubelet topology manager policy.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    JsonSchema,
)]
pub enum TopologyManagerPolicy {
    /// No alignment.
    #[default]
    #[serde(rename = "none")]
    None,
    /// Prefer aligned placements, admit anyway.
    #[serde(rename = "best-effort")]
    BestEffort,
    /// Admit only preferred placements.
    #[serde(rename = "restricted")]
    Restricted,
    /// Admit only placements inside one NUMA node.
    #[serde(rename = "single-numa-node")]
    SingleNumaNode,
}

impl TopologyManagerPolicy {
    /// The kubelet's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::BestEffort => "best-effort",
            Self::Restricted => "restricted",
            Self::SingleNumaNode => "single-numa-node",
        }
    }
}

impl fmt::Display for TopologyManagerPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<TopologyManagerPolicy> for TmPolicy {
    fn from(p: TopologyManagerPolicy) -> Self {
        match p {
            TopologyManagerPolicy::None => TmPolicy::None,
            TopologyManagerPolicy::BestEffort => TmPolicy::BestEffort,
            TopologyManagerPolicy::Restricted => TmPolicy::Restricted,
            TopologyManagerPolicy::SingleNumaNode => TmPolicy::SingleNumaNode,
        }
    }
}

/// The kubelet topology manager scope.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    JsonSchema,
)]
pub enum TopologyManagerScope {
    /// Align each container on its own.
    #[default]
    #[serde(rename = "container")]
    Container,
    /// Align all containers of a pod together.
    #[serde(rename = "pod")]
    Pod,
}

impl TopologyManagerScope {
    /// The kubelet's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Container => "container",
            Self::Pod => "pod",
        }
    }
}

impl fmt::Display for TopologyManagerScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<TopologyManagerScope> for TmScope {
    fn from(s: TopologyManagerScope) -> Self {
        match s {
            TopologyManagerScope::Container => TmScope::Container,
            TopologyManagerScope::Pod => TmScope::Pod,
        }
    }
}

/// CPU manager settings (kubelet `cpuManagerPolicy`, `cpuManagerPolicyOptions`,
/// `reservedSystemCPUs`, or a reserved CPU count as from `kubeReserved`+`systemReserved`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = rules::cpu_manager_schema)]
pub struct CpuManagerConfig {
    /// CPU manager policy: `none` or `static`.
    pub policy: CpuManagerPolicy,
    /// Static policy options with the kubelet's names (full-pcpus-only,
    /// distribute-cpus-across-numa, align-by-socket, distribute-cpus-across-cores,
    /// strict-cpu-reservation, prefer-align-cpus-by-uncorecache); values "true" or "false".
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = rules::cpu_options_schema)]
    pub options: BTreeMap<String, String>,
    /// CPUs reserved for system daemons, in list syntax ("0-1", "0,64"). Excludes reservedCPUs.
    #[serde(
        default,
        rename = "reservedSystemCPUs",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(transform = rules::reserved_system_cpus_schema)]
    pub reserved_system_cpus: Option<String>,
    /// Number of CPUs to reserve, chosen topologically the way the kubelet does for
    /// kubeReserved+systemReserved CPU. Excludes reservedSystemCPUs.
    #[serde(
        default,
        rename = "reservedCPUs",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0), transform = rules::int32_schema)]
    pub reserved_cpus: Option<i32>,
}

/// Topology manager settings (kubelet `topologyManagerPolicy`, `topologyManagerScope`,
/// `topologyManagerPolicyOptions`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyManagerConfig {
    /// Topology manager policy: `none`, `best-effort`, `restricted` or `single-numa-node`.
    pub policy: TopologyManagerPolicy,
    /// Alignment scope: `container` (default) or `pod`.
    #[serde(default)]
    pub scope: TopologyManagerScope,
    /// Options with the kubelet's names: prefer-closest-numa-nodes ("true"/"false"),
    /// max-allowable-numa-nodes (a number, at least 8).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = rules::tm_options_schema)]
    pub options: BTreeMap<String, String>,
}
