//! A real Kubernetes control plane for nodetopo's tests: `kube-apiserver` and `etcd` built
//! from the Go modules pinned in `e2e/controlplane` (k8s.io/kubernetes v1.37.2,
//! go.etcd.io/etcd/server/v3 v3.7.0), started on free loopback ports in a temporary directory.
//!
//! - [`binaries`] builds the two binaries once per machine (`e2e/controlplane/build.sh`, under
//!   a lock) or reports why it cannot. Without Go the tests print one `SKIPPED: ...` line and
//!   return, unless `NODETOPO_REQUIRE_CONTROLPLANE=1` (set by `.ci/run`) makes that a failure.
//! - [`ControlPlane`] is one running etcd + apiserver: generated CA, serving certificate and
//!   service-account signing key ([`pki`]), `--authorization-mode=RBAC`, the
//!   ValidatingAdmissionPolicy admission plugin enabled, an admin client, clients acting as a
//!   ServiceAccount through TokenRequest (optionally bound to a Pod, which carries the node
//!   claim), a kubeconfig file for kubectl, helm and the nodetopo binaries, and the server log
//!   printed when a test fails. [`ControlPlane::shared`] gives every test of one test binary the
//!   same server.
//! - Child processes run in their own process group with `PR_SET_PDEATHSIG`, from a thread that
//!   lives as long as the test process ([`process`]): they die with the test binary, whether it
//!   ends normally, panics or is killed, and [`ControlPlane`]'s `Drop` kills them at once.
//! - [`tools`] finds helm and kubectl the way `.ci/chart-check.sh` installs them.
//! - [`controllers`] adds kube-controller-manager and kube-scheduler, and [`node`] a real
//!   node (containerd, runc and the real kubelet registered as [`LOCAL_NODE`]), for the
//!   local-node suite.

pub mod binaries;
pub mod controllers;
pub mod fixture;
pub mod node;
pub mod pki;
pub mod process;
pub mod server;
pub mod tools;
pub mod wait;

pub use binaries::{binaries, kubelet_oracle, required, Binaries};
pub use server::{ControlPlane, LOCAL_NODE};

/// Everything that can go wrong while building or running the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `e2e/controlplane/build.sh` failed.
    #[error("building the control plane with {script}: {message}")]
    Build {
        /// The script that was run.
        script: String,
        /// Its exit status and the end of its output.
        message: String,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the file or program.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Certificate or key generation failed.
    #[error("generating {what}: {source}")]
    Pki {
        /// Which certificate or key.
        what: &'static str,
        /// The underlying error.
        source: rcgen::Error,
    },
    /// etcd or the apiserver did not start.
    #[error("{component} did not start: {message}\n--- last lines of {log} ---\n{tail}")]
    Start {
        /// `etcd` or `kube-apiserver`.
        component: &'static str,
        /// What was observed.
        message: String,
        /// The log file.
        log: String,
        /// Its last lines.
        tail: String,
    },
    /// A request to the apiserver failed.
    #[error("{what}: {source}")]
    Kube {
        /// The request, naming the object.
        what: String,
        /// The underlying error.
        source: kube::Error,
    },
    /// Anything else, with a message saying what.
    #[error("{0}")]
    Other(String),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn kube(what: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            what: what.into(),
            source,
        }
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub use nodetopo_testkit::repo_root;

/// A workspace binary (`nodetopo-agent`, `nodetopo-operator`) that `cargo test --workspace`
/// builds next to the test binaries. `None` after printing one `SKIPPED` line when it is
/// missing; a failure instead where the control-plane tests are [`required`].
pub fn workspace_binary(name: &str) -> Option<std::path::PathBuf> {
    let found = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join(name)))
        .filter(|bin| bin.is_file());
    if found.is_none() {
        assert!(
            !required(),
            "{name} binary not found next to the test binary"
        );
        println!("SKIPPED: {name} binary not built (run `cargo test --workspace --release` first)");
    }
    found
}
