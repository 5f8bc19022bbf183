//! `nodetopo-agent apply` (the local executor) on a temporary kubelet directory with fake
//! restart hooks: success for RestartOnly and RewriteState, a failed start and an unhealthy
//! kubelet (both restored), a later drop-in overriding ours (restored), the plans it must
//! not carry out (EvictFirst, Drain), dry run, and kill -9 at random points of an apply
//! (`NODETOPO_APPLY_KILLS`, default 120): after recovery the pair (drop-in, state) is all old
//! or all new, and a rewritten state always has its backup.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{examples, report, Kubelet, BIN};

impl Kubelet {
    fn apply(&self, policy: &str, hooks: &[&str]) -> (Output, serde_json::Value) {
        let out = self.cmd(policy, hooks).output().unwrap();
        let v = report(policy, &out);
        (out, v)
    }
}

const OK_HOOKS: [&str; 6] = [
    "--restart",
    "command",
    "--stop-command",
    "true",
    "--start-command",
    "true",
];

/// What every kubelet configuration file starts with.
const KUBELET_HEAD: &str =
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn original_state() -> Vec<u8> {
    fs::read(examples().join("cpu_manager_state")).unwrap()
}

#[test]
fn local_executor_cases() {
    let mut n = 0;
    // RewriteState: state rewritten with a backup, drop-in 0644, journal gone.
    let k = Kubelet::new();
    let (out, v) = k.apply("policy-strict.yaml", &OK_HOOKS);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "StateRewritten");
    let dropin = k.p("conf.d/90-nodetopo.conf");
    let text = fs::read_to_string(&dropin).unwrap();
    assert!(text.contains("apiVersion: kubelet.config.k8s.io/v1beta1"));
    assert!(text.contains("kind: KubeletConfiguration"));
    assert!(text.contains("\"strict-cpu-reservation\": \"true\""));
    assert_eq!(
        fs::metadata(&dropin).unwrap().permissions().mode() & 0o777,
        0o644
    );
    assert_eq!(
        k.read("lib/cpu_manager_state.nodetopo-backup").unwrap(),
        original_state()
    );
    assert!(k.read("lib/cpu_manager_state").unwrap() != original_state());
    assert!(k.read("lib/nodetopo-apply.journal").is_none());
    // Applying again changes nothing.
    let (out, v) = k.apply("policy-strict.yaml", &OK_HOOKS);
    assert!(out.status.success());
    assert_eq!(v["reason"], "NoChange");
    n += 2;

    // RestartOnly: only the drop-in; the state is not touched and not backed up.
    let k = Kubelet::new();
    let (out, v) = k.apply("policy-restart.yaml", &OK_HOOKS);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "RestartOnly");
    assert_eq!(k.read("lib/cpu_manager_state").unwrap(), original_state());
    assert!(k.read("lib/cpu_manager_state.nodetopo-backup").is_none());
    assert!(k.read("conf.d/90-nodetopo.conf").is_some());
    // No kubelet process under the (empty) host /proc handed to apply: nothing checked,
    // said in the report and at the end of the message (the Applied condition's).
    let unchecked = format!(
        "no kubelet process under {}: its command line (--config-dir, configuration flags such as --feature-gates or --reserved-cpus) was not checked",
        k.p("proc").display()
    );
    assert_eq!(v["kubeletCommandLine"], unchecked.as_str(), "{v:#}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .ends_with(&format!("; {unchecked}")),
        "{v:#}"
    );
    n += 1;

    // A start that fails: everything restored, Failed with the reason.
    let k = Kubelet::new();
    let (out, v) = k.apply(
        "policy-strict.yaml",
        &[
            "--restart",
            "command",
            "--stop-command",
            "true",
            "--start-command",
            "false",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(v["reason"], "Failed");
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("starting the kubelet failed"), "{msg}");
    assert!(msg.contains("restored"), "{msg}");
    assert_eq!(k.read("lib/cpu_manager_state").unwrap(), original_state());
    assert!(k.read("conf.d/90-nodetopo.conf").is_none());
    assert_eq!(
        k.read("lib/cpu_manager_state.nodetopo-backup").unwrap(),
        original_state()
    );
    n += 1;

    // Started but not healthy: restored.
    let k = Kubelet::new();
    let (out, v) = k.apply(
        "policy-strict.yaml",
        &[
            "--restart",
            "command",
            "--stop-command",
            "true",
            "--start-command",
            "true",
            "--health-command",
            "false",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let msg = v["message"].as_str().unwrap();
    for want in [
        "verification failed: the restarted kubelet failed its checks: false exited with exit status: 1",
        "the previous configuration and state were restored and the kubelet restarted, but it is not healthy again after the rollback: false exited",
    ] {
        assert!(msg.contains(want), "{want:?} in {msg}");
    }
    assert_eq!(k.read("lib/cpu_manager_state").unwrap(), original_state());
    n += 1;

    // A later drop-in overrides an owned field: verification fails, restored; a drop-in that
    // was there before ours is restored byte for byte.
    let k = Kubelet::new();
    fs::write(
        k.p("conf.d/99-site.conf"),
        format!("{KUBELET_HEAD}topologyManagerPolicy: restricted\n"),
    )
    .unwrap();
    let ours_before = format!("{KUBELET_HEAD}cpuManagerPolicy: static\n");
    fs::write(k.p("conf.d/90-nodetopo.conf"), &ours_before).unwrap();
    let (out, v) = k.apply("policy-restart.yaml", &OK_HOOKS);
    assert_eq!(out.status.code(), Some(1));
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("overrides"), "{msg}");
    assert_eq!(
        k.read("conf.d/90-nodetopo.conf").unwrap(),
        ours_before.as_bytes()
    );
    n += 1;

    // Plans the local executor must not carry out.
    for (policy, reason) in [
        ("policy-evict.yaml", "WaitingForEviction"),
        ("policy-drain.yaml", "DrainRequired"),
    ] {
        let k = Kubelet::new();
        let (out, v) = k.apply(policy, &OK_HOOKS);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(v["reason"], reason);
        assert!(k.read("conf.d/90-nodetopo.conf").is_none());
        assert_eq!(k.read("lib/cpu_manager_state").unwrap(), original_state());
        n += 1;
    }

    // Dry run: records, writes nothing.
    let k = Kubelet::new();
    let (_, v) = k.apply("policy-strict.yaml", &["--restart", "dry-run"]);
    assert_eq!(v["reason"], "DryRun");
    let actions: Vec<&str> = v["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(actions.first(), Some(&"stop the kubelet"));
    assert!(actions.iter().any(|a| a.starts_with("rewrite")));
    assert!(k.read("conf.d/90-nodetopo.conf").is_none());
    assert!(k.read("lib/cpu_manager_state.nodetopo-backup").is_none());
    n += 1;
    println!("local executor: {n} cases checked");
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn wait_with_kill(mut child: std::process::Child, after: Duration) -> bool {
    let start = Instant::now();
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if start.elapsed() >= after {
            // SIGKILL, as kill -9.
            let _ = child.kill();
            let _ = child.wait();
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn snapshot(k: &Kubelet) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    (
        k.read("conf.d/90-nodetopo.conf"),
        k.read("lib/cpu_manager_state"),
    )
}

#[test]
fn kill_9_during_apply_leaves_old_or_new() {
    let kills: usize = std::env::var("NODETOPO_APPLY_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let seed = std::env::var("NODETOPO_APPLY_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_0013_u64);
    let mut rng = Rng(seed);
    // Slow hooks so that kill points fall between every step, not only before the first.
    let hooks = [
        "--restart",
        "command",
        "--stop-command",
        "sleep 0.02",
        "--start-command",
        "sleep 0.02",
    ];
    let mut expected = Vec::new();
    for policy in ["policy-strict.yaml", "policy-restart.yaml"] {
        let k = Kubelet::new();
        let old = snapshot(&k);
        let t = Instant::now();
        let (out, v) = k.apply(policy, &hooks);
        assert!(out.status.success(), "{v:#}");
        expected.push((policy, old, snapshot(&k), t.elapsed()));
    }
    let (mut old_seen, mut new_seen, mut finished, mut tmp_left) = (0, 0, 0, 0);
    for i in 0..kills {
        let (policy, old, new, full) = &expected[i % expected.len()];
        let k = Kubelet::new();
        let child = k
            .cmd(policy, &hooks)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let at = Duration::from_micros(rng.next() % (full.as_micros() as u64 + 1000));
        if !wait_with_kill(child, at) {
            finished += 1;
        }
        // What the agent does first at its next start.
        let rec = Command::new(BIN)
            .args(["apply", "--recover-only", "--state"])
            .arg(k.p("lib/cpu_manager_state"))
            .arg("--kubelet-config-dir")
            .arg(k.p("conf.d"))
            .args(OK_HOOKS)
            .output()
            .unwrap();
        assert!(
            rec.status.success(),
            "{}",
            String::from_utf8_lossy(&rec.stderr)
        );
        let now = snapshot(&k);
        if &now == old {
            old_seen += 1;
        } else if &now == new {
            new_seen += 1;
            if policy.contains("strict") {
                assert_eq!(
                    k.read("lib/cpu_manager_state.nodetopo-backup").as_deref(),
                    old.1.as_deref(),
                    "kill {i} at {at:?}: the new state has no backup of the old one"
                );
            }
        } else {
            panic!("kill {i} ({policy}) at {at:?}: a mix of old and new: {now:?}");
        }
        assert!(k.read("lib/nodetopo-apply.journal").is_none());
        tmp_left += fs::read_dir(k.p("conf.d"))
            .unwrap()
            .chain(fs::read_dir(k.p("lib")).unwrap())
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().contains("nodetopo-tmp"))
            })
            .count();
    }
    println!(
        "apply kill -9: {kills} kill points (seed {seed:#x}): {old_seen} left the old pair, {new_seen} the new pair, {finished} finished before the kill; {tmp_left} temp files left after recovery"
    );
    assert!(
        old_seen > 0 && new_seen > 0,
        "kill points did not cover the apply"
    );
}

/// Every file and directory under `root`: relative path -> (mode, contents; None for a
/// directory).
type Tree = std::collections::BTreeMap<String, (u32, Option<Vec<u8>>)>;

fn tree(root: &std::path::Path) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let meta = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let mode = meta.permissions().mode();
            if meta.is_dir() {
                out.insert(rel, (mode, None));
                stack.push(p);
            } else {
                out.insert(rel, (mode, Some(fs::read(&p).unwrap())));
            }
        }
    }
    out
}

/// The paths whose name, mode or contents differ between two trees.
fn changed(before: &Tree, after: &Tree) -> Vec<String> {
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect()
}

/// A kubelet directory with neighbours the executor must never touch: another drop-in,
/// the memory manager state, a key, a pod directory, a subdirectory of the config dir.
fn kubelet_with_neighbours() -> Kubelet {
    let k = Kubelet::new();
    fs::write(
        k.p("conf.d/10-site.conf"),
        format!("{KUBELET_HEAD}maxPods: 110\n"),
    )
    .unwrap();
    // A subdirectory's drop-ins count too (the kubelet walks the directory tree).
    fs::create_dir_all(k.p("conf.d/extra")).unwrap();
    fs::write(
        k.p("conf.d/extra/20-x.conf"),
        format!("{KUBELET_HEAD}maxPods: 100\n"),
    )
    .unwrap();
    fs::write(k.p("lib/memory_manager_state"), "{}").unwrap();
    fs::create_dir_all(k.p("lib/pki")).unwrap();
    fs::write(k.p("lib/pki/kubelet-client.key"), "secret").unwrap();
    fs::set_permissions(
        k.p("lib/pki/kubelet-client.key"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    fs::create_dir_all(k.p("lib/pods/uid-1/volumes")).unwrap();
    // The kubelet creates its state file 0600 (a temp file from os.CreateTemp, renamed).
    fs::set_permissions(
        k.p("lib/cpu_manager_state"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    k
}

#[test]
fn apply_writes_only_the_dropin_the_state_their_backups_and_journal() {
    const ALLOWED: [&str; 5] = [
        "conf.d/90-nodetopo.conf",
        "conf.d/90-nodetopo.conf.nodetopo-backup",
        "lib/cpu_manager_state",
        "lib/cpu_manager_state.nodetopo-backup",
        "lib/nodetopo-apply.journal",
    ];
    let failing_start = [
        "--restart",
        "command",
        "--stop-command",
        "true",
        "--start-command",
        "false",
    ];
    // (policy, hooks, expected reason, paths that must have changed)
    let cases: [(&str, &[&str], &str, &[&str]); 5] = [
        (
            "policy-strict.yaml",
            &OK_HOOKS,
            "StateRewritten",
            &[
                "conf.d/90-nodetopo.conf",
                "lib/cpu_manager_state",
                "lib/cpu_manager_state.nodetopo-backup",
            ],
        ),
        (
            "policy-restart.yaml",
            &OK_HOOKS,
            "RestartOnly",
            &["conf.d/90-nodetopo.conf"],
        ),
        // Failure and restore: only the backup stays behind.
        (
            "policy-strict.yaml",
            &failing_start,
            "Failed",
            &["lib/cpu_manager_state.nodetopo-backup"],
        ),
        ("policy-restart.yaml", &failing_start, "Failed", &[]),
        // Dry run: nothing at all.
        ("policy-strict.yaml", &["--restart", "none"], "DryRun", &[]),
    ];
    let mut n = 0;
    for (policy, hooks, reason, must) in cases {
        let k = kubelet_with_neighbours();
        let before = tree(k.dir.path());
        let (_, v) = k.apply(policy, hooks);
        assert_eq!(v["reason"], reason, "{policy} {hooks:?}: {v:#}");
        let after = tree(k.dir.path());
        let diff = changed(&before, &after);
        for p in &diff {
            assert!(
                ALLOWED.contains(&p.as_str()),
                "{policy} {hooks:?}: apply changed {p}, which it may not write"
            );
        }
        let mut want: Vec<String> = must.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(diff, want, "{policy} {hooks:?}: changed paths");
        // The drop-in (and its backup, the journal) 0644; the state file and its backup
        // keep the state file's 0600. A restored state is equal in contents and mode, so a
        // failure leaves only the backup changed.
        for p in &diff {
            if let Some((mode, Some(_))) = after.get(p) {
                let want = if p.starts_with("lib/cpu_manager_state") {
                    0o600
                } else {
                    0o644
                };
                assert_eq!(mode & 0o777, want, "{p}: mode");
            }
        }
        n += 1;
    }
    println!("apply writes: {n} applies snapshotted (config dir and kubelet dir, names, contents, modes); nothing outside the allowed files changed; the state file and its backup kept mode 0600");
}
