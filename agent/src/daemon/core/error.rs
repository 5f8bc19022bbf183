//! The agent core's errors: why a spec cannot run here, why the kubelet's checkpoint cannot
//! be compared, why a pod cannot be tracked. Their texts are the condition messages the
//! status publishes.

use std::sync::Arc;

use nodetopo_crds::validation::ValidationError;
use nodetopo_engine::admission::ConfigError;
use nodetopo_engine::cpumanager::options::OptionsError;
use nodetopo_engine::topologymanager::TmError;

use super::super::kubelet_state::KubeletStateError;
use super::super::validate::Violation;

/// Why a NodeTopology spec does not apply on this node (the `Invalid` condition).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The spec breaks the API's rules (a spec that bypassed the API server's checks).
    #[error("{0}")]
    Rules(String),
    /// The CPU reservation cannot be read.
    #[error("{0}")]
    Reservation(#[from] ValidationError),
    /// A CPU manager option is unknown or has a bad value.
    #[error("spec.cpuManager.options: {0}")]
    CpuManagerOptions(#[source] OptionsError),
    /// A topology manager option is unknown or has a bad value.
    #[error("spec.topologyManager.options: {0}")]
    TopologyManagerOptions(#[source] TmError),
    /// The engine refuses the configuration on this machine.
    #[error("{0}")]
    Machine(#[from] ConfigError),
    /// The running pods' CPUs cannot be carried into the new configuration.
    #[error("the running pods' CPU assignments do not fit the new configuration: {0}")]
    RunningPodsDoNotFit(#[source] ConfigError),
}

/// Why the kubelet's CPU manager checkpoint cannot be compared (the `KubeletAgreement`
/// condition).
#[derive(Debug, Clone, thiserror::Error)]
pub enum KubeletError {
    /// The file cannot be read or parsed.
    #[error("{0}")]
    Read(Arc<KubeletStateError>),
    /// The state read by a shell breaks an invariant on this machine.
    #[error("kubelet CPU manager state {0}")]
    Invalid(Violation),
    /// The state a shell handed over breaks an invariant (the core checks again).
    #[error("{0}")]
    Rechecked(Violation),
}

/// Why a pod cannot be tracked (listed among the pod problems).
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    /// The pod's resources or identity cannot be read.
    #[error("{0}")]
    Pod(#[from] nodetopo_cli::pods::PodError),
    /// Its creation time is not a time.
    #[error("pod {pod}: metadata.creationTimestamp {value:?} is not an RFC 3339 time: {source}")]
    CreationTimestamp {
        /// The pod (namespace/name).
        pod: String,
        /// The text found.
        value: String,
        /// The parse error.
        #[source]
        source: k8s_openapi::jiff::Error,
    },
}
