//! The cpuset audit: each container's real cpuset (read by [`crate::cgroup`]) against the
//! kubelet's assignment (its checkpoint or PodResources) and nodetopo's published
//! allocation, with a named reason for every mismatch.
//!
//! Two steps: [`observe`] reads the cgroups (the only I/O, bounded per file), [`audit`]
//! judges (pure: plain values in, a report out).
//!
//! Reasons ([`DriftReason`]), each an independent fact, so one container can carry several:
//! - `StaleCheckpointEntry`: the kubelet holds CPUs for a container that is not on the node
//!   (pod gone or finished, or no such container in the pod);
//! - `ContainerNotFound`: a running container (it has an ID) without a cgroup;
//! - `CpuInTwoExclusiveSets`: a CPU in the real cpusets of two exclusive containers;
//! - `SharedOnExclusiveCpu`: a shared-pool container runs on a CPU assigned exclusively to
//!   another container;
//! - `ReservedCpuUsedByPod`: an exclusive container (Guaranteed, integer CPUs) runs on a
//!   reserved CPU;
//! - `ChangedOutsideKubelet`: the real cpuset is not what the kubelet assigned (its exclusive
//!   set, or its default set for a shared-pool container).
//!
//! What is expected of a container: the kubelet's assignment when the kubelet's view is
//! known (the kubelet writes the cgroups); nodetopo's published allocation (and shared pool)
//! only when it is not. With the kubelet's `none` policy (an empty default set) shared-pool
//! containers are not pinned and nothing is expected of them.
//!
//! Caveat: the kubelet moves shared-pool containers onto a new default set on its reconcile
//! period (10 s by default), so right after an exclusive admission a shared container can
//! show `SharedOnExclusiveCpu` (and `ChangedOutsideKubelet`) for one period.

use std::collections::{BTreeMap, BTreeSet};

use nodetopo_engine::{CpuSet, QosClass};
use serde::Serialize;

use crate::cgroup::{CgroupError, CgroupLayout, ContainerId};

pub mod inputs;

/// A container of a pod on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditContainer {
    /// Its name (app, init or sidecar).
    pub name: String,
    /// Its ID while it runs (`containerStatuses[].containerID` of a running container);
    /// `None`: not running, nothing to read.
    pub id: Option<ContainerId>,
}

/// A pod on the node, as the audit needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPod {
    /// `namespace/name`.
    pub pod: String,
    /// Its UID.
    pub uid: String,
    /// Its QoS class (which cgroup level it lives in).
    pub qos: QosClass,
    /// Phase Succeeded or Failed: the kubelet drops its CPUs.
    pub terminal: bool,
    /// Every container the spec declares (init containers included).
    pub containers: Vec<AuditContainer>,
}

/// The kubelet's CPU assignments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletCpus {
    /// Its default (shared) set; empty under the `none` policy.
    pub default_cpu_set: CpuSet,
    /// Exclusive sets: pod UID -> container name -> CPUs.
    pub assignments: BTreeMap<String, BTreeMap<String, CpuSet>>,
}

/// What the containers should run on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expected {
    /// The kubelet's view, when it could be read.
    pub kubelet: Option<KubeletCpus>,
    /// nodetopo's published exclusive allocations: pod UID -> container -> CPUs.
    pub published: BTreeMap<String, BTreeMap<String, CpuSet>>,
    /// nodetopo's published shared pool (used only without the kubelet's view).
    pub published_shared: Option<CpuSet>,
    /// The node's reserved CPUs.
    pub reserved: CpuSet,
}

/// The real cpusets read: (pod UID, container name) -> the effective set, or why it could
/// not be read. Containers that do not run are absent.
pub type Observed = BTreeMap<(String, String), Result<CpuSet, CgroupError>>;

/// Reads the effective cpuset of every running container of `pods` (those with an ID and
/// a pod that is not terminal).
pub fn observe(layout: &CgroupLayout, pods: &[AuditPod]) -> Observed {
    let mut out = Observed::new();
    for p in pods.iter().filter(|p| !p.terminal) {
        for c in &p.containers {
            let Some(id) = &c.id else { continue };
            let read = layout.read_cpuset(&p.uid, p.qos, id).map(|cs| cs.effective);
            out.insert((p.uid.clone(), c.name.clone()), read);
        }
    }
    out
}

/// Why a container's cpuset is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum DriftReason {
    /// The kubelet holds CPUs for a container that is not on the node.
    StaleCheckpointEntry,
    /// A running container has no cgroup.
    ContainerNotFound,
    /// A CPU is in the real cpusets of two exclusive containers.
    CpuInTwoExclusiveSets,
    /// A shared-pool container runs on a CPU assigned exclusively to another container.
    SharedOnExclusiveCpu,
    /// An exclusive container runs on a reserved CPU.
    ReservedCpuUsedByPod,
    /// The real cpuset is not what the kubelet assigned.
    ChangedOutsideKubelet,
}

impl DriftReason {
    /// Every reason, in report order.
    pub const ALL: [DriftReason; 6] = [
        Self::StaleCheckpointEntry,
        Self::ContainerNotFound,
        Self::CpuInTwoExclusiveSets,
        Self::SharedOnExclusiveCpu,
        Self::ReservedCpuUsedByPod,
        Self::ChangedOutsideKubelet,
    ];

    /// The PascalCase name (status, events, metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StaleCheckpointEntry => "StaleCheckpointEntry",
            Self::ContainerNotFound => "ContainerNotFound",
            Self::CpuInTwoExclusiveSets => "CpuInTwoExclusiveSets",
            Self::SharedOnExclusiveCpu => "SharedOnExclusiveCpu",
            Self::ReservedCpuUsedByPod => "ReservedCpuUsedByPod",
            Self::ChangedOutsideKubelet => "ChangedOutsideKubelet",
        }
    }
}

impl std::fmt::Display for DriftReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One mismatch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    /// `namespace/name` (the UID where the pod is not on the node).
    pub pod: String,
    /// The pod's UID.
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    /// The container.
    pub container: String,
    /// What it should run on, where known (list syntax).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    /// What it runs on, where read (list syntax).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual: Option<String>,
    /// Why this is drift.
    pub reason: DriftReason,
    /// The particulars, for a person.
    pub message: String,
}

/// A container whose cgroup could not be read (not drift: the audit cannot tell).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unreadable {
    /// `namespace/name`.
    pub pod: String,
    /// The container.
    pub container: String,
    /// The error, naming the file.
    pub message: String,
}

/// The audit's verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    /// Running containers whose cpuset was read.
    pub checked_containers: usize,
    /// Containers not running (no ID), not read.
    pub skipped_containers: usize,
    /// Every mismatch, by pod UID then container then reason.
    pub drift: Vec<Drift>,
    /// Containers whose cgroup could not be read.
    pub unreadable: Vec<Unreadable>,
}

impl AuditReport {
    /// Containers with at least one mismatch.
    pub fn drift_containers(&self) -> usize {
        self.drift
            .iter()
            .map(|d| (&d.pod_uid, &d.container))
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Containers with a mismatch of each reason (every reason listed, zeros included).
    pub fn containers_by_reason(&self) -> BTreeMap<DriftReason, usize> {
        let mut seen: BTreeMap<DriftReason, BTreeSet<(&String, &String)>> = DriftReason::ALL
            .iter()
            .map(|r| (*r, BTreeSet::new()))
            .collect();
        for d in &self.drift {
            seen.entry(d.reason)
                .or_default()
                .insert((&d.pod_uid, &d.container));
        }
        seen.into_iter().map(|(r, s)| (r, s.len())).collect()
    }
}

/// What one running container is expected to run on.
enum Role {
    /// Exclusive CPUs (from the kubelet, or nodetopo without the kubelet's view).
    Exclusive(CpuSet, &'static str),
    /// The shared pool (`None`: nothing expected, e.g. the kubelet's `none` policy).
    Shared(Option<CpuSet>, &'static str),
}

fn get<'a>(
    m: &'a BTreeMap<String, BTreeMap<String, CpuSet>>,
    uid: &str,
    name: &str,
) -> Option<&'a CpuSet> {
    m.get(uid).and_then(|c| c.get(name))
}

fn role(e: &Expected, uid: &str, name: &str) -> Role {
    match &e.kubelet {
        Some(k) => match get(&k.assignments, uid, name) {
            Some(set) => Role::Exclusive(set.clone(), "the kubelet's assignment"),
            None => Role::Shared(
                Some(k.default_cpu_set.clone()).filter(|s| !s.is_empty()),
                "the kubelet's default set",
            ),
        },
        None => match get(&e.published, uid, name) {
            Some(set) => Role::Exclusive(set.clone(), "nodetopo's allocation"),
            None => Role::Shared(e.published_shared.clone(), "nodetopo's shared pool"),
        },
    }
}

/// Judges the real cpusets against the expectations. Pure; deterministic order (pod UID,
/// container name, reason).
pub fn audit(pods: &[AuditPod], observed: &Observed, expected: &Expected) -> AuditReport {
    let mut report = AuditReport::default();
    let live: BTreeMap<&str, &AuditPod> = pods
        .iter()
        .filter(|p| !p.terminal)
        .map(|p| (p.uid.as_str(), p))
        .collect();
    let name_of = |uid: &str| {
        live.get(uid)
            .map(|p| p.pod.clone())
            .or_else(|| pods.iter().find(|p| p.uid == uid).map(|p| p.pod.clone()))
            .unwrap_or_else(|| uid.to_string())
    };

    // Stale kubelet entries: CPUs held for what is not on the node.
    if let Some(k) = &expected.kubelet {
        for (uid, containers) in &k.assignments {
            for (name, set) in containers {
                let why = match live.get(uid.as_str()) {
                    None => "the pod is not on the node (gone or finished)",
                    Some(p) if !p.containers.iter().any(|c| &c.name == name) => {
                        "the pod has no such container"
                    }
                    Some(_) => continue,
                };
                report.drift.push(Drift {
                    pod: name_of(uid),
                    pod_uid: uid.clone(),
                    container: name.clone(),
                    expected: Some(set.to_string()),
                    actual: None,
                    reason: DriftReason::StaleCheckpointEntry,
                    message: format!("the kubelet still holds CPUs {set} for it, but {why}"),
                });
            }
        }
    }

    // Every running container's role and real set.
    struct Seen<'a> {
        pod: &'a AuditPod,
        name: &'a str,
        role: Role,
        actual: CpuSet,
    }
    let mut seen: Vec<Seen> = Vec::new();
    for p in live.values() {
        for c in &p.containers {
            if c.id.is_none() {
                report.skipped_containers += 1;
                continue;
            }
            let role = role(expected, &p.uid, &c.name);
            match observed.get(&(p.uid.clone(), c.name.clone())) {
                // Not read (the caller observed another pod list): counted as skipped.
                None => report.skipped_containers += 1,
                Some(Err(CgroupError::NotFound(dir))) => {
                    report.checked_containers += 1;
                    let expected = match &role {
                        Role::Exclusive(s, _) | Role::Shared(Some(s), _) => Some(s.to_string()),
                        Role::Shared(None, _) => None,
                    };
                    report.drift.push(Drift {
                        pod: p.pod.clone(),
                        pod_uid: p.uid.clone(),
                        container: c.name.clone(),
                        expected,
                        actual: None,
                        reason: DriftReason::ContainerNotFound,
                        message: format!("it runs, but it has no cgroup at {}", dir.display()),
                    });
                }
                Some(Err(e)) => report.unreadable.push(Unreadable {
                    pod: p.pod.clone(),
                    container: c.name.clone(),
                    message: e.to_string(),
                }),
                Some(Ok(actual)) => {
                    report.checked_containers += 1;
                    seen.push(Seen {
                        pod: p,
                        name: &c.name,
                        role,
                        actual: actual.clone(),
                    });
                }
            }
        }
    }

    // CPUs handed out exclusively, and who holds each in reality.
    let mut exclusive_owner: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut handed_out: BTreeMap<usize, usize> = BTreeMap::new();
    let mut handed_out_set = CpuSet::new();
    for (i, s) in seen.iter().enumerate() {
        if let Role::Exclusive(set, _) = &s.role {
            handed_out_set = handed_out_set.union(set);
            for cpu in set.iter() {
                handed_out.entry(cpu).or_insert(i);
            }
            for cpu in s.actual.iter() {
                exclusive_owner.entry(cpu).or_default().push(i);
            }
        }
    }

    for (i, s) in seen.iter().enumerate() {
        let drift = |reason, expected: Option<&CpuSet>, message: String| Drift {
            pod: s.pod.pod.clone(),
            pod_uid: s.pod.uid.clone(),
            container: s.name.to_string(),
            expected: expected.map(|e| e.to_string()),
            actual: Some(s.actual.to_string()),
            reason,
            message,
        };
        let mut found = Vec::new();
        match &s.role {
            Role::Exclusive(set, source) => {
                let mut others: BTreeMap<usize, CpuSet> = BTreeMap::new();
                for cpu in s.actual.iter() {
                    for &j in exclusive_owner.get(&cpu).into_iter().flatten() {
                        if j != i {
                            others.entry(j).or_default().insert(cpu);
                        }
                    }
                }
                if !others.is_empty() {
                    let names: Vec<String> = others
                        .iter()
                        .map(|(j, cpus)| {
                            format!("{}/{} (CPUs {cpus})", seen[*j].pod.pod, seen[*j].name)
                        })
                        .collect();
                    found.push(drift(
                        DriftReason::CpuInTwoExclusiveSets,
                        Some(set),
                        format!(
                            "its exclusive CPUs are also in the cpuset of {}",
                            names.join(", ")
                        ),
                    ));
                }
                let reserved = s.actual.intersection(&expected.reserved);
                if !reserved.is_empty() {
                    found.push(drift(
                        DriftReason::ReservedCpuUsedByPod,
                        Some(set),
                        format!(
                            "an exclusive container runs on reserved CPUs {reserved} (reserved: {})",
                            expected.reserved
                        ),
                    ));
                }
                if &s.actual != set {
                    found.push(drift(
                        DriftReason::ChangedOutsideKubelet,
                        Some(set),
                        format!("its cpuset is {}, {source} is {set}", s.actual),
                    ));
                }
            }
            Role::Shared(pool, source) => {
                // Set algebra first: the per-CPU names only when something is wrong.
                let taken: Vec<String> = s
                    .actual
                    .intersection(&handed_out_set)
                    .iter()
                    .filter_map(|cpu| handed_out.get(&cpu).map(|&j| (cpu, j)))
                    .map(|(cpu, j)| format!("{cpu} ({}/{})", seen[j].pod.pod, seen[j].name))
                    .collect();
                if !taken.is_empty() {
                    found.push(drift(
                        DriftReason::SharedOnExclusiveCpu,
                        pool.as_ref(),
                        format!(
                            "a shared-pool container runs on exclusively assigned CPUs: {}",
                            taken.join(", ")
                        ),
                    ));
                }
                if let Some(pool) = pool.as_ref().filter(|p| **p != s.actual) {
                    found.push(drift(
                        DriftReason::ChangedOutsideKubelet,
                        Some(pool),
                        format!("its cpuset is {}, {source} is {pool}", s.actual),
                    ));
                }
            }
        }
        report.drift.extend(found);
    }
    report.drift.sort_by(|a, b| {
        (&a.pod_uid, &a.container, a.reason).cmp(&(&b.pod_uid, &b.container, b.reason))
    });
    report
}

/// One audit over a node: read the cgroups of `pods`, judge them.
pub fn run(layout: &CgroupLayout, pods: &[AuditPod], expected: &Expected) -> AuditReport {
    audit(pods, &observe(layout, pods), expected)
}

#[cfg(test)]
mod tests;
