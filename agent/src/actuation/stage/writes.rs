//! The only files the executor may create, replace or remove, enforced: every write of
//! `apply` goes through [`AllowedWrites`], which refuses any other path.
//!
//! Allowed: the drop-in `<config dir>/90-nodetopo.conf`, the CPU manager state file, the
//! backup of each (`<name>.nodetopo-backup`, beside it) and the journal
//! (`<state dir>/nodetopo-apply.journal`); plus, transiently, each one's temp file
//! `.<name>.nodetopo-tmp.<pid>` in the same directory (an atomic rename needs the directory).
//! No temp name ends in `.conf`, so a kubelet that starts while one exists never reads it
//! (it merges only `*.conf` files of its config dir); the backup of the drop-in ends in
//! `.nodetopo-backup` for the same reason.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::actuation::{backup_of, KubeletFiles};

/// The set of paths an apply may write.
#[derive(Debug, Clone)]
pub struct AllowedWrites {
    paths: Vec<PathBuf>,
}

impl AllowedWrites {
    /// The drop-in, the state file, their backups and the journal of `files`.
    pub fn of(files: &KubeletFiles) -> Self {
        let dropin = files.dropin();
        AllowedWrites {
            paths: vec![
                backup_of(&dropin),
                dropin,
                backup_of(&files.state),
                files.state.clone(),
                files.journal(),
            ],
        }
    }

    /// The allowed paths.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Ok when `path` is one of the allowed files, else an error naming it and them.
    pub fn check(&self, path: &Path) -> std::io::Result<()> {
        if self.paths.iter().any(|p| p == path) {
            return Ok(());
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "refusing to write {}: apply writes only {}",
                path.display(),
                self.paths()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ))
    }

    /// Writes `bytes` to the allowed `path` atomically with mode 0644: a temp file in the same
    /// directory, fsync, rename, fsync of the directory.
    pub fn write(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.write_mode(path, bytes, 0o644)
    }

    /// [`AllowedWrites::write`] with the given permission bits (the kubelet's state file and
    /// its backup keep the state file's own mode, 0600 as the kubelet creates it).
    pub fn write_mode(&self, path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
        self.check(path)?;
        nodetopo_kubelet::atomic::write(path, bytes, Some(mode), true)
    }

    /// Removes the allowed `path` (absent is fine), durably.
    pub fn remove(&self, path: &Path) -> anyhow::Result<()> {
        self.check(path)?;
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
        }
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .with_context(|| format!("syncing {}", dir.display()))?;
        }
        Ok(())
    }

    /// Removes temp files of the allowed paths that an apply killed between create and rename
    /// left behind (any process id but ours); nothing else is touched. Best effort.
    pub fn remove_stale_temps(&self) {
        for p in &self.paths {
            nodetopo_kubelet::atomic::remove_stale_temps(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use nodetopo_kubelet::atomic::temp_of;

    use super::*;

    fn files(root: &Path) -> KubeletFiles {
        KubeletFiles {
            config: root.join("config.yaml"),
            config_dir: root.join("conf.d"),
            state: root.join("lib/cpu_manager_state"),
        }
    }

    #[test]
    fn only_the_allowed_files_are_written() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("conf.d")).unwrap();
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        let f = files(dir.path());
        let w = AllowedWrites::of(&f);
        assert_eq!(w.paths().len(), 5);
        let mut refused = 0;
        for bad in [
            f.config.clone(),
            f.config_dir.join("10-other.conf"),
            f.config_dir.join("90-nodetopo.conf.tmp"),
            dir.path().join("lib/memory_manager_state"),
            dir.path().join("lib/../lib/cpu_manager_state"),
        ] {
            let e = w.write(&bad, b"x").unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
            assert!(e.to_string().contains(&bad.display().to_string()), "{e}");
            assert!(!bad.exists() || bad == dir.path().join("lib/../lib/cpu_manager_state"));
            assert!(w.remove(&bad).is_err());
            refused += 1;
        }
        for good in w.paths().to_vec() {
            w.write(&good, b"y").unwrap();
            assert_eq!(std::fs::read(&good).unwrap(), b"y");
            let mode = std::fs::metadata(&good).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644);
            // No temp name ends in `.conf`: a starting kubelet never merges one.
            let tmp = temp_of(&good);
            assert!(
                !tmp.to_string_lossy().ends_with(".conf"),
                "{}",
                tmp.display()
            );
            assert!(!backup_of(&good).to_string_lossy().ends_with(".conf"));
            w.remove(&good).unwrap();
            assert!(!good.exists());
        }
        // Stale temps of allowed files (another pid) go; anything else stays.
        let stale = dir.path().join("conf.d/.90-nodetopo.conf.nodetopo-tmp.1");
        let foreign = dir.path().join("conf.d/.10-other.conf.nodetopo-tmp.1");
        std::fs::write(&stale, b"s").unwrap();
        std::fs::write(&foreign, b"f").unwrap();
        w.remove_stale_temps();
        assert!(!stale.exists() && foreign.exists());
        println!("allowed writes: {refused} refused paths, 5 allowed paths written and removed");
    }
}
