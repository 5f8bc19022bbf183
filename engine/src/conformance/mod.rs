//! Evaluation of test-vector files in the `shared/vectors` schema.
//!
//! One code path serves the `nodetopo conformance` command and the engine's own test
//! suite: a file's JSON goes in, one [`CaseResult`] per case comes out. The engine reads no
//! file: the caller (the CLI's `conformance` command) reads the files and directories. Which evaluator runs is
//! chosen by the file name (`cpumanager-*.json`, `topologymanager-*.json`); the
//! `cpumanager-topologies*.json` files hold machines, not cases.
//!
//! Machines named by cases are looked up, in this order of precedence: a top-level
//! `topologies` object inside the case file itself, `cpumanager-topologies*.json` files given
//! among the paths, and `cpumanager-topologies*.json` files in the case file's directory
//! (see [`evaluate_case_file`]).

pub mod cpumanager;
pub mod topologymanager;

use std::collections::BTreeMap;

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

/// Evaluates one vector file's JSON, read by the caller. A `cpumanager-*` case file sees the
/// machines of `beside` (the topology files of its own directory), then of `given` (topology
/// files given as arguments, which win), then of its own top-level `topologies` object (which
/// wins over both); a `topologymanager-*` file needs no machines; a topologies file yields no
/// cases.
pub fn evaluate_case_file(
    file: &str,
    kind: FileKind,
    json: &serde_json::Value,
    beside: &Topologies,
    given: &Topologies,
) -> Result<Vec<CaseResult>, ConformanceError> {
    match kind {
        FileKind::CpuManagerTopologies => Ok(Vec::new()),
        FileKind::TopologyManager => topologymanager::evaluate(file, json),
        FileKind::CpuManager => {
            let mut topologies = beside.clone();
            topologies.extend(given.clone());
            if let Some(own) = json.get("topologies") {
                topologies.extend(cpumanager::load_topologies(file, own)?);
            }
            cpumanager::evaluate(file, json, &topologies)
        }
    }
}
