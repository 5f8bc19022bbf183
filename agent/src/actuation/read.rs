//! Read: the kubelet's CPU manager checkpoint as the planner takes it ([`read_state`]); its
//! configuration is read by nodetopo-kubelet (`config::read_config_with_flags`).

use std::path::Path;

use nodetopo_engine::change::KubeletCpuState;
use nodetopo_kubelet::cpu_checkpoint::{self as checkpoint, CheckpointFormat};

/// The CPU manager checkpoint as the planner takes it, with the format to write it back in
/// (`Ok(None)`: no file); a file the kubelet would refuse, or with pod-level entries, is an
/// error naming it.
pub(super) fn read_state(
    path: &Path,
) -> anyhow::Result<Option<(KubeletCpuState, CheckpointFormat)>> {
    let Some(c) = checkpoint::read(path)? else {
        return Ok(None);
    };
    let state = c
        .engine_state()
        .map_err(|e| anyhow::anyhow!("kubelet CPU manager state {}: {e}", path.display()))?;
    Ok(Some((state, c.format)))
}
