//! Pods into engine pods, and Pod YAML (Pods or workload templates) into Pods.
//!
//! [`engine_pod`] converts a pod's fields as placement reads them ([`PodFields`], borrowed
//! from YAML here or from the API server's Pod in the agent). It applies what the API server would have done before the kubelet sees a pod
//! (a limit without a request means request = limit) and parses every quantity exactly
//! (CPU in millicores, memory and huge pages in bytes, extended resources as whole counts).
//! [`pods_from_yaml`] reads multi-document YAML as `kubectl apply -f` would and turns every
//! workload into the Pods its controller would create.

use std::collections::BTreeMap;

use fields::ContainerFields;
pub use fields::PodFields;
use manifest::{ObjectMeta, Pod as K8sPod, PodSpec};
use nodetopo_engine::quantity::{self, QuantityError};
use nodetopo_engine::{Container, Pod, ResourceList};
use serde::Deserialize;
use serde_yaml::Value;

pub mod fields;
pub mod manifest;

/// Why a Pod (or a YAML document) could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    /// A YAML document does not parse.
    #[error("YAML document {doc}: {message}")]
    Yaml {
        /// 1-based document index in the input.
        doc: usize,
        /// The parser's message (with line/column).
        message: String,
    },
    /// A document of a kind that has no pod template.
    #[error("YAML document {doc}: kind {kind:?} is not a Pod, Deployment, StatefulSet, DaemonSet, Job, ReplicaSet or List")]
    UnsupportedKind {
        /// 1-based document index.
        doc: usize,
        /// The document's `kind` (empty when missing).
        kind: String,
    },
    /// A required field is missing.
    #[error("pod {pod}: missing {field}")]
    Missing {
        /// `namespace/name` (or what is known of it).
        pod: String,
        /// The field path.
        field: &'static str,
    },
    /// A resource quantity does not parse or is out of range.
    #[error("pod {pod} container {container}: resources.{kind}.{resource}: {source}")]
    Quantity {
        /// `namespace/name`.
        pod: String,
        /// Container name.
        container: String,
        /// `requests` or `limits`.
        kind: &'static str,
        /// Resource name, e.g. `cpu`.
        resource: String,
        /// The quantity error (names the string); boxed to keep the error small.
        source: Box<QuantityError>,
    },
    /// The input expands to more pods than [`MAX_PODS`].
    #[error("YAML document {doc}: {what} would make {total} pods; at most {MAX_PODS} are accepted per input")]
    TooManyPods {
        /// 1-based document index.
        doc: usize,
        /// The object that went over (`Deployment web with replicas 100000000`).
        what: String,
        /// Pods the input would hold with it.
        total: u64,
    },
    /// Two containers of the pod share a name.
    #[error("pod {pod}: duplicate container name {container:?}")]
    DuplicateContainer {
        /// `namespace/name`.
        pod: String,
        /// The repeated name.
        container: String,
    },
}

/// The most pods one YAML input (a `plan --pods` file, one file of the local pods directory)
/// may expand to. A node runs at most a few hundred pods (the kubelet's `maxPods` defaults to
/// 110); the bound keeps a `replicas: 100000000` from allocating gigabytes before anything
/// can say no. Each pod costs a few kilobytes, so the bound is a few tens of megabytes.
pub const MAX_PODS: usize = 10_000;

/// The largest pod YAML file read (a ConfigMap holds at most 1 MiB).
pub const MAX_POD_FILE_BYTES: u64 = 4 << 20;

/// Reads a pod YAML file: a regular file of at most [`MAX_POD_FILE_BYTES`] (a FIFO, device
/// or runaway file is an error, never a hang or an unbounded read). The caller names the
/// file in its context.
pub fn read_pod_file(path: &std::path::Path) -> anyhow::Result<String> {
    nodetopo_engine::files::read_text_bounded(path, MAX_POD_FILE_BYTES)
        .map_err(|e| anyhow::anyhow!("the file {e}"))
}

/// The namespace used when a Pod names none, as `kubectl` does with no context namespace.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Converts a pod's fields ([`PodFields`], borrowed from YAML or from the API's Pod) into
/// the engine's pod.
///
/// The UID is `metadata.uid`, or `namespace/name` when the pod has none (YAML written by
/// hand, or `plan` input): that is unique on a node, which is all the engine needs.
pub fn engine_pod<'a>(p: &PodFields<'a>) -> Result<Pod, PodError> {
    let namespace = p.namespace.unwrap_or(DEFAULT_NAMESPACE);
    let name = p.name.ok_or_else(|| PodError::Missing {
        pod: format!("{namespace}/<unnamed>"),
        field: "metadata.name",
    })?;
    let key = format!("{namespace}/{name}");
    let spec = p.spec.as_ref().ok_or_else(|| PodError::Missing {
        pod: key.clone(),
        field: "spec",
    })?;
    let uid = p.uid.map_or_else(|| key.clone(), str::to_string);
    let mut seen = std::collections::BTreeSet::new();
    let mut convert =
        |cs: &[ContainerFields<'a>], init: bool| -> Result<Vec<Container>, PodError> {
            cs.iter()
                .map(|c| {
                    if !seen.insert(c.name) {
                        return Err(PodError::DuplicateContainer {
                            pod: key.clone(),
                            container: c.name.to_string(),
                        });
                    }
                    container(&key, c, init)
                })
                .collect()
        };
    let init_containers = convert(&spec.init_containers, true)?;
    let containers = convert(&spec.containers, false)?;
    Ok(Pod {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid,
        init_containers,
        containers,
    })
}

fn container(pod: &str, c: &ContainerFields, init: bool) -> Result<Container, PodError> {
    // API-server defaulting: every limit without a request becomes the request.
    let mut requests_eff = c.requests.clone();
    for (&k, &v) in &c.limits {
        requests_eff.entry(k).or_insert(v);
    }
    let list = |m: &BTreeMap<&str, &str>, kind: &'static str| {
        resource_list(m).map_err(|(resource, source)| PodError::Quantity {
            pod: pod.to_string(),
            container: c.name.to_string(),
            kind,
            resource,
            source: Box::new(source),
        })
    };
    // Limits first: a bad limit copied into the requests is reported where it was written.
    let limits = list(&c.limits, "limits")?;
    Ok(Container {
        name: c.name.to_string(),
        requests: list(&requests_eff, "requests")?,
        limits,
        restartable: init && c.restart_policy == Some("Always"),
    })
}

/// Whether a resource name is an extended resource (a device): fully qualified, outside the
/// `kubernetes.io` domains, and not a `requests.` quota name.
fn is_extended(name: &str) -> bool {
    name.contains('/')
        && !name.starts_with("requests.")
        && !name.starts_with("kubernetes.io/")
        && !name
            .split('/')
            .next()
            .is_some_and(|d| d.ends_with(".kubernetes.io"))
}

fn resource_list(m: &BTreeMap<&str, &str>) -> Result<ResourceList, (String, QuantityError)> {
    let mut out = ResourceList::default();
    for (&name, &s) in m {
        let err = |e| (name.to_string(), e);
        if name == "cpu" {
            out.cpu_millis = Some(quantity::parse_millis(s).map_err(err)?);
        } else if name == "memory" {
            out.memory_bytes = Some(quantity::parse_units(s).map_err(err)?);
        } else if let Some(size) = name.strip_prefix("hugepages-") {
            let size = quantity::parse_units(size).map_err(err)?;
            out.hugepages
                .insert(size, quantity::parse_units(s).map_err(err)?);
        } else if is_extended(name) {
            out.extended
                .insert(name.to_string(), quantity::parse_count(s).map_err(err)?);
        } else {
            // Other native resources (ephemeral-storage, ...) do not affect placement, but
            // a malformed amount is still an error rather than silently ignored.
            quantity::parse_units(s).map_err(err)?;
        }
    }
    Ok(out)
}

/// Reads multi-document YAML: Pods, workloads with a pod template (Deployment, StatefulSet,
/// DaemonSet, Job, ReplicaSet) and `List`s of these. Empty documents are skipped.
///
/// Workloads expand into the pods their controller would create on one node: `replicas`
/// pods (default 1) for Deployment/ReplicaSet/StatefulSet, named `<name>-<ordinal>`; one
/// for a DaemonSet; `parallelism` pods (default 1) for a Job. The pods take the workload's
/// namespace. Unquoted numbers in `resources` (`cpu: 2`) are accepted as quantities.
pub fn pods_from_yaml(text: &str) -> Result<Vec<K8sPod>, PodError> {
    let mut out = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let doc = i + 1;
        let value = Value::deserialize(de).map_err(|e| PodError::Yaml {
            doc,
            message: e.to_string(),
        })?;
        if value.is_null() {
            continue;
        }
        collect(value, doc, &mut out)?;
    }
    Ok(out)
}

fn collect(mut value: Value, doc: usize, out: &mut Vec<K8sPod>) -> Result<(), PodError> {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let yaml_err = |e: serde_yaml::Error| PodError::Yaml {
        doc,
        message: format!("{kind}: {e}"),
    };
    stringify_quantities(&mut value);
    match kind.as_str() {
        "Pod" => {
            if out.len() >= MAX_PODS {
                return Err(PodError::TooManyPods {
                    doc,
                    what: "one more Pod".into(),
                    total: out.len() as u64 + 1,
                });
            }
            out.push(serde_yaml::from_value(value).map_err(yaml_err)?)
        }
        "List" => {
            if let Some(Value::Sequence(items)) = value.get("items") {
                for item in items.clone() {
                    collect(item, doc, out)?;
                }
            }
        }
        "Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet" | "Job" => {
            #[derive(Deserialize)]
            struct Workload {
                #[serde(default)]
                metadata: ObjectMeta,
                spec: WorkloadSpec,
            }
            #[derive(Deserialize)]
            struct WorkloadSpec {
                replicas: Option<i64>,
                parallelism: Option<i64>,
                template: Template,
            }
            #[derive(Deserialize)]
            struct Template {
                #[serde(default)]
                metadata: ObjectMeta,
                spec: PodSpec,
            }
            let w: Workload = serde_yaml::from_value(value).map_err(yaml_err)?;
            let count = match kind.as_str() {
                "DaemonSet" => 1,
                "Job" => w.spec.parallelism.unwrap_or(1),
                _ => w.spec.replicas.unwrap_or(1),
            }
            .max(0);
            let base = w.metadata.name.clone().ok_or(PodError::Missing {
                pod: format!("{kind} in YAML document {doc}"),
                field: "metadata.name",
            })?;
            let total = (out.len() as u64).saturating_add(count as u64);
            if total > MAX_PODS as u64 {
                let field = if kind == "Job" {
                    "parallelism"
                } else {
                    "replicas"
                };
                return Err(PodError::TooManyPods {
                    doc,
                    what: format!("{kind} {base} with {field} {count}"),
                    total,
                });
            }
            for ordinal in 0..count {
                let mut meta = w.spec.template.metadata.clone();
                meta.name = Some(format!("{base}-{ordinal}"));
                meta.namespace = w.metadata.namespace.clone().or(meta.namespace);
                meta.uid = None;
                out.push(K8sPod {
                    metadata: meta,
                    spec: Some(w.spec.template.spec.clone()),
                    status: None,
                });
            }
        }
        _ => return Err(PodError::UnsupportedKind { doc, kind }),
    }
    Ok(())
}

/// Turns numbers under `requests`, `limits` and `overhead` maps into strings, since the
/// Quantity type only accepts strings but YAML authors write `cpu: 2`.
fn stringify_quantities(v: &mut Value) {
    match v {
        Value::Mapping(m) => {
            for (k, child) in m.iter_mut() {
                let is_qty_map = matches!(k.as_str(), Some("requests" | "limits" | "overhead"));
                if is_qty_map {
                    if let Value::Mapping(q) = child {
                        for (_, amount) in q.iter_mut() {
                            if let Value::Number(n) = amount {
                                *amount = Value::String(n.to_string());
                            }
                        }
                    }
                }
                stringify_quantities(child);
            }
        }
        Value::Sequence(s) => s.iter_mut().for_each(stringify_quantities),
        Value::Tagged(t) => stringify_quantities(&mut t.value),
        _ => {}
    }
}

/// Reads pod YAML files into engine pods.
pub fn read_pod_files(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<nodetopo_engine::Pod>> {
    use anyhow::Context as _;
    let mut out = Vec::new();
    for path in paths {
        let text =
            read_pod_file(path).with_context(|| format!("reading --pods {}", path.display()))?;
        for k in
            pods_from_yaml(&text).with_context(|| format!("reading --pods {}", path.display()))?
        {
            out.push(
                engine_pod(&k.fields())
                    .with_context(|| format!("reading --pods {}", path.display()))?,
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: prod, uid: u-1, creationTimestamp: "2024-05-01T10:00:00Z"}
spec:
  initContainers:
  - name: setup
    resources: {limits: {cpu: "1", memory: 1Gi}}
  - name: sidecar
    restartPolicy: Always
    resources: {limits: {cpu: 500m, memory: 64Mi}}
  containers:
  - name: app
    resources:
      requests: {cpu: 2}
      limits: {cpu: 2, memory: 2Gi, hugepages-2Mi: 1Gi, example.com/nic: 1, ephemeral-storage: 1G}
"#;

    #[test]
    fn converts_with_defaulting() {
        let pods = pods_from_yaml(POD).expect("parses");
        assert_eq!(pods.len(), 1);
        let p = engine_pod(&pods[0].fields()).expect("converts");
        assert_eq!(p.key(), "prod/web-0");
        assert_eq!(p.uid, "u-1");
        assert_eq!(p.init_containers.len(), 2);
        assert!(!p.init_containers[0].restartable);
        assert!(p.init_containers[1].restartable);
        assert_eq!(p.init_containers[0].requests.cpu_millis, Some(1000));
        assert_eq!(p.init_containers[1].requests.memory_bytes, Some(64 << 20));
        let app = &p.containers[0];
        assert_eq!(app.requests.cpu_millis, Some(2000));
        assert_eq!(app.requests.memory_bytes, Some(2 << 30));
        assert_eq!(app.requests.hugepages.get(&(2 << 20)), Some(&(1 << 30)));
        assert_eq!(app.limits.extended.get("example.com/nic"), Some(&1));
        assert_eq!(app.requests.extended.get("example.com/nic"), Some(&1));
        assert_eq!(p.qos_class(), nodetopo_engine::QosClass::Guaranteed);
    }

    #[test]
    fn workloads_expand() {
        let y = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, resources: {limits: {cpu: 1, memory: 1Gi}}}]}
---
---
apiVersion: batch/v1
kind: Job
metadata: {name: j}
spec:
  parallelism: 2
  template: {spec: {containers: [{name: c}]}}
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Pod, metadata: {name: x}, spec: {containers: [{name: c}]}}
- apiVersion: apps/v1
  kind: DaemonSet
  metadata: {name: d}
  spec: {template: {spec: {containers: [{name: c}]}}}
"#;
        let pods = pods_from_yaml(y).expect("parses");
        let keys: Vec<String> = pods
            .iter()
            .map(|p| engine_pod(&p.fields()).expect("converts").key())
            .collect();
        assert_eq!(
            keys,
            [
                "shop/web-0",
                "shop/web-1",
                "shop/web-2",
                "default/j-0",
                "default/j-1",
                "default/x",
                "default/d-0"
            ]
        );
        assert_eq!(engine_pod(&pods[0].fields()).expect("ok").uid, "shop/web-0");
    }

    #[test]
    fn errors_name_the_problem() {
        let bad_qty = POD.replace("cpu: 500m", "cpu: 5x");
        let e =
            engine_pod(&pods_from_yaml(&bad_qty).expect("yaml ok")[0].fields()).expect_err("bad");
        assert_eq!(
            e.to_string(),
            "pod prod/web-0 container sidecar: resources.limits.cpu: invalid quantity \"5x\": unknown suffix"
        );
        let e = pods_from_yaml("kind: Service\nmetadata: {name: s}\n").expect_err("kind");
        assert!(e.to_string().contains("\"Service\""), "{e}");
        let e = pods_from_yaml("kind: Pod\nmetadata: {name: [\n").expect_err("yaml");
        assert!(e.to_string().starts_with("YAML document 1"), "{e}");
        let e = engine_pod(
            &pods_from_yaml("kind: Pod\nmetadata: {name: p}\n").expect("ok")[0].fields(),
        )
        .expect_err("no spec");
        assert_eq!(e.to_string(), "pod default/p: missing spec");
        let dup = "kind: Pod\nmetadata: {name: p}\nspec: {initContainers: [{name: a}], containers: [{name: a}]}\n";
        let e = engine_pod(&pods_from_yaml(dup).expect("ok")[0].fields()).expect_err("dup");
        assert_eq!(
            e.to_string(),
            "pod default/p: duplicate container name \"a\""
        );
        let huge = "kind: Deployment\nmetadata: {name: web}\nspec: {replicas: 100000000, template: {spec: {containers: [{name: a}]}}}\n";
        let e = pods_from_yaml(huge).expect_err("replicas");
        assert_eq!(
            e.to_string(),
            "YAML document 1: Deployment web with replicas 100000000 would make 100000000 pods; at most 10000 are accepted per input"
        );
        let at_bound = huge.replace("100000000", "10000");
        assert_eq!(
            pods_from_yaml(&at_bound).expect("at the bound").len(),
            MAX_PODS
        );
        let frac = "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {limits: {example.com/gpu: 500m}}}]}\n";
        let e = engine_pod(&pods_from_yaml(frac).expect("ok")[0].fields()).expect_err("frac");
        assert!(e.to_string().contains("must be a whole number"), "{e}");
    }
}
