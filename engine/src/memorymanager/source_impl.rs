//! The cheap answers of [`MemoryHintSource`] (narrowest hint, interval search,
//! monotonicity), derived from the structure of the Memory Manager's hint set instead of an
//! enumeration of masks.

use super::hints::{min_affinity, MemoryHintSource};
use crate::topologymanager::{NumaMask, ProviderHintSet, ProviderNodes};

impl MemoryHintSource {
    /// Used nodes' groups of several nodes, and the unused nodes.
    fn groups_and_unused(&self) -> (Vec<NumaMask>, NumaMask) {
        let mut groups: Vec<NumaMask> = Vec::new();
        let mut unused = 0u64;
        for (i, id) in self.ids.iter().enumerate() {
            if self.assignments[i] == 0 {
                unused |= 1 << id;
            } else if self.cells[i].count() > 1 && !groups.contains(&self.cells[i]) {
                groups.push(self.cells[i]);
            }
        }
        (groups, NumaMask::from_bits(unused))
    }
}

impl ProviderHintSet for MemoryHintSource {
    /// The narrowest hint's width, from the structure of the hint set: single nodes, the
    /// existing groups, masks with reusable memory, and masks of two or more unused nodes
    /// (free sums only grow there, so the narrowest is a minimal-width search on free).
    fn narrowest(&self) -> Option<u32> {
        let mut best: Option<u32> = None;
        let mut consider = |w: u32| best = Some(best.map_or(w, |b| b.min(w)));
        if self
            .ids
            .iter()
            .any(|id| self.lookup(NumaMask::from_bits(1 << id)).is_some())
        {
            return Some(1);
        }
        let (groups, unused) = self.groups_and_unused();
        for g in groups
            .iter()
            .copied()
            .chain(self.reusable.keys().map(|b| NumaMask::from_bits(*b)))
        {
            if self.lookup(g).is_some() {
                consider(g.count());
            }
        }
        if unused.count() >= 2 {
            let ids: Vec<usize> = unused.ids().collect();
            let free: Vec<Vec<u64>> = ids
                .iter()
                .filter_map(|id| self.ids.binary_search(id).ok())
                .map(|i| self.free[i].clone())
                .collect();
            if let Some(w) = min_affinity(&ids, &free, &self.request) {
                consider(w.max(2) as u32);
            }
        }
        best
    }

    fn hint(&self, mask: NumaMask) -> Option<bool> {
        self.lookup(mask)
    }

    fn nodes(&self) -> ProviderNodes<'_> {
        ProviderNodes::new(&self.ids, self.universe, self.min_affinity)
    }

    fn hint_between(&self, lo: NumaMask, hi: NumaMask) -> bool {
        if lo.is_empty() || !lo.is_subset_of(hi) {
            return false;
        }
        if lo.count() == 1 && self.lookup(lo).is_some() {
            return true;
        }
        let (groups, unused) = self.groups_and_unused();
        let exact = groups
            .iter()
            .copied()
            .chain(self.reusable.keys().map(|b| NumaMask::from_bits(*b)))
            .any(|g| lo.is_subset_of(g) && g.is_subset_of(hi) && self.lookup(g).is_some());
        if exact {
            return true;
        }
        // Masks of unused nodes only: the widest one within `hi` decides.
        let top = hi.and(unused);
        top.count() >= 2 && lo.is_subset_of(top) && self.lookup(top).is_some()
    }

    fn upward_closed(&self, machine: NumaMask) -> bool {
        // Without any placed block or reusable memory only the sums matter, and they grow.
        machine.is_subset_of(self.universe)
            && self.assignments.iter().all(|a| *a == 0)
            && self.reusable.is_empty()
    }
}
