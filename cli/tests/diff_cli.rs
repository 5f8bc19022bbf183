//! `nodetopo diff` end to end on the inputs of examples/diff (docs/actuation.md): one policy
//! per plan class, JSON output, and bad inputs named in the error.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/diff")
        .canonicalize()
        .expect("examples/diff")
}

fn diff(policy: &str, extra: &[&str]) -> Output {
    let d = examples();
    Command::new(env!("CARGO_BIN_EXE_nodetopo"))
        .arg("diff")
        .args(["--preset", "epyc-7303-2p"])
        .arg("--kubelet-config")
        .arg(d.join("kubelet-config.yaml"))
        .arg("--state")
        .arg(d.join("cpu_manager_state"))
        .arg("--pods")
        .arg(d.join("pods.yaml"))
        .arg("--policy")
        .arg(d.join(policy))
        .args(extra)
        .output()
        .expect("running nodetopo diff")
}

fn plan_json(policy: &str) -> Value {
    let out = diff(policy, &["-o", "json"]);
    assert!(
        out.status.success(),
        "{policy}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON plan")
}

fn classes(v: &Value) -> Vec<String> {
    v["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["class"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn one_example_per_plan_class() {
    let cases = [
        ("policy-nochange.yaml", vec!["NoChange"]),
        ("policy-restart.yaml", vec!["RestartOnly"]),
        ("policy-strict.yaml", vec!["RewriteState"]),
        ("policy-evict.yaml", vec!["EvictFirst", "RestartOnly"]),
        ("policy-drain.yaml", vec!["Drain"]),
    ];
    for (policy, want) in &cases {
        let v = plan_json(policy);
        assert_eq!(classes(&v), *want, "{policy}: {v:#}");
    }
    let evict = plan_json("policy-evict.yaml");
    assert_eq!(evict["steps"][0]["pods"], serde_json::json!(["shop/db"]));
    let strict = plan_json("policy-strict.yaml");
    assert_eq!(strict["newState"]["defaultCpuSet"], "6-31,38-63");
    let text = diff("policy-evict.yaml", &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Plan: EvictFirst"), "{text}");
    assert!(text.contains("pods: shop/db"), "{text}");
    println!("diff examples: {} plan classes checked", cases.len());
}

#[test]
fn bad_inputs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = examples();
    // A state file whose content no longer matches its checksum.
    let state = std::fs::read_to_string(d.join("cpu_manager_state")).unwrap();
    let bad_state = dir.path().join("cpu_manager_state");
    std::fs::write(&bad_state, state.replace("0,6-32", "0,7-32")).unwrap();
    let bad_policy = dir.path().join("policy.yaml");
    std::fs::write(
        &bad_policy,
        "spec:\n  cpuManager: {policy: static, reservedSystemCPUs: \"0,32\", options: {go-faster: \"true\"}}\n",
    )
    .unwrap();
    let run = |state: &std::path::Path, policy: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_nodetopo"))
            .args(["diff", "--preset", "epyc-7303-2p", "--kubelet-config"])
            .arg(d.join("kubelet-config.yaml"))
            .arg("--state")
            .arg(state)
            .arg("--policy")
            .arg(policy)
            .output()
            .unwrap()
    };
    let cases: Vec<(Output, &str)> = vec![
        (run(&bad_state, &d.join("policy-restart.yaml")), "checksum"),
        (run(&d.join("cpu_manager_state"), &bad_policy), "go-faster"),
        (
            run(
                &d.join("cpu_manager_state"),
                &dir.path().join("absent.yaml"),
            ),
            "absent.yaml",
        ),
    ];
    let n = cases.len();
    for (out, want) in cases {
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{want}: {err}");
    }
    println!("diff bad inputs: {n} checked");
}
