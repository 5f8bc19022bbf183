//! Cluster mode actuation: when the operator's rollout marks this node's NodeTopology
//! (annotation `nodetopo.io/apply-generation` equal to its `metadata.generation`) and the
//! agent runs with `--actuation`, carry the spec out on the kubelet with the same executor as
//! `nodetopo-agent apply` ([`crate::actuation`]), then publish the verdict as the `Applied`
//! condition (for that generation) and `status.change`. The executor's verify step also
//! waits (`--actuation-verify-seconds`) for this Node to be Ready again with a heartbeat
//! newer than the restart ([`crate::actuation::node_ready`]), then for `KubeletAgreement` on a kubelet
//! read after the restart ([`super::agreement`]); a failure rolls the apply back. A True
//! verdict's message ends with the agreement confirmed.
//!
//! - Not marked: `Applied` False `ObserveOnly` (with actuation on; nothing otherwise).
//! - Marked, actuation off: `Applied` False `ActuationDisabled`; nothing is touched.
//! - Marked: plan and apply. `NoChange`, `RestartOnly`, `StateRewritten` are True; `Failed`
//!   (restored) and `DrainRequired` False. A plan that needs pods gone reports
//!   `EvictionNotAllowed` when the mark says `nodetopo.io/eviction: Never`; with `Evict` it
//!   asks the Eviction API (policy/v1, so PodDisruptionBudgets hold) for each named pod,
//!   reports `WaitingForEviction` with each pod's answer, and plans again after
//!   `--actuation-retry-seconds` until the kubelet state no longer needs them.
//!
//! Evictions requested for a generation are remembered ([`Earlier`]) and listed first in the
//! `status.change.done` of its later verdicts, so the final one names both the evictions and
//! the apply that followed them.
//!
//! A generation with a final verdict (True, `Failed`, `DrainRequired`, `EvictionNotAllowed`,
//! `ActuationDisabled`, `DryRun`) is not applied again; a new spec (new generation) and a new mark are
//! needed. The decisions are the pure [`next_step`] and [`outcome_of`]; [`run`] is the shell.

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod as K8sPod;
use kube::api::{EvictParams, ListParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use nodetopo_crds::conditions::{self, reason, ConditionSpec};
use nodetopo_crds::rollout::EvictionMode;
use nodetopo_crds::{NodeTopology, APPLY_GENERATION_ANNOTATION, EVICTION_ANNOTATION};
use nodetopo_engine::change::OwnedConfig;
use nodetopo_engine::CpuTopology;
use nodetopo_kubelet::config as kubelet;

use crate::actuation::agreement::{AgreementCheck, AgreementFeed};
use crate::actuation::node_ready::NodeReadyCheck;
use crate::actuation::{self, backup_of, ApplyReport, KubeletFiles, RestartMode};

mod verdict;
pub use verdict::{
    desired_from_spec, next_step, outcome_of, pods_to_evict, Earlier, EvictionResult, Last,
    Outcome, Step,
};

/// The actuation flags of `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct ActuationArgs {
    /// Make the kubelet run the spec when the operator's rollout marks this node (writes the
    /// kubelet drop-in and state file, restarts the kubelet). Off by default.
    #[arg(long, env = "NODETOPO_ACTUATION")]
    pub actuation: bool,
    /// The kubelet's configuration file (`--config`).
    #[arg(long, default_value = "/var/lib/kubelet/config.yaml")]
    pub kubelet_config: PathBuf,
    /// The kubelet's drop-in directory (`--config-dir`), where `90-nodetopo.conf` goes.
    #[arg(long, default_value = kubelet::DEFAULT_CONFIG_DIR)]
    pub kubelet_config_dir: PathBuf,
    /// How the kubelet is restarted: `systemd` (over D-Bus, on --kubelet-unit), `command`,
    /// or `none` (dry run: plan and report what would be done, touch nothing).
    #[arg(long, value_enum, default_value_t = RestartMode::Systemd)]
    pub kubelet_restart: RestartMode,
    /// systemd unit of the kubelet.
    #[arg(long, default_value = "kubelet.service")]
    pub kubelet_unit: String,
    /// `--kubelet-restart systemd`: systemd's D-Bus address (the system bus by default).
    #[arg(long, default_value = actuation::SYSTEM_BUS)]
    pub kubelet_systemd_address: String,
    /// `--kubelet-restart systemd`: the address is a direct connection to systemd (its
    /// private socket), no bus.
    #[arg(long)]
    pub kubelet_systemd_direct: bool,
    /// `--kubelet-restart systemd`: how long one systemd job may take.
    #[arg(long, default_value_t = 120)]
    pub kubelet_systemd_timeout_seconds: u64,
    /// `--kubelet-restart command`: stop command (whitespace-separated argv).
    #[arg(long)]
    pub kubelet_stop_command: Option<String>,
    /// `--kubelet-restart command`: start command.
    #[arg(long)]
    pub kubelet_start_command: Option<String>,
    /// `--kubelet-restart command`: health command (optional).
    #[arg(long)]
    pub kubelet_health_command: Option<String>,
    /// Seconds between re-plans while waiting for evictions (and between re-reads).
    #[arg(long, default_value_t = 10)]
    pub actuation_retry_seconds: u64,
    /// Verify step: how long to wait after the kubelet restart for this Node to be Ready
    /// again with a heartbeat newer than the restart, then (counted from the restart) for
    /// KubeletAgreement on a kubelet read after it (else the apply is rolled back).
    #[arg(long, default_value_t = 120)]
    pub actuation_verify_seconds: u64,
    /// The check of the kubelet's command line before each apply.
    #[command(flatten)]
    pub process: actuation::ProcessArgs,
    /// The guard that starts the kubelet if the agent dies mid-apply (systemd restarter).
    #[command(flatten)]
    pub guard: actuation::guard::GuardArgs,
}

impl ActuationArgs {
    /// The kubelet service the executor drives, with the guard for `files` (systemd);
    /// errors name the missing or bad flag.
    pub fn service_for(
        &self,
        files: &KubeletFiles,
    ) -> anyhow::Result<Box<dyn actuation::KubeletService + Send>> {
        if self.kubelet_restart != RestartMode::Systemd {
            return self.service();
        }
        let timeout = Duration::from_secs(self.kubelet_systemd_timeout_seconds);
        let verify = Duration::from_secs(self.actuation_verify_seconds.max(1));
        let guard = self.guard.plan(files, &self.process, timeout, verify)?;
        Ok(Box::new(
            actuation::SystemdBus::new(
                &self.kubelet_unit,
                &self.kubelet_systemd_address,
                self.kubelet_systemd_direct,
                timeout,
            )?
            .with_guard(guard),
        ))
    }

    /// The kubelet service the executor drives, without a guard (the start-up check of the
    /// flags); errors name the missing flag.
    pub fn service(&self) -> anyhow::Result<Box<dyn actuation::KubeletService + Send>> {
        let argv = |s: &Option<String>, flag: &str| -> anyhow::Result<Vec<String>> {
            match s {
                Some(s) if !s.trim().is_empty() => {
                    Ok(s.split_whitespace().map(String::from).collect())
                }
                _ => anyhow::bail!("--kubelet-restart command needs {flag}"),
            }
        };
        Ok(match self.kubelet_restart {
            RestartMode::Systemd => Box::new(actuation::SystemdBus::new(
                &self.kubelet_unit,
                &self.kubelet_systemd_address,
                self.kubelet_systemd_direct,
                Duration::from_secs(self.kubelet_systemd_timeout_seconds),
            )?),
            RestartMode::Command => Box::new(actuation::Commands {
                stop: argv(&self.kubelet_stop_command, "--kubelet-stop-command")?,
                start: argv(&self.kubelet_start_command, "--kubelet-start-command")?,
                health: self
                    .kubelet_health_command
                    .as_deref()
                    .map(|s| s.split_whitespace().map(String::from).collect())
                    .unwrap_or_default(),
            }),
            RestartMode::DryRun => Box::new(actuation::DryRun::default()),
        })
    }
}

/// Reads one pod of the node's pod list as the executor takes it: `Ok(None)` for a pod whose
/// CPUs are released (Succeeded, Failed); the error names the pod. The daemon passes its
/// own conversion, so that actuation does not reach into the daemon.
pub type PodReader = fn(&K8sPod) -> Result<Option<nodetopo_engine::Pod>, String>;

/// What the cluster-mode loop works with, fixed for its life.
pub struct Cluster {
    /// The API server.
    pub client: Client,
    /// The same without its own retry of 429 (evictions: a refusal is an answer).
    pub evict_client: Client,
    /// This node's name.
    pub node: String,
    /// The machine.
    pub topology: CpuTopology,
    /// Where the kubelet's files are.
    pub files: KubeletFiles,
    /// The actuation flags.
    pub args: ActuationArgs,
    /// What the verify step waits on (KubeletAgreement after the restart).
    pub feed: AgreementFeed,
    /// How a pod of the list becomes an engine pod.
    pub pods_of: PodReader,
}

/// The backup files present beside the kubelet's files.
fn backups_present(files: &KubeletFiles) -> Vec<String> {
    [backup_of(&files.dropin()), backup_of(&files.state)]
        .into_iter()
        .filter(|p| p.is_file())
        .map(|p| p.display().to_string())
        .collect()
}

/// The last Applied verdict recorded on the object (after an agent restart).
fn last_of(nt: &NodeTopology) -> Option<Last> {
    let c = conditions::find(&nt.status.as_ref()?.conditions, conditions::APPLIED)?;
    Some((
        c.observed_generation?,
        c.reason.clone(),
        c.status == conditions::TRUE,
    ))
}

fn annotation<'a>(nt: &'a NodeTopology, key: &str) -> Option<&'a str> {
    nt.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Asks the Eviction API to evict `namespace/name`.
async fn evict(client: &Client, pod: &str) -> EvictionResult {
    let result = match pod.split_once('/') {
        None => Err(format!(
            "{pod} is not a pod of the API server's pod list (no namespace/name)"
        )),
        Some((ns, name)) => Api::<K8sPod>::namespaced(client.clone(), ns)
            .evict(name, &EvictParams::default())
            .await
            .map(|_| ())
            .map_err(|e| match e {
                kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
                other => other.to_string(),
            }),
    };
    EvictionResult {
        pod: pod.to_string(),
        result,
    }
}

/// A `Failed` verdict (final) for `generation`.
fn failed(generation: i64, msg: String) -> Outcome {
    Outcome {
        generation,
        condition: ConditionSpec::new(conditions::APPLIED, false, reason::FAILED, msg),
        change: None,
    }
}

/// Read: the node's pods the executor plans with (the terminal ones left out). A list that
/// fails is not final (the next read retries); a pod that cannot be read is.
async fn read_pods(c: &Cluster, generation: i64) -> Result<Vec<nodetopo_engine::Pod>, Outcome> {
    let lp = ListParams::default().fields(&format!("spec.nodeName={}", c.node));
    let pods = match Api::<K8sPod>::all(c.client.clone()).list(&lp).await {
        Ok(list) => list.items,
        // Not final: the next read retries.
        Err(e) => {
            return Err(Outcome {
                generation,
                condition: ConditionSpec::new(
                    conditions::APPLIED,
                    false,
                    reason::WAITING_FOR_EVICTION,
                    format!("listing the node's pods failed, nothing changed yet: {e}"),
                ),
                change: None,
            })
        }
    };
    let mut engine_pods = Vec::new();
    for p in &pods {
        match (c.pods_of)(p) {
            Ok(Some(pod)) => engine_pods.push(pod),
            Ok(None) => {}
            Err(e) => {
                return Err(failed(
                    generation,
                    format!("a pod on the node cannot be read: {e}"),
                ))
            }
        }
    }
    Ok(engine_pods)
}

/// Restart and verify: the kubelet service of the flags, its verify step waiting for the
/// Node to be Ready again after the restart, then for KubeletAgreement on a kubelet read
/// after it (what it confirmed lands in `verified`); a dry run is not decorated.
fn verified_service(
    c: &Cluster,
    generation: i64,
    dry_run: bool,
    verified: &std::sync::Arc<std::sync::Mutex<Option<String>>>,
) -> anyhow::Result<Box<dyn actuation::KubeletService + Send>> {
    let svc = c.args.service_for(&c.files)?;
    if dry_run {
        return Ok(svc);
    }
    let wait = Duration::from_secs(c.args.actuation_verify_seconds.max(1));
    let handle = tokio::runtime::Handle::current();
    let ready = NodeReadyCheck::new(
        svc,
        handle.clone(),
        Api::all(c.client.clone()),
        &c.node,
        wait,
    );
    Ok(Box::new(AgreementCheck::new(
        Box::new(ready),
        handle,
        c.feed.clone(),
        generation,
        wait,
        verified.clone(),
    )))
}

/// The executor ([`actuation::apply`]) on a blocking thread; the error is the `Failed`
/// verdict's message.
async fn execute(
    c: &Cluster,
    pods: Vec<nodetopo_engine::Pod>,
    desired: OwnedConfig,
    dry_run: bool,
    svc: Box<dyn actuation::KubeletService + Send>,
) -> Result<ApplyReport, String> {
    let (topology, files_c) = (c.topology.clone(), c.files.clone());
    let process = c.args.process.check(&c.files);
    let joined = tokio::task::spawn_blocking(move || {
        let mut svc = svc;
        actuation::apply(
            &actuation::ApplyInput {
                topology: &topology,
                files: &files_c,
                pods: &pods,
                desired: &desired,
                dry_run,
                process: process.as_ref(),
            },
            svc.as_mut(),
        )
    })
    .await;
    match joined {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(e) => Err(format!("the apply task ended abnormally: {e}")),
    }
}

/// Report: what the verify step confirmed ends an applied report's message.
fn with_confirmation(report: &mut ApplyReport, confirmed: Option<String>) {
    if report.applied {
        if let Some(confirmed) = confirmed {
            report.message = format!("{}; {confirmed}", report.message);
        }
    }
}

/// The evictions a report waiting for them asks for (with `Evict`, not in a dry run).
async fn evictions_of(
    c: &Cluster,
    report: &ApplyReport,
    eviction: EvictionMode,
    dry_run: bool,
) -> Vec<EvictionResult> {
    let mut evictions = Vec::new();
    if report.reason == "WaitingForEviction" && eviction == EvictionMode::Evict && !dry_run {
        for pod in pods_to_evict(&report.plan) {
            evictions.push(evict(&c.evict_client, &pod).await);
        }
    }
    evictions
}

/// One apply of `generation` for `nt`, blocking work on a blocking thread: read the pods,
/// drive the executor, ask for the evictions its plan needs, and judge the report.
async fn apply_once(
    c: &Cluster,
    nt: &NodeTopology,
    generation: i64,
    eviction: EvictionMode,
) -> Outcome {
    let desired = match desired_from_spec(&nt.spec) {
        Ok(d) => d,
        Err(e) => {
            return failed(
                generation,
                format!("the spec cannot be read as kubelet fields: {e:#}"),
            )
        }
    };
    let pods = match read_pods(c, generation).await {
        Ok(p) => p,
        Err(o) => return o,
    };
    let dry_run = c.args.kubelet_restart == RestartMode::DryRun;
    let verified = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let svc = match verified_service(c, generation, dry_run, &verified) {
        Ok(s) => s,
        Err(e) => return failed(generation, format!("{e:#}")),
    };
    let mut report = match execute(c, pods, desired, dry_run, svc).await {
        Ok(r) => r,
        Err(msg) => return failed(generation, msg),
    };
    with_confirmation(&mut report, verified.lock().ok().and_then(|mut v| v.take()));
    if let Some(line) = &report.kubelet_command_line {
        tracing::info!(generation, "kubelet command line: {line}");
    }
    let evictions = evictions_of(c, &report, eviction, dry_run).await;
    outcome_of(
        generation,
        &c.files,
        &report,
        eviction,
        &evictions,
        backups_present(&c.files),
    )
}

/// Whether a re-plan waiting for evictions comes too soon: at most one per retry period
/// (the agent's own status writes wake the loop too). Pure.
pub fn too_soon(
    step: &Step,
    generation: Option<i64>,
    last: Option<&Last>,
    since_attempt: Option<Duration>,
    retry: Duration,
) -> bool {
    matches!(step, Step::Apply { .. })
        && last.is_some_and(|l| Some(l.0) == generation && l.1 == reason::WAITING_FOR_EVICTION)
        && since_attempt.is_some_and(|t| t < retry)
}

/// What the loop remembers between reads of the NodeTopology.
#[derive(Default)]
struct Judged {
    /// The last verdict published (from the object at the first read).
    last: Option<Last>,
    /// The evictions already requested for the generation.
    earlier: Earlier,
    /// When the last apply began.
    last_attempt: Option<std::time::Instant>,
    /// The object's own last verdict was read.
    started: bool,
}

impl Judged {
    /// The verdict for the NodeTopology as read now, if any: a report, or an apply's.
    async fn judge(&mut self, c: &Cluster, nt: &NodeTopology, retry: Duration) -> Option<Outcome> {
        if !self.started {
            self.last = last_of(nt);
            self.started = true;
        }
        let step = next_step(
            c.args.actuation,
            nt.metadata.generation,
            annotation(nt, APPLY_GENERATION_ANNOTATION),
            annotation(nt, EVICTION_ANNOTATION),
            self.last.as_ref(),
        );
        let since = self.last_attempt.map(|t| t.elapsed());
        let soon = too_soon(
            &step,
            nt.metadata.generation,
            self.last.as_ref(),
            since,
            retry,
        );
        match step {
            _ if soon => None,
            Step::Idle => None,
            Step::Report(o) => Some(*o),
            Step::Apply {
                generation,
                eviction,
            } => {
                tracing::info!(generation, ?eviction, "applying the spec to the kubelet");
                self.last_attempt = Some(std::time::Instant::now());
                Some(apply_once(c, nt, generation, eviction).await)
            }
        }
    }

    /// Records `o` (the earlier steps of its generation first), logs it and returns it to
    /// publish.
    fn record(&mut self, o: Outcome) -> Outcome {
        let o = self.earlier.record(o);
        tracing::info!(
            generation = o.generation,
            applied = o.condition.status,
            reason = %o.condition.reason,
            "{}",
            o.condition.message
        );
        self.last = Some((o.generation, o.condition.reason.clone(), o.condition.status));
        o
    }
}

/// Evictions use a client that does not retry 429 itself: a refusal by a
/// PodDisruptionBudget is an answer to report, and the re-plan retries later.
async fn evict_client(client: &Client) -> Client {
    match kube::Config::infer().await {
        Ok(mut c) => {
            c.default_retry = false;
            Client::try_from(c).unwrap_or_else(|_| client.clone())
        }
        Err(_) => client.clone(),
    }
}

/// Follows the node's NodeTopology and acts on marks until the verdict receiver is gone.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    client: Client,
    node: String,
    topology: CpuTopology,
    kubelet_state: PathBuf,
    args: ActuationArgs,
    tx: tokio::sync::mpsc::Sender<Outcome>,
    feed: AgreementFeed,
    pods_of: PodReader,
) {
    let files = KubeletFiles {
        config: args.kubelet_config.clone(),
        config_dir: args.kubelet_config_dir.clone(),
        state: kubelet_state,
    };
    let c = Cluster {
        evict_client: evict_client(&client).await,
        client,
        node,
        topology,
        files,
        args,
        feed,
        pods_of,
    };
    let api: Api<NodeTopology> = Api::all(c.client.clone());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={}", c.node));
    let mut changes = watcher(api.clone(), cfg).boxed();
    let retry = Duration::from_secs(c.args.actuation_retry_seconds.max(1));
    let mut judged = Judged::default();
    loop {
        match api.get_opt(&c.node).await {
            Ok(Some(nt)) => {
                if let Some(o) = judged.judge(&c, &nt, retry).await {
                    let o = judged.record(o);
                    if tx.send(o).await.is_err() {
                        return;
                    }
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("actuation: reading NodeTopology {}: {e}", c.node),
        }
        // Wake on any change of the object, or after the retry period.
        tokio::select! {
            ev = changes.next() => if ev.is_none() { return; },
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

#[cfg(test)]
mod tests;
