//! Property test: checksum-valid random checkpoints and kubelet states, fed through the same
//! path as at start (file -> checksum check -> validation -> core -> status), never lead to a
//! published CPU that two pods hold or that this machine lacks.

use std::cell::Cell;
use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;

/// A CPU set string: usually a small range on (or just past) the 64-CPU machine.
fn set_text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0usize..70, 1usize..5).prop_map(|(lo, n)| CpuSet::from_ids(lo..lo + n).to_string()),
        1 => Just(String::new()),
        1 => proptest::sample::select(vec!["x", "5-2", "0-63", "1,33", "4000000000"])
            .prop_map(str::to_string),
    ]
}

/// One pod's part of a checkpoint: its entry, and a record that may disagree.
#[derive(Debug, Clone)]
struct PodPart {
    entry: Option<String>,
    record: Option<String>,
}

fn pod_part() -> impl Strategy<Value = PodPart> {
    (proptest::option::of(set_text()), 0u8..4, set_text()).prop_map(|(entry, how, other)| {
        let record = match how {
            0 => None,
            1 => Some(other),
            _ => entry.clone(),
        };
        PodPart { entry, record }
    })
}

/// Checkpoint data over pods u1..u4; the shared pool is the complement of the entries
/// (so that the simple sum checks pass) or a random set.
fn checkpoint_data() -> impl Strategy<Value = CheckpointData> {
    (
        proptest::collection::vec(pod_part(), 4),
        any::<bool>(),
        set_text(),
    )
        .prop_map(|(parts, complement, random_default)| {
            let mut d = CheckpointData {
                spec_generation: Some(1),
                ..Default::default()
            };
            let mut held = CpuSet::new();
            for (i, p) in parts.iter().enumerate() {
                let uid = format!("u{}", i + 1);
                if let Some(e) = &p.entry {
                    held = held.union(&CpuSet::parse(e).unwrap_or_default());
                    d.entries
                        .entry(uid.clone())
                        .or_default()
                        .insert("app".into(), e.clone());
                }
                if let Some(r) = &p.record {
                    d.allocations
                        .entry(uid.clone())
                        .or_default()
                        .push(AllocationReport {
                            pod: format!("default/p{}", i + 1),
                            pod_uid: uid.clone(),
                            container: "app".into(),
                            cpus: r.clone(),
                            ..Default::default()
                        });
                }
            }
            d.default_cpu_set = if complement {
                CpuSet::from_ids(0..64).difference(&held).to_string()
            } else {
                random_default
            };
            d
        })
}

/// A kubelet checkpoint text (its own checksum is recorded, not recomputed, so any number
/// is "valid") over pods u1..u4.
fn kubelet_text() -> impl Strategy<Value = String> {
    (
        set_text(),
        proptest::collection::vec(proptest::option::of(set_text()), 4),
        any::<u32>(),
    )
        .prop_map(|(default, entries, checksum)| {
            let entries: BTreeMap<String, BTreeMap<&str, String>> = entries
                .into_iter()
                .enumerate()
                .filter_map(|(i, e)| e.map(|e| (format!("u{}", i + 1), [("app", e)].into())))
                .collect();
            serde_json::json!({
                "policyName": "static",
                "defaultCpuSet": default,
                "entries": entries,
                "checksum": checksum,
            })
            .to_string()
        })
}

fn assert_no_overlap(st: &NodeTopologyStatus, t: &CpuTopology) -> Result<(), TestCaseError> {
    let mut owner: BTreeMap<usize, &str> = BTreeMap::new();
    for a in &st.allocations {
        let set = CpuSet::parse(&a.cpus)
            .map_err(|e| TestCaseError::fail(format!("published {:?}: {e}", a.cpus)))?;
        for cpu in set.iter() {
            prop_assert!(
                t.cpu(cpu).is_some(),
                "published cpu {} is not on the machine",
                cpu
            );
            if let Some(o) = owner.insert(cpu, &a.pod_uid) {
                prop_assert_eq!(o, a.pod_uid.as_str(), "cpu {} published for two pods", cpu);
            }
        }
    }
    let mut kowner: BTreeMap<usize, &str> = BTreeMap::new();
    for k in st.kubelet.iter().flat_map(|k| &k.assignments) {
        let set = CpuSet::parse(&k.cpus)
            .map_err(|e| TestCaseError::fail(format!("published {:?}: {e}", k.cpus)))?;
        for cpu in set.iter() {
            prop_assert!(
                t.cpu(cpu).is_some(),
                "kubelet cpu {} is not on the machine",
                cpu
            );
            if let Some(o) = kowner.insert(cpu, &k.pod_uid) {
                prop_assert_eq!(o, k.pod_uid.as_str(), "kubelet cpu {} published twice", cpu);
            }
        }
    }
    Ok(())
}

#[test]
fn random_checkpoints_and_kubelet_states_never_publish_overlap() {
    let t = topo();
    let dir = tempfile::tempdir().expect("tempdir");
    let cp_path = dir.path().join(checkpoint::FILE_NAME);
    let k_path = dir.path().join("cpu_manager_state");
    let pods: Vec<PodInfo> = (1..=4)
        .map(|i| {
            pod(
                &format!("p{i}"),
                &format!("u{i}"),
                "2024-01-01T00:00:00Z",
                2,
            )
        })
        .collect();
    let (tried, restored, rejected, k_published, k_refused) = (
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
    );
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(checkpoint_data(), kubelet_text()), |(data, ktext)| {
            tried.set(tried.get() + 1);
            // Checksum-valid by construction: written by the agent's own encoder.
            checkpoint::save(&cp_path, &data).expect("save");
            std::fs::write(&k_path, &ktext).expect("write");
            let (loaded, problem) = crate::daemon::shells::restore::load_checkpoint(&cp_path, &t);
            if problem.is_some() {
                rejected.set(rejected.get() + 1);
            } else {
                restored.set(restored.get() + 1);
            }
            let mut core = Core::new(t.clone(), loaded, problem);
            core.apply(Event::PodsSynced(pods.clone()));
            core.apply(Event::Spec(Some((spec("0,32", "none"), Some(1)))));
            let k = validate::read_kubelet_state(&k_path, &t);
            if matches!(k, Ok(Some(_))) {
                k_published.set(k_published.get() + 1);
            } else {
                k_refused.set(k_refused.get() + 1);
            }
            core.apply(Event::Kubelet(k));
            core.reconcile();
            assert_no_overlap(&core.status(&[], &now()), &t)
        })
        .expect("no published overlap");
    println!(
        "checkpoint/kubelet property: {} cases; checkpoints restored {}, rejected {}; kubelet states published {}, refused {}",
        tried.get(),
        restored.get(),
        rejected.get(),
        k_published.get(),
        k_refused.get()
    );
    assert!(
        restored.get() > 0 && rejected.get() > 0,
        "both outcomes exercised"
    );
    assert!(
        k_published.get() > 0 && k_refused.get() > 0,
        "both outcomes exercised"
    );
}
