//! `nodetopo-agent apply` against a REAL kubelet: k8s.io/kubernetes v1.37.2's kubelet
//! (`e2e/kubelet-standalone`, built by its build.sh) runs standalone (no API server) with a
//! fake CRI runtime in the same process, started and stopped by shell hooks handed to
//! `apply --restart command`. Both sides see this machine: the kubelet through cadvisor,
//! nodetopo through the default sysfs (/sys), no preset.
//!
//! The kubelet runs in a private mount namespace (`unshare --mount`) in which the six kernel
//! tunables its container manager sets at start (vm/overcommit_memory, kernel/panic, ...) are
//! bind-mounted from files already holding the wanted values, so it changes nothing on the
//! host, and /var/lib and /var/log are empty tmpfs mounts, so what the kubelet writes to its
//! hard-coded paths there (device-plugins/, pki/, /var/log/containers) stays out of the host;
//! its pod logs and volume plugin directories are in the test's directory.
//!
//! `apply_on_a_real_kubelet`, on one kubelet (static policy, reservedSystemCPUs "0"):
//! 1. RestartOnly (topology manager best-effort): the kubelet restarted, logs the new
//!    effective configuration, its state is kept.
//! 2. RewriteState (strict-cpu-reservation): the kubelet stopped, the state rewritten, the
//!    kubelet started, accepts the state (CPU 0 out of the shared pool) and stays up.
//! 3. The same policy again: NoChange, no restart.
//! 4. Control: the state as it was before the rewrite (the backup) under the new
//!    configuration makes the real kubelet refuse to start, so the rewrite was needed.
//! 5. An alpha CPU manager option whose feature gate the kubelet's configuration leaves off:
//!    nodetopo refuses it before planning (exit 2), nothing is written, no restart.
//! 6. A policy the kubelet refuses although nodetopo accepts it (a beta option, with the beta
//!    gate off on this kubelet's command line, which nodetopo cannot see): the start fails,
//!    apply rolls back and the kubelet runs again on the previous drop-in.
//!
//! `apply_keeps_a_pinned_pod_on_a_real_kubelet`: the fake runtime in its own process (its pod
//! and container outlive kubelet restarts, as a real runtime's do) and a Guaranteed static pod
//! holding one exclusive CPU:
//! 1. RestartOnly (single-numa-node, pod scope) with the pod running: the restarted kubelet
//!    re-admits the pod keeping its CPU, does not recreate or kill its container, and the
//!    state file is unchanged.
//! 2. A reserved set taking the pod's CPU: EvictFirst from the real kubelet's checkpoint
//!    (WaitingForEviction naming the pod), nothing written, no restart.
//!
//! `apply_waits_for_the_real_kubelets_node`: the kubelet registered as Node `real-kubelet`
//! with a real kube-apiserver and etcd (e2e/controlplane, admin kubeconfig): it posts Ready
//! itself; RestartOnly with `apply --node` waits for the restarted kubelet's Ready heartbeat,
//! and a policy the kubelet refuses (a beta option, the beta gate off on its command line) is
//! rolled back with the Node Ready again.
//! Skips with the control-plane tests' reason when their binaries cannot be built, unless
//! NODETOPO_REQUIRE_CONTROLPLANE=1.
//!
//! `rollout_on_a_real_kubelet`: the operator and the agent daemon (`run --actuation`, hooks as
//! above) on that API server; the real kubelet runs a Guaranteed pod bound to it through the
//! API (one exclusive CPU). A NodeResourcePolicy in Apply mode: the agent restarts the
//! kubelet, waits for its Node Ready and KubeletAgreement on a read of the real checkpoint
//! after the restart, and the NodeTopology reports Applied True RestartOnly.
//!
//! Skips, printing why, when go is missing, when not root, without `unshare`, or with fewer
//! than 2 online CPUs, unless NODETOPO_REQUIRE_ORACLE=1.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_nodetopo-agent");

/// The log line the kubelet prints right after its container manager (CPU manager included)
/// started: `kl.evictionManager.Start` follows `kl.containerManager.Start` in
/// `initializeRuntimeDependentModules`, which exits the process when the latter fails.
const STARTED_MARK: &str = "Eviction manager: starting control loop";

fn required() -> bool {
    std::env::var("NODETOPO_REQUIRE_ORACLE").as_deref() == Ok("1")
}

fn skip(why: &str) -> Option<PathBuf> {
    if required() {
        panic!("NODETOPO_REQUIRE_ORACLE=1 but the real kubelet test cannot run: {why}");
    }
    eprintln!("SKIP real kubelet: {why}");
    None
}

/// The kubelet-standalone binary, or `None` (skip) with the reason printed.
fn kubelet_or_skip() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .expect("running id -u");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return skip("not root (the kubelet needs root)");
    }
    if Command::new("unshare")
        .arg("--help")
        .stdout(Stdio::null())
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        return skip("unshare (util-linux) is not installed");
    }
    if Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        return skip("curl is not installed");
    }
    if online_cpus().len() < 2 {
        return skip("fewer than 2 online CPUs (one is reserved, one must stay shared)");
    }
    let out = Command::new("bash")
        .arg(root.join("e2e/kubelet-standalone/build.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running e2e/kubelet-standalone/build.sh");
    if out.status.code() == Some(127) {
        return skip("go is not installed");
    }
    assert!(out.status.success(), "building kubelet-standalone failed");
    Some(PathBuf::from(
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    ))
}

/// This machine's online CPUs, from /sys/devices/system/cpu/online ("0-3,8").
fn online_cpus() -> Vec<u32> {
    let text = fs::read_to_string("/sys/devices/system/cpu/online").expect("reading online");
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

/// A CPU list as the kubelet prints a cpuset ("0-1,4").
fn cpuset(cpus: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

const KUBELET_HEAD: &str =
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/// A kubelet directory: config.yaml, conf.d/, root/ (--root-dir, holds cpu_manager_state),
/// the hooks, one log per start (kubelet.<n>.log) and the pid file.
struct RealKubelet {
    dir: tempfile::TempDir,
    /// With a pod: the fake CRI runtime in its own process, so that its pod and container
    /// outlive kubelet restarts as a real runtime's do.
    runtime: Option<Child>,
}

impl RealKubelet {
    /// A kubelet directory; with `static_pod`, that manifest in the kubelet's static pod
    /// directory and the fake runtime started in its own process.
    /// `kubelet_flags`: more kubelet flags (a kubeconfig, a node name).
    fn new(bin: &Path, static_pod: Option<&str>, kubelet_flags: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        for sub in [
            "conf.d",
            "root",
            "pod-logs",
            "volume-plugins",
            "sysctl",
            "manifests",
        ] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let port = free_port();
        let mut runtime = None;
        let mut extra_config = String::new();
        let mut kubelet_cri = format!("--fake-cri-socket '{d}/cri.sock'");
        if let Some(manifest) = static_pod {
            fs::write(dir.path().join("manifests/pod.yaml"), manifest).unwrap();
            extra_config = format!("staticPodPath: {d}/manifests\n");
            kubelet_cri = String::new();
            let log = fs::File::create(dir.path().join("runtime.log")).unwrap();
            runtime = Some(
                Command::new(bin)
                    .arg("--fake-cri-only")
                    .arg(dir.path().join("cri.sock"))
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().unwrap())
                    .stderr(log)
                    .spawn()
                    .expect("starting the fake CRI runtime"),
            );
            let t = Instant::now();
            while !dir.path().join("cri.sock").exists() {
                assert!(
                    t.elapsed().as_secs() < 30,
                    "the fake CRI runtime did not listen within 30 s"
                );
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        fs::write(
            dir.path().join("config.yaml"),
            format!(
                "{KUBELET_HEAD}\
failSwapOn: false
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: [\"none\"]
enableServer: false
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {port}
podLogsDir: {d}/pod-logs
volumePluginDir: {d}/volume-plugins
containerRuntimeEndpoint: unix://{d}/cri.sock
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization:
  mode: AlwaysAllow
cpuManagerPolicy: static
reservedSystemCPUs: \"0\"
{extra_config}"
            ),
        )
        .unwrap();
        // Inside the private mount namespace: empty /var/lib and /var/log (the kubelet's
        // hard-coded /var/lib/kubelet/device-plugins, its --cert-dir default
        // /var/lib/kubelet/pki and /var/log/containers), the kernel tunables the container
        // manager wants (setupKernelTunables) read from files holding those values, then the
        // kubelet.
        fs::write(
            dir.path().join("in-namespace.sh"),
            format!(
                "set -eu
for d in /var/lib /var/log; do mount -t tmpfs nodetopo-test \"$d\"; done
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \\
          kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
    k=${{kv%%=*}}; f='{d}/sysctl/'$(echo \"$k\" | tr / _)
    echo \"${{kv#*=}}\" >\"$f\"
    mount --bind \"$f\" \"/proc/sys/$k\"
done
exec '{bin}' {kubelet_cri} -- --config '{d}/config.yaml' \\
    --config-dir '{d}/conf.d' --root-dir '{d}/root' --v=2 {kubelet_flags}
",
                bin = bin.display()
            ),
        )
        .unwrap();
        // alive PID: running and not a zombie (the started kubelet is re-parented).
        let alive = "alive() { [ -r /proc/$1/stat ] && [ \"$(sed 's/.*) //' /proc/$1/stat | cut -d' ' -f1)\" != Z ]; }";
        fs::write(
            dir.path().join("start.sh"),
            format!(
                "set -u
{alive}
n=$(( $(cat '{d}/runs' 2>/dev/null || echo 0) + 1 )); echo $n >'{d}/runs'
log='{d}/kubelet.'$n'.log'
unshare --mount --propagation private bash '{d}/in-namespace.sh' </dev/null >\"$log\" 2>&1 &
pid=$!
echo $pid >'{d}/kubelet.pid'
for _ in $(seq 600); do
    if ! alive $pid; then
        wait $pid; rc=$?
        rm -f '{d}/kubelet.pid'
        echo \"kubelet (start $n) exited with $rc while starting: $(grep -E '^[EF][0-9]' \"$log\" | tail -n 3)\" >&2
        exit 1
    fi
    if grep -q '{STARTED_MARK}' \"$log\" && curl -sf --max-time 2 http://127.0.0.1:{port}/healthz >/dev/null; then
        exit 0
    fi
    sleep 0.1
done
echo \"kubelet (start $n) not started within 60 s\" >&2
exit 1
"
            ),
        )
        .unwrap();
        fs::write(
            dir.path().join("stop.sh"),
            format!(
                "set -u
{alive}
[ -f '{d}/kubelet.pid' ] || exit 0
pid=$(cat '{d}/kubelet.pid')
kill -TERM $pid 2>/dev/null
for _ in $(seq 300); do alive $pid || {{ rm -f '{d}/kubelet.pid'; exit 0; }}; sleep 0.1; done
kill -KILL $pid 2>/dev/null
for _ in $(seq 50); do alive $pid || {{ rm -f '{d}/kubelet.pid'; exit 0; }}; sleep 0.1; done
echo \"kubelet $pid did not stop\" >&2
exit 1
"
            ),
        )
        .unwrap();
        fs::write(
            dir.path().join("health.sh"),
            format!(
                "set -u
{alive}
[ -f '{d}/kubelet.pid' ] || {{ echo 'kubelet not running (no pid file)' >&2; exit 1; }}
alive $(cat '{d}/kubelet.pid') || {{ echo 'kubelet process gone' >&2; exit 1; }}
curl -sf --max-time 2 http://127.0.0.1:{port}/healthz >/dev/null || {{ echo 'healthz not ok' >&2; exit 1; }}
"
            ),
        )
        .unwrap();
        RealKubelet { dir, runtime }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn hook(&self, name: &str) -> String {
        format!("bash {}", self.p(name).display())
    }

    fn run_hook(&self, name: &str) -> Output {
        Command::new("bash").arg(self.p(name)).output().unwrap()
    }

    /// How many times the kubelet was started.
    fn starts(&self) -> u32 {
        fs::read_to_string(self.p("runs"))
            .map(|s| s.trim().parse().unwrap())
            .unwrap_or(0)
    }

    fn log(&self, start: u32) -> String {
        fs::read_to_string(self.p(&format!("kubelet.{start}.log"))).unwrap()
    }

    fn running(&self) -> bool {
        self.run_hook("health.sh").status.success()
    }

    /// The owned fields of the "Effective KubeletConfiguration" the kubelet logged at start
    /// number `start` (klog prints the YAML indented by a tab after `config=<`).
    fn effective(&self, start: u32) -> serde_yaml::Value {
        let log = self.log(start);
        let mut lines = log
            .lines()
            .skip_while(|l| !l.contains("\"Effective KubeletConfiguration\" config=<"));
        assert!(lines.next().is_some(), "start {start}: no effective config");
        let yaml: String = lines
            .map_while(|l| l.strip_prefix('\t'))
            .map(|l| format!("{l}\n"))
            .collect();
        serde_yaml::from_str(&yaml).unwrap()
    }

    fn state(&self) -> serde_json::Value {
        serde_json::from_slice(&fs::read(self.p("root/cpu_manager_state")).unwrap()).unwrap()
    }

    fn policy(&self, name: &str, reserved: &str, cpu_options: &str, topology: &str) -> PathBuf {
        let path = self.p(&format!("policy-{name}.yaml"));
        fs::write(
            &path,
            format!(
                "apiVersion: nodetopo.io/v1alpha1
kind: NodeResourcePolicy
metadata: {{name: {name}}}
spec:
  cpuManager:
    policy: static
    reservedSystemCPUs: \"{reserved}\"
    options: {{{cpu_options}}}
  topologyManager: {{{topology}}}
"
            ),
        )
        .unwrap();
        path
    }

    /// `nodetopo-agent apply` with the hooks, this machine's sysfs and no pods.
    fn apply(&self, policy: &Path) -> (Output, serde_json::Value, f64) {
        self.apply_with(policy, |_| {})
    }

    /// [`RealKubelet::apply`] with more arguments or environment set by `more`.
    fn apply_with(
        &self,
        policy: &Path,
        more: impl FnOnce(&mut Command),
    ) -> (Output, serde_json::Value, f64) {
        let t = Instant::now();
        let out = self.apply_command(policy, more).output().unwrap();
        let secs = t.elapsed().as_secs_f64();
        let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!(
                "{}: no JSON report; exit {}, stderr: {}",
                policy.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out, v, secs)
    }

    /// `apply` refusing `policy` before planning (exit 2, no report); its error text.
    fn apply_refused(&self, policy: &Path) -> String {
        let out = self.apply_command(policy, |_| {}).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}: expected a refusal; stdout {}",
            policy.display(),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// The `apply` command line on this kubelet's files and hooks.
    fn apply_command(&self, policy: &Path, more: impl FnOnce(&mut Command)) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("apply");
        more(&mut cmd);
        if self.runtime.is_some() {
            cmd.arg("--pods").arg(self.p("manifests/pod.yaml"));
        }
        cmd.arg("--kubelet-config")
            .arg(self.p("config.yaml"))
            .arg("--kubelet-config-dir")
            .arg(self.p("conf.d"))
            .arg("--state")
            .arg(self.p("root/cpu_manager_state"))
            .arg("--policy")
            .arg(policy)
            .args(["--restart", "command"])
            .args(["--stop-command", &self.hook("stop.sh")])
            .args(["--start-command", &self.hook("start.sh")])
            .args(["--health-command", &self.hook("health.sh")]);
        cmd
    }
}

impl Drop for RealKubelet {
    fn drop(&mut self) {
        let _ = self.run_hook("stop.sh");
        if let Some(mut runtime) = self.runtime.take() {
            let _ = runtime.kill();
            let _ = runtime.wait();
        }
    }
}

fn owned(v: &serde_yaml::Value, key: &str) -> String {
    serde_yaml::to_string(&v[key]).unwrap().trim().to_string()
}

#[test]
fn apply_on_a_real_kubelet() {
    let Some(bin) = kubelet_or_skip() else { return };
    let cpus = online_cpus();
    let all = cpuset(&cpus);
    let shared_strict = cpuset(&cpus.iter().copied().filter(|&c| c != 0).collect::<Vec<_>>());
    // Beta options off on the command line (case 6), where nodetopo cannot see it.
    let k = RealKubelet::new(
        &bin,
        None,
        "--feature-gates=CPUManagerPolicyBetaOptions=false",
    );
    let mut checks = 0;

    // The node's kubelet before nodetopo: static, CPU 0 reserved, an empty drop-in directory.
    let t = Instant::now();
    let out = k.run_hook("start.sh");
    assert!(
        out.status.success(),
        "the kubelet did not start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    checks += 7;

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
    assert!(k.run_hook("start.sh").status.success());
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
    let err = k.apply_refused(&alpha);
    assert!(
        err.contains("distribute-cpus-across-cores is alpha")
            && err.contains("featureGates.CPUManagerPolicyAlphaOptions"),
        "{err}"
    );
    assert_eq!(k.starts(), 5, "no restart for a refused policy");
    assert_eq!(fs::read(k.p("conf.d/90-nodetopo.conf")).unwrap(), dropin);
    checks += 3;

    // 6. A policy nodetopo accepts and the kubelet refuses: this kubelet runs with
    // `--feature-gates=CPUManagerPolicyBetaOptions=false` on its command line, which nodetopo
    // cannot see, and the policy asks for a beta option. The start fails, everything is rolled
    // back, the kubelet runs again.
    let beta = k.policy(
        "beta",
        "0",
        "strict-cpu-reservation: \"true\", distribute-cpus-across-numa: \"true\"",
        "policy: best-effort",
    );
    let (out, v, secs) = k.apply(&beta);
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

    println!(
        "real kubelet: {checks} checks over 6 applies (one refused before planning) and {} kubelet starts",
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
    let out = k.run_hook("start.sh");
    assert!(
        out.status.success(),
        "the kubelet did not start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let shared = cpuset(
        &cpus
            .iter()
            .copied()
            .filter(|&c| c != pinned_cpu)
            .collect::<Vec<_>>(),
    );
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
    let log = k.log(2);
    assert!(
        log.contains(&format!("\"Static policy: container already present in state, skipping\" pod=\"default/pinned-vm\" podUID=\"{PINNED_UID}\" containerName=\"app\"")),
        "the restarted kubelet did not re-admit the pinned pod with its CPU"
    );
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

/// The Node's Ready condition (status, lastHeartbeatTime in whole seconds since the epoch)
/// and its CPU capacity, as the API server has them.
fn node_ready(
    cp: &nodetopo_controlplane::ControlPlane,
    name: &str,
) -> Option<(String, i64, String)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let node = rt
        .block_on(async {
            kube::Api::<k8s_openapi::api::core::v1::Node>::all(cp.client())
                .get_opt(name)
                .await
        })
        .expect("reading the Node")?;
    let status = node.status?;
    let ready = status
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready")?;
    Some((
        ready.status,
        ready.last_heartbeat_time?.0.as_second(),
        status.capacity?.get("cpu")?.0.clone(),
    ))
}

fn epoch_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The real kubelet registered with a real kube-apiserver (and etcd, from e2e/controlplane)
/// as Node `real-kubelet`: `apply --node` waits until the restarted kubelet itself has posted
/// Ready with a fresh heartbeat (the control-plane rollout tests play those status updates).
#[test]
fn apply_waits_for_the_real_kubelets_node() {
    let Some(bin) = kubelet_or_skip() else { return };
    let cp = match nodetopo_controlplane::ControlPlane::start() {
        Ok(Some(cp)) => cp,
        Ok(None) => return,
        Err(e) => panic!("control plane: {e}"),
    };
    const NODE: &str = "real-kubelet";
    let k = RealKubelet::new(
        &bin,
        None,
        &format!(
            "--kubeconfig '{}' --hostname-override {NODE} --feature-gates=CPUManagerPolicyBetaOptions=false",
            cp.kubeconfig().display()
        ),
    );
    let mut checks = 0;
    let t = Instant::now();
    let out = k.run_hook("start.sh");
    assert!(
        out.status.success(),
        "the kubelet did not start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The kubelet registers its Node and posts Ready.
    let first = loop {
        match node_ready(&cp, NODE) {
            Some(r) if r.0 == "True" => break r,
            r => assert!(
                t.elapsed().as_secs() < 60,
                "Node {NODE} not Ready within 60 s: {r:?}"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    println!(
        "real kubelet: Node {NODE} registered and Ready {:.1} s after the start, capacity cpu {}",
        t.elapsed().as_secs_f64(),
        first.2
    );
    assert_eq!(
        first.2,
        online_cpus().len().to_string(),
        "the Node's CPU capacity"
    );
    checks += 2;

    // RestartOnly with --node: the verify step waits for the Node.
    let restart = k.policy("restart", "0", "", "policy: best-effort");
    let kubeconfig = cp.kubeconfig().to_path_buf();
    let before = epoch_seconds();
    let (out, v, secs) = k.apply_with(&restart, |c| {
        c.args(["--node", NODE, "--verify-seconds", "60"])
            .env("KUBECONFIG", &kubeconfig);
    });
    assert!(
        out.status.success(),
        "{v:#}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(v["reason"], "RestartOnly", "{v:#}");
    assert_eq!(k.starts(), 2);
    assert!(k.running());
    let (ready, heartbeat, _) = node_ready(&cp, NODE).expect("the Node");
    assert_eq!(ready, "True");
    assert!(
        heartbeat >= before,
        "the Ready heartbeat ({heartbeat}) is from the restarted kubelet (apply began at {before})"
    );
    assert_eq!(
        owned(&k.effective(2), "topologyManagerPolicy"),
        "best-effort"
    );
    checks += 7;
    println!("apply --node on a real kubelet: RestartOnly verified on the Node in {secs:.1} s");

    // A policy the kubelet refuses (a beta option; this kubelet has the beta gate off on its
    // command line, which nodetopo cannot see): rolled back, and the rollback's kubelet is
    // checked on the Node too.
    let beta = k.policy(
        "beta",
        "0",
        "distribute-cpus-across-numa: \"true\"",
        "policy: best-effort",
    );
    let before = epoch_seconds();
    let (out, v, secs) = k.apply_with(&beta, |c| {
        c.args(["--node", NODE, "--verify-seconds", "60"])
            .env("KUBECONFIG", &kubeconfig);
    });
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert_eq!(v["reason"], "Failed", "{v:#}");
    let msg = v["message"].as_str().unwrap();
    for want in [
        "Beta-level Options not enabled",
        "the previous configuration and state were restored and the kubelet restarted (healthy again)",
    ] {
        assert!(msg.contains(want), "{want:?} in {msg}");
    }
    assert_eq!(k.starts(), 4, "the refused start, then the rollback's");
    let (ready, heartbeat, _) = node_ready(&cp, NODE).expect("the Node");
    assert_eq!(ready, "True");
    assert!(
        heartbeat >= before,
        "Ready posted by the rollback's kubelet"
    );
    checks += 6;
    println!(
        "apply --node on a real kubelet: refused policy rolled back, Node Ready again, in {secs:.1} s; {checks} checks"
    );
}

/// The whole path on a real kubelet: the operator and the agent daemon (`run --actuation`)
/// on the real API server, the real kubelet registered as its Node running a Guaranteed pod
/// (bound through the API, one exclusive CPU). A NodeResourcePolicy in Apply mode makes the
/// agent restart the kubelet (RestartOnly); its verify step waits for the Node Ready again
/// (posted by the restarted kubelet) and for KubeletAgreement on a read of the real kubelet's
/// checkpoint after the restart; the NodeTopology reports Applied True.
#[test]
fn rollout_on_a_real_kubelet() {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use nodetopo_crds::{NodeResourcePolicy, NodeTopology};
    let Some(bin) = kubelet_or_skip() else { return };
    let Some(operator) = nodetopo_controlplane::workspace_binary("nodetopo-operator") else {
        return;
    };
    let cp = match nodetopo_controlplane::ControlPlane::start() {
        Ok(Some(cp)) => cp,
        Ok(None) => return,
        Err(e) => panic!("control plane: {e}"),
    };
    const NODE: &str = "real-rollout";
    const NS: &str = "real-kubelet";
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (nodes, pods, policies, ntopos) = rt.block_on(async {
        cp.install_crds().await.expect("CRDs");
        cp.ensure_service_account(NS, "default")
            .await
            .expect("namespace");
        let c = cp.client();
        (
            Api::<Node>::all(c.clone()),
            Api::<Pod>::namespaced(c.clone(), NS),
            Api::<NodeResourcePolicy>::all(c.clone()),
            Api::<NodeTopology>::all(c),
        )
    });
    let k = RealKubelet::new(
        &bin,
        None,
        &format!(
            "--kubeconfig '{}' --hostname-override {NODE}",
            cp.kubeconfig().display()
        ),
    );
    let wait = |what: &str, secs: u64, mut ok: Box<dyn FnMut() -> Result<(), String> + '_>| {
        let t = Instant::now();
        loop {
            match ok() {
                Ok(()) => return t.elapsed().as_secs_f64(),
                Err(e) => assert!(t.elapsed().as_secs() < secs, "{what} within {secs} s: {e}"),
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    let out = k.run_hook("start.sh");
    assert!(
        out.status.success(),
        "the kubelet did not start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait(
        "the Node Ready",
        60,
        Box::new(|| match node_ready(&cp, NODE) {
            Some(r) if r.0 == "True" => Ok(()),
            r => Err(format!("{r:?}")),
        }),
    );
    let pp = PostParams::default();
    let uid = rt
        .block_on(async {
            nodes
                .patch(
                    NODE,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"metadata": {"labels": {"pool": "real"}}})),
                )
                .await
                .expect("label the Node");
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "pinned", "namespace": NS},
                "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "1", "memory": "64Mi"},
                                  "limits": {"cpu": "1", "memory": "64Mi"}}}]}
            }))
            .unwrap();
            pods.create(&pp, &pod).await.expect("pod")
        })
        .metadata
        .uid
        .expect("pod uid");
    let secs = wait(
        "the kubelet runs the pod with an exclusive CPU",
        60,
        Box::new(|| {
            let running = rt
                .block_on(pods.get("pinned"))
                .ok()
                .and_then(|p| p.status?.phase)
                == Some("Running".into());
            match (running, k.state()["entries"][&uid]["app"].as_str()) {
                (true, Some(_)) => Ok(()),
                (r, s) => Err(format!("running {r}, state {s:?}")),
            }
        }),
    );
    let pinned = k.state()["entries"][&uid]["app"]
        .as_str()
        .unwrap()
        .to_string();
    println!("real kubelet: pod {NS}/pinned Running on CPU {pinned} after {secs:.1} s");

    let policy: NodeResourcePolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeResourcePolicy",
        "metadata": {"name": "real"},
        "spec": {"nodeSelector": {"matchLabels": {"pool": "real"}},
                 "cpuManager": {"policy": "static", "reservedSystemCPUs": "0"},
                 "topologyManager": {"policy": "best-effort"},
                 "rollout": {"mode": "Apply"}}
    }))
    .unwrap();
    rt.block_on(policies.create(&pp, &policy)).expect("policy");
    let log = |name: &str| fs::File::create(k.p(name)).unwrap();
    let spawn = |mut c: Command, name: &str| {
        c.env("KUBECONFIG", cp.kubeconfig())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log(name))
            .stderr(log(&format!("{name}.err")));
        KillOnDrop(c.spawn().expect(name))
    };
    let mut op = Command::new(&operator);
    op.args(["--no-leader-election", "--metrics-addr"])
        .arg(format!("127.0.0.1:{}", free_port()));
    let _operator = spawn(op, "operator.log");
    let mut agent = Command::new(BIN);
    agent
        .args(["run", "--node-name", NODE, "--actuation"])
        .arg("--state-dir")
        .arg(k.p("agent-state"))
        .arg("--kubelet-state")
        .arg(k.p("root/cpu_manager_state"))
        .arg("--kubelet-config")
        .arg(k.p("config.yaml"))
        .arg("--kubelet-config-dir")
        .arg(k.p("conf.d"))
        .args([
            "--kubelet-restart",
            "command",
            "--actuation-retry-seconds",
            "1",
        ])
        .args(["--kubelet-stop-command", &k.hook("stop.sh")])
        .args(["--kubelet-start-command", &k.hook("start.sh")])
        .args(["--kubelet-health-command", &k.hook("health.sh")])
        .args(["--actuation-verify-seconds", "60"]);
    let _agent = spawn(agent, "agent.log");
    let mut verdict = None;
    let secs = wait(
        "Applied on the NodeTopology",
        180,
        Box::new(|| {
            let nt = rt
                .block_on(ntopos.get_opt(NODE))
                .map_err(|e| e.to_string())?
                .ok_or("no NodeTopology yet")?;
            let c = nt
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Applied"))
                .filter(|c| c.observed_generation == nt.metadata.generation)
                .ok_or("no Applied verdict yet")?;
            // Before the operator's mark the agent reports ObserveOnly.
            if c.reason == "ObserveOnly" || c.reason == "WaitingForEviction" {
                return Err(c.message.clone());
            }
            verdict = Some((c.status.clone(), c.reason.clone(), c.message.clone()));
            Ok(())
        }),
    );
    let (status, reason, message) = verdict.unwrap();
    println!("rollout on a real kubelet: Applied {status} {reason} after {secs:.1} s: {message}");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "RestartOnly"),
        "{message}"
    );
    assert!(
        message.contains("KubeletAgreement True on a kubelet read after the restart"),
        "{message}"
    );
    assert_eq!(k.starts(), 2, "one restart by the agent");
    assert!(k.running());
    assert_eq!(
        owned(&k.effective(2), "topologyManagerPolicy"),
        "best-effort"
    );
    assert_eq!(k.state()["entries"][&uid]["app"], pinned.as_str());
    let (ready, _, _) = node_ready(&cp, NODE).expect("the Node");
    assert_eq!(ready, "True");
    println!("rollout on a real kubelet: 7 checks");
}

/// A child process killed (SIGKILL) and reaped when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
