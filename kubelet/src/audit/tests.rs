//! Each mismatch class on cgroup trees these tests make (v1 and v2, both drivers, both
//! runtimes), through the real reader.

use std::fs;
use std::path::Path;

use super::*;
use crate::cgroup::{CgroupDriver, CgroupVersion, Runtime};

fn cs(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

/// A node of 8 CPUs, 0 reserved: `ex-1` (Guaranteed, exclusive 2-3), `ex-2` (Guaranteed,
/// exclusive 4-5), `web` (Burstable, shared pool 0-1,6-7), each with one running
/// container `c`.
struct Node {
    dir: tempfile::TempDir,
    layout: CgroupLayout,
    pods: Vec<AuditPod>,
    expected: Expected,
}

fn pod(uid: &str, qos: QosClass, runtime: Runtime) -> AuditPod {
    AuditPod {
        pod: format!("default/{uid}"),
        uid: uid.into(),
        qos,
        terminal: false,
        containers: vec![AuditContainer {
            name: "c".into(),
            id: Some(ContainerId {
                runtime,
                id: format!("{}{}", uid.replace('-', ""), "0000aaaa"),
            }),
        }],
    }
}

impl Node {
    fn new(version: CgroupVersion, driver: CgroupDriver, runtime: Runtime) -> Self {
        let dir = tempfile::tempdir().unwrap();
        if version == CgroupVersion::V2 {
            fs::write(dir.path().join("cgroup.controllers"), "cpuset\n").unwrap();
        }
        let layout = CgroupLayout {
            root: dir.path().to_path_buf(),
            version,
            driver,
            kubelet_root: "/".into(),
        };
        let pods = vec![
            pod("ex-1", QosClass::Guaranteed, runtime),
            pod("ex-2", QosClass::Guaranteed, runtime),
            pod("web", QosClass::Burstable, runtime),
        ];
        let assignments = [("ex-1", "2-3"), ("ex-2", "4-5")]
            .into_iter()
            .map(|(u, s)| (u.to_string(), [("c".to_string(), cs(s))].into()))
            .collect::<BTreeMap<_, _>>();
        let expected = Expected {
            kubelet: Some(KubeletCpus {
                default_cpu_set: cs("0-1,6-7"),
                assignments: assignments.clone(),
            }),
            published: assignments,
            published_shared: Some(cs("0-1,6-7")),
            reserved: cs("0"),
        };
        let node = Self {
            dir,
            layout,
            pods,
            expected,
        };
        node.set("ex-1", "2-3");
        node.set("ex-2", "4-5");
        node.set("web", "0-1,6-7");
        node
    }

    /// Writes a container's cpuset as the runtime would (directory named by the layout).
    fn set(&self, uid: &str, cpus: &str) {
        let p = self.pods.iter().find(|p| p.uid == uid).unwrap();
        let id = p.containers[0].id.as_ref().unwrap();
        let dir = self.layout.container_dir(uid, p.qos, id).unwrap();
        assert!(dir.starts_with(self.dir.path()));
        fs::create_dir_all(&dir).unwrap();
        let effective = match self.layout.version {
            CgroupVersion::V1 => "cpuset.effective_cpus",
            CgroupVersion::V2 => "cpuset.cpus.effective",
        };
        fs::write(dir.join("cpuset.cpus"), format!("{cpus}\n")).unwrap();
        fs::write(dir.join(effective), format!("{cpus}\n")).unwrap();
    }

    fn remove(&self, uid: &str) {
        let p = self.pods.iter().find(|p| p.uid == uid).unwrap();
        let dir = self
            .layout
            .container_dir(uid, p.qos, p.containers[0].id.as_ref().unwrap())
            .unwrap();
        fs::remove_dir_all(dir).unwrap();
    }

    fn run(&self) -> AuditReport {
        run(&self.layout, &self.pods, &self.expected)
    }
}

fn reasons(r: &AuditReport) -> Vec<(String, String, DriftReason)> {
    r.drift
        .iter()
        .map(|d| (d.pod_uid.clone(), d.container.clone(), d.reason))
        .collect()
}

const LAYOUTS: [(CgroupVersion, CgroupDriver, Runtime); 4] = [
    (
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
        Runtime::Containerd,
    ),
    (
        CgroupVersion::V2,
        CgroupDriver::Systemd,
        Runtime::Containerd,
    ),
    (CgroupVersion::V1, CgroupDriver::Systemd, Runtime::CriO),
    (CgroupVersion::V2, CgroupDriver::Cgroupfs, Runtime::CriO),
];

#[test]
fn a_healthy_node_has_no_drift_on_every_layout() {
    for (v, d, r) in LAYOUTS {
        let node = Node::new(v, d, r);
        let report = node.run();
        assert_eq!(report.drift, vec![], "{v:?} {d:?} {r:?}");
        assert_eq!(report.checked_containers, 3);
        assert!(report.unreadable.is_empty());
    }
}

#[test]
fn cpuset_changed_outside_the_kubelet() {
    for (v, d, r) in LAYOUTS {
        let node = Node::new(v, d, r);
        node.set("ex-1", "2,6");
        node.set("web", "0-1");
        let report = node.run();
        // ex-1 on 6 is also fine for ex-2; web shrank: both are plain changes.
        assert_eq!(
            reasons(&report),
            vec![
                (
                    "ex-1".into(),
                    "c".into(),
                    DriftReason::ChangedOutsideKubelet
                ),
                ("web".into(), "c".into(), DriftReason::ChangedOutsideKubelet),
            ],
            "{v:?} {d:?} {r:?}"
        );
        assert_eq!(report.drift[0].expected.as_deref(), Some("2-3"));
        assert_eq!(report.drift[0].actual.as_deref(), Some("2,6"));
        assert!(
            report.drift[1].message.contains("default set"),
            "{}",
            report.drift[1].message
        );
    }
}

#[test]
fn cpu_in_two_exclusive_sets() {
    let node = Node::new(
        CgroupVersion::V2,
        CgroupDriver::Systemd,
        Runtime::Containerd,
    );
    node.set("ex-2", "3-5");
    let report = node.run();
    assert_eq!(
        reasons(&report),
        vec![
            (
                "ex-1".into(),
                "c".into(),
                DriftReason::CpuInTwoExclusiveSets
            ),
            (
                "ex-2".into(),
                "c".into(),
                DriftReason::CpuInTwoExclusiveSets
            ),
            (
                "ex-2".into(),
                "c".into(),
                DriftReason::ChangedOutsideKubelet
            ),
        ]
    );
    assert!(
        report.drift[0].message.contains("default/ex-2/c (CPUs 3)"),
        "{}",
        report.drift[0].message
    );
}

#[test]
fn shared_pool_container_on_an_exclusive_cpu() {
    // The kubelet's default set itself still holds CPU 2 (e.g. a checkpoint after a
    // restart that leaked it): the shared container follows the kubelet, yet sits on ex-1's
    // CPU.
    let mut node = Node::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, Runtime::CriO);
    node.expected.kubelet.as_mut().unwrap().default_cpu_set = cs("0-2,6-7");
    node.set("web", "0-2,6-7");
    let report = node.run();
    assert_eq!(
        reasons(&report),
        vec![("web".into(), "c".into(), DriftReason::SharedOnExclusiveCpu)]
    );
    assert!(
        report.drift[0].message.contains("2 (default/ex-1/c)"),
        "{}",
        report.drift[0].message
    );
}

#[test]
fn reserved_cpu_used_by_an_exclusive_container() {
    // The kubelet assigned reserved CPU 0 (its reserved set changed under an old checkpoint).
    let mut node = Node::new(
        CgroupVersion::V2,
        CgroupDriver::Cgroupfs,
        Runtime::Containerd,
    );
    let k = node.expected.kubelet.as_mut().unwrap();
    k.assignments
        .get_mut("ex-1")
        .unwrap()
        .insert("c".into(), cs("0,3"));
    k.default_cpu_set = cs("1-2,6-7");
    node.set("ex-1", "0,3");
    node.set("web", "1-2,6-7");
    let report = node.run();
    assert_eq!(
        reasons(&report),
        vec![("ex-1".into(), "c".into(), DriftReason::ReservedCpuUsedByPod)]
    );
    // A shared container on the reserved CPU is normal (the shared pool includes it).
    assert!(report.drift[0].message.contains("reserved CPUs 0"));
}

#[test]
fn stale_checkpoint_entries() {
    let mut node = Node::new(
        CgroupVersion::V1,
        CgroupDriver::Systemd,
        Runtime::Containerd,
    );
    let k = node.expected.kubelet.as_mut().unwrap();
    k.assignments
        .insert("gone".into(), [("c".to_string(), cs("6"))].into());
    k.assignments
        .get_mut("ex-1")
        .unwrap()
        .insert("renamed".into(), cs("7"));
    let report = node.run();
    let stale: Vec<_> = report
        .drift
        .iter()
        .filter(|d| d.reason == DriftReason::StaleCheckpointEntry)
        .map(|d| (d.pod.clone(), d.container.clone(), d.expected.clone()))
        .collect();
    assert_eq!(
        stale,
        vec![
            ("default/ex-1".into(), "renamed".into(), Some("7".into())),
            ("gone".into(), "c".into(), Some("6".into())),
        ]
    );
    // A finished pod's entry is stale too.
    node.pods[1].terminal = true;
    let report = node.run();
    assert!(report
        .drift
        .iter()
        .any(|d| d.pod_uid == "ex-2" && d.reason == DriftReason::StaleCheckpointEntry));
}

#[test]
fn container_not_found() {
    let node = Node::new(CgroupVersion::V2, CgroupDriver::Systemd, Runtime::CriO);
    node.remove("ex-2");
    let report = node.run();
    assert_eq!(
        reasons(&report),
        vec![("ex-2".into(), "c".into(), DriftReason::ContainerNotFound)]
    );
    assert!(
        report.drift[0].message.contains(".scope"),
        "{}",
        report.drift[0].message
    );
    assert_eq!(report.drift_containers(), 1);
    assert_eq!(
        report.containers_by_reason()[&DriftReason::ContainerNotFound],
        1
    );
    assert_eq!(
        report.containers_by_reason()[&DriftReason::ChangedOutsideKubelet],
        0
    );
}

#[test]
fn a_malformed_cgroup_file_is_unreadable_not_drift() {
    let node = Node::new(
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
        Runtime::Containerd,
    );
    node.set("web", "0-1,x");
    let report = node.run();
    assert!(report.drift.is_empty());
    assert_eq!(report.unreadable.len(), 1);
    assert!(
        report.unreadable[0].message.contains("cpuset"),
        "{:?}",
        report.unreadable
    );
    assert_eq!(report.checked_containers, 2);
}

#[test]
fn without_the_kubelet_view_the_published_allocation_is_expected() {
    let mut node = Node::new(
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
        Runtime::Containerd,
    );
    node.expected.kubelet = None;
    assert_eq!(node.run().drift, vec![]);
    node.set("ex-2", "4");
    let report = node.run();
    assert_eq!(
        reasons(&report),
        vec![(
            "ex-2".into(),
            "c".into(),
            DriftReason::ChangedOutsideKubelet
        )]
    );
    assert!(report.drift[0].message.contains("nodetopo's allocation"));
}

#[test]
fn under_the_kubelets_none_policy_shared_containers_are_not_judged() {
    let mut node = Node::new(
        CgroupVersion::V2,
        CgroupDriver::Cgroupfs,
        Runtime::Containerd,
    );
    node.expected.kubelet = Some(KubeletCpus::default());
    node.set("ex-1", "0-7");
    node.set("ex-2", "0-7");
    node.set("web", "0-7");
    assert_eq!(node.run().drift, vec![]);
}

#[test]
fn containers_not_running_are_skipped() {
    let mut node = Node::new(
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
        Runtime::Containerd,
    );
    node.remove("web");
    node.pods[2].containers[0].id = None;
    let report = node.run();
    assert_eq!(report.drift, vec![]);
    assert_eq!(
        (report.checked_containers, report.skipped_containers),
        (2, 1)
    );
    assert!(Path::new(&node.layout.root).is_dir());
}
