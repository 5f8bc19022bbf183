//! Admission failures explained on the real node.

use super::*;

/// Issue 30, "admission failures explained": a Guaranteed pod asking one whole CPU more than
/// the node has free (the pinned pod holds the rest; topology manager `restricted`), bound
/// past the scheduler. The real kubelet fails it with `TopologyAffinityError` (its topology
/// manager admit handler runs before its resource-fit check); the agent replays it and
/// publishes the explanation in `status.rejections` (agreeing with the kubelet, with the
/// CPU hints, the merge and the free CPUs) and as an `AdmissionExplained` Warning Event on
/// the Pod. The pod is deleted at the end and its rejection leaves the status.
pub(super) async fn admission_explained(
    client: &kube::Client,
    namespace: &str,
    node: &str,
) -> Result<usize> {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use kube::api::{DeleteParams, ListParams, PostParams};
    use nodetopo_crds::NodeTopology;
    use nodetopo_e2e::wait::{poll_until, Progress};
    let topologies: Api<NodeTopology> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let events: Api<K8sEvent> = Api::namespaced(client.clone(), namespace);
    let timeout = Duration::from_secs(120);
    let every = Duration::from_millis(500);
    let mut checks = 0;
    let status = topologies
        .get_status(node)
        .await?
        .status
        .context("NodeTopology without status")?;
    let free = CpuSet::parse(&status.pools.context("no pools")?.free)?.len() as u64;
    let want = free + 1;
    let name = "explain-refused";
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            // Past the scheduler, which would keep it Pending: the node has no allocatable
            // CPU left for it.
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{
                "name": "app",
                "image": TESTNODE_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/nodetopo-testnode", "pause"],
                "resources": {
                    "requests": {"cpu": want.to_string(), "memory": "32Mi"},
                    "limits": {"cpu": want.to_string(), "memory": "32Mi"},
                },
            }],
        },
    }))?;
    let uid = pods
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating pod {name}"))?
        .uid()
        .context("created pod without uid")?;
    let (reason, message) = poll_until(
        &format!("{namespace}/{name} refused by the kubelet"),
        timeout,
        every,
        || {
            let pods = pods.clone();
            async move {
                let p = match pods.get(name).await {
                    Ok(p) => p,
                    Err(e) => return Progress::Pending(e.to_string()),
                };
                let s = p.status.unwrap_or_default();
                match s.phase.as_deref() {
                    Some("Failed") => Progress::Done((
                        s.reason.unwrap_or_default(),
                        s.message.unwrap_or_default(),
                    )),
                    Some("Running" | "Succeeded") => {
                        Progress::Failed(format!("the kubelet admitted it: {:?}", s.phase))
                    }
                    other => Progress::Pending(format!("phase {other:?}")),
                }
            }
        },
    )
    .await?;
    if reason != "TopologyAffinityError" {
        bail!("{name}: the kubelet refused it with {reason:?} ({message}), want TopologyAffinityError");
    }
    checks += 1;
    let rejection = poll_until(
        &format!("{node}: status.rejections explains {name}"),
        timeout,
        every,
        || {
            let topologies = topologies.clone();
            let uid = uid.clone();
            async move {
                let nt = match topologies.get_status(node).await {
                    Ok(nt) => nt,
                    Err(e) => return Progress::Pending(e.to_string()),
                };
                let found = nt
                    .status
                    .unwrap_or_default()
                    .rejections
                    .into_iter()
                    .find(|r| r.pod_uid == uid && r.by_kubelet);
                match found {
                    Some(r) => Progress::Done(r),
                    None => Progress::Pending("no kubelet rejection for the pod yet".into()),
                }
            }
        },
    )
    .await?;
    println!(
        "[local-node] explanation of {namespace}/{name}: {}",
        serde_json::to_string(&rejection)?
    );
    let e = rejection
        .explanation
        .as_ref()
        .context("rejection without explanation")?;
    let cpu_hints = e
        .providers
        .iter()
        .find(|p| p.provider == "cpu")
        .and_then(|p| p.hints.clone());
    let facts = [
        (
            rejection.reason == "TopologyAffinityError",
            "the kubelet's reason",
        ),
        (rejection.message == message, "the kubelet's message"),
        (
            e.agreement == nodetopo_engine::report::Agreement::Agree,
            "agreement Agree",
        ),
        (
            e.replay_reason == "TopologyAffinityError",
            "the replay's reason",
        ),
        (e.container == "app", "the container"),
        (
            e.requests.first().map(|r| r.exclusive_cpus) == Some(want),
            "the request's exclusive CPUs",
        ),
        (
            e.numa_nodes.iter().map(|n| n.free_cpu_count).sum::<u64>() == free,
            "free CPUs per NUMA node add up to the pools' free CPUs",
        ),
        (
            cpu_hints.as_ref().is_some_and(|h| h.is_empty()),
            "no CPU hint can be satisfied",
        ),
        (
            e.merged.as_ref().is_some_and(|m| !m.admit),
            "the merge refuses",
        ),
        (
            e.summary.contains("nodetopo's replay agrees"),
            "the summary's verdict",
        ),
    ];
    for (ok, what) in facts {
        if !ok {
            bail!(
                "{name}'s explanation: {what} wrong: {}",
                serde_json::to_string(&rejection)?
            );
        }
        checks += 1;
    }
    let event = poll_until(
        &format!("an AdmissionExplained Event on {namespace}/{name}"),
        timeout,
        every,
        || {
            let events = events.clone();
            let uid = uid.clone();
            async move {
                let list = match events.list(&ListParams::default()).await {
                    Ok(l) => l,
                    Err(e) => return Progress::Pending(e.to_string()),
                };
                let found = list.items.into_iter().find(|ev| {
                    ev.reason.as_deref() == Some("AdmissionExplained")
                        && ev.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(&uid)
                });
                match found {
                    Some(ev) => Progress::Done(ev),
                    None => Progress::Pending("no Event yet".into()),
                }
            }
        },
    )
    .await?;
    if event.type_.as_deref() != Some("Warning") || event.note.as_deref() != Some(&e.summary) {
        bail!(
            "the AdmissionExplained Event: type {:?}, note {:?}, want Warning with the summary {:?}",
            event.type_,
            event.note,
            e.summary
        );
    }
    checks += 1;
    println!(
        "[local-node] Event AdmissionExplained on {namespace}/{name}: {}",
        e.summary
    );
    pods.delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting pod {name}"))?;
    poll_until(
        &format!("{node}: {name}'s rejection gone with the pod"),
        timeout,
        every,
        || {
            let topologies = topologies.clone();
            let uid = uid.clone();
            async move {
                match topologies.get_status(node).await {
                    Ok(nt)
                        if nt
                            .status
                            .as_ref()
                            .is_some_and(|s| s.rejections.iter().any(|r| r.pod_uid == uid)) =>
                    {
                        Progress::Pending("still listed".into())
                    }
                    Ok(_) => Progress::Done(()),
                    Err(e) => Progress::Pending(e.to_string()),
                }
            }
        },
    )
    .await?;
    Ok(checks + 1)
}
