//! The kubelet-compatible topology manager: NUMA masks, hints, policy options, NUMA info,
//! manager construction and the hint merge of the four policies.
//!
//! Two merge implementations share one signature and give identical results on every
//! input: [`reference::merge`], a literal transcription of the kubelet's enumeration (cost:
//! the product of the hint-list lengths), and the product's [`merge`], which never
//! enumerates the cross product (see [`fast`] for the algorithm and its complexity).
//!
//! ```
//! use std::collections::BTreeMap;
//! use nodetopo_engine::topologymanager::*;
//!
//! let numa = NumaInfo::new(vec![(0, None), (1, None)], false).unwrap();
//! let hint = |ids: &[usize], preferred| TopologyHint {
//!     affinity: Some(NumaMask::new(ids.iter().copied()).unwrap()),
//!     preferred,
//! };
//! // CPUs fit on node 0 or node 1; the device sits on node 1.
//! let cpu = ResourceHints::Explicit(vec![hint(&[0], true), hint(&[1], true), hint(&[0, 1], false)]);
//! let gpu = ResourceHints::Explicit(vec![hint(&[1], true), hint(&[0, 1], false)]);
//! let providers = vec![
//!     Some(BTreeMap::from([("cpu".to_string(), cpu)])),
//!     None, // the memory manager has no opinion
//!     Some(BTreeMap::from([("example.com/gpu".to_string(), gpu)])),
//! ];
//! let r = merge(TmPolicy::Restricted, &numa, &TmOptions::default(), &providers).unwrap();
//! assert_eq!(r.hint.affinity.unwrap().to_string(), "{1}");
//! assert!(r.hint.preferred && r.admit);
//! assert_eq!(r, reference::merge(TmPolicy::Restricted, &numa, &TmOptions::default(), &providers).unwrap());
//! ```

mod closest;
pub mod error;
pub mod fast;
pub mod hints;
pub(crate) mod lists;
pub mod manager;
pub mod mask;
pub mod numa;
pub mod options;
pub mod policy;
mod reach;
pub mod reference;
pub(crate) mod subsets;

pub use error::TmError;
pub use fast::{merge, merge_with_budget, MERGE_BUDGET};
#[doc(hidden)]
pub use fast::{merge_tuned, ReachStep, Tuning};
pub use hints::{
    HintSource, MergeResult, ProviderHintSet, ProviderHints, ProviderNodes, ResourceHints,
    TOPOLOGY_AFFINITY_ERROR,
};
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
