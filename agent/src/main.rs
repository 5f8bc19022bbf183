//! nodetopo-agent: the node agent (`run`) and the offline commands `discover`, `plan` and
//! `conformance`, which need no cluster.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod conformance;
mod daemon;
mod discover;
mod plan;
mod pods;

/// nodetopo node agent and offline CPU-placement tools.
#[derive(Debug, Parser)]
#[command(name = "nodetopo-agent", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print this machine's (or a sysfs tree's) CPU topology.
    Discover(discover::Args),
    /// Show where containers would land under each CPU/topology-manager policy.
    Plan(plan::Args),
    /// Evaluate kubelet test-vector files against the engine.
    Conformance(conformance::Args),
    /// Run the node agent (in a cluster, or with --local on files).
    Run(Box<daemon::Args>),
    /// Create the state directory and hand it (and its files) to the agent's user; the
    /// chart's init container runs this, the only step that needs uid 0 (with CAP_CHOWN).
    PrepareStateDir(daemon::state_dir::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Discover(a) => discover::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Conformance(a) => conformance::run(a),
        Command::Run(a) => daemon::run(*a),
        Command::PrepareStateDir(a) => daemon::state_dir::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nodetopo-agent: {e:#}");
            ExitCode::from(2)
        }
    }
}
