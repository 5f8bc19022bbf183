//! Pods into the core's pod records ([`PodInfo`]), from either source: the API server's Pod
//! (cluster mode's watch, actuation's pod list) or a pod read from YAML (local mode).
//!
//! Both lend their fields to one [`nodetopo_kubelet::pods::PodFields`] through the same
//! borrow ([`nodetopo_kubelet::pod_fields!`]) and go through one conversion
//! ([`nodetopo_kubelet::pods::engine_pod`] for the engine's pod, [`PodInfo::new`] for the
//! rest); neither is copied into the other's shape. The creation time, the admission order's
//! first key, stays typed: the API's `Time` is taken as is, and a YAML pod's text is parsed
//! once, here, with an error naming the pod and the text.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod as ApiPod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodetopo_engine::admission::replay;
use nodetopo_engine::Pod;
use nodetopo_kubelet::pods::fields::StatusFields;
use nodetopo_kubelet::pods::{engine_pod, manifest};

/// Why a pod cannot be tracked (listed among the pod problems).
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    /// The pod's resources or identity cannot be read.
    #[error("{0}")]
    Pod(#[from] nodetopo_kubelet::pods::PodError),
    /// Its creation time (YAML) is not a time.
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

/// A pod as the core tracks it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    /// The engine's view of the pod.
    pub pod: Pod,
    /// Creation time, for the admission order (`None` sorts first, like the zero time).
    pub created: Option<Time>,
    /// Phase Succeeded or Failed: its CPUs are released.
    pub terminal: bool,
    /// `status.phase` as the API shows it (empty when unset): the scheduler plugin's pod
    /// set (NodeResourceTopology fingerprint) counts every phase but `Pending`.
    pub phase: String,
    /// The kubelet refused the pod at admission for a reason of its resource managers
    /// (phase `Failed`, `status.reason` one of `replay::MANAGER_REASONS`): the reason and
    /// the message.
    pub kubelet_refusal: Option<(String, String)>,
    /// Running containers (app and init): name -> `containerID` as the Pod status shows it
    /// (`containerd://...`); where the cpuset audit finds their cgroups. Empty for pods read
    /// from files (local mode has no container status).
    pub running: BTreeMap<String, String>,
}

impl PodInfo {
    /// Converts one Pod from the API server; errors name the pod.
    pub fn from_k8s(p: &ApiPod) -> Result<Self, PodError> {
        let fields = nodetopo_kubelet::pod_fields!(p);
        let pod = engine_pod(&fields)?;
        let mut info = Self::new(pod, p.metadata.creation_timestamp.clone(), fields.status);
        info.running = running_containers(p);
        Ok(info)
    }

    /// Converts one pod read from YAML (local mode); errors name the pod.
    pub fn from_manifest(p: &manifest::Pod) -> Result<Self, PodError> {
        let fields = p.fields();
        let pod = engine_pod(&fields)?;
        let created = match &p.metadata.creation_timestamp {
            None => None,
            Some(t) => Some(Time(t.0.parse().map_err(|source| {
                PodError::CreationTimestamp {
                    pod: pod.key(),
                    value: t.0.clone(),
                    source,
                }
            })?)),
        };
        Ok(Self::new(pod, created, fields.status))
    }

    /// The record of a converted pod: its creation time and what its status says.
    fn new(pod: Pod, created: Option<Time>, status: StatusFields) -> Self {
        let kubelet_refusal = status
            .reason
            .filter(|r| status.phase == Some("Failed") && replay::is_manager_reason(r))
            .map(|r| {
                (
                    r.to_string(),
                    status.message.unwrap_or_default().to_string(),
                )
            });
        Self {
            kubelet_refusal,
            terminal: matches!(status.phase, Some("Succeeded" | "Failed")),
            phase: status.phase.unwrap_or_default().to_string(),
            pod,
            created,
            running: BTreeMap::new(),
        }
    }
}

/// The running containers of an API Pod: name -> `containerID` (app and init containers
/// whose state is `running` and whose ID is set).
fn running_containers(p: &ApiPod) -> BTreeMap<String, String> {
    let Some(status) = &p.status else {
        return BTreeMap::new();
    };
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .filter_map(|c| {
            let id = c.container_id.as_deref().filter(|i| !i.is_empty())?;
            Some((c.name.clone(), id.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests;
