//! The kubelet's static CPU manager policy (`policy_static.go`).
//!
//! Expected flow: [`StaticPolicy::new`] (options, reserved set) → [`StaticPolicy::start`]
//! on the state (initialise or validate it) → per container [`StaticPolicy::container_hints`]
//! / [`StaticPolicy::pod_hints`] for the topology manager, then [`StaticPolicy::allocate`]
//! with the merged hint → [`StaticPolicy::remove_container`] when it ends.
//!
//! Guarantees: a successful allocation moves exactly the returned CPUs out of the default
//! set into the container's assignment; a failed one changes nothing. Reserved CPUs are
//! never handed out.
//!
//! State kept on the policy, as in the kubelet: the init containers' CPUs that later
//! containers of the same pod may reuse (`cpusToReuse`). Only the most recent pod's entry is
//! kept; allocating for another pod forgets it.
//!
//! Caveats (kubelet behaviour kept): the full-pcpus-only checks come before the
//! "already assigned" short cut; the take runs on `default − reserved` plus the reusable CPUs.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::accumulator::{take_packed, TakeError};
use super::distributed::take_distributed;
use super::errors::{AllocateError, PolicyError};
use super::hints::{generate_cpu_topology_hints, guaranteed_cpus, pod_guaranteed_cpus};
use super::index::{Level, TopoIndex};
use super::options::StaticPolicyOptions;
use super::state::CpuState;
use super::CpuSortingStrategy;
use crate::cpuset::CpuSet;
use crate::pod::{Container, Pod};
use crate::topology::CpuTopology;
use crate::topologymanager::{NumaMask, TopologyHint};

/// How the reserved CPUs are given (`reservedSystemCPUs` or a count from kube/system
/// reserved).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReservedCpus {
    /// An explicit set.
    Explicit(CpuSet),
    /// A count, taken topologically (the policy's own take over all CPUs).
    Count(usize),
}

/// The static policy of one node.
#[derive(Debug)]
pub struct StaticPolicy {
    topology: CpuTopology,
    ix: TopoIndex,
    options: StaticPolicyOptions,
    reserved: CpuSet,
    reserved_physical: CpuSet,
    /// `cpusToReuse`: pod UID -> CPUs of its finished init containers.
    reuse: Mutex<BTreeMap<String, CpuSet>>,
}

impl Clone for StaticPolicy {
    fn clone(&self) -> Self {
        Self {
            topology: self.topology.clone(),
            ix: self.ix.clone(),
            options: self.options,
            reserved: self.reserved.clone(),
            reserved_physical: self.reserved_physical.clone(),
            reuse: Mutex::new(self.reuse_map().clone()),
        }
    }
}

impl StaticPolicy {
    /// `NewStaticPolicy`: checks the options against the topology (align-by-socket needs no
    /// more sockets than NUMA nodes; the single-numa-node check needs the topology manager's
    /// policy, see [`StaticPolicyOptions::validate_for`]) and picks the reserved CPUs.
    pub fn new(
        topology: CpuTopology,
        reserved: ReservedCpus,
        options: StaticPolicyOptions,
    ) -> Result<Self, PolicyError> {
        let (count, explicit) = match reserved {
            ReservedCpus::Explicit(s) => (s.len(), s),
            ReservedCpus::Count(n) => (n, CpuSet::new()),
        };
        Self::new_kubelet(topology, count, &explicit, options)
    }

    /// `NewStaticPolicy` with the kubelet's two arguments: `num_reserved` and an explicit
    /// set (used when non-empty; its size must still equal `num_reserved`).
    pub fn new_kubelet(
        topology: CpuTopology,
        num_reserved: usize,
        explicit: &CpuSet,
        options: StaticPolicyOptions,
    ) -> Result<Self, PolicyError> {
        options.check_compatible()?;
        options.validate_for(&topology, false)?;
        let ix = TopoIndex::new(&topology);
        let mut p = Self {
            topology,
            ix,
            options,
            reserved: CpuSet::new(),
            reserved_physical: CpuSet::new(),
            reuse: Mutex::new(BTreeMap::new()),
        };
        let reserved = if !explicit.is_empty() {
            explicit.clone()
        } else {
            // A failed take leaves the set empty; the size check below reports it.
            p.take_by_topology(&p.topology.all_cpus(), num_reserved)
                .unwrap_or_default()
        };
        if reserved.len() != num_reserved {
            return Err(PolicyError::ReservedSize {
                reserved: reserved.to_string(),
                requested: num_reserved,
            });
        }
        let mut physical = CpuSet::new();
        for cpu in reserved.iter() {
            let Some(pos) = p.ix.pos(cpu) else {
                return Err(PolicyError::ReservedUnknownCpu(cpu));
            };
            let core = p.ix.group_of[Level::Core as usize][pos];
            physical = physical.union(
                &p.ix
                    .set_of(p.ix.members[Level::Core as usize][core].iter().copied()),
            );
        }
        p.reserved = reserved;
        p.reserved_physical = physical;
        Ok(p)
    }

    /// The machine.
    pub fn topology(&self) -> &CpuTopology {
        &self.topology
    }

    /// The reserved CPUs.
    pub fn reserved(&self) -> &CpuSet {
        &self.reserved
    }

    /// Every CPU of a core that holds a reserved CPU (full-pcpus-only keeps them out).
    pub fn reserved_physical(&self) -> &CpuSet {
        &self.reserved_physical
    }

    /// The options.
    pub fn options(&self) -> &StaticPolicyOptions {
        &self.options
    }

    fn reuse_map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, CpuSet>> {
        // The map holds plain data; a panic elsewhere cannot leave it half-updated.
        self.reuse.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The CPUs a pod's later containers may reuse (from its init containers).
    pub fn reusable(&self, pod_uid: &str) -> CpuSet {
        self.reuse_map().get(pod_uid).cloned().unwrap_or_default()
    }

    /// Forgets the reuse bookkeeping (e.g. after a rejected pod was rolled back).
    pub fn clear_reuse(&self) {
        self.reuse_map().clear();
    }

    /// `takeByTopology`: the policy's take (distributed with distribute-cpus-across-numa,
    /// else packed; spread sorting with distribute-cpus-across-cores).
    pub fn take_by_topology(&self, available: &CpuSet, n: usize) -> Result<CpuSet, TakeError> {
        let strategy = if self.options.distribute_cpus_across_cores {
            CpuSortingStrategy::Spread
        } else {
            CpuSortingStrategy::Packed
        };
        if self.options.distribute_cpus_across_numa {
            let g = if self.options.full_pcpus_only {
                self.ix.cpus_per_core()
            } else {
                1
            };
            return take_distributed(
                &self.ix,
                available,
                n,
                g,
                strategy,
                self.options.align_by_socket,
            );
        }
        take_packed(
            &self.ix,
            available,
            n,
            strategy,
            self.options.prefer_align_cpus_by_uncorecache,
        )
    }

    /// `Start` / `validateState`: an empty state is initialised (every CPU shared, minus the
    /// reserved ones with strict-cpu-reservation); a non-empty one must be consistent.
    pub fn start(&self, state: &mut CpuState) -> Result<(), PolicyError> {
        let mut all = self.topology.all_cpus();
        if self.options.strict_cpu_reservation {
            all = all.difference(&self.reserved);
        }
        let default = &state.default_cpuset;
        if default.is_empty() {
            if !state.assignments.is_empty() {
                return Err(PolicyError::EmptyDefault);
            }
            state.default_cpuset = all;
            return Ok(());
        }
        if self.options.strict_cpu_reservation {
            let overlap = self.reserved.intersection(default);
            if !overlap.is_empty() {
                return Err(PolicyError::StrictReservedInDefault {
                    overlap: overlap.to_string(),
                    default: default.to_string(),
                });
            }
        } else if self.reserved.intersection(default) != self.reserved {
            return Err(PolicyError::ReservedNotInDefault {
                reserved: self.reserved.to_string(),
                default: default.to_string(),
            });
        }
        for (pod, cs) in &state.assignments {
            for (container, set) in cs {
                if !default.is_disjoint(set) {
                    return Err(PolicyError::AssignmentOverlap {
                        pod: pod.clone(),
                        container: container.clone(),
                        cpus: set.to_string(),
                        default: default.to_string(),
                    });
                }
            }
        }
        let known = default.union(&state.assigned());
        if known != all {
            return Err(PolicyError::CpusMismatch {
                machine: all.to_string(),
                state: known.to_string(),
            });
        }
        Ok(())
    }

    /// `GetAvailableCPUs`: the default set minus the reserved CPUs.
    pub fn assignable(&self, state: &CpuState) -> CpuSet {
        state.default_cpuset.difference(&self.reserved)
    }

    /// `GetAvailablePhysicalCPUs`: the default set minus every CPU of a reserved CPU's core.
    pub fn available_physical(&self, state: &CpuState) -> CpuSet {
        state.default_cpuset.difference(&self.reserved_physical)
    }

    /// `updateCPUsToReuse`.
    fn update_reuse(&self, pod: &Pod, container: &Container, cpus: &CpuSet) {
        let mut m = self.reuse_map();
        m.retain(|uid, _| *uid == pod.uid);
        let entry = m.entry(pod.uid.clone()).or_default();
        if let Some(init) = pod
            .init_containers
            .iter()
            .find(|c| c.name == container.name)
        {
            if !init.restartable {
                *entry = entry.union(cpus);
                return;
            }
        }
        *entry = entry.difference(cpus);
    }

    /// `Allocate`: exclusive CPUs for a Guaranteed pod's integer-CPU container, aligned with
    /// `hint` (the topology manager's merged affinity; `None` or a nil affinity = none).
    /// Non-Guaranteed or fractional requests stay in the shared pool (Ok, nothing recorded).
    /// A container that already has CPUs keeps them.
    pub fn allocate(
        &self,
        state: &mut CpuState,
        pod: &Pod,
        container: &Container,
        hint: Option<&TopologyHint>,
    ) -> Result<(), AllocateError> {
        let n = guaranteed_cpus(pod, container);
        if n == 0 {
            return Ok(());
        }
        if self.options.full_pcpus_only {
            let cpc = self.ix.cpus_per_core();
            if cpc == 0 || n % cpc != 0 {
                return Err(AllocateError::SmtNotMultiple {
                    requested: n,
                    cpus_per_core: cpc,
                });
            }
            let available = self.available_physical(state).len();
            if n > available {
                return Err(AllocateError::SmtNotEnoughPhysical {
                    requested: n,
                    cpus_per_core: cpc,
                    available,
                });
            }
        }
        if let Some(cpus) = state.get(&pod.uid, &container.name).cloned() {
            self.update_reuse(pod, container, &cpus);
            return Ok(());
        }
        let reusable = self.reusable(&pod.uid);
        let affinity = hint.and_then(|h| h.affinity);
        let cpus = self.allocate_cpus(state, n, affinity, &reusable)?;
        state.set(&pod.uid, &container.name, cpus.clone());
        self.update_reuse(pod, container, &cpus);
        Ok(())
    }

    /// `allocateCPUs(n, numaAffinity, reusable)`: aligned CPUs first (the hinted NUMA
    /// nodes, or their whole sockets with align-by-socket), the rest from everything
    /// assignable; the result leaves the default set.
    pub fn allocate_cpus(
        &self,
        state: &mut CpuState,
        n: usize,
        affinity: Option<NumaMask>,
        reusable: &CpuSet,
    ) -> Result<CpuSet, AllocateError> {
        let allocatable = self.assignable(state).union(reusable);
        let mut result = CpuSet::new();
        if let Some(mask) = affinity {
            let aligned = self.aligned_cpus(mask, &allocatable);
            let k = n.min(aligned.len());
            result = self.take_by_topology(&aligned, k)?;
        }
        let rest = self.take_by_topology(&allocatable.difference(&result), n - result.len())?;
        result = result.union(&rest);
        state.default_cpuset = state.default_cpuset.difference(&result);
        Ok(result)
    }

    /// `getAlignedCPUs`.
    fn aligned_cpus(&self, mask: NumaMask, allocatable: &CpuSet) -> CpuSet {
        let ix = &self.ix;
        let numas: Vec<usize> = (0..ix.count(Level::Numa))
            .filter(|g| {
                let id = ix.ids[Level::Numa as usize][*g];
                id < 64 && mask.is_set(id)
            })
            .collect();
        let mut aligned = CpuSet::new();
        if self.options.align_by_socket {
            let mut sockets: Vec<usize> = numas
                .iter()
                .flat_map(|n| ix.members[Level::Numa as usize][*n].iter())
                .map(|p| ix.group_of[Level::Socket as usize][*p])
                .collect();
            sockets.sort_unstable();
            sockets.dedup();
            for s in sockets {
                aligned = aligned.union(&ix.sets[Level::Socket as usize][s]);
            }
        } else {
            for n in numas {
                aligned = aligned.union(&ix.sets[Level::Numa as usize][n]);
            }
        }
        allocatable.intersection(&aligned)
    }

    /// `RemoveContainer`: the container's CPUs go back to the default set, except CPUs a
    /// sibling container of the same pod still holds (reused init-container CPUs).
    pub fn remove_container(&self, state: &mut CpuState, pod_uid: &str, container: &str) {
        let siblings = state
            .assignments
            .get(pod_uid)
            .map(|cs| {
                cs.iter()
                    .filter(|(name, _)| name.as_str() != container)
                    .fold(CpuSet::new(), |acc, (_, s)| acc.union(s))
            })
            .unwrap_or_default();
        if let Some(release) = state.get(pod_uid, container).cloned() {
            state.delete(pod_uid, container);
            state.default_cpuset = state.default_cpuset.union(&release.difference(&siblings));
        }
    }

    /// `GetTopologyHints` for resource "cpu". `None` = no preference (nil map);
    /// `Some(list)`: the hints, empty when the request cannot be satisfied.
    pub fn container_hints(
        &self,
        state: &CpuState,
        pod: &Pod,
        container: &Container,
    ) -> Option<Vec<TopologyHint>> {
        let requested = guaranteed_cpus(pod, container);
        if requested == 0 {
            return None;
        }
        if let Some(allocated) = state.get(&pod.uid, &container.name) {
            if allocated.len() != requested {
                return Some(Vec::new());
            }
            return Some(self.hints(allocated, &CpuSet::new(), requested));
        }
        let available = self.assignable(state);
        let reusable = self.reusable(&pod.uid);
        Some(self.hints(&available, &reusable, requested))
    }

    /// `GetPodTopologyHints` for resource "cpu" (pod scope).
    pub fn pod_hints(&self, state: &CpuState, pod: &Pod) -> Option<Vec<TopologyHint>> {
        let requested = pod_guaranteed_cpus(pod);
        if requested == 0 {
            return None;
        }
        let mut assigned = CpuSet::new();
        for c in pod.all_containers() {
            let by_container = guaranteed_cpus(pod, c);
            if let Some(allocated) = state.get(&pod.uid, &c.name) {
                if allocated.len() != by_container {
                    return Some(Vec::new());
                }
                assigned = assigned.union(allocated);
            }
        }
        if assigned.len() == requested {
            return Some(self.hints(&assigned, &CpuSet::new(), requested));
        }
        let available = self.assignable(state);
        let reusable = self.reusable(&pod.uid).union(&assigned);
        Some(self.hints(&available, &reusable, requested))
    }

    fn hints(&self, available: &CpuSet, reusable: &CpuSet, request: usize) -> Vec<TopologyHint> {
        generate_cpu_topology_hints(
            &self.topology,
            available,
            reusable,
            request,
            self.options.align_by_socket,
        )
    }
}
