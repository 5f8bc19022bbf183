//! The distinct merged masks of explicit hint lists (every `a_1 ∧ … ∧ a_L ∧ machine`, one
//! affinity per list), without enumerating the cross product.
//!
//! # Two exact steps, chosen per list by cost
//!
//! The set is built list by list: `R_0 = {machine}`, `R_l = {r ∧ a : r ∈ R_{l-1}, a ∈ list_l}`
//! (a nil affinity is the machine). Each step is done one of two ways:
//!
//! * **pairs** (dynamic programming over distinct masks): `|R_{l-1}| · |list_l|` ANDs into a
//!   hash set. Cheap while the set is small, and the only way beyond [`ZETA_LIMIT`] nodes.
//! * **superset sums** (zeta / Möbius transforms over the 2^N subsets of the machine's
//!   nodes, compressed to positions 0..N). For a family `F` let `ζF(S) = #{f ∈ F : f ⊇ S}`.
//!   For the pairs of `R × A`, `#{(r, a) : r ∧ a ⊇ S} = ζR(S) · ζA(S)`, because `r ∧ a ⊇ S`
//!   iff `r ⊇ S` and `a ⊇ S`. Möbius inversion of that product gives, for every `S`,
//!   `h(S) = #{(r, a) : r ∧ a = S}` exactly, and `R_l = {S : h(S) > 0}`. Three transforms
//!   of N·2^(N-1) additions each: O(N·2^N) per list whatever the list's length.
//!
//!   The counts are kept modulo 2^32. That is exact: `h(S)` counts pairs whose AND is
//!   exactly `S`, and each node outside `S` is in `r` only, in `a` only, or in neither, so
//!   `h(S) <= 3^(N-|S|) <= 3^20 < 2^32` for N <= 20. The transforms are linear, so computing
//!   them modulo 2^32 yields `h(S) mod 2^32 = h(S)`.
//!
//! A step is done by superset sums when N <= [`ZETA_LIMIT`] and the pair count would cost
//! more; once the set is held as a 2^N table it stays one. Total cost:
//! `Σ_l min(|R_{l-1}| · |list_l|, c·N·2^N)`, at most O(2^N · min(H, N·L)) for H hints in
//! L lists, against ∏|list_l| for the kubelet.
//!
//! # Why the set is all the fold needs
//!
//! The kubelet's fold keeps the best merged hint under `compare`, which is a strict total
//! order on distinct (mask, preferred) pairs (see `fast`); so the order in which the
//! permutations are met (and which of several permutations first produced a mask) cannot
//! change the result. Only which masks are reachable matters.

use std::collections::HashSet;

use super::NumaMask;

/// The largest machine (NUMA node count) on which the superset-sum step is used: its tables
/// hold 2^N `u32` counts (4 MiB at 20) and its counts stay exact modulo 2^32 up to 3^20.
pub const ZETA_LIMIT: u32 = 20;

/// The most distinct masks the pair step holds (beyond [`ZETA_LIMIT`] nodes, where no table
/// bounds them): a larger set is refused like an exhausted budget, so an adversarial input
/// cannot make the merge hold more than a few tens of MiB.
pub const MAX_MASKS: usize = 1 << 20;

/// Budget units charged for one AND-and-insert of the pair step; a superset-sum step is
/// charged one unit per [`ZETA_OPS_PER_UNIT`] table additions (both roughly 10 ns).
pub const ZETA_OPS_PER_UNIT: u64 = 16;

/// Positions of the machine's nodes: node id `ids[p]` is bit `p` of a compressed mask.
struct Compress {
    machine: NumaMask,
    /// `Some(lowest id)` when the machine's ids are contiguous (packing is then a shift).
    shift: Option<u32>,
    /// Position of each id of the machine.
    position: [u8; 64],
    ids: Vec<usize>,
}

impl Compress {
    fn new(machine: NumaMask) -> Self {
        let ids: Vec<usize> = machine.ids().collect();
        let mut position = [0u8; 64];
        for (p, &id) in ids.iter().enumerate() {
            position[id] = p as u8;
        }
        let low = machine.bits().trailing_zeros();
        // (Count first: a 64-node machine would overflow the shift.)
        let contiguous =
            machine.count() == 64 || machine.bits() >> low.min(63) == (1u64 << machine.count()) - 1;
        Compress {
            machine,
            shift: contiguous.then_some(low),
            position,
            ids,
        }
    }

    /// The compressed form of `m ∧ machine`.
    fn pack(&self, m: NumaMask) -> usize {
        let m = m.and(self.machine).bits();
        if let Some(low) = self.shift {
            return (m >> low) as usize;
        }
        let mut out = 0usize;
        let mut bits = m;
        while bits != 0 {
            out |= 1 << self.position[bits.trailing_zeros() as usize];
            bits &= bits - 1;
        }
        out
    }

    fn unpack(&self, c: usize) -> NumaMask {
        if let Some(low) = self.shift {
            return NumaMask::from_bits((c as u64) << low);
        }
        let mut bits = 0u64;
        for (p, &id) in self.ids.iter().enumerate() {
            if c >> p & 1 == 1 {
                bits |= 1 << id;
            }
        }
        NumaMask::from_bits(bits)
    }
}

/// One pass of the superset transform over bit `S` (a power of two): `t[i] ±= t[i | S]` for
/// every `i` without that bit. Generic over `S` so the short passes unroll.
fn pass_const<const S: usize>(t: &mut [u32], sub: bool) {
    for chunk in t.chunks_exact_mut(2 * S) {
        let (lo, hi) = chunk.split_at_mut(S);
        for (a, b) in lo.iter_mut().zip(hi.iter()) {
            *a = if sub {
                a.wrapping_sub(*b)
            } else {
                a.wrapping_add(*b)
            };
        }
    }
}

fn pass(t: &mut [u32], step: usize, sub: bool) {
    match step {
        1 => pass_const::<1>(t, sub),
        2 => pass_const::<2>(t, sub),
        4 => pass_const::<4>(t, sub),
        8 => pass_const::<8>(t, sub),
        _ => {
            for chunk in t.chunks_exact_mut(2 * step) {
                let (lo, hi) = chunk.split_at_mut(step);
                for (a, b) in lo.iter_mut().zip(hi.iter()) {
                    *a = if sub {
                        a.wrapping_sub(*b)
                    } else {
                        a.wrapping_add(*b)
                    };
                }
            }
        }
    }
}

/// `t(S) <- Σ_{T ⊇ S} t(T)` (superset zeta), modulo 2^32; `t.len()` a power of two.
fn zeta(t: &mut [u32]) {
    let mut step = 1;
    while step < t.len() {
        pass(t, step, false);
        step *= 2;
    }
}

/// The inverse of [`zeta`] (superset Möbius), modulo 2^32.
fn mobius(t: &mut [u32]) {
    let mut step = 1;
    while step < t.len() {
        pass(t, step, true);
        step *= 2;
    }
}

/// A hasher for masks (one `u64` each): multiply-shift, far cheaper than SipHash for the
/// hundreds of thousands of masks an explicit list can hold. Inputs are not secret and a
/// poor spread only costs time, never correctness.
#[derive(Default, Clone, Copy)]
pub(crate) struct MaskHasher(u64);

impl std::hash::Hasher for MaskHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(23) ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x));
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    fn write_isize(&mut self, x: isize) {
        self.write_u64(x as u64);
    }
}

/// A hash set of masks with [`MaskHasher`].
pub(crate) type MaskSet<T> = HashSet<T, std::hash::BuildHasherDefault<MaskHasher>>;

/// Where the set is held.
enum Set {
    /// Distinct non-empty masks (empty ones never win and stay empty under AND).
    Masks(Vec<NumaMask>),
    /// Indicator over compressed masks (index 0, the empty mask, may be set; it is ignored).
    Table(Vec<u32>),
}

/// How each step of [`build`] is done (the differential tests force each kind).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReachStep {
    /// The cheaper of the two for each list (the product's choice).
    Cheaper,
    /// Always pairs.
    Pairs,
    /// Always superset sums when N <= [`ZETA_LIMIT`] (pairs beyond).
    Table,
}

use ReachStep as Step;

/// The distinct non-empty merged masks of `lists` (each a list of raw affinities, nil as
/// `None`, duplicates allowed), or `Ok(None)` when every permutation merges to the empty mask.
/// `charge(units)` is told the cost of each step before it runs and returns `false` to stop
/// (budget exhausted): then, or when the set outgrows [`MAX_MASKS`], the result is `Err(())`.
pub(crate) fn build(
    lists: &[&[Option<NumaMask>]],
    machine: NumaMask,
    charge: &mut dyn FnMut(u64) -> bool,
    mode: Step,
) -> Result<Option<Vec<NumaMask>>, ()> {
    let n = machine.count();
    let c = Compress::new(machine);
    let size = 1usize << n.min(ZETA_LIMIT);
    let zeta_units = |transforms: u64| {
        transforms * u64::from(n) * (size as u64 / 2) / ZETA_OPS_PER_UNIT + size as u64 / 16
    };
    let mut set = Set::Masks(vec![machine]);
    for list in lists {
        set = match set {
            Set::Masks(reach) => {
                let pair_units = (reach.len() as u64).saturating_mul(list.len() as u64);
                let table = match mode {
                    Step::Cheaper => n <= ZETA_LIMIT && pair_units > zeta_units(3),
                    Step::Pairs => false,
                    Step::Table => n <= ZETA_LIMIT,
                };
                if table {
                    if !charge(zeta_units(3)) {
                        return Err(());
                    }
                    let mut table = vec![0u32; size];
                    for r in &reach {
                        table[c.pack(*r)] = 1;
                    }
                    Set::Table(table_step(table, list, &c, machine))
                } else {
                    if !charge(pair_units) {
                        return Err(());
                    }
                    let mut next =
                        MaskSet::with_capacity_and_hasher(reach.len(), Default::default());
                    for r in &reach {
                        for a in list.iter() {
                            let x = r.and(a.unwrap_or(machine));
                            if !x.is_empty() {
                                next.insert(x);
                            }
                        }
                        if next.len() > MAX_MASKS {
                            return Err(());
                        }
                    }
                    if next.is_empty() {
                        return Ok(None);
                    }
                    Set::Masks(next.into_iter().collect())
                }
            }
            Set::Table(table) => {
                if !charge(zeta_units(3)) {
                    return Err(());
                }
                Set::Table(table_step(table, list, &c, machine))
            }
        };
    }
    let masks = match set {
        Set::Masks(m) => m,
        Set::Table(t) => t
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, v)| **v != 0)
            .map(|(s, _)| c.unpack(s))
            .collect(),
    };
    Ok((!masks.is_empty()).then_some(masks))
}

/// One superset-sum step: the indicator of `{r ∧ a}` from the indicator of `R` and a list.
fn table_step(
    mut reach: Vec<u32>,
    list: &[Option<NumaMask>],
    c: &Compress,
    machine: NumaMask,
) -> Vec<u32> {
    let mut a = vec![0u32; reach.len()];
    for m in list {
        // Distinct raw masks can clip to one compressed mask: count it once.
        a[c.pack(m.unwrap_or(machine))] = 1;
    }
    zeta(&mut reach);
    zeta(&mut a);
    for (x, y) in reach.iter_mut().zip(&a) {
        *x = x.wrapping_mul(*y);
    }
    mobius(&mut reach);
    for x in reach.iter_mut() {
        *x = u32::from(*x != 0);
    }
    reach
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both steps against the literal cross product, on random lists (the pair step on small
    /// sets, the table step forced by a large list).
    #[test]
    fn both_steps_equal_the_cross_product() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for case in 0..300 {
            let machine = NumaMask::from_bits(rnd(1 << 12) | 1 << (rnd(12) + 3));
            let lists: Vec<Vec<Option<NumaMask>>> = (0..1 + rnd(4))
                .map(|_| {
                    let len = if case % 3 == 0 {
                        40 + rnd(40)
                    } else {
                        1 + rnd(5)
                    };
                    let mut l: Vec<Option<NumaMask>> = (0..len)
                        .map(|_| match rnd(10) {
                            0 => None,
                            1 => Some(NumaMask::from_bits(rnd(1 << 16))),
                            _ => Some(NumaMask::from_bits(rnd(1 << 16) & machine.bits())),
                        })
                        .collect();
                    l.sort();
                    l.dedup();
                    l
                })
                .collect();
            let refs: Vec<&[Option<NumaMask>]> = lists.iter().map(|l| l.as_slice()).collect();
            let mut want: HashSet<NumaMask> = HashSet::from([machine]);
            for l in &lists {
                want = want
                    .iter()
                    .flat_map(|r| l.iter().map(move |a| r.and(a.unwrap_or(machine))))
                    .collect();
            }
            want.remove(&NumaMask::EMPTY);
            for mode in [Step::Cheaper, Step::Pairs, Step::Table] {
                let got = build(&refs, machine, &mut |_| true, mode).unwrap();
                let got: HashSet<NumaMask> = got.unwrap_or_default().into_iter().collect();
                assert_eq!(got, want, "case {case}");
            }
            // A budget that refuses everything stops at the first list.
            assert_eq!(
                build(&refs, machine, &mut |_| false, Step::Cheaper),
                Err(())
            );
        }
    }

    /// Machines of 64 nodes and of non-contiguous ids pack and unpack masks faithfully.
    #[test]
    fn compression_round_trips() {
        for machine in [u64::MAX, 0b1011_0110, 1 << 63 | 1, 0xFFFF_0000] {
            let machine = NumaMask::from_bits(machine);
            let c = Compress::new(machine);
            for m in [
                0u64,
                u64::MAX,
                0x8000_0000_0000_0001,
                0b10_0100,
                0xF0F0_F0F0,
            ] {
                let m = NumaMask::from_bits(m);
                let packed = c.pack(m);
                assert_eq!(packed.count_ones(), m.and(machine).count());
                assert_eq!(c.unpack(packed), m.and(machine), "{machine:?} {m:?}");
            }
        }
        let all = NumaMask::FULL;
        let half = NumaMask::from_bits(u64::MAX >> 32);
        let lists: [&[Option<NumaMask>]; 2] = [&[None, Some(half)], &[Some(all.minus(half))]];
        let got = build(&lists, all, &mut |_| true, Step::Cheaper).unwrap();
        assert_eq!(got, Some(vec![all.minus(half)]));
    }
}
