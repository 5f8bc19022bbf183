//! What the rollout tests share: processes, temp kubelet directories, node heartbeats,
//! polling and the objects they create.

pub(crate) use std::os::unix::fs::PermissionsExt;
pub(crate) use std::path::{Path, PathBuf};
pub(crate) use std::process::{Child, Command, Stdio};
pub(crate) use std::time::{Duration, Instant};

pub(crate) use k8s_openapi::api::core::v1::{Node, Pod};
pub(crate) use k8s_openapi::api::policy::v1::PodDisruptionBudget;
pub(crate) use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
pub(crate) use nodetopo_controlplane::{process, ControlPlane};
pub(crate) use nodetopo_crds::{NodeResourcePolicy, NodeTopology};
pub(crate) use serde_json::{json, Value};

pub(crate) const NS: &str = "rollout-test";
pub(crate) const PRESET: &str = "epyc-7303-2p";
pub(crate) const ANNOTATION: &str = nodetopo_crds::APPLY_GENERATION_ANNOTATION;

pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        process::kill_group(&mut self.0);
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub(crate) fn start_operator(cp: &ControlPlane, bin: &Path) -> Proc {
    let log = std::fs::File::create(cp.dir().join("operator.log")).expect("log");
    let mut cmd = Command::new(bin);
    cmd.args(["--no-leader-election", "--metrics-addr"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .env("KUBECONFIG", cp.kubeconfig())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    Proc(process::spawn(cmd, "nodetopo-operator").expect("starting the operator"))
}

/// A static-policy kubelet state file (checkpoint format v2, the kubelet's checksum):
/// `entries` maps pod UID -> container -> CPUs; the shared pool is every other CPU.
pub(crate) fn kubelet_state_text(entries: Value) -> String {
    let mut exclusive = nodetopo_engine::CpuSet::new();
    for containers in entries.as_object().into_iter().flat_map(|m| m.values()) {
        for cpus in containers.as_object().into_iter().flat_map(|m| m.values()) {
            let set = nodetopo_engine::CpuSet::parse(cpus.as_str().expect("cpus")).expect("set");
            exclusive = exclusive.union(&set);
        }
    }
    let all = nodetopo_engine::CpuSet::parse("0-63").expect("all");
    let state: nodetopo_engine::change::KubeletCpuState = json_of(json!({
        "policyName": "static",
        "defaultCpuSet": all.difference(&exclusive).to_string(),
        "entries": entries
    }));
    nodetopo_kubelet::cpu_checkpoint::render(
        &state,
        nodetopo_kubelet::cpu_checkpoint::CheckpointFormat::V2,
    )
}

/// A node's temp kubelet directory with the kubelet config, an empty drop-in directory, an
/// optional state file and the fake hooks; `fail_start_once` makes the first start fail;
/// `gated` makes the start wait until the test creates the file `release`. Like a kubelet
/// with the static policy, the start hook writes a fresh state file (no exclusive CPUs,
/// every CPU shared) when there is none, so the agent's verify step reads one after the
/// restart.
pub(crate) fn kubelet_dir(
    root: &Path,
    node: &str,
    state: Option<&str>,
    fail_start_once: bool,
    gated: bool,
) -> PathBuf {
    let d = root.join(format!("kubelet-{node}"));
    std::fs::create_dir_all(d.join("conf.d")).expect("kubelet dir");
    // The host's /proc as apply sees it: empty, so no kubelet process is checked whatever
    // runs on this machine (the real-kubelet tests check one).
    std::fs::create_dir_all(d.join("proc")).expect("kubelet dir");
    std::fs::write(
        d.join("config.yaml"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0,32\"\ntopologyManagerPolicy: none\n",
    )
    .expect("kubelet config");
    if let Some(s) = state {
        std::fs::write(d.join("cpu_manager_state"), s).expect("state");
    }
    std::fs::write(
        d.join("fresh_cpu_manager_state"),
        kubelet_state_text(json!({})),
    )
    .expect("fresh state");
    let log = d.join("hooks.log");
    let script = |name: &str, body: String| {
        let p = d.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}")).expect("hook");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    script("stop.sh", format!("echo stop >> {}\n", log.display()));
    let fail = if fail_start_once {
        format!(
            "if [ ! -e {m} ]; then touch {m}; echo start-failed >> {l}; echo 'kubelet.service: start failed' >&2; exit 1; fi\n",
            m = d.join("failed-once").display(),
            l = log.display()
        )
    } else {
        String::new()
    };
    let gate = if gated {
        format!(
            "i=0; while [ ! -e {r} ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done\n",
            r = d.join("release").display()
        )
    } else {
        String::new()
    };
    // The second between call and verdict keeps a node visibly in progress.
    let write_state = format!(
        "[ -e {s} ] || cp {f} {s}\n",
        s = d.join("cpu_manager_state").display(),
        f = d.join("fresh_cpu_manager_state").display()
    );
    // A test may drop `on-start.sh` in the directory: run by each start, after the above.
    let on_start = format!(
        "if [ -e {h} ]; then . {h}; fi\n",
        h = d.join("on-start.sh").display()
    );
    script(
        "start.sh",
        format!(
            "sleep 1\n{gate}{fail}{write_state}{on_start}echo start >> {}\n",
            log.display()
        ),
    );
    d
}

pub(crate) fn start_agent(cp: &ControlPlane, bin: &Path, node: &str, kdir: &Path) -> Proc {
    start_agent_with(cp, bin, node, kdir, &[])
}

pub(crate) fn start_agent_with(
    cp: &ControlPlane,
    bin: &Path,
    node: &str,
    kdir: &Path,
    extra: &[&str],
) -> Proc {
    let log = std::fs::File::create(cp.dir().join(format!("agent-{node}.log"))).expect("log");
    let mut cmd = Command::new(bin);
    cmd.args([
        "run",
        "--preset",
        PRESET,
        "--node-name",
        node,
        "--actuation",
    ])
    .arg("--state-dir")
    .arg(kdir.join("agent-state"))
    .arg("--kubelet-state")
    .arg(kdir.join("cpu_manager_state"))
    .arg("--kubelet-config")
    .arg(kdir.join("config.yaml"))
    .arg("--kubelet-config-dir")
    .arg(kdir.join("conf.d"))
    .arg("--host-proc")
    .arg(kdir.join("proc"))
    .args([
        "--kubelet-restart",
        "command",
        "--actuation-retry-seconds",
        "1",
    ])
    .arg("--kubelet-stop-command")
    .arg(kdir.join("stop.sh"))
    .arg("--kubelet-start-command")
    .arg(kdir.join("start.sh"))
    .args(extra)
    .env("KUBECONFIG", cp.kubeconfig())
    .env("RUST_LOG", "info")
    .stdin(Stdio::null())
    .stdout(log.try_clone().expect("log"))
    .stderr(log);
    Proc(process::spawn(cmd, "nodetopo-agent").expect("starting an agent"))
}

/// Plays the kubelets' node status updates: every half second each node not stopped gets
/// Ready True with lastHeartbeatTime now (whole seconds, the API's resolution) through the
/// status subresource. Dropping it ends the task.
pub(crate) struct Heartbeats {
    stopped: std::sync::Arc<tokio::sync::Mutex<std::collections::BTreeSet<String>>>,
    beats: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    nodes: Api<Node>,
    task: tokio::task::JoinHandle<()>,
}

pub(crate) fn now_seconds() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second())
        .expect("whole seconds")
        .to_string()
}

impl Heartbeats {
    pub(crate) fn start(nodes: &Api<Node>, names: &[&str]) -> Self {
        let stopped = std::sync::Arc::new(tokio::sync::Mutex::new(std::collections::BTreeSet::<
            String,
        >::new()));
        let beats = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let since = now_seconds();
        let task = tokio::spawn({
            let (stopped, beats, nodes) = (stopped.clone(), beats.clone(), nodes.clone());
            async move {
                loop {
                    {
                        let stopped = stopped.lock().await;
                        for n in names.iter().filter(|n| !stopped.contains(*n)) {
                            let patch = json!({"status": {"conditions": [{
                                "type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status (played by the test)",
                                "lastHeartbeatTime": now_seconds(), "lastTransitionTime": since}]}});
                            if nodes
                                .patch_status(n, &PatchParams::default(), &Patch::Merge(patch))
                                .await
                                .is_ok()
                            {
                                beats.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        });
        Heartbeats {
            stopped,
            beats,
            nodes: nodes.clone(),
            task,
        }
    }

    /// `node`'s kubelet stops posting (once it has posted at least once); the node lifecycle
    /// controller's verdict (Ready Unknown, the last heartbeat kept) is written as it would
    /// after its grace period.
    pub(crate) async fn stop(&self, node: &str) {
        let nodes = self.nodes.clone();
        wait_for(&format!("{node} has a heartbeat"), 30, || {
            let nodes = nodes.clone();
            async move {
                let n = nodes.get_status(node).await.map_err(|e| e.to_string())?;
                n.status
                    .and_then(|s| s.conditions)
                    .filter(|c| c.iter().any(|c| c.type_ == "Ready"))
                    .map(|_| ())
                    .ok_or_else(|| "no Ready condition yet".to_string())
            }
        })
        .await;
        let mut stopped = self.stopped.lock().await;
        stopped.insert(node.to_string());
        let n = self.nodes.get_status(node).await.expect("node");
        let beat = n
            .status
            .and_then(|s| s.conditions)
            .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_heartbeat_time)
            .expect("node had a heartbeat");
        let patch = json!({"status": {"conditions": [{
            "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": beat, "lastTransitionTime": now_seconds()}]}});
        self.nodes
            .patch_status(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("node NotReady");
    }

    pub(crate) fn count(&self) -> usize {
        self.beats.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) async fn wait_for<T, F, Fut>(what: &str, secs: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => {
                panic!("{what}: not reached after {secs}s; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The APIs the rollout tests use.
pub(crate) struct Apis {
    pub(crate) nodes: Api<Node>,
    pub(crate) policies: Api<NodeResourcePolicy>,
    pub(crate) ntopos: Api<NodeTopology>,
    pub(crate) pods: Api<Pod>,
}

impl Apis {
    pub(crate) fn of(cp: &ControlPlane) -> Self {
        let client = cp.client();
        Apis {
            nodes: Api::all(client.clone()),
            policies: Api::all(client.clone()),
            ntopos: Api::all(client.clone()),
            pods: Api::namespaced(client, NS),
        }
    }
}

/// Creates the Nodes `names`, labelled `pool: <pool>` when given.
pub(crate) async fn create_nodes(nodes: &Api<Node>, names: &[&str], pool: Option<&str>) {
    for n in names {
        let labels = pool.map(|p| json!({"pool": p})).unwrap_or(json!({}));
        nodes
            .create(
                &PostParams::default(),
                &json_of(json!({"metadata": {"name": n, "labels": labels}})),
            )
            .await
            .expect("create node");
    }
}

/// Asserts that `message` contains every one of `wants` (`what` names whose message it is).
pub(crate) fn assert_names_all(what: &str, message: &str, wants: &[&str]) {
    for want in wants {
        assert!(
            message.contains(want),
            "{what}: the message names {want:?}: {message}"
        );
    }
}

/// (status, reason, message) of the Applied condition for the object's current generation.
pub(crate) fn applied(nt: &NodeTopology) -> Option<(String, String, String)> {
    let c = nt
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Applied")?;
    (c.observed_generation == nt.metadata.generation)
        .then(|| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

pub(crate) fn marked(nt: &NodeTopology) -> bool {
    nt.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .is_some_and(|g| Some(g.clone()) == nt.metadata.generation.map(|g| g.to_string()))
}

pub(crate) fn name(nt: &NodeTopology) -> &str {
    nt.metadata.name.as_deref().unwrap_or_default()
}

pub(crate) fn json_of<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("object")
}

/// The control plane, the operator and agent binaries, CRDs installed and the test
/// namespace made; `None` when the environment cannot run them (skipped, said so).
pub(crate) async fn cluster() -> Option<(ControlPlane, PathBuf, PathBuf)> {
    let cp = match ControlPlane::start() {
        Ok(Some(cp)) => cp,
        Ok(None) => return None,
        Err(e) => panic!("control plane: {e}"),
    };
    let operator = nodetopo_controlplane::workspace_binary("nodetopo-operator")?;
    let agent = nodetopo_controlplane::workspace_binary("nodetopo-agent")?;
    cp.install_crds().await.expect("CRDs");
    cp.ensure_service_account(NS, "default")
        .await
        .expect("namespace");
    Some((cp, operator, agent))
}

pub(crate) fn rollout_policy(name: &str, pool: &str, rollout: Value) -> NodeResourcePolicy {
    json_of(
        json!({"apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeResourcePolicy",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"pool": pool}},
                 "cpuManager": {"policy": "static", "reservedSystemCPUs": "0-1,32-33"},
                 "topologyManager": {"policy": "best-effort"},
                 "rollout": rollout}}),
    )
}

/// (updated, pending, failed, Progressing status, reason, message) of a policy.
pub(crate) fn rollout_status(p: &NodeResourcePolicy) -> (i32, i32, i32, String, String, String) {
    let s = p.status.clone().unwrap_or_default();
    let (st, r, m) = s
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_default();
    (s.updated_nodes, s.pending_nodes, s.failed_nodes, st, r, m)
}

/// Creates pod `db` (2 exclusive CPUs, 1Gi) bound to `node` and marks it Running and Ready,
/// as its kubelet would report it; returns the pod's UID.
pub(crate) async fn running_db_pod(pods: &Api<Pod>, node: &str) -> String {
    let db: Pod = pods
        .create(
            &PostParams::default(),
            &json_of(json!({
                "metadata": {"name": "db", "namespace": NS, "labels": {"app": "db"}},
                "spec": {"nodeName": node, "containers": [{"name": "app", "image": "db:1",
                    "resources": {"requests": {"cpu": "2", "memory": "1Gi"},
                                  "limits": {"cpu": "2", "memory": "1Gi"}}}]}
            })),
        )
        .await
        .expect("pod db");
    let uid = db.metadata.uid.clone().expect("pod uid");
    pods.patch_status(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}})),
    )
    .await
    .expect("pod status");
    uid
}
