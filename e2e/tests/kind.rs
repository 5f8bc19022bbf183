//! The end-to-end scenario (`nodetopo_e2e::scenario`, the same steps and checks as the
//! local-node test that CI runs) on a kind cluster, for users with Docker.
//!
//! Runs only with `NODETOPO_E2E=1` (set by `e2e/run.sh` after it created the cluster and
//! installed the chart); otherwise it prints `SKIPPED: <reason>` and passes. What kind does
//! not give the scenario: the kubelet's checkpoint and PodResources answer (read on the node,
//! not through the API), a device plugin and a kubelet restart; those steps say they were
//! skipped. The cpuset of a container is read inside it (`kubectl exec ... cat
//! /sys/fs/cgroup/cpuset.cpus.effective`: kind nodes run cgroup v2).

use std::io::Write as _;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::{Client, ResourceExt};
use nodetopo_e2e::config::{E2eConfig, Skip};
use nodetopo_e2e::pods::Workload;
use nodetopo_e2e::scenario::{KubeletRecords, Provider, Scenario, Settings, TestDevice};
use nodetopo_e2e::shell;
use nodetopo_engine::CpuSet;

/// The shell line that prints the container's CPUs the way the scenario reads them.
const PRINT_CPUS: &str =
    "awk '/^Cpus_allowed_list:/ { print \"cpus_allowed_list=\" $2 }' /proc/self/status";

struct Kind {
    cfg: E2eConfig,
}

impl Kind {
    async fn kubectl(&self, args: Vec<String>) -> Result<String> {
        let kubectl = self.cfg.kubectl.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            shell::run(&kubectl, &args)
        })
        .await
        .context("kubectl task")?
        .map_err(anyhow::Error::from)
    }
}

impl Provider for Kind {
    fn name(&self) -> &'static str {
        "kind"
    }

    fn workload(&self) -> Workload {
        Workload {
            image: self.cfg.pod_image.clone(),
            pull_policy: "IfNotPresent".into(),
            run: vec![
                "sh".into(),
                "-c".into(),
                format!("{PRINT_CPUS}; trap 'exit 0' TERM; while true; do sleep 1; done"),
            ],
            print_and_exit: vec!["sh".into(), "-c".into(), PRINT_CPUS.into()],
        }
    }

    fn test_device(&self) -> Option<TestDevice> {
        None
    }

    fn nrt(&self) -> bool {
        false
    }

    async fn container_cpuset(&self, pod: &Pod, container: &str) -> Result<CpuSet> {
        let kubectl = self.cfg.kubectl.clone();
        let ns = pod.namespace().unwrap_or_default();
        let (name, container) = (pod.name_any(), container.to_string());
        let cpus = tokio::task::spawn_blocking(move || {
            shell::container_cpuset(&kubectl, &ns, &name, &container)
        })
        .await
        .context("kubectl exec task")??;
        Ok(cpus)
    }

    async fn container_log(&self, pod: &Pod, container: &str) -> Result<String> {
        self.kubectl(vec![
            "logs".into(),
            "-n".into(),
            pod.namespace().unwrap_or_default(),
            pod.name_any(),
            "-c".into(),
            container.into(),
        ])
        .await
    }

    async fn kubelet_records(&self, _node: &str) -> Result<Option<KubeletRecords>> {
        Ok(None)
    }

    async fn restart_kubelet(&self, _node: &str) -> Result<bool> {
        Ok(false)
    }

    fn fail_next_kubelet_start(&self) -> bool {
        false
    }

    fn actuation(&self) -> bool {
        false
    }

    async fn kubelet_configz(&self, _node: &str) -> Result<Option<serde_json::Value>> {
        Ok(None)
    }

    async fn helm_uninstall(&self) -> Result<()> {
        let helm = self.cfg.helm.clone();
        let (release, ns) = (self.cfg.release.clone(), self.cfg.release_namespace.clone());
        tokio::task::spawn_blocking(move || {
            shell::run(&helm, &["uninstall", &release, "-n", &ns, "--wait"])
        })
        .await
        .context("helm task")??;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_on_kind() -> Result<()> {
    let cfg = match E2eConfig::from_env()? {
        Ok(cfg) => cfg,
        Err(Skip(reason)) => {
            // The stderr handle, not `println!`: the harness hides a passing test's captured
            // output, and a skip must not read as a plain `ok`.
            let _ = writeln!(std::io::stderr(), "SKIPPED: lifecycle_on_kind: {reason}");
            return Ok(());
        }
    };
    let client = Client::try_default()
        .await
        .context("connecting to the cluster (KUBECONFIG / current context)")?;
    let settings = Settings {
        release_namespace: cfg.release_namespace.clone(),
        release: cfg.release.clone(),
        pod_namespace: cfg.pod_namespace.clone(),
        node_label: cfg.node_label.clone(),
        cpus: Some(cfg.cpus),
        timeout: cfg.timeout,
    };
    let kind = Kind { cfg };
    let checks = Scenario::connect(&kind, client, settings)
        .await?
        .run()
        .await?;
    println!("lifecycle_on_kind: {checks} checks passed");
    Ok(())
}
