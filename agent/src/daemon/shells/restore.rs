//! The agent's checkpoint at start, for both shells (local and cluster mode): load it,
//! validate it against this machine, and move a rejected file aside. Kept apart from
//! `checkpoint.rs` (the file format), which `validate.rs` reads, so that no two files import
//! each other.

use std::path::Path;

use nodetopo_engine::CpuTopology;

use crate::daemon::checkpoint;
use crate::daemon::inputs::validate;
use crate::daemon::shells::cycle::unix_now;

/// Loads the checkpoint at start and validates it against this machine; a rejected file
/// (unreadable, corrupt, or breaking an invariant) is moved aside, logged with its name, and
/// reported. Leftover temp files of earlier runs killed mid-write are removed first.
pub fn load_checkpoint(
    path: &Path,
    topology: &CpuTopology,
) -> (Option<checkpoint::CheckpointData>, Option<(String, String)>) {
    for stale in nodetopo_kubelet::atomic::remove_stale_temps(path) {
        tracing::info!(
            "removed a temp file left by an interrupted write: {}",
            stale.display()
        );
    }
    let problem = match checkpoint::load(path) {
        Ok(None) => return (None, None),
        Ok(Some(data)) => match validate::checkpoint(path, &data, topology) {
            Ok(_) => return (Some(data), None),
            Err(v) => (v.invariant.checkpoint_reason(), v.to_string()),
        },
        Err(e) => (e.reason(), e.to_string()),
    };
    let (reason, msg) = problem;
    let aside = match checkpoint::quarantine(path, unix_now()) {
        Ok(p) => format!("kept as {}", p.display()),
        Err(q) => format!("could not be moved aside: {q}"),
    };
    // The event of local mode is a warning on stderr (cluster mode: a k8s Event).
    tracing::warn!(reason, file = %path.display(), "{msg}; {aside}");
    (None, Some((reason.to_string(), format!("{msg} ({aside})"))))
}
