//! Waiting on conditions over watched collections, never on sleeps.
//!
//! [`wait_for`] keeps a local copy of a collection from a kube watcher and re-evaluates a
//! predicate after every change. It returns as soon as the predicate is satisfied, fails
//! at once when the predicate says the state can no longer become right (a pod that
//! failed), and on timeout reports the predicate's last "not yet, because" message, so a
//! failing e2e run says what it was waiting for.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};

/// What a predicate says about the current state of a collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress<T> {
    /// Satisfied, with the value the caller wants.
    Done(T),
    /// Not yet, and why (reported if the wait times out).
    Pending(String),
    /// Can no longer be satisfied, and why (the wait fails at once).
    Failed(String),
}

/// A wait that did not end well.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// Timed out; the predicate's last word says what was missing.
    #[error("timed out after {after:?} waiting for {what}: {last}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The timeout.
        after: Duration,
        /// The predicate's last Pending message.
        last: String,
    },
    /// The predicate declared failure.
    #[error("while waiting for {what}: {reason}")]
    Failed {
        /// What was awaited.
        what: String,
        /// The predicate's Failed message.
        reason: String,
    },
    /// The watch itself failed.
    #[error("watching for {what}: {source}")]
    Watch {
        /// What was awaited.
        what: String,
        /// The watcher's error.
        source: watcher::Error,
    },
    /// The watch stream ended (it does not in normal operation).
    #[error("watch stream for {what} ended unexpectedly")]
    Ended {
        /// What was awaited.
        what: String,
    },
}

/// A local copy of a watched collection, keyed by namespace/name.
#[derive(Debug, Clone)]
pub struct Snapshot<K> {
    items: BTreeMap<String, K>,
    pending_init: Option<BTreeMap<String, K>>,
    listed: bool,
}

impl<K: Resource + Clone> Default for Snapshot<K> {
    fn default() -> Self {
        Self {
            items: BTreeMap::new(),
            pending_init: None,
            listed: false,
        }
    }
}

fn key<K: Resource>(obj: &K) -> String {
    format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or(""),
        obj.meta().name.as_deref().unwrap_or("")
    )
}

impl<K: Resource + Clone> Snapshot<K> {
    /// Applies one watcher event. Returns true when the snapshot is complete (the initial
    /// list has been seen) and so worth evaluating.
    pub fn apply(&mut self, event: Event<K>) -> bool {
        match event {
            Event::Init => self.pending_init = Some(BTreeMap::new()),
            Event::InitApply(obj) => {
                self.pending_init
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key(&obj), obj);
            }
            Event::InitDone => {
                self.items = self.pending_init.take().unwrap_or_default();
                self.listed = true;
            }
            Event::Apply(obj) => {
                self.items.insert(key(&obj), obj);
            }
            Event::Delete(obj) => {
                self.items.remove(&key(&obj));
            }
        }
        self.listed && self.pending_init.is_none()
    }

    /// The objects, ordered by namespace/name.
    pub fn items(&self) -> Vec<&K> {
        self.items.values().collect()
    }
}

/// Server-side timeout of each watch request in [`wait_for`], in seconds.
const WATCH_SECONDS: u32 = 45;

/// Watches `api` (optionally narrowed by `config`) and returns once `predicate` over the
/// whole collection is [`Progress::Done`]. `what` names the wait in errors.
pub async fn wait_for<K, T>(
    api: Api<K>,
    config: watcher::Config,
    what: &str,
    timeout: Duration,
    mut predicate: impl FnMut(&[&K]) -> Progress<T>,
) -> Result<T, WaitError>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut last = "no complete list of objects received yet".to_string();
    let run = async {
        let mut snapshot = Snapshot::<K>::default();
        // A watch request ends server-side before a client's read timeout can cut it (the
        // harness's clients read with 60 s); the watcher then resumes from its last version.
        let config = watcher::Config {
            timeout: Some(
                config
                    .timeout
                    .map_or(WATCH_SECONDS, |t| t.min(WATCH_SECONDS)),
            ),
            ..config
        };
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(event) = stream.try_next().await.map_err(|source| WaitError::Watch {
            what: what.to_string(),
            source,
        })? {
            if !snapshot.apply(event) {
                continue;
            }
            match predicate(&snapshot.items()) {
                Progress::Done(t) => return Ok(t),
                Progress::Pending(why) => last = why,
                Progress::Failed(reason) => {
                    return Err(WaitError::Failed {
                        what: what.to_string(),
                        reason,
                    })
                }
            }
        }
        Err(WaitError::Ended {
            what: what.to_string(),
        })
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(result) => result,
        Err(_) => Err(WaitError::Timeout {
            what: what.to_string(),
            after: timeout,
            last,
        }),
    }
}

/// Calls `check` every `every` until it is [`Progress::Done`]: for what no watch can see
/// (cgroup files, the kubelet's checkpoint, its PodResources answer).
pub async fn poll_until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> Result<T, WaitError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Progress<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        let last = match check().await {
            Progress::Done(t) => return Ok(t),
            Progress::Pending(why) => why,
            Progress::Failed(reason) => {
                return Err(WaitError::Failed {
                    what: what.to_string(),
                    reason,
                })
            }
        };
        if start.elapsed() > timeout {
            return Err(WaitError::Timeout {
                what: what.to_string(),
                after: timeout,
                last,
            });
        }
        tokio::time::sleep(every).await;
    }
}

/// Names of the objects in a snapshot slice, for messages.
pub fn names<K: Resource>(items: &[&K]) -> Vec<String> {
    items.iter().map(|o| o.name_any()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(name: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.to_string());
        p.metadata.namespace = Some("ns".to_string());
        p
    }

    #[test]
    fn snapshot_is_complete_only_after_the_initial_list() {
        let mut s = Snapshot::<Pod>::default();
        assert!(!s.apply(Event::Init));
        assert!(!s.apply(Event::InitApply(pod("a"))));
        assert!(!s.apply(Event::InitApply(pod("b"))));
        assert!(s.apply(Event::InitDone));
        assert_eq!(names(&s.items()), vec!["a", "b"]);
        assert!(s.apply(Event::Delete(pod("a"))));
        assert!(s.apply(Event::Apply(pod("c"))));
        assert_eq!(names(&s.items()), vec!["b", "c"]);
    }

    #[test]
    fn a_relist_replaces_the_collection() {
        let mut s = Snapshot::<Pod>::default();
        s.apply(Event::Init);
        s.apply(Event::InitApply(pod("a")));
        s.apply(Event::InitDone);
        // A restarted watch: objects deleted meanwhile must disappear, and the snapshot
        // must not be evaluated half-listed.
        assert!(!s.apply(Event::Init));
        assert!(!s.apply(Event::InitApply(pod("b"))));
        assert!(s.apply(Event::InitDone));
        assert_eq!(names(&s.items()), vec!["b"]);
    }
}
