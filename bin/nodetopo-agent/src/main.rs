//! nodetopo-agent: the node agent's commands (`run`, `apply`, ..., from the `nodetopo-agent`
//! crate) and the offline commands `discover`, `plan`, `conformance` and `diff` (from the
//! `nodetopo-cli` crate), which need no cluster. Only this composition root knows both.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// nodetopo node agent and offline CPU-placement tools.
#[derive(Debug, Parser)]
// `about` is the package description (Cargo.toml), as the help has always shown it.
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
    /// The node agent's commands.
    #[command(flatten)]
    Agent(nodetopo_agent::Command),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Offline(c) => c.run(),
        Command::Agent(c) => c.run(),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nodetopo-agent: {e:#}");
            ExitCode::from(2)
        }
    }
}
