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
//!
//! Cost per search node: O(N) to update the join costs, O(N·r) for the bound (each node's
//! neighbours are pre-sorted by pair cost once per merge, so "its r-1 cheapest pairs among
//! the allowed nodes" is a short scan), no allocation. The bound is computed before the
//! caller's `lower_ok` filter (which calls into hint sources), and the last node of a mask
//! is chosen by one pass in (join cost, id) order: the first accepted candidate is the best
//! completion, so `ok` is asked at most once per improving leaf.

use super::{NumaInfo, NumaMask};

/// Pruning hints for searches over masks of one width: `upper_ok(u)` false means no mask
/// within `u` is accepted; `lower_ok(p)` false means no mask containing `p` is.
pub(crate) struct Prune<'a> {
    /// Checked on the union of the chosen part and everything still allowed.
    pub(crate) upper_ok: &'a dyn Fn(NumaMask) -> bool,
    /// Checked on the chosen part whenever it grows.
    pub(crate) lower_ok: &'a dyn Fn(NumaMask) -> bool,
}

/// Distances of the nodes of one machine, when small enough for exact integer ordering,
/// with each node's neighbours pre-sorted by pair cost for the lower bound.
pub(crate) struct Matrix {
    /// `pair[y * 64 + z] = d[y][z] + d[z][y]`: what the ordered pairs of `y` and `z` add.
    pair: Vec<u64>,
    /// `d[y][y]`.
    diag: [u64; 64],
    /// For node `y` (within the matrix's mask): the other nodes, ascending by (pair cost, id),
    /// at `near[y * 64..y * 64 + near_len[y]]`.
    near: Vec<u8>,
    near_len: [u8; 64],
}

/// The largest distance for which integer sums order masks exactly as the kubelet's `f64`.
const EXACT_LIMIT: u64 = 1 << 32;

impl Matrix {
    /// The matrix over `within`, or `None` without distances or with a distance above 2^32.
    /// Cost: O(N² log N), paid once per merge.
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
        let mut pair = vec![0u64; 64 * 64];
        let mut diag = [0u64; 64];
        let mut near = vec![0u8; 64 * 64];
        let mut near_len = [0u8; 64];
        for y in within.ids() {
            diag[y] = d[y * 64 + y];
            let mut others: Vec<(u64, u8)> = Vec::with_capacity(64);
            for z in within.ids().filter(|&z| z != y) {
                let p = d[y * 64 + z] + d[z * 64 + y];
                pair[y * 64 + z] = p;
                others.push((p, z as u8));
            }
            others.sort_unstable();
            for (k, (_, z)) in others.iter().enumerate() {
                near[y * 64 + k] = *z;
            }
            near_len[y] = others.len() as u8;
        }
        Some(Matrix {
            pair,
            diag,
            near,
            near_len,
        })
    }

    fn pair(&self, y: usize, z: usize) -> u64 {
        self.pair[y * 64 + z]
    }

    /// The sum of `y`'s `k` cheapest pair costs to other nodes of `allowed` (k <= what
    /// `allowed` holds besides `y`).
    fn cheapest_pairs(&self, y: usize, allowed: u64, k: usize) -> u64 {
        let mut acc = 0;
        let mut left = k;
        for &z in &self.near[y * 64..y * 64 + usize::from(self.near_len[y])] {
            if left == 0 {
                break;
            }
            if allowed >> z & 1 == 1 {
                acc += self.pair(y, usize::from(z));
                left -= 1;
            }
        }
        acc
    }
}

/// The best (lowest sum, then lowest integer value) mask of width `w` within `within` that
/// `ok` accepts. `ok` is only asked about masks that would improve on the best so far;
/// `prune` drops branches that cannot lead to an accepted mask. `steps` counts the search
/// nodes visited (for the merge's budget); the search stops early once `stop()` says so.
pub(crate) fn best_of_width(
    m: &Matrix,
    within: NumaMask,
    w: u32,
    prune: &Prune<'_>,
    ok: &mut dyn FnMut(NumaMask) -> bool,
    stop: &dyn Fn(u64) -> bool,
) -> Option<NumaMask> {
    let mut search = Bnb {
        m,
        prune,
        ok,
        stop,
        best: None,
    };
    if w >= 1 && w <= within.count() {
        let join = m.diag;
        search.rec(NumaMask::EMPTY, 0, within, w, &join);
    }
    search.best.map(|(_, mask)| mask)
}

struct Bnb<'a> {
    m: &'a Matrix,
    prune: &'a Prune<'a>,
    ok: &'a mut dyn FnMut(NumaMask) -> bool,
    stop: &'a dyn Fn(u64) -> bool,
    best: Option<(u64, NumaMask)>,
}

/// Sort key of a node by its join cost, then id (so equal costs come in mask order).
fn keyed(cost: u64, y: usize) -> u64 {
    cost << 6 | y as u64
}

impl Bnb<'_> {
    /// Extends `s` (sum `sum`) by `r` more nodes taken from `allowed`; `join[y]` is what
    /// adding node `y` to `s` adds to the sum (its diagonal and both directions to every
    /// member of `s`).
    ///
    /// Sums are exact in `u64`: at most 64² ordered pairs of distances <= 2^32 is < 2^45, and
    /// the sort keys shift them by 6 bits.
    fn rec(&mut self, s: NumaMask, sum: u64, allowed: NumaMask, r: u32, join: &[u64; 64]) {
        if allowed.count() < r || (self.stop)(1 + u64::from(allowed.count())) {
            return;
        }
        if !(self.prune.upper_ok)(s.or(allowed)) {
            return;
        }
        if r == 1 {
            return self.leaves(s, sum, allowed, join);
        }
        // The bound first, on the nodes still allowed: when it prunes, the (costlier)
        // `lower_ok` filter is never asked.
        if !self.may_improve(s, sum, allowed, r, join) {
            return;
        }
        // Nodes that cannot join the part now cannot join any larger part either.
        let mut keep = 0u64;
        for y in allowed.ids() {
            if (self.prune.lower_ok)(s.or(NumaMask::from_bits(1 << y))) {
                keep |= 1 << y;
            }
        }
        if keep != allowed.bits() && !self.may_improve(s, sum, NumaMask::from_bits(keep), r, join) {
            return;
        }
        let allowed = NumaMask::from_bits(keep);
        let mut order = [0u64; 64];
        let mut n = 0;
        for y in allowed.ids() {
            order[n] = keyed(join[y], y);
            n += 1;
        }
        let order = &mut order[..n];
        order.sort_unstable();
        let mut rest = allowed;
        let mut child = [0u64; 64];
        for &key in order.iter() {
            let (c, y) = (key >> 6, (key & 63) as usize);
            if rest.count() < r {
                break;
            }
            // Children come by ascending join cost and every completion adds at least that.
            if self.best.is_some_and(|(bs, _)| sum + c > bs) {
                break;
            }
            let bit = NumaMask::from_bits(1 << y);
            rest = rest.minus(bit);
            for z in rest.ids() {
                child[z] = join[z] + self.m.pair(y, z);
            }
            self.rec(s.or(bit), sum + c, rest, r - 1, &child);
        }
    }

    /// Whether some `r`-node completion of `s` within `allowed` could beat the best so far
    /// (always true before one is found; false when `allowed` is too small).
    fn may_improve(
        &self,
        s: NumaMask,
        sum: u64,
        allowed: NumaMask,
        r: u32,
        join: &[u64; 64],
    ) -> bool {
        let r_us = r as usize;
        let n = allowed.count() as usize;
        if n < r_us {
            return false;
        }
        let Some((bs, bm)) = self.best else {
            return true;
        };
        // Twice the sum of any completion X (|X| = r, X ⊆ allowed) is
        // 2·sum + Σ_{y∈X} (2·join[y] + Σ_{z∈X, z≠y} pair(y, z)): each pair inside X is
        // counted from both ends. Each bracket is at least 2·join[y] plus y's r-1 cheapest
        // pairs within `allowed`, so the r smallest such terms bound it from below.
        let mut per_node = [0u64; 64];
        for (k, y) in allowed.ids().enumerate() {
            per_node[k] = 2 * join[y] + self.m.cheapest_pairs(y, allowed.bits(), r_us - 1);
        }
        let per_node = &mut per_node[..n];
        per_node.select_nth_unstable(r_us - 1);
        let lb2 = 2 * sum + per_node[..r_us].iter().sum::<u64>();
        if lb2 != 2 * bs {
            return lb2 < 2 * bs;
        }
        // Equal sums: only a smaller mask could still win.
        let lowest = allowed
            .ids()
            .take(r_us)
            .fold(s, |acc, y| acc.or(NumaMask::from_bits(1 << y)));
        lowest < bm
    }

    /// The last node: candidates by ascending (join cost, id), i.e. by (sum, mask), so the
    /// first accepted one is the best completion of `s`, and none after an unimproving one
    /// can improve.
    fn leaves(&mut self, s: NumaMask, sum: u64, allowed: NumaMask, join: &[u64; 64]) {
        let mut order = [0u64; 64];
        let mut n = 0;
        for y in allowed.ids() {
            order[n] = keyed(join[y], y);
            n += 1;
        }
        let order = &mut order[..n];
        order.sort_unstable();
        for &key in order.iter() {
            let (c, y) = (key >> 6, (key & 63) as usize);
            let mask = s.or(NumaMask::from_bits(1 << y));
            let total = sum + c;
            if let Some((bs, bm)) = self.best {
                if total > bs || (total == bs && mask >= bm) {
                    return;
                }
            }
            if (self.prune.lower_ok)(mask) && (self.ok)(mask) {
                self.best = Some((total, mask));
                return;
            }
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
                let got = best_of_width(&m, within, w, &prune, &mut okf, &|_| false);
                assert_eq!(got, want, "case {case}: n {n} w {w}");
            }
        }
    }
}
