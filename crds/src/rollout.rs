//! `NodeResourcePolicy.spec.rollout`: whether and how the operator makes the selected nodes'
//! kubelets run the policy (DESIGN.md, "Additions for the second round").

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::rules::{self, Rule};

/// `Observe` (report only) or `Apply` (change the kubelets node by node).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum RolloutMode {
    /// Report the change plan per node; change nothing.
    #[default]
    Observe,
    /// Carry the plans out, `maxUnavailable` nodes at a time.
    Apply,
}

/// Whether pods a plan needs gone may be evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum EvictionMode {
    /// Never evict: such nodes wait (`Applied` False, `WaitingForEviction`).
    #[default]
    Never,
    /// Evict through the Eviction API, so PodDisruptionBudgets hold.
    Evict,
}

/// The rollout settings.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// `Observe` (default) or `Apply`.
    #[serde(default)]
    pub mode: RolloutMode,
    /// Nodes changed at a time: a count or a percentage of the governed nodes (rounded
    /// down, at least 1). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "max_unavailable_schema")]
    pub max_unavailable: Option<IntOrString>,
    /// Stop starting nodes once one has failed (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_on_failure: Option<bool>,
    /// `Never` (default) or `Evict`.
    #[serde(default)]
    pub eviction: EvictionMode,
    /// Seconds a node marked for apply may go without its agent's verdict (`Applied` True
    /// or Failed for the marked generation) before it counts failed with reason
    /// `ProgressDeadlineExceeded`, like a Deployment's. Default 600, from 1 to 604800 (7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rules::int32_schema, transform = progress_deadline_schema)]
    pub progress_deadline_seconds: Option<i32>,
}

/// `progressDeadlineSeconds` when absent.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;
/// The largest `progressDeadlineSeconds` (7 days).
pub const MAX_PROGRESS_DEADLINE_SECONDS: i32 = 604_800;

/// `progressDeadlineSeconds`: at least 1 second, at most 7 days.
pub const PROGRESS_DEADLINE_RULE: Rule = Rule {
    rule: "self >= 1 && self <= 604800",
    message: "rollout.progressDeadlineSeconds must be from 1 to 604800 (7 days)",
};

fn progress_deadline_schema(schema: &mut schemars::Schema) {
    schema.insert(
        "x-kubernetes-validations".to_string(),
        json!([{"rule": PROGRESS_DEADLINE_RULE.rule, "message": PROGRESS_DEADLINE_RULE.message}]),
    );
}

/// `maxUnavailable`: a non-negative count or a percentage string.
pub const MAX_UNAVAILABLE_RULE: Rule = Rule {
    rule: "type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",
    message: "rollout.maxUnavailable must be a count of at least 1 or a percentage from 1% to 100%",
};

fn max_unavailable_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let v = json!({
        "x-kubernetes-int-or-string": true,
        "x-kubernetes-validations": [
            {"rule": MAX_UNAVAILABLE_RULE.rule, "message": MAX_UNAVAILABLE_RULE.message}
        ]
    });
    match v {
        serde_json::Value::Object(m) => schemars::Schema::from(m),
        _ => schemars::Schema::default(),
    }
}

impl RolloutSpec {
    /// `pauseOnFailure` with its default.
    pub fn pause_on_failure(&self) -> bool {
        self.pause_on_failure.unwrap_or(true)
    }

    /// `progressDeadlineSeconds` with its default, checked against its bounds (errors name
    /// the field).
    pub fn progress_deadline_seconds(&self) -> Result<i64, String> {
        match self.progress_deadline_seconds {
            None => Ok(i64::from(DEFAULT_PROGRESS_DEADLINE_SECONDS)),
            Some(s) if (1..=MAX_PROGRESS_DEADLINE_SECONDS).contains(&s) => Ok(i64::from(s)),
            Some(s) => Err(format!(
                "rollout.progressDeadlineSeconds {s}: must be from 1 to {MAX_PROGRESS_DEADLINE_SECONDS}"
            )),
        }
    }

    /// `maxUnavailable` as a node count for `governed` nodes: percentages round down, and at
    /// least one node moves. Errors name the field.
    pub fn max_unavailable_of(&self, governed: usize) -> Result<usize, String> {
        match &self.max_unavailable {
            None => Ok(1),
            Some(IntOrString::Int(n)) if *n >= 1 => Ok(*n as usize),
            Some(IntOrString::Int(n)) => {
                Err(format!("rollout.maxUnavailable {n}: must be at least 1"))
            }
            Some(IntOrString::String(s)) => {
                let pct = s
                    .strip_suffix('%')
                    .and_then(|p| p.parse::<usize>().ok())
                    .filter(|p| (1..=100).contains(p))
                    .ok_or_else(|| {
                        format!(
                            "rollout.maxUnavailable {s:?}: expected a percentage from 1% to 100%"
                        )
                    })?;
                Ok((governed * pct / 100).max(1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_unavailable_resolves_like_a_deployment_but_never_zero() {
        let r = |v: Option<IntOrString>| RolloutSpec {
            max_unavailable: v,
            ..Default::default()
        };
        assert_eq!(r(None).max_unavailable_of(10), Ok(1));
        assert_eq!(r(Some(IntOrString::Int(3))).max_unavailable_of(10), Ok(3));
        assert_eq!(
            r(Some(IntOrString::String("25%".into()))).max_unavailable_of(10),
            Ok(2)
        );
        assert_eq!(
            r(Some(IntOrString::String("10%".into()))).max_unavailable_of(3),
            Ok(1)
        );
        assert!(r(Some(IntOrString::Int(0))).max_unavailable_of(3).is_err());
        assert!(r(Some(IntOrString::String("0%".into())))
            .max_unavailable_of(3)
            .is_err());
        assert!(r(Some(IntOrString::String("abc".into())))
            .max_unavailable_of(3)
            .is_err());
        assert!(r(None).pause_on_failure());
    }

    #[test]
    fn progress_deadline_defaults_and_bounds() {
        let r = |v: Option<i32>| RolloutSpec {
            progress_deadline_seconds: v,
            ..Default::default()
        };
        let mut n = 0;
        for (v, want) in [
            (None, Ok(600)),
            (Some(1), Ok(1)),
            (Some(604_800), Ok(604_800)),
            (Some(0), Err(())),
            (Some(-5), Err(())),
            (Some(604_801), Err(())),
        ] {
            let got = r(v).progress_deadline_seconds();
            match want {
                Ok(w) => assert_eq!(got, Ok(w), "{v:?}"),
                Err(()) => assert!(
                    got.as_ref()
                        .is_err_and(|e| e.contains("rollout.progressDeadlineSeconds")),
                    "{v:?}: {got:?}"
                ),
            }
            n += 1;
        }
        println!("progressDeadlineSeconds: {n} cases");
    }
}
