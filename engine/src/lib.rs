//! nodetopo-engine: the pure logic of nodetopo.
//!
//! Everything here is a function of plain values: CPU sets, CPU topologies (discovered from
//! a sysfs root that is always injected), the kubelet-compatible static CPU policy and the
//! topology manager's hint merge. No Kubernetes objects, no clock, no I/O besides reading a
//! sysfs tree.

pub mod cpuset;
pub mod report;
pub mod topology;

pub use cpuset::{CpuSet, CpuSetParseError};
pub use topology::{CpuInfo, CpuTopology, DeclaredCounts, NumaNode, TopologyError, UncoreCache};
