//! Recover and roll back: an apply interrupted by a crash is finished or undone from its
//! journal ([`recover`], [`recover_and_start`]); a failed one is undone from its backups
//! ([`undo`], [`rollback`]).

use anyhow::bail;
use serde::Serialize;

use super::stage::{read_journal, write_journal, Journal};
use super::{guard, AllowedWrites, KubeletFiles, KubeletService};

pub(crate) mod rollback;

/// Rolls back the apply `j` describes: the journal goes back to `applying` first (a crash
/// during the rollback then rolls back again, never forward over a mixed pair), then every
/// file is restored, each step attempted whatever failed before it.
pub(super) fn undo(w: &AllowedWrites, files: &KubeletFiles, j: &Journal) -> Result<(), String> {
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

/// Rolls a failed apply back (`why` says why) and starts the kubelet on the old files: the
/// message says what the rollback did. A rollback that fails keeps the journal (the next
/// apply, or `apply --recover-only`, rolls back again) and claims nothing about the
/// kubelet's health.
pub(super) fn roll_back_and_start(
    w: &AllowedWrites,
    files: &KubeletFiles,
    journal: &Journal,
    svc: &mut dyn KubeletService,
    why: String,
) -> String {
    let mut msg = why;
    let _ = svc.stop();
    if let Err(x) = undo(w, files, journal) {
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
