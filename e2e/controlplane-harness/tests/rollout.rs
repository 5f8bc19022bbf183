//! The rollout end to end against a real apiserver (its own control plane): the operator
//! binary and one agent binary per Node (cluster mode, `--actuation`), each agent running the
//! local executor on its own temp kubelet directory (config file, drop-in directory, state
//! file) with fake restart hooks (shell scripts that log each call). No kubelet runs: the
//! test plays each kubelet's node status updates ([`Heartbeats`]: Ready True with a fresh
//! lastHeartbeatTime every half second), which the agent's verify step waits for after a
//! restart.
//!
//! - Policy `roll` (Apply, maxUnavailable 40% of 5 = 2) over r1..r5: r3's start hook fails
//!   once, and r4 (same batch) finishes only after r3 has failed. Every poll checks that at most 2 nodes are marked and without a verdict, and that
//!   no node of the second batch is marked before the first batch has its verdicts. r3 ends
//!   Applied False/Failed with its files restored; r4 (same batch) updated; r5 never marked;
//!   the policy counts updated 3, failed 1, pending 1 and Progressing False/Paused.
//! - Policy `watch` (no rollout section: Observe) over o1: nothing marked, Applied
//!   False/ObserveOnly, no drop-in written.
//! - Policy `evict` (Apply, eviction Evict) over e1, whose kubelet state gives pod `db` CPUs
//!   the new reserved set takes (plan EvictFirst). A PodDisruptionBudget (minAvailable 1, its
//!   status set as the disruption controller would: 1 healthy, 0 disruptions allowed) covers
//!   `db`: the real server refuses the eviction (429), the pod stays, and e1 reports
//!   Applied False/WaitingForEviction naming the refusal.
//!
//! [`progress_deadline_fails_a_silent_node_and_its_late_verdict_wins`]: policy `late` (Apply,
//! progressDeadlineSeconds 3) over d1 (no agent) and d2: d1 is marked, its deadline passes,
//! the policy shows it failed (`ProgressDeadlineExceeded`) and Progressing False/Paused, d2 is
//! never marked; then d1's agent starts late, its verdict wins, and the rollout completes.
//!
//! [`accepted_eviction_then_replan`]: policy `evict-ok` (Apply, eviction Evict, no PDB) over
//! a1, whose pod `db` holds CPUs the new reserved set takes (EvictFirst). The real server
//! accepts the eviction (the pod only gets a deletionTimestamp: no kubelet); the test plays
//! the kubelet (drops `db`'s entries from the state file, then deletes the pod with grace 0);
//! the agent re-plans and applies. Applied goes WaitingForEviction, then RestartOnly or
//! StateRewritten, and the final status.change lists the eviction and the apply.
//!
//! [`node_not_ready_after_the_restart_rolls_back`]: policy `nr` (Apply, maxUnavailable 1)
//! over n1 and n2; n1's heartbeat stops before the rollout (the node lifecycle controller's
//! Ready Unknown is written), so n1's apply fails verification after
//! `--actuation-verify-seconds 3`: drop-in removed and state file restored byte for byte, the
//! kubelet restarted again (hooks stop, start, stop, start), Applied False/Failed naming Node
//! n1 and Ready=Unknown, the rollout paused with n2 never marked.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use nodetopo_controlplane::{process, ControlPlane};
use nodetopo_crds::{NodeResourcePolicy, NodeTopology};
use serde_json::{json, Value};

const NS: &str = "rollout-test";
const PRESET: &str = "epyc-7303-2p";
const ANNOTATION: &str = nodetopo_crds::APPLY_GENERATION_ANNOTATION;

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        process::kill_group(&mut self.0);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn start_operator(cp: &ControlPlane, bin: &Path) -> Proc {
    let log = std::fs::File::create(cp.dir().join("operator.log")).expect("log");
    let mut cmd = Command::new(bin);
    cmd.args(["--no-leader-election", "--metrics-addr"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .env("KUBECONFIG", cp.kubeconfig())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    Proc(process::spawn(cmd, "nodetopo-operator").expect("starting the operator"))
}

/// A node's temp kubelet directory with the kubelet config, an empty drop-in directory, an
/// optional state file and the fake hooks; `fail_start_once` makes the first start fail;
/// `gated` makes the start wait until the test creates the file `release`.
fn kubelet_dir(
    root: &Path,
    node: &str,
    state: Option<&str>,
    fail_start_once: bool,
    gated: bool,
) -> PathBuf {
    let d = root.join(format!("kubelet-{node}"));
    std::fs::create_dir_all(d.join("conf.d")).expect("kubelet dir");
    std::fs::write(
        d.join("config.yaml"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0,32\"\ntopologyManagerPolicy: none\n",
    )
    .expect("kubelet config");
    if let Some(s) = state {
        std::fs::write(d.join("cpu_manager_state"), s).expect("state");
    }
    let log = d.join("hooks.log");
    let script = |name: &str, body: String| {
        let p = d.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}")).expect("hook");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    script("stop.sh", format!("echo stop >> {}\n", log.display()));
    let fail = if fail_start_once {
        format!(
            "if [ ! -e {m} ]; then touch {m}; echo start-failed >> {l}; echo 'kubelet.service: start failed' >&2; exit 1; fi\n",
            m = d.join("failed-once").display(),
            l = log.display()
        )
    } else {
        String::new()
    };
    let gate = if gated {
        format!(
            "i=0; while [ ! -e {r} ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done\n",
            r = d.join("release").display()
        )
    } else {
        String::new()
    };
    // The second between call and verdict keeps a node visibly in progress.
    script(
        "start.sh",
        format!("sleep 1\n{gate}{fail}echo start >> {}\n", log.display()),
    );
    d
}

fn start_agent(cp: &ControlPlane, bin: &Path, node: &str, kdir: &Path) -> Proc {
    start_agent_with(cp, bin, node, kdir, &[])
}

fn start_agent_with(
    cp: &ControlPlane,
    bin: &Path,
    node: &str,
    kdir: &Path,
    extra: &[&str],
) -> Proc {
    let log = std::fs::File::create(cp.dir().join(format!("agent-{node}.log"))).expect("log");
    let mut cmd = Command::new(bin);
    cmd.args([
        "run",
        "--preset",
        PRESET,
        "--node-name",
        node,
        "--actuation",
    ])
    .arg("--state-dir")
    .arg(kdir.join("agent-state"))
    .arg("--kubelet-state")
    .arg(kdir.join("cpu_manager_state"))
    .arg("--kubelet-config")
    .arg(kdir.join("config.yaml"))
    .arg("--kubelet-config-dir")
    .arg(kdir.join("conf.d"))
    .args([
        "--kubelet-restart",
        "command",
        "--actuation-retry-seconds",
        "1",
    ])
    .arg("--kubelet-stop-command")
    .arg(kdir.join("stop.sh"))
    .arg("--kubelet-start-command")
    .arg(kdir.join("start.sh"))
    .args(extra)
    .env("KUBECONFIG", cp.kubeconfig())
    .env("RUST_LOG", "info")
    .stdin(Stdio::null())
    .stdout(log.try_clone().expect("log"))
    .stderr(log);
    Proc(process::spawn(cmd, "nodetopo-agent").expect("starting an agent"))
}

/// Plays the kubelets' node status updates: every half second each node not stopped gets
/// Ready True with lastHeartbeatTime now (whole seconds, the API's resolution) through the
/// status subresource. Dropping it ends the task.
struct Heartbeats {
    stopped: std::sync::Arc<tokio::sync::Mutex<std::collections::BTreeSet<String>>>,
    beats: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    nodes: Api<Node>,
    task: tokio::task::JoinHandle<()>,
}

fn now_seconds() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second())
        .expect("whole seconds")
        .to_string()
}

impl Heartbeats {
    fn start(nodes: &Api<Node>, names: &[&str]) -> Self {
        let stopped = std::sync::Arc::new(tokio::sync::Mutex::new(std::collections::BTreeSet::<
            String,
        >::new()));
        let beats = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let since = now_seconds();
        let task = tokio::spawn({
            let (stopped, beats, nodes) = (stopped.clone(), beats.clone(), nodes.clone());
            async move {
                loop {
                    {
                        let stopped = stopped.lock().await;
                        for n in names.iter().filter(|n| !stopped.contains(*n)) {
                            let patch = json!({"status": {"conditions": [{
                                "type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status (played by the test)",
                                "lastHeartbeatTime": now_seconds(), "lastTransitionTime": since}]}});
                            if nodes
                                .patch_status(n, &PatchParams::default(), &Patch::Merge(patch))
                                .await
                                .is_ok()
                            {
                                beats.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        });
        Heartbeats {
            stopped,
            beats,
            nodes: nodes.clone(),
            task,
        }
    }

    /// `node`'s kubelet stops posting; the node lifecycle controller's verdict (Ready
    /// Unknown, the last heartbeat kept) is written as it would after its grace period.
    async fn stop(&self, node: &str) {
        let mut stopped = self.stopped.lock().await;
        stopped.insert(node.to_string());
        let n = self.nodes.get_status(node).await.expect("node");
        let beat = n
            .status
            .and_then(|s| s.conditions)
            .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_heartbeat_time)
            .expect("node had a heartbeat");
        let patch = json!({"status": {"conditions": [{
            "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": beat, "lastTransitionTime": now_seconds()}]}});
        self.nodes
            .patch_status(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("node NotReady");
    }

    fn count(&self) -> usize {
        self.beats.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn wait_for<T, F, Fut>(what: &str, secs: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => {
                panic!("{what}: not reached after {secs}s; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// (status, reason, message) of the Applied condition for the object's current generation.
fn applied(nt: &NodeTopology) -> Option<(String, String, String)> {
    let c = nt
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Applied")?;
    (c.observed_generation == nt.metadata.generation)
        .then(|| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn marked(nt: &NodeTopology) -> bool {
    nt.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .is_some_and(|g| Some(g.clone()) == nt.metadata.generation.map(|g| g.to_string()))
}

fn name(nt: &NodeTopology) -> &str {
    nt.metadata.name.as_deref().unwrap_or_default()
}

fn json_of<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("object")
}

#[tokio::test]
async fn rollout_against_a_real_apiserver() {
    let cp = match ControlPlane::start() {
        Ok(Some(cp)) => cp,
        Ok(None) => return,
        Err(e) => panic!("control plane: {e}"),
    };
    let Some(operator) = nodetopo_controlplane::workspace_binary("nodetopo-operator") else {
        return;
    };
    let Some(agent) = nodetopo_controlplane::workspace_binary("nodetopo-agent") else {
        return;
    };
    cp.install_crds().await.expect("CRDs");
    cp.ensure_service_account(NS, "default")
        .await
        .expect("namespace");
    let client = cp.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let policies: Api<NodeResourcePolicy> = Api::all(client.clone());
    let ntopos: Api<NodeTopology> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();

    let rollout_nodes = ["r1", "r2", "r3", "r4", "r5"];
    for (n, pool) in rollout_nodes
        .iter()
        .map(|n| (*n, "roll"))
        .chain([("o1", "observe"), ("e1", "evict")])
    {
        nodes
            .create(
                &pp,
                &json_of(json!({"metadata": {"name": n, "labels": {"pool": pool}}})),
            )
            .await
            .expect("create node");
    }
    let heartbeats = Heartbeats::start(&nodes, &["r1", "r2", "r3", "r4", "r5", "o1", "e1"]);

    // e1's pod `db`, running and ready as a kubelet would report it, covered by a PDB that
    // allows no disruption.
    let db: Pod = pods
        .create(
            &pp,
            &json_of(json!({
                "metadata": {"name": "db", "namespace": NS, "labels": {"app": "db"}},
                "spec": {"nodeName": "e1", "containers": [{"name": "app", "image": "db:1",
                    "resources": {"requests": {"cpu": "2", "memory": "1Gi"},
                                  "limits": {"cpu": "2", "memory": "1Gi"}}}]}
            })),
        )
        .await
        .expect("pod db");
    let uid = db.metadata.uid.clone().expect("pod uid");
    pods.patch_status(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}})),
    )
    .await
    .expect("pod status");
    let pdb = pdbs
        .create(
            &pp,
            &json_of(json!({
                "metadata": {"name": "db", "namespace": NS},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}
            })),
        )
        .await
        .expect("PDB");
    // What the disruption controller (not running here) would write.
    pdbs.patch_status(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "observedGeneration": pdb.metadata.generation,
            "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1,
            "disruptionsAllowed": 0}})),
    )
    .await
    .expect("PDB status");

    // e1's kubelet state: static, reserved 0,32, `db` holds core 1 (CPUs 1 and 33).
    let e1_state: nodetopo_engine::change::KubeletCpuState = json_of(json!({
        "policyName": "static", "defaultCpuSet": "0,2-32,34-63",
        "entries": {uid.clone(): {"app": "1,33"}}
    }));
    let e1_state_text = nodetopo_engine::change::checkpoint::render(
        &e1_state,
        nodetopo_engine::change::checkpoint::CheckpointFormat::V2,
    );

    let root = cp.dir().to_path_buf();
    let mut kdirs = std::collections::BTreeMap::new();
    for n in rollout_nodes.iter().chain(&["o1"]) {
        kdirs.insert(
            n.to_string(),
            kubelet_dir(&root, n, None, *n == "r3", *n == "r4"),
        );
    }
    kdirs.insert(
        "e1".to_string(),
        kubelet_dir(&root, "e1", Some(&e1_state_text), false, false),
    );

    let config = json!({"cpuManager": {"policy": "static", "reservedSystemCPUs": "0-1,32-33"},
                        "topologyManager": {"policy": "best-effort"}});
    let policy = |name: &str, pool: &str, rollout: Option<Value>| -> NodeResourcePolicy {
        let mut spec = config.clone();
        spec["nodeSelector"] = json!({"matchLabels": {"pool": pool}});
        if let Some(r) = rollout {
            spec["rollout"] = r;
        }
        json_of(
            json!({"apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeResourcePolicy",
                       "metadata": {"name": name}, "spec": spec}),
        )
    };
    policies
        .create(
            &pp,
            &policy(
                "roll",
                "roll",
                Some(json!({"mode": "Apply", "maxUnavailable": "40%"})),
            ),
        )
        .await
        .expect("policy roll");
    policies
        .create(&pp, &policy("watch", "observe", None))
        .await
        .expect("policy watch");
    policies
        .create(
            &pp,
            &policy(
                "evict",
                "evict",
                Some(json!({"mode": "Apply", "eviction": "Evict"})),
            ),
        )
        .await
        .expect("policy evict");

    let _operator = start_operator(&cp, &operator);
    let _agents: Vec<Proc> = kdirs
        .iter()
        .map(|(n, d)| start_agent(&cp, &agent, n, d))
        .collect();

    // The rollout of `roll`, watched poll by poll.
    let mut polls = 0;
    let mut max_in_flight = 0;
    let mut seen_in_flight = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let final_policy = loop {
        let list = ntopos.list(&ListParams::default()).await.expect("list");
        let roll: Vec<&NodeTopology> = list
            .items
            .iter()
            .filter(|nt| name(nt).starts_with('r'))
            .collect();
        let in_flight: Vec<&str> = roll
            .iter()
            .filter(|nt| marked(nt) && applied(nt).is_none_or(|a| a.1 == "ObserveOnly"))
            .map(|nt| name(nt))
            .collect();
        assert!(
            in_flight.len() <= 2,
            "maxUnavailable 40% of 5 = 2, but in progress: {in_flight:?}"
        );
        max_in_flight = max_in_flight.max(in_flight.len());
        seen_in_flight.extend(in_flight.iter().map(|s| s.to_string()));
        let verdict = |n: &str| {
            roll.iter()
                .find(|nt| name(nt) == n)
                .and_then(|nt| applied(nt))
                .filter(|a| a.1 != "ObserveOnly")
        };
        let second_batch_marked = roll
            .iter()
            .any(|nt| ["r3", "r4"].contains(&name(nt)) && marked(nt));
        if second_batch_marked {
            assert!(
                verdict("r1").is_some() && verdict("r2").is_some(),
                "r3/r4 marked before r1 and r2 had their verdicts"
            );
        }
        // r4 (r3's batch partner) finishes only once r3 has failed, so the pause holds r5
        // deterministically.
        let release = kdirs["r4"].join("release");
        if verdict("r3").is_some_and(|a| a.1 == "Failed") && !release.exists() {
            std::fs::write(&release, "").expect("releasing r4");
        }
        assert!(
            !roll.iter().any(|nt| name(nt) == "r5" && marked(nt)),
            "r5 was marked although r3 failed and pauseOnFailure defaults to true"
        );
        polls += 1;
        let p = policies.get("roll").await.expect("policy");
        let s = p.status.clone().unwrap_or_default();
        let progressing = s
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .map(|c| (c.status.clone(), c.reason.clone()));
        if (s.updated_nodes, s.failed_nodes, s.pending_nodes) == (3, 1, 1)
            && progressing == Some(("False".into(), "Paused".into()))
        {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "rollout of `roll` did not pause as expected after 120s; status: {s:?}; NodeTopologies: {:?}",
            roll.iter()
                .map(|nt| (name(nt), marked(nt), applied(nt)))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let msg = final_policy
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Progressing"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    println!(
        "rollout paused after {polls} polls; at most {max_in_flight} node(s) in progress at once; seen in progress: {seen_in_flight:?}; Progressing: {msg}"
    );

    // Per node: r1, r2, r4 run the drop-in; r3 failed and is restored; r5 untouched.
    for n in rollout_nodes {
        let nt = ntopos.get(n).await.expect("ntopo");
        let a = applied(&nt);
        let dropin = kdirs[n].join("conf.d/90-nodetopo.conf");
        let hooks = std::fs::read_to_string(kdirs[n].join("hooks.log")).unwrap_or_default();
        match n {
            "r1" | "r2" | "r4" => {
                let (status, reason, _) = a.clone().expect("verdict");
                assert_eq!(status, "True", "{n}: {a:?}");
                assert!(
                    ["RestartOnly", "StateRewritten"].contains(&reason.as_str()),
                    "{n}: {a:?}"
                );
                let text = std::fs::read_to_string(&dropin).expect("drop-in written");
                assert!(text.contains("reservedSystemCPUs: \"0-1,32-33\""), "{text}");
                assert!(
                    text.contains("topologyManagerPolicy: \"best-effort\""),
                    "{text}"
                );
                let mode = std::fs::metadata(&dropin)
                    .expect("mode")
                    .permissions()
                    .mode();
                assert_eq!(mode & 0o777, 0o644, "{n}: drop-in mode");
                assert!(hooks.contains("start"), "{n}: hooks {hooks}");
                let change = nt.status.as_ref().and_then(|s| s.change.clone());
                let change = change.expect("status.change");
                assert!(!change.done.is_empty(), "{n}: {change:?}");
            }
            "r3" => {
                let (status, reason, message) = a.clone().expect("verdict");
                assert_eq!((status.as_str(), reason.as_str()), ("False", "Failed"));
                assert!(message.contains("restored"), "{message}");
                assert!(
                    !dropin.exists(),
                    "r3: the drop-in that did not exist before must be removed again"
                );
                assert!(!kdirs[n].join("nodetopo-apply.journal").exists());
                assert_eq!(hooks, "stop\nstart-failed\nstop\nstart\n", "r3 hooks");
            }
            _ => {
                assert!(!marked(&nt), "r5 marked");
                assert!(!dropin.exists(), "r5 touched");
                assert_eq!(hooks, "", "r5 hooks");
                assert_eq!(a.map(|a| a.1), Some("ObserveOnly".into()), "r5");
            }
        }
    }
    println!("rollout nodes checked: {}", rollout_nodes.len());

    // Observe: o1 is reported, never marked or touched.
    let o1 = wait_for("o1 reports ObserveOnly", 60, || async {
        let nt = ntopos.get("o1").await.map_err(|e| e.to_string())?;
        match applied(&nt) {
            Some(a) if a.1 == "ObserveOnly" => Ok(nt),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(!marked(&o1));
    assert!(!kdirs["o1"].join("conf.d/90-nodetopo.conf").exists());
    let watch = policies.get("watch").await.expect("policy watch");
    let wc = watch
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Progressing"))
        .map(|c| (c.status.clone(), c.reason.clone()));
    assert_eq!(wc, Some(("False".into(), "ObserveOnly".into())));

    // Evict: the real server refuses the eviction the PDB forbids.
    let (reason, message, change) = wait_for("e1 reports the refused eviction", 60, || async {
        let nt = ntopos.get("e1").await.map_err(|e| e.to_string())?;
        match applied(&nt) {
            Some((s, r, m)) if r == "WaitingForEviction" && m.contains("refused") => {
                Ok((format!("{s}/{r}"), m, nt.status.and_then(|s| s.change)))
            }
            other => {
                let p = policies.get("evict").await.map_err(|e| e.to_string())?;
                Err(format!(
                    "{other:?}; annotations {:?}; policy status {:?}; agent log:\n{}",
                    nt.metadata.annotations,
                    p.status,
                    nodetopo_controlplane::server::tail(&cp.dir().join("agent-e1.log"), 30)
                ))
            }
        }
    })
    .await;
    assert_eq!(reason, "False/WaitingForEviction");
    assert!(
        message.contains("disruption budget"),
        "the refusal names the PodDisruptionBudget: {message}"
    );
    assert!(message.contains(&format!("{NS}/db")), "{message}");
    let change = change.expect("status.change");
    assert_eq!(change.class, "EvictFirst");
    assert!(
        change.done.iter().any(|d| d.contains("refused")),
        "{change:?}"
    );
    let db = pods.get("db").await.expect("db still exists");
    assert!(db.metadata.deletion_timestamp.is_none(), "db not deleted");
    assert!(!kdirs["e1"].join("conf.d/90-nodetopo.conf").exists());
    assert_eq!(
        std::fs::read_to_string(kdirs["e1"].join("cpu_manager_state")).expect("state"),
        e1_state_text,
        "e1's state untouched"
    );
    println!("eviction refused by the apiserver: {message}");
    println!("node heartbeats played: {}", heartbeats.count());
}

/// The control plane, the operator and agent binaries, CRDs installed and the test
/// namespace made; `None` when the environment cannot run them (skipped, said so).
async fn cluster() -> Option<(ControlPlane, PathBuf, PathBuf)> {
    let cp = match ControlPlane::start() {
        Ok(Some(cp)) => cp,
        Ok(None) => return None,
        Err(e) => panic!("control plane: {e}"),
    };
    let operator = nodetopo_controlplane::workspace_binary("nodetopo-operator")?;
    let agent = nodetopo_controlplane::workspace_binary("nodetopo-agent")?;
    cp.install_crds().await.expect("CRDs");
    cp.ensure_service_account(NS, "default")
        .await
        .expect("namespace");
    Some((cp, operator, agent))
}

fn rollout_policy(name: &str, pool: &str, rollout: Value) -> NodeResourcePolicy {
    json_of(
        json!({"apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeResourcePolicy",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"pool": pool}},
                 "cpuManager": {"policy": "static", "reservedSystemCPUs": "0-1,32-33"},
                 "topologyManager": {"policy": "best-effort"},
                 "rollout": rollout}}),
    )
}

/// (updated, pending, failed, Progressing status, reason, message) of a policy.
fn rollout_status(p: &NodeResourcePolicy) -> (i32, i32, i32, String, String, String) {
    let s = p.status.clone().unwrap_or_default();
    let (st, r, m) = s
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_default();
    (s.updated_nodes, s.pending_nodes, s.failed_nodes, st, r, m)
}

#[tokio::test]
async fn progress_deadline_fails_a_silent_node_and_its_late_verdict_wins() {
    let Some((cp, operator, agent)) = cluster().await else {
        return;
    };
    let client = cp.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let policies: Api<NodeResourcePolicy> = Api::all(client.clone());
    let ntopos: Api<NodeTopology> = Api::all(client.clone());
    let pp = PostParams::default();
    for n in ["d1", "d2"] {
        nodes
            .create(
                &pp,
                &json_of(json!({"metadata": {"name": n, "labels": {"pool": "late"}}})),
            )
            .await
            .expect("create node");
    }
    let heartbeats = Heartbeats::start(&nodes, &["d1", "d2"]);
    let root = cp.dir().to_path_buf();
    let kd1 = kubelet_dir(&root, "d1", None, false, false);
    let kd2 = kubelet_dir(&root, "d2", None, false, false);
    policies
        .create(
            &pp,
            &rollout_policy(
                "late",
                "late",
                json!({"mode": "Apply", "progressDeadlineSeconds": 3}),
            ),
        )
        .await
        .expect("policy late");
    let _operator = start_operator(&cp, &operator);
    // d1 has no agent (dead, or the node is gone): nobody answers its mark.
    let _agent_d2 = start_agent(&cp, &agent, "d2", &kd2);

    let mut polls = 0;
    let (status, d1) = wait_for("d1 fails its progress deadline", 90, || {
        polls += 1;
        let (policies, ntopos) = (policies.clone(), ntopos.clone());
        async move {
            let p = policies.get("late").await.map_err(|e| e.to_string())?;
            let d1 = ntopos.get("d1").await.map_err(|e| e.to_string())?;
            let d2 = ntopos.get("d2").await.map_err(|e| e.to_string())?;
            if marked(&d2) {
                panic!("d2 marked while d1 is in progress or failed (maxUnavailable 1, pauseOnFailure)");
            }
            let s = rollout_status(&p);
            if (s.0, s.1, s.2) == (0, 1, 1) && (s.3.as_str(), s.4.as_str()) == ("False", "Paused")
            {
                Ok((s, d1))
            } else {
                Err(format!("{s:?}; d1 annotations {:?}", d1.metadata.annotations))
            }
        }
    })
    .await;
    assert!(marked(&d1), "d1 carries the mark");
    let started = d1
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(nodetopo_crds::APPLY_STARTED_ANNOTATION))
        .expect("apply-started written with the mark");
    started
        .parse::<k8s_openapi::jiff::Timestamp>()
        .expect("apply-started is RFC 3339");
    assert!(
        status.5.contains("d1 (ProgressDeadlineExceeded"),
        "the Progressing message names d1 and the reason: {}",
        status.5
    );
    assert!(
        applied(&d1).is_none(),
        "nobody answered for d1: {:?}",
        applied(&d1)
    );
    assert!(!kd1.join("conf.d/90-nodetopo.conf").exists());
    println!(
        "d1 failed its 3 s deadline after {polls} polls (mark at {started}); Progressing: {}",
        status.5
    );

    // d1's agent comes back: its late verdict wins, the pause lifts, d2 follows.
    let _agent_d1 = start_agent(&cp, &agent, "d1", &kd1);
    let done = wait_for("the rollout completes after d1's late verdict", 120, || {
        let policies = policies.clone();
        async move {
            let p = policies.get("late").await.map_err(|e| e.to_string())?;
            let s = rollout_status(&p);
            if (s.0, s.1, s.2) == (2, 0, 0) && s.4 == "RolloutComplete" {
                Ok(s)
            } else {
                Err(format!("{s:?}"))
            }
        }
    })
    .await;
    for (n, kd) in [("d1", &kd1), ("d2", &kd2)] {
        let nt = ntopos.get(n).await.expect("ntopo");
        let a = applied(&nt).expect("verdict");
        assert_eq!(a.0, "True", "{n}: {a:?}");
        let text = std::fs::read_to_string(kd.join("conf.d/90-nodetopo.conf")).expect("drop-in");
        assert!(
            text.contains("reservedSystemCPUs: \"0-1,32-33\""),
            "{n}: {text}"
        );
    }
    println!(
        "late verdict taken: {}; node heartbeats played: {}",
        done.5,
        heartbeats.count()
    );
}

#[tokio::test]
async fn accepted_eviction_then_replan() {
    let Some((cp, operator, agent)) = cluster().await else {
        return;
    };
    let client = cp.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let policies: Api<NodeResourcePolicy> = Api::all(client.clone());
    let ntopos: Api<NodeTopology> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();
    nodes
        .create(
            &pp,
            &json_of(json!({"metadata": {"name": "a1", "labels": {"pool": "evict-ok"}}})),
        )
        .await
        .expect("create node");
    let heartbeats = Heartbeats::start(&nodes, &["a1"]);
    let db: Pod = pods
        .create(
            &pp,
            &json_of(json!({
                "metadata": {"name": "db", "namespace": NS, "labels": {"app": "db"}},
                "spec": {"nodeName": "a1", "containers": [{"name": "app", "image": "db:1",
                    "resources": {"requests": {"cpu": "2", "memory": "1Gi"},
                                  "limits": {"cpu": "2", "memory": "1Gi"}}}]}
            })),
        )
        .await
        .expect("pod db");
    let uid = db.metadata.uid.clone().expect("pod uid");
    pods.patch_status(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}})),
    )
    .await
    .expect("pod status");
    // Static, reserved 0,32; `db` holds core 1 (CPUs 1 and 33), which the new reserved set
    // 0-1,32-33 takes: EvictFirst.
    let render = |default: &str, entries: Value| {
        let state: nodetopo_engine::change::KubeletCpuState = json_of(json!({
            "policyName": "static", "defaultCpuSet": default, "entries": entries
        }));
        nodetopo_engine::change::checkpoint::render(
            &state,
            nodetopo_engine::change::checkpoint::CheckpointFormat::V2,
        )
    };
    let before = render("0,2-32,34-63", json!({uid.clone(): {"app": "1,33"}}));
    // What the kubelet leaves once the container is gone: its CPUs back in the shared pool.
    let released = render("0-63", json!({}));
    let kd = kubelet_dir(cp.dir(), "a1", Some(&before), false, false);
    policies
        .create(
            &pp,
            &rollout_policy(
                "evict-ok",
                "evict-ok",
                json!({"mode": "Apply", "eviction": "Evict"}),
            ),
        )
        .await
        .expect("policy evict-ok");
    let _operator = start_operator(&cp, &operator);
    let _agent = start_agent(&cp, &agent, "a1", &kd);

    let mut reasons: Vec<String> = Vec::new();
    let mut played_kubelet = false;
    let mut polls = 0;
    let hang_guard = Instant::now() + Duration::from_secs(180);
    let nt = loop {
        polls += 1;
        // The operator creates a1's NodeTopology shortly after it starts.
        let nt = ntopos.get_opt("a1").await.expect("get a1");
        let verdict = nt
            .as_ref()
            .and_then(applied)
            .filter(|a| a.1 != "ObserveOnly");
        if let Some(a) = &verdict {
            if reasons.last() != Some(&a.1) {
                reasons.push(a.1.clone());
            }
        }
        if let (Some(nt), true) = (&nt, verdict.as_ref().is_some_and(|a| a.0 == "True")) {
            break nt.clone();
        }
        // Play the kubelet once the eviction was accepted and reported: the container is
        // stopped and its CPUs released in the state file, then the pod object goes.
        let waiting = verdict
            .as_ref()
            .is_some_and(|a| a.1 == "WaitingForEviction" && a.2.contains("eviction accepted"));
        if waiting && !played_kubelet {
            let pod = pods.get_opt("db").await.expect("get db");
            if pod.is_some_and(|p| p.metadata.deletion_timestamp.is_some()) {
                std::fs::write(kd.join("cpu_manager_state"), &released).expect("state");
                pods.delete("db", &kube::api::DeleteParams::default().grace_period(0))
                    .await
                    .expect("delete db");
                played_kubelet = true;
            }
        }
        assert!(
            Instant::now() < hang_guard,
            "a1 did not finish within 180s; reasons seen {reasons:?}; last {verdict:?}; agent log:\n{}",
            nodetopo_controlplane::server::tail(&cp.dir().join("agent-a1.log"), 30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        played_kubelet,
        "applied before the pod was gone: {reasons:?}"
    );
    assert_eq!(reasons[0], "WaitingForEviction", "{reasons:?}");
    let last = reasons.last().cloned().unwrap_or_default();
    assert!(
        reasons.len() == 2 && ["RestartOnly", "StateRewritten"].contains(&last.as_str()),
        "Applied reasons in order: {reasons:?}"
    );
    let change = nt
        .status
        .as_ref()
        .and_then(|s| s.change.clone())
        .expect("status.change");
    assert_eq!(
        change.done.first().map(String::as_str),
        Some(format!("eviction of {NS}/db requested (Eviction API)").as_str()),
        "{change:?}"
    );
    assert!(
        change
            .done
            .iter()
            .any(|d| d.contains("started the kubelet") || d == "restarted the kubelet"),
        "{change:?}"
    );
    assert_ne!(
        change.class, "EvictFirst",
        "the final plan needs no eviction: {change:?}"
    );
    let dropin = std::fs::read_to_string(kd.join("conf.d/90-nodetopo.conf")).expect("drop-in");
    assert!(dropin.contains("kind: KubeletConfiguration"), "{dropin}");
    assert!(
        dropin.contains("reservedSystemCPUs: \"0-1,32-33\""),
        "{dropin}"
    );
    assert!(
        dropin.contains("topologyManagerPolicy: \"best-effort\""),
        "{dropin}"
    );
    let state = std::fs::read_to_string(kd.join("cpu_manager_state")).expect("state");
    let read = nodetopo_engine::change::checkpoint::parse(&state).expect("state file valid");
    assert!(read.state.state.assignments.is_empty(), "{state}");
    if last == "RestartOnly" {
        assert_eq!(
            state, released,
            "RestartOnly leaves the state file as the kubelet left it"
        );
    }
    assert!(pods.get_opt("db").await.expect("get db").is_none());
    let hooks = std::fs::read_to_string(kd.join("hooks.log")).unwrap_or_default();
    assert!(hooks.ends_with("start\n"), "{hooks}");
    println!(
        "accepted eviction then re-plan: {polls} polls, Applied reasons {reasons:?}, change.done {:?}; node heartbeats played: {}",
        change.done,
        heartbeats.count()
    );
}

#[tokio::test]
async fn node_not_ready_after_the_restart_rolls_back() {
    let Some((cp, operator, agent)) = cluster().await else {
        return;
    };
    let client = cp.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let policies: Api<NodeResourcePolicy> = Api::all(client.clone());
    let ntopos: Api<NodeTopology> = Api::all(client.clone());
    let pp = PostParams::default();
    for n in ["n1", "n2"] {
        nodes
            .create(
                &pp,
                &json_of(json!({"metadata": {"name": n, "labels": {"pool": "notready"}}})),
            )
            .await
            .expect("create node");
    }
    let heartbeats = Heartbeats::start(&nodes, &["n1", "n2"]);
    wait_for("n1 has a heartbeat", 30, || async {
        let n = nodes.get_status("n1").await.map_err(|e| e.to_string())?;
        n.status
            .and_then(|s| s.conditions)
            .filter(|c| c.iter().any(|c| c.type_ == "Ready"))
            .map(|_| ())
            .ok_or_else(|| "no Ready condition yet".to_string())
    })
    .await;
    heartbeats.stop("n1").await;
    // n1's state: static, reserved 0,32, no exclusive CPUs.
    let state: nodetopo_engine::change::KubeletCpuState = json_of(json!({
        "policyName": "static", "defaultCpuSet": "0-63", "entries": {}
    }));
    let state_text = nodetopo_engine::change::checkpoint::render(
        &state,
        nodetopo_engine::change::checkpoint::CheckpointFormat::V2,
    );
    let root = cp.dir().to_path_buf();
    let kd1 = kubelet_dir(&root, "n1", Some(&state_text), false, false);
    let kd2 = kubelet_dir(&root, "n2", None, false, false);
    policies
        .create(
            &pp,
            &rollout_policy(
                "nr",
                "notready",
                json!({"mode": "Apply", "maxUnavailable": 1}),
            ),
        )
        .await
        .expect("policy nr");
    let _operator = start_operator(&cp, &operator);
    let verify = ["--actuation-verify-seconds", "3"];
    let _agent1 = start_agent_with(&cp, &agent, "n1", &kd1, &verify);
    let _agent2 = start_agent_with(&cp, &agent, "n2", &kd2, &verify);

    let mut polls = 0;
    let (status, n1) = wait_for("n1 fails verification and the rollout pauses", 120, || {
        polls += 1;
        let (policies, ntopos) = (policies.clone(), ntopos.clone());
        async move {
            let p = policies.get("nr").await.map_err(|e| e.to_string())?;
            let n1 = ntopos.get("n1").await.map_err(|e| e.to_string())?;
            let n2 = ntopos.get("n2").await.map_err(|e| e.to_string())?;
            if marked(&n2) {
                panic!("n2 marked although n1 failed (maxUnavailable 1, pauseOnFailure)");
            }
            let s = rollout_status(&p);
            if (s.0, s.1, s.2) == (0, 1, 1) && (s.3.as_str(), s.4.as_str()) == ("False", "Paused") {
                Ok((s, n1))
            } else {
                Err(format!("{s:?}; n1 Applied {:?}", applied(&n1)))
            }
        }
    })
    .await;
    let (st, reason, message) = applied(&n1).expect("n1 verdict");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "Failed"),
        "{message}"
    );
    for want in [
        "verification failed",
        "Node n1 is not Ready again after waiting 3s",
        "Ready=Unknown",
        "restored",
        "the kubelet restarted",
    ] {
        assert!(
            message.contains(want),
            "the message names {want:?}: {message}"
        );
    }
    assert!(
        !kd1.join("conf.d/90-nodetopo.conf").exists(),
        "n1: the drop-in that did not exist before must be removed again"
    );
    assert_eq!(
        std::fs::read_to_string(kd1.join("cpu_manager_state")).expect("state"),
        state_text,
        "n1's state file restored"
    );
    assert!(!kd1.join("nodetopo-apply.journal").exists());
    let hooks = std::fs::read_to_string(kd1.join("hooks.log")).unwrap_or_default();
    assert_eq!(
        hooks, "stop\nstart\nstop\nstart\n",
        "n1 hooks: apply, then rollback"
    );
    assert!(
        !kd2.join("conf.d/90-nodetopo.conf").exists(),
        "n2 untouched"
    );
    assert!(
        status.5.contains("n1"),
        "the Progressing message names n1: {}",
        status.5
    );
    println!(
        "n1 NotReady after the restart: rolled back after {polls} polls; Applied: {message}; Progressing: {}; node heartbeats played: {}",
        status.5,
        heartbeats.count()
    );
}
