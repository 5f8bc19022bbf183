//! The fields of a pod that placement reads, borrowed from wherever the pod came from.
//!
//! A pod reaches the conversion ([`super::engine_pod`]) from two places: YAML read here
//! ([`manifest::Pod`], local mode and `nodetopo plan`) and the API server's typed Pod in the
//! agent. Each source lends its fields to a [`PodFields`] (names and quantity texts are
//! borrowed, never copied), so there is one conversion and neither source is rewritten into
//! the other's shape. The agent builds its view from k8s-openapi's Pod itself: this crate
//! stays free of k8s-openapi (a fast build for `nodetopo plan`).
//!
//! The creation time is not here: the engine does not read it. The agent orders admission by
//! it and takes it from each source typed (the API's `Time` as is, the YAML text parsed once).

use std::collections::BTreeMap;

use super::manifest;

/// A pod's fields as placement reads them. Fields mirror the Pod's; `None` is "not set".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodFields<'a> {
    /// `metadata.name` (required by the conversion).
    pub name: Option<&'a str>,
    /// `metadata.namespace` ([`super::DEFAULT_NAMESPACE`] when unset).
    pub namespace: Option<&'a str>,
    /// `metadata.uid` (`namespace/name` when unset).
    pub uid: Option<&'a str>,
    /// `spec` (required by the conversion).
    pub spec: Option<SpecFields<'a>>,
    /// `status.phase`, `status.reason` and `status.message`.
    pub status: StatusFields<'a>,
}

/// The containers of a pod's `spec`, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecFields<'a> {
    /// `spec.initContainers`.
    pub init_containers: Vec<ContainerFields<'a>>,
    /// `spec.containers`.
    pub containers: Vec<ContainerFields<'a>>,
}

/// One container's fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerFields<'a> {
    /// `name`.
    pub name: &'a str,
    /// `restartPolicy` (init containers: `Always` makes a sidecar).
    pub restart_policy: Option<&'a str>,
    /// `resources.limits`: resource name -> quantity as written (`"500m"`, `"1Gi"`). An
    /// absent map and an empty one read the same.
    pub limits: BTreeMap<&'a str, &'a str>,
    /// `resources.requests`, as the limits.
    pub requests: BTreeMap<&'a str, &'a str>,
}

/// The part of `status` placement reads: the phase (a finished pod holds no CPUs) and, for a
/// pod the kubelet refused, its reason and message. All unset when the pod has no status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusFields<'a> {
    /// `status.phase`.
    pub phase: Option<&'a str>,
    /// `status.reason` (e.g. `TopologyAffinityError` on a Failed pod).
    pub reason: Option<&'a str>,
    /// `status.message`.
    pub message: Option<&'a str>,
}

impl manifest::Pod {
    /// The fields placement reads, borrowed from this pod.
    pub fn fields(&self) -> PodFields<'_> {
        let meta = &self.metadata;
        let status = self.status.as_ref();
        PodFields {
            name: meta.name.as_deref(),
            namespace: meta.namespace.as_deref(),
            uid: meta.uid.as_deref(),
            spec: self.spec.as_ref().map(|s| SpecFields {
                init_containers: s.init_containers.iter().flatten().map(container).collect(),
                containers: s.containers.iter().map(container).collect(),
            }),
            status: StatusFields {
                phase: status.and_then(|s| s.phase.as_deref()),
                reason: status.and_then(|s| s.reason.as_deref()),
                message: status.and_then(|s| s.message.as_deref()),
            },
        }
    }
}

fn container(c: &manifest::Container) -> ContainerFields<'_> {
    let res = c.resources.as_ref();
    ContainerFields {
        name: &c.name,
        restart_policy: c.restart_policy.as_deref(),
        limits: quantities(res.and_then(|r| r.limits.as_ref())),
        requests: quantities(res.and_then(|r| r.requests.as_ref())),
    }
}

fn quantities(m: Option<&BTreeMap<String, manifest::Quantity>>) -> BTreeMap<&str, &str> {
    m.into_iter()
        .flatten()
        .map(|(name, q)| (name.as_str(), q.0.as_str()))
        .collect()
}
