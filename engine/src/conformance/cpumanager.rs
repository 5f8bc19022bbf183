//! Evaluation of `cpumanager-*.json` vector files.

use super::{CaseResult, ConformanceError, Topologies};

/// Reads the machines of a `cpumanager-topologies*.json` file (or a case file's top-level
/// `topologies` object), keeping their declared counts.
pub fn load_topologies(
    file: &str,
    _json: &serde_json::Value,
) -> Result<Topologies, ConformanceError> {
    Err(ConformanceError::Malformed {
        file: file.to_string(),
        reason: "cpumanager topologies are not supported yet".into(),
    })
}

/// Evaluates every case array of a `cpumanager-*.json` file against the engine.
pub fn evaluate(
    file: &str,
    _json: &serde_json::Value,
    _topologies: &Topologies,
) -> Result<Vec<CaseResult>, ConformanceError> {
    Err(ConformanceError::Malformed {
        file: file.to_string(),
        reason: "cpumanager vectors are not supported yet".into(),
    })
}
