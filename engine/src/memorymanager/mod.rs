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

use crate::pod::{Container, Pod};
use crate::topology::CpuTopology;
use crate::topologymanager::NumaMask;

mod allocation;
mod hints;
mod source_impl;
mod state;

pub use allocation::MemorySnapshot;
#[cfg(test)]
use hints::min_affinity;
pub use hints::{MemoryHintSource, MemoryHints};
use state::table;
pub use state::{Block, MemoryResource, MemoryTable, NodeMemory, ReservedMemory};

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
}

#[cfg(test)]
mod tests;
