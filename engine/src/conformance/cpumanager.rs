//! Evaluation of `cpumanager-*.json` vector files.
