//! The product merge (work in progress on this branch).

use super::{MergeResult, NumaInfo, ProviderHints, TmError, TmOptions, TmPolicy};

/// The topology manager's merge for `policy`: the kubelet's result, without enumerating the
/// cross product.
pub fn merge(
    policy: TmPolicy,
    numa: &NumaInfo,
    opts: &TmOptions,
    providers: &[ProviderHints],
) -> Result<MergeResult, TmError> {
    let _ = (policy, numa, opts, providers);
    todo!("product merge")
}
