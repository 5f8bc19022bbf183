//! Subsets of a NUMA node list in the kubelet's enumeration order, and the width helpers
//! the hint providers share (memory manager, device manager, the CPU hint adapter).
//!
//! Every provider follows the same kubelet pattern: a mask is a hint when the resources
//! *available* under it satisfy the request, and a hint is preferred when its width equals
//! the narrowest width under which the *whole machine's* resources could satisfy the request
//! (`minAffinitySize`). The implicit sources precompute that width once, so a lookup costs
//! a pass over the mask's nodes.

use super::{NumaMask, TopologyHint};

/// Calls `visit` for every non-empty subset of `ids` in the kubelet's
/// `bitmask.IterateBitMasks` order: by increasing width, and within a width in the
/// lexicographic order of the chosen positions of `ids`.
pub(crate) fn for_each_mask(ids: &[usize], mut visit: impl FnMut(NumaMask)) {
    fn rec(ids: &[usize], start: usize, left: usize, acc: u64, visit: &mut dyn FnMut(NumaMask)) {
        if left == 0 {
            visit(NumaMask::from_bits(acc));
            return;
        }
        for i in start..=ids.len() - left {
            rec(ids, i + 1, left - 1, acc | (1u64 << ids[i]), visit);
        }
    }
    for width in 1..=ids.len() {
        rec(ids, 0, width, 0, &mut visit);
    }
}

/// Calls `visit` for every subset of `ids` of exactly `width` elements, in the same order as
/// [`for_each_mask`]; stops early when `visit` returns `true` and reports whether it did.
pub(crate) fn any_mask_of_width(
    ids: &[usize],
    width: usize,
    mut visit: impl FnMut(NumaMask) -> bool,
) -> bool {
    fn rec(
        ids: &[usize],
        start: usize,
        left: usize,
        acc: u64,
        visit: &mut dyn FnMut(NumaMask) -> bool,
    ) -> bool {
        if left == 0 {
            return visit(NumaMask::from_bits(acc));
        }
        (start..=ids.len() - left).any(|i| rec(ids, i + 1, left - 1, acc | (1u64 << ids[i]), visit))
    }
    width <= ids.len() && rec(ids, 0, width, 0, &mut visit)
}

/// The smallest `w` such that the `w` largest of `amounts` sum to at least `request`, or
/// `None` when even all of them fall short. With one number per NUMA node this is the
/// kubelet's `minAffinitySize` for a single resource: the narrowest mask that could hold the
/// request is made of the largest nodes.
pub(crate) fn min_width_single(amounts: &[u64], request: u64) -> Option<usize> {
    let mut sorted = amounts.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let mut sum = 0u64;
    if request == 0 {
        return Some(if sorted.is_empty() { 0 } else { 1 });
    }
    for (i, a) in sorted.iter().enumerate() {
        sum = sum.saturating_add(*a);
        if sum >= request {
            return Some(i + 1);
        }
    }
    None
}

/// A kubelet-ordered list of the masks over `ids` for which `lookup` answers `Some`.
/// [`materialize_with`] over the provider's nodes that lie in `machine` (the trait's
/// `materialize`: a machine narrower than the provider's node list is honoured by filtering).
pub(crate) fn materialize_within(
    ids: &[usize],
    machine: NumaMask,
    lookup: impl Fn(NumaMask) -> Option<bool>,
) -> Vec<TopologyHint> {
    let ids: Vec<usize> = ids.iter().copied().filter(|i| machine.is_set(*i)).collect();
    materialize_with(&ids, lookup)
}

pub(crate) fn materialize_with(
    ids: &[usize],
    lookup: impl Fn(NumaMask) -> Option<bool>,
) -> Vec<TopologyHint> {
    let mut out = Vec::new();
    for_each_mask(ids, |m| {
        if let Some(preferred) = lookup(m) {
            out.push(TopologyHint {
                affinity: Some(m),
                preferred,
            });
        }
    });
    out
}

/// True when `mask` is non-empty and names only nodes of `universe`; any other mask is
/// never in a provider's list.
pub(crate) fn within(mask: NumaMask, universe: NumaMask) -> bool {
    !mask.is_empty() && mask.is_subset_of(universe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_iteration_order() {
        let mut seen = Vec::new();
        for_each_mask(&[0, 2, 5], |m| seen.push(m.bits()));
        assert_eq!(
            seen,
            vec![0b1, 0b100, 0b100000, 0b101, 0b100001, 0b100100, 0b100101]
        );
        let mut w2 = Vec::new();
        any_mask_of_width(&[0, 2, 5], 2, |m| {
            w2.push(m.bits());
            false
        });
        assert_eq!(w2, vec![0b101, 0b100001, 0b100100]);
        assert!(!any_mask_of_width(&[0], 2, |_| true));
    }

    #[test]
    fn min_width() {
        assert_eq!(min_width_single(&[4, 8, 2], 9), Some(2));
        assert_eq!(min_width_single(&[4, 8, 2], 8), Some(1));
        assert_eq!(min_width_single(&[4, 8, 2], 15), None);
        assert_eq!(min_width_single(&[4, 8, 2], 14), Some(3));
    }
}
