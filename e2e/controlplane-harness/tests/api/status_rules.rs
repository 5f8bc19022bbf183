//! The `status` schemas of both CRDs on a real apiserver, written through the status
//! subresource as the agent and the operator write them. The rule-coverage test of
//! [`crate::crds`] walks `spec`; this one walks `status`: from the schema the server stored it
//! builds a complete valid status (every property present, every list with one item, every
//! map with one entry), then derives one write per constraint, so that every constraint
//! (required field, minimum, maximum, int32 range, length, enum, CEL rule) has a write the
//! server accepts and one it rejects with a message naming the field. Writes are dry runs.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::common::{control_plane, expect_rejected, install_crds, Expect};
use crate::crds::{constraint_ids, object, resource};

/// One step into a JSON value.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index,
}

/// A status write: the constraint it exercises (an id as [`constraint_ids`] names it), the
/// status, and `None` (accepted) or `Some(field path)` (rejected naming that field).
struct Case {
    id: String,
    status: Value,
    rejected_at: Option<String>,
}

/// A valid instance of `s`: every property, one list item, one map entry.
fn sample(s: &JSONSchemaProps) -> Value {
    if let Some(e) = s.enum_.as_ref().and_then(|e| e.first()) {
        return e.0.clone();
    }
    match s.type_.as_deref() {
        Some("object") | None if s.properties.is_some() => Value::Object(
            s.properties
                .iter()
                .flatten()
                .map(|(k, p)| (k.clone(), sample(p)))
                .collect(),
        ),
        Some("object") => match &s.additional_properties {
            Some(JSONSchemaPropsOrBool::Schema(a)) => json!({ "k": sample(a) }),
            _ => json!({}),
        },
        Some("array") => match &s.items {
            Some(JSONSchemaPropsOrArray::Schema(i)) => json!([sample(i)]),
            _ => json!([]),
        },
        Some("integer") | Some("number") => json!(s.minimum.map_or(1, |m| (m as i64).max(1))),
        Some("boolean") => json!(true),
        _ if s.format.as_deref() == Some("date-time") => json!("2026-01-01T00:00:00Z"),
        _ => {
            let n = s.min_length.unwrap_or(1).max(1) as usize;
            json!("x".repeat(n))
        }
    }
}

/// The value at `steps` in `v` (list steps take item 0).
fn at<'a>(v: &'a mut Value, steps: &[Step]) -> &'a mut Value {
    steps.iter().fold(v, |v, s| match s {
        Step::Key(k) => &mut v[k.as_str()],
        Step::Index => &mut v[0],
    })
}

fn with(base: &Value, steps: &[Step], value: Value) -> Value {
    let mut v = base.clone();
    *at(&mut v, steps) = value;
    v
}

fn without(base: &Value, steps: &[Step], key: &str) -> Value {
    let mut v = base.clone();
    if let Some(o) = at(&mut v, steps).as_object_mut() {
        o.remove(key);
    }
    v
}

/// Walks the schema and adds one accepted and one rejected case per constraint. `id_path` is
/// the path as [`constraint_ids`] spells it (`[]` for list items, `{}` for map values),
/// `field` as the server does (`[0]`), `steps` into the sample.
fn derive(
    s: &JSONSchemaProps,
    base: &Value,
    id_path: &str,
    field: &str,
    steps: &[Step],
    out: &mut Vec<Case>,
) {
    let case = |id: String, status: Value, rejected_at: Option<String>| Case {
        id,
        status,
        rejected_at,
    };
    for r in s.required.iter().flatten() {
        out.push(case(
            format!("required:{id_path}.{r}"),
            without(base, steps, r),
            Some(format!("{field}.{r}")),
        ));
    }
    let int32 = s.format.as_deref() == Some("int32");
    let minimum = s
        .minimum
        .map(|m| m as i64)
        .or(int32.then_some(i32::MIN.into()));
    let maximum = s
        .maximum
        .map(|m| m as i64)
        .or(int32.then_some(i32::MAX.into()));
    if let Some(min) = minimum {
        let id = format!("minimum:{id_path}");
        out.push(case(id.clone(), with(base, steps, json!(min)), None));
        out.push(case(
            id,
            with(base, steps, json!(min - 1)),
            Some(field.into()),
        ));
    }
    if let Some(max) = maximum {
        let id = format!("maximum:{id_path}");
        out.push(case(id.clone(), with(base, steps, json!(max)), None));
        out.push(case(
            id,
            with(base, steps, json!(max + 1)),
            Some(field.into()),
        ));
    }
    if let Some(n) = s.max_length {
        let id = format!("maxLength:{id_path}");
        let n = n as usize;
        out.push(case(
            id.clone(),
            with(base, steps, json!("x".repeat(n))),
            None,
        ));
        out.push(case(
            id,
            with(base, steps, json!("x".repeat(n + 1))),
            Some(field.into()),
        ));
    }
    if let Some(n) = s.max_items {
        let id = format!("maxItems:{id_path}");
        let item = at(&mut base.clone(), steps)[0].clone();
        let list = |k: i64| Value::Array(vec![item.clone(); k as usize]);
        out.push(case(id.clone(), with(base, steps, list(n)), None));
        out.push(case(id, with(base, steps, list(n + 1)), Some(field.into())));
    }
    if let Some(values) = &s.enum_ {
        // Every listed value is accepted; one not listed is rejected.
        for v in values {
            out.push(case(
                format!("enum:{id_path}"),
                with(base, steps, v.0.clone()),
                None,
            ));
        }
        out.push(case(
            format!("enum:{id_path}"),
            with(base, steps, json!("not-a-listed-value")),
            Some(field.into()),
        ));
    }
    for (k, p) in s.properties.iter().flatten() {
        let mut st = steps.to_vec();
        st.push(Step::Key(k.clone()));
        derive(
            p,
            base,
            &format!("{id_path}.{k}"),
            &format!("{field}.{k}"),
            &st,
            out,
        );
    }
    if let Some(JSONSchemaPropsOrArray::Schema(i)) = &s.items {
        let mut st = steps.to_vec();
        st.push(Step::Index);
        derive(
            i,
            base,
            &format!("{id_path}[]"),
            &format!("{field}[0]"),
            &st,
            out,
        );
    }
    if let Some(JSONSchemaPropsOrBool::Schema(a)) = &s.additional_properties {
        let mut st = steps.to_vec();
        st.push(Step::Key("k".into()));
        derive(
            a,
            base,
            &format!("{id_path}{{}}"),
            &format!("{field}.k"),
            &st,
            out,
        );
    }
}

fn status_schema(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| s.properties.as_ref())
        .and_then(|p| p.get("status"))
        .expect("served CRD has a status schema")
}

/// Every case for one CRD: the complete sample (accepted) first, then the derived ones.
fn cases(crd: &CustomResourceDefinition) -> Vec<Case> {
    let schema = status_schema(crd);
    let base = json!({ "status": sample(schema) });
    let mut out = vec![Case {
        id: "complete".into(),
        status: base.clone(),
        rejected_at: None,
    }];
    derive(
        schema,
        &base,
        "status",
        "status",
        &[Step::Key("status".into())],
        &mut out,
    );
    out
}

#[tokio::test]
async fn every_status_constraint_accepts_and_rejects_with_the_field_named() {
    let Some(cp) = control_plane() else { return };
    let served = install_crds(cp).await;
    let client = cp.client();
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let mut failures = Vec::new();
    let mut tried = 0;
    let mut per_kind = Vec::new();
    for crd in &served {
        let kind = crd.spec.names.kind.clone();
        let cases = cases(crd);

        // Coverage: every constraint under status has a rejected and an accepted write
        // (`required` is accepted by the complete status; a CEL rule needs its own).
        let mut missing = Vec::new();
        let ids: BTreeSet<String> = constraint_ids(crd, "status");
        for id in &ids {
            let of = |c: &&Case| &c.id == id;
            let rejected = cases.iter().filter(of).any(|c| c.rejected_at.is_some());
            let accepted = id.starts_with("required:")
                || cases.iter().filter(of).any(|c| c.rejected_at.is_none());
            if !rejected || !accepted {
                missing.push(format!(
                    "{kind}: {id} (rejected case: {rejected}, accepted case: {accepted})"
                ));
            }
        }
        assert!(
            missing.is_empty(),
            "status constraints without cases:\n{}",
            missing.join("\n")
        );

        // The object whose status is written.
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(&kind));
        let name = format!("status-rules-{}", kind.to_lowercase());
        let spec = json!({"cpuManager": {"policy": "none"}, "topologyManager": {"policy": "none"}});
        let _ = api.delete(&name, &DeleteParams::default()).await;
        api.create(&PostParams::default(), &object(&kind, &name, spec))
            .await
            .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"));

        let (mut accepted, mut rejected) = (0, 0);
        for case in &cases {
            tried += 1;
            let got = api
                .patch_status(&name, &dry, &Patch::Merge(&case.status))
                .await;
            let verdict = expect_rejected(
                &got,
                &Expect {
                    rejected_at: case.rejected_at.as_deref(),
                    nested: false,
                    message: None,
                },
            );
            match &verdict {
                Ok(v) if v.starts_with("accepted") => accepted += 1,
                Ok(_) => rejected += 1,
                Err(_) => {}
            }
            match verdict {
                Ok(v) => println!("ok   {kind} {}: {v}", case.id),
                Err(v) => {
                    println!("FAIL {kind} {}: {v}", case.id);
                    failures.push(format!("{kind} {}: {v}", case.id));
                }
            }
        }
        per_kind.push(format!(
            "{kind}: {} status constraints, {} writes ({accepted} accepted and {rejected} rejected as expected)",
            ids.len(),
            cases.len()
        ));
        api.delete(&name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    for line in &per_kind {
        println!("{line}");
    }
    println!(
        "status rule cases: {tried} tried, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
