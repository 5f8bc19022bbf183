//! The agent binary in cluster mode against a real apiserver (its own control plane, which
//! the test restarts): a Node, its NodeTopology spec as the operator would write it, and
//! Guaranteed Pods bound to the node by `nodeName` (no scheduler, no kubelet). The agent must
//! publish topology, pools and allocations, release CPUs when a pod goes, apply a spec change
//! (observedGeneration), give the same status after its own restart and survive an apiserver
//! restart. It also counts the status writes for a burst of 100 pod events.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use nodetopo_controlplane::{process, ControlPlane};
use serde_json::{json, Value};

const NODE: &str = "agent-node";
const NS: &str = "agent-test";
const PRESET: &str = "epyc-7702p";

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        process::kill_group(&mut self.0);
    }
}

fn start_agent(cp: &ControlPlane, bin: &PathBuf, run: usize) -> Agent {
    let state = cp.dir().join("agent-state");
    std::fs::create_dir_all(&state).expect("state dir");
    let log = std::fs::File::create(cp.dir().join(format!("agent-{run}.log"))).expect("log");
    let mut cmd = Command::new(bin);
    cmd.args(["run", "--preset", PRESET, "--node-name", NODE])
        .arg("--state-dir")
        .arg(&state)
        .arg("--kubelet-state")
        .arg(cp.dir().join("kubelet/cpu_manager_state"))
        .env("KUBECONFIG", cp.kubeconfig())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    Agent(process::spawn(cmd, "nodetopo-agent").expect("starting the agent"))
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

async fn wait_status<F: Fn(&Value) -> bool>(api: &Api<DynamicObject>, what: &str, ok: F) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let last = match api.get(NODE).await {
            Ok(o) => {
                let s = o.data["status"].clone();
                if ok(&s) {
                    return s;
                }
                s.to_string()
            }
            Err(e) => e.to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "{what}: not reached after 60s; last status: {last:.2000}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn allocations(s: &Value) -> Vec<(String, String)> {
    s["allocations"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    (
                        x["pod"].as_str().unwrap_or("").to_string(),
                        x["cpus"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn agent_cluster_mode_against_a_real_apiserver() {
    let cp = match ControlPlane::start() {
        Ok(Some(cp)) => cp,
        Ok(None) => return,
        Err(e) => panic!("control plane: {e}"),
    };
    let Some(bin) = nodetopo_controlplane::workspace_binary("nodetopo-agent") else {
        return;
    };
    cp.install_crds().await.expect("CRDs");
    cp.ensure_service_account(NS, "default")
        .await
        .expect("namespace");
    let client = cp.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": NODE}})).expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("nodetopo.io", "v1alpha1", "NodeTopology"),
        "nodetopologies",
    );
    let nt: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let spec = |tm: &str| {
        json!({"apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeTopology",
        "metadata": {"name": NODE},
        "spec": {"cpuManager": {"policy": "static", "reservedSystemCPUs": "0,64"},
                 "topologyManager": {"policy": tm}}})
    };
    let op = PatchParams::apply(nodetopo_crds::OPERATOR_FIELD_MANAGER).force();
    nt.patch(NODE, &op, &Patch::Apply(spec("best-effort")))
        .await
        .expect("spec");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for (n, c) in [("g-1", 4), ("g-2", 2)] {
        pods.create(&PostParams::default(), &pod(n, c))
            .await
            .expect("pod");
    }

    let mut agent = start_agent(&cp, &bin, 1);
    let s = wait_status(&nt, "two allocations at generation 1", |s| {
        s["observedGeneration"] == 1 && allocations(s).len() == 2
    })
    .await;
    assert_eq!(
        s["topology"]["cpus"], "0-127",
        "preset {PRESET}: {}",
        s["topology"]
    );
    assert!(s["pools"].is_object(), "pools published: {s}");
    println!(
        "agent published: topology cpus {}, pools {}, allocations {:?}",
        s["topology"]["cpus"],
        s["pools"],
        allocations(&s)
    );

    // Deleting a pod releases its CPUs.
    pods.delete("g-2", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    wait_status(&nt, "g-2 released", |s| {
        allocations(s)
            .iter()
            .all(|(p, _)| p != &format!("{NS}/g-2"))
            && allocations(s).len() == 1
    })
    .await;
    println!("deleting {NS}/g-2 released its CPUs");

    // An operator spec change is applied.
    nt.patch(NODE, &op, &Patch::Apply(spec("single-numa-node")))
        .await
        .expect("spec 2");
    let before_restart = wait_status(&nt, "generation 2 applied", |s| {
        s["observedGeneration"] == 2
    })
    .await;
    println!("spec change applied: observedGeneration 2");

    // An agent restart gives the same status.
    drop(agent);
    agent = start_agent(&cp, &bin, 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = wait_status(&nt, "same allocations after agent restart", |s| {
        s["observedGeneration"] == 2 && allocations(s) == allocations(&before_restart)
    })
    .await;
    println!("agent restart: same allocations {:?}", allocations(&after));

    // An apiserver restart (same etcd) is survived: the agent sees a pod created afterwards.
    let took = cp.restart_apiserver().expect("apiserver restart");
    println!("apiserver restarted in {took:?}");
    let client = cp.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let nt: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    pods.create(&PostParams::default(), &pod("g-3", 2))
        .await
        .expect("pod after restart");
    wait_status(&nt, "g-3 admitted after the apiserver restart", |s| {
        allocations(s)
            .iter()
            .any(|(p, _)| p == &format!("{NS}/g-3"))
            && allocations(s).len() == 2
    })
    .await;
    println!("apiserver restart survived: g-3 admitted, g-1 kept");

    // Burst: 100 pod events (50 creates, 50 deletes); count NodeTopology status writes.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watch_api = nt.clone();
    let watch = tokio::spawn(async move {
        let cfg = watcher::Config::default().fields(&format!("metadata.name={NODE}"));
        let mut stream = watcher::watcher(watch_api, cfg).boxed();
        while let Some(ev) = stream.next().await {
            if let Ok(Event::Apply(o)) = ev {
                let _ = tx.send(o.metadata.resource_version.unwrap_or_default());
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    while rx.try_recv().is_ok() {}
    let t = Instant::now();
    for i in 0..50 {
        pods.create(&PostParams::default(), &pod(&format!("burst-{i}"), 1))
            .await
            .expect("burst pod");
    }
    for i in 0..50 {
        pods.delete(
            &format!("burst-{i}"),
            &DeleteParams::default().grace_period(0),
        )
        .await
        .expect("delete burst pod");
    }
    wait_status(&nt, "burst settled", |s| allocations(s).len() == 2).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut writes = std::collections::BTreeSet::new();
    while let Ok(rv) = rx.try_recv() {
        writes.insert(rv);
    }
    watch.abort();
    println!(
        "burst of 100 pod events (50 creates, 50 deletes) in {:?}: {} NodeTopology writes (distinct resourceVersions seen by a watch)",
        t.elapsed(),
        writes.len()
    );
    assert!(
        !writes.is_empty() && writes.len() <= 100,
        "status writes for the burst: {}",
        writes.len()
    );
    drop(agent);
}
