//! Steps 1, 2, 5 and 9: the installed chart (operator leading, agents running), the
//! published NodeTopologies, replacing the agents, and `helm uninstall`.

use super::*;

impl<P: Provider> Scenario<'_, P> {
    pub(super) async fn installed(&mut self) -> Result<()> {
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

    pub(super) async fn published(&mut self) -> Result<()> {
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

    pub(super) async fn ensure_namespace(&self) -> Result<()> {
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

    /// Deletes every agent pod and waits for the DaemonSet's new ones to publish again.
    pub(super) async fn restart_agents(&mut self) -> Result<()> {
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

    pub(super) async fn uninstall(&mut self) -> Result<()> {
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
