//! The fields of a pod that placement reads, borrowed from wherever the pod came from.
//!
//! A pod reaches the conversion ([`super::engine_pod`]) from two places: YAML read here
//! ([`manifest::Pod`], local mode and `nodetopo plan`) and the API server's typed Pod in the
//! agent. Each source lends its fields to a [`PodFields`] through the same borrow
//! ([`crate::pod_fields!`]; names and quantity texts are borrowed, never copied), so there is
//! one conversion and neither source is rewritten into the other's shape. This crate stays
//! free of k8s-openapi (a fast build for `nodetopo plan`).
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

/// Borrows the [`PodFields`] of a Pod of k8s-openapi's shape: a [`manifest::Pod`]
/// ([`manifest::Pod::fields`]) or `k8s_openapi::api::core::v1::Pod` (in the agent).
///
/// The manifest types mirror k8s-openapi's field for field, so one borrow reads both, and
/// this crate needs no k8s-openapi; a field that drifts in either shape stops the build
/// where the macro is used.
#[macro_export]
macro_rules! pod_fields {
    ($pod:expr) => {{
        let pod = $pod;
        let status = pod.status.as_ref();
        $crate::pods::PodFields {
            name: pod.metadata.name.as_deref(),
            namespace: pod.metadata.namespace.as_deref(),
            uid: pod.metadata.uid.as_deref(),
            spec: pod.spec.as_ref().map(|s| {
                // Init containers, then app containers, through one borrow of a container.
                let init = s.init_containers.as_ref().map_or(0, |cs| cs.len());
                let mut init_containers: ::std::vec::Vec<_> = s
                    .init_containers
                    .iter()
                    .flatten()
                    .chain(&s.containers)
                    .map(|c| {
                        let res = c.resources.as_ref();
                        $crate::pods::fields::ContainerFields {
                            name: c.name.as_str(),
                            restart_policy: c.restart_policy.as_deref(),
                            limits: $crate::pods::fields::quantity_texts(
                                res.and_then(|r| r.limits.as_ref()),
                                |q| q.0.as_str(),
                            ),
                            requests: $crate::pods::fields::quantity_texts(
                                res.and_then(|r| r.requests.as_ref()),
                                |q| q.0.as_str(),
                            ),
                        }
                    })
                    .collect();
                let containers = init_containers.split_off(init);
                $crate::pods::fields::SpecFields {
                    init_containers,
                    containers,
                }
            }),
            status: $crate::pods::fields::StatusFields {
                phase: status.and_then(|s| s.phase.as_deref()),
                reason: status.and_then(|s| s.reason.as_deref()),
                message: status.and_then(|s| s.message.as_deref()),
            },
        }
    }};
}

/// A resource map's quantities as text (`text` reads a quantity type's string), borrowed:
/// what [`pod_fields!`](crate::pod_fields) makes of `resources.limits` and
/// `resources.requests`. An absent map is an empty one.
pub fn quantity_texts<'a, Q>(
    m: Option<&'a BTreeMap<String, Q>>,
    text: fn(&'a Q) -> &'a str,
) -> BTreeMap<&'a str, &'a str> {
    m.into_iter()
        .flatten()
        .map(|(name, q)| (name.as_str(), text(q)))
        .collect()
}

impl manifest::Pod {
    /// The fields placement reads, borrowed from this pod.
    pub fn fields(&self) -> PodFields<'_> {
        crate::pod_fields!(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_lends_exactly_the_fields_placement_reads() {
        let yaml = r#"
kind: Pod
metadata: {name: web-0, uid: u-1, creationTimestamp: "2024-05-01T10:00:00Z", labels: {a: b}}
spec:
  initContainers:
  - {name: setup, resources: {limits: {cpu: "1"}}}
  - {name: sidecar, restartPolicy: Always}
  containers:
  - name: app
    image: ignored
    resources: {requests: {cpu: 2, memory: 1Gi}, limits: {cpu: "2"}}
status: {phase: Failed, reason: TopologyAffinityError, message: m}
"#;
        let pods = crate::pods::pods_from_yaml(yaml).expect("parses");
        let map = |kv: &[(&'static str, &'static str)]| kv.iter().copied().collect();
        let want = PodFields {
            name: Some("web-0"),
            namespace: None,
            uid: Some("u-1"),
            spec: Some(SpecFields {
                init_containers: vec![
                    ContainerFields {
                        name: "setup",
                        restart_policy: None,
                        limits: map(&[("cpu", "1")]),
                        requests: map(&[]),
                    },
                    ContainerFields {
                        name: "sidecar",
                        restart_policy: Some("Always"),
                        ..Default::default()
                    },
                ],
                containers: vec![ContainerFields {
                    name: "app",
                    restart_policy: None,
                    limits: map(&[("cpu", "2")]),
                    requests: map(&[("cpu", "2"), ("memory", "1Gi")]),
                }],
            }),
            status: StatusFields {
                phase: Some("Failed"),
                reason: Some("TopologyAffinityError"),
                message: Some("m"),
            },
        };
        assert_eq!(pods[0].fields(), want);
        // No init containers, no status: nothing is taken from the app containers.
        let bare = crate::pods::pods_from_yaml(
            "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}, {name: b}]}\n",
        )
        .expect("parses");
        let fields = bare[0].fields();
        let spec = fields.spec.as_ref().expect("spec");
        assert!(spec.init_containers.is_empty());
        let names: Vec<_> = spec.containers.iter().map(|c| c.name).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(fields.status, StatusFields::default());
    }
}
