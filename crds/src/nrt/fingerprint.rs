//! The pod-set fingerprint of github.com/k8stopologyawareschedwg/podfingerprint (`v001`),
//! which the scheduler plugin's reserve cache recomputes from its own pod informer and
//! compares with the `nodeTopologyPodsFingerprint` attribute before it trusts an object.
//!
//! Algorithm (an independent Rust implementation of the reference's documented behaviour):
//! each pod `namespace/name` hashes to `xxh64(name, seed = xxh64(namespace, seed = 0))`; the
//! hashes are sorted ascending, written as little-endian 8-byte words into one XXH64 stream
//! (seed 0), and the digest is printed big-endian in lower-case hex after the prefix
//! `pfp0` and the version `v001`. The result depends only on the set of pods (a pod added
//! twice counts twice, as in the reference), never on their order.
//! `tests/podfingerprint_oracle.rs` compares it with the reference Go module.

use xxhash_rust::xxh64::{xxh64, Xxh64};

/// Prefix of every fingerprint.
pub const PREFIX: &str = "pfp0";
/// Version of the algorithm.
pub const VERSION: &str = "v001";
/// The NRT attribute holding the fingerprint.
pub const ATTRIBUTE: &str = "nodeTopologyPodsFingerprint";
/// The NRT attribute naming which pods the fingerprint covers.
pub const ATTRIBUTE_METHOD: &str = "nodeTopologyPodsFingerprintMethod";
/// Method: every running pod of the node.
pub const METHOD_ALL: &str = "all";
/// Method: only pods that hold exclusive resources.
pub const METHOD_WITH_EXCLUSIVE_RESOURCES: &str = "with-exclusive-resources";

/// Why a fingerprint string does not check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FingerprintError {
    /// Too short, or the wrong prefix.
    #[error("malformed pod fingerprint {0:?}: expected \"pfp0v001\" and at least 8 hex digits")]
    Malformed(String),
    /// Another version of the algorithm.
    #[error("pod fingerprint {0:?} has version {1:?}; this implementation computes \"v001\"")]
    IncompatibleVersion(String, String),
    /// Well formed but for another pod set.
    #[error("pod fingerprint mismatch: got {got:?}, expected {expected:?}")]
    Mismatch {
        /// What this pod set signs to.
        got: String,
        /// What was checked against.
        expected: String,
    },
}

/// An unordered multiset of pods, fingerprinted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodFingerprint {
    hashes: Vec<u64>,
}

impl PodFingerprint {
    /// An empty pod set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the pod `namespace/name`.
    pub fn add(&mut self, namespace: &str, name: &str) {
        let seed = xxh64(namespace.as_bytes(), 0);
        self.hashes.push(xxh64(name.as_bytes(), seed));
    }

    /// Number of pods added.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// True when no pod was added.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// The 64-bit digest of the current set.
    pub fn sum(&self) -> u64 {
        let mut sorted = self.hashes.clone();
        sorted.sort_unstable();
        let mut h = Xxh64::new(0);
        for v in sorted {
            h.update(&v.to_le_bytes());
        }
        h.digest()
    }

    /// The fingerprint string (`pfp0v001` + 16 hex digits).
    pub fn sign(&self) -> String {
        format!("{PREFIX}{VERSION}{:016x}", self.sum())
    }

    /// Checks a fingerprint string against the current set, with the reference's error
    /// classes (malformed, incompatible version, mismatch).
    pub fn check(&self, sign: &str) -> Result<(), FingerprintError> {
        if sign.len() < PREFIX.len() + VERSION.len() + 8 || !sign.is_char_boundary(8) {
            return Err(FingerprintError::Malformed(sign.to_string()));
        }
        if &sign[0..4] != PREFIX {
            return Err(FingerprintError::Malformed(sign.to_string()));
        }
        let version = &sign[4..8];
        if version != VERSION {
            return Err(FingerprintError::IncompatibleVersion(
                sign.to_string(),
                version.to_string(),
            ));
        }
        let got = self.sign();
        if got[8..] != sign[8..] {
            return Err(FingerprintError::Mismatch {
                got,
                expected: sign.to_string(),
            });
        }
        Ok(())
    }
}

impl<'a> FromIterator<(&'a str, &'a str)> for PodFingerprint {
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a str)>>(iter: I) -> Self {
        let mut fp = PodFingerprint::new();
        for (ns, name) in iter {
            fp.add(ns, name);
        }
        fp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh64_reference_vectors() {
        // The XXH64 specification's published values for the empty input and "abc".
        assert_eq!(xxh64(b"", 0), 0xef46db3751d8e999);
        assert_eq!(xxh64(b"abc", 0), 0x44bc2cf5ad770999);
    }

    #[test]
    fn order_does_not_matter_and_content_does() {
        let a: PodFingerprint = [("default", "a"), ("kube-system", "b"), ("x", "c")]
            .into_iter()
            .collect();
        let b: PodFingerprint = [("x", "c"), ("default", "a"), ("kube-system", "b")]
            .into_iter()
            .collect();
        assert_eq!(a.sign(), b.sign());
        let c: PodFingerprint = [("default", "a"), ("kube-system", "b")]
            .into_iter()
            .collect();
        assert_ne!(a.sign(), c.sign());
        // The namespace is a seed, not a prefix: moving a character across changes the sum.
        let d: PodFingerprint = [("ab", "c")].into_iter().collect();
        let e: PodFingerprint = [("a", "bc")].into_iter().collect();
        assert_ne!(d.sign(), e.sign());
        assert_eq!(a.sign().len(), 24);
        assert!(a.sign().starts_with("pfp0v001"));
        println!("fingerprint unit checks: 5 pod sets");
    }

    #[test]
    fn check_classifies_errors() {
        let fp: PodFingerprint = [("ns", "p")].into_iter().collect();
        let good = fp.sign();
        assert_eq!(fp.check(&good), Ok(()));
        assert!(matches!(
            fp.check("pfp0"),
            Err(FingerprintError::Malformed(_))
        ));
        assert!(matches!(
            fp.check("xxxxv0010000000000000000"),
            Err(FingerprintError::Malformed(_))
        ));
        assert!(matches!(
            fp.check("pfp0v0020000000000000000"),
            Err(FingerprintError::IncompatibleVersion(_, _))
        ));
        let other = PodFingerprint::new().sign();
        assert!(matches!(
            fp.check(&other),
            Err(FingerprintError::Mismatch { .. })
        ));
    }
}
