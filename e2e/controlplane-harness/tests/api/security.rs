//! The Helm chart's RBAC and ValidatingAdmissionPolicy, enforced by the real apiserver.
//!
//! `helm template` renders the chart as it is in this tree (with the VAP API advertised);
//! the test applies the rendered ServiceAccounts, (Cluster)Roles, bindings and admission
//! policy, never a copy of them, then acts as the agent (a token bound to a Pod on node A, so
//! it carries the node claim) and as the operator, and prints every request tried.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use kube::Client;
use serde_json::{json, Value};

use crate::common::{control_plane, install_crds};
use crate::crds::{object, resource};
use nodetopo_controlplane::server::jwt_claims;
use nodetopo_controlplane::tools;
use nodetopo_controlplane::ControlPlane;

const RELEASE: &str = "sec";
const NS: &str = "nodetopo-sec";
const NODE_A: &str = "sec-node-a";
const NODE_B: &str = "sec-node-b";

/// Renders the chart as release `release` in `ns` (with `values`, e.g. `--set k=v`) and
/// returns its documents.
pub(crate) fn render(cp: &ControlPlane, release: &str, ns: &str, values: &[&str]) -> Vec<Value> {
    let t = tools::tools().expect("helm and kubectl (.ci/chart-check.sh --tools)");
    let mut args = vec![
        "template",
        release,
        "charts/nodetopo",
        "--namespace",
        ns,
        "--api-versions",
        "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    ];
    args.extend_from_slice(values);
    let yaml = tools::run(&t.helm, &args, cp.kubeconfig()).expect("helm template");
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&yaml) {
        let v: Value = serde::Deserialize::deserialize(doc).expect("rendered YAML parses");
        if !v.is_null() {
            docs.push(v);
        }
    }
    docs
}

/// Applies the rendered objects of the given kinds (server-side apply, as the admin);
/// namespaced objects without a namespace of their own go to `ns`.
pub(crate) async fn apply_kinds(
    client: &Client,
    docs: &[Value],
    kinds: &[&str],
    ns: &str,
) -> Vec<Value> {
    let mut applied = Vec::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        if !kinds.contains(&kind) {
            continue;
        }
        let (group, version) = match doc["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .split_once('/')
        {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (
                String::new(),
                doc["apiVersion"].as_str().unwrap_or_default().to_string(),
            ),
        };
        let (ar, caps) = pinned_kind(client, &GroupVersionKind::gvk(&group, &version, kind))
            .await
            .unwrap_or_else(|e| panic!("discovering {kind}: {e}"));
        let name = doc["metadata"]["name"].as_str().expect("named").to_string();
        let api: Api<DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
            let obj_ns = doc["metadata"]["namespace"].as_str().unwrap_or(ns);
            Api::namespaced_with(client.clone(), obj_ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        api.patch(
            &name,
            &PatchParams::apply("nodetopo-controlplane-tests").force(),
            &Patch::Apply(doc),
        )
        .await
        .unwrap_or_else(|e| panic!("applying rendered {kind} {name}: {e}"));
        applied.push(doc.clone());
    }
    applied
}

pub(crate) fn component_sa(docs: &[Value], component: &str) -> String {
    docs.iter()
        .find(|d| {
            d["kind"] == "ServiceAccount"
                && d["metadata"]["labels"]["app.kubernetes.io/component"] == component
        })
        .and_then(|d| d["metadata"]["name"].as_str())
        .unwrap_or_else(|| panic!("the chart renders no {component} ServiceAccount"))
        .to_string()
}

/// Tally of the requests tried.
#[derive(Default)]
pub(crate) struct Cases {
    pub(crate) tried: usize,
    pub(crate) wrong: Vec<String>,
}

impl Cases {
    pub(crate) fn check<T>(
        &mut self,
        who: &str,
        what: &str,
        want_allowed: bool,
        got: Result<T, kube::Error>,
    ) {
        self.tried += 1;
        let (allowed, detail) = match &got {
            Ok(_) => (true, "allowed".to_string()),
            Err(kube::Error::Api(s))
                if s.code == 403 || s.code == 422 && s.message.contains("denied request") =>
            {
                (
                    false,
                    format!("refused ({} {}: {})", s.code, s.reason, s.message),
                )
            }
            Err(e) => (false, format!("failed otherwise: {e}")),
        };
        let ok = allowed == want_allowed && (allowed || detail.starts_with("refused"));
        println!(
            "{} {who}: {what}: want {}, got {detail}",
            if ok { "ok  " } else { "FAIL" },
            if want_allowed { "allowed" } else { "refused" }
        );
        if !ok {
            self.wrong.push(format!("{who}: {what}: {detail}"));
        }
    }
}

/// A complete, valid NodeTopology status (the typed default with a CPU count), as a patch.
fn status_patch(node: &str) -> Patch<Value> {
    let mut status = serde_json::to_value(nodetopo_crds::NodeTopologyStatus::default())
        .expect("status serialises");
    status["summary"] = serde_json::to_value(nodetopo_crds::NodeTopologySummary {
        cpus: 4,
        ..Default::default()
    })
    .expect("summary serialises");
    Patch::Merge(json!({"metadata": {"name": node}, "status": status}))
}

/// The admission plugin loads policies through an informer, a moment after they are created.
/// Waits until the policy is in force: a dry-run status patch of another node's NodeTopology,
/// as the agent, is refused. (The VAP's typeChecking status comes from kube-controller-manager,
/// which does not run here.)
async fn wait_for_vap(agent: &Client) {
    let api: Api<DynamicObject> = Api::all_with(agent.clone(), &resource("NodeTopology"));
    let pp = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = api.patch_status(NODE_B, &pp, &status_patch(NODE_B)).await;
        match got {
            Err(kube::Error::Api(s)) if s.code == 403 => return,
            Ok(_) => {}
            Err(e) => panic!("probing the admission policy: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "the ValidatingAdmissionPolicy is not enforced after 30s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn chart_rbac_and_admission_policy_are_enforced() {
    let Some(cp) = control_plane() else { return };
    install_crds(cp).await;
    let admin = cp.client();
    let docs = render(cp, RELEASE, NS, &[]);
    cp.ensure_service_account(NS, "default")
        .await
        .expect("namespace");
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
    let vap: Vec<&Value> = applied
        .iter()
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .collect();
    assert_eq!(
        vap.len(),
        1,
        "the chart renders one ValidatingAdmissionPolicy"
    );
    let agent_sa = component_sa(&docs, "agent");
    let operator_sa = component_sa(&docs, "operator");
    println!(
        "chart rendered {} objects; applied {}: {:?}",
        docs.len(),
        applied.len(),
        applied
            .iter()
            .map(|d| format!(
                "{}/{}",
                d["kind"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().unwrap_or("")
            ))
            .collect::<Vec<_>>()
    );

    // Two nodes, their NodeTopologies, and an agent pod on node A.
    let nodes: Api<Node> = Api::all(admin.clone());
    for n in [NODE_A, NODE_B] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": n}})).expect("node");
        let _ = nodes.create(&PostParams::default(), &node).await;
    }
    let ntopo: Api<DynamicObject> = Api::all_with(admin.clone(), &resource("NodeTopology"));
    let nt_spec = json!({"cpuManager": {"policy": "none"}, "topologyManager": {"policy": "none"}});
    for n in [NODE_A, NODE_B] {
        let _ = ntopo
            .create(
                &PostParams::default(),
                &object("NodeTopology", n, nt_spec.clone()),
            )
            .await;
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "agent-a"},
        "spec": {"nodeName": NODE_A, "serviceAccountName": agent_sa,
                 "containers": [{"name": "agent", "image": "nodetopo-agent:test"}]}
    }))
    .expect("pod");
    let _ = pods
        .delete("agent-a", &DeleteParams::default().grace_period(0))
        .await;
    let pod = loop {
        match pods.create(&PostParams::default(), &pod).await {
            Ok(p) => break p,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("creating the agent pod: {e}"),
        }
    };
    let uid = pod.metadata.uid.clone().expect("uid");
    let token = cp
        .service_account_token(NS, &agent_sa, Some(("agent-a", &uid)))
        .await
        .expect("pod-bound token");
    let claims = jwt_claims(&token).expect("claims");
    assert_eq!(
        claims["kubernetes.io"]["node"]["name"], NODE_A,
        "a pod-bound token carries the pod's node: {claims}"
    );
    println!(
        "agent token claims: kubernetes.io = {}",
        claims["kubernetes.io"]
    );
    let agent = cp.client_with_token(&token);
    let unbound = cp.client_with_token(
        &cp.service_account_token(NS, &agent_sa, None)
            .await
            .expect("token"),
    );
    let operator = cp.client_with_token(
        &cp.service_account_token(NS, &operator_sa, None)
            .await
            .expect("token"),
    );

    wait_for_vap(&agent).await;
    let mut cases = Cases::default();
    let pp = PatchParams::default();

    // The agent, with a token bound to its pod on node A.
    let a_nt: Api<DynamicObject> = Api::all_with(agent.clone(), &resource("NodeTopology"));
    cases.check(
        "agent",
        "get nodetopologies/sec-node-a",
        true,
        a_nt.get(NODE_A).await,
    );
    cases.check(
        "agent",
        "list nodetopologies",
        true,
        a_nt.list(&ListParams::default()).await,
    );
    cases.check(
        "agent",
        "patch nodetopologies/sec-node-a/status",
        true,
        a_nt.patch_status(NODE_A, &pp, &status_patch(NODE_A)).await,
    );
    cases.check(
        "agent",
        "patch nodetopologies/sec-node-b/status (other node)",
        false,
        a_nt.patch_status(NODE_B, &pp, &status_patch(NODE_B)).await,
    );
    cases.check(
        "agent",
        "patch nodetopologies/sec-node-a spec",
        false,
        a_nt.patch(
            NODE_A,
            &pp,
            &Patch::Merge(json!({"spec": {"cpuManager": {"policy": "static", "reservedCPUs": 1}}})),
        )
        .await,
    );
    cases.check(
        "agent",
        "create nodetopologies",
        false,
        a_nt.create(
            &PostParams::default(),
            &object("NodeTopology", "sec-node-c", nt_spec.clone()),
        )
        .await,
    );
    cases.check(
        "agent",
        "delete nodetopologies/sec-node-a",
        false,
        a_nt.delete(NODE_A, &DeleteParams::default()).await,
    );
    let a_pods: Api<Pod> = Api::all(agent.clone());
    cases.check(
        "agent",
        "list pods (all namespaces)",
        true,
        a_pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={NODE_A}")))
            .await,
    );
    let a_pods_ns: Api<Pod> = Api::namespaced(agent.clone(), NS);
    cases.check(
        "agent",
        "create pods",
        false,
        a_pods_ns
            .create(
                &PostParams::default(),
                &serde_json::from_value::<Pod>(json!({
            "metadata": {"name": "evil"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}))
                .expect("pod"),
            )
            .await,
    );
    cases.check(
        "agent",
        "patch pods/agent-a",
        false,
        a_pods_ns
            .patch(
                "agent-a",
                &pp,
                &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await,
    );
    cases.check(
        "agent",
        "delete pods/agent-a",
        false,
        a_pods_ns.delete("agent-a", &DeleteParams::default()).await,
    );
    cases.check(
        "agent",
        "patch pods/agent-a/status",
        false,
        a_pods_ns
            .patch_status(
                "agent-a",
                &pp,
                &Patch::Merge(json!({"status": {"phase": "Failed"}})),
            )
            .await,
    );
    let a_nodes: Api<Node> = Api::all(agent.clone());
    // The agent reads no Node (issue 18: least privilege), not even its own.
    cases.check(
        "agent",
        "get nodes/sec-node-a",
        false,
        a_nodes.get(NODE_A).await,
    );
    cases.check(
        "agent",
        "patch nodes/sec-node-a",
        false,
        a_nodes
            .patch(
                NODE_A,
                &pp,
                &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await,
    );
    cases.check(
        "agent",
        "patch nodes/sec-node-a/status",
        false,
        a_nodes
            .patch_status(
                NODE_A,
                &pp,
                &Patch::Merge(json!({"status": {"capacity": {"cpu": "1"}}})),
            )
            .await,
    );
    cases.check(
        "agent",
        "delete nodes/sec-node-b",
        false,
        a_nodes.delete(NODE_B, &DeleteParams::default()).await,
    );
    let a_secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(agent.clone(), NS);
    cases.check(
        "agent",
        "list secrets",
        false,
        a_secrets.list(&ListParams::default()).await,
    );
    cases.check(
        "agent",
        "get secrets/anything",
        false,
        a_secrets.get("anything").await,
    );
    let a_nrp: Api<DynamicObject> = Api::all_with(agent.clone(), &resource("NodeResourcePolicy"));
    cases.check(
        "agent",
        "create noderesourcepolicies",
        false,
        a_nrp
            .create(
                &PostParams::default(),
                &object("NodeResourcePolicy", "evil", json!({})),
            )
            .await,
    );
    // The same ServiceAccount with a token that is not bound to a pod: no node claim.
    let u_nt: Api<DynamicObject> = Api::all_with(unbound.clone(), &resource("NodeTopology"));
    cases.check(
        "agent (unbound token)",
        "patch nodetopologies/sec-node-a/status",
        false,
        u_nt.patch_status(NODE_A, &pp, &status_patch(NODE_A)).await,
    );

    // The operator.
    let admin_nrp: Api<DynamicObject> =
        Api::all_with(admin.clone(), &resource("NodeResourcePolicy"));
    let _ = admin_nrp
        .create(
            &PostParams::default(),
            &object("NodeResourcePolicy", "sec-policy", json!({"priority": 1})),
        )
        .await;
    let o_nrp: Api<DynamicObject> =
        Api::all_with(operator.clone(), &resource("NodeResourcePolicy"));
    let o_nt: Api<DynamicObject> = Api::all_with(operator.clone(), &resource("NodeTopology"));
    let o_nodes: Api<Node> = Api::all(operator.clone());
    cases.check(
        "operator",
        "list nodes",
        true,
        o_nodes.list(&ListParams::default()).await,
    );
    cases.check(
        "operator",
        "list noderesourcepolicies",
        true,
        o_nrp.list(&ListParams::default()).await,
    );
    cases.check(
        "operator",
        "patch noderesourcepolicies/sec-policy/status",
        true,
        o_nrp
            .patch_status(
                "sec-policy",
                &pp,
                &Patch::Merge(json!({"status": {"matchedNodes": 2}})),
            )
            .await,
    );
    cases.check(
        "operator",
        "create nodetopologies",
        true,
        o_nt.create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &object("NodeTopology", "sec-node-c", nt_spec.clone()),
        )
        .await,
    );
    cases.check("operator", "apply nodetopologies/sec-node-b spec", true,
        o_nt.patch(NODE_B, &PatchParams::apply(nodetopo_crds::OPERATOR_FIELD_MANAGER).force(),
            &Patch::Apply(object("NodeTopology", NODE_B, json!({"cpuManager": {"policy": "static", "reservedCPUs": 1}, "topologyManager": {"policy": "none"}})))).await);
    cases.check(
        "operator",
        "patch noderesourcepolicies/sec-policy spec",
        false,
        o_nrp
            .patch(
                "sec-policy",
                &pp,
                &Patch::Merge(json!({"spec": {"priority": 9}})),
            )
            .await,
    );
    cases.check(
        "operator",
        "delete noderesourcepolicies/sec-policy",
        false,
        o_nrp.delete("sec-policy", &DeleteParams::default()).await,
    );
    cases.check(
        "operator",
        "patch nodetopologies/sec-node-a/status",
        false,
        o_nt.patch_status(NODE_A, &pp, &status_patch(NODE_A)).await,
    );
    cases.check(
        "operator",
        "delete nodetopologies/sec-node-b",
        false,
        o_nt.delete(NODE_B, &DeleteParams::default()).await,
    );
    cases.check(
        "operator",
        "patch nodes/sec-node-a",
        false,
        o_nodes
            .patch(
                NODE_A,
                &pp,
                &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await,
    );
    let o_pods: Api<Pod> = Api::all(operator.clone());
    cases.check(
        "operator",
        "list pods",
        false,
        o_pods.list(&ListParams::default()).await,
    );
    let o_secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(operator.clone(), NS);
    cases.check(
        "operator",
        "list secrets",
        false,
        o_secrets.list(&ListParams::default()).await,
    );
    let leases = |ns: &str| -> Api<k8s_openapi::api::coordination::v1::Lease> {
        Api::namespaced(operator.clone(), ns)
    };
    let lease = |name: &str| -> k8s_openapi::api::coordination::v1::Lease {
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("lease")
    };
    // The Lease the operator is allowed to hold is named after the operator (the chart's Role).
    let lease_name = docs
        .iter()
        .filter(|d| d["kind"] == "Role")
        .filter_map(|d| d["rules"].as_array())
        .flat_map(|rules| rules.iter())
        .filter(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|res| res.iter().any(|x| x == "leases"))
        })
        .find_map(|r| r["resourceNames"][0].as_str())
        .expect("the chart's leader-election Role names the Lease")
        .to_string();
    cases.check(
        "operator",
        &format!("create leases/{lease_name} in {NS}"),
        true,
        leases(NS)
            .create(&PostParams::default(), &lease(&lease_name))
            .await,
    );
    cases.check(
        "operator",
        &format!("get leases/{lease_name} in {NS}"),
        true,
        leases(NS).get(&lease_name).await,
    );
    cases.check(
        "operator",
        &format!("update leases/{lease_name} in {NS}"),
        true,
        leases(NS)
            .patch(
                &lease_name,
                &pp,
                &Patch::Merge(json!({"spec": {"holderIdentity": "op-1"}})),
            )
            .await,
    );
    cases.check(
        "operator",
        &format!("get leases/other in {NS}"),
        false,
        leases(NS).get("other").await,
    );
    cases.check(
        "operator",
        "create leases in default",
        false,
        leases("default")
            .create(&PostParams::default(), &lease(&lease_name))
            .await,
    );
    cases.check(
        "operator",
        &format!("delete leases/{lease_name} in {NS}"),
        false,
        leases(NS)
            .delete(&lease_name, &DeleteParams::default())
            .await,
    );

    println!(
        "security cases: {} tried, {} wrong",
        cases.tried,
        cases.wrong.len()
    );
    assert!(cases.wrong.is_empty(), "{}", cases.wrong.join("\n"));
}
