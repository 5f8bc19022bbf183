//! Evaluation of `topologymanager-*.json` vector files.

use super::{CaseResult, ConformanceError};

/// Evaluates every case array of a `topologymanager-*.json` file against the engine (through
/// both the reference and the product merge).
pub fn evaluate(
    file: &str,
    _json: &serde_json::Value,
) -> Result<Vec<CaseResult>, ConformanceError> {
    Err(ConformanceError::Malformed {
        file: file.to_string(),
        reason: "topology-manager vectors are not supported yet".into(),
    })
}
