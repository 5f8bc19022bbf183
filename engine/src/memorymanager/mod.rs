//! The Memory Manager's static policy as a hint provider, with its allocation bookkeeping
//! (kubelet `pkg/kubelet/cm/memorymanager/policy_static.go`).
//!
//! Each NUMA node holds one table per memory resource (`memory`, `hugepages-<size>`):
//! allocatable = total - system reserved (and, for regular memory, minus the node's huge
//! pages), free, reserved. Guaranteed containers get *blocks*: a resource, a size and a
//! NUMA affinity. A block spanning several nodes makes those nodes a *group* (`Cells`): from
//! then on they are used together or not at all, and a node used alone is never joined to a
//! group. The hint rules, per mask over all NUMA nodes of the machine (CPU-less ones too):
//!
//! - the mask's *allocatable* sums reach every requested amount (otherwise not a hint, and
//!   the mask does not count towards `minAffinitySize`);
//! - a single node already in a group of several is no hint;
//! - a wider mask containing a used node is a hint only if that node's group is exactly the
//!   mask;
//! - the mask's *free* sums plus memory reusable from the pod's init containers under that
//!   exact mask reach every requested amount;
//! - preferred iff the mask's width equals `minAffinitySize`, the narrowest width whose
//!   allocatable could hold the request.
//!
//! When no mask qualifies the kubelet returns an empty (non-nil) map, which the topology
//! manager reads as "no preference"; the allocation then fails. [`MemoryManager`] does the
//! same, so rejections carry the kubelet's Memory Manager message.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::pod::{Container, Pod, QosClass};
use crate::topology::CpuTopology;
use crate::topologymanager::{NumaMask, TopologyHint};

use crate::topologymanager::subsets::{any_mask_of_width, min_width_single, within};

/// A memory resource the Memory Manager tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemoryResource {
    /// Regular memory (`memory`).
    Memory,
    /// Huge pages of one page size (`hugepages-2Mi`, ...).
    HugePages {
        /// Page size in bytes.
        page_bytes: u64,
    },
}

impl MemoryResource {
    /// The Kubernetes resource name: `memory`, `hugepages-2Mi`, `hugepages-1Gi`.
    pub fn name(&self) -> String {
        match self {
            MemoryResource::Memory => "memory".to_string(),
            MemoryResource::HugePages { page_bytes } => {
                format!("hugepages-{}", binary_si(*page_bytes))
            }
        }
    }
}

/// A byte count in the Kubernetes BinarySI form used in hugepage resource names.
fn binary_si(bytes: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (1 << 50, "Pi"),
        (1 << 40, "Ti"),
        (1 << 30, "Gi"),
        (1 << 20, "Mi"),
        (1 << 10, "Ki"),
    ];
    for (size, unit) in UNITS {
        if bytes >= size && bytes % size == 0 {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

/// One node's accounting for one resource (kubelet `state.MemoryTable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryTable {
    /// Total size on the node.
    pub total: u64,
    /// Reserved for the system (`--reserved-memory`).
    pub system_reserved: u64,
    /// What containers may get.
    pub allocatable: u64,
    /// Allocatable and not yet given out.
    pub free: u64,
    /// Given out to containers.
    pub reserved: u64,
}

/// One NUMA node's state (kubelet `state.NUMANodeState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMemory {
    /// Number of blocks (per resource) placed on the node.
    pub assignments: usize,
    /// The group the node belongs to (itself alone until a multi-node block lands).
    pub cells: NumaMask,
    /// Accounting per resource.
    pub tables: BTreeMap<MemoryResource, MemoryTable>,
}

/// Memory given to one container: a resource, its size, the NUMA nodes it may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// The NUMA nodes.
    pub affinity: NumaMask,
    /// Requested size in bytes.
    pub size: u64,
    /// The resource.
    pub resource: MemoryResource,
}

/// `--reserved-memory`: per NUMA node id, per resource, bytes withheld from containers.
pub type ReservedMemory = BTreeMap<usize, BTreeMap<MemoryResource, u64>>;

/// Why the Memory Manager could not be set up or could not allocate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// The topology lacks a node's memory size, which the static policy needs.
    #[error("memory manager: NUMA node {0} has no known memory size (node{0}/meminfo missing)")]
    UnknownNodeMemory(usize),
    /// Reserved memory names a NUMA node the machine does not have.
    #[error(
        "memory manager: reserved memory names NUMA node {0}, which this machine does not have"
    )]
    UnknownReservedNode(usize),
    /// More memory reserved on a node than it has.
    #[error("memory manager: NUMA node {node} reserves {reserved} bytes of {resource} but has only {total}")]
    ReservedTooLarge {
        /// The node.
        node: usize,
        /// The resource name.
        resource: String,
        /// Reserved bytes.
        reserved: u64,
        /// What the node has.
        total: u64,
    },
    /// The Static policy without any reserved regular memory (kubelet `NewPolicyStatic`).
    #[error("[memorymanager] you should specify the system reserved memory")]
    NoSystemReserved,
    /// More than 64 NUMA nodes.
    #[error("memory manager: NUMA node id {0} is above 63")]
    NodeIdTooLarge(usize),
    /// No mask can hold the request (kubelet `getDefaultHint`).
    #[error("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available")]
    NoDefaultAffinity,
    /// The default hint is not preferred although the merged hint was.
    #[error("[memorymanager] failed to find the default preferred hint")]
    NoDefaultPreferred,
    /// No hint contains the merged affinity and holds the request.
    #[error("[memorymanager] failed to find NUMA nodes to extend the current topology hint")]
    NoExtension,
    /// The extended hint is not preferred although the merged hint was.
    #[error("[memorymanager] failed to find the extended preferred hint")]
    NoExtendedPreferred,
    /// The chosen nodes would mix a node used alone (or by another group) into a
    /// multi-node block (kubelet `isAffinityViolatingNUMAAllocations`).
    #[error("[memorymanager] preferred hint violates NUMA node allocation")]
    ViolatesNumaAllocation,
}

impl MemoryError {
    /// The admission reason the kubelet reports: Memory Manager errors are plain errors,
    /// which the kubelet's admission handler files as `UnexpectedAdmissionError`.
    pub fn reason(&self) -> &'static str {
        "UnexpectedAdmissionError"
    }

    /// The rejection message the kubelet reports: its admission handler wraps a plain
    /// error as `Allocate failed due to <error>, which is unexpected`
    /// (`admission.GetPodAdmitResult`; checked against kubelet v1.37.2 by the oracle).
    pub fn admission_message(&self) -> String {
        format!("Allocate failed due to {self}, which is unexpected")
    }
}

/// The Memory Manager with the static policy: machine state, container blocks, and the
/// memory of init containers that the pod's later containers may reuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryManager {
    nodes: BTreeMap<usize, NodeMemory>,
    ids: Vec<usize>,
    blocks: BTreeMap<String, BTreeMap<String, Vec<Block>>>,
    /// pod uid -> (mask bits, resource) -> reusable bytes (kubelet
    /// `initContainersReusableMemory`; only the pod being admitted keeps entries).
    reusable: BTreeMap<String, BTreeMap<(u64, MemoryResource), u64>>,
}

/// The requested memory resources of one container (requests of `memory` and
/// `hugepages-*`), as the kubelet's `getRequestedResources`.
pub fn container_request(c: &Container) -> BTreeMap<MemoryResource, u64> {
    let mut out = BTreeMap::new();
    if let Some(m) = c.requests.memory_bytes {
        out.insert(MemoryResource::Memory, m);
    }
    for (page, amount) in &c.requests.hugepages {
        out.insert(MemoryResource::HugePages { page_bytes: *page }, *amount);
    }
    out
}

/// The pod's effective request (kubelet `getPodRequestedResources`): per resource the larger
/// of the long-running containers' sum (app containers plus sidecars) and the peak of any
/// regular init container (counting the sidecars started before it).
pub fn pod_request(pod: &Pod) -> BTreeMap<MemoryResource, u64> {
    let mut by_init: BTreeMap<MemoryResource, u64> = BTreeMap::new();
    let mut by_sidecars: BTreeMap<MemoryResource, u64> = BTreeMap::new();
    for c in &pod.init_containers {
        for (r, q) in container_request(c) {
            let peak = by_init.entry(r).or_insert(0);
            let side = by_sidecars.entry(r).or_insert(0);
            if c.restartable {
                *side += q;
            } else if *side + q > *peak {
                *peak = *side + q;
            }
        }
    }
    let mut by_app: BTreeMap<MemoryResource, u64> = BTreeMap::new();
    for c in &pod.containers {
        for (r, q) in container_request(c) {
            *by_app.entry(r).or_insert(0) += q;
        }
    }
    let mut out = BTreeMap::new();
    for (r, app) in by_app {
        let long_running = app + by_sidecars.get(&r).copied().unwrap_or(0);
        let init = by_init.get(&r).copied().unwrap_or(0);
        out.insert(r, long_running.max(init));
    }
    out
}

/// The part of a [`MemoryManager`] one pod's admission can change.
#[derive(Debug, Clone)]
pub struct MemorySnapshot {
    nodes: BTreeMap<usize, NodeMemory>,
    pod_blocks: Option<BTreeMap<String, Vec<Block>>>,
    reusable: BTreeMap<String, BTreeMap<(u64, MemoryResource), u64>>,
}

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
    ids: Vec<usize>,
    universe: NumaMask,
    /// Per node (indexed like `ids`): allocatable and free per requested resource,
    /// assignments, group.
    allocatable: Vec<Vec<u64>>,
    free: Vec<Vec<u64>>,
    assignments: Vec<usize>,
    cells: Vec<NumaMask>,
    /// Reusable bytes per resource under an exact mask.
    reusable: BTreeMap<u64, Vec<u64>>,
    request: Vec<u64>,
    /// `minAffinitySize`.
    min_affinity: usize,
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

/// The kubelet's `NewPolicyStatic` check: the Static policy needs some regular memory
/// reserved for the system on at least one node.
pub fn check_system_reserved(reserved: &ReservedMemory) -> Result<(), MemoryError> {
    let total = reserved
        .values()
        .filter_map(|m| m.get(&MemoryResource::Memory))
        .fold(0u64, |a, b| a.saturating_add(*b));
    if total == 0 {
        return Err(MemoryError::NoSystemReserved);
    }
    Ok(())
}

impl MemoryManager {
    /// The default machine state (kubelet `getDefaultMachineState`) for every NUMA node of
    /// `t`, CPU-less ones included. Every node needs a known memory size.
    pub fn new(t: &CpuTopology, reserved: &ReservedMemory) -> Result<Self, MemoryError> {
        for id in reserved.keys() {
            if !t.numa_nodes().iter().any(|n| n.id == *id) {
                return Err(MemoryError::UnknownReservedNode(*id));
            }
        }
        let mut nodes = BTreeMap::new();
        for n in t.numa_nodes() {
            if n.id > 63 {
                return Err(MemoryError::NodeIdTooLarge(n.id));
            }
            let total_mem = n.memory_bytes.ok_or(MemoryError::UnknownNodeMemory(n.id))?;
            let node_reserved = reserved.get(&n.id);
            let res_of =
                |r: MemoryResource| node_reserved.and_then(|m| m.get(&r)).copied().unwrap_or(0);
            let mut tables = BTreeMap::new();
            let mut huge_total = 0u64;
            for (page_kib, pages) in &n.hugepages {
                let r = MemoryResource::HugePages {
                    page_bytes: page_kib * 1024,
                };
                let total = pages.saturating_mul(page_kib * 1024);
                huge_total = huge_total.saturating_add(total);
                tables.insert(r, table(n.id, r, total, res_of(r))?);
            }
            let mem_total = total_mem.saturating_sub(huge_total);
            let mut mt = table(
                n.id,
                MemoryResource::Memory,
                mem_total,
                res_of(MemoryResource::Memory),
            )?;
            mt.total = total_mem;
            tables.insert(MemoryResource::Memory, mt);
            nodes.insert(
                n.id,
                NodeMemory {
                    assignments: 0,
                    cells: NumaMask::from_bits(1 << n.id),
                    tables,
                },
            );
        }
        let ids = nodes.keys().copied().collect();
        Ok(Self {
            nodes,
            ids,
            blocks: BTreeMap::new(),
            reusable: BTreeMap::new(),
        })
    }

    /// Per-node state, by node id.
    pub fn nodes(&self) -> &BTreeMap<usize, NodeMemory> {
        &self.nodes
    }

    /// The blocks of one container, if it has any.
    pub fn blocks(&self, pod_uid: &str, container: &str) -> Option<&[Block]> {
        self.blocks
            .get(pod_uid)
            .and_then(|c| c.get(container))
            .map(Vec::as_slice)
    }

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

    /// Gives memory to a container under the merged hint (kubelet static `Allocate`).
    /// `hint` is the topology manager's affinity (`None` = no affinity). Not Guaranteed: no-op.
    pub fn allocate(
        &mut self,
        pod: &Pod,
        container: &Container,
        hint: Option<&TopologyHint>,
    ) -> Result<(), MemoryError> {
        if pod.qos_class() != QosClass::Guaranteed {
            return Ok(());
        }
        if let Some(blocks) = self
            .blocks(&pod.uid, &container.name)
            .map(<[Block]>::to_vec)
        {
            self.update_reusable(pod, container, &blocks);
            return Ok(());
        }
        let request = container_request(container);
        if request.is_empty() {
            return Ok(());
        }
        let given = hint.copied().unwrap_or(TopologyHint {
            affinity: None,
            preferred: false,
        });
        let source = self.hint_source(&pod.uid, &request);
        let mut best = given;
        if given.affinity.is_none() {
            if source.is_empty() {
                return Err(MemoryError::NoDefaultAffinity);
            }
            let default = source
                .best_containing(NumaMask::EMPTY)
                .ok_or(MemoryError::NoDefaultAffinity)?;
            if !default.preferred && given.preferred {
                return Err(MemoryError::NoDefaultPreferred);
            }
            best = default;
        }
        let mask = best.affinity.unwrap_or_default();
        if !self.satisfies(mask, &request) {
            if source.is_empty() {
                return Err(MemoryError::NoExtension);
            }
            let ext = source
                .best_containing(mask)
                .ok_or(MemoryError::NoExtension)?;
            if !ext.preferred && best.preferred {
                return Err(MemoryError::NoExtendedPreferred);
            }
            best = ext;
        }
        let mask = best.affinity.unwrap_or_default();
        if self.violates_groups(mask) {
            return Err(MemoryError::ViolatesNumaAllocation);
        }
        let mut blocks = Vec::new();
        for (r, size) in &request {
            blocks.push(Block {
                affinity: mask,
                size: *size,
                resource: *r,
            });
            let reusable = self.pod_reusable(&pod.uid, mask, *r);
            let remaining = size.saturating_sub(reusable);
            self.take(mask, *r, remaining);
        }
        self.blocks
            .entry(pod.uid.clone())
            .or_default()
            .insert(container.name.clone(), blocks.clone());
        self.update_reusable(pod, container, &blocks);
        self.update_init_blocks(pod, container, &blocks);
        Ok(())
    }

    /// `updateInitContainersMemoryBlocks`: memory a container reuses from the regular init
    /// containers before it (same resource, same NUMA nodes) is taken off their blocks, so
    /// the pod's blocks add up to what it holds and removing the pod gives back exactly
    /// that. An init block can shrink to size 0.
    fn update_init_blocks(&mut self, pod: &Pod, container: &Container, blocks: &[Block]) {
        let Some(per_pod) = self.blocks.get_mut(&pod.uid) else {
            return;
        };
        for b in blocks {
            let mut left = b.size;
            for init in &pod.init_containers {
                if init.name == container.name || left == 0 {
                    break;
                }
                if init.restartable {
                    continue;
                }
                let Some(init_blocks) = per_pod.get_mut(&init.name) else {
                    continue;
                };
                for x in init_blocks.iter_mut() {
                    if x.size == 0 || x.resource != b.resource || x.affinity != b.affinity {
                        continue;
                    }
                    let used = x.size.min(left);
                    x.size -= used;
                    left -= used;
                }
            }
        }
    }

    /// `isAffinityViolatingNUMAAllocations`: a multi-node `mask` may not include a used node
    /// that serves single-node blocks or belongs to a different group.
    fn violates_groups(&self, mask: NumaMask) -> bool {
        if mask.count() == 1 {
            return false;
        }
        mask.ids()
            .filter_map(|id| self.nodes.get(&id))
            .any(|n| n.assignments > 0 && (n.cells.count() == 1 || n.cells != mask))
    }

    /// True when `mask`'s free memory holds every requested amount (`isAffinitySatisfyRequest`).
    fn satisfies(&self, mask: NumaMask, request: &BTreeMap<MemoryResource, u64>) -> bool {
        request.iter().all(|(r, want)| {
            let free: u64 = mask
                .ids()
                .filter_map(|id| self.nodes.get(&id))
                .map(|n| n.tables.get(r).map_or(0, |t| t.free))
                .fold(0, u64::saturating_add);
            free >= *want
        })
    }

    fn pod_reusable(&self, pod_uid: &str, mask: NumaMask, r: MemoryResource) -> u64 {
        self.reusable
            .get(pod_uid)
            .and_then(|m| m.get(&(mask.bits(), r)))
            .copied()
            .unwrap_or(0)
    }

    /// `updateMachineState`: every node of the mask joins the group and counts the block;
    /// the size is taken from the nodes in id order.
    fn take(&mut self, mask: NumaMask, r: MemoryResource, mut size: u64) {
        for id in mask.ids() {
            let Some(node) = self.nodes.get_mut(&id) else {
                continue;
            };
            node.assignments += 1;
            node.cells = mask;
            if size == 0 {
                continue;
            }
            let Some(t) = node.tables.get_mut(&r) else {
                continue;
            };
            let used = t.free.min(size);
            t.free -= used;
            t.reserved += used;
            size -= used;
        }
    }

    /// `updatePodReusableMemory`: regular init containers leave their blocks reusable (the
    /// largest per mask and resource); app containers and sidecars consume reusable memory.
    fn update_reusable(&mut self, pod: &Pod, container: &Container, blocks: &[Block]) {
        self.reusable.retain(|uid, _| uid == &pod.uid);
        let regular_init = pod
            .init_containers
            .iter()
            .any(|c| c.name == container.name && !c.restartable);
        let per = self.reusable.entry(pod.uid.clone()).or_default();
        for b in blocks {
            let e = per.entry((b.affinity.bits(), b.resource)).or_insert(0);
            if regular_init {
                *e = (*e).max(b.size);
            } else {
                *e = e.saturating_sub(b.size);
            }
        }
    }

    /// What admitting `pod_uid` can change: the per-node tables, that pod's blocks and the
    /// reusable-memory bookkeeping. Restoring it with [`MemoryManager::rollback`] undoes a
    /// rejected admission exactly, at O(nodes) instead of a copy of every pod's blocks.
    pub fn snapshot(&self, pod_uid: &str) -> MemorySnapshot {
        MemorySnapshot {
            nodes: self.nodes.clone(),
            pod_blocks: self.blocks.get(pod_uid).cloned(),
            reusable: self.reusable.clone(),
        }
    }

    /// Restores what [`MemoryManager::snapshot`] saved for `pod_uid`.
    pub fn rollback(&mut self, pod_uid: &str, snap: MemorySnapshot) {
        self.nodes = snap.nodes;
        match snap.pod_blocks {
            Some(b) => {
                self.blocks.insert(pod_uid.to_string(), b);
            }
            None => {
                self.blocks.remove(pod_uid);
            }
        }
        self.reusable = snap.reusable;
    }

    /// Undoes a rejected admission of `pod_uid` as the kubelet does: its stale-state cleanup
    /// releases the pod's new blocks through `RemoveContainer`, so the memory goes back to
    /// the nodes of each block's group in id order, which need not be the nodes it was
    /// taken from (a group's free/reserved split can move; kubelet v1.37.2, checked by the
    /// oracle), and the pod's reusable init-container memory stays recorded. A pod that
    /// held blocks before this admission is restored exactly from `snap`.
    pub fn release_rejected(&mut self, pod_uid: &str, snap: MemorySnapshot) {
        if snap.pod_blocks.is_some() {
            self.rollback(pod_uid, snap);
            return;
        }
        let names: Vec<String> = self
            .blocks
            .get(pod_uid)
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        for n in names {
            self.remove_container(pod_uid, &n);
        }
    }

    /// Releases a container's blocks (kubelet `RemoveContainer`): memory goes back to the
    /// nodes in id order; a node with no assignments left leaves its group.
    pub fn remove_container(&mut self, pod_uid: &str, container: &str) {
        let Some(blocks) = self
            .blocks
            .get_mut(pod_uid)
            .and_then(|c| c.remove(container))
        else {
            return;
        };
        if self.blocks.get(pod_uid).is_some_and(BTreeMap::is_empty) {
            self.blocks.remove(pod_uid);
        }
        for b in blocks {
            let mut size = b.size;
            for id in b.affinity.ids() {
                let Some(node) = self.nodes.get_mut(&id) else {
                    continue;
                };
                node.assignments = node.assignments.saturating_sub(1);
                if node.assignments == 0 {
                    node.cells = NumaMask::from_bits(1 << id);
                }
                if size == 0 {
                    continue;
                }
                let Some(t) = node.tables.get_mut(&b.resource) else {
                    continue;
                };
                let back = t.reserved.min(size);
                t.reserved -= back;
                t.free += back;
                size -= back;
            }
        }
    }

    /// Releases every container of a pod and forgets its reusable memory.
    pub fn remove_pod(&mut self, pod_uid: &str) {
        let names: Vec<String> = self
            .blocks
            .get(pod_uid)
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        for n in names {
            self.remove_container(pod_uid, &n);
        }
        self.reusable.remove(pod_uid);
    }
}

fn table(
    node: usize,
    r: MemoryResource,
    total: u64,
    reserved: u64,
) -> Result<MemoryTable, MemoryError> {
    if reserved > total {
        return Err(MemoryError::ReservedTooLarge {
            node,
            resource: r.name(),
            reserved,
            total,
        });
    }
    Ok(MemoryTable {
        total,
        system_reserved: reserved,
        allocatable: total - reserved,
        free: total - reserved,
        reserved: 0,
    })
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
fn min_affinity(ids: &[usize], alloc: &[Vec<u64>], req: &[u64]) -> Option<usize> {
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

mod source_impl;

#[cfg(test)]
mod tests;
