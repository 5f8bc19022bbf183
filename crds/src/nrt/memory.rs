//! The Static Memory Manager's tables per NUMA node from what the kubelet reports through
//! PodResources: `GetAllocatableResources` gives, per NUMA node and memory type, what
//! containers may get (the node's size minus `--reserved-memory`, and for `memory` minus
//! the node's huge pages); `List` gives each container's pinned blocks. With policy `None`
//! the kubelet reports neither, and the builder uses the sizes alone.
//!
//! Arithmetic (kubelet `cm/memorymanager/policy_static.go`): per node and resource,
//! `total` is the node's size (`MemTotal`, or pages x page size), `allocatable` the value
//! the kubelet reports (0 when it reports none: it leaves out tables with nothing
//! allocatable), `system_reserved = total - allocatable` (for `memory` minus the huge
//! pages too), and each pinned block is taken from the nodes of its group in ascending
//! order, each node giving what it still has free before the next one is used, exactly as
//! the kubelet's `updateMachineState` fills a cross-NUMA group.
//!
//! Errors: a block on a NUMA node the machine does not have, a memory type the node does
//! not have, an allocatable amount above the node's size, and pinned blocks that do not fit
//! in what is allocatable are refused, naming the block.

use std::collections::BTreeMap;

use nodetopo_engine::memorymanager::{MemoryResource, MemoryTable};
use nodetopo_engine::CpuTopology;

/// One memory block as PodResources reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryBlock {
    /// Who holds it (`namespace/pod/container`), or `allocatable`, for error messages.
    pub owner: String,
    /// `memory` or `hugepages-<size>`.
    pub resource: String,
    /// Bytes.
    pub size: u64,
    /// The NUMA nodes of the block (one for allocatable blocks, the group for pinned ones).
    pub numa_nodes: Vec<usize>,
}

/// Per NUMA node, per memory resource, the Memory Manager's table.
pub type MemoryTables = BTreeMap<usize, BTreeMap<MemoryResource, MemoryTable>>;

/// Why the kubelet's memory report does not fit this machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryReportError {
    /// A memory type that is neither `memory` nor `hugepages-<size>`.
    #[error("memory block of {owner}: resource {resource:?} is not memory or hugepages-<size>")]
    BadResource {
        /// The holder.
        owner: String,
        /// The type.
        resource: String,
    },
    /// A NUMA node the machine does not have, or a resource that node does not have.
    #[error(
        "memory block of {owner}: {resource} on NUMA node {node}, which this machine does not have"
    )]
    NotOnMachine {
        /// The holder.
        owner: String,
        /// The type.
        resource: String,
        /// The node.
        node: usize,
    },
    /// A block without NUMA nodes.
    #[error("memory block of {owner}: {resource} names no NUMA node")]
    NoNode {
        /// The holder.
        owner: String,
        /// The type.
        resource: String,
    },
    /// Allocatable above the node's size.
    #[error("allocatable {resource} on NUMA node {node} is {allocatable} bytes, above the node's {limit} bytes")]
    AllocatableTooLarge {
        /// The type.
        resource: String,
        /// The node.
        node: usize,
        /// Reported.
        allocatable: u64,
        /// The node's size (memory: minus its huge pages).
        limit: u64,
    },
    /// Pinned blocks above what is allocatable.
    #[error("memory block of {owner}: {size} bytes of {resource} do not fit in what NUMA nodes {nodes:?} still have allocatable ({short} bytes short)")]
    Overcommitted {
        /// The holder.
        owner: String,
        /// The type.
        resource: String,
        /// The block size.
        size: u64,
        /// The group.
        nodes: Vec<usize>,
        /// How much did not fit.
        short: u64,
    },
}

/// The resource of a PodResources memory type (`memory`, `hugepages-2Mi`).
pub fn memory_resource(owner: &str, name: &str) -> Result<MemoryResource, MemoryReportError> {
    let bad = || MemoryReportError::BadResource {
        owner: owner.to_string(),
        resource: name.to_string(),
    };
    if name == "memory" {
        return Ok(MemoryResource::Memory);
    }
    let size = name.strip_prefix("hugepages-").ok_or_else(bad)?;
    let page_bytes = nodetopo_engine::quantity::parse_units(size).map_err(|_| bad())?;
    if page_bytes == 0 {
        return Err(bad());
    }
    Ok(MemoryResource::HugePages { page_bytes })
}

/// The node sizes from the topology: per NUMA node, `memory` (MemTotal, when known) and
/// every huge page size (pages x size), with the bytes the huge pages take.
fn sizes(topology: &CpuTopology) -> BTreeMap<usize, (BTreeMap<MemoryResource, u64>, u64)> {
    let mut out = BTreeMap::new();
    for n in topology.numa_nodes() {
        let mut m = BTreeMap::new();
        let mut huge = 0u64;
        for (kib, pages) in &n.hugepages {
            let page_bytes = kib.saturating_mul(1024);
            let bytes = pages.saturating_mul(page_bytes);
            huge = huge.saturating_add(bytes);
            m.insert(MemoryResource::HugePages { page_bytes }, bytes);
        }
        if let Some(total) = n.memory_bytes {
            m.insert(MemoryResource::Memory, total);
        }
        out.insert(n.id, (m, huge));
    }
    out
}

/// The Static Memory Manager's tables from the kubelet's `allocatable` and `pinned` blocks
/// (see the module documentation).
pub fn memory_tables(
    topology: &CpuTopology,
    allocatable: &[MemoryBlock],
    pinned: &[MemoryBlock],
) -> Result<MemoryTables, MemoryReportError> {
    let sizes = sizes(topology);
    let mut tables: MemoryTables = BTreeMap::new();
    for (node, (m, _)) in &sizes {
        let t = tables.entry(*node).or_default();
        for (r, total) in m {
            t.insert(
                *r,
                MemoryTable {
                    total: *total,
                    system_reserved: 0,
                    allocatable: 0,
                    free: 0,
                    reserved: 0,
                },
            );
        }
    }
    let locate =
        |b: &MemoryBlock, node: usize, r: MemoryResource| MemoryReportError::NotOnMachine {
            owner: b.owner.clone(),
            resource: r.name(),
            node,
        };
    for b in allocatable {
        let r = memory_resource(&b.owner, &b.resource)?;
        let Some(&node) = b.numa_nodes.first() else {
            return Err(MemoryReportError::NoNode {
                owner: b.owner.clone(),
                resource: b.resource.clone(),
            });
        };
        let huge = sizes.get(&node).map(|(_, h)| *h).unwrap_or(0);
        let t = tables
            .get_mut(&node)
            .and_then(|t| t.get_mut(&r))
            .ok_or_else(|| locate(b, node, r))?;
        t.allocatable = t.allocatable.saturating_add(b.size);
        let limit = match r {
            MemoryResource::Memory => t.total.saturating_sub(huge),
            MemoryResource::HugePages { .. } => t.total,
        };
        if t.allocatable > limit {
            return Err(MemoryReportError::AllocatableTooLarge {
                resource: r.name(),
                node,
                allocatable: t.allocatable,
                limit,
            });
        }
    }
    for (node, t) in tables.iter_mut() {
        let huge = sizes.get(node).map(|(_, h)| *h).unwrap_or(0);
        for (r, table) in t.iter_mut() {
            let limit = match r {
                MemoryResource::Memory => table.total.saturating_sub(huge),
                MemoryResource::HugePages { .. } => table.total,
            };
            table.system_reserved = limit - table.allocatable;
            table.free = table.allocatable;
        }
    }
    for b in pinned {
        let r = memory_resource(&b.owner, &b.resource)?;
        if b.numa_nodes.is_empty() {
            return Err(MemoryReportError::NoNode {
                owner: b.owner.clone(),
                resource: b.resource.clone(),
            });
        }
        let mut group = b.numa_nodes.clone();
        group.sort_unstable();
        group.dedup();
        for node in &group {
            if tables.get(node).and_then(|t| t.get(&r)).is_none() {
                return Err(locate(b, *node, r));
            }
        }
        let mut left = b.size;
        for node in &group {
            if left == 0 {
                break;
            }
            if let Some(t) = tables.get_mut(node).and_then(|t| t.get_mut(&r)) {
                let take = left.min(t.free);
                t.free -= take;
                t.reserved += take;
                left -= take;
            }
        }
        if left > 0 {
            return Err(MemoryReportError::Overcommitted {
                owner: b.owner.clone(),
                resource: r.name(),
                size: b.size,
                nodes: group,
                short: left,
            });
        }
    }
    Ok(tables)
}
