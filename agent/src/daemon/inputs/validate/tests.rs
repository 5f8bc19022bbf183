use super::*;
use nodetopo_engine::report::AllocationReport;

fn topo() -> CpuTopology {
    nodetopo_engine::presets::build("epyc-7303-2p").expect("preset")
}

fn record(uid: &str, c: &str, cpus: &str) -> AllocationReport {
    AllocationReport {
        pod: format!("default/{uid}"),
        pod_uid: uid.into(),
        container: c.into(),
        cpus: cpus.into(),
        ..Default::default()
    }
}

fn cp(entries: &[(&str, &str, &str)], records: &[(&str, &str, &str)]) -> CheckpointData {
    let mut d = CheckpointData {
        default_cpu_set: "0-1,10-63".into(),
        ..Default::default()
    };
    for (u, c, s) in entries {
        d.entries
            .entry(u.to_string())
            .or_default()
            .insert(c.to_string(), s.to_string());
    }
    for (u, c, s) in records {
        d.allocations
            .entry(u.to_string())
            .or_default()
            .push(record(u, c, s));
    }
    d
}

fn why(d: &CheckpointData) -> (Invariant, String) {
    let v = checkpoint(Path::new("/s/nodetopo_state"), d, &topo()).expect_err("invalid");
    (v.invariant, v.to_string())
}

#[test]
fn consistent_checkpoint_passes() {
    let d = cp(
        &[("u1", "app", "2-5"), ("u2", "app", "6-9")],
        &[("u1", "app", "2-5"), ("u2", "app", "6-9")],
    );
    let s = checkpoint(Path::new("/s"), &d, &topo()).expect("valid");
    assert_eq!(s.assignments.len(), 2);
    // Containers of one pod may share (reused init-container CPUs).
    let d = cp(
        &[("u1", "init", "2-5"), ("u1", "app", "2-5")],
        &[("u1", "init", "2-5"), ("u1", "app", "2-5")],
    );
    assert!(checkpoint(Path::new("/s"), &d, &topo()).is_ok());
}

#[test]
fn each_invariant_is_named() {
    // The example: two pods on the same CPUs, checksum valid.
    let d = cp(
        &[("u1", "app", "2-5"), ("u2", "app", "2-5")],
        &[("u1", "app", "2-5"), ("u2", "app", "2-5")],
    );
    assert_eq!(
        why(&d),
        (
            Invariant::Exclusive,
            "/s/nodetopo_state: invariant \"no CPU in two places\" violated: cpu 2 is held by both u1/app and u2/app".into()
        )
    );
    let d = cp(&[("u1", "app", "2-5,70")], &[("u1", "app", "2-5,70")]);
    assert_eq!(why(&d).0, Invariant::OnMachine);
    assert!(why(&d).1.contains("cpu 70 of u1/app"), "{}", why(&d).1);
    let d = cp(&[("u1", "app", "x")], &[("u1", "app", "x")]);
    assert_eq!(why(&d).0, Invariant::WellFormed);
    let d = cp(&[("u1", "app", "1-5")], &[("u1", "app", "1-5")]);
    assert!(why(&d)
        .1
        .contains("cpu 1 is in both the shared pool and u1/app"));
    let d = cp(&[("u1", "app", "2-5")], &[("u1", "app", "6-9")]);
    assert_eq!(why(&d).0, Invariant::RecordsMatchEntries);
    let d = cp(&[("u1", "app", "2-5")], &[]);
    assert!(why(&d).1.contains("has no allocation record"));
    let d = cp(&[], &[("u1", "app", "2-5")]);
    assert!(why(&d).1.contains("has no CPU entry"));
    let mut d = cp(&[("u1", "app", "2-5")], &[("u1", "app", "2-5")]);
    d.rejections.insert("u1".into(), vec![]);
    assert!(why(&d).1.contains("both admitted and rejected"));
}

#[test]
fn kubelet_state_checks() {
    let t = topo();
    let p = Path::new("/k/cpu_manager_state");
    let parse = |s: &str| CpuSet::parse(s).expect("set");
    let mut k = CpuCheckpoint {
        policy_name: "static".into(),
        default_cpu_set: parse("0-1,10-63"),
        entries: BTreeMap::new(),
        checksum: 1,
        format: nodetopo_kubelet::cpu_checkpoint::CheckpointFormat::V2,
        pod_entries: Default::default(),
        checksum_check: nodetopo_kubelet::cpu_checkpoint::ChecksumCheck::Verified,
    };
    k.entries
        .entry("u1".into())
        .or_default()
        .insert("app".into(), parse("2-5"));
    assert!(kubelet_state(p, &k, &t).is_ok());
    k.entries
        .entry("u2".into())
        .or_default()
        .insert("app".into(), parse("5-6"));
    let v = kubelet_state(p, &k, &t).expect_err("overlap");
    assert_eq!(
        v.to_string(),
        "/k/cpu_manager_state: invariant \"no CPU in two places\" violated: cpu 5 is held by both u1/app and u2/app"
    );
    k.entries.remove("u2");
    k.entries
        .entry("u3".into())
        .or_default()
        .insert("app".into(), parse("100-101"));
    let v = kubelet_state(p, &k, &t).expect_err("off machine");
    assert_eq!(v.invariant, Invariant::OnMachine);
}

/// Parser robustness for the agent's own inputs (cargo-fuzz needs a nightly toolchain, so
/// these run as proptest): pod YAML, the checkpoint and the kubelet state, fed mutated valid
/// documents and arbitrary bytes. Nothing may panic; every refusal is an error naming the
/// file. Prints inputs run and how many were accepted.
mod fuzz;
