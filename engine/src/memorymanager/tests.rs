use super::*;
use crate::cpuset::CpuSet;
use crate::pod::ResourceList;
use crate::topology::{CpuInfo, NumaNode};
use crate::topologymanager::TopologyHint;

const GI: u64 = 1 << 30;

fn topo(mem_gib: &[u64], hugepages_1g: &[u64]) -> CpuTopology {
    let cpus = (0..mem_gib.len())
        .map(|i| CpuInfo {
            id: i,
            core: i,
            socket: 0,
            numa: i,
            uncore: 0,
        })
        .collect();
    let nodes = mem_gib
        .iter()
        .enumerate()
        .map(|(i, m)| NumaNode {
            id: i,
            cpus: CpuSet::from_ids([i]),
            distances: None,
            memory_bytes: Some(m * GI),
            hugepages: if hugepages_1g.is_empty() {
                vec![]
            } else {
                vec![(1 << 20, hugepages_1g[i])]
            },
        })
        .collect();
    CpuTopology::with_derived_counts(cpus, nodes, vec![]).unwrap()
}

fn pod(uid: &str, mem: u64, huge: u64) -> Pod {
    let mut rl = ResourceList {
        cpu_millis: Some(1000),
        memory_bytes: Some(mem),
        ..Default::default()
    };
    if huge > 0 {
        rl.hugepages.insert(GI, huge);
    }
    Pod {
        namespace: "default".into(),
        name: uid.into(),
        uid: uid.into(),
        containers: vec![Container {
            name: "main".into(),
            requests: rl.clone(),
            limits: rl,
            restartable: false,
        }],
        ..Default::default()
    }
}

fn h(bits: u64, preferred: bool) -> TopologyHint {
    TopologyHint {
        affinity: Some(NumaMask::from_bits(bits)),
        preferred,
    }
}

fn list(m: &MemoryManager, p: &Pod) -> BTreeMap<String, Vec<TopologyHint>> {
    match m.container_hints(p, &p.containers[0]) {
        MemoryHints::Implicit { resources, source } => resources
            .into_iter()
            .map(|r| (r, source.materialize()))
            .collect(),
        MemoryHints::Explicit(e) => e,
        MemoryHints::None => panic!("nil hints"),
    }
}

#[test]
fn names() {
    assert_eq!(MemoryResource::Memory.name(), "memory");
    assert_eq!(
        MemoryResource::HugePages {
            page_bytes: 2 << 20
        }
        .name(),
        "hugepages-2Mi"
    );
    assert_eq!(
        MemoryResource::HugePages { page_bytes: GI }.name(),
        "hugepages-1Gi"
    );
}

#[test]
fn single_and_multi_numa_hints_and_groups() {
    let mut m = MemoryManager::new(&topo(&[4, 4, 4], &[]), &ReservedMemory::new()).unwrap();
    let small = pod("a", 2 * GI, 0);
    let all = list(&m, &small)["memory"].clone();
    assert_eq!(all.len(), 7);
    assert_eq!(&all[..3], &[h(1, true), h(2, true), h(4, true)]);
    assert!(all[3..].iter().all(|x| !x.preferred));
    // 6 GiB needs two nodes: preferred at width 2.
    let big = pod("b", 6 * GI, 0);
    let l = list(&m, &big)["memory"].clone();
    assert_eq!(l[0], h(0b011, true));
    assert_eq!(l.last().copied(), Some(h(0b111, false)));
    // Allocate it on {0,1}: they form a group; node 0 alone is no longer a hint, and a
    // mask mixing the group with node 2 is none either.
    m.allocate(&big, &big.containers[0], Some(&h(0b011, true)))
        .unwrap();
    assert_eq!(m.nodes()[&0].cells, NumaMask::from_bits(0b011));
    assert_eq!(m.nodes()[&0].tables[&MemoryResource::Memory].free, 0);
    assert_eq!(m.nodes()[&1].tables[&MemoryResource::Memory].free, 2 * GI);
    let l = list(&m, &small)["memory"].clone();
    assert_eq!(l, vec![h(4, true), h(0b011, false)]);
    // Release restores everything.
    m.remove_pod("b");
    let fresh = MemoryManager::new(&topo(&[4, 4, 4], &[]), &ReservedMemory::new()).unwrap();
    assert_eq!(m, fresh);
}

#[test]
fn hugepages_reserved_and_default_hint() {
    let mut reserved = ReservedMemory::new();
    reserved
        .entry(0)
        .or_default()
        .insert(MemoryResource::Memory, GI);
    // 8 GiB per node, 2 x 1 GiB huge pages each: memory allocatable 6 / 5 GiB.
    let mut m = MemoryManager::new(&topo(&[8, 8], &[2, 2]), &reserved).unwrap();
    assert_eq!(
        m.nodes()[&0].tables[&MemoryResource::Memory].allocatable,
        5 * GI
    );
    assert_eq!(
        m.nodes()[&1].tables[&MemoryResource::Memory].allocatable,
        6 * GI
    );
    let p = pod("p", 6 * GI, 2 * GI);
    let l = list(&m, &p);
    assert_eq!(l["memory"], vec![h(2, true), h(3, false)]);
    assert_eq!(l["hugepages-1Gi"], l["memory"]);
    // No hint from the topology manager: the default (best) hint is node 1.
    m.allocate(&p, &p.containers[0], None).unwrap();
    assert_eq!(
        m.blocks("p", "main").unwrap()[0].affinity,
        NumaMask::from_bits(2)
    );
    // A hint that cannot hold the request is extended to the best containing hint.
    let q = pod("q", 5 * GI, 0);
    let mut m2 = MemoryManager::new(&topo(&[4, 4], &[]), &ReservedMemory::new()).unwrap();
    m2.allocate(&q, &q.containers[0], Some(&h(1, false)))
        .unwrap();
    assert_eq!(
        m2.blocks("q", "main").unwrap()[0].affinity,
        NumaMask::from_bits(3)
    );
    // Nothing fits: empty map (don't care), and the allocation fails as the kubelet's.
    let huge = pod("z", 100 * GI, 0);
    assert!(list(&m2, &huge).is_empty());
    assert_eq!(
        m2.allocate(&huge, &huge.containers[0], None),
        Err(MemoryError::NoDefaultAffinity)
    );
    assert!(matches!(
        MemoryManager::new(
            &topo(&[1], &[]),
            &[(0, [(MemoryResource::Memory, 2 * GI)].into())].into()
        ),
        Err(MemoryError::ReservedTooLarge { .. })
    ));
}

#[test]
fn min_affinity_multi_resource() {
    // Node 0 has lots of memory, node 1 lots of huge pages, node 2 some of both.
    let alloc = vec![vec![10, 0], vec![0, 10], vec![5, 5]];
    assert_eq!(min_affinity(&[0, 1, 2], &alloc, &[5, 5]), Some(1));
    assert_eq!(min_affinity(&[0, 1, 2], &alloc, &[10, 10]), Some(2));
    assert_eq!(min_affinity(&[0, 1, 2], &alloc, &[15, 5]), Some(2));
    assert_eq!(min_affinity(&[0, 1, 2], &alloc, &[15, 6]), Some(3));
    assert_eq!(min_affinity(&[0, 1, 2], &alloc, &[16, 16]), None);
}

/// Oracle divergence (kubelet v1.37.2 `regenerateHints`): a container whose blocks no
/// longer match its request (a regular init container whose memory a later container
/// reused, its block shrunk) gets a nil map, no preference, when the pod is admitted again
/// (after a kubelet restart); the engine answered empty lists, which rejected the pod.
#[test]
fn readmission_after_reuse_gives_no_preference() {
    let mut m = MemoryManager::new(&topo(&[4, 4], &[]), &ReservedMemory::new()).unwrap();
    let mut p = pod("a", GI, 0);
    let mut init = p.containers[0].clone();
    init.name = "init".into();
    init.requests.memory_bytes = Some(2 * GI);
    init.limits.memory_bytes = Some(2 * GI);
    p.init_containers.push(init);
    m.allocate(&p, &p.init_containers[0], Some(&h(0b01, true)))
        .unwrap();
    m.allocate(&p, &p.containers[0], Some(&h(0b01, true)))
        .unwrap();
    // The init container's block shrank by what the app container reused.
    assert_eq!(m.blocks("a", "init").unwrap()[0].size, GI);
    assert!(matches!(
        m.container_hints(&p, &p.init_containers[0]),
        MemoryHints::None
    ));
    // The app container's block matches its request: its own affinity, preferred.
    assert_eq!(list(&m, &p)["memory"], vec![h(0b01, true)]);
    let mut admitter_view = p.clone();
    admitter_view.containers[0].requests.memory_bytes = Some(3 * GI);
    admitter_view.containers[0].limits.memory_bytes = Some(3 * GI);
    assert!(matches!(
        m.container_hints(&admitter_view, &admitter_view.containers[0]),
        MemoryHints::None
    ));
}
