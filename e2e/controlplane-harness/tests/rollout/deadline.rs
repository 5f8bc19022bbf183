//! A marked node whose agent never answers fails its progress deadline; its late verdict wins.

use super::harness::*;

#[tokio::test]
async fn progress_deadline_fails_a_silent_node_and_its_late_verdict_wins() {
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
    create_nodes(&nodes, &["d1", "d2"], Some("late")).await;
    let heartbeats = Heartbeats::start(&nodes, &["d1", "d2"]);
    let root = cp.dir().to_path_buf();
    let kd1 = kubelet_dir(&root, "d1", None, false, false);
    let kd2 = kubelet_dir(&root, "d2", None, false, false);
    policies
        .create(
            &pp,
            &rollout_policy(
                "late",
                "late",
                json!({"mode": "Apply", "progressDeadlineSeconds": 3}),
            ),
        )
        .await
        .expect("policy late");
    let _operator = start_operator(&cp, &operator);
    // d1 has no agent (dead, or the node is gone): nobody answers its mark.
    let _agent_d2 = start_agent(&cp, &agent, "d2", &kd2);

    let mut polls = 0;
    let (status, d1) = wait_for("d1 fails its progress deadline", 90, || {
        polls += 1;
        let (policies, ntopos) = (policies.clone(), ntopos.clone());
        async move {
            let p = policies.get("late").await.map_err(|e| e.to_string())?;
            let d1 = ntopos.get("d1").await.map_err(|e| e.to_string())?;
            let d2 = ntopos.get("d2").await.map_err(|e| e.to_string())?;
            if marked(&d2) {
                panic!("d2 marked while d1 is in progress or failed (maxUnavailable 1, pauseOnFailure)");
            }
            let s = rollout_status(&p);
            if (s.0, s.1, s.2) == (0, 1, 1) && (s.3.as_str(), s.4.as_str()) == ("False", "Paused")
            {
                Ok((s, d1))
            } else {
                Err(format!("{s:?}; d1 annotations {:?}", d1.metadata.annotations))
            }
        }
    })
    .await;
    assert!(marked(&d1), "d1 carries the mark");
    let started = d1
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(nodetopo_crds::APPLY_STARTED_ANNOTATION))
        .expect("apply-started written with the mark");
    started
        .parse::<k8s_openapi::jiff::Timestamp>()
        .expect("apply-started is RFC 3339");
    assert!(
        status.5.contains("d1 (ProgressDeadlineExceeded"),
        "the Progressing message names d1 and the reason: {}",
        status.5
    );
    assert!(
        applied(&d1).is_none(),
        "nobody answered for d1: {:?}",
        applied(&d1)
    );
    assert!(!kd1.join("conf.d/90-nodetopo.conf").exists());
    println!(
        "d1 failed its 3 s deadline after {polls} polls (mark at {started}); Progressing: {}",
        status.5
    );

    // d1's agent comes back: its late verdict wins, the pause lifts, d2 follows.
    let _agent_d1 = start_agent(&cp, &agent, "d1", &kd1);
    let done = wait_for("the rollout completes after d1's late verdict", 120, || {
        let policies = policies.clone();
        async move {
            let p = policies.get("late").await.map_err(|e| e.to_string())?;
            let s = rollout_status(&p);
            if (s.0, s.1, s.2) == (2, 0, 0) && s.4 == "RolloutComplete" {
                Ok(s)
            } else {
                Err(format!("{s:?}"))
            }
        }
    })
    .await;
    for (n, kd) in [("d1", &kd1), ("d2", &kd2)] {
        let nt = ntopos.get(n).await.expect("ntopo");
        let a = applied(&nt).expect("verdict");
        assert_eq!(a.0, "True", "{n}: {a:?}");
        let text = std::fs::read_to_string(kd.join("conf.d/90-nodetopo.conf")).expect("drop-in");
        assert!(
            text.contains("reservedSystemCPUs: \"0-1,32-33\""),
            "{n}: {text}"
        );
    }
    println!(
        "late verdict taken: {}; node heartbeats played: {}",
        done.5,
        heartbeats.count()
    );
}
