//! Tests of the core state machine: admission order, release, restore, spec changes,
//! kubelet agreement. Each asserts the exact outcome.

use super::*;
use nodetopo_crds::{CpuManagerConfig, CpuManagerPolicy, KubeletSource, TopologyManagerConfig};
use nodetopo_engine::{Container, CpuSet, Pod, ResourceList};
use nodetopo_kubelet::cpu_checkpoint::{CheckpointFormat, ChecksumCheck};

fn topo() -> CpuTopology {
    nodetopo_engine::presets::build("epyc-7303-2p").expect("preset")
}

fn spec(reserved: &str, tm: &str) -> NodeTopologySpec {
    NodeTopologySpec {
        cpu_manager: CpuManagerConfig {
            policy: CpuManagerPolicy::Static,
            reserved_system_cpus: Some(reserved.into()),
            ..Default::default()
        },
        topology_manager: TopologyManagerConfig {
            policy: serde_json::from_value(serde_json::json!(tm)).expect("tm policy"),
            ..Default::default()
        },
        policy_ref: None,
    }
}

fn pod(name: &str, uid: &str, created: &str, cpus: u64) -> PodInfo {
    let res = ResourceList {
        cpu_millis: Some(cpus * 1000),
        memory_bytes: Some(1 << 30),
        ..Default::default()
    };
    PodInfo {
        pod: Pod {
            namespace: "default".into(),
            name: name.into(),
            uid: uid.into(),
            init_containers: vec![],
            containers: vec![Container {
                name: "app".into(),
                requests: res.clone(),
                limits: res,
                restartable: false,
            }],
        },
        created: Some(Time(created.parse().expect("timestamp"))),
        terminal: false,
        phase: "Running".into(),
        kubelet_refusal: None,
        running: Default::default(),
    }
}

fn now() -> Time {
    Time("2030-01-01T00:00:00Z".parse().expect("ts"))
}

fn cpus_of(core: &Core) -> BTreeMap<String, String> {
    core.allocations()
        .map(|a| (a.pod.clone(), a.cpus.clone()))
        .collect()
}

#[test]
fn admits_in_creation_then_uid_order_and_waits_for_sync() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    // Events arrive in the "wrong" order; nothing happens before the list synced.
    core.apply(Event::PodUpsert(Box::new(pod(
        "late",
        "u-a",
        "2024-01-02T00:00:00Z",
        2,
    ))));
    assert!(!core.reconcile());
    core.apply(Event::PodsSynced(vec![
        pod("late", "u-a", "2024-01-02T00:00:00Z", 2),
        pod("early-b", "u-c", "2024-01-01T00:00:00Z", 2),
        pod("early-a", "u-b", "2024-01-01T00:00:00Z", 2),
    ]));
    assert!(core.reconcile());
    let st = core.status(&[], &now());
    let order: Vec<&str> = st.allocations.iter().map(|a| a.pod.as_str()).collect();
    assert_eq!(
        order,
        ["default/early-a", "default/early-b", "default/late"]
    );
    // The first admitted pod got the first free whole cores.
    assert_eq!(st.allocations[0].cpus, "1,33");
    assert!(conditions::is_true(&st.conditions, conditions::READY));
    assert_eq!(st.summary.as_ref().map(|s| s.exclusive_cpus), Some(6));
    // Idempotent: nothing pending, nothing changes.
    assert!(!core.reconcile());
}

#[test]
fn releases_on_delete_and_terminal_phase() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    core.apply(Event::PodsSynced(vec![
        pod("a", "ua", "2024-01-01T00:00:00Z", 2),
        pod("b", "ub", "2024-01-01T00:00:01Z", 2),
    ]));
    core.reconcile();
    core.apply(Event::PodDelete("ua".into()));
    let mut b = pod("b", "ub", "2024-01-01T00:00:01Z", 2);
    b.terminal = true;
    core.apply(Event::PodUpsert(Box::new(b)));
    assert!(core.reconcile());
    let st = core.status(&[], &now());
    assert!(st.allocations.is_empty());
    assert_eq!(st.pools.map(|p| p.exclusive), Some(String::new()));
}

#[test]
fn restore_keeps_cpus_and_drops_gone_pods() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    core.apply(Event::PodsSynced(vec![
        pod("a", "ua", "2024-01-01T00:00:00Z", 2),
        pod("b", "ub", "2024-01-01T00:00:01Z", 4),
    ]));
    core.reconcile();
    let before = cpus_of(&core);
    let cp = core.checkpoint().expect("checkpoint");
    // Restart: pod a is gone, a new pod c arrived (created earlier than b!).
    let mut again = Core::new(topo(), Some(cp), None);
    again.apply(Event::PodsSynced(vec![
        pod("b", "ub", "2024-01-01T00:00:01Z", 4),
        pod("c", "uc", "2023-01-01T00:00:00Z", 2),
    ]));
    again.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    again.reconcile();
    let after = cpus_of(&again);
    assert_eq!(after.get("default/b"), before.get("default/b"));
    assert!(!after.contains_key("default/a"));
    // c takes the CPUs a released, never b's.
    assert_eq!(after.get("default/c"), before.get("default/a"));
}

#[test]
fn spec_change_keeps_running_pods_and_names_them() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    core.apply(Event::PodsSynced(vec![pod(
        "a",
        "ua",
        "2024-01-01T00:00:00Z",
        2,
    )]));
    core.reconcile();
    let a_cpus = cpus_of(&core)["default/a"].clone();
    core.apply(Event::Spec(Some((
        spec("0,32", "single-numa-node"),
        Some(2),
    ))));
    core.apply(Event::PodUpsert(Box::new(pod(
        "b",
        "ub",
        "2024-01-01T00:00:01Z",
        2,
    ))));
    core.reconcile();
    let st = core.status(&[], &now());
    assert_eq!(st.observed_generation, Some(2));
    assert_eq!(cpus_of(&core)["default/a"], a_cpus);
    let gens: Vec<Option<i64>> = st.allocations.iter().map(|a| a.spec_generation).collect();
    assert_eq!(gens, [Some(1), Some(2)]);
    let c = conditions::find(&st.conditions, conditions::POLICY_CURRENT).expect("condition");
    assert_eq!(c.status, "False");
    assert_eq!(
        c.message,
        "pods admitted under an older spec keep their CPUs: default/a"
    );
    // A spec that cannot apply here (CPU 99 is absent) keeps the previous configuration.
    core.apply(Event::Spec(Some((spec("0,99", "none"), Some(3)))));
    let st = core.status(&st.conditions, &now());
    let inv = conditions::find(&st.conditions, conditions::INVALID).expect("invalid");
    assert_eq!(inv.status, "True");
    assert!(inv.message.contains("99"), "{}", inv.message);
    assert!(core.ready());
}

#[test]
fn invalid_spec_at_start_still_publishes_topology() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,99", "none"), Some(1)))));
    core.apply(Event::PodsSynced(vec![pod(
        "a",
        "ua",
        "2024-01-01T00:00:00Z",
        2,
    )]));
    assert!(!core.reconcile());
    let st = core.status(&[], &now());
    assert!(st.topology.is_some());
    assert!(st.allocations.is_empty());
    let ready = conditions::find(&st.conditions, conditions::READY).expect("ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "InvalidConfig")
    );
    assert!(core.checkpoint().is_none());
}

#[test]
fn kubelet_agreement_names_every_differing_container() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    core.apply(Event::PodsSynced(vec![
        pod("a", "ua", "2024-01-01T00:00:00Z", 2),
        pod("b", "ub", "2024-01-01T00:00:01Z", 2),
    ]));
    core.reconcile();
    let ours = core.checkpoint().expect("cp").entries;
    let mut entries: BTreeMap<String, BTreeMap<String, CpuSet>> = BTreeMap::new();
    entries.entry("ua".into()).or_default().insert(
        "app".into(),
        CpuSet::parse(&ours["ua"]["app"]).expect("set"),
    );
    entries
        .entry("ub".into())
        .or_default()
        .insert("app".into(), CpuSet::parse("10-11").expect("set"));
    let held = entries
        .values()
        .flat_map(|m| m.values())
        .fold(CpuSet::new(), |acc, s| acc.union(s));
    core.apply(Event::Kubelet(Ok(Some(CpuCheckpoint {
        policy_name: "static".into(),
        default_cpu_set: topo().all_cpus().difference(&held),
        entries,
        checksum: 1,
        format: CheckpointFormat::V2,
        pod_entries: Default::default(),
        checksum_check: ChecksumCheck::Verified,
    }))));
    let st = core.status(&[], &now());
    let k = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(k.status, "False");
    assert_eq!(
        k.message,
        format!(
            "1 containers differ: default/b/app (kubelet \"10-11\", nodetopo \"{}\")",
            ours["ub"]["app"]
        )
    );
    assert_eq!(st.kubelet.map(|k| k.assignments.len()), Some(2));
    // The kubelet runs the static policy: its assignments are what the status shows, and
    // nodetopo's decision is kept beside them as the prediction.
    let b = st
        .allocations
        .iter()
        .find(|a| a.pod_uid == "ub")
        .expect("allocation of b");
    assert_eq!(b.cpus, "10-11");
    assert_eq!(
        b.predicted_cpus.as_deref(),
        Some(ours["ub"]["app"].as_str())
    );
    let a = st
        .allocations
        .iter()
        .find(|a| a.pod_uid == "ua")
        .expect("allocation of a");
    assert_eq!(Some(a.cpus.as_str()), a.predicted_cpus.as_deref());
    core.apply(Event::Kubelet(Err(KubeletError::Read(
        std::sync::Arc::new(nodetopo_kubelet::cpu_checkpoint::ReadError::Invalid {
            path: "/x".into(),
            why: "denied".into(),
        }),
    ))));
    let st = core.status(&[], &now());
    let k = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(
        (k.reason.as_str(), k.message.as_str()),
        (
            "KubeletStateUnreadable",
            "kubelet CPU manager state /x: denied"
        )
    );
}

#[test]
fn rejected_checkpoint_is_reported_and_state_rebuilt() {
    let mut core = Core::new(
        topo(),
        None,
        Some((
            "CheckpointChecksumMismatch".into(),
            "checkpoint /s fails its checksum".into(),
        )),
    );
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    core.apply(Event::PodsSynced(vec![pod(
        "a",
        "ua",
        "2024-01-01T00:00:00Z",
        2,
    )]));
    core.reconcile();
    let st = core.status(&[], &now());
    let c = conditions::find(&st.conditions, conditions::CHECKPOINT_RESTORED).expect("cond");
    assert_eq!(c.status, "False");
    assert_eq!(c.reason, "CheckpointChecksumMismatch");
    assert_eq!(st.allocations.len(), 1);
}

/// A consistent checkpoint of pods u1..u3 (4 CPUs each) on the 64-CPU machine.
fn three_pod_checkpoint() -> (CheckpointData, Vec<PodInfo>) {
    let pods = vec![
        pod("p1", "u1", "2024-01-01T00:00:01Z", 4),
        pod("p2", "u2", "2024-01-01T00:00:02Z", 4),
        pod("p3", "u3", "2024-01-01T00:00:03Z", 4),
    ];
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    core.apply(Event::PodsSynced(pods.clone()));
    core.reconcile();
    (core.checkpoint().expect("checkpoint"), pods)
}

#[test]
fn checksum_valid_but_contradictory_checkpoint_is_rejected() {
    // The example: u2's entry and record copied from u1 (the file's checksum would
    // be valid: only the meaning is wrong).
    let (mut cp, pods) = three_pod_checkpoint();
    let u1 = cp.entries["u1"].clone();
    cp.entries.insert("u2".into(), u1.clone());
    let mut rec = cp.allocations["u1"].clone();
    for r in &mut rec {
        r.pod_uid = "u2".into();
    }
    cp.allocations.insert("u2".into(), rec);
    let mut core = Core::new(topo(), Some(cp), None);
    assert!(
        core.take_quarantine_request(),
        "the shell must move it aside"
    );
    core.checkpoint_moved_aside("kept as /s/nodetopo_state.bad-1");
    core.apply(Event::PodsSynced(pods));
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    core.reconcile();
    let st = core.status(&[], &now());
    let c = conditions::find(&st.conditions, conditions::CHECKPOINT_RESTORED).expect("cond");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "CheckpointCpuOverlap")
    );
    assert!(
        c.message.starts_with(&format!(
            "nodetopo_state: invariant \"no CPU in two places\" violated: cpu {} is held by both u1/app and u2/app",
            CpuSet::parse(&u1["app"]).expect("set").first().expect("cpu")
        )),
        "{}",
        c.message
    );
    assert!(c
        .message
        .ends_with("(kept as /s/nodetopo_state.bad-1); the state was rebuilt from the pods"));
    // Rebuilt: three pods, twelve distinct CPUs.
    let mut all = CpuSet::new();
    for a in &st.allocations {
        let s = CpuSet::parse(&a.cpus).expect("set");
        assert!(all.is_disjoint(&s), "overlap at {}", a.pod);
        all = all.union(&s);
    }
    assert_eq!((st.allocations.len(), all.len()), (3, 12));
}

#[test]
fn reserved_outside_the_shared_pool_is_rejected_and_moved_aside() {
    let (mut cp, pods) = three_pod_checkpoint();
    // Reserved CPU 32 moved from the shared pool into u3's entry and record.
    let mut shared = CpuSet::parse(&cp.default_cpu_set).expect("set");
    shared.remove(32);
    cp.default_cpu_set = shared.to_string();
    let mut u3 = CpuSet::parse(&cp.entries["u3"]["app"]).expect("set");
    u3.insert(32);
    cp.entries
        .get_mut("u3")
        .expect("u3")
        .insert("app".into(), u3.to_string());
    cp.allocations.get_mut("u3").expect("u3")[0].cpus = u3.to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(checkpoint::FILE_NAME);
    checkpoint::save(&path, &cp).expect("save");
    let mut core = Core::new(topo(), Some(cp), None);
    assert!(
        !core.take_quarantine_request(),
        "valid without a configuration"
    );
    core.apply(Event::PodsSynced(pods));
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    let metrics = crate::daemon::publish::metrics::Metrics::new();
    let mut cycle = crate::daemon::shells::cycle::Cycle::new(path.clone());
    let st = cycle.run(&mut core, &metrics, &now()).expect("status");
    let c = conditions::find(&st.conditions, conditions::CHECKPOINT_RESTORED).expect("cond");
    assert_eq!(c.reason, "CheckpointInconsistent");
    assert!(
        c.message
            .contains("invariant \"reserved CPUs in the shared pool\" violated"),
        "{}",
        c.message
    );
    // The old file really is kept aside, and a fresh consistent one replaced it.
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nodetopo_state.bad-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(c.message.contains(&aside[0]), "{}", c.message);
    let fresh = checkpoint::load(&path).expect("load").expect("present");
    assert!(validate::checkpoint(&path, &fresh, &topo()).is_ok());
}

#[test]
fn kubelet_state_breaking_an_invariant_is_not_published() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    core.apply(Event::PodsSynced(vec![
        pod("a", "ua", "2024-01-01T00:00:00Z", 2),
        pod("b", "ub", "2024-01-01T00:00:01Z", 2),
    ]));
    core.reconcile();
    for (a, b) in [("4-5", "5-6"), ("4-5", "200-201")] {
        let mut entries: BTreeMap<String, BTreeMap<String, CpuSet>> = BTreeMap::new();
        entries
            .entry("ua".into())
            .or_default()
            .insert("app".into(), CpuSet::parse(a).expect("set"));
        entries
            .entry("ub".into())
            .or_default()
            .insert("app".into(), CpuSet::parse(b).expect("set"));
        core.apply(Event::Kubelet(Ok(Some(CpuCheckpoint {
            policy_name: "static".into(),
            default_cpu_set: CpuSet::parse("0-3").expect("set"),
            entries,
            checksum: 1,
            format: CheckpointFormat::V2,
            pod_entries: Default::default(),
            checksum_check: ChecksumCheck::Verified,
        }))));
        let st = core.status(&[], &now());
        assert_eq!(
            st.kubelet.as_ref().map(|k| (k.source, k.assignments.len())),
            Some((KubeletSource::None, 0)),
            "nothing of the kubelet state published"
        );
        assert!(st.allocations.iter().all(|a| a.predicted_cpus.is_none()));
        let k = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("c");
        assert_eq!(k.status, "False");
        assert!(k.message.contains("invariant"), "{}", k.message);
    }
}

mod props;

/// A core with spec generation `generation` (reserved 0,32, topology manager none), no pods,
/// reconciled, and no kubelet CPU manager state read.
fn without_kubelet_state(generation: i64) -> Core {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(generation)))));
    core.apply(Event::PodsSynced(vec![]));
    core.reconcile();
    core.apply(Event::Kubelet(Ok(None)));
    core
}

#[test]
fn kubelet_checksum_mismatch_and_missing_state_are_not_agreement() {
    let mut core = without_kubelet_state(1);
    let st = core.status(&[], &now());
    let k = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(
        (k.status.as_str(), k.reason.as_str()),
        ("False", "NoKubeletState")
    );
    core.apply(Event::Kubelet(Ok(Some(CpuCheckpoint {
        policy_name: "static".into(),
        default_cpu_set: CpuSet::parse("0-63").expect("set"),
        entries: BTreeMap::new(),
        checksum: 7,
        format: CheckpointFormat::V4,
        pod_entries: Default::default(),
        checksum_check: ChecksumCheck::Mismatch {
            field: "dataChecksum",
            recorded: 7,
            computed: 9,
        },
    }))));
    let st = core.status(&[], &now());
    let k = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(
        (k.status.as_str(), k.reason.as_str()),
        ("False", "KubeletStateChecksumMismatch")
    );
    assert!(k.message.contains("dataChecksum is 7"), "{}", k.message);
}

#[test]
fn no_change_verdict_names_the_agreement_seen_restarts_and_failures_are_left_alone() {
    let mut core = without_kubelet_state(2);
    let outcome = |status: bool, why: &str| {
        Box::new(Outcome {
            generation: 2,
            condition: ConditionSpec::new(conditions::APPLIED, status, why, "the plan"),
            change: None,
        })
    };
    let applied = |core: &Core| {
        let st = core.status(&[], &now());
        let c = conditions::find(&st.conditions, conditions::APPLIED).expect("Applied");
        (c.status.clone(), c.reason.clone(), c.message.clone())
    };
    core.apply(Event::Actuation(outcome(true, "NoChange")));
    let (st, why, msg) = applied(&core);
    assert_eq!((st.as_str(), why.as_str()), ("True", "NoChange"));
    assert_eq!(
        msg,
        "the plan; KubeletAgreement at verdict time (nothing was restarted): False NoKubeletState: no kubelet CPU manager checkpoint to compare with"
    );
    core.apply(Event::Kubelet(Ok(Some(CpuCheckpoint {
        policy_name: "static".into(),
        default_cpu_set: CpuSet::parse("0-63").expect("set"),
        entries: BTreeMap::new(),
        checksum: 7,
        format: CheckpointFormat::V4,
        pod_entries: Default::default(),
        checksum_check: ChecksumCheck::Verified,
    }))));
    // The published message stays what was seen at verdict time.
    assert_eq!(applied(&core).2, msg);
    let (agreement, differences) = core.kubelet_agreement();
    assert_eq!(
        (agreement.status, agreement.reason.as_str()),
        (true, "Agree")
    );
    assert!(differences.is_empty(), "{differences:?}");
    core.apply(Event::Actuation(outcome(true, "NoChange")));
    let msg = applied(&core).2;
    assert!(
        msg.starts_with(
            "the plan; KubeletAgreement at verdict time (nothing was restarted): True Agree"
        ),
        "{msg}"
    );
    // A restart's verdict carries what its verify step confirmed; the core adds nothing.
    for why in ["RestartOnly", "StateRewritten"] {
        core.apply(Event::Actuation(outcome(true, why)));
        assert_eq!(applied(&core).2, "the plan", "{why}");
    }
    core.apply(Event::Actuation(outcome(false, "Failed")));
    assert_eq!(applied(&core).2, "the plan");
    println!("Applied verdict messages checked: 5");
}

/// The memory the kubelet's Memory Manager pinned (its `memory_manager_state`) is compared
/// with nodetopo's admissions, whose Memory Manager runs policy `None` (the spec names
/// none): pinned blocks where the CPUs agree are `KubeletMemoryDisagree`, named per
/// container; policy `None`, no entries, or a file the kubelet would refuse compare nothing.
#[test]
fn kubelet_pinned_memory_is_compared() {
    use nodetopo_kubelet::memory_checkpoint::{
        Block, MemoryCheckpoint, MemoryCheckpointFormat, MemoryState,
    };
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    core.apply(Event::PodsSynced(vec![pod(
        "a",
        "ua",
        "2024-01-01T00:00:00Z",
        2,
    )]));
    core.reconcile();
    let ours = CpuSet::parse(&core.checkpoint().expect("cp").entries["ua"]["app"]).expect("set");
    let kubelet = |cpus: &CpuSet| CpuCheckpoint {
        policy_name: "static".into(),
        default_cpu_set: topo().all_cpus().difference(cpus),
        entries: BTreeMap::from([(
            "ua".to_string(),
            BTreeMap::from([("app".to_string(), cpus.clone())]),
        )]),
        checksum: 1,
        format: CheckpointFormat::V2,
        pod_entries: Default::default(),
        checksum_check: ChecksumCheck::Verified,
    };
    core.apply(Event::Kubelet(Ok(Some(kubelet(&ours)))));
    let memory = |policy: &str, pinned: bool, check: ChecksumCheck| {
        let blocks = vec![
            Block {
                numa_affinity: Some(vec![1, 0]),
                resource: "memory".into(),
                size: 1 << 30,
            },
            Block {
                numa_affinity: Some(vec![0]),
                resource: "hugepages-2Mi".into(),
                size: 4 << 20,
            },
        ];
        let entries = pinned.then(|| {
            BTreeMap::from([(
                "ua".to_string(),
                Some(BTreeMap::from([("app".to_string(), Some(blocks))])),
            )])
        });
        Event::KubeletMemory(Ok(Some(MemoryCheckpoint {
            state: MemoryState {
                policy_name: policy.into(),
                entries,
                ..Default::default()
            },
            checksum: 1,
            format: MemoryCheckpointFormat::V1,
            checksum_check: check,
        })))
    };
    let agreement = |core: &Core| {
        let (c, d) = core.kubelet_agreement();
        (c.status, c.reason, c.message, d)
    };
    assert_eq!(agreement(&core).1, "Agree");
    core.apply(memory("Static", true, ChecksumCheck::Verified));
    let line = "default/a/app memory (kubelet \"hugepages-2Mi 4194304@0 memory 1073741824@0,1\", nodetopo \"none\")";
    let (status, why, msg, diffs) = agreement(&core);
    assert_eq!((status, why.as_str()), (false, "KubeletMemoryDisagree"));
    assert_eq!(
        msg,
        format!("the kubelet's CPU assignments equal nodetopo's, but the memory its Memory Manager pinned differs for 1 containers: {line}")
    );
    assert_eq!(diffs, [line]);
    // The CPUs differing too: Disagree, naming both.
    core.apply(Event::Kubelet(Ok(Some(kubelet(
        &CpuSet::parse("10-11").expect("set"),
    )))));
    let (_, why, msg, diffs) = agreement(&core);
    assert_eq!(why, "Disagree");
    assert!(
        msg.ends_with(&format!(
            "; pinned memory differs too for 1 containers: {line}"
        )),
        "{msg}"
    );
    assert_eq!(diffs.len(), 2, "{diffs:?}");
    core.apply(Event::Kubelet(Ok(Some(kubelet(&ours)))));
    for (policy, pinned, check) in [
        ("None", true, ChecksumCheck::Verified),
        ("Static", false, ChecksumCheck::Verified),
        (
            "Static",
            true,
            ChecksumCheck::Mismatch {
                field: "checksum",
                recorded: 1,
                computed: 2,
            },
        ),
    ] {
        core.apply(memory(policy, pinned, check));
        assert_eq!(agreement(&core).1, "Agree", "{policy} {pinned}");
    }
}

/// Found on the real node (e2e/tests/local_node.rs): the kubelet's PodResources `List` never
/// lists an init container that ran to completion, so its CPUs (handed on to the app
/// container) are not a disagreement; a sidecar (restartable init container) still counts.
#[test]
fn podresources_leaves_finished_init_containers_out_of_agreement() {
    use crate::daemon::inputs::podresources::{ContainerCpus, KubeletView};
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    let mut p = pod("a", "ua", "2024-01-01T00:00:00Z", 2);
    let mut init = p.pod.containers[0].clone();
    init.name = "init".into();
    p.pod.init_containers.push(init);
    core.apply(Event::PodsSynced(vec![p.clone()]));
    core.reconcile();
    let ours = core.checkpoint().expect("cp").entries;
    assert!(
        ours["ua"].contains_key("init"),
        "nodetopo assigns the init container: {ours:?}"
    );
    let app = CpuSet::parse(&ours["ua"]["app"]).expect("set");
    let view = |containers: &[&str]| KubeletView {
        allocatable_cpus: topo()
            .all_cpus()
            .difference(&CpuSet::parse("0,32").expect("set")),
        containers: containers
            .iter()
            .map(|c| ContainerCpus {
                namespace: "default".into(),
                pod: "a".into(),
                container: (*c).into(),
                cpus: app.clone(),
            })
            .collect(),
        ..Default::default()
    };
    core.apply(Event::PodResources(Ok(Some(view(&["app"])))));
    let st = core.status(&[], &now());
    let k = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(
        (k.status.as_str(), k.reason.as_str()),
        ("True", "Agree"),
        "{}",
        k.message
    );

    // The same init container as a sidecar: PodResources must list it.
    p.pod.init_containers[0].restartable = true;
    core.apply(Event::PodsSynced(vec![p]));
    core.reconcile();
    core.apply(Event::PodResources(Ok(Some(view(&["app"])))));
    let st = core.status(&[], &now());
    let k = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(
        k.status, "False",
        "a sidecar missing from PodResources: {}",
        k.message
    );
    assert!(k.message.contains("default/a/init"), "{}", k.message);
}

/// Found on the real node: a spec turning `strict-cpu-reservation` on read Invalid
/// ("running pods do not fit") on every running agent, pods or not, because the carried
/// state still had the reserved CPUs in the shared pool, which the kubelet's start check
/// refuses. The carried state is now rewritten as the applied change rewrites the kubelet's
/// (assignments kept); only a change that leaves no shared CPU stays Invalid.
#[test]
fn turning_strict_reservation_on_moves_the_reserved_cpus_out_of_the_shared_pool() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
    core.apply(Event::PodsSynced(vec![pod(
        "a",
        "ua",
        "2024-01-01T00:00:00Z",
        2,
    )]));
    core.reconcile();
    let held = CpuSet::parse(&core.checkpoint().expect("cp").entries["ua"]["app"]).expect("set");
    let mut strict = spec("0,32", "none");
    strict
        .cpu_manager
        .options
        .insert("strict-cpu-reservation".into(), "true".into());
    core.apply(Event::Spec(Some((strict, Some(2)))));
    core.reconcile();
    let st = core.status(&[], &now());
    let inv = conditions::find(&st.conditions, conditions::INVALID).expect("invalid");
    assert_eq!(inv.status, "False", "{}", inv.message);
    let cp = core.checkpoint().expect("cp");
    assert_eq!(
        CpuSet::parse(&cp.entries["ua"]["app"]).expect("set"),
        held,
        "the running pod keeps its CPUs"
    );
    let shared = CpuSet::parse(&cp.default_cpu_set).expect("shared");
    let reserved = CpuSet::parse("0,32").expect("reserved");
    assert!(
        shared.is_disjoint(&reserved),
        "shared pool {shared} holds a reserved CPU"
    );
    assert_eq!(
        shared,
        topo().all_cpus().difference(&reserved).difference(&held)
    );
}

/// `p` as the kubelet leaves a pod it refused at admission.
fn refused_by_kubelet(mut p: PodInfo, reason: &str) -> PodInfo {
    p.terminal = true;
    p.phase = "Failed".into();
    p.kubelet_refusal = Some((
        reason.into(),
        "Pod was rejected: Resources cannot be allocated with Topology locality".into(),
    ));
    p
}

#[test]
fn a_kubelet_refusal_is_explained_once_published_and_kept_across_a_restart() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((
        spec("0,32", "single-numa-node"),
        Some(1),
    ))));
    let big = refused_by_kubelet(
        pod("big", "ubig", "2024-01-01T00:00:01Z", 40),
        "TopologyAffinityError",
    );
    core.apply(Event::PodsSynced(vec![
        pod("fill", "ufill", "2024-01-01T00:00:00Z", 20),
        big.clone(),
        pod("later", "ulater", "2024-01-01T00:00:02Z", 2),
    ]));
    assert!(core.reconcile());
    let st = core.status(&[], &now());
    let [r] = st.rejections.as_slice() else {
        panic!("one rejection: {:?}", st.rejections)
    };
    assert!(r.by_kubelet);
    assert_eq!(
        (r.pod.as_str(), r.container.as_str(), r.reason.as_str()),
        ("default/big", "app", "TopologyAffinityError")
    );
    let e = r.explanation.as_ref().expect("an explanation");
    assert_eq!(e.agreement, nodetopo_engine::report::Agreement::Agree);
    // The replay runs without "later" (created after big): fill's 20 CPUs are on node 0,
    // whose 30 assignable CPUs (0 and its sibling 32 reserved) leave 10; node 1 has 32.
    let free: Vec<(u64, u64)> = e
        .numa_nodes
        .iter()
        .map(|n| (n.id, n.free_cpu_count))
        .collect();
    assert_eq!(free, vec![(0, 10), (1, 32)]);
    assert_eq!(st.summary.as_ref().map(|s| s.rejections), Some(1));
    assert_eq!(
        core.tally.explanations,
        BTreeMap::from([(("TopologyAffinityError".to_string(), "Agree"), 1)])
    );
    let metrics = crate::daemon::publish::metrics::Metrics::new();
    metrics.observe(&core, std::time::Duration::ZERO);
    metrics.observe(&core, std::time::Duration::ZERO);
    let text = metrics.encode();
    assert!(
        text.contains(
            "nodetopo_admission_explanations_total{reason=\"TopologyAffinityError\",agreement=\"Agree\"} 1\n"
        ),
        "{text}"
    );
    // One Event's worth, once.
    assert_eq!(core.take_new_explanations().len(), 1);
    assert!(!core.reconcile());
    assert!(core.take_new_explanations().is_empty());
    // A restart keeps the explanation made at the time, and makes no new one.
    let cp = core.checkpoint().expect("checkpoint");
    let mut again = Core::new(topo(), Some(cp), None);
    again.apply(Event::Spec(Some((
        spec("0,32", "single-numa-node"),
        Some(1),
    ))));
    again.apply(Event::PodsSynced(vec![
        pod("fill", "ufill", "2024-01-01T00:00:00Z", 20),
        big,
        pod("later", "ulater", "2024-01-01T00:00:02Z", 2),
    ]));
    again.reconcile();
    assert!(again.take_new_explanations().is_empty());
    assert_eq!(again.status(&[], &now()).rejections, st.rejections);
    // Gone with its pod.
    again.apply(Event::PodDelete("ubig".into()));
    assert!(again.reconcile());
    assert!(again.status(&[], &now()).rejections.is_empty());
}

#[test]
fn a_kubelet_refusal_the_replay_admits_is_published_as_a_disagreement() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((
        spec("0,32", "single-numa-node"),
        Some(1),
    ))));
    // nodetopo admitted the pod first; then the kubelet refused it.
    let small = pod("small", "usmall", "2024-01-01T00:00:00Z", 2);
    core.apply(Event::PodsSynced(vec![small.clone()]));
    core.reconcile();
    assert_eq!(core.allocations().count(), 1);
    core.apply(Event::PodUpsert(Box::new(refused_by_kubelet(
        small,
        "TopologyAffinityError",
    ))));
    assert!(core.reconcile());
    assert_eq!(core.allocations().count(), 0, "released");
    let st = core.status(&[], &now());
    let e = st.rejections[0].explanation.as_ref().expect("explained");
    assert_eq!(e.agreement, nodetopo_engine::report::Agreement::Disagree);
    assert!(
        e.summary
            .contains("nodetopo's replay disagrees: fidelity bug"),
        "{}",
        e.summary
    );
    // Its own CPUs are not counted as taken in the replay.
    assert_eq!(e.numa_nodes[0].free_cpu_count, 30);
    assert_eq!(
        core.tally.explanations,
        BTreeMap::from([(("TopologyAffinityError".to_string(), "Disagree"), 1)])
    );
}

#[test]
fn only_the_newest_kubelet_refusals_are_published() {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((
        spec("0,32", "single-numa-node"),
        Some(1),
    ))));
    let n = MAX_PUBLISHED_EXPLAINED + 5;
    let pods: Vec<PodInfo> = (0..n)
        .map(|i| {
            refused_by_kubelet(
                pod(
                    &format!("p{i:02}"),
                    &format!("u{i:02}"),
                    &format!("2024-01-01T00:00:{i:02}Z"),
                    40,
                ),
                "TopologyAffinityError",
            )
        })
        .collect();
    core.apply(Event::PodsSynced(pods));
    core.reconcile();
    let st = core.status(&[], &now());
    assert_eq!(st.rejections.len(), MAX_PUBLISHED_EXPLAINED);
    assert_eq!(st.rejections[0].pod, "default/p05");
    assert_eq!(st.summary.map(|s| s.rejections), Some(n as i32));
    assert_eq!(core.take_new_explanations().len(), n);
}
