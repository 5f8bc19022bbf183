//! The cpuset audit's cost per cycle on a node of 500 running containers: 100 exclusive
//! (Guaranteed, 2 CPUs each on a 256-CPU machine) and 400 in the shared pool (Burstable and
//! BestEffort), in a cgroup tree this benchmark writes to a temp directory (cgroup v1 with
//! the cgroupfs driver and containerd names, and cgroup v2 with the systemd driver), with the
//! kubelet's checkpoint assignments as expectations and every container healthy, so the whole
//! judgement runs (no early exit).
//!
//! - `audit_cycle/<layout>`: one agent cycle: read 500 cgroups (two files each), judge;
//! - `audit_judge`: the judgement alone, on the cpusets already read.
//!
//! The reads go through the page cache (the files were just written), as they do on a node
//! where cgroupfs is in memory.

use std::collections::BTreeMap;
use std::fs;

use criterion::{criterion_group, criterion_main, Criterion};
use nodetopo_engine::{CpuSet, QosClass};
use nodetopo_kubelet::audit::{self, AuditContainer, AuditPod, Expected, KubeletCpus};
use nodetopo_kubelet::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, ContainerId, Runtime};

const CONTAINERS: usize = 500;
const EXCLUSIVE: usize = 100;
const CPUS: usize = 256;

struct Node {
    _dir: tempfile::TempDir,
    layout: CgroupLayout,
    pods: Vec<AuditPod>,
    expected: Expected,
}

fn node(version: CgroupVersion, driver: CgroupDriver) -> Node {
    let dir = tempfile::tempdir().expect("tempdir");
    if version == CgroupVersion::V2 {
        fs::write(dir.path().join("cgroup.controllers"), "cpuset\n").expect("write");
    }
    let layout = CgroupLayout {
        root: dir.path().to_path_buf(),
        version,
        driver,
        kubelet_root: "/".into(),
    };
    let reserved = CpuSet::from_ids(0..2);
    let mut assignments: BTreeMap<String, BTreeMap<String, CpuSet>> = BTreeMap::new();
    let mut pods = Vec::new();
    for i in 0..CONTAINERS {
        let uid = format!("0000{i:04}-1111-4222-8333-444455556666");
        let qos = match i {
            i if i < EXCLUSIVE => QosClass::Guaranteed,
            i if i % 2 == 0 => QosClass::Burstable,
            _ => QosClass::BestEffort,
        };
        let id = ContainerId {
            runtime: Runtime::Containerd,
            id: format!("{i:064x}"),
        };
        if i < EXCLUSIVE {
            let lo = 2 + 2 * i;
            assignments.insert(
                uid.clone(),
                [("main".to_string(), CpuSet::from_ids(lo..lo + 2))].into(),
            );
        }
        pods.push(AuditPod {
            pod: format!("bench/p{i}"),
            uid,
            qos,
            terminal: false,
            containers: vec![AuditContainer {
                name: "main".into(),
                id: Some(id),
            }],
        });
    }
    let exclusive = assignments
        .values()
        .flat_map(|c| c.values())
        .fold(CpuSet::new(), |a, s| a.union(s));
    let shared = CpuSet::from_ids(0..CPUS).difference(&exclusive);
    for p in &pods {
        let id = p.containers[0].id.as_ref().expect("id");
        let cgroup = layout.container_dir(&p.uid, p.qos, id).expect("path");
        fs::create_dir_all(&cgroup).expect("mkdir");
        let set = assignments
            .get(&p.uid)
            .map(|c| c["main"].clone())
            .unwrap_or_else(|| shared.clone())
            .to_string();
        let effective = match version {
            CgroupVersion::V1 => "cpuset.effective_cpus",
            CgroupVersion::V2 => "cpuset.cpus.effective",
        };
        fs::write(cgroup.join("cpuset.cpus"), format!("{set}\n")).expect("write");
        fs::write(cgroup.join(effective), format!("{set}\n")).expect("write");
    }
    let expected = Expected {
        kubelet: Some(KubeletCpus {
            default_cpu_set: shared.clone(),
            assignments: assignments.clone(),
        }),
        published: assignments,
        published_shared: Some(shared),
        reserved,
    };
    Node {
        _dir: dir,
        layout,
        pods,
        expected,
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("audit_cycle");
    for (name, version, driver) in [
        ("v1_cgroupfs_500", CgroupVersion::V1, CgroupDriver::Cgroupfs),
        ("v2_systemd_500", CgroupVersion::V2, CgroupDriver::Systemd),
    ] {
        let n = node(version, driver);
        let report = audit::run(&n.layout, &n.pods, &n.expected);
        assert_eq!(report.checked_containers, CONTAINERS, "{name}");
        assert!(
            report.drift.is_empty() && report.unreadable.is_empty(),
            "{report:?}"
        );
        g.bench_function(name, |b| {
            b.iter(|| audit::run(&n.layout, &n.pods, &n.expected))
        });
    }
    g.finish();
    let n = node(CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let observed = audit::observe(&n.layout, &n.pods);
    c.bench_function("audit_judge_500", |b| {
        b.iter(|| audit::audit(&n.pods, &observed, &n.expected))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
