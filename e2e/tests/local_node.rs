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

#[path = "local_node/audit.rs"]
mod audit;
#[path = "local_node/explain.rs"]
mod explain;
#[path = "local_node/host.rs"]
mod host;
#[path = "local_node/provider.rs"]
mod provider;

use audit::cpuset_audit_check;
use explain::admission_explained;
use host::*;
use provider::*;

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
