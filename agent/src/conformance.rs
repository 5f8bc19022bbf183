//! `conformance` subcommand.

use std::process::ExitCode;

/// Arguments of `conformance`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `conformance`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`conformance` is not built yet")
}
