//! `desired`: the object follows the agent's admissions without a kubelet view, the
//! kubelet's assignments with one, and says "not pinned" when the kubelet runs policy none.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodetopo_crds::nrt::build::{
    ATTR_ALLOCATION_SOURCE, ATTR_CPU_AVAILABLE, ATTR_CPU_MANAGER_POLICY,
    ATTR_MEMORY_MANAGER_POLICY, ATTR_RESERVED_SOURCE,
};
use nodetopo_crds::nrt::fingerprint::{PodFingerprint, ATTRIBUTE};
use nodetopo_crds::{
    CpuManagerConfig, CpuManagerPolicy, KubeletAssignment, KubeletObserved, KubeletSource,
    NodeTopologySpec, TopologyManagerConfig,
};
use nodetopo_engine::{Container, CpuSet, Pod, ResourceList};

use super::*;
use crate::daemon::core::{Event, PodInfo};
use crate::daemon::inputs::podresources::KubeletView;

fn spec() -> NodeTopologySpec {
    NodeTopologySpec {
        cpu_manager: CpuManagerConfig {
            policy: CpuManagerPolicy::Static,
            reserved_system_cpus: Some("0,32".into()),
            ..Default::default()
        },
        topology_manager: TopologyManagerConfig {
            policy: serde_json::from_value(serde_json::json!("single-numa-node")).expect("tm"),
            ..Default::default()
        },
        policy_ref: None,
    }
}

fn pod(name: &str, uid: &str, cpus: u64) -> PodInfo {
    let res = ResourceList {
        cpu_millis: Some(cpus * 1000),
        memory_bytes: Some(1 << 30),
        ..Default::default()
    };
    PodInfo {
        pod: Pod {
            namespace: "default".into(),
            name: name.into(),
            uid: uid.into(),
            init_containers: vec![],
            containers: vec![Container {
                name: "app".into(),
                requests: res.clone(),
                limits: res,
                restartable: false,
            }],
        },
        created: Some(Time("2024-01-01T00:00:00Z".parse().expect("ts"))),
        terminal: false,
        phase: "Running".into(),
        kubelet_refusal: None,
        running: Default::default(),
    }
}

fn now() -> Time {
    Time("2030-01-01T00:00:00Z".parse().expect("ts"))
}

fn available(o: &NodeResourceTopology) -> usize {
    o.zones
        .iter()
        .filter(|z| z.type_ == "Node")
        .map(|z| {
            z.resource("cpu")
                .expect("cpu")
                .available
                .parse::<usize>()
                .expect("count")
        })
        .sum()
}

#[test]
fn follows_agent_then_kubelet_then_policy_none() {
    let topo = nodetopo_engine::presets::build("epyc-7303-2p").expect("preset");
    let cpus = topo.all_cpus().len();
    let mut core = Core::new(topo, None, None);
    let st = core.status(&[], &now());
    assert!(desired(&core, &st, "n1").is_err(), "no spec yet: nothing");

    core.apply(Event::Spec(Some((spec(), Some(1)))));
    core.apply(Event::PodsSynced(vec![
        pod("a", "u-a", 4),
        pod("b", "u-b", 2),
    ]));
    assert!(core.reconcile());
    let mut st = core.status(&[], &now());
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(o.metadata.name.as_deref(), Some("n1"));
    assert_eq!(available(&o), cpus - 2 - 6, "reserved 2, exclusive 4 + 2");
    assert_eq!(o.attribute(ATTR_ALLOCATION_SOURCE), Some("Agent"));
    let both: PodFingerprint = [("default", "a"), ("default", "b")].into_iter().collect();
    assert_eq!(o.attribute(ATTRIBUTE), Some(both.sign().as_str()));

    // The kubelet's checkpoint says only pod a holds CPUs (3 of them): that is published.
    st.kubelet = Some(KubeletObserved {
        source: KubeletSource::Checkpoint,
        policy_name: "static".into(),
        default_cpu_set: String::new(),
        assignments: vec![KubeletAssignment {
            pod_uid: "u-a".into(),
            pod: String::new(),
            container: "app".into(),
            cpus: "1-3".into(),
        }],
    });
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(available(&o), cpus - 2 - 3);
    assert_eq!(o.attribute(ATTR_ALLOCATION_SOURCE), Some("Checkpoint"));
    // The fingerprint is the scheduler plugin's, over the pods the API shows (both
    // Guaranteed and Running), whatever the kubelet pins.
    assert_eq!(o.attribute(ATTRIBUTE), Some(both.sign().as_str()));

    // A kubelet with CPU manager policy none pins nothing, whatever the spec says.
    st.kubelet = Some(KubeletObserved {
        source: KubeletSource::Checkpoint,
        policy_name: "none".into(),
        default_cpu_set: String::new(),
        assignments: vec![],
    });
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(available(&o), cpus - 2);
    assert_eq!(o.attribute(ATTR_CPU_MANAGER_POLICY), Some("none"));
    assert_eq!(o.attribute(ATTR_CPU_AVAILABLE), Some("not-pinned"));

    // A malformed kubelet CPU list is an error naming it, not a wrong object.
    st.kubelet = Some(KubeletObserved {
        source: KubeletSource::Checkpoint,
        policy_name: "static".into(),
        default_cpu_set: String::new(),
        assignments: vec![KubeletAssignment {
            pod_uid: "u-a".into(),
            pod: String::new(),
            container: "app".into(),
            cpus: "3-1".into(),
        }],
    });
    let e = desired(&core, &st, "n1").expect_err("refused");
    assert!(matches!(e, NrtProblem::Build(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("u-a/app") && e.contains("3-1"), "{e}");

    // The PodResources API, when readable, wins, through the core's status (the same view
    // NodeTopology shows): its CPUs and its pods (by name, known to the agent or not).
    let view = crate::daemon::inputs::podresources::KubeletView {
        allocatable_cpus: CpuSet::parse("1-31,33-63").expect("set"),
        containers: vec![
            crate::daemon::inputs::podresources::ContainerCpus {
                namespace: "default".into(),
                pod: "a".into(),
                container: "app".into(),
                cpus: CpuSet::parse("4-7").expect("set"),
            },
            crate::daemon::inputs::podresources::ContainerCpus {
                namespace: "other".into(),
                pod: "x".into(),
                container: "c".into(),
                cpus: CpuSet::parse("10-11").expect("set"),
            },
        ],
        ..Default::default()
    };
    core.apply(Event::PodResources(Ok(Some(view))));
    let st = core.status(&[], &now());
    let k = st.kubelet.as_ref().expect("kubelet view");
    assert_eq!(k.source, KubeletSource::PodResources);
    let shown: Vec<(&str, &str, &str)> = k
        .assignments
        .iter()
        .map(|a| (a.pod_uid.as_str(), a.pod.as_str(), a.cpus.as_str()))
        .collect();
    assert_eq!(
        shown,
        [("", "other/x", "10-11"), ("u-a", "default/a", "4-7")],
        "known pods by UID, unknown ones by name"
    );
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(available(&o), cpus - 2 - 6);
    assert_eq!(o.attribute(ATTR_ALLOCATION_SOURCE), Some("PodResources"));
    assert_eq!(
        o.attribute(ATTRIBUTE),
        Some(both.sign().as_str()),
        "the API's pods, not the kubelet's list"
    );
    assert_eq!(o.attribute(ATTR_RESERVED_SOURCE), Some("PodResources"));
    assert_eq!(o.attribute(ATTR_MEMORY_MANAGER_POLICY), Some("None"));

    // PodResources reporting no allocatable CPUs: the kubelet runs policy none.
    core.apply(Event::PodResources(Ok(Some(Default::default()))));
    let st = core.status(&[], &now());
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(available(&o), cpus - 2);
    assert_eq!(o.attribute(ATTR_CPU_AVAILABLE), Some("not-pinned"));
    assert_eq!(o.attribute(ATTR_ALLOCATION_SOURCE), Some("PodResources"));
    println!("nrt desired: 7 kubelet views (agent, checkpoint, none, malformed, podresources, podresources none)");

    let owned = owned_by_node(o, "n1", "uid-1");
    let r = &owned.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (r.kind.as_str(), r.name.as_str(), r.uid.as_str()),
        ("Node", "n1", "uid-1")
    );
}

fn podresources_view(allocatable: &str, pinned: &[(&str, &str, &str)]) -> KubeletView {
    KubeletView {
        allocatable_cpus: CpuSet::parse(allocatable).expect("set"),
        containers: pinned
            .iter()
            .map(
                |(pod, c, cpus)| crate::daemon::inputs::podresources::ContainerCpus {
                    namespace: "default".into(),
                    pod: (*pod).into(),
                    container: (*c).into(),
                    cpus: CpuSet::parse(cpus).expect("set"),
                },
            )
            .collect(),
        ..Default::default()
    }
}

/// The pod set is the scheduler plugin's (every non-Pending pod the API shows that it
/// counts as exclusive), whatever the kubelet view; reserved CPUs come from the kubelet's
/// allocatable CPUs where PodResources reports them, so an exclusive CPU inside the spec's
/// reserved set is no error there, and is a build error (not a silent freeze) where only
/// the checkpoint is read.
#[test]
fn plugin_pod_set_kubelet_reserved_cpus_and_build_errors() {
    let topo = nodetopo_engine::presets::build("epyc-7303-2p").expect("preset");
    let mut core = Core::new(topo, None, None);
    core.apply(Event::Spec(Some((spec(), Some(1)))));
    let mut pending = pod("c-pending", "u-c", 2);
    pending.phase = "Pending".into();
    let mut failed = pod("f-failed", "u-f", 2);
    failed.phase = "Failed".into();
    failed.terminal = true;
    let mut burstable = pod("d-burstable", "u-d", 2);
    burstable.pod.containers[0].limits = ResourceList::default();
    let mut shared = pod("e-shared", "u-e", 1);
    let half = ResourceList {
        cpu_millis: Some(1500),
        memory_bytes: Some(1 << 30),
        ..Default::default()
    };
    shared.pod.containers[0].requests = half.clone();
    shared.pod.containers[0].limits = half;
    core.apply(Event::PodsSynced(vec![
        pod("a", "u-a", 4),
        pending,
        failed,
        burstable,
        shared,
    ]));
    assert!(core.reconcile());
    let mut st = core.status(&[], &now());
    let o = desired(&core, &st, "n1").expect("object");
    let plugin: PodFingerprint = [
        ("default", "a"),
        ("default", "e-shared"),
        ("default", "f-failed"),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        o.attribute(ATTRIBUTE),
        Some(plugin.sign().as_str()),
        "Guaranteed pods in every phase but Pending, fractional CPUs included; no Burstable"
    );
    assert_eq!(o.attribute(ATTR_RESERVED_SOURCE), Some("Spec"));
    assert_eq!(o.attribute(ATTR_MEMORY_MANAGER_POLICY), Some("Unknown"));

    // The kubelet reserves 0-1,32-33 (not the spec's 0,32) and pinned 2-3,34-35.
    core.apply(Event::PodResources(Ok(Some(podresources_view(
        "2-31,34-63",
        &[("a", "app", "2-3,34-35")],
    )))));
    st = core.status(&[], &now());
    assert_eq!(
        st.kubelet.as_ref().map(|k| k.source),
        Some(KubeletSource::PodResources)
    );
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(o.attribute(ATTR_RESERVED_SOURCE), Some("PodResources"));
    let allocatable: usize = o
        .zones
        .iter()
        .filter(|z| z.type_ == "Node")
        .map(|z| {
            z.resource("cpu")
                .expect("cpu")
                .allocatable
                .parse::<usize>()
                .expect("count")
        })
        .sum();
    assert_eq!(
        allocatable, 60,
        "the kubelet's 60 allocatable CPUs, not 64 - 2"
    );
    assert_eq!(available(&o), 56);

    // Only the checkpoint: the kubelet pinned CPU 32, which nodetopo's spec reserves. The
    // object cannot be right, so it is a build error the shell turns into a condition and
    // an event.
    st.kubelet = Some(KubeletObserved {
        source: KubeletSource::Checkpoint,
        policy_name: "static".into(),
        default_cpu_set: String::new(),
        assignments: vec![KubeletAssignment {
            pod_uid: "u-a".into(),
            pod: String::new(),
            container: "app".into(),
            cpus: "32-35".into(),
        }],
    });
    let e = desired(&core, &st, "n1").expect_err("refused");
    assert_eq!(
        e,
        NrtProblem::Build("CPUs 32 are both reserved and exclusively assigned".into())
    );
    core.apply(Event::NrtBuilt(Err(e.to_string())));
    let st = core.status(&[], &now());
    let c = nodetopo_crds::conditions::find(
        &st.conditions,
        nodetopo_crds::conditions::NODE_RESOURCE_TOPOLOGY,
    )
    .expect("condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NodeResourceTopologyBuildFailed")
    );
    assert!(
        c.message.contains("CPUs 32 are both reserved"),
        "{}",
        c.message
    );
    core.apply(Event::NrtBuilt(Ok(())));
    let st = core.status(&st.conditions, &now());
    let c = nodetopo_crds::conditions::find(
        &st.conditions,
        nodetopo_crds::conditions::NODE_RESOURCE_TOPOLOGY,
    )
    .expect("condition");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Built"));
}

/// Static Memory Manager: PodResources' allocatable memory and pinned blocks make the
/// zones' memory; a block that does not fit is a build error naming it.
#[test]
fn static_memory_manager_from_podresources() {
    use nodetopo_crds::nrt::memory::MemoryBlock;
    const GI: u64 = 1 << 30;
    let base = nodetopo_engine::presets::build("epyc-7303-2p").expect("preset");
    let nodes = base
        .numa_nodes()
        .iter()
        .map(|n| nodetopo_engine::topology::NumaNode {
            memory_bytes: Some(64 * GI),
            hugepages: vec![(1 << 20, 4)],
            ..n.clone()
        })
        .collect();
    let topo = nodetopo_engine::CpuTopology::with_derived_counts(
        base.cpus().to_vec(),
        nodes,
        base.uncore_caches().to_vec(),
    )
    .expect("machine");
    let mut core = Core::new(topo, None, None);
    core.apply(Event::Spec(Some((spec(), Some(1)))));
    core.apply(Event::PodsSynced(vec![pod("a", "u-a", 4)]));
    assert!(core.reconcile());
    let block = |r: &str, size: u64, node: usize| MemoryBlock {
        owner: "allocatable".into(),
        resource: r.into(),
        size,
        numa_nodes: vec![node],
    };
    let mut view = podresources_view("1-31,33-63", &[("a", "app", "4-7")]);
    // 1 GiB of memory reserved per node; 4 GiB of 1 GiB pages each, one page reserved on 1.
    view.allocatable_memory = vec![
        block("memory", 59 * GI, 0),
        block("memory", 59 * GI, 1),
        block("hugepages-1Gi", 4 * GI, 0),
        block("hugepages-1Gi", 3 * GI, 1),
    ];
    let pinned =
        |size: u64, nodes: Vec<i64>| crate::daemon::inputs::podresources::ContainerMemory {
            namespace: "default".into(),
            pod: "a".into(),
            container: "app".into(),
            memory_type: "memory".into(),
            size,
            numa_nodes: nodes,
        };
    view.memory = vec![pinned(2 * GI, vec![0]), pinned(60 * GI, vec![1, 0])];
    core.apply(Event::PodResources(Ok(Some(view.clone()))));
    let st = core.status(&[], &now());
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(o.attribute(ATTR_MEMORY_MANAGER_POLICY), Some("Static"));
    let mem = |zone: &str, r: &str| {
        let x = o.zone(zone).and_then(|z| z.resource(r)).expect("resource");
        (
            x.capacity.clone(),
            x.allocatable.clone(),
            x.available.clone(),
        )
    };
    let s = |a: u64, b: u64, c: u64| (a.to_string(), b.to_string(), c.to_string());
    // The 60 GiB group block fills node 0 first (57 GiB left there after 2 GiB), then 3
    // GiB of node 1.
    assert_eq!(mem("node-0", "memory"), s(64 * GI, 59 * GI, 0));
    assert_eq!(mem("node-1", "memory"), s(64 * GI, 59 * GI, 56 * GI));
    assert_eq!(mem("node-1", "hugepages-1Gi"), s(4 * GI, 3 * GI, 3 * GI));

    view.memory.push(pinned(57 * GI, vec![1]));
    core.apply(Event::PodResources(Ok(Some(view))));
    let st = core.status(&[], &now());
    let e = desired(&core, &st, "n1").expect_err("does not fit");
    assert!(matches!(e, NrtProblem::Build(_)), "{e:?}");
    assert!(e.to_string().contains("default/a/app"), "{e}");
}

/// Pod-level resource managers (PodLevelResourceManagers, KEP-5526): CPUs the kubelet holds
/// for a pod as a whole, in the checkpoint's `podEntries` or PodResources' pod-level
/// `cpu_ids`, are never published as free; status shows them (container "") and
/// KubeletAgreement says plainly that nodetopo cannot compare them.
#[test]
fn pod_level_cpus_are_never_free() {
    use nodetopo_crds::conditions;
    let topo = nodetopo_engine::presets::build("epyc-7303-2p").expect("preset");
    let cpus = topo.all_cpus().len();
    let mut core = Core::new(topo, None, None);
    core.apply(Event::Spec(Some((spec(), Some(1)))));
    core.apply(Event::PodsSynced(vec![pod("a", "u-a", 4)]));
    assert!(core.reconcile());

    // A v4 checkpoint as kubelet 1.37 writes it with the gate on: pod u-p holds 8-11.
    let data = r#"{"policyName":"static","defaultCpuSet":"0,5-7,12-63","entries":{"u-a":{"app":"1-4"}},"podEntries":{"u-p":{"cpuSet":"8-11"}}}"#;
    let file = serde_json::json!({
        "policyName": "static", "defaultCpuSet": "0,5-7,12-63", "checksum": 1,
        "data": data, "dataChecksum": nodetopo_kubelet::gohash::data_checksum(data),
    })
    .to_string();
    let k = nodetopo_kubelet::cpu_checkpoint::parse(&file).expect("the kubelet's file");
    core.apply(Event::Kubelet(Ok(Some(k))));
    let st = core.status(&[], &now());
    let seen = st.kubelet.as_ref().expect("kubelet view");
    assert!(
        seen.assignments
            .iter()
            .any(|a| a.pod_uid == "u-p" && a.container.is_empty() && a.cpus == "8-11"),
        "{seen:?}"
    );
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(
        available(&o),
        cpus - 2 - 4 - 4,
        "reserved 2, container 4, pod-level 4: none of 8-11 free"
    );
    let c = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "KubeletPodLevelAllocations")
    );
    assert!(c.message.contains("u-p \"8-11\""), "{}", c.message);

    // The same from PodResources: pod-level cpu_ids (they include the containers' own).
    let view = crate::daemon::inputs::podresources::KubeletView {
        allocatable_cpus: CpuSet::parse("1-31,33-63").expect("set"),
        containers: vec![crate::daemon::inputs::podresources::ContainerCpus {
            namespace: "default".into(),
            pod: "a".into(),
            container: "app".into(),
            cpus: CpuSet::parse("1-4").expect("set"),
        }],
        pods: vec![crate::daemon::inputs::podresources::PodCpus {
            namespace: "team".into(),
            pod: "p".into(),
            cpus: CpuSet::parse("8-13").expect("set"),
        }],
        ..Default::default()
    };
    core.apply(Event::PodResources(Ok(Some(view))));
    let st = core.status(&[], &now());
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(o.attribute(ATTR_ALLOCATION_SOURCE), Some("PodResources"));
    assert_eq!(available(&o), cpus - 2 - 4 - 6);
    let k = st.kubelet.as_ref().expect("kubelet view");
    assert!(!k.default_cpu_set.contains("8-13"), "{}", k.default_cpu_set);
    let c = conditions::find(&st.conditions, conditions::KUBELET_AGREEMENT).expect("cond");
    assert_eq!(c.reason, "KubeletPodLevelAllocations");
    assert!(c.message.contains("team/p \"8-13\""), "{}", c.message);
}

/// Without PodResources, the Memory Manager comes from its own checkpoint (read by the one
/// reader, v3 as kubelet 1.37 writes it): Static with the kubelet's tables; a file the
/// kubelet would refuse leaves it Unknown.
#[test]
fn memory_from_the_kubelets_checkpoint_without_podresources() {
    let topo = nodetopo_engine::presets::build("epyc-7303-2p").expect("preset");
    let mut core = Core::new(topo, None, None);
    core.apply(Event::Spec(Some((spec(), Some(1)))));
    core.apply(Event::PodsSynced(vec![pod("a", "u-a", 4)]));
    assert!(core.reconcile());
    let st = core.status(&[], &now());
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(o.attribute(ATTR_MEMORY_MANAGER_POLICY), Some("Unknown"));

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kubelet/tests/data/memory_manager_state.v3");
    let text = std::fs::read_to_string(&path).expect("fixture");
    let c = nodetopo_kubelet::memory_checkpoint::parse(&text).expect("the kubelet's file");
    core.apply(Event::KubeletMemory(Ok(Some(c))));
    let st = core.status(&[], &now());
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(o.attribute(ATTR_MEMORY_MANAGER_POLICY), Some("Static"));

    let bad = text.replacen("\"dataChecksum\":", "\"dataChecksum\":1", 1);
    let c = nodetopo_kubelet::memory_checkpoint::parse(&bad).expect("read, checksum wrong");
    core.apply(Event::KubeletMemory(Ok(Some(c))));
    let st = core.status(&[], &now());
    let o = desired(&core, &st, "n1").expect("object");
    assert_eq!(o.attribute(ATTR_MEMORY_MANAGER_POLICY), Some("Unknown"));
}

/// An actuation verdict for `generation` with `reason` (True unless Failed).
fn verdict(generation: i64, why: &str) -> Event {
    use nodetopo_crds::conditions::{self, ConditionSpec};
    Event::Actuation(Box::new(crate::daemon::core::Outcome {
        generation,
        condition: ConditionSpec::new(conditions::APPLIED, why != "Failed", why, "test"),
        change: None,
    }))
}

fn spec_with_tm(policy: &str, scope: &str) -> NodeTopologySpec {
    let mut s = spec();
    s.topology_manager = serde_json::from_value(serde_json::json!({
        "policy": policy,
        "scope": scope,
    }))
    .expect("tm");
    s
}

fn tm_view(
    policy: nodetopo_engine::topologymanager::TmPolicy,
    scope: nodetopo_engine::topologymanager::TmScope,
) -> nodetopo_crds::nrt::TopologyManagerView {
    nodetopo_crds::nrt::TopologyManagerView {
        policy,
        scope,
        max_numa_nodes: 8,
    }
}

/// The published policy/scope and their source, and the status' report and condition.
fn published(core: &Core) -> (String, String, String, NodeTopologyStatus) {
    use nodetopo_crds::nrt::build::{ATTR_TM_POLICY, ATTR_TM_SCOPE};
    use nodetopo_crds::nrt::tmsource::ATTR_TM_SOURCE;
    let st = core.status(&[], &now());
    let o = desired(core, &st, "n1").expect("object");
    let attr = |n: &str| o.attribute(n).expect("attribute").to_string();
    (
        attr(ATTR_TM_POLICY),
        attr(ATTR_TM_SCOPE),
        attr(ATTR_TM_SOURCE),
        st,
    )
}

fn tm_condition(st: &NodeTopologyStatus) -> (String, String, String) {
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == nodetopo_crds::conditions::TOPOLOGY_MANAGER_AGREEMENT)
        .expect("TopologyManagerAgreement");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[test]
fn topology_manager_from_the_kubelet_files_then_a_verified_apply_then_the_spec() {
    use nodetopo_engine::topologymanager::{TmPolicy, TmScope};
    let topo = nodetopo_engine::presets::build("epyc-7303-2p").expect("preset");
    let mut core = Core::new(topo, None, None);
    core.apply(Event::Spec(Some((
        spec_with_tm("single-numa-node", "container"),
        Some(1),
    ))));
    core.apply(Event::PodsSynced(vec![]));
    assert!(core.reconcile() || core.ready());
    // Without --nrt nothing of it is in status.
    let st = core.status(&[], &now());
    assert_eq!(st.node_resource_topology, None);
    core.apply(Event::NrtBuilt(Ok(())));

    // Only the spec: published, marked unverified.
    let (policy, scope, source, st) = published(&core);
    assert_eq!(
        (policy.as_str(), scope.as_str(), source.as_str()),
        ("single-numa-node", "container", "SpecUnverified")
    );
    let report = st.node_resource_topology.clone().expect("report");
    assert_eq!(report.topology_manager_source, "SpecUnverified");
    assert_eq!(report.topology_manager_policy, "single-numa-node");
    let (status, why, _) = tm_condition(&st);
    assert_eq!((status.as_str(), why.as_str()), ("False", "Unverified"));

    // The kubelet's files say restricted/pod: that is what the kubelet runs, and the
    // spec disagrees.
    core.apply(Event::KubeletConfig(Ok(nodetopo_crds::nrt::KubeletTm {
        view: tm_view(TmPolicy::Restricted, TmScope::Pod),
        command_line: nodetopo_crds::nrt::CommandLine::Read(vec![]),
    })));
    let (policy, scope, source, st) = published(&core);
    assert_eq!(
        (policy.as_str(), scope.as_str(), source.as_str()),
        ("restricted", "pod", "KubeletConfig")
    );
    let (status, why, msg) = tm_condition(&st);
    assert_eq!((status.as_str(), why.as_str()), ("False", "Disagree"));
    assert!(
        msg.contains("the NodeTopology spec says policy single-numa-node"),
        "{msg}"
    );

    // Files unreadable; actuation applied and verified generation 1: its configuration.
    core.apply(Event::KubeletConfig(Err(
        "config.yaml: permission denied".into()
    )));
    core.apply(verdict(1, "RestartOnly"));
    let (policy, _, source, st) = published(&core);
    assert_eq!(
        (policy.as_str(), source.as_str()),
        ("single-numa-node", "Applied")
    );
    assert_eq!(tm_condition(&st).1, "Agree");

    // A rollout to generation 2 (best-effort) not applied yet, then its apply fails and is
    // rolled back: the kubelet still runs generation 1's configuration.
    core.apply(Event::Spec(Some((
        spec_with_tm("best-effort", "container"),
        Some(2),
    ))));
    core.apply(verdict(2, "Failed"));
    let (policy, _, source, st) = published(&core);
    assert_eq!(
        (policy.as_str(), source.as_str()),
        ("single-numa-node", "Applied")
    );
    let (status, why, msg) = tm_condition(&st);
    assert_eq!((status.as_str(), why.as_str()), ("False", "Disagree"));
    assert!(
        msg.contains("the NodeTopology spec says policy best-effort"),
        "{msg}"
    );
    // NoChange restarted nothing: it verifies nothing.
    core.apply(verdict(2, "NoChange"));
    assert_eq!(published(&core).0, "single-numa-node");
    // A verified apply of generation 2 moves it.
    core.apply(verdict(2, "StateRewritten"));
    let (policy, _, source, st) = published(&core);
    assert_eq!(
        (policy.as_str(), source.as_str()),
        ("best-effort", "Applied")
    );
    assert_eq!(tm_condition(&st).0, "True");
}

#[test]
fn a_topology_manager_flag_of_the_running_kubelet_wins_over_its_files() {
    use crate::daemon::inputs::kubelet_config::{self, tests::fake_process, KubeletConfigPaths};
    let dir = tempfile::tempdir().expect("tempdir");
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!("{head}topologyManagerPolicy: restricted\ntopologyManagerScope: pod\n"),
    )
    .expect("config");
    let conf_d = dir.path().join("conf.d");
    std::fs::create_dir(&conf_d).expect("conf.d");
    let proc_root = dir.path().join("proc");
    std::fs::create_dir(&proc_root).expect("proc");
    let paths = KubeletConfigPaths {
        config: config.clone(),
        config_dir: Some(conf_d.clone()),
        process: Some(nodetopo_kubelet::cmdline::ProcessCheck {
            proc_root: proc_root.clone(),
            host_config: config.clone(),
            host_config_dir: conf_d.clone(),
        }),
    };
    let topo = nodetopo_engine::presets::build("epyc-7303-2p").expect("preset");
    let mut core = Core::new(topo, None, None);
    core.apply(Event::Spec(Some((
        spec_with_tm("single-numa-node", "container"),
        Some(1),
    ))));
    core.apply(Event::PodsSynced(vec![]));
    assert!(core.reconcile() || core.ready());
    core.apply(Event::NrtBuilt(Ok(())));

    // No kubelet process visible: the files, and the condition says the command line was
    // not read.
    core.apply(Event::KubeletConfig(kubelet_config::read(&paths)));
    let (policy, scope, source, st) = published(&core);
    assert_eq!(
        (policy.as_str(), scope.as_str(), source.as_str()),
        ("restricted", "pod", "KubeletConfig")
    );
    let (status, why, msg) = tm_condition(&st);
    assert_eq!((status.as_str(), why.as_str()), ("False", "Disagree"));
    assert!(
        msg.contains("the kubelet's command line was not read (no kubelet process under"),
        "{msg}"
    );

    // The kubelet runs with --topology-manager-policy=single-numa-node and
    // --topology-manager-scope=container: the flags win over its files, and the spec agrees.
    let argv = [
        "/usr/local/bin/kubelet".to_string(),
        format!("--config={}", config.display()),
        format!("--config-dir={}", conf_d.display()),
        "--topology-manager-policy=single-numa-node".to_string(),
        "--topology-manager-scope=container".to_string(),
    ];
    fake_process(
        &proc_root,
        812,
        0,
        &argv.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    core.apply(Event::KubeletConfig(kubelet_config::read(&paths)));
    let (policy, scope, source, st) = published(&core);
    assert_eq!(
        (policy.as_str(), scope.as_str(), source.as_str()),
        ("single-numa-node", "container", "KubeletCommandLine")
    );
    let report = st.node_resource_topology.clone().expect("report");
    assert_eq!(report.topology_manager_source, "KubeletCommandLine");
    assert_eq!(report.topology_manager_policy, "single-numa-node");
    let (status, why, msg) = tm_condition(&st);
    assert_eq!((status.as_str(), why.as_str()), ("True", "Agree"), "{msg}");
    assert!(
        msg.contains(
            "--topology-manager-policy=single-numa-node --topology-manager-scope=container"
        ),
        "{msg}"
    );

    // The kubelet restarted with another drop-in directory: the files the agent reads are
    // not its configuration; the spec is published, unverified, saying why.
    let argv = [
        "/usr/local/bin/kubelet".to_string(),
        format!("--config={}", config.display()),
        "--config-dir=/etc/elsewhere.d".to_string(),
    ];
    fake_process(
        &proc_root,
        812,
        0,
        &argv.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    core.apply(Event::KubeletConfig(kubelet_config::read(&paths)));
    let (_, _, source, st) = published(&core);
    assert_eq!(source, "SpecUnverified");
    let (status, why, msg) = tm_condition(&st);
    assert_eq!((status.as_str(), why.as_str()), ("False", "Unverified"));
    assert!(msg.contains("/etc/elsewhere.d"), "{msg}");
}
