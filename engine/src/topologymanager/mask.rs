//! `NumaMask`: the kubelet's 64-bit NUMA-node bitmask (`topologymanager/bitmask`).
//!
//! Bit `i` is NUMA node id `i`, so ids run from 0 to 63, as in the kubelet.

use std::fmt;

/// Why a mask could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaskError {
    /// A NUMA node id outside 0..=63.
    #[error("NUMA node id {0} is outside the bitmask range 0-63")]
    OutOfRange(usize),
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
                return Err(MaskError::OutOfRange(id));
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
        assert!(!m.is_set(64));
        assert_eq!(m.to_string(), "{0,3}");
    }
}
