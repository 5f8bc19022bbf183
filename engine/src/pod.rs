//! Pods and containers as the engine sees them: names, effective resource requests and
//! limits, and the pod's QoS class. No Kubernetes types: the agent converts real Pod objects
//! (after API-server defaulting: a limit without a request means request = limit) into these.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Resource amounts of one container (requests or limits). `None` means "not specified".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceList {
    /// CPU in millicores.
    pub cpu_millis: Option<u64>,
    /// Memory in bytes.
    pub memory_bytes: Option<u64>,
    /// Huge pages: page size in bytes -> amount in bytes (`hugepages-2Mi: 1Gi` is
    /// `2097152 -> 1073741824`).
    #[serde(default)]
    pub hugepages: BTreeMap<u64, u64>,
    /// Extended resources (devices), name -> count, e.g. `example.com/nic: 1`.
    #[serde(default)]
    pub extended: BTreeMap<String, u64>,
}

/// One container of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// Container name, unique within the pod.
    pub name: String,
    /// Effective requests (after defaulting from limits).
    pub requests: ResourceList,
    /// Limits.
    pub limits: ResourceList,
    /// For init containers: `restartPolicy: Always`, i.e. a sidecar that keeps running.
    #[serde(default)]
    pub restartable: bool,
}

/// The kubelet's QoS classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QosClass {
    /// Every container has equal, non-zero CPU and memory requests and limits.
    Guaranteed,
    /// Some request or limit, but not Guaranteed.
    Burstable,
    /// No CPU or memory request or limit anywhere.
    BestEffort,
}

/// A pod as the engine admits it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (the key of allocations).
    pub uid: String,
    /// Init containers, in order.
    #[serde(default)]
    pub init_containers: Vec<Container>,
    /// App containers, in order.
    pub containers: Vec<Container>,
}

impl Pod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// All containers: init containers first, then app containers.
    pub fn all_containers(&self) -> impl Iterator<Item = &Container> {
        self.init_containers.iter().chain(self.containers.iter())
    }

    /// The container with this name, init or app.
    pub fn container(&self, name: &str) -> Option<&Container> {
        self.all_containers().find(|c| c.name == name)
    }

    /// The QoS class, computed as the kubelet's `GetPodQOS` does: CPU and memory requests
    /// and limits summed over every container; Guaranteed needs every container to set both
    /// CPU and memory limits and the summed requests to equal the summed limits; no non-zero
    /// CPU or memory request or limit at all is BestEffort.
    pub fn qos_class(&self) -> QosClass {
        let mut req: BTreeMap<&str, u64> = BTreeMap::new();
        let mut lim: BTreeMap<&str, u64> = BTreeMap::new();
        let mut guaranteed = true;
        for c in self.all_containers() {
            for (name, v) in [
                ("cpu", c.requests.cpu_millis),
                ("memory", c.requests.memory_bytes),
            ] {
                if let Some(v) = v.filter(|v| *v > 0) {
                    *req.entry(name).or_default() += v;
                }
            }
            let mut found = 0;
            for (name, v) in [
                ("cpu", c.limits.cpu_millis),
                ("memory", c.limits.memory_bytes),
            ] {
                if let Some(v) = v.filter(|v| *v > 0) {
                    found += 1;
                    *lim.entry(name).or_default() += v;
                }
            }
            if found != 2 {
                guaranteed = false;
            }
        }
        if req.is_empty() && lim.is_empty() {
            return QosClass::BestEffort;
        }
        if guaranteed && req.len() == lim.len() && req.iter().all(|(k, v)| lim.get(k) == Some(v)) {
            QosClass::Guaranteed
        } else {
            QosClass::Burstable
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(
        name: &str,
        req: (Option<u64>, Option<u64>),
        lim: (Option<u64>, Option<u64>),
    ) -> Container {
        Container {
            name: name.into(),
            requests: ResourceList {
                cpu_millis: req.0,
                memory_bytes: req.1,
                ..Default::default()
            },
            limits: ResourceList {
                cpu_millis: lim.0,
                memory_bytes: lim.1,
                ..Default::default()
            },
            restartable: false,
        }
    }

    fn pod(cs: Vec<Container>) -> Pod {
        Pod {
            namespace: "default".into(),
            name: "p".into(),
            uid: "u".into(),
            containers: cs,
            ..Default::default()
        }
    }

    #[test]
    fn qos_classes() {
        let g = c(
            "a",
            (Some(2000), Some(1 << 30)),
            (Some(2000), Some(1 << 30)),
        );
        assert_eq!(pod(vec![g.clone()]).qos_class(), QosClass::Guaranteed);
        assert_eq!(
            pod(vec![c("a", (None, None), (None, None))]).qos_class(),
            QosClass::BestEffort
        );
        assert_eq!(
            pod(vec![c("a", (Some(100), None), (None, None))]).qos_class(),
            QosClass::Burstable
        );
        // Memory limit missing: not Guaranteed.
        assert_eq!(
            pod(vec![c("a", (Some(1000), None), (Some(1000), None))]).qos_class(),
            QosClass::Burstable
        );
        // Requests below limits.
        assert_eq!(
            pod(vec![c(
                "a",
                (Some(500), Some(1 << 30)),
                (Some(1000), Some(1 << 30))
            )])
            .qos_class(),
            QosClass::Burstable
        );
        // One Guaranteed container and one without limits make the pod Burstable.
        assert_eq!(
            pod(vec![g.clone(), c("b", (Some(100), None), (None, None))]).qos_class(),
            QosClass::Burstable
        );
        // Zero requests and limits count as unset.
        assert_eq!(
            pod(vec![c("a", (Some(0), Some(0)), (Some(0), Some(0)))]).qos_class(),
            QosClass::BestEffort
        );
        let mut p = pod(vec![g.clone()]);
        p.init_containers.push(g);
        assert_eq!(p.qos_class(), QosClass::Guaranteed);
        assert_eq!(p.key(), "default/p");
        assert_eq!(p.all_containers().count(), 2);
    }
}
