//! The kubelet's CPU manager checkpoint (`/var/lib/kubelet/cpu_manager_state`), read-only,
//! through the one reader of `nodetopo-kubelet` ([`nodetopo_kubelet::cpu_checkpoint`]), which
//! restores it as kubelet v1.37.2 does: v4 trusts `data` and `dataChecksum` alone, v3 and v2
//! their own checksums. A file the kubelet would refuse for its checksum is returned with
//! [`ChecksumCheck::Mismatch`], which the agent's `KubeletAgreement` condition reports.

#[cfg(test)]
pub use nodetopo_kubelet::cpu_checkpoint::{parse_file as parse, CheckpointFormat};
pub use nodetopo_kubelet::cpu_checkpoint::{
    read, ChecksumCheck, CpuCheckpoint as KubeletCpuState, ReadError as KubeletStateError,
};

#[cfg(test)]
mod tests;
