//! The executor's own files read back (journal, backups, the files being replaced) and the
//! rollback of a pair (drop-in, state) from its backups.
//!
//! Every read is bounded and of regular files only ([`read_opt`]): a FIFO, a device or a
//! link to one where the journal or a backup should be is an error naming the file and the
//! limit, never a hang or an unbounded read. A rollback ([`roll_back`]) attempts every
//! step whatever fails before it, skips a file already equal to its backup (a write that
//! failed left it as it was), and says which steps failed; its caller keeps the journal
//! until the pair is consistent.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context as _};
use nodetopo_engine::files::{read_bounded, ReadError};

use crate::actuation::{backup_of, AllowedWrites, KubeletFiles};

/// The largest journal read (it is a one-line JSON object of a hundred bytes).
pub const MAX_JOURNAL_BYTES: u64 = 64 << 10;

/// The largest copy of the drop-in read (as for every kubelet configuration file).
pub const MAX_DROPIN_BYTES: u64 = nodetopo_kubelet::config::MAX_CONFIG_BYTES;

/// The largest copy of the state file read (as for the checkpoint itself).
pub const MAX_STATE_BYTES: u64 = nodetopo_kubelet::cpu_checkpoint::MAX_BYTES;

/// Reads at most `max` bytes of the regular file `path` (`what` names it in errors);
/// `Ok(None)` when it does not exist. A FIFO, a device, a directory or a larger file is an
/// error naming the file and the limit.
pub(crate) fn read_opt(path: &Path, max: u64, what: &str) -> anyhow::Result<Option<Vec<u8>>> {
    match read_bounded(path, max) {
        Ok(b) => Ok(Some(b)),
        Err(ReadError::NotFound) => Ok(None),
        Err(e @ (ReadError::NotRegular(_) | ReadError::TooLarge(_))) => bail!(
            "{what} {} {e}: apply reads only a regular file of at most {max} bytes there",
            path.display()
        ),
        Err(ReadError::Io(e)) => {
            Err(e).with_context(|| format!("reading {what} {}", path.display()))
        }
    }
}

/// The limit [`read_opt`] applies to `path` of `files` (or to its backup).
pub(crate) fn limit_of(files: &KubeletFiles, path: &Path) -> u64 {
    if path == files.state || path == backup_of(&files.state) {
        MAX_STATE_BYTES
    } else if path == files.journal() {
        MAX_JOURNAL_BYTES
    } else {
        MAX_DROPIN_BYTES
    }
}

/// Puts `path` back as it was before the apply: the backup's bytes with the backup's mode,
/// or no file when it did not exist. A file already in that state is left alone, so that a
/// rollback on a read-only or full file system succeeds where nothing needs writing.
pub(crate) fn restore(
    w: &AllowedWrites,
    files: &KubeletFiles,
    path: &Path,
    existed: bool,
) -> anyhow::Result<()> {
    if !existed {
        return match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            _ => w.remove(path),
        };
    }
    let b = backup_of(path);
    let max = limit_of(files, path);
    let Some(bytes) = read_opt(&b, max, "the backup")? else {
        bail!(
            "the backup {} to restore {} is missing",
            b.display(),
            path.display()
        );
    };
    let mode = std::fs::metadata(&b).map_or(0o644, |m| m.permissions().mode() & 0o777);
    if unchanged(path, &bytes, mode, max) {
        return Ok(());
    }
    w.write_mode(path, &bytes, mode)
        .with_context(|| format!("restoring {}", path.display()))
}

/// Whether `path` is a regular file (not a link) holding `bytes` with `mode`.
fn unchanged(path: &Path, bytes: &[u8], mode: u32, max: u64) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    meta.is_file()
        && meta.permissions().mode() & 0o777 == mode
        && read_bounded(path, max).is_ok_and(|b| b == bytes)
}

/// Restores the drop-in and (when the apply rewrote it) the state, attempting both
/// whatever fails; `Err` lists every step that failed (the pair may then be mixed).
pub(crate) fn roll_back(
    w: &AllowedWrites,
    files: &KubeletFiles,
    dropin_existed: bool,
    state_existed: bool,
    writes_state: bool,
) -> Result<(), String> {
    let mut failed = Vec::new();
    if let Err(e) = restore(w, files, &files.dropin(), dropin_existed) {
        failed.push(format!("the drop-in: {e:#}"));
    }
    if writes_state {
        if let Err(e) = restore(w, files, &files.state, state_existed) {
            failed.push(format!("the state: {e:#}"));
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("restoring {}", failed.join("; restoring ")))
    }
}

/// `path` with `.` and `..` resolved lexically (relative paths from the current directory).
fn lexical(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `path` with its directory resolved through links (when it exists).
fn resolved(path: &Path) -> Option<PathBuf> {
    let l = lexical(path);
    Some(
        std::fs::canonicalize(l.parent()?)
            .ok()?
            .join(l.file_name()?),
    )
}

/// Whether `a` and `b` name the same file: the same path once `.`/`..` and linked
/// directories are resolved, or (both existing) the same inode.
fn same_file(a: &Path, b: &Path) -> bool {
    if lexical(a) == lexical(b) {
        return true;
    }
    if let (Some(x), Some(y)) = (resolved(a), resolved(b)) {
        if x == y {
            return true;
        }
    }
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Refuses a layout where the files apply writes are not distinct, or where one of them is
/// the kubelet's configuration file (`--kubelet-config` pointing at the drop-in, or into the
/// drop-in directory as `90-nodetopo.conf`: apply would overwrite the kubelet's main
/// configuration with a drop-in, and a rollback would remove it).
pub(crate) fn check_layout(files: &KubeletFiles) -> anyhow::Result<()> {
    let w = AllowedWrites::of(files);
    for p in w.paths() {
        if same_file(&files.config, p) {
            bail!(
                "--kubelet-config {} is the file {} that apply writes: apply would replace the kubelet's configuration file with nodetopo's own; point --kubelet-config at the file the kubelet's --config names, and --kubelet-config-dir at its --config-dir",
                files.config.display(),
                p.display()
            );
        }
    }
    let paths = w.paths();
    for (i, a) in paths.iter().enumerate() {
        for b in &paths[i + 1..] {
            if same_file(a, b) {
                bail!(
                    "{} and {} are the same file: the drop-in, the state file (--state), their backups and the journal must be distinct files",
                    a.display(),
                    b.display()
                );
            }
        }
    }
    Ok(())
}
