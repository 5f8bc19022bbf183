//! The operator binary against a real apiserver (its own control plane, since the operator
//! acts on every Node): one NodeTopology per Node with an owner reference and the winning
//! policy's spec, policy status counts and conditions with observedGeneration, priority
//! conflicts and ties, a relabelled node moving to another policy, a deleted policy falling
//! back to `none`; two replicas, exactly one leading through the Lease, the follower writing
//! nothing, and the takeover time after the leader is killed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nodetopo_controlplane::fixture::Fixture;
use nodetopo_controlplane::{process, ControlPlane};
use nodetopo_crds::{NodeResourcePolicy, NodeTopology};
use serde_json::json;

const NS: &str = "nodetopo-system";
const LEASE: &str = "nodetopo-operator";

/// The operator binary that `cargo test --workspace` builds next to this test binary.
struct Operator {
    child: Child,
    metrics_port: u16,
    identity: String,
}

impl Drop for Operator {
    fn drop(&mut self) {
        process::kill_group(&mut self.child);
    }
}

fn start_operator(cp: &ControlPlane, bin: &PathBuf, identity: &str) -> Operator {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let log = std::fs::File::create(cp.dir().join(format!("{identity}.log"))).expect("log file");
    let mut cmd = Command::new(bin);
    cmd.args([
        "--metrics-addr",
        &format!("127.0.0.1:{port}"),
        "--lease-namespace",
        NS,
        "--identity",
        identity,
        "--lease-duration-seconds",
        "4",
        "--lease-renew-seconds",
        "1",
    ])
    .env("KUBECONFIG", cp.kubeconfig())
    .env("RUST_LOG", "info")
    .stdin(Stdio::null())
    .stdout(log.try_clone().expect("log"))
    .stderr(log);
    let child = process::spawn(cmd, identity).expect("starting the operator");
    Operator {
        child,
        metrics_port: port,
        identity: identity.to_string(),
    }
}

/// Sum of the operator's `*writes*` counters from its /metrics (None if not answering).
fn writes(op: &Operator) -> Option<f64> {
    let mut s = TcpStream::connect(("127.0.0.1", op.metrics_port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(
        body.lines()
            .filter(|l| !l.starts_with('#') && l.contains("writes"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .fold(0.0, |a, b| a + b),
    )
}

/// Polls `check` every 100 ms until it returns `Ok`, or panics after `secs` naming `what`.
async fn wait_for<T, F, Fut>(what: &str, secs: u64, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    nodetopo_controlplane::wait::wait_for(
        what,
        Duration::from_secs(secs),
        Duration::from_millis(100),
        check,
    )
    .await
}

fn node(name: &str, pool: Option<&str>) -> Node {
    let mut n = json!({"metadata": {"name": name}});
    if let Some(p) = pool {
        n["metadata"]["labels"] = json!({ "pool": p });
    }
    serde_json::from_value(n).expect("node")
}

fn policy(name: &str, spec: serde_json::Value) -> NodeResourcePolicy {
    serde_json::from_value(json!({
        "apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeResourcePolicy",
        "metadata": {"name": name}, "spec": spec
    }))
    .expect("policy")
}

/// (policy name or "", cpu manager policy) of a node's NodeTopology spec.
async fn effective(api: &Api<NodeTopology>, node: &str) -> Result<(String, String), String> {
    let nt = api.get(node).await.map_err(|e| e.to_string())?;
    Ok((
        nt.spec
            .policy_ref
            .as_ref()
            .map(|p| p.name.clone())
            .unwrap_or_default(),
        nt.spec.cpu_manager.policy.to_string(),
    ))
}

fn condition(p: &NodeResourcePolicy, type_: &str) -> Option<(String, Option<i64>)> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.observed_generation))
}

#[tokio::test]
async fn operator_against_a_real_apiserver() {
    let Some(Fixture { cp, bin }) = Fixture::start("nodetopo-operator", NS).await else {
        return;
    };
    let client = cp.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let policies: Api<NodeResourcePolicy> = Api::all(client.clone());
    let ntopos: Api<NodeTopology> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();

    for (n, pool) in [
        ("n1", Some("a")),
        ("n2", Some("a")),
        ("n3", Some("b")),
        ("n4", None),
    ] {
        nodes
            .create(&pp, &node(n, pool))
            .await
            .expect("create node");
    }
    let static_spec = |sel: serde_json::Value, prio: i32| {
        json!({"nodeSelector": sel, "priority": prio,
               "cpuManager": {"policy": "static", "reservedCPUs": 1},
               "topologyManager": {"policy": "best-effort"}})
    };
    policies
        .create(
            &pp,
            &policy("pa", static_spec(json!({"matchLabels": {"pool": "a"}}), 10)),
        )
        .await
        .expect("pa");
    // Same priority as pa, later name: loses the tie on pool=a.
    policies
        .create(
            &pp,
            &policy("pz", static_spec(json!({"matchLabels": {"pool": "a"}}), 10)),
        )
        .await
        .expect("pz");
    policies
        .create(
            &pp,
            &policy("pb", static_spec(json!({"matchLabels": {"pool": "b"}}), 5)),
        )
        .await
        .expect("pb");
    policies
        .create(
            &pp,
            &policy(
                "pall",
                json!({"priority": 0, "topologyManager": {"policy": "restricted"}}),
            ),
        )
        .await
        .expect("pall");

    // Two replicas; exactly one leads.
    let started = Instant::now();
    let mut ops = vec![
        start_operator(&cp, &bin, "op-1"),
        start_operator(&cp, &bin, "op-2"),
    ];
    let holder = wait_for("a Lease holder", 30, || async {
        let l = leases.get(LEASE).await.map_err(|e| e.to_string())?;
        l.spec
            .and_then(|s| s.holder_identity)
            .ok_or("no holder".to_string())
    })
    .await;
    println!("leader: {holder}");

    // Nodes get their NodeTopology with the winning policy.
    let want = [
        ("n1", "pa", "static"),
        ("n2", "pa", "static"),
        ("n3", "pb", "static"),
        ("n4", "pall", "none"),
    ];
    for (n, p, cpu) in want {
        let got = wait_for(&format!("NodeTopology {n} from {p}"), 60, || async {
            let e = effective(&ntopos, n).await?;
            if e == (p.to_string(), cpu.to_string()) {
                Ok(e)
            } else {
                Err(format!("{e:?}"))
            }
        })
        .await;
        let nt = ntopos.get(n).await.expect("ntopo");
        let node_uid = nodes.get(n).await.expect("node").metadata.uid;
        let owner = nt.metadata.owner_references.clone().unwrap_or_default();
        assert!(
            owner.len() == 1
                && owner[0].kind == "Node"
                && owner[0].name == n
                && Some(owner[0].uid.clone()) == node_uid,
            "{n}: owner references {owner:?}"
        );
        println!(
            "NodeTopology {n}: policy {} cpuManager {}; owned by Node {n}",
            got.0, got.1
        );
    }
    println!(
        "converged in {:?} after starting the operators",
        started.elapsed()
    );

    // Policy status: counts, conditions, observedGeneration.
    let check_status = |name: &'static str,
                        matched: i32,
                        governed: i32,
                        overridden: i32,
                        conflict: &'static str| {
        let policies = policies.clone();
        async move {
            wait_for(&format!("status of {name}"), 60, || async {
                let p = policies.get(name).await.map_err(|e| e.to_string())?;
                let generation = p.metadata.generation;
                let s = p.status.clone().ok_or("no status")?;
                let ok = s.observed_generation == generation
                    && s.matched_nodes == matched
                    && s.governed_nodes == governed
                    && s.overridden_nodes == overridden
                    && condition(&p, "Conflict")
                        .is_some_and(|(st, g)| st == conflict && g == generation);
                if ok {
                    Ok(())
                } else {
                    Err(format!("{s:?}"))
                }
            })
            .await;
            println!("{name}: matched {matched}, governed {governed}, overridden {overridden}, Conflict={conflict}, observedGeneration current");
        }
    };
    check_status("pa", 2, 2, 0, "False").await;
    check_status("pz", 2, 0, 2, "True").await;
    check_status("pb", 1, 1, 0, "False").await;
    check_status("pall", 4, 1, 3, "True").await;

    // A spec edit bumps the generation; status follows it.
    policies
        .patch(
            "pb",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"topologyManager": {"policy": "single-numa-node"}}})),
        )
        .await
        .expect("edit pb");
    wait_for("n3 gets pb's new topology manager policy", 60, || async {
        let nt = ntopos.get("n3").await.map_err(|e| e.to_string())?;
        let r = nt.spec.policy_ref.clone().ok_or("no policyRef")?;
        if nt.spec.topology_manager.policy.to_string() == "single-numa-node" && r.generation == 2 {
            Ok(())
        } else {
            Err(format!("{:?}", nt.spec))
        }
    })
    .await;
    check_status("pb", 1, 1, 0, "False").await;

    // Relabel n3 into pool a: it moves from pb to pa.
    nodes
        .patch(
            "n3",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"pool": "a"}}})),
        )
        .await
        .expect("relabel n3");
    wait_for("n3 moves to pa", 60, || async {
        let e = effective(&ntopos, "n3").await?;
        if e.0 == "pa" {
            Ok(())
        } else {
            Err(format!("{e:?}"))
        }
    })
    .await;
    check_status("pa", 3, 3, 0, "False").await;
    check_status("pb", 0, 0, 0, "False").await;
    println!("relabelled n3 moved from pb to pa");

    // Deleting the only policy that selects n4 falls back to none.
    policies
        .delete("pall", &DeleteParams::default())
        .await
        .expect("delete pall");
    wait_for("n4 falls back to none", 60, || async {
        let e = effective(&ntopos, "n4").await?;
        let nt = ntopos.get("n4").await.map_err(|e| e.to_string())?;
        if e == (String::new(), "none".to_string())
            && nt.spec.topology_manager.policy.to_string() == "none"
        {
            Ok(())
        } else {
            Err(format!("{e:?}"))
        }
    })
    .await;
    println!("deleted pall: n4 runs policy none with no policyRef");

    // The follower wrote nothing.
    let (leader_idx, follower_idx) = if ops[0].identity == holder {
        (0, 1)
    } else {
        (1, 0)
    };
    let follower_writes = writes(&ops[follower_idx]).expect("follower /metrics");
    let leader_writes = writes(&ops[leader_idx]).expect("leader /metrics");
    println!(
        "writes so far: leader {} {leader_writes}, follower {} {follower_writes}",
        ops[leader_idx].identity, ops[follower_idx].identity
    );
    assert!(leader_writes > 0.0, "the leader counted its writes");
    assert_eq!(follower_writes, 0.0, "the follower must not write");

    // Kill the leader (SIGKILL: no lease release) and time the takeover.
    let killed_at = Instant::now();
    let mut leader = ops.remove(leader_idx);
    process::kill_group(&mut leader.child);
    let new_holder = wait_for("takeover by the follower", 60, || async {
        let l = leases.get(LEASE).await.map_err(|e| e.to_string())?;
        let h = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        if h != holder && !h.is_empty() {
            Ok(h)
        } else {
            Err(h)
        }
    })
    .await;
    let takeover = killed_at.elapsed();
    // The new leader reconciles: label n4 into pool b.
    nodes
        .patch(
            "n4",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"pool": "b"}}})),
        )
        .await
        .expect("relabel n4");
    wait_for("n4 moves to pb under the new leader", 60, || async {
        let e = effective(&ntopos, "n4").await?;
        if e.0 == "pb" {
            Ok(())
        } else {
            Err(format!("{e:?}"))
        }
    })
    .await;
    let reconciled = killed_at.elapsed();
    println!(
        "failover: killed {holder}; {new_holder} took the Lease after {takeover:?} (lease duration 4s, renew 1s) and reconciled a change {reconciled:?} after the kill"
    );
    assert!(writes(&ops[0]).expect("new leader /metrics") > 0.0);
    drop(ops);
}
