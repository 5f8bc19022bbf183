//! Evaluation of `topologymanager-*.json` vector files.
