//! Differential tests for the merge's former exponential corners, against the literal
//! kubelet enumeration (`reference::merge`), bit for bit:
//!
//! * adversarial explicit lists (N nodes, N providers, provider k lists every mask that
//!   contains its k-th node, none or some preferred, thinned and shuffled), on machines where
//!   the reference can enumerate the cross product, through both ways of combining explicit
//!   lists (pairs and superset sums) and the automatic choice;
//! * the enumeration order does not matter: the reference itself gives the same answer with
//!   providers and hints shuffled (the kubelet's comparison is a strict total order, so the
//!   "first seen wins" rule never decides between distinct merged hints);
//! * prefer-closest with the branch and bound forced at every width, on implicit sources and
//!   distance matrices full of ties;
//! * the work budget: exponential inputs end in `MergeBudgetExceeded` naming their sizes.
//!
//! Case counts scale like `topologymanager_diff` (`NODETOPO_DIFF_SCALE`, `NODETOPO_DIFF_SEED`).

mod tm_support;

use std::sync::Arc;
use std::time::Instant;

use nodetopo_engine::topologymanager::mask::iterate_bit_masks;
use nodetopo_engine::topologymanager::{
    merge, merge_tuned, merge_with_budget, reference, HintSource, MergeResult, NumaInfo, NumaMask,
    ProviderHints, ReachStep, ResourceHints, TmError, TmOptions, TmPolicy, TopologyHint, Tuning,
};
use tm_support::*;

/// Every way the product merge can be steered: the default, and each internal path forced.
fn tunings() -> [Tuning; 3] {
    [
        Tuning::default(),
        Tuning {
            step: ReachStep::Pairs,
            scan_limit: 0,
            ..Tuning::default()
        },
        Tuning {
            step: ReachStep::Table,
            scan_limit: 0,
            ..Tuning::default()
        },
    ]
}

/// The reference's answer, which every tuning of the product must reproduce.
fn check_all(
    policy: TmPolicy,
    numa: &NumaInfo,
    opts: &TmOptions,
    providers: &[ProviderHints],
) -> MergeResult {
    let want = reference::merge(policy, numa, opts, providers);
    for t in tunings() {
        let got = merge_tuned(policy, numa, opts, providers, t);
        assert_eq!(
            got, want,
            "product ({t:?}) != reference\npolicy {policy:?} opts {opts:?}\nmachine {numa:?}\nproviders {providers:#?}"
        );
    }
    want.expect("reference merge")
}

/// A machine whose distances come from a few values only, so many masks tie on average
/// distance and the kubelet's integer tie-break decides.
fn tied_machine(rng: &mut Rng, ids: &[usize], prefer_closest: bool) -> NumaInfo {
    let width = ids.iter().max().map_or(1, |m| m + 1);
    let far = if rng.chance(50) { 11 } else { 21 };
    let nodes = ids
        .iter()
        .map(|&i| {
            let row = (0..width)
                .map(|j| {
                    if i == j {
                        10
                    } else if rng.chance(70) {
                        far
                    } else {
                        far + 10
                    }
                })
                .collect();
            (i, Some(row))
        })
        .collect();
    NumaInfo::new(nodes, prefer_closest).expect("valid machine")
}

/// How an adversarial list is varied.
struct Variant {
    /// Percent of the masks kept.
    keep: u64,
    /// Percent of the hints marked preferred.
    preferred: u64,
    /// Shuffle the list (else the kubelet's `IterateBitMasks` order).
    shuffle: bool,
}

/// Provider k's list: every mask of the machine containing `ids[k]`.
fn adversarial_list(rng: &mut Rng, ids: &[usize], k: usize, v: &Variant) -> Vec<TopologyHint> {
    let mut out = Vec::new();
    iterate_bit_masks(ids, |m| {
        if m.is_set(ids[k]) && rng.chance(v.keep) {
            out.push(TopologyHint {
                affinity: Some(m),
                preferred: rng.chance(v.preferred),
            });
        }
    });
    if out.is_empty() {
        out.push(TopologyHint {
            affinity: Some(NumaMask::new([ids[k]]).expect("id below 64")),
            preferred: false,
        });
    }
    if v.shuffle {
        shuffle(rng, &mut out);
    }
    out
}

fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

/// The pure adversarial class: N providers, provider k lists every mask containing node k,
/// none preferred.
fn adversarial(ids: &[usize]) -> Vec<ProviderHints> {
    let mut rng = Rng(0);
    let v = Variant {
        keep: 100,
        preferred: 0,
        shuffle: false,
    };
    (0..ids.len())
        .map(|k| {
            one(
                &format!("r{k}"),
                ResourceHints::Explicit(adversarial_list(&mut rng, ids, k, &v)),
            )
        })
        .collect()
}

fn random_adversarial(rng: &mut Rng, ids: &[usize], m: NumaMask) -> Vec<ProviderHints> {
    let v = Variant {
        keep: if rng.chance(40) {
            100
        } else {
            30 + rng.below(70)
        },
        preferred: match rng.below(3) {
            0 => 0,
            1 => 10,
            _ => rng.below(101),
        },
        shuffle: rng.chance(50),
    };
    let count = if rng.chance(70) {
        ids.len()
    } else {
        1 + rng.below(ids.len() as u64 + 1) as usize
    };
    let mut providers: Vec<ProviderHints> = (0..count)
        .map(|i| {
            let k = if count == ids.len() {
                i
            } else {
                rng.below(ids.len() as u64) as usize
            };
            let mut list = adversarial_list(rng, ids, k, &v);
            if rng.chance(15) {
                // A few arbitrary hints too (nil, empty, outside the machine).
                list.push(random_hint(rng, m));
            }
            one("r", ResourceHints::Explicit(list))
        })
        .collect();
    if rng.chance(10) {
        providers.insert(rng.below(count as u64 + 1) as usize, None);
    }
    providers
}

#[test]
fn adversarial_explicit_lists_match_the_reference() {
    let mut rng = Rng(seed(11));
    let total = 2_000 * scale();
    let (mut done, mut preferred, mut full5) = (0u64, 0u64, 0u64);
    let mut by_nodes = [0u64; 6];
    while done < total {
        let n = 2 + rng.below(4) as usize;
        let ids = random_ids_exact(&mut rng, n);
        let prefer_closest = rng.chance(50);
        let numa = if rng.chance(50) {
            tied_machine(&mut rng, &ids, prefer_closest)
        } else {
            machine(&mut rng, &ids, prefer_closest)
        };
        let m = numa.default_affinity();
        let providers = random_adversarial(&mut rng, &ids, m);
        let size = product_len(&providers, m);
        // Full N = 5 lists are 16^5 permutations: a few of those, mostly smaller ones.
        let big = size > 70_000;
        if big && (size > 1_100_000 || full5 * 200 >= total) {
            continue;
        }
        full5 += u64::from(big);
        let opts = TmOptions {
            prefer_closest_numa_nodes: prefer_closest,
            ..TmOptions::default()
        };
        let policy = POLICIES[1 + rng.below(3) as usize];
        if check_all(policy, &numa, &opts, &providers).hint.preferred {
            preferred += 1;
        }
        done += 1;
        by_nodes[n] += 1;
    }
    println!(
        "adversarial explicit: {done} cases ({full5} of over 70,000 permutations), {preferred} preferred results, by node count {by_nodes:?}"
    );
    assert!(preferred > done / 20 && preferred < done * 19 / 20);
    assert!(full5 > 0 && by_nodes[5] > done / 10);
}

/// `n` ids, contiguous or not.
fn random_ids_exact(rng: &mut Rng, n: usize) -> Vec<usize> {
    if rng.chance(70) {
        return (0..n).collect();
    }
    let mut all: Vec<usize> = (0..16).collect();
    shuffle(rng, &mut all);
    let mut ids = all[..n].to_vec();
    ids.sort_unstable();
    ids
}

/// The reference's own answer does not depend on the enumeration order: shuffling the
/// providers (which nest the loops) and the hints of every list gives the same result. This
/// is why the product merge may ignore which permutation first produced a mask.
#[test]
fn enumeration_order_never_decides() {
    let mut rng = Rng(seed(12));
    let total = 1_000 * scale();
    for _ in 0..total {
        let n = 2 + rng.below(3) as usize;
        let ids = random_ids_exact(&mut rng, n);
        let prefer_closest = rng.chance(60);
        let numa = tied_machine(&mut rng, &ids, prefer_closest);
        let m = numa.default_affinity();
        let providers = random_adversarial(&mut rng, &ids, m);
        if product_len(&providers, m) > 20_000 {
            continue;
        }
        let opts = TmOptions {
            prefer_closest_numa_nodes: prefer_closest,
            ..TmOptions::default()
        };
        let policy = POLICIES[1 + rng.below(3) as usize];
        let want = check_all(policy, &numa, &opts, &providers);
        let mut shuffled = providers.clone();
        shuffle(&mut rng, &mut shuffled);
        for p in shuffled.iter_mut().flatten() {
            for hints in p.values_mut() {
                if let ResourceHints::Explicit(v) = hints {
                    shuffle(&mut rng, v);
                }
            }
        }
        let got = reference::merge(policy, &numa, &opts, &shuffled).expect("reference merge");
        assert_eq!(
            got, want,
            "order changed the kubelet's answer: {providers:#?}"
        );
    }
    println!("enumeration order: {total} cases, each enumerated in two orders");
}

/// Prefer-closest with the branch and bound forced at every width (the product uses it
/// beyond 2048 masks of a width, which the reference cannot enumerate), on kubelet-like
/// implicit sources, some explicit lists, and distances full of ties.
#[test]
fn prefer_closest_branch_and_bound_matches_the_reference() {
    let mut rng = Rng(seed(13));
    let total = 1_500 * scale();
    let (mut done, mut preferred, mut by_nodes) = (0u64, 0u64, [0u64; 11]);
    while done < total {
        let n = 4 + rng.below(7) as usize;
        let ids = random_ids_exact(&mut rng, n);
        let numa = if rng.chance(50) {
            tied_machine(&mut rng, &ids, true)
        } else {
            machine(&mut rng, &ids, true)
        };
        let m = numa.default_affinity();
        let mut sources: Vec<(String, Arc<dyn HintSource>)> = Vec::new();
        let cpu_req = [1 + rng.below(3 * n as u64)];
        sources.push(("cpu".into(), Arc::new(capacity(&mut rng, &ids, &cpu_req))));
        if rng.chance(60) {
            let r = 1 + rng.below(2 * n as u64);
            sources.push(("memory".into(), Arc::new(groups(&mut rng, &ids, r))));
        }
        if rng.chance(50) {
            let dev_req = [1 + rng.below(4)];
            sources.push((
                "example.com/dev".into(),
                Arc::new(capacity(&mut rng, &ids, &dev_req)),
            ));
        }
        if rng.chance(15) {
            sources.push(("arbitrary".into(), Arc::new(arbitrary(&mut rng, m))));
        }
        let mut providers: Vec<ProviderHints> = sources
            .iter()
            .map(|(name, s)| one(name, ResourceHints::Implicit(s.clone())))
            .collect();
        if rng.chance(20) {
            let hints = (0..1 + rng.below(4))
                .map(|_| random_hint(&mut rng, m))
                .collect();
            providers.push(one("x", ResourceHints::Explicit(hints)));
        }
        if product_len(&providers, m) > 40_000 {
            continue;
        }
        let opts = TmOptions {
            prefer_closest_numa_nodes: true,
            ..TmOptions::default()
        };
        let policy = POLICIES[1 + rng.below(3) as usize];
        if check_all(policy, &numa, &opts, &providers).hint.preferred {
            preferred += 1;
        }
        done += 1;
        by_nodes[n] += 1;
    }
    println!(
        "prefer-closest branch and bound: {done} cases, {preferred} preferred results, by node count {by_nodes:?}"
    );
    assert!(preferred > done / 10 && preferred < done * 9 / 10);
    assert!(by_nodes[9] + by_nodes[10] > done / 10);
}

/// The adversarial class beyond the reference's reach has a known answer: the lists of
/// nodes j and k hold {j, k}, so every single node is reachable (N >= 3), T = 1, and the
/// kubelet keeps the lowest single node (prefer-closest: the lowest self-distance, then the
/// lowest id). Checked at every N against the reference where it can enumerate (N <= 4).
#[test]
fn adversarial_class_at_sixteen_nodes() {
    let max = if cfg!(debug_assertions) { 12 } else { 16 };
    for n in 3..=max {
        let ids: Vec<usize> = (0..n).collect();
        let providers = adversarial(&ids);
        for prefer_closest in [false, true] {
            let rows = ids
                .iter()
                .map(|&i| {
                    let row = ids
                        .iter()
                        .map(|&j| if i == j { 10 + (i as u64 + 3) % 4 } else { 20 })
                        .collect();
                    (i, Some(row))
                })
                .collect();
            let numa = NumaInfo::new(rows, prefer_closest).expect("valid machine");
            let opts = TmOptions {
                prefer_closest_numa_nodes: prefer_closest,
                max_allowable_numa_nodes: 64,
            };
            let start = Instant::now();
            let r = merge(TmPolicy::BestEffort, &numa, &opts, &providers).expect("merge");
            let took = start.elapsed();
            let want = if prefer_closest { 1 } else { 0 };
            assert_eq!(
                r.hint.affinity,
                Some(NumaMask::new([want]).unwrap()),
                "N = {n}"
            );
            assert!(!r.hint.preferred && r.admit);
            if n <= 4 {
                check_all(TmPolicy::BestEffort, &numa, &opts, &providers);
            }
            if n == max {
                println!("adversarial N = {n} (prefer-closest {prefer_closest}): {took:?}");
            }
        }
    }
}

/// Inputs whose cost grows exponentially end in a clear error within the budget instead of
/// running on: explicit lists on a machine too large for superset sums whose intersections
/// are all distinct (2^40 of them), and any input under a tiny budget.
#[test]
fn the_budget_cuts_exponential_inputs_with_a_clear_error() {
    let n = 40;
    let ids: Vec<usize> = (0..n).collect();
    let numa = NumaInfo::new(ids.iter().map(|&i| (i, None)).collect(), false).unwrap();
    let all = numa.default_affinity();
    let hint = |m: NumaMask| TopologyHint {
        affinity: Some(m),
        preferred: false,
    };
    let providers: Vec<ProviderHints> = ids
        .iter()
        .map(|&k| {
            let without = all.minus(NumaMask::new([k]).unwrap());
            one(
                &format!("r{k}"),
                ResourceHints::Explicit(vec![hint(all), hint(without)]),
            )
        })
        .collect();
    let opts = TmOptions {
        max_allowable_numa_nodes: 64,
        ..TmOptions::default()
    };
    let start = Instant::now();
    let e = merge(TmPolicy::BestEffort, &numa, &opts, &providers).unwrap_err();
    let took = start.elapsed();
    println!("budget: 2^40 distinct intersections cut after {took:?}: {e}");
    assert!(
        matches!(
            e,
            TmError::MergeBudgetExceeded {
                nodes: 40,
                lists: 40,
                sources: 0,
                hints: 80,
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("40 NUMA nodes") && text.contains("40 hint lists"),
        "{text}"
    );
    assert!(took.as_secs() < 30, "the budget took {took:?}");

    // The adversarial class fits the default budget, not a tiny one.
    let ids: Vec<usize> = (0..10).collect();
    let numa = NumaInfo::new(ids.iter().map(|&i| (i, None)).collect(), false).unwrap();
    let providers = adversarial(&ids);
    let e = merge_with_budget(TmPolicy::Restricted, &numa, &opts, &providers, 1_000).unwrap_err();
    assert!(
        matches!(
            e,
            TmError::MergeBudgetExceeded {
                nodes: 10,
                lists: 10,
                hints: 5120,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(merge(TmPolicy::Restricted, &numa, &opts, &providers).is_ok());
}
