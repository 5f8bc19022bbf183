//! Unit tests of the pure decisions: selection, priority and conflict, spec rendering,
//! node states, status roll-up, condition timestamps, events.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use nodetopo_crds::conditions::{find, CONFLICT, INVALID, READY};
use nodetopo_crds::{
    CpuManagerConfig, CpuManagerPolicy, NodeResourcePolicySpec, NodeTopologyStatus,
    TopologyManagerConfig, TopologyManagerPolicy,
};
use nodetopo_engine::report::TopologyReport;

use super::*;

const NO_NT: &[NodeTopology] = &[];
const NO_POLICIES: &[NodeResourcePolicy] = &[];

/// Every node's desired NodeTopology as the node controller renders it, sorted by node name.
fn desired(ps: &[NodeResourcePolicy], nodes: &[Node]) -> Vec<DesiredNode> {
    let compiled = compile(ps);
    let mut out: Vec<DesiredNode> = nodes.iter().map(|n| desire_node(&compiled, n)).collect();
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

pub(crate) fn t(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).unwrap())
}

pub(crate) fn policy(
    name: &str,
    priority: i32,
    sel: &[(&str, &str)],
    reserved: &str,
) -> NodeResourcePolicy {
    let mut p = NodeResourcePolicy::new(
        name,
        NodeResourcePolicySpec {
            node_selector: (!sel.is_empty()).then(|| LabelSelector {
                match_labels: Some(
                    sel.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                match_expressions: None,
            }),
            priority,
            cpu_manager: Some(CpuManagerConfig {
                policy: CpuManagerPolicy::Static,
                options: BTreeMap::from([("full-pcpus-only".to_string(), "true".to_string())]),
                reserved_system_cpus: Some(reserved.to_string()),
                reserved_cpus: None,
            }),
            topology_manager: Some(TopologyManagerConfig {
                policy: TopologyManagerPolicy::SingleNumaNode,
                ..Default::default()
            }),
            rollout: None,
        },
    );
    p.metadata.generation = Some(3);
    p
}

pub(crate) fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn ntopo(
    d: &DesiredNode,
    generation: i64,
    observed: Option<i64>,
    cpus: Option<&str>,
) -> NodeTopology {
    let mut nt = NodeTopology::new(&d.node, d.spec.clone());
    nt.metadata.generation = Some(generation);
    nt.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: d.node.clone(),
        uid: d.node_uid.clone(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    nt.status = Some(NodeTopologyStatus {
        observed_generation: observed,
        topology: cpus.map(|c| TopologyReport {
            cpus: c.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    nt
}

#[test]
fn no_policy_renders_none_without_ref() {
    let d = decide(NO_POLICIES, &[node("n1", &[])], NO_NT, &t(0));
    let dn = desired(NO_POLICIES, &[node("n1", &[])]);
    assert_eq!(dn.len(), 1);
    assert_eq!(dn[0].spec, NodeTopologySpec::default());
    assert_eq!(dn[0].spec.cpu_manager.policy, CpuManagerPolicy::None);
    assert_eq!(
        dn[0].spec.topology_manager.policy,
        TopologyManagerPolicy::None
    );
    assert!(dn[0].spec.policy_ref.is_none());
    assert!(d.statuses.is_empty());
}

#[test]
fn selection_by_labels_and_spec_rendering() {
    let ps = [policy("telco", 0, &[("pool", "telco")], "0-1")];
    let nodes = [
        node("a", &[("pool", "telco")]),
        node("b", &[("pool", "web")]),
    ];
    let d = decide(&ps, &nodes, NO_NT, &t(0));
    let dn = desired(&ps, &nodes);
    let a = &dn[0];
    assert_eq!(a.node, "a");
    assert_eq!(a.node_uid, "uid-a");
    assert_eq!(a.spec.cpu_manager, ps[0].spec.cpu_manager.clone().unwrap());
    assert_eq!(
        a.spec.topology_manager.policy,
        TopologyManagerPolicy::SingleNumaNode
    );
    assert_eq!(
        a.spec.policy_ref,
        Some(PolicyRef {
            name: "telco".into(),
            generation: 3
        })
    );
    assert_eq!(dn[1].spec, NodeTopologySpec::default());
    let s = &d.statuses["telco"];
    assert_eq!(
        (s.matched_nodes, s.governed_nodes, s.applied_nodes),
        (1, 1, 0)
    );
}

#[test]
fn priority_wins_and_loser_reports_overridden() {
    let ps = [
        policy("low", 1, &[], "0"),
        policy("high", 5, &[("pool", "telco")], "0-1"),
    ];
    let nodes = [node("a", &[("pool", "telco")]), node("b", &[])];
    let d = decide(&ps, &nodes, NO_NT, &t(7));
    let dn = desired(&ps, &nodes);
    assert_eq!(dn[0].spec.policy_ref.as_ref().unwrap().name, "high");
    assert_eq!(dn[1].spec.policy_ref.as_ref().unwrap().name, "low");
    let low = &d.statuses["low"];
    assert_eq!(
        (low.matched_nodes, low.governed_nodes, low.overridden_nodes),
        (2, 1, 1)
    );
    let c = find(&low.conditions, CONFLICT).unwrap();
    assert_eq!(c.status, "True");
    assert_eq!(c.reason, "Overridden");
    assert_eq!(
        c.message,
        "1 matched node(s) are governed by a policy of higher priority: high"
    );
    assert_eq!(c.observed_generation, Some(3));
    assert_eq!(c.last_transition_time, t(7));
    assert_eq!(
        low.problem_nodes,
        vec![
            NodeProblem {
                node: "a".into(),
                reason: "Overridden".into(),
                message: "governed by policy high (priority 5)".into()
            },
            NodeProblem {
                node: "b".into(),
                reason: "Pending".into(),
                message: "NodeTopology not created yet".into()
            }
        ]
    );
    let high = &d.statuses["high"];
    assert_eq!(find(&high.conditions, CONFLICT).unwrap().status, "False");
}

#[test]
fn equal_priority_breaks_by_name() {
    let ps = [policy("zeta", 0, &[], "0"), policy("alpha", 0, &[], "0-1")];
    let d = decide(&ps, &[node("n", &[])], NO_NT, &t(0));
    let dn = desired(&ps, &[node("n", &[])]);
    assert_eq!(dn[0].spec.policy_ref.as_ref().unwrap().name, "alpha");
    let c = find(&d.statuses["zeta"].conditions, CONFLICT).unwrap();
    assert_eq!(c.reason, "TiedPriority");
    assert_eq!(
        c.message,
        "1 matched node(s) are governed by a policy of equal priority and an earlier name (or higher priority): alpha"
    );
}

#[test]
fn invalid_policy_is_skipped_and_reports_invalid_spec() {
    let mut bad = policy("bad", 100, &[], "0-1");
    bad.spec.cpu_manager.as_mut().unwrap().reserved_cpus = Some(2);
    let ps = [bad, policy("good", 0, &[], "0")];
    let d = decide(&ps, &[node("n", &[])], NO_NT, &t(0));
    let dn = desired(&ps, &[node("n", &[])]);
    assert_eq!(dn[0].spec.policy_ref.as_ref().unwrap().name, "good");
    let s = &d.statuses["bad"];
    assert_eq!((s.matched_nodes, s.governed_nodes), (1, 0));
    let inv = find(&s.conditions, INVALID).unwrap();
    assert_eq!(
        (inv.status.as_str(), inv.reason.as_str()),
        ("True", "InvalidSpec")
    );
    assert_eq!(
        inv.message,
        "cpuManager: set either reservedSystemCPUs or reservedCPUs, not both (at spec.cpuManager)"
    );
    assert_eq!(find(&s.conditions, READY).unwrap().status, "False");
    // The good policy does not conflict with an invalid one.
    assert_eq!(
        find(&d.statuses["good"].conditions, CONFLICT)
            .unwrap()
            .status,
        "False"
    );
}

#[test]
fn node_states_applied_pending_invalid() {
    let ps = [policy("p", 0, &[], "0-1")];
    let nodes = [
        node("a", &[]),
        node("b", &[]),
        node("c", &[]),
        node("d", &[]),
        node("e", &[]),
    ];
    let first = desired(&ps, &nodes);
    let dn = |i: usize| &first[i];
    let mut stale = ntopo(dn(2), 2, Some(2), Some("0-7"));
    stale.spec.policy_ref = Some(PolicyRef {
        name: "p".into(),
        generation: 2,
    });
    let mut agent_invalid = ntopo(dn(3), 1, Some(1), Some("0-7"));
    agent_invalid.status.as_mut().unwrap().conditions.push(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "Invalid".into(),
            status: "True".into(),
            reason: "KubeletMismatch".into(),
            message: "kubelet runs policy none".into(),
            observed_generation: Some(1),
            last_transition_time: t(0),
        },
    );
    let existing = [
        ntopo(dn(0), 4, Some(4), Some("0-7")), // applied
        ntopo(dn(1), 4, Some(3), Some("0-7")), // agent behind
        stale,                                 // spec to change
        agent_invalid,                         // agent says invalid
        ntopo(dn(4), 1, Some(1), Some("0")),   // operator: CPU 1 absent
    ];
    let d = decide(&ps, &nodes, &existing, &t(5));
    let s = &d.statuses["p"];
    assert_eq!(
        (s.governed_nodes, s.applied_nodes, s.invalid_nodes),
        (5, 1, 2)
    );
    let reasons: Vec<(&str, &str)> = s
        .problem_nodes
        .iter()
        .map(|p| (p.node.as_str(), p.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            ("b", "Pending"),
            ("c", "Pending"),
            ("d", "KubeletMismatch"),
            ("e", "ReservedCPUsAbsent")
        ]
    );
    assert_eq!(
        s.problem_nodes[0].message,
        "agent applied generation 3 of 4"
    );
    assert_eq!(
        s.problem_nodes[1].message,
        "NodeTopology spec not updated yet"
    );
    let inv = find(&s.conditions, INVALID).unwrap();
    assert_eq!(inv.reason, "InvalidOnNodes");
    assert_eq!(
        inv.message,
        "the configuration cannot apply on 2 node(s): d (KubeletMismatch: kubelet runs policy none), e (ReservedCPUsAbsent: cpuManager.reservedSystemCPUs: CPUs 1 do not exist on this node (online CPUs 0))"
    );
    let ready = find(&s.conditions, READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "InvalidOnNodes")
    );
    assert_eq!(s.observed_generation, Some(3));
}

#[test]
fn ready_when_all_applied_and_transition_time_stable() {
    let mut ps = [policy("p", 0, &[], "0-1")];
    let nodes = [node("a", &[])];
    let first = desired(&ps, &nodes);
    let existing = [ntopo(&first[0], 1, Some(1), Some("0-7"))];
    let d1 = decide(&ps, &nodes, &existing, &t(10));
    let r1 = find(&d1.statuses["p"].conditions, READY).unwrap().clone();
    assert_eq!(
        (r1.status.as_str(), r1.reason.as_str()),
        ("True", "Applied")
    );
    assert_eq!(r1.message, "all 1 governed nodes applied");
    assert_eq!(r1.last_transition_time, t(10));
    // Feed the status back: a later decision with nothing changed keeps the time and is a no-op.
    ps[0].status = Some(d1.statuses["p"].clone());
    let d2 = decide(&ps, &nodes, &existing, &t(20));
    assert_eq!(
        find(&d2.statuses["p"].conditions, READY)
            .unwrap()
            .last_transition_time,
        t(10)
    );
    assert!(!status_changed(ps[0].status.as_ref(), &d2.statuses["p"]));
    assert!(events_for(ps[0].status.as_ref(), &d2.statuses["p"]).is_empty());
}

#[test]
fn no_governed_nodes_is_ready() {
    let ps = [policy("p", 0, &[("pool", "none")], "0-1")];
    let d = decide(&ps, &[node("a", &[])], NO_NT, &t(0));
    let r = find(&d.statuses["p"].conditions, READY).unwrap();
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("True", "NoGovernedNodes")
    );
}

#[test]
fn problem_list_is_capped_and_sorted() {
    let ps = [policy("p", 0, &[], "0-1")];
    let nodes: Vec<Node> = (0..25)
        .rev()
        .map(|i| node(&format!("n{i:02}"), &[]))
        .collect();
    let d = decide(&ps, &nodes, NO_NT, &t(0));
    let s = &d.statuses["p"];
    assert_eq!(s.problem_nodes.len(), MAX_PROBLEM_NODES);
    assert_eq!(s.problem_nodes[0].node, "n00");
    assert_eq!(s.problem_nodes[9].node, "n09");
    assert_eq!(desired(&ps, &nodes)[0].node, "n00");
    let r = find(&s.conditions, READY).unwrap();
    assert_eq!(r.message, "0 of 25 governed nodes applied");
}

#[test]
fn needs_apply_detects_spec_and_owner() {
    let ps = [policy("p", 0, &[], "0-1")];
    let dn = desired(&ps, &[node("a", &[])]);
    let want = &dn[0];
    assert!(needs_apply(None, want));
    let nt = ntopo(want, 1, None, None);
    assert!(!needs_apply(Some(&nt), want));
    let mut other_spec = nt.clone();
    other_spec.spec.topology_manager.policy = TopologyManagerPolicy::BestEffort;
    assert!(needs_apply(Some(&other_spec), want));
    let mut no_owner = nt.clone();
    no_owner.metadata.owner_references = None;
    assert!(needs_apply(Some(&no_owner), want));
    let mut old_uid = nt;
    old_uid.metadata.owner_references.as_mut().unwrap()[0].uid = "recreated".into();
    assert!(needs_apply(Some(&old_uid), want));
}

#[test]
fn events_on_flips_only() {
    let ps = [policy("zeta", 0, &[], "0"), policy("alpha", 0, &[], "0-1")];
    let d = decide(&ps, &[node("n", &[])], NO_NT, &t(0));
    let ev = events_for(None, &d.statuses["zeta"]);
    assert_eq!(
        ev,
        vec![PolicyEvent {
            reason: "TiedPriority".into(),
            note: "1 matched node(s) are governed by a policy of equal priority and an earlier name (or higher priority): alpha".into(),
            warning: true
        }]
    );
    assert!(events_for(Some(&d.statuses["zeta"]), &d.statuses["zeta"]).is_empty());
}

#[test]
fn select_orders_candidates() {
    let ps = [
        policy("b", 1, &[], "0"),
        policy("a", 1, &[], "0"),
        policy("c", 9, &[("x", "y")], "0"),
    ];
    let compiled = compile(&ps);
    let names: Vec<&str> = compiled.iter().map(|c| c.name).collect();
    assert_eq!(names, vec!["c", "a", "b"]);
    let sel = select(&compiled, &BTreeMap::new());
    assert_eq!(sel.winner, Some(1));
    assert_eq!(sel.losers, vec![2]);
}

#[test]
fn rollout_marks_batches_and_counts_through_decide() {
    use nodetopo_crds::conditions::{upsert, ConditionSpec, APPLIED, PROGRESSING};
    use nodetopo_crds::rollout::{RolloutMode, RolloutSpec};
    use nodetopo_crds::APPLY_GENERATION_ANNOTATION;
    let mut p = policy("p", 0, &[], "0");
    let nodes: Vec<Node> = ["n3", "n1", "n2"].iter().map(|n| node(n, &[])).collect();
    let first = desired(std::slice::from_ref(&p), &nodes);
    let mut nts: Vec<NodeTopology> = first.iter().map(|d| ntopo(d, 1, Some(1), None)).collect();
    // Observe (no rollout section): counts, no marks.
    let d = decide(std::slice::from_ref(&p), &nodes, &nts, &t(1));
    assert!(d.marks.is_empty());
    let s = &d.statuses["p"];
    assert_eq!(
        (s.updated_nodes, s.pending_nodes, s.failed_nodes),
        (0, 3, 0)
    );
    let c = find(&s.conditions, PROGRESSING).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ObserveOnly")
    );
    // Apply, maxUnavailable 1: n1 first.
    p.spec.rollout = Some(RolloutSpec {
        mode: RolloutMode::Apply,
        ..Default::default()
    });
    let d = decide(std::slice::from_ref(&p), &nodes, &nts, &t(2));
    let marked: Vec<&str> = d.marks.iter().map(|m| m.node.as_str()).collect();
    assert_eq!(marked, ["n1"]);
    assert_eq!(d.marks[0].generation, 1);
    let c = find(&d.statuses["p"].conditions, PROGRESSING).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "RollingOut")
    );
    // n1 marked and updated; n2 marked and failed: paused, n3 not started.
    let verdict = |nt: &mut NodeTopology, ok: bool, why: &str| {
        nt.metadata.annotations = Some(BTreeMap::from([(
            APPLY_GENERATION_ANNOTATION.to_string(),
            "1".to_string(),
        )]));
        let st = nt.status.get_or_insert_with(Default::default);
        upsert(
            &mut st.conditions,
            &ConditionSpec::new(APPLIED, ok, why, "x"),
            Some(1),
            &t(3),
        );
    };
    nts.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    verdict(&mut nts[0], true, "RestartOnly");
    verdict(&mut nts[1], false, "Failed");
    let d = decide(std::slice::from_ref(&p), &nodes, &nts, &t(4));
    assert!(d.marks.is_empty(), "{:?}", d.marks);
    let s = &d.statuses["p"];
    assert_eq!(
        (s.updated_nodes, s.pending_nodes, s.failed_nodes),
        (1, 1, 1)
    );
    let c = find(&s.conditions, PROGRESSING).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "Paused"));
}

#[test]
fn rollout_progress_deadline_through_decide() {
    use nodetopo_crds::conditions::{reason, PROGRESSING};
    use nodetopo_crds::rollout::{RolloutMode, RolloutSpec};
    use nodetopo_crds::{APPLY_GENERATION_ANNOTATION, APPLY_STARTED_ANNOTATION};
    let mut p = policy("p", 0, &[], "0");
    p.spec.rollout = Some(RolloutSpec {
        mode: RolloutMode::Apply,
        progress_deadline_seconds: Some(3),
        ..Default::default()
    });
    let nodes: Vec<Node> = ["n1", "n2"].iter().map(|n| node(n, &[])).collect();
    let mut nts: Vec<NodeTopology> = desired(std::slice::from_ref(&p), &nodes)
        .iter()
        .map(|d| ntopo(d, 1, Some(1), None))
        .collect();
    // The first mark carries its time; the policy is to be looked at 3 s later.
    let d = decide(std::slice::from_ref(&p), &nodes, &nts, &t(10));
    assert_eq!(d.marks.len(), 1);
    assert_eq!(
        (d.marks[0].node.as_str(), d.marks[0].started),
        ("n1", t(10).0)
    );
    assert_eq!(d.wake_at["p"], t(13).0);
    // n1 marked at t(10), its agent silent.
    let mark = |nt: &mut NodeTopology, started: Option<String>| {
        let a = nt.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(APPLY_GENERATION_ANNOTATION.to_string(), "1".to_string());
        if let Some(s) = started {
            a.insert(APPLY_STARTED_ANNOTATION.to_string(), s);
        }
    };
    nts.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    mark(&mut nts[0], Some(t(10).0.to_string()));
    let d = decide(std::slice::from_ref(&p), &nodes, &nts, &t(13));
    assert!(d.marks.is_empty(), "{:?}", d.marks);
    assert_eq!(d.statuses["p"].failed_nodes, 0);
    assert_eq!(d.wake_at["p"], t(13).0);
    // Past it: failed, paused (pauseOnFailure defaults to true), nothing to wake for.
    let d = decide(std::slice::from_ref(&p), &nodes, &nts, &t(14));
    let s = &d.statuses["p"];
    assert_eq!(
        (s.updated_nodes, s.pending_nodes, s.failed_nodes),
        (0, 1, 1)
    );
    let c = find(&s.conditions, PROGRESSING).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", reason::PAUSED)
    );
    assert!(
        c.message.contains("n1 (ProgressDeadlineExceeded"),
        "{}",
        c.message
    );
    assert!(d.marks.is_empty() && d.wake_at.is_empty(), "{d:?}");
    // Without pause: the slot is free, n2 starts.
    if let Some(r) = p.spec.rollout.as_mut() {
        r.pause_on_failure = Some(false);
    }
    let d = decide(std::slice::from_ref(&p), &nodes, &nts, &t(14));
    let marked: Vec<&str> = d.marks.iter().map(|m| m.node.as_str()).collect();
    assert_eq!(marked, ["n2"]);
    // A mark without a start time is re-stamped with now and not failed.
    let mut nts2 = nts.clone();
    nts2[0]
        .metadata
        .annotations
        .as_mut()
        .map(|a| a.remove(APPLY_STARTED_ANNOTATION));
    let d = decide(std::slice::from_ref(&p), &nodes, &nts2, &t(100));
    let marked: Vec<(&str, i64)> = d
        .marks
        .iter()
        .map(|m| (m.node.as_str(), m.started.as_second()))
        .collect();
    assert_eq!(marked, [("n1", t(100).0.as_second())]);
    assert_eq!(d.statuses["p"].failed_nodes, 0);
    // An invalid deadline is reported, nothing is marked.
    if let Some(r) = p.spec.rollout.as_mut() {
        r.progress_deadline_seconds = Some(0);
    }
    let d = decide(std::slice::from_ref(&p), &nodes, &nts, &t(14));
    let c = find(&d.statuses["p"].conditions, PROGRESSING).unwrap();
    assert_eq!(c.reason, reason::INVALID_ROLLOUT);
    assert!(
        c.message.contains("progressDeadlineSeconds"),
        "{}",
        c.message
    );
    assert!(d.marks.is_empty());
}
