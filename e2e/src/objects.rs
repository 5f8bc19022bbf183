//! Reading nodetopo objects the way a user would, by the published shapes of DESIGN.md.
//!
//! The suite reads NodeTopology and NodeResourcePolicy objects as JSON (kube
//! `DynamicObject`), through the field paths DESIGN.md promises to keep ("more fields may be
//! added, none of these renamed"), rather than through the Rust types: an e2e test should
//! fail when the published contract changes, not compile its way around it. Everything here
//! is pure, so it is unit-tested without a cluster.

use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use nodetopo_engine::CpuSet;
use serde_json::{json, Value};

/// API group of both kinds.
pub const GROUP: &str = "nodetopo.io";
/// API version of both kinds.
pub const VERSION: &str = "v1alpha1";
/// Field manager of the suite's own writes.
pub const FIELD_MANAGER: &str = "nodetopo-e2e";

/// The NodeTopology resource (cluster-scoped).
pub fn node_topology_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, "NodeTopology"),
        "nodetopologies",
    )
}

/// The NodeResourcePolicy resource (cluster-scoped).
pub fn node_resource_policy_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, "NodeResourcePolicy"),
        "noderesourcepolicies",
    )
}

/// A published object that does not have the shape DESIGN.md promises.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{object}: field {path}: {problem}")]
pub struct ShapeError {
    /// Kind/name of the object.
    pub object: String,
    /// JSON pointer of the field.
    pub path: String,
    /// What is wrong there.
    pub problem: String,
}

/// One published per-container allocation (`status.allocations[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// Exclusive CPUs.
    pub cpus: CpuSet,
    /// NUMA node ids the CPUs lie on.
    pub numa_nodes: Vec<u64>,
}

/// A `meta/v1` Condition, reduced to what the suite checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// Condition type, e.g. `Ready`, `KubeletAgreement`.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Generation the condition was computed for, if set.
    pub observed_generation: Option<i64>,
}

/// The parts of a NodeTopology the suite checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyView {
    /// Object (and node) name.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `spec.cpuManager.policy` (`none` | `static`).
    pub cpu_policy: Option<String>,
    /// `spec.topologyManager.policy`.
    pub tm_policy: Option<String>,
    /// `spec.policyRef` (policy name, policy generation), absent when no policy matches.
    pub policy_ref: Option<(String, i64)>,
    /// `status.observedGeneration`: the spec generation the agent applied.
    pub observed_generation: Option<i64>,
    /// `status.topology.cpus`: online CPUs (None until the agent has published).
    pub cpus: Option<CpuSet>,
    /// `status.pools.exclusive`.
    pub exclusive: CpuSet,
    /// `status.allocations`.
    pub allocations: Vec<Allocation>,
    /// `status.conditions`.
    pub conditions: Vec<Condition>,
    /// `status.kubelet.source` (`PodResources`, `Checkpoint`, `None`), when published.
    pub kubelet_source: Option<String>,
    /// `status.kubelet.defaultCPUSet`, when published.
    pub kubelet_default: Option<CpuSet>,
    /// `status.kubelet.assignments` (pod is `namespace/name`, or empty when unknown).
    pub kubelet_assignments: Vec<Allocation>,
}

fn field<'a>(v: &'a Value, pointer: &str) -> Option<&'a Value> {
    v.pointer(pointer).filter(|x| !x.is_null())
}

/// Typed reads of one object's JSON by pointer, with errors naming the object and field.
struct Reader<'a> {
    v: &'a Value,
    object: String,
}

impl Reader<'_> {
    /// A shape error at `path`.
    fn err(&self, path: &str, problem: String) -> ShapeError {
        ShapeError {
            object: self.object.clone(),
            path: path.to_string(),
            problem,
        }
    }

    /// The string at `path` (`None`: absent or null; an error for another type).
    fn string_at(&self, path: &str) -> Result<Option<String>, ShapeError> {
        match field(self.v, path) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.err(path, format!("expected a string, found {other}"))),
        }
    }

    /// The integer at `path` (`None`: absent or null; an error for another type).
    fn int_at(&self, path: &str) -> Result<Option<i64>, ShapeError> {
        match field(self.v, path) {
            None => Ok(None),
            Some(x) => x
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.err(path, format!("expected an integer, found {x}"))),
        }
    }

    /// The CPU list at `path` (`None`: absent or null; an error for a malformed list).
    fn cpus_at(&self, path: &str) -> Result<Option<CpuSet>, ShapeError> {
        match self.string_at(path)? {
            None => Ok(None),
            Some(s) => CpuSet::parse(&s)
                .map(Some)
                .map_err(|e| self.err(path, format!("bad CPU list {s:?}: {e}"))),
        }
    }

    /// The number of entries of the list at `path` (0 when absent or null; an error when it
    /// is not a list).
    fn list_len(&self, path: &str) -> Result<usize, ShapeError> {
        match field(self.v, path) {
            None => Ok(0),
            Some(list) => list
                .as_array()
                .map(Vec::len)
                .ok_or_else(|| self.err(path, "expected a list".to_string())),
        }
    }

    /// `status.allocations`: pod, container and CPUs required, NUMA ids optional.
    fn allocations(&self) -> Result<Vec<Allocation>, ShapeError> {
        let mut allocations = Vec::new();
        for i in 0..self.list_len("/status/allocations")? {
            let base = format!("/status/allocations/{i}");
            let req = |f: &str| -> Result<String, ShapeError> {
                self.string_at(&format!("{base}/{f}"))?
                    .ok_or_else(|| self.err(&format!("{base}/{f}"), "missing".to_string()))
            };
            let cpus_path = format!("{base}/cpus");
            let cpus = self
                .cpus_at(&cpus_path)?
                .ok_or_else(|| self.err(&cpus_path, "missing".to_string()))?;
            let numa_nodes = match field(self.v, &format!("{base}/numaNodes")) {
                None => Vec::new(),
                Some(x) => x
                    .as_array()
                    .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
                    .ok_or_else(|| {
                        self.err(
                            &format!("{base}/numaNodes"),
                            format!("expected a list of ids, found {x}"),
                        )
                    })?,
            };
            allocations.push(Allocation {
                pod: req("pod")?,
                container: req("container")?,
                cpus,
                numa_nodes,
            });
        }
        Ok(allocations)
    }

    /// `status.kubelet.assignments`: (`namespace/name` or empty, container, CPUs).
    fn kubelet_assignments(&self) -> Result<Vec<Allocation>, ShapeError> {
        let mut out = Vec::new();
        for i in 0..self.list_len("/status/kubelet/assignments")? {
            let base = format!("/status/kubelet/assignments/{i}");
            let cpus_path = format!("{base}/cpus");
            out.push(Allocation {
                pod: self.string_at(&format!("{base}/pod"))?.unwrap_or_default(),
                container: self
                    .string_at(&format!("{base}/container"))?
                    .unwrap_or_default(),
                cpus: self
                    .cpus_at(&cpus_path)?
                    .ok_or_else(|| self.err(&cpus_path, "missing".to_string()))?,
                numa_nodes: Vec::new(),
            });
        }
        Ok(out)
    }

    /// `status.conditions`: absent string fields read as empty.
    fn conditions(&self) -> Result<Vec<Condition>, ShapeError> {
        let mut conditions = Vec::new();
        for i in 0..self.list_len("/status/conditions")? {
            let base = format!("/status/conditions/{i}");
            let s = |f: &str| -> Result<String, ShapeError> {
                Ok(self.string_at(&format!("{base}/{f}"))?.unwrap_or_default())
            };
            conditions.push(Condition {
                type_: s("type")?,
                status: s("status")?,
                reason: s("reason")?,
                message: s("message")?,
                observed_generation: self.int_at(&format!("{base}/observedGeneration"))?,
            });
        }
        Ok(conditions)
    }
}

impl TopologyView {
    /// Reads a NodeTopology object. Missing optional parts (no status yet) are `None`/empty;
    /// present parts with the wrong type or a malformed CPU list are errors naming the field.
    pub fn from_object(obj: &DynamicObject) -> Result<Self, ShapeError> {
        let name = obj.metadata.name.clone().unwrap_or_default();
        let r = Reader {
            v: &obj.data,
            object: format!("NodeTopology/{name}"),
        };
        let policy_ref = match (
            r.string_at("/spec/policyRef/name")?,
            r.int_at("/spec/policyRef/generation")?,
        ) {
            (Some(n), Some(g)) => Some((n, g)),
            _ => None,
        };
        let allocations = r.allocations()?;
        let conditions = r.conditions()?;
        let kubelet_assignments = r.kubelet_assignments()?;
        Ok(Self {
            kubelet_source: r.string_at("/status/kubelet/source")?,
            kubelet_default: r.cpus_at("/status/kubelet/defaultCPUSet")?,
            kubelet_assignments,
            generation: obj.metadata.generation.unwrap_or(0),
            cpu_policy: r.string_at("/spec/cpuManager/policy")?,
            tm_policy: r.string_at("/spec/topologyManager/policy")?,
            policy_ref,
            observed_generation: r.int_at("/status/observedGeneration")?,
            cpus: r.cpus_at("/status/topology/cpus")?,
            exclusive: r.cpus_at("/status/pools/exclusive")?.unwrap_or_default(),
            allocations,
            conditions,
            name,
        })
    }

    /// The agent has published a topology and applied the current spec generation.
    pub fn caught_up(&self) -> Result<(), String> {
        if self.cpus.is_none() {
            return Err(format!(
                "{}: no status.topology yet (agent not publishing)",
                self.name
            ));
        }
        match self.observed_generation {
            Some(g) if g == self.generation => Ok(()),
            other => Err(format!(
                "{}: status.observedGeneration {:?} != metadata.generation {}",
                self.name, other, self.generation
            )),
        }
    }

    /// The allocation of `pod` (`namespace/name`) / `container`, if published.
    pub fn allocation(&self, pod: &str, container: &str) -> Option<&Allocation> {
        self.allocations
            .iter()
            .find(|a| a.pod == pod && a.container == container)
    }

    /// The condition of type `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Union of every published allocation's CPUs.
    pub fn allocated_cpus(&self) -> CpuSet {
        self.allocations
            .iter()
            .fold(CpuSet::new(), |acc, a| acc.union(&a.cpus))
    }
}

/// The parts of a NodeResourcePolicy status the suite checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyView {
    /// Policy name.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// `status.matchedNodes`.
    pub matched_nodes: Option<i64>,
    /// `status.appliedNodes`.
    pub applied_nodes: Option<i64>,
    /// `status.conditions[type=Ready].status`.
    pub ready: Option<String>,
}

impl PolicyView {
    /// Reads a NodeResourcePolicy object.
    pub fn from_object(obj: &DynamicObject) -> Self {
        let v = &obj.data;
        let int = |p: &str| field(v, p).and_then(Value::as_i64);
        let ready = field(v, "/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter().find(|c| {
                    c.get("type").and_then(Value::as_str) == Some(nodetopo_crds::conditions::READY)
                })
            })
            .and_then(|c| c.get("status").and_then(Value::as_str))
            .map(str::to_string);
        Self {
            name: obj.metadata.name.clone().unwrap_or_default(),
            generation: obj.metadata.generation.unwrap_or(0),
            observed_generation: int("/status/observedGeneration"),
            matched_nodes: int("/status/matchedNodes"),
            applied_nodes: int("/status/appliedNodes"),
            ready,
        }
    }

    /// The operator has rolled the current generation out to `expected_nodes` nodes and says Ready.
    pub fn rolled_out(&self, expected_nodes: usize) -> Result<(), String> {
        let n = i64::try_from(expected_nodes).unwrap_or(i64::MAX);
        if self.observed_generation != Some(self.generation) {
            return Err(format!(
                "policy {}: status.observedGeneration {:?} != generation {}",
                self.name, self.observed_generation, self.generation
            ));
        }
        if self.matched_nodes != Some(n) || self.applied_nodes != Some(n) {
            return Err(format!(
                "policy {}: matchedNodes {:?}, appliedNodes {:?}, want {n} each",
                self.name, self.matched_nodes, self.applied_nodes
            ));
        }
        if self.ready.as_deref() != Some("True") {
            return Err(format!(
                "policy {}: Ready condition is {:?}, want \"True\"",
                self.name, self.ready
            ));
        }
        Ok(())
    }
}

/// The suite's NodeResourcePolicy: static CPU manager with CPU 0 reserved (as the kind
/// kubelets are configured, so the agent's predictions and the kubelet's pinning can agree)
/// and the given topology manager policy, on the nodes carrying `label`. `apply`: with
/// `spec.rollout.mode: Apply` (the agents make their kubelets run it), else the default
/// (Observe: reported, never applied). `strict`: with the CPU manager option
/// `strict-cpu-reservation` (the reserved CPU leaves the shared pool too).
pub fn policy_manifest(
    name: &str,
    label: (&str, &str),
    tm_policy: &str,
    apply: bool,
    strict: bool,
) -> Value {
    let mut manifest = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "NodeResourcePolicy",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {label.0: label.1}},
            "priority": 10,
            "cpuManager": {"policy": "static", "reservedSystemCPUs": "0"},
            "topologyManager": {"policy": tm_policy, "scope": "container"}
        }
    });
    if strict {
        manifest["spec"]["cpuManager"]["options"] = json!({"strict-cpu-reservation": "true"});
    }
    if apply {
        manifest["spec"]["rollout"] = json!({"mode": "Apply", "progressDeadlineSeconds": 300});
    }
    manifest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(data: Value) -> DynamicObject {
        let mut obj = DynamicObject::new("kind-worker", &node_topology_resource()).data(data);
        obj.metadata.generation = Some(3);
        obj
    }

    fn published() -> Value {
        json!({
            "spec": {
                "cpuManager": {"policy": "static", "reservedSystemCPUs": "0"},
                "topologyManager": {"policy": "best-effort", "scope": "container"},
                "policyRef": {"name": "e2e", "generation": 2}
            },
            "status": {
                "observedGeneration": 3,
                "topology": {"cpus": "0-7"},
                "pools": {"reserved": "0", "shared": "0,3-7", "exclusive": "1-2", "free": "3-7"},
                "allocations": [{
                    "pod": "nodetopo-e2e/g-0", "podUID": "u1", "container": "app",
                    "cpus": "1-2", "numaNodes": [0], "uncoreCaches": [0],
                    "aligned": {"physicalCPU": true}, "hint": {"numaNodes": [0], "preferred": true}
                }],
                "conditions": [{"type": "KubeletAgreement", "status": "True", "reason": "Agree",
                                "message": "", "observedGeneration": 3}]
            }
        })
    }

    #[test]
    fn reads_the_published_shape() {
        let v = TopologyView::from_object(&topology(published())).unwrap();
        assert_eq!(v.name, "kind-worker");
        assert_eq!(v.cpu_policy.as_deref(), Some("static"));
        assert_eq!(v.tm_policy.as_deref(), Some("best-effort"));
        assert_eq!(v.policy_ref, Some(("e2e".to_string(), 2)));
        assert_eq!(v.cpus, Some(CpuSet::parse("0-7").unwrap()));
        assert_eq!(v.exclusive, CpuSet::parse("1-2").unwrap());
        let a = v.allocation("nodetopo-e2e/g-0", "app").unwrap();
        assert_eq!(a.cpus, CpuSet::parse("1,2").unwrap());
        assert_eq!(a.numa_nodes, vec![0]);
        assert!(v.allocation("nodetopo-e2e/g-0", "other").is_none());
        assert_eq!(v.condition("KubeletAgreement").unwrap().status, "True");
        assert_eq!(v.allocated_cpus(), CpuSet::parse("1-2").unwrap());
        assert_eq!(v.caught_up(), Ok(()));
    }

    #[test]
    fn not_caught_up_says_why() {
        let v = TopologyView::from_object(&topology(json!({"spec": {}}))).unwrap();
        assert!(v.caught_up().unwrap_err().contains("no status.topology"));
        let mut data = published();
        data["status"]["observedGeneration"] = json!(2);
        let v = TopologyView::from_object(&topology(data)).unwrap();
        assert_eq!(
            v.caught_up().unwrap_err(),
            "kind-worker: status.observedGeneration Some(2) != metadata.generation 3"
        );
    }

    #[test]
    fn malformed_fields_are_named() {
        let mut data = published();
        data["status"]["allocations"][0]["cpus"] = json!("1-");
        let e = TopologyView::from_object(&topology(data)).unwrap_err();
        assert_eq!(e.object, "NodeTopology/kind-worker");
        assert_eq!(e.path, "/status/allocations/0/cpus");
        assert!(e.problem.contains("bad CPU list \"1-\""), "{e}");

        let mut data = published();
        data["status"]["observedGeneration"] = json!("3");
        let e = TopologyView::from_object(&topology(data)).unwrap_err();
        assert_eq!(e.path, "/status/observedGeneration");

        let mut data = published();
        data["status"]["allocations"][0]
            .as_object_mut()
            .unwrap()
            .remove("container");
        let e = TopologyView::from_object(&topology(data)).unwrap_err();
        assert_eq!(e.path, "/status/allocations/0/container");
        assert_eq!(e.problem, "missing");
    }

    #[test]
    fn policy_roll_out() {
        let mut obj =
            DynamicObject::new("e2e", &node_resource_policy_resource()).data(json!({"status": {
                "observedGeneration": 2, "matchedNodes": 2, "appliedNodes": 1,
                "conditions": [{"type": "Ready", "status": "False"}]
            }}));
        obj.metadata.generation = Some(2);
        let p = PolicyView::from_object(&obj);
        assert!(p
            .rolled_out(2)
            .unwrap_err()
            .contains("appliedNodes Some(1)"));
        obj.data["status"]["appliedNodes"] = json!(2);
        let p = PolicyView::from_object(&obj);
        assert!(p.rolled_out(2).unwrap_err().contains("Ready condition"));
        obj.data["status"]["conditions"][0]["status"] = json!("True");
        assert_eq!(PolicyView::from_object(&obj).rolled_out(2), Ok(()));
        obj.metadata.generation = Some(3);
        assert!(PolicyView::from_object(&obj)
            .rolled_out(2)
            .unwrap_err()
            .contains("!= generation 3"));
    }

    #[test]
    fn manifests() {
        let p = policy_manifest(
            "e2e",
            ("nodetopo.io/e2e", "true"),
            "restricted",
            false,
            false,
        );
        assert!(p["spec"].get("rollout").is_none());
        let a = policy_manifest("e2e", ("nodetopo.io/e2e", "true"), "restricted", true, true);
        assert_eq!(a["spec"]["rollout"]["mode"], "Apply");
        assert_eq!(
            a["spec"]["cpuManager"]["options"]["strict-cpu-reservation"],
            "true"
        );
        assert_eq!(p["spec"]["topologyManager"]["policy"], "restricted");
        assert_eq!(
            p["spec"]["nodeSelector"]["matchLabels"]["nodetopo.io/e2e"],
            "true"
        );
    }

    #[test]
    fn policy_manifest_is_a_valid_node_resource_policy() {
        // The manifest must deserialize into the real API type and pass the same rules the
        // API server's CEL and the operator apply; a drift in ops' types fails here, not
        // only on a cluster.
        for tm in ["best-effort", "restricted"] {
            for apply in [false, true] {
                let manifest =
                    policy_manifest("e2e", ("nodetopo.io/e2e", "true"), tm, apply, apply);
                let policy: nodetopo_crds::NodeResourcePolicy =
                    serde_json::from_value(manifest).unwrap();
                let errors = nodetopo_crds::validation::validate_policy_spec(&policy.spec);
                assert!(
                    errors.is_empty(),
                    "{}",
                    nodetopo_crds::validation::join(&errors)
                );
            }
        }
        assert_eq!(GROUP, nodetopo_crds::GROUP);
        assert_eq!(VERSION, nodetopo_crds::VERSION);
    }

    #[test]
    fn the_view_reads_what_the_crd_types_serialize() {
        // A NodeTopology as the agent's Rust types would publish it, read back by the view.
        let typed: nodetopo_crds::NodeTopology = serde_json::from_value(json!({
            "apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeTopology",
            "metadata": {"name": "kind-worker", "generation": 3},
            "spec": published()["spec"].clone(),
        }))
        .unwrap();
        let obj: DynamicObject =
            serde_json::from_value(serde_json::to_value(&typed).unwrap()).unwrap();
        let v = TopologyView::from_object(&obj).unwrap();
        assert_eq!(v.policy_ref, Some(("e2e".to_string(), 2)));
        assert_eq!(v.cpu_policy.as_deref(), Some("static"));
        assert_eq!(v.tm_policy.as_deref(), Some("best-effort"));
    }
}
