//! Differential tests: the product merge (`topologymanager::merge`) against the literal
//! kubelet enumeration (`topologymanager::reference::merge`), bit for bit, for every policy,
//! both scopes and every option.
//!
//! * exhaustive: every combination of small hint lists on 1- and 2-node machines;
//! * random explicit hint lists on machines of up to 8 NUMA nodes (non-contiguous ids,
//!   asymmetric distances, nil/empty affinities, masks naming absent nodes);
//! * random implicit sources on machines of up to 10 NUMA nodes: kubelet-like monotone
//!   capacity sources (CPU, devices), the memory manager's non-monotone NUMA-group rule, and
//!   arbitrary hint sets; each source's optional trait methods are also checked against
//!   their `materialize`-derived defaults.
//!
//! Case counts: at least 100,000 random cases under `--release` (CI); a tenth in debug
//! builds. `NODETOPO_DIFF_SCALE` multiplies them, `NODETOPO_DIFF_SEED` changes the seed.

mod tm_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use nodetopo_engine::topologymanager::{
    merge, HintSource, NumaInfo, NumaMask, ProviderHints, ResourceHints, TmError, TmOptions,
    TmPolicy, TmScope, TopologyHint,
};
use tm_support::*;

// ---------------------------------------------------------------- exhaustive, tiny machines

#[test]
fn exhaustive_tiny_machines() {
    let mut cases = 0u64;
    for (ids, extra) in [(vec![0usize], vec![1usize]), (vec![0, 1], vec![2])] {
        let machine_mask = NumaMask::new(ids.iter().copied()).unwrap();
        // Affinities: nil, empty, every in-machine mask, an outside node, a partial overlap.
        let mut affinities: Vec<Option<NumaMask>> = vec![None, Some(NumaMask::EMPTY)];
        let all = NumaMask::new(ids.iter().copied().chain(extra.iter().copied())).unwrap();
        for bits in 1..=all.bits() {
            let m = NumaMask::from_bits(bits);
            if m.is_subset_of(all) {
                affinities.push(Some(m));
            }
        }
        let hints: Vec<TopologyHint> = affinities
            .iter()
            .flat_map(|a| {
                [true, false].map(|preferred| TopologyHint {
                    affinity: *a,
                    preferred,
                })
            })
            .collect();
        // Provider alphabet: nil map, empty map, nil list, empty list, every 1- and
        // (unordered) 2-hint list.
        let mut alphabet: Vec<ProviderHints> = vec![
            None,
            Some(BTreeMap::new()),
            one("r", ResourceHints::DontCare),
            one("r", ResourceHints::Explicit(vec![])),
        ];
        for (i, a) in hints.iter().enumerate() {
            alphabet.push(one("r", ResourceHints::Explicit(vec![*a])));
            if machine_mask.count() == 1 {
                for b in &hints[i..] {
                    alphabet.push(one("r", ResourceHints::Explicit(vec![*a, *b])));
                }
            }
        }
        if machine_mask.count() == 2 {
            // Two-hint lists over the in-machine and nil affinities only (keeps it tractable).
            let small: Vec<TopologyHint> = hints
                .iter()
                .copied()
                .filter(|h| {
                    h.affinity
                        .is_none_or(|a| !a.is_empty() && a.is_subset_of(machine_mask))
                })
                .collect();
            for (i, a) in small.iter().enumerate() {
                for b in &small[i + 1..] {
                    alphabet.push(one("r", ResourceHints::Explicit(vec![*a, *b])));
                }
            }
        }
        let mut rng = Rng(seed(1));
        for prefer_closest in [false, true] {
            let numa = machine(&mut rng, &ids, prefer_closest);
            let opts = TmOptions {
                prefer_closest_numa_nodes: prefer_closest,
                ..TmOptions::default()
            };
            for p in POLICIES {
                check(p, &numa, &opts, &[]);
                for a in &alphabet {
                    for b in &alphabet {
                        check(p, &numa, &opts, &[a.clone(), b.clone()]);
                        cases += 1;
                    }
                }
            }
        }
        if ids.len() == 1 {
            // Three providers on the one-node machine.
            let numa = machine(&mut rng, &ids, false);
            for p in POLICIES {
                for a in &alphabet {
                    for b in &alphabet {
                        for c in alphabet.iter().step_by(3) {
                            check(
                                p,
                                &numa,
                                &TmOptions::default(),
                                &[a.clone(), b.clone(), c.clone()],
                            );
                            cases += 1;
                        }
                    }
                }
            }
        }
    }
    println!("exhaustive: {cases} merges");
    assert!(cases > 50_000);
}

// ------------------------------------------------------------- random explicit hint lists

#[test]
fn random_explicit_lists_up_to_8_nodes() {
    let mut rng = Rng(seed(2));
    let total = 8_000 * scale();
    let mut preferred = 0;
    for _ in 0..total {
        let ids = random_ids(&mut rng, 8);
        let prefer_closest = rng.chance(50);
        let numa = machine(&mut rng, &ids, prefer_closest);
        let m = numa.default_affinity();
        let opts = TmOptions {
            prefer_closest_numa_nodes: prefer_closest,
            ..TmOptions::default()
        };
        let mut providers = Vec::new();
        for _ in 0..rng.below(5) {
            providers.push(match rng.below(20) {
                0 => None,
                1 => Some(BTreeMap::new()),
                _ => {
                    let mut r = BTreeMap::new();
                    for k in 0..1 + rng.below(3) {
                        let hints = match rng.below(12) {
                            0 => ResourceHints::DontCare,
                            1 => ResourceHints::Explicit(vec![]),
                            _ => ResourceHints::Explicit(
                                (0..1 + rng.below(6))
                                    .map(|_| random_hint(&mut rng, m))
                                    .collect(),
                            ),
                        };
                        r.insert(format!("r{k}"), hints);
                    }
                    Some(r)
                }
            });
        }
        let policy = POLICIES[1 + rng.below(3) as usize];
        let policy = if rng.chance(2) {
            TmPolicy::None
        } else {
            policy
        };
        if check(policy, &numa, &opts, &providers).hint.preferred {
            preferred += 1;
        }
    }
    println!("random explicit: {total} cases, {preferred} preferred results");
    // Both outcomes must be well represented or the test proves little.
    assert!(preferred > total / 10 && preferred < total * 9 / 10);
}

// ------------------------------------------------------------ random implicit sources

#[test]
fn random_implicit_sources_up_to_10_nodes() {
    let mut rng = Rng(seed(3));
    let total = 2_500 * scale();
    let (mut done, mut preferred, mut by_nodes) = (0u64, 0u64, [0u64; 11]);
    while done < total {
        let ids = random_ids(&mut rng, 10);
        let prefer_closest = rng.chance(50);
        let numa = machine(&mut rng, &ids, prefer_closest);
        let m = numa.default_affinity();
        let opts = TmOptions {
            prefer_closest_numa_nodes: prefer_closest,
            ..TmOptions::default()
        };
        // Per scope: container = one container's requests; pod = the sum over 1-3 containers
        // (what the providers' pod-level hints aggregate).
        let scope = if rng.chance(50) {
            TmScope::Container
        } else {
            TmScope::Pod
        };
        let containers = if scope == TmScope::Pod {
            1 + rng.below(3)
        } else {
            1
        };
        let req = |rng: &mut Rng, max: u64| -> Vec<u64> {
            (0..containers).map(|_| 1 + rng.below(max)).collect()
        };
        let mut sources: Vec<(String, Arc<dyn HintSource>)> = Vec::new();
        let cpu_max = if rng.chance(70) {
            6
        } else {
            3 * ids.len() as u64
        };
        let cpu_req = req(&mut rng, cpu_max);
        sources.push(("cpu".into(), Arc::new(capacity(&mut rng, &ids, &cpu_req))));
        if rng.chance(70) {
            let mem_max = if rng.chance(70) {
                5
            } else {
                2 * ids.len() as u64
            };
            let r: u64 = req(&mut rng, mem_max).iter().sum();
            let g = Arc::new(groups(&mut rng, &ids, r));
            sources.push(("memory".into(), g.clone()));
            if rng.chance(30) {
                sources.push(("hugepages-2Mi".into(), g));
            }
        }
        if rng.chance(50) {
            let dev_req = req(&mut rng, 4);
            sources.push((
                "example.com/dev".into(),
                Arc::new(capacity(&mut rng, &ids, &dev_req)),
            ));
        }
        if rng.chance(20) {
            sources.push(("arbitrary".into(), Arc::new(arbitrary(&mut rng, m))));
        }
        let mut providers: Vec<ProviderHints> = sources
            .iter()
            .map(|(n, s)| one(n, ResourceHints::Implicit(s.clone())))
            .collect();
        if rng.chance(25) {
            let hints = (0..1 + rng.below(4))
                .map(|_| random_hint(&mut rng, m))
                .collect();
            providers.insert(
                rng.below(providers.len() as u64 + 1) as usize,
                one("x", ResourceHints::Explicit(hints)),
            );
        }
        if product_len(&providers, m) > 40_000 {
            continue; // the reference could not enumerate it in time
        }
        for (_, s) in &sources {
            check_source_contract(s.as_ref(), m);
        }
        let policy = POLICIES[1 + rng.below(3) as usize];
        if check(policy, &numa, &opts, &providers).hint.preferred {
            preferred += 1;
        }
        done += 1;
        by_nodes[ids.len()] += 1;
    }
    println!(
        "random implicit: {done} cases, {preferred} preferred results, by node count {by_nodes:?}"
    );
    assert!(preferred > done / 10 && preferred < done * 9 / 10);
    assert!(
        by_nodes[9] + by_nodes[10] > done / 50,
        "too few large machines: {by_nodes:?}"
    );
}

// ------------------------------------------------------------------------- bad input

#[test]
fn bad_input_gives_clear_errors_never_panics() {
    // Hints naming absent nodes are clipped like the kubelet: {5} on a 2-node machine
    // merges to an empty mask, which is skipped, so the result is the fallback.
    let numa = NumaInfo::new(vec![(0, None), (1, None)], false).unwrap();
    let outside = one(
        "r",
        ResourceHints::Explicit(vec![TopologyHint {
            affinity: Some(NumaMask::new([5]).unwrap()),
            preferred: true,
        }]),
    );
    let r = check(
        TmPolicy::Restricted,
        &numa,
        &TmOptions::default(),
        &[outside],
    );
    assert_eq!(r.hint.affinity, Some(NumaMask::new([0, 1]).unwrap()));
    assert!(!r.hint.preferred && !r.admit);

    let e = NumaInfo::new(vec![], false).unwrap_err();
    assert_eq!(e, TmError::NoNumaNodes);
    assert!(e.to_string().contains("no NUMA nodes"));
    let e =
        NumaInfo::new(vec![(0, Some(vec![10, 11])), (2, Some(vec![11, 10]))], true).unwrap_err();
    assert!(e.to_string().contains("NUMA node 0 has 2 distances"), "{e}");
    let e = NumaInfo::new(vec![(0, Some(vec![10, 11])), (1, None)], true).unwrap_err();
    assert!(
        e.to_string()
            .contains("error getting NUMA distances from cadvisor"),
        "{e}"
    );
    let e = NumaInfo::new(vec![(64, None)], false).unwrap_err();
    assert!(e.to_string().contains("64"), "{e}");
    let e = NumaInfo::new(vec![(3, None), (3, None)], false).unwrap_err();
    assert!(e.to_string().contains("listed twice"), "{e}");
    // Asymmetric matrices are legal input and used as given.
    let asym = NumaInfo::new(vec![(0, Some(vec![10, 11])), (1, Some(vec![13, 10]))], true).unwrap();
    assert_eq!(asym.average_distance(NumaMask::new([0, 1]).unwrap()), 11.0);
}

// ------------------------------------------------------------ beyond the reference's reach

/// A 64-node case the reference cannot enumerate, checked against the same structure on 10
/// nodes (where it can): only the two highest nodes together have the CPUs, only node 5 has
/// a free device. No preferred hint exists; T = 2, and {0,1} is achievable as
/// CPU {0,1,hi,hi'} ∧ device {0,1,5}, so the kubelet picks {0,1}, non-preferred.
#[test]
fn large_machine_matches_the_small_analogue() {
    for n in [10usize, 64] {
        let ids: Vec<usize> = (0..n).collect();
        let numa = NumaInfo::new(ids.iter().map(|&i| (i, None)).collect(), false).unwrap();
        let mut free = vec![0u64; n];
        free[n - 2] = 3;
        free[n - 1] = 3;
        let cpu = Capacity {
            free: ids.iter().map(|&i| (i, free[i])).collect(),
            total: ids.iter().map(|&i| (i, 4)).collect(),
            request: 6,
            wide_preferred: false,
        };
        let mut dev = vec![0u64; n];
        dev[5] = 1;
        let device = Capacity {
            free: ids.iter().map(|&i| (i, dev[i])).collect(),
            total: ids.iter().map(|&i| (i, 1)).collect(),
            request: 1,
            wide_preferred: false,
        };
        let providers = vec![
            one("cpu", ResourceHints::Implicit(Arc::new(cpu))),
            one("dev", ResourceHints::Implicit(Arc::new(device))),
        ];
        let opts = TmOptions {
            max_allowable_numa_nodes: 64,
            ..TmOptions::default()
        };
        let r = if n == 10 {
            check(TmPolicy::BestEffort, &numa, &opts, &providers)
        } else {
            merge(TmPolicy::BestEffort, &numa, &opts, &providers).unwrap()
        };
        assert_eq!(
            r.hint.affinity,
            Some(NumaMask::new([0, 1]).unwrap()),
            "n = {n}"
        );
        assert!(!r.hint.preferred && r.admit);
        let r = merge(TmPolicy::Restricted, &numa, &opts, &providers).unwrap();
        assert!(!r.admit);
        let r = merge(TmPolicy::SingleNumaNode, &numa, &opts, &providers).unwrap();
        assert_eq!(
            (r.hint.affinity, r.hint.preferred, r.admit),
            (None, false, false)
        );
    }
}
