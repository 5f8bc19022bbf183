//! Planning again after the stop (issue 26, point 3).
//!
//! The plan is made from the kubelet's files while it runs; between that read and the stop
//! the kubelet may checkpoint an assignment (a pod admitted meanwhile). So the executor
//! reads the files again once the kubelet is stopped and plans again: the state it writes
//! is the one planned from the file as the stopped kubelet left it (an assignment made in
//! between is kept), and the backup is taken after the stop. When the new plan is of
//! another class than the first (it now needs an eviction or a drain, a restart-only change
//! now needs a state rewrite, or there is nothing left to do), the apply stops: the kubelet
//! is started on its unchanged files and the report says why.

use nodetopo_engine::change::{ChangeClass, ChangePlan};

use crate::actuation::KubeletService;

/// What an apply or a revert is about to do, planned from the files as they are.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The change.
    pub plan: ChangePlan,
    /// The state file to write (RewriteState), rendered in the file's own format.
    pub new_state: Option<String>,
    /// The drop-in to write; `None`: remove it (a revert).
    pub dropin: Option<String>,
}

/// Whether the kubelet is stopped before the files change (the state is rewritten) rather
/// than restarted after.
pub(crate) fn stops_first(t: &Target) -> bool {
    t.new_state.is_some() || t.plan.class == ChangeClass::RewriteState
}

/// Ok when `after` (planned after the stop) may be carried out in place of `before`: the
/// same class. Otherwise the reason, naming both classes and the new plan's first step.
pub(crate) fn compare(before: &Target, after: &Target) -> Result<(), String> {
    if before.plan.class == after.plan.class
        && before.new_state.is_some() == after.new_state.is_some()
    {
        return Ok(());
    }
    let first = match after.plan.first_reason() {
        "" => String::new(),
        reason => format!(" ({reason})"),
    };
    Err(format!(
        "the plan changed after the kubelet's files were read again: it was {:?} and is now {:?}{first}, so nothing was changed",
        before.plan.class, after.plan.class
    ))
}

/// Ends an apply that changed no file: starts the kubelet again when it was stopped and
/// disarms the guard (left armed when the start failed); `why` with what was done.
pub(crate) fn unchanged(svc: &mut dyn KubeletService, stopped: bool, why: String) -> String {
    let mut msg = why;
    if stopped {
        match svc.start() {
            Ok(()) => msg.push_str("; the kubelet was started again on its unchanged files"),
            Err(x) => {
                // The guard stays armed: it starts the kubelet when its time comes.
                msg.push_str(&format!(
                    "; starting the kubelet again on its unchanged files failed: {x}"
                ));
                return msg;
            }
        }
    }
    if let Err(x) = svc.disarm_guard() {
        msg.push_str(&format!(" (disarming the guard failed: {x})"));
    }
    msg
}
