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
use nodetopo_engine::CpuTopology;

use super::checkpoint;
use super::core::{Core, Event, PodInfo};
use super::cycle::{now, unix_now, Cycle};
use super::validate;
use super::metrics::{self, Metrics};
use super::Args;
use crate::pods::pods_from_yaml;

/// One pod file as last seen.
struct FileEntry {
    stamp: (Option<SystemTime>, u64),
    /// The pods of the last version that parsed, if any.
    good: Option<Vec<PodInfo>>,
    /// The error of the current version, if it does not parse.
    error: Option<String>,
}

/// Reads pod files and keeps the last good version of each.
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
    pods.iter().map(PodInfo::from_k8s).collect()
}

impl PodDir {
    /// Scans the directory: returns every pod in effect and the problems found.
    pub fn scan(&mut self, dir: &Path) -> Result<(Vec<PodInfo>, Vec<String>), String> {
        let rd =
            std::fs::read_dir(dir).map_err(|e| format!("pods directory {}: {e}", dir.display()))?;
        let mut seen = Vec::new();
        for entry in rd.flatten() {
            let path = entry.path();
            if !is_pod_file(&path) {
                continue;
            }
            let meta = match entry.metadata() {
                Ok(m) if m.is_file() => m,
                _ => continue,
            };
            let stamp = (meta.modified().ok(), meta.len());
            seen.push(path.clone());
            if self.files.get(&path).is_some_and(|f| f.stamp == stamp) {
                continue;
            }
            let parsed = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|t| pod_infos(&t));
            let prev = self.files.remove(&path).and_then(|f| f.good);
            let entry = match parsed {
                Ok(pods) => FileEntry {
                    stamp,
                    good: Some(pods),
                    error: None,
                },
                Err(e) => FileEntry {
                    stamp,
                    good: prev,
                    error: Some(format!("{}: {e}", path.display())),
                },
            };
            self.files.insert(path, entry);
        }
        self.files.retain(|p, _| seen.contains(p));
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
                } else {
                    pods.insert(p.pod.uid.clone(), p.clone());
                }
            }
        }
        Ok((pods.into_values().collect(), problems))
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
        let text = match std::fs::read_to_string(path) {
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

/// Loads the checkpoint at start and validates it against this machine; a rejected file
/// (unreadable, corrupt, or breaking an invariant) is moved aside, logged with its name, and
/// reported. Leftover temp files of earlier runs killed mid-write are removed first.
pub fn load_checkpoint(
    path: &Path,
    topology: &CpuTopology,
) -> (Option<checkpoint::CheckpointData>, Option<(String, String)>) {
    for stale in checkpoint::remove_stale_temp_files(path) {
        tracing::info!("removed a temp file left by an interrupted write: {}", stale.display());
    }
    let problem = match checkpoint::load(path) {
        Ok(None) => return (None, None),
        Ok(Some(data)) => match validate::checkpoint(path, &data, topology) {
            Ok(_) => return (Some(data), None),
            Err(v) => (v.invariant.checkpoint_reason(), v.to_string()),
        },
        Err(e) => (e.reason(), e.to_string()),
    };
    let (reason, msg) = problem;
    let aside = match checkpoint::quarantine(path, unix_now()) {
        Ok(p) => format!("kept as {}", p.display()),
        Err(q) => format!("could not be moved aside: {q}"),
    };
    // The event of local mode is a warning on stderr (cluster mode: a k8s Event).
    tracing::warn!(reason, file = %path.display(), "{msg}; {aside}");
    (None, Some((reason.to_string(), format!("{msg} ({aside})"))))
}

/// The local-mode loop until SIGTERM/SIGINT.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (Some(pods_dir), Some(spec_path), Some(status_path)) =
        (&args.pods_dir, &args.spec, &args.status_file)
    else {
        anyhow::bail!("--local needs --pods-dir, --spec and --status-file");
    };
    let topology = super::topology(&args)?;
    std::fs::create_dir_all(&args.state_dir)
        .with_context(|| format!("creating state directory {}", args.state_dir.display()))?;
    let cp_path = args.state_dir.join(checkpoint::FILE_NAME);
    let (restored, problem) = load_checkpoint(&cp_path, &topology);
    for stale in checkpoint::remove_stale_temp_files(status_path) {
        tracing::info!("removed a temp file left by an interrupted write: {}", stale.display());
    }
    let mut core = Core::new(topology.clone(), restored, problem);
    let metrics = Arc::new(Metrics::new());
    if !args.admin_addr.is_empty() {
        metrics::serve(&args.admin_addr, metrics.clone()).await?;
    }
    let mut dir = PodDir::default();
    let mut spec = SpecFile {
        last_text: None,
        counter: 0,
        name: "local".into(),
    };
    let mut cycle = Cycle::new(cp_path.clone());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let mut tick = tokio::time::interval(Duration::from_millis(args.poll_ms.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stop = tokio::select! {
            _ = tick.tick() => false,
            _ = term.recv() => true,
            _ = tokio::signal::ctrl_c() => true,
        };
        if stop {
            metrics.set_ready(false);
        }
        let started = std::time::Instant::now();
        // Pods first, so that a restored checkpoint meets the real pod list.
        match dir.scan(pods_dir) {
            Ok((pods, problems)) => {
                core.apply(Event::PodsSynced(pods));
                core.apply(Event::PodProblems(problems));
            }
            Err(e) => core.apply(Event::PodProblems(vec![e])),
        }
        if let Some(ev) = spec.read(spec_path) {
            core.apply(ev);
        }
        let kubelet = validate::read_kubelet_state(&args.kubelet_state, &topology);
        core.apply(Event::Kubelet(kubelet));
        if let Some(status) = cycle.run(&mut core, &metrics, &now()) {
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
                Ok(text) => match checkpoint::write_replace(status_path, text.as_bytes(), false) {
                    Ok(()) => cycle.published(status),
                    Err(e) => tracing::error!("status file {}: {e}", status_path.display()),
                },
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
