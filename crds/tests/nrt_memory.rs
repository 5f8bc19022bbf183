//! Memory and huge pages per NUMA zone under the Static Memory Manager, across random
//! states: machines with random memory and huge pages per node, random `--reserved-memory`,
//! and containers pinned the way the kubelet pins them (one node, or a cross-NUMA group
//! filled in ascending node order), reported as PodResources reports them. Every zone's
//! numbers must equal the kubelet model's, the totals must add up, and a report that does
//! not fit the machine must be refused with the block named.

use std::collections::BTreeMap;

use nodetopo_crds::nrt::memory::{memory_tables, MemoryBlock, MemoryReportError};
use nodetopo_crds::nrt::{
    build, AllocationSource, CpuAccounting, DeviceInventory, MemoryManagerView, NrtInput,
    ReservedSource, TopologyManagerSource, TopologyManagerView,
};
use nodetopo_engine::topology::{CpuInfo, NumaNode, UncoreCache};
use nodetopo_engine::topologymanager::{TmPolicy, TmScope};
use nodetopo_engine::{CpuSet, CpuTopology};
use proptest::prelude::*;

const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;

/// One NUMA node: MemTotal, 2 MiB pages, 1 GiB pages.
#[derive(Debug, Clone)]
struct NodeSpec {
    mem: u64,
    pages_2m: u64,
    pages_1g: u64,
}

fn machine(nodes: &[NodeSpec]) -> CpuTopology {
    let cpus = (0..nodes.len() * 2)
        .map(|id| CpuInfo {
            id,
            core: id,
            socket: 0,
            numa: id / 2,
            uncore: id / 2,
        })
        .collect();
    let numa = nodes
        .iter()
        .enumerate()
        .map(|(n, s)| NumaNode {
            id: n,
            cpus: CpuSet::from_ids([n * 2, n * 2 + 1]),
            distances: None,
            memory_bytes: Some(s.mem),
            hugepages: [(2048u64, s.pages_2m), (1 << 20, s.pages_1g)]
                .into_iter()
                .filter(|(_, p)| *p > 0)
                .collect(),
        })
        .collect();
    let caches = (0..nodes.len())
        .map(|n| UncoreCache {
            id: n,
            level: 3,
            cpus: CpuSet::from_ids([n * 2, n * 2 + 1]),
            size_bytes: None,
        })
        .collect();
    CpuTopology::with_derived_counts(cpus, numa, caches).expect("valid machine")
}

/// The kubelet model: per (node, resource) total, allocatable and free.
#[derive(Debug, Clone, Default)]
struct Model {
    total: BTreeMap<(usize, String), u64>,
    allocatable: BTreeMap<(usize, String), u64>,
    free: BTreeMap<(usize, String), u64>,
}

#[derive(Debug, Clone)]
struct Case {
    nodes: Vec<NodeSpec>,
    /// Per node, the fraction (per mille) of each resource reserved.
    reserved: Vec<(u64, u64, u64)>,
    /// Pinned requests: (resource index 0..3, first node, group width, per mille of the
    /// group's free memory asked).
    requests: Vec<(usize, usize, usize, u64)>,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..5)
        .prop_flat_map(|n| {
            (
                prop::collection::vec(
                    (4u64..64, 0u64..512, 0u64..3).prop_map(|(g, p2, p1)| NodeSpec {
                        mem: g * GI + 123 * 4096,
                        pages_2m: p2,
                        pages_1g: p1,
                    }),
                    n,
                ),
                prop::collection::vec((0u64..300, 0u64..500, 0u64..1000), n),
                prop::collection::vec((0usize..3, 0usize..n, 1usize..=n, 1u64..700), 0..12),
            )
        })
        .prop_map(|(nodes, reserved, requests)| Case {
            nodes,
            reserved,
            requests,
        })
}

const RESOURCES: [&str; 3] = ["memory", "hugepages-2Mi", "hugepages-1Gi"];

/// What the kubelet would report for this case, and its model.
fn kubelet(c: &Case) -> (Vec<MemoryBlock>, Vec<MemoryBlock>, Model) {
    let mut m = Model::default();
    let mut allocatable = Vec::new();
    for (n, s) in c.nodes.iter().enumerate() {
        let huge = s.pages_2m * 2 * MI + s.pages_1g * GI;
        let (r_mem, r_2m, r_1g) = c.reserved[n];
        let sizes = [
            (RESOURCES[0], s.mem, s.mem - huge, r_mem),
            (RESOURCES[1], s.pages_2m * 2 * MI, s.pages_2m * 2 * MI, r_2m),
            (RESOURCES[2], s.pages_1g * GI, s.pages_1g * GI, r_1g),
        ];
        for (r, total, limit, per_mille) in sizes {
            if total == 0 {
                continue;
            }
            // Reserved huge pages are whole pages.
            let page = match r {
                "hugepages-2Mi" => 2 * MI,
                "hugepages-1Gi" => GI,
                _ => 1,
            };
            let reserved = (limit * per_mille / 1000) / page * page;
            let alloc = limit - reserved;
            m.total.insert((n, r.to_string()), total);
            m.allocatable.insert((n, r.to_string()), alloc);
            m.free.insert((n, r.to_string()), alloc);
            // The kubelet leaves out tables with nothing allocatable.
            if alloc > 0 {
                allocatable.push(MemoryBlock {
                    owner: "allocatable".into(),
                    resource: r.to_string(),
                    size: alloc,
                    numa_nodes: vec![n],
                });
            }
        }
    }
    let mut pinned = Vec::new();
    for (i, (ri, first, width, per_mille)) in c.requests.iter().enumerate() {
        let r = RESOURCES[*ri];
        let group: Vec<usize> = (*first..(*first + *width).min(c.nodes.len())).collect();
        let group_free: u64 = group
            .iter()
            .map(|n| m.free.get(&(*n, r.to_string())).copied().unwrap_or(0))
            .sum();
        let size = group_free * per_mille / 1000;
        if size == 0
            || group
                .iter()
                .any(|n| !m.total.contains_key(&(*n, r.to_string())))
        {
            continue;
        }
        // The kubelet fills the group's nodes in ascending order.
        let mut left = size;
        for n in &group {
            let f = m.free.get_mut(&(*n, r.to_string())).expect("table");
            let take = left.min(*f);
            *f -= take;
            left -= take;
        }
        assert_eq!(left, 0);
        // PodResources may list the group in any order.
        let mut numa_nodes = group.clone();
        numa_nodes.reverse();
        pinned.push(MemoryBlock {
            owner: format!("default/p{i}/c"),
            resource: r.to_string(),
            size,
            numa_nodes,
        });
    }
    (allocatable, pinned, m)
}

fn object(
    t: &CpuTopology,
    memory: MemoryManagerView<'_>,
) -> nodetopo_crds::nrt::NodeResourceTopology {
    let devices = DeviceInventory::default();
    let input = NrtInput {
        node_name: "n1",
        node_uid: None,
        topology: t,
        cpu: CpuAccounting::PolicyNone {
            reserved: CpuSet::new(),
        },
        reserved_source: ReservedSource::Spec,
        topology_manager: TopologyManagerView {
            policy: TmPolicy::SingleNumaNode,
            scope: TmScope::Container,
            max_numa_nodes: 8,
        },
        topology_manager_source: TopologyManagerSource::SpecUnverified,
        memory,
        pods: &[],
        source: AllocationSource::PodResources,
        devices: &devices,
    };
    build(&input).expect("object builds")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn zones_follow_the_memory_managers_tables(c in case()) {
        let t = machine(&c.nodes);
        let (allocatable, pinned, model) = kubelet(&c);
        let tables = memory_tables(&t, &allocatable, &pinned).expect("the kubelet's report fits");
        let o = object(&t, MemoryManagerView::Static(&tables));
        prop_assert_eq!(o.attribute("nodetopo.io/memoryManagerPolicy"), Some("Static"));
        let mut pinned_total: BTreeMap<String, u64> = BTreeMap::new();
        for b in &pinned {
            *pinned_total.entry(b.resource.clone()).or_default() += b.size;
        }
        let mut used: BTreeMap<String, u64> = BTreeMap::new();
        for ((n, r), total) in &model.total {
            let z = o.zone(&format!("node-{n}")).expect("zone");
            let res = z.resource(r).expect("resource listed");
            let num = |s: &str| s.parse::<u64>().expect("bytes");
            prop_assert_eq!(num(&res.capacity), *total, "{} capacity on node {}", r, n);
            prop_assert_eq!(num(&res.allocatable), model.allocatable[&(*n, r.clone())]);
            prop_assert_eq!(num(&res.available), model.free[&(*n, r.clone())]);
            prop_assert!(num(&res.available) <= num(&res.allocatable));
            prop_assert!(num(&res.allocatable) <= num(&res.capacity));
            *used.entry(r.clone()).or_default() += num(&res.allocatable) - num(&res.available);
        }
        for (r, sum) in &pinned_total {
            prop_assert_eq!(used.get(r).copied().unwrap_or(0), *sum, "{} pinned adds up", r);
        }
        // Policy None: the sizes alone, nothing pinned.
        let none = object(&t, MemoryManagerView::None);
        prop_assert_eq!(none.attribute("nodetopo.io/memoryManagerPolicy"), Some("None"));
        for z in none.zones.iter() {
            for r in &z.resources {
                prop_assert_eq!(&r.available, &r.allocatable);
            }
        }
    }

    #[test]
    fn a_block_that_does_not_fit_is_refused(c in case(), extra in 1u64..GI) {
        let t = machine(&c.nodes);
        let (allocatable, mut pinned, model) = kubelet(&c);
        // One more block on node 0 than its free memory.
        let free = model.free[&(0, "memory".to_string())];
        pinned.push(MemoryBlock {
            owner: "default/big/c".into(),
            resource: "memory".into(),
            size: free + extra,
            numa_nodes: vec![0],
        });
        let e = memory_tables(&t, &allocatable, &pinned).expect_err("refused");
        let is_overcommit = matches!(e, MemoryReportError::Overcommitted { .. });
        prop_assert!(is_overcommit, "{e}");
        prop_assert!(e.to_string().contains("default/big/c"), "{e}");
    }
}

#[test]
fn reports_that_do_not_fit_the_machine_are_refused() {
    let t = machine(&[NodeSpec {
        mem: 8 * GI,
        pages_2m: 4,
        pages_1g: 0,
    }]);
    let block = |owner: &str, r: &str, size: u64, nodes: Vec<usize>| MemoryBlock {
        owner: owner.into(),
        resource: r.into(),
        size,
        numa_nodes: nodes,
    };
    let cases = [
        (
            vec![block("allocatable", "memory", GI, vec![3])],
            vec![],
            "memory block of allocatable: memory on NUMA node 3, which this machine does not have",
        ),
        (
            vec![block("allocatable", "hugepages-1Gi", GI, vec![0])],
            vec![],
            "memory block of allocatable: hugepages-1Gi on NUMA node 0, which this machine does not have",
        ),
        (
            vec![block("allocatable", "memory", 8 * GI, vec![0])],
            vec![],
            "allocatable memory on NUMA node 0 is 8589934592 bytes, above the node's 8581545984 bytes",
        ),
        (
            vec![],
            vec![block("ns/p/c", "cpu", 1, vec![0])],
            "memory block of ns/p/c: resource \"cpu\" is not memory or hugepages-<size>",
        ),
        (
            vec![],
            vec![block("ns/p/c", "memory", 1, vec![])],
            "memory block of ns/p/c: memory names no NUMA node",
        ),
    ];
    for (alloc, pinned, want) in cases {
        let e = memory_tables(&t, &alloc, &pinned).expect_err(want);
        assert_eq!(e.to_string(), want);
    }
}
