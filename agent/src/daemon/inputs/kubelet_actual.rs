//! What the kubelet actually did, from the best source readable: its PodResources API
//! (`List` + `GetAllocatableResources`, [`crate::daemon::inputs::podresources`]) when the socket answers,
//! else its CPU manager checkpoint ([`crate::daemon::kubelet_state`]), else nothing.
//!
//! Pure: the core hands in both reads and the pods it knows (PodResources names pods by
//! namespace and name, the checkpoint by UID; both are keyed by UID here, through the pods
//! the agent watches). A pod PodResources reports that the agent has not seen yet keeps its
//! `namespace/name` as its key (UIDs never contain `/`), so it still counts and is shown
//! with its name and an empty UID.
//!
//! From PodResources the CPU manager policy is `none` exactly when the kubelet reports no
//! allocatable CPUs: its `none` policy's `GetAllocatableCPUs` is empty, the static policy's
//! is every online CPU but the reserved ones
//! (pkg/kubelet/cm/cpumanager/policy_{none,static}.go). The shared pool is every online CPU
//! but the exclusive ones, as in the kubelet's `defaultCpuSet`.
//!
//! Pod-level allocations (the kubelet's PodLevelResourceManagers, KEP-5526: the checkpoint's
//! `podEntries`, PodResources' pod-level `cpu_ids`) are kept apart ([`KubeletActual::pod_level`]):
//! they count as exclusive (never in the free pool published) and are published as
//! assignments with an empty container name; nodetopo does not model them, which the
//! `KubeletAgreement` condition says.

use std::collections::BTreeMap;
use std::path::Path;

use nodetopo_crds::{KubeletAssignment, KubeletObserved, KubeletSource};
use nodetopo_engine::{CpuSet, CpuTopology};

use crate::daemon::inputs::podresources::KubeletView;
use crate::daemon::inputs::validate;
use nodetopo_kubelet::cpu_checkpoint::{ChecksumCheck, CpuCheckpoint};

/// The kubelet's CPU assignments, whichever source they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletActual {
    /// `PodResources` or `Checkpoint`.
    pub source: KubeletSource,
    /// `none` or `static`.
    pub policy_name: String,
    /// The shared pool.
    pub default_cpu_set: CpuSet,
    /// pod UID (or `namespace/name`, see the module documentation) -> container -> CPUs.
    pub entries: BTreeMap<String, BTreeMap<String, CpuSet>>,
    /// pod UID (or `namespace/name`) -> the CPUs the pod holds as a whole (pod-level
    /// resource managers).
    pub pod_level: BTreeMap<String, CpuSet>,
    /// `namespace/name` by key, where known.
    pub names: BTreeMap<String, String>,
    /// Why the source cannot be trusted for a comparison (a checkpoint failing its checksum).
    pub checksum_problem: Option<String>,
    /// Why PodResources was not used, when it was configured but failed.
    pub fallback: Option<String>,
}

impl KubeletActual {
    /// The published shape: assignments sorted by pod UID (then name), container.
    pub fn observed(&self) -> KubeletObserved {
        let mut assignments: Vec<KubeletAssignment> = self
            .entries
            .iter()
            .flat_map(|(key, cs)| {
                let named = key.contains('/');
                let pod = self.names.get(key).cloned().unwrap_or_default();
                cs.iter().map(move |(c, s)| KubeletAssignment {
                    pod_uid: if named { String::new() } else { key.clone() },
                    pod: pod.clone(),
                    container: c.clone(),
                    cpus: s.to_string(),
                })
            })
            .collect();
        for (key, set) in &self.pod_level {
            assignments.push(KubeletAssignment {
                pod_uid: if key.contains('/') {
                    String::new()
                } else {
                    key.clone()
                },
                pod: self.names.get(key).cloned().unwrap_or_default(),
                container: String::new(),
                cpus: set.to_string(),
            });
        }
        assignments.sort_by(|a, b| {
            (&a.pod_uid, &a.pod, &a.container).cmp(&(&b.pod_uid, &b.pod, &b.container))
        });
        KubeletObserved {
            source: self.source,
            policy_name: self.policy_name.clone(),
            default_cpu_set: self.default_cpu_set.to_string(),
            assignments,
        }
    }

    /// Every CPU held exclusively, by a container or by a pod as a whole.
    pub fn exclusive(&self) -> CpuSet {
        self.entries
            .values()
            .flat_map(|cs| cs.values())
            .chain(self.pod_level.values())
            .fold(CpuSet::new(), |acc, s| acc.union(s))
    }
}

/// The published shape when neither source could be read.
pub fn observed_none() -> KubeletObserved {
    KubeletObserved {
        source: KubeletSource::None,
        ..Default::default()
    }
}

/// The kubelet's view from PodResources, keyed by UID through `uid_of(namespace, name)`,
/// and validated against this machine (every CPU on it, no CPU held by two pods): a kubelet
/// answer that breaks an invariant is an error naming it, never published.
pub fn from_podresources(
    view: &KubeletView,
    topology: &CpuTopology,
    uid_of: impl Fn(&str, &str) -> Option<String>,
) -> Result<KubeletActual, String> {
    let mut entries: BTreeMap<String, BTreeMap<String, CpuSet>> = BTreeMap::new();
    let mut names = BTreeMap::new();
    for c in &view.containers {
        let name = format!("{}/{}", c.namespace, c.pod);
        let key = uid_of(&c.namespace, &c.pod).unwrap_or_else(|| name.clone());
        names.insert(key.clone(), name);
        entries
            .entry(key)
            .or_default()
            .insert(c.container.clone(), c.cpus.clone());
    }
    let mut pod_level = BTreeMap::new();
    for p in &view.pods {
        let name = format!("{}/{}", p.namespace, p.pod);
        let key = uid_of(&p.namespace, &p.pod).unwrap_or_else(|| name.clone());
        names.insert(key.clone(), name);
        pod_level.insert(key, p.cpus.clone());
    }
    let policy_name = if view.allocatable_cpus.is_empty() {
        "none"
    } else {
        "static"
    };
    let mut actual = KubeletActual {
        source: KubeletSource::PodResources,
        policy_name: policy_name.to_string(),
        default_cpu_set: CpuSet::new(),
        entries,
        pod_level,
        names,
        checksum_problem: None,
        fallback: None,
    };
    let exclusive = actual.exclusive();
    actual.default_cpu_set = topology.all_cpus().difference(&exclusive);
    validate::kubelet_sets(
        Path::new("the kubelet's PodResources answer"),
        &actual.default_cpu_set,
        &actual.entries,
        topology,
    )
    .map_err(|v| v.to_string())?;
    if let Some(cpu) = actual
        .pod_level
        .values()
        .flat_map(|s| s.iter())
        .find(|c| topology.cpu(*c).is_none())
    {
        return Err(format!(
            "the kubelet's PodResources answer: pod-level cpu {cpu} is not a CPU of this machine"
        ));
    }
    if let Some(cpu) = view
        .allocatable_cpus
        .iter()
        .find(|c| topology.cpu(*c).is_none())
    {
        return Err(format!(
            "the kubelet's PodResources answer: allocatable cpu {cpu} is not a CPU of this machine"
        ));
    }
    Ok(actual)
}

/// The kubelet's view from its (already validated) checkpoint; pod names from `name_of(uid)`.
pub fn from_checkpoint(
    k: &CpuCheckpoint,
    name_of: impl Fn(&str) -> Option<String>,
) -> KubeletActual {
    let names = k
        .entries
        .keys()
        .chain(k.pod_entries.keys())
        .filter_map(|uid| name_of(uid).map(|n| (uid.clone(), n)))
        .collect();
    KubeletActual {
        source: KubeletSource::Checkpoint,
        policy_name: k.policy_name.clone(),
        default_cpu_set: k.default_cpu_set.clone(),
        entries: k.entries.clone(),
        pod_level: k.pod_entries.clone(),
        names,
        checksum_problem: checksum_problem(&k.checksum_check),
        fallback: None,
    }
}

/// The source to use: PodResources when it answered, else the checkpoint (with the reason
/// PodResources failed, if it did), else nothing (`Ok(None)`) or every error.
///
/// `podresources` is `Ok(None)` when the socket is not configured or absent (no kubelet
/// PodResources endpoint mounted: the checkpoint is the expected source then, silently).
pub fn choose(
    podresources: Result<Option<KubeletActual>, String>,
    checkpoint: Result<Option<KubeletActual>, String>,
) -> Result<Option<KubeletActual>, String> {
    match (podresources, checkpoint) {
        (Ok(Some(p)), _) => Ok(Some(p)),
        (Ok(None), c) => c,
        (Err(pe), Ok(Some(mut c))) => {
            c.fallback = Some(pe);
            Ok(Some(c))
        }
        (Err(pe), Ok(None)) => Err(format!(
            "{pe}; and there is no kubelet CPU manager checkpoint to fall back to"
        )),
        (Err(pe), Err(ce)) => Err(format!("{pe}; {ce}")),
    }
}

/// Why the kubelet's checkpoint cannot be trusted for the comparison, if it cannot: a
/// recomputed checksum that differs from the recorded one (the kubelet itself would refuse
/// such a file at its next start).
fn checksum_problem(check: &ChecksumCheck) -> Option<String> {
    match check {
        ChecksumCheck::Mismatch {
            field,
            recorded,
            computed,
        } => Some(format!(
            "the kubelet checkpoint's {field} is {recorded} but its content hashes to {computed} (the kubelet would refuse this file)"
        )),
        ChecksumCheck::Verified | ChecksumCheck::NotRecorded => {
            None
        }
    }
}

#[cfg(test)]
mod tests;
