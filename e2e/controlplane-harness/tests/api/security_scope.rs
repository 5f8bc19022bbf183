//! The chart's bounds on what one node's agent may write with `nrt.enabled` and actuation
//! on, enforced by the real apiserver: the ValidatingAdmissionPolicy keeps each agent to the
//! NodeResourceTopology named after its own node (as it does for NodeTopology), and with
//! `agent.actuation.evictionNamespaces` the agent may evict pods in those namespaces only
//! (Roles there, no cluster-wide `pods/eviction`).
//!
//! As in [`crate::security`], the chart is rendered with `helm template` and its RBAC and
//! admission objects applied as rendered; the agent acts through a token bound to a Pod on
//! node A, so it carries the node claim. Every request tried is printed.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::Client;
use nodetopo_controlplane::repo_root;
use nodetopo_crds::nrt::NodeResourceTopology;
use serde_json::json;

use crate::common::{control_plane, install_crds};
use crate::security::{apply_kinds, component_sa, render, Cases};

const RELEASE: &str = "secscope";
const NS: &str = "nodetopo-secscope";
/// The one namespace the agent may evict in (agent.actuation.evictionNamespaces).
const EVICT_NS: &str = "secscope-evictable";
/// A namespace it may not evict in.
const OTHER_NS: &str = "secscope-other";
const NODE_A: &str = "secscope-node-a";
const NODE_B: &str = "secscope-node-b";

/// A valid NodeResourceTopology for `node` (a golden object of crds/tests/data/nrt, renamed,
/// without owner references).
fn nrt(node: &str) -> NodeResourceTopology {
    let path = repo_root().join("crds/tests/data/nrt/amd-ryzen5-1600.before.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut o: NodeResourceTopology =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    o.metadata.name = Some(node.to_string());
    o.metadata.owner_references = None;
    o.metadata.uid = None;
    o.metadata.resource_version = None;
    o
}

/// Creates pod `name` in `ns`, bound to `node` (no kubelet runs it), replacing an old one.
async fn pod_on(admin: &Client, ns: &str, name: &str, node: &str, sa: Option<&str>) -> Pod {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let mut spec = json!({"nodeName": node, "containers": [{"name": "c", "image": "x:1"}]});
    if let Some(sa) = sa {
        spec["serviceAccountName"] = json!(sa);
    }
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("pod");
    let _ = pods
        .delete(name, &DeleteParams::default().grace_period(0))
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match pods.create(&PostParams::default(), &pod).await {
            Ok(p) => return p,
            Err(kube::Error::Api(s)) if s.code == 409 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("creating pod {ns}/{name}: {e}"),
        }
    }
}

/// An eviction that changes nothing (dry run), so that an allowed one can be tried again.
fn dry_eviction() -> EvictParams {
    EvictParams {
        delete_options: Some(DeleteParams {
            dry_run: true,
            ..DeleteParams::default()
        }),
        post_options: PostParams {
            dry_run: true,
            ..PostParams::default()
        },
    }
}

/// Waits until this release's admission policy is in force for NodeResourceTopology: a
/// dry-run apply of node B's object, as the agent of node A, is refused.
async fn wait_for_nrt_policy(agent: &Client) {
    let api: Api<NodeResourceTopology> = Api::all(agent.clone());
    let pp = PatchParams {
        dry_run: true,
        ..PatchParams::apply(nodetopo_crds::AGENT_FIELD_MANAGER)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match api.patch(NODE_B, &pp, &Patch::Apply(&nrt(NODE_B))).await {
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("may write only") => {
                return
            }
            // 404: the new resource is not served yet; 2xx or another 403: the policy (or
            // its binding) is not loaded yet.
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => panic!("probing the admission policy: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "the admission policy does not refuse node B's NodeResourceTopology after 30s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn chart_binds_nrt_writes_and_evictions_to_the_agent_scope() {
    let Some(cp) = control_plane() else { return };
    install_crds(cp).await;
    cp.install_nrt_crd().await.expect("NRT CRD");
    let admin = cp.client();
    let evict_values = format!("agent.actuation.evictionNamespaces={{{EVICT_NS}}}");
    let docs = render(
        cp,
        RELEASE,
        NS,
        &[
            "--set",
            "nrt.enabled=true",
            "--set",
            "agent.actuation.enabled=true",
            "--set",
            &evict_values,
        ],
    );
    for ns in [NS, EVICT_NS, OTHER_NS] {
        cp.ensure_service_account(ns, "default")
            .await
            .expect("namespace");
    }
    let kinds = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    let applied = apply_kinds(&admin, &docs, &kinds, NS).await;
    let evict_roles: Vec<String> = applied
        .iter()
        .filter(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == EVICT_NS)
        .map(|d| {
            d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        evict_roles.len(),
        1,
        "the chart renders one eviction Role in {EVICT_NS}"
    );
    let agent_sa = component_sa(&docs, "agent");

    let nodes: Api<Node> = Api::all(admin.clone());
    for n in [NODE_A, NODE_B] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": n}})).expect("node");
        let _ = nodes.create(&PostParams::default(), &node).await;
    }
    // Node B's NodeResourceTopology, written by someone else (its own agent, or NFD).
    let admin_nrt: Api<NodeResourceTopology> = Api::all(admin.clone());
    admin_nrt
        .patch(
            NODE_B,
            &PatchParams::apply("secscope-test").force(),
            &Patch::Apply(&nrt(NODE_B)),
        )
        .await
        .expect("node B's NodeResourceTopology");
    let agent_pod = pod_on(&admin, NS, "agent-a", NODE_A, Some(&agent_sa)).await;
    for ns in [EVICT_NS, OTHER_NS, NS] {
        pod_on(&admin, ns, "victim", NODE_A, None).await;
    }
    let uid = agent_pod.metadata.uid.clone().expect("uid");
    let token = cp
        .service_account_token(NS, &agent_sa, Some(("agent-a", &uid)))
        .await
        .expect("pod-bound token");
    let agent = cp.client_with_token(&token);
    let unbound = cp.client_with_token(
        &cp.service_account_token(NS, &agent_sa, None)
            .await
            .expect("token"),
    );
    wait_for_nrt_policy(&agent).await;

    let mut cases = Cases::default();
    let apply = PatchParams::apply(nodetopo_crds::AGENT_FIELD_MANAGER);
    let a_nrt: Api<NodeResourceTopology> = Api::all(agent.clone());
    cases.check(
        "agent",
        "apply noderesourcetopologies/secscope-node-a (own node)",
        true,
        a_nrt
            .patch(NODE_A, &apply, &Patch::Apply(&nrt(NODE_A)))
            .await,
    );
    cases.check(
        "agent",
        "get noderesourcetopologies/secscope-node-a",
        true,
        a_nrt.get(NODE_A).await,
    );
    cases.check(
        "agent",
        "apply noderesourcetopologies/secscope-node-b (other node)",
        false,
        a_nrt
            .patch(NODE_B, &apply, &Patch::Apply(&nrt(NODE_B)))
            .await,
    );
    cases.check(
        "agent",
        "merge-patch noderesourcetopologies/secscope-node-b (other node)",
        false,
        a_nrt
            .patch(
                NODE_B,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await,
    );
    cases.check(
        "agent",
        "create noderesourcetopologies/secscope-node-c (no such node claim)",
        false,
        a_nrt
            .create(&PostParams::default(), &nrt("secscope-node-c"))
            .await,
    );
    cases.check(
        "agent",
        "delete noderesourcetopologies/secscope-node-a",
        false,
        a_nrt.delete(NODE_A, &DeleteParams::default()).await,
    );
    let u_nrt: Api<NodeResourceTopology> = Api::all(unbound.clone());
    cases.check(
        "agent (unbound token)",
        "apply noderesourcetopologies/secscope-node-a",
        false,
        u_nrt
            .patch(NODE_A, &apply, &Patch::Apply(&nrt(NODE_A)))
            .await,
    );
    for (ns, allowed) in [(EVICT_NS, true), (OTHER_NS, false), (NS, false)] {
        let pods: Api<Pod> = Api::namespaced(agent.clone(), ns);
        cases.check(
            "agent",
            &format!("evict pods/{ns}/victim (dry run)"),
            allowed,
            pods.evict("victim", &dry_eviction()).await,
        );
    }
    let a_nodes: Api<Node> = Api::all(agent.clone());
    cases.check(
        "agent",
        "get nodes/secscope-node-a (owner reference, verify step)",
        true,
        a_nodes.get(NODE_A).await,
    );
    println!(
        "scope cases: {} tried, {} wrong",
        cases.tried,
        cases.wrong.len()
    );
    assert!(cases.wrong.is_empty(), "{}", cases.wrong.join("\n"));
}
