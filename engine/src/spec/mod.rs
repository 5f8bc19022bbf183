//! The node configuration as the API states it: the kubelet's CPU manager and topology
//! manager settings with the kubelet's names. It is the one spec type: the CRD crate
//! re-exports it for `NodeResourcePolicy.spec` and `NodeTopology.spec` (with the `schema`
//! feature it derives the JSON schema, CEL rules attached), `plan -o json` prints it, and
//! [`node_config`] turns it into the engine's [`NodeConfig`] after the one Rust validation
//! ([`validate`]) of the rules the API server checks as CEL ([`rules`]).

use std::collections::BTreeMap;
use std::fmt;

use crate::admission::NodeConfig;
use crate::change::{OptionFieldError, OwnedConfig};
use crate::cpumanager::options::OptionsError;
use crate::topologymanager::TmError;

pub mod rules;
pub mod validate;

pub use crate::topologymanager::TmPolicy as TopologyManagerPolicy;
pub use crate::topologymanager::TmScope as TopologyManagerScope;
pub use validate::{Reservation, ValidationError};

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
    serde::Serialize,
    serde::Deserialize,
)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

impl std::str::FromStr for CpuManagerPolicy {
    type Err = String;
    /// The kubelet's names only (`none`, `static`).
    fn from_str(s: &str) -> Result<Self, String> {
        [Self::None, Self::Static]
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not one of \"none\", \"static\""))
    }
}

impl fmt::Display for CpuManagerPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// CPU manager settings (kubelet `cpuManagerPolicy`, `cpuManagerPolicyOptions`,
/// `reservedSystemCPUs`, or a reserved CPU count as from `kubeReserved`+`systemReserved`).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", schemars(transform = rules::cpu_manager_schema))]
pub struct CpuManagerConfig {
    /// CPU manager policy: `none` or `static`.
    pub policy: CpuManagerPolicy,
    /// Static policy options with the kubelet's names, from the engine's option table
    /// ([`crate::cpumanager::options::CPU_OPTION_TABLE`]); values "true" or "false". The
    /// CRD's description lists the names ([`rules::cpu_options_description`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(feature = "schema", schemars(transform = rules::cpu_options_schema))]
    pub options: BTreeMap<String, String>,
    /// CPUs reserved for system daemons, in list syntax ("0-1", "0,64"). Excludes reservedCPUs.
    #[serde(
        default,
        rename = "reservedSystemCPUs",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(
        feature = "schema",
        schemars(transform = rules::reserved_system_cpus_schema)
    )]
    pub reserved_system_cpus: Option<String>,
    /// Number of CPUs to reserve, chosen topologically the way the kubelet does for
    /// kubeReserved+systemReserved CPU. Excludes reservedSystemCPUs.
    #[serde(
        default,
        rename = "reservedCPUs",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(
        feature = "schema",
        schemars(range(min = 0), transform = rules::int32_schema)
    )]
    pub reserved_cpus: Option<i32>,
}

/// Topology manager settings (kubelet `topologyManagerPolicy`, `topologyManagerScope`,
/// `topologyManagerPolicyOptions`).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    #[cfg_attr(feature = "schema", schemars(transform = rules::tm_options_schema))]
    pub options: BTreeMap<String, String>,
}

/// Why a spec does not convert into a [`NodeConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The spec breaks the API's rules (every broken rule, with its field path and the CEL
    /// rule's message): a spec that bypassed the API server's checks.
    #[error("{}", validate::join(.0))]
    Rules(Vec<ValidationError>),
    /// A CPU manager option the kubelet's parser refuses.
    #[error("spec.cpuManager.options: {0}")]
    CpuManagerOptions(#[source] OptionsError),
    /// A topology manager option the kubelet's parser refuses.
    #[error("spec.topologyManager.options: {0}")]
    TopologyManagerOptions(#[source] TmError),
}

impl From<ValidationError> for SpecError {
    fn from(e: ValidationError) -> Self {
        SpecError::Rules(vec![e])
    }
}

/// The spec (at `spec.cpuManager` and `spec.topologyManager`) as the engine's
/// [`NodeConfig`]: validated once ([`validate::validate_config`], every error reported),
/// then turned into the kubelet's fields ([`OwnedConfig::from_spec`], the conversion the
/// agent's actuation and `apply --policy` use too) and those into a [`NodeConfig`]
/// ([`OwnedConfig::node_config`], the one conversion from kubelet fields). The spec names
/// no devices and no Memory Manager policy; those stay empty and `None`.
pub fn node_config(
    cpu: &CpuManagerConfig,
    tm: &TopologyManagerConfig,
) -> Result<NodeConfig, SpecError> {
    let errors = validate::validate_config(cpu, tm, "spec");
    if !errors.is_empty() {
        return Err(SpecError::Rules(errors));
    }
    OwnedConfig::from_spec(cpu, tm)?
        .node_config()
        .map_err(|e| match e {
            OptionFieldError::Cpu(e) => SpecError::CpuManagerOptions(e),
            OptionFieldError::Tm(e) => SpecError::TopologyManagerOptions(e),
        })
}
