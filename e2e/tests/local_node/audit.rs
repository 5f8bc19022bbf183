//! The cpuset audit on the real node.

use super::*;

/// The cpuset audit on the real node (issue 30; docs/audit.md): every running container's
/// cgroup (cgroup v1 cpuset hierarchy, the kubelet's cgroupfs driver under its cgroupRoot,
/// containerd names) against the kubelet's own checkpoint and configuration. A healthy node
/// shows zero drift; a container whose `cpuset.cpus` this check rewrites behind the kubelet
/// is reported `ChangedOutsideKubelet`; the file is restored before the check returns.
/// Returns the number of checks.
pub(super) async fn cpuset_audit_check(client: kube::Client, node: &LocalNode) -> Result<usize> {
    use nodetopo_kubelet::audit::{self, inputs, DriftReason, Expected};
    use nodetopo_kubelet::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

    let layout = CgroupLayout {
        root: "/sys/fs/cgroup".into(),
        version: CgroupVersion::V1,
        driver: CgroupDriver::Cgroupfs,
        kubelet_root: node.cgroup_root(),
    };
    let kubelet_dir = node.var_lib().join("kubelet");
    let pods_api: Api<Pod> = Api::all(client);
    let read = || async {
        let list = pods_api
            .list(&kube::api::ListParams::default().fields(&format!("spec.nodeName={LOCAL_NODE}")))
            .await
            .context("listing the node's pods")?;
        let items: Vec<Value> = list
            .items
            .iter()
            .map(|p| {
                let mut v = serde_json::to_value(p)?;
                v["kind"] = json!("Pod");
                Ok(v)
            })
            .collect::<Result<_>>()?;
        let text = serde_json::to_string(&json!({"kind": "List", "items": items}))?;
        let pods = inputs::pods_from_yaml(&text).map_err(anyhow::Error::msg)?;
        let cp = nodetopo_kubelet::cpu_checkpoint::read(&kubelet_dir.join("cpu_manager_state"))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .context("no kubelet cpu_manager_state")?;
        let config = nodetopo_kubelet::config::read_effective(
            &kubelet_dir.join("config.yaml"),
            Some(&kubelet_dir.join("conf.d"))
                .filter(|d| d.is_dir())
                .map(|d| d.as_path()),
        )?;
        let expected = Expected {
            kubelet: Some(inputs::kubelet_cpus(&cp)),
            reserved: config.reserved_system_cpus,
            ..Default::default()
        };
        anyhow::Ok((pods.clone(), audit::run(&layout, &pods, &expected)))
    };

    // Healthy: zero drift (the kubelet settles shared containers on its 10 s reconcile).
    let deadline = Instant::now() + Duration::from_secs(60);
    let (pods, report) = loop {
        let (pods, report) = read().await?;
        if report.drift.is_empty() && report.unreadable.is_empty() && report.checked_containers > 0
        {
            break (pods, report);
        }
        if Instant::now() > deadline {
            bail!("the healthy node's audit is not clean after 60 s: {report:#?}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    println!(
        "[local-node] cpuset audit: {} running containers, zero drift",
        report.checked_containers
    );

    // Broken: one shared-pool container's cpuset rewritten behind the kubelet.
    let (target, container, dir) = pods
        .iter()
        .filter(|p| p.pod.starts_with(&format!("{RELEASE_NS}/")))
        .flat_map(|p| p.containers.iter().map(move |c| (p, c)))
        .find_map(|(p, c)| {
            let id = c.id.as_ref()?;
            let dir = layout.container_dir(&p.uid, p.qos, id).ok()?;
            Some((p.clone(), c.name.clone(), dir))
        })
        .context("no running container of the release to change")?;
    let file = dir.join("cpuset.cpus");
    let original =
        fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let set = CpuSet::parse(original.trim())
        .with_context(|| format!("{}: {original:?}", file.display()))?;
    let Some(last) = set.last().filter(|_| set.len() >= 2) else {
        bail!(
            "{}: {original:?} has fewer than 2 CPUs; nothing to shrink it to",
            file.display()
        );
    };
    fs::write(&file, format!("{last}\n")).with_context(|| format!("writing {}", file.display()))?;
    let broken = read().await;
    // Restore before judging, whatever the read gave.
    let restored =
        fs::write(&file, &original).with_context(|| format!("restoring {}", file.display()));
    let (_, broken) = broken?;
    restored?;
    let found: Vec<_> = broken
        .drift
        .iter()
        .filter(|d| d.pod_uid == target.uid && d.container == container)
        .map(|d| (d.reason, d.expected.clone(), d.actual.clone()))
        .collect();
    let want = vec![(
        DriftReason::ChangedOutsideKubelet,
        Some(set.to_string()),
        Some(last.to_string()),
    )];
    if found != want {
        bail!(
            "{}/{container}: cpuset {set} rewritten to {last} behind the kubelet; expected {want:?}, the audit found {found:?} (all drift: {:#?})",
            target.pod,
            broken.drift
        );
    }
    println!(
        "[local-node] cpuset audit: {}/{container} rewritten to {last} behind the kubelet is reported ChangedOutsideKubelet; restored to {}",
        target.pod,
        original.trim()
    );
    Ok(2)
}
