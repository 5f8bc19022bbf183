//! `daemon` subcommand.

use std::process::ExitCode;

/// Arguments of `daemon`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `daemon`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`daemon` is not built yet")
}
