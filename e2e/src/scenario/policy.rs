//! The test policy (steps 3, 5b, 8): applying it, waiting for its rollout and, with
//! actuation, for each node's `Applied` verdict read back from the kubelet.

use super::*;

impl<P: Provider> Scenario<'_, P> {
    /// Server-side applies the test policy and waits until the operator and every selected
    /// node's agent have caught up with it. Returns the policy's generation.
    pub(super) async fn apply_policy(&mut self, tm_policy: &str, strict: bool) -> Result<i64> {
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

    /// With actuation: every selected node's agent made its kubelet run the spec (`Applied`
    /// True for the NodeTopology's generation), the kubelet's `/configz` says so and its Node
    /// is Ready.
    pub(super) async fn wait_actuated(&mut self, tm_policy: &str, strict: bool) -> Result<()> {
        let verdicts = self
            .wait_verdict("Applied True on every selected node", true, |_| true)
            .await?;
        for (node, (reason, message)) in &verdicts {
            self.check_node_runs(node, tm_policy, strict, "after the apply")
                .await?;
            step(&format!(
                "   {node}: Applied True {reason}: {message}; Node Ready; the kubelet runs topologyManagerPolicy {tm_policy}"
            ));
        }
        Ok(())
    }

    /// Waits for every selected node's `Applied` verdict on its NodeTopology's current
    /// generation, once `ready` accepts its spec: True when `success`, else False `Failed`
    /// (a rollback). Any other verdict fails the wait. Returns (reason, message) per node.
    async fn wait_verdict(
        &self,
        what: &str,
        success: bool,
        ready: impl Fn(&TopologyView) -> bool,
    ) -> Result<BTreeMap<String, (String, String)>> {
        let selected: Vec<String> = self.selected.iter().cloned().collect();
        let mut verdicts = BTreeMap::new();
        self.wait_each_topology(what, &selected, |node, t| {
            if !ready(t) {
                return Progress::Pending(format!("{node}: spec not yet the one applied"));
            }
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
                ("True", _) if success => {}
                ("False", "Failed") if !success => {}
                (_, "WaitingForEviction" | "ObserveOnly") => {
                    return Progress::Pending(format!("{node}: Applied {} {}", c.reason, c.message))
                }
                _ => {
                    return Progress::Failed(format!(
                        "{node}: Applied {} {}: {}; want {}",
                        c.status,
                        c.reason,
                        c.message,
                        if success { "True" } else { "False Failed" }
                    ))
                }
            }
            verdicts.insert(node.to_string(), (c.reason.clone(), c.message.clone()));
            Progress::Done(())
        })
        .await?;
        Ok(verdicts)
    }

    /// Applies a topology manager change (best-effort) while the provider makes the
    /// kubelet's start fail: `Applied` False `Failed` for the generation, saying it restored
    /// the previous configuration; the Node Ready; the kubelet still runs `running_tm`.
    pub(super) async fn rolled_back(&mut self, running_tm: &str) -> Result<()> {
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
        let verdicts = self
            .wait_verdict("Applied False Failed (rolled back)", false, |t| {
                t.policy_ref.as_ref().map(|r| r.0.as_str()) == Some(POLICY)
                    && t.tm_policy.as_deref() == Some("best-effort")
            })
            .await?;
        for (node, (_, message)) in &verdicts {
            self.check_node_runs(node, running_tm, true, "after the rollback")
                .await?;
            step(&format!(
                "   {node}: Applied False Failed; Node Ready; the kubelet runs {running_tm} again: {message}"
            ));
        }
        Ok(())
    }

    /// The Node is Ready and, where the provider reads it, the kubelet's `/configz` runs
    /// topology manager policy `tm_policy` with `strict-cpu-reservation` on or off as `strict`.
    pub(super) async fn check_node_runs(
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

    /// After strict-cpu-reservation was applied with no pinned container: `Applied` says the
    /// state was rewritten, and the shared-pool container and the kubelet's `defaultCpuSet`
    /// no longer hold the reserved CPU 0.
    pub(super) async fn check_strict(&mut self, placement: &[NodePods]) -> Result<()> {
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

    pub(super) async fn wait_policy_gone(&mut self) -> Result<()> {
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
}
