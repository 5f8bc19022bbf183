//! A real node for tests: containerd and runc (Debian's packages), the CNI bridge plugin, and
//! the real kubelet v1.37.2 (`e2e/kubelet-standalone`, run as `kubelet`) registered with a
//! [`ControlPlane`] as Node [`LOCAL_NODE`].
//!
//! Nothing of it outlives [`LocalNode::stop`] (or its `Drop`):
//! - **Mounts**: containerd and the kubelet run inside one private mount namespace, held by
//!   a `sleep` process, where `/var/lib` and `/var/log` are bind mounts of the node's temp
//!   directory and `/run` is a tmpfs. The kubelet's pod volumes, containerd's overlay
//!   snapshots, the pods' network namespace files and runc's state live and die there. The
//!   host sees the kubelet's files under [`LocalNode::var_lib`] (the PodResources socket and
//!   `cpu_manager_state` included), so a test reads them from outside.
//! - **Sysctls**: the kernel tunables the kubelet sets at start (`setupKernelTunables`) are
//!   bind-mounted files inside that namespace; the host's values are compared before and after.
//! - **cgroups**: the kubelet's `cgroupRoot` is `/nodetopo-node-<pid>-<n>` in every cgroup
//!   hierarchy (its `kubepods` tree below it); containerd, its shims and the kubelet run in
//!   `<root>/runtime`. Stopping kills every process in that tree and removes it.
//! - **iptables**: the kubelet runs with `makeIPTablesUtilChains: false`; the bridge plugin
//!   runs without `ipMasq` and `isGateway`. `iptables-save` output is compared before and
//!   after.
//! - **Network**: pods that are not `hostNetwork` get an interface on a bridge of their own
//!   (`ntn<pid><n>`, no address on the host, no route, no forwarding): they reach nothing but
//!   each other. Agents and the operator run with `hostNetwork` and reach the apiserver on
//!   127.0.0.1 (there is no kube-proxy). The kubelet refuses a loopback node IP, so the node's
//!   address is `10.253.255.<n+1>/32` on an interface of its own (`ntd<pid><n>`, a bridge
//!   with no ports: kernels without the `dummy` module have bridges): traffic to it is local
//!   delivery, like loopback, and never leaves the machine.
//!
//! Needs root, containerd, runc, `ctr`, `unshare`/`nsenter`, `ip`, `iptables-save`, the CNI
//! plugins `bridge`, `host-local` and `loopback` in `/usr/lib/cni`, cgroup v1 with a cpuset hierarchy, and Go (to build the
//! kubelet). [`missing`] names what is absent; `NODETOPO_REQUIRE_NODE=1` makes that a failure.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::server::{tail, LOCAL_NODE};
use crate::{process, ControlPlane, Error, Result};

mod host;
mod layout;

use host::{cgroup_hierarchies, collect_pids, remove_cgroup_tree, remove_stale_nodes, HostState};

/// Environment variable that turns "this machine cannot run a node" into a failure.
pub const REQUIRE_ENV: &str = "NODETOPO_REQUIRE_NODE";

/// The image that serves as containerd's sandbox ("pause") image and as the test workload:
/// `nodetopo-testnode` (e2e/node-tools), entrypoint `/nodetopo-testnode`, command `pause`.
pub const TESTNODE_IMAGE: &str = "docker.io/nodetopo/testnode:e2e";

/// The kernel tunables the kubelet writes at start (`setupKernelTunables`, v1.37.2), with
/// the values it writes: inside the node's mount namespace each is a bind-mounted file.
const KUBELET_SYSCTLS: [(&str, &str); 6] = [
    ("vm/overcommit_memory", "1"),
    ("vm/panic_on_oom", "0"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
    ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
];

/// True when the environment demands a working node (set by `.ci/run`).
pub fn required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

/// What this machine lacks to run a local node, or `None`.
pub fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (containerd, runc and the kubelet need root)".into());
    }
    let mut absent: Vec<&str> = [
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
        "ctr",
        "unshare",
        "nsenter",
        "ip",
        "iptables-save",
        "curl",
    ]
    .into_iter()
    .filter(|t| !on_path(t))
    .collect();
    for plugin in [
        "/usr/lib/cni/bridge",
        "/usr/lib/cni/host-local",
        "/usr/lib/cni/loopback",
    ] {
        if !Path::new(plugin).is_file() {
            absent.push(plugin);
        }
    }
    if !absent.is_empty() {
        return Some(format!(
            "missing {} (Debian: apt-get install containerd runc containernetworking-plugins iptables iproute2 util-linux curl)",
            absent.join(", ")
        ));
    }
    let hierarchies = match cgroup_hierarchies() {
        Ok(h) => h,
        Err(e) => return Some(e.to_string()),
    };
    if !hierarchies.iter().any(|h| h.ends_with("cpuset")) {
        return Some(
            "no cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset (this harness drives the kubelet's cgroupfs driver on cgroup v1 or hybrid hosts)"
                .into(),
        );
    }
    let filesystems = fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems
        .lines()
        .any(|l| l.trim_end().ends_with("overlay"))
    {
        return Some("the kernel has no overlay filesystem (containerd's snapshotter)".into());
    }
    nodetopo_testkit::go_missing()
}

/// The one line a skipping test prints, or a panic where the node is [`required`].
pub fn skip_or_fail(why: &str) {
    assert!(
        !required(),
        "{REQUIRE_ENV}=1 but the local node cannot run: {why}"
    );
    // The stderr handle: the test harness would hide a `println!` of a passing test.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: local-node tests: {why}; set {REQUIRE_ENV}=1 to make this a failure"
    );
}

fn io(what: impl FnOnce() -> String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::io(what(), e)
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).map_err(io(|| format!("writing {}", path.display())))
}

/// How the node is set up.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// `reservedSystemCPUs` of the kubelet (the static CPU manager is on).
    pub reserved_cpus: String,
    /// More KubeletConfiguration lines (YAML, top level), e.g. a topology manager policy.
    pub kubelet_config: String,
    /// More flags on the kubelet's command line (configuration flags win over its files).
    pub kubelet_flags: Vec<String>,
    /// Image tarballs (docker-archive) to import before the kubelet starts; the one holding
    /// [`TESTNODE_IMAGE`] must be among them (containerd's sandbox image).
    pub images: Vec<PathBuf>,
}

/// A running node: containerd and the kubelet in their mount namespace, registered and Ready.
pub struct LocalNode {
    dir: tempfile::TempDir,
    /// The cgroup name (`nodetopo-node-<pid>-<n>`), the kubelet's cgroupRoot.
    cgroup: String,
    hierarchies: Vec<PathBuf>,
    bridge: String,
    /// [`NodeOptions::kubelet_flags`].
    kubelet_flags: Vec<String>,
    /// The port-less bridge that carries [`LocalNode::node_ip`].
    ip_holder: String,
    /// The Node's InternalIP (`--node-ip`): what probes and the apiserver dial.
    pub node_ip: String,
    holder: Mutex<Option<Child>>,
    containerd: Mutex<Option<Child>>,
    kubelet: Mutex<Option<Child>>,
    kubelet_starts: AtomicUsize,
    kubelet_bin: PathBuf,
    kubeconfig: PathBuf,
    healthz_port: u16,
    /// The kubelet's authenticated port on 127.0.0.1 (anonymous, AlwaysAllow: `/configz`).
    pub kubelet_port: u16,
    before: HostState,
    stopped: bool,
}

static NODES: AtomicUsize = AtomicUsize::new(0);

/// A free TCP port on 127.0.0.1 (free when asked; another process may take it after).
pub fn free_port() -> Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(io(|| "finding a free port".into()))
}

/// A plain HTTP GET on 127.0.0.1 (the kubelet's healthz and configz); the body on 200.
pub fn http_get(port: u16, path: &str) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .map_err(io(|| format!("connecting to 127.0.0.1:{port}")))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io(|| "setting a read timeout".into()))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(io(|| format!("GET {path}")))?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)
        .map_err(io(|| format!("reading the answer to GET {path}")))?;
    let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((&buf, ""));
    if head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200") {
        Ok(body.to_string())
    } else {
        Err(Error::Other(format!(
            "GET {path} on port {port}: {}",
            head.lines().next().unwrap_or("no answer")
        )))
    }
}

impl LocalNode {
    /// Sets up and starts the node against `cp` (whose apiserver knows the kubelet's token)
    /// and waits until its Node is Ready.
    pub async fn start(cp: &ControlPlane, kubelet_bin: &Path, opts: &NodeOptions) -> Result<Self> {
        remove_stale_nodes();
        let before = HostState::read();
        let n = NODES.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let dir = tempfile::Builder::new()
            .prefix("nodetopo-node-")
            .tempdir()
            .map_err(io(|| "creating the node's temp dir".into()))?;
        let node = Self {
            cgroup: format!("nodetopo-node-{pid}-{n}"),
            hierarchies: cgroup_hierarchies()?,
            bridge: format!("ntn{pid}{n}").chars().take(15).collect(),
            ip_holder: format!("ntd{pid}{n}").chars().take(15).collect(),
            kubelet_flags: opts.kubelet_flags.clone(),
            node_ip: format!("10.253.255.{}", n % 250 + 1),
            holder: Mutex::new(None),
            containerd: Mutex::new(None),
            kubelet: Mutex::new(None),
            kubelet_starts: AtomicUsize::new(0),
            kubelet_bin: kubelet_bin.to_path_buf(),
            kubeconfig: cp.component_kubeconfig(&format!("system:node:{LOCAL_NODE}"))?,
            healthz_port: free_port()?,
            kubelet_port: free_port()?,
            before,
            stopped: false,
            dir,
        };
        node.lay_out(opts)?;
        node.make_cgroups()?;
        node.add_node_ip()?;
        node.start_holder()?;
        node.start_containerd()?;
        for image in &opts.images {
            node.import_image(image)?;
        }
        node.start_kubelet()?;
        node.wait_ready(cp, Duration::from_secs(120)).await?;
        Ok(node)
    }

    /// The node's temp directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The host directory that is `/var/lib` inside the node (the kubelet's root is
    /// `var_lib()/kubelet`).
    pub fn var_lib(&self) -> PathBuf {
        self.dir.path().join("var-lib")
    }

    /// The kubelet's cgroupRoot, e.g. `/nodetopo-node-123-0`.
    pub fn cgroup_root(&self) -> String {
        format!("/{}", self.cgroup)
    }

    /// containerd's socket (host path).
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    /// The port-less bridge holding the node IP (removed by teardown).
    fn add_node_ip(&self) -> Result<()> {
        let address = format!("{}/32", self.node_ip);
        for args in [
            vec!["link", "add", self.ip_holder.as_str(), "type", "bridge"],
            vec![
                "addr",
                "add",
                address.as_str(),
                "dev",
                self.ip_holder.as_str(),
            ],
            vec!["link", "set", self.ip_holder.as_str(), "up"],
        ] {
            let out = Command::new("ip")
                .args(&args)
                .output()
                .map_err(io(|| "running ip".into()))?;
            if !out.status.success() {
                return Err(Error::Other(format!(
                    "ip {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
        }
        Ok(())
    }

    fn make_cgroups(&self) -> Result<()> {
        for h in &self.hierarchies {
            for sub in [self.cgroup.clone(), format!("{}/runtime", self.cgroup)] {
                let path = h.join(&sub);
                fs::create_dir_all(&path).map_err(io(|| format!("creating {}", path.display())))?;
                if h.ends_with("cpuset") {
                    // A new cpuset cgroup starts empty; a task can join only once it has both.
                    for file in ["cpuset.cpus", "cpuset.mems"] {
                        let parent = fs::read_to_string(h.join(file))
                            .map_err(io(|| format!("reading {}", h.join(file).display())))?;
                        write(&path.join(file), parent.trim())?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The `cgroup.procs` files a node process joins.
    fn runtime_procs(&self) -> String {
        self.hierarchies
            .iter()
            .map(|h| {
                h.join(&self.cgroup)
                    .join("runtime/cgroup.procs")
                    .display()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Spawns `program args` inside the node: in its cgroup and its mount namespace.
    fn spawn_in_node(
        &self,
        what: &str,
        program: &Path,
        args: &[String],
        log: &Path,
        env: &[(&str, String)],
    ) -> Result<Child> {
        let holder = self
            .holder_pid()
            .ok_or_else(|| Error::Other("the node's namespace holder is not running".into()))?;
        let out = fs::File::create(log).map_err(io(|| format!("creating {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(io(|| format!("opening {}", log.display())))?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"for f in $NODETOPO_CGROUP_PROCS; do echo $$ >"$f"; done; exec nsenter --target "$NODETOPO_HOLDER" --mount -- "$@""#)
            .arg("sh")
            .arg(program)
            .args(args)
            .env("NODETOPO_CGROUP_PROCS", self.runtime_procs())
            .env("NODETOPO_HOLDER", holder.to_string())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (k, v) in env {
            cmd.env(k, v);
        }
        process::spawn(cmd, what)
    }

    fn holder_pid(&self) -> Option<u32> {
        self.holder.lock().ok()?.as_ref().map(Child::id)
    }

    fn start_holder(&self) -> Result<()> {
        let d = self.dir.path().display().to_string();
        let mut script = format!(
            "set -eu
for f in $NODETOPO_CGROUP_PROCS; do echo $$ >\"$f\"; done
mount --bind '{d}/var-lib' /var/lib
mount --bind '{d}/var-log' /var/log
mount -t tmpfs nodetopo-node /run
"
        );
        for (key, value) in KUBELET_SYSCTLS {
            let file = format!("{d}/sysctl/{}", key.replace('/', "_"));
            write(Path::new(&file), &format!("{value}\n"))?;
            script.push_str(&format!("mount --bind '{file}' /proc/sys/{key}\n"));
        }
        script.push_str(&format!("touch '{d}/holder.ready'\nexec sleep infinity\n"));
        let log = self.dir.path().join("holder.log");
        let out = fs::File::create(&log).map_err(io(|| format!("creating {}", log.display())))?;
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(script)
            .env("NODETOPO_CGROUP_PROCS", self.runtime_procs())
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(io(|| "holder log".into()))?)
            .stderr(out);
        let child = process::spawn(cmd, "the node's mount namespace (unshare)")?;
        *self.holder.lock().map_err(poisoned)? = Some(child);
        let ready = self.dir.path().join("holder.ready");
        self.wait_until(
            "the node's mount namespace",
            &log,
            Duration::from_secs(10),
            || Ok(ready.exists()),
        )
    }

    /// Polls `done` every 50 ms; on timeout an error with the end of `log`.
    fn wait_until(
        &self,
        what: &str,
        log: &Path,
        timeout: Duration,
        mut done: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        let t = Instant::now();
        loop {
            if done()? {
                return Ok(());
            }
            if t.elapsed() > timeout {
                return Err(Error::Other(format!(
                    "{what} not ready after {timeout:?}\n--- {} ---\n{}",
                    log.display(),
                    tail(log, 40)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn start_containerd(&self) -> Result<()> {
        let log = self.dir.path().join("containerd.log");
        let config = self.dir.path().join("containerd.toml");
        let child = self.spawn_in_node(
            "containerd",
            Path::new("containerd"),
            &["--config".into(), config.display().to_string()],
            &log,
            &[],
        )?;
        *self.containerd.lock().map_err(poisoned)? = Some(child);
        self.wait_until("containerd", &log, Duration::from_secs(30), || {
            Ok(self.ctr(&["version"]).is_ok())
        })
    }

    /// Runs `ctr -n k8s.io ARGS` against the node's containerd; its stdout.
    pub fn ctr(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(self.containerd_socket())
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .map_err(io(|| "running ctr".into()))?;
        if !out.status.success() {
            return Err(Error::Other(format!(
                "ctr {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Imports a docker-archive image tarball into containerd's `k8s.io` namespace (what the
    /// CRI serves the kubelet).
    pub fn import_image(&self, tarball: &Path) -> Result<()> {
        let path = tarball.display().to_string();
        self.ctr(&["images", "import", "--no-unpack=false", &path])
            .or_else(|_| self.ctr(&["images", "import", &path]))
            .map(drop)
    }

    /// The kubelet's command line after `kubelet` (the node's paths inside its namespace).
    fn kubelet_args(&self) -> Vec<String> {
        vec![
            "--config=/var/lib/kubelet/config.yaml".into(),
            "--config-dir=/var/lib/kubelet/conf.d".into(),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--hostname-override={LOCAL_NODE}"),
            format!("--node-ip={}", self.node_ip),
            "--v=2".into(),
        ]
        .into_iter()
        .chain(self.kubelet_flags.iter().cloned())
        .collect()
    }

    /// The log of the kubelet's current (latest) start.
    pub fn kubelet_log(&self) -> PathBuf {
        let n = self.kubelet_starts.load(Ordering::SeqCst);
        self.dir.path().join(format!("kubelet.{n}.log"))
    }

    /// Starts the kubelet (again) and waits for its healthz.
    pub fn start_kubelet(&self) -> Result<()> {
        self.kubelet_starts.fetch_add(1, Ordering::SeqCst);
        let log = self.kubelet_log();
        let child = self.spawn_in_node(
            "kubelet",
            &self.dir.path().join("bin/kubelet"),
            &self.kubelet_args(),
            &log,
            &[],
        )?;
        *self.kubelet.lock().map_err(poisoned)? = Some(child);
        self.wait_until(
            "the kubelet's /healthz",
            &log,
            Duration::from_secs(60),
            || {
                if let Some(status) = self.kubelet_exited()? {
                    return Err(Error::Start {
                        component: "kubelet",
                        message: format!("exited with {status}"),
                        log: log.display().to_string(),
                        tail: tail(&log, 60),
                    });
                }
                Ok(http_get(self.healthz_port, "/healthz").is_ok_and(|b| b.trim() == "ok"))
            },
        )
    }

    fn kubelet_exited(&self) -> Result<Option<std::process::ExitStatus>> {
        let mut g = self.kubelet.lock().map_err(poisoned)?;
        match g.as_mut() {
            Some(c) => c
                .try_wait()
                .map_err(io(|| "waiting for the kubelet".into())),
            None => Ok(None),
        }
    }

    /// Stops the kubelet (SIGTERM, SIGKILL after 10 s). Pods keep running in containerd.
    pub fn stop_kubelet(&self) -> Result<()> {
        if let Some(mut child) = self.kubelet.lock().map_err(poisoned)?.take() {
            stop_child(&mut child);
        }
        Ok(())
    }

    /// Whether the kubelet answers `ok` on its `/healthz`.
    pub fn kubelet_healthy(&self) -> bool {
        http_get(self.healthz_port, "/healthz").is_ok_and(|b| b.trim() == "ok")
    }

    /// The kubelet's pid, when it runs.
    pub fn kubelet_pid(&self) -> Option<u32> {
        self.kubelet.lock().ok()?.as_ref().map(Child::id)
    }

    /// Waits until the Node reports Ready=True.
    pub async fn wait_ready(&self, cp: &ControlPlane, timeout: Duration) -> Result<()> {
        let nodes: Api<Node> = Api::all(cp.client());
        let t = Instant::now();
        loop {
            let ready = nodes
                .get_opt(LOCAL_NODE)
                .await
                .map_err(|e| Error::kube(format!("reading Node {LOCAL_NODE}"), e))?
                .and_then(|n| n.status?.conditions)
                .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"));
            if ready.as_ref().is_some_and(|c| c.status == "True") {
                return Ok(());
            }
            if let Some(status) = self.kubelet_exited()? {
                return Err(Error::Start {
                    component: "kubelet",
                    message: format!("exited with {status}"),
                    log: self.kubelet_log().display().to_string(),
                    tail: tail(&self.kubelet_log(), 60),
                });
            }
            if t.elapsed() > timeout {
                return Err(Error::Other(format!(
                    "Node {LOCAL_NODE} not Ready after {timeout:?}: {ready:?}\n--- kubelet log ---\n{}",
                    tail(&self.kubelet_log(), 60)
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The cgroup directory of a container in `hierarchy` (e.g. `cpuset`), as the kubelet's
    /// cgroupfs driver names it: `<root>/kubepods[/burstable|/besteffort]/pod<uid>/<id>`.
    pub fn container_cgroup(
        &self,
        hierarchy: &str,
        pod_uid: &str,
        container_id: &str,
    ) -> Option<PathBuf> {
        let base = Path::new("/sys/fs/cgroup")
            .join(hierarchy)
            .join(&self.cgroup)
            .join("kubepods");
        ["", "burstable", "besteffort"]
            .iter()
            .map(|qos| {
                base.join(qos)
                    .join(format!("pod{pod_uid}"))
                    .join(container_id)
            })
            .find(|p| p.is_dir())
    }

    /// A cpuset cgroup file under the kubelet's root, e.g. `kubepods/cpuset.cpus`.
    pub fn cpuset_file(&self, relative: &str) -> Result<String> {
        let path = Path::new("/sys/fs/cgroup/cpuset")
            .join(&self.cgroup)
            .join(relative);
        fs::read_to_string(&path)
            .map(|s| s.trim().to_string())
            .map_err(io(|| format!("reading {}", path.display())))
    }

    /// The end of the kubelet's and containerd's logs.
    pub fn log_tails(&self, lines: usize) -> String {
        let containerd = self.dir.path().join("containerd.log");
        format!(
            "--- {} ---\n{}\n--- {} ---\n{}",
            self.kubelet_log().display(),
            tail(&self.kubelet_log(), lines),
            containerd.display(),
            tail(&containerd, lines)
        )
    }

    /// Stops everything and checks that the host is as it was: no process, cgroup, mount,
    /// bridge, changed sysctl or iptables rule left. The error lists what was left.
    pub fn stop(mut self) -> Result<()> {
        self.stopped = true;
        self.teardown()
    }

    fn teardown(&self) -> Result<()> {
        let _ = self.stop_kubelet();
        let mut left = Vec::new();
        // Every container, shim and containerd: whatever is in the node's cgroups.
        let t = Instant::now();
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in &pids {
                // SAFETY: kill(2) on a pid read from our own cgroup.
                unsafe {
                    libc::kill(*pid, libc::SIGKILL);
                }
            }
            if t.elapsed() > Duration::from_secs(20) {
                left.push(format!("processes still in the node's cgroups: {pids:?}"));
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for child in [&self.containerd, &self.holder] {
            if let Ok(mut g) = child.lock() {
                if let Some(mut c) = g.take() {
                    process::kill_group(&mut c);
                }
            }
        }
        for h in &self.hierarchies {
            if let Err(e) = remove_cgroup_tree(&h.join(&self.cgroup)) {
                left.push(e);
            }
        }
        for link in [&self.bridge, &self.ip_holder] {
            if Path::new("/sys/class/net").join(link).exists() {
                let out = Command::new("ip").args(["link", "delete", link]).output();
                if !out.is_ok_and(|o| o.status.success()) {
                    left.push(format!("interface {link} could not be deleted"));
                }
            }
        }
        let dir = self.dir.path().display().to_string();
        let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        left.extend(
            mounts
                .lines()
                .filter(|l| l.contains(&dir))
                .map(|l| format!("mount left: {l}")),
        );
        let after = HostState::read();
        if after != self.before {
            left.push(format!(
                "host state changed:\nbefore {:?}\nafter  {:?}",
                self.before, after
            ));
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(Error::Other(format!(
                "the local node left things behind:\n{}",
                left.join("\n")
            )))
        }
    }

    /// Every pid in the node's cgroup tree (read in the pids hierarchy, or the first).
    fn pids(&self) -> Vec<i32> {
        let base = self
            .hierarchies
            .iter()
            .find(|h| h.ends_with("pids"))
            .or(self.hierarchies.first())
            .map(|h| h.join(&self.cgroup));
        let mut out = Vec::new();
        if let Some(base) = base {
            collect_pids(&base, &mut out);
        }
        out
    }
}

fn stop_child(child: &mut Child) {
    process::signal_group(child, libc::SIGTERM);
    let t = Instant::now();
    while child.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    process::kill_group(child);
}

fn poisoned<T>(_: std::sync::PoisonError<T>) -> Error {
    Error::Other("local node lock poisoned".into())
}

impl Drop for LocalNode {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_tails(60));
        }
        if !self.stopped {
            if let Err(e) = self.teardown() {
                eprintln!("{e}");
            }
        }
    }
}
