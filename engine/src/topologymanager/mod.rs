//! The kubelet-compatible topology manager: NUMA masks, hint providers, merge and admission.

pub mod mask;
pub mod providers;

pub use mask::{MaskError, NumaMask};

/// A NUMA-affinity hint, as hint providers produce and the merge returns: `affinity: None`
/// is the kubelet's nil mask ("no preference"), distinct from an empty mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopologyHint {
    /// The NUMA nodes, or `None` for "don't care".
    pub affinity: Option<NumaMask>,
    /// Whether the provider prefers this hint.
    pub preferred: bool,
}
