//! The CPU hint adapter: the CPU manager's hints (kubelet static policy `generateCPUTopologyHints`) as an
//! implicit hint source.
//!
//! The universe is the NUMA nodes that have CPUs (the kubelet iterates
//! `CPUDetails.NUMANodes()`). A mask is a hint when every reusable CPU lies on its nodes and
//! reusable plus available CPUs on its nodes reach the request. `minAffinitySize` is the
//! narrowest width whose nodes hold at least `request` CPUs in total (the largest nodes
//! first); a hint is preferred when its width equals it, or, with `align-by-socket`, when it
//! spans exactly `ceil(minAffinitySize / numaNodesPerSocket)` sockets (declared counts).
//! Precomputing per-node counts makes a lookup O(nodes in the mask).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cpumanager::{guaranteed_cpus, pod_guaranteed_cpus, CpuState, StaticPolicy};
use crate::cpuset::CpuSet;
use crate::pod::{Container, Pod};
use crate::topology::CpuTopology;
use crate::topologymanager::{
    NumaMask, ProviderHintSet, ProviderHints, ProviderNodes, ResourceHints, TopologyHint,
};

use crate::topologymanager::subsets::{min_width_single, within};

/// `generateCPUTopologyHints(available, reusable, request)`, answered per mask.
#[derive(Debug, Clone)]
pub struct CpuHintSource {
    ids: Vec<usize>,
    universe: NumaMask,
    /// Available CPUs per NUMA node id.
    available: BTreeMap<usize, usize>,
    /// NUMA nodes of the reusable CPUs, and their count.
    reusable_nodes: NumaMask,
    reusable: usize,
    request: usize,
    min_affinity: usize,
    /// With align-by-socket: socket mask of each node, and the socket count a preferred
    /// hint spans.
    socket_rule: Option<(BTreeMap<usize, u64>, usize)>,
}

impl CpuHintSource {
    /// Builds the source from the same inputs as the kubelet's function. CPUs of
    /// `available`/`reusable` that the topology does not know are ignored, as the kubelet's
    /// lookup of an unknown CPU yields NUMA node 0 only for CPUs it knows.
    pub fn new(
        t: &CpuTopology,
        available: &CpuSet,
        reusable: &CpuSet,
        request: usize,
        align_by_socket: bool,
    ) -> Self {
        let ids = t.ids_of(&t.all_cpus(), |c| c.numa);
        let universe = NumaMask::new(ids.iter().copied().filter(|i| *i < 64)).unwrap_or_default();
        let mut total: BTreeMap<usize, u64> = ids.iter().map(|i| (*i, 0)).collect();
        let mut sockets: BTreeMap<usize, u64> = BTreeMap::new();
        for c in t.cpus() {
            *total.entry(c.numa).or_default() += 1;
            if c.socket < 64 {
                *sockets.entry(c.numa).or_default() |= 1 << c.socket;
            }
        }
        let mut avail: BTreeMap<usize, usize> = BTreeMap::new();
        for id in available.iter() {
            if let Some(c) = t.cpu(id) {
                *avail.entry(c.numa).or_default() += 1;
            }
        }
        let mut reusable_bits = 0u64;
        let mut reusable_count = 0;
        for id in reusable.iter() {
            reusable_count += 1;
            if let Some(c) = t.cpu(id) {
                if c.numa < 64 {
                    reusable_bits |= 1 << c.numa;
                }
            } else {
                // The kubelet reads a zero-valued CPUInfo: NUMA node 0.
                reusable_bits |= 1;
            }
        }
        let counts: Vec<u64> = total.values().copied().collect();
        let min_affinity = min_width_single(&counts, request as u64)
            .filter(|w| *w < ids.len())
            .unwrap_or(ids.len());
        let socket_rule = align_by_socket.then(|| {
            let d = t.declared();
            let per_socket = d.num_numa_nodes.checked_div(d.num_sockets).unwrap_or(0);
            let min_sockets = if per_socket == 0 {
                usize::MAX
            } else {
                min_affinity.div_ceil(per_socket)
            };
            (sockets, min_sockets)
        });
        Self {
            ids,
            universe,
            available: avail,
            reusable_nodes: NumaMask::from_bits(reusable_bits),
            reusable: reusable_count,
            request,
            min_affinity,
            socket_rule,
        }
    }

    /// `Some(preferred)` when `mask` is in the kubelet's list, else `None`.
    pub fn lookup(&self, mask: NumaMask) -> Option<bool> {
        if !within(mask, self.universe) || !self.reusable_nodes.is_subset_of(mask) {
            return None;
        }
        let matching: usize = self.reusable
            + mask
                .ids()
                .map(|n| self.available.get(&n).copied().unwrap_or(0))
                .sum::<usize>();
        if matching < self.request {
            return None;
        }
        if let Some((sockets, min_sockets)) = &self.socket_rule {
            let spanned = mask
                .ids()
                .fold(0u64, |acc, n| acc | sockets.get(&n).copied().unwrap_or(0));
            if spanned.count_ones() as usize == *min_sockets {
                return Some(true);
            }
        }
        Some(mask.count() as usize == self.min_affinity)
    }

    /// The kubelet's explicit list.
    pub fn materialize(&self) -> Vec<TopologyHint> {
        crate::topologymanager::subsets::materialize_with(&self.ids, |m| self.lookup(m))
    }

    /// The NUMA nodes (with CPUs) this source ranges over.
    pub fn numa_ids(&self) -> &[usize] {
        &self.ids
    }
}

impl ProviderHintSet for CpuHintSource {
    /// The narrowest hint's width: the reusable CPUs' nodes are forced, then the nodes
    /// with the most available CPUs are added until the request is met.
    fn narrowest(&self) -> Option<u32> {
        let forced = self.reusable_nodes;
        if !forced.is_subset_of(self.universe) {
            return None;
        }
        let have = self.reusable
            + forced
                .ids()
                .map(|n| self.available.get(&n).copied().unwrap_or(0))
                .sum::<usize>();
        let mut others: Vec<u64> = self
            .ids
            .iter()
            .filter(|n| !forced.is_set(**n))
            .map(|n| self.available.get(n).copied().unwrap_or(0) as u64)
            .collect();
        let base = forced.count() as usize;
        let extra = if have >= self.request {
            usize::from(base == 0)
        } else {
            others.sort_unstable_by(|a, b| b.cmp(a));
            min_width_single(&others, (self.request - have) as u64)?
        };
        Some((base + extra.max(usize::from(base == 0))) as u32)
    }

    fn hint(&self, mask: NumaMask) -> Option<bool> {
        self.lookup(mask)
    }

    fn nodes(&self) -> ProviderNodes<'_> {
        ProviderNodes::new(&self.ids, self.universe, self.min_affinity)
    }

    fn preferred_range(&self) -> Option<(u32, u32)> {
        let narrowest = self.narrowest()?;
        if let Some((sockets, min_sockets)) = &self.socket_rule {
            // Socket-aligned hints: a set of `min_sockets` sockets has one iff all its
            // CPU-bearing nodes together are a hint (hints are upward-closed), and those
            // hints are at most that wide.
            let mut widest = (narrowest as usize == self.min_affinity).then_some(narrowest);
            let socket_ids: Vec<usize> = sockets
                .values()
                .flat_map(|b| (0..64).filter(move |i| b >> i & 1 == 1))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            if *min_sockets <= socket_ids.len() {
                crate::topologymanager::subsets::any_mask_of_width(
                    &socket_ids,
                    *min_sockets,
                    |chosen| {
                        let nodes =
                            self.ids.iter().copied().filter(|n| {
                                sockets.get(n).is_some_and(|b| b & !chosen.bits() == 0)
                            });
                        let mask = NumaMask::from_bits(nodes.fold(0, |a, n| a | 1 << n));
                        if self.lookup(mask).is_some() {
                            widest = Some(widest.map_or(mask.count(), |w| w.max(mask.count())));
                        }
                        false
                    },
                );
            }
            return widest.map(|w| (narrowest, w));
        }
        // Every hint is at least minAffinitySize wide (available CPUs never exceed the
        // node's CPUs), so a preferred hint exists iff the narrowest hint has that width.
        (narrowest as usize == self.min_affinity).then_some((narrowest, narrowest))
    }
}

/// The CPU manager's answer for one container (kubelet `GetTopologyHints`), with the same
/// inputs as [`StaticPolicy::container_hints`] but an implicit list: `None` is the nil map.
pub fn container_hints(
    policy: &StaticPolicy,
    state: &CpuState,
    pod: &Pod,
    container: &Container,
) -> ProviderHints {
    let requested = guaranteed_cpus(pod, container);
    if requested == 0 {
        return None;
    }
    let hints = match state.get(&pod.uid, &container.name) {
        Some(allocated) if allocated.len() != requested => ResourceHints::Explicit(Vec::new()),
        Some(allocated) => implicit(policy, allocated, &CpuSet::new(), requested),
        None => implicit(
            policy,
            &policy.assignable(state),
            &policy.reusable(&pod.uid),
            requested,
        ),
    };
    Some(BTreeMap::from([("cpu".to_string(), hints)]))
}

/// The CPU manager's answer for a whole pod (kubelet `GetPodTopologyHints`).
pub fn pod_hints(policy: &StaticPolicy, state: &CpuState, pod: &Pod) -> ProviderHints {
    let requested = pod_guaranteed_cpus(pod);
    if requested == 0 {
        return None;
    }
    let mut assigned = CpuSet::new();
    for c in pod.all_containers() {
        if let Some(allocated) = state.get(&pod.uid, &c.name) {
            if allocated.len() != guaranteed_cpus(pod, c) {
                return Some(BTreeMap::from([(
                    "cpu".to_string(),
                    ResourceHints::Explicit(Vec::new()),
                )]));
            }
            assigned = assigned.union(allocated);
        }
    }
    let hints = if assigned.len() == requested {
        implicit(policy, &assigned, &CpuSet::new(), requested)
    } else {
        let reusable = policy.reusable(&pod.uid).union(&assigned);
        implicit(policy, &policy.assignable(state), &reusable, requested)
    };
    Some(BTreeMap::from([("cpu".to_string(), hints)]))
}

fn implicit(
    policy: &StaticPolicy,
    available: &CpuSet,
    reusable: &CpuSet,
    request: usize,
) -> ResourceHints {
    ResourceHints::Implicit(Arc::new(CpuHintSource::new(
        policy.topology(),
        available,
        reusable,
        request,
        policy.options().align_by_socket,
    )))
}
