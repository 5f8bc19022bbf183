//! Evaluation of test-vector files in the `shared/vectors` schema.
//!
//! One code path serves the `nodetopo-agent conformance` command and the engine's own test
//! suite: a file's JSON goes in, one [`CaseResult`] per case comes out. Which evaluator runs is
//! chosen by the file name (`cpumanager-*.json`, `topologymanager-*.json`); the
//! `cpumanager-topologies*.json` files hold machines, not cases.
//!
//! Machines named by cases are looked up, in this order of precedence: a top-level
//! `topologies` object inside the case file itself, `cpumanager-topologies*.json` files given
//! among the paths, and `cpumanager-topologies*.json` files in the case file's directory.

pub mod cpumanager;
pub mod topologymanager;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::topology::CpuTopology;

/// The outcome of one vector case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseResult {
    /// `<array>[<index>] <name or source>`: enough to find the case in its file.
    pub case: String,
    /// `None` when the case passed, else what differed (expected versus got).
    pub failure: Option<String>,
}

/// The results of one case file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileResult {
    /// The file's path as given (or as found in a directory).
    pub file: String,
    /// One result per case.
    pub cases: Vec<CaseResult>,
    /// Set when the file could not be evaluated at all (then `cases` is empty); the other
    /// files still run.
    pub error: Option<String>,
}

/// Why a vector file could not be evaluated at all.
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    /// The file is not JSON, or lacks the fields its schema needs.
    #[error("{file}: {reason}")]
    Malformed {
        /// The file name.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// The file name matches no known vector kind.
    #[error("{0}: not a known vector file (expected cpumanager-*.json or topologymanager-*.json)")]
    UnknownKind(String),
    /// The file or directory could not be read.
    #[error("{file}: {reason}")]
    Io {
        /// The path.
        file: String,
        /// The I/O error.
        reason: String,
    },
}

/// Machines by name, as the `cpumanager-topologies*.json` files (or a case file's top-level
/// `topologies` object) define them, with their declared counts.
pub type Topologies = BTreeMap<String, CpuTopology>;

/// What kind of vector file a name denotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `cpumanager-topologies*.json`: machine definitions only.
    CpuManagerTopologies,
    /// Any other `cpumanager-*.json`.
    CpuManager,
    /// `topologymanager-*.json`.
    TopologyManager,
}

/// Classifies a vector file by its base name.
pub fn file_kind(file_name: &str) -> Option<FileKind> {
    if !file_name.ends_with(".json") {
        return None;
    }
    if file_name.starts_with("cpumanager-topologies") {
        Some(FileKind::CpuManagerTopologies)
    } else if file_name.starts_with("cpumanager-") {
        Some(FileKind::CpuManager)
    } else if file_name.starts_with("topologymanager-") {
        Some(FileKind::TopologyManager)
    } else {
        None
    }
}

fn base_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reads and parses a JSON file; errors name the file.
pub fn read_json(path: &Path) -> Result<serde_json::Value, ConformanceError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConformanceError::Io {
        file: file.clone(),
        reason: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| ConformanceError::Malformed {
        file,
        reason: format!("not valid JSON: {e}"),
    })
}

/// The `cpumanager-topologies*.json` files in a directory, sorted by name.
fn topology_files_in(dir: &Path) -> Result<Vec<PathBuf>, ConformanceError> {
    Ok(json_files_in(dir)?
        .into_iter()
        .filter(|p| file_kind(&base_name(p)) == Some(FileKind::CpuManagerTopologies))
        .collect())
}

/// Every `*.json` file of a directory that is a known vector kind, sorted by name.
fn json_files_in(dir: &Path) -> Result<Vec<PathBuf>, ConformanceError> {
    let rd = std::fs::read_dir(dir).map_err(|e| ConformanceError::Io {
        file: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut v = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| ConformanceError::Io {
            file: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        let p = entry.path();
        if p.is_file() && file_kind(&base_name(&p)).is_some() {
            v.push(p);
        }
    }
    v.sort();
    Ok(v)
}

fn load_topology_file(path: &Path, into: &mut Topologies) -> Result<(), ConformanceError> {
    let json = read_json(path)?;
    let t = cpumanager::load_topologies(&path.display().to_string(), &json)?;
    into.extend(t);
    Ok(())
}

/// Evaluates one case file, finding its machines beside it (and in its own `topologies`
/// object). A topologies file yields no cases.
pub fn evaluate_file(path: &Path) -> Result<Vec<CaseResult>, ConformanceError> {
    let mut cases = Vec::new();
    for f in evaluate_paths(&[path.to_path_buf()])? {
        if let Some(reason) = f.error {
            return Err(ConformanceError::Malformed {
                file: f.file,
                reason,
            });
        }
        cases.extend(f.cases);
    }
    Ok(cases)
}

/// Evaluates every case file among `paths` (directories are expanded to their vector
/// files). Topology files among the paths serve every case file; each case file also sees
/// the topology files of its own directory and its own `topologies` object. A case file
/// that cannot be evaluated yields a [`FileResult`] with `error` set; unreadable arguments,
/// unknown file kinds and broken topology files given as arguments are errors.
pub fn evaluate_paths(paths: &[PathBuf]) -> Result<Vec<FileResult>, ConformanceError> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            files.extend(json_files_in(p)?);
        } else {
            files.push(p.clone());
        }
    }
    let mut given = Topologies::new();
    for f in &files {
        if file_kind(&base_name(f)) == Some(FileKind::CpuManagerTopologies) {
            load_topology_file(f, &mut given)?;
        }
    }
    let mut out = Vec::new();
    for f in &files {
        let file = f.display().to_string();
        let outcome = match file_kind(&base_name(f)) {
            None => return Err(ConformanceError::UnknownKind(file)),
            Some(FileKind::CpuManagerTopologies) => continue,
            Some(FileKind::CpuManager) => evaluate_cpumanager_file(f, &given),
            Some(FileKind::TopologyManager) => {
                read_json(f).and_then(|json| topologymanager::evaluate(&file, &json))
            }
        };
        out.push(match outcome {
            Ok(cases) => FileResult {
                file,
                cases,
                error: None,
            },
            Err(e) => FileResult {
                file,
                cases: Vec::new(),
                error: Some(e.to_string()),
            },
        });
    }
    Ok(out)
}

/// One `cpumanager-*.json` case file with its machines (directory, arguments, own object).
fn evaluate_cpumanager_file(
    f: &Path,
    given: &Topologies,
) -> Result<Vec<CaseResult>, ConformanceError> {
    let file = f.display().to_string();
    let json = read_json(f)?;
    let mut topologies = Topologies::new();
    let dir = f
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    for t in topology_files_in(dir)? {
        load_topology_file(&t, &mut topologies)?;
    }
    topologies.extend(given.clone());
    if let Some(own) = json.get("topologies") {
        topologies.extend(cpumanager::load_topologies(&file, own)?);
    }
    cpumanager::evaluate(&file, &json, &topologies)
}
