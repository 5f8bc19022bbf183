//! Node-by-node rollout of a policy (`spec.rollout`): which nodes to change next. Pure.
//!
//! Each governed node is in one of four states, read from its NodeTopology's `Applied`
//! condition: updated (True for the current spec), in progress (asked to apply, no verdict
//! yet), failed (False with reason `Failed`), or pending (not asked yet, or waiting for
//! evictions/drain). At most `maxUnavailable` nodes are in progress at a time; with
//! `pauseOnFailure` no node starts while any has failed. In `Observe` mode nothing starts.
//! Nodes start in name order, so a rollout is reproducible.

use nodetopo_crds::rollout::{RolloutMode, RolloutSpec};

/// Where a node stands in the rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRollout {
    /// Runs the current spec (Applied True).
    Updated,
    /// Asked to apply, no verdict yet.
    InProgress,
    /// The apply failed (Applied False, reason Failed).
    Failed,
    /// Not asked yet (or waiting for evictions or a drain).
    Pending,
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
    let (updated, in_progress, failed, pending) = (
        count(NodeRollout::Updated),
        count(NodeRollout::InProgress),
        count(NodeRollout::Failed),
        count(NodeRollout::Pending),
    );
    let mut b = Batch {
        updated: updated as i32,
        pending: (pending + in_progress) as i32,
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
    if !b.progressing && pending == 0 {
        b.held = Some("every governed node is updated or failed".into());
    }
    Ok(b)
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
}
