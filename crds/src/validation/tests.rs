//! Tests of the Kubernetes-specific validation: label selectors, the policy spec's defaults,
//! the checks against a node's reported topology. The configuration's rules are tested in the
//! engine (`nodetopo_engine::spec::validate`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use nodetopo_engine::report::{NumaNodeReport, SocketReport};

use super::*;
use crate::config::CpuManagerPolicy;

fn static_cpu(pairs: &[(&str, &str)]) -> CpuManagerConfig {
    CpuManagerConfig {
        policy: CpuManagerPolicy::Static,
        options: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        reserved_system_cpus: Some("0-1".into()),
        reserved_cpus: None,
    }
}

fn messages(errs: &[ValidationError]) -> Vec<&str> {
    errs.iter().map(|e| e.message.as_str()).collect()
}

#[test]
fn selector_operators() {
    let req = |op: &str, values: Option<Vec<&str>>| LabelSelectorRequirement {
        key: "k".into(),
        operator: op.into(),
        values: values.map(|v| v.into_iter().map(String::from).collect()),
    };
    let sel = LabelSelector {
        match_expressions: Some(vec![
            req("In", Some(vec!["a"])),
            req("In", None),
            req("Exists", Some(vec!["x"])),
            req("Matches", None),
            req("DoesNotExist", None),
        ]),
        match_labels: None,
    };
    let errs = validate_selector(&sel, "spec.nodeSelector");
    assert_eq!(
        messages(&errs),
        vec![
            rules::SELECTOR_VALUES_REQUIRED.message,
            rules::SELECTOR_VALUES_FORBIDDEN.message,
            rules::SELECTOR_OPERATOR_MESSAGE,
        ]
    );
}

#[test]
fn policy_spec_defaults_are_valid() {
    assert_eq!(
        validate_policy_spec(&NodeResourcePolicySpec::default()),
        vec![]
    );
}

fn topo(cpus: &str, sockets: usize, numa: usize) -> TopologyReport {
    TopologyReport {
        cpus: cpus.into(),
        sockets: (0..sockets as u64)
            .map(|id| SocketReport {
                id,
                cpus: String::new(),
            })
            .collect(),
        numa_nodes: (0..numa as u64)
            .map(|id| NumaNodeReport {
                id,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn node_checks() {
    let t = topo("0-7", 1, 1);
    assert_eq!(check_on_node(&static_cpu(&[]), &t), Ok(()));
    let mut c = static_cpu(&[]);
    c.reserved_system_cpus = Some("6-9".into());
    let p = check_on_node(&c, &t).unwrap_err();
    assert_eq!(p.reason, "ReservedCPUsAbsent");
    assert_eq!(
        p.message,
        "cpuManager.reservedSystemCPUs: CPUs 8-9 do not exist on this node (online CPUs 0-7)"
    );
    c.reserved_system_cpus = Some("0-7".into());
    assert_eq!(
        check_on_node(&c, &t).unwrap_err().reason,
        "NoAssignableCPUs"
    );
    let count = CpuManagerConfig {
        policy: CpuManagerPolicy::Static,
        reserved_cpus: Some(8),
        ..Default::default()
    };
    assert_eq!(
        check_on_node(&count, &t).unwrap_err().message,
        "cpuManager.reservedCPUs: 8 reserved of 8 online CPUs leaves none for containers"
    );
    let sock = static_cpu(&[("align-by-socket", "true")]);
    assert_eq!(
        check_on_node(&sock, &topo("0-7", 2, 1)).unwrap_err().reason,
        "AlignBySocketUnsupported"
    );
    assert_eq!(check_on_node(&sock, &topo("0-7", 2, 2)), Ok(()));
}
