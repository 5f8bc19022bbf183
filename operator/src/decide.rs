//! The operator's decisions as pure functions: policies, nodes and existing NodeTopologies in;
//! desired NodeTopology specs and policy statuses out. No Kubernetes client, no clock (`now`
//! is an argument), deterministic order everywhere.
//!
//! Rules:
//! - A policy whose spec fails `nodetopo_crds::validation` is never a candidate (its nodes
//!   fall through to the next policy, or to `none`) and reports `Invalid=True/InvalidSpec`.
//! - Per node, the candidates are the valid policies whose selector matches; the winner has
//!   the highest priority, ties broken by name (alphabetically first). Every other candidate
//!   counts the node as overridden and reports `Conflict=True`.
//! - A node's desired spec is the winner's configuration plus `policyRef {name, generation}`,
//!   or both managers at `none` without `policyRef` when no policy matches.
//! - A governed node is *applied* when its NodeTopology carries exactly the desired spec, the
//!   agent's `status.observedGeneration` equals `metadata.generation`, and nothing marks it
//!   invalid; *invalid* when the agent reports `Invalid=True` for the current generation, or
//!   the operator's own check against the reported topology fails; otherwise *pending*.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodetopo_crds::conditions::{self, reason, ConditionSpec};
use nodetopo_crds::validation::{self, ValidationError};
use nodetopo_crds::{
    NodeProblem, NodeResourcePolicy, NodeResourcePolicyStatus, NodeTopology, NodeTopologySpec,
    PolicyRef,
};

use crate::selector::Selector;

/// How many problem nodes a policy status lists.
pub const MAX_PROBLEM_NODES: usize = 10;
/// How many nodes or policies a condition message names before "and N more".
const MAX_NAMED: usize = 3;

/// A policy prepared for selection.
#[derive(Debug, Clone)]
pub struct CompiledPolicy<'a> {
    /// The policy object.
    pub policy: &'a NodeResourcePolicy,
    /// Its name.
    pub name: &'a str,
    /// `metadata.generation` (0 when absent, as in tests).
    pub generation: i64,
    /// `spec.priority`.
    pub priority: i32,
    /// The compiled selector.
    pub selector: Selector,
    /// Validation errors; non-empty means the policy is never a candidate.
    pub errors: Vec<ValidationError>,
}

/// Compiles policies and orders them by precedence: priority descending, then name.
pub fn compile<P: Borrow<NodeResourcePolicy>>(policies: &[P]) -> Vec<CompiledPolicy<'_>> {
    let mut out: Vec<CompiledPolicy<'_>> = policies
        .iter()
        .map(|p| p.borrow())
        .map(|p| CompiledPolicy {
            policy: p,
            name: p.metadata.name.as_deref().unwrap_or_default(),
            generation: p.metadata.generation.unwrap_or(0),
            priority: p.spec.priority,
            selector: Selector::compile(p.spec.node_selector.as_ref()),
            errors: validation::validate_policy_spec(&p.spec),
        })
        .collect();
    out.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.name.cmp(b.name)));
    out
}

/// Who won a node among the matching valid policies (indices into the compiled list).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// The winner, if any policy matches.
    pub winner: Option<usize>,
    /// Matching valid policies that lost, in precedence order.
    pub losers: Vec<usize>,
    /// Matching invalid policies (not candidates).
    pub invalid: Vec<usize>,
}

/// Selects the winning policy for a node's labels. `compiled` must be in [`compile`] order.
pub fn select(compiled: &[CompiledPolicy<'_>], labels: &BTreeMap<String, String>) -> Selection {
    let mut s = Selection::default();
    for (i, p) in compiled.iter().enumerate() {
        if !p.selector.matches(labels) {
            continue;
        }
        if !p.errors.is_empty() {
            s.invalid.push(i);
        } else if s.winner.is_none() {
            s.winner = Some(i);
        } else {
            s.losers.push(i);
        }
    }
    s
}

/// The NodeTopology spec a node should carry under `winner` (or no policy).
pub fn render_spec(winner: Option<&CompiledPolicy<'_>>) -> NodeTopologySpec {
    match winner {
        None => NodeTopologySpec::default(),
        Some(p) => NodeTopologySpec {
            cpu_manager: p.policy.spec.cpu_manager.clone().unwrap_or_default(),
            topology_manager: p.policy.spec.topology_manager.clone().unwrap_or_default(),
            policy_ref: Some(PolicyRef {
                name: p.name.to_string(),
                generation: p.generation,
            }),
        },
    }
}

/// One node's desired state.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredNode {
    /// Node (and NodeTopology) name.
    pub node: String,
    /// The Node's UID, for the owner reference.
    pub node_uid: String,
    /// The spec to apply.
    pub spec: NodeTopologySpec,
}

/// The desired NodeTopology of one node.
pub fn desire_node(compiled: &[CompiledPolicy<'_>], node: &Node) -> DesiredNode {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let sel = select(compiled, labels);
    DesiredNode {
        node: node.metadata.name.clone().unwrap_or_default(),
        node_uid: node.metadata.uid.clone().unwrap_or_default(),
        spec: render_spec(sel.winner.map(|i| &compiled[i])),
    }
}

/// Whether the existing NodeTopology differs from the desired one (spec or owner reference):
/// `false` means the apply would be a no-op and is skipped.
pub fn needs_apply(existing: Option<&NodeTopology>, desired: &DesiredNode) -> bool {
    let Some(nt) = existing else { return true };
    let owned = nt.metadata.owner_references.iter().flatten().any(|o| {
        o.kind == "Node"
            && o.api_version == "v1"
            && o.name == desired.node
            && o.uid == desired.node_uid
    });
    !owned || nt.spec != desired.spec
}

/// The state of one governed node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// The agent runs the desired spec.
    Applied,
    /// Not yet: no NodeTopology, spec about to change, or agent not caught up.
    Pending(String),
    /// The configuration cannot apply on this node.
    Invalid {
        /// PascalCase reason.
        reason: String,
        /// Detail.
        message: String,
    },
}

/// Judges a governed node from its existing NodeTopology.
pub fn node_state(existing: Option<&NodeTopology>, desired: &NodeTopologySpec) -> NodeState {
    let Some(nt) = existing else {
        return NodeState::Pending("NodeTopology not created yet".into());
    };
    // The operator's own check needs only the reported topology, so it holds even before the
    // agent has caught up with the newest spec.
    if let Some(topology) = nt.status.as_ref().and_then(|s| s.topology.as_ref()) {
        if let Err(p) = validation::check_on_node(&desired.cpu_manager, topology) {
            return NodeState::Invalid {
                reason: p.reason.to_string(),
                message: p.message,
            };
        }
    }
    if nt.spec != *desired {
        return NodeState::Pending("NodeTopology spec not updated yet".into());
    }
    let generation = nt.metadata.generation;
    let Some(status) = nt.status.as_ref() else {
        return NodeState::Pending("agent has not reported yet".into());
    };
    if generation.is_none() || status.observed_generation != generation {
        return NodeState::Pending(format!(
            "agent applied generation {} of {}",
            status
                .observed_generation
                .map_or("none".into(), |g| g.to_string()),
            generation.map_or("none".into(), |g| g.to_string())
        ));
    }
    if let Some(c) = conditions::find(&status.conditions, conditions::INVALID) {
        if c.status == conditions::TRUE {
            return NodeState::Invalid {
                reason: c.reason.clone(),
                message: c.message.clone(),
            };
        }
    }
    NodeState::Applied
}

/// The policy statuses and rollout marks the operator should write (each node's
/// NodeTopology spec is [`desire_node`]'s, decided per node by the node controller).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Desired status per policy name.
    pub statuses: BTreeMap<String, NodeResourcePolicyStatus>,
    /// Rollout marks to write (policies in `Apply` mode; [`rollout::decide_rollouts`]).
    pub marks: Vec<rollout::Mark>,
    /// Per policy: when to reconcile it again even if nothing changes (the earliest
    /// progress deadline of its nodes in progress).
    pub wake_at: BTreeMap<String, k8s_openapi::jiff::Timestamp>,
}

#[derive(Default)]
struct Tally {
    matched: i32,
    governed: i32,
    applied: i32,
    invalid: i32,
    overridden: i32,
    tied: bool,
    winners_over_me: Vec<String>,
    invalid_nodes: Vec<(String, String, String)>,
    problems: Vec<NodeProblem>,
}

fn push_problem(t: &mut Tally, node: &str, reason: &str, message: String) {
    // Nodes are visited in name order, so the first MAX_PROBLEM_NODES are the right ones.
    if t.problems.len() < MAX_PROBLEM_NODES {
        t.problems.push(NodeProblem {
            node: node.to_string(),
            reason: reason.to_string(),
            message,
        });
    }
}

fn named(list: &[String]) -> String {
    let mut s = list
        .iter()
        .take(MAX_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if list.len() > MAX_NAMED {
        s.push_str(&format!(" and {} more", list.len() - MAX_NAMED));
    }
    s
}

/// Decides every policy status from every node's state. `existing` are the current NodeTopologies (any
/// order); `now` stamps conditions that flip.
pub fn decide<P, N, T>(policies: &[P], nodes: &[N], existing: &[T], now: &Time) -> Decision
where
    P: Borrow<NodeResourcePolicy>,
    N: Borrow<Node>,
    T: Borrow<NodeTopology>,
{
    let compiled = compile(policies);
    let by_name: BTreeMap<&str, &NodeTopology> = existing
        .iter()
        .map(|nt| nt.borrow())
        .filter_map(|nt| nt.metadata.name.as_deref().map(|n| (n, nt)))
        .collect();
    let mut sorted: Vec<&Node> = nodes.iter().map(|n| n.borrow()).collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));

    let mut tallies: Vec<Tally> = compiled.iter().map(|_| Tally::default()).collect();
    // Every node's desired spec, for the rollout (which nodes still run an older one).
    let mut desired = Vec::with_capacity(sorted.len());
    let empty = BTreeMap::new();
    for node in sorted {
        let name = node.metadata.name.clone().unwrap_or_default();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        let sel = select(&compiled, labels);
        let spec = render_spec(sel.winner.map(|i| &compiled[i]));
        for &i in &sel.invalid {
            tallies[i].matched += 1;
        }
        if let Some(w) = sel.winner {
            let t = &mut tallies[w];
            t.matched += 1;
            t.governed += 1;
            match node_state(by_name.get(name.as_str()).copied(), &spec) {
                NodeState::Applied => t.applied += 1,
                NodeState::Pending(why) => push_problem(t, &name, "Pending", why),
                NodeState::Invalid { reason, message } => {
                    t.invalid += 1;
                    t.invalid_nodes
                        .push((name.clone(), reason.clone(), message.clone()));
                    push_problem(t, &name, &reason, message);
                }
            }
            let winner_name = compiled[w].name.to_string();
            let winner_priority = compiled[w].priority;
            for &l in &sel.losers {
                let t = &mut tallies[l];
                t.matched += 1;
                t.overridden += 1;
                t.tied |= compiled[l].priority == winner_priority;
                if !t.winners_over_me.contains(&winner_name) {
                    t.winners_over_me.push(winner_name.clone());
                }
                push_problem(
                    t,
                    &name,
                    "Overridden",
                    format!("governed by policy {winner_name} (priority {winner_priority})"),
                );
            }
        }
        desired.push(DesiredNode {
            node: name,
            node_uid: node.metadata.uid.clone().unwrap_or_default(),
            spec,
        });
    }

    let mut statuses = compiled
        .iter()
        .zip(tallies)
        .map(|(p, t)| (p.name.to_string(), roll_up(p, t, now)))
        .collect();
    let rollouts = rollout::decide_rollouts(&compiled, &desired, &by_name, &mut statuses, now);
    Decision {
        statuses,
        marks: rollouts.marks,
        wake_at: rollouts.wake_at,
    }
}

/// The policy's `Conflict` condition: some matched nodes are governed by another policy.
fn conflict_condition(t: &Tally) -> ConditionSpec {
    if t.overridden > 0 {
        let why = if t.tied {
            reason::TIED_PRIORITY
        } else {
            reason::OVERRIDDEN
        };
        let how = if t.tied {
            "a policy of equal priority and an earlier name (or higher priority)"
        } else {
            "a policy of higher priority"
        };
        ConditionSpec::new(
            conditions::CONFLICT,
            true,
            why,
            format!(
                "{} matched node(s) are governed by {how}: {}",
                t.overridden,
                named(&t.winners_over_me)
            ),
        )
    } else {
        ConditionSpec::new(conditions::CONFLICT, false, reason::NO_CONFLICT, "")
    }
}

fn roll_up(p: &CompiledPolicy<'_>, t: Tally, now: &Time) -> NodeResourcePolicyStatus {
    let generation = p.policy.metadata.generation;
    let mut conds = p
        .policy
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let pending = t.governed - t.applied - t.invalid;
    let (ready, invalid) = if !p.errors.is_empty() {
        let msg = validation::join(&p.errors);
        (
            ConditionSpec::new(
                conditions::READY,
                false,
                reason::INVALID_SPEC,
                "the spec is invalid; no node uses this policy",
            ),
            ConditionSpec::new(conditions::INVALID, true, reason::INVALID_SPEC, msg),
        )
    } else if t.invalid > 0 {
        let list: Vec<String> = t
            .invalid_nodes
            .iter()
            .map(|(n, r, m)| format!("{n} ({r}: {m})"))
            .collect();
        (
            ConditionSpec::new(
                conditions::READY,
                false,
                reason::INVALID_ON_NODES,
                format!(
                    "{} of {} governed nodes cannot apply this configuration",
                    t.invalid, t.governed
                ),
            ),
            ConditionSpec::new(
                conditions::INVALID,
                true,
                reason::INVALID_ON_NODES,
                format!(
                    "the configuration cannot apply on {} node(s): {}",
                    t.invalid,
                    named(&list)
                ),
            ),
        )
    } else {
        let ready = if t.governed == 0 {
            ConditionSpec::new(
                conditions::READY,
                true,
                reason::NO_GOVERNED_NODES,
                "no node is governed by this policy",
            )
        } else if pending > 0 {
            ConditionSpec::new(
                conditions::READY,
                false,
                reason::PROGRESSING,
                format!("{} of {} governed nodes applied", t.applied, t.governed),
            )
        } else {
            ConditionSpec::new(
                conditions::READY,
                true,
                reason::APPLIED,
                format!("all {} governed nodes applied", t.governed),
            )
        };
        (
            ready,
            ConditionSpec::new(conditions::INVALID, false, reason::VALID, ""),
        )
    };
    let conflict = conflict_condition(&t);
    for c in [&ready, &conflict, &invalid] {
        conditions::upsert(&mut conds, c, generation, now);
    }
    NodeResourcePolicyStatus {
        observed_generation: generation,
        conditions: conds,
        matched_nodes: t.matched,
        governed_nodes: t.governed,
        applied_nodes: t.applied,
        invalid_nodes: t.invalid,
        overridden_nodes: t.overridden,
        problem_nodes: t.problems,
        // Filled by `rollout::decide_rollouts` from the agents' Applied conditions.
        updated_nodes: 0,
        pending_nodes: 0,
        failed_nodes: 0,
    }
}

/// An event to publish on a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEvent {
    /// PascalCase reason.
    pub reason: String,
    /// Note.
    pub note: String,
    /// Warning (true) or Normal.
    pub warning: bool,
}

/// Events for a status change: a Warning when Conflict or Invalid becomes true (or changes
/// reason while true), a Normal event when Ready becomes true because every governed node
/// applied the policy (not for "no governed nodes"). Nothing while nothing flips, so
/// a steady state publishes nothing.
pub fn events_for(
    old: Option<&NodeResourcePolicyStatus>,
    new: &NodeResourcePolicyStatus,
) -> Vec<PolicyEvent> {
    let empty = Vec::new();
    let old_conds = old.map(|s| &s.conditions).unwrap_or(&empty);
    let mut out = Vec::new();
    for type_ in [conditions::INVALID, conditions::CONFLICT, conditions::READY] {
        let Some(n) = conditions::find(&new.conditions, type_) else {
            continue;
        };
        let o = conditions::find(old_conds, type_);
        let changed = o.is_none_or(|o| o.status != n.status || o.reason != n.reason);
        let worth_telling = type_ != conditions::READY || n.reason == reason::APPLIED;
        if changed && n.status == conditions::TRUE && worth_telling {
            out.push(PolicyEvent {
                reason: n.reason.clone(),
                note: n.message.clone(),
                warning: type_ != conditions::READY,
            });
        }
    }
    out
}

/// Whether two statuses differ in anything but condition timestamps (which `upsert` keeps
/// stable anyway): `false` means the status write is skipped.
pub fn status_changed(
    old: Option<&NodeResourcePolicyStatus>,
    new: &NodeResourcePolicyStatus,
) -> bool {
    old != Some(new)
}

pub mod rollout;

#[cfg(test)]
mod tests;
