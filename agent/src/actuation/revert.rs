//! `nodetopo-agent revert`: takes the node back to its own configuration (issue 26, point 5).
//!
//! The node's own configuration is the config file and every drop-in but nodetopo's
//! `90-nodetopo.conf` ([`kubelet::read_without_dropin`]). A revert plans the change from
//! what the kubelet runs now (with nodetopo's drop-in) to that configuration, exactly as an
//! apply plans one, and carries it out with the same executor: the guard, the stop, the
//! re-plan, the backups, the journal, the rewrite of the CPU manager state when the old
//! policy needs it (for example the reserved CPUs going back into the shared pool when
//! `strict-cpu-reservation` is dropped), the removal of the drop-in in place of its write, the
//! start, the verification (the effective configuration is the node's own, the state is one
//! the kubelet accepts) and a rollback on failure. A change that needs pods moved
//! (`WaitingForEviction`, `DrainRequired`) is refused and reported like an apply's.
//! Once the kubelet runs its own configuration, the backups are removed too: nothing of
//! nodetopo's stays in the kubelet's directories.

use std::path::Path;

use nodetopo_engine::change::{ChangeClass, OwnedConfig};
use nodetopo_kubelet::cmdline::ConfigFlags;
use nodetopo_kubelet::config as kubelet;

use super::apply::carry_out;
use super::plan::replan::Target;
use super::plan::{dry_run_actions, plan_from_state, resolved_desired};
use super::report::report;
use super::verify::verify;
use super::{
    backup_of, recover, AllowedWrites, ApplyReport, KubeletFiles, KubeletService, Recovery,
};

/// What a revert needs.
pub struct RevertInput<'a> {
    /// The machine.
    pub topology: &'a nodetopo_engine::CpuTopology,
    /// The kubelet's files.
    pub files: &'a KubeletFiles,
    /// Pods on the node.
    pub pods: &'a [nodetopo_engine::Pod],
    /// Record instead of act.
    pub dry_run: bool,
    /// Check the running kubelet's command line first.
    pub process: Option<&'a nodetopo_kubelet::cmdline::ProcessCheck>,
}

/// The plan back to the node's own configuration, from the files as they are now.
fn target_of_revert(
    input: &RevertInput<'_>,
    flags: &ConfigFlags,
) -> anyhow::Result<(Target, OwnedConfig)> {
    let files = input.files;
    // The node's own configuration and the running one are both the kubelet's effective
    // configuration: its command line's flags win over either set of files.
    let own = kubelet::read_without_dropin(&files.config, &files.config_dir, flags)?;
    let desired = resolved_desired(input.topology, &own)?;
    let current =
        kubelet::read_config_with_flags(&files.config, Some(&files.config_dir), flags)?.owned;
    let (plan, new_state) = plan_from_state(files, input.topology, &current, input.pods, &own)?;
    Ok((
        Target {
            plan,
            new_state,
            dropin: None,
        },
        desired,
    ))
}

/// Removes nodetopo's backups (after a revert, nothing of nodetopo's stays).
fn remove_backups(files: &KubeletFiles) -> anyhow::Result<()> {
    let w = AllowedWrites::of(files);
    w.remove(&backup_of(&files.dropin()))?;
    w.remove(&backup_of(&files.state))
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// Reverts; the report's reason is `Reverted`, `NoChange` (nothing of nodetopo's in the
/// drop-in directory and nothing to change), `WaitingForEviction`, `DrainRequired`,
/// `DryRun` or `Failed`.
pub fn revert(
    input: &RevertInput<'_>,
    svc: &mut dyn KubeletService,
) -> anyhow::Result<ApplyReport> {
    let files = input.files;
    let recovery = if input.dry_run {
        Recovery::Nothing
    } else {
        recover(files, svc)?
    };
    let flags = match input.process {
        Some(p) => nodetopo_kubelet::cmdline::check(p)?.flags(),
        None => ConfigFlags::default(),
    };
    let (target, own) = target_of_revert(input, &flags)?;
    let plan = target.plan.clone();
    let first = plan.first_reason().to_string();
    let dropin_there = exists(&files.dropin());
    match plan.class {
        ChangeClass::EvictFirst => {
            return Ok(report(false, "WaitingForEviction", first, recovery, plan))
        }
        ChangeClass::Drain => return Ok(report(false, "DrainRequired", first, recovery, plan)),
        ChangeClass::NoChange if !dropin_there => {
            if !input.dry_run {
                remove_backups(files)?;
            }
            let msg = format!(
                "{} does not exist and the kubelet runs the node's own configuration",
                files.dropin().display()
            );
            return Ok(report(true, "NoChange", msg, recovery, plan));
        }
        _ => {}
    }
    if input.dry_run {
        let mut r = report(false, "DryRun", first, recovery, plan);
        r.actions = dry_run_actions(files, &target);
        return Ok(r);
    }
    let mut again = || target_of_revert(input, &flags).map(|(t, _)| t);
    let check = |svc: &mut dyn KubeletService| verify(files, input.topology, &own, &flags, svc);
    match carry_out(files, &target, &mut again, &check, svc) {
        Ok(()) => Ok(report(
            true,
            "Reverted",
            finish(files, &target),
            recovery,
            plan,
        )),
        Err(why) => Ok(report(false, "Failed", why, recovery, plan)),
    }
}

/// After a verified revert: the backups removed (nothing of nodetopo's stays); the message
/// says what was done.
fn finish(files: &KubeletFiles, target: &Target) -> String {
    let mut msg = format!(
        "{} removed; the kubelet runs the node's own configuration",
        files.dropin().display()
    );
    if target.new_state.is_some() {
        msg.push_str(&format!(
            " and {} was rewritten for it",
            files.state.display()
        ));
    }
    if let Err(x) = remove_backups(files) {
        msg.push_str(&format!(" (removing the backups failed: {x:#})"));
    }
    msg
}
