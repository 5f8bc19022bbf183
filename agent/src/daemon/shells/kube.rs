//! Cluster mode: the core fed by the API server. Watches the node's Pods (field selector
//! `spec.nodeName`) and its NodeTopology, applies the status with server-side apply (field
//! manager `nodetopo-agent`), debounced, from a writer task that retries with backoff and
//! always sends the latest status, so a slow API server never blocks admission.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ObjectReference, Pod as K8sPod};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use nodetopo_crds::conditions::reason;
use nodetopo_crds::nrt::NodeResourceTopology;
use nodetopo_crds::{NodeTopology, NodeTopologyStatus, AGENT_FIELD_MANAGER};
use nodetopo_engine::CpuTopology;

use crate::actuation::agreement::{AgreementFeed, AgreementSeen};
use crate::actuation::cluster::ActuationArgs;
use crate::daemon::checkpoint;
use crate::daemon::core::{Core, Event};
use crate::daemon::inputs::kubelet_config;
pub use crate::daemon::inputs::kubelet_config::KubeletConfigPaths;
use crate::daemon::inputs::pods::PodInfo;
use crate::daemon::inputs::validate;
use crate::daemon::publish::drift_events::DriftEvents;
use crate::daemon::publish::explain_events::{self, EventLimiter, Verdict};
use crate::daemon::publish::metrics::{self, Metrics};
use crate::daemon::publish::nrt::NrtProblem;
use crate::daemon::shells::cycle::{now, Cycle};
use crate::daemon::shells::restore::load_checkpoint;
use crate::daemon::shells::Node;
use nodetopo_runtime::shutdown::Shutdown;

/// A pod of the node's pod list as actuation's executor plans with it: `None` when its
/// CPUs are released (Succeeded, Failed).
fn running_pod(p: &K8sPod) -> Result<Option<nodetopo_engine::Pod>, String> {
    match PodInfo::from_k8s(p) {
        Ok(info) if !info.terminal => Ok(Some(info.pod)),
        Ok(_) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The watcher configuration of the node's pods.
pub fn pod_watch_config(node: &str) -> watcher::Config {
    watcher::Config::default().fields(&format!("spec.nodeName={node}"))
}

/// Turns watcher events into core events: `Init`..`InitDone` become one `PodsSynced`.
#[derive(Debug, Default)]
pub struct PodEvents {
    buffer: Option<Vec<PodInfo>>,
    problems: Vec<String>,
}

impl PodEvents {
    /// Maps one watcher event (zero or more core events come out).
    pub fn map(&mut self, ev: watcher::Event<K8sPod>) -> Vec<Event> {
        match ev {
            watcher::Event::Init => {
                self.buffer = Some(Vec::new());
                self.problems.clear();
                Vec::new()
            }
            watcher::Event::InitApply(p) => {
                match PodInfo::from_k8s(&p) {
                    Ok(info) => self.buffer.get_or_insert_with(Vec::new).push(info),
                    Err(e) => self.problems.push(e.to_string()),
                }
                Vec::new()
            }
            watcher::Event::InitDone => vec![
                Event::PodsSynced(self.buffer.take().unwrap_or_default()),
                Event::PodProblems(self.problems.clone()),
            ],
            watcher::Event::Apply(p) => match PodInfo::from_k8s(&p) {
                Ok(info) => vec![Event::PodUpsert(Box::new(info))],
                Err(e) => {
                    self.problems.push(e.to_string());
                    vec![Event::PodProblems(self.problems.clone())]
                }
            },
            watcher::Event::Delete(p) => {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                vec![Event::PodDelete(uid)]
            }
        }
    }
}

/// The core events of the node's pods.
pub fn pod_events(client: Client, node: &str) -> impl Stream<Item = Event> + Send {
    let mut mapper = PodEvents::default();
    watcher(Api::<K8sPod>::all(client), pod_watch_config(node))
        .default_backoff()
        .filter_map(|r| async move {
            match r {
                Ok(ev) => Some(ev),
                Err(e) => {
                    tracing::warn!("pod watch: {e}");
                    None
                }
            }
        })
        .flat_map(move |ev| futures::stream::iter(mapper.map(ev)))
}

/// The core events of the node's NodeTopology (its spec and generation).
pub fn spec_events(client: Client, node: &str) -> impl Stream<Item = Event> + Send {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={node}"));
    watcher(Api::<NodeTopology>::all(client), cfg)
        .default_backoff()
        .filter_map(|r| async move {
            match r {
                Ok(watcher::Event::Apply(nt) | watcher::Event::InitApply(nt)) => {
                    Some(Event::Spec(Some((nt.spec, nt.metadata.generation))))
                }
                Ok(watcher::Event::Delete(_)) => Some(Event::Spec(None)),
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!("NodeTopology watch: {e}");
                    None
                }
            }
        })
}

/// The server-side-apply body of a status.
pub fn status_patch(status: &NodeTopologyStatus) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "nodetopo.io/v1alpha1",
        "kind": "NodeTopology",
        "status": status,
    })
}

/// Applies the status (field manager `nodetopo-agent`, forced: the agent owns status).
pub async fn apply_status(
    api: &Api<NodeTopology>,
    node: &str,
    status: &NodeTopologyStatus,
) -> Result<(), kube::Error> {
    api.patch_status(
        node,
        &PatchParams::apply(AGENT_FIELD_MANAGER).force(),
        &Patch::Apply(status_patch(status)),
    )
    .await
    .map(|_| ())
}

/// Writes the latest status, retrying with backoff (100 ms doubling to 30 s); a newer status
/// replaces the one being retried.
async fn status_writer(
    api: Api<NodeTopology>,
    node: String,
    mut rx: tokio::sync::watch::Receiver<Option<NodeTopologyStatus>>,
    done: tokio::sync::watch::Sender<Option<NodeTopologyStatus>>,
) {
    loop {
        let Some(status) = rx.borrow_and_update().clone() else {
            if rx.changed().await.is_err() {
                return;
            }
            continue;
        };
        let mut delay = Duration::from_millis(100);
        loop {
            match apply_status(&api, &node, &status).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(
                        "status apply for NodeTopology {node} failed, retrying in {delay:?}: {e}"
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        r = rx.changed() => if r.is_err() { return; } else { break; },
                    }
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
        let _ = done.send(Some(status));
        if !rx.has_changed().unwrap_or(false) && rx.changed().await.is_err() {
            return;
        }
    }
}

/// How long one PodResources call may take: a stuck kubelet cannot stall admission long.
const PODRESOURCES_TIMEOUT: Duration = Duration::from_millis(500);

/// Waits until the operator created this node's NodeTopology (until then there is nothing
/// to report on), retrying with a backoff up to 30 s.
async fn wait_for_node_topology(api: &Api<NodeTopology>, node: &str) {
    let mut delay = Duration::from_secs(1);
    loop {
        match api.get_opt(node).await {
            Ok(Some(_)) => return,
            Ok(None) => tracing::info!(
                "waiting for NodeTopology {node}: the operator has not created it yet"
            ),
            Err(e) => tracing::warn!("reading NodeTopology {node}: {e}"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Publishes a Warning event on the agent's own Pod for a checkpoint that could not be
/// restored. Events name the agent's own Pod, so they live in the agent's namespace (the
/// chart grants events only there, through a Role); without POD_NAME/POD_NAMESPACE the
/// warning is only logged.
async fn report_checkpoint_problem(client: &Client, reason: &str, note: &str) {
    publish_warning(client, reason, "RestoreCheckpoint", note).await;
}

/// [`publish_warning`] from a task of its own, so the cycle does not wait for the API.
fn report_warning(client: &Client, reason: &str, action: &str, note: &str) {
    let (client, reason, action, note) = (
        client.clone(),
        reason.to_string(),
        action.to_string(),
        note.to_string(),
    );
    tokio::spawn(async move { publish_warning(&client, &reason, &action, &note).await });
}

/// A Warning event with `reason` and `action` on the agent's own Pod (see
/// [`report_checkpoint_problem`] for where it lives).
async fn publish_warning(client: &Client, reason: &str, action: &str, note: &str) {
    let own_pod = match (std::env::var("POD_NAMESPACE"), std::env::var("POD_NAME")) {
        (Ok(namespace), Ok(name)) if !namespace.is_empty() && !name.is_empty() => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(namespace),
            name: Some(name),
            ..Default::default()
        },
        _ => return,
    };
    let recorder = Recorder::new(client.clone(), Reporter::from("nodetopo-agent"));
    let ev = KubeEvent {
        type_: EventType::Warning,
        reason: reason.to_string(),
        note: Some(note.to_string()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &own_pod).await {
        tracing::warn!("publishing event {reason}: {e}");
    }
}

/// Logs each new explanation of a kubelet admission failure and publishes it as a Warning
/// Event on its Pod (reason `AdmissionExplained`), once per pod and within the node's rate
/// ([`EventLimiter`]); each Event from a task of its own, so the cycle does not wait.
fn publish_explanations(
    client: &Client,
    limiter: &mut EventLimiter,
    explained: Vec<nodetopo_engine::report::RejectionReport>,
) {
    for r in explained {
        let (Some(pod), Some(note)) = (explain_events::pod_reference(&r), explain_events::note(&r))
        else {
            continue;
        };
        tracing::warn!(pod = %r.pod, reason = %r.reason, "admission failure explained: {note}");
        match limiter.allow(&r.pod_uid, std::time::Instant::now()) {
            Verdict::Send => {
                let client = client.clone();
                tokio::spawn(async move {
                    let recorder = Recorder::new(client, Reporter::from("nodetopo-agent"));
                    let ev = KubeEvent {
                        type_: EventType::Warning,
                        reason: explain_events::REASON.into(),
                        note: Some(note),
                        action: explain_events::ACTION.into(),
                        secondary: None,
                    };
                    if let Err(e) = recorder.publish(&ev, &pod).await {
                        tracing::warn!(
                            "publishing event {} on pod {}/{}: {e}",
                            explain_events::REASON,
                            pod.namespace.unwrap_or_default(),
                            pod.name.unwrap_or_default()
                        );
                    }
                });
            }
            Verdict::Duplicate => {}
            Verdict::RateLimited => tracing::info!(
                pod = %r.pod,
                "no {} Event: over {} per {:?} on this node (the explanation is in the NodeTopology status)",
                explain_events::REASON,
                explain_events::BURST,
                explain_events::WINDOW
            ),
        }
    }
}

/// Cluster mode's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node's name (its NodeTopology, the field selector of its pods).
    pub node: String,
    /// Also publish a NodeResourceTopology.
    pub nrt: bool,
    /// The kubelet's PodResources socket (empty: not read).
    pub pod_resources_socket: PathBuf,
    /// The kubelet's configuration files, read for the topology manager configuration the
    /// NodeResourceTopology publishes (`None`: not read).
    pub kubelet_config: Option<KubeletConfigPaths>,
    /// Actuation's settings.
    pub actuation: ActuationArgs,
    /// Where the cpuset audit reads the containers' cgroups (`None`: no audit).
    pub cgroups: Option<nodetopo_kubelet::cgroup::CgroupLayout>,
}

/// Where the shell reads the kubelet: its CPU manager checkpoint, PodResources socket and
/// (optionally) configuration files.
struct KubeletSources {
    state: PathBuf,
    socket: PathBuf,
    config: Option<KubeletConfigPaths>,
    cgroups: Option<nodetopo_kubelet::cgroup::CgroupLayout>,
}

/// Cluster mode until SIGTERM.
pub async fn run(this: Node, config: Config) -> anyhow::Result<std::process::ExitCode> {
    let Node {
        topology,
        state_dir,
        kubelet_state,
        admin_addr,
    } = this;
    let Config {
        node,
        nrt,
        pod_resources_socket,
        kubelet_config,
        actuation,
        cgroups,
    } = config;
    let client = Client::try_default()
        .await
        .context("connecting to the API server")?;
    let api: Api<NodeTopology> = Api::all(client.clone());
    let metrics = Arc::new(Metrics::new());
    if !admin_addr.is_empty() {
        metrics::serve(&admin_addr, metrics.clone()).await?;
    }
    wait_for_node_topology(&api, &node).await;
    std::fs::create_dir_all(&state_dir)
        .with_context(|| format!("creating state directory {}", state_dir.display()))?;
    let cp_path = state_dir.join(checkpoint::FILE_NAME);
    let (restored, problem) = load_checkpoint(&cp_path, &topology);
    if let Some((reason, note)) = &problem {
        report_checkpoint_problem(&client, reason, note).await;
    }
    let mut core = Core::new(topology.clone(), restored, problem);
    let (tx, rx) = tokio::sync::watch::channel(None);
    let (done_tx, mut done_rx) = tokio::sync::watch::channel(None);
    tokio::spawn(status_writer(api.clone(), node.clone(), rx, done_tx));
    // NodeResourceTopology (--nrt): its own writer, fed the object of each published cycle.
    let nrt_tx = nrt.then(|| spawn_nrt_writer(&client, &node));
    // Actuation verdicts come back as core events (the task runs with actuation off too, to
    // answer a rollout mark with ActuationDisabled).
    let (act_tx, act_rx) = tokio::sync::mpsc::channel(4);
    if actuation.actuation {
        // Fail at start-up, not at the first mark, when the restart hook is incomplete.
        actuation.service()?;
    }
    // The verify step of an apply waits for KubeletAgreement on a kubelet read after the
    // restart: each cycle publishes what was seen, and the step can ask for a read now.
    let (seen_tx, seen_rx) = tokio::sync::watch::channel(None);
    let read_now = Arc::new(tokio::sync::Notify::new());
    tokio::spawn(crate::actuation::cluster::run(
        client.clone(),
        node.clone(),
        topology.clone(),
        kubelet_state.clone(),
        actuation,
        act_tx,
        AgreementFeed {
            seen: seen_rx,
            read_now: read_now.clone(),
        },
        running_pod,
    ));
    let actuation_events = futures::stream::unfold(act_rx, |mut rx| async move {
        rx.recv().await.map(|o| (Event::Actuation(Box::new(o)), rx))
    });
    let mut events = futures::stream::select(
        futures::stream::select(
            pod_events(client.clone(), &node).boxed(),
            spec_events(client.clone(), &node).boxed(),
        ),
        actuation_events.boxed(),
    );
    let shutdown = Shutdown::on_signals();
    let mut kubelet_tick = tokio::time::interval(Duration::from_secs(10));
    let mut cycle = Cycle::new(cp_path);
    let kubelet = KubeletSources {
        state: kubelet_state,
        socket: pod_resources_socket,
        config: kubelet_config,
        cgroups,
    };
    let mut drift_events = DriftEvents::new(crate::daemon::publish::drift_events::MIN_INTERVAL);
    let mut last_read: Option<std::time::Instant> = None;
    let mut explain_limiter = EventLimiter::default();
    loop {
        let (stop, kubelet_read) = next_inputs(
            &mut events,
            (&mut kubelet_tick, &read_now, &mut last_read),
            &shutdown,
            &mut core,
            &kubelet,
            &topology,
        )
        .await;
        if stop {
            metrics.stopping();
        }
        let span = cycle.span();
        let started = std::time::Instant::now();
        let mut status = span.in_scope(|| cycle.run(&mut core, &metrics, &now()));
        span.in_scope(|| {
            publish_explanations(&client, &mut explain_limiter, core.take_new_explanations())
        });
        if let Some(nrt_tx) = &nrt_tx {
            let _in_cycle = span.enter();
            let this_cycle = status.as_ref();
            status = follow_with_nrt(
                nrt_tx,
                (&client, &node),
                this_cycle,
                (&mut core, &mut cycle),
                &metrics,
            )
            .or(status);
        }
        if let Some(status) = status {
            let _ = tx.send(Some(status.clone()));
            cycle.published(status);
        }
        // What the verify step of an apply waits for: the agreement of each kubelet read (a
        // cycle without one leaves it as it was, so pod events cost nothing here).
        if let Some(read_at) = last_read.filter(|_| kubelet_read) {
            publish_agreement_seen(&seen_tx, &core, read_at);
        }
        report_drift(&client, &core, &mut drift_events);
        metrics.observe(&core, started.elapsed());
        if stop {
            flush(&mut done_rx, &cycle).await;
            tracing::info!("stopping: state and status flushed");
            return Ok(std::process::ExitCode::SUCCESS);
        }
    }
}

/// The NodeResourceTopology follows every cycle (pods' phases change it without changing
/// status, devices are not in status); its writer sends it only when it differs from the
/// last one written. It is built from this cycle's status, or the last one published when
/// this cycle has none. When whether it could be built changes, the condition changes too:
/// the cycle runs again so this cycle's status carries it (returned; `None` when nothing
/// changed).
fn follow_with_nrt(
    nrt_tx: &tokio::sync::watch::Sender<Option<NodeResourceTopology>>,
    (client, node): (&Client, &str),
    this_cycle: Option<&NodeTopologyStatus>,
    (core, cycle): (&mut Core, &mut Cycle),
    metrics: &Metrics,
) -> Option<NodeTopologyStatus> {
    let current = this_cycle.or(cycle.last_status())?;
    let built = publish_nrt(nrt_tx, core, current, node)?;
    if core.nrt_built() == Some(&built) {
        return None;
    }
    if let Err(why) = &built {
        report_warning(
            client,
            reason::BUILD_FAILED,
            "PublishNodeResourceTopology",
            why,
        );
    }
    core.apply(Event::NrtBuilt(built));
    cycle.run(core, metrics, &now())
}

/// What the verify step of an apply waits for: the agreement of a kubelet read taken at
/// `read_at` (sent only when it differs from the last one sent).
fn publish_agreement_seen(
    seen_tx: &tokio::sync::watch::Sender<Option<AgreementSeen>>,
    core: &Core,
    read_at: std::time::Instant,
) {
    let (condition, differences) = core.kubelet_agreement();
    let seen = AgreementSeen {
        read_at,
        generation: core.generation(),
        condition,
        differences,
    };
    seen_tx.send_if_modified(|old| {
        let changed = old.as_ref() != Some(&seen);
        *old = Some(seen);
        changed
    });
}

/// A `CpusetDrift` Warning event (and a log line) when the audit found drift and the last
/// one is old enough.
fn report_drift(client: &Client, core: &Core, drift_events: &mut DriftEvents) {
    if let Some(note) = core
        .audit_report()
        .and_then(|r| drift_events.due(r, std::time::Instant::now()))
    {
        tracing::warn!("{note}");
        report_warning(client, reason::DRIFT, "AuditCpusets", &note);
    }
}

/// The kubelet reads: the 10 s tick, a read asked for now (actuation's verify step), and
/// when the last read began.
type KubeletReads<'a> = (
    &'a mut tokio::time::Interval,
    &'a tokio::sync::Notify,
    &'a mut Option<std::time::Instant>,
);

/// Waits for the next input of a cycle (a core event, a kubelet read on the 10 s tick or
/// asked for, or a shutdown request), applies it to the core, then takes whatever else
/// arrives within 100 ms into the same cycle (debounce). Returns whether to stop after this
/// cycle (shutdown requested or the event streams ended) and whether the kubelet was read in
/// it.
async fn next_inputs<S>(
    events: &mut S,
    (kubelet_tick, read_now, last_read): KubeletReads<'_>,
    shutdown: &Shutdown,
    core: &mut Core,
    kubelet: &KubeletSources,
    topology: &CpuTopology,
) -> (bool, bool)
where
    S: Stream<Item = Event> + Unpin,
{
    let mut stop = false;
    let mut kubelet_read = false;
    tokio::select! {
        ev = events.next() => match ev {
            Some(ev) => core.apply(ev),
            None => stop = true,
        },
        _ = kubelet_tick.tick() => {
            read_kubelet(core, kubelet, topology, last_read).await;
            kubelet_read = true;
        }
        _ = read_now.notified() => {
            read_kubelet(core, kubelet, topology, last_read).await;
            kubelet_read = true;
        }
        _ = shutdown.requested() => stop = true,
    }
    // Debounce: take whatever else arrives within 100 ms into the same cycle.
    let window = tokio::time::sleep(Duration::from_millis(100));
    tokio::pin!(window);
    while !stop {
        tokio::select! {
            ev = events.next() => match ev { Some(ev) => core.apply(ev), None => stop = true },
            _ = &mut window => break,
        }
    }
    (stop, kubelet_read)
}

/// Reads the kubelet's CPU manager checkpoint, its PodResources answer and (when configured)
/// its configuration files into the core, noting when the read began.
async fn read_kubelet(
    core: &mut Core,
    kubelet: &KubeletSources,
    topology: &CpuTopology,
    last_read: &mut Option<std::time::Instant>,
) {
    *last_read = Some(std::time::Instant::now());
    core.apply(Event::Kubelet(validate::read_kubelet_state(
        &kubelet.state,
        topology,
    )));
    core.apply(Event::KubeletMemory(validate::read_memory_state(
        &kubelet.state,
    )));
    core.apply(Event::PodResources(
        crate::daemon::inputs::podresources::read_if_present(&kubelet.socket, PODRESOURCES_TIMEOUT)
            .await,
    ));
    if let Some(paths) = &kubelet.config {
        core.apply(Event::KubeletConfig(kubelet_config::read(paths)));
    }
    // The cgroups after the kubelet's view, so the audit judges them against what was just
    // read. Bounded reads of an in-memory file system: done inline.
    if let Some(layout) = &kubelet.cgroups {
        let (pods, _) = core.audit_pods();
        let observed = nodetopo_kubelet::audit::observe(layout, &pods);
        core.apply(Event::Cgroups(Box::new(observed)));
    }
}

/// Starts the NodeResourceTopology writer task for `node`; returns the channel that feeds
/// it the latest object.
fn spawn_nrt_writer(
    client: &Client,
    node: &str,
) -> tokio::sync::watch::Sender<Option<NodeResourceTopology>> {
    let (nrt_tx, nrt_rx) = tokio::sync::watch::channel(None);
    tokio::spawn(crate::daemon::publish::nrt::writer(
        Api::all(client.clone()),
        Api::all(client.clone()),
        node.to_string(),
        nrt_rx,
    ));
    nrt_tx
}

/// Hands the NodeResourceTopology object for `status` to its writer. Returns whether it
/// could be built (`None` while there is nothing to build yet, e.g. no spec).
fn publish_nrt(
    nrt_tx: &tokio::sync::watch::Sender<Option<NodeResourceTopology>>,
    core: &Core,
    status: &NodeTopologyStatus,
    node: &str,
) -> Option<Result<(), String>> {
    match crate::daemon::publish::nrt::desired(core, status, node) {
        Ok(obj) => {
            let _ = nrt_tx.send(Some(obj));
            Some(Ok(()))
        }
        Err(NrtProblem::Waiting(why)) => {
            tracing::debug!("NodeResourceTopology {node} not written yet: {why}");
            None
        }
        Err(NrtProblem::Build(why)) => {
            tracing::warn!("NodeResourceTopology {node} cannot be built, not updated: {why}");
            Some(Err(why))
        }
    }
}

/// Flush at stop: gives the status writer up to 5 s to land the last published status.
async fn flush(
    done_rx: &mut tokio::sync::watch::Receiver<Option<NodeTopologyStatus>>,
    cycle: &Cycle,
) {
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while done_rx.borrow().as_ref() != cycle.last_status() {
            if done_rx.changed().await.is_err() {
                break;
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests;
