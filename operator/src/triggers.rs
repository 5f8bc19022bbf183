//! Which watch events start a node reconcile: a change of an object's spec (a new
//! `metadata.generation`) or its deletion. Status-only writes (the policy controller's own
//! policy status, the agent's NodeTopology status) and metadata-only writes do not: the node
//! controller's decision reads neither.
//!
//! The filter works on watcher events rather than on objects (as kube's generation
//! predicate does) so that a delete always passes even though it carries the last
//! generation unchanged.

use std::collections::{HashMap, HashSet};

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use kube::Resource;

/// The identity of one object across its lifetime (a re-created object is a new one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    namespace: Option<String>,
    name: String,
    uid: Option<String>,
}

fn key<K: Resource>(obj: &K) -> Key {
    let m = obj.meta();
    Key {
        namespace: m.namespace.clone(),
        name: m.name.clone().unwrap_or_default(),
        uid: m.uid.clone(),
    }
}

/// The generation last seen per object, and the objects listed by a re-list in progress.
#[derive(Debug, Default)]
pub struct SpecFilter {
    seen: HashMap<Key, i64>,
    relisted: Option<HashSet<Key>>,
}

impl SpecFilter {
    /// The object to pass on for one watcher event, if any: an added object, one whose
    /// generation changed (or that has none, so no change can be ruled out), or a deleted
    /// one.
    pub fn pass<K: Resource>(&mut self, event: watcher::Event<K>) -> Option<K> {
        match event {
            watcher::Event::Init => {
                self.relisted = Some(HashSet::new());
                None
            }
            watcher::Event::InitDone => {
                // Objects the re-list did not show were deleted while the watch was down.
                if let Some(listed) = self.relisted.take() {
                    self.seen.retain(|k, _| listed.contains(k));
                }
                None
            }
            watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
                let k = key(&obj);
                if let Some(listed) = self.relisted.as_mut() {
                    listed.insert(k.clone());
                }
                let Some(generation) = obj.meta().generation else {
                    return Some(obj);
                };
                match self.seen.insert(k, generation) {
                    Some(before) if before == generation => None,
                    _ => Some(obj),
                }
            }
            watcher::Event::Delete(obj) => {
                self.seen.remove(&key(&obj));
                Some(obj)
            }
        }
    }
}

/// The objects of a watcher (or reflector) event stream whose spec changed or that were
/// deleted ([`SpecFilter`]), in the shape `Controller::watches_stream` and `owns_stream`
/// take. Fed by a reflector, each object reaches its store before it is passed on, so the
/// reconcile it triggers reads a store at least as fresh as the trigger.
pub fn spec_changes<K, S>(events: S) -> impl Stream<Item = Result<K, watcher::Error>>
where
    K: Resource,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let mut filter = SpecFilter::default();
    events.filter_map(move |ev| {
        let out = match ev {
            Ok(ev) => filter.pass(ev).map(Ok),
            Err(e) => Some(Err(e)),
        };
        futures::future::ready(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodetopo_crds::NodeResourcePolicy;
    use watcher::Event;

    fn policy(name: &str, uid: &str, generation: i64, rv: &str) -> NodeResourcePolicy {
        let mut p = NodeResourcePolicy::new(name, Default::default());
        p.metadata.uid = Some(uid.into());
        p.metadata.generation = Some(generation);
        p.metadata.resource_version = Some(rv.into());
        p
    }

    /// What happened, the events, and the objects (`name@resourceVersion`) expected out.
    type Case = (
        &'static str,
        Vec<Event<NodeResourcePolicy>>,
        Vec<&'static str>,
    );

    fn names(events: Vec<Event<NodeResourcePolicy>>) -> Vec<String> {
        let mut f = SpecFilter::default();
        events
            .into_iter()
            .filter_map(|e| f.pass(e))
            .map(|p| {
                format!(
                    "{}@{}",
                    p.metadata.name.unwrap_or_default(),
                    p.metadata.resource_version.unwrap_or_default()
                )
            })
            .collect()
    }

    #[test]
    fn status_writes_are_dropped_spec_edits_and_deletes_pass() {
        let cases: Vec<Case> = vec![
            (
                "initial list passes every object",
                vec![
                    Event::Init,
                    Event::InitApply(policy("a", "u1", 1, "1")),
                    Event::InitApply(policy("b", "u2", 3, "2")),
                    Event::InitDone,
                ],
                vec!["a@1", "b@2"],
            ),
            (
                "a status write (same generation) is dropped, a spec edit passes",
                vec![
                    Event::Apply(policy("a", "u1", 1, "1")),
                    Event::Apply(policy("a", "u1", 1, "2")),
                    Event::Apply(policy("a", "u1", 2, "3")),
                    Event::Apply(policy("a", "u1", 2, "4")),
                ],
                vec!["a@1", "a@3"],
            ),
            (
                "a delete passes with its generation unchanged",
                vec![
                    Event::Apply(policy("a", "u1", 1, "1")),
                    Event::Delete(policy("a", "u1", 1, "2")),
                ],
                vec!["a@1", "a@2"],
            ),
            (
                "a re-created object (new uid) passes at generation 1",
                vec![
                    Event::Apply(policy("a", "u1", 1, "1")),
                    Event::Delete(policy("a", "u1", 1, "2")),
                    Event::Apply(policy("a", "u9", 1, "3")),
                ],
                vec!["a@1", "a@2", "a@3"],
            ),
            (
                "a re-list passes only what changed, and forgets what it did not list",
                vec![
                    Event::Apply(policy("a", "u1", 1, "1")),
                    Event::Apply(policy("b", "u2", 1, "2")),
                    Event::Init,
                    Event::InitApply(policy("a", "u1", 1, "5")),
                    Event::InitDone,
                    Event::Apply(policy("b", "u2", 1, "6")),
                ],
                vec!["a@1", "b@2", "b@6"],
            ),
            (
                "an object without a generation always passes",
                vec![
                    Event::Apply({
                        let mut p = policy("a", "u1", 1, "1");
                        p.metadata.generation = None;
                        p
                    }),
                    Event::Apply({
                        let mut p = policy("a", "u1", 1, "2");
                        p.metadata.generation = None;
                        p
                    }),
                ],
                vec!["a@1", "a@2"],
            ),
        ];
        let n = cases.len();
        for (what, events, want) in cases {
            assert_eq!(names(events), want, "{what}");
        }
        println!("{n} event sequences filtered as expected");
    }

    #[tokio::test]
    async fn the_stream_passes_errors_and_filtered_objects() {
        let events: Vec<Result<Event<NodeResourcePolicy>, watcher::Error>> = vec![
            Ok(Event::Apply(policy("a", "u1", 1, "1"))),
            Ok(Event::Apply(policy("a", "u1", 1, "2"))),
            Err(watcher::Error::NoResourceVersion),
            Ok(Event::Delete(policy("a", "u1", 1, "3"))),
        ];
        let out: Vec<Result<NodeResourcePolicy, watcher::Error>> =
            spec_changes(futures::stream::iter(events)).collect().await;
        let shape: Vec<String> = out
            .iter()
            .map(|r| match r {
                Ok(p) => p.metadata.resource_version.clone().unwrap_or_default(),
                Err(_) => "error".into(),
            })
            .collect();
        assert_eq!(shape, ["1", "error", "3"]);
    }
}
