//! `NumaMask`: the kubelet's 64-bit NUMA-node bitmask (`topologymanager/bitmask`).
//!
//! Bit `i` is NUMA node id `i`, so ids run from 0 to 63, as in the kubelet.

use std::fmt;

/// Why a mask could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaskError {
    /// A NUMA node id outside 0..=63 (signed, because the kubelet's API takes Go `int`s).
    #[error("NUMA node id {0} is outside the bitmask range 0-63")]
    OutOfRange(i64),
}

/// A set of NUMA node ids (0..=63).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NumaMask(u64);

impl NumaMask {
    /// The empty mask.
    pub const EMPTY: NumaMask = NumaMask(0);

    /// A mask of these ids; any id above 63 is an error and nothing is built.
    pub fn new<I: IntoIterator<Item = usize>>(ids: I) -> Result<Self, MaskError> {
        let mut bits = 0u64;
        for id in ids {
            if id > 63 {
                return Err(MaskError::OutOfRange(i64::try_from(id).unwrap_or(i64::MAX)));
            }
            bits |= 1 << id;
        }
        Ok(NumaMask(bits))
    }

    /// The mask with exactly these raw bits.
    pub const fn from_bits(bits: u64) -> Self {
        NumaMask(bits)
    }

    /// The raw bits (the mask as an unsigned integer, as the kubelet compares them).
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Number of nodes in the mask.
    pub const fn count(self) -> u32 {
        self.0.count_ones()
    }

    /// True when no node is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// True when `id` is set (false for ids outside 0..=63).
    pub const fn is_set(self, id: usize) -> bool {
        id < 64 && self.0 & (1 << id) != 0
    }

    /// Intersection.
    pub const fn and(self, other: NumaMask) -> NumaMask {
        NumaMask(self.0 & other.0)
    }

    /// Union.
    pub const fn or(self, other: NumaMask) -> NumaMask {
        NumaMask(self.0 | other.0)
    }

    /// True when every node of `self` is in `other`.
    pub const fn is_subset_of(self, other: NumaMask) -> bool {
        self.0 & !other.0 == 0
    }

    /// A mask of these signed ids (the kubelet's `NewBitMask`): any id outside 0..=63 is an
    /// error and nothing is built.
    pub fn from_signed<I: IntoIterator<Item = i64>>(ids: I) -> Result<Self, MaskError> {
        NumaMask::EMPTY.with_added(ids)
    }

    /// The kubelet's `Add`: all or nothing. When any id is outside 0..=63 the error names it
    /// and `self` is left unchanged as a whole.
    pub fn with_added<I: IntoIterator<Item = i64>>(self, ids: I) -> Result<Self, MaskError> {
        let mut bits = self.0;
        for id in ids {
            bits |= Self::bit(id)?;
        }
        Ok(NumaMask(bits))
    }

    /// The kubelet's `Remove`: all or nothing, like [`NumaMask::with_added`].
    pub fn with_removed<I: IntoIterator<Item = i64>>(self, ids: I) -> Result<Self, MaskError> {
        let mut bits = self.0;
        for id in ids {
            bits &= !Self::bit(id)?;
        }
        Ok(NumaMask(bits))
    }

    fn bit(id: i64) -> Result<u64, MaskError> {
        if (0..64).contains(&id) {
            Ok(1u64 << id)
        } else {
            Err(MaskError::OutOfRange(id))
        }
    }

    /// The mask of all 64 ids (the kubelet's `Fill`).
    pub const FULL: NumaMask = NumaMask(u64::MAX);

    /// The kubelet's `AnySet`: true when any of `ids` is set (ids outside 0..=63 never are).
    pub fn any_set<I: IntoIterator<Item = i64>>(self, ids: I) -> bool {
        ids.into_iter()
            .any(|id| (0..64).contains(&id) && self.0 & (1u64 << id) != 0)
    }

    /// The kubelet's `IsLessThan`: compares the masks as unsigned integers.
    pub const fn is_less_than(self, other: NumaMask) -> bool {
        self.0 < other.0
    }

    /// Difference: the nodes of `self` that are not in `other`.
    pub const fn minus(self, other: NumaMask) -> NumaMask {
        NumaMask(self.0 & !other.0)
    }

    /// The kubelet's `IsNarrowerThan`: fewer nodes, or as many and a smaller integer value.
    pub fn is_narrower_than(self, other: NumaMask) -> bool {
        if self.count() == other.count() {
            self.0 < other.0
        } else {
            self.count() < other.count()
        }
    }

    /// Node ids in ascending order.
    pub fn ids(self) -> impl Iterator<Item = usize> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            Some(b)
        })
    }
}

/// The kubelet's `IterateBitMasks` over the node ids `bits`: every non-empty subset, by size
/// from 1 to `bits.len()`, and within a size the combinations in lexicographic order of
/// position in `bits` (so `[0,1,2]` gives `{0} {1} {2} {0,1} {0,2} {1,2} {0,1,2}`). Ids must
/// be below 64 (a [`NumaMask`]'s range); `visit` sees 2^n - 1 masks, so callers keep n small.
pub fn iterate_bit_masks(bits: &[usize], mut visit: impl FnMut(NumaMask)) {
    fn rec(bits: &[usize], start: usize, left: usize, acc: u64, visit: &mut dyn FnMut(NumaMask)) {
        if left == 0 {
            visit(NumaMask(acc));
            return;
        }
        for i in start..=bits.len() - left {
            rec(bits, i + 1, left - 1, acc | (1u64 << bits[i]), visit);
        }
    }
    for size in 1..=bits.len() {
        rec(bits, 0, size, 0, &mut visit);
    }
}

/// Every `width`-node subset of `within`, in ascending integer order (which, for masks of
/// one width, is the kubelet's narrowest tie-break order). `visit` returns `false` to stop.
/// Cost: one step per subset visited (Gosper's hack over the compacted positions).
pub fn for_each_subset_of_width(
    within: NumaMask,
    width: u32,
    mut visit: impl FnMut(NumaMask) -> bool,
) {
    let ids: Vec<usize> = within.ids().collect();
    let n = ids.len() as u32;
    if width == 0 || width > n {
        return;
    }
    let scatter = |c: u64| -> NumaMask {
        let mut m = 0u64;
        let mut c = c;
        while c != 0 {
            let p = c.trailing_zeros() as usize;
            m |= 1u64 << ids[p];
            c &= c - 1;
        }
        NumaMask(m)
    };
    let mut c: u64 = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    loop {
        if !visit(scatter(c)) {
            return;
        }
        // Gosper's hack: the next larger integer with the same popcount.
        let u = c & c.wrapping_neg();
        let (v, overflow) = c.overflowing_add(u);
        if overflow || v == 0 {
            return;
        }
        let next = v | (((v ^ c) >> 2) / u);
        if n < 64 && next >> n != 0 {
            return;
        }
        c = next;
    }
}

impl fmt::Debug for NumaMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.ids()).finish()
    }
}

impl fmt::Display for NumaMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<String> = self.ids().map(|i| i.to_string()).collect();
        write!(f, "{{{}}}", ids.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basics() {
        let m = NumaMask::new([0, 3]).unwrap();
        assert_eq!(m.bits(), 9);
        assert_eq!(m.count(), 2);
        assert_eq!(m.ids().collect::<Vec<_>>(), vec![0, 3]);
        assert!(NumaMask::new([1, 2]).unwrap().is_narrower_than(m));
        assert!(NumaMask::new([5]).unwrap().is_narrower_than(m));
        assert_eq!(NumaMask::new([64]), Err(MaskError::OutOfRange(64)));
        assert_eq!(
            NumaMask::EMPTY.with_added([0, 64]),
            Err(MaskError::OutOfRange(64))
        );
        assert!(!m.is_set(64));
        assert_eq!(m.to_string(), "{0,3}");
    }
}

#[cfg(test)]
mod iter_tests {
    use super::*;

    #[test]
    fn subsets_of_width_ascend_and_are_complete() {
        let within = NumaMask::new([1, 3, 4, 6, 9]).unwrap();
        for w in 0..=6 {
            let mut got = Vec::new();
            for_each_subset_of_width(within, w, |m| {
                got.push(m);
                true
            });
            let mut want = Vec::new();
            iterate_bit_masks(&[1, 3, 4, 6, 9], |m| {
                if m.count() == w {
                    want.push(m)
                }
            });
            want.sort();
            assert_eq!(got, want, "width {w}");
        }
        let mut n = 0;
        for_each_subset_of_width(NumaMask::FULL, 64, |m| {
            assert_eq!(m, NumaMask::FULL);
            n += 1;
            true
        });
        assert_eq!(n, 1);
        let mut n = 0;
        for_each_subset_of_width(NumaMask::FULL, 1, |_| {
            n += 1;
            true
        });
        assert_eq!(n, 64);
    }
}
