//! The NodeTopology spec (operator's output) into the engine's `NodeConfig`: enums by
//! conversion (no string round trip), every `NodeConfig` field stated.

use nodetopo_crds::validation::{self, Reservation, ValidationError};
use nodetopo_crds::{CpuManagerPolicy, NodeTopologySpec};
use nodetopo_engine::admission::{ConfigError, CpuManagerConfig, MemoryManagerConfig, NodeConfig};
use nodetopo_engine::cpumanager::options::OptionsError;
use nodetopo_engine::cpumanager::{ReservedCpus, StaticPolicyOptions};
use nodetopo_engine::topologymanager::{TmError, TmOptions};

/// Converts a spec; the error names the field and is meant for the `Invalid` condition.
pub fn node_config(spec: &NodeTopologySpec) -> Result<NodeConfig, SpecError> {
    let problems = validation::validate_node_topology_spec(spec);
    if !problems.is_empty() {
        return Err(SpecError::Rules(validation::join(&problems)));
    }
    let cpu = match spec.cpu_manager.policy {
        CpuManagerPolicy::None => CpuManagerConfig::None,
        CpuManagerPolicy::Static => {
            let options = StaticPolicyOptions::from_map(&spec.cpu_manager.options)
                .map_err(SpecError::CpuManagerOptions)?;
            let reserved = match validation::reservation(&spec.cpu_manager)? {
                Reservation::None => ReservedCpus::Count(0),
                Reservation::Count(n) => ReservedCpus::Count(n),
                Reservation::Explicit(s) => ReservedCpus::Explicit(s),
            };
            CpuManagerConfig::Static { reserved, options }
        }
    };
    let nodetopo_crds::TopologyManagerConfig {
        policy,
        scope,
        options,
    } = &spec.topology_manager;
    let tm_options = TmOptions::from_map(options).map_err(SpecError::TopologyManagerOptions)?;
    // Every field spelled out: a new one fails to compile here until it is handled. The
    // NodeTopology spec names no devices and no Memory Manager policy.
    Ok(NodeConfig {
        cpu,
        tm_policy: (*policy).into(),
        tm_scope: (*scope).into(),
        tm_options,
        devices: Vec::new(),
        memory: MemoryManagerConfig::None,
    })
}

/// Why a NodeTopology spec does not apply on this node (the `Invalid` condition).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The spec breaks the API's rules (a spec that bypassed the API server's checks).
    #[error("{0}")]
    Rules(String),
    /// The CPU reservation cannot be read.
    #[error("{0}")]
    Reservation(#[from] ValidationError),
    /// A CPU manager option is unknown or has a bad value.
    #[error("spec.cpuManager.options: {0}")]
    CpuManagerOptions(#[source] OptionsError),
    /// A topology manager option is unknown or has a bad value.
    #[error("spec.topologyManager.options: {0}")]
    TopologyManagerOptions(#[source] TmError),
    /// The engine refuses the configuration on this machine.
    #[error("{0}")]
    Machine(#[from] ConfigError),
    /// The running pods' CPUs cannot be carried into the new configuration.
    #[error("the running pods' CPU assignments do not fit the new configuration: {0}")]
    RunningPodsDoNotFit(#[source] ConfigError),
}
