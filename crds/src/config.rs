//! The node configuration both kinds carry: the kubelet's CPU manager and topology manager
//! settings, with the kubelet's names. `NodeResourcePolicy.spec` states them as intent,
//! `NodeTopology.spec` as the effective configuration of one node; `plan -o json` prints the
//! same shapes. The types are the engine's ([`nodetopo_engine::spec`]), re-exported here with
//! their JSON schema and CEL rules.

pub use nodetopo_engine::spec::{
    CpuManagerConfig, CpuManagerPolicy, TopologyManagerConfig, TopologyManagerPolicy,
    TopologyManagerScope,
};
