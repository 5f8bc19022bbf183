//! An eviction the server accepts, then the re-plan and the apply.

use super::harness::*;

#[tokio::test]
async fn accepted_eviction_then_replan() {
    let Some((cp, operator, agent)) = cluster().await else {
        return;
    };
    let Apis {
        nodes,
        policies,
        ntopos,
        pods,
    } = Apis::of(&cp);
    let pp = PostParams::default();
    create_nodes(&nodes, &["a1"], Some("evict-ok")).await;
    let heartbeats = Heartbeats::start(&nodes, &["a1"]);
    let uid = running_db_pod(&pods, "a1").await;
    // Static, reserved 0,32; `db` holds core 1 (CPUs 1 and 33), which the new reserved set
    // 0-1,32-33 takes: EvictFirst.
    let render = |default: &str, entries: Value| {
        let state: nodetopo_engine::change::KubeletCpuState = json_of(json!({
            "policyName": "static", "defaultCpuSet": default, "entries": entries
        }));
        nodetopo_kubelet::cpu_checkpoint::render(
            &state,
            nodetopo_kubelet::cpu_checkpoint::CheckpointFormat::V2,
        )
    };
    let before = render("0,2-32,34-63", json!({uid.clone(): {"app": "1,33"}}));
    // What the kubelet leaves once the container is gone: its CPUs back in the shared pool.
    let released = render("0-63", json!({}));
    let kd = kubelet_dir(cp.dir(), "a1", Some(&before), false, false);
    policies
        .create(
            &pp,
            &rollout_policy(
                "evict-ok",
                "evict-ok",
                json!({"mode": "Apply", "eviction": "Evict"}),
            ),
        )
        .await
        .expect("policy evict-ok");
    let _operator = start_operator(&cp, &operator);
    let _agent = start_agent(&cp, &agent, "a1", &kd);

    let mut reasons: Vec<String> = Vec::new();
    let mut played_kubelet = false;
    let mut polls = 0;
    let hang_guard = Instant::now() + Duration::from_secs(180);
    let nt = loop {
        polls += 1;
        // The operator creates a1's NodeTopology shortly after it starts.
        let nt = ntopos.get_opt("a1").await.expect("get a1");
        let verdict = nt
            .as_ref()
            .and_then(applied)
            .filter(|a| a.1 != "ObserveOnly");
        if let Some(a) = &verdict {
            if reasons.last() != Some(&a.1) {
                reasons.push(a.1.clone());
            }
        }
        if let (Some(nt), true) = (&nt, verdict.as_ref().is_some_and(|a| a.0 == "True")) {
            break nt.clone();
        }
        // Play the kubelet once the eviction was accepted and reported: the container is
        // stopped and its CPUs released in the state file, then the pod object goes.
        let waiting = verdict
            .as_ref()
            .is_some_and(|a| a.1 == "WaitingForEviction" && a.2.contains("eviction accepted"));
        if waiting && !played_kubelet {
            let pod = pods.get_opt("db").await.expect("get db");
            if pod.is_some_and(|p| p.metadata.deletion_timestamp.is_some()) {
                std::fs::write(kd.join("cpu_manager_state"), &released).expect("state");
                pods.delete("db", &kube::api::DeleteParams::default().grace_period(0))
                    .await
                    .expect("delete db");
                played_kubelet = true;
            }
        }
        assert!(
            Instant::now() < hang_guard,
            "a1 did not finish within 180s; reasons seen {reasons:?}; last {verdict:?}; agent log:\n{}",
            nodetopo_controlplane::server::tail(&cp.dir().join("agent-a1.log"), 30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        played_kubelet,
        "applied before the pod was gone: {reasons:?}"
    );
    assert_eq!(reasons[0], "WaitingForEviction", "{reasons:?}");
    let message = applied(&nt).map(|a| a.2).unwrap_or_default();
    assert!(
        message.contains("; KubeletAgreement True on a kubelet read after the restart"),
        "the verdict names the agreement its verify step confirmed: {message}"
    );
    let last = reasons.last().cloned().unwrap_or_default();
    assert!(
        reasons.len() == 2 && ["RestartOnly", "StateRewritten"].contains(&last.as_str()),
        "Applied reasons in order: {reasons:?}"
    );
    let change = nt
        .status
        .as_ref()
        .and_then(|s| s.change.clone())
        .expect("status.change");
    assert_eq!(
        change.done.first().map(String::as_str),
        Some(format!("eviction of {NS}/db requested (Eviction API)").as_str()),
        "{change:?}"
    );
    assert!(
        change
            .done
            .iter()
            .any(|d| d.contains("started the kubelet") || d == "restarted the kubelet"),
        "{change:?}"
    );
    assert_ne!(
        change.class, "EvictFirst",
        "the final plan needs no eviction: {change:?}"
    );
    let dropin = std::fs::read_to_string(kd.join("conf.d/90-nodetopo.conf")).expect("drop-in");
    assert!(dropin.contains("kind: KubeletConfiguration"), "{dropin}");
    assert!(
        dropin.contains("reservedSystemCPUs: \"0-1,32-33\""),
        "{dropin}"
    );
    assert!(
        dropin.contains("topologyManagerPolicy: \"best-effort\""),
        "{dropin}"
    );
    let state = std::fs::read_to_string(kd.join("cpu_manager_state")).expect("state");
    let read = nodetopo_kubelet::cpu_checkpoint::parse(&state).expect("state file valid");
    assert!(read.entries.is_empty(), "{state}");
    if last == "RestartOnly" {
        assert_eq!(
            state, released,
            "RestartOnly leaves the state file as the kubelet left it"
        );
    }
    assert!(pods.get_opt("db").await.expect("get db").is_none());
    let hooks = std::fs::read_to_string(kd.join("hooks.log")).unwrap_or_default();
    assert!(hooks.ends_with("start\n"), "{hooks}");
    println!(
        "accepted eviction then re-plan: {polls} polls, Applied reasons {reasons:?}, change.done {:?}; node heartbeats played: {}",
        change.done,
        heartbeats.count()
    );
}
