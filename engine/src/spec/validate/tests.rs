//! Case-by-case tests of the configuration's validation: each rule's exact message and
//! field path. Option names come from the engine's option table, so a new option needs no
//! edit here.

use std::collections::BTreeMap;

use super::*;
use crate::cpumanager::options::{CPU_OPTIONS, INCOMPATIBLE};
use crate::spec::TopologyManagerScope;

fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn static_cpu(pairs: &[(&str, &str)]) -> CpuManagerConfig {
    CpuManagerConfig {
        policy: CpuManagerPolicy::Static,
        options: opts(pairs),
        reserved_system_cpus: Some("0-1".into()),
        reserved_cpus: None,
    }
}

fn messages(errs: &[ValidationError]) -> Vec<&str> {
    errs.iter().map(|e| e.message.as_str()).collect()
}

#[test]
fn valid_static_config_passes() {
    let c = static_cpu(&[
        ("full-pcpus-only", "true"),
        ("prefer-align-cpus-by-uncorecache", "true"),
    ]);
    assert_eq!(validate_cpu_manager(&c, "spec.cpuManager"), vec![]);
    let none = CpuManagerConfig::default();
    assert_eq!(validate_cpu_manager(&none, "spec.cpuManager"), vec![]);
}

/// The known-names message as the API states it, from the table sorted at run time.
fn known_message() -> String {
    let mut names: Vec<&str> = CPU_OPTIONS.iter().map(|o| o.name).collect();
    names.sort_unstable();
    format!(
        "cpuManager.options: unknown option name; known options are {}",
        names.join(", ")
    )
}

#[test]
fn unknown_cpu_option_names_field_and_key() {
    let errs = validate_cpu_manager(
        &static_cpu(&[("full-pcpu-only", "true")]),
        "spec.cpuManager",
    );
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field, "spec.cpuManager.options[full-pcpu-only]");
    assert_eq!(errs[0].message, known_message());
    assert_eq!(
        errs[0].to_string(),
        format!(
            "{} (at spec.cpuManager.options[full-pcpu-only]: unknown option \"full-pcpu-only\")",
            errs[0].message
        )
    );
}

#[test]
fn non_boolean_cpu_option_value() {
    for bad in ["yes", "1", "True", ""] {
        let errs =
            validate_cpu_manager(&static_cpu(&[("full-pcpus-only", bad)]), "spec.cpuManager");
        assert_eq!(
            messages(&errs),
            vec!["cpuManager.options: every option value must be \"true\" or \"false\""],
            "value {bad:?}"
        );
        assert_eq!(
            errs[0].detail.as_deref(),
            Some(format!("value {bad:?}").as_str())
        );
    }
}

#[test]
fn each_incompatible_pair_is_rejected_only_when_both_true() {
    for (a, b) in INCOMPATIBLE {
        let msg = format!(
            "cpuManager.options: {a} and {b} cannot both be \"true\" (the kubelet rejects the combination)"
        );
        let errs =
            validate_cpu_manager(&static_cpu(&[(a, "true"), (b, "true")]), "spec.cpuManager");
        assert_eq!(messages(&errs), vec![msg.as_str()]);
        assert_eq!(errs[0].field, "spec.cpuManager.options");
        let ok = validate_cpu_manager(&static_cpu(&[(a, "true"), (b, "false")]), "spec.cpuManager");
        assert_eq!(ok, vec![], "{a}=true {b}=false is fine");
    }
    println!("incompatible pairs checked: {}", INCOMPATIBLE.len());
    // Every option alone, and every compatible pair, stays valid.
    let mut compatible = 0;
    for (i, a) in CPU_OPTIONS.iter().enumerate() {
        let alone = static_cpu(&[(a.name, "true")]);
        assert_eq!(
            validate_cpu_manager(&alone, "spec.cpuManager"),
            vec![],
            "{}",
            a.name
        );
        for b in &CPU_OPTIONS[i + 1..] {
            let conflict = INCOMPATIBLE
                .iter()
                .any(|p| *p == (a.name, b.name) || *p == (b.name, a.name));
            if !conflict {
                let both = static_cpu(&[(a.name, "true"), (b.name, "true")]);
                assert_eq!(
                    validate_cpu_manager(&both, "spec.cpuManager"),
                    vec![],
                    "{} with {}",
                    a.name,
                    b.name
                );
                compatible += 1;
            }
        }
    }
    println!("compatible pairs checked: {compatible}");
    // Compatible combinations stay valid.
    let ok = static_cpu(&[
        ("full-pcpus-only", "true"),
        ("distribute-cpus-across-numa", "true"),
        ("strict-cpu-reservation", "true"),
        ("align-by-socket", "true"),
    ]);
    assert_eq!(validate_cpu_manager(&ok, "spec.cpuManager"), vec![]);
}

#[test]
fn reserved_system_cpus_syntax_and_ranges() {
    for good in ["0", "0-1", "0,2,4-7", "0-3,64-67", "99999"] {
        let mut c = static_cpu(&[]);
        c.reserved_system_cpus = Some(good.into());
        assert_eq!(
            validate_cpu_manager(&c, "spec.cpuManager"),
            vec![],
            "{good}"
        );
    }
    for bad in [
        "", "0-", "a", "0 - 1", "0,,1", "0-1-2", "123456", " 0", "0,",
    ] {
        let mut c = static_cpu(&[]);
        c.reserved_system_cpus = Some(bad.into());
        let errs = validate_cpu_manager(&c, "spec.cpuManager");
        assert_eq!(
            messages(&errs),
            vec!["cpuManager.reservedSystemCPUs: must be a CPU list such as \"0-1\" or \"0,2,4-7\" (CPU ids up to 5 digits and ranges, separated by commas, no spaces)"],
            "{bad:?}"
        );
        assert_eq!(errs[0].field, "spec.cpuManager.reservedSystemCPUs");
    }
    let mut c = static_cpu(&[]);
    c.reserved_system_cpus = Some("0,3-1".into());
    let errs = validate_cpu_manager(&c, "spec.cpuManager");
    assert_eq!(
        messages(&errs),
        vec!["cpuManager.reservedSystemCPUs: a range's start must not be greater than its end"]
    );
    assert_eq!(errs[0].detail.as_deref(), Some("range \"3-1\""));
}

#[test]
fn reservation_forms_exclude_each_other() {
    let mut c = static_cpu(&[]);
    c.reserved_cpus = Some(2);
    let errs = validate_cpu_manager(&c, "spec.cpuManager");
    assert_eq!(
        messages(&errs),
        vec!["cpuManager: set either reservedSystemCPUs or reservedCPUs, not both"]
    );
    assert_eq!(errs[0].field, "spec.cpuManager");
}

#[test]
fn static_needs_a_reservation() {
    let msg = "cpuManager: policy static needs a CPU reservation; set reservedSystemCPUs, or reservedCPUs greater than 0";
    for reserved_cpus in [None, Some(0)] {
        let c = CpuManagerConfig {
            policy: CpuManagerPolicy::Static,
            options: BTreeMap::new(),
            reserved_system_cpus: None,
            reserved_cpus,
        };
        assert_eq!(
            messages(&validate_cpu_manager(&c, "spec.cpuManager")),
            vec![msg]
        );
    }
    let c = CpuManagerConfig {
        policy: CpuManagerPolicy::Static,
        options: BTreeMap::new(),
        reserved_system_cpus: None,
        reserved_cpus: Some(1),
    };
    assert_eq!(validate_cpu_manager(&c, "spec.cpuManager"), vec![]);
}

#[test]
fn negative_reserved_count() {
    let c = CpuManagerConfig {
        policy: CpuManagerPolicy::None,
        reserved_cpus: Some(-1),
        ..Default::default()
    };
    assert_eq!(
        messages(&validate_cpu_manager(&c, "spec.cpuManager")),
        vec!["spec.cpuManager.reservedCPUs: must be 0 or more"]
    );
}

#[test]
fn options_need_static() {
    let c = CpuManagerConfig {
        policy: CpuManagerPolicy::None,
        options: opts(&[("full-pcpus-only", "true")]),
        ..Default::default()
    };
    assert_eq!(
        messages(&validate_cpu_manager(&c, "spec.cpuManager")),
        vec!["cpuManager.options: options need policy static (the kubelet's none policy accepts no options)"]
    );
}

#[test]
fn topology_manager_options() {
    let tm = |pairs: &[(&str, &str)]| TopologyManagerConfig {
        policy: TopologyManagerPolicy::BestEffort,
        scope: TopologyManagerScope::Container,
        options: opts(pairs),
    };
    let ok = tm(&[
        ("prefer-closest-numa-nodes", "true"),
        ("max-allowable-numa-nodes", "16"),
    ]);
    assert_eq!(
        validate_topology_manager(&ok, "spec.topologyManager"),
        vec![]
    );
    let errs =
        validate_topology_manager(&tm(&[("prefer-closest", "true")]), "spec.topologyManager");
    assert_eq!(
        messages(&errs),
        vec!["topologyManager.options: unknown option name; known options are max-allowable-numa-nodes, prefer-closest-numa-nodes"]
    );
    assert_eq!(
        errs[0].field,
        "spec.topologyManager.options[prefer-closest]"
    );
    let errs = validate_topology_manager(
        &tm(&[("prefer-closest-numa-nodes", "1")]),
        "spec.topologyManager",
    );
    assert_eq!(
        messages(&errs),
        vec!["topologyManager.options: prefer-closest-numa-nodes must be \"true\" or \"false\""]
    );
    for bad in ["7", "0", "eight", "1000", "-8", ""] {
        let errs = validate_topology_manager(
            &tm(&[("max-allowable-numa-nodes", bad)]),
            "spec.topologyManager",
        );
        assert_eq!(
            messages(&errs),
            vec!["topologyManager.options: max-allowable-numa-nodes must be a whole number from 8 (the kubelet's minimum) to 999"],
            "{bad:?}"
        );
    }
    for good in ["8", "64", "999"] {
        assert_eq!(
            validate_topology_manager(
                &tm(&[("max-allowable-numa-nodes", good)]),
                "spec.topologyManager"
            ),
            vec![]
        );
    }
}

#[test]
fn align_by_socket_with_single_numa_node() {
    let cpu = static_cpu(&[("align-by-socket", "true")]);
    let tm = TopologyManagerConfig {
        policy: TopologyManagerPolicy::SingleNumaNode,
        ..Default::default()
    };
    let errs = validate_config(&cpu, &tm, "spec");
    assert_eq!(
        messages(&errs),
        vec!["cpuManager.options: align-by-socket cannot be used with topologyManager.policy single-numa-node (the kubelet rejects the combination)"]
    );
    assert_eq!(errs[0].field, "spec.cpuManager.options[align-by-socket]");
    let tm = TopologyManagerConfig {
        policy: TopologyManagerPolicy::Restricted,
        ..Default::default()
    };
    assert_eq!(validate_config(&cpu, &tm, "spec"), vec![]);
}

#[test]
fn several_errors_are_all_reported() {
    let c = CpuManagerConfig {
        policy: CpuManagerPolicy::Static,
        options: opts(&[("bogus", "maybe")]),
        reserved_system_cpus: None,
        reserved_cpus: None,
    };
    let errs = validate_cpu_manager(&c, "spec.cpuManager");
    assert_eq!(errs.len(), 3, "{errs:?}");
    let joined = join(&errs);
    assert_eq!(joined, format!("{}; {}; {}", errs[0], errs[1], errs[2]));
}

#[test]
fn reservation_forms() {
    assert_eq!(
        reservation(&static_cpu(&[])),
        Ok(Reservation::Explicit(CpuSet::parse("0-1").unwrap()))
    );
    let c = CpuManagerConfig {
        reserved_cpus: Some(3),
        ..Default::default()
    };
    assert_eq!(reservation(&c), Ok(Reservation::Count(3)));
    assert_eq!(
        reservation(&CpuManagerConfig::default()),
        Ok(Reservation::None)
    );
}
