//! The Memory Manager's machine state (kubelet `cm/memorymanager/state/`): per NUMA node
//! one table per memory resource, the node's group, and the blocks containers hold.

use std::collections::BTreeMap;

use super::MemoryError;
use crate::topologymanager::NumaMask;

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

/// One resource's table of a node with `total` bytes of which `reserved` are reserved for
/// the system; refuses a reservation larger than the node has.
pub(super) fn table(
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
