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

use std::collections::BTreeMap;
use std::sync::Arc;

use nodetopo_engine::topologymanager::{
    merge, reference, HintSource, MergeResult, NumaInfo, NumaMask, ProviderHints, ResourceHints,
    TmError, TmOptions, TmPolicy, TmScope, TopologyHint,
};

/// splitmix64: small, fast, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn mask_within(&mut self, m: NumaMask) -> NumaMask {
        NumaMask::from_bits(self.next() & m.bits())
    }
}

fn scale() -> u64 {
    let base = if cfg!(debug_assertions) { 1 } else { 10 };
    let mult = std::env::var("NODETOPO_DIFF_SCALE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1);
    base * mult
}

fn seed(salt: u64) -> u64 {
    let s = std::env::var("NODETOPO_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0x5EED_0001);
    s ^ salt.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

const POLICIES: [TmPolicy; 4] = [
    TmPolicy::None,
    TmPolicy::BestEffort,
    TmPolicy::Restricted,
    TmPolicy::SingleNumaNode,
];

/// A machine with `ids` and a random (asymmetric) distance matrix indexed by id.
fn machine(rng: &mut Rng, ids: &[usize], prefer_closest: bool) -> NumaInfo {
    let width = ids.iter().max().map_or(1, |m| m + 1);
    let nodes = ids
        .iter()
        .map(|&i| {
            let row = (0..width)
                .map(|j| if i == j { 10 } else { 11 + rng.below(4) * 5 })
                .collect();
            (i, Some(row))
        })
        .collect();
    NumaInfo::new(nodes, prefer_closest).expect("valid machine")
}

fn check(
    policy: TmPolicy,
    numa: &NumaInfo,
    opts: &TmOptions,
    providers: &[ProviderHints],
) -> MergeResult {
    let want = reference::merge(policy, numa, opts, providers);
    let got = merge(policy, numa, opts, providers);
    assert_eq!(
        got, want,
        "product != reference\npolicy {policy:?} opts {opts:?}\nmachine {numa:?}\nproviders {providers:#?}"
    );
    want.expect("reference merge")
}

fn one(name: &str, hints: ResourceHints) -> ProviderHints {
    Some(BTreeMap::from([(name.to_string(), hints)]))
}

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

fn random_hint(rng: &mut Rng, machine: NumaMask) -> TopologyHint {
    let affinity = match rng.below(100) {
        0..=9 => None,
        10..=12 => Some(NumaMask::EMPTY),
        13..=17 => Some(NumaMask::from_bits(rng.next() & 0xFFFF)), // may name absent nodes
        18..=59 => {
            // Narrow masks, as providers produce most often.
            let ids: Vec<usize> = machine.ids().collect();
            let mut m = NumaMask::EMPTY;
            for _ in 0..=rng.below(2) {
                m = m.or(NumaMask::from_bits(
                    1 << ids[rng.below(ids.len() as u64) as usize],
                ));
            }
            Some(m)
        }
        _ => Some(rng.mask_within(machine)),
    };
    TopologyHint {
        affinity,
        preferred: rng.chance(55),
    }
}

fn random_ids(rng: &mut Rng, max_nodes: u64) -> Vec<usize> {
    let n = 1 + rng.below(max_nodes) as usize;
    if rng.chance(75) {
        (0..n).collect()
    } else {
        // Non-contiguous ids.
        let mut ids: Vec<usize> = (0..16).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut ids = ids[..n].to_vec();
        ids.sort_unstable();
        ids
    }
}

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

/// Kubelet CPU/device-manager-like: a mask is a hint when its free capacity covers the
/// request; preferred when its width is the narrowest that the node totals could cover.
/// Upward-closed. `wide_preferred` also prefers masks one node wider (as align-by-socket
/// prefers wider socket-aligned masks), to exercise preferred-width ranges.
#[derive(Debug)]
struct Capacity {
    free: Vec<(usize, u64)>,
    total: Vec<(usize, u64)>,
    request: u64,
    wide_preferred: bool,
}

impl Capacity {
    fn sum(v: &[(usize, u64)], m: NumaMask) -> u64 {
        v.iter()
            .filter(|(id, _)| m.is_set(*id))
            .map(|(_, c)| c)
            .sum()
    }
    /// The fewest nodes whose values (largest first) reach the request.
    fn fewest(v: &[(usize, u64)], request: u64) -> Option<u32> {
        let mut vals: Vec<u64> = v.iter().map(|(_, c)| *c).collect();
        vals.sort_unstable_by(|a, b| b.cmp(a));
        let mut acc = 0;
        for (i, c) in vals.iter().enumerate() {
            acc += c;
            if acc >= request {
                return Some(i as u32 + 1);
            }
        }
        None
    }
    fn preferred_width(&self) -> Option<u32> {
        Self::fewest(&self.total, self.request)
    }
}

impl HintSource for Capacity {
    fn lookup(&self, mask: NumaMask) -> Option<bool> {
        if Self::sum(&self.free, mask) < self.request {
            return None;
        }
        let p = self.preferred_width()?;
        let c = mask.count();
        Some(c == p || (self.wide_preferred && c == p + 1))
    }
    fn min_width(&self, _machine: NumaMask) -> Option<u32> {
        Self::fewest(&self.free, self.request)
    }
    fn preferred_widths(&self, machine: NumaMask) -> Option<(u32, u32)> {
        // Preferred hints exist at width w iff the w largest free values reach the request.
        let p = self.preferred_width()?;
        let min = self.min_width(machine)?;
        let hi = if self.wide_preferred { p + 1 } else { p };
        let lo = p.max(min);
        (lo <= hi && lo <= machine.count()).then_some((lo, hi.min(machine.count())))
    }
    fn is_upward_closed(&self, _machine: NumaMask) -> bool {
        true
    }
}

/// Memory-manager-like (static policy `calculateHints`): NUMA groups make it non-monotone.
#[derive(Debug)]
struct Groups {
    free: Vec<(usize, u64)>,
    allocatable: Vec<(usize, u64)>,
    /// The group (cells) each node belongs to, and whether it has assignments.
    group: Vec<(usize, NumaMask, bool)>,
    request: u64,
    /// The kubelet's minAffinitySize: the narrowest mask whose allocatable memory covers
    /// the request (before the group rules).
    min_affinity: Option<u32>,
}

impl HintSource for Groups {
    fn lookup(&self, mask: NumaMask) -> Option<bool> {
        if Capacity::sum(&self.allocatable, mask) < self.request {
            return None;
        }
        let single = mask.count() == 1;
        for (id, cells, assigned) in &self.group {
            if !mask.is_set(*id) {
                continue;
            }
            if single && cells.count() > 1 {
                return None;
            }
            if !single && *assigned && (cells.count() == 1 || *cells != mask) {
                return None;
            }
        }
        if Capacity::sum(&self.free, mask) < self.request {
            return None;
        }
        Some(Some(mask.count()) == self.min_affinity)
    }
}

/// An arbitrary hint set (no structure at all), through the trait's defaults only.
#[derive(Debug)]
struct Arbitrary(BTreeMap<NumaMask, bool>);

impl HintSource for Arbitrary {
    fn lookup(&self, mask: NumaMask) -> Option<bool> {
        self.0.get(&mask).copied()
    }
}

fn per_node(rng: &mut Rng, ids: &[usize], max: u64) -> Vec<(usize, u64)> {
    ids.iter().map(|&i| (i, rng.below(max + 1))).collect()
}

fn capacity(rng: &mut Rng, ids: &[usize], requests: &[u64]) -> Capacity {
    let total = per_node(rng, ids, 8);
    // Mostly half-full machines: each node keeps between a third and all of its capacity.
    let free = total
        .iter()
        .map(|&(i, t)| (i, t / 3 + rng.below(t - t / 3 + 1)))
        .collect();
    Capacity {
        free,
        total,
        request: requests.iter().sum(),
        wide_preferred: rng.chance(20),
    }
}

fn groups(rng: &mut Rng, ids: &[usize], request: u64) -> Groups {
    let allocatable = per_node(rng, ids, 8);
    let free = allocatable
        .iter()
        .map(|&(i, a)| (i, rng.below(a + 1)))
        .collect();
    // Some nodes pair up into multi-NUMA groups; some nodes have assignments.
    let mut group = Vec::new();
    let mut k = 0;
    while k < ids.len() {
        if k + 1 < ids.len() && rng.chance(25) {
            let cells = NumaMask::new([ids[k], ids[k + 1]]).unwrap();
            let assigned = rng.chance(60);
            group.push((ids[k], cells, assigned));
            group.push((ids[k + 1], cells, assigned));
            k += 2;
        } else {
            let cells = NumaMask::new([ids[k]]).unwrap();
            group.push((ids[k], cells, rng.chance(30)));
            k += 1;
        }
    }
    let min_affinity = Capacity::fewest(&allocatable, request);
    Groups {
        free,
        allocatable,
        group,
        request,
        min_affinity,
    }
}

fn arbitrary(rng: &mut Rng, machine: NumaMask) -> Arbitrary {
    let mut m = BTreeMap::new();
    for _ in 0..rng.below(12) {
        let x = rng.mask_within(machine);
        if !x.is_empty() {
            m.insert(x, rng.chance(50));
        }
    }
    Arbitrary(m)
}

/// The optional methods of a source agree with their `materialize`-derived defaults.
fn check_source_contract(s: &dyn HintSource, machine: NumaMask) {
    let list = s.materialize(machine);
    let min = list
        .iter()
        .filter_map(|h| h.affinity)
        .map(NumaMask::count)
        .min();
    assert_eq!(s.min_width(machine), min, "min_width of {s:?}");
    let pw: Vec<u32> = list
        .iter()
        .filter(|h| h.preferred)
        .filter_map(|h| h.affinity)
        .map(NumaMask::count)
        .collect();
    if let Some((lo, hi)) = s.preferred_widths(machine) {
        assert!(
            pw.iter().all(|w| (lo..=hi).contains(w)),
            "preferred_widths of {s:?}"
        );
    } else {
        assert!(
            pw.is_empty(),
            "preferred_widths None but preferred hints exist: {s:?}"
        );
    }
    if s.is_upward_closed(machine) {
        for h in &list {
            let a = h.affinity.unwrap();
            for id in machine.minus(a).ids() {
                assert!(
                    s.lookup(a.or(NumaMask::from_bits(1 << id))).is_some(),
                    "{s:?} not upward-closed"
                );
            }
        }
    }
}

fn product_len(providers: &[ProviderHints], machine: NumaMask) -> u128 {
    let mut p = 1u128;
    for m in providers.iter().flatten() {
        for h in m.values() {
            let n = match h {
                ResourceHints::DontCare => 1,
                ResourceHints::Explicit(v) => v.len().max(1),
                ResourceHints::Implicit(s) => s.materialize(machine).len().max(1),
            };
            p *= n as u128;
        }
    }
    p
}

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
