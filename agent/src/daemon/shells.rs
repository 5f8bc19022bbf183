//! The two shells around the core: cluster mode ([`kube`]) and local mode ([`local`]), with
//! the parts both share: one processing cycle ([`cycle`]) and the checkpoint at start
//! ([`restore`]); local mode's wake-ups are in [`watch`].
//!
//! A shell gets what it needs as plain values ([`Node`] and its own `Config`), built by
//! `daemon::run` from the command line, so nothing here reaches back up for the arguments.

use std::path::PathBuf;

use nodetopo_engine::CpuTopology;

pub mod cycle;
pub mod kube;
pub mod local;
pub mod restore;
pub mod watch;

/// What both shells need about this node, whichever mode runs.
#[derive(Debug, Clone)]
pub struct Node {
    /// The machine's topology (discovered or a preset).
    pub topology: CpuTopology,
    /// Directory of the agent's checkpoint (created when missing).
    pub state_dir: PathBuf,
    /// The kubelet's CPU manager checkpoint, compared with the agent's assignments.
    pub kubelet_state: PathBuf,
    /// Address of the admin server (/metrics, /healthz, /readyz); empty: none.
    pub admin_addr: String,
}
