//! The cpuset audit inside the core: which containers to read (running ones, with their IDs
//! from the Pod status), what each should run on (the kubelet's view, else nodetopo's
//! allocation), the judgement ([`nodetopo_kubelet::audit`]), and what is published:
//! `status.audit` (bounded) and the `CgroupAgreement` condition. The shell reads the
//! cgroups; everything here is pure.

use std::collections::BTreeMap;

use nodetopo_crds::conditions::{self, reason, ConditionSpec};
use nodetopo_crds::{AuditStatus, DriftStatus};
use nodetopo_engine::CpuSet;
use nodetopo_kubelet::audit::{
    self, AuditContainer, AuditPod, AuditReport, Expected, KubeletCpus, Observed, Unreadable,
};
use nodetopo_kubelet::cgroup::ContainerId;

use super::Core;

/// At most this many mismatches (and as many unreadable cgroups) are listed in
/// `status.audit`; the counts cover all of them.
pub const MAX_LISTED: usize = 20;

impl Core {
    /// The pods to audit, and the containers whose ID cannot name a cgroup (reported as
    /// unreadable).
    pub fn audit_pods(&self) -> (Vec<AuditPod>, Vec<Unreadable>) {
        let mut bad = Vec::new();
        let pods = self
            .pods
            .values()
            .map(|p| {
                let key = p.pod.key();
                let containers = p
                    .pod
                    .all_containers()
                    .map(|c| {
                        let id = p.running.get(&c.name).and_then(|raw| {
                            ContainerId::parse(raw)
                                .map_err(|e| {
                                    bad.push(Unreadable {
                                        pod: key.clone(),
                                        container: c.name.clone(),
                                        message: e.to_string(),
                                    })
                                })
                                .ok()
                        });
                        AuditContainer {
                            name: c.name.clone(),
                            id,
                        }
                    })
                    .collect();
                AuditPod {
                    pod: key.clone(),
                    uid: p.pod.uid.clone(),
                    qos: p.pod.qos_class(),
                    terminal: p.terminal,
                    containers,
                }
            })
            .collect();
        (pods, bad)
    }

    /// What the containers should run on now: the kubelet's view when readable (its keys
    /// mapped to pod UIDs where PodResources named a pod only by namespace/name), nodetopo's
    /// allocations and shared pool, and the reserved CPUs of the configuration in effect.
    pub fn audit_expected(&self) -> Expected {
        let uid_of: BTreeMap<String, String> = self
            .pods
            .values()
            .map(|p| (p.pod.key(), p.pod.uid.clone()))
            .collect();
        let kubelet = match self.kubelet_actual() {
            Ok(Some(k)) => Some(KubeletCpus {
                // The `none` policy pins nothing: no shared set is expected.
                default_cpu_set: if k.policy_name == "none" {
                    CpuSet::new()
                } else {
                    k.default_cpu_set.clone()
                },
                assignments: k
                    .entries
                    .iter()
                    .map(|(key, cs)| (uid_of.get(key).unwrap_or(key).clone(), cs.clone()))
                    .collect(),
            }),
            _ => None,
        };
        let mut published: BTreeMap<String, BTreeMap<String, CpuSet>> = BTreeMap::new();
        for a in self.allocations() {
            // Records hold list syntax the engine printed; one that does not parse is not
            // an expectation.
            if let Ok(set) = CpuSet::parse(&a.cpus) {
                published
                    .entry(a.pod_uid.clone())
                    .or_default()
                    .insert(a.container.clone(), set);
            }
        }
        let pools = self.pools();
        Expected {
            kubelet,
            published,
            published_shared: pools.as_ref().map(|p| p.shared.clone()),
            reserved: pools.map(|p| p.reserved).unwrap_or_default(),
        }
    }

    /// Judges what the shell read for [`Core::audit_pods`].
    pub(super) fn judge_cgroups(&self, observed: &Observed) -> AuditReport {
        let (pods, bad) = self.audit_pods();
        let mut report = audit::audit(&pods, observed, &self.audit_expected());
        report.unreadable.extend(bad);
        report
    }

    /// The last audit, when the agent audits (`--cgroup-root`).
    pub fn audit_report(&self) -> Option<&AuditReport> {
        self.audit.as_ref()
    }

    /// `status.audit`: counts of everything, the first [`MAX_LISTED`] of each list.
    pub(super) fn audit_status(&self) -> Option<AuditStatus> {
        let r = self.audit.as_ref()?;
        let drift = r
            .drift
            .iter()
            .take(MAX_LISTED)
            .map(|d| DriftStatus {
                pod: d.pod.clone(),
                pod_uid: d.pod_uid.clone(),
                container: d.container.clone(),
                expected: d.expected.clone().unwrap_or_default(),
                actual: d.actual.clone().unwrap_or_default(),
                reason: d.reason.as_str().to_string(),
                message: d.message.clone(),
            })
            .collect();
        let unreadable = r
            .unreadable
            .iter()
            .take(MAX_LISTED)
            .map(|u| format!("{}/{}: {}", u.pod, u.container, u.message))
            .collect();
        Some(AuditStatus {
            checked_containers: r.checked_containers as i32,
            drift_containers: r.drift_containers() as i32,
            unreadable_containers: r.unreadable.len() as i32,
            reasons: r
                .containers_by_reason()
                .into_iter()
                .map(|(k, v)| (k.as_str().to_string(), v as i32))
                .collect(),
            drift,
            unreadable,
            truncated: r.drift.len() > MAX_LISTED || r.unreadable.len() > MAX_LISTED,
        })
    }

    /// `CgroupAgreement`, when the agent audits.
    pub(super) fn cgroup_agreement_condition(&self) -> Option<ConditionSpec> {
        let r = self.audit.as_ref()?;
        let counts: Vec<String> = r
            .containers_by_reason()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        let unreadable = match r.unreadable.first() {
            None => String::new(),
            Some(u) => format!(
                "; {} cgroups unreadable, first {}/{}: {}",
                r.unreadable.len(),
                u.pod,
                u.container,
                u.message
            ),
        };
        Some(if !r.drift.is_empty() {
            let first = &r.drift[0];
            ConditionSpec::new(
                conditions::CGROUP_AGREEMENT,
                false,
                reason::DRIFT,
                format!(
                    "{} of {} running containers drift ({}); first: {} {}/{}: {}{unreadable}",
                    r.drift_containers(),
                    r.checked_containers,
                    counts.join(", "),
                    first.reason,
                    first.pod,
                    first.container,
                    first.message
                ),
            )
        } else if !r.unreadable.is_empty() {
            ConditionSpec::new(
                conditions::CGROUP_AGREEMENT,
                false,
                reason::CGROUP_UNREADABLE,
                format!(
                    "{} running containers checked, no drift{unreadable}",
                    r.checked_containers
                ),
            )
        } else {
            ConditionSpec::new(
                conditions::CGROUP_AGREEMENT,
                true,
                reason::AGREE,
                format!(
                    "{} running containers checked: every cpuset is what the kubelet assigned",
                    r.checked_containers
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests;
