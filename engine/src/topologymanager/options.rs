//! Topology-manager policy options (kubelet `--topology-manager-policy-options`).
//!
//! Parsing follows the kubelet's `NewPolicyOptions`: every key must be a known option whose
//! maturity level is enabled by its feature gate, `prefer-closest-numa-nodes` is a Go
//! `ParseBool`, `max-allowable-numa-nodes` a Go `Atoi` of at least 8. The kubelet walks a Go
//! map (random order), so with several bad keys it reports any one of them; we walk the map in
//! key order and report the first, deterministically.

use std::collections::BTreeMap;

use super::TmError;
use crate::options::{go_parse_bool, Maturity, OptionKind, OptionTable, PolicyOption};

/// Name of the KEP-3545 option.
pub const PREFER_CLOSEST_NUMA_NODES: &str = "prefer-closest-numa-nodes";
/// Name of the NUMA-count limit option.
pub const MAX_ALLOWABLE_NUMA_NODES: &str = "max-allowable-numa-nodes";
/// The kubelet's default (and minimum) `max-allowable-numa-nodes`.
pub const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: usize = 8;

/// Parsed topology-manager policy options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmOptions {
    /// KEP-3545: among equally wide masks prefer the lowest average NUMA distance.
    pub prefer_closest_numa_nodes: bool,
    /// The largest NUMA-node count the manager accepts (policy `none` excepted). It never
    /// changes a merge result.
    pub max_allowable_numa_nodes: usize,
}

impl Default for TmOptions {
    fn default() -> Self {
        TmOptions {
            prefer_closest_numa_nodes: false,
            max_allowable_numa_nodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
        }
    }
}

/// Maturity level of a policy option, which decides the feature gate it needs.
pub use crate::options::Maturity as OptionLevel;

/// The two feature gates that govern option availability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionGates {
    /// `TopologyManagerPolicyAlphaOptions`.
    pub alpha: bool,
    /// `TopologyManagerPolicyBetaOptions`.
    pub beta: bool,
}

impl Default for OptionGates {
    /// The kubelet defaults: alpha off, beta on.
    fn default() -> Self {
        OptionGates {
            alpha: false,
            beta: true,
        }
    }
}

/// The options this implementation knows, with their level in the kubelet revision of the
/// vendored vectors (prefer-closest GA, max-allowable beta; the vectors' README notes that
/// the newest branch, and k8s.io/kubernetes v1.37.2, have both GA). The vectors win: a
/// kubelet of that revision refuses max-allowable-numa-nodes with the beta gate off.
pub const TM_OPTIONS: [PolicyOption; 2] = [
    PolicyOption {
        name: PREFER_CLOSEST_NUMA_NODES,
        kind: OptionKind::Bool,
        maturity: Maturity::Ga,
        summary: "among equally wide masks prefer the lowest average NUMA distance (KEP-3545)",
    },
    PolicyOption {
        name: MAX_ALLOWABLE_NUMA_NODES,
        kind: OptionKind::Count {
            min: DEFAULT_MAX_ALLOWABLE_NUMA_NODES as u32,
        },
        maturity: Maturity::Beta,
        summary: "the largest NUMA-node count the topology manager accepts (default 8)",
    },
];

/// The topology manager's option table: any policy takes them, none conflict.
pub const TM_OPTION_TABLE: OptionTable = OptionTable {
    field: "topologyManagerPolicyOptions",
    gate_prefix: "TopologyManagerPolicy",
    needs_policy: None,
    options: &TM_OPTIONS,
    conflicts: &[],
};

/// The kubelet's `CheckPolicyOptionAvailable`; `extra` registers additional options (the
/// kubelet's tests inject fake alpha/beta options this way).
pub fn check_option_available(
    name: &str,
    gates: OptionGates,
    extra: &[(&str, OptionLevel)],
) -> Result<(), TmError> {
    let level = TM_OPTIONS
        .iter()
        .map(|o| (o.name, o.maturity))
        .chain(extra.iter().copied())
        .find(|(n, _)| *n == name)
        .map(|(_, l)| l)
        .ok_or_else(|| TmError::UnknownOption(name.to_string()))?;
    let (enabled, label) = match level {
        OptionLevel::Alpha => (gates.alpha, "alpha"),
        OptionLevel::Beta => (gates.beta, "beta"),
        OptionLevel::Ga => (true, ""),
    };
    if enabled {
        Ok(())
    } else {
        Err(TmError::OptionNotEnabled {
            level: label,
            option: name.to_string(),
        })
    }
}

impl TmOptions {
    /// Parses the option map with the kubelet's default feature gates.
    pub fn from_map(m: &BTreeMap<String, String>) -> Result<Self, TmError> {
        Self::from_map_with(m, OptionGates::default(), &[])
    }

    /// Parses the option map under explicit feature gates, with `extra` options registered
    /// (as the kubelet's `NewPolicyOptions`; `extra` options have no parser and fail with
    /// [`TmError::UnsupportedOption`] once available).
    pub fn from_map_with(
        m: &BTreeMap<String, String>,
        gates: OptionGates,
        extra: &[(&str, OptionLevel)],
    ) -> Result<Self, TmError> {
        let mut opts = TmOptions::default();
        for (name, value) in m {
            check_option_available(name, gates, extra)?;
            match name.as_str() {
                PREFER_CLOSEST_NUMA_NODES => {
                    opts.prefer_closest_numa_nodes =
                        go_parse_bool(value).ok_or_else(|| TmError::BadBool {
                            option: name.clone(),
                            value: value.clone(),
                        })?;
                }
                MAX_ALLOWABLE_NUMA_NODES => {
                    let n = go_atoi(value).map_err(|reason| TmError::NotInteger {
                        option: name.clone(),
                        value: value.clone(),
                        reason,
                    })?;
                    let minimum = DEFAULT_MAX_ALLOWABLE_NUMA_NODES;
                    if n < minimum as i64 {
                        return Err(TmError::BelowMinimum {
                            option: name.clone(),
                            minimum,
                        });
                    }
                    // Above 8 the kubelet only logs a warning; we accept it the same way.
                    opts.max_allowable_numa_nodes = usize::try_from(n).unwrap_or(usize::MAX);
                }
                _ => {
                    return Err(TmError::UnsupportedOption {
                        option: name.clone(),
                        value: value.clone(),
                    })
                }
            }
        }
        Ok(opts)
    }
}

impl TmOptions {
    /// The options as the kubelet's string map: only what differs from the kubelet's
    /// defaults (`prefer-closest-numa-nodes` when on, `max-allowable-numa-nodes` when not 8).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        let Self {
            prefer_closest_numa_nodes,
            max_allowable_numa_nodes,
        } = *self;
        let mut m = BTreeMap::new();
        if prefer_closest_numa_nodes {
            m.insert(PREFER_CLOSEST_NUMA_NODES.to_string(), "true".to_string());
        }
        if max_allowable_numa_nodes != DEFAULT_MAX_ALLOWABLE_NUMA_NODES {
            m.insert(
                MAX_ALLOWABLE_NUMA_NODES.to_string(),
                max_allowable_numa_nodes.to_string(),
            );
        }
        m
    }
}

/// Go's `strconv.Atoi` on a 64-bit platform: optional sign, decimal digits only.
fn go_atoi(s: &str) -> Result<i64, &'static str> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("invalid syntax");
    }
    s.parse::<i64>().map_err(|_| "value out of range")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_like_the_kubelet() {
        let o = TmOptions::from_map(&map(&[
            ("prefer-closest-numa-nodes", "T"),
            ("max-allowable-numa-nodes", "+16"),
        ]))
        .unwrap();
        assert!(o.prefer_closest_numa_nodes);
        assert_eq!(o.max_allowable_numa_nodes, 16);
        let e = TmOptions::from_map(&map(&[(
            "max-allowable-numa-nodes",
            "99999999999999999999",
        )]))
        .unwrap_err();
        assert!(e.to_string().contains("value out of range"), "{e}");
        let e = TmOptions::from_map(&map(&[("max-allowable-numa-nodes", "-3")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the minimum value of \"max-allowable-numa-nodes\" should not be less than 8"
        );
        let e = TmOptions::from_map(&map(&[("prefer-closest-numa-nodes", "yes")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad value for option \"prefer-closest-numa-nodes\": strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
        let e = TmOptions::from_map(&map(&[("x", "1")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown Topology Manager Policy option: \"x\""
        );
    }
}
