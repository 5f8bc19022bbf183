//! Verify: after the (re)start the kubelet is healthy, runs the desired owned fields and
//! accepts the state file ([`verify`]); in cluster mode the service is decorated
//! ([`AfterStart`]) with the wait for the Node to be Ready again ([`node_ready`]) and for
//! `KubeletAgreement` on a kubelet read after the restart ([`agreement`]).

use nodetopo_engine::change::{check_config, kubelet_start, OwnedConfig};
use nodetopo_kubelet::{cmdline as kubelet_cmdline, config as kubelet};

use super::plan::resolved_desired;
use super::read::read_state;
use super::{KubeletFiles, KubeletService, Step};

pub mod agreement;
pub mod node_ready;

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

/// The kubelet is healthy, runs the desired owned fields (its effective configuration:
/// files, drop-ins and command-line flags), and its state file is accepted.
pub(super) fn verify(
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
