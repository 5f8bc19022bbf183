//! The kubelet's `cpuAccumulator` and `takeByTopologyNUMAPacked` (pkg/kubelet/cm/cpumanager,
//! `cpu_assignment.go`), as in kubelet v1.37.2: a NUMA node or uncore cache is *free* when
//! all of its own CPUs are available, a core or socket when its available CPU count equals
//! the declared average (`CPUsPerCore`, `CPUsPerSocket`); see `Accumulator::is_free`.
//!
//! Expected flow of a packed take (`take_packed`):
//! 1. whole NUMA nodes and sockets (NUMA first when declared `NumSockets >= NumNUMANodes`,
//!    else sockets first), each only if the request needs at least its size;
//! 2. with `prefer-align-cpus-by-uncorecache`: whole uncore caches, else the fewest caches
//!    that can hold the rest (`takeUncoreCache`);
//! 3. whole cores (skipped with the `spread` strategy of `distribute-cpus-across-cores`);
//! 4. single CPUs in the sorter's order.
//!
//! Every ordering sorts by ascending number of free CPUs, then ascending id.
//!
//! Kubelet quirks kept on purpose (nodetopo predicts what the kubelet does):
//! - The list walks are literal: a group reached twice through two parents (a core id that
//!   repeats on two sockets) is visited twice, and taking an already-taken CPU still counts
//!   against the request, as the kubelet's `take` subtracts `cpus.Size()`.
//! - `takePartialUncore` uses the declared `CPUsPerCore` (0 declared cores: the step is
//!   skipped where the kubelet would divide by zero).

use super::index::{Level, TopoIndex};
use super::CpuSortingStrategy;
use crate::cpuset::CpuSet;

/// The accumulator: what is still available, what was taken, how many CPUs are still needed.
#[derive(Debug, Clone)]
pub(crate) struct Accumulator<'a> {
    pub ix: &'a TopoIndex,
    /// Availability by pos (the kubelet's `details`).
    pub avail: Vec<bool>,
    /// Free CPU count per level and dense group.
    pub free: [Vec<usize>; 4],
    /// Taken CPUs by pos (the kubelet's `result`).
    pub taken: Vec<bool>,
    /// `numCPUsNeeded`; may go negative through the quirks above.
    pub needed: i64,
    /// Sorting strategy.
    pub strategy: CpuSortingStrategy,
}

impl<'a> Accumulator<'a> {
    /// `newCPUAccumulator`.
    pub fn new(
        ix: &'a TopoIndex,
        avail: Vec<bool>,
        needed: usize,
        strategy: CpuSortingStrategy,
    ) -> Self {
        let free: [Vec<usize>; 4] = std::array::from_fn(|l| vec![0; ix.ids[l].len()]);
        let mut free = free;
        for (p, a) in avail.iter().enumerate() {
            if *a {
                for (l, f) in free.iter_mut().enumerate() {
                    f[ix.group_of[l][p]] += 1;
                }
            }
        }
        Self {
            ix,
            taken: vec![false; avail.len()],
            avail,
            free,
            needed: needed as i64,
            strategy,
        }
    }

    /// `take`: adds the CPUs (by pos) to the result and removes them from the available ones;
    /// the request shrinks by the number of CPUs passed, as in the kubelet.
    pub fn take(&mut self, positions: &[usize]) {
        for &p in positions {
            self.taken[p] = true;
            if self.avail[p] {
                self.avail[p] = false;
                for l in 0..4 {
                    self.free[l][self.ix.group_of[l][p]] -= 1;
                }
            }
        }
        self.needed -= positions.len() as i64;
    }

    /// The result as a CPU set.
    pub fn result(&self) -> CpuSet {
        self.ix
            .set_of((0..self.taken.len()).filter(|p| self.taken[*p]))
    }

    /// Number of CPUs still available.
    pub fn available_count(&self) -> usize {
        self.avail.iter().filter(|a| **a).count()
    }

    /// Available positions of a group.
    pub fn avail_in(&self, level: Level, g: usize) -> Vec<usize> {
        self.ix.members[level as usize][g]
            .iter()
            .copied()
            .filter(|p| self.avail[*p])
            .collect()
    }

    /// `needsAtLeast`.
    pub fn needs_at_least(&self, n: usize) -> bool {
        self.needed >= n as i64
    }

    /// `isSatisfied`.
    pub fn is_satisfied(&self) -> bool {
        self.needed < 1
    }

    /// `isFailed`.
    pub fn is_failed(&self) -> bool {
        self.needed > self.available_count() as i64
    }

    /// Sorts dense group ids by ascending free CPUs, then ascending id (`cpuAccumulator.sort`).
    fn sort(&self, level: Level, v: &mut [usize]) {
        let f = &self.free[level as usize];
        v.sort_by(|a, b| f[*a].cmp(&f[*b]).then(a.cmp(b)));
    }

    /// Groups at `child` level that hold an available CPU of group `parent` at `plevel`,
    /// sorted (`XInY` of the kubelet's details, then `sort`).
    fn children(&self, plevel: Level, parent: usize, child: Level) -> Vec<usize> {
        let mut v: Vec<usize> = self.ix.members[plevel as usize][parent]
            .iter()
            .filter(|p| self.avail[**p])
            .map(|p| self.ix.group_of[child as usize][*p])
            .collect();
        v.sort_unstable();
        v.dedup();
        self.sort(child, &mut v);
        v
    }

    /// Every group of a level with an available CPU, sorted.
    fn all_available(&self, level: Level) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.ix.count(level))
            .filter(|g| self.free[level as usize][*g] > 0)
            .collect();
        self.sort(level, &mut v);
        v
    }

    /// `sortAvailableNUMANodes`.
    pub fn sort_available_numa_nodes(&self) -> Vec<usize> {
        if self.ix.numa_first {
            self.all_available(Level::Numa)
        } else {
            self.all_available(Level::Socket)
                .into_iter()
                .flat_map(|s| self.children(Level::Socket, s, Level::Numa))
                .collect()
        }
    }

    /// `sortAvailableSockets`.
    pub fn sort_available_sockets(&self) -> Vec<usize> {
        if self.ix.numa_first {
            self.all_available(Level::Numa)
                .into_iter()
                .flat_map(|n| self.children(Level::Numa, n, Level::Socket))
                .collect()
        } else {
            self.all_available(Level::Socket)
        }
    }

    /// `sortAvailableCores`.
    pub fn sort_available_cores(&self) -> Vec<usize> {
        if self.ix.numa_first {
            self.sort_available_sockets()
                .into_iter()
                .flat_map(|s| self.children(Level::Socket, s, Level::Core))
                .collect()
        } else {
            self.sort_available_numa_nodes()
                .into_iter()
                .flat_map(|n| self.children(Level::Numa, n, Level::Core))
                .collect()
        }
    }

    /// `sortAvailableUncoreCaches`.
    pub fn sort_available_uncore_caches(&self) -> Vec<usize> {
        self.sort_available_numa_nodes()
            .into_iter()
            .flat_map(|n| self.children(Level::Numa, n, Level::Uncore))
            .collect()
    }

    /// The kubelet v1.37's `is*Free`: a NUMA node or uncore cache is free when every CPU
    /// the topology lists for it is available; a core or socket when its available CPU
    /// count equals the declared average (`CPUsPerCore`, `CPUsPerSocket`). On machines
    /// whose cores (or sockets) differ in size the two differ: a 2-thread core with one
    /// thread taken counts as free when `NumCPUs / NumCores` is 1, and `takeFullCores` then
    /// takes both threads, the taken one included (checked against the kubelet's own code
    /// by `engine/tests/kubelet_oracle.rs`).
    fn is_free(&self, level: Level, g: usize) -> bool {
        let free = self.free[level as usize][g];
        match level {
            Level::Core => free == self.ix.cpus_per_core(),
            Level::Socket => free == self.ix.cpus_per_socket(),
            _ => free == self.ix.members[level as usize][g].len(),
        }
    }

    fn free_of(&self, level: Level, order: Vec<usize>) -> Vec<usize> {
        order
            .into_iter()
            .filter(|g| self.is_free(level, *g))
            .collect()
    }

    /// `freeNUMANodes` (dense indices).
    pub fn free_numa_nodes(&self) -> Vec<usize> {
        self.free_of(Level::Numa, self.sort_available_numa_nodes())
    }

    /// `freeSockets` (dense indices).
    pub fn free_sockets(&self) -> Vec<usize> {
        self.free_of(Level::Socket, self.sort_available_sockets())
    }

    /// `freeUncoreCache` (dense indices).
    pub fn free_uncore_caches(&self) -> Vec<usize> {
        self.free_of(Level::Uncore, self.sort_available_uncore_caches())
    }

    /// `freeCores` (dense indices).
    pub fn free_cores(&self) -> Vec<usize> {
        self.free_of(Level::Core, self.sort_available_cores())
    }

    /// `freeCPUs`: the sorter's order (positions). Packed: cores in `sortAvailableCores`
    /// order, each core's available CPUs ascending. Spread: sockets in
    /// `sortAvailableSockets` order, each socket's available CPUs ascending.
    pub fn free_cpus(&self) -> Vec<usize> {
        let (level, order) = match self.strategy {
            CpuSortingStrategy::Packed => (Level::Core, self.sort_available_cores()),
            CpuSortingStrategy::Spread => (Level::Socket, self.sort_available_sockets()),
        };
        order
            .into_iter()
            .flat_map(|g| self.avail_in(level, g))
            .collect()
    }

    /// Takes every whole free group of a level the request still needs entirely.
    fn take_full(&mut self, level: Level, free: Vec<usize>) {
        let ix = self.ix;
        for g in free {
            let all = &ix.members[level as usize][g];
            if !self.needs_at_least(all.len()) {
                continue;
            }
            self.take(all);
        }
    }

    /// `takeFullNUMANodes`.
    pub fn take_full_numa_nodes(&mut self) {
        let f = self.free_numa_nodes();
        self.take_full(Level::Numa, f);
    }

    /// `takeFullSockets`.
    pub fn take_full_sockets(&mut self) {
        let f = self.free_sockets();
        self.take_full(Level::Socket, f);
    }

    /// `takeFullUncore`.
    pub fn take_full_uncore(&mut self) {
        let f = self.free_uncore_caches();
        self.take_full(Level::Uncore, f);
    }

    /// `takeFullCores`.
    pub fn take_full_cores(&mut self) {
        let f = self.free_cores();
        self.take_full(Level::Core, f);
    }

    /// `takePartialUncore`: claims the CPUs of the lowest-id cores with available CPUs in
    /// this cache if they hold exactly what is still needed (for an odd need with SMT, the
    /// highest of those CPUs is dropped first).
    pub fn take_partial_uncore(&mut self, uncore: usize) {
        let cpc = self.ix.cpus_per_core();
        if cpc == 0 || self.needed < 1 {
            return;
        }
        let needed = self.needed as usize;
        let cores_needed = needed.div_ceil(cpc);
        let mut cores: Vec<usize> = self.ix.members[Level::Uncore as usize][uncore]
            .iter()
            .filter(|p| self.avail[**p])
            .map(|p| self.ix.group_of[Level::Core as usize][*p])
            .collect();
        cores.sort_unstable();
        cores.dedup();
        cores.truncate(cores_needed);
        // CPUsInCores over the available CPUs: keyed by core id alone, so a core id shared
        // with another cache or socket brings its CPUs there too.
        let mut cpus: Vec<usize> = cores
            .iter()
            .flat_map(|c| self.avail_in(Level::Core, *c))
            .collect();
        cpus.sort_unstable_by_key(|p| self.ix.cpus[*p].id);
        if needed % 2 != 0 && cpc > 1 && cpus.len() > needed {
            cpus.pop();
        }
        if cpus.len() == needed {
            self.take(&cpus);
        }
    }

    /// `takeUncoreCache`: per cache in `sortAvailableUncoreCaches` order, whole free caches
    /// when the need is at least the declared `CPUsPerUncore()` (kubelet v1.37.2: the
    /// average, not this cache's own size; they differ on uneven caches), then a partial
    /// claim of this cache.
    pub fn take_uncore_cache(&mut self) {
        let size = self.ix.cpus_per_uncore();
        for u in self.sort_available_uncore_caches() {
            if self.needs_at_least(size) {
                self.take_full_uncore();
            }
            if self.is_satisfied() {
                return;
            }
            self.take_partial_uncore(u);
            if self.is_satisfied() {
                return;
            }
        }
    }

    /// `takeRemainingCPUs`.
    pub fn take_remaining_cpus(&mut self) {
        for p in self.free_cpus() {
            self.take(&[p]);
            if self.is_satisfied() {
                return;
            }
        }
    }

    /// `rangeNUMANodesNeededToSatisfy` (counts from the listed CPUs).
    pub fn range_numa_nodes_needed(&self, group: usize) -> (usize, usize) {
        let num_numa = self.ix.count(Level::Numa).max(1);
        let num_avail_numa = self.free[Level::Numa as usize]
            .iter()
            .filter(|f| **f > 0)
            .count();
        let num_cpus = self.ix.cpus.len();
        let groups = num_cpus.saturating_sub(1) / group + 1;
        let per_node = groups.saturating_sub(1) / num_numa + 1;
        let needed = (self.needed.max(1) as usize - 1) / group + 1;
        let min = (needed - 1) / per_node + 1;
        let max = needed.min(num_avail_numa);
        (min, max)
    }
}

/// Why a take failed; Display is the kubelet's exact message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TakeError {
    /// More CPUs requested than available.
    #[error("not enough cpus available to satisfy request: requested={requested}, available={available}")]
    NotEnough {
        /// CPUs requested.
        requested: usize,
        /// CPUs available (size of the set passed in).
        available: usize,
    },
    /// The packed take ran out of candidates.
    #[error("failed to allocate cpus")]
    Failed,
    /// The distributed take handed out too few CPUs.
    #[error("accounting error, not enough CPUs allocated, remaining: {0}")]
    AccountingShort(i64),
    /// The distributed take handed out too many CPUs.
    #[error("accounting error, too many CPUs allocated, remaining: {0}")]
    AccountingOver(i64),
}

/// `takeByTopologyNUMAPacked` over an index.
pub(crate) fn take_packed(
    ix: &TopoIndex,
    available: &CpuSet,
    n: usize,
    strategy: CpuSortingStrategy,
    prefer_align_uncore: bool,
) -> Result<CpuSet, TakeError> {
    if n == 0 {
        // The kubelet builds an accumulator that is satisfied at once: the empty set.
        return Ok(CpuSet::new());
    }
    take_packed_flags(
        ix,
        ix.flags(available),
        available.len(),
        n,
        strategy,
        prefer_align_uncore,
    )
}

/// `takeByTopologyNUMAPacked` over availability flags (by pos); `available_len` is the size
/// of the caller's set, which the kubelet's error message reports.
pub(crate) fn take_packed_flags(
    ix: &TopoIndex,
    flags: Vec<bool>,
    available_len: usize,
    n: usize,
    strategy: CpuSortingStrategy,
    prefer_align_uncore: bool,
) -> Result<CpuSet, TakeError> {
    let mut acc = Accumulator::new(ix, flags, n, strategy);
    if acc.is_satisfied() {
        return Ok(acc.result());
    }
    if acc.is_failed() {
        return Err(TakeError::NotEnough {
            requested: n,
            available: available_len,
        });
    }
    if ix.numa_first {
        acc.take_full_numa_nodes();
    } else {
        acc.take_full_sockets();
    }
    if acc.is_satisfied() {
        return Ok(acc.result());
    }
    if ix.numa_first {
        acc.take_full_sockets();
    } else {
        acc.take_full_numa_nodes();
    }
    if acc.is_satisfied() {
        return Ok(acc.result());
    }
    if prefer_align_uncore {
        acc.take_uncore_cache();
        if acc.is_satisfied() {
            return Ok(acc.result());
        }
    }
    if strategy != CpuSortingStrategy::Spread {
        acc.take_full_cores();
        if acc.is_satisfied() {
            return Ok(acc.result());
        }
    }
    acc.take_remaining_cpus();
    if acc.is_satisfied() {
        return Ok(acc.result());
    }
    Err(TakeError::Failed)
}
