//! The few fields of a Kubernetes Pod that placement needs, with the API's field names.
//!
//! These mirror `k8s_openapi::api::core::v1::Pod` and its parts field for field (same Rust
//! names, same camelCase JSON/YAML names). The conversion reads neither shape: each lends
//! its fields to a [`super::PodFields`] ([`Pod::fields`] here; the agent builds one from the
//! API's Pod). Unknown fields are ignored, as `kubectl apply` ignores what the conversion
//! does not read. Keeping k8s-openapi out of this crate keeps `nodetopo plan` a one-minute
//! build.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A resource amount as written (`"2"`, `"500m"`, `"1Gi"`): parsed later, exactly.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Quantity(pub String);

/// A timestamp as written (RFC 3339), kept as text: placement does not read it; the agent's
/// admission order does, and parses it once when it reads the pod (naming the pod when the
/// text is not a time).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Time(pub String);

/// `metadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.creationTimestamp`.
    pub creation_timestamp: Option<Time>,
}

/// `resources` of a container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ResourceRequirements {
    /// `resources.limits`.
    pub limits: Option<BTreeMap<String, Quantity>>,
    /// `resources.requests`.
    pub requests: Option<BTreeMap<String, Quantity>>,
}

/// A container or init container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// `name`.
    pub name: String,
    /// `resources`.
    pub resources: Option<ResourceRequirements>,
    /// `restartPolicy` (init containers: `Always` makes a sidecar).
    pub restart_policy: Option<String>,
}

/// `spec` of a Pod or a pod template.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// `spec.containers`.
    pub containers: Vec<Container>,
    /// `spec.initContainers`.
    pub init_containers: Option<Vec<Container>>,
}

/// `status`: the phase (a finished pod holds no CPUs) and, for a pod the kubelet refused,
/// its reason and message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct PodStatus {
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.reason` (the kubelet's admission-failure reason of a Failed pod, e.g.
    /// `TopologyAffinityError`).
    #[serde(default)]
    pub reason: Option<String>,
    /// `status.message`.
    #[serde(default)]
    pub message: Option<String>,
}

/// A Pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Pod {
    /// `metadata`.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    pub spec: Option<PodSpec>,
    /// `status`.
    pub status: Option<PodStatus>,
}
