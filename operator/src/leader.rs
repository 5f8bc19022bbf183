//! Leader election over a `coordination.k8s.io/v1` Lease (kube-runtime 5 has none built in).
//!
//! Guarantees: at most one replica believes it leads at a time, provided clocks are roughly
//! in sync (skew well under the lease duration). Every write is a create (fails if another
//! replica created first) or a replace carrying the `resourceVersion` that was read (fails
//! with 409 if anyone wrote in between), so two replicas cannot both take the lease. A
//! leader that cannot renew before its lease would expire steps down (the caller shuts the
//! controllers down and exits; Kubernetes restarts the pod as a standby).
//!
//! The decisions are pure functions of the Lease read and the time ([`may_take`],
//! [`claim`]); [`try_acquire_or_renew`] wraps them in the two API calls.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::Api;

/// Lease settings.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Lease name.
    pub name: String,
    /// This replica's identity (pod name).
    pub identity: String,
    /// How long a lease stays valid without renewal.
    pub duration: Duration,
    /// How often the leader renews (and a standby retries).
    pub renew_every: Duration,
}

/// Whether `me` may take or keep `lease` at `now`: it is unheld, held by `me`, or expired.
pub fn may_take(lease: &Lease, me: &str, now: Timestamp) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return true;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(holder) if holder == me => true,
        Some(_) => {
            let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
                return true;
            };
            let secs = i64::from(spec.lease_duration_seconds.unwrap_or(0));
            renewed.0 + SignedDuration::from_secs(secs) < now
        }
    }
}

/// The Lease `me` writes to take or renew it, built from what was read (`None`: create).
/// Keeps `resourceVersion` for optimistic concurrency; counts transitions on a holder change.
pub fn claim(existing: Option<&Lease>, cfg: &LeaseConfig, now: Timestamp) -> Lease {
    let mut lease = existing.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(cfg.name.clone()),
            ..Default::default()
        },
        spec: None,
    });
    let old = lease.spec.take().unwrap_or_default();
    let same_holder = old.holder_identity.as_deref() == Some(cfg.identity.as_str());
    let secs = i32::try_from(cfg.duration.as_secs()).unwrap_or(i32::MAX);
    lease.spec = Some(LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(secs),
        acquire_time: if same_holder {
            old.acquire_time
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if same_holder || old.holder_identity.is_none() {
            old.lease_transitions.unwrap_or(0)
        } else {
            old.lease_transitions.unwrap_or(0) + 1
        }),
        ..old
    });
    lease
}

/// One election round: `Ok(true)` when `me` holds the lease afterwards.
pub async fn try_acquire_or_renew(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    let lost_race = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 409);
    match api.get_opt(&cfg.name).await? {
        None => match api
            .create(&PostParams::default(), &claim(None, cfg, now))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if lost_race(&e) => Ok(false),
            Err(e) => Err(e),
        },
        Some(lease) if may_take(&lease, &cfg.identity, now) => {
            match api
                .replace(
                    &cfg.name,
                    &PostParams::default(),
                    &claim(Some(&lease), cfg, now),
                )
                .await
            {
                Ok(_) => Ok(true),
                Err(e) if lost_race(&e) => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(_) => Ok(false),
    }
}

/// Waits until this replica holds the lease.
pub async fn acquire(api: &Api<Lease>, cfg: &LeaseConfig) {
    loop {
        match try_acquire_or_renew(api, cfg).await {
            Ok(true) => return,
            Ok(false) => tracing::debug!(lease = %cfg.name, "lease held by another replica"),
            Err(e) => tracing::warn!(lease = %cfg.name, error = %e, "lease request failed"),
        }
        tokio::time::sleep(cfg.renew_every).await;
    }
}

/// Renews until renewal fails for longer than the lease lasts (or another replica took it);
/// returns then, and the caller must stop acting as leader.
pub async fn hold(api: &Api<Lease>, cfg: &LeaseConfig) {
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(cfg.renew_every).await;
        match try_acquire_or_renew(api, cfg).await {
            Ok(true) => last_ok = tokio::time::Instant::now(),
            Ok(false) => {
                tracing::error!(lease = %cfg.name, "lease taken by another replica");
                return;
            }
            Err(e) => {
                tracing::warn!(lease = %cfg.name, error = %e, "lease renewal failed");
                // Step down a renew interval before the lease could expire elsewhere.
                if last_ok.elapsed() + cfg.renew_every >= cfg.duration {
                    tracing::error!(lease = %cfg.name, "could not renew the lease in time");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(me: &str) -> LeaseConfig {
        LeaseConfig {
            name: "nodetopo-operator".into(),
            identity: me.into(),
            duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn fresh_lease_is_taken_and_counted() {
        let l = claim(None, &cfg("a"), at(100));
        let s = l.spec.as_ref().unwrap();
        assert_eq!(s.holder_identity.as_deref(), Some("a"));
        assert_eq!(s.lease_duration_seconds, Some(15));
        assert_eq!(s.acquire_time, Some(MicroTime(at(100))));
        assert_eq!(s.lease_transitions, Some(0));
        assert_eq!(l.metadata.name.as_deref(), Some("nodetopo-operator"));
    }

    #[test]
    fn others_lease_respected_until_expired() {
        let mut l = claim(None, &cfg("a"), at(100));
        l.metadata.resource_version = Some("7".into());
        assert!(may_take(&l, "a", at(105)));
        assert!(!may_take(&l, "b", at(105)));
        assert!(!may_take(&l, "b", at(115)));
        assert!(may_take(&l, "b", at(116)));
        let taken = claim(Some(&l), &cfg("b"), at(116));
        let s = taken.spec.as_ref().unwrap();
        assert_eq!(s.holder_identity.as_deref(), Some("b"));
        assert_eq!(s.lease_transitions, Some(1));
        assert_eq!(s.acquire_time, Some(MicroTime(at(116))));
        assert_eq!(taken.metadata.resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn renewal_keeps_acquire_time() {
        let l = claim(None, &cfg("a"), at(100));
        let r = claim(Some(&l), &cfg("a"), at(110));
        let s = r.spec.as_ref().unwrap();
        assert_eq!(s.acquire_time, Some(MicroTime(at(100))));
        assert_eq!(s.renew_time, Some(MicroTime(at(110))));
        assert_eq!(s.lease_transitions, Some(0));
    }
}
