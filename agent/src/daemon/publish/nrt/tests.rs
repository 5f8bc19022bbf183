//! `desired`: the object follows the agent's admissions without a kubelet view, the
//! kubelet's assignments with one, and says "not pinned" when the kubelet runs policy none.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodetopo_crds::nrt::build::{
    ATTR_ALLOCATION_SOURCE, ATTR_CPU_AVAILABLE, ATTR_CPU_MANAGER_POLICY,
};
use nodetopo_crds::nrt::fingerprint::{PodFingerprint, ATTRIBUTE};
use nodetopo_crds::{
    CpuManagerConfig, CpuManagerPolicy, KubeletAssignment, KubeletObserved, KubeletSource,
    NodeTopologySpec, TopologyManagerConfig,
};
use nodetopo_engine::{Container, CpuSet, Pod, ResourceList};

use super::*;
use crate::daemon::core::{Event, PodInfo};

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
            creation_timestamp: Some("2024-01-01T00:00:00Z".into()),
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
    let only_a: PodFingerprint = [("default", "a")].into_iter().collect();
    assert_eq!(o.attribute(ATTRIBUTE), Some(only_a.sign().as_str()));

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
    let x: PodFingerprint = [("default", "a"), ("other", "x")].into_iter().collect();
    assert_eq!(o.attribute(ATTRIBUTE), Some(x.sign().as_str()));

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
