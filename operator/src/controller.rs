//! The kube layer: watches, the two reconcilers, error backoff.
//!
//! - Node controller: one reconcile per Node. Triggers: the Node itself (labels), a spec change
//!   or deletion of its owned NodeTopology, and a spec change or deletion of any policy
//!   (mapped to every node); status-only writes do not trigger it ([`crate::triggers`]).
//!   Applies the node's desired NodeTopology spec when it differs (no-ops are skipped).
//! - Policy controller: one reconcile per NodeResourcePolicy. Triggers: the policy, and any
//!   Node or NodeTopology change (mapped to every policy, since a node can move between
//!   policies). Applies the policy status when it differs and publishes events on flips.
//!
//! Both read shared reflector stores, and run the pure functions of [`crate::decide`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use nodetopo_crds::{NodeResourcePolicy, NodeTopology};
use nodetopo_runtime::admin::Readiness;
use tracing::{info, instrument, warn};

use crate::apply;
use crate::decide::{self, compile, desire_node, needs_apply};
use crate::error::Error;
use crate::metrics::{ErrorLabels, Metrics};
use crate::triggers::spec_changes;

/// Everything a reconcile needs.
pub struct Context {
    /// NodeTopology API.
    pub ntopo_api: Api<NodeTopology>,
    /// NodeResourcePolicy API.
    pub policy_api: Api<NodeResourcePolicy>,
    /// All policies.
    pub policies: Store<NodeResourcePolicy>,
    /// All nodes.
    pub nodes: Store<Node>,
    /// All NodeTopologies.
    pub ntopos: Store<NodeTopology>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Event recorder.
    pub recorder: Recorder,
    /// The clock (an input, so tests fix it).
    pub now: fn() -> Time,
    /// Consecutive failures per object key, for backoff; reset on success.
    pub failures: Mutex<HashMap<String, u32>>,
}

/// The real clock.
pub fn system_now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl Context {
    fn succeeded(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }

    /// Backoff for the n-th consecutive failure of an object ([`retry_delay`]).
    fn failed(&self, key: &str, transient: bool) -> Duration {
        let n = match self.failures.lock() {
            Ok(mut f) => {
                let n = f.entry(key.to_string()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        retry_delay(transient, n)
    }
}

/// Backoff after `n` consecutive failures (n >= 1): 1s, 2s, 4s ... capped at 5 minutes.
pub fn backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.saturating_sub(1).min(9)).min(Duration::from_secs(300))
}

/// The retry after the `n`-th consecutive failure: transient errors (conflicts, transport,
/// server errors) back off exponentially from 1s ([`backoff`]); an invalid or forbidden
/// object waits [`INVALID_RETRY`] from the first failure, since only an edit (which triggers
/// a reconcile anyway) or a changed permission can fix it.
pub fn retry_delay(transient: bool, n: u32) -> Duration {
    if transient {
        backoff(n)
    } else {
        INVALID_RETRY
    }
}

/// How long an object that failed for a non-transient cause waits before a retry.
pub const INVALID_RETRY: Duration = Duration::from_secs(300);

/// Reconciles one node: apply its NodeTopology spec unless it is already as desired.
#[instrument(skip_all, fields(node = %node.name_any()))]
pub async fn reconcile_node(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.start("node");
    // Deciding on a partly listed set of policies would write a wrong spec first.
    stores_ready(&ctx).await?;
    let policies = ctx.policies.state();
    let compiled = compile(&policies);
    let desired = desire_node(&compiled, &node);
    if desired.node_uid.is_empty() {
        return Err(Error::Missing {
            object: format!("node/{}", desired.node),
            field: "metadata.uid",
        });
    }
    let existing = ctx.ntopos.get(&ObjectRef::new(&desired.node));
    if needs_apply(existing.as_deref(), &desired) {
        apply::apply_node_topology(&ctx.ntopo_api, &desired).await?;
        ctx.metrics
            .writes
            .get_or_create(&crate::metrics::ControllerLabels { controller: "node" })
            .inc();
        info!(
            policy = desired
                .spec
                .policy_ref
                .as_ref()
                .map_or("none", |p| p.name.as_str()),
            "applied NodeTopology spec"
        );
    }
    ctx.succeeded(&format!("node/{}", desired.node));
    Ok(Action::await_change())
}

/// Reconciles one policy: roll its status up and apply it unless unchanged.
#[instrument(skip_all, fields(policy = %policy.name_any()))]
pub async fn reconcile_policy(
    policy: Arc<NodeResourcePolicy>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let _timer = ctx.metrics.start("policy");
    let name = policy.name_any();
    // The triggering object is at least as fresh as the store's copy.
    let mut policies = ctx.policies.state();
    policies.retain(|p| p.name_any() != name);
    policies.push(policy.clone());
    let nodes = ctx.nodes.state();
    let ntopos = ctx.ntopos.state();
    let now = (ctx.now)();
    let decision = decide::decide(&policies, &nodes, &ntopos, &now);
    let Some(status) = decision.statuses.get(&name) else {
        return Ok(Action::await_change());
    };
    // Rollout (spec.rollout.mode Apply): mark the next batch before the status says so.
    for mark in decision.marks.iter().filter(|m| m.policy == name) {
        crate::rollout_controller::write_mark(&ctx.ntopo_api, mark).await?;
        info!(node = %mark.node, generation = mark.generation, "marked NodeTopology for apply");
    }
    ctx.metrics.set_policy_nodes(
        &name,
        [
            status.matched_nodes,
            status.governed_nodes,
            status.applied_nodes,
            status.invalid_nodes,
            status.overridden_nodes,
        ],
    );
    ctx.metrics
        .retain_policies(|p| p == name || policies.iter().any(|q| q.name_any() == p));
    if decide::status_changed(policy.status.as_ref(), status) {
        apply::apply_policy_status(&ctx.policy_api, &name, status).await?;
        ctx.metrics
            .writes
            .get_or_create(&crate::metrics::ControllerLabels {
                controller: "policy",
            })
            .inc();
        info!(
            matched = status.matched_nodes,
            applied = status.applied_nodes,
            invalid = status.invalid_nodes,
            "applied policy status"
        );
        for ev in decide::events_for(policy.status.as_ref(), status) {
            let event = Event {
                type_: if ev.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: ev.reason,
                note: Some(ev.note),
                action: "Reconcile".into(),
                secondary: None,
            };
            // An event that cannot be recorded is not worth a retry of the whole reconcile.
            if let Err(e) = ctx.recorder.publish(&event, &policy.object_ref(&())).await {
                warn!(error = %e, "publishing event failed");
            }
        }
    }
    ctx.succeeded(&format!("policy/{name}"));
    Ok(match decision.wake_at.get(&name) {
        // A progress deadline passes only strictly after it: look one second later.
        Some(at) => Action::requeue(crate::decide::rollout::wake_delay(now.0, *at)),
        None => Action::await_change(),
    })
}

/// Waits until the policy and NodeTopology stores hold their first full list.
async fn stores_ready(ctx: &Context) -> Result<(), Error> {
    let stopped = |store: &'static str| Error::StoreClosed { store };
    ctx.policies
        .wait_until_ready()
        .await
        .map_err(|_| stopped("policy"))?;
    ctx.ntopos
        .wait_until_ready()
        .await
        .map_err(|_| stopped("NodeTopology"))
}

fn error_policy<K: Resource>(
    controller: &'static str,
) -> impl Fn(Arc<K>, &Error, Arc<Context>) -> Action {
    move |obj, err, ctx| {
        let key = format!(
            "{controller}/{}",
            obj.meta().name.as_deref().unwrap_or_default()
        );
        ctx.metrics
            .errors
            .get_or_create(&ErrorLabels {
                controller,
                category: err.category(),
            })
            .inc();
        let delay = ctx.failed(&key, err.is_transient());
        warn!(object = %key, error = %err, retry_in = ?delay, "reconcile failed");
        Action::requeue(delay)
    }
}

/// Every object of a store, as reconcile requests (a change that concerns them all).
fn every<K>(store: &Store<K>) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

/// Marks the replica ready once the policy, node and NodeTopology stores are listed.
fn ready_when_synced(ctx: &Context, ready: Readiness) {
    let (p, n, t) = (ctx.policies.clone(), ctx.nodes.clone(), ctx.ntopos.clone());
    tokio::spawn(async move {
        let synced = p.wait_until_ready().await.is_ok()
            && n.wait_until_ready().await.is_ok()
            && t.wait_until_ready().await.is_ok();
        if synced {
            info!("watches synced");
            ready.set(true);
        }
    });
}

/// Runs both controllers until the futures made by `shutdown` resolve (each controller
/// drains its in-flight reconciles first); sets `ready` once every store synced.
pub async fn run<S, F>(
    client: Client,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    ready: Readiness,
    shutdown: S,
) where
    S: Fn() -> F,
    F: Future<Output = ()> + Send + Sync + 'static,
{
    let policy_api: Api<NodeResourcePolicy> = Api::all(client.clone());
    let node_api: Api<Node> = Api::all(client.clone());
    let ntopo_api: Api<NodeTopology> = Api::all(client.clone());
    let wc = watcher::Config::default();

    // The policy and NodeTopology stores are fed by the node controller's own trigger
    // streams: an object reaches its store before the reconcile it triggers runs, so the
    // reconcile never compares with a copy older than its trigger.
    let (policies, policy_writer) = reflector::store();
    let forget = metrics.clone();
    let policy_changes = spec_changes(
        reflector::reflector(policy_writer, watcher(policy_api.clone(), wc.clone()))
            .default_backoff()
            .inspect(move |ev| {
                if let Ok(watcher::Event::Delete(p)) = ev {
                    forget.forget_policy(&p.name_any());
                }
            }),
    );
    let (ntopos, ntopo_writer) = reflector::store();
    let ntopo_changes = spec_changes(
        reflector::reflector(ntopo_writer, watcher(ntopo_api.clone(), wc.clone()))
            .default_backoff(),
    );

    let config = ControllerConfig::default().debounce(Duration::from_millis(500));
    let node_ctrl = Controller::new(node_api.clone(), wc.clone()).with_config(config.clone());
    let nodes = node_ctrl.store();

    let ctx = Arc::new(Context {
        ntopo_api: ntopo_api.clone(),
        policy_api: policy_api.clone(),
        policies: policies.clone(),
        nodes: nodes.clone(),
        ntopos: ntopos.clone(),
        metrics,
        recorder,
        now: system_now,
        failures: Mutex::new(HashMap::new()),
    });

    ready_when_synced(&ctx, ready);

    let all_nodes = move |_: NodeResourcePolicy| every(&nodes);
    let node_run = node_ctrl
        .owns_stream(ntopo_changes)
        .watches_stream(policy_changes, all_nodes)
        .graceful_shutdown_on(shutdown())
        .run(reconcile_node, error_policy::<Node>("node"), ctx.clone())
        .for_each(|_| futures::future::ready(()));

    let policy_ctrl = Controller::new(policy_api, wc.clone())
        .with_config(ControllerConfig::default().debounce(Duration::from_secs(1)));
    let on_ntopo = policies.clone();
    let policy_run = policy_ctrl
        .watches(node_api, wc.clone(), move |_: Node| every(&policies))
        .watches(ntopo_api, wc, move |_: NodeTopology| every(&on_ntopo))
        .graceful_shutdown_on(shutdown())
        .run(
            reconcile_policy,
            error_policy::<NodeResourcePolicy>("policy"),
            ctx,
        )
        .for_each(|_| futures::future::ready(()));

    futures::join!(node_run, policy_run);
}

#[cfg(test)]
mod tests;
