//! nodetopo's offline commands: `discover`, `plan` and `conformance`, which need no cluster.
//!
//! This crate depends on the engine and on nothing of Kubernetes' client stack (no kube, no
//! k8s-openapi, no tokio), so `cargo run -p nodetopo-cli -- plan` builds in about a minute.
//! The binaries `nodetopo` and `kubectl-nodetopo` (the kubectl plugin name) run [`main`];
//! the agent binary offers the same subcommands by flattening [`Command`] into its own.

#![warn(missing_docs)]

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub mod audit;
pub mod conformance;
pub mod diff;
pub mod discover;
pub mod plan;
pub use nodetopo_kubelet::pods;

/// The offline subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print this machine's (or a sysfs tree's) CPU topology.
    Discover(discover::Args),
    /// Show where containers would land under each CPU/topology-manager policy.
    #[command(after_help = PLAN_EXAMPLES)]
    Plan(Box<plan::Args>),
    /// Evaluate kubelet test-vector files against the engine.
    Conformance(conformance::Args),
    /// Show what changing the kubelet to a policy's CPU/topology-manager settings takes.
    Diff(Box<diff::Args>),
    /// Compare every container's real cpuset with the kubelet's assignments (offline, on a
    /// recorded node or this one), each mismatch with its reason.
    Audit(Box<audit::Args>),
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Discover(a) => discover::run(a),
            Command::Plan(a) => plan::run(*a),
            Command::Conformance(a) => conformance::run(a),
            Command::Diff(a) => diff::run(*a),
            Command::Audit(a) => audit::run(*a),
        }
    }
}

/// nodetopo: where would containers land on this machine, under each kubelet CPU and
/// topology-manager policy? Offline: no cluster needed.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Examples shown by `--help`.
pub const EXAMPLES: &str = "Examples:
  nodetopo plan                                      # this machine, a demo workload
  nodetopo plan --preset list                        # the built-in machines
  nodetopo plan --preset kep-4800-example --reserved 0-1 --containers 4,4,4
  nodetopo plan --pods examples/pods/web.yaml --preset epyc-9654-2p-nps4
  nodetopo discover --sysfs-root ../shared/sysfs/amd-ryzen5-1600/sys
  nodetopo conformance engine/tests/vectors
  nodetopo audit --cgroup-root rec/cgroup --sysfs-root rec/sys --pods rec/pods.yaml --state rec/cpu_manager_state";

/// Examples shown by `plan --help`.
pub const PLAN_EXAMPLES: &str = "Examples:
  nodetopo plan                                      # this machine, a demo workload
  nodetopo plan --preset list                        # the built-in machines
  nodetopo plan --preset kep-4800-example --reserved 0-1 --containers 4,4,4
  nodetopo plan --preset epyc-9654-2p-nps4 --pods examples/pods/web.yaml \\
      --device example.com/nic=5:1 --topology-manager-policy restricted
  nodetopo plan --preset epyc-7303-2p --containers 24,40 --explain c2/main
  nodetopo plan --option full-pcpus-only=true --topology-manager-policy single-numa-node -o json

See docs/plan.md for the table, the JSON shape and the defaults.";

/// Parses the command line and runs it; `name` is the program name in messages.
pub fn main(name: &'static str) -> ExitCode {
    let matches = Cli::command().name(name).bin_name(name).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match cli.command.run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            ExitCode::from(2)
        }
    }
}
