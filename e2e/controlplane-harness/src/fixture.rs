//! The set-up every binary-under-test starts with: its own control plane, the CRDs
//! Established, the namespace with its default service account, and the workspace binary.

use std::path::PathBuf;

use crate::ControlPlane;

/// A started control plane and the binary the test runs against it.
pub struct Fixture {
    /// The control plane (stopped when dropped).
    pub cp: ControlPlane,
    /// The workspace binary under test.
    pub bin: PathBuf,
}

impl Fixture {
    /// Starts a control plane, installs the CRDs and `namespace` (with its `default` service
    /// account) and finds the workspace binary `binary`. `None`: the test skips (the reason
    /// is printed: Go or the binary missing); a failure to set up panics with its cause.
    pub async fn start(binary: &str, namespace: &str) -> Option<Self> {
        let cp = match ControlPlane::start() {
            Ok(Some(cp)) => cp,
            Ok(None) => return None,
            Err(e) => panic!("control plane: {e}"),
        };
        let bin = crate::workspace_binary(binary)?;
        println!("control plane started in {:?}", cp.start_time);
        cp.install_crds().await.expect("CRDs");
        cp.ensure_service_account(namespace, "default")
            .await
            .expect("namespace");
        Some(Self { cp, bin })
    }
}
