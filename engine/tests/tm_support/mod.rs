//! Shared pieces of the topology-manager differential tests: a reproducible RNG, random
//! machines and hint lists, kubelet-like hint sources, and the product-vs-reference check.
#![allow(dead_code)]

use std::collections::BTreeMap;

use nodetopo_engine::topologymanager::{
    merge, reference, HintSource, MergeResult, NumaInfo, NumaMask, ProviderHints, ResourceHints,
    TmOptions, TmPolicy, TopologyHint,
};

/// splitmix64: small, fast, reproducible.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn mask_within(&mut self, m: NumaMask) -> NumaMask {
        NumaMask::from_bits(self.next() & m.bits())
    }
}

pub fn scale() -> u64 {
    let base = if cfg!(debug_assertions) { 1 } else { 10 };
    let mult = std::env::var("NODETOPO_DIFF_SCALE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1);
    base * mult
}

pub fn seed(salt: u64) -> u64 {
    let s = std::env::var("NODETOPO_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0x5EED_0001);
    s ^ salt.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

pub const POLICIES: [TmPolicy; 4] = [
    TmPolicy::None,
    TmPolicy::BestEffort,
    TmPolicy::Restricted,
    TmPolicy::SingleNumaNode,
];

/// A machine with `ids` and a random (asymmetric) distance matrix indexed by id.
pub fn machine(rng: &mut Rng, ids: &[usize], prefer_closest: bool) -> NumaInfo {
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

pub fn check(
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

pub fn one(name: &str, hints: ResourceHints) -> ProviderHints {
    Some(BTreeMap::from([(name.to_string(), hints)]))
}

pub fn random_hint(rng: &mut Rng, machine: NumaMask) -> TopologyHint {
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

pub fn random_ids(rng: &mut Rng, max_nodes: u64) -> Vec<usize> {
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

/// Kubelet CPU/device-manager-like: a mask is a hint when its free capacity covers the
/// request; preferred when its width is the narrowest that the node totals could cover.
/// Upward-closed. `wide_preferred` also prefers masks one node wider (as align-by-socket
/// prefers wider socket-aligned masks), to exercise preferred-width ranges.
#[derive(Debug)]
pub struct Capacity {
    pub free: Vec<(usize, u64)>,
    pub total: Vec<(usize, u64)>,
    pub request: u64,
    pub wide_preferred: bool,
}

impl Capacity {
    pub fn sum(v: &[(usize, u64)], m: NumaMask) -> u64 {
        v.iter()
            .filter(|(id, _)| m.is_set(*id))
            .map(|(_, c)| c)
            .sum()
    }
    /// The fewest nodes whose values (largest first) reach the request.
    pub fn fewest(v: &[(usize, u64)], request: u64) -> Option<u32> {
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
    pub fn preferred_width(&self) -> Option<u32> {
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
pub struct Groups {
    pub free: Vec<(usize, u64)>,
    pub allocatable: Vec<(usize, u64)>,
    /// The group (cells) each node belongs to, and whether it has assignments.
    pub group: Vec<(usize, NumaMask, bool)>,
    pub request: u64,
    /// The kubelet's minAffinitySize: the narrowest mask whose allocatable memory covers
    /// the request (before the group rules).
    pub min_affinity: Option<u32>,
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
pub struct Arbitrary(pub BTreeMap<NumaMask, bool>);

impl HintSource for Arbitrary {
    fn lookup(&self, mask: NumaMask) -> Option<bool> {
        self.0.get(&mask).copied()
    }
}

pub fn per_node(rng: &mut Rng, ids: &[usize], max: u64) -> Vec<(usize, u64)> {
    ids.iter().map(|&i| (i, rng.below(max + 1))).collect()
}

pub fn capacity(rng: &mut Rng, ids: &[usize], requests: &[u64]) -> Capacity {
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

pub fn groups(rng: &mut Rng, ids: &[usize], request: u64) -> Groups {
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

pub fn arbitrary(rng: &mut Rng, machine: NumaMask) -> Arbitrary {
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
pub fn check_source_contract(s: &dyn HintSource, machine: NumaMask) {
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

pub fn product_len(providers: &[ProviderHints], machine: NumaMask) -> u128 {
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
