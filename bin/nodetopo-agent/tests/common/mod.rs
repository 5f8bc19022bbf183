//! Shared by the `apply` tests (actuation, systemd_dbus): a temporary kubelet directory
//! seeded from examples/diff and the `nodetopo-agent apply` command line on it.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_nodetopo-agent");

/// The worked examples of docs/actuation.md (kubelet config, state, pods, policies).
pub fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/diff")
}

/// A temporary kubelet: `config.yaml`, the drop-in directory `conf.d/` and
/// `lib/cpu_manager_state`, seeded from the examples, and an empty `proc/` handed to apply
/// as the host's /proc (no kubelet process to check, whatever runs on this machine).
pub struct Kubelet {
    pub dir: tempfile::TempDir,
}

impl Kubelet {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("conf.d")).unwrap();
        fs::create_dir_all(dir.path().join("lib")).unwrap();
        fs::create_dir_all(dir.path().join("proc")).unwrap();
        fs::copy(
            examples().join("kubelet-config.yaml"),
            dir.path().join("config.yaml"),
        )
        .unwrap();
        fs::copy(
            examples().join("cpu_manager_state"),
            dir.path().join("lib/cpu_manager_state"),
        )
        .unwrap();
        Kubelet { dir }
    }

    /// A path inside the kubelet directory.
    pub fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A file's bytes, `None` when absent.
    pub fn read(&self, rel: &str) -> Option<Vec<u8>> {
        fs::read(self.p(rel)).ok()
    }

    /// `nodetopo-agent apply` of an example policy on this kubelet (the EPYC 7303 preset and
    /// the example pods), with `extra` arguments (the restart method and its flags).
    pub fn cmd(&self, policy: &str, extra: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("apply")
            .args(["--preset", "epyc-7303-2p"])
            .arg("--kubelet-config")
            .arg(self.p("config.yaml"))
            .arg("--kubelet-config-dir")
            .arg(self.p("conf.d"))
            .arg("--state")
            .arg(self.p("lib/cpu_manager_state"))
            .arg("--pods")
            .arg(examples().join("pods.yaml"))
            .arg("--policy")
            .arg(examples().join(policy))
            .arg("--host-proc")
            .arg(self.p("proc"))
            .args(extra);
        c
    }
}

/// The JSON report `apply` prints, or a panic naming the policy, the exit and stderr.
pub fn report(policy: &str, out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{policy}: no JSON report; exit {}, stderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
