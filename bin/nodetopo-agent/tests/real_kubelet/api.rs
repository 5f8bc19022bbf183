//! The real kubelet registered with the real kube-apiserver and etcd (e2e/controlplane):
//! `apply --node` (`apply_waits_for_the_real_kubelets_node`) and the whole rollout with the
//! operator and the agent daemon (`rollout_on_a_real_kubelet`).

use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use super::kubelet::*;

/// The Node's Ready condition (status, lastHeartbeatTime in whole seconds since the epoch)
/// and its CPU capacity, as the API server has them.
fn node_ready(
    cp: &nodetopo_controlplane::ControlPlane,
    name: &str,
) -> Option<(String, i64, String)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let node = rt
        .block_on(async {
            kube::Api::<k8s_openapi::api::core::v1::Node>::all(cp.client())
                .get_opt(name)
                .await
        })
        .expect("reading the Node")?;
    let status = node.status?;
    let ready = status
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready")?;
    Some((
        ready.status,
        ready.last_heartbeat_time?.0.as_second(),
        status.capacity?.get("cpu")?.0.clone(),
    ))
}

fn epoch_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The real kubelet registered with a real kube-apiserver (and etcd, from e2e/controlplane)
/// as Node `real-kubelet`: `apply --node` waits until the restarted kubelet itself has posted
/// Ready with a fresh heartbeat (the control-plane rollout tests play those status updates).
#[test]
fn apply_waits_for_the_real_kubelets_node() {
    let Some(bin) = kubelet_or_skip() else { return };
    let cp = match nodetopo_controlplane::ControlPlane::start() {
        Ok(Some(cp)) => cp,
        Ok(None) => return,
        Err(e) => panic!("control plane: {e}"),
    };
    const NODE: &str = "real-kubelet";
    let k = RealKubelet::new(
        &bin,
        None,
        &format!(
            "--kubeconfig '{}' --hostname-override {NODE} --feature-gates=CPUManagerPolicyBetaOptions=false",
            cp.kubeconfig().display()
        ),
    );
    let mut checks = 0;
    let t = Instant::now();
    k.start();
    // The kubelet registers its Node and posts Ready.
    let first = loop {
        match node_ready(&cp, NODE) {
            Some(r) if r.0 == "True" => break r,
            r => assert!(
                t.elapsed().as_secs() < 60,
                "Node {NODE} not Ready within 60 s: {r:?}"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    println!(
        "real kubelet: Node {NODE} registered and Ready {:.1} s after the start, capacity cpu {}",
        t.elapsed().as_secs_f64(),
        first.2
    );
    assert_eq!(
        first.2,
        online_cpus().len().to_string(),
        "the Node's CPU capacity"
    );
    checks += 2;

    // RestartOnly with --node: the verify step waits for the Node.
    let restart = k.policy("restart", "0", "", "policy: best-effort");
    let kubeconfig = cp.kubeconfig().to_path_buf();
    let before = epoch_seconds();
    let (out, v, secs) = k.apply_with(&restart, |c| {
        c.args(["--node", NODE, "--verify-seconds", "60"])
            .env("KUBECONFIG", &kubeconfig);
    });
    assert!(
        out.status.success(),
        "{v:#}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(v["reason"], "RestartOnly", "{v:#}");
    assert_eq!(k.starts(), 2);
    assert!(k.running());
    let (ready, heartbeat, _) = node_ready(&cp, NODE).expect("the Node");
    assert_eq!(ready, "True");
    assert!(
        heartbeat >= before,
        "the Ready heartbeat ({heartbeat}) is from the restarted kubelet (apply began at {before})"
    );
    assert_eq!(
        owned(&k.effective(2), "topologyManagerPolicy"),
        "best-effort"
    );
    checks += 7;
    println!("apply --node on a real kubelet: RestartOnly verified on the Node in {secs:.1} s");

    // A policy the kubelet refuses (a beta option; this kubelet has the beta gate off on its
    // command line, and the apply is told not to look at it, as on a node where nodetopo
    // cannot see the kubelet's process): rolled back, and the rollback's kubelet is checked
    // on the Node too.
    let beta = k.policy(
        "beta",
        "0",
        "distribute-cpus-across-numa: \"true\"",
        "policy: best-effort",
    );
    let before = epoch_seconds();
    let (out, v, secs) = k.apply_with(&beta, |c| {
        c.args(["--node", NODE, "--verify-seconds", "60"])
            .arg("--no-kubelet-process-check")
            .env("KUBECONFIG", &kubeconfig);
    });
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert_eq!(v["reason"], "Failed", "{v:#}");
    let msg = v["message"].as_str().unwrap();
    for want in [
        "Beta-level Options not enabled",
        "the previous configuration and state were restored and the kubelet restarted (healthy again)",
    ] {
        assert!(msg.contains(want), "{want:?} in {msg}");
    }
    assert_eq!(k.starts(), 4, "the refused start, then the rollback's");
    let (ready, heartbeat, _) = node_ready(&cp, NODE).expect("the Node");
    assert_eq!(ready, "True");
    assert!(
        heartbeat >= before,
        "Ready posted by the rollback's kubelet"
    );
    checks += 6;
    println!(
        "apply --node on a real kubelet: refused policy rolled back, Node Ready again, in {secs:.1} s; {checks} checks"
    );
}

/// The whole path on a real kubelet: the operator and the agent daemon (`run --actuation`)
/// on the real API server, the real kubelet registered as its Node running a Guaranteed pod
/// (bound through the API, one exclusive CPU). A NodeResourcePolicy in Apply mode makes the
/// agent restart the kubelet (RestartOnly); its verify step waits for the Node Ready again
/// (posted by the restarted kubelet) and for KubeletAgreement on a read of the real kubelet's
/// checkpoint after the restart; the NodeTopology reports Applied True.
#[test]
fn rollout_on_a_real_kubelet() {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use nodetopo_crds::{NodeResourcePolicy, NodeTopology};
    let Some(bin) = kubelet_or_skip() else { return };
    let Some(operator) = nodetopo_controlplane::workspace_binary("nodetopo-operator") else {
        return;
    };
    let cp = match nodetopo_controlplane::ControlPlane::start() {
        Ok(Some(cp)) => cp,
        Ok(None) => return,
        Err(e) => panic!("control plane: {e}"),
    };
    const NODE: &str = "real-rollout";
    const NS: &str = "real-kubelet";
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (nodes, pods, policies, ntopos) = rt.block_on(async {
        cp.install_crds().await.expect("CRDs");
        cp.ensure_service_account(NS, "default")
            .await
            .expect("namespace");
        let c = cp.client();
        (
            Api::<Node>::all(c.clone()),
            Api::<Pod>::namespaced(c.clone(), NS),
            Api::<NodeResourcePolicy>::all(c.clone()),
            Api::<NodeTopology>::all(c),
        )
    });
    let k = RealKubelet::new(
        &bin,
        None,
        &format!(
            "--kubeconfig '{}' --hostname-override {NODE}",
            cp.kubeconfig().display()
        ),
    );
    let wait = |what: &str, secs: u64, mut ok: Box<dyn FnMut() -> Result<(), String> + '_>| {
        let t = Instant::now();
        loop {
            match ok() {
                Ok(()) => return t.elapsed().as_secs_f64(),
                Err(e) => assert!(t.elapsed().as_secs() < secs, "{what} within {secs} s: {e}"),
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    k.start();
    wait(
        "the Node Ready",
        60,
        Box::new(|| match node_ready(&cp, NODE) {
            Some(r) if r.0 == "True" => Ok(()),
            r => Err(format!("{r:?}")),
        }),
    );
    let pp = PostParams::default();
    let uid = rt
        .block_on(async {
            nodes
                .patch(
                    NODE,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"metadata": {"labels": {"pool": "real"}}})),
                )
                .await
                .expect("label the Node");
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "pinned", "namespace": NS},
                "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "1", "memory": "64Mi"},
                                  "limits": {"cpu": "1", "memory": "64Mi"}}}]}
            }))
            .unwrap();
            pods.create(&pp, &pod).await.expect("pod")
        })
        .metadata
        .uid
        .expect("pod uid");
    let secs = wait(
        "the kubelet runs the pod with an exclusive CPU",
        60,
        Box::new(|| {
            let running = rt
                .block_on(pods.get("pinned"))
                .ok()
                .and_then(|p| p.status?.phase)
                == Some("Running".into());
            match (running, k.state()["entries"][&uid]["app"].as_str()) {
                (true, Some(_)) => Ok(()),
                (r, s) => Err(format!("running {r}, state {s:?}")),
            }
        }),
    );
    let pinned = k.state()["entries"][&uid]["app"]
        .as_str()
        .unwrap()
        .to_string();
    println!("real kubelet: pod {NS}/pinned Running on CPU {pinned} after {secs:.1} s");

    let policy: NodeResourcePolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeResourcePolicy",
        "metadata": {"name": "real"},
        "spec": {"nodeSelector": {"matchLabels": {"pool": "real"}},
                 "cpuManager": {"policy": "static", "reservedSystemCPUs": "0"},
                 "topologyManager": {"policy": "best-effort"},
                 "rollout": {"mode": "Apply"}}
    }))
    .unwrap();
    rt.block_on(policies.create(&pp, &policy)).expect("policy");
    let log = |name: &str| fs::File::create(k.p(name)).unwrap();
    let spawn = |mut c: Command, name: &str| {
        c.env("KUBECONFIG", cp.kubeconfig())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log(name))
            .stderr(log(&format!("{name}.err")));
        KillOnDrop(c.spawn().expect(name))
    };
    let mut op = Command::new(&operator);
    op.args(["--no-leader-election", "--metrics-addr"])
        .arg(format!("127.0.0.1:{}", free_port()));
    let _operator = spawn(op, "operator.log");
    let mut agent = Command::new(BIN);
    agent
        .args(["run", "--node-name", NODE, "--actuation"])
        .arg("--state-dir")
        .arg(k.p("agent-state"))
        .arg("--kubelet-state")
        .arg(k.p("root/cpu_manager_state"))
        .arg("--kubelet-config")
        .arg(k.p("config.yaml"))
        .arg("--kubelet-config-dir")
        .arg(k.p("conf.d"))
        .args([
            "--kubelet-restart",
            "command",
            "--actuation-retry-seconds",
            "1",
        ])
        .args(["--kubelet-stop-command", &k.hook("stop.sh")])
        .args(["--kubelet-start-command", &k.hook("start.sh")])
        .args(["--kubelet-health-command", &k.hook("health.sh")])
        .args(["--actuation-verify-seconds", "60"]);
    let _agent = spawn(agent, "agent.log");
    let mut verdict = None;
    let secs = wait(
        "Applied on the NodeTopology",
        180,
        Box::new(|| {
            let nt = rt
                .block_on(ntopos.get_opt(NODE))
                .map_err(|e| e.to_string())?
                .ok_or("no NodeTopology yet")?;
            let c = nt
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Applied"))
                .filter(|c| c.observed_generation == nt.metadata.generation)
                .ok_or("no Applied verdict yet")?;
            // Before the operator's mark the agent reports ObserveOnly.
            if c.reason == "ObserveOnly" || c.reason == "WaitingForEviction" {
                return Err(c.message.clone());
            }
            verdict = Some((c.status.clone(), c.reason.clone(), c.message.clone()));
            Ok(())
        }),
    );
    let (status, reason, message) = verdict.unwrap();
    println!("rollout on a real kubelet: Applied {status} {reason} after {secs:.1} s: {message}");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "RestartOnly"),
        "{message}"
    );
    assert!(
        message.contains("KubeletAgreement True on a kubelet read after the restart"),
        "{message}"
    );
    assert_eq!(k.starts(), 2, "one restart by the agent");
    assert!(k.running());
    assert_eq!(
        owned(&k.effective(2), "topologyManagerPolicy"),
        "best-effort"
    );
    assert_eq!(k.state()["entries"][&uid]["app"], pinned.as_str());
    let (ready, _, _) = node_ready(&cp, NODE).expect("the Node");
    assert_eq!(ready, "True");
    println!("rollout on a real kubelet: 7 checks");
}

/// A child process killed (SIGKILL) and reaped when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
