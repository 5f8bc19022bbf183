//! `nodetopo-agent apply` and its own files on hostile or failing file systems (issue 26
//! point 9), each on a temporary kubelet directory with restart command `true`:
//! - a rollback that fails half-way (drop-in directory read-only, a full file system, the
//!   directory turning read-only after the write) attempts every step, keeps the journal
//!   until the pair (drop-in, state) is consistent and never reports a healthy restart then;
//! - a symlink planted at a temp file's name (this process's PID included) is never written
//!   through or chmodded;
//! - the journal and the backups are read only as bounded regular files (a FIFO, a link to
//!   /dev/zero, an oversized file are refused naming the limit, never a hang);
//! - `--kubelet-config` naming the drop-in itself is refused;
//! - a process that only calls itself `kubelet` does not block an apply.
//!
//! The read-only and full file systems are bind and tmpfs mounts in a private mount
//! namespace (`unshare --mount`, root only) that ends with the test's command; they skip,
//! printing why, without root or `unshare`.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

const KUBELET_HEAD: &str =
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn original_state() -> Vec<u8> {
    fs::read(examples().join("cpu_manager_state")).unwrap()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n")
}

/// Whether mounts in a private namespace can be made here (root and `unshare`).
fn can_unshare() -> bool {
    let ok = is_root()
        && Command::new("unshare")
            .args(["--mount", "true"])
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        println!("skipped: needs root and unshare --mount (a private mount namespace)");
    }
    ok
}

/// Single-quoted for sh.
fn q(s: impl AsRef<std::ffi::OsStr>) -> String {
    format!("'{}'", s.as_ref().to_string_lossy().replace('\'', "'\\''"))
}

/// The command line of `c` for sh.
fn sh_line(c: &Command) -> String {
    std::iter::once(q(c.get_program()))
        .chain(c.get_args().map(q))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `script` with sh in a private mount namespace; its mounts end with it.
fn in_namespace(k: &Kubelet, script: &str) -> Output {
    let path = k.p("ns.sh");
    fs::write(&path, format!("set -e\n{script}")).unwrap();
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh"])
        .arg(&path)
        .output()
        .unwrap()
}

/// A hook script (executable).
fn hook(k: &Kubelet, name: &str, body: &str) -> String {
    let p = k.p(name);
    fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p.display().to_string()
}

/// The JSON report printed first in `out` (a script may print two).
fn first_report(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let mut de = serde_json::Deserializer::from_str(&text).into_iter::<serde_json::Value>();
    match de.next() {
        Some(Ok(v)) => v,
        _ => panic!(
            "no JSON report; exit {}, stdout: {text}, stderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[test]
fn a_read_only_dropin_directory_rolls_the_state_back() {
    if !can_unshare() {
        return;
    }
    // RewriteState with no drop-in before: the state is rewritten, the drop-in write fails
    // (EROFS), removing the (absent) drop-in fails too (EROFS): the state must still be
    // restored, and the journal removed only then.
    let k = Kubelet::new();
    let d = q(k.p("conf.d"));
    let apply = sh_line(&k.cmd("policy-strict.yaml", &OK_HOOKS));
    let out = in_namespace(
        &k,
        &format!("mount --bind {d} {d}\nmount -o remount,bind,ro {d}\n{apply} || true\n"),
    );
    let v = first_report(&out);
    assert_eq!(v["reason"], "Failed", "{v:#}");
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("writing the drop-in failed"), "{msg}");
    assert!(
        msg.contains("the previous configuration and state were restored"),
        "{msg}"
    );
    assert_eq!(k.read("lib/cpu_manager_state").unwrap(), original_state());
    assert!(k.read("conf.d/90-nodetopo.conf").is_none());
    assert!(k.read("lib/nodetopo-apply.journal").is_none());
    println!("read-only drop-in dir: {msg}");
}

#[test]
fn a_full_dropin_file_system_rolls_the_state_back() {
    if !can_unshare() {
        return;
    }
    // A drop-in exists; conf.d is a tmpfs with room for its backup only. The new drop-in's
    // write fails (ENOSPC); the rollback must not need to rewrite the unchanged drop-in
    // (no room either) and must restore the state.
    let k = Kubelet::new();
    let old_dropin = format!("{KUBELET_HEAD}# the node's own drop-in\n");
    let d = q(k.p("conf.d"));
    let seed = k.p("seed.conf");
    fs::write(&seed, &old_dropin).unwrap();
    let apply = sh_line(&k.cmd("policy-strict.yaml", &OK_HOOKS));
    let out = in_namespace(
        &k,
        &format!(
            "mount -t tmpfs -o size=64k,mode=0755 tmpfs {d}\n\
             cp {seed} {d}/90-nodetopo.conf\n\
             echo x > {d}/spare\n\
             dd if=/dev/zero of={d}/fill bs=4096 2>/dev/null || true\n\
             rm {d}/spare\n\
             {apply} || true\n\
             cat {d}/90-nodetopo.conf > {dropin_after}\n",
            seed = q(&seed),
            dropin_after = q(k.p("dropin-after")),
        ),
    );
    let v = first_report(&out);
    assert_eq!(v["reason"], "Failed", "{v:#}");
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("writing the drop-in failed"), "{msg}");
    assert!(msg.contains("No space left on device"), "{msg}");
    assert!(
        msg.contains("the previous configuration and state were restored"),
        "{msg}"
    );
    assert_eq!(k.read("lib/cpu_manager_state").unwrap(), original_state());
    assert_eq!(k.read("dropin-after").unwrap(), old_dropin.as_bytes());
    assert!(k.read("lib/nodetopo-apply.journal").is_none());
    println!("full drop-in file system: {msg}");
}

#[test]
fn a_rollback_that_fails_keeps_the_journal_and_claims_no_health() {
    if !can_unshare() {
        return;
    }
    // Both files are written, then the first start fails after making conf.d read-only:
    // the new drop-in cannot be removed. The state must still be restored (every step is
    // attempted), the journal kept, the report must not say healthy; once the directory is
    // writable again, `--recover-only` finishes the rollback.
    let k = Kubelet::new();
    let d = q(k.p("conf.d"));
    let once = q(k.p("started-once"));
    let start = hook(
        &k,
        "start.sh",
        &format!(
            "[ -e {once} ] && exit 0\ntouch {once}\nmount -o remount,bind,ro {d}\necho start failed >&2\nexit 1\n"
        ),
    );
    let hooks = [
        "--restart",
        "command",
        "--stop-command",
        "true",
        "--start-command",
        start.as_str(),
    ];
    let apply = sh_line(&k.cmd("policy-strict.yaml", &hooks));
    let mut recover = k.cmd("policy-strict.yaml", &OK_HOOKS);
    recover.arg("--recover-only");
    let recover = sh_line(&recover);
    let out = in_namespace(
        &k,
        &format!(
            "mount --bind {d} {d}\n{apply} > {first} || true\n\
             cp -a {lib} {snapshot}\n\
             mount -o remount,bind,rw {d}\n{recover} > {second}\n",
            first = q(k.p("first.json")),
            second = q(k.p("second.json")),
            lib = q(k.p("lib")),
            snapshot = q(k.p("lib-after-first")),
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = report(
        "policy-strict.yaml",
        &Output {
            stdout: k.read("first.json").unwrap(),
            ..out.clone()
        },
    );
    assert_eq!(v["reason"], "Failed", "{v:#}");
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("starting the kubelet failed"), "{msg}");
    assert!(msg.contains("the rollback failed"), "{msg}");
    assert!(msg.contains("restoring the drop-in"), "{msg}");
    assert!(!msg.contains("restoring the state"), "{msg}");
    assert!(msg.contains("nodetopo-apply.journal is kept"), "{msg}");
    assert!(!msg.contains("healthy"), "{msg}");
    // After the failed rollback: the state restored, the journal kept in `applying`.
    assert_eq!(
        k.read("lib-after-first/cpu_manager_state").unwrap(),
        original_state()
    );
    let j: serde_json::Value =
        serde_json::from_slice(&k.read("lib-after-first/nodetopo-apply.journal").unwrap()).unwrap();
    assert_eq!(j["phase"], "applying", "{j}");
    // The recovery finished it: the pair all old, no journal.
    let second: serde_json::Value =
        serde_json::from_slice(&k.read("second.json").unwrap()).unwrap();
    assert_eq!(
        second,
        serde_json::json!({"recovery": "RolledBack", "kubeletStarted": false})
    );
    assert!(k.read("conf.d/90-nodetopo.conf").is_none());
    assert_eq!(k.read("lib/cpu_manager_state").unwrap(), original_state());
    assert!(k.read("lib/nodetopo-apply.journal").is_none());
    println!("failed rollback: {msg}");
}

#[test]
fn links_planted_at_temp_names_are_never_followed() {
    // Symlinks at the temp names of this apply's own PID (the shell execs apply, keeping
    // its PID): the drop-in's temp to a file the apply must not overwrite, the state's to
    // one it must not chmod 0600.
    let k = Kubelet::new();
    let victim = k.p("victim");
    let victim2 = k.p("victim2");
    fs::write(&victim, b"precious").unwrap();
    fs::write(&victim2, b"precious too").unwrap();
    for v in [&victim, &victim2] {
        fs::set_permissions(v, fs::Permissions::from_mode(0o644)).unwrap();
    }
    let apply = sh_line(&k.cmd("policy-strict.yaml", &OK_HOOKS));
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ln -s {victim} {d}/.90-nodetopo.conf.nodetopo-tmp.$$ && \
             ln -s {victim2} {l}/.cpu_manager_state.nodetopo-tmp.$$ && exec {apply}",
            victim = q(&victim),
            victim2 = q(&victim2),
            d = q(k.p("conf.d")),
            l = q(k.p("lib")),
        ))
        .output()
        .unwrap();
    let v = report("policy-strict.yaml", &out);
    assert_eq!(v["reason"], "StateRewritten", "{v:#}");
    assert_eq!(fs::read(&victim).unwrap(), b"precious");
    assert_eq!(fs::read(&victim2).unwrap(), b"precious too");
    for v in [&victim, &victim2] {
        assert_eq!(fs::metadata(v).unwrap().permissions().mode() & 0o777, 0o644);
    }
    assert!(fs::symlink_metadata(k.p("conf.d/90-nodetopo.conf"))
        .unwrap()
        .is_file());
    assert!(k.read("lib/cpu_manager_state").unwrap() != original_state());
    for dir in ["conf.d", "lib"] {
        for e in fs::read_dir(k.p(dir)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(!name.contains(".nodetopo-tmp."), "{dir}/{name} left");
        }
    }
}

/// Runs `c`, killed after 20 s (a hang is a failure, not a stuck test).
fn bounded(mut c: Command) -> (Output, Duration) {
    let t = Instant::now();
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "apply hung for 20 s (killed): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (child.wait_with_output().unwrap(), t.elapsed())
}

fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo")
        .arg(p)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mkfifo {}", p.display());
}

#[test]
fn the_journal_and_backups_are_read_bounded_and_regular_only() {
    let journal = "lib/nodetopo-apply.journal";
    type Plant<'a> = &'a dyn Fn(&Kubelet);
    let cases: [(&str, Plant, &str); 4] = [
        (
            "a FIFO journal",
            &|k| mkfifo(&k.p(journal)),
            "the journal {j} is not a regular file (it is a FIFO): apply reads only a regular file of at most 65536 bytes there",
        ),
        (
            "a journal linked to /dev/zero",
            &|k| std::os::unix::fs::symlink("/dev/zero", k.p(journal)).unwrap(),
            "the journal {j} is not a regular file (it is a character device): apply reads only a regular file of at most 65536 bytes there",
        ),
        (
            "an oversized journal",
            &|k| fs::write(k.p(journal), vec![b' '; 70_000]).unwrap(),
            "the journal {j} is larger than 65536 bytes: apply reads only a regular file of at most 65536 bytes there",
        ),
        (
            "a FIFO drop-in backup",
            &|k| {
                fs::write(
                    k.p(journal),
                    br#"{"phase":"applying","dropinExisted":true,"stateExisted":true,"writesState":false}"#,
                )
                .unwrap();
                mkfifo(&k.p("conf.d/90-nodetopo.conf.nodetopo-backup"));
            },
            "rolling back the interrupted apply failed: restoring the drop-in: the backup {b} is not a regular file (it is a FIFO): apply reads only a regular file of at most 1048576 bytes there; the journal {j} is kept",
        ),
    ];
    for (what, plant, want) in cases {
        let k = Kubelet::new();
        plant(&k);
        let (out, took) = bounded(k.cmd("policy-strict.yaml", &OK_HOOKS));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let want = want
            .replace("{j}", &k.p(journal).display().to_string())
            .replace(
                "{b}",
                &k.p("conf.d/90-nodetopo.conf.nodetopo-backup")
                    .display()
                    .to_string(),
            );
        assert!(!out.status.success(), "{what}: applied");
        assert!(stderr.contains(&want), "{what}: {want:?} not in {stderr}");
        // Nothing was changed.
        assert_eq!(k.read("lib/cpu_manager_state").unwrap(), original_state());
        assert!(k.read("conf.d/90-nodetopo.conf").is_none());
        println!("{what}: refused in {took:?}: {}", stderr.trim());
    }
}

#[test]
fn a_kubelet_config_naming_the_dropin_is_refused() {
    let k = Kubelet::new();
    let main = fs::read(k.p("config.yaml")).unwrap();
    // The drop-in itself, and the same file through a linked directory.
    fs::copy(k.p("config.yaml"), k.p("conf.d/90-nodetopo.conf")).unwrap();
    std::os::unix::fs::symlink(k.p("conf.d"), k.p("conf-link")).unwrap();
    for config in ["conf.d/90-nodetopo.conf", "conf-link/90-nodetopo.conf"] {
        let mut c = Command::new(common::BIN);
        c.arg("apply")
            .args(["--preset", "epyc-7303-2p", "--kubelet-config"])
            .arg(k.p(config))
            .arg("--kubelet-config-dir")
            .arg(k.p("conf.d"))
            .arg("--state")
            .arg(k.p("lib/cpu_manager_state"))
            .arg("--policy")
            .arg(examples().join("policy-strict.yaml"))
            .arg("--host-proc")
            .arg(k.p("proc"))
            .args(OK_HOOKS);
        let out = c.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{config}: applied");
        assert!(
            stderr.contains(&format!(
                "--kubelet-config {} is the file {} that apply writes",
                k.p(config).display(),
                k.p("conf.d/90-nodetopo.conf").display()
            )),
            "{config}: {stderr}"
        );
        assert_eq!(fs::read(k.p("conf.d/90-nodetopo.conf")).unwrap(), main);
        assert_eq!(k.read("lib/cpu_manager_state").unwrap(), original_state());
        assert!(k.read("conf.d/90-nodetopo.conf.nodetopo-backup").is_none());
    }
}

/// A process kept running until dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_process_that_only_calls_itself_kubelet_does_not_block_apply() {
    let root = is_root();
    let k = Kubelet::new();
    // A shell whose argv[0] is `kubelet`, naming this kubelet's config file without
    // --config-dir and with a gate that is no boolean: as another user, and (when this test
    // runs as root) as root, whose executable is still a shell. The host /proc handed to
    // apply holds only these processes (links to their /proc entries), so that the
    // machine's own processes play no part.
    let config = format!("--config={}", k.p("config.yaml").display());
    let mut spawned = Vec::new();
    for uid in [Some(65534), None]
        .into_iter()
        .filter(|u| root || u.is_none())
    {
        let mut c = Command::new("/bin/sh");
        c.arg0("kubelet")
            // `read` is a builtin: no child process outlives the shell.
            .args(["-c", "read x", &config, "--feature-gates=CPUManager=maybe"])
            .stdin(Stdio::piped());
        if let Some(uid) = uid {
            c.uid(uid).gid(uid);
        }
        let child = Running(c.spawn().unwrap());
        let pid = child.0.id();
        std::os::unix::fs::symlink(format!("/proc/{pid}"), k.p(&format!("proc/{pid}"))).unwrap();
        spawned.push(child);
    }
    // The process must be running its shell already (not the forked test binary).
    let t = Instant::now();
    for p in &spawned {
        let cmdline = format!("/proc/{}/cmdline", p.0.id());
        while !fs::read(&cmdline)
            .unwrap_or_default()
            .starts_with(b"kubelet\0")
        {
            assert!(t.elapsed().as_secs() < 10, "the shell did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let out = k.cmd("policy-restart.yaml", &OK_HOOKS).output().unwrap();
    let v = report("policy-restart.yaml", &out);
    assert_eq!(v["reason"], "RestartOnly", "{v:#}");
    assert_eq!(
        v["kubeletCommandLine"],
        format!(
            "no kubelet process under {}: its command line (--config-dir, configuration flags such as --feature-gates or --reserved-cpus) was not checked",
            k.p("proc").display()
        )
        .as_str(),
        "{v:#}"
    );
    println!(
        "{} processes named kubelet (root: {root}) ignored",
        spawned.len()
    );
}
