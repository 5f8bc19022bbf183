//! [`super::NrtInput`] parts from the engine's admission state: the node configuration and
//! the CPU pools. The agent and the tests use these,
//! so the object is built from exactly what NodeTopology status is built from.

use nodetopo_engine::admission::{CpuPolicyConfig, NodeConfig, Pools};

use super::build::CpuAccounting;
use super::tmsource::TopologyManagerView;

/// The CPU accounting of a node running `config` with these pools.
pub fn cpu_accounting(config: &CpuPolicyConfig, pools: &Pools) -> CpuAccounting {
    match config {
        CpuPolicyConfig::None => CpuAccounting::PolicyNone {
            reserved: pools.reserved.clone(),
        },
        CpuPolicyConfig::Static { options, .. } => CpuAccounting::Static {
            reserved: pools.reserved.clone(),
            exclusive: pools.exclusive.clone(),
            options: options
                .to_map()
                .into_iter()
                .filter(|(_, v)| v == "true")
                .map(|(k, _)| k)
                .collect(),
        },
    }
}

/// The topology manager part of a node configuration.
pub fn topology_manager_view(config: &NodeConfig) -> TopologyManagerView {
    TopologyManagerView {
        policy: config.tm_policy,
        scope: config.tm_scope,
        max_numa_nodes: config.tm_options.max_allowable_numa_nodes,
    }
}
