//! CRD manifests generated from the Rust types: what `nodetopo-operator crds` prints and
//! what `charts/nodetopo/crds/` must contain byte for byte (a test enforces it).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

use crate::{NodeResourcePolicy, NodeTopology};

/// The header every generated file starts with.
pub const HEADER: &str =
    "# Generated from the nodetopo-crds Rust types by `nodetopo-operator crds`. Do not edit.\n";

/// Both CRDs, post-processed by [`finish_schema`].
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![NodeResourcePolicy::crd(), NodeTopology::crd()];
    for crd in &mut crds {
        for version in &mut crd.spec.versions {
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                finish_schema(schema);
            }
        }
    }
    crds
}

/// Two fixes over the derived schema, applied to every level:
/// - drop `nullable: true`. Our optional fields are omitted, never `null`; without
///   `nullable` the API server drops an explicit `null` before validation, so CEL's `has()`
///   never sees a null value (a rule like `self.reservedCPUs > 0` would otherwise fail with a
///   type error instead of the intended message);
/// - make `conditions` arrays list-type `map` keyed by `type`, the Kubernetes convention, so
///   server-side apply merges conditions by type.
pub fn finish_schema(schema: &mut JSONSchemaProps) {
    schema.nullable = None;
    if let Some(props) = schema.properties.as_mut() {
        for (name, prop) in props.iter_mut() {
            if name == "conditions" && prop.type_.as_deref() == Some("array") {
                prop.x_kubernetes_list_type = Some("map".into());
                prop.x_kubernetes_list_map_keys = Some(vec!["type".into()]);
            }
            finish_schema(prop);
        }
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(item)) => finish_schema(item),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter_mut().for_each(finish_schema),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(extra)) = schema.additional_properties.as_mut() {
        finish_schema(extra);
    }
}

/// The chart files: (file name under `charts/nodetopo/crds/`, YAML text).
pub fn crd_files() -> Result<Vec<(String, String)>, serde_yaml::Error> {
    crds()
        .into_iter()
        .map(|crd| {
            let name = format!("{}.yaml", crd.metadata.name.clone().unwrap_or_default());
            let body = serde_yaml::to_string(&crd)?;
            Ok((name, format!("{HEADER}{body}")))
        })
        .collect()
}

/// All CRDs as one multi-document YAML stream, in [`crd_files`] order.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    let files = crd_files()?;
    Ok(files
        .into_iter()
        .map(|(_, text)| format!("---\n{text}"))
        .collect())
}
