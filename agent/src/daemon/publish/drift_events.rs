//! Warning events for cpuset drift, rate limited: an event names drift not reported before,
//! at most one event per interval; drift that goes away is forgotten, so it is reported again
//! if it comes back. Time is an input.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nodetopo_kubelet::audit::{AuditReport, DriftReason};

/// The shortest time between two drift events.
pub const MIN_INTERVAL: Duration = Duration::from_secs(60);

/// How many new mismatches one event names (the rest are counted).
const NAMED: usize = 5;

/// What has been reported, and when the last event went out.
#[derive(Debug)]
pub struct DriftEvents {
    reported: BTreeSet<(String, String, DriftReason)>,
    last: Option<Instant>,
    min_interval: Duration,
}

impl DriftEvents {
    /// A limiter allowing one event per `min_interval`.
    pub fn new(min_interval: Duration) -> Self {
        Self {
            reported: BTreeSet::new(),
            last: None,
            min_interval,
        }
    }

    /// The note of the event to publish now, if `report` holds drift not reported yet and
    /// the last event is at least the interval old. Unreported drift waits for a later call.
    pub fn due(&mut self, report: &AuditReport, now: Instant) -> Option<String> {
        let current: BTreeSet<(String, String, DriftReason)> = report
            .drift
            .iter()
            .map(|d| (d.pod_uid.clone(), d.container.clone(), d.reason))
            .collect();
        self.reported.retain(|k| current.contains(k));
        let new: Vec<_> = report
            .drift
            .iter()
            .filter(|d| {
                !self
                    .reported
                    .contains(&(d.pod_uid.clone(), d.container.clone(), d.reason))
            })
            .collect();
        if new.is_empty() {
            return None;
        }
        if self
            .last
            .is_some_and(|l| now.saturating_duration_since(l) < self.min_interval)
        {
            return None;
        }
        self.last = Some(now);
        let mut parts: Vec<String> = new
            .iter()
            .take(NAMED)
            .map(|d| {
                format!(
                    "{} {}/{} (expected {}, actual {})",
                    d.reason,
                    d.pod,
                    d.container,
                    d.expected.as_deref().unwrap_or("-"),
                    d.actual.as_deref().unwrap_or("-")
                )
            })
            .collect();
        if new.len() > NAMED {
            parts.push(format!("and {} more", new.len() - NAMED));
        }
        for d in new {
            self.reported
                .insert((d.pod_uid.clone(), d.container.clone(), d.reason));
        }
        Some(format!("cpuset drift: {}", parts.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodetopo_kubelet::audit::Drift;

    fn report(items: &[(&str, DriftReason)]) -> AuditReport {
        AuditReport {
            drift: items
                .iter()
                .map(|(c, r)| Drift {
                    pod: "ns/p".into(),
                    pod_uid: "u".into(),
                    container: c.to_string(),
                    expected: Some("1".into()),
                    actual: Some("0-1".into()),
                    reason: *r,
                    message: String::new(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn new_drift_is_reported_once_and_at_most_once_per_interval() {
        let t0 = Instant::now();
        let mut e = DriftEvents::new(Duration::from_secs(60));
        let a = report(&[("a", DriftReason::ChangedOutsideKubelet)]);
        let note = e.due(&a, t0).expect("first drift is reported");
        assert!(
            note.contains("ChangedOutsideKubelet ns/p/a (expected 1, actual 0-1)"),
            "{note}"
        );
        assert_eq!(
            e.due(&a, t0 + Duration::from_secs(120)),
            None,
            "already reported"
        );

        // New drift within the interval waits; after it, it is reported (alone).
        let ab = report(&[
            ("a", DriftReason::ChangedOutsideKubelet),
            ("b", DriftReason::SharedOnExclusiveCpu),
        ]);
        let t1 = t0 + Duration::from_secs(130);
        assert!(e.due(&ab, t1).is_some());
        let abc = report(&[
            ("a", DriftReason::ChangedOutsideKubelet),
            ("b", DriftReason::SharedOnExclusiveCpu),
            ("c", DriftReason::ContainerNotFound),
        ]);
        assert_eq!(
            e.due(&abc, t1 + Duration::from_secs(10)),
            None,
            "rate limited"
        );
        let note = e
            .due(&abc, t1 + Duration::from_secs(61))
            .expect("after the interval");
        assert!(note.contains("/c ") && !note.contains("/a "), "{note}");
    }

    #[test]
    fn drift_that_returns_is_reported_again() {
        let t0 = Instant::now();
        let mut e = DriftEvents::new(Duration::from_secs(60));
        let a = report(&[("a", DriftReason::ChangedOutsideKubelet)]);
        assert!(e.due(&a, t0).is_some());
        assert_eq!(e.due(&report(&[]), t0 + Duration::from_secs(61)), None);
        assert!(e.due(&a, t0 + Duration::from_secs(122)).is_some());
    }

    #[test]
    fn a_long_list_is_cut_and_counted() {
        let names: Vec<String> = (0..8).map(|i| format!("c{i}")).collect();
        let items: Vec<(&str, DriftReason)> = names
            .iter()
            .map(|n| (n.as_str(), DriftReason::StaleCheckpointEntry))
            .collect();
        let mut e = DriftEvents::new(MIN_INTERVAL);
        let note = e.due(&report(&items), Instant::now()).unwrap();
        assert!(note.ends_with("and 3 more"), "{note}");
    }
}
