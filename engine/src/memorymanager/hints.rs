//! The static policy's hints (kubelet `policy_static.go` `GetTopologyHints`,
//! `GetPodTopologyHints`, `calculateHints`, `regenerateHints`): per container or pod, the
//! masks that can hold the request, answered per mask by [`MemoryHintSource`] instead of
//! an enumeration.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{container_request, pod_request, Block, MemoryManager, MemoryResource, MemoryTable};
use crate::pod::{Container, Pod, QosClass};
use crate::topologymanager::subsets::{any_mask_of_width, min_width_single, within};
use crate::topologymanager::{NumaMask, TopologyHint};

/// The answer of the Memory Manager to one hint request.
#[derive(Debug, Clone)]
pub enum MemoryHints {
    /// Not Guaranteed, or nothing requested: the kubelet's nil map.
    None,
    /// Regenerated from existing blocks, or empty lists: explicit per resource.
    Explicit(BTreeMap<String, Vec<TopologyHint>>),
    /// Computed from the machine state: the same implicit list for every resource.
    Implicit {
        /// The requested resource names (each gets `source`).
        resources: Vec<String>,
        /// The hint list.
        source: Arc<MemoryHintSource>,
    },
}

/// The static policy's `calculateHints` list, answered per mask.
#[derive(Debug, Clone)]
pub struct MemoryHintSource {
    pub(super) ids: Vec<usize>,
    pub(super) universe: NumaMask,
    /// Per node (indexed like `ids`): allocatable and free per requested resource,
    /// assignments, group.
    pub(super) allocatable: Vec<Vec<u64>>,
    pub(super) free: Vec<Vec<u64>>,
    pub(super) assignments: Vec<usize>,
    pub(super) cells: Vec<NumaMask>,
    /// Reusable bytes per resource under an exact mask.
    pub(super) reusable: BTreeMap<u64, Vec<u64>>,
    pub(super) request: Vec<u64>,
    /// `minAffinitySize`.
    pub(super) min_affinity: usize,
}

impl MemoryHintSource {
    fn index(&self, id: usize) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    /// `Some(preferred)` when `mask` is in the kubelet's list, else `None`.
    pub fn lookup(&self, mask: NumaMask) -> Option<bool> {
        if !within(mask, self.universe) {
            return None;
        }
        let nodes: Vec<usize> = mask.ids().filter_map(|id| self.index(id)).collect();
        let sum = |table: &Vec<Vec<u64>>, r: usize| -> u64 {
            nodes
                .iter()
                .map(|&n| table[n][r])
                .fold(0u64, u64::saturating_add)
        };
        if (0..self.request.len()).any(|r| sum(&self.allocatable, r) < self.request[r]) {
            return None;
        }
        let single = nodes.len() == 1;
        if single && self.cells[nodes[0]].count() > 1 {
            return None;
        }
        if !single {
            for &n in &nodes {
                if self.assignments[n] > 0 && (self.cells[n].count() == 1 || self.cells[n] != mask)
                {
                    return None;
                }
            }
        }
        let reuse = self.reusable.get(&mask.bits());
        for r in 0..self.request.len() {
            let extra = reuse.map_or(0, |v| v[r]);
            if sum(&self.free, r).saturating_add(extra) < self.request[r] {
                return None;
            }
        }
        Some(mask.count() as usize == self.min_affinity)
    }

    /// True when no mask is a hint, decided without enumerating masks: a hint is a single
    /// node, an existing multi-node group exactly, a mask of at least two unused nodes
    /// (then the set of all unused nodes is one too, sums only grow), or a mask with reusable
    /// memory.
    pub fn is_empty(&self) -> bool {
        let mut unused = 0u64;
        for (i, id) in self.ids.iter().enumerate() {
            let single = NumaMask::from_bits(1 << id);
            if self.lookup(single).is_some() {
                return false;
            }
            if self.assignments[i] == 0 {
                unused |= 1 << id;
            } else if self.cells[i].count() > 1 && self.lookup(self.cells[i]).is_some() {
                return false;
            }
        }
        let unused = NumaMask::from_bits(unused);
        if unused.count() >= 2 && self.lookup(unused).is_some() {
            return false;
        }
        !self
            .reusable
            .keys()
            .any(|bits| self.lookup(NumaMask::from_bits(*bits)).is_some())
    }

    /// The kubelet's explicit list (ascending as `IterateBitMasks` visits masks).
    pub fn materialize(&self) -> Vec<TopologyHint> {
        crate::topologymanager::subsets::materialize_with(&self.ids, |m| self.lookup(m))
    }

    /// The kubelet's `findBestHint` over the hints that contain `base`: preferred first,
    /// then narrowest (fewest nodes, then lowest value). Searches supersets of `base` by
    /// increasing width.
    pub fn best_containing(&self, base: NumaMask) -> Option<TopologyHint> {
        if !base.is_subset_of(self.universe) {
            return None;
        }
        let rest: Vec<usize> = self
            .ids
            .iter()
            .copied()
            .filter(|id| !base.is_set(*id))
            .collect();
        let mut best: Option<TopologyHint> = None;
        let consider = |m: NumaMask, best: &mut Option<TopologyHint>| {
            if let Some(p) = self.lookup(m) {
                let better = match best {
                    None => true,
                    Some(b) => {
                        let bm = b.affinity.unwrap_or_default();
                        (p && !b.preferred) || (p == b.preferred && m.is_narrower_than(bm))
                    }
                };
                if better {
                    *best = Some(TopologyHint {
                        affinity: Some(m),
                        preferred: p,
                    });
                }
            }
        };
        if !base.is_empty() {
            consider(base, &mut best);
        }
        for extra in 1..=rest.len() {
            // A preferred hint found at some width beats every wider one.
            if best.is_some_and(|b| b.preferred) {
                break;
            }
            any_mask_of_width(&rest, extra, |m| {
                consider(m.or(base), &mut best);
                false
            });
        }
        best
    }
}

/// `regenerateHints`: a container that already has blocks gets its blocks' affinities back
/// (preferred). When the blocks do not match the request (another count of resources, a
/// resource not requested, another size, as an init container's blocks after later
/// containers reused its memory) the kubelet returns a nil map: no preference, not empty
/// lists (which would reject the pod).
fn regenerate(blocks: &[Block], request: &BTreeMap<MemoryResource, u64>) -> MemoryHints {
    if blocks.len() != request.len() {
        return MemoryHints::None;
    }
    let mut out: BTreeMap<String, Vec<TopologyHint>> =
        request.keys().map(|r| (r.name(), Vec::new())).collect();
    for b in blocks {
        if request.get(&b.resource) != Some(&b.size) {
            return MemoryHints::None;
        }
        out.entry(b.resource.name())
            .or_default()
            .push(TopologyHint {
                affinity: Some(b.affinity),
                preferred: true,
            });
    }
    MemoryHints::Explicit(out)
}

/// The narrowest width of a subset of nodes whose allocatable amounts reach every requested
/// amount, or `None`. One resource: the largest nodes first. Several: a depth-first search
/// per width, pruned by a per-resource optimistic bound (the suffix maximum times the
/// nodes still to pick), starting at the widest single-resource lower bound.
pub(super) fn min_affinity(ids: &[usize], alloc: &[Vec<u64>], req: &[u64]) -> Option<usize> {
    let nres = req.len();
    let per_res = |r: usize| -> Vec<u64> { alloc.iter().map(|v| v[r]).collect() };
    let mut lower = 1;
    for (r, want) in req.iter().enumerate() {
        lower = lower.max(min_width_single(&per_res(r), *want)?);
    }
    if nres <= 1 {
        return Some(lower);
    }
    // suffix_max[i][r] = max over nodes i.. of alloc[r]
    let n = ids.len();
    let mut suffix_max = vec![vec![0u64; nres]; n + 1];
    for i in (0..n).rev() {
        for r in 0..nres {
            suffix_max[i][r] = suffix_max[i + 1][r].max(alloc[i][r]);
        }
    }
    fn dfs(
        i: usize,
        left: usize,
        acc: &mut Vec<u64>,
        alloc: &[Vec<u64>],
        req: &[u64],
        suffix_max: &[Vec<u64>],
    ) -> bool {
        if left == 0 {
            return acc.iter().zip(req).all(|(a, r)| a >= r);
        }
        if alloc.len() - i < left {
            return false;
        }
        let hopeless = (0..req.len())
            .any(|r| acc[r].saturating_add(suffix_max[i][r].saturating_mul(left as u64)) < req[r]);
        if hopeless {
            return false;
        }
        for (r, a) in acc.iter_mut().enumerate() {
            *a = a.saturating_add(alloc[i][r]);
        }
        let took = dfs(i + 1, left - 1, acc, alloc, req, suffix_max);
        for (r, a) in acc.iter_mut().enumerate() {
            *a = a.saturating_sub(alloc[i][r]);
        }
        took || dfs(i + 1, left, acc, alloc, req, suffix_max)
    }
    (lower..=n).find(|&w| dfs(0, w, &mut vec![0; nres], alloc, req, &suffix_max))
}

impl MemoryManager {
    /// Hints for one container (kubelet `GetTopologyHints`).
    pub fn container_hints(&self, pod: &Pod, container: &Container) -> MemoryHints {
        if pod.qos_class() != QosClass::Guaranteed {
            return MemoryHints::None;
        }
        let request = container_request(container);
        if let Some(blocks) = self.blocks(&pod.uid, &container.name) {
            return regenerate(blocks, &request);
        }
        self.calculate(pod, &request)
    }

    /// Hints for the whole pod (kubelet `GetPodTopologyHints`).
    pub fn pod_hints(&self, pod: &Pod) -> MemoryHints {
        if pod.qos_class() != QosClass::Guaranteed {
            return MemoryHints::None;
        }
        let request = pod_request(pod);
        for c in pod.all_containers() {
            if let Some(blocks) = self.blocks(&pod.uid, &c.name) {
                return regenerate(blocks, &request);
            }
        }
        self.calculate(pod, &request)
    }

    /// The implicit `calculateHints` list for `request` (nil map when nothing is requested).
    fn calculate(&self, pod: &Pod, request: &BTreeMap<MemoryResource, u64>) -> MemoryHints {
        if request.is_empty() {
            // The kubelet builds an empty map, which the merge reads as "don't care".
            return MemoryHints::Explicit(BTreeMap::new());
        }
        let source = self.hint_source(&pod.uid, request);
        if source.is_empty() {
            // No mask qualifies: the kubelet's map stays empty, i.e. "don't care".
            return MemoryHints::Explicit(BTreeMap::new());
        }
        MemoryHints::Implicit {
            resources: request.keys().map(MemoryResource::name).collect(),
            source: Arc::new(source),
        }
    }

    /// The `calculateHints` list for `request` as `pod_uid` would see it (with its
    /// reusable init-container memory), whether or not it is empty.
    pub fn hint_source(
        &self,
        pod_uid: &str,
        request: &BTreeMap<MemoryResource, u64>,
    ) -> MemoryHintSource {
        let res: Vec<MemoryResource> = request.keys().copied().collect();
        let col = |f: fn(&MemoryTable) -> u64| -> Vec<Vec<u64>> {
            self.ids
                .iter()
                .map(|id| {
                    res.iter()
                        .map(|r| self.nodes[id].tables.get(r).map_or(0, f))
                        .collect()
                })
                .collect()
        };
        let allocatable = col(|t| t.allocatable);
        let free = col(|t| t.free);
        let req: Vec<u64> = request.values().copied().collect();
        let mut reusable: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        if let Some(per) = self.reusable.get(pod_uid) {
            for ((bits, r), v) in per {
                if let Some(i) = res.iter().position(|x| x == r) {
                    reusable.entry(*bits).or_insert_with(|| vec![0; res.len()])[i] = *v;
                }
            }
        }
        let min_affinity = min_affinity(&self.ids, &allocatable, &req).unwrap_or(self.ids.len());
        MemoryHintSource {
            universe: NumaMask::new(self.ids.iter().copied()).unwrap_or_default(),
            ids: self.ids.clone(),
            allocatable,
            free,
            assignments: self
                .ids
                .iter()
                .map(|id| self.nodes[id].assignments)
                .collect(),
            cells: self.ids.iter().map(|id| self.nodes[id].cells).collect(),
            reusable,
            request: req,
            min_affinity,
        }
    }
}
