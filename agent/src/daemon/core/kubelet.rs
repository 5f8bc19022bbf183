//! The kubelet's view in the agent core: what the kubelet itself did (its PodResources
//! API, else its CPU manager checkpoint), where it differs from nodetopo's admissions, the
//! `KubeletAgreement` verdict, and which CPUs status shows for the pods the kubelet holds.

use std::collections::{BTreeMap, BTreeSet};

use nodetopo_crds::conditions::{self, reason, ConditionSpec};
use nodetopo_crds::KubeletSource;
use nodetopo_engine::report::AllocationReport;
use nodetopo_engine::{CpuSet, CpuTopology};

use super::Core;
use crate::daemon::inputs::kubelet_actual::{self, KubeletActual};

impl Core {
    /// The containers where the kubelet's checkpoint and the engine differ, as
    /// `namespace/name/container (kubelet A, nodetopo B)`.
    pub fn kubelet_differences(&self) -> Vec<String> {
        match self.kubelet_actual() {
            Ok(Some(k)) => self.differences_from(&k),
            _ => Vec::new(),
        }
    }

    /// The kubelet's view from the best source readable (see [`kubelet_actual`]).
    pub fn kubelet_actual(&self) -> Result<Option<KubeletActual>, String> {
        let uids: BTreeMap<(&str, &str), &str> = self
            .pods
            .values()
            .map(|p| {
                (
                    (p.pod.namespace.as_str(), p.pod.name.as_str()),
                    p.pod.uid.as_str(),
                )
            })
            .collect();
        let podresources = match &self.podresources {
            Ok(Some(view)) => kubelet_actual::from_podresources(view, &self.topology, |ns, n| {
                uids.get(&(ns, n)).map(|u| u.to_string())
            })
            .map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(e.clone()),
        };
        let checkpoint = match &self.kubelet {
            Ok(Some(k)) => Ok(Some(kubelet_actual::from_checkpoint(k, |uid| {
                self.pods.get(uid).map(|p| p.pod.key())
            }))),
            Ok(None) => Ok(None),
            Err(e) => Err(e.to_string()),
        };
        kubelet_actual::choose(podresources, checkpoint)
    }

    /// The containers where `k` and the engine differ, named as by
    /// [`Core::kubelet_differences`].
    pub(super) fn differences_from(&self, k: &KubeletActual) -> Vec<String> {
        let Some(a) = &self.admitter else {
            return Vec::new();
        };
        let ours = &a.cpu_state().assignments;
        let mut keys: BTreeSet<(&String, &String)> = BTreeSet::new();
        for (uid, cs) in ours.iter().chain(k.entries.iter()) {
            for c in cs.keys() {
                keys.insert((uid, c));
            }
        }
        // The PodResources API lists a pod's app containers and its sidecars (restartable
        // init containers), never an init container that ran to completion (kubelet v1.37
        // podresources server, `List`): its CPUs, which the kubelet hands on to the app
        // containers, are not an answer of "no CPUs" there.
        let unreported = |uid: &str, c: &str| {
            k.source == KubeletSource::PodResources
                && self.pods.get(uid).is_some_and(|p| {
                    p.pod
                        .init_containers
                        .iter()
                        .any(|i| i.name == c && !i.restartable)
                })
        };
        let none = CpuSet::new();
        keys.into_iter()
            .filter(|(uid, c)| !unreported(uid, c))
            .filter_map(|(uid, c)| {
                let theirs = k.entries.get(uid).and_then(|m| m.get(c)).unwrap_or(&none);
                let mine = ours.get(uid).and_then(|m| m.get(c)).unwrap_or(&none);
                (theirs != mine).then(|| {
                    let name = self
                        .pods
                        .get(uid)
                        .map(|p| p.pod.key())
                        .or_else(|| k.names.get(uid).cloned())
                        .unwrap_or_else(|| uid.clone());
                    format!("{name}/{c} (kubelet \"{theirs}\", nodetopo \"{mine}\")")
                })
            })
            .collect()
    }

    /// The containers whose pinned memory differs between the kubelet's Memory Manager
    /// checkpoint (`memory_manager_state`, when read and trusted: the blocks of its
    /// container-level entries, none under policy `None`) and nodetopo's admissions (the
    /// blocks its Memory Manager gave; none where it runs policy `None`), as
    /// `namespace/name/container memory (kubelet A, nodetopo B)`, each side its blocks as
    /// `type size@nodes`. Empty when there is no usable memory checkpoint or no admitter.
    pub fn memory_differences(&self) -> Vec<String> {
        let Some(a) = &self.admitter else {
            return Vec::new();
        };
        let Ok(Some(checkpoint)) = &self.kubelet_memory else {
            return Vec::new();
        };
        let Ok(state) = checkpoint.trusted() else {
            return Vec::new();
        };
        type Blocks = BTreeMap<(String, String), Vec<String>>;
        let mut theirs: Blocks = BTreeMap::new();
        if state.policy_name == "Static" {
            for (uid, containers) in state.entries.iter().flatten() {
                for (c, blocks) in containers.iter().flatten() {
                    let mut shown: Vec<String> = blocks
                        .iter()
                        .flatten()
                        .map(|b| {
                            let mut nodes: Vec<i64> = b.numa_affinity.clone().unwrap_or_default();
                            nodes.sort_unstable();
                            let nodes: Vec<String> = nodes.iter().map(i64::to_string).collect();
                            format!("{} {}@{}", b.resource, b.size, nodes.join(","))
                        })
                        .collect();
                    shown.sort();
                    if !shown.is_empty() {
                        theirs.insert((uid.clone(), c.clone()), shown);
                    }
                }
            }
        }
        let mut ours: Blocks = BTreeMap::new();
        if let Some(m) = a.memory() {
            for (uid, cs) in self.admitted.iter() {
                for r in cs {
                    let Some(blocks) = m.blocks(uid, &r.container) else {
                        continue;
                    };
                    let mut shown: Vec<String> = blocks
                        .iter()
                        .map(|b| {
                            let nodes: Vec<String> =
                                b.affinity.ids().map(|n| n.to_string()).collect();
                            format!("{} {}@{}", b.resource.name(), b.size, nodes.join(","))
                        })
                        .collect();
                    shown.sort();
                    if !shown.is_empty() {
                        ours.insert((uid.clone(), r.container.clone()), shown);
                    }
                }
            }
        }
        let keys: BTreeSet<&(String, String)> = theirs.keys().chain(ours.keys()).collect();
        let show = |b: Option<&Vec<String>>| b.map_or_else(|| "none".to_string(), |b| b.join(" "));
        keys.into_iter()
            .filter(|k| theirs.get(*k) != ours.get(*k))
            .map(|k| {
                let (uid, c) = k;
                let name = self
                    .pods
                    .get(uid)
                    .map(|p| p.pod.key())
                    .unwrap_or_else(|| uid.clone());
                format!(
                    "{name}/{c} memory (kubelet \"{}\", nodetopo \"{}\")",
                    show(theirs.get(k)),
                    show(ours.get(k))
                )
            })
            .collect()
    }

    /// The `KubeletAgreement` condition as status shows it now, with the containers that
    /// differ, in CPUs then in pinned memory (what the actuation verify step compares
    /// before and after a restart).
    pub fn kubelet_agreement(&self) -> (ConditionSpec, Vec<String>) {
        let kubelet = self.kubelet_actual();
        let mut differences = match &kubelet {
            Ok(Some(k)) => self.differences_from(k),
            _ => Vec::new(),
        };
        if matches!(kubelet, Ok(Some(_))) {
            differences.extend(self.memory_differences());
        }
        (self.kubelet_agreement_condition(&kubelet), differences)
    }

    /// The `KubeletAgreement` condition for the kubelet view read (or why none was).
    pub(super) fn kubelet_agreement_condition(
        &self,
        kubelet: &Result<Option<KubeletActual>, String>,
    ) -> ConditionSpec {
        let (status, why, msg) = match kubelet {
            Err(msg) => (false, reason::KUBELET_STATE_UNREADABLE, msg.clone()),
            // Nothing to compare with is not agreement.
            Ok(None) => (
                false,
                reason::NO_KUBELET_STATE,
                "no kubelet CPU manager checkpoint to compare with".to_string(),
            ),
            Ok(Some(k)) => {
                // The source is `status.kubelet.source`; the message names PodResources
                // when it was used, and why it was not when it failed.
                let (status, why, mut msg) = self.agreement_with(k);
                if k.source == KubeletSource::PodResources {
                    msg.push_str(" (read from the kubelet's PodResources API)");
                }
                if let Some(f) = &k.fallback {
                    msg.push_str(&format!(
                        "; the kubelet's CPU manager checkpoint was used, PodResources failed: {f}"
                    ));
                }
                (status, why, msg)
            }
        };
        ConditionSpec::new(conditions::KUBELET_AGREEMENT, status, why, msg)
    }

    /// The agreement verdict against one kubelet view.
    fn agreement_with(&self, k: &KubeletActual) -> (bool, &'static str, String) {
        let diffs = self.differences_from(k);
        let predicted = self.admitted.values().flatten().count();
        if let Some(why) = &k.checksum_problem {
            (false, reason::KUBELET_STATE_CHECKSUM_MISMATCH, why.clone())
        } else if !k.pod_level.is_empty() {
            (
                false,
                reason::KUBELET_POD_LEVEL_ALLOCATIONS,
                pod_level_message(k),
            )
        } else if k.policy_name == "none" && predicted > 0 {
            (
                false,
                reason::KUBELET_POLICY_NONE,
                format!(
                    "the kubelet runs CPU manager policy none and pins nothing: the {predicted} allocations shown are nodetopo's predictions under its spec, not the kubelet's assignments"
                ),
            )
        } else if diffs.is_empty() {
            let memory = self.memory_differences();
            if memory.is_empty() {
                (
                    true,
                    reason::AGREE,
                    "the kubelet's CPU assignments equal nodetopo's".to_string(),
                )
            } else {
                (
                    false,
                    reason::KUBELET_MEMORY_DISAGREE,
                    format!(
                        "the kubelet's CPU assignments equal nodetopo's, but the memory its Memory Manager pinned differs for {} containers: {}",
                        memory.len(),
                        memory.join(", ")
                    ),
                )
            }
        } else {
            let mut msg = format!("{} containers differ: {}", diffs.len(), diffs.join(", "));
            let memory = self.memory_differences();
            if !memory.is_empty() {
                msg.push_str(&format!(
                    "; pinned memory differs too for {} containers: {}",
                    memory.len(),
                    memory.join(", ")
                ));
            }
            if let Some(c) = kubelet_merge_conflict(self.admitted.values().flatten(), k) {
                msg.push_str(&format!(
                    "; nodetopo's assignments are shown because the kubelet's would overlap them ({c})"
                ));
            }
            (false, reason::DISAGREE, msg)
        }
    }
}

/// What the `KubeletPodLevelAllocations` verdict says: which pods hold which CPUs.
fn pod_level_message(k: &KubeletActual) -> String {
    let pods: Vec<String> = k
        .pod_level
        .iter()
        .map(|(key, set)| {
            let name = k.names.get(key).unwrap_or(key);
            format!("{name} \"{set}\"")
        })
        .collect();
    format!(
        "the kubelet holds pod-level CPU allocations (PodLevelResourceManagers) for {} pods: {}; nodetopo does not model pod-level resource managers, so it cannot compare these pods' containers: their CPUs are published as taken, never as free",
        pods.len(),
        pods.join(", ")
    )
}

/// Whether showing the kubelet's CPUs for the pods it holds, beside nodetopo's for the others,
/// would publish one CPU for two pods; then the first such CPU and its two holders.
fn kubelet_merge_conflict<'a>(
    allocations: impl Iterator<Item = &'a AllocationReport>,
    kubelet: &'a KubeletActual,
) -> Option<String> {
    let mut owner: BTreeMap<usize, &str> = BTreeMap::new();
    let mut claim = |uid: &'a str, set: &CpuSet| -> Option<String> {
        for cpu in set.iter() {
            match owner.insert(cpu, uid) {
                Some(o) if o != uid => return Some(format!("cpu {cpu}: pods {o} and {uid}")),
                _ => {}
            }
        }
        None
    };
    let allocations: Vec<&AllocationReport> = allocations.collect();
    for a in &allocations {
        let in_kubelet = kubelet
            .entries
            .get(&a.pod_uid)
            .and_then(|m| m.get(&a.container));
        let set = match in_kubelet {
            Some(set) => set.clone(),
            None => CpuSet::parse(&a.cpus).unwrap_or_default(),
        };
        if let Some(c) = claim(&a.pod_uid, &set) {
            return Some(c);
        }
    }
    for (uid, cs) in &kubelet.entries {
        for set in cs.values() {
            if let Some(c) = claim(uid, set) {
                return Some(c);
            }
        }
    }
    None
}

/// Where the kubelet itself runs the static policy, its checkpoint is the truth: each
/// allocation the kubelet also holds shows the kubelet's CPUs, and nodetopo's own decision
/// moves to `predictedCPUs` (the check; `KubeletAgreement` names every difference). Under the
/// kubelet's `none` policy its checkpoint assigns nothing, and nodetopo's prediction stands.
/// Where the two views cannot be mixed without showing one CPU for two pods (the kubelet
/// placed a pod nodetopo has not, on CPUs nodetopo gave another), nodetopo's view is shown
/// whole and `KubeletAgreement` says why.
pub(super) fn show_kubelet_assignments(
    allocations: &mut [AllocationReport],
    kubelet: &KubeletActual,
    topology: &CpuTopology,
) {
    if kubelet.policy_name != "static"
        || kubelet_merge_conflict(allocations.iter(), kubelet).is_some()
    {
        return;
    }
    for a in allocations {
        let Some(actual) = kubelet
            .entries
            .get(&a.pod_uid)
            .and_then(|m| m.get(&a.container))
        else {
            continue;
        };
        a.predicted_cpus = Some(a.cpus.clone());
        a.place(topology, actual);
    }
}
