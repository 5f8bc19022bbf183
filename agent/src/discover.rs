//! `discover` subcommand.

use std::process::ExitCode;

/// Arguments of `discover`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `discover`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`discover` is not built yet")
}
