//! A kubelet that comes back from the restart with assignments nodetopo does not agree with:
//! the verify step waits for KubeletAgreement on a kubelet read after the restart, refuses,
//! and the apply is rolled back.

use super::harness::*;

/// nodetopo's CPUs for pod `db` in the node's status (its own decision, before the kubelet
/// holds the pod).
fn db_cpus(nt: &NodeTopology) -> Option<String> {
    let s = nt.status.as_ref()?;
    s.allocations
        .iter()
        .find(|a| a.pod.ends_with("/db") && a.container == "app")
        .map(|a| a.predicted_cpus.clone().unwrap_or_else(|| a.cpus.clone()))
}

fn agreement(nt: &NodeTopology) -> Option<(String, String)> {
    let c = nt
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "KubeletAgreement")?;
    Some((c.status.clone(), c.message.clone()))
}

#[tokio::test]
async fn kubelet_disagreeing_after_the_restart_rolls_back() {
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
    create_nodes(&nodes, &["g1"], Some("agree")).await;
    let heartbeats = Heartbeats::start(&nodes, &["g1"]);
    let uid = running_db_pod(&pods, "g1").await;
    let kd = kubelet_dir(cp.dir(), "g1", None, false, false);
    std::fs::copy(
        kd.join("fresh_cpu_manager_state"),
        kd.join("cpu_manager_state"),
    )
    .expect("state");
    // Observe first: learn where nodetopo places `db` under the policy.
    policies
        .create(
            &pp,
            &rollout_policy("agree", "agree", json!({"mode": "Observe"})),
        )
        .await
        .expect("policy agree");
    let _operator = start_operator(&cp, &operator);
    let _agent = start_agent_with(&cp, &agent, "g1", &kd, &["--actuation-verify-seconds", "5"]);
    let placed = wait_for("nodetopo places db on g1", 60, || {
        let ntopos = ntopos.clone();
        async move {
            let nt = ntopos.get_opt("g1").await.map_err(|e| e.to_string())?;
            nt.as_ref()
                .and_then(db_cpus)
                .ok_or_else(|| "no allocation yet".into())
        }
    })
    .await;
    // The kubelet holds `db` where nodetopo placed it: agreement before the apply.
    let before = kubelet_state_text(json!({uid.clone(): {"app": placed.clone()}}));
    std::fs::write(kd.join("cpu_manager_state"), &before).expect("state");
    wait_for("KubeletAgreement True before the apply", 60, || {
        let ntopos = ntopos.clone();
        async move {
            let nt = ntopos.get("g1").await.map_err(|e| e.to_string())?;
            match agreement(&nt) {
                Some((st, _)) if st == "True" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    // The next start moves `db` elsewhere (a kubelet that did not keep its assignment).
    let elsewhere = if placed == "15,47" { "14,46" } else { "15,47" };
    let moved = kubelet_state_text(json!({uid.clone(): {"app": elsewhere}}));
    std::fs::write(kd.join("moved_cpu_manager_state"), &moved).expect("moved state");
    std::fs::write(
        kd.join("on-start.sh"),
        format!(
            "if [ ! -e {m} ]; then touch {m}; cp {s} {d}; fi\n",
            m = kd.join("moved-once").display(),
            s = kd.join("moved_cpu_manager_state").display(),
            d = kd.join("cpu_manager_state").display()
        ),
    )
    .expect("on-start hook");
    policies
        .patch(
            "agree",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rollout": {"mode": "Apply"}}})),
        )
        .await
        .expect("Apply");

    let mut polls = 0;
    let (st, reason, message) = wait_for("g1's apply is refused by the verify step", 120, || {
        polls += 1;
        let ntopos = ntopos.clone();
        async move {
            let nt = ntopos.get("g1").await.map_err(|e| e.to_string())?;
            match applied(&nt) {
                Some(a) if a.1 != "ObserveOnly" => Ok(a),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "Failed"),
        "{message}"
    );
    let diff = format!("{NS}/db/app (kubelet \"{elsewhere}\", nodetopo \"{placed}\")");
    assert_names_all(
        "g1",
        &message,
        &[
        "verification failed: the restarted kubelet failed its checks: KubeletAgreement not confirmed within 5s (--actuation-verify-seconds) of the kubelet restart",
        "KubeletAgreement False after the restart with 1 differences not present before the apply",
        diff.as_str(),
        "the previous configuration and state were restored and the kubelet restarted (healthy again)",
        ],
    );
    assert!(
        !kd.join("conf.d/90-nodetopo.conf").exists(),
        "the drop-in that did not exist before is removed again"
    );
    assert!(!kd.join("nodetopo-apply.journal").exists());
    let hooks = std::fs::read_to_string(kd.join("hooks.log")).unwrap_or_default();
    assert_eq!(
        hooks, "stop\nstart\nstop\nstart\n",
        "g1 hooks: the apply's restart, then the rollback's"
    );
    println!(
        "g1 disagreeing after the restart: rolled back after {polls} polls; nodetopo placed db on {placed}, the restarted kubelet on {elsewhere}; Applied: {message}; node heartbeats played: {}",
        heartbeats.count()
    );
}
