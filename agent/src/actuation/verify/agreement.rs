//! Actuation verification, cluster mode: after the kubelet restart the executor's health
//! check also waits until a kubelet read taken after the restart gives `KubeletAgreement`
//! for the generation being applied, so an `Applied` True verdict states what the restarted
//! kubelet did rather than what it did before.
//!
//! The agent's main loop publishes, after each cycle that read the kubelet, what it saw
//! ([`AgreementSeen`]: when the kubelet was read, the spec generation in effect, the
//! `KubeletAgreement` condition and its differences) on a watch channel, and reads the
//! kubelet at once when asked (a [`tokio::sync::Notify`]), so the check does not wait for
//! the 10 s read. [`AgreementCheck`] decorates the [`KubeletService`] the executor drives,
//! like [`crate::actuation::node_ready::NodeReadyCheck`]: `start` and `restart` record when the new
//! kubelet was started, `healthy` asks the inner service first, then polls the published
//! view until the pure [`agreement_after_restart`] accepts it or `--actuation-verify-seconds`
//! since the restart have passed; a failure rolls the apply back.
//!
//! Accepted: `Agree`; or `Disagree` (or `KubeletMemoryDisagree`: pinned memory differs,
//! the CPUs agree) whose differences were all present before the apply
//! started (pods placed before the change keep their CPUs on both sides, and the change
//! planner lists them as non-conforming; the restart added no difference). Anything else
//! after the restart (no kubelet state, an unreadable one, a checksum mismatch, the kubelet
//! running policy `none` while nodetopo pins, a new difference) is refused, naming it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nodetopo_crds::conditions::{reason, ConditionSpec};
use tokio::sync::{watch, Notify};

use crate::actuation::{AfterStart, KubeletService, StartCheck, Started};

/// What the agent last saw of the kubelet, as published after a cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgreementSeen {
    /// When the kubelet read it reflects began.
    pub read_at: Instant,
    /// The spec generation in effect in the core.
    pub generation: Option<i64>,
    /// The `KubeletAgreement` condition.
    pub condition: ConditionSpec,
    /// The containers that differ (empty unless `Disagree`).
    pub differences: Vec<String>,
}

/// Whether `seen` confirms, after a kubelet restart at `since`, that the kubelet agrees
/// with nodetopo under `generation`; `before` is what was seen when the apply started.
/// `Ok` says what was confirmed, `Err` what is still missing.
pub fn agreement_after_restart(
    before: Option<&AgreementSeen>,
    seen: Option<&AgreementSeen>,
    generation: i64,
    since: Instant,
) -> Result<String, String> {
    let Some(seen) = seen else {
        return Err("the agent has not read the kubelet yet".into());
    };
    if seen.read_at < since {
        return Err("no kubelet read since the restart yet".into());
    }
    if seen.generation != Some(generation) {
        return Err(format!(
            "the agent has not taken in the spec of generation {generation} yet (in effect: {})",
            seen.generation
                .map_or_else(|| "none".to_string(), |g| g.to_string())
        ));
    }
    let c = &seen.condition;
    if c.reason == reason::AGREE && c.status {
        return Ok(format!(
            "KubeletAgreement True on a kubelet read after the restart: {}",
            c.message
        ));
    }
    if c.reason == reason::DISAGREE || c.reason == reason::KUBELET_MEMORY_DISAGREE {
        let old: &[String] = before.map_or(&[], |b| &b.differences);
        let new: Vec<&String> = seen
            .differences
            .iter()
            .filter(|d| !old.contains(d))
            .collect();
        if new.is_empty() {
            return Ok(format!(
                "KubeletAgreement False on a kubelet read after the restart, with only the {} differences already present before the apply (containers placed before the change keep their CPUs): {}",
                seen.differences.len(),
                seen.differences.join(", ")
            ));
        }
        return Err(format!(
            "KubeletAgreement False after the restart with {} differences not present before the apply: {}",
            new.len(),
            new.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    Err(format!(
        "KubeletAgreement {} {} after the restart: {}",
        if c.status { "True" } else { "False" },
        c.reason,
        c.message
    ))
}

/// The agent loop's side of the check: where it publishes what it saw, and where it is
/// asked to read the kubelet now.
#[derive(Clone)]
pub struct AgreementFeed {
    /// The last view published.
    pub seen: watch::Receiver<Option<AgreementSeen>>,
    /// Asks the loop for a kubelet read now.
    pub read_now: Arc<Notify>,
}

/// The KubeletAgreement wait, made after the kubelet service's health checks
/// ([`AfterStart`]). What it confirmed is left in `verified`.
pub struct Agreement {
    handle: tokio::runtime::Handle,
    feed: AgreementFeed,
    generation: i64,
    wait: Duration,
    poll: Duration,
    before: Option<AgreementSeen>,
    verified: Arc<Mutex<Option<String>>>,
}

/// A [`KubeletService`] whose health check also waits for `KubeletAgreement` after the
/// restart (see the module documentation).
pub type AgreementCheck = AfterStart<Agreement>;

impl AfterStart<Agreement> {
    /// Wraps `inner` for an apply of `generation`; `handle` runs the waits (the executor
    /// runs on a blocking thread). The view published now is the "before" of the apply.
    pub fn new(
        inner: Box<dyn KubeletService + Send>,
        handle: tokio::runtime::Handle,
        feed: AgreementFeed,
        generation: i64,
        wait: Duration,
        verified: Arc<Mutex<Option<String>>>,
    ) -> Self {
        let before = feed.seen.borrow().clone();
        AfterStart::wrap(
            inner,
            Agreement {
                handle,
                feed,
                generation,
                wait,
                poll: Duration::from_secs(1),
                before,
                verified,
            },
        )
    }
}

impl Agreement {
    fn wait_agreement(&mut self, since: Instant) -> Result<String, String> {
        let deadline = since + self.wait;
        let mut asked: Option<Instant> = None;
        loop {
            let seen = self.feed.seen.borrow_and_update().clone();
            let why = match agreement_after_restart(
                self.before.as_ref(),
                seen.as_ref(),
                self.generation,
                since,
            ) {
                Ok(confirmed) => return Ok(confirmed),
                Err(why) => why,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "KubeletAgreement not confirmed within {}s (--actuation-verify-seconds) of the kubelet restart: {why}",
                    self.wait.as_secs()
                ));
            }
            // At most one extra kubelet read per poll period.
            if asked.is_none_or(|t| now.duration_since(t) >= self.poll) {
                self.feed.read_now.notify_one();
                asked = Some(now);
            }
            let left = deadline.saturating_duration_since(now).min(self.poll);
            let seen_rx = &mut self.feed.seen;
            let _ = self
                .handle
                .block_on(async { tokio::time::timeout(left, seen_rx.changed()).await });
        }
    }
}

impl StartCheck for Agreement {
    fn after_healthy(&mut self, started: Started) -> Result<(), String> {
        let confirmed = self.wait_agreement(started.at)?;
        if let Ok(mut v) = self.verified.lock() {
            *v = Some(confirmed);
        }
        Ok(())
    }
    fn after_recovered(&mut self, _: Started) -> Result<(), String> {
        // After a rollback the kubelet runs the old configuration: only its own health
        // (and the Node) are checked, not agreement with the spec it refused.
        Ok(())
    }
}

#[cfg(test)]
mod tests;
