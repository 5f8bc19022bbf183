//! A dense, precomputed view of a [`CpuTopology`] for the take algorithms.
//!
//! The kubelet answers "which CPUs are in NUMA node 3?" by scanning a map every time. The
//! allocation algorithms ask such questions thousands of times per request, so this index maps
//! every socket, NUMA node, uncore cache and core id to a dense index with its member CPUs
//! (by position in the topology's CPU list). Dense indices are assigned in ascending id order,
//! so comparing dense indices is comparing ids, which the kubelet's tie-breaks rely on.
//!
//! Cores are keyed by core id **alone**, exactly as the kubelet's `CPUDetails.CPUsInCores`:
//! a core id that repeats on two sockets is one "core" here too.

use crate::cpuset::CpuSet;
use crate::topology::{CpuInfo, CpuTopology, DeclaredCounts};

/// The four topology levels the algorithms group CPUs by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// NUMA node.
    Numa = 0,
    /// Socket.
    Socket = 1,
    /// Uncore (L3) cache.
    Uncore = 2,
    /// Physical core.
    Core = 3,
}

/// Precomputed groups of a topology.
#[derive(Debug, Clone)]
pub(crate) struct TopoIndex {
    /// CPUs sorted by id; a CPU's position in this list is its "pos".
    pub cpus: Vec<CpuInfo>,
    /// id -> pos, `u32::MAX` for ids the topology does not list.
    pos_of: Vec<u32>,
    /// Per level: dense group index of every pos.
    pub group_of: [Vec<usize>; 4],
    /// Per level: the real id of every dense group index (ascending).
    pub ids: [Vec<usize>; 4],
    /// Per level: member positions of every group (ascending).
    pub members: [Vec<Vec<usize>>; 4],
    /// NUMA nodes and sockets: the CPU set of every group.
    pub sets: [Vec<CpuSet>; 2],
    /// The declared counts.
    pub declared: DeclaredCounts,
    /// The kubelet's `NumSockets >= NumNUMANodes` (declared counts): NUMA nodes first.
    pub numa_first: bool,
}

impl TopoIndex {
    /// Builds the index of a topology.
    pub fn new(t: &CpuTopology) -> Self {
        let cpus = t.cpus().to_vec();
        let max_id = cpus.last().map(|c| c.id + 1).unwrap_or(0);
        let mut pos_of = vec![u32::MAX; max_id];
        for (p, c) in cpus.iter().enumerate() {
            pos_of[c.id] = p as u32;
        }
        let key = |c: &CpuInfo, l: usize| match l {
            0 => c.numa,
            1 => c.socket,
            2 => c.uncore,
            _ => c.core,
        };
        let mut group_of: [Vec<usize>; 4] = Default::default();
        let mut ids: [Vec<usize>; 4] = Default::default();
        let mut members: [Vec<Vec<usize>>; 4] = Default::default();
        for l in 0..4 {
            let mut v: Vec<usize> = cpus.iter().map(|c| key(c, l)).collect();
            v.sort_unstable();
            v.dedup();
            let dense = |id: usize| v.binary_search(&id).unwrap_or(0);
            group_of[l] = cpus.iter().map(|c| dense(key(c, l))).collect();
            let mut m = vec![Vec::new(); v.len()];
            for (p, g) in group_of[l].iter().enumerate() {
                m[*g].push(p);
            }
            members[l] = m;
            ids[l] = v;
        }
        let declared = *t.declared();
        let set = |m: &Vec<usize>| -> CpuSet { m.iter().map(|p| cpus[*p].id).collect() };
        let sets = [
            members[0].iter().map(set).collect(),
            members[1].iter().map(set).collect(),
        ];
        Self {
            sets,
            cpus,
            pos_of,
            group_of,
            ids,
            members,
            numa_first: declared.num_sockets >= declared.num_numa_nodes,
            declared,
        }
    }

    /// Position of a CPU id, if the topology lists it.
    pub fn pos(&self, id: usize) -> Option<usize> {
        match self.pos_of.get(id) {
            Some(&p) if p != u32::MAX => Some(p as usize),
            _ => None,
        }
    }

    /// Availability flags (by pos) of a CPU set; ids the topology does not list are dropped,
    /// as the kubelet's `CPUDetails.KeepOnly` drops them.
    pub fn flags(&self, set: &CpuSet) -> Vec<bool> {
        let mut f = vec![false; self.cpus.len()];
        for id in set.iter() {
            if let Some(p) = self.pos(id) {
                f[p] = true;
            }
        }
        f
    }

    /// The CPU set of some positions.
    pub fn set_of(&self, positions: impl IntoIterator<Item = usize>) -> CpuSet {
        positions.into_iter().map(|p| self.cpus[p].id).collect()
    }

    /// Number of groups at a level.
    pub fn count(&self, level: Level) -> usize {
        self.ids[level as usize].len()
    }

    /// `CPUsPerCore()` from the declared counts.
    pub fn cpus_per_core(&self) -> usize {
        self.declared.cpus_per_core()
    }

    /// `CPUsPerUncore()` from the declared counts.
    pub fn cpus_per_uncore(&self) -> usize {
        self.declared.cpus_per_uncore()
    }

    /// `CPUsPerSocket()` from the declared counts.
    pub fn cpus_per_socket(&self) -> usize {
        self.declared.cpus_per_socket()
    }
}
