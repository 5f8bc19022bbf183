//! Reconcilers against a mock API server that expects an exact sequence of requests
//! (pattern of kube-rs controller-rs `fixtures.rs`): each [`Scenario`] documents one sequence.

use std::time::Duration;

use http::{Request, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use kube::runtime::events::Reporter;
use kube::runtime::watcher;
use nodetopo_crds::{
    CpuManagerConfig, CpuManagerPolicy, NodeResourcePolicySpec, NodeTopologyStatus,
};
use serde_json::{json, Value};
use tower_test::mock::Handle;

use super::*;

type ApiHandle = Handle<Request<Body>, Response<Body>>;

fn fixed_now() -> Time {
    Time(Timestamp::from_second(1_700_000_000).unwrap())
}

fn policy(name: &str, priority: i32) -> NodeResourcePolicy {
    let mut p = NodeResourcePolicy::new(
        name,
        NodeResourcePolicySpec {
            node_selector: Some(LabelSelector {
                match_labels: Some([("pool".to_string(), "telco".to_string())].into()),
                match_expressions: None,
            }),
            priority,
            cpu_manager: Some(CpuManagerConfig {
                policy: CpuManagerPolicy::Static,
                reserved_system_cpus: Some("0-1".into()),
                ..Default::default()
            }),
            topology_manager: None,
            rollout: None,
        },
    );
    p.metadata.generation = Some(2);
    p.metadata.uid = Some(format!("uid-{name}"));
    p
}

fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            labels: Some([("pool".to_string(), "telco".to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn store<K>(objs: Vec<K>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (reader, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objs {
        writer.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    // A listed store is ready: reconciles wait for that.
    writer.apply_watcher_event(&watcher::Event::InitDone);
    reader
}

fn context(
    policies: Vec<NodeResourcePolicy>,
    nodes: Vec<Node>,
    ntopos: Vec<NodeTopology>,
) -> (Arc<Context>, ApiHandle) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let ctx = Context {
        ntopo_api: Api::all(client.clone()),
        policy_api: Api::all(client.clone()),
        policies: store(policies),
        nodes: store(nodes),
        ntopos: store(ntopos),
        metrics: Arc::new(Metrics::new()),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "nodetopo-operator".into(),
                instance: None,
            },
        ),
        now: fixed_now,
        failures: Mutex::new(HashMap::new()),
    };
    (Arc::new(ctx), handle)
}

/// The request sequences the reconcilers may produce.
enum Scenario {
    /// A node without NodeTopology: one apply of the spec, nothing else.
    CreateNodeTopology {
        node: &'static str,
        policy: &'static str,
    },
    /// A policy that lost a tie: status apply, then a Warning event TiedPriority.
    ConflictStatusAndEvent {
        policy: &'static str,
        winner: &'static str,
    },
    /// Nothing to write: no request at all.
    NoRequests,
}

async fn body_json(req: Request<Body>) -> Value {
    serde_json::from_slice(&req.into_body().collect_bytes().await.unwrap()).unwrap()
}

fn ok(v: &Value) -> Response<Body> {
    Response::builder()
        .body(Body::from(serde_json::to_vec(v).unwrap()))
        .unwrap()
}

async fn verify(mut handle: ApiHandle, scenario: Scenario) {
    match scenario {
        Scenario::CreateNodeTopology { node, policy } => {
            let (req, send) = handle.next_request().await.expect("apply request");
            assert_eq!(req.method(), http::Method::PATCH);
            assert_eq!(
                req.uri().to_string(),
                format!("/apis/nodetopo.io/v1alpha1/nodetopologies/{node}?&force=true&fieldManager=nodetopo-operator")
            );
            let body = body_json(req).await;
            assert_eq!(
                body["metadata"]["ownerReferences"][0]["uid"],
                json!(format!("uid-{node}"))
            );
            assert_eq!(
                body["spec"]["policyRef"],
                json!({"name": policy, "generation": 2})
            );
            assert_eq!(
                body["spec"]["cpuManager"],
                json!({"policy": "static", "reservedSystemCPUs": "0-1"})
            );
            send.send_response(ok(&body));
        }
        Scenario::ConflictStatusAndEvent { policy, winner } => {
            let (req, send) = handle.next_request().await.expect("status request");
            assert_eq!(req.method(), http::Method::PATCH);
            assert_eq!(
                req.uri().to_string(),
                format!("/apis/nodetopo.io/v1alpha1/noderesourcepolicies/{policy}/status?&force=true&fieldManager=nodetopo-operator")
            );
            let body = body_json(req).await;
            let status = &body["status"];
            assert_eq!(status["matchedNodes"], json!(1));
            assert_eq!(status["overriddenNodes"], json!(1));
            assert_eq!(status["governedNodes"], json!(0));
            assert_eq!(status["observedGeneration"], json!(2));
            let conflict = status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Conflict")
                .unwrap();
            assert_eq!(
                conflict,
                &json!({
                    "type": "Conflict", "status": "True", "reason": "TiedPriority",
                    "message": format!("1 matched node(s) are governed by a policy of equal priority and an earlier name (or higher priority): {winner}"),
                    "observedGeneration": 2,
                    "lastTransitionTime": "2023-11-14T22:13:20Z"
                })
            );
            send.send_response(ok(&json!({
                "apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeResourcePolicy",
                "metadata": {"name": policy}, "spec": {}
            })));
            let (req, send) = handle.next_request().await.expect("event request");
            assert_eq!(req.method(), http::Method::POST);
            assert_eq!(
                req.uri().to_string(),
                "/apis/events.k8s.io/v1/namespaces/default/events?"
            );
            let ev = body_json(req).await;
            assert_eq!(ev["type"], json!("Warning"));
            assert_eq!(ev["reason"], json!("TiedPriority"));
            assert_eq!(ev["regarding"]["kind"], json!("NodeResourcePolicy"));
            assert_eq!(ev["regarding"]["name"], json!(policy));
            assert_eq!(ev["reportingController"], json!("nodetopo-operator"));
            send.send_response(ok(&ev));
        }
        Scenario::NoRequests => {}
    }
    // Nothing else may come out.
    let extra = tokio::time::timeout(Duration::from_millis(50), handle.next_request()).await;
    assert!(
        matches!(extra, Err(_) | Ok(None)),
        "unexpected extra request"
    );
}

#[tokio::test]
async fn node_without_topology_gets_applied() {
    let (ctx, handle) = context(vec![policy("telco", 0)], vec![node("w1")], vec![]);
    let server = tokio::spawn(verify(
        handle,
        Scenario::CreateNodeTopology {
            node: "w1",
            policy: "telco",
        },
    ));
    let action = reconcile_node(Arc::new(node("w1")), ctx.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::await_change());
    drop(ctx);
    server.await.unwrap();
}

#[tokio::test]
async fn node_up_to_date_writes_nothing() {
    let p = policy("telco", 0);
    let compiled = compile(std::slice::from_ref(&p));
    let desired = desire_node(&compiled, &node("w1"));
    let mut nt = NodeTopology::new("w1", desired.spec.clone());
    nt.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: "w1".into(),
        uid: "uid-w1".into(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    let (ctx, handle) = context(vec![p.clone()], vec![node("w1")], vec![nt]);
    let server = tokio::spawn(verify(handle, Scenario::NoRequests));
    reconcile_node(Arc::new(node("w1")), ctx.clone())
        .await
        .unwrap();
    drop(ctx);
    server.await.unwrap();
}

#[tokio::test]
async fn tie_loser_gets_conflict_status_and_event() {
    let (alpha, zeta) = (policy("alpha", 0), policy("zeta", 0));
    let (ctx, handle) = context(vec![alpha, zeta.clone()], vec![node("w1")], vec![]);
    let server = tokio::spawn(verify(
        handle,
        Scenario::ConflictStatusAndEvent {
            policy: "zeta",
            winner: "alpha",
        },
    ));
    reconcile_policy(Arc::new(zeta), ctx.clone()).await.unwrap();
    drop(ctx);
    server.await.unwrap();
}

#[tokio::test]
async fn unchanged_status_writes_nothing() {
    let p = policy("telco", 0);
    let nodes = vec![node("w1")];
    let compiled = compile(std::slice::from_ref(&p));
    let desired = desire_node(&compiled, &nodes[0]);
    let mut nt = NodeTopology::new("w1", desired.spec);
    nt.metadata.generation = Some(1);
    nt.status = Some(NodeTopologyStatus {
        observed_generation: Some(1),
        ..Default::default()
    });
    let first = decide::decide(
        std::slice::from_ref(&p),
        &nodes,
        std::slice::from_ref(&nt),
        &fixed_now(),
    );
    let mut with_status = p.clone();
    with_status.status = Some(first.statuses["telco"].clone());
    let (ctx, handle) = context(vec![with_status.clone()], nodes, vec![nt]);
    let server = tokio::spawn(verify(handle, Scenario::NoRequests));
    reconcile_policy(Arc::new(with_status), ctx.clone())
        .await
        .unwrap();
    drop(ctx);
    server.await.unwrap();
}

#[tokio::test]
async fn policy_with_a_node_in_progress_requeues_after_its_deadline() {
    use nodetopo_crds::rollout::{RolloutMode, RolloutSpec};
    use nodetopo_crds::{APPLY_GENERATION_ANNOTATION, APPLY_STARTED_ANNOTATION};
    let mut p = policy("telco", 0);
    p.spec.rollout = Some(RolloutSpec {
        mode: RolloutMode::Apply,
        progress_deadline_seconds: Some(30),
        ..Default::default()
    });
    let nodes = vec![node("w1")];
    let compiled = compile(std::slice::from_ref(&p));
    let desired = desire_node(&compiled, &nodes[0]);
    let mut nt = NodeTopology::new("w1", desired.spec);
    nt.metadata.generation = Some(1);
    // Marked 10 s before the reconcile: its deadline is 20 s away.
    let started = Timestamp::from_second(fixed_now().0.as_second() - 10).unwrap();
    nt.metadata.annotations = Some(
        [
            (APPLY_GENERATION_ANNOTATION.to_string(), "1".to_string()),
            (APPLY_STARTED_ANNOTATION.to_string(), started.to_string()),
        ]
        .into(),
    );
    let first = decide::decide(
        std::slice::from_ref(&p),
        &nodes,
        std::slice::from_ref(&nt),
        &fixed_now(),
    );
    assert!(first.marks.is_empty(), "{:?}", first.marks);
    let mut with_status = p.clone();
    with_status.status = Some(first.statuses["telco"].clone());
    let (ctx, handle) = context(vec![with_status.clone()], nodes, vec![nt]);
    let server = tokio::spawn(verify(handle, Scenario::NoRequests));
    let action = reconcile_policy(Arc::new(with_status), ctx.clone())
        .await
        .unwrap();
    // One second past the deadline, when the node counts failed.
    assert_eq!(action, Action::requeue(Duration::from_secs(21)));
    drop(ctx);
    server.await.unwrap();
}

#[test]
fn backoff_doubles_and_caps() {
    let secs: Vec<u64> = [1, 2, 3, 4, 9, 10, 50]
        .iter()
        .map(|&n| backoff(n).as_secs())
        .collect();
    assert_eq!(secs, vec![1, 2, 4, 8, 256, 300, 300]);
}

#[test]
fn invalid_objects_wait_long_and_transient_errors_back_off() {
    let missing = Error::Missing {
        object: "noderesourcepolicy/p".into(),
        field: "metadata.name",
    };
    assert!(!missing.is_transient());
    for n in 1..=12 {
        assert_eq!(retry_delay(false, n), INVALID_RETRY, "n={n}");
        assert_eq!(retry_delay(true, n), backoff(n), "n={n}");
    }
    assert_eq!(retry_delay(true, 1), Duration::from_secs(1));
    println!("12 failure counts checked for both classes");
}
