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
//! A mark carries its time (annotation `nodetopo.io/apply-started`, RFC 3339). A marked node
//! whose agent gives no verdict (`Applied` True or `Failed` for the marked generation) within
//! `rollout.progressDeadlineSeconds` of that time counts failed with reason
//! `ProgressDeadlineExceeded`: it pauses the rollout under `pauseOnFailure` and frees its
//! slot otherwise. The deadline passes when `now` is strictly after start + deadline (as a
//! Deployment's). A verdict that comes after the deadline still wins: the node is then
//! updated (or failed with the agent's reason), so a slow node is not failed for good.
//! A missing or unparsable start, or one in the future (clock skew), is treated as marked
//! now: the decision re-writes the mark with the current time, so the deadline runs from the
//! first time the operator saw the node so.
//!
//! [`decide_rollouts`] runs this for every policy inside [`super::decide`]: it fills the
//! policy status counts and the `Progressing` condition, and returns the marks the
//! controller writes (field manager `nodetopo-rollout`) and when to look again (the earliest
//! pending deadline).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use nodetopo_crds::conditions::{self, reason, ConditionSpec};
use nodetopo_crds::rollout::{EvictionMode, RolloutMode, RolloutSpec};
use nodetopo_crds::{
    NodeResourcePolicyStatus, NodeTopology, NodeTopologySpec, APPLY_GENERATION_ANNOTATION,
    APPLY_STARTED_ANNOTATION,
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

/// A node's place in the rollout, read from its NodeTopology at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeVerdict {
    /// The state.
    pub state: NodeRollout,
    /// Why (for messages): the agent's reason and message, or the operator's.
    pub why: String,
    /// For a node in progress: when its deadline passes.
    pub deadline: Option<Timestamp>,
    /// For a node in progress: its start annotation is missing, unparsable or in the
    /// future, so the mark is to be written again with the current time.
    pub restamp: bool,
}

impl NodeVerdict {
    fn settled(state: NodeRollout, why: String) -> Self {
        NodeVerdict {
            state,
            why,
            deadline: None,
            restamp: false,
        }
    }
}

/// When the operator marked a node, from its `nodetopo.io/apply-started` annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// A time not after `now`.
    At(Timestamp),
    /// No annotation.
    Missing,
    /// Not an RFC 3339 time (the text).
    Unparsable(String),
    /// A time after `now` (clock skew).
    Future(Timestamp),
}

/// Reads a node's start annotation at `now`.
pub fn apply_started(nt: &NodeTopology, now: Timestamp) -> Started {
    let Some(text) = nt
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(APPLY_STARTED_ANNOTATION))
    else {
        return Started::Missing;
    };
    match text.trim().parse::<Timestamp>() {
        Err(_) => Started::Unparsable(text.clone()),
        Ok(t) if t > now => Started::Future(t),
        Ok(t) => Started::At(t),
    }
}

/// A node's place in the rollout from its NodeTopology at `now`, with a reason when it is
/// held, in progress or failed (for messages). `desired` is the spec the node controller
/// writes; `deadline_seconds` the policy's `progressDeadlineSeconds`.
pub fn node_rollout(
    existing: Option<&NodeTopology>,
    desired: &NodeTopologySpec,
    now: Timestamp,
    deadline_seconds: i64,
) -> NodeVerdict {
    let settled = NodeVerdict::settled;
    let Some(nt) = existing else {
        return settled(NodeRollout::Held, "NodeTopology not created yet".into());
    };
    if nt.spec != *desired {
        return settled(
            NodeRollout::Held,
            "NodeTopology spec not updated yet".into(),
        );
    }
    let Some(generation) = nt.metadata.generation else {
        return settled(NodeRollout::Held, "NodeTopology has no generation".into());
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
    let waiting = match verdict {
        Some(c) if c.status == conditions::TRUE => {
            return settled(NodeRollout::Updated, c.reason.clone())
        }
        Some(c) if c.reason == reason::FAILED => {
            return settled(NodeRollout::Failed, format!("{}: {}", c.reason, c.message))
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
            return settled(NodeRollout::Held, format!("{}: {}", c.reason, c.message))
        }
        _ if !marked => return settled(NodeRollout::Pending, "not asked to apply yet".into()),
        Some(c) if c.reason == reason::WAITING_FOR_EVICTION => {
            format!("{}: {}", c.reason, c.message)
        }
        _ => format!("asked to apply generation {generation}"),
    };
    in_progress(nt, generation, waiting, now, deadline_seconds)
}

/// A marked node without a verdict: in progress until its deadline, failed after it.
fn in_progress(
    nt: &NodeTopology,
    generation: i64,
    waiting: String,
    now: Timestamp,
    deadline_seconds: i64,
) -> NodeVerdict {
    let window = SignedDuration::from_secs(deadline_seconds);
    let (start, restamp) = match apply_started(nt, now) {
        Started::At(t) => (t, false),
        Started::Missing | Started::Unparsable(_) | Started::Future(_) => (now, true),
    };
    // Timestamps are bounded; a start near their end never passes its deadline.
    let Ok(deadline) = start.checked_add(window) else {
        return NodeVerdict {
            state: NodeRollout::InProgress,
            why: waiting,
            deadline: None,
            restamp,
        };
    };
    if now > deadline {
        return NodeVerdict::settled(
            NodeRollout::Failed,
            format!(
                "{}: no verdict from the agent on generation {generation} within \
                 {deadline_seconds}s of the mark at {start} ({waiting})",
                reason::PROGRESS_DEADLINE_EXCEEDED
            ),
        );
    }
    NodeVerdict {
        state: NodeRollout::InProgress,
        why: waiting,
        deadline: Some(deadline),
        restamp,
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
    /// When the node was marked (annotation `nodetopo.io/apply-started`).
    pub started: Timestamp,
}

/// What [`decide_rollouts`] decided.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rollouts {
    /// Marks to write: new ones and re-stamped ones, policies then nodes in name order.
    pub marks: Vec<Mark>,
    /// Per policy: the earliest deadline of its nodes in progress, when it should be looked
    /// at again even if nothing changes.
    pub wake_at: BTreeMap<String, Timestamp>,
}

/// The `Progressing` condition for a batch.
pub fn progressing_condition(
    spec: &RolloutSpec,
    batch: &Result<Batch, String>,
    in_progress: &[String],
    held: &[String],
    failed: &[String],
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
    let mut counts = format!(
        "{} of {governed} node(s) updated, {} pending, {} failed",
        b.updated, b.pending, b.failed
    );
    if !failed.is_empty() {
        counts.push_str(&format!(" ({})", names(failed)));
    }
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

/// Rolls out every policy at `now`: fills `updatedNodes`, `pendingNodes`, `failedNodes`
/// and the `Progressing` condition of each status in `statuses`, and returns the marks to
/// write (policies in name order, nodes in name order) and when to look again. `desired` are
/// every node's desired NodeTopology (governed ones carry `policyRef`), `existing` the
/// NodeTopologies by name.
pub fn decide_rollouts(
    compiled: &[CompiledPolicy<'_>],
    desired: &[DesiredNode],
    existing: &BTreeMap<&str, &NodeTopology>,
    statuses: &mut BTreeMap<String, NodeResourcePolicyStatus>,
    now: &Time,
) -> Rollouts {
    let mut out = Rollouts::default();
    for p in compiled {
        let Some(status) = statuses.get_mut(p.name) else {
            continue;
        };
        let spec = p.policy.spec.rollout.clone().unwrap_or_default();
        // An invalid deadline is reported with the batch below; the default stands in.
        let deadline_seconds = spec.progress_deadline_seconds().unwrap_or(i64::from(
            nodetopo_crds::rollout::DEFAULT_PROGRESS_DEADLINE_SECONDS,
        ));
        let governed: Vec<&DesiredNode> = desired
            .iter()
            .filter(|d| d.spec.policy_ref.as_ref().is_some_and(|r| r.name == p.name))
            .collect();
        let states: Vec<(String, NodeVerdict)> = governed
            .iter()
            .map(|d| {
                let v = node_rollout(
                    existing.get(d.node.as_str()).copied(),
                    &d.spec,
                    now.0,
                    deadline_seconds,
                );
                (d.node.clone(), v)
            })
            .collect();
        let pairs: Vec<(String, NodeRollout)> =
            states.iter().map(|(n, v)| (n.clone(), v.state)).collect();
        let batch = spec
            .progress_deadline_seconds()
            .and_then(|_| next_batch(&spec, &pairs));
        let listed = |want: NodeRollout, why: bool| -> Vec<String> {
            states
                .iter()
                .filter(|(_, v)| v.state == want)
                .map(|(n, v)| {
                    if why {
                        format!("{n} ({})", v.why)
                    } else {
                        n.clone()
                    }
                })
                .collect()
        };
        let mut in_progress = listed(NodeRollout::InProgress, false);
        let held = listed(NodeRollout::Held, true);
        let failed = listed(NodeRollout::Failed, true);
        if let Ok(b) = &batch {
            status.updated_nodes = b.updated;
            status.pending_nodes = b.pending;
            status.failed_nodes = b.failed;
            let mark = |node: &str, generation: i64| Mark {
                policy: p.name.to_string(),
                node: node.to_string(),
                generation,
                eviction: spec.eviction,
                started: now.0,
            };
            if spec.mode == RolloutMode::Apply {
                for (node, v) in &states {
                    let generation = existing
                        .get(node.as_str())
                        .and_then(|nt| nt.metadata.generation);
                    if let (true, Some(g)) = (v.restamp, generation) {
                        out.marks.push(mark(node, g));
                    }
                }
            }
            for node in &b.start {
                let generation = existing
                    .get(node.as_str())
                    .and_then(|nt| nt.metadata.generation);
                if let Some(generation) = generation {
                    out.marks.push(mark(node, generation));
                    in_progress.push(node.clone());
                    if let Ok(d) = now
                        .0
                        .checked_add(SignedDuration::from_secs(deadline_seconds))
                    {
                        remember(&mut out.wake_at, p.name, d);
                    }
                }
            }
            for (_, v) in &states {
                if let (NodeRollout::InProgress, Some(d)) = (v.state, v.deadline) {
                    remember(&mut out.wake_at, p.name, d);
                }
            }
        }
        in_progress.sort();
        let cond =
            progressing_condition(&spec, &batch, &in_progress, &held, &failed, governed.len());
        conditions::upsert(
            &mut status.conditions,
            &cond,
            p.policy.metadata.generation,
            now,
        );
    }
    out.marks
        .sort_by(|a, b| (&a.policy, &a.node).cmp(&(&b.policy, &b.node)));
    out
}

/// How long to wait from `now` to look at a policy again for a deadline at `at`: one second
/// past it (the deadline passes strictly after `at`), at least one second.
pub fn wake_delay(now: Timestamp, at: Timestamp) -> std::time::Duration {
    let secs = at.as_second().saturating_sub(now.as_second()).max(0) as u64;
    std::time::Duration::from_secs(secs.saturating_add(1))
}

/// Keeps the earliest wake-up time per policy.
fn remember(wake_at: &mut BTreeMap<String, Timestamp>, policy: &str, at: Timestamp) {
    let e = wake_at.entry(policy.to_string()).or_insert(at);
    if at < *e {
        *e = at;
    }
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

    fn ts(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
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
            assert_eq!(
                node_rollout(nt.as_ref(), &spec, ts(0), 600).state,
                want,
                "{nt:?}"
            );
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
        let c = progressing_condition(
            &apply(None, None),
            &Ok(b),
            &[],
            &["node-00 (x)".into()],
            &[],
            2,
        );
        assert_eq!(c.reason, reason::ROLLOUT_BLOCKED);
        assert!(!c.status);
    }

    /// A node marked for generation 2 at `started` (annotation text), with an optional verdict.
    fn marked_at(started: Option<&str>, applied: Option<(bool, &str)>) -> NodeTopology {
        let mut nt = topology(2, Some(2), applied.map(|(ok, why)| (ok, why, 2)));
        if let Some(text) = started {
            nt.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(APPLY_STARTED_ANNOTATION.to_string(), text.to_string());
        }
        nt
    }

    #[test]
    fn progress_deadline_fails_a_silent_node_and_a_late_verdict_wins() {
        let spec = NodeTopologySpec::default();
        let start = ts(0).to_string();
        let mut n = 0;
        let mut check = |nt: NodeTopology, now: i64, want: NodeRollout, restamp: bool| {
            let v = node_rollout(Some(&nt), &spec, ts(now), 30);
            assert_eq!((v.state, v.restamp), (want, restamp), "at +{now}s: {v:?}");
            if want == Failed && v.why.starts_with(reason::PROGRESS_DEADLINE_EXCEEDED) {
                assert!(v.why.contains("within 30s"), "{}", v.why);
            }
            if want == InProgress {
                assert!(v.deadline.is_some(), "{v:?}");
            }
            n += 1;
        };
        // Before, exactly at (not passed: strictly after, as a Deployment's) and after.
        check(marked_at(Some(&start), None), 10, InProgress, false);
        check(marked_at(Some(&start), None), 30, InProgress, false);
        check(marked_at(Some(&start), None), 31, Failed, false);
        // Waiting for evictions is no verdict: the deadline applies too.
        let waiting = Some((false, reason::WAITING_FOR_EVICTION));
        check(marked_at(Some(&start), waiting), 29, InProgress, false);
        check(marked_at(Some(&start), waiting), 3600, Failed, false);
        // A late verdict wins over the deadline.
        let ok = Some((true, reason::RESTART_ONLY));
        check(marked_at(Some(&start), ok), 3600, Updated, false);
        let failed = Some((false, reason::FAILED));
        check(marked_at(Some(&start), failed), 3600, Failed, false);
        // Held nodes (waiting for a person) are not timed.
        let held = Some((false, reason::DRAIN_REQUIRED));
        check(marked_at(Some(&start), held), 3600, Held, false);
        // Missing, unparsable, or in the future (clock skew): treated as marked now, re-stamped,
        // never failed on that reading.
        check(marked_at(None, None), 3600, InProgress, true);
        check(marked_at(Some("yesterday"), None), 3600, InProgress, true);
        check(
            marked_at(Some(&ts(100).to_string()), None),
            50,
            InProgress,
            true,
        );
        // Fractional seconds and surrounding blanks parse.
        check(
            marked_at(Some(" 2027-01-15T08:00:00.5Z "), None),
            1,
            InProgress,
            false,
        );
        // A pending node (no mark for this generation) is never timed.
        let mut stale = marked_at(Some(&start), None);
        stale.metadata.generation = Some(3);
        check(stale, 3600, Pending, false);
        println!("progress deadline node cases: {n}");
    }

    #[test]
    fn deadline_instants_and_wake_delay() {
        let spec = NodeTopologySpec::default();
        let v = node_rollout(
            Some(&marked_at(Some(&ts(0).to_string()), None)),
            &spec,
            ts(5),
            30,
        );
        assert_eq!(v.deadline, Some(ts(30)));
        // Re-stamped: the deadline runs from now.
        let v = node_rollout(Some(&marked_at(None, None)), &spec, ts(5), 30);
        assert_eq!(v.deadline, Some(ts(35)));
        assert_eq!(
            wake_delay(ts(5), ts(30)),
            std::time::Duration::from_secs(26)
        );
        assert_eq!(
            wake_delay(ts(40), ts(30)),
            std::time::Duration::from_secs(1)
        );
        assert!(matches!(
            apply_started(&marked_at(Some("x"), None), ts(0)),
            Started::Unparsable(t) if t == "x"
        ));
        assert_eq!(
            apply_started(&marked_at(Some(&ts(9).to_string()), None), ts(0)),
            Started::Future(ts(9))
        );
        assert_eq!(
            apply_started(&marked_at(None, None), ts(0)),
            Started::Missing
        );
    }

    #[test]
    fn deadline_failure_pauses_or_frees_the_slot() {
        // With the deadline passed the node counts failed: pauseOnFailure holds the rest ...
        let b = next_batch(&apply(None, None), &nodes(&[Failed, Pending])).unwrap();
        assert!(b.start.is_empty());
        let c = progressing_condition(
            &apply(None, None),
            &Ok(b),
            &[],
            &[],
            &["node-00 (ProgressDeadlineExceeded: x)".into()],
            2,
        );
        assert_eq!((c.status, c.reason.as_str()), (false, reason::PAUSED));
        assert!(
            c.message.contains("ProgressDeadlineExceeded"),
            "{}",
            c.message
        );
        // ... and without it the slot is free for the next node.
        let b = next_batch(&apply(None, Some(false)), &nodes(&[Failed, Pending])).unwrap();
        assert_eq!(b.start, ["node-01"]);
    }
}
