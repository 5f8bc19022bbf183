//! The agent's core: a pure state machine, shared by cluster mode and local mode.
//!
//! Inputs are [`Event`]s (pod added/updated/deleted, pod list synced, spec changed, kubelet
//! checkpoint read); outputs are the desired status ([`Core::status`]) and the checkpoint
//! ([`Core::checkpoint`]). No I/O, no clock: `now` is passed in. The shells (files, API
//! server) feed events and write what comes out, checkpoint first, then status, so a status
//! never shows an allocation that a restart could lose.
//!
//! Expected flow: events are applied as they come; [`Core::reconcile`] then releases what
//! gone or finished pods held and admits pending Guaranteed pods in a stable order
//! (creation time, then UID) through `NodeAdmitter`, the engine's only entry point.
//!
//! Guarantees: an admitted container keeps its CPUs until its pod is gone or terminal,
//! across restarts (checkpoint) and spec changes (the new admitter starts from the old CPU
//! state; pods admitted before keep their CPUs, new ones follow the new policy). Nothing is
//! admitted or released before the pod list has synced, so a restart never drops a restored
//! allocation because the list was not read yet.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodetopo_crds::conditions::{self, reason, ConditionSpec};
use nodetopo_crds::{NodeTopologySpec, NodeTopologyStatus, NodeTopologySummary, PoolsReport};
use nodetopo_engine::admission::{replay, NodeAdmitter};
use nodetopo_engine::cpumanager::CpuState;
use nodetopo_engine::report::{AllocationReport, RejectionReport, TopologyReport};
use nodetopo_engine::{CpuTopology, QosClass};

pub use crate::actuation::cluster::Outcome;
use crate::daemon::checkpoint::{self, CheckpointData};
use crate::daemon::inputs::kubelet_actual::{self, KubeletActual};
use crate::daemon::inputs::podresources::KubeletView;
use crate::daemon::inputs::spec::{node_config, SpecError};
use crate::daemon::inputs::validate::{self, KubeletError};
use nodetopo_kubelet::cpu_checkpoint::CpuCheckpoint;
use nodetopo_kubelet::memory_checkpoint::MemoryCheckpoint;

mod cgroups;
mod kubelet;
mod topology_manager;

use kubelet::show_kubelet_assignments;

/// The pod record the pod [`Event`]s carry (built in [`crate::daemon::inputs::pods`]).
pub use crate::daemon::inputs::pods::PodInfo;

/// What the core reacts to.
#[derive(Debug, Clone)]
// The single-pod events are what cluster mode's watch produces; local mode rescans.
#[cfg_attr(not(test), allow(dead_code))]
pub enum Event {
    /// A pod appeared or changed.
    PodUpsert(Box<PodInfo>),
    /// A pod is gone (by UID).
    PodDelete(String),
    /// The full pod list (replaces what is known; local mode's directory scan, a relist).
    PodsSynced(Vec<PodInfo>),
    /// The spec and its generation (`None`: no NodeTopology yet).
    Spec(Option<(NodeTopologySpec, Option<i64>)>),
    /// The spec could not be read (local mode: the spec file is malformed).
    SpecUnreadable(String),
    /// The kubelet checkpoint: absent, parsed, or why it cannot be used.
    Kubelet(Result<Option<CpuCheckpoint>, KubeletError>),
    /// The kubelet's Memory Manager checkpoint (`memory_manager_state`): absent, read, or
    /// why it cannot be used.
    KubeletMemory(Result<Option<MemoryCheckpoint>, String>),
    /// The kubelet's PodResources answer: not configured or no socket (`Ok(None)`), read,
    /// or why it failed.
    PodResources(Result<Option<KubeletView>, String>),
    /// Problems reading individual pods (file or object, message), replacing earlier ones.
    PodProblems(Vec<String>),
    /// Actuation: the verdict of an apply (or why none ran), replacing the previous one.
    Actuation(Box<Outcome>),
    /// NodeResourceTopology (`--nrt`): whether the last object could be built, or why not.
    NrtBuilt(Result<(), String>),
    /// The running kubelet's topology manager configuration from its files and command line
    /// (`--read-kubelet-config`): read, or why not.
    KubeletConfig(Result<nodetopo_crds::nrt::KubeletTm, String>),
    /// The cpuset audit (`--cgroup-root`): the real cpusets read for the pods of
    /// [`Core::audit_pods`], judged against the state at this moment.
    Cgroups(Box<nodetopo_kubelet::audit::Observed>),
}

/// Counters the shell turns into metrics; incremented by the core as it decides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Containers that asked for exclusive CPUs (pinning requests).
    pub pinning_requests: u64,
    /// Of which failed.
    pub pinning_errors: u64,
    /// Pods the topology manager admitted or refused.
    pub admission_requests: u64,
    /// Of which refused.
    pub admission_errors: u64,
    /// Kubelet admission failures explained, by (kubelet reason, `Agree`/`Disagree`).
    pub explanations: BTreeMap<(String, &'static str), u64>,
}

/// The node agent's state. See the module documentation.
#[derive(Debug)]
pub struct Core {
    topology: CpuTopology,
    topology_report: TopologyReport,
    spec: Option<NodeTopologySpec>,
    generation: Option<i64>,
    admitter: Option<NodeAdmitter>,
    config_problem: Option<SpecError>,
    spec_problem: Option<String>,
    pods: BTreeMap<String, PodInfo>,
    synced: bool,
    admitted: BTreeMap<String, Vec<AllocationReport>>,
    rejected: BTreeMap<String, Vec<RejectionReport>>,
    /// Pods the kubelet refused, by UID, with nodetopo's explanation (kept while the pod
    /// exists; the newest [`MAX_PUBLISHED_EXPLAINED`] are published).
    explained: BTreeMap<String, RejectionReport>,
    /// Explanations made since the shell last took them (for the Pod Events).
    new_explained: Vec<RejectionReport>,
    /// A validated checkpoint (its CPU state and records) waiting for the first admitter.
    pending_restore: Option<(CpuState, CheckpointData)>,
    checkpoint_problem: Option<(String, String)>,
    /// The restored checkpoint was found inconsistent here: the shell must move it aside
    /// before the next save (see [`Core::take_quarantine_request`]).
    quarantine_requested: bool,
    kubelet: Result<Option<CpuCheckpoint>, KubeletError>,
    kubelet_memory: Result<Option<MemoryCheckpoint>, String>,
    podresources: Result<Option<KubeletView>, String>,
    pod_problems: Vec<String>,
    /// The last actuation verdict (published as `Applied` and `status.change`).
    actuation: Option<Outcome>,
    /// Whether the NodeResourceTopology object could be built (`--nrt` only; published as
    /// the `NodeResourceTopology` condition).
    nrt_built: Option<Result<(), String>>,
    /// The kubelet's topology manager configuration from its files, as last read (`None`:
    /// not read).
    kubelet_config: Option<Result<nodetopo_crds::nrt::KubeletTm, String>>,
    /// The topology manager configuration of the last apply actuation verified.
    verified_tm: Option<nodetopo_crds::nrt::TopologyManagerView>,
    /// The last cpuset audit (`--cgroup-root` only; published as `status.audit` and the
    /// `CgroupAgreement` condition).
    audit: Option<nodetopo_kubelet::audit::AuditReport>,
    /// Decision counters since start.
    pub tally: Tally,
}

/// Kubelet refusals published in `status.rejections` (the newest; older ones stay counted in
/// `summary.rejections` and explained in the checkpoint while their pods exist).
pub const MAX_PUBLISHED_EXPLAINED: usize = 20;

/// Stable admission order: creation time, then UID.
fn order_key(p: &PodInfo) -> (Option<Time>, String) {
    (p.created.clone(), p.pod.uid.clone())
}

fn wants_cpus(p: &PodInfo) -> bool {
    !p.terminal && p.pod.qos_class() == QosClass::Guaranteed
}

impl Core {
    /// A core for this machine, with the checkpoint found at start (if any) and, when the
    /// checkpoint was rejected, the reason and message for the condition.
    ///
    /// The checkpoint is validated against this machine (see [`crate::daemon::inputs::validate`]); one that
    /// breaks an invariant is not used, the condition names the invariant, and the shell is
    /// asked to move the file aside.
    pub fn new(
        topology: CpuTopology,
        restored: Option<CheckpointData>,
        checkpoint_problem: Option<(String, String)>,
    ) -> Self {
        let mut checkpoint_problem = checkpoint_problem;
        let mut quarantine_requested = false;
        let pending_restore = restored.and_then(|cp| {
            match validate::checkpoint(Path::new(checkpoint::FILE_NAME), &cp, &topology) {
                Ok(state) => Some((state, cp)),
                Err(v) => {
                    checkpoint_problem =
                        Some((v.invariant.checkpoint_reason().to_string(), v.to_string()));
                    quarantine_requested = true;
                    None
                }
            }
        });
        Self {
            topology_report: TopologyReport::from_topology(&topology),
            topology,
            spec: None,
            generation: None,
            admitter: None,
            config_problem: None,
            spec_problem: None,
            pods: BTreeMap::new(),
            synced: false,
            admitted: BTreeMap::new(),
            rejected: BTreeMap::new(),
            explained: BTreeMap::new(),
            new_explained: Vec::new(),
            pending_restore,
            checkpoint_problem,
            quarantine_requested,
            kubelet: Ok(None),
            kubelet_memory: Ok(None),
            podresources: Ok(None),
            pod_problems: Vec::new(),
            actuation: None,
            nrt_built: None,
            kubelet_config: None,
            verified_tm: None,
            audit: None,
            tally: Tally::default(),
        }
    }

    /// Applies one event (no admission yet; call [`Core::reconcile`]).
    pub fn apply(&mut self, event: Event) {
        match event {
            Event::PodUpsert(p) => {
                self.pods.insert(p.pod.uid.clone(), *p);
            }
            Event::PodDelete(uid) => {
                self.pods.remove(&uid);
            }
            Event::PodsSynced(list) => {
                self.pods = list.into_iter().map(|p| (p.pod.uid.clone(), p)).collect();
                self.synced = true;
            }
            Event::Spec(spec) => {
                self.spec_problem = None;
                match spec {
                    Some((spec, generation)) => {
                        if self.spec.as_ref() != Some(&spec) || self.generation != generation {
                            self.set_spec(spec, generation);
                        }
                    }
                    None => {
                        self.spec = None;
                        self.generation = None;
                    }
                }
            }
            Event::SpecUnreadable(msg) => self.spec_problem = Some(msg),
            Event::Kubelet(k) => {
                // The shells validate with the file's path; checked again here so that no
                // shell can publish a kubelet state that breaks an invariant.
                self.kubelet = match k {
                    Ok(Some(state)) => validate::kubelet_state(
                        Path::new("kubelet CPU manager state"),
                        &state,
                        &self.topology,
                    )
                    .map(|()| Some(state))
                    .map_err(KubeletError::Rechecked),
                    other => other,
                }
            }
            Event::KubeletMemory(m) => self.kubelet_memory = m,
            Event::PodResources(p) => self.podresources = p,
            Event::PodProblems(p) => self.pod_problems = p,
            Event::NrtBuilt(b) => self.nrt_built = Some(b),
            Event::KubeletConfig(c) => self.kubelet_config = Some(c),
            Event::Cgroups(observed) => self.audit = Some(self.judge_cgroups(&observed)),
            Event::Actuation(a) => {
                let mut a = *a;
                // A restart's True verdict names the agreement its verify step confirmed on
                // a kubelet read after the restart. NoChange restarted nothing: it names the
                // agreement last seen.
                if a.condition.status && a.condition.reason == reason::NO_CHANGE {
                    let k = self.kubelet_agreement_condition(&self.kubelet_actual());
                    a.condition.message = format!(
                        "{}; KubeletAgreement at verdict time (nothing was restarted): {} {}: {}",
                        a.condition.message,
                        if k.status { "True" } else { "False" },
                        k.reason,
                        k.message
                    );
                }
                self.note_verified_apply(&a);
                self.actuation = Some(a);
            }
        }
    }

    /// Builds the admitter for a new spec. The CPU state carries over (running pods keep
    /// their CPUs, as on a kubelet restarted with a new policy after a drain); a spec that
    /// cannot apply here leaves the previous admitter in place and says why.
    fn set_spec(&mut self, spec: NodeTopologySpec, generation: Option<i64>) {
        let built =
            node_config(&spec).and_then(|cfg| Ok(NodeAdmitter::new(self.topology.clone(), &cfg)?));
        self.spec = Some(spec);
        self.generation = generation;
        let admitter = match built {
            Ok(a) => a,
            Err(e) => {
                self.config_problem = Some(e);
                return;
            }
        };
        let carried = match (&self.admitter, self.pending_restore.take()) {
            (Some(old), _) => Some(old.cpu_state().clone()),
            (None, Some((state, cp))) => {
                // Records are re-derived from the validated CPUs and this machine, so no
                // stored placement or alignment flag is published unchecked.
                let mut admitted = cp.allocations;
                for a in admitted.values_mut().flatten() {
                    if let Some(cpus) = state.get(&a.pod_uid, &a.container) {
                        a.place(&self.topology, cpus);
                    }
                }
                self.admitted = admitted;
                self.rejected = cp.rejections;
                self.explained = cp.explained;
                Some(state)
            }
            (None, None) => None,
        };
        let mut admitter = admitter;
        if let Some(state) = carried {
            // A spec change carries the running state over as an applied change would leave
            // the kubelet (rewritten where only the shared pool must move); a restored
            // checkpoint at start is taken as the kubelet would take it.
            let restored = if self.admitter.is_some() {
                admitter.carry_over(state)
            } else {
                admitter.restore(state)
            };
            if let Err(e) = restored {
                let had_old = self.admitter.is_some();
                let why = e.to_string();
                self.config_problem = Some(SpecError::RunningPodsDoNotFit(e));
                if had_old {
                    return;
                }
                // At start, an unusable checkpoint: rebuild from the pods, and have the
                // shell move the file aside before the rebuilt state replaces it.
                self.checkpoint_problem = Some((
                    validate::Invariant::ReservedInShared
                        .checkpoint_reason()
                        .to_string(),
                    format!(
                        "{}: invariant \"{}\" violated: {why}",
                        checkpoint::FILE_NAME,
                        validate::Invariant::ReservedInShared.name()
                    ),
                ));
                self.quarantine_requested = true;
                self.admitted.clear();
                self.rejected.clear();
            }
        }
        // Pods that hold CPUs need no re-admission: the engine releases them from the CPU
        // state when they go, and their published records stay as they were.
        self.config_problem = None;
        self.admitter = Some(admitter);
    }

    /// Releases what gone or terminal pods hold and admits pending pods. Returns whether
    /// anything changed. A no-op before the pod list synced or without an admitter.
    pub fn reconcile(&mut self) -> bool {
        let Some(admitter) = self.admitter.as_mut() else {
            return false;
        };
        if !self.synced {
            return false;
        }
        let mut changed = false;
        let live: BTreeSet<&String> = self
            .pods
            .iter()
            .filter(|(_, p)| wants_cpus(p))
            .map(|(u, _)| u)
            .collect();
        // Release: pods whose records exist but which are gone or finished. CPU state entries
        // without records (a checkpoint from a crash between admit and record) too.
        let held: BTreeSet<String> = self
            .admitted
            .keys()
            .chain(self.rejected.keys())
            .chain(admitter.cpu_state().assignments.keys())
            .filter(|u| !live.contains(u))
            .cloned()
            .collect();
        for uid in held {
            admitter.remove_pod(&uid);
            self.admitted.remove(&uid);
            self.rejected.remove(&uid);
            changed = true;
        }
        // Explanations of pods that are gone.
        let before = self.explained.len();
        self.explained.retain(|uid, _| self.pods.contains_key(uid));
        changed |= self.explained.len() != before;
        let mut pending: Vec<&PodInfo> = self
            .pods
            .values()
            .filter(|p| wants_cpus(p))
            .filter(|p| !self.admitted.contains_key(&p.pod.uid))
            .filter(|p| !self.rejected.contains_key(&p.pod.uid))
            .collect();
        pending.sort_by_key(|p| order_key(p));
        for p in pending {
            let outcome = admitter.admit(&p.pod);
            self.tally.admission_requests += 1;
            let exclusive = p
                .pod
                .all_containers()
                .filter(|c| {
                    c.requests
                        .cpu_millis
                        .is_some_and(|m| m > 0 && m % 1000 == 0)
                })
                .count() as u64;
            self.tally.pinning_requests += exclusive;
            changed = true;
            if outcome.admitted() {
                let mut allocations = outcome.allocations;
                for a in &mut allocations {
                    a.spec_generation = self.generation;
                }
                self.admitted.insert(p.pod.uid.clone(), allocations);
            } else {
                self.tally.admission_errors += 1;
                if outcome
                    .rejections
                    .iter()
                    .any(|r| r.reason != "TopologyAffinityError")
                {
                    self.tally.pinning_errors += 1;
                }
                self.rejected.insert(p.pod.uid.clone(), outcome.rejections);
            }
        }
        // Pods the kubelet refused, explained once each, on the state without the pods that
        // come after them in admission order (they were not there yet when the kubelet
        // decided), once the pods before them are admitted.
        let mut refused: Vec<&PodInfo> = self
            .pods
            .values()
            .filter(|p| p.kubelet_refusal.is_some() && !self.explained.contains_key(&p.pod.uid))
            .collect();
        refused.sort_by_key(|p| order_key(p));
        for p in refused {
            let Some((reason, message)) = &p.kubelet_refusal else {
                continue;
            };
            let key = order_key(p);
            let after: Vec<String> = self
                .admitted
                .keys()
                .filter(|u| self.pods.get(*u).is_some_and(|q| order_key(q) > key))
                .cloned()
                .collect();
            let explanation = replay::explain_rejection(admitter, &p.pod, &after, reason, message);
            *self
                .tally
                .explanations
                .entry((reason.clone(), explanation.agreement.as_str()))
                .or_default() += 1;
            let record = RejectionReport {
                pod: p.pod.key(),
                pod_uid: p.pod.uid.clone(),
                container: explanation.container.clone(),
                reason: reason.clone(),
                message: message.clone(),
                by_kubelet: true,
                explanation: Some(explanation),
            };
            self.new_explained.push(record.clone());
            self.explained.insert(p.pod.uid.clone(), record);
            changed = true;
        }
        changed
    }

    /// The checkpoint of the current state (`None` before the first admitter: nothing to
    /// save yet, and the restored file must not be overwritten by an empty one).
    pub fn checkpoint(&self) -> Option<CheckpointData> {
        let admitter = self.admitter.as_ref()?;
        let state = admitter.cpu_state();
        Some(CheckpointData {
            spec_generation: self.generation,
            default_cpu_set: state.default_cpuset.to_string(),
            entries: state
                .assignments
                .iter()
                .map(|(uid, cs)| {
                    let m = cs.iter().map(|(c, s)| (c.clone(), s.to_string())).collect();
                    (uid.clone(), m)
                })
                .collect(),
            allocations: self.admitted.clone(),
            rejections: self.rejected.clone(),
            explained: self.explained.clone(),
        })
    }

    /// Whether the restored checkpoint must be moved aside (once; the request is cleared).
    /// The shell does it before saving anything, then reports where the file went with
    /// [`Core::checkpoint_moved_aside`].
    pub fn take_quarantine_request(&mut self) -> bool {
        std::mem::take(&mut self.quarantine_requested)
    }

    /// Records where the rejected checkpoint went (or why it could not be moved), for the
    /// `CheckpointRestored` condition.
    pub fn checkpoint_moved_aside(&mut self, note: &str) {
        if let Some((_, msg)) = &mut self.checkpoint_problem {
            msg.push_str(&format!(" ({note})"));
        }
    }

    /// Whether the agent is ready: pods synced and a configuration in effect.
    pub fn ready(&self) -> bool {
        self.synced && self.admitter.is_some()
    }

    /// The desired status. `previous` conditions keep their `lastTransitionTime` unless
    /// they flip; `now` stamps the ones that do.
    pub fn status(&self, previous: &[Condition], now: &Time) -> NodeTopologyStatus {
        let kubelet = self.kubelet_actual();
        let mut conds = previous.to_vec();
        for c in self.conditions(&kubelet) {
            conditions::upsert(&mut conds, &c, self.generation, now);
        }
        // Applied carries the generation it judged, not the newest one seen.
        if let Some(a) = &self.actuation {
            conditions::upsert(&mut conds, &a.condition, Some(a.generation), now);
        }
        if let Some(built) = &self.nrt_built {
            let c = match built {
                Ok(()) => ConditionSpec::new(
                    conditions::NODE_RESOURCE_TOPOLOGY,
                    true,
                    reason::BUILT,
                    "the NodeResourceTopology object follows the node's state",
                ),
                Err(m) => ConditionSpec::new(
                    conditions::NODE_RESOURCE_TOPOLOGY,
                    false,
                    reason::BUILD_FAILED,
                    format!("{m}; the NodeResourceTopology object is not updated until this is resolved"),
                ),
            };
            conditions::upsert(&mut conds, &c, self.generation, now);
        }
        // With the object (agent with --nrt): where its topology manager configuration
        // came from, and whether the sources agree.
        let tm = self
            .nrt_built
            .as_ref()
            .and_then(|_| self.topology_manager_status());
        if let Some((_, c)) = &tm {
            conditions::upsert(&mut conds, c, self.generation, now);
        }
        if let Some(c) = self.cgroup_agreement_condition() {
            conditions::upsert(&mut conds, &c, self.generation, now);
        }
        let (allocations, rejections) = self.published_records(kubelet.as_ref().ok());
        let pools = self.pools();
        let own_rejections = rejections.iter().filter(|r| !r.by_kubelet).count();
        let summary = self.summary(
            &allocations,
            own_rejections + self.explained.len(),
            pools.as_ref(),
        );
        NodeTopologyStatus {
            observed_generation: self.generation,
            conditions: conds,
            topology: Some(self.topology_report.clone()),
            pools: pools.map(|p| PoolsReport {
                reserved: p.reserved.to_string(),
                shared: p.shared.to_string(),
                exclusive: p.exclusive.to_string(),
                free: p.free.to_string(),
            }),
            allocations,
            rejections,
            kubelet: Some(match &kubelet {
                Ok(Some(k)) => k.observed(),
                _ => kubelet_actual::observed_none(),
            }),
            summary: Some(summary),
            change: self.actuation.as_ref().and_then(|a| a.change.clone()),
            node_resource_topology: tm.map(|(report, _)| report),
            audit: self.audit_status(),
        }
    }

    /// Every condition the agent owns, in the order they are written.
    fn conditions(&self, kubelet: &Result<Option<KubeletActual>, String>) -> [ConditionSpec; 6] {
        [
            self.invalid_condition(),
            self.ready_condition(),
            self.checkpoint_condition(),
            self.policy_current_condition(),
            self.pods_readable_condition(),
            self.kubelet_agreement_condition(kubelet),
        ]
    }

    /// Why the spec does not apply on this node, if it does not.
    fn invalid_message(&self) -> Option<String> {
        match (&self.spec_problem, &self.config_problem) {
            (Some(unreadable), _) => Some(unreadable.clone()),
            (None, Some(e)) => Some(e.to_string()),
            (None, None) => None,
        }
    }

    fn invalid_condition(&self) -> ConditionSpec {
        match self.invalid_message() {
            Some(msg) => ConditionSpec::new(conditions::INVALID, true, reason::INVALID_CONFIG, msg),
            None => ConditionSpec::new(
                conditions::INVALID,
                false,
                reason::VALID,
                "the spec applies on this node",
            ),
        }
    }

    fn ready_condition(&self) -> ConditionSpec {
        let (status, why, msg) = match (&self.spec, self.admitter.is_some(), self.synced) {
            (None, _, _) => (
                false,
                reason::WAITING_FOR_SPEC,
                "no NodeTopology spec yet (the operator has not created it)",
            ),
            (_, false, _) => (
                false,
                reason::INVALID_CONFIG,
                "no usable configuration; publishing topology only",
            ),
            (_, true, false) => (
                false,
                reason::WAITING_FOR_PODS,
                "the pod list has not been read yet",
            ),
            (_, true, true) if self.invalid_message().is_some() => (
                true,
                reason::PREVIOUS_CONFIG,
                "running the previous configuration; the new spec does not apply",
            ),
            _ => (
                true,
                reason::ADMITTING,
                "pods are admitted under the current spec",
            ),
        };
        ConditionSpec::new(conditions::READY, status, why, msg)
    }

    fn checkpoint_condition(&self) -> ConditionSpec {
        match &self.checkpoint_problem {
            Some((why, msg)) => ConditionSpec::new(
                conditions::CHECKPOINT_RESTORED,
                false,
                why.clone(),
                format!("{msg}; the state was rebuilt from the pods"),
            ),
            None => ConditionSpec::new(
                conditions::CHECKPOINT_RESTORED,
                true,
                reason::RESTORED,
                "checkpoint restored or freshly started",
            ),
        }
    }

    fn policy_current_condition(&self) -> ConditionSpec {
        let old: Vec<String> = self
            .admitted
            .iter()
            .filter(|(_, allocs)| allocs.iter().any(|a| a.spec_generation != self.generation))
            .map(|(uid, allocs)| {
                allocs
                    .first()
                    .map(|a| a.pod.clone())
                    .unwrap_or_else(|| uid.clone())
            })
            .collect();
        if old.is_empty() {
            ConditionSpec::new(
                conditions::POLICY_CURRENT,
                true,
                reason::ALL_CURRENT,
                "every allocation follows the current spec",
            )
        } else {
            ConditionSpec::new(
                conditions::POLICY_CURRENT,
                false,
                reason::PODS_UNDER_OLD_POLICY,
                format!(
                    "pods admitted under an older spec keep their CPUs: {}",
                    old.join(", ")
                ),
            )
        }
    }

    fn pods_readable_condition(&self) -> ConditionSpec {
        if self.pod_problems.is_empty() {
            ConditionSpec::new(
                conditions::PODS_READABLE,
                true,
                reason::ALL_READ,
                "every pod was read",
            )
        } else {
            ConditionSpec::new(
                conditions::PODS_READABLE,
                false,
                reason::PODS_SKIPPED,
                self.pod_problems.join("; "),
            )
        }
    }

    /// Allocations and rejections in admission order, with the kubelet's CPUs shown for the
    /// pods it holds (see [`show_kubelet_assignments`]).
    fn published_records(
        &self,
        kubelet: Option<&Option<KubeletActual>>,
    ) -> (Vec<AllocationReport>, Vec<RejectionReport>) {
        // The kubelet's refusals: the newest MAX_PUBLISHED_EXPLAINED (summary.rejections
        // counts every one).
        let mut explained: Vec<(Option<Time>, String)> = self
            .explained
            .keys()
            .map(|uid| match self.pods.get(uid) {
                Some(p) => order_key(p),
                None => (None, uid.clone()),
            })
            .collect();
        explained.sort();
        let skip = explained.len().saturating_sub(MAX_PUBLISHED_EXPLAINED);
        let explained: BTreeSet<&String> = explained[skip..].iter().map(|(_, u)| u).collect();
        let mut order: Vec<(Option<Time>, String)> = self
            .admitted
            .keys()
            .chain(self.rejected.keys())
            .chain(explained.iter().copied())
            .map(|uid| match self.pods.get(uid) {
                Some(p) => order_key(p),
                None => (None, uid.clone()),
            })
            .collect();
        order.sort();
        order.dedup();
        let mut allocations = Vec::new();
        let mut rejections = Vec::new();
        for (_, uid) in &order {
            allocations.extend(self.admitted.get(uid).into_iter().flatten().cloned());
            rejections.extend(self.rejected.get(uid).into_iter().flatten().cloned());
            if explained.contains(uid) {
                rejections.extend(self.explained.get(uid).cloned());
            }
        }
        if let Some(Some(k)) = kubelet {
            show_kubelet_assignments(&mut allocations, k, &self.topology);
        }
        (allocations, rejections)
    }

    /// The counts of the status summary. `alignedContainers` counts the published
    /// allocations that are both NUMA-aligned and on whole physical cores.
    fn summary(
        &self,
        allocations: &[AllocationReport],
        rejections: usize,
        pools: Option<&nodetopo_engine::admission::Pools>,
    ) -> NodeTopologySummary {
        let exclusive = pools.map(|p| p.exclusive.len()).unwrap_or(0);
        let aligned = allocations
            .iter()
            .filter(|a| a.aligned.numa_node && a.aligned.physical_cpu)
            .count();
        let spec = self.spec.clone().unwrap_or_default();
        NodeTopologySummary {
            cpu_manager_policy: spec.cpu_manager.policy.as_str().to_string(),
            topology_manager_policy: spec.topology_manager.policy.name().to_string(),
            cpus: self.topology.cpus().len() as i32,
            numa_nodes: self.topology_report.numa_nodes.len() as i32,
            uncore_caches: self.topology_report.uncore_caches.len() as i32,
            exclusive_cpus: exclusive as i32,
            containers: allocations.len() as i32,
            aligned_containers: aligned as i32,
            rejections: rejections as i32,
        }
    }

    /// The explanations of kubelet refusals made since the last call (each pod's once), for
    /// the shell's Pod Events.
    pub fn take_new_explanations(&mut self) -> Vec<RejectionReport> {
        std::mem::take(&mut self.new_explained)
    }

    /// The CPU pools, when a configuration is in effect.
    pub fn pools(&self) -> Option<nodetopo_engine::admission::Pools> {
        self.admitter.as_ref().map(|a| a.pools())
    }

    /// Whether the last NodeResourceTopology object could be built (`None` before the first
    /// report, and always without `--nrt`).
    pub fn nrt_built(&self) -> Option<&Result<(), String>> {
        self.nrt_built.as_ref()
    }

    /// Every pod bound to the node that the core tracks (by UID, any phase).
    pub fn pods(&self) -> impl Iterator<Item = &PodInfo> {
        self.pods.values()
    }

    /// Every published allocation record (unordered).
    pub fn allocations(&self) -> impl Iterator<Item = &AllocationReport> {
        self.admitted.values().flatten()
    }

    /// The kubelet's last PodResources answer, when it was read.
    pub fn podresources(&self) -> Option<&KubeletView> {
        self.podresources.as_ref().ok().and_then(|v| v.as_ref())
    }

    /// The kubelet's Memory Manager checkpoint as last read (`Ok(None)`: none).
    pub fn kubelet_memory(&self) -> &Result<Option<MemoryCheckpoint>, String> {
        &self.kubelet_memory
    }

    /// The generation of the spec last received.
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    /// The NodeTopology spec last received, if any (it may not apply: see `status`).
    pub fn spec(&self) -> Option<&NodeTopologySpec> {
        self.spec.as_ref()
    }

    /// The machine.
    pub fn topology(&self) -> &CpuTopology {
        &self.topology
    }
}

#[cfg(test)]
mod tests;
