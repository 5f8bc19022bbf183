//! The CRDs' validation rules: the node configuration's rules are the engine's
//! ([`nodetopo_engine::spec::rules`], re-exported here with their schema transforms); this
//! module adds what is Kubernetes-specific: the label selector's rules and the schema
//! transforms for the selector and for unsigned report fields.

pub use nodetopo_engine::spec::rules::*;
use schemars::Schema;
use serde_json::{json, Value};

/// The label selector operators (`nodeSelector.matchExpressions[].operator`), enforced by the
/// schema as an enum.
pub const SELECTOR_OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];

/// Message for an operator outside [`SELECTOR_OPERATORS`] (the schema's enum says it in the
/// API server's own words).
pub const SELECTOR_OPERATOR_MESSAGE: &str =
    "nodeSelector.matchExpressions: operator must be In, NotIn, Exists or DoesNotExist";

/// `nodeSelector.matchExpressions[]`: In and NotIn need values (as for any LabelSelector; the
/// API server checks built-in selectors in Go, a CRD's only through its schema).
pub const SELECTOR_VALUES_REQUIRED: Rule = Rule {
    rule: "!(self.operator == 'In' || self.operator == 'NotIn') || (has(self.values) && size(self.values) > 0)",
    message: "nodeSelector.matchExpressions: operators In and NotIn need at least one value",
};

/// `nodeSelector.matchExpressions[]`: Exists and DoesNotExist take no values.
pub const SELECTOR_VALUES_FORBIDDEN: Rule = Rule {
    rule: "!(self.operator == 'Exists' || self.operator == 'DoesNotExist') || !has(self.values) || size(self.values) == 0",
    message: "nodeSelector.matchExpressions: operators Exists and DoesNotExist take no values",
};

/// Every rule of the NodeResourcePolicy's node selector (that kind only).
pub fn selector_rules() -> Vec<Rule> {
    vec![SELECTOR_VALUES_REQUIRED, SELECTOR_VALUES_FORBIDDEN]
}

/// Schema transform for a subtree with unsigned 32-bit fields (the agent's topology report):
/// every `format: uint32` schema in it gets `maximum: 4294967295`. The apiserver does not know
/// that format, so without the bound it stores values the typed clients (`u32`) cannot read
/// back, and a whole list or watch of NodeTopologies would fail to decode.
pub fn uint32_schema(schema: &mut Schema) {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(o) => {
                if o.get("format").and_then(Value::as_str) == Some("uint32")
                    && !o.contains_key("maximum")
                {
                    o.insert("maximum".into(), json!(u32::MAX));
                }
                o.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    if let Some(o) = schema.as_object_mut() {
        o.values_mut().for_each(walk);
        if o.get("format").and_then(Value::as_str) == Some("uint32") && !o.contains_key("maximum") {
            o.insert("maximum".into(), json!(u32::MAX));
        }
    }
}

/// Schema transform for `NodeResourcePolicy.spec.nodeSelector` (a LabelSelector): the operator
/// enum and the values rules on each `matchExpressions` item, which a CRD gets only from its
/// schema (built-in kinds check selectors in Go).
///
/// # Panics
/// If the LabelSelector schema no longer has `properties.matchExpressions.items` (a change of
/// k8s-openapi's schema); the CRD tests then fail at generation, not in a cluster.
pub fn node_selector_schema(schema: &mut Schema) {
    let item = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("matchExpressions"))
        .and_then(|m| m.get_mut("items"))
        .and_then(Value::as_object_mut)
        .expect("LabelSelector schema has properties.matchExpressions.items");
    if let Some(op) = item
        .get_mut("properties")
        .and_then(|p| p.get_mut("operator"))
        .and_then(Value::as_object_mut)
    {
        op.insert("enum".into(), json!(SELECTOR_OPERATORS));
    }
    item.insert(
        "x-kubernetes-validations".into(),
        rules_json(&selector_rules()),
    );
}
