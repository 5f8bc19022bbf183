//! The executor: [`apply`] runs the phases in order (recover, check the command line,
//! plan, then [`carry_out`]: guard, stop, re-plan, stage, write, restart, verify, commit;
//! roll back on failure).

use nodetopo_engine::change::{ChangeClass, OwnedConfig};
use nodetopo_kubelet::cmdline as kubelet_cmdline;

use super::plan::replan;
use super::plan::{dry_run_actions, resolved_desired, target_of_apply};

use super::recover::rollback;
use super::recover::{recover, roll_back_and_start, Recovery};
use super::report::{report, ApplyReport};
use super::stage;
use super::verify::verify;
use super::{guard, restart, AllowedWrites, KubeletFiles, KubeletService, Step};

/// Everything an apply needs.
pub struct ApplyInput<'a> {
    /// The machine.
    pub topology: &'a nodetopo_engine::CpuTopology,
    /// Where the kubelet's files are.
    pub files: &'a KubeletFiles,
    /// Pods on the node.
    pub pods: &'a [nodetopo_engine::Pod],
    /// The owned fields wanted.
    pub desired: &'a OwnedConfig,
    /// Record instead of act.
    pub dry_run: bool,
    /// Check the running kubelet's command line first (`None`: not checked).
    pub process: Option<&'a kubelet_cmdline::ProcessCheck>,
}

/// Plans and carries out the change. First (after finishing or undoing an interrupted
/// apply) the running kubelet's command line is checked where `input.process` asks: a
/// kubelet that would not read nodetopo's files stops the apply with an error.
pub fn apply(input: &ApplyInput<'_>, svc: &mut dyn KubeletService) -> anyhow::Result<ApplyReport> {
    let files = input.files;
    rollback::check_layout(files)?;
    let recovery = if input.dry_run {
        Recovery::Nothing
    } else {
        recover(files, svc)?
    };
    let checked = match input.process {
        Some(p) => Some((kubelet_cmdline::check(p)?, p)),
        None => None,
    };
    let flags = checked.as_ref().map(|(c, _)| c.flags()).unwrap_or_default();
    let mut report = plan_and_carry_out(input, recovery, &flags, svc)?;
    if let Some((c, p)) = checked {
        let line = c.describe(p);
        // Said in the message too (it becomes the Applied condition's), so that a node
        // whose kubelet could not be checked shows it in `kubectl describe`.
        if c == kubelet_cmdline::Checked::NoKubelet {
            report.message = format!("{}; {line}", report.message);
        }
        report.kubelet_command_line = Some(line);
    }
    Ok(report)
}

pub(super) fn plan_and_carry_out(
    input: &ApplyInput<'_>,
    recovery: Recovery,
    flags: &kubelet_cmdline::ConfigFlags,
    svc: &mut dyn KubeletService,
) -> anyhow::Result<ApplyReport> {
    let files = input.files;
    let desired = resolved_desired(input.topology, input.desired)?;
    let target = target_of_apply(input, flags, &desired)?;
    let plan = target.plan.clone();
    let first = plan.first_reason().to_string();
    if let Some((applied, reason)) = not_carried_out(plan.class) {
        return Ok(report(applied, reason, first, recovery, plan));
    }
    if input.dry_run {
        let mut r = report(false, "DryRun", first, recovery, plan);
        r.actions = dry_run_actions(files, &target);
        return Ok(r);
    }
    let reason = if target.new_state.is_some() {
        "StateRewritten"
    } else {
        "RestartOnly"
    };
    let mut again = || target_of_apply(input, flags, &desired);
    let check = |svc: &mut dyn KubeletService| verify(files, input.topology, &desired, flags, svc);
    match carry_out(files, &target, &mut again, &check, svc) {
        Ok(()) => Ok(report(true, reason, first, recovery, plan)),
        Err(why) => Ok(report(false, "Failed", why, recovery, plan)),
    }
}

/// The report (applied, reason) of a plan the executor does not carry out: nothing to do,
/// or pods must go first (evictions happen in the cluster agent, never here). Pure.
fn not_carried_out(class: ChangeClass) -> Option<(bool, &'static str)> {
    match class {
        ChangeClass::NoChange => Some((true, "NoChange")),
        ChangeClass::EvictFirst => Some((false, "WaitingForEviction")),
        ChangeClass::Drain => Some((false, "DrainRequired")),
        ChangeClass::RestartOnly | ChangeClass::RewriteState => None,
    }
}

/// Arms the guard, stops (when the state is rewritten), re-plans, backs up, writes,
/// (re)starts, verifies (`check`), commits; on failure rolls back and starts again.
/// `planned` is the plan made before; `replan` makes it again from the files as they are
/// after the stop, and a plan of another class stops the apply with the kubelet started on
/// its unchanged files.
pub(super) fn carry_out(
    files: &KubeletFiles,
    planned: &replan::Target,
    replan: &mut dyn FnMut() -> anyhow::Result<replan::Target>,
    check: &dyn Fn(&mut dyn KubeletService) -> Result<(), String>,
    svc: &mut dyn KubeletService,
) -> Result<(), String> {
    let w = AllowedWrites::of(files);
    // 0. The guard, before anything changes: from here the kubelet comes back whatever
    // happens to the agent.
    let guarded = arm(svc)?;
    // 1. Stop (a state rewrite) and plan again from the files as they are now.
    let stops = replan::stops_first(planned);
    let target = stop_and_replan(planned, stops, replan, svc)?;
    // 2. Backups, durable, taken now (after the stop), before anything changes.
    let staged = stage::back_up(&w, files, &target, stops, svc)?;
    // 3.-4. The journal (from here a crash rolls back), then the new files; 5.-6. start
    // and verify. A failure rolls back and starts the kubelet on the old files.
    let written = stage::write_new(&w, files, &target, &staged, svc)
        .and_then(|()| restart::start_new(stops, svc))
        .and_then(|()| {
            check(svc).map_err(|why| format!("verification failed: {why}"))?;
            svc.reached(Step::Verified);
            Ok(())
        });
    if let Err(why) = written {
        return Err(roll_back_and_start(&w, files, &staged.journal, svc, why));
    }
    // 7. Commit: remove the journal, unless the guard claimed it first.
    commit(files, guarded, svc)
}

/// Arms the guard; `true` when there is one. A failure changes nothing.
fn arm(svc: &mut dyn KubeletService) -> Result<bool, String> {
    let guarded = svc.arm_guard().map_err(|x| {
        format!(
            "arming the guard failed, so nothing was changed (the kubelet was not stopped): {x}"
        )
    })?;
    svc.reached(Step::Armed);
    Ok(guarded)
}

/// Stops the kubelet when `stops` (a running kubelet rewrites its checkpoint from memory),
/// then reads its files again and re-plans: the kubelet may have checkpointed an assignment
/// since the plan. A plan of another class, or any failure, starts the kubelet unchanged.
fn stop_and_replan(
    planned: &replan::Target,
    stops: bool,
    replan: &mut dyn FnMut() -> anyhow::Result<replan::Target>,
    svc: &mut dyn KubeletService,
) -> Result<replan::Target, String> {
    if stops {
        if let Err(x) = svc.stop() {
            return Err(replan::unchanged(
                svc,
                true,
                format!("stopping the kubelet failed: {x}"),
            ));
        }
        svc.reached(Step::Stopped);
    }
    let target = match replan() {
        Ok(t) => t,
        Err(x) => {
            return Err(replan::unchanged(
                svc,
                stops,
                format!("reading the kubelet's files again before the change: {x:#}"),
            ))
        }
    };
    if let Err(why) = replan::compare(planned, &target) {
        return Err(replan::unchanged(svc, stops, why));
    }
    svc.reached(Step::Replanned);
    Ok(target)
}

/// Removes the journal (the apply is committed) and disarms the guard; when the guard
/// claimed the journal first, the apply was taken over (and undone) by it.
fn commit(files: &KubeletFiles, guarded: bool, svc: &mut dyn KubeletService) -> Result<(), String> {
    match guard::take_journal(files) {
        Ok(true) => {
            if let Err(x) = svc.disarm_guard() {
                // Not fatal: when it fires it finds no journal and starts a running kubelet.
                eprintln!("nodetopo-agent: applied, but disarming the guard failed: {x}");
            }
            Ok(())
        }
        Ok(false) if guarded => Err(format!(
            "the guard ({}) took the apply over before the agent confirmed it: it restored the previous files and started the kubelet",
            guard::GUARD_UNIT
        )),
        Ok(false) => Err("the journal disappeared before the agent confirmed the apply".into()),
        Err(x) => Err(format!(
            "removing the journal {}: {x}",
            files.journal().display()
        )),
    }
}

#[cfg(test)]
mod tests;
