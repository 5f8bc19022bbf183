//! `CpuTopology`: what the engine knows about a machine's logical CPUs.
//!
//! The per-CPU view mirrors the kubelet's `topology.CPUTopology`/`CPUDetails`: every online
//! logical CPU has a core id (the lowest CPU id among its thread siblings), a socket id, a
//! NUMA node id and an uncore-cache id (the L3 instance it belongs to, or its socket on
//! machines without an L3). Beside it: the machine's NUMA nodes, including CPU-less ones,
//! with distance rows, and the uncore caches.
//!
//! The kubelet's arithmetic uses *declared* counts (`NumCPUs`, `NumCores`, `NumSockets`,
//! `NumNUMANodes`, `NumUncoreCache`). For discovered machines they equal the counts derived
//! from the CPU list; the kubelet's own test topologies sometimes declare other values, so
//! they are kept as a separate, explicit field ([`DeclaredCounts`]).

use std::collections::BTreeSet;

use crate::cpuset::CpuSet;

/// One online logical CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct CpuInfo {
    /// Logical CPU id.
    pub id: usize,
    /// Physical core id: the lowest logical CPU id among the core's thread siblings.
    pub core: usize,
    /// Socket (physical package) id.
    pub socket: usize,
    /// NUMA node id.
    pub numa: usize,
    /// Uncore cache id: the L3 instance, or the socket id where there is no L3.
    pub uncore: usize,
}

/// The topology's declared counts, as the kubelet's `CPUTopology` carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct DeclaredCounts {
    /// `NumCPUs`.
    pub num_cpus: usize,
    /// `NumCores`.
    pub num_cores: usize,
    /// `NumSockets`.
    pub num_sockets: usize,
    /// `NumNUMANodes`.
    pub num_numa_nodes: usize,
    /// `NumUncoreCache`.
    pub num_uncore_caches: usize,
}

impl DeclaredCounts {
    /// `CPUsPerCore()`: `NumCPUs / NumCores`, 0 when no cores are declared.
    pub fn cpus_per_core(&self) -> usize {
        self.num_cpus.checked_div(self.num_cores).unwrap_or(0)
    }
    /// `CPUsPerSocket()`: `NumCPUs / NumSockets`, 0 when no sockets are declared.
    pub fn cpus_per_socket(&self) -> usize {
        self.num_cpus.checked_div(self.num_sockets).unwrap_or(0)
    }
    /// `CPUsPerUncore()`: `NumCPUs / NumUncoreCache`, 0 when no caches are declared.
    pub fn cpus_per_uncore(&self) -> usize {
        self.num_cpus
            .checked_div(self.num_uncore_caches)
            .unwrap_or(0)
    }
}

/// A NUMA node of the machine; CPU-less (memory-only) nodes are included.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NumaNode {
    /// Node id (`nodeK`).
    pub id: usize,
    /// Online CPUs of the node (may be empty).
    pub cpus: CpuSet,
    /// Distance row, one column per node of the machine in ascending id order; `None` when
    /// the machine publishes no distances.
    pub distances: Option<Vec<u32>>,
    /// Total memory of the node in bytes (`MemTotal` of its meminfo), when known.
    pub memory_bytes: Option<u64>,
    /// Huge pages of the node: (page size in KiB, total pages), ascending by size.
    pub hugepages: Vec<(u64, u64)>,
}

/// An uncore (last-level, normally L3) cache instance.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UncoreCache {
    /// The id the CPUs' `uncore` field uses.
    pub id: usize,
    /// Cache level (3 for an L3); 0 when the socket stands in for a missing L3.
    pub level: u8,
    /// Online CPUs sharing it.
    pub cpus: CpuSet,
    /// Size in bytes, when known.
    pub size_bytes: Option<u64>,
}

/// Why a topology is inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// The same CPU id appears twice.
    #[error("cpu {0} is listed twice")]
    DuplicateCpu(usize),
    /// A CPU names a NUMA node the machine does not list.
    #[error("cpu {cpu} belongs to NUMA node {node}, which the topology does not list")]
    UnknownNumaNode {
        /// The CPU.
        cpu: usize,
        /// The node it names.
        node: usize,
    },
    /// A NUMA node is listed twice.
    #[error("NUMA node {0} is listed twice")]
    DuplicateNumaNode(usize),
    /// An id (CPU, core, socket, NUMA node or uncore cache) above the supported maximum.
    #[error(
        "{what} id {id} exceeds the supported maximum {}",
        crate::cpuset::MAX_CPU_ID
    )]
    IdTooLarge {
        /// Which kind of id (`cpu`, `core of cpu 3`, ...).
        what: String,
        /// The id.
        id: usize,
    },
    /// A distance row has the wrong number of columns.
    #[error("NUMA node {node} has {got} distances, expected one per node ({expected})")]
    DistanceShape {
        /// The node whose row is wrong.
        node: usize,
        /// Columns found.
        got: usize,
        /// Columns expected.
        expected: usize,
    },
}

/// A machine's CPU topology. Construct with [`CpuTopology::new`], which checks consistency.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuTopology {
    cpus: Vec<CpuInfo>,
    numa_nodes: Vec<NumaNode>,
    uncore_caches: Vec<UncoreCache>,
    declared: DeclaredCounts,
}

impl CpuTopology {
    /// Builds a topology. `cpus` and `numa_nodes` are sorted by id here. `uncore_caches` may
    /// be empty, in which case one entry per distinct `uncore` id of the CPUs is derived
    /// (level 0, unknown size). NUMA nodes that CPUs name but `numa_nodes` omits are an error,
    /// as are duplicate ids and distance rows whose length is not the node count.
    pub fn new(
        mut cpus: Vec<CpuInfo>,
        mut numa_nodes: Vec<NumaNode>,
        mut uncore_caches: Vec<UncoreCache>,
        declared: DeclaredCounts,
    ) -> Result<Self, TopologyError> {
        // Every id indexes tables and bitsets: cap them all, so that no input (a conformance
        // topology, a sysfs tree) can make a lookup table allocate gigabytes.
        let max = crate::cpuset::MAX_CPU_ID;
        let too_large = |what: String, id: usize| TopologyError::IdTooLarge { what, id };
        for c in &cpus {
            for (what, id) in [
                ("cpu", c.id),
                ("core", c.core),
                ("socket", c.socket),
                ("NUMA node", c.numa),
                ("uncore cache", c.uncore),
            ] {
                if id > max {
                    let what = if what == "cpu" {
                        what.to_string()
                    } else {
                        format!("{what} of cpu {}", c.id)
                    };
                    return Err(too_large(what, id));
                }
            }
        }
        for n in &numa_nodes {
            if n.id > max {
                return Err(too_large("NUMA node".into(), n.id));
            }
        }
        for u in &uncore_caches {
            if u.id > max {
                return Err(too_large("uncore cache".into(), u.id));
            }
        }
        cpus.sort_by_key(|c| c.id);
        for w in cpus.windows(2) {
            if w[0].id == w[1].id {
                return Err(TopologyError::DuplicateCpu(w[0].id));
            }
        }
        numa_nodes.sort_by_key(|n| n.id);
        for w in numa_nodes.windows(2) {
            if w[0].id == w[1].id {
                return Err(TopologyError::DuplicateNumaNode(w[0].id));
            }
        }
        let node_ids: BTreeSet<usize> = numa_nodes.iter().map(|n| n.id).collect();
        for c in &cpus {
            if !node_ids.contains(&c.numa) {
                return Err(TopologyError::UnknownNumaNode {
                    cpu: c.id,
                    node: c.numa,
                });
            }
        }
        for n in &numa_nodes {
            if let Some(row) = &n.distances {
                if row.len() != numa_nodes.len() {
                    return Err(TopologyError::DistanceShape {
                        node: n.id,
                        got: row.len(),
                        expected: numa_nodes.len(),
                    });
                }
            }
        }
        if uncore_caches.is_empty() {
            let ids: BTreeSet<usize> = cpus.iter().map(|c| c.uncore).collect();
            uncore_caches = ids
                .into_iter()
                .map(|id| UncoreCache {
                    id,
                    level: 0,
                    cpus: cpus
                        .iter()
                        .filter(|c| c.uncore == id)
                        .map(|c| c.id)
                        .collect(),
                    size_bytes: None,
                })
                .collect();
        }
        uncore_caches.sort_by_key(|u| u.id);
        Ok(Self {
            cpus,
            numa_nodes,
            uncore_caches,
            declared,
        })
    }

    /// Builds a topology whose declared counts are derived from the CPU list (what discovery
    /// and presets do).
    pub fn with_derived_counts(
        cpus: Vec<CpuInfo>,
        numa_nodes: Vec<NumaNode>,
        uncore_caches: Vec<UncoreCache>,
    ) -> Result<Self, TopologyError> {
        let distinct = |f: fn(&CpuInfo) -> usize| cpus.iter().map(f).collect::<BTreeSet<_>>().len();
        let declared = DeclaredCounts {
            num_cpus: cpus.len(),
            num_cores: distinct(|c| c.core),
            num_sockets: distinct(|c| c.socket),
            num_numa_nodes: distinct(|c| c.numa),
            num_uncore_caches: distinct(|c| c.uncore),
        };
        Self::new(cpus, numa_nodes, uncore_caches, declared)
    }

    /// Every online CPU, ascending by id.
    pub fn cpus(&self) -> &[CpuInfo] {
        &self.cpus
    }

    /// The CPU with this id, if online.
    pub fn cpu(&self, id: usize) -> Option<&CpuInfo> {
        self.cpus
            .binary_search_by_key(&id, |c| c.id)
            .ok()
            .map(|i| &self.cpus[i])
    }

    /// NUMA nodes (including CPU-less ones), ascending by id.
    pub fn numa_nodes(&self) -> &[NumaNode] {
        &self.numa_nodes
    }

    /// Uncore caches, ascending by id.
    pub fn uncore_caches(&self) -> &[UncoreCache] {
        &self.uncore_caches
    }

    /// The declared counts the kubelet's arithmetic uses.
    pub fn declared(&self) -> &DeclaredCounts {
        &self.declared
    }

    /// All online CPUs.
    pub fn all_cpus(&self) -> CpuSet {
        self.cpus.iter().map(|c| c.id).collect()
    }

    /// CPUs matching a predicate.
    pub fn cpus_where(&self, f: impl Fn(&CpuInfo) -> bool) -> CpuSet {
        self.cpus.iter().filter(|c| f(c)).map(|c| c.id).collect()
    }

    /// Distinct values of a per-CPU field over the CPUs of `within`, ascending.
    pub fn ids_of(&self, within: &CpuSet, f: impl Fn(&CpuInfo) -> usize) -> Vec<usize> {
        within
            .iter()
            .filter_map(|id| self.cpu(id))
            .map(f)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// The largest thread-sibling set (hybrid parts mix sizes).
    pub fn threads_per_core(&self) -> usize {
        let mut counts = std::collections::BTreeMap::<usize, usize>::new();
        for c in &self.cpus {
            *counts.entry(c.core).or_default() += 1;
        }
        counts.values().copied().max().unwrap_or(0)
    }

    /// Distance between two NUMA nodes, when the machine publishes distances.
    pub fn numa_distance(&self, from: usize, to: usize) -> Option<u32> {
        let col = self.numa_nodes.iter().position(|n| n.id == to)?;
        let row = self
            .numa_nodes
            .iter()
            .find(|n| n.id == from)?
            .distances
            .as_ref()?;
        row.get(col).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(id: usize, core: usize, socket: usize, numa: usize, uncore: usize) -> CpuInfo {
        CpuInfo {
            id,
            core,
            socket,
            numa,
            uncore,
        }
    }

    fn node(id: usize, cpus: &str, d: Option<Vec<u32>>) -> NumaNode {
        NumaNode {
            id,
            cpus: CpuSet::parse(cpus).unwrap(),
            distances: d,
            memory_bytes: None,
            hugepages: vec![],
        }
    }

    #[test]
    fn derived_counts_and_queries() {
        let cpus = vec![
            cpu(3, 1, 0, 1, 1),
            cpu(0, 0, 0, 0, 0),
            cpu(1, 0, 0, 0, 0),
            cpu(2, 2, 0, 1, 1),
        ];
        let t = CpuTopology::with_derived_counts(
            cpus,
            vec![
                node(1, "2-3", Some(vec![12, 10])),
                node(0, "0-1", Some(vec![10, 12])),
            ],
            vec![],
        )
        .unwrap();
        assert_eq!(t.cpus()[0].id, 0);
        assert_eq!(t.declared().num_cores, 3);
        assert_eq!(t.declared().cpus_per_core(), 1);
        assert_eq!(t.threads_per_core(), 2);
        assert_eq!(t.uncore_caches().len(), 2);
        assert_eq!(t.numa_distance(0, 1), Some(12));
        assert_eq!(t.cpus_where(|c| c.numa == 1).to_string(), "2-3");
        assert_eq!(t.ids_of(&t.all_cpus(), |c| c.uncore), vec![0, 1]);
    }

    #[test]
    fn rejects_inconsistencies() {
        let n0 = || vec![node(0, "0", None)];
        assert_eq!(
            CpuTopology::with_derived_counts(
                vec![cpu(0, 0, 0, 0, 0), cpu(0, 0, 0, 0, 0)],
                n0(),
                vec![]
            ),
            Err(TopologyError::DuplicateCpu(0))
        );
        assert_eq!(
            CpuTopology::with_derived_counts(vec![cpu(0, 0, 0, 5, 0)], n0(), vec![]),
            Err(TopologyError::UnknownNumaNode { cpu: 0, node: 5 })
        );
        assert!(matches!(
            CpuTopology::with_derived_counts(
                vec![cpu(0, 0, 0, 0, 0)],
                vec![node(0, "0", Some(vec![10, 20]))],
                vec![]
            ),
            Err(TopologyError::DistanceShape { .. })
        ));
        // Ids far past any machine (a hostile conformance topology) are refused, not used
        // to size tables.
        let e =
            CpuTopology::with_derived_counts(vec![cpu(4_000_000_000, 0, 0, 0, 0)], n0(), vec![])
                .expect_err("huge cpu id");
        assert_eq!(
            e.to_string(),
            "cpu id 4000000000 exceeds the supported maximum 1048575"
        );
        let e = CpuTopology::with_derived_counts(vec![cpu(0, 0, 0, 0, 1 << 40)], n0(), vec![])
            .expect_err("huge cache id");
        assert_eq!(
            e.to_string(),
            "uncore cache of cpu 0 id 1099511627776 exceeds the supported maximum 1048575"
        );
    }
}
