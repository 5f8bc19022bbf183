//! Condition types and reasons of both kinds, and the one helper that writes a condition the
//! Kubernetes way: `lastTransitionTime` moves only when the status flips. Time is an input.

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
