//! Topology discovery from a sysfs root.
