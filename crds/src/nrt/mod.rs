//! NodeResourceTopology (`topology.node.k8s.io/v1alpha2`): the object the topology-aware
//! scheduler plugins read, built from what nodetopo knows about a node.
//!
//! - [`types`]: the kind, field for field as the noderesourcetopology-api module has it;
//! - [`build`]: the pure builder (topology + configuration + allocations -> object);
//! - [`fingerprint`]: the pod-set fingerprint the scheduler's reserve cache checks;
//! - [`podset`]: which pods the scheduler plugin fingerprints (its rule).

pub mod build;
pub mod fingerprint;
pub mod from_engine;
pub mod podset;
pub mod types;

pub use build::{
    build, AllocationSource, CpuAccounting, DeviceInventory, NrtError, NrtInput,
    TopologyManagerView,
};
pub use fingerprint::PodFingerprint;
pub use podset::NodePod;
pub use types::{AttributeInfo, CostInfo, NodeResourceTopology, ResourceInfo, Zone};

#[cfg(test)]
mod tests;
