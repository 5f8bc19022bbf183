//! `CpuSet`: an immutable-by-convention, compact set of logical CPU ids with the
//! kernel/kubelet list syntax (`0-3,8,10-11`).
//!
//! Semantics follow `k8s.io/utils/cpuset`: the empty string is the empty set, elements are
//! single ids or inclusive ranges `a-b` with `a <= b`, whitespace around elements is allowed,
//! printing is canonical (sorted, ranges merged). Bad strings are errors that name the bad
//! token; nothing here panics on input.

use std::fmt;
use std::str::FromStr;

/// The largest CPU id accepted by the parsers (2^20 - 1). Linux's `NR_CPUS` tops out at
/// 8192 today; the cap keeps a hostile string such as `0-4000000000` from allocating gigabytes.
pub const MAX_CPU_ID: usize = (1 << 20) - 1;

const WORD: usize = 64;

/// A set of logical CPU ids, stored as a bitset. Iteration is in ascending id order.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    /// Bit `i % 64` of word `i / 64` is CPU `i`. Invariant: no trailing zero words, so that
    /// derived equality and hashing are set equality.
    words: Vec<u64>,
}

/// Why a CPU list or mask string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetParseError {
    /// A list element is not a number or a range.
    #[error("invalid cpuset element {token:?} in {input:?}: {reason}")]
    BadToken {
        /// The whole input.
        input: String,
        /// The offending element.
        token: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A hexadecimal mask word is malformed.
    #[error("invalid cpu mask word {token:?} in {input:?}: {reason}")]
    BadMaskWord {
        /// The whole input.
        input: String,
        /// The offending word.
        token: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        Self { words: Vec::new() }
    }

    /// Builds a set from ids. Ids above [`MAX_CPU_ID`] cannot be represented and are left
    /// out (see [`CpuSet::insert`]); callers holding untrusted ids use
    /// [`CpuSet::try_from_ids`], which reports them, and text goes through [`CpuSet::parse`].
    pub fn from_ids<I: IntoIterator<Item = usize>>(ids: I) -> Self {
        let mut s = Self::new();
        for id in ids {
            s.insert(id);
        }
        s
    }

    /// Builds a set from ids, refusing the first id above [`MAX_CPU_ID`] (returned as the
    /// error), so that no input can make a set allocate more than 128 KiB.
    pub fn try_from_ids<I: IntoIterator<Item = usize>>(ids: I) -> Result<Self, usize> {
        let mut s = Self::new();
        for id in ids {
            if id > MAX_CPU_ID {
                return Err(id);
            }
            s.insert(id);
        }
        Ok(s)
    }

    /// Parses the kernel/kubelet list syntax, e.g. `"0-3,8,10-11"`. Surrounding whitespace
    /// (and NUL padding, which some sysfs files carry) is ignored; `""` is the empty set.
    pub fn parse(input: &str) -> Result<Self, CpuSetParseError> {
        let trimmed = input.trim_matches(|c: char| c.is_whitespace() || c == '\0');
        let mut set = Self::new();
        if trimmed.is_empty() {
            return Ok(set);
        }
        let bad = |token: &str, reason: String| CpuSetParseError::BadToken {
            input: input.to_string(),
            token: token.to_string(),
            reason,
        };
        for raw in trimmed.split(',') {
            let token = raw.trim();
            if token.is_empty() {
                return Err(bad(raw, "empty element".into()));
            }
            let (lo, hi) = match token.split_once('-') {
                Some((a, b)) => (parse_id(a.trim()), parse_id(b.trim())),
                None => {
                    let v = parse_id(token);
                    (v.clone(), v)
                }
            };
            let lo = lo.map_err(|r| bad(token, r))?;
            let hi = hi.map_err(|r| bad(token, r))?;
            if lo > hi {
                return Err(bad(
                    token,
                    format!("range start {lo} is greater than its end {hi}"),
                ));
            }
            set.insert_range(lo, hi);
        }
        Ok(set)
    }

    /// Parses a sysfs hexadecimal CPU mask: comma-separated 32-bit words, most significant
    /// first (`"00000000,0000ffff"`). Words may be shorter than 8 digits; NUL and whitespace
    /// padding is ignored; an empty string is the empty set.
    pub fn parse_hex_mask(input: &str) -> Result<Self, CpuSetParseError> {
        let trimmed = input.trim_matches(|c: char| c.is_whitespace() || c == '\0');
        let mut set = Self::new();
        if trimmed.is_empty() {
            return Ok(set);
        }
        let words: Vec<&str> = trimmed.split(',').collect();
        if words.len() * 32 > MAX_CPU_ID + 1 {
            return Err(CpuSetParseError::BadMaskWord {
                input: input.to_string(),
                token: String::new(),
                reason: format!(
                    "mask has {} words, more than the supported maximum",
                    words.len()
                ),
            });
        }
        for (pos, w) in words.iter().rev().enumerate() {
            let token = w.trim();
            let bad = |reason: String| CpuSetParseError::BadMaskWord {
                input: input.to_string(),
                token: token.to_string(),
                reason,
            };
            if token.is_empty() || token.len() > 8 {
                return Err(bad("expected 1 to 8 hexadecimal digits".into()));
            }
            let v = u32::from_str_radix(token, 16).map_err(|e| bad(e.to_string()))?;
            for bit in 0..32 {
                if v & (1 << bit) != 0 {
                    set.insert(pos * 32 + bit);
                }
            }
        }
        Ok(set)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True when the set holds no CPU.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// True when `id` is in the set.
    pub fn contains(&self, id: usize) -> bool {
        self.words
            .get(id / WORD)
            .is_some_and(|w| w & (1u64 << (id % WORD)) != 0)
    }

    /// Adds one CPU. Ids above [`MAX_CPU_ID`] are ignored: every constructor is capped, so
    /// that no id (from any input) can make a set allocate more than 128 KiB. The parsers and
    /// [`crate::topology::CpuTopology::new`] refuse such ids with an error first.
    pub fn insert(&mut self, id: usize) {
        if id > MAX_CPU_ID {
            return;
        }
        let w = id / WORD;
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1u64 << (id % WORD);
    }

    /// Adds the inclusive range `lo..=hi` (capped at [`MAX_CPU_ID`] like [`CpuSet::insert`]).
    pub fn insert_range(&mut self, lo: usize, hi: usize) {
        let hi = hi.min(MAX_CPU_ID);
        if lo > hi {
            return;
        }
        let last = hi / WORD;
        if self.words.len() <= last {
            self.words.resize(last + 1, 0);
        }
        for w in lo / WORD..=last {
            let from = if w == lo / WORD { lo % WORD } else { 0 };
            let to = if w == last { hi % WORD } else { WORD - 1 };
            let span = to - from + 1;
            let bits = if span == WORD {
                u64::MAX
            } else {
                ((1u64 << span) - 1) << from
            };
            self.words[w] |= bits;
        }
    }

    /// Removes one CPU (no-op when absent).
    pub fn remove(&mut self, id: usize) {
        if let Some(w) = self.words.get_mut(id / WORD) {
            *w &= !(1u64 << (id % WORD));
        }
        self.trim();
    }

    /// Set union.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let words = (0..n)
            .map(|i| self.word(i) | other.word(i))
            .collect::<Vec<_>>();
        CpuSet::from_words(words)
    }

    /// Set intersection.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().min(other.words.len());
        CpuSet::from_words((0..n).map(|i| self.word(i) & other.word(i)).collect())
    }

    /// Set difference: the CPUs of `self` that are not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet::from_words(
            (0..self.words.len())
                .map(|i| self.word(i) & !other.word(i))
                .collect(),
        )
    }

    /// True when every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        (0..self.words.len()).all(|i| self.word(i) & !other.word(i) == 0)
    }

    /// True when the two sets share no CPU.
    pub fn is_disjoint(&self, other: &CpuSet) -> bool {
        (0..self.words.len().min(other.words.len())).all(|i| self.word(i) & other.word(i) == 0)
    }

    /// The lowest id, if any.
    pub fn first(&self) -> Option<usize> {
        self.iter().next()
    }

    /// The highest id, if any.
    pub fn last(&self) -> Option<usize> {
        let (i, w) = self
            .words
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)?;
        Some(i * WORD + (WORD - 1 - w.leading_zeros() as usize))
    }

    /// Ids in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            words: &self.words,
            word: 0,
            bits: self.words.first().copied().unwrap_or(0),
        }
    }

    /// Ids in ascending order, collected.
    pub fn to_vec(&self) -> Vec<usize> {
        self.iter().collect()
    }

    /// The set restricted to its `n` lowest ids.
    pub fn first_n(&self, n: usize) -> CpuSet {
        CpuSet::from_ids(self.iter().take(n))
    }

    fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    fn from_words(words: Vec<u64>) -> CpuSet {
        let mut s = CpuSet { words };
        s.trim();
        s
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }
}

fn parse_id(s: &str) -> Result<usize, String> {
    if s.is_empty() {
        return Err("missing number".into());
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a non-negative integer"));
    }
    let v: usize = s.parse().map_err(|_| format!("{s:?} is out of range"))?;
    if v > MAX_CPU_ID {
        return Err(format!(
            "cpu id {v} exceeds the supported maximum {MAX_CPU_ID}"
        ));
    }
    Ok(v)
}

/// Ascending iterator over a [`CpuSet`].
pub struct Iter<'a> {
    words: &'a [u64],
    word: usize,
    bits: u64,
}

impl Iterator for Iter<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        loop {
            if self.bits != 0 {
                let b = self.bits.trailing_zeros() as usize;
                self.bits &= self.bits - 1;
                return Some(self.word * WORD + b);
            }
            self.word += 1;
            self.bits = *self.words.get(self.word)?;
        }
    }
}

impl<'a> IntoIterator for &'a CpuSet {
    type Item = usize;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        CpuSet::from_ids(iter)
    }
}

impl FromStr for CpuSet {
    type Err = CpuSetParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CpuSet::parse(s)
    }
}

/// Canonical list syntax: ascending, ranges of two or more consecutive ids merged (`0-3,8`).
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut it = self.iter().peekable();
        let mut first = true;
        while let Some(lo) = it.next() {
            let mut hi = lo;
            while it.peek() == Some(&(hi + 1)) {
                hi += 1;
                it.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        CpuSet::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_constructor_is_capped() {
        assert_eq!(CpuSet::try_from_ids([1, 4_000_000_000]), Err(4_000_000_000));
        assert_eq!(
            CpuSet::try_from_ids([1, MAX_CPU_ID]).map(|s| s.len()),
            Ok(2)
        );
        // The infallible constructors leave unrepresentable ids out instead of allocating
        // half a gigabyte.
        assert_eq!(CpuSet::from_ids([1, 4_000_000_000]).to_string(), "1");
        let mut s = CpuSet::new();
        s.insert_range(MAX_CPU_ID - 1, usize::MAX);
        assert_eq!(s.len(), 2);
        s.insert(usize::MAX);
        assert_eq!(s.last(), Some(MAX_CPU_ID));
    }

    #[test]
    fn parses_and_prints_canonically() {
        let s = CpuSet::parse(" 8,0-3, 10-11,2 ").unwrap();
        assert_eq!(s.to_string(), "0-3,8,10-11");
        assert_eq!(s.len(), 7);
        assert_eq!(CpuSet::parse("").unwrap(), CpuSet::new());
        assert_eq!(CpuSet::parse("5-5").unwrap().to_string(), "5");
        assert_eq!(CpuSet::parse("0-1\n\0").unwrap().to_string(), "0-1");
        assert_eq!(CpuSet::parse("63-65").unwrap().to_vec(), vec![63, 64, 65]);
    }

    #[test]
    fn errors_name_the_bad_token() {
        let e = CpuSet::parse("0-3,x,5").unwrap_err().to_string();
        assert!(e.contains("\"x\""), "{e}");
        let e = CpuSet::parse("4-2").unwrap_err().to_string();
        assert!(e.contains("\"4-2\"") && e.contains("greater"), "{e}");
        assert!(CpuSet::parse("1,,2").is_err());
        assert!(CpuSet::parse("-1").is_err());
        assert!(CpuSet::parse("1-").is_err());
        assert!(CpuSet::parse("0-4000000000")
            .unwrap_err()
            .to_string()
            .contains("maximum"));
        assert!(CpuSet::parse("99999999999999999999999").is_err());
    }

    #[test]
    fn hex_masks() {
        assert_eq!(
            CpuSet::parse_hex_mask("00000000,0000000f\n")
                .unwrap()
                .to_string(),
            "0-3"
        );
        assert_eq!(
            CpuSet::parse_hex_mask("1,00000001").unwrap().to_string(),
            "0,32"
        );
        assert_eq!(CpuSet::parse_hex_mask("ff\0").unwrap().to_string(), "0-7");
        assert!(CpuSet::parse_hex_mask("zz").is_err());
        assert!(CpuSet::parse_hex_mask("1ffffffff").is_err());
    }

    #[test]
    fn algebra() {
        let a = CpuSet::parse("0-7").unwrap();
        let b = CpuSet::parse("4-11,100").unwrap();
        assert_eq!(a.union(&b).to_string(), "0-11,100");
        assert_eq!(a.intersection(&b).to_string(), "4-7");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert_eq!(b.difference(&a).to_string(), "8-11,100");
        assert!(CpuSet::parse("1-2").unwrap().is_subset(&a));
        assert!(!b.is_subset(&a));
        assert!(a.is_disjoint(&CpuSet::parse("8,200").unwrap()));
        assert_eq!(b.first(), Some(4));
        assert_eq!(b.last(), Some(100));
        // Differences that empty the high words keep equality exact.
        assert_eq!(
            b.difference(&CpuSet::parse("100").unwrap()),
            CpuSet::parse("4-11").unwrap()
        );
    }

    #[test]
    fn serde_round_trip() {
        let s = CpuSet::parse("0-3,8").unwrap();
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(j, "\"0-3,8\"");
        assert_eq!(serde_json::from_str::<CpuSet>(&j).unwrap(), s);
        assert!(serde_json::from_str::<CpuSet>("\"a\"").is_err());
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(s in ".{0,40}") {
            let _ = CpuSet::parse(&s);
            let _ = CpuSet::parse_hex_mask(&s);
        }

        #[test]
        fn print_parse_round_trip(ids in proptest::collection::btree_set(0usize..600, 0..80)) {
            let s = CpuSet::from_ids(ids.iter().copied());
            prop_assert_eq!(s.to_vec(), ids.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(CpuSet::parse(&s.to_string()).unwrap(), s.clone());
            prop_assert_eq!(s.len(), ids.len());
        }

        #[test]
        fn algebra_matches_btreeset(
            a in proptest::collection::btree_set(0usize..300, 0..60),
            b in proptest::collection::btree_set(0usize..300, 0..60),
        ) {
            let (sa, sb) = (CpuSet::from_ids(a.iter().copied()), CpuSet::from_ids(b.iter().copied()));
            prop_assert_eq!(sa.union(&sb).to_vec(), a.union(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.intersection(&sb).to_vec(), a.intersection(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.difference(&sb).to_vec(), a.difference(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.is_subset(&sb), a.is_subset(&b));
            prop_assert_eq!(sa.is_disjoint(&sb), a.is_disjoint(&b));
        }
    }
}
