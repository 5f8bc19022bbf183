//! The agent binary with `--nrt` against a real apiserver (its own control plane) under the
//! upstream NodeResourceTopology CRD: it publishes the node's object with an owner reference
//! to the Node (UID read from the Node), the scheduler attributes, the pod fingerprint of the
//! pods holding exclusive CPUs and the CPU counts; it rewrites the object when a pod goes,
//! through server-side apply with its field manager.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use nodetopo_controlplane::{process, ControlPlane};
use nodetopo_crds::nrt::fingerprint::PodFingerprint;
use nodetopo_crds::nrt::NodeResourceTopology;
use serde_json::json;

const NODE: &str = "nrt-node";
const NS: &str = "nrt-test";
const PRESET: &str = "epyc-7702p";

struct Agent(std::process::Child);

impl Drop for Agent {
    fn drop(&mut self) {
        process::kill_group(&mut self.0);
    }
}

fn pod(name: &str, cpus: u32) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "app:1",
            "resources": {"requests": {"cpu": cpus.to_string(), "memory": "256Mi"},
                          "limits": {"cpu": cpus.to_string(), "memory": "256Mi"}}}]}
    }))
    .expect("pod")
}

fn available(o: &NodeResourceTopology) -> usize {
    o.zones
        .iter()
        .filter(|z| z.type_ == "Node")
        .filter_map(|z| z.resource("cpu"))
        .map(|r| r.available.parse::<usize>().expect("count"))
        .sum()
}

async fn wait_nrt<F: Fn(&NodeResourceTopology) -> bool>(
    api: &Api<NodeResourceTopology>,
    what: &str,
    ok: F,
    log: &PathBuf,
) -> NodeResourceTopology {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(o)) = api.get_opt(NODE).await {
            if ok(&o) {
                return o;
            }
        }
        if Instant::now() > deadline {
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            panic!("timed out waiting for {what}; agent log:\n{tail}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn agent_publishes_node_resource_topology() {
    let cp = match ControlPlane::start() {
        Ok(Some(cp)) => cp,
        Ok(None) => return,
        Err(e) => panic!("control plane: {e}"),
    };
    let Some(bin) = nodetopo_controlplane::workspace_binary("nodetopo-agent") else {
        return;
    };
    cp.install_crds().await.expect("CRDs");
    cp.install_nrt_crd().await.expect("NRT CRD");
    cp.ensure_service_account(NS, "default")
        .await
        .expect("namespace");
    let client = cp.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": NODE}})).expect("node");
    let node = nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    let node_uid = node.metadata.uid.clone().expect("node uid");
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("nodetopo.io", "v1alpha1", "NodeTopology"),
        "nodetopologies",
    );
    let nt: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    nt.patch(
        NODE,
        &PatchParams::apply(nodetopo_crds::OPERATOR_FIELD_MANAGER).force(),
        &Patch::Apply(
            json!({"apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeTopology",
            "metadata": {"name": NODE},
            "spec": {"cpuManager": {"policy": "static", "reservedSystemCPUs": "0,64"},
                     "topologyManager": {"policy": "single-numa-node", "scope": "pod"}}}),
        ),
    )
    .await
    .expect("spec");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for (n, c) in [("g-1", 4), ("g-2", 2)] {
        pods.create(&PostParams::default(), &pod(n, c))
            .await
            .expect("pod");
    }

    let state = cp.dir().join("nrt-agent-state");
    std::fs::create_dir_all(&state).expect("state dir");
    let log_path = cp.dir().join("nrt-agent.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let mut cmd = Command::new(&bin);
    cmd.args(["run", "--preset", PRESET, "--node-name", NODE, "--nrt"])
        .arg("--state-dir")
        .arg(&state)
        .arg("--kubelet-state")
        .arg(cp.dir().join("absent/cpu_manager_state"))
        .arg("--pod-resources-socket")
        .arg(cp.dir().join("absent/kubelet.sock"))
        .env("KUBECONFIG", cp.kubeconfig())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    let _agent = Agent(process::spawn(cmd, "nodetopo-agent").expect("starting the agent"));

    let api: Api<NodeResourceTopology> = Api::all(client.clone());
    let both: PodFingerprint = [(NS, "g-1"), (NS, "g-2")].into_iter().collect();
    let o = wait_nrt(
        &api,
        "an object with both pods",
        |o| o.attribute("nodeTopologyPodsFingerprint") == Some(both.sign().as_str()),
        &log_path,
    )
    .await;
    let owner = &o.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Node", NODE, node_uid.as_str())
    );
    assert_eq!(
        o.attribute("topologyManagerPolicy"),
        Some("single-numa-node")
    );
    assert_eq!(o.attribute("topologyManagerScope"), Some("pod"));
    assert_eq!(o.attribute("nodetopo.io/allocationSource"), Some("Agent"));
    assert_eq!(
        available(&o),
        128 - 2 - 6,
        "{PRESET}: 128 CPUs, 2 reserved, 6 exclusive"
    );
    let managers: Vec<String> = o
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, [nodetopo_crds::AGENT_FIELD_MANAGER.to_string()]);
    let rv = o.metadata.resource_version.clone();

    pods.delete("g-2", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    let only: PodFingerprint = [(NS, "g-1")].into_iter().collect();
    let o = wait_nrt(
        &api,
        "g-2 released",
        |o| o.attribute("nodeTopologyPodsFingerprint") == Some(only.sign().as_str()),
        &log_path,
    )
    .await;
    assert_eq!(available(&o), 128 - 2 - 4);
    assert_ne!(o.metadata.resource_version, rv);
    println!(
        "agent --nrt: object published with owner {node_uid}, rewritten after a pod went ({} -> {} CPUs available)",
        128 - 2 - 6,
        128 - 2 - 4
    );
}
