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

mod explain;
mod kubelet;
mod props;

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
