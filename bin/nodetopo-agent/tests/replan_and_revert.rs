//! `nodetopo-agent apply` re-plans after the stop (issue 26 point 3), and
//! `nodetopo-agent revert` takes the node back to its own configuration (point 5), on a
//! temporary kubelet directory with restart commands (`true`, or a stop command that plays
//! a kubelet checkpointing an assignment just before it stops).

use std::fs;
use std::path::Path;

use nodetopo_engine::CpuSet;
use nodetopo_kubelet::cpu_checkpoint::{self as checkpoint, CheckpointFormat};

mod common;
use common::{examples, report, Kubelet};

const OK_HOOKS: [&str; 6] = [
    "--restart",
    "command",
    "--stop-command",
    "true",
    "--start-command",
    "true",
];

/// A Guaranteed pod with 2 CPUs that the kubelet admits between the plan and the stop.
const LATE_POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: late, namespace: shop, uid: 6b1c2d0e-0000-4000-8000-00000000f004}
spec:
  containers:
  - name: worker
    resources:
      requests: {cpu: \"2\", memory: 1Gi}
      limits: {cpu: \"2\", memory: 1Gi}
status: {phase: Running}
";
const LATE_UID: &str = "6b1c2d0e-0000-4000-8000-00000000f004";

/// The example state with `worker` of the late pod on `cpus` (taken from the shared pool),
/// with the kubelet's checksum.
fn state_with_late(cpus: &str) -> String {
    let text = fs::read_to_string(examples().join("cpu_manager_state")).unwrap();
    let mut s = checkpoint::parse(&text).unwrap().engine_state().unwrap();
    let set = CpuSet::parse(cpus).unwrap();
    s.state.default_cpuset = s.state.default_cpuset.difference(&set);
    s.state
        .assignments
        .entry(LATE_UID.into())
        .or_default()
        .insert("worker".into(), set);
    checkpoint::render(&s, CheckpointFormat::V4)
}

/// A stop command that puts `state` in place of the kubelet's checkpoint (what a kubelet
/// that admitted the late pod just before it stopped leaves).
fn stop_that_checkpoints(k: &Kubelet, state: &str) -> String {
    let src = k.p("late_state");
    fs::write(&src, state).unwrap();
    format!(
        "cp {} {}",
        src.display(),
        k.p("lib/cpu_manager_state").display()
    )
}

fn with_late_pod(k: &Kubelet) -> std::path::PathBuf {
    let p = k.p("late.yaml");
    fs::write(&p, LATE_POD).unwrap();
    p
}

fn entries(state: &[u8]) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(state).unwrap();
    v["entries"].clone()
}

#[test]
fn an_assignment_checkpointed_between_plan_and_stop_is_kept() {
    let k = Kubelet::new();
    let pods = with_late_pod(&k);
    let late = state_with_late("6,38");
    let stop = stop_that_checkpoints(&k, &late);
    let out = k
        .cmd("policy-strict.yaml", &[])
        .arg("--pods")
        .arg(&pods)
        .args(["--restart", "command", "--start-command", "true"])
        .args(["--stop-command", &stop])
        .output()
        .unwrap();
    let v = report("policy-strict.yaml", &out);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "StateRewritten", "{v:#}");
    let state = k.read("lib/cpu_manager_state").unwrap();
    assert_eq!(
        entries(&state)[LATE_UID]["worker"],
        "6,38",
        "the late assignment was overwritten: {}",
        String::from_utf8_lossy(&state)
    );
    // The backup is the file as the stopped kubelet left it, not the one read before.
    assert_eq!(
        k.read("lib/cpu_manager_state.nodetopo-backup").unwrap(),
        late.as_bytes()
    );
    // And the kubelet accepts the result (the strict reservation keeps 0 and 32 out of the
    // shared pool; the late assignment is not in it either).
    let v: serde_json::Value = serde_json::from_slice(&state).unwrap();
    let default = CpuSet::parse(v["defaultCpuSet"].as_str().unwrap()).unwrap();
    for cpu in [0, 32, 6, 38] {
        assert!(!default.contains(cpu), "{cpu} in {default}");
    }
}

#[test]
fn a_plan_that_changes_class_after_the_stop_is_refused_and_the_kubelet_started_unchanged() {
    let k = Kubelet::new();
    let pods = with_late_pod(&k);
    // The late pod lands on CPU 32, which the strict policy reserves: now it needs an
    // eviction.
    let late = state_with_late("31-32");
    let stop = stop_that_checkpoints(&k, &late);
    let marker = k.p("started");
    let out = k
        .cmd("policy-strict.yaml", &[])
        .arg("--pods")
        .arg(&pods)
        .args(["--restart", "command", "--stop-command", &stop])
        .args(["--start-command", &format!("touch {}", marker.display())])
        .output()
        .unwrap();
    let v = report("policy-strict.yaml", &out);
    assert!(!out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "Failed", "{v:#}");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains("the plan changed") && msg.contains("RewriteState"),
        "{msg}"
    );
    assert!(
        msg.contains("the kubelet was started again on its unchanged files"),
        "{msg}"
    );
    assert!(marker.exists(), "the kubelet was not started again");
    // Nothing written: the state is the one the kubelet left, no drop-in, no backup, no
    // journal.
    assert_eq!(k.read("lib/cpu_manager_state").unwrap(), late.as_bytes());
    assert!(k.read("conf.d/90-nodetopo.conf").is_none());
    assert!(k.read("lib/cpu_manager_state.nodetopo-backup").is_none());
    assert!(k.read("lib/nodetopo-apply.journal").is_none());
    println!("refused: {msg}");
}

/// A state file's bytes without the final newline (the example ends with one; the kubelet's
/// and nodetopo's renderings do not).
fn body(b: Vec<u8>) -> Vec<u8> {
    b.trim_ascii_end().to_vec()
}

fn revert(k: &Kubelet, hooks: &[&str]) -> (std::process::Output, serde_json::Value) {
    let mut c = k.cmd("policy-strict.yaml", hooks);
    // `cmd` builds an apply of a policy: the same flags minus the subcommand and --policy.
    let args: Vec<std::ffi::OsString> = c.get_args().map(|a| a.to_owned()).collect();
    let mut r = std::process::Command::new(c.get_program());
    let mut skip = false;
    for a in &args {
        if skip {
            skip = false;
            continue;
        }
        if a == "--policy" {
            skip = true;
            continue;
        }
        if a == "apply" {
            r.arg("revert");
            continue;
        }
        r.arg(a);
    }
    c = r;
    let out = c.output().unwrap();
    let v = report("revert", &out);
    (out, v)
}

fn tree_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn revert_takes_the_node_back_to_its_own_configuration() {
    let original = fs::read(examples().join("cpu_manager_state")).unwrap();
    // After a RewriteState apply (strict-cpu-reservation): the drop-in goes, the state is
    // rewritten for the old policy (the reserved CPUs back in the shared pool: byte for byte
    // the node's original state), the backups go, nothing of nodetopo's stays.
    let k = Kubelet::new();
    let (out, v) = {
        let out = k.cmd("policy-strict.yaml", &OK_HOOKS).output().unwrap();
        let v = report("apply", &out);
        (out, v)
    };
    assert!(out.status.success(), "{v:#}");
    assert_ne!(k.read("lib/cpu_manager_state").unwrap(), original);
    let (out, v) = revert(&k, &OK_HOOKS);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "Reverted", "{v:#}");
    assert_eq!(v["plan"]["class"], "RewriteState", "{v:#}");
    assert_eq!(
        body(k.read("lib/cpu_manager_state").unwrap()),
        body(original.clone())
    );
    assert_eq!(tree_names(&k.p("conf.d")), Vec::<String>::new());
    assert_eq!(
        tree_names(&k.p("lib")),
        vec!["cpu_manager_state".to_string()]
    );
    // Again: nothing to revert.
    let (out, v) = revert(&k, &OK_HOOKS);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "NoChange", "{v:#}");

    // After a RestartOnly apply: the drop-in goes with a restart; the state is untouched.
    let k = Kubelet::new();
    let out = k.cmd("policy-restart.yaml", &OK_HOOKS).output().unwrap();
    assert!(out.status.success());
    let (out, v) = revert(&k, &OK_HOOKS);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "Reverted", "{v:#}");
    assert_eq!(v["plan"]["class"], "RestartOnly", "{v:#}");
    assert_eq!(k.read("lib/cpu_manager_state").unwrap(), original);
    assert!(k.read("conf.d/90-nodetopo.conf").is_none());

    // A failed start: rolled back to the applied pair (drop-in and state as they were), the
    // report says Failed.
    let k = Kubelet::new();
    let out = k.cmd("policy-strict.yaml", &OK_HOOKS).output().unwrap();
    assert!(out.status.success());
    let applied = (
        k.read("conf.d/90-nodetopo.conf"),
        k.read("lib/cpu_manager_state"),
    );
    let (out, v) = revert(
        &k,
        &[
            "--restart",
            "command",
            "--stop-command",
            "true",
            "--start-command",
            "false",
        ],
    );
    assert!(!out.status.success());
    assert_eq!(v["reason"], "Failed", "{v:#}");
    assert_eq!(
        (
            k.read("conf.d/90-nodetopo.conf"),
            k.read("lib/cpu_manager_state")
        ),
        applied
    );
    assert!(k.read("lib/nodetopo-apply.journal").is_none());

    // Dry run: lists the actions, changes nothing.
    let (out, v) = revert(&k, &["--restart", "none"]);
    assert!(!out.status.success());
    assert_eq!(v["reason"], "DryRun", "{v:#}");
    let actions = v["actions"].to_string();
    assert!(
        actions.contains("remove") && actions.contains("90-nodetopo.conf"),
        "{actions}"
    );
    assert_eq!(
        (
            k.read("conf.d/90-nodetopo.conf"),
            k.read("lib/cpu_manager_state")
        ),
        applied
    );

    // A later drop-in of the node's own stays, and counts as the node's configuration.
    let k = Kubelet::new();
    let out = k.cmd("policy-restart.yaml", &OK_HOOKS).output().unwrap();
    assert!(out.status.success());
    fs::write(
        k.p("conf.d/95-site.conf"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 50\n",
    )
    .unwrap();
    let (out, v) = revert(&k, &OK_HOOKS);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(tree_names(&k.p("conf.d")), vec!["95-site.conf".to_string()]);
}

#[test]
fn revert_refuses_a_policy_argument() {
    let k = Kubelet::new();
    let out = std::process::Command::new(common::BIN)
        .args(["revert", "--policy"])
        .arg(examples().join("policy-strict.yaml"))
        .arg("--state")
        .arg(k.p("lib/cpu_manager_state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("revert takes no --policy"));
}

/// `apply --recover-only` (the watchdog the `command` restarter needs, docs/actuation.md):
/// an agent killed after its stop and before its journal (a RewriteState stops first) leaves
/// no journal and a stopped kubelet. With nothing to recover, the watchdog starts the kubelet
/// when its health command fails, and leaves a healthy one alone; the files stay untouched.
#[test]
fn recover_only_starts_a_kubelet_left_stopped_without_a_journal() {
    let k = Kubelet::new();
    let marker = k.p("started");
    let start = format!("touch {}", marker.display());
    let before = (
        k.read("lib/cpu_manager_state"),
        k.read("conf.d/90-nodetopo.conf"),
    );
    for (health, want_started) in [("false", true), ("true", false)] {
        let _ = fs::remove_file(&marker);
        let out = k
            .cmd("policy-strict.yaml", &[])
            .args([
                "--recover-only",
                "--restart",
                "command",
                "--stop-command",
                "true",
            ])
            .args(["--start-command", &start, "--health-command", health])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = report("--recover-only", &out);
        assert_eq!(v["recovery"], "Nothing", "{v}");
        assert_eq!(v["kubeletStarted"], want_started, "health {health}: {v}");
        assert_eq!(marker.exists(), want_started, "health {health}");
        assert_eq!(
            (
                k.read("lib/cpu_manager_state"),
                k.read("conf.d/90-nodetopo.conf")
            ),
            before
        );
    }
    // A start that fails is an error naming it.
    let out = k
        .cmd("policy-strict.yaml", &[])
        .args([
            "--recover-only",
            "--restart",
            "command",
            "--stop-command",
            "true",
        ])
        .args(["--start-command", "false", "--health-command", "false"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the kubelet was not healthy; starting it failed"),
        "{err}"
    );
}
