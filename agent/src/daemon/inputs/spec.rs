//! The NodeTopology spec (operator's output) into the engine's `NodeConfig`: the engine's
//! one conversion ([`nodetopo_engine::spec::node_config`]), which validates the spec once
//! (every broken rule, with the CEL rule's message) and states every field.

use nodetopo_crds::NodeTopologySpec;
use nodetopo_engine::admission::{ConfigError, NodeConfig};

/// Converts a spec; the error names the field and is meant for the `Invalid` condition.
pub fn node_config(spec: &NodeTopologySpec) -> Result<NodeConfig, SpecError> {
    Ok(nodetopo_engine::spec::node_config(
        &spec.cpu_manager,
        &spec.topology_manager,
    )?)
}

/// Why a NodeTopology spec does not apply on this node (the `Invalid` condition).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The spec breaks the API's rules (a spec that bypassed the API server's checks) or the
    /// kubelet's option parsing.
    #[error("{0}")]
    Spec(#[from] nodetopo_engine::spec::SpecError),
    /// The engine refuses the configuration on this machine.
    #[error("{0}")]
    Machine(#[from] ConfigError),
    /// The running pods' CPUs cannot be carried into the new configuration.
    #[error("the running pods' CPU assignments do not fit the new configuration: {0}")]
    RunningPodsDoNotFit(#[source] ConfigError),
}
