//! nodetopo-engine: the pure logic of nodetopo.
//!
//! Everything here is a function of plain values: CPU sets, CPU topologies (discovered from
//! a sysfs root that is always injected), the kubelet-compatible static CPU policy and the
//! topology manager's hint merge. No Kubernetes objects, no clock, no I/O besides reading a
//! sysfs tree (and [`files`], the bounded reader every input file goes through).

#![warn(missing_docs)]

pub mod admission;
pub mod change;
pub mod conformance;
pub mod cpumanager;
pub mod cpuset;
pub mod devicemanager;
pub mod files;
pub mod memorymanager;
pub mod options;
pub mod pod;
pub mod presets;
pub mod quantity;
pub mod report;
pub mod spec;
pub mod sysfs;
pub mod topology;
pub mod topologymanager;
pub mod windows;

pub use cpuset::{CpuSet, CpuSetParseError};
pub use pod::{Container, Pod, QosClass, ResourceList};
pub use topology::{CpuInfo, CpuTopology, DeclaredCounts, NumaNode, TopologyError, UncoreCache};
