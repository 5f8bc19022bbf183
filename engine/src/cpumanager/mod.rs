//! The kubelet-compatible CPU manager (static policy): take algorithms, options, state,
//! topology hints.
//!
//! Reference: the kubelet's `pkg/kubelet/cm/cpumanager` (`cpu_assignment.go`,
//! `policy_static.go`, `policy_options.go`) as of current mainline. Every result here is the
//! kubelet's result on the same input; where the kubelet has a quirk that changes results
//! (declared-count arithmetic, Go slice aliasing in the NUMA-distributed take), it is
//! reproduced on purpose and documented where it happens. See `docs/cpumanager.md`.

pub mod accumulator;
pub mod distributed;
pub mod errors;
pub mod hints;
pub(crate) mod index;
pub mod options;
pub mod policy_static;
pub mod state;
pub mod take;

pub use accumulator::TakeError;
pub use errors::{AllocateError, PolicyError};
pub use hints::{generate_cpu_topology_hints, guaranteed_cpus, pod_guaranteed_cpus};
pub use options::{OptionsError, StaticPolicyOptions};
pub use policy_static::{ReservedCpus, StaticPolicy};
pub use state::{CpuState, StateError};
pub use take::{
    take_by_topology_numa_distributed, take_by_topology_numa_packed, CpuAccumulator,
    CpuSortingStrategy,
};
