//! The agent binary with `--nrt` against a real apiserver (its own control plane) under the
//! upstream NodeResourceTopology CRD: it publishes the node's object with an owner reference
//! to the Node (UID read from the Node), the scheduler attributes, the pod fingerprint of the
//! pods holding exclusive CPUs and the CPU counts; it rewrites the object when a pod goes,
//! through server-side apply with its field manager.

mod agent_common;

use std::time::Duration;

use agent_common::{cpus_available, nrt_node_with_two_pods, start_nrt_agent, wait_object, PRESET};
use kube::api::{Api, DeleteParams};
use nodetopo_controlplane::fixture::Fixture;
use nodetopo_crds::nrt::fingerprint::PodFingerprint;
use nodetopo_crds::nrt::NodeResourceTopology;

const NODE: &str = "nrt-node";
const NS: &str = "nrt-test";

#[tokio::test]
async fn agent_publishes_node_resource_topology() {
    let Some((Fixture { cp, bin }, node_uid, _, pods)) = nrt_node_with_two_pods(NS, NODE).await
    else {
        return;
    };
    let client = cp.client();

    let absent_socket = cp.dir().join("absent/kubelet.sock");
    let (_agent, log_path) = start_nrt_agent(&cp, &bin, NODE, "nrt-agent", &absent_socket);

    let api: Api<NodeResourceTopology> = Api::all(client.clone());
    let both: PodFingerprint = [(NS, "g-1"), (NS, "g-2")].into_iter().collect();
    let api = &api;
    let get = move || async move { api.get_opt(NODE).await.ok().flatten() };
    let o = wait_object(
        "an object with both pods",
        Duration::from_secs(60),
        &log_path,
        get,
        |o: &NodeResourceTopology| {
            o.attribute("nodeTopologyPodsFingerprint") == Some(both.sign().as_str())
        },
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
        cpus_available(&o),
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
    let o = wait_object(
        "g-2 released",
        Duration::from_secs(60),
        &log_path,
        get,
        |o: &NodeResourceTopology| {
            o.attribute("nodeTopologyPodsFingerprint") == Some(only.sign().as_str())
        },
    )
    .await;
    assert_eq!(cpus_available(&o), 128 - 2 - 4);
    assert_ne!(o.metadata.resource_version, rv);
    println!(
        "agent --nrt: object published with owner {node_uid}, rewritten after a pod went ({} -> {} CPUs available)",
        128 - 2 - 6,
        128 - 2 - 4
    );
}
