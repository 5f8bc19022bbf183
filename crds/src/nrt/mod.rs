//! NodeResourceTopology (`topology.node.k8s.io/v1alpha2`): the object the topology-aware
//! scheduler plugins read, built from what nodetopo knows about a node.
//!
//! - [`types`]: the kind, field for field as the noderesourcetopology-api module has it;
//! - [`build`]: the pure builder (topology + configuration + allocations -> object);
//! - [`fingerprint`]: the pod-set fingerprint the scheduler's reserve cache checks;
//! - [`memory`]: the Static Memory Manager's tables from the kubelet's report;
//! - [`podset`]: which pods the scheduler plugin fingerprints (its rule);
//! - [`tmsource`]: which topology manager policy and scope to publish (the kubelet's, where
//!   known), and whether the sources agree.

pub mod build;
pub mod fingerprint;
pub mod from_engine;
pub mod memory;
pub mod podset;
pub mod tmsource;
pub mod types;

pub use build::{
    build, AllocationSource, CpuAccounting, DeviceInventory, MemoryManagerView, NrtError, NrtInput,
    ReservedSource,
};
pub use fingerprint::PodFingerprint;
pub use podset::NodePod;
pub use tmsource::{
    CommandLine, KubeletTm, TmAgreement, TmResolution, TmSources, TopologyManagerSource,
    TopologyManagerView,
};
pub use types::{AttributeInfo, CostInfo, NodeResourceTopology, ResourceInfo, Zone};

#[cfg(test)]
mod tests;
