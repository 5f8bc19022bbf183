//! `prepare-state-dir`: creates the agent's hostPath state directory and gives it (and the
//! files directly in it, e.g. a checkpoint written by an older, root-running agent) to the
//! agent's non-root user. The chart runs it as a short init container with only CAP_CHOWN,
//! so that the long-running agent needs no privilege at all.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Arguments of `prepare-state-dir`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The directory (created if missing).
    pub dir: PathBuf,
    /// The owner's uid.
    #[arg(long)]
    pub uid: u32,
    /// The owner's gid.
    #[arg(long)]
    pub gid: u32,
}

/// Runs `prepare-state-dir`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dir = &args.dir;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let own = |p: &std::path::Path| {
        std::os::unix::fs::lchown(p, Some(args.uid), Some(args.gid))
            .with_context(|| format!("chown {}:{} {}", args.uid, args.gid, p.display()))
    };
    own(dir)?;
    let mut n = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        own(&entry.path())?;
        n += 1;
    }
    println!(
        "{} and {n} entries owned by {}:{}",
        dir.display(),
        args.uid,
        args.gid
    );
    Ok(ExitCode::SUCCESS)
}
