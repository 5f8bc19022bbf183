//! The pure actuation decisions: when to apply, and the verdict of each executor report.

use nodetopo_engine::change::PlanStep;

use super::*;

fn files() -> KubeletFiles {
    KubeletFiles {
        config: "/k/config.yaml".into(),
        config_dir: "/k/conf.d".into(),
        state: "/k/cpu_manager_state".into(),
    }
}

fn report(reason_: &str, applied: bool, class: ChangeClass, pods: &[&str]) -> ApplyReport {
    ApplyReport {
        applied,
        reason: reason_.into(),
        message: format!("{reason_} message"),
        recovery: Recovery::Nothing,
        plan: ChangePlan {
            class,
            config_changes: vec!["reservedSystemCPUs: \"0\" -> \"0-1\"".into()],
            steps: vec![PlanStep {
                class,
                reason: "why".into(),
                pods: pods.iter().map(|p| p.to_string()).collect(),
            }],
            non_conforming: vec![],
            new_state: None,
            expected_state: None,
        },
        actions: vec![],
        kubelet_command_line: None,
    }
}

#[test]
fn next_step_follows_the_mark() {
    let mut n = 0;
    let mut check = |enabled, gen, mark, evict, last: Option<Last>, want: &str| {
        let got = match next_step(enabled, gen, mark, evict, last.as_ref()) {
            Step::Idle => "idle".to_string(),
            Step::Report(o) => o.condition.reason,
            Step::Apply { eviction, .. } => format!("apply {eviction:?}"),
        };
        assert_eq!(got, want, "{enabled} {gen:?} {mark:?} {evict:?} {last:?}");
        n += 1;
    };
    check(true, None, Some("1"), None, None, "idle");
    // Not marked: ObserveOnly once with actuation on, nothing with it off.
    check(true, Some(2), None, None, None, "ObserveOnly");
    check(false, Some(2), None, None, None, "idle");
    check(
        true,
        Some(2),
        None,
        None,
        Some((2, "ObserveOnly".into(), false)),
        "idle",
    );
    // A mark for an older generation is not a mark.
    check(true, Some(2), Some("1"), None, None, "ObserveOnly");
    check(true, Some(2), Some("2"), None, None, "apply Never");
    check(
        true,
        Some(2),
        Some(" 2 "),
        Some("Evict"),
        None,
        "apply Evict",
    );
    check(
        true,
        Some(2),
        Some("2"),
        Some("Evict"),
        Some((2, "ObserveOnly".into(), false)),
        "apply Evict",
    );
    check(false, Some(2), Some("2"), None, None, "ActuationDisabled");
    // Final verdicts for this generation stop; a waiting one retries; older ones do not count.
    for (r, ok) in [
        ("StateRewritten", true),
        ("Failed", false),
        ("DrainRequired", false),
        ("EvictionNotAllowed", false),
        ("ActuationDisabled", false),
    ] {
        check(
            true,
            Some(2),
            Some("2"),
            None,
            Some((2, r.into(), ok)),
            "idle",
        );
    }
    check(
        true,
        Some(2),
        Some("2"),
        Some("Evict"),
        Some((2, "WaitingForEviction".into(), false)),
        "apply Evict",
    );
    check(
        true,
        Some(3),
        Some("3"),
        None,
        Some((2, "Failed".into(), false)),
        "apply Never",
    );
    println!("actuation next_step: {n} cases");
}

#[test]
fn verdicts_of_reports() {
    let f = files();
    let o = outcome_of(
        4,
        &f,
        &report("StateRewritten", true, ChangeClass::RewriteState, &[]),
        EvictionMode::Never,
        &[],
        vec!["/k/cpu_manager_state.nodetopo-backup".into()],
    );
    assert!(o.condition.status);
    assert_eq!(o.condition.reason, "StateRewritten");
    let ch = o.change.unwrap();
    assert_eq!(ch.class, "RewriteState");
    assert_eq!(ch.generation, Some(4));
    assert!(ch
        .done
        .iter()
        .any(|d| d.contains("rewrote /k/cpu_manager_state")));
    assert_eq!(ch.backups.len(), 1);

    let o = outcome_of(
        4,
        &f,
        &report("Failed", false, ChangeClass::RestartOnly, &[]),
        EvictionMode::Never,
        &[],
        vec![],
    );
    assert_eq!(
        (o.condition.status, o.condition.reason.as_str()),
        (false, "Failed")
    );
    assert!(o.change.unwrap().done[0].contains("rolled back"));

    let evict = report(
        "WaitingForEviction",
        false,
        ChangeClass::EvictFirst,
        &["ns/b", "ns/a"],
    );
    let o = outcome_of(4, &f, &evict, EvictionMode::Never, &[], vec![]);
    assert_eq!(o.condition.reason, "EvictionNotAllowed");
    assert!(
        o.condition.message.contains("ns/a, ns/b"),
        "{}",
        o.condition.message
    );
    assert!(o.change.unwrap().done.is_empty(), "nothing done with Never");

    let answers = [
        EvictionResult {
            pod: "ns/a".into(),
            result: Ok(()),
        },
        EvictionResult {
            pod: "ns/b".into(),
            result: Err(
                "Cannot evict pod as it would violate the pod's disruption budget. (429)".into(),
            ),
        },
    ];
    let o = outcome_of(4, &f, &evict, EvictionMode::Evict, &answers, vec![]);
    assert_eq!(o.condition.reason, "WaitingForEviction");
    assert!(o.condition.message.contains("ns/b: eviction refused"));
    assert_eq!(o.change.unwrap().done.len(), 2);

    let o = outcome_of(
        4,
        &f,
        &report("DrainRequired", false, ChangeClass::Drain, &["ns/a"]),
        EvictionMode::Evict,
        &[],
        vec![],
    );
    assert_eq!(o.condition.reason, "DrainRequired");
    assert_eq!(pods_to_evict(&evict.plan), ["ns/a", "ns/b"]);
}

#[test]
fn desired_fields_from_a_spec() {
    let spec: NodeTopologySpec = serde_json::from_value(serde_json::json!({
        "cpuManager": {"policy": "static", "reservedSystemCPUs": "0,32",
                       "options": {"full-pcpus-only": "true"}},
        "topologyManager": {"policy": "single-numa-node", "scope": "pod"}
    }))
    .unwrap();
    let d = desired_from_spec(&spec).unwrap();
    assert_eq!(d.cpu_manager_policy.as_str(), "static");
    assert_eq!(d.reserved_system_cpus.to_string(), "0,32");
    assert_eq!(d.topology_manager_policy.name(), "single-numa-node");
    assert_eq!(d.topology_manager_scope.name(), "pod");
    assert_eq!(d.cpu_manager_policy_options["full-pcpus-only"], "true");
}

#[test]
fn dry_run_reports_what_it_would_do_and_is_final() {
    let mut r = report("DryRun", false, ChangeClass::RewriteState, &[]);
    r.actions = vec![
        "stop the kubelet".into(),
        "rewrite /k/cpu_manager_state".into(),
        "start the kubelet".into(),
    ];
    let o = outcome_of(7, &files(), &r, EvictionMode::Never, &[], vec![]);
    assert_eq!(
        (o.condition.status, o.condition.reason.as_str()),
        (false, "DryRun")
    );
    assert!(
        o.condition.message.contains("nothing was changed")
            && o.condition.message.contains("not restarted")
            && o.condition.message.contains("RewriteState"),
        "{}",
        o.condition.message
    );
    let done = o.change.unwrap().done;
    assert_eq!(done.len(), 3);
    assert!(done
        .iter()
        .all(|d| d.starts_with("dry run, not done: would ")));
    // Never claims a restart happened.
    assert!(!done.iter().any(|d| d.contains("restarted the kubelet")));
    assert!(is_final("DryRun", false));
    let last = (7, "DryRun".to_string(), false);
    assert_eq!(
        next_step(true, Some(7), Some("7"), None, Some(&last)),
        Step::Idle
    );
    println!("actuation dry run: 1 verdict, final for its generation");
}

#[test]
fn accepted_evictions_are_carried_into_the_final_verdict() {
    let f = files();
    let evict = report(
        "WaitingForEviction",
        false,
        ChangeClass::EvictFirst,
        &["ns/db"],
    );
    let accepted = [EvictionResult {
        pod: "ns/db".into(),
        result: Ok(()),
    }];
    let mut earlier = Earlier::default();
    let mut n = 0;
    // Two re-plans while the pod terminates: one eviction step, not two.
    for _ in 0..2 {
        let o = earlier.record(outcome_of(
            7,
            &f,
            &evict,
            EvictionMode::Evict,
            &accepted,
            vec![],
        ));
        assert_eq!(o.condition.reason, reason::WAITING_FOR_EVICTION);
        let done = o.change.expect("change").done;
        assert_eq!(done, ["eviction of ns/db requested (Eviction API)"]);
        n += 1;
    }
    // The apply after it lists the eviction first, then its own steps.
    let ok = report("RestartOnly", true, ChangeClass::RestartOnly, &[]);
    let o = earlier.record(outcome_of(7, &f, &ok, EvictionMode::Evict, &[], vec![]));
    let done = o.change.expect("change").done;
    assert_eq!(done[0], "eviction of ns/db requested (Eviction API)");
    assert!(done[1].starts_with("backed up and wrote"), "{done:?}");
    assert!(
        done.iter().any(|d| d == "restarted the kubelet"),
        "{done:?}"
    );
    n += 1;
    // A refused eviction is not carried; a new generation forgets the old steps.
    let refused = [EvictionResult {
        pod: "ns/db".into(),
        result: Err("Cannot evict pod (429)".into()),
    }];
    let o = earlier.record(outcome_of(
        8,
        &f,
        &evict,
        EvictionMode::Evict,
        &refused,
        vec![],
    ));
    assert_eq!(
        o.change.expect("change").done,
        ["eviction of ns/db refused: Cannot evict pod (429)"]
    );
    let o = earlier.record(outcome_of(8, &f, &ok, EvictionMode::Evict, &[], vec![]));
    let done = o.change.expect("change").done;
    assert!(done[0].starts_with("backed up and wrote"), "{done:?}");
    // A verdict without a change (a report) passes unchanged.
    let report_only = Outcome {
        generation: 9,
        condition: ConditionSpec::new(conditions::APPLIED, false, reason::OBSERVE_ONLY, "m"),
        change: None,
    };
    assert_eq!(earlier.record(report_only.clone()), report_only);
    n += 3;
    println!("carried eviction cases: {n}");
}

#[test]
fn recovery_and_applied_steps_each_have_their_done_entries() {
    assert_eq!(recovery_done(&Recovery::Nothing), None);
    assert_eq!(
        recovery_done(&Recovery::RolledBack).as_deref(),
        Some("rolled an interrupted apply back from its backups")
    );
    assert_eq!(
        recovery_done(&Recovery::RolledForward).as_deref(),
        Some("finished an interrupted apply (its files were in place)")
    );
    let f = files();
    assert_eq!(
        restart_only_done(&f),
        [
            "backed up and wrote /k/conf.d/90-nodetopo.conf (mode 0644)",
            "restarted the kubelet",
            VERIFIED,
        ]
    );
    assert_eq!(
        state_rewritten_done(&f),
        [
            "stopped the kubelet",
            "backed up /k/cpu_manager_state to /k/cpu_manager_state.nodetopo-backup",
            "rewrote /k/cpu_manager_state with the kubelet's checksum",
            "wrote /k/conf.d/90-nodetopo.conf (mode 0644)",
            "started the kubelet",
            VERIFIED,
        ]
    );
}

#[test]
fn an_eviction_verdict_lists_each_answer_or_refuses_under_never() {
    let r = report(
        "WaitingForEviction",
        false,
        ChangeClass::EvictFirst,
        &["ns/b", "ns/a"],
    );
    let answers = [
        EvictionResult {
            pod: "ns/a".into(),
            result: Ok(()),
        },
        EvictionResult {
            pod: "ns/b".into(),
            result: Err("Cannot evict pod (429)".into()),
        },
    ];
    let mut done = Vec::new();
    let (status, why, msg) = eviction_verdict(&r, EvictionMode::Never, &answers, &mut done);
    assert_eq!((status, why), (false, reason::EVICTION_NOT_ALLOWED));
    assert!(
        msg.starts_with("the plan needs ns/a, ns/b evicted"),
        "{msg}"
    );
    assert!(done.is_empty(), "{done:?}");
    let (status, why, msg) = eviction_verdict(&r, EvictionMode::Evict, &answers, &mut done);
    assert_eq!((status, why), (false, reason::WAITING_FOR_EVICTION));
    assert_eq!(
        msg,
        "waiting until the kubelet has released the CPUs of ns/a, ns/b (ns/a: eviction accepted; ns/b: eviction refused: Cannot evict pod (429)); WaitingForEviction message"
    );
    assert_eq!(
        done,
        [
            "eviction of ns/a requested (Eviction API)",
            "eviction of ns/b refused: Cannot evict pod (429)",
        ]
    );
}
