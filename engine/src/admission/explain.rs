//! What the topology manager saw for one container: every hint provider's hints and the
//! merge, recorded during a real admission (so it is exactly the input the decision used,
//! including what earlier containers of the same pod already took).
//!
//! [`NodeAdmitter::admit_explained`] admits a pod as [`NodeAdmitter::admit`] does and, when
//! the merge for the named container runs, records the providers' answers (implicit hint
//! lists are listed out on machines of up to [`LIST_LIMIT`] NUMA nodes) and the merge
//! result. The admission itself is unchanged by the recording.

use super::{NodeAdmitter, PodAdmission};
use crate::pod::Pod;
use crate::topologymanager::{merge, MergeResult, ProviderHints, ResourceHints, TopologyHint};

/// Implicit hint lists are listed out on machines with at most this many NUMA nodes (a list
/// can hold 2^N - 1 hints).
pub const LIST_LIMIT: usize = 8;

/// The hint-provider names, in the order the admitter asks them.
pub const PROVIDERS: [&str; 3] = ["cpu", "memory", "devices"];

/// One resource's hints from one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HintList {
    /// No preference (the kubelet's nil list).
    DontCare,
    /// Every hint, in the kubelet's order; empty = the resource cannot be satisfied.
    Listed(Vec<TopologyHint>),
    /// An implicit list on a machine too large to list it.
    NotListed,
}

/// One provider's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderView {
    /// `cpu`, `memory` or `devices`.
    pub provider: &'static str,
    /// Resource name -> hints; empty: the provider has no preference (nil map).
    pub resources: Vec<(String, HintList)>,
}

/// What the topology manager saw and decided for one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The container the merge was for (in pod scope, the pod's merge).
    pub container: String,
    /// Every provider's hints.
    pub providers: Vec<ProviderView>,
    /// The merge result, or the merge's error message.
    pub merged: Result<MergeResult, String>,
}

/// Recording state while [`NodeAdmitter::admit_explained`] runs.
#[derive(Debug, Clone)]
pub(super) struct Trace {
    container: String,
    found: Option<Explanation>,
}

impl NodeAdmitter {
    /// Admits `pod` exactly as [`NodeAdmitter::admit`] and returns what the topology
    /// manager saw for `container`: `None` when no merge ran for it (policy `none`, or an
    /// earlier container of the pod was refused first).
    pub fn admit_explained(
        &mut self,
        pod: &Pod,
        container: &str,
    ) -> (PodAdmission, Option<Explanation>) {
        self.trace = Some(Trace {
            container: container.to_string(),
            found: None,
        });
        let admission = self.admit(pod);
        let found = self.trace.take().and_then(|t| t.found);
        (admission, found)
    }

    /// Records the providers' answers and the merge, when tracing `container`.
    pub(super) fn record(&mut self, providers: &[ProviderHints], container: &str) {
        let Some(numa) = &self.tm.numa else { return };
        let Some(trace) = &self.trace else { return };
        if trace.container != container || trace.found.is_some() {
            return;
        }
        let machine = numa.default_affinity();
        let listable = machine.ids().count() <= LIST_LIMIT;
        let views = providers
            .iter()
            .zip(PROVIDERS)
            .map(|(p, name)| ProviderView {
                provider: name,
                resources: p
                    .iter()
                    .flatten()
                    .map(|(r, h)| {
                        let list = match h {
                            ResourceHints::DontCare => HintList::DontCare,
                            ResourceHints::Explicit(l) => HintList::Listed(l.clone()),
                            ResourceHints::Implicit(s) if listable => {
                                HintList::Listed(s.materialize(machine))
                            }
                            ResourceHints::Implicit(_) => HintList::NotListed,
                        };
                        (r.clone(), list)
                    })
                    .collect(),
            })
            .collect();
        let merged =
            merge(self.tm.policy, numa, &self.tm.options, providers).map_err(|e| e.to_string());
        if let Some(t) = &mut self.trace {
            t.found = Some(Explanation {
                container: container.to_string(),
                providers: views,
                merged,
            });
        }
    }
}
