//! The end-to-end scenario, one code for every cluster provider: `kind` (users with Docker,
//! `tests/kind.rs`) and `local-node` (a real kubelet, containerd and the real control plane on
//! this machine, `tests/local_node.rs`, run by CI).
//!
//! The chart is installed by the provider; the scenario then checks, in order:
//! 1. the operator Deployment is available and one of its pods holds the leader Lease; an
//!    agent pod runs on every node;
//! 2. every node has a NodeTopology whose status the agent published;
//! 3. a NodeResourcePolicy rolls out to the labelled nodes;
//! 4. on every selected node: a Guaranteed pod with an init container and whole CPUs, a
//!    fractional Guaranteed pod and a Burstable pod. Every container's cgroup cpuset (read
//!    by the provider) equals the published allocation or the shared pool; the init
//!    container ran on the CPUs its app container got; KubeletAgreement is True/Agree; where
//!    the provider reads the kubelet's own records, the checkpoint and the PodResources
//!    answer say the same, and the NodeTopology's `status.kubelet` (source PodResources)
//!    with them; the NodeResourceTopology (when installed) counts the same exclusive CPUs;
//! 5. restarting the agent and (where the provider can) the kubelet with the pods running
//!    changes nothing;
//! 6. deleting the pinned pod returns its CPUs: to the published pools, and to the shared
//!    pool's cgroups;
//! 7. a pod holding a test device (where the provider registers a device plugin): its
//!    device in the PodResources answer, its CPUs as above;
//! 8. changing the policy rolls out again; deleting it puts the nodes back on policy `none`;
//! 9. `helm uninstall` removes the workloads, RBAC and admission policy; the CRDs (kept by
//!    Helm) are then deleted and take every NodeTopology with them.
//!
//! Expectations come from the discovered topology (`status.topology.cpus`) and the policy's
//! reserved CPU, never from a fixed machine.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use nodetopo_crds::conditions::{APPLIED, KUBELET_AGREEMENT};
use nodetopo_engine::quantity::parse_millis;
use nodetopo_engine::CpuSet;
use serde_json::json;

use crate::objects::{
    node_resource_policy_resource, node_topology_resource, policy_manifest, PolicyView,
    TopologyView, FIELD_MANAGER,
};
use crate::pods::{Container, Resources, TestPod, Workload};
use crate::wait::{poll_until, wait_for, Progress};

mod checks;
mod lifecycle;
mod placement;
mod policy;

pub use checks::nrt_cpus_taken;

/// The test NodeResourcePolicy.
pub const POLICY: &str = "nodetopo-e2e";
/// The KubeletAgreement reason when the kubelet's view was read and matches.
const KUBELET_AGREE: &str = "Agree";
/// The operator's leader-election Lease (in the release namespace).
const OPERATOR_LEASE: &str = "nodetopo-operator";

/// A device the provider's device plugin offers on every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestDevice {
    /// Extended resource name.
    pub resource: String,
    /// Device id -> NUMA node it sits on.
    pub numa_of: BTreeMap<String, u64>,
}

/// One container in the PodResources answer: its CPUs and, per resource, its device ids.
pub type Answered = (CpuSet, BTreeMap<String, Vec<String>>);

/// What the kubelet itself recorded on one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletRecords {
    /// The CPU manager checkpoint's `defaultCpuSet`.
    pub checkpoint_default: CpuSet,
    /// The checkpoint's entries: (pod UID, container) -> CPUs.
    pub checkpoint: BTreeMap<(String, String), CpuSet>,
    /// PodResources `List`: (`namespace/name`, container) -> (CPUs, resource -> device ids).
    pub pod_resources: BTreeMap<(String, String), Answered>,
}

/// How one kind of cluster gives the scenario what it cannot read through the API.
pub trait Provider: Sync {
    /// `kind` or `local-node`.
    fn name(&self) -> &'static str;
    /// The image and commands of test containers.
    fn workload(&self) -> Workload;
    /// The device the provider's device plugin offers, if it runs one.
    fn test_device(&self) -> Option<TestDevice>;
    /// Whether the chart was installed with the NodeResourceTopology CRD and `nrt.enabled`.
    fn nrt(&self) -> bool;
    /// The cpuset the kernel enforces on a running container.
    fn container_cpuset(
        &self,
        pod: &Pod,
        container: &str,
    ) -> impl Future<Output = Result<CpuSet>> + Send;
    /// A container's log (the init containers print their CPUs).
    fn container_log(
        &self,
        pod: &Pod,
        container: &str,
    ) -> impl Future<Output = Result<String>> + Send;
    /// The kubelet's checkpoint and PodResources answer on `node`; `None` where the provider
    /// cannot read them.
    fn kubelet_records(
        &self,
        node: &str,
    ) -> impl Future<Output = Result<Option<KubeletRecords>>> + Send;
    /// Restarts the kubelet on `node` with its pods running, and returns once the Node is
    /// Ready again; `false` where the provider cannot.
    fn restart_kubelet(&self, node: &str) -> impl Future<Output = Result<bool>> + Send;
    /// `helm uninstall --wait` of the release.
    fn helm_uninstall(&self) -> impl Future<Output = Result<()>> + Send;
    /// Makes the kubelet's next start through the agent's hooks fail (as a kubelet that
    /// refuses its configuration does); `false` where the provider cannot.
    fn fail_next_kubelet_start(&self) -> bool;
    /// Whether the chart was installed with actuation on (the agents apply policies whose
    /// rollout mode is Apply, restarting the kubelet).
    fn actuation(&self) -> bool;
    /// The topology manager flag on the kubelet's command line, where the provider starts
    /// it with one that differs from its configuration file (the NodeResourceTopology then
    /// names `KubeletCommandLine` as the source). None by default.
    fn kubelet_tm_flag(&self) -> Option<&'static str> {
        None
    }
    /// The kubelet's running configuration on `node` (its `/configz`, the `kubeletconfig`
    /// object); `None` where the provider cannot read it.
    fn kubelet_configz(
        &self,
        node: &str,
    ) -> impl Future<Output = Result<Option<serde_json::Value>>> + Send;
    /// The provider's own checks on `node` while the pinned pods run under topology manager
    /// `restricted` (step 5c), with pods in `namespace`; returns how many passed. None by
    /// default.
    fn checks_while_pinned(
        &self,
        client: &Client,
        namespace: &str,
        node: &str,
    ) -> impl Future<Output = Result<usize>> + Send {
        let _ = (client, namespace, node);
        async { Ok(0) }
    }
}

/// The scenario's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespace of the Helm release.
    pub release_namespace: String,
    /// Helm release name.
    pub release: String,
    /// Namespace of the test pods (created and deleted by the scenario).
    pub pod_namespace: String,
    /// Label (key, value) of the nodes the test policy selects.
    pub node_label: (String, String),
    /// Whole CPUs per pinned container; `None`: as many as the node can give one container
    /// (online CPUs minus the reserved CPU 0), at most 2.
    pub cpus: Option<u32>,
    /// Timeout of each wait.
    pub timeout: Duration,
}

fn step(text: &str) {
    println!("[e2e] {text}");
}

/// Parses every NodeTopology in a snapshot; a malformed one fails the wait at once.
fn views(items: &[&DynamicObject]) -> Result<BTreeMap<String, TopologyView>, String> {
    items
        .iter()
        .map(|o| {
            TopologyView::from_object(o)
                .map(|v| (v.name.clone(), v))
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// The pods the scenario places on one node.
struct NodePods {
    node: String,
    pinned: TestPod,
    fractional: TestPod,
    /// Whether the fractional pod fits beside the pinned one (the node's allocatable CPU);
    /// where it does not (2 CPUs: 1 reserved, 1 pinned), it runs after the pinned pod is gone.
    fractional_beside: bool,
    burstable: TestPod,
    cpus: u32,
}

impl NodePods {
    /// The shared-pool pods that run beside the pinned one.
    fn shared_pods(&self) -> Vec<&TestPod> {
        if self.fractional_beside {
            vec![&self.fractional, &self.burstable]
        } else {
            vec![&self.burstable]
        }
    }
}

/// What a node published for its pinned container: its CPUs and the shared pool.
#[derive(Debug, Clone)]
struct Placed {
    exclusive: CpuSet,
    shared: CpuSet,
}

/// One run of the scenario against a connected cluster.
pub struct Scenario<'a, P: Provider> {
    provider: &'a P,
    settings: Settings,
    client: Client,
    topologies: Api<DynamicObject>,
    policies: Api<DynamicObject>,
    pods: Api<Pod>,
    all_nodes: BTreeSet<String>,
    selected: BTreeSet<String>,
    /// Checks made, for the closing line.
    checks: usize,
}

impl<'a, P: Provider> Scenario<'a, P> {
    /// Lists the nodes; fails when none carries the policy's label.
    pub async fn connect(provider: &'a P, client: Client, settings: Settings) -> Result<Self> {
        let nodes: Api<Node> = Api::all(client.clone());
        let list = nodes
            .list(&ListParams::default())
            .await
            .context("listing nodes")?;
        let all_nodes: BTreeSet<String> = list.items.iter().map(|n| n.name_any()).collect();
        let (key, value) = &settings.node_label;
        let selected: BTreeSet<String> = list
            .items
            .iter()
            .filter(|n| n.labels().get(key) == Some(value))
            .map(|n| n.name_any())
            .collect();
        if selected.is_empty() {
            bail!("no node carries the label {key}={value}; nodes: {all_nodes:?}");
        }
        Ok(Self {
            provider,
            topologies: Api::all_with(client.clone(), &node_topology_resource()),
            policies: Api::all_with(client.clone(), &node_resource_policy_resource()),
            pods: Api::namespaced(client.clone(), &settings.pod_namespace),
            client,
            settings,
            all_nodes,
            selected,
            checks: 0,
        })
    }

    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) -> Result<()> {
        self.checks += 1;
        if ok {
            Ok(())
        } else {
            bail!("{} (provider {})", what(), self.provider.name())
        }
    }

    /// Runs every step; returns how many checks passed.
    pub async fn run(mut self) -> Result<usize> {
        step(&format!(
            "provider {}; nodes {:?}; policy selects {:?}",
            self.provider.name(),
            self.all_nodes,
            self.selected
        ));
        step("1. operator available and leading; an agent running on every node");
        self.installed().await?;
        step("2. every node has a NodeTopology with a published status");
        self.published().await?;
        if self.provider.nrt() {
            // Before any apply the kubelet runs its own files and flags.
            self.check_nrt_topology_managers().await?;
        }
        step("3. apply NodeResourcePolicy (static, reserved CPU 0, best-effort)");
        let first = self.apply_policy("best-effort", false).await?;
        step("4. pinned (init + app), fractional and Burstable pods on every selected node");
        self.ensure_namespace().await?;
        let mut placement = self.placement().await?;
        for p in &placement {
            self.create(&p.pinned, &p.node).await?;
        }
        self.wait_running(&placement, |p| vec![p.pinned.name.clone()])
            .await?;
        // The shared-pool pods come second so the kubelet gives them the pool that already
        // excludes the pinned containers' CPUs.
        for p in &placement {
            for pod in p.shared_pods() {
                self.create(pod, &p.node).await?;
            }
        }
        self.wait_running(&placement, |p| {
            p.shared_pods().iter().map(|t| t.name.clone()).collect()
        })
        .await?;
        let placed = self.wait_allocations(&placement).await?;
        self.check_containers(&placement, &placed, true).await?;
        if self.provider.nrt() {
            self.check_nrt(&placement).await?;
        }

        step("5. restart the agent and the kubelet with the pods running: nothing changes");
        self.restart_agents().await?;
        self.wait_allocations(&placement).await?;
        self.check_containers(&placement, &placed, true).await?;
        for node in self.selected.clone() {
            if self.provider.restart_kubelet(&node).await? {
                step(&format!("   {node}: kubelet restarted, Node Ready again"));
                let again = self.wait_allocations(&placement).await?;
                for p in &placement {
                    let (before, after) = (&placed[&p.node], &again[&p.node]);
                    self.check(before.exclusive == after.exclusive, || {
                        format!(
                            "{}: pinned CPUs changed across the kubelet restart: {} -> {}",
                            p.node, before.exclusive, after.exclusive
                        )
                    })?;
                }
                self.check_containers(&placement, &placed, true).await?;
            } else {
                step(&format!(
                    "   {node}: provider {} cannot restart the kubelet (skipped)",
                    self.provider.name()
                ));
            }
        }

        let mut last_tm = "restricted";
        if self.provider.actuation() {
            step("5b. actuation with the pinned pods running: topology manager restricted (a kubelet restart)");
            let mut before = BTreeMap::new();
            for p in &placement {
                let pod = self.pod(&p.pinned.name).await?;
                before.insert(
                    p.node.clone(),
                    self.provider.container_cpuset(&pod, "app").await?,
                );
            }
            self.apply_policy("restricted", false).await?;
            for node in self.selected.clone() {
                let obj = self.topologies.get(&node).await?;
                let view = TopologyView::from_object(&obj)?;
                let reason = view.condition(APPLIED).map(|c| c.reason.clone());
                self.check(reason.as_deref() == Some("RestartOnly"), || {
                    format!("{node}: Applied reason {reason:?}, want RestartOnly (best-effort -> restricted)")
                })?;
                let done = obj.data["status"]["change"]["done"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                self.check(!done.is_empty(), || {
                    format!(
                        "{node}: status.change.done is empty after a RestartOnly apply: {}",
                        obj.data["status"]["change"]
                    )
                })?;
                step(&format!(
                    "   {node}: status.change.done: {}",
                    serde_json::Value::Array(done)
                ));
            }
            self.wait_allocations(&placement).await?;
            for p in &placement {
                let pod = self.pod(&p.pinned.name).await?;
                let after = self.provider.container_cpuset(&pod, "app").await?;
                let was = &before[&p.node];
                self.check(&after == was, || {
                    format!(
                        "{}: {}/app's cgroup cpuset changed across the apply: {was} -> {after}",
                        p.node, p.pinned.name
                    )
                })?;
            }
            self.check_containers(&placement, &placed, true).await?;
            for p in &placement {
                let passed = self
                    .provider
                    .checks_while_pinned(&self.client, &self.settings.pod_namespace, &p.node)
                    .await?;
                if passed > 0 {
                    step(&format!("5c. {}: {passed} provider checks passed", p.node));
                }
                self.checks += passed;
            }
            last_tm = "single-numa-node";
        }

        step("6. delete the pinned pods: their CPUs return to the pools and the shared cgroups");
        for p in &placement {
            self.pods
                .delete(&p.pinned.name, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting pod {}", p.pinned.name))?;
        }
        for p in &placement {
            self.wait_pod_gone(&p.pinned.name).await?;
        }
        self.wait_released(&placement, &placed).await?;
        // Where the fractional pod could not run beside the pinned one, it runs now, on the
        // whole shared pool, and goes again before the device pods need the CPU.
        let late: Vec<usize> = (0..placement.len())
            .filter(|&i| !placement[i].fractional_beside)
            .collect();
        for &i in &late {
            let p = &placement[i];
            step(&format!(
                "   {}: the fractional pod runs only now: the node's allocatable CPU cannot hold it beside {} pinned CPU(s)",
                p.node, p.cpus
            ));
            self.create(&p.fractional, &p.node).await?;
        }
        for &i in &late {
            placement[i].fractional_beside = true;
        }
        self.wait_running(&placement, |p| {
            p.shared_pods().iter().map(|t| t.name.clone()).collect()
        })
        .await?;
        self.check_containers(&placement, &placed, false).await?;
        if self.provider.nrt() {
            self.check_nrt_fingerprints(&placement).await?;
        }
        for &i in &late {
            let name = placement[i].fractional.name.clone();
            self.pods
                .delete(&name, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting pod {name}"))?;
            self.wait_pod_gone(&name).await?;
        }

        if let Some(device) = self.provider.test_device() {
            step(&format!("7. a pod holding one {} device", device.resource));
            self.device_pods(&placement, &device).await?;
        } else {
            step("7. no device plugin on this provider (skipped)");
        }

        // With actuation and no pinned container left: strict-cpu-reservation, which the
        // kubelet's state file must be rewritten for (the reserved CPU leaves the shared pool).
        let strict = self.provider.actuation();
        step(&format!(
            "8. change the policy ({last_tm}{}), then delete it",
            if strict {
                ", strict-cpu-reservation: a state rewrite"
            } else {
                ""
            }
        ));
        if strict {
            // The kubelet drops a deleted pod's entry from its checkpoint only at its next
            // reconcile; a plan made before reads the CPU as still assigned (no shared CPU
            // left under strict reservation: Drain). Wait until the checkpoint is empty.
            for node in self.selected.clone() {
                let provider = self.provider;
                poll_until(
                    &format!("{node}: no exclusive assignment left in the kubelet's checkpoint"),
                    self.settings.timeout,
                    Duration::from_millis(500),
                    || {
                        let node = node.clone();
                        async move {
                            match provider.kubelet_records(&node).await {
                                Ok(Some(r)) if !r.checkpoint.is_empty() => {
                                    Progress::Pending(format!("entries {:?}", r.checkpoint))
                                }
                                Ok(_) => Progress::Done(()),
                                Err(e) => Progress::Failed(e.to_string()),
                            }
                        }
                    },
                )
                .await?;
            }
        }
        let second = self.apply_policy(last_tm, strict).await?;
        if strict {
            self.check_strict(&placement).await?;
        }
        self.check(second > first, || {
            format!("policy generation did not advance: {first} -> {second}")
        })?;
        if strict && self.provider.fail_next_kubelet_start() {
            step("8b. a change whose kubelet start fails: rolled back, the node stays Ready");
            self.rolled_back(last_tm).await?;
        }
        self.policies
            .delete(POLICY, &DeleteParams::default())
            .await
            .context("deleting the test NodeResourcePolicy")?;
        self.wait_policy_gone().await?;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces
            .delete(&self.settings.pod_namespace, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting namespace {}", self.settings.pod_namespace))?;

        step("9. helm uninstall and see cleanup");
        self.uninstall().await?;
        step(&format!(
            "all steps passed on {} ({} checks)",
            self.provider.name(),
            self.checks
        ));
        Ok(self.checks)
    }
}
