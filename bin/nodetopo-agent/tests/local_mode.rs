//! `run --local` end to end: damaged checkpoints (corrupt, truncated, older version), an
//! unreadable kubelet checkpoint, malformed Pod YAML, spec changes and graceful SIGTERM.
//! Each test waits for the status file to show the expected condition, then checks that
//! nothing was lost.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_yaml::Value;

const BIN: &str = env!("CARGO_BIN_EXE_nodetopo-agent");

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let e = Self {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        fs::create_dir_all(e.pods()).expect("pods");
        e.set_spec(1, "none");
        e
    }
    fn p(&self, s: &str) -> PathBuf {
        self.dir.path().join(s)
    }
    fn pods(&self) -> PathBuf {
        self.p("pods")
    }
    fn checkpoint(&self) -> PathBuf {
        self.p("state/nodetopo_state")
    }
    fn set_spec(&self, generation: i64, tm: &str) {
        let text = format!(
            "apiVersion: nodetopo.io/v1alpha1\nkind: NodeTopology\nmetadata: {{name: node-a, generation: {generation}}}\n\
             spec:\n  cpuManager: {{policy: static, reservedSystemCPUs: \"0,32\"}}\n  topologyManager: {{policy: {tm}}}\n"
        );
        let tmp = self.p(".spec.tmp");
        fs::write(&tmp, text).expect("spec");
        fs::rename(tmp, self.p("spec.yaml")).expect("spec rename");
    }
    fn pod(&self, n: u32, cpus: u32) {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{n}, uid: u{n}, creationTimestamp: \"2024-01-01T00:00:{n:02}Z\"}}\n\
             spec:\n  containers:\n  - name: app\n    resources: {{limits: {{cpu: \"{cpus}\", memory: 1Gi}}}}\n"
        );
        let tmp = self.pods().join(format!(".p{n}.tmp"));
        fs::write(&tmp, text).expect("pod");
        fs::rename(tmp, self.pods().join(format!("p{n}.yaml"))).expect("pod rename");
    }
    fn start(&self, kubelet: &Path) -> Child {
        self.start_with(kubelet, &["--poll-ms", "5"])
    }
    fn start_with(&self, kubelet: &Path, extra: &[&str]) -> Child {
        let _ = fs::remove_file(self.p("status.yaml"));
        Command::new(BIN)
            .args(["run", "--local", "--preset", "epyc-7303-2p"])
            .args(extra)
            .arg("--pods-dir")
            .arg(self.pods())
            .arg("--spec")
            .arg(self.p("spec.yaml"))
            .arg("--status-file")
            .arg(self.p("status.yaml"))
            .arg("--state-dir")
            .arg(self.p("state"))
            .arg("--kubelet-state")
            .arg(kubelet)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent starts")
    }
    fn status(&self) -> Option<Value> {
        let text = fs::read_to_string(self.p("status.yaml")).ok()?;
        serde_yaml::from_str::<Value>(&text)
            .ok()?
            .get("status")
            .cloned()
    }
    /// Waits until `pred` holds on the status.
    fn wait(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.status() {
                if pred(&s) {
                    return s;
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {:?}",
                self.status()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn condition<'a>(s: &'a Value, type_: &str) -> Option<&'a Value> {
    s.get("conditions")?
        .as_sequence()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

fn cond_is(s: &Value, type_: &str, status: &str, reason: &str) -> bool {
    condition(s, type_).is_some_and(|c| {
        c.get("status").and_then(Value::as_str) == Some(status)
            && c.get("reason").and_then(Value::as_str) == Some(reason)
    })
}

fn message(s: &Value, type_: &str) -> String {
    condition(s, type_)
        .and_then(|c| c.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn allocations(s: &Value) -> Vec<(String, String)> {
    s.get("allocations")
        .and_then(Value::as_sequence)
        .map(|a| {
            a.iter()
                .map(|x| {
                    let g = |k: &str| {
                        x.get(k)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string()
                    };
                    (g("pod"), g("cpus"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn stop(mut c: Child) {
    // SIGTERM: a graceful stop flushes state and status and exits 0.
    let pid = c.id().to_string();
    let ok = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(ok.success());
    let st = c.wait().expect("exit");
    assert!(st.success(), "agent exit {st:?}");
}

/// Runs the agent with pods p1, p2 until both are allocated, stops it gracefully, and returns
/// the published allocations.
fn baseline(e: &Env) -> Vec<(String, String)> {
    e.pod(1, 2);
    e.pod(2, 4);
    let c = e.start(&e.p("no-kubelet"));
    let s = e.wait("two allocations", |s| allocations(s).len() == 2);
    stop(c);
    assert!(e.checkpoint().exists());
    allocations(&s)
}

/// Damages the checkpoint with `damage`, restarts, expects the condition reason, the damaged
/// file kept aside, and the same allocations rebuilt from the pods.
fn damaged_checkpoint(damage: impl Fn(&[u8]) -> Vec<u8>, reason: &str) {
    let e = Env::new();
    let before = baseline(&e);
    let bytes = fs::read(e.checkpoint()).expect("checkpoint");
    let bad = damage(&bytes);
    fs::write(e.checkpoint(), &bad).expect("damage");
    let c = e.start(&e.p("no-kubelet"));
    let s = e.wait(reason, |s| {
        cond_is(s, "CheckpointRestored", "False", reason) && allocations(s).len() == 2
    });
    stop(c);
    assert!(
        message(&s, "CheckpointRestored").contains("nodetopo_state"),
        "{}",
        message(&s, "CheckpointRestored")
    );
    // Rebuilt from the pods in the same stable order: the same CPUs.
    assert_eq!(allocations(&s), before);
    let aside: Vec<_> = fs::read_dir(e.p("state"))
        .expect("ls")
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().contains(".bad-"))
        .collect();
    assert_eq!(aside.len(), 1, "damaged checkpoint kept aside");
    assert_eq!(fs::read(aside[0].path()).expect("read aside"), bad);
}

#[test]
fn corrupt_checkpoint() {
    damaged_checkpoint(
        |b| {
            let mut v = b.to_vec();
            let i = v.len() - 3;
            v[i] ^= 0x55;
            v
        },
        "CheckpointChecksumMismatch",
    );
    damaged_checkpoint(|_| b"not a checkpoint at all".to_vec(), "CheckpointCorrupt");
}

#[test]
fn truncated_checkpoint() {
    damaged_checkpoint(|b| b[..b.len() / 2].to_vec(), "CheckpointChecksumMismatch");
}

#[test]
fn older_version_checkpoint() {
    damaged_checkpoint(
        |b| {
            String::from_utf8_lossy(b)
                .replacen("\"version\":1", "\"version\":0", 1)
                .into_bytes()
        },
        "CheckpointVersionMismatch",
    );
}

#[test]
fn restart_restores_checkpoint() {
    let e = Env::new();
    let before = baseline(&e);
    e.pod(3, 2);
    let c = e.start(&e.p("no-kubelet"));
    let s = e.wait("three allocations", |s| allocations(s).len() == 3);
    stop(c);
    assert!(cond_is(&s, "CheckpointRestored", "True", "Restored"));
    assert_eq!(allocations(&s)[..2], before[..]);
}

#[test]
fn unreadable_kubelet_state() {
    let e = Env::new();
    e.pod(1, 2);
    // A directory where the file should be cannot be read as the checkpoint.
    let kubelet = e.p("kubelet-dir");
    fs::create_dir_all(&kubelet).expect("dir");
    let c = e.start(&kubelet);
    let s = e.wait("KubeletStateUnreadable", |s| {
        cond_is(s, "KubeletAgreement", "False", "KubeletStateUnreadable")
    });
    assert!(message(&s, "KubeletAgreement").contains("kubelet-dir"));
    // Admission goes on regardless.
    e.wait("allocation", |s| allocations(s).len() == 1);
    // A garbled file is also reported, with the field.
    let file = e.p("cpu_manager_state");
    fs::write(
        &file,
        r#"{"policyName":"static","defaultCpuSet":"0-x","checksum":1}"#,
    )
    .expect("write");
    stop(c);
    let c = e.start(&file);
    let s = e.wait("invalid kubelet state", |s| {
        cond_is(s, "KubeletAgreement", "False", "KubeletStateUnreadable")
    });
    assert!(
        message(&s, "KubeletAgreement").contains("defaultCpuSet \"0-x\""),
        "{}",
        message(&s, "KubeletAgreement")
    );
    stop(c);
}

#[test]
fn kubelet_disagreement_is_named() {
    let e = Env::new();
    e.pod(1, 2);
    let file = e.p("cpu_manager_state");
    // Checksum as kubelet v1.37.2's CPUManagerCheckpointV2.MarshalCheckpoint writes it.
    fs::write(&file, r#"{"policyName":"static","defaultCpuSet":"0,3-63","entries":{"u1":{"app":"1-2"}},"checksum":729644698}"#)
        .expect("write");
    let c = e.start(&file);
    let s = e.wait("disagreement", |s| {
        cond_is(s, "KubeletAgreement", "False", "Disagree") && allocations(s).len() == 1
    });
    stop(c);
    // The kubelet runs the static policy, so the published allocation is the kubelet's,
    // with nodetopo's own decision beside it as the prediction.
    assert_eq!(allocations(&s)[0].1, "1-2");
    let ours = s["allocations"][0]["predictedCPUs"]
        .as_str()
        .expect("predictedCPUs")
        .to_string();
    assert_ne!(ours, "1-2");
    assert_eq!(
        message(&s, "KubeletAgreement"),
        format!("1 containers differ: default/p1/app (kubelet \"1-2\", nodetopo \"{ours}\")")
    );
    assert_eq!(
        s.get("kubelet")
            .and_then(|k| k.get("policyName"))
            .and_then(Value::as_str),
        Some("static")
    );
}

/// Local mode reads the Memory Manager's checkpoint beside `--kubelet-state` and
/// KubeletAgreement names the memory the kubelet pinned, which nodetopo's admissions (Memory
/// Manager `None`) did not.
#[test]
fn kubelet_pinned_memory_is_named() {
    use nodetopo_kubelet::memory_checkpoint::{render, Block, MemoryCheckpointFormat, MemoryState};
    let e = Env::new();
    e.pod(1, 2);
    let file = e.p("cpu_manager_state");
    fs::write(&file, r#"{"policyName":"static","defaultCpuSet":"0,3-63","entries":{"u1":{"app":"1-2"}},"checksum":729644698}"#)
        .expect("write");
    let state = MemoryState {
        policy_name: "Static".into(),
        entries: Some(
            [(
                "u1".to_string(),
                Some(
                    [(
                        "app".to_string(),
                        Some(vec![Block {
                            numa_affinity: Some(vec![0]),
                            resource: "memory".into(),
                            size: 1 << 30,
                        }]),
                    )]
                    .into(),
                ),
            )]
            .into(),
        ),
        ..Default::default()
    };
    fs::write(
        e.p("memory_manager_state"),
        render(&state, MemoryCheckpointFormat::V3),
    )
    .expect("write");
    let c = e.start(&file);
    let s = e.wait("memory named", |s| {
        cond_is(s, "KubeletAgreement", "False", "Disagree")
            && message(s, "KubeletAgreement").contains("default/p1/app memory")
            && allocations(s).len() == 1
    });
    stop(c);
    assert!(
        message(&s, "KubeletAgreement").ends_with(
            "; pinned memory differs too for 1 containers: default/p1/app memory (kubelet \"memory 1073741824@0\", nodetopo \"none\")"
        ),
        "{}",
        message(&s, "KubeletAgreement")
    );
}

#[test]
fn malformed_pod_yaml_is_reported_and_skipped() {
    let e = Env::new();
    e.pod(1, 2);
    fs::write(
        e.pods().join("broken.yaml"),
        "kind: Pod\nmetadata: {name: [\n",
    )
    .expect("write");
    fs::write(
        e.pods().join("badqty.yaml"),
        "kind: Pod\nmetadata: {name: q}\nspec: {containers: [{name: c, resources: {limits: {cpu: 2x, memory: 1Gi}}}]}\n",
    )
    .expect("write");
    let c = e.start(&e.p("no-kubelet"));
    let s = e.wait("PodsSkipped", |s| {
        cond_is(s, "PodsReadable", "False", "PodsSkipped") && allocations(s).len() == 1
    });
    let msg = message(&s, "PodsReadable");
    assert!(msg.contains("broken.yaml: YAML document 1"), "{msg}");
    assert!(
        msg.contains(
            "badqty.yaml: pod default/q container c: resources.limits.cpu: invalid quantity \"2x\""
        ),
        "{msg}"
    );
    // A good file turning bad (half-written) keeps its last good version: p1 keeps its CPUs.
    let cpus = allocations(&s)[0].1.clone();
    fs::write(
        e.pods().join("p1.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p1, uid: u1",
    )
    .expect("truncate");
    let s = e.wait("p1 unreadable", |s| {
        message(s, "PodsReadable").contains("p1.yaml")
    });
    assert_eq!(allocations(&s), vec![("default/p1".to_string(), cpus)]);
    stop(c);
}

#[test]
fn spec_change_keeps_old_pods_and_says_so() {
    let e = Env::new();
    e.pod(1, 2);
    let c = e.start(&e.p("no-kubelet"));
    let s = e.wait("first allocation", |s| allocations(s).len() == 1);
    let first = allocations(&s);
    e.set_spec(2, "single-numa-node");
    e.pod(2, 2);
    let s = e.wait("PodsUnderOldPolicy", |s| {
        allocations(s).len() == 2 && cond_is(s, "PolicyCurrent", "False", "PodsUnderOldPolicy")
    });
    stop(c);
    assert_eq!(s.get("observedGeneration").and_then(Value::as_i64), Some(2));
    assert_eq!(allocations(&s)[0], first[0]);
    assert_eq!(
        message(&s, "PolicyCurrent"),
        "pods admitted under an older spec keep their CPUs: default/p1"
    );
}

/// With change notification, pod files are seen without the poll: the poll interval here is
/// ten minutes, so only a notification can bring the added pod (and its removal) to the
/// status within the wait.
#[test]
fn pod_files_are_watched_not_polled() {
    let e = Env::new();
    let c = e.start_with(&e.p("no-kubelet"), &["--poll-ms", "600000"]);
    e.wait("first status", |s| {
        s.get("observedGeneration").and_then(Value::as_i64) == Some(1)
    });
    e.pod(1, 2);
    e.wait("the added pod's allocation", |s| allocations(s).len() == 1);
    fs::remove_file(e.pods().join("p1.yaml")).expect("remove");
    e.wait("the removed pod released", |s| allocations(s).is_empty());
    stop(c);
}

/// Without notification (`--no-watch`) the poll alone still brings pod files in and out.
#[test]
fn without_notification_the_poll_sees_pod_files() {
    let e = Env::new();
    let c = e.start_with(&e.p("no-kubelet"), &["--no-watch", "--poll-ms", "5"]);
    e.wait("first status", |s| {
        s.get("observedGeneration").and_then(Value::as_i64) == Some(1)
    });
    e.pod(1, 2);
    e.wait("the added pod's allocation", |s| allocations(s).len() == 1);
    fs::remove_file(e.pods().join("p1.yaml")).expect("remove");
    e.wait("the removed pod released", |s| allocations(s).is_empty());
    stop(c);
}

/// The pods of the allocations, one entry per container.
fn allocated_pods(s: &Value) -> Vec<String> {
    allocations(s).into_iter().map(|(pod, _)| pod).collect()
}

/// A pod file written in chunks by a writer that keeps it open is never read half-written
/// (chunk one alone is a valid pod of one container): two pods renamed in after chunk one
/// reach the status while the chunked one does not; after the close it arrives with both of
/// its containers. The poll is ten minutes and the write hold too: only the events drive the
/// looks, and the open file is held for as long as the test needs.
#[test]
fn a_pod_file_written_in_chunks_is_never_read_half_written() {
    use std::io::Write as _;
    let e = Env::new();
    let c = e.start_with(
        &e.p("no-kubelet"),
        &["--poll-ms", "600000", "--write-hold-ms", "600000"],
    );
    e.wait("first status", |s| {
        s.get("observedGeneration").and_then(Value::as_i64) == Some(1)
    });
    let mut f = fs::File::create(e.pods().join("chunked.yaml")).expect("create");
    f.write_all(
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: c, uid: uc, creationTimestamp: \"2024-01-01T00:00:00Z\"}\n\
          spec:\n  containers:\n  - name: app\n    resources: {limits: {cpu: \"2\", memory: 1Gi}}\n",
    )
    .expect("chunk one");
    e.pod(1, 2);
    e.wait("the pod renamed in after chunk one", |s| {
        allocated_pods(s).contains(&"default/p1".to_string())
    });
    e.pod(2, 2);
    let s = e.wait("the second pod renamed in after chunk one", |s| {
        allocated_pods(s).contains(&"default/p2".to_string())
    });
    assert!(
        !allocated_pods(&s).contains(&"default/c".to_string()),
        "chunk one was read while its writer had the file open: {s:?}"
    );
    f.write_all(b"  - name: side\n    resources: {limits: {cpu: \"2\", memory: 1Gi}}\n")
        .expect("chunk two");
    drop(f);
    let s = e.wait("the chunked pod after the close", |s| {
        allocated_pods(s).contains(&"default/c".to_string())
    });
    let containers = allocated_pods(&s)
        .iter()
        .filter(|p| p.as_str() == "default/c")
        .count();
    assert_eq!(containers, 2, "both containers of the complete file: {s:?}");
    stop(c);
}

/// A burst of changes ends in the last state: pods renamed in and removed, one file
/// rewritten in place thirty times (each version a different pod), as fast as the test can;
/// the status ends with exactly the pods of the last versions, none of the files reported.
/// The poll is ten minutes: only the events bring the changes.
#[test]
fn a_burst_of_pod_file_changes_ends_in_the_last_state() {
    let e = Env::new();
    let c = e.start_with(&e.p("no-kubelet"), &["--poll-ms", "600000"]);
    e.wait("first status", |s| {
        s.get("observedGeneration").and_then(Value::as_i64) == Some(1)
    });
    let rewritten = e.pods().join("rewritten.yaml");
    for n in 1..=30u32 {
        e.pod(n, 1);
        if n % 3 == 0 {
            fs::remove_file(e.pods().join(format!("p{}.yaml", n - 1))).expect("remove");
        }
        fs::write(
            &rewritten,
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: r{n:02}, uid: r{n:02}, creationTimestamp: \"2024-01-01T00:01:00Z\"}}\n\
                 spec:\n  containers:\n  - name: app\n    resources: {{limits: {{cpu: \"1\", memory: 1Gi}}}}\n"
            ),
        )
        .expect("rewrite");
    }
    let mut want: Vec<String> = (1..=30u32)
        .filter(|n| n % 3 != 2)
        .map(|n| format!("default/p{n}"))
        .chain(["default/r30".to_string()])
        .collect();
    want.sort();
    let s = e.wait("exactly the last versions", |s| {
        let mut got = allocated_pods(s);
        got.sort();
        got == want
    });
    assert!(
        cond_is(&s, "PodsReadable", "True", "AllRead"),
        "{:?}",
        condition(&s, "PodsReadable")
    );
    stop(c);
}

/// When notification cannot be set up (the pods directory does not exist yet when the agent
/// starts: nothing to watch) the agent polls: the directory created later and a pod in it
/// reach the status.
#[test]
fn without_a_pods_directory_to_watch_the_agent_polls() {
    let e = Env::new();
    fs::remove_dir(e.pods()).expect("rmdir");
    let c = e.start_with(&e.p("no-kubelet"), &["--poll-ms", "5"]);
    e.wait("the missing pods directory reported", |s| {
        message(s, "PodsReadable").contains("pods directory")
    });
    fs::create_dir(e.pods()).expect("mkdir");
    e.pod(1, 2);
    e.wait("the pod's allocation", |s| allocations(s).len() == 1);
    stop(c);
}

/// When the watch breaks (the pods directory removed while the agent runs) the agent polls
/// from then on: the directory made again and a pod in it reach the status.
#[test]
fn after_the_pods_directory_went_away_the_agent_polls() {
    let e = Env::new();
    let c = e.start_with(&e.p("no-kubelet"), &["--poll-ms", "5"]);
    e.wait("first status", |s| {
        s.get("observedGeneration").and_then(Value::as_i64) == Some(1)
    });
    fs::remove_dir(e.pods()).expect("rmdir");
    e.wait("the missing pods directory reported", |s| {
        message(s, "PodsReadable").contains("pods directory")
    });
    fs::create_dir(e.pods()).expect("mkdir");
    e.pod(1, 2);
    e.wait("the pod's allocation", |s| allocations(s).len() == 1);
    stop(c);
}
