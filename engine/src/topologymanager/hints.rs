//! What hint providers hand to the merge: explicit hint lists (the kubelet's shape) or
//! implicit [`HintSource`]s that describe a list without materialising 2^N hints.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::mask::iterate_bit_masks;
use super::{NumaMask, TopologyHint};

/// One resource's hints from one provider.
#[derive(Debug, Clone)]
pub enum ResourceHints {
    /// A nil hint list: no preference for this resource.
    DontCare,
    /// An explicit list, exactly as the kubelet's provider would return it. May be empty
    /// (the resource cannot be satisfied); may hold nil affinities and masks naming nodes the
    /// machine does not have (the merge clips those, as the kubelet does).
    Explicit(Vec<TopologyHint>),
    /// A list described by a [`HintSource`].
    Implicit(Arc<dyn HintSource>),
}

/// One provider's answer: `None` is the kubelet's nil map (as is an empty map); otherwise
/// resource name -> hints.
pub type ProviderHints = Option<BTreeMap<String, ResourceHints>>;

/// A hint list described without materialising its (up to 2^N) hints.
///
/// The list it stands for is the set of masks `m` (non-empty, within the machine) with
/// `lookup(m) == Some(preferred)`; order does not matter to the merge. It never contains a
/// nil affinity and never a mask outside the machine. An empty set means "cannot be
/// satisfied" (the kubelet's empty, non-nil list).
///
/// Only [`lookup`](HintSource::lookup) is required. Every other method has a correct
/// default derived from `lookup` or [`materialize`](HintSource::materialize) (which itself
/// defaults to enumerating all 2^N masks through `lookup`). Those defaults cost up to 2^N
/// lookups, so providers used on large machines override them with something cheap:
///
/// | method | must return | used by the merge for |
/// | --- | --- | --- |
/// | `min_width` | exact narrowest hint width | the best-non-preferred count `T` |
/// | `preferred_widths` | a range holding every preferred width (exact is fastest) | bounding the preferred search |
/// | `is_upward_closed` | `true` only if truly upward-closed | one lookup instead of an interval search |
/// | `any_hint_between` | exact (only asked of non-upward-closed sources) | the non-preferred search |
///
/// **An override must agree with `lookup`**: the merge relies on these answers for pruning,
/// and a wrong answer gives a wrong merge (the differential tests check their sources'
/// overrides against the defaults; providers should do the same).
///
/// `machine` is always the machine's default affinity (all its NUMA nodes).
pub trait HintSource: Send + Sync + std::fmt::Debug {
    /// `Some(preferred)` if `mask` (non-empty, within the machine) is a hint, else `None`.
    /// Must be cheap: the merge calls it many times (O(N) per call is the expectation).
    fn lookup(&self, mask: NumaMask) -> Option<bool>;

    /// The kubelet's explicit list for this machine: every hint, in the order the kubelet's
    /// `IterateBitMasks` visits the masks (by width, then lexicographically by position).
    /// Used for N <= 8, the reference merge and tests. The default enumerates all 2^N - 1
    /// masks through `lookup`, so it is only for small machines.
    fn materialize(&self, machine: NumaMask) -> Vec<TopologyHint> {
        let ids: Vec<usize> = machine.ids().collect();
        let mut out = Vec::new();
        iterate_bit_masks(&ids, |m| {
            if let Some(preferred) = self.lookup(m) {
                out.push(TopologyHint {
                    affinity: Some(m),
                    preferred,
                });
            }
        });
        out
    }

    /// The width (node count) of the narrowest hint; `None` when there is no hint at all.
    /// The merge needs it for the kubelet's best-non-preferred count. The default searches
    /// by increasing width with `lookup` (cheap for narrow sources, 2^N lookups for an empty
    /// one), which equals the minimum over `materialize`.
    fn min_width(&self, machine: NumaMask) -> Option<u32> {
        (1..=machine.count()).find(|&w| {
            let mut hit = false;
            super::mask::for_each_subset_of_width(machine, w, |m| {
                hit = self.lookup(m).is_some();
                !hit
            });
            hit
        })
    }

    /// `(narrowest, widest)` width among the **preferred** hints; `None` when no hint is
    /// preferred. Kubelet providers prefer exactly the hints of their minimal width, so this
    /// is usually `(w, w)`; the CPU manager's `align-by-socket` widens the range. The merge
    /// searches preferred masks only within this range. Bounds may be loose only in the safe
    /// direction: a range that contains every preferred width is correct, just slower.
    fn preferred_widths(&self, machine: NumaMask) -> Option<(u32, u32)> {
        let widths = self
            .materialize(machine)
            .iter()
            .filter(|h| h.preferred)
            .filter_map(|h| h.affinity)
            .map(NumaMask::count)
            .collect::<Vec<_>>();
        Some((*widths.iter().min()?, *widths.iter().max()?))
    }

    /// Whether some hint `a` satisfies `lo ⊆ a ⊆ hi` (`lo` non-empty, `hi` within the
    /// machine). The product merge asks this of sources that are not upward-closed (for
    /// upward-closed ones it asks `lookup(hi)` instead, which is equivalent). The default
    /// looks up every mask of the interval, smallest first: 2^|hi \ lo| lookups, so a
    /// non-monotone provider used on large machines should answer from its own structure.
    fn any_hint_between(&self, lo: NumaMask, hi: NumaMask) -> bool {
        if !lo.is_subset_of(hi) {
            return false;
        }
        let free = hi.minus(lo);
        if self.lookup(lo).is_some() {
            return true;
        }
        (1..=free.count()).any(|w| {
            let mut hit = false;
            super::mask::for_each_subset_of_width(free, w, |x| {
                hit = self.lookup(lo.or(x)).is_some();
                !hit
            });
            hit
        })
    }

    /// Monotonicity: `true` only if the hint set is **upward-closed** within the machine:
    /// whenever `a` is a hint, every `b` with `a ⊆ b ⊆ machine` is a hint too (preferred or
    /// not). The CPU and device providers' sets are ("enough free CPUs/devices in the
    /// mask"); the memory manager's is not (its NUMA-group rule excludes masks that mix a
    /// node used by a single-node allocation). `false` is always correct; `true` lets the
    /// merge decide "is there a hint between `lo` and `hi`" with one lookup of `hi` instead
    /// of a search of the interval. The default answers from `materialize` on machines of
    /// up to [`DERIVE_LIMIT`] nodes and says `false` (always safe) beyond.
    fn is_upward_closed(&self, machine: NumaMask) -> bool {
        if machine.count() > DERIVE_LIMIT {
            return false;
        }
        let hints: std::collections::HashSet<NumaMask> = self
            .materialize(machine)
            .iter()
            .filter_map(|h| h.affinity)
            .collect();
        hints.iter().all(|a| {
            // Every one-node extension of a hint must be a hint; by induction that covers
            // every superset within the machine.
            machine
                .minus(*a)
                .ids()
                .all(|id| hints.contains(&a.or(NumaMask::from_bits(1 << id))))
        })
    }
}

/// A kubelet provider's hint set (the CPU, memory and device managers'): a mask is a hint
/// when the provider's resources on its nodes can hold the request, preferred when it is
/// no wider than `minAffinitySize`. Each provider answers [`hint`](ProviderHintSet::hint)
/// and [`narrowest`](ProviderHintSet::narrowest) from its own counts; the one
/// [`HintSource`] implementation below serves all of them, and a provider overrides only
/// what its set does differently (the CPU manager's `align-by-socket` widens the preferred
/// range; the memory manager's NUMA-group rule makes its set not upward-closed).
pub trait ProviderHintSet: Send + Sync + std::fmt::Debug {
    /// `Some(preferred)` if `mask` is a hint ([`HintSource::lookup`]).
    fn hint(&self, mask: NumaMask) -> Option<bool>;

    /// The provider's NUMA node ids, ascending, with the nodes a hint may span (those
    /// below 64) and `minAffinitySize`.
    fn nodes(&self) -> ProviderNodes<'_>;

    /// The narrowest hint's width from the provider's structure ([`HintSource::min_width`]).
    fn narrowest(&self) -> Option<u32>;

    /// [`HintSource::preferred_widths`]. The default: no hint is narrower than
    /// `minAffinitySize` (free resources never exceed all of them), so a preferred hint
    /// exists iff the narrowest hint has exactly that width.
    fn preferred_range(&self) -> Option<(u32, u32)> {
        let w = self.narrowest()?;
        (w as usize == self.nodes().min_affinity).then_some((w, w))
    }

    /// [`HintSource::any_hint_between`]. The default, for a set that is upward-closed
    /// within the provider's nodes: the widest candidate decides.
    fn hint_between(&self, lo: NumaMask, hi: NumaMask) -> bool {
        let top = hi.and(self.nodes().universe);
        !lo.is_empty() && lo.is_subset_of(top) && self.hint(top).is_some()
    }

    /// [`HintSource::is_upward_closed`]. The default: upward-closed on a machine within
    /// the provider's nodes ("enough free resources in the mask" only grows with the mask).
    fn upward_closed(&self, machine: NumaMask) -> bool {
        machine.is_subset_of(self.nodes().universe)
    }
}

/// What [`ProviderHintSet::nodes`] returns.
#[derive(Debug, Clone, Copy)]
pub struct ProviderNodes<'a> {
    /// The provider's NUMA node ids, ascending.
    pub ids: &'a [usize],
    /// The nodes a hint may span.
    pub universe: NumaMask,
    /// The kubelet's `minAffinitySize`: the narrowest mask whose nodes could hold the
    /// request with all their resources free.
    pub min_affinity: usize,
}

impl<'a> ProviderNodes<'a> {
    /// The nodes `ids` (ascending), `universe` and `min_affinity` of a provider.
    pub fn new(ids: &'a [usize], universe: NumaMask, min_affinity: usize) -> Self {
        ProviderNodes {
            ids,
            universe,
            min_affinity,
        }
    }
}

impl<P: ProviderHintSet> HintSource for P {
    fn lookup(&self, mask: NumaMask) -> Option<bool> {
        self.hint(mask)
    }

    fn materialize(&self, machine: NumaMask) -> Vec<TopologyHint> {
        super::subsets::materialize_within(self.nodes().ids, machine, |m| self.hint(m))
    }

    fn min_width(&self, _machine: NumaMask) -> Option<u32> {
        self.narrowest()
    }

    fn preferred_widths(&self, _machine: NumaMask) -> Option<(u32, u32)> {
        self.preferred_range()
    }

    fn any_hint_between(&self, lo: NumaMask, hi: NumaMask) -> bool {
        self.hint_between(lo, hi)
    }

    fn is_upward_closed(&self, machine: NumaMask) -> bool {
        self.upward_closed(machine)
    }
}

/// The largest machine on which [`HintSource::is_upward_closed`]'s default enumerates.
pub const DERIVE_LIMIT: u32 = 16;

/// The outcome of a merge: the chosen hint and whether the policy admits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeResult {
    /// The merged hint (`affinity: None` only from `none` and `single-numa-node`).
    pub hint: TopologyHint,
    /// Whether the policy admits the pod/container (rejections are `TopologyAffinityError`).
    pub admit: bool,
}

/// The rejection reason the kubelet reports when a policy does not admit.
pub const TOPOLOGY_AFFINITY_ERROR: &str = "TopologyAffinityError";
