//! Every rule of `nodetopo_crds::rules` appears, with its exact message, in the generated
//! CRD schemas, and the schemas are structural the way the API server requires.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use nodetopo_crds::generate::crds;

fn walk<'a>(s: &'a JSONSchemaProps, path: String, out: &mut Vec<(String, &'a JSONSchemaProps)>) {
    out.push((path.clone(), s));
    for (k, v) in s.properties.iter().flatten() {
        walk(v, format!("{path}.{k}"), out);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(i)) = &s.items {
        walk(i, format!("{path}[]"), out);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(a)) = &s.additional_properties {
        walk(a, format!("{path}{{}}"), out);
    }
}

#[test]
fn every_rule_is_in_both_crds_with_its_message() {
    for crd in crds() {
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema");
        let mut nodes = Vec::new();
        walk(schema, String::new(), &mut nodes);
        let found: Vec<(String, String)> = nodes
            .iter()
            .flat_map(|(_, s)| s.x_kubernetes_validations.iter().flatten())
            .map(|r| (r.rule.clone(), r.message.clone().unwrap_or_default()))
            .collect();
        let mut expected = nodetopo_crds::rules::all();
        if crd.spec.names.kind == "NodeResourcePolicy" {
            expected.extend(nodetopo_crds::rules::selector_rules());
        }
        for rule in expected {
            assert!(
                found.contains(&(rule.rule.to_string(), rule.message.to_string())),
                "{}: rule missing: {}",
                crd.metadata.name.as_deref().unwrap_or_default(),
                rule.rule
            );
        }
    }
}

#[test]
fn structural_cluster_scoped_with_status_and_columns() {
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        assert_eq!(crd.spec.scope, "Cluster", "{name}");
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["nodetopo".to_string()])
        );
        let v = &crd.spec.versions[0];
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{name}"
        );
        assert!(
            v.additional_printer_columns
                .as_ref()
                .is_some_and(|c| c.len() >= 8),
            "{name}"
        );
        let schema = v
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema");
        let mut nodes = Vec::new();
        walk(schema, String::new(), &mut nodes);
        for (path, s) in nodes {
            // Structural schemas type every node, except int-or-string ones (which must not be).
            assert!(
                s.type_.is_some() || s.x_kubernetes_int_or_string == Some(true),
                "{name}{path}: every node is typed"
            );
            assert!(
                s.x_kubernetes_preserve_unknown_fields.is_none(),
                "{name}{path}"
            );
            assert!(s.nullable.is_none(), "{name}{path}: no nullable");
            assert!(s.any_of.is_none() && s.one_of.is_none(), "{name}{path}");
        }
    }
    let names: Vec<_> = crds()
        .iter()
        .map(|c| c.spec.names.short_names.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        vec![vec!["nrp".to_string()], vec!["ntopo".to_string()]]
    );
}
