//! Topology-manager construction (the kubelet's `NewManager`), in the kubelet's order:
//! `none` short-circuits (nothing else is parsed or checked), then options, NUMA info, the
//! NUMA-count limit, the policy name and the scope name.

use std::collections::BTreeMap;

use super::options::OptionGates;
use super::{NumaInfo, TmError, TmOptions, TmPolicy, TmScope};
use crate::topology::CpuTopology;

/// A validated topology-manager configuration for one machine.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagerConfig {
    /// The policy.
    pub policy: TmPolicy,
    /// The scope (`Container` for policy `none`, whose scope is a no-op).
    pub scope: TmScope,
    /// The parsed options (defaults for policy `none`).
    pub options: TmOptions,
    /// The NUMA info; `None` for policy `none`, which never merges.
    pub numa: Option<NumaInfo>,
}

impl ManagerConfig {
    /// The kubelet's `NewManager` over string inputs: `nodes` are (id, distance row by id)
    /// in cadvisor order.
    pub fn new(
        policy: &str,
        scope: &str,
        options: &BTreeMap<String, String>,
        gates: OptionGates,
        nodes: Vec<(usize, Option<Vec<u64>>)>,
    ) -> Result<Self, TmError> {
        if policy == TmPolicy::None.name() {
            return Ok(Self::none());
        }
        let options = TmOptions::from_map_with(options, gates, &[])?;
        let numa = NumaInfo::new(nodes, options.prefer_closest_numa_nodes)?;
        Self::finish(policy.parse(), scope.parse(), options, numa)
    }

    /// The same over typed inputs and a machine's topology (what the node admitter uses).
    pub fn for_topology(
        policy: TmPolicy,
        scope: TmScope,
        options: TmOptions,
        topology: &CpuTopology,
    ) -> Result<Self, TmError> {
        if policy == TmPolicy::None {
            return Ok(Self::none());
        }
        let numa = NumaInfo::from_topology(topology, &options)?;
        Self::finish(Ok(policy), Ok(scope), options, numa)
    }

    fn none() -> Self {
        ManagerConfig {
            policy: TmPolicy::None,
            scope: TmScope::Container,
            options: TmOptions::default(),
            numa: None,
        }
    }

    fn finish(
        policy: Result<TmPolicy, TmError>,
        scope: Result<TmScope, TmError>,
        options: TmOptions,
        numa: NumaInfo,
    ) -> Result<Self, TmError> {
        let count = numa.nodes().len();
        if count > options.max_allowable_numa_nodes {
            return Err(TmError::TooManyNumaNodes {
                max: options.max_allowable_numa_nodes,
                count,
            });
        }
        Ok(ManagerConfig {
            policy: policy?,
            scope: scope?,
            options,
            numa: Some(numa),
        })
    }
}
