//! A node that is not Ready again after the restart: the apply is rolled back.

use super::harness::*;

#[tokio::test]
async fn node_not_ready_after_the_restart_rolls_back() {
    let Some((cp, operator, agent)) = cluster().await else {
        return;
    };
    let Apis {
        nodes,
        policies,
        ntopos,
        ..
    } = Apis::of(&cp);
    let pp = PostParams::default();
    create_nodes(&nodes, &["n1", "n2"], Some("notready")).await;
    let heartbeats = Heartbeats::start(&nodes, &["n1", "n2"]);
    heartbeats.stop("n1").await;
    // n1's state: static, reserved 0,32, no exclusive CPUs.
    let state: nodetopo_engine::change::KubeletCpuState = json_of(json!({
        "policyName": "static", "defaultCpuSet": "0-63", "entries": {}
    }));
    let state_text = nodetopo_kubelet::cpu_checkpoint::render(
        &state,
        nodetopo_kubelet::cpu_checkpoint::CheckpointFormat::V2,
    );
    let root = cp.dir().to_path_buf();
    let kd1 = kubelet_dir(&root, "n1", Some(&state_text), false, false);
    let kd2 = kubelet_dir(&root, "n2", None, false, false);
    policies
        .create(
            &pp,
            &rollout_policy(
                "nr",
                "notready",
                json!({"mode": "Apply", "maxUnavailable": 1}),
            ),
        )
        .await
        .expect("policy nr");
    let _operator = start_operator(&cp, &operator);
    let verify = ["--actuation-verify-seconds", "3"];
    let _agent1 = start_agent_with(&cp, &agent, "n1", &kd1, &verify);
    let _agent2 = start_agent_with(&cp, &agent, "n2", &kd2, &verify);

    let mut polls = 0;
    let (status, n1) = wait_for("n1 fails verification and the rollout pauses", 120, || {
        polls += 1;
        let (policies, ntopos) = (policies.clone(), ntopos.clone());
        async move {
            let p = policies.get("nr").await.map_err(|e| e.to_string())?;
            let n1 = ntopos.get("n1").await.map_err(|e| e.to_string())?;
            let n2 = ntopos.get("n2").await.map_err(|e| e.to_string())?;
            if marked(&n2) {
                panic!("n2 marked although n1 failed (maxUnavailable 1, pauseOnFailure)");
            }
            let s = rollout_status(&p);
            if (s.0, s.1, s.2) == (0, 1, 1) && (s.3.as_str(), s.4.as_str()) == ("False", "Paused") {
                Ok((s, n1))
            } else {
                Err(format!("{s:?}; n1 Applied {:?}", applied(&n1)))
            }
        }
    })
    .await;
    let (st, reason, message) = applied(&n1).expect("n1 verdict");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "Failed"),
        "{message}"
    );
    assert_names_all(
        "n1",
        &message,
        &[
            "verification failed",
            "Node n1 is not Ready again after waiting 3s",
            "Ready=Unknown",
            "restored",
            "the kubelet restarted",
        ],
    );
    assert!(
        !kd1.join("conf.d/90-nodetopo.conf").exists(),
        "n1: the drop-in that did not exist before must be removed again"
    );
    assert_eq!(
        std::fs::read_to_string(kd1.join("cpu_manager_state")).expect("state"),
        state_text,
        "n1's state file restored"
    );
    assert!(!kd1.join("nodetopo-apply.journal").exists());
    let hooks = std::fs::read_to_string(kd1.join("hooks.log")).unwrap_or_default();
    assert_eq!(
        hooks, "stop\nstart\nstop\nstart\n",
        "n1 hooks: apply, then rollback"
    );
    assert!(
        !kd2.join("conf.d/90-nodetopo.conf").exists(),
        "n2 untouched"
    );
    assert!(
        status.5.contains("n1"),
        "the Progressing message names n1: {}",
        status.5
    );
    println!(
        "n1 NotReady after the restart: rolled back after {polls} polls; Applied: {message}; Progressing: {}; node heartbeats played: {}",
        status.5,
        heartbeats.count()
    );
}
