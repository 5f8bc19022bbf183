//! NodeResourceTopology publishing (`--nrt`, chart value `nrt.enabled`): the object the
//! topology-aware scheduler plugins read, built by `nodetopo_crds::nrt::build` from the same
//! state as NodeTopology status, and written by a task of its own.
//!
//! - [`desired`] is pure: the core's applied spec, pools and allocation records, and the
//!   kubelet's own view where it is readable, into the object. The exclusive CPUs are those
//!   of NodeTopology status's `kubelet` (the same source: the kubelet's PodResources API,
//!   `PodResources`, else its CPU manager checkpoint, `Checkpoint`), or, with neither, the
//!   agent's own admissions (`Agent`); a kubelet running CPU manager policy `none` is
//!   published as such (nothing pinned) whatever nodetopo's spec says. With PodResources the
//!   reserved CPUs are the kubelet's (online minus its allocatable CPUs) and the Memory
//!   Manager's tables come from its allocatable memory and pinned blocks. The topology
//!   manager policy, scope and NUMA limit are the running kubelet's where the agent knows
//!   them (`Core::topology_manager`: its configuration files, else the apply actuation
//!   verified), else the spec's, and the attribute `nodetopo.io/topologyManagerSource`
//!   names which. The fingerprint
//!   covers the scheduler plugin's pod set: every pod the agent watches on the node (specs
//!   and phases from the API, as the plugin's informer has them), filtered by the plugin's
//!   rule. A contradiction in these inputs is an [`NrtProblem::Build`], which the shell
//!   publishes as a condition and an event.
//! - [`writer`] applies it (server-side apply, field manager `nodetopo-agent`, not forced:
//!   a conflict with another producer such as NFD's topology-updater is logged, never
//!   overridden), with an owner reference to the Node, only when it differs from what was
//!   last written, retrying with backoff and always sending the latest object. The cluster
//!   loop's 100 ms debounce bounds the rate of new objects.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams};
use kube::Api;
use nodetopo_crds::nrt::memory::{self, MemoryBlock};
use nodetopo_crds::nrt::{
    self, from_engine, AllocationSource, CpuAccounting, DeviceInventory, MemoryManagerView,
    NodePod, NodeResourceTopology, NrtInput, ReservedSource,
};
use nodetopo_crds::{KubeletObserved, KubeletSource, NodeTopologyStatus, AGENT_FIELD_MANAGER};
use nodetopo_engine::admission::{CpuPolicyConfig, Pools};
use nodetopo_engine::CpuSet;

use crate::daemon::core::Core;
use crate::daemon::inputs::podresources::KubeletView;
use crate::daemon::inputs::spec::node_config;
use nodetopo_kubelet::memory_checkpoint::MemoryCheckpoint;

/// Why no object is handed to the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NrtProblem {
    /// Nothing to publish yet: no spec applied, or none in effect (the NodeTopology
    /// conditions already say why).
    Waiting(String),
    /// The inputs contradict each other or the machine (e.g. an exclusive CPU inside the
    /// reserved set, a memory report that does not fit): the object would lie, so it is not
    /// written, and the shell reports this as the `NodeResourceTopology` condition and a
    /// Warning event rather than letting the object silently freeze.
    Build(String),
}

impl std::fmt::Display for NrtProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NrtProblem::Waiting(m) | NrtProblem::Build(m) => f.write_str(m),
        }
    }
}

/// The object for the core's current state, or why there is none (see [`NrtProblem`]).
pub fn desired(
    core: &Core,
    status: &NodeTopologyStatus,
    node: &str,
) -> Result<NodeResourceTopology, NrtProblem> {
    let waiting = |m: String| NrtProblem::Waiting(m);
    let spec = core
        .spec()
        .ok_or_else(|| waiting("no NodeTopology spec applied yet".to_string()))?;
    let config = node_config(spec).map_err(|e| waiting(e.to_string()))?;
    let pools = core
        .pools()
        .ok_or_else(|| waiting("no configuration in effect".to_string()))?;
    // The same kubelet view as NodeTopology status: PodResources, else the checkpoint.
    let kubelet = status.kubelet.as_ref().filter(|k| {
        matches!(
            k.source,
            KubeletSource::PodResources | KubeletSource::Checkpoint
        )
    });
    // The PodResources answer, only when it is the source status shows (an answer refused
    // for its CPUs is not half-used for its memory or devices).
    let podresources = match kubelet.map(|k| k.source) {
        Some(KubeletSource::PodResources) => core.podresources(),
        _ => None,
    };
    let online = core.topology().all_cpus();
    let (cpu, source, reserved_source) = match kubelet {
        // A kubelet with CPU manager policy none pins nothing, whatever the spec says.
        Some(k) if k.policy_name == "none" => (
            CpuAccounting::PolicyNone {
                reserved: pools.reserved.clone(),
            },
            allocation_source(k.source),
            ReservedSource::Spec,
        ),
        Some(k) => {
            // The kubelet's own allocatable CPUs where it reports them: its reserved set is
            // the rest of the online CPUs, whatever nodetopo's spec says.
            let (reserved, reserved_source) = match podresources {
                Some(v) if !v.allocatable_cpus.is_empty() => (
                    online.difference(&v.allocatable_cpus),
                    ReservedSource::PodResources,
                ),
                _ => (pools.reserved.clone(), ReservedSource::Spec),
            };
            let cpu = kubelet_cpu_accounting(k, &config.cpu, &pools, reserved)
                .map_err(NrtProblem::Build)?;
            (cpu, allocation_source(k.source), reserved_source)
        }
        None => (
            from_engine::cpu_accounting(&config.cpu, &pools),
            AllocationSource::Agent,
            ReservedSource::Spec,
        ),
    };
    // The Memory Manager as the kubelet reports it: Static when it reports allocatable
    // memory (its tables from that and the pinned blocks), None when it reports none.
    // Without PodResources, the kubelet's own Memory Manager checkpoint where it is usable.
    let tables;
    let memory = match podresources {
        Some(v) if !v.allocatable_memory.is_empty() => {
            let pinned = pinned_blocks(v).map_err(NrtProblem::Build)?;
            tables = memory::memory_tables(core.topology(), &v.allocatable_memory, &pinned)
                .map_err(|e| NrtProblem::Build(e.to_string()))?;
            MemoryManagerView::Static(&tables)
        }
        Some(_) => MemoryManagerView::None,
        None => match checkpoint_memory(core.kubelet_memory()) {
            Some(Some(t)) => {
                tables = t;
                MemoryManagerView::Static(&tables)
            }
            Some(None) => MemoryManagerView::None,
            None => MemoryManagerView::Unknown,
        },
    };
    let no_devices = DeviceInventory::default();
    let devices = podresources.map_or(&no_devices, |v| &v.devices);
    // Every pod bound to the node, with its phase: the builder keeps the ones the
    // scheduler plugin fingerprints for this object.
    let pods: Vec<NodePod<'_>> = core
        .pods()
        .map(|p| NodePod {
            pod: &p.pod,
            phase: &p.phase,
        })
        .collect();
    // The running kubelet's topology manager configuration where the agent can know it
    // (its files, else a verified apply), else the spec's, marked unverified.
    let tm = core.topology_manager().ok_or_else(|| {
        waiting("no topology manager configuration: the spec does not apply".to_string())
    })?;
    let input = NrtInput {
        node_name: node,
        node_uid: None,
        topology: core.topology(),
        cpu,
        reserved_source,
        topology_manager: tm.view,
        topology_manager_source: tm.source,
        memory,
        pods: &pods,
        source,
        devices,
    };
    nrt::build(&input).map_err(|e| NrtProblem::Build(e.to_string()))
}

/// The Memory Manager from the kubelet's own checkpoint (`memory_manager_state`, read as the
/// kubelet restores it): `Some(Some(tables))` under policy `Static` (the machine state the
/// kubelet runs with), `Some(None)` under `None`; `None` (unknown) when there is no
/// checkpoint, or one the kubelet would refuse, or tables that do not add up.
fn checkpoint_memory(
    read: &Result<Option<MemoryCheckpoint>, String>,
) -> Option<Option<memory::MemoryTables>> {
    let state = read.as_ref().ok()?.as_ref()?.trusted().ok()?;
    match state.policy_name.as_str() {
        "Static" => state.tables().ok().map(Some),
        "None" => Some(None),
        _ => None,
    }
}

/// The pinned memory blocks of a PodResources answer, with their NUMA ids checked.
fn pinned_blocks(v: &KubeletView) -> Result<Vec<MemoryBlock>, String> {
    v.memory
        .iter()
        .map(|m| {
            let owner = format!("{}/{}/{}", m.namespace, m.pod, m.container);
            let numa_nodes = m
                .numa_nodes
                .iter()
                .map(|id| {
                    usize::try_from(*id).map_err(|_| {
                        format!(
                            "memory block of {owner}: NUMA node {id} is not a valid NUMA node id"
                        )
                    })
                })
                .collect::<Result<Vec<usize>, String>>()?;
            Ok(MemoryBlock {
                owner,
                resource: m.memory_type.clone(),
                size: m.size,
                numa_nodes,
            })
        })
        .collect()
}

/// The static-policy CPU accounting the kubelet's view `k` shows: its exclusive CPUs are
/// the union of its assignments, the reserved set is `reserved` (the kubelet's where it
/// reports it, else nodetopo's) and the options are nodetopo's (`config`, `pools`). Errors
/// name an assignment whose CPU list does not parse.
fn kubelet_cpu_accounting(
    k: &KubeletObserved,
    config: &CpuPolicyConfig,
    pools: &Pools,
    reserved: CpuSet,
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
        reserved,
        exclusive,
        options,
    })
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
