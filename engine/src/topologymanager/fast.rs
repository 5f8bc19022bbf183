//! The product merge: the kubelet's `Merge` result without enumerating the cross product.
//!
//! # Why it can be fast
//!
//! The kubelet folds every permutation (one hint per resource list) with `compare`, which
//! is a **strict total order** on distinct merged hints: preferred before non-preferred;
//! among preferred, the mask order (narrower, then the lower integer, or with
//! prefer-closest the lower average distance among equal widths, then the lower integer);
//! among non-preferred, the `T` rank of the width (below), then the same mask order. Two
//! distinct masks never tie (the last resort is the integer value), and equal masks with
//! equal preference are the same hint. So "the first permutation seen wins ties" never
//! decides anything: the result is the maximum of the *set* of merged hints, whatever the
//! enumeration order (the kubelet itself visits a provider's resources in Go's random map
//! order). The `topologymanager_corners` test checks this on the reference itself by
//! shuffling providers and hints. That set splits in two:
//!
//! 1. **Preferred merged hints.** A permutation merges to a preferred hint only if all its
//!    hints are preferred and all its non-nil affinities are one and the same raw mask `A`
//!    (nil hints must be preferred too). So the preferred results are `A ∧ machine` for the
//!    masks `A` that every list *accepts* (holds `{A, preferred}` or a preferred nil), plus
//!    the machine itself when every list holds a preferred nil. No product is needed: the
//!    candidates come from one explicit list that lacks a preferred nil (each checked
//!    against every other list's hash set), or, when only implicit sources constrain `A`,
//!    from the masks of the widths every source may prefer
//!    ([`HintSource::preferred_widths`]), visited in the kubelet's mask order (width, then
//!    integer value or KEP-3545 average distance) so the first accepted one wins. The visit
//!    is a depth-first search that drops a branch when an upward-closed source has no hint
//!    within everything the branch could still reach, or a source has no hint containing
//!    the part chosen so far; with prefer-closest and more than 2048 masks of a width it is
//!    a branch and bound over exact distance sums (`closest`).
//! 2. **Otherwise every merged hint is non-preferred** and the winner is the best
//!    *achievable* mask under the kubelet's `T` order (count == T, else the largest count
//!    below T, else the smallest above, ties by the mask order). Achievable masks are
//!    computed in two stages:
//!    * explicit lists: the set of distinct merged masks, list by list (`reach`): pairs of
//!      (mask so far, hint) while that set is small, superset-sum (zeta/Möbius) transforms
//!      over the 2^N subsets once it is cheaper (N <= 20), so the cost is
//!      O(2^N · min(H, N·L)) for H hints in L lists, never the product of the lengths;
//!      without implicit sources the winner is then one pass over that set;
//!    * implicit sources: the candidate masks `M` are visited in the `T` order (width by
//!      width) and the first one an exact oracle accepts wins. The oracle asks "is there a
//!      choice of hints, one per list, each ⊇ M, whose intersection is exactly M": a
//!      depth-first search over the sources whose state is the current intersection `I`
//!      (memoised), branching only over the **minimal** intersections `J ∈ [M, I]` a source
//!      can produce (a smaller intersection always dominates a larger one), found
//!      bottom-up by size so a source that can produce `M` itself costs one check. A
//!      source can produce `J` iff it has a hint in `[J, J ∪ (machine \ I)]`, which for an
//!      upward-closed source ([`HintSource::is_upward_closed`], as CPU and device hints are)
//!      is the single lookup of the upper end; the last source needs only that one check.
//!
//! # Complexity (N NUMA nodes, L lists, H explicit hints, k = the extra nodes a source needs)
//!
//! * Explicit lists only: O(H) for the preferred phase; O(Σ_l min(|R_l|·|list_l|, N·2^N))
//!   for the non-preferred one (|R_l| the distinct masks after l lists, at most 2^N), so at
//!   most O(2^N · min(H, N·L)) on machines of up to 20 nodes: the adversarial class (N
//!   providers, each listing the 2^(N-1) masks containing its node) at N = 16 is 16
//!   transforms of 2^16 entries, tens of milliseconds, where the kubelet would enumerate
//!   2^240 permutations. Beyond 20 nodes only the pair step exists and |R| can reach
//!   min(2^N, ∏|list|): inputs whose intersections are all distinct grow exponentially
//!   there, and the budget below cuts them.
//! * Implicit sources, preferred result (the common case: one width w preferred by every
//!   source): at most C(N, w) lookups per source, N for w = 1; with prefer-closest the
//!   branch and bound visits a few thousand nodes on the benchmarked 64-node machines.
//! * Implicit sources, non-preferred result: per candidate mask, O(L · C(N, k)) lookups
//!   for upward-closed sources; realistic requests (k ≤ 1-2) answer within the first
//!   candidates. The worst case (many candidates rejected, large k, non-monotone sources
//!   without an efficient [`HintSource::any_hint_between`], or prefer-closest distance
//!   matrices without exploitable structure) is exponential, as the problem itself is
//!   (deciding whether a mask is achievable embeds bin packing), but it never depends on the
//!   product of the list lengths.
//!
//! # Budget
//!
//! Every merge counts its work in steps ([`MERGE_BUDGET`], about a third of a second of work):
//! each call into a hint source, each search node, each AND of the pair step, each 16
//! additions of a transform. When the count passes the budget, every source call answers
//! "no hint" and every search stops, and the merge returns
//! [`TmError::MergeBudgetExceeded`] naming the node, list, source and hint counts. So the
//! exponential corners above end in a clear admission error instead of a hung agent; any
//! result returned is exact.
//!
//! The differential tests check this against [`super::reference::merge`] on every policy
//! and option, bit for bit, with each internal path forced in turn ([`Tuning`]).

use std::borrow::Cow;
use std::cell::{Cell, OnceCell};
use std::collections::HashSet;

use super::closest::{self, Prune};
use super::lists::{
    filter_single_numa, filter_single_numa_source, finish, flatten, narrowest_count, Chooser, List,
};
use super::mask::for_each_subset_of_width;
pub use super::reach::ReachStep;
use super::reach::{self, MaskSet};
use super::{
    HintSource, MergeResult, NumaInfo, NumaMask, ProviderHints, TmError, TmOptions, TmPolicy,
    TopologyHint,
};

/// The topology manager's merge for `policy`: the kubelet's result (the same hint and
/// admit flag as [`super::reference::merge`] on every input), without enumerating the cross
/// product. See the module documentation for the algorithm and its complexity.
///
/// Expected flow: flatten the providers (nil or empty maps and nil lists are don't-cares,
/// empty lists unsatisfiable), filter for single-numa-node, then look for the best preferred
/// merged mask and, failing that, the best non-preferred one, then apply the policy.
///
/// Caveats: implicit sources must honour the [`HintSource`] contract (their optional
/// methods must agree with `lookup`); hints naming nodes the machine lacks are clipped as by
/// the kubelet (a hint entirely outside the machine only yields empty masks, which never
/// win). Errors: none today for valid [`NumaInfo`]; the `Result` keeps the signature
/// shared with the reference, which refuses oversized enumerations.
pub fn merge(
    policy: TmPolicy,
    numa: &NumaInfo,
    opts: &TmOptions,
    providers: &[ProviderHints],
) -> Result<MergeResult, TmError> {
    merge_with_budget(policy, numa, opts, providers, MERGE_BUDGET)
}

/// The work budget of one [`merge`], in steps. A step is one call into a hint source, one
/// node of a search, one AND of the explicit-list pair step, or 16
/// additions of its superset-sum step: each roughly 10 ns, so the budget is well under a
/// second of work. Only inputs whose cost grows exponentially (see the module
/// documentation and docs/topology-manager.md) come near it.
pub const MERGE_BUDGET: u64 = 1 << 25;

/// [`merge`] with an explicit work budget: when the merge would need more than `budget`
/// steps it stops and returns [`TmError::MergeBudgetExceeded`], naming the input's sizes,
/// instead of running on. Any result it does return is exact.
pub fn merge_with_budget(
    policy: TmPolicy,
    numa: &NumaInfo,
    opts: &TmOptions,
    providers: &[ProviderHints],
    budget: u64,
) -> Result<MergeResult, TmError> {
    merge_tuned(
        policy,
        numa,
        opts,
        providers,
        Tuning {
            budget,
            ..Tuning::default()
        },
    )
}

/// Internal switches of the product merge, for the differential tests (which force each
/// path on inputs small enough for the reference). Every setting gives the same result.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// The work budget ([`MERGE_BUDGET`] by default).
    pub budget: u64,
    /// Up to this many masks of one width, prefer-closest sorts them all instead of the
    /// branch and bound (0: always branch and bound, when distances allow it).
    pub scan_limit: u64,
    /// How explicit lists are combined.
    pub step: ReachStep,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            budget: MERGE_BUDGET,
            scan_limit: SCAN_LIMIT,
            step: ReachStep::Cheaper,
        }
    }
}

/// [`merge`] with internal switches (see [`Tuning`]); for tests.
#[doc(hidden)]
pub fn merge_tuned(
    policy: TmPolicy,
    numa: &NumaInfo,
    opts: &TmOptions,
    providers: &[ProviderHints],
    tuning: Tuning,
) -> Result<MergeResult, TmError> {
    if policy == TmPolicy::None {
        let (hint, admit) = finish(policy, numa, None);
        return Ok(MergeResult { hint, admit });
    }
    let machine = numa.default_affinity();
    let lists = policy_lists(policy, providers, machine);
    let budget = Budget {
        limit: tuning.budget,
        used: Cell::new(0),
        out: Cell::new(false),
    };
    let (explicit, mut sources, t) = split_lists(&lists, machine, &budget);
    let chooser = Chooser::new(
        numa,
        policy,
        opts.prefer_closest_numa_nodes,
        t.map_or(0, i64::from),
    );
    // The oracle is exact in any source order; putting the sources that need the most nodes
    // last lets the cheap ones settle the intersection first and the demanding one answer
    // with a single check (see `Search::dfs`).
    sources.sort_by_key(|s| s.width);
    if explicit.iter().any(|e| e.hints_empty) {
        // A list left empty by the single-NUMA filter: zero permutations.
        let (hint, admit) = finish(policy, numa, None);
        return Ok(MergeResult { hint, admit });
    }
    let search = Search {
        machine,
        chooser: &chooser,
        numa,
        explicit: &explicit,
        sources: &sources,
        budget: &budget,
        matrix: OnceCell::new(),
        tuning,
    };
    let best = match search.best_preferred() {
        Some(m) => Some(TopologyHint {
            affinity: Some(m),
            preferred: true,
        }),
        None => search.best_non_preferred().map(|m| TopologyHint {
            affinity: Some(m),
            preferred: false,
        }),
    };
    if budget.out.get() {
        return Err(budget_exceeded(&budget, machine, &lists, sources.len()));
    }
    let (hint, admit) = finish(policy, numa, best);
    Ok(MergeResult { hint, admit })
}

/// The providers' hint lists as the merge sees them: flattened (nil or empty maps and nil
/// lists are don't-cares), and under single-numa-node reduced to their one-node preferred
/// hints, which leaves at most N hints per list, so every list becomes explicit.
#[inline]
fn policy_lists<'a>(
    policy: TmPolicy,
    providers: &'a [ProviderHints],
    machine: NumaMask,
) -> Vec<List<'a>> {
    let lists = flatten(providers, machine);
    if policy != TmPolicy::SingleNumaNode {
        return lists;
    }
    lists
        .into_iter()
        .map(|l| match l {
            List::Hints(h) => List::Hints(Cow::Owned(filter_single_numa(&h))),
            List::Source(s) => List::Hints(Cow::Owned(filter_single_numa_source(s, machine))),
        })
        .collect()
}

/// Sorts the lists into explicit ones and implicit sources (in input order) and finds the
/// kubelet's `T`: the largest of the lists' narrowest hint widths (`None` when no list has
/// a non-nil hint).
#[inline]
fn split_lists<'a>(
    lists: &'a [List<'a>],
    machine: NumaMask,
    budget: &'a Budget,
) -> (Vec<Explicit>, Vec<Source<'a>>, Option<u32>) {
    let mut explicit = Vec::new();
    let mut sources = Vec::new();
    let mut t: Option<u32> = None;
    for l in lists {
        let narrowest = match l {
            List::Hints(h) => {
                explicit.push(Explicit::new(h));
                narrowest_count(h)
            }
            List::Source(s) => {
                let width = s.min_width(machine);
                sources.push(Source {
                    s: *s,
                    machine,
                    width: width.unwrap_or(0),
                    monotone: OnceCell::new(),
                    whole: OnceCell::new(),
                    budget,
                });
                width
            }
        };
        t = t.max(narrowest);
    }
    (explicit, sources, t)
}

/// The error of a merge that ran out of `budget`, naming the input's sizes.
#[cold]
fn budget_exceeded(
    budget: &Budget,
    machine: NumaMask,
    lists: &[List<'_>],
    sources: usize,
) -> TmError {
    TmError::MergeBudgetExceeded {
        budget: budget.limit,
        nodes: machine.count(),
        lists: lists.len(),
        sources,
        hints: lists
            .iter()
            .map(|l| match l {
                List::Hints(h) => h.len(),
                List::Source(_) => 0,
            })
            .sum(),
    }
}

/// The merge's work counter. Once exhausted, every source call answers "no hint" and every
/// search gives up, so the merge winds down at once; its result is then discarded.
struct Budget {
    limit: u64,
    used: Cell<u64>,
    out: Cell<bool>,
}

impl Budget {
    /// Spends `units`; false (from now on) once the limit is passed.
    fn spend(&self, units: u64) -> bool {
        if self.out.get() {
            return false;
        }
        let used = self.used.get().saturating_add(units);
        self.used.set(used);
        if used > self.limit {
            self.out.set(true);
        }
        !self.out.get()
    }
}

/// The smallest (as an integer) mask `s ∪ X`, `X` a `r`-subset of `ids[..k]`, accepted by
/// `ok`: decides the highest undecided node first, "absent" before "present", so masks come
/// in increasing integer order; `prune` drops branches whose completions cannot work.
/// `prefix[k]` is the mask of `ids[..k]`.
fn first_in_integer_order(
    ids: &[usize],
    prefix: &[NumaMask],
    k: usize,
    s: NumaMask,
    r: u32,
    prune: &Prune<'_>,
    ok: &mut dyn FnMut(NumaMask) -> bool,
) -> Option<NumaMask> {
    if r == 0 {
        return ok(s).then_some(s);
    }
    if k < r as usize || !(prune.upper_ok)(s.or(prefix[k])) {
        return None;
    }
    first_in_integer_order(ids, prefix, k - 1, s, r, prune, ok).or_else(|| {
        let with = s.or(NumaMask::from_bits(1 << ids[k - 1]));
        if !(prune.lower_ok)(with) {
            return None;
        }
        first_in_integer_order(ids, prefix, k - 1, with, r - 1, prune, ok)
    })
}

/// Up to this many masks of one width, the prefer-closest order is found by sorting them
/// all (cheaper than branch and bound at that size).
const SCAN_LIMIT: u64 = 256;

/// C(n, k), saturating.
fn binomial(n: u32, k: u32) -> u64 {
    let k = k.min(n.saturating_sub(k));
    (0..k).fold(1u64, |acc, i| {
        acc.saturating_mul(u64::from(n - i)) / u64::from(i + 1)
    })
}

/// An explicit list, pre-digested.
struct Explicit {
    /// The list had no hints at all (only after the single-NUMA filter).
    hints_empty: bool,
    /// It holds a preferred nil hint (accepts any common affinity).
    preferred_nil: bool,
    /// Distinct raw affinities of its preferred non-nil hints.
    preferred: Vec<NumaMask>,
    /// The same, for membership tests.
    preferred_set: MaskSet<NumaMask>,
    /// The raw affinities of all its hints, nil as `None`, duplicates kept (the pair step
    /// merges them in its output set, the table step in its indicator).
    members: Vec<Option<NumaMask>>,
}

impl Explicit {
    fn new(hints: &[TopologyHint]) -> Self {
        let mut preferred_set = MaskSet::default();
        let mut preferred = Vec::new();
        let mut preferred_nil = false;
        for h in hints.iter().filter(|h| h.preferred) {
            match h.affinity {
                None => preferred_nil = true,
                Some(a) => {
                    if preferred_set.insert(a) {
                        preferred.push(a)
                    }
                }
            }
        }
        Explicit {
            hints_empty: hints.is_empty(),
            preferred_nil,
            preferred,
            preferred_set,
            members: hints.iter().map(|h| h.affinity).collect(),
        }
    }

    fn accepts(&self, a: NumaMask) -> bool {
        self.preferred_nil || self.preferred_set.contains(&a)
    }
}

/// An implicit source; its monotonicity is asked once, and only if the non-preferred search
/// needs it. Every call into it is charged to the merge's budget.
struct Source<'a> {
    s: &'a dyn HintSource,
    machine: NumaMask,
    /// Its narrowest hint width.
    width: u32,
    monotone: OnceCell<bool>,
    /// Whether the machine itself is a hint (asked once: upward-closed sources answer every
    /// "is there a hint containing this part" with it).
    whole: OnceCell<bool>,
    budget: &'a Budget,
}

impl Source<'_> {
    fn is_monotone(&self) -> bool {
        *self
            .monotone
            .get_or_init(|| self.budget.spend(1) && self.s.is_upward_closed(self.machine))
    }

    fn lookup(&self, m: NumaMask) -> Option<bool> {
        if !self.budget.spend(1) {
            return None;
        }
        self.s.lookup(m)
    }

    /// Is there a hint `a` with `lo ⊆ a ⊆ hi`? (`lo` non-empty, `lo ⊆ hi ⊆ machine`.)
    fn between(&self, lo: NumaMask, hi: NumaMask) -> bool {
        if self.is_monotone() {
            if hi == self.machine {
                return *self
                    .whole
                    .get_or_init(|| self.lookup(self.machine).is_some());
            }
            self.lookup(hi).is_some()
        } else {
            self.budget.spend(1) && self.s.any_hint_between(lo, hi)
        }
    }
}

struct Search<'a> {
    machine: NumaMask,
    chooser: &'a Chooser<'a>,
    numa: &'a NumaInfo,
    explicit: &'a [Explicit],
    sources: &'a [Source<'a>],
    budget: &'a Budget,
    /// The distance matrix for the prefer-closest branch and bound, built on first use
    /// (`None` inside: no exact integer order, sort instead).
    matrix: OnceCell<Option<closest::Matrix>>,
    tuning: Tuning,
}

impl Search<'_> {
    /// Every mask is accepted by every list (as the common preferred affinity).
    fn accepted_by_all(&self, a: NumaMask) -> bool {
        self.explicit.iter().all(|e| e.accepts(a))
            && self
                .sources
                .iter()
                .all(|s| !a.is_empty() && a.is_subset_of(self.machine) && s.lookup(a) == Some(true))
    }

    /// The best mask among `cands` under the preferred (mask-order) comparison.
    fn best_of(&self, cands: impl IntoIterator<Item = NumaMask>) -> Option<NumaMask> {
        let mut best: Option<NumaMask> = None;
        for c in cands {
            if c.is_empty() {
                continue;
            }
            best = match best {
                None => Some(c),
                Some(b) if self.chooser.better_mask(b, c) => Some(c),
                keep => keep,
            };
        }
        best
    }

    /// Phase 1: the best preferred merged mask, if any permutation merges to one.
    fn best_preferred(&self) -> Option<NumaMask> {
        let machine = self.machine;
        let constraining = self
            .explicit
            .iter()
            .filter(|e| !e.preferred_nil)
            .min_by_key(|e| e.preferred.len());
        if let Some(e) = constraining {
            return self.best_of(
                e.preferred
                    .iter()
                    .filter(|a| self.accepted_by_all(**a))
                    .map(|a| a.and(machine)),
            );
        }
        if self.sources.is_empty() {
            // Every list holds a preferred nil: the all-nil permutation gives the machine,
            // and any preferred affinity of any list is accepted by all the others.
            let all = self
                .explicit
                .iter()
                .flat_map(|e| e.preferred.iter().map(|a| a.and(machine)));
            return self.best_of(std::iter::once(machine).chain(all));
        }
        // Only implicit sources constrain A: search the widths all of them may prefer.
        let mut lo = 1;
        let mut hi = machine.count();
        for s in self.sources {
            if !self.budget.spend(1) {
                return None;
            }
            let (l, h) = s.s.preferred_widths(machine)?;
            lo = lo.max(l);
            hi = hi.min(h);
        }
        // A mask all upward-closed sources accept lies below one of their hints: a branch
        // whose every completion lies within `upper` is dead when one of them has no hint
        // there (this keeps wide requests on machines with full low-numbered nodes cheap).
        let upper_ok = |upper: NumaMask| {
            self.sources
                .iter()
                .all(|s| !s.is_monotone() || s.lookup(upper).is_some())
        };
        // A preferred mask is a hint of every source, so each needs a hint containing the
        // part chosen so far (only non-monotone sources can fail this for a non-empty part
        // once the machine itself is a hint).
        let lower_ok = |part: NumaMask| self.sources.iter().all(|s| s.between(part, machine));
        let prune = Prune {
            upper_ok: &upper_ok,
            lower_ok: &lower_ok,
        };
        (lo..=hi).find_map(|w| self.first_at_width(machine, w, &prune, |a| self.accepted_by_all(a)))
    }

    /// The first mask of width `w` within `within`, in the kubelet's mask order, that
    /// satisfies `ok`; `prune` tells which partial choices cannot lead to an accepted mask.
    fn first_at_width(
        &self,
        within: NumaMask,
        w: u32,
        prune: &Prune<'_>,
        mut ok: impl FnMut(NumaMask) -> bool,
    ) -> Option<NumaMask> {
        if self.chooser.is_closest() {
            if binomial(within.count(), w) > self.tuning.scan_limit {
                let matrix = self
                    .matrix
                    .get_or_init(|| closest::Matrix::exact(self.numa, self.machine));
                if let Some(m) = matrix {
                    let stop = |units: u64| !self.budget.spend(units);
                    return closest::best_of_width(m, within, w, prune, &mut ok, &stop);
                }
            }
            // Few masks (or huge distances): sort by the kubelet's own f64 averages.
            let mut all = Vec::new();
            for_each_subset_of_width(within, w, |m| {
                all.push((self.numa.average_distance(m), m));
                true
            });
            all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            return all.into_iter().map(|(_, m)| m).find(|m| ok(*m));
        }
        if binomial(within.count(), w) <= 64 {
            // Few masks: visiting them all in order is cheaper than pruning.
            let mut found = None;
            for_each_subset_of_width(within, w, |m| {
                if ok(m) {
                    found = Some(m);
                }
                found.is_none()
            });
            return found;
        }
        let ids: Vec<usize> = within.ids().collect();
        let prefix: Vec<NumaMask> = (0..=ids.len())
            .map(|k| NumaMask::new(ids[..k].iter().copied()).unwrap_or(NumaMask::EMPTY))
            .collect();
        // Every node of the search asks `upper_ok`: charge it there.
        let upper_ok = |u: NumaMask| self.budget.spend(1) && (prune.upper_ok)(u);
        let charged = Prune {
            upper_ok: &upper_ok,
            lower_ok: prune.lower_ok,
        };
        first_in_integer_order(
            &ids,
            &prefix,
            ids.len(),
            NumaMask::EMPTY,
            w,
            &charged,
            &mut ok,
        )
    }

    /// Phase 2: the best non-preferred merged mask under the `T` order.
    fn best_non_preferred(&self) -> Option<NumaMask> {
        let machine = self.machine;
        // Distinct merged masks of the explicit lists (nil = the machine), empties dropped.
        let lists: Vec<&[Option<NumaMask>]> =
            self.explicit.iter().map(|e| e.members.as_slice()).collect();
        let reach = match reach::build(
            &lists,
            machine,
            &mut |units| self.budget.spend(units),
            self.tuning.step,
        ) {
            Ok(r) => r?,
            Err(()) => {
                // Out of budget or too many distinct masks: report it as the budget.
                self.budget.out.set(true);
                return None;
            }
        };
        if self.sources.is_empty() {
            return self.chooser.best_non_preferred_of(&reach);
        }
        let universe = reach.iter().fold(NumaMask::EMPTY, |u, r| u.or(*r));
        // An achievable mask lies within an explicit intersection and below a hint of every
        // source, and so does every part of it.
        let lower_ok = |part: NumaMask| {
            self.budget.spend(1 + reach.len() as u64 / 16)
                && reach.iter().any(|r| part.is_subset_of(*r))
                && self.sources.iter().all(|s| s.between(part, machine))
        };
        let prune = Prune {
            upper_ok: &|_| true,
            lower_ok: &lower_ok,
        };
        let n = i64::from(universe.count());
        let t = self.chooser.t;
        // The T order over widths: T itself, then below T descending, then above ascending.
        let widths = (t >= 1 && t <= n)
            .then_some(t)
            .into_iter()
            .chain((1..t.min(n + 1)).rev())
            .chain((t.max(0) + 1)..=n);
        for w in widths {
            let w = w as u32;
            let found = self.first_at_width(universe, w, &prune, |m| self.achievable(m, &reach));
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// Whether some permutation merges to exactly `m` (`m` non-empty, within the machine),
    /// given `reach`, the distinct merged masks of the explicit lists.
    fn achievable(&self, m: NumaMask, reach: &[NumaMask]) -> bool {
        if !self.budget.spend(1 + reach.len() as u64 / 16) {
            return false;
        }
        // Only the minimal explicit intersections containing m matter (smaller dominates).
        let mut starts: Vec<NumaMask> = reach
            .iter()
            .copied()
            .filter(|r| m.is_subset_of(*r))
            .collect();
        starts.sort_by_key(|r| r.count());
        let mut minimal: Vec<NumaMask> = Vec::new();
        for r in starts {
            if !minimal.iter().any(|p| p.is_subset_of(r)) {
                minimal.push(r);
            }
        }
        if minimal.is_empty() {
            return false;
        }
        // Every source needs some hint containing m.
        if !self.sources.iter().all(|s| s.between(m, self.machine)) {
            return false;
        }
        // Every node outside m must be excluded by some list.
        for r in self.machine.minus(m).ids() {
            let bit = NumaMask::from_bits(1 << r);
            let by_explicit = minimal.iter().any(|p| !p.is_set(r));
            if !by_explicit
                && !self
                    .sources
                    .iter()
                    .any(|s| s.between(m, self.machine.minus(bit)))
            {
                return false;
            }
        }
        let mut memo = HashSet::new();
        minimal.into_iter().any(|p| self.dfs(0, p, m, &mut memo))
    }

    /// Can sources `j..` bring the intersection `i` (⊇ m) down to exactly `m`?
    fn dfs(
        &self,
        j: usize,
        i: NumaMask,
        m: NumaMask,
        memo: &mut HashSet<(usize, NumaMask)>,
    ) -> bool {
        if i == m {
            // Each remaining source has a hint ⊇ m (checked up front).
            return true;
        }
        if j == self.sources.len() || !memo.insert((j, i)) || !self.budget.spend(1) {
            return false;
        }
        let src = &self.sources[j];
        let outside = self.machine.minus(i);
        if j + 1 == self.sources.len() {
            return src.between(m, m.or(outside));
        }
        // Minimal intersections J ∈ [m, i] this source can produce, bottom-up by size; a
        // source with a hint in [J, J ∪ outside] produces exactly J.
        let free = i.minus(m);
        let mut found: Vec<NumaMask> = Vec::new();
        for k in 0..=free.count() {
            // Masks of one size are never subsets of each other, so each new minimal J can
            // be explored at once (stopping at the first success).
            let level_start = found.len();
            let mut success = false;
            let mut visit = |x: NumaMask, found: &mut Vec<NumaMask>| -> bool {
                let jm = m.or(x);
                if !found[..level_start].iter().any(|f| f.is_subset_of(jm))
                    && src.between(jm, jm.or(outside))
                {
                    found.push(jm);
                    if self.dfs(j + 1, jm, m, memo) {
                        success = true;
                        return false;
                    }
                }
                true
            };
            if k == 0 {
                visit(NumaMask::EMPTY, &mut found);
            } else {
                for_each_subset_of_width(free, k, |x| visit(x, &mut found));
            }
            if success {
                return true;
            }
        }
        false
    }
}
