//! The steps both merge implementations share: flattening providers into resource lists,
//! the best-non-preferred count `T`, and the kubelet's comparison of two merged hints.

use std::borrow::Cow;

use super::{HintSource, NumaInfo, NumaMask, ProviderHints, ResourceHints, TmPolicy, TopologyHint};

/// `[{nil, preferred}]`: a nil provider map or nil resource list.
pub(crate) const DONT_CARE: &[TopologyHint] = &[TopologyHint {
    affinity: None,
    preferred: true,
}];
/// `[{nil, non-preferred}]`: an empty resource list.
pub(crate) const UNSATISFIABLE: &[TopologyHint] = &[TopologyHint {
    affinity: None,
    preferred: false,
}];

/// One resource's hint list after flattening.
pub(crate) enum List<'a> {
    /// Explicit hints (possibly the don't-care or unsatisfiable singletons).
    Hints(Cow<'a, [TopologyHint]>),
    /// A non-empty implicit source (an empty one flattens to [`UNSATISFIABLE`]).
    Source(&'a dyn HintSource),
}

/// Step 1 of the kubelet's merge: one list per resource, providers in order. A source is
/// asked whether it is empty through `min_width` (cheap for real providers).
pub(crate) fn flatten<'a>(providers: &'a [ProviderHints], machine: NumaMask) -> Vec<List<'a>> {
    let mut out = Vec::new();
    for p in providers {
        match p {
            None => out.push(List::Hints(Cow::Borrowed(DONT_CARE))),
            Some(m) if m.is_empty() => out.push(List::Hints(Cow::Borrowed(DONT_CARE))),
            Some(m) => {
                for hints in m.values() {
                    out.push(match hints {
                        ResourceHints::DontCare => List::Hints(Cow::Borrowed(DONT_CARE)),
                        ResourceHints::Explicit(v) if v.is_empty() => {
                            List::Hints(Cow::Borrowed(UNSATISFIABLE))
                        }
                        ResourceHints::Explicit(v) => List::Hints(Cow::Borrowed(v.as_slice())),
                        ResourceHints::Implicit(s) => {
                            if s.min_width(machine).is_some() {
                                List::Source(s.as_ref())
                            } else {
                                List::Hints(Cow::Borrowed(UNSATISFIABLE))
                            }
                        }
                    });
                }
            }
        }
    }
    out
}

/// Step 2 (single-numa-node): keep preferred hints whose affinity is nil or one node.
pub(crate) fn filter_single_numa(hints: &[TopologyHint]) -> Vec<TopologyHint> {
    hints
        .iter()
        .filter(|h| h.preferred && h.affinity.is_none_or(|a| a.count() == 1))
        .copied()
        .collect()
}

/// The single-NUMA filter of a source: its preferred one-node hints, ascending.
pub(crate) fn filter_single_numa_source(
    s: &dyn HintSource,
    machine: NumaMask,
) -> Vec<TopologyHint> {
    machine
        .ids()
        .map(|id| NumaMask::from_bits(1 << id))
        .filter(|m| s.lookup(*m) == Some(true))
        .map(|m| TopologyHint {
            affinity: Some(m),
            preferred: true,
        })
        .collect()
}

/// Step 3's per-list term: the count of the narrowest non-nil affinity, if any.
pub(crate) fn narrowest_count(hints: &[TopologyHint]) -> Option<u32> {
    hints
        .iter()
        .filter_map(|h| h.affinity)
        .map(NumaMask::count)
        .min()
}

/// The fold's comparison (step 6), with `T` and the mask order fixed.
pub(crate) struct Chooser<'a> {
    numa: &'a NumaInfo,
    closest: bool,
    /// The best-non-preferred affinity count `T`.
    pub(crate) t: i64,
}

impl<'a> Chooser<'a> {
    /// The comparison of `policy` (closest only with prefer-closest and not single-numa-node).
    pub(crate) fn new(numa: &'a NumaInfo, policy: TmPolicy, prefer_closest: bool, t: i64) -> Self {
        Chooser {
            numa,
            closest: prefer_closest && policy != TmPolicy::SingleNumaNode,
            t,
        }
    }

    /// Whether the mask order is the closest (KEP-3545) one.
    pub(crate) fn is_closest(&self) -> bool {
        self.closest
    }

    /// The kubelet's `compareNUMAAffinityMasks`: true when `candidate` replaces `current`.
    pub(crate) fn better_mask(&self, current: NumaMask, candidate: NumaMask) -> bool {
        if current == candidate {
            return false;
        }
        let best = if self.closest {
            self.numa.closest(current, candidate)
        } else {
            self.numa.narrowest(current, candidate)
        };
        best == candidate
    }

    /// The kubelet's `compare`: the hint the fold keeps.
    pub(crate) fn compare(
        &self,
        current: Option<TopologyHint>,
        candidate: TopologyHint,
    ) -> Option<TopologyHint> {
        let cmask = candidate.affinity.unwrap_or(NumaMask::EMPTY);
        if cmask.count() == 0 {
            return current;
        }
        let Some(cur) = current else {
            return Some(candidate);
        };
        let bmask = cur.affinity.unwrap_or(NumaMask::EMPTY);
        let pick = |take: bool| if take { Some(candidate) } else { Some(cur) };
        match (cur.preferred, candidate.preferred) {
            (false, true) => Some(candidate),
            (true, false) => Some(cur),
            (true, true) => pick(self.better_mask(bmask, cmask)),
            (false, false) => pick(self.non_preferred_wins(bmask, cmask)),
        }
    }

    /// The winner among distinct non-preferred merged masks, as the fold would keep it:
    /// `non_preferred_wins` is a strict total order (by the width rank below, then the mask
    /// order), so the winner is its minimum whatever the order of `masks`. Cost: one pass
    /// over the masks, plus one average distance per mask of the winning width with
    /// prefer-closest.
    pub(crate) fn best_non_preferred_of(&self, masks: &[NumaMask]) -> Option<NumaMask> {
        let t = self.t;
        // T first, then below T by descending width, then above T by ascending width.
        let rank = |m: &NumaMask| {
            let c = i64::from(m.count());
            if c == t {
                0
            } else if c < t {
                t - c
            } else {
                c
            }
        };
        let best_rank = masks.iter().filter(|m| !m.is_empty()).map(rank).min()?;
        let ties = masks
            .iter()
            .filter(|m| !m.is_empty() && rank(m) == best_rank);
        if self.closest {
            // The kubelet's Closest among equal widths: lower average, then lower value.
            ties.map(|m| (self.numa.average_distance(*m), *m))
                .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
                .map(|(_, m)| m)
        } else {
            ties.min().copied()
        }
    }

    /// Both non-preferred: whether `candidate` replaces `current` under the `T` rules.
    pub(crate) fn non_preferred_wins(&self, current: NumaMask, candidate: NumaMask) -> bool {
        let (c, k, t) = (
            i64::from(current.count()),
            i64::from(candidate.count()),
            self.t,
        );
        if c > t {
            self.better_mask(current, candidate)
        } else if c == t {
            k == t && self.better_mask(current, candidate)
        } else if k > t {
            false
        } else if k == t {
            true
        } else if k != c {
            k > c
        } else {
            self.better_mask(current, candidate)
        }
    }
}

/// Steps 6-7 and the policy's verdict, given the fold's winner.
pub(crate) fn finish(
    policy: TmPolicy,
    numa: &NumaInfo,
    best: Option<TopologyHint>,
) -> (TopologyHint, bool) {
    let default = numa.default_affinity();
    let mut hint = best.unwrap_or(TopologyHint {
        affinity: Some(default),
        preferred: false,
    });
    match policy {
        TmPolicy::None => (
            TopologyHint {
                affinity: None,
                preferred: false,
            },
            true,
        ),
        TmPolicy::BestEffort => (hint, true),
        TmPolicy::Restricted => (hint, hint.preferred),
        TmPolicy::SingleNumaNode => {
            if hint.affinity == Some(default) {
                hint.affinity = None;
            }
            (hint, hint.preferred)
        }
    }
}
