//! The best mask of one width under the KEP-3545 (prefer-closest) order, by branch and
//! bound instead of sorting all C(N, w) masks.
//!
//! For masks of equal width the kubelet compares average distances (sum over ordered pairs
//! divided by count², in `f64`), then integer values. When every distance is at most 2^32
//! the sums stay below 2^52, where the `f64` sums are exact and distinct sums give distinct
//! averages, so the order is exactly "smaller integer sum, then smaller mask". The search
//! builds masks node by node, cheapest join first, and prunes a branch when a lower bound on
//! its sum exceeds the best accepted mask's (or equals it and no completion can have a
//! smaller integer value). Larger distances fall back to sorting (see `Search::first_at_width`).

use super::{NumaInfo, NumaMask};

/// Pruning hints for searches over masks of one width: `upper_ok(u)` false means no mask
/// within `u` is accepted; `lower_ok(p)` false means no mask containing `p` is.
pub(crate) struct Prune<'a> {
    /// Checked on the union of the chosen part and everything still allowed.
    pub(crate) upper_ok: &'a dyn Fn(NumaMask) -> bool,
    /// Checked on the chosen part whenever it grows.
    pub(crate) lower_ok: &'a dyn Fn(NumaMask) -> bool,
}

/// Distances of the nodes of one machine, when small enough for exact integer ordering.
pub(crate) struct Matrix {
    d: Vec<u64>,
    min_off: u64,
}

/// The largest distance for which integer sums order masks exactly as the kubelet's `f64`.
const EXACT_LIMIT: u64 = 1 << 32;

impl Matrix {
    /// The matrix over `within`, or `None` without distances or with a distance above 2^32.
    pub(crate) fn exact(numa: &NumaInfo, within: NumaMask) -> Option<Matrix> {
        let mut d = vec![0u64; 64 * 64];
        let mut min_off = u64::MAX;
        for i in within.ids() {
            let row = numa.distance_row(i)?;
            for j in within.ids() {
                let v = *row.get(j)?;
                if v > EXACT_LIMIT {
                    return None;
                }
                d[i * 64 + j] = v;
                if i != j {
                    min_off = min_off.min(v);
                }
            }
        }
        Some(Matrix {
            d,
            min_off: if min_off == u64::MAX { 0 } else { min_off },
        })
    }

    fn at(&self, i: usize, j: usize) -> u128 {
        u128::from(self.d[i * 64 + j])
    }

    /// Sum added by joining `y` to `s`: its diagonal and both directions to every member.
    fn join(&self, s: NumaMask, y: usize) -> u128 {
        s.ids().map(|x| self.at(x, y) + self.at(y, x)).sum::<u128>() + self.at(y, y)
    }
}

/// The best (lowest sum, then lowest integer value) mask of width `w` within `within` that
/// `ok` accepts. `ok` is only asked about masks that would improve on the best so far;
/// `prune` drops branches that cannot lead to an accepted mask.
pub(crate) fn best_of_width(
    m: &Matrix,
    within: NumaMask,
    w: u32,
    prune: &Prune<'_>,
    ok: &mut dyn FnMut(NumaMask) -> bool,
) -> Option<NumaMask> {
    let mut search = Bnb {
        m,
        prune,
        ok,
        best: None,
    };
    if w >= 1 && w <= within.count() {
        search.rec(NumaMask::EMPTY, 0, within, w);
    }
    search.best.map(|(_, mask)| mask)
}

struct Bnb<'a> {
    m: &'a Matrix,
    prune: &'a Prune<'a>,
    ok: &'a mut dyn FnMut(NumaMask) -> bool,
    best: Option<(u128, NumaMask)>,
}

impl Bnb<'_> {
    fn improves(&self, sum: u128, mask: NumaMask) -> bool {
        self.best
            .is_none_or(|(bs, bm)| sum < bs || (sum == bs && mask < bm))
    }

    /// Extends `s` (sum `sum`) by `r` more nodes taken from `allowed`.
    fn rec(&mut self, s: NumaMask, sum: u128, allowed: NumaMask, r: u32) {
        if r == 0 {
            if self.improves(sum, s) && (self.ok)(s) {
                self.best = Some((sum, s));
            }
            return;
        }
        if allowed.count() < r || !(self.prune.upper_ok)(s.or(allowed)) {
            return;
        }
        let mut costs: Vec<(u128, usize)> = allowed.ids().map(|y| (self.m.join(s, y), y)).collect();
        costs.sort_unstable();
        if let Some((bs, bm)) = self.best {
            // Every completion adds r joins (each at least one of the r cheapest now) and
            // r(r-1) ordered pairs among the new nodes.
            let r_us = r as usize;
            let lb = sum
                + costs[..r_us].iter().map(|c| c.0).sum::<u128>()
                + u128::from(r) * u128::from(r - 1) * u128::from(self.m.min_off);
            if lb > bs {
                return;
            }
            if lb == bs {
                let lowest = allowed
                    .ids()
                    .take(r_us)
                    .fold(s, |acc, y| acc.or(NumaMask::from_bits(1 << y)));
                if lowest >= bm {
                    return;
                }
            }
        }
        let mut rest = allowed;
        for (c, y) in costs {
            if rest.count() < r {
                break;
            }
            let bit = NumaMask::from_bits(1 << y);
            rest = rest.minus(bit);
            let with = s.or(bit);
            if (self.prune.lower_ok)(with) {
                self.rec(with, sum + c, rest, r - 1);
            }
        }
    }
}
