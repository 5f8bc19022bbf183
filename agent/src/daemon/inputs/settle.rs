//! When local mode reads a pod file: the settle rule, on plain values.
//!
//! A pod file can be caught while it is being written, and a half-written file may well
//! parse (a pod with one container of its two). Local mode therefore reads a file only once
//! it has settled. What "settled" means depends on what the shell can know:
//!
//! - With change notification the shell reports what happened to each file since the last
//!   look ([`Happened`], folded into [`News`]). A file renamed into the directory is complete
//!   and read at once. A file written and not yet closed is left alone until its writer
//!   closes it (or has not touched it for [`Rule::write_hold`], for a writer that never
//!   closes). Anything else (closed after writing, created, touched, changed without an
//!   event naming it such as a ConfigMap's `..data` swap) is read once it has been quiet for
//!   [`Rule::quiet`] (`--settle-ms`): a writer that closes and reopens within that time is
//!   not caught in between.
//! - Without notification (polling) the only evidence is the file's stamp (modification
//!   time, size, inode): a file is read when it looks the same at two consecutive looks
//!   ([`Rule::quiet`] zero; the next poll is the second look).
//!
//! Expected flow: the shell drains the events, then stats each file and calls [`look`] with
//! the file as last seen, its stamp, its news and the current time; it reads the file on
//! [`Verdict::Read`] and uses what it read only if the stamp did not change across the read
//! (else [`Seen::moved`]). Time is an input: nothing here reads the clock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Whether a name in the pods directory is a pod file: `.yaml`, `.yml` or `.json`, and not a
/// dot file (temp files, a ConfigMap's `..data`).
pub fn is_pod_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    !name.starts_with('.')
        && [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

/// What change notification saw happen to one file (one inotify event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Happened {
    /// A new name (`IN_CREATE`): a file, a link, possibly about to be written.
    Created,
    /// Data written or truncated (`IN_MODIFY`): a writer has it open.
    Written,
    /// Closed by a writer (`IN_CLOSE_WRITE`).
    Closed,
    /// Renamed into the directory (`IN_MOVED_TO`): complete as its writer left it.
    MovedIn,
    /// Removed or renamed away (`IN_DELETE`, `IN_MOVED_FROM`).
    Gone,
    /// Metadata changed (`IN_ATTRIB`: `touch`, `chmod`, a new link count).
    Touched,
    /// Events were dropped (`IN_Q_OVERFLOW`): anything may have happened.
    Lost,
}

/// What the events since the last look say about one file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct News {
    /// Something happened to it (even if its stamp looks the same: two writes of the same
    /// size within one tick of the file system's clock).
    pub changed: bool,
    /// Whether a writer holds it open after the last event: `Some(true)` after a write not
    /// yet closed, `Some(false)` after a close, a rename into the directory, a creation, a
    /// removal or lost events, `None` when no event said either.
    pub writing: Option<bool>,
    /// The last event was a rename into the directory: the file is complete.
    pub complete: bool,
}

impl News {
    /// The news after one more event.
    pub fn add(&mut self, happened: Happened) {
        self.changed = true;
        self.complete = happened == Happened::MovedIn;
        match happened {
            Happened::Written => self.writing = Some(true),
            Happened::Created
            | Happened::Closed
            | Happened::MovedIn
            | Happened::Gone
            | Happened::Lost => self.writing = Some(false),
            Happened::Touched => {}
        }
    }

    /// The news of a sequence of events, oldest first.
    #[cfg(test)]
    pub fn of(events: &[Happened]) -> News {
        let mut news = News::default();
        for &h in events {
            news.add(h);
        }
        news
    }
}

/// The news of every file since the last look, as the shell drained it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// By path (the watched directory joined with the event's name).
    pub files: BTreeMap<PathBuf, News>,
    /// Events were dropped after these (queue overflow, a read error): every file counts
    /// as changed and no writer as known.
    pub lost: bool,
}

impl Changes {
    /// Records one event.
    pub fn add(&mut self, path: PathBuf, happened: Happened) {
        self.files.entry(path).or_default().add(happened);
    }

    /// The news of one file.
    pub fn news_of(&self, path: &Path) -> News {
        let mut news = self.files.get(path).copied().unwrap_or_default();
        if self.lost {
            news.add(Happened::Lost);
        }
        news
    }
}

/// The waits of the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// How long a changed file must stay quiet (no event, same stamp) before it is read;
    /// zero when polling, where a change is read at the look after the one that saw it.
    pub quiet: Duration,
    /// How long a file written and not closed is left unread after its last change before
    /// it is read anyway (a writer that keeps it open for good).
    pub write_hold: Duration,
}

/// One file as last looked at; `S` is its stamp (what `stat` says about its version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen<S> {
    /// The stamp at the last look.
    pub stamp: S,
    /// When it was last seen changing (a new stamp or an event).
    pub changed_at: Instant,
    /// A writer holds it open (written, not closed), as far as the events tell.
    pub writing: bool,
    /// Its last event was a rename into the directory.
    pub complete: bool,
    /// The version with this stamp has been read.
    pub read: bool,
}

impl<S> Seen<S> {
    /// The file after a read during which its stamp changed to `stamp`: a fresh change.
    pub fn moved(self, stamp: S, now: Instant) -> Seen<S> {
        Seen {
            stamp,
            changed_at: now,
            complete: false,
            read: false,
            ..self
        }
    }
}

/// What to do with a file at this look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The version in effect is current: nothing to read.
    Keep,
    /// Settled: read it now.
    Read,
    /// Not settled: look again after this long at the latest (an event may come sooner).
    Wait(Duration),
}

/// The settle rule: how the file looks now, given how it looked at the last look (`None`:
/// never seen), its stamp now and the events since; returns the file as seen now and what to
/// do with it.
pub fn look<S: PartialEq>(
    prev: Option<Seen<S>>,
    stamp: S,
    news: News,
    now: Instant,
    rule: Rule,
) -> (Seen<S>, Verdict) {
    let changed = news.changed || prev.as_ref().is_none_or(|p| p.stamp != stamp);
    let seen = match prev {
        Some(prev) if !changed => prev,
        prev => Seen {
            stamp,
            changed_at: now,
            writing: news
                .writing
                .unwrap_or_else(|| prev.is_some_and(|p| p.writing)),
            complete: news.complete,
            read: false,
        },
    };
    let verdict = if seen.read {
        Verdict::Keep
    } else {
        let quiet_for = now.saturating_duration_since(seen.changed_at);
        if seen.writing {
            wait_or_read(changed, quiet_for, rule.write_hold)
        } else if seen.complete {
            Verdict::Read
        } else {
            wait_or_read(changed, quiet_for, rule.quiet)
        }
    };
    (seen, verdict)
}

/// Read once quiet for `wait`, and never at the look that saw the change (without
/// notification that look is the first of the two).
fn wait_or_read(changed_now: bool, quiet_for: Duration, wait: Duration) -> Verdict {
    if !changed_now && quiet_for >= wait {
        Verdict::Read
    } else {
        Verdict::Wait(wait.saturating_sub(quiet_for))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use Happened::*;

    /// The rules the settle tests use (also local.rs's): watched (2 ms quiet) and polled.
    pub(crate) const WATCHED: Rule = Rule {
        quiet: Duration::from_millis(2),
        write_hold: Duration::from_secs(10),
    };
    pub(crate) const POLLED: Rule = Rule {
        quiet: Duration::ZERO,
        write_hold: Duration::from_secs(10),
    };

    pub(crate) fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Looks at one file in turn: (milliseconds since the start, stamp, events since the
    /// last look); returns the verdicts.
    fn looks(rule: Rule, steps: &[(u64, u32, &[Happened])]) -> Vec<Verdict> {
        let t0 = Instant::now();
        let mut seen = None;
        let mut verdicts = Vec::new();
        for &(at, stamp, events) in steps {
            let (s, v) = look(seen.take(), stamp, News::of(events), t0 + ms(at), rule);
            // What the shell does on Read (the stamp did not move during the read).
            seen = Some(Seen {
                read: s.read || v == Verdict::Read,
                ..s
            });
            verdicts.push(v);
        }
        verdicts
    }

    #[test]
    fn news_folds_to_the_last_event() {
        assert_eq!(News::of(&[]), News::default());
        let writing = News::of(&[Created, Written, Written]);
        assert_eq!((writing.writing, writing.complete), (Some(true), false));
        assert_eq!(News::of(&[Written, Closed]).writing, Some(false));
        let renamed = News::of(&[Gone, MovedIn]);
        assert_eq!((renamed.writing, renamed.complete), (Some(false), true));
        // Written again after the rename: no longer complete.
        let after = News::of(&[MovedIn, Written]);
        assert_eq!((after.writing, after.complete), (Some(true), false));
        // A touch says nothing about a writer.
        assert_eq!(News::of(&[Touched]).writing, None);
        assert_eq!(News::of(&[Written, Touched]).writing, Some(true));
        assert!(News::of(&[Touched]).changed);
    }

    #[test]
    fn lost_events_make_every_file_changed_with_no_writer_known() {
        let mut c = Changes::default();
        c.add(PathBuf::from("/p/a.yaml"), Written);
        assert_eq!(c.news_of(Path::new("/p/a.yaml")).writing, Some(true));
        assert!(!c.news_of(Path::new("/p/b.yaml")).changed);
        c.lost = true;
        let a = c.news_of(Path::new("/p/a.yaml"));
        assert_eq!(
            (a.changed, a.writing, a.complete),
            (true, Some(false), false)
        );
        assert!(c.news_of(Path::new("/p/b.yaml")).changed);
    }

    #[test]
    fn a_file_renamed_in_is_read_at_once() {
        assert_eq!(looks(WATCHED, &[(0, 1, &[MovedIn])]), [Verdict::Read]);
        // Also when it replaces a version already read.
        assert_eq!(
            looks(WATCHED, &[(0, 1, &[MovedIn]), (5, 2, &[Gone, MovedIn])]),
            [Verdict::Read, Verdict::Read]
        );
    }

    #[test]
    fn a_file_open_for_writing_is_not_read_until_closed() {
        let v = looks(
            WATCHED,
            &[
                (0, 1, &[Created, Written]),
                // Chunk one is on disk; the writer is still at work, for any quiet time.
                (3, 1, &[]),
                (500, 1, &[]),
                (9_000, 1, &[]),
                // Chunk two, then close: read once quiet.
                (9_001, 2, &[Written, Closed]),
                (9_002, 2, &[]),
                (9_003, 2, &[]),
                (9_004, 2, &[]),
            ],
        );
        assert_eq!(
            v,
            [
                Verdict::Wait(ms(10_000)),
                Verdict::Wait(ms(9_997)),
                Verdict::Wait(ms(9_500)),
                Verdict::Wait(ms(1_000)),
                Verdict::Wait(ms(2)),
                Verdict::Wait(ms(1)),
                Verdict::Read,
                Verdict::Keep,
            ]
        );
    }

    #[test]
    fn a_writer_that_never_closes_is_read_after_the_hold() {
        let v = looks(
            WATCHED,
            &[(0, 1, &[Written]), (9_999, 1, &[]), (10_000, 1, &[])],
        );
        assert_eq!(
            v,
            [
                Verdict::Wait(ms(10_000)),
                Verdict::Wait(ms(1)),
                Verdict::Read
            ]
        );
        // A write in between starts the hold over.
        let v = looks(
            WATCHED,
            &[(0, 1, &[Written]), (6_000, 2, &[Written]), (10_000, 2, &[])],
        );
        assert_eq!(v[2], Verdict::Wait(ms(6_000)));
    }

    #[test]
    fn every_event_starts_the_quiet_time_over() {
        let v = looks(
            WATCHED,
            &[
                (0, 1, &[Written, Closed]),
                (1, 2, &[Written, Closed]),
                (2, 3, &[Written, Closed]),
                (3, 3, &[]),
                (4, 3, &[]),
            ],
        );
        assert_eq!(
            v,
            [
                Verdict::Wait(ms(2)),
                Verdict::Wait(ms(2)),
                Verdict::Wait(ms(2)),
                Verdict::Wait(ms(1)),
                Verdict::Read
            ]
        );
    }

    #[test]
    fn a_rewrite_with_the_same_stamp_is_read_again() {
        // Same size within one tick of the file system's clock: only the event tells.
        let v = looks(
            WATCHED,
            &[(0, 1, &[MovedIn]), (5, 1, &[Written, Closed]), (8, 1, &[])],
        );
        assert_eq!(v, [Verdict::Read, Verdict::Wait(ms(2)), Verdict::Read]);
    }

    #[test]
    fn a_change_without_an_event_waits_for_the_quiet_time() {
        // A ConfigMap's `..data` swap: the event names `..data`, the pod file's stamp moves.
        let v = looks(
            WATCHED,
            &[
                (0, 1, &[]),
                (2, 1, &[]),
                (10, 2, &[]),
                (11, 2, &[]),
                (12, 2, &[]),
            ],
        );
        assert_eq!(
            v,
            [
                Verdict::Wait(ms(2)),
                Verdict::Read,
                Verdict::Wait(ms(2)),
                Verdict::Wait(ms(1)),
                Verdict::Read
            ]
        );
    }

    #[test]
    fn polled_a_file_is_read_when_it_looks_the_same_at_two_looks() {
        let v = looks(
            POLLED,
            &[
                (0, 1, &[]),
                (50, 2, &[]),
                (100, 2, &[]),
                (150, 2, &[]),
                (200, 3, &[]),
                (250, 3, &[]),
            ],
        );
        assert_eq!(
            v,
            [
                Verdict::Wait(ms(0)),
                Verdict::Wait(ms(0)),
                Verdict::Read,
                Verdict::Keep,
                Verdict::Wait(ms(0)),
                Verdict::Read
            ]
        );
    }

    #[test]
    fn a_stamp_moving_during_the_read_is_a_fresh_change() {
        let t0 = Instant::now();
        let (s, v) = look(None, 1, News::of(&[MovedIn]), t0, WATCHED);
        assert_eq!(v, Verdict::Read);
        let s = s.moved(2, t0 + ms(1));
        assert!(!s.read && !s.complete);
        let (_, v) = look(Some(s), 2, News::default(), t0 + ms(2), WATCHED);
        assert_eq!(v, Verdict::Wait(ms(1)));
    }
}
