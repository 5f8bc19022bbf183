//! nodetopo end-to-end suite against a kind cluster.
//!
//! `e2e/run.sh` creates a kind cluster (`e2e/kind-config.yaml`: two workers whose kubelets
//! run the static CPU manager and the best-effort topology manager), builds and loads the
//! images, installs the Helm chart and runs `tests/kind.rs` with `NODETOPO_E2E=1`. Without
//! that variable the test prints `SKIPPED: <reason>` and passes, so `cargo test --workspace`
//! works anywhere.
//!
//! The library holds what the test needs, all of it unit-tested without a cluster:
//! [`config`] (settings from the environment), [`objects`] (reading NodeTopology and
//! NodeResourcePolicy by DESIGN.md's published shapes; test manifests), [`mounts`] (the agent
//! container's mounts read from the host's /proc), [`wait`] (waiting on
//! watched collections, never on sleeps) and [`shell`] (`kubectl exec`, `helm`).

pub mod config;
pub mod mounts;
pub mod objects;
pub mod pods;
pub mod scenario;
pub mod shell;
pub mod wait;
