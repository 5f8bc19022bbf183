//! What the core reads besides pods: the NodeTopology spec, the kubelet's view (PodResources
//! or its CPU manager checkpoint), the kubelet's configuration files and the semantic checks
//! every state file passes first.

pub mod kubelet_actual;
pub mod kubelet_config;
pub mod podresources;
pub mod spec;
pub mod validate;
