//! Property tests of the static CPU policy over random machines and request sequences.
//!
//! Invariants: no CPU handed out twice, reserved CPUs never handed out, the state always
//! accounts for every CPU exactly once, release restores the pool exactly, full-pcpus-only
//! never splits a core, and results do not depend on call history where the kubelet's do not
//! (a fresh policy on a serialised-and-restored state decides exactly as the long-lived one;
//! the take functions are pure).
//!
//! Case counts stay CI-sized; raise them with `PROPTEST_CASES=...`.

use std::collections::BTreeSet;

use nodetopo_engine::cpumanager::options::{CPU_OPTIONS, INCOMPATIBLE};
use nodetopo_engine::cpumanager::{
    take_by_topology_numa_distributed, take_by_topology_numa_packed, CpuSortingStrategy, CpuState,
    ReservedCpus, StaticPolicy, StaticPolicyOptions, TakeError,
};
use nodetopo_engine::topologymanager::{NumaMask, TopologyHint};
use nodetopo_engine::{Container, CpuInfo, CpuSet, CpuTopology, NumaNode, Pod, ResourceList};
use proptest::prelude::*;

/// 96 cases unless `PROPTEST_CASES` says otherwise.
fn ci_cases() -> u32 {
    match std::env::var_os("PROPTEST_CASES") {
        Some(_) => ProptestConfig::default().cases,
        None => 96,
    }
}

/// Shape of a generated machine.
#[derive(Debug, Clone)]
struct Shape {
    sockets: usize,
    numa_per_socket: usize,
    uncore_per_numa: usize,
    cores_per_uncore: usize,
    threads: usize,
    /// Linux-style sibling ids (`c`, `c + cores`) instead of adjacent ids.
    spread_siblings: bool,
}

fn build(s: &Shape) -> CpuTopology {
    let cores = s.sockets * s.numa_per_socket * s.uncore_per_numa * s.cores_per_uncore;
    let mut cpus = Vec::new();
    let mut core_idx = 0;
    for socket in 0..s.sockets {
        for n in 0..s.numa_per_socket {
            let numa = socket * s.numa_per_socket + n;
            for u in 0..s.uncore_per_numa {
                let uncore = numa * s.uncore_per_numa + u;
                for _ in 0..s.cores_per_uncore {
                    let ids: Vec<usize> = (0..s.threads)
                        .map(|t| {
                            if s.spread_siblings {
                                core_idx + t * cores
                            } else {
                                core_idx * s.threads + t
                            }
                        })
                        .collect();
                    let core = *ids.iter().min().unwrap();
                    for id in ids {
                        cpus.push(CpuInfo {
                            id,
                            core,
                            socket,
                            numa,
                            uncore,
                        });
                    }
                    core_idx += 1;
                }
            }
        }
    }
    let nodes = (0..s.sockets * s.numa_per_socket)
        .map(|id| NumaNode {
            id,
            cpus: cpus.iter().filter(|c| c.numa == id).map(|c| c.id).collect(),
            distances: None,
            memory_bytes: None,
            hugepages: vec![],
        })
        .collect();
    CpuTopology::with_derived_counts(cpus, nodes, vec![]).unwrap()
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        1..=2usize,
        1..=2usize,
        1..=3usize,
        1..=4usize,
        1..=2usize,
        any::<bool>(),
    )
        .prop_map(
            |(sockets, numa_per_socket, uncore_per_numa, cores_per_uncore, threads, spread)| {
                Shape {
                    sockets,
                    numa_per_socket,
                    uncore_per_numa,
                    cores_per_uncore,
                    threads,
                    spread_siblings: spread,
                }
            },
        )
}

/// Valid option sets only (the incompatible ones are rejected up front, tested elsewhere):
/// one random switch per option of the engine's table, then of each incompatible pair the
/// first switched off, so a new option is drawn here without editing this test.
fn options() -> impl Strategy<Value = StaticPolicyOptions> {
    prop::collection::vec(any::<bool>(), CPU_OPTIONS.len()).prop_map(|on| {
        let mut set: BTreeSet<&str> = CPU_OPTIONS
            .iter()
            .zip(on)
            .filter_map(|(o, on)| on.then_some(o.name))
            .collect();
        for (a, b) in INCOMPATIBLE {
            if set.contains(b) {
                set.remove(a);
            }
        }
        let map = set
            .into_iter()
            .map(|n| (n.to_string(), "true".to_string()))
            .collect();
        StaticPolicyOptions::from_map(&map).expect("a compatible option set")
    })
}

#[derive(Debug, Clone)]
enum Op {
    /// Allocate a new single-container pod of this many CPUs, maybe with a NUMA hint.
    Allocate(usize, Option<u8>),
    /// Remove the i-th (mod live count) live container.
    Remove(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (1..=8usize, prop::option::of(any::<u8>())).prop_map(|(n, h)| Op::Allocate(n, h)),
            1 => any::<usize>().prop_map(Op::Remove),
        ],
        1..20,
    )
}

fn pod(uid: &str, n: usize) -> Pod {
    let r = ResourceList {
        cpu_millis: Some(n as u64 * 1000),
        memory_bytes: Some(1 << 30),
        ..Default::default()
    };
    Pod {
        namespace: "default".into(),
        name: uid.into(),
        uid: uid.into(),
        containers: vec![Container {
            name: "main".into(),
            requests: r.clone(),
            limits: r,
            restartable: false,
        }],
        ..Default::default()
    }
}

fn hint_for(t: &CpuTopology, bits: u8) -> TopologyHint {
    let nodes = t.numa_nodes().len();
    let mask = NumaMask::from_bits(bits as u64 & ((1u64 << nodes) - 1));
    TopologyHint {
        affinity: if mask.is_empty() { None } else { Some(mask) },
        preferred: true,
    }
}

fn check_invariants(p: &StaticPolicy, st: &CpuState, t: &CpuTopology) -> Result<(), TestCaseError> {
    st.check(t)
        .map_err(|e| TestCaseError::fail(format!("state inconsistent: {e}")))?;
    let assigned = st.assigned();
    prop_assert!(
        assigned.is_disjoint(p.reserved()),
        "reserved {} handed out in {}",
        p.reserved(),
        assigned
    );
    let mut all = st.default_cpuset.union(&assigned);
    if p.options().strict_cpu_reservation {
        all = all.union(p.reserved());
    }
    prop_assert_eq!(all, t.all_cpus(), "every CPU accounted for");
    // The kubelet keeps whole cores under full-pcpus-only only while the reserved CPUs are
    // whole cores: its hint-aligned first take runs on `default - reserved`, which still holds
    // the siblings of a lone reserved CPU (see `full_pcpus_only_splits_with_partial_reserved_core`).
    if p.options().full_pcpus_only && p.reserved_physical() == p.reserved() {
        for cs in st.assignments.values().flat_map(|c| c.values()) {
            for id in cs.iter() {
                let core = t.cpu(id).unwrap().core;
                let siblings = t.cpus_where(|c| c.core == core);
                prop_assert!(
                    siblings.is_subset(cs),
                    "full-pcpus-only split core {} in {}",
                    core,
                    cs
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: ci_cases(), ..ProptestConfig::default() })]

    #[test]
    fn static_policy_invariants(s in shape(), opts in options(), reserved in 0..=3usize, ops in ops()) {
        let t = build(&s);
        let reserved = reserved.min(t.cpus().len() - 1);
        let p = match StaticPolicy::new(t.clone(), ReservedCpus::Count(reserved), opts) {
            Ok(p) => p,
            // align-by-socket is rejected on machines with more sockets than NUMA nodes.
            Err(e) => { prop_assert!(opts.align_by_socket, "{e}"); return Ok(()); }
        };
        let mut st = CpuState::default();
        p.start(&mut st).unwrap();
        let initial = st.clone();
        let mut live: Vec<String> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            match op {
                Op::Allocate(n, h) => {
                    let uid = format!("pod-{i}");
                    let pd = pod(&uid, *n);
                    let hint = h.map(|b| hint_for(&t, b));
                    // History independence: a fresh policy on a serialised copy of the state
                    // decides exactly the same (no init containers, so no reuse history).
                    let json = serde_json::to_string(&st).unwrap();
                    let mut copy: CpuState = serde_json::from_str(&json).unwrap();
                    prop_assert_eq!(&copy, &st);
                    let fresh = StaticPolicy::new(t.clone(), ReservedCpus::Count(reserved), opts).unwrap();
                    let before = st.clone();
                    let r = p.allocate(&mut st, &pd, &pd.containers[0], hint.as_ref());
                    let r2 = fresh.allocate(&mut copy, &pd, &pd.containers[0], hint.as_ref());
                    prop_assert_eq!(r.clone().map_err(|e| e.to_string()), r2.map_err(|e| e.to_string()));
                    prop_assert_eq!(&st, &copy);
                    match r {
                        Ok(()) => {
                            let got = st.get(&uid, "main").cloned().unwrap();
                            prop_assert_eq!(got.len(), *n, "exactly the request");
                            prop_assert!(got.is_subset(&p.assignable(&before)));
                            // Allocating again changes nothing. (The kubelet runs the
                            // full-pcpus-only checks before its "already assigned" short cut,
                            // so with that option a repeat can fail on a now-smaller pool.)
                            let again = st.clone();
                            if let Err(e) = p.allocate(&mut st, &pd, &pd.containers[0], hint.as_ref()) {
                                prop_assert!(opts.full_pcpus_only && e.reason() == "SMTAlignmentError", "{e}");
                            }
                            prop_assert_eq!(&st, &again);
                            live.push(uid);
                        }
                        Err(_) => prop_assert_eq!(&st, &before, "a failed allocation changes nothing"),
                    }
                }
                Op::Remove(k) => {
                    if !live.is_empty() {
                        let uid = live.remove(k % live.len());
                        let held = st.get(&uid, "main").cloned().unwrap();
                        let before = st.default_cpuset.clone();
                        p.remove_container(&mut st, &uid, "main");
                        prop_assert_eq!(&st.default_cpuset, &before.union(&held));
                    }
                }
            }
            check_invariants(&p, &st, &t)?;
        }
        for uid in live.drain(..) {
            p.remove_container(&mut st, &uid, "main");
        }
        prop_assert_eq!(st, initial, "release restores the pool exactly");
    }

    #[test]
    fn takes_are_pure_and_exact(s in shape(), mask in any::<u64>(), n in 0..=16usize,
                                spread in any::<bool>(), uncore in any::<bool>(), g2 in any::<bool>()) {
        let t = build(&s);
        let avail: CpuSet = t.all_cpus().iter().filter(|id| mask & (1 << (id % 64)) != 0).collect();
        let strategy = if spread { CpuSortingStrategy::Spread } else { CpuSortingStrategy::Packed };
        let a = take_by_topology_numa_packed(&t, &avail, n, strategy, uncore && !spread);
        let b = take_by_topology_numa_packed(&t, &avail, n, strategy, uncore && !spread);
        prop_assert_eq!(&a, &b);
        match a {
            Ok(set) => {
                prop_assert_eq!(set.len(), n);
                prop_assert!(set.is_subset(&avail));
            }
            Err(e) => prop_assert_eq!(e, TakeError::NotEnough { requested: n, available: avail.len() }),
        }
        let g = if g2 { 2 } else { 1 };
        let d = take_by_topology_numa_distributed(&t, &avail, n, g, strategy, false);
        prop_assert_eq!(&d, &take_by_topology_numa_distributed(&t, &avail, n, g, strategy, false));
        match d {
            Ok(set) => {
                prop_assert_eq!(set.len(), n);
                prop_assert!(set.is_subset(&avail));
            }
            Err(TakeError::NotEnough { requested, available }) => {
                prop_assert_eq!((requested, available), (n, avail.len()));
                prop_assert!(n > avail.len());
            }
            // Reproduced kubelet slice aliasing can pick nodes that cannot deliver.
            Err(TakeError::AccountingShort(_) | TakeError::AccountingOver(_)) => {}
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
    }
}

/// The NUMA ids used by a set, for readable failures in the examples below.
fn numas(t: &CpuTopology, s: &CpuSet) -> BTreeSet<usize> {
    t.ids_of(s, |c| c.numa).into_iter().collect()
}

#[test]
fn kep4800_worked_example() {
    // 16 CPUs, no SMT, two uncore caches of 8, reserved 0-1, three 4-CPU containers:
    // the second container fits one uncore cache only with the option.
    let s = Shape {
        sockets: 1,
        numa_per_socket: 1,
        uncore_per_numa: 2,
        cores_per_uncore: 8,
        threads: 1,
        spread_siblings: false,
    };
    let t = build(&s);
    let run = |uncore: bool| {
        let opts = StaticPolicyOptions {
            prefer_align_cpus_by_uncorecache: uncore,
            ..Default::default()
        };
        let p = StaticPolicy::new(
            t.clone(),
            ReservedCpus::Explicit(CpuSet::parse("0-1").unwrap()),
            opts,
        )
        .unwrap();
        let mut st = CpuState::default();
        p.start(&mut st).unwrap();
        (0..3)
            .map(|i| {
                let pd = pod(&format!("c{i}"), 4);
                p.allocate(&mut st, &pd, &pd.containers[0], None).unwrap();
                let got = st.get(&pd.uid, "main").cloned().unwrap();
                t.ids_of(&got, |c| c.uncore).len()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(true)[1], 1, "container 2 inside one uncore cache");
    assert_eq!(
        run(false)[1],
        2,
        "container 2 across two caches without the option"
    );
    assert_eq!(numas(&t, &t.all_cpus()).len(), 1);
}

/// Kubelet behaviour, kept: with full-pcpus-only, a reserved CPU whose sibling is not reserved
/// and a hint on that NUMA node, the aligned first take hands out the sibling, splitting the
/// core (the availability check counts whole free cores, the take does not).
#[test]
fn full_pcpus_only_splits_with_partial_reserved_core() {
    let t = build(&Shape {
        sockets: 1,
        numa_per_socket: 2,
        uncore_per_numa: 2,
        cores_per_uncore: 1,
        threads: 2,
        spread_siblings: false,
    });
    let opts = StaticPolicyOptions {
        full_pcpus_only: true,
        ..Default::default()
    };
    let p = StaticPolicy::new(t.clone(), ReservedCpus::Count(1), opts).unwrap();
    assert_eq!(p.reserved().to_string(), "0");
    let mut st = CpuState::default();
    p.start(&mut st).unwrap();
    let pd = pod("p", 6);
    let hint = TopologyHint {
        affinity: Some(NumaMask::new([0]).unwrap()),
        preferred: true,
    };
    p.allocate(&mut st, &pd, &pd.containers[0], Some(&hint))
        .unwrap();
    let got = st.get("p", "main").unwrap();
    assert!(got.contains(1) && !got.contains(0), "{got}");
    // Without the hint the same request keeps whole cores.
    let mut st = CpuState::default();
    p.start(&mut st).unwrap();
    p.allocate(&mut st, &pd, &pd.containers[0], None).unwrap();
    assert!(!st.get("p", "main").unwrap().contains(1));
}
