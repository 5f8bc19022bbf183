//! `apply`: make the kubelet run a policy's CPU/topology-manager settings (local executor).
//!
//! The plan comes from `nodetopo_engine::change::plan_change` (the same as `diff`). This
//! module carries out the plans that need no pod to move: RestartOnly and RewriteState.
//! EvictFirst and Drain are reported (`WaitingForEviction`, `DrainRequired`) and nothing is
//! touched: evictions go through the Eviction API in the cluster agent, never here.
//!
//! Files written: the drop-in `<config dir>/90-nodetopo.conf` (a full KubeletConfiguration
//! holding only the owned fields, mode 0644) and, for RewriteState, the CPU manager
//! checkpoint, in the format it was in, with the kubelet's checksums. Every write is atomic
//! (temp file in the same directory, fsync, rename, fsync of the directory), and every write
//! goes through [`AllowedWrites`], which refuses any path but the drop-in, the state file,
//! their backups and the journal.
//!
//! Crash safety (the agent can be killed at any instant): before anything is changed the
//! current files are copied to `<name>.nodetopo-backup` beside them, then a journal
//! (`<state dir>/nodetopo-apply.journal`) records which files existed. Only then are the new
//! files renamed in. The journal moves to `written` once both are in place and is removed
//! when the kubelet is verified. [`recover`] (run first by every `apply`) rolls a journal in
//! `applying` back from the backups, so after any kill the pair (drop-in, state) is either
//! all old or all new, and a backup is never removed while a journal needs it.
//!
//! Order: the guard is armed first ([`guard`]: a transient systemd unit that starts the
//! kubelet, restoring the backups when the apply was not verified, if the agent dies). For
//! RewriteState the kubelet is stopped before the state file is rewritten (a running kubelet
//! rewrites its checkpoint from memory at every change), its files are read again and the
//! change planned again ([`replan`]: a plan of another class stops the apply, the kubelet
//! started unchanged), the backups are taken, and it is started after; RestartOnly
//! re-plans, writes the drop-in and restarts. `revert` ([`revert`]) goes the same way back to
//! the node's own configuration. Then verify: the service is healthy, the
//! kubelet's effective owned fields (config file + every drop-in) are the desired ones (a
//! later drop-in may override ours), and the state file on disk is one the kubelet accepts
//! under the new configuration. On failure: restore the backups, restart again, report
//! `Failed` with the reason.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use nodetopo_engine::change::{
    check_config, kubelet_start, plan_change, ChangeClass, ChangeInput, ChangePlan,
    KubeletCpuState, OwnedConfig,
};
use nodetopo_kubelet::cpu_checkpoint::{self as checkpoint, CheckpointFormat};
use nodetopo_kubelet::{cmdline as kubelet_cmdline, config as kubelet};
use serde::{Deserialize, Serialize};

/// The suffix of backups.
pub const BACKUP_SUFFIX: &str = ".nodetopo-backup";
/// The journal's file name (beside the state file).
pub const JOURNAL_NAME: &str = "nodetopo-apply.journal";

pub mod guard;
pub mod node_ready;
mod replan;
pub mod revert;
mod rollback;
mod systemd;
mod writes;

pub use rollback::{MAX_DROPIN_BYTES, MAX_JOURNAL_BYTES, MAX_STATE_BYTES};
pub use systemd::{SystemdBus, SYSTEM_BUS};
pub use writes::AllowedWrites;

/// How the kubelet service is driven.
pub trait KubeletService {
    /// Stops the kubelet.
    fn stop(&mut self) -> Result<(), String>;
    /// Starts the kubelet.
    fn start(&mut self) -> Result<(), String>;
    /// Restarts the kubelet (started afterwards whether it ran before or not); by default a
    /// stop then a start.
    fn restart(&mut self) -> Result<(), String> {
        self.stop()?;
        self.start()
    }
    /// Whether it runs healthily after a start (the verify step of an apply).
    fn healthy(&mut self) -> Result<(), String>;
    /// Whether it runs healthily again after a rollback restarted it on the old files; by
    /// default the same checks as [`KubeletService::healthy`]. Checks that judge the new
    /// configuration (agreement with the spec) leave themselves out.
    fn recovered(&mut self) -> Result<(), String> {
        self.healthy()
    }
    /// Arms the guard ([`guard`]) that starts the kubelet (restoring the backups when the
    /// apply was not verified) if the agent does not finish. `Ok(false)`: this restarter has
    /// none (the `command` restarter: docs/actuation.md says what stands in for it).
    fn arm_guard(&mut self) -> Result<bool, String> {
        Ok(false)
    }
    /// Disarms the guard (after the journal is gone); nothing when there is none.
    fn disarm_guard(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// The executor reached `step` (the tests die here to check what the guard leaves).
    fn reached(&mut self, _step: Step) {}
}

/// The steps of an apply between the guard's arming and the commit, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The guard is armed; nothing else done.
    Armed,
    /// The kubelet is stopped (RewriteState, revert).
    Stopped,
    /// Re-planned after the stop; the plan is the same class.
    Replanned,
    /// Backups written.
    BackedUp,
    /// Journal `applying` written.
    Journaled,
    /// The new state written.
    StateWritten,
    /// The drop-in written (or removed, for a revert).
    DropinWritten,
    /// Journal `written`.
    Written,
    /// The kubelet (re)started on the new files.
    Started,
    /// Verified; the journal is about to be removed.
    Verified,
}

/// Every step, in order.
#[cfg(test)]
pub const STEPS: [Step; 10] = [
    Step::Armed,
    Step::Stopped,
    Step::Replanned,
    Step::BackedUp,
    Step::Journaled,
    Step::StateWritten,
    Step::DropinWritten,
    Step::Written,
    Step::Started,
    Step::Verified,
];

/// When the kubelet's last start or restart returned, on the monotonic clock and on the
/// wall clock (Node heartbeats are wall-clock times).
#[derive(Debug, Clone, Copy)]
pub struct Started {
    /// Monotonic.
    pub at: std::time::Instant,
    /// Wall clock.
    pub wall: k8s_openapi::jiff::Timestamp,
}

impl Started {
    /// Now.
    pub fn now() -> Self {
        Started {
            at: std::time::Instant::now(),
            wall: k8s_openapi::jiff::Timestamp::now(),
        }
    }
}

/// A verification made once the kubelet service reports healthy, judged from the end of the
/// last start or restart ([`AfterStart`] wraps a service with it).
pub trait StartCheck {
    /// After [`KubeletService::healthy`].
    fn after_healthy(&mut self, started: Started) -> Result<(), String>;
    /// After [`KubeletService::recovered`] (a rollback restarted the kubelet on its old files).
    fn after_recovered(&mut self, started: Started) -> Result<(), String>;
}

/// A [`KubeletService`] whose start and restart are timed and whose health checks are
/// followed by `check`: the executor's verify step decorated (Node Ready, KubeletAgreement).
pub struct AfterStart<C> {
    inner: Box<dyn KubeletService + Send>,
    pub(crate) check: C,
    started: Started,
}

impl<C> AfterStart<C> {
    /// `inner`, then `check`.
    pub fn wrap(inner: Box<dyn KubeletService + Send>, check: C) -> Self {
        AfterStart {
            inner,
            check,
            started: Started::now(),
        }
    }
}

impl<C: StartCheck> KubeletService for AfterStart<C> {
    fn stop(&mut self) -> Result<(), String> {
        self.inner.stop()
    }
    fn start(&mut self) -> Result<(), String> {
        let r = self.inner.start();
        self.started = Started::now();
        r
    }
    fn restart(&mut self) -> Result<(), String> {
        let r = self.inner.restart();
        self.started = Started::now();
        r
    }
    fn healthy(&mut self) -> Result<(), String> {
        self.inner.healthy()?;
        self.check.after_healthy(self.started)
    }
    fn recovered(&mut self) -> Result<(), String> {
        self.inner.recovered()?;
        self.check.after_recovered(self.started)
    }
    fn arm_guard(&mut self) -> Result<bool, String> {
        self.inner.arm_guard()
    }
    fn disarm_guard(&mut self) -> Result<(), String> {
        self.inner.disarm_guard()
    }
    fn reached(&mut self, step: Step) {
        self.inner.reached(step)
    }
}

fn run_argv(argv: &[String]) -> Result<(), String> {
    let (cmd, args) = argv.split_first().ok_or("empty command")?;
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} exited with {}: {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Commands given on the command line (any init system; the tests' fake hooks).
pub struct Commands {
    /// Stop command.
    pub stop: Vec<String>,
    /// Start command.
    pub start: Vec<String>,
    /// Health command (empty: always healthy).
    pub health: Vec<String>,
}

impl KubeletService for Commands {
    fn stop(&mut self) -> Result<(), String> {
        run_argv(&self.stop)
    }
    fn start(&mut self) -> Result<(), String> {
        run_argv(&self.start)
    }
    fn healthy(&mut self) -> Result<(), String> {
        if self.health.is_empty() {
            Ok(())
        } else {
            run_argv(&self.health)
        }
    }
}

/// Records what it would do; changes nothing.
#[derive(Default)]
pub struct DryRun {
    /// The actions, in order.
    pub actions: Vec<String>,
}

impl KubeletService for DryRun {
    fn stop(&mut self) -> Result<(), String> {
        self.actions.push("stop the kubelet".into());
        Ok(())
    }
    fn start(&mut self) -> Result<(), String> {
        self.actions.push("start the kubelet".into());
        Ok(())
    }
    fn restart(&mut self) -> Result<(), String> {
        self.actions.push("restart the kubelet".into());
        Ok(())
    }
    fn healthy(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// Where the kubelet's files are.
#[derive(Debug, Clone)]
pub struct KubeletFiles {
    /// `--config`.
    pub config: PathBuf,
    /// `--config-dir`.
    pub config_dir: PathBuf,
    /// `cpu_manager_state`.
    pub state: PathBuf,
}

impl KubeletFiles {
    /// nodetopo's drop-in.
    pub fn dropin(&self) -> PathBuf {
        self.config_dir.join(kubelet::DROPIN_NAME)
    }
    /// The apply journal (beside the state file).
    pub fn journal(&self) -> PathBuf {
        self.state
            .parent()
            .unwrap_or(Path::new("."))
            .join(JOURNAL_NAME)
    }
}

/// How the running kubelet's command line is checked before an apply
/// ([`kubelet_cmdline`]): it must read the config file and drop-in directory nodetopo
/// writes, and its `--feature-gates` count with those of its files. With
/// `--read-kubelet-config` the same process's configuration flags also override its files
/// in the topology manager configuration the NodeResourceTopology publishes.
#[derive(Debug, Clone, clap::Args)]
pub struct ProcessArgs {
    /// The host's /proc, where the kubelet process is looked for (in the chart, the host's
    /// /proc mounted read-only at /host/proc).
    #[arg(long, default_value = "/proc")]
    pub host_proc: PathBuf,
    /// The kubelet's `--config` as the host names it (default: --kubelet-config).
    #[arg(long)]
    pub kubelet_host_config: Option<PathBuf>,
    /// The kubelet's `--config-dir` as the host names it (default: --kubelet-config-dir).
    #[arg(long)]
    pub kubelet_host_config_dir: Option<PathBuf>,
    /// Do not look at the kubelet's command line.
    #[arg(long)]
    pub no_kubelet_process_check: bool,
}

impl ProcessArgs {
    /// The check for `files`, or `None` when turned off.
    pub fn check(&self, files: &KubeletFiles) -> Option<kubelet_cmdline::ProcessCheck> {
        (!self.no_kubelet_process_check).then(|| kubelet_cmdline::ProcessCheck {
            proc_root: self.host_proc.clone(),
            host_config: self
                .kubelet_host_config
                .clone()
                .unwrap_or_else(|| files.config.clone()),
            host_config_dir: self
                .kubelet_host_config_dir
                .clone()
                .unwrap_or_else(|| files.config_dir.clone()),
        })
    }
}

/// The backup path of a file.
pub fn backup_of(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(BACKUP_SUFFIX);
    PathBuf::from(s)
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct Journal {
    /// `applying` (new files may be partly in place: roll back) or `written` (both in place).
    phase: String,
    dropin_existed: bool,
    state_existed: bool,
    /// Whether this apply rewrites the state file.
    writes_state: bool,
}

/// The permission bits of `path`, or `default` when it does not exist or cannot be read.
fn mode_of(path: &Path, default: u32) -> u32 {
    std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(default)
}

/// The mode the kubelet creates its state file with (its FileStore writes a temp file made by
/// os.CreateTemp, mode 0600, and renames it).
const KUBELET_STATE_MODE: u32 = 0o600;

fn read_journal(files: &KubeletFiles) -> anyhow::Result<Option<Journal>> {
    let Some(bytes) = rollback::read_opt(&files.journal(), MAX_JOURNAL_BYTES, "the journal")?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .with_context(|| format!("the journal {} is damaged", files.journal().display()))
}

fn write_journal(w: &AllowedWrites, files: &KubeletFiles, j: &Journal) -> anyhow::Result<()> {
    let bytes = serde_json::to_vec(j)?;
    w.write(&files.journal(), &bytes)
        .with_context(|| format!("writing {}", files.journal().display()))
}

/// Rolls back the apply `j` describes: the journal goes back to `applying` first (a crash
/// during the rollback then rolls back again, never forward over a mixed pair), then every
/// file is restored, each step attempted whatever failed before it.
fn undo(w: &AllowedWrites, files: &KubeletFiles, j: &Journal) -> Result<(), String> {
    let back = Journal {
        phase: "applying".into(),
        ..j.clone()
    };
    let marked = write_journal(w, files, &back);
    rollback::roll_back(w, files, j.dropin_existed, j.state_existed, j.writes_state).map_err(
        |why| match marked {
            Ok(()) => why,
            Err(e) => format!("{why}; and the journal could not be set back to applying: {e:#}"),
        },
    )
}

/// What [`recover`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Recovery {
    /// No interrupted apply.
    Nothing,
    /// An apply was interrupted before both files were in place: rolled back.
    RolledBack,
    /// An apply was interrupted after both files were in place: kept, kubelet started.
    RolledForward,
}

/// Finishes or undoes an apply interrupted by a crash; always leaves the kubelet started
/// when there was one to finish. A rollback attempts every step; when one fails the kubelet
/// is still started, the journal is kept (the next apply tries again) and the error names
/// what failed.
pub fn recover(files: &KubeletFiles, svc: &mut dyn KubeletService) -> anyhow::Result<Recovery> {
    rollback::check_layout(files)?;
    let w = AllowedWrites::of(files);
    w.remove_stale_temps();
    // A journal the guard claimed and could not finish restoring: roll back from it.
    let claimed = guard::reclaim(files)?;
    let Some(mut j) = read_journal(files)? else {
        return Ok(Recovery::Nothing);
    };
    if claimed {
        j.phase = "applying".into();
    }
    let (r, undone) = if j.phase == "written" {
        (Recovery::RolledForward, Ok(()))
    } else {
        let undone =
            rollback::roll_back(&w, files, j.dropin_existed, j.state_existed, j.writes_state);
        (Recovery::RolledBack, undone)
    };
    // The kubelet may have been stopped by the interrupted apply (rolled back: start it on
    // the old files), or still run the old configuration with the new files in place
    // (rolled forward: restart it, which also starts a stopped one).
    let started = if r == Recovery::RolledForward {
        svc.restart()
            .map_err(|e| format!("restarting the kubelet after recovery: {e}"))
    } else {
        svc.start()
            .map_err(|e| format!("starting the kubelet after recovery: {e}"))
    };
    if let Err(why) = undone {
        bail!(
            "rolling back the interrupted apply failed: {why}; the journal {} is kept, so the next apply (or apply --recover-only) tries the rollback again; {}",
            files.journal().display(),
            match started {
                Ok(()) => "the kubelet was started on the files as they are".to_string(),
                Err(e) => e,
            }
        );
    }
    started.map_err(|e| anyhow::anyhow!(e))?;
    w.remove(&files.journal())?;
    Ok(r)
}

/// `apply --recover-only`, the node-side watchdog of the `command` restarter (which has no
/// guard): [`recover`], then, when there was no interrupted apply to finish and the kubelet
/// is not healthy, a start. An agent killed after it stopped the kubelet and before it wrote
/// its journal (a RewriteState stops first) leaves no journal and a stopped kubelet, which
/// recovery alone would leave stopped. `true` when it started the kubelet. Without a health
/// command the `command` restarter counts the kubelet as healthy, so nothing is started.
pub fn recover_and_start(
    files: &KubeletFiles,
    svc: &mut dyn KubeletService,
) -> anyhow::Result<(Recovery, bool)> {
    let r = recover(files, svc)?;
    if r != Recovery::Nothing || svc.healthy().is_ok() {
        return Ok((r, false));
    }
    svc.start().map_err(|e| {
        anyhow::anyhow!(
            "no interrupted apply, and the kubelet was not healthy; starting it failed: {e}"
        )
    })?;
    Ok((r, true))
}

/// The outcome of an apply, with the Applied condition's reason.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    /// Applied condition status: `True` or `False`.
    pub applied: bool,
    /// `NoChange`, `RestartOnly`, `StateRewritten`, `WaitingForEviction`, `DrainRequired`,
    /// `Failed`.
    pub reason: String,
    /// For people.
    pub message: String,
    /// What recovery did first.
    pub recovery: Recovery,
    /// The plan.
    pub plan: ChangePlan,
    /// Dry-run: what would be done.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
    /// What the check of the kubelet's command line found (absent when it was off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_command_line: Option<String>,
}

/// The desired owned fields as the drop-in writes them: the reserved set explicit.
fn resolved_desired(
    topology: &nodetopo_engine::CpuTopology,
    desired: &OwnedConfig,
) -> anyhow::Result<OwnedConfig> {
    kubelet::dropin_fields(topology, desired)
}

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

fn report(
    applied: bool,
    reason: &str,
    message: String,
    recovery: Recovery,
    plan: ChangePlan,
) -> ApplyReport {
    ApplyReport {
        applied,
        reason: reason.into(),
        message,
        recovery,
        plan,
        actions: vec![],
        kubelet_command_line: None,
    }
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

fn plan_and_carry_out(
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

/// The plan of an apply from the files as they are now: the change to `desired` (resolved),
/// the state to write (in the file's own format) and the drop-in.
fn target_of_apply(
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
fn plan_from_state(
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

/// Prints an apply's or a revert's report as JSON; exit 0 when applied (or nothing to
/// do), 1 otherwise.
fn print_report(report: &ApplyReport) -> anyhow::Result<ExitCode> {
    println!("{}", serde_json::to_string_pretty(report)?);
    Ok(if report.applied {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What a dry run would do for `target`.
fn dry_run_actions(files: &KubeletFiles, target: &replan::Target) -> Vec<String> {
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

/// Arms the guard, stops (when the state is rewritten), re-plans, backs up, writes,
/// (re)starts, verifies (`check`), commits; on failure rolls back and starts again.
/// `planned` is the plan made before; `replan` makes it again from the files as they are
/// after the stop, and a plan of another class stops the apply with the kubelet started on
/// its unchanged files.
fn carry_out(
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

/// The kubelet is healthy, runs the desired owned fields (its effective configuration:
/// files, drop-ins and command-line flags), and its state file is accepted.
fn verify(
    files: &KubeletFiles,
    topology: &nodetopo_engine::CpuTopology,
    desired: &OwnedConfig,
    flags: &kubelet_cmdline::ConfigFlags,
    svc: &mut dyn KubeletService,
) -> Result<(), String> {
    svc.healthy()
        .map_err(|e| format!("the restarted kubelet failed its checks: {e}"))?;
    let effective = kubelet::read_config_with_flags(&files.config, Some(&files.config_dir), flags)
        .map_err(|e| format!("{e:#}"))?
        .owned;
    let mut eff = effective;
    if eff.reserved_system_cpus.is_empty() {
        eff = resolved_desired(topology, &eff).map_err(|e| format!("{e:#}"))?;
    }
    if &eff != desired {
        return Err(format!(
            "the kubelet's effective configuration differs from the desired one (a later drop-in in {} or a command-line flag overrides {}): {}",
            files.config_dir.display(),
            kubelet::DROPIN_NAME,
            nodetopo_engine::change::config_diff(desired, &eff).join("; ")
        ));
    }
    let state = read_state(&files.state).map_err(|e| format!("{e:#}"))?;
    let cfg = check_config(topology, desired, "desired").map_err(|e| e.to_string())?;
    kubelet_start(&cfg, state.as_ref().map(|r| &r.0))
        .map_err(|e| format!("the state file is not one the kubelet accepts: {e}"))?;
    Ok(())
}

/// The CPU manager checkpoint as the planner takes it, with the format to write it back in
/// (`Ok(None)`: no file); a file the kubelet would refuse, or with pod-level entries, is an
/// error naming it.
fn read_state(path: &Path) -> anyhow::Result<Option<(KubeletCpuState, CheckpointFormat)>> {
    let Some(c) = checkpoint::read(path)? else {
        return Ok(None);
    };
    let state = c
        .engine_state()
        .map_err(|e| anyhow::anyhow!("kubelet CPU manager state {}: {e}", path.display()))?;
    Ok(Some((state, c.format)))
}

/// Arguments of `apply`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The directory that plays /sys.
    #[arg(long, default_value = "/sys", conflicts_with = "preset")]
    pub sysfs_root: PathBuf,
    /// A built-in machine instead of this one (tests).
    #[arg(long)]
    pub preset: Option<String>,
    /// The kubelet's configuration file.
    #[arg(long, default_value = "/var/lib/kubelet/config.yaml")]
    pub kubelet_config: PathBuf,
    /// The kubelet's drop-in directory.
    #[arg(long, default_value = kubelet::DEFAULT_CONFIG_DIR)]
    pub kubelet_config_dir: PathBuf,
    /// The CPU manager checkpoint.
    #[arg(long, default_value = "/var/lib/kubelet/cpu_manager_state")]
    pub state: PathBuf,
    /// Pods on the node (YAML; repeatable).
    #[arg(long)]
    pub pods: Vec<PathBuf>,
    /// The NodeResourcePolicy (YAML).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// How to restart the kubelet.
    #[arg(long, value_enum, default_value_t = RestartMode::Systemd)]
    pub restart: RestartMode,
    /// systemd unit.
    #[arg(long, default_value = "kubelet.service")]
    pub unit: String,
    /// `--restart systemd`: the D-Bus address of systemd (the system bus; or systemd's
    /// private socket `unix:path=/run/systemd/private` with --systemd-direct).
    #[arg(long, default_value = SYSTEM_BUS)]
    pub systemd_address: String,
    /// `--restart systemd`: the address is a direct (peer-to-peer) connection to systemd,
    /// such as its private socket: no bus, no Hello.
    #[arg(long)]
    pub systemd_direct: bool,
    /// `--restart systemd`: how long one systemd job (stop, start, restart) may take.
    #[arg(long, default_value_t = systemd::DEFAULT_TIMEOUT.as_secs())]
    pub systemd_timeout_seconds: u64,
    /// `--restart command`: stop command (whitespace-separated argv).
    #[arg(long)]
    pub stop_command: Option<String>,
    /// `--restart command`: start command.
    #[arg(long)]
    pub start_command: Option<String>,
    /// `--restart command`: health command (optional).
    #[arg(long)]
    pub health_command: Option<String>,
    /// Only finish or undo an interrupted apply, then exit.
    #[arg(long)]
    pub recover_only: bool,
    /// Verify step: also wait until this Node is Ready again with a heartbeat newer than the
    /// restart (API server from KUBECONFIG or the in-cluster service account; needs `get` on
    /// Nodes); without it only the service's health, the files and the state are checked.
    #[arg(long)]
    pub node: Option<String>,
    /// `--node`: how long to wait for the Node after the restart (else roll back).
    #[arg(long, default_value_t = 120, requires = "node")]
    pub verify_seconds: u64,
    /// The check of the kubelet's command line.
    #[command(flatten)]
    pub process: ProcessArgs,
    /// The guard (`--restart systemd`).
    #[command(flatten)]
    pub guard: guard::GuardArgs,
}

/// How `apply` drives the kubelet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RestartMode {
    /// systemd over D-Bus: StopUnit/StartUnit/RestartUnit on the unit, each job waited for
    /// (JobRemoved, result `done`); healthy when the unit's ActiveState is `active`.
    Systemd,
    /// The given commands.
    Command,
    /// Record what would be done; change nothing (`none` is the same).
    #[value(alias = "none")]
    DryRun,
}

fn argv(s: &Option<String>, flag: &str) -> anyhow::Result<Vec<String>> {
    match s {
        Some(s) => Ok(s.split_whitespace().map(String::from).collect()),
        None => bail!("--restart command needs {flag}"),
    }
}

/// The kubelet service of `args`, with the Node Ready wait of `--node` (and the runtime it
/// needs, to be kept until the apply is done).
fn service_of(
    args: &Args,
    files: &KubeletFiles,
) -> anyhow::Result<(
    Box<dyn KubeletService + Send>,
    Option<tokio::runtime::Runtime>,
)> {
    let mut svc: Box<dyn KubeletService + Send> = match args.restart {
        RestartMode::Systemd => {
            let timeout = std::time::Duration::from_secs(args.systemd_timeout_seconds);
            let verify = std::time::Duration::from_secs(if args.node.is_some() {
                args.verify_seconds.max(1)
            } else {
                0
            });
            let guard = args.guard.plan(files, &args.process, timeout, verify)?;
            Box::new(
                SystemdBus::new(
                    &args.unit,
                    &args.systemd_address,
                    args.systemd_direct,
                    timeout,
                )?
                .with_guard(guard),
            )
        }
        RestartMode::Command => Box::new(Commands {
            stop: argv(&args.stop_command, "--stop-command")?,
            start: argv(&args.start_command, "--start-command")?,
            health: args
                .health_command
                .as_deref()
                .map(|s| s.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
        }),
        RestartMode::DryRun => Box::new(DryRun::default()),
    };
    // --node: the executor's verify step also waits for the Node (as in cluster mode); the
    // runtime lives until the apply is done.
    let runtime = match &args.node {
        Some(node) if args.restart != RestartMode::DryRun => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .context("starting the runtime for --node")?;
            let client = rt
                .block_on(kube::Client::try_default())
                .context("--node: connecting to the API server (KUBECONFIG or in-cluster)")?;
            svc = Box::new(
                node_ready::NodeReadyCheck::new(
                    svc,
                    rt.handle().clone(),
                    kube::Api::all(client),
                    node,
                    std::time::Duration::from_secs(args.verify_seconds.max(1)),
                )
                .with_flag("--verify-seconds"),
            );
            Some(rt)
        }
        _ => None,
    };
    Ok((svc, runtime))
}

fn files_of(args: &Args) -> KubeletFiles {
    KubeletFiles {
        config: args.kubelet_config.clone(),
        config_dir: args.kubelet_config_dir.clone(),
        state: args.state.clone(),
    }
}

/// Runs `revert` (the same flags as `apply`, without `--policy`); prints the report as
/// JSON. Exit 0 when reverted (or nothing to revert), 1 otherwise.
pub fn run_revert(args: Args) -> anyhow::Result<ExitCode> {
    if args.policy.is_some() {
        bail!("revert takes no --policy: it goes back to the node's own configuration");
    }
    if args.recover_only {
        bail!("revert takes no --recover-only (use apply --recover-only)");
    }
    let files = files_of(&args);
    let (mut svc, runtime) = service_of(&args, &files)?;
    let topology = nodetopo_kubelet::machine(args.preset.as_deref(), Some(&args.sysfs_root))?;
    let pods = nodetopo_kubelet::pods::read_pod_files(&args.pods)?;
    let report = revert::revert(
        &revert::RevertInput {
            topology: &topology,
            files: &files,
            pods: &pods,
            dry_run: args.restart == RestartMode::DryRun,
            process: args.process.check(&files).as_ref(),
        },
        svc.as_mut(),
    )?;
    drop(runtime);
    print_report(&report)
}

/// Runs `apply`; prints the report as JSON. Exit 0 when applied (or nothing to do), 1 when
/// not applied (waiting, drain required, failed, dry run).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let files = files_of(&args);
    let (mut svc, runtime) = service_of(&args, &files)?;
    if args.recover_only {
        let (recovery, started) = recover_and_start(&files, svc.as_mut())?;
        println!(
            "{}",
            serde_json::json!({"recovery": recovery, "kubeletStarted": started})
        );
        return Ok(ExitCode::SUCCESS);
    }
    let policy = args
        .policy
        .as_ref()
        .context("--policy is required (unless --recover-only)")?;
    let topology = nodetopo_kubelet::machine(args.preset.as_deref(), Some(&args.sysfs_root))?;
    let pods = nodetopo_kubelet::pods::read_pod_files(&args.pods)?;
    let text = nodetopo_engine::files::read_text_bounded(policy, kubelet::MAX_CONFIG_BYTES)
        .map_err(|e| anyhow::anyhow!("--policy {}: the file {e}", policy.display()))?;
    let desired = kubelet::desired_from_policy(&text, policy)?;
    let report = apply(
        &ApplyInput {
            topology: &topology,
            files: &files,
            pods: &pods,
            desired: &desired,
            dry_run: args.restart == RestartMode::DryRun,
            process: args.process.check(&files).as_ref(),
        },
        svc.as_mut(),
    )?;
    drop(runtime);
    print_report(&report)
}
