//! `CpuState`: the CPU manager's state (the kubelet's `state.State` / checkpoint content):
//! the shared ("default") CPU set and the exclusive assignments by pod UID and container.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::topology::CpuTopology;

/// The CPU manager's state. Serialises as
/// `{"defaultCpuSet": "0-3", "entries": {"<pod uid>": {"<container>": "4-5"}}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuState {
    /// The shared pool (the kubelet's default cpuset).
    #[serde(rename = "defaultCpuSet")]
    pub default_cpuset: CpuSet,
    /// Exclusive assignments: pod UID -> container name -> CPUs.
    #[serde(rename = "entries", default)]
    pub assignments: BTreeMap<String, BTreeMap<String, CpuSet>>,
}

/// Why a state is inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// A CPU is in two places (shared pool and/or several containers).
    #[error("cpu {cpu} is in both {first} and {second}")]
    Duplicate {
        /// The CPU.
        cpu: usize,
        /// Where it was seen first (`default cpuset` or `pod/container`).
        first: String,
        /// Where it was seen again.
        second: String,
    },
    /// A CPU the topology does not have.
    #[error("cpu {cpu} in {place} is not a CPU of this machine")]
    UnknownCpu {
        /// The CPU.
        cpu: usize,
        /// Where it appears.
        place: String,
    },
}

impl CpuState {
    /// The CPUs assigned to a container, if any.
    pub fn get(&self, pod_uid: &str, container: &str) -> Option<&CpuSet> {
        self.assignments.get(pod_uid)?.get(container)
    }

    /// Records an assignment.
    pub fn set(&mut self, pod_uid: &str, container: &str, cpus: CpuSet) {
        self.assignments
            .entry(pod_uid.to_string())
            .or_default()
            .insert(container.to_string(), cpus);
    }

    /// Deletes an assignment (and the pod entry once it is empty), as the kubelet's `Delete`.
    pub fn delete(&mut self, pod_uid: &str, container: &str) {
        if let Some(pod) = self.assignments.get_mut(pod_uid) {
            pod.remove(container);
            if pod.is_empty() {
                self.assignments.remove(pod_uid);
            }
        }
    }

    /// Every exclusively assigned CPU.
    pub fn assigned(&self) -> CpuSet {
        self.assignments
            .values()
            .flat_map(|p| p.values())
            .fold(CpuSet::new(), |acc, s| acc.union(s))
    }

    /// Consistency: no CPU in two places, every CPU known to the topology. (Completeness,
    /// every CPU somewhere, is the static policy's `start` check, because reserved CPUs
    /// may legitimately be absent under strict-cpu-reservation.)
    pub fn check(&self, t: &CpuTopology) -> Result<(), StateError> {
        let mut seen: BTreeMap<usize, String> = BTreeMap::new();
        let places = std::iter::once(("default cpuset".to_string(), &self.default_cpuset)).chain(
            self.assignments
                .iter()
                .flat_map(|(pod, cs)| cs.iter().map(move |(c, set)| (format!("{pod}/{c}"), set))),
        );
        for (place, set) in places {
            for cpu in set.iter() {
                if t.cpu(cpu).is_none() {
                    return Err(StateError::UnknownCpu { cpu, place });
                }
                if let Some(first) = seen.insert(cpu, place.clone()) {
                    return Err(StateError::Duplicate {
                        cpu,
                        first,
                        second: place,
                    });
                }
            }
        }
        Ok(())
    }
}
