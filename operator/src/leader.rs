//! Leader election over a `coordination.k8s.io/v1` Lease (kube-runtime 5 has none built in).
//!
//! Guarantees: at most one replica believes it leads at a time, whatever the skew between
//! the replicas' clocks: as in client-go's leader election, a standby judges expiry by its
//! own monotonic clock, from the moment it last saw the Lease's record change (holder or
//! renew time), never by comparing the remote `renewTime` with its local wall clock. Every
//! write is a create (fails if another replica created first) or a replace carrying the
//! `resourceVersion` that was read (fails with 409 if anyone wrote in between), so two
//! replicas cannot both take the lease. A leader that cannot renew before its lease would
//! expire steps down (the caller shuts the controllers down and exits; Kubernetes restarts
//! the pod as a standby).
//!
//! The decisions are pure functions of the Lease read and the times passed in
//! ([`Observer::may_take`], [`claim`]); [`try_acquire_or_renew`] wraps them in the two API
//! calls.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
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

/// The parts of a Lease record whose change shows that its holder is alive.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    acquire_time: Option<MicroTime>,
    transitions: Option<i32>,
}

impl Record {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity,
            renew_time: spec.renew_time,
            acquire_time: spec.acquire_time,
            transitions: spec.lease_transitions,
        }
    }
}

/// What this replica last saw of the Lease, and when by its own monotonic clock (client-go's
/// `observedRecord` and `observedTime`).
#[derive(Debug, Clone, Default)]
pub struct Observer {
    seen: Option<(Record, Instant)>,
}

impl Observer {
    /// Records the Lease as read at local time `now`. The clock restarts only when the record
    /// changed since the last observation: an unchanged record means the holder has not
    /// renewed since then.
    pub fn observe(&mut self, lease: &Lease, now: Instant) {
        let record = Record::of(lease);
        match &self.seen {
            Some((r, _)) if *r == record => {}
            _ => self.seen = Some((record, now)),
        }
    }

    /// Whether `me` may take or keep `lease` at local time `now`: it is unheld, held by `me`,
    /// or its record has not changed for a whole `leaseDurationSeconds` since this replica
    /// first saw it (call [`Observer::observe`] with the same Lease first). A Lease never
    /// observed counts as just seen, so a new standby waits one duration before taking it.
    pub fn may_take(&self, lease: &Lease, me: &str, now: Instant) -> bool {
        let Some(spec) = lease.spec.as_ref() else {
            return true;
        };
        match spec.holder_identity.as_deref() {
            None | Some("") => true,
            Some(holder) if holder == me => true,
            Some(_) => {
                let secs = u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
                let since = match &self.seen {
                    Some((r, at)) if *r == Record::of(lease) => *at,
                    _ => now,
                };
                now.saturating_duration_since(since) > Duration::from_secs(secs)
            }
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
    observer: &mut Observer,
) -> Result<bool, kube::Error> {
    let lost_race = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 409);
    let read = api.get_opt(&cfg.name).await?;
    // The wall clock only stamps what is written (for people and other tools to read); the
    // decision uses the monotonic clock.
    let (stamp, local) = (Timestamp::now(), Instant::now());
    let written = match read {
        None => {
            api.create(&PostParams::default(), &claim(None, cfg, stamp))
                .await
        }
        Some(lease) => {
            observer.observe(&lease, local);
            if !observer.may_take(&lease, &cfg.identity, local) {
                return Ok(false);
            }
            api.replace(
                &cfg.name,
                &PostParams::default(),
                &claim(Some(&lease), cfg, stamp),
            )
            .await
        }
    };
    match written {
        Ok(lease) => {
            observer.observe(&lease, local);
            Ok(true)
        }
        Err(e) if lost_race(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Waits until this replica holds the lease; returns the observer to keep holding it with.
pub async fn acquire(api: &Api<Lease>, cfg: &LeaseConfig) -> Observer {
    let mut observer = Observer::default();
    loop {
        match try_acquire_or_renew(api, cfg, &mut observer).await {
            Ok(true) => return observer,
            Ok(false) => tracing::debug!(lease = %cfg.name, "lease held by another replica"),
            Err(e) => tracing::warn!(lease = %cfg.name, error = %e, "lease request failed"),
        }
        tokio::time::sleep(cfg.renew_every).await;
    }
}

/// Renews until renewal fails for longer than the lease lasts (or another replica took it);
/// returns then, and the caller must stop acting as leader.
pub async fn hold(api: &Api<Lease>, cfg: &LeaseConfig, mut observer: Observer) {
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(cfg.renew_every).await;
        match try_acquire_or_renew(api, cfg, &mut observer).await {
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
    fn others_lease_respected_until_expired_by_the_local_clock() {
        let t0 = Instant::now();
        let secs = |n: u64| t0 + Duration::from_secs(n);
        let mut l = claim(None, &cfg("a"), at(100));
        l.metadata.resource_version = Some("7".into());
        let mut b = Observer::default();
        b.observe(&l, secs(0));
        assert!(b.may_take(&l, "a", secs(5)));
        assert!(!b.may_take(&l, "b", secs(5)));
        assert!(!b.may_take(&l, "b", secs(15)));
        assert!(b.may_take(&l, "b", secs(16)));
        let taken = claim(Some(&l), &cfg("b"), at(116));
        let s = taken.spec.as_ref().unwrap();
        assert_eq!(s.holder_identity.as_deref(), Some("b"));
        assert_eq!(s.lease_transitions, Some(1));
        assert_eq!(s.acquire_time, Some(MicroTime(at(116))));
        assert_eq!(taken.metadata.resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn clock_skew_does_not_matter() {
        // The holder's clock is an hour behind: its renewTime looks long expired by the
        // standby's wall clock, yet each renewal changes the record, which keeps it valid.
        let t0 = Instant::now();
        let secs = |n: u64| t0 + Duration::from_secs(n);
        let mut b = Observer::default();
        let mut l = claim(None, &cfg("a"), at(100));
        b.observe(&l, secs(0));
        assert!(!b.may_take(&l, "b", secs(10)));
        l = claim(Some(&l), &cfg("a"), at(105));
        b.observe(&l, secs(10));
        assert!(!b.may_take(&l, "b", secs(24)), "renewed at local 10");
        // No renewal since local 10: expired 15 s later by the standby's own clock.
        b.observe(&l, secs(20));
        assert!(b.may_take(&l, "b", secs(26)));
        // A Lease seen for the first time counts as just renewed.
        let fresh = Observer::default();
        assert!(!fresh.may_take(&l, "b", secs(1000)));
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
