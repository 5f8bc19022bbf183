//! Local mode: the core on files. A pods directory (re-read when a file changes), a spec file
//! (a NodeTopology YAML), a status file (the whole NodeTopology object, written atomically).
//!
//! A pod file that does not parse (being written, or malformed) is reported in the
//! `PodsReadable` condition and skipped; if an earlier version of it parsed, that version
//! stays in effect, so a half-written file never releases anyone's CPUs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use nodetopo_crds::NodeTopology;
use nodetopo_kubelet::pods::pods_from_yaml;

use crate::daemon::checkpoint;
use crate::daemon::core::{Core, Event, PodInfo};
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
    /// The version last seen.
    stamp: Stamp,
    /// Whether that version was read (false: seen once, waiting to settle).
    read: bool,
    /// The pods of the last version that parsed, if any.
    good: Option<Vec<PodInfo>>,
    /// The error of the current version, if it does not parse or cannot be read.
    error: Option<String>,
}

/// Reads pod files and keeps the last good version of each.
///
/// A file is read only once it has settled: the same modification time, size and inode at
/// two consecutive scans, and unchanged across the read. The second scan comes the settle
/// time after the first (`--settle-ms`, with change notification; any further change to the
/// directory starts over) or one poll interval later (without). A file written in several
/// steps is therefore not admitted as it looked after the first step, as long as the steps
/// are less than that apart (writers that need more should write a temp file and rename
/// it, as the kubelet's ConfigMap writer does). Symlinks are followed, so the ConfigMap mount
/// layout (`pods.yaml -> ..data/pods.yaml`, `..data -> ..<timestamp>/`) works; names starting
/// with a dot are never pod files. Files that cannot be read (not a regular file, too large,
/// dangling symlink, no permission) or do not parse are reported and skipped; a file that
/// parsed before keeps its last good version in effect.
#[derive(Default)]
pub struct PodDir {
    files: BTreeMap<PathBuf, FileEntry>,
}

fn is_pod_file(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    !name.starts_with('.')
        && [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| name.ends_with(ext))
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
}

impl PodDir {
    /// Scans the directory: every pod in effect, the problems found, and whether every
    /// file has settled.
    pub fn scan(&mut self, dir: &Path) -> Result<Scan, String> {
        let rd =
            std::fs::read_dir(dir).map_err(|e| format!("pods directory {}: {e}", dir.display()))?;
        let mut seen = Vec::new();
        let mut settled = true;
        for entry in rd.flatten() {
            let path = entry.path();
            if !is_pod_file(&path) {
                continue;
            }
            seen.push(path.clone());
            // Follows symlinks (the ConfigMap layout); a dangling one is reported.
            let meta = match std::fs::metadata(&path) {
                Ok(m) => m,
                Err(e) => {
                    self.problem(&path, (None, 0, 0), format!("cannot be read: {e}"));
                    continue;
                }
            };
            if meta.is_dir() {
                seen.pop();
                continue;
            }
            let stamp = stamp_of(&meta);
            match self.files.get_mut(&path) {
                Some(f) if f.stamp == stamp && f.read => continue,
                Some(f) if f.stamp == stamp => {}
                Some(f) => {
                    // Changed since the last scan: wait one interval for it to settle.
                    f.stamp = stamp;
                    f.read = false;
                    settled = false;
                    continue;
                }
                None => {
                    self.files.insert(
                        path,
                        FileEntry {
                            stamp,
                            read: false,
                            good: None,
                            error: None,
                        },
                    );
                    settled = false;
                    continue;
                }
            }
            // Settled for one interval: read it, and use it only if it did not change
            // while being read.
            let read = read_text_bounded(&path, MAX_POD_FILE_BYTES);
            let after = std::fs::metadata(&path).map(|m| stamp_of(&m)).ok();
            if after != Some(stamp) {
                if let Some(f) = self.files.get_mut(&path) {
                    f.stamp = after.unwrap_or((None, 0, 0));
                    f.read = false;
                }
                settled = false;
                continue;
            }
            let parsed = match read {
                Ok(text) => pod_infos(&text),
                Err(e) => Err(format!("the file {e}")),
            };
            if let Some(f) = self.files.get_mut(&path) {
                f.read = true;
                match parsed {
                    Ok(pods) => {
                        f.good = Some(pods);
                        f.error = None;
                    }
                    Err(e) => f.error = Some(format!("{}: {e}", path.display())),
                }
            }
        }
        self.files.retain(|p, _| seen.contains(p));
        let (pods, problems) = self.in_effect();
        Ok(Scan {
            pods,
            problems,
            settled,
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
    fn problem(&mut self, path: &Path, stamp: Stamp, why: String) {
        let f = self.files.entry(path.to_path_buf()).or_insert(FileEntry {
            stamp,
            read: true,
            good: None,
            error: None,
        });
        f.stamp = stamp;
        f.read = true;
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
    /// With notification: how long a changed pod file must stay unchanged before it is read.
    pub settle: Duration,
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
    let wakeups = Wakeups::start(
        config.watch,
        pods_dir,
        &[spec_path.as_path(), kubelet_state.as_path()],
        status_path,
    );
    match &wakeups {
        Wakeups::Watched { unwatched, .. } => tracing::info!(
            "watching the pods directory and the spec file (settle {:?}; rescan every {:?}; not watched: {unwatched:?})",
            config.settle,
            wakeups.rescan(config.poll)
        ),
        Wakeups::Polled { why } => {
            tracing::info!("polling every {:?}: {why}", config.poll)
        }
    }
    let mut tick = tokio::time::interval(wakeups.rescan(config.poll));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When a pod file seen changed is looked at again (the settle rule's second look).
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
        match dir.scan(pods_dir) {
            Ok(scan) => {
                settle_at = match wakeups.settle(config.settle) {
                    Some(after) if !scan.settled => Some(tokio::time::Instant::now() + after),
                    _ => None,
                };
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
            let mut obj = NodeTopology::new(&spec.name, Default::default());
            if let Some(Event::Spec(Some((s, g)))) = spec
                .last_text
                .as_deref()
                .and_then(|t| serde_yaml::from_str::<NodeTopology>(t).ok())
                .map(|nt| Event::Spec(Some((nt.spec, nt.metadata.generation))))
            {
                obj.spec = s;
                obj.metadata.generation = g.or(status.observed_generation);
            }
            obj.status = Some(status.clone());
            match serde_yaml::to_string(&obj) {
                Ok(text) => {
                    match nodetopo_kubelet::atomic::write(status_path, text.as_bytes(), None, false)
                    {
                        Ok(()) => cycle.published(status),
                        Err(e) => tracing::error!("status file {}: {e}", status_path.display()),
                    }
                }
                Err(e) => tracing::error!("serialising the status: {e}"),
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
    use super::*;

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, uid: u}\nspec:\n  containers:\n  - name: app\n    resources: {limits: {cpu: \"2\", memory: 1Gi}}\n";
    const SECOND: &str = "  - name: side\n    resources: {limits: {cpu: \"2\", memory: 1Gi}}\n";

    fn containers(scan: &Scan) -> Vec<usize> {
        scan.pods.iter().map(|p| p.pod.containers.len()).collect()
    }

    #[test]
    fn a_file_written_in_two_steps_is_used_only_complete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("p.yaml");
        let mut d = PodDir::default();
        // Step one: a complete-looking pod with one container.
        std::fs::write(&file, POD).expect("write");
        let s = d.scan(dir.path()).expect("scan");
        assert!(
            !s.settled && s.pods.is_empty(),
            "not used before it settled"
        );
        // Step two, before the next scan: the second container.
        std::fs::write(&file, format!("{POD}{SECOND}")).expect("append");
        let s = d.scan(dir.path()).expect("scan");
        assert!(
            !s.settled && s.pods.is_empty(),
            "changed again: still settling"
        );
        let s = d.scan(dir.path()).expect("scan");
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
        d.scan(root).expect("scan");
        let s = d.scan(root).expect("scan");
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
        d.scan(root).expect("scan");
        let s = d.scan(root).expect("scan");
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
