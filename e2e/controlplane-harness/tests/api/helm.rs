//! `helm install` and `helm uninstall` of the chart against the real apiserver (every
//! object passes real validation; the workloads stay Pending with no kubelet), and the
//! kubectl views users see, printed for docs/controlplane-tests.md.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{control_plane, install_crds};
use crate::crds::{object, resource};
use nodetopo_controlplane::tools;

const NS: &str = "nodetopo-helm";
const RELEASE: &str = "nodetopo";

#[tokio::test]
async fn helm_install_uninstall_and_kubectl_views() {
    let Some(cp) = control_plane() else { return };
    install_crds(cp).await;
    let t = tools::tools().expect("helm and kubectl (.ci/chart-check.sh --tools)");
    let kc = cp.kubeconfig();
    let out = tools::run(
        &t.helm,
        &[
            "install",
            RELEASE,
            "charts/nodetopo",
            "--namespace",
            NS,
            "--create-namespace",
        ],
        kc,
    )
    .expect("helm install");
    println!("$ helm install {RELEASE} charts/nodetopo -n {NS} --create-namespace\n{out}");
    let client = cp.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let installed_deployments = deployments.list(&Default::default()).await.expect("list");
    let installed_daemonsets = daemonsets.list(&Default::default()).await.expect("list");
    assert_eq!(
        installed_deployments.items.len(),
        1,
        "the operator Deployment"
    );
    assert_eq!(installed_daemonsets.items.len(), 1, "the agent DaemonSet");
    let manifest =
        tools::run(&t.helm, &["get", "manifest", RELEASE, "-n", NS], kc).expect("manifest");
    let kinds: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .collect();
    println!("helm release objects ({}): {kinds:?}", kinds.len());

    // Something for the views to show: a policy and a node's NodeTopology with a status.
    let pp = PostParams::default();
    let nrp: Api<DynamicObject> = Api::all_with(client.clone(), &resource("NodeResourcePolicy"));
    let _ = nrp
        .create(
            &pp,
            &object(
                "NodeResourcePolicy",
                "helm-demo",
                json!({
            "nodeSelector": {"matchLabels": {"pool": "latency"}}, "priority": 10,
            "cpuManager": {"policy": "static", "reservedSystemCPUs": "0-1",
                           "options": {"full-pcpus-only": "true"}},
            "topologyManager": {"policy": "single-numa-node", "scope": "pod"}}),
            ),
        )
        .await;
    let nt: Api<DynamicObject> = Api::all_with(client.clone(), &resource("NodeTopology"));
    let _ = nt
        .create(
            &pp,
            &object(
                "NodeTopology",
                "helm-node-1",
                json!({
            "cpuManager": {"policy": "static", "reservedSystemCPUs": "0-1",
                           "options": {"full-pcpus-only": "true"}},
            "topologyManager": {"policy": "single-numa-node", "scope": "pod"},
            "policyRef": {"name": "helm-demo", "generation": 1}}),
            ),
        )
        .await;
    let summary = nodetopo_crds::NodeTopologySummary {
        cpus: 64,
        numa_nodes: 2,
        uncore_caches: 4,
        exclusive_cpus: 8,
        aligned_containers: 2,
        ..Default::default()
    };
    let mut status =
        serde_json::to_value(nodetopo_crds::NodeTopologyStatus::default()).expect("status");
    status["summary"] = serde_json::to_value(summary).expect("summary");
    nt.patch_status(
        "helm-node-1",
        &PatchParams::apply("nodetopo-agent").force(),
        &Patch::Apply(
            json!({"apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeTopology",
                             "metadata": {"name": "helm-node-1"}, "status": status}),
        ),
    )
    .await
    .expect("status");

    for args in [
        &["get", "nodetopology", "helm-node-1", "-o", "wide"][..],
        &["get", "nrp", "helm-demo"][..],
    ] {
        let out = tools::run(&t.kubectl, args, kc).expect("kubectl get");
        println!("$ kubectl {}\n{out}", args.join(" "));
        assert!(out.contains("single-numa-node"), "{out}");
    }
    // The CRD's OpenAPI v3 document is published a moment after it is Established.
    let deadline = Instant::now() + Duration::from_secs(30);
    let explain = loop {
        match tools::run(&t.kubectl, &["explain", "nodetopology.status"], kc) {
            Ok(out) => break out,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("kubectl explain: {e}"),
        }
    };
    println!("$ kubectl explain nodetopology.status\n{explain}");
    assert!(
        explain.contains("topology") && explain.contains("allocations"),
        "{explain}"
    );

    let out = tools::run(&t.helm, &["uninstall", RELEASE, "-n", NS, "--wait"], kc)
        .expect("helm uninstall");
    println!("$ helm uninstall {RELEASE} -n {NS}\n{out}");
    assert!(deployments
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .is_empty());
    assert!(daemonsets
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .is_empty());
}
