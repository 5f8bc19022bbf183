//! The topology-manager policy and scope names.

use std::fmt;
use std::str::FromStr;

use super::TmError;

/// A topology-manager policy (kubelet `--topology-manager-policy`); also the spec's
/// `topologyManager.policy` ([`crate::spec::TopologyManagerPolicy`]), serialized by the
/// kubelet's name.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum TmPolicy {
    /// `none`: no alignment; every hint is ignored.
    #[default]
    #[serde(rename = "none")]
    None,
    /// `best-effort`: pick the best merged hint, always admit.
    #[serde(rename = "best-effort")]
    BestEffort,
    /// `restricted`: as best-effort, but reject non-preferred results.
    #[serde(rename = "restricted")]
    Restricted,
    /// `single-numa-node`: only single-NUMA-node preferred hints count; reject otherwise.
    #[serde(rename = "single-numa-node")]
    SingleNumaNode,
}

impl TmPolicy {
    /// The kubelet's name of the policy.
    pub const fn name(self) -> &'static str {
        match self {
            TmPolicy::None => "none",
            TmPolicy::BestEffort => "best-effort",
            TmPolicy::Restricted => "restricted",
            TmPolicy::SingleNumaNode => "single-numa-node",
        }
    }

    /// All policies, in the order of their names above.
    pub const ALL: [TmPolicy; 4] = [
        TmPolicy::None,
        TmPolicy::BestEffort,
        TmPolicy::Restricted,
        TmPolicy::SingleNumaNode,
    ];
}

impl FromStr for TmPolicy {
    type Err = TmError;
    fn from_str(s: &str) -> Result<Self, TmError> {
        TmPolicy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| TmError::UnknownPolicy(s.to_string()))
    }
}

impl fmt::Display for TmPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A topology-manager scope (kubelet `--topology-manager-scope`); also the spec's
/// `topologyManager.scope` ([`crate::spec::TopologyManagerScope`]).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum TmScope {
    /// `container` (the default): one merge per container.
    #[default]
    #[serde(rename = "container")]
    Container,
    /// `pod`: one merge for the whole pod.
    #[serde(rename = "pod")]
    Pod,
}

impl TmScope {
    /// The kubelet's name of the scope.
    pub const fn name(self) -> &'static str {
        match self {
            TmScope::Container => "container",
            TmScope::Pod => "pod",
        }
    }
}

impl FromStr for TmScope {
    type Err = TmError;
    fn from_str(s: &str) -> Result<Self, TmError> {
        match s {
            "container" => Ok(TmScope::Container),
            "pod" => Ok(TmScope::Pod),
            _ => Err(TmError::UnknownScope(s.to_string())),
        }
    }
}

impl fmt::Display for TmScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
