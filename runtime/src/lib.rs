//! nodetopo-runtime: the process plumbing the operator and the agent share, so that both
//! binaries behave the same way around their work:
//!
//! - [`log`]: `--log-format plain|json` (level from `RUST_LOG`, default `info`), to stderr.
//! - [`admin`]: readiness ([`admin::Readiness`]) and the admin endpoints `/healthz`,
//!   `/readyz` and `/metrics`.
//! - [`shutdown`]: the first SIGTERM or Ctrl-C asks for a graceful stop, a second one
//!   aborts the process.
//!
//! A crate of its own rather than a module of `nodetopo-crds` (the other shared
//! dependency): crds holds API types used by tests and tools, which should not compile a
//! web server and signal handling to read a NodeTopology.

#![warn(missing_docs)]

pub mod admin;
pub mod log;
pub mod shutdown;
