//! NodeResourceTopology publishing (`--nrt`, chart value `nrt.enabled`): the object the
//! topology-aware scheduler plugins read, built by `nodetopo_crds::nrt::build` from the same
//! state as NodeTopology status, and written by a task of its own.
//!
//! - [`desired`] is pure: the core's applied spec, pools and allocation records, and the
//!   kubelet's own view where it is readable, into the object. The exclusive CPUs are those
//!   of NodeTopology status's `kubelet` (the same source: the kubelet's PodResources API,
//!   `PodResources`, else its CPU manager checkpoint, `Checkpoint`), or, with neither, the
//!   agent's own admissions (`Agent`); a kubelet running CPU manager policy `none` is
//!   published as such (nothing pinned) whatever nodetopo's spec says.
//! - [`writer`] applies it (server-side apply, field manager `nodetopo-agent`, not forced:
//!   a conflict with another producer such as NFD's topology-updater is logged, never
//!   overridden), with an owner reference to the Node, only when it differs from what was
//!   last written, retrying with backoff and always sending the latest object. The cluster
//!   loop's 100 ms debounce bounds the rate of new objects.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams};
use kube::Api;
use nodetopo_crds::nrt::{
    self, from_engine, AllocationSource, CpuAccounting, DeviceInventory, NodeResourceTopology,
    NrtInput,
};
use nodetopo_crds::{KubeletObserved, KubeletSource, NodeTopologyStatus, AGENT_FIELD_MANAGER};
use nodetopo_engine::admission::{CpuManagerConfig, Pools};
use nodetopo_engine::CpuSet;

use crate::daemon::core::Core;
use crate::daemon::inputs::spec::node_config;

/// The object for the core's current state, or why there is none yet (no spec applied, a
/// spec that does not apply, or inputs the builder refuses).
pub fn desired(
    core: &Core,
    status: &NodeTopologyStatus,
    node: &str,
) -> Result<NodeResourceTopology, String> {
    let spec = core
        .spec()
        .ok_or_else(|| "no NodeTopology spec applied yet".to_string())?;
    let config = node_config(spec).map_err(|e| e.to_string())?;
    let pools = core
        .pools()
        .ok_or_else(|| "no configuration in effect".to_string())?;
    // Pod names by UID, from the agent's records (the kubelet's checkpoint has UIDs only).
    let names: BTreeMap<&str, &str> = core
        .allocations()
        .map(|a| (a.pod_uid.as_str(), a.pod.as_str()))
        .collect();
    // The same kubelet view as NodeTopology status: PodResources, else the checkpoint.
    let kubelet = status.kubelet.as_ref().filter(|k| {
        matches!(
            k.source,
            KubeletSource::PodResources | KubeletSource::Checkpoint
        )
    });
    let (cpu, pods, source) = match kubelet {
        // A kubelet with CPU manager policy none pins nothing, whatever the spec says.
        Some(k) if k.policy_name == "none" => (
            CpuAccounting::PolicyNone {
                reserved: pools.reserved.clone(),
            },
            Vec::new(),
            allocation_source(k.source),
        ),
        Some(k) => {
            let cpu = kubelet_cpu_accounting(k, &config.cpu, &pools)?;
            (
                cpu,
                kubelet_pinned_pods(k, &names),
                allocation_source(k.source),
            )
        }
        None => (
            from_engine::cpu_accounting(&config.cpu, &pools),
            from_engine::fingerprint_pods(core.allocations()),
            AllocationSource::Agent,
        ),
    };
    // Devices only from PodResources, and only when it is the source status shows (an
    // answer refused for its CPUs is not half-used for its devices).
    let no_devices = DeviceInventory::default();
    let devices = match (kubelet.map(|k| k.source), core.podresources()) {
        (Some(KubeletSource::PodResources), Some(v)) => &v.devices,
        _ => &no_devices,
    };
    let input = NrtInput {
        node_name: node,
        node_uid: None,
        topology: core.topology(),
        cpu,
        topology_manager: from_engine::topology_manager_view(&config),
        memory: None,
        fingerprint_pods: &pods,
        source,
        devices,
    };
    nrt::build(&input).map_err(|e| e.to_string())
}

/// The static-policy CPU accounting the kubelet's view `k` shows: its exclusive CPUs are
/// the union of its assignments, the reserved set and the options are nodetopo's
/// (`config`, `pools`). Errors name an assignment whose CPU list does not parse.
fn kubelet_cpu_accounting(
    k: &KubeletObserved,
    config: &CpuManagerConfig,
    pools: &Pools,
) -> Result<CpuAccounting, String> {
    let mut exclusive = CpuSet::new();
    for a in &k.assignments {
        let set = CpuSet::parse(&a.cpus).map_err(|e| {
            format!(
                "kubelet assignment {}/{}: {:?}: {e}",
                if a.pod.is_empty() { &a.pod_uid } else { &a.pod },
                a.container,
                a.cpus
            )
        })?;
        exclusive = exclusive.union(&set);
    }
    let options = match from_engine::cpu_accounting(config, pools) {
        CpuAccounting::Static { options, .. } => options,
        CpuAccounting::PolicyNone { .. } => Default::default(),
    };
    Ok(CpuAccounting::Static {
        reserved: pools.reserved.clone(),
        exclusive,
        options,
    })
}

/// The pods the kubelet's view `k` pins, as sorted, distinct (`namespace`, `name`) pairs.
/// PodResources names them; a checkpoint UID the agent has no record of in `names` (a pod
/// it has not seen yet) cannot be named, and the scheduler then sees a fingerprint
/// mismatch and keeps its own accounting for the node until the next write.
fn kubelet_pinned_pods(k: &KubeletObserved, names: &BTreeMap<&str, &str>) -> Vec<(String, String)> {
    let mut pods: Vec<(String, String)> = k
        .assignments
        .iter()
        .filter_map(|a| {
            if a.pod.is_empty() {
                names.get(a.pod_uid.as_str()).copied()
            } else {
                Some(a.pod.as_str())
            }
        })
        .filter_map(|p| p.split_once('/'))
        .map(|(ns, n)| (ns.to_string(), n.to_string()))
        .collect();
    pods.sort();
    pods.dedup();
    pods
}

fn allocation_source(s: KubeletSource) -> AllocationSource {
    match s {
        KubeletSource::PodResources => AllocationSource::PodResources,
        KubeletSource::Checkpoint => AllocationSource::Checkpoint,
        KubeletSource::None => AllocationSource::Agent,
    }
}

/// `obj` owned by the Node `node` with UID `uid`.
pub fn owned_by_node(mut obj: NodeResourceTopology, node: &str, uid: &str) -> NodeResourceTopology {
    obj.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.to_string(),
        uid: uid.to_string(),
        ..Default::default()
    }]);
    obj
}

/// Writes the latest object (see the module documentation). Returns when the sender is
/// dropped.
pub async fn writer(
    api: Api<NodeResourceTopology>,
    nodes: Api<Node>,
    node: String,
    mut rx: tokio::sync::watch::Receiver<Option<NodeResourceTopology>>,
) {
    // The owner reference needs the Node's UID.
    let mut delay = Duration::from_millis(500);
    let uid = loop {
        match nodes.get(&node).await {
            Ok(n) => match n.metadata.uid {
                Some(uid) => break uid,
                None => tracing::warn!("Node {node} has no UID yet"),
            },
            Err(e) => tracing::warn!(
                "reading Node {node} for the NodeResourceTopology owner reference: {e}"
            ),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    };
    let params = PatchParams::apply(AGENT_FIELD_MANAGER);
    let mut written: Option<NodeResourceTopology> = None;
    'latest: loop {
        let latest = rx.borrow_and_update().clone();
        if let Some(obj) = latest.filter(|o| written.as_ref() != Some(o)) {
            let body = owned_by_node(obj.clone(), &node, &uid);
            let mut delay = Duration::from_millis(100);
            loop {
                match api.patch(&node, &params, &Patch::Apply(&body)).await {
                    Ok(_) => {
                        written = Some(obj);
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(
                            "applying NodeResourceTopology {node} failed, retrying in {delay:?}: {e}"
                        );
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            // A newer object replaces the one being retried.
                            r = rx.changed() => match r {
                                Ok(()) => continue 'latest,
                                Err(_) => return,
                            },
                        }
                        delay = (delay * 2).min(Duration::from_secs(30));
                    }
                }
            }
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
