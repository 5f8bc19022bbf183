//! The generated CRDs on a real apiserver: they apply and become Established, their printer
//! columns are served, and every CEL rule and every schema constraint of the specs has an
//! object the server accepts and one it rejects with a message naming the field.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

use crate::common::{control_plane, expect_rejected, install_crds, Expect};
use nodetopo_crds::rules;

/// Which kind a case is sent as.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kinds {
    Policy,
    Topology,
    Both,
}

/// One object: the constraint it exercises (`cel:<message>` or `<keyword>:<path>`), the spec,
/// and `None` (accepted) or `Some(field path)` (rejected with that field in the message).
struct Case {
    id: String,
    kinds: Kinds,
    spec: Value,
    rejected_at: Option<&'static str>,
}

fn cel(rule: rules::Rule) -> String {
    format!("cel:{}", rule.message)
}

fn schema_id(keyword: &str, path: &str) -> String {
    format!("{keyword}:{path}")
}

fn static_cpu(options: Value) -> Value {
    json!({"policy": "static", "reservedSystemCPUs": "0", "options": options})
}

fn spec(cpu: Value, tm: Value) -> Value {
    json!({"cpuManager": cpu, "topologyManager": tm})
}

fn tm(policy: &str) -> Value {
    json!({"policy": policy})
}

fn accept(id: String, kinds: Kinds, spec: Value) -> Case {
    Case {
        id,
        kinds,
        spec,
        rejected_at: None,
    }
}

fn reject(id: String, kinds: Kinds, spec: Value, field: &'static str) -> Case {
    Case {
        id,
        kinds,
        spec,
        rejected_at: Some(field),
    }
}

fn cases() -> Vec<Case> {
    use Kinds::*;
    let none = tm("none");
    let mut v = vec![
        accept(
            cel(rules::ALIGN_BY_SOCKET_SINGLE_NUMA),
            Both,
            spec(
                static_cpu(json!({"align-by-socket": "true"})),
                tm("best-effort"),
            ),
        ),
        reject(
            cel(rules::ALIGN_BY_SOCKET_SINGLE_NUMA),
            Both,
            spec(
                static_cpu(json!({"align-by-socket": "true"})),
                tm("single-numa-node"),
            ),
            "spec",
        ),
        accept(
            cel(rules::RESERVATION_EXCLUSIVE),
            Both,
            spec(json!({"policy": "static", "reservedCPUs": 2}), none.clone()),
        ),
        reject(
            cel(rules::RESERVATION_EXCLUSIVE),
            Both,
            spec(
                json!({"policy": "static", "reservedCPUs": 2, "reservedSystemCPUs": "0-1"}),
                none.clone(),
            ),
            "spec.cpuManager",
        ),
        accept(
            cel(rules::STATIC_NEEDS_RESERVATION),
            Both,
            spec(
                json!({"policy": "static", "reservedSystemCPUs": "0"}),
                none.clone(),
            ),
        ),
        reject(
            cel(rules::STATIC_NEEDS_RESERVATION),
            Both,
            spec(json!({"policy": "static", "reservedCPUs": 0}), none.clone()),
            "spec.cpuManager",
        ),
        accept(
            cel(rules::OPTIONS_NEED_STATIC),
            Both,
            spec(json!({"policy": "none"}), none.clone()),
        ),
        reject(
            cel(rules::OPTIONS_NEED_STATIC),
            Both,
            spec(
                json!({"policy": "none", "options": {"full-pcpus-only": "true"}}),
                none.clone(),
            ),
            "spec.cpuManager",
        ),
        accept(
            cel(rules::CPU_OPTIONS_KNOWN),
            Both,
            spec(static_cpu(json!({"full-pcpus-only": "true"})), none.clone()),
        ),
        reject(
            cel(rules::CPU_OPTIONS_KNOWN),
            Both,
            spec(static_cpu(json!({"fast-mode": "true"})), none.clone()),
            "spec.cpuManager.options",
        ),
        accept(
            cel(rules::CPU_OPTIONS_BOOLEAN),
            Both,
            spec(
                static_cpu(json!({"strict-cpu-reservation": "false"})),
                none.clone(),
            ),
        ),
        reject(
            cel(rules::CPU_OPTIONS_BOOLEAN),
            Both,
            spec(
                static_cpu(json!({"strict-cpu-reservation": "yes"})),
                none.clone(),
            ),
            "spec.cpuManager.options",
        ),
        accept(
            cel(rules::RESERVED_SYSTEM_CPUS_SYNTAX),
            Both,
            spec(
                json!({"policy": "static", "reservedSystemCPUs": "0,2,4-7"}),
                none.clone(),
            ),
        ),
        reject(
            cel(rules::RESERVED_SYSTEM_CPUS_SYNTAX),
            Both,
            spec(
                json!({"policy": "static", "reservedSystemCPUs": "0-"}),
                none.clone(),
            ),
            "spec.cpuManager.reservedSystemCPUs",
        ),
        accept(
            cel(rules::RESERVED_SYSTEM_CPUS_RANGES),
            Both,
            spec(
                json!({"policy": "static", "reservedSystemCPUs": "1-3"}),
                none.clone(),
            ),
        ),
        reject(
            cel(rules::RESERVED_SYSTEM_CPUS_RANGES),
            Both,
            spec(
                json!({"policy": "static", "reservedSystemCPUs": "3-1"}),
                none.clone(),
            ),
            "spec.cpuManager.reservedSystemCPUs",
        ),
        accept(
            cel(rules::TM_OPTIONS_KNOWN),
            Both,
            spec(
                json!({"policy": "none"}),
                json!({"policy": "restricted", "options": {"prefer-closest-numa-nodes": "true"}}),
            ),
        ),
        reject(
            cel(rules::TM_OPTIONS_KNOWN),
            Both,
            spec(
                json!({"policy": "none"}),
                json!({"policy": "restricted", "options": {"numa-magic": "true"}}),
            ),
            "spec.topologyManager.options",
        ),
        accept(
            cel(rules::TM_PREFER_CLOSEST_BOOLEAN),
            Both,
            spec(
                json!({"policy": "none"}),
                json!({"policy": "best-effort", "options": {"prefer-closest-numa-nodes": "false"}}),
            ),
        ),
        reject(
            cel(rules::TM_PREFER_CLOSEST_BOOLEAN),
            Both,
            spec(
                json!({"policy": "none"}),
                json!({"policy": "best-effort", "options": {"prefer-closest-numa-nodes": "1"}}),
            ),
            "spec.topologyManager.options",
        ),
        accept(
            cel(rules::TM_MAX_NUMA_NODES),
            Both,
            spec(
                json!({"policy": "none"}),
                json!({"policy": "best-effort", "options": {"max-allowable-numa-nodes": "16"}}),
            ),
        ),
        reject(
            cel(rules::TM_MAX_NUMA_NODES),
            Both,
            spec(
                json!({"policy": "none"}),
                json!({"policy": "best-effort", "options": {"max-allowable-numa-nodes": "7"}}),
            ),
            "spec.topologyManager.options",
        ),
    ];
    for (rule, (a, b)) in rules::CPU_OPTIONS_INCOMPATIBLE
        .iter()
        .zip(rules::INCOMPATIBLE_CPU_OPTIONS)
    {
        v.push(accept(
            cel(*rule),
            Both,
            spec(static_cpu(json!({a: "true", b: "false"})), none.clone()),
        ));
        v.push(reject(
            cel(*rule),
            Both,
            spec(static_cpu(json!({a: "true", b: "true"})), none.clone()),
            "spec.cpuManager.options",
        ));
    }
    // Rollout (NodeResourcePolicy only): maxUnavailable is a count of at least 1 or a
    // percentage from 1% to 100%; mode and eviction are enums.
    let rollout = |r: Value| json!({"rollout": r});
    let max_unavailable = || cel(nodetopo_crds::rollout::MAX_UNAVAILABLE_RULE);
    for ok in [
        json!(1),
        json!(40),
        json!("1%"),
        json!("25%"),
        json!("100%"),
    ] {
        v.push(accept(
            max_unavailable(),
            Policy,
            rollout(json!({"mode": "Apply", "maxUnavailable": ok})),
        ));
    }
    for bad in [
        json!(0),
        json!(-3),
        json!("0%"),
        json!("101%"),
        json!("5"),
        json!("x%"),
    ] {
        v.push(reject(
            max_unavailable(),
            Policy,
            rollout(json!({"maxUnavailable": bad})),
            "spec.rollout.maxUnavailable",
        ));
    }
    // progressDeadlineSeconds: from 1 to 604800 (CEL), an int32 (schema bounds).
    let deadline = || cel(nodetopo_crds::rollout::PROGRESS_DEADLINE_RULE);
    for ok in [1, 3, 600, 604_800] {
        v.push(accept(
            deadline(),
            Policy,
            rollout(json!({"mode": "Apply", "progressDeadlineSeconds": ok})),
        ));
    }
    for bad in [0, -1, 604_801] {
        v.push(reject(
            deadline(),
            Policy,
            rollout(json!({"progressDeadlineSeconds": bad})),
            "spec.rollout.progressDeadlineSeconds",
        ));
    }
    v.push(reject(
        schema_id("maximum", "spec.rollout.progressDeadlineSeconds"),
        Policy,
        rollout(json!({"progressDeadlineSeconds": 2147483648_i64})),
        "spec.rollout.progressDeadlineSeconds",
    ));
    v.push(reject(
        schema_id("minimum", "spec.rollout.progressDeadlineSeconds"),
        Policy,
        rollout(json!({"progressDeadlineSeconds": -2147483649_i64})),
        "spec.rollout.progressDeadlineSeconds",
    ));
    v.push(reject(
        schema_id("enum", "spec.rollout.mode"),
        Policy,
        rollout(json!({"mode": "Enforce"})),
        "spec.rollout.mode",
    ));
    v.push(reject(
        schema_id("enum", "spec.rollout.eviction"),
        Policy,
        rollout(json!({"eviction": "Always"})),
        "spec.rollout.eviction",
    ));
    let p = "spec";
    let schema = [
        (
            schema_id("enum", &format!("{p}.cpuManager.policy")),
            spec(json!({"policy": "dynamic"}), none.clone()),
            "spec.cpuManager.policy",
        ),
        (
            schema_id("enum", &format!("{p}.topologyManager.policy")),
            spec(json!({"policy": "none"}), tm("strict")),
            "spec.topologyManager.policy",
        ),
        (
            schema_id("enum", &format!("{p}.topologyManager.scope")),
            spec(
                json!({"policy": "none"}),
                json!({"policy": "none", "scope": "node"}),
            ),
            "spec.topologyManager.scope",
        ),
        (
            schema_id("minimum", &format!("{p}.cpuManager.reservedCPUs")),
            spec(json!({"policy": "none", "reservedCPUs": -1}), none.clone()),
            "spec.cpuManager.reservedCPUs",
        ),
        (
            schema_id("maximum", &format!("{p}.cpuManager.reservedCPUs")),
            spec(
                json!({"policy": "none", "reservedCPUs": 2147483648_i64}),
                none.clone(),
            ),
            "spec.cpuManager.reservedCPUs",
        ),
        (
            schema_id("maxLength", &format!("{p}.cpuManager.reservedSystemCPUs")),
            spec(
                json!({"policy": "static", "reservedSystemCPUs": vec!["1"; 129].join(",")}),
                none.clone(),
            ),
            "spec.cpuManager.reservedSystemCPUs",
        ),
        (
            schema_id("maxProperties", &format!("{p}.cpuManager.options")),
            spec(
                static_cpu(json!({"a": "true", "b": "true", "c": "true", "d": "true",
                                  "e": "true", "f": "true", "g": "true"})),
                none.clone(),
            ),
            "spec.cpuManager.options",
        ),
        (
            schema_id("maxLength", &format!("{p}.cpuManager.options{{}}")),
            spec(
                static_cpu(json!({"full-pcpus-only": "falsey"})),
                none.clone(),
            ),
            "spec.cpuManager.options",
        ),
        (
            schema_id("maxProperties", &format!("{p}.topologyManager.options")),
            spec(
                json!({"policy": "none"}),
                json!({"policy": "none", "options": {"prefer-closest-numa-nodes": "true",
                       "max-allowable-numa-nodes": "8", "other": "true"}}),
            ),
            "spec.topologyManager.options",
        ),
        (
            schema_id("maxLength", &format!("{p}.topologyManager.options{{}}")),
            spec(
                json!({"policy": "none"}),
                json!({"policy": "none", "options": {"max-allowable-numa-nodes": "000016"}}),
            ),
            "spec.topologyManager.options",
        ),
        (
            schema_id("required", &format!("{p}.cpuManager.policy")),
            spec(json!({"reservedCPUs": 1}), none.clone()),
            "spec.cpuManager.policy",
        ),
        (
            schema_id("required", &format!("{p}.topologyManager.policy")),
            spec(json!({"policy": "none"}), json!({"scope": "pod"})),
            "spec.topologyManager.policy",
        ),
    ];
    for (id, s, field) in schema {
        v.push(reject(id, Both, s, field));
    }
    let expr = |op: &str, values: Option<Value>| {
        let mut e = json!({"key": "pool", "operator": op});
        if let Some(v) = values {
            e["values"] = v;
        }
        json!({"nodeSelector": {"matchExpressions": [{"key": "zone", "operator": "Exists"}, e]}})
    };
    v.extend([
        accept(
            cel(rules::SELECTOR_VALUES_REQUIRED),
            Policy,
            expr("NotIn", Some(json!(["a"]))),
        ),
        reject(
            cel(rules::SELECTOR_VALUES_REQUIRED),
            Policy,
            expr("In", Some(json!([]))),
            "spec.nodeSelector.matchExpressions[1]",
        ),
        accept(
            cel(rules::SELECTOR_VALUES_FORBIDDEN),
            Policy,
            expr("DoesNotExist", None),
        ),
        reject(
            cel(rules::SELECTOR_VALUES_FORBIDDEN),
            Policy,
            expr("Exists", Some(json!(["a"]))),
            "spec.nodeSelector.matchExpressions[1]",
        ),
        reject(
            schema_id("enum", "spec.nodeSelector.matchExpressions[].operator"),
            Policy,
            expr("Gt", Some(json!(["1"]))),
            "spec.nodeSelector.matchExpressions[1].operator",
        ),
        accept(
            schema_id("required", "spec.nodeSelector.matchExpressions[].key"),
            Policy,
            json!({"nodeSelector": {"matchExpressions": [{"key": "k", "operator": "Exists"}]}}),
        ),
        reject(
            schema_id("required", "spec.nodeSelector.matchExpressions[].key"),
            Policy,
            json!({"nodeSelector": {"matchExpressions": [{"operator": "Exists"}]}}),
            "spec.nodeSelector.matchExpressions[0].key",
        ),
        reject(
            schema_id("required", "spec.nodeSelector.matchExpressions[].operator"),
            Policy,
            json!({"nodeSelector": {"matchExpressions": [{"key": "k"}]}}),
            "spec.nodeSelector.matchExpressions[0].operator",
        ),
        accept(
            schema_id("maximum", "spec.priority"),
            Policy,
            json!({"priority": 2147483647_i64}),
        ),
        reject(
            schema_id("maximum", "spec.priority"),
            Policy,
            json!({"priority": 2147483648_i64}),
            "spec.priority",
        ),
        reject(
            schema_id("minimum", "spec.priority"),
            Policy,
            json!({"priority": -2147483649_i64}),
            "spec.priority",
        ),
        reject(
            schema_id("required", "spec.cpuManager"),
            Topology,
            json!({"topologyManager": {"policy": "none"}}),
            "spec.cpuManager",
        ),
        reject(
            schema_id("required", "spec.topologyManager"),
            Topology,
            json!({"cpuManager": {"policy": "none"}}),
            "spec.topologyManager",
        ),
        accept(
            schema_id("required", "spec.policyRef.name"),
            Topology,
            json!({"cpuManager": {"policy": "none"}, "topologyManager": {"policy": "none"},
                   "policyRef": {"name": "p", "generation": 1}}),
        ),
        reject(
            schema_id("required", "spec.policyRef.name"),
            Topology,
            json!({"cpuManager": {"policy": "none"}, "topologyManager": {"policy": "none"},
                   "policyRef": {"generation": 1}}),
            "spec.policyRef.name",
        ),
        reject(
            schema_id("required", "spec.policyRef.generation"),
            Topology,
            json!({"cpuManager": {"policy": "none"}, "topologyManager": {"policy": "none"},
                   "policyRef": {"name": "p"}}),
            "spec.policyRef.generation",
        ),
    ]);
    v
}

/// The constraints of the `root` subtree (`spec`, `status`) of a served CRD, as case ids.
pub fn constraint_ids(crd: &CustomResourceDefinition, root: &str) -> BTreeSet<String> {
    fn walk(s: &JSONSchemaProps, path: &str, out: &mut BTreeSet<String>) {
        for r in s.x_kubernetes_validations.iter().flatten() {
            out.insert(format!("cel:{}", r.message.clone().unwrap_or_default()));
        }
        let keywords = [
            ("enum", s.enum_.is_some()),
            ("minimum", s.minimum.is_some()),
            ("maximum", s.maximum.is_some()),
            ("maxLength", s.max_length.is_some()),
            ("maxProperties", s.max_properties.is_some()),
            ("maxItems", s.max_items.is_some()),
            ("minLength", s.min_length.is_some()),
            ("minItems", s.min_items.is_some()),
            ("pattern", s.pattern.is_some()),
        ];
        for (k, present) in keywords {
            if present {
                out.insert(schema_id(k, path));
            }
        }
        // int32 fields: the server must keep them in range or typed clients break.
        if s.format.as_deref() == Some("int32") {
            out.insert(schema_id("minimum", path));
            out.insert(schema_id("maximum", path));
        }
        // uint32 (a format the server does not know): the same, for the Rust `u32` readers.
        if s.format.as_deref() == Some("uint32") {
            out.insert(schema_id("minimum", path));
            out.insert(schema_id("maximum", path));
        }
        for r in s.required.iter().flatten() {
            out.insert(schema_id("required", &format!("{path}.{r}")));
        }
        for (k, p) in s.properties.iter().flatten() {
            walk(p, &format!("{path}.{k}"), out);
        }
        if let Some(JSONSchemaPropsOrArray::Schema(i)) = &s.items {
            walk(i, &format!("{path}[]"), out);
        }
        if let Some(JSONSchemaPropsOrBool::Schema(a)) = &s.additional_properties {
            walk(a, &format!("{path}{{}}"), out);
        }
    }
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("served CRD has a schema");
    let subtree = schema
        .properties
        .as_ref()
        .and_then(|p| p.get(root))
        .unwrap_or_else(|| panic!("schema has {root}"));
    let mut out = BTreeSet::new();
    walk(subtree, root, &mut out);
    out
}

pub fn resource(kind: &str) -> ApiResource {
    let plural = match kind {
        "NodeResourcePolicy" => "noderesourcepolicies",
        "NodeTopology" => "nodetopologies",
        other => panic!("unknown kind {other}"),
    };
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(nodetopo_crds::GROUP, nodetopo_crds::VERSION, kind),
        plural,
    )
}

pub fn object(kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{}/{}", nodetopo_crds::GROUP, nodetopo_crds::VERSION),
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a valid DynamicObject")
}

#[tokio::test]
async fn crds_establish_and_serve_printer_columns() {
    let Some(cp) = control_plane() else { return };
    let served = install_crds(cp).await;
    assert_eq!(served.len(), 2);
    let client = cp.client();
    for crd in &served {
        let kind = crd.spec.names.kind.clone();
        let expected: Vec<String> = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect();
        assert!(expected.len() >= 8, "{kind}: printer columns {expected:?}");
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(&kind));
        let name = format!("columns-{}", kind.to_lowercase());
        let spec = json!({"cpuManager": {"policy": "static", "reservedCPUs": 2},
                          "topologyManager": {"policy": "best-effort"}});
        let _ = api.delete(&name, &DeleteParams::default()).await;
        api.create(&PostParams::default(), &object(&kind, &name, spec))
            .await
            .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"));
        let url = format!(
            "/apis/{}/{}/{}/{}",
            nodetopo_crds::GROUP,
            nodetopo_crds::VERSION,
            crd.spec.names.plural,
            name
        );
        let req = http::Request::get(url)
            .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
            .body(Vec::new())
            .expect("request");
        let table: Value = client.request(req).await.expect("Table request");
        let columns: Vec<String> = table["columnDefinitions"]
            .as_array()
            .expect("columnDefinitions")
            .iter()
            .map(|c| c["name"].as_str().unwrap_or_default().to_string())
            .collect();
        // The server adds the Name column first.
        assert_eq!(columns[0], "Name");
        assert_eq!(&columns[1..], &expected[..], "{kind}: served columns");
        let cells = &table["rows"][0]["cells"];
        let cpu_col = columns
            .iter()
            .position(|c| c == "CPU-Manager")
            .expect("CPU-Manager");
        let tm_col = columns
            .iter()
            .position(|c| c == "Topology-Manager")
            .expect("TM");
        assert_eq!(cells[cpu_col], "static", "{kind}: {cells}");
        assert_eq!(cells[tm_col], "best-effort", "{kind}: {cells}");
        println!(
            "{kind}: {} printer columns served: {columns:?}",
            columns.len()
        );
        api.delete(&name, &DeleteParams::default())
            .await
            .expect("delete");
    }
}

#[tokio::test]
async fn every_rule_and_constraint_accepts_and_rejects_with_the_field_named() {
    let Some(cp) = control_plane() else { return };
    let served = install_crds(cp).await;
    let cases = cases();
    // Coverage: every constraint of both served spec schemas has an accepted and a rejected
    // case (schema constraints are "accepted" by every valid case of the table).
    let mut missing = Vec::new();
    for crd in &served {
        let kind = &crd.spec.names.kind;
        for id in constraint_ids(crd, "spec") {
            let applies = |c: &&Case| {
                c.id == id
                    && match c.kinds {
                        Kinds::Both => true,
                        Kinds::Policy => kind == "NodeResourcePolicy",
                        Kinds::Topology => kind == "NodeTopology",
                    }
            };
            let rejected = cases
                .iter()
                .filter(applies)
                .any(|c| c.rejected_at.is_some());
            let accepted = id.starts_with("cel:")
                && cases
                    .iter()
                    .filter(applies)
                    .any(|c| c.rejected_at.is_none())
                || !id.starts_with("cel:");
            if !rejected || !accepted {
                missing.push(format!(
                    "{kind}: {id} (rejected case: {rejected}, accepted case: {accepted})"
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "constraints without cases:\n{}",
        missing.join("\n")
    );

    let client = cp.client();
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut failures = Vec::new();
    let mut tried = 0;
    for (i, case) in cases.iter().enumerate() {
        let kinds: &[&str] = match case.kinds {
            Kinds::Both => &["NodeResourcePolicy", "NodeTopology"],
            Kinds::Policy => &["NodeResourcePolicy"],
            Kinds::Topology => &["NodeTopology"],
        };
        for kind in kinds {
            tried += 1;
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
            let name = format!("rule-case-{i}");
            let got = api
                .create(&pp, &object(kind, &name, case.spec.clone()))
                .await;
            let verdict = expect_rejected(
                &got,
                &Expect {
                    rejected_at: case.rejected_at,
                    nested: true,
                    message: case.id.strip_prefix("cel:"),
                },
            );
            match verdict {
                Ok(v) => println!("ok   {kind} {} {}: {v}", case.id, case.spec),
                Err(v) => {
                    println!("FAIL {kind} {} {}: {v}", case.id, case.spec);
                    failures.push(format!("{kind} {} {}: {v}", case.id, case.spec));
                }
            }
        }
    }
    println!("rule cases: {tried} tried, {} failed", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
