//! Public entry points of the take algorithms, over a plain [`CpuTopology`].
//!
//! These build the topology index on every call; the static policy keeps one index and calls
//! the same algorithms through it.

use super::accumulator::{take_packed, Accumulator, TakeError};
use super::distributed::take_distributed;
use super::index::TopoIndex;
use crate::cpuset::CpuSet;
use crate::topology::CpuTopology;

/// The kubelet's `CPUSortingStrategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CpuSortingStrategy {
    /// Fill cores before moving on (default).
    Packed,
    /// `distribute-cpus-across-cores`: skip the whole-core step, take CPUs by socket in
    /// ascending id order.
    Spread,
}

/// `takeByTopologyNUMAPacked(topo, available, n, strategy, preferAlignByUncoreCache)`.
///
/// Returns exactly the kubelet's set, or its error (`n > |available|` is
/// [`TakeError::NotEnough`]). `n == 0` gives the empty set.
pub fn take_by_topology_numa_packed(
    topology: &CpuTopology,
    available: &CpuSet,
    n: usize,
    strategy: CpuSortingStrategy,
    prefer_align_uncore: bool,
) -> Result<CpuSet, TakeError> {
    let ix = TopoIndex::new(topology);
    take_packed(&ix, available, n, strategy, prefer_align_uncore)
}

/// `takeByTopologyNUMADistributed(topo, available, n, cpuGroupSize, strategy, alignBySocket)`.
///
/// `group_size` 0 is treated as 1 (the kubelet would divide by zero). See
/// [`super::distributed`] for the algorithm and the Go behaviours it reproduces.
pub fn take_by_topology_numa_distributed(
    topology: &CpuTopology,
    available: &CpuSet,
    n: usize,
    group_size: usize,
    strategy: CpuSortingStrategy,
    align_by_socket: bool,
) -> Result<CpuSet, TakeError> {
    let ix = TopoIndex::new(topology);
    take_distributed(&ix, available, n, group_size, strategy, align_by_socket)
}

/// The kubelet's `cpuAccumulator`, exposed for conformance tests of its internals (the
/// `TestCPUAccumulator*` tables). Group ids returned are real ids (socket, NUMA node, core
/// ids); CPU lists are CPU ids.
#[derive(Debug, Clone)]
pub struct CpuAccumulator {
    ix: TopoIndex,
    avail: Vec<bool>,
    free: [Vec<usize>; 4],
    taken: Vec<bool>,
    needed: i64,
    strategy: CpuSortingStrategy,
}

impl CpuAccumulator {
    /// `newCPUAccumulator(topo, available, numCPUs, strategy)`.
    pub fn new(
        topology: &CpuTopology,
        available: &CpuSet,
        n: usize,
        strategy: CpuSortingStrategy,
    ) -> Self {
        let ix = TopoIndex::new(topology);
        let acc = Accumulator::new(&ix, ix.flags(available), n, strategy);
        let Accumulator {
            avail,
            free,
            taken,
            needed,
            ..
        } = acc;
        Self {
            ix,
            avail,
            free,
            taken,
            needed,
            strategy,
        }
    }

    fn with<R>(&mut self, f: impl FnOnce(&mut Accumulator<'_>) -> R) -> R {
        let mut acc = Accumulator {
            ix: &self.ix,
            avail: std::mem::take(&mut self.avail),
            free: std::mem::take(&mut self.free),
            taken: std::mem::take(&mut self.taken),
            needed: self.needed,
            strategy: self.strategy,
        };
        let r = f(&mut acc);
        self.avail = acc.avail;
        self.free = acc.free;
        self.taken = acc.taken;
        self.needed = acc.needed;
        r
    }

    fn real(&self, level: super::index::Level, dense: Vec<usize>) -> Vec<usize> {
        dense
            .into_iter()
            .map(|g| self.ix.ids[level as usize][g])
            .collect()
    }

    /// `freeSockets`, in the kubelet's order.
    pub fn free_sockets(&mut self) -> Vec<usize> {
        let d = self.with(|a| a.free_sockets());
        self.real(super::index::Level::Socket, d)
    }

    /// `freeNUMANodes`, in the kubelet's order.
    pub fn free_numa_nodes(&mut self) -> Vec<usize> {
        let d = self.with(|a| a.free_numa_nodes());
        self.real(super::index::Level::Numa, d)
    }

    /// `freeUncoreCache`, in the kubelet's order.
    pub fn free_uncore_caches(&mut self) -> Vec<usize> {
        let d = self.with(|a| a.free_uncore_caches());
        self.real(super::index::Level::Uncore, d)
    }

    /// `freeCores`, in the kubelet's order.
    pub fn free_cores(&mut self) -> Vec<usize> {
        let d = self.with(|a| a.free_cores());
        self.real(super::index::Level::Core, d)
    }

    /// `freeCPUs`, in the kubelet's order.
    pub fn free_cpus(&mut self) -> Vec<usize> {
        let d = self.with(|a| a.free_cpus());
        d.into_iter().map(|p| self.ix.cpus[p].id).collect()
    }

    /// `take(cpus)`: the request shrinks by `|cpus|`.
    pub fn take(&mut self, cpus: &CpuSet) {
        let known: Vec<usize> = cpus.iter().filter_map(|id| self.ix.pos(id)).collect();
        let unknown = (cpus.len() - known.len()) as i64;
        self.with(|a| a.take(&known));
        self.needed -= unknown;
    }

    /// `isSatisfied`.
    pub fn is_satisfied(&mut self) -> bool {
        self.with(|a| a.is_satisfied())
    }

    /// `isFailed`.
    pub fn is_failed(&mut self) -> bool {
        self.with(|a| a.is_failed())
    }

    /// `numCPUsNeeded`.
    pub fn needed(&self) -> i64 {
        self.needed
    }

    /// The CPUs taken so far.
    pub fn result(&mut self) -> CpuSet {
        self.with(|a| a.result())
    }
}
