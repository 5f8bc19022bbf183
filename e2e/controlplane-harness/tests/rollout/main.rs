//! The rollout end to end against a real apiserver (its own control plane): the operator
//! binary and one agent binary per Node (cluster mode, `--actuation`), each agent running the
//! local executor on its own temp kubelet directory (config file, drop-in directory, state
//! file) with fake restart hooks (shell scripts that log each call). No kubelet runs: the
//! test plays each kubelet's node status updates ([`harness::Heartbeats`]: Ready True with a fresh
//! lastHeartbeatTime every half second), which the agent's verify step waits for after a
//! restart.
//!
//! - Policy `roll` (Apply, maxUnavailable 40% of 5 = 2) over r1..r5: r3's start hook fails
//!   once, and r4 (same batch) finishes only after r3 has failed. Every poll checks that at most 2 nodes are marked and without a verdict, and that
//!   no node of the second batch is marked before the first batch has its verdicts. r3 ends
//!   Applied False/Failed with its files restored; r4 (same batch) updated; r5 never marked;
//!   the policy counts updated 3, failed 1, pending 1 and Progressing False/Paused.
//! - Policy `watch` (no rollout section: Observe) over o1: nothing marked, Applied
//!   False/ObserveOnly, no drop-in written.
//! - Policy `evict` (Apply, eviction Evict) over e1, whose kubelet state gives pod `db` CPUs
//!   the new reserved set takes (plan EvictFirst). A PodDisruptionBudget (minAvailable 1, its
//!   status set as the disruption controller would: 1 healthy, 0 disruptions allowed) covers
//!   `db`: the real server refuses the eviction (429), the pod stays, and e1 reports
//!   Applied False/WaitingForEviction naming the refusal.
//!
//! [`deadline::progress_deadline_fails_a_silent_node_and_its_late_verdict_wins`]: policy `late` (Apply,
//! progressDeadlineSeconds 3) over d1 (no agent) and d2: d1 is marked, its deadline passes,
//! the policy shows it failed (`ProgressDeadlineExceeded`) and Progressing False/Paused, d2 is
//! never marked; then d1's agent starts late, its verdict wins, and the rollout completes.
//!
//! [`eviction::accepted_eviction_then_replan`]: policy `evict-ok` (Apply, eviction Evict, no PDB) over
//! a1, whose pod `db` holds CPUs the new reserved set takes (EvictFirst). The real server
//! accepts the eviction (the pod only gets a deletionTimestamp: no kubelet); the test plays
//! the kubelet (drops `db`'s entries from the state file, then deletes the pod with grace 0);
//! the agent re-plans and applies. Applied goes WaitingForEviction, then RestartOnly or
//! StateRewritten, and the final status.change lists the eviction and the apply.
//!
//! [`agreement::kubelet_disagreeing_after_the_restart_rolls_back`]: policy `agree` over g1
//! with pod `db`: in Observe mode the test reads where nodetopo places `db` and writes the
//! kubelet state holding it there (KubeletAgreement True); the start hook of the apply's
//! restart moves `db` to another core once. Switched to Apply, the verify step sees
//! KubeletAgreement False with a difference that was not there before the apply, the
//! apply is rolled back (drop-in removed, hooks stop, start, stop, start) and Applied is
//! False/Failed naming the difference.
//!
//! [`local_apply::local_apply_waits_for_the_node`]: `nodetopo-agent apply --node` (the local
//! executor, no operator) on l1 (heartbeats played) is applied after l1 is Ready again; on
//! l2, whose heartbeat stopped, it fails verification on the Node and rolls back.
//!
//! [`node_ready::node_not_ready_after_the_restart_rolls_back`]: policy `nr` (Apply, maxUnavailable 1)
//! over n1 and n2; n1's heartbeat stops before the rollout (the node lifecycle controller's
//! Ready Unknown is written), so n1's apply fails verification after
//! `--actuation-verify-seconds 3`: drop-in removed and state file restored byte for byte, the
//! kubelet restarted again (hooks stop, start, stop, start), Applied False/Failed naming Node
//! n1 and Ready=Unknown, the rollout paused with n2 never marked.

mod agreement;
mod deadline;
mod eviction;
mod harness;
mod local_apply;
mod node_ready;

use harness::*;

#[tokio::test]
async fn rollout_against_a_real_apiserver() {
    let Some((cp, operator, agent)) = cluster().await else {
        return;
    };
    let Apis {
        nodes,
        policies,
        ntopos,
        pods,
    } = Apis::of(&cp);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cp.client(), NS);
    let pp = PostParams::default();

    let rollout_nodes = ["r1", "r2", "r3", "r4", "r5"];
    create_nodes(&nodes, &rollout_nodes, Some("roll")).await;
    create_nodes(&nodes, &["o1"], Some("observe")).await;
    create_nodes(&nodes, &["e1"], Some("evict")).await;
    let heartbeats = Heartbeats::start(&nodes, &["r1", "r2", "r3", "r4", "r5", "o1", "e1"]);

    // e1's pod `db`, running and ready as a kubelet would report it, covered by a PDB that
    // allows no disruption.
    let uid = running_db_pod(&pods, "e1").await;
    let pdb = pdbs
        .create(
            &pp,
            &json_of(json!({
                "metadata": {"name": "db", "namespace": NS},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}
            })),
        )
        .await
        .expect("PDB");
    // What the disruption controller (not running here) would write.
    pdbs.patch_status(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "observedGeneration": pdb.metadata.generation,
            "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1,
            "disruptionsAllowed": 0}})),
    )
    .await
    .expect("PDB status");

    // e1's kubelet state: static, reserved 0,32, `db` holds core 1 (CPUs 1 and 33).
    let e1_state: nodetopo_engine::change::KubeletCpuState = json_of(json!({
        "policyName": "static", "defaultCpuSet": "0,2-32,34-63",
        "entries": {uid.clone(): {"app": "1,33"}}
    }));
    let e1_state_text = nodetopo_kubelet::cpu_checkpoint::render(
        &e1_state,
        nodetopo_kubelet::cpu_checkpoint::CheckpointFormat::V2,
    );

    let root = cp.dir().to_path_buf();
    let mut kdirs = std::collections::BTreeMap::new();
    for n in rollout_nodes.iter().chain(&["o1"]) {
        kdirs.insert(
            n.to_string(),
            kubelet_dir(&root, n, None, *n == "r3", *n == "r4"),
        );
    }
    kdirs.insert(
        "e1".to_string(),
        kubelet_dir(&root, "e1", Some(&e1_state_text), false, false),
    );

    let config = json!({"cpuManager": {"policy": "static", "reservedSystemCPUs": "0-1,32-33"},
                        "topologyManager": {"policy": "best-effort"}});
    let policy = |name: &str, pool: &str, rollout: Option<Value>| -> NodeResourcePolicy {
        let mut spec = config.clone();
        spec["nodeSelector"] = json!({"matchLabels": {"pool": pool}});
        if let Some(r) = rollout {
            spec["rollout"] = r;
        }
        json_of(
            json!({"apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeResourcePolicy",
                       "metadata": {"name": name}, "spec": spec}),
        )
    };
    policies
        .create(
            &pp,
            &policy(
                "roll",
                "roll",
                Some(json!({"mode": "Apply", "maxUnavailable": "40%"})),
            ),
        )
        .await
        .expect("policy roll");
    policies
        .create(&pp, &policy("watch", "observe", None))
        .await
        .expect("policy watch");
    policies
        .create(
            &pp,
            &policy(
                "evict",
                "evict",
                Some(json!({"mode": "Apply", "eviction": "Evict"})),
            ),
        )
        .await
        .expect("policy evict");

    let _operator = start_operator(&cp, &operator);
    let _agents: Vec<Proc> = kdirs
        .iter()
        .map(|(n, d)| start_agent(&cp, &agent, n, d))
        .collect();

    // The rollout of `roll`, watched poll by poll.
    let mut polls = 0;
    let mut max_in_flight = 0;
    let mut seen_in_flight = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let final_policy = loop {
        let list = ntopos.list(&ListParams::default()).await.expect("list");
        let roll: Vec<&NodeTopology> = list
            .items
            .iter()
            .filter(|nt| name(nt).starts_with('r'))
            .collect();
        let in_flight: Vec<&str> = roll
            .iter()
            .filter(|nt| marked(nt) && applied(nt).is_none_or(|a| a.1 == "ObserveOnly"))
            .map(|nt| name(nt))
            .collect();
        assert!(
            in_flight.len() <= 2,
            "maxUnavailable 40% of 5 = 2, but in progress: {in_flight:?}"
        );
        max_in_flight = max_in_flight.max(in_flight.len());
        seen_in_flight.extend(in_flight.iter().map(|s| s.to_string()));
        let verdict = |n: &str| {
            roll.iter()
                .find(|nt| name(nt) == n)
                .and_then(|nt| applied(nt))
                .filter(|a| a.1 != "ObserveOnly")
        };
        let second_batch_marked = roll
            .iter()
            .any(|nt| ["r3", "r4"].contains(&name(nt)) && marked(nt));
        if second_batch_marked {
            assert!(
                verdict("r1").is_some() && verdict("r2").is_some(),
                "r3/r4 marked before r1 and r2 had their verdicts"
            );
        }
        // r4 (r3's batch partner) finishes only once r3 has failed, so the pause holds r5
        // deterministically.
        let release = kdirs["r4"].join("release");
        if verdict("r3").is_some_and(|a| a.1 == "Failed") && !release.exists() {
            std::fs::write(&release, "").expect("releasing r4");
        }
        assert!(
            !roll.iter().any(|nt| name(nt) == "r5" && marked(nt)),
            "r5 was marked although r3 failed and pauseOnFailure defaults to true"
        );
        polls += 1;
        let p = policies.get("roll").await.expect("policy");
        let s = p.status.clone().unwrap_or_default();
        let progressing = s
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .map(|c| (c.status.clone(), c.reason.clone()));
        if (s.updated_nodes, s.failed_nodes, s.pending_nodes) == (3, 1, 1)
            && progressing == Some(("False".into(), "Paused".into()))
        {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "rollout of `roll` did not pause as expected after 120s; status: {s:?}; NodeTopologies: {:?}",
            roll.iter()
                .map(|nt| (name(nt), marked(nt), applied(nt)))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let msg = final_policy
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Progressing"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    println!(
        "rollout paused after {polls} polls; at most {max_in_flight} node(s) in progress at once; seen in progress: {seen_in_flight:?}; Progressing: {msg}"
    );

    // Per node: r1, r2, r4 run the drop-in; r3 failed and is restored; r5 untouched.
    for n in rollout_nodes {
        let nt = ntopos.get(n).await.expect("ntopo");
        let a = applied(&nt);
        let dropin = kdirs[n].join("conf.d/90-nodetopo.conf");
        let hooks = std::fs::read_to_string(kdirs[n].join("hooks.log")).unwrap_or_default();
        match n {
            "r1" | "r2" | "r4" => {
                let (status, reason, message) = a.clone().expect("verdict");
                assert_eq!(status, "True", "{n}: {a:?}");
                assert!(
                    ["RestartOnly", "StateRewritten"].contains(&reason.as_str()),
                    "{n}: {a:?}"
                );
                assert!(
                    message.contains("; KubeletAgreement True on a kubelet read after the restart: the kubelet's CPU assignments equal nodetopo's"),
                    "{n}: the verdict names the agreement its verify step confirmed: {message}"
                );
                let text = std::fs::read_to_string(&dropin).expect("drop-in written");
                assert!(text.contains("reservedSystemCPUs: \"0-1,32-33\""), "{text}");
                assert!(
                    text.contains("topologyManagerPolicy: \"best-effort\""),
                    "{text}"
                );
                let mode = std::fs::metadata(&dropin)
                    .expect("mode")
                    .permissions()
                    .mode();
                assert_eq!(mode & 0o777, 0o644, "{n}: drop-in mode");
                assert!(hooks.contains("start"), "{n}: hooks {hooks}");
                let change = nt.status.as_ref().and_then(|s| s.change.clone());
                let change = change.expect("status.change");
                assert!(!change.done.is_empty(), "{n}: {change:?}");
            }
            "r3" => {
                let (status, reason, message) = a.clone().expect("verdict");
                assert_eq!((status.as_str(), reason.as_str()), ("False", "Failed"));
                assert!(message.contains("restored"), "{message}");
                assert!(
                    !dropin.exists(),
                    "r3: the drop-in that did not exist before must be removed again"
                );
                assert!(!kdirs[n].join("nodetopo-apply.journal").exists());
                assert_eq!(hooks, "stop\nstart-failed\nstop\nstart\n", "r3 hooks");
            }
            _ => {
                assert!(!marked(&nt), "r5 marked");
                assert!(!dropin.exists(), "r5 touched");
                assert_eq!(hooks, "", "r5 hooks");
                assert_eq!(a.map(|a| a.1), Some("ObserveOnly".into()), "r5");
            }
        }
    }
    println!("rollout nodes checked: {}", rollout_nodes.len());

    // Observe: o1 is reported, never marked or touched.
    let o1 = wait_for("o1 reports ObserveOnly", 60, || async {
        let nt = ntopos.get("o1").await.map_err(|e| e.to_string())?;
        match applied(&nt) {
            Some(a) if a.1 == "ObserveOnly" => Ok(nt),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(!marked(&o1));
    assert!(!kdirs["o1"].join("conf.d/90-nodetopo.conf").exists());
    let watch = policies.get("watch").await.expect("policy watch");
    let wc = watch
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Progressing"))
        .map(|c| (c.status.clone(), c.reason.clone()));
    assert_eq!(wc, Some(("False".into(), "ObserveOnly".into())));

    // Evict: the real server refuses the eviction the PDB forbids.
    let (reason, message, change) = wait_for("e1 reports the refused eviction", 60, || async {
        let nt = ntopos.get("e1").await.map_err(|e| e.to_string())?;
        match applied(&nt) {
            Some((s, r, m)) if r == "WaitingForEviction" && m.contains("refused") => {
                Ok((format!("{s}/{r}"), m, nt.status.and_then(|s| s.change)))
            }
            other => {
                let p = policies.get("evict").await.map_err(|e| e.to_string())?;
                Err(format!(
                    "{other:?}; annotations {:?}; policy status {:?}; agent log:\n{}",
                    nt.metadata.annotations,
                    p.status,
                    nodetopo_controlplane::server::tail(&cp.dir().join("agent-e1.log"), 30)
                ))
            }
        }
    })
    .await;
    assert_eq!(reason, "False/WaitingForEviction");
    assert!(
        message.contains("disruption budget"),
        "the refusal names the PodDisruptionBudget: {message}"
    );
    assert!(message.contains(&format!("{NS}/db")), "{message}");
    let change = change.expect("status.change");
    assert_eq!(change.class, "EvictFirst");
    assert!(
        change.done.iter().any(|d| d.contains("refused")),
        "{change:?}"
    );
    let db = pods.get("db").await.expect("db still exists");
    assert!(db.metadata.deletion_timestamp.is_none(), "db not deleted");
    assert!(!kdirs["e1"].join("conf.d/90-nodetopo.conf").exists());
    assert_eq!(
        std::fs::read_to_string(kdirs["e1"].join("cpu_manager_state")).expect("state"),
        e1_state_text,
        "e1's state untouched"
    );
    println!("eviction refused by the apiserver: {message}");
    println!("node heartbeats played: {}", heartbeats.count());
}
