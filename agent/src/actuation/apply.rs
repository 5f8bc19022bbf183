//! The executor: [`apply`] runs the phases in order (recover, check the command line,
//! plan, then [`carry_out`]: guard, stop, re-plan, stage, write, restart, verify, commit;
//! roll back on failure).

use nodetopo_engine::change::{ChangeClass, OwnedConfig};
use nodetopo_kubelet::cmdline as kubelet_cmdline;

use super::plan::replan;
use super::plan::{dry_run_actions, resolved_desired, target_of_apply};
use super::recover::rollback::{self, MAX_DROPIN_BYTES, MAX_STATE_BYTES};
use super::recover::{recover, undo, Recovery};
use super::report::{report, ApplyReport};
use super::stage::{mode_of, write_journal, Journal, KUBELET_STATE_MODE};
use super::verify::verify;
use super::{backup_of, guard, AllowedWrites, KubeletFiles, KubeletService, Step};

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
    let first = plan
        .steps
        .first()
        .map(|s| s.reason.clone())
        .unwrap_or_default();
    match plan.class {
        ChangeClass::NoChange => return Ok(report(true, "NoChange", first, recovery, plan)),
        ChangeClass::EvictFirst => {
            return Ok(report(false, "WaitingForEviction", first, recovery, plan))
        }
        ChangeClass::Drain => return Ok(report(false, "DrainRequired", first, recovery, plan)),
        ChangeClass::RestartOnly | ChangeClass::RewriteState => {}
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
    let e = |what: &str, err: anyhow::Error| format!("{what}: {err:#}");
    let w = AllowedWrites::of(files);
    let dropin_path = files.dropin();
    // 0. The guard, before anything changes: from here the kubelet comes back whatever
    // happens to the agent.
    let guarded = svc.arm_guard().map_err(|x| {
        format!(
            "arming the guard failed, so nothing was changed (the kubelet was not stopped): {x}"
        )
    })?;
    svc.reached(Step::Armed);
    // 1. Stop the kubelet (a state rewrite: a running kubelet rewrites its checkpoint from
    // memory), then read its files again and re-plan: the kubelet may have checkpointed an
    // assignment since the plan.
    let stops = replan::stops_first(planned);
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
                e("reading the kubelet's files again before the change", x),
            ))
        }
    };
    if let Err(why) = replan::compare(planned, &target) {
        return Err(replan::unchanged(svc, stops, why));
    }
    svc.reached(Step::Replanned);
    let new_state = target.new_state.as_deref();
    // 2. Backups, durable, taken now (after the stop), before anything changes.
    let old_dropin = match rollback::read_opt(&dropin_path, MAX_DROPIN_BYTES, "the drop-in") {
        Ok(b) => b,
        Err(x) => return Err(replan::unchanged(svc, stops, e("reading the drop-in", x))),
    };
    let old_state = match rollback::read_opt(&files.state, MAX_STATE_BYTES, "the state file") {
        Ok(b) => b,
        Err(x) => return Err(replan::unchanged(svc, stops, e("reading the state", x))),
    };
    if let Some(b) = &old_dropin {
        if let Err(x) = w.write_mode(&backup_of(&dropin_path), b, mode_of(&dropin_path, 0o644)) {
            return Err(replan::unchanged(
                svc,
                stops,
                format!("backing up the drop-in: {x}"),
            ));
        }
    }
    // The state file and its backup keep the state file's mode (the kubelet's 0600).
    let state_mode = mode_of(&files.state, KUBELET_STATE_MODE);
    if new_state.is_some() {
        if let Some(b) = &old_state {
            if let Err(x) = w.write_mode(&backup_of(&files.state), b, state_mode) {
                return Err(replan::unchanged(
                    svc,
                    stops,
                    format!("backing up the state: {x}"),
                ));
            }
        }
    }
    svc.reached(Step::BackedUp);
    // 3. The journal: from here a crash rolls back.
    let mut journal = Journal {
        phase: "applying".into(),
        dropin_existed: old_dropin.is_some(),
        state_existed: old_state.is_some(),
        writes_state: new_state.is_some(),
    };
    let undo_journal = journal.clone();
    let rollback = |svc: &mut dyn KubeletService, why: String| -> String {
        let mut msg = why;
        let _ = svc.stop();
        if let Err(x) = undo(&w, files, &undo_journal) {
            // The pair may be mixed: the journal stays (in `applying`), so the next apply
            // or `apply --recover-only` rolls back again; the kubelet is started anyway (it
            // was stopped), but nothing is claimed about its health.
            msg.push_str(&format!(
                "; the rollback failed: {x}; the journal {} is kept, so the next apply (or apply --recover-only) tries the rollback again",
                files.journal().display()
            ));
            match svc.start() {
                Ok(()) => msg.push_str("; the kubelet was started on the files as they are"),
                Err(x) => msg.push_str(&format!("; starting the kubelet failed too: {x}")),
            }
            return msg;
        }
        msg.push_str("; the previous configuration and state were restored");
        match svc.start() {
            Ok(()) => {
                msg.push_str(" and the kubelet restarted");
                match svc.recovered() {
                    Ok(()) => msg.push_str(" (healthy again)"),
                    Err(x) => msg.push_str(&format!(
                        ", but it is not healthy again after the rollback: {x}"
                    )),
                }
            }
            Err(x) => msg.push_str(&format!(", but restarting the kubelet failed: {x}")),
        }
        if w.remove(&files.journal()).is_err() {
            msg.push_str(" (the journal could not be removed; the next apply rolls back again)");
        } else if let Err(x) = svc.disarm_guard() {
            msg.push_str(&format!(" (disarming the guard failed: {x})"));
        }
        msg
    };
    if let Err(x) = write_journal(&w, files, &journal) {
        return Err(rollback(svc, format!("writing the journal: {x:#}")));
    }
    svc.reached(Step::Journaled);
    // 4. The new files.
    if let Some(s) = new_state {
        if let Err(x) = w.write_mode(&files.state, s.as_bytes(), state_mode) {
            return Err(rollback(svc, format!("writing the state failed: {x}")));
        }
    }
    svc.reached(Step::StateWritten);
    let put = match &target.dropin {
        Some(d) => w
            .write(&dropin_path, d.as_bytes())
            .map_err(anyhow::Error::from),
        None => w.remove(&dropin_path),
    };
    if let Err(x) = put {
        return Err(rollback(svc, format!("writing the drop-in failed: {x:#}")));
    }
    svc.reached(Step::DropinWritten);
    journal.phase = "written".into();
    if let Err(x) = write_journal(&w, files, &journal) {
        return Err(rollback(svc, format!("{x:#}")));
    }
    svc.reached(Step::Written);
    // 5. Start (after a stop) or restart (RestartOnly: the kubelet reads its configuration
    // only when it starts, so the drop-in can go in while it runs).
    let started = if stops {
        svc.start()
            .map_err(|x| format!("starting the kubelet failed: {x}"))
    } else {
        svc.restart()
            .map_err(|x| format!("restarting the kubelet failed: {x}"))
    };
    if let Err(x) = started {
        return Err(rollback(svc, x));
    }
    svc.reached(Step::Started);
    // 6. Verify.
    if let Err(why) = check(svc) {
        return Err(rollback(svc, format!("verification failed: {why}")));
    }
    svc.reached(Step::Verified);
    // 7. Commit: remove the journal, unless the guard claimed it first.
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
