//! Plan: the change from the kubelet's effective configuration and state to the desired
//! owned fields ([`target_of_apply`], [`plan_from_state`]), what a dry run would do
//! ([`dry_run_actions`]), and the same plan made again after the stop ([`replan`]).

use nodetopo_engine::change::{plan_change, ChangeInput, ChangePlan, KubeletCpuState, OwnedConfig};
use nodetopo_kubelet::cpu_checkpoint::{self as checkpoint, CheckpointFormat};
use nodetopo_kubelet::{cmdline as kubelet_cmdline, config as kubelet};

use super::read::read_state;
use super::{backup_of, ApplyInput, KubeletFiles};

pub(crate) mod replan;

/// The desired owned fields as the drop-in writes them: the reserved set explicit.
pub(super) fn resolved_desired(
    topology: &nodetopo_engine::CpuTopology,
    desired: &OwnedConfig,
) -> anyhow::Result<OwnedConfig> {
    kubelet::dropin_fields(topology, desired)
}

/// The plan of an apply from the files as they are now: the change to `desired` (resolved),
/// the state to write (in the file's own format) and the drop-in.
pub(super) fn target_of_apply(
    input: &ApplyInput<'_>,
    flags: &kubelet_cmdline::ConfigFlags,
    desired: &OwnedConfig,
) -> anyhow::Result<replan::Target> {
    let files = input.files;
    // The kubelet's effective configuration (files, drop-ins, then its command line's
    // flags): where the plan starts.
    let read = kubelet::read_config_with_flags(&files.config, Some(&files.config_dir), flags)?;
    kubelet::check_gates(&read.feature_gates, &flags.feature_gates, input.desired)?;
    // A flag that overrides what the drop-in sets: refused before anything is written.
    kubelet::check_flags(flags, desired)?;
    let (plan, new_state) = plan_from_state(
        files,
        input.topology,
        &read.owned,
        input.pods,
        input.desired,
    )?;
    let below = kubelet::read_below_dropin(&files.config, &files.config_dir)?;
    let dropin = kubelet::render_dropin(desired, &below)?;
    Ok(replan::Target {
        plan,
        new_state,
        dropin: Some(dropin),
    })
}

/// The change from `current` to `desired` on the kubelet's state file as it is now, and
/// the new state rendered in the file's own format (v4 when there is no file). Shared by
/// apply and revert.
pub(super) fn plan_from_state(
    files: &KubeletFiles,
    topology: &nodetopo_engine::CpuTopology,
    current: &OwnedConfig,
    pods: &[nodetopo_engine::Pod],
    desired: &OwnedConfig,
) -> anyhow::Result<(ChangePlan, Option<String>)> {
    let read = read_state(&files.state)?;
    let format = read.as_ref().map_or(CheckpointFormat::V4, |r| r.1);
    let state: Option<KubeletCpuState> = read.map(|r| r.0);
    let plan = plan_change(ChangeInput {
        topology,
        current,
        state: state.as_ref(),
        pods,
        desired,
    })?;
    let new_state = plan
        .new_state
        .as_ref()
        .map(|s| checkpoint::render(s, format));
    Ok((plan, new_state))
}

/// What a dry run would do for `target`.
pub(super) fn dry_run_actions(files: &KubeletFiles, target: &replan::Target) -> Vec<String> {
    let mut actions = Vec::new();
    let stops = replan::stops_first(target);
    if stops {
        actions.push("stop the kubelet".to_string());
        actions.push(
            "read the kubelet's files again and re-plan (refuse if the plan changed class)".into(),
        );
    }
    if target.new_state.is_some() {
        actions.push(format!(
            "back up {} to {}",
            files.state.display(),
            backup_of(&files.state).display()
        ));
        actions.push(format!("rewrite {}", files.state.display()));
    }
    actions.push(match target.dropin {
        Some(_) => format!("write {} (mode 0644)", files.dropin().display()),
        None => format!("remove {}", files.dropin().display()),
    });
    actions.push(if stops {
        "start the kubelet".into()
    } else {
        "restart the kubelet".into()
    });
    actions
}
