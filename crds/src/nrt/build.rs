//! The pure builder: a node's topology, its CPU/topology/memory manager configuration and
//! what is held exclusively, into the `NodeResourceTopology` object the topology-aware
//! scheduler reads.
//!
//! Expected flow: the agent (or a test) gathers [`NrtInput`] from the discovered topology,
//! the applied configuration and the current allocations (from the kubelet where it can be
//! read, see [`AllocationSource`]), calls [`build`], and writes the result when it differs
//! from what was last written.
//!
//! Guarantees (what the scheduler plugin relies on, from scheduler-plugins
//! `pkg/noderesourcetopology`):
//! - one zone `node-<id>` of type `Node` per NUMA node, in ascending id order, with `costs`
//!   naming every NUMA node (`node-<j>`, the kernel's distance) where distances are known;
//! - per NUMA zone `cpu` (capacity = its online CPUs, allocatable = capacity minus the
//!   reserved CPUs on that node, available = allocatable minus the CPUs held exclusively),
//!   `memory` and each `hugepages-<size>` when the node's size is known;
//! - node attributes `topologyManagerPolicy`, `topologyManagerScope`,
//!   `topologyManagerMaxNUMANodes` with the kubelet's names and the values the plugin
//!   accepts (the running kubelet's where known: see [`super::tmsource`]), and `nodeTopologyPodsFingerprint` + `nodeTopologyPodsFingerprintMethod`;
//! - no deprecated `topologyPolicies`: the plugin reads the attributes (and logs two lines
//!   per Filter/Score and node for every object that still carries the old field).
//!
//! nodetopo's own attributes (prefix `nodetopo.io/`) say what the numbers mean: the CPU
//! manager policy (with policy `none` nothing is pinned and `available` equals
//! `allocatable`: the object says so rather than predicting placements), whether CPU
//! `available` counts whole free cores (`full-pcpus-only`), the Memory Manager policy and
//! where the allocations came from.
//!
//! Errors: inputs that contradict the topology (a reserved or exclusive CPU the machine does
//! not have, a CPU both reserved and exclusive) are refused with the CPU named.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use nodetopo_engine::memorymanager::{MemoryResource, MemoryTable};
use nodetopo_engine::{CpuSet, CpuTopology};

use super::fingerprint::{self, PodFingerprint};
use super::memory::MemoryTables;
use super::podset::{self, NodePod};
use super::tmsource::{TopologyManagerSource, TopologyManagerView, ATTR_TM_SOURCE};
use super::types::{
    AttributeInfo, CostInfo, NodeResourceTopology, ResourceInfo, Zone, API_VERSION, KIND,
    ZONE_TYPE_L3_CACHE, ZONE_TYPE_NUMA_NODE,
};

/// Attribute: topology manager policy (scheduler-plugins `nodeconfig.AttributePolicy`).
pub const ATTR_TM_POLICY: &str = "topologyManagerPolicy";
/// Attribute: topology manager scope (`nodeconfig.AttributeScope`).
pub const ATTR_TM_SCOPE: &str = "topologyManagerScope";
/// Attribute: the topology manager's NUMA node limit (`nodeconfig.AttributeMaxNUMANodes`).
pub const ATTR_TM_MAX_NUMA_NODES: &str = "topologyManagerMaxNUMANodes";
/// Attribute: the kubelet's CPU manager policy (`none` | `static`).
pub const ATTR_CPU_MANAGER_POLICY: &str = "nodetopo.io/cpuManagerPolicy";
/// Attribute: the CPU manager options in effect, comma-separated, sorted (absent if none).
pub const ATTR_CPU_MANAGER_OPTIONS: &str = "nodetopo.io/cpuManagerPolicyOptions";
/// Attribute: how CPU `available` is counted: `cpus` (every free CPU), `whole-cores`
/// (full-pcpus-only: only CPUs of cores whose threads are all free) or `not-pinned`
/// (policy none: nothing is exclusive, available = allocatable).
pub const ATTR_CPU_AVAILABLE: &str = "nodetopo.io/cpuAvailable";
/// Attribute: the Memory Manager policy whose accounting `memory`/`hugepages` follow, as
/// the kubelet reports it (`Static`: its tables; `None`: sizes from sysfs, nothing
/// NUMA-pinned, available = allocatable; `Unknown`: no PodResources answer, sizes from
/// sysfs).
pub const ATTR_MEMORY_MANAGER_POLICY: &str = "nodetopo.io/memoryManagerPolicy";
/// Attribute: where the reserved CPUs (and so `cpu.allocatable`) came from
/// (`PodResources`: the kubelet's allocatable CPUs; `Spec`: nodetopo's spec).
pub const ATTR_RESERVED_SOURCE: &str = "nodetopo.io/reservedCPUsSource";
/// Attribute: where the exclusive allocations came from (`PodResources`, `Checkpoint`,
/// `Agent`).
pub const ATTR_ALLOCATION_SOURCE: &str = "nodetopo.io/allocationSource";
/// Zone attribute: the zone's online CPUs in list syntax.
pub const ATTR_ZONE_CPUS: &str = "nodetopo.io/cpus";
/// Zone attribute (L3 zones): the cache level, always `3`.
pub const ATTR_ZONE_CACHE_LEVEL: &str = "nodetopo.io/cacheLevel";

/// The CPU manager's side of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuAccounting {
    /// CPU manager policy `none`: no container holds CPUs exclusively.
    PolicyNone {
        /// CPUs reserved for system daemons (capacity minus these is allocatable).
        reserved: CpuSet,
    },
    /// Policy `static`.
    Static {
        /// Reserved CPUs.
        reserved: CpuSet,
        /// CPUs held exclusively by containers.
        exclusive: CpuSet,
        /// The static policy options in effect, with the kubelet's names, `true` ones only.
        options: BTreeSet<String>,
    },
}

impl CpuAccounting {
    fn reserved(&self) -> &CpuSet {
        match self {
            CpuAccounting::PolicyNone { reserved } | CpuAccounting::Static { reserved, .. } => {
                reserved
            }
        }
    }
}

/// Where the exclusive allocations in the object came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocationSource {
    /// The kubelet's PodResources API (what the kubelet did).
    PodResources,
    /// The kubelet's CPU manager checkpoint file.
    Checkpoint,
    /// nodetopo's own admission engine (no kubelet source readable).
    Agent,
}

impl AllocationSource {
    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            AllocationSource::PodResources => "PodResources",
            AllocationSource::Checkpoint => "Checkpoint",
            AllocationSource::Agent => "Agent",
        }
    }
}

/// Where the reserved CPUs (capacity minus allocatable) came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservedSource {
    /// The kubelet's PodResources `GetAllocatableResources`: reserved = online CPUs minus
    /// the CPUs it may assign.
    PodResources,
    /// nodetopo's NodeTopology spec (`reservedSystemCPUs`, or the count taken like the
    /// kubelet): where the kubelet does not say.
    Spec,
}

impl ReservedSource {
    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            ReservedSource::PodResources => "PodResources",
            ReservedSource::Spec => "Spec",
        }
    }
}

/// Device-plugin devices as the kubelet reports them (PodResources
/// `GetAllocatableResources` and `List`), for per-NUMA device resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceInventory {
    /// Resource name -> device id -> the NUMA nodes the device is attached to (empty when
    /// its plugin reports no topology).
    pub allocatable: BTreeMap<String, BTreeMap<String, BTreeSet<usize>>>,
    /// Resource name -> device ids assigned to containers.
    pub assigned: BTreeMap<String, BTreeSet<String>>,
}

/// The Memory Manager as the kubelet reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryManagerView<'a> {
    /// Not known (the kubelet's PodResources API was not read): sizes from the topology,
    /// nothing counted as pinned, attribute `Unknown`.
    Unknown,
    /// Policy `None` (the kubelet reports no allocatable memory): nothing NUMA-pinned.
    None,
    /// Policy `Static`: its tables per NUMA node (see [`super::memory::memory_tables`]).
    Static(&'a MemoryTables),
}

impl MemoryManagerView<'_> {
    /// The attribute value.
    pub fn policy_name(&self) -> &'static str {
        match self {
            MemoryManagerView::Unknown => "Unknown",
            MemoryManagerView::None => "None",
            MemoryManagerView::Static(_) => "Static",
        }
    }

    fn tables(&self) -> Option<&MemoryTables> {
        match self {
            MemoryManagerView::Static(t) => Some(t),
            _ => None,
        }
    }
}

/// Everything the object is built from.
#[derive(Debug, Clone)]
pub struct NrtInput<'a> {
    /// Node name (the object's name).
    pub node_name: &'a str,
    /// The Node's UID, for the owner reference (none when unknown, e.g. offline).
    pub node_uid: Option<&'a str>,
    /// The discovered machine.
    pub topology: &'a CpuTopology,
    /// CPU manager state.
    pub cpu: CpuAccounting,
    /// Where `cpu`'s reserved set came from.
    pub reserved_source: ReservedSource,
    /// Topology manager configuration.
    pub topology_manager: TopologyManagerView,
    /// Where `topology_manager` came from (see [`super::tmsource`]).
    pub topology_manager_source: TopologyManagerSource,
    /// What is known of the Memory Manager: its tables per NUMA node under `Static`, policy
    /// `None`, or nothing (no PodResources answer): sizes then come from the topology alone.
    pub memory: MemoryManagerView<'a>,
    /// Every pod bound to the node with its phase: the fingerprint covers those the
    /// scheduler plugin counts for this object (see [`super::podset`]; method
    /// `with-exclusive-resources`).
    pub pods: &'a [NodePod<'a>],
    /// Where the allocations came from.
    pub source: AllocationSource,
    /// Device-plugin devices (empty when the kubelet's PodResources API is not read).
    pub devices: &'a DeviceInventory,
}

/// Why an object cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NrtError {
    /// A reserved CPU the machine does not have online.
    #[error("reserved CPUs {0} are not online CPUs of this machine")]
    UnknownReserved(String),
    /// An exclusive CPU the machine does not have online.
    #[error("exclusively assigned CPUs {0} are not online CPUs of this machine")]
    UnknownExclusive(String),
    /// A CPU both reserved and exclusive.
    #[error("CPUs {0} are both reserved and exclusively assigned")]
    ReservedAndExclusive(String),
    /// Memory tables for a NUMA node the machine does not have.
    #[error("memory manager state names NUMA node {0}, which this machine does not have")]
    UnknownMemoryNode(usize),
    /// A device attached to a NUMA node the machine does not have.
    #[error("device {device} of resource {resource} is attached to NUMA node {node}, which this machine does not have")]
    UnknownDeviceNode {
        /// The resource name.
        resource: String,
        /// The device id.
        device: String,
        /// The NUMA node id.
        node: usize,
    },
}

/// The zone name of NUMA node `id` (the API helper's `numanode.IDToName`).
pub fn numa_zone_name(id: usize) -> String {
    format!("node-{id}")
}

/// The zone name of L3 cache `id`.
pub fn l3_zone_name(id: usize) -> String {
    format!("l3cache-{id}")
}

fn cpu_resource(capacity: usize, allocatable: usize, available: usize) -> ResourceInfo {
    ResourceInfo {
        name: "cpu".into(),
        capacity: capacity.to_string(),
        allocatable: allocatable.to_string(),
        available: available.to_string(),
    }
}

/// The CPUs of `free` that belong to cores all of whose online threads are in `free`.
pub fn whole_free_cores(topology: &CpuTopology, free: &CpuSet) -> CpuSet {
    let mut threads: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for c in topology.cpus() {
        threads.entry(c.core).or_default().push(c.id);
    }
    let mut out = CpuSet::new();
    for ids in threads.values() {
        if ids.iter().all(|id| free.contains(*id)) {
            for id in ids {
                out.insert(*id);
            }
        }
    }
    out
}

/// Builds the object. See the module documentation.
pub fn build(input: &NrtInput<'_>) -> Result<NodeResourceTopology, NrtError> {
    let t = input.topology;
    let reserved = input.cpu.reserved();
    let (countable, cpu_available_mode) = countable_cpus(input)?;
    let node_ids: Vec<usize> = t.numa_nodes().iter().map(|n| n.id).collect();
    check_memory_and_device_nodes(input, &node_ids)?;
    let mut zones = numa_zones(input, &node_ids, &countable);
    zones.extend(l3_zones(t, reserved, &countable));
    // The plugin decides which pods are exclusive from the resources this object lists.
    let listed = podset::resource_names(&zones);
    let pods = podset::fingerprint_pods(input.pods, &listed);
    let attributes = node_attributes(input, cpu_available_mode, &pods);
    let owner_references = input.node_uid.map(|uid| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: input.node_name.to_string(),
            uid: uid.to_string(),
            ..Default::default()
        }]
    });
    Ok(NodeResourceTopology {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        metadata: ObjectMeta {
            name: Some(input.node_name.to_string()),
            owner_references,
            ..Default::default()
        },
        topology_policies: Vec::new(),
        zones,
        attributes,
    })
}

/// The CPUs that are neither reserved nor exclusive, and of those the ones `available`
/// counts (whole cores under full-pcpus-only), with the name of that counting mode.
/// Refuses reserved or exclusive CPUs that are not online, and CPUs both reserved and
/// exclusive.
fn countable_cpus(input: &NrtInput<'_>) -> Result<(CpuSet, &'static str), NrtError> {
    let t = input.topology;
    let online = t.all_cpus();
    let reserved = input.cpu.reserved();
    let unknown = reserved.difference(&online);
    if !unknown.is_empty() {
        return Err(NrtError::UnknownReserved(unknown.to_string()));
    }
    Ok(match &input.cpu {
        CpuAccounting::PolicyNone { .. } => (online.difference(reserved), "not-pinned"),
        CpuAccounting::Static {
            exclusive, options, ..
        } => {
            let unknown = exclusive.difference(&online);
            if !unknown.is_empty() {
                return Err(NrtError::UnknownExclusive(unknown.to_string()));
            }
            let both = exclusive.intersection(reserved);
            if !both.is_empty() {
                return Err(NrtError::ReservedAndExclusive(both.to_string()));
            }
            let free = online.difference(reserved).difference(exclusive);
            if options.contains("full-pcpus-only") {
                (whole_free_cores(t, &free), "whole-cores")
            } else {
                (free, "cpus")
            }
        }
    })
}

/// Refuses memory tables and devices that name a NUMA node outside `node_ids`.
fn check_memory_and_device_nodes(input: &NrtInput<'_>, node_ids: &[usize]) -> Result<(), NrtError> {
    if let Some(mem) = input.memory.tables() {
        for id in mem.keys() {
            if !node_ids.contains(id) {
                return Err(NrtError::UnknownMemoryNode(*id));
            }
        }
    }
    for (resource, devs) in &input.devices.allocatable {
        for (device, nodes) in devs {
            if let Some(node) = nodes.iter().find(|n| !node_ids.contains(n)) {
                return Err(NrtError::UnknownDeviceNode {
                    resource: resource.clone(),
                    device: device.clone(),
                    node: *node,
                });
            }
        }
    }
    Ok(())
}

/// One zone per NUMA node: its distance costs, its CPU list and its `cpu`, memory, huge
/// page and device resources (`countable`: the CPUs `available` counts).
fn numa_zones(input: &NrtInput<'_>, node_ids: &[usize], countable: &CpuSet) -> Vec<Zone> {
    let reserved = input.cpu.reserved();
    let mut zones = Vec::new();
    for n in input.topology.numa_nodes() {
        let costs = match &n.distances {
            Some(row) => node_ids
                .iter()
                .zip(row)
                .map(|(j, d)| CostInfo {
                    name: numa_zone_name(*j),
                    value: i64::from(*d),
                })
                .collect(),
            None => Vec::new(),
        };
        let mut resources = vec![cpu_resource(
            n.cpus.len(),
            n.cpus.difference(reserved).len(),
            n.cpus.intersection(countable).len(),
        )];
        resources.extend(memory_resources(
            n,
            input.memory.tables().and_then(|m| m.get(&n.id)),
        ));
        resources.extend(device_resources(n.id, input.devices));
        zones.push(Zone {
            name: numa_zone_name(n.id),
            type_: ZONE_TYPE_NUMA_NODE.into(),
            parent: String::new(),
            costs,
            attributes: vec![AttributeInfo::new(ATTR_ZONE_CPUS, n.cpus.to_string())],
            resources,
        });
    }
    zones
}

/// The object's attributes: topology manager policy, scope and NUMA limit, the pod
/// fingerprint and its method, CPU manager policy and options, how `available` counts CPUs,
/// the Memory Manager policy, where the allocations, the reserved CPUs and the topology
/// manager configuration came from.
fn node_attributes(
    input: &NrtInput<'_>,
    cpu_available_mode: &str,
    fingerprint_pods: &[(String, String)],
) -> Vec<AttributeInfo> {
    let tm = input.topology_manager;
    let mut attributes = vec![
        AttributeInfo::new(ATTR_TM_POLICY, tm.policy.name()),
        AttributeInfo::new(ATTR_TM_SCOPE, tm.scope.name()),
        AttributeInfo::new(ATTR_TM_MAX_NUMA_NODES, tm.max_numa_nodes.to_string()),
    ];
    let fp: PodFingerprint = fingerprint_pods
        .iter()
        .map(|(ns, name)| (ns.as_str(), name.as_str()))
        .collect();
    attributes.push(AttributeInfo::new(fingerprint::ATTRIBUTE, fp.sign()));
    attributes.push(AttributeInfo::new(
        fingerprint::ATTRIBUTE_METHOD,
        fingerprint::METHOD_WITH_EXCLUSIVE_RESOURCES,
    ));
    let (policy, options) = match &input.cpu {
        CpuAccounting::PolicyNone { .. } => ("none", None),
        CpuAccounting::Static { options, .. } => (
            "static",
            (!options.is_empty()).then(|| options.iter().cloned().collect::<Vec<_>>().join(",")),
        ),
    };
    attributes.push(AttributeInfo::new(ATTR_CPU_MANAGER_POLICY, policy));
    if let Some(o) = options {
        attributes.push(AttributeInfo::new(ATTR_CPU_MANAGER_OPTIONS, o));
    }
    attributes.push(AttributeInfo::new(ATTR_CPU_AVAILABLE, cpu_available_mode));
    attributes.push(AttributeInfo::new(
        ATTR_MEMORY_MANAGER_POLICY,
        input.memory.policy_name(),
    ));
    attributes.push(AttributeInfo::new(
        ATTR_ALLOCATION_SOURCE,
        input.source.as_str(),
    ));
    attributes.push(AttributeInfo::new(
        ATTR_RESERVED_SOURCE,
        input.reserved_source.as_str(),
    ));
    attributes.push(AttributeInfo::new(
        ATTR_TM_SOURCE,
        input.topology_manager_source.as_str(),
    ));
    attributes
}

/// `memory` and `hugepages-<size>` of one NUMA node: from the Memory Manager's tables when
/// it runs, else from the node's sizes (memory allocatable = MemTotal minus the node's huge
/// pages, as the kubelet's Memory Manager computes it; nothing pinned, so available =
/// allocatable).
fn memory_resources(
    n: &nodetopo_engine::NumaNode,
    tables: Option<&BTreeMap<MemoryResource, MemoryTable>>,
) -> Vec<ResourceInfo> {
    let res = |r: MemoryResource, cap: u64, alloc: u64, avail: u64| ResourceInfo {
        name: r.name(),
        capacity: cap.to_string(),
        allocatable: alloc.to_string(),
        available: avail.to_string(),
    };
    let mut out = Vec::new();
    if let Some(tables) = tables {
        // Memory first, then huge pages by ascending page size (the tables' order).
        let mut ordered: Vec<(&MemoryResource, &MemoryTable)> = tables.iter().collect();
        ordered.sort_by_key(|(r, _)| match r {
            MemoryResource::Memory => 0,
            MemoryResource::HugePages { page_bytes } => 1 + *page_bytes,
        });
        for (r, t) in ordered {
            out.push(res(*r, t.total, t.allocatable, t.free));
        }
        return out;
    }
    let Some(total) = n.memory_bytes else {
        return out;
    };
    let huge: u64 = n
        .hugepages
        .iter()
        .map(|(kib, pages)| pages.saturating_mul(kib.saturating_mul(1024)))
        .fold(0u64, |a, b| a.saturating_add(b));
    let mem_alloc = total.saturating_sub(huge);
    out.push(res(MemoryResource::Memory, total, mem_alloc, mem_alloc));
    for (kib, pages) in &n.hugepages {
        let bytes = pages.saturating_mul(kib.saturating_mul(1024));
        out.push(res(
            MemoryResource::HugePages {
                page_bytes: kib * 1024,
            },
            bytes,
            bytes,
            bytes,
        ));
    }
    out
}

/// The device resources of NUMA node `node`, by resource name: capacity = allocatable =
/// the devices attached to it (a device on several nodes counts on each, as the kubelet
/// reports it once per node), available = those not assigned to a container. Devices
/// without topology belong to no zone and are left out; resources with no device on the
/// node are not listed.
fn device_resources(node: usize, devices: &DeviceInventory) -> Vec<ResourceInfo> {
    let none = BTreeSet::new();
    let mut out = Vec::new();
    for (resource, devs) in &devices.allocatable {
        let here: Vec<&String> = devs
            .iter()
            .filter(|(_, nodes)| nodes.contains(&node))
            .map(|(id, _)| id)
            .collect();
        if here.is_empty() {
            continue;
        }
        let assigned = devices.assigned.get(resource).unwrap_or(&none);
        let free = here.iter().filter(|id| !assigned.contains(**id)).count();
        out.push(ResourceInfo {
            name: resource.clone(),
            capacity: here.len().to_string(),
            allocatable: here.len().to_string(),
            available: free.to_string(),
        });
    }
    out
}

/// L3 zones, written only where they add information: for each NUMA node whose CPUs span
/// more than one L3 cache, one zone per L3 lying wholly inside it, with `parent` the NUMA
/// zone and the same `cpu` accounting restricted to the cache's CPUs. (Where a NUMA node
/// has one L3, or an L3 spans NUMA nodes, a cache zone would repeat or blur the NUMA zone.)
fn l3_zones(t: &CpuTopology, reserved: &CpuSet, countable: &CpuSet) -> Vec<Zone> {
    let mut out = Vec::new();
    for n in t.numa_nodes() {
        let inside: Vec<_> = t
            .uncore_caches()
            .iter()
            .filter(|u| u.level == 3 && !u.cpus.is_empty() && u.cpus.is_subset(&n.cpus))
            .collect();
        let touching = t
            .uncore_caches()
            .iter()
            .filter(|u| !u.cpus.is_disjoint(&n.cpus))
            .count();
        if inside.len() < 2 || touching != inside.len() {
            continue;
        }
        for u in inside {
            out.push(Zone {
                name: l3_zone_name(u.id),
                type_: ZONE_TYPE_L3_CACHE.into(),
                parent: numa_zone_name(n.id),
                costs: Vec::new(),
                attributes: vec![
                    AttributeInfo::new(ATTR_ZONE_CPUS, u.cpus.to_string()),
                    AttributeInfo::new(ATTR_ZONE_CACHE_LEVEL, "3"),
                ],
                resources: vec![cpu_resource(
                    u.cpus.len(),
                    u.cpus.difference(reserved).len(),
                    u.cpus.intersection(countable).len(),
                )],
            });
        }
    }
    out
}
