//! Issue 26 on the real node (`nodetopo_controlplane::node::LocalNode`: the real kubelet
//! v1.37.2 on containerd and runc, registered with the real control plane): `nodetopo-agent
//! apply` and `revert` run on the host against the node's own kubelet files, with a pinned
//! (Guaranteed, one whole CPU) pod running, and the agent SIGKILLed between the kubelet's
//! stop and its start.
//!
//! There is no systemd here (the guard of `--restart systemd` needs one), so the agent uses
//! the `command` restarter: its hooks (`nodetopo-testnode kubelet-ctl URL`) ask a supervisor
//! in this test, which stops and starts the kubelet process as a node's service manager
//! would, and which kills the agent at the hook the case names. With `command` nothing
//! outlives the agent; what docs/actuation.md names as the node-side stand-in for the
//! guard, `nodetopo-agent apply --recover-only` run by a watchdog, is what brings the
//! kubelet back here, and the test shows the kubelet stays stopped until it runs.
//!
//! Runs where `local_node` runs (root, containerd, runc, CNI plugins, cgroup v1 cpuset, Go);
//! elsewhere one `SKIPPED:` line, or a failure with `NODETOPO_REQUIRE_NODE=1`.

use std::fs;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::ResourceExt;
use nodetopo_controlplane::node::{self, LocalNode, NodeOptions, TESTNODE_IMAGE};
use nodetopo_controlplane::{workspace_binary, ControlPlane, LOCAL_NODE};
use nodetopo_e2e::wait::{poll_until, Progress};
use nodetopo_engine::CpuSet;
use serde_json::{json, Value};

const NAMESPACE: &str = "revert-e2e";
/// The kubelet's files as the kubelet names them (inside the node's mount namespace).
const KUBELET_CONFIG: &str = "/var/lib/kubelet/config.yaml";
const KUBELET_CONFIG_DIR: &str = "/var/lib/kubelet/conf.d";

/// The configuration fields nodetopo owns, as the kubelet's `/configz` shows them.
const OWNED: [&str; 6] = [
    "cpuManagerPolicy",
    "cpuManagerPolicyOptions",
    "reservedSystemCPUs",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
];

/// The hook at which the supervisor SIGKILLs the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KillAt {
    /// After stopping the kubelet, before answering.
    Stop,
    /// Instead of starting the kubelet.
    Start,
}

/// The test's kubelet supervisor: the `command` restarter's other end.
struct Supervisor {
    listener: TcpListener,
    kill_at: Mutex<Option<KillAt>>,
    /// The agent process the next kill is for.
    agent: Mutex<Option<Child>>,
    hooks: Mutex<Vec<String>>,
    done: AtomicBool,
}

impl Supervisor {
    fn url(&self, verb: &str) -> Result<String> {
        Ok(format!("http://{}/{verb}", self.listener.local_addr()?))
    }

    fn kill_agent(&self) {
        if let Ok(mut g) = self.agent.lock() {
            if let Some(c) = g.as_mut() {
                let _ = c.kill();
            }
        }
    }

    /// Answers hooks one at a time until [`Supervisor::done`] is set.
    fn serve(&self, node: &LocalNode) {
        for conn in self.listener.incoming() {
            if self.done.load(Ordering::SeqCst) {
                return;
            }
            let Ok(mut conn) = conn else { continue };
            let mut line = String::new();
            let _ = BufReader::new(&conn).read_line(&mut line);
            let path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string();
            let kill = *self.kill_at.lock().expect("supervisor lock");
            let answer: Result<String, String> = match path.as_str() {
                "/stop" => {
                    let r = node.stop_kubelet().map_err(|e| e.to_string());
                    if kill == Some(KillAt::Stop) {
                        self.kill_agent();
                    }
                    r.map(|()| "stopped".into())
                }
                "/start" if kill == Some(KillAt::Start) => {
                    self.kill_agent();
                    Err("the agent was killed instead of this start".into())
                }
                "/start" if node.kubelet_healthy() => Ok("already running".into()),
                "/start" => node
                    .start_kubelet()
                    .map(|()| "started, healthz ok".into())
                    .map_err(|e| e.to_string()),
                "/health" if node.kubelet_healthy() => Ok("ok".into()),
                "/health" => Err("the kubelet's healthz does not answer ok".into()),
                other => Err(format!("unknown hook {other:?}")),
            };
            println!("[revert-node] hook {path}: {answer:?}");
            if let Ok(mut h) = self.hooks.lock() {
                h.push(format!(
                    "{path} {}",
                    if answer.is_ok() { "ok" } else { "failed" }
                ));
            }
            let (status, body) = match answer {
                Ok(b) => ("200 OK", b),
                Err(e) => ("500 Internal Server Error", e),
            };
            let _ = write!(
                conn,
                "HTTP/1.0 {status}\r\nContent-Type: text/plain\r\n\r\n{body}\n"
            );
        }
    }

    fn stop(&self) {
        self.done.store(true, Ordering::SeqCst);
        if let Ok(a) = self.listener.local_addr() {
            let _ = std::net::TcpStream::connect(a);
        }
    }

    fn take_hooks(&self) -> Vec<String> {
        self.hooks
            .lock()
            .map(|mut h| std::mem::take(&mut *h))
            .unwrap_or_default()
    }
}

/// The agent's view of the node: the host paths of the kubelet's files and the hooks.
struct Host<'a> {
    cp: &'a ControlPlane,
    node: &'a LocalNode,
    agent: PathBuf,
    testnode: PathBuf,
    sup: &'a Supervisor,
    work: PathBuf,
}

impl Host<'_> {
    fn kubelet_dir(&self) -> PathBuf {
        self.node.var_lib().join("kubelet")
    }

    fn read(&self, rel: &str) -> Option<Vec<u8>> {
        fs::read(self.kubelet_dir().join(rel)).ok()
    }

    /// `nodetopo-agent VERB` with the node's files, the hooks and `extra`.
    fn cmd(&self, verb: &str, extra: &[String]) -> Result<Command> {
        let k = self.kubelet_dir();
        let hook = |v: &str| -> Result<String> {
            Ok(format!(
                "{} kubelet-ctl {}",
                self.testnode.display(),
                self.sup.url(v)?
            ))
        };
        let mut c = Command::new(&self.agent);
        c.arg(verb)
            .arg("--kubelet-config")
            .arg(k.join("config.yaml"))
            .arg("--kubelet-config-dir")
            .arg(k.join("conf.d"))
            .arg("--state")
            .arg(k.join("cpu_manager_state"))
            .args(["--kubelet-host-config", KUBELET_CONFIG])
            .args(["--kubelet-host-config-dir", KUBELET_CONFIG_DIR])
            .args(["--restart", "command"])
            .args(["--stop-command", &hook("stop")?])
            .args(["--start-command", &hook("start")?])
            .args(["--health-command", &hook("health")?])
            .args(extra)
            .env("KUBECONFIG", self.cp.kubeconfig())
            .stdin(Stdio::null());
        Ok(c)
    }

    /// apply/revert's arguments: the policy (apply), the pods on the node, and the Node
    /// Ready check of the verify step.
    async fn args(&self, policy: Option<&str>) -> Result<Vec<String>> {
        let mut a = vec![
            "--node".into(),
            LOCAL_NODE.into(),
            "--verify-seconds".into(),
            "90".into(),
        ];
        if let Some(p) = policy {
            let file = self.work.join("policy.yaml");
            fs::write(&file, p)?;
            a.extend(["--policy".into(), file.display().to_string()]);
        }
        let pods: Api<Pod> = Api::namespaced(self.cp.client(), NAMESPACE);
        for (i, pod) in pods
            .list(&Default::default())
            .await?
            .items
            .iter()
            .enumerate()
        {
            let file = self.work.join(format!("pod-{i}.json"));
            fs::write(&file, serde_json::to_vec(pod)?)?;
            a.extend(["--pods".into(), file.display().to_string()]);
        }
        Ok(a)
    }

    /// Runs the agent to its end; its JSON report.
    async fn run(&self, verb: &str, policy: Option<&str>) -> Result<(Output, Value)> {
        let args = self.args(policy).await?;
        let mut c = self.cmd(verb, &args)?;
        // Blocking: the client's tasks run on the runtime's workers meanwhile.
        let out = c.output()?;
        let report: Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "{verb}: no JSON report; exit {}, stderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        println!("[revert-node] {verb}: {report}");
        Ok((out, report))
    }

    /// Runs `apply` with the supervisor set to SIGKILL it at `at`; checks it died so.
    async fn apply_killed(&self, policy: &str, at: KillAt) -> Result<()> {
        let args = self.args(Some(policy)).await?;
        let child = self
            .cmd("apply", &args)?
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting nodetopo-agent apply")?;
        *self.sup.kill_at.lock().expect("lock") = Some(at);
        *self.sup.agent.lock().expect("lock") = Some(child);
        let t = Instant::now();
        let status = loop {
            let s = self
                .sup
                .agent
                .lock()
                .expect("lock")
                .as_mut()
                .context("the agent went")?
                .try_wait()?;
            if let Some(s) = s {
                break s;
            }
            ensure!(
                t.elapsed() < Duration::from_secs(120),
                "the agent was not killed at {at:?} within 120 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        *self.sup.kill_at.lock().expect("lock") = None;
        *self.sup.agent.lock().expect("lock") = None;
        ensure!(
            std::os::unix::process::ExitStatusExt::signal(&status) == Some(9),
            "the agent ended with {status}, not SIGKILL at {at:?}"
        );
        Ok(())
    }

    /// `apply --recover-only`: the watchdog the `command` restarter needs.
    fn recover_only(&self) -> Result<Value> {
        let out = self.cmd("apply", &["--recover-only".into()])?.output()?;
        ensure!(
            out.status.success(),
            "apply --recover-only: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout)?;
        println!("[revert-node] apply --recover-only: {v}");
        Ok(v)
    }

    fn configz(&self) -> Result<Value> {
        let url = format!("https://127.0.0.1:{}/configz", self.node.kubelet_port);
        let out = Command::new("curl")
            .args(["-sSfk", "--max-time", "10", &url])
            .output()?;
        ensure!(
            out.status.success(),
            "GET {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout)?;
        let k = &v["kubeletconfig"];
        Ok(OWNED
            .iter()
            .map(|f| (f.to_string(), k[f].clone()))
            .collect::<serde_json::Map<_, _>>()
            .into())
    }

    fn checkpoint(&self) -> Result<Value> {
        let text = self
            .read("cpu_manager_state")
            .context("no cpu_manager_state")?;
        Ok(serde_json::from_slice(&text)?)
    }

    /// The files nodetopo leaves in the kubelet's directories (none after a revert).
    fn leftovers(&self) -> Vec<String> {
        let mut out = Vec::new();
        for dir in [self.kubelet_dir(), self.kubelet_dir().join("conf.d")] {
            for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.contains("nodetopo") {
                    out.push(e.path().display().to_string());
                }
            }
        }
        out
    }

    /// The kubelet answers healthz, its Node is Ready with a heartbeat newer than `since`,
    /// and it still runs 3 s later (a kubelet refusing its state exits after healthz).
    async fn kubelet_back(&self, since: Instant) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.cp.client());
        let wall = std::time::SystemTime::now() - since.elapsed();
        let since_secs = wall.duration_since(std::time::UNIX_EPOCH)?.as_secs() as i64;
        poll_until(
            "the Node Ready with a fresh heartbeat",
            Duration::from_secs(90),
            Duration::from_millis(500),
            || {
                let nodes = nodes.clone();
                async move {
                    let n = match nodes.get(LOCAL_NODE).await {
                        Ok(n) => n,
                        Err(e) => return Progress::Pending(e.to_string()),
                    };
                    let ready = n
                        .status
                        .and_then(|s| s.conditions)
                        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"));
                    match ready {
                        Some(c)
                            if c.status == "True"
                                && c.last_heartbeat_time
                                    .as_ref()
                                    .is_some_and(|t| t.0.as_second() >= since_secs) =>
                        {
                            Progress::Done(())
                        }
                        other => Progress::Pending(format!("{other:?}")),
                    }
                }
            },
        )
        .await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        ensure!(
            self.node.kubelet_healthy(),
            "the kubelet stopped answering healthz\n{}",
            self.node.log_tails(30)
        );
        Ok(())
    }
}

/// The pinned pod's container: its id, and its cgroup's cpuset = the checkpoint's entry.
struct Pinned {
    uid: String,
    container_id: String,
    cpus: CpuSet,
}

async fn pinned_now(h: &Host<'_>, name: &str) -> Result<Pinned> {
    let pods: Api<Pod> = Api::namespaced(h.cp.client(), NAMESPACE);
    let p = pods.get(name).await?;
    let uid = p.uid().context("no uid")?;
    let st = p.status.context("no status")?;
    ensure!(
        st.phase.as_deref() == Some("Running"),
        "{name} is {:?}",
        st.phase
    );
    let cs = st.container_statuses.unwrap_or_default();
    let c = cs
        .iter()
        .find(|c| c.name == "app")
        .context("no status of app")?;
    ensure!(
        c.restart_count == 0,
        "{name}/app restarted {} times",
        c.restart_count
    );
    let id = c.container_id.clone().context("no container id")?;
    let id = id.strip_prefix("containerd://").unwrap_or(&id).to_string();
    let dir = h
        .node
        .container_cgroup("cpuset", &uid, &id)
        .context("no cpuset cgroup")?;
    let cgroup = CpuSet::parse(fs::read_to_string(dir.join("cpuset.cpus"))?.trim())?;
    let cp = h.checkpoint()?;
    let entry = cp["entries"][&uid]["app"]
        .as_str()
        .with_context(|| format!("no checkpoint entry for {uid}/app: {cp}"))?;
    let entry = CpuSet::parse(entry)?;
    ensure!(
        cgroup == entry,
        "{name}/app: cgroup cpuset {cgroup} but the kubelet's checkpoint says {entry}"
    );
    let default = CpuSet::parse(cp["defaultCpuSet"].as_str().unwrap_or_default())?;
    ensure!(
        default.intersection(&entry).is_empty(),
        "{name}/app's CPUs {entry} also in the shared pool {default}"
    );
    Ok(Pinned {
        uid,
        container_id: id,
        cpus: cgroup,
    })
}

fn policy(options: &str, tm: &str) -> String {
    format!(
        "apiVersion: nodetopo.io/v1alpha1
kind: NodeResourcePolicy
metadata: {{name: revert-e2e}}
spec:
  cpuManager:
    policy: static
    reservedSystemCPUs: \"0\"
    options: {{{options}}}
  topologyManager: {tm}
"
    )
}

fn journal_phase(h: &Host<'_>) -> Option<String> {
    let j = h.read("nodetopo-apply.journal")?;
    let v: Value = serde_json::from_slice(&j).ok()?;
    v["phase"].as_str().map(String::from)
}

/// The scenario; `checks` counts what was verified.
async fn scenario(h: &Host<'_>) -> Result<usize> {
    let mut checks = 0;
    h.cp.ensure_service_account(NAMESPACE, "default").await?;
    let original = h.configz()?;
    let original_config = h.read("config.yaml").context("no config.yaml")?;
    println!("[revert-node] the kubelet's own configuration: {original}");
    ensure!(
        h.leftovers().is_empty(),
        "nodetopo files before the test: {:?}",
        h.leftovers()
    );

    // A pinned pod: Guaranteed, one whole CPU.
    let pods: Api<Pod> = Api::namespaced(h.cp.client(), NAMESPACE);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "pinned", "namespace": NAMESPACE},
        "spec": {
            "nodeName": LOCAL_NODE,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "app", "image": TESTNODE_IMAGE, "imagePullPolicy": "Never",
                "command": ["/nodetopo-testnode", "pause"],
                "resources": {
                    "requests": {"cpu": "1", "memory": "32Mi"},
                    "limits": {"cpu": "1", "memory": "32Mi"},
                },
            }],
        },
    }))?;
    pods.create(&PostParams::default(), &pod)
        .await
        .context("creating the pinned pod")?;
    let pinned = poll_until(
        "pinned Running, its cpuset in the checkpoint",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            match pinned_now(h, "pinned").await {
                Ok(p) => Progress::Done(p),
                Err(e) => Progress::Pending(format!("{e:#}")),
            }
        },
    )
    .await?;
    println!(
        "[revert-node] pinned/app holds CPUs {} ({})",
        pinned.cpus, pinned.container_id
    );
    let same_pinned = |what: &str, now: &Pinned| -> Result<()> {
        ensure!(
            now.uid == pinned.uid
                && now.container_id == pinned.container_id
                && now.cpus == pinned.cpus,
            "{what}: pinned/app was {} on {}, is {} on {}",
            pinned.container_id,
            pinned.cpus,
            now.container_id,
            now.cpus
        );
        Ok(())
    };
    checks += 1;

    // 1. Apply with the pod running: the CPU manager's options and the topology manager
    // change (RestartOnly: on 2 CPUs every change of the reserved set or of the policy with
    // CPU 1 pinned is EvictFirst or Drain, which apply refuses to carry out).
    let p1 = policy(
        "full-pcpus-only: \"true\"",
        "{policy: restricted, scope: pod}",
    );
    let (out, r) = h.run("apply", Some(&p1)).await?;
    ensure!(
        out.status.success() && r["reason"] == "RestartOnly",
        "apply p1: {r}"
    );
    let cl = r["kubeletCommandLine"].as_str().unwrap_or_default();
    ensure!(
        cl.starts_with("kubelet process ")
            && cl.contains("runs with --config /var/lib/kubelet/config.yaml and --config-dir /var/lib/kubelet/conf.d"),
        "apply did not find the kubelet's process: {r}"
    );
    let z = h.configz()?;
    ensure!(
        z["cpuManagerPolicyOptions"] == json!({"full-pcpus-only": "true"})
            && z["topologyManagerPolicy"] == "restricted"
            && z["topologyManagerScope"] == "pod",
        "after apply p1 the kubelet runs {z}"
    );
    same_pinned("after apply p1", &pinned_now(h, "pinned").await?)?;
    checks += 3;

    // 2. The agent SIGKILLed between the stop and the start of a RestartOnly (journal
    // `written`, the new drop-in in place): the kubelet stays stopped, nothing restarts
    // it; the watchdog rolls forward and starts it with the new pair.
    let p2 = policy(
        "full-pcpus-only: \"true\"",
        "{policy: best-effort, scope: pod}",
    );
    let dropin_p1 = h.read("conf.d/90-nodetopo.conf");
    h.apply_killed(&p2, KillAt::Stop).await?;
    ensure!(
        !h.node.kubelet_healthy(),
        "the kubelet runs after the agent died at its stop"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure!(!h.node.kubelet_healthy(), "something started the kubelet");
    ensure!(
        journal_phase(h).as_deref() == Some("written"),
        "journal {:?}",
        journal_phase(h)
    );
    ensure!(
        h.read("conf.d/90-nodetopo.conf") != dropin_p1,
        "the drop-in was not rewritten"
    );
    println!("[revert-node] agent killed at its stop (RestartOnly): kubelet stopped for 5 s, journal written");
    let t = Instant::now();
    let v = h.recover_only()?;
    ensure!(v["recovery"] == "RolledForward", "{v}");
    h.kubelet_back(t).await?;
    let z = h.configz()?;
    ensure!(
        z["topologyManagerPolicy"] == "best-effort"
            && z["cpuManagerPolicyOptions"] == json!({"full-pcpus-only": "true"}),
        "after the roll-forward the kubelet runs {z}"
    );
    ensure!(h.read("nodetopo-apply.journal").is_none(), "journal left");
    same_pinned("after the roll-forward", &pinned_now(h, "pinned").await?)?;
    checks += 5;

    // 3. Revert with the pod running.
    let t = Instant::now();
    let (out, r) = h.run("revert", None).await?;
    ensure!(
        out.status.success() && r["reason"] == "Reverted",
        "revert: {r}"
    );
    h.kubelet_back(t).await?;
    let z = h.configz()?;
    ensure!(
        z == original,
        "after the revert the kubelet runs {z}, its own configuration is {original}"
    );
    ensure!(
        h.leftovers().is_empty(),
        "left after the revert: {:?}",
        h.leftovers()
    );
    ensure!(
        h.read("config.yaml").as_ref() == Some(&original_config),
        "config.yaml changed"
    );
    same_pinned("after the revert", &pinned_now(h, "pinned").await?)?;
    println!("[revert-node] reverted with pinned/app running: configuration {z}, nothing of nodetopo's left, pinned/app still on {}", pinned.cpus);
    checks += 4;

    // 4. Without a pinned pod: the state itself changes (strict-cpu-reservation: RewriteState).
    pods.delete("pinned", &DeleteParams::default()).await?;
    poll_until(
        "the checkpoint without assignments",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let gone = pods.get_opt("pinned").await.ok().flatten().is_none();
            match h.checkpoint() {
                Ok(c) if gone && c["entries"].as_object().is_none_or(|e| e.is_empty()) => {
                    Progress::Done(())
                }
                Ok(c) => Progress::Pending(format!("pod gone {gone}, checkpoint {c}")),
                Err(e) => Progress::Pending(e.to_string()),
            }
        },
    )
    .await?;
    let p3 = policy("strict-cpu-reservation: \"true\"", "{policy: none}");
    let state_before = h.read("cpu_manager_state");

    // 4a. Killed at the stop of a RewriteState: before the journal, nothing written; the
    // kubelet stays stopped; the watchdog finds nothing to recover and starts it.
    h.apply_killed(&p3, KillAt::Stop).await?;
    ensure!(
        !h.node.kubelet_healthy(),
        "the kubelet runs after the agent died at its stop"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure!(!h.node.kubelet_healthy(), "something started the kubelet");
    ensure!(
        h.read("nodetopo-apply.journal").is_none(),
        "a journal before any write"
    );
    ensure!(
        h.read("conf.d/90-nodetopo.conf").is_none() && h.read("cpu_manager_state") == state_before,
        "files changed before the journal"
    );
    let t = Instant::now();
    let v = h.recover_only()?;
    ensure!(
        v["recovery"] == "Nothing" && v["kubeletStarted"] == true,
        "{v}"
    );
    h.kubelet_back(t).await?;
    ensure!(
        h.configz()? == original,
        "after the start the kubelet runs {}",
        h.configz()?
    );
    ensure!(h.leftovers().is_empty(), "left: {:?}", h.leftovers());
    println!("[revert-node] agent killed at its stop (RewriteState, no journal yet): the watchdog started the kubelet on its own files");
    checks += 4;

    // 4b. Killed at the start of a RewriteState: both new files and the journal `written`;
    // the watchdog starts the kubelet on the new pair, which it accepts.
    h.apply_killed(&p3, KillAt::Start).await?;
    ensure!(
        !h.node.kubelet_healthy(),
        "the kubelet runs after the agent died at its start"
    );
    ensure!(
        journal_phase(h).as_deref() == Some("written"),
        "journal {:?}",
        journal_phase(h)
    );
    let t = Instant::now();
    let v = h.recover_only()?;
    ensure!(v["recovery"] == "RolledForward", "{v}");
    h.kubelet_back(t).await?;
    let z = h.configz()?;
    ensure!(
        z["cpuManagerPolicyOptions"] == json!({"strict-cpu-reservation": "true"}),
        "after the roll-forward the kubelet runs {z}"
    );
    let shared = h.checkpoint()?["defaultCpuSet"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure!(
        !CpuSet::parse(&shared)?.contains(0),
        "strict reservation, but CPU 0 in the kubelet's shared pool {shared:?}"
    );
    println!("[revert-node] agent killed at its start (RewriteState, journal written): the watchdog started the kubelet on the new pair, shared pool {shared:?}");
    checks += 4;

    // 5. Revert with the state rewritten back (CPU 0 back in the shared pool).
    let t = Instant::now();
    let (out, r) = h.run("revert", None).await?;
    ensure!(
        out.status.success() && r["reason"] == "Reverted",
        "revert: {r}"
    );
    ensure!(
        r["message"]
            .as_str()
            .unwrap_or_default()
            .contains("was rewritten"),
        "{r}"
    );
    h.kubelet_back(t).await?;
    ensure!(
        h.configz()? == original,
        "after the revert the kubelet runs {}",
        h.configz()?
    );
    let shared = h.checkpoint()?["defaultCpuSet"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure!(
        CpuSet::parse(&shared)?.contains(0),
        "CPU 0 not back in the shared pool {shared:?}"
    );
    ensure!(
        h.leftovers().is_empty(),
        "left after the revert: {:?}",
        h.leftovers()
    );
    ensure!(
        h.read("config.yaml").as_ref() == Some(&original_config),
        "config.yaml changed"
    );
    println!("[revert-node] reverted a state rewrite: shared pool {shared:?}, nothing of nodetopo's left");
    checks += 4;
    println!("[revert-node] hooks: {:?}", h.sup.take_hooks());
    Ok(checks)
}

/// Packs the test image (the node's sandbox image and the pinned pod's).
fn pack_testnode(dir: &Path, testnode: &Path) -> Result<PathBuf> {
    let out = dir.join("testnode.tar");
    let o = Command::new("bash")
        .arg(nodetopo_controlplane::repo_root().join("e2e/node-tools/pack-image.sh"))
        .args(["--name", TESTNODE_IMAGE, "--out"])
        .arg(&out)
        .args(["--entrypoint", "/nodetopo-testnode", "--cmd", "pause"])
        .arg(format!("{}:/nodetopo-testnode", testnode.display()))
        .stdin(Stdio::null())
        .output()
        .context("running pack-image.sh")?;
    if !o.status.success() {
        bail!("pack-image.sh: {}", String::from_utf8_lossy(&o.stderr));
    }
    Ok(out)
}

#[test]
fn revert_and_kills_on_local_node() -> Result<()> {
    if let Some(why) = node::missing() {
        node::skip_or_fail(&why);
        return Ok(());
    }
    let Some(agent) = workspace_binary("nodetopo-agent") else {
        return Ok(());
    };
    let started = Instant::now();
    let kubelet =
        nodetopo_testkit::build_once("e2e/kubelet-standalone/build.sh", &[], "the kubelet")
            .map_err(anyhow::Error::msg)?;
    let testnode = nodetopo_testkit::build_once("e2e/node-tools/build.sh", &[], "node tools")
        .map_err(anyhow::Error::msg)?;
    let Some(cp) = ControlPlane::start()? else {
        return Ok(());
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let work = tempfile::tempdir()?;
    let image = pack_testnode(work.path(), &testnode)?;
    let node = rt.block_on(LocalNode::start(
        &cp,
        &kubelet,
        &NodeOptions {
            reserved_cpus: "0".into(),
            kubelet_config: String::new(),
            images: vec![image],
            kubelet_flags: Vec::new(),
        },
    ))?;
    let sup = Supervisor {
        listener: TcpListener::bind("127.0.0.1:0")?,
        kill_at: Mutex::new(None),
        agent: Mutex::new(None),
        hooks: Mutex::new(Vec::new()),
        done: AtomicBool::new(false),
    };
    let host = Host {
        cp: &cp,
        node: &node,
        agent,
        testnode,
        sup: &sup,
        work: work.path().to_path_buf(),
    };
    let outcome = std::thread::scope(|s| {
        s.spawn(|| sup.serve(&node));
        let r = rt.block_on(scenario(&host));
        sup.stop();
        r
    });
    if outcome.is_err() {
        eprintln!("{}", node.log_tails(60));
    }
    // No agent left running (a failed case may have left one).
    if let Ok(mut g) = sup.agent.lock() {
        if let Some(mut c) = g.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    drop(host);
    let teardown = node.stop();
    let checks = outcome?;
    teardown?;
    let _ = writeln!(
        std::io::stderr(),
        "[revert-node] {checks} checks passed; the node left nothing behind; {:?} in all",
        started.elapsed()
    );
    Ok(())
}
