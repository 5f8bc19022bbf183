//! Builder corner cases on small synthetic machines (the real machines are in
//! tests/nrt_golden.rs and tests/nrt_consistency.rs).

use std::collections::{BTreeMap, BTreeSet};

use nodetopo_engine::memorymanager::{MemoryResource, MemoryTable};
use nodetopo_engine::topology::{CpuInfo, NumaNode, UncoreCache};
use nodetopo_engine::topologymanager::{TmPolicy, TmScope};
use nodetopo_engine::{CpuSet, CpuTopology};

use super::build::*;
use super::podset::NodePod;
use super::tmsource::{TopologyManagerSource, TopologyManagerView};

const GI: u64 = 1 << 30;

/// 2 NUMA nodes x 2 cores x 2 threads (CPUs n*4..n*4+3; siblings c, c+1), one L3 per node;
/// every node has 4 GiB; node 0 also has one 1 GiB page and two 2 MiB pages.
fn machine() -> CpuTopology {
    let cpus = (0..8)
        .map(|id| CpuInfo {
            id,
            core: id - id % 2,
            socket: 0,
            numa: id / 4,
            uncore: id / 4,
        })
        .collect();
    let nodes = (0..2)
        .map(|n| NumaNode {
            id: n,
            cpus: CpuSet::from_ids(n * 4..n * 4 + 4),
            distances: Some(if n == 0 { vec![10, 20] } else { vec![20, 10] }),
            memory_bytes: Some(4 * GI),
            hugepages: if n == 0 {
                vec![(2048, 2), (1 << 20, 1)]
            } else {
                vec![]
            },
        })
        .collect();
    let caches = (0..2)
        .map(|n| UncoreCache {
            id: n,
            level: 3,
            cpus: CpuSet::from_ids(n * 4..n * 4 + 4),
            size_bytes: None,
        })
        .collect();
    CpuTopology::with_derived_counts(cpus, nodes, caches).expect("valid machine")
}

fn input<'a>(t: &'a CpuTopology, cpu: CpuAccounting, pods: &'a [NodePod<'a>]) -> NrtInput<'a> {
    NrtInput {
        node_name: "n1",
        node_uid: None,
        topology: t,
        cpu,
        reserved_source: ReservedSource::Spec,
        topology_manager: TopologyManagerView {
            policy: TmPolicy::SingleNumaNode,
            scope: TmScope::Pod,
            max_numa_nodes: 8,
        },
        topology_manager_source: TopologyManagerSource::SpecUnverified,
        memory: MemoryManagerView::None,
        pods,
        source: AllocationSource::PodResources,
        devices: &NO_DEVICES,
    }
}

static NO_DEVICES: DeviceInventory = DeviceInventory {
    allocatable: BTreeMap::new(),
    assigned: BTreeMap::new(),
};

fn cpu_of(o: &super::NodeResourceTopology, zone: &str) -> (String, String, String) {
    let r = o.zone(zone).expect("zone").resource("cpu").expect("cpu");
    (
        r.capacity.clone(),
        r.allocatable.clone(),
        r.available.clone(),
    )
}

fn s(a: &str, b: &str, c: &str) -> (String, String, String) {
    (a.into(), b.into(), c.into())
}

#[test]
fn policy_none_says_so_and_predicts_nothing() {
    let t = machine();
    let o = build(&input(
        &t,
        CpuAccounting::PolicyNone {
            reserved: CpuSet::from_ids([0]),
        },
        &[],
    ))
    .expect("builds");
    assert_eq!(cpu_of(&o, "node-0"), s("4", "3", "3"));
    assert_eq!(cpu_of(&o, "node-1"), s("4", "4", "4"));
    assert_eq!(o.attribute(ATTR_CPU_MANAGER_POLICY), Some("none"));
    assert_eq!(o.attribute(ATTR_CPU_AVAILABLE), Some("not-pinned"));
    assert_eq!(o.attribute(ATTR_CPU_MANAGER_OPTIONS), None);
    assert_eq!(o.attribute(ATTR_ALLOCATION_SOURCE), Some("PodResources"));
    // No deprecated topologyPolicies (the plugin logs a notice for each object carrying it).
    assert!(o.topology_policies.is_empty());
    let json = serde_json::to_value(&o).expect("serialises");
    assert!(
        json.get("topologyPolicies").is_none(),
        "left out of the JSON"
    );
    assert!(
        o.metadata.owner_references.is_none(),
        "no owner without a Node UID"
    );
    // One L3 per NUMA node: no cache zones.
    assert_eq!(o.zones.len(), 2);
}

#[test]
fn full_pcpus_only_counts_whole_free_cores() {
    let t = machine();
    let static_cpu = |full: bool| CpuAccounting::Static {
        reserved: CpuSet::from_ids([0]),
        exclusive: CpuSet::from_ids([4, 6, 7]),
        options: if full {
            BTreeSet::from(["full-pcpus-only".to_string()])
        } else {
            BTreeSet::new()
        },
    };
    let o = build(&input(&t, static_cpu(false), &[])).expect("builds");
    assert_eq!(cpu_of(&o, "node-0"), s("4", "3", "3"));
    assert_eq!(cpu_of(&o, "node-1"), s("4", "4", "1"));
    assert_eq!(o.attribute(ATTR_CPU_AVAILABLE), Some("cpus"));
    let o = build(&input(&t, static_cpu(true), &[])).expect("builds");
    // Node 0: core {0,1} has reserved 0, so only core {2,3} is whole; node 1: CPU 5's
    // sibling 4 is taken, core {6,7} is taken.
    assert_eq!(cpu_of(&o, "node-0"), s("4", "3", "2"));
    assert_eq!(cpu_of(&o, "node-1"), s("4", "4", "0"));
    assert_eq!(o.attribute(ATTR_CPU_AVAILABLE), Some("whole-cores"));
    assert_eq!(
        o.attribute(ATTR_CPU_MANAGER_OPTIONS),
        Some("full-pcpus-only")
    );
}

#[test]
fn memory_and_hugepages_from_sysfs_or_memory_manager() {
    let t = machine();
    let none = CpuAccounting::PolicyNone {
        reserved: CpuSet::new(),
    };
    let o = build(&input(&t, none.clone(), &[])).expect("builds");
    let z = o.zone("node-0").expect("zone");
    let names: Vec<&str> = z.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["cpu", "memory", "hugepages-2Mi", "hugepages-1Gi"]);
    let huge = 2 * 2 * 1024 * 1024 + GI;
    let mem = z.resource("memory").expect("memory");
    assert_eq!(mem.capacity, (4 * GI).to_string());
    assert_eq!(mem.allocatable, (4 * GI - huge).to_string());
    assert_eq!(mem.available, mem.allocatable);
    assert_eq!(
        z.resource("hugepages-1Gi").expect("1Gi").capacity,
        GI.to_string()
    );
    assert_eq!(o.attribute(ATTR_MEMORY_MANAGER_POLICY), Some("None"));

    let mut tables = BTreeMap::new();
    tables.insert(
        1usize,
        BTreeMap::from([(
            MemoryResource::Memory,
            MemoryTable {
                total: 4 * GI,
                system_reserved: GI,
                allocatable: 3 * GI,
                free: GI,
                reserved: 2 * GI,
            },
        )]),
    );
    let mut i = input(&t, none.clone(), &[]);
    i.memory = MemoryManagerView::Static(&tables);
    let o = build(&i).expect("builds");
    let mem = o
        .zone("node-1")
        .and_then(|z| z.resource("memory"))
        .expect("memory");
    assert_eq!(
        (
            mem.capacity.as_str(),
            mem.allocatable.as_str(),
            mem.available.as_str()
        ),
        ("4294967296", "3221225472", "1073741824")
    );
    assert_eq!(o.attribute(ATTR_MEMORY_MANAGER_POLICY), Some("Static"));

    let mut bad = BTreeMap::new();
    bad.insert(9usize, BTreeMap::new());
    let mut i = input(&t, none, &[]);
    i.memory = MemoryManagerView::Static(&bad);
    assert_eq!(build(&i), Err(NrtError::UnknownMemoryNode(9)));
}

#[test]
fn contradictory_inputs_are_refused_naming_the_cpus() {
    let t = machine();
    let bad = |reserved: &[usize], exclusive: &[usize]| {
        build(&input(
            &t,
            CpuAccounting::Static {
                reserved: CpuSet::from_ids(reserved.iter().copied()),
                exclusive: CpuSet::from_ids(exclusive.iter().copied()),
                options: BTreeSet::new(),
            },
            &[],
        ))
        .expect_err("refused")
        .to_string()
    };
    assert_eq!(
        bad(&[0, 9], &[]),
        "reserved CPUs 9 are not online CPUs of this machine"
    );
    assert_eq!(
        bad(&[0], &[2, 12, 13]),
        "exclusively assigned CPUs 12-13 are not online CPUs of this machine"
    );
    assert_eq!(
        bad(&[0, 1], &[1, 2]),
        "CPUs 1 are both reserved and exclusively assigned"
    );
}

#[test]
fn devices_per_numa_zone_and_unknown_nodes_refused() {
    let t = machine();
    let nodes = |ids: &[usize]| ids.iter().copied().collect::<BTreeSet<usize>>();
    let mut devices = DeviceInventory::default();
    let nics = devices
        .allocatable
        .entry("example.com/nic".into())
        .or_default();
    nics.insert("vf0".into(), nodes(&[0]));
    nics.insert("vf1".into(), nodes(&[0]));
    nics.insert("vf2".into(), nodes(&[1]));
    // A device on both nodes counts on each; one without topology on none.
    nics.insert("vf3".into(), nodes(&[0, 1]));
    nics.insert("vf4".into(), nodes(&[]));
    devices
        .allocatable
        .entry("example.com/gpu".into())
        .or_default()
        .insert("gpu0".into(), nodes(&[1]));
    devices
        .assigned
        .entry("example.com/nic".into())
        .or_default()
        .extend(["vf1".to_string(), "vf3".to_string(), "gone".to_string()]);
    let mut i = input(
        &t,
        CpuAccounting::PolicyNone {
            reserved: CpuSet::new(),
        },
        &[],
    );
    i.devices = &devices;
    let o = build(&i).expect("builds");
    let dev = |zone: &str, r: &str| {
        o.zone(zone).and_then(|z| z.resource(r)).map(|x| {
            (
                x.capacity.clone(),
                x.allocatable.clone(),
                x.available.clone(),
            )
        })
    };
    let s = |a: &str, b: &str, c: &str| Some((a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(dev("node-0", "example.com/nic"), s("3", "3", "1"));
    assert_eq!(dev("node-1", "example.com/nic"), s("2", "2", "1"));
    assert_eq!(dev("node-0", "example.com/gpu"), None, "no device there");
    assert_eq!(dev("node-1", "example.com/gpu"), s("1", "1", "1"));
    // After cpu and memory, by resource name.
    let names: Vec<&str> = o
        .zone("node-1")
        .expect("zone")
        .resources
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names.first(), Some(&"cpu"));
    assert_eq!(
        &names[names.len() - 2..],
        ["example.com/gpu", "example.com/nic"]
    );

    let mut bad = devices.clone();
    bad.allocatable
        .entry("example.com/gpu".into())
        .or_default()
        .insert("gpu9".into(), nodes(&[7]));
    i.devices = &bad;
    let e = build(&i).expect_err("refused");
    assert_eq!(
        e.to_string(),
        "device gpu9 of resource example.com/gpu is attached to NUMA node 7, which this machine does not have"
    );
}

#[test]
fn topology_manager_attributes_follow_the_view_and_name_its_source() {
    let t = machine();
    let none = CpuAccounting::PolicyNone {
        reserved: CpuSet::new(),
    };
    let mut i = input(&t, none, &[]);
    i.topology_manager = TopologyManagerView {
        policy: TmPolicy::Restricted,
        scope: TmScope::Container,
        max_numa_nodes: 16,
    };
    i.topology_manager_source = TopologyManagerSource::KubeletConfig;
    let o = build(&i).expect("builds");
    assert_eq!(o.attribute(ATTR_TM_POLICY), Some("restricted"));
    assert_eq!(o.attribute(ATTR_TM_SCOPE), Some("container"));
    assert_eq!(o.attribute(ATTR_TM_MAX_NUMA_NODES), Some("16"));
    assert_eq!(
        o.attribute(super::tmsource::ATTR_TM_SOURCE),
        Some("KubeletConfig")
    );
    i.topology_manager_source = TopologyManagerSource::KubeletCommandLine;
    let o = build(&i).expect("builds");
    assert_eq!(
        o.attribute(super::tmsource::ATTR_TM_SOURCE),
        Some("KubeletCommandLine")
    );
    i.topology_manager_source = TopologyManagerSource::SpecUnverified;
    let o = build(&i).expect("builds");
    assert_eq!(
        o.attribute(super::tmsource::ATTR_TM_SOURCE),
        Some("SpecUnverified")
    );
}
