//! nodetopo-agent: the node agent (`run`) and, from the `nodetopo-cli` crate, the offline
//! commands `discover`, `plan` and `conformance`, which need no cluster.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod actuate;
mod daemon;
mod preflight;
mod state_dir;

/// nodetopo node agent and offline CPU-placement tools.
#[derive(Debug, Parser)]
#[command(name = "nodetopo-agent", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The offline commands, the same as the `nodetopo` binary's.
    #[command(flatten)]
    Offline(nodetopo_cli::Command),
    /// Run the node agent (in a cluster, or with --local on files).
    Run(Box<daemon::Args>),
    /// Create the state directory and hand it (and its files) to the agent's user; the
    /// chart's init container runs this, the only step that needs uid 0 (with CAP_CHOWN).
    PrepareStateDir(state_dir::Args),
    /// Make the kubelet run a policy's CPU/topology-manager settings (drop-in, state
    /// rewrite, restart, verify, roll back on failure); see docs/actuation.md.
    Apply(Box<actuate::Args>),
    /// Take the node back to its own kubelet configuration (remove nodetopo's drop-in,
    /// rewrite the CPU manager state when the old policy needs it, restart with the same
    /// safety as apply, remove the backups); the same flags as apply, without --policy.
    Revert(Box<actuate::Args>),
    /// Check this node for actuation (the kubelet's --config-dir and --config, the drop-in
    /// directory, systemd's socket) and print the exact change for each gap; see
    /// docs/node-setup.md.
    Preflight(preflight::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Offline(c) => c.run(),
        Command::Run(a) => daemon::run(*a),
        Command::PrepareStateDir(a) => state_dir::run(a),
        Command::Apply(a) => actuate::run(*a),
        Command::Revert(a) => actuate::run_revert(*a),
        Command::Preflight(a) => preflight::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nodetopo-agent: {e:#}");
            ExitCode::from(2)
        }
    }
}
