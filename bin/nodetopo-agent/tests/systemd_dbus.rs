//! `nodetopo-agent apply --restart systemd` against a real D-Bus: a private `dbus-daemon`
//! started here, and a fake `org.freedesktop.systemd1` (Manager and one Unit object) served
//! from this test with zbus. The fake records every call, answers `NoSuchUnit` for unknown
//! units, ends each job with a `JobRemoved` signal whose result the test chooses, and can
//! delay a job past the restarter's timeout. Cases: RestartOnly (RestartUnit), RewriteState
//! (StopUnit + StartUnit), a failed job (files restored and a second start), an unknown
//! unit, a job that outlives the timeout, no bus at the address, and systemd's private
//! socket (a direct connection without a bus, served here on a Unix socket).
//!
//! Only systemd is mocked (there is no systemd as PID 1 here); the bus, the wire protocol and
//! the agent's restarter are real. Skipped, loudly, only when `dbus-daemon` is absent (and
//! never with `NODETOPO_REQUIRE_DBUS` set, as CI does).

use std::collections::{HashSet, VecDeque};
use std::fs;
use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zbus::object_server::SignalEmitter;
use zbus::zvariant::{ObjectPath, OwnedObjectPath, OwnedValue};

mod common;
use common::{examples, report, Kubelet, BIN};

#[path = "systemd_dbus/fake.rs"]
mod fake;
use fake::*;

impl Kubelet {
    /// Runs the real binary off the test's runtime threads (the fake answers meanwhile).
    async fn apply(&self, policy: &str, extra: &[&str]) -> (Output, serde_json::Value) {
        let mut c = self.cmd(policy, &["--restart", "systemd"]);
        c.args(extra);
        let out = tokio::task::spawn_blocking(move || c.output().unwrap())
            .await
            .unwrap();
        let v = report(policy, &out);
        (out, v)
    }
}

fn take_calls(shared: &Shared) -> Vec<String> {
    std::mem::take(&mut shared.lock().unwrap().calls)
}

fn original_state() -> Vec<u8> {
    fs::read(examples().join("cpu_manager_state")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_over_dbus() {
    let Some(daemon) = dbus_daemon() else {
        assert!(
            std::env::var_os("NODETOPO_REQUIRE_DBUS").is_none(),
            "NODETOPO_REQUIRE_DBUS is set but there is no dbus-daemon (apt-get install dbus-daemon)"
        );
        println!("SKIPPED restart_over_dbus: no dbus-daemon on this machine (apt-get install dbus-daemon); 0 cases ran");
        return;
    };
    let bus = Bus::start(&daemon);
    let shared = fresh();
    let _server = serve_on_bus(&bus.address, &shared).await;
    // The guard has its own test (guard_over_dbus); here the calls are the kubelet's only.
    let addr = ["--systemd-address", bus.address.as_str(), "--no-guard"];
    let mut n = 0;

    // RestartOnly: one RestartUnit job, then the unit's ActiveState.
    let k = Kubelet::new();
    let (out, v) = k.apply("policy-restart.yaml", &addr).await;
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "RestartOnly");
    assert_eq!(
        take_calls(&shared),
        [
            "Subscribe",
            "RestartUnit(kubelet.service,replace)",
            "GetUnit(kubelet.service)"
        ]
    );
    assert!(k.read("conf.d/90-nodetopo.conf").is_some());
    n += 1;

    // RewriteState: stop, rewrite, start.
    let k = Kubelet::new();
    let (out, v) = k.apply("policy-strict.yaml", &addr).await;
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "StateRewritten");
    assert_eq!(
        take_calls(&shared),
        [
            "Subscribe",
            "StopUnit(kubelet.service,replace)",
            "StartUnit(kubelet.service,replace)",
            "GetUnit(kubelet.service)"
        ]
    );
    assert!(k.read("lib/cpu_manager_state").unwrap() != original_state());
    n += 1;

    // The start job fails: Failed naming unit, method and result; both files restored; the
    // kubelet stopped and started again on the old files.
    let k = Kubelet::new();
    shared
        .lock()
        .unwrap()
        .results
        .extend(["done", "failed", "done", "done"]);
    let (out, v) = k.apply("policy-strict.yaml", &addr).await;
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert_eq!(v["reason"], "Failed");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains("StartUnit(kubelet.service) ended with job result \"failed\""),
        "{msg}"
    );
    assert!(msg.contains(&bus.address), "{msg}");
    assert!(
        msg.contains("restored and the kubelet restarted (healthy again)"),
        "{msg}"
    );
    // After the rollback's start, the unit's health is checked again (GetUnit).
    assert_eq!(
        take_calls(&shared),
        [
            "Subscribe",
            "StopUnit(kubelet.service,replace)",
            "StartUnit(kubelet.service,replace)",
            "Subscribe",
            "StopUnit(kubelet.service,replace)",
            "StartUnit(kubelet.service,replace)",
            "GetUnit(kubelet.service)"
        ]
    );
    assert_eq!(k.read("lib/cpu_manager_state").unwrap(), original_state());
    assert!(k.read("conf.d/90-nodetopo.conf").is_none());
    assert!(k.read("lib/nodetopo-apply.journal").is_none());
    n += 1;

    // A unit systemd does not know: NoSuchUnit, nothing left changed.
    let k = Kubelet::new();
    let mut args = addr.to_vec();
    args.extend(["--unit", "nosuch.service"]);
    let (out, v) = k.apply("policy-restart.yaml", &args).await;
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert_eq!(v["reason"], "Failed");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains("org.freedesktop.systemd1.NoSuchUnit") && msg.contains(&bus.address),
        "{msg}"
    );
    assert!(msg.contains("RestartUnit(nosuch.service) failed"), "{msg}");
    assert!(k.read("conf.d/90-nodetopo.conf").is_none());
    take_calls(&shared);
    n += 1;

    // A job that outlives the timeout: an error saying so; restored.
    let k = Kubelet::new();
    shared
        .lock()
        .unwrap()
        .delays
        .push_back(Duration::from_secs(4));
    let mut args = addr.to_vec();
    args.extend(["--systemd-timeout-seconds", "1"]);
    let (out, v) = k.apply("policy-restart.yaml", &args).await;
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains("RestartUnit(kubelet.service): job /org/freedesktop/systemd1/job/")
            && msg.contains("did not end within 1 s"),
        "{msg}"
    );
    assert!(k.read("conf.d/90-nodetopo.conf").is_none());
    take_calls(&shared);
    n += 1;

    // The job ends `done` but the unit is not active afterwards: unhealthy, restored, and
    // stopped and started again.
    let k = Kubelet::new();
    shared.lock().unwrap().stuck = Some("failed");
    let (out, v) = k.apply("policy-restart.yaml", &addr).await;
    shared.lock().unwrap().stuck = None;
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains("kubelet.service is \"failed\", not \"active\""),
        "{msg}"
    );
    // The unit stays failed after the rollback too, and the message says so.
    assert!(
        msg.contains("the kubelet restarted, but it is not healthy again after the rollback: "),
        "{msg}"
    );
    assert!(k.read("conf.d/90-nodetopo.conf").is_none());
    assert_eq!(
        take_calls(&shared),
        [
            "Subscribe",
            "RestartUnit(kubelet.service,replace)",
            "GetUnit(kubelet.service)",
            "StopUnit(kubelet.service,replace)",
            "StartUnit(kubelet.service,replace)",
            "GetUnit(kubelet.service)"
        ]
    );
    n += 1;

    // No bus at the address: the error names it; nothing left changed.
    let k = Kubelet::new();
    let gone = format!("unix:path={}", k.p("no-bus").display());
    let (out, v) = k
        .apply(
            "policy-restart.yaml",
            &["--systemd-address", &gone, "--no-guard"],
        )
        .await;
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains(&gone) && msg.contains("cannot connect"),
        "{msg}"
    );
    assert!(k.read("conf.d/90-nodetopo.conf").is_none());
    n += 1;

    // A malformed address is a usage error (exit 2) before anything is read.
    let k = Kubelet::new();
    let mut c = Command::new(BIN);
    c.args(["apply", "--recover-only", "--systemd-address", "nonsense"]);
    c.arg("--state").arg(k.p("lib/cpu_manager_state"));
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the D-Bus address \"nonsense\""));
    n += 1;

    // systemd's private socket: a direct connection, no bus, no Hello.
    let direct = fresh();
    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("private");
    serve_direct(&sock, direct.clone()).await;
    let k = Kubelet::new();
    let a = format!("unix:path={}", sock.display());
    let (out, v) = k
        .apply(
            "policy-strict.yaml",
            &["--systemd-address", &a, "--systemd-direct", "--no-guard"],
        )
        .await;
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "StateRewritten");
    assert_eq!(
        take_calls(&direct),
        [
            "Subscribe",
            "StopUnit(kubelet.service,replace)",
            "StartUnit(kubelet.service,replace)",
            "GetUnit(kubelet.service)"
        ]
    );
    n += 1;

    println!("systemd over D-Bus (real dbus-daemon, fake systemd): {n} cases passed");
}

/// The guard's calls and files: a whole apply over the bus (armed before the stop, disarmed
/// after the commit), then the agent SIGKILLed at its StopUnit and at its StartUnit, with the
/// guard run by the fake as systemd runs a transient service's ExecStart. Real: the bus, the
/// agent binary, its death, the guard's script; mocked: systemd, and `systemctl` (recording).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_over_dbus() {
    let Some(daemon) = dbus_daemon() else {
        assert!(
            std::env::var_os("NODETOPO_REQUIRE_DBUS").is_none(),
            "NODETOPO_REQUIRE_DBUS is set but there is no dbus-daemon (apt-get install dbus-daemon)"
        );
        println!("SKIPPED guard_over_dbus: no dbus-daemon on this machine; 0 cases ran");
        return;
    };
    let bus = Bus::start(&daemon);
    let shared = fresh();
    let _server = serve_on_bus(&bus.address, &shared).await;
    let bin = tempfile::tempdir().unwrap();
    let log = bin.path().join("systemctl.log");
    fs::write(
        bin.path().join("systemctl"),
        format!("#!/bin/sh\necho \"$*\" >> '{}'\n", log.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(
        bin.path().join("systemctl"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    shared.lock().unwrap().guard_bin = Some(bin.path().to_path_buf());
    let args = |k: &Kubelet| -> Vec<String> {
        vec![
            "--systemd-address".into(),
            bus.address.clone(),
            "--guard-seconds".into(),
            "1".into(),
            "--kubelet-host-state".into(),
            k.p("lib/cpu_manager_state").display().to_string(),
        ]
    };
    let mut n = 0;

    // A whole apply: armed first, disarmed last; the guard's arguments are the host paths.
    let k = Kubelet::new();
    let a = args(&k);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (out, v) = k.apply("policy-strict.yaml", &a).await;
    assert!(out.status.success(), "{v:#}");
    let calls = take_calls(&shared);
    let argv = format!(
        "guard argv: 1 {} kubelet.service {} {}",
        k.p("lib/nodetopo-apply.journal").display(),
        k.p("conf.d/90-nodetopo.conf").display(),
        k.p("lib/cpu_manager_state").display()
    );
    assert_eq!(
        calls,
        [
            "Subscribe",
            &format!("StopUnit({GUARD},replace)"),
            "guard properties: CollectMode Description ExecStart TimeoutStopUSec Type",
            &argv,
            &format!("StartTransientUnit({GUARD},replace)"),
            "StopUnit(kubelet.service,replace)",
            "StartUnit(kubelet.service,replace)",
            "GetUnit(kubelet.service)",
            &format!("StopUnit({GUARD},replace)"),
        ]
    );
    assert!(!shared.lock().unwrap().units.contains(GUARD));
    assert!(k.read("lib/nodetopo-apply.journal").is_none());
    n += 1;

    // The agent dies at its stop, then at its start: the guard starts the kubelet, on the
    // old files (before the journal: untouched; after: restored from the backups).
    for (at, expected) in [
        ("StopUnit(kubelet.service", vec!["start -- kubelet.service"]),
        (
            "StartUnit(kubelet.service",
            vec!["stop -- kubelet.service", "start -- kubelet.service"],
        ),
    ] {
        let _ = fs::remove_file(&log);
        let k = Kubelet::new();
        let a = args(&k);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let mut c = k.cmd("policy-strict.yaml", &["--restart", "systemd"]);
        c.args(&a).stdout(Stdio::null()).stderr(Stdio::null());
        shared.lock().unwrap().kill_at = Some(at);
        let mut child = c.spawn().unwrap();
        shared.lock().unwrap().agent = Some(child.id());
        let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "{at}: the agent was not killed"
        );
        let guard = shared.lock().unwrap().guard.take();
        let mut guard = guard.expect("no guard was started");
        let gs = tokio::task::spawn_blocking(move || guard.0.wait().unwrap())
            .await
            .unwrap();
        assert!(gs.success(), "{at}: the guard failed: {gs}");
        let calls: Vec<String> = fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(calls, expected, "{at}");
        assert_eq!(
            k.read("lib/cpu_manager_state").unwrap(),
            original_state(),
            "{at}"
        );
        assert!(k.read("conf.d/90-nodetopo.conf").is_none(), "{at}");
        assert!(k.read("lib/nodetopo-apply.journal").is_none(), "{at}");
        assert!(k.read("lib/nodetopo-apply.journal.guard").is_none(), "{at}");
        let mut f = shared.lock().unwrap();
        f.units.remove(GUARD);
        f.agent = None;
        f.calls.clear();
        n += 1;
    }
    println!(
        "guard over D-Bus (real dbus-daemon, fake systemd, real guard script): {n} cases passed"
    );
}

/// The revert procedure of docs/actuation.md ("Reverting"), as written: the command block is
/// taken from the page, its paths, bus address and unit are checked against the agent's
/// arguments in the chart rendered with actuation on, step 1's rollout mode against the API
/// type, and the command is run (only its paths mapped to a temporary kubelet directory and
/// `--preset` added for the machine) over a real D-Bus to the fake systemd, on nodetopo's
/// drop-in and a rewritten state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_revert_procedure() {
    let page =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/actuation.md"))
            .unwrap();
    let section = &page[page
        .find("Procedure before `helm uninstall`")
        .expect("docs/actuation.md has no revert procedure")..];
    // Step 1: a rollout mode the API knows.
    let mode = section
        .split("`spec.rollout.mode: ")
        .nth(1)
        .and_then(|r| r.split('`').next())
        .expect("step 1 names no spec.rollout.mode");
    let parsed: Result<nodetopo_crds::rollout::RolloutMode, _> =
        serde_json::from_value(serde_json::json!(mode));
    assert!(
        parsed.is_ok(),
        "step 1's mode {mode:?} is not a rollout mode"
    );
    // Step 2: the first ```sh block, continuation lines joined.
    let block = section
        .split("```sh")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("no ```sh block in the procedure");
    let words: Vec<&str> = block.split_whitespace().filter(|w| *w != "\\").collect();
    let dash = words
        .iter()
        .position(|w| *w == "--")
        .expect("no `--` in the kubectl exec line");
    assert_eq!(&words[..2], ["kubectl", "exec"], "{block}");
    let c = words
        .iter()
        .position(|w| *w == "-c")
        .expect("no container named");
    assert_eq!(words[c + 1], "agent", "the agent container is `agent`");
    let argv = &words[dash + 1..];
    assert_eq!(&argv[..2], ["nodetopo-agent", "revert"], "{block}");
    let flag = |name: &str| -> &str {
        let i = argv
            .iter()
            .position(|w| *w == name)
            .unwrap_or_else(|| panic!("the documented revert has no {name}"));
        argv[i + 1]
    };

    // The chart's agent arguments with actuation on (restart systemd, the defaults).
    let helm = nodetopo_controlplane::tools::tools().unwrap().helm;
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(&helm)
        .args([
            "template",
            "nodetopo",
            "charts/nodetopo",
            "--namespace",
            "nodetopo-system",
        ])
        .args(["--set", "agent.actuation.enabled=true"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = String::from_utf8_lossy(&out.stdout);
    let daemon: Vec<String> = rendered
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|a| a.trim_matches('"').to_string())
        .filter(|a| a.starts_with("--"))
        .collect();
    let chart = |name: &str| -> String {
        daemon
            .iter()
            .find_map(|a| a.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("the chart's agent has no {name}: {daemon:?}"))
            .to_string()
    };
    for (doc, daemon_flag) in [
        ("--kubelet-config", "--kubelet-config"),
        ("--kubelet-config-dir", "--kubelet-config-dir"),
        ("--state", "--kubelet-state"),
        ("--restart", "--kubelet-restart"),
        ("--systemd-address", "--kubelet-systemd-address"),
        ("--unit", "--kubelet-unit"),
        ("--kubelet-host-config", "--kubelet-host-config"),
        ("--kubelet-host-config-dir", "--kubelet-host-config-dir"),
        ("--kubelet-host-state", "--kubelet-host-state"),
        ("--host-proc", "--host-proc"),
    ] {
        assert_eq!(
            flag(doc),
            chart(daemon_flag),
            "the page's {doc} is not the chart's {daemon_flag}"
        );
    }

    let Some(daemon_bin) = dbus_daemon() else {
        assert!(
            std::env::var_os("NODETOPO_REQUIRE_DBUS").is_none(),
            "NODETOPO_REQUIRE_DBUS is set but there is no dbus-daemon (apt-get install dbus-daemon)"
        );
        println!("SKIPPED documented_revert_procedure's run: no dbus-daemon on this machine; the page was checked against the chart");
        return;
    };
    let bus = Bus::start(&daemon_bin);
    let shared = fresh();
    let _server = serve_on_bus(&bus.address, &shared).await;
    let bin = tempfile::tempdir().unwrap();
    fs::write(bin.path().join("systemctl"), "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(
        bin.path().join("systemctl"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    shared.lock().unwrap().guard_bin = Some(bin.path().to_path_buf());

    // nodetopo's drop-in and a rewritten state, as an apply leaves them.
    let k = Kubelet::new();
    let (out, v) = k
        .apply(
            "policy-strict.yaml",
            &["--systemd-address", &bus.address, "--no-guard"],
        )
        .await;
    assert!(
        out.status.success() && v["reason"] == "StateRewritten",
        "{v:#}"
    );
    assert!(k.read("lib/cpu_manager_state").unwrap() != original_state());
    take_calls(&shared);

    // The page's command, its paths mapped; any path the map does not know fails.
    let p = |rel: &str| k.p(rel).display().to_string();
    let map = [
        ("/host/kubelet-config/config.yaml", p("config.yaml")),
        ("/host/kubelet-conf.d", p("conf.d")),
        (
            "/host/kubelet/cpu_manager_state",
            p("lib/cpu_manager_state"),
        ),
        (
            "unix:path=/host/dbus/system_bus_socket",
            bus.address.clone(),
        ),
        ("/host/proc", p("proc")),
        ("/var/lib/kubelet/config.yaml", p("config.yaml")),
        ("/etc/kubernetes/kubelet.conf.d", p("conf.d")),
        (
            "/var/lib/kubelet/cpu_manager_state",
            p("lib/cpu_manager_state"),
        ),
    ];
    let args: Vec<String> = argv[1..]
        .iter()
        .map(|w| match map.iter().find(|(from, _)| from == w) {
            Some((_, to)) => to.clone(),
            None => {
                assert!(
                    !w.starts_with('/') && !w.starts_with("unix:"),
                    "the documented command names {w}, which this test does not map"
                );
                w.to_string()
            }
        })
        .collect();
    let mut cmd = Command::new(BIN);
    cmd.args(&args).args(["--preset", "epyc-7303-2p"]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let v = report("the documented revert", &out);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "Reverted", "{v:#}");
    let calls = take_calls(&shared);
    let armed = calls
        .iter()
        .position(|c| c == &format!("StartTransientUnit({GUARD},replace)"));
    let stop = calls
        .iter()
        .position(|c| c == "StopUnit(kubelet.service,replace)");
    let start = calls
        .iter()
        .position(|c| c == "StartUnit(kubelet.service,replace)");
    let disarmed = calls
        .iter()
        .rposition(|c| c == &format!("StopUnit({GUARD},replace)"));
    assert!(
        armed < stop && stop < start && start < disarmed && armed.is_some(),
        "guard armed, kubelet stopped and started, guard disarmed: {calls:?}"
    );
    let guard_paths = format!(
        " {} kubelet.service {} {}",
        p("lib/nodetopo-apply.journal"),
        p("conf.d/90-nodetopo.conf"),
        p("lib/cpu_manager_state")
    );
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("guard argv: ") && c.ends_with(&guard_paths)),
        "the guard's host paths: {calls:?}"
    );
    // The node's own state again: the same text and checksum (the example file ends with a
    // newline, the kubelet's and nodetopo's writes do not).
    assert_eq!(
        String::from_utf8(k.read("lib/cpu_manager_state").unwrap()).unwrap(),
        String::from_utf8(original_state()).unwrap().trim_end()
    );
    for gone in [
        "conf.d/90-nodetopo.conf",
        "conf.d/90-nodetopo.conf.nodetopo-backup",
        "lib/cpu_manager_state.nodetopo-backup",
        "lib/nodetopo-apply.journal",
    ] {
        assert!(
            k.read(gone).is_none(),
            "{gone} left after the documented revert"
        );
    }
    println!(
        "documented revert procedure: the page's command matches the chart and reverted over D-Bus"
    );
}
