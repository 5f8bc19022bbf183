//! The guard's script run for real (`/bin/sh`, with a `systemctl` that records its calls)
//! after an apply that dies at every step between the guard's arming and the commit.
//!
//! Real: the executor (`apply` on temporary kubelet files seeded from examples/diff), the
//! guard's shell script, cp/mv/rm/grep/sync. Not real: systemd (the script's `systemctl` is
//! a recording stand-in; the transient unit's D-Bus call is covered by
//! agent/tests/systemd_dbus.rs) and the agent's death, which is a panic out of the
//! executor at the step (no code of the executor runs after it, as after a SIGKILL).

use std::os::unix::fs::PermissionsExt as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::actuation::stage::Journal;
use crate::actuation::{apply, ApplyInput, KubeletFiles, KubeletService, Step, STEPS};

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/diff")
}

fn kubelet_files(root: &Path) -> KubeletFiles {
    std::fs::create_dir_all(root.join("conf.d")).unwrap();
    std::fs::create_dir_all(root.join("lib")).unwrap();
    std::fs::copy(
        examples().join("kubelet-config.yaml"),
        root.join("config.yaml"),
    )
    .unwrap();
    std::fs::copy(
        examples().join("cpu_manager_state"),
        root.join("lib/cpu_manager_state"),
    )
    .unwrap();
    KubeletFiles {
        config: root.join("config.yaml"),
        config_dir: root.join("conf.d"),
        state: root.join("lib/cpu_manager_state"),
    }
}

/// A kubelet service whose agent dies (panics) on reaching `die_at`; it records that the
/// guard was armed.
struct Dying {
    die_at: Option<Step>,
    armed: Arc<Mutex<bool>>,
}

impl KubeletService for Dying {
    fn stop(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn start(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn healthy(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn arm_guard(&mut self) -> Result<bool, String> {
        *self.armed.lock().unwrap() = true;
        Ok(true)
    }
    fn reached(&mut self, step: Step) {
        if self.die_at == Some(step) {
            panic!("the agent dies at {step:?}");
        }
    }
}

type Pair = (Option<Vec<u8>>, Option<Vec<u8>>);

fn pair(f: &KubeletFiles) -> Pair {
    (std::fs::read(f.dropin()).ok(), std::fs::read(&f.state).ok())
}

/// Applies policy-strict (RewriteState) on fresh files under `root`, dying at `die_at`.
fn apply_dying(root: &Path, die_at: Option<Step>) -> (KubeletFiles, bool) {
    let files = kubelet_files(root);
    let topology = nodetopo_kubelet::machine(Some("epyc-7303-2p"), None).unwrap();
    let pods = nodetopo_kubelet::pods::read_pod_files(&[examples().join("pods.yaml")]).unwrap();
    let policy = examples().join("policy-strict.yaml");
    let text = std::fs::read_to_string(&policy).unwrap();
    let desired = nodetopo_kubelet::config::desired_from_policy(&text, &policy).unwrap();
    let armed = Arc::new(Mutex::new(false));
    let mut svc = Dying {
        die_at,
        armed: armed.clone(),
    };
    let r = catch_unwind(AssertUnwindSafe(|| {
        apply(
            &ApplyInput {
                topology: &topology,
                files: &files,
                pods: &pods,
                desired: &desired,
                dry_run: false,
                process: None,
            },
            &mut svc,
        )
    }));
    match (die_at, r) {
        (None, Ok(Ok(report))) => assert_eq!(report.reason, "StateRewritten", "{report:?}"),
        (None, other) => panic!("the apply without a death: {other:?}"),
        (Some(_), r) => assert!(r.is_err(), "the agent did not die"),
    }
    let armed = *armed.lock().unwrap();
    (files, armed)
}

/// Runs the guard's script (delay 0) for `files` with a recording `systemctl`; returns its
/// calls.
fn run_guard(root: &Path, files: &KubeletFiles) -> Vec<String> {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = root.join("systemctl.log");
    let fake = bin.join("systemctl");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\necho \"$*\" >> '{}'\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let plan = GuardPlan {
        host: files.clone(),
        delay: Duration::ZERO,
    };
    let argv = plan.argv("kubelet.service");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "guard: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn the_journal_says_what_the_guard_greps() {
    let j = Journal {
        phase: "applying".into(),
        dropin_existed: true,
        state_existed: true,
        writes_state: true,
    };
    let text = serde_json::to_string(&j).unwrap();
    for key in [
        "\"dropinExisted\":true",
        "\"stateExisted\":true",
        "\"writesState\":true",
    ] {
        assert!(text.contains(key), "{text} lacks {key}");
        assert!(SCRIPT.contains(key), "the script does not grep {key}");
    }
}

#[test]
fn death_at_every_step_leaves_the_old_or_the_verified_new_pair_and_a_started_kubelet() {
    // The two pairs a kubelet may come back with.
    let old_dir = tempfile::tempdir().unwrap();
    let old = pair(&kubelet_files(old_dir.path()));
    let new_dir = tempfile::tempdir().unwrap();
    let (new_files, _) = apply_dying(new_dir.path(), None);
    let new = pair(&new_files);
    assert!(old != new && new.0.is_some());
    let mut cases = 0;
    for step in STEPS {
        let dir = tempfile::tempdir().unwrap();
        let (files, armed) = apply_dying(dir.path(), Some(step));
        assert!(armed, "{step:?}: the guard was not armed first");
        let calls = run_guard(dir.path(), &files);
        assert_eq!(
            calls.last().map(String::as_str),
            Some("start -- kubelet.service"),
            "{step:?}: the guard did not start the kubelet: {calls:?}"
        );
        let after = pair(&files);
        // Every death is before the commit: the new pair was never verified, so the guard
        // leaves (or puts back) the old one.
        assert!(
            after == old,
            "{step:?}: the guard left neither the old pair (a mix or the unverified new one)"
        );
        // Once the journal existed, the guard stopped the kubelet before restoring.
        let journaled = STEPS.iter().position(|s| *s == step).unwrap()
            >= STEPS.iter().position(|s| *s == Step::Journaled).unwrap();
        assert_eq!(
            calls.len(),
            if journaled { 2 } else { 1 },
            "{step:?}: {calls:?}"
        );
        assert!(!files.journal().exists() && !claim_of(&files.journal()).exists());
        cases += 1;
    }
    // No death: the agent committed; the guard, if it fires anyway, only starts the kubelet
    // and keeps the verified new pair.
    let calls = run_guard(new_dir.path(), &new_files);
    assert_eq!(calls, vec!["start -- kubelet.service".to_string()]);
    assert!(pair(&new_files) == new);
    println!("guard: death at {cases} steps, each left the old pair and a started kubelet");
}

#[test]
fn a_claim_left_by_a_failed_restore_is_rolled_back_by_the_next_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let old = pair(&kubelet_files(dir.path()));
    let (files, _) = apply_dying(dir.path(), Some(Step::Written));
    // The guard claimed the journal and died before restoring anything.
    std::fs::rename(files.journal(), claim_of(&files.journal())).unwrap();
    assert!(pair(&files) != old);
    let mut svc = Dying {
        die_at: None,
        armed: Arc::new(Mutex::new(false)),
    };
    let r = crate::actuation::recover(&files, &mut svc).unwrap();
    assert_eq!(r, crate::actuation::Recovery::RolledBack);
    assert!(pair(&files) == old);
    assert!(!files.journal().exists() && !claim_of(&files.journal()).exists());
}
