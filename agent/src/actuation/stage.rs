//! Stage: the apply journal ([`Journal`], `<state dir>/nodetopo-apply.journal`), the file
//! modes kept, and every write confined to the kubelet's files ([`writes::AllowedWrites`]).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::plan::replan::{self, Target};
use super::recover::rollback::{self, MAX_DROPIN_BYTES, MAX_JOURNAL_BYTES, MAX_STATE_BYTES};
use super::{backup_of, AllowedWrites, KubeletFiles, KubeletService, Step};

pub(crate) mod writes;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(super) struct Journal {
    /// `applying` (new files may be partly in place: roll back) or `written` (both in place).
    pub(super) phase: String,
    pub(super) dropin_existed: bool,
    pub(super) state_existed: bool,
    /// Whether this apply rewrites the state file.
    pub(super) writes_state: bool,
}

/// The permission bits of `path`, or `default` when it does not exist or cannot be read.
pub(super) fn mode_of(path: &Path, default: u32) -> u32 {
    std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(default)
}

/// The mode the kubelet creates its state file with (its FileStore writes a temp file made by
/// os.CreateTemp, mode 0600, and renames it).
pub(super) const KUBELET_STATE_MODE: u32 = 0o600;

pub(super) fn read_journal(files: &KubeletFiles) -> anyhow::Result<Option<Journal>> {
    let Some(bytes) = rollback::read_opt(&files.journal(), MAX_JOURNAL_BYTES, "the journal")?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .with_context(|| format!("the journal {} is damaged", files.journal().display()))
}

pub(super) fn write_journal(
    w: &AllowedWrites,
    files: &KubeletFiles,
    j: &Journal,
) -> anyhow::Result<()> {
    let bytes = serde_json::to_vec(j)?;
    w.write(&files.journal(), &bytes)
        .with_context(|| format!("writing {}", files.journal().display()))
}

/// What [`back_up`] found and kept: the journal to write (`applying`) and the mode the state
/// file keeps.
pub(super) struct Staged {
    /// The journal of this apply, in `applying`.
    pub(super) journal: Journal,
    /// The state file's mode (the kubelet's 0600 when there is none).
    pub(super) state_mode: u32,
}

/// Backs up the drop-in and (when it is rewritten) the state file beside them, durable,
/// keeping their modes; a failure starts the kubelet on its unchanged files.
pub(super) fn back_up(
    w: &AllowedWrites,
    files: &KubeletFiles,
    target: &Target,
    stops: bool,
    svc: &mut dyn KubeletService,
) -> Result<Staged, String> {
    let e = |what: &str, err: anyhow::Error| format!("{what}: {err:#}");
    let dropin_path = files.dropin();
    let new_state = target.new_state.as_deref();
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
    let journal = Journal {
        phase: "applying".into(),
        dropin_existed: old_dropin.is_some(),
        state_existed: old_state.is_some(),
        writes_state: new_state.is_some(),
    };
    Ok(Staged {
        journal,
        state_mode,
    })
}

/// Writes the journal (`applying`: from here a crash rolls back), the new state, the
/// drop-in (or removes it: a revert), then the journal `written`. The error is the reason
/// to roll back.
pub(super) fn write_new(
    w: &AllowedWrites,
    files: &KubeletFiles,
    target: &Target,
    staged: &Staged,
    svc: &mut dyn KubeletService,
) -> Result<(), String> {
    let dropin_path = files.dropin();
    let mut journal = staged.journal.clone();
    write_journal(w, files, &journal).map_err(|x| format!("writing the journal: {x:#}"))?;
    svc.reached(Step::Journaled);
    if let Some(s) = target.new_state.as_deref() {
        w.write_mode(&files.state, s.as_bytes(), staged.state_mode)
            .map_err(|x| format!("writing the state failed: {x}"))?;
    }
    svc.reached(Step::StateWritten);
    let put = match &target.dropin {
        Some(d) => w
            .write(&dropin_path, d.as_bytes())
            .map_err(anyhow::Error::from),
        None => w.remove(&dropin_path),
    };
    put.map_err(|x| format!("writing the drop-in failed: {x:#}"))?;
    svc.reached(Step::DropinWritten);
    journal.phase = "written".into();
    write_journal(w, files, &journal).map_err(|x| format!("{x:#}"))?;
    svc.reached(Step::Written);
    Ok(())
}
