//! Mock-API tests: the exact requests of the pod watch and the status apply.

use super::*;
use http::{Request, Response};
use kube::client::Body;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn mock() -> (Client, Handle) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(svc, "default"), handle)
}

async fn body_json(req: Request<Body>) -> serde_json::Value {
    let bytes = req.into_body().collect_bytes().await.expect("body");
    serde_json::from_slice(&bytes).expect("json body")
}

fn pod_json(name: &str, uid: &str, cpu: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid,
                     "creationTimestamp": "2024-01-01T00:00:00Z", "resourceVersion": "5"},
        "spec": {"nodeName": "node-a", "containers": [
            {"name": "app", "resources": {"limits": {"cpu": cpu, "memory": "1Gi"}}}]}
    })
}

#[tokio::test]
async fn status_apply_request_is_exact() {
    let (client, mut handle) = mock();
    let api: Api<NodeTopology> = Api::all(client);
    let status = NodeTopologyStatus {
        observed_generation: Some(4),
        ..Default::default()
    };
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("one request");
        assert_eq!(req.method(), http::Method::PATCH);
        assert_eq!(
            req.uri().to_string(),
            "/apis/nodetopo.io/v1alpha1/nodetopologies/node-a/status?&force=true&fieldManager=nodetopo-agent"
        );
        assert_eq!(
            req.headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/apply-patch+yaml")
        );
        let body = body_json(req).await;
        assert_eq!(
            body,
            serde_json::json!({
                "apiVersion": "nodetopo.io/v1alpha1",
                "kind": "NodeTopology",
                "status": {"observedGeneration": 4, "conditions": [], "allocations": [], "rejections": []}
            })
        );
        let reply = serde_json::json!({
            "apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeTopology",
            "metadata": {"name": "node-a"},
            "spec": {"cpuManager": {"policy": "none"}, "topologyManager": {"policy": "none"}},
            "status": body["status"],
        });
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&reply).expect("json"),
        )));
    });
    apply_status(&api, "node-a", &status)
        .await
        .expect("applied");
    server.await.expect("server");
}

#[tokio::test]
async fn pod_watch_lists_then_watches_the_node_and_maps_events() {
    let (client, mut handle) = mock();
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("list");
        assert_eq!(req.method(), http::Method::GET);
        assert_eq!(
            req.uri().to_string(),
            "/api/v1/pods?&fieldSelector=spec.nodeName%3Dnode-a&limit=500"
        );
        let list = serde_json::json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "10"},
            "items": [pod_json("a", "ua", "2")]
        });
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&list).expect("json"),
        )));
        let (req, send) = handle.next_request().await.expect("watch");
        assert_eq!(req.method(), http::Method::GET);
        assert_eq!(
            req.uri().to_string(),
            "/api/v1/pods?&watch=true&timeoutSeconds=290&fieldSelector=spec.nodeName%3Dnode-a&allowWatchBookmarks=true&resourceVersion=10"
        );
        let mut lines = Vec::new();
        for (t, obj) in [
            ("ADDED", pod_json("b", "ub", "4")),
            ("DELETED", pod_json("a", "ua", "2")),
            ("ADDED", pod_json("bad", "uc", "4x")),
        ] {
            lines.extend(
                serde_json::to_vec(&serde_json::json!({"type": t, "object": obj})).expect("json"),
            );
            lines.push(b'\n');
        }
        send.send_response(Response::new(Body::from(lines)));
    });
    let events: Vec<Event> = pod_events(client, "node-a").take(5).collect().await;
    server.await.expect("server");
    let summary: Vec<String> = events
        .iter()
        .map(|e| match e {
            Event::PodsSynced(p) => format!(
                "synced {:?}",
                p.iter().map(|p| p.pod.key()).collect::<Vec<_>>()
            ),
            Event::PodProblems(p) => format!("problems {p:?}"),
            Event::PodUpsert(p) => format!(
                "upsert {} cpu {:?}",
                p.pod.key(),
                p.pod.containers[0].requests.cpu_millis
            ),
            Event::PodDelete(u) => format!("delete {u}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        summary,
        [
            "synced [\"default/a\"]",
            "problems []",
            "upsert default/b cpu Some(4000)",
            "delete ua",
            "problems [\"pod default/bad container app: resources.limits.cpu: invalid quantity \\\"4x\\\": unknown suffix\"]",
        ]
    );
}
