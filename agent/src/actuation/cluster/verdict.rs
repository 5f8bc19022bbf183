//! Cluster mode's pure decisions: the next step for the NodeTopology as it is
//! ([`next_step`]), the `Applied` verdict of an executor report ([`outcome_of`]) with its
//! `status.change` ([`change_status`]), and what earlier attempts of a generation did
//! ([`Earlier`]).

use nodetopo_crds::conditions::{self, reason, ConditionSpec};
use nodetopo_crds::rollout::EvictionMode;
use nodetopo_crds::{ChangeStatus, ChangeStepStatus, NodeTopologySpec};
use nodetopo_engine::change::{ChangeClass, ChangePlan, OwnedConfig};

use crate::actuation::{backup_of, ApplyReport, KubeletFiles, Recovery};

/// An actuation verdict for one generation (made by the actuation shell, published by
/// the core): the `Applied` condition and `status.change`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The NodeTopology generation judged.
    pub generation: i64,
    /// The `Applied` condition.
    pub condition: ConditionSpec,
    /// What was planned and done (absent when nothing was planned).
    pub change: Option<ChangeStatus>,
}

/// What to do about the NodeTopology as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing (already judged, or nothing to report).
    Idle,
    /// Publish this verdict without touching the node.
    Report(Box<Outcome>),
    /// Plan and apply generation `generation`.
    Apply {
        /// The generation marked.
        generation: i64,
        /// Whether pods may be evicted.
        eviction: EvictionMode,
    },
}

/// Whether a verdict is final for its generation (no retry).
pub fn is_final(reason_: &str, status: bool) -> bool {
    status
        || [
            reason::FAILED,
            reason::DRAIN_REQUIRED,
            reason::EVICTION_NOT_ALLOWED,
            reason::ACTUATION_DISABLED,
            reason::DRY_RUN,
        ]
        .contains(&reason_)
}

/// The last verdict: (generation, reason, status).
pub type Last = (i64, String, bool);

/// Decides the next step from the NodeTopology's generation and annotations and the last
/// verdict published.
pub fn next_step(
    enabled: bool,
    generation: Option<i64>,
    mark: Option<&str>,
    eviction: Option<&str>,
    last: Option<&Last>,
) -> Step {
    let Some(generation) = generation else {
        return Step::Idle;
    };
    let marked = mark.is_some_and(|m| m.trim() == generation.to_string());
    let judged = last.filter(|l| l.0 == generation);
    if judged.is_some_and(|l| is_final(&l.1, l.2)) {
        return Step::Idle;
    }
    if !marked {
        if !enabled || judged.is_some_and(|l| l.1 == reason::OBSERVE_ONLY) {
            return Step::Idle;
        }
        return Step::Report(Box::new(Outcome {
            generation,
            condition: ConditionSpec::new(
                conditions::APPLIED,
                false,
                reason::OBSERVE_ONLY,
                format!("the operator has not asked this node to apply generation {generation} (rollout mode Observe, or its batch has not started)"),
            ),
            change: None,
        }));
    }
    if !enabled {
        return Step::Report(Box::new(Outcome {
            generation,
            condition: ConditionSpec::new(
                conditions::APPLIED,
                false,
                reason::ACTUATION_DISABLED,
                format!("asked to apply generation {generation}, but this agent runs without --actuation (chart value agent.actuation.enabled); nothing was changed"),
            ),
            change: None,
        }));
    }
    let eviction = match eviction.map(str::trim) {
        Some("Evict") => EvictionMode::Evict,
        _ => EvictionMode::Never,
    };
    Step::Apply {
        generation,
        eviction,
    }
}

/// The answer of the Eviction API for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionResult {
    /// `namespace/name`.
    pub pod: String,
    /// `Ok` when the eviction was accepted, else the server's refusal.
    pub result: Result<(), String>,
}

/// The pods a plan needs gone (its EvictFirst steps), as `namespace/name`.
pub fn pods_to_evict(plan: &ChangePlan) -> Vec<String> {
    let mut out: Vec<String> = plan
        .steps
        .iter()
        .filter(|s| s.class == ChangeClass::EvictFirst)
        .flat_map(|s| s.pods.iter().cloned())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `status.change` of a plan, with what was done and the backups found.
pub fn change_status(
    generation: i64,
    plan: &ChangePlan,
    done: Vec<String>,
    backups: Vec<String>,
) -> ChangeStatus {
    ChangeStatus {
        generation: Some(generation),
        class: plan.class.to_string(),
        config_changes: plan.config_changes.clone(),
        steps: plan
            .steps
            .iter()
            .map(|s| ChangeStepStatus {
                class: s.class.to_string(),
                reason: s.reason.clone(),
                pods: s.pods.clone(),
            })
            .collect(),
        non_conforming: plan
            .non_conforming
            .iter()
            .map(|n| {
                format!(
                    "{} container {} (CPUs {}): {}",
                    n.pod, n.container, n.cpus, n.why
                )
            })
            .collect(),
        done,
        backups,
    }
}

/// The verdict of an executor report. `evictions` are the Eviction API's answers (only
/// asked for with `Evict`); `backups` the backup files present after the apply.
pub fn outcome_of(
    generation: i64,
    files: &KubeletFiles,
    report: &ApplyReport,
    eviction: EvictionMode,
    evictions: &[EvictionResult],
    backups: Vec<String>,
) -> Outcome {
    let mut done: Vec<String> = recovery_done(&report.recovery).into_iter().collect();
    let (status, why, message) = verdict(files, report, eviction, evictions, &mut done);
    Outcome {
        generation,
        condition: ConditionSpec::new(conditions::APPLIED, status, why, message),
        change: Some(change_status(generation, &report.plan, done, backups)),
    }
}

/// The `Applied` condition's status, reason and message for a report, with what was done
/// added to `done`.
fn verdict(
    files: &KubeletFiles,
    report: &ApplyReport,
    eviction: EvictionMode,
    evictions: &[EvictionResult],
    done: &mut Vec<String>,
) -> (bool, &'static str, String) {
    match report.reason.as_str() {
        "NoChange" => (true, reason::NO_CHANGE, report.message.clone()),
        "RestartOnly" => {
            done.extend(restart_only_done(files));
            (true, reason::RESTART_ONLY, report.message.clone())
        }
        "StateRewritten" => {
            done.extend(state_rewritten_done(files));
            (true, reason::STATE_REWRITTEN, report.message.clone())
        }
        "DrainRequired" => (false, reason::DRAIN_REQUIRED, report.message.clone()),
        "DryRun" => dry_run_verdict(report, done),
        "WaitingForEviction" => eviction_verdict(report, eviction, evictions, done),
        _ => {
            done.push(format!("attempted and rolled back: {}", report.message));
            (false, reason::FAILED, report.message.clone())
        }
    }
}

/// What recovery did before the apply, as a `done` entry.
fn recovery_done(recovery: &Recovery) -> Option<String> {
    match recovery {
        Recovery::Nothing => None,
        Recovery::RolledBack => {
            Some("rolled an interrupted apply back from its backups".to_string())
        }
        Recovery::RolledForward => {
            Some("finished an interrupted apply (its files were in place)".to_string())
        }
    }
}

/// The steps of a verified RestartOnly apply.
fn restart_only_done(files: &KubeletFiles) -> Vec<String> {
    let dropin = files.dropin().display().to_string();
    vec![
        format!("backed up and wrote {dropin} (mode 0644)"),
        "restarted the kubelet".into(),
        VERIFIED.into(),
    ]
}

/// The steps of a verified RewriteState apply.
fn state_rewritten_done(files: &KubeletFiles) -> Vec<String> {
    let dropin = files.dropin().display().to_string();
    let state = files.state.display().to_string();
    vec![
        "stopped the kubelet".into(),
        format!("backed up {state} to {}", backup_of(&files.state).display()),
        format!("rewrote {state} with the kubelet's checksum"),
        format!("wrote {dropin} (mode 0644)"),
        "started the kubelet".into(),
        VERIFIED.into(),
    ]
}

/// A dry run: what it would have done, nothing done.
fn dry_run_verdict(report: &ApplyReport, done: &mut Vec<String>) -> (bool, &'static str, String) {
    done.extend(
        report
            .actions
            .iter()
            .map(|a| format!("dry run, not done: would {a}")),
    );
    (
        false,
        reason::DRY_RUN,
        format!(
            "dry run (--kubelet-restart none): nothing was changed and the kubelet was not restarted; the plan is {}: {}",
            report.plan.class, report.message
        ),
    )
}

/// A plan that needs pods gone: not allowed (`Never`), or waiting with each eviction's
/// answer.
fn eviction_verdict(
    report: &ApplyReport,
    eviction: EvictionMode,
    evictions: &[EvictionResult],
    done: &mut Vec<String>,
) -> (bool, &'static str, String) {
    let pods = pods_to_evict(&report.plan);
    if eviction == EvictionMode::Never {
        return (
            false,
            reason::EVICTION_NOT_ALLOWED,
            format!(
                "the plan needs {} evicted and the policy's rollout.eviction is Never; nothing was changed: {}",
                pods.join(", "),
                report.message
            ),
        );
    }
    let mut answers = Vec::new();
    for e in evictions {
        match &e.result {
            Ok(()) => {
                done.push(format!("eviction of {} {ACCEPTED_EVICTION}", e.pod));
                answers.push(format!("{}: eviction accepted", e.pod));
            }
            Err(why) => {
                done.push(format!("eviction of {} refused: {why}", e.pod));
                answers.push(format!("{}: eviction refused: {why}", e.pod));
            }
        }
    }
    (
        false,
        reason::WAITING_FOR_EVICTION,
        format!(
            "waiting until the kubelet has released the CPUs of {} ({}); {}",
            pods.join(", "),
            answers.join("; "),
            report.message
        ),
    )
}

/// What was done for one generation in earlier attempts (accepted evictions), to carry into
/// the `status.change.done` of its later verdicts. Pure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Earlier {
    generation: Option<i64>,
    done: Vec<String>,
}

impl Earlier {
    /// Records what `o` did and returns it with the earlier steps of its generation first.
    /// A new generation forgets the old one's steps; a step already listed is not repeated
    /// (a terminating pod is asked again on every re-plan until the kubelet lets it go).
    pub fn record(&mut self, mut o: Outcome) -> Outcome {
        if self.generation != Some(o.generation) {
            *self = Earlier {
                generation: Some(o.generation),
                done: Vec::new(),
            };
        }
        let Some(change) = o.change.as_mut() else {
            return o;
        };
        let mut done = self.done.clone();
        for d in &change.done {
            if !done.contains(d) {
                done.push(d.clone());
            }
        }
        if o.condition.reason == reason::WAITING_FOR_EVICTION {
            for d in &change.done {
                if d.ends_with(ACCEPTED_EVICTION) && !self.done.contains(d) {
                    self.done.push(d.clone());
                }
            }
        }
        change.done = done;
        o
    }
}

/// The `done` entry of a verified apply.
const VERIFIED: &str = "verified: kubelet healthy, Node Ready again with a heartbeat after the restart, KubeletAgreement confirmed on a kubelet read after the restart (see the message), effective configuration as desired, state file accepted";

/// How the `done` entry of an accepted eviction ends.
const ACCEPTED_EVICTION: &str = "requested (Eviction API)";

/// The owned kubelet fields a NodeTopology spec asks for (the same reading as `apply
/// --policy`).
pub fn desired_from_spec(spec: &NodeTopologySpec) -> anyhow::Result<OwnedConfig> {
    Ok(OwnedConfig::from_spec(
        &spec.cpu_manager,
        &spec.topology_manager,
    )?)
}

#[cfg(test)]
mod tests;
