//! The executor's own decisions; its runs are tested in restart/guard/tests.rs (a death at
//! every step) and by the agent binary's suites.

use super::*;

#[test]
fn only_restart_and_rewrite_plans_are_carried_out() {
    assert_eq!(
        not_carried_out(ChangeClass::NoChange),
        Some((true, "NoChange"))
    );
    assert_eq!(
        not_carried_out(ChangeClass::EvictFirst),
        Some((false, "WaitingForEviction"))
    );
    assert_eq!(
        not_carried_out(ChangeClass::Drain),
        Some((false, "DrainRequired"))
    );
    assert_eq!(not_carried_out(ChangeClass::RestartOnly), None);
    assert_eq!(not_carried_out(ChangeClass::RewriteState), None);
}

/// A service that records what it is asked, failing the calls named in `fail`.
#[derive(Default)]
struct Recorder {
    calls: Vec<String>,
    fail: Vec<&'static str>,
}

impl Recorder {
    fn call(&mut self, what: &'static str) -> Result<(), String> {
        self.calls.push(what.to_string());
        if self.fail.contains(&what) {
            Err(format!("{what} refused"))
        } else {
            Ok(())
        }
    }
}

impl KubeletService for Recorder {
    fn stop(&mut self) -> Result<(), String> {
        self.call("stop")
    }
    fn start(&mut self) -> Result<(), String> {
        self.call("start")
    }
    fn restart(&mut self) -> Result<(), String> {
        self.call("restart")
    }
    fn healthy(&mut self) -> Result<(), String> {
        self.call("healthy")
    }
    fn reached(&mut self, step: Step) {
        self.calls.push(format!("{step:?}"));
    }
}

fn target(class: ChangeClass, new_state: Option<&str>) -> replan::Target {
    replan::Target {
        plan: nodetopo_engine::change::ChangePlan {
            class,
            config_changes: vec![],
            steps: vec![],
            non_conforming: vec![],
            new_state: None,
            expected_state: None,
        },
        new_state: new_state.map(String::from),
        dropin: Some("kind: KubeletConfiguration\n".into()),
    }
}

#[test]
fn a_failed_stop_or_replan_starts_the_kubelet_unchanged() {
    let planned = target(ChangeClass::RewriteState, Some("{}"));
    let mut svc = Recorder {
        fail: vec!["stop"],
        ..Recorder::default()
    };
    let mut again = || Ok(target(ChangeClass::RewriteState, Some("{}")));
    let e = stop_and_replan(&planned, true, &mut again, &mut svc).expect_err("stop fails");
    assert!(
        e.starts_with("stopping the kubelet failed: stop refused"),
        "{e}"
    );
    assert_eq!(svc.calls.first().map(String::as_str), Some("stop"));
    // Re-planned to another class: stopped, then started on the unchanged files.
    let mut svc = Recorder::default();
    let mut again = || Ok(target(ChangeClass::NoChange, None));
    let e = stop_and_replan(&planned, true, &mut again, &mut svc).expect_err("class changed");
    assert!(e.contains("RewriteState") && e.contains("NoChange"), "{e}");
    assert_eq!(svc.calls[..3], ["stop", "Stopped", "start"]);
    // The same class: stopped and re-planned, not started.
    let mut svc = Recorder::default();
    let mut again = || Ok(target(ChangeClass::RewriteState, Some("{}")));
    let t = stop_and_replan(&planned, true, &mut again, &mut svc).expect("same class");
    assert_eq!(t.new_state.as_deref(), Some("{}"));
    assert_eq!(svc.calls, ["stop", "Stopped", "Replanned"]);
}

#[test]
fn arming_a_guard_that_fails_changes_nothing() {
    struct NoGuard(Recorder);
    impl KubeletService for NoGuard {
        fn stop(&mut self) -> Result<(), String> {
            self.0.stop()
        }
        fn start(&mut self) -> Result<(), String> {
            self.0.start()
        }
        fn healthy(&mut self) -> Result<(), String> {
            self.0.healthy()
        }
        fn arm_guard(&mut self) -> Result<bool, String> {
            Err("no systemd".into())
        }
        fn reached(&mut self, step: Step) {
            self.0.reached(step)
        }
    }
    let mut svc = NoGuard(Recorder::default());
    let e = arm(&mut svc).expect_err("guard fails");
    assert_eq!(
        e,
        "arming the guard failed, so nothing was changed (the kubelet was not stopped): no systemd"
    );
    assert!(svc.0.calls.is_empty(), "{:?}", svc.0.calls);
    let mut svc = Recorder::default();
    assert_eq!(arm(&mut svc), Ok(false));
    assert_eq!(svc.calls, ["Armed"]);
}
