//! What the agent tests (`agent`, `agent_nrt`, `agent_podresources`) share: the agent
//! process (killed with its group when dropped), Guaranteed pods bound by `nodeName`, the
//! Node with its NodeTopology spec as the operator writes it, and waiting on an object with
//! the agent's log in the failure.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::future::Future;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use nodetopo_controlplane::fixture::Fixture;
use nodetopo_controlplane::{process, server, wait, ControlPlane};
use nodetopo_crds::nrt::NodeResourceTopology;
use serde_json::{json, Value};

/// The machine every agent test runs on.
pub const PRESET: &str = "epyc-7702p";

/// A running agent; its process group is killed when this is dropped.
pub struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        process::kill_group(&mut self.0);
    }
}

/// Starts `bin run --preset PRESET --node-name node` with its state in `state`, the kubelet
/// checkpoint path `kubelet_state`, `extra` arguments after those, the control plane's
/// kubeconfig, and stdout and stderr into `log`.
pub fn start_agent(
    cp: &ControlPlane,
    bin: &Path,
    node: &str,
    state: &Path,
    kubelet_state: &Path,
    extra: &[&OsStr],
    log: &Path,
) -> Agent {
    std::fs::create_dir_all(state).expect("state dir");
    let out = std::fs::File::create(log).expect("log");
    let mut cmd = Command::new(bin);
    cmd.args(["run", "--preset", PRESET, "--node-name", node])
        .arg("--state-dir")
        .arg(state)
        .arg("--kubelet-state")
        .arg(kubelet_state)
        .args(extra)
        .env("KUBECONFIG", cp.kubeconfig())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out);
    Agent(process::spawn(cmd, "nodetopo-agent").expect("starting the agent"))
}

/// A Guaranteed pod `namespace/name` bound to `node`: one container `app` with `cpus` CPUs
/// and 256Mi of memory as requests and limits.
pub fn pod(namespace: &str, node: &str, name: &str, cpus: u32) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1",
            "resources": {"requests": {"cpu": cpus.to_string(), "memory": "256Mi"},
                          "limits": {"cpu": cpus.to_string(), "memory": "256Mi"}}}]}
    }))
    .expect("pod")
}

/// Creates the pods `(name, cpus)` in `namespace`, bound to `node`.
pub async fn create_pods(pods: &Api<Pod>, namespace: &str, node: &str, which: &[(&str, u32)]) {
    for (name, cpus) in which {
        pods.create(&PostParams::default(), &pod(namespace, node, name, *cpus))
            .await
            .expect("pod");
    }
}

/// The NodeTopology objects (cluster-scoped, dynamic).
pub fn nodetopologies(client: &Client) -> Api<DynamicObject> {
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("nodetopo.io", "v1alpha1", "NodeTopology"),
        "nodetopologies",
    );
    Api::all_with(client.clone(), &ar)
}

/// Creates the Node `node`; returns its UID.
pub async fn create_node(client: &Client, node: &str) -> String {
    let nodes: Api<Node> = Api::all(client.clone());
    let n: Node = serde_json::from_value(json!({"metadata": {"name": node}})).expect("node");
    let n = nodes
        .create(&PostParams::default(), &n)
        .await
        .expect("node");
    n.metadata.uid.expect("node uid")
}

/// Applies the NodeTopology spec of `node` as the operator does (its field manager, forced):
/// static CPU manager with CPUs 0,64 reserved, and `topology_manager` as given.
pub async fn apply_spec(nt: &Api<DynamicObject>, node: &str, topology_manager: Value) {
    let spec = json!({"apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeTopology",
        "metadata": {"name": node},
        "spec": {"cpuManager": {"policy": "static", "reservedSystemCPUs": "0,64"},
                 "topologyManager": topology_manager}});
    nt.patch(
        node,
        &PatchParams::apply(nodetopo_crds::OPERATOR_FIELD_MANAGER).force(),
        &Patch::Apply(spec),
    )
    .await
    .expect("spec");
}

/// CPUs available over the NUMA (`Node`) zones of a NodeResourceTopology.
pub fn cpus_available(o: &NodeResourceTopology) -> usize {
    o.zones
        .iter()
        .filter(|z| z.type_ == "Node")
        .filter_map(|z| z.resource("cpu"))
        .map(|r| r.available.parse::<usize>().expect("count"))
        .sum()
}

/// Polls `get` every 200 ms until it gives an object `ok` accepts, for at most `timeout`;
/// the failure names `what` and ends with the last lines of the agent's `log`.
pub async fn wait_object<T, G, Fut, F>(
    what: &str,
    timeout: Duration,
    log: &Path,
    get: G,
    ok: F,
) -> T
where
    G: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
    F: Fn(&T) -> bool,
{
    let (get, ok) = (&get, &ok);
    wait::wait_for(what, timeout, Duration::from_millis(200), || async move {
        match get().await {
            Some(o) if ok(&o) => Ok(o),
            seen => Err(format!(
                "{}; agent log:\n{}",
                if seen.is_some() {
                    "not as expected"
                } else {
                    "absent"
                },
                server::tail(log, 15)
            )),
        }
    })
    .await
}

/// Starts the agent with `--nrt` and the kubelet's PodResources socket at `socket`, with no
/// kubelet checkpoint, its state in `<tag>-state` and its log in `<tag>.log` under the
/// control plane's directory; returns it with the log's path.
pub fn start_nrt_agent(
    cp: &ControlPlane,
    bin: &Path,
    node: &str,
    tag: &str,
    socket: &Path,
) -> (Agent, std::path::PathBuf) {
    let log = cp.dir().join(format!("{tag}.log"));
    let agent = start_agent(
        cp,
        bin,
        node,
        &cp.dir().join(format!("{tag}-state")),
        &cp.dir().join("absent/cpu_manager_state"),
        &[
            "--nrt".as_ref(),
            "--pod-resources-socket".as_ref(),
            socket.as_os_str(),
        ],
        &log,
    );
    (agent, log)
}

/// The Node `node` (its UID returned), its NodeTopology spec with `topology_manager`, and
/// the pods `(name, cpus)` in `namespace` bound to it; returns the UID and both APIs.
pub async fn node_with_pods(
    client: &Client,
    namespace: &str,
    node: &str,
    topology_manager: Value,
    which: &[(&str, u32)],
) -> (String, Api<DynamicObject>, Api<Pod>) {
    let uid = create_node(client, node).await;
    let nt = nodetopologies(client);
    apply_spec(&nt, node, topology_manager).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    create_pods(&pods, namespace, node, which).await;
    (uid, nt, pods)
}

/// Sets a pod's `status.phase` as its kubelet would (there is no kubelet here).
pub async fn set_phase(pods: &Api<Pod>, name: &str, phase: &str) {
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": phase}})),
    )
    .await
    .expect("pod status");
}

/// What the NodeResourceTopology tests share: the agent's fixture with the upstream NRT CRD
/// installed, and Node `node` under topology manager single-numa-node (pod scope) with the
/// Guaranteed pods g-1 (4 CPUs) and g-2 (2 CPUs) in `namespace`, both `Running` (the
/// scheduler plugin's fingerprint leaves Pending pods out). `None` when the fixture skips
/// (no control-plane binaries); otherwise as [`node_with_pods`].
pub async fn nrt_node_with_two_pods(
    namespace: &str,
    node: &str,
) -> Option<(Fixture, String, Api<DynamicObject>, Api<Pod>)> {
    let fixture = Fixture::start("nodetopo-agent", namespace).await?;
    fixture.cp.install_nrt_crd().await.expect("NRT CRD");
    let (uid, nt, pods) = node_with_pods(
        &fixture.cp.client(),
        namespace,
        node,
        json!({"policy": "single-numa-node", "scope": "pod"}),
        &[("g-1", 4), ("g-2", 2)],
    )
    .await;
    for name in ["g-1", "g-2"] {
        set_phase(&pods, name, "Running").await;
    }
    Some((fixture, uid, nt, pods))
}
