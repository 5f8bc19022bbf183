//! One processing cycle, shared by the cluster and local shells: reconcile, checkpoint, and
//! decide whether a new status must be published.
//!
//! Order is the invariant: the checkpoint is written before any status that shows its
//! allocations, and a status is handed out only once the checkpoint it reflects is on disk,
//! so a crash can never lose an allocation that was published.

use std::path::PathBuf;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodetopo_crds::NodeTopologyStatus;

use crate::daemon::checkpoint::{self, CheckpointData};
use crate::daemon::core::Core;
use crate::daemon::publish::metrics::Metrics;

/// What the shells remember between cycles.
pub struct Cycle {
    cp_path: PathBuf,
    last_cp: Option<CheckpointData>,
    last_status: Option<NodeTopologyStatus>,
    runs: u64,
}

impl Cycle {
    /// A cycle writing its checkpoint to `cp_path`.
    pub fn new(cp_path: PathBuf) -> Self {
        Self {
            cp_path,
            last_cp: None,
            last_status: None,
            runs: 0,
        }
    }

    /// The tracing span of the next cycle (`cycle` with its number, from 1), for the shells
    /// to enter around everything one cycle does.
    pub fn span(&mut self) -> tracing::Span {
        self.runs += 1;
        tracing::info_span!("cycle", n = self.runs)
    }

    /// Reconciles `core`, saves a changed checkpoint, and returns the status to publish when
    /// it differs from the last published one and its checkpoint is on disk. A failed save
    /// is logged and retried next cycle; the status waits for it.
    pub fn run(
        &mut self,
        core: &mut Core,
        metrics: &Metrics,
        now: &Time,
    ) -> Option<NodeTopologyStatus> {
        let started = std::time::Instant::now();
        if core.reconcile() {
            metrics.admission_duration(started.elapsed());
        }
        if core.take_quarantine_request() {
            // The restored checkpoint broke an invariant: keep it for inspection before the
            // rebuilt state replaces it.
            let note = match checkpoint::quarantine(&self.cp_path, unix_now()) {
                Ok(aside) => format!("kept as {}", aside.display()),
                Err(e) => format!("could not be moved aside: {e}"),
            };
            tracing::warn!(file = %self.cp_path.display(), "inconsistent checkpoint: {note}");
            core.checkpoint_moved_aside(&note);
        }
        let cp = core.checkpoint();
        if let Some(data) = cp.as_ref().filter(|_| cp != self.last_cp) {
            match checkpoint::save(&self.cp_path, data) {
                Ok(()) => self.last_cp = cp.clone(),
                Err(e) => tracing::error!("{e}"),
            }
        }
        let prev = self
            .last_status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let status = core.status(&prev, now);
        (cp == self.last_cp && self.last_status.as_ref() != Some(&status)).then_some(status)
    }

    /// Records that `status` was published (sent to the writer, or written to the file).
    pub fn published(&mut self, status: NodeTopologyStatus) {
        self.last_status = Some(status);
    }

    /// The last published status.
    pub fn last_status(&self) -> Option<&NodeTopologyStatus> {
        self.last_status.as_ref()
    }
}

/// Seconds since the epoch (names of files moved aside).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The wall clock, for condition timestamps (only the shells read it).
pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}
