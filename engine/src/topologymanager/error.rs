//! `TmError`: everything that can go wrong configuring the topology manager or merging.
//!
//! Display texts follow the kubelet's messages (so users can search for them) and add what
//! the kubelet leaves out: the offending node, value or size.

/// A topology-manager configuration or merge error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TmError {
    /// A policy-option key the topology manager does not know.
    #[error("unknown Topology Manager Policy option: {0:?}")]
    UnknownOption(String),
    /// An alpha- or beta-level option whose feature gate is off.
    #[error(
        "topology manager policy {level}-level options not enabled, but option {option:?} provided"
    )]
    OptionNotEnabled {
        /// `alpha` or `beta`.
        level: &'static str,
        /// The option name.
        option: String,
    },
    /// A known option without a parser (only options registered for tests reach this).
    #[error("unsupported topologymanager option: {option:?} ({value})")]
    UnsupportedOption {
        /// The option name.
        option: String,
        /// Its value.
        value: String,
    },
    /// `prefer-closest-numa-nodes` is not a Go boolean.
    #[error(
        "bad value for option {option:?}: strconv.ParseBool: parsing {value:?}: invalid syntax"
    )]
    BadBool {
        /// The option name.
        option: String,
        /// The value given.
        value: String,
    },
    /// `max-allowable-numa-nodes` is not a Go integer.
    #[error("unable to convert policy option to integer {option:?}: strconv.Atoi: parsing {value:?}: {reason}")]
    NotInteger {
        /// The option name.
        option: String,
        /// The value given.
        value: String,
        /// `invalid syntax` or `value out of range`.
        reason: &'static str,
    },
    /// `max-allowable-numa-nodes` below the kubelet's minimum of 8.
    #[error("the minimum value of {option:?} should not be less than {minimum}")]
    BelowMinimum {
        /// The option name.
        option: String,
        /// The minimum (8).
        minimum: usize,
    },
    /// The machine has more NUMA nodes than `max-allowable-numa-nodes` allows.
    #[error("unsupported on machines with more than {max} NUMA Nodes (this machine has {count}; raise the max-allowable-numa-nodes policy option to allow it)")]
    TooManyNumaNodes {
        /// The limit in force.
        max: usize,
        /// The machine's NUMA node count.
        count: usize,
    },
    /// prefer-closest-numa-nodes is on and a node has no distance row.
    #[error("cannot discover NUMA topology: error getting NUMA distances from cadvisor (NUMA node {node} has no distance row)")]
    MissingDistances {
        /// The node without distances.
        node: usize,
    },
    /// A distance row too short to be indexed by every node id of the machine.
    #[error("cannot discover NUMA topology: NUMA node {node} has {got} distances, but node ids up to {max_id} need at least {need}")]
    DistanceShape {
        /// The node whose row is malformed.
        node: usize,
        /// Its length.
        got: usize,
        /// The machine's largest node id.
        max_id: usize,
        /// The length needed (largest id + 1).
        need: usize,
    },
    /// A NUMA node id outside the bitmask range 0..=63.
    #[error("cannot discover NUMA topology: NUMA node id {0} is outside the supported range 0-63")]
    NumaIdOutOfRange(usize),
    /// The same NUMA node id twice.
    #[error("cannot discover NUMA topology: NUMA node {0} is listed twice")]
    DuplicateNumaNode(usize),
    /// A machine without NUMA nodes.
    #[error("cannot discover NUMA topology: the machine lists no NUMA nodes")]
    NoNumaNodes,
    /// A policy name the topology manager does not know.
    #[error("unknown policy: {0:?}")]
    UnknownPolicy(String),
    /// A scope name the topology manager does not know.
    #[error("unknown scope: {0:?}")]
    UnknownScope(String),
    /// The product merge stopped at its work budget: the input is of a shape whose cost
    /// grows exponentially (docs/topology-manager.md lists them).
    #[error("topology hint merge gave up after its budget of {budget} steps: {nodes} NUMA nodes, {lists} hint lists ({sources} implicit sources, {hints} explicit hints); inputs of this shape grow exponentially with the NUMA node count (see docs/topology-manager.md, \"Worst-case cost\")")]
    MergeBudgetExceeded {
        /// The budget in steps.
        budget: u64,
        /// The machine's NUMA node count.
        nodes: u32,
        /// Hint lists after flattening the providers.
        lists: usize,
        /// How many of them are implicit sources.
        sources: usize,
        /// Total explicit hints.
        hints: usize,
    },
    /// The literal (reference) enumeration would visit more permutations than it allows.
    #[error("reference merge refused: the cross product has {permutations} permutations (limit {limit})")]
    TooManyPermutations {
        /// Product of the hint-list lengths (saturating).
        permutations: u128,
        /// The limit.
        limit: u128,
    },
}
