use std::cell::Cell;
use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::daemon::checkpoint::{decode, encode, CheckpointData};
use nodetopo_kubelet::cpu_checkpoint;

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, uid: u}\nspec:\n  initContainers: [{name: i, resources: {limits: {cpu: \"1\", memory: 1Gi}}}]\n  containers:\n  - name: app\n    resources: {limits: {cpu: \"2\", memory: 1Gi, example.com/gpu: 1, hugepages-2Mi: 4Mi}}\n---\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: 3, template: {spec: {containers: [{name: c, resources: {requests: {cpu: 500m}}}]}}}\n";
const KUBELET: &str = r#"{"policyName":"static","defaultCpuSet":"0-1,6-7","entries":{"u1":{"app":"2-5"}},"checksum":3321}"#;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

/// A valid document with a few bytes overwritten, deleted or inserted, or arbitrary bytes.
fn mutated(seed: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let edits = proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 0..6);
    prop_oneof![
        4 => edits.prop_map(move |edits| {
            let mut b = seed.as_bytes().to_vec();
            for (at, byte, how) in edits {
                let i = at % (b.len() + 1);
                match how {
                    0 if i < b.len() => b[i] = byte,
                    1 if i < b.len() => {
                        b.remove(i);
                    }
                    _ => b.insert(i, byte),
                }
            }
            b
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..200),
    ]
}

fn run(name: &str, seed: &'static str, f: impl Fn(&[u8]) -> bool) {
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let (runs, accepted) = (Cell::new(0u64), Cell::new(0u64));
    runner
        .run(&mutated(seed), |bytes| {
            runs.set(runs.get() + 1);
            if f(&bytes) {
                accepted.set(accepted.get() + 1);
            }
            Ok(())
        })
        .expect(name);
    println!(
        "parser fuzz: {name}: {} inputs, {} accepted, 0 panics",
        runs.get(),
        accepted.get()
    );
}

#[test]
fn pod_yaml_never_panics() {
    run("pod YAML", POD, |b| {
        let text = String::from_utf8_lossy(b);
        match nodetopo_kubelet::pods::pods_from_yaml(&text) {
            Ok(pods) => pods
                .iter()
                .all(|p| nodetopo_kubelet::pods::engine_pod(&p.fields()).is_ok()),
            Err(e) => {
                assert!(!e.to_string().is_empty());
                false
            }
        }
    });
}

#[test]
fn checkpoint_never_panics() {
    let mut d = CheckpointData {
        spec_generation: Some(2),
        default_cpu_set: "0-1,6-7".into(),
        ..Default::default()
    };
    d.entries
        .entry("u1".into())
        .or_default()
        .insert("app".into(), "2-5".into());
    let seed: &'static str = Box::leak(
        String::from_utf8(encode(&d))
            .expect("utf8")
            .into_boxed_str(),
    );
    let path = Path::new("/s/nodetopo_state");
    run("checkpoint", seed, |b| match decode(path, b) {
        Ok(_) => true,
        Err(e) => {
            assert!(e.to_string().contains("/s/nodetopo_state"), "{e}");
            false
        }
    });
}

#[test]
fn kubelet_state_never_panics() {
    let path = Path::new("/k/cpu_manager_state");
    run(
        "kubelet state",
        KUBELET,
        |b| match cpu_checkpoint::parse_file(path, &String::from_utf8_lossy(b)) {
            Ok(_) => true,
            Err(e) => {
                assert!(e.to_string().contains("/k/cpu_manager_state"), "{e}");
                false
            }
        },
    );
}
