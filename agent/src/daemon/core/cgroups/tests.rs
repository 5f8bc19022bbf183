//! The audit in the core: what is read, what is expected, what status says.

use super::*;
use crate::daemon::core::{Event, PodInfo};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodetopo_crds::{CpuManagerConfig, CpuManagerPolicy, NodeTopologySpec, TopologyManagerConfig};
use nodetopo_engine::{Container, CpuTopology, Pod, ResourceList};
use nodetopo_kubelet::cgroup::CgroupError;

fn topo() -> CpuTopology {
    nodetopo_engine::presets::build("epyc-7303-2p").expect("preset")
}

fn spec() -> NodeTopologySpec {
    NodeTopologySpec {
        cpu_manager: CpuManagerConfig {
            policy: CpuManagerPolicy::Static,
            reserved_system_cpus: Some("0,32".into()),
            ..Default::default()
        },
        topology_manager: TopologyManagerConfig::default(),
        policy_ref: None,
    }
}

fn pod(uid: &str, cpus: u64, running: bool) -> PodInfo {
    let res = ResourceList {
        cpu_millis: Some(cpus * 1000),
        memory_bytes: Some(1 << 30),
        ..Default::default()
    };
    PodInfo {
        pod: Pod {
            namespace: "default".into(),
            name: format!("p-{uid}"),
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
        running: if running {
            [("app".to_string(), format!("containerd://{uid}0"))].into()
        } else {
            Default::default()
        },
    }
}

fn now() -> Time {
    Time("2030-01-01T00:00:00Z".parse().expect("ts"))
}

fn core_with(pods: Vec<PodInfo>) -> Core {
    let mut core = Core::new(topo(), None, None);
    core.apply(Event::Spec(Some((spec(), Some(1)))));
    core.apply(Event::PodsSynced(pods));
    core.reconcile();
    core
}

fn observed(items: &[(&str, Result<&str, CgroupError>)]) -> Box<Observed> {
    Box::new(
        items
            .iter()
            .map(|(uid, r)| {
                (
                    (uid.to_string(), "app".to_string()),
                    r.clone().map(|s| CpuSet::parse(s).expect("cpus")),
                )
            })
            .collect(),
    )
}

#[test]
fn only_running_containers_are_read() {
    let core = core_with(vec![pod("ua", 2, true), pod("ub", 2, false)]);
    let (pods, bad) = core.audit_pods();
    assert!(bad.is_empty());
    let ids: Vec<_> = pods
        .iter()
        .map(|p| {
            (
                p.uid.as_str(),
                p.containers[0].id.as_ref().map(|i| i.id.clone()),
            )
        })
        .collect();
    assert_eq!(ids, vec![("ua", Some("ua0".to_string())), ("ub", None)]);
}

#[test]
fn agreement_then_drift_in_status_and_condition() {
    let mut core = core_with(vec![pod("ua", 2, true)]);
    assert_eq!(
        core.status(&[], &now()).audit,
        None,
        "no audit without cgroups"
    );
    // Without the kubelet's view, nodetopo's allocation (1,33) is expected.
    core.apply(Event::Cgroups(observed(&[("ua", Ok("1,33"))])));
    let st = core.status(&[], &now());
    assert!(conditions::is_true(
        &st.conditions,
        conditions::CGROUP_AGREEMENT
    ));
    let audit = st.audit.expect("audit");
    assert_eq!((audit.checked_containers, audit.drift_containers), (1, 0));

    core.apply(Event::Cgroups(observed(&[("ua", Ok("1-2,33"))])));
    let st = core.status(&[], &now());
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::CGROUP_AGREEMENT)
        .expect("condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", reason::DRIFT)
    );
    assert!(
        c.message.contains("ChangedOutsideKubelet: 1"),
        "{}",
        c.message
    );
    let audit = st.audit.expect("audit");
    assert_eq!(audit.reasons["ChangedOutsideKubelet"], 1);
    assert_eq!(audit.reasons["StaleCheckpointEntry"], 0);
    assert_eq!(
        audit.drift,
        vec![DriftStatus {
            pod: "default/p-ua".into(),
            pod_uid: "ua".into(),
            container: "app".into(),
            expected: "1,33".into(),
            actual: "1-2,33".into(),
            reason: "ChangedOutsideKubelet".into(),
            message: "its cpuset is 1-2,33, nodetopo's allocation is 1,33".into(),
        }]
    );
    assert!(!audit.truncated);
}

#[test]
fn unreadable_cgroups_and_bad_ids_make_the_condition_false() {
    let mut p = pod("ua", 2, true);
    p.running.insert("app".into(), "docker://x".into());
    let mut core = core_with(vec![p, pod("ub", 2, true)]);
    core.apply(Event::Cgroups(observed(&[(
        "ub",
        Err(CgroupError::TooLarge {
            path: "/c/cpuset.cpus".into(),
        }),
    )])));
    let st = core.status(&[], &now());
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::CGROUP_AGREEMENT)
        .expect("condition");
    assert_eq!(c.reason, reason::CGROUP_UNREADABLE);
    let audit = st.audit.expect("audit");
    assert_eq!(audit.unreadable_containers, 2, "{:?}", audit.unreadable);
    assert!(audit.unreadable.iter().any(|u| u.contains("docker://x")));
}

#[test]
fn the_list_is_bounded_and_says_so() {
    let pods: Vec<PodInfo> = (0..25).map(|i| pod(&format!("u{i:02}"), 1, true)).collect();
    let mut core = core_with(pods);
    let uids: Vec<String> = (0..25).map(|i| format!("u{i:02}")).collect();
    let items: Vec<(&str, Result<&str, CgroupError>)> = uids
        .iter()
        .map(|u| (u.as_str(), Err(CgroupError::NotFound("/gone".into()))))
        .collect();
    core.apply(Event::Cgroups(observed(&items)));
    let audit = core.status(&[], &now()).audit.expect("audit");
    assert_eq!(audit.drift_containers, 25);
    assert_eq!(audit.drift.len(), MAX_LISTED);
    assert!(audit.truncated);
    assert_eq!(audit.reasons["ContainerNotFound"], 25);
}
