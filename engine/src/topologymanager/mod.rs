//! The kubelet-compatible topology manager: NUMA masks, hints, policy options, NUMA info,
//! manager construction and the hint merge of the four policies.
//!
//! Two merge implementations share one signature and give identical results on every
//! input: [`reference::merge`], a literal transcription of the kubelet's enumeration (cost:
//! the product of the hint-list lengths), and the product's [`merge`], which never
//! enumerates the cross product (see [`fast`] for the algorithm and its complexity).

pub mod error;
pub mod fast;
pub mod hints;
pub(crate) mod lists;
pub mod manager;
pub mod mask;
pub mod numa;
pub mod options;
pub mod policy;
pub mod providers;
pub mod reference;

pub use error::TmError;
pub use fast::merge;
pub use hints::{HintSource, MergeResult, ProviderHints, ResourceHints, TOPOLOGY_AFFINITY_ERROR};
pub use manager::ManagerConfig;
pub use mask::{MaskError, NumaMask};
pub use numa::NumaInfo;
pub use options::TmOptions;
pub use policy::{TmPolicy, TmScope};

/// A NUMA-affinity hint, as hint providers produce and the merge returns: `affinity: None`
/// is the kubelet's nil mask ("no preference"), distinct from an empty mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopologyHint {
    /// The NUMA nodes, or `None` for "don't care".
    pub affinity: Option<NumaMask>,
    /// Whether the provider prefers this hint.
    pub preferred: bool,
}
