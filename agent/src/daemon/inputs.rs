//! What the core reads: pods (from the API object or from YAML, into the core's records), the
//! NodeTopology spec, the kubelet's view (PodResources or its CPU manager checkpoint), the
//! kubelet's configuration files and the semantic checks every state file passes first; and
//! when local mode reads a pod file (the settle rule).

pub mod kubelet_actual;
pub mod kubelet_config;
pub mod podresources;
pub mod pods;
pub mod settle;
pub mod spec;
pub mod validate;
