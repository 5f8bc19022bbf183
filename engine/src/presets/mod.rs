//! Built-in machine presets for `plan` (see shared/topologies/PRESETS.md).
