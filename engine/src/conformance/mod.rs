//! Evaluation of test-vector files in the `shared/vectors` schema.
//!
//! One code path serves the `nodetopo-agent conformance` command and the engine's own test
//! suite: a file's JSON goes in, one [`CaseResult`] per case comes out. Which evaluator runs is
//! chosen by the file name (`cpumanager-*.json`, `topologymanager-*.json`); the
//! `cpumanager-topologies*.json` files hold machines, not cases.

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
