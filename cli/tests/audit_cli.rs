//! `nodetopo audit` end to end: the recorded node of examples/audit (docs/audit.md), JSON
//! output, and bad inputs named in the error.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/audit")
        .canonicalize()
        .expect("examples/audit")
}

fn audit(extra: &[&str]) -> Output {
    let d = examples();
    Command::new(env!("CARGO_BIN_EXE_nodetopo"))
        .arg("audit")
        .args(["--preset", "kep-4800-example"])
        .arg("--cgroup-root")
        .arg(d.join("cgroup"))
        .arg("--pods")
        .arg(d.join("pods.yaml"))
        .args(extra)
        .output()
        .expect("running nodetopo audit")
}

#[test]
fn the_recorded_node_shows_its_two_mismatches_as_json() {
    let d = examples();
    let state = d.join("cpu_manager_state");
    let config = d.join("kubelet-config.yaml");
    let out = audit(&[
        "--state",
        state.to_str().unwrap(),
        "--kubelet-config",
        config.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(v["checkedContainers"], 3);
    let drift: Vec<(String, String)> = v["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["container"].as_str().unwrap().to_string(),
                d["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        drift,
        vec![
            ("worker".to_string(), "ChangedOutsideKubelet".to_string()),
            ("old".to_string(), "StaleCheckpointEntry".to_string()),
        ]
    );
}

#[test]
fn reserved_cpus_used_by_an_exclusive_container_are_named() {
    // Reserving 2 makes db-0's postgres (2-5) run on a reserved CPU.
    let state = examples().join("cpu_manager_state");
    let out = audit(&["--state", state.to_str().unwrap(), "--reserved", "2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ReservedCpuUsedByPod shop/db-0/postgres: expected 2-5, actual 2-5"),
        "{text}"
    );
}

#[test]
fn bad_inputs_are_named() {
    let out = audit(&["--reserved", "0-"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--reserved \"0-\""), "{err}");

    // A CPU the machine does not have (the preset has 16).
    let out = audit(&["--reserved", "99"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("99") && err.contains("not online"), "{err}");

    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodetopo"))
        .args(["audit", "--preset", "kep-4800-example", "--pods"])
        .arg(examples().join("pods.yaml"))
        .arg("--cgroup-root")
        .arg(empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cgroup-version"), "{err}");
}
