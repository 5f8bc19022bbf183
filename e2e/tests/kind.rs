//! The kind lifecycle test: one ordered scenario, since every step builds on the last.
//!
//! Runs only with `NODETOPO_E2E=1` (set by `e2e/run.sh` after it created the cluster and
//! installed the chart); otherwise it prints `SKIPPED: <reason>` and passes. Every wait
//! watches the objects and re-checks a condition on each change; none sleeps.
//!
//! 1. every node gets a NodeTopology whose status the agent published;
//! 2. a NodeResourcePolicy rolls out to the labelled workers (spec, agent catch-up, policy status);
//! 3. Guaranteed and Burstable pods: published allocations, compared with the cpuset the
//!    kernel enforces inside each container and with the KubeletAgreement condition;
//! 4. deleting the Guaranteed pods returns their CPUs;
//! 5. changing the policy rolls out again;
//! 6. deleting the policy puts the nodes back on policy `none`;
//! 7. `helm uninstall` removes the workloads, RBAC and admission policy; the CRDs (kept by
//!    Helm) are then deleted and take every NodeTopology with them.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
// Condition types come from the API crate, so a rename breaks the build, not the run.
use nodetopo_crds::conditions::KUBELET_AGREEMENT;
use nodetopo_e2e::config::{E2eConfig, Skip};
use nodetopo_e2e::objects::{
    node_resource_policy_resource, node_topology_resource, pod_manifest, policy_manifest,
    PolicyView, TopologyView, FIELD_MANAGER,
};
use nodetopo_e2e::shell;
use nodetopo_e2e::wait::{wait_for, Progress};
use nodetopo_engine::CpuSet;
use serde_json::json;

const POLICY: &str = "nodetopo-e2e";
const CONTAINER: &str = "app";
/// The KubeletAgreement reason when the kubelet's checkpoint was read and matches.
const KUBELET_AGREE: &str = "Agree";

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
    Suite::connect(cfg).await?.run().await
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

struct Suite {
    cfg: E2eConfig,
    client: Client,
    topologies: Api<DynamicObject>,
    policies: Api<DynamicObject>,
    pods: Api<Pod>,
    /// Every node of the cluster.
    all_nodes: BTreeSet<String>,
    /// The nodes the test policy selects (label from the kind config).
    selected: BTreeSet<String>,
}

impl Suite {
    async fn connect(cfg: E2eConfig) -> Result<Self> {
        let client = Client::try_default()
            .await
            .context("connecting to the cluster (KUBECONFIG / current context)")?;
        let nodes: Api<Node> = Api::all(client.clone());
        let list = nodes
            .list(&ListParams::default())
            .await
            .context("listing nodes")?;
        let all_nodes: BTreeSet<String> = list.items.iter().map(|n| n.name_any()).collect();
        let (key, value) = &cfg.node_label;
        let selected: BTreeSet<String> = list
            .items
            .iter()
            .filter(|n| n.labels().get(key) == Some(value))
            .map(|n| n.name_any())
            .collect();
        if selected.is_empty() {
            bail!(
                "no node carries the label {key}={value} (e2e/kind-config.yaml sets it on the workers); nodes: {all_nodes:?}"
            );
        }
        Ok(Self {
            topologies: Api::all_with(client.clone(), &node_topology_resource()),
            policies: Api::all_with(client.clone(), &node_resource_policy_resource()),
            pods: Api::namespaced(client.clone(), &cfg.pod_namespace),
            client,
            cfg,
            all_nodes,
            selected,
        })
    }

    async fn run(&self) -> Result<()> {
        step(&format!(
            "cluster nodes {:?}; policy selects {:?}",
            self.all_nodes, self.selected
        ));

        step("1. every node has a NodeTopology with a published status");
        let all = self.all_nodes.clone();
        wait_for(
            self.topologies.clone(),
            watcher::Config::default(),
            "a published NodeTopology for every node",
            self.cfg.timeout,
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

        step("2. apply NodeResourcePolicy (static, reserved CPU 0, best-effort) and wait for the rollout");
        let first = self.apply_policy("best-effort").await?;

        step("3. Guaranteed and Burstable pods on every selected node");
        self.ensure_namespace().await?;
        let placement: Vec<(String, String, String)> = self
            .selected
            .iter()
            .enumerate()
            .map(|(i, node)| {
                (
                    node.clone(),
                    format!("guaranteed-{i}"),
                    format!("burstable-{i}"),
                )
            })
            .collect();
        for (node, g, _) in &placement {
            self.create_pod(g, node, Some(self.cfg.cpus)).await?;
        }
        self.wait_pods_running(placement.iter().map(|(_, g, _)| g.clone()).collect())
            .await?;
        // Burstable pods come second so the kubelet gives them the shared pool that
        // already excludes the Guaranteed containers' CPUs.
        for (node, _, b) in &placement {
            self.create_pod(b, node, None).await?;
        }
        self.wait_pods_running(placement.iter().map(|(_, _, b)| b.clone()).collect())
            .await?;

        let allocated = self.wait_allocations(&placement).await?;
        for (node, g, b) in &placement {
            let published = &allocated[node].0;
            let inside = self.cpuset_inside(g).await?;
            if &inside != published {
                bail!(
                    "{node}: pod {g} runs on CPUs {inside} (cpuset.cpus.effective) but the agent published {published}"
                );
            }
            step(&format!(
                "   {node}: {g}/{CONTAINER} pinned to {inside}, as published"
            ));
            let shared = &allocated[node].1;
            let inside = self.cpuset_inside(b).await?;
            if &inside != shared {
                bail!(
                    "{node}: Burstable pod {b} runs on CPUs {inside} but the shared pool (online CPUs minus published allocations) is {shared}"
                );
            }
            step(&format!(
                "   {node}: {b}/{CONTAINER} on the shared pool {inside}"
            ));
        }

        step("4. delete the Guaranteed pods and see their CPUs return");
        for (_, g, _) in &placement {
            self.pods
                .delete(g, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting pod {g}"))?;
        }
        self.wait_released(&placement, &allocated).await?;

        step("5. change the policy (topology manager restricted) and wait for the rollout");
        let second = self.apply_policy("restricted").await?;
        if second <= first {
            bail!("policy generation did not advance after the change: {first} -> {second}");
        }

        step("6. delete the policy: selected nodes go back to policy none");
        self.policies
            .delete(POLICY, &DeleteParams::default())
            .await
            .context("deleting the test NodeResourcePolicy")?;
        self.wait_policy_gone().await?;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces
            .delete(&self.cfg.pod_namespace, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting namespace {}", self.cfg.pod_namespace))?;

        step("7. helm uninstall and see cleanup");
        self.uninstall().await?;
        step("all steps passed");
        Ok(())
    }

    /// Server-side applies the test policy and waits until the operator and every selected
    /// node's agent have caught up with it. Returns the policy's generation.
    async fn apply_policy(&self, tm_policy: &str) -> Result<i64> {
        let (key, value) = &self.cfg.node_label;
        let manifest = policy_manifest(POLICY, (key, value), tm_policy);
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
            self.cfg.timeout,
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
        let all = self.all_nodes.clone();
        wait_for(
            self.topologies.clone(),
            watcher::Config::default(),
            &format!("NodeTopology specs for policy {POLICY} generation {generation}, applied by the agents"),
            self.cfg.timeout,
            |items| {
                let v = match views(items) {
                    Ok(v) => v,
                    Err(e) => return Progress::Failed(e),
                };
                for node in &all {
                    let Some(t) = v.get(node) else {
                        return Progress::Pending(format!("no NodeTopology for {node}"));
                    };
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
                            "{node} is not labelled {:?} but got policy {POLICY}",
                            &self.cfg.node_label
                        ));
                    }
                    if let Err(why) = t.caught_up() {
                        return Progress::Pending(why);
                    }
                }
                Progress::Done(())
            },
        )
        .await?;
        step(&format!(
            "   policy {POLICY} generation {generation} applied on {expected} node(s)"
        ));
        Ok(generation)
    }

    async fn ensure_namespace(&self) -> Result<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": self.cfg.pod_namespace}});
        namespaces
            .patch(
                &self.cfg.pod_namespace,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&ns),
            )
            .await
            .with_context(|| format!("creating namespace {}", self.cfg.pod_namespace))?;
        Ok(())
    }

    async fn create_pod(&self, name: &str, node: &str, cpus: Option<u32>) -> Result<()> {
        let manifest = pod_manifest(
            &self.cfg.pod_namespace,
            name,
            node,
            &self.cfg.pod_image,
            cpus,
        );
        self.pods
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&manifest),
            )
            .await
            .with_context(|| format!("creating pod {name} on {node}"))?;
        Ok(())
    }

    async fn wait_pods_running(&self, names: Vec<String>) -> Result<()> {
        let cpus = self.cfg.cpus;
        wait_for(
            self.pods.clone(),
            watcher::Config::default(),
            &format!("pods {names:?} Running"),
            self.cfg.timeout,
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
                                "pod {name} ended: {} {} (a kind node shares the host's CPUs; with CPU 0 reserved, NODETOPO_E2E_CPUS={cpus} must leave room for the system pods)",
                                status.reason.unwrap_or_default(),
                                status.message.unwrap_or_default()
                            ))
                        }
                        other => {
                            return Progress::Pending(format!("pod {name} phase {other:?}"))
                        }
                    }
                }
                Progress::Done(())
            },
        )
        .await?;
        Ok(())
    }

    /// Waits until every node publishes its Guaranteed pod's allocation (and none for the
    /// Burstable pod) and agrees with the kubelet. Returns node -> (exclusive CPUs of the
    /// Guaranteed container, shared pool = online CPUs minus every published allocation).
    async fn wait_allocations(
        &self,
        placement: &[(String, String, String)],
    ) -> Result<BTreeMap<String, (CpuSet, CpuSet)>> {
        let ns = self.cfg.pod_namespace.clone();
        let want = usize::try_from(self.cfg.cpus).unwrap_or(usize::MAX);
        let result = wait_for(
            self.topologies.clone(),
            watcher::Config::default(),
            "published allocations and KubeletAgreement on every selected node",
            self.cfg.timeout,
            |items| {
                let v = match views(items) {
                    Ok(v) => v,
                    Err(e) => return Progress::Failed(e),
                };
                let mut out = BTreeMap::new();
                for (node, g, b) in placement {
                    let Some(t) = v.get(node) else {
                        return Progress::Pending(format!("no NodeTopology for {node}"));
                    };
                    let Some(alloc) = t.allocation(&format!("{ns}/{g}"), CONTAINER) else {
                        let rejected = items
                            .iter()
                            .find(|o| &o.name_any() == node)
                            .and_then(|o| o.data.pointer("/status/rejections").cloned());
                        return Progress::Pending(format!(
                            "{node}: no allocation for {ns}/{g}/{CONTAINER} yet (rejections: {})",
                            rejected.unwrap_or_default()
                        ));
                    };
                    if alloc.cpus.len() != want {
                        return Progress::Failed(format!(
                            "{node}: {ns}/{g} got {} CPUs ({}), requested {want}",
                            alloc.cpus.len(),
                            alloc.cpus
                        ));
                    }
                    if !alloc.cpus.is_subset(&t.exclusive) {
                        return Progress::Pending(format!(
                            "{node}: allocation {} not (yet) within status.pools.exclusive {}",
                            alloc.cpus, t.exclusive
                        ));
                    }
                    if t.allocation(&format!("{ns}/{b}"), CONTAINER).is_some() {
                        return Progress::Failed(format!(
                            "{node}: Burstable pod {ns}/{b} has an exclusive allocation"
                        ));
                    }
                    // Exactly True/Agree: True/NoKubeletState means the agent found no kubelet
                        // checkpoint to compare with, which is no agreement at all.
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
                                "{node}: no KubeletAgreement condition (is agent.kubeletStateDir mounted?)"
                            ))
                        }
                    }
                    let Some(online) = &t.cpus else {
                        return Progress::Pending(format!("{node}: no status.topology.cpus"));
                    };
                    out.insert(
                        node.clone(),
                        (alloc.cpus.clone(), online.difference(&t.allocated_cpus())),
                    );
                }
                Progress::Done(out)
            },
        )
        .await?;
        Ok(result)
    }

    async fn cpuset_inside(&self, pod: &str) -> Result<CpuSet> {
        let kubectl = self.cfg.kubectl.clone();
        let ns = self.cfg.pod_namespace.clone();
        let pod = pod.to_string();
        let cpus = tokio::task::spawn_blocking(move || {
            shell::container_cpuset(&kubectl, &ns, &pod, CONTAINER)
        })
        .await
        .context("kubectl exec task")??;
        Ok(cpus)
    }

    async fn wait_released(
        &self,
        placement: &[(String, String, String)],
        allocated: &BTreeMap<String, (CpuSet, CpuSet)>,
    ) -> Result<()> {
        let ns = self.cfg.pod_namespace.clone();
        wait_for(
            self.topologies.clone(),
            watcher::Config::default(),
            "released CPUs back in the pools",
            self.cfg.timeout,
            |items| {
                let v = match views(items) {
                    Ok(v) => v,
                    Err(e) => return Progress::Failed(e),
                };
                for (node, g, _) in placement {
                    let Some(t) = v.get(node) else {
                        return Progress::Pending(format!("no NodeTopology for {node}"));
                    };
                    if t.allocation(&format!("{ns}/{g}"), CONTAINER).is_some() {
                        return Progress::Pending(format!(
                            "{node}: allocation of deleted pod {ns}/{g} still published"
                        ));
                    }
                    let cpus = &allocated[node].0;
                    if !cpus.is_disjoint(&t.exclusive) {
                        return Progress::Pending(format!(
                            "{node}: CPUs {cpus} of {g} still in status.pools.exclusive {}",
                            t.exclusive
                        ));
                    }
                }
                Progress::Done(())
            },
        )
        .await?;
        for (node, _, _) in placement {
            step(&format!(
                "   {node}: CPUs {} returned to the pools",
                allocated[node].0
            ));
        }
        Ok(())
    }

    async fn wait_policy_gone(&self) -> Result<()> {
        let selected = self.selected.clone();
        wait_for(
            self.topologies.clone(),
            watcher::Config::default(),
            "selected nodes back on policy none",
            self.cfg.timeout,
            |items| {
                let v = match views(items) {
                    Ok(v) => v,
                    Err(e) => return Progress::Failed(e),
                };
                for node in &selected {
                    let Some(t) = v.get(node) else {
                        return Progress::Pending(format!("no NodeTopology for {node}"));
                    };
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
                }
                Progress::Done(())
            },
        )
        .await?;
        Ok(())
    }

    async fn uninstall(&self) -> Result<()> {
        let helm = self.cfg.helm.clone();
        let release = self.cfg.release.clone();
        let ns = self.cfg.release_namespace.clone();
        tokio::task::spawn_blocking(move || {
            shell::run(
                &helm,
                &[
                    "uninstall",
                    &release,
                    "-n",
                    &ns,
                    "--wait",
                    "--timeout",
                    "3m",
                ],
            )
        })
        .await
        .context("helm uninstall task")??;

        let instance = format!("app.kubernetes.io/instance={}", self.cfg.release);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.cfg.release_namespace);
        wait_for(
            pods,
            watcher::Config::default().labels(&instance),
            "operator and agent pods gone",
            self.cfg.timeout,
            |items| {
                if items.is_empty() {
                    Progress::Done(())
                } else {
                    Progress::Pending(format!("pods left: {:?}", nodetopo_e2e::wait::names(items)))
                }
            },
        )
        .await?;
        let lp = ListParams::default().labels(&instance);
        let roles: Api<ClusterRole> = Api::all(self.client.clone());
        let left = roles.list(&lp).await.context("listing ClusterRoles")?;
        if !left.items.is_empty() {
            bail!(
                "ClusterRoles left after uninstall: {:?}",
                left.items.iter().map(|r| r.name_any()).collect::<Vec<_>>()
            );
        }
        let vaps: Api<ValidatingAdmissionPolicy> = Api::all(self.client.clone());
        let left = vaps
            .list(&lp)
            .await
            .context("listing ValidatingAdmissionPolicies")?;
        if !left.items.is_empty() {
            bail!(
                "ValidatingAdmissionPolicies left after uninstall: {:?}",
                left.items.iter().map(|r| r.name_any()).collect::<Vec<_>>()
            );
        }
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
            self.cfg.timeout,
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
        Ok(())
    }
}
