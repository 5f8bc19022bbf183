//! The sysfs model: what a sysfs tree says, before any decision is taken, and the rules that
//! turn it into a [`CpuTopology`].
//!
//! [`super::scan`] fills a [`MachineModel`] from files; the presets build one by hand with
//! explicit numbering. Both go through [`MachineModel::to_topology`], so every machine nodetopo
//! knows, real or synthesised, is resolved by the same rules:
//!
//! - **Core**: the lowest online CPU id among a CPU's thread siblings (the CPU itself always
//!   counts). `core_id` alone repeats across dies and packages and is not used when sibling
//!   lists exist.
//! - **Socket**: `physical_package_id`. A CPU without one (`-1` on POWER, or a missing file)
//!   takes its NUMA node id as socket id: on such machines each node is one chip.
//! - **NUMA node**: the node whose `cpulist` (intersected with the online CPUs) holds the CPU.
//!   Where several nodes claim it (broken firmware), the `cpuN/nodeK` link decides, else the
//!   lowest id. Where none does (an offline node), the `cpuN/nodeK` link decides, else node 0,
//!   as Linux places CPUs without affinity information; a node that has no directory is then
//!   synthesised with those CPUs and no memory. Node CPU sets in the topology are this
//!   partition, so every CPU is in exactly one node.
//! - **Uncore cache**: the CPU's level-3 cache (type Unified or Data). Its id is the `id` file
//!   when every instance has one and no two different CPU sets share an id; otherwise the
//!   lowest CPU id of the instance's `shared_cpu_list`. On machines with no L3 at all, each
//!   socket is one uncore cache (level 0, id = socket id), as in the kubelet. A CPU without
//!   an L3 on a machine that has L3s gets a per-socket id above every L3 id.
//! - **Distances**: columns follow the node ids of [`MachineModel::distance_columns`]; the
//!   topology keeps one column per node it lists. A synthesised node's row is taken by
//!   symmetry (and 10 to itself). When any needed value is unknown, no node has distances.

use std::collections::{BTreeMap, BTreeSet};

use super::SysfsError;
use crate::cpuset::CpuSet;
use crate::topology::{CpuInfo, CpuTopology, NumaNode, UncoreCache};

/// The ACPI SLIT value of a node to itself.
pub const LOCAL_DISTANCE: u32 = 10;

/// One cache instance as a CPU's `cache/indexM` directory describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheModel {
    /// `level`.
    pub level: u8,
    /// `id`, when the file exists.
    pub id: Option<u64>,
    /// `shared_cpu_list` (or `shared_cpu_map`), raw: may include offline CPUs.
    pub cpus: CpuSet,
    /// `size` in bytes, when known.
    pub size_bytes: Option<u64>,
}

/// One online CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuModel {
    /// Logical CPU id.
    pub id: usize,
    /// `physical_package_id`; `None` for `-1` or a missing file.
    pub package_id: Option<u64>,
    /// Thread siblings (`thread_siblings_list`, `thread_siblings`, `core_cpus_list` or
    /// `core_cpus`), raw; `None` when no such file exists.
    pub siblings: Option<CpuSet>,
    /// (`die_id`, `core_id`), used only when no sibling file exists.
    pub die_core: Option<(i64, i64)>,
    /// The node named by a `cpuN/nodeK` entry, if any (the lowest when several).
    pub node_link: Option<usize>,
    /// The level-3 cache (Unified or Data), if any.
    pub l3: Option<CacheModel>,
    /// The highest-level Unified or Data cache (the last-level cache), if any.
    pub llc: Option<CacheModel>,
}

/// One `node/nodeK` directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeModel {
    /// Node id.
    pub id: usize,
    /// `cpulist` (or `cpumap`), raw: may include offline CPUs.
    pub cpus: CpuSet,
    /// The `distance` row, raw; columns are [`MachineModel::distance_columns`].
    pub distances: Option<Vec<u32>>,
    /// `MemTotal` of `meminfo`, in bytes.
    pub memory_bytes: Option<u64>,
    /// (page size KiB, `nr_hugepages`), ascending by size.
    pub hugepages: Vec<(u64, u64)>,
}

/// What a sysfs tree (or a preset recipe) says about a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineModel {
    /// Online CPUs.
    pub online: CpuSet,
    /// The online CPUs, ascending by id.
    pub cpus: Vec<CpuModel>,
    /// Node directories, ascending by id.
    pub nodes: Vec<NodeModel>,
    /// The node id of each column of the `distance` rows.
    pub distance_columns: Vec<usize>,
}

impl MachineModel {
    /// Resolves the model into a topology by the rules of the module documentation.
    pub fn to_topology(&self) -> Result<CpuTopology, SysfsError> {
        if self.cpus.is_empty() {
            return Err(SysfsError::NoOnlineCpus);
        }
        let numa = self.assign_nodes();
        let node_ids: BTreeSet<usize> = self
            .nodes
            .iter()
            .map(|n| n.id)
            .chain(numa.values().copied())
            .collect();
        let sockets: BTreeMap<usize, usize> = self
            .cpus
            .iter()
            .map(|c| {
                let s = match c.package_id {
                    Some(p) => usize::try_from(p).unwrap_or(usize::MAX),
                    None => numa[&c.id],
                };
                (c.id, s)
            })
            .collect();
        let cores = self.assign_cores();
        let (uncore, caches) = self.assign_uncore(&sockets);

        let cpus: Vec<CpuInfo> = self
            .cpus
            .iter()
            .map(|c| CpuInfo {
                id: c.id,
                core: cores[&c.id],
                socket: sockets[&c.id],
                numa: numa[&c.id],
                uncore: uncore[&c.id],
            })
            .collect();

        let rows = self.distance_matrix(&node_ids);
        let nodes: Vec<NumaNode> = node_ids
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let dir = self.nodes.iter().find(|n| n.id == id);
                NumaNode {
                    id,
                    cpus: cpus.iter().filter(|c| c.numa == id).map(|c| c.id).collect(),
                    distances: rows.as_ref().map(|r| r[i].clone()),
                    memory_bytes: dir.and_then(|d| d.memory_bytes),
                    hugepages: dir.map(|d| d.hugepages.clone()).unwrap_or_default(),
                }
            })
            .collect();
        CpuTopology::with_derived_counts(cpus, nodes, caches).map_err(SysfsError::Topology)
    }

    /// CPU id -> NUMA node id.
    fn assign_nodes(&self) -> BTreeMap<usize, usize> {
        let effective: Vec<(usize, CpuSet)> = self
            .nodes
            .iter()
            .map(|n| (n.id, n.cpus.intersection(&self.online)))
            .collect();
        self.cpus
            .iter()
            .map(|c| {
                let claims: Vec<usize> = effective
                    .iter()
                    .filter(|(_, s)| s.contains(c.id))
                    .map(|(id, _)| *id)
                    .collect();
                let node = match claims.as_slice() {
                    [one] => *one,
                    [] => c.node_link.unwrap_or(0),
                    many => match c.node_link {
                        Some(l) if many.contains(&l) => l,
                        _ => many[0],
                    },
                };
                (c.id, node)
            })
            .collect()
    }

    /// CPU id -> core id (lowest online sibling).
    fn assign_cores(&self) -> BTreeMap<usize, usize> {
        // Fallback grouping by (package, die, core_id) for trees without sibling files.
        let mut by_ids: BTreeMap<(Option<u64>, i64, i64), usize> = BTreeMap::new();
        for c in &self.cpus {
            if let (None, Some((die, core))) = (&c.siblings, c.die_core) {
                let e = by_ids.entry((c.package_id, die, core)).or_insert(c.id);
                *e = (*e).min(c.id);
            }
        }
        self.cpus
            .iter()
            .map(|c| {
                let core = match (&c.siblings, c.die_core) {
                    (Some(s), _) => s
                        .intersection(&self.online)
                        .first()
                        .map_or(c.id, |f| f.min(c.id)),
                    (None, Some((die, core))) => by_ids[&(c.package_id, die, core)],
                    (None, None) => c.id,
                };
                (c.id, core)
            })
            .collect()
    }

    /// CPU id -> uncore id, plus the uncore caches.
    fn assign_uncore(
        &self,
        sockets: &BTreeMap<usize, usize>,
    ) -> (BTreeMap<usize, usize>, Vec<UncoreCache>) {
        let online = &self.online;
        let any_l3 = self.cpus.iter().any(|c| c.l3.is_some());
        let mut uncore = BTreeMap::new();
        let mut info: BTreeMap<usize, (u8, Option<u64>)> = BTreeMap::new();
        if !any_l3 {
            for c in &self.cpus {
                let s = sockets[&c.id];
                uncore.insert(c.id, s);
                info.entry(s).or_insert((0, None));
            }
        } else {
            // Trust the id files only when every instance has one and ids are unambiguous.
            let mut sets_by_id: BTreeMap<u64, BTreeSet<Vec<usize>>> = BTreeMap::new();
            let mut all_have_id = true;
            for c in &self.cpus {
                if let Some(l3) = &c.l3 {
                    match l3.id {
                        Some(id) => {
                            sets_by_id
                                .entry(id)
                                .or_default()
                                .insert(l3.cpus.intersection(online).to_vec());
                        }
                        None => all_have_id = false,
                    }
                }
            }
            let use_files = all_have_id
                && sets_by_id.values().all(|v| v.len() == 1)
                && sets_by_id.keys().all(|&k| usize::try_from(k).is_ok());
            let mut max_id = 0usize;
            for c in &self.cpus {
                if let Some(l3) = &c.l3 {
                    let id = match (use_files, l3.id) {
                        (true, Some(id)) => usize::try_from(id).unwrap_or(usize::MAX),
                        _ => l3.cpus.first().unwrap_or(c.id),
                    };
                    max_id = max_id.max(id);
                    uncore.insert(c.id, id);
                    let e = info.entry(id).or_insert((3, l3.size_bytes));
                    if e.1.is_none() {
                        e.1 = l3.size_bytes;
                    }
                }
            }
            for c in &self.cpus {
                if c.l3.is_none() {
                    let id = max_id.saturating_add(1).saturating_add(sockets[&c.id]);
                    uncore.insert(c.id, id);
                    info.entry(id).or_insert((0, None));
                }
            }
        }
        let caches = info
            .into_iter()
            .map(|(id, (level, size_bytes))| UncoreCache {
                id,
                level,
                cpus: self
                    .cpus
                    .iter()
                    .filter(|c| uncore[&c.id] == id)
                    .map(|c| c.id)
                    .collect(),
                size_bytes,
            })
            .collect();
        (uncore, caches)
    }

    /// Distance rows for `node_ids` (ascending), or `None` when any value is unknown.
    fn distance_matrix(&self, node_ids: &BTreeSet<usize>) -> Option<Vec<Vec<u32>>> {
        let col = |id: usize| self.distance_columns.iter().position(|&c| c == id);
        let raw = |from: usize, to: usize| -> Option<u32> {
            let row = self
                .nodes
                .iter()
                .find(|n| n.id == from)?
                .distances
                .as_ref()?;
            row.get(col(to)?).copied()
        };
        let has_dir = |id: usize| self.nodes.iter().any(|n| n.id == id);
        if self.nodes.is_empty() {
            return None;
        }
        node_ids
            .iter()
            .map(|&from| {
                node_ids
                    .iter()
                    .map(|&to| {
                        if has_dir(from) {
                            raw(from, to)
                        } else if from == to {
                            Some(LOCAL_DISTANCE)
                        } else {
                            raw(to, from)
                        }
                    })
                    .collect::<Option<Vec<u32>>>()
            })
            .collect()
    }
}
