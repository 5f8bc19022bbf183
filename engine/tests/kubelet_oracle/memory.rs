//! The memory-manager kind: machines with memory and huge pages per NUMA node, reserved
//! memory, Guaranteed pods requesting memory and huge pages (init containers whose memory
//! later containers reuse, sidecars, multi-NUMA groups), answered by the kubelet's memory
//! manager (Static policy) beside its CPU manager and topology manager, and compared with
//! the engine's `MemoryManager` inside `NodeAdmitter`: raw memory hints per container (or
//! per pod), every container's memory blocks, the final machine state per NUMA node, and the
//! `memory_manager_state` checkpoint the kubelet's checkpoint code writes.

use std::collections::BTreeMap;

use nodetopo_engine::admission::NodeAdmitter;
use nodetopo_engine::memorymanager::{MemoryHints, MemoryManager, MemoryResource, ReservedMemory};
use nodetopo_engine::topologymanager::{TmPolicy, TmScope, TopologyHint};
use nodetopo_engine::Pod;

use crate::generator::{gen_capped_machine, gen_ops, gen_tm_policy_scope, Edge, Rng};
use crate::protocol::*;

const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;

/// The memory resource a kubelet resource name stands for.
pub(crate) fn resource(name: &str) -> Result<MemoryResource, String> {
    match name {
        "memory" => Ok(MemoryResource::Memory),
        "hugepages-2Mi" => Ok(MemoryResource::HugePages { page_bytes: 2 * MI }),
        "hugepages-1Gi" => Ok(MemoryResource::HugePages { page_bytes: GI }),
        other => Err(format!("unknown memory resource {other:?}")),
    }
}

/// `--reserved-memory` in the engine's form.
pub(crate) fn engine_reserved(m: &MemoryJson) -> Result<ReservedMemory, String> {
    let mut out = ReservedMemory::new();
    for (id, per) in &m.reserved {
        let id: usize = id
            .parse()
            .map_err(|_| format!("memory.reserved: NUMA node {id:?} is not a number"))?;
        let e = out.entry(id).or_default();
        for (name, bytes) in per {
            e.insert(resource(name)?, *bytes);
        }
    }
    Ok(out)
}

fn hint_json(h: &TopologyHint) -> HintJson {
    HintJson {
        affinity: h.affinity.map(|m| m.ids().collect()),
        preferred: h.preferred,
    }
}

/// The engine's answer to one hint request, in the oracle's shape (`None`: the kubelet's
/// nil map).
fn raw_hints(h: MemoryHints) -> Option<RawHints> {
    match h {
        MemoryHints::None => None,
        MemoryHints::Explicit(m) => Some(
            m.into_iter()
                .map(|(r, l)| (r, l.iter().map(hint_json).collect()))
                .collect(),
        ),
        MemoryHints::Implicit { resources, source } => {
            let list: Vec<HintJson> = source.materialize().iter().map(hint_json).collect();
            Some(resources.into_iter().map(|r| (r, list.clone())).collect())
        }
    }
}

/// The raw memory hints the engine's memory manager gives the topology manager while
/// `pod` is admitted, replayed on `before` (the state before the admission): in pod scope
/// the pod's hints; in container scope each container's hints, the earlier containers
/// allocated under their merged hints. A rejected pod: its first hint request only (the
/// kubelet's later requests depend on where it stopped).
pub(crate) fn engine_raw_hints(
    before: &MemoryManager,
    node: &NodeAdmitter,
    pod: &Pod,
    scope: TmScope,
    admitted: bool,
) -> BTreeMap<String, RawHints> {
    crate::replay_raw_hints(
        before,
        pod,
        scope,
        admitted,
        |m| raw_hints(m.pod_hints(pod)),
        |m, c| raw_hints(m.container_hints(pod, c)),
        |m, c| m.allocate(pod, c, node.hint(&pod.uid, &c.name)).is_ok(),
    )
}

/// Every container's blocks, sorted (the kubelet builds them from a map).
pub(crate) fn engine_blocks(m: &MemoryManager, pod: &Pod) -> BTreeMap<String, Vec<BlockJson>> {
    let mut out = BTreeMap::new();
    for c in pod.all_containers() {
        let Some(blocks) = m.blocks(&pod.uid, &c.name) else {
            continue;
        };
        if blocks.is_empty() {
            continue;
        }
        let mut v: Vec<BlockJson> = blocks
            .iter()
            .map(|b| BlockJson {
                numa_affinity: b.affinity.ids().collect(),
                resource: b.resource.name(),
                size: b.size,
            })
            .collect();
        v.sort();
        out.insert(c.name.clone(), v);
    }
    out
}

/// The machine state by NUMA node id, in the kubelet's shape.
pub(crate) fn engine_state(m: &MemoryManager) -> BTreeMap<String, MemNodeJson> {
    m.nodes()
        .iter()
        .map(|(id, n)| {
            let memory_map = n
                .tables
                .iter()
                .map(|(r, t)| {
                    (
                        r.name(),
                        MemTableJson {
                            total: t.total,
                            system_reserved: t.system_reserved,
                            allocatable: t.allocatable,
                            reserved: t.reserved,
                            free: t.free,
                        },
                    )
                })
                .collect();
            (
                id.to_string(),
                MemNodeJson {
                    number_of_assignments: n.assignments,
                    memory_map,
                    cells: n.cells.ids().collect(),
                },
            )
        })
        .collect()
}

/// Normalises the kubelet's answer for comparison: blocks sorted, cells sorted, empty
/// raw-hint maps (the kubelet's empty map; "no preference" as the nil map) dropped.
pub(crate) fn normalise(a: &mut Answer) {
    for r in &mut a.results {
        if let Some(m) = &mut r.memory {
            for v in m.values_mut() {
                v.sort();
            }
            m.retain(|_, v| !v.is_empty());
        }
        r.mem_hints.retain(|_, h| !h.is_empty());
    }
    if let Some(s) = &mut a.memory_state {
        for n in s.values_mut() {
            n.cells.sort_unstable();
        }
    }
}

/// The first memory difference at operation `i`, if any.
pub(crate) fn compare_op(what: &str, k: &OpResult, e: &OpResult) -> Option<String> {
    if k.mem_hints != e.mem_hints {
        return Some(format!(
            "{what}: raw memory hints: kubelet {:?}, engine {:?}",
            k.mem_hints, e.mem_hints
        ));
    }
    let blocks = |r: &OpResult| r.memory.clone().unwrap_or_default();
    if blocks(k) != blocks(e) {
        return Some(format!(
            "{what}: memory blocks: kubelet {:?}, engine {:?}",
            blocks(k),
            blocks(e)
        ));
    }
    None
}

/// The final machine state and, when asked for, the checkpoint file: it must hold the same
/// machine state and the blocks of every container the engine holds.
pub(crate) fn compare_final(c: &CaseJson, k: &Answer, e: &Answer) -> Option<String> {
    if k.memory_state != e.memory_state {
        return Some(format!(
            "memory machine state: kubelet {:?}, engine {:?}",
            k.memory_state, e.memory_state
        ));
    }
    if c.checkpoint && c.memory.is_some() {
        return check_checkpoint(&k.memory_checkpoint, e).err();
    }
    None
}

/// The `memory_manager_state` file (v3 in kubelet 1.37: policyName, machineState, entries,
/// podEntries, checksum) read as the agent would: its machine state and entries must equal
/// what the engine holds.
fn check_checkpoint(file: &str, e: &Answer) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Checkpoint {
        policy_name: String,
        machine_state: BTreeMap<String, MemNodeJson>,
        #[serde(default)]
        entries: BTreeMap<String, BTreeMap<String, Vec<BlockJson>>>,
        #[serde(default)]
        checksum: u64,
        /// v3 (kubelet 1.37): the same data again as a JSON string with its own checksum.
        #[serde(default)]
        data: String,
        #[serde(default)]
        data_checksum: u64,
    }
    let cp: Checkpoint = serde_json::from_str(file)
        .map_err(|err| format!("memory_manager_state does not parse ({err}): {file}"))?;
    if !cp.data.is_empty() {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Data {
            policy_name: String,
            machine_state: BTreeMap<String, MemNodeJson>,
            #[serde(default)]
            entries: BTreeMap<String, BTreeMap<String, Vec<BlockJson>>>,
        }
        let d: Data = serde_json::from_str(&cp.data)
            .map_err(|err| format!("memory_manager_state data does not parse ({err})"))?;
        if d.policy_name != cp.policy_name
            || d.machine_state != cp.machine_state
            || d.entries != cp.entries
            || cp.data_checksum == 0
        {
            return Err(format!(
                "memory_manager_state: v3 data differs from the v1 fields: {file}"
            ));
        }
    }
    if cp.policy_name != "Static" {
        return Err(format!("memory_manager_state: policy {:?}", cp.policy_name));
    }
    if cp.checksum == 0 {
        return Err("memory_manager_state: no checksum".into());
    }
    let mut state = cp.machine_state;
    for n in state.values_mut() {
        n.cells.sort_unstable();
    }
    if Some(&state) != e.memory_state.as_ref() {
        return Err(format!(
            "memory_manager_state machine state: file {state:?}, engine {:?}",
            e.memory_state
        ));
    }
    let mut entries = cp.entries;
    for per in entries.values_mut() {
        for v in per.values_mut() {
            v.sort();
        }
        per.retain(|_, v| !v.is_empty());
    }
    entries.retain(|_, per| !per.is_empty());
    if entries != e.memory_entries {
        return Err(format!(
            "memory_manager_state entries: file {entries:?}, engine {:?}",
            e.memory_entries
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------- generation

/// Memory and huge pages of one node. Every node lists every page size of the machine
/// (Linux lists each supported size under every node, with 0 pages where none are set up;
/// the kubelet's static policy dereferences a missing size and panics).
fn gen_node_memory(r: &mut Rng, n: &mut NumaJson, has_2m: bool, has_1g: bool) {
    let mut huge = Vec::new();
    let mut huge_bytes = 0;
    if has_2m {
        let pages = if r.chance(25) {
            0
        } else {
            r.range(1, 2048) as u64
        };
        huge.push([2048, pages]);
        huge_bytes += pages * 2 * MI;
    }
    if has_1g {
        let pages = if r.chance(25) {
            0
        } else {
            r.range(1, 8) as u64
        };
        huge.push([1 << 20, pages]);
        huge_bytes += pages * GI;
    }
    n.memory = huge_bytes + GI * r.range(2, 48) as u64 + MI * r.range(0, 1023) as u64;
    n.hugepages = huge;
}

/// What the memory edge quantities are measured against: one node's memory and the
/// machine's, one node's huge pages and the machine's, per size (bytes).
pub(crate) struct MemEdges {
    node: u64,
    total: u64,
    /// (page size KiB, one node's pages in bytes, every node's in bytes).
    pages: Vec<(u64, u64, u64)>,
}

impl MemEdges {
    fn of(machine: &MachineJson) -> Self {
        let node = machine.numa.first().map_or(GI, |n| n.memory);
        let total = machine.numa.iter().map(|n| n.memory).sum();
        let mut pages = Vec::new();
        for kib in [2048u64, 1 << 20] {
            let per: Vec<u64> = machine
                .numa
                .iter()
                .map(|n| {
                    n.hugepages
                        .iter()
                        .filter(|h| h[0] == kib)
                        .map(|h| h[1] * kib * 1024)
                        .sum()
                })
                .collect();
            pages.push((kib, per.first().copied().unwrap_or(0), per.iter().sum()));
        }
        Self { node, total, pages }
    }
}

/// A very large memory amount, written as 16 plain digits: 1 PiB. The memory manager reads
/// quantities with `Quantity.AsInt64`, which fails for amounts apimachinery keeps as a
/// decimal (a plain number of 19 digits, `1023Ti`, `1Pi`) and refuses the container with
/// "failed to represent quantity as int64"; the engine works on bytes and does not model
/// that (docs/oracle.md, open divergences), so the generator stays below it.
const HUGE_BYTES: u64 = 1 << 50;

/// With 8 % each, replaces the memory request and each huge-page request the machine has
/// by an edge amount (`Edge`): 0, one byte or one page, exactly one node's worth, more than
/// the machine has, or 1 PiB ([`HUGE_BYTES`]).
fn edge_memory(r: &mut Rng, res: &mut ResJson, e: &MemEdges) {
    if r.chance(8) {
        let more = e.total + MI * r.range(1, 64) as u64;
        let b = Edge::draw(r).amount(1, e.node, more, HUGE_BYTES);
        res.memory = b.to_string();
    }
    for &(kib, node, total) in &e.pages {
        if total == 0 || !r.chance(8) {
            continue;
        }
        let page = kib * 1024;
        let huge = (HUGE_BYTES / page) * page;
        let b = Edge::draw(r).amount(page, node, total + page, huge);
        if kib == 2048 {
            res.hugepages_2mi = b.to_string();
        } else {
            res.hugepages_1gi = b.to_string();
        }
    }
}

fn gen_mem_container(
    r: &mut Rng,
    name: String,
    restartable: bool,
    node_mem: u64,
    sizes: (bool, bool),
    edges: &MemEdges,
) -> ContainerJson {
    let cpu = match r.range(0, 3) {
        0 => format!("{}m", r.range(1, 9) * 100),
        _ => r.range(1, 2).to_string(),
    };
    // Mostly within one node, sometimes beyond (multi-NUMA groups).
    let node_mi = (node_mem / MI).max(4096) as usize;
    let mem_mi = match r.range(0, 9) {
        0..=5 => r.range(64, 4096) as u64,
        6 | 7 => r.range(4096, node_mi) as u64,
        _ => r.range(node_mi, 3 * node_mi) as u64,
    };
    let mut res = ResJson {
        cpu,
        memory: format!("{mem_mi}Mi"),
        ..ResJson::default()
    };
    if sizes.0 && r.chance(30) {
        res.hugepages_2mi = format!("{}Mi", 2 * r.range(1, 1024));
    }
    if sizes.1 && r.chance(20) {
        res.hugepages_1gi = format!("{}Gi", r.range(1, 4));
    }
    edge_memory(r, &mut res, edges);
    let guaranteed = !r.chance(8);
    let limits = if guaranteed {
        res.clone()
    } else {
        // Burstable: huge pages still need limits equal to requests.
        ResJson {
            hugepages_2mi: res.hugepages_2mi.clone(),
            hugepages_1gi: res.hugepages_1gi.clone(),
            ..ResJson::default()
        }
    };
    ContainerJson {
        name,
        requests: res,
        limits,
        restartable,
    }
}

/// A random memory case: a uniform machine of 1-4 (one in ten: 1-8) NUMA nodes with memory and huge pages,
/// reserved memory on some nodes, no CPU options, every topology-manager policy and scope,
/// 1-8 pods with init containers (regular or sidecar) and 1-3 app containers.
pub(crate) fn gen_memory_case(r: &mut Rng, id: String) -> CaseJson {
    // Up to 4 NUMA nodes, one case in ten up to 8: with memory, huge pages and CPU hints
    // the kubelet's merge walks the product of three lists of up to 2^N - 1 hints each, so
    // 8-node cases often run past the oracle's 2 s (counted and listed as timeouts).
    let mut machine = gen_capped_machine(r);
    let sizes = (r.chance(60), r.chance(35));
    for n in &mut machine.numa {
        gen_node_memory(r, n, sizes.0, sizes.1);
    }
    let mut reserved: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    // One case in twenty reserves no memory at all (the kubelet refuses that).
    let none = r.chance(5);
    for n in &machine.numa {
        if none || (r.chance(30) && n.id != machine.numa[0].id) {
            continue;
        }
        let e = reserved.entry(n.id.to_string()).or_default();
        e.insert("memory".into(), MI * r.range(1, 2048) as u64);
        for hp in &n.hugepages {
            if hp[1] > 0 && r.chance(15) {
                let name = if hp[0] == 2048 {
                    "hugepages-2Mi"
                } else {
                    "hugepages-1Gi"
                };
                e.insert(
                    name.into(),
                    hp[0] * 1024 * r.range(1, hp[1] as usize) as u64,
                );
            }
        }
    }
    let node_mem = machine.numa.iter().map(|n| n.memory).min().unwrap_or(GI);
    let (tm_policy, tm_scope) = gen_tm_policy_scope(r);
    let pods = r.range(1, 8);
    let edges = MemEdges::of(&machine);
    let ops = gen_ops(r, pods, 25, 35, |r, name, restartable| {
        gen_mem_container(r, name, restartable, node_mem, sizes, &edges)
    });
    let ncpus = machine.cpus.len();
    CaseJson {
        id,
        machine,
        cpu_options: BTreeMap::new(),
        reserved_cpus: String::new(),
        num_reserved: r.range(1, 2.min(ncpus)),
        tm_policy: tm_policy.into(),
        tm_scope: tm_scope.into(),
        tm_options: BTreeMap::new(),
        ops,
        memory: Some(MemoryJson { reserved }),
        devices: Vec::new(),
        device_resources: Vec::new(),
        no_preferred: Vec::new(),
        shadowed: Vec::new(),
        checkpoint: r.chance(20),
    }
}

/// Whether the engine ran a topology manager whose hints the raw comparison covers.
pub(crate) fn compares_raw_hints(policy: TmPolicy) -> bool {
    policy != TmPolicy::None
}
