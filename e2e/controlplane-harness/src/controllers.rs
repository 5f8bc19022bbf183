//! kube-controller-manager and kube-scheduler beside a [`ControlPlane`]: what a cluster with a
//! real node needs so that Deployments, DaemonSets and ServiceAccount tokens work (the
//! local-node tests of [`crate::node`]).
//!
//! Both run as the users their bootstrap RBAC roles name (static tokens of the control
//! plane), without leader election, serving no port (`--secure-port=0`), with logs in the
//! control plane's directory.

use std::fs;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::server::tail;
use crate::{process, ControlPlane, Error, Result};

/// The running controller manager and scheduler; dropping them kills both.
pub struct Controllers {
    children: Mutex<Vec<(&'static str, Child)>>,
    logs: Vec<std::path::PathBuf>,
}

impl ControlPlane {
    /// Starts kube-controller-manager (every default controller, ServiceAccount credentials
    /// per controller, the control plane's CA published as `kube-root-ca.crt`) and
    /// kube-scheduler against this control plane.
    pub fn start_controllers(&self) -> Result<Controllers> {
        let bins = crate::binaries()?
            .ok_or_else(|| Error::Other("the control-plane binaries are not built".into()))?;
        let (ca, signing_key) = self.ca_and_signing_key();
        let cm_config = self.component_kubeconfig("system:kube-controller-manager")?;
        let sched_config = self.component_kubeconfig("system:kube-scheduler")?;
        let cm_log = self.dir().join("kube-controller-manager.log");
        let sched_log = self.dir().join("kube-scheduler.log");
        let cm_args = vec![
            format!("--kubeconfig={}", cm_config.display()),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--use-service-account-credentials=true".into(),
            format!(
                "--service-account-private-key-file={}",
                signing_key.display()
            ),
            format!("--root-ca-file={}", ca.display()),
            // The node's Ready changes reach the not-ready taint within seconds.
            "--node-monitor-period=2s".into(),
            "--v=1".into(),
        ];
        let sched_args = vec![
            format!("--kubeconfig={}", sched_config.display()),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--v=1".into(),
        ];
        let mut children = Vec::new();
        for (what, bin, args, log) in [
            (
                "kube-controller-manager",
                &bins.kube_controller_manager,
                cm_args,
                &cm_log,
            ),
            (
                "kube-scheduler",
                &bins.kube_scheduler,
                sched_args,
                &sched_log,
            ),
        ] {
            let out = fs::File::create(log)
                .map_err(|e| Error::io(format!("creating {}", log.display()), e))?;
            let err = out
                .try_clone()
                .map_err(|e| Error::io(format!("opening {}", log.display()), e))?;
            let mut cmd = Command::new(bin);
            cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
            children.push((what, process::spawn(cmd, what)?));
        }
        let controllers = Controllers {
            children: Mutex::new(children),
            logs: vec![cm_log, sched_log],
        };
        // Neither serves a health port here: a process that exits in its first seconds
        // (bad flag, no access) is the failure to catch.
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            controllers.check_running()?;
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(controllers)
    }
}

impl Controllers {
    /// An error naming the component (with its log's end) when one has exited.
    pub fn check_running(&self) -> Result<()> {
        let mut children = self
            .children
            .lock()
            .map_err(|_| Error::Other("controllers lock poisoned".into()))?;
        for ((what, child), log) in children.iter_mut().zip(&self.logs) {
            if let Some(status) = child
                .try_wait()
                .map_err(|e| Error::io(format!("waiting for {what}"), e))?
            {
                return Err(Error::Start {
                    component: what,
                    message: format!("exited with {status}"),
                    log: log.display().to_string(),
                    tail: tail(log, 40),
                });
            }
        }
        Ok(())
    }

    /// The last lines of both logs (for a failing test's output).
    pub fn log_tails(&self, lines: usize) -> String {
        self.logs
            .iter()
            .map(|l| format!("--- {} ---\n{}", l.display(), tail(l, lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        if let Ok(mut children) = self.children.lock() {
            for (_, child) in children.iter_mut() {
                process::kill_group(child);
            }
        }
    }
}
