//! [`super::NrtInput`] parts from the engine's admission state: the node configuration,
//! the CPU pools and the published allocation records. The agent and the tests use these,
//! so the object is built from exactly what NodeTopology status is built from.

use std::collections::BTreeSet;

use nodetopo_engine::admission::{CpuManagerConfig, NodeConfig, Pools};
use nodetopo_engine::report::AllocationReport;

use super::build::{CpuAccounting, TopologyManagerView};

/// The CPU accounting of a node running `config` with these pools.
pub fn cpu_accounting(config: &CpuManagerConfig, pools: &Pools) -> CpuAccounting {
    match config {
        CpuManagerConfig::None => CpuAccounting::PolicyNone {
            reserved: pools.reserved.clone(),
        },
        CpuManagerConfig::Static { options, .. } => CpuAccounting::Static {
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

/// The distinct pods (`namespace`, `name`) of allocation records, sorted: the pods holding
/// exclusive CPUs, which the fingerprint (method `with-exclusive-resources`) covers.
pub fn fingerprint_pods<'a>(
    allocations: impl IntoIterator<Item = &'a AllocationReport>,
) -> Vec<(String, String)> {
    let pods: BTreeSet<(String, String)> = allocations
        .into_iter()
        .map(|a| match a.pod.split_once('/') {
            Some((ns, name)) => (ns.to_string(), name.to_string()),
            None => (String::new(), a.pod.clone()),
        })
        .collect();
    pods.into_iter().collect()
}
