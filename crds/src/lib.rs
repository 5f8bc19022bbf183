//! nodetopo-crds: the `nodetopo.io/v1alpha1` API types and their validation rules.
