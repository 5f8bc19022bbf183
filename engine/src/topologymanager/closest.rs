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
}

/// The largest distance for which integer sums order masks exactly as the kubelet's `f64`.
const EXACT_LIMIT: u64 = 1 << 32;

impl Matrix {
    /// The matrix over `within`, or `None` without distances or with a distance above 2^32.
    pub(crate) fn exact(numa: &NumaInfo, within: NumaMask) -> Option<Matrix> {
        let mut d = vec![0u64; 64 * 64];
        for i in within.ids() {
            let row = numa.distance_row(i)?;
            for j in within.ids() {
                let v = *row.get(j)?;
                if v > EXACT_LIMIT {
                    return None;
                }
                d[i * 64 + j] = v;
            }
        }
        Some(Matrix { d })
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
        // Nodes that cannot join the part now cannot join any larger part either.
        let allowed = NumaMask::from_bits(
            allowed
                .ids()
                .filter(|&y| (self.prune.lower_ok)(s.or(NumaMask::from_bits(1 << y))))
                .fold(0u64, |acc, y| acc | 1 << y),
        );
        if allowed.count() < r {
            return;
        }
        let r_us = r as usize;
        let mut costs: Vec<(u128, usize)> = allowed.ids().map(|y| (self.m.join(s, y), y)).collect();
        costs.sort_unstable();
        if let Some((bs, bm)) = self.best {
            // Twice the sum any completion adds: each new node y brings 2·join(s, y) plus its
            // pairs with the other r-1 new nodes, at least its r-1 cheapest pairs within
            // `allowed` (each pair is shared by two nodes, hence the factor 2 overall).
            let mut per_node: Vec<u128> = costs
                .iter()
                .map(|&(join, y)| {
                    let mut pairs: Vec<u128> = allowed
                        .ids()
                        .filter(|&z| z != y)
                        .map(|z| self.m.at(y, z) + self.m.at(z, y))
                        .collect();
                    pairs.sort_unstable();
                    2 * join + pairs[..r_us - 1].iter().sum::<u128>()
                })
                .collect();
            per_node.sort_unstable();
            let lb2 = 2 * sum + per_node[..r_us].iter().sum::<u128>();
            if lb2 > 2 * bs {
                return;
            }
            if lb2 == 2 * bs {
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
            self.rec(s.or(bit), sum + c, rest, r - 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The branch and bound equals sorting every mask by (integer sum, value), for random
    /// asymmetric matrices, widths and acceptance sets, with and without pruning hints.
    #[test]
    fn branch_and_bound_equals_exhaustive_sort() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for case in 0..400 {
            let n = 2 + rnd(11) as usize;
            let ids: Vec<usize> = (0..n).map(|i| i * 2 % 64 + (i >= 32) as usize).collect();
            let width = ids.iter().max().unwrap() + 1;
            let block = 1 + rnd(4) as usize;
            let nodes = ids
                .iter()
                .map(|&i| {
                    let row = (0..width)
                        .map(|j| {
                            if i == j {
                                10
                            } else if i / (2 * block) == j / (2 * block) {
                                11 + rnd(3)
                            } else {
                                20 + rnd(20)
                            }
                        })
                        .collect();
                    (i, Some(row))
                })
                .collect();
            let numa = NumaInfo::new(nodes, true).unwrap();
            let within = numa.default_affinity();
            let m = Matrix::exact(&numa, within).unwrap();
            let w = 1 + rnd(n as u64) as u32;
            let accept: u64 = x | rnd(u64::MAX);
            let banned = NumaMask::from_bits(if case % 3 == 0 {
                1 << ids[rnd(n as u64) as usize]
            } else {
                0
            });
            let ok = |mask: NumaMask| {
                mask.bits().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61 != (accept & 7)
                    && mask.and(banned).is_empty()
            };
            let mut all = Vec::new();
            crate::topologymanager::mask::for_each_subset_of_width(within, w, |mask| {
                all.push((numa.average_distance(mask), mask));
                true
            });
            all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let want = all.into_iter().map(|(_, mask)| mask).find(|mask| ok(*mask));
            let lower = |part: NumaMask| part.and(banned).is_empty();
            for prune in [
                Prune {
                    upper_ok: &|_| true,
                    lower_ok: &|_| true,
                },
                Prune {
                    upper_ok: &|_| true,
                    lower_ok: &lower,
                },
            ] {
                let mut okf = ok;
                let got = best_of_width(&m, within, w, &prune, &mut okf);
                assert_eq!(got, want, "case {case}: n {n} w {w}");
            }
        }
    }
}
