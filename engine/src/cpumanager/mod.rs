//! The kubelet-compatible CPU manager: take algorithms, static policy, options, hints, state.
