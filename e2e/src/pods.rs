//! Test pod manifests: the scenario's Guaranteed, fractional, Burstable, init-container and
//! device pods, built from one description so both cluster providers create the same pods.

use serde_json::{json, Value};

/// The workload a provider runs in test containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Image reference.
    pub image: String,
    /// `imagePullPolicy` (`Never` where images were imported without a registry).
    pub pull_policy: String,
    /// Command and args of a container that runs until deleted.
    pub run: Vec<String>,
    /// Command and args of a container that prints `cpus_allowed_list=<list>` and exits 0
    /// (init containers).
    pub print_and_exit: Vec<String>,
}

/// The resources of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    /// CPU quantity (`"1"`, `"500m"`).
    pub cpu: String,
    /// Memory quantity.
    pub memory: String,
    /// Limits equal to requests (Guaranteed) or requests only (Burstable).
    pub limits: bool,
    /// Extended resources (name, count), requested and limited alike.
    pub extended: Vec<(String, u32)>,
}

impl Resources {
    /// Guaranteed: `cpu` with equal limits, 32Mi of memory.
    pub fn guaranteed(cpu: &str) -> Self {
        Self {
            cpu: cpu.into(),
            memory: "32Mi".into(),
            limits: true,
            extended: Vec::new(),
        }
    }

    /// Burstable: a memory request, no CPU request and no limits (it takes no allocatable CPU,
    /// so it fits beside a pinned container on a node with one CPU left after the reserved).
    pub fn burstable() -> Self {
        Self {
            cpu: String::new(),
            memory: "16Mi".into(),
            limits: false,
            extended: Vec::new(),
        }
    }

    fn to_json(&self) -> Value {
        let mut requests = json!({"memory": self.memory});
        if !self.cpu.is_empty() {
            requests["cpu"] = json!(self.cpu);
        }
        for (name, n) in &self.extended {
            requests[name] = json!(n.to_string());
        }
        if self.limits {
            json!({"requests": requests.clone(), "limits": requests})
        } else {
            let mut limits = json!({});
            for (name, n) in &self.extended {
                limits[name] = json!(n.to_string());
            }
            if self.extended.is_empty() {
                json!({"requests": requests})
            } else {
                json!({"requests": requests, "limits": limits})
            }
        }
    }
}

/// One container of a test pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// Container name.
    pub name: String,
    /// Its resources.
    pub resources: Resources,
}

/// A test pod, bound to a node by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestPod {
    /// Pod name.
    pub name: String,
    /// Init containers (they print their CPUs and exit).
    pub init: Vec<Container>,
    /// App containers (they run until the pod is deleted).
    pub containers: Vec<Container>,
}

impl TestPod {
    /// A pod with one app container `app`.
    pub fn single(name: &str, resources: Resources) -> Self {
        Self {
            name: name.into(),
            init: Vec::new(),
            containers: vec![Container {
                name: "app".into(),
                resources,
            }],
        }
    }

    /// Every container name, init containers first.
    pub fn container_names(&self) -> Vec<String> {
        self.init
            .iter()
            .chain(&self.containers)
            .map(|c| c.name.clone())
            .collect()
    }

    /// The manifest, in `namespace`, bound to `node`.
    pub fn manifest(&self, namespace: &str, node: &str, workload: &Workload) -> Value {
        let container = |c: &Container, command: &[String]| {
            json!({
                "name": c.name,
                "image": workload.image,
                "imagePullPolicy": workload.pull_policy,
                "command": command,
                "resources": c.resources.to_json(),
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "runAsNonRoot": true,
                    "runAsUser": 65534,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"}
                }
            })
        };
        let init: Vec<Value> = self
            .init
            .iter()
            .map(|c| container(c, &workload.print_and_exit))
            .collect();
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|c| container(c, &workload.run))
            .collect();
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/part-of": "nodetopo-e2e"}
            },
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "enableServiceLinks": false,
                "automountServiceAccountToken": false,
                "initContainers": init,
                "containers": containers
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> Workload {
        Workload {
            image: "img".into(),
            pull_policy: "Never".into(),
            run: vec!["/w".into(), "workload".into()],
            print_and_exit: vec!["/w".into(), "affinity".into()],
        }
    }

    #[test]
    fn guaranteed_pods_have_equal_requests_and_limits_with_devices() {
        let mut r = Resources::guaranteed("1");
        r.extended.push(("example.com/dev".into(), 1));
        let pod = TestPod::single("p", r);
        let m = pod.manifest("ns", "node-a", &workload());
        let res = &m["spec"]["containers"][0]["resources"];
        assert_eq!(res["requests"], res["limits"]);
        assert_eq!(res["requests"]["example.com/dev"], "1");
        assert_eq!(res["requests"]["cpu"], "1");
        assert_eq!(m["spec"]["nodeName"], "node-a");
        assert_eq!(m["spec"]["containers"][0]["command"][1], "workload");
    }

    #[test]
    fn burstable_pods_have_no_cpu_limit_and_init_containers_print_and_exit() {
        let mut pod = TestPod::single("b", Resources::burstable());
        pod.init.push(Container {
            name: "init".into(),
            resources: Resources::guaranteed("1"),
        });
        let m = pod.manifest("ns", "n", &workload());
        assert!(m["spec"]["containers"][0]["resources"]
            .get("limits")
            .is_none());
        assert_eq!(m["spec"]["initContainers"][0]["command"][1], "affinity");
        assert_eq!(pod.container_names(), vec!["init", "app"]);
    }
}
