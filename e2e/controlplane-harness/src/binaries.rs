//! Finding or building `kube-apiserver` and `etcd`.
//!
//! The binaries live in `<target dir>/controlplane/`, built by `e2e/controlplane/build.sh`
//! from the pinned Go module; the script holds a lock and rebuilds only when the module's
//! inputs change, so every test binary of a `cargo test` run may call [`binaries`].

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::{Error, Result};

/// Environment variable that turns "skip without Go" into a failure (set by `.ci/run`).
pub const REQUIRE_ENV: &str = "NODETOPO_REQUIRE_CONTROLPLANE";

/// Paths of the control-plane binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `kube-apiserver` from k8s.io/kubernetes.
    pub kube_apiserver: PathBuf,
    /// `etcd` from go.etcd.io/etcd/server/v3/embed.
    pub etcd: PathBuf,
    /// `kube-controller-manager` from k8s.io/kubernetes (the local-node tests).
    pub kube_controller_manager: PathBuf,
    /// `kube-scheduler` from k8s.io/kubernetes (the local-node tests).
    pub kube_scheduler: PathBuf,
}

/// True when the environment demands a working control plane.
pub fn required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

fn build() -> Result<Binaries> {
    let script = "e2e/controlplane/build.sh";
    let dir =
        nodetopo_testkit::build_once(script, &[], "the control plane").map_err(|message| {
            Error::Build {
                script: script.to_string(),
                message,
            }
        })?;
    let bins = Binaries {
        kube_apiserver: dir.join("kube-apiserver"),
        etcd: dir.join("etcd"),
        kube_controller_manager: dir.join("kube-controller-manager"),
        kube_scheduler: dir.join("kube-scheduler"),
    };
    for p in [
        &bins.kube_apiserver,
        &bins.etcd,
        &bins.kube_controller_manager,
        &bins.kube_scheduler,
    ] {
        if !p.is_file() {
            return Err(Error::Build {
                script: script.to_string(),
                message: format!("{} is missing after the build", p.display()),
            });
        }
    }
    Ok(bins)
}

/// The control-plane binaries, built if needed (once per process).
///
/// `Ok(None)`: Go is missing and [`required`] is false; the caller prints [`skip_line`] and
/// returns. With Go present, a failed build is always an error.
pub fn binaries() -> Result<Option<Binaries>> {
    static ONCE: OnceLock<Result<Option<Binaries>, String>> = OnceLock::new();
    let r = ONCE.get_or_init(|| {
        if let Some(why) = nodetopo_testkit::go_missing() {
            if required() {
                return Err(format!(
                    "{REQUIRE_ENV}=1 but the control plane cannot be built: {why}"
                ));
            }
            return Ok(None);
        }
        build().map(Some).map_err(|e| e.to_string())
    });
    match r {
        Ok(Some(b)) => Ok(Some(b.clone())),
        Ok(None) => Ok(None),
        Err(e) => Err(Error::Other(e.clone())),
    }
}

/// The one line a skipping test prints.
pub fn skip_line() -> String {
    let why = nodetopo_testkit::go_missing().unwrap_or_else(|| "Go is not usable".into());
    format!(
        "SKIPPED: control-plane tests need Go to build kube-apiserver and etcd ({why}); set {REQUIRE_ENV}=1 to make this a failure"
    )
}

/// The kubelet oracle (`e2e/kubelet-oracle`: the kubelet's CPU manager and topology manager
/// code from k8s.io/kubernetes v1.37.2), built by its `build.sh` if needed (once per
/// process). Tests use it to write real `cpu_manager_state` checkpoints. `Ok(None)`: Go is
/// missing and [`required`] is false (the caller has already skipped for the control plane).
pub fn kubelet_oracle() -> Result<Option<PathBuf>> {
    static ONCE: OnceLock<Result<Option<PathBuf>, String>> = OnceLock::new();
    let r = ONCE.get_or_init(|| {
        if let Some(why) = nodetopo_testkit::go_missing() {
            if required() {
                return Err(format!(
                    "{REQUIRE_ENV}=1 but the kubelet oracle cannot be built: {why}"
                ));
            }
            return Ok(None);
        }
        let script = "e2e/kubelet-oracle/build.sh";
        let bin = nodetopo_testkit::build_once(script, &[], "the kubelet oracle")?;
        if !bin.is_file() {
            return Err(format!("{} is missing after {script}", bin.display()));
        }
        Ok(Some(bin))
    });
    r.clone().map_err(Error::Other)
}
