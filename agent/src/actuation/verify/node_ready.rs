//! Actuation verification, cluster mode: after the kubelet restart the executor's health
//! check also waits until the agent's Node is `Ready=True` with a `lastHeartbeatTime` not
//! older than the restart, i.e. the restarted kubelet has registered its node status again.
//!
//! [`NodeReadyCheck`] decorates the [`KubeletService`] the executor drives: `start` and
//! `restart` record when the new kubelet was started, and `healthy` (called by the executor's
//! verify step, before the journal is removed, so a failure still rolls back) first asks the
//! inner service, then polls the Node (bounded by `--actuation-verify-seconds`). The decision
//! is the pure [`node_ready_since`]. A kubelet posts its node status at once when it starts
//! (its first status update always patches), so a fresh heartbeat follows a good restart
//! within seconds; times are compared at whole seconds, the API's resolution. After a
//! rollback (`recovered`) the same wait says whether the node came back on its old files.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::Api;

use crate::actuation::{AfterStart, KubeletService, StartCheck, Started};

/// Whether `node` shows a kubelet that is Ready and has posted its status at or after
/// `since` (whole seconds). The error says what was seen.
pub fn node_ready_since(node: &Node, since: Timestamp) -> Result<(), String> {
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let Some(ready) = conditions.iter().find(|c| c.type_ == "Ready") else {
        return Err("the Node has no Ready condition".into());
    };
    let seen = format!(
        "Ready={} (reason {:?}, message {:?})",
        ready.status,
        ready.reason.as_deref().unwrap_or_default(),
        ready.message.as_deref().unwrap_or_default()
    );
    if ready.status != "True" {
        return Err(format!("the Node condition is {seen}"));
    }
    let Some(beat) = &ready.last_heartbeat_time else {
        return Err(format!(
            "the Node condition is {seen} but has no lastHeartbeatTime"
        ));
    };
    if beat.0.as_second() < since.as_second() {
        return Err(format!(
            "the Node condition is {seen} but its lastHeartbeatTime {} is older than the kubelet restart at {}",
            beat.0,
            Timestamp::from_second(since.as_second()).unwrap_or(since)
        ));
    }
    Ok(())
}

/// The Node Ready wait, made after the kubelet service's health checks ([`AfterStart`]).
pub struct NodeReady {
    handle: tokio::runtime::Handle,
    nodes: Api<Node>,
    node: String,
    wait: Duration,
    poll: Duration,
    flag: &'static str,
}

/// A [`KubeletService`] whose health check also waits for the Node to be Ready again.
pub type NodeReadyCheck = AfterStart<NodeReady>;

impl AfterStart<NodeReady> {
    /// Wraps `inner`; `handle` runs the API reads (the executor runs on a blocking thread).
    pub fn new(
        inner: Box<dyn KubeletService + Send>,
        handle: tokio::runtime::Handle,
        nodes: Api<Node>,
        node: &str,
        wait: Duration,
    ) -> Self {
        AfterStart::wrap(
            inner,
            NodeReady {
                handle,
                nodes,
                node: node.to_string(),
                wait,
                poll: Duration::from_secs(1),
                flag: "--actuation-verify-seconds",
            },
        )
    }

    /// Names `flag` as the wait's setting in messages (`apply --verify-seconds`).
    pub fn with_flag(mut self, flag: &'static str) -> Self {
        self.check.flag = flag;
        self
    }
}

impl NodeReady {
    fn wait_ready(&self, since: Timestamp) -> Result<(), String> {
        let deadline = Instant::now() + self.wait;
        loop {
            let last = match self.handle.block_on(self.nodes.get(&self.node)) {
                Ok(n) => match node_ready_since(&n, since) {
                    Ok(()) => return Ok(()),
                    Err(why) => why,
                },
                Err(e) => format!("reading the Node failed: {e}"),
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "Node {} is not Ready again after waiting {}s ({}) since the kubelet restart: {last}",
                    self.node,
                    self.wait.as_secs(),
                    self.flag
                ));
            }
            std::thread::sleep(
                self.poll
                    .min(deadline.saturating_duration_since(Instant::now())),
            );
        }
    }
}

impl StartCheck for NodeReady {
    fn after_healthy(&mut self, started: Started) -> Result<(), String> {
        self.wait_ready(started.wall)
    }
    fn after_recovered(&mut self, started: Started) -> Result<(), String> {
        self.wait_ready(started.wall)
    }
}

#[cfg(test)]
mod tests;
