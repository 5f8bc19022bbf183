//! Restart: how the kubelet service is driven ([`KubeletService`]: systemd over D-Bus with
//! its guard ([`systemd`], [`guard`]), the given commands ([`Commands`]), or a dry run
//! ([`DryRun`])) and the steps an apply passes ([`Step`]).

pub mod guard;
pub(crate) mod systemd;

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

pub(super) fn run_argv(argv: &[String]) -> Result<(), String> {
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

/// Starts the kubelet on the new files after a stop, or restarts it (RestartOnly: the
/// kubelet reads its configuration only when it starts, so the drop-in can go in while it
/// runs). The error is the reason to roll back.
pub(super) fn start_new(stops: bool, svc: &mut dyn KubeletService) -> Result<(), String> {
    if stops {
        svc.start()
            .map_err(|x| format!("starting the kubelet failed: {x}"))?;
    } else {
        svc.restart()
            .map_err(|x| format!("restarting the kubelet failed: {x}"))?;
    }
    svc.reached(Step::Started);
    Ok(())
}
