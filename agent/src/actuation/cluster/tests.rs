//! The cluster loop's own decisions: when a re-plan comes too soon, and the confirmation
//! an applied report's message gets.

use super::*;

fn waiting(generation: i64) -> Last {
    (generation, reason::WAITING_FOR_EVICTION.to_string(), false)
}

#[test]
fn a_replan_while_waiting_for_evictions_waits_for_the_retry_period() {
    let retry = Duration::from_secs(10);
    let apply = Step::Apply {
        generation: 7,
        eviction: EvictionMode::Evict,
    };
    let soon = Some(Duration::from_secs(3));
    let late = Some(Duration::from_secs(10));
    assert!(too_soon(&apply, Some(7), Some(&waiting(7)), soon, retry));
    // The period has passed, or no apply ran yet in this agent.
    assert!(!too_soon(&apply, Some(7), Some(&waiting(7)), late, retry));
    assert!(!too_soon(&apply, Some(7), Some(&waiting(7)), None, retry));
    // Waiting for another generation, or not waiting at all: at once.
    assert!(!too_soon(&apply, Some(8), Some(&waiting(7)), soon, retry));
    let failed = (7, reason::FAILED.to_string(), false);
    assert!(!too_soon(&apply, Some(7), Some(&failed), soon, retry));
    assert!(!too_soon(&apply, Some(7), None, soon, retry));
    // Only an apply is held back.
    assert!(!too_soon(
        &Step::Idle,
        Some(7),
        Some(&waiting(7)),
        soon,
        retry
    ));
}

#[test]
fn only_an_applied_report_says_what_the_verify_step_confirmed() {
    let plan = nodetopo_engine::change::ChangePlan {
        class: nodetopo_engine::change::ChangeClass::RestartOnly,
        config_changes: vec![],
        steps: vec![],
        non_conforming: vec![],
        new_state: None,
        expected_state: None,
    };
    let mut r = ApplyReport {
        applied: true,
        reason: "RestartOnly".into(),
        message: "restarted".into(),
        recovery: actuation::Recovery::Nothing,
        plan,
        actions: vec![],
        kubelet_command_line: None,
    };
    with_confirmation(&mut r, Some("KubeletAgreement Agree".into()));
    assert_eq!(r.message, "restarted; KubeletAgreement Agree");
    with_confirmation(&mut r, None);
    assert_eq!(r.message, "restarted; KubeletAgreement Agree");
    r.applied = false;
    r.message = "rolled back".into();
    with_confirmation(&mut r, Some("KubeletAgreement Agree".into()));
    assert_eq!(r.message, "rolled back");
}
