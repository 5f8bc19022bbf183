//! Node-by-node rollout of a policy (`spec.rollout`): which nodes to change next. Pure.
//!
//! Each governed node is in one of five states, read from its NodeTopology ([`node_rollout`]):
//! its spec, `metadata.generation`, the operator's mark (annotation
//! `nodetopo.io/apply-generation`) and the agent's `Applied` condition for that generation:
//! updated (True), in progress (marked, no verdict yet, or evictions under way), failed
//! (False with reason `Failed`), held (waiting for something only a person can do: a drain,
//! evictions the policy does not allow, actuation off on the node, or the spec not written
//! yet), or pending (not marked yet). At most `maxUnavailable` nodes are in progress at a
//! time; with `pauseOnFailure` no node starts while any has failed. In `Observe` mode nothing
//! starts. Nodes start in name order, so a rollout is reproducible.
//!
//! [`decide_rollouts`] runs this for every policy inside [`super::decide`]: it fills the
//! policy status counts and the `Progressing` condition, and returns the marks the
//! controller writes (field manager `nodetopo-rollout`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodetopo_crds::conditions::{self, reason, ConditionSpec};
use nodetopo_crds::rollout::{EvictionMode, RolloutMode, RolloutSpec};
use nodetopo_crds::{
    NodeResourcePolicyStatus, NodeTopology, NodeTopologySpec, APPLY_GENERATION_ANNOTATION,
};

use super::{CompiledPolicy, DesiredNode};

/// Where a node stands in the rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRollout {
    /// Runs the current spec (Applied True).
    Updated,
    /// Asked to apply, no verdict yet.
    InProgress,
    /// The apply failed (Applied False, reason Failed).
    Failed,
    /// Not asked yet.
    Pending,
    /// Waiting for something only a person (or the operator's next write) can do: counted
    /// as pending, never started, does not use a `maxUnavailable` slot.
    Held,
}

/// The next step of a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Batch {
    /// Nodes to ask to apply now, in name order.
    pub start: Vec<String>,
    /// Status counts.
    pub updated: i32,
    /// Pending and in progress nodes.
    pub pending: i32,
    /// Failed nodes.
    pub failed: i32,
    /// Whether the rollout is progressing (nodes in progress or to start).
    pub progressing: bool,
    /// Why nothing more starts, when that is so (for the Progressing condition).
    pub held: Option<String>,
}

/// Decides the next batch. `nodes` are (name, state) of the governed nodes.
pub fn next_batch(spec: &RolloutSpec, nodes: &[(String, NodeRollout)]) -> Result<Batch, String> {
    let mut sorted: Vec<&(String, NodeRollout)> = nodes.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let count = |s: NodeRollout| sorted.iter().filter(|(_, x)| *x == s).count();
    let (updated, in_progress, failed, pending, held) = (
        count(NodeRollout::Updated),
        count(NodeRollout::InProgress),
        count(NodeRollout::Failed),
        count(NodeRollout::Pending),
        count(NodeRollout::Held),
    );
    let mut b = Batch {
        updated: updated as i32,
        pending: (pending + in_progress + held) as i32,
        failed: failed as i32,
        ..Default::default()
    };
    if spec.mode == RolloutMode::Observe {
        b.held = Some("rollout mode is Observe".into());
        return Ok(b);
    }
    let max = spec.max_unavailable_of(nodes.len())?;
    if failed > 0 && spec.pause_on_failure() {
        b.progressing = in_progress > 0;
        b.held = Some(format!(
            "paused: {failed} node(s) failed and pauseOnFailure is true"
        ));
        return Ok(b);
    }
    let room = max.saturating_sub(in_progress);
    b.start = sorted
        .iter()
        .filter(|(_, s)| *s == NodeRollout::Pending)
        .take(room)
        .map(|(n, _)| n.clone())
        .collect();
    b.progressing = in_progress > 0 || !b.start.is_empty();
    if !b.progressing && pending == 0 && held == 0 {
        b.held = Some("every governed node is updated or failed".into());
    } else if !b.progressing && held > 0 {
        b.held = Some(format!("{held} node(s) wait for action"));
    }
    Ok(b)
}

/// A node's place in the rollout from its NodeTopology, with a reason when it is held or in
/// progress (for messages). `desired` is the spec the node controller writes.
pub fn node_rollout(
    existing: Option<&NodeTopology>,
    desired: &NodeTopologySpec,
) -> (NodeRollout, String) {
    let Some(nt) = existing else {
        return (NodeRollout::Held, "NodeTopology not created yet".into());
    };
    if nt.spec != *desired {
        return (
            NodeRollout::Held,
            "NodeTopology spec not updated yet".into(),
        );
    }
    let Some(generation) = nt.metadata.generation else {
        return (NodeRollout::Held, "NodeTopology has no generation".into());
    };
    let marked = nt
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(APPLY_GENERATION_ANNOTATION))
        .is_some_and(|g| g.trim() == generation.to_string());
    let verdict = nt
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, conditions::APPLIED))
        .filter(|c| c.observed_generation == Some(generation));
    match verdict {
        Some(c) if c.status == conditions::TRUE => (NodeRollout::Updated, c.reason.clone()),
        Some(c) if c.reason == reason::FAILED => {
            (NodeRollout::Failed, format!("{}: {}", c.reason, c.message))
        }
        Some(c)
            if [
                reason::EVICTION_NOT_ALLOWED,
                reason::DRAIN_REQUIRED,
                reason::ACTUATION_DISABLED,
                reason::DRY_RUN,
            ]
            .contains(&c.reason.as_str()) =>
        {
            (NodeRollout::Held, format!("{}: {}", c.reason, c.message))
        }
        Some(c) if marked && c.reason == reason::WAITING_FOR_EVICTION => (
            NodeRollout::InProgress,
            format!("{}: {}", c.reason, c.message),
        ),
        _ if marked => (
            NodeRollout::InProgress,
            format!("asked to apply generation {generation}"),
        ),
        _ => (NodeRollout::Pending, "not asked to apply yet".into()),
    }
}

/// A mark the controller writes: the node's agent may apply NodeTopology generation
/// `generation`, evicting pods when `eviction` is `Evict`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The governing policy.
    pub policy: String,
    /// Node (and NodeTopology) name.
    pub node: String,
    /// The NodeTopology generation to apply.
    pub generation: i64,
    /// The policy's `rollout.eviction`.
    pub eviction: EvictionMode,
}

/// The `Progressing` condition for a batch.
pub fn progressing_condition(
    spec: &RolloutSpec,
    batch: &Result<Batch, String>,
    in_progress: &[String],
    held: &[String],
    governed: usize,
) -> ConditionSpec {
    let names = |v: &[String]| {
        let mut s = v.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
        if v.len() > 3 {
            s.push_str(&format!(" and {} more", v.len() - 3));
        }
        s
    };
    let b = match batch {
        Err(e) => {
            return ConditionSpec::new(
                conditions::PROGRESSING,
                false,
                reason::INVALID_ROLLOUT,
                e.clone(),
            )
        }
        Ok(b) => b,
    };
    let counts = format!(
        "{} of {governed} node(s) updated, {} pending, {} failed",
        b.updated, b.pending, b.failed
    );
    if spec.mode == RolloutMode::Observe {
        return ConditionSpec::new(
            conditions::PROGRESSING,
            false,
            reason::OBSERVE_ONLY,
            format!("rollout mode is Observe: no node is changed ({counts})"),
        );
    }
    if b.failed > 0 && spec.pause_on_failure() {
        let mut msg = format!("paused after a failure (pauseOnFailure): {counts}");
        if !in_progress.is_empty() {
            msg.push_str(&format!("; still in progress: {}", names(in_progress)));
        }
        return ConditionSpec::new(conditions::PROGRESSING, false, reason::PAUSED, msg);
    }
    if b.progressing {
        let mut msg = counts;
        if !in_progress.is_empty() {
            msg.push_str(&format!("; in progress: {}", names(in_progress)));
        }
        return ConditionSpec::new(conditions::PROGRESSING, true, reason::ROLLING_OUT, msg);
    }
    if !held.is_empty() {
        return ConditionSpec::new(
            conditions::PROGRESSING,
            false,
            reason::ROLLOUT_BLOCKED,
            format!("{counts}; waiting for action on: {}", names(held)),
        );
    }
    ConditionSpec::new(
        conditions::PROGRESSING,
        false,
        reason::ROLLOUT_COMPLETE,
        counts,
    )
}

/// Rolls out every policy: fills `updatedNodes`, `pendingNodes`, `failedNodes` and the
/// `Progressing` condition of each status in `statuses`, and returns the marks to write
/// (policies in name order, nodes in name order). `desired` are every node's desired
/// NodeTopology (governed ones carry `policyRef`), `existing` the NodeTopologies by name.
pub fn decide_rollouts(
    compiled: &[CompiledPolicy<'_>],
    desired: &[DesiredNode],
    existing: &BTreeMap<&str, &NodeTopology>,
    statuses: &mut BTreeMap<String, NodeResourcePolicyStatus>,
    now: &Time,
) -> Vec<Mark> {
    let mut marks = Vec::new();
    for p in compiled {
        let Some(status) = statuses.get_mut(p.name) else {
            continue;
        };
        let spec = p.policy.spec.rollout.clone().unwrap_or_default();
        let governed: Vec<&DesiredNode> = desired
            .iter()
            .filter(|d| d.spec.policy_ref.as_ref().is_some_and(|r| r.name == p.name))
            .collect();
        let states: Vec<(String, NodeRollout, String)> = governed
            .iter()
            .map(|d| {
                let (s, why) = node_rollout(existing.get(d.node.as_str()).copied(), &d.spec);
                (d.node.clone(), s, why)
            })
            .collect();
        let pairs: Vec<(String, NodeRollout)> =
            states.iter().map(|(n, s, _)| (n.clone(), *s)).collect();
        let batch = next_batch(&spec, &pairs);
        let mut in_progress: Vec<String> = states
            .iter()
            .filter(|(_, s, _)| *s == NodeRollout::InProgress)
            .map(|(n, _, _)| n.clone())
            .collect();
        let held: Vec<String> = states
            .iter()
            .filter(|(_, s, _)| *s == NodeRollout::Held)
            .map(|(n, _, why)| format!("{n} ({why})"))
            .collect();
        if let Ok(b) = &batch {
            status.updated_nodes = b.updated;
            status.pending_nodes = b.pending;
            status.failed_nodes = b.failed;
            for node in &b.start {
                let generation = existing
                    .get(node.as_str())
                    .and_then(|nt| nt.metadata.generation);
                if let Some(generation) = generation {
                    marks.push(Mark {
                        policy: p.name.to_string(),
                        node: node.clone(),
                        generation,
                        eviction: spec.eviction,
                    });
                    in_progress.push(node.clone());
                }
            }
        }
        in_progress.sort();
        let cond = progressing_condition(&spec, &batch, &in_progress, &held, governed.len());
        conditions::upsert(
            &mut status.conditions,
            &cond,
            p.policy.metadata.generation,
            now,
        );
    }
    marks
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use NodeRollout::*;

    fn nodes(states: &[NodeRollout]) -> Vec<(String, NodeRollout)> {
        // Given out of order on purpose: batches go by name.
        states
            .iter()
            .enumerate()
            .rev()
            .map(|(i, s)| (format!("node-{i:02}"), *s))
            .collect()
    }

    fn apply(max: Option<IntOrString>, pause: Option<bool>) -> RolloutSpec {
        RolloutSpec {
            mode: RolloutMode::Apply,
            max_unavailable: max,
            pause_on_failure: pause,
            ..Default::default()
        }
    }

    #[test]
    fn batches() {
        let mut n = 0;
        let mut check =
            |spec: RolloutSpec, states: &[NodeRollout], want: &[&str], counts: (i32, i32, i32)| {
                let b = next_batch(&spec, &nodes(states)).unwrap();
                assert_eq!(b.start, want, "{spec:?} {states:?}");
                assert_eq!(
                    (b.updated, b.pending, b.failed),
                    counts,
                    "{spec:?} {states:?}"
                );
                n += 1;
            };
        // Observe: nothing starts, counts still reported.
        check(
            RolloutSpec::default(),
            &[Pending, Pending, Updated],
            &[],
            (1, 2, 0),
        );
        // Default maxUnavailable 1: first pending node by name.
        check(
            apply(None, None),
            &[Pending, Pending, Pending],
            &["node-00"],
            (0, 3, 0),
        );
        // One already in progress: no room.
        check(
            apply(None, None),
            &[Updated, InProgress, Pending],
            &[],
            (1, 2, 0),
        );
        // Count 2 with one in progress: one more.
        check(
            apply(Some(IntOrString::Int(2)), None),
            &[InProgress, Pending, Pending],
            &["node-01"],
            (0, 3, 0),
        );
        // 50% of 4 = 2.
        check(
            apply(Some(IntOrString::String("50%".into())), None),
            &[Pending; 4],
            &["node-00", "node-01"],
            (0, 4, 0),
        );
        // 10% of 4 rounds down to 0, at least 1 moves.
        check(
            apply(Some(IntOrString::String("10%".into())), None),
            &[Pending; 4],
            &["node-00"],
            (0, 4, 0),
        );
        // A failure pauses by default ...
        check(
            apply(Some(IntOrString::Int(3)), None),
            &[Failed, Pending, Pending],
            &[],
            (0, 2, 1),
        );
        // ... and not with pauseOnFailure false.
        check(
            apply(Some(IntOrString::Int(3)), Some(false)),
            &[Failed, Pending, Pending],
            &["node-01", "node-02"],
            (0, 2, 1),
        );
        // Done.
        check(apply(None, None), &[Updated, Updated], &[], (2, 0, 0));
        println!("rollout batches: {n} cases");
    }

    #[test]
    fn progressing_and_held() {
        let b = next_batch(&apply(None, None), &nodes(&[Updated, Updated])).unwrap();
        assert!(!b.progressing);
        assert!(b.held.unwrap().contains("every governed node"));
        let b = next_batch(&apply(None, None), &nodes(&[Failed, InProgress])).unwrap();
        assert!(
            b.progressing,
            "a node in progress keeps the rollout progressing"
        );
        assert!(b.held.unwrap().contains("paused"));
        let b = next_batch(&RolloutSpec::default(), &nodes(&[Pending])).unwrap();
        assert!(!b.progressing);
        let bad = apply(Some(IntOrString::String("x".into())), None);
        assert!(next_batch(&bad, &nodes(&[Pending]))
            .unwrap_err()
            .contains("maxUnavailable"));
    }

    fn topology(gen: i64, mark: Option<i64>, applied: Option<(bool, &str, i64)>) -> NodeTopology {
        let mut nt = NodeTopology::new("n", NodeTopologySpec::default());
        nt.metadata.generation = Some(gen);
        if let Some(m) = mark {
            nt.metadata.annotations = Some(
                [(APPLY_GENERATION_ANNOTATION.to_string(), m.to_string())]
                    .into_iter()
                    .collect(),
            );
        }
        if let Some((ok, why, g)) = applied {
            let mut conds = Vec::new();
            conditions::upsert(
                &mut conds,
                &ConditionSpec::new(conditions::APPLIED, ok, why, "m"),
                Some(g),
                &Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap()),
            );
            nt.status = Some(nodetopo_crds::NodeTopologyStatus {
                conditions: conds,
                ..Default::default()
            });
        }
        nt
    }

    #[test]
    fn node_states_from_mark_and_applied() {
        let spec = NodeTopologySpec::default();
        let mut n = 0;
        let mut check = |nt: Option<NodeTopology>, want: NodeRollout| {
            assert_eq!(node_rollout(nt.as_ref(), &spec).0, want, "{nt:?}");
            n += 1;
        };
        check(None, Held);
        check(Some(topology(2, None, None)), Pending);
        // A mark for an older generation is stale: not asked for this spec.
        check(Some(topology(2, Some(1), None)), Pending);
        check(Some(topology(2, Some(2), None)), InProgress);
        check(
            Some(topology(2, None, Some((false, reason::OBSERVE_ONLY, 2)))),
            Pending,
        );
        check(
            Some(topology(2, Some(2), Some((false, reason::OBSERVE_ONLY, 2)))),
            InProgress,
        );
        check(
            Some(topology(
                2,
                Some(2),
                Some((true, reason::STATE_REWRITTEN, 2)),
            )),
            Updated,
        );
        // A verdict for an older generation does not count.
        check(
            Some(topology(2, Some(2), Some((true, reason::RESTART_ONLY, 1)))),
            InProgress,
        );
        check(
            Some(topology(2, Some(2), Some((false, reason::FAILED, 2)))),
            Failed,
        );
        check(
            Some(topology(
                2,
                Some(2),
                Some((false, reason::WAITING_FOR_EVICTION, 2)),
            )),
            InProgress,
        );
        for r in [
            reason::EVICTION_NOT_ALLOWED,
            reason::DRAIN_REQUIRED,
            reason::ACTUATION_DISABLED,
            reason::DRY_RUN,
        ] {
            check(Some(topology(2, Some(2), Some((false, r, 2)))), Held);
        }
        let mut other = topology(2, None, None);
        other.spec.cpu_manager.reserved_cpus = Some(4);
        check(Some(other), Held);
        println!("rollout node states: {n} cases");
    }

    #[test]
    fn held_nodes_do_not_use_a_slot() {
        let b = next_batch(&apply(None, None), &nodes(&[Held, Pending, Pending])).unwrap();
        assert_eq!(b.start, ["node-01"]);
        assert_eq!(b.pending, 3);
        let b = next_batch(&apply(None, None), &nodes(&[Held, Updated])).unwrap();
        assert!(!b.progressing);
        let c = progressing_condition(&apply(None, None), &Ok(b), &[], &["node-00 (x)".into()], 2);
        assert_eq!(c.reason, reason::ROLLOUT_BLOCKED);
        assert!(!c.status);
    }
}
