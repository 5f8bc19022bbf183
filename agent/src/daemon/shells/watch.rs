//! Local mode's wake-ups and file news: inotify on the directories of its inputs (the pods
//! directory, the spec file's and the kubelet checkpoint's directories), with a timer as the
//! fallback where notification is unavailable.
//!
//! The loop owns the inotify descriptor and reads the kernel's queue itself ([`Wakeups::drain`])
//! right before each scan. The kernel queues an event within the system call that caused it,
//! so every write that finished before the drain is in the news the settle rule gets
//! ([`crate::daemon::inputs::settle`]): a file with a write and no close yet is known to be
//! open, and no background thread can lag behind.
//!
//! A notification only says "look now" and, for a pod file, what happened to it; what
//! changed is always found by a scan, and a file is read only once it has settled. Missing a
//! notification therefore delays a change, it never loses one: with notification on, a slow
//! rescan ([`RESCAN_WATCHED`]) still runs, and an overflowed queue counts every file as
//! changed.
//!
//! Why inotify itself (the `inotify` crate, a thin safe wrapper of the three system calls,
//! the one `notify` builds on) and not `notify`: the agent only runs on Linux, and `notify`
//! reads the queue on a thread of its own and hands events over later, so a scan could not
//! know that it has seen every write made before it; it also watches opens and closes for
//! reading, so every read of the agent's own would come back as an event.

use std::ffi::OsString;
use std::future::pending;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::daemon::inputs::settle::{is_pod_file, Changes, Happened, Rule};

/// How often the files are rescanned when change notification works (a safety net for
/// changes it cannot see: a kubelet state directory that appears after start, a write
/// through another path to the same file, a network file system).
pub const RESCAN_WATCHED: Duration = Duration::from_secs(1);

/// What is watched on each directory: names created, written, closed after writing, moved
/// in or out, removed, their metadata; the directory itself removed or moved. Not opens or
/// reads (the agent's own reads would wake it).
fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::DELETE
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

/// How local mode learns that its files may have changed.
pub enum Wakeups {
    /// inotify on the inputs' directories.
    Watched(Box<Watch>),
    /// No notification (disabled, or it could not start, or the pods directory's watch was
    /// lost): the timer alone.
    Polled {
        /// Why notification is not used, for the log.
        why: String,
    },
}

/// A running inotify watch.
pub struct Watch {
    fd: AsyncFd<Inotify>,
    /// The pods directory and its watch: events here are news of pod files.
    pods: (WatchDescriptor, PathBuf),
    /// Other watched directories with the names in them that matter (the spec file, the
    /// kubelet checkpoint).
    others: Vec<(WatchDescriptor, PathBuf, Vec<OsString>)>,
    /// Directories not watched (they did not exist at start), left to the rescan.
    unwatched: Vec<PathBuf>,
    /// The status file the loop writes: its events wake nothing.
    own: PathBuf,
    /// Read but not yet handed to the loop.
    pending: Changes,
    /// Whether `pending` holds anything that should wake the loop.
    wake: bool,
    /// Set when the watch stopped working (read error, pods directory gone).
    broken: Option<String>,
    buffer: Vec<u8>,
}

impl Wakeups {
    /// Watches `pods_dir` and the parent directories of `files` (not recursively); falls
    /// back to [`Wakeups::Polled`] when notification is off or cannot start or the pods
    /// directory cannot be watched. A directory other than the pods directory that cannot be
    /// watched (a kubelet state directory that does not exist) is left to the rescan.
    /// Events on `own` (the status file the loop writes) wake nothing. Needs a tokio runtime.
    pub fn start(enabled: bool, pods_dir: &Path, files: &[&Path], own: &Path) -> Wakeups {
        if !enabled {
            return Wakeups::Polled {
                why: "change notification disabled (--no-watch)".into(),
            };
        }
        Wakeups::start_on(Inotify::init(), pods_dir, files, own)
    }

    /// [`Wakeups::start`] on an inotify instance that may have failed to start.
    pub fn start_on(
        init: io::Result<Inotify>,
        pods_dir: &Path,
        files: &[&Path],
        own: &Path,
    ) -> Wakeups {
        let inotify = match init {
            Ok(i) => i,
            Err(e) => {
                return Wakeups::Polled {
                    why: format!("change notification unavailable (inotify_init1: {e})"),
                }
            }
        };
        let pods_wd = match inotify.watches().add(pods_dir, mask()) {
            Ok(wd) => wd,
            Err(e) => {
                return Wakeups::Polled {
                    why: format!(
                        "cannot watch the pods directory {}: {e}",
                        pods_dir.display()
                    ),
                }
            }
        };
        let mut others: Vec<(WatchDescriptor, PathBuf, Vec<OsString>)> = Vec::new();
        let mut unwatched: Vec<PathBuf> = Vec::new();
        for file in files {
            let (dir, Some(name)) = (parent_dir(file), file.file_name()) else {
                continue;
            };
            if let Some((.., names)) = others.iter_mut().find(|(_, d, _)| *d == dir) {
                names.push(name.to_os_string());
                continue;
            }
            if dir == pods_dir || unwatched.contains(&dir) {
                continue;
            }
            match inotify.watches().add(&dir, mask()) {
                Ok(wd) => others.push((wd, dir, vec![name.to_os_string()])),
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
        // SAFETY: `Inotify` owns its descriptor and closes it only when dropped; the
        // `AsyncFd` owns the `Inotify` (never `into_inner`, never forgotten), so the
        // descriptor stays open and the same for the `AsyncFd`'s whole life, and
        // `as_raw_fd` always returns it.
        let fd = match unsafe { AsyncFd::register_with_interest(inotify, Interest::READABLE) } {
            Ok(fd) => fd,
            Err(e) => {
                return Wakeups::Polled {
                    why: format!("change notification unavailable (registering inotify: {e})"),
                }
            }
        };
        Wakeups::Watched(Box::new(Watch {
            fd,
            pods: (pods_wd, pods_dir.to_path_buf()),
            others,
            unwatched,
            own: own.to_path_buf(),
            pending: Changes::default(),
            wake: false,
            broken: None,
            buffer: vec![0; 16 * 1024],
        }))
    }

    /// The interval of the timer: the poll interval without notification, else the slow
    /// rescan.
    pub fn rescan(&self, poll: Duration) -> Duration {
        match self {
            Wakeups::Watched(_) => RESCAN_WATCHED.max(poll),
            Wakeups::Polled { .. } => poll,
        }
    }

    /// The settle rule in this mode: quiet for `settle` and `write_hold` for files left
    /// open with notification; without, read at the second look that finds the file the
    /// same (the next poll).
    pub fn rule(&self, settle: Duration, write_hold: Duration) -> Rule {
        match self {
            Wakeups::Watched(_) => Rule {
                quiet: settle,
                write_hold,
            },
            Wakeups::Polled { .. } => Rule {
                quiet: Duration::ZERO,
                write_hold,
            },
        }
    }

    /// Whether notification is on (the loop then schedules the settle rule's next look
    /// itself; without, the next poll is that look).
    pub fn is_watched(&self) -> bool {
        matches!(self, Wakeups::Watched(_))
    }

    /// Resolves when something that matters happened (or the watch broke); never without
    /// notification. Cancel-safe: events read before a cancellation stay pending.
    pub async fn changed(&mut self) {
        let Wakeups::Watched(w) = self else {
            return pending().await;
        };
        while !w.wake && w.broken.is_none() {
            match w.fd.readable_mut().await {
                // Cleared before reading: an event queued after the read sets it again.
                Ok(mut ready) => ready.clear_ready(),
                Err(e) => {
                    w.broken = Some(format!("waiting for file-change events: {e}"));
                    break;
                }
            }
            w.read_queue();
        }
    }

    /// Everything that happened since the last drain, read from the kernel's queue now. If
    /// the watch broke, everything counts as changed and the mode turns to polling.
    pub fn drain(&mut self) -> Changes {
        let Wakeups::Watched(w) = self else {
            return Changes::default();
        };
        w.read_queue();
        let mut changes = std::mem::take(&mut w.pending);
        w.wake = false;
        if let Some(why) = w.broken.take() {
            changes.lost = true;
            *self = Wakeups::Polled { why };
        }
        changes
    }

    /// Directories not watched, for the log.
    pub fn unwatched(&self) -> &[PathBuf] {
        match self {
            Wakeups::Watched(w) => &w.unwatched,
            Wakeups::Polled { .. } => &[],
        }
    }
}

impl Watch {
    /// Reads every queued event into `pending` (never blocks).
    fn read_queue(&mut self) {
        let Watch {
            fd,
            pods,
            others,
            own,
            pending,
            wake,
            broken,
            buffer,
            ..
        } = self;
        loop {
            let events = match fd.get_mut().read_events(buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    *broken = Some(format!("reading file-change events: {e}"));
                    pending.lost = true;
                    return;
                }
            };
            for ev in events {
                if ev.mask.contains(EventMask::Q_OVERFLOW) {
                    pending.lost = true;
                    *wake = true;
                    continue;
                }
                if ev.wd == pods.0 {
                    if ev.mask.intersects(
                        EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED,
                    ) {
                        *broken = Some(format!(
                            "the pods directory {} was removed or moved",
                            pods.1.display()
                        ));
                        continue;
                    }
                    let Some(name) = ev.name else { continue };
                    let path = pods.1.join(name);
                    if path == *own || !wakes_pods_dir(name) {
                        continue;
                    }
                    *wake = true;
                    if is_pod_file(&path) {
                        for happened in happened(ev.mask) {
                            pending.add(path.clone(), happened);
                        }
                    }
                } else if let Some((_, dir, names)) = others.iter().find(|(wd, ..)| *wd == ev.wd) {
                    // The file itself, or a ConfigMap's `..data` swap; a removed or moved
                    // directory (IGNORED) is left to the rescan.
                    let matters = ev.name.is_some_and(|n| {
                        names.iter().any(|m| m == n) || n.to_string_lossy().starts_with("..")
                    });
                    if matters && ev.name.map(|n| dir.join(n)).as_ref() != Some(own) {
                        *wake = true;
                    }
                }
            }
        }
    }
}

/// Whether an event on `name` in the pods directory is worth a look: a pod file, or a
/// ConfigMap's `..data` and `..<timestamp>` entries (their swap changes the pod files behind
/// the symlinks); not temp files (`.name.tmp`) or other names.
fn wakes_pods_dir(name: &std::ffi::OsStr) -> bool {
    name.to_string_lossy().starts_with("..") || is_pod_file(Path::new(name))
}

/// What one inotify event says happened to the file it names (a mask holds one of these,
/// besides flags such as `IN_ISDIR`).
fn happened(mask: EventMask) -> Vec<Happened> {
    [
        (EventMask::CREATE, Happened::Created),
        (EventMask::MODIFY, Happened::Written),
        (EventMask::ATTRIB, Happened::Touched),
        (EventMask::CLOSE_WRITE, Happened::Closed),
        (EventMask::MOVED_FROM, Happened::Gone),
        (EventMask::DELETE, Happened::Gone),
        (EventMask::MOVED_TO, Happened::MovedIn),
    ]
    .into_iter()
    .filter(|(bit, _)| mask.contains(*bit))
    .map(|(_, h)| h)
    .collect()
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
    use std::io::Write as _;

    use super::*;
    use crate::daemon::inputs::settle::News;

    /// Waits for the next wake-up (a hang guard, not a measurement).
    async fn woken(w: &mut Wakeups) {
        tokio::time::timeout(Duration::from_secs(20), w.changed())
            .await
            .expect("a file-change event wakes the loop");
    }

    #[test]
    fn parent_of_a_bare_name_is_the_current_directory() {
        assert_eq!(parent_dir(Path::new("spec.yaml")), PathBuf::from("."));
        assert_eq!(parent_dir(Path::new("/a/b.yaml")), PathBuf::from("/a"));
    }

    #[test]
    fn events_name_what_happened() {
        assert_eq!(
            happened(EventMask::CLOSE_WRITE),
            [Happened::Closed],
            "closed after writing"
        );
        assert_eq!(
            happened(EventMask::CREATE | EventMask::ISDIR),
            [Happened::Created]
        );
        assert_eq!(happened(EventMask::MOVED_TO), [Happened::MovedIn]);
        assert_eq!(happened(EventMask::IGNORED), []);
        assert!(wakes_pods_dir("p.yaml".as_ref()));
        assert!(wakes_pods_dir("..data".as_ref()));
        assert!(!wakes_pods_dir(".p.yaml.tmp".as_ref()));
        assert!(!wakes_pods_dir("README".as_ref()));
    }

    #[tokio::test]
    async fn a_pod_file_written_closed_and_renamed_is_told_to_the_scan() {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = dir.path().join("status.yaml");
        let mut w = Wakeups::start(true, dir.path(), &[], &status);
        assert!(w.is_watched());
        let file = dir.path().join("p.yaml");
        let mut f = std::fs::File::create(&file).expect("create");
        f.write_all(b"chunk one").expect("write");
        f.flush().expect("flush");
        woken(&mut w).await;
        // The write finished before the drain, so the drain knows the file is open.
        assert_eq!(w.drain().news_of(&file).writing, Some(true));
        f.write_all(b"chunk two").expect("write");
        drop(f);
        let news = w.drain().news_of(&file);
        assert_eq!((news.changed, news.writing), (true, Some(false)));
        // A temp file wakes nothing; its rename in does, as a complete file.
        let tmp = dir.path().join(".q.yaml.tmp");
        std::fs::write(&tmp, "x").expect("write");
        assert_eq!(w.drain(), Changes::default());
        let q = dir.path().join("q.yaml");
        std::fs::rename(&tmp, &q).expect("rename");
        woken(&mut w).await;
        let changes = w.drain();
        assert!(changes.news_of(&q).complete);
        // Removal.
        std::fs::remove_file(&q).expect("remove");
        let news = w.drain().news_of(&q);
        assert_eq!((news.changed, news.complete), (true, false));
        // Nothing since: no news.
        assert_eq!(w.drain().news_of(&file), News::default());
    }

    #[tokio::test]
    async fn the_status_file_wakes_nothing_and_the_spec_file_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pods = dir.path().join("pods");
        std::fs::create_dir(&pods).expect("mkdir");
        let missing = dir.path().join("no-such-dir/cpu_manager_state");
        let spec = dir.path().join("spec.yaml");
        let status = dir.path().join("status.yaml");
        let mut w = Wakeups::start(true, &pods, &[&spec, &missing], &status);
        assert_eq!(w.unwatched(), [dir.path().join("no-such-dir")]);
        // The loop's own status write (temp file and rename), another file: nothing to wake
        // for. The events are queued by the writes themselves, so this read sees them all.
        nodetopo_kubelet::atomic::write(&status, b"x", None, false).expect("status");
        std::fs::write(dir.path().join("other.yaml"), "x").expect("other");
        let Wakeups::Watched(watch) = &mut w else {
            panic!("watched")
        };
        watch.read_queue();
        assert!(
            !watch.wake,
            "neither the status file nor another file wakes"
        );
        std::fs::write(&spec, "x").expect("spec");
        woken(&mut w).await;
        assert_eq!(
            w.drain(),
            Changes::default(),
            "the spec file wakes; it is no pod file"
        );
        assert_eq!(
            w.rescan(Duration::from_millis(50)),
            RESCAN_WATCHED,
            "watched: slow rescan"
        );
    }

    #[tokio::test]
    async fn when_notification_cannot_start_the_timer_is_the_poll() {
        let dir = tempfile::tempdir().expect("tempdir");
        let own = dir.path().join("status.yaml");
        let poll = Duration::from_millis(50);
        let hold = Duration::from_secs(10);
        // inotify_init1 failing (EMFILE: the per-user instance limit or no descriptors left).
        let w = Wakeups::start_on(Err(io::Error::from_raw_os_error(24)), dir.path(), &[], &own);
        let Wakeups::Polled { why } = &w else {
            panic!("polled")
        };
        assert!(
            why.contains("change notification unavailable (inotify_init1"),
            "{why}"
        );
        assert_eq!(w.rescan(poll), poll);
        assert_eq!(w.rule(Duration::from_millis(2), hold).quiet, Duration::ZERO);
        // A pods directory that cannot be watched (not there yet).
        let w = Wakeups::start(true, &dir.path().join("gone"), &[], &own);
        assert!(
            matches!(&w, Wakeups::Polled { why } if why.contains("cannot watch the pods directory")),
            "a pods directory that cannot be watched falls back to the poll"
        );
        // Disabled.
        let w = Wakeups::start(false, dir.path(), &[], &own);
        assert!(matches!(&w, Wakeups::Polled { why } if why.contains("--no-watch")));
    }

    #[tokio::test]
    async fn a_removed_pods_directory_turns_the_watch_into_the_poll() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pods = dir.path().join("pods");
        std::fs::create_dir(&pods).expect("mkdir");
        let mut w = Wakeups::start(true, &pods, &[], &dir.path().join("status.yaml"));
        assert!(w.is_watched());
        std::fs::remove_dir(&pods).expect("rmdir");
        woken(&mut w).await;
        let changes = w.drain();
        assert!(changes.lost, "everything counts as changed");
        assert!(
            matches!(&w, Wakeups::Polled { why } if why.contains("was removed or moved")),
            "polled from now on"
        );
    }
}
