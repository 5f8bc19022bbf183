//! `plan` subcommand.

use std::process::ExitCode;

/// Arguments of `plan`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `plan`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`plan` is not built yet")
}
