//! Admission decision for one container (CPU + memory + one device) on a half-full machine,
//! through the product merge at 8, 16, 32 and 64 NUMA nodes and through the literal kubelet
//! enumeration (`reference::merge`) at 8 for the ratio.
//!
//! The hint sources are bench-local, with kubelet semantics and the cheap trait methods real
//! providers implement (each lookup O(N): the preferred width, the kubelet's
//! minAffinitySize, is computed once per request as the providers do; until issue 14 the
//! bench recomputed it with a sort on every lookup, which inflated every figure, the
//! reference's included): CPU and devices as "enough free capacity in the mask" (upward-closed,
//! preferred = the narrowest width the node totals allow), memory as the memory manager's
//! static policy with its NUMA-group rule (a node holding a single-NUMA allocation never
//! joins a multi-NUMA hint; non-monotone).
//!
//! Three scenarios: `fits` (4 CPUs, 16 GiB, 1 device: a preferred single-node hint exists),
//! `tight` (CPU needs two nodes while the free devices and memory sit elsewhere, so no
//! preferred hint exists and the non-preferred search runs) and `wide` (60 CPUs: at least
//! six half-full nodes, no preferred hint; a stress case for the non-preferred search).
//! `skewed` fills the low-numbered half of the machine completely and asks for a quarter of
//! the machine (CPUs, memory and devices of N/4 nodes): the preferred masks all lie in the
//! high half, far down the kubelet's integer order.
//!
//! `explicit-adversarial`: explicit hint lists of the class that made the distinct-mask
//! dynamic programming exponential: N nodes, N providers, provider k lists every mask that
//! contains node k (N·2^(N-1) hints), none preferred. The product merge at N = 4, 5, 8, 12,
//! 14 and 16; the reference where it can enumerate the cross product (2^(N(N-1))
//! permutations: N = 4 and 5; beyond, its cost is printed as permutations times its measured
//! cost per permutation at N = 5).

use std::collections::BTreeMap;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use nodetopo_engine::topologymanager::mask::iterate_bit_masks;
use nodetopo_engine::topologymanager::{
    merge, reference, HintSource, NumaInfo, NumaMask, ProviderHints, ResourceHints, TmOptions,
    TmPolicy, TopologyHint,
};

fn sum(v: &[u64], m: NumaMask) -> u64 {
    m.ids().map(|i| v[i]).sum()
}

/// Fewest nodes whose values, largest first, reach `r`, counting only nodes in `within`.
fn fewest(v: &[u64], within: NumaMask, r: u64) -> Option<u32> {
    let mut vals: Vec<u64> = within.ids().map(|i| v[i]).collect();
    vals.sort_unstable_by(|a, b| b.cmp(a));
    let mut acc = 0;
    for (k, x) in vals.iter().enumerate() {
        acc += x;
        if acc >= r {
            return Some(k as u32 + 1);
        }
    }
    None
}

/// CPU manager / device manager: a hint when the free capacity in the mask covers the
/// request; preferred at the narrowest width the totals could cover.
#[derive(Debug)]
struct Capacity {
    free: Vec<u64>,
    request: u64,
    /// The narrowest width the node totals could cover (the kubelet's minAffinitySize,
    /// computed once per request as the providers do).
    preferred: Option<u32>,
}

impl Capacity {
    fn new(free: Vec<u64>, total: &[u64], request: u64, machine: NumaMask) -> Self {
        Capacity {
            preferred: fewest(total, machine, request),
            free,
            request,
        }
    }
    fn preferred_width(&self) -> Option<u32> {
        self.preferred
    }
}

impl HintSource for Capacity {
    fn lookup(&self, mask: NumaMask) -> Option<bool> {
        (sum(&self.free, mask) >= self.request)
            .then(|| Some(mask.count()) == self.preferred_width())
    }
    fn min_width(&self, machine: NumaMask) -> Option<u32> {
        fewest(&self.free, machine, self.request)
    }
    fn preferred_widths(&self, machine: NumaMask) -> Option<(u32, u32)> {
        let p = self.preferred_width()?;
        (self.min_width(machine)? <= p).then_some((p, p))
    }
    fn is_upward_closed(&self, _machine: NumaMask) -> bool {
        true
    }
}

/// Memory manager static policy (`calculateHints`), every group a single node.
#[derive(Debug)]
struct Memory {
    free: Vec<u64>,
    allocatable: Vec<u64>,
    /// Nodes with memory assignments (single-NUMA ones: they never join multi-NUMA hints).
    assigned: NumaMask,
    request: u64,
    /// The kubelet's minAffinitySize over allocatable memory, computed once.
    preferred: Option<u32>,
}

impl Memory {
    fn preferred_width(&self) -> Option<u32> {
        self.preferred
    }
    fn multi_ok(&self, m: NumaMask) -> bool {
        m.count() >= 2 && m.and(self.assigned).is_empty() && sum(&self.free, m) >= self.request
    }
}

impl HintSource for Memory {
    fn lookup(&self, mask: NumaMask) -> Option<bool> {
        let ok = if mask.count() == 1 {
            sum(&self.free, mask) >= self.request
        } else {
            self.multi_ok(mask)
        };
        (ok && sum(&self.allocatable, mask) >= self.request)
            .then(|| Some(mask.count()) == self.preferred_width())
    }
    fn min_width(&self, machine: NumaMask) -> Option<u32> {
        if machine.ids().any(|i| self.free[i] >= self.request) {
            return Some(1);
        }
        fewest(&self.free, machine.minus(self.assigned), self.request).filter(|k| *k >= 2)
    }
    fn preferred_widths(&self, machine: NumaMask) -> Option<(u32, u32)> {
        let p = self.preferred_width()?;
        let exists = if p == 1 {
            machine.ids().any(|i| self.free[i] >= self.request)
        } else {
            let unassigned = machine.minus(self.assigned);
            unassigned.count() >= p
                && fewest(&self.free, unassigned, self.request).is_some_and(|k| k <= p)
        };
        exists.then_some((p, p))
    }
    fn is_upward_closed(&self, _machine: NumaMask) -> bool {
        false
    }
    fn any_hint_between(&self, lo: NumaMask, hi: NumaMask) -> bool {
        if self.lookup(lo).is_some() {
            return true;
        }
        let top = lo.or(hi.minus(self.assigned));
        lo.and(self.assigned).is_empty() && self.multi_ok(top)
    }
}

struct Scenario {
    numa: NumaInfo,
    providers: Vec<ProviderHints>,
}

/// A half-full machine of `n` NUMA nodes (16 CPUs, 64 GiB and 2 devices per node).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Fits,
    Tight,
    Wide,
    Skewed,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Fits => "fits",
            Kind::Tight => "tight",
            Kind::Wide => "wide",
            Kind::Skewed => "skewed",
        }
    }
}

fn scenario(n: usize, kind: Kind) -> Scenario {
    let machine = NumaMask::new(0..n).expect("n <= 64");
    let gib = 1u64 << 30;
    let total_cpu = vec![16u64; n];
    // Half full: alternating nodes keep 12 and 4 free CPUs.
    let mut free_cpu: Vec<u64> = (0..n).map(|i| if i % 2 == 0 { 12 } else { 4 }).collect();
    let allocatable = vec![64 * gib; n];
    let mut free_mem: Vec<u64> = (0..n)
        .map(|i| if i % 2 == 0 { 20 * gib } else { 44 * gib })
        .collect();
    let mut assigned = NumaMask::from_bits(machine.bits() & 0x5555_5555_5555_5555);
    let total_dev = vec![2u64; n];
    let mut free_dev: Vec<u64> = (0..n).map(|i| u64::from(i % 4 == 3)).collect();
    let (cpus, mem, devs) = if kind == Kind::Skewed {
        let low = NumaMask::new(0..n / 2).expect("n <= 64");
        for i in 0..n {
            let full = low.is_set(i);
            free_cpu[i] = if full { 0 } else { 16 };
            free_mem[i] = if full { 0 } else { 64 * gib };
            free_dev[i] = if full { 0 } else { 2 };
        }
        assigned = low;
        let k = (n / 4) as u64;
        (16 * k, 64 * gib * k, 2 * k)
    } else if kind == Kind::Wide {
        (60, 16 * gib, 1)
    } else if kind == Kind::Tight {
        // 20 CPUs need two nodes; the free devices sit only on the last node and memory
        // only fits there too, so no single mask is preferred by all three.
        free_cpu.iter_mut().for_each(|c| *c = (*c).min(10));
        free_dev.iter_mut().for_each(|d| *d = 0);
        free_dev[n - 1] = 1;
        free_mem.iter_mut().for_each(|m| *m = 8 * gib);
        free_mem[n - 1] = 40 * gib;
        (20, 24 * gib, 1)
    } else {
        (4, 16 * gib, 1)
    };
    let cpu = Capacity::new(free_cpu, &total_cpu, cpus, machine);
    let memory = Memory {
        preferred: fewest(&allocatable, machine, mem),
        free: free_mem,
        allocatable,
        assigned,
        request: mem,
    };
    let device = Capacity::new(free_dev, &total_dev, devs, machine);
    let one = |name: &str, s: Arc<dyn HintSource>| -> ProviderHints {
        Some(BTreeMap::from([(
            name.to_string(),
            ResourceHints::Implicit(s),
        )]))
    };
    let rows = (0..n)
        .map(|i| {
            let row = (0..n)
                .map(|j| {
                    if i == j {
                        10
                    } else if i / 4 == j / 4 {
                        12
                    } else {
                        32
                    }
                })
                .collect();
            (i, Some(row))
        })
        .collect();
    Scenario {
        numa: NumaInfo::new(rows, true).expect("valid machine"),
        providers: vec![
            one("cpu", Arc::new(cpu)),
            one("memory", Arc::new(memory)),
            one("example.com/gpu", Arc::new(device)),
        ],
    }
}

fn bench(c: &mut Criterion) {
    let opts = TmOptions {
        prefer_closest_numa_nodes: false,
        max_allowable_numa_nodes: 64,
    };
    let closest = TmOptions {
        prefer_closest_numa_nodes: true,
        ..opts
    };
    // The bench sources must give the kubelet's answer: check against the reference at 8.
    for kind in [Kind::Fits, Kind::Tight, Kind::Wide, Kind::Skewed] {
        let s = scenario(8, kind);
        for policy in [
            TmPolicy::BestEffort,
            TmPolicy::Restricted,
            TmPolicy::SingleNumaNode,
        ] {
            for o in [&opts, &closest] {
                let want = reference::merge(policy, &s.numa, o, &s.providers).expect("reference");
                let got = merge(policy, &s.numa, o, &s.providers).expect("product");
                assert_eq!(got, want, "bench scenario disagrees with the reference");
            }
        }
    }
    // Every timed merge stays within the default work budget (an error would be timed
    // silently otherwise).
    for kind in [Kind::Fits, Kind::Tight, Kind::Wide, Kind::Skewed] {
        for n in [8usize, 16, 32, 64] {
            let s = scenario(n, kind);
            for o in [&opts, &closest] {
                merge(TmPolicy::Restricted, &s.numa, o, &s.providers).expect("within budget");
            }
        }
    }
    for kind in [Kind::Fits, Kind::Tight, Kind::Wide, Kind::Skewed] {
        let mut g = c.benchmark_group(format!("merge/{}", kind.name()));
        g.sample_size(20)
            .warm_up_time(std::time::Duration::from_millis(500))
            .measurement_time(std::time::Duration::from_secs(2));
        for n in [8usize, 16, 32, 64] {
            let s = scenario(n, kind);
            for (label, o) in [("restricted", &opts), ("restricted+closest", &closest)] {
                g.bench_with_input(BenchmarkId::new(label, n), &s, |b, s| {
                    b.iter(|| merge(TmPolicy::Restricted, &s.numa, o, &s.providers))
                });
            }
        }
        let s = scenario(8, kind);
        g.sample_size(10);
        g.bench_with_input(BenchmarkId::new("reference-restricted", 8), &s, |b, s| {
            b.iter(|| reference::merge(TmPolicy::Restricted, &s.numa, &opts, &s.providers))
        });
        g.finish();
    }
}

/// The adversarial explicit-list class on `n` nodes (ids 0..n, no distances).
fn adversarial(n: usize) -> Scenario {
    let ids: Vec<usize> = (0..n).collect();
    let providers = (0..n)
        .map(|k| {
            let mut hints = Vec::new();
            iterate_bit_masks(&ids, |m| {
                if m.is_set(k) {
                    hints.push(TopologyHint {
                        affinity: Some(m),
                        preferred: false,
                    });
                }
            });
            Some(BTreeMap::from([(
                format!("r{k}"),
                ResourceHints::Explicit(hints),
            )]))
        })
        .collect();
    Scenario {
        numa: NumaInfo::new(ids.iter().map(|&i| (i, None)).collect(), false).expect("valid"),
        providers,
    }
}

fn bench_explicit(c: &mut Criterion) {
    let opts = TmOptions {
        prefer_closest_numa_nodes: false,
        max_allowable_numa_nodes: 64,
    };
    for n in [4usize, 5] {
        let s = adversarial(n);
        let want = reference::merge(TmPolicy::BestEffort, &s.numa, &opts, &s.providers);
        let got = merge(TmPolicy::BestEffort, &s.numa, &opts, &s.providers);
        assert_eq!(got, want, "adversarial N = {n}: product != reference");
    }
    let mut g = c.benchmark_group("merge/explicit-adversarial");
    g.sample_size(10)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(3));
    for n in [4usize, 5, 8, 12, 14, 16] {
        let s = adversarial(n);
        merge(TmPolicy::BestEffort, &s.numa, &opts, &s.providers).expect("within budget");
        g.bench_with_input(BenchmarkId::new("best-effort", n), &s, |b, s| {
            b.iter(|| merge(TmPolicy::BestEffort, &s.numa, &opts, &s.providers))
        });
    }
    let mut per_permutation = 0.0;
    for n in [4usize, 5] {
        let s = adversarial(n);
        g.bench_with_input(BenchmarkId::new("reference-best-effort", n), &s, |b, s| {
            b.iter(|| reference::merge(TmPolicy::BestEffort, &s.numa, &opts, &s.providers))
        });
        if n == 5 {
            let start = std::time::Instant::now();
            let _ = reference::merge(TmPolicy::BestEffort, &s.numa, &opts, &s.providers);
            per_permutation = start.elapsed().as_secs_f64() / 16f64.powi(5);
        }
    }
    g.finish();
    for n in [8i32, 12, 14, 16] {
        let permutations = 2f64.powi((n - 1) * n);
        eprintln!(
            "reference at N = {n}: {permutations:.3e} permutations (refused above {}), ~{:.3e} s at its N = 5 cost of {:.1} ns per permutation",
            reference::PERMUTATION_LIMIT,
            permutations * per_permutation,
            per_permutation * 1e9
        );
    }
}

criterion_group!(benches, bench, bench_explicit);
criterion_main!(benches);
