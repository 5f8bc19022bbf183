use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

use super::node_ready_since;

fn node(conditions: serde_json::Value) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "n1"},
        "status": {"conditions": conditions}
    }))
    .expect("node")
}

fn ready(status: &str, beat: Option<&str>) -> serde_json::Value {
    let mut c = serde_json::json!({"type": "Ready", "status": status, "reason": "KubeletReady",
        "message": "kubelet is posting ready status"});
    if let Some(b) = beat {
        c["lastHeartbeatTime"] = b.into();
    }
    serde_json::json!([{"type": "MemoryPressure", "status": "False"}, c])
}

fn at(s: &str) -> Timestamp {
    s.parse().expect("ts")
}

#[test]
fn node_ready_decisions() {
    let since = at("2026-11-27T08:00:10.700Z");
    let cases: Vec<(&str, Node, Result<(), &str>)> = vec![
        (
            "no status",
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}})).expect("n"),
            Err("has no Ready condition"),
        ),
        (
            "no Ready condition",
            node(serde_json::json!([{"type": "MemoryPressure", "status": "False",
                "lastHeartbeatTime": "2026-11-27T08:00:30Z"}])),
            Err("has no Ready condition"),
        ),
        (
            "Ready False",
            node(ready("False", Some("2026-11-27T08:00:30Z"))),
            Err("Ready=False"),
        ),
        (
            "Ready Unknown",
            node(ready("Unknown", Some("2026-11-27T08:00:30Z"))),
            Err("Ready=Unknown"),
        ),
        (
            "stale heartbeat",
            node(ready("True", Some("2026-11-27T08:00:09Z"))),
            Err("lastHeartbeatTime 2026-11-27T08:00:09Z is older than the kubelet restart at 2026-11-27T08:00:10Z"),
        ),
        (
            "missing heartbeat",
            node(ready("True", None)),
            Err("has no lastHeartbeatTime"),
        ),
        // The API keeps whole seconds: a heartbeat in the restart's second counts.
        ("same second", node(ready("True", Some("2026-11-27T08:00:10Z"))), Ok(())),
        ("fresh heartbeat", node(ready("True", Some("2026-11-27T08:00:12Z"))), Ok(())),
    ];
    for (what, n, want) in &cases {
        let got = node_ready_since(n, since);
        match (want, &got) {
            (Ok(()), Ok(())) => {}
            (Err(w), Err(g)) => assert!(g.contains(w), "{what}: {g} lacks {w}"),
            _ => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
    println!("node_ready_since: {} cases", cases.len());
}
