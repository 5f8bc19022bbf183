//! The change planner's table: hand-made (config, state, pods, desired config) cases with
//! the plan each must give, including kubernetes PR #129079's review case (a reserved set
//! that grows into a container's CPUs) and issue #136604 (a state left inconsistent by a
//! kubelet killed between its two writes).
//!
//! Every case also checks the planner's own contract: a state it plans to write is accepted
//! by the kubelet's start-up check under the desired configuration, and survives the
//! checkpoint writer and reader in both formats.

use std::collections::BTreeMap;

use nodetopo_engine::change::{
    check_config, kubelet_start, plan_change, ChangeClass, ChangeInput, ChangePlan,
    KubeletCpuState, OwnedConfig,
};
use nodetopo_engine::cpumanager::CpuState;
use nodetopo_engine::spec::CpuManagerPolicy;
use nodetopo_engine::{Container, CpuInfo, CpuSet, CpuTopology, NumaNode, Pod, ResourceList};
use nodetopo_kubelet::cpu_checkpoint::{self as checkpoint, CheckpointFormat};

/// 16 CPUs, 8 cores of 2 threads (CPU i and i+8 are siblings), NUMA 0 = cores 0-3,
/// NUMA 1 = cores 4-7.
fn machine() -> CpuTopology {
    let cpus = (0..16)
        .map(|id| CpuInfo {
            id,
            core: id % 8,
            socket: 0,
            numa: (id % 8) / 4,
            uncore: 0,
        })
        .collect();
    let numa = (0..2)
        .map(|n| NumaNode {
            id: n,
            cpus: CpuSet::from_ids((0..16).filter(|c| (c % 8) / 4 == n)),
            distances: None,
            memory_bytes: None,
            hugepages: vec![],
        })
        .collect();
    CpuTopology::with_derived_counts(cpus, numa, vec![]).unwrap()
}

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

fn static_cfg(reserved: &str) -> OwnedConfig {
    OwnedConfig {
        cpu_manager_policy: CpuManagerPolicy::Static,
        reserved_system_cpus: set(reserved),
        ..Default::default()
    }
}

fn with_opt(mut c: OwnedConfig, k: &str, v: &str) -> OwnedConfig {
    c.cpu_manager_policy_options.insert(k.into(), v.into());
    c
}

fn with_tm(mut c: OwnedConfig, policy: &str, scope: &str) -> OwnedConfig {
    c.topology_manager_policy = policy.parse().unwrap();
    c.topology_manager_scope = scope.parse().unwrap();
    c
}

fn with_tm_opt(mut c: OwnedConfig, k: &str, v: &str) -> OwnedConfig {
    c.topology_manager_policy_options.insert(k.into(), v.into());
    c
}

fn state(policy: &str, default: &str, entries: &[(&str, &str, &str)]) -> KubeletCpuState {
    let mut st = CpuState {
        default_cpuset: set(default),
        assignments: BTreeMap::new(),
    };
    for (uid, c, cpus) in entries {
        st.set(uid, c, set(cpus));
    }
    KubeletCpuState {
        policy_name: policy.into(),
        state: st,
    }
}

fn res(cpu_millis: u64) -> ResourceList {
    ResourceList {
        cpu_millis: Some(cpu_millis),
        memory_bytes: Some(1 << 30),
        ..Default::default()
    }
}

/// A pod `default/<uid>` whose containers request (= limit) the given CPU millis.
fn pod(uid: &str, containers: &[(&str, u64)]) -> Pod {
    Pod {
        namespace: "default".into(),
        name: uid.into(),
        uid: uid.into(),
        init_containers: vec![],
        containers: containers
            .iter()
            .map(|(n, m)| Container {
                name: (*n).into(),
                requests: res(*m),
                limits: res(*m),
                restartable: false,
            })
            .collect(),
    }
}

fn burstable(uid: &str) -> Pod {
    let mut p = pod(uid, &[("app", 2000)]);
    p.containers[0].limits.cpu_millis = Some(4000);
    p
}

struct Case {
    name: &'static str,
    current: OwnedConfig,
    state: Option<KubeletCpuState>,
    pods: Vec<Pod>,
    desired: OwnedConfig,
}

fn run(c: &Case) -> Result<ChangePlan, String> {
    let t = machine();
    plan_change(ChangeInput {
        topology: &t,
        current: &c.current,
        state: c.state.as_ref(),
        pods: &c.pods,
        desired: &c.desired,
    })
    .map_err(|e| e.to_string())
}

/// The planner's contract, checked for every successful plan.
fn check_contract(c: &Case, plan: &ChangePlan) {
    let t = machine();
    let desired = check_config(&t, &c.desired, "desired").unwrap();
    let written = plan.new_state.as_ref();
    if let Some(w) = written {
        let started = kubelet_start(&desired, Some(w));
        assert!(
            started.is_ok(),
            "{}: planned state refused: {started:?}",
            c.name
        );
        for f in [CheckpointFormat::V2, CheckpointFormat::V4] {
            let text = checkpoint::render(w, f);
            let back = checkpoint::parse(&text).unwrap().engine_state().unwrap();
            assert_eq!(&back, w, "{}: {f:?} round trip", c.name);
        }
    }
    let classes: Vec<ChangeClass> = plan.steps.iter().map(|s| s.class).collect();
    assert!(!classes.is_empty(), "{}: no step", c.name);
    assert_eq!(plan.class, *classes.iter().max().unwrap(), "{}", c.name);
    let needs_write =
        classes.contains(&ChangeClass::RewriteState) || classes.contains(&ChangeClass::Drain);
    assert_eq!(
        written.is_some(),
        needs_write,
        "{}: new_state vs classes {classes:?}",
        c.name
    );
    for s in &plan.steps {
        assert!(!s.reason.is_empty(), "{}: empty reason", c.name);
    }
}

fn classes(p: &ChangePlan) -> Vec<ChangeClass> {
    p.steps.iter().map(|s| s.class).collect()
}

fn evicted(p: &ChangePlan) -> Vec<String> {
    p.steps
        .iter()
        .filter(|s| s.class == ChangeClass::EvictFirst)
        .flat_map(|s| s.pods.clone())
        .collect()
}

use ChangeClass::*;

#[test]
fn planner_table() {
    let base = static_cfg("0,8");
    // A valid state under `base`: pod a holds 2-3 (NUMA 0), pod b holds 4,12 (core 4).
    let valid = state(
        "static",
        "0-1,5-11,13-15",
        &[("a", "app", "2-3"), ("b", "app", "4,12")],
    );
    let pods = vec![
        pod("a", &[("app", 2000)]),
        pod("b", &[("app", 2000)]),
        burstable("c"),
    ];
    let mut n = 0;
    let mut expect = |c: Case, want: &[ChangeClass], check: &dyn Fn(&ChangePlan)| {
        let plan = run(&c).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        check_contract(&c, &plan);
        assert_eq!(classes(&plan), want, "{}: {:#?}", c.name, plan);
        check(&plan);
        n += 1;
    };
    let nothing = |_: &ChangePlan| {};

    expect(
        Case {
            name: "identical config, valid state",
            current: base.clone(),
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: base.clone(),
        },
        &[NoChange],
        &|p| assert!(p.config_changes.is_empty()),
    );
    expect(
        Case {
            name: "identical config, no state file",
            current: base.clone(),
            state: None,
            pods: vec![],
            desired: base.clone(),
        },
        &[NoChange],
        &nothing,
    );
    expect(
        Case {
            name: "#136604 overlap: assignment written, shared pool not yet",
            current: base.clone(),
            state: Some(state(
                "static",
                "0-3,5-11,13-15",
                &[("a", "app", "2-3"), ("b", "app", "4,12")],
            )),
            pods: pods.clone(),
            desired: base.clone(),
        },
        &[RewriteState],
        &|p| {
            assert_eq!(
                p.new_state.as_ref().unwrap().state.default_cpuset,
                set("0-1,5-11,13-15")
            );
            assert!(
                p.steps[0].reason.contains("136604"),
                "{}",
                p.steps[0].reason
            );
        },
    );
    expect(
        Case {
            name: "#136604 leak: container removed, CPUs not returned",
            current: base.clone(),
            state: Some(state("static", "0-1,5-11,13-15", &[("b", "app", "4,12")])),
            pods: pods.clone(),
            desired: base.clone(),
        },
        &[RewriteState],
        &|p| {
            assert_eq!(
                p.new_state.as_ref().unwrap().state.default_cpuset,
                set("0-3,5-11,13-15")
            )
        },
    );
    expect(
        Case {
            name: "reserved grows into the shared pool",
            current: base.clone(),
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: static_cfg("0-1,8-9"),
        },
        &[RestartOnly],
        &|p| {
            assert!(
                p.steps[0].reason.contains("shared pool"),
                "{}",
                p.steps[0].reason
            )
        },
    );
    expect(
        Case {
            name: "reserved shrinks",
            current: static_cfg("0-1,8-9"),
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: base.clone(),
        },
        &[RestartOnly],
        &nothing,
    );
    expect(
        Case {
            name: "#129079 review case: reserved grows into a container's CPUs",
            current: base.clone(),
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: static_cfg("0-3,8-11"),
        },
        &[EvictFirst, RestartOnly],
        &|p| {
            assert_eq!(evicted(p), vec!["default/a"]);
            assert_eq!(
                p.expected_state.as_ref().unwrap().default_cpuset,
                set("0-3,5-11,13-15")
            );
        },
    );
    expect(
        Case {
            name: "reserved moves to another core, both containers kept",
            current: base.clone(),
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: static_cfg("7,15"),
        },
        &[RestartOnly],
        &nothing,
    );
    expect(
        Case {
            name: "strict-cpu-reservation turned on",
            current: base.clone(),
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: with_opt(base.clone(), "strict-cpu-reservation", "true"),
        },
        &[RewriteState],
        &|p| {
            assert_eq!(
                p.new_state.as_ref().unwrap().state.default_cpuset,
                set("1,5-7,9-11,13-15")
            )
        },
    );
    expect(
        Case {
            name: "strict-cpu-reservation turned off",
            current: with_opt(base.clone(), "strict-cpu-reservation", "true"),
            state: Some(state(
                "static",
                "1,5-7,9-11,13-15",
                &[("a", "app", "2-3"), ("b", "app", "4,12")],
            )),
            pods: pods.clone(),
            desired: base.clone(),
        },
        &[RewriteState],
        &|p| {
            assert_eq!(
                p.new_state.as_ref().unwrap().state.default_cpuset,
                set("0-1,5-11,13-15")
            )
        },
    );
    expect(
        Case {
            name: "strict on and reserved grows into a container",
            current: base.clone(),
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: with_opt(static_cfg("0,3,8"), "strict-cpu-reservation", "true"),
        },
        &[EvictFirst, RewriteState],
        &|p| {
            assert_eq!(evicted(p), vec!["default/a"]);
            assert_eq!(
                p.new_state.as_ref().unwrap().state.default_cpuset,
                set("1-2,5-7,9-11,13-15")
            );
        },
    );
    expect(
        Case {
            name: "strict on leaves no shared CPU",
            current: base.clone(),
            state: Some(state(
                "static",
                "0,8",
                &[("a", "app", "1-7"), ("b", "app", "9-15")],
            )),
            pods: vec![pod("a", &[("app", 7000)]), pod("b", &[("app", 7000)])],
            desired: with_opt(base.clone(), "strict-cpu-reservation", "true"),
        },
        &[Drain],
        &|p| assert_eq!(p.steps[0].pods, vec!["default/a", "default/b"]),
    );
    expect(
        Case {
            name: "strict on, empty state file",
            current: base.clone(),
            state: Some(state("static", "", &[])),
            pods: vec![],
            desired: with_opt(base.clone(), "strict-cpu-reservation", "true"),
        },
        &[RestartOnly],
        &|p| {
            assert_eq!(
                p.expected_state.as_ref().unwrap().default_cpuset,
                set("1-7,9-15")
            )
        },
    );
    expect(
        Case {
            name: "none -> static",
            current: OwnedConfig::default(),
            state: Some(state("none", "", &[])),
            pods: pods.clone(),
            desired: base.clone(),
        },
        &[Drain],
        &|p| {
            assert_eq!(
                p.steps[0].pods,
                vec!["default/a", "default/b"],
                "burstable c is not listed"
            );
            assert!(p.steps[0].reason.contains("unpinned"));
            assert_eq!(p.new_state.as_ref().unwrap().policy_name, "static");
        },
    );
    expect(
        Case {
            name: "static -> none",
            current: base.clone(),
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: OwnedConfig::default(),
        },
        &[Drain],
        &|p| {
            assert_eq!(p.steps[0].pods, vec!["default/a", "default/b"]);
            assert_eq!(p.new_state.as_ref().unwrap().policy_name, "none");
        },
    );
    expect(
        Case {
            name: "none, topology manager change",
            current: OwnedConfig::default(),
            state: Some(state("none", "", &[])),
            pods: pods.clone(),
            desired: with_tm(OwnedConfig::default(), "best-effort", "container"),
        },
        &[RestartOnly],
        &nothing,
    );
    expect(
        Case {
            name: "full-pcpus-only on, half a core held",
            current: base.clone(),
            state: Some(state(
                "static",
                "0-1,3,5-11,13-15",
                &[("a", "app", "2"), ("b", "app", "4,12")],
            )),
            pods: vec![pod("a", &[("app", 1000)]), pod("b", &[("app", 2000)])],
            desired: with_opt(base.clone(), "full-pcpus-only", "true"),
        },
        &[RestartOnly],
        &|p| {
            assert_eq!(p.non_conforming.len(), 1);
            assert_eq!(p.non_conforming[0].pod, "default/a");
            assert!(
                p.non_conforming[0].why.contains("2,10"),
                "{}",
                p.non_conforming[0].why
            );
        },
    );
    expect(
        Case {
            name: "full-pcpus-only on, whole cores held",
            current: base.clone(),
            state: Some(state("static", "0-1,3-9,11-15", &[("a", "app", "2,10")])),
            pods: vec![pod("a", &[("app", 2000)])],
            desired: with_opt(base.clone(), "full-pcpus-only", "true"),
        },
        &[RestartOnly],
        &|p| assert!(p.non_conforming.is_empty()),
    );
    expect(
        Case {
            name: "single-numa-node, a container across NUMA nodes",
            current: base.clone(),
            state: Some(state(
                "static",
                "0-2,5-11,13-15",
                &[("a", "app", "3-4"), ("b", "app", "12")],
            )),
            pods: vec![pod("a", &[("app", 2000)]), pod("b", &[("app", 1000)])],
            desired: with_tm(base.clone(), "single-numa-node", "container"),
        },
        &[EvictFirst, RestartOnly],
        &|p| assert_eq!(evicted(p), vec!["default/a"]),
    );
    expect(
        Case {
            name: "single-numa-node, containers within a NUMA node",
            current: base.clone(),
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: with_tm(base.clone(), "single-numa-node", "container"),
        },
        &[RestartOnly],
        &nothing,
    );
    expect(
        Case {
            name: "restricted, 10 CPUs on two NUMA nodes (one node has only 8)",
            current: base.clone(),
            state: Some(state(
                "static",
                "0,8,15",
                &[("a", "app", "1-7,9-11"), ("b", "app", "12-14")],
            )),
            pods: vec![pod("a", &[("app", 10000)]), pod("b", &[("app", 3000)])],
            desired: with_tm(base.clone(), "restricted", "container"),
        },
        &[RestartOnly],
        &nothing,
    );
    expect(
        Case {
            name: "restricted, 2 CPUs on two NUMA nodes",
            current: base.clone(),
            state: Some(state(
                "static",
                "0-2,5-11,13-15",
                &[("a", "app", "3-4"), ("b", "app", "12")],
            )),
            pods: vec![pod("a", &[("app", 2000)]), pod("b", &[("app", 1000)])],
            desired: with_tm(base.clone(), "restricted", "container"),
        },
        &[EvictFirst, RestartOnly],
        &|p| assert_eq!(evicted(p), vec!["default/a"]),
    );
    let split = state(
        "static",
        "0-1,5-11,13-15",
        &[("m", "one", "2-3"), ("m", "two", "4,12")],
    );
    let split_pods = vec![pod("m", &[("one", 2000), ("two", 2000)])];
    expect(
        Case {
            name: "single-numa-node pod scope, containers on different NUMA nodes",
            current: base.clone(),
            state: Some(split.clone()),
            pods: split_pods.clone(),
            desired: with_tm(base.clone(), "single-numa-node", "pod"),
        },
        &[EvictFirst, RestartOnly],
        &|p| assert_eq!(evicted(p), vec!["default/m"]),
    );
    expect(
        Case {
            name: "single-numa-node container scope, same pod",
            current: base.clone(),
            state: Some(split.clone()),
            pods: split_pods.clone(),
            desired: with_tm(base.clone(), "single-numa-node", "container"),
        },
        &[RestartOnly],
        &nothing,
    );
    let mut closest = with_tm(base.clone(), "best-effort", "container");
    closest
        .topology_manager_policy_options
        .insert("prefer-closest-numa-nodes".into(), "true".into());
    expect(
        Case {
            name: "topology manager option",
            current: with_tm(base.clone(), "best-effort", "container"),
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: closest,
        },
        &[RestartOnly],
        &|p| assert_eq!(p.config_changes.len(), 1),
    );
    expect(
        Case {
            name: "distribute-cpus-across-numa on",
            current: base.clone(),
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: with_opt(base.clone(), "distribute-cpus-across-numa", "true"),
        },
        &[RestartOnly],
        &|p| assert!(p.steps[0].reason.contains("future admissions")),
    );
    expect(
        Case {
            name: "assignment on a CPU that is not online",
            current: base.clone(),
            state: Some(state(
                "static",
                "0-1,5-11,13-15",
                &[
                    ("a", "app", "2-3"),
                    ("b", "app", "4,12"),
                    ("z", "app", "20"),
                ],
            )),
            pods: pods.clone(),
            desired: static_cfg("0-1,8-9"),
        },
        &[EvictFirst, RewriteState],
        &|p| {
            assert_eq!(
                evicted(p),
                vec!["z"],
                "a pod not in the pod list is named by UID"
            )
        },
    );
    expect(
        Case {
            name: "checkpoint policy differs from the configured one (kubelet down)",
            current: base.clone(),
            state: Some(state("none", "", &[])),
            pods: pods.clone(),
            desired: base.clone(),
        },
        &[Drain],
        &nothing,
    );
    let mut by_count = base.clone();
    by_count.reserved_system_cpus = CpuSet::new();
    by_count.reserved_cpu_count = Some(2);
    expect(
        Case {
            name: "reserved by count -> the same CPUs explicitly",
            current: by_count,
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired: base.clone(),
        },
        &[RestartOnly],
        &|p| assert_eq!(p.config_changes.len(), 1, "{:?}", p.config_changes),
    );
    expect(
        Case {
            name: "#136604 overlap while the reserved set changes",
            current: base.clone(),
            state: Some(state(
                "static",
                "0-3,5-11,13-15",
                &[("a", "app", "2-3"), ("b", "app", "4,12")],
            )),
            pods: pods.clone(),
            desired: static_cfg("0-1,8-9"),
        },
        &[RewriteState],
        &|p| {
            assert_eq!(
                p.new_state.as_ref().unwrap().state.default_cpuset,
                set("0-1,5-11,13-15")
            )
        },
    );
    expect(
        Case {
            name: "no state file, reserved change",
            current: base.clone(),
            state: None,
            pods: vec![],
            desired: static_cfg("0-1,8-9"),
        },
        &[RestartOnly],
        &nothing,
    );
    expect(
        Case {
            name: "topology manager stricter but nothing pinned",
            current: base.clone(),
            state: Some(state("static", "0-15", &[])),
            pods: vec![burstable("c")],
            desired: with_tm(base.clone(), "single-numa-node", "pod"),
        },
        &[RestartOnly],
        &nothing,
    );

    // Configurations the kubelet itself refuses are errors naming the side and the field.
    let bad: Vec<(&str, OwnedConfig, OwnedConfig, &str)> = vec![
        (
            "unknown CPU option",
            base.clone(),
            with_opt(base.clone(), "go-faster", "true"),
            "desired kubelet configuration: cpuManagerPolicyOptions",
        ),
        (
            "bad option value",
            base.clone(),
            with_opt(base.clone(), "full-pcpus-only", "yes"),
            "ParseBool",
        ),
        (
            "incompatible options",
            base.clone(),
            with_opt(
                with_opt(base.clone(), "full-pcpus-only", "true"),
                "distribute-cpus-across-cores",
                "true",
            ),
            "can not be used at the same time",
        ),
        (
            "align-by-socket with single-numa-node",
            base.clone(),
            with_tm(
                with_opt(base.clone(), "align-by-socket", "true"),
                "single-numa-node",
                "container",
            ),
            "align-by-socket",
        ),
        (
            "static without reserved CPUs",
            base.clone(),
            static_cfg(""),
            "greater than zero",
        ),
        (
            // A policy or scope name the kubelet does not know cannot be an OwnedConfig:
            // the kubelet config reader refuses it, naming the file
            // (nodetopo-kubelet's an_unknown_policy_name_names_the_field_and_the_file).
            "CPU options under policy none",
            base.clone(),
            with_opt(OwnedConfig::default(), "full-pcpus-only", "true"),
            "cpuManagerPolicyOptions are set but cpuManagerPolicy is none",
        ),
        (
            "bad topology option",
            base.clone(),
            with_tm_opt(base.clone(), "max-allowable-numa-nodes", "4"),
            "desired kubelet configuration: topologyManagerPolicyOptions",
        ),
        (
            "reserved CPU not on the machine",
            base.clone(),
            static_cfg("0,40"),
            "unknown CPU ID: 40",
        ),
        (
            "broken current configuration",
            with_tm_opt(base.clone(), "prefer-closest-numa-nodes", "maybe"),
            base.clone(),
            "current kubelet configuration: topologyManagerPolicyOptions",
        ),
    ];
    let mut n_bad = 0;
    for (name, current, desired, want) in bad {
        let c = Case {
            name,
            current,
            state: Some(valid.clone()),
            pods: pods.clone(),
            desired,
        };
        let err = run(&c).expect_err(name);
        assert!(err.contains(want), "{name}: {err}");
        n_bad += 1;
    }
    println!("change planner table: {n} plans checked, {n_bad} refused configurations checked");
    assert!(n + n_bad >= 30);
}

/// Feature gates (k8s.io/kubernetes v1.37.2's `CheckPolicyOptionAvailable` per manager):
/// alpha options need the alpha gate (default off), beta ones the beta gate (default on),
/// stable ones nothing; every option present counts, whatever its value.
#[test]
fn feature_gates_the_kubelet_checks() {
    let gates = |pairs: &[(&str, bool)]| -> BTreeMap<String, bool> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    };
    let stable = with_opt(
        with_opt(static_cfg("0"), "strict-cpu-reservation", "true"),
        "full-pcpus-only",
        "true",
    );
    let alpha = with_opt(static_cfg("0"), "align-by-socket", "false");
    let beta = with_opt(static_cfg("0"), "distribute-cpus-across-numa", "true");
    let mut tm_beta = static_cfg("0");
    tm_beta
        .topology_manager_policy_options
        .insert("max-allowable-numa-nodes".into(), "16".into());
    type GateCase<'a> = (
        &'a str,
        &'a OwnedConfig,
        BTreeMap<String, bool>,
        &'a [&'a str],
    );
    let cases: Vec<GateCase> = vec![
        ("stable options, no gates", &stable, gates(&[]), &[]),
        (
            "stable options, every gate off",
            &stable,
            gates(&[
                ("CPUManagerPolicyAlphaOptions", false),
                ("CPUManagerPolicyBetaOptions", false),
            ]),
            &[],
        ),
        (
            "alpha option (value false), gate absent",
            &alpha,
            gates(&[]),
            &[
                "align-by-socket is alpha",
                "CPUManagerPolicyAlphaOptions is true (it is off by default",
            ],
        ),
        (
            "alpha option, gate on",
            &alpha,
            gates(&[("CPUManagerPolicyAlphaOptions", true)]),
            &[],
        ),
        (
            "beta option, gate absent (on by default)",
            &beta,
            gates(&[]),
            &[],
        ),
        (
            "beta option, gate off",
            &beta,
            gates(&[("CPUManagerPolicyBetaOptions", false)]),
            &[
                "distribute-cpus-across-numa is beta",
                "the kubelet's configuration sets it false",
            ],
        ),
        (
            "beta topology option (the vectors' revision), topology beta gate off",
            &tm_beta,
            gates(&[("TopologyManagerPolicyBetaOptions", false)]),
            &["max-allowable-numa-nodes is beta"],
        ),
        // component-base's AllAlpha/AllBeta (issue 28: `AllBeta: false` used to be
        // ignored): they set every alpha/beta gate not set by name.
        (
            "beta option, AllBeta false",
            &beta,
            gates(&[("AllBeta", false)]),
            &[
                "distribute-cpus-across-numa is beta",
                "sets AllBeta false and does not set CPUManagerPolicyBetaOptions",
            ],
        ),
        (
            "beta option, AllBeta false but the gate set by name",
            &beta,
            gates(&[("AllBeta", false), ("CPUManagerPolicyBetaOptions", true)]),
            &[],
        ),
        (
            "alpha option, AllAlpha true",
            &alpha,
            gates(&[("AllAlpha", true)]),
            &[],
        ),
        (
            "alpha option, AllAlpha true but the gate off by name",
            &alpha,
            gates(&[("AllAlpha", true), ("CPUManagerPolicyAlphaOptions", false)]),
            &["the kubelet's configuration sets it false"],
        ),
        (
            "beta option, AllAlpha false leaves beta gates alone",
            &beta,
            gates(&[("AllAlpha", false)]),
            &[],
        ),
    ];
    let n = cases.len();
    for (name, cfg, g, want) in cases {
        let got = nodetopo_engine::change::gate_problems(cfg, &g);
        if want.is_empty() {
            assert!(got.is_empty(), "{name}: {got:?}");
        } else {
            assert_eq!(got.len(), 1, "{name}: {got:?}");
            for w in want {
                assert!(got[0].contains(w), "{name}: {w:?} in {}", got[0]);
            }
        }
    }
    println!("feature-gate cases: {n}");
}
