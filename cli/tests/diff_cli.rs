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

/// `--kubelet-command-line`: the kubelet's `--feature-gates` override its files' in the gate
/// check (as `apply` reads them from /proc), and a kubelet without `--config-dir` refuses
/// the plan, in both file forms (/proc's NUL-separated cmdline and `ps` text).
#[test]
fn the_kubelets_command_line_counts() {
    let dir = tempfile::tempdir().unwrap();
    let d = examples();
    let beta = dir.path().join("policy-beta.yaml");
    std::fs::write(
        &beta,
        "spec:\n  cpuManager: {policy: static, reservedSystemCPUs: \"0,32\", options: {distribute-cpus-across-numa: \"true\"}}\n",
    )
    .unwrap();
    let conf_d = dir.path().join("conf.d");
    std::fs::create_dir_all(&conf_d).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let gate_off = write(
        "cmdline",
        b"/usr/bin/kubelet\0--config=/var/lib/kubelet/config.yaml\0--config-dir\0/etc/kubernetes/kubelet.conf.d\0--feature-gates=CPUManagerPolicyBetaOptions=false\0",
    );
    let gate_on = write(
        "ps.txt",
        b"/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml --config-dir=/etc/kubernetes/kubelet.conf.d --feature-gates=CPUManagerPolicyBetaOptions=true\n",
    );
    let no_dir = write(
        "no-dir.txt",
        b"kubelet --config=/var/lib/kubelet/config.yaml --v=2\n",
    );
    let run = |policy: &std::path::Path, cmdline: Option<&std::path::Path>, conf: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nodetopo"));
        c.args([
            "diff",
            "--preset",
            "epyc-7303-2p",
            "-o",
            "json",
            "--kubelet-config",
        ])
        .arg(d.join("kubelet-config.yaml"))
        .arg("--state")
        .arg(d.join("cpu_manager_state"))
        .arg("--policy")
        .arg(policy);
        if conf {
            c.arg("--kubelet-config-dir").arg(&conf_d);
        }
        if let Some(f) = cmdline {
            c.arg("--kubelet-command-line").arg(f);
        }
        c.output().unwrap()
    };
    // Beta options are on by default: planned without a command line and with the gate on.
    for cmdline in [None, Some(gate_on.as_path())] {
        let out = run(&beta, cmdline, true);
        assert!(
            out.status.success(),
            "{cmdline:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let refused = [
        (
            run(&beta, Some(&gate_off), true),
            "distribute-cpus-across-numa is beta in the kubelet, which refuses it unless featureGates.CPUManagerPolicyBetaOptions is true (the kubelet's configuration sets it false) (its command line sets --feature-gates CPUManagerPolicyBetaOptions=false",
        ),
        (
            run(&d.join("policy-restart.yaml"), Some(&no_dir), true),
            "the kubelet runs without --config-dir, so it would ignore nodetopo's drop-in",
        ),
        (
            run(&d.join("policy-restart.yaml"), Some(&gate_on), false),
            "the kubelet reads drop-ins from /etc/kubernetes/kubelet.conf.d; give their copy with --kubelet-config-dir",
        ),
    ];
    for (out, want) in &refused {
        assert_eq!(out.status.code(), Some(2), "{want}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{want:?} in {err}");
    }
    println!(
        "diff --kubelet-command-line: 2 planned, {} refused",
        refused.len()
    );
}

/// Configuration flags on the kubelet's command line override its files and drop-ins: a
/// `--reserved-cpus` that differs from what the policy's drop-in would set is refused
/// before anything, naming the flag; one that agrees is planned; and the plan starts from
/// the flags' values (no change when they already give the policy).
#[test]
fn command_line_flags_over_the_dropin() {
    let dir = tempfile::tempdir().unwrap();
    let d = examples();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "spec:\n  cpuManager: {policy: static, reservedSystemCPUs: \"0,32\"}\n",
    )
    .unwrap();
    let conf_d = dir.path().join("conf.d");
    std::fs::create_dir_all(&conf_d).unwrap();
    let base =
        "kubelet --config=/var/lib/kubelet/config.yaml --config-dir=/etc/kubernetes/kubelet.conf.d";
    let policy_01 = dir.path().join("policy-01.yaml");
    std::fs::write(
        &policy_01,
        "spec:\n  cpuManager: {policy: static, reservedSystemCPUs: \"0-1\"}\n",
    )
    .unwrap();
    let run_with = |policy: &std::path::Path, extra: &str| {
        let cmdline = dir.path().join("cmdline.txt");
        std::fs::write(&cmdline, format!("{base} {extra}\n")).unwrap();
        Command::new(env!("CARGO_BIN_EXE_nodetopo"))
            .args([
                "diff",
                "--preset",
                "epyc-7303-2p",
                "-o",
                "json",
                "--kubelet-config",
            ])
            .arg(d.join("kubelet-config.yaml"))
            .arg("--kubelet-config-dir")
            .arg(&conf_d)
            .arg("--policy")
            .arg(policy)
            .arg("--kubelet-command-line")
            .arg(&cmdline)
            .output()
            .unwrap()
    };
    let run = |extra: &str| run_with(&policy, extra);
    let out = run("--reserved-cpus=0-1");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--reserved-cpus=0-1 (the drop-in would set reservedSystemCPUs \"0,32\")")
            && err.contains("nothing is planned or changed"),
        "{err}"
    );
    let out = run("--reserved-cpus 0,32 --topology-manager-scope=pod");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--topology-manager-scope=pod"));
    // Agreeing flags: planned, from the configuration the flags give (the file says
    // "0,32", the command line "0-1", the policy "0-1": no reserved-set change).
    let out = run_with(
        &policy_01,
        "--reserved-cpus 0-1 --cpu-manager-policy=static --v=2",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let changes = plan["configChanges"].to_string();
    assert!(
        !changes.contains("reservedSystemCPUs") && !changes.contains("cpuManagerPolicy"),
        "the flags already give the policy's fields: {changes}"
    );
    let out = run("--reserved-cpus=0-");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("set by --reserved-cpus on the kubelet's command line"));
}
