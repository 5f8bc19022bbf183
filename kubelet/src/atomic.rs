//! The one atomic file writer: the kubelet's drop-in and state files (by `apply`), the
//! agent's own checkpoint and its local-mode status file. A file is written to a temp file
//! `.<name>.nodetopo-tmp.<pid>` in the same directory (a rename is atomic only within one
//! file system) and renamed over the target, so a reader sees the old or the new content,
//! never a part. Temp files left by a process killed between create and rename are removed
//! by [`remove_stale_temps`].

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The marker in temp file names.
pub const TEMP_MARK: &str = ".nodetopo-tmp.";

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The temp file `path` is written through before its rename (this process's).
pub fn temp_of(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir_of(path).join(format!(".{name}{TEMP_MARK}{}", std::process::id()))
}

/// Creates the temp file `tmp` for writing, never through a link: whatever is at its name
/// (a planted symlink, a FIFO, a file left by an earlier process with this PID) is unlinked
/// first (unlink removes the name, never what a symlink points at), then the file is created
/// with `O_CREAT|O_EXCL|O_NOFOLLOW` (`create_new`), which fails rather than follow or reuse
/// anything planted in between.
fn create_temp(tmp: &Path, mode: Option<u32>) -> std::io::Result<fs::File> {
    match fs::remove_file(tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut open = fs::OpenOptions::new();
    open.write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    open.mode(mode.unwrap_or(0o666));
    open.open(tmp).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("creating the temp file {}: {e}", tmp.display()),
        )
    })
}

/// Writes `bytes` to `path` by temp file and rename. `mode`: the file's permission bits
/// (`None`: as `File::create`, 0666 less the umask). With `durable`, the file is fsynced
/// before and its directory after the rename (durability across power loss, which derived
/// files rewritten at every start do not need). A failed write removes its temp file.
///
/// The temp file is created new (`O_EXCL|O_NOFOLLOW`, see [`create_temp`]) and its mode set
/// on the open handle (`fchmod`), so no link planted at its name can redirect the write or
/// the chmod to another file; the rename replaces `path` itself (a symlink at `path` is
/// replaced, not followed).
pub fn write(path: &Path, bytes: &[u8], mode: Option<u32>, durable: bool) -> std::io::Result<()> {
    let tmp = temp_of(path);
    let mut created = false;
    let result = (|| {
        let mut f = create_temp(&tmp, mode)?;
        created = true;
        f.write_all(bytes)?;
        if let Some(m) = mode {
            // The umask may have narrowed the mode at creation.
            f.set_permissions(fs::Permissions::from_mode(m))?;
        }
        if durable {
            f.sync_all()?;
        }
        drop(f);
        fs::rename(&tmp, path)?;
        if durable {
            fs::File::open(dir_of(path))?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() && created {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes the temp files of `path` left behind by a killed process, and anything else
/// planted under a temp name (a symlink or any non-regular file, even under this process's
/// own PID); this process's own regular temp file (a write in progress) and every other
/// file are kept. Removal unlinks the name only: a symlink's target is never touched.
/// Returns what was removed, sorted. Best effort: an unreadable directory removes nothing.
pub fn remove_stale_temps(path: &Path) -> Vec<PathBuf> {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Vec::new();
    };
    let prefix = format!(".{name}{TEMP_MARK}");
    let own = format!("{prefix}{}", std::process::id());
    let Ok(rd) = fs::read_dir(dir_of(path)) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in rd.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let is_temp = file
            .strip_prefix(&prefix)
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
        if !is_temp {
            continue;
        }
        // `file_type` does not follow links.
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if (file != own || !regular) && fs::remove_file(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed.sort();
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_with_the_mode_asked_and_leave_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        write(&p, b"one", Some(0o600), true).unwrap();
        write(&p, b"two", Some(0o600), false).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        // A failed rename (the target is a non-empty directory) removes its temp file.
        let d = dir.path().join("d");
        fs::create_dir(&d).unwrap();
        fs::write(d.join("x"), b"").unwrap();
        assert!(write(&d, b"x", None, true).is_err());
        assert!(!temp_of(&d).exists());
    }

    #[test]
    fn stale_temps_of_other_processes_are_removed_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state");
        let own = temp_of(&p);
        let names = [
            ".state.nodetopo-tmp.12345",
            ".state.nodetopo-tmp.x1",
            ".other.nodetopo-tmp.12345",
            ".state.tmp.12345",
        ];
        for n in names {
            fs::write(dir.path().join(n), b"").unwrap();
        }
        fs::write(&own, b"").unwrap();
        let removed = remove_stale_temps(&p);
        assert_eq!(removed, [dir.path().join(".state.nodetopo-tmp.12345")]);
        assert!(own.exists());
        for n in &names[1..] {
            assert!(dir.path().join(n).exists(), "{n}");
        }
    }

    #[test]
    fn a_link_planted_at_a_temp_name_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
        let p = dir.path().join("state");
        // A symlink under this process's own temp name: the write must replace the link,
        // not write through it nor chmod its target.
        std::os::unix::fs::symlink(&victim, temp_of(&p)).unwrap();
        write(&p, b"new", Some(0o600), true).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(
            fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
            0o644
        );
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert!(fs::symlink_metadata(temp_of(&p)).is_err());
        // A dangling link too (O_CREAT alone would create its target).
        let target = dir.path().join("created-through-link");
        std::os::unix::fs::symlink(&target, temp_of(&p)).unwrap();
        write(&p, b"newer", None, false).unwrap();
        assert!(fs::symlink_metadata(&target).is_err());
        assert_eq!(fs::read(&p).unwrap(), b"newer");
        // Cleanup removes links under any temp name, this PID's included, and never their
        // targets; this process's own regular temp file (a write in progress) stays.
        std::os::unix::fs::symlink(&victim, temp_of(&p)).unwrap();
        let other = dir.path().join(".state.nodetopo-tmp.1");
        std::os::unix::fs::symlink(&victim, &other).unwrap();
        assert_eq!(remove_stale_temps(&p), {
            let mut v = vec![temp_of(&p), other];
            v.sort();
            v
        });
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        fs::write(temp_of(&p), b"in progress").unwrap();
        assert!(remove_stale_temps(&p).is_empty());
        assert!(temp_of(&p).exists());
    }
}
