//! The real kubelet's harness: the kubelet-standalone binary (built by its build.sh, or a
//! skip with the reason), a kubelet directory with start/stop/health hooks that run it in a
//! private mount namespace, and `nodetopo-agent apply` on that directory.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

use nodetopo_engine::CpuSet;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_nodetopo-agent");

/// The log line the kubelet prints right after its container manager (CPU manager included)
/// started: `kl.evictionManager.Start` follows `kl.containerManager.Start` in
/// `initializeRuntimeDependentModules`, which exits the process when the latter fails.
pub(crate) const STARTED_MARK: &str = "Eviction manager: starting control loop";

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

/// Whether `tool arg` runs and succeeds.
fn runs(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The kubelet-standalone binary, or `None` (skip) with the reason printed.
pub(crate) fn kubelet_or_skip() -> Option<PathBuf> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .expect("running id -u");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return skip("not root (the kubelet needs root)");
    }
    for (tool, arg, why) in [
        ("unshare", "--help", "unshare (util-linux) is not installed"),
        ("curl", "--version", "curl is not installed"),
    ] {
        if !runs(tool, arg) {
            return skip(why);
        }
    }
    if online_cpus().len() < 2 {
        return skip("fewer than 2 online CPUs (one is reserved, one must stay shared)");
    }
    if let Some(why) = nodetopo_testkit::go_missing() {
        return skip(&why);
    }
    match nodetopo_testkit::build_once("e2e/kubelet-standalone/build.sh", &[], "kubelet-standalone")
    {
        Ok(bin) => Some(bin),
        Err(e) => panic!("{e}"),
    }
}

/// This machine's online CPUs (/sys/devices/system/cpu/online, read as the kubelet's
/// cpuset strings are: the engine's CpuSet).
pub fn online_cpus() -> CpuSet {
    let text = fs::read_to_string("/sys/devices/system/cpu/online").expect("reading online");
    CpuSet::parse(text.trim()).expect("the online CPU list")
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

pub(crate) const KUBELET_HEAD: &str =
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/// A kubelet directory: config.yaml, conf.d/, root/ (--root-dir, holds cpu_manager_state),
/// the hooks, one log per start (kubelet.<n>.log) and the pid file.
pub(crate) struct RealKubelet {
    dir: tempfile::TempDir,
    /// With a pod: the fake CRI runtime in its own process, so that its pod and container
    /// outlive kubelet restarts as a real runtime's do.
    runtime: Option<Child>,
}

impl RealKubelet {
    /// A kubelet directory; with `static_pod`, that manifest in the kubelet's static pod
    /// directory and the fake runtime started in its own process.
    /// `kubelet_flags`: more kubelet flags (a kubeconfig, a node name).
    pub(crate) fn new(bin: &Path, static_pod: Option<&str>, kubelet_flags: &str) -> Self {
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
        // The kubelet runs from an executable file named `kubelet` (a hard link: nodetopo
        // knows a kubelet by its executable, /proc/PID/exe, which a symlink would resolve
        // to kubelet-standalone), with a kubelet's own command line, so nodetopo's check
        // finds it as it finds a node's kubelet. A copy when the link cannot be made.
        fs::create_dir_all(dir.path().join("bin")).unwrap();
        let exe = dir.path().join("bin/kubelet");
        if fs::hard_link(bin, &exe).is_err() {
            fs::copy(bin, &exe).unwrap();
        }
        let mut kubelet_cri = format!("NODETOPO_FAKE_CRI_SOCKET='{d}/cri.sock'");
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
{kubelet_cri} exec '{d}/bin/kubelet' --config '{d}/config.yaml' \\
    --config-dir '{d}/conf.d' --root-dir '{d}/root' --v=2 {kubelet_flags}
"
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

    pub(crate) fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub(crate) fn hook(&self, name: &str) -> String {
        format!("bash {}", self.p(name).display())
    }

    pub(crate) fn run_hook(&self, name: &str) -> Output {
        Command::new("bash").arg(self.p(name)).output().unwrap()
    }

    /// Starts the kubelet with the start hook; panics with the hook's error when it fails.
    pub(crate) fn start(&self) {
        let out = self.run_hook("start.sh");
        assert!(
            out.status.success(),
            "the kubelet did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// How many times the kubelet was started.
    pub(crate) fn starts(&self) -> u32 {
        fs::read_to_string(self.p("runs"))
            .map(|s| s.trim().parse().unwrap())
            .unwrap_or(0)
    }

    pub(crate) fn log(&self, start: u32) -> String {
        fs::read_to_string(self.p(&format!("kubelet.{start}.log"))).unwrap()
    }

    /// The log of start number `start` once it holds `line`. Lines the kubelet writes after it
    /// answers healthz (pods from its static pod directory, their syncs) can come after an
    /// apply has returned, later still on a loaded machine.
    pub(crate) fn log_once(&self, start: u32, line: &str) -> String {
        let t = Instant::now();
        loop {
            let log = self.log(start);
            if log.contains(line) {
                return log;
            }
            assert!(
                t.elapsed().as_secs() < 60,
                "start {start}: no {line:?} in the kubelet's log within 60 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub(crate) fn running(&self) -> bool {
        self.run_hook("health.sh").status.success()
    }

    /// The owned fields of the "Effective KubeletConfiguration" the kubelet logged at start
    /// number `start` (klog prints the YAML indented by a tab after `config=<`).
    pub(crate) fn effective(&self, start: u32) -> serde_yaml::Value {
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

    pub(crate) fn state(&self) -> serde_json::Value {
        serde_json::from_slice(&fs::read(self.p("root/cpu_manager_state")).unwrap()).unwrap()
    }

    pub(crate) fn policy(
        &self,
        name: &str,
        reserved: &str,
        cpu_options: &str,
        topology: &str,
    ) -> PathBuf {
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
    pub(crate) fn apply(&self, policy: &Path) -> (Output, serde_json::Value, f64) {
        self.apply_with(policy, |_| {})
    }

    /// [`RealKubelet::apply`] with more arguments or environment set by `more`.
    pub(crate) fn apply_with(
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

    /// `apply` (with more arguments set by `more`) refusing `policy` before planning (exit 2,
    /// no report); its error text.
    pub(crate) fn apply_refused(&self, policy: &Path, more: impl FnOnce(&mut Command)) -> String {
        let out = self.apply_command(policy, more).output().unwrap();
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
    pub(crate) fn apply_command(&self, policy: &Path, more: impl FnOnce(&mut Command)) -> Command {
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

pub(crate) fn owned(v: &serde_yaml::Value, key: &str) -> String {
    serde_yaml::to_string(&v[key]).unwrap().trim().to_string()
}
