//! One test per reason class on plain values, the disagreement cases, the replay's state
//! (pods admitted after the refused one are not there), and the summary's bound.

use super::*;
use crate::admission::{CpuPolicyConfig, NodeConfig};
use crate::cpumanager::{ReservedCpus, StaticPolicyOptions};
use crate::devicemanager::DeviceSpec;
use crate::pod::{Container, ResourceList};
use crate::topology::{CpuInfo, CpuTopology, NumaNode};
use crate::topologymanager::TmScope;
use crate::CpuSet;

/// `numa` nodes of `cores` cores with `threads` threads each (siblings numbered together).
fn machine(numa: usize, cores: usize, threads: usize) -> CpuTopology {
    let per_node = cores * threads;
    let mut cpus = Vec::new();
    for n in 0..numa {
        for k in 0..cores {
            for th in 0..threads {
                cpus.push(CpuInfo {
                    id: n * per_node + k * threads + th,
                    core: n * per_node + k * threads,
                    socket: 0,
                    numa: n,
                    uncore: n,
                });
            }
        }
    }
    let nodes = (0..numa)
        .map(|n| NumaNode {
            id: n,
            cpus: CpuSet::from_ids(n * per_node..(n + 1) * per_node),
            distances: Some((0..numa).map(|m| if m == n { 10 } else { 20 }).collect()),
            memory_bytes: None,
            hugepages: vec![],
        })
        .collect();
    CpuTopology::with_derived_counts(cpus, nodes, vec![]).expect("a valid machine")
}

fn container(name: &str, cpus: u64, devices: &[(&str, u64)]) -> Container {
    let mut rl = ResourceList {
        cpu_millis: Some(cpus * 1000),
        memory_bytes: Some(1 << 28),
        ..Default::default()
    };
    for (r, n) in devices {
        rl.extended.insert((*r).to_string(), *n);
    }
    Container {
        name: name.into(),
        requests: rl.clone(),
        limits: rl,
        restartable: false,
    }
}

fn pod(name: &str, containers: Vec<Container>) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        init_containers: vec![],
        containers,
    }
}

fn config(reserved: &str, options: StaticPolicyOptions, policy: TmPolicy) -> NodeConfig {
    NodeConfig {
        cpu: CpuPolicyConfig::Static {
            reserved: ReservedCpus::Explicit(CpuSet::parse(reserved).expect("a cpuset")),
            options,
        },
        tm_policy: policy,
        tm_scope: TmScope::Container,
        ..Default::default()
    }
}

fn free(r: &ExplanationReport) -> Vec<(u64, u64, u64)> {
    r.numa_nodes
        .iter()
        .map(|n| (n.id, n.free_cpu_count, n.free_cores))
        .collect()
}

fn hints(r: &ExplanationReport, provider: &str) -> Vec<(Vec<u64>, bool)> {
    r.providers
        .iter()
        .find(|p| p.provider == provider)
        .and_then(|p| p.hints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|h| (h.numa_nodes.unwrap_or_default(), h.preferred))
        .collect()
}

#[test]
fn single_numa_node_refuses_a_pod_that_needs_two_nodes() {
    let t = machine(2, 4, 1);
    let mut a = NodeAdmitter::new(
        t,
        &config("", StaticPolicyOptions::default(), TmPolicy::SingleNumaNode),
    )
    .expect("config");
    assert!(a
        .admit(&pod("first", vec![container("main", 3, &[])]))
        .admitted());
    let big = pod("big", vec![container("app", 5, &[])]);
    let before = a.pools();
    let r = explain_rejection(
        &a,
        &big,
        &[],
        "TopologyAffinityError",
        "Resources cannot be allocated with Topology locality",
    );
    assert_eq!(a.pools(), before, "the replay leaves the state alone");
    assert_eq!(r.agreement, Agreement::Agree);
    assert_eq!(r.replay_reason, "TopologyAffinityError");
    assert_eq!(r.container, "app");
    assert_eq!(
        r.config,
        "cpu manager static; topology manager single-numa-node, scope container"
    );
    // first holds 3 CPUs of node 0: 1 left there, 4 on node 1; 5 fit only both together
    // (the narrowest possible mask, so the CPU manager prefers it; single-numa-node does not).
    assert_eq!(free(&r), vec![(0, 1, 1), (1, 4, 4)]);
    assert_eq!(r.numa_nodes[0].free_cpus, "3");
    assert_eq!(r.numa_nodes[1].free_cpus, "4-7");
    assert_eq!(hints(&r, "cpu"), vec![(vec![0, 1], true)]);
    let merged = r.merged.clone().expect("a merge ran");
    assert!(!merged.admit);
    assert_eq!(r.requests[0].exclusive_cpus, 5);
    assert!(
        r.summary
            .contains("node 0: 1 CPUs (3) in 1 whole cores; node 1: 4 CPUs (4-7)"),
        "{}",
        r.summary
    );
    assert!(
        r.summary.contains("cpu cpu: {0,1} preferred"),
        "{}",
        r.summary
    );
    assert!(
        r.summary.ends_with("nodetopo's replay agrees: TopologyAffinityError (Resources cannot be allocated with Topology locality)."),
        "{}",
        r.summary
    );
}

#[test]
fn full_pcpus_only_refuses_an_odd_count() {
    let t = machine(1, 4, 2);
    let options = StaticPolicyOptions {
        full_pcpus_only: true,
        ..Default::default()
    };
    let a = NodeAdmitter::new(t, &config("0-1", options, TmPolicy::None)).expect("config");
    let odd = pod("odd", vec![container("app", 3, &[])]);
    let message = "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2";
    let r = explain_rejection(&a, &odd, &[], "SMTAlignmentError", message);
    assert_eq!(r.agreement, Agreement::Agree, "{}", r.summary);
    assert_eq!(r.replay_reason, "SMTAlignmentError");
    assert_eq!(r.replay_message, message);
    assert_eq!(free(&r), vec![(0, 6, 3)]);
    assert!(r.providers.is_empty() && r.merged.is_none());
    assert_eq!(
        r.config,
        "cpu manager static (full-pcpus-only); topology manager none"
    );
    assert!(
        r.summary
            .contains("No hints are merged under topology manager none"),
        "{}",
        r.summary
    );
}

#[test]
fn a_device_only_on_the_other_numa_node() {
    let t = machine(2, 4, 1);
    let mut cfg = config("", StaticPolicyOptions::default(), TmPolicy::SingleNumaNode);
    cfg.devices = vec![DeviceSpec {
        resource: "example.com/nic".into(),
        id: "nic0".into(),
        numa_nodes: vec![0],
        healthy: true,
    }];
    let mut a = NodeAdmitter::new(t, &cfg).expect("config");
    // Node 0's CPUs all go to the first pod; the NIC stays free on node 0.
    assert!(a
        .admit(&pod("first", vec![container("main", 4, &[])]))
        .admitted());
    let p = pod("net", vec![container("app", 2, &[("example.com/nic", 1)])]);
    let r = explain_rejection(&a, &p, &[], "TopologyAffinityError", "");
    assert_eq!(r.agreement, Agreement::Agree, "{}", r.summary);
    assert_eq!(free(&r), vec![(0, 0, 0), (1, 4, 4)]);
    assert_eq!(
        r.numa_nodes[0].free_devices,
        BTreeMap::from([("example.com/nic".to_string(), 1)])
    );
    assert!(r.numa_nodes[1].free_devices.is_empty());
    assert_eq!(
        r.requests[0].devices,
        BTreeMap::from([("example.com/nic".to_string(), 1)])
    );
    assert_eq!(hints(&r, "cpu"), vec![(vec![1], true), (vec![0, 1], false)]);
    // The kubelet enumerates device masks over the nodes the resource's devices sit on.
    assert_eq!(hints(&r, "devices"), vec![(vec![0], true)]);
    assert!(!r.merged.clone().expect("merged").admit);
    assert!(
        r.summary
            .contains("Requests: app asks 2 exclusive CPUs + 1 example.com/nic"),
        "{}",
        r.summary
    );
    assert!(r
        .summary
        .contains("node 0: 0 CPUs (none) in 0 whole cores, 1 example.com/nic"));
}

#[test]
fn a_replay_that_admits_the_pod_is_a_disagreement() {
    let t = machine(2, 4, 1);
    let a = NodeAdmitter::new(
        t,
        &config("", StaticPolicyOptions::default(), TmPolicy::SingleNumaNode),
    )
    .expect("config");
    let small = pod("small", vec![container("app", 2, &[])]);
    let r = explain_rejection(&a, &small, &[], "TopologyAffinityError", "x");
    assert_eq!(r.agreement, Agreement::Disagree);
    assert!(r.replay_reason.is_empty());
    assert!(r.merged.clone().expect("merged").admit);
    assert!(
        r.summary.ends_with(
            "nodetopo's replay disagrees: fidelity bug: the replay admits the pod, the kubelet refused it with TopologyAffinityError."
        ),
        "{}",
        r.summary
    );
}

#[test]
fn a_replay_refusing_for_another_reason_is_a_disagreement() {
    let t = machine(2, 4, 1);
    let a = NodeAdmitter::new(
        t,
        &config("", StaticPolicyOptions::default(), TmPolicy::SingleNumaNode),
    )
    .expect("config");
    let big = pod("big", vec![container("app", 6, &[])]);
    let r = explain_rejection(&a, &big, &[], "SMTAlignmentError", "y");
    assert_eq!(r.agreement, Agreement::Disagree);
    assert_eq!(r.replay_reason, "TopologyAffinityError");
    assert!(
        r.summary.contains("nodetopo's replay disagrees: fidelity bug: the replay refuses the pod with TopologyAffinityError"),
        "{}",
        r.summary
    );
    assert!(r.summary.contains("the kubelet with SMTAlignmentError"));
}

#[test]
fn pods_admitted_after_the_refused_one_are_not_in_the_replay() {
    let t = machine(2, 4, 1);
    let mut a = NodeAdmitter::new(
        t,
        &config("", StaticPolicyOptions::default(), TmPolicy::SingleNumaNode),
    )
    .expect("config");
    assert!(a
        .admit(&pod("before", vec![container("m", 4, &[])]))
        .admitted());
    assert!(a
        .admit(&pod("after", vec![container("m", 4, &[])]))
        .admitted());
    let p = pod("x", vec![container("app", 4, &[])]);
    // With "after" counted, no node has 4 CPUs left.
    let now = explain_rejection(&a, &p, &[], "TopologyAffinityError", "");
    assert_eq!(now.agreement, Agreement::Agree);
    assert_eq!(free(&now), vec![(0, 0, 0), (1, 0, 0)]);
    // At the kubelet's moment "after" was not there yet: node 1 was free, the replay admits.
    let then = explain_rejection(
        &a,
        &p,
        &["uid-after".to_string()],
        "TopologyAffinityError",
        "",
    );
    assert_eq!(free(&then), vec![(0, 0, 0), (1, 4, 4)]);
    assert_eq!(then.agreement, Agreement::Disagree);
    // The refused pod's own CPUs (were it admitted here) are not counted as taken either.
    a.admit(&p);
    let own = explain_rejection(&a, &p, &["uid-after".to_string()], "", "");
    assert_eq!(free(&own), vec![(0, 0, 0), (1, 4, 4)]);
}

#[test]
fn the_summary_fits_an_event_and_keeps_the_verdict() {
    let long = format!("{}. nodetopo's replay agrees: X (y).", "a".repeat(3000));
    let cut = truncate(long, SUMMARY_LIMIT);
    assert!(cut.len() <= SUMMARY_LIMIT, "{}", cut.len());
    assert!(
        cut.ends_with(" .... nodetopo's replay agrees: X (y)."),
        "{cut}"
    );
    let short = "kubelet: X. nodetopo's replay agrees: X (y).".to_string();
    assert_eq!(truncate(short.clone(), SUMMARY_LIMIT), short);
    // Multi-byte text is cut on a character boundary.
    let wide = format!("{}. nodetopo's replay agrees.", "é".repeat(900));
    let cut = truncate(wide, SUMMARY_LIMIT);
    assert!(cut.len() <= SUMMARY_LIMIT);
}

#[test]
fn manager_reasons_are_the_kubelets() {
    for r in MANAGER_REASONS {
        assert!(is_manager_reason(r));
    }
    for r in ["OutOfcpu", "NodeAffinity", "Evicted", ""] {
        assert!(!is_manager_reason(r), "{r}");
    }
}
