//! The reference merge: the kubelet's `Merge` transcribed literally (flatten, filter, cross
//! product with the first list outermost, merge each permutation, sequential fold).
//!
//! Its cost is the product of the hint-list lengths (implicit sources are materialised, 2^N
//! hints each), which is exactly why the kubelet stalls on large machines. It exists to
//! check the product merge against; it refuses inputs whose cross product exceeds
//! [`PERMUTATION_LIMIT`] instead of running for hours.

use super::lists::{filter_single_numa, finish, flatten, narrowest_count, Chooser, List};
use super::{MergeResult, NumaInfo, ProviderHints, TmError, TmOptions, TmPolicy, TopologyHint};

/// The largest cross product the reference enumerates.
pub const PERMUTATION_LIMIT: u128 = 200_000_000;

/// The kubelet's policy `Merge`, literally. Same contract as [`super::merge`].
pub fn merge(
    policy: TmPolicy,
    numa: &NumaInfo,
    opts: &TmOptions,
    providers: &[ProviderHints],
) -> Result<MergeResult, TmError> {
    if policy == TmPolicy::None {
        let (hint, admit) = finish(policy, numa, None);
        return Ok(MergeResult { hint, admit });
    }
    let default = numa.default_affinity();
    let mut lists: Vec<Vec<TopologyHint>> = flatten(providers, default)
        .into_iter()
        .map(|l| match l {
            List::Hints(h) => h.into_owned(),
            List::Source(s) => s.materialize(default),
        })
        .collect();
    if policy == TmPolicy::SingleNumaNode {
        lists = lists.iter().map(|l| filter_single_numa(l)).collect();
    }
    let t = lists
        .iter()
        .filter_map(|l| narrowest_count(l))
        .max()
        .map_or(0, i64::from);
    let chooser = Chooser::new(numa, policy, opts.prefer_closest_numa_nodes, t);

    let permutations = lists
        .iter()
        .fold(1u128, |acc, l| acc.saturating_mul(l.len() as u128));
    if permutations > PERMUTATION_LIMIT {
        return Err(TmError::TooManyPermutations {
            permutations,
            limit: PERMUTATION_LIMIT,
        });
    }
    let mut best: Option<TopologyHint> = None;
    if lists.iter().all(|l| !l.is_empty()) {
        // Odometer over the lists, the last list turning fastest (first list outermost).
        // Zero lists: exactly one, empty, permutation.
        let mut idx = vec![0usize; lists.len()];
        'outer: loop {
            let mut mask = default;
            let mut preferred = true;
            let mut first = None;
            for (l, &i) in lists.iter().zip(&idx) {
                let h = l[i];
                if let Some(a) = h.affinity {
                    mask = mask.and(a);
                    match first {
                        None => first = Some(a),
                        Some(f) if f != a => preferred = false,
                        Some(_) => {}
                    }
                }
                if !h.preferred {
                    preferred = false;
                }
            }
            best = chooser.compare(
                best,
                TopologyHint {
                    affinity: Some(mask),
                    preferred,
                },
            );
            let mut k = lists.len();
            loop {
                if k == 0 {
                    break 'outer;
                }
                k -= 1;
                idx[k] += 1;
                if idx[k] < lists[k].len() {
                    break;
                }
                idx[k] = 0;
            }
        }
    }
    let (hint, admit) = finish(policy, numa, best);
    Ok(MergeResult { hint, admit })
}
