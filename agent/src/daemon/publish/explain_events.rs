//! Pod Events for explained kubelet admission failures (reason `AdmissionExplained`, type
//! Warning, the explanation's summary as the note).
//!
//! Guarantees: at most one Event per pod UID for the agent's lifetime (the UIDs remembered
//! are bounded, [`REMEMBERED_UIDS`]: the oldest are forgotten first, and a pod whose UID was
//! forgotten was explained long ago and is not explained again by the core anyway), and at
//! most `burst` Events per `window` for the whole node; what the limit drops stays in
//! `status.rejections` (and is logged). Time is an input: [`EventLimiter::allow`] takes
//! `now`.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use nodetopo_engine::report::RejectionReport;

/// The Event reason.
pub const REASON: &str = "AdmissionExplained";
/// The Event action.
pub const ACTION: &str = "ExplainAdmission";
/// Events allowed per window on one node.
pub const BURST: usize = 10;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Pod UIDs remembered for de-duplication.
pub const REMEMBERED_UIDS: usize = 4096;

/// What the limiter says about one Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Publish it.
    Send,
    /// This pod already had its Event.
    Duplicate,
    /// Over the node's rate; the explanation stays in the status.
    RateLimited,
}

/// De-duplication per pod UID and a sliding-window rate limit. See the module documentation.
#[derive(Debug)]
pub struct EventLimiter {
    burst: usize,
    window: Duration,
    seen: BTreeSet<String>,
    seen_order: VecDeque<String>,
    sent: VecDeque<Instant>,
}

impl Default for EventLimiter {
    fn default() -> Self {
        Self::new(BURST, WINDOW)
    }
}

impl EventLimiter {
    /// At most `burst` Events per `window`.
    pub fn new(burst: usize, window: Duration) -> Self {
        Self {
            burst,
            window,
            seen: BTreeSet::new(),
            seen_order: VecDeque::new(),
            sent: VecDeque::new(),
        }
    }

    /// Whether the Event of pod `uid` may go out at `now`; a `Send` counts against the rate
    /// and marks the UID as done.
    pub fn allow(&mut self, uid: &str, now: Instant) -> Verdict {
        if self.seen.contains(uid) {
            return Verdict::Duplicate;
        }
        while self
            .sent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= self.window)
        {
            self.sent.pop_front();
        }
        if self.sent.len() >= self.burst {
            return Verdict::RateLimited;
        }
        self.sent.push_back(now);
        self.seen.insert(uid.to_string());
        self.seen_order.push_back(uid.to_string());
        while self.seen_order.len() > REMEMBERED_UIDS {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen.remove(&old);
            }
        }
        Verdict::Send
    }
}

/// The Pod an explanation's Event is about (`namespace/name` and UID from the record);
/// `None` when the record has no explanation.
pub fn pod_reference(r: &RejectionReport) -> Option<ObjectReference> {
    r.explanation.as_ref()?;
    let (namespace, name) = r.pod.split_once('/')?;
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        uid: Some(r.pod_uid.clone()),
        ..Default::default()
    })
}

/// The Event's note: the explanation's summary (already bounded for an Event).
pub fn note(r: &RejectionReport) -> Option<String> {
    r.explanation.as_ref().map(|e| e.summary.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodetopo_engine::report::ExplanationReport;

    #[test]
    fn one_event_per_pod_and_a_rate_for_the_node() {
        let t0 = Instant::now();
        let mut l = EventLimiter::new(2, Duration::from_secs(60));
        assert_eq!(l.allow("a", t0), Verdict::Send);
        assert_eq!(l.allow("a", t0), Verdict::Duplicate);
        assert_eq!(l.allow("b", t0 + Duration::from_secs(1)), Verdict::Send);
        assert_eq!(
            l.allow("c", t0 + Duration::from_secs(2)),
            Verdict::RateLimited
        );
        // A rate-limited pod is not marked done: it may go out once the window moved on.
        assert_eq!(l.allow("c", t0 + Duration::from_secs(60)), Verdict::Send);
        assert_eq!(
            l.allow("d", t0 + Duration::from_secs(60)),
            Verdict::RateLimited
        );
        assert_eq!(l.allow("d", t0 + Duration::from_secs(61)), Verdict::Send);
        assert_eq!(
            l.allow("b", t0 + Duration::from_secs(600)),
            Verdict::Duplicate
        );
    }

    #[test]
    fn the_remembered_uids_are_bounded() {
        let t0 = Instant::now();
        let mut l = EventLimiter::new(usize::MAX, Duration::from_secs(1));
        for i in 0..=REMEMBERED_UIDS {
            assert_eq!(l.allow(&format!("u{i}"), t0), Verdict::Send);
        }
        assert_eq!(l.seen.len(), REMEMBERED_UIDS);
        assert_eq!(
            l.allow(&format!("u{REMEMBERED_UIDS}"), t0),
            Verdict::Duplicate
        );
    }

    #[test]
    fn the_event_names_the_pod_and_carries_the_summary() {
        let mut r = RejectionReport {
            pod: "team/web-0".into(),
            pod_uid: "u-1".into(),
            container: "app".into(),
            reason: "TopologyAffinityError".into(),
            by_kubelet: true,
            ..Default::default()
        };
        assert_eq!(
            pod_reference(&r),
            None,
            "nothing to say without an explanation"
        );
        r.explanation = Some(ExplanationReport {
            summary: "kubelet: TopologyAffinityError. ...".into(),
            ..Default::default()
        });
        let o = pod_reference(&r).expect("a reference");
        assert_eq!(
            (
                o.kind.as_deref(),
                o.namespace.as_deref(),
                o.name.as_deref(),
                o.uid.as_deref()
            ),
            (Some("Pod"), Some("team"), Some("web-0"), Some("u-1"))
        );
        assert_eq!(
            note(&r).as_deref(),
            Some("kubelet: TopologyAffinityError. ...")
        );
    }
}
