//! The node configuration's validation rules ([`super::rules`]) as Rust functions: the one
//! check the conversion into a [`crate::admission::NodeConfig`] runs ([`super::node_config`]),
//! and what the operator and the CRD crate's object validation call.
//!
//! Every configuration rule of [`super::rules`] is implemented here and reports exactly the
//! CEL rule's message, plus the precise field path and, where useful, the offending value.
//! Every error is reported, not just the first.

use std::collections::BTreeMap;
use std::fmt;

use crate::cpuset::CpuSet;

use super::rules::{self, Rule};
use super::{CpuManagerConfig, CpuManagerPolicy, TopologyManagerConfig, TopologyManagerPolicy};

/// One violated rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// Full path of the offending field, e.g. `spec.cpuManager.options[foo]`.
    pub field: String,
    /// The rule's message, identical to the CRD's CEL message where a CEL rule exists.
    pub message: String,
    /// The offending value or other detail, when there is one.
    pub detail: Option<String>,
}

impl ValidationError {
    /// An error of a rule, with its message.
    pub fn rule(field: impl Into<String>, rule: Rule, detail: Option<String>) -> Self {
        Self {
            field: field.into(),
            message: rule.message.to_string(),
            detail,
        }
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.detail {
            Some(d) => write!(f, "{} (at {}: {})", self.message, self.field, d),
            None => write!(f, "{} (at {})", self.message, self.field),
        }
    }
}

impl std::error::Error for ValidationError {}

/// Joins errors into one line, `; `-separated (for condition messages and CLI errors).
pub fn join(errors: &[ValidationError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether an option map has `key` set to `"true"`.
pub fn is_true(options: &BTreeMap<String, String>, key: &str) -> bool {
    options.get(key).is_some_and(|v| v == "true")
}

/// The syntax of [`rules::CPU_LIST_REGEX`], checked by hand (no regex engine needed):
/// ids of 1-5 digits, optional `-id`, comma-separated, nothing else.
fn cpu_list_syntax_ok(s: &str) -> bool {
    let id_ok = |t: &str| !t.is_empty() && t.len() <= 5 && t.bytes().all(|b| b.is_ascii_digit());
    !s.is_empty()
        && s.split(',').all(|range| match range.split_once('-') {
            Some((a, b)) => id_ok(a) && id_ok(b),
            None => id_ok(range),
        })
}

/// Validates a CPU manager configuration; `prefix` is the path of the object (e.g.
/// `spec.cpuManager`).
pub fn validate_cpu_manager(c: &CpuManagerConfig, prefix: &str) -> Vec<ValidationError> {
    let CpuManagerConfig {
        policy,
        options,
        reserved_system_cpus,
        reserved_cpus,
    } = c;
    let mut errs = Vec::new();
    let opt_field = |k: &str| format!("{prefix}.options[{k}]");
    for k in options.keys() {
        if !rules::CPU_MANAGER_OPTIONS.contains(&k.as_str()) {
            errs.push(ValidationError::rule(
                opt_field(k),
                rules::CPU_OPTIONS_KNOWN,
                Some(format!("unknown option {k:?}")),
            ));
        }
    }
    for (k, v) in options {
        if v != "true" && v != "false" {
            errs.push(ValidationError::rule(
                opt_field(k),
                rules::CPU_OPTIONS_BOOLEAN,
                Some(format!("value {v:?}")),
            ));
        }
    }
    for ((a, b), rule) in rules::INCOMPATIBLE_CPU_OPTIONS
        .iter()
        .zip(rules::CPU_OPTIONS_INCOMPATIBLE)
    {
        if is_true(options, a) && is_true(options, b) {
            errs.push(ValidationError::rule(
                format!("{prefix}.options"),
                rule,
                None,
            ));
        }
    }
    if let Some(list) = reserved_system_cpus {
        let field = format!("{prefix}.reservedSystemCPUs");
        if !cpu_list_syntax_ok(list) {
            errs.push(ValidationError::rule(
                field,
                rules::RESERVED_SYSTEM_CPUS_SYNTAX,
                Some(format!("value {list:?}")),
            ));
        } else if let Some(bad) = list.split(',').find(|r| {
            r.split_once('-')
                .is_some_and(|(a, b)| a.parse::<u32>().unwrap_or(0) > b.parse::<u32>().unwrap_or(0))
        }) {
            errs.push(ValidationError::rule(
                field,
                rules::RESERVED_SYSTEM_CPUS_RANGES,
                Some(format!("range {bad:?}")),
            ));
        }
    }
    if let Some(n) = reserved_cpus {
        if *n < 0 {
            errs.push(ValidationError {
                field: format!("{prefix}.reservedCPUs"),
                message: format!("{prefix}.reservedCPUs: must be 0 or more"),
                detail: Some(format!("value {n}")),
            });
        }
    }
    if reserved_system_cpus.is_some() && reserved_cpus.is_some() {
        errs.push(ValidationError::rule(
            prefix,
            rules::RESERVATION_EXCLUSIVE,
            None,
        ));
    }
    if *policy == CpuManagerPolicy::Static
        && reserved_system_cpus.is_none()
        && !reserved_cpus.is_some_and(|n| n > 0)
    {
        errs.push(ValidationError::rule(
            prefix,
            rules::STATIC_NEEDS_RESERVATION,
            None,
        ));
    }
    if *policy != CpuManagerPolicy::Static && !options.is_empty() {
        errs.push(ValidationError::rule(
            format!("{prefix}.options"),
            rules::OPTIONS_NEED_STATIC,
            None,
        ));
    }
    errs
}

/// Validates a topology manager configuration; `prefix` as for [`validate_cpu_manager`].
pub fn validate_topology_manager(t: &TopologyManagerConfig, prefix: &str) -> Vec<ValidationError> {
    let TopologyManagerConfig {
        policy: _,
        scope: _,
        options,
    } = t;
    let mut errs = Vec::new();
    let opt_field = |k: &str| format!("{prefix}.options[{k}]");
    for k in options.keys() {
        if !rules::TOPOLOGY_MANAGER_OPTIONS.contains(&k.as_str()) {
            errs.push(ValidationError::rule(
                opt_field(k),
                rules::TM_OPTIONS_KNOWN,
                Some(format!("unknown option {k:?}")),
            ));
        }
    }
    if let Some(v) = options.get("prefer-closest-numa-nodes") {
        if v != "true" && v != "false" {
            errs.push(ValidationError::rule(
                opt_field("prefer-closest-numa-nodes"),
                rules::TM_PREFER_CLOSEST_BOOLEAN,
                Some(format!("value {v:?}")),
            ));
        }
    }
    if let Some(v) = options.get("max-allowable-numa-nodes") {
        let ok = !v.is_empty()
            && v.len() <= 3
            && v.bytes().all(|b| b.is_ascii_digit())
            && v.parse::<u32>()
                .is_ok_and(|n| n >= rules::MIN_MAX_ALLOWABLE_NUMA_NODES);
        if !ok {
            errs.push(ValidationError::rule(
                opt_field("max-allowable-numa-nodes"),
                rules::TM_MAX_NUMA_NODES,
                Some(format!("value {v:?}")),
            ));
        }
    }
    errs
}

/// Validates a pair of configurations together (each on its own, then the cross rules);
/// `prefix` is the spec's path (e.g. `spec`).
pub fn validate_config(
    cpu: &CpuManagerConfig,
    tm: &TopologyManagerConfig,
    prefix: &str,
) -> Vec<ValidationError> {
    let mut errs = validate_cpu_manager(cpu, &format!("{prefix}.cpuManager"));
    errs.extend(validate_topology_manager(
        tm,
        &format!("{prefix}.topologyManager"),
    ));
    if is_true(&cpu.options, "align-by-socket")
        && tm.policy == TopologyManagerPolicy::SingleNumaNode
    {
        errs.push(ValidationError::rule(
            format!("{prefix}.cpuManager.options[align-by-socket]"),
            rules::ALIGN_BY_SOCKET_SINGLE_NUMA,
            None,
        ));
    }
    errs
}

/// The reservation a CPU manager configuration asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// Nothing reserved.
    None,
    /// Exactly these CPUs (`reservedSystemCPUs`).
    Explicit(CpuSet),
    /// This many CPUs, chosen topologically (`reservedCPUs`).
    Count(usize),
}

/// Reads the reservation of a configuration that passed [`validate_cpu_manager`].
pub fn reservation(c: &CpuManagerConfig) -> Result<Reservation, ValidationError> {
    match (&c.reserved_system_cpus, c.reserved_cpus) {
        (Some(_), Some(_)) => Err(ValidationError::rule(
            "spec.cpuManager",
            rules::RESERVATION_EXCLUSIVE,
            None,
        )),
        (Some(list), None) => CpuSet::parse(list).map(Reservation::Explicit).map_err(|e| {
            ValidationError::rule(
                "spec.cpuManager.reservedSystemCPUs",
                rules::RESERVED_SYSTEM_CPUS_SYNTAX,
                Some(e.to_string()),
            )
        }),
        (None, Some(n)) if n > 0 => Ok(Reservation::Count(n as usize)),
        (None, _) => Ok(Reservation::None),
    }
}

#[cfg(test)]
mod tests;
