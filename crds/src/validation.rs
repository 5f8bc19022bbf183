//! The API's validation in Rust, for the operator, the agent and the tests: the node
//! configuration's rules are the engine's ([`nodetopo_engine::spec::validate`], re-exported
//! here, the same function the engine's spec conversion runs); this module adds what is
//! Kubernetes-specific: label selectors, the policy's rollout, the object-level entry points
//! ([`validate_policy_spec`]; a NodeTopology spec is checked by the engine's
//! [`nodetopo_engine::spec::node_config`]) and — with a node's discovered
//! topology — whether a configuration can apply on that node ([`check_on_node`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nodetopo_engine::report::TopologyReport;
use nodetopo_engine::CpuSet;

pub use nodetopo_engine::spec::validate::{
    is_true, join, reservation, validate_config, validate_cpu_manager, validate_topology_manager,
    Reservation, ValidationError,
};

use crate::config::{CpuManagerConfig, CpuManagerPolicy};
use crate::policy::NodeResourcePolicySpec;
use crate::rules;

/// Validates a label selector the way the API machinery does for node selection, with the
/// messages of the CRD's schema rules ([`rules::SELECTOR_VALUES_REQUIRED`] and friends).
pub fn validate_selector(sel: &LabelSelector, prefix: &str) -> Vec<ValidationError> {
    let mut errs = Vec::new();
    for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
        let field = format!("{prefix}.matchExpressions[{i}]");
        let values = e.values.as_deref().unwrap_or_default();
        let detail = Some(format!(
            "operator {:?}, {} values",
            e.operator,
            values.len()
        ));
        match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(ValidationError::rule(
                format!("{field}.values"),
                rules::SELECTOR_VALUES_REQUIRED,
                detail,
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(ValidationError::rule(
                format!("{field}.values"),
                rules::SELECTOR_VALUES_FORBIDDEN,
                detail,
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.push(ValidationError {
                field: format!("{field}.operator"),
                message: rules::SELECTOR_OPERATOR_MESSAGE.to_string(),
                detail: Some(format!("operator {other:?}")),
            }),
        }
    }
    errs
}

/// Validates a NodeResourcePolicy spec: selector, both managers, cross rules.
pub fn validate_policy_spec(spec: &NodeResourcePolicySpec) -> Vec<ValidationError> {
    let NodeResourcePolicySpec {
        node_selector,
        priority: _,
        cpu_manager,
        topology_manager,
        rollout,
    } = spec;
    let mut errs = node_selector
        .as_ref()
        .map(|s| validate_selector(s, "spec.nodeSelector"))
        .unwrap_or_default();
    errs.extend(validate_config(
        &cpu_manager.clone().unwrap_or_default(),
        &topology_manager.clone().unwrap_or_default(),
        "spec",
    ));
    if let Some(r) = rollout {
        if let Err(detail) = r.max_unavailable_of(1) {
            errs.push(ValidationError {
                field: "spec.rollout.maxUnavailable".into(),
                message: crate::rollout::MAX_UNAVAILABLE_RULE.message.to_string(),
                detail: Some(detail),
            });
        }
        if let Err(detail) = r.progress_deadline_seconds() {
            errs.push(ValidationError {
                field: "spec.rollout.progressDeadlineSeconds".into(),
                message: crate::rollout::PROGRESS_DEADLINE_RULE.message.to_string(),
                detail: Some(detail),
            });
        }
    }
    errs
}

/// Why a (valid) configuration cannot apply on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfigProblem {
    /// PascalCase reason, e.g. `ReservedCPUsAbsent`.
    pub reason: &'static str,
    /// Human-readable detail naming the field and the node's CPUs.
    pub message: String,
}

/// Checks a configuration against a node's reported topology: reserved CPUs that the node
/// lacks, a reservation that leaves no CPU, align-by-socket on a machine with more sockets than
/// NUMA nodes (the kubelet refuses to start in each case).
pub fn check_on_node(
    cpu: &CpuManagerConfig,
    topology: &TopologyReport,
) -> Result<(), NodeConfigProblem> {
    let online = CpuSet::parse(&topology.cpus).map_err(|e| NodeConfigProblem {
        reason: "TopologyUnreadable",
        message: format!("status.topology.cpus: {e}"),
    })?;
    match reservation(cpu) {
        Err(e) => {
            return Err(NodeConfigProblem {
                reason: "InvalidSpec",
                message: e.to_string(),
            })
        }
        Ok(Reservation::Explicit(set)) => {
            let absent = set.difference(&online);
            if !absent.is_empty() {
                return Err(NodeConfigProblem {
                    reason: "ReservedCPUsAbsent",
                    message: format!(
                        "cpuManager.reservedSystemCPUs: CPUs {absent} do not exist on this node (online CPUs {online})"
                    ),
                });
            }
            if cpu.policy == CpuManagerPolicy::Static && set.len() >= online.len() {
                return Err(NodeConfigProblem {
                    reason: "NoAssignableCPUs",
                    message: format!(
                        "cpuManager.reservedSystemCPUs: reserves all {} online CPUs, none left for containers",
                        online.len()
                    ),
                });
            }
        }
        Ok(Reservation::Count(n)) => {
            if cpu.policy == CpuManagerPolicy::Static && n >= online.len() {
                return Err(NodeConfigProblem {
                    reason: "NoAssignableCPUs",
                    message: format!(
                        "cpuManager.reservedCPUs: {n} reserved of {} online CPUs leaves none for containers",
                        online.len()
                    ),
                });
            }
        }
        Ok(Reservation::None) => {}
    }
    if is_true(&cpu.options, "align-by-socket")
        && topology.sockets.len() > topology.numa_nodes.len()
    {
        return Err(NodeConfigProblem {
            reason: "AlignBySocketUnsupported",
            message: format!(
                "cpuManager.options[align-by-socket]: this node has more sockets ({}) than NUMA nodes ({}), which the kubelet does not support",
                topology.sockets.len(),
                topology.numa_nodes.len()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
