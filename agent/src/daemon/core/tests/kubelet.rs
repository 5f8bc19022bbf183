//! The core against what the kubelet reports: agreement of CPUs and pinned memory, its
//! state's checks, and PodResources.

use super::*;

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
