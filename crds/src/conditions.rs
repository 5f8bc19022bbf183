//! Every condition type and reason of both kinds, and the one helper that writes a condition
//! the Kubernetes way: `lastTransitionTime` moves only when the status flips. Time is an input.
//!
//! Types are the constants at the top; reasons live in [`reason`], grouped by the condition
//! they explain. Agent, operator and tests name conditions only through this module.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// NodeResourcePolicy and NodeTopology: the configuration is in effect everywhere it should be.
pub const READY: &str = "Ready";
/// NodeResourcePolicy: it selects nodes that another policy governs.
pub const CONFLICT: &str = "Conflict";
/// NodeResourcePolicy: the spec is invalid, or cannot apply on some nodes. NodeTopology: the
/// spec cannot apply on this node.
pub const INVALID: &str = "Invalid";
/// NodeTopology: the kubelet's CPU manager checkpoint agrees with the agent's assignments.
pub const KUBELET_AGREEMENT: &str = "KubeletAgreement";
/// NodeTopology: the agent's checkpoint was restored (or there was none); False when it was
/// rejected and the state rebuilt from pods.
pub const CHECKPOINT_RESTORED: &str = "CheckpointRestored";
/// NodeTopology: every allocation was made under the current spec; False lists the pods
/// still running under an older one.
pub const POLICY_CURRENT: &str = "PolicyCurrent";
/// NodeTopology: False when some pod files / objects could not be read.
pub const PODS_READABLE: &str = "PodsReadable";
/// NodeTopology: whether the node runs the spec's kubelet configuration (actuation; reasons
/// in [`reason`]: `NoChange`, `RestartOnly`, `StateRewritten`, `WaitingForEviction`,
/// `DrainRequired`, `ObserveOnly`, `Failed`).
pub const APPLIED: &str = "Applied";
/// NodeResourcePolicy: a rollout is under way.
pub const PROGRESSING: &str = "Progressing";
/// NodeTopology (agent with `--nrt`): whether the node's NodeResourceTopology object could be
/// built from the node's state (reasons `Built`, `BuildFailed`); False means the object is
/// not updated until the contradiction named in the message is gone.
pub const NODE_RESOURCE_TOPOLOGY: &str = "NodeResourceTopology";
/// NodeTopology (agent with `--nrt`): whether the topology manager policy and scope the
/// NodeResourceTopology publishes come from the running kubelet (its configuration files and
/// command line, or an apply actuation verified) and every other source agrees: True `Agree`, False
/// `Disagree` (the message names each source and its values) or `Unverified` (only the
/// spec is known, published as `SpecUnverified`).
pub const TOPOLOGY_MANAGER_AGREEMENT: &str = "TopologyManagerAgreement";

/// NodeTopology (agent with `--cgroup-root`): every running container's real cpuset (its
/// cgroup) matches what the kubelet assigned (reasons `Agree`, `Drift`, `CgroupUnreadable`;
/// the mismatches in `status.audit`).
pub const CGROUP_AGREEMENT: &str = "CgroupAgreement";

/// Condition reasons (PascalCase), grouped by the condition they explain.
pub mod reason {
    // NodeResourceTopology (NodeTopology, agent with --nrt); BuildFailed is also the reason
    // of the Warning event.
    /// The object was built from the node's current state and handed to its writer.
    pub const BUILT: &str = "Built";
    /// The node's state contradicts itself or the machine; the object is not updated.
    pub const BUILD_FAILED: &str = "NodeResourceTopologyBuildFailed";
    // TopologyManagerAgreement (NodeTopology, agent with --nrt) also uses Agree and Disagree.
    /// TopologyManagerAgreement False: only the spec is known; nothing confirms the kubelet
    /// runs it.
    pub const UNVERIFIED: &str = "Unverified";
    // Ready (NodeResourcePolicy).
    /// Ready False, Invalid True: the policy's spec is invalid.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Ready False, Invalid True: some governed nodes cannot apply the configuration.
    pub const INVALID_ON_NODES: &str = "InvalidOnNodes";
    /// Ready True: the policy governs no node.
    pub const NO_GOVERNED_NODES: &str = "NoGovernedNodes";
    /// Ready False: some governed nodes have not applied the configuration yet.
    pub const PROGRESSING: &str = "Progressing";
    /// Ready True: every governed node applied the configuration.
    pub const APPLIED: &str = "Applied";

    // Ready (NodeTopology).
    /// Ready False: the operator has not written the spec yet.
    pub const WAITING_FOR_SPEC: &str = "WaitingForSpec";
    /// Ready False: the pod list has not been read yet.
    pub const WAITING_FOR_PODS: &str = "WaitingForPods";
    /// Ready True: the previous configuration runs; the new spec does not apply.
    pub const PREVIOUS_CONFIG: &str = "PreviousConfig";
    /// Ready True: pods are admitted under the current spec.
    pub const ADMITTING: &str = "Admitting";

    // Invalid.
    /// Invalid True (NodeTopology), Ready False: the spec cannot apply on this node.
    pub const INVALID_CONFIG: &str = "InvalidConfig";
    /// Invalid False.
    pub const VALID: &str = "Valid";

    // Conflict.
    /// Conflict True: a policy of higher priority governs some matched nodes.
    pub const OVERRIDDEN: &str = "Overridden";
    /// Conflict True: a policy of equal priority and an earlier name governs some nodes.
    pub const TIED_PRIORITY: &str = "TiedPriority";
    /// Conflict False.
    pub const NO_CONFLICT: &str = "NoConflict";

    // CheckpointRestored.
    /// CheckpointRestored True.
    pub const RESTORED: &str = "Restored";
    /// CheckpointRestored False: the file could not be read.
    pub const CHECKPOINT_UNREADABLE: &str = "CheckpointUnreadable";
    /// CheckpointRestored False: the file is not a checkpoint.
    pub const CHECKPOINT_CORRUPT: &str = "CheckpointCorrupt";
    /// CheckpointRestored False: the file was written by another format version.
    pub const CHECKPOINT_VERSION_MISMATCH: &str = "CheckpointVersionMismatch";
    /// CheckpointRestored False: the checksum does not match the payload.
    pub const CHECKPOINT_CHECKSUM_MISMATCH: &str = "CheckpointChecksumMismatch";
    /// CheckpointRestored False: a CPU set is not well formed.
    pub const CHECKPOINT_MALFORMED_SET: &str = "CheckpointMalformedSet";
    /// CheckpointRestored False: a CPU is not on this machine.
    pub const CHECKPOINT_CPU_NOT_ON_MACHINE: &str = "CheckpointCpuNotOnMachine";
    /// CheckpointRestored False: a CPU is in two places.
    pub const CHECKPOINT_CPU_OVERLAP: &str = "CheckpointCpuOverlap";
    /// CheckpointRestored False: the allocation records do not match the entries.
    pub const CHECKPOINT_RECORDS_MISMATCH: &str = "CheckpointRecordsMismatch";
    /// CheckpointRestored False: the reserved CPUs are not in the shared pool.
    pub const CHECKPOINT_INCONSISTENT: &str = "CheckpointInconsistent";

    // PolicyCurrent.
    /// PolicyCurrent True.
    pub const ALL_CURRENT: &str = "AllCurrent";
    /// PolicyCurrent False.
    pub const PODS_UNDER_OLD_POLICY: &str = "PodsUnderOldPolicy";

    // PodsReadable.
    /// PodsReadable True.
    pub const ALL_READ: &str = "AllRead";
    /// PodsReadable False.
    pub const PODS_SKIPPED: &str = "PodsSkipped";

    // KubeletAgreement.
    /// KubeletAgreement True.
    pub const AGREE: &str = "Agree";
    /// KubeletAgreement False: the assignments differ.
    pub const DISAGREE: &str = "Disagree";
    /// KubeletAgreement False: the kubelet's state could not be read.
    pub const KUBELET_STATE_UNREADABLE: &str = "KubeletStateUnreadable";
    /// KubeletAgreement False: there is no kubelet state to compare with.
    pub const NO_KUBELET_STATE: &str = "NoKubeletState";
    /// KubeletAgreement False: the kubelet's checkpoint fails its checksum.
    pub const KUBELET_STATE_CHECKSUM_MISMATCH: &str = "KubeletStateChecksumMismatch";
    /// KubeletAgreement False: the kubelet runs CPU manager policy `none` (it pins nothing),
    /// while nodetopo's spec predicts exclusive CPUs: the allocations shown are predictions.
    pub const KUBELET_POLICY_NONE: &str = "KubeletPolicyNone";
    /// KubeletAgreement False: the kubelet holds pod-level CPU allocations (its
    /// PodLevelResourceManagers feature, KEP-5526), which nodetopo does not model: they are
    /// published as taken (never free), the containers' CPUs are not compared.
    pub const KUBELET_POD_LEVEL_ALLOCATIONS: &str = "KubeletPodLevelAllocations";
    /// KubeletAgreement False: the CPU assignments agree, but the memory the kubelet's
    /// Memory Manager pinned for containers (its `memory_manager_state`) differs from
    /// nodetopo's admissions (whose Memory Manager runs policy `None` unless modelled).
    pub const KUBELET_MEMORY_DISAGREE: &str = "KubeletMemoryDisagree";

    // CgroupAgreement (also reuses AGREE).
    /// CgroupAgreement False: some containers' real cpusets differ from their assignment;
    /// also the reason of the Warning event that names them.
    pub const DRIFT: &str = "CpusetDrift";
    /// CgroupAgreement False: some containers' cgroups could not be read.
    pub const CGROUP_UNREADABLE: &str = "CgroupUnreadable";

    // Applied (NodeTopology, actuation).
    /// Applied True: the kubelet already runs the configuration.
    pub const NO_CHANGE: &str = "NoChange";
    /// Applied: a kubelet restart alone applies the change.
    pub const RESTART_ONLY: &str = "RestartOnly";
    /// Applied: the kubelet's state files were rewritten.
    pub const STATE_REWRITTEN: &str = "StateRewritten";
    /// Applied False: pods must be evicted first.
    pub const WAITING_FOR_EVICTION: &str = "WaitingForEviction";
    /// Applied False: the node must be drained.
    pub const DRAIN_REQUIRED: &str = "DrainRequired";
    /// Applied False: the policy's rollout mode is Observe.
    pub const OBSERVE_ONLY: &str = "ObserveOnly";
    /// Applied False: the change failed.
    pub const FAILED: &str = "Failed";
    /// Applied False: the plan needs pods evicted and the policy's `rollout.eviction` is
    /// `Never`.
    pub const EVICTION_NOT_ALLOWED: &str = "EvictionNotAllowed";
    /// Applied False: the operator asked this node to apply, but the agent runs with
    /// actuation off (chart value `agent.actuation.enabled`).
    pub const ACTUATION_DISABLED: &str = "ActuationDisabled";
    /// Applied False: the agent's restarter is `none` (dry run, chart value
    /// `agent.actuation.restart`): the plan and what would be done are reported in
    /// `status.change`, nothing was changed and the kubelet was not restarted.
    pub const DRY_RUN: &str = "DryRun";
    /// Rollout (the operator's verdict on a node, in the policy's status): the node was
    /// marked for apply and its agent gave no verdict (`Applied` True or `Failed` for the
    /// marked generation) within `rollout.progressDeadlineSeconds`. Counts as failed; a late
    /// verdict still wins.
    pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";

    // Progressing (NodeResourcePolicy, rollout).
    /// Progressing True: nodes are being changed, batch by batch.
    pub const ROLLING_OUT: &str = "RollingOut";
    /// Progressing False: a node failed and `pauseOnFailure` holds the rest.
    pub const PAUSED: &str = "Paused";
    /// Progressing False: every governed node is updated (or failed, without pause).
    pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    /// Progressing False: the remaining nodes wait for something only a person can do
    /// (a drain, evictions the policy does not allow, actuation turned off).
    pub const ROLLOUT_BLOCKED: &str = "RolloutBlocked";
    /// Progressing False: the rollout's settings are invalid (e.g. `maxUnavailable`).
    pub const INVALID_ROLLOUT: &str = "InvalidRollout";
}

/// Condition status "True".
pub const TRUE: &str = "True";
/// Condition status "False".
pub const FALSE: &str = "False";

/// The parts of a condition that a decision produces; time and generation are added by
/// [`upsert`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionSpec {
    /// Condition type, e.g. [`READY`].
    pub type_: &'static str,
    /// Whether the condition holds.
    pub status: bool,
    /// PascalCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl ConditionSpec {
    /// Builds a condition spec.
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Writes `spec` into `conditions` (replacing the condition of the same type, keeping the
/// order of the others, appending new types): `lastTransitionTime` stays as it was unless the
/// status flips or the condition is new, in which case it becomes `now`.
pub fn upsert(
    conditions: &mut Vec<Condition>,
    spec: &ConditionSpec,
    observed_generation: Option<i64>,
    now: &Time,
) {
    let status = if spec.status { TRUE } else { FALSE };
    let existing = conditions.iter_mut().find(|c| c.type_ == spec.type_);
    match existing {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now.clone();
            }
            c.status = status.to_string();
            c.reason = spec.reason.clone();
            c.message = spec.message.clone();
            c.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: spec.type_.to_string(),
            status: status.to_string(),
            reason: spec.reason.clone(),
            message: spec.message.clone(),
            observed_generation,
            last_transition_time: now.clone(),
        }),
    }
}

/// The condition of a type, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of a type is present with status "True".
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == TRUE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_moves_only_on_flip() {
        let mut c = Vec::new();
        upsert(
            &mut c,
            &ConditionSpec::new(READY, false, "Pending", "a"),
            Some(1),
            &t(10),
        );
        assert_eq!(c[0].last_transition_time, t(10));
        upsert(
            &mut c,
            &ConditionSpec::new(READY, false, "Pending", "b"),
            Some(2),
            &t(20),
        );
        assert_eq!(c[0].last_transition_time, t(10));
        assert_eq!(c[0].message, "b");
        assert_eq!(c[0].observed_generation, Some(2));
        upsert(
            &mut c,
            &ConditionSpec::new(READY, true, "Applied", "c"),
            Some(2),
            &t(30),
        );
        assert_eq!(c[0].last_transition_time, t(30));
        assert_eq!(c[0].status, "True");
        upsert(
            &mut c,
            &ConditionSpec::new(CONFLICT, false, "None", "d"),
            Some(2),
            &t(40),
        );
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].type_, CONFLICT);
        assert!(is_true(&c, READY));
        assert!(!is_true(&c, CONFLICT));
        assert!(!is_true(&c, INVALID));
    }
}
