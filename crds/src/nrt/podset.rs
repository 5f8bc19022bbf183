//! The pod set the scheduler plugin fingerprints, by its own rule, so the
//! `nodeTopologyPodsFingerprint` nodetopo publishes is the one the plugin recomputes.
//!
//! The rule, read from kubernetes-sigs/scheduler-plugins `pkg/noderesourcetopology`
//! (`cache/overreserve.go` `makeNodeToPodDataMap`, `cache/store.go`
//! `checkPodFingerprintForNode`, `podprovider/podprovider.go`,
//! `resourcerequests/exclusive.go` `AreExclusiveForPod`):
//! - the pods come from the plugin's pod informer: with the default dedicated informer
//!   (`cache.informerMode: Dedicated`) every bound pod whose phase is not `Pending`
//!   (Running, Succeeded, Failed, and the deprecated Unknown); a pod leaves the set only when
//!   it is deleted, so a pod the kubelet failed (e.g. TopologyAffinityError) stays in it;
//! - with `nodeTopologyPodsFingerprintMethod: with-exclusive-resources` (which nodetopo
//!   publishes; the plugin's resync method `Autodetect`, its default, then hashes the same
//!   set) only the pods "exclusive" for the node's object count: a pod is exclusive when one
//!   of its app containers or restartable (sidecar) init containers requests
//!   - a non-native resource (a name with a `/` outside `kubernetes.io/`) that the object
//!     lists in some zone, whatever the pod's QoS class and the amount requested, or,
//!   - in a Guaranteed pod, a whole number of CPUs (> 0), or memory or huge pages (> 0),
//!     so every Guaranteed pod counts (its memory request is always positive);
//!
//!   non-restartable init containers are not read (they finish before the pod runs).
//!
//! The plugin reads each pod's `status.qosClass`, which the API server sets from the spec
//! at creation with the same computation as the engine's [`Pod::qos_class`].

use std::collections::BTreeSet;

use nodetopo_engine::{Container, Pod, QosClass};

use super::types::Zone;

/// One pod bound to the node and its `status.phase` (empty when unset).
#[derive(Debug, Clone, Copy)]
pub struct NodePod<'a> {
    /// The pod's spec, as the engine reads it (requests defaulted from limits, as the API
    /// server stores them).
    pub pod: &'a Pod,
    /// `status.phase`.
    pub phase: &'a str,
}

/// Whether the plugin's (dedicated) pod informer counts a pod in this phase: every phase
/// but `Pending`.
pub fn phase_counted(phase: &str) -> bool {
    phase != "Pending"
}

/// Whether a resource name is native for the plugin (`v1helper.IsNativeResource`): no
/// domain, or a `kubernetes.io/` one.
pub fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// The resource names the object lists in any zone (`cache.ResourceNamesFromNRT`).
pub fn resource_names(zones: &[Zone]) -> BTreeSet<String> {
    zones
        .iter()
        .flat_map(|z| z.resources.iter().map(|r| r.name.clone()))
        .collect()
}

/// Whether one container's requests make it exclusive (`IsExclusiveForContainer`).
fn container_exclusive(c: &Container, guaranteed: bool, listed: &BTreeSet<String>) -> bool {
    let r = &c.requests;
    if r.extended
        .keys()
        .any(|name| !is_native_resource(name) && listed.contains(name))
    {
        return true;
    }
    if !guaranteed {
        return false;
    }
    let whole_cpus = r.cpu_millis.is_some_and(|m| m > 0 && m % 1000 == 0);
    let memory = r.memory_bytes.is_some_and(|b| b > 0);
    let huge = r.hugepages.values().any(|b| *b > 0);
    whole_cpus || memory || huge
}

/// Whether the plugin counts `pod` as holding exclusive resources on a node whose object
/// lists the resources `listed` (`AreExclusiveForPod`).
pub fn exclusive_for_plugin(pod: &Pod, listed: &BTreeSet<String>) -> bool {
    let guaranteed = pod.qos_class() == QosClass::Guaranteed;
    pod.init_containers
        .iter()
        .filter(|c| c.restartable)
        .chain(pod.containers.iter())
        .any(|c| container_exclusive(c, guaranteed, listed))
}

/// The plugin's rule applied to an API Pod as its informer holds it, field by field as the
/// plugin reads them (`status.phase`, `status.qosClass`, `spec.nodeName`, the containers'
/// `resources.requests`, init containers' `restartPolicy`): whether the plugin counts it in
/// the fingerprint of a node whose object lists `listed`. An independent path from
/// [`fingerprint_pods`] (which reads the engine's view of a pod), for checking a published
/// object against the API. Errors name the pod and the field that cannot be read.
pub fn api_pod_counted(
    pod: &k8s_openapi::api::core::v1::Pod,
    listed: &BTreeSet<String>,
) -> Result<bool, String> {
    use nodetopo_engine::quantity::{parse_millis, parse_units};
    let key = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or_default();
    let Some(spec) = pod.spec.as_ref() else {
        return Err(format!("pod {key}: no spec"));
    };
    if !phase_counted(phase) || spec.node_name.as_deref().unwrap_or_default().is_empty() {
        return Ok(false);
    }
    let qos = status
        .and_then(|s| s.qos_class.as_deref())
        .ok_or_else(|| format!("pod {key}: no status.qosClass"))?;
    let guaranteed = qos == "Guaranteed";
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    for c in sidecars.chain(spec.containers.iter()) {
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        for (name, q) in requests.into_iter().flatten() {
            let bad = |e: nodetopo_engine::quantity::QuantityError| {
                format!("pod {key} container {}: request {name}: {e}", c.name)
            };
            if !is_native_resource(name) {
                if listed.contains(name) {
                    return Ok(true);
                }
                continue;
            }
            if !guaranteed {
                continue;
            }
            let exclusive = if name == "cpu" {
                let units = parse_units(&q.0).map_err(bad)?;
                units > 0 && parse_millis(&q.0).map_err(bad)? == units.saturating_mul(1000)
            } else if name == "memory" || name.starts_with("hugepages-") {
                parse_units(&q.0).map_err(bad)? > 0
            } else {
                false
            };
            if exclusive {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The pods (`namespace`, `name`) the plugin fingerprints on a node whose object lists the
/// resources `listed`, sorted (a pod listed twice counts once: the informer holds one
/// object per pod).
pub fn fingerprint_pods(pods: &[NodePod<'_>], listed: &BTreeSet<String>) -> Vec<(String, String)> {
    let set: BTreeSet<(String, String)> = pods
        .iter()
        .filter(|p| phase_counted(p.phase) && exclusive_for_plugin(p.pod, listed))
        .map(|p| (p.pod.namespace.clone(), p.pod.name.clone()))
        .collect();
    set.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use nodetopo_engine::ResourceList;

    use super::*;

    const GI: u64 = 1 << 30;

    /// Requests (= limits when `guaranteed_limits`) of one container.
    fn res(cpu_millis: Option<u64>, memory: Option<u64>) -> ResourceList {
        ResourceList {
            cpu_millis,
            memory_bytes: memory,
            ..Default::default()
        }
    }

    fn ctr(name: &str, requests: ResourceList, limits: ResourceList) -> Container {
        Container {
            name: name.into(),
            requests,
            limits,
            restartable: false,
        }
    }

    /// A container whose limits equal its requests.
    fn g(name: &str, r: ResourceList) -> Container {
        ctr(name, r.clone(), r)
    }

    fn with_extended(mut r: ResourceList, name: &str, count: u64) -> ResourceList {
        r.extended.insert(name.into(), count);
        r
    }

    fn pod(name: &str, init: Vec<Container>, containers: Vec<Container>) -> Pod {
        Pod {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            init_containers: init,
            containers,
        }
    }

    /// The plugin's rule (`AreExclusiveForPod` over the dedicated informer's phases), case
    /// by case: (pod, phase, counted with the object listing `example.com/nic`).
    #[test]
    fn the_plugins_rule_case_by_case() {
        let listed: BTreeSet<String> = ["cpu", "memory", "hugepages-2Mi", "example.com/nic"]
            .into_iter()
            .map(String::from)
            .collect();
        let mut sidecar = g(
            "sidecar",
            with_extended(res(None, None), "example.com/nic", 1),
        );
        sidecar.restartable = true;
        let mut huge_only = res(Some(500), Some(GI));
        huge_only.hugepages = BTreeMap::from([(2 << 20, 4 << 20)]);
        let cases: Vec<(Pod, &str, bool, &str)> = vec![
            (
                pod("g-int", vec![], vec![g("a", res(Some(2000), Some(GI)))]),
                "Running",
                true,
                "Guaranteed, whole CPUs",
            ),
            (
                pod("g-frac", vec![], vec![g("a", res(Some(1500), Some(GI)))]),
                "Running",
                true,
                "Guaranteed, 1500m: its memory counts (the golden shared-0)",
            ),
            (
                pod("g-pending", vec![], vec![g("a", res(Some(2000), Some(GI)))]),
                "Pending",
                false,
                "Pending: the dedicated informer skips it",
            ),
            (
                pod("g-failed", vec![], vec![g("a", res(Some(2000), Some(GI)))]),
                "Failed",
                true,
                "Failed (e.g. TopologyAffinityError): counted until deleted",
            ),
            (
                pod(
                    "g-succeeded",
                    vec![],
                    vec![g("a", res(Some(1000), Some(GI)))],
                ),
                "Succeeded",
                true,
                "Succeeded: counted until deleted",
            ),
            (
                pod("g-unknown", vec![], vec![g("a", res(Some(1000), Some(GI)))]),
                "Unknown",
                true,
                "Unknown (deprecated) is not Pending",
            ),
            (
                pod("g-huge", vec![], vec![g("a", huge_only)]),
                "Running",
                true,
                "Guaranteed with huge pages",
            ),
            (
                pod(
                    "burstable",
                    vec![],
                    vec![ctr("a", res(Some(2000), Some(GI)), res(None, None))],
                ),
                "Running",
                false,
                "Burstable, no listed device",
            ),
            (
                pod(
                    "besteffort",
                    vec![],
                    vec![ctr("a", res(None, None), res(None, None))],
                ),
                "Running",
                false,
                "BestEffort",
            ),
            (
                pod(
                    "be-nic",
                    vec![],
                    vec![ctr(
                        "a",
                        with_extended(res(None, None), "example.com/nic", 1),
                        res(None, None),
                    )],
                ),
                "Running",
                true,
                "BestEffort with a device the object lists",
            ),
            (
                pod(
                    "be-nic-zero",
                    vec![],
                    vec![ctr(
                        "a",
                        with_extended(res(None, None), "example.com/nic", 0),
                        res(None, None),
                    )],
                ),
                "Running",
                true,
                "the plugin checks the name only, not the amount",
            ),
            (
                pod(
                    "be-unlisted",
                    vec![],
                    vec![ctr(
                        "a",
                        with_extended(res(None, None), "example.com/dongle", 1),
                        res(None, None),
                    )],
                ),
                "Running",
                false,
                "a device the object does not list (no topology)",
            ),
            (
                pod(
                    "init-nic",
                    vec![g(
                        "init",
                        with_extended(res(None, None), "example.com/nic", 1),
                    )],
                    vec![ctr("a", res(Some(100), None), res(None, None))],
                ),
                "Running",
                false,
                "a plain init container is not read",
            ),
            (
                pod(
                    "sidecar-nic",
                    vec![sidecar],
                    vec![ctr("a", res(Some(100), None), res(None, None))],
                ),
                "Running",
                true,
                "a restartable (sidecar) init container is read",
            ),
        ];
        let mut counted = 0;
        for (p, phase, want, why) in &cases {
            let got = phase_counted(phase) && exclusive_for_plugin(p, &listed);
            assert_eq!(got, *want, "{}: {why}", p.name);
            counted += usize::from(got);
        }
        let node: Vec<NodePod<'_>> = cases
            .iter()
            .map(|(p, phase, _, _)| NodePod { pod: p, phase })
            .collect();
        let set = fingerprint_pods(&node, &listed);
        assert_eq!(set.len(), counted);
        assert!(set.windows(2).all(|w| w[0] < w[1]), "sorted, distinct");
        println!("plugin rule: {} cases, {counted} counted", cases.len());
    }

    /// The same rule read from API Pods (the real-node check's path).
    #[test]
    fn the_plugins_rule_on_api_pods() {
        let listed: BTreeSet<String> = ["cpu", "memory", "example.com/nic"]
            .into_iter()
            .map(String::from)
            .collect();
        let api_pod = |phase: &str, qos: &str, requests: serde_json::Value, init: bool| {
            let c = serde_json::json!({"name": "c", "resources": {"requests": requests}});
            let mut spec = serde_json::json!({"nodeName": "n1", "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "100m"}}}]});
            if init {
                spec["initContainers"] = serde_json::json!([c]);
            } else {
                spec["containers"] = serde_json::json!([c]);
            }
            let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "ns", "name": "p"},
                "spec": spec,
                "status": {"phase": phase, "qosClass": qos}
            }))
            .expect("pod");
            api_pod_counted(&p, &listed).expect("readable")
        };
        let g = serde_json::json!({"cpu": "1500m", "memory": "1Gi"});
        assert!(
            api_pod("Running", "Guaranteed", g.clone(), false),
            "shared-0's shape"
        );
        assert!(!api_pod("Pending", "Guaranteed", g.clone(), false));
        assert!(api_pod("Failed", "Guaranteed", g.clone(), false));
        assert!(!api_pod("Running", "Burstable", g, false));
        let nic = serde_json::json!({"example.com/nic": "1"});
        assert!(api_pod("Running", "BestEffort", nic.clone(), false));
        assert!(
            !api_pod("Running", "BestEffort", nic, true),
            "plain init container"
        );
        let whole = serde_json::json!({"cpu": "2", "memory": "0"});
        assert!(api_pod("Running", "Guaranteed", whole, false));
        let frac_no_mem = serde_json::json!({"cpu": "2500m"});
        assert!(!api_pod("Running", "Guaranteed", frac_no_mem, false));
        let mut unbound: k8s_openapi::api::core::v1::Pod = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "u"}, "spec": {"containers": []},
                               "status": {"phase": "Running"}}),
        )
        .expect("pod");
        assert_eq!(api_pod_counted(&unbound, &listed), Ok(false), "not bound");
        unbound.spec.as_mut().expect("spec").node_name = Some("n1".into());
        assert_eq!(
            api_pod_counted(&unbound, &listed),
            Err("pod /u: no status.qosClass".to_string())
        );
    }

    #[test]
    fn native_resource_names() {
        for (name, native) in [
            ("cpu", true),
            ("memory", true),
            ("hugepages-1Gi", true),
            ("ephemeral-storage", true),
            ("kubernetes.io/something", true),
            ("example.kubernetes.io/x", true),
            ("nvidia.com/gpu", false),
            ("intel.com/sriov_netdevice", false),
        ] {
            assert_eq!(is_native_resource(name), native, "{name}");
        }
    }
}
