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
    /// The kubelet's running configuration on `node` (its `/configz`, the `kubeletconfig`
    /// object); `None` where the provider cannot read it.
    fn kubelet_configz(
        &self,
        node: &str,
    ) -> impl Future<Output = Result<Option<serde_json::Value>>> + Send;
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

    async fn installed(&mut self) -> Result<()> {
        let ns = self.settings.release_namespace.clone();
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &ns);
        wait_for(
            deployments,
            watcher::Config::default(),
            "the operator Deployment available",
            self.settings.timeout,
            |items| {
                let Some(d) = items.iter().find(|d| d.name_any().ends_with("operator")) else {
                    return Progress::Pending("no operator Deployment".into());
                };
                let ready = d
                    .status
                    .as_ref()
                    .and_then(|s| s.available_replicas)
                    .unwrap_or(0);
                if ready >= 1 {
                    Progress::Done(())
                } else {
                    Progress::Pending(format!("{} has no available replica", d.name_any()))
                }
            },
        )
        .await?;
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let holder = poll_until(
            "the operator's Lease held by a running operator pod",
            self.settings.timeout,
            Duration::from_millis(500),
            || {
                let (leases, pods) = (leases.clone(), pods.clone());
                async move {
                    let holder = match leases.get_opt(OPERATOR_LEASE).await {
                        Ok(l) => l.and_then(|l| l.spec?.holder_identity),
                        Err(e) => return Progress::Failed(format!("reading the Lease: {e}")),
                    };
                    let Some(holder) = holder else {
                        return Progress::Pending(format!("Lease {OPERATOR_LEASE} has no holder"));
                    };
                    match pods.get_opt(&holder).await {
                        Ok(Some(p))
                            if p.status.as_ref().and_then(|s| s.phase.as_deref())
                                == Some("Running") =>
                        {
                            Progress::Done(holder)
                        }
                        Ok(p) => Progress::Pending(format!(
                            "Lease holder {holder} is not a running pod ({:?})",
                            p.and_then(|p| p.status?.phase)
                        )),
                        Err(e) => Progress::Failed(format!("reading pod {holder}: {e}")),
                    }
                }
            },
        )
        .await?;
        step(&format!("   operator leader: {holder}"));
        let daemonsets: Api<DaemonSet> = Api::namespaced(self.client.clone(), &ns);
        let nodes = self.all_nodes.len();
        wait_for(
            daemonsets,
            watcher::Config::default(),
            "an agent pod ready on every node",
            self.settings.timeout,
            |items| {
                let Some(d) = items.iter().find(|d| d.name_any().ends_with("agent")) else {
                    return Progress::Pending("no agent DaemonSet".into());
                };
                let s = d.status.clone().unwrap_or_default();
                if usize::try_from(s.number_ready).unwrap_or(0) >= nodes
                    && s.desired_number_scheduled == s.number_ready
                {
                    Progress::Done(())
                } else {
                    Progress::Pending(format!(
                        "agent DaemonSet: {} ready of {} desired ({nodes} nodes)",
                        s.number_ready, s.desired_number_scheduled
                    ))
                }
            },
        )
        .await?;
        self.checks += 3;
        Ok(())
    }

    async fn published(&mut self) -> Result<()> {
        let all = self.all_nodes.clone();
        wait_for(
            self.topologies.clone(),
            watcher::Config::default(),
            "a published NodeTopology for every node",
            self.settings.timeout,
            |items| match views(items) {
                Err(e) => Progress::Failed(e),
                Ok(v) => {
                    let missing: Vec<_> = all.iter().filter(|n| !v.contains_key(*n)).collect();
                    if !missing.is_empty() {
                        return Progress::Pending(format!("no NodeTopology for {missing:?}"));
                    }
                    match v.values().map(TopologyView::caught_up).find(Result::is_err) {
                        Some(Err(why)) => Progress::Pending(why),
                        _ => Progress::Done(()),
                    }
                }
            },
        )
        .await?;
        self.checks += self.all_nodes.len();
        Ok(())
    }

    /// The pods per selected node, sized from the node's published topology.
    async fn placement(&self) -> Result<Vec<NodePods>> {
        let mut out = Vec::new();
        for (i, node) in self.selected.iter().enumerate() {
            let obj = self
                .topologies
                .get(node)
                .await
                .with_context(|| format!("reading NodeTopology {node}"))?;
            let view = TopologyView::from_object(&obj)?;
            let online = view.cpus.clone().unwrap_or_default().len();
            // CPU 0 is reserved and stays in the shared pool, so every other CPU may be pinned.
            let cpus = match self.settings.cpus {
                Some(n) => n,
                None => u32::try_from(online.saturating_sub(1).clamp(1, 2)).unwrap_or(1),
            };
            if online < 2 {
                bail!("{node} has {online} online CPU(s); the scenario needs 2 (one reserved)");
            }
            let free = self.free_millis(node).await?;
            let cpus = cpus.min(u32::try_from(free / 1000).unwrap_or(u32::MAX));
            if cpus == 0 {
                bail!(
                    "{node}: {free}m of allocatable CPU free, not one whole CPU for the pinned pod (the chart's own CPU requests count: set agent/operator resources.requests.cpu lower on so small a node)"
                );
            }
            const FRACTION_MILLIS: u64 = 100;
            let fractional_beside = free >= u64::from(cpus) * 1000 + FRACTION_MILLIS;
            if !fractional_beside {
                step(&format!(
                    "   {node}: {free}m allocatable CPU free: {cpus} pinned CPU(s) leave no room for the fractional pod beside them (it runs after the pinned pod is deleted)"
                ));
            }
            let cpu = cpus.to_string();
            let mut pinned = TestPod::single(&format!("pinned-{i}"), Resources::guaranteed(&cpu));
            pinned.init.push(Container {
                name: "init".into(),
                resources: Resources::guaranteed(&cpu),
            });
            out.push(NodePods {
                node: node.clone(),
                pinned,
                fractional: TestPod::single(
                    &format!("fractional-{i}"),
                    Resources::guaranteed(&format!("{FRACTION_MILLIS}m")),
                ),
                fractional_beside,
                burstable: TestPod::single(&format!("burstable-{i}"), Resources::burstable()),
                cpus,
            });
        }
        Ok(out)
    }

    /// The node's allocatable CPU minus the CPU requests of the pods bound to it that have
    /// not ended, in millicores (what the kubelet's admission counts).
    async fn free_millis(&self, node: &str) -> Result<u64> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let n = nodes
            .get(node)
            .await
            .with_context(|| format!("reading Node {node}"))?;
        let allocatable = n
            .status
            .and_then(|s| s.allocatable)
            .and_then(|a| a.get("cpu").cloned())
            .with_context(|| format!("Node {node} reports no allocatable cpu"))?;
        let allocatable = parse_millis(&allocatable.0)
            .with_context(|| format!("Node {node}: allocatable cpu {:?}", allocatable.0))?;
        let pods: Api<Pod> = Api::all(self.client.clone());
        let bound = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await
            .with_context(|| format!("listing the pods on {node}"))?;
        let mut used = 0;
        for pod in bound.items {
            let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
            if matches!(phase.as_deref(), Some("Succeeded" | "Failed")) {
                continue;
            }
            let Some(spec) = pod.spec else { continue };
            let request = |c: &k8s_openapi::api::core::v1::Container| -> Result<u64> {
                match c
                    .resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref())
                    .and_then(|r| r.get("cpu"))
                {
                    Some(q) => parse_millis(&q.0).with_context(|| format!("cpu request {:?}", q.0)),
                    None => Ok(0),
                }
            };
            // The kubelet counts max(sum of app containers, largest init container).
            let apps = spec.containers.iter().map(request).sum::<Result<u64>>()?;
            let inits = spec
                .init_containers
                .iter()
                .flatten()
                .map(request)
                .try_fold(0, |m, r| r.map(|r| m.max(r)))?;
            used += apps.max(inits);
        }
        Ok(allocatable.saturating_sub(used))
    }

    /// With actuation: every selected node's agent made its kubelet run the spec (`Applied`
    /// True for the NodeTopology's generation), the kubelet's `/configz` says so and its Node
    /// is Ready. Returns the `Applied` reason per node.
    async fn wait_actuated(
        &mut self,
        tm_policy: &str,
        strict: bool,
    ) -> Result<BTreeMap<String, String>> {
        let selected: Vec<String> = self.selected.iter().cloned().collect();
        let mut reasons = BTreeMap::new();
        self.wait_each_topology(
            "Applied True on every selected node",
            &selected,
            |node, t| {
                let Some(c) = t.condition(APPLIED) else {
                    return Progress::Pending(format!("{node}: no Applied condition"));
                };
                if c.observed_generation != Some(t.generation) {
                    return Progress::Pending(format!(
                        "{node}: Applied is for generation {:?}, the spec is {}",
                        c.observed_generation, t.generation
                    ));
                }
                match (c.status.as_str(), c.reason.as_str()) {
                    ("True", reason) => {
                        reasons.insert(node.to_string(), format!("{reason}: {}", c.message));
                        Progress::Done(())
                    }
                    (_, "WaitingForEviction" | "ObserveOnly") => {
                        Progress::Pending(format!("{node}: Applied {} {}", c.reason, c.message))
                    }
                    _ => Progress::Failed(format!(
                        "{node}: Applied {} {}: {}",
                        c.status, c.reason, c.message
                    )),
                }
            },
        )
        .await?;
        for node in &selected {
            self.check_node_runs(node, tm_policy, strict, "after the apply")
                .await?;
            step(&format!(
                "   {node}: Applied True {}; Node Ready; the kubelet runs topologyManagerPolicy {tm_policy}",
                reasons.get(node).map(String::as_str).unwrap_or_default()
            ));
        }
        Ok(reasons)
    }

    /// Applies a topology manager change (best-effort) while the provider makes the
    /// kubelet's start fail: `Applied` False `Failed` for the generation, saying it restored
    /// the previous configuration; the Node Ready; the kubelet still runs `running_tm`.
    async fn rolled_back(&mut self, running_tm: &str) -> Result<()> {
        let (key, value) = &self.settings.node_label;
        let manifest = policy_manifest(POLICY, (key, value), "best-effort", true, true);
        self.policies
            .patch(
                POLICY,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&manifest),
            )
            .await
            .context("applying the test NodeResourcePolicy")?;
        let selected: Vec<String> = self.selected.iter().cloned().collect();
        let mut messages = BTreeMap::new();
        self.wait_each_topology(
            "Applied False Failed (rolled back)",
            &selected,
            |node, t| {
                if t.policy_ref.as_ref().map(|r| r.0.as_str()) != Some(POLICY)
                    || t.tm_policy.as_deref() != Some("best-effort")
                {
                    return Progress::Pending(format!("{node}: spec not yet best-effort"));
                }
                let Some(c) = t.condition(APPLIED) else {
                    return Progress::Pending(format!("{node}: no Applied condition"));
                };
                if c.observed_generation != Some(t.generation) {
                    return Progress::Pending(format!(
                        "{node}: Applied for {:?}",
                        c.observed_generation
                    ));
                }
                match (c.status.as_str(), c.reason.as_str()) {
                    ("False", "Failed") => {
                        messages.insert(node.to_string(), c.message.clone());
                        Progress::Done(())
                    }
                    (_, "WaitingForEviction" | "ObserveOnly") => {
                        Progress::Pending(c.reason.clone())
                    }
                    _ => Progress::Failed(format!(
                        "{node}: Applied {} {} after a failed kubelet start, want False Failed: {}",
                        c.status, c.reason, c.message
                    )),
                }
            },
        )
        .await?;
        for node in &selected {
            self.check_node_runs(node, running_tm, true, "after the rollback")
                .await?;
            step(&format!(
                "   {node}: Applied False Failed; Node Ready; the kubelet runs {running_tm} again: {}",
                messages.get(node).map(String::as_str).unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// The Node is Ready and, where the provider reads it, the kubelet's `/configz` runs
    /// topology manager policy `tm_policy` with `strict-cpu-reservation` on or off as `strict`.
    async fn check_node_runs(
        &mut self,
        node: &str,
        tm_policy: &str,
        strict: bool,
        when: &str,
    ) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let ready = nodes
            .get(node)
            .await?
            .status
            .and_then(|s| s.conditions)
            .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status);
        self.check(ready.as_deref() == Some("True"), || {
            format!("{node}: Node Ready {ready:?} {when}")
        })?;
        let Some(config) = self.provider.kubelet_configz(node).await? else {
            return Ok(());
        };
        let running = config["topologyManagerPolicy"]
            .as_str()
            .unwrap_or("none")
            .to_string();
        self.check(running == tm_policy, || {
            format!("{node}: {when} the kubelet's /configz says topologyManagerPolicy {running}, want {tm_policy}")
        })?;
        let options = &config["cpuManagerPolicyOptions"];
        let strict_running = options["strict-cpu-reservation"].as_str() == Some("true");
        self.check(strict_running == strict, || {
            format!("{node}: {when} the kubelet's /configz cpuManagerPolicyOptions {options}, want strict-cpu-reservation {strict}")
        })?;
        let cpu = config["cpuManagerPolicy"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.check(cpu == "static", || {
            format!("{node}: {when} the kubelet's /configz says cpuManagerPolicy {cpu:?}")
        })
    }

    /// Polls the cgroup cpuset of test pod `name`'s app container until it is `want` (the
    /// kubelet updates shared-pool containers at its next reconcile); counts one check.
    async fn wait_cpuset(&mut self, name: &str, want: &CpuSet, what: &str) -> Result<CpuSet> {
        let pod = self.pod(name).await?;
        let provider = self.provider;
        let inside = poll_until(
            &format!("{name}/app {what} ({want})"),
            self.settings.timeout,
            Duration::from_millis(500),
            || {
                let (pod, want) = (pod.clone(), want.clone());
                async move {
                    match provider.container_cpuset(&pod, "app").await {
                        Ok(c) if c == want => Progress::Done(c),
                        Ok(c) => Progress::Pending(format!("cpuset {c}")),
                        Err(e) => Progress::Failed(e.to_string()),
                    }
                }
            },
        )
        .await?;
        self.checks += 1;
        Ok(inside)
    }

    /// After strict-cpu-reservation was applied with no pinned container: `Applied` says the
    /// state was rewritten, and the shared-pool container and the kubelet's `defaultCpuSet`
    /// no longer hold the reserved CPU 0.
    async fn check_strict(&mut self, placement: &[NodePods]) -> Result<()> {
        for p in placement {
            let node = p.node.clone();
            let obj = self.topologies.get(&node).await?;
            let view = TopologyView::from_object(&obj)?;
            let reason = view.condition(APPLIED).map(|c| c.reason.clone());
            self.check(reason.as_deref() == Some("StateRewritten"), || {
                format!("{node}: Applied reason {reason:?} after turning strict-cpu-reservation on, want StateRewritten")
            })?;
            let want = view
                .cpus
                .clone()
                .unwrap_or_default()
                .difference(&CpuSet::from_ids([0]));
            let inside = self
                .wait_cpuset(&p.burstable.name, &want, "off the reserved CPU")
                .await?;
            if let Some(records) = self.provider.kubelet_records(&node).await? {
                self.check(records.checkpoint_default == want, || {
                    format!(
                        "{node}: the kubelet's defaultCpuSet {} under strict-cpu-reservation, want {want}",
                        records.checkpoint_default
                    )
                })?;
            }
            step(&format!(
                "   {node}: Applied StateRewritten; {}/app and the kubelet's defaultCpuSet on {inside}, without the reserved CPU",
                p.burstable.name
            ));
        }
        Ok(())
    }

    /// Watches the NodeTopologies until `check` is done for each of `nodes` (a node without
    /// one is pending); the first pending or failed node is what the wait reports.
    async fn wait_each_topology(
        &self,
        what: &str,
        nodes: &[String],
        mut check: impl FnMut(&str, &TopologyView) -> Progress<()>,
    ) -> Result<()> {
        wait_for(
            self.topologies.clone(),
            watcher::Config::default(),
            what,
            self.settings.timeout,
            |items| {
                let v = match views(items) {
                    Ok(v) => v,
                    Err(e) => return Progress::Failed(e),
                };
                for node in nodes {
                    let Some(t) = v.get(node) else {
                        return Progress::Pending(format!("no NodeTopology for {node}"));
                    };
                    match check(node, t) {
                        Progress::Done(()) => {}
                        other => return other,
                    }
                }
                Progress::Done(())
            },
        )
        .await?;
        Ok(())
    }

    /// Waits until a test pod no longer exists.
    async fn wait_pod_gone(&self, name: &str) -> Result<()> {
        let pods = self.pods.clone();
        let name = name.to_string();
        poll_until(
            &format!("pod {name} gone"),
            self.settings.timeout,
            Duration::from_millis(500),
            || {
                let (pods, name) = (pods.clone(), name.clone());
                async move {
                    match pods.get_opt(&name).await {
                        Ok(None) => Progress::Done(()),
                        Ok(Some(_)) => Progress::Pending("still there".into()),
                        Err(e) => Progress::Failed(e.to_string()),
                    }
                }
            },
        )
        .await?;
        Ok(())
    }

    async fn ensure_namespace(&self) -> Result<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": self.settings.pod_namespace}});
        namespaces
            .patch(
                &self.settings.pod_namespace,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&ns),
            )
            .await
            .with_context(|| format!("creating namespace {}", self.settings.pod_namespace))?;
        Ok(())
    }

    async fn create(&self, pod: &TestPod, node: &str) -> Result<()> {
        let manifest = pod.manifest(
            &self.settings.pod_namespace,
            node,
            &self.provider.workload(),
        );
        self.pods
            .patch(
                &pod.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&manifest),
            )
            .await
            .with_context(|| format!("creating pod {} on {node}", pod.name))?;
        Ok(())
    }

    async fn wait_running(
        &mut self,
        placement: &[NodePods],
        which: impl Fn(&NodePods) -> Vec<String>,
    ) -> Result<()> {
        let names: Vec<String> = placement.iter().flat_map(which).collect();
        wait_for(
            self.pods.clone(),
            watcher::Config::default(),
            &format!("pods {names:?} Running"),
            self.settings.timeout,
            |items| {
                for name in &names {
                    let Some(pod) = items.iter().find(|p| &p.name_any() == name) else {
                        return Progress::Pending(format!("pod {name} not seen yet"));
                    };
                    let status = pod.status.clone().unwrap_or_default();
                    match status.phase.as_deref() {
                        Some("Running") => {}
                        Some("Failed") | Some("Succeeded") => {
                            return Progress::Failed(format!(
                                "pod {name} ended: {} {}",
                                status.reason.unwrap_or_default(),
                                status.message.unwrap_or_default()
                            ))
                        }
                        other => return Progress::Pending(format!("pod {name} phase {other:?}")),
                    }
                }
                Progress::Done(())
            },
        )
        .await?;
        self.checks += names.len();
        Ok(())
    }

    /// Waits until every selected node publishes the pinned container's allocation (none for
    /// the others) and agrees with the kubelet.
    async fn wait_allocations(
        &mut self,
        placement: &[NodePods],
    ) -> Result<BTreeMap<String, Placed>> {
        let ns = self.settings.pod_namespace.clone();
        let result = wait_for(
            self.topologies.clone(),
            watcher::Config::default(),
            "published allocations and KubeletAgreement on every selected node",
            self.settings.timeout,
            |items| {
                let v = match views(items) {
                    Ok(v) => v,
                    Err(e) => return Progress::Failed(e),
                };
                let mut out = BTreeMap::new();
                for p in placement {
                    let node = &p.node;
                    let Some(t) = v.get(node) else {
                        return Progress::Pending(format!("no NodeTopology for {node}"));
                    };
                    let pinned = format!("{ns}/{}", p.pinned.name);
                    let Some(alloc) = t.allocation(&pinned, "app") else {
                        let rejected = items
                            .iter()
                            .find(|o| &o.name_any() == node)
                            .and_then(|o| o.data.pointer("/status/rejections").cloned());
                        return Progress::Pending(format!(
                            "{node}: no allocation for {pinned}/app yet (rejections: {})",
                            rejected.unwrap_or_default()
                        ));
                    };
                    if alloc.cpus.len() != p.cpus as usize {
                        return Progress::Failed(format!(
                            "{node}: {pinned} got {} CPUs ({}), requested {}",
                            alloc.cpus.len(),
                            alloc.cpus,
                            p.cpus
                        ));
                    }
                    if !alloc.cpus.is_subset(&t.exclusive) {
                        return Progress::Pending(format!(
                            "{node}: allocation {} not (yet) within status.pools.exclusive {}",
                            alloc.cpus, t.exclusive
                        ));
                    }
                    for other in p.shared_pods() {
                        if t.allocation(&format!("{ns}/{}", other.name), "app")
                            .is_some()
                        {
                            return Progress::Failed(format!(
                                "{node}: shared-pool pod {ns}/{} has an exclusive allocation",
                                other.name
                            ));
                        }
                    }
                    match t.condition(KUBELET_AGREEMENT) {
                        Some(c) if c.status == "True" && c.reason == KUBELET_AGREE => {}
                        Some(c) => {
                            return Progress::Pending(format!(
                                "{node}: KubeletAgreement {} ({}: {})",
                                c.status, c.reason, c.message
                            ))
                        }
                        None => {
                            return Progress::Pending(format!(
                                "{node}: no KubeletAgreement condition"
                            ))
                        }
                    }
                    // The chart reads the kubelet's PodResources API by default.
                    if t.kubelet_source.as_deref() != Some("PodResources") {
                        return Progress::Pending(format!(
                            "{node}: status.kubelet.source {:?}, want PodResources",
                            t.kubelet_source
                        ));
                    }
                    let Some(online) = &t.cpus else {
                        return Progress::Pending(format!("{node}: no status.topology.cpus"));
                    };
                    out.insert(
                        node.clone(),
                        Placed {
                            exclusive: alloc.cpus.clone(),
                            shared: online.difference(&t.allocated_cpus()),
                        },
                    );
                }
                Progress::Done(out)
            },
        )
        .await?;
        self.checks += 4 * placement.len();
        Ok(result)
    }

    async fn pod(&self, name: &str) -> Result<Pod> {
        self.pods
            .get(name)
            .await
            .with_context(|| format!("reading pod {name}"))
    }

    /// Every container's cgroup against the published allocation or the shared pool, the
    /// init container's printed CPUs, and (where readable) the kubelet's own records.
    /// `pinned_running`: whether the pinned pods still run.
    async fn check_containers(
        &mut self,
        placement: &[NodePods],
        placed: &BTreeMap<String, Placed>,
        pinned_running: bool,
    ) -> Result<()> {
        for p in placement {
            let node = &p.node;
            let Placed { exclusive, shared } = placed[node].clone();
            // With the pinned pod gone, the shared pool is everything online again.
            let shared = if pinned_running {
                shared
            } else {
                shared.union(&exclusive)
            };
            if pinned_running {
                let pod = self.pod(&p.pinned.name).await?;
                let inside = self.provider.container_cpuset(&pod, "app").await?;
                self.check(inside == exclusive, || {
                    format!(
                        "{node}: {}/app runs on {inside} but the agent published {exclusive}",
                        p.pinned.name
                    )
                })?;
                let log = self.provider.container_log(&pod, "init").await?;
                let printed = log
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("cpus_allowed_list="))
                    .map(CpuSet::parse)
                    .transpose()
                    .map_err(|e| {
                        anyhow::anyhow!("{node}: init container printed a bad CPU list: {e}")
                    })?;
                self.check(printed.as_ref() == Some(&exclusive), || {
                    format!(
                        "{node}: the init container ran on {printed:?}, its app container on {exclusive} (the kubelet reuses an init container's CPUs)"
                    )
                })?;
                step(&format!(
                    "   {node}: {}/app pinned to {inside} as published; its init container ran there too",
                    p.pinned.name
                ));
            }
            for other in p.shared_pods() {
                let inside = self
                    .wait_cpuset(&other.name, &shared, &format!("on {node}'s shared pool"))
                    .await?;
                step(&format!(
                    "   {node}: {}/app on the shared pool {inside}",
                    other.name
                ));
            }
            if let Some(records) = self.provider.kubelet_records(node).await? {
                self.check_records(p, &records, &exclusive, &shared, pinned_running)
                    .await?;
            }
        }
        Ok(())
    }

    async fn check_records(
        &mut self,
        p: &NodePods,
        records: &KubeletRecords,
        exclusive: &CpuSet,
        shared: &CpuSet,
        pinned_running: bool,
    ) -> Result<()> {
        let node = &p.node;
        let ns = self.settings.pod_namespace.clone();
        self.check(&records.checkpoint_default == shared, || {
            format!(
                "{node}: the kubelet's checkpoint defaultCpuSet is {}, the shared pool's cgroups {shared}",
                records.checkpoint_default
            )
        })?;
        // The agent publishes what it last read from the kubelet: wait for it to catch up.
        self.wait_each_topology(
            &format!("{node}: status.kubelet.defaultCPUSet = the shared pool's cgroups {shared}"),
            std::slice::from_ref(node),
            |_, t| match &t.kubelet_default {
                Some(d) if d == shared => Progress::Done(()),
                other => Progress::Pending(format!("status.kubelet.defaultCPUSet {other:?}")),
            },
        )
        .await?;
        self.checks += 1;
        let obj = self.topologies.get(node).await?;
        let view = TopologyView::from_object(&obj)?;
        if pinned_running {
            let pod = self.pod(&p.pinned.name).await?;
            let uid = pod.uid().unwrap_or_default();
            let in_checkpoint = records.checkpoint.get(&(uid.clone(), "app".to_string()));
            self.check(in_checkpoint == Some(exclusive), || {
                format!(
                    "{node}: checkpoint entry of {}/app is {in_checkpoint:?}, cgroup and NodeTopology {exclusive}",
                    p.pinned.name
                )
            })?;
            let key = (format!("{ns}/{}", p.pinned.name), "app".to_string());
            let answered = records.pod_resources.get(&key).map(|r| &r.0);
            self.check(answered == Some(exclusive), || {
                format!(
                    "{node}: PodResources says {answered:?} for {}/app, cgroup and NodeTopology {exclusive}",
                    p.pinned.name
                )
            })?;
            let published = view
                .kubelet_assignments
                .iter()
                .find(|a| a.pod == key.0 && a.container == "app")
                .map(|a| &a.cpus);
            self.check(published == Some(exclusive), || {
                format!(
                    "{node}: status.kubelet.assignments has {published:?} for {}/app, want {exclusive}",
                    p.pinned.name
                )
            })?;
            step(&format!(
                "   {node}: cgroup = checkpoint = PodResources = NodeTopology = {exclusive}; defaultCpuSet {shared}"
            ));
        } else {
            let held: Vec<_> = records
                .checkpoint
                .iter()
                .filter(|(_, cpus)| !cpus.is_disjoint(exclusive))
                .collect();
            self.check(held.is_empty(), || {
                format!("{node}: checkpoint entries still hold released CPUs {exclusive}: {held:?}")
            })?;
        }
        for other in p.shared_pods() {
            let key = (format!("{ns}/{}", other.name), "app".to_string());
            let cpus = records.pod_resources.get(&key).map(|r| r.0.clone());
            self.check(cpus.as_ref().is_none_or(CpuSet::is_empty), || {
                format!(
                    "{node}: PodResources lists exclusive CPUs {cpus:?} for the shared-pool container {}/app",
                    other.name
                )
            })?;
        }
        Ok(())
    }

    /// The NodeResourceTopology of each selected node counts the pinned CPUs as taken.
    async fn check_nrt(&mut self, placement: &[NodePods]) -> Result<()> {
        let gvk = GroupVersionKind::gvk("topology.node.k8s.io", "v1alpha2", "NodeResourceTopology");
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &ApiResource::from_gvk(&gvk));
        for p in placement {
            let node = p.node.clone();
            let want = i64::from(p.cpus);
            let api = api.clone();
            let taken = poll_until(
                &format!("NodeResourceTopology {node} counting {want} exclusive CPU(s)"),
                self.settings.timeout,
                Duration::from_millis(500),
                || {
                    let (api, node) = (api.clone(), node.clone());
                    async move {
                        let obj = match api.get_opt(&node).await {
                            Ok(Some(o)) => o,
                            Ok(None) => return Progress::Pending("no object yet".into()),
                            Err(e) => return Progress::Failed(e.to_string()),
                        };
                        match nrt_cpus_taken(&obj.data) {
                            Ok(n) if n == want => Progress::Done(n),
                            Ok(n) => Progress::Pending(format!("allocatable - available = {n}")),
                            Err(e) => Progress::Failed(e),
                        }
                    }
                },
            )
            .await?;
            self.checks += 1;
            step(&format!(
                "   {node}: NodeResourceTopology zones count {taken} exclusive CPU(s) taken"
            ));
        }
        Ok(())
    }

    /// Deletes every agent pod and waits for the DaemonSet's new ones to publish again.
    async fn restart_agents(&mut self) -> Result<()> {
        let ns = self.settings.release_namespace.clone();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let lp = ListParams::default().labels("app.kubernetes.io/component=agent");
        let old: BTreeSet<String> = pods
            .list(&lp)
            .await
            .context("listing agent pods")?
            .items
            .iter()
            .map(|p| p.name_any())
            .collect();
        for name in &old {
            pods.delete(name, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting agent pod {name}"))?;
        }
        let nodes = self.all_nodes.len();
        wait_for(
            pods,
            watcher::Config::default().labels("app.kubernetes.io/component=agent"),
            "new agent pods Ready",
            self.settings.timeout,
            |items| {
                let ready = items
                    .iter()
                    .filter(|p| !old.contains(&p.name_any()))
                    .filter(|p| {
                        p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|cs| {
                                cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                    })
                    .count();
                if ready >= nodes {
                    Progress::Done(())
                } else {
                    Progress::Pending(format!("{ready} new agent pod(s) Ready of {nodes}"))
                }
            },
        )
        .await?;
        self.checks += 1;
        step(&format!("   {} agent pod(s) replaced and Ready", old.len()));
        Ok(())
    }

    async fn wait_released(
        &mut self,
        placement: &[NodePods],
        placed: &BTreeMap<String, Placed>,
    ) -> Result<()> {
        let ns = self.settings.pod_namespace.clone();
        let nodes: Vec<String> = placement.iter().map(|p| p.node.clone()).collect();
        self.wait_each_topology("released CPUs back in the pools", &nodes, |node, t| {
            let Some(p) = placement.iter().find(|p| p.node == node) else {
                return Progress::Failed(format!("{node} has no test pods"));
            };
            if t.allocation(&format!("{ns}/{}", p.pinned.name), "app")
                .is_some()
            {
                return Progress::Pending(format!(
                    "{node}: allocation of deleted pod {} still published",
                    p.pinned.name
                ));
            }
            let cpus = &placed[node].exclusive;
            if !cpus.is_disjoint(&t.exclusive) {
                return Progress::Pending(format!(
                    "{node}: CPUs {cpus} still in status.pools.exclusive {}",
                    t.exclusive
                ));
            }
            Progress::Done(())
        })
        .await?;
        for p in placement {
            self.checks += 1;
            step(&format!(
                "   {}: CPUs {} returned to the pools",
                p.node, placed[&p.node].exclusive
            ));
        }
        Ok(())
    }

    async fn device_pods(&mut self, placement: &[NodePods], device: &TestDevice) -> Result<()> {
        let ns = self.settings.pod_namespace.clone();
        let mut pods = Vec::new();
        for (i, p) in placement.iter().enumerate() {
            let mut r = Resources::guaranteed(&p.cpus.to_string());
            r.extended.push((device.resource.clone(), 1));
            let pod = TestPod::single(&format!("device-{i}"), r);
            self.create(&pod, &p.node).await?;
            pods.push((p, pod));
        }
        for (p, pod) in &pods {
            let name = pod.name.clone();
            let pods_api = self.pods.clone();
            poll_until(
                &format!("pod {name} Running"),
                self.settings.timeout,
                Duration::from_millis(500),
                || {
                    let (api, name) = (pods_api.clone(), name.clone());
                    async move {
                        match api.get(&name).await {
                            Ok(pod) => match pod.status.and_then(|s| s.phase).as_deref() {
                                Some("Running") => Progress::Done(()),
                                Some("Failed") => Progress::Failed(format!("pod {name} failed")),
                                other => Progress::Pending(format!("phase {other:?}")),
                            },
                            Err(e) => Progress::Failed(e.to_string()),
                        }
                    }
                },
            )
            .await?;
            let node = &p.node;
            let running = self.pod(&pod.name).await?;
            let inside = self.provider.container_cpuset(&running, "app").await?;
            self.check(inside.len() == p.cpus as usize, || {
                format!(
                    "{node}: {}/app runs on {inside}, want {} exclusive CPU(s)",
                    pod.name, p.cpus
                )
            })?;
            if let Some(records) = self.provider.kubelet_records(node).await? {
                let key = (format!("{ns}/{}", pod.name), "app".to_string());
                let Some((cpus, devices)) = records.pod_resources.get(&key) else {
                    bail!("{node}: PodResources does not list {}/app", pod.name);
                };
                self.check(cpus == &inside, || {
                    format!(
                        "{node}: PodResources CPUs {cpus} for {}/app, cgroup {inside}",
                        pod.name
                    )
                })?;
                let ids = devices.get(&device.resource).cloned().unwrap_or_default();
                self.check(
                    ids.len() == 1 && device.numa_of.contains_key(&ids[0]),
                    || {
                        format!(
                        "{node}: PodResources devices of {}/app: {devices:?}, want one {} of {:?}",
                        pod.name, device.resource, device.numa_of
                    )
                    },
                )?;
                step(&format!(
                    "   {node}: {}/app holds {} {} (NUMA node {}) and CPUs {inside}",
                    pod.name, device.resource, ids[0], device.numa_of[&ids[0]]
                ));
            }
            let published = self
                .topologies
                .get(node)
                .await
                .map_err(anyhow::Error::from)
                .and_then(|o| Ok(TopologyView::from_object(&o)?))?;
            let alloc = published.allocation(&format!("{ns}/{}", pod.name), "app");
            // The agent may not have published it yet: wait on it like the others.
            if alloc.map(|a| &a.cpus) != Some(&inside) {
                let name = format!("{ns}/{}", pod.name);
                self.wait_each_topology(
                    &format!("{node}: allocation of {name}/app published"),
                    std::slice::from_ref(node),
                    |_, t| match t.allocation(&name, "app") {
                        Some(a) if a.cpus == inside => Progress::Done(()),
                        other => Progress::Pending(format!("published {other:?}")),
                    },
                )
                .await?;
            }
            self.checks += 1;
        }
        for (_, pod) in &pods {
            self.pods
                .delete(&pod.name, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting pod {}", pod.name))?;
        }
        for (_, pod) in &pods {
            self.wait_pod_gone(&pod.name).await?;
        }
        Ok(())
    }

    /// Server-side applies the test policy and waits until the operator and every selected
    /// node's agent have caught up with it. Returns the policy's generation.
    async fn apply_policy(&mut self, tm_policy: &str, strict: bool) -> Result<i64> {
        let (key, value) = &self.settings.node_label;
        let apply = self.provider.actuation();
        let manifest = policy_manifest(POLICY, (key, value), tm_policy, apply, strict);
        let applied = self
            .policies
            .patch(
                POLICY,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&manifest),
            )
            .await
            .context("applying the test NodeResourcePolicy")?;
        let generation = applied.metadata.generation.unwrap_or(0);
        let expected = self.selected.len();
        wait_for(
            self.policies.clone(),
            watcher::Config::default(),
            &format!("NodeResourcePolicy {POLICY} generation {generation} rolled out"),
            self.settings.timeout,
            |items| match items.iter().find(|o| o.name_any() == POLICY) {
                None => Progress::Failed(format!("policy {POLICY} disappeared")),
                Some(o) => {
                    let view = PolicyView::from_object(o);
                    if view.generation != generation {
                        return Progress::Failed(format!(
                            "policy {POLICY} changed under the test (generation {} != {generation})",
                            view.generation
                        ));
                    }
                    match view.rolled_out(expected) {
                        Ok(()) => Progress::Done(()),
                        Err(why) => Progress::Pending(why),
                    }
                }
            },
        )
        .await?;
        let selected = self.selected.clone();
        let all: Vec<String> = self.all_nodes.iter().cloned().collect();
        let label = self.settings.node_label.clone();
        self.wait_each_topology(
            &format!("NodeTopology specs for policy {POLICY} generation {generation}, applied by the agents"),
            &all,
            |node, t| {
                if selected.contains(node) {
                    if t.policy_ref != Some((POLICY.to_string(), generation)) {
                        return Progress::Pending(format!(
                            "{node}: spec.policyRef {:?}, want ({POLICY}, {generation})",
                            t.policy_ref
                        ));
                    }
                    if t.cpu_policy.as_deref() != Some("static")
                        || t.tm_policy.as_deref() != Some(tm_policy)
                    {
                        return Progress::Failed(format!(
                            "{node}: spec says cpuManager {:?} / topologyManager {:?} for policy {POLICY}, want static / {tm_policy}",
                            t.cpu_policy, t.tm_policy
                        ));
                    }
                } else if t.policy_ref.as_ref().map(|r| r.0.as_str()) == Some(POLICY) {
                    return Progress::Failed(format!(
                        "{node} is not labelled {label:?} but got policy {POLICY}"
                    ));
                }
                match t.caught_up() {
                    Ok(()) => Progress::Done(()),
                    Err(why) => Progress::Pending(why),
                }
            },
        )
        .await?;
        self.checks += 2;
        step(&format!(
            "   policy {POLICY} generation {generation} applied on {expected} node(s)"
        ));
        if apply {
            self.wait_actuated(tm_policy, strict).await?;
        }
        Ok(generation)
    }

    async fn wait_policy_gone(&mut self) -> Result<()> {
        let selected: Vec<String> = self.selected.iter().cloned().collect();
        self.wait_each_topology(
            "selected nodes back on policy none",
            &selected,
            |node, t| {
                if t.policy_ref.is_some() {
                    return Progress::Pending(format!(
                        "{node}: spec.policyRef still {:?}",
                        t.policy_ref
                    ));
                }
                if !matches!(t.cpu_policy.as_deref(), None | Some("none")) {
                    return Progress::Pending(format!(
                        "{node}: spec.cpuManager.policy {:?}, want none",
                        t.cpu_policy
                    ));
                }
                Progress::Done(())
            },
        )
        .await?;
        self.checks += 1;
        Ok(())
    }

    async fn uninstall(&mut self) -> Result<()> {
        self.provider.helm_uninstall().await?;
        let instance = format!("app.kubernetes.io/instance={}", self.settings.release);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.settings.release_namespace);
        wait_for(
            pods,
            watcher::Config::default().labels(&instance),
            "operator and agent pods gone",
            self.settings.timeout,
            |items| {
                if items.is_empty() {
                    Progress::Done(())
                } else {
                    Progress::Pending(format!("pods left: {:?}", crate::wait::names(items)))
                }
            },
        )
        .await?;
        let lp = ListParams::default().labels(&instance);
        let roles: Api<ClusterRole> = Api::all(self.client.clone());
        let left = roles.list(&lp).await.context("listing ClusterRoles")?;
        self.check(left.items.is_empty(), || {
            format!(
                "ClusterRoles left after uninstall: {:?}",
                left.items.iter().map(|r| r.name_any()).collect::<Vec<_>>()
            )
        })?;
        let vaps: Api<ValidatingAdmissionPolicy> = Api::all(self.client.clone());
        let left = vaps
            .list(&lp)
            .await
            .context("listing ValidatingAdmissionPolicies")?;
        self.check(left.items.is_empty(), || {
            format!(
                "ValidatingAdmissionPolicies left after uninstall: {:?}",
                left.items.iter().map(|r| r.name_any()).collect::<Vec<_>>()
            )
        })?;
        step("   workloads, RBAC and admission policy removed; CRDs kept by Helm, deleting them");
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let names = [
            "nodetopologies.nodetopo.io",
            "noderesourcepolicies.nodetopo.io",
        ];
        for name in names {
            crds.delete(name, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting CRD {name} (Helm keeps CRDs on uninstall)"))?;
        }
        wait_for(
            crds,
            watcher::Config::default(),
            "nodetopo CRDs (and with them every NodeTopology) deleted",
            self.settings.timeout,
            |items| {
                let left: Vec<String> = items
                    .iter()
                    .map(|c| c.name_any())
                    .filter(|n| names.contains(&n.as_str()))
                    .collect();
                if left.is_empty() {
                    Progress::Done(())
                } else {
                    Progress::Pending(format!("CRDs still present: {left:?}"))
                }
            },
        )
        .await?;
        self.checks += 1;
        Ok(())
    }
}

/// Sum over the Node zones of `cpu` allocatable minus available: the CPUs a
/// NodeResourceTopology counts as taken.
pub fn nrt_cpus_taken(obj: &serde_json::Value) -> Result<i64, String> {
    let zones = obj
        .get("zones")
        .and_then(|z| z.as_array())
        .ok_or("no zones list")?;
    let mut taken = 0;
    for zone in zones {
        if zone.get("type").and_then(|t| t.as_str()) != Some("Node") {
            continue;
        }
        let Some(resources) = zone.get("resources").and_then(|r| r.as_array()) else {
            continue;
        };
        for r in resources {
            if r.get("name").and_then(|n| n.as_str()) != Some("cpu") {
                continue;
            }
            let q = |f: &str| -> Result<i64, String> {
                let v = r.get(f).ok_or(format!("cpu without {f}"))?;
                match v {
                    serde_json::Value::Number(n) => n.as_i64().ok_or(format!("{f} {n}")),
                    serde_json::Value::String(s) => {
                        s.parse::<i64>().map_err(|e| format!("{f} {s:?}: {e}"))
                    }
                    other => Err(format!("{f}: {other}")),
                }
            };
            taken += q("allocatable")? - q("available")?;
        }
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nrt_taken_cpus_sum_the_node_zones() {
        let obj = json!({"zones": [
            {"type": "Node", "name": "node-0", "resources": [
                {"name": "cpu", "capacity": "4", "allocatable": "3", "available": "1"},
                {"name": "memory", "capacity": "1", "allocatable": "1", "available": "1"}]},
            {"type": "Node", "name": "node-1", "resources": [
                {"name": "cpu", "capacity": 4, "allocatable": 4, "available": 4}]},
            {"type": "L3Cache", "name": "l3-0", "resources": [
                {"name": "cpu", "capacity": "8", "allocatable": "8", "available": "0"}]}
        ]});
        assert_eq!(nrt_cpus_taken(&obj), Ok(2));
        assert!(nrt_cpus_taken(&json!({})).is_err());
        let bad = json!({"zones": [{"type": "Node", "resources": [{"name": "cpu", "allocatable": "x", "available": "1"}]}]});
        assert!(nrt_cpus_taken(&bad).unwrap_err().contains("allocatable"));
    }
}
