//! Node admission end to end: the KEP-4800 worked example, scopes, policies, rollback of
//! rejected pods, init-container reuse, memory and device alignment; and the hint
//! providers against the kubelet's explicit lists and the HintSource defaults.

use std::collections::BTreeMap;

use nodetopo_engine::admission::cpu_hints::CpuHintSource;
use nodetopo_engine::admission::{
    CpuPolicyConfig, MemoryManagerConfig, NodeAdmitter, NodeConfig, PodAdmission,
};
use nodetopo_engine::cpumanager::{generate_cpu_topology_hints, ReservedCpus, StaticPolicyOptions};
use nodetopo_engine::devicemanager::{DeviceHints, DeviceManager, DeviceSpec};
use nodetopo_engine::memorymanager::{self, MemoryHints, MemoryManager, ReservedMemory};
use nodetopo_engine::topologymanager::{HintSource, NumaMask, TmPolicy, TmScope, TopologyHint};
use nodetopo_engine::{Container, CpuInfo, CpuSet, CpuTopology, NumaNode, Pod, ResourceList};
use proptest::prelude::*;

const GI: u64 = 1 << 30;

/// A machine: `numa` nodes of `cores` cores with `threads` threads each (siblings numbered
/// next to each other), `uncores_per_node` L3s per node, one socket per `numa_per_socket`.
fn machine(numa: usize, cores: usize, threads: usize, uncores_per_node: usize) -> CpuTopology {
    let mut cpus = Vec::new();
    let per_node = cores * threads;
    for n in 0..numa {
        for k in 0..cores {
            for th in 0..threads {
                let id = n * per_node + k * threads + th;
                cpus.push(CpuInfo {
                    id,
                    core: n * per_node + k * threads,
                    socket: n / 2,
                    numa: n,
                    uncore: n * uncores_per_node + k * uncores_per_node / cores,
                });
            }
        }
    }
    let nodes = (0..numa)
        .map(|n| NumaNode {
            id: n,
            cpus: CpuSet::from_ids(n * per_node..(n + 1) * per_node),
            distances: Some((0..numa).map(|m| if m == n { 10 } else { 20 }).collect()),
            memory_bytes: Some(16 * GI),
            hugepages: vec![],
        })
        .collect();
    CpuTopology::with_derived_counts(cpus, nodes, vec![]).unwrap()
}

fn container(name: &str, cpus: u64, extended: &[(&str, u64)]) -> Container {
    let mut rl = ResourceList {
        cpu_millis: Some(cpus * 1000),
        memory_bytes: Some(GI / 4),
        ..Default::default()
    };
    for (r, n) in extended {
        rl.extended.insert((*r).to_string(), *n);
    }
    Container {
        name: name.into(),
        requests: rl.clone(),
        limits: rl,
        restartable: false,
    }
}

fn pod(name: &str, init: Vec<Container>, app: Vec<Container>) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        init_containers: init,
        containers: app,
    }
}

fn config(
    reserved: &str,
    options: StaticPolicyOptions,
    policy: TmPolicy,
    scope: TmScope,
) -> NodeConfig {
    NodeConfig {
        cpu: CpuPolicyConfig::Static {
            reserved: ReservedCpus::Explicit(CpuSet::parse(reserved).unwrap()),
            options,
        },
        tm_policy: policy,
        tm_scope: scope,
        ..Default::default()
    }
}

fn cpus(a: &PodAdmission) -> Vec<String> {
    a.allocations.iter().map(|r| r.cpus.clone()).collect()
}

#[test]
fn kep_4800_worked_example() {
    let t = machine(1, 8, 2, 2);
    let run = |uncore: bool| -> Vec<(String, Vec<u64>)> {
        let options = StaticPolicyOptions {
            prefer_align_cpus_by_uncorecache: uncore,
            ..Default::default()
        };
        let mut a = NodeAdmitter::new(
            t.clone(),
            &config("0-1", options, TmPolicy::None, TmScope::Container),
        )
        .unwrap();
        (1..=3)
            .map(|i| {
                let r = a.admit(&pod(
                    &format!("c{i}"),
                    vec![],
                    vec![container("main", 4, &[])],
                ));
                assert!(r.admitted(), "{r:?}");
                (
                    r.allocations[0].cpus.clone(),
                    r.allocations[0].uncore_caches.clone(),
                )
            })
            .collect()
    };
    let without = run(false);
    assert_eq!(without[1], ("6-9".to_string(), vec![0, 1]));
    let with = run(true);
    assert_eq!(with[1].1.len(), 1, "{with:?}");
    assert_eq!(with[1], ("8-11".to_string(), vec![1]));
}

#[test]
fn rejected_pod_keeps_nothing_and_remove_releases() {
    let t = machine(2, 4, 2, 1);
    let options = StaticPolicyOptions {
        full_pcpus_only: true,
        ..Default::default()
    };
    let mut a = NodeAdmitter::new(
        t,
        &config("0-1", options, TmPolicy::BestEffort, TmScope::Container),
    )
    .unwrap();
    let before = a.cpu_state().clone();
    // The first container fits, the second asks for an odd count: SMTAlignmentError, and
    // the first container's CPUs go back.
    let bad = pod(
        "bad",
        vec![],
        vec![container("a", 2, &[]), container("b", 3, &[])],
    );
    let r = a.admit(&bad);
    assert!(r.allocations.is_empty());
    assert_eq!(r.rejections[0].reason, "SMTAlignmentError");
    assert_eq!(r.rejections[0].container, "b");
    assert_eq!(a.cpu_state(), &before);
    let good = pod(
        "good",
        vec![],
        vec![container("a", 2, &[]), container("b", 4, &[])],
    );
    let r = a.admit(&good);
    assert!(r.admitted());
    assert_eq!(a.pools().exclusive.len(), 6);
    assert_eq!(a.pools().reserved.to_string(), "0-1");
    a.remove_pod(&good.uid);
    assert_eq!(a.cpu_state(), &before);
    assert_eq!(a.pools().free.len(), 14);
}

#[test]
fn single_numa_node_rejects_and_restricted_admits_aligned() {
    let t = machine(2, 4, 1, 1);
    let mut a = NodeAdmitter::new(
        t.clone(),
        &config(
            "",
            StaticPolicyOptions::default(),
            TmPolicy::SingleNumaNode,
            TmScope::Container,
        ),
    )
    .unwrap();
    let r = a.admit(&pod("wide", vec![], vec![container("main", 6, &[])]));
    assert_eq!(r.rejections[0].reason, "TopologyAffinityError");
    assert!(a.pools().exclusive.is_empty());
    let r = a.admit(&pod("fits", vec![], vec![container("main", 3, &[])]));
    assert_eq!(cpus(&r), vec!["0-2"]);
    let hint = r.allocations[0].hint.clone().unwrap();
    assert_eq!(hint.numa_nodes, Some(vec![0]));
    assert!(hint.preferred && r.allocations[0].aligned.numa_node);
    // The next 3-CPU container no longer fits node 0: it goes to node 1.
    let r = a.admit(&pod("next", vec![], vec![container("main", 3, &[])]));
    assert_eq!(cpus(&r), vec!["4-6"]);
}

#[test]
fn pod_scope_keeps_containers_together() {
    let t = machine(2, 4, 1, 1);
    let mut a = NodeAdmitter::new(
        t,
        &config(
            "",
            StaticPolicyOptions::default(),
            TmPolicy::Restricted,
            TmScope::Pod,
        ),
    )
    .unwrap();
    let first = a.admit(&pod("one", vec![], vec![container("main", 1, &[])]));
    assert_eq!(cpus(&first), vec!["0"]);
    // 2 + 2 CPUs: node 0 has only 3 left, so the pod-level merge picks node 1 for both.
    let r = a.admit(&pod(
        "two",
        vec![],
        vec![container("a", 2, &[]), container("b", 2, &[])],
    ));
    assert_eq!(cpus(&r), vec!["4-5", "6-7"]);
    assert!(r.allocations.iter().all(|x| x.numa_nodes == vec![1]));
}

#[test]
fn init_container_cpus_are_reused() {
    let t = machine(1, 8, 1, 1);
    let mut a = NodeAdmitter::new(
        t,
        &config(
            "0",
            StaticPolicyOptions::default(),
            TmPolicy::BestEffort,
            TmScope::Container,
        ),
    )
    .unwrap();
    let r = a.admit(&pod(
        "p",
        vec![container("init", 4, &[])],
        vec![container("app", 4, &[])],
    ));
    assert!(r.admitted());
    assert_eq!(cpus(&r), vec!["1-4", "1-4"]);
    assert_eq!(a.pools().free.to_string(), "5-7");
}

#[test]
fn devices_and_memory_steer_the_hint() {
    let t = machine(2, 4, 1, 1);
    let mut cfg = config(
        "",
        StaticPolicyOptions::default(),
        TmPolicy::Restricted,
        TmScope::Container,
    );
    cfg.devices = vec![DeviceSpec {
        resource: "example.com/nic".into(),
        id: "nic0".into(),
        numa_nodes: vec![1],
        healthy: true,
    }];
    // The kubelet's Static policy needs some reserved regular memory: 1 MiB on node 0.
    cfg.memory = MemoryManagerConfig::Static {
        reserved: ReservedMemory::from([(
            0,
            BTreeMap::from([(memorymanager::MemoryResource::Memory, 1 << 20)]),
        )]),
    };
    let mut a = NodeAdmitter::new(t, &cfg).unwrap();
    let r = a.admit(&pod(
        "net",
        vec![],
        vec![container("main", 2, &[("example.com/nic", 1)])],
    ));
    assert_eq!(cpus(&r), vec!["4-5"]);
    // The only NIC is taken: the next NIC pod cannot get a hint that satisfies it.
    let r = a.admit(&pod(
        "net2",
        vec![],
        vec![container("main", 2, &[("example.com/nic", 1)])],
    ));
    assert_eq!(r.rejections[0].reason, "TopologyAffinityError");
    // A container asking for more memory than a node has needs both nodes, but node 1
    // already serves a single-node block, so the Memory Manager cannot group it: the
    // kubelet's "failed to find NUMA nodes to extend" rejection.
    let mut big = container("main", 2, &[]);
    big.requests.memory_bytes = Some(20 * GI);
    big.limits.memory_bytes = Some(20 * GI);
    let big = pod("big", vec![], vec![big]);
    let r = a.admit(&big);
    assert_eq!(r.rejections[0].reason, "UnexpectedAdmissionError");
    assert!(r.rejections[0].message.contains("extend"), "{r:?}");
    // On an empty node memory prefers {0,1} but the CPU manager prefers one node for two
    // CPUs: the merged {0,1} is not preferred, which restricted rejects...
    a.remove_pod("uid-net");
    let r = a.admit(&big);
    assert_eq!(r.rejections[0].reason, "TopologyAffinityError");
    // ...and best-effort admits, with memory spanning both nodes.
    cfg.tm_policy = TmPolicy::BestEffort;
    let mut b = NodeAdmitter::new(machine(2, 4, 1, 1), &cfg).unwrap();
    let r = b.admit(&big);
    assert!(r.admitted(), "{r:?}");
    let hint = r.allocations[0].hint.clone().unwrap();
    assert_eq!((hint.numa_nodes, hint.preferred), (Some(vec![0, 1]), false));
}

#[test]
fn every_policy_and_scope_admits_something_on_a_busy_machine() {
    let t = machine(4, 4, 2, 2);
    for policy in TmPolicy::ALL {
        for scope in [TmScope::Container, TmScope::Pod] {
            let mut a = NodeAdmitter::new(
                t.clone(),
                &config("0-1", StaticPolicyOptions::default(), policy, scope),
            )
            .unwrap();
            let mut admitted = 0;
            for i in 0..12 {
                let r = a.admit(&pod(
                    &format!("p{i}"),
                    vec![],
                    vec![container("main", 1 + i % 4, &[])],
                ));
                admitted += usize::from(r.admitted());
                assert_eq!(r.admitted(), r.rejections.is_empty());
            }
            assert!(admitted >= 8, "{policy:?}/{scope:?}: {admitted}");
            let p = a.pools();
            assert!(p.exclusive.is_disjoint(&p.shared) && p.reserved.is_disjoint(&p.exclusive));
        }
    }
}

/// A source that only answers `lookup`, so every other method takes the trait's default
/// (derived from enumeration): what the providers' overrides must equal.
#[derive(Debug)]
struct Plain<'a>(&'a dyn HintSource);

impl HintSource for Plain<'_> {
    fn lookup(&self, mask: NumaMask) -> Option<bool> {
        self.0.lookup(mask)
    }
}

fn check_overrides(s: &dyn HintSource, machine: NumaMask) {
    let p = Plain(s);
    assert_eq!(s.materialize(machine), p.materialize(machine));
    assert_eq!(s.min_width(machine), p.min_width(machine));
    let (a, b) = (s.preferred_widths(machine), p.preferred_widths(machine));
    match (a, b) {
        (None, None) => {}
        (Some((lo, hi)), Some((plo, phi))) => assert!(lo <= plo && phi <= hi, "{a:?} vs {b:?}"),
        // A loose range is allowed only when it is empty of preferred hints anyway.
        (Some(_), None) | (None, Some(_)) => panic!("preferred widths {a:?} vs {b:?}"),
    }
    if s.is_upward_closed(machine) {
        assert!(p.is_upward_closed(machine));
    }
    let bits = machine.bits();
    for lo in 1..=bits {
        if lo & !bits != 0 {
            continue;
        }
        for hi in [bits, lo, lo | (bits & !(lo << 1))] {
            let (lo, hi) = (NumaMask::from_bits(lo), NumaMask::from_bits(hi & bits));
            assert_eq!(
                s.any_hint_between(lo, hi),
                p.any_hint_between(lo, hi),
                "between {lo:?} and {hi:?}"
            );
        }
    }
}

fn arb_machine() -> impl Strategy<Value = (CpuTopology, Vec<u64>)> {
    (1usize..=5, 1usize..=4, 1usize..=2).prop_flat_map(|(numa, cores, threads)| {
        (
            Just(machine(numa, cores, threads, 1)),
            prop::collection::vec(0u64..=2 * cores as u64 * threads as u64, numa),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("NODETOPO_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn cpu_provider_equals_kubelet_list(
        (t, _) in arb_machine(),
        avail_bits in any::<u64>(),
        reuse_bits in any::<u64>(),
        request in 1usize..=12,
        by_socket in any::<bool>(),
    ) {
        let all = t.all_cpus().to_vec();
        let available: CpuSet = all.iter().copied().filter(|c| avail_bits >> (c % 64) & 1 == 1).collect();
        let reusable: CpuSet = all.iter().copied()
            .filter(|c| !available.contains(*c) && reuse_bits >> (c % 64) & 1 == 1 && c % 5 == 0)
            .collect();
        let src = CpuHintSource::new(&t, &available, &reusable, request, by_socket);
        let kubelet = generate_cpu_topology_hints(&t, &available, &reusable, request, by_socket);
        prop_assert_eq!(src.materialize(), kubelet);
        let machine = NumaMask::new(t.numa_nodes().iter().map(|n| n.id)).unwrap();
        check_overrides(&src, machine);
    }

    #[test]
    fn memory_and_device_sources_agree_with_defaults(
        (t, mem) in arb_machine(),
        placed in prop::collection::vec((0u64..=15, 1u64..=12), 0..4),
        request in 1u64..=24,
        devs in prop::collection::vec((0usize..5, 0usize..5), 0..8),
        want in 1u64..=4,
    ) {
        let machine = NumaMask::new(t.numa_nodes().iter().map(|n| n.id)).unwrap();
        let n = t.numa_nodes().len();
        // Memory: place some blocks (single and multi-node), then ask.
        let mut mm = MemoryManager::new(&t, &ReservedMemory::new()).unwrap();
        for (i, (bits, gib)) in placed.iter().enumerate() {
            let mask = NumaMask::from_bits(bits & machine.bits());
            let mut p = pod(&format!("m{i}"), vec![], vec![container("main", 1, &[])]);
            p.containers[0].requests.memory_bytes = Some(gib * GI / 2);
            p.containers[0].limits.memory_bytes = Some(gib * GI / 2);
            let hint = (!mask.is_empty()).then_some(TopologyHint { affinity: Some(mask), preferred: false });
            let _ = mm.allocate(&p, &p.containers[0], hint.as_ref());
        }
        let _ = mem;
        let mut q = pod("q", vec![], vec![container("main", 1, &[])]);
        q.containers[0].requests.memory_bytes = Some(request * GI);
        q.containers[0].limits.memory_bytes = Some(request * GI);
        if let MemoryHints::Implicit { source, .. } = mm.container_hints(&q, &q.containers[0]) {
            check_overrides(source.as_ref(), machine);
        }
        // The structural emptiness test (no enumeration) agrees with the full list.
        let request = memorymanager::container_request(&q.containers[0]);
        let src = mm.hint_source("q", &request);
        prop_assert_eq!(src.is_empty(), src.materialize().is_empty());
        // Devices: some on one node, some on two, some on none.
        let specs: Vec<DeviceSpec> = devs.iter().enumerate().map(|(i, (a, b))| DeviceSpec {
            resource: "x/dev".into(),
            id: format!("d{i}"),
            numa_nodes: match (a % (n + 1), b % (n + 1)) {
                (x, _) if x == n => vec![],
                (x, y) if y == n || x == y => vec![x],
                (x, y) => vec![x, y],
            },
            healthy: true,
        }).collect();
        let ids: Vec<usize> = (0..n).collect();
        let dm = DeviceManager::new(&specs, &ids).unwrap();
        let d = pod("d", vec![], vec![container("main", 1, &[("x/dev", want)])]);
        if let Some(h) = dm.container_hints(&d, &d.containers[0]) {
            if let Some(DeviceHints::Implicit(s)) = h.get("x/dev") {
                check_overrides(s.as_ref(), machine);
            }
        }
    }
}

#[test]
fn restore_and_already_assigned() {
    let t = machine(1, 4, 1, 1);
    let cfg = config(
        "",
        StaticPolicyOptions::default(),
        TmPolicy::BestEffort,
        TmScope::Container,
    );
    let mut a = NodeAdmitter::new(t.clone(), &cfg).unwrap();
    let p = pod("p", vec![], vec![container("main", 2, &[])]);
    let first = a.admit(&p);
    let saved = a.cpu_state().clone();
    let mut b = NodeAdmitter::new(t, &cfg).unwrap();
    b.restore(saved).unwrap();
    // Re-admitting after a restart keeps the CPUs the container had.
    assert_eq!(cpus(&b.admit(&p)), cpus(&first));
    let _ = BTreeMap::<u8, u8>::new();
}

#[test]
fn explained_admission_records_the_providers_and_changes_nothing() {
    use nodetopo_engine::admission::explain::HintList;
    let t = machine(2, 4, 1, 1);
    let cfg = config(
        "",
        StaticPolicyOptions::default(),
        TmPolicy::Restricted,
        TmScope::Container,
    );
    let mut plain = NodeAdmitter::new(t.clone(), &cfg).unwrap();
    let mut traced = NodeAdmitter::new(t, &cfg).unwrap();
    let first = pod("first", vec![], vec![container("main", 3, &[])]);
    let two = pod(
        "two",
        vec![],
        vec![container("a", 2, &[]), container("b", 3, &[])],
    );
    plain.admit(&first);
    traced.admit(&first);
    let expected = plain.admit(&two);
    // Container b is merged after a took 2 CPUs of node 1: node 0 has 1 CPU left, node 1 has
    // 2, so only both nodes together fit 3 CPUs, a non-preferred hint restricted refuses.
    let (got, seen) = traced.admit_explained(&two, "b");
    assert_eq!(got, expected, "recording does not change the admission");
    assert_eq!(traced.pools(), plain.pools());
    let e = seen.expect("a merge ran for b");
    assert_eq!(e.container, "b");
    assert_eq!(e.providers[0].provider, "cpu");
    let (resource, list) = &e.providers[0].resources[0];
    assert_eq!(resource, "cpu");
    let HintList::Listed(hints) = list else {
        panic!("explicit CPU hints: {list:?}")
    };
    let shown: Vec<(Vec<usize>, bool)> = hints
        .iter()
        .map(|h| {
            (
                h.affinity.map(|m| m.ids().collect()).unwrap_or_default(),
                h.preferred,
            )
        })
        .collect();
    assert_eq!(shown, vec![(vec![0, 1], false)]);
    let merged = e.merged.expect("the merge itself succeeds");
    assert!(!merged.admit);
    assert_eq!(got.rejections[0].reason, "TopologyAffinityError");
    // No merge for a container the pod does not have, nor under policy none.
    let mut none = NodeAdmitter::new(
        machine(2, 4, 1, 1),
        &config(
            "",
            StaticPolicyOptions::default(),
            TmPolicy::None,
            TmScope::Container,
        ),
    )
    .unwrap();
    assert!(none.admit_explained(&first, "main").1.is_none());
    assert!(traced
        .admit_explained(&pod("x", vec![], vec![container("m", 1, &[])]), "nope")
        .1
        .is_none());
}

/// Issue 28's example (kubelet v1.37.2, oracle-checked): preset xeon-8490h-2p-snc2 (4 NUMA
/// nodes of 60 CPUs), one `example.com/nic` on each node, best-effort, a container with 80
/// CPUs and `example.com/nic: "0"`. The device manager keeps the zero request, so its hints
/// are every mask with single nodes preferred; the CPU manager's narrowest masks have two
/// nodes; the merged hint is a two-node mask, not preferred (before the fix: `{0,1}`
/// preferred, the zero request dropped). Under single-numa-node the pod is rejected, and
/// restricted rejects it too (no preferred hint).
#[test]
fn zero_device_request_still_gives_hints() {
    let topology = nodetopo_engine::presets::build("xeon-8490h-2p-snc2").unwrap();
    let ids: Vec<usize> = topology.numa_nodes().iter().map(|n| n.id).collect();
    assert_eq!(ids, [0, 1, 2, 3]);
    let devices: Vec<DeviceSpec> = ids
        .iter()
        .map(|n| DeviceSpec {
            resource: "example.com/nic".into(),
            id: format!("nic{n}"),
            numa_nodes: vec![*n],
            healthy: true,
        })
        .collect();
    let p = pod(
        "big",
        vec![],
        vec![container("main", 80, &[("example.com/nic", 0)])],
    );
    for (policy, admitted) in [
        (TmPolicy::BestEffort, true),
        (TmPolicy::Restricted, false),
        (TmPolicy::SingleNumaNode, false),
    ] {
        let mut cfg = config(
            "0",
            StaticPolicyOptions::default(),
            policy,
            TmScope::Container,
        );
        cfg.devices = devices.clone();
        let mut a = NodeAdmitter::new(topology.clone(), &cfg).unwrap();
        let r = a.admit(&p);
        assert_eq!(r.admitted(), admitted, "{policy:?}: {r:?}");
        if admitted {
            let h = a.hint(&p.uid, "main").unwrap();
            assert_eq!(h.affinity.unwrap().count(), 2, "{policy:?}: {h:?}");
            assert!(!h.preferred, "{policy:?}: {h:?}");
            // Nothing allocated for a zero request.
            assert!(a.devices().allocated(&p.uid, "main").is_none());
        } else {
            assert_eq!(r.rejections[0].reason, "TopologyAffinityError");
        }
    }
}

/// A resource whose plugin lists no healthy device is still a device-plugin resource: the
/// kubelet refuses a container asking for it, even for 0 (`devicesToAllocate` checks for a
/// healthy device before the request size); a zero request of a resource with healthy
/// devices allocates nothing.
#[test]
fn resource_without_healthy_devices_refuses_even_zero() {
    let t = machine(2, 4, 1, 1);
    let mut cfg = config(
        "0",
        StaticPolicyOptions::default(),
        TmPolicy::BestEffort,
        TmScope::Container,
    );
    cfg.device_resources = vec!["example.com/empty".into()];
    cfg.devices = vec![
        DeviceSpec {
            resource: "example.com/sick".into(),
            id: "s0".into(),
            numa_nodes: vec![0],
            healthy: false,
        },
        DeviceSpec {
            resource: "example.com/ok".into(),
            id: "k0".into(),
            numa_nodes: vec![1],
            healthy: true,
        },
    ];
    let mut a = NodeAdmitter::new(t, &cfg).unwrap();
    for res in ["example.com/empty", "example.com/sick"] {
        let p = pod(res, vec![], vec![container("main", 1, &[(res, 0)])]);
        let r = a.admit(&p);
        assert!(!r.admitted());
        assert_eq!(r.rejections[0].reason, "UnexpectedAdmissionError");
        assert_eq!(
            r.rejections[0].message,
            format!("Allocate failed due to no healthy devices present; cannot allocate unhealthy devices {res}, which is unexpected")
        );
    }
    let p = pod(
        "ok",
        vec![],
        vec![container("main", 1, &[("example.com/ok", 0)])],
    );
    assert!(a.admit(&p).admitted());
    assert_eq!(a.devices().free("example.com/ok").len(), 1);
    // An unknown resource is no device-plugin resource: ignored.
    let p = pod(
        "other",
        vec![],
        vec![container("main", 1, &[("example.com/none", 3)])],
    );
    assert!(a.admit(&p).admitted());
}

/// A rejected pod admitted again under the same UID (kubelet v1.37.2, found by the oracle's
/// `retry`): the kubelet keeps the CPUs and devices the pod's regular init container got
/// in the failed attempt as reusable (`cpusToReuse`, `devicesToReuse` are dropped only when
/// another pod allocates), so the second attempt's init container is steered to them.
/// Before the fix the engine forgot them on rejection.
#[test]
fn second_attempt_of_a_rejected_pod_reuses_the_first_attempts_init_resources() {
    let t = machine(2, 4, 1, 1);
    let mut cfg = config(
        "0",
        StaticPolicyOptions::default(),
        TmPolicy::SingleNumaNode,
        TmScope::Container,
    );
    cfg.devices = (0..2)
        .map(|n| DeviceSpec {
            resource: "x/dev".into(),
            id: format!("d{n}"),
            numa_nodes: vec![n],
            healthy: true,
        })
        .collect();
    let mut a = NodeAdmitter::new(t, &cfg).unwrap();
    // init takes 2 CPUs and d0 on node 0 (the hints prefer the lowest node); the app
    // container asks for 5 CPUs, more than a node has: rejected.
    let init = container("init", 2, &[("x/dev", 1)]);
    let p = pod("p", vec![init], vec![container("app", 5, &[])]);
    let r = a.admit(&p);
    assert!(!r.admitted());
    assert_eq!(a.devices().free("x/dev").len(), 2);
    let cpus_before = a.cpu_policy().unwrap().reusable(&p.uid);
    assert_eq!(cpus_before.to_string(), "1-2");
    // The second attempt: the init container's hints must contain node 0 (its reusable CPUs
    // and device), as the kubelet's do.
    let policy = a.cpu_policy().unwrap();
    let hints = policy
        .container_hints(a.cpu_state(), &p, &p.init_containers[0])
        .unwrap();
    assert!(!hints.is_empty());
    assert!(
        hints.iter().all(|h| h.affinity.unwrap().is_set(0)),
        "{hints:?}"
    );
    let dev = a
        .devices()
        .container_hints(&p, &p.init_containers[0])
        .unwrap();
    match &dev["x/dev"] {
        DeviceHints::Implicit(s) => {
            assert!(s
                .materialize()
                .iter()
                .all(|h| h.affinity.unwrap().is_set(0)));
        }
        other => panic!("{other:?}"),
    }
    // A second attempt is admitted the same way (rejected again here), and another pod's
    // allocation drops the bookkeeping.
    let q = pod("q", vec![], vec![container("main", 1, &[])]);
    assert!(a.admit(&q).admitted());
    assert!(a.cpu_policy().unwrap().reusable(&p.uid).is_empty());
}

/// The device hints a container gets as a list (panics on "don't care" or no request).
fn device_hint_list(m: &DeviceManager, p: &Pod, c: &Container, res: &str) -> Vec<TopologyHint> {
    match m.container_hints(p, c).and_then(|mut h| h.remove(res)) {
        Some(DeviceHints::Implicit(s)) => s.materialize(),
        Some(DeviceHints::Explicit(l)) => l,
        other => panic!("{res}: {other:?}"),
    }
}

fn nodes_of(hints: &[TopologyHint]) -> Vec<Vec<usize>> {
    hints
        .iter()
        .map(|h| h.affinity.map(|m| m.ids().collect()).unwrap_or_default())
        .collect()
}

/// Oracle divergence `0x18ec670377080f57/236` (kubelet v1.37.2 `ManagerImpl.Allocate`): the
/// device manager's `Allocate` runs for every container of every admitted pod, devices or
/// not, and first drops every other pod's `devicesToReuse`. A rejected pod whose init
/// container had taken a device on node 0 is tried again after another pod's admission:
/// when that pod asks for no device (or is an admitted pod admitted again), the kubelet has
/// forgotten the reusable device, so the second attempt's init container is not tied to
/// node 0. The engine dropped the bookkeeping only when a container with device requests
/// got new devices (before the fix: every row kept node 0).
#[test]
fn any_other_pods_allocation_drops_a_rejected_pods_reusable_devices() {
    let t = machine(2, 4, 1, 1);
    let mut cfg = config(
        "0",
        StaticPolicyOptions::default(),
        TmPolicy::SingleNumaNode,
        TmScope::Container,
    );
    cfg.devices = (0..2)
        .map(|n| DeviceSpec {
            resource: "x/dev".into(),
            id: format!("d{n}"),
            numa_nodes: vec![n],
            healthy: true,
        })
        .collect();
    let init = container("init", 2, &[("x/dev", 1)]);
    let p = pod("p", vec![init], vec![container("app", 5, &[])]);
    let other = pod("o", vec![], vec![container("main", 1, &[])]);
    // (what happens between the two attempts, whether the reusable device stays)
    type Step = fn(&mut NodeAdmitter, &Pod);
    let rows: [(&str, Step, bool); 5] = [
        ("nothing", |_, _| {}, true),
        (
            "a pod without devices",
            |a, o| assert!(a.admit(o).admitted()),
            false,
        ),
        (
            "an admitted pod without devices admitted again",
            |a, o| {
                assert!(a.admit(o).admitted());
                assert!(a.admit(o).admitted());
            },
            false,
        ),
        (
            "a pod refused by the topology manager (no Allocate)",
            |a, _| {
                let big = pod("big", vec![], vec![container("main", 9, &[])]);
                assert!(!a.admit(&big).admitted());
            },
            true,
        ),
        (
            "a removal (no allocation)",
            |a, o| a.remove_pod(&o.uid),
            true,
        ),
    ];
    for (what, step, kept) in rows {
        let mut a = NodeAdmitter::new(t.clone(), &cfg).unwrap();
        assert!(!a.admit(&p).admitted(), "{what}");
        step(&mut a, &other);
        let hints = device_hint_list(a.devices(), &p, &p.init_containers[0], "x/dev");
        let want: Vec<Vec<usize>> = if kept {
            vec![vec![0], vec![0, 1]]
        } else {
            vec![vec![0], vec![1], vec![0, 1]]
        };
        assert_eq!(nodes_of(&hints), want, "{what}");
    }
}

/// Oracle divergence (kubelet v1.37.2, a `readmit` whose app container asks
/// `example.com/dev0: "0"` beside another device resource): admitting an admitted pod
/// again runs `Allocate` for every container; a regular init container that already holds
/// devices makes them reusable again (`addContainerAllocatedResources`), so the app
/// container's zero request of that resource gets hints tied to the init container's node.
/// The engine skipped containers that already held devices, so after another pod's
/// allocation the pod's reusable devices were gone (before the fix: `{0}`, `{1}`, `{0,1}`).
#[test]
fn readmission_makes_the_init_containers_devices_reusable_again() {
    let dev = |r: &str, id: &str, n: usize| DeviceSpec {
        resource: r.into(),
        id: id.into(),
        numa_nodes: vec![n],
        healthy: true,
    };
    let devices = [
        dev("x/a", "a0", 0),
        dev("x/a", "a1", 1),
        dev("x/b", "b0", 0),
        dev("x/b", "b1", 1),
    ];
    let init = container("init", 1, &[("x/a", 1)]);
    let app = container("app", 1, &[("x/a", 0), ("x/b", 1)]);
    let p = pod("p", vec![init], vec![app]);
    let q = pod("q", vec![], vec![container("main", 1, &[("x/b", 1)])]);
    let on = |n: usize| TopologyHint {
        affinity: Some(NumaMask::from_bits(1 << n)),
        preferred: true,
    };
    // (pods allocated between the admission and the re-admission, dev hints of the app's
    // zero request on re-admission)
    let rows: [(&[&Pod], Vec<Vec<usize>>); 2] = [
        (&[], vec![vec![0], vec![0, 1]]),
        (&[&q], vec![vec![0], vec![0, 1]]),
    ];
    for (between, want) in rows {
        let mut m = DeviceManager::new(&devices, &[0, 1]).unwrap();
        m.allocate(&p, &p.init_containers[0], Some(&on(0))).unwrap();
        m.allocate(&p, &p.containers[0], Some(&on(1))).unwrap();
        assert_eq!(m.allocated(&p.uid, "app").unwrap()["x/b"].len(), 1);
        assert!(m.allocated(&p.uid, "app").unwrap().get("x/a").is_none());
        for o in between {
            m.allocate(o, &o.containers[0], Some(&on(0))).unwrap();
        }
        // Re-admission: the init container keeps its device and makes it reusable.
        m.allocate(&p, &p.init_containers[0], Some(&on(0))).unwrap();
        let hints = device_hint_list(&m, &p, &p.containers[0], "x/a");
        assert_eq!(nodes_of(&hints), want, "between: {}", between.len());
        // The devices the app holds regenerate their own hints.
        let b = device_hint_list(&m, &p, &p.containers[0], "x/b");
        assert_eq!(nodes_of(&b), vec![vec![1], vec![0, 1]]);
        m.allocate(&p, &p.containers[0], Some(&on(0))).unwrap();
        assert_eq!(m.allocated(&p.uid, "app").unwrap()["x/b"].len(), 1);
    }
}
