//! Cluster mode actuation: when the operator's rollout marks this node's NodeTopology
//! (annotation `nodetopo.io/apply-generation` equal to its `metadata.generation`) and the
//! agent runs with `--actuation`, carry the spec out on the kubelet with the same executor as
//! `nodetopo-agent apply` ([`crate::actuate`]), then publish the verdict as the `Applied`
//! condition (for that generation) and `status.change`. The executor's verify step also
//! waits (`--actuation-verify-seconds`) for this Node to be Ready again with a heartbeat
//! newer than the restart ([`crate::actuate::node_ready`]), then for `KubeletAgreement` on a kubelet
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
use nodetopo_crds::{
    ChangeStatus, ChangeStepStatus, NodeTopology, NodeTopologySpec, APPLY_GENERATION_ANNOTATION,
    EVICTION_ANNOTATION,
};
use nodetopo_engine::change::{ChangeClass, ChangePlan, OwnedConfig};
use nodetopo_engine::CpuTopology;
use nodetopo_kubelet::config as kubelet;

use super::agreement::{AgreementCheck, AgreementFeed};
pub use super::core::Outcome;
use super::core::{Event, PodInfo};
use crate::actuate::node_ready::NodeReadyCheck;
use crate::actuate::{self, backup_of, ApplyReport, KubeletFiles, Recovery, RestartMode};

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
    #[arg(long, default_value = actuate::SYSTEM_BUS)]
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
    pub process: actuate::ProcessArgs,
    /// The guard that starts the kubelet if the agent dies mid-apply (systemd restarter).
    #[command(flatten)]
    pub guard: actuate::guard::GuardArgs,
}

impl ActuationArgs {
    /// The kubelet service the executor drives, with the guard for `files` (systemd);
    /// errors name the missing or bad flag.
    pub fn service_for(
        &self,
        files: &KubeletFiles,
    ) -> anyhow::Result<Box<dyn actuate::KubeletService + Send>> {
        if self.kubelet_restart != RestartMode::Systemd {
            return self.service();
        }
        let timeout = Duration::from_secs(self.kubelet_systemd_timeout_seconds);
        let verify = Duration::from_secs(self.actuation_verify_seconds.max(1));
        let guard = self.guard.plan(files, &self.process, timeout, verify)?;
        Ok(Box::new(
            actuate::SystemdBus::new(
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
    pub fn service(&self) -> anyhow::Result<Box<dyn actuate::KubeletService + Send>> {
        let argv = |s: &Option<String>, flag: &str| -> anyhow::Result<Vec<String>> {
            match s {
                Some(s) if !s.trim().is_empty() => {
                    Ok(s.split_whitespace().map(String::from).collect())
                }
                _ => anyhow::bail!("--kubelet-restart command needs {flag}"),
            }
        };
        Ok(match self.kubelet_restart {
            RestartMode::Systemd => Box::new(actuate::SystemdBus::new(
                &self.kubelet_unit,
                &self.kubelet_systemd_address,
                self.kubelet_systemd_direct,
                Duration::from_secs(self.kubelet_systemd_timeout_seconds),
            )?),
            RestartMode::Command => Box::new(actuate::Commands {
                stop: argv(&self.kubelet_stop_command, "--kubelet-stop-command")?,
                start: argv(&self.kubelet_start_command, "--kubelet-start-command")?,
                health: self
                    .kubelet_health_command
                    .as_deref()
                    .map(|s| s.split_whitespace().map(String::from).collect())
                    .unwrap_or_default(),
            }),
            RestartMode::DryRun => Box::new(actuate::DryRun::default()),
        })
    }
}

/// What to do about the NodeTopology as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing (already judged, or nothing to report).
    Idle,
    /// Publish this verdict without touching the node.
    Report(Box<Outcome>),
    /// Plan and apply generation `generation`.
    Apply {
        /// The generation marked.
        generation: i64,
        /// Whether pods may be evicted.
        eviction: EvictionMode,
    },
}

/// Whether a verdict is final for its generation (no retry).
pub fn is_final(reason_: &str, status: bool) -> bool {
    status
        || [
            reason::FAILED,
            reason::DRAIN_REQUIRED,
            reason::EVICTION_NOT_ALLOWED,
            reason::ACTUATION_DISABLED,
            reason::DRY_RUN,
        ]
        .contains(&reason_)
}

/// The last verdict: (generation, reason, status).
pub type Last = (i64, String, bool);

/// Decides the next step from the NodeTopology's generation and annotations and the last
/// verdict published.
pub fn next_step(
    enabled: bool,
    generation: Option<i64>,
    mark: Option<&str>,
    eviction: Option<&str>,
    last: Option<&Last>,
) -> Step {
    let Some(generation) = generation else {
        return Step::Idle;
    };
    let marked = mark.is_some_and(|m| m.trim() == generation.to_string());
    let judged = last.filter(|l| l.0 == generation);
    if judged.is_some_and(|l| is_final(&l.1, l.2)) {
        return Step::Idle;
    }
    if !marked {
        if !enabled || judged.is_some_and(|l| l.1 == reason::OBSERVE_ONLY) {
            return Step::Idle;
        }
        return Step::Report(Box::new(Outcome {
            generation,
            condition: ConditionSpec::new(
                conditions::APPLIED,
                false,
                reason::OBSERVE_ONLY,
                format!("the operator has not asked this node to apply generation {generation} (rollout mode Observe, or its batch has not started)"),
            ),
            change: None,
        }));
    }
    if !enabled {
        return Step::Report(Box::new(Outcome {
            generation,
            condition: ConditionSpec::new(
                conditions::APPLIED,
                false,
                reason::ACTUATION_DISABLED,
                format!("asked to apply generation {generation}, but this agent runs without --actuation (chart value agent.actuation.enabled); nothing was changed"),
            ),
            change: None,
        }));
    }
    let eviction = match eviction.map(str::trim) {
        Some("Evict") => EvictionMode::Evict,
        _ => EvictionMode::Never,
    };
    Step::Apply {
        generation,
        eviction,
    }
}

/// The answer of the Eviction API for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionResult {
    /// `namespace/name`.
    pub pod: String,
    /// `Ok` when the eviction was accepted, else the server's refusal.
    pub result: Result<(), String>,
}

/// The pods a plan needs gone (its EvictFirst steps), as `namespace/name`.
pub fn pods_to_evict(plan: &ChangePlan) -> Vec<String> {
    let mut out: Vec<String> = plan
        .steps
        .iter()
        .filter(|s| s.class == ChangeClass::EvictFirst)
        .flat_map(|s| s.pods.iter().cloned())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `status.change` of a plan, with what was done and the backups found.
pub fn change_status(
    generation: i64,
    plan: &ChangePlan,
    done: Vec<String>,
    backups: Vec<String>,
) -> ChangeStatus {
    ChangeStatus {
        generation: Some(generation),
        class: plan.class.to_string(),
        config_changes: plan.config_changes.clone(),
        steps: plan
            .steps
            .iter()
            .map(|s| ChangeStepStatus {
                class: s.class.to_string(),
                reason: s.reason.clone(),
                pods: s.pods.clone(),
            })
            .collect(),
        non_conforming: plan
            .non_conforming
            .iter()
            .map(|n| {
                format!(
                    "{} container {} (CPUs {}): {}",
                    n.pod, n.container, n.cpus, n.why
                )
            })
            .collect(),
        done,
        backups,
    }
}

/// The verdict of an executor report. `evictions` are the Eviction API's answers (only
/// asked for with `Evict`); `backups` the backup files present after the apply.
pub fn outcome_of(
    generation: i64,
    files: &KubeletFiles,
    report: &ApplyReport,
    eviction: EvictionMode,
    evictions: &[EvictionResult],
    backups: Vec<String>,
) -> Outcome {
    let mut done = Vec::new();
    match report.recovery {
        Recovery::Nothing => {}
        Recovery::RolledBack => {
            done.push("rolled an interrupted apply back from its backups".to_string())
        }
        Recovery::RolledForward => {
            done.push("finished an interrupted apply (its files were in place)".to_string())
        }
    }
    let dropin = files.dropin().display().to_string();
    let state = files.state.display().to_string();
    let (status, why, message) = match report.reason.as_str() {
        "NoChange" => (true, reason::NO_CHANGE, report.message.clone()),
        "RestartOnly" => {
            done.push(format!("backed up and wrote {dropin} (mode 0644)"));
            done.push("restarted the kubelet".into());
            done.push(VERIFIED.into());
            (true, reason::RESTART_ONLY, report.message.clone())
        }
        "StateRewritten" => {
            done.push("stopped the kubelet".into());
            done.push(format!(
                "backed up {state} to {}",
                backup_of(&files.state).display()
            ));
            done.push(format!("rewrote {state} with the kubelet's checksum"));
            done.push(format!("wrote {dropin} (mode 0644)"));
            done.push("started the kubelet".into());
            done.push(VERIFIED.into());
            (true, reason::STATE_REWRITTEN, report.message.clone())
        }
        "DrainRequired" => (false, reason::DRAIN_REQUIRED, report.message.clone()),
        "DryRun" => {
            done.extend(
                report
                    .actions
                    .iter()
                    .map(|a| format!("dry run, not done: would {a}")),
            );
            (
                false,
                reason::DRY_RUN,
                format!(
                    "dry run (--kubelet-restart none): nothing was changed and the kubelet was not restarted; the plan is {}: {}",
                    report.plan.class, report.message
                ),
            )
        }
        "WaitingForEviction" => {
            let pods = pods_to_evict(&report.plan);
            if eviction == EvictionMode::Never {
                (
                    false,
                    reason::EVICTION_NOT_ALLOWED,
                    format!(
                        "the plan needs {} evicted and the policy's rollout.eviction is Never; nothing was changed: {}",
                        pods.join(", "),
                        report.message
                    ),
                )
            } else {
                let mut answers = Vec::new();
                for e in evictions {
                    match &e.result {
                        Ok(()) => {
                            done.push(format!("eviction of {} {ACCEPTED_EVICTION}", e.pod));
                            answers.push(format!("{}: eviction accepted", e.pod));
                        }
                        Err(why) => {
                            done.push(format!("eviction of {} refused: {why}", e.pod));
                            answers.push(format!("{}: eviction refused: {why}", e.pod));
                        }
                    }
                }
                (
                    false,
                    reason::WAITING_FOR_EVICTION,
                    format!(
                        "waiting until the kubelet has released the CPUs of {} ({}); {}",
                        pods.join(", "),
                        answers.join("; "),
                        report.message
                    ),
                )
            }
        }
        _ => {
            done.push(format!("attempted and rolled back: {}", report.message));
            (false, reason::FAILED, report.message.clone())
        }
    };
    Outcome {
        generation,
        condition: ConditionSpec::new(conditions::APPLIED, status, why, message),
        change: Some(change_status(generation, &report.plan, done, backups)),
    }
}

/// What was done for one generation in earlier attempts (accepted evictions), to carry into
/// the `status.change.done` of its later verdicts. Pure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Earlier {
    generation: Option<i64>,
    done: Vec<String>,
}

impl Earlier {
    /// Records what `o` did and returns it with the earlier steps of its generation first.
    /// A new generation forgets the old one's steps; a step already listed is not repeated
    /// (a terminating pod is asked again on every re-plan until the kubelet lets it go).
    pub fn record(&mut self, mut o: Outcome) -> Outcome {
        if self.generation != Some(o.generation) {
            *self = Earlier {
                generation: Some(o.generation),
                done: Vec::new(),
            };
        }
        let Some(change) = o.change.as_mut() else {
            return o;
        };
        let mut done = self.done.clone();
        for d in &change.done {
            if !done.contains(d) {
                done.push(d.clone());
            }
        }
        if o.condition.reason == reason::WAITING_FOR_EVICTION {
            for d in &change.done {
                if d.ends_with(ACCEPTED_EVICTION) && !self.done.contains(d) {
                    self.done.push(d.clone());
                }
            }
        }
        change.done = done;
        o
    }
}

/// The `done` entry of a verified apply.
const VERIFIED: &str = "verified: kubelet healthy, Node Ready again with a heartbeat after the restart, KubeletAgreement confirmed on a kubelet read after the restart (see the message), effective configuration as desired, state file accepted";

/// How the `done` entry of an accepted eviction ends.
const ACCEPTED_EVICTION: &str = "requested (Eviction API)";

/// The owned kubelet fields a NodeTopology spec asks for (the same reading as `apply
/// --policy`).
pub fn desired_from_spec(spec: &NodeTopologySpec) -> anyhow::Result<OwnedConfig> {
    Ok(OwnedConfig::from_spec(
        &spec.cpu_manager,
        &spec.topology_manager,
    )?)
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

/// One apply of `generation` for `nt`, blocking work on a blocking thread.
#[allow(clippy::too_many_arguments)]
async fn apply_once(
    client: &Client,
    evict_client: &Client,
    node: &str,
    topology: &CpuTopology,
    files: &KubeletFiles,
    args: &ActuationArgs,
    nt: &NodeTopology,
    generation: i64,
    eviction: EvictionMode,
    feed: &AgreementFeed,
) -> Outcome {
    let failed = |msg: String| Outcome {
        generation,
        condition: ConditionSpec::new(conditions::APPLIED, false, reason::FAILED, msg),
        change: None,
    };
    let desired = match desired_from_spec(&nt.spec) {
        Ok(d) => d,
        Err(e) => return failed(format!("the spec cannot be read as kubelet fields: {e:#}")),
    };
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let pods = match Api::<K8sPod>::all(client.clone()).list(&lp).await {
        Ok(list) => list.items,
        // Not final: the next read retries.
        Err(e) => {
            return Outcome {
                generation,
                condition: ConditionSpec::new(
                    conditions::APPLIED,
                    false,
                    reason::WAITING_FOR_EVICTION,
                    format!("listing the node's pods failed, nothing changed yet: {e}"),
                ),
                change: None,
            }
        }
    };
    let mut engine_pods = Vec::new();
    for p in &pods {
        match PodInfo::from_k8s(p) {
            Ok(info) if !info.terminal => engine_pods.push(info.pod),
            Ok(_) => {}
            Err(e) => return failed(format!("a pod on the node cannot be read: {e}")),
        }
    }
    let svc = match args.service_for(files) {
        Ok(s) => s,
        Err(e) => return failed(format!("{e:#}")),
    };
    let dry_run = args.kubelet_restart == RestartMode::DryRun;
    // The verify step also waits for the Node to be Ready again after the restart, then for
    // KubeletAgreement on a kubelet read after it (what it confirmed lands in `verified`).
    let verified = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let svc: Box<dyn actuate::KubeletService + Send> = if dry_run {
        svc
    } else {
        let wait = Duration::from_secs(args.actuation_verify_seconds.max(1));
        let handle = tokio::runtime::Handle::current();
        let ready = NodeReadyCheck::new(svc, handle.clone(), Api::all(client.clone()), node, wait);
        Box::new(AgreementCheck::new(
            Box::new(ready),
            handle,
            feed.clone(),
            generation,
            wait,
            verified.clone(),
        ))
    };
    let (topology, files_c) = (topology.clone(), files.clone());
    let process = args.process.check(files);
    let joined = tokio::task::spawn_blocking(move || {
        let mut svc = svc;
        actuate::apply(
            &actuate::ApplyInput {
                topology: &topology,
                files: &files_c,
                pods: &engine_pods,
                desired: &desired,
                dry_run,
                process: process.as_ref(),
            },
            svc.as_mut(),
        )
    })
    .await;
    let mut report = match joined {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return failed(format!("{e:#}")),
        Err(e) => return failed(format!("the apply task ended abnormally: {e}")),
    };
    if report.applied {
        if let Some(confirmed) = verified.lock().ok().and_then(|mut v| v.take()) {
            report.message = format!("{}; {confirmed}", report.message);
        }
    }
    if let Some(line) = &report.kubelet_command_line {
        tracing::info!(generation, "kubelet command line: {line}");
    }
    let mut evictions = Vec::new();
    if report.reason == "WaitingForEviction" && eviction == EvictionMode::Evict && !dry_run {
        for pod in pods_to_evict(&report.plan) {
            evictions.push(evict(evict_client, &pod).await);
        }
    }
    outcome_of(
        generation,
        files,
        &report,
        eviction,
        &evictions,
        backups_present(files),
    )
}

/// Follows the node's NodeTopology and acts on marks until the event receiver is gone.
pub async fn run(
    client: Client,
    node: String,
    topology: CpuTopology,
    kubelet_state: PathBuf,
    args: ActuationArgs,
    tx: tokio::sync::mpsc::Sender<Event>,
    feed: AgreementFeed,
) {
    let files = KubeletFiles {
        config: args.kubelet_config.clone(),
        config_dir: args.kubelet_config_dir.clone(),
        state: kubelet_state,
    };
    // Evictions use a client that does not retry 429 itself: a refusal by a
    // PodDisruptionBudget is an answer to report, and the re-plan retries later.
    let evict_client = match kube::Config::infer().await {
        Ok(mut c) => {
            c.default_retry = false;
            Client::try_from(c).unwrap_or_else(|_| client.clone())
        }
        Err(_) => client.clone(),
    };
    let api: Api<NodeTopology> = Api::all(client.clone());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={node}"));
    let mut changes = watcher(api.clone(), cfg).boxed();
    let retry = Duration::from_secs(args.actuation_retry_seconds.max(1));
    let mut last: Option<Last> = None;
    let mut earlier = Earlier::default();
    let mut last_attempt: Option<std::time::Instant> = None;
    let mut first = true;
    loop {
        match api.get_opt(&node).await {
            Ok(Some(nt)) => {
                if first {
                    last = last_of(&nt);
                    first = false;
                }
                let step = next_step(
                    args.actuation,
                    nt.metadata.generation,
                    annotation(&nt, APPLY_GENERATION_ANNOTATION),
                    annotation(&nt, EVICTION_ANNOTATION),
                    last.as_ref(),
                );
                // While waiting for evictions, re-plan at most once per retry period (the
                // agent's own status writes wake this loop too).
                let too_soon = matches!(step, Step::Apply { .. })
                    && last.as_ref().is_some_and(|l| {
                        Some(l.0) == nt.metadata.generation && l.1 == reason::WAITING_FOR_EVICTION
                    })
                    && last_attempt.is_some_and(|t| t.elapsed() < retry);
                let outcome = match step {
                    _ if too_soon => None,
                    Step::Idle => None,
                    Step::Report(o) => Some(*o),
                    Step::Apply {
                        generation,
                        eviction,
                    } => {
                        tracing::info!(generation, ?eviction, "applying the spec to the kubelet");
                        last_attempt = Some(std::time::Instant::now());
                        Some(
                            apply_once(
                                &client,
                                &evict_client,
                                &node,
                                &topology,
                                &files,
                                &args,
                                &nt,
                                generation,
                                eviction,
                                &feed,
                            )
                            .await,
                        )
                    }
                };
                if let Some(o) = outcome.map(|o| earlier.record(o)) {
                    tracing::info!(
                        generation = o.generation,
                        applied = o.condition.status,
                        reason = %o.condition.reason,
                        "{}",
                        o.condition.message
                    );
                    last = Some((o.generation, o.condition.reason.clone(), o.condition.status));
                    if tx.send(Event::Actuation(Box::new(o))).await.is_err() {
                        return;
                    }
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("actuation: reading NodeTopology {node}: {e}"),
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
