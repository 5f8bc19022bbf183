//! The real kubelet without an API server: applies on its files (`apply_on_a_real_kubelet`)
//! and with a pinned pod (`apply_keeps_a_pinned_pod_on_a_real_kubelet`).

use std::fs;
use std::time::Instant;

use super::kubelet::*;

#[test]
fn apply_on_a_real_kubelet() {
    let Some(bin) = kubelet_or_skip() else { return };
    let cpus = online_cpus();
    let all = cpus.to_string();
    let mut shared_strict = cpus.clone();
    shared_strict.remove(0);
    let shared_strict = shared_strict.to_string();
    // Beta options off on the command line (cases 6 and 7), which nodetopo reads from
    // /proc/PID/cmdline.
    let k = RealKubelet::new(
        &bin,
        None,
        "--feature-gates=CPUManagerPolicyBetaOptions=false",
    );
    let mut checks = 0;

    // The node's kubelet before nodetopo: static, CPU 0 reserved, an empty drop-in directory.
    let t = Instant::now();
    k.start();
    println!(
        "real kubelet: first start in {:.1} s, {} online CPUs ({all})",
        t.elapsed().as_secs_f64(),
        cpus.len()
    );
    let s = k.state();
    assert_eq!(s["policyName"], "static");
    assert_eq!(s["defaultCpuSet"], all.as_str());
    let eff = k.effective(1);
    assert_eq!(owned(&eff, "topologyManagerPolicy"), "none");
    checks += 3;

    // 1. RestartOnly: the topology manager policy.
    let restart = k.policy("restart", "0", "", "policy: best-effort");
    let state_before = fs::read(k.p("root/cpu_manager_state")).unwrap();
    let (out, v, secs) = k.apply(&restart);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "RestartOnly", "{v:#}");
    println!("RestartOnly applied in {secs:.1} s: {}", v["message"]);
    // The kubelet's own process was found with nodetopo's files and its command-line gate.
    let line = v["kubeletCommandLine"].as_str().unwrap_or_default();
    println!("checked: {line}");
    for want in [
        format!("--config {}", k.p("config.yaml").display()),
        format!("--config-dir {}", k.p("conf.d").display()),
        "--feature-gates=CPUManagerPolicyBetaOptions=false".to_string(),
    ] {
        assert!(
            line.starts_with("kubelet process ") && line.contains(&want),
            "{want:?} in {line:?}"
        );
    }
    assert_eq!(k.starts(), 2, "one restart");
    assert!(k.running());
    let eff = k.effective(2);
    assert_eq!(owned(&eff, "topologyManagerPolicy"), "best-effort");
    assert_eq!(owned(&eff, "cpuManagerPolicy"), "static");
    assert_eq!(owned(&eff, "reservedSystemCPUs"), "'0'");
    assert_eq!(
        fs::read(k.p("root/cpu_manager_state")).unwrap(),
        state_before,
        "the kubelet kept its state"
    );
    assert!(k.p("conf.d/90-nodetopo.conf").exists());
    checks += 8;

    // 2. RewriteState: strict-cpu-reservation takes CPU 0 out of the shared pool.
    let strict = k.policy(
        "strict",
        "0",
        "strict-cpu-reservation: \"true\"",
        "policy: best-effort",
    );
    let (out, v, secs) = k.apply(&strict);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "StateRewritten", "{v:#}");
    println!("RewriteState applied in {secs:.1} s: {}", v["message"]);
    assert_eq!(k.starts(), 3, "stopped, then started once");
    assert!(k.running());
    let eff = k.effective(3);
    assert_eq!(
        owned(&eff, "cpuManagerPolicyOptions"),
        "strict-cpu-reservation: 'true'"
    );
    assert_eq!(owned(&eff, "topologyManagerPolicy"), "best-effort");
    let s = k.state();
    assert_eq!(s["policyName"], "static");
    assert_eq!(s["defaultCpuSet"], shared_strict.as_str());
    // The kubelet loaded the rewritten checkpoint (v4, its own format) and kept its pool.
    let log = k.log(3);
    assert!(
        log.contains(&format!("\"Updated default CPUSet\" logger=\"CPUManager state checkpoint.CPUManager state memory\" cpuSet=\"{shared_strict}\"")),
        "the kubelet did not load the shared pool {shared_strict}"
    );
    assert!(!log.contains("Static policy initialized"), "re-initialised");
    checks += 8;

    // 3. Again: nothing to do, no restart.
    let (out, v, _) = k.apply(&strict);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "NoChange", "{v:#}");
    assert_eq!(k.starts(), 3);
    assert!(k.running());
    checks += 3;

    // 4. Control: the state before the rewrite (apply's backup) under the new configuration
    // is refused by the kubelet, so the rewrite was needed.
    let rewritten = fs::read(k.p("root/cpu_manager_state")).unwrap();
    assert!(k.run_hook("stop.sh").status.success());
    fs::copy(
        k.p("root/cpu_manager_state.nodetopo-backup"),
        k.p("root/cpu_manager_state"),
    )
    .unwrap();
    let out = k.run_hook("start.sh");
    assert!(!out.status.success(), "the kubelet accepted the old state");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("some of strictly reserved cpus"),
        "refusal reason: {err}"
    );
    println!(
        "control, old state under strict reservation: {}",
        err.trim()
    );
    fs::write(k.p("root/cpu_manager_state"), &rewritten).unwrap();
    k.start();
    assert_eq!(k.starts(), 5);
    checks += 3;

    // 5. An alpha option whose gate the kubelet's configuration leaves off: nodetopo refuses
    // it before planning, nothing is written and the kubelet is not restarted.
    let dropin = fs::read(k.p("conf.d/90-nodetopo.conf")).unwrap();
    let alpha = k.policy(
        "alpha",
        "0",
        "strict-cpu-reservation: \"true\", distribute-cpus-across-cores: \"true\"",
        "policy: best-effort",
    );
    let err = k.apply_refused(&alpha, |_| {});
    assert!(
        err.contains("distribute-cpus-across-cores is alpha")
            && err.contains("featureGates.CPUManagerPolicyAlphaOptions"),
        "{err}"
    );
    assert_eq!(k.starts(), 5, "no restart for a refused policy");
    assert_eq!(fs::read(k.p("conf.d/90-nodetopo.conf")).unwrap(), dropin);
    checks += 3;

    // 6. A beta option while this kubelet runs with
    // `--feature-gates=CPUManagerPolicyBetaOptions=false` on its command line: nodetopo reads
    // the command line and refuses before planning; nothing written, no restart.
    let beta = k.policy(
        "beta",
        "0",
        "strict-cpu-reservation: \"true\", distribute-cpus-across-numa: \"true\"",
        "policy: best-effort",
    );
    let err = k.apply_refused(&beta, |_| {});
    assert!(
        err.contains("distribute-cpus-across-numa is beta")
            && err.contains("--feature-gates CPUManagerPolicyBetaOptions=false"),
        "{err}"
    );
    assert_eq!(k.starts(), 5, "no restart for a refused policy");
    assert_eq!(fs::read(k.p("conf.d/90-nodetopo.conf")).unwrap(), dropin);
    checks += 3;

    // 7. The same where nodetopo cannot see the command line (--no-kubelet-process-check): the
    // kubelet refuses the policy at start, everything is rolled back, the kubelet runs again.
    let (out, v, secs) = k.apply_with(&beta, |c| {
        c.arg("--no-kubelet-process-check");
    });
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert_eq!(v["reason"], "Failed", "{v:#}");
    let msg = v["message"].as_str().unwrap();
    println!("refused policy rolled back in {secs:.1} s: {msg}");
    for want in [
        "restarting the kubelet failed",
        "Beta-level Options not enabled",
        "restored",
    ] {
        assert!(msg.contains(want), "{want:?} in {msg}");
    }
    assert_eq!(k.starts(), 7, "the refused start, then the rollback's");
    assert!(k.running(), "the kubelet runs again after the rollback");
    assert_eq!(fs::read(k.p("conf.d/90-nodetopo.conf")).unwrap(), dropin);
    assert_eq!(fs::read(k.p("root/cpu_manager_state")).unwrap(), rewritten);
    let eff = k.effective(7);
    assert_eq!(
        owned(&eff, "cpuManagerPolicyOptions"),
        "strict-cpu-reservation: 'true'"
    );
    checks += 8;

    // 8. The agent told another drop-in directory than the one the kubelet reads: refused
    // before anything is written, naming both.
    let err = k.apply_refused(&strict, |c| {
        c.args([
            "--kubelet-host-config-dir",
            "/etc/kubernetes/kubelet.conf.d",
        ]);
    });
    assert!(
        err.contains(&format!(
            "reads its drop-ins from --config-dir {}, not /etc/kubernetes/kubelet.conf.d",
            k.p("conf.d").display()
        )),
        "{err}"
    );
    assert_eq!(k.starts(), 7);
    checks += 2;

    println!(
        "real kubelet: {checks} checks over 8 applies (three refused before planning) and {} kubelet starts",
        k.starts()
    );
}

/// A Guaranteed pod with one whole CPU: the static policy gives its container an exclusive
/// CPU. Its UID is set, so the kubelet keeps it (it hashes the file only without one) and the
/// pod list handed to apply names the same pod.
const PINNED_POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: pinned, namespace: default, uid: 0d1c2d0e-0000-4000-8000-0000000000a1}
spec:
  containers:
  - name: app
    image: registry.k8s.io/pause:3.10
    resources:
      requests: {cpu: \"1\", memory: 64Mi}
      limits: {cpu: \"1\", memory: 64Mi}
";
const PINNED_UID: &str = "0d1c2d0e-0000-4000-8000-0000000000a1";

#[test]
fn apply_keeps_a_pinned_pod_on_a_real_kubelet() {
    let Some(bin) = kubelet_or_skip() else { return };
    let cpus = online_cpus();
    let k = RealKubelet::new(&bin, Some(PINNED_POD), "");
    let mut checks = 0;

    // The kubelet admits the static pod, gives its container an exclusive CPU and the fake
    // runtime runs it.
    k.start();
    let t = Instant::now();
    let container_started = format!(
        "\"Type\":\"ContainerStarted\",\"Data\":\"pinned-vm_default_{PINNED_UID}_0_app_0\""
    );
    while !(k.state()["entries"][PINNED_UID]["app"].is_string()
        && k.log(1).contains(&container_started))
    {
        assert!(
            t.elapsed().as_secs() < 60,
            "the pinned pod did not run within 60 s; state {}",
            k.state()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    println!(
        "real kubelet: pinned pod running {:.1} s after the start",
        t.elapsed().as_secs_f64()
    );
    let s = k.state();
    let pinned = s["entries"][PINNED_UID]["app"]
        .as_str()
        .unwrap()
        .to_string();
    let pinned_cpu: u32 = pinned.parse().expect("one exclusive CPU");
    assert_ne!(pinned_cpu, 0, "the reserved CPU is never exclusive");
    let mut shared = cpus.clone();
    shared.remove(pinned_cpu as usize);
    let shared = shared.to_string();
    assert_eq!(s["defaultCpuSet"], shared.as_str());
    checks += 2;

    // RestartOnly with the pod running: single-numa-node, pod scope. The restarted kubelet
    // re-admits the pod (the topology manager runs the CPU manager's Allocate, which keeps
    // the assignment) and finds its container still running: no new sandbox, no kill.
    let numa = k.policy("numa", "0", "", "policy: single-numa-node, scope: pod");
    let state_before = fs::read(k.p("root/cpu_manager_state")).unwrap();
    let (out, v, secs) = k.apply(&numa);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["reason"], "RestartOnly", "{v:#}");
    println!(
        "RestartOnly with a pinned pod applied in {secs:.1} s: {}",
        v["message"]
    );
    assert_eq!(k.starts(), 2);
    assert!(k.running());
    let eff = k.effective(2);
    assert_eq!(owned(&eff, "topologyManagerPolicy"), "single-numa-node");
    assert_eq!(owned(&eff, "topologyManagerScope"), "pod");
    // The kubelet answers healthz before its static pod source delivers the pod, so the
    // re-admission can come after the apply has returned: wait for it, then for that pod's
    // first sync (the mirror pod is asked for right before the runtime's SyncPod), then for
    // one PLEG relist (1 s) to see a container the sync would have killed or started.
    let admitted = format!("\"Static policy: container already present in state, skipping\" pod=\"default/pinned-vm\" podUID=\"{PINNED_UID}\" containerName=\"app\"");
    let log = k.log_once(2, &admitted);
    let synced = "\"Creating a mirror pod for static pod\" pod=\"default/pinned-vm\"";
    let after = log.find(&admitted).unwrap();
    let t = Instant::now();
    while !k.log(2)[after..].contains(synced) {
        assert!(
            t.elapsed().as_secs() < 60,
            "the restarted kubelet did not sync the pinned pod within 60 s of re-admitting it"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    let log = k.log(2);
    for absent in [
        "Need to start a new one",
        "Killing container",
        "Predicate failed on Pod",
        "Pod admission denied",
    ] {
        assert!(
            !log.contains(absent),
            "after the restart the kubelet logged {absent:?}"
        );
    }
    assert_eq!(
        fs::read(k.p("root/cpu_manager_state")).unwrap(),
        state_before,
        "the assignment and the shared pool kept"
    );
    checks += 8;

    // A reserved set taking the pod's CPU: EvictFirst, read from the real kubelet's
    // checkpoint; apply touches nothing.
    let evict = k.policy(
        "evict",
        &format!("0,{pinned}"),
        "",
        "policy: single-numa-node, scope: pod",
    );
    let dropin = fs::read(k.p("conf.d/90-nodetopo.conf")).unwrap();
    let (out, v, _) = k.apply(&evict);
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert_eq!(v["reason"], "WaitingForEviction", "{v:#}");
    let msg = v.to_string();
    assert!(
        msg.contains("default/pinned"),
        "the plan names the pod: {msg}"
    );
    assert_eq!(k.starts(), 2, "no restart");
    assert!(k.running());
    assert_eq!(fs::read(k.p("conf.d/90-nodetopo.conf")).unwrap(), dropin);
    assert_eq!(
        fs::read(k.p("root/cpu_manager_state")).unwrap(),
        state_before
    );
    checks += 6;

    println!(
        "real kubelet with a pinned pod (CPU {pinned}): {checks} checks over 2 applies and {} kubelet starts",
        k.starts()
    );
}
