//! Mock API server tests of the two writes: exact method, URI (field manager, force) and body.

use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use nodetopo_crds::{NodeTopologySpec, PolicyRef};
use serde_json::json;

use super::*;

fn desired() -> DesiredNode {
    DesiredNode {
        node: "worker-1".into(),
        node_uid: "uid-1".into(),
        spec: NodeTopologySpec {
            policy_ref: Some(PolicyRef {
                name: "telco".into(),
                generation: 2,
            }),
            ..Default::default()
        },
    }
}

#[tokio::test]
async fn node_topology_apply_request() {
    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let api: Api<NodeTopology> = Api::all(Client::new(svc, "default"));
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("one request");
        assert_eq!(req.method(), http::Method::PATCH);
        assert_eq!(
            req.uri().to_string(),
            "/apis/nodetopo.io/v1alpha1/nodetopologies/worker-1?&force=true&fieldManager=nodetopo-operator"
        );
        assert_eq!(
            req.headers().get("content-type").unwrap(),
            "application/apply-patch+yaml"
        );
        let body: serde_json::Value =
            serde_json::from_slice(&req.into_body().collect_bytes().await.unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "apiVersion": "nodetopo.io/v1alpha1",
                "kind": "NodeTopology",
                "metadata": {
                    "name": "worker-1",
                    "ownerReferences": [{
                        "apiVersion": "v1", "kind": "Node", "name": "worker-1",
                        "uid": "uid-1", "controller": true
                    }]
                },
                "spec": {
                    "cpuManager": {"policy": "none"},
                    "topologyManager": {"policy": "none", "scope": "container"},
                    "policyRef": {"name": "telco", "generation": 2}
                }
            })
        );
        let mut nt = NodeTopology::new("worker-1", desired().spec);
        nt.metadata.generation = Some(1);
        send.send_response(
            Response::builder()
                .body(Body::from(serde_json::to_vec(&nt).unwrap()))
                .unwrap(),
        );
    });
    let out = apply_node_topology(&api, &desired()).await.unwrap();
    assert_eq!(out.metadata.generation, Some(1));
    server.await.unwrap();
}

#[tokio::test]
async fn policy_status_apply_request_and_error_mapping() {
    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let api: Api<NodeResourcePolicy> = Api::all(Client::new(svc, "default"));
    let status = NodeResourcePolicyStatus {
        observed_generation: Some(4),
        matched_nodes: 3,
        governed_nodes: 2,
        applied_nodes: 1,
        ..Default::default()
    };
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("one request");
        assert_eq!(req.method(), http::Method::PATCH);
        assert_eq!(
            req.uri().to_string(),
            "/apis/nodetopo.io/v1alpha1/noderesourcepolicies/telco/status?&force=true&fieldManager=nodetopo-operator"
        );
        let body: serde_json::Value =
            serde_json::from_slice(&req.into_body().collect_bytes().await.unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "apiVersion": "nodetopo.io/v1alpha1",
                "kind": "NodeResourcePolicy",
                "status": {
                    "observedGeneration": 4, "conditions": [],
                    "matchedNodes": 3, "governedNodes": 2, "appliedNodes": 1,
                    "invalidNodes": 0, "overriddenNodes": 0,
                    "updatedNodes": 0, "pendingNodes": 0, "failedNodes": 0
                }
            })
        );
        let err = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "conflict", "reason": "Conflict", "code": 409});
        send.send_response(
            Response::builder()
                .status(409)
                .body(Body::from(serde_json::to_vec(&err).unwrap()))
                .unwrap(),
        );
    });
    let err = apply_policy_status(&api, "telco", &status)
        .await
        .unwrap_err();
    assert_eq!(err.category(), "conflict");
    assert!(
        err.to_string()
            .starts_with("apply NodeResourcePolicy status noderesourcepolicy/telco: "),
        "{err}"
    );
    server.await.unwrap();
}
