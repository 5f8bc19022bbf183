//! The validation rules of the node configuration ([`super::CpuManagerConfig`],
//! [`super::TopologyManagerConfig`] and the pair), once: as CEL `x-kubernetes-validations`
//! for the CRD schema (with the `schema` feature, the schema transforms that attach them)
//! and as the messages [`super::validate`] reports.
//!
//! The option rules (known names, values, incompatible pairs) and the option lists are
//! generated at compile time from the engine's option tables (see [`cel`]), so a new kubelet
//! option is one entry there.
//!
//! Each [`Rule`] carries the CEL expression and the message the API server prints when it is
//! false. [`super::validate`] implements every rule in Rust and returns exactly the same
//! message, so a user sees the same words from `kubectl apply`, from the operator's Invalid
//! condition and from `nodetopo plan`.
//!
//! Cost: the API server estimates the worst-case cost of every rule from the schema's bounds.
//! The option maps therefore carry `maxProperties`, their values `maxLength`, and key checks use
//! map-literal membership (`k in {...}`) rather than list membership, whose estimated cost grows
//! with the (unbounded) key length times the list length.

use crate::cpumanager::options::{CPU_OPTIONS, INCOMPATIBLE};
use crate::topologymanager::options::{
    MAX_ALLOWABLE_NUMA_NODES, PREFER_CLOSEST_NUMA_NODES, TM_OPTIONS,
};
#[cfg(feature = "schema")]
use schemars::Schema;
use serde_json::{json, Value};

pub mod cel;

/// One CEL validation rule with its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The CEL expression; `self` is the object the rule is attached to.
    pub rule: &'static str,
    /// The message shown when the rule is false. It names the field.
    pub message: &'static str,
}

/// Static CPU manager option names the kubelet knows, in name order: generated from the
/// engine's table ([`crate::cpumanager::options::CPU_OPTIONS`]).
pub const CPU_MANAGER_OPTIONS: [&str; CPU_OPTIONS.len()] = cel::sorted_names(&CPU_OPTIONS);

/// Topology manager option names the kubelet knows, in name order (from the engine's
/// [`crate::topologymanager::options::TM_OPTIONS`]).
pub const TOPOLOGY_MANAGER_OPTIONS: [&str; TM_OPTIONS.len()] = cel::sorted_names(&TM_OPTIONS);

/// The kubelet's lower bound for `max-allowable-numa-nodes` (its default, 8), from the
/// engine's table.
pub const MIN_MAX_ALLOWABLE_NUMA_NODES: u32 = cel::count_min(&TM_OPTIONS, MAX_ALLOWABLE_NUMA_NODES);

/// Pairs of CPU manager options the kubelet refuses to combine (both "true"), in the order
/// the kubelet checks them (`NewStaticPolicyOptions`): the engine's table.
pub const INCOMPATIBLE_CPU_OPTIONS: [(&str, &str); INCOMPATIBLE.len()] = INCOMPATIBLE;

// The blanket value rule below ([`CPU_OPTIONS_BOOLEAN`]) holds only while every CPU manager
// option is a boolean; a counted option fails the build here until it gets its own rule.
const _: () = assert!(
    cel::all_bool(&CPU_OPTIONS),
    "a CPU manager option that is not a boolean needs its own value rule"
);

const CPU_KNOWN_TEXT: (cel::Text, cel::Text) = cel::known("cpuManager", &CPU_MANAGER_OPTIONS);

/// `cpuManager.options`: names.
pub const CPU_OPTIONS_KNOWN: Rule = Rule {
    rule: cel::text(&CPU_KNOWN_TEXT.0),
    message: cel::text(&CPU_KNOWN_TEXT.1),
};

/// `cpuManager.options`: values.
pub const CPU_OPTIONS_BOOLEAN: Rule = Rule {
    rule: "self.all(k, self[k] == 'true' || self[k] == 'false')",
    message: "cpuManager.options: every option value must be \"true\" or \"false\"",
};

const INCOMPATIBLE_TEXT: &[(cel::Text, cel::Text); INCOMPATIBLE.len()] =
    &cel::incompatible(&INCOMPATIBLE);

/// `cpuManager.options`: the incompatible pairs, same order as [`INCOMPATIBLE_CPU_OPTIONS`].
pub const CPU_OPTIONS_INCOMPATIBLE: [Rule; INCOMPATIBLE.len()] = {
    let mut out = [Rule {
        rule: "",
        message: "",
    }; INCOMPATIBLE.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = Rule {
            rule: cel::text(&INCOMPATIBLE_TEXT[i].0),
            message: cel::text(&INCOMPATIBLE_TEXT[i].1),
        };
        i += 1;
    }
    out
};

/// The CPU list regex as a literal, so the CEL rules below can embed it with `concat!`.
macro_rules! cpu_list_regex {
    () => {
        "^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$"
    };
}

/// The list syntax accepted for `reservedSystemCPUs` (ids of at most 5 digits, so that CEL's
/// `int()` cannot overflow and the cost stays bounded).
pub const CPU_LIST_REGEX: &str = cpu_list_regex!();

/// `cpuManager.reservedSystemCPUs`: syntax.
pub const RESERVED_SYSTEM_CPUS_SYNTAX: Rule = Rule {
    rule: concat!("self.matches('", cpu_list_regex!(), "')"),
    message: "cpuManager.reservedSystemCPUs: must be a CPU list such as \"0-1\" or \"0,2,4-7\" (CPU ids up to 5 digits and ranges, separated by commas, no spaces)",
};

/// `cpuManager.reservedSystemCPUs`: range order.
pub const RESERVED_SYSTEM_CPUS_RANGES: Rule = Rule {
    rule: concat!(
        "!self.matches('",
        cpu_list_regex!(),
        "') || self.split(',').all(r, !r.contains('-') || int(r.split('-')[0]) <= int(r.split('-')[1]))"
    ),
    message: "cpuManager.reservedSystemCPUs: a range's start must not be greater than its end",
};

/// `cpuManager`: the two reservation forms exclude each other.
pub const RESERVATION_EXCLUSIVE: Rule = Rule {
    rule: "!has(self.reservedSystemCPUs) || !has(self.reservedCPUs)",
    message: "cpuManager: set either reservedSystemCPUs or reservedCPUs, not both",
};

/// `cpuManager`: the static policy needs reserved CPUs (the kubelet refuses to start without).
pub const STATIC_NEEDS_RESERVATION: Rule = Rule {
    rule: "self.policy != 'static' || has(self.reservedSystemCPUs) || (has(self.reservedCPUs) && self.reservedCPUs > 0)",
    message: "cpuManager: policy static needs a CPU reservation; set reservedSystemCPUs, or reservedCPUs greater than 0",
};

/// `cpuManager`: options only with the static policy (the kubelet's none policy refuses them).
pub const OPTIONS_NEED_STATIC: Rule = Rule {
    rule: "self.policy == 'static' || !has(self.options) || size(self.options) == 0",
    message: "cpuManager.options: options need policy static (the kubelet's none policy accepts no options)",
};

const TM_KNOWN_TEXT: (cel::Text, cel::Text) =
    cel::known("topologyManager", &TOPOLOGY_MANAGER_OPTIONS);

/// `topologyManager.options`: names.
pub const TM_OPTIONS_KNOWN: Rule = Rule {
    rule: cel::text(&TM_KNOWN_TEXT.0),
    message: cel::text(&TM_KNOWN_TEXT.1),
};

const TM_PREFER_CLOSEST_TEXT: (cel::Text, cel::Text) =
    cel::value_rule("topologyManager", &TM_OPTIONS, PREFER_CLOSEST_NUMA_NODES);

/// `topologyManager.options`: `prefer-closest-numa-nodes` is boolean.
pub const TM_PREFER_CLOSEST_BOOLEAN: Rule = Rule {
    rule: cel::text(&TM_PREFER_CLOSEST_TEXT.0),
    message: cel::text(&TM_PREFER_CLOSEST_TEXT.1),
};

const TM_MAX_NUMA_TEXT: (cel::Text, cel::Text) =
    cel::value_rule("topologyManager", &TM_OPTIONS, MAX_ALLOWABLE_NUMA_NODES);

/// `topologyManager.options`: `max-allowable-numa-nodes` is a number >= 8.
pub const TM_MAX_NUMA_NODES: Rule = Rule {
    rule: cel::text(&TM_MAX_NUMA_TEXT.0),
    message: cel::text(&TM_MAX_NUMA_TEXT.1),
};

/// Spec level: align-by-socket with the single-numa-node topology manager policy.
pub const ALIGN_BY_SOCKET_SINGLE_NUMA: Rule = Rule {
    rule: "!(has(self.cpuManager) && has(self.cpuManager.options) && 'align-by-socket' in self.cpuManager.options && self.cpuManager.options['align-by-socket'] == 'true' && has(self.topologyManager) && self.topologyManager.policy == 'single-numa-node')",
    message: "cpuManager.options: align-by-socket cannot be used with topologyManager.policy single-numa-node (the kubelet rejects the combination)",
};

/// Every rule on the node configuration (both kinds), for the drift tests.
pub fn all() -> Vec<Rule> {
    let mut v = vec![
        CPU_OPTIONS_KNOWN,
        CPU_OPTIONS_BOOLEAN,
        RESERVED_SYSTEM_CPUS_SYNTAX,
        RESERVED_SYSTEM_CPUS_RANGES,
        RESERVATION_EXCLUSIVE,
        STATIC_NEEDS_RESERVATION,
        OPTIONS_NEED_STATIC,
        TM_OPTIONS_KNOWN,
        TM_PREFER_CLOSEST_BOOLEAN,
        TM_MAX_NUMA_NODES,
        ALIGN_BY_SOCKET_SINGLE_NUMA,
    ];
    v.extend(CPU_OPTIONS_INCOMPATIBLE);
    v
}

/// Rules as the `x-kubernetes-validations` list of a schema.
pub fn rules_json(rules: &[Rule]) -> Value {
    Value::Array(
        rules
            .iter()
            .map(|r| json!({"rule": r.rule, "message": r.message}))
            .collect(),
    )
}

#[cfg(feature = "schema")]
fn insert(schema: &mut Schema, key: &str, value: Value) {
    schema.insert(key.to_string(), value);
}

/// The description of `cpuManager.options` in the CRD schema: the option names of the
/// engine's table in its order, wrapped at 88 columns.
pub fn cpu_options_description() -> String {
    let names: Vec<&str> = CPU_OPTIONS.iter().map(|o| o.name).collect();
    let text = format!(
        "Static policy options with the kubelet's names ({}); values \"true\" or \"false\".",
        names.join(", ")
    );
    wrap(&text, 88)
}

/// Greedy word wrap: lines of at most `width` characters where words allow.
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line_len = 0;
    for word in text.split(' ') {
        if line_len > 0 && line_len + 1 + word.len() > width {
            out.push('\n');
            line_len = 0;
        } else if line_len > 0 {
            out.push(' ');
            line_len += 1;
        }
        out.push_str(word);
        line_len += word.len();
    }
    out
}

/// Schema transform for `cpuManager.options` (its description generated too:
/// [`cpu_options_description`]).
#[cfg(feature = "schema")]
pub fn cpu_options_schema(schema: &mut Schema) {
    let mut rules = vec![CPU_OPTIONS_KNOWN, CPU_OPTIONS_BOOLEAN];
    rules.extend(CPU_OPTIONS_INCOMPATIBLE);
    insert(schema, "description", json!(cpu_options_description()));
    insert(schema, "maxProperties", json!(CPU_MANAGER_OPTIONS.len()));
    insert(
        schema,
        "additionalProperties",
        json!({"type": "string", "maxLength": 5}),
    );
    insert(schema, "x-kubernetes-validations", rules_json(&rules));
}

/// Schema transform for `topologyManager.options`.
#[cfg(feature = "schema")]
pub fn tm_options_schema(schema: &mut Schema) {
    insert(
        schema,
        "maxProperties",
        json!(TOPOLOGY_MANAGER_OPTIONS.len()),
    );
    insert(
        schema,
        "additionalProperties",
        json!({"type": "string", "maxLength": 5}),
    );
    insert(
        schema,
        "x-kubernetes-validations",
        rules_json(&[
            TM_OPTIONS_KNOWN,
            TM_PREFER_CLOSEST_BOOLEAN,
            TM_MAX_NUMA_NODES,
        ]),
    );
}

/// Schema transform for `cpuManager.reservedSystemCPUs` (the field's schema may be wrapped
/// as nullable by schemars; the rules go on whatever object describes the string).
#[cfg(feature = "schema")]
pub fn reserved_system_cpus_schema(schema: &mut Schema) {
    insert(schema, "maxLength", json!(256));
    insert(
        schema,
        "x-kubernetes-validations",
        rules_json(&[RESERVED_SYSTEM_CPUS_SYNTAX, RESERVED_SYSTEM_CPUS_RANGES]),
    );
}

/// Schema transform for the `cpuManager` object.
#[cfg(feature = "schema")]
pub fn cpu_manager_schema(schema: &mut Schema) {
    insert(
        schema,
        "x-kubernetes-validations",
        rules_json(&[
            RESERVATION_EXCLUSIVE,
            STATIC_NEEDS_RESERVATION,
            OPTIONS_NEED_STATIC,
        ]),
    );
}

/// Schema transform for a spec carrying both managers (policy spec, NodeTopology spec).
#[cfg(feature = "schema")]
pub fn spec_schema(schema: &mut Schema) {
    insert(
        schema,
        "x-kubernetes-validations",
        rules_json(&[ALIGN_BY_SOCKET_SINGLE_NUMA]),
    );
}

/// Schema transform for an `int32` field: the API server's own int32 check reports
/// `<nil>: Invalid value: ""` with the path only at the end of the text; explicit bounds give
/// an error that starts with the field's path, like every other rule.
#[cfg(feature = "schema")]
pub fn int32_schema(schema: &mut Schema) {
    if schema.get("minimum").is_none() {
        insert(schema, "minimum", json!(i32::MIN));
    }
    insert(schema, "maximum", json!(i32::MAX));
}
