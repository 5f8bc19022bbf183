//! Local mode: the core on files. A pods directory (re-read when a file changes), a spec file
//! (a NodeTopology YAML), a status file (the whole NodeTopology object, written atomically).
//!
//! A pod file that does not parse (being written, or malformed) is reported in the
//! `PodsReadable` condition and skipped; if an earlier version of it parsed, that version
//! stays in effect, so a half-written file never releases anyone's CPUs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use nodetopo_crds::{NodeTopology, NodeTopologyStatus};
use nodetopo_kubelet::pods::pods_from_yaml;

use crate::daemon::checkpoint;
use crate::daemon::core::{Core, Event};
use crate::daemon::inputs::pods::PodInfo;
use crate::daemon::inputs::settle::{self, is_pod_file, Changes, Rule, Seen, Verdict};
use crate::daemon::inputs::validate;
use crate::daemon::publish::metrics::{self, Metrics};
use crate::daemon::shells::cycle::{now, Cycle};
use crate::daemon::shells::watch::Wakeups;
use crate::daemon::shells::{restore, Node};
use nodetopo_engine::files::read_text_bounded;
use nodetopo_kubelet::pods::{MAX_PODS, MAX_POD_FILE_BYTES};
use nodetopo_runtime::shutdown::Shutdown;

/// Identity and version of a file as `stat` (following symlinks) reports it: modification
/// time, size and inode (a ConfigMap update swaps the `..data` symlink to new inodes).
type Stamp = (Option<SystemTime>, u64, u64);

/// One pod file as last seen.
struct FileEntry {
    /// The version last seen, when it changed, whether it was read (the settle rule's view).
    seen: Seen<Stamp>,
    /// The pods of the last version that parsed, if any.
    good: Option<Vec<PodInfo>>,
    /// The error of the current version, if it does not parse or cannot be read.
    error: Option<String>,
}

/// Reads pod files and keeps the last good version of each.
///
/// A file is read only once it has settled ([`settle::look`]: with change notification,
/// renamed in, or closed by its writer and quiet for `--settle-ms`; without, the same
/// modification time, size and inode at two consecutive scans) and only if it did not change
/// across the read. Symlinks are followed, so the ConfigMap mount
/// layout (`pods.yaml -> ..data/pods.yaml`, `..data -> ..<timestamp>/`) works; names starting
/// with a dot are never pod files. Files that cannot be read (not a regular file, too large,
/// dangling symlink, no permission) or do not parse are reported and skipped; a file that
/// parsed before keeps its last good version in effect.
#[derive(Default)]
pub struct PodDir {
    files: BTreeMap<PathBuf, FileEntry>,
}

/// Converts Kubernetes Pods (from YAML) into the core's pod records.
pub fn pod_infos(text: &str) -> Result<Vec<PodInfo>, String> {
    let pods = pods_from_yaml(text).map_err(|e| e.to_string())?;
    pods.iter()
        .map(|p| PodInfo::from_manifest(p).map_err(|e| e.to_string()))
        .collect()
}

fn stamp_of(meta: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    (meta.modified().ok(), meta.len(), meta.ino())
}

/// What one scan of the pods directory found.
pub struct Scan {
    /// Every pod in effect.
    pub pods: Vec<PodInfo>,
    /// Files that could not be used, with the reason.
    pub problems: Vec<String>,
    /// Whether every file was read (none is still settling).
    pub settled: bool,
    /// When the soonest settling file should be looked at again (none settling: `None`).
    pub look_again: Option<Duration>,
}

/// No stamp: the file could not be stat'ed.
const NO_STAMP: Stamp = (None, 0, 0);

impl PodDir {
    /// Scans the directory at `now`, with the events drained since the last scan
    /// (`changes`; none without notification) and the settle rule `rule`: every pod in
    /// effect, the problems found, whether every file has settled and when to look again.
    pub fn scan(
        &mut self,
        dir: &Path,
        changes: &Changes,
        now: Instant,
        rule: Rule,
    ) -> Result<Scan, String> {
        let rd =
            std::fs::read_dir(dir).map_err(|e| format!("pods directory {}: {e}", dir.display()))?;
        let mut present = BTreeSet::new();
        let mut look_again: Option<Duration> = None;
        let mut wait = |d: Duration| look_again = Some(look_again.map_or(d, |l| l.min(d)));
        for entry in rd.flatten() {
            let path = entry.path();
            if !is_pod_file(&path) {
                continue;
            }
            // Follows symlinks (the ConfigMap layout); a dangling one is reported.
            let meta = match std::fs::metadata(&path) {
                Ok(m) => m,
                Err(e) => {
                    present.insert(path.clone());
                    self.problem(&path, now, format!("cannot be read: {e}"));
                    continue;
                }
            };
            if meta.is_dir() {
                continue;
            }
            present.insert(path.clone());
            let stamp = stamp_of(&meta);
            let prev = self.files.get(&path).map(|f| f.seen.clone());
            let (seen, verdict) = settle::look(prev, stamp, changes.news_of(&path), now, rule);
            let f = self.files.entry(path.clone()).or_insert(FileEntry {
                seen: seen.clone(),
                good: None,
                error: None,
            });
            f.seen = seen;
            match verdict {
                Verdict::Keep => continue,
                Verdict::Wait(after) => {
                    wait(after);
                    continue;
                }
                Verdict::Read => {}
            }
            // Settled: read it, and use it only if it did not change while being read.
            let read = read_text_bounded(&path, MAX_POD_FILE_BYTES);
            let after = std::fs::metadata(&path).map_or(NO_STAMP, |m| stamp_of(&m));
            if after != stamp {
                f.seen = f.seen.clone().moved(after, now);
                wait(rule.quiet);
                continue;
            }
            let parsed = match read {
                Ok(text) => pod_infos(&text),
                Err(e) => Err(format!("the file {e}")),
            };
            {
                f.seen.read = true;
                match parsed {
                    Ok(pods) => {
                        f.good = Some(pods);
                        f.error = None;
                    }
                    Err(e) => f.error = Some(format!("{}: {e}", path.display())),
                }
            }
        }
        self.files.retain(|p, _| present.contains(p));
        let settled = self.files.values().all(|f| f.seen.read);
        let (pods, problems) = self.in_effect();
        Ok(Scan {
            pods,
            problems,
            settled,
            look_again,
        })
    }

    /// The pods of every file read (the first file defining a UID wins; at most
    /// [`MAX_PODS`]) and the problems: unreadable files, duplicates, pods over the limit.
    fn in_effect(&self) -> (Vec<PodInfo>, Vec<String>) {
        let mut pods: BTreeMap<String, PodInfo> = BTreeMap::new();
        let mut problems = Vec::new();
        for (path, f) in &self.files {
            problems.extend(f.error.clone());
            for p in f.good.iter().flatten() {
                if pods.contains_key(&p.pod.uid) {
                    problems.push(format!(
                        "{}: pod {} (uid {}) is already defined in another file; skipped",
                        path.display(),
                        p.pod.key(),
                        p.pod.uid
                    ));
                } else if pods.len() >= MAX_PODS {
                    problems.push(format!(
                        "{}: pod {} skipped: the directory holds more than {MAX_PODS} pods",
                        path.display(),
                        p.pod.key()
                    ));
                } else {
                    pods.insert(p.pod.uid.clone(), p.clone());
                }
            }
        }
        (pods.into_values().collect(), problems)
    }

    /// Records a file that cannot be read at all (its last good version stays in effect).
    fn problem(&mut self, path: &Path, now: Instant, why: String) {
        let seen = Seen {
            stamp: NO_STAMP,
            changed_at: now,
            writing: false,
            complete: false,
            read: true,
        };
        let f = self.files.entry(path.to_path_buf()).or_insert(FileEntry {
            seen: seen.clone(),
            good: None,
            error: None,
        });
        f.seen = seen;
        f.error = Some(format!("{}: {why}", path.display()));
    }
}

/// Reads the spec file: the spec, the generation (`metadata.generation`, else a local counter
/// bumped on every content change) and the object's name.
struct SpecFile {
    last_text: Option<String>,
    counter: i64,
    name: String,
}

impl SpecFile {
    fn read(&mut self, path: &Path) -> Option<Event> {
        let text = match read_text_bounded(path, MAX_POD_FILE_BYTES) {
            Ok(t) => t,
            Err(e) => {
                return Some(Event::SpecUnreadable(format!(
                    "spec file {}: {e}",
                    path.display()
                )))
            }
        };
        if self.last_text.as_deref() == Some(text.as_str()) {
            return None;
        }
        let parsed: Result<NodeTopology, _> = serde_yaml::from_str(&text);
        match parsed {
            Ok(nt) => {
                self.last_text = Some(text);
                self.counter += 1;
                if let Some(n) = &nt.metadata.name {
                    self.name.clone_from(n);
                }
                let generation = nt.metadata.generation.or(Some(self.counter));
                Some(Event::Spec(Some((nt.spec, generation))))
            }
            // Not remembered: re-read (and re-reported) until it parses.
            Err(e) => Some(Event::SpecUnreadable(format!(
                "spec file {}: {e}",
                path.display()
            ))),
        }
    }
}

/// Local mode's files.
#[derive(Debug, Clone)]
pub struct Config {
    /// Directory of Pod YAML files (Pods or workloads).
    pub pods_dir: PathBuf,
    /// A NodeTopology YAML file whose spec configures the node.
    pub spec: PathBuf,
    /// Where the NodeTopology object with its status is written (atomically).
    pub status_file: PathBuf,
    /// How often the files are re-read where change notification is off or unavailable.
    pub poll: Duration,
    /// Whether change notification is used (else the poll alone).
    pub watch: bool,
    /// With notification: how long a changed pod file (other than one renamed in) must stay
    /// quiet before it is read.
    pub settle: Duration,
    /// With notification: how long a pod file written and not closed is left unread after
    /// its last write (then read anyway: a writer that never closes it).
    pub write_hold: Duration,
}

/// The rescan (or poll) timer; a late tick is not made up for.
fn ticker(period: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

fn log_wakeups(wakeups: &Wakeups, config: &Config) {
    match wakeups {
        Wakeups::Watched(_) => tracing::info!(
            "watching the pods directory and the spec file (settle {:?}, write hold {:?}; rescan every {:?}; not watched: {:?})",
            config.settle,
            config.write_hold,
            wakeups.rescan(config.poll),
            wakeups.unwatched(),
        ),
        Wakeups::Polled { why } => {
            tracing::info!("polling every {:?}: {why}", config.poll)
        }
    }
}

/// Writes `status` into the status file as a whole NodeTopology (the spec file's spec and
/// generation beside it), atomically. The error names the file.
fn write_status_file(
    status_path: &Path,
    spec: &SpecFile,
    status: &NodeTopologyStatus,
) -> Result<(), String> {
    let mut obj = NodeTopology::new(&spec.name, Default::default());
    if let Some(nt) = spec
        .last_text
        .as_deref()
        .and_then(|t| serde_yaml::from_str::<NodeTopology>(t).ok())
    {
        obj.spec = nt.spec;
        obj.metadata.generation = nt.metadata.generation.or(status.observed_generation);
    }
    obj.status = Some(status.clone());
    let text = serde_yaml::to_string(&obj).map_err(|e| format!("serialising the status: {e}"))?;
    nodetopo_kubelet::atomic::write(status_path, text.as_bytes(), None, false)
        .map_err(|e| format!("status file {}: {e}", status_path.display()))
}

/// The local-mode loop until SIGTERM/SIGINT.
pub async fn run(node: Node, config: Config) -> anyhow::Result<ExitCode> {
    let Node {
        topology,
        state_dir,
        kubelet_state,
        admin_addr,
    } = node;
    let (pods_dir, spec_path, status_path) = (&config.pods_dir, &config.spec, &config.status_file);
    std::fs::create_dir_all(&state_dir)
        .with_context(|| format!("creating state directory {}", state_dir.display()))?;
    let cp_path = state_dir.join(checkpoint::FILE_NAME);
    let (restored, problem) = restore::load_checkpoint(&cp_path, &topology);
    for stale in nodetopo_kubelet::atomic::remove_stale_temps(status_path) {
        tracing::info!(
            "removed a temp file left by an interrupted write: {}",
            stale.display()
        );
    }
    let mut core = Core::new(topology.clone(), restored, problem);
    let metrics = Arc::new(Metrics::new());
    if !admin_addr.is_empty() {
        metrics::serve(&admin_addr, metrics.clone()).await?;
    }
    let mut dir = PodDir::default();
    let mut synced_once = false;
    let mut spec = SpecFile {
        last_text: None,
        counter: 0,
        name: "local".into(),
    };
    let mut cycle = Cycle::new(cp_path.clone());
    let shutdown = Shutdown::on_signals();
    let mut wakeups = Wakeups::start(
        config.watch,
        pods_dir,
        &[spec_path.as_path(), kubelet_state.as_path()],
        status_path,
    );
    log_wakeups(&wakeups, &config);
    let mut period = wakeups.rescan(config.poll);
    let mut tick = ticker(period);
    // When a settling pod file is looked at again (the settle rule's next look).
    let mut settle_at: Option<tokio::time::Instant> = None;
    loop {
        let settled_check = async {
            match settle_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let stop = tokio::select! {
            _ = tick.tick() => false,
            _ = wakeups.changed() => false,
            _ = settled_check => false,
            _ = shutdown.requested() => true,
        };
        // Every event up to now, read before the scan stats the files.
        let changes = wakeups.drain();
        if wakeups.rescan(config.poll) != period {
            // The watch broke (the pods directory went away): poll from now on.
            log_wakeups(&wakeups, &config);
            period = wakeups.rescan(config.poll);
            tick = ticker(period);
        }
        if stop {
            metrics.stopping();
        }
        let span = cycle.span();
        let _in_cycle = span.enter();
        let started = std::time::Instant::now();
        // Pods first, so that a restored checkpoint meets the real pod list.
        // The first pod list waits until every file has settled: a restored allocation must
        // never be released because its pod's file was still being written. Later, a
        // settling file counts with its last good version (or not yet, when new).
        let looked = tokio::time::Instant::now();
        let rule = wakeups.rule(config.settle, config.write_hold);
        settle_at = None;
        match dir.scan(pods_dir, &changes, looked.into_std(), rule) {
            Ok(scan) => {
                // Without notification the next poll is the next look.
                if wakeups.is_watched() {
                    settle_at = scan.look_again.map(|after| looked + after);
                }
                if scan.settled || synced_once {
                    synced_once = true;
                    core.apply(Event::PodsSynced(scan.pods));
                }
                core.apply(Event::PodProblems(scan.problems));
            }
            Err(e) => core.apply(Event::PodProblems(vec![e])),
        }
        if let Some(ev) = spec.read(spec_path) {
            core.apply(ev);
        }
        let kubelet = validate::read_kubelet_state(&kubelet_state, &topology);
        core.apply(Event::Kubelet(kubelet));
        core.apply(Event::KubeletMemory(validate::read_memory_state(
            &kubelet_state,
        )));
        let status = cycle.run(&mut core, &metrics, &now());
        // No API server for Events here: the explanations are logged (and in the status).
        for r in core.take_new_explanations() {
            if let Some(e) = &r.explanation {
                tracing::warn!(pod = %r.pod, reason = %r.reason, "admission failure explained: {}", e.summary);
            }
        }
        if let Some(status) = status {
            match write_status_file(status_path, &spec, &status) {
                Ok(()) => cycle.published(status),
                Err(e) => tracing::error!("{e}"),
            }
        }
        metrics.observe(&core, started.elapsed());
        if stop {
            tracing::info!("stopping: state and status flushed");
            return Ok(ExitCode::SUCCESS);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;
    use crate::daemon::inputs::settle::tests::{ms, POLLED, WATCHED};
    use crate::daemon::shells::watch::Wakeups;

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, uid: u}\nspec:\n  containers:\n  - name: app\n    resources: {limits: {cpu: \"2\", memory: 1Gi}}\n";
    const SECOND: &str = "  - name: side\n    resources: {limits: {cpu: \"2\", memory: 1Gi}}\n";

    fn containers(scan: &Scan) -> Vec<usize> {
        scan.pods.iter().map(|p| p.pod.containers.len()).collect()
    }

    fn uids(scan: &Scan) -> Vec<&str> {
        scan.pods.iter().map(|p| p.pod.uid.as_str()).collect()
    }

    /// A pod of one container whose name and uid end in `n` (two digits: every version has
    /// the same size).
    fn pod(n: u32) -> String {
        POD.replace(
            "{name: p, uid: u}",
            &format!("{{name: p{n:02}, uid: u{n:02}}}"),
        )
    }

    /// A pods directory watched as `run --local` watches it, and its scanner; time is an
    /// input (`at`, milliseconds after `t0`).
    struct Watched {
        dir: tempfile::TempDir,
        wakeups: Wakeups,
        pods: PodDir,
        t0: Instant,
    }

    impl Watched {
        fn new() -> Watched {
            let dir = tempfile::tempdir().expect("tempdir");
            let own = dir.path().join("status.yaml");
            let wakeups = Wakeups::start(true, dir.path(), &[], &own);
            assert!(wakeups.is_watched(), "inotify on a temp directory");
            Watched {
                dir,
                wakeups,
                pods: PodDir::default(),
                t0: Instant::now(),
            }
        }
        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }
        /// Drains the events (everything written so far) and scans.
        fn scan(&mut self, at: u64) -> Scan {
            let changes = self.wakeups.drain();
            self.pods
                .scan(self.dir.path(), &changes, self.t0 + ms(at), WATCHED)
                .expect("scan")
        }
        /// A complete file, renamed in.
        fn rename_in(&self, name: &str, text: &str) {
            let tmp = self.path(&format!(".{name}.tmp"));
            std::fs::write(&tmp, text).expect("write");
            std::fs::rename(tmp, self.path(name)).expect("rename");
        }
    }

    #[tokio::test]
    async fn a_file_written_in_chunks_is_read_only_once_closed() {
        let mut w = Watched::new();
        let mut f = std::fs::File::create(w.path("p.yaml")).expect("create");
        // Chunk one: a complete-looking pod with one container; the writer keeps the file.
        f.write_all(POD.as_bytes()).expect("write");
        for at in [0, 3, 100, 5_000, 9_999] {
            let s = w.scan(at);
            assert!(
                !s.settled && s.pods.is_empty(),
                "at {at} ms: not read while its writer has it open"
            );
            assert_eq!(s.look_again, Some(ms(10_000 - at)), "at {at} ms");
        }
        // Chunk two, in two writes, and the close.
        let (a, b) = SECOND.split_at(10);
        f.write_all(a.as_bytes()).expect("write");
        let s = w.scan(10_001);
        assert!(s.pods.is_empty(), "written again: the hold starts over");
        f.write_all(b.as_bytes()).expect("write");
        drop(f);
        let s = w.scan(10_002);
        assert!(s.pods.is_empty(), "closed: quiet time first");
        assert_eq!(s.look_again, Some(ms(2)));
        let s = w.scan(10_004);
        assert!(s.settled);
        assert_eq!(containers(&s), [2], "only the complete file is used");
        assert!(s.problems.is_empty(), "{:?}", s.problems);
    }

    #[tokio::test]
    async fn a_burst_of_changes_ends_in_the_last_state() {
        let mut w = Watched::new();
        w.rename_in("main.yaml", &pod(0));
        assert_eq!(uids(&w.scan(0)), ["u00"], "renamed in: read at once");
        // Forty rewrites in place, all of one size, other files added and removed between,
        // a scan now and then.
        for n in 1..=40u32 {
            std::fs::write(w.path("main.yaml"), pod(n)).expect("rewrite");
            w.rename_in(&format!("x{n}.yaml"), &pod(100 + n));
            if n % 2 == 0 {
                std::fs::remove_file(w.path(&format!("x{}.yaml", n - 1))).expect("remove");
            }
            if n % 7 == 0 {
                w.scan(u64::from(n));
            }
        }
        w.scan(41);
        let s = w.scan(50);
        assert!(s.settled);
        let mut want: Vec<String> = (2..=40)
            .step_by(2)
            .map(|n| format!("u{}", 100 + n))
            .collect();
        want.push("u40".into());
        want.sort();
        let mut got: Vec<&str> = uids(&s);
        got.sort();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn a_rewrite_that_keeps_the_stamp_is_read_again() {
        // `cp -p` or `rsync -t` over a file of the same size: same inode, size and
        // modification time. Only the events tell.
        let mut w = Watched::new();
        let file = w.path("main.yaml");
        std::fs::write(&file, pod(1)).expect("write");
        w.scan(0);
        assert_eq!(uids(&w.scan(2)), ["u01"]);
        let mtime = std::fs::metadata(&file)
            .and_then(|m| m.modified())
            .expect("mtime");
        let before = stamp_of(&std::fs::metadata(&file).expect("stat"));
        std::fs::write(&file, pod(2)).expect("rewrite");
        std::fs::File::options()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_modified(mtime))
            .expect("set mtime");
        assert_eq!(stamp_of(&std::fs::metadata(&file).expect("stat")), before);
        w.scan(10);
        assert_eq!(uids(&w.scan(12)), ["u02"]);
    }

    #[tokio::test]
    async fn a_removed_file_is_seen() {
        let mut w = Watched::new();
        w.rename_in("a.yaml", &pod(1));
        w.rename_in("b.yaml", &pod(2));
        assert_eq!(uids(&w.scan(0)), ["u01", "u02"]);
        std::fs::remove_file(w.path("a.yaml")).expect("remove");
        let s = w.scan(1);
        assert_eq!(uids(&s), ["u02"]);
        assert!(s.settled && s.problems.is_empty(), "{:?}", s.problems);
    }

    #[test]
    fn polled_a_file_written_in_two_steps_is_used_only_complete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("p.yaml");
        let mut d = PodDir::default();
        let t0 = Instant::now();
        let mut scan = |at: u64| {
            d.scan(dir.path(), &Changes::default(), t0 + ms(at), POLLED)
                .expect("scan")
        };
        // Step one: a complete-looking pod with one container.
        std::fs::write(&file, POD).expect("write");
        let s = scan(0);
        assert!(
            !s.settled && s.pods.is_empty(),
            "not used before it settled"
        );
        // Step two, before the next poll: the second container.
        std::fs::write(&file, format!("{POD}{SECOND}")).expect("append");
        let s = scan(50);
        assert!(
            !s.settled && s.pods.is_empty(),
            "changed again: still settling"
        );
        let s = scan(100);
        assert!(s.settled);
        assert_eq!(containers(&s), [2], "only the complete file is used");
        assert!(s.problems.is_empty(), "{:?}", s.problems);
    }

    #[test]
    fn configmap_layout_is_followed_and_unreadable_files_reported() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        // The kubelet's atomic writer: ..<timestamp>/ with the data, ..data -> it, and one
        // symlink per key through ..data.
        let v1 = root.join("..2024_01_01_00_00_00.1");
        std::fs::create_dir(&v1).expect("mkdir");
        std::fs::write(v1.join("pods.yaml"), POD).expect("write");
        symlink("..2024_01_01_00_00_00.1", root.join("..data")).expect("..data");
        symlink("..data/pods.yaml", root.join("pods.yaml")).expect("key");
        // A FIFO and a dangling symlink where pod files should be: reported, never a hang.
        let fifo = root.join("fifo.yaml");
        let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("cstr");
        // SAFETY: mkfifo on a valid NUL-terminated path; the result is checked.
        assert_eq!(unsafe { libc_mkfifo(c.as_ptr()) }, 0);
        symlink("nowhere.yaml", root.join("dangling.yaml")).expect("dangling");
        let mut d = PodDir::default();
        let t0 = Instant::now();
        let mut scan = |at: u64| {
            d.scan(root, &Changes::default(), t0 + ms(at), POLLED)
                .expect("scan")
        };
        scan(0);
        let s = scan(50);
        assert_eq!(containers(&s), [1]);
        let problems = s.problems.join("; ");
        assert!(
            problems.contains("fifo.yaml: the file is not a regular file (it is a FIFO)"),
            "{problems}"
        );
        assert!(
            problems.contains("dangling.yaml: cannot be read"),
            "{problems}"
        );
        // An update swaps ..data to a new directory: the new version is picked up.
        let v2 = root.join("..2024_01_01_00_00_01.2");
        std::fs::create_dir(&v2).expect("mkdir");
        std::fs::write(v2.join("pods.yaml"), format!("{POD}{SECOND}")).expect("write");
        symlink("..2024_01_01_00_00_01.2", root.join("..data_tmp")).expect("tmp");
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap");
        scan(100);
        let s = scan(150);
        assert_eq!(containers(&s), [2]);
    }

    extern "C" {
        fn mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
    }

    unsafe fn libc_mkfifo(path: *const std::ffi::c_char) -> i32 {
        // SAFETY: forwarded from the caller.
        unsafe { mkfifo(path, 0o600) }
    }
}
