//! The operator binary at scale against a real apiserver (its own control plane): 2,000 Nodes
//! in 10 label groups (and 4 zones, a `rack` label on every 7th node) and 20 policies that
//! overlap by priority (ties broken by name, a catch-all at priority 0, one that matches
//! nothing). The test computes what every NodeTopology spec and every policy status must be
//! from the labels and priorities alone (its own selector matcher, not the operator's), then
//! measures:
//!
//! - the time from the operator's start until every NodeTopology spec and every policy status
//!   is right;
//! - the same after a policy edit that changes the spec of exactly 500 nodes;
//! - the API writes per NodeTopology per change, counted on the server side: a watch on
//!   NodeTopology records every distinct resourceVersion of every object (no agent runs, so
//!   the operator is the only writer); the goal is one;
//! - the operator's own count of applies sent (its /metrics; a server-side apply that changes
//!   nothing is not a write, so this may exceed the server-side count): at most 5% above one
//!   per changed NodeTopology, since the node controller is not triggered by status writes
//!   and reads stores at least as fresh as its trigger; and the policy status writes;
//! - the operator's peak memory (VmHWM) and CPU time, from /proc/<pid>.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use nodetopo_controlplane::fixture::Fixture;
use nodetopo_controlplane::process;
use nodetopo_crds::{NodeResourcePolicy, NodeTopology};
use serde_json::{json, Value};

const NS: &str = "nodetopo-system";
const NODES: usize = 2000;
const GROUPS: usize = 10;
const ZONES: usize = 4;
/// The policy whose edit changes 500 NodeTopology specs (it governs every node of zone z3).
const EDITED: &str = "zone-z3";
/// How long the test waits for convergence before failing.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(300);
/// After convergence, how long the test keeps counting writes (late duplicates would show).
const SETTLE: Duration = Duration::from_secs(5);

fn node_name(i: usize) -> String {
    format!("scale-node-{i:04}")
}

/// Node i: group g(i mod 10), zone z((i div 10) mod 4), and `rack` on every 7th node.
fn node_labels(i: usize) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert("group".to_string(), format!("g{}", i % GROUPS));
    l.insert("zone".to_string(), format!("z{}", (i / 10) % ZONES));
    if i % 7 == 0 {
        l.insert("rack".to_string(), format!("r{}", i % 3));
    }
    l
}

fn static_cpu(reserved: u32) -> Value {
    json!({"policy": "static", "reservedCPUs": reserved})
}

/// The 20 policies: (name, spec).
fn policy_specs() -> Vec<(String, Value)> {
    let topo = ["none", "best-effort", "restricted", "single-numa-node"];
    let mut out = Vec::new();
    // One per group g0..g8 at priority 10 (g9 has none: the zone policies and the catch-all
    // share it).
    for g in 0..9 {
        out.push((
            format!("group-g{g}"),
            json!({"nodeSelector": {"matchLabels": {"group": format!("g{g}")}},
                   "priority": 10,
                   "cpuManager": static_cpu(1 + g % 3),
                   "topologyManager": {"policy": topo[(g % 4) as usize]}}),
        ));
    }
    // Ties at priority 10: "group-g0-twin" sorts after "group-g0" and loses every node;
    // "aaa-g1" sorts before "group-g1" and wins every node.
    out.push((
        "group-g0-twin".into(),
        json!({"nodeSelector": {"matchLabels": {"group": "g0"}}, "priority": 10,
               "cpuManager": static_cpu(2), "topologyManager": {"policy": "restricted"}}),
    ));
    out.push((
        "aaa-g1".into(),
        json!({"nodeSelector": {"matchExpressions": [{"key": "group", "operator": "In", "values": ["g1"]}]},
               "priority": 10, "cpuManager": static_cpu(3),
               "topologyManager": {"policy": "single-numa-node", "scope": "pod"}}),
    ));
    // Zones at different priorities: z3 above everything (governs 500 nodes), z2 just above
    // the groups, z1 tied with the groups (loses by name), z0 below them.
    // z1 leaves out g9, whose z1 nodes fall to the catch-all.
    for (z, prio, tm) in [
        (3, 50, "best-effort"),
        (2, 12, "restricted"),
        (1, 10, "none"),
        (0, 5, "single-numa-node"),
    ] {
        let mut selector = json!({"matchLabels": {"zone": format!("z{z}")}});
        if z == 1 {
            selector["matchExpressions"] =
                json!([{"key": "group", "operator": "NotIn", "values": ["g9"]}]);
        }
        out.push((
            format!("zone-z{z}"),
            json!({"nodeSelector": selector, "priority": prio, "cpuManager": static_cpu(2),
                   "topologyManager": {"policy": tm}}),
        ));
    }
    out.push((
        "hot".into(),
        json!({"nodeSelector": {"matchExpressions": [
                   {"key": "group", "operator": "In", "values": ["g2", "g3"]},
                   {"key": "zone", "operator": "NotIn", "values": ["z1"]}]},
               "priority": 30,
               "cpuManager": {"policy": "static", "reservedSystemCPUs": "0-1",
                              "options": {"full-pcpus-only": "true"}},
               "topologyManager": {"policy": "single-numa-node"}}),
    ));
    out.push((
        "racked".into(),
        json!({"nodeSelector": {"matchExpressions": [{"key": "rack", "operator": "Exists"}]},
               "priority": 20, "cpuManager": static_cpu(4),
               "topologyManager": {"policy": "restricted", "scope": "pod"}}),
    ));
    out.push((
        "unracked-g4".into(),
        json!({"nodeSelector": {"matchLabels": {"group": "g4"},
                                "matchExpressions": [{"key": "rack", "operator": "DoesNotExist"}]},
               "priority": 15, "cpuManager": static_cpu(1),
               "topologyManager": {"policy": "best-effort"}}),
    ));
    out.push((
        "default".into(),
        json!({"priority": 0, "cpuManager": {"policy": "none"},
               "topologyManager": {"policy": "best-effort"}}),
    ));
    out.push((
        "nothing".into(),
        json!({"nodeSelector": {"matchLabels": {"group": "absent"}}, "priority": 100,
               "cpuManager": static_cpu(1), "topologyManager": {"policy": "none"}}),
    ));
    out
}

/// meta/v1 LabelSelector semantics, written here independently of the operator.
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    if selector.is_null() {
        return true;
    }
    let by_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let by_exprs = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let got = labels.get(key).map(String::as_str);
            match e["operator"].as_str().unwrap_or_default() {
                "In" => got.is_some_and(|v| values.contains(&v)),
                "NotIn" => got.is_none_or(|v| !values.contains(&v)),
                "Exists" => got.is_some(),
                "DoesNotExist" => got.is_none(),
                other => panic!("the test's matcher does not know operator {other}"),
            }
        });
    by_labels && by_exprs
}

/// What the test expects of one policy's status.
#[derive(Debug, Default, Clone, PartialEq)]
struct Counts {
    matched: i32,
    governed: i32,
    overridden: i32,
}

/// The expected winner of every node (index = node number) and counts per policy.
fn expect(specs: &[(String, Value)]) -> (Vec<Option<String>>, BTreeMap<String, Counts>) {
    let mut counts: BTreeMap<String, Counts> = specs
        .iter()
        .map(|(n, _)| (n.clone(), Counts::default()))
        .collect();
    let mut winners = Vec::with_capacity(NODES);
    for i in 0..NODES {
        let labels = node_labels(i);
        let mut matching: Vec<(i64, &str)> = specs
            .iter()
            .filter(|(_, s)| selects(&s["nodeSelector"], &labels))
            .map(|(n, s)| (s["priority"].as_i64().unwrap_or(0), n.as_str()))
            .collect();
        // Highest priority first, then the alphabetically first name.
        matching.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        for (k, (_, name)) in matching.iter().enumerate() {
            let c = counts.get_mut(*name).expect("known policy");
            c.matched += 1;
            if k == 0 {
                c.governed += 1;
            } else {
                c.overridden += 1;
            }
        }
        winners.push(matching.first().map(|(_, n)| n.to_string()));
    }
    (winners, counts)
}

/// Every distinct resourceVersion the test saw per object, with when it saw it.
#[derive(Default)]
struct Versions(Mutex<HashMap<String, Vec<(String, Instant)>>>);

impl Versions {
    fn record(&self, name: String, rv: String) {
        if let Ok(mut m) = self.0.lock() {
            let seen = m.entry(name).or_default();
            if seen.last().is_none_or(|(last, _)| *last != rv) {
                seen.push((rv, Instant::now()));
            }
        }
    }

    /// When the first and the last version in [from, to) were seen, relative to `from`.
    fn span(&self, from: Instant, to: Instant) -> Option<(Duration, Duration)> {
        let m = self.0.lock().expect("versions lock");
        let times = m
            .values()
            .flatten()
            .map(|(_, t)| *t)
            .filter(|t| *t >= from && *t < to);
        let (mut first, mut last) = (None::<Instant>, None::<Instant>);
        for t in times {
            first = Some(first.map_or(t, |f| f.min(t)));
            last = Some(last.map_or(t, |l| l.max(t)));
        }
        Some((first? - from, last? - from))
    }

    /// Per object: how many versions were first seen in [from, to).
    fn between(&self, from: Instant, to: Instant) -> BTreeMap<String, usize> {
        let m = self.0.lock().expect("versions lock");
        m.iter()
            .map(|(k, v)| {
                let n = v.iter().filter(|(_, t)| *t >= from && *t < to).count();
                (k.clone(), n)
            })
            .collect()
    }
}

/// Feeds `versions` from a watch on `api` until the returned task is aborted; returns once
/// the initial list is done.
async fn watch_versions<K>(api: Api<K>, versions: Arc<Versions>) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Apply(o)) | Ok(Event::InitApply(o)) | Ok(Event::Delete(o)) => {
                    let m = o.meta();
                    versions.record(
                        m.name.clone().unwrap_or_default(),
                        m.resource_version.clone().unwrap_or_default(),
                    );
                }
                Ok(Event::InitDone) => {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(Event::Init) => {}
                Err(e) => eprintln!("watch error (the watcher retries): {e}"),
            }
        }
    });
    ready_rx.await.expect("the watch listed once");
    task
}

struct Operator {
    child: Child,
    metrics_port: u16,
}

impl Drop for Operator {
    fn drop(&mut self) {
        process::kill_group(&mut self.child);
    }
}

/// Sums of the operator's `writes` counter per controller label, from its /metrics.
fn operator_writes(op: &Operator) -> Option<BTreeMap<String, f64>> {
    let mut s = TcpStream::connect(("127.0.0.1", op.metrics_port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let mut out = BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| l.starts_with("nodetopo_operator_writes"))
    {
        let (series, value) = line.rsplit_once(' ')?;
        let controller = series
            .split("controller=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?");
        *out.entry(controller.to_string()).or_insert(0.0) += value.parse::<f64>().ok()?;
    }
    Some(out)
}

/// (peak resident memory in KiB, user + system CPU seconds) of a process, from /proc.
fn resources(pid: u32) -> Option<(u64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((hwm, (utime + stime) / ticks))
}

/// Checks every NodeTopology spec and every policy status against the expectation. `Err`
/// says what is still wrong (and how many).
async fn check(
    ntopos: &Api<NodeTopology>,
    policies: &Api<NodeResourcePolicy>,
    winners: &[Option<String>],
    counts: &BTreeMap<String, Counts>,
) -> Result<(), String> {
    let lp = ListParams::default();
    let stored: BTreeMap<String, NodeResourcePolicy> = policies
        .list(&lp)
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
        .collect();
    let nts: BTreeMap<String, NodeTopology> = ntopos
        .list(&lp)
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
        .collect();
    let mut wrong = Vec::new();
    for (i, winner) in winners.iter().enumerate() {
        let name = node_name(i);
        let Some(nt) = nts.get(&name) else {
            wrong.push(format!("{name}: no NodeTopology"));
            continue;
        };
        let winner = winner.as_ref().expect("the catch-all matches every node");
        let p = &stored[winner];
        let ok = nt
            .spec
            .policy_ref
            .as_ref()
            .is_some_and(|r| r.name == *winner && Some(r.generation) == p.metadata.generation)
            && Some(&nt.spec.cpu_manager) == p.spec.cpu_manager.as_ref()
            && Some(&nt.spec.topology_manager) == p.spec.topology_manager.as_ref();
        if !ok {
            wrong.push(format!(
                "{name}: spec {} but policy {winner} generation {:?} says {}",
                serde_json::to_string(&nt.spec).unwrap_or_default(),
                p.metadata.generation,
                serde_json::to_string(&p.spec).unwrap_or_default()
            ));
        }
    }
    for (name, want) in counts {
        let p = stored
            .get(name)
            .ok_or_else(|| format!("policy {name} missing"))?;
        let generation = p.metadata.generation;
        let Some(s) = p.status.as_ref() else {
            wrong.push(format!("{name}: no status"));
            continue;
        };
        let cond = |t: &str| {
            s.conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| (c.status.as_str(), c.reason.as_str(), c.observed_generation))
        };
        let conflict = if want.overridden > 0 { "True" } else { "False" };
        // No agent runs, so no governed node is applied yet.
        let ready = if want.governed == 0 {
            ("True", "NoGovernedNodes")
        } else {
            ("False", "Progressing")
        };
        let ok = s.observed_generation == generation
            && s.matched_nodes == want.matched
            && s.governed_nodes == want.governed
            && s.overridden_nodes == want.overridden
            && s.applied_nodes == 0
            && s.invalid_nodes == 0
            && cond("Conflict").is_some_and(|(st, _, g)| st == conflict && g == generation)
            && cond("Ready").is_some_and(|(st, r, g)| (st, r) == ready && g == generation)
            && cond("Invalid").is_some_and(|(st, _, g)| st == "False" && g == generation);
        if !ok {
            wrong.push(format!(
                "{name}: want {want:?} Conflict={conflict} Ready={ready:?} at generation {generation:?}, status {}",
                serde_json::to_string(s).unwrap_or_default()
            ));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("{} wrong; first: {}", wrong.len(), wrong[0]))
    }
}

async fn converge(
    what: &str,
    ntopos: &Api<NodeTopology>,
    policies: &Api<NodeResourcePolicy>,
    winners: &[Option<String>],
    counts: &BTreeMap<String, Counts>,
) {
    nodetopo_controlplane::wait::wait_for(
        what,
        CONVERGE_TIMEOUT,
        Duration::from_millis(250),
        || check(ntopos, policies, winners, counts),
    )
    .await
}

/// Histogram "k writes: n objects" over the given objects.
fn histogram<'a>(
    counts: &BTreeMap<String, usize>,
    names: impl Iterator<Item = &'a String>,
) -> BTreeMap<usize, usize> {
    let mut h = BTreeMap::new();
    for n in names {
        *h.entry(counts.get(n).copied().unwrap_or(0)).or_insert(0) += 1;
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_at_scale_2000_nodes_20_policies() {
    let Some(Fixture { cp, bin }) = Fixture::start("nodetopo-operator", NS).await else {
        return;
    };
    let client = cp.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let policies: Api<NodeResourcePolicy> = Api::all(client.clone());
    let ntopos: Api<NodeTopology> = Api::all(client.clone());

    // 2,000 Nodes, 32 requests in flight.
    let t = Instant::now();
    futures::stream::iter(0..NODES)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": node_name(i), "labels": node_labels(i)}
                }))
                .expect("node");
                nodes
                    .create(&PostParams::default(), &node)
                    .await
                    .map_err(|e| format!("creating {}: {e}", node_name(i)))
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .expect("nodes");
    println!("created {NODES} Nodes in {:?}", t.elapsed());

    let mut specs = policy_specs();
    assert_eq!(specs.len(), 20, "the test defines 20 policies");
    for (name, spec) in &specs {
        let p: NodeResourcePolicy = serde_json::from_value(json!({
            "apiVersion": "nodetopo.io/v1alpha1", "kind": "NodeResourcePolicy",
            "metadata": {"name": name}, "spec": spec
        }))
        .expect("policy");
        policies
            .create(&PostParams::default(), &p)
            .await
            .unwrap_or_else(|e| panic!("creating policy {name}: {e}"));
    }
    let (winners, counts) = expect(&specs);
    let governed_by_edited = winners
        .iter()
        .filter(|w| w.as_deref() == Some(EDITED))
        .count();
    assert_eq!(governed_by_edited, 500, "{EDITED} must govern 500 nodes");
    for (name, c) in &counts {
        println!(
            "expected {name}: matched {}, governed {}, overridden {}",
            c.matched, c.governed, c.overridden
        );
    }

    // Server-side write counters, started before the operator.
    let nt_versions = Arc::new(Versions::default());
    let policy_versions = Arc::new(Versions::default());
    let watches = [
        watch_versions(ntopos.clone(), nt_versions.clone()).await,
        watch_versions(policies.clone(), policy_versions.clone()).await,
    ];

    // The operator, with leader election as deployed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let log = std::fs::File::create(cp.dir().join("operator.log")).expect("log file");
    let mut cmd = Command::new(&bin);
    cmd.args([
        "--metrics-addr",
        &format!("127.0.0.1:{port}"),
        "--lease-namespace",
        NS,
        "--identity",
        "scale-op",
    ])
    .env("KUBECONFIG", cp.kubeconfig())
    .env("RUST_LOG", "warn")
    .stdin(Stdio::null())
    .stdout(log.try_clone().expect("log"))
    .stderr(log);
    let started = Instant::now();
    let op = Operator {
        child: process::spawn(cmd, "nodetopo-operator").expect("starting the operator"),
        metrics_port: port,
    };
    let pid = op.child.id();

    converge("initial convergence", &ntopos, &policies, &winners, &counts).await;
    let initial = started.elapsed();
    println!("initial convergence: {NODES} NodeTopologies and 20 policy statuses right {initial:?} after the operator started");
    tokio::time::sleep(SETTLE).await;
    let phase1_end = Instant::now();
    let nt_writes = nt_versions.between(started, phase1_end);
    let policy_writes = policy_versions.between(started, phase1_end);
    let all_nodes: Vec<String> = (0..NODES).map(node_name).collect();
    let h1 = histogram(&nt_writes, all_nodes.iter());
    let writes1 = operator_writes(&op).expect("operator /metrics");
    let status_writes1: usize = policy_writes.values().sum();
    println!("initial: writes per NodeTopology (server side, distinct resourceVersions): {h1:?} (writes: objects)");
    println!(
        "initial: NodeTopology writes seen from {:?} to {:?} after the operator started; policy status writes from {:?} to {:?}",
        nt_versions.span(started, phase1_end).map(|s| s.0),
        nt_versions.span(started, phase1_end).map(|s| s.1),
        policy_versions.span(started, phase1_end).map(|s| s.0),
        policy_versions.span(started, phase1_end).map(|s| s.1),
    );
    println!(
        "initial: operator-counted applies {writes1:?}; policy status writes seen {status_writes1} for 20 policies: {policy_writes:?}"
    );
    let (hwm1, cpu1) = resources(pid).expect("/proc of the operator");
    println!("after initial convergence: operator VmHWM {hwm1} KiB, CPU {cpu1:.2} s");

    // Edit the policy governing the 500 z3 nodes.
    let touched: Vec<String> = winners
        .iter()
        .enumerate()
        .filter(|(_, w)| w.as_deref() == Some(EDITED))
        .map(|(i, _)| node_name(i))
        .collect();
    let untouched: Vec<String> = winners
        .iter()
        .enumerate()
        .filter(|(_, w)| w.as_deref() != Some(EDITED))
        .map(|(i, _)| node_name(i))
        .collect();
    let edit = json!({"spec": {"topologyManager": {"policy": "single-numa-node", "scope": "pod"}}});
    for (name, spec) in specs.iter_mut() {
        if name == EDITED {
            spec["topologyManager"] = edit["spec"]["topologyManager"].clone();
        }
    }
    let (winners2, counts2) = expect(&specs);
    assert_eq!(winners2, winners, "a spec edit moves no node");
    let edited_at = Instant::now();
    policies
        .patch(EDITED, &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("editing the policy");
    converge(
        "convergence after the edit",
        &ntopos,
        &policies,
        &winners2,
        &counts2,
    )
    .await;
    let after_edit = edited_at.elapsed();
    println!(
        "edit of {EDITED} (topologyManager best-effort -> single-numa-node/pod) touching {} nodes converged in {after_edit:?}",
        touched.len()
    );
    tokio::time::sleep(SETTLE).await;
    let phase2_end = Instant::now();
    let nt_writes2 = nt_versions.between(edited_at, phase2_end);
    let policy_writes2 = policy_versions.between(edited_at, phase2_end);
    let h_touched = histogram(&nt_writes2, touched.iter());
    let h_untouched = histogram(&nt_writes2, untouched.iter());
    let writes2 = operator_writes(&op).expect("operator /metrics");
    println!("edit: writes per touched NodeTopology: {h_touched:?}; per untouched one: {h_untouched:?} (writes: objects)");
    println!(
        "edit: NodeTopology writes seen from {:?} to {:?} after the edit; policy versions per policy {:?}",
        nt_versions.span(edited_at, phase2_end).map(|s| s.0),
        nt_versions.span(edited_at, phase2_end).map(|s| s.1),
        policy_writes2.iter().filter(|(_, n)| **n > 0).collect::<BTreeMap<_, _>>()
    );
    println!(
        "edit: operator-counted applies (cumulative) {writes2:?}; policy resourceVersions seen {} (the spec edit included)",
        policy_writes2.values().sum::<usize>()
    );
    let (hwm, cpu) = resources(pid).expect("/proc of the operator");
    println!(
        "operator at the end: VmHWM {hwm} KiB ({:.1} MiB), CPU {cpu:.2} s (user + system)",
        hwm as f64 / 1024.0
    );

    assert_eq!(
        h1,
        BTreeMap::from([(1, NODES)]),
        "initial convergence: every NodeTopology written exactly once"
    );
    assert_eq!(
        h_touched,
        BTreeMap::from([(1, touched.len())]),
        "edit: every touched NodeTopology written exactly once"
    );
    assert_eq!(
        h_untouched,
        BTreeMap::from([(0, untouched.len())]),
        "edit: no untouched NodeTopology written"
    );
    let node_applies = |w: &BTreeMap<String, f64>| w.get("node").copied().unwrap_or(0.0);
    let (applies1, applies2) = (
        node_applies(&writes1),
        node_applies(&writes2) - node_applies(&writes1),
    );
    for (what, applies, changed) in [
        ("initial", applies1, NODES),
        ("edit", applies2, touched.len()),
    ] {
        let per = applies / changed as f64;
        println!("{what}: {applies} NodeTopology applies sent for {changed} changed NodeTopologies ({per:.3} each)");
        assert!(
            (1.0..=1.05).contains(&per),
            "{what}: {applies} applies sent for {changed} changed NodeTopologies; want one each (at most 5% no-op applies)"
        );
    }
    for w in watches {
        w.abort();
    }
    drop(op);
}
