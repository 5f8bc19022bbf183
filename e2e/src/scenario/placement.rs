//! The test pods: how many CPUs they get from the node's allocatable CPU, creating and
//! waiting for them, their release on delete, and the device pods (step 7).

use super::*;

impl<P: Provider> Scenario<'_, P> {
    /// The pods per selected node, sized from the node's published topology.
    pub(super) async fn placement(&self) -> Result<Vec<NodePods>> {
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
    pub(super) async fn free_millis(&self, node: &str) -> Result<u64> {
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

    pub(super) async fn create(&self, pod: &TestPod, node: &str) -> Result<()> {
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

    pub(super) async fn wait_running(
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

    /// Waits until a test pod no longer exists.
    pub(super) async fn wait_pod_gone(&self, name: &str) -> Result<()> {
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

    pub(super) async fn pod(&self, name: &str) -> Result<Pod> {
        self.pods
            .get(name)
            .await
            .with_context(|| format!("reading pod {name}"))
    }

    pub(super) async fn wait_released(
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

    pub(super) async fn device_pods(
        &mut self,
        placement: &[NodePods],
        device: &TestDevice,
    ) -> Result<()> {
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
}
