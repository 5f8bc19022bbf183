//! The end-to-end scenario (`nodetopo_e2e::scenario`) on a real node on this machine: the
//! real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), the real
//! kubelet v1.37.2 with containerd and runc, the agent and operator images packed from the
//! release binaries without a registry, and the real chart installed by `helm`.
//!
//! Runs where the machine can host the node (root, containerd, runc, CNI plugins, cgroup v1
//! with cpuset, Go); elsewhere it prints one `SKIPPED:` line naming what is missing, or fails
//! with `NODETOPO_REQUIRE_NODE=1` (set by `.ci/run`).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use nodetopo_controlplane::node::{self, free_port, LocalNode, NodeOptions, TESTNODE_IMAGE};
use nodetopo_controlplane::server::tail;
use nodetopo_controlplane::{tools, workspace_binary, ControlPlane, LOCAL_NODE};
use nodetopo_e2e::mounts;
use nodetopo_e2e::pods::Workload;
use nodetopo_e2e::scenario::{KubeletRecords, Provider, Scenario, Settings, TestDevice};
use nodetopo_engine::CpuSet;
use serde_json::{json, Value};

const RELEASE: &str = "nodetopo";
const RELEASE_NS: &str = "nodetopo-system";
const NODE_LABEL: (&str, &str) = ("nodetopo.io/e2e", "true");
const DEVICE_RESOURCE: &str = "nodetopo.io/testdev";
const AGENT_IMAGE: &str = "docker.io/nodetopo/nodetopo-agent";
const OPERATOR_IMAGE: &str = "docker.io/nodetopo/nodetopo-operator";
const IMAGE_TAG: &str = "e2e";
/// On the kubelet's command line, against `topologyManagerScope: pod` in its config file.
const KUBELET_TM_FLAG: &str = "--topology-manager-scope=container";

/// What the scenario needs from the local node.
struct Local<'a> {
    cp: &'a ControlPlane,
    node: &'a LocalNode,
    helm: PathBuf,
    testnode: PathBuf,
    devices: BTreeMap<String, u64>,
    /// Set: the supervisor answers the next `/start` with a failure, without starting.
    fail_start: &'a std::sync::atomic::AtomicBool,
}

fn text_of(out: std::process::Output, what: &str) -> Result<String> {
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `containerd://<id>` of a container (app or init) of a pod.
fn container_id(pod: &Pod, container: &str) -> Result<String> {
    let status = pod.status.as_ref().context("pod without status")?;
    let all = status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten());
    let found = all
        .into_iter()
        .find(|c| c.name == container)
        .and_then(|c| c.container_id.clone())
        .with_context(|| format!("{}: no container id for {container} yet", pod.name_any()))?;
    Ok(found
        .strip_prefix("containerd://")
        .unwrap_or(&found)
        .to_string())
}

impl Provider for Local<'_> {
    fn name(&self) -> &'static str {
        "local-node"
    }

    fn workload(&self) -> Workload {
        Workload {
            image: TESTNODE_IMAGE.into(),
            pull_policy: "Never".into(),
            run: vec!["/nodetopo-testnode".into(), "workload".into()],
            print_and_exit: vec!["/nodetopo-testnode".into(), "affinity".into()],
        }
    }

    fn test_device(&self) -> Option<TestDevice> {
        Some(TestDevice {
            resource: DEVICE_RESOURCE.into(),
            numa_of: self.devices.clone(),
        })
    }

    fn nrt(&self) -> bool {
        true
    }

    async fn container_cpuset(&self, pod: &Pod, container: &str) -> Result<CpuSet> {
        let id = container_id(pod, container)?;
        let uid = pod.uid().context("pod without uid")?;
        let dir = self
            .node
            .container_cgroup("cpuset", &uid, &id)
            .with_context(|| {
                format!("no cpuset cgroup for {}/{container} ({id})", pod.name_any())
            })?;
        let file = dir.join("cpuset.cpus");
        let text =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        CpuSet::parse(text.trim()).with_context(|| format!("{}: {text:?}", file.display()))
    }

    async fn container_log(&self, pod: &Pod, container: &str) -> Result<String> {
        // The kubelet's CRI log: /var/log/pods/<ns>_<name>_<uid>/<container>/<restart>.log,
        // lines "<time> stdout F <text>".
        let uid = pod.uid().context("pod without uid")?;
        let dir = self.node.dir().join("var-log/pods").join(format!(
            "{}_{}_{uid}",
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        ));
        let file = dir.join(container).join("0.log");
        let text =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        Ok(text
            .lines()
            .map(|l| l.splitn(4, ' ').nth(3).unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n"))
    }

    async fn kubelet_records(&self, node: &str) -> Result<Option<KubeletRecords>> {
        if node != LOCAL_NODE {
            bail!("the local provider has one node, {LOCAL_NODE}, not {node}");
        }
        let kubelet = self.node.var_lib().join("kubelet");
        let state = kubelet.join("cpu_manager_state");
        let text =
            fs::read_to_string(&state).with_context(|| format!("reading {}", state.display()))?;
        let json: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: {text}", state.display()))?;
        let cpus = |v: &Value| -> Result<CpuSet> {
            let s = v.as_str().context("a cpuset string")?;
            CpuSet::parse(s).with_context(|| format!("cpuset {s:?}"))
        };
        let mut records = KubeletRecords {
            checkpoint_default: cpus(&json["defaultCpuSet"])?,
            ..KubeletRecords::default()
        };
        if let Some(entries) = json["entries"].as_object() {
            for (uid, containers) in entries {
                for (name, set) in containers.as_object().into_iter().flatten() {
                    records
                        .checkpoint
                        .insert((uid.clone(), name.clone()), cpus(set)?);
                }
            }
        }
        let socket = kubelet.join("pod-resources/kubelet.sock");
        let out = Command::new(&self.testnode)
            .arg("podresources")
            .arg("--socket")
            .arg(&socket)
            .output()
            .context("running nodetopo-testnode podresources")?;
        let answer: Value = serde_json::from_str(&text_of(out, "podresources List")?)
            .context("the podresources answer")?;
        for pod in answer["pods"].as_array().into_iter().flatten() {
            let key = format!(
                "{}/{}",
                pod["namespace"].as_str().unwrap_or_default(),
                pod["name"].as_str().unwrap_or_default()
            );
            for c in pod["containers"].as_array().into_iter().flatten() {
                let ids = c["cpu_ids"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|v| v.as_u64().map(|n| n as usize).context("a CPU id"))
                    .collect::<Result<CpuSet>>()?;
                let mut devices = BTreeMap::new();
                for d in c["devices"].as_array().into_iter().flatten() {
                    let ids: Vec<String> = d["ids"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect();
                    devices
                        .entry(d["resource"].as_str().unwrap_or_default().to_string())
                        .or_insert_with(Vec::new)
                        .extend(ids);
                }
                let name = c["name"].as_str().unwrap_or_default().to_string();
                records
                    .pod_resources
                    .insert((key.clone(), name), (ids, devices));
            }
        }
        Ok(Some(records))
    }

    async fn restart_kubelet(&self, node: &str) -> Result<bool> {
        if node != LOCAL_NODE {
            bail!("the local provider has one node, {LOCAL_NODE}, not {node}");
        }
        let nodes: Api<Node> = Api::all(self.cp.client());
        let heartbeat = |n: &Node| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .map(|c| (c.status.clone(), c.last_heartbeat_time.clone()))
        };
        let before = heartbeat(&nodes.get(LOCAL_NODE).await?);
        let listed: Vec<(String, String)> = self
            .kubelet_records(node)
            .await?
            .map(|r| r.pod_resources.into_keys().collect())
            .unwrap_or_default();
        tokio::task::block_in_place(|| -> Result<()> {
            self.node.stop_kubelet()?;
            self.node.start_kubelet()?;
            Ok(())
        })?;
        // Ready again, as posted by the new kubelet (a newer heartbeat).
        let t = Instant::now();
        loop {
            let now = heartbeat(&nodes.get(LOCAL_NODE).await?);
            if let Some((status, beat)) = &now {
                // ...and its PodResources answer lists every container it listed before (a
                // restarted kubelet serves the socket before it has re-synced its pods).
                if status == "True" && Some(beat) != before.as_ref().map(|b| &b.1) {
                    let now_listed = self
                        .kubelet_records(node)
                        .await
                        .ok()
                        .flatten()
                        .map(|r| r.pod_resources)
                        .unwrap_or_default();
                    if listed.iter().all(|k| now_listed.contains_key(k)) {
                        return Ok(true);
                    }
                }
            }
            if t.elapsed() > Duration::from_secs(90) {
                bail!(
                    "Node {LOCAL_NODE} not Ready with a new heartbeat 90 s after the kubelet restart: {now:?}\n{}",
                    self.node.log_tails(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn actuation(&self) -> bool {
        true
    }

    fn kubelet_tm_flag(&self) -> Option<&'static str> {
        Some(KUBELET_TM_FLAG)
    }

    fn fail_next_kubelet_start(&self) -> bool {
        self.fail_start
            .store(true, std::sync::atomic::Ordering::SeqCst);
        true
    }

    async fn kubelet_configz(&self, node: &str) -> Result<Option<Value>> {
        if node != LOCAL_NODE {
            bail!("the local provider has one node, {LOCAL_NODE}, not {node}");
        }
        // The kubelet's port serves HTTPS with its self-signed certificate; anonymous
        // requests are allowed on this node.
        let url = format!("https://127.0.0.1:{}/configz", self.node.kubelet_port);
        let out = Command::new("curl")
            .args(["-sSfk", "--max-time", "10", &url])
            .output()
            .context("running curl")?;
        let body: Value = serde_json::from_str(&text_of(out, &format!("GET {url}"))?)
            .with_context(|| format!("the answer of {url}"))?;
        Ok(Some(body["kubeletconfig"].clone()))
    }

    async fn checks_while_pinned(
        &self,
        client: &kube::Client,
        namespace: &str,
        node: &str,
    ) -> Result<usize> {
        admission_explained(client, namespace, node).await
    }

    async fn helm_uninstall(&self) -> Result<()> {
        // Before the agent goes: the chart's mounts as the running agent has them (issue 26).
        for fact in agent_mounts()? {
            println!("[local-node] agent mounts: {fact}");
        }
        tools::run(
            &self.helm,
            &[
                "uninstall",
                RELEASE,
                "--namespace",
                RELEASE_NS,
                "--wait",
                "--timeout",
                "180s",
            ],
            self.cp.kubeconfig(),
        )?;
        Ok(())
    }
}

/// The chart's default `agent.actuation.hideKubeletPaths`.
const HIDDEN_KUBELET_PATHS: [&str; 6] = [
    "pods",
    "pki",
    "plugins",
    "plugins_registry",
    "device-plugins",
    "pod-resources",
];

/// The running agent's mounts, checked from the host's `/proc` against the kubelet's own
/// view of its directory ([`mounts::check_agent`]).
fn agent_mounts() -> Result<Vec<String>> {
    let proc_root = Path::new("/proc");
    // The chart's agent (other tests on the machine may run `nodetopo-agent run --local`).
    let agents = mounts::pids(proc_root, |a| {
        mounts::program_is(a, "nodetopo-agent")
            && a.get(1).is_some_and(|s| s == "run")
            && a.iter().any(|s| s == "--sysfs-root=/host/sys")
            && a.iter().any(|s| s == "--actuation")
    })?;
    let [agent] = agents.as_slice() else {
        bail!("expected one `nodetopo-agent run` process, found {agents:?}");
    };
    let kubelets = mounts::pids(proc_root, |a| mounts::program_is(a, "kubelet"))?;
    let [kubelet] = kubelets.as_slice() else {
        bail!("expected one kubelet process, found {kubelets:?}");
    };
    let argv = mounts::argv(proc_root, &kubelet.to_string()).context("the kubelet's argv")?;
    let root_dir = argv
        .iter()
        .find_map(|a| a.strip_prefix("--root-dir="))
        .unwrap_or("/var/lib/kubelet");
    let kubelet_pods = proc_root
        .join(kubelet.to_string())
        .join("root")
        .join(root_dir.trim_start_matches('/'))
        .join("pods");
    mounts::check_agent(proc_root, *agent, &HIDDEN_KUBELET_PATHS, &kubelet_pods)
}

/// Serves the agent's kubelet hooks (`nodetopo-testnode kubelet-ctl URL`): `GET /stop`,
/// `/start` (returns once the kubelet's healthz answers) and `/health`, one at a time. The
/// kubelet runs under the test, outside the agent's container: this is what a node's service
/// manager does for the chart's `command` restarter.
async fn supervise(
    listener: &tokio::net::TcpListener,
    node: &LocalNode,
    starts: &std::sync::atomic::AtomicUsize,
    fail_start: &std::sync::atomic::AtomicBool,
) -> std::convert::Infallible {
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            continue;
        };
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
            if conn.readable().await.is_err() {
                break;
            }
            match conn.try_read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => break,
            }
        }
        let request = String::from_utf8_lossy(&buf);
        let path = request
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let answer: Result<String, String> = tokio::task::block_in_place(|| {
            match path.as_str() {
            "/stop" => node
                .stop_kubelet()
                .map(|()| "stopped".into())
                .map_err(|e| e.to_string()),
            "/start" if fail_start.swap(false, std::sync::atomic::Ordering::SeqCst) => {
                Err("refused by the test: this start fails, as a kubelet that refuses its configuration exits".into())
            }
            "/start" => {
                starts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                node.start_kubelet()
                    .map(|()| "started, healthz ok".into())
                    .map_err(|e| e.to_string())
            }
            "/health" if node.kubelet_healthy() => Ok("ok".into()),
            "/health" => Err("the kubelet's healthz does not answer ok".into()),
            other => Err(format!("unknown hook {other:?}")),
        }
        });
        println!("[local-node] kubelet hook {path}: {answer:?}");
        let (status, body) = match answer {
            Ok(b) => ("200 OK", b),
            Err(e) => ("500 Internal Server Error", e),
        };
        let reply = format!("HTTP/1.0 {status}\r\nContent-Type: text/plain\r\n\r\n{body}\n");
        let mut sent = 0;
        while sent < reply.len() && conn.writable().await.is_ok() {
            match conn.try_write(&reply.as_bytes()[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => break,
            }
        }
    }
}

/// The end of every container log of the pods in `namespace` (the agent's and operator's).
fn pod_logs(node: &LocalNode, namespace: &str, lines: usize) -> String {
    let mut out = String::new();
    let Ok(pods) = fs::read_dir(node.dir().join("var-log/pods")) else {
        return "no pod logs".into();
    };
    for pod in pods.flatten() {
        if !pod
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("{namespace}_"))
        {
            continue;
        }
        for container in fs::read_dir(pod.path()).into_iter().flatten().flatten() {
            for log in fs::read_dir(container.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                out.push_str(&format!(
                    "--- {} ---\n{}\n",
                    log.path().display(),
                    tail(&log.path(), lines)
                ));
            }
        }
    }
    out
}

/// Packs an image tarball with `e2e/node-tools/pack-image.sh`.
fn pack(
    out_dir: &Path,
    name: &str,
    entrypoint: &str,
    cmd: &[&str],
    user: Option<&str>,
    files: &[(PathBuf, &str)],
) -> Result<PathBuf> {
    let out = out_dir.join(format!(
        "{}.tar",
        name.rsplit('/').next().unwrap_or(name).replace(':', "_")
    ));
    let mut c = Command::new("bash");
    c.arg(nodetopo_controlplane::repo_root().join("e2e/node-tools/pack-image.sh"))
        .args(["--name", name, "--out"])
        .arg(&out)
        .args(["--entrypoint", entrypoint]);
    for a in cmd {
        c.args(["--cmd", a]);
    }
    if let Some(u) = user {
        c.args(["--user", u]);
    }
    for (src, dest) in files {
        c.arg(format!("{}:{dest}", src.display()));
    }
    text_of(
        c.stdin(Stdio::null())
            .output()
            .context("running pack-image.sh")?,
        &format!("packing {name}"),
    )?;
    Ok(out)
}

/// The first NUMA node of this machine (the test devices sit on it).
fn first_numa_node() -> u64 {
    fs::read_to_string("/sys/devices/system/node/online")
        .ok()
        .and_then(|s| CpuSet::parse(s.trim()).ok())
        .and_then(|s| s.iter().next())
        .map_or(0, |n| n as u64)
}

/// Kills the device plugin when the test ends, however it ends.
struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scenario_on_local_node() -> Result<()> {
    if let Some(why) = node::missing() {
        node::skip_or_fail(&why);
        return Ok(());
    }
    let started = Instant::now();
    let (Some(agent), Some(operator)) = (
        workspace_binary("nodetopo-agent"),
        workspace_binary("nodetopo-operator"),
    ) else {
        return Ok(());
    };
    let kubelet =
        nodetopo_testkit::build_once("e2e/kubelet-standalone/build.sh", &[], "the kubelet")
            .map_err(anyhow::Error::msg)?;
    let testnode = nodetopo_testkit::build_once("e2e/node-tools/build.sh", &[], "node tools")
        .map_err(anyhow::Error::msg)?;
    let tools = tools::tools()?;
    let Some(cp) = ControlPlane::start()? else {
        return Ok(());
    };
    let controllers = cp.start_controllers()?;

    let images = tempfile::tempdir()?;
    let testnode_tar = pack(
        images.path(),
        TESTNODE_IMAGE,
        "/nodetopo-testnode",
        &["pause"],
        None,
        &[(testnode.clone(), "/nodetopo-testnode")],
    )?;
    let agent_tar = pack(
        images.path(),
        &format!("{AGENT_IMAGE}:{IMAGE_TAG}"),
        "/usr/local/bin/nodetopo-agent",
        &["run"],
        Some("65532:65532"),
        // The test node's kubelet-ctl: the agent's stop/start/health hooks (restart=command).
        &[
            (agent, "/usr/local/bin/nodetopo-agent"),
            (testnode.clone(), "/nodetopo-testnode"),
        ],
    )?;
    let operator_tar = pack(
        images.path(),
        &format!("{OPERATOR_IMAGE}:{IMAGE_TAG}"),
        "/usr/local/bin/nodetopo-operator",
        &[],
        Some("65532:65532"),
        &[(operator, "/usr/local/bin/nodetopo-operator")],
    )?;
    println!(
        "[local-node] tools and images ready after {:?}",
        started.elapsed()
    );

    let node = LocalNode::start(
        &cp,
        &kubelet,
        &NodeOptions {
            reserved_cpus: "0".into(),
            // The files say scope pod, the command line container (every policy of the
            // scenario says container too, so actuation's flag check lets it apply): the
            // kubelet runs container, and the NodeResourceTopology must say so, naming its
            // command line as the source.
            kubelet_config: "topologyManagerScope: pod\n".into(),
            kubelet_flags: vec![KUBELET_TM_FLAG.into()],
            images: vec![testnode_tar, agent_tar, operator_tar],
        },
    )
    .await?;
    println!(
        "[local-node] node {LOCAL_NODE} Ready after {:?}",
        started.elapsed()
    );
    let outcome = run(&cp, &node, &tools.helm, &testnode).await;
    if outcome.is_err() {
        eprintln!("{}\n{}", node.log_tails(60), controllers.log_tails(30));
        eprintln!("{}", pod_logs(&node, RELEASE_NS, 60));
    }
    drop(controllers);
    let teardown = node.stop();
    let checks = outcome?;
    teardown?;
    // The stderr handle, not `println!`: the harness hides a passing test's captured output,
    // and CI's log should say what ran.
    let _ = writeln!(
        std::io::stderr(),
        "[local-node] {checks} checks passed; the node left nothing behind (processes, cgroups, mounts, interfaces, sysctls, iptables); {:?} in all",
        started.elapsed()
    );
    Ok(())
}

async fn run(cp: &ControlPlane, node: &LocalNode, helm: &Path, testnode: &Path) -> Result<usize> {
    let client = cp.client();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            LOCAL_NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {NODE_LABEL.0: NODE_LABEL.1}}})),
        )
        .await
        .context("labelling the node")?;

    let numa = first_numa_node();
    let devices: BTreeMap<String, u64> = (0..2).map(|i| (format!("testdev{i}"), numa)).collect();
    let spec = devices
        .iter()
        .map(|(id, n)| format!("{id}:{n}"))
        .collect::<Vec<_>>()
        .join(",");
    let log = fs::File::create(node.dir().join("deviceplugin.log"))?;
    let _plugin = Plugin(
        Command::new(testnode)
            .args([
                "deviceplugin",
                "--resource",
                DEVICE_RESOURCE,
                "--devices",
                &spec,
            ])
            .arg("--plugin-dir")
            .arg(node.var_lib().join("kubelet/device-plugins"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the test device plugin")?,
    );

    // No CPU requests for the operator and the agent: with 2 CPUs and 1 reserved the node
    // has 1000m allocatable, and the chart's 60m would leave no whole CPU to pin (null
    // removes the chart's default).
    let no_cpu_request = json!({"requests": {"cpu": null}});
    let supervisor = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the kubelet supervisor")?;
    println!(
        "[local-node] kubelet supervisor on {}",
        supervisor.local_addr()?
    );
    let hook = |verb: &str| -> Result<String> {
        Ok(format!(
            "/nodetopo-testnode kubelet-ctl http://{}/{verb}",
            supervisor.local_addr()?
        ))
    };
    let actuation = json!({
        "enabled": true,
        "restart": "command",
        "kubeletConfig": "/var/lib/kubelet/config.yaml",
        "kubeletConfigDir": "/var/lib/kubelet/conf.d",
        "verifySeconds": 90,
        "stopCommand": hook("stop")?,
        "startCommand": hook("start")?,
        "healthCommand": hook("health")?,
    });
    let values = node.dir().join("values.yaml");
    fs::write(
        &values,
        serde_json::to_string_pretty(&json!({
            "apiServer": {"host": "127.0.0.1", "port": cp.port().to_string()},
            "operator": {
                "replicas": 1,
                "hostNetwork": true,
                "resources": no_cpu_request,
                "metricsPort": free_port()?,
                "image": {"repository": OPERATOR_IMAGE, "tag": IMAGE_TAG, "pullPolicy": "Never"},
            },
            "agent": {
                "hostNetwork": true,
                "resources": no_cpu_request,
                "metricsPort": free_port()?,
                "image": {"repository": AGENT_IMAGE, "tag": IMAGE_TAG, "pullPolicy": "Never"},
                "actuation": actuation,
            },
            "nrt": {"enabled": true, "installCRD": true},
        }))?,
    )?;
    let values = values.display().to_string();
    tools::run(
        helm,
        &[
            "install",
            RELEASE,
            "charts/nodetopo",
            "--namespace",
            RELEASE_NS,
            "--create-namespace",
            "--values",
            &values,
        ],
        cp.kubeconfig(),
    )?;
    let fail_start = std::sync::atomic::AtomicBool::new(false);
    let provider = Local {
        cp,
        node,
        helm: helm.to_path_buf(),
        testnode: testnode.to_path_buf(),
        devices,
        fail_start: &fail_start,
    };
    let settings = Settings {
        release_namespace: RELEASE_NS.into(),
        release: RELEASE.into(),
        pod_namespace: "nodetopo-e2e-pods".into(),
        node_label: (NODE_LABEL.0.into(), NODE_LABEL.1.into()),
        cpus: None,
        timeout: Duration::from_secs(120),
    };
    let hook_starts = std::sync::atomic::AtomicUsize::new(0);
    // Before the scenario: the kubelet still runs the node's own static policy.
    let audit_checks = cpuset_audit_check(client.clone(), node).await?;
    let scenario = async {
        Scenario::connect(&provider, client, settings)
            .await?
            .run()
            .await
    };
    let checks = tokio::select! {
        checks = scenario => checks?,
        never = supervise(&supervisor, node, &hook_starts, &fail_start) => match never {},
    };
    println!(
        "[local-node] the agent started the kubelet {} time(s) through its command hooks",
        hook_starts.load(std::sync::atomic::Ordering::SeqCst)
    );
    Ok(checks + audit_checks)
}

/// The cpuset audit on the real node (issue 30; docs/audit.md): every running container's
/// cgroup (cgroup v1 cpuset hierarchy, the kubelet's cgroupfs driver under its cgroupRoot,
/// containerd names) against the kubelet's own checkpoint and configuration. A healthy node
/// shows zero drift; a container whose `cpuset.cpus` this check rewrites behind the kubelet
/// is reported `ChangedOutsideKubelet`; the file is restored before the check returns.
/// Returns the number of checks.
async fn cpuset_audit_check(client: kube::Client, node: &LocalNode) -> Result<usize> {
    use nodetopo_kubelet::audit::{self, inputs, DriftReason, Expected};
    use nodetopo_kubelet::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

    let layout = CgroupLayout {
        root: "/sys/fs/cgroup".into(),
        version: CgroupVersion::V1,
        driver: CgroupDriver::Cgroupfs,
        kubelet_root: node.cgroup_root(),
    };
    let kubelet_dir = node.var_lib().join("kubelet");
    let pods_api: Api<Pod> = Api::all(client);
    let read = || async {
        let list = pods_api
            .list(&kube::api::ListParams::default().fields(&format!("spec.nodeName={LOCAL_NODE}")))
            .await
            .context("listing the node's pods")?;
        let items: Vec<Value> = list
            .items
            .iter()
            .map(|p| {
                let mut v = serde_json::to_value(p)?;
                v["kind"] = json!("Pod");
                Ok(v)
            })
            .collect::<Result<_>>()?;
        let text = serde_json::to_string(&json!({"kind": "List", "items": items}))?;
        let pods = inputs::pods_from_yaml(&text).map_err(anyhow::Error::msg)?;
        let cp = nodetopo_kubelet::cpu_checkpoint::read(&kubelet_dir.join("cpu_manager_state"))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .context("no kubelet cpu_manager_state")?;
        let config = nodetopo_kubelet::config::read_effective(
            &kubelet_dir.join("config.yaml"),
            Some(&kubelet_dir.join("conf.d"))
                .filter(|d| d.is_dir())
                .map(|d| d.as_path()),
        )?;
        let expected = Expected {
            kubelet: Some(inputs::kubelet_cpus(&cp)),
            reserved: config.reserved_system_cpus,
            ..Default::default()
        };
        anyhow::Ok((pods.clone(), audit::run(&layout, &pods, &expected)))
    };

    // Healthy: zero drift (the kubelet settles shared containers on its 10 s reconcile).
    let deadline = Instant::now() + Duration::from_secs(60);
    let (pods, report) = loop {
        let (pods, report) = read().await?;
        if report.drift.is_empty() && report.unreadable.is_empty() && report.checked_containers > 0
        {
            break (pods, report);
        }
        if Instant::now() > deadline {
            bail!("the healthy node's audit is not clean after 60 s: {report:#?}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    println!(
        "[local-node] cpuset audit: {} running containers, zero drift",
        report.checked_containers
    );

    // Broken: one shared-pool container's cpuset rewritten behind the kubelet.
    let (target, container, dir) = pods
        .iter()
        .filter(|p| p.pod.starts_with(&format!("{RELEASE_NS}/")))
        .flat_map(|p| p.containers.iter().map(move |c| (p, c)))
        .find_map(|(p, c)| {
            let id = c.id.as_ref()?;
            let dir = layout.container_dir(&p.uid, p.qos, id).ok()?;
            Some((p.clone(), c.name.clone(), dir))
        })
        .context("no running container of the release to change")?;
    let file = dir.join("cpuset.cpus");
    let original =
        fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let set = CpuSet::parse(original.trim())
        .with_context(|| format!("{}: {original:?}", file.display()))?;
    let Some(last) = set.last().filter(|_| set.len() >= 2) else {
        bail!(
            "{}: {original:?} has fewer than 2 CPUs; nothing to shrink it to",
            file.display()
        );
    };
    fs::write(&file, format!("{last}\n")).with_context(|| format!("writing {}", file.display()))?;
    let broken = read().await;
    // Restore before judging, whatever the read gave.
    let restored =
        fs::write(&file, &original).with_context(|| format!("restoring {}", file.display()));
    let (_, broken) = broken?;
    restored?;
    let found: Vec<_> = broken
        .drift
        .iter()
        .filter(|d| d.pod_uid == target.uid && d.container == container)
        .map(|d| (d.reason, d.expected.clone(), d.actual.clone()))
        .collect();
    let want = vec![(
        DriftReason::ChangedOutsideKubelet,
        Some(set.to_string()),
        Some(last.to_string()),
    )];
    if found != want {
        bail!(
            "{}/{container}: cpuset {set} rewritten to {last} behind the kubelet; expected {want:?}, the audit found {found:?} (all drift: {:#?})",
            target.pod,
            broken.drift
        );
    }
    println!(
        "[local-node] cpuset audit: {}/{container} rewritten to {last} behind the kubelet is reported ChangedOutsideKubelet; restored to {}",
        target.pod,
        original.trim()
    );
    Ok(2)
}

/// Issue 30, "admission failures explained": a Guaranteed pod asking one whole CPU more than
/// the node has free (the pinned pod holds the rest; topology manager `restricted`), bound
/// past the scheduler. The real kubelet fails it with `TopologyAffinityError` (its topology
/// manager admit handler runs before its resource-fit check); the agent replays it and
/// publishes the explanation in `status.rejections` (agreeing with the kubelet, with the
/// CPU hints, the merge and the free CPUs) and as an `AdmissionExplained` Warning Event on
/// the Pod. The pod is deleted at the end and its rejection leaves the status.
async fn admission_explained(client: &kube::Client, namespace: &str, node: &str) -> Result<usize> {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use kube::api::{DeleteParams, ListParams, PostParams};
    use nodetopo_crds::NodeTopology;
    use nodetopo_e2e::wait::{poll_until, Progress};
    let topologies: Api<NodeTopology> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let events: Api<K8sEvent> = Api::namespaced(client.clone(), namespace);
    let timeout = Duration::from_secs(120);
    let every = Duration::from_millis(500);
    let mut checks = 0;
    let status = topologies
        .get_status(node)
        .await?
        .status
        .context("NodeTopology without status")?;
    let free = CpuSet::parse(&status.pools.context("no pools")?.free)?.len() as u64;
    let want = free + 1;
    let name = "explain-refused";
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            // Past the scheduler, which would keep it Pending: the node has no allocatable
            // CPU left for it.
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{
                "name": "app",
                "image": TESTNODE_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/nodetopo-testnode", "pause"],
                "resources": {
                    "requests": {"cpu": want.to_string(), "memory": "32Mi"},
                    "limits": {"cpu": want.to_string(), "memory": "32Mi"},
                },
            }],
        },
    }))?;
    let uid = pods
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating pod {name}"))?
        .uid()
        .context("created pod without uid")?;
    let (reason, message) = poll_until(
        &format!("{namespace}/{name} refused by the kubelet"),
        timeout,
        every,
        || {
            let pods = pods.clone();
            async move {
                let p = match pods.get(name).await {
                    Ok(p) => p,
                    Err(e) => return Progress::Pending(e.to_string()),
                };
                let s = p.status.unwrap_or_default();
                match s.phase.as_deref() {
                    Some("Failed") => Progress::Done((
                        s.reason.unwrap_or_default(),
                        s.message.unwrap_or_default(),
                    )),
                    Some("Running" | "Succeeded") => {
                        Progress::Failed(format!("the kubelet admitted it: {:?}", s.phase))
                    }
                    other => Progress::Pending(format!("phase {other:?}")),
                }
            }
        },
    )
    .await?;
    if reason != "TopologyAffinityError" {
        bail!("{name}: the kubelet refused it with {reason:?} ({message}), want TopologyAffinityError");
    }
    checks += 1;
    let rejection = poll_until(
        &format!("{node}: status.rejections explains {name}"),
        timeout,
        every,
        || {
            let topologies = topologies.clone();
            let uid = uid.clone();
            async move {
                let nt = match topologies.get_status(node).await {
                    Ok(nt) => nt,
                    Err(e) => return Progress::Pending(e.to_string()),
                };
                let found = nt
                    .status
                    .unwrap_or_default()
                    .rejections
                    .into_iter()
                    .find(|r| r.pod_uid == uid && r.by_kubelet);
                match found {
                    Some(r) => Progress::Done(r),
                    None => Progress::Pending("no kubelet rejection for the pod yet".into()),
                }
            }
        },
    )
    .await?;
    println!(
        "[local-node] explanation of {namespace}/{name}: {}",
        serde_json::to_string(&rejection)?
    );
    let e = rejection
        .explanation
        .as_ref()
        .context("rejection without explanation")?;
    let cpu_hints = e
        .providers
        .iter()
        .find(|p| p.provider == "cpu")
        .and_then(|p| p.hints.clone());
    let facts = [
        (
            rejection.reason == "TopologyAffinityError",
            "the kubelet's reason",
        ),
        (rejection.message == message, "the kubelet's message"),
        (
            e.agreement == nodetopo_engine::report::Agreement::Agree,
            "agreement Agree",
        ),
        (
            e.replay_reason == "TopologyAffinityError",
            "the replay's reason",
        ),
        (e.container == "app", "the container"),
        (
            e.requests.first().map(|r| r.exclusive_cpus) == Some(want),
            "the request's exclusive CPUs",
        ),
        (
            e.numa_nodes.iter().map(|n| n.free_cpu_count).sum::<u64>() == free,
            "free CPUs per NUMA node add up to the pools' free CPUs",
        ),
        (
            cpu_hints.as_ref().is_some_and(|h| h.is_empty()),
            "no CPU hint can be satisfied",
        ),
        (
            e.merged.as_ref().is_some_and(|m| !m.admit),
            "the merge refuses",
        ),
        (
            e.summary.contains("nodetopo's replay agrees"),
            "the summary's verdict",
        ),
    ];
    for (ok, what) in facts {
        if !ok {
            bail!(
                "{name}'s explanation: {what} wrong: {}",
                serde_json::to_string(&rejection)?
            );
        }
        checks += 1;
    }
    let event = poll_until(
        &format!("an AdmissionExplained Event on {namespace}/{name}"),
        timeout,
        every,
        || {
            let events = events.clone();
            let uid = uid.clone();
            async move {
                let list = match events.list(&ListParams::default()).await {
                    Ok(l) => l,
                    Err(e) => return Progress::Pending(e.to_string()),
                };
                let found = list.items.into_iter().find(|ev| {
                    ev.reason.as_deref() == Some("AdmissionExplained")
                        && ev.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(&uid)
                });
                match found {
                    Some(ev) => Progress::Done(ev),
                    None => Progress::Pending("no Event yet".into()),
                }
            }
        },
    )
    .await?;
    if event.type_.as_deref() != Some("Warning") || event.note.as_deref() != Some(&e.summary) {
        bail!(
            "the AdmissionExplained Event: type {:?}, note {:?}, want Warning with the summary {:?}",
            event.type_,
            event.note,
            e.summary
        );
    }
    checks += 1;
    println!(
        "[local-node] Event AdmissionExplained on {namespace}/{name}: {}",
        e.summary
    );
    pods.delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting pod {name}"))?;
    poll_until(
        &format!("{node}: {name}'s rejection gone with the pod"),
        timeout,
        every,
        || {
            let topologies = topologies.clone();
            let uid = uid.clone();
            async move {
                match topologies.get_status(node).await {
                    Ok(nt)
                        if nt
                            .status
                            .as_ref()
                            .is_some_and(|s| s.rejections.iter().any(|r| r.pod_uid == uid)) =>
                    {
                        Progress::Pending("still listed".into())
                    }
                    Ok(_) => Progress::Done(()),
                    Err(e) => Progress::Pending(e.to_string()),
                }
            }
        },
    )
    .await?;
    Ok(checks + 1)
}
