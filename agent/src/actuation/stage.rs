//! Stage: the apply journal ([`Journal`], `<state dir>/nodetopo-apply.journal`), the file
//! modes kept, and every write confined to the kubelet's files ([`writes::AllowedWrites`]).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::recover::rollback::{self, MAX_JOURNAL_BYTES};
use super::{AllowedWrites, KubeletFiles};

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
