//! Local mode's wake-ups: file-change notification on the directories of its inputs (the
//! pods directory, the spec file's and the kubelet checkpoint's directories), with a timer
//! as the fallback where notification is unavailable.
//!
//! A notification only says "look now": what changed is always found by a scan, and a file
//! is read only once it has settled (see [`super::local::PodDir`]). Missing a notification
//! therefore delays a change, it never loses one: with notification on, a slow rescan
//! ([`RESCAN_WATCHED`]) still runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::Notify;

/// How often the files are rescanned when change notification works (a safety net for
/// changes it cannot see, e.g. a kubelet state directory that appears after start).
pub const RESCAN_WATCHED: Duration = Duration::from_secs(1);

/// How local mode learns that its files may have changed.
pub enum Wakeups {
    /// Change notification on the inputs' directories; `changed` is signalled (coalesced)
    /// on every event. The watcher lives as long as this value.
    Watched {
        /// Signalled on each change event.
        changed: Arc<Notify>,
        /// Kept alive: dropping it stops the notifications.
        _watcher: notify::RecommendedWatcher,
        /// Directories not watched (they did not exist at start), rescanned by the timer.
        unwatched: Vec<PathBuf>,
    },
    /// No notification (disabled, or it could not start): the timer alone.
    Polled {
        /// Why notification is not used, for the log.
        why: String,
    },
}

impl Wakeups {
    /// Watches `pods_dir` and the parent directories of `files` (not recursively); falls
    /// back to [`Wakeups::Polled`] when notification is off or the pods directory cannot be
    /// watched. A directory other than the pods directory that cannot be watched (a kubelet
    /// state directory that does not exist) is left to the timer. Events on `own` (the
    /// status file the loop writes) and its temp files wake nothing.
    pub fn start(enabled: bool, pods_dir: &Path, files: &[&Path], own: &Path) -> Wakeups {
        if !enabled {
            return Wakeups::Polled {
                why: "change notification disabled (--no-watch)".into(),
            };
        }
        let changed = Arc::new(Notify::new());
        let signal = changed.clone();
        let own = own.to_path_buf();
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            match res {
                // Reads and opens change nothing; the loop's own status writes neither.
                Ok(ev) if matches!(ev.kind, EventKind::Access(_)) => {}
                Ok(ev) if !ev.paths.is_empty() && ev.paths.iter().all(|p| is_own(p, &own)) => {}
                Ok(_) => signal.notify_one(),
                // An overflowed queue or a watch error: look anyway.
                Err(e) => {
                    tracing::warn!("file-change notification: {e}");
                    signal.notify_one();
                }
            }
        });
        let mut watcher = match watcher {
            Ok(w) => w,
            Err(e) => {
                return Wakeups::Polled {
                    why: format!("change notification unavailable: {e}"),
                }
            }
        };
        if let Err(e) = watcher.watch(pods_dir, RecursiveMode::NonRecursive) {
            return Wakeups::Polled {
                why: format!(
                    "cannot watch the pods directory {}: {e}",
                    pods_dir.display()
                ),
            };
        }
        let mut watched = vec![pods_dir.to_path_buf()];
        let mut unwatched = Vec::new();
        for file in files {
            let dir = parent_dir(file);
            if watched.contains(&dir) || unwatched.contains(&dir) {
                continue;
            }
            match watcher.watch(&dir, RecursiveMode::NonRecursive) {
                Ok(()) => watched.push(dir),
                Err(e) => {
                    tracing::info!(
                        "not watching {} ({e}); rescanned every {:?}",
                        dir.display(),
                        RESCAN_WATCHED
                    );
                    unwatched.push(dir);
                }
            }
        }
        Wakeups::Watched {
            changed,
            _watcher: watcher,
            unwatched,
        }
    }

    /// The interval of the timer: the poll interval without notification, else the slow
    /// rescan.
    pub fn rescan(&self, poll: Duration) -> Duration {
        match self {
            Wakeups::Watched { .. } => RESCAN_WATCHED.max(poll),
            Wakeups::Polled { .. } => poll,
        }
    }

    /// The delay before a file seen changed is looked at again to see whether it settled:
    /// `settle` with notification (a further change wakes the loop anyway); none of its own
    /// without, where the next poll is that second look.
    pub fn settle(&self, settle: Duration) -> Option<Duration> {
        match self {
            Wakeups::Watched { .. } => Some(settle),
            Wakeups::Polled { .. } => None,
        }
    }

    /// Resolves at the next change event; never without notification.
    pub async fn changed(&self) {
        match self {
            Wakeups::Watched { changed, .. } => changed.notified().await,
            Wakeups::Polled { .. } => std::future::pending().await,
        }
    }
}

/// Whether `path` is the status file `own` or one of its temp files (`.<name>.tmp.<pid>`,
/// as `checkpoint::write_replace` names them).
fn is_own(path: &Path, own: &Path) -> bool {
    if path == own {
        return true;
    }
    let (Some(name), Some(own_name)) = (
        path.file_name().and_then(|n| n.to_str()),
        own.file_name().and_then(|n| n.to_str()),
    ) else {
        return false;
    };
    path.parent() == own.parent() && name.starts_with(&format!(".{own_name}.tmp."))
}

/// The directory a file is in (`.` for a bare name).
fn parent_dir(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_of_a_bare_name_is_the_current_directory() {
        assert_eq!(parent_dir(Path::new("spec.yaml")), PathBuf::from("."));
        assert_eq!(parent_dir(Path::new("/a/b.yaml")), PathBuf::from("/a"));
    }

    #[test]
    fn the_status_file_and_its_temp_files_are_own_writes() {
        let own = Path::new("/d/status.yaml");
        assert!(is_own(own, own));
        assert!(is_own(Path::new("/d/.status.yaml.tmp.42"), own));
        assert!(!is_own(Path::new("/d/spec.yaml"), own));
        assert!(!is_own(Path::new("/e/.status.yaml.tmp.42"), own));
    }

    #[tokio::test]
    async fn a_write_in_the_pods_directory_wakes_and_a_missing_directory_is_left_to_the_timer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("no-such-dir/cpu_manager_state");
        let status = dir.path().join("status.yaml");
        let w = Wakeups::start(true, dir.path(), &[&missing], &status);
        let Wakeups::Watched { unwatched, .. } = &w else {
            panic!("notification should start on a temp directory");
        };
        assert_eq!(unwatched, &[dir.path().join("no-such-dir")]);
        // The loop's own status write wakes nothing.
        std::fs::write(&status, "x").expect("write");
        assert!(
            tokio::time::timeout(Duration::from_millis(200), w.changed())
                .await
                .is_err(),
            "the status file is the loop's own write"
        );
        std::fs::write(dir.path().join("p.yaml"), "x").expect("write");
        tokio::time::timeout(Duration::from_secs(5), w.changed())
            .await
            .expect("a write in the watched directory wakes the loop");
        assert_eq!(
            w.rescan(Duration::from_millis(50)),
            RESCAN_WATCHED,
            "watched: slow rescan"
        );
    }

    #[tokio::test]
    async fn without_notification_the_timer_is_the_poll() {
        let dir = tempfile::tempdir().expect("tempdir");
        let own = dir.path().join("status.yaml");
        let w = Wakeups::start(false, dir.path(), &[], &own);
        assert!(matches!(w, Wakeups::Polled { .. }));
        let poll = Duration::from_millis(50);
        assert_eq!(w.rescan(poll), poll);
        assert_eq!(w.settle(Duration::from_millis(5)), None);
        std::fs::write(dir.path().join("p.yaml"), "x").expect("write");
        assert!(
            tokio::time::timeout(Duration::from_millis(100), w.changed())
                .await
                .is_err(),
            "no wake-up without notification"
        );
        let missing = dir.path().join("gone");
        let w = Wakeups::start(true, &missing, &[], &own);
        assert!(
            matches!(&w, Wakeups::Polled { why } if why.contains("cannot watch the pods directory")),
            "a pods directory that cannot be watched falls back to the poll"
        );
    }
}
