//! The guard: what starts the kubelet again when the agent dies between its stop and its
//! start (issue 26, point 2).
//!
//! Before the executor stops the kubelet (or writes anything), the systemd restarter asks
//! systemd for a transient service, [`GUARD_UNIT`] (`StartTransientUnit`), that runs
//! [`SCRIPT`] with `/bin/sh` on the host: it sleeps for the guard's delay, which is longer
//! than anything the agent itself may take (its stop, start, verify and rollback, each
//! bounded); then it claims the apply journal by renaming it to `<journal>.guard` (an
//! atomic rename: of the agent's commit, which removes the journal, and the guard's claim,
//! exactly one succeeds).
//! - No journal to claim: the agent finished (or had changed nothing yet); the guard only
//!   starts the kubelet unit (a no-op when it runs).
//! - Journal claimed: the new pair was not verified. The guard ignores SIGTERM from then on
//!   (so that a later disarm waits for it instead of killing it half-way), stops the kubelet,
//!   puts both files back from their backups as the journal says (the drop-in when the
//!   journal says it existed, else removes it; the state only when the apply rewrites it),
//!   syncs, removes the claim (kept when a restore failed, so that the next `apply` rolls
//!   back again from it) and starts the kubelet.
//!
//! The agent disarms the guard (`StopUnit`) once it has removed the journal itself (after a
//! verified apply, a rollback or a refusal). A guard that fires after that finds no journal
//! and only starts a running kubelet. The guard runs in systemd's context, not in the
//! agent's pod, so it outlives the agent (OOM kill, SIGKILL, a deleted pod).
//!
//! The paths are the host's (the agent's own may be mounts at other places):
//! `--kubelet-host-config-dir` and `--kubelet-host-state` (default: the agent's paths).
//! The journal and the backups are beside those files on the host as in the agent.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::actuation::{KubeletFiles, ProcessArgs};

/// The transient unit's name (one per node: arming replaces a stale one).
pub const GUARD_UNIT: &str = "nodetopo-kubelet-guard.service";

/// The suffix of the journal once the guard has claimed it.
pub const CLAIM_SUFFIX: &str = ".guard";

/// How long systemd waits for a guard that is restoring files before it kills it (the
/// restore takes a second; only a hung `systemctl` lasts this long).
pub const GUARD_STOP_TIMEOUT: Duration = Duration::from_secs(300);

/// The guard's program, run as `/bin/sh -c SCRIPT nodetopo-guard DELAY JOURNAL UNIT DROPIN
/// STATE` (paths as positional parameters: nothing is quoted into the script).
///
/// It reads the journal's JSON by its compact keys, as [`crate::actuation::stage::Journal`] serializes them
/// (`"dropinExisted":true`, `"writesState":true`, `"stateExisted":true`; a test checks the
/// serialization).
pub const SCRIPT: &str = r#"set -u
sleep "$1" || exit 0
journal=$2 unit=$3 dropin=$4 state=$5
claim="$journal.guard"
if ! mv -f -- "$journal" "$claim" 2>/dev/null; then
  exec systemctl start -- "$unit"
fi
trap '' TERM INT HUP
echo "nodetopo guard: the agent did not finish its apply; restoring the kubelet's files from their backups"
systemctl stop -- "$unit"
ok=true
put() {
  if [ "$2" = true ]; then
    cp -p -- "$1.nodetopo-backup" "$1.nodetopo-guard" && mv -f -- "$1.nodetopo-guard" "$1" || ok=false
  else
    rm -f -- "$1" || ok=false
  fi
}
if grep -q '"dropinExisted":true' "$claim"; then put "$dropin" true; else put "$dropin" false; fi
if grep -q '"writesState":true' "$claim"; then
  if grep -q '"stateExisted":true' "$claim"; then put "$state" true; else put "$state" false; fi
fi
sync
if [ "$ok" = true ]; then rm -f -- "$claim"; else echo "nodetopo guard: a restore failed; $claim kept for the next apply"; fi
exec systemctl start -- "$unit"
"#;

/// The journal as the guard renames it when it claims it.
pub fn claim_of(journal: &Path) -> PathBuf {
    let mut s = journal.as_os_str().to_owned();
    s.push(CLAIM_SUFFIX);
    PathBuf::from(s)
}

/// What the guard needs: the host's paths and the delay.
#[derive(Debug, Clone)]
pub struct GuardPlan {
    /// The kubelet's files as the host names them.
    pub host: KubeletFiles,
    /// How long after arming it acts.
    pub delay: Duration,
}

impl GuardPlan {
    /// The guard's command line for the kubelet `unit`: `/bin/sh -c SCRIPT ...`.
    pub fn argv(&self, unit: &str) -> Vec<String> {
        let p = |p: &Path| p.to_string_lossy().into_owned();
        vec![
            "/bin/sh".into(),
            "-c".into(),
            SCRIPT.into(),
            "nodetopo-guard".into(),
            self.delay.as_secs().to_string(),
            p(&self.host.journal()),
            unit.into(),
            p(&self.host.dropin()),
            p(&self.host.state),
        ]
    }
}

/// The guard's flags (`apply` and `run --actuation`).
#[derive(Debug, Clone, clap::Args)]
pub struct GuardArgs {
    /// The kubelet's CPU manager state file as the host names it (the guard runs on the
    /// host; default: the agent's own path). The journal and the backups are beside it.
    #[arg(long)]
    pub kubelet_host_state: Option<PathBuf>,
    /// `systemd` restarter: how long the guard waits before it restarts the kubelet (and
    /// restores the backups when the apply was not verified). Default: four systemd job
    /// timeouts, two verify waits and 60 s (longer than anything the agent itself waits).
    #[arg(long)]
    pub guard_seconds: Option<u64>,
    /// `systemd` restarter: arm no guard (a kubelet stopped by an agent that dies stays
    /// stopped until someone starts it).
    #[arg(long)]
    pub no_guard: bool,
}

impl GuardArgs {
    /// The plan for `files` (the agent's paths), or `None` with `--no-guard`.
    /// `job_timeout` and `verify` give the default delay.
    pub fn plan(
        &self,
        files: &KubeletFiles,
        process: &ProcessArgs,
        job_timeout: Duration,
        verify: Duration,
    ) -> anyhow::Result<Option<GuardPlan>> {
        if self.no_guard {
            return Ok(None);
        }
        let delay = match self.guard_seconds {
            Some(0) => anyhow::bail!("--guard-seconds must be positive (or use --no-guard)"),
            Some(s) => Duration::from_secs(s),
            None => job_timeout * 4 + verify * 2 + Duration::from_secs(60),
        };
        let host = KubeletFiles {
            config: process
                .kubelet_host_config
                .clone()
                .unwrap_or_else(|| files.config.clone()),
            config_dir: process
                .kubelet_host_config_dir
                .clone()
                .unwrap_or_else(|| files.config_dir.clone()),
            state: self
                .kubelet_host_state
                .clone()
                .unwrap_or_else(|| files.state.clone()),
        };
        for (what, p) in [
            ("--kubelet-host-config-dir", &host.config_dir),
            ("--kubelet-host-state", &host.state),
        ] {
            if !p.is_absolute() {
                anyhow::bail!(
                    "{what} {} must be an absolute path (the guard runs on the host)",
                    p.display()
                );
            }
        }
        Ok(Some(GuardPlan { host, delay }))
    }
}

/// The agent's commit: removes the journal, unless the guard claimed it first. `Ok(true)`:
/// removed by us; `Ok(false)`: it was gone (the guard took the apply over).
pub fn take_journal(files: &KubeletFiles) -> std::io::Result<bool> {
    let j = files.journal();
    match std::fs::remove_file(&j) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    }
    if let Some(dir) = j.parent() {
        std::fs::File::open(dir).and_then(|d| d.sync_all())?;
    }
    Ok(true)
}

/// Puts back as the journal a claim the guard left (a restore of its failed, or it was
/// killed half-way): `Ok(true)` when it did, so that recovery rolls back from it.
pub fn reclaim(files: &KubeletFiles) -> anyhow::Result<bool> {
    let j = files.journal();
    let claim = claim_of(&j);
    if std::fs::symlink_metadata(&j).is_ok() || std::fs::symlink_metadata(&claim).is_err() {
        return Ok(false);
    }
    std::fs::rename(&claim, &j).map_err(|e| {
        anyhow::anyhow!(
            "putting back the journal {} that the guard claimed as {}: {e}",
            j.display(),
            claim.display()
        )
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests;
