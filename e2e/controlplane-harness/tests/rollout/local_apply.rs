//! `nodetopo-agent apply --node`: the local executor's verify step waits for the Node on the
//! real API server, as cluster mode does.

use super::harness::*;

/// Runs `nodetopo-agent apply` on `kd` with the fake hooks and `--node node`; returns the
/// exit code and the JSON report.
fn apply(kubeconfig: &Path, bin: &Path, kd: &Path, policy: &Path, node: &str) -> (i32, Value) {
    let out = Command::new(bin)
        .args(["apply", "--preset", PRESET, "--restart", "command"])
        .arg("--kubelet-config")
        .arg(kd.join("config.yaml"))
        .arg("--kubelet-config-dir")
        .arg(kd.join("conf.d"))
        .arg("--host-proc")
        .arg(kd.join("proc"))
        .arg("--state")
        .arg(kd.join("cpu_manager_state"))
        .arg("--policy")
        .arg(policy)
        .arg("--stop-command")
        .arg(kd.join("stop.sh"))
        .arg("--start-command")
        .arg(kd.join("start.sh"))
        .args(["--node", node, "--verify-seconds", "3"])
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("running nodetopo-agent apply");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{node}: no JSON report ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

#[tokio::test]
async fn local_apply_waits_for_the_node() {
    let Some((cp, _operator, agent)) = cluster().await else {
        return;
    };
    let nodes = Apis::of(&cp).nodes;
    create_nodes(&nodes, &["l1", "l2"], None).await;
    let heartbeats = Heartbeats::start(&nodes, &["l1", "l2"]);
    heartbeats.stop("l2").await;
    let root = cp.dir().to_path_buf();
    let policy = root.join("local-policy.yaml");
    std::fs::write(
        &policy,
        serde_yaml::to_string(&rollout_policy("local", "local", json!({"mode": "Apply"})))
            .expect("policy yaml"),
    )
    .expect("policy file");

    // l1 is Ready with fresh heartbeats: applied.
    let kd1 = kubelet_dir(&root, "l1", None, false, false);
    // On a blocking thread: the test's runtime keeps playing the heartbeats meanwhile.
    let run = |kd: PathBuf, node: &'static str| {
        let (kubeconfig, agent, policy) =
            (cp.kubeconfig().to_path_buf(), agent.clone(), policy.clone());
        tokio::task::spawn_blocking(move || apply(&kubeconfig, &agent, &kd, &policy, node))
    };
    let (code, report) = run(kd1.clone(), "l1").await.expect("apply l1");
    assert_eq!(code, 0, "l1: {report:#}");
    assert_eq!(report["reason"], "RestartOnly", "l1: {report:#}");
    assert!(kd1.join("conf.d/90-nodetopo.conf").exists());

    // l2's kubelet stopped posting: the verify step fails on the Node and rolls back.
    let kd2 = kubelet_dir(&root, "l2", None, false, false);
    let (code, report) = run(kd2.clone(), "l2").await.expect("apply l2");
    assert_eq!(code, 1, "l2: {report:#}");
    assert_eq!(report["reason"], "Failed", "l2: {report:#}");
    let message = report["message"].as_str().unwrap_or_default();
    assert_names_all(
        "l2",
        message,
        &[
        "Node l2 is not Ready again after waiting 3s (--verify-seconds)",
        "Ready=Unknown",
        "restored and the kubelet restarted, but it is not healthy again after the rollback: Node l2",
        ],
    );
    assert!(
        !kd2.join("conf.d/90-nodetopo.conf").exists(),
        "l2: drop-in removed"
    );
    let hooks = std::fs::read_to_string(kd2.join("hooks.log")).unwrap_or_default();
    assert_eq!(hooks, "stop\nstart\nstop\nstart\n", "l2 hooks");
    println!(
        "local apply --node: l1 RestartOnly after its Node was Ready again; l2 (NotReady) rolled back: {message}; node heartbeats played: {}",
        heartbeats.count()
    );
}
