//! The scenario's `Provider` for the local node: cgroups read from the host, the kubelet's
//! records, the supervisor's restarts.

use super::*;

/// What the scenario needs from the local node.
pub(super) struct Local<'a> {
    pub(super) cp: &'a ControlPlane,
    pub(super) node: &'a LocalNode,
    pub(super) helm: PathBuf,
    pub(super) testnode: PathBuf,
    pub(super) devices: BTreeMap<String, u64>,
    /// Set: the supervisor answers the next `/start` with a failure, without starting.
    pub(super) fail_start: &'a std::sync::atomic::AtomicBool,
}

pub(super) fn text_of(out: std::process::Output, what: &str) -> Result<String> {
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `containerd://<id>` of a container (app or init) of a pod.
pub(super) fn container_id(pod: &Pod, container: &str) -> Result<String> {
    let status = pod.status.as_ref().context("pod without status")?;
    let all = status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten());
    let found = all
        .into_iter()
        .find(|c| c.name == container)
        .and_then(|c| c.container_id.clone())
        .with_context(|| format!("{}: no container id for {container} yet", pod.name_any()))?;
    Ok(found
        .strip_prefix("containerd://")
        .unwrap_or(&found)
        .to_string())
}

impl Provider for Local<'_> {
    fn name(&self) -> &'static str {
        "local-node"
    }

    fn workload(&self) -> Workload {
        Workload {
            image: TESTNODE_IMAGE.into(),
            pull_policy: "Never".into(),
            run: vec!["/nodetopo-testnode".into(), "workload".into()],
            print_and_exit: vec!["/nodetopo-testnode".into(), "affinity".into()],
        }
    }

    fn test_device(&self) -> Option<TestDevice> {
        Some(TestDevice {
            resource: DEVICE_RESOURCE.into(),
            numa_of: self.devices.clone(),
        })
    }

    fn nrt(&self) -> bool {
        true
    }

    async fn container_cpuset(&self, pod: &Pod, container: &str) -> Result<CpuSet> {
        let id = container_id(pod, container)?;
        let uid = pod.uid().context("pod without uid")?;
        let dir = self
            .node
            .container_cgroup("cpuset", &uid, &id)
            .with_context(|| {
                format!("no cpuset cgroup for {}/{container} ({id})", pod.name_any())
            })?;
        let file = dir.join("cpuset.cpus");
        let text =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        CpuSet::parse(text.trim()).with_context(|| format!("{}: {text:?}", file.display()))
    }

    async fn container_log(&self, pod: &Pod, container: &str) -> Result<String> {
        // The kubelet's CRI log: /var/log/pods/<ns>_<name>_<uid>/<container>/<restart>.log,
        // lines "<time> stdout F <text>".
        let uid = pod.uid().context("pod without uid")?;
        let dir = self.node.dir().join("var-log/pods").join(format!(
            "{}_{}_{uid}",
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        ));
        let file = dir.join(container).join("0.log");
        let text =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        Ok(text
            .lines()
            .map(|l| l.splitn(4, ' ').nth(3).unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n"))
    }

    async fn kubelet_records(&self, node: &str) -> Result<Option<KubeletRecords>> {
        if node != LOCAL_NODE {
            bail!("the local provider has one node, {LOCAL_NODE}, not {node}");
        }
        let kubelet = self.node.var_lib().join("kubelet");
        let state = kubelet.join("cpu_manager_state");
        let text =
            fs::read_to_string(&state).with_context(|| format!("reading {}", state.display()))?;
        let json: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: {text}", state.display()))?;
        let cpus = |v: &Value| -> Result<CpuSet> {
            let s = v.as_str().context("a cpuset string")?;
            CpuSet::parse(s).with_context(|| format!("cpuset {s:?}"))
        };
        let mut records = KubeletRecords {
            checkpoint_default: cpus(&json["defaultCpuSet"])?,
            ..KubeletRecords::default()
        };
        if let Some(entries) = json["entries"].as_object() {
            for (uid, containers) in entries {
                for (name, set) in containers.as_object().into_iter().flatten() {
                    records
                        .checkpoint
                        .insert((uid.clone(), name.clone()), cpus(set)?);
                }
            }
        }
        let socket = kubelet.join("pod-resources/kubelet.sock");
        let out = Command::new(&self.testnode)
            .arg("podresources")
            .arg("--socket")
            .arg(&socket)
            .output()
            .context("running nodetopo-testnode podresources")?;
        let answer: Value = serde_json::from_str(&text_of(out, "podresources List")?)
            .context("the podresources answer")?;
        for pod in answer["pods"].as_array().into_iter().flatten() {
            let key = format!(
                "{}/{}",
                pod["namespace"].as_str().unwrap_or_default(),
                pod["name"].as_str().unwrap_or_default()
            );
            for c in pod["containers"].as_array().into_iter().flatten() {
                let ids = c["cpu_ids"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|v| v.as_u64().map(|n| n as usize).context("a CPU id"))
                    .collect::<Result<CpuSet>>()?;
                let mut devices = BTreeMap::new();
                for d in c["devices"].as_array().into_iter().flatten() {
                    let ids: Vec<String> = d["ids"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect();
                    devices
                        .entry(d["resource"].as_str().unwrap_or_default().to_string())
                        .or_insert_with(Vec::new)
                        .extend(ids);
                }
                let name = c["name"].as_str().unwrap_or_default().to_string();
                records
                    .pod_resources
                    .insert((key.clone(), name), (ids, devices));
            }
        }
        Ok(Some(records))
    }

    async fn restart_kubelet(&self, node: &str) -> Result<bool> {
        if node != LOCAL_NODE {
            bail!("the local provider has one node, {LOCAL_NODE}, not {node}");
        }
        let nodes: Api<Node> = Api::all(self.cp.client());
        let heartbeat = |n: &Node| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .map(|c| (c.status.clone(), c.last_heartbeat_time.clone()))
        };
        let before = heartbeat(&nodes.get(LOCAL_NODE).await?);
        let listed: Vec<(String, String)> = self
            .kubelet_records(node)
            .await?
            .map(|r| r.pod_resources.into_keys().collect())
            .unwrap_or_default();
        tokio::task::block_in_place(|| -> Result<()> {
            self.node.stop_kubelet()?;
            self.node.start_kubelet()?;
            Ok(())
        })?;
        // Ready again, as posted by the new kubelet (a newer heartbeat).
        let t = Instant::now();
        loop {
            let now = heartbeat(&nodes.get(LOCAL_NODE).await?);
            if let Some((status, beat)) = &now {
                // ...and its PodResources answer lists every container it listed before (a
                // restarted kubelet serves the socket before it has re-synced its pods).
                if status == "True" && Some(beat) != before.as_ref().map(|b| &b.1) {
                    let now_listed = self
                        .kubelet_records(node)
                        .await
                        .ok()
                        .flatten()
                        .map(|r| r.pod_resources)
                        .unwrap_or_default();
                    if listed.iter().all(|k| now_listed.contains_key(k)) {
                        return Ok(true);
                    }
                }
            }
            if t.elapsed() > Duration::from_secs(90) {
                bail!(
                    "Node {LOCAL_NODE} not Ready with a new heartbeat 90 s after the kubelet restart: {now:?}\n{}",
                    self.node.log_tails(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn actuation(&self) -> bool {
        true
    }

    fn kubelet_tm_flag(&self) -> Option<&'static str> {
        Some(KUBELET_TM_FLAG)
    }

    fn fail_next_kubelet_start(&self) -> bool {
        self.fail_start
            .store(true, std::sync::atomic::Ordering::SeqCst);
        true
    }

    async fn kubelet_configz(&self, node: &str) -> Result<Option<Value>> {
        if node != LOCAL_NODE {
            bail!("the local provider has one node, {LOCAL_NODE}, not {node}");
        }
        // The kubelet's port serves HTTPS with its self-signed certificate; anonymous
        // requests are allowed on this node.
        let url = format!("https://127.0.0.1:{}/configz", self.node.kubelet_port);
        let out = Command::new("curl")
            .args(["-sSfk", "--max-time", "10", &url])
            .output()
            .context("running curl")?;
        let body: Value = serde_json::from_str(&text_of(out, &format!("GET {url}"))?)
            .with_context(|| format!("the answer of {url}"))?;
        Ok(Some(body["kubeletconfig"].clone()))
    }

    async fn checks_while_pinned(
        &self,
        client: &kube::Client,
        namespace: &str,
        node: &str,
    ) -> Result<usize> {
        admission_explained(client, namespace, node).await
    }

    async fn helm_uninstall(&self) -> Result<()> {
        // Before the agent goes: the chart's mounts as the running agent has them (issue 26).
        for fact in agent_mounts()? {
            println!("[local-node] agent mounts: {fact}");
        }
        tools::run(
            &self.helm,
            &[
                "uninstall",
                RELEASE,
                "--namespace",
                RELEASE_NS,
                "--wait",
                "--timeout",
                "180s",
            ],
            self.cp.kubeconfig(),
        )?;
        Ok(())
    }
}
