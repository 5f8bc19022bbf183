//! What every container is checked against: published allocations, its cgroup cpuset, the
//! kubelet's checkpoint and PodResources answer, and the NodeResourceTopology.

use super::*;

impl<P: Provider> Scenario<'_, P> {
    /// Waits until every selected node publishes the pinned container's allocation (none for
    /// the others) and agrees with the kubelet.
    pub(super) async fn wait_allocations(
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

    /// Every container's cgroup against the published allocation or the shared pool, the
    /// init container's printed CPUs, and (where readable) the kubelet's own records.
    /// `pinned_running`: whether the pinned pods still run.
    pub(super) async fn check_containers(
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

    pub(super) async fn check_records(
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
    pub(super) async fn check_nrt(&mut self, placement: &[NodePods]) -> Result<()> {
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
            self.check_nrt_fingerprint(&api, &node).await?;
            self.check_nrt_topology_manager(&api, &node).await?;
        }
        Ok(())
    }

    /// The published `topologyManagerPolicy`/`topologyManagerScope` of `node` are the
    /// running kubelet's (its `/configz`), with the source named in the object
    /// (`nodetopo.io/topologyManagerSource`) and in NodeTopology `status.nodeResourceTopology`
    /// alike; with actuation on (the kubelet's files mounted) that source is `KubeletConfig`,
    /// or `KubeletCommandLine` where the provider starts the kubelet with a topology manager
    /// flag (found in the host's `/proc`).
    /// Polled: the agent reads the files on its 10 s kubelet tick.
    async fn check_nrt_topology_manager(
        &mut self,
        api: &Api<DynamicObject>,
        node: &str,
    ) -> Result<()> {
        use nodetopo_crds::nrt::build::{ATTR_TM_POLICY, ATTR_TM_SCOPE};
        use nodetopo_crds::nrt::tmsource::ATTR_TM_SOURCE;
        use nodetopo_crds::nrt::NodeResourceTopology;
        let Some(config) = self.provider.kubelet_configz(node).await? else {
            return Ok(());
        };
        let want_policy = config["topologyManagerPolicy"]
            .as_str()
            .unwrap_or("none")
            .to_string();
        let want_scope = config["topologyManagerScope"]
            .as_str()
            .unwrap_or("container")
            .to_string();
        // The flag wins over the files (its value is what the kubelet runs).
        if let Some(flag) = self.provider.kubelet_tm_flag() {
            let running = match flag.split_once('=') {
                Some(("--topology-manager-policy", v)) => Some((v, want_policy.as_str())),
                Some(("--topology-manager-scope", v)) => Some((v, want_scope.as_str())),
                _ => None,
            };
            if let Some((given, runs)) = running {
                self.check(given == runs, || {
                    format!("{node}: the kubelet runs with {flag} but its /configz says {runs}")
                })?;
            }
        }
        // With actuation the files are read; a topology manager flag on the kubelet's
        // command line makes that the source.
        let want_source =
            self.provider
                .actuation()
                .then_some(match self.provider.kubelet_tm_flag() {
                    Some(_) => "KubeletCommandLine",
                    None => "KubeletConfig",
                });
        let topologies = self.topologies.clone();
        let source = poll_until(
            &format!(
                "NodeResourceTopology {node}: topology manager {want_policy}/{want_scope} as the kubelet's /configz, source {}",
                want_source.unwrap_or("named")
            ),
            self.settings.timeout,
            Duration::from_millis(500),
            || {
                let (api, topologies) = (api.clone(), topologies.clone());
                let (want_policy, want_scope) = (want_policy.clone(), want_scope.clone());
                async move {
                    let obj = match api.get_opt(node).await {
                        Ok(Some(o)) => o,
                        Ok(None) => return Progress::Pending("no object yet".into()),
                        Err(e) => return Progress::Failed(e.to_string()),
                    };
                    let nrt: NodeResourceTopology = match serde_json::to_value(&obj)
                        .and_then(serde_json::from_value)
                    {
                        Ok(n) => n,
                        Err(e) => return Progress::Failed(format!("NodeResourceTopology {node}: {e}")),
                    };
                    let attr = |n: &str| nrt.attribute(n).unwrap_or_default().to_string();
                    let (policy, scope, source) =
                        (attr(ATTR_TM_POLICY), attr(ATTR_TM_SCOPE), attr(ATTR_TM_SOURCE));
                    let status_source = match topologies.get_opt(node).await {
                        Ok(o) => o
                            .and_then(|o| {
                                o.data["status"]["nodeResourceTopology"]["topologyManagerSource"]
                                    .as_str()
                                    .map(String::from)
                            })
                            .unwrap_or_default(),
                        Err(e) => return Progress::Failed(e.to_string()),
                    };
                    if policy == want_policy
                        && scope == want_scope
                        && !source.is_empty()
                        && want_source.is_none_or(|w| w == source)
                        && status_source == source
                    {
                        Progress::Done(source)
                    } else {
                        Progress::Pending(format!(
                            "published {policy}/{scope} from {source:?} (status says {status_source:?})"
                        ))
                    }
                }
            },
        )
        .await?;
        self.checks += 1;
        step(&format!(
            "   {node}: NodeResourceTopology topology manager {want_policy}/{want_scope} = the kubelet's /configz, source {source} (object and status){}",
            self.provider
                .kubelet_tm_flag()
                .map(|f| format!("; the kubelet runs with {f}"))
                .unwrap_or_default()
        ));
        Ok(())
    }

    /// [`Self::check_nrt_topology_manager`] on every selected node.
    pub(super) async fn check_nrt_topology_managers(&mut self) -> Result<()> {
        let gvk = GroupVersionKind::gvk("topology.node.k8s.io", "v1alpha2", "NodeResourceTopology");
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &ApiResource::from_gvk(&gvk));
        for node in self.selected.clone() {
            self.check_nrt_topology_manager(&api, &node).await?;
        }
        Ok(())
    }

    /// [`Self::check_nrt_fingerprint`] on every selected node (the shared-pool pods alone:
    /// a Guaranteed pod without exclusive CPUs counts, as the plugin counts it).
    pub(super) async fn check_nrt_fingerprints(&mut self, placement: &[NodePods]) -> Result<()> {
        let gvk = GroupVersionKind::gvk("topology.node.k8s.io", "v1alpha2", "NodeResourceTopology");
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &ApiResource::from_gvk(&gvk));
        for p in placement {
            self.check_nrt_fingerprint(&api, &p.node).await?;
        }
        Ok(())
    }

    /// The published `nodeTopologyPodsFingerprint` of `node` equals the one the scheduler
    /// plugin computes: over the pods the kubelet's PodResources `List` names, read from the
    /// API, by the plugin's rule (`api_pod_counted`), against the resources the object lists.
    /// Polled: the agent publishes within its debounce and kubelet tick.
    async fn check_nrt_fingerprint(&mut self, api: &Api<DynamicObject>, node: &str) -> Result<()> {
        let Some(records) = self.provider.kubelet_records(node).await? else {
            return Ok(());
        };
        let listed_pods: BTreeSet<(String, String)> = records
            .pod_resources
            .keys()
            .filter_map(|(key, _)| key.split_once('/'))
            .map(|(ns, name)| (ns.to_string(), name.to_string()))
            .collect();
        let client = self.client.clone();
        let (count, sign) = poll_until(
            &format!(
                "NodeResourceTopology {node}: fingerprint = the plugin's over the {} pod(s) of PodResources List",
                listed_pods.len()
            ),
            self.settings.timeout,
            Duration::from_millis(500),
            || {
                let (api, client, listed_pods) = (api.clone(), client.clone(), listed_pods.clone());
                async move {
                    match plugin_fingerprint(&api, &client, node, &listed_pods).await {
                        Ok((published, want, n)) if published == want => Progress::Done((n, want)),
                        Ok((published, want, n)) => Progress::Pending(format!(
                            "published {published}, the plugin's rule over {n} counted pod(s) gives {want}"
                        )),
                        Err(e) => Progress::Failed(e),
                    }
                }
            },
        )
        .await?;
        self.checks += 1;
        step(&format!(
            "   {node}: nodeTopologyPodsFingerprint {sign} = the plugin's rule over {count} of the {} pod(s) PodResources lists",
            listed_pods.len()
        ));
        Ok(())
    }

    /// Polls the cgroup cpuset of test pod `name`'s app container until it is `want` (the
    /// kubelet updates shared-pool containers at its next reconcile); counts one check.
    pub(super) async fn wait_cpuset(
        &mut self,
        name: &str,
        want: &CpuSet,
        what: &str,
    ) -> Result<CpuSet> {
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

    /// Watches the NodeTopologies until `check` is done for each of `nodes` (a node without
    /// one is pending); the first pending or failed node is what the wait reports.
    pub(super) async fn wait_each_topology(
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
}

/// The published fingerprint of `node`'s object, the one the plugin's rule gives over
/// `pods` (read from the API) against the resources the object lists, and how many pods
/// the rule counted. A pod PodResources lists but the API no longer has is left out (the
/// plugin's informer has dropped it too).
async fn plugin_fingerprint(
    api: &Api<DynamicObject>,
    client: &Client,
    node: &str,
    pods: &BTreeSet<(String, String)>,
) -> Result<(String, String, usize), String> {
    use nodetopo_crds::nrt::fingerprint::{PodFingerprint, ATTRIBUTE};
    use nodetopo_crds::nrt::{podset, NodeResourceTopology};
    let obj = match api.get_opt(node).await {
        Ok(Some(o)) => o,
        Ok(None) => return Ok((String::new(), "an object".into(), 0)),
        Err(e) => return Err(format!("reading NodeResourceTopology {node}: {e}")),
    };
    let nrt: NodeResourceTopology = serde_json::to_value(&obj)
        .and_then(serde_json::from_value)
        .map_err(|e| format!("NodeResourceTopology {node}: {e}"))?;
    let published = nrt.attribute(ATTRIBUTE).unwrap_or_default().to_string();
    let listed = podset::resource_names(&nrt.zones);
    let mut fp = PodFingerprint::new();
    for (ns, name) in pods {
        let pod = match Api::<Pod>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await
        {
            Ok(Some(p)) => p,
            Ok(None) => continue,
            Err(e) => return Err(format!("reading pod {ns}/{name}: {e}")),
        };
        if podset::api_pod_counted(&pod, &listed)? {
            fp.add(ns, name);
        }
    }
    Ok((published, fp.sign(), fp.len()))
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
