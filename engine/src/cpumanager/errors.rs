//! Errors of the static policy. Display is the kubelet's exact message; `reason()` is the
//! kubelet's error kind as the admission result shows it.

use super::accumulator::TakeError;
use super::options::OptionsError;

/// Why `StaticPolicy::new` or `start` failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Options rejected.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// The reserved set does not have the requested size.
    #[error("[cpumanager] unable to reserve the required amount of CPUs (size of {reserved} did not equal {requested})")]
    ReservedSize {
        /// The reserved set (list syntax).
        reserved: String,
        /// The requested count.
        requested: usize,
    },
    /// A reserved CPU the topology does not have.
    #[error("[cpumanager] unable to build the reserved physical CPUs from the reserved set: unknown CPU ID: {0}")]
    ReservedUnknownCpu(usize),
    /// Start: the default set is empty although assignments exist.
    #[error("default cpuset cannot be empty")]
    EmptyDefault,
    /// Start: reserved CPUs missing from the default set.
    #[error("not all reserved cpus: \"{reserved}\" are present in defaultCpuSet: \"{default}\"")]
    ReservedNotInDefault {
        /// Reserved set.
        reserved: String,
        /// Default set.
        default: String,
    },
    /// Start (strict-cpu-reservation): reserved CPUs present in the default set.
    #[error(
        "some of strictly reserved cpus: \"{overlap}\" are present in defaultCpuSet: \"{default}\""
    )]
    StrictReservedInDefault {
        /// Reserved CPUs found in the default set.
        overlap: String,
        /// Default set.
        default: String,
    },
    /// Start: an assignment overlaps the default set.
    #[error("pod: {pod}, container: {container} cpuset: \"{cpus}\" overlaps with default cpuset \"{default}\"")]
    AssignmentOverlap {
        /// Pod UID.
        pod: String,
        /// Container.
        container: String,
        /// Its CPUs.
        cpus: String,
        /// Default set.
        default: String,
    },
    /// Start: the state's CPUs are not the machine's.
    #[error(
        "current set of available CPUs \"{machine}\" doesn't match with CPUs in state \"{state}\""
    )]
    CpusMismatch {
        /// The machine's (assignable) CPUs.
        machine: String,
        /// The CPUs the state knows.
        state: String,
    },
}

impl PolicyError {
    /// The error kind.
    pub fn reason(&self) -> &'static str {
        match self {
            PolicyError::Options(_) => "InvalidPolicyOptions",
            PolicyError::ReservedSize { .. } | PolicyError::ReservedUnknownCpu(_) => {
                "InvalidReservedCPUs"
            }
            _ => "InvalidState",
        }
    }
}

/// Why `StaticPolicy::allocate` failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// full-pcpus-only: the request is not a multiple of the CPUs per core.
    #[error("SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {cpus_per_core}")]
    SmtNotMultiple {
        /// CPUs requested.
        requested: usize,
        /// Declared CPUs per core.
        cpus_per_core: usize,
    },
    /// full-pcpus-only: not enough CPUs outside the reserved CPUs' cores.
    #[error("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {available}, requested CPUs = {requested}, CPUs per core = {cpus_per_core}")]
    SmtNotEnoughPhysical {
        /// CPUs requested.
        requested: usize,
        /// Declared CPUs per core.
        cpus_per_core: usize,
        /// Free CPUs outside the cores of reserved CPUs.
        available: usize,
    },
    /// The take failed.
    #[error(transparent)]
    Take(#[from] TakeError),
}

impl AllocateError {
    /// The kubelet's admission reason: `SMTAlignmentError` for the full-pcpus-only errors
    /// (the only CPU-manager error with its own type), `UnexpectedAdmissionError` for every
    /// other failed allocation (the kubelet's `GetPodAdmitResult` wraps untyped errors).
    pub fn reason(&self) -> &'static str {
        match self {
            AllocateError::SmtNotMultiple { .. } | AllocateError::SmtNotEnoughPhysical { .. } => {
                "SMTAlignmentError"
            }
            AllocateError::Take(_) => "UnexpectedAdmissionError",
        }
    }

    /// The kubelet's admission message: the error itself for `SMTAlignmentError`, else
    /// `Allocate failed due to <error>, which is unexpected`.
    pub fn admission_message(&self) -> String {
        match self {
            AllocateError::Take(_) => format!("Allocate failed due to {self}, which is unexpected"),
            _ => self.to_string(),
        }
    }
}
