//! The audit's inputs from a recorded node's files: pods as `kubectl get pods -o yaml`
//! prints them (spec for the QoS class and container names, status for the running
//! containers' IDs), and the kubelet's CPU manager checkpoint.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_yaml::Value;

use super::{AuditContainer, AuditPod, KubeletCpus};
use crate::cgroup::ContainerId;
use crate::cpu_checkpoint::CpuCheckpoint;

/// The kubelet's assignments as a checkpoint records them. Pod-level entries (pod-level
/// resource managers) are not container cpusets and are left out.
pub fn kubelet_cpus(cp: &CpuCheckpoint) -> KubeletCpus {
    KubeletCpus {
        default_cpu_set: cp.default_cpu_set.clone(),
        assignments: cp.entries.clone(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    qos_class: Option<String>,
    phase: Option<String>,
    #[serde(default)]
    container_statuses: Vec<ContainerStatus>,
    #[serde(default)]
    init_container_statuses: Vec<ContainerStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerStatus {
    name: String,
    #[serde(rename = "containerID")]
    container_id: Option<String>,
    #[serde(default)]
    state: BTreeMap<String, Value>,
}

/// A pod's status as the audit needs it: the QoS class the API reports (when it does) and
/// the running containers' IDs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodStatusIds {
    /// `status.qosClass`.
    pub qos_class: Option<String>,
    /// `status.phase`.
    pub phase: Option<String>,
    /// Running containers (app and init): name -> ID.
    pub running: BTreeMap<String, ContainerId>,
}

/// The running containers of a status value (`status` of a Pod). A running container with
/// a malformed ID is an error naming the pod and container.
pub fn status_ids(pod: &str, status: &Value) -> Result<PodStatusIds, String> {
    let s: Status =
        serde_yaml::from_value(status.clone()).map_err(|e| format!("pod {pod}: status: {e}"))?;
    let mut running = BTreeMap::new();
    for c in s
        .container_statuses
        .iter()
        .chain(&s.init_container_statuses)
    {
        if !c.state.contains_key("running") {
            continue;
        }
        let Some(id) = c.container_id.as_deref().filter(|i| !i.is_empty()) else {
            continue;
        };
        let id =
            ContainerId::parse(id).map_err(|e| format!("pod {pod}: container {}: {e}", c.name))?;
        running.insert(c.name.clone(), id);
    }
    Ok(PodStatusIds {
        qos_class: s.qos_class,
        phase: s.phase,
        running,
    })
}

/// The audit's pods from YAML (Pods and `List`s of Pods, several documents allowed), with
/// the QoS class from `status.qosClass` or, where absent, computed from the spec as the
/// kubelet does.
pub fn pods_from_yaml(text: &str) -> Result<Vec<AuditPod>, String> {
    let manifests = crate::pods::pods_from_yaml(text).map_err(|e| e.to_string())?;
    // The statuses, by UID, from a second pass over the same documents.
    let mut statuses: BTreeMap<String, Value> = BTreeMap::new();
    for de in serde_yaml::Deserializer::from_str(text) {
        let v = Value::deserialize(de).map_err(|e| e.to_string())?;
        collect_statuses(&v, &mut statuses);
    }
    let mut out = Vec::new();
    for m in &manifests {
        let pod = crate::pods::engine_pod(&m.fields()).map_err(|e| e.to_string())?;
        let key = pod.key();
        let ids = match statuses.get(&pod.uid) {
            Some(s) => status_ids(&key, s)?,
            None => PodStatusIds::default(),
        };
        let qos = match ids.qos_class.as_deref() {
            Some("Guaranteed") => nodetopo_engine::QosClass::Guaranteed,
            Some("Burstable") => nodetopo_engine::QosClass::Burstable,
            Some("BestEffort") => nodetopo_engine::QosClass::BestEffort,
            Some(other) => {
                return Err(format!(
                    "pod {key}: status.qosClass {other:?} is not a QoS class"
                ))
            }
            None => pod.qos_class(),
        };
        let containers = pod
            .all_containers()
            .map(|c| AuditContainer {
                name: c.name.clone(),
                id: ids.running.get(&c.name).cloned(),
            })
            .collect();
        out.push(AuditPod {
            pod: key,
            uid: pod.uid.clone(),
            qos,
            terminal: matches!(ids.phase.as_deref(), Some("Succeeded" | "Failed")),
            containers,
        });
    }
    Ok(out)
}

fn collect_statuses(v: &Value, out: &mut BTreeMap<String, Value>) {
    match v.get("kind").and_then(Value::as_str) {
        Some("Pod") => {
            let uid = v
                .get("metadata")
                .and_then(|m| m.get("uid"))
                .and_then(Value::as_str);
            if let (Some(uid), Some(status)) = (uid, v.get("status")) {
                out.insert(uid.to_string(), status.clone());
            }
        }
        Some("List" | "PodList") => {
            for item in v
                .get("items")
                .and_then(Value::as_sequence)
                .into_iter()
                .flatten()
            {
                collect_statuses(item, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_containers_and_qos_come_from_the_status() {
        let yaml = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: a, namespace: ns, uid: u-1}
  spec:
    initContainers: [{name: init}]
    containers:
    - name: app
      resources: {limits: {cpu: "2", memory: 1Gi}}
    - name: side
      resources: {limits: {cpu: "1", memory: 1Gi}}
  status:
    phase: Running
    qosClass: Guaranteed
    initContainerStatuses:
    - {name: init, containerID: "containerd://aa", state: {terminated: {exitCode: 0}}}
    containerStatuses:
    - {name: app, containerID: "containerd://bb", state: {running: {startedAt: "x"}}}
    - {name: side, containerID: "", state: {waiting: {reason: ContainerCreating}}}
"#;
        let pods = pods_from_yaml(yaml).unwrap();
        assert_eq!(pods.len(), 1);
        let p = &pods[0];
        assert_eq!((p.pod.as_str(), p.uid.as_str()), ("ns/a", "u-1"));
        assert_eq!(p.qos, nodetopo_engine::QosClass::Guaranteed);
        let ids: Vec<_> = p
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.id.as_ref().map(|i| i.id.as_str())))
            .collect();
        assert_eq!(
            ids,
            vec![("init", None), ("app", Some("bb")), ("side", None)]
        );
    }

    #[test]
    fn a_bad_container_id_names_the_pod_and_container() {
        let yaml = r#"
kind: Pod
metadata: {name: a, uid: u-1}
spec: {containers: [{name: app}]}
status:
  containerStatuses:
  - {name: app, containerID: "docker://bb", state: {running: {}}}
"#;
        let e = pods_from_yaml(yaml).unwrap_err();
        assert!(
            e.contains("default/a") && e.contains("app") && e.contains("docker://bb"),
            "{e}"
        );
    }
}
