//! nodetopo-agent: the node agent's commands (`run`, `prepare-state-dir`, `apply`, `revert`,
//! `preflight`) as one [`Command`] enum. The `nodetopo-agent` binary
//! (`bin/nodetopo-agent`, package `nodetopo-agent-bin`) puts them beside the offline
//! commands of `nodetopo-cli`; this crate does not depend on the CLI.

use std::process::ExitCode;

use clap::Subcommand;

mod actuation;
mod daemon;
mod preflight;
mod state_dir;

/// The agent's own subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the node agent (in a cluster, or with --local on files).
    Run(Box<daemon::Args>),
    /// Create the state directory and hand it (and its files) to the agent's user; the
    /// chart's init container runs this, the only step that needs uid 0 (with CAP_CHOWN).
    PrepareStateDir(state_dir::Args),
    /// Make the kubelet run a policy's CPU/topology-manager settings (drop-in, state
    /// rewrite, restart, verify, roll back on failure); see docs/actuation.md.
    Apply(Box<actuation::Args>),
    /// Take the node back to its own kubelet configuration (remove nodetopo's drop-in,
    /// rewrite the CPU manager state when the old policy needs it, restart with the same
    /// safety as apply, remove the backups); the same flags as apply, without --policy.
    Revert(Box<actuation::Args>),
    /// Check this node for actuation (the kubelet's --config-dir and --config, the drop-in
    /// directory, systemd's socket) and print the exact change for each gap; see
    /// docs/node-setup.md.
    Preflight(preflight::Args),
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Run(a) => daemon::run(*a),
            Command::PrepareStateDir(a) => state_dir::run(a),
            Command::Apply(a) => actuation::run(*a),
            Command::Revert(a) => actuation::run_revert(*a),
            Command::Preflight(a) => preflight::run(a),
        }
    }
}
