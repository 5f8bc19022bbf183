//! The agent binary in cluster mode against a real apiserver (its own control plane, which
//! the test restarts): a Node, its NodeTopology spec as the operator would write it, and
//! Guaranteed Pods bound to the node by `nodeName` (no scheduler, no kubelet). The agent must
//! publish topology, pools and allocations, release CPUs when a pod goes, apply a spec change
//! (observedGeneration), give the same status after its own restart and survive an apiserver
//! restart. It also counts the status writes for a burst of 100 pod events.
//!
//! `KubeletAgreement`: the agent's `--kubelet-state` points into a temp kubelet dir. The test
//! has the kubelet's own CPU manager code (the kubelet oracle, k8s.io/kubernetes v1.37.2)
//! admit the same pods on the same machine with its checkpoint on disk, and hands that real
//! v4 `cpu_manager_state` file to the agent: with no file the condition is False
//! (`NoKubeletState`, never agreement); with the kubelet's file for the same admissions True
//! (`Agree`); with the kubelet's file for the pods admitted in the other order False
//! (`Disagree`, naming each differing container); with the first file's checksum altered False
//! (`KubeletStateChecksumMismatch`); with the file removed False again.

mod agent_common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_common::{apply_spec, node_with_pods, nodetopologies, Agent, PRESET};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::runtime::watcher::{self, Event};
use nodetopo_controlplane::fixture::Fixture;
use nodetopo_controlplane::ControlPlane;
use serde_json::{json, Value};

const NODE: &str = "agent-node";
const NS: &str = "agent-test";

fn start_agent(cp: &ControlPlane, bin: &Path, run: usize) -> Agent {
    agent_common::start_agent(
        cp,
        bin,
        NODE,
        &cp.dir().join("agent-state"),
        &cp.dir().join("kubelet/cpu_manager_state"),
        &[],
        &cp.dir().join(format!("agent-{run}.log")),
    )
}

fn pod(name: &str, cpus: u32) -> Pod {
    agent_common::pod(NS, NODE, name, cpus)
}

async fn wait_status<F: Fn(&Value) -> bool>(api: &Api<DynamicObject>, what: &str, ok: F) -> Value {
    let ok = &ok;
    nodetopo_controlplane::wait::wait_for(
        what,
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async move {
            match api.get(NODE).await {
                Ok(o) => {
                    let s = o.data["status"].clone();
                    if ok(&s) {
                        Ok(s)
                    } else {
                        Err(format!("last status: {s}"))
                    }
                }
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await
}

/// The agent's preset as the kubelet oracle's machine: CPUs as `[id, core, socket, numa,
/// uncore]` and NUMA nodes with their distance rows.
fn oracle_machine() -> Value {
    let topo = nodetopo_engine::presets::build(PRESET).expect("preset");
    let cpus: Vec<[usize; 5]> = topo
        .cpus()
        .iter()
        .map(|c| [c.id, c.core, c.socket, c.numa, c.uncore])
        .collect();
    let numa: Vec<Value> = topo
        .numa_nodes()
        .iter()
        .map(|n| json!({"id": n.id, "distances": n.distances.clone().unwrap_or_default()}))
        .collect();
    json!({"cpus": cpus, "numa": numa})
}

/// The `cpu_manager_state` file the kubelet's static policy (through the oracle) writes after
/// admitting `admits` (pod UID, pod name, CPUs of its one container `app`) in that order,
/// with the agent's configuration: reserved CPUs 0,64, topology manager best-effort.
fn kubelet_checkpoint(oracle: &Path, admits: &[(&str, &str, u32)]) -> String {
    let ops: Vec<Value> = admits
        .iter()
        .map(|(uid, name, cpus)| {
            let r = json!({"cpu": cpus.to_string(), "memory": "256Mi"});
            json!({"op": "admit", "pod": {"uid": uid, "name": name,
                "containers": [{"name": "app", "requests": r, "limits": r}]}})
        })
        .collect();
    let case = json!({"id": "kubelet-agreement", "machine": oracle_machine(),
        "reservedCPUs": "0,64", "numReserved": 2, "tmPolicy": "best-effort",
        "tmScope": "container", "ops": ops, "checkpoint": true});
    let mut child = Command::new(oracle)
        .arg("-timeout=30s")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the kubelet oracle");
    {
        let mut stdin = child.stdin.take().expect("oracle stdin");
        writeln!(stdin, "{case}").expect("writing the case");
    }
    let out = child
        .wait_with_output()
        .expect("the kubelet oracle's answer");
    assert!(out.status.success(), "kubelet oracle: {}", out.status);
    let answer: Value = serde_json::from_slice(&out.stdout).expect("one JSON answer");
    assert!(
        answer["error"].is_null() && answer["configError"].is_null(),
        "kubelet oracle: {answer}"
    );
    let results = answer["results"].as_array().cloned().unwrap_or_default();
    assert!(
        results.len() == admits.len() && results.iter().all(|r| r["admit"] == true),
        "the kubelet admits every pod: {answer}"
    );
    let cpus: Vec<String> = results
        .iter()
        .zip(admits)
        .map(|(r, (_, name, _))| format!("{name} {}", r["cpus"]["app"]))
        .collect();
    println!("kubelet (oracle) admitted in order: {}", cpus.join(", "));
    answer["checkpoint"]
        .as_str()
        .filter(|c| !c.is_empty())
        .expect("the oracle returns the checkpoint file")
        .to_string()
}

/// Replaces the kubelet state file at once (write a sibling, rename), as the kubelet does.
fn install_kubelet_state(path: &Path, text: &str) {
    let dir = path.parent().expect("state dir");
    std::fs::create_dir_all(dir).expect("kubelet dir");
    let tmp = dir.join(".cpu_manager_state.tmp");
    std::fs::write(&tmp, text).expect("writing the kubelet state");
    std::fs::rename(&tmp, path).expect("renaming the kubelet state");
}

/// (status, reason, message) of a status condition.
fn condition(s: &Value, type_: &str) -> Option<(String, String, String)> {
    s["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            let f = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (f("status"), f("reason"), f("message"))
        })
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
    let Some(Fixture { cp, bin }) = Fixture::start("nodetopo-agent", NS).await else {
        return;
    };
    let client = cp.client();
    let (_, nt, pods) = node_with_pods(
        &client,
        NS,
        NODE,
        json!({"policy": "best-effort"}),
        &[("g-1", 4), ("g-2", 2)],
    )
    .await;

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

    // KubeletAgreement against real kubelet checkpoints.
    let kubelet_state = cp.dir().join("kubelet/cpu_manager_state");
    let agreement = |s: &Value| condition(s, "KubeletAgreement").unwrap_or_default();
    let (st, reason, msg) = agreement(&s);
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "NoKubeletState"),
        "no checkpoint file is not agreement: {msg}"
    );
    println!("KubeletAgreement, no file: {st}/{reason} ({msg})");
    let mut kubelet_cases = 1;
    if let Some(oracle) = nodetopo_controlplane::kubelet_oracle().expect("kubelet oracle") {
        // The pods in the agent's admission order (status.allocations is in that order; the
        // two pods were created within the same second).
        let ours = allocations(&s);
        let mut admits: Vec<(String, &str, u32)> = Vec::new();
        for (pod, _) in &ours {
            let name = pod.rsplit('/').next().unwrap_or_default();
            let (name, cpus) = match name {
                "g-1" => ("g-1", 4),
                "g-2" => ("g-2", 2),
                other => panic!("unexpected allocation for {other}"),
            };
            let uid = pods.get(name).await.expect("pod").metadata.uid;
            admits.push((uid.expect("pod uid"), name, cpus));
        }
        let in_order: Vec<(&str, &str, u32)> = admits
            .iter()
            .map(|(u, n, c)| (u.as_str(), *n, *c))
            .collect();
        let reversed: Vec<(&str, &str, u32)> = in_order.iter().rev().copied().collect();

        // The kubelet admits the same pods in the same order: its file agrees.
        let agree = kubelet_checkpoint(&oracle, &in_order);
        let file: Value = serde_json::from_str(&agree).expect("checkpoint JSON");
        assert!(
            file["data"].is_string() && file["dataChecksum"].is_u64(),
            "the kubelet 1.37 writes checkpoint v4 (data + dataChecksum): {agree}"
        );
        install_kubelet_state(&kubelet_state, &agree);
        let s2 = wait_status(&nt, "KubeletAgreement True", |s| agreement(s).0 == "True").await;
        let (st, reason, msg) = agreement(&s2);
        assert_eq!(reason, "Agree", "{msg}");
        assert_eq!(s2["kubelet"]["policyName"], "static", "{}", s2["kubelet"]);
        let seen = s2["kubelet"]["assignments"]
            .as_array()
            .map(|a| a.len())
            .unwrap_or(0);
        assert_eq!(seen, 2, "the kubelet's two assignments are published");
        println!(
            "KubeletAgreement, kubelet v4 file for the same admissions: {st}/{reason} ({msg}); agent allocations {ours:?}"
        );

        // The kubelet admitted the pods in the other order: different CPUs.
        let other = kubelet_checkpoint(&oracle, &reversed);
        install_kubelet_state(&kubelet_state, &other);
        let s3 = wait_status(&nt, "KubeletAgreement Disagree", |s| {
            agreement(s).1 == "Disagree"
        })
        .await;
        let (st, reason, msg) = agreement(&s3);
        assert_eq!(st, "False");
        for c in [format!("{NS}/g-1/app"), format!("{NS}/g-2/app")] {
            assert!(msg.contains(&c), "the difference names {c}: {msg}");
        }
        assert!(
            msg.contains("kubelet \"") && msg.contains("nodetopo \""),
            "{msg}"
        );
        println!("KubeletAgreement, kubelet v4 file for the other admission order: {st}/{reason} ({msg})");

        // The agreeing file with its checksum altered: the kubelet would refuse it.
        let mut corrupt: Value = serde_json::from_str(&agree).expect("checkpoint JSON");
        let sum = corrupt["dataChecksum"].as_u64().expect("dataChecksum");
        corrupt["dataChecksum"] = json!(sum ^ 1);
        install_kubelet_state(&kubelet_state, &corrupt.to_string());
        let s4 = wait_status(&nt, "KubeletAgreement checksum mismatch", |s| {
            agreement(s).1 == "KubeletStateChecksumMismatch"
        })
        .await;
        let (st, reason, msg) = agreement(&s4);
        assert_eq!(st, "False");
        assert!(
            msg.contains("dataChecksum") && msg.contains(&(sum ^ 1).to_string()),
            "the message names the field and the recorded value: {msg}"
        );
        println!("KubeletAgreement, dataChecksum altered: {st}/{reason} ({msg})");

        // The file goes away: no agreement.
        std::fs::remove_file(&kubelet_state).expect("removing the kubelet state");
        let s5 = wait_status(&nt, "KubeletAgreement without a file", |s| {
            agreement(s).1 == "NoKubeletState"
        })
        .await;
        let (st, reason, msg) = agreement(&s5);
        assert_eq!(st, "False");
        println!("KubeletAgreement, file removed: {st}/{reason} ({msg})");
        kubelet_cases += 4;
    }
    println!("KubeletAgreement: {kubelet_cases} cases checked through the API");

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
    apply_spec(&nt, NODE, json!({"policy": "single-numa-node"})).await;
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
    let nt = nodetopologies(&client);
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
